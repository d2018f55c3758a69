//! The core's actions are carried out in chunks, the state lock released in between
//! (`daemon::actions::ACTIONS_PER_HOLD`): a scan that places and launches more jobs than one
//! chunk holds still starts every job exactly once, and every job ends.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// A sample of `/metrics` without labels.
fn metric(srv: &koalesce_server::BackgroundServer, name: &str) -> u64 {
    let (code, text) = srv.request("GET", "/metrics", None, b"");
    assert_eq!(code, 200, "{text}");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}")) as u64
}

#[test]
fn a_scan_launched_in_chunks_starts_every_job_once() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = server(tmp.path(), &[("a", 200)]);
    // 150 tasks queued under one lock: the next scan places, claims and launches them all,
    // several times the actions of one chunk.
    let (code, body) = srv.request(
        "POST",
        "/api/v1/jobs?array=0-149",
        Some(&tok),
        shell_job("many", "exit 0", 1, "").as_bytes(),
    );
    assert_eq!(code, 201, "{body}");
    let ids: Vec<u64> = json(&body)["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(ids.len(), 150);
    let deadline = Instant::now() + Duration::from_secs(120);
    while metric(&srv, "koalesce_jobs{state=\"succeeded\"}") < 150 {
        assert!(Instant::now() < deadline, "not every job ended");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The scan's actions did not fit one chunk...
    assert!(metric(&srv, "koalesce_action_chunks_left_total") >= 1);
    // ...and still every job was launched exactly once: one launch each, in its first attempt.
    assert_eq!(metric(&srv, "koalesce_launches_total"), 150);
    for id in ids {
        let j = job(&srv, &tok, id);
        assert_eq!(j["state"], "succeeded", "{j}");
        let out = j["components"][0]["stdout"].as_str().unwrap_or_else(|| panic!("no stdout: {j}"));
        assert!(out.ends_with("/a1-c0/stdout"), "job {id} was launched again: {out}");
    }
}
