//! A shaped network bed (`koalesce netbed`) and storage agents inside its namespaces, for
//! the tests that move data over real shaped links. Everything is torn down when dropped.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use koalesce_server::dataplane::Endpoint;

pub const KOALESCE: &str = env!("CARGO_BIN_EXE_koalesce");
pub const SECRET: &str = "netbed-test-secret-0123";
/// Port of every agent's listener inside its namespace (namespaces do not share ports).
pub const DATA_PORT: u16 = 7000;

/// The tests that move data take turns: a rate measured while another test's agents hash
/// and move their own megabytes on the same two cores would measure the CPU, not the link.
static MOVING_DATA: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    MOVING_DATA.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn require_root() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "these tests need root: they create network namespaces and shape links with tc (CI runs as root)"
    );
}

/// A bed that goes down when dropped (also when the test fails).
pub struct Bed {
    pub dir: tempfile::TempDir,
    pub status: serde_json::Value,
}

impl Bed {
    pub fn up(config: &str) -> Bed {
        require_root();
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("netbed.toml");
        std::fs::write(&cfg, config).unwrap();
        let out = Command::new(KOALESCE)
            .args(["netbed", "up", "--require-namespaces", "--dir"])
            .arg(dir.path())
            .arg("--config")
            .arg(&cfg)
            .output()
            .unwrap();
        let mut bed = Bed {
            dir,
            status: serde_json::Value::Null,
        };
        assert!(out.status.success(), "netbed up: {}", String::from_utf8_lossy(&out.stderr));
        let out = Command::new(KOALESCE)
            .args(["netbed", "status", "--json", "--dir"])
            .arg(bed.dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "netbed status: {}", String::from_utf8_lossy(&out.stderr));
        bed.status = serde_json::from_slice(&out.stdout).unwrap();
        bed
    }

    pub fn prefix(&self) -> String {
        self.status["plan"]["prefix"].as_str().unwrap().to_string()
    }

    pub fn netns(&self, site: &str) -> String {
        format!("{}-{site}", self.prefix())
    }

    pub fn address(&self, site: &str) -> String {
        let ns = self.netns(site);
        let all = self.status["plan"]["namespaces"].as_array().unwrap();
        let n = all.iter().find(|n| n["name"] == ns.as_str()).unwrap();
        n["address"].as_str().unwrap().to_string()
    }

    /// Bytes sent so far by `dev` inside `site`'s namespace (every header and resend included).
    pub fn tx_bytes(&self, site: &str, dev: &str) -> u64 {
        let out = Command::new("ip")
            .args(["-n", &self.netns(site), "-s", "-j", "link", "show", "dev", dev])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v[0]["stats64"]["tx"]["bytes"].as_u64().unwrap()
    }
}

