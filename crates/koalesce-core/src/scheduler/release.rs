//! Faults, ends and returns: failed transfers and claims, finished components, cancellation,
//! soft errors and blacklisting, giving a placement back, and the return to the placement queue.

use std::collections::BTreeSet;

use crate::model::{JobId, Millis, SiteId};
use crate::state::{ComponentState, FailureReason, IllegalTransition, JobState};

use super::{known, Action, ComponentOutcome, Job, Scheduler, TransferKey, TransferStatus};

/// A ban lasts at most 2^6 = 64 × `blacklist_expiry_ms`.
const MAX_BAN_DOUBLINGS: u32 = 6;

impl Scheduler {
    /// A transfer failed at the destination site: a soft error of the destination; the job
    /// goes back to the placement queue.
    pub fn transfer_failed(&mut self, now: Millis, job: JobId, key: &TransferKey) {
        self.transfer_ended_badly(now, job, key, true);
    }

    /// A transfer failed because of its source replica (corrupt or gone; the driver
    /// quarantines it and updates the catalogue): nobody's site is blamed, the destination
    /// least of all; the job goes back to the placement queue.
    pub fn transfer_source_failed(&mut self, now: Millis, job: JobId, key: &TransferKey) {
        self.transfer_ended_badly(now, job, key, false);
    }

    fn transfer_ended_badly(&mut self, now: Millis, job: JobId, key: &TransferKey, blame_destination: bool) {
        if !self.jobs.get(&job).is_some_and(|j| j.transfers.contains_key(key)) {
            return;
        }
        // The failed transfer is over: not one to cancel when the job is released.
        known(&mut self.jobs, job).transfers.remove(key);
        if blame_destination {
            self.record_soft_error(now, key.to);
            self.return_to_queue(now, job, Requeue::SoftError);
        } else {
            self.return_to_queue(now, job, Requeue::ClaimRejected);
        }
    }

