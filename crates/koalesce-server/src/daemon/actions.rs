//! Carrying out the core's actions. Called with the state lock held, after every input given
//! to the core, so decisions are carried out in the order the core made them; nothing here
//! blocks: calls into a site's LRM are queued for the LRM worker ([`super::lrm`]), copies run
//! in tasks, writes are enqueued for the group-commit writer.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use koalesce_core::{Action, JobId, JobState};

use super::lrm::LrmOp;
use super::{records, transfers, Exec, Shared, State};
use crate::backend::ReservationRequest;
use crate::now_ms;
use crate::store;

/// The most core actions one call of [`process_actions`] carries out, and the longest it
/// keeps at them: a scan that places and launches a few hundred jobs is carried out in
/// chunks, the state lock released in between (see [`process_actions`]).
pub const ACTIONS_PER_HOLD: usize = 64;
pub const ACTIONS_HOLD_BUDGET: std::time::Duration = std::time::Duration::from_millis(1);

/// Pulls and carries out pending core actions, in the order the core made them: at most
/// [`ACTIONS_PER_HOLD`] of them, for at most [`ACTIONS_HOLD_BUDGET`]. Once none is left it
/// gives the core the sites' idle processors as last reported (less claims not carried out
/// yet). If some are left, `State::actions_pending` says so and the driver is woken: it
/// carries out the rest chunk by chunk, releasing the state lock in between, so that a
/// submission waits for one chunk at most, never for a whole scan's launches. (Whoever holds
/// the lock next and calls this takes the next chunk, so the order is kept; the core itself
/// does not scan again before the driver drained them, see [`super::driver`].)
pub fn process_actions(shared: &Arc<Shared>, st: &mut State) {
    process_actions_bounded(shared, st, ACTIONS_PER_HOLD, Some(ACTIONS_HOLD_BUDGET));
}

/// [`process_actions`] until none is left, in one hold (at startup, before anyone else may
/// take the lock).
pub fn drain_actions(shared: &Arc<Shared>, st: &mut State) {
    process_actions_bounded(shared, st, usize::MAX, None);
}

/// Carries out at most `max` actions (for at most `budget`); returns whether some may be left
/// (then also in `st.actions_pending`, and the driver is woken).
pub fn process_actions_bounded(shared: &Arc<Shared>, st: &mut State, max: usize, budget: Option<std::time::Duration>) -> bool {
    let started = std::time::Instant::now();
    let mut done_launches = Vec::new();
    // Live jobs whose state changed: persisted once each, after the loop (a job placed, claimed
    // and launched in one scan is one write).
    let mut changed = std::collections::BTreeSet::new();
    let mut taken = 0usize;
    let mut left = false;
    loop {
        if taken >= max || budget.is_some_and(|b| taken > 0 && started.elapsed() >= b) {
            left = true;
            break;
        }
        let Some(action) = st.core.poll_action() else { break };
        taken += 1;
        match action {
            Action::StateChanged { job, from, to, .. } => {
                st.log.push(super::LogLine::JobState {
                    job: job.0,
                    from: from.name(),
                    to: to.name(),
                });
                if to.is_terminal() {
                    changed.remove(&job.0);
                    on_end(shared, st, job, to);
                } else {
                    changed.insert(job.0);
                }
            }
            Action::Claim {
                job,
                component,
                site,
                processors,
                reservation,
            } => {
                // The reservation's id is taken by the LRM worker when it carries the claim out:
                // the worker answers `Reserve`s in order, so a reservation asked for just before
                // (in the same scan) is granted by then.
                st.exec.insert(
                    (job.0, component),
                    Exec {
                        site,
                        processors,
                        claim: None,
                        reservation: None,
                        attempt: 0,
                        dir: None,
                        lrm_id: None,
                    },
                );
                shared.lrm.send(LrmOp::Claim {
                    job: job.0,
                    component,
                    site,
                    processors,
                    reserved: reservation,
                });
            }
            Action::Launch { job } => super::launch::prepare_launch(shared, st, job.0),
            Action::Abort { job, component, .. } => {
                if let Some(e) = st.exec.remove(&(job.0, component)) {
                    if e.attempt > 0 {
                        done_launches.push((job.0, e.attempt, component));
                    }
                    shared.lrm.send(LrmOp::Kill {
                        site: e.site,
                        lrm_id: e.lrm_id,
                        claim: e.claim,
                    });
                }
            }
            Action::StartTransfer { job, key, from, .. } => transfers::start_transfer(shared, st, job.0, key, from),
            Action::CancelTransfer { .. } => {
                // Copies are short and land under a temporary name; an unneeded one is simply
                // ignored when it completes (and its replica kept as a cache).
            }
            Action::Reserve {
                job,
                component,
                site,
                processors,
                start,
                duration,
            } => {
                let handle = shared.site(site);
                if handle.backend.reservations().is_some() {
                    shared.lrm.send(LrmOp::Reserve {
                        job: job.0,
                        component,
                        site,
                        request: ReservationRequest {
                            site: handle.name.clone(),
                            processors,
                            start_ms: start,
                            duration_ms: duration,
                        },
                    });
                } else {
                    // The core asks only sites that said they reserve; refuse to be safe.
                    st.core.reservation_answer(now_ms(), job, component, false);
                }
            }
            Action::CancelReservation { job, component, site } => {
                if let Some(id) = st.reservations.remove(&(job.0, component)) {
                    shared.lrm.send(LrmOp::CancelReservation { site, id });
                }
            }
            Action::Blacklist { site } => {
                shared.metrics.blacklisted.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(site = %shared.site(site).name, "site blacklisted after consecutive soft errors");
                super::blacklist::on_blacklist(shared, st, site);
            }
        }
    }
    if !done_launches.is_empty() {
        shared.store.enqueue(store::launches_done_op(done_launches));
    }
    for (job, placement_tries, claiming_tries, priority) in st.core.take_progress() {
        st.progress.insert(job.0, (placement_tries, claiming_tries, priority));
    }
    for id in changed {
        if let Some(job) = st.core.job(JobId(id)) {
            records::persist_state(shared, id, job);
        }
    }
    save_gridway_history(shared, st);
    st.actions_pending = left;
    if left {
        shared.metrics.action_chunks_left.fetch_add(1, Ordering::Relaxed);
        shared.wake.notify_one();
    } else {
        // Only with every claim of the scan in `exec`: the core's own view is right meanwhile.
        refresh_idle(shared, st);
    }
    left
}

