//! The broker of seed 001 in the server: TTS/TTD predictions beside the actual times, their
//! error in /metrics, and advance reservations as a service.

mod common;

use common::*;

/// A `ttd` job gets the broker's prediction (001 §3.1) at placement; once it ran, the job shows
/// the actual TTS/TTD beside it and /metrics counts the error.
#[test]
fn a_ttd_job_shows_its_prediction_and_the_actual_times_and_metrics_count_the_error() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = server(tmp.path(), &[("vu", 8), ("leiden", 4)]);
    let id = submit(
        &srv,
        &tok,
        &shell_job(
            "predicted",
            "sleep 0.3",
            2,
            "policy = \"ttd\"\nruntime_estimate = \"2s\"\n[broker]\nstage_out = \"1s\"",
        ),
    );
    let j = wait_state(&srv, &tok, id, &["succeeded", "failed"], 30);
    assert_eq!(j["state"], "succeeded", "{j}");
    let b = &j["broker"];
    assert!(b.is_object(), "no prediction: {j}");
    assert_eq!(b["site"], j["components"][0]["site"], "{j}");
    // Idle sites of speed 1: no stage-in, no wait; execution = the estimate; stage-out as asked.
    assert_eq!(b["stage_in_ms"], 0, "{b}");
    assert_eq!(b["queue_wait_ms"], 0, "{b}");
    assert_eq!(b["execution_ms"], 2000, "{b}");
    assert_eq!(b["stage_out_ms"], 1000, "{b}");
    assert_eq!(b["predicted_tts_ms"], 0, "{b}");
    assert_eq!(b["predicted_ttd_ms"], 3000, "{b}");
    let tts = b["actual_tts_ms"].as_u64().expect("actual TTS");
    let ttd = b["actual_ttd_ms"].as_u64().expect("actual TTD");
    assert!((300..3000).contains(&ttd) && tts <= ttd, "{b}");
    let (_, m) = srv.request("GET", "/metrics", None, b"");
    assert!(m.contains("koalesce_broker_ttd_error_seconds_count 1"), "{m}");
    let err_line = m.lines().find(|l| l.starts_with("koalesce_broker_ttd_error_seconds_sum ")).unwrap();
    let err: f64 = err_line.split(' ').nth(1).unwrap().parse().unwrap();
    assert!((err - (ttd as f64 - 3000.0) / 1e3).abs() < 1e-6, "{err_line} vs {b}");

    // A job of another policy carries no prediction.
    let other = submit(&srv, &tok, &shell_job("plain", "true", 1, "policy = \"wf\""));
    let j = wait_state(&srv, &tok, other, &["succeeded", "failed"], 30);
    assert!(j.get("broker").is_none(), "{j}");
}

/// Two local sites of 4 processors: `res` takes advance reservations, `plain` does not.
fn reservation_options(dir: &std::path::Path) -> koalesce_server::ServerOptions {
    let mut opts = koalesce_server::test_options(dir, &[("res", 4), ("plain", 4)], supervisor());
    opts.config.sites[0].reservations = true;
    opts
}

fn reservation_server(dir: &std::path::Path) -> koalesce_server::BackgroundServer {
    koalesce_server::BackgroundServer::start(reservation_options(dir)).unwrap()
}

fn reserve(srv: &koalesce_server::BackgroundServer, tok: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
    let (code, text) = srv.request("POST", "/api/v1/reservations", Some(tok), body.to_string().as_bytes());
    (code, json(&text))
}

