//! Read-only state of the LRM.

use super::{Claim, GridKey, LocalJobId, LocalJobRecord, LocalRm, LrmConfig, Millis, Reservation, NEVER};

impl LocalRm {
    /// The configuration.
    pub fn config(&self) -> &LrmConfig {
        &self.cfg
    }

    /// Number of processors `P`.
    pub fn capacity(&self) -> u32 {
        self.cfg.procs
    }

    /// Time of the last operation seen by this LRM.
    pub fn now(&self) -> Millis {
        self.now
    }

    /// Processors used neither by local jobs nor by grid claims (reserved ones count as idle).
    pub fn idle(&self) -> u32 {
        self.cfg.procs - self.busy_local - self.busy_grid
    }

    /// Processors used by running local jobs (injected ones included).
    pub fn busy_local(&self) -> u32 {
        self.busy_local
    }

    /// Processors used by running injected (dummy) local jobs.
    pub fn busy_injected(&self) -> u32 {
        self.busy_injected
    }

    /// Processors held by grid claims.
    pub fn busy_grid(&self) -> u32 {
        self.busy_grid
    }

    /// Number of local jobs waiting in the queue.
    pub fn queued_local(&self) -> usize {
        self.queue.len()
    }

    /// Number of running local jobs.
    pub fn running_local(&self) -> usize {
        self.running.len()
    }

    /// Instantaneous local utilization `busy_local / P` (0 for an empty site).
    pub fn local_utilization(&self) -> f64 {
        if self.cfg.procs == 0 {
            0.0
        } else {
            f64::from(self.busy_local) / f64::from(self.cfg.procs)
        }
    }

    /// Idle processors set aside for reservations whose window contains the current time.
    pub fn reserved_now(&self) -> u32 {
        self.reserved_at(self.now)
    }

    /// Processors a local job could start on right now: idle minus [`LocalRm::reserved_now`]
    /// (a job also needs room for its whole estimated run; see the module docs).
    pub fn free_now(&self) -> u32 {
        self.idle().saturating_sub(self.reserved_now())
    }

    /// Processors a plain [`LocalRm::claim`] could take now without endangering any
    /// reservation (equals [`LocalRm::idle`] when there are no reservations).
    pub fn claimable(&self) -> u32 {
        if self.reservations.is_empty() {
            return self.idle();
        }
        let prof = self.profile(self.now);
        prof.capacity().saturating_sub(prof.max_used(self.now, NEVER)) as u32
    }

    /// The record of local job `id`, if it exists.
    pub fn job(&self, id: LocalJobId) -> Option<&LocalJobRecord> {
        self.jobs.get(id.0 as usize)
    }

    /// All local job records, in submission (id) order.
    pub fn jobs(&self) -> &[LocalJobRecord] {
        &self.jobs
    }

    /// Queued local jobs in queue order.
    pub fn queue(&self) -> impl Iterator<Item = LocalJobId> + '_ {
        self.queue.iter().map(|q| q.id)
    }

    /// Running local jobs, by increasing actual end.
    pub fn running(&self) -> impl Iterator<Item = LocalJobId> + '_ {
        self.running.iter().map(|&(_, id)| id)
    }

    /// The claim held under `key`, if any.
    pub fn claim_of(&self, key: GridKey) -> Option<&Claim> {
        self.claims.get(&key)
    }

    /// All claims, by key.
    pub fn claims(&self) -> impl Iterator<Item = (GridKey, &Claim)> + '_ {
        self.claims.iter().map(|(k, c)| (*k, c))
    }

    /// The unclaimed reservation held under `key`, if any.
    pub fn reservation(&self, key: GridKey) -> Option<&Reservation> {
        self.reservations.get(&key)
    }

    /// All unclaimed reservations, by key.
    pub fn reservations(&self) -> impl Iterator<Item = (GridKey, &Reservation)> + '_ {
        self.reservations.iter().map(|(k, r)| (*k, r))
    }

    /// Total processor-milliseconds used by local jobs (injected included) up to `now`
    /// (`now` ≥ [`LocalRm::now`]; jobs due to end before `now` but not yet processed count as
    /// running).
    pub fn local_busy_proc_ms(&self, now: Millis) -> u64 {
        self.acc_local + u64::from(self.busy_local) * now.saturating_sub(self.now)
    }

    /// Processor-milliseconds used by injected (dummy) local jobs up to `now`.
    pub fn injected_busy_proc_ms(&self, now: Millis) -> u64 {
        self.acc_injected + u64::from(self.busy_injected) * now.saturating_sub(self.now)
    }

    /// Processor-milliseconds held by grid claims up to `now`.
    pub fn grid_busy_proc_ms(&self, now: Millis) -> u64 {
        self.acc_grid + u64::from(self.busy_grid) * now.saturating_sub(self.now)
    }

    /// The earliest time something is due: a local job end, a reservation start (if later than
    /// [`LocalRm::now`]) or a reservation expiry.
    pub fn next_event_time(&self) -> Option<Millis> {
        let mut t = self.running.first().map(|&(e, _)| e);
        for r in self.reservations.values() {
            let mut consider = |x: Millis| t = Some(t.map_or(x, |t| t.min(x)));
            if r.start > self.now {
                consider(r.start);
            }
            consider(r.end);
        }
        t
    }
}
