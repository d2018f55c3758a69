//! Live federation (issue 14), what is left when a migrated job does not simply succeed: the
//! logs of a job that failed, timed out or was cancelled at the peer come back to its origin;
//! a cancel at the origin reaches the peer (also once a silent peer answers again); the inputs
//! a receiver got for a handoff that was then aborted — by the origin, by a cancel, or by the
//! receiver's own deadline after a restart — are removed there, and nothing else is.

mod common;
mod federation_common;

use std::time::{Duration, Instant};

use common::token;
use federation_common::*;
use koalesce_server::peer::{CallError, Journal, PeerClient};
use koalesce_server::BackgroundServer;
use serde_json::Value;

/// A log of grid job `id` at `srv` (`query`: stream, tail, …): status, body, job-state header.
fn grid_log(srv: &BackgroundServer, tok: &str, id: u64, query: &str) -> (u16, String) {
    srv.request("GET", &format!("/api/v1/grid/jobs/{id}/logs?{query}"), Some(tok), b"")
}

/// Issue 14: a migrated job that fails at the peer (exit 3), and one that runs past its
/// walltime there, end at the origin with their stdout and stderr back: `GET
/// /api/v1/grid/jobs/{id}/logs` at the origin answers byte for byte what the peer's own logs
/// endpoint answers for the job there (with `tail` as for a local job), and the peer is then
/// told it may drop the job's inputs (a timed-out job is an ended job too).
#[test]
fn logs_of_migrated_jobs_that_failed_or_timed_out_come_back_to_the_origin() {
    let Pair {
        a,
        b,
        alice,
        root_b,
        tmp: _tmp,
        ..
    } = pair();
    let data = text(50_000, 5);
    upload(&a, &alice, "data.bin", "a1", &data);
    let blocker = grid_submit(&a, &alice, &sleep_job("blocker", 3));
    let script = "for i in 1 2 3; do echo \"line $i of stdout\"; done; echo 'error: disk on fire' >&2; \
                  wc -c < \"$KOALESCE_INPUT_DATA_BIN\" >&2; echo partial > part.txt; exit 3";
    let failing = format!(
        "name = \"fails\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", {script:?}]\nruntime_estimate = \"20s\"\n\
         inputs = [\"data.bin\"]\noutputs = [\"part.txt\"]\n[[components]]\nprocessors = 1\n"
    );
    let slow = "name = \"slow\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"echo before the limit; exec sleep 60\"]\n\
                runtime_estimate = \"20s\"\nwalltime = \"2s\"\n[[components]]\nprocessors = 1\n";
    let f = grid_submit(&a, &alice, &failing);
    let t = grid_submit(&a, &alice, slow);
    let gf = wait_grid(&a, &alice, f, 60);
    let gt = wait_grid(&a, &alice, t, 60);
    assert_eq!(
        (gf["state"].as_str(), gf["runs_at"].as_str(), gf["exit_ok"].as_bool()),
        (Some("failed"), Some("beta"), Some(false)),
        "{gf}"
    );
    assert_eq!(
        (gt["state"].as_str(), gt["runs_at"].as_str()),
        (Some("timeout"), Some("beta")),
        "{gt}"
    );
    // At the origin, as for a local job: stdout, stderr, the last line only.
    let (code, out) = grid_log(&a, &alice, f, "stream=stdout");
    assert_eq!(
        (code, out.as_str()),
        (200, "line 1 of stdout\nline 2 of stdout\nline 3 of stdout\n")
    );
    let (code, err) = grid_log(&a, &alice, f, "stream=stderr");
    assert_eq!(
        (code, err.as_str()),
        (200, "error: disk on fire\n50000\n"),
        "the job read the input"
    );
    let (_, last) = grid_log(&a, &alice, f, "tail=1");
    assert_eq!(last, "line 3 of stdout\n");
    let (_, out_t) = grid_log(&a, &alice, t, "stream=stdout");
    assert_eq!(out_t, "before the limit\n");
    // The same bytes as the peer's own endpoint gives for the job there.
    for (g, stream) in [(&gf, "stdout"), (&gf, "stderr"), (&gt, "stdout")] {
        let rid = g["job"].as_u64().unwrap();
        let (code, there) = b.request("GET", &format!("/api/v1/jobs/{rid}/logs?stream={stream}"), Some(&root_b), b"");
        let (_, here) = grid_log(&a, &alice, g["id"].as_u64().unwrap(), &format!("stream={stream}"));
        assert_eq!((code, here), (200, there));
    }
    // A failed job's outputs stay where it ran, as for a job that fails locally.
    assert_eq!(gf["outputs"], serde_json::json!([]), "{gf}");
    // Another user sees nothing; a component the job does not have is named.
    let bob = token(&a.data_dir, "bob", false);
    assert_eq!(grid_log(&a, &bob, f, "stream=stderr").0, 404);
    let (code, msg) = grid_log(&a, &alice, f, "component=1");
    assert_eq!(code, 404, "{msg}");
    assert!(msg.contains("component"), "{msg}");
    // Both ended jobs are released at beta; the input they shared is gone there.
    wait_released(&a, f, 20);
    wait_released(&a, t, 20);
    wait_no_received(&b, &root_b, 20);
    // The local one: its logs through the same endpoint.
    assert_eq!(wait_grid(&a, &alice, blocker, 60)["runs_at"], "local");
    let (code, none) = grid_log(&a, &alice, blocker, "stream=stdout");
    assert_eq!((code, none.as_str()), (200, ""));
}

