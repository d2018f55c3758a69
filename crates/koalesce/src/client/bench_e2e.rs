//! `koalesce bench e2e`: throughput while jobs run. C clients submit N trivial jobs
//! (`/bin/true`, one processor) to a fresh server on the default local sites, which places,
//! claims, launches (each component under its own supervisor) and watches them while the
//! submissions go on. Measured: the time from the first submission until every job ended,
//! jobs per second over that time, and the acknowledgement latency of the submissions (all of
//! them made while earlier jobs run).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;

use super::api::Client;
use super::bench::{percentile, run_submissions};
use super::local_server::{LocalServer, LocalServerOptions};

/// HyperQueue v0.26.2 on this machine (issue 9: 2,000 jobs, 16 clients, one worker, durable
/// journal): 139 jobs/s. The target is twice that.
pub const HYPERQUEUE_JOBS_PER_SEC: f64 = 139.0;
pub const TARGET_JOBS_PER_SEC: f64 = 280.0;
pub const TARGET_P99_MS: f64 = 20.0;

/// The bench server's config: the server's defaults, every user's jobs run as `nobody` (when
/// the server runs as root; ignored with a warning otherwise).
const SERVER_CONFIG: &str = "[users]\n\"*\" = \"nobody\"\n";

/// Arguments of `koalesce bench e2e`.
#[derive(Debug, Args)]
pub struct BenchE2eArgs {
    /// Jobs to submit and run.
    #[arg(long, default_value_t = 2000)]
    pub jobs: usize,
    /// Concurrent client threads, each with its own connection.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Give up waiting for the jobs to end after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_s: u64,
    /// Exit 1 unless the target is met (>= 280 jobs/s and submit p99 <= 20 ms).
    #[arg(long)]
    pub check: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Favour the client threads like the server's threads (a short scheduler slice, nice
    /// -10 as root), standing in for clients on other machines that do not wait for a core
    /// behind the jobs they submit. Off by default: clients on this machine compete with the
    /// jobs, as a workflow tool beside the server does.
    #[arg(long)]
    pub clients_favoured: bool,
}

