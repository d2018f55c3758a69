//! The GridWay experiment's report: Table 4 side by side, the seed's statements checked with
//! verdicts, the variants, the WAN-throughput sweep, Table 3 job by job, `runs.csv` and SVG
//! plots.
//!
//! Verdict rules (also in docs/experiments/gridway.md):
//! * a Table 4 average is one run of the seed's: *yes* when it lies inside the 95% prediction
//!   interval of one run of ours (mean ± t·s·√(1 + 1/n) over the seeds), *partly* inside twice
//!   that half-width, *no* otherwise;
//! * a transfer count: *yes* when every run has the seed's count, *partly* when the mean is
//!   within one, *no* otherwise;
//! * an ordering x < y: compared run by run (the four algorithms of a seed share its draws):
//!   *yes* when the mean of y − x is positive and its 95% confidence interval excludes 0,
//!   *partly* when only the mean is positive, *no* otherwise; the share of seeds where it
//!   holds is shown with its Wilson interval;
//! * a statement about where jobs went: *yes* when it holds in every run, *partly* in at least
//!   half, *no* otherwise;
//! * a row from the setup that replays each run's own throughputs is *calibrated*: shown, not
//!   counted.

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use super::table3::{self, SIZES_MB};
use super::{Alg, Outcome, Run, SetupResult, PROC_AB_S};
use crate::experiments::koala::Verdict;
use crate::plot::{grouped_bar_svg, line_svg};
use crate::stats::{mean, mean_ci95, std_dev, t_quantile_975, wilson};

/// One statement of the seed, compared.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub section: &'static str,
    /// The seed's words, exactly.
    pub quote: String,
    pub seed: String,
    pub ours: String,
    /// `None`: calibrated (shown, not counted).
    pub verdict: Option<Verdict>,
}

fn avg(runs: &[Run]) -> Vec<f64> {
    runs.iter().map(|r| r.avg_job_s).collect()
}

/// Mean ± 95% CI half-width.
fn ci(v: &[f64]) -> (f64, f64) {
    mean_ci95(v).unwrap_or((mean(v).unwrap_or(f64::NAN), f64::NAN))
}

/// Half-width of the 95% prediction interval of one more run.
fn prediction_half(v: &[f64]) -> f64 {
    let n = v.len();
    std_dev(v).map_or(f64::NAN, |s| t_quantile_975(n - 1) * s * (1.0 + 1.0 / n as f64).sqrt())
}

/// Verdict of a seed value that is one run, against our runs.
pub fn verdict_single_run(seed: f64, ours: &[f64]) -> Verdict {
    let (m, _) = ci(ours);
    let h = prediction_half(ours);
    let d = (seed - m).abs();
    if d <= h || (h.is_nan() && d < 1e-9) {
        Verdict::Yes
    } else if d <= 2.0 * h {
        Verdict::Partly
    } else {
        Verdict::No
    }
}

/// Verdict of an ordering from paired differences (positive: it holds).
pub fn verdict_ordering(diffs: &[f64]) -> Verdict {
    let (m, h) = ci(diffs);
    if m > 0.0 && (m - h > 0.0 || (h.is_nan() || h == 0.0)) {
        Verdict::Yes
    } else if m > 0.0 {
        Verdict::Partly
    } else {
        Verdict::No
    }
}

/// Verdict of a share of runs where something holds.
pub fn verdict_share(k: usize, n: usize) -> Verdict {
    if n > 0 && k == n {
        Verdict::Yes
    } else if 2 * k >= n && n > 0 {
        Verdict::Partly
    } else {
        Verdict::No
    }
}

fn share(k: usize, n: usize) -> String {
    let (lo, hi) = wilson(k as u64, n as u64, 1.96).unwrap_or((f64::NAN, f64::NAN));
    format!("{k}/{n} seeds (95% Wilson {:.0}–{:.0}%)", 100.0 * lo, 100.0 * hi)
}

fn fmt_ci(v: &[f64]) -> String {
    let (m, h) = ci(v);
    format!("{m:.1} ± {h:.1}")
}

