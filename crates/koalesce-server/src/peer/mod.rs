//! Live federation (issue 14, seed 002): koalesce servers as peers whose grid schedulers
//! migrate queued jobs to where they are expected to finish soonest, with the same policy code
//! the simulator runs ([`koalesce_core::federation`]).
//!
//! **Architecture (002 §II).** A job submitted to `POST /api/v1/grid/jobs` enters this server's
//! *grid queue* (GQ, durable in `DIR/federation.db`, [`journal`]). The grid scheduler (`gs`)
//! takes each job in turn: its local AWT comes from simulating the server's local scheduler
//! (the core, seen as one compute server by [`koalesce_core::federation::live`]); below φ the
//! job goes to the local queue (the core); otherwise (S-I, §III-A1) every available peer is
//! asked for its ATT and RU (`POST /api/v1/peer/offer`), and
//! [`koalesce_core::federation::policy::sender_initiated`] decides. Once in a core the job is
//! scheduled there by KOALA's placement and never migrates again.
//!
//! **Handoff (two phases, never lost, never twice).**
//! 1. The origin commits `handing` (peer, handoff id) to its journal, then sends the job
//!    (`POST /api/v1/peer/handoffs`); the receiver commits it as `prepared` and does not run it.
//! 2. On the answer the origin commits `migrated` (the commit point: from now on the job
//!    belongs to the peer) and sends `POST /api/v1/peer/handoffs/{h}/commit`; the receiver
//!    submits it to its core (looking it up by its marked name first, so a repeated commit
//!    after a crash does not submit it twice) and commits `committed`.
//!
//! After a crash, `handing` is resolved by aborting at the peer (an abort of an unknown
//! handoff leaves a tombstone, so a late phase one is refused) and returning the job to the
//! GQ; `migrated` is committed again (idempotent). A peer that does not answer within
//! `peer_timeout_ms` is backed off ([`client::Availability`]) and left out of decisions; a
//! `handing` job waits for it rather than risk running on both sides.
//!
//! **Peers are untrusted.** A peer authenticates with its name (`X-Koalesce-Peer`) and the
//! secret the pair shares (bearer); peer secrets are valid on `/api/v1/peer/*` only and user
//! tokens never are. A peer may only touch handoffs named after itself; its jobs run as the
//! user `peer-<name>` and are validated like any submission.
//!
//! R-I (§III-A2): a server whose RU is below δ at its σ check volunteers to every peer
//! (`POST /api/v1/peer/volunteer`); a job whose local AWT reaches φ waits in the grid queue
//! until a volunteer's offer wins by [`koalesce_core::federation::policy::receiver_initiated`]
//! or its local AWT drops below φ. SY-I: the same, and S-I at once when no peer volunteered
//! within σ.
//!
//! **Data** ([`data`]): a job's input files move with it (the receiver pulls them from the
//! origin, checksummed and resumable, before it submits the job), its outputs come back to the
//! origin once it succeeded, its logs once it ended in any way, and a cancel at the origin
//! goes to the peer (`results`). A receiver removes what it received for an aborted handoff,
//! aborts a handoff prepared and never committed after `handoff_timeout_ms`, and releases a
//! committed one whose origin never says `done` `received_retention_ms` after its job ended
//! (`cleanup`). The ADTs in offers use the bandwidth measured from the asking
//! peer (probes and real transfers), `bandwidth_bps` until there is a measurement. Jobs fixed
//! to a site of this server stay here.

mod cleanup;
pub mod client;
pub mod config;
pub mod data;
pub(crate) mod given_back;
pub(crate) mod gs;
pub mod journal;
pub mod lost;
pub(crate) mod results;
mod routes;
mod serve;
mod via_agent;
pub mod wire;

use std::path::Path;
use std::sync::{Arc, Mutex};

use koalesce_core::federation::live::{self, Requirements};
use koalesce_core::federation::{Offer, Params};
use koalesce_core::Millis;

pub use client::{Availability, CallError, PeerClient};
pub use config::{FederationConfig, PeerAlgorithm, PeerConfig};
pub use given_back::{MAX_HANDOFFS, MAX_HANDOFFS_IN_ALL};
pub use journal::Journal;

use crate::api::ApiError;
use crate::daemon::Shared;
use crate::jobdesc::JobDescription;
use crate::now_ms;

/// Name of the journal file in the data directory.
pub const JOURNAL_FILE: &str = "federation.db";

