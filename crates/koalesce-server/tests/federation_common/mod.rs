//! Helpers for the federation's tests (issue 14): peered servers on free loopback ports, grid
//! jobs, content, a fake origin that serves an input as a test wants.
#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use koalesce_server::peer::{FederationConfig, PeerAlgorithm, PeerConfig};
use koalesce_server::BackgroundServer;
use serde_json::{json, Value};

use crate::common::{json, supervisor};

pub const SECRET: &str = "alpha-beta-pair-secret-0123456789";

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A server named `name` with `sites`, listening on `port`, peered with `peers` (name, port).
pub fn server(dir: &Path, name: &str, port: u16, sites: &[(&str, u32)], peers: &[(&str, u16)]) -> BackgroundServer {
    server_with(dir, name, port, sites, peers, PeerAlgorithm::SenderInitiated)
}

pub fn server_with(
    dir: &Path,
    name: &str,
    port: u16,
    sites: &[(&str, u32)],
    peers: &[(&str, u16)],
    algorithm: PeerAlgorithm,
) -> BackgroundServer {
    server_tuned(dir, name, port, sites, peers, |f| f.algorithm = algorithm)
}

pub fn server_tuned(
    dir: &Path,
    name: &str,
    port: u16,
    sites: &[(&str, u32)],
    peers: &[(&str, u16)],
    tune: impl FnOnce(&mut FederationConfig),
) -> BackgroundServer {
    BackgroundServer::start(options(dir, name, port, sites, peers, tune)).expect("server starts")
}

/// As [`server`], every site's storage a storage agent on loopback (root `dir/agent-<site>`):
/// the server, and each site's agent.
pub fn server_with_agents(
    dir: &Path,
    name: &str,
    port: u16,
    sites: &[(&str, u32)],
    peers: &[(&str, u16)],
) -> (BackgroundServer, Vec<koalesce_server::agent::BackgroundAgent>) {
    let mut opts = options(dir, name, port, sites, peers, |_| {});
    let token_file = dir.join("agent.token");
    std::fs::write(&token_file, SECRET).unwrap();
    let mut agents = Vec::new();
    for (cfg, (site, _)) in opts.config.sites.iter_mut().zip(sites) {
        let root = dir.join(format!("agent-{site}"));
        std::fs::create_dir_all(&root).unwrap();
        let mut config = koalesce_server::agent::AgentConfig::new(&root, SECRET);
        config.min_free_bytes = 0;
        let agent = koalesce_server::agent::BackgroundAgent::start(config).expect("agent starts");
        cfg.agent = Some(koalesce_server::config::AgentSiteConfig {
            url: agent.url(),
            data_url: None,
            token_file: token_file.clone(),
            root: Some(root),
        });
        agents.push(agent);
    }
    (BackgroundServer::start(opts).expect("server starts"), agents)
}

pub fn options(
    dir: &Path,
    name: &str,
    port: u16,
    sites: &[(&str, u32)],
    peers: &[(&str, u16)],
    tune: impl FnOnce(&mut FederationConfig),
) -> koalesce_server::ServerOptions {
    let secret = dir.join("peer.secret");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(&secret, SECRET).unwrap();
    let mut opts = koalesce_server::test_options(&dir.join("data"), sites, supervisor());
    opts.listen = Some(format!("127.0.0.1:{port}"));
    let mut fed = FederationConfig {
        name: name.into(),
        phi: "1s".into(),
        sigma: "1s".into(),
        check_interval_ms: 100,
        peer_timeout_ms: 700,
        backoff_initial_ms: 500,
        backoff_max_ms: 2_000,
        peers: peers
            .iter()
            .map(|(n, p)| PeerConfig {
                name: n.to_string(),
                url: format!("http://127.0.0.1:{p}"),
                secret_file: secret.clone(),
            })
            .collect(),
        ..FederationConfig::default()
    };
    tune(&mut fed);
    opts.config.federation = Some(fed);
    opts
}

