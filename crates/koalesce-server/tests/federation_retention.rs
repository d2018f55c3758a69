//! Live federation (issue 14): what a receiver keeps of a job a peer handed over once the job
//! ended there — its received inputs and its outputs stay until the origin says `done`, or,
//! when that never comes (the origin was lost, or its journal), until `received_retention_ms`
//! passed since the job ended (as HTCondor keeps a finished spooled job's files); a release a
//! crash interrupted is finished after the restart. And the logs of a job still running at a
//! peer: a tail reads only the end it needs, however large the log.

mod common;
mod federation_common;

use common::token;
use federation_common::*;
use koalesce_server::peer::Journal;
use serde_json::{json, Value};

/// Issue 14: beta runs two jobs handed over by an origin that never says `done` (a fake
/// alpha). Their received input and their outputs stay at beta while the retention runs. One
/// handoff is released in beta's journal as a `done` leaves it when beta is killed before its
/// removals: after the restart its input and output go, the other's stay. Restarted with a
/// retention of 2 s, the other one's output goes too; both views say `released`, and a late
/// `done` still answers (idempotent).
#[test]
fn received_data_of_a_job_whose_origin_never_says_done_goes_after_the_retention() {
    let tmp = tempfile::tempdir().unwrap();
    let data = text(100_000, 21);
    let sha = sha256_hex(&data);
    let fake = FakeOrigin::start(data.clone());
    fake.set(Serve::Good);
    let bdir = tmp.path().join("b");
    let pb = free_port();
    let start = |retention_ms: u64| {
        server_tuned(&bdir, "beta", pb, &[("b1", 4)], &[("alpha", fake.port)], |f| {
            f.probe_bytes = 0;
            f.received_retention_ms = retention_ms;
        })
    };
    let hour = 3_600_000;
    let b = start(hour);
    let root = token(&b.data_dir, "root", true);
    let as_alpha = as_peer("alpha", &b);
    let reads = "name = \"reads\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"wc -c < \\\"$KOALESCE_INPUT_D_BIN\\\" > out.txt\"]\n\
                 inputs = [\"d.bin\"]\noutputs = [\"out.txt\"]\n[[components]]\nprocessors = 1\n";
    let writes = "name = \"writes\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"echo hi > out.txt\"]\n\
                  outputs = [\"out.txt\"]\n[[components]]\nprocessors = 1\n";
    prepare_handoff(
        &as_alpha,
        "alpha-1-1",
        reads,
        json!([{"name": "d.bin", "size_bytes": data.len(), "sha256": sha}]),
    );
    prepare_handoff(&as_alpha, "alpha-2-1", writes, json!([]));
    let r1 = commit_until_submitted(&as_alpha, "alpha-1-1", 30)["job"].as_u64().unwrap();
    let r2 = commit_until_submitted(&as_alpha, "alpha-2-1", 30)["job"].as_u64().unwrap();
    for h in ["alpha-1-1", "alpha-2-1"] {
        let v = wait_handoff_ended(&as_alpha, h, 60);
        assert_eq!(
            (v["job_state"].as_str(), v["released"].as_bool()),
            (Some("succeeded"), Some(false)),
            "{v}"
        );
    }
    let (received, out1, out2) = (format!("peer-alpha/{sha}"), format!("{r1}/out.txt"), format!("{r2}/out.txt"));
    let (code, n) = b.request("GET", &format!("/api/v1/files/{out1}"), Some(&root), b"");
    assert_eq!((code, n.trim()), (200, "100000"), "the job read the whole input");
    assert_eq!(catalogue(&b, &root), vec![out1.clone(), out2.clone(), received.clone()]);
    // Beta dies in the middle of a `done` for alpha-1-1: released in its journal, nothing
    // removed yet.
    let journal = b.data_dir.join("federation.db");
    b.stop();
    let j = Journal::open(&journal).unwrap();
    assert!(j.release("alpha-1-1").unwrap());
    drop(j);
    let b = start(hour);
    wait_until(20, &|| format!("{:?}", catalogue(&b, &root)), &|| {
        catalogue(&b, &root) == vec![out2.clone()]
    });
    assert!(received_here(&b, &root).1.is_empty(), "{:?}", received_here(&b, &root));
    let view = |h: &str| as_alpha.call::<(), Value>(&format!("/api/v1/peer/handoffs/{h}"), None).unwrap();
    assert_eq!(view("alpha-1-1")["released"], true);
    assert_eq!(view("alpha-2-1")["released"], false, "within the retention");
    // With a retention of 2 s, the job that ended before it loses its data here too.
    b.stop();
    let b = start(2_000);
    wait_until(20, &|| format!("{:?}", catalogue(&b, &root)), &|| catalogue(&b, &root).is_empty());
    assert_eq!(view("alpha-2-1")["released"], true);
    // A `done` that comes late is answered as before; the jobs stay what they were.
    let d: Value = as_alpha.call("/api/v1/peer/handoffs/alpha-2-1/done", Some(&())).unwrap();
    assert_eq!(
        (d["released"].as_bool(), d["job_state"].as_str()),
        (Some(true), Some("succeeded")),
        "{d}"
    );
    assert_eq!(
        get(&b, &root, "/api/v1/jobs?all=true").as_array().unwrap().len(),
        2,
        "each ran once"
    );
}