/// The federation of one server: its configuration, peers, journal.
pub struct Federation {
    pub(crate) shared: Arc<Shared>,
    pub(crate) cfg: FederationConfig,
    pub(crate) params: Params,
    pub(crate) peers: Vec<PeerClient>,
    pub(crate) avail: Mutex<Vec<Availability>>,
    /// When each peer last volunteered (Unix ms; 0: never).
    pub(crate) volunteer_at: Mutex<Vec<u64>>,
    pub(crate) journal: Journal,
    /// Serializes submissions into the core that must not happen twice (look-up, then submit).
    pub(crate) submit_lock: tokio::sync::Mutex<()>,
    /// One grid-scheduler action at a time: a pass and an offer to a volunteer must not both
    /// act on a job being handed over (one would abort what the other just prepared).
    pub(crate) gs_lock: tokio::sync::Mutex<()>,
    /// Wakes the grid scheduler (a new grid job).
    pub(crate) wake: tokio::sync::Notify,
    /// Background transfers by key (`in:<handoff>`, `out:<grid id>`).
    pub(crate) fetches: Mutex<std::collections::HashMap<String, data::Fetch>>,
    /// Bandwidth measured from each peer to here (bits/s) and when (Unix ms).
    pub(crate) bandwidth: Mutex<Vec<Option<(f64, u64)>>>,
    /// Commits answered 404 in a row, by grid job ([`lost`]).
    pub(crate) missing: Mutex<std::collections::HashMap<u64, u32>>,
}

