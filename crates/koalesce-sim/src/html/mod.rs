//! Self-contained HTML reports (`koalesce sim … --html`, `koalesce experiment … --html`): one
//! file with the stylesheet and every chart inline, drawn by `koalesce_web` exactly as the live
//! dashboard draws them.
//!
//! A run's report ([`run_report`]): headline figures; utilization over time (background /
//! grid / PWT / PGT) and per site; the four placement queues over time; jobs per final state;
//! a Gantt of the jobs and one of the machine (the first [`GANTT_JOBS`] jobs: the report says
//! so when there are more); the timelines of the [`DETAIL_JOBS`] jobs that waited longest, one
//! row per component and site with FTT / PGT / PWT; the forecast bandwidth between sites as a
//! heat map; the summary tables of `summary.txt`. An experiment's report
//! ([`experiment::experiment_report`]) has the seed-versus-koalesce verdicts first, then every
//! table of the Markdown report with the plots inline.

pub mod experiment;
mod markdown;

use koalesce_core::state::JobState;
use koalesce_web::chart::{self, JobTimes, Stack, PALETTE};
use koalesce_web::html::{self, Column, Table};
use koalesce_web::views::{self, ComponentView, JobView};
use maud::{html, Markup, Render};

use crate::engine::{JobRecord, SimResult};
use crate::metrics::{utilization_series, Report};
use crate::stats::Summary;

/// Jobs drawn in the Gantt charts of a run's report (the first ones by submission).
pub const GANTT_JOBS: usize = 200;
/// Jobs whose own timeline (one row per component) the report shows: those that waited longest.
pub const DETAIL_JOBS: usize = 3;

/// A job record as the charts see it.
pub fn job_view(j: &JobRecord) -> JobView {
    JobView {
        id: j.id.0,
        name: j.name.clone(),
        state: j.state.name().to_string(),
        times: JobTimes {
            submitted: j.submit,
            placed: j.placed,
            claimed: j.claimed,
            started: j.start,
            finished: j.end,
            ftt_ms: j.ftt_ms,
        },
        components: j
            .placement
            .iter()
            .map(|c| ComponentView {
                site: c.site.clone(),
                processors: c.processors,
            })
            .collect(),
    }
}

fn fmt_s(v: f64) -> String {
    format!("{v:.1}")
}

fn summary_table(rep: &Report) -> Markup {
    let mut t = Table::new(vec![
        Column::text("time (s)"),
        Column::num("jobs"),
        Column::num("mean"),
        Column::num("p50"),
        Column::num("p90"),
        Column::num("p99"),
        Column::num("max"),
    ]);
    for (name, s) in [
        ("placement time", &rep.placement_s),
        ("file transfer (FTT)", &rep.ftt_s),
        ("wait (submit→claim)", &rep.wait_s),
        ("total waiting (TWT)", &rep.twt_s),
        ("response", &rep.response_s),
    ] {
        let cells = match s {
            Some(Summary {
                n,
                mean,
                p50,
                p90,
                p99,
                max,
                ..
            }) => vec![
                html! { (name) },
                html! { (n) },
                html! { (fmt_s(*mean)) },
                html! { (fmt_s(*p50)) },
                html! { (fmt_s(*p90)) },
                html! { (fmt_s(*p99)) },
                html! { (fmt_s(*max)) },
            ],
            None => vec![html! { (name) }, html! { "0" }],
        };
        t.row(cells);
    }
    t.render()
}

fn shape_table(rep: &Report) -> Markup {
    let mut t = Table::new(vec![
        Column::text("shape"),
        Column::num("jobs"),
        Column::num("placement s"),
        Column::num("FTT s"),
        Column::num("placement tries"),
        Column::num("claiming tries"),
        Column::num("spread (sites)"),
    ]);
    for s in &rep.shapes {
        t.row(vec![
            html! { (s.shape) },
            html! { (s.jobs) },
            html! { (fmt_s(s.placement_s)) },
            html! { (fmt_s(s.ftt_s)) },
            html! { (format!("{:.2}", s.placement_tries)) },
            html! { (format!("{:.2}", s.claiming_tries)) },
            html! { (format!("{:.2}", s.spread)) },
        ]);
    }
    t.render()
}

