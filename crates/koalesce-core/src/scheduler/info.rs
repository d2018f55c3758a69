//! Inputs from the information service and the administrator: idle processors, network
//! forecast, replica catalogue, manual blacklisting.

use crate::model::{Millis, ReplicaCatalogue, SiteId};

use super::Scheduler;

impl Scheduler {
    /// The site's LRM reports `idle` processors (not used by local jobs nor by our claims).
    pub fn update_site_idle(&mut self, site: SiteId, idle: u32) {
        self.views[site.index()].idle = idle;
    }

    /// The information service has a new bandwidth/latency forecast for a pair of sites.
    pub fn update_forecast(&mut self, from: SiteId, to: SiteId, bandwidth_bps: f64, latency_ms: Millis) {
        self.forecast.set(from, to, bandwidth_bps, latency_ms);
    }

    /// The replica catalogue changed (a file registered or a replica added).
    pub fn catalogue_mut(&mut self) -> &mut ReplicaCatalogue {
        self.gridway.catalogue_changed();
        &mut self.catalogue
    }

    /// Blacklists or re-admits a site by hand (an administrator's decision).
    pub fn set_blacklisted(&mut self, site: SiteId, blacklisted: bool) {
        let v = &mut self.views[site.index()];
        v.blacklisted = blacklisted;
        v.blacklisted_until = None;
        if !blacklisted {
            v.consecutive_errors = 0;
            v.bans = 0;
        }
    }
}
