//! An index over the queue of an AWT replay that finds the next job able to backfill without
//! looking at the jobs that cannot.
//!
//! At a pass at time t with the head blocked (shadow S, extra X) and F nodes free, a job behind
//! the head backfills when nodes ≤ F and (estimate ≤ S − t or nodes ≤ X). Both halves are
//! answered exactly:
//!
//! * nodes ≤ min(F, X): a tree of minimum nodes over queue positions;
//! * nodes ≤ F and estimate ≤ S − t: per class of node counts (each count from 1 to 16 its own
//!   class, then (16, 32], (32, 64], …), a tree of minimum estimates over the class's positions.
//!   Classes entirely within F are searched exactly; in the one class that straddles F the jobs
//!   found are checked one by one (only jobs larger than 16 nodes can be passed over there).
//!
//! Each search costs O(log queue) per class, instead of a sweep of the queue (or a combined tree
//! whose two minima may come from different jobs, which degenerates to a sweep on long mixed
//! queues).

use crate::model::Millis;

/// Minima over positions, removable; `u64::MAX` marks a removed or absent entry.
#[derive(Debug, Clone)]
struct MinSeg {
    size: usize,
    v: Vec<u64>,
}

impl MinSeg {
    /// Over `len` values (no intermediate vector: the leaves are written in place).
    fn new(len: usize, values: impl Iterator<Item = u64>) -> MinSeg {
        let size = len.next_power_of_two().max(1);
        let mut v = vec![u64::MAX; 2 * size];
        for (slot, x) in v[size..size + len].iter_mut().zip(values) {
            *slot = x;
        }
        for i in (1..size).rev() {
            v[i] = v[2 * i].min(v[2 * i + 1]);
        }
        MinSeg { size, v }
    }

    fn remove(&mut self, i: usize) {
        self.set(i, u64::MAX);
    }

    /// Sets the value at `i` (< the capacity), e.g. back to what it was before a removal.
    fn set(&mut self, i: usize, x: u64) {
        let mut k = self.size + i;
        self.v[k] = x;
        while k > 1 {
            k /= 2;
            let m = self.v[2 * k].min(self.v[2 * k + 1]);
            if self.v[k] == m {
                // Unchanged here, so unchanged above.
                break;
            }
            self.v[k] = m;
        }
    }

    /// Sets the value at `i`, doubling the capacity first if `i` is beyond it.
    fn push(&mut self, i: usize, x: u64) {
        while i >= self.size {
            let size = self.size * 2;
            let mut v = vec![u64::MAX; 2 * size];
            v[size..size + self.size].copy_from_slice(&self.v[self.size..]);
            for k in (1..size).rev() {
                v[k] = v[2 * k].min(v[2 * k + 1]);
            }
            *self = MinSeg { size, v };
        }
        self.set(i, x);
    }

    fn value(&self, i: usize) -> u64 {
        self.v[self.size + i]
    }

    /// First index at or after `from` whose value is ≤ `limit` (removed entries never match).
    ///
    /// Bottom-up: from the leaf at `from`, climb while the subtree right of the path holds no
    /// match, then descend into the first subtree that does: O(log n) without recursion, and
    /// without visiting the subtrees left of `from`.
    fn first_le(&self, from: usize, limit: u64) -> Option<usize> {
        if from >= self.size {
            return None;
        }
        // u64::MAX marks removed entries: they never match.
        let limit = limit.min(u64::MAX - 1);
        let v = &self.v;
        if v[1] > limit {
            return None;
        }
        let mut k = self.size + from;
        while v[k] > limit {
            // The next subtree to the right: climb while k is a right child.
            while k & 1 == 1 {
                k >>= 1;
                if k <= 1 {
                    return None;
                }
            }
            k += 1;
        }
        while k < self.size {
            k *= 2;
            if v[k] > limit {
                k += 1;
            }
        }
        Some(k - self.size)
    }
}

/// The class of a node count: 1..=16 exactly, then one class per power of two.
fn class_key(nodes: u32) -> u32 {
    if nodes <= 16 {
        nodes
    } else {
        16 + (32 - (nodes - 1).leading_zeros()) - 4
    }
}

/// Smallest and largest node count of a class.
fn class_range(key: u32) -> (u32, u32) {
    if key <= 16 {
        (key, key)
    } else {
        let bits = key - 12;
        ((1u32 << (bits - 1)) + 1, if bits >= 32 { u32::MAX } else { 1u32 << bits })
    }
}

