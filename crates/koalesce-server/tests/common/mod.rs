#![allow(dead_code)]
use std::path::Path;
use std::time::{Duration, Instant};

use koalesce_server::{BackgroundServer, SupervisorCommand};
use serde_json::Value;

pub fn supervisor() -> SupervisorCommand {
    SupervisorCommand {
        program: env!("CARGO_BIN_EXE_koalesce-supervise").into(),
        args: vec![],
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

pub fn shell_job(name: &str, script: &str, procs: u32, extra: &str) -> String {
    format!("name = {name:?}\nexecutable = \"/bin/sh\"\narguments = [\"-c\", {script:?}]\n{extra}\n[[components]]\nprocessors = {procs}\n")
}