/// Issue 14: the origin's cancel reaches the peer. A job running at beta shows its output at
/// the origin while it runs, is cancelled there and its output so far comes back; with beta gone, a cancel answers at once (202, recorded,
/// beta backed off), and is delivered once beta answers again.
#[test]
fn a_cancel_at_the_origin_reaches_the_peer_also_after_it_was_away() {
    let Pair {
        a,
        b,
        alice,
        root_b,
        pa,
        pb,
        tmp,
    } = pair();
    let bdir = tmp.path().join("b");
    let blocker = grid_submit(&a, &alice, &sleep_job("blocker", 30));
    let long = |name: &str| {
        format!(
            "name = {name:?}\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"echo started; exec sleep 120\"]\n\
             runtime_estimate = \"20s\"\n[[components]]\nprocessors = 1\n"
        )
    };
    let running_at_beta = |id: u64| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let g = get(&a, &alice, &format!("/api/v1/grid/jobs/{id}"));
            if g["runs_at"] == "beta" && g["state"] == "running" {
                return g;
            }
            assert!(Instant::now() < deadline, "{g}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let one = grid_submit(&a, &alice, &long("one"));
    let two = grid_submit(&a, &alice, &long("two"));
    let g1 = running_at_beta(one);
    let g2 = running_at_beta(two);
    // What the job at beta writes is seen at the origin while it runs (as `koalesce logs
    // --follow` asks: from an offset on; the last lines).
    let (rid1, rid2) = (g1["job"].as_u64().unwrap(), g2["job"].as_u64().unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    while grid_log(&a, &alice, one, "stream=stdout&offset=0").1 != "started\n" {
        assert!(Instant::now() < deadline, "job {rid1} at beta wrote nothing");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(grid_log(&a, &alice, one, "stream=stdout&offset=8"), (200, String::new()));
    assert_eq!(grid_log(&a, &alice, one, "tail=1"), (200, "started\n".to_string()));
    assert_eq!(grid_log(&a, &alice, one, "stream=stderr"), (200, String::new()));
    // Then cancel it at the origin.
    let (code, body) = a.request("POST", &format!("/api/v1/grid/jobs/{one}/cancel"), Some(&alice), b"");
    assert!(code == 200 || code == 202, "{code} {body}");
    let g = wait_grid(&a, &alice, one, 30);
    assert_eq!(
        (g["state"].as_str(), g["runs_at"].as_str()),
        (Some("cancelled"), Some("beta")),
        "{g}"
    );
    assert_eq!(common::job(&b, &root_b, rid1)["state"], "cancelled");
    assert_eq!(grid_log(&a, &alice, one, "stream=stdout"), (200, "started\n".to_string()));
    // Another user cannot cancel alice's grid job; an ended one answers 409.
    let bob = token(&a.data_dir, "bob", false);
    assert_eq!(
        a.request("POST", &format!("/api/v1/grid/jobs/{two}/cancel"), Some(&bob), b"").0,
        404
    );
    assert_eq!(
        a.request("POST", &format!("/api/v1/grid/jobs/{one}/cancel"), Some(&alice), b"").0,
        409
    );
    // Beta goes away (its job keeps running under its supervisor): the cancel of the second
    // job answers within the peer's time limit, is recorded, and beta is backed off.
    b.stop();
    let t0 = Instant::now();
    let (code, body) = a.request("POST", &format!("/api/v1/grid/jobs/{two}/cancel"), Some(&alice), b"");
    assert!(t0.elapsed() < Duration::from_secs(5), "the cancel hung for {:?}", t0.elapsed());
    assert_eq!(code, 202, "{body}");
    assert_eq!(common::json(&body)["cancel_requested"], true, "{body}");
    let f = get(&a, &alice, "/api/v1/federation");
    assert!(f["peers"][0]["failures"].as_u64().unwrap() >= 1, "{f}");
    assert!(f["peers"][0]["last_error"].as_str().is_some(), "{f}");
    // Status answers at once while beta is away, with where the job runs and why it moved.
    let t0 = Instant::now();
    let g = get(&a, &alice, &format!("/api/v1/grid/jobs/{two}"));
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(g["runs_at"], "beta", "{g}");
    assert!(g["reason"].as_str().unwrap().starts_with("moved: local ATT"), "{g}");
    // Beta is back on its port: the cancel is delivered.
    let b = server(&bdir, "beta", pb, &[("b1", 4)], &[("alpha", pa)]);
    let g = wait_grid(&a, &alice, two, 60);
    assert_eq!(g["state"], "cancelled", "{g}");
    assert_eq!(common::job(&b, &root_b, rid2)["state"], "cancelled");
    assert_eq!(grid_log(&a, &alice, two, "stream=stdout").1, "started\n");
    // The grid cancel of a job that runs here cancels it here.
    let (code, body) = a.request("POST", &format!("/api/v1/grid/jobs/{blocker}/cancel"), Some(&alice), b"");
    assert!(code == 200 || code == 202, "{code} {body}");
    let g = wait_grid(&a, &alice, blocker, 30);
    assert_eq!(
        (g["state"].as_str(), g["runs_at"].as_str()),
        (Some("cancelled"), Some("local")),
        "{g}"
    );
}

/// The received files of `srv` under `federation-partial` (partials of transfers from peers).
fn partials(srv: &BackgroundServer) -> Vec<std::path::PathBuf> {
    walk(&srv.data_dir.join("federation-partial"))
}

/// Issue 14: a receiver deletes the inputs it received for a handoff that was aborted —
/// complete (registered) and partial — unless a live handoff declares the same content; a
/// peer cannot make it delete anything else: not another peer's received file, not a user's
/// file with the same content, not with ids shaped like paths.
#[test]
fn inputs_of_aborted_handoffs_are_removed_at_the_receiver_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let data = text(200_000, 9);
    let sha = sha256_hex(&data);
    let fake = FakeOrigin::start(data.clone());
    fake.set(Serve::Good);
    let b = server_tuned(
        &tmp.path().join("b"),
        "beta",
        free_port(),
        &[("b1", 4)],
        &[("alpha", fake.port), ("gamma", fake.port)],
        |f| f.probe_bytes = 0,
    );
    let root = token(&b.data_dir, "root", true);
    // A user's own file at beta with the very same content.
    let (code, body) = b.request("PUT", "/api/v1/files/mine.bin?site=b1", Some(&root), &data);
    assert_eq!(code, 201, "{body}");
    let as_alpha = PeerClient::new("alpha", "beta", &b.url(), SECRET.into(), 5_000);
    let as_gamma = PeerClient::new("gamma", "beta", &b.url(), SECRET.into(), 5_000);
    // The job waits for a file that never appears, so a committed one keeps running.
    let desc = "name = \"x\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"sleep 60\"]\ninputs = [\"d.bin\"]\n[[components]]\nprocessors = 1\n";
    let handoff = |h: &str| {
        serde_json::json!({"handoff": h, "user": "alice", "description": desc,
            "inputs": [{"name": "d.bin", "size_bytes": 200_000, "sha256": sha}]})
    };
    let prepare = |c: &PeerClient, h: &str| prepare_handoff(c, h, desc, handoff(h)["inputs"].clone());
    let files = || catalogue(&b, &root);
    // Gamma hands over a job with the same content; it is committed and runs at beta.
    prepare(&as_gamma, "gamma-1-1");
    commit_until_submitted(&as_gamma, "gamma-1-1", 20);
    // Logs and cancels of gamma's handoff: only gamma's, only `c<N>/stdout|stderr`.
    let status = |c: &PeerClient, path: &str| c.get_bytes(path, 0, 1 << 20).unwrap().status().as_u16();
    assert_eq!(status(&as_gamma, "/api/v1/peer/handoffs/gamma-1-1/logs/c0/stdout"), 200);
    assert_eq!(status(&as_alpha, "/api/v1/peer/handoffs/gamma-1-1/logs/c0/stdout"), 404);
    for bad in [
        "c0%2F..%2F..%2F..%2Fetc%2Fpasswd",
        "..%2F..%2Fetc%2Fpasswd",
        "c0/stdin",
        "c99/stdout",
        "c0",
    ] {
        assert_eq!(
            status(&as_gamma, &format!("/api/v1/peer/handoffs/gamma-1-1/logs/{bad}")),
            404,
            "{bad}"
        );
    }
    let r = as_alpha.call::<_, Value>("/api/v1/peer/handoffs/gamma-1-1/cancel", Some(&()));
    assert!(matches!(r, Err(CallError::Refused(404, _))), "{r:?}");
    // Alpha's handoff gets its input in full (the commit starts the fetch), then is aborted.
    prepare(&as_alpha, "alpha-1-1");
    let received = format!("peer-alpha/{sha}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut first = true;
    while !files().contains(&received) {
        if first {
            // Only one commit: with its input here the next one would run the job.
            let v: Value = as_alpha.call("/api/v1/peer/handoffs/alpha-1-1/commit", Some(&())).unwrap();
            assert!(v["job"].is_null(), "{v}");
            first = false;
        }
        assert!(Instant::now() < deadline, "{:?}", files());
        std::thread::sleep(Duration::from_millis(50));
    }
    let stored_alpha: Vec<_> = walk(&b.data_dir)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("peer-alpha"))
        .collect();
    assert_eq!(stored_alpha.len(), 1, "{stored_alpha:?}");
    // Ids shaped like paths, another peer's handoff: refused; nothing removed.
    for bad in ["..%2F..%2Fb1", "alpha-1-1%2F..%2F..", "alpha-..-1", "gamma-1-1", "alpha-1-1-1"] {
        let r = as_alpha.call::<_, Value>(&format!("/api/v1/peer/handoffs/{bad}/abort"), Some(&()));
        assert!(matches!(r, Err(CallError::Refused(404 | 422, _))), "{bad}: {r:?}");
    }
    assert_eq!(files(), vec!["mine.bin".to_string(), received.clone(), format!("peer-gamma/{sha}")]);
    let ab: Value = as_alpha.call("/api/v1/peer/handoffs/alpha-1-1/abort", Some(&())).unwrap();
    assert_eq!(ab["state"], "aborted");
    // Alpha's copy is gone (catalogue and disk); gamma's and the user's stay, byte for byte.
    assert_eq!(files(), vec!["mine.bin".to_string(), format!("peer-gamma/{sha}")]);
    assert!(stored_alpha.iter().all(|p| !p.exists()), "{stored_alpha:?}");
    for name in ["mine.bin".to_string(), format!("peer-gamma/{sha}")] {
        let (code, back) = b.request("GET", &format!("/api/v1/files/{name}"), Some(&root), b"");
        assert_eq!((code, back.as_bytes() == &data[..]), (200, true), "{name}");
    }
    // A partial: the origin's answer breaks after 120 000 bytes; the partial is kept for a
    // resume ... until the handoff is aborted. A live handoff declaring the same content
    // keeps it.
    fake.set(Serve::Cut(120_000));
    prepare(&as_alpha, "alpha-2-1");
    commit_until_failure(&as_alpha, "alpha-2-1", "resumes from there", 20);
    // A fetch a later commit started may be between its restart (the cut answer is a 200 to a
    // resume, which drops the record) and its checkpoint: waited for.
    wait_until(20, &|| format!("bytes and their record: {:?}", partials(&b)), &|| {
        partials(&b).len() == 2
    });
    prepare(&as_alpha, "alpha-3-1");
    let _: Value = as_alpha.call("/api/v1/peer/handoffs/alpha-2-1/abort", Some(&())).unwrap();
    // (Waited for, not asserted at once: the fetch above may still be in that window.)
    wait_until(20, &|| format!("alpha-3-1 declares the same content: {:?}", partials(&b)), &|| {
        partials(&b).len() == 2
    });
    let _: Value = as_alpha.call("/api/v1/peer/handoffs/alpha-3-1/abort", Some(&())).unwrap();
    wait_until(20, &|| format!("{:?}", partials(&b)), &|| partials(&b).is_empty());
    assert_eq!(files(), vec!["mine.bin".to_string(), format!("peer-gamma/{sha}")]);
    // A late commit after the abort: refused, nothing runs.
    assert!(matches!(
        as_alpha.call::<_, Value>("/api/v1/peer/handoffs/alpha-2-1/commit", Some(&())),
        Err(CallError::Refused(409, _))
    ));
    assert_eq!(
        get(&b, &root, "/api/v1/jobs?all=true").as_array().unwrap().len(),
        1,
        "gamma's job only"
    );
}

/// Issue 14: a receiver stopped with a partial input of a prepared handoff, whose origin then
/// never commits, aborts the handoff itself once `handoff_timeout_ms` passed — after its
/// restart, from its journal — and removes the partial; a commit that comes later is refused.
#[test]
fn a_restarted_receiver_aborts_a_handoff_never_committed_and_drops_its_partial() {
    let tmp = tempfile::tempdir().unwrap();
    let data = text(200_000, 11);
    let sha = sha256_hex(&data);
    let fake = FakeOrigin::start(data.clone());
    fake.set(Serve::Cut(150_000));
    let bdir = tmp.path().join("b");
    let pb = free_port();
    let start = || {
        server_tuned(&bdir, "beta", pb, &[("b1", 4)], &[("alpha", fake.port)], |f| {
            f.probe_bytes = 0;
            f.handoff_timeout_ms = 5_000;
        })
    };
    let b = start();
    let as_alpha = PeerClient::new("alpha", "beta", &b.url(), SECRET.into(), 5_000);
    let desc = "name = \"x\"\nexecutable = \"/bin/true\"\ninputs = [\"d.bin\"]\n[[components]]\nprocessors = 1\n";
    let body = serde_json::json!({"handoff": "alpha-5-1", "user": "alice", "description": desc,
        "inputs": [{"name": "d.bin", "size_bytes": 200_000, "sha256": sha}]});
    let p: Value = as_alpha.call("/api/v1/peer/handoffs", Some(&body)).unwrap();
    assert_eq!(p["state"], "prepared");
    commit_until_failure(&as_alpha, "alpha-5-1", "resumes from there", 20);
    wait_until(20, &|| format!("bytes and their record: {:?}", partials(&b)), &|| {
        partials(&b).len() == 2
    });
    let record = partials(&b).into_iter().find(|p| p.to_string_lossy().ends_with(".offset")).unwrap();
    b.stop();
    // As a SIGKILL in the middle of a checkpoint leaves it: a temporary copy of the record.
    std::fs::write(format!("{}.tmp.4242.1", record.display()), b"{").unwrap();
    // Restarted: the handoff is prepared in its journal, its partial on disk. Within the
    // deadline nothing goes (the origin may still commit); after it, all of it goes.
    let b = start();
    let root = token(&b.data_dir, "root", true);
    assert_eq!(partials(&b).len(), 3, "kept right after the restart");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !partials(&b).is_empty() {
        assert!(Instant::now() < deadline, "{:?}", partials(&b));
        std::thread::sleep(Duration::from_millis(100));
    }
    let st: Value = as_alpha.call::<(), _>("/api/v1/peer/handoffs/alpha-5-1", None).unwrap();
    assert_eq!(st["state"], "aborted", "{st}");
    assert!(matches!(
        as_alpha.call::<_, Value>("/api/v1/peer/handoffs/alpha-5-1/commit", Some(&())),
        Err(CallError::Refused(409, _))
    ));
    assert!(get(&b, &root, "/api/v1/files").as_array().unwrap().is_empty());
    assert!(get(&b, &root, "/api/v1/jobs?all=true").as_array().unwrap().is_empty());
}

/// Issue 14: the receiver aborted a handoff whose origin did not commit it in time (the
/// origin was down past `handoff_timeout_ms` after the commit point): the restarted origin's
/// commit gets 409, it sees `aborted` and decides the job again — it runs exactly once.
#[test]
fn an_origin_whose_handoff_expired_at_the_peer_decides_the_job_again_and_it_runs_once() {
    use koalesce_server::peer::journal::{state, Transition};
    let tmp = tempfile::tempdir().unwrap();
    let (pa, pb) = (free_port(), free_port());
    let b = server_tuned(&tmp.path().join("b"), "beta", pb, &[("b1", 4)], &[("alpha", pa)], |f| {
        f.handoff_timeout_ms = 1_000;
    });
    let as_alpha = PeerClient::new("alpha", "beta", &b.url(), SECRET.into(), 5_000);
    let desc = sleep_job("expired", 0);
    // Alpha's journal as it was when alpha died just after the commit point.
    let adir = tmp.path().join("a");
    std::fs::create_dir_all(adir.join("data")).unwrap();
    let j = Journal::open(&adir.join("data").join("federation.db")).unwrap();
    assert_eq!(j.add_grid_job("alice", "expired", &desc, 0).unwrap(), 1);
    let t = Transition {
        peer: Some("beta"),
        handoff: Some("alpha-1-1"),
        new_attempt: true,
        ..Default::default()
    };
    assert!(j.transition(1, state::WAITING, state::HANDING, &t).unwrap());
    let body = serde_json::json!({"handoff": "alpha-1-1", "user": "alice", "description": desc});
    let p: Value = as_alpha.call("/api/v1/peer/handoffs", Some(&body)).unwrap();
    assert_eq!(p["state"], "prepared");
    assert!(j.transition(1, state::HANDING, state::MIGRATED, &Transition::default()).unwrap());
    drop(j);
    // Beta gives up on it after 1 s.
    let deadline = Instant::now() + Duration::from_secs(20);
    while as_alpha.call::<(), Value>("/api/v1/peer/handoffs/alpha-1-1", None).unwrap()["state"] != "aborted" {
        assert!(Instant::now() < deadline, "beta never aborted the handoff");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Alpha comes back: the job is decided again and runs once, wherever.
    let a = server(&adir, "alpha", pa, &[("a1", 1)], &[("beta", pb)]);
    let alice = token(&a.data_dir, "alice", false);
    let g = wait_grid(&a, &alice, 1, 30);
    assert_eq!(g["state"], "succeeded", "{g}");
    let root = token(&b.data_dir, "root", true);
    let at_b = get(&b, &root, "/api/v1/jobs?all=true").as_array().unwrap().len();
    let at_a = get(&a, &alice, "/api/v1/jobs").as_array().unwrap().len();
    assert_eq!(at_a + at_b, 1, "alpha ran {at_a}, beta ran {at_b}");
    let st: Value = as_alpha.call::<(), _>("/api/v1/peer/handoffs/alpha-1-1", None).unwrap();
    assert_eq!(st["state"], "aborted", "{st}");
}

/// Issue 14 with the data plane (issue 17): alpha's and beta's sites keep their storage in
/// storage agents, reached only through them. A job's input moves from alpha's agent (read
/// there and streamed to beta) into beta's agent (uploaded, verified), the job runs once at
/// beta on those bytes, its output goes from beta's agent back into alpha's; the servers keep
/// no copies; after `done` beta's agent no longer holds the input.
#[test]
fn peer_transfers_go_through_the_sites_storage_agents() {
    use koalesce_server::dataplane::{AgentClient, ClientConfig, Endpoint, Role};
    let tmp = tempfile::tempdir().unwrap();
    let (pa, pb) = (free_port(), free_port());
    let (a, agents_a) = server_with_agents(&tmp.path().join("a"), "alpha", pa, &[("a1", 1)], &[("beta", pb)]);
    let (b, agents_b) = server_with_agents(&tmp.path().join("b"), "beta", pb, &[("b1", 4)], &[("alpha", pa)]);
    let client = AgentClient::new(ClientConfig::default());
    let stats =
        |agent: &koalesce_server::agent::BackgroundAgent| client.stats(&Endpoint::new(agent.url(), SECRET), Role::Destination).unwrap();
    let alice = token(&a.data_dir, "alice", false);
    let root_b = token(&b.data_dir, "root", true);
    let data = text(300_000, 13);
    upload(&a, &alice, "data.bin", "a1", &data);
    let (sent_a, got_b) = (stats(&agents_a[0]).bytes_sent, stats(&agents_b[0]).uploads_completed);
    let moved_b = transfer_bytes(&b);
    let blocker = grid_submit(&a, &alice, &sleep_job("blocker", 2));
    let script = "sha256sum \"$KOALESCE_INPUT_DATA_BIN\" | cut -d' ' -f1 > sum.txt";
    let job = format!(
        "name = \"agents\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", {script:?}]\nruntime_estimate = \"20s\"\n\
         inputs = [\"data.bin\"]\noutputs = [\"sum.txt\"]\n[[components]]\nprocessors = 1\n"
    );
    let id = grid_submit(&a, &alice, &job);
    let g = wait_grid(&a, &alice, id, 60);
    assert_eq!(
        (g["state"].as_str(), g["runs_at"].as_str()),
        (Some("succeeded"), Some("beta")),
        "{g}"
    );
    // The input left alpha's agent and arrived at beta's through their agents.
    assert!(
        stats(&agents_a[0]).bytes_sent >= sent_a + data.len() as u64,
        "{:?}",
        stats(&agents_a[0])
    );
    assert!(stats(&agents_b[0]).uploads_completed > got_b, "{:?}", stats(&agents_b[0]));
    // Beta counts the input it received once (plus the job's 65-byte output), not once for
    // the fetch and again for the upload to its agent.
    let counted = transfer_bytes(&b) - moved_b;
    assert!(
        (data.len() as u64..2 * data.len() as u64).contains(&counted),
        "koalesce_transfer_bytes_total grew by {counted} for a {}-byte input",
        data.len()
    );
    // The job read exactly alpha's bytes; its output is back, stored in alpha's agent.
    let (code, sum) = a.request("GET", &format!("/api/v1/files/grid-{id}/sum.txt"), Some(&alice), b"");
    assert_eq!((code, sum.trim()), (200, sha256_hex(&data).as_str()));
    let stored: Vec<_> = walk(&tmp.path().join("a").join("agent-a1"))
        .into_iter()
        .filter(|p| p.to_string_lossy().contains(&format!("grid-{id}")))
        .collect();
    assert_eq!(stored.len(), 1, "the output in alpha's agent: {stored:?}");
    // No copies on either server's disk (spool, partials), none of the input left at beta.
    wait_no_received(&b, &root_b, 20);
    let deadline = Instant::now() + Duration::from_secs(10);
    while walk(&tmp.path().join("b").join("agent-b1"))
        .iter()
        .any(|p| p.to_string_lossy().contains("peer-alpha"))
    {
        assert!(Instant::now() < deadline, "{:?}", walk(&tmp.path().join("b").join("agent-b1")));
        std::thread::sleep(Duration::from_millis(50));
    }
    for srv in [&a, &b] {
        let left: Vec<_> = walk(&srv.data_dir)
            .into_iter()
            .filter(|p| {
                let s = p.to_string_lossy();
                s.contains("/spool/") || s.contains("federation-partial") || s.contains("peer-alpha") || s.contains("data.bin")
            })
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
    assert_eq!(wait_grid(&a, &alice, blocker, 60)["runs_at"], "local");
    assert_eq!(get(&b, &root_b, "/api/v1/jobs?all=true").as_array().unwrap().len(), 1);
}

/// `koalesce_transfer_bytes_total` of `srv`.
fn transfer_bytes(srv: &BackgroundServer) -> u64 {
    let (code, text) = srv.request("GET", "/metrics", None, b"");
    assert_eq!(code, 200, "{text}");
    text.lines()
        .find_map(|l| l.strip_prefix("koalesce_transfer_bytes_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no koalesce_transfer_bytes_total in {text}"))
}

/// Issue 14: a peer that accepts connections and never answers, while a job runs there: the
/// origin's status, the job's logs (read through from the peer) and its cancel all answer
/// within the peer's time limit — never a hang — and the peer is backed off.
#[test]
fn a_silent_peer_never_holds_up_status_logs_or_cancel_of_a_job_there() {
    use koalesce_server::peer::journal::{state, Transition};
    let tmp = tempfile::tempdir().unwrap();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let pb = silent.local_addr().unwrap().port();
    // Alpha's journal: grid job 1 runs at beta as its job 7 (last seen running).
    let adir = tmp.path().join("a");
    std::fs::create_dir_all(adir.join("data")).unwrap();
    let j = Journal::open(&adir.join("data").join("federation.db")).unwrap();
    assert_eq!(j.add_grid_job("alice", "far", &sleep_job("far", 60), 0).unwrap(), 1);
    let t = Transition {
        peer: Some("beta"),
        handoff: Some("alpha-1-1"),
        reason: Some("moved: local ATT 40.0 s vs 20.0 s at beta"),
        new_attempt: true,
        ..Default::default()
    };
    assert!(j.transition(1, state::WAITING, state::HANDING, &t).unwrap());
    assert!(j.transition(1, state::HANDING, state::MIGRATED, &Transition::default()).unwrap());
    let seen = serde_json::json!({"handoff": "alpha-1-1", "state": "committed", "job": 7, "job_state": "running",
        "sites": ["beta/b1"], "exit_ok": null, "failure": null});
    j.set_remote(1, Some(7), &seen.to_string()).unwrap();
    drop(j);
    let a = server(&adir, "alpha", free_port(), &[("a1", 1)], &[("beta", pb)]);
    let alice = token(&a.data_dir, "alice", false);
    let quick = |what: &str, f: &dyn Fn() -> (u16, String)| -> (u16, String) {
        let t0 = Instant::now();
        let r = f();
        assert!(t0.elapsed() < Duration::from_secs(4), "{what} took {:?}", t0.elapsed());
        r
    };
    for _ in 0..3 {
        let (code, g) = quick("status", &|| a.request("GET", "/api/v1/grid/jobs/1", Some(&alice), b""));
        let g = common::json(&g);
        assert_eq!(
            (code, g["runs_at"].as_str(), g["state"].as_str()),
            (200, Some("beta"), Some("running")),
            "{g}"
        );
        assert!(g["reason"].as_str().unwrap().starts_with("moved:"), "{g}");
        let (code, out) = quick("logs", &|| grid_log(&a, &alice, 1, "stream=stdout&offset=0"));
        assert_eq!((code, out.as_str()), (200, ""));
    }
    let (code, body) = quick("cancel", &|| a.request("POST", "/api/v1/grid/jobs/1/cancel", Some(&alice), b""));
    assert_eq!(code, 202, "{body}");
    assert_eq!(common::json(&body)["cancel_requested"], true);
    let f = get(&a, &alice, "/api/v1/federation");
    let peer = &f["peers"][0];
    assert!(peer["failures"].as_u64().unwrap() >= 1 && peer["last_error"].is_string(), "{f}");
    drop(silent);
}

/// A log larger than the origin takes (`files.max_upload_bytes`) does not hold the grid job in
/// `staging-out` for ever: it stays at the peer, `data_error` says so, the other log comes back.
#[test]
fn a_log_too_large_for_the_origin_stays_at_the_peer_and_the_job_still_ends() {
    let tmp = tempfile::tempdir().unwrap();
    let (pa, pb) = (free_port(), free_port());
    let mut opts = options(&tmp.path().join("a"), "alpha", pa, &[("a1", 1)], &[("beta", pb)], |_| {});
    opts.config.files.max_upload_bytes = 1_000;
    let a = BackgroundServer::start(opts).expect("server starts");
    let _b = server(&tmp.path().join("b"), "beta", pb, &[("b1", 4)], &[("alpha", pa)]);
    let alice = token(&a.data_dir, "alice", false);
    let _blocker = grid_submit(&a, &alice, &sleep_job("blocker", 2));
    let script = "head -c 5000 /dev/zero | tr '\\\\0' x; echo 'short and sweet' >&2; exit 1";
    let job = format!(
        "name = \"loud\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", {script:?}]\nruntime_estimate = \"20s\"\n[[components]]\nprocessors = 1\n"
    );
    let id = grid_submit(&a, &alice, &job);
    let g = wait_grid(&a, &alice, id, 60);
    assert_eq!((g["state"].as_str(), g["runs_at"].as_str()), (Some("failed"), Some("beta")), "{g}");
    let note = g["data_error"].as_str().unwrap_or_default();
    assert!(note.contains("c0/stdout (5000 bytes)") && note.contains("left at beta"), "{g}");
    assert_eq!(grid_log(&a, &alice, id, "stream=stderr"), (200, "short and sweet\n".to_string()));
    assert_eq!(grid_log(&a, &alice, id, "stream=stdout"), (200, String::new()));
}

/// A received input that a job of the receiver's own users also reads (any catalogue name may
/// be an input) is kept while that job runs when its handoff is released, and goes once the
/// job ended: the handoff stays unswept until then. Before, the release marked the handoff
/// swept with the file kept, and nothing ever removed it.
#[test]
fn a_received_input_a_local_job_reads_at_the_release_goes_once_that_job_ended() {
    let tmp = tempfile::tempdir().unwrap();
    let data = text(50_000, 5);
    let sha = sha256_hex(&data);
    let fake = FakeOrigin::start(data.clone());
    fake.set(Serve::Good);
    let b = server_tuned(
        &tmp.path().join("b"),
        "beta",
        free_port(),
        &[("b1", 4)],
        &[("alpha", fake.port)],
        |f| f.probe_bytes = 0,
    );
    let root = token(&b.data_dir, "root", true);
    let bob = token(&b.data_dir, "bob", false);
    let as_alpha = PeerClient::new("alpha", "beta", &b.url(), SECRET.into(), 5_000);
    let desc = "name = \"x\"\nexecutable = \"/bin/true\"\ninputs = [\"d.bin\"]\n[[components]]\nprocessors = 1\n";
    let phase_one = serde_json::json!({"handoff": "alpha-1-1", "user": "alice", "description": desc,
        "inputs": [{"name": "d.bin", "size_bytes": data.len(), "sha256": sha}]});
    let p: Value = as_alpha.call("/api/v1/peer/handoffs", Some(&phase_one)).unwrap();
    assert_eq!(p["state"], "prepared", "{p}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let id = loop {
        let v: Value = as_alpha.call("/api/v1/peer/handoffs/alpha-1-1/commit", Some(&())).unwrap();
        if let Some(id) = v["job"].as_u64() {
            break id;
        }
        assert!(Instant::now() < deadline, "{v}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        common::wait_state(&b, &root, id, &["succeeded", "failed"], 30)["state"],
        "succeeded"
    );
    // Bob's job at beta reads the received file for 3 s.
    let received = format!("peer-alpha/{sha}");
    let local = common::submit(
        &b,
        &bob,
        &format!("name = \"reader\"\nexecutable = \"/bin/sleep\"\narguments = [\"3\"]\ninputs = [\"{received}\"]\n[[components]]\nprocessors = 1\n"),
    );
    common::wait_state(&b, &bob, local, &["running"], 30);
    // The origin's done: released; the file stays while bob's job reads it.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match as_alpha.call::<_, Value>("/api/v1/peer/handoffs/alpha-1-1/done", Some(&())) {
            Ok(_) => break,
            Err(e) => assert!(Instant::now() < deadline, "{e:?}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (names, stored) = received_here(&b, &root);
    assert_eq!(names, vec![received.clone()], "kept while bob's job reads it");
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(
        common::wait_state(&b, &bob, local, &["succeeded", "failed"], 30)["state"],
        "succeeded"
    );
    wait_no_received(&b, &root, 20);
}
