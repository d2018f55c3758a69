//! `koalesce bench submit`: durable submissions per second and acknowledgement latency.
//!
//! C client threads, each with its own keep-alive connection, submit N tiny jobs in all; the
//! server answers 201 only after the job is committed, so every acknowledged request is a
//! durable submission. Latency is measured per request from sending it to reading the answer.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;

use super::api::Client;
use super::local_server::{LocalServer, LocalServerOptions};

/// Seed 001 (§5): just over 250 jobs/min with 7 clients on GT4, the best of its services.
pub const SEED_001_JOBS_PER_MIN: f64 = 250.0;
/// Seed 001 §5.2.1: "for jobs submitted with advance reservations, the job submission service
/// and the WSAG services can serve around 40 submitted jobs per minute".
pub const SEED_001_RESERVED_JOBS_PER_MIN: f64 = 40.0;
/// Target of this benchmark with 16 clients.
pub const TARGET_JOBS_PER_SEC: f64 = 2000.0;
pub const TARGET_P99_MS: f64 = 20.0;

/// Arguments of `koalesce bench submit`.
#[derive(Debug, Args)]
pub struct BenchSubmitArgs {
    /// Concurrent client threads, each with its own connection.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Jobs to submit in all (measured; warm-up jobs come on top).
    #[arg(long, default_value_t = 10_000)]
    pub jobs: usize,
    /// Jobs submitted before measuring (connections set up, caches warm).
    #[arg(long, default_value_t = 200)]
    pub warmup: usize,
    /// Server to measure. Default: start a fresh private server (temporary data dir, jobs only
    /// queue) and stop it afterwards.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// API token for --url (a fresh server gets its own).
    #[arg(long, env = "KOALESCE_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Exit 1 unless the target is met (≥ 2,000 jobs/s and p99 ≤ 20 ms).
    #[arg(long)]
    pub check: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Placement policy of the submitted jobs. `ttd`/`tts` measure the broker's path with one
    /// advance reservation per job (001 §5.2.1): the fresh server's sites grant reservations,
    /// jobs are placed at submission and reserve one processor an hour ahead, and the
    /// benchmark also waits until every job holds its reservation.
    #[arg(long, value_parser = ["wf", "cf", "cm", "fcm", "ttd", "tts"], value_name = "POLICY")]
    pub policy: Option<String>,
    /// With `--policy ttd|tts` on a fresh server: whether the server's LRM worker hands the
    /// queued reservations to a site in one call (`on`, the default: `batch_reservations =
    /// true`), one call each (`off`), or `compare`: fresh servers with and without,
    /// alternating, `--rounds` times each, side by side in one run.
    #[arg(long, value_parser = ["on", "off", "compare"], default_value = "on", value_name = "MODE")]
    pub reservation_batching: String,
    /// Rounds of each mode for `--reservation-batching compare`.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Favour the client threads like the server's threads (a short scheduler slice, nice -10
    /// as root), as `bench e2e --clients-favoured` does: clients and server then share one
    /// priority, as they did before the server's threads were favoured. Off by default.
    #[arg(long)]
    pub clients_favoured: bool,
}

impl BenchSubmitArgs {
    fn broker(&self) -> bool {
        is_broker(self.policy.as_deref())
    }
}

/// Whether jobs of `policy` take the broker's path (one reservation each).
fn is_broker(policy: Option<&str>) -> bool {
    matches!(policy, Some("ttd" | "tts"))
}

/// The fresh server of `bench submit --policy ttd`: four sites (the seed's test bed had four)
/// that grant advance reservations, big enough that every job's reservation fits in the same
/// window, and placement at submission; `batch`: the LRM worker batches reservations.
pub fn broker_config(batch: bool) -> String {
    let mut c = format!("batch_reservations = {batch}\n{}", super::demo::server_config(3_600_000, true));
    for name in ["umu", "hpc2n", "pdc", "nsc"] {
        c.push_str(&format!("[[sites]]\nname = \"{name}\"\nprocessors = 100000\nreservations = true\n"));
    }
    c
}