/// Paired differences `y − x` of the average job time, seed by seed.
fn diffs(r: &SetupResult, x: Alg, y: Alg) -> Vec<f64> {
    r.of(x).iter().zip(r.of(y)).map(|(a, b)| b.avg_job_s - a.avg_job_s).collect()
}

fn ordering_check(r: &SetupResult, section: &'static str, quote: &str, x: Alg, y: Alg) -> Check {
    let d = diffs(r, x, y);
    let (sx, sy) = (table3::table4(x).0, table3::table4(y).0);
    Check {
        section,
        quote: quote.to_string(),
        seed: format!("{} {sx:.1} < {} {sy:.1}", x.id(), y.id()),
        ours: format!(
            "{} − {} = {} s; {}",
            y.id(),
            x.id(),
            fmt_ci(&d),
            share(d.iter().filter(|&&v| v > 0.0).count(), d.len())
        ),
        verdict: Some(verdict_ordering(&d)),
    }
}

/// The sites a run's jobs went to: per size, whether at C.
fn at_c(run: &Run) -> Vec<bool> {
    run.jobs.iter().map(|j| j.site == "C").collect()
}

fn placement_check(r: &SetupResult, quote: &str, alg: Alg, want: impl Fn(u32) -> bool, seed: &str) -> Check {
    let runs = r.of(alg);
    let want: Vec<bool> = SIZES_MB.iter().map(|&mb| want(mb)).collect();
    let k = runs.iter().filter(|run| at_c(run) == want).count();
    Check {
        section: "004 §3.4.2",
        quote: quote.to_string(),
        seed: seed.to_string(),
        ours: format!("as stated in {}", share(k, runs.len())),
        verdict: Some(verdict_share(k, runs.len())),
    }
}

/// Mean job time of the `mb` file's job over runs.
fn job_mean(runs: &[Run], mb: u32) -> f64 {
    let v: Vec<f64> = runs
        .iter()
        .flat_map(|r| r.jobs.iter().filter(|j| j.size_mb == mb).map(|j| j.job_s))
        .collect();
    mean(&v).unwrap_or(f64::NAN)
}

/// The mean over the setup's runs of each algorithm's average job time.
fn means(r: &SetupResult) -> [f64; 4] {
    Alg::ALL.map(|a| mean(&avg(r.of(a))).unwrap_or(f64::NAN))
}

/// The seed's ranking c < d < b < a on the means of a setup.
fn seed_ranking_holds(m: &[f64; 4]) -> bool {
    m[2] < m[3] && m[3] < m[1] && m[1] < m[0]
}

/// The ranking of the four algorithms on the means, best first ("(c) < (d) < (b) < (a)").
pub fn ranking(m: &[f64; 4]) -> String {
    let mut order: Vec<Alg> = Alg::ALL.to_vec();
    order.sort_by(|&x, &y| m[x as usize].total_cmp(&m[y as usize]));
    order.iter().map(|a| a.id()).collect::<Vec<_>>().join(" < ")
}

/// The throughputs (MB/s) between which the seed's ranking holds in the sweep, if any.
pub fn ranking_window(o: &Outcome) -> Option<(f64, f64)> {
    let hits: Vec<f64> = o
        .results
        .iter()
        .filter(|r| r.setup.sweep && seed_ranking_holds(&means(r)))
        .filter_map(|r| match r.setup.network {
            super::Network::Fixed(x) => Some(x),
            _ => None,
        })
        .collect();
    Some((*hits.first()?, *hits.last()?))
}

/// Harmonic mean of throughputs: the one rate that gives the same total transfer time.
fn harmonic(v: &[f64]) -> f64 {
    v.len() as f64 / v.iter().map(|x| 1.0 / x).sum::<f64>()
}

