//! Slurm clusters end to end: the test bed and server that `koalesce demo --slurm`,
//! `koalesce bench costart` and `koalesce bench slurm-overhead` bring up, and the two
//! benchmarks.
//!
//! - `bench costart`: coupled jobs with one component on each of 3 clusters, submitted through
//!   a koalesce server; every program prints its own clock (`date +%s%N`) when it starts. Start
//!   skew = latest − earliest start of a job's components; submit-to-start = the client's
//!   clock before the submission to the earliest start.
//! - `bench slurm-overhead`: single-component jobs on one cluster, submitted through koalesce
//!   and straight with `sbatch`, alternating, in one run: submit-to-start latency (sequential)
//!   and throughput (a burst of jobs, submission of the first to start of the last), and
//!   optionally `--queued N` jobs over all clusters at once with the controllers' load
//!   (`sdiag`: RPCs served, server threads, agent queue).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::Args;
use koalesce::testbed::{TestBed, UpOptions};
use serde_json::{json, Value};

use crate::client_cmds::api::Client;
use crate::client_cmds::local_server::{LocalServer, LocalServerOptions};

/// A test bed for a command: a fresh one in a temporary directory, torn down (and deleted)
/// when dropped, or an existing one (`--bed DIR`), left as it is.
pub struct Bed {
    pub bed: TestBed,
    owned: bool,
    _tmp: Option<tempfile::TempDir>,
}

impl Bed {
    /// Opens the bed in `existing` (it must be up), or brings up a fresh one of `clusters`
    /// clusters × 2 nodes × 32 CPUs, controllers started `tick_offset_ms` apart.
    pub fn get(existing: Option<&Path>, clusters: u32, tick_offset_ms: u64) -> anyhow::Result<Bed> {
        if let Some(dir) = existing {
            let bed = TestBed::open(dir)?;
            if !bed.status().all_up() {
                bail!(
                    "the test bed in {} is not (fully) up: run `koalesce testbed up --dir {}` or `testbed status`",
                    dir.display(),
                    dir.display()
                );
            }
            return Ok(Bed {
                bed,
                owned: false,
                _tmp: None,
            });
        }
        // Short path: munge's and slurmstepd's Unix sockets live under it.
        let tmp = tempfile::Builder::new()
            .prefix("kzbed")
            .tempdir_in("/tmp")
            .context("creating the test bed's directory")?;
        let mut o = UpOptions::new(tmp.path().join("bed"));
        o.clusters = clusters;
        o.tick_offset_ms = tick_offset_ms;
        let t0 = Instant::now();
        let (bed, _) = TestBed::up(&o)?;
        eprintln!(
            "test bed: {clusters} Slurm clusters x 2 nodes x 32 CPUs up in {:.1} s ({}; torn down at the end)",
            t0.elapsed().as_secs_f64(),
            bed.dir().display()
        );
        Ok(Bed {
            bed,
            owned: true,
            _tmp: Some(tmp),
        })
    }

    /// The bed's `server.toml` (its `[[sites]]`), to append to a server config.
    pub fn sites_toml(&self) -> anyhow::Result<String> {
        let p = self.bed.server_toml();
        std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        if self.owned {
            match self.bed.down(true) {
                Ok(_) => eprintln!("test bed torn down"),
                Err(e) => eprintln!(
                    "tearing the test bed down failed: {e:#} (run `koalesce testbed down --dir {}`)",
                    self.bed.dir().display()
                ),
            }
        }
    }
}

/// A server config for the Slurm commands: placement at submission, fast scans, the bed's
/// sites. Jobs run as `nobody` when the server runs as root.
pub fn server_config(bed: &Bed) -> anyhow::Result<String> {
    Ok(format!(
        "# koalesce server config written for the Slurm test bed\n\
         poll_interval_ms = 50\n\
         [users]\n\
         \"*\" = \"nobody\"\n\
         [scheduler]\n\
         place_on_submit = true\n\
         min_claim_retry_ms = 200\n\
         [scheduler.scan_interval]\n\
         kind = \"fixed\"\n\
         interval_ms = 200\n\n{}",
        bed.sites_toml()?
    ))
}

/// A koalesce server over a bed, with an admin token and a client.
pub struct Grid {
    pub server: LocalServer,
    pub client: Client,
}

