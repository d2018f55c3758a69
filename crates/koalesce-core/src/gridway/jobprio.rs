//! GridWay's job priority policies (GridWay 5 `sched.conf` §1, `gw_scheduler_job_policies`):
//! the pending jobs are dispatched in the order of
//!
//! ```text
//! priority = W_fixed·FP + W_share·SH + W_deadline·DL + W_waiting·WT
//! ```
//!
//! each term normalized to [0, 1] over the pending jobs:
//! - **fixed** (FP): the job's fixed priority over the largest one. koalesce's four priorities
//!   map to GridWay's 0–20 range: super-low 0, low 5, high 10, super-high 20 — 20 is GridWay's
//!   "urgent" (gwadmin's) priority, dispatched before everything else whatever the weights;
//! - **waiting time** (WT): time since the job entered the queue, over the longest;
//! - **deadline** (DL): `100·e^(−Δ / (1.5·DL_HALF))` for a deadline Δ ahead, 100 once it has
//!   passed, 0 without one; over the largest (GridWay's constant 1.5 gives 51% at DL_HALF);
//! - **share** (SH): per owner, `max_share − ⌊k / share⌋` for the owner's k-th job counted
//!   after its recent dispatches (`Σ_i ⌊dispatched_i · e^(−i/3.5)⌋` over the history windows,
//!   newest first), in the order the other three terms give; over `max_share = max over owners
//!   ⌊(pending + past − 1) / share⌋`. An owner who dispatched less recently, or has a larger
//!   share, gets its next jobs first.
//!
//! Ties keep the order in which the jobs were queued.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::config::JobPriorityConfig;
use crate::model::{JobId, Millis, Priority};

/// GridWay's urgent fixed priority.
pub const URGENT: u32 = 20;

/// GridWay's fixed priority (0–20) of a koalesce priority.
pub fn fixed_priority(p: Priority) -> u32 {
    match p {
        Priority::SuperHigh => URGENT,
        Priority::High => 10,
        Priority::Low => 5,
        Priority::SuperLow => 0,
    }
}

/// Dispatches per owner in windows of `share_window_ms`, newest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ShareHistory {
    /// Start of the current (newest) window.
    current_start: Millis,
    windows: BTreeMap<String, VecDeque<u64>>,
}

impl ShareHistory {
    /// Moves the windows forward to `now`.
    fn advance(&mut self, now: Millis, c: &JobPriorityConfig) {
        let w = c.share_window_ms.max(1);
        if now < self.current_start + w {
            return;
        }
        let steps = (now - self.current_start) / w;
        self.current_start += steps * w;
        let depth = c.share_window_depth.max(1) as usize;
        for q in self.windows.values_mut() {
            for _ in 0..steps.min(depth as u64) {
                q.push_front(0);
            }
            q.truncate(depth);
        }
        self.windows.retain(|_, q| q.iter().any(|&n| n > 0));
    }

    /// A job of `owner` was dispatched (placed) at `now`.
    pub fn record(&mut self, now: Millis, owner: &str, c: &JobPriorityConfig) {
        self.advance(now, c);
        let q = self.windows.entry(owner.to_string()).or_default();
        if q.is_empty() {
            q.push_back(0);
        }
        q[0] += 1;
    }

    /// GridWay's "past jobs" of `owner` at `now`: `Σ_i ⌊n_i · e^(−i/3.5)⌋` over the windows,
    /// newest (i = 0) first.
    pub fn past_jobs(&self, now: Millis, owner: &str, c: &JobPriorityConfig) -> u64 {
        let w = c.share_window_ms.max(1);
        let shift = now.saturating_sub(self.current_start) / w;
        let depth = c.share_window_depth.max(1) as u64;
        self.windows.get(owner).map_or(0, |q| {
            q.iter()
                .enumerate()
                .map(|(i, &n)| (i as u64 + shift, n))
                .filter(|&(age, _)| age < depth)
                .map(|(age, n)| (n as f64 * (-(age as f64) / 3.5).exp()) as u64)
                .sum()
        })
    }
}

