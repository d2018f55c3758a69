//! The fluid model behind [`super::Network`]: the transfers in transit ([`Flow`]), their
//! link paths, max-min fair rates by progressive filling, and running the model forward
//! in 1 ms-quantised steps (see the parent module's "Timing" section).

use std::collections::VecDeque;

use super::{Millis, TransferId};

/// Remaining amounts below this many bits count as delivered.
const EPS_BITS: f64 = 1e-6;

/// Link indices crossed by a transfer: 1 for same-site copies, 3 otherwise.
#[derive(Debug, Clone, Copy)]
pub(super) struct Path {
    pub(super) ids: [usize; 3],
    pub(super) len: usize,
}

impl Path {
    pub(super) fn links(&self) -> &[usize] {
        &self.ids[..self.len]
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Flow {
    pub(super) id: u64,
    pub(super) bytes: u64,
    pub(super) links: Path,
    /// Time at which the latency phase ends and bits start to flow.
    pub(super) stream_at: Millis,
    pub(super) remaining_bits: f64,
    /// Current rate in bits per second (0 while in the latency phase).
    pub(super) rate: f64,
    /// The most this transfer can reach on its own (one TCP stream), bits per second;
    /// infinite when only the links limit it.
    pub(super) cap: f64,
}

/// Mutable part of the network state (cloned to look ahead).
#[derive(Debug, Clone)]
pub(super) struct Core {
    pub(super) now: Millis,
    /// Transfers in transit, sorted by id (ids are allocated increasingly).
    pub(super) flows: Vec<Flow>,
}

/// `ceil(x)` tolerating a relative error of `1e-9` (so `200000.0000000001`
/// rounds to `200000`), saturating at `u64::MAX`; `x` must be `>= 0`.
pub(super) fn ceil_ms(x: f64) -> Millis {
    let tol = 1e-9 * x.max(1.0);
    let c = (x - tol).ceil();
    if c <= 0.0 {
        0
    } else {
        // `as` saturates for values beyond u64::MAX (and maps NaN to 0,
        // which cannot occur for finite non-negative inputs).
        c as u64
    }
}

impl Core {
    /// Completion time of a streaming flow at `self.now` under its current rate.
    pub(super) fn finish_time(&self, f: &Flow) -> Option<Millis> {
        if f.stream_at > self.now {
            return None;
        }
        if f.remaining_bits <= EPS_BITS {
            return Some(self.now);
        }
        if f.rate <= 0.0 {
            return None;
        }
        Some(self.now.saturating_add(ceil_ms(f.remaining_bits * 1000.0 / f.rate)))
    }

    /// Recompute max-min fair rates of the flows streaming at `self.now`.
    pub(super) fn recompute_rates(&mut self, caps: &[f64]) {
        let now = self.now;
        let mut remaining: Vec<f64> = caps.to_vec();
        // Streaming flows (in id order) and, per link, the indices of those
        // crossing it; a negative rate marks a flow that is not frozen yet.
        let mut streaming: Vec<&mut Flow> = Vec::with_capacity(self.flows.len());
        let mut on_link: Vec<Vec<usize>> = vec![Vec::new(); caps.len()];
        let mut count: Vec<usize> = vec![0; caps.len()];
        for f in self.flows.iter_mut() {
            if f.stream_at <= now {
                f.rate = -1.0;
                for &l in f.links.links() {
                    on_link[l].push(streaming.len());
                    count[l] += 1;
                }
                streaming.push(f);
            } else {
                f.rate = 0.0;
            }
        }
        loop {
            // Bottleneck: smallest fair share, ties to the lowest link index.
            let mut best: Option<(usize, f64)> = None;
            for (l, &c) in count.iter().enumerate() {
                if c == 0 {
                    continue;
                }
                let share = remaining[l].max(0.0) / c as f64;
                match best {
                    Some((_, s)) if s <= share => {}
                    _ => best = Some((l, share)),
                }
            }
            // A flow's own cap is a private link: frozen at it when it is the smallest share
            // (ties to the lowest id).
            let capped = streaming
                .iter()
                .enumerate()
                .filter(|(_, f)| f.rate < 0.0 && f.cap.is_finite())
                .min_by(|a, b| a.1.cap.total_cmp(&b.1.cap))
                .map(|(k, f)| (k, f.cap));
            if let Some((k, cap)) = capped {
                if best.is_none_or(|(_, share)| cap <= share) {
                    let f = &mut streaming[k];
                    f.rate = cap;
                    for &l in f.links.links() {
                        remaining[l] -= cap;
                        count[l] -= 1;
                    }
                    continue;
                }
            }
            let Some((bottleneck, share)) = best else {
                break;
            };
            for &k in &on_link[bottleneck] {
                let f = &mut streaming[k];
                if f.rate >= 0.0 {
                    continue;
                }
                f.rate = share;
                for &l in f.links.links() {
                    remaining[l] -= share;
                    count[l] -= 1;
                }
            }
        }
    }

    /// Run the fluid model forward to `target`, pushing completions (in
    /// (time, id) order) onto `done`. With `stop_at_first`, stops right after
    /// the first instant at which something completes.
    pub(super) fn run(&mut self, caps: &[f64], target: Millis, done: &mut VecDeque<(Millis, TransferId, u64)>, stop_at_first: bool) {
        loop {
            let next_stream = self.flows.iter().filter(|f| f.stream_at > self.now).map(|f| f.stream_at).min();
            let finishing: Vec<Option<Millis>> = self.flows.iter().map(|f| self.finish_time(f)).collect();
            let next_finish = finishing.iter().flatten().min().copied();
            let t = match (next_stream, next_finish) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (None, None) => {
                    self.progress(target.max(self.now));
                    return;
                }
            };
            if t > target {
                self.progress(target.max(self.now));
                return;
            }
            self.progress(t);
            let before = done.len();
            let mut k = 0;
            self.flows.retain(|f| {
                let finished = finishing[k] == Some(t);
                k += 1;
                if finished {
                    done.push_back((t, TransferId(f.id), f.bytes));
                }
                !finished
            });
            let any_done = done.len() > before;
            self.recompute_rates(caps);
            if any_done && stop_at_first {
                return;
            }
        }
    }

    /// Deliver bits at the current rates from `self.now` to `t` (no rate
    /// change may happen strictly inside that interval).
    fn progress(&mut self, t: Millis) {
        if t <= self.now {
            return;
        }
        let secs = (t - self.now) as f64 / 1000.0;
        for f in self.flows.iter_mut() {
            if f.stream_at <= self.now && f.rate > 0.0 {
                f.remaining_bits = (f.remaining_bits - f.rate * secs).max(0.0);
            }
        }
        self.now = t;
    }
}
