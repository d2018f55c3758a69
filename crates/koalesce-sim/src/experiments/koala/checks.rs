//! Comparisons with the seeds: one [`Check`] per statement of 000 and 003 that a run can test.

use super::super::measure::{Agg, Group, RunMetrics};
use super::{replicas_name, Exp, Outcome};

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

pub(super) fn per_run(runs: &[RunMetrics], f: impl Fn(&RunMetrics) -> f64) -> Vec<f64> {
    runs.iter().map(f).collect()
}

pub(super) fn per_run_group(runs: &[RunMetrics], key: &str, f: impl Fn(&Group) -> f64) -> Vec<f64> {
    runs.iter().map(|r| r.by_shape.get(key).map(&f).unwrap_or(f64::NAN)).collect()
}

pub(super) struct Checker<'a> {
    pub(super) o: &'a Outcome,
    pub(super) out: Vec<Check>,
}

impl Checker<'_> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn push(
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
    pub(super) fn range(
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
    pub(super) fn order(
        &mut self,
        exp: Exp,
        reference: &str,
        quantity: &str,
        seed: &str,
        a: &str,
        b: &str,
        d: usize,
        f: impl Fn(&RunMetrics) -> f64,
    ) {
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
    super::checks_other::unreliable_checks(&mut c);
    super::checks_other::runners_checks(&mut c);
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
}