/// 001 §2.3 over the local executor: granted at the earliest free start in the window,
/// rejected with T_next when the window is taken, rejected outright when it can never be;
/// reserved processors are kept from jobs until the reservation is cancelled; reservations
/// are private to their user and survive a restart.
#[test]
fn reservations_are_granted_rejected_with_t_next_enforced_private_and_durable() {
    let tmp = tempfile::tempdir().unwrap();
    let alice = token(tmp.path(), "alice", false);
    let bob = token(tmp.path(), "bob", false);
    let srv = reservation_server(tmp.path());
    let now = koalesce_server::now_ms();
    let hour = 3_600_000;
    let t0 = now + hour;
    let (code, a) = reserve(
        &srv,
        &alice,
        serde_json::json!({"site": "res", "processors": 3, "duration": "10m", "earliest_start_ms": t0}),
    );
    assert_eq!(code, 201, "{a}");
    assert_eq!(a["answer"], "granted");
    let first = a["reservation"].clone();
    assert_eq!(first["start_ms"], t0, "{a}");
    assert_eq!(first["end_ms"], t0 + 600_000, "{a}");
    assert_eq!(first["state"], "waiting");
    // The same instant for 2 more: the site has 4; T_next = the first one's end.
    let (code, r) = reserve(
        &srv,
        &bob,
        serde_json::json!({"site": "res", "processors": 2, "duration": "5m", "earliest_start_ms": t0}),
    );
    assert_eq!(code, 409, "{r}");
    assert_eq!(r["answer"], "rejected");
    assert_eq!(r["t_next_ms"], t0 + 600_000, "{r}");
    // A window that reaches T_next is granted there.
    let (code, g) = reserve(
        &srv,
        &bob,
        serde_json::json!({"site": "res", "processors": 2, "duration": "5m", "earliest_start_ms": t0, "latest_start_ms": t0 + hour}),
    );
    assert_eq!(code, 201, "{g}");
    assert_eq!(g["reservation"]["start_ms"], t0 + 600_000, "{g}");
    // Never possible, and wrong requests, each with a clear answer.
    let (code, r) = reserve(&srv, &alice, serde_json::json!({"site": "res", "processors": 5, "duration": "1m"}));
    assert_eq!(code, 422, "{r}");
    assert!(r["error"].as_str().unwrap().contains("processors"), "{r}");
    let (code, r) = reserve(
        &srv,
        &alice,
        serde_json::json!({"site": "plain", "processors": 1, "duration": "1m"}),
    );
    assert_eq!(code, 409, "{r}");
    assert!(r["error"].as_str().unwrap().contains("does not take advance reservations"), "{r}");
    let (code, r) = reserve(
        &srv,
        &alice,
        serde_json::json!({"site": "nowhere", "processors": 1, "duration": "1m"}),
    );
    assert_eq!((code, r["error"].as_str().unwrap().contains("unknown site")), (422, true), "{r}");
    let (code, r) = reserve(
        &srv,
        &alice,
        serde_json::json!({"site": "res", "processors": 1, "duration": "soon"}),
    );
    assert_eq!((code, r["error"].as_str().unwrap().contains("duration")), (422, true), "{r}");
    let (code, r) = reserve(&srv, &alice, serde_json::json!({"site": "res", "cpus": 1, "duration": "1m"}));
    assert_eq!(code, 422, "{r}");
    let (code, _) = srv.request("POST", "/api/v1/reservations", None, b"{}");
    assert_eq!(code, 401);

    // Private: bob sees only his; alice's is 404 to him, also for cancel.
    let (_, list) = srv.request("GET", "/api/v1/reservations", Some(&bob), b"");
    let list = json(&list);
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["user"], "bob");
    let first_id = first["id"].as_str().unwrap().to_string();
    let (code, _) = srv.request("DELETE", &format!("/api/v1/reservations/{first_id}"), Some(&bob), b"");
    assert_eq!(code, 404);

    // Enforced: claims hold processors until released, so the 3 reserved an hour ahead leave
    // one now; a 2-processor job pinned to the site waits.
    let job = submit(
        &srv,
        &alice,
        "name = \"pinned\"\nexecutable = \"/bin/true\"\n[[components]]\nprocessors = 2\nsite = \"res\"\n",
    );
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let j = common::job(&srv, &alice, job);
    assert_eq!(j["state"], "queued", "a job took reserved processors: {j}");

    // Durable: after a restart both reservations are there and still enforced (T_next again).
    drop(srv);
    let srv = reservation_server(tmp.path());
    let (_, list) = srv.request("GET", "/api/v1/reservations", Some(&alice), b"");
    assert_eq!(json(&list).as_array().unwrap().len(), 1, "{list}");
    let (code, r) = reserve(
        &srv,
        &alice,
        serde_json::json!({"site": "res", "processors": 2, "duration": "5m", "earliest_start_ms": t0}),
    );
    assert_eq!((code, r["t_next_ms"].clone()), (409, serde_json::json!(t0 + 600_000)), "{r}");
    let j = common::job(&srv, &alice, job);
    assert_eq!(j["state"], "queued", "{j}");

    // Cancelling both frees the processors: the job runs.
    for (tok, id) in [
        (&alice, first_id.clone()),
        (&bob, g["reservation"]["id"].as_str().unwrap().to_string()),
    ] {
        let (code, c) = srv.request("DELETE", &format!("/api/v1/reservations/{id}"), Some(tok), b"");
        assert_eq!(code, 200, "{c}");
        assert_eq!(json(&c)["state"], "cancelled");
    }
    let j = wait_state(&srv, &alice, job, &["succeeded", "failed"], 30);
    assert_eq!(j["state"], "succeeded", "{j}");
    let (_, m) = srv.request("GET", "/metrics", None, b"");
    assert!(m.contains("koalesce_reservations_granted_total"), "{m}");
}

