//! Live federation (issue 14): a receiver that lost its journal answers the origin's commit,
//! look or cancel with 404. A handoff not committed there is aborted there (a tombstone) and
//! the job decided again, which then runs exactly once (or ends cancelled, if its user asked);
//! a committed one whose record is gone fails after a bounded number of 404s (its outcome
//! cannot be learned, and it is not run twice); a receiver that keeps answering 404 and never
//! confirms the abort gets a bounded number of tries, then the job fails with a reason.

mod common;
mod federation_common;

use std::path::Path;
use std::time::Duration;

use common::token;
use federation_common::*;
use koalesce_server::peer::journal::{state, Transition};
use koalesce_server::peer::{lost::MISSING_TRIES, Journal, PeerClient};
use koalesce_server::BackgroundServer;
use serde_json::{json, Value};

/// Alpha's journal (in `adir`) as it is when its grid job 1 was handed to beta as `alpha-1-1`
/// (commit point passed); `remote_id`: beta had committed it as that job; `cancel`: its user
/// asked to cancel it.
fn migrated_journal(adir: &Path, remote_id: Option<u64>, cancel: bool) {
    std::fs::create_dir_all(adir.join("data")).unwrap();
    let j = Journal::open(&adir.join("data").join("federation.db")).unwrap();
    assert_eq!(j.add_grid_job("alice", "lost", &sleep_job("lost", 0), 0).unwrap(), 1);
    let t = Transition {
        peer: Some("beta"),
        handoff: Some("alpha-1-1"),
        new_attempt: true,
        ..Default::default()
    };
    assert!(j.transition(1, state::WAITING, state::HANDING, &t).unwrap());
    assert!(j.transition(1, state::HANDING, state::MIGRATED, &Transition::default()).unwrap());
    if let Some(rid) = remote_id {
        let remote = json!({"handoff": "alpha-1-1", "state": "committed", "job": rid, "job_state": "running",
            "sites": ["beta/b1"], "exit_ok": null, "failure": null});
        j.set_remote(1, Some(rid), &remote.to_string()).unwrap();
    }
    if cancel {
        j.request_cancel(1).unwrap();
    }
}

/// Beta (real, knows nothing of `alpha-1-1`: its journal was lost) and alpha restarted on the
/// journal [`migrated_journal`] wrote: (alpha, beta, alice's token at alpha, alpha as beta's peer).
fn lost_at_beta(tmp: &Path, remote_id: Option<u64>, cancel: bool) -> (BackgroundServer, BackgroundServer, String, PeerClient) {
    let (pa, pb) = (free_port(), free_port());
    let b = server(&tmp.join("b"), "beta", pb, &[("b1", 4)], &[("alpha", pa)]);
    let as_alpha = PeerClient::new("alpha", "beta", &b.url(), SECRET.into(), 5_000);
    let unknown = as_alpha.call::<(), Value>("/api/v1/peer/handoffs/alpha-1-1", None).unwrap_err();
    assert!(unknown.to_string().starts_with("refused (404)"), "beta never saw it: {unknown}");
    migrated_journal(&tmp.join("a"), remote_id, cancel);
    let a = server(&tmp.join("a"), "alpha", pa, &[("a1", 1)], &[("beta", pb)]);
    let alice = token(&a.data_dir, "alice", false);
    (a, b, alice, as_alpha)
}

/// Jobs in the cores of alpha and beta.
fn jobs_run(a: &BackgroundServer, b: &BackgroundServer, alice: &str) -> (usize, usize) {
    let root = token(&b.data_dir, "root", true);
    let at_b = get(b, &root, "/api/v1/jobs?all=true").as_array().unwrap().len();
    (get(a, alice, "/api/v1/jobs").as_array().unwrap().len(), at_b)
}