impl Grid {
    pub fn start(bed: &Bed) -> anyhow::Result<Grid> {
        let prepared = LocalServer::prepare(&LocalServerOptions {
            config_toml: Some(server_config(bed)?),
            ..Default::default()
        })?;
        let token = prepared.create_token("bench", true)?;
        let server = prepared.start(Duration::from_secs(60))?;
        let client = Client::new(&server.url, Some(token), Duration::from_secs(60));
        Ok(Grid { server, client })
    }

    /// Waits until job `id` ended; returns its JSON.
    pub fn wait_end(&self, id: u64, timeout: Duration) -> anyhow::Result<Value> {
        let t0 = Instant::now();
        loop {
            let j = self.client.job_json(id)?;
            if matches!(j["state"].as_str(), Some("succeeded" | "failed" | "cancelled")) {
                return Ok(j);
            }
            if t0.elapsed() > timeout {
                bail!(
                    "job {id} did not end within {timeout:?}: {j}\nserver log:\n{}",
                    self.server.log_tail(20)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A progress bar on stderr (indicatif draws it only on a terminal).
fn bar(len: u64, what: &str) -> indicatif::ProgressBar {
    let b = indicatif::ProgressBar::new(len);
    if let Ok(style) = indicatif::ProgressStyle::with_template(&format!("{what} [{{bar:40}}] {{pos}}/{{len}} {{elapsed}}")) {
        b.set_style(style.progress_chars("=> "));
    }
    b
}

/// Nanoseconds since the epoch (the clock the programs' `date +%s%N` read).
pub fn now_ns() -> i128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128)
}

/// The clock readings a succeeded job's components printed (one per component, in order).
fn printed_clocks(job: &Value) -> anyhow::Result<Vec<i128>> {
    let comps = job["components"].as_array().context("job without components")?;
    comps
        .iter()
        .map(|c| {
            let path = c["stdout"].as_str().context("component without stdout")?;
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
            text.trim()
                .parse::<i128>()
                .with_context(|| format!("{path}: not a clock reading: {text:?}"))
        })
        .collect()
}

/// Per component of a job: (supervisor checked in, `go` written), in ms since the epoch, from
/// the records in the component's directory (the parent of its stdout).
fn barrier_times(job: &Value) -> anyhow::Result<Vec<(u64, u64)>> {
    let comps = job["components"].as_array().context("job without components")?;
    comps
        .iter()
        .map(|c| {
            let dir = Path::new(c["stdout"].as_str().context("component without stdout")?)
                .parent()
                .context("stdout without a directory")?;
            let read = |f: &str, key: &str| -> anyhow::Result<u64> {
                let p = dir.join(f);
                let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?)?;
                v[key].as_u64().with_context(|| format!("{}: no {key}", p.display()))
            };
            Ok((read("supervisor.json", "started_ms")?, read("go", "go_ms")?))
        })
        .collect()
}

/// p50 / p99 / max (nearest rank) of values in ms, as JSON.
pub fn summary(values: &[f64]) -> Value {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let pct = |p: f64| -> f64 {
        if v.is_empty() {
            return f64::NAN;
        }
        let i = ((p / 100.0) * v.len() as f64).ceil() as usize;
        v[i.clamp(1, v.len()) - 1]
    };
    let r = |x: f64| (x * 10.0).round() / 10.0;
    json!({"n": v.len(), "p50": r(pct(50.0)), "p99": r(pct(99.0)), "max": r(pct(100.0))})
}

fn fmt_summary(s: &Value) -> String {
    format!("p50 {} / p99 {} / max {} ms (n = {})", s["p50"], s["p99"], s["max"], s["n"])
}

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
        // Where the time goes: submit → last check-in (allocation), last check-in → go (the
        // daemon's barrier), go → program start (the supervisor's set-up, then exec).
        let (mut to_checkin, mut to_go, mut go_to_start) = (Vec::new(), Vec::new(), Vec::new());
        let mut failed = 0;
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
            if let Ok(b) = barrier_times(&j) {
                let last_in = b.iter().map(|x| x.0).max().unwrap_or(0) as f64;
                let go = b.iter().map(|x| x.1).min().unwrap_or(0) as f64;
                to_checkin.push(last_in - (t_submit / 1_000_000) as f64);
                to_go.push(go - last_in);
                for (c, (_, g)) in clocks.iter().zip(&b) {
                    go_to_start.push((*c / 1_000_000) as f64 - *g as f64);
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
                "last_checkin_to_go": summary(&to_go),
                "go_to_program_start": summary(&go_to_start),
            },
            "target_skew_p99_ms": 50,
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
            println!("    last check-in to go       {}", fmt_summary(&b["last_checkin_to_go"]));
            println!("    go to program start       {}", fmt_summary(&b["go_to_program_start"]));
            println!("  failed jobs       {failed}");
        }
        Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
    }
}

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
fn clock_job(name: &str, site: Option<&str>) -> String {
    let mut t = format!(
        "name = \"{name}\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"date +%s%N\"]\nruntime_estimate = \"1m\"\npriority = \"high\"\n\n[[components]]\nprocessors = 1\n"
    );
    if let Some(s) = site {
        t.push_str(&format!("site = \"{s}\"\n"));
    }
    t
}