/// Starts the federation of a server: opens the journal, reads the peers' secrets, spawns the
/// grid scheduler; returns the routes to serve and the scheduler's task.
pub fn start(
    shared: Arc<Shared>,
    cfg: &FederationConfig,
    data_dir: &Path,
    stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<(axum::Router, tokio::task::JoinHandle<()>)> {
    cfg.validate()?;
    let params = cfg.params()?;
    let peers = cfg
        .peers
        .iter()
        .map(|p| {
            Ok(PeerClient::new(
                &cfg.name,
                &p.name,
                &p.url,
                config::read_secret(p)?,
                cfg.peer_timeout_ms,
            ))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let journal = Journal::open(&data_dir.join(JOURNAL_FILE)).map_err(|e| anyhow::anyhow!("opening {JOURNAL_FILE}: {e}"))?;
    let fed = Arc::new(Federation {
        shared,
        cfg: cfg.clone(),
        params,
        avail: Mutex::new(vec![Availability::default(); peers.len()]),
        volunteer_at: Mutex::new(vec![0; peers.len()]),
        peers,
        journal,
        submit_lock: tokio::sync::Mutex::new(()),
        gs_lock: tokio::sync::Mutex::new(()),
        wake: tokio::sync::Notify::new(),
        fetches: Mutex::new(Default::default()),
        bandwidth: Mutex::new(vec![None; cfg.peers.len()]),
        missing: Mutex::new(Default::default()),
    });
    let router = routes::router(fed.clone());
    for i in 0..fed.peers.len() {
        tokio::spawn(gs::probe_peer(fed.clone(), i, stop.clone()));
    }
    let task = tokio::spawn(gs::run(fed, stop));
    Ok((router, task))
}

/// The name a job carries in a core when the federation put it there: unique per grid job or
/// handoff, so that a submission repeated after a crash finds the first one.
pub(crate) fn marked_name(name: &str, tag: &str) -> String {
    let short: String = name.chars().take(120).collect();
    format!("{short} [grid {tag}]")
}

/// Runs blocking work (SQLite, peer calls) off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

impl Federation {
    /// This server's offer for `req` now, and the AWT behind it. `from`: the peer asking (its
    /// data would cross the link from it, at the bandwidth measured from it); None: this
    /// server's own offer (no transfers).
    pub(crate) fn offer(&self, req: &Requirements, from: Option<usize>) -> (Offer, Option<Millis>) {
        let bps = from.map_or(self.cfg.bandwidth_bps, |i| self.bandwidth_from(i));
        // The daemon's state lock only while the view is taken: the simulation of the local
        // scheduler (a peer may ask often) runs without it.
        let view = live::server_view(&self.shared.lock().core, now_ms());
        live::offer(&view, req, self.cfg.clock_mhz, bps, from.is_some())
    }

    /// The bandwidth from peer `i` to here: the last measurement, else `bandwidth_bps`.
    pub(crate) fn bandwidth_from(&self, i: usize) -> f64 {
        let b = self.bandwidth.lock().unwrap_or_else(|p| p.into_inner());
        b.get(i).copied().flatten().map_or(self.cfg.bandwidth_bps, |m| m.0)
    }

    /// Records a bandwidth measured from peer `i` (bits/s): the mean with the last one, so one
    /// odd transfer does not swing decisions.
    pub(crate) fn measured(&self, i: usize, bps: f64) {
        if !bps.is_finite() || bps <= 0.0 {
            return;
        }
        let mut b = self.bandwidth.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = b.get_mut(i) {
            let v = slot.map_or(bps, |(old, _)| (old + bps) / 2.0);
            *slot = Some((v, now_ms()));
        }
    }

    /// A job's requirements as this server sees them (its sites resolve fixed site names), with
    /// its input bytes from the catalogue and its expected output bytes (`output_ratio` ×).
    pub(crate) fn requirements(&self, desc: &JobDescription) -> Result<Requirements, String> {
        let mut req = self.requirements_here(desc)?;
        let input: u64 = data::input_files(self, desc)?.iter().map(|f| f.size_bytes).sum();
        req.input_bytes = input;
        req.output_bytes = (input as f64 * self.cfg.output_ratio).min(u64::MAX as f64) as u64;
        Ok(req)
    }

    /// The requirements of a job whose input files are not (yet) here: what a submission here
    /// would refuse, except the inputs.
    pub(crate) fn requirements_here(&self, desc: &JobDescription) -> Result<Requirements, String> {
        let mut desc = desc.clone();
        desc.inputs.clear();
        let st = self.shared.lock();
        let spec = desc.to_spec(|n| st.site_id(n)).map_err(|e| e.to_string())?;
        // What a submission here would refuse (a component larger than every site, ...).
        st.core.check(&spec).map_err(|e| e.to_string())?;
        Ok(Requirements {
            processors: live::job_processors(&spec),
            estimate_ms: spec.runtime_estimate_ms,
            home_mhz: self.cfg.clock_mhz,
            input_bytes: 0,
            output_bytes: 0,
        })
    }

    /// Whether a job of `description` can run at this server's sites (Err: why not, as a
    /// submission here would refuse it).
    pub(crate) fn runs_here(&self, description: &str) -> Result<(), String> {
        let desc = JobDescription::parse(description).map_err(|e| format!("description: {e:?}"))?;
        self.requirements_here(&desc).map(|_| ())
    }

    /// Submits `desc` under its marked name unless a job of that name exists; the job id. The
    /// caller holds `submit_lock` (the guard proves it), so look-up and submission are one step.
    pub(crate) async fn submit_once(
        &self,
        one: &tokio::sync::MutexGuard<'_, ()>,
        desc: &JobDescription,
        tag: &str,
        user: &str,
    ) -> Result<u64, ApiError> {
        let mut desc = desc.clone();
        desc.name = marked_name(&desc.name, tag);
        if let Some(id) = self.find_marked(one, &desc.name, user).await? {
            return Ok(id);
        }
        crate::api::submit_text(&self.shared, user, &desc.to_toml()).await
    }

    /// The job `user` has under the marked name `name`, if any. Only the user's own jobs:
    /// another user's job named like this one must not be taken for it (the job would never
    /// run, and its owner would see the other's).
    async fn find_marked(&self, _one: &tokio::sync::MutexGuard<'_, ()>, name: &str, user: &str) -> Result<Option<u64>, ApiError> {
        let store = self.shared.store.clone();
        let (name, owner) = (name.to_string(), user.to_string());
        let found = blocking(move || {
            store.read(move |c| {
                use rusqlite::OptionalExtension;
                c.query_row(
                    "SELECT id FROM jobs WHERE user = ?1 AND name = ?2 ORDER BY id LIMIT 1",
                    [&owner, &name],
                    |r| r.get::<_, i64>(0),
                )
                .optional()
            })
        })
        .await
        .map_err(|e| crate::api::err(axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
        Ok(found.map(|id| id as u64))
    }

    /// Aborts handoff `h` from `origin` (a tombstone if it is unknown) — unless a commit
    /// already submitted its job (a receiver killed between the submission and its journal's
    /// `committed`, or a journal lost since): then it is recorded committed to that job, which
    /// runs, since an abort would let the origin decide the job again and run it twice. The row
    /// afterwards.
    pub(crate) async fn abort_incoming(
        &self,
        one: &tokio::sync::MutexGuard<'_, ()>,
        h: &str,
        origin: &str,
    ) -> Result<journal::Incoming, String> {
        let (j, key) = (self.journal.clone(), h.to_string());
        let inc = blocking(move || j.incoming(&key)).await.map_err(|e| e.to_string())?;
        let submitted = match inc {
            Some(inc) if inc.state == "prepared" => match JobDescription::parse(&inc.description) {
                Ok(desc) => self
                    .find_marked(one, &marked_name(&desc.name, h), &format!("peer-{origin}"))
                    .await
                    .map_err(|e| e.1)?,
                Err(_) => None,
            },
            Some(_) => None,
            // Unknown here: this server may have lost its journal but not its jobs (issue 14's
            // lost journal). A job submitted for the handoff is taken back, not tombstoned:
            // the origin would decide the job again and run it twice.
            None => return self.adopt_or_abort(one, h, origin).await,
        };
        let (j, key, origin) = (self.journal.clone(), h.to_string(), origin.to_string());
        blocking(move || {
            if let Some(id) = submitted {
                tracing::warn!(handoff = %key, job = id, "a commit interrupted before its journal entry: committed, not aborted");
                j.committed(&key, id)?;
                return j.incoming(&key)?.ok_or(rusqlite::Error::QueryReturnedNoRows);
            }
            j.abort(&key, &origin)
        })
        .await
        .map_err(|e| e.to_string())
    }

    /// Abort of handoff `h`, unknown to the journal: taken back when its job is here
    /// ([`Self::adopt`]); otherwise a tombstone.
    async fn adopt_or_abort(&self, one: &tokio::sync::MutexGuard<'_, ()>, h: &str, origin: &str) -> Result<journal::Incoming, String> {
        if let Some(inc) = self.adopt(one, h, origin).await? {
            return Ok(inc);
        }
        let (j, key, origin) = (self.journal.clone(), h.to_string(), origin.to_string());
        blocking(move || j.abort(&key, &origin)).await.map_err(|e| e.to_string())
    }

    /// Handoff `h` from `origin`, unknown to the journal: if a job of `origin`'s user has the
    /// handoff's marked name (whatever the job's own name), the handoff is recorded committed
    /// to it, with the description the job was submitted with and the received inputs it reads
    /// (released with it, kept for it meanwhile). The row, or None when no such job is here.
    pub(crate) async fn adopt(
        &self,
        _one: &tokio::sync::MutexGuard<'_, ()>,
        h: &str,
        origin: &str,
    ) -> Result<Option<journal::Incoming>, String> {
        let store = self.shared.store.clone();
        let (suffix, owner) = (marked_name("", h), format!("peer-{origin}"));
        let found = blocking(move || {
            store.read(move |c| {
                use rusqlite::OptionalExtension;
                c.query_row(
                    "SELECT id, description FROM jobs WHERE user = ?1 AND substr(name, -?3) = ?2 ORDER BY id LIMIT 1",
                    rusqlite::params![owner, suffix, suffix.chars().count() as i64],
                    |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, String>(1)?)),
                )
                .optional()
            })
        })
        .await
        .map_err(|e| e.to_string())?;
        let Some((id, description)) = found else { return Ok(None) };
        let inputs = match JobDescription::parse(&description) {
            Ok(desc) => data::received_inputs_of(self, origin, &desc),
            Err(_) => Vec::new(),
        };
        let inputs = serde_json::to_string(&inputs).map_err(|e| e.to_string())?;
        let (j, key, origin) = (self.journal.clone(), h.to_string(), origin.to_string());
        tracing::warn!(handoff = %key, job = id, "a handoff unknown here, whose job is here (its journal entry was lost): committed, not aborted");
        blocking(move || j.adopt(&key, &origin, &description, &inputs, id))
            .await
            .map(Some)
            .map_err(|e| e.to_string())
    }

    pub(crate) fn volunteered(&self, i: usize) {
        self.volunteer_at.lock().unwrap_or_else(|p| p.into_inner())[i] = now_ms();
    }

    /// Peers that volunteered within the last σ, most recent first.
    pub(crate) fn recent_volunteers(&self) -> Vec<usize> {
        let now = now_ms();
        let v = self.volunteer_at.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<usize> = (0..v.len())
            .filter(|&i| v[i] > 0 && now.saturating_sub(v[i]) <= self.params.sigma_ms)
            .collect();
        out.sort_by_key(|&i| std::cmp::Reverse(v[i]));
        out
    }

    pub(crate) fn peer_index(&self, name: &str) -> Option<usize> {
        self.peers.iter().position(|p| p.name == name)
    }

    pub(crate) fn available(&self, i: usize) -> bool {
        self.avail.lock().unwrap_or_else(|p| p.into_inner())[i].available(now_ms())
    }

    /// Records the outcome of a call to peer `i`: success resets its back-off; no answer backs
    /// it off; a refusal (it answered) counts as alive.
    pub(crate) fn record<T>(&self, i: usize, r: &Result<T, CallError>) {
        let mut a = self.avail.lock().unwrap_or_else(|p| p.into_inner());
        match r {
            Ok(_) | Err(CallError::Refused(..)) => a[i].succeeded(),
            Err(CallError::Unreachable(e)) => {
                tracing::warn!(peer = %self.peers[i].name, error = %e, "peer unavailable");
                a[i].failed(now_ms(), self.cfg.backoff_initial_ms, self.cfg.backoff_max_ms, e.clone())
            }
        }
    }
}
