//! Seed 004's scheduling-algorithm review (§3.4.2, Tables 3 and 4) in the simulator: GridWay's
//! REQUIREMENTS and RANK with data functions, evaluated by the core's placement scan.
//!
//! The setup, as 004 §3.4.2 gives it: three sites, A and B publishing CPU_MHZ 2800 and C 1001;
//! jobs take about 500 s at A or B and 675 s at C once their data is there; ten jobs per
//! algorithm, each reading one of ten files of 3–405 MB held at C; the four algorithms
//!
//! - (a) `RANK = CPU_MHZ + QUEUE_FREENODECOUNT`,
//! - (b) the same with `REQUIREMENTS = CLOSE_DATA("myfile")`,
//! - (c) `RANK = CPU_MHZ + QUEUE_FREENODECOUNT + SIZE_CLOSE_DATA("myfile") / 135`,
//! - (d) the same with `/ 68`.
//!
//! What the seed leaves open is reconstructed from its Table 3 ([`table3`]):
//! - processing takes 509 s at A and B and 670 s at C (Table 3's usual values);
//! - a transfer from C's storage to a worker node at A or B costs an 8 s start-up plus the file
//!   at the throughput of one stream, drawn per transfer from the 15 throughputs Table 3's
//!   transfers of 45 MB or more reached ([`Network`] says which runs' throughputs);
//! - a job at C first copies its file from C's storage to the worker node: 8 s plus a time per
//!   GB drawn from Table 3's 21 such copies;
//! - A and B publish 8–44 free processors (the range of their Table 3 ranks), drawn per seed;
//!   C publishes 200 (the value its rank shows when (c)'s 225 MB job was matched), or 34–53
//!   (its ranks in (b)) in a variant;
//! - the ten jobs of an algorithm are submitted together, in order of file size, and run in a
//!   simulation of their own (the four algorithms ran one after another on the real grid); the
//!   core schedules them with GridWay's queueing, a scan every 30 s (GridWay's default), and
//!   each job's processors claimed at placement (GridWay submits at once; the wrapper then
//!   copies the input on the worker node). A job's time runs from its placement to its end.
//!
//! Runs are independent and deterministic; they run in parallel (rayon) and are collected in a
//! fixed order, so the output is the same bytes whatever the number of threads.

pub mod report;
pub mod table3;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use koalesce_core::config::ScanInterval;
use koalesce_core::gridway::Queueing;
use koalesce_core::model::{Millis, SiteAttributes};
use koalesce_core::SchedulerConfig;
use rayon::prelude::*;

use crate::engine;
use crate::rng::Rng;
use crate::scenario::{ExplicitJob, FileSpec, NetworkSection, Scenario, SiteSpec, WorkerCopySpec, WorkloadSpec};
use table3::{COPY_OVERHEAD_S, SIZES_MB};

/// Processing time of a job at A or B (a site of speed 1), seconds.
pub const PROC_AB_S: f64 = 509.0;
/// Processing time at C, seconds.
pub const PROC_C_S: f64 = 670.0;

/// One of 004's four scheduling algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Alg {
    A,
    B,
    C,
    D,
}

impl Alg {
    pub const ALL: [Alg; 4] = [Alg::A, Alg::B, Alg::C, Alg::D];

    /// "(a)" …
    pub fn id(self) -> &'static str {
        match self {
            Alg::A => "(a)",
            Alg::B => "(b)",
            Alg::C => "(c)",
            Alg::D => "(d)",
        }
    }

    /// The seed's name for it (004 §3.4.2).
    pub fn label(self) -> &'static str {
        match self {
            Alg::A => "data ignored",
            Alg::B => "jobs to data",
            Alg::C => "balanced (/135)",
            Alg::D => "transfer-penalized (/68)",
        }
    }

    /// REQUIREMENTS and RANK of the job reading `file` (004 §3.4.2, "myfile" replaced).
    pub fn expressions(self, file: &str) -> (Option<String>, String) {
        let base = "CPU_MHZ + QUEUE_FREENODECOUNT";
        match self {
            Alg::A => (None, base.to_string()),
            Alg::B => (Some(format!("CLOSE_DATA(\"{file}\")")), base.to_string()),
            Alg::C => (None, format!("{base} + SIZE_CLOSE_DATA(\"{file}\") / 135")),
            Alg::D => (None, format!("{base} + SIZE_CLOSE_DATA(\"{file}\") / 68")),
        }
    }
}

