//! Reproductions of published experiments in the simulator.
//!
//! - [`koala`]: KOALA's experiments on the DAS-2 (000 §4–5, 003 Ch. 5–6): the stable system with
//!   W30/W50, CF/WF with and without replication; CF under a high background load; job spread;
//!   the unreliable testbed; co-allocated versus single-component workloads.
//! - [`das2`]: the DAS-2 testbed and KOALA's parameters as scenarios.
//! - [`measure`]: what a run measures, and means with 95% confidence intervals over seeds.
//! - [`p2p`], [`p2p_checks`], [`p2p_report`]: seed 002's peer-to-peer experiments (Figs. 2–6)
//!   on the [`crate::p2p`] simulator, the seed-versus-koalesce checks and the report files.
//! - [`gridway`]: GridWay's data-location-aware scheduling algorithms (004 §3.4.2, Tables 3 and
//!   4): REQUIREMENTS and RANK with data functions in the core's scan, four algorithms on three
//!   sites, side by side with the seed.
//! - [`broker`]: the broker's co-allocation tests (001 §5.2.2, Tables I and II) and co-allocation
//!   by reservations against KOALA's claiming.
//!
//! An experiment is a list of [`Config`]s (one scenario each), every one run under the same
//! seeds; [`run_configs`] does that and keeps what the reports need.

pub mod broker;
pub mod das2;
pub mod gridway;
pub mod koala;
pub mod measure;
pub mod p2p;
pub mod p2p_checks;
pub mod p2p_report;

use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

use crate::engine;
use crate::metrics::UtilizationSeries;
use crate::scenario::Scenario;
use measure::RunMetrics;

/// One configuration of an experiment.
#[derive(Debug, Clone)]
pub struct Config {
    /// Short unique key, used in file names ("w30-cf-r3").
    pub key: String,
    /// Human-readable label ("W30, CF, 3 replicas").
    pub label: String,
    pub scenario: Scenario,
}

/// The runs of one configuration.
#[derive(Debug, Clone)]
pub struct ConfigResult {
    pub key: String,
    pub label: String,
    pub runs: Vec<RunMetrics>,
    /// Utilization over time of the run with the first seed (for the plots).
    pub timeline: UtilizationSeries,
}

/// Runs every configuration under every seed, calling `progress(done, total, label)` after
/// each run. Runs are independent and deterministic (a (configuration, seed) pair always gives
/// the same result), so they run in parallel on the current rayon thread pool and are put back
/// in (configuration, seed) order: the result does not depend on the number of threads.
pub fn run_configs(configs: &[Config], seeds: &[u64], progress: &(dyn Fn(usize, usize, &str) + Sync)) -> Vec<ConfigResult> {
    let total = configs.len() * seeds.len();
    let done = AtomicUsize::new(0);
    let pairs: Vec<(usize, usize)> = (0..configs.len()).flat_map(|c| (0..seeds.len()).map(move |s| (c, s))).collect();
    let mut results: Vec<(RunMetrics, Option<UtilizationSeries>)> = pairs
        .par_iter()
        .map(|&(ci, si)| {
            let c = &configs[ci];
            let r = engine::run(&c.scenario, seeds[si], &mut |_| {}).unwrap_or_else(|e| panic!("experiment {}: {e}", c.key));
            // The plots show the run with the first seed.
            let timeline = (si == 0).then(|| measure::series(&r));
            let m = RunMetrics::of(&r);
            progress(done.fetch_add(1, Ordering::Relaxed) + 1, total, &c.label);
            (m, timeline)
        })
        .collect();
    let mut out = Vec::with_capacity(configs.len());
    for c in configs.iter().rev() {
        let rest = results.split_off(results.len() - seeds.len());
        let mut timeline = None;
        let mut runs = Vec::with_capacity(seeds.len());
        for (m, t) in rest {
            timeline = timeline.or(t);
            runs.push(m);
        }
        out.push(ConfigResult {
            key: c.key.clone(),
            label: c.label.clone(),
            runs,
            timeline: timeline.unwrap_or(UtilizationSeries {
                start_s: Vec::new(),
                background: Vec::new(),
                grid: Vec::new(),
                pwt: Vec::new(),
                pgt: Vec::new(),
            }),
        });
    }
    out.reverse();
    out
}
