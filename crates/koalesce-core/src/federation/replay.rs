//! The AWT replay: the local scheduler ([`Easy`]) simulated forward from a snapshot, every job
//! ending at its expected end (see the [`easy`](super::easy) module docs for why one replay
//! answers AWT queries for any job appended to the queue).
//!
//! **Carrying a replay across appends.** A job queued later, at time a, changes nothing in the
//! replay before the first pass at which it starts or becomes the head (it joins the tail; EASY
//! reserves for the head only, and a job behind the head that does not start leaves everything
//! as it was). [`Replay::append`] therefore keeps every pass simulated so far up to that one,
//! undoes the passes after it (each pass logs what it released and started), adds the job to
//! the backfill index and lets the replay go on from there. The result is exactly the replay
//! of the scheduler run from the snapshot with the job joining the queue at a (a pass at a
//! included), whatever had been simulated before: the property test `appended_jobs_join_at_
//! their_time` checks it against a direct simulation, warm or cold.

use std::collections::BTreeMap;

use super::backfill::BackfillIndex;
use super::easy::{Easy, Reservation, Waiting};
use crate::model::Millis;

/// A queued job inside a replay.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Item {
    pub(crate) key: u64,
    pub(crate) nodes: u32,
    pub(crate) estimate: Millis,
}

impl Waiting for Item {
    fn key(&self) -> u64 {
        self.key
    }
    fn nodes(&self) -> u32 {
        self.nodes
    }
    fn estimate_ms(&self) -> Millis {
        self.estimate
    }
}

/// The state after one scheduling pass of a replay.
#[derive(Debug, Clone, Copy)]
struct Pass {
    at: Millis,
    free: u32,
    /// `None`: nothing left in the queue, so a newcomer is the head.
    reservation: Option<Reservation>,
}

impl Pass {
    /// Whether a newcomer of `nodes` nodes and estimate `estimate` starts at this pass, at `t`.
    fn starts(&self, t: Millis, nodes: u32, estimate: Millis) -> bool {
        nodes <= self.free
            && match self.reservation {
                None => true,
                Some(r) => t.saturating_add(estimate) <= r.shadow || nodes <= r.extra,
            }
    }
}

/// What a pass changed, so that it can be undone.
#[derive(Debug, Clone, Copy)]
enum Undo {
    /// The jobs expected to end at this time released these nodes.
    Released(Millis, u32),
    /// The queued job at this position started, expected to end at this time.
    Began(usize, Millis),
}

/// The replay's state before a pass (with the log's length then).
#[derive(Debug, Clone, Copy)]
struct Mark {
    log: usize,
    head: usize,
    cached: Option<(usize, Reservation)>,
}

/// The answer to a bounded AWT query ([`Replay::wait_within`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The job would start after this many milliseconds.
    At(Millis),
    /// Not within the cutoff (or never: the server has fewer nodes than the job needs).
    Beyond,
}

/// The local scheduler simulated forward from a snapshot, every job ending at its expected end;
/// answers AWT queries for any job appended to the queue (see the module docs). It is lazy: it
/// simulates only as many passes as the queries so far needed, so a query for a job that starts
/// soon, or one bounded by a cutoff, costs little even behind a long queue.
///
/// It is [`Easy::schedule`] pass after pass (the property test `replay_awt_equals_direct_
/// simulation` checks it against that), organised to cost far less than a sweep of the queue
/// per pass: the head's reservation is computed once per head, because with every job ending at
/// its expected end neither releases nor backfilled starts move it (a release before S moves
/// nodes from "free at S" to "free now"; a backfilled job either ends by S or takes extra
/// nodes, which the reservation already accounts for), and the next job that could backfill is
/// found in an index over the queue (`backfill.rs`).
#[derive(Debug, Clone)]
pub struct Replay {
    now: Millis,
    total: u32,
    passes: Vec<Pass>,
    /// The state before each pass, and what the passes did (to undo them, [`Replay::append`]).
    marks: Vec<Mark>,
    log: Vec<Undo>,
    items: Vec<Item>,
    /// Jobs holding nodes, aggregated by expected end (keys do not matter in a replay).
    ends: BTreeMap<Millis, u32>,
    free: u32,
    tree: BackfillIndex,
    head: usize,
    cached: Option<(usize, Reservation)>,
    /// When the next pass happens; `None` once everything has ended.
    next: Option<Millis>,
}