/// A job of `bench submit --policy P`: the plain job with the policy; for the broker, one
/// processor reserved an hour ahead for a minute (so nothing runs while the benchmark lasts).
pub fn policy_job(i: usize, policy: Option<&str>) -> String {
    let policy_line = policy.map(|p| format!("policy = \"{p}\"\n")).unwrap_or_default();
    let broker = if is_broker(policy) {
        "\n[broker]\nearliest_start = \"1h\"\nlatest_start = \"2h\"\n"
    } else {
        ""
    };
    format!(
        "name = \"bench-{i}\"\nexecutable = \"/bin/true\"\npriority = \"low\"\nruntime_estimate = \"1m\"\n{policy_line}{broker}\n[[components]]\nprocessors = 1\n"
    )
}

/// A server config for the fresh server: the default sites, and a scan interval so long that
/// submitted jobs just queue (the benchmark measures submission, not execution).
pub fn queue_only_config() -> String {
    super::demo::server_config(3_600_000, false)
}

/// The job each request submits: one processor, `/bin/true`.
pub fn bench_job(i: usize) -> String {
    policy_job(i, None)
}

/// Latency percentiles over a sample (nearest-rank).
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct BenchResult {
    pub clients: usize,
    pub jobs: usize,
    pub elapsed: Duration,
    pub latencies: Vec<Duration>,
}

