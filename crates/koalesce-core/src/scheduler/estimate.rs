//! The queue-wait estimate the core makes of a site from its own jobs (001 §3.1's "estimate
//! from the LRM's state" for a site whose LRM runs only koalesce's components, the local
//! executor): each component there holds its processors until its expected end (its start
//! plus the runtime estimate at the site's speed), placed and reserved components from their
//! estimated start; and every advance reservation granted through the reservation service
//! there ([`Scheduler::set_service_reservations`]) holds its processors during its time (the
//! components of a job held in one are inside it and not counted again). The driver turns it on per site ([`Scheduler::estimate_queue_from_own_jobs`]);
//! the scheduler then refreshes it before it ranks, so the TTD ranking plans such a site's
//! queue instead of seeing only its idle processors.

use crate::broker::{Profile, QueueEstimate};
use crate::model::{Millis, SiteId};
use crate::state::ComponentState;

use super::Scheduler;

/// A component past its expected end is assumed to end within this long.
pub const OVERRUN_GRACE_MS: Millis = 1000;

impl Scheduler {
    /// Whether the scheduler estimates `site`'s queue from its own jobs at every scan (the
    /// driver's [`Scheduler::update_site_queue_estimate`] is then overwritten).
    pub fn estimate_queue_from_own_jobs(&mut self, site: SiteId, on: bool) {
        if let Some(slot) = self.own_estimates.get_mut(site.index()) {
            *slot = on;
        }
    }

    /// The advance reservations granted through the reservation service at `site` (the
    /// driver's list, replacing the previous one; `site` in each is ignored): they hold
    /// processors in the queue estimate the core makes of the site.
    pub fn set_service_reservations(&mut self, site: SiteId, reservations: Vec<crate::model::HeldReservation>) {
        if let Some(slot) = self.service_reservations.get_mut(site.index()) {
            *slot = reservations;
            self.own_estimated_at = None;
        }
    }

    /// The site's queue as the core's own jobs make it, at `now` (see the module docs).
    pub fn own_queue_estimate(&self, now: Millis, site: SiteId) -> QueueEstimate {
        let s = &self.sites[site.index()];
        let speed = if s.speed.is_finite() && s.speed > 0.0 { s.speed } else { 1.0 };
        let service = &self.service_reservations[site.index()];
        let mut items: Vec<(Millis, Millis, u32)> = service.iter().map(|r| (r.start, r.end, r.processors)).collect();
        for job in self.jobs.values().filter(|j| !j.state.is_terminal()) {
            let inside = job
                .spec
                .preferences
                .held_reservation
                .as_ref()
                .is_some_and(|h| service.iter().any(|r| r.id == h.id));
            if inside {
                continue;
            }
            let exec = ((job.spec.runtime_estimate_ms as f64 / speed).round() as Millis).max(1);
            for c in job.components.iter().filter(|c| c.site == Some(site)) {
                let start = match c.state {
                    ComponentState::Claimed | ComponentState::Running => job.timeline.started.unwrap_or(now).min(now),
                    ComponentState::Placed | ComponentState::Reserved => job.timeline.estimated_start.unwrap_or(now).max(now),
                    _ => continue,
                };
                let end = start.saturating_add(exec).max(now + OVERRUN_GRACE_MS);
                items.push((start, end, c.processors));
            }
        }
        let held = Profile::build(s.processors, now, items);
        QueueEstimate::from_profiles(held.clone(), held)
    }

    /// The wait of a job of `processors` joining `site`'s queue now, by the estimate the
    /// scheduler uses (its own when it makes it, else the driver's); `None` without an
    /// estimate or when the job never fits.
    pub fn queue_wait_estimate(&self, now: Millis, site: SiteId, processors: u32) -> Option<Millis> {
        let own;
        let e = if self.own_estimates.get(site.index()) == Some(&true) {
            own = self.own_queue_estimate(now, site);
            &own
        } else {
            self.queue_estimate(site)?
        };
        e.queue_start(now, processors.max(1), 1).map(|s| s.saturating_sub(now))
    }

    /// Before the broker ranks (once per instant: within it, the scheduler's own bookings
    /// keep the estimate current): the sites whose queue the core estimates get a fresh one.
    pub(super) fn refresh_own_estimates(&mut self, now: Millis) {
        if self.own_estimated_at == Some(now) || !self.own_estimates.contains(&true) {
            return;
        }
        self.own_estimated_at = Some(now);
        for i in 0..self.sites.len() {
            if self.own_estimates[i] {
                let e = self.own_queue_estimate(now, SiteId(i as u32));
                self.update_site_queue_estimate(SiteId(i as u32), e);
            }
        }
    }
}
