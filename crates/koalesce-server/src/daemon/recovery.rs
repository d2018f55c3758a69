//! Rebuilding the state at startup from the store and the sites' backends: the catalogue,
//! then every job that had not ended, in id order — re-adopted when its launch goes on at the
//! start barrier ([`koalesce_core::Scheduler::adopt_running`]), resubmitted with its tries
//! otherwise ([`koalesce_core::Scheduler::restore_progress`]) — and launch intents of attempts
//! that do not go on made harmless. Every call to a site goes through the
//! [`crate::backend::Backend`] trait (runs on a blocking thread: the server is not serving yet).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use anyhow::Context;
use koalesce_core::model::{NetworkForecast, ReplicaCatalogue, Site};
use koalesce_core::scheduler::BagTask;
use koalesce_core::state::FailureReason;
use koalesce_core::{JobId, JobSpec, JobState, Scheduler, SiteId};

use super::records::{self, CoreSnapshot, JobMeta, StoredMeta};
use super::{Exec, FileInfo, SiteHandle, State};
use crate::backend::BarrierState;
use crate::config::ServerConfig;
use crate::jobdesc::JobDescription;
use crate::store::{self, LaunchRow, Store};
use crate::{now_ms, transfer};

fn catalogue(store: &Store, site_ids: &HashMap<String, SiteId>) -> anyhow::Result<(ReplicaCatalogue, BTreeMap<String, FileInfo>)> {
    let mut catalogue = ReplicaCatalogue::new();
    let mut files = BTreeMap::new();
    for f in store.read(store::load_files)? {
        let mut replicas = BTreeMap::new();
        let mut sids = Vec::new();
        for (site, path) in &f.replicas {
            // A replica whose file vanished is not used.
            if Path::new(path).is_file() {
                replicas.insert(site.clone(), PathBuf::from(path));
                if let Some(&s) = site_ids.get(site) {
                    sids.push(s);
                }
            }
        }
        catalogue.insert(f.name.clone(), f.size_bytes, sids);
        files.insert(
            f.name.clone(),
            FileInfo {
                size_bytes: f.size_bytes,
                sha256: f.sha256,
                replicas,
                owner: f.owner,
            },
        );
    }
    Ok((catalogue, files))
}

