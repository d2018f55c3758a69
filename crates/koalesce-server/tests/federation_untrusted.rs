//! Live federation (issue 14): a peer is untrusted input. Attack tests with a fake peer that
//! answers as a broken or hostile server would: what it says is checked field by field, it
//! gets clear errors, never a panic, and it cannot make this server store, fetch or run more
//! than the job it was given.

mod common;
mod federation_common;

use common::token;
use federation_common::*;
use serde_json::{json, Value};

/// A peer that ran a one-component job lists logs of 200 components it does not have, the
/// same log twice and a name shaped like a path: the origin fetches and stores only the job's
/// own log (once), says what it left out, and the job still ends.
#[test]
fn a_peer_cannot_make_the_origin_fetch_logs_of_components_the_job_lacks() {
    let tmp = tempfile::tempdir().unwrap();
    let log_sha = sha256_hex(b"hello\n");
    let entry = |name: &str| json!({"name": name, "size_bytes": 6, "sha256": log_sha});
    let mut logs = vec![entry("c0/stdout"), entry("c0/stdout"), entry("../../c0/stdout")];
    logs.extend((1..=200).map(|c| entry(&format!("c{c}/stdout"))));
    let fake = fake_receiver("prepared", move |h| {
        json!({"handoff": h, "state": "committed", "job": 5, "job_state": "failed", "sites": ["beta/b1"],
            "exit_ok": false, "failure": "component 0 at b1: exit code 1", "finished_ms": 1, "logs": logs})
    });
    let (a, alice, id) = busy_origin(tmp.path(), &fake, &sleep_job("far", 1));
    let g = wait_grid(&a, &alice, id, 60);
    assert_eq!((g["state"].as_str(), g["runs_at"].as_str()), (Some("failed"), Some("beta")), "{g}");
    let note = g["data_error"].as_str().unwrap_or_default();
    assert!(note.contains("c1/stdout") && note.contains("not a log of the job"), "{g}");
    let (code, out) = a.request("GET", &format!("/api/v1/grid/jobs/{id}/logs"), Some(&alice), b"");
    assert_eq!((code, out.as_str()), (200, "hello\n"));
    let fetched = fake
        .paths("/api/v1/peer/handoffs/")
        .into_iter()
        .filter(|p| p.contains("/logs/"))
        .collect::<Vec<_>>();
    assert_eq!(fetched.len(), 1, "only the job's own log, once: {fetched:?}");
    let stored = walk(&a.data_dir.join("federation-logs"));
    assert_eq!(stored.len(), 1, "{stored:?}");
}

/// Offers with the largest values every field can hold, and zeros, get an answer (a finite
/// ATT or none), never a panic; the receiver answers as before afterwards.
#[test]
fn offers_with_extreme_values_are_answered_without_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let b = server_tuned(
        &tmp.path().join("b"),
        "beta",
        free_port(),
        &[("b1", 4)],
        &[("alpha", free_port())],
        |f| f.probe_bytes = 0,
    );
    let as_alpha = as_peer("alpha", &b);
    let max = u64::MAX;
    for (processors, estimate, mhz, bytes) in [
        (u64::from(u32::MAX), max, 1u64, max),
        (4, max, u64::from(u32::MAX), max),
        (1, max, 1, 0),
        (1, 0, u64::from(u32::MAX), max),
        (4, 1, 1, max),
    ] {
        let q = json!({"processors": processors, "estimate_ms": estimate, "home_mhz": mhz,
            "input_bytes": bytes, "output_bytes": bytes});
        let a: Value = as_alpha.call("/api/v1/peer/offer", Some(&q)).unwrap_or_else(|e| panic!("{q}: {e}"));
        assert!(a["att_ms"].is_null() || a["att_ms"].is_u64(), "{q}: {a}");
        assert!(a["ru"].as_f64().is_some_and(|r| (0.0..=1.0).contains(&r)), "{q}: {a}");
    }
    for (q, field) in [
        (json!({"processors": 0, "estimate_ms": 1, "home_mhz": 1}), "processors"),
        (json!({"processors": 1, "estimate_ms": 1, "home_mhz": 0}), "home_mhz"),
        (json!({"processors": -1, "estimate_ms": 1, "home_mhz": 1}), "processors"),
        (json!({"processors": 1, "estimate_ms": 1e30, "home_mhz": 1}), "estimate_ms"),
    ] {
        let r = as_alpha.call::<_, Value>("/api/v1/peer/offer", Some(&q));
        assert!(
            matches!(&r, Err(koalesce_server::peer::CallError::Refused(400 | 422, m)) if m.contains(field)),
            "{q}: {r:?}"
        );
    }
    let ok: Value = as_alpha
        .call(
            "/api/v1/peer/offer",
            Some(&json!({"processors": 1, "estimate_ms": 1000, "home_mhz": 1000})),
        )
        .unwrap();
    assert_eq!(ok["att_ms"], 1000, "{ok}");
}

