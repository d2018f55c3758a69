//! KOALA's published experiments (000 §4–5; 003 §5.1, §5.2, Ch. 6) reproduced in the
//! simulator, each compared with what the seeds report.
//!
//! | experiment | seeds | configurations |
//! |---|---|---|
//! | [`Exp::Stable`] | 000 §4–5, 003 §5.1.1–5.1.6 | W30, W50 × CF, WF × files unreplicated, at 3 sites |
//! | [`Exp::HighBackground`] | 000 §5.4, 003 §5.1.8 | W30, CF, 3 replicas, background 50% and 60% |
//! | [`Exp::Spread`] | 003 §5.1.7 | 2 or 4 components of 4–24, one 2 GB file × CF, WF × replicas |
//! | [`Exp::Unreliable`] | 003 §5.2 | 500 jobs of size 36/72, high and low priority, Delft faulty |
//! | [`Exp::Runners`] | 003 §6.1–6.2 | W_nc and W_c (Table 6.1) on the processors of Table 6.2 |
//! | [`Exp::Sensitivity`] | 000 §2.1, 003 §2.3, §5.2 | W30 under other networks, scan-only placement, dummy-only background; §5.2 under a 60–70% background |
//!
//! The seeds' values come from their text; their figures are only images in the OCR'd seeds,
//! so per-shape numbers cannot be read off them and only the trends the text states are checked.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use koalesce_core::model::PolicyKind;

use super::das2::{self, Net};
use super::measure::{Agg, Group, RunMetrics};
use super::{run_configs, Config, ConfigResult};
use crate::plot;
use crate::scenario::FaultSpec;

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
    /// Not in the seeds: W30 under the other network readings, without placement on submission
    /// and without ordinary users' jobs; the unreliable testbed under a 60–70% background. Shows
    /// where the differences from the seeds come from.
    Sensitivity,
}

impl Exp {
    pub const ALL: [Exp; 6] = [
        Exp::Stable,
        Exp::HighBackground,
        Exp::Spread,
        Exp::Unreliable,
        Exp::Runners,
        Exp::Sensitivity,
    ];

    pub fn id(self) -> &'static str {
        match self {
            Exp::Stable => "stable",
            Exp::HighBackground => "high-background",
            Exp::Spread => "spread",
            Exp::Unreliable => "unreliable",
            Exp::Runners => "runners",
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
            Exp::Sensitivity => "Sensitivity: network, placement on submission, ordinary users, background of the unreliable testbed",
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

fn policy_name(p: PolicyKind) -> &'static str {
    match p {
        PolicyKind::Cf => "CF",
        PolicyKind::Wf => "WF",
        PolicyKind::Cm => "CM",
        PolicyKind::Fcm => "FCM",
        PolicyKind::Gridway => "GridWay",
    }
}

fn replicas_name(r: u32) -> String {
    if r <= 1 {
        "unreplicated".to_string()
    } else {
        format!("{r} replicas")
    }
}

/// What a W30/W50 configuration changes from the setting of 003 §5.1.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Variant {
    net: Net,
    place_on_submit: bool,
    ordinary_users: bool,
}

const AS_IN_5_1: Variant = Variant {
    net: Net::DAS2,
    place_on_submit: true,
    ordinary_users: true,
};

/// W30/W50 on Table 5.1 with the 30–40% background band.
fn stable_config(load: u32, policy: PolicyKind, replicas: u32, v: Variant, key: String, label: String, opts: &Options) -> Config {
    let mut sched = das2::koala_5_1(policy);
    sched.place_on_submit = v.place_on_submit;
    Config {
        scenario: das2::scenario(
            &key,
            &das2::TABLE_5_1,
            v.net,
            das2::w(load, replicas, opts.jobs(200)),
            das2::band_with(0.30, 0.40, v.ordinary_users),
            sched,
            FaultSpec::default(),
        ),
        key,
        label,
    }
}

/// The configurations of one experiment.
pub fn configs(exp: Exp, opts: &Options) -> Vec<Config> {
    let mut out = Vec::new();
    match exp {
        Exp::Stable => {
            for load in [30, 50] {
                for policy in [PolicyKind::Cf, PolicyKind::Wf] {
                    for replicas in [1, 3] {
                        let key = format!("w{load}-{}-r{replicas}", policy.name());
                        let label = format!("W{load}, {}, {}", policy_name(policy), replicas_name(replicas));
                        out.push(stable_config(load, policy, replicas, AS_IN_5_1, key, label, opts));
                    }
                }
            }
        }
        Exp::HighBackground => {
            for (low, high) in [(0.5, 0.6), (0.6, 0.7)] {
                let key = format!("bg{:.0}-cf-r3", low * 100.0);
                let scenario = das2::scenario(
                    &key,
                    &das2::TABLE_5_1,
                    Net::DAS2,
                    das2::w(30, 3, opts.jobs(200)),
                    das2::band(low, high),
                    das2::koala_5_1(PolicyKind::Cf),
                    FaultSpec::default(),
                );
                out.push(Config {
                    label: format!("W30, CF, 3 replicas, background {:.0}–{:.0}%", low * 100.0, high * 100.0),
                    key,
                    scenario,
                });
            }
        }
        Exp::Spread => {
            for policy in [PolicyKind::Cf, PolicyKind::Wf] {
                for replicas in [1, 3] {
                    let key = format!("spread-{}-r{replicas}", policy.name());
                    let scenario = das2::scenario(
                        &key,
                        &das2::TABLE_5_1,
                        Net::DAS2,
                        das2::spread_workload(replicas, opts.jobs(200)),
                        das2::band(0.30, 0.40),
                        das2::koala_5_1(policy),
                        FaultSpec::default(),
                    );
                    out.push(Config {
                        label: format!("spread workload, {}, {}", policy_name(policy), replicas_name(replicas)),
                        key,
                        scenario,
                    });
                }
            }
        }
        Exp::Unreliable => {
            let key = "unreliable".to_string();
            let scenario = das2::scenario(
                &key,
                &das2::TABLE_5_2,
                Net::DAS2,
                das2::unreliable_workload(opts.jobs(500)),
                das2::band(0.30, 0.40),
                das2::koala_5_2(),
                das2::unreliable_faults(),
            );
            out.push(Config {
                label: "unreliable testbed: 500 jobs, high and low priority, Delft faulty".to_string(),
                key,
                scenario,
            });
        }
        Exp::Runners => {
            for coallocated in [false, true] {
                let key = if coallocated { "wc" } else { "wnc" }.to_string();
                let scenario = das2::scenario(
                    &key,
                    &das2::TABLE_6_2,
                    Net::DAS2,
                    das2::runners_workload(coallocated, opts.jobs(400)),
                    das2::band(0.30, 0.40),
                    das2::koala_6(),
                    FaultSpec::default(),
                );
                out.push(Config {
                    label: if coallocated {
                        "W_c (co-allocated)"
                    } else {
                        "W_nc (single component)"
                    }
                    .to_string(),
                    key,
                    scenario,
                });
            }
        }
        Exp::Sensitivity => {
            for (policy, replicas) in [(PolicyKind::Cf, 3), (PolicyKind::Wf, 1)] {
                let what = format!("{}, {}", policy_name(policy), replicas_name(replicas));
                let p = policy.name();
                let v = |net, place_on_submit, ordinary_users| Variant {
                    net,
                    place_on_submit,
                    ordinary_users,
                };
                out.push(stable_config(
                    30,
                    policy,
                    replicas,
                    v(Net::BACKBONE_100, true, true),
                    format!("net100-{p}-r{replicas}"),
                    format!("W30, {what}, 100 Mbit/s backbone (000 §2.1)"),
                    opts,
                ));
                out.push(stable_config(
                    30,
                    policy,
                    replicas,
                    v(Net::UNCONTENDED, true, true),
                    format!("netunc-{p}-r{replicas}"),
                    format!("W30, {what}, gigabit, uncontended site links"),
                    opts,
                ));
                out.push(stable_config(
                    30,
                    policy,
                    replicas,
                    v(Net::DAS2, false, true),
                    format!("scan-{p}-r{replicas}"),
                    format!("W30, {what}, placement only at scans"),
                    opts,
                ));
                out.push(stable_config(
                    30,
                    policy,
                    replicas,
                    v(Net::DAS2, true, false),
                    format!("dummy-{p}-r{replicas}"),
                    format!("W30, {what}, background of dummy jobs only"),
                    opts,
                ));
            }
            let key = "unreliable-bg60".to_string();
            let scenario = das2::scenario(
                &key,
                &das2::TABLE_5_2,
                Net::DAS2,
                das2::unreliable_workload(opts.jobs(500)),
                das2::band(0.60, 0.70),
                das2::koala_5_2(),
                das2::unreliable_faults(),
            );
            out.push(Config {
                label: "unreliable testbed, background 60–70%".to_string(),
                key,
                scenario,
            });
        }
    }
    out
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
pub fn run(exps: &[Exp], opts: &Options, progress: &mut dyn FnMut(usize, usize, &str)) -> Outcome {
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

// ----- comparison with the seeds ----------------------------------------------------------------

/// Whether a koalesce value agrees with the seed's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Yes,
    /// The mean misses but its 95% CI reaches the seed's range, or an ordering holds on the
    /// means but not in every seed.
    Partly,
    No,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Yes => "yes",
            Verdict::Partly => "partly",
            Verdict::No => "no",
        }
    }
}

