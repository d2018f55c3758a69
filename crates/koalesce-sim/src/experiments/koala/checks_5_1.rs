//! Comparisons with 003 §5.1 (and 000 §5): the stable system (W30, W50), CF under a high
//! background load, and the job spread. Every reference names the section the quoted text is in.

use super::super::measure::{Agg, Group, RunMetrics};
use super::checks::{count, less, per_run, per_run_group, workload_name, Basis, Checker, Verdict};
use super::Exp;

pub(super) const W30_KEYS: [&str; 4] = ["w30-cf-r1", "w30-cf-r3", "w30-wf-r1", "w30-wf-r3"];
pub(super) const W50_KEYS: [&str; 4] = ["w50-cf-r1", "w50-cf-r3", "w50-wf-r1", "w50-wf-r3"];

/// The number-of-components and size orderings of W30/W50 shapes: 1x8 < 2x8 < 4x8, 1x16 < 2x16 <
/// 4x16, and 8 < 16 at every number of components.
const GROWTH: [(&str, &str); 7] = [
    ("1x8", "2x8"),
    ("2x8", "4x8"),
    ("1x16", "2x16"),
    ("2x16", "4x16"),
    ("1x8", "1x16"),
    ("2x8", "2x16"),
    ("4x8", "4x16"),
];

/// Only the number of components: 1xS < 2xS < 4xS.
const MORE_COMPONENTS: [(&str, &str); 4] = [("1x8", "2x8"), ("2x8", "4x8"), ("1x16", "2x16"), ("2x16", "4x16")];

const SHAPES: [&str; 6] = ["1x8", "1x16", "2x8", "2x16", "4x8", "4x16"];

/// The time-series range of the total utilization (10th–90th percentile of 5-minute windows)
/// against a stated "between lo and hi": inside: yes; overlapping: partly.
pub(super) fn series_range(c: &mut Checker<'_>, exp: Exp, reference: &str, key: &str, seed: &str, lo: f64, hi: f64) {
    let Some(runs) = c.runs(key) else { return };
    let p10 = Agg::over(runs, |m| m.util_total_p10);
    let p90 = Agg::over(runs, |m| m.util_total_p90);
    let v = if p10.mean >= lo && p90.mean <= hi {
        Verdict::Yes
    } else if p10.mean <= hi && p90.mean >= lo {
        Verdict::Partly
    } else {
        Verdict::No
    };
    let label = c.label(key);
    c.push(
        exp,
        reference,
        format!("{label}: total utilization over time (10th–90th percentile of 5-min windows), %"),
        seed,
        Basis::Text,
        format!("{:.1}–{:.1}", p10.mean, p90.mean),
        v,
    );
}

