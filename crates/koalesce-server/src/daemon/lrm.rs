//! Calls into the sites' LRMs, off the state lock. The LRM worker takes [`LrmOp`]s in the order
//! the core's actions produced them: claims (and reservations, batched per site) are carried
//! out one after the other on the blocking pool, so a job's claims are done before its launch
//! starts; each launch then runs as a task of its own ([`super::launch`]: waits for its launch
//! intent to be durable, spawns the components' supervisors in one blocking call, waits for
//! them at the start barrier and lets them all run). Results come back as core inputs under the
//! lock, briefly. Status polling of running components is here too.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use koalesce_core::state::ComponentState;
use koalesce_core::{ComponentOutcome, JobId, SiteId};
use tokio::sync::mpsc;

use super::launch::{launch, InputCheck};
use super::{process_actions, Shared};
use crate::backend::{BackendError, ComponentSubmission, LrmState, ReservationRequest};
use crate::jobdesc::Runner;
use crate::now_ms;
use crate::store;

/// Work for the LRM worker.
#[derive(Debug)]
pub enum LrmOp {
    Claim {
        job: u64,
        component: u32,
        site: SiteId,
        processors: u32,
        /// Claim inside the component's granted reservation (taken from `State::reservations`).
        reserved: bool,
    },
    Launch(Launch),
    /// Kills a component (if submitted) and gives its claim back.
    Kill {
        site: SiteId,
        lrm_id: Option<String>,
        claim: Option<String>,
    },
    Release {
        site: SiteId,
        claim: String,
    },
    Reserve {
        job: u64,
        component: u32,
        site: SiteId,
        request: ReservationRequest,
    },
    CancelReservation {
        site: SiteId,
        id: String,
    },
}

/// One launch: the components of one attempt of a job.
#[derive(Debug)]
pub struct Launch {
    pub(super) job: u64,
    pub(super) attempt: u32,
    /// (component, site, submission without its claim id yet)
    pub(super) components: Vec<(u32, SiteId, ComponentSubmission)>,
    /// The inputs each component uses at its site (checked before it starts).
    pub(super) inputs: HashMap<u32, Vec<InputCheck>>,
    /// Answered once the launch intents are committed.
    pub(super) committed: tokio::sync::oneshot::Receiver<Result<(), crate::store::WriteFailed>>,
}

/// The sending end of the LRM worker's queue.
pub struct LrmQueue(mpsc::UnboundedSender<LrmOp>);

impl LrmQueue {
    pub fn new() -> (LrmQueue, mpsc::UnboundedReceiver<LrmOp>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (LrmQueue(tx), rx)
    }

    pub fn send(&self, op: LrmOp) {
        if self.0.send(op).is_err() {
            tracing::warn!("the LRM worker has stopped; an LRM call is dropped");
        }
    }
}

/// Runs `f` on the blocking pool; a panic there is reported as a site error.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, BackendError> + Send + 'static) -> Result<T, BackendError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(BackendError::Site {
            site: "?".into(),
            reason: format!("LRM call panicked: {e}"),
        })
    })
}

/// Reads a site's processor counts into its cache (on the blocking pool).
fn refresh_site(shared: &Shared, site: SiteId) {
    let h = shared.site(site);
    if let Ok(p) = h.backend.processors(&h.name) {
        h.idle.store(p.idle, Ordering::Relaxed);
        h.used.store(p.used, Ordering::Relaxed);
    }
}

/// The LRM worker (one task per server), until `shutdown`.
pub async fn worker(shared: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<LrmOp>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    // An op taken from the queue behind a batch of reservations, carried out next.
    let mut pending: Option<LrmOp> = None;
    loop {
        let op = if let Some(op) = pending.take() {
            op
        } else {
            tokio::select! {
                op = rx.recv() => match op {
                    Some(op) => op,
                    None => return,
                },
                _ = shutdown.changed() => {
                    kill_pending(&shared, &mut rx).await;
                    return;
                }
            }
        };
        match op {
            LrmOp::Claim {
                job,
                component,
                site,
                processors,
                reserved,
            } => claim(&shared, job, component, site, processors, reserved).await,
            LrmOp::Launch(l) => {
                tokio::spawn(launch(shared.clone(), l));
            }
            LrmOp::Kill { site, lrm_id, claim } => {
                let s = shared.clone();
                tokio::task::spawn_blocking(move || {
                    let h = s.site(site);
                    if let Some(id) = lrm_id {
                        let _ = h.backend.cancel(&id);
                    }
                    if let Some(c) = claim {
                        h.backend.release(&c);
                    }
                    refresh_site(&s, site);
                });
            }
            LrmOp::Release { site, claim } => {
                let s = shared.clone();
                tokio::task::spawn_blocking(move || {
                    s.site(site).backend.release(&claim);
                    refresh_site(&s, site);
                });
            }
            LrmOp::Reserve {
                job,
                component,
                site,
                request,
            } => {
                let mut batch = vec![(job, component, site, request)];
                if shared.config.batch_reservations {
                    // The reservations queued right behind it go with it; the first other
                    // op is carried out next, so the order of the queue is kept.
                    while let Ok(next) = rx.try_recv() {
                        match next {
                            LrmOp::Reserve {
                                job,
                                component,
                                site,
                                request,
                            } => batch.push((job, component, site, request)),
                            other => {
                                pending = Some(other);
                                break;
                            }
                        }
                    }
                }
                reserve_batch(&shared, batch).await;
            }
            LrmOp::CancelReservation { site, id } => {
                let s = shared.clone();
                tokio::task::spawn_blocking(move || {
                    if let Some(r) = s.site(site).backend.reservations() {
                        let _ = r.cancel_reservation(&id);
                    }
                });
            }
        }
    }
}

