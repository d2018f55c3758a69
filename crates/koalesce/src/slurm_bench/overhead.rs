//! `koalesce bench slurm-overhead`: single-component jobs on one cluster through koalesce and
//! straight with `sbatch`, alternating in one run: submit-to-start latency and burst
//! throughput (the `--queued` part is in [`super::queued`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use serde_json::{json, Value};

use super::measure::{bar, fmt_summary, launch_steps, load_average, now_ns, printed_clocks, summary};
use super::queued::queued;
use super::{Bed, Grid};

/// Arguments of `koalesce bench slurm-overhead`.
#[derive(Debug, Args)]
pub struct BenchSlurmOverheadArgs {
    /// Sequential single-component jobs per way (koalesce and sbatch alternate).
    #[arg(long, default_value_t = 20)]
    pub jobs: usize,
    /// Jobs per way in the throughput burst (submitted as fast as possible).
    #[arg(long, default_value_t = 100)]
    pub burst: usize,
    /// Also submit this many jobs at once through koalesce over all clusters and report the
    /// controllers' load (0: skip).
    #[arg(long, default_value_t = 0)]
    pub queued: usize,
    /// Use the running test bed in DIR instead of a fresh one.
    #[arg(long, value_name = "DIR")]
    pub bed: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// A job of one processor on `site` that prints its start clock.
pub(super) fn clock_job(name: &str, site: Option<&str>) -> String {
    let mut t = format!(
        "name = \"{name}\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"date +%s%N\"]\nruntime_estimate = \"1m\"\npriority = \"high\"\n\n[[components]]\nprocessors = 1\n"
    );
    if let Some(s) = site {
        t.push_str(&format!("site = \"{s}\"\n"));
    }
    t
}

/// Straight Slurm: `sbatch` of a script that writes its start clock into `out`.
pub(super) struct Direct {
    client: koalesce_server::slurm::SlurmClient,
    partition: String,
    dir: PathBuf,
    n: usize,
}

impl Direct {
    /// Submits one job; returns the file its start clock will be in.
    fn submit(&mut self) -> anyhow::Result<PathBuf> {
        self.n += 1;
        let out = self.dir.join(format!("d{}", self.n));
        let wrap = format!("date +%s%N > {}.tmp && mv {}.tmp {}", out.display(), out.display(), out.display());
        let args = [
            "--parsable".to_string(),
            format!("--partition={}", self.partition),
            "--ntasks=1".into(),
            "--output=/dev/null".into(),
            "--time=2".into(),
            format!("--wrap={wrap}"),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.client.run_args("sbatch", &args).map_err(|e| anyhow::anyhow!("sbatch: {e}"))?;
        Ok(out)
    }
}

pub(super) fn wait_clock(path: &Path, timeout: Duration) -> anyhow::Result<i128> {
    let t0 = Instant::now();
    loop {
        if let Ok(t) = std::fs::read_to_string(path) {
            if let Ok(v) = t.trim().parse::<i128>() {
                return Ok(v);
            }
        }
        if t0.elapsed() > timeout {
            bail!("{} did not appear within {timeout:?}", path.display());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

impl BenchSlurmOverheadArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        anyhow::ensure!(self.jobs >= 1 && self.burst >= 1, "--jobs and --burst must be at least 1");
        let bed = Bed::get(self.bed.as_deref(), 3, 0)?;
        let clusters = bed.bed.clusters();
        let site = clusters[0].clone();
        let grid = Grid::start(&bed)?;
        let scratch = tempfile::Builder::new().prefix("kzsb").tempdir().context("scratch directory")?;
        let mut direct = Direct {
            client: bed.bed.client(&site)?,
            partition: bed.bed.spec().partition.clone(),
            dir: scratch.path().to_path_buf(),
            n: 0,
        };
        let timeout = Duration::from_secs(120);

        // Latency, in pairs: a koalesce job and a direct sbatch submitted at the same moment,
        // so that both wait for the same scheduling tick of the controller (it allocates on
        // its own ~1 s tick, whose phase decides most of a single job's latency: jobs
        // submitted one after the other would each meet the tick at another phase). The pairs
        // start at phases spread over a second, so the figures cover the whole tick.
        let (mut lat_k, mut lat_d, mut lat_diff) = (Vec::new(), Vec::new(), Vec::new());
        // koalesce's path, step by step: submit → sbatch (API, durable submission, placement,
        // launch intent), sbatch → check-in (Slurm: allocation, launch, batch script, the
        // supervisor's exec), set-up, held → go seen (the daemon's barrier), go seen → program.
        let mut steps: [Vec<f64>; 5] = Default::default();
        let pb = bar(self.jobs as u64, "pairs of jobs");
        for i in 0..self.jobs {
            std::thread::sleep(Duration::from_millis((i as u64 * 379) % 1000));
            let (direct_lat, koalesce) = std::thread::scope(|scope| {
                let d = scope.spawn(|| -> anyhow::Result<f64> {
                    let t = now_ns();
                    let out = direct.submit()?;
                    Ok((wait_clock(&out, timeout)? - t) as f64 / 1e6)
                });
                let k = (|| -> anyhow::Result<(i128, i128, Value)> {
                    let t = now_ns();
                    let id = grid.client.submit(&clock_job(&format!("lat-{i}"), Some(&site)))?;
                    let j = grid.wait_end(id, timeout)?;
                    anyhow::ensure!(j["state"] == "succeeded", "job {id}: {j}");
                    Ok((t, printed_clocks(&j)?[0], j))
                })();
                (d.join().unwrap_or_else(|_| Err(anyhow::anyhow!("the sbatch thread panicked"))), k)
            });
            let direct_lat = direct_lat?;
            lat_d.push(direct_lat);
            let (t, clock, j) = koalesce?;
            lat_k.push((clock - t) as f64 / 1e6);
            lat_diff.push((clock - t) as f64 / 1e6 - direct_lat);
            if let Some(x) = launch_steps(&j).ok().and_then(|v| v.first().copied()) {
                let t_ms = (t / 1_000_000) as f64;
                let marks = [
                    t_ms,
                    x.script as f64,
                    x.checkin as f64,
                    x.held as f64,
                    x.go_seen as f64,
                    (clock / 1_000_000) as f64,
                ];
                for (k, w) in marks.windows(2).enumerate() {
                    steps[k].push(w[1] - w[0]);
                }
            }
            pb.inc(1);
        }
        pb.finish_and_clear();

        // Throughput: a burst each way, one after the other.
        let t = now_ns();
        let t0 = Instant::now();
        let outs: Vec<PathBuf> = (0..self.burst).map(|_| direct.submit()).collect::<anyhow::Result<_>>()?;
        let submit_d = t0.elapsed();
        let last_d = outs
            .iter()
            .map(|o| wait_clock(o, timeout))
            .collect::<anyhow::Result<Vec<_>>>()?
            .into_iter()
            .max()
            .unwrap_or(t);
        let thr_d = self.burst as f64 / ((last_d - t) as f64 / 1e9);
        let t = now_ns();
        let t0 = Instant::now();
        let ids: Vec<u64> = (0..self.burst)
            .map(|i| grid.client.submit(&clock_job(&format!("burst-{i}"), Some(&site))))
            .collect::<anyhow::Result<_>>()?;
        let submit_k = t0.elapsed();
        let mut last_k = t;
        for id in &ids {
            let j = grid.wait_end(*id, timeout)?;
            anyhow::ensure!(j["state"] == "succeeded", "job {id}: {j}");
            last_k = last_k.max(printed_clocks(&j)?[0]);
        }
        let thr_k = self.burst as f64 / ((last_k - t) as f64 / 1e9);

        let lat_k_s = summary(&lat_k);
        let lat_d_s = summary(&lat_d);
        let ratio =
            |a: &Value, b: &Value| (a["p50"].as_f64().unwrap_or(f64::NAN) / b["p50"].as_f64().unwrap_or(f64::NAN) * 100.0).round() / 100.0;
        let mut out = json!({
            "benchmark": "slurm-overhead",
            "cluster": site,
            "latency_ms": {
                "koalesce": lat_k_s,
                "sbatch": lat_d_s,
                "ratio_p50": ratio(&lat_k_s, &lat_d_s),
                // koalesce's latency minus its pair's (same scheduling tick, mostly): what
                // koalesce adds, without the tick's phase.
                "koalesce_minus_sbatch_per_pair": summary(&lat_diff),
            },
            "koalesce_steps_ms": {
                "submit_to_sbatch": summary(&steps[0]),
                "sbatch_to_checkin": summary(&steps[1]),
                "checkin_to_held": summary(&steps[2]),
                "held_to_go_seen": summary(&steps[3]),
                "go_seen_to_program": summary(&steps[4]),
            },
            "throughput_jobs_per_s": {
                "burst": self.burst,
                "koalesce": (thr_k * 10.0).round() / 10.0,
                "sbatch": (thr_d * 10.0).round() / 10.0,
                "ratio": (thr_k / thr_d * 100.0).round() / 100.0,
                "submit_s": {"koalesce": submit_k.as_secs_f64(), "sbatch": submit_d.as_secs_f64()},
            },
            "target_latency_ratio": 1.2,
            "load_average": load_average(),
        });
        if self.queued > 0 {
            out["queued"] = queued(&bed, &grid, self.queued)?;
        }
        if self.json {
            println!("{}", serde_json::to_string_pretty(&out)?);
        } else {
            println!("single-component jobs on {site}, koalesce vs sbatch in one run:");
            println!("  submit to start, koalesce  {}", fmt_summary(&out["latency_ms"]["koalesce"]));
            println!("  submit to start, sbatch    {}", fmt_summary(&out["latency_ms"]["sbatch"]));
            println!("  ratio of p50               {}", out["latency_ms"]["ratio_p50"]);
            println!(
                "  koalesce − sbatch per pair {}",
                fmt_summary(&out["latency_ms"]["koalesce_minus_sbatch_per_pair"])
            );
            for k in [
                "submit_to_sbatch",
                "sbatch_to_checkin",
                "checkin_to_held",
                "held_to_go_seen",
                "go_seen_to_program",
            ] {
                println!("    koalesce {k:<20}  {}", fmt_summary(&out["koalesce_steps_ms"][k]));
            }
            let t = &out["throughput_jobs_per_s"];
            println!(
                "  throughput ({} jobs)      koalesce {} jobs/s, sbatch {} jobs/s, ratio {}",
                self.burst, t["koalesce"], t["sbatch"], t["ratio"]
            );
            if let Some(q) = out.get("queued") {
                println!(
                    "  {} queued jobs over all clusters: {}",
                    self.queued,
                    serde_json::to_string_pretty(q)?
                );
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_jobs_are_valid() {
        let v: toml::Value = toml::from_str(&clock_job("x", Some("alpha"))).unwrap();
        assert_eq!(v["components"][0]["site"].as_str(), Some("alpha"));
    }
}