fn facts(rep: &Report, r: &SimResult) -> Markup {
    html::kv_table(&[
        (
            "job spread",
            html! { (format!("{:.2} sites; {:.0}% of multi-component jobs co-allocated", rep.mean_spread, 100.0 * rep.coallocated_share)) },
        ),
        ("last arrival", html! { (chart::fmt_duration(r.last_arrival_ms)) }),
        (
            "last finish",
            html! { (chart::fmt_duration(r.end_ms)) " (" (if rep.stable() { "stable" } else { "not stable" }) ")" },
        ),
        ("soft errors", html! { (rep.soft_errors) }),
        (
            "blacklisted",
            html! { @if rep.blacklisted.is_empty() { "none" } @else { (rep.blacklisted.join(", ")) } },
        ),
        ("moved over the network", html! { (format!("{:.1} GB", rep.transferred_gb)) }),
        ("simulation events", html! { (rep.events) }),
    ])
}

/// Utilization per site over the whole run, % of the site's processors.
fn per_site_chart(r: &SimResult) -> chart::Svg {
    let sites: Vec<usize> = (0..r.site_names.len()).filter(|&s| r.site_processors[s] > 0).collect();
    let names: Vec<String> = sites.iter().map(|&s| r.site_names[s].clone()).collect();
    let layer = |i: usize, name: &str, f: fn(&crate::engine::UtilizationBucket) -> u64| Stack {
        name: name.to_string(),
        color: PALETTE[i],
        values: sites
            .iter()
            .map(|&s| 100.0 * f(&r.site_totals[s]) as f64 / (r.site_processors[s] as f64 * r.end_ms.max(1) as f64))
            .collect(),
    };
    chart::stacked_hbar_svg(
        "Utilization per site over the run",
        "% of the site's processors",
        &names,
        &[
            layer(0, "background", |b| b.background),
            layer(1, "grid load", |b| b.grid),
            layer(2, "PWT", |b| b.pwt),
            layer(3, "PGT", |b| b.pgt),
        ],
        Some(100.0),
    )
}