/// Builds the state from the database and the sites (see the module docs).
pub fn recover(config: &ServerConfig, store: &Store, sites: &[SiteHandle]) -> anyhow::Result<State> {
    let core_sites: Vec<Site> = config
        .effective_sites()
        .iter()
        .zip(sites)
        .map(|(s, h)| Site {
            name: s.name.clone(),
            processors: s.processors,
            speed: s.speed,
            supports_reservations: h.backend.reservations().is_some(),
            attributes: crate::gridway::sites::attributes(s, &h.paths.storage),
        })
        .collect();
    let site_ids: HashMap<String, SiteId> = sites.iter().enumerate().map(|(i, h)| (h.name.clone(), SiteId(i as u32))).collect();
    let forecast = NetworkForecast::uniform(core_sites.len(), config.initial_bandwidth_bps, 1);
    let (catalogue, files) = catalogue(store, &site_ids)?;
    for h in sites {
        transfer::remove_partials(&h.paths.storage);
    }
    let mut st = State {
        core: Scheduler::new(super::blacklist::core_config(config), core_sites, forecast, catalogue),
        meta: BTreeMap::new(),
        next_id: 1,
        site_ids,
        files,
        exec: HashMap::new(),
        reservations: HashMap::new(),
        progress: HashMap::new(),
        ended: BTreeMap::new(),
        probes: Default::default(),
        network: super::network::Network {
            forecasts: config.network.forecasts,
            ..Default::default()
        },
        gridway_history_saved: 0,
        inflight: HashMap::new(),
        actions_pending: false,
        log: Vec::new(),
    };
    // The local executor runs only koalesce's components: the core plans its queue from its
    // own jobs (their expected ends), for the TTD ranking and `koalesce sites --long`.
    for (i, h) in sites.iter().enumerate() {
        if h.backend.kind() == "local" {
            st.core.estimate_queue_from_own_jobs(SiteId(i as u32), true);
        }
    }
    // GridWay's bans and usage history as they were when the daemon stopped.
    if let Some(text) = store.read(store::load_gridway_history)? {
        match serde_json::from_str(&text) {
            Ok(h) => st.core.restore_gridway_history(h),
            Err(e) => tracing::warn!(error = %e, "stored GridWay history does not parse; starting without it"),
        }
        st.gridway_history_saved = st.core.gridway_history_version();
    }
    for (state, n) in store.read(store::count_ended)? {
        if let Some(name) = store::ENDED.iter().find(|s| **s == state) {
            st.ended.insert(name, n);
        }
    }
    let (rows, max_id) = store.read(store::load_live_jobs)?;
    st.next_id = max_id + 1;
    let launches = store.read(store::load_open_launches)?;
    let progress = store.read(store::load_progress)?;
    let mut adopted: BTreeSet<(u64, u32)> = BTreeSet::new();
    let mut failed = Vec::new();
    let now = now_ms();
    let mut requeued = 0;
    // Arrays with a task back in the core, declared to the core once every task of theirs is
    // back (or ended): before any later job, which may depend on the whole array.
    let mut arrays = Arrays::new();
    // Jobs that succeeded and whose stage-out a stop interrupted: back in the core with their
    // outputs pending (jobs depending on them wait); the server redoes the stage-out.
    for row in store.read(store::load_staging_out)? {
        readopt_staging_out(&mut st, store, row, &mut arrays)?;
    }
    for row in rows {
        let id = row.id;
        declare_arrays(&mut st, store, &mut arrays, id)?;
        let mut snap: CoreSnapshot = serde_json::from_str(&row.core).with_context(|| format!("job {id}: stored core state"))?;
        let stored: StoredMeta = serde_json::from_str(&row.meta).with_context(|| format!("job {id}: stored daemon data"))?;
        let desc = JobDescription::parse(&row.description).map_err(|e| anyhow::anyhow!("job {id}: stored description: {e}"))?;
        let meta = JobMeta::restore(row.user.clone(), desc, stored);
        if let Some((p, c, _, prio)) = progress.get(&id) {
            if *p > snap.placement_tries {
                snap.placement_tries = *p;
                snap.claiming_tries = snap.claiming_tries.max(*c);
                if let Ok(pr) = prio.parse() {
                    snap.priority = pr;
                }
            }
        }
        // The core's spec from the description, whose pinned sites are names: the config's
        // sites may have been reordered since (positions would move the job elsewhere).
        let spec: JobSpec = match meta.desc.to_spec(|n| st.site_id(n)) {
            // The owner, as at submission (GridWay's share policy).
            Ok(spec) => {
                let mut spec = JobSpec {
                    owner: Some(meta.user.clone()),
                    ..spec
                };
                if let Some(rid) = &meta.reservation {
                    spec.preferences.held_reservation = Some(held_again(store, &st, rid, now)?);
                }
                spec
            }
            Err(e) => {
                tracing::warn!(job = id, error = %e, "cannot be resubmitted after restart; failed");
                failed.push((id, meta, snap, e.to_string()));
                continue;
            }
        };
        if snap.state == JobState::Running && meta.attempt > 0 {
            let attempt_rows = store.read(|c| store::load_attempt(c, id, meta.attempt))?;
            // The rows of one attempt are written in one transaction: any row means all of
            // them (a bag's skipped components have none).
            if !attempt_rows.is_empty() && readopt(&mut st, sites, id, &spec, &snap, meta.attempt, &attempt_rows)? {
                adopted.insert((id, meta.attempt));
                note_array(&mut arrays, &meta);
                st.meta.insert(id, meta);
                continue;
            }
        }
        // Anything else that was not finished goes back to its queue (or is held again), in id
        // order: the jobs it depends on are back in the core, or ended and in the store.
        let stored_deps = store.read(|c| crate::api_jobctl::stored_jobs(c, &meta.dependencies))?;
        let task_of = meta.array.map(|a| a.array_id);
        let submitted = crate::api_jobctl::gate_of_task(&st, &stored_deps, &meta.user, true, &meta.dependencies, snap.held, task_of)
            .map_err(|e| koalesce_core::SubmitError::Invalid {
                job: spec.name.clone(),
                reason: e.to_string(),
            })
            .and_then(|gate| st.core.submit_gated(now, JobId(id), spec, gate));
        match submitted {
            Ok(_) => {
                st.core.restore_progress(
                    JobId(id),
                    snap.timeline.submitted,
                    snap.placement_tries,
                    snap.claiming_tries,
                    snap.error_resubmissions,
                    snap.priority,
                );
                note_array(&mut arrays, &meta);
                st.meta.insert(id, meta);
                requeued += 1;
            }
            Err(e) => {
                tracing::warn!(job = id, error = %e, "cannot be resubmitted after restart; failed");
                failed.push((id, meta, snap, e.to_string()));
            }
        }
    }
    declare_arrays(&mut st, store, &mut arrays, u64::MAX)?;
    make_stale_launches_harmless(store, sites, &launches, &adopted)?;
    // Persist what recovery changed (requeued jobs are queued again), and fail the jobs that
    // cannot come back (their rendering is the last one stored, marked failed).
    let mut updates: Vec<store::JobUpdate> = st
        .meta
        .iter()
        .filter_map(|(id, m)| Some(records::update(*id, st.core.job(JobId(*id))?, m, sites)))
        .collect();
    for (id, mut meta, mut snap, reason) in failed {
        meta.failure = Some(format!("cannot be resubmitted after restart: {reason}"));
        snap.state = JobState::Failed(FailureReason::Unplaceable);
        snap.timeline.finished = Some(now);
        let mut detail: koalesce_api::dto::JobDetail = store
            .read(|c| store::load_detail(c, id))?
            .and_then(|(_, _, d)| serde_json::from_str(&d).ok())
            .unwrap_or_default();
        // Live jobs have no stored rendering: name the job at least.
        detail.id = id;
        detail.name.clone_from(&meta.desc.name);
        detail.user.clone_from(&meta.user);
        detail.submitted_ms = snap.timeline.submitted;
        detail.state = "failed".into();
        detail.failure = meta.failure.clone();
        detail.finished_ms = Some(now);
        detail.exit_ok = Some(false);
        *st.ended.entry("failed").or_default() += 1;
        updates.push(store::JobUpdate {
            id,
            state: "failed".into(),
            core: records::json(&snap),
            meta: records::json(&meta.stored()),
            detail: records::json(&detail),
        });
    }
    if !updates.is_empty() {
        store.write_blocking(store::update_jobs_op(updates))?;
    }
    tracing::info!(jobs = st.meta.len(), requeued, adopted = adopted.len(), "state recovered");
    Ok(st)
}