pub fn grid_submit(srv: &BackgroundServer, tok: &str, toml: &str) -> u64 {
    let (code, body) = srv.request("POST", "/api/v1/grid/jobs", Some(tok), toml.as_bytes());
    assert_eq!(code, 201, "{body}");
    json(&body)["id"].as_u64().unwrap()
}

pub fn get(srv: &BackgroundServer, tok: &str, path: &str) -> Value {
    let (code, body) = srv.request("GET", path, Some(tok), b"");
    assert_eq!(code, 200, "{path}: {body}");
    json(&body)
}

/// Waits until grid job `id` has ended; returns it.
pub fn wait_grid(srv: &BackgroundServer, tok: &str, id: u64, secs: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let g = get(srv, tok, &format!("/api/v1/grid/jobs/{id}"));
        if koalesce_api::dto::is_final_state(g["state"].as_str().unwrap()) {
            return g;
        }
        assert!(Instant::now() < deadline, "grid job {id} stuck: {g}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn sleep_job(name: &str, secs: u32) -> String {
    format!(
        "name = {name:?}\nexecutable = \"/bin/sleep\"\narguments = [\"{secs}\"]\nruntime_estimate = \"20s\"\n[[components]]\nprocessors = 1\n"
    )
}

pub fn sha256_hex(b: &[u8]) -> String {
    koalesce_server::store::sha256_hex(b)
}

/// Text of `n` bytes, different for each `seed`.
pub fn text(n: usize, seed: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(n + 64);
    let mut k = 0u64;
    while out.len() < n {
        out.extend_from_slice(format!("{seed}:{k} the quick brown fox\n").as_bytes());
        k += 1;
    }
    out.truncate(n);
    out
}

/// The `peer-*` entries of `srv`'s catalogue and the files under its data directory whose
/// path names `peer-`.
pub fn received_here(srv: &BackgroundServer, root: &str) -> (Vec<String>, Vec<std::path::PathBuf>) {
    let files = get(srv, root, "/api/v1/files");
    let names = files
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["name"].as_str().filter(|n| n.starts_with("peer-")).map(str::to_string))
        .collect();
    let stored = walk(&srv.data_dir)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("peer-"))
        .collect();
    (names, stored)
}

/// Waits until `srv` holds no received input (catalogue and disk).
pub fn wait_no_received(srv: &BackgroundServer, root: &str, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let (names, stored) = received_here(srv, root);
        if names.is_empty() && stored.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "received inputs stay: {names:?} {stored:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How the fake origin answers a fetch of its input.
#[derive(Clone, Copy, PartialEq)]
pub enum Serve {
    /// Other bytes of the declared length.
    Wrong,
    /// Twice the declared bytes.
    TooMuch,
    /// The declared length in the header, then only this many bytes and a closed connection.
    Cut(usize),
    /// The right bytes, from the asked range on.
    Good,
}

/// Each request's first line and Range header, as the fake origin saw them.
pub type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, Option<String>)>>>;

