//! The local scheduler (LS) of a compute server and the approximate wait time AWT (002 §III-A).
//!
//! The LS is first-come-first-serve with EASY backfilling (Mu'alem and Feitelson 2001) over the
//! server's nodes: 002 §IV-A allocates whole nodes to one application ("the current practice is
//! to allocate each node to a single application"), so sizes here are nodes.
//!
//! * **FCFS.** Queue heads start while they fit in the free nodes.
//! * **EASY.** The blocked head gets a reservation at the shadow time S, the earliest expected end
//!   of a running job at which enough nodes are free for it (every job expected to end by S
//!   counts as freed); extra = nodes free at S minus the head's. Each later job, in queue order,
//!   that fits in the free nodes starts if it is expected to end by S (now + estimate ≤ S), or
//!   else if it needs no more than extra nodes, which it then consumes. The same rules as
//!   `koalesce-sim`'s single-cluster EASY, which compares job by job with other simulators.
//!
//! **AWT.** "AWT is computed by simulating the local scheduling policy using the local jobs that
//! are either running or waiting in LQ, and j. If LS cannot satisfy the resource requirements of
//! j, an AWT of infinity is returned." (002 §III-A). [`Replay`] runs [`Easy`] forward from a
//! snapshot, with every job ending at its expected end, and records the state after each
//! scheduling pass. Because j joins at the tail of the queue it changes nothing before it starts
//! (EASY reserves for the head only, and a job behind the head that does not start leaves
//! everything as it was), so the replay *without* j gives j's start exactly: the first pass at
//! which j would start (as the head when the queue ahead of it is empty, else by backfilling into
//! the nodes and the extra left after the jobs ahead of it). One replay answers any number of
//! queries for different jobs, each in time linear in the number of passes.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::replay::Item;
pub use super::replay::{Replay, Wait};
use crate::model::Millis;

/// A job waiting in a local queue, as the local scheduler sees it.
pub trait Waiting {
    /// Unique among the jobs of one scheduler (running and queued).
    fn key(&self) -> u64;
    /// Nodes it needs on this server.
    fn nodes(&self) -> u32;
    /// Its run time estimate on this server.
    fn estimate_ms(&self) -> Millis;
}

/// The reservation of a blocked queue head after a scheduling pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    /// Shadow time: when the head is expected to start.
    pub shadow: Millis,
    /// Nodes free at the shadow time beyond the head's need, not yet given to backfilled jobs.
    pub extra: u32,
}

/// FCFS with EASY backfilling over the nodes of one server: the nodes and the running jobs'
/// expected ends. The queue is the caller's (a `VecDeque` of anything [`Waiting`]), so that the
/// simulator's local scheduler and the AWT replay run the very same code.
///
/// A job can hold its nodes before it runs (a migrated job whose input has not arrived, 002
/// §V-D): it is *held*. The scheduler knows it has not started, so it expects it to end no
/// earlier than its estimate after now, whatever "now" is when it looks.
#[derive(Debug, Clone)]
pub struct Easy {
    total: u32,
    free: u32,
    /// Running jobs by (expected end, key) → nodes.
    ends: BTreeMap<(Millis, u64), u32>,
    /// Held jobs by (estimate, key) → nodes: expected to end at now + estimate.
    held: BTreeMap<(Millis, u64), u32>,
}

impl Easy {
    /// An idle server of `total_nodes` nodes.
    pub fn new(total_nodes: u32) -> Easy {
        Easy {
            total: total_nodes,
            free: total_nodes,
            ends: BTreeMap::new(),
            held: BTreeMap::new(),
        }
    }

    /// Nodes of the server.
    pub fn total(&self) -> u32 {
        self.total
    }

    /// Nodes not allocated to any job.
    pub fn free(&self) -> u32 {
        self.free
    }

    /// Nodes allocated to jobs.
    pub fn busy(&self) -> u32 {
        self.total - self.free
    }

    /// Number of jobs holding nodes (running or held).
    pub fn running(&self) -> usize {
        self.ends.len() + self.held.len()
    }

