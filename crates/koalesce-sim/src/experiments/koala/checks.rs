//! Comparisons with the seeds: one [`Check`] per statement of 000 and 003 that a run can test.
//!
//! The rules (also in docs/experiments/koala.md):
//! * a value with a range: *yes* when the mean over the seeds is in the range, *partly* when its
//!   95% confidence interval (Student t) reaches it, *no* otherwise;
//! * an ordering a < b: *yes* when it holds on the means and in every seed, *partly* when it holds
//!   on the means only, *no* otherwise;
//! * a share of seeds (stable, saturated) or of jobs (finished): shown with its 95% Wilson
//!   interval; *yes* when at least 90% of the seeds (all jobs) qualify, *partly* from 50%;
//! * a row whose seed value was used to choose an assumed parameter is *calibrated*: it is shown
//!   but not counted, because the simulation could not have failed it.

use super::super::measure::{Agg, Group, Prop, RunMetrics};
use super::Outcome;
use super::{replicas_name, Exp};

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

    /// Yes if all of `v` are yes, no if all are no, partly otherwise.
    pub fn all(v: &[Verdict]) -> Verdict {
        if v.iter().all(|x| *x == Verdict::Yes) {
            Verdict::Yes
        } else if v.iter().all(|x| *x == Verdict::No) {
            Verdict::No
        } else {
            Verdict::Partly
        }
    }
}

/// What a check rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// A value stated in the seed's text.
    Text,
    /// An ordering or trend stated in the text.
    Trend,
    /// The seed value was used to choose an assumed parameter: shown, not counted.
    Calibrated,
    /// The simulator has no model of what the seed measured (middleware, application errors):
    /// counted as *no*.
    NotModelled,
    /// A second reading of the seed's setup, run beside the main one: shown, not counted.
    Alternative,
}

impl Basis {
    pub fn name(self) -> &'static str {
        match self {
            Basis::Text => "text",
            Basis::Trend => "text (trend)",
            Basis::Calibrated => "calibrated: not counted",
            Basis::NotModelled => "not modelled",
            Basis::Alternative => "other reading: not counted",
        }
    }

    /// Whether rows on this basis count in the agree / partly / not totals.
    pub fn counted(self) -> bool {
        !matches!(self, Basis::Calibrated | Basis::Alternative)
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
    pub basis: Basis,
    pub koalesce: String,
    pub verdict: Verdict,
}

/// Counted rows with each verdict: (yes, partly, no), and the rows not counted.
pub fn tally(checks: &[Check]) -> (usize, usize, usize, usize) {
    let n = |v: Verdict| checks.iter().filter(|c| c.basis.counted() && c.verdict == v).count();
    (
        n(Verdict::Yes),
        n(Verdict::Partly),
        n(Verdict::No),
        checks.iter().filter(|c| !c.basis.counted()).count(),
    )
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
    if a.is_empty() || b.is_empty() || mean(a).is_nan() || mean(b).is_nan() || mean(a) >= mean(b) {
        return Verdict::No;
    }
    if a.iter().zip(b).all(|(x, y)| x < y) {
        Verdict::Yes
    } else {
        Verdict::Partly
    }
}

/// A share: at least 90%: yes; at least 50%: partly; else no.
pub fn share(p: &Prop) -> Verdict {
    let x = p.pct();
    if x >= 90.0 {
        Verdict::Yes
    } else if x >= 50.0 {
        Verdict::Partly
    } else {
        Verdict::No
    }
}

/// How many of `n` statements hold: all: yes; at least `partly_from`: partly; else no.
pub fn count(holds: usize, n: usize, partly_from: usize) -> Verdict {
    if holds == n {
        Verdict::Yes
    } else if holds >= partly_from {
        Verdict::Partly
    } else {
        Verdict::No
    }
}

pub(super) fn per_run(runs: &[RunMetrics], f: impl Fn(&RunMetrics) -> f64) -> Vec<f64> {
    runs.iter().map(f).collect()
}

