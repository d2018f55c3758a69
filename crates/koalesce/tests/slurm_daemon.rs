//! The daemon (`koalesce server`, the real binary) on a real 3-cluster Slurm test bed: claiming
//! over Slurm and faults, as users meet them.
//!
//! 1. A component that Slurm does not allocate within the site's `claim_timeout_ms` makes the
//!    claim fail (003's claiming failure): the whole launch is cancelled (the component already
//!    allocated on the other cluster gives up without running its program), the job goes back
//!    to placement and is tried again; the site is not blamed (its controller answers).
//! 2. `testbed stop-cluster beta` during a workload: every job still succeeds and every program
//!    ran exactly once, beta is blacklisted, probed with back-off, and used again once
//!    `start-cluster beta` brought it back.
//! 3. SIGKILL of the daemon while components run in Slurm: the next daemon re-adopts them; every
//!    job succeeds, every program ran once.
//!
//! Needs slurm-wlm and munge (`apt-get install -y slurm-wlm munge`); fails without them.

mod slurm_common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use koalesce::testbed::StopHow;
use koalesce_server::config::ServerConfig;
use serde_json::Value;
use slurm_common::*;

/// A `koalesce server` child process on a data dir that survives restarts; killed on drop.
struct Daemon {
    dir: PathBuf,
    config: PathBuf,
    child: Option<Child>,
    url: String,
    token: String,
}

