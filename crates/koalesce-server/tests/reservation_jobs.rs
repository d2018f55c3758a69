//! Jobs submitted into an advance reservation of their user (`reservation = "R1"` in the job
//! file, or `?reservation=R1`): they run at the reservation's site from its start, on its
//! processors; only the owner may use it; everything else is a clear 4xx; a reservation
//! cancelled before its job starts fails the job.

mod common;

use common::*;

fn reservation_server(dir: &std::path::Path) -> koalesce_server::BackgroundServer {
    let mut opts = koalesce_server::test_options(dir, &[("res", 4), ("plain", 4)], supervisor());
    opts.config.sites[0].reservations = true;
    koalesce_server::BackgroundServer::start(opts).unwrap()
}

/// Reserves `processors` at `res` from `in_ms` from now for `duration`; the id and start.
fn reserve(srv: &koalesce_server::BackgroundServer, tok: &str, processors: u32, in_ms: u64, duration: &str) -> (String, u64) {
    let body = serde_json::json!({
        "site": "res",
        "processors": processors,
        "duration": duration,
        "earliest_start_ms": koalesce_server::now_ms() + in_ms,
    });
    let (code, text) = srv.request("POST", "/api/v1/reservations", Some(tok), body.to_string().as_bytes());
    assert_eq!(code, 201, "{text}");
    let v = json(&text);
    (
        v["reservation"]["id"].as_str().unwrap().to_string(),
        v["reservation"]["start_ms"].as_u64().unwrap(),
    )
}

fn post(srv: &koalesce_server::BackgroundServer, tok: &str, path: &str, body: &str) -> (u16, String) {
    srv.request("POST", path, Some(tok), body.as_bytes())
}

#[test]
fn a_job_runs_in_its_users_reservation_from_its_start() {
    let tmp = tempfile::tempdir().unwrap();
    let alice = token(tmp.path(), "alice", false);
    let srv = reservation_server(tmp.path());
    let (rid, start) = reserve(&srv, &alice, 2, 2_500, "1m");
    // Both sites are idle: without the reservation the job would start at once (at either).
    let text = shell_job(
        "in-resv",
        "date +%s%3N > t",
        2,
        &format!("reservation = {rid:?}\nruntime_estimate = \"10s\""),
    );
    let id = submit(&srv, &alice, &text);
    let j = wait_state(&srv, &alice, id, &["placed", "claimed", "running", "succeeded", "failed"], 10);
    assert_eq!(j["state"], "placed", "waits for the reservation: {j}");
    assert_eq!(j["components"][0]["site"], "res", "{j}");
    let j = wait_state(&srv, &alice, id, &["succeeded", "failed"], 30);
    assert_eq!(j["state"], "succeeded", "{j}");
    let started = j["started_ms"].as_u64().unwrap();
    assert!(started >= start, "started at {started}, the reservation starts at {start}: {j}");
    assert!(
        started < start + 5_000,
        "started {} ms after the reservation's start",
        started - start
    );

    // The same through the query parameter (any job format); a job smaller than the
    // reservation is fine.
    let (rid2, _) = reserve(&srv, &alice, 3, 0, "1m");
    let (code, body) = post(
        &srv,
        &alice,
        &format!("/api/v1/jobs?reservation={rid2}"),
        &shell_job("q", "true", 1, ""),
    );
    assert_eq!(code, 201, "{body}");
    let id = json(&body)["id"].as_u64().unwrap();
    let j = wait_state(&srv, &alice, id, &["succeeded", "failed"], 30);
    assert_eq!(
        (j["state"].as_str(), j["components"][0]["site"].as_str()),
        (Some("succeeded"), Some("res")),
        "{j}"
    );
}

#[test]
fn only_the_owner_fits_in_and_everything_else_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let alice = token(tmp.path(), "alice", false);
    let bob = token(tmp.path(), "bob", false);
    let admin = token(tmp.path(), "root", true);
    let srv = reservation_server(tmp.path());
    let (rid, _) = reserve(&srv, &alice, 2, 3_600_000, "1h");
    let with = |r: &str, procs: u32| shell_job("x", "true", procs, &format!("reservation = {r:?}"));
    let cases: Vec<(&str, String, String, u16, &str)> = vec![
        ("bob", bob.clone(), with(&rid, 1), 404, "not found"),
        ("an admin", admin.clone(), with(&rid, 1), 404, "not found"),
        ("no such id", alice.clone(), with("R999", 1), 404, "not found"),
        ("not an id", alice.clone(), with("../../etc", 1), 404, "not found"),
        (
            "too large",
            alice.clone(),
            with(&rid, 3),
            422,
            "holds 2 processor(s), the job asks for 3",
        ),
        (
            "two components",
            alice.clone(),
            format!("{}[[components]]\nprocessors = 1\n", with(&rid, 1)),
            422,
            "exactly one component",
        ),
        (
            "another site",
            alice.clone(),
            with(&rid, 1).replace("processors = 1", "processors = 1\nsite = \"plain\""),
            422,
            "another site",
        ),
        (
            "a number",
            alice.clone(),
            shell_job("x", "true", 1, "reservation = 5"),
            422,
            "reservation",
        ),
    ];
    for (what, tok, body, code, want) in cases {
        let (c, text) = post(&srv, &tok, "/api/v1/jobs", &body);
        assert_eq!(c, code, "{what}: {text}");
        assert!(text.contains(want), "{what}: {text}");
    }
    let (c, text) = post(
        &srv,
        &alice,
        "/api/v1/jobs?reservation=R1&array=1-3",
        &shell_job("a", "true", 1, ""),
    );
    assert_eq!(c, 422, "{text}");
    assert!(text.contains("job array"), "{text}");
    let (c, text) = post(&srv, &alice, "/api/v1/jobs?reservation=R2", &with(&rid, 1));
    assert_eq!(c, 422, "{text}");
    assert!(text.contains("differ"), "{text}");
    // Nothing was submitted.
    let (_, list) = srv.request("GET", "/api/v1/jobs?all=true", Some(&admin), b"");
    assert_eq!(json(&list).as_array().map(Vec::len), Some(0), "{list}");
}

