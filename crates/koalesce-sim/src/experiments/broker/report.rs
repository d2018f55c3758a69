//! The broker experiment's report: Tables I and II side by side with 001 §5.2.2 (verdict per
//! row), the sensitivity variants, the claiming-versus-reservations comparison, a CSV of every
//! run and SVG plots.

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use koalesce_core::broker::CoallocationStats;

use super::compare::CompareRun;
use super::tables::TableRun;
use super::{Outcome, TableResult};
use crate::experiments::measure::Agg;
use crate::plot;

/// One row of 001 Tables I and II: (average, min, max).
pub type SeedRow = (f64, f64, f64);

/// 001 Tables I and II as printed: success share, then per row the successful and the failed
/// co-allocations' average, minimum and maximum. Execution times in seconds. (The OCR dropped
/// decimal points in four execution times: "2791", "332", "2256", "1571", read as 27.91, 3.32,
/// 22.56 and 15.71 from their neighbours.)
pub struct SeedTable {
    pub success_pct: f64,
    pub success: [SeedRow; 8],
    pub failed: [SeedRow; 8],
}

/// Row names, in the seed's order (the first is the execution time).
pub const ROWS: [&str; 8] = [
    "execution time (s)",
    "# iterations",
    "# new ARs",
    "# failed new ARs",
    "# modified ARs",
    "# failed modified ARs",
    "# path augmentations",
    "# failed path augmentations",
];

/// 001 Table I: "Results for 1000 homogeneous tests of the coallocation algorithm."
pub const TABLE_I: SeedTable = SeedTable {
    success_pct: 86.0,
    success: [
        (15.02, 3.30, 38.65),
        (3.02, 1.0, 7.0),
        (4.79, 4.0, 10.0),
        (19.89, 0.0, 59.0),
        (4.09, 0.0, 12.0),
        (0.79, 0.0, 6.0),
        (0.0, 0.0, 0.0),
        (2.01, 0.0, 6.0),
    ],
    failed: [
        (27.91, 13.77, 39.92),
        (5.04, 4.0, 7.0),
        (6.64, 2.0, 10.0),
        (40.64, 24.0, 59.0),
        (6.71, 3.0, 11.0),
        (3.75, 0.0, 7.0),
        (0.0, 0.0, 0.0),
        (5.02, 1.0, 7.0),
    ],
};

/// 001 Table II: "Results for 1000 heterogeneous tests of the coallocation algorithm."
pub const TABLE_II: SeedTable = SeedTable {
    success_pct: 66.3,
    success: [
        (9.21, 3.32, 22.56),
        (1.97, 1.0, 4.0),
        (3.65, 3.0, 7.0),
        (7.44, 0.0, 27.0),
        (1.82, 0.0, 7.0),
        (0.46, 0.0, 4.0),
        (0.81, 0.0, 1.0),
        (0.67, 0.0, 3.0),
    ],
    failed: [
        (15.71, 7.62, 23.40),
        (3.30, 2.0, 4.0),
        (5.42, 1.0, 8.0),
        (16.32, 3.0, 32.0),
        (3.28, 0.0, 7.0),
        (2.77, 0.0, 5.0),
        (0.0, 0.0, 0.0),
        (2.59, 0.0, 4.0),
    ],
};

/// Service invocations per second in the seed's test bed (001 §5.2.2: "the coallocation
/// algorithm is able to perform slightly more than two advance reservation operations (create
/// or modify) per second [...] a modify [...] performs two service invocations").
pub const SEED_INVOCATIONS_PER_S: f64 = 2.0;

/// The counters of one row; row 0, the execution time, is the run's service invocations at the
/// seed's rate (a derived figure: the simulation has no wall time).
fn counter(row: usize, s: &CoallocationStats) -> f64 {
    if row == 0 {
        return s.invocations as f64 / SEED_INVOCATIONS_PER_S;
    }
    (match row {
        1 => s.iterations,
        2 => s.new_ars,
        3 => s.failed_new_ars,
        4 => s.modified_ars,
        5 => s.failed_modified_ars,
        6 => s.path_augmentations,
        7 => s.failed_path_augmentations,
        _ => s.requests,
    }) as f64
}