/// Not committed at beta: alpha's commit gets 404, alpha aborts the handoff at beta (which now
/// refuses it for good) and decides the job again: it runs once.
#[test]
fn a_handoff_the_receiver_lost_is_aborted_there_and_the_job_runs_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, alice, as_alpha) = lost_at_beta(tmp.path(), None, false);
    let g = wait_grid(&a, &alice, 1, 30);
    assert_eq!(g["state"], "succeeded", "{g}");
    let (at_a, at_b) = jobs_run(&a, &b, &alice);
    assert_eq!(at_a + at_b, 1, "alpha ran {at_a}, beta ran {at_b}");
    // The lost handoff is a tombstone at beta: a late commit of it is refused.
    let st: Value = as_alpha.call::<(), _>("/api/v1/peer/handoffs/alpha-1-1", None).unwrap();
    assert_eq!(st["state"], "aborted", "{st}");
    let late = as_alpha
        .call::<(), Value>("/api/v1/peer/handoffs/alpha-1-1/commit", Some(&()))
        .unwrap_err();
    assert!(late.to_string().starts_with("refused (409)"), "{late}");
    let row = Journal::open(&a.data_dir.join("federation.db"))
        .unwrap()
        .grid_job(1)
        .unwrap()
        .unwrap();
    assert!(row.attempts >= 2 || row.state == state::LOCAL, "decided again: {row:?}");
}

/// The same with a cancel pending: the cancel gets 404, the handoff is aborted at beta and the
/// job ends cancelled, run nowhere.
#[test]
fn a_cancel_of_a_handoff_the_receiver_lost_ends_the_job_cancelled() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, alice, as_alpha) = lost_at_beta(tmp.path(), None, true);
    let g = wait_grid(&a, &alice, 1, 30);
    assert_eq!(g["state"], "cancelled", "{g}");
    assert_eq!(jobs_run(&a, &b, &alice), (0, 0));
    let st: Value = as_alpha.call::<(), _>("/api/v1/peer/handoffs/alpha-1-1", None).unwrap();
    assert_eq!(st["state"], "aborted", "{st}");
}

/// Committed at beta as its job 7, then beta lost its record: alpha's looks get 404; after
/// MISSING_TRIES of them the job fails with a reason (its outcome cannot be learned), and it is
/// not run again anywhere.
#[test]
fn a_committed_handoff_the_receiver_lost_fails_after_bounded_tries_and_is_not_rerun() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, alice, _) = lost_at_beta(tmp.path(), Some(7), false);
    let g = wait_grid(&a, &alice, 1, 30);
    assert_eq!(g["state"], "failed", "{g}");
    let why = g["reason"].as_str().unwrap_or_default();
    assert!(
        why.contains("committed at beta as its job 7")
            && why.contains(&format!("404 to {MISSING_TRIES} requests"))
            && why.contains("outcome cannot be learned"),
        "{g}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(jobs_run(&a, &b, &alice), (0, 0), "not run again");
}

/// A receiver that answers every commit with 404 and refuses every abort: the origin tries a
/// bounded number of times, then fails the job with a reason naming the handoff and the 404s,
/// and asks no more.
#[test]
fn a_receiver_that_keeps_answering_404_gets_bounded_tries_then_the_job_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = FakePeer::start(|r| match (r.method.as_str(), r.path.as_str()) {
        ("POST", "/api/v1/peer/offer") => json_answer(200, &json!({"att_ms": 1, "awt_ms": 0, "ru": 0.0})),
        ("POST", "/api/v1/peer/handoffs") => {
            let q: Value = serde_json::from_slice(&r.body).unwrap_or_default();
            json_answer(
                200,
                &json!({"handoff": q["handoff"], "state": "prepared", "job": null, "job_state": null,
                    "sites": [], "exit_ok": null, "failure": null}),
            )
        }
        (_, p) if p.ends_with("/abort") => json_answer(503, &json!({"error": "journal unavailable"})),
        (_, p) => json_answer(404, &json!({"error": format!("handoff '{}' not found", handoff_of(p))})),
    });
    let (a, alice, id) = busy_origin(tmp.path(), &fake, &sleep_job("far", 1));
    let g = wait_grid(&a, &alice, id, 60);
    assert_eq!(g["state"], "failed", "{g}");
    let why = g["reason"].as_str().unwrap_or_default();
    assert!(
        why.contains("unknown at beta") && why.contains(&format!("404 to {MISSING_TRIES} requests")) && why.contains("503"),
        "{g}"
    );
    let commits = |f: &FakePeer| f.paths("/api/v1/peer/handoffs/").iter().filter(|p| p.ends_with("/commit")).count();
    assert_eq!(commits(&fake), MISSING_TRIES as usize);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(commits(&fake), MISSING_TRIES as usize, "no more commits once it failed");
}

