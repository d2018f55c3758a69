//! The daemon on a real shaped network: three sites, each with a storage agent in its own
//! network namespace (`koalesce netbed`), links a→b 40 Mbit/s and a→c 10 Mbit/s shaped with
//! tc; a `koalesce server` whose sites have `[sites.agent]`.
//!
//! - the server probes the links and its forecasts (GET /api/v1/network) rank them as shaped;
//! - a Close-to-Files job whose input is at the full site a is placed at b (the least
//!   estimated transfer time), its input pushed a→b over the shaped link (the link's byte
//!   counter grows by at least the file), checksummed, registered at b;
//! - the a→b link is shaped to near zero: probes bring its forecast down and the next CF job
//!   goes to c instead.
//!
//! And the faults of a daemon-driven stage-in, with real agent processes and a real server:
//! a source replica corrupted on its site's disk is detected (the push from it fails its
//! checksum), quarantined at its source (`<file>.quarantined`, out of the catalogue) and the
//! transfer moves to another replica; the source agent of a large stage-in is SIGKILLed in the
//! middle of the push, the transfer moves to the other replica and the job reads the right
//! bytes (sha256). Two jobs that need one file at one site at the same time share one
//! transfer (one push, the file once on the link), where they used to take the receiver's
//! partial upload from each other in turn.
//!
//! Needs root (network namespaces), as CI has.

mod netbed_common;

use std::time::{Duration, Instant};

use netbed_common::*;
use serde_json::Value;

const MIB: u64 = 1 << 20;

fn config(bed: &Bed, agents: &[(&str, u32, &Agent)]) -> String {
    let token = bed.dir.path().join("secret");
    let mut s = String::from("poll_interval_ms = 50\nallow_root_jobs = true\n");
    for (name, procs, a) in agents {
        s.push_str(&format!(
            "[[sites]]\nname = \"{name}\"\nprocessors = {procs}\n[sites.agent]\nurl = \"{}\"\ndata_url = \"{}\"\ntoken_file = {:?}\nroot = {:?}\n",
            a.control.url, a.data.url, token, a.root
        ));
    }
    s.push_str(
        "[scheduler]\nmin_claim_retry_ms = 100\nscan_interval = { kind = \"fixed\", interval_ms = 100 }\n\
         [network]\nprobe_stale_ms = 1500\nprobe_min_interval_ms = 1000\nprobe_max_concurrent = 1\nprobe_bytes = 262144\n\
         [users]\n\"*\" = \"root\"\n",
    );
    s
}

fn link(m: &Value, from: &str, to: &str) -> Value {
    m["links"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["from"] == from && l["to"] == to)
        .cloned()
        .unwrap()
}