/// Whether the simulation agrees with a seed value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Yes,
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

/// Average counters: *yes* within ±25% of the seed's average (or 0.5 for small counts),
/// *partly* within a factor of two (or 1.0), *no* otherwise.
pub fn verdict_mean(seed: f64, ours: f64) -> Verdict {
    let d = (ours - seed).abs();
    if d <= (0.25 * seed).max(0.5) {
        Verdict::Yes
    } else if d <= seed.max(1.0) {
        Verdict::Partly
    } else {
        Verdict::No
    }
}

/// Wilson score interval of `k / n` at 95%, in %.
pub fn wilson_pct(k: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (f64::NAN, f64::NAN);
    }
    let (k, n, z) = (k as f64, n as f64, 1.96f64);
    let p = k / n;
    let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
    let half = z / (1.0 + z * z / n) * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
    (100.0 * (centre - half).max(0.0), 100.0 * (centre + half).min(1.0))
}

/// Success share: *yes* when the seed's 1000-run Wilson interval and ours overlap, *partly*
/// when the seed's value lies within the range of our per-seed shares, *no* otherwise.
pub fn verdict_share(seed_pct: f64, ours: (f64, f64), per_seed: (f64, f64)) -> Verdict {
    let seed_k = (seed_pct * 10.0).round() as usize;
    let (slo, shi) = wilson_pct(seed_k, 1000);
    if slo <= ours.1 && ours.0 <= shi {
        Verdict::Yes
    } else if per_seed.0 <= seed_pct && seed_pct <= per_seed.1 {
        Verdict::Partly
    } else {
        Verdict::No
    }
}

/// Summary of one table configuration.
#[derive(Debug, Clone)]
pub struct TableSummary {
    pub runs: usize,
    pub successes: usize,
    pub success_pct: f64,
    pub wilson: (f64, f64),
    /// Lowest and highest success share of one seed.
    pub per_seed: (f64, f64),
    /// Share of requests for which a window exists (`None`: not decided).
    pub feasible_pct: Option<f64>,
    /// Runs where success and the existence of a window disagree.
    pub mismatches: usize,
    /// Per row (index as [`ROWS`]; row 0 = requests sent): (avg, min, max) of successes and
    /// of failures.
    pub success: Vec<SeedRow>,
    pub failed: Vec<SeedRow>,
}

fn row_stats(runs: &[&TableRun], row: usize) -> SeedRow {
    if runs.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let v: Vec<f64> = runs.iter().map(|r| counter(row, &r.stats)).collect();
    let avg = v.iter().sum::<f64>() / v.len() as f64;
    (
        avg,
        v.iter().copied().fold(f64::INFINITY, f64::min),
        v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    )
}

pub fn summarize(t: &TableResult) -> TableSummary {
    let all: Vec<&TableRun> = t.runs().collect();
    let ok: Vec<&TableRun> = all.iter().copied().filter(|r| r.success).collect();
    let bad: Vec<&TableRun> = all.iter().copied().filter(|r| !r.success).collect();
    let shares: Vec<f64> = t
        .per_seed
        .iter()
        .map(|s| 100.0 * s.iter().filter(|r| r.success).count() as f64 / s.len().max(1) as f64)
        .collect();
    let decided: Vec<bool> = all.iter().filter_map(|r| r.feasible).collect();
    TableSummary {
        runs: all.len(),
        successes: ok.len(),
        success_pct: 100.0 * ok.len() as f64 / all.len().max(1) as f64,
        wilson: wilson_pct(ok.len(), all.len()),
        per_seed: (
            shares.iter().copied().fold(f64::INFINITY, f64::min),
            shares.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ),
        feasible_pct: (!decided.is_empty()).then(|| 100.0 * decided.iter().filter(|&&f| f).count() as f64 / decided.len() as f64),
        mismatches: all.iter().filter(|r| r.feasible.is_some_and(|f| f != r.success)).count(),
        success: (0..8).map(|row| row_stats(&ok, row)).collect(),
        failed: (0..8).map(|row| row_stats(&bad, row)).collect(),
    }
}