/// Arrays not declared to the core yet: id → (tasks, successes needed).
type Arrays = BTreeMap<u64, (u64, u32)>;

fn note_array(arrays: &mut Arrays, meta: &JobMeta) {
    if let Some(a) = meta.array {
        arrays.insert(a.array_id, (a.count, a.bag.map_or(a.count as u32, |b| b.needed)));
    }
}

/// Declares to the core the arrays all of whose tasks have ids below `before` (every task is
/// back in the core, or ended: a task that could not come back counts as failed, as it is
/// about to be stored).
fn declare_arrays(st: &mut State, store: &Store, arrays: &mut Arrays, before: u64) -> anyhow::Result<()> {
    let due: Vec<(u64, (u64, u32))> = arrays
        .iter()
        .filter(|(id, (count, _))| id.saturating_add(*count) <= before)
        .map(|(id, a)| (*id, *a))
        .collect();
    for (array_id, (count, needed)) in due {
        arrays.remove(&array_id);
        let stored = store.read(|c| crate::api_jobctl::array_states(c, array_id, count))?;
        let tasks: Vec<BagTask> = (array_id..array_id.saturating_add(count))
            .map(|id| {
                let row = stored.get(&id);
                // The task's index as stored (its position in the array for a row without one).
                let index = row.and_then(|r| r.1).unwrap_or(id - array_id);
                let ended = match st.core.job(JobId(id)) {
                    Some(_) => None,
                    None => {
                        let ended = row.and_then(|r| crate::api_jobctl::ended_state(&r.0));
                        Some(ended.unwrap_or(JobState::Failed(FailureReason::Unplaceable)))
                    }
                };
                BagTask {
                    job: JobId(id),
                    index,
                    ended,
                }
            })
            .collect();
        if let Err(e) = st.core.declare_bag(JobId(array_id), needed, &tasks) {
            tracing::warn!(array = array_id, error = %e, "array not declared to the core after restart");
        }
    }
    Ok(())
}