/// Beta (its journal lost, its jobs kept) with the job of `alpha-1-1` committed as a
/// `secs`-second job: (beta's directory, its port, alpha's port, the job id at beta, the
/// client as alpha). Beta is stopped; the caller starts it again.
fn journal_lost_jobs_kept(tmp: &Path, secs: u32) -> (std::path::PathBuf, u16, u16, u64) {
    let (pa, pb) = (free_port(), free_port());
    let bdir = tmp.join("b");
    let b = server(&bdir, "beta", pb, &[("b1", 4)], &[("alpha", pa)]);
    let as_alpha = PeerClient::new("alpha", "beta", &b.url(), SECRET.into(), 5_000);
    prepare_handoff(&as_alpha, "alpha-1-1", &sleep_job("lost", secs), json!([]));
    let rid = commit_until_submitted(&as_alpha, "alpha-1-1", 10)["job"].as_u64().unwrap();
    let journal = b.data_dir.join("federation.db");
    b.stop();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", journal.display()));
    }
    (bdir, pb, pa, rid)
}

/// As above with the job id known at alpha (committed, followed): beta lost its journal, not
/// its jobs. Alpha's looks get 404; the job is still there and its outcome can be learned, so
/// alpha does not fail it: it asks beta to abort, beta takes the job back (committed, the same
/// job id) and alpha follows it to its end. It runs once.
#[test]
fn a_committed_handoff_whose_job_the_receiver_still_has_is_followed_to_its_end() {
    let tmp = tempfile::tempdir().unwrap();
    let (bdir, pb, pa, rid) = journal_lost_jobs_kept(tmp.path(), 1);
    let b = server(&bdir, "beta", pb, &[("b1", 4)], &[("alpha", pa)]);
    migrated_journal(&tmp.path().join("a"), Some(rid), false);
    let a = server(&tmp.path().join("a"), "alpha", pa, &[("a1", 1)], &[("beta", pb)]);
    let alice = token(&a.data_dir, "alice", false);
    let g = wait_grid(&a, &alice, 1, 30);
    assert_eq!((g["state"].as_str(), g["job"].as_u64()), (Some("succeeded"), Some(rid)), "{g}");
    assert_eq!(jobs_run(&a, &b, &alice), (0, 1), "run once, at beta");
}

/// Committed at beta (its core has the job) but alpha never learned the job id (the commit's
/// answer was lost), then beta lost its journal and not its jobs: alpha's commit gets 404 and
/// it aborts. Beta must not leave a tombstone and let alpha decide the job again (it would run
/// twice): it finds the job it submitted for the handoff and answers committed; the job runs
/// once, at beta, and alpha follows it to its end.
#[test]
fn a_lost_handoff_whose_job_the_receiver_still_has_is_not_run_again() {
    let tmp = tempfile::tempdir().unwrap();
    let (pa, pb) = (free_port(), free_port());
    let bdir = tmp.path().join("b");
    let b = server(&bdir, "beta", pb, &[("b1", 4)], &[("alpha", pa)]);
    let as_alpha = PeerClient::new("alpha", "beta", &b.url(), SECRET.into(), 5_000);
    prepare_handoff(&as_alpha, "alpha-1-1", &sleep_job("lost", 1), json!([]));
    let rid = commit_until_submitted(&as_alpha, "alpha-1-1", 10)["job"].as_u64().unwrap();
    let journal = b.data_dir.join("federation.db");
    b.stop();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", journal.display()));
    }
    let b = server(&bdir, "beta", pb, &[("b1", 4)], &[("alpha", pa)]);
    let unknown = as_alpha.call::<(), Value>("/api/v1/peer/handoffs/alpha-1-1", None).unwrap_err();
    assert!(unknown.to_string().starts_with("refused (404)"), "beta lost it: {unknown}");
    migrated_journal(&tmp.path().join("a"), None, false);
    let a = server(&tmp.path().join("a"), "alpha", pa, &[("a1", 1)], &[("beta", pb)]);
    let alice = token(&a.data_dir, "alice", false);
    let g = wait_grid(&a, &alice, 1, 30);
    assert_eq!(g["state"], "succeeded", "{g}");
    let (at_a, at_b) = jobs_run(&a, &b, &alice);
    assert_eq!((at_a, at_b), (0, 1), "run once, at beta");
    let st: Value = as_alpha.call::<(), _>("/api/v1/peer/handoffs/alpha-1-1", None).unwrap();
    assert_eq!((st["state"].as_str(), st["job"].as_u64()), (Some("committed"), Some(rid)), "{st}");
}

