//! Consistency checks of the LRM's bookkeeping (used by tests and debug builds).

use std::collections::BTreeMap;

use super::{LocalJobState, LocalRm, NEVER};

/// A broken invariant of the LRM's bookkeeping (a bug), described.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("LRM invariant broken: {0}")]
pub struct InvariantViolation(pub String);

impl LocalRm {
    /// Checks internal consistency: counters match the jobs and claims, `busy_local + busy_grid
    /// ≤ P`, the queue holds exactly the queued jobs, and (unless a reservation-derived claim
    /// has overrun its reservation) the profile stays within `P` at every future instant, so
    /// every reservation can be claimed at its start.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let p = self.cfg.procs;
        if u64::from(self.busy_local) + u64::from(self.busy_grid) > u64::from(p) {
            return Err(InvariantViolation(format!(
                "busy_local {} + busy_grid {} > P {p}",
                self.busy_local, self.busy_grid
            )));
        }
        let mut local = 0u32;
        let mut injected = 0u32;
        for &(end, id) in &self.running {
            let r = &self.jobs[id.0 as usize];
            if r.state != LocalJobState::Running {
                return Err(InvariantViolation(format!("{id:?} in running set but {:?}", r.state)));
            }
            if r.start_ms.map(|s| s + r.runtime_ms) != Some(end) {
                return Err(InvariantViolation(format!("{id:?} has a wrong end in the running set")));
            }
            if end <= self.now {
                return Err(InvariantViolation(format!("{id:?} should have ended at {end} ≤ now {}", self.now)));
            }
            local += r.procs;
            if r.injected {
                injected += r.procs;
            }
        }
        if local != self.busy_local || injected != self.busy_injected {
            return Err(InvariantViolation(format!(
                "busy_local {} / busy_injected {} but running jobs use {local} / {injected}",
                self.busy_local, self.busy_injected
            )));
        }
        let grid: u32 = self.claims.values().map(|c| c.procs).sum();
        if grid != self.busy_grid {
            return Err(InvariantViolation(format!("busy_grid {} but claims hold {grid}", self.busy_grid)));
        }
        let mut qp: BTreeMap<u32, usize> = BTreeMap::new();
        for q in &self.queue {
            let id = q.id;
            let r = &self.jobs[id.0 as usize];
            if (r.procs, r.estimate_ms) != (q.procs, q.estimate_ms) {
                return Err(InvariantViolation(format!("{id:?} has a stale shape in the queue")));
            }
            if r.state != LocalJobState::Queued {
                return Err(InvariantViolation(format!("{id:?} in queue but {:?}", r.state)));
            }
            *qp.entry(r.procs).or_insert(0) += 1;
        }
        if qp != self.queued_procs {
            return Err(InvariantViolation("queued_procs multiset out of sync".into()));
        }
        let n_queued = self.jobs.iter().filter(|r| r.state == LocalJobState::Queued).count();
        if n_queued != self.queue.len() {
            return Err(InvariantViolation(format!(
                "{n_queued} queued jobs but queue length {}",
                self.queue.len()
            )));
        }
        if self.running.len() != self.jobs.iter().filter(|r| r.state == LocalJobState::Running).count() {
            return Err(InvariantViolation("running set out of sync".into()));
        }
        for r in self.reservations.values() {
            if r.end <= self.now {
                return Err(InvariantViolation(format!("reservation {:?} should have expired", r.id)));
            }
        }
        let overrun = self.claims.values().any(|c| matches!(c.reservation_end, Some(e) if e <= self.now));
        if !overrun {
            let prof = self.profile(self.now);
            let m = prof.max_used(self.now, NEVER);
            if m > u64::from(p) {
                return Err(InvariantViolation(format!("profile commits {m} > P {p} processors")));
            }
        }
        Ok(())
    }

    pub(super) fn debug_check(&self) {
        debug_assert!(
            self.busy_local + self.busy_grid <= self.cfg.procs,
            "busy_local {} + busy_grid {} > P {}",
            self.busy_local,
            self.busy_grid,
            self.cfg.procs
        );
    }
}
