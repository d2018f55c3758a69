//! Properties of the federation policy's local scheduler and AWT (seed 002).

use std::collections::VecDeque;

use koalesce_core::federation::easy::{HeldJob, QueuedJob, RunningJob};
use koalesce_core::federation::{Easy, Snapshot, Wait, Waiting};
use koalesce_core::Millis;
use proptest::prelude::*;

#[derive(Debug, Clone, Copy)]
struct J {
    key: u64,
    nodes: u32,
    est: Millis,
}

impl Waiting for J {
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

/// Runs FCFS+EASY with the new job appended to the queue, every job ending exactly at its
/// expected end, and returns when the new job starts (the definition of AWT).
fn direct_start(s: &Snapshot, nodes: u32, est: Millis) -> Option<Millis> {
    direct_start_at(s, s.now, nodes, est)
}

/// Like [`direct_start`] for a job appended at `arrive` ≥ `s.now` (the scheduler having run
/// from `s.now` until then); the wait counts from `arrive`.
fn direct_start_at(s: &Snapshot, arrive: Millis, nodes: u32, est: Millis) -> Option<Millis> {
    direct_start_after(s, &[], arrive, nodes, est)
}

/// Like [`direct_start_at`] with more jobs joining the queue before the newcomer: (time,
/// nodes, estimate), in order of time, none later than `arrive`.
fn direct_start_after(s: &Snapshot, before: &[(Millis, u32, Millis)], arrive: Millis, nodes: u32, est: Millis) -> Option<Millis> {
    if nodes > s.nodes {
        return None;
    }
    let mut easy = Easy::new(s.nodes);
    let mut ends: Vec<(Millis, u64)> = Vec::new();
    for (i, r) in s.running.iter().enumerate() {
        if r.nodes > 0 {
            assert!(easy.allocate(i as u64, r.nodes, r.expected_end.max(s.now)));
            ends.push((r.expected_end.max(s.now), i as u64));
        }
    }
    // Held jobs (input still arriving) end at the earliest their estimate after the snapshot.
    for (i, h) in s.held.iter().enumerate() {
        let key = 1_000 + i as u64;
        assert!(easy.allocate(key, h.nodes, s.now + h.estimate_ms));
        ends.push((s.now + h.estimate_ms, key));
    }
    let mut queue: VecDeque<J> = s
        .queued
        .iter()
        .enumerate()
        .map(|(i, q)| J {
            key: (s.running.len() + i) as u64,
            nodes: q.nodes,
            est: q.estimate_ms,
        })
        .collect();
    let newcomer = u64::MAX;
    let mut pending: VecDeque<(Millis, J)> = before
        .iter()
        .enumerate()
        .map(|(i, &(at, nodes, est))| {
            (
                at.max(s.now),
                J {
                    key: 10_000 + i as u64,
                    nodes,
                    est,
                },
            )
        })
        .collect();
    pending.push_back((arrive, J { key: newcomer, nodes, est }));
    let mut now = s.now;
    loop {
        while pending.front().is_some_and(|&(at, _)| at <= now) {
            let (_, j) = pending.pop_front().expect("front exists");
            queue.push_back(j);
        }
        // Jobs end exactly at their expected end.
        let mut i = 0;
        while i < ends.len() {
            if ends[i].0 <= now {
                let (e, k) = ends.swap_remove(i);
                assert!(easy.release(k, e).is_some());
            } else {
                i += 1;
            }
        }
        let mut started = Vec::new();
        easy.schedule(now, &mut queue, &mut started);
        for j in &started {
            if j.key == newcomer {
                return Some(now - arrive);
            }
            ends.push((now + j.est, j.key));
        }
        let next_end = ends.iter().map(|e| e.0).min();
        now = match (next_end, pending.front().map(|p| p.0)) {
            (Some(e), Some(a)) => e.min(a),
            (Some(e), None) => e,
            (None, Some(a)) => a,
            (None, None) => return None,
        };
    }
}

fn snapshot() -> impl Strategy<Value = Snapshot> {
    (1u32..24).prop_flat_map(|nodes| {
        (
            Just(nodes),
            proptest::collection::vec((1u32..=nodes, 0u64..40), 0..8),
            proptest::collection::vec((1u32..=nodes, 1u64..40), 0..10),
            proptest::collection::vec((1u32..=nodes, 1u64..40), 0..3),
        )
            .prop_map(|(nodes, running, queued, waiting_for_data)| {
                // Keep the running and held jobs within the server.
                let mut used = 0;
                let running = running
                    .into_iter()
                    .filter(|&(n, _)| {
                        used += n;
                        used <= nodes
                    })
                    .map(|(n, e)| RunningJob {
                        nodes: n,
                        expected_end: 1_000 + e * 1_000,
                    })
                    .collect();
                let held = waiting_for_data
                    .into_iter()
                    .filter(|&(n, _)| {
                        used += n;
                        used <= nodes
                    })
                    .map(|(n, e)| HeldJob {
                        nodes: n,
                        estimate_ms: e * 1_000,
                    })
                    .collect();
                let queued = queued
                    .into_iter()
                    .map(|(n, e)| QueuedJob {
                        nodes: n,
                        estimate_ms: e * 1_000,
                    })
                    .collect();
                Snapshot {
                    now: 5_000,
                    nodes,
                    running,
                    held,
                    queued,
                }
            })
    })
}

proptest! {
    /// The replay without the newcomer answers exactly what a simulation with it appended
    /// gives, for any job (the module's central claim).
    #[test]
    fn replay_awt_equals_direct_simulation(s in snapshot(), nodes in 1u32..26, est in 1u64..50) {
        let mut replay = s.replay().unwrap();
        let expected = direct_start(&s, nodes, est * 1_000);
        prop_assert_eq!(replay.wait_ms(nodes, est * 1_000), expected);
    }

    /// Asked later (nothing having happened), the replay answers what the scheduler run until
    /// then and given the job then would do.
    #[test]
    fn later_queries_equal_direct_simulation(s in snapshot(), nodes in 1u32..26, est in 1u64..50, later in 0u64..60) {
        let arrive = s.now + later * 1_000 + 500;
        let mut replay = s.replay().unwrap();
        prop_assert_eq!(replay.wait_ms_at(arrive, nodes, est * 1_000), direct_start_at(&s, arrive, nodes, est * 1_000));
    }

    /// A bounded query answers the same as the full one when the wait is within the cutoff,
    /// and `Beyond` otherwise, whatever was simulated before (laziness does not matter).
    #[test]
    fn bounded_queries_agree(s in snapshot(), nodes in 1u32..26, est in 1u64..50, cutoff in 0u64..60, warm in proptest::bool::ANY) {
        let full = s.replay().unwrap().wait_ms(nodes, est * 1_000);
        let mut replay = s.replay().unwrap();
        if warm {
            replay.finish();
        }
        let got = replay.wait_within(s.now, nodes, est * 1_000, cutoff * 1_000);
        match full {
            Some(w) if w <= cutoff * 1_000 => prop_assert_eq!(got, Wait::At(w)),
            _ => prop_assert_eq!(got, Wait::Beyond),
        }
    }

    /// Jobs appended to a replay at their times (`Replay::append`) join it as they would join
    /// the scheduler's queue then, whatever the replay had simulated before (cold, warmed by
    /// queries in between, or finished): a newcomer asked about afterwards waits what a direct
    /// simulation with every job joining at its time gives.
    #[test]
    fn appended_jobs_join_at_their_time(
        s in snapshot(),
        appends in proptest::collection::vec((0u64..30, 1u32..26, 1u64..50, 0u8..4), 0..8),
        nodes in 1u32..26,
        est in 1u64..50,
        later in 0u64..30,
    ) {
        let mut replay = s.replay().unwrap();
        let mut at = s.now;
        let mut before = Vec::new();
        for &(gap, n, e, warm) in &appends {
            // Some appends at the same time as the previous one, most later (by whole and
            // half seconds, so on and off the expected ends).
            at += gap * 500;
            let n = n.min(s.nodes);
            match warm {
                0 => {}
                1 => replay.finish(),
                _ => {
                    let _ = replay.wait_ms_at(at, 1 + (n + u32::from(warm)) % s.nodes, e * 700);
                }
            }
            replay.append(at, n, e * 1_000);
            before.push((at, n, e * 1_000));
        }
        let arrive = at + later * 500;
        let got = replay.wait_ms_at(arrive, nodes, est * 1_000);
        prop_assert_eq!(got, direct_start_after(&s, &before, arrive, nodes, est * 1_000));
    }

    /// The scheduler never hands out more nodes than it has, starts every job at most once,
    /// and a pass leaves no queue head that would fit.
    #[test]
    fn schedule_keeps_its_invariants(s in snapshot()) {
        let mut easy = Easy::new(s.nodes);
        for (i, r) in s.running.iter().enumerate() {
            prop_assert!(easy.allocate(i as u64, r.nodes, r.expected_end));
        }
        let mut queue: VecDeque<J> = s.queued.iter().enumerate().map(|(i, q)| J { key: 100 + i as u64, nodes: q.nodes, est: q.estimate_ms }).collect();
        let before = queue.len();
        let mut started = Vec::new();
        easy.schedule(s.now, &mut queue, &mut started);
        prop_assert_eq!(started.len() + queue.len(), before);
        let used: u32 = easy.running_jobs(s.now).map(|(_, _, n)| n).sum();
        prop_assert_eq!(used + easy.free(), s.nodes);
        if let Some(h) = queue.front() {
            prop_assert!(h.nodes > easy.free());
        }
        let mut keys: Vec<u64> = started.iter().map(|j| j.key).collect();
        keys.sort_unstable();
        keys.dedup();
        prop_assert_eq!(keys.len(), started.len());
    }
}
