//! Local jobs and the LRM's own scheduling pass (FCFS, or EASY backfilling).

use super::{LocalJob, LocalJobId, LocalJobRecord, LocalJobState, LocalPolicy, LocalRm, LrmEvent, Millis, Queued, SubmitRejected, NEVER};

impl LocalRm {
    /// Submits a local job at `now` (runtime raised to ≥ 1 ms, estimate to ≥ runtime) and tries
    /// to start it. Rejected if it needs 0 or more than `P` processors.
    pub fn submit_local(&mut self, now: Millis, job: LocalJob) -> Result<LocalJobId, SubmitRejected> {
        if job.procs == 0 || job.procs > self.cfg.procs {
            return Err(SubmitRejected {
                procs: job.procs,
                capacity: self.cfg.procs,
            });
        }
        self.sync(now);
        let now = self.now;
        let id = LocalJobId(self.jobs.len() as u64);
        let runtime_ms = job.runtime_ms.max(1);
        self.jobs.push(LocalJobRecord {
            id,
            procs: job.procs,
            runtime_ms,
            estimate_ms: job.estimate_ms.max(runtime_ms),
            injected: job.injected,
            submit_ms: now,
            start_ms: None,
            end_ms: None,
            state: LocalJobState::Queued,
        });
        self.queue.push_back(Queued {
            id,
            procs: job.procs,
            estimate_ms: self.jobs[id.0 as usize].estimate_ms,
        });
        *self.queued_procs.entry(job.procs).or_insert(0) += 1;
        let first = self.queue.len() - 1;
        self.schedule_from(now, first);
        Ok(id)
    }

    /// Kills local job `id` at `now`, whether queued or running (no event is emitted). Returns
    /// `false` if it does not exist or already ended.
    pub fn kill_local(&mut self, now: Millis, id: LocalJobId) -> bool {
        self.sync(now);
        let now = self.now;
        let Some(rec) = self.jobs.get(id.0 as usize).copied() else {
            return false;
        };
        match rec.state {
            LocalJobState::Queued => {
                let pos = self.queue.iter().position(|q| q.id == id).expect("queued job is in the queue");
                self.queue.remove(pos);
                self.remove_queued_procs(rec.procs);
                let r = &mut self.jobs[id.0 as usize];
                r.state = LocalJobState::Killed;
                r.end_ms = Some(now);
                // The head may have changed: full pass.
                self.schedule_from(now, 0);
                true
            }
            LocalJobState::Running => {
                let start = rec.start_ms.expect("running job has a start");
                let removed = self.running.remove(&(start + rec.runtime_ms, id));
                debug_assert!(removed);
                self.finish_job(id, now, LocalJobState::Killed);
                self.schedule_from(now, 0);
                true
            }
            LocalJobState::Finished | LocalJobState::Killed => false,
        }
    }

    pub(super) fn remove_queued_procs(&mut self, procs: u32) {
        let n = self.queued_procs.get_mut(&procs).expect("queued procs multiset holds the job");
        *n -= 1;
        if *n == 0 {
            self.queued_procs.remove(&procs);
        }
    }

    /// Starts queued job `id` at `now` (the caller removes it from the queue).
    pub(super) fn start_job(&mut self, now: Millis, id: LocalJobId) {
        let r = &mut self.jobs[id.0 as usize];
        debug_assert_eq!(r.state, LocalJobState::Queued);
        r.state = LocalJobState::Running;
        r.start_ms = Some(now);
        let (procs, injected, end) = (r.procs, r.injected, now + r.runtime_ms);
        self.running.insert((end, id));
        self.busy_local += procs;
        if injected {
            self.busy_injected += procs;
        }
        self.remove_queued_procs(procs);
        self.events.push(LrmEvent::LocalJobStarted { id });
        self.debug_check();
    }

    /// Marks running job `id` ended at `now` (already removed from the running set).
    pub(super) fn finish_job(&mut self, id: LocalJobId, now: Millis, state: LocalJobState) {
        let r = &mut self.jobs[id.0 as usize];
        debug_assert_eq!(r.state, LocalJobState::Running);
        r.state = state;
        r.end_ms = Some(now);
        self.busy_local -= r.procs;
        if r.injected {
            self.busy_injected -= r.procs;
        }
    }

    /// Scheduling pass at `now`; queue positions before `first` (other than the head) are known
    /// not to be startable in the current state.
    pub(super) fn schedule_from(&mut self, now: Millis, first: usize) {
        let Some(&min_procs) = self.queued_procs.keys().next() else {
            return;
        };
        if self.free_now() < min_procs {
            return;
        }
        let mut prof = self.profile(now);
        let mut first = first;
        // FCFS part: start heads while they fit.
        while let Some(&q) = self.queue.front() {
            let end = now.saturating_add(q.estimate_ms);
            if !prof.fits(now, end, q.procs) {
                break;
            }
            self.queue.pop_front();
            self.start_job(now, q.id);
            prof.add(now, end, q.procs);
            first = 0;
        }
        if self.cfg.policy == LocalPolicy::Fcfs || self.queue.len() < 2 {
            return;
        }
        // EASY: the blocked head gets a reservation at its shadow time.
        let head = self.queue[0];
        if let Some(shadow) = prof.earliest_fit(now, head.estimate_ms, head.procs) {
            prof.add(shadow, shadow.saturating_add(head.estimate_ms), head.procs);
        }
        // `free`: processors free now; `free_always`: free at every instant from now on (a job
        // this small fits whatever its estimate). Both only change when a job starts.
        let min_procs = u64::from(min_procs);
        let mut free = prof.free_at(now);
        let mut free_always = prof.capacity().saturating_sub(prof.max_used(now, NEVER));
        let mut started = false;
        for i in first.max(1)..self.queue.len() {
            if free < min_procs {
                break;
            }
            let q = self.queue[i];
            let procs = u64::from(q.procs);
            if procs > free {
                continue;
            }
            let end = now.saturating_add(q.estimate_ms);
            if procs <= free_always || prof.fits(now, end, q.procs) {
                self.start_job(now, q.id);
                prof.add(now, end, q.procs);
                free = prof.free_at(now);
                free_always = prof.capacity().saturating_sub(prof.max_used(now, NEVER));
                started = true;
            }
        }
        if started {
            let jobs = &self.jobs;
            self.queue.retain(|q| jobs[q.id.0 as usize].state == LocalJobState::Queued);
        }
    }
}
