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
        // Ctrl-C (or SIGTERM) from here on tears the bed down instead of leaving it running.
        interrupt::tear_down_on_signal(tmp.path());
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

impl Bed {
    /// Stops process `pid` (a server driving the bed) before the bed is torn down on Ctrl-C.
    pub fn stop_on_interrupt(&self, pid: Option<u32>) {
        if let (true, Some(pid)) = (self.owned, pid) {
            interrupt::stop_first(pid);
        }
    }
}

/// Tearing a fresh bed down when the command is interrupted (SIGINT, SIGTERM, SIGHUP): the
/// handler only writes a byte to a pipe; a thread waiting on the pipe stops the registered
/// processes (the server), tears the bed down, deletes its directory and exits with 130.
mod interrupt {
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicI32, Ordering};
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    static PIPE: AtomicI32 = AtomicI32::new(-1);
    static FIRST: Mutex<Vec<u32>> = Mutex::new(Vec::new());

    extern "C" fn on_signal(_: nix::libc::c_int) {
        let fd = PIPE.load(Ordering::SeqCst);
        if fd >= 0 {
            // SAFETY: write(2) is async-signal-safe; the descriptor stays open for the
            // process's life.
            unsafe { nix::libc::write(fd, b"x".as_ptr().cast(), 1) };
        }
    }

    /// Processes to SIGTERM (and wait for, 10 s at most) before the bed goes down.
    pub fn stop_first(pid: u32) {
        FIRST.lock().unwrap_or_else(|p| p.into_inner()).push(pid);
    }

    /// Installs the handlers for the bed under `root` (its temporary directory).
    pub fn tear_down_on_signal(root: &Path) {
        use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
        let Ok((read, write)) = nix::unistd::pipe() else { return };
        PIPE.store(write.as_raw_fd(), Ordering::SeqCst);
        std::mem::forget(write);
        let root: PathBuf = root.to_path_buf();
        std::thread::spawn(move || watch(read, root));
        let action = SigAction::new(SigHandler::Handler(on_signal), SaFlags::SA_RESTART, SigSet::empty());
        for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
            // SAFETY: the handler only writes to a pipe (async-signal-safe).
            let _ = unsafe { sigaction(sig, &action) };
        }
    }

    fn watch(read: OwnedFd, root: PathBuf) {
        let mut b = [0u8; 1];
        if !matches!(nix::unistd::read(&read, &mut b), Ok(1)) {
            return;
        }
        eprintln!("\ninterrupted: stopping the server and tearing the test bed down");
        let pids: Vec<u32> = FIRST.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for &pid in &pids {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
        }
        let t0 = Instant::now();
        for &pid in &pids {
            use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
            let pid = nix::unistd::Pid::from_raw(pid as i32);
            while t0.elapsed() < Duration::from_secs(10) {
                match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) => std::thread::sleep(Duration::from_millis(25)),
                    _ => break,
                }
            }
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
        let bed = root.join("bed");
        match koalesce::testbed::TestBed::open(&bed).and_then(|b| b.down(true)) {
            Ok(_) => eprintln!("test bed torn down"),
            Err(e) => eprintln!(
                "tearing the test bed down failed: {e:#} (run `koalesce testbed down --dir {}`)",
                bed.display()
            ),
        }
        let _ = std::fs::remove_dir_all(&root);
        std::process::exit(130);
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
        bed.stop_on_interrupt(server.pid());
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

/// When a component passed each step of its launch, in ms since the epoch, from the records
/// in its directory (the parent of its stdout): the batch script written (just before
/// `sbatch`), the supervisor checked in (`supervisor.json`), set up and held (`held`; a
/// component released before it checked in does not hold: then when it saw `go`), `go`
/// staged by the daemon, `go` seen by the supervisor and the program started (`running.json`),
/// and whether its start was real-time.
#[derive(Debug, Clone, Copy)]
struct Steps {
    script: u64,
    checkin: u64,
    held: u64,
    go: u64,
    go_seen: u64,
    realtime: bool,
}

