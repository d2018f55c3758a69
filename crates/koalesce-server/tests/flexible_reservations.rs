//! Flexible advance reservations (001 §2.3) over the local executor: the site moves them
//! inside their window to make room for another request, and earlier when processors free up;
//! the move shows in the API, a job held in the reservation follows it, and a restart keeps it.

mod common;

use common::*;
use serde_json::{json, Value};

fn reservation_server(dir: &std::path::Path) -> koalesce_server::BackgroundServer {
    let mut opts = koalesce_server::test_options(dir, &[("res", 4), ("plain", 4)], supervisor());
    opts.config.sites[0].reservations = true;
    koalesce_server::BackgroundServer::start(opts).unwrap()
}

fn reserve(srv: &koalesce_server::BackgroundServer, tok: &str, body: Value) -> Value {
    let (code, text) = srv.request("POST", "/api/v1/reservations", Some(tok), body.to_string().as_bytes());
    assert_eq!(code, 201, "{text}");
    json(&text)["reservation"].clone()
}

fn get(srv: &koalesce_server::BackgroundServer, tok: &str, id: &str) -> Value {
    let (code, text) = srv.request("GET", &format!("/api/v1/reservations/{id}"), Some(tok), b"");
    assert_eq!(code, 200, "{text}");
    json(&text)
}

/// A job of 4 processors held in reservation `rid` that records when it ran.
fn held_job(rid: &str) -> String {
    shell_job(
        "held",
        "date +%s%3N > t",
        4,
        &format!("reservation = {rid:?}\nruntime_estimate = \"2s\""),
    )
}

/// A rigid request for the whole site at the start of a flexible reservation moves the
/// flexible one to the end of the rigid one; the job held in it runs at the moved start; a
/// restart keeps the moved start (and the job still follows it).
#[test]
fn a_flexible_reservation_moves_for_a_rigid_request_its_job_follows_and_a_restart_keeps_it() {
    let tmp = tempfile::tempdir().unwrap();
    let alice = token(tmp.path(), "alice", false);
    let bob = token(tmp.path(), "bob", false);
    let srv = reservation_server(tmp.path());
    let t0 = koalesce_server::now_ms() + 4_000;
    let flex = reserve(
        &srv,
        &alice,
        json!({"site": "res", "processors": 4, "duration": "3s", "earliest_start_ms": t0,
               "latest_start_ms": t0 + 60_000, "flexible": true}),
    );
    let fid = flex["id"].as_str().unwrap().to_string();
    assert_eq!(
        (flex["start_ms"].as_u64(), flex["flexible"].as_bool()),
        (Some(t0), Some(true)),
        "{flex}"
    );
    let job = submit(&srv, &alice, &held_job(&fid));
    let j = wait_state(&srv, &alice, job, &["placed", "claimed", "running", "succeeded", "failed"], 10);
    assert_eq!(j["state"], "placed", "{j}");

    // Bob wants the whole site from t0 for 5 s, no later: only a move of Alice's makes room.
    let rigid = reserve(
        &srv,
        &bob,
        json!({"site": "res", "processors": 4, "duration": "5s", "earliest_start_ms": t0, "latest_start_ms": t0}),
    );
    assert_eq!(rigid["start_ms"].as_u64(), Some(t0), "{rigid}");
    let moved = get(&srv, &alice, &fid);
    let new_start = moved["start_ms"].as_u64().unwrap();
    assert_eq!(new_start, t0 + 5_000, "moved to the end of the rigid one: {moved}");
    assert_eq!(moved["end_ms"].as_u64(), Some(new_start + 3_000), "{moved}");
    assert_eq!(
        (moved["earliest_start_ms"].as_u64(), moved["latest_start_ms"].as_u64()),
        (Some(t0), Some(t0 + 60_000)),
        "the window stays: {moved}"
    );
    let (_, m) = srv.request("GET", "/metrics", None, b"");
    assert!(m.contains("koalesce_reservations_moved_total 1"), "{m}");

    // A restart keeps the moved start, and the held job still waits for it.
    drop(srv);
    let srv = reservation_server(tmp.path());
    let again = get(&srv, &alice, &fid);
    assert_eq!(again["start_ms"].as_u64(), Some(new_start), "{again}");
    assert_eq!(get(&srv, &bob, rigid["id"].as_str().unwrap())["start_ms"].as_u64(), Some(t0));
    let j = wait_state(&srv, &alice, job, &["succeeded", "failed"], 40);
    assert_eq!(j["state"], "succeeded", "{j}");
    let started = j["started_ms"].as_u64().unwrap();
    assert!(
        started >= new_start && started < new_start + 2_500,
        "started at {started}; the reservation was moved to {new_start} (from {t0})"
    );
    assert_eq!(j["components"][0]["site"], "res", "{j}");
}

/// Processors freed (a reservation cancelled) let a flexible reservation granted late move
/// earlier, to the start of its window; its job follows and runs at once instead of waiting.
#[test]
fn a_flexible_reservation_moves_earlier_when_processors_free_up_and_its_job_follows() {
    let tmp = tempfile::tempdir().unwrap();
    let alice = token(tmp.path(), "alice", false);
    let bob = token(tmp.path(), "bob", false);
    let srv = reservation_server(tmp.path());
    let t0 = koalesce_server::now_ms() + 5_000;
    let blocker = reserve(
        &srv,
        &bob,
        json!({"site": "res", "processors": 3, "duration": "10m", "earliest_start_ms": t0}),
    );
    let flex = reserve(
        &srv,
        &alice,
        json!({"site": "res", "processors": 2, "duration": "1m", "earliest_start_ms": t0,
               "latest_start_ms": t0 + 3_600_000, "flexible": true}),
    );
    let late = flex["start_ms"].as_u64().unwrap();
    assert_eq!(late, blocker["end_ms"].as_u64().unwrap(), "granted after the blocker: {flex}");
    let fid = flex["id"].as_str().unwrap().to_string();
    let job = submit(
        &srv,
        &alice,
        &shell_job("held", "true", 2, &format!("reservation = {fid:?}\nruntime_estimate = \"2s\"")),
    );
    // A rigid reservation does not move, only a flexible one.
    let rigid = reserve(
        &srv,
        &alice,
        json!({"site": "res", "processors": 3, "duration": "1m", "earliest_start_ms": t0,
               "latest_start_ms": t0 + 3_600_000}),
    );
    let rigid_start = rigid["start_ms"].as_u64().unwrap();
    assert_eq!(rigid_start, late + 60_000, "{rigid}");
    let (code, body) = srv.request(
        "DELETE",
        &format!("/api/v1/reservations/{}", blocker["id"].as_str().unwrap()),
        Some(&bob),
        b"",
    );
    assert_eq!(code, 200, "{body}");
    let moved = get(&srv, &alice, &fid);
    let start = moved["start_ms"].as_u64().unwrap();
    assert!(start >= t0 && start < t0 + 5_000, "moved to {start}, window from {t0}: {moved}");
    assert_eq!(moved["end_ms"].as_u64(), Some(start + 60_000), "{moved}");
    assert_eq!(
        get(&srv, &alice, rigid["id"].as_str().unwrap())["start_ms"].as_u64(),
        Some(rigid_start)
    );
    let j = wait_state(&srv, &alice, job, &["succeeded", "failed"], 30);
    assert_eq!(j["state"], "succeeded", "{j}");
    let started = j["started_ms"].as_u64().unwrap();
    assert!(
        started >= start && started < start + 5_000,
        "started at {started}, the reservation moved to {start} (was {late})"
    );
}