#[derive(Debug, Clone)]
struct Class {
    lo: u32,
    hi: u32,
    /// Queue positions of the class's jobs, ascending.
    members: Vec<usize>,
    /// Minimum estimate over `members`.
    est: MinSeg,
    /// The last search: (from, first member index at or after it). Searches mostly move forward
    /// (the head advances, and within a pass `from` grows), so the next one gallops from here.
    cursor: (usize, usize),
}

impl Class {
    fn new(key: u32, members: Vec<usize>, est: MinSeg) -> Class {
        let (lo, hi) = class_range(key);
        Class {
            lo,
            hi,
            members,
            est,
            cursor: (0, 0),
        }
    }

    /// Index of the first member at or after position `from`.
    fn first_member_from(&mut self, from: usize) -> usize {
        let (last_from, last) = self.cursor;
        let m = &self.members;
        let idx = if from >= last_from {
            // Gallop forward from the last answer.
            let mut step = 1;
            let mut lo = last;
            while lo + step < m.len() && m[lo + step] < from {
                lo += step;
                step *= 2;
            }
            let hi = (lo + step + 1).min(m.len());
            lo + m[lo..hi].partition_point(|&p| p < from)
        } else {
            m.partition_point(|&p| p < from)
        };
        self.cursor = (from, idx);
        idx
    }
}

/// See the module docs.
#[derive(Debug, Clone)]
pub(crate) struct BackfillIndex {
    live: Vec<bool>,
    nodes: MinSeg,
    /// By ascending class key.
    classes: Vec<Class>,
    /// Index in `classes` of each class key present.
    class_at: [u8; 64],
    /// Class key and member index of each position.
    place: Vec<(u8, u32)>,
}

impl BackfillIndex {
    /// An index over `jobs` in queue order, `size` giving each one's (nodes, estimate).
    pub(crate) fn new<T>(jobs: &[T], size: impl Fn(&T) -> (u32, Millis)) -> BackfillIndex {
        // The keys present, ascending, and each key's class index (no sort: keys are < 64).
        let mut count = [0usize; 64];
        for j in jobs {
            count[class_key(size(j).0) as usize] += 1;
        }
        let keys: Vec<u32> = (0..64u32).filter(|&k| count[k as usize] > 0).collect();
        let mut class_at = [u8::MAX; 64];
        for (c, &k) in keys.iter().enumerate() {
            class_at[k as usize] = c as u8;
        }
        let mut members: Vec<Vec<usize>> = keys.iter().map(|&k| Vec::with_capacity(count[k as usize])).collect();
        let mut place = Vec::with_capacity(jobs.len());
        for (p, j) in jobs.iter().enumerate() {
            let key = class_key(size(j).0);
            let c = class_at[key as usize] as usize;
            place.push((key as u8, members[c].len() as u32));
            members[c].push(p);
        }
        let classes = keys
            .iter()
            .zip(members)
            .map(|(&key, members)| {
                // u64::MAX marks removed entries: an estimate that long counts one ms shorter.
                let est = MinSeg::new(members.len(), members.iter().map(|&p| size(&jobs[p]).1.min(u64::MAX - 1)));
                Class::new(key, members, est)
            })
            .collect();
        BackfillIndex {
            live: vec![true; jobs.len()],
            nodes: MinSeg::new(jobs.len(), jobs.iter().map(|j| u64::from(size(j).0))),
            classes,
            class_at,
            place,
        }
    }

    /// Appends a job of `nodes` nodes and estimate `estimate` at the next position.
    pub(crate) fn push(&mut self, nodes: u32, estimate: Millis) {
        let p = self.live.len();
        self.live.push(true);
        self.nodes.push(p, u64::from(nodes));
        let key = class_key(nodes);
        if self.class_at[key as usize] == u8::MAX {
            let c = self.classes.partition_point(|cl| class_key(cl.lo) < key);
            self.classes
                .insert(c, Class::new(key, Vec::new(), MinSeg::new(0, std::iter::empty())));
            for (i, cl) in self.classes.iter().enumerate() {
                self.class_at[class_key(cl.lo) as usize] = i as u8;
            }
        }
        let class = &mut self.classes[self.class_at[key as usize] as usize];
        let m = class.members.len();
        class.members.push(p);
        class.est.push(m, estimate.min(u64::MAX - 1));
        self.place.push((key as u8, m as u32));
    }

    pub(crate) fn is_live(&self, p: usize) -> bool {
        self.live.get(p).copied().unwrap_or(false)
    }