/// One line of a seed-versus-koalesce table.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub exp: Exp,
    /// Where the seed says it ("003 §5.1.5, Fig. 5.1").
    pub reference: String,
    pub quantity: String,
    /// The seed's value, with the tolerance applied ("about 70% (65–75)").
    pub seed: String,
    /// "text" (stated in the seed's text) or "text (trend)" for stated orderings.
    pub source: &'static str,
    pub koalesce: String,
    pub verdict: Verdict,
}

/// Mean in [lo, hi]: yes; its 95% CI overlaps [lo, hi]: partly; else no.
pub fn in_range(a: &Agg, lo: f64, hi: f64) -> Verdict {
    if a.n == 0 || !a.mean.is_finite() {
        return Verdict::No;
    }
    if (lo..=hi).contains(&a.mean) {
        return Verdict::Yes;
    }
    let ci = if a.ci.is_finite() { a.ci } else { 0.0 };
    if a.mean + ci >= lo && a.mean - ci <= hi {
        Verdict::Partly
    } else {
        Verdict::No
    }
}

/// `a < b`: on the means and in every seed (paired by position): yes; on the means only:
/// partly; else no.
pub fn less(a: &[f64], b: &[f64]) -> Verdict {
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    if a.is_empty() || b.is_empty() || mean(a) >= mean(b) {
        return Verdict::No;
    }
    if a.iter().zip(b).all(|(x, y)| x < y) {
        Verdict::Yes
    } else {
        Verdict::Partly
    }
}

fn per_run(runs: &[RunMetrics], f: impl Fn(&RunMetrics) -> f64) -> Vec<f64> {
    runs.iter().map(f).collect()
}

fn per_run_group(runs: &[RunMetrics], key: &str, f: impl Fn(&Group) -> f64) -> Vec<f64> {
    runs.iter().map(|r| r.by_shape.get(key).map(&f).unwrap_or(f64::NAN)).collect()
}

struct Checker<'a> {
    o: &'a Outcome,
    out: Vec<Check>,
}

impl Checker<'_> {
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        exp: Exp,
        reference: &str,
        quantity: impl Into<String>,
        seed: impl Into<String>,
        source: &'static str,
        koalesce: impl Into<String>,
        verdict: Verdict,
    ) {
        self.out.push(Check {
            exp,
            reference: reference.to_string(),
            quantity: quantity.into(),
            seed: seed.into(),
            source,
            koalesce: koalesce.into(),
            verdict,
        });
    }

    /// A value per run of `key`, compared with [lo, hi].
    #[allow(clippy::too_many_arguments)]
    fn range(
        &mut self,
        exp: Exp,
        reference: &str,
        key: &str,
        quantity: &str,
        seed: &str,
        lo: f64,
        hi: f64,
        d: usize,
        f: impl Fn(&RunMetrics) -> f64,
    ) {
        let Some(runs) = self.o.runs(key) else { return };
        let label = &self.o.get(key).unwrap().label;
        let a = Agg::over(runs, f);
        self.push(
            exp,
            reference,
            format!("{label}: {quantity}"),
            seed,
            "text",
            a.fmt(d),
            in_range(&a, lo, hi),
        );
    }

    /// `f(a) < f(b)` per run.
    #[allow(clippy::too_many_arguments)]
    fn order(&mut self, exp: Exp, reference: &str, quantity: &str, seed: &str, a: &str, b: &str, d: usize, f: impl Fn(&RunMetrics) -> f64) {
        let (Some(ra), Some(rb)) = (self.o.runs(a), self.o.runs(b)) else {
            return;
        };
        let (va, vb) = (per_run(ra, &f), per_run(rb, &f));
        let text = format!("{} vs {}", Agg::of(&va).fmt(d), Agg::of(&vb).fmt(d));
        self.push(exp, reference, quantity, seed, "text (trend)", text, less(&va, &vb));
    }
}

/// Every comparison with the seeds that the outcome has the runs for.
pub fn checks(o: &Outcome) -> Vec<Check> {
    let mut c = Checker { o, out: Vec::new() };
    stable_checks(&mut c);
    high_background_checks(&mut c);
    spread_checks(&mut c);
    unreliable_checks(&mut c);
    runners_checks(&mut c);
    c.out
}

const W30_KEYS: [&str; 4] = ["w30-cf-r1", "w30-cf-r3", "w30-wf-r1", "w30-wf-r3"];
const W50_KEYS: [&str; 4] = ["w50-cf-r1", "w50-cf-r3", "w50-wf-r1", "w50-wf-r3"];