/// One seed-versus-koalesce comparison.
#[derive(Debug, Clone)]
pub struct Check {
    pub what: String,
    pub seed: String,
    pub ours: String,
    pub verdict: Verdict,
}

fn fmt_row(r: SeedRow) -> String {
    if r.0.is_nan() {
        return "–".into();
    }
    format!("{:.2} ({:.0}–{:.0})", r.0, r.1, r.2)
}

/// The seed comparisons of Tables I and II (main reading, the seed's single path).
pub fn checks(o: &Outcome) -> Vec<Check> {
    let mut out = Vec::new();
    for (key, seed, name) in [("hom", &TABLE_I, "Table I"), ("het", &TABLE_II, "Table II")] {
        let Some(t) = o.tables.iter().find(|t| t.setup.key == key) else {
            continue;
        };
        let s = summarize(t);
        out.push(Check {
            what: format!("{name}, successful co-allocations (%)"),
            seed: format!("{:.1}", seed.success_pct),
            ours: format!("{:.1} [{:.1}, {:.1}]", s.success_pct, s.wilson.0, s.wilson.1),
            verdict: verdict_share(seed.success_pct, s.wilson, s.per_seed),
        });
        for (group, seed_rows, ours_rows) in [("successful", &seed.success, &s.success), ("failed", &seed.failed, &s.failed)] {
            for row in 0..8 {
                if ours_rows[row].0.is_nan() {
                    continue;
                }
                let derived = if row == 0 { " (derived from invocations)" } else { "" };
                out.push(Check {
                    what: format!("{name}, {group}: {}{derived}", ROWS[row]),
                    seed: fmt_row(seed_rows[row]),
                    ours: fmt_row(ours_rows[row]),
                    verdict: verdict_mean(seed_rows[row].0, ours_rows[row].0),
                });
            }
        }
    }
    out
}

fn table_section(s: &mut String, o: &Outcome) {
    let _ = writeln!(s, "## Tables I and II (001 §5.2.2)\n");
    let _ = writeln!(
        s,
        "{} seeds × {} requests per configuration. Success: share of requests co-allocated, with its Wilson 95% interval and the lowest–highest share of one seed; \"window exists\": share of requests for which some window fits (exact search).\n",
        o.options.seeds.len(),
        o.options.runs
    );
    let _ = writeln!(
        s,
        "| configuration | success % | Wilson 95% | per seed | window exists % | success ≠ window exists |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    for t in &o.tables {
        let m = summarize(t);
        let _ = writeln!(
            s,
            "| {} | {:.1} | {:.1}–{:.1} | {:.1}–{:.1} | {} | {} |",
            t.setup.label,
            m.success_pct,
            m.wilson.0,
            m.wilson.1,
            m.per_seed.0,
            m.per_seed.1,
            m.feasible_pct.map_or("–".into(), |f| format!("{f:.1}")),
            if m.feasible_pct.is_some() {
                m.mismatches.to_string()
            } else {
                "–".into()
            }
        );
    }
    for (key, seed, name) in [
        ("hom", &TABLE_I, "Table I (homogeneous)"),
        ("het", &TABLE_II, "Table II (heterogeneous)"),
    ] {
        let Some(t) = o.tables.iter().find(|t| t.setup.key == key) else {
            continue;
        };
        let m = summarize(t);
        let _ = writeln!(
            s,
            "\n### {name}: seed vs koalesce (average (min–max))\n\nOur execution time is derived: the run's service invocations (a modify counts two) at the seed's {SEED_INVOCATIONS_PER_S} per second.\n"
        );
        let _ = writeln!(
            s,
            "| row | seed, successful | ours, successful | agrees? | seed, failed | ours, failed | agrees? |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|");
        for (row, row_name) in ROWS.iter().enumerate() {
            let (ours_s, ours_f) = (fmt_row(m.success[row]), fmt_row(m.failed[row]));
            let v = |seed: f64, ours: f64| {
                if ours.is_nan() {
                    "–".to_string()
                } else {
                    verdict_mean(seed, ours).name().to_string()
                }
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} |",
                row_name,
                fmt_row(seed.success[row]),
                ours_s,
                v(seed.success[row].0, m.success[row].0),
                fmt_row(seed.failed[row]),
                ours_f,
                v(seed.failed[row].0, m.failed[row].0),
            );
        }
        let _ = writeln!(
            s,
            "| successful co-allocations | {:.1}% | {:.1}% [{:.1}, {:.1}] | {} | | | |",
            seed.success_pct,
            m.success_pct,
            m.wilson.0,
            m.wilson.1,
            verdict_share(seed.success_pct, m.wilson, m.per_seed).name()
        );
    }
    let _ = writeln!(s, "\n### Every configuration (average (min–max) of successful / failed requests)\n");
    let _ = writeln!(
        s,
        "| configuration | iterations | new ARs | failed new | modified | failed modified | path aug. | failed path aug. | time at 2 inv./s (s) |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    for t in &o.tables {
        let m = summarize(t);
        for (group, rows) in [("successful", &m.success), ("failed", &m.failed)] {
            let cells: Vec<String> = [1, 2, 3, 4, 5, 6, 7, 0].iter().map(|&r| fmt_row(rows[r])).collect();
            let _ = writeln!(s, "| {}, {} | {} |", t.setup.label, group, cells.join(" | "));
        }
    }
}