/// A restarted server reads its sites' idle processors only after its reservations are back:
/// with no refresh of the sites before the first scans (a poll interval of an hour), a job
/// pinned to the site still waits, and the site shows the reserved processors as not idle.
/// (Read before the restore, the site showed them idle and the first scan placed the job.)
#[test]
fn after_a_restart_the_first_scans_see_the_reserved_processors_as_taken() {
    let tmp = tempfile::tempdir().unwrap();
    let alice = token(tmp.path(), "alice", false);
    let srv = reservation_server(tmp.path());
    let t0 = koalesce_server::now_ms() + 3_600_000;
    let (code, a) = reserve(
        &srv,
        &alice,
        serde_json::json!({"site": "res", "processors": 3, "duration": "10m", "earliest_start_ms": t0}),
    );
    assert_eq!(code, 201, "{a}");
    drop(srv);
    let mut opts = reservation_options(tmp.path());
    opts.config.poll_interval_ms = 3_600_000;
    let srv = koalesce_server::BackgroundServer::start(opts).unwrap();
    let (_, sites) = srv.request("GET", "/api/v1/sites", Some(&alice), b"");
    let sites = json(&sites);
    let res = sites.as_array().unwrap().iter().find(|s| s["name"] == "res").unwrap().clone();
    assert_eq!(res["idle"], 1, "{res}");
    let job = submit(
        &srv,
        &alice,
        "name = \"pinned\"\nexecutable = \"/bin/true\"\n[[components]]\nprocessors = 2\nsite = \"res\"\n",
    );
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let j = common::job(&srv, &alice, job);
    assert_eq!(j["state"], "queued", "a job took reserved processors after a restart: {j}");
}

/// Modify = release + create (001 §3.3.2): a granted modification moves the reservation; a
/// refused one keeps the old reservation (its processors were still free).
#[test]
fn modify_releases_and_creates_and_a_refused_modification_keeps_the_old_reservation() {
    let tmp = tempfile::tempdir().unwrap();
    let alice = token(tmp.path(), "alice", false);
    let srv = reservation_server(tmp.path());
    let t0 = koalesce_server::now_ms() + 3_600_000;
    let (_, a) = reserve(
        &srv,
        &alice,
        serde_json::json!({"site": "res", "processors": 2, "duration": "10m", "earliest_start_ms": t0}),
    );
    let id = a["reservation"]["id"].as_str().unwrap().to_string();
    let body = serde_json::json!({"site": "res", "processors": 4, "duration": "10m", "earliest_start_ms": t0 + 60_000});
    let (code, m) = srv.request(
        "PUT",
        &format!("/api/v1/reservations/{id}"),
        Some(&alice),
        body.to_string().as_bytes(),
    );
    let m = json(&m);
    assert_eq!(code, 200, "{m}");
    assert_eq!(m["reservation"]["start_ms"], t0 + 60_000);
    assert_eq!(m["reservation"]["processors"], 4);
    let new_id = m["reservation"]["id"].as_str().unwrap().to_string();
    // Another reservation takes 1 processor at t0 + 2h; modifying ours to 4 there is refused.
    let (code, _) = reserve(
        &srv,
        &alice,
        serde_json::json!({"site": "res", "processors": 1, "duration": "10m", "earliest_start_ms": t0 + 7_200_000}),
    );
    assert_eq!(code, 201);
    let body = serde_json::json!({"site": "res", "processors": 4, "duration": "10m", "earliest_start_ms": t0 + 7_200_000});
    let (code, m) = srv.request(
        "PUT",
        &format!("/api/v1/reservations/{new_id}"),
        Some(&alice),
        body.to_string().as_bytes(),
    );
    let m = json(&m);
    assert_eq!(code, 409, "{m}");
    assert_eq!(m["kept"]["start_ms"], t0 + 60_000, "{m}");
    assert_eq!(m["kept"]["processors"], 4, "{m}");
    let (_, list) = srv.request("GET", "/api/v1/reservations", Some(&alice), b"");
    assert_eq!(json(&list).as_array().unwrap().len(), 2, "{list}");
}

