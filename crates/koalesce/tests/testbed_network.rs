//! `koalesce testbed up --network` as users run it: two Slurm clusters whose storage agents
//! sit in their own network namespaces joined by tc-shaped links; a `koalesce server` on the
//! bed's server.toml stages a job's input from alpha to beta by a push over the shaped link
//! (the link's byte counter grows by the file); `testbed down --purge` leaves no agent and no
//! namespace behind.
//!
//! Needs root, slurm-wlm and munge (CI has them).

mod netbed_common;

use std::process::Command;
use std::time::{Duration, Instant};

use koalesce::testbed::{BedGuard, TestBed};
use netbed_common::{require_root, Server, KOALESCE};
use serde_json::Value;

fn tb(args: &[&str], dir: &std::path::Path) -> (i32, String, String) {
    let out = Command::new(KOALESCE)
        .arg("testbed")
        .args(args)
        .arg("--dir")
        .arg(dir)
        .env_remove("KOALESCE_TESTBED_DIR")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn tx_bytes(ns: &str, dev: &str) -> u64 {
    let out = Command::new("ip")
        .args(["-n", ns, "-s", "-j", "link", "show", "dev", dev])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v[0]["stats64"]["tx"]["bytes"].as_u64().unwrap()
}

#[test]
fn a_slurm_bed_with_a_shaped_network_stages_inputs_over_it() {
    require_root();
    let _turn = netbed_common::one_at_a_time();
    let tmp = tempfile::Builder::new().prefix("ktn").tempdir_in("/tmp").unwrap();
    let dir = tmp.path().join("bed");
    let (code, out, err) = tb(
        &[
            "up",
            "--network",
            "--require-namespaces",
            "--clusters",
            "2",
            "--nodes",
            "1",
            "--cpus",
            "2",
            "--json",
        ],
        &dir,
    );
    assert_eq!(code, 0, "{err}");
    let bed = BedGuard(TestBed::open(&dir).unwrap());
    let v: Value = serde_json::from_str(&out).unwrap();
    let net = v["status"]["network"].as_array().unwrap_or_else(|| panic!("no network in {v}"));
    assert_eq!(net.len(), 2);
    assert!(net.iter().all(|a| a["pid"].is_u64()), "agents run: {v}");
    assert_eq!(net[0]["rates_mbit"], serde_json::json!([["beta", 40.0]]));
    assert_eq!(net[1]["rates_mbit"], serde_json::json!([["alpha", 20.0]]));
    let ns_alpha = net[0]["netns"].as_str().unwrap().to_string();
    let agent_pids: Vec<u64> = net.iter().map(|a| a["pid"].as_u64().unwrap()).collect();
    // Idempotent: a second up keeps the agents.
    let (code, _, err) = tb(&["up", "--network", "--clusters", "2", "--nodes", "1", "--cpus", "2"], &dir);
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = tb(&["status", "--json"], &dir);
    let again: Vec<u64> = serde_json::from_str::<Value>(&out).unwrap()["network"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(again, agent_pids);

    // A server on the bed's own server.toml (plus root's job account).
    let text = std::fs::read_to_string(bed.server_toml()).unwrap();
    assert_eq!(text.matches("[sites.agent]").count(), 2, "{text}");
    let config = format!("allow_root_jobs = true\npoll_interval_ms = 100\n{text}\n[users]\n\"*\" = \"root\"\n");
    let srv = Server::start(&tmp.path().join("server"), &config);
    let tok = srv.token("admin");
    let src = tmp.path().join("input.dat");
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i * 7) as u8).collect();
    std::fs::write(&src, &data).unwrap();
    let body = format!(r#"{{"name":"input.dat","path":"{}","site":"alpha"}}"#, src.display());
    let (code, f) = srv.request("POST", "/api/v1/files", Some(&tok), &body);
    assert_eq!(code, 201, "{f}");
    let before = tx_bytes(&ns_alpha, "s1-beta");
    let job = "name = \"reader\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"sha256sum \\\"$KOALESCE_INPUT_INPUT_DAT\\\"\"]\ninputs = [\"input.dat\"]\n[[components]]\nprocessors = 1\nsite = \"beta\"\n";
    let (code, body) = srv.request("POST", "/api/v1/jobs", Some(&tok), job);
    assert_eq!(code, 201, "{body}");
    let id = serde_json::from_str::<Value>(&body).unwrap()["id"].as_u64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let j = loop {
        let j = srv.json(&format!("/api/v1/jobs/{id}"), &tok);
        if ["succeeded", "failed", "cancelled"].contains(&j["state"].as_str().unwrap()) {
            break j;
        }
        assert!(Instant::now() < deadline, "job stuck: {j}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(j["state"], "succeeded", "{j}");
    let moved = tx_bytes(&ns_alpha, "s1-beta") - before;
    assert!(moved >= data.len() as u64, "{moved} bytes crossed alpha->beta");
    assert!(j["timeline"]["transfer_ms"].as_u64().unwrap() > 0, "{j}");
    let m = srv.json("/api/v1/network", &tok);
    let ab = m["links"].as_array().unwrap().iter().find(|l| l["from"] == "alpha").unwrap();
    assert_eq!(ab["source"], "forecast", "{ab}");
    drop(srv);

    let (code, _, err) = tb(&["down", "--purge"], &dir);
    assert_eq!(code, 0, "{err}");
    std::mem::forget(bed);
    let list = String::from_utf8_lossy(&Command::new("ip").args(["netns", "list"]).output().unwrap().stdout).into_owned();
    assert!(!list.contains(&ns_alpha), "{list}");
    for p in agent_pids {
        // Gone, or a zombie its (long exited) parent left for init to reap.
        assert!(
            !koalesce::testbed::procs::alive_with(p as u32, "storage-agent"),
            "agent {p} still runs"
        );
    }
}
