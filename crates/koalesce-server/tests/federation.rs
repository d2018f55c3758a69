//! Live federation (issue 14): real koalesce servers on free loopback ports, peered with shared
//! secrets, their grid schedulers deciding with the core's S-I policy. Jobs run for real under
//! the supervisors.

mod common;
mod federation_common;

use std::time::{Duration, Instant};

use common::token;
use federation_common::*;
use koalesce_server::peer::journal::{state, Transition};
use koalesce_server::peer::{Journal, PeerAlgorithm, PeerClient};
use serde_json::Value;

#[test]
fn queued_jobs_migrate_to_an_idle_peer_and_run_there_once() {
    let Pair {
        a,
        b,
        alice,
        root_b,
        tmp: _tmp,
        ..
    } = pair();
    let ids: Vec<u64> = (0..3).map(|i| grid_submit(&a, &alice, &sleep_job(&format!("j{i}"), 1))).collect();
    let jobs: Vec<Value> = ids.iter().map(|&id| wait_grid(&a, &alice, id, 60)).collect();
    // The first finds the one processor free (AWT 0 < φ); the next two would wait 20 and 40 s
    // here (local ATT 40 s, 60 s) against 20 s at beta (> 1.4 × 20 s): they move.
    assert_eq!(jobs[0]["runs_at"], "local", "{}", jobs[0]);
    assert_eq!(jobs[0]["sites"], serde_json::json!(["alpha/a1"]));
    assert!(jobs[0]["reason"].as_str().unwrap().contains("< φ"), "{}", jobs[0]);
    for g in &jobs[1..] {
        assert_eq!(g["runs_at"], "beta", "{g}");
        assert_eq!(g["state"], "succeeded", "{g}");
        assert_eq!(g["sites"], serde_json::json!(["beta/b1"]), "{g}");
        let why = g["reason"].as_str().unwrap();
        assert!(why.starts_with("moved: local ATT") && why.contains("at beta"), "{why}");
    }
    assert!(jobs.iter().all(|g| g["state"] == "succeeded" && g["exit_ok"] == true));
    // Each job ran on exactly one side: one job at alpha, two at beta (as peer-alpha).
    let here = get(&a, &alice, "/api/v1/jobs");
    assert_eq!(here.as_array().unwrap().len(), 1, "{here}");
    let there = get(&b, &root_b, "/api/v1/jobs?all=true");
    let there = there.as_array().unwrap();
    assert_eq!(there.len(), 2, "{there:?}");
    assert!(there.iter().all(|j| j["user"] == "peer-alpha" && j["state"] == "succeeded"));
    assert!(there.iter().any(|j| j["name"].as_str().unwrap().ends_with("[grid alpha-2-1]")));
    let fa = get(&a, &alice, "/api/v1/federation");
    assert_eq!((fa["local"].as_u64(), fa["migrated_out"].as_u64()), (Some(1), Some(2)), "{fa}");
    assert_eq!(fa["peers"][0]["available"], true);
    assert_eq!(get(&b, &root_b, "/api/v1/federation")["received"], 2);
    // Another user does not see alice's grid jobs.
    let bob = token(&a.data_dir, "bob", false);
    assert_eq!(a.request("GET", &format!("/api/v1/grid/jobs/{}", ids[1]), Some(&bob), b"").0, 404);
}