/// A reservation that has already begun when the server restarts is held again for the rest
/// of its time, not dropped.
#[test]
fn an_active_reservation_survives_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let alice = token(tmp.path(), "alice", false);
    let srv = reservation_server(tmp.path());
    let (code, a) = reserve(&srv, &alice, serde_json::json!({"site": "res", "processors": 3, "duration": "10m"}));
    assert_eq!(code, 201, "{a}");
    std::thread::sleep(std::time::Duration::from_millis(50));
    drop(srv);
    let srv = reservation_server(tmp.path());
    let (_, list) = srv.request("GET", "/api/v1/reservations", Some(&alice), b"");
    let list = json(&list);
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["state"], "active", "{list}");
    // Still held: 2 of the site's 4 processors cannot be reserved now.
    let (code, r) = reserve(&srv, &alice, serde_json::json!({"site": "res", "processors": 2, "duration": "1m"}));
    assert_eq!(code, 409, "{r}");
}

/// Hostile requests to the reservation service: each gets a clear 4xx naming what is wrong,
/// and nothing is reserved or changed.
#[test]
fn hostile_reservation_requests_get_clear_errors_and_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let alice = token(tmp.path(), "alice", false);
    let mallory = token(tmp.path(), "mallory", false);
    let srv = reservation_server(tmp.path());
    let t0 = koalesce_server::now_ms() + 3_600_000;
    let (code, a) = reserve(
        &srv,
        &alice,
        serde_json::json!({"site": "res", "processors": 2, "duration": "10m", "earliest_start_ms": t0}),
    );
    assert_eq!(code, 201, "{a}");
    let id = a["reservation"]["id"].as_str().unwrap().to_string();
    let post = |body: &[u8]| {
        let (code, text) = srv.request("POST", "/api/v1/reservations", Some(&mallory), body);
        (code, text)
    };
    for (body, want, says) in [
        (&b"{not json"[..], 422, "reservation"),
        (b"[1, 2]", 422, "reservation"),
        (
            br#"{"site": "res", "processors": 4294967296, "duration": "1m"}"#,
            422,
            "reservation",
        ),
        (br#"{"site": "res", "processors": -1, "duration": "1m"}"#, 422, "reservation"),
        (
            br#"{"site": "res", "processors": 1, "duration": "1m", "earliest_start_ms": 18446744073709551615}"#,
            422,
            "duration",
        ),
        (br#"{"site": "res", "processors": 1, "duration": "99999999999h"}"#, 422, "duration"),
        (
            br#"{"site": "res", "processors": 4, "duration": "365d"}"#,
            422,
            "max_reservation_ms",
        ),
        (br#"{"site": "../../etc", "processors": 1, "duration": "1m"}"#, 422, "unknown site"),
        (
            br#"{"site": "res", "processors": 1, "duration": "1m", "user": "alice"}"#,
            422,
            "user",
        ),
    ] {
        let (code, text) = post(body);
        assert_eq!(code, want, "{}: {text}", String::from_utf8_lossy(body));
        assert!(text.contains(says), "{}: {text}", String::from_utf8_lossy(body));
    }
    // Ids that are not theirs, or not ids at all: 404 for every method, alice's untouched.
    let body = serde_json::json!({"site": "res", "processors": 1, "duration": "1m"}).to_string();
    for raw in [id.as_str(), "R0", "R-1", "R18446744073709551616", "..%2F..%2Fetc", "R1%00"] {
        for method in ["GET", "PUT", "DELETE"] {
            let (code, text) = srv.request(method, &format!("/api/v1/reservations/{raw}"), Some(&mallory), body.as_bytes());
            assert_eq!(code, 404, "{method} {raw}: {text}");
        }
    }
    let (_, list) = srv.request("GET", "/api/v1/reservations", Some(&mallory), b"");
    assert_eq!(json(&list), serde_json::json!([]));
    let (_, list) = srv.request("GET", "/api/v1/reservations", Some(&alice), b"");
    let list = json(&list);
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(
        (list[0]["id"].as_str(), list[0]["start_ms"].as_u64()),
        (Some(id.as_str()), Some(t0))
    );
}
