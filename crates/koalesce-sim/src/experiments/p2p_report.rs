//! The files `koalesce experiment p2p` writes: `p2p.md` (every table: workloads against
//! Table II, each figure's configurations, the seed-versus-koalesce checks), the same as
//! `p2p.html` with the plots, `runs.csv` (one line per run) and SVG plots of Figs. 2–6. Everything is a function of the runs alone (no
//! wall-clock time), so the same seeds give the same bytes.

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use crate::p2p::grid::{SERVER_TRACE, TABLE_I, TABLE_II, TRACES};
use crate::p2p::{Algorithm, Metrics, Sites};
use crate::plot;

use super::p2p::{data_name, mean_ci, ConfigResult, Outcome, DATA_SETS};
use super::p2p_checks::{checks, Check, Verdict};

fn ci(samples: &[f64], scale: f64, digits: usize) -> String {
    let (m, h) = mean_ci(samples);
    format!("{:.*} ± {:.*}", digits, m * scale, digits, h * scale)
}

fn metric(r: &ConfigResult, f: impl Fn(&Metrics) -> f64) -> Vec<f64> {
    r.runs.iter().map(|x| f(&x.metrics)).collect()
}

/// The six metrics of the seed's figures, per seed: NART, NAWT, UTIL, FOJM, FDVM, DMOH.
fn six(o: &Outcome, r: &ConfigResult) -> [Vec<f64>; 6] {
    let (nart, nawt) = o.normalized(r);
    [
        nart,
        nawt,
        metric(r, |m| m.util),
        metric(r, |m| m.fojm),
        metric(r, |m| m.fdvm),
        metric(r, |m| m.dmoh),
    ]
}

const SIX: [&str; 6] = ["NART", "NAWT", "UTIL", "FOJM", "FDVM", "DMOH"];

fn table_header(md: &mut String) {
    md.push_str("| configuration | NART | NAWT | UTIL % | FOJM % | FDVM % | DMOH % | blocked jobs % | blocked node-time % | ART s | AWT s | max LQ |\n");
    md.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
}

fn table_row(md: &mut String, o: &Outcome, r: &ConfigResult) {
    let s = six(o, r);
    let max_lq = r.runs.iter().map(|x| x.counters.max_lq).max().unwrap_or(0);
    let _ = writeln!(
        md,
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        r.config.label,
        ci(&s[0], 1.0, 3),
        ci(&s[1], 1.0, 3),
        ci(&s[2], 100.0, 1),
        ci(&s[3], 100.0, 1),
        ci(&s[4], 100.0, 1),
        ci(&s[5], 100.0, 2),
        ci(&metric(r, |m| m.blocked), 100.0, 1),
        ci(&metric(r, |m| m.blocked_time), 100.0, 2),
        ci(&metric(r, |m| m.art_s), 1.0, 0),
        ci(&metric(r, |m| m.awt_s), 1.0, 0),
        max_lq
    );
}

fn section(md: &mut String, o: &Outcome, title: &str, rows: &[&ConfigResult]) {
    let _ = writeln!(md, "\n## {title}\n");
    table_header(md);
    for r in rows {
        table_row(md, o, r);
    }
}

/// Grouped bars of the six metrics, one series per configuration, with 95% CIs.
fn bars(o: &Outcome, title: &str, rows: &[(String, &ConfigResult)]) -> String {
    let categories: Vec<String> = SIX.iter().map(|s| s.to_string()).collect();
    let mut series = Vec::new();
    let mut errors = Vec::new();
    for (name, r) in rows {
        let (means, halves): (Vec<f64>, Vec<f64>) = six(o, r).iter().map(|v| mean_ci(v)).unzip();
        series.push((name.clone(), means));
        errors.push(halves);
    }
    plot::grouped_bar_svg(title, "normalized time or fraction", &categories, &series, Some(&errors))
}