/// A 404 that is not the receiver saying it has no such handoff (a proxy in front of it, or
/// another HTTP server now at its address, answering every path with its own page) says nothing
/// about the handoff: a committed job is not failed over it, however many come in a row.
#[test]
fn a_404_page_from_a_proxy_does_not_fail_a_committed_job() {
    let tmp = tempfile::tempdir().unwrap();
    let committed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let c = committed.clone();
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
        ("POST", p) if p.ends_with("/commit") && !c.swap(true, std::sync::atomic::Ordering::SeqCst) => json_answer(
            200,
            &json!({"handoff": handoff_of(p), "state": "committed", "job": 7, "job_state": "running",
                "sites": ["beta/b1"], "exit_ok": null, "failure": null}),
        ),
        _ => (
            404,
            vec!["content-type: text/html".into()],
            b"<html><body><h1>404 Not Found</h1>nginx</body></html>".to_vec(),
        ),
    });
    let (a, alice, id) = busy_origin(tmp.path(), &fake, &sleep_job("far", 1));
    let looks = |f: &FakePeer| {
        f.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.method == "GET" && r.path.starts_with("/api/v1/peer/handoffs/"))
            .count()
    };
    let grid = || get(&a, &alice, &format!("/api/v1/grid/jobs/{id}"));
    wait_until(60, &|| format!("{} looks", looks(&fake)), &|| {
        looks(&fake) > 2 * MISSING_TRIES as usize || grid()["state"] == "failed"
    });
    let g = grid();
    assert!(looks(&fake) > 2 * MISSING_TRIES as usize, "{g}");
    // Still followed at beta as its job 7 (last known running), not failed.
    assert_eq!((g["state"].as_str(), g["job"].as_u64()), (Some("running"), Some(7)), "{g}");
}

/// Alpha killed between beta's confirmation of the abort of a lost handoff and its own
/// journal's update: restarted, its journal still says migrated (not committed) and beta holds
/// a tombstone. The commit is refused (409), the job decided again, and it runs once.
#[test]
fn an_origin_killed_after_the_abort_at_the_receiver_runs_the_job_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, alice, as_alpha) = {
        let (pa, pb) = (free_port(), free_port());
        let b = server(&tmp.path().join("b"), "beta", pb, &[("b1", 4)], &[("alpha", pa)]);
        let as_alpha = PeerClient::new("alpha", "beta", &b.url(), SECRET.into(), 5_000);
        let t: Value = as_alpha.call("/api/v1/peer/handoffs/alpha-1-1/abort", Some(&())).unwrap();
        assert_eq!(t["state"], "aborted", "the abort alpha sent before it was killed: {t}");
        migrated_journal(&tmp.path().join("a"), None, false);
        let a = server(&tmp.path().join("a"), "alpha", pa, &[("a1", 1)], &[("beta", pb)]);
        let alice = token(&a.data_dir, "alice", false);
        (a, b, alice, as_alpha)
    };
    let g = wait_grid(&a, &alice, 1, 30);
    assert_eq!(g["state"], "succeeded", "{g}");
    let (at_a, at_b) = jobs_run(&a, &b, &alice);
    assert_eq!(at_a + at_b, 1, "alpha ran {at_a}, beta ran {at_b}");
    let st: Value = as_alpha.call::<(), _>("/api/v1/peer/handoffs/alpha-1-1", None).unwrap();
    assert_eq!(st["state"], "aborted", "{st}");
}
