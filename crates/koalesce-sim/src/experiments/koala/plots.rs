//! The SVG plots of the report.

use std::collections::BTreeMap;

use super::super::measure::{Agg, Group, RunMetrics};
use super::super::ConfigResult;
use super::{replicas_name, Exp, Outcome};
use crate::plot;

pub(super) fn shapes_of(cs: &[&ConfigResult], by: impl Fn(&RunMetrics) -> &BTreeMap<String, Group>) -> Vec<String> {
    let mut v: Vec<String> = cs.iter().flat_map(|c| c.runs.iter().flat_map(|m| by(m).keys().cloned())).collect();
    v.sort_by_key(|k| shape_order(k));
    v.dedup();
    v
}

/// Sort key of "4x16" / "4x16 high" / "36 high": components, size, priority.
pub(super) fn shape_order(k: &str) -> (u32, u32, String) {
    let mut parts = k.split(' ');
    let shape = parts.next().unwrap_or("");
    let rest = parts.collect::<Vec<_>>().join(" ");
    let mut nums = shape.split('x').map(|x| x.parse::<u32>().unwrap_or(0));
    let a = nums.next().unwrap_or(0);
    let b = nums.next().unwrap_or(0);
    (a, b, rest)
}

pub(super) fn plots(o: &Outcome) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (e, cs) in &o.experiments {
        for c in cs {
            if matches!(e, Exp::Calibration | Exp::Sensitivity | Exp::Spread) {
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
    // Cumulative started jobs per size (003 Fig. 6.2, lower graphs), first seed.
    for (k, name) in [("wnc", "W_nc"), ("wc", "W_c")] {
        let Some(c) = o.get(k) else { continue };
        let Some(m) = c.runs.first() else { continue };
        let series: Vec<(String, Vec<(f64, f64)>)> = m
            .starts_by_size
            .iter()
            .map(|(size, starts)| {
                let pts = starts.iter().enumerate().map(|(i, t)| (t / 60.0, (i + 1) as f64)).collect();
                (format!("size {size}"), pts)
            })
            .collect();
        out.push((
            format!("cumulative-{k}.svg"),
            plot::line_svg(
                &format!("{name}: cumulative number of started jobs per size (seed {})", m.seed),
                "time (min)",
                "jobs started",
                &series,
            ),
        ));
    }
    // Placement-time percentiles per shape (003 Fig. 5.3), W30.
    for rep in [1, 3] {
        let (Some(cf), Some(wf)) = (o.get(&format!("w30-cf-r{rep}")), o.get(&format!("w30-wf-r{rep}"))) else {
            continue;
        };
        out.push((
            format!("percentiles-w30-r{rep}.svg"),
            bars(
                &format!("W30, {}: placement-time percentiles per job shape", replicas_name(rep)),
                "placement time (s)",
                |m| &m.by_shape,
                &[("CF", cf, ""), ("WF", wf, "")],
                &[
                    ("p25", |g| g.placement_p25_s),
                    ("median", |g| g.placement_p50_s),
                    ("p90", |g| g.placement_p90_s),
                ],
            ),
        ));
    }
    // The calibration: W30 PGT against the transfer efficiency η.
    if o.has(Exp::Calibration) {
        let mut series = Vec::new();
        for (p, r) in [("cf", 1), ("cf", 3), ("wf", 1), ("wf", 3)] {
            let mut pts: Vec<(f64, f64)> = super::configs::CALIBRATION_ETAS
                .iter()
                .map(|&eta| (format!("cal{:.0}-{p}-r{r}", eta * 100.0), eta))
                .chain([(format!("w30-{p}-r{r}"), super::super::das2::TRANSFER_EFFICIENCY)])
                .filter_map(|(k, eta)| o.runs(&k).map(|runs| (eta, Agg::over(runs, |m| m.util.pgt).mean)))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            series.push((format!("{} {}", p.to_uppercase(), replicas_name(r)), pts));
        }
        for edge in [6.0, 9.0] {
            series.push((format!("seed: {edge:.0}%"), vec![(0.6, edge), (1.0, edge)]));
        }
        out.push((
            "calibration-pgt.svg".to_string(),
            plot::line_svg(
                "W30: PGT against the transfer efficiency η",
                "η (share of the nominal rates)",
                "PGT (%)",
                &series,
            ),
        ));
    }
    out
}

pub(super) type Metric = fn(&Group) -> f64;
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

pub(super) fn plots_of(e: Exp, cs: &[ConfigResult]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    if !matches!(e, Exp::Calibration | Exp::Sensitivity | Exp::Spread) {
        v.extend(cs.iter().map(|c| format!("util-{}.svg", c.key)));
    }
    match e {
        Exp::Stable => {
            v.push("percentiles-w30-r1.svg".to_string());
            v.push("percentiles-w30-r3.svg".to_string());
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
        Exp::Runners => {
            v.push("runners-times.svg".to_string());
            v.push("cumulative-wnc.svg".to_string());
            v.push("cumulative-wc.svg".to_string());
        }
        Exp::Calibration => v.push("calibration-pgt.svg".to_string()),
        Exp::Sensitivity => {}
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_sort_by_components_then_size() {
        let mut v = vec!["4x8".to_string(), "1x16".to_string(), "2x8".to_string(), "1x8".to_string()];
        v.sort_by_key(|k| shape_order(k));
        assert_eq!(v, ["1x8", "1x16", "2x8", "4x8"]);
    }
}
