//! The resource priority of 004 Eq. 1 and the usage history it reads.
//!
//! ```text
//! P = W_usage·(W_hist·P_hist + (1 − W_hist)·P_current) + W_fixed·P_fixed + W_rank·P_rank
//! ```
//!
//! Every term is normalized over the candidate sites of one placement, as GridWay 5 does
//! (`gw_scheduler_host_policies`):
//! - `P_fixed = fixed / max fixed` (the administrator's priority of the site, 1–99);
//! - `P_rank = rank / max rank` for a positive rank, `−rank / min rank` for a negative one
//!   (so in [−1, 1]), 0 for a rank of 0;
//! - `P_hist = min T_hist / T_hist` and `P_current = min T_last / T_last`, where `T_hist` is
//!   the mean time of the jobs that ended at the site within the usage window and `T_last` the
//!   time of the last one (transfer + wait + execution, GridWay's "estimated execution time").
//!   Faster sites score higher; a site with no record scores as the slowest one with a record
//!   (`min / max`), or 0 when no candidate has one.
//!
//! GridWay combines T_hist and T_last before normalizing (`T = (1−w)·T_hist + w·T_last`, w =
//! UG_HISTORY_RATIO); 004 writes the two terms separately with W_hist, which is what this
//! module computes (W_hist = 1 − w).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::config::ResourcePriorityConfig;
use crate::model::{Millis, SiteId};

/// Buckets the usage window is divided into (the history keeps at most this many per site).
const BUCKETS: u64 = 24;

/// How long jobs took at one site: the last one, and sums over the usage window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageHistory {
    /// Duration of the last job that ended here.
    pub last_ms: Option<Millis>,
    /// (bucket start, sum of durations, count), oldest first.
    buckets: VecDeque<(Millis, u64, u64)>,
}

impl UsageHistory {
    /// A job that ended at `now` took `duration_ms` here.
    pub fn record(&mut self, now: Millis, duration_ms: Millis, window_ms: Millis) {
        self.last_ms = Some(duration_ms);
        let width = (window_ms / BUCKETS).max(1);
        let start = now / width * width;
        match self.buckets.back_mut() {
            Some(b) if b.0 == start => {
                b.1 += duration_ms;
                b.2 += 1;
            }
            _ => self.buckets.push_back((start, duration_ms, 1)),
        }
        self.prune(now, window_ms);
    }

    fn prune(&mut self, now: Millis, window_ms: Millis) {
        let width = (window_ms / BUCKETS).max(1);
        while self.buckets.front().is_some_and(|b| b.0 + width + window_ms <= now) {
            self.buckets.pop_front();
        }
    }

    /// Mean duration of the jobs that ended within `window_ms` before `now` (to the
    /// resolution of one bucket, a 24th of the window).
    pub fn mean_ms(&self, now: Millis, window_ms: Millis) -> Option<f64> {
        let width = (window_ms / BUCKETS).max(1);
        let (sum, n) = self
            .buckets
            .iter()
            .filter(|b| b.0 + width + window_ms > now)
            .fold((0u64, 0u64), |(s, n), b| (s + b.1, n + b.2));
        (n > 0).then(|| sum as f64 / n as f64)
    }
}

/// One site a job could go to, with what Eq. 1 needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    pub site: SiteId,
    /// The job's RANK at the site (0 without a rank).
    pub rank: i64,
    /// The site's fixed priority (1–99).
    pub fixed: u32,
    /// Mean job time over the usage window (`None`: no record).
    pub hist_ms: Option<f64>,
    /// Last job time (`None`: no record).
    pub last_ms: Option<f64>,
}

/// The four normalized terms and the total of one candidate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Priority {
    pub fixed: f64,
    pub rank: f64,
    pub hist: f64,
    pub current: f64,
    pub total: f64,
}

/// `min / t` for known times, the slowest known's score for unknown ones, 0 if none is known.
fn speed_scores(times: impl Iterator<Item = Option<f64>> + Clone) -> Vec<f64> {
    let known = times.clone().flatten().filter(|&t| t > 0.0);
    let min = known.clone().fold(f64::INFINITY, f64::min);
    let max = known.fold(0.0f64, f64::max);
    times
        .map(|t| match t {
            Some(t) if t > 0.0 => min / t,
            _ if max > 0.0 => min / max,
            _ => 0.0,
        })
        .collect()
}

