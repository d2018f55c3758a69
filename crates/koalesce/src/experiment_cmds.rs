//! `koalesce experiment …`: reproductions of published experiments in the simulator.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use koalesce_sim::experiments::koala::{self, Exp, Options};
use koalesce_sim::experiments::{p2p, p2p_checks, p2p_report};
use koalesce_sim::p2p::Traces;

#[derive(Debug, Subcommand)]
pub enum ExperimentCommand {
    /// Reproduce published experiments in the simulator, with the seeds' values side by side.
    Experiment {
        #[command(subcommand)]
        which: ExperimentWhich,
    },
}

#[derive(Debug, Subcommand)]
pub enum ExperimentWhich {
    /// KOALA on the DAS-2 (000 §4–5, 003 Ch. 5–6): stable system (W30/W50, CF/WF, replication),
    /// high background load, job spread, unreliable testbed, co-allocated vs single-component
    /// workloads, the calibration of the transfer model, and sensitivity studies (network,
    /// placement on submission, background, 000's rules, arrival rates, §5.2's load and scan rule).
    ///
    /// Writes DIR/koala.md (every table: configuration results, per-shape results, seed vs
    /// koalesce), DIR/runs.csv (one line per run) and the SVG plots; with --html also
    /// DIR/koala.html.
    Koala(KoalaArgs),
    /// The broker of 001: Tables I and II (co-allocation by reservations, Algorithms 1 and 2,
    /// 001 §5.2.2) side by side with the seed, their sensitivity to the setup details the seed
    /// leaves open, and co-allocation by reservations against KOALA's claiming on W30/W50.
    ///
    /// Writes DIR/broker.md (every table, seed vs koalesce with verdicts), DIR/runs.csv and the
    /// SVG plots (with --html also DIR/broker.html). Runs in parallel over seeds; the output is the same for any number of threads.
    Broker(BrokerArgs),
    /// Peer-to-peer grid scheduling with job and data migration (002, Shan, Oliker, Smith,
    /// Biswas): twelve servers with their local and grid schedulers, real traces carrying Table
    /// II's work, Figs. 2–6 (methods, data per job, sites, data ignored, more jobs) and the
    /// headline results, over N seeds with 95% confidence intervals, side by side with the seed.
    ///
    /// Writes DIR/p2p.md (every table and the seed-versus-koalesce checks), the same with the
    /// plots as DIR/p2p.html, DIR/runs.csv (one line per run) and the SVG plots. Runs go in parallel; the files do not depend on the
    /// number of threads.
    P2p(P2pArgs),
    /// GridWay's data-location-aware scheduling (004 §3.4.2, Tables 3 and 4): four
    /// REQUIREMENTS/RANK algorithms (data ignored, jobs to data, balanced, transfer-penalized)
    /// for ten jobs on three sites, evaluated by the core's placement scan; the seed's average
    /// job times and transfer counts side by side, its statements checked, variants of the
    /// reconstructed setup and a sweep over the WAN throughput.
    ///
    /// Writes DIR/gridway.md (every table, with verdicts), DIR/runs.csv (one line per run),
    /// DIR/jobs.csv (every job of the reconstruction) and the SVG plots. Runs in parallel over
    /// seeds; the output is the same bytes for any number of threads.
    Gridway(GridwayArgs),
    /// Close-to-Files on real shaped links (issue 17): a real server schedules the same seeded
    /// job mix with CF and NWS forecasts, CF with a constant bandwidth, and WF, over sites whose
    /// storage agents sit in network namespaces joined by tc-shaped links (or the Slurm sites
    /// of `koalesce testbed up --network` with --testbed). Needs root for the namespaces (falls
    /// back to loopback, unshaped, with a warning).
    ///
    /// Writes DIR/live-cf.md (measured FTT, predicted FTT, its error and response time per
    /// variant), DIR/jobs.csv and the SVG plots.
    LiveCf(crate::live_cf::LiveCfArgs),
}

#[derive(Debug, Args)]
pub struct P2pArgs {
    /// Output directory.
    #[arg(long, default_value = "out/p2p")]
    out: PathBuf,
    /// Seeds (1, 2, …, N); each draws every server's trace window and the jobs' data sizes.
    #[arg(long, default_value_t = 10)]
    seeds: usize,
    /// Directory of the SWF traces (../shared/traces in this project).
    #[arg(long, default_value = "../shared/traces")]
    traces: PathBuf,
    /// Worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    /// A tenth of Table II's work per server (a fast, rougher run; the same as
    /// --work-per-mille 100).
    #[arg(long, conflicts_with = "work_per_mille")]
    quick: bool,
    /// Table II's work per server in per mille (1000, the default, is the seed's size; smaller
    /// values map each server's trace window onto a shorter period).
    #[arg(long, value_parser = clap::value_parser!(u32).range(10..=1000))]
    work_per_mille: Option<u32>,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Debug, Args)]