/// Writes the report files into `dir`; returns their paths.
pub fn write_report(o: &Outcome, dir: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut outputs: Vec<(String, String)> = Vec::new();
    let mut write = |name: &str, body: String| -> io::Result<()> {
        outputs.push((name.to_string(), body));
        Ok(())
    };
    let si = |b: f64, s: Sites, aware: bool| o.find(Algorithm::SenderInitiated, b, s, aware, 1000, false).expect("configuration");

    // Fig. 2.
    let fig2: Vec<(String, &ConfigResult)> = Algorithm::ALL.iter().map(|&a| (a.name().to_string(), o.base(a))).collect();
    write("fig2-methods.svg", bars(o, "Fig. 2: scheduling methods (B, 12 sites)", &fig2))?;
    // Fig. 3.
    let fig3: Vec<(String, &ConfigResult)> = DATA_SETS.iter().map(|&b| (data_name(b), si(b, Sites::Twelve, true))).collect();
    write("fig3-data.svg", bars(o, "Fig. 3: data per job (S-I, 12 sites)", &fig3))?;
    // Fig. 4 and 5.
    for (aware, prefix, what) in [(true, "fig4", "S-I"), (false, "fig5", "S-I ignoring data")] {
        for b in [0.1, 1.0, 10.0] {
            let rows: Vec<(String, &ConfigResult)> = Sites::ALL.iter().map(|&s| (format!("{s} sites"), si(b, s, aware))).collect();
            let name = data_name(b);
            write(
                &format!("{prefix}-sites-{}.svg", name.replace('.', "_")),
                bars(
                    o,
                    &format!("{}: sites, {what}, {name}", if aware { "Fig. 4" } else { "Fig. 5" }),
                    &rows,
                ),
            )?;
        }
    }
    let mut ratio_series = Vec::new();
    for s in Sites::ALL {
        let vals: Vec<f64> = [0.1, 1.0, 10.0]
            .iter()
            .map(|&b| {
                let (a, w) = (metric(si(b, s, false), |m| m.art_s), metric(si(b, s, true), |m| m.art_s));
                mean_ci(&a.iter().zip(&w).map(|(x, y)| x / y).collect::<Vec<_>>()).0
            })
            .collect();
        ratio_series.push((format!("{s} sites"), vals));
    }
    write(
        "fig5-art-ratio.svg",
        plot::grouped_bar_svg(
            "Fig. 5: ART ignoring data / ART considering data (S-I)",
            "ratio",
            &["0.1B".to_string(), "B".to_string(), "10B".to_string()],
            &ratio_series,
            None,
        ),
    )?;
    // Fig. 6.
    let mut lines = vec![
        (String::new(), Vec::new()),
        (String::new(), Vec::new()),
        (String::new(), Vec::new()),
    ];
    lines[0].0 = "NART (S-I)".into();
    lines[1].0 = "NAWT (S-I)".into();
    lines[2].0 = "local, base load".into();
    let mut util = vec![("UTIL (S-I) %".to_string(), Vec::new())];
    for &l in &o.loads {
        if let Some(r) = o.find(Algorithm::SenderInitiated, 1.0, Sites::Twelve, true, l, false) {
            let (nart, nawt) = o.normalized(r);
            let x = f64::from(l) / 10.0;
            lines[0].1.push((x, mean_ci(&nart).0));
            lines[1].1.push((x, mean_ci(&nawt).0));
            lines[2].1.push((x, 1.0));
            util[0].1.push((x, mean_ci(&metric(r, |m| m.util)).0 * 100.0));
        }
    }
    write(
        "fig6-more-jobs.svg",
        plot::line_svg(
            "Fig. 6: more jobs (S-I, B, 12 sites)",
            "jobs, % of the base workload",
            "normalized to local at 100%",
            &lines,
        ),
    )?;
    write(
        "fig6-util.svg",
        plot::line_svg(
            "Fig. 6: weighted grid utilization (S-I, B, 12 sites)",
            "jobs, % of the base workload",
            "UTIL %",
            &util,
        ),
    )?;

    let checks = checks(o);
    let md = markdown(o, &checks);
    let svgs: Vec<String> = outputs.iter().map(|(n, _)| n.clone()).filter(|n| n.ends_with(".svg")).collect();
    outputs.push(("p2p.html".to_string(), html(&md, &svgs)));
    outputs.push(("p2p.md".to_string(), md));
    outputs.push(("runs.csv".to_string(), runs_csv(o)));
    let mut files = Vec::new();
    for (name, body) in outputs {
        let path = dir.join(name);
        std::fs::write(&path, body)?;
        files.push(path);
    }
    Ok(files)
}