/// A log answer of grid job `id` at `srv` with its size and lines-cut headers.
fn grid_log_headers(srv: &koalesce_server::BackgroundServer, tok: &str, id: u64, query: &str) -> (u16, String, String, String) {
    let mut resp = ureq::get(&format!("{}/api/v1/grid/jobs/{id}/logs?{query}", srv.url()))
        .header("Authorization", &format!("Bearer {tok}"))
        .config()
        .http_status_as_error(false)
        .build()
        .call()
        .unwrap();
    let head = |n: &str| resp.headers().get(n).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let (size, cut) = (head("x-koalesce-log-size"), head("x-koalesce-lines-cut"));
    let code = resp.status().as_u16();
    let body = resp.body_mut().with_config().limit(64 << 20).read_to_string().unwrap();
    (code, body, size, cut)
}

/// Issue 14: `tail` of a job still running at a peer whose stdout is larger than 16 MiB
/// (600 000 lines, 18.6 MB, then "the end") answers the log's last lines and its whole size,
/// as for a job here (the tail is cut at the peer: before, the origin tailed the log's first
/// 16 MiB); reading from an offset past 16 MiB answers what is there.
#[test]
fn a_tail_of_a_large_log_at_a_peer_reads_only_its_end() {
    let Pair {
        a,
        alice,
        b: _b,
        tmp: _tmp,
        ..
    } = pair();
    let _blocker = grid_submit(&a, &alice, &sleep_job("blocker", 30));
    let line = "a line of the log that repeats\n";
    let lines = 600_000u64;
    let total = line.len() as u64 * lines + "the end\n".len() as u64;
    let script = format!(
        "yes '{}' | head -c {}; echo 'the end'; exec sleep 60",
        line.trim_end(),
        line.len() as u64 * lines
    );
    let job = format!(
        "name = \"loud\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", {script:?}]\nruntime_estimate = \"20s\"\nwalltime = \"5m\"\n[[components]]\nprocessors = 1\n"
    );
    let id = grid_submit(&a, &alice, &job);
    // Running at beta (read through from there, not the copy that comes back once it ended).
    wait_until(40, &|| format!("{}", get(&a, &alice, &format!("/api/v1/grid/jobs/{id}"))), &|| {
        grid_log_headers(&a, &alice, id, "tail=1").1 == "the end\n"
    });
    let (code, body, size, cut) = grid_log_headers(&a, &alice, id, "tail=2");
    assert_eq!((code, body.as_str()), (200, "a line of the log that repeats\nthe end\n"));
    assert_eq!(
        (size, cut),
        (total.to_string(), (lines - 1).to_string()),
        "the whole log's size, the lines left out"
    );
    let g = get(&a, &alice, &format!("/api/v1/grid/jobs/{id}"));
    assert_eq!((g["runs_at"].as_str(), g["state"].as_str()), (Some("beta"), Some("running")), "{g}");
    // From an offset past 16 MiB on: the rest.
    let from = total - 2 * line.len() as u64 - 8;
    let (code, body, size, _) = grid_log_headers(&a, &alice, id, &format!("offset={from}"));
    assert_eq!(
        (code, body.as_str(), size),
        (200, format!("{line}{line}the end\n").as_str(), total.to_string())
    );
}

