//! Comparisons with 003 §5.2 (the unreliable testbed) and Ch. 6 (the runners).

use super::super::measure::{Agg, Group, Prop, RunMetrics};
use super::checks::{less, per_run, per_run_group, per_run_size, share, Basis, Checker, Verdict};
use super::checks_5_1::series_range;
use super::Exp;

/// Job-weighted mean of `f` over the shape-and-priority groups whose key ends with `prio`.
fn per_run_priority(runs: &[RunMetrics], prio: &str, f: fn(&Group) -> f64) -> Vec<f64> {
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
}

pub(super) fn unreliable_checks(c: &mut Checker<'_>) {
    let e = Exp::Unreliable;
    let k = "unreliable";
    let Some(runs) = c.runs(k) else { return };
    let delft = Prop::seeds(runs, |m| m.blacklisted.iter().any(|(_, s)| s == "delft"));
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
        "Delft blacklisted (seeds), and no other site",
        "\"reported a very high consecutive number of soft errors and was taken out of selection\"",
        Basis::Text,
        format!(
            "{} (at {} min); another site blacklisted in {others} seeds",
            delft.fmt(),
            when.fmt(0)
        ),
        if others == 0 { share(&delft) } else { Verdict::No },
    );
    c.all_finished(e, "003 §5.2.5", k, "\"all our jobs eventually ran to completion successfully\"");
    c.range(
        e,
        "003 §5.2.3, Fig. 5.11",
        k,
        "utilization of the 250 processors left (bg + grid + PWT over those sites), %",
        "\"80% to 90% of the system was used during the experiment\"",
        (80.0, 90.0),
        1,
        |m| m.usable.total(),
    );
    c.range_as(
        e,
        "003 §5.2.4, Fig. 5.12.a",
        k,
        "failure rate, % (set by the assumed fault rates)",
        "\"much higher compared to the stable system, where it was always below 15%\" (> 15)",
        (15.0, 100.0),
        1,
        Basis::Calibrated,
        |m| m.all.failure_pct,
    );
    c.push(
        e,
        "003 §5.2.4, Fig. 5.12.a",
        "failure rate: co-allocated jobs vs jobs on one cluster (%)",
        "\"Co-allocation has the effect of increasing the failure rate\"",
        Basis::Trend,
        format!(
            "one cluster {} vs co-allocated {}",
            Agg::over(runs, |m| m.failure_pct_single).fmt(1),
            Agg::over(runs, |m| m.failure_pct_coallocated).fmt(1)
        ),
        less(
            &per_run(runs, |m| m.failure_pct_single),
            &per_run(runs, |m| m.failure_pct_coallocated),
        ),
    );
    let (hi, lo) = (
        per_run_priority(runs, " high", |g| g.failure_pct),
        per_run_priority(runs, " low", |g| g.failure_pct),
    );
    c.push(
        e,
        "003 §5.2.4, Fig. 5.12.a",
        "failure rate: low < high priority (%)",
        "\"we observe more failures for high-priority jobs\"",
        Basis::Trend,
        format!("low {} vs high {}", Agg::of(&lo).fmt(1), Agg::of(&hi).fmt(1)),
        less(&lo, &hi),
    );
    small_jobs(c, k, Basis::Text);
    small_jobs(c, "unreliable-cycle", Basis::Alternative);
    if c.runs("unreliable-cycle").is_some() {
        c.range_as(
            e,
            "003 §5.2.3, Fig. 5.11",
            "unreliable-cycle",
            "utilization of the 250 processors left, %",
            "\"80% to 90%\"",
            (80.0, 90.0),
            1,
            Basis::Alternative,
            |m| m.usable.total(),
        );
    }
    for (what, f) in [
        ("total placement time (s)", (|g: &Group| g.placement_s) as fn(&Group) -> f64),
        ("start delay (s)", |g: &Group| g.start_delay_s),
    ] {
        let (hi, lo) = (per_run_priority(runs, " high", f), per_run_priority(runs, " low", f));
        c.push(
            e,
            "003 §5.2.5, Fig. 5.13",
            format!("{what}: high < low priority"),
            "\"jobs of high priority out-perform jobs of low priority\"",
            Basis::Trend,
            format!("high {} vs low {}", Agg::of(&hi).fmt(0), Agg::of(&lo).fmt(0)),
            less(&hi, &lo),
        );
    }
    for (what, f, reference, seed) in [
        (
            "co-allocated jobs (%)",
            (|g: &Group| g.coallocated_pct) as fn(&Group) -> f64,
            "003 §5.2.4, Fig. 5.12.b",
            "\"increases as the number of job components increases\"",
        ),
        (
            "total placement time (s)",
            |g: &Group| g.placement_s,
            "003 §5.2.5, Fig. 5.13.a",
            "\"an increase in the total placement times of jobs as the number of components increases\"",
        ),
        (
            "start delay (s)",
            |g: &Group| g.start_delay_s,
            "003 §5.2.5, Fig. 5.13.b",
            "\"the start delay increases with the number of components\"",
        ),
    ] {
        let chain = ["3x24", "4x18", "6x12", "8x9"];
        let means: Vec<Vec<f64>> = chain.iter().map(|s| per_run_group(runs, s, f)).collect();
        let verdicts: Vec<Verdict> = means.windows(2).map(|w| less(&w[0], &w[1])).collect();
        let text: Vec<String> = chain
            .iter()
            .zip(&means)
            .map(|(s, v)| format!("{s} {}", Agg::of(v).fmt(0)))
            .collect();
        c.push(
            e,
            reference,
            format!("size 72: {what} grows with the number of components (3 orderings)"),
            seed,
            Basis::Trend,
            text.join(" < "),
            Verdict::all(&verdicts),
        );
    }
    let (a, b) = (
        per_run_group(runs, "3x12", |g| g.placement_s),
        per_run_group(runs, "4x9", |g| g.placement_s),
    );
    c.push(
        e,
        "003 §5.2.5, Fig. 5.13.a",
        "total placement time: 4x9 not below 3x12 (s)",
        "\"splitting jobs into more components does not necessarily lead to smaller total placement times (e.g., compare job sizes 3X12 and 4X9)\"",
        Basis::Trend,
        format!("3x12 {} vs 4x9 {}", Agg::of(&a).fmt(0), Agg::of(&b).fmt(0)),
        match less(&b, &a) {
            Verdict::Yes => Verdict::No,
            Verdict::Partly => Verdict::Partly,
            Verdict::No => Verdict::Yes,
        },
    );
    fig_5_8_range(c, runs);
}

