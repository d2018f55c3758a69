//! `koalesce bench html`: what the HTML reports and the dashboard's charts cost to render, on a
//! simulated run of many jobs (default 10,000 W30 jobs on the DAS-2 scenario).

use std::hint::black_box;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use koalesce_sim::engine;
use koalesce_sim::html::{job_view, run_report};
use koalesce_sim::metrics;
use koalesce_sim::scenario::{Scenario, WorkloadSpec};
use koalesce_web::html::{state_badge, Column, Table};
use koalesce_web::views::{self, JobView};
use maud::{html, Render};

#[derive(Debug, Args)]
pub struct BenchHtmlArgs {
    /// Scenario whose generated workload is resized to --jobs.
    #[arg(long, default_value = "scenarios/das2-w30.toml")]
    pub scenario: PathBuf,
    /// Grid jobs to simulate.
    #[arg(long, default_value_t = 10_000)]
    pub jobs: usize,
    /// Repetitions of every measurement; the median is printed.
    #[arg(long, default_value_t = 7)]
    pub repeat: usize,
}

/// Median wall time of `f` over `n` runs in ms, and the size of its output.
fn time(n: usize, mut f: impl FnMut() -> usize) -> (f64, usize) {
    let mut times = Vec::with_capacity(n);
    let mut size = 0;
    for _ in 0..n.max(1) {
        let t = Instant::now();
        size = black_box(f());
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], size)
}

impl BenchHtmlArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let mut scenario = Scenario::load(&self.scenario)?;
        match &mut scenario.workload {
            WorkloadSpec::Generated(g) => g.jobs = Some(self.jobs),
            _ => anyhow::bail!("--scenario: needs a generated workload to resize"),
        }
        let t = Instant::now();
        let r = engine::run(&scenario, scenario.seed, &mut |_| {}).context("simulating")?;
        let sim_s = t.elapsed().as_secs_f64();
        let rep = metrics::report(&r);
        println!(
            "{} jobs simulated in {sim_s:.1} s ({} utilization buckets, {} sites); median of {} runs:",
            r.jobs.len(),
            r.timeline.len(),
            r.site_names.len(),
            self.repeat
        );
        let views_all: Vec<JobView> = r.jobs.iter().map(job_view).collect();
        let minutes: Vec<f64> = r.timeline.iter().map(|b| b.start_ms as f64 / 60_000.0).collect();
        let pct = |f: fn(&engine::UtilizationBucket) -> u64| -> Vec<f64> {
            let cap = (r.total_processors * r.bucket_ms).max(1) as f64;
            r.timeline.iter().map(|b| 100.0 * f(b) as f64 / cap).collect()
        };
        let (bg, grid, pwt, pgt) = (pct(|b| b.background), pct(|b| b.grid), pct(|b| b.pwt), pct(|b| b.pgt));
        let queues: [Vec<f64>; 4] = std::array::from_fn(|q| r.timeline.iter().map(|b| b.queued[q] as f64).collect());
        let sites: Vec<String> = r.site_names.clone();
        let mbps: Vec<Vec<Option<f64>>> = r.forecast_mbps.iter().map(|row| row.iter().map(|&v| Some(v)).collect()).collect();
        let counts = [
            ("queued", 0u64),
            ("running", 0),
            ("succeeded", rep.succeeded as u64),
            ("failed", rep.failed as u64),
        ];
        let end = r.end_ms;
        let n = self.repeat;
        let rows: Vec<(&str, String, (f64, usize))> = vec![
            (
                "sim --html report (whole page)",
                format!("{} jobs", r.jobs.len()),
                time(n, || run_report(&r, &rep).len()),
            ),
            (
                "utilization over time",
                format!("{} points", minutes.len()),
                time(n, || views::utilization("u", &minutes, &bg, &grid, &pwt, &pgt).as_str().len()),
            ),
            (
                "placement queues over time",
                format!("{} points", minutes.len()),
                time(n, || views::queue_lengths("q", &minutes, &queues).as_str().len()),
            ),
            (
                "jobs by state",
                "4 bars".into(),
                time(n, || views::state_counts("s", &counts).as_str().len()),
            ),
            (
                "Gantt of one job",
                format!("{} components", views_all[0].components.len()),
                time(n, || views::job_gantt(&views_all[0], end).as_str().len()),
            ),
            (
                "Gantt of the jobs",
                "200 rows".into(),
                time(n, || {
                    views::jobs_gantt("j", &views_all, 200, 0, "since the start", end).as_str().len()
                }),
            ),
            (
                "Gantt of the jobs",
                "1,000 rows".into(),
                time(n, || {
                    views::jobs_gantt("j", &views_all, 1000, 0, "since the start", end).as_str().len()
                }),
            ),
            (
                "Gantt of the machine",
                "200 jobs".into(),
                time(n, || {
                    views::machine_gantt("m", &sites, &views_all[..200.min(views_all.len())], 0, "", end)
                        .as_str()
                        .len()
                }),
            ),
            (
                "Gantt of the machine",
                format!("{} jobs", views_all.len()),
                time(n, || views::machine_gantt("m", &sites, &views_all, 0, "", end).as_str().len()),
            ),
            (
                "bandwidth heat map",
                format!("{} x {} sites", sites.len(), sites.len()),
                time(n, || views::bandwidth("b", &sites, &mbps).as_str().len()),
            ),
            (
                "jobs table (maud)",
                "1,000 rows".into(),
                time(n, || {
                    let mut t = Table::new(vec![
                        Column::num("id"),
                        Column::text("name"),
                        Column::text("state"),
                        Column::text("sites"),
                    ]);
                    for j in views_all.iter().take(1000) {
                        t.row_with_id(
                            format!("job-{}", j.id),
                            vec![
                                html! { (j.id) },
                                html! { (j.name) },
                                state_badge(&j.state),
                                html! { (j.components.iter().filter_map(|c| c.site.as_deref()).collect::<Vec<_>>().join(", ")) },
                            ],
                        );
                    }
                    t.render().into_string().len()
                }),
            ),
        ];
        println!("{:<34} {:>16} {:>11} {:>11}", "what", "size", "ms", "KiB");
        for (what, size, (ms, bytes)) in rows {
            println!("{what:<34} {size:>16} {ms:>11.2} {:>11.1}", bytes as f64 / 1024.0);
        }
        Ok(ExitCode::SUCCESS)
    }
}