    /// Number of held jobs.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Jobs holding nodes as (expected end, key, nodes) seen at `now`, by expected end (held
    /// jobs at now + estimate; running jobs past their expected end at `now`).
    pub fn running_jobs(&self, now: Millis) -> impl Iterator<Item = (Millis, u64, u32)> + '_ {
        let mut ends = self.ends.iter().map(move |(&(end, key), &n)| (end.max(now), key, n)).peekable();
        let mut held = self
            .held
            .iter()
            .map(move |(&(est, key), &n)| (now.saturating_add(est), key, n))
            .peekable();
        std::iter::from_fn(move || match (ends.peek(), held.peek()) {
            (Some(a), Some(b)) if b.0 < a.0 => held.next(),
            (Some(_), _) => ends.next(),
            (None, _) => held.next(),
        })
    }

    /// Allocates `nodes` to job `key` until `expected_end`. Refused (nothing changes) when fewer
    /// nodes are free or the (end, key) pair is already allocated.
    pub fn allocate(&mut self, key: u64, nodes: u32, expected_end: Millis) -> bool {
        if nodes > self.free || self.ends.contains_key(&(expected_end, key)) {
            return false;
        }
        self.free -= nodes;
        self.ends.insert((expected_end, key), nodes);
        true
    }

    /// Releases the nodes of job `key` allocated until `expected_end`; `None` if there is none.
    pub fn release(&mut self, key: u64, expected_end: Millis) -> Option<u32> {
        let n = self.ends.remove(&(expected_end, key))?;
        self.free += n;
        Some(n)
    }

    /// Marks a job that got its nodes (allocated until `expected_end`) as held: it has not
    /// started running. `false` if there is no such job.
    pub fn hold(&mut self, key: u64, expected_end: Millis, estimate: Millis) -> bool {
        match self.ends.remove(&(expected_end, key)) {
            Some(n) => {
                self.held.insert((estimate, key), n);
                true
            }
            None => false,
        }
    }

    /// A held job starts running at `now`: it is expected to end at now + estimate, which is
    /// returned. `None` if there is no such held job.
    pub fn run_held(&mut self, key: u64, estimate: Millis, now: Millis) -> Option<Millis> {
        let n = self.held.remove(&(estimate, key))?;
        let end = now.saturating_add(estimate);
        self.ends.insert((end, key), n);
        Some(end)
    }

    /// When `nodes` nodes are expected to be free if nothing else is queued: `now` if they are
    /// free now, else the first expected end at which enough are (ends before `now` count as
    /// `now`). `None` if the server is smaller than `nodes`.
    pub fn earliest_fit(&self, now: Millis, nodes: u32) -> Option<Millis> {
        if nodes > self.total {
            return None;
        }
        let mut avail = self.free;
        if avail >= nodes {
            return Some(now);
        }
        for (end, _, n) in self.running_jobs(now) {
            avail += n;
            if avail >= nodes {
                return Some(end);
            }
        }
        None
    }

    /// The head's reservation (shadow time and extra nodes) for a head needing `need` nodes.
    pub fn reservation(&self, now: Millis, need: u32) -> Reservation {
        let mut avail = self.free;
        let mut iter = self.running_jobs(now).peekable();
        while let Some((end, _, n)) = iter.next() {
            avail += n;
            if avail >= need {
                // Every job expected to end at the same time is free at S too.
                while let Some(&(e, _, n2)) = iter.peek() {
                    if e != end {
                        break;
                    }
                    avail += n2;
                    iter.next();
                }
                return Reservation {
                    shadow: end,
                    extra: avail - need,
                };
            }
        }
        // Only when the head needs more than the server has: no backfilling.
        Reservation {
            shadow: Millis::MAX,
            extra: 0,
        }
    }

    /// One scheduling pass at `now`: FCFS, then EASY backfilling. Started jobs leave `queue` (the
    /// rest keep their order), are allocated until `now + estimate` and are appended to `started`
    /// in the order they started. Returns the reservation of the head left blocked, or `None`
    /// when the queue is empty after the pass.
    pub fn schedule<J: Waiting>(&mut self, now: Millis, queue: &mut VecDeque<J>, started: &mut Vec<J>) -> Option<Reservation> {
        while let Some(head) = queue.front() {
            if head.nodes() > self.free {
                break;
            }
            let job = queue.pop_front().expect("front exists");
            self.start(now, &job);
            started.push(job);
        }
        let head = queue.front()?;
        let mut resv = self.reservation(now, head.nodes());
        if self.free > 0 && queue.len() > 1 {
            // One compacting sweep over the jobs behind the head (O(queue), not O(queue²)).
            let mut kept: VecDeque<J> = VecDeque::with_capacity(queue.len());
            kept.push_back(queue.pop_front().expect("head exists"));
            while let Some(job) = queue.pop_front() {
                let n = job.nodes();
                if self.free > 0 && n <= self.free {
                    let by_shadow = now.saturating_add(job.estimate_ms()) <= resv.shadow;
                    if by_shadow || n <= resv.extra {
                        if !by_shadow {
                            resv.extra -= n;
                        }
                        self.start(now, &job);
                        started.push(job);
                        continue;
                    }
                }
                kept.push_back(job);
            }
            *queue = kept;
        }
        Some(resv)
    }

    fn start<J: Waiting>(&mut self, now: Millis, job: &J) {
        let ok = self.allocate(job.key(), job.nodes(), now.saturating_add(job.estimate_ms()));
        debug_assert!(ok, "job {} started twice or without room", job.key());
    }
}