/// A fake origin "alpha" for beta: answers input fetches as `mode` says and records each
/// request's first line and Range header.
pub struct FakeOrigin {
    pub port: u16,
    pub mode: std::sync::Arc<std::sync::Mutex<Serve>>,
    pub seen: Seen,
    pub served: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl FakeOrigin {
    pub fn start(data: Vec<u8>) -> FakeOrigin {
        use std::io::{BufReader, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let mode = std::sync::Arc::new(std::sync::Mutex::new(Serve::Wrong));
        let seen: Seen = Default::default();
        let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (m, s, n) = (mode.clone(), seen.clone(), served.clone());
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut conn) = conn else { return };
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let (first, headers) = read_head(&mut r);
                let range = header(&headers, "range: bytes=").and_then(|v| v.trim_end_matches('-').parse::<usize>().ok());
                s.lock()
                    .unwrap()
                    .push((first.trim().to_string(), range.map(|r| format!("bytes={r}-"))));
                if !(first.starts_with("GET /api/v1/peer/sent/") && first.contains("/inputs/d.bin ")) {
                    let _ = conn.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}");
                    continue;
                }
                let sha = sha256_hex(&data);
                let mode = *m.lock().unwrap();
                let (status, body, len): (&str, Vec<u8>, usize) = match mode {
                    Serve::Wrong => ("200 OK", text(data.len(), 2), data.len()),
                    Serve::TooMuch => ("200 OK", [data.clone(), data.clone()].concat(), 2 * data.len()),
                    Serve::Cut(k) => ("200 OK", data[..k].to_vec(), data.len()),
                    Serve::Good => {
                        let from = range.unwrap_or(0);
                        let st = if from > 0 { "206 Partial Content" } else { "200 OK" };
                        (st, data[from..].to_vec(), data.len() - from)
                    }
                };
                let mut head = format!("HTTP/1.1 {status}\r\ncontent-length: {len}\r\nx-checksum-sha256: {sha}\r\nconnection: close\r\n");
                if let Some(from) = range.filter(|_| mode == Serve::Good && status.starts_with("206")) {
                    head.push_str(&format!("content-range: bytes {from}-{}/{}\r\n", data.len() - 1, data.len()));
                }
                head.push_str("\r\n");
                let _ = conn.write_all(head.as_bytes());
                let _ = conn.write_all(&body);
                n.fetch_add(body.len(), std::sync::atomic::Ordering::SeqCst);
                let _ = conn.flush();
            }
        });
        FakeOrigin { port, mode, seen, served }
    }

    pub fn set(&self, m: Serve) {
        *self.mode.lock().unwrap() = m;
    }
}

pub fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The names in `srv`'s file catalogue, sorted.
pub fn catalogue(srv: &BackgroundServer, tok: &str) -> Vec<String> {
    let v = get(srv, tok, "/api/v1/files");
    let mut n: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect();
    n.sort();
    n
}

/// A peer's client as `name` calling `srv` with the pair's secret.
pub fn as_peer(name: &str, srv: &BackgroundServer) -> koalesce_server::peer::PeerClient {
    koalesce_server::peer::PeerClient::new(name, "beta", &srv.url(), SECRET.into(), 5_000)
}

/// Phase one of handoff `h` (a job `desc` with `inputs`) from `peer`: asserts it is prepared.
pub fn prepare_handoff(peer: &koalesce_server::peer::PeerClient, h: &str, desc: &str, inputs: Value) -> Value {
    let body = json!({"handoff": h, "user": "alice", "description": desc, "inputs": inputs});
    let p: Value = peer.call("/api/v1/peer/handoffs", Some(&body)).unwrap();
    assert_eq!(p["state"], "prepared", "{p}");
    p
}