pub(super) fn stable_checks(c: &mut Checker<'_>) {
    let e = Exp::Stable;
    for k in W30_KEYS {
        c.range(
            e,
            "003 §5.1.5, Fig. 5.1; 000 §5.2, Fig. 3",
            k,
            "total utilization (bg + grid + PWT), %",
            "\"the total utilization is about 70%\" (65–75)",
            (65.0, 75.0),
            1,
            |m| m.util.total(),
        );
        c.range(
            e,
            "003 §5.1.5, Fig. 5.1",
            k,
            "KOALA (grid) load, %",
            "\"about 30% for both CF and WF with and without replication\" (25–35)",
            (25.0, 35.0),
            1,
            |m| m.util.grid,
        );
        c.range(
            e,
            "003 §5.1.5, Fig. 5.1",
            k,
            "PWT, %",
            "\"(PWT) is about 2%\" (1–3)",
            (1.0, 3.0),
            1,
            |m| m.util.pwt,
        );
        c.range_as(
            e,
            "003 §5.1.5, Fig. 5.1",
            k,
            "PGT, %",
            "\"(PGT), which ranges between 6% and 9%\"",
            (6.0, 9.0),
            1,
            Basis::Calibrated,
            |m| m.util.pgt,
        );
        c.range(
            e,
            "000 §5.2",
            k,
            "max placement queue",
            "\"the maximum length of the placement queue is only 10\" (≤ 10)",
            (0.0, 10.0),
            1,
            |m| m.max_queue as f64,
        );
        c.seeds_share(
            e,
            "003 §5.1.5; 000 §5.2",
            k,
            "seeds stable (done within 10% of the arrival span after the last arrival)",
            "\"the experiments finished shortly after the submission of the last job\"",
            RunMetrics::stable,
        );
        c.range(
            e,
            "003 §5.1.5, Fig. 5.4",
            k,
            "claiming tries per job",
            "\"quite low (around 1)\" (1–1.2)",
            (1.0, 1.2),
            2,
            |m| m.all.claiming_tries,
        );
        c.range(
            e,
            "003 §5.1.5",
            k,
            "PGT / PWT",
            "\"the PGT utilization is three times the PWT utilization\" (2.5–4)",
            (2.5, 4.0),
            2,
            |m| m.util.pgt / m.util.pwt.max(1e-9),
        );
        fig_5_3(c, k);
    }
    let r2 = "003 §5.1.5, Fig. 5.2; 000 §5.2, Fig. 4";
    let cf_lt_wf = "\"the average job FTT with the CF policy is smaller than with the WF policy, both with and without replication\"";
    c.order(
        e,
        r2,
        "W30 FTT, unreplicated: CF < WF (s)",
        cf_lt_wf,
        "w30-cf-r1",
        "w30-wf-r1",
        1,
        |m| m.all.ftt_s,
    );
    c.order(
        e,
        r2,
        "W30 FTT, 3 replicas: CF < WF (s)",
        cf_lt_wf,
        "w30-cf-r3",
        "w30-wf-r3",
        1,
        |m| m.all.ftt_s,
    );
    c.order(
        e,
        r2,
        "W30 FTT of CF: 3 replicas < unreplicated (s)",
        "\"The decrease in the average job FTT when the files are replicated for CF is expected\"",
        "w30-cf-r3",
        "w30-cf-r1",
        1,
        |m| m.all.ftt_s,
    );
    for other in ["w30-cf-r1", "w30-wf-r1", "w30-wf-r3"] {
        c.order(
            e,
            "003 §5.1.5 (Figs. 5.1, 5.2, 5.4)",
            &format!("W30 TWT: CF, 3 replicas < {} (s)", c.label(other)),
            "\"the combination of CF and replication performs best\"",
            "w30-cf-r3",
            other,
            1,
            |m| m.all.twt_s,
        );
    }
    for k in W30_KEYS.iter().chain(W50_KEYS.iter()) {
        let (r_time, r_tries) = if k.starts_with("w30") {
            ("003 §5.1.5, Fig. 5.2", "003 §5.1.5, Fig. 5.4")
        } else {
            ("003 §5.1.6, Fig. 5.6", "003 §5.1.6, Fig. 5.7")
        };
        c.shape_orders(
            e,
            r_time,
            k,
            "placement time grows with the number and the size of components (7 orderings)",
            &GROWTH,
            5,
            0,
            |g| g.placement_s,
        );
        c.shape_orders(
            e,
            r_tries,
            k,
            "placement tries grow with the number and the size of components (7 orderings)",
            &GROWTH,
            5,
            2,
            |g| g.placement_tries,
        );
    }
    for k in W30_KEYS {
        c.shape_orders(
            e,
            "003 §5.1.5, Fig. 5.2 (\"as the number of components increases, the job FTT goes up\")",
            k,
            "FTT grows with the number of components (1xS < 2xS < 4xS)",
            &MORE_COMPONENTS,
            3,
            1,
            |g| g.ftt_s,
        );
    }
    w50_checks(c);
}