/// 003 §5.2.5: "Jobs of small sizes (e.g., of size 36 shown in Figure 5.13.a) do not suffer from
/// long waiting times for enough processors to be available." Not long: below size 72's and at
/// most 30 minutes (a few 4-minute scans).
fn small_jobs(c: &mut Checker<'_>, k: &str, basis: Basis) {
    let Some(runs) = c.runs(k) else { return };
    let (small, big) = (
        per_run_size(runs, "36", |g| g.placement_s),
        per_run_size(runs, "72", |g| g.placement_s),
    );
    let (s, b) = (Agg::of(&small), Agg::of(&big));
    let shorter = less(&small, &big);
    let short = if s.mean <= 1800.0 { Verdict::Yes } else { Verdict::No };
    let label = c.label(k);
    c.push(
        Exp::Unreliable,
        "003 §5.2.5, Fig. 5.13.a",
        format!("{label}: total placement time of size-36 jobs (below size 72's and ≤ 30 min), s"),
        "\"do not suffer from long waiting times\"",
        basis,
        format!("36: {} vs 72: {}", s.fmt(0), b.fmt(0)),
        Verdict::all(&[shorter, short]),
    );
}

/// 003 §5.2.4: "the range of the percentage of jobs using co-allocation in this figure [5.12.b]
/// is the same as in Figure 5.8": the per-shape range of §5.2 against the spread experiment's
/// (CF, which §5.2 is assumed to use; 2 replicas there, 1 and 3 here: both are compared).
fn fig_5_8_range(c: &mut Checker<'_>, runs: &[RunMetrics]) {
    let range = |runs: &[RunMetrics]| {
        let mut shapes: Vec<String> = runs.iter().flat_map(|m| m.by_shape.keys().cloned()).collect();
        shapes.sort();
        shapes.dedup();
        let means: Vec<f64> = shapes
            .iter()
            .map(|s| Agg::of(&per_run_group(runs, s, |g| g.coallocated_pct)).mean)
            .filter(|x| x.is_finite())
            .collect();
        (
            means.iter().copied().fold(f64::INFINITY, f64::min),
            means.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        )
    };
    let (lo, hi) = range(runs);
    for k in ["spread-cf-r1", "spread-cf-r3"] {
        let Some(sp) = c.runs(k) else { continue };
        let (slo, shi) = range(sp);
        let v = if (lo - slo).abs() <= 15.0 && (hi - shi).abs() <= 15.0 {
            Verdict::Yes
        } else if lo <= shi && slo <= hi {
            Verdict::Partly
        } else {
            Verdict::No
        };
        let label = c.label(k);
        c.push(
            Exp::Unreliable,
            "003 §5.2.4, Figs. 5.12.b and 5.8",
            format!("range of co-allocated % over job shapes: §5.2 vs {label}"),
            "\"the same as in Figure 5.8\" (both ends within 15 points)",
            Basis::Trend,
            format!("{lo:.0}–{hi:.0}% vs {slo:.0}–{shi:.0}%"),
            v,
        );
    }
}