/// Every check of the seed's statements.
pub fn checks(o: &Outcome) -> Vec<Check> {
    let Some(base) = o.setup("base") else { return Vec::new() };
    let mut out = Vec::new();
    for alg in Alg::ALL {
        let (seed_avg, seed_tr) = table3::table4(alg);
        let v = avg(base.of(alg));
        out.push(Check {
            section: "004 Table 4",
            quote: format!("{} average job time", alg.id()),
            seed: format!("{seed_avg:.1} s (one run)"),
            ours: format!("{} s; one run: ± {:.1}", fmt_ci(&v), prediction_half(&v)),
            verdict: Some(verdict_single_run(seed_avg, &v)),
        });
        let tr: Vec<f64> = base.of(alg).iter().map(|r| r.transfers as f64).collect();
        let exact = base.of(alg).iter().filter(|r| r.transfers == seed_tr).count();
        let m = mean(&tr).unwrap_or(f64::NAN);
        out.push(Check {
            section: "004 Table 4",
            quote: format!("{} number of transfers", alg.id()),
            seed: seed_tr.to_string(),
            ours: format!("{m:.2} (exactly {seed_tr} in {})", share(exact, tr.len())),
            verdict: Some(if exact == tr.len() {
                Verdict::Yes
            } else if (m - seed_tr as f64).abs() <= 1.0 {
                Verdict::Partly
            } else {
                Verdict::No
            }),
        });
        if let Some(per_run) = o.setup("per-run") {
            let v = avg(per_run.of(alg));
            out.push(Check {
                section: "004 Table 4",
                quote: format!("{} average job time, each run on its own throughputs", alg.id()),
                seed: format!("{seed_avg:.1} s"),
                ours: format!("{} s", fmt_ci(&v)),
                verdict: None,
            });
        }
    }
    for (x, y) in [(Alg::C, Alg::D), (Alg::D, Alg::B), (Alg::B, Alg::A)] {
        out.push(ordering_check(
            base,
            "004 Table 4",
            "Table 4: Average job completion times for different scheduling algorithms",
            x,
            y,
        ));
    }
    out.push(placement_check(
        base,
        "(a) All jobs sent to site A or B.",
        Alg::A,
        |_| false,
        "10 of 10 at A or B",
    ));
    out.push(placement_check(
        base,
        "(b) All jobs sent to site C.",
        Alg::B,
        |_| true,
        "10 of 10 at C",
    ));
    out.push(placement_check(
        base,
        "(c) For small files jobs are sent to site A or B, for large files jobs are sent to site C.",
        Alg::C,
        |mb| mb >= 225,
        "3–180 MB at A/B, 225–405 MB at C (Table 3)",
    ));
    out.push(placement_check(
        base,
        "(d) Same results as (c), but the threshold is lower (most jobs go to site C).",
        Alg::D,
        |mb| mb >= 135,
        "3–90 MB at A/B, 135–405 MB at C (Table 3)",
    ));
    let (a, b) = (base.of(Alg::A), base.of(Alg::B));
    let job = |r: &Run, mb: u32| r.jobs.iter().find(|j| j.size_mb == mb).map_or(f64::NAN, |j| j.job_s);
    let seed_job = |alg: Alg, mb: u32| table3::rows(alg).find(|r| r.size_mb == mb).map_or(f64::NAN, |r| r.job_s);
    let k = a
        .iter()
        .zip(b)
        .filter(|(x, y)| job(x, 3) < job(y, 3) && job(x, 405) > job(y, 405))
        .count();
    out.push(Check {
        section: "004 §3.4.2",
        quote: "(a) Good job times for small files, worse times for large files. 10 transfers. (b) Bad job times for small files, better times for large files. 0 transfers.".into(),
        seed: format!(
            "3 MB: (a) {:.0} < (b) {:.0} s; 405 MB: (a) {:.0} > (b) {:.0} s",
            seed_job(Alg::A, 3),
            seed_job(Alg::B, 3),
            seed_job(Alg::A, 405),
            seed_job(Alg::B, 405)
        ),
        ours: format!(
            "3 MB: (a) {:.0}, (b) {:.0} s; 405 MB: (a) {:.0}, (b) {:.0} s; both hold in {}",
            job_mean(a, 3),
            job_mean(b, 3),
            job_mean(a, 405),
            job_mean(b, 405),
            share(k, a.len())
        ),
        verdict: Some(verdict_share(k, a.len())),
    });
    let better = [
        ordering_check(base, "", "", Alg::C, Alg::B),
        ordering_check(base, "", "", Alg::D, Alg::B),
    ];
    out.push(Check {
        section: "004 §3.4.2",
        quote: "Policy (b) chooses site C for every case, but (c) and (d) prefer to choose faster sites accepting the transfer of some files, for the cases where these are small. By doing this, they get better numbers.".into(),
        seed: format!("(c) {:.1}, (d) {:.1} < (b) {:.1} s", table3::table4(Alg::C).0, table3::table4(Alg::D).0, table3::table4(Alg::B).0),
        ours: format!("{}; {}", better[0].ours, better[1].ours),
        // ordering_check always gives a verdict.
        verdict: Some(Verdict::all(&[better[0].verdict.unwrap(), better[1].verdict.unwrap()])),
    });
    let runs_of = |alg: Alg| base.of(alg);
    let n = a.len();
    let k = (0..n)
        .filter(|&i| {
            let t = |alg: Alg| runs_of(alg)[i].transfers;
            t(Alg::B) == 0 && Alg::ALL.iter().all(|&x| t(x) >= t(Alg::B) && t(x) <= t(Alg::A))
        })
        .count();
    out.push(Check {
        section: "004 §3.4.2",
        quote: "If we consider the number of transferred files, we will see that (b) obtains the absolute minimum, since it never moves files, and (a) is again the worst option.".into(),
        seed: "(b) 0 ≤ (c) 5, (d) 3 ≤ (a) 10 transfers".into(),
        ours: format!("(b) fewest and (a) most in {}", share(k, n)),
        verdict: Some(verdict_share(k, n)),
    });
    let fewer = (0..n)
        .filter(|&i| runs_of(Alg::D)[i].transfers < runs_of(Alg::C)[i].transfers)
        .count();
    let slower = ordering_check(base, "", "", Alg::C, Alg::D);
    out.push(Check {
        section: "004 §3.4.2",
        quote: "Between (c) and (d), a slightly worst average job time is traded for a reduction in the number of files transferred (transfer penalty).".into(),
        seed: format!("(d) {} < (c) {} transfers; (c) {:.1} < (d) {:.1} s", 3, 5, table3::table4(Alg::C).0, table3::table4(Alg::D).0),
        ours: format!("fewer transfers with (d) in {}; {}", share(fewer, n), slower.ours),
        // ordering_check always gives a verdict.
        verdict: Some(Verdict::all(&[verdict_share(fewer, n), slower.verdict.unwrap()])),
    });
    // §3.4.3: the transfer time at which moving a job to the fast site stops paying.
    let at_c_times: Vec<f64> = b.iter().flat_map(|r| r.jobs.iter().map(|j| j.job_s)).collect();
    let break_even = mean(&at_c_times).unwrap_or(f64::NAN) - PROC_AB_S;
    out.push(Check {
        section: "004 §3.4.3",
        quote: "already with less than 250 seconds spent in the data replication, it is already wiser to send jobs to the site holding the files than to move them to the fastest CPU".into(),
        seed: "break-even below 250 s".into(),
        ours: format!("break-even {break_even:.0} s (a job at C minus processing at A/B)"),
        verdict: Some(if break_even < 250.0 { Verdict::Yes } else { Verdict::No }),
    });
    out
}

