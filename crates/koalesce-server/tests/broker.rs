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
    assert!(ttd >= 300 && ttd < 3000 && tts <= ttd, "{b}");
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