pub struct GridwayArgs {
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Seeds (1, 2, …, N): every algorithm runs once per seed and setup; means come with 95%
    /// confidence intervals.
    #[arg(long, default_value_t = 20)]
    seeds: usize,
    /// Worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Debug, Args)]
pub struct BrokerArgs {
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Seeds (1, 2, …, N): each runs every table configuration `--runs` times and every
    /// comparison configuration once.
    #[arg(long, default_value_t = 10)]
    seeds: usize,
    /// Co-allocation requests per seed and table configuration (the seed ran 1000).
    #[arg(long, default_value_t = 1000)]
    runs: usize,
    /// 200 requests per seed and a quarter of the W30/W50 jobs (a fast, noisier run).
    #[arg(long)]
    quick: bool,
    /// Only these parts (comma-separated): tables, compare. Default: both.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    /// Also write DIR/broker.html: one self-contained page with the seed comparisons and their
    /// verdicts, every table and the plots inline.
    #[arg(long)]
    html: bool,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Debug, Args)]
pub struct KoalaArgs {
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Seeds per configuration (1, 2, …, N); means come with 95% confidence intervals.
    #[arg(long, default_value_t = 10)]
    seeds: usize,
    /// Worker threads for the runs (default: one per core). The output is the same bytes for
    /// any number.
    #[arg(long)]
    threads: Option<usize>,
    /// A quarter of the seeds' job counts (a fast, noisier run).
    #[arg(long)]
    quick: bool,
    /// Only these experiments (comma-separated): stable, high-background, spread, unreliable,
    /// runners, calibration, sensitivity. Default: all.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Also write DIR/koala.html: one self-contained page with the seed comparisons and their
    /// verdicts, every table and the plots inline.
    #[arg(long)]
    html: bool,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

fn write_html(path: &std::path::Path, page: &str) -> anyhow::Result<PathBuf> {
    std::fs::write(path, page).with_context(|| format!("writing {}", path.display()))?;
    println!("report in {}", path.display());
    Ok(path.to_path_buf())
}

impl ExperimentCommand {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            ExperimentCommand::Experiment {
                which: ExperimentWhich::Koala(a),
            } => a.run(),
            ExperimentCommand::Experiment {
                which: ExperimentWhich::Broker(a),
            } => a.run(),
            ExperimentCommand::Experiment {
                which: ExperimentWhich::P2p(a),
            } => a.run(),
            ExperimentCommand::Experiment {
                which: ExperimentWhich::Gridway(a),
            } => a.run(),
            ExperimentCommand::Experiment {
                which: ExperimentWhich::LiveCf(a),
            } => {
                a.run()?;
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

impl KoalaArgs {
    fn run(self) -> anyhow::Result<ExitCode> {
        if self.seeds < 2 {
            anyhow::bail!("--seeds: at least 2 are needed for a confidence interval (got {})", self.seeds);
        }
        let exps: Vec<Exp> = if self.only.is_empty() {
            Exp::ALL.to_vec()
        } else {
            self.only
                .iter()
                .map(|s| {
                    Exp::parse(s.trim()).ok_or_else(|| {
                        anyhow::anyhow!(
                            "--only: unknown experiment '{s}' (expected one of: {})",
                            Exp::ALL.map(|e| e.id()).join(", ")
                        )
                    })
                })
                .collect::<anyhow::Result<_>>()?
        };
        let opts = if self.quick {
            Options::quick(self.seeds)
        } else {
            Options::full(self.seeds)
        };
        let total = koala::run_count(&exps, &opts);
        let bar = runs_bar(total, self.quiet, " {msg}");
        let pool = worker_pool(self.threads)?;
        let outcome = pool.install(|| {
            koala::run(&exps, &opts, &|done, _, label| {
                bar.set_position(done as u64);
                bar.set_message(label.to_string());
            })
        });
        bar.finish_and_clear();
        let mut files = koala::write_report(&outcome, &self.out).with_context(|| format!("writing results to {}", self.out.display()))?;
        if self.html {
            files.push(write_html(&self.out.join("koala.html"), &koala::html(&outcome))?);
        }
        let (yes, partly, no, uncounted) = koala::tally(&koala::checks(&outcome));
        println!(
            "{} runs ({} seeds{}); seed comparisons: {yes} yes, {partly} partly, {no} no ({uncounted} rows not counted)",
            total,
            opts.seeds.len(),
            if self.quick { ", quick" } else { "" },
        );
        println!("wrote {} files; tables in {}", files.len(), self.out.join("koala.md").display());
        Ok(ExitCode::SUCCESS)
    }
}

impl BrokerArgs {
    fn run(self) -> anyhow::Result<ExitCode> {
        use koalesce_sim::experiments::broker::{self, report};
        if self.seeds < 2 {
            anyhow::bail!("--seeds: at least 2 are needed for an interval (got {})", self.seeds);
        }
        if self.runs == 0 {
            anyhow::bail!("--runs: at least one request per seed");
        }
        let mut opts = if self.quick {
            broker::Options::quick(self.seeds)
        } else {
            broker::Options::full(self.seeds)
        };
        if !self.quick {
            opts.runs = self.runs;
        }
        if !self.only.is_empty() {
            opts.tables = false;
            opts.compare = false;
            for part in &self.only {
                match part.trim() {
                    "tables" => opts.tables = true,
                    "compare" => opts.compare = true,
                    other => anyhow::bail!("--only: unknown part '{other}' (expected tables or compare)"),
                }
            }
        }
        let bar = runs_bar(opts.work(), self.quiet, "");
        let pool = worker_pool(self.threads)?;
        let outcome = pool.install(|| broker::run(&opts, &|done, _| bar.set_position(done as u64)));
        bar.finish_and_clear();
        let mut files = report::write(&outcome, &self.out).with_context(|| format!("writing results to {}", self.out.display()))?;
        if self.html {
            files.push(write_html(&self.out.join("broker.html"), &report::html(&outcome))?);
        }
        let checks = report::checks(&outcome);
        let count = |v: report::Verdict| checks.iter().filter(|c| c.verdict == v).count();
        for t in &outcome.tables {
            let m = report::summarize(t);
            println!(
                "{:<55} success {:>5.1}% [{:.1}, {:.1}]{}",
                t.setup.label,
                m.success_pct,
                m.wilson.0,
                m.wilson.1,
                m.feasible_pct.map_or(String::new(), |f| format!("  window exists {f:.1}%"))
            );
        }
        println!(
            "seed comparisons: {} yes, {} partly, {} no",
            count(report::Verdict::Yes),
            count(report::Verdict::Partly),
            count(report::Verdict::No)
        );
        println!("wrote {} files; tables in {}", files.len(), self.out.join("broker.md").display());
        Ok(ExitCode::SUCCESS)
    }
}

impl GridwayArgs {
    fn run(self) -> anyhow::Result<ExitCode> {
        use koalesce_sim::experiments::gridway::{self, report};
        if self.seeds < 2 {
            anyhow::bail!("--seeds: at least 2 are needed for a confidence interval (got {})", self.seeds);
        }
        let opts = gridway::Options::full(self.seeds);
        let bar = runs_bar(opts.runs(), self.quiet, "");
        let pool = worker_pool(self.threads)?;
        let outcome = pool.install(|| gridway::run(&opts, &|done, _| bar.set_position(done as u64)));
        bar.finish_and_clear();
        let files = report::write(&outcome, &self.out).with_context(|| format!("writing results to {}", self.out.display()))?;
        let base = outcome.setup("base").expect("the base setup runs");
        println!(
            "{:<32} {:>10} {:>22} {:>10} {:>10}",
            "algorithm", "004 (s)", "koalesce (s, 95% CI)", "004 moves", "koalesce"
        );
        for alg in gridway::Alg::ALL {
            let (seed_avg, seed_tr) = gridway::table3::table4(alg);
            let runs = base.of(alg);
            let v: Vec<f64> = runs.iter().map(|r| r.avg_job_s).collect();
            let (m, h) = koalesce_sim::stats::mean_ci95(&v).unwrap_or((f64::NAN, f64::NAN));
            let tr = runs.iter().map(|r| r.transfers as f64).sum::<f64>() / runs.len() as f64;
            println!(
                "{:<32} {:>10.1} {:>22} {:>10} {:>10.2}",
                format!("{} {}", alg.id(), alg.label()),
                seed_avg,
                format!("{m:.1} ± {h:.1}"),
                seed_tr,
                tr
            );
        }
        let (yes, partly, no) = report::tally(&report::checks(&outcome));
        println!(
            "{} runs ({} seeds); seed comparisons: {yes} yes, {partly} partly, {no} no",
            opts.runs(),
            opts.seeds.len()
        );
        println!("wrote {} files; tables in {}", files.len(), self.out.join("gridway.md").display());
        Ok(ExitCode::SUCCESS)
    }
}

impl P2pArgs {
    fn run(self) -> anyhow::Result<ExitCode> {
        if self.seeds < 2 {
            anyhow::bail!("--seeds: at least 2 are needed for a confidence interval (got {})", self.seeds);
        }
        let started = std::time::Instant::now();
        let traces = Traces::load(&self.traces).with_context(|| format!("reading the traces in {}", self.traces.display()))?;
        let mut opts = p2p::Options::full(self.seeds);
        if self.quick {
            opts.work_per_mille = 100;
        }
        if let Some(w) = self.work_per_mille {
            opts.work_per_mille = w;
        }
        let total = p2p::run_count(&opts);
        let bar = runs_bar(total, self.quiet || !std::io::stderr().is_terminal(), " (eta {eta}) {msg}");
        let times: std::sync::Mutex<std::collections::BTreeMap<String, f64>> = Default::default();
        let progress = |label: &str, took: std::time::Duration| {
            bar.inc(1);
            bar.set_message(label.to_string());
            *times.lock().expect("not poisoned").entry(label.to_string()).or_default() += took.as_secs_f64();
        };
        let pool = worker_pool(self.threads)?;
        let outcome = pool.install(|| p2p::run(&traces, &opts, &progress));
        bar.finish_and_clear();
        let files = p2p_report::write_report(&outcome, &self.out).with_context(|| format!("writing results to {}", self.out.display()))?;
        let checks = p2p_checks::checks(&outcome);
        let count = |v: p2p_checks::Verdict| checks.iter().filter(|c| c.verdict == v).count();
        println!(
            "{total} runs ({} seeds, {}‰ of Table II's work, {} threads) in {:.0} s; seed comparisons: {} yes, {} partly, {} no",
            opts.seeds.len(),
            opts.work_per_mille,
            pool.current_num_threads(),
            started.elapsed().as_secs_f64(),
            count(p2p_checks::Verdict::Yes),
            count(p2p_checks::Verdict::Partly),
            count(p2p_checks::Verdict::No)
        );
        println!("wrote {} files; tables in {}", files.len(), self.out.join("p2p.md").display());
        let mut slowest: Vec<(String, f64)> = times.into_inner().expect("not poisoned").into_iter().collect();
        slowest.sort_by(|a, b| b.1.total_cmp(&a.1));
        let all: f64 = slowest.iter().map(|x| x.1).sum();
        println!("run time summed over the runs: {all:.0} s; the slowest configurations:");
        for (label, t) in slowest.iter().take(5) {
            println!("  {t:>7.1} s  {label}");
        }
        Ok(ExitCode::SUCCESS)
    }
}

#[derive(Debug, Args)]
pub struct BenchP2pArgs {
    /// Directory of the SWF traces, for whole runs on them (skipped when it does not exist).
    #[arg(long, default_value = "../shared/traces")]
    traces: PathBuf,
}

impl BenchP2pArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let traces = if self.traces.is_dir() {
            Some(Traces::load(&self.traces).with_context(|| format!("reading the traces in {}", self.traces.display()))?)
        } else {
            eprintln!("{} not found: no whole runs", self.traces.display());
            None
        };
        print!("{}", koalesce_sim::p2p::bench::bench(traces.as_ref()));
        Ok(ExitCode::SUCCESS)
    }
}

/// The runs' progress bar (hidden with `--quiet`); `extra` follows the elapsed time in its
/// template (`" {msg}"`, `" (eta {eta}) {msg}"`).
fn runs_bar(total: usize, quiet: bool, extra: &str) -> ProgressBar {
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total as u64)
    };
    bar.set_style(
        ProgressStyle::with_template(&format!("runs [{{bar:40}}] {{pos}}/{{len}} {{elapsed_precise}}{extra}"))
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar
}

/// The experiment's worker threads: `--threads N` (at least 1), or one per core.
fn worker_pool(threads: Option<usize>) -> anyhow::Result<rayon::ThreadPool> {
    if threads == Some(0) {
        anyhow::bail!("--threads: at least 1 (got 0)");
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.unwrap_or(0))
        .build()
        .context("starting the worker threads")
}