impl Replay {
    /// Replays `easy` (running jobs) with `queue` (in queue order) from `now`. Expected ends
    /// before `now` count as `now`.
    pub fn new<'a, J: Waiting + 'a>(now: Millis, easy: &Easy, queue: impl IntoIterator<Item = &'a J>) -> Replay {
        let items: Vec<Item> = queue
            .into_iter()
            .map(|j| Item {
                key: j.key(),
                nodes: j.nodes(),
                estimate: j.estimate_ms(),
            })
            .collect();
        let mut ends: BTreeMap<Millis, u32> = BTreeMap::new();
        for (end, _, n) in easy.running_jobs(now) {
            *ends.entry(end).or_insert(0) += n;
        }
        let tree = BackfillIndex::new(&items, |it| (it.nodes, it.estimate));
        Replay {
            now,
            total: easy.total(),
            passes: Vec::new(),
            marks: Vec::new(),
            log: Vec::new(),
            items,
            ends,
            free: easy.free(),
            tree,
            head: 0,
            cached: None,
            next: Some(now),
        }
    }

    /// Simulates the next pass; `false` when there is none (everything has ended).
    fn step(&mut self) -> bool {
        let Some(t) = self.next else { return false };
        self.marks.push(Mark {
            log: self.log.len(),
            head: self.head,
            cached: self.cached,
        });
        while let Some(e) = self.ends.first_entry() {
            if *e.key() > t {
                break;
            }
            let end = *e.key();
            let n = e.remove();
            self.free += n;
            self.log.push(Undo::Released(end, n));
        }
        // FCFS.
        while self.head < self.items.len() && self.items[self.head].nodes <= self.free {
            let it = self.items[self.head];
            self.begin(t, self.head, it);
            while self.head < self.items.len() && !self.tree.is_live(self.head) {
                self.head += 1;
            }
        }
        let reservation = if self.head < self.items.len() {
            let mut r = match self.cached {
                Some((h, r)) if h == self.head => r,
                _ => reservation_of(&self.ends, self.free, self.items[self.head].nodes, t),
            };
            // EASY backfilling behind the head.
            let mut from = self.head + 1;
            while self.free > 0 {
                let slack = r.shadow.saturating_sub(t);
                let Some(p) = self.tree.find(from, self.free, r.extra, slack) else {
                    break;
                };
                let it = self.items[p];
                if it.estimate > slack {
                    r.extra -= it.nodes;
                }
                self.begin(t, p, it);
                from = p + 1;
            }
            self.cached = Some((self.head, r));
            Some(r)
        } else {
            None
        };
        self.passes.push(Pass {
            at: t,
            free: self.free,
            reservation,
        });
        self.next = self.ends.keys().next().map(|&end| end.max(t));
        true
    }

    fn begin(&mut self, t: Millis, index: usize, it: Item) {
        let end = t.saturating_add(it.estimate);
        self.free -= it.nodes;
        *self.ends.entry(end).or_insert(0) += it.nodes;
        self.tree.remove(index);
        self.log.push(Undo::Began(index, end));
    }

    /// Undoes the passes from the `m`-th on: the replay is as before that pass.
    fn rollback(&mut self, m: usize) {
        if m >= self.passes.len() {
            return;
        }
        let mark = self.marks[m];
        while self.log.len() > mark.log {
            match self.log.pop().expect("longer than the mark") {
                Undo::Released(end, n) => {
                    self.free -= n;
                    *self.ends.entry(end).or_insert(0) += n;
                }
                Undo::Began(p, end) => {
                    let it = self.items[p];
                    self.free += it.nodes;
                    if let Some(c) = self.ends.get_mut(&end) {
                        *c -= it.nodes;
                        if *c == 0 {
                            self.ends.remove(&end);
                        }
                    }
                    self.tree.restore(p, it.nodes, it.estimate);
                }
            }
        }
        self.head = mark.head;
        self.cached = mark.cached;
        self.next = Some(self.passes[m].at);
        self.passes.truncate(m);
        self.marks.truncate(m);
    }