#[test]
fn a_peer_that_does_not_answer_is_backed_off_and_the_job_runs_here() {
    let tmp = tempfile::tempdir().unwrap();
    // "beta" accepts connections and never answers: the worst kind of peer.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let pb = silent.local_addr().unwrap().port();
    let a = server(&tmp.path().join("a"), "alpha", free_port(), &[("a1", 1)], &[("beta", pb)]);
    let alice = token(&a.data_dir, "alice", false);
    let t0 = Instant::now();
    let ids: Vec<u64> = (0..2).map(|i| grid_submit(&a, &alice, &sleep_job(&format!("j{i}"), 1))).collect();
    // Both decided here within the peer's time limit (0.7 s) and a few passes.
    let deadline = Instant::now() + Duration::from_secs(10);
    while ids
        .iter()
        .any(|&id| get(&a, &alice, &format!("/api/v1/grid/jobs/{id}"))["runs_at"] != "local")
    {
        assert!(Instant::now() < deadline, "not decided within 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(t0.elapsed() < Duration::from_secs(10));
    let f = get(&a, &alice, "/api/v1/federation");
    let peer = &f["peers"][0];
    assert_eq!(peer["name"], "beta");
    assert!(peer["failures"].as_u64().unwrap() >= 1, "{f}");
    assert!(peer["last_error"].as_str().is_some(), "{f}");
    for id in ids {
        assert_eq!(wait_grid(&a, &alice, id, 30)["state"], "succeeded");
    }
    drop(silent);
}

#[test]
fn peer_endpoints_take_only_the_pairs_secret_and_check_what_they_get() {
    let tmp = tempfile::tempdir().unwrap();
    let pa = free_port();
    let b = server(&tmp.path().join("b"), "beta", free_port(), &[("b1", 4)], &[("alpha", pa)]);
    let user = token(&b.data_dir, "carol", false);
    let url = b.url();
    let as_alpha = PeerClient::new("alpha", "beta", &url, SECRET.into(), 5_000);
    let offer = serde_json::json!({"processors": 2, "estimate_ms": 60_000, "home_mhz": 2000});
    // The right peer: idle, no wait; the job's home clock is 2000 MHz and beta's 1000 MHz, so
    // its 60 s estimate runs 120 s here.
    let a: Value = as_alpha.call("/api/v1/peer/offer", Some(&offer)).unwrap();
    assert_eq!(a["awt_ms"], 0);
    assert_eq!(a["att_ms"], 120_000);
    assert_eq!(a["ru"], 0.0);
    // Too large for every site: infinite (null).
    let big: Value = as_alpha
        .call(
            "/api/v1/peer/offer",
            Some(&serde_json::json!({"processors": 5, "estimate_ms": 1, "home_mhz": 1000})),
        )
        .unwrap();
    assert!(big["att_ms"].is_null(), "{big}");
    // A user token, a wrong secret, an unknown peer name: 401.
    let raw = |path: &str, headers: &[(&str, &str)], body: &str| -> u16 {
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let mut r = agent.post(&format!("{url}{path}"));
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.send(body).map(|x| x.status().as_u16()).unwrap_or(0)
    };
    let bearer = |t: &str| format!("Bearer {t}");
    let body = offer.to_string();
    assert_eq!(raw("/api/v1/peer/offer", &[("Authorization", &bearer(&user))], &body), 401);
    assert_eq!(
        raw(
            "/api/v1/peer/offer",
            &[("Authorization", &bearer(&user)), ("X-Koalesce-Peer", "alpha")],
            &body
        ),
        401
    );
    assert_eq!(
        raw(
            "/api/v1/peer/offer",
            &[("Authorization", &bearer(SECRET)), ("X-Koalesce-Peer", "gamma")],
            &body
        ),
        401
    );
    assert_eq!(
        raw(
            "/api/v1/peer/offer",
            &[("Authorization", &bearer(SECRET)), ("X-Koalesce-Peer", "alpha")],
            "{not json"
        ),
        400
    );
    // The peer secret is no user token.
    assert_eq!(b.request("GET", "/api/v1/jobs", Some(SECRET), b"").0, 401);
    // Handoffs: only under the caller's own name; descriptions checked; inputs must be declared.
    let job = |h: &str, desc: &str| serde_json::json!({"handoff": h, "user": "alice", "description": desc});
    let ok_desc = "name = \"x\"\nexecutable = \"/bin/true\"\n[[components]]\nprocessors = 1\n";
    let refused = |h: &str, desc: &str| match as_alpha.call::<_, Value>("/api/v1/peer/handoffs", Some(&job(h, desc))) {
        Err(koalesce_server::peer::CallError::Refused(code, msg)) => (code, msg),
        other => panic!("accepted: {other:?}"),
    };
    assert_eq!(refused("gamma-1-1", ok_desc).0, 422);
    assert_eq!(refused("alpha-1", ok_desc).0, 422);
    assert_eq!(refused("alpha-1-1", "name = ").0, 400);
    let (code, msg) = refused("alpha-1-1", &format!("colour = \"red\"\n{ok_desc}"));
    assert_eq!(code, 422, "{msg}");
    let with_input = "name = \"x\"\nexecutable = \"/bin/true\"\ninputs = [\"d.bin\"]\n[[components]]\nprocessors = 1\n";
    assert_eq!(refused("alpha-1-1", with_input).0, 422);
    let too_big = "name = \"x\"\nexecutable = \"/bin/true\"\n[[components]]\nprocessors = 9\n";
    assert_eq!(refused("alpha-1-1", too_big).0, 422);
    // Commit of an unknown handoff: 404. An abort first leaves a tombstone: a late phase one
    // finds it aborted, and a commit is refused.
    assert!(matches!(
        as_alpha.call::<_, Value>("/api/v1/peer/handoffs/alpha-7-1/commit", Some(&())),
        Err(koalesce_server::peer::CallError::Refused(404, _))
    ));
    let ab: Value = as_alpha.call("/api/v1/peer/handoffs/alpha-7-1/abort", Some(&())).unwrap();
    assert_eq!(ab["state"], "aborted");
    let late: Value = as_alpha.call("/api/v1/peer/handoffs", Some(&job("alpha-7-1", ok_desc))).unwrap();
    assert_eq!(late["state"], "aborted");
    assert!(matches!(
        as_alpha.call::<_, Value>("/api/v1/peer/handoffs/alpha-7-1/commit", Some(&())),
        Err(koalesce_server::peer::CallError::Refused(409, _))
    ));
    // Prepared is not run; a commit runs it once, however often it is repeated.
    let p: Value = as_alpha.call("/api/v1/peer/handoffs", Some(&job("alpha-8-1", ok_desc))).unwrap();
    assert_eq!((p["state"].as_str(), p["job"].as_u64()), (Some("prepared"), None));
    let root = token(&b.data_dir, "root", true);
    assert_eq!(get(&b, &root, "/api/v1/jobs?all=true").as_array().unwrap().len(), 0);
    let c1: Value = as_alpha.call("/api/v1/peer/handoffs/alpha-8-1/commit", Some(&())).unwrap();
    let c2: Value = as_alpha.call("/api/v1/peer/handoffs/alpha-8-1/commit", Some(&())).unwrap();
    assert_eq!(c1["job"], c2["job"]);
    assert_eq!(get(&b, &root, "/api/v1/jobs?all=true").as_array().unwrap().len(), 1);
    // A committed handoff cannot be aborted.
    let ab: Value = as_alpha.call("/api/v1/peer/handoffs/alpha-8-1/abort", Some(&())).unwrap();
    assert_eq!(ab["state"], "committed");
    // `done` (the origin has the outputs back): never for an unknown, another peer's, an
    // aborted or a prepared handoff, nor one whose job has not ended; never with a user token.
    let done = |h: &str| match as_alpha.call::<_, Value>(&format!("/api/v1/peer/handoffs/{h}/done"), Some(&())) {
        Err(koalesce_server::peer::CallError::Refused(code, msg)) => (code, msg),
        other => panic!("accepted: {other:?}"),
    };
    assert_eq!(done("alpha-9-1").0, 404);
    assert_eq!(done("gamma-8-1").0, 404);
    assert_eq!(done("..%2F..%2Fetc").0, 404);
    let (code, msg) = done("alpha-7-1");
    assert_eq!(code, 409, "{msg}");
    assert!(msg.contains("aborted"), "{msg}");
    let _: Value = as_alpha.call("/api/v1/peer/handoffs", Some(&job("alpha-10-1", ok_desc))).unwrap();
    assert_eq!(done("alpha-10-1").0, 409, "a prepared handoff");
    assert_eq!(
        raw("/api/v1/peer/handoffs/alpha-8-1/done", &[("Authorization", &bearer(&user))], ""),
        401
    );
}

/// The origin is killed at each step of a handoff (its journal left as the crash left it) and
/// restarted: an unconfirmed handoff is aborted at the peer and the job runs once; a
/// confirmed one is committed there and runs there once.
#[test]
fn a_restarted_origin_finishes_or_aborts_its_handoffs_and_no_job_runs_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let (pa, pb) = (free_port(), free_port());
    let b = server(&tmp.path().join("b"), "beta", pb, &[("b1", 4)], &[("alpha", pa)]);
    let as_alpha = PeerClient::new("alpha", "beta", &b.url(), SECRET.into(), 5_000);
    let desc = sleep_job("crash", 0);
    // Job 1: crashed after phase one reached beta but before alpha recorded the answer.
    // Job 2: crashed after the commit point, before the commit reached beta.
    let adir = tmp.path().join("a");
    std::fs::create_dir_all(adir.join("data")).unwrap();
    let j = Journal::open(&adir.join("data").join("federation.db")).unwrap();
    for (id, h) in [(1u64, "alpha-1-1"), (2, "alpha-2-1")] {
        assert_eq!(j.add_grid_job("alice", "crash", &desc, 0).unwrap(), id);
        let t = Transition {
            peer: Some("beta"),
            handoff: Some(h),
            new_attempt: true,
            ..Default::default()
        };
        assert!(j.transition(id, state::WAITING, state::HANDING, &t).unwrap());
        let body = serde_json::json!({"handoff": h, "user": "alice", "description": desc});
        let p: Value = as_alpha.call("/api/v1/peer/handoffs", Some(&body)).unwrap();
        assert_eq!(p["state"], "prepared");
    }
    assert!(j.transition(2, state::HANDING, state::MIGRATED, &Transition::default()).unwrap());
    drop(j);
    let a = server(&adir, "alpha", pa, &[("a1", 1)], &[("beta", pb)]);
    let alice = token(&a.data_dir, "alice", false);
    let g1 = wait_grid(&a, &alice, 1, 30);
    let g2 = wait_grid(&a, &alice, 2, 30);
    assert_eq!(g1["state"], "succeeded");
    assert_eq!(g2["state"], "succeeded");
    assert_eq!(g2["runs_at"], "beta", "{g2}");
    let st1: Value = as_alpha.call::<(), _>("/api/v1/peer/handoffs/alpha-1-1", None).unwrap();
    assert_eq!(st1["state"], "aborted", "{st1}");
    // Beta ran job 2 (and job 1 only if it moved again under a new handoff); alpha ran job 1
    // only if it stayed: in all, two runs.
    let root = token(&b.data_dir, "root", true);
    let at_b = get(&b, &root, "/api/v1/jobs?all=true").as_array().unwrap().len();
    let at_a = get(&a, &alice, "/api/v1/jobs").as_array().unwrap().len();
    assert_eq!(at_a + at_b, 2, "alpha ran {at_a}, beta ran {at_b}");
    assert!(g1["reason"].as_str().is_some(), "{g1}");
}

/// R-I (002 §III-A2): alpha's jobs that would wait wait in its grid queue until idle beta
/// volunteers (RU 0 < δ at its σ check), then move one per volunteer.
#[test]
fn receiver_initiated_jobs_wait_for_a_volunteer_and_move_to_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (pa, pb) = (free_port(), free_port());
    let ri = PeerAlgorithm::ReceiverInitiated;
    let a = server_with(&tmp.path().join("a"), "alpha", pa, &[("a1", 1)], &[("beta", pb)], ri);
    let alice = token(&a.data_dir, "alice", false);
    let ids: Vec<u64> = (0..3).map(|i| grid_submit(&a, &alice, &sleep_job(&format!("r{i}"), 1))).collect();
    // No peer volunteers yet (beta is not up): the two that would wait stay in the grid queue.
    std::thread::sleep(Duration::from_millis(800));
    let waiting = get(&a, &alice, &format!("/api/v1/grid/jobs/{}", ids[2]));
    assert_eq!(waiting["state"], "waiting", "{waiting}");
    assert!(
        waiting["reason"].as_str().unwrap().starts_with("waiting for a volunteer"),
        "{waiting}"
    );
    let b = server_with(&tmp.path().join("b"), "beta", pb, &[("b1", 4)], &[("alpha", pa)], ri);
    let jobs: Vec<Value> = ids.iter().map(|&id| wait_grid(&a, &alice, id, 60)).collect();
    assert!(jobs.iter().all(|g| g["state"] == "succeeded"), "{jobs:?}");
    let moved: Vec<&Value> = jobs.iter().filter(|g| g["runs_at"] == "beta").collect();
    assert!(!moved.is_empty(), "{jobs:?}");
    for g in moved {
        assert!(g["reason"].as_str().unwrap().starts_with("moved (R-I): beta volunteered"), "{g}");
    }
    let root_b = token(&b.data_dir, "root", true);
    let at_b = get(&b, &root_b, "/api/v1/jobs?all=true").as_array().unwrap().len();
    let at_a = get(&a, &alice, "/api/v1/jobs").as_array().unwrap().len();
    assert_eq!(at_a + at_b, 3, "each job ran once: alpha {at_a}, beta {at_b}");
}

