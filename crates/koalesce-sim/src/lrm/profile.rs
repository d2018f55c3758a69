//! The availability profile: a step function of committed processors over time (see the
//! module docs of [`super`]). The step function is the core's [`Profile`], the same one the
//! broker's reservation tables and queue estimates use, so the simulated LRM decides
//! reservations (`fits`, `earliest_fit` = T_next) with the core's code.

pub(super) use koalesce_core::broker::Profile;

use super::{LocalRm, Millis, NEVER};

impl LocalRm {
    /// The committed-processor profile from `now` (see the module docs).
    pub(super) fn profile(&self, now: Millis) -> Profile {
        let jobs = self.running.iter().map(|&(_, id)| {
            let r = &self.jobs[id.0 as usize];
            let start = r.start_ms.expect("running job has a start");
            let est_end = (start + r.estimate_ms).max(now + 1);
            (start, est_end, r.procs)
        });
        let claims = self.claims.values().map(|c| {
            let end = match c.reservation_end {
                Some(e) if e > now => e,
                _ => NEVER,
            };
            (c.since, end, c.procs)
        });
        let res = self.reservations.values().map(|r| (r.start, r.end, r.procs));
        Profile::build(self.cfg.procs, now, jobs.chain(claims).chain(res))
    }
}
