//! `koalesce bench costart`: coupled jobs with one component on each of 3 clusters; the start
//! skew between a job's components and its submit-to-start time (see the parent module).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::json;

use super::measure::{bar, fmt_summary, launch_steps, load_average, now_ns, printed_clocks, summary};
use super::{Bed, Grid};

/// Arguments of `koalesce bench costart`.
#[derive(Debug, Args)]
pub struct BenchCostartArgs {
    /// Coupled jobs to run (one after the other).
    #[arg(long, default_value_t = 30)]
    pub jobs: usize,
    /// Processors of each component (one component per cluster).
    #[arg(long, default_value_t = 16)]
    pub processors: u32,
    /// Start controller i this many ms after controller i−1, so that their scheduling ticks are
    /// out of phase (a fresh bed only).
    #[arg(long, default_value_t = 0)]
    pub tick_offset_ms: u64,
    /// Use the running test bed in DIR (`koalesce testbed up --dir DIR`) instead of a fresh one.
    #[arg(long, value_name = "DIR")]
    pub bed: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

impl BenchCostartArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        anyhow::ensure!(self.jobs >= 1, "--jobs must be at least 1");
        let bed = Bed::get(self.bed.as_deref(), 3, self.tick_offset_ms)?;
        let clusters = bed.bed.clusters();
        anyhow::ensure!(clusters.len() >= 2, "the bed needs at least 2 clusters");
        let clusters: Vec<String> = clusters.into_iter().take(3).collect();
        let grid = Grid::start(&bed)?;
        let mut job = "name = \"costart\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"date +%s%N\"]\nrunner = \"coupled\"\nruntime_estimate = \"1m\"\n".to_string();
        for c in &clusters {
            job.push_str(&format!("\n[[components]]\nprocessors = {}\nsite = \"{c}\"\n", self.processors));
        }
        let (mut skews, mut latencies) = (Vec::new(), Vec::new());
        // Where the time goes: submit → last check-in (allocation), check-in → held (the
        // supervisor's set-up), last held → go (the daemon's barrier), go seen → program start
        // (the exec), and the spread of the moments the supervisors saw `go`.
        let (mut to_checkin, mut setup, mut to_go, mut go_to_start, mut go_spread) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut failed = 0;
        let (mut realtime_starts, mut starts) = (0usize, 0usize);
        let mut steps_warned = false;
        let pb = bar(self.jobs as u64, "coupled jobs");
        for _ in 0..self.jobs {
            let t_submit = now_ns();
            let id = grid.client.submit(&job)?;
            let j = grid.wait_end(id, Duration::from_secs(120))?;
            pb.inc(1);
            if j["state"] != "succeeded" {
                failed += 1;
                eprintln!("job {id} {}: {}", j["state"], j["failure"]);
                continue;
            }
            let clocks = printed_clocks(&j)?;
            let (lo, hi) = (*clocks.iter().min().unwrap(), *clocks.iter().max().unwrap());
            skews.push((hi - lo) as f64 / 1e6);
            latencies.push((lo - t_submit) as f64 / 1e6);
            let steps = launch_steps(&j);
            if let Err(e) = &steps {
                if !steps_warned {
                    eprintln!("no step breakdown for job {id}: {e:#}");
                    steps_warned = true;
                }
            }
            if let Ok(b) = steps {
                let last_in = b.iter().map(|x| x.checkin).max().unwrap_or(0) as f64;
                let last_held = b.iter().map(|x| x.held).max().unwrap_or(0) as f64;
                let go = b.iter().map(|x| x.go).min().unwrap_or(0) as f64;
                to_checkin.push(last_in - (t_submit / 1_000_000) as f64);
                to_go.push(go - last_held);
                let seen = b.iter().map(|x| x.go_seen);
                go_spread.push((seen.clone().max().unwrap_or(0) - seen.min().unwrap_or(0)) as f64);
                for (c, x) in clocks.iter().zip(&b) {
                    starts += 1;
                    realtime_starts += usize::from(x.realtime);
                    setup.push(x.held as f64 - x.checkin as f64);
                    go_to_start.push((*c / 1_000_000) as f64 - x.go_seen as f64);
                }
            }
        }
        pb.finish_and_clear();
        let out = json!({
            "benchmark": "costart",
            "clusters": clusters,
            "processors_per_component": self.processors,
            "tick_offset_ms": self.tick_offset_ms,
            "jobs": self.jobs,
            "failed": failed,
            "start_skew_ms": summary(&skews),
            "submit_to_start_ms": summary(&latencies),
            "breakdown_ms": {
                "submit_to_last_checkin": summary(&to_checkin),
                "checkin_to_held": summary(&setup),
                "last_held_to_go": summary(&to_go),
                "go_seen_spread": summary(&go_spread),
                "go_seen_to_program_start": summary(&go_to_start),
            },
            "target_skew_p99_ms": 50,
            "realtime_starts": {"components": starts, "realtime": realtime_starts},
            "load_average": load_average(),
        });
        if self.json {
            println!("{}", serde_json::to_string_pretty(&out)?);
        } else {
            println!(
                "co-start of {} coupled jobs over {} (components of {} CPUs, controllers {} ms apart):",
                self.jobs,
                clusters.join(", "),
                self.processors,
                self.tick_offset_ms
            );
            println!("  start skew        {}", fmt_summary(&out["start_skew_ms"]));
            println!("  submit to start   {}", fmt_summary(&out["submit_to_start_ms"]));
            let b = &out["breakdown_ms"];
            println!("    submit to last check-in   {}", fmt_summary(&b["submit_to_last_checkin"]));
            println!("    check-in to held (set-up) {}", fmt_summary(&b["checkin_to_held"]));
            println!("    last held to go           {}", fmt_summary(&b["last_held_to_go"]));
            println!("    spread of go seen         {}", fmt_summary(&b["go_seen_spread"]));
            println!("    go seen to program start  {}", fmt_summary(&b["go_seen_to_program_start"]));
            println!("  real-time starts  {realtime_starts} of {starts} components");
            println!("  load average      {}", out["load_average"]);
            println!("  failed jobs       {failed}");
        }
        Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
    }
}