/// Counts of the counted verdicts: (yes, partly, no).
pub fn tally(checks: &[Check]) -> (usize, usize, usize) {
    let n = |v: Verdict| checks.iter().filter(|c| c.verdict == Some(v)).count();
    (n(Verdict::Yes), n(Verdict::Partly), n(Verdict::No))
}

fn table4_markdown(o: &Outcome, s: &mut String) {
    let base = o.setup("base");
    let per_run = o.setup("per-run");
    let _ = writeln!(
        s,
        "| algorithm | 004 avg job time (s) | koalesce, reconstruction: mean ± 95% CI (one run ± …) | koalesce, each run's own throughputs (calibrated) | 004 transfers | koalesce transfers: mean (min–max) |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    for alg in Alg::ALL {
        let (sa, st) = table3::table4(alg);
        let b = base.map(|r| avg(r.of(alg))).unwrap_or_default();
        let p = per_run.map(|r| avg(r.of(alg))).unwrap_or_default();
        let tr: Vec<u32> = base.map(|r| r.of(alg).iter().map(|x| x.transfers).collect()).unwrap_or_default();
        let trf: Vec<f64> = tr.iter().map(|&x| x as f64).collect();
        let _ = writeln!(
            s,
            "| {} {} | {sa:.1} | {} (± {:.1}) | {} | {st} | {:.2} ({}–{}) |",
            alg.id(),
            alg.label(),
            fmt_ci(&b),
            prediction_half(&b),
            fmt_ci(&p),
            mean(&trf).unwrap_or(f64::NAN),
            tr.iter().min().copied().unwrap_or(0),
            tr.iter().max().copied().unwrap_or(0),
        );
    }
}

