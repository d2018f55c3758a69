//! `koalesce experiment …`: reproductions of published experiments in the simulator.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use koalesce_sim::experiments::koala::{self, Exp, Options, Verdict};

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
    /// workloads, and sensitivity studies (network, placement on submission, background).
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
    #[arg(long, default_value_t = 5)]
    seeds: usize,
    /// A quarter of the seeds' job counts (a fast, noisier run).
    #[arg(long)]
    quick: bool,
    /// Only these experiments (comma-separated): stable, high-background, spread, unreliable,
    /// runners, sensitivity. Default: all.
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
        let outcome = koala::run(&exps, &opts, &|done, _, label| {
            bar.set_position(done as u64);
            bar.set_message(label.to_string());
        });
        bar.finish_and_clear();
        let files = koala::write_report(&outcome, &self.out).with_context(|| format!("writing results to {}", self.out.display()))?;
        let checks = koala::checks(&outcome);
        let count = |v: Verdict| checks.iter().filter(|c| c.verdict == v).count();
        println!(
            "{} runs ({} seeds{}); seed comparisons: {} yes, {} partly, {} no",
            total,
            opts.seeds.len(),
            if self.quick { ", quick" } else { "" },
            count(Verdict::Yes),
            count(Verdict::Partly),
            count(Verdict::No)
        );
        println!("wrote {} files; tables in {}", files.len(), self.out.join("koala.md").display());
        Ok(ExitCode::SUCCESS)
    }
}
