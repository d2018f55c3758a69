//! `koalesce demo --federation N`: N private servers (own data dirs and ports) peered with each
//! other, unequally loaded; the same jobs run twice — every server keeping its own jobs
//! (algorithm "local") and with S-I migration — and the average response times are set side by
//! side. Exit 0 only if every job of both runs succeeded.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use koalesce_server::peer::wire::GridJob;

use crate::client_cmds::api::Client;
use crate::client_cmds::demo::server_config;
use crate::client_cmds::local_server::{LocalServer, LocalServerOptions};

const NAMES: [&str; 8] = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"];
/// Every pair of demo servers shares this secret (a private demo on loopback).
const SECRET: &str = "koalesce-federation-demo-secret";

/// Jobs submitted to server `i` of `n`: most to the first, a few to the second, none to the rest.
fn load(i: usize, n: usize) -> usize {
    match i {
        0 => 4 * n,
        1 => 2,
        _ => 0,
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn config(i: usize, ports: &[u16], algorithm: &str, secret: &std::path::Path) -> String {
    let mut c = format!(
        "{}\n[[sites]]\nname = \"{name}-1\"\nprocessors = {procs}\n\n[federation]\nname = \"{name}\"\nalgorithm = \"{algorithm}\"\n\
         phi = \"1s\"\ncheck_interval_ms = 200\npeer_timeout_ms = 2000\nbackoff_initial_ms = 500\nbackoff_max_ms = 5000\n",
        server_config(100, true),
        name = NAMES[i],
        procs = if i == 0 { 2 } else { 4 },
    );
    for (j, p) in ports.iter().enumerate().filter(|&(j, _)| j != i) {
        c.push_str(&format!(
            "[[federation.peers]]\nname = \"{}\"\nurl = \"http://127.0.0.1:{p}\"\nsecret_file = {:?}\n",
            NAMES[j],
            secret.display().to_string()
        ));
    }
    c
}

/// One run: fresh servers, the jobs, their response times (ms) and where they ran.
struct RunResult {
    jobs: Vec<(usize, GridJob)>,
}

impl RunResult {
    fn art_s(&self) -> f64 {
        let resp: Vec<f64> = self
            .jobs
            .iter()
            .filter_map(|(_, g)| Some(g.finished_ms?.saturating_sub(g.submitted_ms) as f64 / 1000.0))
            .collect();
        resp.iter().sum::<f64>() / resp.len().max(1) as f64
    }

    fn all_ok(&self) -> bool {
        self.jobs.iter().all(|(_, g)| g.state == "succeeded" && g.exit_ok == Some(true))
    }

    fn moved(&self) -> usize {
        self.jobs
            .iter()
            .filter(|(_, g)| g.runs_at.as_deref().is_some_and(|r| r != "local"))
            .count()
    }
}

fn run_once(n: usize, algorithm: &str, timeout: Duration) -> anyhow::Result<RunResult> {
    let dir = tempfile::Builder::new().prefix("koalesce-fed-").tempdir()?;
    let secret = dir.path().join("peers.secret");
    std::fs::write(&secret, SECRET)?;
    let ports: Vec<u16> = (0..n).map(|_| free_port()).collect::<anyhow::Result<_>>()?;
    let mut servers: Vec<(LocalServer, Client)> = Vec::new();
    for i in 0..n {
        let opts = LocalServerOptions {
            config_toml: Some(config(i, &ports, algorithm, &secret)),
            listen: Some(format!("127.0.0.1:{}", ports[i])),
            ..Default::default()
        };
        let prepared = LocalServer::prepare(&opts)?;
        let token = prepared.create_token("demo", true)?;
        let server = prepared
            .start(Duration::from_secs(30))
            .with_context(|| format!("starting {}", NAMES[i]))?;
        let client = Client::new(&server.url, Some(token), Duration::from_secs(10));
        servers.push((server, client));
    }
    let job = |k: usize| {
        format!(
            "name = \"demo-{k}\"\nexecutable = \"/bin/sleep\"\narguments = [\"2\"]\nruntime_estimate = \"3s\"\n[[components]]\nprocessors = 1\n"
        )
    };
    let mut ids = Vec::new();
    let mut k = 0;
    for (i, (_, c)) in servers.iter().enumerate() {
        for _ in 0..load(i, n) {
            let (_, body) = c.send("POST", "/api/v1/grid/jobs", Some("application/toml"), job(k).as_bytes())?;
            let v: serde_json::Value = serde_json::from_str(&body)?;
            ids.push((i, v["id"].as_u64().context("no id in the answer")?));
            k += 1;
        }
    }
    let t0 = Instant::now();
    let mut jobs = Vec::new();
    for (i, id) in ids {
        loop {
            let v = servers[i].1.get_json(&format!("/api/v1/grid/jobs/{id}"))?;
            let g: GridJob = serde_json::from_value(v)?;
            if ["succeeded", "failed", "cancelled"].contains(&g.state.as_str()) {
                jobs.push((i, g));
                break;
            }
            if t0.elapsed() > timeout {
                bail!("grid job {id} at {} not finished after {timeout:?} (state {})", NAMES[i], g.state);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    for (s, _) in &mut servers {
        s.stop(Duration::from_secs(5));
    }
    Ok(RunResult { jobs })
}

pub fn run(n: usize, timeout: Duration) -> anyhow::Result<ExitCode> {
    if !(2..=NAMES.len()).contains(&n) {
        bail!("--federation: 2 to {} servers (got {n})", NAMES.len());
    }
    eprintln!(
        "{n} servers ({}: 2 processors, the others 4), {} jobs of 2 s (estimate 3 s): {} to {}, 2 to {}",
        NAMES[0],
        (0..n).map(|i| load(i, n)).sum::<usize>(),
        load(0, n),
        NAMES[0],
        NAMES[1]
    );
    eprintln!("run 1: every server keeps its jobs (algorithm local) ...");
    let local = run_once(n, "local", timeout)?;
    eprintln!("run 2: sender-initiated migration (S-I, τ = 1.4, φ = 1 s) ...");
    let si = run_once(n, "s-i", timeout)?;
    println!("{:<28} {:>10} {:>10}", "", "local", "S-I");
    println!("{:<28} {:>10.1} {:>10.1}", "ART (s)", local.art_s(), si.art_s());
    println!("{:<28} {:>10} {:>10}", "jobs moved to a peer", local.moved(), si.moved());
    let ok = |r: &RunResult| r.jobs.iter().filter(|(_, g)| g.state == "succeeded").count();
    println!("{:<28} {:>10} {:>10}", "jobs succeeded", ok(&local), ok(&si));
    println!("{:<28} {:>10} {:>10}", "jobs", local.jobs.len(), si.jobs.len());
    for (i, name) in NAMES.iter().enumerate().take(n) {
        let ran = |r: &RunResult| {
            r.jobs
                .iter()
                .filter(|(o, g)| match g.runs_at.as_deref() {
                    Some("local") => *o == i,
                    Some(p) => p == *name,
                    None => false,
                })
                .count()
        };
        println!("{:<28} {:>10} {:>10}", format!("jobs run at {name}"), ran(&local), ran(&si));
    }
    if local.all_ok() && si.all_ok() {
        println!("S-I turnaround: {:.0}% of local", 100.0 * si.art_s() / local.art_s().max(1e-9));
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("some jobs did not succeed");
        Ok(ExitCode::FAILURE)
    }
}