/// A job holding nodes, in a [`Snapshot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningJob {
    pub nodes: u32,
    /// When it is expected to release them (start + estimate); earlier than the snapshot's
    /// `now` means "any moment": it counts as `now`.
    pub expected_end: Millis,
}

/// A job holding nodes but not running yet (its input is still arriving), in a [`Snapshot`]:
/// expected to end no earlier than its estimate after the snapshot's `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldJob {
    pub nodes: u32,
    pub estimate_ms: Millis,
}

/// A job waiting in the local queue, in a [`Snapshot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedJob {
    pub nodes: u32,
    pub estimate_ms: Millis,
}

/// What a server's local scheduler holds at one moment: the input of AWT. The live server builds
/// it from its local resource manager (running jobs with their expected ends, pending jobs in
/// queue order with their sizes and time limits); the simulator keeps an [`Easy`] instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub now: Millis,
    /// Nodes of the server.
    pub nodes: u32,
    pub running: Vec<RunningJob>,
    /// Jobs holding nodes before they run.
    #[serde(default)]
    pub held: Vec<HeldJob>,
    /// In queue order.
    pub queued: Vec<QueuedJob>,
}

/// A snapshot that cannot describe a server.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SnapshotError {
    #[error("running jobs hold {held} nodes but the server has {nodes}")]
    OverAllocated { held: u64, nodes: u32 },
    #[error("queued job {index} needs {need} nodes but the server has {nodes}")]
    QueuedTooLarge { index: usize, need: u32, nodes: u32 },
    #[error("queued job {index} needs no nodes")]
    QueuedEmpty { index: usize },
}

impl Snapshot {
    /// Checks the snapshot and builds its [`Replay`].
    pub fn replay(&self) -> Result<Replay, SnapshotError> {
        let held: u64 =
            self.running.iter().map(|r| u64::from(r.nodes)).sum::<u64>() + self.held.iter().map(|h| u64::from(h.nodes)).sum::<u64>();
        if held > u64::from(self.nodes) {
            return Err(SnapshotError::OverAllocated { held, nodes: self.nodes });
        }
        let mut items = Vec::with_capacity(self.queued.len());
        for (index, q) in self.queued.iter().enumerate() {
            if q.nodes == 0 {
                return Err(SnapshotError::QueuedEmpty { index });
            }
            if q.nodes > self.nodes {
                return Err(SnapshotError::QueuedTooLarge {
                    index,
                    need: q.nodes,
                    nodes: self.nodes,
                });
            }
            items.push(Item {
                key: (self.running.len() + self.held.len() + index) as u64,
                nodes: q.nodes,
                estimate: q.estimate_ms,
            });
        }
        let mut easy = Easy::new(self.nodes);
        for (i, r) in self.running.iter().enumerate() {
            if r.nodes > 0 {
                let ok = easy.allocate(i as u64, r.nodes, r.expected_end);
                debug_assert!(ok, "checked above");
            }
        }
        for (i, h) in self.held.iter().enumerate() {
            let key = (self.running.len() + i) as u64;
            if h.nodes > 0 && easy.allocate(key, h.nodes, 0) {
                easy.hold(key, 0, h.estimate_ms);
            }
        }
        Ok(Replay::new(self.now, &easy, &items))
    }
}