/// 003 §5.1.5 on Fig. 5.3: "the 25th percentile and the median of the placement times of the jobs
/// are (very close to) zero. On the other hand, the 90th percentile is high for most job sizes."
fn fig_5_3(c: &mut Checker<'_>, k: &str) {
    let Some(runs) = c.runs(k) else { return };
    let mean = |s: &str, f: fn(&Group) -> f64| Agg::of(&per_run_group(runs, s, f)).mean;
    // "Very close to zero": within one 1-minute scan interval's tenth (6 s).
    let low: Vec<&str> = SHAPES
        .iter()
        .copied()
        .filter(|s| mean(s, |g| g.placement_p25_s) <= 6.0 && mean(s, |g| g.placement_p50_s) <= 6.0)
        .collect();
    // "High": at least one scan interval (60 s) and above the shape's mean.
    let high: Vec<&str> = SHAPES
        .iter()
        .copied()
        .filter(|s| {
            let p90 = mean(s, |g| g.placement_p90_s);
            p90 >= 60.0 && p90 > mean(s, |g| g.placement_s)
        })
        .collect();
    let label = c.label(k);
    let p50s: Vec<String> = SHAPES
        .iter()
        .map(|s| format!("{s} {:.0}", mean(s, |g| g.placement_p50_s)))
        .collect();
    c.push(
        Exp::Stable,
        "003 §5.1.5, Fig. 5.3",
        format!("{label}: shapes whose 25th percentile and median placement time are ≤ 6 s"),
        "\"(very close to) zero\" (\"in many cases\", caption): at least 4 of 6 shapes",
        Basis::Text,
        format!("{} of 6 (medians, s: {})", low.len(), p50s.join(", ")),
        count(low.len().min(4), 4, 2),
    );
    let p90s: Vec<String> = SHAPES
        .iter()
        .map(|s| format!("{s} {:.0}", mean(s, |g| g.placement_p90_s)))
        .collect();
    c.push(
        Exp::Stable,
        "003 §5.1.5, Fig. 5.3",
        format!("{label}: shapes whose 90th percentile placement time is high (≥ 60 s and above the mean)"),
        "\"the 90th percentile is high for most job sizes\": at least 4 of 6 shapes",
        Basis::Text,
        format!("{} of 6 (p90, s: {})", high.len(), p90s.join(", ")),
        count(high.len().min(4), 4, 2),
    );
}

fn w50_checks(c: &mut Checker<'_>) {
    let e = Exp::Stable;
    let r5 = "003 §5.1.6, Fig. 5.5; 000 §5.3, Fig. 6";
    for k in W50_KEYS {
        c.range(
            e,
            r5,
            k,
            "total utilization (bg + grid + PWT), %",
            "\"between 70% and 80%\"",
            (70.0, 80.0),
            1,
            |m| m.util.total(),
        );
        series_range(c, e, r5, k, "\"during our experiments is between 70% and 80%\"", 70.0, 80.0);
        c.range(
            e,
            r5,
            k,
            "KOALA (grid) load, %",
            "\"well below 40%\" (≤ 35)",
            (0.0, 35.0),
            1,
            |m| m.util.grid,
        );
        c.range(
            e,
            r5,
            k,
            "max placement queue",
            "\"goes up to 30\" (20–40)",
            (20.0, 40.0),
            1,
            |m| m.max_queue as f64,
        );
        c.seeds_share(
            e,
            r5,
            k,
            "seeds saturated (not stable)",
            "\"only finished long after the last job arrival\"",
            |m| !m.stable(),
        );
        c.range(
            e,
            "003 §5.1.6, Fig. 5.7",
            k,
            "claiming tries per job",
            "\"between 1 and 3\"",
            (1.0, 3.0),
            2,
            |m| m.all.claiming_tries,
        );
    }
    for rep in [1, 3] {
        let (Some(cf), Some(wf)) = (c.runs(&format!("w50-cf-r{rep}")), c.runs(&format!("w50-wf-r{rep}"))) else {
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
            "003 §5.1.6, Fig. 5.6; 000 §5.3, Fig. 7",
            format!("{}: FTT of CF close to WF's (s)", workload_name(50, rep)),
            "\"relatively close to each other\" (within 30%)",
            Basis::Trend,
            format!("CF {} vs WF {} ({:.0}% apart)", a.fmt(1), b.fmt(1), 100.0 * rel),
            v,
        );
    }
    for (a, b) in W30_KEYS.iter().zip(W50_KEYS.iter()) {
        c.order(
            e,
            "003 §5.1.5–5.1.6",
            &format!("max placement queue: {} < {}", c.label(a), c.label(b)),
            "W30 stable, W50 saturated",
            a,
            b,
            1,
            |m| m.max_queue as f64,
        );
    }
}

