//! Driving time: processing what is due, buffered events, busy-time accounting.

use super::{GridKey, LocalJobState, LocalRm, LrmEvent, Millis};

impl LocalRm {
    /// Processes everything due at or before `now` (each instant: ends and expiries, then a
    /// scheduling pass) and returns all events buffered since the last call.
    pub fn advance(&mut self, now: Millis) -> Vec<LrmEvent> {
        self.sync(now);
        self.take_events()
    }

    /// Like [`LocalRm::advance`] but keeps the events buffered.
    pub fn sync(&mut self, now: Millis) {
        debug_assert!(now >= self.now, "time went backwards: {now} < {}", self.now);
        let now = now.max(self.now);
        loop {
            let due_end = self.running.first().map(|&(e, _)| e);
            let due_exp = self.reservations.values().map(|r| r.end).min();
            let t = match (due_end, due_exp) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) | (None, Some(a)) => a,
                (None, None) => break,
            };
            if t > now {
                break;
            }
            let t = t.max(self.now);
            self.touch(t);
            while let Some(&(e, id)) = self.running.first() {
                if e > t {
                    break;
                }
                self.running.pop_first();
                self.finish_job(id, t, LocalJobState::Finished);
                self.events.push(LrmEvent::LocalJobFinished { id });
            }
            let expired: Vec<GridKey> = self.reservations.iter().filter(|(_, r)| r.end <= t).map(|(k, _)| *k).collect();
            for key in expired {
                self.reservations.remove(&key);
                self.events.push(LrmEvent::ReservationExpired { key });
            }
            self.schedule_from(t, 0);
        }
        self.touch(now);
    }

    /// Removes and returns the buffered events.
    pub fn take_events(&mut self) -> Vec<LrmEvent> {
        std::mem::take(&mut self.events)
    }

    /// Runs a full scheduling pass at `now` (normally not needed: every operation already does).
    pub fn schedule(&mut self, now: Millis) {
        self.sync(now);
        self.schedule_from(self.now, 0);
    }

    /// Integrates the busy counters up to `t` and moves the clock there.
    pub(super) fn touch(&mut self, t: Millis) {
        debug_assert!(t >= self.now);
        let dt = t.saturating_sub(self.now);
        self.acc_local += u64::from(self.busy_local) * dt;
        self.acc_injected += u64::from(self.busy_injected) * dt;
        self.acc_grid += u64::from(self.busy_grid) * dt;
        self.now = self.now.max(t);
    }
}