/// Re-adopts a job that succeeded and whose stage-out a stop interrupted: in the core with its
/// outputs pending, its components where its last launch ran them (the stage-out reads their
/// directories). One that cannot come back keeps its stored row (succeeded) and is logged.
fn readopt_staging_out(st: &mut State, store: &Store, row: store::LiveJobRow, arrays: &mut Arrays) -> anyhow::Result<()> {
    let id = row.id;
    let snap: CoreSnapshot = serde_json::from_str(&row.core).with_context(|| format!("job {id}: stored core state"))?;
    let stored: StoredMeta = serde_json::from_str(&row.meta).with_context(|| format!("job {id}: stored daemon data"))?;
    let desc = JobDescription::parse(&row.description).map_err(|e| anyhow::anyhow!("job {id}: stored description: {e}"))?;
    let meta = JobMeta::restore(row.user.clone(), desc, stored);
    let launches = store.read(|c| store::load_attempt(c, id, meta.attempt))?;
    let adopted = meta.desc.to_spec(|n| st.site_id(n)).map_err(|e| e.to_string()).and_then(|spec| {
        let spec = JobSpec {
            owner: Some(meta.user.clone()),
            ..spec
        };
        let mut sites = vec![None; spec.components.len()];
        for l in &launches {
            if let Some(slot) = sites.get_mut(l.component as usize) {
                *slot = st.site_id(&l.site);
            }
        }
        st.core
            .adopt_staging_out(JobId(id), spec, &sites, snap.timeline)
            .map_err(|e| e.to_string())
    });
    match adopted {
        Ok(_) => {
            tracing::info!(job = id, "succeeded; its stage-out is redone");
            note_array(arrays, &meta);
            st.meta.insert(id, meta);
        }
        Err(e) => tracing::warn!(job = id, error = %e, "its interrupted stage-out cannot be redone"),
    }
    Ok(())
}

/// Re-adopts a running job whose launch goes on at the start barrier: it does when a
/// component was let through (it may have run) or when every supervisor holds its directory
/// (roll forward: start them all). Otherwise no program of it ever ran and it is abandoned,
/// the job requeued as if never launched. Returns whether the job was adopted.
fn readopt(
    st: &mut State,
    sites: &[SiteHandle],
    id: u64,
    spec: &JobSpec,
    snap: &CoreSnapshot,
    attempt: u32,
    rows: &[LaunchRow],
) -> anyhow::Result<bool> {
    let mut placement = vec![None; spec.components.len().max(rows.len())];
    let mut handles = Vec::with_capacity(rows.len());
    for l in rows {
        let (Some(&s), Some(slot)) = (st.site_ids.get(&l.site), placement.get_mut(l.component as usize)) else {
            // A site that is no longer configured: the launch cannot go on.
            return Ok(false);
        };
        *slot = Some((s, l.processors));
        handles.push(s);
    }
    let barrier: Vec<BarrierState> = rows
        .iter()
        .zip(&handles)
        .map(|(l, s)| sites[s.index()].backend.barrier_state(l.backend_id(), &l.nonce))
        .collect::<Result<_, _>>()
        .with_context(|| format!("checking the launch of job {id} attempt {attempt}"))?;
    let released = barrier.contains(&BarrierState::Released);
    let all_held = barrier.iter().all(|b| *b == BarrierState::Held { alive: true });
    if !(released || all_held) {
        tracing::info!(job = id, attempt, ?barrier, "abandoning a launch that never started");
        return Ok(false);
    }
    // The sites hold the components' processors again (before anything is started).
    let mut claims = Vec::with_capacity(rows.len());
    for (l, s) in rows.iter().zip(&handles) {
        match sites[s.index()].backend.adopt(l.backend_id(), &l.site, l.processors, &l.nonce) {
            Ok(claim) => claims.push(claim),
            Err(e) => {
                // Not trackable any more (an LRM that lost the job, a launch that crashed
                // before its LRM id was recorded): a fault of the site. Whatever of the launch
                // still runs is stopped, and the job goes back to its queue.
                tracing::warn!(job = id, component = l.component, error = %e, "cannot re-adopt; the launch is given up");
                for (l, s) in rows.iter().zip(&handles) {
                    let _ = sites[s.index()].backend.cancel(l.backend_id());
                }
                for (c, s) in claims.iter().zip(&handles) {
                    sites[s.index()].backend.release(c);
                }
                return Ok(false);
            }
        }
    }
    if st
        .core
        .adopt_running(
            JobId(id),
            spec.clone(),
            &placement,
            snap.timeline,
            snap.placement_tries,
            snap.claiming_tries,
        )
        .is_err()
    {
        for (c, s) in claims.iter().zip(&handles) {
            sites[s.index()].backend.release(c);
        }
        return Ok(false);
    }
    let mut held: BTreeMap<SiteId, Vec<String>> = BTreeMap::new();
    for ((l, b), s) in rows.iter().zip(&barrier).zip(&handles) {
        if *b == (BarrierState::Held { alive: true }) {
            held.entry(*s).or_default().push(l.backend_id().to_string());
        }
    }
    for (s, dirs) in &held {
        // A supervisor that went away meanwhile shows up as a soft error.
        match sites[s.index()].backend.start(dirs) {
            Ok(()) => tracing::info!(job = id, attempt, started = dirs.len(), "rolled a held launch forward"),
            Err(e) => tracing::warn!(job = id, error = %e, "cannot roll the launch forward"),
        }
    }
    for ((l, s), claim) in rows.iter().zip(&handles).zip(claims) {
        st.exec.insert(
            (id, l.component),
            Exec {
                site: *s,
                processors: l.processors,
                claim: Some(claim),
                reservation: None,
                attempt: l.attempt,
                dir: Some(PathBuf::from(&l.dir)),
                lrm_id: Some(l.backend_id().to_string()),
            },
        );
    }
    tracing::info!(job = id, components = rows.len(), "re-adopted running job");
    Ok(true)
}

