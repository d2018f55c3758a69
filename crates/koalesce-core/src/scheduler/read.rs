//! Read access for drivers, metrics and tests.

use std::collections::BTreeSet;

use crate::config::SchedulerConfig;
use crate::model::{JobId, NetworkForecast, Priority, ReplicaCatalogue, Site, SiteId};
use crate::state::{ComponentState, JobState};

use super::{Job, Scheduler, SchedulerStats, SiteView};

impl Scheduler {
    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.jobs.get(&id)
    }
    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values()
    }
    pub fn sites(&self) -> &[Site] {
        &self.sites
    }
    pub fn site_view(&self, site: SiteId) -> &SiteView {
        &self.views[site.index()]
    }
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }
    pub fn catalogue(&self) -> &ReplicaCatalogue {
        &self.catalogue
    }
    pub fn forecast(&self) -> &NetworkForecast {
        &self.forecast
    }
    pub fn queue_length(&self) -> usize {
        self.queues.len()
    }
    pub fn queued(&self, priority: Priority) -> impl Iterator<Item = JobId> + '_ {
        self.queues.queue(priority).iter().copied()
    }
    pub fn stats(&self) -> &SchedulerStats {
        &self.stats
    }
    /// CF's history table H.
    pub fn history(&self) -> &BTreeSet<(SiteId, SiteId)> {
        self.policies.cf.history()
    }
    /// Jobs not yet in a terminal state.
    pub fn active_jobs(&self) -> usize {
        self.jobs.values().filter(|j| !j.state.is_terminal()).count()
    }

    /// Processors per site held by grid components (claimed, waiting or running).
    pub fn claimed_processors(&self, site: SiteId) -> u32 {
        self.jobs
            .values()
            .filter(|j| matches!(j.state, JobState::Placed | JobState::Claimed | JobState::Running))
            .flat_map(|j| j.components.iter())
            .filter(|c| c.site == Some(site) && matches!(c.state, ComponentState::Claimed | ComponentState::Running))
            .map(|c| c.processors)
            .sum()
    }
}
