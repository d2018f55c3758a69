//! A stage-out interrupted by a crash of `koalesce server` (SIGKILL of the real daemon) is
//! redone after the restart: the succeeded job ends with its outputs registered once and is
//! counted once, and the job that depends on it starts only then and reads them.

mod server_common;

use std::time::{Duration, Instant};

use serde_json::Value;
use server_common::*;

fn succeeded_count(s: &TestServer) -> u64 {
    let (_, text) = http(&s.url, "GET", "/metrics", None, None, b"").unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("koalesce_jobs{state=\"succeeded\"} "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no succeeded count in /metrics:\n{text}"))
}

/// The daemon is SIGKILLed while a succeeded job's outputs are being staged out (after the
/// first of two was registered: failure injection holds the stage-out there, as a real daemon
/// cannot be stopped on cue between two outputs). After the restart the stage-out is redone:
/// the job ends succeeded with both outputs registered once, counted once, and the job that
/// depends on it (afterok) starts only then and reads both.
#[test]
fn a_stage_out_interrupted_by_sigkill_is_redone_after_the_restart() {
    let _g = serial();
    let mut s = TestServer::new(&test_config(&[("alpha", 2)]));
    let token = s.token("alice", false);
    let hold = s.path().join("hold-stage-out");
    let reached = s.path().join("hold-stage-out.reached");
    std::fs::write(&hold, "").unwrap();
    s.env.push(("KOALESCE_FAULT_STAGE_OUT_HOLD", hold.clone()));
    s.start();
    let parent = submit(
        &s,
        &token,
        "name = \"parent\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"echo one > first.txt; echo two > second.txt\"]\n\
         outputs = [\"first.txt\", \"second.txt\"]\n[[components]]\nprocessors = 1\n",
    );
    let script =
        format!("grep -qx one \\\"$KOALESCE_INPUT_{parent}_FIRST_TXT\\\" && grep -qx two \\\"$KOALESCE_INPUT_{parent}_SECOND_TXT\\\"");
    let child = submit(
        &s,
        &token,
        &format!(
            "name = \"child\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"{script}\"]\nafterok = [{parent}]\n\
             inputs = [\"{parent}/first.txt\", \"{parent}/second.txt\"]\n[[components]]\nprocessors = 1\n"
        ),
    );
    let t0 = Instant::now();
    while !reached.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the stage-out never reached the hold:\n{}",
            s.log_tail()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Succeeded, its first output registered, the second not: shown as still running, and
    // the dependent waits.
    let (_, p) = get_job(&s, &token, parent);
    assert_eq!(p["state"], "running", "{p}");
    let (_, c) = get_job(&s, &token, child);
    assert_eq!(c["state"], "held", "{c}");
    s.kill9();
    std::fs::remove_file(&hold).unwrap();
    s.start();
    let p = wait_final(&s, &token, parent, Duration::from_secs(30));
    assert_eq!(p["state"], "succeeded", "{p}");
    let mut outputs: Vec<String> = p["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap().to_string())
        .collect();
    outputs.sort();
    assert_eq!(outputs, [format!("{parent}/first.txt"), format!("{parent}/second.txt")]);
    let c = wait_final(&s, &token, child, Duration::from_secs(30));
    assert_eq!(c["state"], "succeeded", "the dependent read both outputs: {c}\n{}", s.log_tail());
    assert!(c["started_ms"].as_u64() > p["finished_ms"].as_u64(), "{p}\n{c}");
    // Each output registered once, with one replica, and one stored copy.
    let (code, body) = http(&s.url, "GET", "/api/v1/files", Some(&token), None, b"").unwrap();
    assert_eq!(code, 200, "{body}");
    let files = json(&body);
    for name in ["first.txt", "second.txt"] {
        let logical = format!("{parent}/{name}");
        let entries: Vec<&Value> = files.as_array().unwrap().iter().filter(|f| f["name"] == logical.as_str()).collect();
        assert_eq!(entries.len(), 1, "{logical}: {files}");
        assert_eq!(entries[0]["replicas"].as_array().map(|r| r.len()), Some(1), "{logical}: {files}");
    }
    assert_eq!(
        stored_files(&s, &format!("{parent}_first.txt")).len() + stored_files(&s, &format!("{parent}_second.txt")).len(),
        2
    );
    assert_eq!(succeeded_count(&s), 2, "parent and child, each counted once");
}