/// Launch intents of attempts that do not go on: make sure nothing of them runs. A directory
/// no supervisor took is fenced; a supervisor still held at its start barrier is told to give
/// up (it exits, recording that it never started); one that was let through is killed.
fn make_stale_launches_harmless(
    store: &Store,
    sites: &[SiteHandle],
    launches: &[LaunchRow],
    adopted: &BTreeSet<(u64, u32)>,
) -> anyhow::Result<()> {
    let mut stale = Vec::new();
    for l in launches.iter().filter(|l| !adopted.contains(&(l.job, l.attempt))) {
        if let Some(h) = sites.iter().find(|h| h.name == l.site) {
            let id = l.backend_id();
            match h.backend.barrier_state(id, &l.nonce) {
                Ok(BarrierState::Fenced) | Ok(BarrierState::Held { alive: false }) => {}
                Ok(BarrierState::Held { alive: true }) => {
                    if let Err(e) = h.backend.abort_held(id) {
                        tracing::warn!(dir = %l.dir, error = %e, "cannot abort a held launch; killing it");
                        let _ = h.backend.cancel(id);
                    }
                }
                Ok(BarrierState::Released) | Err(_) => {
                    let _ = h.backend.cancel(id);
                }
            }
        }
        stale.push((l.job, l.attempt, l.component));
    }
    if !stale.is_empty() {
        store.write_blocking(store::launches_done_op(stale))?;
    }
    Ok(())
}

/// The reservation a recovered job runs in, as the store has it now (its start moved with
/// the reservation's moves). One that ended or was cancelled meanwhile comes back as an
/// ended one, so the job fails as it would have (its reservation is gone).
fn held_again(store: &Store, st: &State, rid: &str, now: u64) -> anyhow::Result<koalesce_core::model::HeldReservation> {
    let row = match store::parse_reservation_id(rid) {
        Some(id) => store.read(|c| store::load_reservation(c, id, now))?,
        None => None,
    };
    let gone = koalesce_core::model::HeldReservation {
        id: rid.to_string(),
        site: SiteId(0),
        processors: u32::MAX,
        start: 0,
        end: 1,
    };
    Ok(match row.and_then(|r| st.site_id(&r.info.site).map(|site| (site, r))) {
        Some((site, r)) => koalesce_core::model::HeldReservation {
            id: r.info.id,
            site,
            processors: r.info.processors,
            start: r.info.start_ms,
            end: r.info.end_ms,
        },
        None => gone,
    })
}
