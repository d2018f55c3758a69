//! End-to-end tests of `koalesce server` and the client commands, running the real binary.
//!
//! Each test starts its own server on 127.0.0.1 (free port, temporary data dir, small sites,
//! short scan interval via `--config`). The tests in this file run one at a time (a shared
//! lock) so that timing checks are not disturbed by each other on a small machine.
//!
//! The crash test's kill moments come from a seeded RNG (seed printed; override with
//! `KOALESCE_E2E_SEED=N` to reproduce another run). `KOALESCE_E2E_KEEP=1` keeps the test
//! servers' directories (data dir, server log, markers) for inspection.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_koalesce");

/// Serializes the tests of this file.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Small sites and prompt scheduling for tests.
fn test_config(sites: &[(&str, u32)]) -> String {
    let mut s = String::from("poll_interval_ms = 50\n");
    for (name, p) in sites {
        s.push_str(&format!("[[sites]]\nname = \"{name}\"\nprocessors = {p}\n"));
    }
    s.push_str(
        "[scheduler]\nplace_on_submit = true\nmin_claim_retry_ms = 100\n\
         scan_interval = { kind = \"fixed\", interval_ms = 100 }\n",
    );
    s
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A `koalesce server` child on a data dir that survives restarts.
struct TestServer {
    dir: tempfile::TempDir,
    data_dir: PathBuf,
    config: PathBuf,
    child: Option<Child>,
    url: String,
    starts: u32,
    /// Restart on the same port (so clients keep their URL); None: let the server pick.
    port: Option<u16>,
    /// Extra environment of the server process (failure injection).
    env: Vec<(&'static str, PathBuf)>,
}

impl TestServer {
    fn new(config: &str) -> Self {
        let mut dir = tempfile::Builder::new().prefix("koalesce-e2e-").tempdir().unwrap();
        if std::env::var_os("KOALESCE_E2E_KEEP").is_some() {
            // For debugging: keep the data dir, logs and markers.
            dir.disable_cleanup(true);
            eprintln!("keeping {}", dir.path().display());
        }
        let data_dir = dir.path().join("data");
        std::fs::create_dir_all(&data_dir).unwrap();
        let cfg = dir.path().join("server.toml");
        // Test users have no Unix accounts: as root their jobs run as root (still sandboxed);
        // markers and times are written outside the sandbox, so they are allowed.
        let shared = ["markers", "times"].map(|d| dir.path().join(d));
        for d in &shared {
            std::fs::create_dir_all(d).unwrap();
        }
        let config = format!(
            "allow_root_jobs = true\n{config}\n[users]\n\"*\" = \"root\"\n[sandbox]\nread_write = [{:?}, {:?}]\n",
            shared[0], shared[1]
        );
        std::fs::write(&cfg, config).unwrap();
        TestServer {
            dir,
            data_dir,
            config: cfg,
            child: None,
            url: String::new(),
            starts: 0,
            port: None,
            env: Vec::new(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    fn log_tail(&self) -> String {
        let t = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// `koalesce token create USER [--admin] --data-dir DIR` → the token.
    fn token(&self, user: &str, admin: bool) -> String {
        let mut cmd = Command::new(BIN);
        cmd.args(["token", "create", user]);
        if admin {
            cmd.arg("--admin");
        }
        let out = cmd.arg("--data-dir").arg(&self.data_dir).output().unwrap();
        assert!(
            out.status.success(),
            "token create failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .and_then(|l| l.split_whitespace().last())
            .expect("token printed")
            .to_string()
    }

    /// Starts the server (`--listen 127.0.0.1:0`: it picks a port and writes it to
    /// `DIR/server.addr`; or the fixed `port`) and waits for `/healthz`.
    fn start(&mut self) {
        assert!(self.child.is_none());
        let addr_file = self.data_dir.join("server.addr");
        let _ = std::fs::remove_file(&addr_file);
        self.url.clear();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log_path()).unwrap();
        let child = Command::new(BIN)
            .arg("server")
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port.unwrap_or(0)))
            .arg("--config")
            .arg(&self.config)
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_os_str())))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        self.starts += 1;
        let t0 = Instant::now();
        loop {
            if self.url.is_empty() {
                if let Ok(a) = std::fs::read_to_string(&addr_file) {
                    if !a.trim().is_empty() {
                        self.url = format!("http://{}", a.trim());
                    }
                }
            }
            if !self.url.is_empty() {
                if let Ok((200, _)) = http(&self.url, "GET", "/healthz", None, None, b"") {
                    return;
                }
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("server exited during start-up ({status}):\n{}", self.log_tail());
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "server not ready:\n{}", self.log_tail());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL the server process (only it: components run in sessions of their own).
    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into()
}

/// One request; `Err` only for transport errors.
fn http(
    base: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<(u16, String), String> {
    thread_local! {
        static AGENT: ureq::Agent = agent();
    }
    let url = format!("{base}{path}");
    let auth = token.map(|t| format!("Bearer {t}"));
    AGENT.with(|a| {
        let result = match method {
            "GET" => {
                let mut r = a.get(&url);
                if let Some(h) = &auth {
                    r = r.header("Authorization", h);
                }
                r.call()
            }
            "DELETE" => {
                let mut r = a.delete(&url);
                if let Some(h) = &auth {
                    r = r.header("Authorization", h);
                }
                r.call()
            }
            _ => {
                let mut r = a.post(&url);
                if let Some(h) = &auth {
                    r = r.header("Authorization", h);
                }
                if let Some(ct) = content_type {
                    r = r.header("Content-Type", ct);
                }
                r.send(body)
            }
        };
        let mut resp = result.map_err(|e| format!("{method} {url}: {e}"))?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| format!("{method} {url}: reading body: {e}"))?;
        Ok((status, text))
    })
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Submits a job description; returns (status, body).
fn submit_raw(s: &TestServer, token: &str, toml: &str) -> (u16, String) {
    http(
        &s.url,
        "POST",
        "/api/v1/jobs",
        Some(token),
        Some("application/toml"),
        toml.as_bytes(),
    )
    .unwrap()
}

fn submit(s: &TestServer, token: &str, toml: &str) -> u64 {
    let (status, body) = submit_raw(s, token, toml);
    assert_eq!(status, 201, "submit answered {status}: {body}\n{toml}");
    json(&body)["id"].as_u64().unwrap()
}

fn get_job(s: &TestServer, token: &str, id: u64) -> (u16, Value) {
    let (status, body) = http(&s.url, "GET", &format!("/api/v1/jobs/{id}"), Some(token), None, b"").unwrap();
    (status, json(&body))
}

/// Waits until job `id` is in a final state; returns its detail.
fn wait_final(s: &TestServer, token: &str, id: u64, timeout: Duration) -> Value {
    let t0 = Instant::now();
    loop {
        let (status, v) = get_job(s, token, id);
        assert_eq!(status, 200, "{v}");
        let state = v["state"].as_str().unwrap_or_default();
        if matches!(state, "succeeded" | "failed" | "cancelled") {
            return v;
        }
        assert!(
            t0.elapsed() < timeout,
            "job {id} still {state} after {timeout:?}: {v}\n{}",
            s.log_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs the koalesce binary as a client; returns (exit code, stdout, stderr).
fn cli(s: &TestServer, token: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env("KOALESCE_URL", &s.url)
        .env("KOALESCE_TOKEN", token)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Files in the storage of every site whose name starts with `prefix` (the server's storage
/// names are the sanitized logical name plus a tag).
fn stored_files(s: &TestServer, prefix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(sites) = std::fs::read_dir(s.data_dir.join("sites")) else {
        return out;
    };
    for site in sites.flatten() {
        let Ok(files) = std::fs::read_dir(site.path().join("storage")) else {
            continue;
        };
        for f in files.flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            if name.starts_with(prefix) && !name.contains(".part.") {
                out.push(f.path());
            }
        }
    }
    out
}

// ----- (1) coupled job over three fixed sites ------------------------------------------

#[test]
fn coupled_job_starts_together_and_returns_its_output() {
    let _g = serial();
    let mut s = TestServer::new(&test_config(&[("alpha", 4), ("beta", 4), ("gamma", 4)]));
    let token = s.token("alice", false);
    s.start();
    let times = s.path().join("times");
    std::fs::create_dir_all(&times).unwrap();
    let job = format!(
        r#"name = "coupled-e2e"
executable = "/bin/sh"
arguments = ["-c", "t=$(date +%s%3N); echo $t > start.txt; echo $t > $TIMES/start.$KOALESCE_RANK; echo \"$KOALESCE_RANK $KOALESCE_SIZE $KOALESCE_SITE $KOALESCE_PEERS\" > $TIMES/env.$KOALESCE_RANK; sleep 1"]
runner = "coupled"
environment = {{ TIMES = "{}" }}
runtime_estimate = "1m"
outputs = ["start.txt"]

[[components]]
processors = 2
site = "alpha"

[[components]]
processors = 3
site = "beta"

[[components]]
processors = 4
site = "gamma"
"#,
        times.display()
    );
    let id = submit(&s, &token, &job);
    let detail = wait_final(&s, &token, id, Duration::from_secs(40));
    assert_eq!(detail["state"], "succeeded", "{detail}\n{}", s.log_tail());
    let sites: BTreeSet<&str> = detail["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["site"].as_str().unwrap())
        .collect();
    assert_eq!(sites, BTreeSet::from(["alpha", "beta", "gamma"]), "{detail}");

    // Every component started, and within 1 s of each other.
    let mut starts = Vec::new();
    for rank in 0..3 {
        let t: i64 = std::fs::read_to_string(times.join(format!("start.{rank}")))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        starts.push(t);
        let env = std::fs::read_to_string(times.join(format!("env.{rank}"))).unwrap();
        let f: Vec<&str> = env.split_whitespace().collect();
        assert_eq!(f[0], rank.to_string());
        assert_eq!(f[1], "3");
        assert_eq!(f[3].split(',').count(), 3, "KOALESCE_PEERS lists all components: {env}");
    }
    let spread = starts.iter().max().unwrap() - starts.iter().min().unwrap();
    assert!(spread <= 1000, "components started {spread} ms apart: {starts:?}");

    // The output comes back: registered as "<id>/start.txt", listed, stored, with rank 0's time.
    let logical = format!("{id}/start.txt");
    let t0 = Instant::now();
    let entry = loop {
        let (status, body) = http(&s.url, "GET", "/api/v1/files", Some(&token), None, b"").unwrap();
        assert_eq!(status, 200);
        if let Some(e) = json(&body).as_array().unwrap().iter().find(|f| f["name"] == logical.as_str()) {
            break e.clone();
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "output {logical} never registered: {body}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(entry["replicas"].as_array().unwrap().len(), 1, "{entry}");
    assert!(entry["replicas"][0].as_str().is_some_and(|r| sites.contains(r)));
    let (_, detail) = get_job(&s, &token, id);
    assert!(detail["outputs"].to_string().contains(&logical), "{detail}");
    let stored = stored_files(&s, &format!("{id}_start.txt"));
    assert_eq!(stored.len(), 1, "{stored:?}");
    let content: i64 = std::fs::read_to_string(&stored[0]).unwrap().trim().parse().unwrap();
    assert_eq!(content, starts[0], "the registered output is rank 0's");
    assert_eq!(entry["size_bytes"].as_u64(), Some(std::fs::metadata(&stored[0]).unwrap().len()));

    // The client shows it too.
    let (code, out, err) = cli(&s, &token, &["files", "ls"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&logical), "{out}");
    let (code, out, err) = cli(&s, &token, &["status", &id.to_string()]);
    assert_eq!(code, 0, "{err}");
    for word in [
        "SUCCEEDED",
        "submitted",
        "placed",
        "claimed",
        "started",
        "finished",
        "FTT",
        "PGT",
        "PWT",
        "TWT",
        "tries",
    ] {
        assert!(out.contains(word), "status lacks {word}:\n{out}");
    }
    let (code, _, err) = cli(&s, &token, &["wait", &id.to_string(), "--timeout", "5s"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cli(&s, &token, &["sites"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().next().unwrap().contains("IDLE") && out.contains("gamma"), "{out}");
    let (code, out, err) = cli(&s, &token, &["sites", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out).as_array().unwrap().len(), 3);
}

// ----- (2) ownership ------------------------------------------------------------------

#[test]
fn users_cannot_see_or_cancel_each_others_jobs() {
    let _g = serial();
    let mut s = TestServer::new(&test_config(&[("alpha", 4), ("beta", 4)]));
    let alice = s.token("alice", false);
    let bob = s.token("bob", false);
    let admin = s.token("root", true);
    s.start();
    let job = "name = \"long\"\nexecutable = \"/bin/sleep\"\narguments = [\"30\"]\n[[components]]\nprocessors = 1\n";
    let id = submit(&s, &alice, job);

    // Bob: 404 on the job, not in his listing, 404 on cancel (ids do not leak).
    let (status, v) = get_job(&s, &bob, id);
    assert_eq!(status, 404, "{v}");
    assert!(v["error"].is_string(), "{v}");
    let (status, body) = http(&s.url, "GET", "/api/v1/jobs", Some(&bob), None, b"").unwrap();
    assert_eq!(status, 200);
    assert!(json(&body).as_array().unwrap().is_empty(), "{body}");
    let (status, body) = http(&s.url, "POST", &format!("/api/v1/jobs/{id}/cancel"), Some(&bob), None, b"").unwrap();
    assert_eq!(status, 404, "{body}");
    assert!(json(&body)["error"].is_string());
    let (code, _, err) = cli(&s, &bob, &["cancel", &id.to_string()]);
    assert_ne!(code, 0);
    assert!(err.contains("404"), "the client prints the status: {err}");
    let (code, _, err) = cli(&s, &bob, &["status", &id.to_string()]);
    assert_ne!(code, 0);
    assert!(err.contains("404") && err.contains("not found"), "{err}");

    // Alice sees it; an admin sees it among all jobs; Alice cancels it.
    let (status, v) = get_job(&s, &alice, id);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["user"], "alice");
    let (status, body) = http(&s.url, "GET", "/api/v1/jobs?all=true", Some(&admin), None, b"").unwrap();
    assert_eq!(status, 200);
    assert!(json(&body).as_array().unwrap().iter().any(|j| j["id"] == id), "{body}");
    let (code, out, err) = cli(&s, &alice, &["jobs"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().next().unwrap().contains("SUBMITTED") && out.contains("long"), "{out}");
    let (code, _, _) = cli(&s, &alice, &["wait", &id.to_string(), "--timeout", "300ms"]);
    assert_eq!(code, 3, "wait exits 3 on timeout");
    let (code, out, err) = cli(&s, &alice, &["cancel", &id.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("cancelled"), "{out}");
    let v = wait_final(&s, &alice, id, Duration::from_secs(10));
    assert_eq!(v["state"], "cancelled");
    let (code, _, _) = cli(&s, &alice, &["wait", &id.to_string()]);
    assert_eq!(code, 1, "wait exits non-zero for a cancelled job");
    // Cancelling again: 409.
    let (status, body) = http(&s.url, "POST", &format!("/api/v1/jobs/{id}/cancel"), Some(&alice), None, b"").unwrap();
    assert_eq!(status, 409, "{body}");
}

// ----- (3) crash and restart ----------------------------------------------------------

/// xorshift64*: the test's reproducible randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// Finished jobs of the listing, or None when the server does not answer.
fn finished_count(url: &str, token: &str) -> Option<(usize, usize)> {
    let (status, body) = http(url, "GET", "/api/v1/jobs", Some(token), None, b"").ok()?;
    if status != 200 {
        return None;
    }
    let list = json(&body).as_array()?.clone();
    let done = list
        .iter()
        .filter(|j| matches!(j["state"].as_str(), Some("succeeded" | "failed" | "cancelled")))
        .count();
    Some((done, list.len()))
}

#[test]
fn every_component_runs_exactly_once_across_server_crashes() {
    let _g = serial();
    let seed: u64 = std::env::var("KOALESCE_E2E_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_240_611);
    eprintln!("crash test seed {seed} (set KOALESCE_E2E_SEED to reproduce another run)");
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut s = TestServer::new(&test_config(&[("s1", 6), ("s2", 6), ("s3", 6), ("s4", 6)]));
    let token = s.token("crash", false);
    s.start();
    // Restarts reuse the port, so the submitting client keeps its URL.
    s.port = Some(s.url.rsplit(':').next().unwrap().parse().unwrap());
    let url = s.url.clone();
    let markers = s.path().join("markers");
    std::fs::create_dir_all(&markers).unwrap();

    // The killer: SIGKILL at seeded random moments (during submission and execution), restart
    // on the same data dir.
    let kills = rng.range(3, 5);
    let plan: Vec<(u64, u64)> = (0..kills).map(|_| (rng.range(150, 1800), rng.range(0, 300))).collect();
    let server = std::sync::Arc::new(Mutex::new(s));
    let killer = {
        let server = server.clone();
        let (url, token) = (url.clone(), token.clone());
        std::thread::spawn(move || {
            let mut hit_unfinished = 0;
            for (k, (after, down)) in plan.iter().enumerate() {
                std::thread::sleep(Duration::from_millis(*after));
                let progress = finished_count(&url, &token);
                let mut s = server.lock().unwrap();
                s.kill9();
                if progress.is_some_and(|(done, listed)| done < listed) || progress.is_some_and(|(_, listed)| listed < 200) {
                    hit_unfinished += 1;
                }
                eprintln!(
                    "kill {} of {}: SIGKILL {after} ms after the previous start ({progress:?} finished/listed before)",
                    k + 1,
                    plan.len()
                );
                std::thread::sleep(Duration::from_millis(*down));
                s.start();
            }
            hit_unfinished
        })
    };

    // The workload: 200 small jobs, a quarter of them coupled over two components. A request
    // that fails because the server is down is retried (its job may then exist twice, which
    // is fine: every listed job must run exactly once).
    let mut acknowledged: BTreeSet<u64> = BTreeSet::new();
    let mut retries = 0;
    for i in 0..200u32 {
        let comps = if i % 4 == 0 { 2 } else { 1 };
        let mut job = format!(
            "name = \"crash-{i}\"\nexecutable = \"/bin/sh\"\n\
             arguments = [\"-c\", \"touch \\\"$MARKERS/$KOALESCE_JOB_ID.$KOALESCE_RANK.$$\\\"; sleep 0.2\"]\n\
             environment = {{ MARKERS = \"{}\" }}\nruntime_estimate = \"1m\"\npriority = \"{}\"\n",
            markers.display(),
            ["super-high", "high", "low", "super-low"][(i % 4) as usize]
        );
        if comps > 1 {
            job.push_str("runner = \"coupled\"\n");
        }
        for c in 0..comps {
            job.push_str(&format!("[[components]]\nprocessors = {}\n", 1 + (i + c) % 3));
        }
        let t0 = Instant::now();
        loop {
            match http(&url, "POST", "/api/v1/jobs", Some(&token), Some("application/toml"), job.as_bytes()) {
                Ok((201, body)) => {
                    acknowledged.insert(json(&body)["id"].as_u64().unwrap());
                    break;
                }
                Ok((status, body)) if status < 500 => panic!("submit answered {status}: {body}"),
                _ => {
                    retries += 1;
                    assert!(t0.elapsed() < Duration::from_secs(90), "server down for 90 s");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }
    let hit_unfinished = killer.join().unwrap();
    let s = server.lock().unwrap();
    eprintln!("{} jobs acknowledged ({retries} retried requests)", acknowledged.len());
    assert!(hit_unfinished > 0, "no kill hit unfinished work: the test proved nothing");

    // Wait for the whole workload: as long as it makes progress (a loaded machine runs it
    // slowly), failing when nothing finished for a minute or after five minutes in all.
    let t0 = Instant::now();
    let (mut last_done, mut last_progress) = (0, Instant::now());
    let jobs = loop {
        let (status, body) = http(&s.url, "GET", "/api/v1/jobs", Some(&token), None, b"").unwrap();
        assert_eq!(status, 200, "{body}");
        let list = json(&body).as_array().unwrap().clone();
        let done = list
            .iter()
            .filter(|j| matches!(j["state"].as_str(), Some("succeeded" | "failed" | "cancelled")))
            .count();
        if done == list.len() && list.len() >= acknowledged.len() {
            break list;
        }
        if done > last_done {
            (last_done, last_progress) = (done, Instant::now());
        }
        assert!(
            last_progress.elapsed() < Duration::from_secs(60) && t0.elapsed() < Duration::from_secs(300),
            "{done}/{} jobs finished after {:?} (the last finished {:?} ago)\n{}",
            list.len(),
            t0.elapsed(),
            last_progress.elapsed(),
            s.log_tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let listed: BTreeMap<u64, u32> = jobs
        .iter()
        .map(|j| (j["id"].as_u64().unwrap(), j["components"].as_u64().unwrap() as u32))
        .collect();
    let lost: Vec<&u64> = acknowledged.iter().filter(|id| !listed.contains_key(id)).collect();
    assert!(lost.is_empty(), "acknowledged jobs lost in the crashes: {lost:?}");
    let failed: Vec<String> = jobs.iter().filter(|j| j["state"] != "succeeded").map(|j| j.to_string()).collect();
    assert!(failed.is_empty(), "jobs not succeeded:\n{}", failed.join("\n"));

    // Exactly one marker per job and component.
    let mut count: BTreeMap<(u64, u32), u32> = BTreeMap::new();
    for f in std::fs::read_dir(&markers).unwrap().flatten() {
        let name = f.file_name().to_string_lossy().into_owned();
        let parts: Vec<&str> = name.split('.').collect();
        assert_eq!(parts.len(), 3, "odd marker {name}");
        *count.entry((parts[0].parse().unwrap(), parts[1].parse().unwrap())).or_default() += 1;
    }
    let mut problems = Vec::new();
    for (&id, &comps) in &listed {
        for rank in 0..comps {
            match count.remove(&(id, rank)) {
                Some(1) => {}
                Some(n) => problems.push(format!("job {id} component {rank} ran {n} times")),
                None => problems.push(format!("job {id} component {rank} never ran")),
            }
        }
    }
    for ((id, rank), n) in count {
        problems.push(format!("unexpected marker for job {id} component {rank} ({n})"));
    }
    assert!(
        problems.is_empty(),
        "{} problems after {kills} crashes (seed {seed}):\n{}",
        problems.len(),
        problems.join("\n")
    );
    eprintln!(
        "{} jobs succeeded, each component exactly once, after {kills} crashes",
        listed.len()
    );
}

// ----- (4) bad input ------------------------------------------------------------------

/// Sends a request whose Content-Length is over the limit, writing the body from another
/// thread (the server may answer before reading it); returns the status line's code.
fn oversized_status(url: &str, token: &str, bytes: usize) -> u16 {
    let addr = url.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "POST /api/v1/jobs HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/toml\r\nContent-Length: {bytes}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    let mut w = stream.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let chunk = vec![b'#'; 64 * 1024];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(chunk.len());
            if w.write_all(&chunk[..n]).is_err() {
                break;
            }
            left -= n;
        }
    });
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut tmp) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let _ = writer.join();
    let text = String::from_utf8_lossy(&buf);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"))
}

#[test]
fn bad_input_answers_4xx_naming_the_reason_and_the_server_keeps_serving() {
    let _g = serial();
    let mut s = TestServer::new(&test_config(&[("alpha", 4), ("beta", 8)]));
    let token = s.token("carol", false);
    s.start();
    let good = "name = \"ok\"\nexecutable = \"/bin/true\"\n[[components]]\nprocessors = 1\n";
    let cases: [(&str, String, u16, &[&str]); 6] = [
        ("malformed TOML", "name = = \"x\"\n".into(), 400, &["TOML"]),
        (
            "unknown key",
            "name = \"x\"\nexecutable = \"/bin/true\"\nwalltime = 5\n[[components]]\nprocessors = 1\n".into(),
            422,
            &["walltime"],
        ),
        (
            "fixed site that does not exist",
            "name = \"x\"\nexecutable = \"/bin/true\"\n[[components]]\nprocessors = 1\nsite = \"atlantis\"\n".into(),
            422,
            &["atlantis"],
        ),
        (
            "component larger than every site",
            "name = \"x\"\nexecutable = \"/bin/true\"\n[[components]]\nprocessors = 1\n[[components]]\nprocessors = 500\n".into(),
            422,
            &["500", "processors"],
        ),
        (
            "input file missing from the catalogue",
            "name = \"x\"\nexecutable = \"/bin/true\"\ninputs = [\"ghost.dat\"]\n[[components]]\nprocessors = 1\n".into(),
            422,
            &["ghost.dat"],
        ),
        (
            "missing required field",
            "executable = \"/bin/true\"\n[[components]]\nprocessors = 1\n".into(),
            422,
            &["name"],
        ),
    ];
    for (what, body, want, words) in &cases {
        let (status, text) = submit_raw(&s, &token, body);
        assert_eq!(status, *want, "{what}: {text}");
        let msg = json(&text)["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: no error field: {text}"))
            .to_string();
        for w in *words {
            assert!(msg.contains(w), "{what}: message does not name '{w}': {msg}");
        }
        // Still serving: a good job is accepted right after.
        let (status, text) = submit_raw(&s, &token, good);
        assert_eq!(status, 201, "after {what}: {text}");
    }

    // The client prints the server's message verbatim with the status.
    let bad = s.path().join("bad.toml");
    std::fs::write(&bad, &cases[1].1).unwrap();
    let (code, _, err) = cli(&s, &token, &["submit", bad.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("422") && err.contains("walltime"), "{err}");

    // Oversized request: 413.
    assert_eq!(oversized_status(&s.url, &token, 2 << 20), 413);
    let (status, text) = submit_raw(&s, &token, good);
    assert_eq!(status, 201, "after oversized: {text}");

    // Bad and missing tokens: 401 with a message.
    for tok in [Some("not-a-token"), None] {
        let (status, text) = http(&s.url, "GET", "/api/v1/jobs", tok, None, b"").unwrap();
        assert_eq!(status, 401, "{text}");
        assert!(json(&text)["error"].as_str().is_some_and(|m| m.contains("token")), "{text}");
    }
    let (code, _, err) = cli(&s, "not-a-token", &["jobs"]);
    assert_ne!(code, 0);
    assert!(err.contains("401"), "{err}");

    // Bad file registrations: a server path from a user who may not register one (403, naming
    // the field), unknown site.
    let body = serde_json::json!({"name": "f", "path": "/nonexistent/file", "site": "alpha"}).to_string();
    let (status, text) = http(
        &s.url,
        "POST",
        "/api/v1/files",
        Some(&token),
        Some("application/json"),
        body.as_bytes(),
    )
    .unwrap();
    assert_eq!(status, 403, "{text}");
    assert!(json(&text)["error"].as_str().unwrap().contains("path"), "{text}");
    let real = s.path().join("real.dat");
    std::fs::write(&real, b"data").unwrap();
    let body = serde_json::json!({"name": "f", "path": real, "site": "nowhere"}).to_string();
    let (status, text) = http(
        &s.url,
        "POST",
        "/api/v1/files",
        Some(&token),
        Some("application/json"),
        body.as_bytes(),
    )
    .unwrap();
    assert_eq!(status, 422, "{text}");
    assert!(json(&text)["error"].as_str().unwrap().contains("nowhere"), "{text}");

    // A connection error names the URL.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let out = Command::new(BIN).args(["jobs", "--url", &dead, "--token", "x"]).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&dead),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // And it keeps serving.
    let (status, _) = http(&s.url, "GET", "/healthz", None, None, b"").unwrap();
    assert_eq!(status, 200);
    let (status, body) = http(&s.url, "GET", "/api/v1/jobs", Some(&token), None, b"").unwrap();
    assert_eq!(status, 200);
    assert_eq!(json(&body).as_array().unwrap().len(), cases.len() + 1);
}

// ----- a stage-out interrupted by SIGKILL ---------------------------------------------

fn succeeded_count(s: &TestServer) -> u64 {
    let (_, text) = http(&s.url, "GET", "/metrics", None, None, b"").unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("koalesce_jobs{state=\"succeeded\"} "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no succeeded count in /metrics:\n{text}"))
}

/// The daemon is SIGKILLed while a succeeded job's outputs are being staged out (after the
/// first of two was registered: failure injection holds the stage-out there, as a real daemon
/// cannot be stopped on cue between two outputs). After the restart the stage-out is redone:
/// the job ends succeeded with both outputs registered once, counted once, and the job that
/// depends on it (afterok) starts only then and reads both.
#[test]
fn a_stage_out_interrupted_by_sigkill_is_redone_after_the_restart() {
    let _g = serial();
    let mut s = TestServer::new(&test_config(&[("alpha", 2)]));
    let token = s.token("alice", false);
    let hold = s.path().join("hold-stage-out");
    let reached = s.path().join("hold-stage-out.reached");
    std::fs::write(&hold, "").unwrap();
    s.env.push(("KOALESCE_FAULT_STAGE_OUT_HOLD", hold.clone()));
    s.start();
    let parent = submit(
        &s,
        &token,
        "name = \"parent\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"echo one > first.txt; echo two > second.txt\"]\n\
         outputs = [\"first.txt\", \"second.txt\"]\n[[components]]\nprocessors = 1\n",
    );
    let script =
        format!("grep -qx one \\\"$KOALESCE_INPUT_{parent}_FIRST_TXT\\\" && grep -qx two \\\"$KOALESCE_INPUT_{parent}_SECOND_TXT\\\"");
    let child = submit(
        &s,
        &token,
        &format!(
            "name = \"child\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"{script}\"]\nafterok = [{parent}]\n\
             inputs = [\"{parent}/first.txt\", \"{parent}/second.txt\"]\n[[components]]\nprocessors = 1\n"
        ),
    );
    let t0 = Instant::now();
    while !reached.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the stage-out never reached the hold:\n{}",
            s.log_tail()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Succeeded, its first output registered, the second not: shown as still running, and
    // the dependent waits.
    let (_, p) = get_job(&s, &token, parent);
    assert_eq!(p["state"], "running", "{p}");
    let (_, c) = get_job(&s, &token, child);
    assert_eq!(c["state"], "held", "{c}");
    s.kill9();
    std::fs::remove_file(&hold).unwrap();
    s.start();
    let p = wait_final(&s, &token, parent, Duration::from_secs(30));
    assert_eq!(p["state"], "succeeded", "{p}");
    let mut outputs: Vec<String> = p["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap().to_string())
        .collect();
    outputs.sort();
    assert_eq!(outputs, [format!("{parent}/first.txt"), format!("{parent}/second.txt")]);
    let c = wait_final(&s, &token, child, Duration::from_secs(30));
    assert_eq!(c["state"], "succeeded", "the dependent read both outputs: {c}\n{}", s.log_tail());
    assert!(c["started_ms"].as_u64() > p["finished_ms"].as_u64(), "{p}\n{c}");
    // Each output registered once, with one replica, and one stored copy.
    let (code, body) = http(&s.url, "GET", "/api/v1/files", Some(&token), None, b"").unwrap();
    assert_eq!(code, 200, "{body}");
    let files = json(&body);
    for name in ["first.txt", "second.txt"] {
        let logical = format!("{parent}/{name}");
        let entries: Vec<&Value> = files.as_array().unwrap().iter().filter(|f| f["name"] == logical.as_str()).collect();
        assert_eq!(entries.len(), 1, "{logical}: {files}");
        assert_eq!(entries[0]["replicas"].as_array().map(|r| r.len()), Some(1), "{logical}: {files}");
    }
    assert_eq!(
        stored_files(&s, &format!("{parent}_first.txt")).len() + stored_files(&s, &format!("{parent}_second.txt")).len(),
        2
    );
    assert_eq!(succeeded_count(&s), 2, "parent and child, each counted once");
}