/// AWT(j, s): how long a job of `nodes` nodes with run time estimate `estimate_ms` would wait in
/// the local queue of the server described by `snapshot` (002 §III-A). `Ok(None)` is the seed's
/// infinity: the server has fewer nodes than the job needs.
pub fn awt(snapshot: &Snapshot, nodes: u32, estimate_ms: Millis) -> Result<Option<Millis>, SnapshotError> {
    Ok(snapshot.replay()?.wait_ms(nodes, estimate_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(nodes: u32, expected_end: Millis) -> RunningJob {
        RunningJob { nodes, expected_end }
    }

    fn queued(nodes: u32, estimate_ms: Millis) -> QueuedJob {
        QueuedJob { nodes, estimate_ms }
    }

    fn snap(nodes: u32, running: Vec<RunningJob>, queued: Vec<QueuedJob>) -> Snapshot {
        Snapshot {
            now: 1_000,
            nodes,
            running,
            held: vec![],
            queued,
        }
    }

    #[test]
    fn idle_server_and_too_large_jobs() {
        let s = snap(10, vec![], vec![]);
        assert_eq!(awt(&s, 10, 5_000), Ok(Some(0)));
        assert_eq!(awt(&s, 11, 5_000), Ok(None));
        let s = snap(10, vec![run(4, 9_000)], vec![]);
        assert_eq!(awt(&s, 6, 5_000), Ok(Some(0)));
        // 7 nodes: wait for the running job, expected to end at 9 s: 8 s from now.
        assert_eq!(awt(&s, 7, 5_000), Ok(Some(8_000)));
    }

    /// A 10-node server, hand-checked:
    /// running A (6 nodes, ends 11 s), B (2 nodes, ends 31 s); 2 nodes free.
    /// queue: C (8 nodes, 20 s), D (2 nodes, 5 s).
    /// Pass at 1 s: C blocked; shadow = 11 s (free 2 + A's 6 = 8), extra 0. D (2 ≤ 2 free)
    /// ends by 6 s ≤ 11 s: backfills. Free 0.
    /// Pass at 6 s (D's end): free 2, C still waits for 11 s; shadow 11, extra 0.
    /// Pass at 11 s: A ends, free 8: C starts (until 31 s). Free 0, queue empty.
    /// Pass at 31 s: B and C end, free 10.
    #[test]
    fn hand_checked_fcfs_easy_queue() {
        let s = snap(10, vec![run(6, 11_000), run(2, 31_000)], vec![queued(8, 20_000), queued(2, 5_000)]);
        let mut r = s.replay().unwrap();
        // 1 node, short: at 1 s nothing is free after D's backfill; at 6 s 2 nodes are free and
        // a 5 s job ends by the shadow (11 s): starts at 6 s.
        assert_eq!(r.wait_ms(1, 5_000), Some(5_000));
        // 2 nodes, 10 s: at 6 s it would end at 16 s > shadow 11 s and extra is 0: no. At 11 s
        // C takes 8 of 8 free: 0 free. At 31 s: starts. Wait = 30 s.
        assert_eq!(r.wait_ms(2, 10_000), Some(30_000));
        // 2 nodes, 5 s: backfills at 6 s (ends 11 s = shadow).
        assert_eq!(r.wait_ms(2, 5_000), Some(5_000));
        // 3 nodes: never fits before 31 s.
        assert_eq!(r.wait_ms(3, 1_000), Some(30_000));
        // 10 nodes: 31 s.
        assert_eq!(r.wait_ms(10, 1_000), Some(30_000));
        assert_eq!(r.wait_ms(11, 1_000), None);
        r.finish();
        assert_eq!(r.passes(), 4);
        // Bounded queries: the 2-node 10 s job starts at 30 s.
        assert_eq!(r.wait_within(1_000, 2, 10_000, 29_999), Wait::Beyond);
        assert_eq!(r.wait_within(1_000, 2, 10_000, 30_000), Wait::At(30_000));
    }

    #[test]
    fn backfilling_into_extra_nodes() {
        // 10 nodes; running A (8, ends 21 s); free 2. Queue: H (4 nodes).
        // Shadow 21 s, free then 10, extra 6. A 2-node job of any length backfills now.
        let s = snap(10, vec![run(8, 21_000)], vec![queued(4, 50_000)]);
        let mut r = s.replay().unwrap();
        assert_eq!(r.wait_ms(2, 1_000_000), Some(0));
        // 3 nodes do not fit in the 2 free now; at 21 s H takes 4 of 10: fits then.
        assert_eq!(r.wait_ms(3, 1_000_000), Some(20_000));
        // With extra 1 (H needs 9), a 2-node long job cannot backfill: it must wait for H's end.
        let s = snap(10, vec![run(8, 21_000)], vec![queued(9, 50_000)]);
        let mut r = s.replay().unwrap();
        assert_eq!(r.wait_ms(2, 1_000_000), Some(70_000));
        // ... but a 2-node job ending by the shadow does.
        assert_eq!(r.wait_ms(2, 20_000), Some(0));
    }

    #[test]
    fn overdue_expected_ends_count_as_now() {
        let s = snap(4, vec![run(4, 10)], vec![]);
        assert_eq!(awt(&s, 4, 1), Ok(Some(0)));
    }

    #[test]
    fn held_jobs_end_no_earlier_than_their_estimate_from_now() {
        // 10 nodes: a running job (4 nodes) expected to end at 3 s, a held job (6 nodes, 20 s
        // estimate) whose input has not arrived.
        let mut s = snap(10, vec![run(4, 3_000)], vec![]);
        s.held.push(HeldJob {
            nodes: 6,
            estimate_ms: 20_000,
        });
        assert_eq!(awt(&s, 4, 1), Ok(Some(2_000)));
        // All 10 nodes: at 1 s + 20 s at the earliest.
        assert_eq!(awt(&s, 10, 1), Ok(Some(20_000)));
        // The same seen later: still 20 s from then.
        s.now = 50_000;
        assert_eq!(awt(&s, 10, 1), Ok(Some(20_000)));
        // Easy: hold and run.
        let mut e = Easy::new(10);
        assert!(e.allocate(7, 6, 5_000));
        assert!(e.hold(7, 5_000, 20_000));
        assert!(!e.hold(7, 5_000, 20_000));
        assert_eq!(e.held(), 1);
        assert_eq!(e.earliest_fit(100_000, 10), Some(120_000));
        assert_eq!(e.reservation(100_000, 10), Reservation { shadow: 120_000, extra: 0 });
        assert_eq!(e.run_held(7, 20_000, 200_000), Some(220_000));
        assert_eq!(e.run_held(7, 20_000, 200_000), None);
        assert_eq!(e.earliest_fit(100_000, 10), Some(220_000));
        assert_eq!(e.release(7, 220_000), Some(6));
        assert_eq!(e.free(), 10);
    }

    #[test]
    fn bad_snapshots_are_errors() {
        let s = snap(4, vec![run(3, 5_000), run(2, 5_000)], vec![]);
        assert_eq!(s.replay().unwrap_err(), SnapshotError::OverAllocated { held: 5, nodes: 4 });
        let s = snap(4, vec![], vec![queued(1, 5), queued(5, 5)]);
        assert!(matches!(
            s.replay(),
            Err(SnapshotError::QueuedTooLarge {
                index: 1,
                need: 5,
                nodes: 4
            })
        ));
        let s = snap(4, vec![], vec![queued(0, 5)]);
        assert!(matches!(s.replay(), Err(SnapshotError::QueuedEmpty { index: 0 })));
        // Huge values do not overflow.
        let s = Snapshot {
            now: Millis::MAX - 1,
            nodes: u32::MAX,
            running: vec![run(u32::MAX, Millis::MAX)],
            held: vec![],
            queued: vec![queued(u32::MAX, Millis::MAX)],
        };
        let mut r = s.replay().unwrap();
        assert_eq!(r.wait_ms(1, Millis::MAX), Some(1));
    }

    #[test]
    fn later_queries_read_the_state_at_their_time() {
        // Running A (6 nodes, expected end 11 s); queue H (8 nodes, 1 s). At 11 s H starts
        // (until 12 s).
        let s = snap(10, vec![run(6, 11_000)], vec![queued(8, 1_000)]);
        let mut r = s.replay().unwrap();
        // Asked at 5 s: a 6-node job waits for H's end at 12 s; a 4-node 1 s job starts now.
        assert_eq!(r.wait_ms_at(5_000, 6, 1_000), Some(7_000));
        assert_eq!(r.wait_ms_at(5_000, 4, 1_000), Some(0));
        // Asked at 11.5 s, H holds 8 nodes: a 3-node job waits until 12 s, a 2-node one not.
        assert_eq!(r.wait_ms_at(11_500, 3, 1_000), Some(500));
        assert_eq!(r.wait_ms_at(11_500, 2, 100_000), Some(0));
        // Asked after everything: free.
        assert_eq!(r.wait_ms_at(20_000, 10, 1), Some(0));
        // Before the start counts as the start.
        assert_eq!(r.wait_ms_at(0, 6, 1_000), Some(11_000));
    }
}