fn stable_checks(c: &mut Checker<'_>) {
    let e = Exp::Stable;
    let r = "003 §5.1.5, Fig. 5.1 (000 §5.2, Fig. 3)";
    for k in W30_KEYS {
        c.range(
            e,
            r,
            k,
            "total utilization (bg + grid + PWT), %",
            "about 70 (65–75)",
            65.0,
            75.0,
            1,
            |m| m.util.total(),
        );
        c.range(e, r, k, "grid (KOALA) load, %", "about 30 (25–35)", 25.0, 35.0, 1, |m| {
            m.util.grid
        });
        c.range(e, "003 §5.1.5, Fig. 5.1", k, "PWT, %", "about 2 (1–3)", 1.0, 3.0, 1, |m| {
            m.util.pwt
        });
        c.range(e, "003 §5.1.5, Fig. 5.1", k, "PGT, %", "6–9", 6.0, 9.0, 1, |m| m.util.pgt);
        c.range(e, "000 §5.2", k, "max placement queue", "at most 10", 0.0, 10.0, 1, |m| {
            m.max_queue as f64
        });
        c.range(e, r, k, "stable (share of seeds, %)", "stable (100)", 100.0, 100.0, 0, |m| {
            if m.stable() {
                100.0
            } else {
                0.0
            }
        });
        c.range(
            e,
            "003 §5.1.5, Fig. 5.4",
            k,
            "claiming tries per job",
            "around 1 (1–1.2)",
            1.0,
            1.2,
            2,
            |m| m.all.claiming_tries,
        );
        c.range(
            e,
            "003 §5.1.5",
            k,
            "PGT / PWT (claiming at 0.75·FTT ⇒ 3)",
            "3 (2.5–4)",
            2.5,
            4.0,
            2,
            |m| m.util.pgt / m.util.pwt.max(1e-9),
        );
        c.range(
            e,
            "003 §5.1.5, Fig. 5.3",
            k,
            "median placement time, s",
            "(very close to) 0 (≤ 10)",
            0.0,
            10.0,
            1,
            |m| m.placement_p50_s,
        );
    }
    let r2 = "003 §5.1.5, Fig. 5.2 (000 §5.2, Fig. 4)";
    c.order(
        e,
        r2,
        "W30 FTT, unreplicated: CF < WF (s)",
        "CF < WF",
        "w30-cf-r1",
        "w30-wf-r1",
        1,
        |m| m.all.ftt_s,
    );
    c.order(
        e,
        r2,
        "W30 FTT, 3 replicas: CF < WF (s)",
        "CF < WF",
        "w30-cf-r3",
        "w30-wf-r3",
        1,
        |m| m.all.ftt_s,
    );
    c.order(
        e,
        r2,
        "W30 FTT of CF: 3 replicas < unreplicated (s)",
        "replication lowers CF's FTT",
        "w30-cf-r3",
        "w30-cf-r1",
        1,
        |m| m.all.ftt_s,
    );
    for other in ["w30-cf-r1", "w30-wf-r1", "w30-wf-r3"] {
        c.order(
            e,
            "003 §5.1.5 (\"CF and replication performs best\")",
            &format!("W30 TWT: CF with replication < {other} (s)"),
            "CF + replication lowest TWT",
            "w30-cf-r3",
            other,
            1,
            |m| m.all.twt_s,
        );
    }
    // Trend: placement time and tries grow with the number and size of components.
    for k in W30_KEYS.iter().chain(W50_KEYS.iter()) {
        let Some(runs) = c.o.runs(k) else { continue };
        let label = c.o.get(k).unwrap().label.clone();
        for (what, f) in [
            ("placement time (s)", (|g: &Group| g.placement_s) as fn(&Group) -> f64),
            ("placement tries", |g: &Group| g.placement_tries),
        ] {
            let small = per_run_group(runs, "1x8", f);
            let big = per_run_group(runs, "4x16", f);
            let text = format!("1x8 {} vs 4x16 {}", Agg::of(&small).fmt(1), Agg::of(&big).fmt(1));
            let seed_ref = if k.starts_with("w30") {
                "003 §5.1.5, Figs. 5.2, 5.4"
            } else {
                "003 §5.1.6, Figs. 5.6, 5.7"
            };
            c.push(
                e,
                seed_ref,
                format!("{label}: {what} grows with components × size (1x8 < 4x16)"),
                "increases",
                "text (trend)",
                text,
                less(&small, &big),
            );
        }
    }
    let r5 = "003 §5.1.6, Fig. 5.5 (000 §5.3, Fig. 6)";
    for k in W50_KEYS {
        c.range(e, r5, k, "total utilization (bg + grid + PWT), %", "70–80", 70.0, 80.0, 1, |m| {
            m.util.total()
        });
        c.range(e, r5, k, "grid (KOALA) load, %", "well below 40 (< 40)", 0.0, 40.0, 1, |m| {
            m.util.grid
        });
        c.range(e, r5, k, "max placement queue", "up to 30 (20–40)", 20.0, 40.0, 1, |m| {
            m.max_queue as f64
        });
        c.range(
            e,
            r5,
            k,
            "saturated (share of seeds not stable, %)",
            "saturated (100)",
            100.0,
            100.0,
            0,
            |m| if m.stable() { 0.0 } else { 100.0 },
        );
        c.range(
            e,
            "003 §5.1.6, Fig. 5.7",
            k,
            "claiming tries per job",
            "between 1 and 3",
            1.0,
            3.0,
            2,
            |m| m.all.claiming_tries,
        );
    }
    for rep in [1, 3] {
        let (Some(cf), Some(wf)) = (c.o.runs(&format!("w50-cf-r{rep}")), c.o.runs(&format!("w50-wf-r{rep}"))) else {
            continue;
        };
        let a = Agg::over(cf, |m| m.all.ftt_s);
        let b = Agg::over(wf, |m| m.all.ftt_s);
        let rel = (a.mean - b.mean).abs() / a.mean.max(b.mean).max(1e-9);
        let v = if rel <= 0.3 {
            Verdict::Yes
        } else if rel <= 0.5 {
            Verdict::Partly
        } else {
            Verdict::No
        };
        c.push(
            e,
            "003 §5.1.6, Fig. 5.6 (000 §5.3, Fig. 7)",
            format!("W50, {}: FTT of CF close to WF's (s)", replicas_name(rep)),
            "relatively close (within 30%)",
            "text (trend)",
            format!("CF {} vs WF {} ({:.0}% apart)", a.fmt(1), b.fmt(1), 100.0 * rel),
            v,
        );
    }
    for (a, b) in W30_KEYS.iter().zip(W50_KEYS.iter()) {
        c.order(
            e,
            "003 §5.1.5–5.1.6",
            &format!("max placement queue: {a} < {b}"),
            "W30 ≤ 10 < W50 up to 30",
            a,
            b,
            1,
            |m| m.max_queue as f64,
        );
    }
}