/// The report as Markdown (`gridway.md`).
pub fn markdown(o: &Outcome) -> String {
    let mut s = String::new();
    let cks = checks(o);
    let (yes, partly, no) = tally(&cks);
    let _ = writeln!(s, "# 004 §3.4.2, Tables 3 and 4, in the koalesce simulator\n");
    let _ = writeln!(
        s,
        "Generated by `koalesce experiment gridway` with seeds {}–{} ({} runs of each algorithm per setup). Seed comparisons: {yes} yes, {partly} partly, {no} no (calibrated rows not counted).\n",
        o.seeds.first().unwrap_or(&0),
        o.seeds.last().unwrap_or(&0),
        o.seeds.len()
    );
    let _ = writeln!(s, "## Table 4\n");
    table4_markdown(o, &mut s);
    let _ = writeln!(s, "\n## The seed's statements\n");
    let _ = writeln!(s, "| section | the seed says | seed | koalesce | agrees? |\n|---|---|---|---|---|");
    for c in &cks {
        let _ = writeln!(
            s,
            "| {} | \"{}\" | {} | {} | {} |",
            c.section,
            c.quote,
            c.seed,
            c.ours,
            c.verdict.map_or("calibrated", |v| v.name())
        );
    }
    let _ = writeln!(s, "\n## Setups\n");
    let _ = writeln!(s, "Average job time in s (mean over the seeds) and transfers (mean), per setup.\n");
    let _ = writeln!(
        s,
        "| setup | (a) | (b) | (c) | (d) | ranking of the means |\n|---|---|---|---|---|---|"
    );
    for r in o.results.iter().filter(|r| !r.setup.sweep) {
        let m = means(r);
        let t: Vec<f64> = Alg::ALL
            .iter()
            .map(|&a| mean(&r.of(a).iter().map(|x| x.transfers as f64).collect::<Vec<_>>()).unwrap_or(f64::NAN))
            .collect();
        let _ = writeln!(
            s,
            "| {} | {:.1} ({:.1}) | {:.1} ({:.1}) | {:.1} ({:.1}) | {:.1} ({:.1}) | {} |",
            r.setup.label,
            m[0],
            t[0],
            m[1],
            t[1],
            m[2],
            t[2],
            m[3],
            t[3],
            ranking(&m)
        );
    }
    let _ = writeln!(s, "\n## Every transfer at one throughput\n");
    let all = [Alg::A, Alg::B, Alg::C, Alg::D];
    let _ = writeln!(
        s,
        "Table 3's transfers reached {:.2} MB/s on the whole (harmonic mean of the 15 of 45 MB or more); {:.2} in (a)'s run, {:.2} in (c)'s, {:.2} in (d)'s. {}\n",
        harmonic(&table3::remote_mb_per_s(&all)),
        harmonic(&table3::remote_mb_per_s(&[Alg::A])),
        harmonic(&table3::remote_mb_per_s(&[Alg::C])),
        harmonic(&table3::remote_mb_per_s(&[Alg::D])),
        match ranking_window(o) {
            Some((lo, hi)) => format!("The seed's ranking (c) < (d) < (b) < (a) holds from {lo:.2} to {hi:.2} MB/s."),
            None => "The seed's ranking holds at no throughput of the sweep.".to_string(),
        }
    );
    let _ = writeln!(s, "| MB/s | (a) | (b) | (c) | (d) | ranking |\n|---|---|---|---|---|---|");
    for r in o.results.iter().filter(|r| r.setup.sweep) {
        let m = means(r);
        if let super::Network::Fixed(x) = r.setup.network {
            let _ = writeln!(
                s,
                "| {x:.2} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
                m[0],
                m[1],
                m[2],
                m[3],
                ranking(&m)
            );
        }
    }
    if let Some(base) = o.setup("base") {
        let _ = writeln!(s, "\n## Table 3, job by job\n");
        let _ = writeln!(
            s,
            "004's site and job time, and koalesce's (reconstruction): the share of runs at C and the mean job time.\n"
        );
        let _ = writeln!(
            s,
            "| file | (a) 004 | (a) koalesce | (b) 004 | (b) koalesce | (c) 004 | (c) koalesce | (d) 004 | (d) koalesce |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
        for (i, mb) in SIZES_MB.iter().enumerate() {
            let _ = write!(s, "| {mb} MB |");
            for alg in Alg::ALL {
                // Table 3 has one row per size for every algorithm (a test in table3.rs checks).
                let row = table3::rows(alg).nth(i).unwrap();
                let runs = base.of(alg);
                let c = runs.iter().filter(|r| r.jobs[i].site == "C").count();
                let _ = write!(
                    s,
                    " {} {:.0} s | C {}/{}, {:.0} s |",
                    row.site,
                    row.job_s,
                    c,
                    runs.len(),
                    job_mean(runs, *mb)
                );
            }
            let _ = writeln!(s);
        }
    }
    let _ = writeln!(s, "\n![](table4.svg)\n![](jobs.svg)\n![](sweep.svg)");
    s
}

fn csv_text(rows: impl Iterator<Item = Vec<String>>) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    for r in rows {
        let _ = w.write_record(&r);
    }
    String::from_utf8(w.into_inner().expect("writing to memory")).expect("CSV is UTF-8")
}