/// Straight Slurm: `sbatch` of a script that writes its start clock into `out`.
struct Direct {
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

fn wait_clock(path: &Path, timeout: Duration) -> anyhow::Result<i128> {
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

/// `sdiag` counters of one controller.
#[derive(Debug, Clone, Copy, Default)]
struct Sdiag {
    rpcs: u64,
    threads: u64,
    agent_queue: u64,
}

fn sdiag(client: &koalesce_server::slurm::SlurmClient) -> Option<Sdiag> {
    let out = client.run_args("sdiag", &[]).ok()?.stdout;
    Some(parse_sdiag(&out))
}

/// Total RPCs by message type, server threads and agent queue from `sdiag`'s output.
fn parse_sdiag(out: &str) -> Sdiag {
    let mut s = Sdiag::default();
    let mut in_types = false;
    for line in out.lines() {
        let l = line.trim();
        if let Some(v) = l.strip_prefix("Server thread count:") {
            s.threads = v.trim().parse().unwrap_or(0);
        } else if let Some(v) = l.strip_prefix("Agent queue size:") {
            s.agent_queue = v.trim().parse().unwrap_or(0);
        } else if l.starts_with("Remote Procedure Call statistics by message type") {
            in_types = true;
        } else if l.starts_with("Remote Procedure Call statistics by user") {
            in_types = false;
        } else if in_types {
            // "REQUEST_JOB_INFO ( 2003) count:10 ave_time:123 total_time:1230"
            if let Some(c) = l.split_whitespace().find_map(|w| w.strip_prefix("count:")) {
                s.rpcs += c.parse::<u64>().unwrap_or(0);
            }
        }
    }
    s
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

        // Latency, alternating.
        let (mut lat_k, mut lat_d) = (Vec::new(), Vec::new());
        let pb = bar(2 * self.jobs as u64, "sequential jobs");
        for i in 0..self.jobs {
            let t = now_ns();
            let out = direct.submit()?;
            lat_d.push((wait_clock(&out, timeout)? - t) as f64 / 1e6);
            pb.inc(1);
            let t = now_ns();
            let id = grid.client.submit(&clock_job(&format!("lat-{i}"), Some(&site)))?;
            let j = grid.wait_end(id, timeout)?;
            anyhow::ensure!(j["state"] == "succeeded", "job {id}: {j}");
            lat_k.push((printed_clocks(&j)?[0] - t) as f64 / 1e6);
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
            "latency_ms": {"koalesce": lat_k_s, "sbatch": lat_d_s, "ratio_p50": ratio(&lat_k_s, &lat_d_s)},
            "throughput_jobs_per_s": {
                "burst": self.burst,
                "koalesce": (thr_k * 10.0).round() / 10.0,
                "sbatch": (thr_d * 10.0).round() / 10.0,
                "ratio": (thr_k / thr_d * 100.0).round() / 100.0,
                "submit_s": {"koalesce": submit_k.as_secs_f64(), "sbatch": submit_d.as_secs_f64()},
            },
            "target_latency_ratio": 1.2,
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
            let t = &out["throughput_jobs_per_s"];
            println!(
                "  throughput ({} jobs)      koalesce {} jobs/s, sbatch {} jobs/s, ratio {}",
                self.burst, t["koalesce"], t["sbatch"], t["ratio"]
            );
            if let Some(q) = out.get("queued") {
                println!("  {} queued jobs over all clusters: {}", self.queued, q);
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// `n` jobs of one processor submitted at once, placed by koalesce over every cluster:
/// time until all ended, the most jobs koalesce had in Slurm at once (sampled), and the
/// controllers' load from `sdiag` (RPCs served during the run, peak server threads and agent
/// queue).
fn queued(bed: &Bed, grid: &Grid, n: usize) -> anyhow::Result<Value> {
    let clients: Vec<_> = bed
        .bed
        .clusters()
        .iter()
        .map(|c| bed.bed.client(c))
        .collect::<anyhow::Result<_>>()?;
    let before: Vec<Sdiag> = clients.iter().map(|c| sdiag(c).unwrap_or_default()).collect();
    let t0 = Instant::now();
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let job = format!(
            "name = \"q-{i}\"\nexecutable = \"/bin/true\"\nruntime_estimate = \"1m\"\npriority = \"low\"\n\n[[components]]\nprocessors = 1\n"
        );
        ids.push(grid.client.submit(&job)?);
    }
    let submitted = t0.elapsed();
    let pb = bar(n as u64, "queued jobs");
    let (mut peak_threads, mut peak_agent, mut peak_in_slurm) = (0u64, 0u64, 0usize);
    let mut samples = 0usize;
    let ended = loop {
        let list = grid.client.jobs_json(None, true)?;
        let arr = list.as_array().cloned().unwrap_or_default();
        let ended = arr
            .iter()
            .filter(|j| ids.contains(&j["id"].as_u64().unwrap_or(0)))
            .filter(|j| matches!(j["state"].as_str(), Some("succeeded" | "failed" | "cancelled")))
            .count();
        pb.set_position(ended as u64);
        for c in &clients {
            if let Some(s) = sdiag(c) {
                peak_threads = peak_threads.max(s.threads);
                peak_agent = peak_agent.max(s.agent_queue);
            }
            if let Ok(o) = c.run_args("squeue", &["-h", "-o", "%i"]) {
                peak_in_slurm = peak_in_slurm.max(o.stdout.lines().count());
            }
        }
        samples += 1;
        if ended == n {
            break ended;
        }
        if t0.elapsed() > Duration::from_secs(1800) {
            bail!("{ended}/{n} queued jobs ended after 30 minutes");
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    pb.finish_and_clear();
    let elapsed = t0.elapsed();
    let after: Vec<Sdiag> = clients.iter().map(|c| sdiag(c).unwrap_or_default()).collect();
    let rpcs: u64 = after.iter().zip(&before).map(|(a, b)| a.rpcs.saturating_sub(b.rpcs)).sum();
    let mut succeeded = 0;
    for id in &ids {
        if grid.client.job_json(*id)?["state"] == "succeeded" {
            succeeded += 1;
        }
    }
    Ok(json!({
        "jobs": n,
        "ended": ended,
        "succeeded": succeeded,
        "submit_s": (submitted.as_secs_f64() * 100.0).round() / 100.0,
        "all_ended_s": (elapsed.as_secs_f64() * 10.0).round() / 10.0,
        "jobs_per_s": ((n as f64 / elapsed.as_secs_f64()) * 10.0).round() / 10.0,
        "controller_rpcs": rpcs,
        "controller_rpcs_per_s": ((rpcs as f64 / elapsed.as_secs_f64()) * 10.0).round() / 10.0,
        "peak_jobs_in_slurm": peak_in_slurm,
        "peak_server_threads": peak_threads,
        "peak_agent_queue": peak_agent,
        "samples": samples,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = summary(&v);
        assert_eq!(
            (s["p50"].as_f64(), s["p99"].as_f64(), s["max"].as_f64()),
            (Some(50.0), Some(99.0), Some(100.0))
        );
        assert_eq!(summary(&[3.0])["p99"].as_f64(), Some(3.0));
        assert_eq!(summary(&[])["n"], 0);
    }

    #[test]
    fn sdiag_counters() {
        let out = "*******************************************************\n\
                   Server thread count:  3\n\
                   Agent queue size:     1\n\
                   Remote Procedure Call statistics by message type\n\
                   \tREQUEST_JOB_INFO                        ( 2003) count:10     ave_time:123    total_time:1230\n\
                   \tREQUEST_SUBMIT_BATCH_JOB                ( 4003) count:5      ave_time:400    total_time:2000\n\
                   \n\
                   Remote Procedure Call statistics by user\n\
                   \troot            (       0) count:15     ave_time:200    total_time:3230\n";
        let s = parse_sdiag(out);
        assert_eq!((s.rpcs, s.threads, s.agent_queue), (15, 3, 1));
    }

    #[test]
    fn clock_jobs_are_valid() {
        let v: toml::Value = toml::from_str(&clock_job("x", Some("alpha"))).unwrap();
        assert_eq!(v["components"][0]["site"].as_str(), Some("alpha"));
    }
}