impl BenchResult {
    pub fn jobs_per_sec(&self) -> f64 {
        self.jobs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
    pub fn p(&self, q: f64) -> Duration {
        percentile(&self.latencies, q)
    }
    pub fn target_met(&self) -> bool {
        self.jobs_per_sec() >= TARGET_JOBS_PER_SEC && ms(self.p(99.0)) <= TARGET_P99_MS
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Submits `jobs` jobs from `clients` threads; job names start at `first`. `favoured`: the
/// client threads run favoured as the server's threads do ([`koalesce_server::priority`]),
/// standing in for clients on other machines, which do not wait for a core behind the jobs
/// they submit (`bench e2e`).
pub fn run_submissions(url: &str, token: &str, clients: usize, jobs: usize, first: usize, favoured: bool) -> anyhow::Result<BenchResult> {
    run_submissions_of(url, token, clients, jobs, first, Arc::new(bench_job), favoured)
}

/// [`run_submissions`] with the job body of each request made by `job`.
pub fn run_submissions_of(
    url: &str,
    token: &str,
    clients: usize,
    jobs: usize,
    first: usize,
    job: Arc<dyn Fn(usize) -> String + Send + Sync>,
    favoured: bool,
) -> anyhow::Result<BenchResult> {
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    let first_error: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let t0 = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..clients.max(1) {
        let client = Client::new(url, Some(token.to_string()), Duration::from_secs(30));
        let next = next.clone();
        let failed = failed.clone();
        let first_error = first_error.clone();
        let job = job.clone();
        handles.push(std::thread::spawn(move || {
            if favoured {
                // With the threads it starts: for a server named by host name, ureq resolves
                // it in a thread of its own per request, which an unfavoured client thread
                // would wait for (an IP address is resolved in place: `http_agent`).
                let _ = koalesce_server::priority::favour_thread_and_its_threads();
            }
            let mut lat = Vec::with_capacity(jobs / clients.max(1) + 1);
            loop {
                if failed.load(Ordering::Relaxed) {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= jobs {
                    break;
                }
                let body = job(first + i);
                let t = Instant::now();
                match client.submit(&body) {
                    Ok(_) => lat.push(t.elapsed()),
                    Err(e) => {
                        failed.store(true, Ordering::Relaxed);
                        first_error.lock().unwrap().get_or_insert_with(|| format!("{e:#}"));
                        break;
                    }
                }
            }
            lat
        }));
    }
    let mut latencies = Vec::with_capacity(jobs);
    for h in handles {
        latencies.extend(h.join().map_err(|_| anyhow::anyhow!("a client thread panicked"))?);
    }
    let elapsed = t0.elapsed();
    if let Some(e) = first_error.lock().unwrap().take() {
        bail!("submission failed: {e}");
    }
    latencies.sort();
    Ok(BenchResult {
        clients,
        jobs,
        elapsed,
        latencies,
    })
}

/// One measured run against one server.
struct Measured {
    r: BenchResult,
    /// Until every job held its reservation (broker policies).
    reserved: Option<Duration>,
    listed: Option<usize>,
    /// The server's database writes and group commits during the measured submissions, per
    /// acknowledged job (`None`: a server without these counters).
    db_per_job: Option<(f64, f64)>,
}

impl BenchSubmitArgs {
    /// Starts a fresh private server (broker config with `batch` for a broker policy).
    fn fresh_server(&self, batch: bool) -> anyhow::Result<(LocalServer, String)> {
        let opts = LocalServerOptions {
            config_toml: Some(if self.broker() { broker_config(batch) } else { queue_only_config() }),
            ..Default::default()
        };
        let prepared = LocalServer::prepare(&opts)?;
        let token = prepared.create_token("bench", false)?;
        let server = prepared.start(Duration::from_secs(30))?;
        Ok((server, token))
    }

    /// Warm-up, the measured submissions, and (broker) the wait for every reservation.
    fn measure(&self, url: &str, token: &str, fresh: bool) -> anyhow::Result<Measured> {
        let policy = self.policy.clone();
        let job: Arc<dyn Fn(usize) -> String + Send + Sync> = Arc::new(move |i| policy_job(i, policy.as_deref()));
        if self.warmup > 0 {
            run_submissions_of(url, token, self.clients, self.warmup, 0, job.clone(), self.clients_favoured).context("warm-up")?;
        }
        let reserved_before = if self.broker() { reservations_granted(url)? } else { 0 };
        let db_before = db_counters(url);
        let r = run_submissions_of(url, token, self.clients, self.jobs, self.warmup, job, self.clients_favoured)?;
        let db_per_job = match (db_before, db_counters(url)) {
            (Some((w0, c0)), Some((w1, c1))) => {
                let n = self.jobs as f64;
                Some((w1.saturating_sub(w0) as f64 / n, c1.saturating_sub(c0) as f64 / n))
            }
            _ => None,
        };
        // The broker's path ends when every job holds its reservation.
        let reserved = if self.broker() {
            Some(wait_reserved(url, reserved_before + self.jobs as u64, r.elapsed)?)
        } else {
            None
        };
        // Every acknowledged job must be listed (it was committed before the 201).
        let mut listed = None;
        if fresh {
            let client = Client::new(url, Some(token.to_string()), Duration::from_secs(60));
            let n = client.jobs(None, false)?.len();
            if n < self.jobs + self.warmup {
                bail!(
                    "only {n} jobs are listed after {} acknowledged submissions",
                    self.jobs + self.warmup
                );
            }
            listed = Some(n);
        }
        Ok(Measured {
            r,
            reserved,
            listed,
            db_per_job,
        })
    }

    /// `--reservation-batching compare`: fresh servers with and without batching, alternating.
    fn compare_batching(&self) -> anyhow::Result<ExitCode> {
        if !self.broker() || self.url.is_some() {
            bail!("--reservation-batching compare needs --policy ttd or tts and a fresh server (no --url)");
        }
        let rounds = self.rounds.max(1);
        let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        if !self.json {
            eprintln!(
                "bench submit --policy {}: {} clients, {} jobs (+{} warm-up) per run, {rounds} round(s) of batched / unbatched reservations on fresh servers",
                self.policy.as_deref().unwrap_or_default(),
                self.clients,
                self.jobs,
                self.warmup
            );
        }
        for round in 0..rounds {
            // Alternate which goes first, so a drift of the machine's load hits both.
            let order = if round % 2 == 0 { [true, false] } else { [false, true] };
            for batch in order {
                let (server, token) = self.fresh_server(batch)?;
                let m = self.measure(&server.url, &token, true)?;
                let calls = counter(&server.url, "koalesce_reservation_calls_total").unwrap_or(0);
                let granted = reservations_granted(&server.url).unwrap_or(0);
                drop(server);
                let d = m.reserved.expect("broker policy");
                let rate = self.jobs as f64 / d.as_secs_f64();
                if !self.json {
                    eprintln!(
                        "  round {} {:<9} {rate:>8.0} jobs/s reserved ({:.0} jobs/s acknowledged; {:.1} reservations per site call)",
                        round + 1,
                        if batch { "batched" } else { "unbatched" },
                        m.r.jobs_per_sec(),
                        granted as f64 / calls.max(1) as f64
                    );
                }
                rates[usize::from(!batch)].push(rate);
            }
        }
        let median = |v: &[f64]| koalesce_core::nws::median(v.to_vec());
        let (on, off) = (median(&rates[0]), median(&rates[1]));
        let seed = SEED_001_RESERVED_JOBS_PER_MIN / 60.0;
        if self.json {
            let v = serde_json::json!({
                "policy": self.policy,
                "clients": self.clients,
                "jobs": self.jobs,
                "rounds": rounds,
                "batched_reserved_jobs_per_sec": rates[0],
                "unbatched_reserved_jobs_per_sec": rates[1],
                "batched_median": on,
                "unbatched_median": off,
                "ratio_batched_to_unbatched": on / off,
                "batched_ratio_to_seed_001": on / seed,
            });
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            println!(
                "reserved jobs/s      batched median {on:.0}   unbatched median {off:.0}   ratio {:.2}",
                on / off
            );
            println!(
                "vs seed 001 §5.2.1   batched {:.0}x, unbatched {:.0}x its ~{SEED_001_RESERVED_JOBS_PER_MIN:.0} jobs/min with advance reservations",
                on / seed,
                off / seed
            );
        }
        Ok(ExitCode::SUCCESS)
    }

    pub fn run(self) -> anyhow::Result<ExitCode> {
        if self.clients == 0 || self.jobs == 0 {
            bail!("--clients and --jobs must be at least 1");
        }
        if self.reservation_batching == "compare" {
            return self.compare_batching();
        }
        let mut _server: Option<LocalServer> = None;
        let (url, token, what) = match &self.url {
            Some(u) => {
                let token = self.token.clone().context("--url needs --token (or KOALESCE_TOKEN)")?;
                (u.clone(), token, format!("server at {u}"))
            }
            None => {
                let (server, token) = self.fresh_server(self.reservation_batching != "off")?;
                let url = server.url.clone();
                let what = format!("fresh server at {url}");
                _server = Some(server);
                (url, token, what)
            }
        };
        if !self.json {
            eprintln!(
                "bench submit: {} clients, {} jobs (+{} warm-up) against the {what}",
                self.clients, self.jobs, self.warmup
            );
        }
        let Measured {
            r,
            reserved,
            listed,
            db_per_job,
        } = self.measure(&url, &token, _server.is_some())?;

        let rate = r.jobs_per_sec();
        let seed_rate = SEED_001_JOBS_PER_MIN / 60.0;
        if self.json {
            let v = serde_json::json!({
                "clients": r.clients,
                "clients_favoured": self.clients_favoured,
                "jobs": r.jobs,
                "elapsed_s": r.elapsed.as_secs_f64(),
                "jobs_per_sec": rate,
                "p50_ms": ms(r.p(50.0)),
                "p90_ms": ms(r.p(90.0)),
                "p99_ms": ms(r.p(99.0)),
                "max_ms": ms(r.latencies.last().copied().unwrap_or_default()),
                "ratio_to_seed_001": rate / seed_rate,
                "listed_after_run": listed,
                "policy": self.policy,
                "reserved_jobs_per_sec": reserved.map(|d| self.jobs as f64 / d.as_secs_f64()),
                "reserved_ratio_to_seed_001": reserved.map(|d| self.jobs as f64 / d.as_secs_f64() / (SEED_001_RESERVED_JOBS_PER_MIN / 60.0)),
                "db_writes_per_job": db_per_job.map(|d| d.0),
                "db_commits_per_job": db_per_job.map(|d| d.1),
                "target_met": r.target_met(),
            });
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            println!(
                "clients              {}{}",
                r.clients,
                if self.clients_favoured {
                    " (favoured like the server's threads)"
                } else {
                    ""
                }
            );
            println!("jobs acknowledged    {} in {:.2} s", r.jobs, r.elapsed.as_secs_f64());
            println!("durable submissions  {rate:.0} jobs/s ({:.0} jobs/min)", rate * 60.0);
            println!(
                "ack latency          p50 {:.2} ms   p90 {:.2} ms   p99 {:.2} ms   max {:.2} ms",
                ms(r.p(50.0)),
                ms(r.p(90.0)),
                ms(r.p(99.0)),
                ms(r.latencies.last().copied().unwrap_or_default())
            );
            println!(
                "vs seed 001          {:.0}x its peak of ~{SEED_001_JOBS_PER_MIN:.0} jobs/min ({seed_rate:.1} jobs/s)",
                rate / seed_rate
            );
            if let Some(d) = reserved {
                let rate = self.jobs as f64 / d.as_secs_f64();
                println!(
                    "reserved             every job holds its reservation after {:.2} s: {rate:.0} jobs/s",
                    d.as_secs_f64()
                );
                println!(
                    "vs seed 001 §5.2.1   {:.0}x its ~{SEED_001_RESERVED_JOBS_PER_MIN:.0} jobs/min with advance reservations",
                    rate / (SEED_001_RESERVED_JOBS_PER_MIN / 60.0)
                );
            }
            if let Some((writes, commits)) = db_per_job {
                println!("database per job     {writes:.2} writes, {commits:.3} group commits (the server's counters)");
            }
            if let Some(n) = listed {
                println!("listed after run     {n} jobs (all acknowledged submissions are there)");
            }
            println!(
                "target               >= {TARGET_JOBS_PER_SEC:.0} jobs/s and p99 <= {TARGET_P99_MS:.0} ms: {}",
                if r.target_met() { "met" } else { "NOT met" }
            );
        }
        if self.check && !r.target_met() {
            return Ok(ExitCode::from(1));
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// `koalesce_reservations_granted_total` from the server's /metrics.
fn reservations_granted(url: &str) -> anyhow::Result<u64> {
    counter(url, "koalesce_reservations_granted_total")
}

/// The server's database writes and group commits so far (`koalesce_db_writes_total`,
/// `koalesce_db_commits_total`), if its /metrics has them.
fn db_counters(url: &str) -> Option<(u64, u64)> {
    let body = metrics(url).ok()?;
    Some((
        counter_in(&body, "koalesce_db_writes_total").ok()?,
        counter_in(&body, "koalesce_db_commits_total").ok()?,
    ))
}

/// A counter from the server's /metrics.
fn counter(url: &str, name: &str) -> anyhow::Result<u64> {
    counter_in(&metrics(url)?, name)
}

/// The server's /metrics text.
fn metrics(url: &str) -> anyhow::Result<String> {
    ureq::get(&format!("{}/metrics", url.trim_end_matches('/')))
        .call()
        .context("reading /metrics")?
        .into_body()
        .read_to_string()
        .context("reading /metrics")
}

/// Counter `name` in a /metrics text.
fn counter_in(body: &str, name: &str) -> anyhow::Result<u64> {
    let line = body
        .lines()
        .find(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(' ')))
        .with_context(|| format!("/metrics has no {name} (an older server?)"))?;
    line.rsplit(' ').next().unwrap_or_default().parse().context(name.to_string())
}

/// Waits until `want` reservations were granted; returns the time since the submissions began.
fn wait_reserved(url: &str, want: u64, submitted_after: Duration) -> anyhow::Result<Duration> {
    let t0 = Instant::now();
    loop {
        let n = reservations_granted(url)?;
        if n >= want {
            return Ok(submitted_after + t0.elapsed());
        }
        if t0.elapsed() > Duration::from_secs(120) {
            bail!("only {n} of {want} reservations granted two minutes after the last submission");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&v, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&v, 100.0), Duration::from_millis(100));
        assert_eq!(percentile(&[], 99.0), Duration::ZERO);
        assert_eq!(percentile(&v[..1], 99.0), Duration::from_millis(1));
    }

    #[test]
    fn bench_job_is_valid_toml() {
        let v: toml::Value = toml::from_str(&bench_job(3)).unwrap();
        assert_eq!(v["name"].as_str(), Some("bench-3"));
        assert_eq!(v["components"][0]["processors"].as_integer(), Some(1));
    }
}
