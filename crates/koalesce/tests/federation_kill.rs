//! Peered `koalesce server` processes (issue 14, on loopback): the origin and the receiver are
//! SIGKILLed again and again while jobs are being decided, handed over and run, and restarted
//! on the same ports — in the end every grid job succeeded and ran exactly once (item 5's kill
//! test); a receiver SIGKILLed during input transfers drops them once their handoffs are
//! aborted; and the CLI a user at the origin runs for a job at the peer.

mod server_common;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use server_common::{free_port, test_config, TestServer};

const SECRET: &str = "kill-test-pair-secret-0123456789";

/// A `koalesce server` process named `name` with one site `<name>1` of `procs` processors, on
/// the fixed `port` (restarts keep it), peered with `peer` (name, port) through the secret in
/// `dir`; `extra`: more lines of its `[federation]` table.
fn peer_server(dir: &Path, name: &str, port: u16, procs: u32, peer: (&str, u16), extra: &str) -> TestServer {
    let secret = dir.join("pair.secret");
    std::fs::write(&secret, SECRET).unwrap();
    let config = format!(
        "{}[federation]\nname = \"{name}\"\nphi = \"1s\"\ncheck_interval_ms = 100\n\
         peer_timeout_ms = 1000\nbackoff_initial_ms = 200\nbackoff_max_ms = 1000\n{extra}\n\
         [[federation.peers]]\nname = \"{}\"\nurl = \"http://127.0.0.1:{}\"\nsecret_file = {:?}\n",
        test_config(&[(&format!("{name}1"), procs)]),
        peer.0,
        peer.1,
        secret
    );
    let mut s = TestServer::new(&config);
    s.port = Some(port);
    s
}

/// One request to the server on `port` (a server being killed answers nothing: status 0).
fn http(method: &str, port: u16, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
    let ct = (method == "POST").then_some("application/toml");
    server_common::http(&format!("http://127.0.0.1:{port}"), method, path, token, ct, body.as_bytes()).unwrap_or((0, String::new()))
}

#[test]
fn sigkilled_origin_and_receiver_lose_no_job_and_run_none_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let (pa, pb) = (free_port(), free_port());
    let mut a = peer_server(tmp.path(), "alpha", pa, 1, ("beta", pb), "");
    let mut b = peer_server(tmp.path(), "beta", pb, 4, ("alpha", pa), "");
    let alice = a.token("alice", false);
    let root_b = b.token("root", true);
    a.start();
    b.start();
    let job = |k: usize| {
        format!("name = \"k{k}\"\nexecutable = \"/bin/sleep\"\narguments = [\"1\"]\nruntime_estimate = \"20s\"\n[[components]]\nprocessors = 1\n")
    };
    let mut ids = Vec::new();
    for k in 0..6 {
        let (code, body) = http("POST", pa, "/api/v1/grid/jobs", Some(&alice), &job(k));
        assert_eq!(code, 201, "{body}");
        ids.push(serde_json::from_str::<Value>(&body).unwrap()["id"].as_u64().unwrap());
        if k % 2 == 1 {
            // Kill the receiver and the origin in turn while decisions and handoffs go on.
            let (victim, other) = if k % 4 == 1 { (&mut b, "beta") } else { (&mut a, "alpha") };
            std::thread::sleep(Duration::from_millis(150 + 70 * k as u64));
            victim.kill9();
            std::thread::sleep(Duration::from_millis(200));
            victim.start();
            eprintln!("killed and restarted {other}");
        }
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    for &id in &ids {
        loop {
            let (code, body) = http("GET", pa, &format!("/api/v1/grid/jobs/{id}"), Some(&alice), "");
            if code == 200 {
                let g: Value = serde_json::from_str(&body).unwrap();
                if ["succeeded", "failed", "cancelled"].contains(&g["state"].as_str().unwrap()) {
                    assert_eq!(g["state"], "succeeded", "{g}");
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "grid job {id} not finished:\n{}\n---\n{}",
                a.log_tail(),
                b.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let count = |port: u16, tok: &str, path: &str| -> usize {
        let (code, body) = http("GET", port, path, Some(tok), "");
        assert_eq!(code, 200, "{body}");
        serde_json::from_str::<Value>(&body).unwrap().as_array().unwrap().len()
    };
    let here = count(pa, &alice, "/api/v1/jobs");
    let there = count(pb, &root_b, "/api/v1/jobs?all=true");
    assert_eq!(
        here + there,
        ids.len(),
        "alpha ran {here}, beta ran {there}: a job lost or run twice"
    );
    assert!(there >= 1, "no job moved: the kills did not meet a handoff");
}

/// A fake origin "alpha": serves input `d.bin` of handoff `alpha-<k>-1` as `contents[k-1]`,
/// sending the first `stall_at` bytes and then nothing more on that connection (a transfer
/// under way that the receiver is killed in). Other requests: 404.
fn stalling_origin(contents: Vec<Vec<u8>>, stall_at: usize) -> u16 {
    use std::io::{BufRead, BufReader, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let contents = std::sync::Arc::new(contents);
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { return };
            let contents = contents.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut first = String::new();
                let _ = r.read_line(&mut first);
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                }
                let k = first
                    .strip_prefix("GET /api/v1/peer/sent/alpha-")
                    .and_then(|rest| rest.split('-').next())
                    .and_then(|k| k.parse::<usize>().ok())
                    .filter(|&k| k >= 1 && k <= contents.len() && first.contains("/inputs/d.bin "));
                let Some(k) = k else {
                    let _ = conn.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}");
                    return;
                };
                let data = &contents[k - 1];
                let sha = koalesce_server::store::sha256_hex(data);
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nx-checksum-sha256: {sha}\r\nconnection: close\r\n\r\n",
                    data.len()
                );
                let _ = conn.write_all(head.as_bytes());
                let _ = conn.write_all(&data[..stall_at]);
                let _ = conn.flush();
                std::thread::sleep(Duration::from_secs(120));
            });
        }
    });
    port
}