pub(super) fn runners_checks(c: &mut Checker<'_>) {
    let e = Exp::Runners;
    let r = "003 §6.2.3, Fig. 6.3";
    series_range(c, e, r, "wc", "W_c \"varies between 70% and 80%\"", 70.0, 80.0);
    series_range(c, e, r, "wnc", "W_nc \"varies between 60% and 70%\"", 60.0, 70.0);
    c.order(
        e,
        r,
        "total utilization: W_nc < W_c (%)",
        "W_c's total load \"is higher than the total load with workload W_nc\"",
        "wnc",
        "wc",
        1,
        |m| m.util.total(),
    );
    for k in ["wnc", "wc"] {
        let Some(runs) = c.runs(k) else { continue };
        // The arrival rate of the run: jobs over the arrival span.
        let ratio = |m: &RunMetrics| m.throughput_per_min / ((m.jobs as f64 - 1.0) / (m.last_arrival_s / 60.0)).max(1e-9);
        let t = Agg::over(runs, |m| m.throughput_per_min);
        let q = Agg::over(runs, ratio);
        let around = if (1.8..=2.2).contains(&t.mean) { Verdict::Yes } else { Verdict::No };
        let close = if (0.8..=0.97).contains(&q.mean) {
            Verdict::Yes
        } else if q.mean > 0.97 {
            Verdict::Partly
        } else {
            Verdict::No
        };
        let label = c.label(k);
        c.push(
            e,
            "003 §6.2.2, Fig. 6.2",
            format!("{label}: throughput, jobs/min, and its ratio to the arrival rate (KRunner / DRunner)"),
            "\"around 2 jobs per minute, which means that the system is close to being stable\" (1.8–2.2, ratio 0.8–0.97)",
            Basis::Text,
            format!("{} jobs/min, ratio {}", t.fmt(2), q.fmt(2)),
            Verdict::all(&[around, close]),
        );
    }
    // "Jobs of all sizes are executed equally when co-allocation is used, whereas without
    // co-allocation large jobs may be delayed considerably" (003 §6.3).
    let ratio = |m: &RunMetrics| {
        let size = |z: &str| per_run_size(std::slice::from_ref(m), z, |g| g.placement_s)[0];
        (size("48") + 1.0) / (size("8") + 1.0)
    };
    c.order(
        e,
        "003 §6.2.2, §6.3",
        "placement time of size-48 jobs over size-8 jobs: W_c < W_nc",
        "\"without co-allocation large jobs may be delayed considerably\"",
        "wc",
        "wnc",
        1,
        ratio,
    );
    cumulative(c);
    // "at the end of the job submissions, only jobs of size 48 are still in the queue".
    if let Some(runs) = c.runs("wnc") {
        let k: u64 = runs.iter().map(|m| *m.queued_at_last_arrival.get(&48).unwrap_or(&0) as u64).sum();
        let n: u64 = runs.iter().map(|m| m.queued_at_last_arrival.values().sum::<usize>() as u64).sum();
        let p = Prop::new(k, n);
        c.push(
            e,
            "003 §6.2.2, Fig. 6.2.c (IRunner)",
            "W_nc: jobs still waiting at the last submission that have size 48 (pooled over seeds)",
            "\"only jobs of size 48 are still in the queue\"",
            Basis::Text,
            format!("{} of {n} waiting jobs ({})", k, p.fmt()),
            if n == 0 { Verdict::No } else { share(&p) },
        );
    }
    // The 4 jobs/min runs: "we observe no increase in the throughput of the runners".
    for k in ["wnc", "wc"] {
        let four = format!("{k}-4");
        let (Some(a), Some(b)) = (c.runs(k), c.runs(&four)) else {
            continue;
        };
        let (x, y) = (Agg::over(a, |m| m.throughput_per_min), Agg::over(b, |m| m.throughput_per_min));
        let rise = y.mean / x.mean.max(1e-9);
        let label = c.label(&four);
        c.push(
            e,
            "003 §6.2.4, Fig. 6.5",
            format!("{label}: throughput vs the base rate, jobs/min"),
            "\"no increase in the throughput of the runners\" (at most +10%)",
            Basis::Text,
            format!("{} vs {} (×{rise:.2})", y.fmt(2), x.fmt(2)),
            if rise <= 1.1 {
                Verdict::Yes
            } else if rise <= 1.3 {
                Verdict::Partly
            } else {
                Verdict::No
            },
        );
        c.seeds_share(
            e,
            "003 §6.2.4",
            &four,
            "seeds saturated (not stable)",
            "\"the system is now unstable\"",
            |m| !m.stable(),
        );
    }
    failures(c);
    // Not modelled: the middleware's start-time overhead and the IRunner's application errors.
    let none = "the simulator has no middleware (GRAM, head nodes): STO is 0 by construction";
    for (reference, quantity, seed) in [
        (
            "003 §6.2.4, Fig. 6.4",
            "W_c: start time overhead grows with the number of components",
            "\"the average STO increases with the number of components per job size with workload W_c\"",
        ),
        (
            "003 §6.2.4, Fig. 6.5",
            "start time overhead higher at 4 jobs/min",
            "\"the average STO has increased for both workloads\"",
        ),
    ] {
        c.push(e, reference, quantity, seed, Basis::NotModelled, none, Verdict::No);
    }
    c.push(
        e,
        "003 §6.2.2, Fig. 6.2",
        "IRunner throughput: W_nc below 1 job/min after the last submission, W_c slightly below 2",
        "application errors, Satin components running as redundant copies, jobs hanging until the 15-minute limit",
        Basis::NotModelled,
        "no runner-specific behaviour is simulated: the IRunner runs equal the KRunner/DRunner rows",
        Verdict::No,
    );
}