pub(super) fn per_run_group(runs: &[RunMetrics], key: &str, f: impl Fn(&Group) -> f64) -> Vec<f64> {
    runs.iter().map(|r| r.by_shape.get(key).map(&f).unwrap_or(f64::NAN)).collect()
}

/// The job-weighted mean of `f` over the groups of `by_size_priority` of total size `size`, per
/// run.
pub(super) fn per_run_size(runs: &[RunMetrics], size: &str, f: impl Fn(&Group) -> f64) -> Vec<f64> {
    runs.iter()
        .map(|m| {
            let (mut s, mut n) = (0.0, 0usize);
            for (key, g) in &m.by_size_priority {
                if key.split(' ').next() == Some(size) {
                    s += f(g) * g.jobs as f64;
                    n += g.jobs;
                }
            }
            if n == 0 {
                f64::NAN
            } else {
                s / n as f64
            }
        })
        .collect()
}

/// Collects checks.
pub(super) struct Checker<'a> {
    pub(super) o: &'a Outcome,
    pub(super) out: Vec<Check>,
}

impl<'a> Checker<'a> {
    pub(super) fn runs(&self, key: &str) -> Option<&'a [RunMetrics]> {
        self.o.runs(key)
    }

    pub(super) fn label(&self, key: &str) -> String {
        self.o.get(key).map(|c| c.label.clone()).unwrap_or_default()
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn push(
        &mut self,
        exp: Exp,
        reference: &str,
        quantity: impl Into<String>,
        seed: impl Into<String>,
        basis: Basis,
        koalesce: impl Into<String>,
        verdict: Verdict,
    ) {
        self.out.push(Check {
            exp,
            reference: reference.to_string(),
            quantity: quantity.into(),
            seed: seed.into(),
            basis,
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
        (lo, hi): (f64, f64),
        d: usize,
        f: impl Fn(&RunMetrics) -> f64,
    ) {
        self.range_as(exp, reference, key, quantity, seed, (lo, hi), d, Basis::Text, f);
    }

    /// [`Checker::range`] on a given basis.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn range_as(
        &mut self,
        exp: Exp,
        reference: &str,
        key: &str,
        quantity: &str,
        seed: &str,
        (lo, hi): (f64, f64),
        d: usize,
        basis: Basis,
        f: impl Fn(&RunMetrics) -> f64,
    ) {
        let Some(runs) = self.runs(key) else { return };
        let a = Agg::over(runs, f);
        let label = self.label(key);
        self.push(
            exp,
            reference,
            format!("{label}: {quantity}"),
            seed,
            basis,
            a.fmt(d),
            in_range(&a, lo, hi),
        );
    }

    /// A share of the seeds of `key` (with its Wilson interval).
    pub(super) fn seeds_share(
        &mut self,
        exp: Exp,
        reference: &str,
        key: &str,
        quantity: &str,
        seed: &str,
        f: impl Fn(&RunMetrics) -> bool,
    ) {
        let Some(runs) = self.runs(key) else { return };
        let p = Prop::seeds(runs, f);
        let label = self.label(key);
        self.push(
            exp,
            reference,
            format!("{label}: {quantity}"),
            seed,
            Basis::Text,
            p.fmt(),
            share(&p),
        );
    }

    /// All jobs of `key` finished (pooled over the seeds, with the Wilson interval).
    pub(super) fn all_finished(&mut self, exp: Exp, reference: &str, key: &str, seed: &str) {
        let Some(runs) = self.runs(key) else { return };
        let k: u64 = runs.iter().map(|m| m.succeeded as u64).sum();
        let n: u64 = runs.iter().map(|m| m.jobs as u64).sum();
        let p = Prop::new(k, n);
        let v = if k == n { Verdict::Yes } else { share(&p) };
        let label = self.label(key);
        self.push(exp, reference, format!("{label}: jobs finished"), seed, Basis::Text, p.fmt(), v);
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
        let (Some(ra), Some(rb)) = (self.runs(a), self.runs(b)) else {
            return;
        };
        let (va, vb) = (per_run(ra, &f), per_run(rb, &f));
        let text = format!("{} vs {}", Agg::of(&va).fmt(d), Agg::of(&vb).fmt(d));
        self.push(exp, reference, quantity, seed, Basis::Trend, text, less(&va, &vb));
    }

    /// The orderings `pairs` (a < b, by group key of `by_shape`) of one configuration, counted on
    /// the means: all hold: yes; at least `partly_from`: partly.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn shape_orders(
        &mut self,
        exp: Exp,
        reference: &str,
        key: &str,
        quantity: &str,
        pairs: &[(&str, &str)],
        partly_from: usize,
        d: usize,
        f: fn(&Group) -> f64,
    ) {
        let Some(runs) = self.runs(key) else { return };
        let mean = |s: &str| Agg::of(&per_run_group(runs, s, f)).mean;
        let holds: Vec<String> = pairs
            .iter()
            .filter(|(a, b)| mean(a) < mean(b))
            .map(|(a, b)| format!("{a} < {b}"))
            .collect();
        let fails: Vec<String> = pairs
            .iter()
            .filter(|(a, b)| mean(a) >= mean(b))
            .map(|(a, b)| format!("{a} {:.*} ≥ {b} {:.*}", d, mean(a), d, mean(b)))
            .collect();
        let text = if fails.is_empty() {
            format!("all {} hold on the means", pairs.len())
        } else {
            format!("{}/{} hold; not: {}", holds.len(), pairs.len(), fails.join(", "))
        };
        let label = self.label(key);
        self.push(
            exp,
            reference,
            format!("{label}: {quantity}"),
            "increases",
            Basis::Trend,
            text,
            count(holds.len(), pairs.len(), partly_from),
        );
    }
}

