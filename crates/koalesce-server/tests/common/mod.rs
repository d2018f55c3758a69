#![allow(dead_code)]
use std::path::Path;
use std::time::{Duration, Instant};

use koalesce_server::backend::{Backend, LrmState};
use koalesce_server::local::LocalBackend;
use koalesce_server::{BackgroundServer, SupervisorCommand};
use serde_json::Value;

pub fn supervisor() -> SupervisorCommand {
    SupervisorCommand {
        program: env!("CARGO_BIN_EXE_koalesce-supervise").into(),
        args: vec![],
        launcher: Some(vec![koalesce_server::launcher::LAUNCHER_FLAG.into()]),
    }
}

pub fn server(dir: &Path, sites: &[(&str, u32)]) -> BackgroundServer {
    BackgroundServer::start(koalesce_server::test_options(dir, sites, supervisor())).expect("server starts")
}

pub fn token(dir: &Path, user: &str, admin: bool) -> String {
    koalesce_server::create_token(dir, user, admin).unwrap()
}

pub fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

pub fn submit(srv: &BackgroundServer, tok: &str, toml: &str) -> u64 {
    let (code, body) = srv.request("POST", "/api/v1/jobs", Some(tok), toml.as_bytes());
    assert_eq!(code, 201, "{body}");
    json(&body)["id"].as_u64().unwrap()
}

pub fn job(srv: &BackgroundServer, tok: &str, id: u64) -> Value {
    let (code, body) = srv.request("GET", &format!("/api/v1/jobs/{id}"), Some(tok), b"");
    assert_eq!(code, 200, "{body}");
    json(&body)
}

/// Waits until the job is in one of `states`; panics after `secs`.
pub fn wait_state(srv: &BackgroundServer, tok: &str, id: u64, states: &[&str], secs: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let j = job(srv, tok, id);
        if states.contains(&j["state"].as_str().unwrap()) {
            return j;
        }
        assert!(Instant::now() < deadline, "job {id} stuck: {j}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the job has ended, however; panics after `secs`.
pub fn ended(srv: &BackgroundServer, tok: &str, id: u64, secs: u64) -> Value {
    wait_state(
        srv,
        tok,
        id,
        &["succeeded", "failed", "timeout", "out_of_memory", "cancelled"],
        secs,
    )
}

/// POSTs `body` to `path`; the status and the JSON answer (`Null` when it is not JSON).
pub fn post(srv: &BackgroundServer, path: &str, tok: &str, body: &str) -> (u16, Value) {
    let (code, text) = srv.request("POST", path, Some(tok), body.as_bytes());
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// POSTs a job to `path` (`/api/v1/jobs?...`), which must be accepted; its answer.
pub fn post_job(srv: &BackgroundServer, path: &str, tok: &str, body: &str) -> Value {
    let (code, v) = post(srv, path, tok, body);
    assert_eq!(code, 201, "{path}: {v}");
    v
}

pub fn shell_job(name: &str, script: &str, procs: u32, extra: &str) -> String {
    format!("name = {name:?}\nexecutable = \"/bin/sh\"\narguments = [\"-c\", {script:?}]\n{extra}\n[[components]]\nprocessors = {procs}\n")
}

/// POSTs a job body of `bytes` bytes while reading the answer at the same time: a server that
/// refuses an oversized body answers before reading it, which an HTTP client that first sends
/// the whole body (ureq) sees as a broken connection. Returns (status, body).
pub fn post_oversized(addr: std::net::SocketAddr, token: &str, bytes: usize) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "POST /api/v1/jobs HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/toml\r\nContent-Length: {bytes}\r\nConnection: close\r\n\r\n"
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
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let _ = writer.join();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, body.to_string())
}

/// How many live processes belong to the launch directory `dir`: their working directory is
/// in it (a supervisor starts in its directory, its program in `work/`) or their command line
/// names it (a supervisor spawned by a wrapper). A supervisor forked by the resident launcher
/// has the launcher's command line, so the command line alone would miss it.
pub fn processes_in(dir: &str) -> usize {
    let Ok(rd) = std::fs::read_dir("/proc") else { return 0 };
    rd.flatten()
        .filter(|e| e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit()))
        .filter(|e| {
            let zombie = std::fs::read_to_string(e.path().join("stat"))
                .ok()
                .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with('Z')))
                .unwrap_or(true);
            let cwd_in = std::fs::read_link(e.path().join("cwd")).is_ok_and(|p| p.to_string_lossy().starts_with(dir));
            let named = std::fs::read(e.path().join("cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(dir));
            !zombie && (cwd_in || named)
        })
        .count()
}

/// How many processes have `needle` in their command line.
pub fn processes_mentioning(needle: &str) -> usize {
    let Ok(rd) = std::fs::read_dir("/proc") else { return 0 };
    rd.flatten()
        .filter(|e| e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit()))
        .filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle)))
        .count()
}

/// Waits (20 s at most) until the local site reports component `id` ended; its last state.
pub fn wait_terminal(b: &LocalBackend, id: &str) -> LrmState {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = b.status(std::slice::from_ref(&id.to_string())).pop().unwrap().1;
        if st.is_terminal() {
            return st;
        }
        assert!(Instant::now() < deadline, "component did not end: {st:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (20 s at most) until `path` exists; `what` names it in the failure.
pub fn wait_file(path: &Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(Instant::now() < deadline, "{what} never appeared");
        std::thread::sleep(Duration::from_millis(5));
    }
}