fn high_background_checks(c: &mut Checker<'_>) {
    let e = Exp::HighBackground;
    let r = "003 §5.1.8, Fig. 5.9 (000 §5.4, Fig. 9)";
    for k in ["bg50-cf-r3", "bg60-cf-r3"] {
        c.range(e, r, k, "total utilization (bg + grid + PWT), %", "75–80", 75.0, 80.0, 1, |m| {
            m.util.total()
        });
        c.range(e, r, k, "grid (KOALA) load, %", "much lower than 30 (< 25)", 0.0, 25.0, 1, |m| {
            m.util.grid
        });
        c.range(
            e,
            r,
            k,
            "saturated (share of seeds not stable, %)",
            "saturated (100)",
            100.0,
            100.0,
            0,
            |m| if m.stable() { 0.0 } else { 100.0 },
        );
        c.range(
            e,
            "003 §5.1.8, Fig. 5.10",
            k,
            "claiming tries per job",
            "still quite low (1–3)",
            1.0,
            3.0,
            2,
            |m| m.all.claiming_tries,
        );
        c.range(e, "003 §5.1.8", k, "PGT, %", "7–20", 7.0, 20.0, 1, |m| m.util.pgt);
        c.range(e, "003 §5.1.8", k, "jobs finished, %", "all (100)", 100.0, 100.0, 0, |m| {
            100.0 * m.succeeded as f64 / m.jobs.max(1) as f64
        });
    }
    c.range(
        e,
        "003 §5.1.8, Fig. 5.10.a",
        "bg60-cf-r3",
        "placement time of 4x16 jobs, h",
        "about 3.3 (1.65–6.6: within a factor 2)",
        1.65,
        6.6,
        2,
        |m| m.by_shape.get("4x16").map(|g| g.placement_s / 3600.0).unwrap_or(f64::NAN),
    );
    c.order(
        e,
        r,
        "grid load: 60% background < 50% background (%)",
        "lower with more background",
        "bg60-cf-r3",
        "bg50-cf-r3",
        1,
        |m| m.util.grid,
    );
    c.order(
        e,
        r,
        "grid load: 50% background < 30–40% background (%)",
        "lower with more background",
        "bg50-cf-r3",
        "w30-cf-r3",
        1,
        |m| m.util.grid,
    );
}

fn spread_checks(c: &mut Checker<'_>) {
    let e = Exp::Spread;
    let r = "003 §5.1.7, Fig. 5.8";
    c.range(
        e,
        r,
        "spread-cf-r3",
        "job spread, %",
        "at least half the components on separate clusters (≥ 50)",
        50.0,
        100.0,
        1,
        |m| m.all.spread_pct,
    );
    c.order(
        e,
        r,
        "job spread of CF: unreplicated < 3 replicas (%)",
        "slightly less without replication",
        "spread-cf-r1",
        "spread-cf-r3",
        1,
        |m| m.all.spread_pct,
    );
    if let (Some(a), Some(b)) = (c.o.runs("spread-wf-r1"), c.o.runs("spread-wf-r3")) {
        let (x, y) = (Agg::over(a, |m| m.all.spread_pct), Agg::over(b, |m| m.all.spread_pct));
        let d = (x.mean - y.mean).abs();
        let v = if d <= 5.0 {
            Verdict::Yes
        } else if d <= 10.0 {
            Verdict::Partly
        } else {
            Verdict::No
        };
        c.push(
            e,
            r,
            "job spread of WF not affected by replication (%)",
            "unaffected (within 5 points)",
            "text (trend)",
            format!("{} vs {}", x.fmt(1), y.fmt(1)),
            v,
        );
    }
    c.order(
        e,
        r,
        "co-allocated jobs, 3 replicas: WF < CF (%)",
        "CF with replication co-allocates more than WF",
        "spread-wf-r3",
        "spread-cf-r3",
        1,
        |m| m.all.coallocated_pct,
    );
    c.order(
        e,
        r,
        "co-allocated jobs, unreplicated: CF < WF (%)",
        "without replication the opposite",
        "spread-cf-r1",
        "spread-wf-r1",
        1,
        |m| m.all.coallocated_pct,
    );
    for k in ["spread-cf-r1", "spread-cf-r3", "spread-wf-r1", "spread-wf-r3"] {
        let Some(runs) = c.o.runs(k) else { continue };
        let label = c.o.get(k).unwrap().label.clone();
        for (two, four) in [("2x8", "4x4"), ("2x16", "4x8")] {
            let a = per_run_group(runs, two, |g| g.coallocated_pct);
            let b = per_run_group(runs, four, |g| g.coallocated_pct);
            let text = format!("{two} {} vs {four} {}", Agg::of(&a).fmt(0), Agg::of(&b).fmt(0));
            c.push(
                e,
                r,
                format!("{label}: co-allocated % grows with components at equal total size ({two} < {four})"),
                "increases",
                "text (trend)",
                text,
                less(&a, &b),
            );
        }
    }
}

