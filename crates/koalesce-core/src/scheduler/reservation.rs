//! Claiming with advance reservations: the LRM's answer, and claiming inside the
//! reservations at the JST.

use crate::model::{JobId, Millis};
use crate::state::{ComponentState, JobState};

use super::release::Requeue;
use super::{known, Scheduler};

impl Scheduler {
    /// The LRM answered a reservation request.
    pub fn reservation_answer(&mut self, now: Millis, job: JobId, component: u32, granted: bool) {
        let Some(j) = self.jobs.get(&job) else { return };
        if j.state != JobState::Placed {
            return;
        }
        if !granted {
            // Treat as an unsuccessful placement: try again at a later scan. The refused
            // reservation does not exist, so it is not cancelled (only un-placed).
            if let Some(c) = known(&mut self.jobs, job).components.get_mut(component as usize) {
                if c.state == ComponentState::Reserved {
                    c.state = ComponentState::Placed;
                }
            }
            self.return_to_queue(now, job, Requeue::ReservationRejected);
        }
    }

    /// At the JST, reserved components are claimed inside their reservations.
    pub(super) fn claim_reservations(&mut self, now: Millis, id: JobId) {
        let Some(job) = self.jobs.get(&id) else { return };
        if job.state != JobState::Placed {
            return;
        }
        let reserved: Vec<usize> = job
            .components
            .iter()
            .enumerate()
            .filter(|(_, c)| c.reserved && c.state == ComponentState::Reserved)
            .map(|(i, _)| i)
            .collect();
        // A site blacklisted since placement is not used, reservation or not: re-place the job.
        if reserved
            .iter()
            .any(|&i| job.components[i].site.is_some_and(|s| self.views[s.index()].blacklisted))
        {
            self.return_to_queue(now, id, Requeue::ReservationRejected);
            return;
        }
        for i in reserved {
            self.claim_component(id, i);
        }
        let job = &self.jobs[&id];
        if job.claimed_count() == job.active_count() {
            known(&mut self.jobs, id).timeline.claimed = Some(now);
            self.set_state(now, id, JobState::Claimed);
            self.maybe_launch(now, id);
        }
    }
}