/// Where the throughput of each remote transfer comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Network {
    /// Drawn from the 15 throughputs of all Table 3 runs (one network for all algorithms).
    Pooled,
    /// Drawn from the throughputs of the algorithm's own Table 3 run (each algorithm on its own
    /// day's network; calibrated: it replays the seed's measurements).
    PerRun,
    /// Every transfer at this many MB/s.
    Fixed(f64),
}

/// What C publishes as its free processors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CFree {
    Fixed(u32),
    /// Drawn per seed, inclusive.
    Range(u32, u32),
}

/// One setup of the experiment (the base and its variants).
#[derive(Debug, Clone, PartialEq)]
pub struct Setup {
    /// Short unique key ("base", "per-run", "mbps-1.00").
    pub key: String,
    pub label: String,
    pub network: Network,
    pub c_free: CFree,
    /// The copy to the worker node of a job at C.
    pub worker_copy: bool,
    /// Part of the WAN-throughput sweep (plotted, not tabled).
    pub sweep: bool,
}

impl Setup {
    /// The reconstruction described in the module docs.
    pub fn base() -> Setup {
        Setup {
            key: "base".into(),
            label: "reconstruction (throughputs of all runs pooled)".into(),
            network: Network::Pooled,
            c_free: CFree::Fixed(200),
            worker_copy: true,
            sweep: false,
        }
    }

    /// The base with every transfer at `mb_per_s`.
    pub fn fixed(mb_per_s: f64) -> Setup {
        Setup {
            key: format!("mbps-{mb_per_s:.2}"),
            label: format!("every transfer at {mb_per_s:.2} MB/s"),
            network: Network::Fixed(mb_per_s),
            sweep: true,
            ..Setup::base()
        }
    }
}

/// The throughputs of the sweep, MB/s.
pub fn sweep_rates() -> Vec<f64> {
    (3..=20).map(|i| i as f64 / 10.0).collect()
}

/// Every setup: the base, its variants, then the sweep.
pub fn setups() -> Vec<Setup> {
    let mut v = vec![
        Setup::base(),
        Setup {
            key: "per-run".into(),
            label: "each algorithm on its own run's throughputs (calibrated)".into(),
            network: Network::PerRun,
            ..Setup::base()
        },
        Setup {
            key: "c-free-b".into(),
            label: "C publishes 34–53 free processors, as its ranks in (b)".into(),
            c_free: CFree::Range(34, 53),
            ..Setup::base()
        },
        Setup {
            key: "no-copy".into(),
            label: "no copy to the worker node at C".into(),
            worker_copy: false,
            ..Setup::base()
        },
    ];
    v.extend(sweep_rates().into_iter().map(Setup::fixed));
    v
}

/// How much to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub seeds: Vec<u64>,
    pub setups: Vec<Setup>,
}

impl Options {
    /// Every setup under seeds 1..=n.
    pub fn full(seeds: usize) -> Options {
        Options {
            seeds: (1..=seeds.max(1) as u64).collect(),
            setups: setups(),
        }
    }

    pub fn runs(&self) -> usize {
        self.setups.len() * Alg::ALL.len() * self.seeds.len()
    }
}

/// The file of size `mb`.
pub fn file_name(mb: u32) -> String {
    format!("file{mb:03}MB")
}

/// The free processors A, B and C publish under `setup` with `seed` (the same for the four
/// algorithms of a seed: they are compared under common conditions).
pub fn free_counts(setup: &Setup, seed: u64) -> [u32; 3] {
    let mut rng = Rng::seed_from(seed, 0x6672_6565);
    let a = rng.range_inclusive_u64(8, 44) as u32;
    let b = rng.range_inclusive_u64(8, 44) as u32;
    let c = match setup.c_free {
        CFree::Fixed(n) => n,
        CFree::Range(lo, hi) => rng.range_inclusive_u64(lo as u64, hi as u64) as u32,
    };
    [a, b, c]
}