/// `runs.csv`: one line per run (setup, algorithm, seed).
pub fn csv(o: &Outcome) -> String {
    let head = ["setup", "algorithm", "seed", "free_a", "free_b", "free_c", "avg_job_s", "transfers"];
    let rows = o.results.iter().flat_map(|r| {
        r.runs.iter().flatten().map(move |run| {
            vec![
                r.setup.key.clone(),
                run.alg.id().to_string(),
                run.seed.to_string(),
                run.free[0].to_string(),
                run.free[1].to_string(),
                run.free[2].to_string(),
                format!("{:.3}", run.avg_job_s),
                run.transfers.to_string(),
            ]
        })
    });
    csv_text(std::iter::once(head.map(String::from).to_vec()).chain(rows))
}

/// `jobs.csv`: every job of the base setup's runs (Table 3's columns).
pub fn jobs_csv(o: &Outcome) -> String {
    let head = ["algorithm", "seed", "size_mb", "site", "transfer_s", "copy_s", "proc_s", "job_s"];
    let rows = o.setup("base").into_iter().flat_map(|r| {
        r.runs.iter().flatten().flat_map(|run| {
            run.jobs.iter().map(move |j| {
                vec![
                    run.alg.id().to_string(),
                    run.seed.to_string(),
                    j.size_mb.to_string(),
                    j.site.clone(),
                    format!("{:.3}", j.transfer_s),
                    format!("{:.3}", j.copy_s),
                    format!("{:.3}", j.proc_s),
                    format!("{:.3}", j.job_s),
                ]
            })
        })
    });
    csv_text(std::iter::once(head.map(String::from).to_vec()).chain(rows))
}