/// Jobs in each final state, from the server's Prometheus metrics.
fn ended(client: &Client) -> anyhow::Result<(u64, u64)> {
    let text = client.get_text("/metrics")?;
    let count = |state: &str| -> u64 {
        let key = format!("koalesce_jobs{{state=\"{state}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    Ok((count("succeeded"), count("failed") + count("cancelled")))
}

/// The server's own view of the run (`/metrics`): the longest acknowledgement and its waits
/// for the state lock and the commit, submissions answered after more than 20 ms, the longest
/// hold of the state lock (ms) and where it was taken.
fn server_latency(client: &Client) -> serde_json::Value {
    let Ok(text) = client.get_text("/metrics") else {
        return serde_json::Value::Null;
    };
    let value = |prefix: &str| -> Option<(String, f64)> {
        text.lines().find(|l| l.starts_with(prefix)).and_then(|l| {
            let (key, v) = l.rsplit_once(' ')?;
            Some((key.to_string(), v.parse().ok()?))
        })
    };
    let ms = |prefix: &str| value(prefix).map(|(_, v)| v * 1e3);
    let held = value("koalesce_state_lock_held_max_seconds{");
    // Holds of 1 ms or more by the line that took the lock: the five longest, with how many
    // such holds that line made and their sum.
    let per_site = |metric: &str| -> Vec<(String, f64)> {
        text.lines()
            .filter_map(|l| l.strip_prefix(metric)?.strip_prefix("{at=\""))
            .filter_map(|l| {
                let (at, v) = l.split_once("\"} ")?;
                Some((at.to_string(), v.trim().parse().ok()?))
            })
            .collect()
    };
    let counts = per_site("koalesce_state_lock_site_holds_total");
    let sums = per_site("koalesce_state_lock_site_held_seconds_total");
    let sites: Vec<serde_json::Value> = per_site("koalesce_state_lock_site_held_max_seconds")
        .into_iter()
        .take(5)
        .map(|(at, max)| {
            let of = |v: &[(String, f64)]| v.iter().find(|(a, _)| *a == at).map(|(_, x)| *x);
            serde_json::json!({
                "at": at,
                "max_ms": max * 1e3,
                "holds_over_1ms": of(&counts),
                "sum_ms": of(&sums).map(|s| s * 1e3),
            })
        })
        .collect();
    serde_json::json!({
        "ack_max_ms": ms("koalesce_submit_ack_max_seconds{part=\"total\"}"),
        "ack_lock_wait_max_ms": ms("koalesce_submit_ack_max_seconds{part=\"lock_wait\"}"),
        "ack_commit_max_ms": ms("koalesce_submit_ack_max_seconds{part=\"commit\"}"),
        "acks_over_20ms": value("koalesce_submit_acks_slow_total ").map(|(_, v)| v),
        "state_lock_held_max_ms": held.as_ref().map(|(_, v)| v * 1e3),
        "state_lock_held_max_at": held.and_then(|(k, _)| Some(k.split_once("at=\"")?.1.trim_end_matches("\"}").to_string())),
        "state_lock_long_holds": value("koalesce_state_lock_long_holds_total ").map(|(_, v)| v),
        "state_lock_sites": sites,
        "scan_avg_ms": value("koalesce_scan_duration_seconds_sum ")
            .zip(value("koalesce_scan_duration_seconds_count "))
            .filter(|(_, (_, n))| *n > 0.0)
            .map(|((_, sum), (_, n))| sum * 1e3 / n),
        "action_chunks_left": value("koalesce_action_chunks_left_total ").map(|(_, v)| v),
        "db_group_max_ms": ms("koalesce_db_group_max_seconds "),
        "db_catch_up_max_ms": ms("koalesce_db_wal_catch_up_max_seconds "),
        "db_largest_group": value("koalesce_db_largest_group ").map(|(_, v)| v),
        "db_first_groups": value("koalesce_db_first_groups_total ").map(|(_, v)| v),
    })
}

/// CPU time (ms) a process used, with that of its children it reaped (fields 14-17 of
/// /proc/PID/stat: utime, stime, cutime, cstime). For the server that is the daemon, every
/// supervisor and every program: what the jobs cost the machine, which unlike the wall time
/// hardly depends on how much of the CPU other users' work leaves (a shared machine).
fn cpu_ms(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = (11..=14)
        .map(|i| f.get(i).and_then(|v| v.parse::<u64>().ok()))
        .sum::<Option<u64>>()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(ticks as f64 * 1e3 / hz)
}

/// [`cpu_ms`] of `pid` and of its live children: the server's resident launchers (one per
/// local site) reap the supervisors they fork, so their time is in the launchers' counters
/// until the server reaps the launchers at its end.
fn tree_cpu_ms(pid: u32) -> Option<f64> {
    let own = cpu_ms(pid)?;
    let children: f64 = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| s[s.rfind(')')? + 2..].split_whitespace().nth(1)?.parse::<u32>().ok())
                == Some(pid)
        })
        .filter_map(cpu_ms)
        .sum();
    Some(own + children)
}

/// CPU time (ms) of this process (the clients).
fn own_cpu_ms() -> f64 {
    let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF);
    u.map(|u| {
        let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 * 1e3 + tv.tv_usec() as f64 / 1e3;
        t(u.user_time()) + t(u.system_time())
    })
    .unwrap_or(0.0)
}