/// The simulation of `alg` under `setup` with `seed`.
pub fn scenario(alg: Alg, setup: &Setup, seed: u64) -> Scenario {
    let free = free_counts(setup, seed);
    let site = |name: &str, processors: u32, mhz: u32, speed: f64| SiteSpec {
        name: name.into(),
        processors,
        speed,
        reservations: false,
        lan_mbps: None,
        local_policy: Default::default(),
        background_trace: None,
        storage_only: false,
        background_band: None,
        attributes: SiteAttributes {
            architecture: "i686".into(),
            os_name: "Linux".into(),
            cpu_mhz: mhz,
            lrms_type: "pbs".into(),
            ..Default::default()
        },
    };
    let all = [Alg::A, Alg::B, Alg::C, Alg::D];
    let remote = match setup.network {
        Network::Pooled => table3::remote_mb_per_s(&all),
        Network::PerRun => match table3::remote_mb_per_s(&[alg]) {
            v if v.is_empty() => table3::remote_mb_per_s(&all),
            v => v,
        },
        Network::Fixed(r) => vec![r],
    };
    let local = match setup.network {
        Network::PerRun => match table3::local_s_per_gb(&[alg]) {
            v if v.is_empty() => table3::local_s_per_gb(&all),
            v => v,
        },
        _ => table3::local_s_per_gb(&all),
    };
    let jobs = SIZES_MB
        .iter()
        .map(|&mb| {
            let file = file_name(mb);
            let (requirements, rank) = alg.expressions(&file);
            ExplicitJob {
                name: Some(format!("{mb}MB")),
                submit_s: 0.0,
                components: vec![1],
                sites: Vec::new(),
                runtime_s: PROC_AB_S,
                files: vec![file],
                priority: Default::default(),
                requirements,
                rank: Some(rank),
                min_components: None,
                failing_components: Vec::new(),
                tasks: None,
                min_tasks: None,
                failing_tasks: Vec::new(),
            }
        })
        .collect();
    let s = Scenario {
        name: format!("gridway-{}-{}", alg.id(), setup.key),
        seed,
        horizon_s: Some(24 * 3600),
        sample_interval_s: 60,
        sites: vec![
            site("A", free[0], 2800, 1.0),
            site("B", free[1], 2800, 1.0),
            site("C", free[2], 1001, PROC_AB_S / PROC_C_S),
        ],
        network: NetworkSection {
            // Neither the storage nor the WAN links limit a transfer: one stream does.
            lan_mbps: 10_000.0,
            wan_mbps: 10_000.0,
            latency_ms: (COPY_OVERHEAD_S * 1000.0) as Millis,
            links: Vec::new(),
            stream_mbps: remote.iter().map(|mb| mb * 8.0).collect(),
            worker_copy: setup.worker_copy.then_some(WorkerCopySpec {
                overhead_s: COPY_OVERHEAD_S,
                s_per_gb: local,
            }),
        },
        files: SIZES_MB
            .iter()
            .map(|&mb| FileSpec {
                name: file_name(mb),
                size_gb: mb as f64 / 1000.0,
                replicas: vec!["C".into()],
            })
            .collect(),
        workload: WorkloadSpec::Jobs { jobs },
        background: Default::default(),
        scheduler: SchedulerConfig {
            queueing: Queueing::Gridway,
            scan_interval: ScanInterval::Fixed { interval_ms: 30_000 },
            claim_fraction: 0.0,
            ..SchedulerConfig::default()
        },
        faults: Default::default(),
        base_dir: PathBuf::new(),
        path: PathBuf::from(format!("<experiment gridway {}>", setup.key)),
    };
    if let Err(e) = s.validate() {
        panic!("experiment gridway: invalid scenario: {e}");
    }
    s
}

/// One job of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRun {
    pub size_mb: u32,
    pub site: String,
    /// From placement to the input at the site (0 when it was there).
    pub transfer_s: f64,
    /// The copy to the worker node (jobs at C).
    pub copy_s: f64,
    pub proc_s: f64,
    /// Placement to end.
    pub job_s: f64,
}

/// One algorithm under one setup and seed.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub alg: Alg,
    pub seed: u64,
    pub free: [u32; 3],
    pub jobs: Vec<JobRun>,
    pub avg_job_s: f64,
    pub transfers: u32,
}