/// Reservations the scheduler asked for, `(job, component, site, request)` in queue order:
/// one [`crate::backend::Reservations::reserve_many`] call per site (off the lock), then the
/// answers to the core under one lock. A grant for a component that no longer waits for it
/// (its job went back to the queue, e.g. after another component's refusal) is given back.
async fn reserve_batch(shared: &Arc<Shared>, batch: Vec<(u64, u32, SiteId, ReservationRequest)>) {
    let mut by_site: BTreeMap<SiteId, Vec<usize>> = BTreeMap::new();
    for (i, (_, _, site, _)) in batch.iter().enumerate() {
        by_site.entry(*site).or_default().push(i);
    }
    let s = shared.clone();
    let requests: Vec<ReservationRequest> = batch.iter().map(|b| b.3.clone()).collect();
    let n = batch.len();
    let answers: Vec<Result<String, BackendError>> = blocking(move || {
        let mut out: Vec<Option<Result<String, BackendError>>> = (0..n).map(|_| None).collect();
        for (site, idx) in by_site {
            let reqs: Vec<ReservationRequest> = idx.iter().map(|&i| requests[i].clone()).collect();
            s.metrics.reservation_calls.fetch_add(1, Ordering::Relaxed);
            let results = match s.site(site).backend.reservations() {
                Some(r) => r.reserve_many(&reqs),
                None => reqs
                    .iter()
                    .map(|q| {
                        Err(BackendError::Site {
                            site: q.site.clone(),
                            reason: "no advance reservations".into(),
                        })
                    })
                    .collect(),
            };
            for (i, r) in idx.into_iter().zip(results) {
                out[i] = Some(r);
            }
        }
        Ok(out
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(BackendError::Site {
                        site: "?".into(),
                        reason: "no answer".into(),
                    })
                })
            })
            .collect())
    })
    .await
    .unwrap_or_else(|e| (0..n).map(|_| Err(e.clone())).collect());
    {
        let mut guard = shared.lock();
        let st = &mut *guard;
        for ((job, component, site, _), r) in batch.into_iter().zip(answers) {
            let granted = match r {
                Ok(id) => {
                    shared.metrics.reservations_granted.fetch_add(1, Ordering::Relaxed);
                    // Its job went back to the queue (or ended) before the answer came.
                    let stale = st.core.job(JobId(job)).is_none_or(|j| {
                        j.state.is_terminal()
                            || matches!(j.state, koalesce_core::JobState::Queued | koalesce_core::JobState::Held)
                            || j.components
                                .get(component as usize)
                                .is_none_or(|c| c.state == ComponentState::Unplaced)
                    });
                    if !stale {
                        st.reservations.insert((job, component), id);
                    } else {
                        shared.lrm.send(LrmOp::CancelReservation { site, id });
                    }
                    true
                }
                Err(e) => {
                    tracing::info!(job, component, error = %e, "reservation refused");
                    shared.metrics.reservations_refused.fetch_add(1, Ordering::Relaxed);
                    false
                }
            };
            st.core.reservation_answer(now_ms(), JobId(job), component, granted);
        }
        process_actions(shared, st);
    }
    // Granting them may have moved flexible reservations to make room.
    crate::reservations::apply_moves(shared).await;
}