impl Daemon {
    fn new(dir: PathBuf, config: &ServerConfig) -> Daemon {
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let path = dir.join("server.toml");
        std::fs::write(&path, toml::to_string(config).unwrap()).unwrap();
        let out = Command::new(BIN)
            .args(["token", "create", "alice", "--admin", "--data-dir"])
            .arg(dir.join("data"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let token = String::from_utf8_lossy(&out.stdout).split_whitespace().last().unwrap().to_string();
        let mut d = Daemon {
            dir,
            config: path,
            child: None,
            url: String::new(),
            token,
        };
        d.start();
        d
    }

    fn log_tail(&self) -> String {
        let t = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn start(&mut self) {
        let data = self.dir.join("data");
        let addr = data.join("server.addr");
        let _ = std::fs::remove_file(&addr);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))
            .unwrap();
        self.child = Some(
            Command::new(BIN)
                .arg("server")
                .arg("--data-dir")
                .arg(&data)
                .args(["--listen", "127.0.0.1:0", "--config"])
                .arg(&self.config)
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap(),
        );
        self.url = wait_for("the server to answer", Duration::from_secs(30), || {
            let a = std::fs::read_to_string(&addr).ok()?;
            let url = format!("http://{}", a.trim());
            (!a.trim().is_empty() && ureq::get(&format!("{url}/healthz")).call().is_ok()).then_some(url)
        });
    }

    /// SIGKILL: the daemon only (components run in Slurm jobs of their own).
    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    fn get(&self, path: &str) -> Value {
        let mut r = ureq::get(&format!("{}{path}", self.url))
            .header("Authorization", &format!("Bearer {}", self.token))
            .call()
            .unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", self.log_tail()));
        serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap()
    }

    fn post(&self, path: &str, body: &str) -> Value {
        let mut r = ureq::post(&format!("{}{path}", self.url))
            .header("Authorization", &format!("Bearer {}", self.token))
            .header("Content-Type", "application/toml")
            .send(body.as_bytes())
            .unwrap_or_else(|e| panic!("POST {path}: {e}\n{body}\n{}", self.log_tail()));
        serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap()
    }

    fn submit(&self, job: &str) -> u64 {
        self.post("/api/v1/jobs", job)["id"].as_u64().unwrap()
    }

    fn job(&self, id: u64) -> Value {
        self.get(&format!("/api/v1/jobs/{id}"))
    }

    fn blacklisted(&self, site: &str) -> bool {
        let sites = self.get("/api/v1/sites");
        let s = sites.as_array().unwrap().iter().find(|s| s["name"] == site).unwrap();
        s["blacklisted"].as_bool().unwrap()
    }

    fn wait_all(&self, ids: &[u64], timeout: Duration, mut each: impl FnMut(&Daemon)) -> Vec<Value> {
        wait_for("every job to end", timeout, || {
            each(self);
            let jobs: Vec<Value> = ids.iter().map(|&id| self.job(id)).collect();
            jobs.iter()
                .all(|j| matches!(j["state"].as_str(), Some("succeeded" | "failed" | "cancelled")))
                .then_some(jobs)
        })
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The bed's sites, with quick scheduling, a shared directory the programs may append to and
/// the given per-site changes.
fn config(bed: &Bed, runs: &Path, edit: impl Fn(&mut ServerConfig)) -> ServerConfig {
    let mut c = ServerConfig::load(&bed.bed.server_toml()).unwrap();
    c.poll_interval_ms = 50;
    c.scheduler.place_on_submit = true;
    c.scheduler.min_claim_retry_ms = 200;
    c.scheduler.scan_interval = koalesce_core::config::ScanInterval::Fixed { interval_ms: 200 };
    c.users.insert("*".into(), "root".into());
    c.allow_root_jobs = true;
    c.sandbox.read_write = vec![runs.to_path_buf()];
    edit(&mut c);
    c
}

/// A job whose program appends `JOB-RANK` to `runs/log` (so runs can be counted) and sleeps.
fn job(name: &str, runs: &Path, sleep: u32, comps: &[(u32, Option<&str>)]) -> String {
    let script = format!("echo $KOALESCE_JOB_ID-$KOALESCE_RANK >> {}/log; sleep {sleep}", runs.display());
    let mut t = format!("name = \"{name}\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"{script}\"]\nruntime_estimate = \"2m\"\n");
    if comps.len() > 1 {
        t.push_str("runner = \"coupled\"\n");
    }
    for (p, site) in comps {
        t.push_str(&format!("\n[[components]]\nprocessors = {p}\n"));
        if let Some(s) = site {
            t.push_str(&format!("site = \"{s}\"\n"));
        }
    }
    t
}

/// How often each `JOB-RANK` ran.
fn run_counts(dir: &Path) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for l in std::fs::read_to_string(dir.join("log")).unwrap_or_default().lines() {
        *m.entry(l.to_string()).or_insert(0) += 1;
    }
    m
}

fn assert_each_ran_once(jobs: &[Value], dir: &Path) {
    let r = run_counts(dir);
    for j in jobs {
        assert_eq!(j["state"], "succeeded", "{j}");
        for rank in 0..j["components"].as_array().unwrap().len() {
            let key = format!("{}-{rank}", j["id"]);
            assert_eq!(r.get(&key), Some(&1), "{key} ran {:?} times: {r:?}", r.get(&key));
        }
    }
    let expected: usize = jobs.iter().map(|j| j["components"].as_array().unwrap().len()).sum();
    assert_eq!(r.values().sum::<usize>(), expected, "no other runs: {r:?}");
}

/// koalesce's jobs in a cluster's queue (any state squeue still shows).
fn slurm_jobs(bed: &Bed, cluster: &str) -> Vec<String> {
    let c = bed.bed.client(cluster).unwrap();
    let o = c.run_args("squeue", &["-h", "-t", "all", "-o", "%i|%T|%k"]).unwrap();
    o.stdout.lines().filter(|l| l.contains("koalesce:")).map(str::to_string).collect()
}

#[test]
fn daemon_on_a_real_bed_claims_and_survives_faults() {
    let bed = Bed::up(3, 1, 0);
    claim_timeout_sends_the_job_back(&bed);
    reservations_through_the_daemon(&bed);
    stopped_cluster_is_blacklisted_and_used_again(&bed);
    daemon_crash_with_components_in_slurm(&bed);
}

fn runs_dir(bed: &Bed, name: &str) -> PathBuf {
    let d = bed.tmp.path().join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn claim_timeout_sends_the_job_back(bed: &Bed) {
    let runs = runs_dir(bed, "runs-claim");
    // alpha's jobs may not start for 10 minutes: Slurm takes them, never allocates them in time.
    let cfg = config(bed, &runs, |c| {
        for s in &mut c.sites {
            let slurm = s.slurm.as_mut().unwrap();
            slurm.claim_timeout_ms = 3000;
            if s.name == "alpha" {
                slurm.sbatch_args = vec!["--begin=now+600".into()];
            }
        }
    });
    let d = Daemon::new(bed.tmp.path().join("srv-claim"), &cfg);
    let id = d.submit(&job("late", &runs, 1, &[(4, Some("alpha")), (4, Some("beta"))]));
    let t0 = Instant::now();
    // beta's component is allocated and checks in; alpha's pends (BeginTime). After 3 s the
    // claim fails, both are cancelled, the job is placed again and the cycle repeats.
    let j = wait_for("the job to be claimed a third time", Duration::from_secs(40), || {
        let j = d.job(id);
        (j["claiming_tries"].as_u64().unwrap_or(0) >= 3).then_some(j)
    });
    eprintln!(
        "claim timeout: job placed {} times in {:.1} s (claiming tries {}), state {}",
        j["placement_tries"],
        t0.elapsed().as_secs_f64(),
        j["claiming_tries"],
        j["state"]
    );
    assert!(run_counts(&runs).is_empty(), "no program ran: {:?}", run_counts(&runs));
    assert!(!d.blacklisted("alpha"), "a busy queue is not the site's fault");
    assert_eq!(d.post(&format!("/api/v1/jobs/{id}/cancel"), "")["state"], "cancelled");
    // Nothing of the job is left in Slurm: every submission was cancelled.
    wait_for("the cancelled components to leave Slurm's queues", T, || {
        let live: Vec<String> = ["alpha", "beta"]
            .iter()
            .flat_map(|c| slurm_jobs(bed, c))
            .filter(|l| l.contains("|PENDING|") || l.contains("|RUNNING|"))
            .collect();
        live.is_empty().then_some(())
    });
    let beta = slurm_jobs(bed, "beta");
    assert!(beta.len() >= 2, "beta's component was submitted for every try: {beta:?}");
    assert!(run_counts(&runs).is_empty(), "no program ran: {:?}", run_counts(&runs));
}

const T: Duration = Duration::from_secs(30);

/// Reservation names koalesce holds on a cluster now.
fn reservations(bed: &Bed, cluster: &str) -> Vec<String> {
    let c = bed.bed.client(cluster).unwrap();
    let o = c
        .run_args("scontrol", &["show", "reservation", "-o"])
        .map(|o| o.stdout)
        .unwrap_or_default();
    o.lines()
        .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("ReservationName=")))
        .filter(|n| n.starts_with("koalesce-"))
        .map(str::to_string)
        .collect()
}

/// A site with `reservations = true`: the core's `Reserve` becomes `scontrol create
/// reservation`, the component runs in it (`sbatch --reservation`), and the reservation is
/// deleted once the job ended.
fn reservations_through_the_daemon(bed: &Bed) {
    let runs = runs_dir(bed, "runs-resv");
    let cfg = config(bed, &runs, |c| {
        for s in &mut c.sites {
            s.reservations = s.name == "gamma";
        }
    });
    let d = Daemon::new(bed.tmp.path().join("srv-resv"), &cfg);
    let sites = d.get("/api/v1/sites");
    assert_eq!(sites[2]["supports_reservations"], true, "{sites}");
    let ids: Vec<u64> = (0..2)
        .map(|i| d.submit(&job(&format!("r{i}"), &runs, 1, &[(8, Some("gamma"))])))
        .collect();
    // The reservations koalesce created, and the reservation each component's Slurm job is in
    // (squeue's column; Slurm forgets it once the reservation is deleted).
    let c = bed.bed.client("gamma").unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let mut ran_in: BTreeMap<String, String> = BTreeMap::new();
    let jobs = d.wait_all(&ids, Duration::from_secs(60), |_| {
        seen.extend(reservations(bed, "gamma"));
        let rows = c
            .run_args("squeue", &["-h", "-t", "all", "-o", "%v|%k"])
            .map(|o| o.stdout)
            .unwrap_or_default();
        for l in rows.lines().filter(|l| l.contains("srv-resv")) {
            if let Some((r, k)) = l.split_once('|') {
                if r.starts_with("koalesce-") {
                    ran_in.insert(k.to_string(), r.to_string());
                }
            }
        }
    });
    assert_each_ran_once(&jobs, &runs);
    eprintln!(
        "reservations: created {seen:?}; the components' Slurm jobs were in {:?}",
        ran_in.values()
    );
    assert_eq!(ran_in.len(), 2, "each component's job was in a reservation: {ran_in:?}");
    assert!(ran_in.values().all(|r| seen.contains(r)), "koalesce's reservations: {ran_in:?}");
    let t0 = Instant::now();
    while !reservations(bed, "gamma").is_empty() {
        assert!(
            t0.elapsed() < T,
            "reservations not deleted: {:?}\n{}",
            reservations(bed, "gamma"),
            d.log_tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn stopped_cluster_is_blacklisted_and_used_again(bed: &Bed) {
    let runs = runs_dir(bed, "runs-fault");
    let cfg = config(bed, &runs, |c| {
        for s in &mut c.sites {
            s.slurm.as_mut().unwrap().claim_timeout_ms = 5000;
        }
        c.scheduler.blacklist_threshold = 2;
        c.site_probe_ms = 1000;
        c.site_probe_max_ms = 4000;
        c.site_down_ms = 2000;
    });
    let d = Daemon::new(bed.tmp.path().join("srv-fault"), &cfg);
    // 15 jobs of 8 CPUs on 3 × 32 CPUs: 12 run at once, 3 wait.
    let ids: Vec<u64> = (0..15).map(|i| d.submit(&job(&format!("w{i}"), &runs, 3, &[(8, None)]))).collect();
    wait_for("a job running on beta", T, || {
        ids.iter()
            .any(|&id| {
                let j = d.job(id);
                j["state"] == "running" && j["sites"][0] == "beta"
            })
            .then_some(())
    });
    let t_stop = Instant::now();
    bed.bed.stop_cluster("beta", StopHow::Term, false).unwrap();
    let mut seen_blacklisted = None;
    let jobs = d.wait_all(&ids, Duration::from_secs(120), |d| {
        if seen_blacklisted.is_none() && d.blacklisted("beta") {
            seen_blacklisted = Some(t_stop.elapsed());
        }
    });
    eprintln!(
        "stop-cluster beta: all 15 jobs ended {:.1} s after the stop; beta blacklisted after {:?}; sites {:?}",
        t_stop.elapsed().as_secs_f64(),
        seen_blacklisted,
        jobs.iter().map(|j| j["sites"].to_string()).collect::<Vec<_>>()
    );
    assert_each_ran_once(&jobs, &runs);
    // beta is blacklisted: claims there fail while its controller is away (soft errors), and
    // it does not answer the daemon's refreshes for site_down_ms.
    let blacklisted_at = match seen_blacklisted {
        Some(t) => t,
        None => wait_for("beta to be blacklisted", T, || d.blacklisted("beta").then_some(t_stop.elapsed())),
    };
    // Probes with back-off (1, 2, 4, 4 s) keep it out while it is down (the core's own expiry
    // may let it in for a moment, until the next refresh fails)...
    std::thread::sleep(Duration::from_secs(3));
    wait_for("beta to stay blacklisted", Duration::from_secs(2), || {
        d.blacklisted("beta").then_some(())
    });
    // ... and re-admit it once it answers.
    let started = bed.bed.start_cluster("beta").unwrap();
    let t_start = Instant::now();
    wait_for("beta to be re-admitted", T, || (!d.blacklisted("beta")).then_some(()));
    eprintln!(
        "beta blacklisted {:.1} s after the stop; start-cluster took {:.1} s; re-admitted {:.1} s after",
        blacklisted_at.as_secs_f64(),
        started.as_secs_f64(),
        t_start.elapsed().as_secs_f64()
    );
    let again: Vec<u64> = (0..2)
        .map(|i| d.submit(&job(&format!("b{i}"), &runs, 0, &[(8, Some("beta"))])))
        .collect();
    let jobs2 = d.wait_all(&again, Duration::from_secs(60), |_| {});
    for j in &jobs2 {
        assert_eq!(j["state"], "succeeded", "beta is used again: {j}");
        assert_eq!(j["sites"][0], "beta");
    }
    let all: Vec<Value> = jobs.into_iter().chain(jobs2).collect();
    let r = run_counts(&runs);
    for j in &all {
        assert_eq!(r.get(&format!("{}-0", j["id"])), Some(&1), "{j}");
    }
}

fn daemon_crash_with_components_in_slurm(bed: &Bed) {
    let runs = runs_dir(bed, "runs-crash");
    // Mixed sites: the bed's clusters and a site of the local executor.
    let cfg = config(bed, &runs, |c| c.sites.push(koalesce_server::config::SiteConfig::local("here", 16)));
    let mut d = Daemon::new(bed.tmp.path().join("srv-crash"), &cfg);
    // Two coupled jobs too large for one cluster (20 + 20 > 32), one over a local site and a
    // Slurm cluster, and four single ones.
    let mut ids = vec![
        d.submit(&job("span-a", &runs, 3, &[(20, None), (20, None)])),
        d.submit(&job("span-b", &runs, 3, &[(10, None), (10, None), (10, None)])),
        d.submit(&job("mixed", &runs, 3, &[(8, Some("here")), (8, Some("alpha"))])),
    ];
    ids.extend((0..4).map(|i| d.submit(&job(&format!("s{i}"), &runs, 2, &[(4, None)]))));
    wait_for("the first coupled job to run", T, || {
        (d.job(ids[0])["state"] == "running").then_some(())
    });
    std::thread::sleep(Duration::from_millis(500));
    d.kill9();
    let in_slurm: usize = bed
        .bed
        .clusters()
        .iter()
        .flat_map(|c| slurm_jobs(bed, c))
        .filter(|l| l.contains("|PENDING|") || l.contains("|RUNNING|"))
        .count();
    d.start();
    let jobs = d.wait_all(&ids, Duration::from_secs(90), |_| {});
    eprintln!(
        "daemon SIGKILLed with {in_slurm} koalesce jobs pending or running in Slurm: {} jobs succeeded after the restart",
        jobs.iter().filter(|j| j["state"] == "succeeded").count()
    );
    let sites: Vec<&str> = jobs[0]["sites"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    assert_eq!(sites.len(), 2, "the job spans two clusters: {sites:?}");
    let mixed: Vec<&str> = jobs[2]["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["site"].as_str().unwrap())
        .collect();
    assert_eq!(mixed, ["here", "alpha"], "a local and a Slurm site");
    assert_each_ran_once(&jobs, &runs);
}
