//! Comparisons with 003 §5.2 (the unreliable testbed) and Ch. 6 (the runners).

use super::super::measure::{Agg, Group, RunMetrics};
use super::checks::{less, per_run_group, Checker, Verdict};
use super::Exp;

pub(super) fn unreliable_checks(c: &mut Checker<'_>) {
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
        |m| m.usable.total(),
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

pub(super) fn runners_checks(c: &mut Checker<'_>) {
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
