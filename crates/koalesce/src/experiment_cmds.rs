//! `koalesce experiment …`: reproductions of published experiments in the simulator.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use koalesce_sim::experiments::koala::{self, Exp, Options};

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
    /// koalesce), DIR/runs.csv (one line per run) and the SVG plots.
    Koala(KoalaArgs),
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
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

impl ExperimentCommand {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            ExperimentCommand::Experiment {
                which: ExperimentWhich::Koala(a),
            } => a.run(),
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
        let bar = if self.quiet {
            ProgressBar::hidden()
        } else {
            ProgressBar::new(total as u64)
        };
        bar.set_style(
            ProgressStyle::with_template("runs [{bar:40}] {pos}/{len} {elapsed_precise} {msg}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        let mut pool = rayon::ThreadPoolBuilder::new();
        if let Some(n) = self.threads {
            if n == 0 {
                anyhow::bail!("--threads: at least 1 (got 0)");
            }
            pool = pool.num_threads(n);
        }
        let pool = pool.build().context("starting the worker threads")?;
        let outcome = pool.install(|| {
            koala::run(&exps, &opts, &|done, _, label| {
                bar.set_position(done as u64);
                bar.set_message(label.to_string());
            })
        });
        bar.finish_and_clear();
        let files = koala::write_report(&outcome, &self.out).with_context(|| format!("writing results to {}", self.out.display()))?;
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