/// Issue 14, a receiver killed in the middle of a commit: its job is in its queue (durable)
/// but its journal still says `prepared`. Neither its own deadline (`handoff_timeout_ms`, the
/// origin away meanwhile) nor a cancel may then abort the handoff — the origin would decide
/// the job again and it would run twice: the handoff is completed as committed to that job.
#[test]
fn a_handoff_whose_job_was_submitted_before_a_crash_is_committed_not_aborted() {
    let tmp = tempfile::tempdir().unwrap();
    let b = server_tuned(
        &tmp.path().join("b"),
        "beta",
        free_port(),
        &[("b1", 4)],
        &[("alpha", free_port())],
        |f| {
            f.probe_bytes = 0;
            f.handoff_timeout_ms = 1_000;
        },
    );
    let root = token(&b.data_dir, "root", true);
    let as_alpha = as_peer("alpha", &b);
    // As the crash leaves it: phase one prepared; the commit submitted the job under its marked
    // name (as peer-alpha) and died before its journal said so.
    for (h, name) in [("alpha-1-1", "expires"), ("alpha-2-1", "cancelled")] {
        prepare_handoff(&as_alpha, h, &sleep_job(name, 30), json!([]));
    }
    let peer_user = token(&b.data_dir, "peer-alpha", false);
    let first = common::submit(&b, &peer_user, &sleep_job("expires [grid alpha-1-1]", 30));
    let second = common::submit(&b, &peer_user, &sleep_job("cancelled [grid alpha-2-1]", 30));
    // The origin cancels the second: its job there is cancelled, the handoff is not aborted.
    let c: Value = as_alpha.call("/api/v1/peer/handoffs/alpha-2-1/cancel", Some(&())).unwrap();
    assert_eq!((c["state"].as_str(), c["job"].as_u64()), (Some("committed"), Some(second)), "{c}");
    common::wait_state(&b, &root, second, &["cancelled"], 20);
    // The first outlives the deadline: committed to its job, which runs on.
    std::thread::sleep(std::time::Duration::from_millis(2_500));
    let v: Value = as_alpha.call::<(), _>("/api/v1/peer/handoffs/alpha-1-1", None).unwrap();
    assert_eq!((v["state"].as_str(), v["job"].as_u64()), (Some("committed"), Some(first)), "{v}");
    let c: Value = as_alpha.call("/api/v1/peer/handoffs/alpha-1-1/commit", Some(&())).unwrap();
    assert_eq!(c["job"].as_u64(), Some(first), "{c}");
    assert_eq!(
        get(&b, &root, "/api/v1/jobs?all=true").as_array().unwrap().len(),
        2,
        "no job submitted twice"
    );
}