fn unreliable_checks(c: &mut Checker<'_>) {
    let e = Exp::Unreliable;
    let k = "unreliable";
    let Some(runs) = c.o.runs(k) else { return };
    let delft = 100.0 * runs.iter().filter(|m| m.blacklisted.iter().any(|(_, s)| s == "delft")).count() as f64 / runs.len() as f64;
    let others = runs.iter().filter(|m| m.blacklisted.iter().any(|(_, s)| s != "delft")).count();
    let when = Agg::over(runs, |m| {
        m.blacklisted
            .iter()
            .find(|(_, s)| s == "delft")
            .map(|(t, _)| t / 60.0)
            .unwrap_or(f64::NAN)
    });
    c.push(
        e,
        "003 §5.2.3",
        "Delft blacklisted (share of seeds, %), and no other site",
        "Delft taken out of selection",
        "text",
        format!("{delft:.0}% (at {} min), other sites blacklisted in {others} seeds", when.fmt(0)),
        if delft == 100.0 && others == 0 {
            Verdict::Yes
        } else if delft > 0.0 {
            Verdict::Partly
        } else {
            Verdict::No
        },
    );
    c.range(
        e,
        "003 §5.2.4–5.2.5",
        k,
        "jobs completed, %",
        "all (100)",
        100.0,
        100.0,
        0,
        |m| 100.0 * m.succeeded as f64 / m.jobs.max(1) as f64,
    );
    c.range(
        e,
        "003 §5.2.3, Fig. 5.11",
        k,
        "utilization of the processors left (bg + grid + PWT), %",
        "80–90",
        80.0,
        90.0,
        1,
        |m| m.util_usable_total,
    );
    c.range(
        e,
        "003 §5.2.4, Fig. 5.12.a",
        k,
        "failure rate, % (calibrated: set by the assumed fault rates)",
        "much higher than a stable system's (> 15)",
        15.0,
        100.0,
        1,
        |m| m.all.failure_pct,
    );
    // "Jobs of small sizes (e.g., of size 36 …) do not suffer from long waiting times for
    // enough processors to be available" (003 §5.2.5).
    let by_size = |runs: &[RunMetrics], size: &str| -> Vec<f64> {
        runs.iter()
            .map(|m| {
                let (mut s, mut n) = (0.0, 0usize);
                for (key, g) in &m.by_size_priority {
                    if key.split(' ').next() == Some(size) {
                        s += g.placement_s * g.jobs as f64;
                        n += g.jobs;
                    }
                }
                s / n.max(1) as f64
            })
            .collect()
    };
    let (small, big) = (by_size(runs, "36"), by_size(runs, "72"));
    c.push(
        e,
        "003 §5.2.5, Fig. 5.13.a",
        "total placement time: size 36 < size 72 (s)",
        "small jobs do not wait long",
        "text (trend)",
        format!("36: {} vs 72: {}", Agg::of(&small).fmt(0), Agg::of(&big).fmt(0)),
        less(&small, &big),
    );
    let by_prio = |runs: &[RunMetrics], prio: &str, f: fn(&Group) -> f64| -> Vec<f64> {
        runs.iter()
            .map(|m| {
                let (mut s, mut n) = (0.0, 0usize);
                for (key, g) in &m.by_shape_priority {
                    if key.ends_with(prio) {
                        s += f(g) * g.jobs as f64;
                        n += g.jobs;
                    }
                }
                s / n.max(1) as f64
            })
            .collect()
    };
    let hi = by_prio(runs, " high", |g| g.failure_pct);
    let lo = by_prio(runs, " low", |g| g.failure_pct);
    c.push(
        e,
        "003 §5.2.4, Fig. 5.12.a",
        "failure rate: low < high priority (%)",
        "more failures for high-priority jobs",
        "text (trend)",
        format!("low {} vs high {}", Agg::of(&lo).fmt(1), Agg::of(&hi).fmt(1)),
        less(&lo, &hi),
    );
    for (what, f) in [
        ("total placement time (s)", (|g: &Group| g.placement_s) as fn(&Group) -> f64),
        ("start delay (s)", |g: &Group| g.start_delay_s),
    ] {
        let hi = by_prio(runs, " high", f);
        let lo = by_prio(runs, " low", f);
        c.push(
            e,
            "003 §5.2.5, Fig. 5.13",
            format!("{what}: high < low priority"),
            "high priority out-performs low",
            "text (trend)",
            format!("high {} vs low {}", Agg::of(&hi).fmt(0), Agg::of(&lo).fmt(0)),
            less(&hi, &lo),
        );
    }
    for (what, f, reference) in [
        (
            "co-allocated jobs (%)",
            (|g: &Group| g.coallocated_pct) as fn(&Group) -> f64,
            "003 §5.2.4, Fig. 5.12.b",
        ),
        ("total placement time (s)", |g: &Group| g.placement_s, "003 §5.2.5, Fig. 5.13.a"),
        ("start delay (s)", |g: &Group| g.start_delay_s, "003 §5.2.5, Fig. 5.13.b"),
    ] {
        let a = per_run_group(runs, "3x24", f);
        let b = per_run_group(runs, "8x9", f);
        c.push(
            e,
            reference,
            format!("size 72: {what} grows with components (3x24 < 8x9)"),
            "increases with the number of components",
            "text (trend)",
            format!("3x24 {} vs 8x9 {}", Agg::of(&a).fmt(0), Agg::of(&b).fmt(0)),
            less(&a, &b),
        );
    }
}

fn runners_checks(c: &mut Checker<'_>) {
    let e = Exp::Runners;
    let r = "003 §6.2.3, Fig. 6.3";
    c.range(
        e,
        r,
        "wc",
        "total utilization (bg + grid + PWT), %",
        "70–80",
        70.0,
        80.0,
        1,
        |m| m.util.total(),
    );
    c.range(
        e,
        r,
        "wnc",
        "total utilization (bg + grid + PWT), %",
        "60–70",
        60.0,
        70.0,
        1,
        |m| m.util.total(),
    );
    c.order(
        e,
        r,
        "total utilization: W_nc < W_c (%)",
        "W_c higher than W_nc",
        "wnc",
        "wc",
        1,
        |m| m.util.total(),
    );
    for k in ["wnc", "wc"] {
        c.range(
            e,
            "003 §6.2.2, Fig. 6.2",
            k,
            "throughput, jobs/min",
            "around 2 (1.8–2.4; KRunner/DRunner)",
            1.8,
            2.4,
            2,
            |m| m.throughput_per_min,
        );
    }
    // "Jobs of all sizes are executed equally when co-allocation is used, whereas without
    // co-allocation large jobs may be delayed considerably" (003 §6.3).
    let ratio = |m: &RunMetrics| {
        let size = |z: &str| {
            let (mut s, mut n) = (0.0, 0usize);
            for (key, g) in &m.by_size_priority {
                if key.split(' ').next() == Some(z) {
                    s += g.placement_s * g.jobs as f64;
                    n += g.jobs;
                }
            }
            s / n.max(1) as f64
        };
        (size("48") + 1.0) / (size("8") + 1.0)
    };
    c.order(
        e,
        "003 §6.2.2, §6.3",
        "placement time of size-48 jobs over size-8 jobs: W_c < W_nc",
        "large jobs delayed without co-allocation",
        "wc",
        "wnc",
        1,
        ratio,
    );
}

// ----- report ------------------------------------------------------------------------------------

/// Writes `koala.md` (all tables), `runs.csv` (one line per run) and the SVG plots into `dir`;
/// returns the files written.
pub fn write_report(o: &Outcome, dir: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut files = Vec::new();
    let mut write = |name: &str, text: String| -> io::Result<()> {
        let p = dir.join(name);
        std::fs::write(&p, text)?;
        files.push(p);
        Ok(())
    };
    for (name, svg) in plots(o) {
        write(&name, svg)?;
    }
    write("runs.csv", runs_csv(o))?;
    write("koala.md", markdown(o))?;
    Ok(files)
}

fn runs_csv(o: &Outcome) -> String {
    let mut s = String::from(
        "experiment,config,seed,jobs,succeeded,failed,unfinished,util_total,util_background,util_grid,util_pwt,util_pgt,util_run_total,util_usable_total,max_queue,last_arrival_s,end_s,stable,placement_s,placement_p50_s,placement_p90_s,ftt_s,twt_s,placement_tries,claiming_tries,spread_pct,coallocated_pct,failure_pct,start_delay_s,throughput_per_min,preemptions,soft_errors,blacklisted,transferred_gb\n",
    );
    for (e, cs) in &o.experiments {
        for c in cs {
            for m in &c.runs {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{},{:.1},{:.1},{},{:.1},{:.1},{:.1},{:.1},{:.1},{:.3},{:.3},{:.2},{:.2},{:.2},{:.1},{:.3},{},{},{},{:.1}",
                    e.id(),
                    c.key,
                    m.seed,
                    m.jobs,
                    m.succeeded,
                    m.failed,
                    m.unfinished,
                    m.util.total(),
                    m.util.background,
                    m.util.grid,
                    m.util.pwt,
                    m.util.pgt,
                    m.util_run.total(),
                    m.util_usable_total,
                    m.max_queue,
                    m.last_arrival_s,
                    m.end_s,
                    m.stable(),
                    m.all.placement_s,
                    m.placement_p50_s,
                    m.placement_p90_s,
                    m.all.ftt_s,
                    m.all.twt_s,
                    m.all.placement_tries,
                    m.all.claiming_tries,
                    m.multi.spread_pct,
                    m.multi.coallocated_pct,
                    m.all.failure_pct,
                    m.all.start_delay_s,
                    m.throughput_per_min,
                    m.preemptions,
                    m.soft_errors,
                    m.blacklisted.iter().map(|(t, s)| format!("{s}@{t:.0}")).collect::<Vec<_>>().join(";"),
                    m.transferred_gb,
                );
            }
        }
    }
    s
}

