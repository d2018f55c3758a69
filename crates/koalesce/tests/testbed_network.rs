//! `koalesce testbed up --network` as users run it: two Slurm clusters whose storage agents
//! sit in their own network namespaces joined by tc-shaped links; a `koalesce server` on the
//! bed's server.toml stages a job's input from alpha to beta by a push over the shaped link
//! (the link's byte counter grows by the file). Each cluster's slurmctld and slurmd run inside
//! the cluster's namespace (their /proc/PID/ns/net is the namespace's), the server reaches
//! them over the control links, and after `stop-cluster` / `start-cluster` the restarted
//! daemons are in the namespace again and run the next job. `testbed down --purge` leaves no
//! daemon, agent, control link or namespace behind.
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

/// The network namespace a process is in (device and inode of /proc/PID/ns/net).
fn netns_of_pid(pid: u64) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(format!("/proc/{pid}/ns/net")).unwrap_or_else(|e| panic!("pid {pid}: {e}"));
    (m.dev(), m.ino())
}

fn netns_of_name(ns: &str) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(format!("/run/netns/{ns}")).unwrap_or_else(|e| panic!("namespace {ns}: {e}"));
    (m.dev(), m.ino())
}

/// Every Slurm daemon of every cluster (controller and slurmd's) runs inside the cluster's own
/// namespace, which is not the test's; returns (cluster, namespace, daemon pids).
fn daemons_in_namespaces(status: &Value) -> Vec<(String, String, Vec<u64>)> {
    let own = netns_of_pid(std::process::id() as u64);
    let mut out = Vec::new();
    for c in status["clusters"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap().to_string();
        let ns = c["placement"]["netns"]
            .as_str()
            .unwrap_or_else(|| panic!("cluster {name} has no namespace: {c}"))
            .to_string();
        let want = netns_of_name(&ns);
        assert_ne!(want, own, "{ns} is the test's own namespace");
        let mut pids = vec![c["controller"]["pid"]
            .as_u64()
            .unwrap_or_else(|| panic!("{name}: no controller: {c}"))];
        pids.extend(c["nodes"].as_array().unwrap().iter().map(|n| n["pid"].as_u64().unwrap()));
        for p in &pids {
            assert_eq!(netns_of_pid(*p), want, "{name}: daemon {p} is not in {ns}");
        }
        // The controller is reached on its control link, the nodes on the bed's address.
        let ctl = c["placement"]["controller_addr"].as_str().unwrap();
        assert!(ctl.starts_with("10.251."), "{c}");
        let conf = std::fs::read_to_string(c["conf"].as_str().unwrap()).unwrap();
        assert!(conf.contains(&format!("({ctl})")), "{conf}");
        assert!(!conf.contains("127.0.0.1"), "{conf}");
        out.push((name, ns, pids));
    }
    out
}

/// Runs a job that reads `input.dat` at `site` through the server; returns the job.
fn run_reader(srv: &Server, tok: &str, site: &str) -> Value {
    let job = format!("name = \"reader\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"sha256sum \\\"$KOALESCE_INPUT_INPUT_DAT\\\"\"]\ninputs = [\"input.dat\"]\n[[components]]\nprocessors = 1\nsite = \"{site}\"\n");
    let (code, body) = srv.request("POST", "/api/v1/jobs", Some(tok), &job);
    assert_eq!(code, 201, "{body}");
    let id = serde_json::from_str::<Value>(&body).unwrap()["id"].as_u64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let j = srv.json(&format!("/api/v1/jobs/{id}"), tok);
        if ["succeeded", "failed", "cancelled"].contains(&j["state"].as_str().unwrap()) {
            return j;
        }
        assert!(Instant::now() < deadline, "job stuck: {j}");
        std::thread::sleep(Duration::from_millis(100));
    }
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
    let placed = daemons_in_namespaces(&v["status"]);
    assert_eq!(placed.len(), 2);
    assert_eq!(placed[0].1, ns_alpha, "the daemons share the agent's namespace");
    let mut daemon_pids: Vec<u64> = placed.iter().flat_map(|p| p.2.clone()).collect();
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
    let j = run_reader(&srv, &tok, "beta");
    assert_eq!(j["state"], "succeeded", "{j}");
    let moved = tx_bytes(&ns_alpha, "s1-beta") - before;
    assert!(moved >= data.len() as u64, "{moved} bytes crossed alpha->beta");
    assert!(j["timeline"]["transfer_ms"].as_u64().unwrap() > 0, "{j}");
    let m = srv.json("/api/v1/network", &tok);
    let ab = m["links"].as_array().unwrap().iter().find(|l| l["from"] == "alpha").unwrap();
    assert_eq!(ab["source"], "forecast", "{ab}");

    // A planned stop and a crash of beta: each time the restarted daemons are in beta's
    // namespace again, and the server's next job at beta runs through them.
    for how in [&[][..], &["--kill"][..]] {
        let mut args = vec!["stop-cluster", "beta"];
        args.extend_from_slice(how);
        let (code, _, err) = tb(&args, &dir);
        assert_eq!(code, 0, "{err}");
        let (code, _, err) = tb(&["start-cluster", "beta"], &dir);
        assert_eq!(code, 0, "{err}");
        let (_, out, _) = tb(&["status", "--json"], &dir);
        let status: Value = serde_json::from_str(&out).unwrap();
        let placed = daemons_in_namespaces(&status);
        let beta = &placed[1];
        assert!(
            beta.2.iter().all(|p| !daemon_pids.contains(p)),
            "beta was not restarted ({how:?}): {:?}",
            beta.2
        );
        daemon_pids.extend(beta.2.iter().copied());
        let j = run_reader(&srv, &tok, "beta");
        assert_eq!(j["state"], "succeeded", "after stop-cluster {how:?} / start-cluster: {j}");
        assert_eq!(j["components"][0]["site"], "beta", "{j}");
    }
    drop(srv);
    let host_devs = |links: &str| -> Vec<String> {
        links
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .filter_map(|d| d.split('@').next())
            .filter(|d| d.starts_with("kh"))
            .map(str::to_string)
            .collect()
    };
    let links = String::from_utf8_lossy(&Command::new("ip").args(["-o", "link"]).output().unwrap().stdout).into_owned();
    let hostlinks: Vec<Value> = serde_json::from_slice(&std::fs::read(dir.join("net/hostlinks.json")).unwrap()).unwrap();
    assert_eq!(hostlinks.len(), 2);
    let mine: Vec<String> = hostlinks.iter().map(|l| l["host_dev"].as_str().unwrap().to_string()).collect();
    for d in &mine {
        assert!(host_devs(&links).contains(d), "control link {d} missing: {links}");
    }

    let (code, _, err) = tb(&["down", "--purge"], &dir);
    assert_eq!(code, 0, "{err}");
    std::mem::forget(bed);
    let list = String::from_utf8_lossy(&Command::new("ip").args(["netns", "list"]).output().unwrap().stdout).into_owned();
    assert!(!list.contains(&ns_alpha), "{list}");
    let links = String::from_utf8_lossy(&Command::new("ip").args(["-o", "link"]).output().unwrap().stdout).into_owned();
    for d in &mine {
        assert!(!host_devs(&links).contains(d), "control link {d} left behind: {links}");
    }
    for p in daemon_pids {
        assert!(!koalesce::testbed::procs::alive_with(p as u32, "slurm"), "daemon {p} still runs");
    }
    for p in agent_pids {
        // Gone, or a zombie its (long exited) parent left for init to reap.
        assert!(
            !koalesce::testbed::procs::alive_with(p as u32, "storage-agent"),
            "agent {p} still runs"
        );
    }
}
