//! Processors committed over time: a step function, the common ground of a site's reservation
//! table, the queue-wait estimate a driver publishes, and the simulated LRM's own planning.

use crate::model::Millis;

/// "Forever": the end of a commitment with no known end (a claim that may hold indefinitely).
pub const FOREVER: Millis = Millis::MAX;

/// Step function of committed processors from an origin time onwards.
///
/// `steps[i] = (t_i, used_i)`: `used_i` processors are committed during `[t_i, t_{i+1})`; the last
/// step extends forever. `steps[0].0` is the origin; times strictly increase. Times before the
/// origin read as the origin. Commitments may exceed the capacity (a driver may report an
/// over-committed site); [`Profile::fits`] then simply refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    cap: u64,
    steps: Vec<(Millis, u64)>,
}

impl Profile {
    /// Nothing committed from `origin` on.
    pub fn empty(capacity: u32, origin: Millis) -> Self {
        Profile {
            cap: u64::from(capacity),
            steps: vec![(origin, 0)],
        }
    }

    /// Builds the profile from `(start, end, procs)` commitments (`end == FOREVER`: forever),
    /// clipped to `[origin, ∞)`.
    pub fn build(capacity: u32, origin: Millis, items: impl IntoIterator<Item = (Millis, Millis, u32)>) -> Self {
        let mut base: i64 = 0;
        let mut deltas: Vec<(Millis, i64)> = Vec::new();
        for (start, end, procs) in items {
            let s = start.max(origin);
            if end <= s || procs == 0 {
                continue;
            }
            if s == origin {
                base += i64::from(procs);
            } else {
                deltas.push((s, i64::from(procs)));
            }
            if end != FOREVER {
                deltas.push((end, -i64::from(procs)));
            }
        }
        deltas.sort_unstable();
        let mut steps = Vec::with_capacity(deltas.len() + 1);
        steps.push((origin, base as u64));
        let mut cur = base;
        for (t, d) in deltas {
            cur += d;
            debug_assert!(cur >= 0);
            let last = steps.last_mut().expect("non-empty");
            if last.0 == t {
                last.1 = cur as u64;
            } else {
                steps.push((t, cur as u64));
            }
        }
        let mut p = Profile {
            cap: u64::from(capacity),
            steps,
        };
        p.coalesce();
        p
    }

    /// Processors of the site.
    pub fn capacity(&self) -> u64 {
        self.cap
    }

    /// The first instant described.
    pub fn origin(&self) -> Millis {
        self.steps[0].0
    }

    /// The steps `(t_i, used_i)`.
    pub fn steps(&self) -> &[(Millis, u64)] {
        &self.steps
    }

    /// Index of the step containing `t` (times before the origin read as the origin).
    pub fn index_at(&self, t: Millis) -> usize {
        self.steps.partition_point(|s| s.0 <= t).max(1) - 1
    }

    /// Committed processors at `t`.
    pub fn used_at(&self, t: Millis) -> u64 {
        self.steps[self.index_at(t)].1
    }

    /// Free processors at `t`.
    pub fn free_at(&self, t: Millis) -> u64 {
        self.cap.saturating_sub(self.used_at(t))
    }

    /// Maximum committed processors over `[from, to)` (0 for an empty window).
    pub fn max_used(&self, from: Millis, to: Millis) -> u64 {
        if to <= from {
            return 0;
        }
        let mut m = 0;
        for &(t, used) in &self.steps[self.index_at(from)..] {
            if t >= to {
                break;
            }
            m = m.max(used);
        }
        m
    }

    /// Whether `procs` more processors fit during `[from, to)`.
    pub fn fits(&self, from: Millis, to: Millis, procs: u32) -> bool {
        self.max_used(from, to) + u64::from(procs) <= self.cap
    }

    /// Makes `t` (not before the origin) a step boundary and returns the index of the step
    /// starting at `t`.
    pub fn split(&mut self, t: Millis) -> usize {
        let i = self.index_at(t);
        if self.steps[i].0 == t || t < self.steps[0].0 {
            i
        } else {
            let used = self.steps[i].1;
            self.steps.insert(i + 1, (t, used));
            i + 1
        }
    }

    /// Commits `procs` processors during `[from, to)` (`to == FOREVER`: forever), clipped to
    /// the origin.
    pub fn add(&mut self, from: Millis, to: Millis, procs: u32) {
        let from = from.max(self.origin());
        if to <= from || procs == 0 {
            return;
        }
        let i = self.split(from);
        let j = if to == FOREVER { self.steps.len() } else { self.split(to) };
        for s in &mut self.steps[i..j] {
            s.1 += u64::from(procs);
        }
    }

    /// Gives back `procs` processors committed during `[from, to)` (the inverse of
    /// [`Profile::add`]; saturates at zero) and merges steps that became equal.
    pub fn remove(&mut self, from: Millis, to: Millis, procs: u32) {
        let from = from.max(self.origin());
        if to <= from || procs == 0 {
            return;
        }
        let i = self.split(from);
        let j = if to == FOREVER { self.steps.len() } else { self.split(to) };
        for s in &mut self.steps[i..j] {
            debug_assert!(s.1 >= u64::from(procs), "removing more than was committed");
            s.1 = s.1.saturating_sub(u64::from(procs));
        }
        self.coalesce();
    }