fn shapes_of(cs: &[&ConfigResult], by: impl Fn(&RunMetrics) -> &BTreeMap<String, Group>) -> Vec<String> {
    let mut v: Vec<String> = cs.iter().flat_map(|c| c.runs.iter().flat_map(|m| by(m).keys().cloned())).collect();
    v.sort_by_key(|k| shape_order(k));
    v.dedup();
    v
}

/// Sort key of "4x16" / "4x16 high" / "36 high": components, size, priority.
fn shape_order(k: &str) -> (u32, u32, String) {
    let mut parts = k.split(' ');
    let shape = parts.next().unwrap_or("");
    let rest = parts.collect::<Vec<_>>().join(" ");
    let mut nums = shape.split('x').map(|x| x.parse::<u32>().unwrap_or(0));
    let a = nums.next().unwrap_or(0);
    let b = nums.next().unwrap_or(0);
    (a, b, rest)
}

fn plots(o: &Outcome) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (e, cs) in &o.experiments {
        for c in cs {
            if *e == Exp::Sensitivity || *e == Exp::Spread {
                continue;
            }
            let u = &c.timeline;
            let xs: Vec<f64> = u.start_s.iter().map(|s| s / 60.0).collect();
            let svg = plot::stacked_area_svg(
                &format!("{} — utilization (seed {})", c.label, o.options.seeds.first().copied().unwrap_or(1)),
                "time (min)",
                "utilization (%)",
                &xs,
                &[
                    ("background".to_string(), u.background.clone()),
                    ("grid load".to_string(), u.grid.clone()),
                    ("PWT".to_string(), u.pwt.clone()),
                    ("PGT (not in total)".to_string(), u.pgt.clone()),
                ],
                Some(100.0),
            );
            out.push((format!("util-{}.svg", c.key), svg));
        }
    }
    // Placement time + FTT, and tries, per job shape: CF vs WF per workload and replication.
    let by_shape: GroupsOf = |m| &m.by_shape;
    let times: [(&str, Metric); 2] = [("placement", |g| g.placement_s), ("FTT", |g| g.ftt_s)];
    let tries: [(&str, Metric); 2] = [("plc tries", |g| g.placement_tries), ("clm tries", |g| g.claiming_tries)];
    for load in [30, 50] {
        for rep in [1, 3] {
            let (Some(cf), Some(wf)) = (o.get(&format!("w{load}-cf-r{rep}")), o.get(&format!("w{load}-wf-r{rep}"))) else {
                continue;
            };
            let series = [("CF", cf, ""), ("WF", wf, "")];
            let what = format!("W{load}, {}", replicas_name(rep));
            out.push((
                format!("times-w{load}-r{rep}.svg"),
                bars(
                    &format!("{what}: placement time and FTT per job shape"),
                    "time (s)",
                    by_shape,
                    &series,
                    &times,
                ),
            ));
            out.push((
                format!("tries-w{load}-r{rep}.svg"),
                bars(
                    &format!("{what}: placement and claiming tries per job shape"),
                    "tries per job",
                    by_shape,
                    &series,
                    &tries,
                ),
            ));
        }
    }
    let hb: Vec<(&str, &ConfigResult, &str)> = [("bg 30–40%", "w30-cf-r3"), ("bg 50–60%", "bg50-cf-r3"), ("bg 60–70%", "bg60-cf-r3")]
        .iter()
        .filter_map(|(n, k)| o.get(k).map(|c| (*n, c, "")))
        .collect();
    if hb.len() >= 2 {
        out.push((
            "times-high-background.svg".to_string(),
            bars(
                "W30, CF, 3 replicas: placement time and FTT by background load",
                "time (s)",
                by_shape,
                &hb,
                &times,
            ),
        ));
        out.push((
            "tries-high-background.svg".to_string(),
            bars(
                "W30, CF, 3 replicas: tries by background load",
                "tries per job",
                by_shape,
                &hb,
                &tries,
            ),
        ));
    }
    let sp: Vec<(&str, &ConfigResult, &str)> = [
        ("CF, 1 copy", "spread-cf-r1"),
        ("CF, 3 copies", "spread-cf-r3"),
        ("WF, 1 copy", "spread-wf-r1"),
        ("WF, 3 copies", "spread-wf-r3"),
    ]
    .iter()
    .filter_map(|(n, k)| o.get(k).map(|c| (*n, c, "")))
    .collect();
    if !sp.is_empty() {
        out.push((
            "spread.svg".to_string(),
            bars(
                "Job spread per job shape (execution sites / components)",
                "job spread (%)",
                by_shape,
                &sp,
                &[("", |g| g.spread_pct)],
            ),
        ));
        out.push((
            "coallocated.svg".to_string(),
            bars(
                "Jobs using co-allocation per job shape",
                "co-allocated jobs (%)",
                by_shape,
                &sp,
                &[("", |g| g.coallocated_pct)],
            ),
        ));
    }
    if let Some(u) = o.get("unreliable") {
        let by: GroupsOf = |m| &m.by_shape_priority;
        let pr = [("high", u, "high"), ("low", u, "low")];
        out.push((
            "unreliable-failures.svg".to_string(),
            bars(
                "Unreliable testbed: failure rate per job shape and priority",
                "failures / successful placements (%)",
                by,
                &pr,
                &[("", |g| g.failure_pct)],
            ),
        ));
        out.push((
            "unreliable-times.svg".to_string(),
            bars(
                "Unreliable testbed: total placement time and start delay",
                "time (s)",
                by,
                &pr,
                &[("placement", |g| g.placement_s), ("start delay", |g| g.start_delay_s)],
            ),
        ));
        out.push((
            "unreliable-coallocated.svg".to_string(),
            bars(
                "Unreliable testbed: jobs using co-allocation",
                "co-allocated jobs (%)",
                by,
                &pr,
                &[("", |g| g.coallocated_pct)],
            ),
        ));
    }
    let rn: Vec<(&str, &ConfigResult, &str)> = [("W_nc", "wnc"), ("W_c", "wc")]
        .iter()
        .filter_map(|(n, k)| o.get(k).map(|c| (*n, c, "high")))
        .collect();
    if !rn.is_empty() {
        out.push((
            "runners-times.svg".to_string(),
            bars(
                "W_nc vs W_c: placement time per job size",
                "time (s)",
                |m| &m.by_size_priority,
                &rn,
                &[("placement", |g| g.placement_s)],
            ),
        ));
    }
    out
}