fn launch_steps(job: &Value) -> anyhow::Result<Vec<Steps>> {
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
            let script = std::fs::metadata(dir.join(koalesce_server::slurm::script::SCRIPT_FILE))
                .and_then(|m| m.modified())
                .map(|t| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64))
                .unwrap_or(0);
            let go_seen = read("running.json", "go_seen_ms")?;
            let realtime = std::fs::read_to_string(dir.join("running.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .and_then(|v| v["realtime"].as_bool())
                .unwrap_or(false);
            Ok(Steps {
                script,
                checkin: read("supervisor.json", "started_ms")?,
                // `held` is a hard link of supervisor.json; the supervisor records the moment in
                // running.json (0 when `go` was there before it checked in).
                held: Some(read("running.json", "held_ms")?).filter(|&t| t > 0).unwrap_or(go_seen),
                go: read("go", "go_ms")?,
                go_seen,
                realtime,
            })
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

/// The machine's load averages (1, 5, 15 min) from /proc/loadavg, as the benchmarks print them.
pub fn load_average() -> Value {
    let t = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let v: Vec<f64> = t.split_whitespace().take(3).filter_map(|x| x.parse().ok()).collect();
    json!(v)
}

/// `sdiag` counters of one controller.
#[derive(Debug, Clone, Default)]
struct Sdiag {
    rpcs: u64,
    threads: u64,
    agent_queue: u64,
    /// RPCs served, by message type.
    by_type: std::collections::BTreeMap<String, u64>,
    /// The main scheduler's longest cycle (µs).
    max_cycle_us: u64,
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
                let c = c.parse::<u64>().unwrap_or(0);
                s.rpcs += c;
                if let Some(name) = l.split_whitespace().next() {
                    *s.by_type.entry(name.to_string()).or_default() += c;
                }
            }
        } else if let Some(v) = l.strip_prefix("Max cycle:") {
            // The first one is the main scheduler's (the backfill section follows).
            if s.max_cycle_us == 0 {
                s.max_cycle_us = v.trim().parse().unwrap_or(0);
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

/// `n` jobs of one processor submitted at once, placed by koalesce over every cluster:
/// time until all ended, the most jobs koalesce had in Slurm at once (sampled), and the
/// controllers' load from `sdiag`: RPCs served during the run by message type, koalesce's
/// share of them (the run's RPCs minus this benchmark's own sampling: its `sdiag` and `squeue`
/// calls, whose cost per call is measured first) and its rate, the peak server threads, agent
/// queue and main scheduler cycle.
fn queued(bed: &Bed, grid: &Grid, n: usize) -> anyhow::Result<Value> {
    use std::collections::BTreeMap;
    let clients: Vec<_> = bed
        .bed
        .clusters()
        .iter()
        .map(|c| bed.bed.client(c))
        .collect::<anyhow::Result<_>>()?;
    // What one sample (an squeue) costs a controller, by message type (sdiag's own requests
    // are left out below: koalesce never calls sdiag).
    let sample_cost: BTreeMap<String, u64> = {
        let c = &clients[0];
        let a = sdiag(c).unwrap_or_default();
        let _ = c.run_args("squeue", &["-h", "-o", "%i"]);
        let b = sdiag(c).unwrap_or_default();
        diff(&b.by_type, &a.by_type).into_iter().filter(|(k, _)| k != STATS_RPC).collect()
    };
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
    let (mut peak_threads, mut peak_agent, mut peak_in_slurm, mut peak_cycle) = (0u64, 0u64, 0usize, 0u64);
    let mut samples = 0u64;
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
                peak_cycle = peak_cycle.max(s.max_cycle_us);
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
    let mut by_type: BTreeMap<String, u64> = BTreeMap::new();
    let mut per_cluster = serde_json::Map::new();
    let mut koalesce_total = 0u64;
    let mut koalesce_by_type: BTreeMap<String, u64> = BTreeMap::new();
    for ((a, b), name) in after.iter().zip(&before).zip(bed.bed.clusters()) {
        let d = diff(&a.by_type, &b.by_type);
        let k = koalesce_rpcs(&d, samples, &sample_cost);
        let kn: u64 = k.values().sum();
        koalesce_total += kn;
        per_cluster.insert(
            name,
            json!({"rpcs": d.values().sum::<u64>(), "koalesce_rpcs": kn, "koalesce_rpcs_per_s": rate(kn, elapsed)}),
        );
        for (t, c) in d {
            *by_type.entry(t).or_default() += c;
        }
        for (t, c) in k {
            *koalesce_by_type.entry(t).or_default() += c;
        }
    }
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
        "controller_rpcs_per_s": rate(rpcs, elapsed),
        "controller_rpcs_by_type": by_type,
        "koalesce_rpcs": koalesce_total,
        "koalesce_rpcs_per_s": rate(koalesce_total, elapsed),
        "koalesce_rpcs_by_type": koalesce_by_type,
        "node_daemon_rpcs": by_type.iter().filter(|(t, _)| node_rpc(t)).map(|(_, c)| c).sum::<u64>(),
        "per_cluster": per_cluster,
        "sampler": {"samples": samples, "rpcs_per_squeue": sample_cost},
        "peak_jobs_in_slurm": peak_in_slurm,
        "peak_server_threads": peak_threads,
        "peak_agent_queue": peak_agent,
        "peak_main_sched_cycle_us": peak_cycle,
    }))
}