/// Issue 14: a job with input and output files moves to the idle peer with its input (fetched
/// peer to peer, checksummed, registered there under the origin's name), runs there once on
/// those bytes, and its outputs come back to the origin: the user gets them with `files get`
/// from the server they submitted to, under the grid job's names.
#[test]
fn a_job_moves_with_its_input_files_and_its_outputs_come_back_to_the_origin() {
    let Pair {
        a,
        b,
        alice,
        root_b,
        tmp: _tmp,
        ..
    } = pair();
    let data = text(300_000, 1);
    upload(&a, &alice, "data.bin", "a1", &data);
    // The one processor is busy for a while: the job with data would wait 20 s here.
    let blocker = grid_submit(&a, &alice, &sleep_job("blocker", 2));
    let script = "sha256sum \"$KOALESCE_INPUT_DATA_BIN\" | cut -d' ' -f1 > sum.txt && cp \"$KOALESCE_INPUT_DATA_BIN\" copy.bin";
    let job = format!(
        "name = \"with-data\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", {script:?}]\nruntime_estimate = \"20s\"\n\
         inputs = [{{ file = \"data.bin\", as = \"in.dat\" }}]\n\
         outputs = [\"sum.txt\", {{ file = \"copy.bin\", to = \"results/copy-${{KOALESCE_JOB_ID}}.bin\" }}]\n\
         [[components]]\nprocessors = 1\n"
    );
    let id = grid_submit(&a, &alice, &job);
    let g = wait_grid(&a, &alice, id, 60);
    assert_eq!(wait_grid(&a, &alice, blocker, 60)["runs_at"], "local");
    assert_eq!(
        (g["state"].as_str(), g["runs_at"].as_str()),
        (Some("succeeded"), Some("beta")),
        "{g}"
    );
    assert!(g["reason"].as_str().unwrap().contains("kB in"), "{g}");
    let sum_name = format!("grid-{id}/sum.txt");
    let copy_name = format!("results/copy-{id}.bin");
    assert_eq!(g["outputs"], serde_json::json!([sum_name, copy_name]), "{g}");
    // The outputs, from alpha: the job saw exactly alpha's bytes.
    let (code, sum) = a.request("GET", &format!("/api/v1/files/{sum_name}"), Some(&alice), b"");
    assert_eq!(code, 200, "{sum}");
    assert_eq!(sum.trim(), sha256_hex(&data));
    let (code, copy) = a.request("GET", &format!("/api/v1/files/{copy_name}"), Some(&alice), b"");
    assert_eq!(code, 200);
    assert_eq!(copy.as_bytes(), &data[..]);
    let files = get(&a, &alice, "/api/v1/files");
    let entry = files
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == copy_name.as_str())
        .unwrap()
        .clone();
    assert_eq!(
        (entry["owner"].as_str(), entry["sha256"].as_str()),
        (Some("alice"), Some(sha256_hex(&data).as_str()))
    );
    // At beta: the job ran once there, as peer-alpha, on the input it received under the
    // origin's reserved name; once the outputs are back at alpha, that input goes (catalogue
    // entry and bytes).
    let received = format!("peer-alpha/{}", sha256_hex(&data));
    wait_no_received(&b, &root_b, 20);
    // Its outputs at beta go too: the origin has them.
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(&b, &root_b, "/api/v1/files") != serde_json::json!([]) {
        assert!(Instant::now() < deadline, "{}", get(&b, &root_b, "/api/v1/files"));
        std::thread::sleep(Duration::from_millis(50));
    }
    let jobs_b = get(&b, &root_b, "/api/v1/jobs?all=true");
    assert_eq!(jobs_b.as_array().unwrap().len(), 1, "{jobs_b}");
    assert_eq!(
        get(&a, &alice, "/api/v1/jobs").as_array().unwrap().len(),
        1,
        "only the blocker ran at alpha"
    );
    // Users cannot take the federation's names.
    let (code, msg) = a.request("PUT", "/api/v1/files/grid-99/x?site=a1", Some(&alice), b"x");
    assert_eq!(code, 422, "{msg}");
    let (code, msg) = b.request("PUT", &format!("/api/v1/files/{received}x?site=b1"), Some(&root_b), b"x");
    assert_eq!(code, 422, "{msg}");
}

