//! `koalesce bench scan`: one placement scan through the core over many queued jobs and sites.

use std::time::Instant;

use koalesce_core::config::ScanInterval;
use koalesce_core::expr::JobExpr;
use koalesce_core::gridway::Queueing;
use koalesce_core::model::{NetworkForecast, PolicyKind, ReplicaCatalogue, Site, SiteAttributes};
use koalesce_core::{JobSpec, Priority, Scheduler, SchedulerConfig, SiteId};

/// Distinct input files (and rank texts) of the jobs with a rank.
const RANK_FILES: usize = 1000;

/// What the queued jobs of [`scan_bench_with`] ask for beyond processors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanVariant {
    /// Processors only (KOALA's WF, CF and CM in turn).
    Plain,
    /// The same jobs, each with 004 (c)'s RANK over one of 1000 files
    /// (`CPU_MHZ + QUEUE_FREENODECOUNT + SIZE_CLOSE_DATA("f<k>") / 135`), breaking the ties of
    /// its KOALA policy.
    Rank,
    /// The same RANK and a REQUIREMENTS (`ARCH = "x86*" & CPU_MHZ >= 1500`) on every job, and
    /// no policy: every job is placed by the `gridway` policy (004 Eq. 1).
    Gridway,
    /// As `Gridway`, under `queueing = "gridway"`: the scan orders all 100,000 jobs by GridWay's
    /// job priority first.
    GridwayQueueing,
}

impl ScanVariant {
    pub const ALL: [ScanVariant; 4] = [
        ScanVariant::Plain,
        ScanVariant::Rank,
        ScanVariant::Gridway,
        ScanVariant::GridwayQueueing,
    ];

    pub fn describe(self) -> &'static str {
        match self {
            ScanVariant::Plain => "no expressions (WF/CF/CM)",
            ScanVariant::Rank => "RANK on every job (WF/CF/CM)",
            ScanVariant::Gridway => "REQUIREMENTS + RANK, gridway policy",
            ScanVariant::GridwayQueueing => "the same, GridWay's job priority order",
        }
    }
}

/// Result of [`scan_bench`].
#[derive(Debug, Clone)]
pub struct ScanBench {
    pub jobs: usize,
    pub sites: usize,
    pub placed: usize,
    pub still_queued: usize,
    pub setup_ms: f64,
    pub scan_ms: f64,
    /// REQUIREMENTS / RANK programs run in the scan, and values served from the cache.
    pub evaluations: u64,
    pub cached: u64,
}

/// [`scan_bench_with`] for jobs without expressions.
pub fn scan_bench(jobs: usize, sites: usize) -> ScanBench {
    scan_bench_with(jobs, sites, ScanVariant::Plain)
}

/// Builds a scheduler with `sites` sites of 64 processors, mostly full (0–3 idle each, a few
/// with more), queues `jobs` jobs of 1–16 processors (one or two components, mixed policies,
/// all in the high queue so one scan walks all of them) and times one scan. With a rank, the
/// sites publish CPU speeds of 1000–3000 MHz and x86_64, and 1000 files of 1–400 MB lie at
/// random sites.
pub fn scan_bench_with(jobs: usize, sites: usize, variant: ScanVariant) -> ScanBench {
    let t0 = Instant::now();
    let site_list: Vec<Site> = (0..sites)
        .map(|i| Site {
            name: format!("s{i:04}"),
            processors: 64,
            speed: 1.0,
            supports_reservations: false,
            attributes: SiteAttributes {
                architecture: "x86_64".into(),
                cpu_mhz: 1000 + (i as u32 * 37) % 2001,
                ..Default::default()
            },
        })
        .collect();
    let config = SchedulerConfig {
        scan_interval: ScanInterval::Fixed { interval_ms: 1000 },
        queueing: if variant == ScanVariant::GridwayQueueing {
            Queueing::Gridway
        } else {
            Queueing::Koala
        },
        // A pairs table over 500 sites is 250,000 entries; CF runs on it all the same.
        ..SchedulerConfig::default()
    };
    let forecast = NetworkForecast::uniform(sites, 1e9, 1);
    // Deterministic pseudo-random (xorshift).
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut catalogue = ReplicaCatalogue::new();
    let with_rank = variant != ScanVariant::Plain;
    let mut ranks = Vec::new();
    if with_rank {
        for f in 0..RANK_FILES {
            let site = SiteId((rnd() % sites.max(1) as u64) as u32);
            catalogue.insert(format!("f{f}"), (1 + rnd() % 400) * 1_000_000, [site]);
            // Compiled once per text, as the server compiles each submitted description once.
            ranks.push(JobExpr::new(&format!("CPU_MHZ + QUEUE_FREENODECOUNT + SIZE_CLOSE_DATA(\"f{f}\") / 135")).unwrap());
        }
    }
    let requirements = JobExpr::new("ARCH = \"x86*\" & CPU_MHZ >= 1500").unwrap();
    let mut core = Scheduler::new(config, site_list, forecast, catalogue);
    for s in 0..sites {
        let idle = if s % 50 == 0 { 16 } else { (rnd() % 4) as u32 };
        core.update_site_idle(SiteId(s as u32), idle);
    }
    let policies = [PolicyKind::Wf, PolicyKind::Cf, PolicyKind::Cm];
    for j in 0..jobs {
        let comps = 1 + (rnd() % 2) as usize;
        let sizes: Vec<u32> = (0..comps).map(|_| 4 + (rnd() % 13) as u32).collect();
        let mut spec = JobSpec::simple(format!("j{j}"), &sizes, &[], 600_000);
        spec.priority = Priority::High;
        spec.policy = Some(policies[j % policies.len()]);
        if with_rank {
            spec.rank = Some(ranks[j % RANK_FILES].clone());
        }
        if matches!(variant, ScanVariant::Gridway | ScanVariant::GridwayQueueing) {
            spec.requirements = Some(requirements.clone());
            spec.policy = None;
        }
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
    let m = core.match_stats();
    ScanBench {
        jobs,
        sites,
        placed: before - after,
        still_queued: after,
        setup_ms,
        scan_ms,
        evaluations: m.evaluations,
        cached: m.cached,
    }
}
