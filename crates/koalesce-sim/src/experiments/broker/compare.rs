//! Co-allocation by reservations (001 §3.2) against KOALA's claiming (003 §4.2.2) on one
//! workload: W30 and W50 on the DAS-2 with the seeds' 30–40% background (the setting of
//! `docs/experiments/koala.md`), the same arrivals under every configuration.
//!
//! - **claiming, CF** and **claiming, WF**: KOALA as in 003 §5.1.1 (placement on submission and
//!   every minute, L = 0.75, T = 1), sites without reservations.
//! - **reservations, ε = 1 min** and **ε = 5 min**: every job (single-component ones included)
//!   co-allocated by Algorithm 1 (exhaustive augmentation) at sites whose LRMs grant advance
//!   reservations, components ranked by predicted TTD, start window from now (after the
//!   stage-in at the best sites) to four hours later, tried at submission and every minute.

use koalesce_core::broker::Augmentation;
use koalesce_core::model::{CoallocationMode, PolicyKind};
use koalesce_core::state::JobState;

use super::super::das2::{self, Net};
use super::super::measure::{RunMetrics, Util};
use crate::engine::{self, SimResult};
use crate::scenario::{FaultSpec, Scenario};

/// One configuration of the comparison.
#[derive(Debug, Clone)]
pub struct CompareConfig {
    pub key: String,
    pub label: String,
    /// For plot axes ("W30 AR1": advance reservations, ε = 1 min).
    pub short: String,
    pub load: u32,
    /// Co-allocation by reservations (else KOALA's claiming).
    pub reservations: bool,
    pub scenario: Scenario,
}

/// The modes compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    ClaimingCf,
    ClaimingWf,
    Reservations { epsilon_min: u64 },
}

impl Mode {
    pub const ALL: [Mode; 4] = [
        Mode::ClaimingCf,
        Mode::ClaimingWf,
        Mode::Reservations { epsilon_min: 1 },
        Mode::Reservations { epsilon_min: 5 },
    ];

    pub fn key(self) -> String {
        match self {
            Mode::ClaimingCf => "claiming-cf".into(),
            Mode::ClaimingWf => "claiming-wf".into(),
            Mode::Reservations { epsilon_min } => format!("reservations-eps{epsilon_min}"),
        }
    }

    /// A short name for plot axes.
    pub fn short(self) -> String {
        match self {
            Mode::ClaimingCf => "CF".into(),
            Mode::ClaimingWf => "WF".into(),
            Mode::Reservations { epsilon_min } => format!("AR{epsilon_min}"),
        }
    }

    pub fn label(self) -> String {
        match self {
            Mode::ClaimingCf => "claiming, CF".into(),
            Mode::ClaimingWf => "claiming, WF".into(),
            Mode::Reservations { epsilon_min } => format!("reservations, ε = {epsilon_min} min"),
        }
    }
}

/// W`load` (200 jobs × `scale`) on the DAS-2 under `mode`.
pub fn config(load: u32, mode: Mode, scale: f64) -> CompareConfig {
    let jobs = ((200.0 * scale).round() as usize).max(10);
    let policy = match mode {
        Mode::ClaimingCf => PolicyKind::Cf,
        Mode::ClaimingWf => PolicyKind::Wf,
        Mode::Reservations { .. } => PolicyKind::Ttd,
    };
    let mut sched = das2::koala_5_1(policy);
    if let Mode::Reservations { epsilon_min } = mode {
        sched.broker.coallocation = CoallocationMode::Reservations;
        sched.broker.max_start_deviation_ms = epsilon_min * 60_000;
        sched.broker.augmentation = Augmentation::Exhaustive;
    }
    let mut scenario = das2::scenario(
        &format!("w{load}-{}", mode.key()),
        &das2::TABLE_5_1,
        Net::DAS2,
        das2::w(load, 1, jobs, das2::Arrivals::Utilization),
        das2::band(0.30, 0.40),
        sched,
        FaultSpec::default(),
    );
    if matches!(mode, Mode::Reservations { .. }) {
        for s in &mut scenario.sites {
            s.reservations = true;
        }
    }
    CompareConfig {
        key: format!("w{load}-{}", mode.key()),
        label: format!("W{load}, {}", mode.label()),
        short: format!("W{load} {}", mode.short()),
        load,
        reservations: matches!(mode, Mode::Reservations { .. }),
        scenario,
    }
}