/// Simulates `alg` under `setup` with `seed`.
pub fn run_one(alg: Alg, setup: &Setup, seed: u64) -> Run {
    let sc = scenario(alg, setup, seed);
    let r = engine::run(&sc, seed, &mut |_| {}).unwrap_or_else(|e| panic!("experiment gridway: {e}"));
    let s = |ms: Millis| ms as f64 / 1000.0;
    let mut jobs: Vec<JobRun> = r
        .jobs
        .iter()
        .map(|j| {
            let (placed, start, end) = (
                j.placed.expect("every job is placed"),
                j.start.expect("every job starts"),
                j.end.expect("every job ends"),
            );
            let copy = s(j.worker_copy_ms);
            JobRun {
                size_mb: j.name.trim_end_matches("MB").parse().expect("job names are sizes"),
                site: j.sites.first().cloned().unwrap_or_default(),
                transfer_s: s(start - placed),
                copy_s: copy,
                proc_s: s(end - start) - copy,
                job_s: s(end - placed),
            }
        })
        .collect();
    jobs.sort_by_key(|j| j.size_mb);
    Run {
        alg,
        seed,
        free: free_counts(setup, seed),
        avg_job_s: jobs.iter().map(|j| j.job_s).sum::<f64>() / jobs.len().max(1) as f64,
        transfers: r.jobs.iter().map(|j| j.transfers).sum(),
        jobs,
    }
}

/// The runs of one setup: per algorithm (in [`Alg::ALL`] order), one run per seed.
#[derive(Debug, Clone)]
pub struct SetupResult {
    pub setup: Setup,
    pub runs: Vec<Vec<Run>>,
}

impl SetupResult {
    pub fn of(&self, alg: Alg) -> &[Run] {
        &self.runs[alg as usize]
    }
}

/// Everything the report needs.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub seeds: Vec<u64>,
    pub results: Vec<SetupResult>,
}

impl Outcome {
    pub fn setup(&self, key: &str) -> Option<&SetupResult> {
        self.results.iter().find(|r| r.setup.key == key)
    }
}

/// Runs every (setup, algorithm, seed), in parallel on the current rayon pool, calling
/// `progress(done, total)` after each.
pub fn run(opts: &Options, progress: &(dyn Fn(usize, usize) + Sync)) -> Outcome {
    let total = opts.runs();
    let done = AtomicUsize::new(0);
    let work: Vec<(usize, Alg, u64)> = (0..opts.setups.len())
        .flat_map(|s| {
            Alg::ALL
                .into_iter()
                .flat_map(move |a| opts.seeds.iter().map(move |&seed| (s, a, seed)))
        })
        .collect();
    let runs: Vec<Run> = work
        .par_iter()
        .map(|&(s, alg, seed)| {
            let r = run_one(alg, &opts.setups[s], seed);
            progress(done.fetch_add(1, Ordering::Relaxed) + 1, total);
            r
        })
        .collect();
    let mut it = runs.into_iter();
    let results = opts
        .setups
        .iter()
        .map(|setup| SetupResult {
            setup: setup.clone(),
            runs: Alg::ALL.iter().map(|_| it.by_ref().take(opts.seeds.len()).collect()).collect(),
        })
        .collect();
    Outcome {
        seeds: opts.seeds.clone(),
        results,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_run_by_hand() {
        // Every transfer at 1 MB/s: (c) moves the five small files, each job at A/B takes
        // 8 s + size s + 509 s, each at C 670 s after its copy.
        let r = run_one(Alg::C, &Setup::fixed(1.0), 1);
        assert_eq!(r.transfers, 5);
        for j in &r.jobs {
            if j.size_mb <= 180 {
                assert!(j.site == "A" || j.site == "B", "{j:?}");
                assert!((j.transfer_s - (8.0 + j.size_mb as f64)).abs() <= 0.002, "{j:?}");
                assert!((j.proc_s - 509.0).abs() <= 0.002 && j.copy_s == 0.0, "{j:?}");
            } else {
                assert_eq!(j.site, "C");
                assert_eq!(j.transfer_s, 0.0);
                assert!(j.copy_s >= 8.0 && (j.proc_s - 670.0).abs() <= 0.002, "{j:?}");
            }
            assert!((j.job_s - (j.transfer_s + j.copy_s + j.proc_s)).abs() < 1e-9);
        }
    }
}