/// The generated tables as one HTML page with the plots (a small converter for the markdown
/// this module writes: headings, tables, paragraphs).
fn html(md: &str, svgs: &[String]) -> String {
    let cell = |c: &str| plot::escape_xml(c.trim());
    let mut out = String::from("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Seed 002 reproduced</title>\n<style>body{font-family:Helvetica,Arial,sans-serif;max-width:1200px;margin:2em auto}table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px}</style></head><body>\n");
    let mut in_table = false;
    for line in md.lines() {
        if line.starts_with('|') {
            if line.starts_with("|---") {
                continue;
            }
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
            if !in_table {
                out.push_str("<table>\n<tr>");
                for c in &cells {
                    let _ = write!(out, "<th>{}</th>", cell(c));
                }
                out.push_str("</tr>\n");
                in_table = true;
            } else {
                out.push_str("<tr>");
                for c in &cells {
                    let _ = write!(out, "<td>{}</td>", cell(c));
                }
                out.push_str("</tr>\n");
            }
            continue;
        }
        if in_table {
            out.push_str("</table>\n");
            in_table = false;
        }
        if let Some(h) = line.strip_prefix("## ") {
            let _ = writeln!(out, "<h2>{}</h2>", cell(h));
        } else if let Some(h) = line.strip_prefix("# ") {
            let _ = writeln!(out, "<h1>{}</h1>", cell(h));
            for s in svgs {
                let _ = writeln!(out, "<img src=\"{}\" alt=\"{}\">", plot::escape_xml(s), plot::escape_xml(s));
            }
        } else if !line.trim().is_empty() {
            let _ = writeln!(out, "<p>{}</p>", cell(line));
        }
    }
    if in_table {
        out.push_str("</table>\n");
    }
    out.push_str("</body></html>\n");
    out
}