/// Every comparison with the seeds that the outcome has the runs for.
pub fn checks(o: &Outcome) -> Vec<Check> {
    let mut c = Checker { o, out: Vec::new() };
    super::checks_5_1::stable_checks(&mut c);
    super::checks_5_1::high_background_checks(&mut c);
    super::checks_5_1::spread_checks(&mut c);
    super::checks_other::unreliable_checks(&mut c);
    super::checks_other::runners_checks(&mut c);
    c.out
}

/// "W30, 3 replicas".
pub(super) fn workload_name(load: u32, rep: u32) -> String {
    format!("W{load}, {}", replicas_name(rep))
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
        assert_eq!(less(&[f64::NAN], &[3.0]), Verdict::No);
        assert_eq!(share(&Prop::new(10, 10)), Verdict::Yes);
        assert_eq!(share(&Prop::new(9, 10)), Verdict::Yes);
        assert_eq!(share(&Prop::new(6, 10)), Verdict::Partly);
        assert_eq!(share(&Prop::new(4, 10)), Verdict::No);
        assert_eq!(count(7, 7, 5), Verdict::Yes);
        assert_eq!(count(5, 7, 5), Verdict::Partly);
        assert_eq!(count(4, 7, 5), Verdict::No);
        assert_eq!(Verdict::all(&[Verdict::Yes, Verdict::No]), Verdict::Partly);
    }

    #[test]
    fn calibrated_and_alternative_rows_are_not_counted() {
        let row = |basis, verdict| Check {
            exp: Exp::Stable,
            reference: String::new(),
            quantity: String::new(),
            seed: String::new(),
            basis,
            koalesce: String::new(),
            verdict,
        };
        let v = [
            row(Basis::Text, Verdict::Yes),
            row(Basis::Trend, Verdict::Partly),
            row(Basis::NotModelled, Verdict::No),
            row(Basis::Calibrated, Verdict::Yes),
            row(Basis::Alternative, Verdict::No),
        ];
        assert_eq!(tally(&v), (1, 1, 1, 2));
    }
}
