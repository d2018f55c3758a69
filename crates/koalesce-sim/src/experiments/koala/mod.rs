//! KOALA's published experiments (000 §4–5; 003 §5.1, §5.2, Ch. 6) reproduced in the
//! simulator, each compared with what the seeds report.
//!
//! | experiment | seeds | configurations |
//! |---|---|---|
//! | [`Exp::Stable`] | 000 §4–5, 003 §5.1.1–5.1.6 | W30, W50 × CF, WF × files unreplicated, at 3 file servers |
//! | [`Exp::HighBackground`] | 000 §5.4, 003 §5.1.8 | W30, CF, 3 replicas, background 50% and 60%, under 003's and 000's rules |
//! | [`Exp::Spread`] | 003 §5.1.7 | 2 or 4 components of 4–24, one 2 GB file × CF, WF × replicas |
//! | [`Exp::Unreliable`] | 003 §5.2 | 500 jobs of size 36/72, high and low priority, Delft faulty; one queue per scan and one cycle per 4 minutes |
//! | [`Exp::Runners`] | 003 §6.1–6.2 | W_nc and W_c (Table 6.1) on Table 6.2's processors; at 4 jobs/min; with soft errors |
//! | [`Exp::Calibration`] | 003 §5.1.5 | W30 under a sweep of the transfer efficiency and with free local replicas |
//! | [`Exp::Sensitivity`] | 000 §2.1, 003 §2.1.1, §5.1.7, §5.2 | W30 under other networks, scan-only placement, dummy-only background, 000's rules, the seed's span; uneven background for the spread; §5.2's load and background |
//!
//! Modules: [`configs`](mod@configs) (which scenario each configuration runs), `checks` / `checks_5_1` /
//! `checks_other` (the seed-versus-koalesce rows), `report` (`koala.md`), `plots` (SVG),
//! `runs_csv` (`runs.csv`).
//!
//! The seeds' values come from their text; their figures are only images in the OCR'd seeds,
//! so per-shape numbers cannot be read off them and only the trends the text states are checked.

mod checks;
mod checks_5_1;
mod checks_other;
pub mod configs;
mod plots;
mod report;
mod runs_csv;

pub use checks::{checks, in_range, less, tally, Basis, Check, Verdict};
pub use configs::configs;
pub use report::{html, markdown, write_report};

use super::measure::RunMetrics;
use super::{run_configs, Config, ConfigResult};
use koalesce_core::model::PolicyKind;

/// The experiments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Exp {
    /// 003 §5.1.5–5.1.6: W30 and W50, CF and WF, unreplicated and 3 replicas.
    Stable,
    /// 003 §5.1.8: CF with replication under 50% and 60% background load.
    HighBackground,
    /// 003 §5.1.7: job spread and share of co-allocated jobs.
    Spread,
    /// 003 §5.2: the unreliable testbed.
    Unreliable,
    /// 003 §6.2: co-allocated (W_c) versus single-component (W_nc) jobs.
    Runners,
    /// The calibration of the transfer model: W30 with local replicas free and with a sweep of
    /// local-copy rates (docs/experiments/koala.md, "Calibration").
    Calibration,
    /// Not in the seeds: W30 under the other network readings, without placement on submission
    /// and without ordinary users' jobs; the unreliable testbed under a 60–70% background. Shows
    /// where the differences from the seeds come from.
    Sensitivity,
}

impl Exp {
    pub const ALL: [Exp; 7] = [
        Exp::Stable,
        Exp::HighBackground,
        Exp::Spread,
        Exp::Unreliable,
        Exp::Runners,
        Exp::Calibration,
        Exp::Sensitivity,
    ];

    pub fn id(self) -> &'static str {
        match self {
            Exp::Stable => "stable",
            Exp::HighBackground => "high-background",
            Exp::Spread => "spread",
            Exp::Unreliable => "unreliable",
            Exp::Runners => "runners",
            Exp::Calibration => "calibration",
            Exp::Sensitivity => "sensitivity",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Exp::Stable => "Stable system: W30 and W50, CF and WF, with and without replication (000 §4–5, 003 §5.1.1–5.1.6)",
            Exp::HighBackground => "CF under a high background load (000 §5.4, 003 §5.1.8)",
            Exp::Spread => "Job spread and co-allocation (003 §5.1.7)",
            Exp::Unreliable => "The unreliable testbed (003 §5.2)",
            Exp::Runners => "Co-allocated versus single-component jobs (003 §6.1–6.2, Tables 6.1 and 6.2)",
            Exp::Calibration => "Calibration of the transfer model: transfer efficiency η and free local replicas (W30)",
            Exp::Sensitivity => "Sensitivity: network, placement on submission, ordinary users, 000's PDCA rules, arrival rates, uneven background, §5.2's load and scan rule",
        }
    }

    pub fn parse(s: &str) -> Option<Exp> {
        Exp::ALL.into_iter().find(|e| e.id() == s)
    }
}

