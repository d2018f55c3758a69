//! The availability profile: a step function of committed processors over time (see the
//! module docs of [`super`]).

use super::{LocalRm, Millis, NEVER};

/// Step function of committed processors from an origin time onwards.
///
/// `steps[i] = (t_i, used_i)`: `used_i` processors are committed during `[t_i, t_{i+1})`; the last
/// step extends forever. `steps[0].0` is the origin; times strictly increase.
#[derive(Clone, Debug)]
pub(super) struct Profile {
    pub(super) cap: u64,
    pub(super) steps: Vec<(Millis, u64)>,
}

impl Profile {
    /// Builds the profile from `(start, end, procs)` intervals, clipped to `[origin, ∞)`.
    pub(super) fn build(cap: u32, origin: Millis, items: impl IntoIterator<Item = (Millis, Millis, u32)>) -> Self {
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
            if end != NEVER {
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
        Profile {
            cap: u64::from(cap),
            steps,
        }
    }

    /// Index of the step containing `t` (`t` ≥ origin).
    pub(super) fn index_at(&self, t: Millis) -> usize {
        self.steps.partition_point(|s| s.0 <= t).max(1) - 1
    }

    /// Committed processors at `t`.
    pub(super) fn used_at(&self, t: Millis) -> u64 {
        self.steps[self.index_at(t)].1
    }

    /// Free processors at `t`.
    pub(super) fn free_at(&self, t: Millis) -> u64 {
        self.cap.saturating_sub(self.used_at(t))
    }

    /// Maximum committed processors over `[from, to)` (0 for an empty window).
    pub(super) fn max_used(&self, from: Millis, to: Millis) -> u64 {
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
    pub(super) fn fits(&self, from: Millis, to: Millis, procs: u32) -> bool {
        self.max_used(from, to) + u64::from(procs) <= self.cap
    }

    /// Makes `t` a step boundary and returns the index of the step starting at `t`.
    pub(super) fn split(&mut self, t: Millis) -> usize {
        let i = self.index_at(t);
        if self.steps[i].0 == t {
            i
        } else {
            let used = self.steps[i].1;
            self.steps.insert(i + 1, (t, used));
            i + 1
        }
    }

    /// Commits `procs` processors during `[from, to)` (`to == NEVER`: forever).
    pub(super) fn add(&mut self, from: Millis, to: Millis, procs: u32) {
        if to <= from || procs == 0 {
            return;
        }
        let i = self.split(from);
        let j = if to == NEVER { self.steps.len() } else { self.split(to) };
        for s in &mut self.steps[i..j] {
            s.1 += u64::from(procs);
        }
    }

    /// Earliest `t ≥ from` such that `procs` fit during `[t, t + dur)` (`dur` at least 1 ms).
    pub(super) fn earliest_fit(&self, from: Millis, dur: Millis, procs: u32) -> Option<Millis> {
        if u64::from(procs) > self.cap {
            return None;
        }
        let dur = dur.max(1);
        let mut cand = from;
        for i in self.index_at(from)..self.steps.len() {
            let used = self.steps[i].1;
            let end = self.steps.get(i + 1).map_or(NEVER, |s| s.0);
            if end <= cand {
                continue;
            }
            if used + u64::from(procs) > self.cap {
                if end == NEVER {
                    return None;
                }
                cand = end;
            } else if end == NEVER || end >= cand.saturating_add(dur) {
                return Some(cand);
            }
        }
        None
    }
}

impl LocalRm {
    /// The committed-processor profile from `now` (see the module docs).
    pub(super) fn profile(&self, now: Millis) -> Profile {
        let jobs = self.running.iter().map(|&(_, id)| {
            let r = &self.jobs[id.0 as usize];
            let start = r.start_ms.expect("running job has a start");
            let est_end = (start + r.estimate_ms).max(now + 1);
            (start, est_end, r.procs)
        });
        let claims = self.claims.values().map(|c| {
            let end = match c.reservation_end {
                Some(e) if e > now => e,
                _ => NEVER,
            };
            (c.since, end, c.procs)
        });
        let res = self.reservations.values().map(|r| (r.start, r.end, r.procs));
        Profile::build(self.cfg.procs, now, jobs.chain(claims).chain(res))
    }
}