impl BenchE2eArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        if self.clients == 0 || self.jobs == 0 {
            bail!("--clients and --jobs must be at least 1");
        }
        // The server's defaults (the five DAS-2 sites on the local executor), its users mapped
        // to `nobody`: a server run as root refuses jobs of users without an account, which
        // would make every job a quick failure instead of a run.
        let prepared = LocalServer::prepare(&LocalServerOptions {
            config_toml: Some(SERVER_CONFIG.into()),
            ..Default::default()
        })?;
        let token = prepared.create_token("bench", false)?;
        let server = prepared.start(Duration::from_secs(30))?;
        let url = server.url.clone();
        if !self.json {
            eprintln!(
                "bench e2e: {} clients submit {} jobs (/bin/true, 1 processor) to a fresh server at {url} (default sites); they run meanwhile",
                self.clients, self.jobs
            );
        }
        let client = Client::new(&url, Some(token.clone()), Duration::from_secs(30));
        let (server_cpu0, client_cpu0) = (server.pid().and_then(tree_cpu_ms), own_cpu_ms());
        let t0 = Instant::now();
        let watcher = {
            let (client, jobs, timeout) = (client.clone(), self.jobs as u64, Duration::from_secs(self.timeout_s));
            std::thread::spawn(move || -> anyhow::Result<(Duration, u64, u64)> {
                loop {
                    let (ok, bad) = ended(&client)?;
                    if ok + bad >= jobs {
                        return Ok((t0.elapsed(), ok, bad));
                    }
                    if t0.elapsed() > timeout {
                        bail!("only {} of {jobs} jobs ended in {} s", ok + bad, timeout.as_secs());
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        let submitted = run_submissions(&url, &token, self.clients, self.jobs, 0, self.clients_favoured)?;
        let (elapsed, ok, bad) = watcher
            .join()
            .map_err(|_| anyhow::anyhow!("the watcher thread panicked"))?
            .context("waiting for the jobs to end")?;
        // The supervisors of the last jobs are reaped at the daemon's next status poll (or by
        // their launcher, within 200 ms).
        std::thread::sleep(Duration::from_millis(300));
        let server_cpu = server
            .pid()
            .and_then(tree_cpu_ms)
            .zip(server_cpu0)
            .map(|(b, a)| (b - a) / self.jobs as f64);
        let client_cpu = (own_cpu_ms() - client_cpu0) / self.jobs as f64;
        let server_view = server_latency(&client);
        let lat = &submitted.latencies;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let rate = self.jobs as f64 / elapsed.as_secs_f64().max(1e-9);
        let p50 = ms(percentile(lat, 50.0));
        let p99 = ms(percentile(lat, 99.0));
        let met = rate >= TARGET_JOBS_PER_SEC && p99 <= TARGET_P99_MS && bad == 0;
        if self.json {
            let v = serde_json::json!({
                "jobs": self.jobs,
                "clients": self.clients,
                "elapsed_s": elapsed.as_secs_f64(),
                "submit_s": submitted.elapsed.as_secs_f64(),
                "jobs_per_sec": rate,
                "succeeded": ok,
                "failed": bad,
                "submit_p50_ms": p50,
                "submit_p99_ms": p99,
                "submit_max_ms": ms(lat.last().copied().unwrap_or_default()),
                "ratio_to_hyperqueue": rate / HYPERQUEUE_JOBS_PER_SEC,
                "server_cpu_ms_per_job": server_cpu,
                "client_cpu_ms_per_job": client_cpu,
                "load_average": std::fs::read_to_string("/proc/loadavg").ok().map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")),
                "target_met": met,
                "clients_favoured": self.clients_favoured,
                "server": server_view,
            });
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            println!("jobs                 {} ({ok} succeeded, {bad} failed)", self.jobs);
            println!(
                "all ended after      {:.2} s (submissions took {:.2} s)",
                elapsed.as_secs_f64(),
                submitted.elapsed.as_secs_f64()
            );
            println!(
                "throughput           {rate:.0} jobs/s ({:.2}x HyperQueue's {HYPERQUEUE_JOBS_PER_SEC:.0})",
                rate / HYPERQUEUE_JOBS_PER_SEC
            );
            println!(
                "submit latency       p50 {p50:.2} ms   p99 {p99:.2} ms   max {:.2} ms (while jobs run)",
                ms(lat.last().copied().unwrap_or_default())
            );
            println!("server's view         {server_view}");
            if let Some(c) = server_cpu {
                println!("cpu per job          {c:.2} ms (daemon, supervisor and program), clients {client_cpu:.2} ms");
            }
            println!(
                "target               >= {TARGET_JOBS_PER_SEC:.0} jobs/s and p99 <= {TARGET_P99_MS:.0} ms: {}",
                if met { "met" } else { "NOT met" }
            );
        }
        drop(server);
        Ok(if self.check && !met { ExitCode::from(1) } else { ExitCode::SUCCESS })
    }
}