/// Commits handoff `h` from `peer` until the receiver submitted its job (its inputs are
/// fetched first); the receiver's view then.
pub fn commit_until_submitted(peer: &koalesce_server::peer::PeerClient, h: &str, secs: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let v: Value = peer.call(&format!("/api/v1/peer/handoffs/{h}/commit"), Some(&())).unwrap();
        if v["job"].is_u64() {
            return v;
        }
        assert!(Instant::now() < deadline, "{h} never submitted: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Commits handoff `h` from `peer` until the receiver's view names a failure containing
/// `needle` (its input fetch failed so); that view.
pub fn commit_until_failure(peer: &koalesce_server::peer::PeerClient, h: &str, needle: &str, secs: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let v: Value = peer.call(&format!("/api/v1/peer/handoffs/{h}/commit"), Some(&())).unwrap();
        if v["failure"].as_str().is_some_and(|f| f.contains(needle)) {
            return v;
        }
        assert!(Instant::now() < deadline, "{h}: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the job of handoff `h` ended at the receiver (as `peer` sees it); that view.
pub fn wait_handoff_ended(peer: &koalesce_server::peer::PeerClient, h: &str, secs: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let v: Value = peer.call::<(), _>(&format!("/api/v1/peer/handoffs/{h}"), None).unwrap();
        if v["job_state"].as_str().is_some_and(koalesce_api::dto::is_final_state) {
            return v;
        }
        assert!(Instant::now() < deadline, "{h} never ended: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `cond` holds, checking every 100 ms; panics with `what` after `secs`.
pub fn wait_until(secs: u64, what: &dyn Fn() -> String, cond: &dyn Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "{}", what());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One request a [`FakePeer`] got.
#[derive(Debug, Clone)]
pub struct FakeRequest {
    pub method: String,
    /// Path and query.
    pub path: String,
    pub body: Vec<u8>,
}

/// What a [`FakePeer`] answers: status, extra header lines (`name: value`), body.
pub type FakeAnswer = (u16, Vec<String>, Vec<u8>);

/// A peer server that answers every request as `answer` says (a test's untrusted peer), one
/// connection at a time; records every request.
pub struct FakePeer {
    pub port: u16,
    pub seen: std::sync::Arc<std::sync::Mutex<Vec<FakeRequest>>>,
}

impl FakePeer {
    pub fn start(answer: impl Fn(&FakeRequest) -> FakeAnswer + Send + 'static) -> FakePeer {
        use std::io::{BufReader, Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let seen: std::sync::Arc<std::sync::Mutex<Vec<FakeRequest>>> = Default::default();
        let s = seen.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut conn) = conn else { return };
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let (first, headers) = read_head(&mut r);
                let len: usize = header(&headers, "content-length:").and_then(|v| v.parse().ok()).unwrap_or(0);
                let mut body = vec![0u8; len];
                let _ = r.read_exact(&mut body);
                let mut parts = first.split_whitespace();
                let req = FakeRequest {
                    method: parts.next().unwrap_or("").to_string(),
                    path: parts.next().unwrap_or("").to_string(),
                    body,
                };
                let (status, headers, body) = answer(&req);
                s.lock().unwrap().push(req);
                let mut head = format!("HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n", body.len());
                for h in headers {
                    head.push_str(&h);
                    head.push_str("\r\n");
                }
                head.push_str("\r\n");
                let _ = conn.write_all(head.as_bytes());
                let _ = conn.write_all(&body);
                let _ = conn.flush();
            }
        });
        FakePeer { port, seen }
    }

    /// The paths of the requests seen so far that start with `head`.
    pub fn paths(&self, head: &str) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.path.starts_with(head))
            .map(|r| r.path.clone())
            .collect()
    }
}

/// A JSON answer for a [`FakePeer`].
pub fn json_answer(status: u16, v: &Value) -> FakeAnswer {
    (status, vec!["content-type: application/json".into()], v.to_string().into_bytes())
}

/// Alpha (site a1, 1 processor) and beta (site b1, 4) peered on free loopback ports, with a
/// user token at alpha and root's at beta. Fields drop in order: the servers before their
/// directories. Destructuring with `..` drops the fields left out at once: bind `tmp` (as
/// `tmp: _tmp`) and every server the test needs running (`b: _b`).
pub struct Pair {
    pub a: BackgroundServer,
    pub b: BackgroundServer,
    /// Alice's token at alpha.
    pub alice: String,
    /// Root's token at beta.
    pub root_b: String,
    pub pa: u16,
    pub pb: u16,
    pub tmp: tempfile::TempDir,
}

/// The usual pair of peers ([`Pair`]).
pub fn pair() -> Pair {
    let tmp = tempfile::tempdir().unwrap();
    let (pa, pb) = (free_port(), free_port());
    let a = server(&tmp.path().join("a"), "alpha", pa, &[("a1", 1)], &[("beta", pb)]);
    let b = server(&tmp.path().join("b"), "beta", pb, &[("b1", 4)], &[("alpha", pa)]);
    let alice = crate::common::token(&a.data_dir, "alice", false);
    let root_b = crate::common::token(&b.data_dir, "root", true);
    Pair {
        a,
        b,
        alice,
        root_b,
        pa,
        pb,
        tmp,
    }
}

/// Uploads `data` to `srv` as `name` at its site `site`.
pub fn upload(srv: &BackgroundServer, tok: &str, name: &str, site: &str, data: &[u8]) {
    let (code, body) = srv.request("PUT", &format!("/api/v1/files/{name}?site={site}"), Some(tok), data);
    assert_eq!(code, 201, "{body}");
}

/// Waits until grid job `id` of `srv` is released at its peer (the peer answered `done`).
pub fn wait_released(srv: &BackgroundServer, id: u64, secs: u64) {
    let journal = koalesce_server::peer::Journal::open(&srv.data_dir.join("federation.db")).unwrap();
    wait_until(secs, &|| format!("grid job {id} never released at its peer"), &|| {
        journal.grid_job(id).unwrap().unwrap().released
    });
}

/// The handoff id in a fake peer's request path (`/api/v1/peer/handoffs/{h}/...`).
pub fn handoff_of(path: &str) -> String {
    path.trim_start_matches("/api/v1/peer/handoffs/")
        .split(['/', '?'])
        .next()
        .unwrap_or("")
        .to_string()
}

/// A fake receiver "beta": offers the best ATT, answers every phase one with state `prepare`,
/// and then `after_prepare` (the handoff's id given) for each commit and each look at the
/// handoff.
pub fn fake_receiver(prepare: &'static str, after_prepare: impl Fn(&str) -> Value + Send + 'static) -> FakePeer {
    let log = b"hello\n".to_vec();
    let sha = sha256_hex(&log);
    FakePeer::start(move |r| match (r.method.as_str(), r.path.as_str()) {
        ("POST", "/api/v1/peer/offer") => json_answer(200, &json!({"att_ms": 1, "awt_ms": 0, "ru": 0.0})),
        ("POST", "/api/v1/peer/handoffs") => {
            let q: Value = serde_json::from_slice(&r.body).unwrap_or_default();
            json_answer(
                200,
                &json!({"handoff": q["handoff"], "state": prepare, "job": null, "job_state": null,
                    "sites": [], "exit_ok": null, "failure": null}),
            )
        }
        ("GET", p) if p.contains("/logs/") => (200, vec![format!("x-checksum-sha256: {sha}")], log.clone()),
        (_, p) if p.starts_with("/api/v1/peer/handoffs/") => json_answer(200, &after_prepare(&handoff_of(p))),
        _ => json_answer(404, &json!({"error": "not here"})),
    })
}

/// Alpha (one processor, busy) peered with `fake` as beta, and alice's grid job `job` that
/// moves there: (alpha, alice's token, the grid job's id).
pub fn busy_origin(dir: &std::path::Path, fake: &FakePeer, job: &str) -> (BackgroundServer, String, u64) {
    let a = server_tuned(&dir.join("a"), "alpha", free_port(), &[("a1", 1)], &[("beta", fake.port)], |f| {
        f.probe_bytes = 0
    });
    let alice = crate::common::token(&a.data_dir, "alice", false);
    let _blocker = grid_submit(&a, &alice, &sleep_job("blocker", 30));
    let id = grid_submit(&a, &alice, job);
    (a, alice, id)
}

/// The request line and the header lines (lower-cased, without line ends) of one HTTP/1.1
/// request read by a fake peer.
fn read_head(r: &mut impl std::io::BufRead) -> (String, Vec<String>) {
    let mut first = String::new();
    let _ = r.read_line(&mut first);
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        headers.push(h.trim_end().to_ascii_lowercase());
    }
    (first, headers)
}

/// The value (trimmed) of the first header line starting with `prefix` (lower case).
fn header<'a>(headers: &'a [String], prefix: &str) -> Option<&'a str> {
    headers.iter().find_map(|h| h.strip_prefix(prefix)).map(str::trim)
}