/// Issue 14: the inputs a peer received for a migrated job are removed there once the job
/// ended and its outputs are back at the origin (`done`), but not while another job handed
/// over with the same input still runs there.
#[test]
fn received_inputs_go_once_the_outputs_are_back_unless_a_running_job_shares_them() {
    let Pair {
        a,
        b,
        alice,
        root_b,
        tmp: _tmp,
        ..
    } = pair();
    let data = text(200_000, 7);
    upload(&a, &alice, "data.bin", "a1", &data);
    let blocker = grid_submit(&a, &alice, &sleep_job("blocker", 2));
    let job = |name: &str, secs: u32| {
        let script = format!("sleep {secs} && sha256sum \"$KOALESCE_INPUT_DATA_BIN\" | cut -d' ' -f1 > sum.txt");
        format!(
            "name = {name:?}\nexecutable = \"/bin/sh\"\narguments = [\"-c\", {script:?}]\nruntime_estimate = \"20s\"\n\
             inputs = [\"data.bin\"]\noutputs = [\"sum.txt\"]\n[[components]]\nprocessors = 1\n"
        )
    };
    let short = grid_submit(&a, &alice, &job("short", 0));
    let long = grid_submit(&a, &alice, &job("long", 12));
    let g = wait_grid(&a, &alice, short, 60);
    assert_eq!(
        (g["state"].as_str(), g["runs_at"].as_str()),
        (Some("succeeded"), Some("beta")),
        "{g}"
    );
    // The short job is released at beta (its origin recorded the answer to `done`) ...
    wait_released(&a, short, 10);
    // ... while the long one, with the same input, still runs there: the input stays.
    let l = get(&a, &alice, &format!("/api/v1/grid/jobs/{long}"));
    assert_eq!(l["runs_at"], "beta", "{l}");
    assert!(!["succeeded", "failed", "cancelled"].contains(&l["state"].as_str().unwrap()), "{l}");
    let received = format!("peer-alpha/{}", sha256_hex(&data));
    let (names, stored) = received_here(&b, &root_b);
    assert_eq!(names, vec![received.clone()], "kept for the running job");
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(std::fs::read(&stored[0]).unwrap(), data);
    // The long job ends with the right bytes; then the input goes at beta.
    let g = wait_grid(&a, &alice, long, 60);
    assert_eq!(g["state"], "succeeded", "{g}");
    let (code, sum) = a.request("GET", &format!("/api/v1/files/grid-{long}/sum.txt"), Some(&alice), b"");
    assert_eq!((code, sum.trim()), (200, sha256_hex(&data).as_str()));
    wait_no_received(&b, &root_b, 20);
    wait_released(&a, long, 1);
    assert_eq!(wait_grid(&a, &alice, blocker, 60)["runs_at"], "local");
    // Each job ran once; the origin's input is untouched.
    assert_eq!(get(&b, &root_b, "/api/v1/jobs?all=true").as_array().unwrap().len(), 2);
    let (code, back) = a.request("GET", "/api/v1/files/data.bin", Some(&alice), b"");
    assert_eq!((code, back.as_bytes() == &data[..]), (200, true));
}