fn agg(runs: &[CompareRun], f: impl Fn(&CompareRun) -> f64) -> Agg {
    Agg::of(&runs.iter().map(f).collect::<Vec<_>>())
}

fn compare_section(s: &mut String, o: &Outcome) {
    if o.compare.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n## Co-allocation by reservations versus KOALA's claiming\n");
    let _ = writeln!(
        s,
        "Means over {} seeds ± the half-width of their 95% confidence interval. Utilization in % of all processors while jobs arrive; times in seconds over succeeded jobs. PGT (placed, not yet claimed) is not a share of the processors under reservations: jobs are placed up to hours before their reservations start, so it is left out (n/a).\n",
        o.options.seeds.len()
    );
    let _ = writeln!(
        s,
        "| configuration | jobs done | stable | total util | background | grid | PWT | PGT | wait | response | wait (multi) | response (multi) | FTT | max queue | start − predicted | reservations granted / refused / not claimable |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for c in &o.compare {
        let r = &c.runs;
        let stable = r.iter().filter(|x| x.stable).count();
        let _ = writeln!(
            s,
            "| {} | {} | {}/{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} |",
            c.label,
            agg(r, |x| 100.0 * x.succeeded as f64 / x.jobs.max(1) as f64).fmt(1) + "%",
            stable,
            r.len(),
            agg(r, |x| x.util.total()).fmt(1),
            agg(r, |x| x.util.background).fmt(1),
            agg(r, |x| x.util.grid).fmt(1),
            agg(r, |x| x.util.pwt).fmt(1),
            if c.reservations {
                "n/a".to_string()
            } else {
                agg(r, |x| x.util.pgt).fmt(1)
            },
            agg(r, |x| x.wait_s).fmt(1),
            agg(r, |x| x.response_s).fmt(1),
            agg(r, |x| x.wait_multi_s).fmt(1),
            agg(r, |x| x.response_multi_s).fmt(1),
            agg(r, |x| x.ftt_s).fmt(1),
            agg(r, |x| x.max_queue as f64).fmt(1),
            agg(r, |x| x.start_error_s).fmt(1),
            r.iter().map(|x| x.reservations_granted).sum::<u64>(),
            r.iter().map(|x| x.reservations_refused).sum::<u64>(),
            r.iter().map(|x| x.reservation_claims_refused).sum::<u64>(),
        );
    }
}

/// The generated report (every table).
pub fn markdown(o: &Outcome) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Broker experiment (001 §5.2.2), generated\n");
    let _ = writeln!(
        s,
        "Seeds: {:?}. See `docs/experiments/broker.md` for the setup and the discussion.\n",
        o.options.seeds
    );
    if !o.tables.is_empty() {
        table_section(&mut s, o);
        let checks = checks(o);
        let _ = writeln!(s, "\n### Every seed comparison\n");
        let _ = writeln!(s, "| what | seed | koalesce | agrees? |");
        let _ = writeln!(s, "|---|---|---|---|");
        for c in &checks {
            let _ = writeln!(s, "| {} | {} | {} | {} |", c.what, c.seed, c.ours, c.verdict.name());
        }
    }
    compare_section(&mut s, o);
    s
}

