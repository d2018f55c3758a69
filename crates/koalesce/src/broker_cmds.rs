//! `koalesce bench ttd`: the core's cost per TTD placement with one advance reservation per job.

use std::process::ExitCode;

use clap::Args;
use koalesce_sim::broker_bench::{ttd_bench, TtdBenchParams};

/// 001 §5.2.1: "for jobs submitted with advance reservations, the job submission service and the
/// WSAG services can serve around 40 submitted jobs per minute".
const SEED_JOBS_PER_MIN: f64 = 40.0;

#[derive(Debug, Args)]
pub struct BenchTtdArgs {
    /// Jobs submitted (each single-component, `policy = "ttd"`, one reservation).
    #[arg(long, default_value_t = 20_000)]
    pub jobs: usize,
    /// Sites, all with advance reservations (the seed's test bed had four).
    #[arg(long, default_value_t = 4)]
    pub sites: usize,
    /// Processors per site.
    #[arg(long, default_value_t = 128)]
    pub processors: u32,
    /// Arrivals per second of virtual time.
    #[arg(long, default_value_t = 100.0)]
    pub rate: f64,
    /// Runtime of every job, ms.
    #[arg(long, default_value_t = 1_000)]
    pub runtime_ms: u64,
    /// Jobs between two queue-estimate refreshes from the sites' reservation tables.
    #[arg(long, default_value_t = 100)]
    pub refresh: usize,
    /// Repetitions; the best and the median are printed.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
}

impl BenchTtdArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        if self.jobs == 0 || self.sites == 0 || self.processors == 0 || !self.rate.is_finite() || self.rate <= 0.0 {
            anyhow::bail!("--jobs, --sites, --processors and --rate must be positive");
        }
        let params = TtdBenchParams {
            jobs: self.jobs,
            sites: self.sites,
            processors: self.processors,
            rate: self.rate,
            runtime_ms: self.runtime_ms.max(1),
            refresh: self.refresh.max(1),
        };
        let mut runs: Vec<_> = (0..self.repeat.max(1)).map(|_| ttd_bench(params)).collect();
        runs.sort_by_key(|r| r.total);
        let best = &runs[0];
        let median = &runs[runs.len() / 2];
        println!(
            "bench ttd: {} jobs (policy ttd, one reservation each) over {} sites of {} processors, {} jobs/s of virtual time, runtime {} ms",
            params.jobs, params.sites, params.processors, params.rate, params.runtime_ms
        );
        println!(
            "  placed {}, reserved {}, succeeded {} (best run)",
            best.placed, best.reserved, best.succeeded
        );
        println!(
            "  per job, core submission (ranking + reservation decision): best {:.1} µs, median {:.1} µs, worst single {:.0} µs",
            best.per_job_submit_us(),
            median.per_job_submit_us(),
            best.max_submit.as_secs_f64() * 1e6
        );
        println!(
            "  per job, whole loop (core + site tables, claim, launch, finish): best {:.1} µs, median {:.1} µs",
            best.per_job_total_us(),
            median.per_job_total_us()
        );
        let per_min = median.jobs_per_s() * 60.0;
        println!(
            "  sustained: {:.0} jobs/s = {:.0} jobs/min, {:.0}x the seed's {} jobs/min with one reservation per job (goal: 100x)",
            median.jobs_per_s(),
            per_min,
            per_min / SEED_JOBS_PER_MIN,
            SEED_JOBS_PER_MIN
        );
        Ok(ExitCode::SUCCESS)
    }
}