/// sdiag's own message type (only this benchmark asks for it).
const STATS_RPC: &str = "REQUEST_STATS_INFO";

fn rate(n: u64, d: Duration) -> f64 {
    ((n as f64 / d.as_secs_f64().max(1e-9)) * 10.0).round() / 10.0
}

/// Counts of `a` minus those of `b`, by key (missing: 0), without the zeros.
fn diff(
    a: &std::collections::BTreeMap<String, u64>,
    b: &std::collections::BTreeMap<String, u64>,
) -> std::collections::BTreeMap<String, u64> {
    a.iter()
        .map(|(k, v)| (k.clone(), v.saturating_sub(b.get(k).copied().unwrap_or(0))))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// Whether message type `t` comes from the clusters' node daemons (slurmd, slurmstepd: a batch
/// script's or a step's end, epilogs, registrations), not from a client command.
fn node_rpc(t: &str) -> bool {
    t.starts_with("MESSAGE_")
        || t.starts_with("REQUEST_COMPLETE_")
        || t.starts_with("REQUEST_STEP_COMPLETE")
        || t.starts_with("REQUEST_NODE_REGISTRATION")
        || t.starts_with("RESPONSE_")
}

/// koalesce's RPCs among `run` (by message type): its Slurm commands' requests, without the
/// node daemons' messages, sdiag's and `samples` × `per_sample` (the benchmark's own squeue
/// calls).
fn koalesce_rpcs(
    run: &std::collections::BTreeMap<String, u64>,
    samples: u64,
    per_sample: &std::collections::BTreeMap<String, u64>,
) -> std::collections::BTreeMap<String, u64> {
    run.iter()
        .filter(|(k, _)| k.as_str() != STATS_RPC && !node_rpc(k))
        .map(|(k, v)| (k.clone(), v.saturating_sub(samples * per_sample.get(k).copied().unwrap_or(0))))
        .filter(|(_, v)| *v > 0)
        .collect()
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
        assert_eq!(s.by_type.get("REQUEST_JOB_INFO"), Some(&10));
        assert_eq!(s.by_type.get("REQUEST_SUBMIT_BATCH_JOB"), Some(&5));
        assert_eq!(s.by_type.len(), 2, "users are not message types: {:?}", s.by_type);
        let koalesce = koalesce_rpcs(&s.by_type, 4, &[("REQUEST_JOB_INFO".into(), 1)].into_iter().collect());
        assert_eq!(
            koalesce.get("REQUEST_JOB_INFO"),
            Some(&6),
            "the sampler's squeue calls are not koalesce's"
        );
        assert_eq!(koalesce.get("REQUEST_SUBMIT_BATCH_JOB"), Some(&5));
        let node: std::collections::BTreeMap<String, u64> = [
            ("REQUEST_COMPLETE_BATCH_SCRIPT".to_string(), 7),
            ("MESSAGE_EPILOG_COMPLETE".to_string(), 2),
        ]
        .into_iter()
        .collect();
        assert!(
            koalesce_rpcs(&node, 0, &Default::default()).is_empty(),
            "slurmd's messages are not koalesce's"
        );
    }

    #[test]
    fn clock_jobs_are_valid() {
        let v: toml::Value = toml::from_str(&clock_job("x", Some("alpha"))).unwrap();
        assert_eq!(v["components"][0]["site"].as_str(), Some("alpha"));
    }
}