    /// The LRM refused a [`Action::Claim`] (fewer idle processors than the core believed, or
    /// a fault of the site when `soft_error`). The job goes back to the placement queue.
    pub fn claim_rejected(&mut self, now: Millis, job: JobId, component: u32, soft_error: bool) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        if j.state.is_terminal() {
            return;
        }
        let Some(c) = j.components.get_mut(component as usize) else {
            return;
        };
        if !matches!(c.state, ComponentState::Claimed | ComponentState::Running) {
            return;
        }
        let site = c.site.expect("claimed component has a site");
        // It never got its processors: nothing to abort at the site.
        c.state = ComponentState::Unplaced;
        let held = j.spec.preferences.held_reservation.is_some();
        if soft_error {
            self.record_soft_error(now, site);
        }
        if held {
            // The site no longer has the job's reservation (ended, cancelled): it cannot
            // run anywhere else.
            self.fail_held(now, job);
            return;
        }
        self.return_to_queue(now, job, if soft_error { Requeue::SoftError } else { Requeue::ClaimRejected });
    }

    /// A component ended. A bag of tasks (a job with `min_components`) goes on when a task
    /// fails with an application error and ends once every task it started is done: it
    /// succeeds when at least `min_components` of them succeeded. Any other job fails at its
    /// first application error. A soft error returns the job to the placement queue.
    pub fn component_finished(&mut self, now: Millis, job: JobId, component: u32, outcome: ComponentOutcome) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        if j.state != JobState::Running {
            return;
        }
        let bag = j.is_bag();
        let Some(c) = j.components.get_mut(component as usize) else {
            return;
        };
        if c.state != ComponentState::Running {
            return;
        }
        let site = c.site.expect("running component has a site");
        match outcome {
            ComponentOutcome::Success => {
                c.state = ComponentState::Finished;
                let v = &mut self.views[site.index()];
                v.consecutive_errors = 0;
                v.bans = 0;
                self.gridway_on_success(now, job, site);
                self.maybe_finish(now, job);
            }
            ComponentOutcome::SoftError => {
                c.state = ComponentState::Finished;
                self.record_soft_error(now, site);
                self.return_to_queue(now, job, Requeue::SoftError);
            }
            ComponentOutcome::ApplicationError | ComponentOutcome::Timeout | ComponentOutcome::OutOfMemory if bag => {
                c.state = ComponentState::Failed;
                self.maybe_finish(now, job);
            }
            ComponentOutcome::ApplicationError | ComponentOutcome::Timeout | ComponentOutcome::OutOfMemory => {
                c.state = ComponentState::Failed;
                let reason = match outcome {
                    ComponentOutcome::Timeout => FailureReason::Timeout,
                    ComponentOutcome::OutOfMemory => FailureReason::OutOfMemory,
                    _ => FailureReason::ApplicationError,
                };
                self.end_job(now, job, JobState::Failed(reason));
            }
        }
    }

    /// Ends a running job whose every started component is done: it succeeds when all of
    /// them (a bag: at least `min_components`) succeeded.
    fn maybe_finish(&mut self, now: Millis, job: JobId) {
        let j = &self.jobs[&job];
        if !j.components.iter().all(|c| c.state.is_done() || c.state == ComponentState::Skipped) {
            return;
        }
        let tasks = j.components.len() as u32;
        let succeeded = j.components.iter().filter(|c| c.state == ComponentState::Finished).count() as u32;
        let needed = j.spec.min_components.unwrap_or(tasks).min(tasks);
        let to = crate::bag::bag_verdict(succeeded, needed, tasks);
        known(&mut self.jobs, job).timeline.finished = Some(now);
        self.set_state(now, job, to);
    }

    /// Ends a job before its time: gives back what it holds (killing its components) and
    /// moves it to the terminal state `to`.
    pub(super) fn end_job(&mut self, now: Millis, job: JobId, to: JobState) {
        self.release(job, Release::Ending);
        self.queues.remove(job);
        known(&mut self.jobs, job).timeline.finished = Some(now);
        self.set_state(now, job, to);
    }

    /// Removes a job in a terminal state from the core (a driver that persisted its final
    /// state need not keep it in memory). Returns the job; `None` if it is unknown or still
    /// active.
    /// A job whose outputs are still pending ([`Scheduler::outputs_registered`]) is not
    /// forgotten either: jobs depending on it wait for them.
    pub fn forget(&mut self, job: JobId) -> Option<Job> {
        let j = self.jobs.get(&job)?;
        if !j.state.is_terminal() || j.outputs_pending {
            return None;
        }
        let bag = j.bag;
        self.dependents.remove(&job);
        self.forget_bag_member(job, bag);
        self.jobs.remove(&job)
    }

    /// Cancels a job in any non-terminal state. Returns false when it is unknown or finished.
    pub fn cancel(&mut self, now: Millis, job: JobId) -> bool {
        let Some(j) = self.jobs.get(&job) else { return false };
        if j.state.is_terminal() {
            return false;
        }
        self.end_job(now, job, JobState::Cancelled);
        true
    }

    pub(super) fn record_soft_error(&mut self, now: Millis, site: SiteId) {
        self.stats.soft_errors += 1;
        self.gridway_on_failure(now, site);
        let threshold = self.config.blacklist_threshold;
        let expiry = self.config.blacklist_expiry_ms;
        let v = &mut self.views[site.index()];
        v.consecutive_errors += 1;
        v.total_errors += 1;
        if !v.blacklisted && v.consecutive_errors >= threshold {
            v.blacklisted = true;
            // Back-off: a site that fails again soon after re-admission stays out longer.
            let factor = 1u64 << v.bans.min(MAX_BAN_DOUBLINGS);
            v.bans = v.bans.saturating_add(1);
            v.blacklisted_until = expiry.map(|e| now.saturating_add(e.max(1).saturating_mul(factor)));
            self.actions.push_back(Action::Blacklist { site });
        }
    }

    /// Aborts claimed/running components and gives back placed processors, reservations and
    /// transfers of a job.
    pub(super) fn release(&mut self, id: JobId, how: Release) {
        if let Some(&(at, _)) = self.claiming.iter().find(|&&(_, j)| j == id) {
            self.claiming.remove(&(at, id));
        }
        if let Some(&(at, _)) = self.reservation_starts.iter().find(|&&(_, j)| j == id) {
            self.reservation_starts.remove(&(at, id));
        }
        // Decisions about this job that the driver has not pulled yet are withdrawn instead of
        // being undone: a claim never issued needs no abort, a transfer never started no cancel.
        let mut unissued_claims = BTreeSet::new();
        let mut unissued_reservations = BTreeSet::new();
        let mut unissued_transfers = BTreeSet::new();
        self.actions.retain(|a| match a {
            Action::Claim { job, component, .. } if *job == id => {
                unissued_claims.insert(*component);
                false
            }
            Action::Reserve { job, component, .. } if *job == id => {
                unissued_reservations.insert(*component);
                false
            }
            Action::StartTransfer { job, key, .. } if *job == id => {
                unissued_transfers.insert(key.clone());
                false
            }
            Action::Launch { job } => *job != id,
            _ => true,
        });
        let job = known(&mut self.jobs, id);
        job.next_claim = None;
        for (i, c) in job.components.iter_mut().enumerate() {
            let Some(site) = c.site else { continue };
            let issued = |set: &BTreeSet<u32>| !set.contains(&(i as u32));
            match c.state {
                ComponentState::Placed => self.views[site.index()].placed_unclaimed -= c.processors,
                ComponentState::Reserved if !issued(&unissued_reservations) => {
                    self.views[site.index()].placed_unclaimed -= c.processors;
                }
                ComponentState::Reserved => {
                    self.views[site.index()].placed_unclaimed -= c.processors;
                    self.actions.push_back(Action::CancelReservation {
                        job: id,
                        component: i as u32,
                        site,
                    });
                }
                ComponentState::Claimed | ComponentState::Running if !issued(&unissued_claims) => {
                    // The core lowered its idle view when it claimed; give it back.
                    self.views[site.index()].idle += c.processors;
                    if c.reserved {
                        // Its reservation was granted and is now unused.
                        self.actions.push_back(Action::CancelReservation {
                            job: id,
                            component: i as u32,
                            site,
                        });
                    }
                }
                ComponentState::Claimed | ComponentState::Running => {
                    self.actions.push_back(Action::Abort {
                        job: id,
                        component: i as u32,
                        site,
                    });
                }
                ComponentState::Unplaced
                | ComponentState::Finished
                | ComponentState::Failed
                | ComponentState::Aborted
                | ComponentState::Skipped => {}
            }
            // A job that ends keeps the record of what ran where (and how it ended); one that
            // goes back to the queue starts over.
            let ran = matches!(c.state, ComponentState::Claimed | ComponentState::Running) && issued(&unissued_claims);
            match how {
                Release::Ending if c.state.is_done() => continue,
                Release::Ending if ran => c.state = ComponentState::Aborted,
                _ => {
                    if job.spec.flexible.is_none() {
                        c.site = None;
                    }
                    c.state = ComponentState::Unplaced;
                }
            }
            c.reserved = false;
        }
        let in_flight: Vec<TransferKey> = job
            .transfers
            .iter()
            .filter(|(k, s)| **s == TransferStatus::InFlight && !unissued_transfers.contains(*k))
            .map(|(k, _)| k.clone())
            .collect();
        for key in in_flight {
            self.actions.push_back(Action::CancelTransfer { job: id, key });
        }
        job.transfers.clear();
    }

    pub(super) fn return_to_queue(&mut self, now: Millis, id: JobId, why: Requeue) {
        let Some(job) = self.jobs.get(&id) else { return };
        if job.state.is_terminal() || job.state == JobState::Queued {
            return;
        }
        self.release(id, Release::Requeue);
        let step = self.config.claim_fraction_step;
        let max_errors = self.config.max_error_resubmissions;
        let job = known(&mut self.jobs, id);
        match why {
            Requeue::JstReached => {
                job.claim_fraction = (job.claim_fraction - step).max(0.0);
                job.jst_returns += 1;
            }
            Requeue::SoftError => job.error_resubmissions += 1,
            Requeue::Preempted | Requeue::ReservationRejected | Requeue::ClaimRejected => {}
        }
        if why == Requeue::SoftError && max_errors.is_some_and(|m| job.error_resubmissions > m) {
            job.timeline.finished = Some(now);
            self.set_state(now, id, JobState::Failed(FailureReason::TooManyErrors));
            return;
        }
        if job.spec.flexible.is_some() {
            job.components.clear();
        }
        job.timeline.queued = now;
        job.timeline.claimed = None;
        job.timeline.started = None;
        let priority = job.priority;
        self.set_state(now, id, JobState::Queued);
        self.queues.push(priority, id);
        self.note_queue_length();
        self.arm_scan(now);
    }

    pub(super) fn set_state(&mut self, now: Millis, id: JobId, to: JobState) {
        if self.scan_watch.trying.is_some_and(|t| t != id) {
            self.scan_watch.disturbed = true;
        }
        let job = known(&mut self.jobs, id);
        let from = job.state;
        if let Err(e) = transition(from, to) {
            panic!("scheduler bug: job {id}: {e}");
        }
        job.state = to;
        // A job that ends held before its begin time (cancelled, never satisfiable) leaves the
        // begin timer: no wake-up for it, however far its begin time.
        if to.is_terminal() && std::mem::take(&mut job.begin_pending) {
            if let Some(at) = job.spec.begin_ms {
                self.begins.remove(&(at, id));
            }
        }
        let job = known(&mut self.jobs, id);
        // Success is seen by dependents once the outputs are registered.
        let outputs_pending = to == JobState::Succeeded && job.spec.stages_out;
        job.outputs_pending = outputs_pending;
        self.actions.push_back(Action::StateChanged {
            job: id,
            from,
            to,
            at: now,
        });
        if (to == JobState::Running || to.is_terminal()) && !outputs_pending {
            self.dependency_event(now, id, to);
        }
    }
}

/// What becomes of a job whose placement is given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Release {
    /// It returns to the placement queue: every component starts over, unplaced.
    Requeue,
    /// It ends: components that ran keep their site and end as aborted (or as they ended).
    Ending,
}

/// Why a job goes back to the placement queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Requeue {
    JstReached,
    SoftError,
    Preempted,
    ReservationRejected,
    ClaimRejected,
}

/// Checks a transition against the state machine.
pub fn transition(from: JobState, to: JobState) -> Result<JobState, IllegalTransition> {
    if from.can_become(to) {
        Ok(to)
    } else {
        Err(IllegalTransition { from, to })
    }
}