/// Eq. 1 for every candidate (same order).
pub fn resource_priorities(cands: &[Candidate], w: &ResourcePriorityConfig) -> Vec<Priority> {
    let max_fixed = cands.iter().map(|c| c.fixed).max().unwrap_or(0);
    let max_rank = cands.iter().map(|c| c.rank).max().unwrap_or(0);
    let min_rank = cands.iter().map(|c| c.rank).min().unwrap_or(0);
    let usage = w.usage > 0.0;
    let hist = if usage {
        speed_scores(cands.iter().map(|c| c.hist_ms))
    } else {
        vec![0.0; cands.len()]
    };
    let current = if usage {
        speed_scores(cands.iter().map(|c| c.last_ms))
    } else {
        vec![0.0; cands.len()]
    };
    cands
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let fixed = if max_fixed == 0 { 0.0 } else { c.fixed as f64 / max_fixed as f64 };
            let rank = if c.rank > 0 && max_rank != 0 {
                c.rank as f64 / max_rank as f64
            } else if c.rank < 0 && min_rank != 0 {
                -(c.rank as f64) / min_rank as f64
            } else {
                0.0
            };
            let total = w.usage * (w.history * hist[i] + (1.0 - w.history) * current[i]) + w.fixed * fixed + w.rank * rank;
            Priority {
                fixed,
                rank,
                hist: hist[i],
                current: current[i],
                total,
            }
        })
        .collect()
}

/// A priority as an ordered integer key (higher is better), exact to 1e-9.
pub fn priority_key(p: f64) -> i64 {
    (p * 1e9).round() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(site: u32, rank: i64, fixed: u32, hist: Option<f64>, last: Option<f64>) -> Candidate {
        Candidate {
            site: SiteId(site),
            rank,
            fixed,
            hist_ms: hist,
            last_ms: last,
        }
    }

    #[test]
    fn eq1_by_hand() {
        let w = ResourcePriorityConfig::default(); // usage 1, history 0.75, fixed 1, rank 1
        let c = [
            // rank 2815 of max 4001; fixed 1 of 2; hist 600 s (min 500); last 500 s (min 500).
            cand(0, 2815, 1, Some(600_000.0), Some(500_000.0)),
            cand(1, 4001, 2, Some(500_000.0), None),
            cand(2, 1001, 2, None, None),
        ];
        let p = resource_priorities(&c, &w);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        // Site 0: fixed 0.5, rank 2815/4001, hist 500/600, current 500/500.
        assert!(close(p[0].fixed, 0.5) && close(p[0].rank, 2815.0 / 4001.0));
        assert!(close(p[0].hist, 500.0 / 600.0) && close(p[0].current, 1.0));
        let want0 = 0.75 * (500.0 / 600.0) + 0.25 * 1.0 + 0.5 + 2815.0 / 4001.0;
        assert!(close(p[0].total, want0), "{} vs {want0}", p[0].total);
        // Site 1: no last record → scores as the slowest known last (500/500 = 1).
        assert!(close(p[1].hist, 1.0) && close(p[1].current, 1.0) && close(p[1].rank, 1.0));
        assert!(close(p[1].total, 0.75 + 0.25 + 1.0 + 1.0));
        // Site 2: no records at all → the slowest known of each (500/600 and 1).
        assert!(close(p[2].hist, 500.0 / 600.0) && close(p[2].current, 1.0));
        assert!(close(p[2].total, 0.75 * 500.0 / 600.0 + 0.25 + 1.0 + 1001.0 / 4001.0));
    }

    #[test]
    fn negative_ranks_normalize_by_the_minimum_and_no_history_scores_zero() {
        let w = ResourcePriorityConfig {
            usage: 1.0,
            ..Default::default()
        };
        let c = [cand(0, -5, 1, None, None), cand(1, -10, 1, None, None), cand(2, 0, 1, None, None)];
        let p = resource_priorities(&c, &w);
        assert_eq!(p.iter().map(|p| p.rank).collect::<Vec<_>>(), [-0.5, -1.0, 0.0]);
        assert!(p.iter().all(|p| p.hist == 0.0 && p.current == 0.0));
        assert!(p[2].total > p[0].total && p[0].total > p[1].total);
    }

    #[test]
    fn usage_window_forgets_old_jobs() {
        let day = 86_400_000;
        let mut h = UsageHistory::default();
        h.record(0, 100, 3 * day);
        h.record(day, 300, 3 * day);
        assert_eq!(h.mean_ms(day, 3 * day), Some(200.0));
        assert_eq!(h.last_ms, Some(300));
        // Four days later the first record is out of the window, the second still in.
        assert_eq!(h.mean_ms(4 * day - 1, 3 * day), Some(300.0));
        assert_eq!(h.mean_ms(5 * day, 3 * day), None);
        h.record(5 * day, 50, 3 * day);
        assert!(h.buckets.len() <= 2);
        assert_eq!(h.mean_ms(5 * day, 3 * day), Some(50.0));
    }
}
