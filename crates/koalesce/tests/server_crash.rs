//! End-to-end test of `koalesce server` across crashes: the server is killed (SIGKILL) at
//! random moments while coupled jobs run, restarted on the same port, and every component
//! must run exactly once.
//!
//! The kill moments come from a seeded RNG (seed printed; override with
//! `KOALESCE_E2E_SEED=N` to reproduce another run). `KOALESCE_E2E_KEEP=1` keeps the test
//! servers' directories (data dir, server log, markers) for inspection.

mod server_common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use server_common::*;

/// xorshift64*: the test's reproducible randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// Finished jobs of the listing, or None when the server does not answer.
fn finished_count(url: &str, token: &str) -> Option<(usize, usize)> {
    let (status, body) = http(url, "GET", "/api/v1/jobs", Some(token), None, b"").ok()?;
    if status != 200 {
        return None;
    }
    let list = json(&body).as_array()?.clone();
    let done = list
        .iter()
        .filter(|j| matches!(j["state"].as_str(), Some("succeeded" | "failed" | "cancelled")))
        .count();
    Some((done, list.len()))
}

#[test]
fn every_component_runs_exactly_once_across_server_crashes() {
    let _g = serial();
    let seed: u64 = std::env::var("KOALESCE_E2E_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_240_611);
    eprintln!("crash test seed {seed} (set KOALESCE_E2E_SEED to reproduce another run)");
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut s = TestServer::new(&test_config(&[("s1", 6), ("s2", 6), ("s3", 6), ("s4", 6)]));
    let token = s.token("crash", false);
    s.start();
    // Restarts reuse the port, so the submitting client keeps its URL.
    s.port = Some(s.url.rsplit(':').next().unwrap().parse().unwrap());
    let url = s.url.clone();
    let markers = s.path().join("markers");
    std::fs::create_dir_all(&markers).unwrap();

    // The killer: SIGKILL at seeded random moments (during submission and execution), restart
    // on the same data dir.
    let kills = rng.range(3, 5);
    let plan: Vec<(u64, u64)> = (0..kills).map(|_| (rng.range(150, 1800), rng.range(0, 300))).collect();
    let server = std::sync::Arc::new(Mutex::new(s));
    let killer = {
        let server = server.clone();
        let (url, token) = (url.clone(), token.clone());
        std::thread::spawn(move || {
            let mut hit_unfinished = 0;
            for (k, (after, down)) in plan.iter().enumerate() {
                std::thread::sleep(Duration::from_millis(*after));
                let progress = finished_count(&url, &token);
                let mut s = server.lock().unwrap();
                s.kill9();
                if progress.is_some_and(|(done, listed)| done < listed) || progress.is_some_and(|(_, listed)| listed < 200) {
                    hit_unfinished += 1;
                }
                eprintln!(
                    "kill {} of {}: SIGKILL {after} ms after the previous start ({progress:?} finished/listed before)",
                    k + 1,
                    plan.len()
                );
                std::thread::sleep(Duration::from_millis(*down));
                s.start();
            }
            hit_unfinished
        })
    };

    // The workload: 200 small jobs, a quarter of them coupled over two components. A request
    // that fails because the server is down is retried (its job may then exist twice, which
    // is fine: every listed job must run exactly once).
    let mut acknowledged: BTreeSet<u64> = BTreeSet::new();
    let mut retries = 0;
    for i in 0..200u32 {
        let comps = if i % 4 == 0 { 2 } else { 1 };
        let mut job = format!(
            "name = \"crash-{i}\"\nexecutable = \"/bin/sh\"\n\
             arguments = [\"-c\", \"touch \\\"$MARKERS/$KOALESCE_JOB_ID.$KOALESCE_RANK.$$\\\"; sleep 0.2\"]\n\
             environment = {{ MARKERS = \"{}\" }}\nruntime_estimate = \"1m\"\npriority = \"{}\"\n",
            markers.display(),
            ["super-high", "high", "low", "super-low"][(i % 4) as usize]
        );
        if comps > 1 {
            job.push_str("runner = \"coupled\"\n");
        }
        for c in 0..comps {
            job.push_str(&format!("[[components]]\nprocessors = {}\n", 1 + (i + c) % 3));
        }
        let t0 = Instant::now();
        loop {
            match http(&url, "POST", "/api/v1/jobs", Some(&token), Some("application/toml"), job.as_bytes()) {
                Ok((201, body)) => {
                    acknowledged.insert(json(&body)["id"].as_u64().unwrap());
                    break;
                }
                Ok((status, body)) if status < 500 => panic!("submit answered {status}: {body}"),
                _ => {
                    retries += 1;
                    assert!(t0.elapsed() < Duration::from_secs(90), "server down for 90 s");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }
    let hit_unfinished = killer.join().unwrap();
    let s = server.lock().unwrap();
    eprintln!("{} jobs acknowledged ({retries} retried requests)", acknowledged.len());
    assert!(hit_unfinished > 0, "no kill hit unfinished work: the test proved nothing");

    // Wait for the whole workload: as long as it makes progress (a loaded machine runs it
    // slowly), failing when nothing finished for a minute or after five minutes in all.
    let t0 = Instant::now();
    let (mut last_done, mut last_progress) = (0, Instant::now());
    let jobs = loop {
        let (status, body) = http(&s.url, "GET", "/api/v1/jobs", Some(&token), None, b"").unwrap();
        assert_eq!(status, 200, "{body}");
        let list = json(&body).as_array().unwrap().clone();
        let done = list
            .iter()
            .filter(|j| matches!(j["state"].as_str(), Some("succeeded" | "failed" | "cancelled")))
            .count();
        if done == list.len() && list.len() >= acknowledged.len() {
            break list;
        }
        if done > last_done {
            (last_done, last_progress) = (done, Instant::now());
        }
        assert!(
            last_progress.elapsed() < Duration::from_secs(60) && t0.elapsed() < Duration::from_secs(300),
            "{done}/{} jobs finished after {:?} (the last finished {:?} ago)\n{}",
            list.len(),
            t0.elapsed(),
            last_progress.elapsed(),
            s.log_tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let listed: BTreeMap<u64, u32> = jobs
        .iter()
        .map(|j| (j["id"].as_u64().unwrap(), j["components"].as_u64().unwrap() as u32))
        .collect();
    let lost: Vec<&u64> = acknowledged.iter().filter(|id| !listed.contains_key(id)).collect();
    assert!(lost.is_empty(), "acknowledged jobs lost in the crashes: {lost:?}");
    let failed: Vec<String> = jobs.iter().filter(|j| j["state"] != "succeeded").map(|j| j.to_string()).collect();
    assert!(failed.is_empty(), "jobs not succeeded:\n{}", failed.join("\n"));

    // Exactly one marker per job and component.
    let mut count: BTreeMap<(u64, u32), u32> = BTreeMap::new();
    for f in std::fs::read_dir(&markers).unwrap().flatten() {
        let name = f.file_name().to_string_lossy().into_owned();
        let parts: Vec<&str> = name.split('.').collect();
        assert_eq!(parts.len(), 3, "odd marker {name}");
        *count.entry((parts[0].parse().unwrap(), parts[1].parse().unwrap())).or_default() += 1;
    }
    let mut problems = Vec::new();
    for (&id, &comps) in &listed {
        for rank in 0..comps {
            match count.remove(&(id, rank)) {
                Some(1) => {}
                Some(n) => problems.push(format!("job {id} component {rank} ran {n} times")),
                None => problems.push(format!("job {id} component {rank} never ran")),
            }
        }
    }
    for ((id, rank), n) in count {
        problems.push(format!("unexpected marker for job {id} component {rank} ({n})"));
    }
    assert!(
        problems.is_empty(),
        "{} problems after {kills} crashes (seed {seed}):\n{}",
        problems.len(),
        problems.join("\n")
    );
    eprintln!(
        "{} jobs succeeded, each component exactly once, after {kills} crashes",
        listed.len()
    );
}