/// Peer inputs are untrusted (issue 14): declarations that are malformed, oversized or name
/// files the job does not use are refused at phase one with the field named; bytes that are
/// not the declared content, or more of them than declared, are discarded with a clear error
/// and nothing is registered or run; an interrupted transfer resumes with a Range request from
/// where it stopped, and only the verified file is used.
#[test]
fn peer_inputs_are_checked_and_an_interrupted_fetch_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let data = text(200_000, 3);
    let sha = sha256_hex(&data);
    let fake = FakeOrigin::start(data.clone());
    let b = server_tuned(
        &tmp.path().join("b"),
        "beta",
        free_port(),
        &[("b1", 4)],
        &[("alpha", fake.port)],
        |f| f.probe_bytes = 0,
    );
    let as_alpha = PeerClient::new("alpha", "beta", &b.url(), SECRET.into(), 5_000);
    let desc = "name = \"x\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"test $(wc -c < \\\"$KOALESCE_INPUT_D_BIN\\\") = 200000\"]\ninputs = [\"d.bin\"]\n[[components]]\nprocessors = 1\n";
    let handoff = |inputs: Value, description: &str| serde_json::json!({"handoff": "alpha-1-1", "user": "alice", "description": description, "inputs": inputs});
    let f = |name: &str, size: u64, sha: &str| serde_json::json!({"name": name, "size_bytes": size, "sha256": sha});
    let refused = |body: Value| match as_alpha.call::<_, Value>("/api/v1/peer/handoffs", Some(&body)) {
        Err(koalesce_server::peer::CallError::Refused(code, msg)) => (code, msg),
        other => panic!("accepted: {other:?}"),
    };
    let cases: Vec<(Value, &str, &str)> = vec![
        (serde_json::json!([]), desc, "'d.bin' is not declared"),
        (serde_json::json!([f("d.bin", 200_000, &sha), f("../../../etc/passwd", 1, &sha)]), desc, "not an input of the job"),
        (serde_json::json!([f("d.bin", 200_000, "../../etc/passwd")]), desc, "inputs[0].sha256"),
        (serde_json::json!([f("d.bin", u64::MAX, &sha)]), desc, "inputs[0].size_bytes"),
        (serde_json::json!([f("d.bin", 1, &sha), f("d.bin", 1, &sha)]), desc, "declared twice"),
        (serde_json::json!([{"name": "d.bin", "size_bytes": 1}]), desc, "sha256"),
        (
            serde_json::json!([f("d.bin", 200_000, &sha)]),
            "name = \"x\"\nexecutable = \"/bin/true\"\ninputs = [\"d.bin\"]\noutputs = [{ file = \"o\", to = \"/etc/x\" }]\n[[components]]\nprocessors = 1\n",
            "outputs",
        ),
    ];
    for (inputs, d, want) in cases {
        let (code, msg) = refused(handoff(inputs, d));
        assert!(code == 422 || code == 400, "{code} {msg}");
        assert!(msg.contains(want), "{msg} should say {want}");
    }
    let p: Value = as_alpha
        .call(
            "/api/v1/peer/handoffs",
            Some(&handoff(serde_json::json!([f("d.bin", 200_000, &sha)]), desc)),
        )
        .unwrap();
    assert_eq!(p["state"], "prepared", "{p}");
    let root = token(&b.data_dir, "root", true);
    // Commits until the handoff's view says `want` (a failure text, or a job id).
    let commit_until = |want: &dyn Fn(&Value) -> bool| -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let v: Value = as_alpha.call("/api/v1/peer/handoffs/alpha-1-1/commit", Some(&())).unwrap();
            if want(&v) {
                return v;
            }
            assert!(Instant::now() < deadline, "{v}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let failed_with = |s: &'static str| move |v: &Value| v["failure"].as_str().is_some_and(|f| f.contains(s));
    let v = commit_until(&failed_with("checksum mismatch"));
    assert_eq!(v["inputs_here"], serde_json::json!([0, 1]), "{v}");
    assert!(v["job"].is_null());
    fake.set(Serve::TooMuch);
    commit_until(&failed_with("more than the 200000 bytes"));
    // Nothing registered, nothing run, no stray file in the storage.
    assert!(get(&b, &root, "/api/v1/files").as_array().unwrap().is_empty());
    assert!(get(&b, &root, "/api/v1/jobs?all=true").as_array().unwrap().is_empty());
    // Cut after 120 000 bytes: the next fetch asks for the rest only.
    fake.set(Serve::Cut(120_000));
    commit_until(&failed_with("resumes from there"));
    // The commit that saw the failure may have started one more fetch (still cut): let it end
    // before counting, so that only the fetch after the switch is counted.
    let requests = || fake.seen.lock().unwrap().len();
    let mut last = requests();
    loop {
        std::thread::sleep(Duration::from_millis(400));
        if requests() == last {
            break;
        }
        last = requests();
    }
    let before = fake.served.load(std::sync::atomic::Ordering::SeqCst);
    fake.set(Serve::Good);
    let v = commit_until(&|v: &Value| v["job"].is_u64());
    let resumed = fake.seen.lock().unwrap().iter().any(|(_, r)| r.as_deref() == Some("bytes=120000-"));
    assert!(resumed, "no Range request: {:?}", fake.seen.lock().unwrap());
    let after = fake.served.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(after - before, 80_000, "only the missing bytes crossed");
    let id = v["job"].as_u64().unwrap();
    let j = common::wait_state(&b, &root, id, &["succeeded", "failed"], 30);
    assert_eq!(j["state"], "succeeded", "the job read the 200000 verified bytes: {j}");
    let files = get(&b, &root, "/api/v1/files");
    assert_eq!(files.as_array().unwrap().len(), 1, "{files}");
    assert_eq!(files[0]["name"], format!("peer-alpha/{sha}"));
    let storage: Vec<_> = walk(&b.data_dir)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("peer-alpha"))
        .collect();
    assert_eq!(storage.len(), 1, "one stored copy, no partials left: {storage:?}");
}