/// A pending job as the job policies see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending<'a> {
    pub id: JobId,
    pub priority: Priority,
    /// When it (last) entered the queue.
    pub queued_at: Millis,
    /// Absolute deadline, if any.
    pub deadline_at: Option<Millis>,
    pub owner: &'a str,
}

/// The terms of one job's priority, normalized, and the total.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobPriority {
    pub id: JobId,
    pub fixed: f64,
    pub waiting: f64,
    pub deadline: f64,
    pub share: f64,
    pub total: f64,
    pub urgent: bool,
}

/// GridWay's deadline term before normalization.
pub fn deadline_term(now: Millis, deadline_at: Option<Millis>, half_ms: Millis) -> f64 {
    match deadline_at {
        None => 0.0,
        Some(d) if d <= now => 100.0,
        Some(d) => (100.0 * (-((d - now) as f64) / (1.5 * half_ms as f64)).exp()).floor(),
    }
}

/// The dispatch order of `pending` (given in queue order) at `now`, highest priority first,
/// with every job's terms.
pub fn order(pending: &[Pending<'_>], now: Millis, c: &JobPriorityConfig, shares: &ShareHistory) -> Vec<JobPriority> {
    let fixed: Vec<u32> = pending.iter().map(|p| fixed_priority(p.priority)).collect();
    let waiting: Vec<Millis> = pending.iter().map(|p| now.saturating_sub(p.queued_at)).collect();
    let deadline: Vec<f64> = pending
        .iter()
        .map(|p| deadline_term(now, p.deadline_at, c.deadline_half_ms))
        .collect();
    let max_f = fixed.iter().copied().max().unwrap_or(0);
    let max_w = waiting.iter().copied().max().unwrap_or(0);
    let max_d = deadline.iter().copied().fold(0.0f64, f64::max);
    let norm = |x: f64, max: f64| if max > 0.0 { x / max } else { 0.0 };
    let mut out: Vec<JobPriority> = pending
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (f, w, d) = (
                norm(fixed[i] as f64, max_f as f64),
                norm(waiting[i] as f64, max_w as f64),
                norm(deadline[i], max_d),
            );
            JobPriority {
                id: p.id,
                fixed: f,
                waiting: w,
                deadline: d,
                share: 0.0,
                total: c.fixed * f + c.waiting * w + c.deadline * d,
                urgent: fixed[i] == URGENT,
            }
        })
        .collect();
    let owner_of: BTreeMap<JobId, &str> = pending.iter().map(|p| (p.id, p.owner)).collect();
    sort(&mut out);
    if c.share > 0.0 {
        let mut pending_of: BTreeMap<&str, u64> = BTreeMap::new();
        for p in pending {
            *pending_of.entry(p.owner).or_default() += 1;
        }
        let share_of = |o: &str| c.shares.get(o).copied().unwrap_or(c.default_share).max(1) as u64;
        let mut next: BTreeMap<&str, u64> = BTreeMap::new();
        let mut max_share = 0u64;
        for (&o, &n) in &pending_of {
            let past = shares.past_jobs(now, o, c);
            next.insert(o, past);
            max_share = max_share.max((n + past).saturating_sub(1) / share_of(o));
        }
        let max_share = max_share.max(1);
        for jp in &mut out {
            let o = owner_of[&jp.id];
            let k = next.get_mut(o).expect("every owner counted");
            let sh = max_share.saturating_sub(*k / share_of(o));
            *k += 1;
            jp.share = sh as f64 / max_share as f64;
            jp.total += c.share * jp.share;
        }
        sort(&mut out);
    }
    out
}