pub(super) fn high_background_checks(c: &mut Checker<'_>) {
    high_background(c, ["bg50-cf-r3", "bg60-cf-r3"]);
    // The same rows under 000's rules: shown beside 003's, not counted.
    let from = c.out.len();
    high_background(c, ["pdca-bg50-cf-r3", "pdca-bg60-cf-r3"]);
    for row in &mut c.out[from..] {
        row.basis = Basis::Alternative;
    }
}

fn high_background(c: &mut Checker<'_>, keys: [&str; 2]) {
    let e = Exp::HighBackground;
    let r = "003 §5.1.8, Fig. 5.9; 000 §5.4, Fig. 9";
    for k in keys {
        c.range(
            e,
            r,
            k,
            "total utilization (bg + grid + PWT), %",
            "\"ranges between 75% and 80%\"",
            (75.0, 80.0),
            1,
            |m| m.util.total(),
        );
        series_range(c, e, r, k, "\"ranges between 75% and 80%\"", 75.0, 80.0);
        c.range(
            e,
            r,
            k,
            "KOALA (grid) load, %",
            "\"much lower than 30%\" (≤ 25)",
            (0.0, 25.0),
            1,
            |m| m.util.grid,
        );
        c.seeds_share(
            e,
            r,
            k,
            "seeds saturated (not stable)",
            "\"the experiments take (much) more time than expected\"",
            |m| !m.stable(),
        );
        c.range(
            e,
            "003 §5.1.8, Fig. 5.10.b",
            k,
            "claiming tries per job",
            "\"still quite low\" (1–3, as in §5.1.6)",
            (1.0, 3.0),
            2,
            |m| m.all.claiming_tries,
        );
        c.range(
            e,
            "003 §5.1.8",
            k,
            "PGT, %",
            "\"the latter is now in the range of 7 to 20%\"",
            (7.0, 20.0),
            1,
            |m| m.util.pgt,
        );
        c.all_finished(e, "003 §5.1.8", k, "\"all jobs finished successfully\"");
        // "roughly equal to the utilization achieved in the experiments with W50".
        if let (Some(hb), Some(w50)) = (c.runs(k), c.runs("w50-cf-r3")) {
            let (a, b) = (Agg::over(hb, |m| m.util.total()), Agg::over(w50, |m| m.util.total()));
            let d = (a.mean - b.mean).abs();
            let label = c.label(k);
            c.push(
                e,
                "003 §5.1.8",
                format!("{label}: total utilization vs W50 (CF, 3 replicas), %"),
                "\"roughly equal to the utilization achieved in the experiments with W50\" (within 5 points)",
                Basis::Trend,
                format!("{} vs {} ({d:.1} apart)", a.fmt(1), b.fmt(1)),
                if d <= 5.0 {
                    Verdict::Yes
                } else if d <= 10.0 {
                    Verdict::Partly
                } else {
                    Verdict::No
                },
            );
        }
    }
    c.range(
        e,
        "003 §5.1.8, Fig. 5.10.a",
        keys[1],
        "placement time of 4x16 jobs, h",
        "\"about 3.3 hours\" (1.65–6.6: within a factor 2)",
        (1.65, 6.6),
        2,
        |m| m.by_shape.get("4x16").map(|g| g.placement_s / 3600.0).unwrap_or(f64::NAN),
    );
    let lower = "\"much lower than 30%\" for both background loads";
    let label = c.label(keys[0]);
    let q = |what: &str| format!("{label}: grid load, {what} (%)");
    c.order(e, r, &q("60% background < 50% background"), lower, keys[1], keys[0], 1, |m| {
        m.util.grid
    });
    c.order(
        e,
        r,
        &q("50% background < 30–40% background"),
        lower,
        keys[0],
        "w30-cf-r3",
        1,
        |m| m.util.grid,
    );
    // "the increase in the number of claiming tries has the positive effect of reducing the PWT in
    // favor of the PGT": more tries and a larger PGT share than at 30–40%.
    for k in keys {
        let (Some(hb), Some(base)) = (c.runs(k), c.runs("w30-cf-r3")) else {
            continue;
        };
        let tries = less(&per_run(base, |m| m.all.claiming_tries), &per_run(hb, |m| m.all.claiming_tries));
        let share = |m: &RunMetrics| 100.0 * m.util.pgt / (m.util.pgt + m.util.pwt).max(1e-9);
        let shift = less(&per_run(base, share), &per_run(hb, share));
        let label = c.label(k);
        c.push(
            e,
            "003 §5.1.8, Fig. 5.10.b",
            format!("{label}: more claiming tries and a larger PGT share of PGT + PWT than at 30–40% background"),
            "\"reducing the PWT in favor of the PGT\"",
            Basis::Trend,
            format!(
                "tries {} vs {}; PGT share {}% vs {}% (JST − JCT / start − JST at placement: {} / {} s vs {} / {} s per job)",
                Agg::over(base, |m| m.all.claiming_tries).fmt(2),
                Agg::over(hb, |m| m.all.claiming_tries).fmt(2),
                Agg::over(base, share).fmt(0),
                Agg::over(hb, share).fmt(0),
                Agg::over(base, |m| m.pwt_before_jst_s).fmt(1),
                Agg::over(base, |m| m.pwt_after_jst_s).fmt(1),
                Agg::over(hb, |m| m.pwt_before_jst_s).fmt(1),
                Agg::over(hb, |m| m.pwt_after_jst_s).fmt(1),
            ),
            Verdict::all(&[tries, shift]),
        );
    }
}