#[test]
fn a_reservation_cancelled_before_its_job_starts_fails_the_job() {
    let tmp = tempfile::tempdir().unwrap();
    let alice = token(tmp.path(), "alice", false);
    let srv = reservation_server(tmp.path());
    let (rid, _) = reserve(&srv, &alice, 2, 2_000, "1m");
    let id = submit(&srv, &alice, &shell_job("gone", "true", 2, &format!("reservation = {rid:?}")));
    let (code, body) = srv.request("DELETE", &format!("/api/v1/reservations/{rid}"), Some(&alice), b"");
    assert_eq!(code, 200, "{body}");
    let j = wait_state(&srv, &alice, id, &["succeeded", "failed"], 30);
    assert_eq!(j["state"], "failed", "{j}");
    assert!(j.to_string().contains("reservation ended or was cancelled"), "{j}");
}

/// GET /api/v1/sites publishes each site's estimated queue wait: a local site plans its
/// running components to their expected ends (start + runtime estimate), not idle-only.
#[test]
fn sites_publish_the_queue_wait_of_their_running_components() {
    let tmp = tempfile::tempdir().unwrap();
    let alice = token(tmp.path(), "alice", false);
    let srv = reservation_server(tmp.path());
    let text = shell_job("busy", "sleep 20", 4, "runtime_estimate = \"60s\"").replace("processors = 4", "processors = 4\nsite = \"plain\"");
    let id = submit(&srv, &alice, &text);
    let j = wait_state(&srv, &alice, id, &["running", "succeeded", "failed"], 30);
    assert_eq!(j["state"], "running", "{j}");
    let started = j["started_ms"].as_u64().unwrap();
    let (code, body) = srv.request("GET", "/api/v1/sites", Some(&alice), b"");
    assert_eq!(code, 200, "{body}");
    let now = koalesce_server::now_ms();
    let sites = json(&body);
    let site = |n: &str| sites.as_array().unwrap().iter().find(|s| s["name"] == n).unwrap().clone();
    let plain = site("plain");
    let wait = plain["queue_wait_ms"].as_u64().unwrap_or_else(|| panic!("no estimate: {plain}"));
    let expected = (started + 60_000).saturating_sub(now);
    assert!(
        wait.abs_diff(expected) < 2_000,
        "wait {wait} ms, expected about {expected} ms: {plain}"
    );
    assert_eq!(site("res")["queue_wait_ms"], 0, "{sites}");
    assert_eq!(plain["speed"], 1.0, "{plain}");
    let (code, _) = srv.request("POST", &format!("/api/v1/jobs/{id}/cancel"), Some(&alice), b"");
    assert!(code < 300, "cancel: {code}");
}

/// A reservation made through the service occupies its processors in the local site's queue
/// simulation: `queue_wait_ms` (and so `sites --long` and the TTS/TTD ranking) counts it,
/// and cancelling it takes it out again.
#[test]
fn service_reservations_count_in_the_local_queue_wait() {
    let tmp = tempfile::tempdir().unwrap();
    let alice = token(tmp.path(), "alice", false);
    let srv = reservation_server(tmp.path());
    let wait = |srv: &koalesce_server::BackgroundServer| {
        let (code, body) = srv.request("GET", "/api/v1/sites", Some(&alice), b"");
        assert_eq!(code, 200, "{body}");
        let sites = json(&body);
        let res = sites.as_array().unwrap().iter().find(|s| s["name"] == "res").unwrap().clone();
        res["queue_wait_ms"].as_u64().unwrap_or_else(|| panic!("no estimate: {res}"))
    };
    assert_eq!(wait(&srv), 0);
    let (rid, start) = reserve(&srv, &alice, 4, 0, "1m");
    let expected = (start + 60_000).saturating_sub(koalesce_server::now_ms());
    let w = wait(&srv);
    assert!(
        w.abs_diff(expected) < 2_000,
        "wait {w} ms, the reservation holds the site for {expected} ms more"
    );
    // A tts job goes to the idle site.
    let id = submit(
        &srv,
        &alice,
        &shell_job("ranked", "true", 1, "policy = \"tts\"\nruntime_estimate = \"1s\""),
    );
    let j = wait_state(&srv, &alice, id, &["succeeded", "failed"], 30);
    assert_eq!(
        (j["state"].as_str(), j["components"][0]["site"].as_str()),
        (Some("succeeded"), Some("plain")),
        "{j}"
    );
    let (code, body) = srv.request("DELETE", &format!("/api/v1/reservations/{rid}"), Some(&alice), b"");
    assert_eq!(code, 200, "{body}");
    assert_eq!(wait(&srv), 0);
}