/// The SVG plots: (file name, document).
pub fn plots(o: &Outcome) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let cats: Vec<String> = ["(a) no data", "(b) to data", "(c) /135", "(d) /68"].map(String::from).to_vec();
    let mut series = vec![(
        "004 Table 4".to_string(),
        Alg::ALL.iter().map(|&a| table3::table4(a).0).collect::<Vec<f64>>(),
    )];
    let mut errors = vec![vec![0.0; 4]];
    for (key, name) in [
        ("base", "koalesce, reconstruction"),
        ("per-run", "koalesce, each run's throughputs"),
    ] {
        if let Some(r) = o.setup(key) {
            let cis: Vec<(f64, f64)> = Alg::ALL.iter().map(|&a| ci(&avg(r.of(a)))).collect();
            series.push((name.to_string(), cis.iter().map(|c| c.0).collect()));
            errors.push(cis.iter().map(|c| c.1).collect());
        }
    }
    out.push((
        "table4.svg".to_string(),
        grouped_bar_svg("004 Table 4: average job time (95% CI)", "seconds", &cats, &series, Some(&errors)),
    ));
    if let Some(base) = o.setup("base") {
        let mut lines: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for alg in Alg::ALL {
            lines.push((
                format!("koalesce {}", alg.id()),
                SIZES_MB.iter().map(|&mb| (mb as f64, job_mean(base.of(alg), mb))).collect(),
            ));
        }
        for alg in Alg::ALL {
            lines.push((
                format!("004 {}", alg.id()),
                table3::rows(alg).map(|r| (r.size_mb as f64, r.job_s)).collect(),
            ));
        }
        out.push((
            "jobs.svg".to_string(),
            line_svg(
                "Job time by input size (004 Fig. 7, Table 3)",
                "input file (MB)",
                "job time (s)",
                &lines,
            ),
        ));
    }
    let mut sweep: Vec<(String, Vec<(f64, f64)>)> = Alg::ALL.iter().map(|a| (format!("koalesce {}", a.id()), Vec::new())).collect();
    for r in o.results.iter().filter(|r| r.setup.sweep) {
        if let super::Network::Fixed(x) = r.setup.network {
            for (i, m) in means(r).iter().enumerate() {
                sweep[i].1.push((x, *m));
            }
        }
    }
    for alg in [Alg::A, Alg::C, Alg::D] {
        sweep.push((
            format!("004 {}, own-run MB/s", alg.id()),
            vec![(harmonic(&table3::remote_mb_per_s(&[alg])), table3::table4(alg).0)],
        ));
    }
    out.push((
        "sweep.svg".to_string(),
        line_svg(
            "Average job time against WAN throughput",
            "throughput of every transfer (MB/s)",
            "average job time (s)",
            &sweep,
        ),
    ));
    out
}

/// Writes gridway.md, runs.csv, jobs.csv and the plots into `dir`; returns the files written.
pub fn write(o: &Outcome, dir: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut files = Vec::new();
    let mut put = |name: &str, text: &str| -> io::Result<()> {
        let p = dir.join(name);
        std::fs::write(&p, text)?;
        files.push(p);
        Ok(())
    };
    put("gridway.md", &markdown(o))?;
    put("runs.csv", &csv(o))?;
    put("jobs.csv", &jobs_csv(o))?;
    for (name, svg) in plots(o) {
        put(&name, &svg)?;
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_can_fail() {
        let ours = [690.0, 700.0, 710.0, 695.0, 705.0];
        assert_eq!(verdict_single_run(700.0, &ours), Verdict::Yes);
        assert_eq!(verdict_single_run(740.0, &ours), Verdict::Partly);
        assert_eq!(verdict_single_run(800.0, &ours), Verdict::No);
        assert_eq!(verdict_ordering(&[5.0, 6.0, 4.0]), Verdict::Yes);
        assert_eq!(verdict_ordering(&[20.0, -15.0, 1.0]), Verdict::Partly);
        assert_eq!(verdict_ordering(&[-5.0, -6.0, 1.0]), Verdict::No);
        assert_eq!(verdict_share(10, 10), Verdict::Yes);
        assert_eq!(verdict_share(5, 10), Verdict::Partly);
        assert_eq!(verdict_share(4, 10), Verdict::No);
        let m = [799.0, 687.0, 648.0, 674.0];
        assert!(seed_ranking_holds(&m));
        assert_eq!(ranking(&m), "(c) < (d) < (b) < (a)");
        assert!(!seed_ranking_holds(&[799.0, 687.0, 680.0, 674.0]));
    }
}
