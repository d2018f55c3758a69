//! `koalesce bench scan`: one placement scan through the core over many queued jobs and sites.

use std::time::Instant;

use koalesce_core::config::ScanInterval;
use koalesce_core::model::{NetworkForecast, ReplicaCatalogue, Site};
use koalesce_core::{JobSpec, Priority, Scheduler, SchedulerConfig, SiteId};

/// Result of [`scan_bench`].
#[derive(Debug, Clone)]
pub struct ScanBench {
    pub jobs: usize,
    pub sites: usize,
    pub placed: usize,
    pub still_queued: usize,
    pub setup_ms: f64,
    pub scan_ms: f64,
}

/// Builds a scheduler with `sites` sites of 64 processors, mostly full (0–3 idle each, a few
/// with more), queues `jobs` jobs of 1–16 processors (one or two components, mixed policies,
/// all in the high queue so one scan walks all of them) and times one scan.
pub fn scan_bench(jobs: usize, sites: usize) -> ScanBench {
    let t0 = Instant::now();
    let site_list: Vec<Site> = (0..sites)
        .map(|i| Site {
            name: format!("s{i:04}"),
            processors: 64,
            speed: 1.0,
            supports_reservations: false,
            attributes: Default::default(),
        })
        .collect();
    let config = SchedulerConfig {
        scan_interval: ScanInterval::Fixed { interval_ms: 1000 },
        // A pairs table over 500 sites is 250,000 entries; CF runs on it all the same.
        ..SchedulerConfig::default()
    };
    let forecast = NetworkForecast::uniform(sites, 1e9, 1);
    let mut core = Scheduler::new(config, site_list, forecast, ReplicaCatalogue::new());
    // Deterministic pseudo-random (xorshift).
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for s in 0..sites {
        let idle = if s % 50 == 0 { 16 } else { (rnd() % 4) as u32 };
        core.update_site_idle(SiteId(s as u32), idle);
    }
    let policies = [
        koalesce_core::model::PolicyKind::Wf,
        koalesce_core::model::PolicyKind::Cf,
        koalesce_core::model::PolicyKind::Cm,
    ];
    for j in 0..jobs {
        let comps = 1 + (rnd() % 2) as usize;
        let sizes: Vec<u32> = (0..comps).map(|_| 4 + (rnd() % 13) as u32).collect();
        let mut spec = JobSpec::simple(format!("j{j}"), &sizes, &[], 600_000);
        spec.priority = Priority::High;
        spec.policy = Some(policies[j % policies.len()]);
        core.submit(0, spec).expect("valid job");
    }
    // Drop the (empty) actions of submission.
    core.drain_actions().for_each(drop);
    let setup_ms = t0.elapsed().as_secs_f64() * 1e3;
    let at = core.poll_timeout().unwrap_or(1000);
    let before = core.queue_length();
    let t1 = Instant::now();
    core.handle_timeout(at);
    let scan_ms = t1.elapsed().as_secs_f64() * 1e3;
    let after = core.queue_length();
    ScanBench {
        jobs,
        sites,
        placed: before - after,
        still_queued: after,
        setup_ms,
        scan_ms,
    }
}