/// The report of one run: a complete HTML document.
pub fn run_report(r: &SimResult, rep: &Report) -> String {
    let title = format!("{} — {} (seed {})", r.scenario, r.policy.to_uppercase(), r.seed);
    let subtitle = format!(
        "{} grid jobs on {} sites with {} processors; simulated time {}; utilization sampled every {}.",
        r.jobs.len(),
        r.site_processors.iter().filter(|&&p| p > 0).count(),
        r.total_processors,
        chart::fmt_duration(r.end_ms),
        chart::fmt_duration(r.bucket_ms)
    );
    let u = utilization_series(r);
    let minutes: Vec<f64> = u.start_s.iter().map(|s| s / 60.0).collect();
    let queues: [Vec<f64>; 4] = std::array::from_fn(|q| r.timeline.iter().map(|b| b.queued[q] as f64).collect());
    let order = ["queued", "placed", "claimed", "running", "succeeded", "failed", "cancelled"];
    let counts: Vec<(&str, u64)> = order
        .iter()
        .map(|&s| (s, r.jobs.iter().filter(|j| j.state.name() == s).count() as u64))
        .collect();
    let shown: Vec<JobView> = r.jobs.iter().take(GANTT_JOBS).map(job_view).collect();
    let mut waited: Vec<&JobRecord> = r.jobs.iter().filter(|j| j.state == JobState::Succeeded).collect();
    waited.sort_by_key(|j| (std::cmp::Reverse(j.start.unwrap_or(0).saturating_sub(j.submit)), j.id));
    let sites_with_procs: Vec<String> = (0..r.site_names.len())
        .filter(|&s| r.site_processors[s] > 0)
        .map(|s| r.site_names[s].clone())
        .collect();
    let mbps: Vec<Vec<Option<f64>>> = r
        .forecast_mbps
        .iter()
        .enumerate()
        .map(|(a, row)| row.iter().enumerate().map(|(b, &v)| (a != b).then_some(v)).collect())
        .collect();
    let capped = r.jobs.len() > GANTT_JOBS;
    let cap_note = if capped {
        format!(
            "The first {GANTT_JOBS} of {} jobs (by submission); jobs.csv has every job.",
            r.jobs.len()
        )
    } else {
        format!("All {} jobs.", r.jobs.len())
    };
    let body = html! {
        (html::stats(&[
            ("grid jobs", r.jobs.len().to_string()),
            ("succeeded", rep.succeeded.to_string()),
            ("failed", rep.failed.to_string()),
            ("unfinished", rep.unfinished.to_string()),
            ("rejected at submission", rep.rejected.to_string()),
            ("utilization (bg + grid + PWT)", format!("{:.1}%", rep.util_total())),
            ("mean wait (s)", rep.wait_s.as_ref().map_or("–".into(), |s| fmt_s(s.mean))),
            ("mean response (s)", rep.response_s.as_ref().map_or("–".into(), |s| fmt_s(s.mean))),
            ("max placement queue", rep.max_queue_length.to_string()),
        ]))
        @if !r.invariant_violations.is_empty() {
            (html::notice(&format!("{} invariant violations (see the run's output)", r.invariant_violations.len()), true))
        }
        h2 { "Utilization" }
        div.charts {
            (html::chart(Some("utilization"), &views::utilization("Utilization over time", &minutes, &u.background, &u.grid, &u.pwt, &u.pgt),
                Some("Percent of all processors: local jobs, grid components running, claimed processors waiting for the others (PWT), placed but not yet claimed (PGT: those processors are idle or used by local jobs, so not in the total).")))
            (html::chart(Some("utilization-per-site"), &per_site_chart(r), Some("Mean over the whole run.")))
        }
        h2 { "Queues and states" }
        div.charts {
            (html::chart(Some("queues"), &views::queue_lengths("Placement queues over time", &minutes, &queues),
                Some(&format!("Jobs in each of the four placement queues at the start of every {} interval.", chart::fmt_duration(r.bucket_ms)))))
            (html::chart(Some("states"), &views::state_counts("Jobs by state at the end of the run", &counts), None))
        }
        h2 { "Jobs over time" }
        (html::chart(Some("jobs-gantt"), &views::jobs_gantt("Jobs: queued, placed, staging, claimed, running", &shown, GANTT_JOBS, 0, "since the start of the run", r.end_ms),
            Some(&format!("{cap_note} Staging (the estimated file transfer time) is the strip along the bottom of a row."))))
        (html::chart(Some("machine-gantt"), &views::machine_gantt("The machine: grid components per site", &r.site_names.iter().filter(|s| sites_with_procs.contains(s)).cloned().collect::<Vec<_>>(), &shown, 0, "since the start of the run", r.end_ms),
            Some(&format!("{cap_note} Each bar is one component from its claim (PWT) to its end, in lanes per site."))))
        @if !waited.is_empty() {
            h3 { "The " (waited.len().min(DETAIL_JOBS)) " jobs that waited longest" }
            div.charts {
                @for j in waited.iter().take(DETAIL_JOBS) {
                    (html::chart(None, &views::job_gantt(&job_view(j), r.end_ms), None))
                }
            }
        }
        h2 { "Network" }
        (html::chart(Some("bandwidth"), &views::bandwidth("Forecast bandwidth between sites", &r.site_names, &mbps),
            Some("The scheduler's forecast at the end of the run, Mbit/s: the path's bottleneck, refreshed during the run for the pairs that transfers use (a link shared by transfers forecasts less).")))
        h2 { "Summary" }
        (summary_table(rep))
        h3 { "Per job shape (components × processors)" }
        (shape_table(rep))
        (facts(rep, r))
    };
    html::report_page(&title, &subtitle, body).into_string()
}