    /// A job of `nodes` nodes and estimate `estimate_ms` joins the tail of the queue at time
    /// `at` (≥ the replay's start and every earlier append; a pass happens at `at`). Later
    /// queries see it queued, or started where the scheduler would start it; the passes before
    /// it starts are kept (see the module docs).
    pub fn append(&mut self, at: Millis, nodes: u32, estimate_ms: Millis) {
        let at = at.max(self.now);
        while self.next.is_some_and(|t| t <= at) {
            self.step();
        }
        // The state at `at` is the one after the last pass at or before it. The job first
        // matters at the first pass from there at which it starts, or finds the queue ahead of
        // it empty (then, as the head, it gets the reservation); the pass at `at` itself for
        // the state at `at`.
        let i = self.passes.partition_point(|p| p.at <= at).saturating_sub(1);
        let first = (i..self.passes.len()).find(|&k| {
            let p = self.passes[k];
            p.reservation.is_none() || p.starts(p.at.max(at), nodes, estimate_ms)
        });
        let item = Item {
            key: self.items.len() as u64,
            nodes,
            estimate: estimate_ms,
        };
        match first {
            Some(k) if k == i => {
                // It starts at once: a pass at `at` (the state after pass i, no end between).
                self.rollback(i + 1);
                self.push(item);
                self.next = Some(at);
                self.step();
            }
            Some(k) => {
                self.rollback(k);
                self.push(item);
            }
            None => self.push(item),
        }
    }

    fn push(&mut self, item: Item) {
        self.items.push(item);
        self.tree.push(item.nodes, item.estimate);
    }

    /// Simulates every remaining pass.
    pub fn finish(&mut self) {
        while self.step() {}
    }

    /// The time the replay starts from.
    pub fn now(&self) -> Millis {
        self.now
    }

    /// Number of scheduling passes simulated so far.
    pub fn passes(&self) -> usize {
        self.passes.len()
    }

    /// AWT of a job of `nodes` nodes and run time estimate `estimate_ms` appended to the queue
    /// now: `None` (infinity) if the server has fewer nodes.
    pub fn wait_ms(&mut self, nodes: u32, estimate_ms: Millis) -> Option<Millis> {
        self.wait_ms_at(self.now, nodes, estimate_ms)
    }

    /// Like [`Replay::wait_ms`] for a job appended at a time `at` ≥ the replay's start, nothing
    /// having happened on the server since: the replay's own state at `at` (after its last pass
    /// at or before `at`) is the server's. A driver can thus keep one replay per server state,
    /// made when the state began, and ask it at any later time: the answers depend on the state
    /// alone, not on when or how often it was asked.
    pub fn wait_ms_at(&mut self, at: Millis, nodes: u32, estimate_ms: Millis) -> Option<Millis> {
        match self.wait_within(at, nodes, estimate_ms, Millis::MAX) {
            Wait::At(w) => Some(w),
            Wait::Beyond => None,
        }
    }

    /// The AWT at time `at` (≥ the replay's start, see [`Replay::wait_ms_at`]) if it is at most
    /// `cutoff`, else [`Wait::Beyond`]; simulates no pass later than `at + cutoff`.
    pub fn wait_within(&mut self, at: Millis, nodes: u32, estimate_ms: Millis, cutoff: Millis) -> Wait {
        if nodes > self.total {
            return Wait::Beyond;
        }
        let at = at.max(self.now);
        while self.next.is_some_and(|t| t <= at) {
            self.step();
        }
        // The state at `at` is the one after the last pass at or before it.
        let mut i = self.passes.partition_point(|p| p.at <= at).saturating_sub(1);
        loop {
            if i == self.passes.len() && !self.step() {
                return Wait::Beyond;
            }
            let p = self.passes[i];
            let t = p.at.max(at);
            if t - at > cutoff {
                return Wait::Beyond;
            }
            if p.starts(t, nodes, estimate_ms) {
                return Wait::At(t - at);
            }
            i += 1;
        }
    }
}

/// The head's reservation from aggregated expected ends (see [`Easy::reservation`]).
fn reservation_of(ends: &BTreeMap<Millis, u32>, free: u32, need: u32, now: Millis) -> Reservation {
    let mut avail = free;
    for (&end, &n) in ends {
        avail += n;
        if avail >= need {
            return Reservation {
                shadow: end.max(now),
                extra: avail - need,
            };
        }
    }
    Reservation {
        shadow: Millis::MAX,
        extra: 0,
    }
}