/// How much to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The seeds; every configuration runs once per seed.
    pub seeds: Vec<u64>,
    /// Fraction of the seeds' job counts to generate (1 = 200 jobs for W30, …).
    pub scale: f64,
}

impl Options {
    /// `seeds` seeds (1, 2, …), the seeds' job counts.
    pub fn full(seeds: usize) -> Options {
        Options {
            seeds: (1..=seeds.max(1) as u64).collect(),
            scale: 1.0,
        }
    }

    /// `seeds` seeds, a quarter of the jobs.
    pub fn quick(seeds: usize) -> Options {
        Options {
            scale: 0.25,
            ..Options::full(seeds)
        }
    }

    fn jobs(&self, n: usize) -> usize {
        ((n as f64 * self.scale).round() as usize).clamp(20, n.max(20))
    }
}

pub(super) fn policy_name(p: PolicyKind) -> &'static str {
    match p {
        PolicyKind::Cf => "CF",
        PolicyKind::Wf => "WF",
        PolicyKind::Cm => "CM",
        PolicyKind::Fcm => "FCM",
        PolicyKind::Ttd => "TTD",
        PolicyKind::Tts => "TTS",
        PolicyKind::Gridway => "GridWay",
    }
}

pub(super) fn replicas_name(r: u32) -> String {
    if r <= 1 {
        "unreplicated".to_string()
    } else {
        format!("{r} replicas")
    }
}

/// Results of a set of experiments.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub options: Options,
    pub experiments: Vec<(Exp, Vec<ConfigResult>)>,
}

impl Outcome {
    /// The configuration with this key, in whichever experiment it is.
    pub fn get(&self, key: &str) -> Option<&ConfigResult> {
        self.experiments.iter().flat_map(|(_, v)| v.iter()).find(|c| c.key == key)
    }

    pub fn runs(&self, key: &str) -> Option<&[RunMetrics]> {
        self.get(key).map(|c| c.runs.as_slice())
    }

    pub fn has(&self, exp: Exp) -> bool {
        self.experiments.iter().any(|(e, _)| *e == exp)
    }
}

/// Runs the experiments, calling `progress(done, total, label)` after every run.
pub fn run(exps: &[Exp], opts: &Options, progress: &(dyn Fn(usize, usize, &str) + Sync)) -> Outcome {
    let all: Vec<(Exp, Config)> = exps
        .iter()
        .flat_map(|&e| configs(e, opts).into_iter().map(move |c| (e, c)))
        .collect();
    let cfgs: Vec<Config> = all.iter().map(|(_, c)| c.clone()).collect();
    let results = run_configs(&cfgs, &opts.seeds, progress);
    let mut experiments: Vec<(Exp, Vec<ConfigResult>)> = Vec::new();
    for ((e, _), r) in all.iter().zip(results) {
        match experiments.iter_mut().find(|(x, _)| x == e) {
            Some((_, v)) => v.push(r),
            None => experiments.push((*e, vec![r])),
        }
    }
    Outcome {
        options: opts.clone(),
        experiments,
    }
}

/// Number of runs an invocation of [`run`] makes.
pub fn run_count(exps: &[Exp], opts: &Options) -> usize {
    exps.iter().map(|&e| configs(e, opts).len()).sum::<usize>() * opts.seeds.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_experiment_has_valid_scenarios_and_unique_keys() {
        let opts = Options::quick(1);
        let mut keys = Vec::new();
        for e in Exp::ALL {
            let cs = configs(e, &opts);
            assert!(!cs.is_empty(), "{e:?}");
            keys.extend(cs.into_iter().map(|c| c.key));
        }
        let n = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n);
        assert_eq!(Exp::parse("spread"), Some(Exp::Spread));
    }
}