pub(super) fn spread_checks(c: &mut Checker<'_>) {
    let e = Exp::Spread;
    let r = "003 §5.1.7, Fig. 5.8";
    c.range(
        e,
        r,
        "spread-cf-r3",
        "job spread, % (weak test: at least 37.5% by construction)",
        "\"CF places at least half of the components of the jobs on separate clusters\" (≥ 50)",
        (50.0, 100.0),
        1,
        |m| m.all.spread_pct,
    );
    c.order(
        e,
        r,
        "job spread of CF: unreplicated < 3 replicas (%)",
        "\"the average job spread of CF is slightly less compared to CF with replication\"",
        "spread-cf-r1",
        "spread-cf-r3",
        1,
        |m| m.all.spread_pct,
    );
    if let (Some(a), Some(b)) = (c.runs("spread-wf-r1"), c.runs("spread-wf-r3")) {
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
            "job spread of WF, unreplicated vs 3 replicas (%)",
            "\"the average job spread of WF is not affected by file replication\" (within 5 points)",
            Basis::Trend,
            format!("{} vs {}", x.fmt(1), y.fmt(1)),
            v,
        );
    }
    let co = "\"CF with replication uses co-allocation more compared to WF, while without replication, it is the opposite\"";
    c.order(
        e,
        r,
        "co-allocated jobs, 3 replicas: WF < CF (%)",
        co,
        "spread-wf-r3",
        "spread-cf-r3",
        1,
        |m| m.all.coallocated_pct,
    );
    c.order(
        e,
        r,
        "co-allocated jobs, unreplicated: CF < WF (%)",
        co,
        "spread-cf-r1",
        "spread-wf-r1",
        1,
        |m| m.all.coallocated_pct,
    );
    for k in ["spread-cf-r1", "spread-cf-r3", "spread-wf-r1", "spread-wf-r3"] {
        let Some(runs) = c.runs(k) else { continue };
        let mut verdicts = Vec::new();
        let mut text = Vec::new();
        for (two, four) in [("2x8", "4x4"), ("2x16", "4x8")] {
            let a = per_run_group(runs, two, |g| g.coallocated_pct);
            let b = per_run_group(runs, four, |g| g.coallocated_pct);
            text.push(format!("{two} {} < {four} {}", Agg::of(&a).fmt(0), Agg::of(&b).fmt(0)));
            verdicts.push(less(&a, &b));
        }
        let label = c.label(k);
        c.push(
            e,
            r,
            format!("{label}: co-allocated % at equal total size, 2 vs 4 components"),
            "\"for the same total job size, the percentage of jobs using co-allocation increases as the number of job components increases\"",
            Basis::Trend,
            text.join("; "),
            Verdict::all(&verdicts),
        );
    }
}
