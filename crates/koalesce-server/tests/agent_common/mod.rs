//! Helpers for the storage agent's tests: agents on temporary roots, content, raw HTTP.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use koalesce_server::agent::{AgentConfig, BackgroundAgent};
use koalesce_server::dataplane::{AgentClient, ClientConfig, Endpoint, Expected};

pub const SECRET: &str = "test-secret-0123456789";

/// An agent serving a fresh temporary root.
pub struct TestAgent {
    pub agent: BackgroundAgent,
    pub root: PathBuf,
    pub ep: Endpoint,
    _dir: tempfile::TempDir,
}

impl TestAgent {
    pub fn start() -> TestAgent {
        Self::with(|_| {})
    }

    /// With the configuration adjusted (short timeouts are common in tests).
    pub fn with(adjust: impl FnOnce(&mut AgentConfig)) -> TestAgent {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        let mut config = AgentConfig::new(&root, SECRET);
        config.min_free_bytes = 0;
        adjust(&mut config);
        let agent = BackgroundAgent::start(config).expect("agent starts");
        let ep = Endpoint::new(agent.url(), SECRET);
        TestAgent {
            agent,
            root,
            ep,
            _dir: dir,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.agent.addr()
    }

    /// A directory beside the root (outside it).
    pub fn outside(&self) -> PathBuf {
        let p = self.root.parent().unwrap().join("outside");
        std::fs::create_dir_all(&p).unwrap();
        p
    }
}

pub fn client() -> AgentClient {
    AgentClient::new(ClientConfig {
        connect_timeout: Duration::from_secs(2),
        response_timeout: Duration::from_secs(10),
        io_timeout: Duration::from_secs(5),
        push_min_rate_bps: 1e6,
    })
}

/// Deterministic pseudo-random content.
pub fn content(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

pub fn sha(data: &[u8]) -> String {
    koalesce_server::store::sha256_hex(data)
}

pub fn expected(data: &[u8]) -> Expected {
    Expected {
        sha256: sha(data),
        size: data.len() as u64,
    }
}

/// Writes `data` to a file under `dir` and returns its path.
pub fn local_file(dir: &Path, name: &str, data: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, data).unwrap();
    p
}

/// A raw HTTP/1.1 exchange (Connection: close): the path and headers go out exactly as given.
pub fn raw(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    let mut has_length = false;
    for (k, v) in headers {
        has_length |= k.eq_ignore_ascii_case("content-length") || k.eq_ignore_ascii_case("transfer-encoding");
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !has_length {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let _ = s.write_all(body);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    parse_response(&out)
}

pub fn parse_response(out: &[u8]) -> (u16, String, Vec<u8>) {
    let split = out.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4).unwrap_or(out.len());
    let head = String::from_utf8_lossy(&out[..split]).into_owned();
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, head, out[split..].to_vec())
}

pub fn bearer() -> String {
    format!("Bearer {SECRET}")
}

/// Waits until `f` holds (polling every 20 ms), at most `secs`.
pub fn wait_until(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}
