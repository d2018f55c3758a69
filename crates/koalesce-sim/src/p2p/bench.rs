//! `koalesce bench p2p`: the two pieces that make the P2P runs fast, each timed side by side in
//! one run against the straightforward way of doing the same, with the same answers checked,
//! and one whole run on the real traces.
//!
//! * AWT: one lazy [`Replay`] answering many queries, against "simulating the local scheduling
//!   policy using the local jobs that are either running or waiting in LQ, and j" (002 §III-A)
//!   from scratch for every query with [`Easy::schedule`].
//! * Network: [`PathNetwork`] (rates per path) against the general [`crate::network::Network`]
//!   (rates per transfer) on the same transfers, a thousand or more in flight.

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

use koalesce_core::federation::{Easy, Replay, Waiting};

use crate::network::{Network, NetworkSpec};
use crate::rng::Rng;

use super::grid::{Sites, LAN_BPS, WAN_BPS};
use super::net::PathNetwork;
use super::workload::{self, Traces, WorkloadOptions};
use super::{Algorithm, RunConfig};

type Millis = u64;

/// One line of the benchmark.
#[derive(Debug, Clone)]
pub struct Row {
    pub what: String,
    pub koalesce: Duration,
    /// The straightforward way (`None` for a plain timing).
    pub reference: Option<Duration>,
}