/// A peer that answers a phase one with `committed` (it says it already runs the job) is not
/// also given the job here: the job is the peer's (it is never run on both sides).
#[test]
fn a_phase_one_answered_committed_is_never_run_here_too() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = fake_receiver("committed", |h| {
        json!({"handoff": h, "state": "committed", "job": 9, "job_state": "running", "sites": ["beta/b1"],
            "exit_ok": null, "failure": null})
    });
    let (a, alice, id) = busy_origin(tmp.path(), &fake, &sleep_job("far", 1));
    wait_until(30, &|| format!("{}", get(&a, &alice, &format!("/api/v1/grid/jobs/{id}"))), &|| {
        get(&a, &alice, &format!("/api/v1/grid/jobs/{id}"))["state"] == "running"
    });
    // A few more passes of alpha's grid scheduler: still only the blocker here.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let g = get(&a, &alice, &format!("/api/v1/grid/jobs/{id}"));
    assert_eq!((g["runs_at"].as_str(), g["job"].as_u64()), (Some("beta"), Some(9)), "{g}");
    assert_eq!(get(&a, &alice, "/api/v1/jobs").as_array().unwrap().len(), 1, "the blocker only");
}

/// A user cannot make another user's grid job take their job for its own: a local job named
/// as the grid scheduler marks the next grid job (`x [grid alpha/1]`) is not mistaken for it
/// (the look-up that makes a submission after a crash find the first one is per user). Alice's
/// grid job runs as a job of its own and succeeds; mallory's job is untouched.
#[test]
fn a_job_named_like_another_users_grid_job_is_not_taken_for_it() {
    let tmp = tempfile::tempdir().unwrap();
    let a = server_tuned(
        &tmp.path().join("a"),
        "alpha",
        free_port(),
        &[("a1", 2)],
        &[("beta", free_port())],
        |f| {
            f.probe_bytes = 0;
            f.algorithm = koalesce_server::peer::PeerAlgorithm::Local;
        },
    );
    let (alice, mallory) = (token(&a.data_dir, "alice", false), token(&a.data_dir, "mallory", false));
    let decoy = common::submit(&a, &mallory, &sleep_job("x [grid alpha/1]", 60));
    let id = grid_submit(&a, &alice, &sleep_job("x", 0));
    assert_eq!(id, 1);
    let g = wait_grid(&a, &alice, id, 30);
    assert_eq!(
        (g["state"].as_str(), g["runs_at"].as_str()),
        (Some("succeeded"), Some("local")),
        "{g}"
    );
    assert_ne!(g["job"].as_u64(), Some(decoy), "{g}");
    assert_eq!(common::job(&a, &mallory, decoy)["state"], "running");
}