/// Issue 14: a receiver SIGKILLed in the middle of the input transfers of two prepared
/// handoffs keeps their partials across the restart (a commit would resume them), then drops
/// each once it is aborted: the first by its origin, the second by the receiver itself when
/// its origin has not spoken of it for `handoff_timeout_ms`. A late commit is refused; nothing
/// is registered or run.
#[test]
fn a_receiver_sigkilled_during_input_transfers_drops_them_once_their_handoffs_are_aborted() {
    let tmp = tempfile::tempdir().unwrap();
    let content = |seed: u8| -> Vec<u8> { (0..3_000_000u32).map(|i| (i % 251) as u8 ^ seed).collect() };
    let contents = vec![content(1), content(2)];
    let shas: Vec<String> = contents.iter().map(|c| koalesce_server::store::sha256_hex(c)).collect();
    let fake = stalling_origin(contents, 1_500_000);
    let pb = free_port();
    let mut b = peer_server(
        tmp.path(),
        "beta",
        pb,
        4,
        ("alpha", fake),
        "probe_bytes = 0\nhandoff_timeout_ms = 8000",
    );
    let root = b.token("root", true);
    b.start();
    let as_alpha = koalesce_server::peer::PeerClient::new("alpha", "beta", &format!("http://127.0.0.1:{pb}"), SECRET.into(), 5_000);
    let desc = "name = \"x\"\nexecutable = \"/bin/true\"\ninputs = [\"d.bin\"]\n[[components]]\nprocessors = 1\n";
    for (k, sha) in shas.iter().enumerate() {
        let h = format!("alpha-{}-1", k + 1);
        let body = serde_json::json!({"handoff": h, "user": "alice", "description": desc,
            "inputs": [{"name": "d.bin", "size_bytes": 3_000_000, "sha256": sha}]});
        let p: Value = as_alpha.call("/api/v1/peer/handoffs", Some(&body)).unwrap();
        assert_eq!(p["state"], "prepared", "{p}");
        // One commit starts the transfer (it stalls half-way).
        let c: Value = as_alpha.call(&format!("/api/v1/peer/handoffs/{h}/commit"), Some(&())).unwrap();
        assert!(c["job"].is_null(), "{c}");
    }
    // Both partials hold a durable checkpoint (every MiB; its record is `….offset`, written
    // through a temporary file a kill may leave too): kill the receiver now.
    let parts_dir = b.data_dir.join("federation-partial");
    let names_of = |sha: &str| -> Vec<String> {
        std::fs::read_dir(&parts_dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.contains(&sha[..16]))
                    .collect()
            })
            .unwrap_or_default()
    };
    let partials_of = |sha: &str| names_of(sha).len();
    let deadline = Instant::now() + Duration::from_secs(30);
    while shas.iter().any(|s| !names_of(s).iter().any(|n| n.ends_with(".part.offset"))) {
        assert!(Instant::now() < deadline, "no checkpoints: {}", b.log_tail());
        std::thread::sleep(Duration::from_millis(50));
    }
    b.kill9();
    b.start();
    // Kept across the restart: the origin may still commit (and the transfer resume).
    assert!(shas.iter().all(|s| partials_of(s) == 2));
    // The origin aborts the first: its partial goes at once; the second's stays.
    let ab: Value = as_alpha.call("/api/v1/peer/handoffs/alpha-1-1/abort", Some(&())).unwrap();
    assert_eq!(ab["state"], "aborted");
    assert_eq!(partials_of(&shas[0]), 0);
    assert_eq!(partials_of(&shas[1]), 2);
    // The origin never speaks of the second again: the receiver aborts it after 8 s.
    let deadline = Instant::now() + Duration::from_secs(30);
    while partials_of(&shas[1]) > 0 {
        assert!(Instant::now() < deadline, "{}", b.log_tail());
        std::thread::sleep(Duration::from_millis(100));
    }
    let st: Value = as_alpha.call::<(), _>("/api/v1/peer/handoffs/alpha-2-1", None).unwrap();
    assert_eq!(st["state"], "aborted", "{st}");
    assert!(matches!(
        as_alpha.call::<_, Value>("/api/v1/peer/handoffs/alpha-2-1/commit", Some(&())),
        Err(koalesce_server::peer::CallError::Refused(409, _))
    ));
    let (code, files) = http("GET", pb, "/api/v1/files", Some(&root), "");
    assert_eq!((code, files.trim()), (200, "[]"));
    let (code, jobs) = http("GET", pb, "/api/v1/jobs?all=true", Some(&root), "");
    assert_eq!((code, jobs.trim()), (200, "[]"));
}

