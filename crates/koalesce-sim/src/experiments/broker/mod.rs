//! The broker's published experiment (001 §5.2.2, Tables I and II) reproduced with the core's
//! Algorithm 1 and reservation tables, and a comparison nobody published: co-allocation by
//! reservations against KOALA's claiming on one workload in the simulator.
//!
//! - [`tables`]: 1000 co-allocation requests per seed of four one-hour jobs over four machines
//!   with random background reservations, homogeneous and heterogeneous, under the seed's
//!   reading of Steps 15–16 and the exhaustive one, and variants for the setup details the seed
//!   leaves open.
//! - [`compare`]: W30 and W50 on the DAS-2 under KOALA's claiming (CF, WF) and under
//!   co-allocation by reservations (ε = 1 and 5 minutes).
//! - [`report`]: the tables side by side with the seed, with verdicts, CSV and SVG plots.
//!
//! Runs are independent and deterministic; they run in parallel (rayon) and are collected in a
//! fixed order, so the output is the same bytes whatever the number of threads.

pub mod compare;
pub mod report;
pub mod tables;

use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

use compare::{CompareConfig, CompareRun};
use tables::{TableRun, TableSetup};

/// How much to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Seeds; every table configuration runs `runs` requests per seed, every comparison
    /// configuration one simulation per seed.
    pub seeds: Vec<u64>,
    /// Co-allocation requests per seed and table configuration (the seed ran 1000).
    pub runs: usize,
    /// Fraction of W30/W50's 200 jobs.
    pub scale: f64,
    pub tables: bool,
    pub compare: bool,
}

impl Options {
    /// `seeds` seeds of 1000 requests, the full workloads.
    pub fn full(seeds: usize) -> Options {
        Options {
            seeds: (1..=seeds.max(1) as u64).collect(),
            runs: 1000,
            scale: 1.0,
            tables: true,
            compare: true,
        }
    }

    /// A fast, noisier run: 200 requests per seed, a quarter of the jobs.
    pub fn quick(seeds: usize) -> Options {
        Options {
            runs: 200,
            scale: 0.25,
            ..Options::full(seeds)
        }
    }

    /// Runs the experiment will make (for a progress bar): simulations plus table seeds.
    pub fn work(&self) -> usize {
        let t = if self.tables {
            tables::setups().len() * self.seeds.len()
        } else {
            0
        };
        let c = if self.compare {
            compare::configs(self.scale).len() * self.seeds.len()
        } else {
            0
        };
        t + c
    }
}

/// One table configuration: per seed, its runs.
#[derive(Debug, Clone)]
pub struct TableResult {
    pub setup: TableSetup,
    pub per_seed: Vec<Vec<TableRun>>,
}

impl TableResult {
    pub fn runs(&self) -> impl Iterator<Item = &TableRun> {
        self.per_seed.iter().flatten()
    }
}

/// One comparison configuration: per seed, its run; the utilization plot of the first seed.
#[derive(Debug, Clone)]
pub struct CompareResult {
    pub key: String,
    pub label: String,
    /// For plot axes.
    pub short: String,
    pub load: u32,
    /// Co-allocation by reservations (else KOALA's claiming).
    pub reservations: bool,
    pub runs: Vec<CompareRun>,
    pub utilization_svg: String,
}

/// Everything the experiment produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub options: Options,
    pub tables: Vec<TableResult>,
    pub compare: Vec<CompareResult>,
}

/// Runs the experiment on the current rayon pool, calling `progress(done, total)` after each
/// unit of work (from any thread).
pub fn run(options: &Options, progress: &(dyn Fn(usize, usize) + Sync)) -> Outcome {
    let total = options.work();
    let done = AtomicUsize::new(0);
    let tick = || progress(done.fetch_add(1, Ordering::Relaxed) + 1, total);
    let setups = if options.tables { tables::setups() } else { Vec::new() };
    let table_work: Vec<(usize, u64)> = (0..setups.len()).flat_map(|i| options.seeds.iter().map(move |&s| (i, s))).collect();
    let table_runs: Vec<Vec<TableRun>> = table_work
        .par_iter()
        .map(|&(i, seed)| {
            let r = tables::run_seed(&setups[i], seed, options.runs);
            tick();
            r
        })
        .collect();
    let mut chunks = table_runs.into_iter();
    let tables = setups
        .iter()
        .map(|&setup| TableResult {
            setup,
            per_seed: chunks.by_ref().take(options.seeds.len()).collect(),
        })
        .collect();
    let configs: Vec<CompareConfig> = if options.compare {
        compare::configs(options.scale)
    } else {
        Vec::new()
    };
    let sim_work: Vec<(usize, usize)> = (0..configs.len())
        .flat_map(|i| (0..options.seeds.len()).map(move |k| (i, k)))
        .collect();
    let sims: Vec<(CompareRun, Option<String>)> = sim_work
        .par_iter()
        .map(|&(i, k)| {
            let (run, r) = compare::run(&configs[i], options.seeds[k]);
            tick();
            (run, (k == 0).then(|| crate::metrics::utilization_svg(&r)))
        })
        .collect();
    let mut sims = sims.into_iter();
    let compare = configs
        .iter()
        .map(|c| {
            let mut svg = String::new();
            let runs = sims
                .by_ref()
                .take(options.seeds.len())
                .map(|(run, s)| {
                    if let Some(s) = s {
                        svg = s;
                    }
                    run
                })
                .collect();
            CompareResult {
                key: c.key.clone(),
                label: c.label.clone(),
                short: c.short.clone(),
                load: c.load,
                reservations: c.reservations,
                runs,
                utilization_svg: svg,
            }
        })
        .collect();
    Outcome {
        options: options.clone(),
        tables,
        compare,
    }
}