/// Every configuration, loads outer.
pub fn configs(scale: f64) -> Vec<CompareConfig> {
    [30, 50]
        .into_iter()
        .flat_map(|load| Mode::ALL.into_iter().map(move |m| config(load, m, scale)))
        .collect()
}

/// What one run of the comparison measured.
#[derive(Debug, Clone)]
pub struct CompareRun {
    pub seed: u64,
    pub jobs: usize,
    pub succeeded: usize,
    /// Utilization while jobs arrive, % of all processors.
    pub util: Util,
    /// Submission to start, s (succeeded jobs).
    pub wait_s: f64,
    /// Submission to end, s.
    pub response_s: f64,
    /// Multi-component jobs only.
    pub wait_multi_s: f64,
    pub response_multi_s: f64,
    pub ftt_s: f64,
    pub max_queue: usize,
    /// End of the run − last arrival, s.
    pub drain_s: f64,
    pub stable: bool,
    /// Mean |actual start − predicted start|, s, over jobs with a prediction (NaN if none).
    pub start_error_s: f64,
    /// Jobs whose prediction was made (the broker ranked or co-allocated them).
    pub predicted: usize,
    /// Reservations the sites granted and refused (a refusal: the scheduler's model was wrong).
    pub reservations_granted: u64,
    pub reservations_refused: u64,
    /// Granted reservations that could not be claimed at their start.
    pub reservation_claims_refused: u64,
}

impl CompareRun {
    pub fn of(r: &SimResult) -> CompareRun {
        let m = RunMetrics::of(r);
        let done: Vec<_> = r.jobs.iter().filter(|j| j.state == JobState::Succeeded).collect();
        let mean = |xs: &mut dyn Iterator<Item = f64>| {
            let v: Vec<f64> = xs.collect();
            if v.is_empty() {
                f64::NAN
            } else {
                v.iter().sum::<f64>() / v.len() as f64
            }
        };
        let s = |ms: u64| ms as f64 / 1000.0;
        let wait = |j: &&crate::engine::JobRecord| s(j.start.unwrap_or(j.submit) - j.submit);
        let resp = |j: &&crate::engine::JobRecord| s(j.end.unwrap_or(j.submit) - j.submit);
        let predicted: Vec<_> = done.iter().filter(|j| j.predicted_start.is_some()).collect();
        CompareRun {
            seed: r.seed,
            jobs: m.jobs,
            succeeded: m.succeeded,
            util: m.util,
            wait_s: mean(&mut done.iter().map(wait)),
            response_s: mean(&mut done.iter().map(resp)),
            wait_multi_s: mean(&mut done.iter().filter(|j| j.components > 1).map(wait)),
            response_multi_s: mean(&mut done.iter().filter(|j| j.components > 1).map(resp)),
            ftt_s: m.all.ftt_s,
            max_queue: m.max_queue,
            drain_s: m.drain_s,
            stable: m.stable(),
            start_error_s: mean(&mut predicted.iter().map(|j| s(j.start.unwrap().abs_diff(j.predicted_start.unwrap())))),
            predicted: predicted.len(),
            reservations_granted: r.reservations_granted,
            reservations_refused: r.reservations_refused,
            reservation_claims_refused: r.reservation_claims_refused,
        }
    }
}

/// Runs one configuration under one seed.
pub fn run(config: &CompareConfig, seed: u64) -> (CompareRun, SimResult) {
    let r = engine::run(&config.scenario, seed, &mut |_| {}).unwrap_or_else(|e| panic!("experiment {}: {e}", config.key));
    (CompareRun::of(&r), r)
}