fn markdown(o: &Outcome, checks: &[Check]) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Seed 002 reproduced: every table\n\nGenerated by `koalesce experiment p2p` with seeds {}–{} ({} seeds, {} configurations, {}‰ of Table II's work per server). Values are means over the seeds ± the half-width of their 95% confidence interval (Student t). NART and NAWT are normalized to the local baseline of the same seed (with the same estimates, at the base load).",
        o.seeds.first().unwrap_or(&0),
        o.seeds.last().unwrap_or(&0),
        o.seeds.len(),
        o.results.len(),
        o.results.first().map_or(1000, |r| r.config.workload.work_per_mille)
    );
    let count = |v: Verdict| checks.iter().filter(|c| c.verdict == v).count();
    let _ = writeln!(
        md,
        "\nSeed comparisons: {} yes, {} partly, {} no.\n\n## Seed versus koalesce\n",
        count(Verdict::Yes),
        count(Verdict::Partly),
        count(Verdict::No)
    );
    md.push_str("| seed section | seed's words | seed value (agreement range) | koalesce | agrees? |\n|---|---|---|---|---|\n");
    for c in checks {
        let _ = writeln!(
            md,
            "| {} | \"{}\" | {} | {} | {} |",
            c.section,
            c.quote,
            c.seed,
            c.ours,
            c.verdict.name()
        );
    }

    md.push_str("\n## Workloads against Table II\n\nOne window of a real trace per server (see docs/experiments/p2p.md for the mapping). \"seed load\" is the work Table II implies (jobs × average input at B, 1 KB per CPU-second) over the server's CPUs and period; ours counts whole nodes. Window start is seed 1's.\n\n");
    md.push_str("| server | trace | seed jobs | our jobs | seed avg input MB | our avg input MB | seed load % | our load % | window start | window days | stretch |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (s, spec) in TABLE_I.iter().enumerate() {
        let w = &TABLE_II[s];
        let per_seed = |f: &dyn Fn(&super::p2p::ServerLoad) -> f64| -> Vec<f64> { o.workloads.iter().map(|ws| f(&ws[s])).collect() };
        let seed_load = w.work_cpu_s() / (f64::from(spec.cpus()) * w.period_ms() as f64 / 1000.0);
        let first = &o.workloads[0][s];
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.1} | {} | {:.1} | {} | {}{} | {} | {} |",
            spec.name,
            TRACES[SERVER_TRACE[s]].file.trim_start_matches("extra/"),
            w.jobs,
            ci(&per_seed(&|l| l.jobs as f64), 1.0, 0),
            w.avg_input_mb,
            ci(&per_seed(&|l| l.avg_input_mb), 1.0, 1),
            seed_load * 100.0,
            ci(&per_seed(&|l| l.load), 100.0, 1),
            first.window_start,
            if o.workloads.iter().any(|ws| ws[s].overlaps) {
                " (overlap)"
            } else {
                ""
            },
            ci(&per_seed(&|l| l.window_days), 1.0, 1),
            ci(&per_seed(&|l| l.stretch), 1.0, 2)
        );
    }

    let si = |b: f64, s: Sites, aware: bool| o.find(Algorithm::SenderInitiated, b, s, aware, 1000, false).expect("configuration");
    let fig2: Vec<&ConfigResult> = Algorithm::ALL.iter().map(|&a| o.base(a)).collect();
    section(&mut md, o, "Fig. 2: scheduling methods (B, 12 sites)", &fig2);
    let fig3: Vec<&ConfigResult> = DATA_SETS.iter().map(|&b| si(b, Sites::Twelve, true)).collect();
    section(&mut md, o, "Fig. 3: data per job (S-I, 12 sites)", &fig3);
    let fig4: Vec<&ConfigResult> = [0.1, 1.0, 10.0]
        .iter()
        .flat_map(|&b| Sites::ALL.iter().map(move |&s| si(b, s, true)))
        .collect();
    section(&mut md, o, "Fig. 4: number of sites (S-I)", &fig4);
    let fig5: Vec<&ConfigResult> = [0.1, 1.0, 10.0]
        .iter()
        .flat_map(|&b| Sites::ALL.iter().map(move |&s| si(b, s, false)))
        .collect();
    section(&mut md, o, "Fig. 5: data ignored in the decisions (S-I)", &fig5);
    let fig6: Vec<&ConfigResult> = o
        .loads
        .iter()
        .filter_map(|&l| o.find(Algorithm::SenderInitiated, 1.0, Sites::Twelve, true, l, false))
        .collect();
    section(
        &mut md,
        o,
        "Fig. 6: more jobs (S-I, B, 12 sites; NART and NAWT against local at the base load)",
        &fig6,
    );
    let sens: Vec<&ConfigResult> = o.results.iter().filter(|r| r.config.workload.exact_estimates).collect();
    section(
        &mut md,
        o,
        "Sensitivity: run times known exactly (normalized to local with exact estimates)",
        &sens,
    );
    md
}

fn runs_csv(o: &Outcome) -> String {
    let mut csv = String::from(
        "key,seed,jobs,art_s,awt_s,nart,nawt,util,fojm,fdvm,dmoh,blocked,blocked_time,makespan_s,events,replays,awt_queries,max_gq,max_lq,max_transfers\n",
    );
    for r in &o.results {
        let (nart, nawt) = o.normalized(r);
        for (i, x) in r.runs.iter().enumerate() {
            let (m, c) = (&x.metrics, &x.counters);
            let _ = writeln!(
                csv,
                "{},{},{},{:.3},{:.3},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.0},{},{},{},{},{},{}",
                r.config.key,
                x.seed,
                m.jobs,
                m.art_s,
                m.awt_s,
                nart[i],
                nawt[i],
                m.util,
                m.fojm,
                m.fdvm,
                m.dmoh,
                m.blocked,
                m.blocked_time,
                m.makespan_s,
                c.events,
                c.replays,
                c.awt_queries,
                c.max_gq,
                c.max_lq,
                c.max_transfers
            );
        }
    }
    csv
}
