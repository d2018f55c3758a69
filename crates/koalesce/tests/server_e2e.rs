//! End-to-end tests of `koalesce server` and the client commands, running the real binary:
//! a coupled job over three sites and its outputs, and users kept apart. The crash test is in
//! server_crash.rs, the bad-input test in server_bad_input.rs.
//!
//! Each test starts its own server on 127.0.0.1 (free port, temporary data dir, small sites,
//! short scan interval via `--config`). The tests in this file run one at a time (a shared
//! lock) so that timing checks are not disturbed by each other on a small machine.
//! `KOALESCE_E2E_KEEP=1` keeps the test servers' directories (data dir, server log, markers)
//! for inspection.

mod server_common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use server_common::*;

// ----- coupled job over three fixed sites ------------------------------------------

#[test]
fn coupled_job_starts_together_and_returns_its_output() {
    let _g = serial();
    let mut s = TestServer::new(&test_config(&[("alpha", 4), ("beta", 4), ("gamma", 4)]));
    let token = s.token("alice", false);
    s.start();
    let times = s.path().join("times");
    std::fs::create_dir_all(&times).unwrap();
    let job = format!(
        r#"name = "coupled-e2e"
executable = "/bin/sh"
arguments = ["-c", "t=$(date +%s%3N); echo $t > start.txt; echo $t > $TIMES/start.$KOALESCE_RANK; echo \"$KOALESCE_RANK $KOALESCE_SIZE $KOALESCE_SITE $KOALESCE_PEERS\" > $TIMES/env.$KOALESCE_RANK; sleep 1"]
runner = "coupled"
environment = {{ TIMES = "{}" }}
runtime_estimate = "1m"
outputs = ["start.txt"]

[[components]]
processors = 2
site = "alpha"

[[components]]
processors = 3
site = "beta"

[[components]]
processors = 4
site = "gamma"
"#,
        times.display()
    );
    let id = submit(&s, &token, &job);
    let detail = wait_final(&s, &token, id, Duration::from_secs(40));
    assert_eq!(detail["state"], "succeeded", "{detail}\n{}", s.log_tail());
    let sites: BTreeSet<&str> = detail["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["site"].as_str().unwrap())
        .collect();
    assert_eq!(sites, BTreeSet::from(["alpha", "beta", "gamma"]), "{detail}");

    // Every component started, and within 1 s of each other.
    let mut starts = Vec::new();
    for rank in 0..3 {
        let t: i64 = std::fs::read_to_string(times.join(format!("start.{rank}")))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        starts.push(t);
        let env = std::fs::read_to_string(times.join(format!("env.{rank}"))).unwrap();
        let f: Vec<&str> = env.split_whitespace().collect();
        assert_eq!(f[0], rank.to_string());
        assert_eq!(f[1], "3");
        assert_eq!(f[3].split(',').count(), 3, "KOALESCE_PEERS lists all components: {env}");
    }
    let spread = starts.iter().max().unwrap() - starts.iter().min().unwrap();
    assert!(spread <= 1000, "components started {spread} ms apart: {starts:?}");

    // The output comes back: registered as "<id>/start.txt", listed, stored, with rank 0's time.
    let logical = format!("{id}/start.txt");
    let t0 = Instant::now();
    let entry = loop {
        let (status, body) = http(&s.url, "GET", "/api/v1/files", Some(&token), None, b"").unwrap();
        assert_eq!(status, 200);
        if let Some(e) = json(&body).as_array().unwrap().iter().find(|f| f["name"] == logical.as_str()) {
            break e.clone();
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "output {logical} never registered: {body}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(entry["replicas"].as_array().unwrap().len(), 1, "{entry}");
    assert!(entry["replicas"][0].as_str().is_some_and(|r| sites.contains(r)));
    let (_, detail) = get_job(&s, &token, id);
    assert!(detail["outputs"].to_string().contains(&logical), "{detail}");
    let stored = stored_files(&s, &format!("{id}_start.txt"));
    assert_eq!(stored.len(), 1, "{stored:?}");
    let content: i64 = std::fs::read_to_string(&stored[0]).unwrap().trim().parse().unwrap();
    assert_eq!(content, starts[0], "the registered output is rank 0's");
    assert_eq!(entry["size_bytes"].as_u64(), Some(std::fs::metadata(&stored[0]).unwrap().len()));

    // The client shows it too.
    let (code, out, err) = cli(&s, &token, &["files", "ls"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&logical), "{out}");
    let (code, out, err) = cli(&s, &token, &["status", &id.to_string()]);
    assert_eq!(code, 0, "{err}");
    for word in [
        "SUCCEEDED",
        "submitted",
        "placed",
        "claimed",
        "started",
        "finished",
        "FTT",
        "PGT",
        "PWT",
        "TWT",
        "tries",
    ] {
        assert!(out.contains(word), "status lacks {word}:\n{out}");
    }
    let (code, _, err) = cli(&s, &token, &["wait", &id.to_string(), "--timeout", "5s"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cli(&s, &token, &["sites"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().next().unwrap().contains("IDLE") && out.contains("gamma"), "{out}");
    let (code, out, err) = cli(&s, &token, &["sites", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out).as_array().unwrap().len(), 3);
}

// ----- ownership ----------------------------------------------------------------------

#[test]
fn users_cannot_see_or_cancel_each_others_jobs() {
    let _g = serial();
    let mut s = TestServer::new(&test_config(&[("alpha", 4), ("beta", 4)]));
    let alice = s.token("alice", false);
    let bob = s.token("bob", false);
    let admin = s.token("root", true);
    s.start();
    let job = "name = \"long\"\nexecutable = \"/bin/sleep\"\narguments = [\"30\"]\n[[components]]\nprocessors = 1\n";
    let id = submit(&s, &alice, job);

    // Bob: 404 on the job, not in his listing, 404 on cancel (ids do not leak).
    let (status, v) = get_job(&s, &bob, id);
    assert_eq!(status, 404, "{v}");
    assert!(v["error"].is_string(), "{v}");
    let (status, body) = http(&s.url, "GET", "/api/v1/jobs", Some(&bob), None, b"").unwrap();
    assert_eq!(status, 200);
    assert!(json(&body).as_array().unwrap().is_empty(), "{body}");
    let (status, body) = http(&s.url, "POST", &format!("/api/v1/jobs/{id}/cancel"), Some(&bob), None, b"").unwrap();
    assert_eq!(status, 404, "{body}");
    assert!(json(&body)["error"].is_string());
    let (code, _, err) = cli(&s, &bob, &["cancel", &id.to_string()]);
    assert_ne!(code, 0);
    assert!(err.contains("404"), "the client prints the status: {err}");
    let (code, _, err) = cli(&s, &bob, &["status", &id.to_string()]);
    assert_ne!(code, 0);
    assert!(err.contains("404") && err.contains("not found"), "{err}");

    // Alice sees it; an admin sees it among all jobs; Alice cancels it.
    let (status, v) = get_job(&s, &alice, id);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["user"], "alice");
    let (status, body) = http(&s.url, "GET", "/api/v1/jobs?all=true", Some(&admin), None, b"").unwrap();
    assert_eq!(status, 200);
    assert!(json(&body).as_array().unwrap().iter().any(|j| j["id"] == id), "{body}");
    let (code, out, err) = cli(&s, &alice, &["jobs"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().next().unwrap().contains("SUBMITTED") && out.contains("long"), "{out}");
    let (code, _, _) = cli(&s, &alice, &["wait", &id.to_string(), "--timeout", "300ms"]);
    assert_eq!(code, 3, "wait exits 3 on timeout");
    let (code, out, err) = cli(&s, &alice, &["cancel", &id.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("cancelled"), "{out}");
    let v = wait_final(&s, &alice, id, Duration::from_secs(10));
    assert_eq!(v["state"], "cancelled");
    let (code, _, _) = cli(&s, &alice, &["wait", &id.to_string()]);
    assert_eq!(code, 1, "wait exits non-zero for a cancelled job");
    // Cancelling again: 409.
    let (status, body) = http(&s.url, "POST", &format!("/api/v1/jobs/{id}/cancel"), Some(&alice), None, b"").unwrap();
    assert_eq!(status, 409, "{body}");
}