type Metric = fn(&Group) -> f64;
type GroupsOf = fn(&RunMetrics) -> &BTreeMap<String, Group>;

/// Grouped bars with 95% CIs: one category per group (its key's first word: the shape or the
/// size), one bar per series × metric. A series is (name, configuration, key suffix): the group
/// of category `c` is `c` or `"c suffix"`.
fn bars(title: &str, y: &str, by: GroupsOf, series: &[(&str, &ConfigResult, &str)], metrics: &[(&str, Metric)]) -> String {
    let mut cats: Vec<String> = series
        .iter()
        .flat_map(|(_, c, _)| {
            c.runs
                .iter()
                .flat_map(|m| by(m).keys().map(|k| k.split(' ').next().unwrap_or("").to_string()))
        })
        .collect();
    cats.sort_by_key(|k| shape_order(k));
    cats.dedup();
    let mut out = Vec::new();
    let mut errs = Vec::new();
    for (name, c, suffix) in series {
        for (metric, f) in metrics {
            let aggs: Vec<Agg> = cats
                .iter()
                .map(|cat| {
                    let key = if suffix.is_empty() {
                        cat.clone()
                    } else {
                        format!("{cat} {suffix}")
                    };
                    Agg::group(&c.runs, by, &key, f)
                })
                .collect();
            let label = if metric.is_empty() {
                name.to_string()
            } else {
                format!("{name} {metric}")
            };
            out.push((label, aggs.iter().map(|a| a.mean).collect::<Vec<_>>()));
            errs.push(aggs.iter().map(|a| if a.ci.is_finite() { a.ci } else { 0.0 }).collect::<Vec<_>>());
        }
    }
    plot::grouped_bar_svg(title, y, &cats, &out, Some(&errs))
}

fn utilization_row(s: &mut String, c: &ConfigResult) {
    let r = &c.runs;
    let stable = r.iter().filter(|m| m.stable()).count();
    let _ = writeln!(
        s,
        "| {} | {} | {} | {} | {} | {} | {} | {}/{} | {} | {} | {} | {} | {} | {} |",
        c.label,
        Agg::over(r, |m| m.util.total()).fmt(1),
        Agg::over(r, |m| m.util.background).fmt(1),
        Agg::over(r, |m| m.util.grid).fmt(1),
        Agg::over(r, |m| m.util.pwt).fmt(1),
        Agg::over(r, |m| m.util.pgt).fmt(1),
        Agg::over(r, |m| m.max_queue as f64).fmt(1),
        stable,
        r.len(),
        Agg::over(r, |m| m.drain_s / 60.0).fmt(0),
        Agg::over(r, |m| m.all.placement_s).fmt(0),
        Agg::over(r, |m| m.all.ftt_s).fmt(1),
        Agg::over(r, |m| m.all.twt_s).fmt(0),
        Agg::over(r, |m| m.all.placement_tries).fmt(2),
        Agg::over(r, |m| m.all.claiming_tries).fmt(2),
    );
}

const UTIL_HEADER: &str = "| configuration | total % | background % | grid % | PWT % | PGT % | max queue | stable | drain min | placement s | FTT s | TWT s | plc tries | clm tries |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";

fn group_table(s: &mut String, cs: &[&ConfigResult], by: fn(&RunMetrics) -> &BTreeMap<String, Group>, cols: &[(&str, Metric, usize)]) {
    let _ = write!(s, "| configuration | group | jobs |");
    for (name, _, _) in cols {
        let _ = write!(s, " {name} |");
    }
    let _ = write!(s, "\n|---|---|---|");
    for _ in cols {
        s.push_str("---|");
    }
    s.push('\n');
    for c in cs {
        for k in shapes_of(&[c], by) {
            let jobs = Agg::group(&c.runs, by, &k, |g| g.jobs as f64);
            let _ = write!(s, "| {} | {} | {} |", c.label, k, jobs.fmt(0));
            for (_, f, d) in cols {
                let _ = write!(s, " {} |", Agg::group(&c.runs, by, &k, f).fmt(*d));
            }
            s.push('\n');
        }
    }
}

fn checks_table(s: &mut String, checks: &[Check]) {
    s.push_str(
        "| seed figure/section | quantity | seed value | source | koalesce (mean ± 95% CI) | agrees? |\n|---|---|---|---|---|---|\n",
    );
    for c in checks {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            c.reference,
            c.quantity,
            c.seed,
            c.source,
            c.koalesce,
            c.verdict.name()
        );
    }
}

fn images(s: &mut String, names: &[String]) {
    for n in names {
        let _ = writeln!(s, "![{n}]({n})");
    }
    s.push('\n');
}