impl Bed {
    /// Shapes `dev` in `site`'s namespace (its egress) to `kbit` kbit/s from now on.
    pub fn reshape(&self, site: &str, dev: &str, kbit: u32) {
        let out = Command::new("tc")
            .args(["-n", &self.netns(site), "qdisc", "change", "dev", dev, "root", "tbf", "rate"])
            .arg(format!("{kbit}kbit"))
            .args(["burst", "65536", "latency", "100ms"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let out = Command::new(KOALESCE)
            .args(["netbed", "down", "--dir"])
            .arg(self.dir.path())
            .output();
        if let Ok(out) = out {
            if !out.status.success() {
                eprintln!("netbed down: {}", String::from_utf8_lossy(&out.stderr));
            }
        }
    }
}

/// A storage agent inside a site's namespace: control side on the host's loopback, data
/// side on the site's address. Killed when dropped.
pub struct Agent {
    pub child: Child,
    pub root: PathBuf,
    /// As the test (host namespace) reaches it.
    pub control: Endpoint,
    /// As other agents reach it through the shaped links.
    pub data: Endpoint,
}

impl Agent {
    pub fn start(bed: &Bed, site: &str, root: &Path) -> Agent {
        std::fs::create_dir_all(root).unwrap();
        let token = bed.dir.path().join("secret");
        std::fs::write(&token, SECRET).unwrap();
        let addr_file = root.with_extension("addr");
        let _ = std::fs::remove_file(&addr_file);
        let data_addr = format!("{}:{DATA_PORT}", bed.address(site));
        let child = Command::new(KOALESCE)
            .args([
                "storage-agent",
                "--listen",
                "127.0.0.1:0",
                "--netns",
                &bed.netns(site),
                "--netns-listen",
                &data_addr,
            ])
            .arg("--root")
            .arg(root)
            .arg("--token-file")
            .arg(&token)
            .arg("--addr-file")
            .arg(&addr_file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut agent = Agent {
            child,
            root: root.to_path_buf(),
            control: Endpoint::new("", SECRET),
            data: Endpoint::new(format!("http://{data_addr}"), SECRET),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let addr: SocketAddr = loop {
            if let Some(a) = std::fs::read_to_string(&addr_file).ok().and_then(|s| s.trim().parse().ok()) {
                break a;
            }
            if let Ok(Some(status)) = agent.child.try_wait() {
                panic!("the agent for {site} exited: {status}");
            }
            assert!(Instant::now() < deadline, "the agent for {site} did not start");
            std::thread::sleep(Duration::from_millis(20));
        };
        agent.control = Endpoint::new(format!("http://{addr}"), SECRET);
        agent
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sites a and b, the link shaped to `ab` Mbit/s from a to b and `ba` back.
pub fn two_sites(ab: u32, ba: u32) -> String {
    format!("[[sites]]\nname = \"a\"\n[[sites]]\nname = \"b\"\n[[links]]\nfrom = \"a\"\nto = \"b\"\nmbit = {ab}\nreverse_mbit = {ba}\n")
}

/// A `koalesce server` process (its config written by the test), killed when dropped.
pub struct Server {
    child: Child,
    pub url: String,
    pub data_dir: PathBuf,
    http: ureq::Agent,
}

impl Server {
    pub fn start(dir: &Path, config: &str) -> Server {
        let data_dir = dir.join("data");
        std::fs::create_dir_all(&data_dir).unwrap();
        let cfg = dir.join("server.toml");
        std::fs::write(&cfg, config).unwrap();
        let log = std::fs::File::create(dir.join("server.log")).unwrap();
        let child = Command::new(KOALESCE)
            .arg("server")
            .arg("--data-dir")
            .arg(&data_dir)
            .args(["--listen", "127.0.0.1:0", "--config"])
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let http: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .into();
        let mut srv = Server {
            child,
            url: String::new(),
            data_dir,
            http,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(a) = std::fs::read_to_string(srv.data_dir.join("server.addr")) {
                if !a.trim().is_empty() {
                    srv.url = format!("http://{}", a.trim());
                    if srv.request("GET", "/healthz", None, "").0 == 200 {
                        return srv;
                    }
                }
            }
            if let Ok(Some(status)) = srv.child.try_wait() {
                panic!(
                    "server exited ({status}): {}",
                    std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "server not ready");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `koalesce token create USER --admin`.
    pub fn token(&self, user: &str) -> String {
        let out = Command::new(KOALESCE)
            .args(["token", "create", user, "--admin", "--data-dir"])
            .arg(&self.data_dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .and_then(|l| l.split_whitespace().last())
            .unwrap()
            .to_string()
    }

    /// (status, body) of one request.
    pub fn request(&self, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
        let url = format!("{}{path}", self.url);
        let auth = token.map(|t| format!("Bearer {t}")).unwrap_or_default();
        let ct = if path.starts_with("/api/v1/files") {
            "application/json"
        } else {
            "application/toml"
        };
        let r = match method {
            "GET" => self.http.get(&url).header("authorization", &auth).call(),
            _ => self
                .http
                .post(&url)
                .header("authorization", &auth)
                .header("content-type", ct)
                .send(body.as_bytes()),
        };
        match r {
            Ok(mut resp) => (resp.status().as_u16(), resp.body_mut().read_to_string().unwrap_or_default()),
            Err(_) => (0, String::new()),
        }
    }

    pub fn json(&self, path: &str, token: &str) -> serde_json::Value {
        let (code, body) = self.request("GET", path, Some(token), "");
        assert_eq!(code, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
