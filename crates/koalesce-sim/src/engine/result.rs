//! Turning a finished simulation into its [`SimResult`].

use super::*;

impl Simulation {
    pub(super) fn result(self, horizon_reached: bool) -> SimResult {
        let names: Vec<String> = self.sites.iter().map(|s| s.name.clone()).collect();
        let jobs = self
            .scheduler
            .jobs()
            .map(|j| {
                let tl = &j.timeline;
                JobRecord {
                    id: j.id,
                    name: j.spec.name.clone(),
                    state: j.state,
                    priority: j.spec.priority.name(),
                    submit: tl.submitted,
                    placed: tl.placed,
                    claimed: tl.claimed,
                    start: tl.started,
                    end: tl.finished,
                    ftt_ms: tl.ftt_ms,
                    components: j.components.len(),
                    component_size: j.components.first().map(|c| c.processors).unwrap_or(0),
                    size: j.total_processors(),
                    sites: j.sites().iter().map(|s| names[s.index()].clone()).collect(),
                    placement_tries: j.placement_tries,
                    claiming_tries: j.claiming_tries,
                    total_placement_ms: tl.total_placement_ms,
                    error_resubmissions: j.error_resubmissions,
                    preemptions: j.preemptions,
                    jst_returns: j.jst_returns,
                    start_delay_ms: match (tl.estimated_start, tl.first_estimated_start, tl.started) {
                        (Some(last), Some(first), Some(_)) => Some(last.saturating_sub(first)),
                        _ => None,
                    },
                    transfers: j
                        .components
                        .iter()
                        .map(|c| c.sources.iter().filter(|s| Some(s.from) != c.site).count() as u32)
                        .sum(),
                    worker_copy_ms: self.worker_copy_of.get(&j.id).copied().unwrap_or(0),
                    predicted_start: j.prediction.map(|p| p.start()),
                    predicted_delivery: j.prediction.map(|p| p.delivery()),
                    placement: j
                        .components
                        .iter()
                        .map(|c| ComponentRecord {
                            site: c.site.map(|s| names[s.index()].clone()),
                            processors: c.processors,
                        })
                        .collect(),
                }
            })
            .collect();
        let n = self.sites.len();
        let forecast = self.scheduler.forecast();
        let forecast_mbps = (0..n)
            .map(|a| {
                (0..n)
                    .map(|b| {
                        if a == b {
                            0.0
                        } else {
                            forecast.get(SiteId(a as u32), SiteId(b as u32)).0 / 1e6
                        }
                    })
                    .collect()
            })
            .collect();
        let bags = self
            .bags
            .values()
            .map(|(name, needed, tasks)| {
                let states = tasks.iter().map(|t| self.scheduler.job(*t).map_or(JobState::Queued, |j| j.state));
                BagRecord {
                    name: name.clone(),
                    tasks: tasks.clone(),
                    progress: koalesce_core::bag::BagProgress::of(states, *needed),
                }
            })
            .collect();
        SimResult {
            bags,
            forecast_mbps,
            scenario: self.scenario_name,
            policy: self.scheduler.config().default_policy.name().to_string(),
            seed: self.seed,
            total_processors: self.sites.iter().map(|s| s.processors as u64).sum(),
            site_processors: self.sites.iter().map(|s| s.processors).collect(),
            site_names: names,
            jobs,
            rejected: self.rejected,
            bucket_ms: self.bucket_ms,
            timeline: self.timeline,
            site_totals: self.site_totals,
            end_ms: self.now,
            last_arrival_ms: self.arrivals.last().map(|a| a.submit_ms).unwrap_or(0),
            events: self.events,
            max_queue_length: self.scheduler.stats().max_queue_length,
            blacklisted: self.blacklisted,
            soft_errors: self.scheduler.stats().soft_errors,
            transferred_bytes: self.network.bytes_delivered(),
            horizon_reached,
            invariant_violations: self.violations,
            reservations_granted: self.reservations.0,
            reservations_refused: self.reservations.1,
            reservation_claims_refused: self.reservations.2,
        }
    }
}