/// One line per seed and table configuration, and per comparison run.
pub fn csv(o: &Outcome) -> String {
    let mut s = String::from("part,config,seed,runs,successes,mean_iterations,mean_invocations,jobs,succeeded,util_total,util_grid,util_pwt,util_pgt,wait_s,response_s,start_error_s\n");
    for t in &o.tables {
        for (runs, seed) in t.per_seed.iter().zip(&o.options.seeds) {
            let n = runs.len().max(1) as f64;
            let _ = writeln!(
                s,
                "tables,{},{},{},{},{:.3},{:.3},,,,,,,,,",
                t.setup.key,
                seed,
                runs.len(),
                runs.iter().filter(|r| r.success).count(),
                runs.iter().map(|r| r.stats.iterations as f64).sum::<f64>() / n,
                runs.iter().map(|r| r.stats.invocations as f64).sum::<f64>() / n,
            );
        }
    }
    for c in &o.compare {
        for r in &c.runs {
            let _ = writeln!(
                s,
                "compare,{},{},,,,,{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3}",
                c.key,
                r.seed,
                r.jobs,
                r.succeeded,
                r.util.total(),
                r.util.grid,
                r.util.pwt,
                r.util.pgt,
                r.wait_s,
                r.response_s,
                r.start_error_s
            );
        }
    }
    s
}

/// The SVG plots: name → document.
pub fn plots(o: &Outcome) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if !o.tables.is_empty() {
        let sums: Vec<(String, TableSummary)> = o.tables.iter().map(|t| (t.setup.key.to_string(), summarize(t))).collect();
        let cats: Vec<String> = sums.iter().map(|(k, _)| k.clone()).collect();
        let seed_vals: Vec<f64> = o
            .tables
            .iter()
            .map(|t| match t.setup.key {
                "hom" => TABLE_I.success_pct,
                "het" => TABLE_II.success_pct,
                _ => f64::NAN,
            })
            .collect();
        let ours: Vec<f64> = sums.iter().map(|(_, m)| m.success_pct).collect();
        let err: Vec<f64> = sums.iter().map(|(_, m)| (m.wilson.1 - m.wilson.0) / 2.0).collect();
        let feasible: Vec<f64> = sums.iter().map(|(_, m)| m.feasible_pct.unwrap_or(f64::NAN)).collect();
        let n = cats.len();
        out.push((
            "success.svg".to_string(),
            plot::grouped_bar_svg(
                "Successful co-allocations (001 Tables I and II) — seed, koalesce, window exists",
                "success (%)",
                &cats,
                &[
                    ("seed (1000 runs)".to_string(), seed_vals),
                    ("koalesce (Wilson 95%)".to_string(), ours),
                    ("a window exists".to_string(), feasible),
                ],
                Some(&[vec![0.0; n], err, vec![0.0; n]]),
            ),
        ));
        for (key, seed, name) in [
            ("hom", &TABLE_I, "Table I, homogeneous"),
            ("het", &TABLE_II, "Table II, heterogeneous"),
        ] {
            let Some(t) = o.tables.iter().find(|t| t.setup.key == key) else {
                continue;
            };
            let m = summarize(t);
            let rows: Vec<String> = ROWS[1..].iter().map(|r| r.trim_start_matches("# ").to_string()).collect();
            let pick = |v: &[SeedRow]| v[1..8].iter().map(|r| r.0).collect::<Vec<f64>>();
            out.push((
                format!("operations-{key}.svg"),
                plot::grouped_bar_svg(
                    &format!("{name}: operations per co-allocation request (averages)"),
                    "count",
                    &rows,
                    &[
                        ("seed, successful".to_string(), pick(&seed.success)),
                        ("koalesce, successful".to_string(), pick(&m.success)),
                        ("seed, failed".to_string(), pick(&seed.failed)),
                        ("koalesce, failed".to_string(), pick(&m.failed)),
                    ],
                    None,
                ),
            ));
        }
    }
    if !o.compare.is_empty() {
        // CF, WF: claiming; AR1, AR5: advance reservations with ε = 1 or 5 minutes.
        let cats: Vec<String> = o.compare.iter().map(|c| c.short.clone()).collect();
        let series = |f: &dyn Fn(&CompareRun) -> f64| -> (Vec<f64>, Vec<f64>) {
            o.compare
                .iter()
                .map(|c| {
                    let a = agg(&c.runs, f);
                    (a.mean, if a.ci.is_finite() { a.ci } else { 0.0 })
                })
                .unzip()
        };
        let (wait, wait_e) = series(&|x| x.wait_s);
        let (resp, resp_e) = series(&|x| x.response_s);
        out.push((
            "compare-times.svg".to_string(),
            plot::grouped_bar_svg(
                "Claiming (CF, WF) vs reservations (AR, ε in min): wait and response (mean, 95% CI)",
                "time (s)",
                &cats,
                &[("wait".to_string(), wait), ("response".to_string(), resp)],
                Some(&[wait_e, resp_e]),
            ),
        ));
        type Part<'a> = (&'a str, &'a dyn Fn(&CompareRun) -> f64);
        let parts: [Part; 3] = [
            ("background", &|x| x.util.background),
            ("grid", &|x| x.util.grid),
            ("PWT", &|x| x.util.pwt),
        ];
        let mut ser = Vec::new();
        let mut errs = Vec::new();
        for (name, f) in parts {
            let (m, e) = series(f);
            ser.push((name.to_string(), m));
            errs.push(e);
        }
        out.push((
            "compare-utilization.svg".to_string(),
            plot::grouped_bar_svg(
                "Claiming vs reservations (AR): utilization while jobs arrive (mean, 95% CI)",
                "% of all processors",
                &cats,
                &ser,
                Some(&errs),
            ),
        ));
        for c in &o.compare {
            out.push((format!("util-{}.svg", c.key), c.utilization_svg.clone()));
        }
    }
    out
}