    pub(crate) fn remove(&mut self, p: usize) {
        if !self.is_live(p) {
            return;
        }
        self.live[p] = false;
        self.nodes.remove(p);
        let (key, m) = self.place[p];
        self.classes[self.class_at[key as usize] as usize].est.remove(m as usize);
    }

    /// Puts back the job at position `p` (removed before), whose size is (`nodes`, `estimate`).
    pub(crate) fn restore(&mut self, p: usize, nodes: u32, estimate: Millis) {
        if self.live.get(p).is_none_or(|&l| l) {
            return;
        }
        self.live[p] = true;
        self.nodes.set(p, u64::from(nodes));
        let (key, m) = self.place[p];
        self.classes[self.class_at[key as usize] as usize]
            .est
            .set(m as usize, estimate.min(u64::MAX - 1));
    }

    /// First live position ≥ `from` whose job has nodes ≤ `free` and (estimate ≤ `slack` or
    /// nodes ≤ `extra`).
    pub(crate) fn find(&mut self, from: usize, free: u32, extra: u32, slack: Millis) -> Option<usize> {
        let mut best = self.nodes.first_le(from, u64::from(free.min(extra)));
        for class in &mut self.classes {
            if class.lo > free {
                break;
            }
            // No job of the class ends by the shadow, or none before the best found so far.
            if class.est.v[1] > slack || class.members.first().is_none_or(|&p| best.is_some_and(|b| p >= b)) {
                continue;
            }
            let mut m = class.first_member_from(from);
            while let Some(i) = class.est.first_le(m, slack) {
                let p = class.members[i];
                if best.is_some_and(|b| p >= b) {
                    break;
                }
                if class.hi <= free || self.nodes.value(p) <= u64::from(free) {
                    best = Some(p);
                    break;
                }
                m = i + 1;
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute(jobs: &[(u32, Millis)], live: &[bool], from: usize, free: u32, extra: u32, slack: Millis) -> Option<usize> {
        (from..jobs.len()).find(|&p| live[p] && jobs[p].0 <= free && (jobs[p].1 <= slack || jobs[p].0 <= extra))
    }

    #[test]
    fn classes_cover_every_count_once() {
        for n in 1..5_000u32 {
            let (lo, hi) = class_range(class_key(n));
            assert!(lo <= n && n <= hi, "{n}: [{lo}, {hi}]");
        }
        assert_eq!(class_range(class_key(17)), (17, 32));
        assert_eq!(class_range(class_key(32)), (17, 32));
        assert_eq!(class_range(class_key(33)), (33, 64));
        let (lo, hi) = class_range(class_key(u32::MAX));
        assert!(lo > 1 << 30 && hi == u32::MAX);
    }

    #[test]
    fn matches_a_sweep() {
        // A deterministic pseudo-random queue and many queries, with removals, restorations
        // and appends.
        let mut x = 12345u64;
        let mut next = |m: u64| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        for _ in 0..20 {
            let n = 1 + next(300) as usize;
            let mut jobs: Vec<(u32, Millis)> = (0..n).map(|_| (1 + next(80) as u32, 1 + next(1_000))).collect();
            let mut idx = BackfillIndex::new(&jobs, |&j| j);
            let mut from = 0;
            let mut live = vec![true; n];
            for _ in 0..400 {
                // Mostly forward searches, as in a replay, now and then a jump back.
                let n = jobs.len();
                from = if next(5) == 0 {
                    next(n as u64) as usize
                } else {
                    (from + next(20) as usize).min(n)
                };
                let (free, extra, slack) = (next(90) as u32, next(90) as u32, next(1_100));
                assert_eq!(idx.find(from, free, extra, slack), brute(&jobs, &live, from, free, extra, slack));
                match next(6) {
                    0 | 1 => {
                        let p = next(jobs.len() as u64) as usize;
                        idx.remove(p);
                        live[p] = false;
                    }
                    2 => {
                        // Put a removed job back (a replay undoing a pass).
                        let p = next(jobs.len() as u64) as usize;
                        idx.restore(p, jobs[p].0, jobs[p].1);
                        live[p] = true;
                    }
                    3 => {
                        // A job joins the tail (sizes new classes may hold too).
                        let job = (1 + next(200) as u32, 1 + next(1_000));
                        idx.push(job.0, job.1);
                        jobs.push(job);
                        live.push(true);
                    }
                    _ => {}
                }
            }
        }
    }
}