/// At shutdown: the kills the core asked for are still carried out (a component of a
/// cancelled job must not run on, held at its barrier, after the server stopped); everything
/// else is left to the next server's recovery.
async fn kill_pending(shared: &Arc<Shared>, rx: &mut mpsc::UnboundedReceiver<LrmOp>) {
    let mut kills = Vec::new();
    while let Ok(op) = rx.try_recv() {
        if let LrmOp::Kill {
            site, lrm_id: Some(id), ..
        } = op
        {
            kills.push((site, id));
        }
    }
    if kills.is_empty() {
        return;
    }
    let s = shared.clone();
    let _ = tokio::task::spawn_blocking(move || {
        for (site, id) in kills {
            let _ = s.site(site).backend.cancel(&id);
        }
    })
    .await;
}

async fn claim(shared: &Arc<Shared>, job: u64, component: u32, site: SiteId, processors: u32, reserved: bool) {
    // A job in a reservation its owner holds: the reservation's id at the site is read from
    // the store when claiming (a restarted server re-created it under a new id).
    let held = reserved
        .then(|| {
            let st = shared.lock();
            let h = st.core.job(JobId(job))?.spec.preferences.held_reservation.as_ref()?;
            Some(h.id.clone())
        })
        .flatten();
    if let Some(public) = held {
        let s = shared.clone();
        let result = blocking(move || {
            let h = s.site(site);
            let now = now_ms();
            let row = store::parse_reservation_id(&public)
                .and_then(|id| s.store.read(|c| store::load_reservation(c, id, now)).ok().flatten())
                .filter(|r| r.info.end_ms > now);
            let r = match (row, h.backend.reservations()) {
                // Starts later than the job was claimed for (a move the core had not been told
                // of yet, a race of milliseconds): claiming now would take the processors
                // before their time.
                (Some(row), _) if row.info.start_ms > now + 1_000 => Err(BackendError::Site {
                    site: h.name.clone(),
                    reason: format!(
                        "reservation '{public}' starts at {}, after the job was claimed in it",
                        row.info.start_ms
                    ),
                }),
                (Some(row), Some(res)) => res.claim_reserved(&row.backend_id),
                _ => Err(BackendError::Site {
                    site: h.name.clone(),
                    reason: format!("reservation '{public}' ended or was cancelled"),
                }),
            };
            refresh_site(&s, site);
            r
        })
        .await;
        return claimed(shared, job, component, site, result, false);
    }
    let reservation = if reserved {
        let mut st = shared.lock();
        let id = st.reservations.remove(&(job, component));
        if let (Some(e), Some(id)) = (st.exec.get_mut(&(job, component)), &id) {
            e.reservation = Some(id.clone());
        }
        id
    } else {
        None
    };
    let s = shared.clone();
    let result = blocking(move || {
        let h = s.site(site);
        let r = match &reservation {
            Some(id) => match h.backend.reservations() {
                Some(res) => res.claim_reserved(id),
                None => h.backend.claim(&h.name, processors),
            },
            None => h.backend.claim(&h.name, processors),
        };
        refresh_site(&s, site);
        r
    })
    .await;
    claimed(shared, job, component, site, result, true);
}

/// The LRM's answer to a claim. `blame`: a refusal other than busy is the site's fault (not
/// for a reservation the user lost).
fn claimed(shared: &Arc<Shared>, job: u64, component: u32, site: SiteId, result: Result<String, BackendError>, blame: bool) {
    let mut guard = shared.lock();
    let st = &mut *guard;
    match result {
        Ok(claim) => match st.exec.get_mut(&(job, component)) {
            Some(e) => e.claim = Some(claim),
            // Aborted meanwhile: give it back.
            None => shared.lrm.send(LrmOp::Release { site, claim }),
        },
        Err(e) => {
            if st.exec.remove(&(job, component)).is_some() {
                let soft = blame && !matches!(e, BackendError::Busy { .. });
                if soft {
                    tracing::warn!(job, component, error = %e, "claim failed");
                }
                st.core.claim_rejected(now_ms(), JobId(job), component, soft);
            }
        }
    }
    process_actions(shared, st);
}