/// Writes GridWay's bans and usage history when the core's copy changed since the last write
/// (in order with the job rows, so a restart sees the history of the jobs it sees ended).
fn save_gridway_history(shared: &Shared, st: &mut State) {
    let version = st.core.gridway_history_version();
    if version == st.gridway_history_saved {
        return;
    }
    st.gridway_history_saved = version;
    let json = records::json(&st.core.gridway_history());
    shared.store.enqueue(store::save_gridway_history_op(json, now_ms()));
}

/// The core's view of idle processors: what each site last reported, less the processors of
/// claims the LRM worker has not carried out yet.
pub fn refresh_idle(shared: &Shared, st: &mut State) {
    let mut pending = vec![0u32; shared.sites.len()];
    for e in st.exec.values().filter(|e| e.claim.is_none() && e.lrm_id.is_none()) {
        pending[e.site.index()] += e.processors;
    }
    for (i, site) in shared.sites.iter().enumerate() {
        let idle = site.idle.load(Ordering::Relaxed).saturating_sub(pending[i]);
        st.core.update_site_idle(koalesce_core::SiteId(i as u32), idle);
    }
}

/// A job ended: its final row (with the API rendering) is written, then the core and the
/// daemon let it go (after stage-out, for a job with outputs).
fn on_end(shared: &Arc<Shared>, st: &mut State, job: JobId, to: JobState) {
    let id = job.0;
    let Some(meta) = st.meta.get_mut(&id) else { return };
    let stage_out = to == JobState::Succeeded && !meta.desc.outputs.is_empty();
    // Not shown as succeeded before its outputs are registered (cleared by stage_out).
    meta.staging_out = stage_out;
    let (Some(core_job), Some(meta)) = (st.core.job(job), st.meta.get(&id)) else {
        return;
    };
    let update = records::update(id, core_job, meta, &shared.sites);
    if let Some(times) = records::broker_times(core_job, &shared.sites) {
        shared.metrics.record_prediction(&times);
    }
    *st.ended.entry(to.name()).or_default() += 1;
    st.progress.remove(&id);
    let committed = shared.store.submit(store::update_job_op(update));
    if stage_out {
        transfers::stage_out(shared, st, id);
    } else {
        forget_when_committed(shared, id, committed);
    }
}

/// Once the final row of an ended job is committed, the store answers for it: the core and
/// the daemon's data let it go.
pub fn forget_when_committed(
    shared: &Arc<Shared>,
    id: u64,
    committed: tokio::sync::oneshot::Receiver<Result<(), crate::store::WriteFailed>>,
) {
    let shared = shared.clone();
    tokio::spawn(async move {
        if !matches!(committed.await, Ok(Ok(()))) {
            // Not durable: keep it in memory, where the API still finds it.
            tracing::error!(job = id, "the final state of the job could not be stored");
            return;
        }
        let mut st = shared.lock();
        st.core.forget(JobId(id));
        st.meta.remove(&id);
    });
}
