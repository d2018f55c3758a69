//! `koalesce bench ttd`: the core's cost per TTD placement with one advance reservation per
//! job (001 §5.2.1's scenario: "exactly one reservation is created for each submitted job",
//! about 40 jobs per minute on GT4 and ARC).
//!
//! A driver plays the sites as the daemon's local executor will: each site is a core
//! [`ReservationTable`] that answers the core's `Reserve` actions, its reservations are handed
//! back to the core as the site's queue estimate every `refresh` jobs, and jobs arrive at
//! `rate` per second of virtual time. Every job is single-component with `policy = "ttd"`, placed
//! on submission: it is ranked over every site, gets a reservation at its predicted start, is
//! claimed in it at that start, launched and finished after its runtime. Wall time is measured
//! around the core's calls (submission = ranking + reservation decision) and around the whole
//! loop (core + tables).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use koalesce_core::broker::{QueueEstimate, ReservationRequest, ReservationTable};
use koalesce_core::config::ScanInterval;
use koalesce_core::model::{JobId, Millis, NetworkForecast, PolicyKind, ReplicaCatalogue, Site, SiteId};
use koalesce_core::scheduler::ComponentOutcome;
use koalesce_core::{Action, JobSpec, JobState, Scheduler, SchedulerConfig};

use crate::rng::Rng;

/// Parameters of [`ttd_bench`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TtdBenchParams {
    pub jobs: usize,
    pub sites: usize,
    pub processors: u32,
    /// Virtual arrivals per second.
    pub rate: f64,
    pub runtime_ms: Millis,
    /// Jobs between two queue-estimate refreshes.
    pub refresh: usize,
}

impl Default for TtdBenchParams {
    fn default() -> Self {
        TtdBenchParams {
            jobs: 20_000,
            sites: 4,
            processors: 128,
            rate: 100.0,
            runtime_ms: 1_000,
            refresh: 100,
        }
    }
}

/// What [`ttd_bench`] measured.
#[derive(Debug, Clone)]
pub struct TtdBench {
    pub params: TtdBenchParams,
    pub placed: usize,
    pub reserved: usize,
    pub succeeded: usize,
    /// Wall time inside `Scheduler::submit` (ranking, prediction, reservation decision).
    pub submit: Duration,
    /// Wall time of the whole loop: every core call and every table request.
    pub total: Duration,
    /// Longest single submission.
    pub max_submit: Duration,
}

impl TtdBench {
    pub fn per_job_submit_us(&self) -> f64 {
        self.submit.as_secs_f64() * 1e6 / self.params.jobs.max(1) as f64
    }
    pub fn per_job_total_us(&self) -> f64 {
        self.total.as_secs_f64() * 1e6 / self.params.jobs.max(1) as f64
    }
    /// Jobs per second the core sustains (whole loop).
    pub fn jobs_per_s(&self) -> f64 {
        self.params.jobs as f64 / self.total.as_secs_f64().max(1e-9)
    }
}

/// Runs the benchmark (see the module docs).
pub fn ttd_bench(p: TtdBenchParams) -> TtdBench {
    let sites: Vec<Site> = (0..p.sites)
        .map(|i| Site {
            name: format!("s{i:03}"),
            processors: p.processors,
            speed: 1.0 + (i % 4) as f64 * 0.25,
            supports_reservations: true,
            attributes: Default::default(),
        })
        .collect();
    let config = SchedulerConfig {
        place_on_submit: true,
        scan_interval: ScanInterval::Fixed { interval_ms: 1000 },
        ..SchedulerConfig::default()
    };
    let n = sites.len();
    let mut core = Scheduler::new(config, sites, NetworkForecast::uniform(n, 1e9, 1), ReplicaCatalogue::new());
    let mut tables: Vec<ReservationTable> = (0..n).map(|_| ReservationTable::new(p.processors)).collect();
    let mut ids: BTreeMap<(JobId, u32), koalesce_core::broker::ReservationId> = BTreeMap::new();
    let mut ends: BTreeMap<(Millis, JobId), ()> = BTreeMap::new();
    let mut rng = Rng::new(42);
    let (mut placed, mut reserved, mut succeeded) = (0, 0, 0);
    let mut submit = Duration::ZERO;
    let mut max_submit = Duration::ZERO;
    let gap = (1000.0 / p.rate.max(1e-3)).max(1.0);
    let t0 = Instant::now();
    for i in 0..p.jobs {
        let now = (i as f64 * gap) as Millis;
        // Jobs that end by now.
        while let Some((&(t, job), _)) = ends.first_key_value() {
            if t > now {
                break;
            }
            ends.remove(&(t, job));
            core.component_finished(t, job, 0, ComponentOutcome::Success);
        }
        while let Some(t) = core.poll_timeout().filter(|&t| t <= now) {
            core.handle_timeout(t);
        }
        if i % p.refresh.max(1) == 0 {
            for (s, table) in tables.iter_mut().enumerate() {
                table.expire(now);
                let held = table.iter().map(|r| (r.start, r.end, r.processors));
                core.update_site_queue_estimate(SiteId(s as u32), QueueEstimate::from_starts(p.processors, now, held, []));
            }
        }
        let mut spec = JobSpec::simple(format!("j{i}"), &[1 + rng.below(8) as u32], &[], p.runtime_ms);
        spec.policy = Some(PolicyKind::Ttd);
        let t = Instant::now();
        let _ = core.submit(now, spec);
        let d = t.elapsed();
        submit += d;
        max_submit = max_submit.max(d);
        while let Some(a) = core.poll_action() {
            match a {
                Action::Reserve {
                    job,
                    component,
                    site,
                    processors,
                    start,
                    duration,
                } => {
                    placed += 1;
                    let reply = tables[site.index()].request(now, &ReservationRequest::at(processors, start, duration), None);
                    if let koalesce_core::broker::ReservationReply::Granted { id, .. } = reply {
                        reserved += 1;
                        ids.insert((job, component), id);
                    }
                    core.reservation_answer(now, job, component, reply.is_granted());
                }
                Action::CancelReservation { job, component, site } => {
                    if let Some(id) = ids.remove(&(job, component)) {
                        tables[site.index()].release(id);
                    }
                }
                Action::Launch { job } => {
                    ends.insert((now + p.runtime_ms, job), ());
                }
                Action::StateChanged {
                    to: JobState::Succeeded, ..
                } => succeeded += 1,
                _ => {}
            }
        }
    }
    TtdBench {
        params: p,
        placed,
        reserved,
        succeeded,
        submit,
        total: t0.elapsed(),
        max_submit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_gets_its_reservation_and_runs() {
        let r = ttd_bench(TtdBenchParams {
            jobs: 2000,
            ..TtdBenchParams::default()
        });
        // Placed on submission, one reservation each, granted by the site's table (the core's
        // estimate is refreshed from it, so its predictions hold); at 88% load all but the jobs
        // of the last seconds have finished.
        assert_eq!(r.placed, 2000);
        assert_eq!(r.reserved, 2000);
        assert!(r.succeeded >= 1800, "{}", r.succeeded);
    }
}