/// Urgent jobs first, then by total, highest first; ties keep their order.
fn sort(v: &mut [JobPriority]) {
    v.sort_by(|a, b| b.urgent.cmp(&a.urgent).then(b.total.total_cmp(&a.total)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u64, priority: Priority, queued_at: Millis, deadline_at: Option<Millis>, owner: &str) -> Pending<'_> {
        Pending {
            id: JobId(id),
            priority,
            queued_at,
            deadline_at,
            owner,
        }
    }

    fn ids(v: &[JobPriority]) -> Vec<u64> {
        v.iter().map(|j| j.id.0).collect()
    }

    const H: Millis = 3_600_000;

    #[test]
    fn weighted_sum_by_hand() {
        let c = JobPriorityConfig {
            waiting: 1.0,
            share: 0.0,
            ..Default::default()
        };
        let sh = ShareHistory::default();
        let now = 10 * H;
        let p = [
            job(1, Priority::Low, 0, None, "a"),                    // FP 5/10, WT 10h/10h
            job(2, Priority::High, 8 * H, Some(now + 24 * H), "a"), // FP 1, WT 0.2, DL: one day ahead
            job(3, Priority::High, 9 * H, Some(now - 1), "a"),      // FP 1, WT 0.1, DL passed: 100
        ];
        let o = order(&p, now, &c, &sh);
        // DL of job 2: floor(100·e^(−1/1.5)) = 51; normalized by 100.
        assert_eq!(deadline_term(now, Some(now + 24 * H), 24 * H), 51.0);
        let by_id = |id| *o.iter().find(|j| j.id == JobId(id)).unwrap();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(by_id(1).total, 0.5 + 1.0 + 0.0));
        assert!(close(by_id(2).total, 1.0 + 0.2 + 0.51));
        assert!(close(by_id(3).total, 1.0 + 0.1 + 1.0));
        assert_eq!(ids(&o), [3, 2, 1]);
    }

    #[test]
    fn urgent_jobs_come_first_whatever_the_weights() {
        let c = JobPriorityConfig {
            fixed: 0.0,
            waiting: 5.0,
            ..Default::default()
        };
        let sh = ShareHistory::default();
        let p = [job(1, Priority::High, 0, None, "a"), job(2, Priority::SuperHigh, 100, None, "a")];
        assert_eq!(ids(&order(&p, 100, &c, &sh)), [2, 1]);
    }

    #[test]
    fn share_favours_the_owner_with_fewer_recent_dispatches() {
        // Only the share term; shares of 1 make every job of an owner one level lower.
        let c = JobPriorityConfig {
            fixed: 0.0,
            deadline: 0.0,
            default_share: 1,
            ..Default::default()
        };
        let mut sh = ShareHistory::default();
        // "a" dispatched 3 jobs earlier today, "b" none; both have 2 pending (a's queued first).
        for _ in 0..3 {
            sh.record(1_000, "a", &c);
        }
        let p = [
            job(1, Priority::High, 0, None, "a"),
            job(2, Priority::High, 0, None, "a"),
            job(3, Priority::High, 0, None, "b"),
            job(4, Priority::High, 0, None, "b"),
        ];
        let o = order(&p, 2_000, &c, &sh);
        // past(a) = 3: a's jobs are its 4th and 5th (k = 3, 4); b's are k = 0, 1.
        // max_share = max(⌊(2+3−1)/1⌋, ⌊(2−1)/1⌋) = 4: SH = 4−3 = 1, 0 for a; 4, 3 for b.
        assert_eq!(ids(&o), [3, 4, 1, 2]);
        let s: Vec<f64> = o.iter().map(|j| j.share).collect();
        assert_eq!(s, [1.0, 0.75, 0.25, 0.0]);
        // A day later the dispatches are one window back: ⌊3·e^(−1/3.5)⌋ = 2.
        assert_eq!(sh.past_jobs(86_400_000 + 2_000, "a", &c), 2);
        // Five windows later they are forgotten.
        assert_eq!(sh.past_jobs(6 * 86_400_000, "a", &c), 0);
        // A larger share lets an owner's jobs stay level longer.
        let c2 = JobPriorityConfig {
            shares: [("a".to_string(), 10)].into_iter().collect(),
            ..c.clone()
        };
        let o = order(&p, 0, &c2, &ShareHistory::default());
        assert_eq!(ids(&o), [1, 2, 3, 4]);
    }
}