fn wait_job(srv: &Server, tok: &str, id: u64, secs: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let j = srv.json(&format!("/api/v1/jobs/{id}"), tok);
        if ["succeeded", "failed", "cancelled"].contains(&j["state"].as_str().unwrap()) {
            return j;
        }
        assert!(Instant::now() < deadline, "job {id} stuck: {j}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn submit(srv: &Server, tok: &str, toml: &str) -> u64 {
    let (code, body) = srv.request("POST", "/api/v1/jobs", Some(tok), toml);
    assert_eq!(code, 201, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["id"].as_u64().unwrap()
}

fn cf_reader(input: &str) -> String {
    let var = input.to_uppercase().replace('.', "_");
    format!(
        "name = \"cf\"\npolicy = \"cf\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"sha256sum \\\"$KOALESCE_INPUT_{var}\\\"\"]\ninputs = [\"{input}\"]\n[[components]]\nprocessors = 1\n"
    )
}

/// Polls the network matrix until `pred` holds for the link (or panics after `secs`).
fn wait_link(srv: &Server, tok: &str, from: &str, to: &str, secs: u64, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let l = link(&srv.json("/api/v1/network", tok), from, to);
        if pred(&l) {
            return l;
        }
        assert!(Instant::now() < deadline, "{what}: {l}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn close_to_files_follows_the_forecast_of_real_shaped_links() {
    let _turn = one_at_a_time();
    let bed = Bed::up(
        "inter_site_mbit = 100\n[[sites]]\nname = \"a\"\n[[sites]]\nname = \"b\"\n[[sites]]\nname = \"c\"\n\
         [[links]]\nfrom = \"a\"\nto = \"b\"\nmbit = 40\n[[links]]\nfrom = \"a\"\nto = \"c\"\nmbit = 10\n",
    );
    let agents: Vec<Agent> = ["a", "b", "c"]
        .iter()
        .map(|s| Agent::start(&bed, s, &bed.dir.path().join(format!("storage-{s}"))))
        .collect();
    let srv_dir = bed.dir.path().join("server");
    let srv = Server::start(
        &srv_dir,
        &config(&bed, &[("a", 1, &agents[0]), ("b", 2, &agents[1]), ("c", 2, &agents[2])]),
    );
    let tok = srv.token("admin");
    for (i, name) in ["input1.dat", "input2.dat"].iter().enumerate() {
        let src = bed.dir.path().join(name);
        let data: Vec<u8> = (0..4 * MIB).map(|k| (k * 31 + i as u64) as u8).collect();
        std::fs::write(&src, &data).unwrap();
        let body = format!(r#"{{"name":"{name}","path":"{}","site":"a"}}"#, src.display());
        let (code, f) = srv.request("POST", "/api/v1/files", Some(&tok), &body);
        assert_eq!(code, 201, "{f}");
    }
    // a is full: CF must move the input.
    let blocker = submit(
        &srv,
        &tok,
        "name = \"blocker\"\nexecutable = \"/bin/sleep\"\narguments = [\"60\"]\n[[components]]\nprocessors = 1\nsite = \"a\"\n",
    );
    let ab = wait_link(&srv, &tok, "a", "b", 30, "a->b never probed", |l| {
        l["samples"].as_u64().unwrap() >= 2
    });
    let ac = wait_link(&srv, &tok, "a", "c", 30, "a->c never probed", |l| {
        l["samples"].as_u64().unwrap() >= 2
    });
    let mbit = |l: &Value| l["bandwidth_bps"].as_f64().unwrap() / 1e6;
    println!(
        "probed: a->b {:.1} Mbit/s ({}), a->c {:.1} Mbit/s ({})",
        mbit(&ab),
        ab["method"],
        mbit(&ac),
        ac["method"]
    );
    assert!((30.0..=55.0).contains(&mbit(&ab)), "a->b shaped to 40: {ab}");
    assert!((7.0..=14.0).contains(&mbit(&ac)), "a->c shaped to 10: {ac}");

    let wire_before = bed.tx_bytes("a", "s1-b");
    let id = submit(&srv, &tok, &cf_reader("input1.dat"));
    let j = wait_job(&srv, &tok, id, 60);
    assert_eq!(j["state"], "succeeded", "{j}");
    assert_eq!(j["components"][0]["site"], "b", "CF picks the faster link: {j}");
    let wire = bed.tx_bytes("a", "s1-b") - wire_before;
    assert!(wire >= 4 * MIB, "only {wire} bytes crossed the a->b link");
    let files = srv.json("/api/v1/files", &tok);
    let f1 = files.as_array().unwrap().iter().find(|f| f["name"] == "input1.dat").unwrap();
    assert_eq!(f1["replicas"], serde_json::json!(["a", "b"]), "{f1}");
    let out = std::fs::read_to_string(j["components"][0]["stdout"].as_str().unwrap()).unwrap();
    assert!(out.starts_with(f1["sha256"].as_str().unwrap()), "{out}");
    let ab = link(&srv.json("/api/v1/network", &tok), "a", "b");
    assert_eq!(ab["bytes_moved"].as_u64().unwrap(), 4 * MIB, "{ab}");
    println!("stage-in a->b: {wire} bytes on the link; forecast now {:.1} Mbit/s", mbit(&ab));

    // The a->b link is shaped to near zero: probes bring the forecast down...
    bed.reshape("a", "s1-b", 400);
    let t0 = Instant::now();
    let ab = wait_link(&srv, &tok, "a", "b", 60, "forecast never dropped", |l| {
        l["bandwidth_bps"].as_f64().unwrap() < 5e6
    });
    println!(
        "a->b reshaped to 0.4 Mbit/s: forecast {:.2} Mbit/s ({}) after {:.1} s",
        mbit(&ab),
        ab["method"],
        t0.elapsed().as_secs_f64()
    );
    // ...and the next CF job goes to c.
    let id = submit(&srv, &tok, &cf_reader("input2.dat"));
    let j = wait_job(&srv, &tok, id, 60);
    assert_eq!(j["state"], "succeeded", "{j}");
    assert_eq!(j["components"][0]["site"], "c", "placement moved away from the slow link: {j}");
    let (code, body) = srv.request("POST", &format!("/api/v1/jobs/{blocker}/cancel"), Some(&tok), "");
    assert_eq!(code, 200, "{body}");
    wait_job(&srv, &tok, blocker, 20);
    let (code, metrics) = srv.request("GET", "/metrics", Some(&tok), "");
    assert_eq!(code, 200);
    assert!(
        metrics.contains("koalesce_network_bytes_total{from=\"a\",to=\"c\"} 4194304"),
        "{metrics}"
    );
}

/// Every regular file under `root` (the agent's storage), recursively.
fn files_under(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                todo.push(e.path());
            } else if t.is_file() {
                out.push(e.path());
            }
        }
    }
    out
}

fn sha256_hex(data: &[u8]) -> String {
    koalesce_server::store::sha256_hex(data)
}

fn replicas_of(srv: &Server, tok: &str, name: &str) -> Value {
    let files = srv.json("/api/v1/files", tok);
    files.as_array().unwrap().iter().find(|f| f["name"] == name).unwrap()["replicas"].clone()
}

fn pinned_reader(input: &str, site: &str) -> String {
    cf_reader(input).replace("processors = 1\n", &format!("processors = 1\nsite = \"{site}\"\n"))
}

#[test]
fn a_corrupt_source_is_quarantined_and_a_killed_source_agent_gives_way_to_another_replica() {
    let _turn = one_at_a_time();
    // To a: c fast (40), b slow (10). To b: a fast (40), c slower (16).
    let bed = Bed::up(
        "inter_site_mbit = 100\n[[sites]]\nname = \"a\"\n[[sites]]\nname = \"b\"\n[[sites]]\nname = \"c\"\n\
         [[links]]\nfrom = \"a\"\nto = \"b\"\nmbit = 40\nreverse_mbit = 10\n\
         [[links]]\nfrom = \"c\"\nto = \"b\"\nmbit = 16\n\
         [[links]]\nfrom = \"c\"\nto = \"a\"\nmbit = 40\nreverse_mbit = 10\n",
    );
    let mut agents: Vec<Agent> = ["a", "b", "c"]
        .iter()
        .map(|s| Agent::start(&bed, s, &bed.dir.path().join(format!("storage-{s}"))))
        .collect();
    let srv = Server::start(
        &bed.dir.path().join("server"),
        &config(&bed, &[("a", 2, &agents[0]), ("b", 2, &agents[1]), ("c", 2, &agents[2])]),
    );
    let tok = srv.token("admin");
    let register = |name: &str, site: &str, data: &[u8]| {
        let src = bed.dir.path().join(format!("src-{name}-{site}"));
        std::fs::write(&src, data).unwrap();
        let body = format!(r#"{{"name":"{name}","path":"{}","site":"{site}"}}"#, src.display());
        let (code, f) = srv.request("POST", "/api/v1/files", Some(&tok), &body);
        assert_eq!(code, 201, "{f}");
    };
    let mbit = |l: &Value| l["bandwidth_bps"].as_f64().unwrap() / 1e6;
    let probed = |from: &str, to: &str| wait_link(&srv, &tok, from, to, 40, "never probed", |l| l["samples"].as_u64().unwrap() >= 2);
    // Until the forecasts rank the two links as shaped: probes go on every 1.5 s, and one
    // probe slowed by a busy machine (a->b once read 2.8 Mbit/s) is outvoted by the next.
    let ranked = |fast: (&str, &str), slow: (&str, &str), factor: f64| {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let (f, s) = (probed(fast.0, fast.1), probed(slow.0, slow.1));
            if mbit(&f) > factor * mbit(&s) {
                return (f, s);
            }
            assert!(
                Instant::now() < deadline,
                "{}->{} must look faster than {}->{}: {f} {s}",
                fast.0,
                fast.1,
                slow.0,
                slow.1
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    };

    // 1. A corrupt replica at c, the core's first choice for a (c->a is the fast link).
    let small: Vec<u8> = (0..2 * MIB).map(|k| (k * 13 + k / 977) as u8).collect();
    register("x.dat", "b", &small);
    register("x.dat", "c", &small);
    let at_c: Vec<_> = files_under(&agents[2].root)
        .into_iter()
        .filter(|p| std::fs::read(p).map(|d| d == small).unwrap_or(false))
        .collect();
    assert_eq!(at_c.len(), 1, "x.dat at c: {at_c:?}");
    let mut bad = small.clone();
    bad[12345] ^= 0x40;
    std::fs::write(&at_c[0], &bad).unwrap();
    let (ca, ba) = ranked(("c", "a"), ("b", "a"), 2.0);
    println!("c->a {:.1} Mbit/s, b->a {:.1} Mbit/s", mbit(&ca), mbit(&ba));
    let client = koalesce_server::dataplane::AgentClient::new(Default::default());
    let role = koalesce_server::dataplane::Role::Source;
    let pushes = |i: usize| client.stats(&agents[i].control, role).unwrap();
    let c_failed_before = pushes(2).pushes_failed;
    let id = submit(&srv, &tok, &pinned_reader("x.dat", "a"));
    let j = wait_job(&srv, &tok, id, 60);
    assert_eq!(j["state"], "succeeded", "{j}");
    let out = std::fs::read_to_string(j["components"][0]["stdout"].as_str().unwrap()).unwrap();
    assert!(out.starts_with(&sha256_hex(&small)), "the job read the right bytes: {out}");
    assert_eq!(
        pushes(2).pushes_failed,
        c_failed_before + 1,
        "c was tried first and its push failed"
    );
    assert_eq!(
        replicas_of(&srv, &tok, "x.dat"),
        serde_json::json!(["a", "b"]),
        "c's replica left the catalogue"
    );
    let mut q = at_c[0].clone().into_os_string();
    q.push(".quarantined");
    assert!(!at_c[0].exists(), "the corrupt replica is no longer in place at c");
    assert_eq!(std::fs::read(&q).unwrap(), bad, "it was quarantined at its source, kept for a look");

    // 2. A large stage-in to b from a (a->b is the fast link); a's agent is SIGKILLed in the
    //    middle of the push: the transfer moves to c's replica.
    let big: Vec<u8> = (0..24 * MIB).map(|k| (k * 29 + k / 1013) as u8).collect();
    register("big.dat", "a", &big);
    register("big.dat", "c", &big);
    let (ab, cb) = ranked(("a", "b"), ("c", "b"), 1.5);
    println!("a->b {:.1} Mbit/s, c->b {:.1} Mbit/s", mbit(&ab), mbit(&cb));
    let (a_wire, c_wire) = (bed.tx_bytes("a", "s1-b"), bed.tx_bytes("c", "s1-b"));
    let id = submit(&srv, &tok, &pinned_reader("big.dat", "b"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while bed.tx_bytes("a", "s1-b") - a_wire < 6 * MIB {
        assert!(Instant::now() < deadline, "the push from a never got going");
        std::thread::sleep(Duration::from_millis(20));
    }
    agents[0].kill();
    let sent_by_a = bed.tx_bytes("a", "s1-b") - a_wire;
    assert!(sent_by_a < 24 * MIB, "killed in the middle: {sent_by_a} bytes had crossed");
    let j = wait_job(&srv, &tok, id, 120);
    assert_eq!(j["state"], "succeeded", "{j}");
    let out = std::fs::read_to_string(j["components"][0]["stdout"].as_str().unwrap()).unwrap();
    assert!(out.starts_with(&sha256_hex(&big)), "the job read the right bytes: {out}");
    let from_c = bed.tx_bytes("c", "s1-b") - c_wire;
    assert!(from_c >= MIB, "c sent the rest ({from_c} bytes on c->b)");
    let at_b: Vec<_> = files_under(&agents[1].root)
        .into_iter()
        .filter(|p| std::fs::metadata(p).unwrap().len() == 24 * MIB)
        .collect();
    assert_eq!(at_b.len(), 1, "{at_b:?}");
    assert_eq!(sha256_hex(&std::fs::read(&at_b[0]).unwrap()), sha256_hex(&big));
    assert_eq!(
        replicas_of(&srv, &tok, "big.dat"),
        serde_json::json!(["a", "b", "c"]),
        "an unreachable agent is not a bad replica"
    );
    println!(
        "a killed after {:.1} MiB on a->b; c then sent {:.1} MiB on c->b; stage-in {} ms",
        sent_by_a as f64 / MIB as f64,
        from_c as f64 / MIB as f64,
        j["timeline"]["transfer_ms"]
    );
}

#[test]
fn two_jobs_needing_one_file_at_one_site_share_one_transfer() {
    let _turn = one_at_a_time();
    let bed = Bed::up(&two_sites(10, 10));
    let agents: Vec<Agent> = ["a", "b"]
        .iter()
        .map(|s| Agent::start(&bed, s, &bed.dir.path().join(format!("storage-{s}"))))
        .collect();
    let srv = Server::start(
        &bed.dir.path().join("server"),
        &config(&bed, &[("a", 2, &agents[0]), ("b", 2, &agents[1])]),
    );
    let tok = srv.token("admin");
    // 8 MiB at 10 Mbit/s: about 7 s on the link.
    let data: Vec<u8> = (0..8 * MIB).map(|k| (k * 17 + k / 509) as u8).collect();
    let src = bed.dir.path().join("shared.dat");
    std::fs::write(&src, &data).unwrap();
    let body = format!(r#"{{"name":"shared.dat","path":"{}","site":"a"}}"#, src.display());
    let (code, f) = srv.request("POST", "/api/v1/files", Some(&tok), &body);
    assert_eq!(code, 201, "{f}");
    let client = koalesce_server::dataplane::AgentClient::new(Default::default());
    let role = koalesce_server::dataplane::Role::Source;
    let before = client.stats(&agents[0].control, role).unwrap();
    let wire = bed.tx_bytes("a", "s1-b");
    let first = submit(&srv, &tok, &pinned_reader("shared.dat", "b"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while bed.tx_bytes("a", "s1-b") - wire < MIB {
        assert!(Instant::now() < deadline, "the first stage-in never got going");
        std::thread::sleep(Duration::from_millis(20));
    }
    let second = submit(&srv, &tok, &pinned_reader("shared.dat", "b"));
    let (j1, j2) = (wait_job(&srv, &tok, first, 90), wait_job(&srv, &tok, second, 90));
    for j in [&j1, &j2] {
        assert_eq!(j["state"], "succeeded", "{j}");
        assert_eq!(j["placement_tries"], 1, "not placed again: {j}");
        let out = std::fs::read_to_string(j["components"][0]["stdout"].as_str().unwrap()).unwrap();
        assert!(out.starts_with(&sha256_hex(&data)), "{out}");
    }
    let after = client.stats(&agents[0].control, role).unwrap();
    assert_eq!(after.pushes_completed - before.pushes_completed, 1, "one push for both: {after:?}");
    assert_eq!(after.pushes_failed, before.pushes_failed, "no push was interrupted: {after:?}");
    let moved = bed.tx_bytes("a", "s1-b") - wire;
    assert!(moved < 8 * MIB + 2 * MIB, "the file crossed once (plus probes): {moved} bytes");
    let waited = j2["timeline"]["transfer_ms"].as_u64().unwrap_or(0);
    assert!(waited > 0, "the second job waited for the transfer: {j2}");
    println!(
        "one push of 8 MiB for two jobs: {moved} bytes on a->b; stage-in {} ms and {waited} ms",
        j1["timeline"]["transfer_ms"]
    );
}