/// The benchmark's lines.
#[derive(Debug, Clone)]
pub struct Report {
    pub rows: Vec<Row>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:<62} {:>12} {:>12} {:>8}", "what", "koalesce", "reference", "ratio")?;
        for r in &self.rows {
            match r.reference {
                Some(reference) => writeln!(
                    f,
                    "{:<62} {:>10.1}ms {:>10.1}ms {:>7.1}x",
                    r.what,
                    r.koalesce.as_secs_f64() * 1e3,
                    reference.as_secs_f64() * 1e3,
                    reference.as_secs_f64() / r.koalesce.as_secs_f64().max(1e-9)
                )?,
                None => writeln!(f, "{:<62} {:>10.1}ms {:>12} {:>8}", r.what, r.koalesce.as_secs_f64() * 1e3, "", "")?,
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
struct Q {
    key: u64,
    nodes: u32,
    est: Millis,
}

impl Waiting for Q {
    fn key(&self) -> u64 {
        self.key
    }
    fn nodes(&self) -> u32 {
        self.nodes
    }
    fn estimate_ms(&self) -> Millis {
        self.est
    }
}

/// A server of `nodes` nodes, full, with `queued` jobs waiting.
fn loaded_server(nodes: u32, queued: usize, rng: &mut Rng) -> (Easy, Vec<Q>) {
    let mut easy = Easy::new(nodes);
    let mut key = 0;
    while easy.free() > 0 {
        let n = (1 + rng.below(16) as u32).min(easy.free());
        easy.allocate(key, n, 1_000 + rng.below(36_000_000));
        key += 1;
    }
    let queue = (0..queued)
        .map(|i| Q {
            key: 1_000_000 + i as u64,
            nodes: 1 + rng.below(u64::from(nodes / 4)) as u32,
            est: 600_000 + rng.below(86_400_000),
        })
        .collect();
    (easy, queue)
}

/// The job's start by simulating the scheduler with it appended, every job ending at its
/// expected end (the definition, done from scratch).
fn direct_awt(easy: &Easy, queue: &[Q], nodes: u32, est: Millis) -> Option<Millis> {
    let mut easy = easy.clone();
    let mut q: VecDeque<Q> = queue.iter().copied().collect();
    q.push_back(Q { key: u64::MAX, nodes, est });
    let mut ends: Vec<(Millis, u64)> = easy.running_jobs(0).map(|(e, k, _)| (e, k)).collect();
    let mut now = 0;
    let mut started = Vec::new();
    loop {
        ends.retain(|&(e, k)| {
            if e <= now {
                easy.release(k, e);
                false
            } else {
                true
            }
        });
        started.clear();
        easy.schedule(now, &mut q, &mut started);
        for j in &started {
            if j.key == u64::MAX {
                return Some(now);
            }
            ends.push((now + j.est, j.key));
        }
        now = ends.iter().map(|e| e.0).min()?;
    }
}

fn time<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let x = f();
    (x, t.elapsed())
}

/// Runs the benchmark; with `traces`, also one S-I run (set B, 12 sites, seed 1) on them.
pub fn bench(traces: Option<&Traces>) -> Report {
    let mut rows = Vec::new();
    let mut rng = Rng::new(2002);

    for queued in [50usize, 500, 2_000] {
        let (easy, queue) = loaded_server(256, queued, &mut rng);
        let queries: Vec<(u32, Millis)> = (0..200)
            .map(|_| (1 + rng.below(64) as u32, 60_000 + rng.below(36_000_000)))
            .collect();
        let (fast, t_fast) = time(|| {
            let mut r = Replay::new(0, &easy, queue.iter());
            queries.iter().map(|&(n, e)| r.wait_ms(n, e)).collect::<Vec<_>>()
        });
        let (slow, t_slow) = time(|| queries.iter().map(|&(n, e)| direct_awt(&easy, &queue, n, e)).collect::<Vec<_>>());
        assert_eq!(fast, slow, "AWT replay and direct simulation disagree");
        rows.push(Row {
            what: format!("AWT: 200 queries, 256 nodes full, {queued} queued"),
            koalesce: t_fast,
            reference: Some(t_slow),
        });
    }

    for (sites, transfers) in [(12usize, 20_000u64), (3, 20_000)] {
        let starts: Vec<(Millis, usize, usize, u64)> = (0..transfers)
            .map(|k| {
                let a = rng.below(sites as u64) as usize;
                let b = rng.below(sites as u64) as usize;
                (k * 200, a, b, 50_000_000 + rng.below(2_000_000_000))
            })
            .collect();
        let (fast, t_fast) = time(|| {
            let mut n = PathNetwork::new(sites, LAN_BPS, WAN_BPS);
            let mut done = 0;
            let mut peak = 0;
            for &(t, a, b, bytes) in &starts {
                done += n.advance_to_timed(t).len();
                n.start(t, a, b, bytes);
                peak = peak.max(n.active());
            }
            done += n.advance_to_timed(u64::MAX / 4).len();
            (done, peak)
        });
        let (slow, t_slow) = time(|| {
            let mut n = Network::new(NetworkSpec::uniform(sites, LAN_BPS, WAN_BPS, 0)).expect("valid network");
            let mut done = 0;
            for &(t, a, b, bytes) in &starts {
                while let Some(c) = n.next_completion().filter(|&c| c <= t) {
                    done += n.advance_to(c).len();
                }
                n.start(t, a, b, bytes);
            }
            while let Some(c) = n.next_completion() {
                done += n.advance_to(c).len();
            }
            done
        });
        assert_eq!(fast.0, slow, "the two networks completed different numbers of transfers");
        rows.push(Row {
            what: format!("network: {transfers} transfers, {sites} sites, up to {} in flight", fast.1),
            koalesce: t_fast,
            reference: Some(t_slow),
        });
    }

    if let Some(traces) = traces {
        let (wl, t_build) = time(|| workload::build(traces, 1, &WorkloadOptions::default()));
        rows.push(Row {
            what: format!("workload: {} jobs from the traces (seed 1)", wl.jobs.len()),
            koalesce: t_build,
            reference: None,
        });
        for (alg, b, sites, aware, what) in [
            (Algorithm::Local, 1.0, Sites::Twelve, true, "local"),
            (Algorithm::SenderInitiated, 1.0, Sites::Twelve, true, "S-I, B, 12 sites"),
            (
                Algorithm::SenderInitiated,
                10.0,
                Sites::Twelve,
                false,
                "S-I ignoring data, 10B, 12 sites",
            ),
        ] {
            let cfg = RunConfig {
                algorithm: alg,
                sites,
                data_kb: b,
                data_aware: aware,
                ..RunConfig::default()
            };
            let (_, t) = time(|| super::run(&cfg, &wl, &mut |_| {}));
            rows.push(Row {
                what: format!("one run: {what}"),
                koalesce: t,
                reference: None,
            });
        }
    }
    Report { rows }
}