/// `koalesce …` against `s` as `token`: (success, stdout + stderr).
fn cli(s: &TestServer, token: &str, args: &[&str]) -> (bool, String) {
    let (code, out, err) = server_common::cli(s, token, args);
    (code == 0, format!("{out}{err}"))
}

/// Issue 14, for a user at the origin (real `koalesce server` processes, the real CLI): a job
/// that failed at the peer shows where it ran, why it moved and why it failed (`koalesce status
/// g<N>`), its stderr and stdout come from `koalesce logs g<N>`; `koalesce cancel g<N>` cancels a
/// job running at the peer there, and its output so far comes back.
#[test]
fn the_cli_shows_a_migrated_jobs_failure_and_logs_and_cancels_it_at_the_peer() {
    let tmp = tempfile::tempdir().unwrap();
    let (pa, pb) = (free_port(), free_port());
    let mut a = peer_server(tmp.path(), "alpha", pa, 1, ("beta", pb), "");
    let mut b = peer_server(tmp.path(), "beta", pb, 4, ("alpha", pa), "");
    let alice = a.token("alice", false);
    a.start();
    b.start();
    let submit = |toml: &str| -> u64 {
        let (code, body) = http("POST", pa, "/api/v1/grid/jobs", Some(&alice), toml);
        assert_eq!(code, 201, "{body}");
        serde_json::from_str::<Value>(&body).unwrap()["id"].as_u64().unwrap()
    };
    let job = |name: &str, script: &str| {
        format!(
            "name = {name:?}\nexecutable = \"/bin/sh\"\narguments = [\"-c\", {script:?}]\nruntime_estimate = \"20s\"\n\
             [[components]]\nprocessors = 1\n"
        )
    };
    let _blocker = submit(&job("blocker", "sleep 20"));
    let failing = submit(&job("fails", "echo working; echo 'error: no such frobnicator' >&2; exit 2"));
    let long = submit(&job("long", "echo started; exec sleep 120"));
    let state = |id: u64| -> Value {
        let (_, body) = http("GET", pa, &format!("/api/v1/grid/jobs/{id}"), Some(&alice), "");
        serde_json::from_str(&body).unwrap_or(Value::Null)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while state(failing)["state"] != "failed" || state(long)["state"] != "running" {
        assert!(Instant::now() < deadline, "{} {}\n{}", state(failing), state(long), b.log_tail());
        std::thread::sleep(Duration::from_millis(100));
    }
    let (ok, text) = cli(&a, &alice, &["status", &format!("g{failing}")]);
    assert!(ok, "{text}");
    for want in [
        "state    failed",
        "runs at  beta",
        "why      moved: local ATT",
        "failure  ",
        "koalesce logs g",
    ] {
        assert!(text.contains(want), "no '{want}' in:\n{text}");
    }
    let (ok, err) = cli(&a, &alice, &["logs", &format!("g{failing}"), "--stderr"]);
    assert!(ok, "{err}");
    assert_eq!(err, "error: no such frobnicator\n");
    let (ok, out) = cli(&a, &alice, &["logs", &format!("g{failing}")]);
    assert_eq!((ok, out.as_str()), (true, "working\n"));
    // While the long one runs at beta its output is there too; then it is cancelled there.
    let deadline = Instant::now() + Duration::from_secs(20);
    while cli(&a, &alice, &["logs", &format!("g{long}")]).1 != "started\n" {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(100));
    }
    let (ok, text) = cli(&a, &alice, &["cancel", &format!("g{long}")]);
    assert!(ok, "{text}");
    assert!(text.starts_with(&format!("grid job {long} ")), "{text}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while state(long)["state"] != "cancelled" {
        assert!(Instant::now() < deadline, "{}", state(long));
        std::thread::sleep(Duration::from_millis(100));
    }
    let rid = state(long)["job"].as_u64().unwrap();
    let root_b = b.token("root", true);
    let (_, body) = http("GET", pb, &format!("/api/v1/jobs/{rid}"), Some(&root_b), "");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["state"], "cancelled", "{body}");
    assert_eq!(cli(&a, &alice, &["logs", &format!("g{long}")]).1, "started\n");
    let (ok, text) = cli(&a, &alice, &["cancel", &format!("g{long}")]);
    assert!(!ok && text.contains("409"), "{text}");
    a.kill9();
    b.kill9();
}
