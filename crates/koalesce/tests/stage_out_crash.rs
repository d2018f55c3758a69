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

/// A server (`config`) whose stage-outs stop after their first output while the returned hold
/// file exists (failure injection: a real daemon cannot be stopped on cue between two
/// outputs), and alice's token.
fn server_holding_stage_outs(config: &str) -> (TestServer, String, std::path::PathBuf) {
    let mut s = TestServer::new(config);
    let token = s.token("alice", false);
    let hold = s.path().join("hold-stage-out");
    std::fs::write(&hold, "").unwrap();
    s.env.push(("KOALESCE_FAULT_STAGE_OUT_HOLD", hold.clone()));
    s.start();
    (s, token, hold)
}

/// Waits until a stage-out registered its first output and stopped at the hold.
fn wait_at_hold(s: &TestServer, hold: &std::path::Path) {
    let mut reached = hold.as_os_str().to_owned();
    reached.push(".reached");
    let t0 = Instant::now();
    while !std::path::Path::new(&reached).exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the stage-out never reached the hold:\n{}",
            s.log_tail()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGKILLs the server held in a stage-out, lifts the hold and starts it again.
fn kill_and_restart(s: &mut TestServer, hold: &std::path::Path) {
    s.kill9();
    std::fs::remove_file(hold).unwrap();
    s.start();
}

/// The job's registered outputs, sorted.
fn outputs_of(job: &Value) -> Vec<String> {
    let mut outputs: Vec<String> = job["outputs"]
        .as_array()
        .unwrap_or_else(|| panic!("no outputs: {job}"))
        .iter()
        .map(|o| o.as_str().unwrap().to_string())
        .collect();
    outputs.sort();
    outputs
}

/// The daemon is SIGKILLed while a succeeded job's outputs are being staged out (after the
/// first of two was registered: failure injection holds the stage-out there, as a real daemon
/// cannot be stopped on cue between two outputs). After the restart the stage-out is redone:
/// the job ends succeeded with both outputs registered once, counted once, and the job that
/// depends on it (afterok) starts only then and reads both.
#[test]
fn a_stage_out_interrupted_by_sigkill_is_redone_after_the_restart() {
    let _g = serial();
    let (mut s, token, hold) = server_holding_stage_outs(&test_config(&[("alpha", 2)]));
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
    wait_at_hold(&s, &hold);
    // Succeeded, its first output registered, the second not: shown as still running, and
    // the dependent waits.
    let (_, p) = get_job(&s, &token, parent);
    assert_eq!(p["state"], "running", "{p}");
    let (_, c) = get_job(&s, &token, child);
    assert_eq!(c["state"], "held", "{c}");
    kill_and_restart(&mut s, &hold);
    let p = wait_final(&s, &token, parent, Duration::from_secs(30));
    assert_eq!(p["state"], "succeeded", "{p}");
    let outputs = outputs_of(&p);
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

/// A user right at their stored-bytes quota once a job's outputs are registered: the stage-out
/// is interrupted by SIGKILL after the first (larger) output was registered, and the redo after
/// the restart does not count that output a second time (same name, same checksum, same site),
/// so both outputs end registered and nothing is refused.
#[test]
fn a_redone_stage_out_does_not_count_an_output_registered_before_the_crash_twice() {
    let _g = serial();
    // first.txt: 12 bytes, second.txt: 4 bytes; the quota is their sum. Counting first.txt
    // twice (12 + 12) would go over it.
    let (mut s, token, hold) = server_holding_stage_outs(&format!("{}[quotas]\nmax_stored_bytes = 16\n", test_config(&[("alpha", 2)])));
    let parent = submit(
        &s,
        &token,
        "name = \"parent\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"echo one one one > first.txt; echo two > second.txt\"]\n\
         outputs = [\"first.txt\", \"second.txt\"]\n[[components]]\nprocessors = 1\n",
    );
    wait_at_hold(&s, &hold);
    kill_and_restart(&mut s, &hold);
    let p = wait_final(&s, &token, parent, Duration::from_secs(30));
    assert_eq!(p["state"], "succeeded", "{p}");
    assert!(p["failure"].is_null(), "nothing refused on the redo: {p}\n{}", s.log_tail());
    let outputs = outputs_of(&p);
    assert_eq!(outputs, [format!("{parent}/first.txt"), format!("{parent}/second.txt")], "{p}");
    // Exactly at the quota now: one byte more is refused.
    let (code, body) = http(&s.url, "GET", "/api/v1/files", Some(&token), None, b"").unwrap();
    assert_eq!(code, 200, "{body}");
    let stored: u64 = json(&body)
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            f["size_bytes"].as_u64().unwrap_or_else(|| panic!("no size: {f}")) * f["replicas"].as_array().map_or(1, |r| r.len() as u64)
        })
        .sum();
    assert_eq!(stored, 16, "{body}");
}