    /// Merges neighbouring steps with the same value (keeps the origin).
    fn coalesce(&mut self) {
        self.steps.dedup_by(|later, earlier| later.1 == earlier.1);
    }

    /// The same commitments from `t` on (`t` becomes the origin; nothing changes for a `t`
    /// before the origin).
    pub fn since(&self, t: Millis) -> Profile {
        if t <= self.origin() {
            return self.clone();
        }
        let i = self.index_at(t);
        let mut steps = Vec::with_capacity(self.steps.len() - i);
        steps.push((t, self.steps[i].1));
        steps.extend_from_slice(&self.steps[i + 1..]);
        Profile { cap: self.cap, steps }
    }

    /// The pointwise sum of two profiles of the same capacity, from the earlier origin.
    pub fn sum(&self, other: &Profile) -> Profile {
        let mut out: Vec<(Millis, u64)> = Vec::with_capacity(self.steps.len() + other.steps.len());
        let (mut i, mut j) = (0, 0);
        let (a, b) = (&self.steps, &other.steps);
        let at = |s: &[(Millis, u64)], k: usize, t: Millis| if t < s[0].0 { 0 } else { s[k].1 };
        while i < a.len() || j < b.len() {
            let t = match (a.get(i), b.get(j)) {
                (Some(x), Some(y)) => x.0.min(y.0),
                (Some(x), None) => x.0,
                (None, Some(y)) => y.0,
                (None, None) => unreachable!(),
            };
            if a.get(i).is_some_and(|x| x.0 == t) {
                i += 1;
            }
            if b.get(j).is_some_and(|y| y.0 == t) {
                j += 1;
            }
            let v = at(a, i.max(1) - 1, t) + at(b, j.max(1) - 1, t);
            match out.last_mut() {
                Some(last) if last.1 == v => {}
                _ => out.push((t, v)),
            }
        }
        Profile {
            cap: self.cap.max(other.cap),
            steps: out,
        }
    }

    /// Earliest `t ≥ from` such that `procs` fit during `[t, t + dur)` (`dur` at least 1 ms);
    /// `None` when they never fit (more than the capacity, or commitments that hold forever).
    pub fn earliest_fit(&self, from: Millis, dur: Millis, procs: u32) -> Option<Millis> {
        if u64::from(procs) > self.cap {
            return None;
        }
        let dur = dur.max(1);
        let mut cand = from;
        for i in self.index_at(from)..self.steps.len() {
            let used = self.steps[i].1;
            let end = self.steps.get(i + 1).map_or(FOREVER, |s| s.0);
            if end <= cand {
                continue;
            }
            if used + u64::from(procs) > self.cap {
                if end == FOREVER {
                    return None;
                }
                cand = end;
            } else if end == FOREVER || end >= cand.saturating_add(dur) {
                return Some(cand);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_add_remove_and_fit() {
        let mut p = Profile::build(8, 0, [(0, 10, 4), (5, 20, 4), (30, FOREVER, 2)]);
        assert_eq!(p.steps(), &[(0, 4), (5, 8), (10, 4), (20, 0), (30, 2)]);
        assert_eq!(p.max_used(0, 10), 8);
        assert!(!p.fits(4, 6, 1));
        assert!(p.fits(10, 20, 4));
        // 4 processors for 10 ms: first at 10 (after the full step).
        assert_eq!(p.earliest_fit(0, 10, 4), Some(10));
        // 7 processors: only at 20, for at most 10 ms before the forever-commitment.
        assert_eq!(p.earliest_fit(0, 10, 7), Some(20));
        assert_eq!(p.earliest_fit(0, 11, 7), None);
        assert_eq!(p.earliest_fit(0, 1, 9), None);
        p.add(12, 15, 3);
        assert_eq!(p.used_at(13), 7);
        p.remove(12, 15, 3);
        assert_eq!(p.steps(), &[(0, 4), (5, 8), (10, 4), (20, 0), (30, 2)]);
    }

    #[test]
    fn since_moves_the_origin() {
        let p = Profile::build(8, 0, [(0, 10, 4), (5, 20, 4), (30, FOREVER, 2)]);
        let q = p.since(7);
        assert_eq!(q.steps(), &[(7, 8), (10, 4), (20, 0), (30, 2)]);
        assert_eq!(p.since(10).steps(), &[(10, 4), (20, 0), (30, 2)]);
        assert_eq!(p.since(0), p);
        for t in 7..40 {
            assert_eq!(q.used_at(t), p.used_at(t), "t={t}");
        }
    }

    #[test]
    fn sum_is_pointwise() {
        let a = Profile::build(8, 0, [(0, 10, 3), (20, 30, 1)]);
        let b = Profile::build(8, 5, [(5, 25, 2)]);
        let s = a.sum(&b);
        for t in [0, 4, 5, 9, 10, 19, 20, 24, 25, 29, 30, 100] {
            let bt = if t < 5 { 0 } else { b.used_at(t) };
            assert_eq!(s.used_at(t), a.used_at(t) + bt, "t={t}");
        }
    }
}
