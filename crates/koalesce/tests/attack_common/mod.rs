//! What the attack tests share: a `koalesce server` child on its own data dir, test accounts
//! and control groups removed on drop, job descriptions, waiting.
#![allow(dead_code)]
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_koalesce");

/// One attack at a time: they load the machine (2,000 connections) and use root-wide state.
pub static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this attack test needs root (user mapping, control groups), as CI has"
    );
}

pub fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// A Unix account for the test, removed on drop.
pub struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

impl Account {
    pub fn new(tag: &str) -> Account {
        let name = format!("ksec1{tag}{}", std::process::id() % 100_000);
        let _ = Command::new("userdel").arg(&name).stderr(Stdio::null()).status();
        let ok = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
            ])
            .arg(&name)
            .status()
            .expect("useradd runs");
        assert!(ok.success(), "useradd {name} failed");
        let u = nix::unistd::User::from_name(&name).unwrap().expect("account exists");
        Account {
            name,
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
        }
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).status();
    }
}

/// The cgroup directories of this test run, removed on drop (they are empty by then).
pub struct CgroupParent(pub String);

impl CgroupParent {
    pub fn new() -> Self {
        CgroupParent(format!("ksec1-{}", std::process::id()))
    }
}

impl Drop for CgroupParent {
    fn drop(&mut self) {
        for c in ["memory", "pids", "freezer"] {
            let dir = Path::new("/sys/fs/cgroup").join(c).join(&self.0);
            if let Ok(rd) = std::fs::read_dir(&dir) {
                for e in rd.flatten().filter(|e| e.path().is_dir()) {
                    let _ = std::fs::remove_dir(e.path());
                }
            }
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// A `koalesce server` child on its own data dir.
pub struct Server {
    pub tmp: tempfile::TempDir,
    pub data: PathBuf,
    pub config: PathBuf,
    pub child: Option<Child>,
    pub addr: Option<SocketAddr>,
}

impl Server {
    /// `config`: the server config's TOML (sites, users, limits). One site `s1` by default.
    pub fn new(config: &str) -> Server {
        let tmp = tempfile::Builder::new().prefix("ksec1-").tempdir().unwrap();
        let data = tmp.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let cfg = tmp.path().join("server.toml");
        std::fs::write(&cfg, config).unwrap();
        Server {
            tmp,
            data,
            config: cfg,
            child: None,
            addr: None,
        }
    }

    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    /// Kills the server (SIGKILL: no shutdown of any kind) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.addr = None;
    }

    /// `koalesce token create USER [--admin] [--expires D] --data-dir DIR`.
    pub fn token(&self, user: &str, admin: bool, expires: Option<&str>) -> String {
        let mut cmd = Command::new(BIN);
        cmd.args(["token", "create", user]).arg("--data-dir").arg(&self.data);
        if admin {
            cmd.arg("--admin");
        }
        if let Some(e) = expires {
            cmd.args(["--expires", e]);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Starts the server through `wrap` (e.g. `prlimit`, or as another account).
    pub fn start_with(&mut self, prefix: &[&str], as_account: Option<&Account>) {
        let addr_file = self.data.join("server.addr");
        let _ = std::fs::remove_file(&addr_file);
        let log = std::fs::File::create(self.path().join("server.log")).unwrap();
        let mut cmd = match prefix.split_first() {
            Some((p, rest)) => {
                let mut c = Command::new(p);
                c.args(rest).arg(BIN);
                c
            }
            None => Command::new(BIN),
        };
        cmd.arg("server")
            .arg("--data-dir")
            .arg(&self.data)
            .args(["--listen", "127.0.0.1:0", "--config"])
            .arg(&self.config)
            // Something only the daemon has: jobs must not see it.
            .env("KSEC1_DAEMON_SECRET", "daemon-only")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        if let Some(a) = as_account {
            cmd.uid(a.uid).gid(a.gid);
        }
        self.child = Some(cmd.spawn().unwrap());
        self.wait_ready();
    }

    /// Starts the server and returns at once (see [`Server::wait_ready`]).
    pub fn spawn(&mut self) {
        let _ = std::fs::remove_file(self.data.join("server.addr"));
        let log = std::fs::File::create(self.path().join("server.log")).unwrap();
        let child = Command::new(BIN)
            .arg("server")
            .arg("--data-dir")
            .arg(&self.data)
            .args(["--listen", "127.0.0.1:0", "--config"])
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// Waits until the server wrote its address and answers `/healthz`.
    pub fn wait_ready(&mut self) {
        let addr_file = self.data.join("server.addr");
        let t0 = Instant::now();
        loop {
            if let Some(a) = std::fs::read_to_string(&addr_file).ok().and_then(|a| a.trim().parse().ok()) {
                self.addr = Some(a);
                if self.request("GET", "/healthz", None, b"").0 == 200 {
                    return;
                }
            }
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("server exited ({st}):\n{}", self.log());
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "server not ready:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn start(&mut self) {
        self.start_with(&[], None);
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.path().join("server.log")).unwrap_or_default()
    }

    pub fn request(&self, method: &str, path: &str, token: Option<&str>, body: &[u8]) -> (u16, String) {
        let ct = if path.starts_with("/api/v1/jobs") {
            "application/toml"
        } else {
            "application/json"
        };
        koalesce_server::http_request(self.addr.unwrap(), method, path, token, Some(ct), body).unwrap_or((0, String::new()))
    }

    /// `PUT /api/v1/files/{name}?site=SITE` with `content` (`name` percent-encoded here).
    pub fn upload(&self, token: &str, name: &str, site: &str, content: &[u8]) -> (u16, String) {
        let enc: String = name
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        let path = format!("/api/v1/files/{enc}?site={site}");
        koalesce_server::http_request(
            self.addr.unwrap(),
            "PUT",
            &path,
            Some(token),
            Some("application/octet-stream"),
            content,
        )
        .unwrap_or((0, String::new()))
    }

    pub fn submit(&self, token: &str, toml: &str) -> u64 {
        let (code, body) = self.request("POST", "/api/v1/jobs", Some(token), toml.as_bytes());
        assert_eq!(code, 201, "{body}\n{}", self.log());
        json(&body)["id"].as_u64().unwrap()
    }

    pub fn job(&self, token: &str, id: u64) -> Value {
        let (code, body) = self.request("GET", &format!("/api/v1/jobs/{id}"), Some(token), b"");
        assert_eq!(code, 200, "{body}");
        json(&body)
    }

    pub fn wait_state(&self, token: &str, id: u64, states: &[&str], secs: u64) -> Value {
        let t0 = Instant::now();
        loop {
            let j = self.job(token, id);
            if states.contains(&j["state"].as_str().unwrap_or("")) {
                return j;
            }
            assert!(t0.elapsed() < Duration::from_secs(secs), "job {id} stuck: {j}\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs the koalesce client: (exit code, stdout, stderr).
    pub fn cli(&self, token: &str, args: &[&str]) -> (i32, String, String) {
        let out = Command::new(BIN)
            .args(args)
            .env("KOALESCE_URL", format!("http://{}", self.addr.unwrap()))
            .env("KOALESCE_TOKEN", token)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn config(extra_top: &str, extra_tables: &str) -> String {
    format!(
        "{extra_top}\npoll_interval_ms = 50\n[[sites]]\nname = \"s1\"\nprocessors = 8\n\
         [scheduler]\nplace_on_submit = true\nmin_claim_retry_ms = 100\n\
         scan_interval = {{ kind = \"fixed\", interval_ms = 100 }}\n{extra_tables}\n"
    )
}

/// A TOML string literal.
pub fn q(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

pub fn shell_job(name: &str, script: &str, env: &[(&str, String)], extra: &str) -> String {
    let env: Vec<String> = env.iter().map(|(k, v)| format!("{k} = {}", q(v))).collect();
    format!(
        "name = {}\nexecutable = \"/bin/sh\"\narguments = [\"-c\", {}]\nenvironment = {{ {} }}\n{extra}\n[[components]]\nprocessors = 1\n",
        q(name),
        q(script),
        env.join(", ")
    )
}

/// The record directory of a job's first component (from its stdout path).
pub fn record_dir(job: &Value) -> PathBuf {
    Path::new(job["components"][0]["stdout"].as_str().expect("stdout path"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(secs), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