/// 003 §6.2.2 (Fig. 6.2, lower graphs) and §6.3: the cumulative numbers of jobs per size. At the
/// last submission, the share of each size's submitted jobs that have started: all sizes alike
/// (within 10 points) with W_c, size 48 behind with W_nc.
fn cumulative(c: &mut Checker<'_>) {
    let e = Exp::Runners;
    for (k, equal) in [("wc", true), ("wnc", false)] {
        let Some(runs) = c.runs(k) else { continue };
        let sizes = [8u32, 32, 48];
        let mean = |z: u32| {
            Agg::of(
                &runs
                    .iter()
                    .map(|m| *m.started_by_last_arrival_pct.get(&z).unwrap_or(&f64::NAN))
                    .collect::<Vec<_>>(),
            )
            .mean
        };
        let v: Vec<f64> = sizes.iter().map(|&z| mean(z)).collect();
        let spread = v.iter().copied().fold(f64::NEG_INFINITY, f64::max) - v.iter().copied().fold(f64::INFINITY, f64::min);
        let text = format!("started by the last submission: 8 {:.0}%, 32 {:.0}%, 48 {:.0}%", v[0], v[1], v[2]);
        let (quantity, seed, verdict) = if equal {
            (
                "W_c: jobs of every size started alike (within 10 points)",
                "\"the jobs of all sizes are executed equally\"",
                if spread <= 10.0 {
                    Verdict::Yes
                } else if spread <= 20.0 {
                    Verdict::Partly
                } else {
                    Verdict::No
                },
            )
        } else {
            (
                "W_nc: size-48 jobs behind the others (by more than 10 points)",
                "\"The situation is different for workload W_nc\"",
                if v[0].min(v[1]) - v[2] > 10.0 {
                    Verdict::Yes
                } else if v[2] < v[0].min(v[1]) {
                    Verdict::Partly
                } else {
                    Verdict::No
                },
            )
        };
        c.push(
            e,
            "003 §6.2.2, Fig. 6.2 (lower graphs); §6.3",
            quantity,
            seed,
            Basis::Trend,
            text,
            verdict,
        );
    }
}

/// 003 §6.2.5, Fig. 6.6: failures per job.
fn failures(c: &mut Checker<'_>) {
    let e = Exp::Runners;
    for k in ["wnc-f", "wc-f"] {
        c.range_as(
            e,
            "003 §6.2.5",
            k,
            "failures per job (set by the assumed fault rate)",
            "\"less than 0.05\"",
            (0.0, 0.05),
            3,
            Basis::Calibrated,
            |m| m.all.failures_per_job,
        );
    }
    let (Some(nc), Some(co)) = (c.runs("wnc-f"), c.runs("wc-f")) else {
        return;
    };
    let (a, b) = (
        per_run_size(co, "48", |g| g.failures_per_job),
        per_run_size(nc, "48", |g| g.failures_per_job),
    );
    c.push(
        e,
        "003 §6.2.5, Fig. 6.6",
        "failures per size-48 job: W_c < W_nc",
        "\"not so successful with jobs of size 48 in workload W_nc … this problem did not occur for co-allocated jobs of total size 48\"",
        Basis::Trend,
        format!("W_c {} vs W_nc {}", Agg::of(&a).fmt(3), Agg::of(&b).fmt(3)),
        less(&a, &b),
    );
}
