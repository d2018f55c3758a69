//! What the `koalesce server` end-to-end tests (server_e2e, server_crash, server_bad_input,
//! stage_out_crash) share: a real server child on a temporary data dir that survives restarts,
//! raw HTTP requests, job submission and waiting, and the CLI run as a client.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_koalesce");

/// Serializes the tests of a file (the server end-to-end files run one binary at a time).
pub static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Small sites and prompt scheduling for tests.
pub fn test_config(sites: &[(&str, u32)]) -> String {
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

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A `koalesce server` child on a data dir that survives restarts.
pub struct TestServer {
    pub dir: tempfile::TempDir,
    pub data_dir: PathBuf,
    pub config: PathBuf,
    pub child: Option<Child>,
    pub url: String,
    pub starts: u32,
    /// Restart on the same port (so clients keep their URL); None: let the server pick.
    pub port: Option<u16>,
    /// Extra environment of the server process (failure injection).
    pub env: Vec<(&'static str, PathBuf)>,
}

impl TestServer {
    pub fn new(config: &str) -> Self {
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

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    pub fn log_tail(&self) -> String {
        let t = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// `koalesce token create USER [--admin] --data-dir DIR` → the token.
    pub fn token(&self, user: &str, admin: bool) -> String {
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
    pub fn start(&mut self) {
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
    pub fn kill9(&mut self) {
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

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into()
}

/// One request; `Err` only for transport errors.
pub fn http(
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

pub fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Submits a job description; returns (status, body).
pub fn submit_raw(s: &TestServer, token: &str, toml: &str) -> (u16, String) {
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

pub fn submit(s: &TestServer, token: &str, toml: &str) -> u64 {
    let (status, body) = submit_raw(s, token, toml);
    assert_eq!(status, 201, "submit answered {status}: {body}\n{toml}");
    json(&body)["id"].as_u64().unwrap()
}

pub fn get_job(s: &TestServer, token: &str, id: u64) -> (u16, Value) {
    let (status, body) = http(&s.url, "GET", &format!("/api/v1/jobs/{id}"), Some(token), None, b"").unwrap();
    (status, json(&body))
}

/// Waits until job `id` is in a final state; returns its detail.
pub fn wait_final(s: &TestServer, token: &str, id: u64, timeout: Duration) -> Value {
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
pub fn cli(s: &TestServer, token: &str, args: &[&str]) -> (i32, String, String) {
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
pub fn stored_files(s: &TestServer, prefix: &str) -> Vec<PathBuf> {
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
