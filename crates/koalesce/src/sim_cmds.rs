//! `koalesce sim` (scenario and single-cluster modes) and `koalesce bench easy`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use koalesce_core::model::PolicyKind;
use koalesce_sim::engine;
use koalesce_sim::metrics;
use koalesce_sim::scenario::Scenario;
use koalesce_sim::single_cluster::{self, QueuePolicy};
use koalesce_sim::swf;

#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Simulate a scenario (sites, network, workload, policy) on virtual time, or one cluster
    /// under FCFS/EASY with `--trace`.
    ///
    /// Scenario mode writes DIR/jobs.csv (job_id, name, state, priority, submit, placed,
    /// claimed, start, end, ftt_ms, components, size, sites, placement_tries, claiming_tries,
    /// placement_ms, pgt_ms, pwt_ms, twt_ms, error_resubmissions, preemptions, start_delay_ms),
    /// utilization.csv, utilization.svg and summary.txt (with --html also report.html), and
    /// prints the summary. Single-cluster
    /// mode writes only DIR/jobs.csv (job_id, submit, start, end, procs, wait, runtime; seconds
    /// as in the trace).
    Sim(SimArgs),
}

#[derive(Debug, Args)]
pub struct SimArgs {
    /// Scenario file (TOML); see scenarios/das2-w30.toml.
    #[arg(required_unless_present = "trace", conflicts_with = "trace")]
    scenario: Option<PathBuf>,
    /// Random seed (default: the scenario's `seed`).
    #[arg(long)]
    seed: Option<u64>,
    /// Placement policy: wf, cf, cm or fcm (scenario mode); fcfs or easy (with --trace).
    #[arg(long)]
    policy: Option<String>,
    /// Output directory.
    #[arg(long, default_value = "out")]
    out: PathBuf,
    /// Single-cluster mode: an SWF trace (plain or .gz).
    #[arg(long, requires = "procs")]
    trace: Option<PathBuf>,
    /// Single-cluster mode: processors of the cluster.
    #[arg(long)]
    procs: Option<u64>,
    /// Also write DIR/report.html: one self-contained page (charts and stylesheet inline, works
    /// offline) with utilization, queue lengths, Gantt charts of the jobs and the machine
    /// (the first 200 jobs), the longest waits' timelines, the bandwidth forecast and the
    /// summary tables.
    #[arg(long, conflicts_with = "trace")]
    html: bool,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

impl SimCommand {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            SimCommand::Sim(a) if a.trace.is_some() => a.run_single(),
            SimCommand::Sim(a) => a.run_scenario(),
        }
    }
}

fn bar(len: u64, quiet: bool, what: &str) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(len);
    b.set_style(
        ProgressStyle::with_template(&format!("{what} [{{bar:40}}] {{pos}}/{{len}} {{msg}}"))
            .expect("valid template")
            .progress_chars("=> "),
    );
    b
}

impl SimArgs {
    fn run_scenario(self) -> anyhow::Result<ExitCode> {
        let path = self.scenario.expect("clap requires it");
        let mut scenario = Scenario::load(&path)?;
        if let Some(p) = &self.policy {
            scenario.scheduler.default_policy = p.parse::<PolicyKind>().map_err(|e| anyhow::anyhow!("--policy: {e}"))?;
        }
        let seed = self.seed.unwrap_or(scenario.seed);
        let sim = engine::Simulation::new(&scenario, seed)?;
        let progress = bar(sim.total_jobs() as u64, self.quiet, "jobs");
        let result = sim.run(&mut |p| {
            progress.set_length(p.total_jobs as u64);
            progress.set_position(p.finished_jobs as u64);
            progress.set_message(format!("t = {:.0} min", p.now_ms as f64 / 60_000.0));
        });
        progress.finish_and_clear();
        let report = metrics::write_all(&self.out, &result).with_context(|| format!("writing results to {}", self.out.display()))?;
        println!("{report}");
        for r in result.rejected.iter().take(5) {
            eprintln!("rejected at submission: {r}");
        }
        if self.html {
            let path = self.out.join("report.html");
            std::fs::write(&path, koalesce_sim::html::run_report(&result, &report))
                .with_context(|| format!("writing {}", path.display()))?;
            println!("report in {}", path.display());
        }
        println!("results in {}", self.out.display());
        Ok(ExitCode::SUCCESS)
    }

    fn run_single(self) -> anyhow::Result<ExitCode> {
        let trace_path = self.trace.expect("checked");
        let procs = self.procs.expect("clap requires it");
        if procs == 0 {
            bail!("--procs: must be positive");
        }
        let policy: QueuePolicy = self
            .policy
            .as_deref()
            .unwrap_or("easy")
            .parse()
            .map_err(|e| anyhow::anyhow!("--policy: {e}"))?;
        let trace = swf::read_swf(&trace_path)?;
        let progress = bar(trace.records.len() as u64, self.quiet, "jobs");
        let result = single_cluster::simulate_with_progress(&trace, procs, policy, &mut |done, _total| progress.set_position(done as u64));
        progress.finish_and_clear();
        std::fs::create_dir_all(&self.out).with_context(|| format!("creating {}", self.out.display()))?;
        let csv = self.out.join("jobs.csv");
        single_cluster::write_jobs_csv(&csv, &result).with_context(|| format!("writing {}", csv.display()))?;
        println!("{result}");
        println!("wrote {}", csv.display());
        Ok(ExitCode::SUCCESS)
    }
}

#[derive(Debug, Args)]
pub struct BenchEasyArgs {
    /// SWF trace (default: ../shared/traces/HPC2N-2002-2.2-cln.swf.gz).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Processors of the cluster (HPC2N: 240).
    #[arg(long, default_value_t = 240)]
    procs: u64,
    /// fcfs or easy.
    #[arg(long, default_value = "easy")]
    policy: String,
    /// Repetitions.
    #[arg(long, default_value_t = 5)]
    repeats: usize,
}

impl BenchEasyArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let trace = self
            .trace
            .unwrap_or_else(|| PathBuf::from("../shared/traces/HPC2N-2002-2.2-cln.swf.gz"));
        let policy: QueuePolicy = self.policy.parse().map_err(|e| anyhow::anyhow!("--policy: {e}"))?;
        let report = koalesce_sim::bench::bench_single_cluster(&trace, self.procs, policy, self.repeats.max(1))?;
        println!("{report}");
        Ok(ExitCode::SUCCESS)
    }
}