/// What a peer says about a job it runs reaches the origin's users only as plain text: a
/// state that is no state word, sites and a failure with terminal escapes and newlines are not
/// passed on raw (a user's terminal would run them), and a thousand sites are not all kept.
#[test]
fn a_peers_words_about_a_job_reach_users_without_control_characters() {
    let tmp = tempfile::tempdir().unwrap();
    let mut sites: Vec<String> = (0..1000).map(|k| format!("beta/s{k}")).collect();
    sites.insert(0, "beta/b1\n\u{1b}[2Jfake line".into());
    let fake = fake_receiver("prepared", move |h| {
        json!({"handoff": h, "state": "committed", "job": 5, "job_state": "running\u{1b}]0;owned\u{7}",
            "sites": sites, "exit_ok": null,
            "failure": "disk\r\n\u{1b}[31mon fire\u{202e}"})
    });
    let (a, alice, id) = busy_origin(tmp.path(), &fake, &sleep_job("far", 1));
    let mut g = Value::Null;
    wait_until(30, &|| format!("{}", get(&a, &alice, &format!("/api/v1/grid/jobs/{id}"))), &|| {
        get(&a, &alice, &format!("/api/v1/grid/jobs/{id}"))["failure"].is_string()
    });
    for _ in 0..3 {
        g = get(&a, &alice, &format!("/api/v1/grid/jobs/{id}"));
        let shown: Vec<&str> = [&g["state"], &g["failure"]]
            .into_iter()
            .chain(g["sites"].as_array().unwrap())
            .map(|v| v.as_str().unwrap())
            .collect();
        for s in shown {
            assert!(!s.chars().any(|c| c.is_control() || c == '\u{202e}'), "{s:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(g["sites"].as_array().unwrap().len() <= 64, "{}", g["sites"]);
    assert!(g["failure"].as_str().unwrap().contains("on fire"), "{g}");
}

/// A peer cannot make this server keep unbounded rows: at most `max_handoffs_per_peer`
/// handoffs of it prepared and not committed, and as many tombstones (aborts of handoffs never
/// seen here); beyond, 429 naming the bound. A repeated phase one, an abort of a known handoff
/// and another peer's handoffs are not held back; an abort frees a prepared slot.
#[test]
fn a_peer_cannot_make_the_receiver_keep_unbounded_handoffs_or_tombstones() {
    use koalesce_server::peer::CallError;
    let tmp = tempfile::tempdir().unwrap();
    let b = server_tuned(
        &tmp.path().join("b"),
        "beta",
        free_port(),
        &[("b1", 4)],
        &[("alpha", free_port()), ("gamma", free_port())],
        |f| {
            f.probe_bytes = 0;
            f.max_handoffs_per_peer = 2;
        },
    );
    let (alpha, gamma) = (as_peer("alpha", &b), as_peer("gamma", &b));
    let desc = sleep_job("held", 0);
    let refused = |r: Result<Value, CallError>, needle: &str| match r {
        Err(CallError::Refused(429, m)) => assert!(m.contains(needle) && m.contains("max_handoffs_per_peer = 2"), "{m}"),
        other => panic!("expected 429 ({needle}): {other:?}"),
    };
    let phase_one = |p: &koalesce_server::peer::PeerClient, h: &str| {
        p.call::<_, Value>(
            "/api/v1/peer/handoffs",
            Some(&json!({"handoff": h, "user": "alice", "description": desc, "inputs": []})),
        )
    };
    prepare_handoff(&alpha, "alpha-1-1", &desc, json!([]));
    prepare_handoff(&alpha, "alpha-2-1", &desc, json!([]));
    refused(phase_one(&alpha, "alpha-3-1"), "'alpha' has 2 handoffs prepared here");
    // A retried phase one of a held handoff, and another peer's, still answer.
    assert_eq!(phase_one(&alpha, "alpha-1-1").unwrap()["state"], "prepared");
    prepare_handoff(&gamma, "gamma-1-1", &desc, json!([]));
    // An abort of a known handoff is no tombstone and frees its slot.
    let a: Value = alpha.call("/api/v1/peer/handoffs/alpha-1-1/abort", Some(&())).unwrap();
    assert_eq!(a["state"], "aborted");
    assert_eq!(phase_one(&alpha, "alpha-3-1").unwrap()["state"], "prepared");

    // Tombstones: aborts of handoffs beta never saw.
    for h in ["alpha-10-1", "alpha-11-1"] {
        let t: Value = alpha.call(&format!("/api/v1/peer/handoffs/{h}/abort"), Some(&())).unwrap();
        assert_eq!(t["state"], "aborted", "{t}");
    }
    refused(
        alpha.call::<(), Value>("/api/v1/peer/handoffs/alpha-12-1/abort", Some(&())),
        "'alpha' has 2 tombstones here",
    );
    // Not a tombstone: the refused abort stored nothing; a known handoff is still aborted.
    let gone = alpha.call::<(), Value>("/api/v1/peer/handoffs/alpha-12-1", None);
    assert!(matches!(gone, Err(CallError::Refused(404, _))), "{gone:?}");
    let a: Value = alpha.call("/api/v1/peer/handoffs/alpha-2-1/abort", Some(&())).unwrap();
    assert_eq!(a["state"], "aborted");
    let t: Value = gamma.call("/api/v1/peer/handoffs/gamma-10-1/abort", Some(&())).unwrap();
    assert_eq!(t["state"], "aborted", "gamma's own bound: {t}");
}

/// The bound on tombstones is on what a peer makes this server store. An abort of a handoff
/// the journal does not know, whose job is here (the journal lost, the jobs kept), leaves no
/// tombstone: the job is taken back and the answer is `committed` with it, also at the bound
/// (a 429 would make the origin fail a job it can follow). Aborts of unknown handoffs without a
/// job here are still refused at the bound.
#[test]
fn at_the_tombstone_bound_an_abort_still_takes_back_a_job_that_is_here() {
    use koalesce_server::peer::CallError;
    let tmp = tempfile::tempdir().unwrap();
    let b = server_tuned(
        &tmp.path().join("b"),
        "beta",
        free_port(),
        &[("b1", 4)],
        &[("alpha", free_port())],
        |f| {
            f.probe_bytes = 0;
            f.max_handoffs_per_peer = 1;
        },
    );
    let alpha = as_peer("alpha", &b);
    let abort = |h: &str| alpha.call::<(), Value>(&format!("/api/v1/peer/handoffs/{h}/abort"), Some(&()));
    assert_eq!(
        abort("alpha-10-1").unwrap()["state"],
        "aborted",
        "a tombstone: the bound is reached"
    );
    assert!(matches!(abort("alpha-11-1"), Err(CallError::Refused(429, _))));
    // The job of alpha-12-1, submitted before beta's journal was lost.
    let peer_user = token(&b.data_dir, "peer-alpha", false);
    let id = common::submit(&b, &peer_user, &sleep_job("kept [grid alpha-12-1]", 30));
    let a = abort("alpha-12-1").unwrap_or_else(|e| panic!("refused at the bound: {e}"));
    assert_eq!((a["state"].as_str(), a["job"].as_u64()), (Some("committed"), Some(id)), "{a}");
    let v: Value = alpha.call::<(), _>("/api/v1/peer/handoffs/alpha-12-1", None).unwrap();
    assert_eq!(v["state"], "committed", "{v}");
    assert!(matches!(abort("alpha-13-1"), Err(CallError::Refused(429, _))), "still bounded");
}

/// The bound on tombstones must not wedge an honest origin for ever: a tombstone is kept long
/// enough to refuse a late phase one (`handoff_timeout_ms`, as a prepared handoff's life), then
/// goes, so an origin that reached the bound can abort again later instead of being refused
/// (and its jobs left handing over, or failed) for good.
#[test]
fn tombstones_expire_so_the_bound_does_not_refuse_an_origin_for_good() {
    use koalesce_server::peer::CallError;
    let tmp = tempfile::tempdir().unwrap();
    let b = server_tuned(
        &tmp.path().join("b"),
        "beta",
        free_port(),
        &[("b1", 4)],
        &[("alpha", free_port())],
        |f| {
            f.probe_bytes = 0;
            f.max_handoffs_per_peer = 1;
            f.handoff_timeout_ms = 1_000;
        },
    );
    let alpha = as_peer("alpha", &b);
    let abort = |h: &str| alpha.call::<(), Value>(&format!("/api/v1/peer/handoffs/{h}/abort"), Some(&()));
    assert_eq!(abort("alpha-10-1").unwrap()["state"], "aborted");
    // At once: the bound holds, and the tombstone refuses a late phase one.
    assert!(matches!(abort("alpha-11-1"), Err(CallError::Refused(429, _))));
    let late = alpha.call::<_, Value>(
        "/api/v1/peer/handoffs",
        Some(&json!({"handoff": "alpha-10-1", "user": "alice", "description": sleep_job("late", 0), "inputs": []})),
    );
    assert_eq!(late.unwrap()["state"], "aborted");
    // Later, the old tombstone has gone and the origin's abort is taken.
    wait_until(15, &|| "the abort of alpha-11-1 is still refused".into(), &|| {
        abort("alpha-11-1").is_ok_and(|t| t["state"] == "aborted")
    });
}

/// A receiver that lost a handoff and refuses its abort with a hostile message (terminal
/// escapes, newlines, 100 000 characters): the job fails with a reason that names the refusal
/// as plain text of bounded length, not the peer's bytes raw.
#[test]
fn a_peers_refusal_of_an_abort_reaches_users_as_bounded_plain_text() {
    let tmp = tempfile::tempdir().unwrap();
    let hostile = format!("journal\r\n\u{1b}[2J\u{1b}]0;owned\u{7}gone\u{202e}{}", "x".repeat(100_000));
    let fake = FakePeer::start(move |r| match (r.method.as_str(), r.path.as_str()) {
        ("POST", "/api/v1/peer/offer") => json_answer(200, &json!({"att_ms": 1, "awt_ms": 0, "ru": 0.0})),
        ("POST", "/api/v1/peer/handoffs") => {
            let q: Value = serde_json::from_slice(&r.body).unwrap_or_default();
            json_answer(
                200,
                &json!({"handoff": q["handoff"], "state": "prepared", "job": null, "job_state": null,
                    "sites": [], "exit_ok": null, "failure": null}),
            )
        }
        (_, p) if p.ends_with("/abort") => json_answer(503, &json!({"error": hostile})),
        (_, p) => json_answer(404, &json!({"error": format!("handoff '{}' not found", handoff_of(p))})),
    });
    let (a, alice, id) = busy_origin(tmp.path(), &fake, &sleep_job("far", 1));
    let g = wait_grid(&a, &alice, id, 60);
    assert_eq!(g["state"], "failed", "{g}");
    let why = g["reason"].as_str().unwrap();
    assert!(why.contains("503") && why.contains("journal"), "{why}");
    assert!(!why.chars().any(|c| c.is_control() || c == '\u{202e}'), "{why:?}");
    assert!(why.chars().count() <= 4_000, "{} characters", why.chars().count());
}

/// A peer that refuses phase one with escape sequences and a long text: the job runs at the
/// origin, and the reason users read carries the refusal as bounded plain text.
#[test]
fn a_peers_refusal_of_phase_one_reaches_users_as_bounded_plain_text() {
    let tmp = tempfile::tempdir().unwrap();
    let hostile = format!("no room\r\n\u{1b}[2J\u{1b}]0;owned\u{7}here\u{202e}{}", "y".repeat(100_000));
    let fake = FakePeer::start(move |r| match (r.method.as_str(), r.path.as_str()) {
        ("POST", "/api/v1/peer/offer") => json_answer(200, &json!({"att_ms": 1, "awt_ms": 0, "ru": 0.0})),
        ("POST", "/api/v1/peer/handoffs") => json_answer(422, &json!({"error": hostile})),
        (_, p) => json_answer(404, &json!({"error": format!("handoff '{}' not found", handoff_of(p))})),
    });
    let (a, alice, id) = busy_origin(tmp.path(), &fake, &sleep_job("near", 1));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let why = loop {
        let g = get(&a, &alice, &format!("/api/v1/grid/jobs/{id}"));
        if let Some(w) = g["reason"].as_str().filter(|w| w.contains("refused it")) {
            break w.to_string();
        }
        assert!(std::time::Instant::now() < deadline, "no refusal recorded: {g}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let head: String = why.chars().take(300).collect();
    assert!(why.contains("422") && why.contains("no room"), "{head}");
    assert!(!why.chars().any(|c| c.is_control() || c == '\u{202e}'), "{head:?}");
    assert!(why.chars().count() <= 4_000, "{} characters", why.chars().count());
}

/// The phase ones of grid job `id` (handoffs `alpha-ID-N`) a fake peer saw.
fn phase_ones(f: &FakePeer, id: u64) -> usize {
    f.seen
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/api/v1/peer/handoffs")
        .filter_map(|r| serde_json::from_slice::<Value>(&r.body).ok())
        .filter(|q| q["handoff"].as_str().is_some_and(|h| h.starts_with(&format!("alpha-{id}-"))))
        .count()
}

/// A peer's answer about handoff `h` in state `state`.
fn handoff_answer(h: &str, state: &str) -> FakeAnswer {
    json_answer(
        200,
        &json!({"handoff": h, "state": state, "job": null, "job_state": null,
            "sites": [], "exit_ok": null, "failure": null}),
    )
}

/// A hostile peer that offers the best turnaround, accepts every phase one and then refuses
/// every commit as aborted would keep a job handed to it, aborted and decided again for ever
/// (always to it). After peers gave one job back `MAX_HANDOFFS` times the origin hands it over
/// no more: it runs here (it fits the origin's site), with a reason naming the peer and the
/// count.
#[test]
fn a_peer_that_aborts_every_handoff_cannot_keep_a_job_redecided_for_ever() {
    use koalesce_server::peer::MAX_HANDOFFS;
    let tmp = tempfile::tempdir().unwrap();
    let fake = FakePeer::start(|r| match (r.method.as_str(), r.path.as_str()) {
        ("POST", "/api/v1/peer/offer") => json_answer(200, &json!({"att_ms": 1, "awt_ms": 0, "ru": 0.0})),
        ("POST", "/api/v1/peer/handoffs") => {
            let q: Value = serde_json::from_slice(&r.body).unwrap_or_default();
            handoff_answer(q["handoff"].as_str().unwrap_or_default(), "prepared")
        }
        ("POST", p) if p.ends_with("/commit") => json_answer(409, &json!({"error": format!("handoff '{}' is aborted", handoff_of(p))})),
        ("GET", p) if p.starts_with("/api/v1/peer/handoffs/") => handoff_answer(&handoff_of(p), "aborted"),
        _ => json_answer(404, &json!({"error": "not here"})),
    });
    let (a, alice, id) = busy_origin(tmp.path(), &fake, &sleep_job("bounced", 1));
    let grid = || get(&a, &alice, &format!("/api/v1/grid/jobs/{id}"));
    wait_until(60, &|| format!("{} handoffs: {}", phase_ones(&fake, id), grid()), &|| {
        grid()["runs_at"] == "local" || grid()["state"] == "failed" || phase_ones(&fake, id) > 3 * MAX_HANDOFFS as usize
    });
    let g = grid();
    assert_eq!(
        (g["runs_at"].as_str(), g["job"].is_u64()),
        (Some("local"), true),
        "{} handoffs: {g}",
        phase_ones(&fake, id)
    );
    let why = g["reason"].as_str().unwrap_or_default();
    assert!(
        why.contains(&format!("gave it back {MAX_HANDOFFS} times (the last beta"))
            && why.ends_with("runs here rather than handed over again"),
        "{g}"
    );
    assert_eq!(phase_ones(&fake, id), MAX_HANDOFFS as usize, "{g}");
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(phase_ones(&fake, id), MAX_HANDOFFS as usize, "no handoff once it runs here");
    // Once, here: the blocker and it.
    assert_eq!(get(&a, &alice, "/api/v1/jobs").as_array().unwrap().len(), 2);
}

/// A link that drops every answer to phase one (the peer got it; its answer never arrives)
/// while the peer confirms each abort: nobody's fault, so the handoffs do not count as given
/// back and the job is not failed after `MAX_HANDOFFS` of them (it was). After
/// `MAX_HANDOFFS_IN_ALL` handoffs in all it runs here.
#[test]
fn handoffs_whose_answer_never_came_do_not_fail_the_job() {
    use koalesce_server::peer::{MAX_HANDOFFS, MAX_HANDOFFS_IN_ALL};
    let tmp = tempfile::tempdir().unwrap();
    let fake = FakePeer::start(|r| match (r.method.as_str(), r.path.as_str()) {
        ("POST", "/api/v1/peer/offer") => json_answer(200, &json!({"att_ms": 1, "awt_ms": 0, "ru": 0.0})),
        // The answer lost on the way: what arrives is no answer.
        ("POST", "/api/v1/peer/handoffs") => (200, vec![], b"{\"handoff\": ".to_vec()),
        ("POST", p) if p.ends_with("/abort") => handoff_answer(&handoff_of(p), "aborted"),
        _ => json_answer(404, &json!({"error": "not here"})),
    });
    let a = server_tuned(
        &tmp.path().join("a"),
        "alpha",
        free_port(),
        &[("a1", 1)],
        &[("beta", fake.port)],
        |f| {
            f.probe_bytes = 0;
            f.backoff_initial_ms = 50;
        },
    );
    let alice = token(&a.data_dir, "alice", false);
    let _blocker = grid_submit(&a, &alice, &sleep_job("blocker", 60));
    let id = grid_submit(&a, &alice, &sleep_job("flapped", 1));
    let grid = || get(&a, &alice, &format!("/api/v1/grid/jobs/{id}"));
    let past_the_cap = MAX_HANDOFFS as usize + 2;
    wait_until(60, &|| format!("{} handoffs: {}", phase_ones(&fake, id), grid()), &|| {
        grid()["state"] == "failed" || phase_ones(&fake, id) >= past_the_cap
    });
    assert_ne!(grid()["state"], "failed", "{}", grid());
    wait_until(120, &|| format!("{} handoffs: {}", phase_ones(&fake, id), grid()), &|| {
        grid()["runs_at"] == "local" || grid()["state"] == "failed"
    });
    let g = grid();
    assert_eq!(g["runs_at"], "local", "{g}");
    let why = g["reason"].as_str().unwrap_or_default();
    assert!(
        why.contains(&format!("handed over {MAX_HANDOFFS_IN_ALL} times and never ran")) && why.contains("was not confirmed"),
        "{g}"
    );
    assert_eq!(phase_ones(&fake, id), MAX_HANDOFFS_IN_ALL as usize, "{g}");
}
