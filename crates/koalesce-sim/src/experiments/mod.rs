//! Reproductions of published experiments in the simulator.
//!
//! - [`koala`]: KOALA's experiments on the DAS-2 (000 §4–5, 003 Ch. 5–6): the stable system with
//!   W30/W50, CF/WF with and without replication; CF under a high background load; job spread;
//!   the unreliable testbed; co-allocated versus single-component workloads.
//! - [`das2`]: the DAS-2 testbed and KOALA's parameters as scenarios.
//! - [`measure`]: what a run measures, and means with 95% confidence intervals over seeds.
//! - [`p2p`], [`p2p_checks`], [`p2p_report`]: seed 002's peer-to-peer experiments (Figs. 2–6)
//!   on the [`crate::p2p`] simulator, the seed-versus-koalesce checks and the report files.
//!
//! An experiment is a list of [`Config`]s (one scenario each), every one run under the same
//! seeds; [`run_configs`] does that and keeps what the reports need.

pub mod das2;
pub mod koala;
pub mod measure;
pub mod p2p;
pub mod p2p_checks;
pub mod p2p_report;

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

/// Runs every configuration under every seed, in order, calling `progress(done, total, label)`
/// after each run. Runs are independent and deterministic: a (configuration, seed) pair always
/// gives the same result.
pub fn run_configs(configs: &[Config], seeds: &[u64], progress: &mut dyn FnMut(usize, usize, &str)) -> Vec<ConfigResult> {
    let total = configs.len() * seeds.len();
    let mut done = 0;
    let mut out = Vec::with_capacity(configs.len());
    for c in configs {
        let mut runs = Vec::with_capacity(seeds.len());
        let mut timeline = None;
        for &seed in seeds {
            let r = engine::run(&c.scenario, seed, &mut |_| {}).unwrap_or_else(|e| panic!("experiment {}: {e}", c.key));
            if timeline.is_none() {
                timeline = Some(measure::series(&r));
            }
            runs.push(RunMetrics::of(&r));
            done += 1;
            progress(done, total, &c.label);
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
    out
}