/// An origin that comes back after its peer's retention released a job that succeeded there
/// (`released`, its outputs gone) records the outputs as none and says why in `data_error`,
/// and the job ends (not `staging-out` for ever).
#[test]
fn an_origin_back_after_the_peers_retention_records_the_outputs_as_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let log_sha = sha256_hex(b"hello\n");
    let fake = fake_receiver("prepared", move |h| {
        json!({"handoff": h, "state": "committed", "job": 5, "job_state": "succeeded", "sites": ["beta/b1"],
            "exit_ok": true, "failure": null, "finished_ms": 1, "outputs": [], "released": true,
            "logs": [{"name": "c0/stdout", "size_bytes": 6, "sha256": log_sha}]})
    });
    let job = "name = \"far\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"echo hi > out.txt\"]\nruntime_estimate = \"20s\"\n\
               outputs = [\"out.txt\"]\n[[components]]\nprocessors = 1\n";
    let (a, alice, id) = busy_origin(tmp.path(), &fake, job);
    let g = wait_grid(&a, &alice, id, 30);
    assert_eq!(
        (g["state"].as_str(), g["runs_at"].as_str()),
        (Some("succeeded"), Some("beta")),
        "{g}"
    );
    assert_eq!(g["outputs"], json!([]), "{g}");
    let why = g["data_error"].as_str().unwrap_or_default();
    assert!(why.contains("outputs from beta") && why.contains("received_retention_ms"), "{g}");
    let (code, out) = a.request("GET", &format!("/api/v1/grid/jobs/{id}/logs"), Some(&alice), b"");
    assert_eq!((code, out.as_str()), (200, "hello\n"));
}

/// A receiver that lost its journal, not its jobs, takes a handoff's job back when its origin
/// aborts the handoff (adopted: recorded committed to that job). What it received for the job
/// is then known again: once the job ended and the origin says `done`, the received input
/// goes with the job's outputs, as for any committed handoff.
#[test]
fn an_adopted_handoffs_received_inputs_go_when_it_is_released() {
    let tmp = tempfile::tempdir().unwrap();
    let data = text(50_000, 7);
    let sha = sha256_hex(&data);
    let fake = FakeOrigin::start(data.clone());
    fake.set(Serve::Good);
    let bdir = tmp.path().join("b");
    let pb = free_port();
    let start = || {
        server_tuned(&bdir, "beta", pb, &[("b1", 4)], &[("alpha", fake.port)], |f| {
            f.probe_bytes = 0;
        })
    };
    let b = start();
    let root = token(&b.data_dir, "root", true);
    let as_alpha = as_peer("alpha", &b);
    let reads = "name = \"reads\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"wc -c < \\\"$KOALESCE_INPUT_D_BIN\\\" > out.txt\"]\n\
                 inputs = [\"d.bin\"]\noutputs = [\"out.txt\"]\n[[components]]\nprocessors = 1\n";
    prepare_handoff(
        &as_alpha,
        "alpha-1-1",
        reads,
        json!([{"name": "d.bin", "size_bytes": data.len(), "sha256": sha}]),
    );
    let rid = commit_until_submitted(&as_alpha, "alpha-1-1", 30)["job"].as_u64().unwrap();
    wait_handoff_ended(&as_alpha, "alpha-1-1", 60);
    let (received, out) = (format!("peer-alpha/{sha}"), format!("{rid}/out.txt"));
    assert_eq!(catalogue(&b, &root), vec![out.clone(), received.clone()]);
    // Beta loses its journal and keeps its jobs.
    let journal = b.data_dir.join("federation.db");
    b.stop();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", journal.display()));
    }
    let b = start();
    let a: Value = as_alpha.call("/api/v1/peer/handoffs/alpha-1-1/abort", Some(&())).unwrap();
    assert_eq!(
        (a["state"].as_str(), a["job"].as_u64()),
        (Some("committed"), Some(rid)),
        "adopted: {a}"
    );
    let d: Value = as_alpha.call("/api/v1/peer/handoffs/alpha-1-1/done", Some(&())).unwrap();
    assert_eq!(d["released"], true, "{d}");
    wait_until(20, &|| format!("{:?}", catalogue(&b, &root)), &|| catalogue(&b, &root).is_empty());
    wait_no_received(&b, &root, 10);
}