/// Writes broker.md, runs.csv and the plots into `dir`; returns the files written.
pub fn write(o: &Outcome, dir: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut files = Vec::new();
    let mut put = |name: &str, text: &str| -> io::Result<()> {
        let p = dir.join(name);
        std::fs::write(&p, text)?;
        files.push(p);
        Ok(())
    };
    put("broker.md", &markdown(o))?;
    put("runs.csv", &csv(o))?;
    for (name, svg) in plots(o) {
        put(&name, &svg)?;
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_hand_computed() {
        // 860 / 1000: p = 0.86, z = 1.96 → [83.7, 88.0] (to 0.1).
        let (lo, hi) = wilson_pct(860, 1000);
        assert!((lo - 83.71).abs() < 0.05 && (hi - 88.03).abs() < 0.05, "{lo} {hi}");
        // 10 / 10 does not collapse: about [72.2, 100].
        let (lo, hi) = wilson_pct(10, 10);
        assert!((lo - 72.25).abs() < 0.05 && hi == 100.0, "{lo} {hi}");
    }

    #[test]
    fn verdicts_can_fail() {
        assert_eq!(verdict_mean(4.0, 4.9), Verdict::Yes);
        assert_eq!(verdict_mean(4.0, 7.0), Verdict::Partly);
        assert_eq!(verdict_mean(4.0, 9.0), Verdict::No);
        assert_eq!(verdict_mean(0.0, 0.4), Verdict::Yes);
        assert_eq!(verdict_mean(0.0, 2.0), Verdict::No);
        assert_eq!(verdict_share(86.0, (85.0, 87.0), (80.0, 90.0)), Verdict::Yes);
        assert_eq!(verdict_share(86.0, (92.0, 93.0), (84.0, 95.0)), Verdict::Partly);
        assert_eq!(verdict_share(86.0, (97.0, 98.0), (96.0, 99.0)), Verdict::No);
    }
}