/// Checks every submitted component (one batched status call per site, off the lock) and
/// reports the ended ones to the core.
pub async fn poll_running(shared: Arc<Shared>) {
    let ids: Vec<((u64, u32), SiteId, String)> = {
        let st = shared.lock();
        st.exec
            .iter()
            .filter_map(|(k, e)| e.lrm_id.clone().map(|id| (*k, e.site, id)))
            .collect()
    };
    if ids.is_empty() {
        return;
    }
    let mut groups: BTreeMap<SiteId, Vec<String>> = BTreeMap::new();
    for (_, site, id) in &ids {
        groups.entry(*site).or_default().push(id.clone());
    }
    let s = shared.clone();
    let states: HashMap<String, LrmState> =
        tokio::task::spawn_blocking(move || groups.iter().flat_map(|(site, list)| s.site(*site).backend.status(list)).collect())
            .await
            .unwrap_or_default();
    let ended: Vec<((u64, u32), SiteId, String, &LrmState)> = ids
        .into_iter()
        .filter_map(|(k, site, id)| {
            let state = states.get(&id).filter(|s| s.is_terminal())?;
            Some((k, site, id, state))
        })
        .collect();
    if ended.is_empty() {
        let mut guard = shared.lock();
        process_actions(&shared, &mut guard);
        return;
    }
    // A poll that ends a few hundred components reports them in chunks, releasing the lock
    // in between (each component is checked again under the lock it is reported in).
    let mut rest = &ended[..];
    while !rest.is_empty() {
        let taken = {
            let mut guard = shared.lock();
            report_ended(&shared, &mut guard, rest)
        };
        rest = &rest[taken..];
        if !rest.is_empty() {
            shared.let_waiters_in();
            tokio::task::yield_now().await;
        }
    }
}

/// The most ended components [`poll_running`] reports to the core under one hold of the lock,
/// and the longest it keeps at them (then the core's actions follow, in their own budget).
pub const ENDS_PER_HOLD: usize = 32;
pub const ENDS_HOLD_BUDGET: std::time::Duration = std::time::Duration::from_micros(500);

/// Reports components the LRM says ended to the core (those still current; at most
/// [`ENDS_PER_HOLD`], for at most [`ENDS_HOLD_BUDGET`], at least one), then carries out the
/// core's actions. Returns how many of `ended` it took.
fn report_ended(shared: &Arc<Shared>, st: &mut super::State, ended: &[((u64, u32), SiteId, String, &LrmState)]) -> usize {
    let started = std::time::Instant::now();
    let now = now_ms();
    let mut done = Vec::new();
    let mut taken = 0;
    for &((job, comp), site, ref id, state) in ended {
        if taken >= ENDS_PER_HOLD || (taken > 0 && started.elapsed() >= ENDS_HOLD_BUDGET) {
            break;
        }
        taken += 1;
        // Still the same component (not aborted and relaunched in between)?
        if st.exec.get(&(job, comp)).and_then(|e| e.lrm_id.as_deref()) != Some(id.as_str()) {
            continue;
        }
        let Some(e) = st.exec.remove(&(job, comp)) else { continue };
        if let Some(claim) = e.claim {
            shared.lrm.send(LrmOp::Release { site, claim });
        }
        done.push((job, e.attempt, comp));
        let (outcome, exit_code, note) = match state {
            LrmState::Completed => (ComponentOutcome::Success, Some(0), None),
            LrmState::Failed { exit_code, reason } => (ComponentOutcome::ApplicationError, exit_code.or(Some(-1)), Some(reason.clone())),
            LrmState::Timeout { reason } => {
                let limit = st
                    .meta
                    .get(&job)
                    .and_then(|m| m.desc.walltime_ms(shared.config.walltime_factor))
                    .map(|ms| format!(" ({})", koalesce_api::duration::format_ms(ms)))
                    .unwrap_or_default();
                (ComponentOutcome::Timeout, None, Some(format!("{reason}{limit}")))
            }
            LrmState::OutOfMemory { reason } => {
                let limit = st
                    .meta
                    .get(&job)
                    .and_then(|m| m.desc.memory.clone())
                    .map(|m| format!(" ({m} per processor)"))
                    .unwrap_or_default();
                (ComponentOutcome::OutOfMemory, None, Some(format!("{reason}{limit}")))
            }
            LrmState::NodeFail { reason } => (ComponentOutcome::SoftError, None, Some(reason.clone())),
            other => (ComponentOutcome::SoftError, None, Some(format!("{other:?}"))),
        };
        let site_name = &shared.site(site).name;
        if let Some(meta) = st.meta.get_mut(&job) {
            meta.component_mut(comp as usize).exit_code = exit_code;
            let fails_job = matches!(
                outcome,
                ComponentOutcome::ApplicationError | ComponentOutcome::Timeout | ComponentOutcome::OutOfMemory
            );
            if fails_job && meta.failure.is_none() && meta.desc.runner != Runner::Bag {
                meta.failure = Some(format!("component {comp} at {site_name}: {}", note.clone().unwrap_or_default()));
            }
        }
        if outcome == ComponentOutcome::SoftError {
            tracing::warn!(job, component = comp, site = %site_name, reason = note.as_deref().unwrap_or(""), "soft error");
        }
        st.core.component_finished(now, JobId(job), comp, outcome);
    }
    if !done.is_empty() {
        shared.store.enqueue(store::launches_done_op(done));
    }
    process_actions(shared, st);
    taken
}