/// All tables as Markdown.
pub fn markdown(o: &Outcome) -> String {
    let checks = checks(o);
    let mut s = String::new();
    let _ = writeln!(s, "# KOALA experiments in the koalesce simulator — generated tables\n");
    let _ = writeln!(
        s,
        "Generated by `koalesce experiment koala`: seeds {:?}, job counts × {}. Values are means over the seeds ± the half-width of their 95% confidence interval (Student t). Utilizations are means over the arrival window [0, last arrival]; \"total\" is background + grid + PWT (000 §5.1); PGT is shown apart (its processors are idle or used by local jobs). \"stable\" counts the seeds whose run ended within 10% of the arrival span (≥ 5 min) after the last arrival with every job done; \"drain\" is end of run − last arrival. Placement time is the total over all placements of a job.\n",
        o.options.seeds,
        o.options.scale
    );
    let agree = |v: Verdict| checks.iter().filter(|c| c.verdict == v).count();
    let _ = writeln!(
        s,
        "Seed comparisons: {} yes, {} partly, {} no.\n",
        agree(Verdict::Yes),
        agree(Verdict::Partly),
        agree(Verdict::No)
    );
    for (e, cs) in &o.experiments {
        let _ = writeln!(s, "## {}\n", e.title());
        s.push_str(UTIL_HEADER);
        for c in cs {
            utilization_row(&mut s, c);
        }
        s.push('\n');
        let refs: Vec<&ConfigResult> = cs.iter().collect();
        match e {
            Exp::Stable | Exp::HighBackground => {
                let _ = writeln!(s, "Per job shape (C×S = C components of S processors):\n");
                group_table(
                    &mut s,
                    &refs,
                    |m| &m.by_shape,
                    &[
                        ("placement s", |g| g.placement_s, 0),
                        ("FTT s", |g| g.ftt_s, 1),
                        ("TWT s", |g| g.twt_s, 0),
                        ("plc tries", |g| g.placement_tries, 2),
                        ("clm tries", |g| g.claiming_tries, 2),
                        ("spread %", |g| g.spread_pct, 0),
                    ],
                );
                s.push('\n');
            }
            Exp::Spread => {
                let _ = writeln!(s, "| configuration | job spread % | co-allocated jobs % |\n|---|---|---|");
                for c in cs {
                    let _ = writeln!(
                        s,
                        "| {} | {} | {} |",
                        c.label,
                        Agg::over(&c.runs, |m| m.all.spread_pct).fmt(1),
                        Agg::over(&c.runs, |m| m.all.coallocated_pct).fmt(1)
                    );
                }
                s.push_str("\nPer job shape:\n\n");
                group_table(
                    &mut s,
                    &refs,
                    |m| &m.by_shape,
                    &[
                        ("spread %", |g| g.spread_pct, 0),
                        ("co-allocated %", |g| g.coallocated_pct, 0),
                        ("placement s", |g| g.placement_s, 0),
                        ("FTT s", |g| g.ftt_s, 1),
                    ],
                );
                s.push('\n');
            }
            Exp::Unreliable => {
                for c in cs {
                    let r = &c.runs;
                    let _ = writeln!(
                        s,
                        "{}: utilization of the sites never blacklisted {} % (of {} processors), over all sites (whole run) {} %; soft errors {}; preemptions {}; blacklisted: {}.\n",
                        c.label,
                        Agg::over(r, |m| m.util_usable_total).fmt(1),
                        r.first().map(|m| m.usable_processors).unwrap_or(0),
                        Agg::over(r, |m| m.util_run.total()).fmt(1),
                        Agg::over(r, |m| m.soft_errors as f64).fmt(0),
                        Agg::over(r, |m| m.preemptions as f64).fmt(0),
                        r.iter().map(|m| m.blacklisted.iter().map(|(t, s)| format!("{s} at {:.0} min", t / 60.0)).collect::<Vec<_>>().join(", ")).collect::<Vec<_>>().join("; "),
                    );
                }
                s.push_str("Per job shape and priority:\n\n");
                group_table(
                    &mut s,
                    &refs,
                    |m| &m.by_shape_priority,
                    &[
                        ("failure %", |g| g.failure_pct, 1),
                        ("total placement s", |g| g.placement_s, 0),
                        ("start delay s", |g| g.start_delay_s, 0),
                        ("co-allocated %", |g| g.coallocated_pct, 0),
                        ("plc tries", |g| g.placement_tries, 1),
                        ("clm tries", |g| g.claiming_tries, 2),
                    ],
                );
                s.push('\n');
            }
            Exp::Runners => {
                let _ = writeln!(
                    s,
                    "| configuration | throughput jobs/min | last arrival s | end s |\n|---|---|---|---|"
                );
                for c in cs {
                    let r = &c.runs;
                    let _ = writeln!(
                        s,
                        "| {} | {} | {} | {} |",
                        c.label,
                        Agg::over(r, |m| m.throughput_per_min).fmt(2),
                        Agg::over(r, |m| m.last_arrival_s).fmt(0),
                        Agg::over(r, |m| m.end_s).fmt(0)
                    );
                }
                s.push_str("\nPer job size:\n\n");
                group_table(
                    &mut s,
                    &refs,
                    |m| &m.by_size_priority,
                    &[
                        ("placement s", |g| g.placement_s, 0),
                        ("TWT s", |g| g.twt_s, 0),
                        ("co-allocated %", |g| g.coallocated_pct, 0),
                        ("plc tries", |g| g.placement_tries, 1),
                    ],
                );
                s.push('\n');
            }
            Exp::Sensitivity => {
                let _ = writeln!(s, "Reference rows (gigabit backbone, gigabit backbone with 1200 Mbit/s site links, placement on submission, ordinary users' jobs) are `W30, CF, 3 replicas` and `W30, WF, unreplicated` of the first experiment, and the unreliable testbed of its own section.\n");
                for c in cs.iter().filter(|c| c.key.starts_with("unreliable")) {
                    let r = &c.runs;
                    let _ = writeln!(
                        s,
                        "{}: utilization of the sites never blacklisted {} % (background {} %, grid {} %), jobs completed {} %, failure rate {} %.\n",
                        c.label,
                        Agg::over(r, |m| m.util_usable_total).fmt(1),
                        Agg::over(r, |m| m.util_run.background).fmt(1),
                        Agg::over(r, |m| m.util_run.grid).fmt(1),
                        Agg::over(r, |m| 100.0 * m.succeeded as f64 / m.jobs.max(1) as f64).fmt(0),
                        Agg::over(r, |m| m.all.failure_pct).fmt(1),
                    );
                }
            }
        }
        let mine: Vec<Check> = checks.iter().filter(|c| c.exp == *e).cloned().collect();
        if !mine.is_empty() {
            let _ = writeln!(s, "Seed vs koalesce:\n");
            checks_table(&mut s, &mine);
            s.push('\n');
        }
        let pics: Vec<String> = plots_of(*e, cs);
        if !pics.is_empty() {
            images(&mut s, &pics);
        }
    }
    s
}

fn plots_of(e: Exp, cs: &[ConfigResult]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    if !matches!(e, Exp::Sensitivity | Exp::Spread) {
        v.extend(cs.iter().map(|c| format!("util-{}.svg", c.key)));
    }
    match e {
        Exp::Stable => {
            for load in [30, 50] {
                for rep in [1, 3] {
                    if cs.iter().any(|c| c.key == format!("w{load}-cf-r{rep}")) && cs.iter().any(|c| c.key == format!("w{load}-wf-r{rep}"))
                    {
                        v.push(format!("times-w{load}-r{rep}.svg"));
                        v.push(format!("tries-w{load}-r{rep}.svg"));
                    }
                }
            }
        }
        Exp::HighBackground => {
            v.push("times-high-background.svg".to_string());
            v.push("tries-high-background.svg".to_string());
        }
        Exp::Spread => {
            v.push("spread.svg".to_string());
            v.push("coallocated.svg".to_string());
        }
        Exp::Unreliable => {
            v.push("unreliable-failures.svg".to_string());
            v.push("unreliable-times.svg".to_string());
            v.push("unreliable-coallocated.svg".to_string());
        }
        Exp::Runners => v.push("runners-times.svg".to_string()),
        Exp::Sensitivity => {}
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        let a = Agg::of(&[10.0, 11.0, 12.0]);
        assert_eq!(in_range(&a, 9.0, 13.0), Verdict::Yes);
        assert_eq!(in_range(&a, 12.5, 20.0), Verdict::Partly);
        assert_eq!(in_range(&a, 30.0, 40.0), Verdict::No);
        assert_eq!(less(&[1.0, 2.0], &[3.0, 4.0]), Verdict::Yes);
        assert_eq!(less(&[1.0, 5.0], &[3.0, 4.0]), Verdict::Partly);
        assert_eq!(less(&[5.0, 5.0], &[3.0, 4.0]), Verdict::No);
    }

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

    #[test]
    fn shapes_sort_by_components_then_size() {
        let mut v = vec!["4x8".to_string(), "1x16".to_string(), "2x8".to_string(), "1x8".to_string()];
        v.sort_by_key(|k| shape_order(k));
        assert_eq!(v, ["1x8", "1x16", "2x8", "4x8"]);
    }
}
