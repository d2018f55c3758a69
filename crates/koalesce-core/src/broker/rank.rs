//! Resource ranking of 001 §3.1: predicted Total Time to Start (TTS) and Total Time to Delivery
//! (TTD) of a job at a site.
//!
//! - **Stage-in**: the transfer estimate of the job's input files to the site (forecast bandwidth
//!   from the fastest replica, as for KOALA's policies), or, when the job names no file the core
//!   knows, the user's `stage_in_ms` (001 §3.1: "the predictor makes use of the file transfer
//!   times optionally provided by the user").
//! - **Queue wait**: measured after stage-in, `start − (now + stage-in)`. The start is, in order
//!   of preference, (a) at a site with advance reservations, the start a reservation would get:
//!   the earliest fit after `now + stage-in` among what the site holds ([`QueueEstimate::held`]:
//!   running jobs to their estimated end, claims, reservations); (b) at another site where the
//!   processors are idle now, `now + stage-in` (KOALA claims idle processors at once); (c) the
//!   start the site's queue would give a job joining it ([`QueueEstimate::planned`]: queued jobs
//!   at their planned starts as well). A site with neither idle processors nor an estimate has no
//!   prediction and is not ranked.
//! - **Execution**, from the user's benchmarks: `t_b(R) = t_ref · p_b_ref / p_b(R)`, averaged over
//!   the job's benchmarks. A site that does not publish a benchmark gets the conservative value of
//!   the slowest site that does (001 §3.1: "a customizable procedure for making conservative
//!   predictions"), or `t_ref` when no site publishes it. A job without benchmarks: its runtime
//!   estimate divided by the site's speed.
//! - **Stage-out**: the user's `stage_out_ms` (001 §3.1: only the user can predict it).
//!
//! TTS = stage-in + queue wait; TTD = TTS + execution + stage-out. Sites are ranked by the
//! chosen total, then by the other one, then by site id (deterministic).

use serde::{Deserialize, Serialize};

use super::profile::{Profile, FOREVER};
use crate::model::{JobPreferences, Millis, PolicyKind, Site, SiteId};

/// A site's queue-wait estimate, supplied by the driver (the simulator simulates its LRM's
/// queue; the daemon asks the local executor or Slurm's `squeue --start`).
#[derive(Debug, Clone, PartialEq)]
pub struct QueueEstimate {
    /// Processors held from the time of the estimate on: running jobs until their estimated
    /// end, claims (forever unless they came from a reservation), reservations. An advance
    /// reservation must fit around these.
    pub held: Profile,
    /// `held` plus the queued jobs at the starts the LRM would give them. A job joining the
    /// queue starts where it fits in this.
    pub planned: Profile,
    /// A job joining the queue starts no earlier than this (an FCFS queue: the planned start
    /// of its last job; otherwise the time of the estimate).
    pub queue_floor: Millis,
}

/// How an LRM orders its queue, for [`QueueEstimate::plan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum QueueOrder {
    /// No job starts before an earlier one.
    Fcfs,
    /// Every job at its earliest fit in queue order (conservative backfilling: the usual
    /// predictor for backfilling LRMs, EASY included).
    Backfill,
}

impl QueueEstimate {
    /// From the two profiles (see the fields).
    pub fn from_profiles(held: Profile, planned: Profile) -> Self {
        let queue_floor = held.origin();
        QueueEstimate {
            held,
            planned,
            queue_floor,
        }
    }

    /// Plans `queued` jobs `(processors, estimated runtime)` in queue order after the `held`
    /// commitments `(start, end, processors)` of a site of `capacity` processors, at `now`.
    pub fn plan(
        capacity: u32,
        now: Millis,
        held: impl IntoIterator<Item = (Millis, Millis, u32)>,
        queued: impl IntoIterator<Item = (u32, Millis)>,
        order: QueueOrder,
    ) -> Self {
        let held = Profile::build(capacity, now, held);
        let mut planned = held.clone();
        let mut floor = now;
        for (procs, estimate) in queued {
            let from = match order {
                QueueOrder::Fcfs => floor,
                QueueOrder::Backfill => now,
            };
            if let Some(s) = planned.earliest_fit(from, estimate, procs) {
                planned.add(s, s.saturating_add(estimate.max(1)), procs);
                floor = s;
            }
        }
        let queue_floor = match order {
            QueueOrder::Fcfs => floor,
            QueueOrder::Backfill => now,
        };
        QueueEstimate {
            held,
            planned,
            queue_floor,
        }
    }

    /// Queued jobs whose starts the LRM already predicts (`squeue --start`): `(start, end,
    /// processors)` for held and for queued commitments.
    pub fn from_starts(
        capacity: u32,
        now: Millis,
        held: impl IntoIterator<Item = (Millis, Millis, u32)>,
        queued: impl IntoIterator<Item = (Millis, Millis, u32)>,
    ) -> Self {
        let held = Profile::build(capacity, now, held);
        let mut planned = held.clone();
        for (s, e, p) in queued {
            planned.add(s, e, p);
        }
        QueueEstimate {
            held,
            planned,
            queue_floor: now,
        }
    }

    /// From published load only: nothing can start before `now + wait_ms`.
    pub fn constant_wait(capacity: u32, now: Millis, wait_ms: Millis) -> Self {
        let held = Profile::build(capacity, now, [(now, now.saturating_add(wait_ms), capacity)]);
        QueueEstimate {
            planned: held.clone(),
            held,
            queue_floor: now,
        }
    }

    /// Without an estimate: the site keeps what it holds now (all but `idle` processors)
    /// forever.
    pub fn idle_only(capacity: u32, now: Millis, idle: u32) -> Self {
        let held = Profile::build(capacity, now, [(now, FOREVER, capacity.saturating_sub(idle))]);
        QueueEstimate {
            planned: held.clone(),
            held,
            queue_floor: now,
        }
    }

    /// The start a reservation of `processors` for `duration` would get at or after `from`.
    pub fn reservation_start(&self, from: Millis, processors: u32, duration: Millis) -> Option<Millis> {
        self.held.earliest_fit(from, duration, processors)
    }

    /// The start a job joining the queue at or after `from` would get.
    pub fn queue_start(&self, from: Millis, processors: u32, duration: Millis) -> Option<Millis> {
        self.planned.earliest_fit(from.max(self.queue_floor), duration, processors)
    }

    /// Records processors the scheduler itself booked (a reservation or a claim) until the
    /// driver's next estimate, which includes them.
    pub fn book(&mut self, start: Millis, end: Millis, processors: u32) {
        self.held.add(start, end, processors);
        self.planned.add(start, end, processors);
    }
}

/// The predicted times of a job at one site (001 §3.1), all in ms from `made_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prediction {
    pub site: SiteId,
    /// When the prediction was made (the placement time).
    pub made_at: Millis,
    pub stage_in_ms: Millis,
    pub queue_wait_ms: Millis,
    pub execution_ms: Millis,
    pub stage_out_ms: Millis,
    /// The queue wait is a reservation's start.
    pub reserved: bool,
}

impl Prediction {
    /// Total Time to Start = stage-in + queue wait.
    pub fn tts_ms(&self) -> Millis {
        self.stage_in_ms + self.queue_wait_ms
    }
    /// Total Time to Delivery = TTS + execution + stage-out.
    pub fn ttd_ms(&self) -> Millis {
        self.tts_ms() + self.execution_ms + self.stage_out_ms
    }
    /// Predicted start (absolute).
    pub fn start(&self) -> Millis {
        self.made_at + self.tts_ms()
    }
    /// Predicted delivery (absolute): end of execution plus stage-out.
    pub fn delivery(&self) -> Millis {
        self.made_at + self.ttd_ms()
    }
    /// The total a policy minimizes.
    pub fn key(&self, policy: PolicyKind) -> (Millis, Millis) {
        match policy {
            PolicyKind::Tts => (self.tts_ms(), self.ttd_ms()),
            _ => (self.ttd_ms(), self.tts_ms()),
        }
    }
}

/// Predicted execution time at `site` (see the module docs); `sites` are all sites, for the
/// conservative value of a benchmark a site does not publish.
pub fn execution_ms(prefs: &JobPreferences, runtime_estimate_ms: Millis, site: &Site, sites: &[Site]) -> Millis {
    if prefs.benchmarks.is_empty() {
        let speed = if site.speed.is_finite() && site.speed > 0.0 {
            site.speed
        } else {
            1.0
        };
        return (runtime_estimate_ms as f64 / speed).round() as Millis;
    }
    let mut total = 0.0;
    for b in &prefs.benchmarks {
        let score = site
            .attributes
            .benchmarks
            .get(&b.name)
            .copied()
            .filter(|p| p.is_finite() && *p > 0.0)
            .or_else(|| {
                // Conservative: the slowest site that publishes it.
                sites
                    .iter()
                    .filter_map(|s| s.attributes.benchmarks.get(&b.name).copied())
                    .filter(|p| p.is_finite() && *p > 0.0)
                    .min_by(f64::total_cmp)
            });
        total += match score {
            Some(p) => b.reference_time_ms as f64 * b.reference_score / p,
            None => b.reference_time_ms as f64,
        };
    }
    (total / prefs.benchmarks.len() as f64).round() as Millis
}

/// What is known of one candidate site for one component.
#[derive(Debug, Clone, Copy)]
pub struct SiteState<'a> {
    pub site: SiteId,
    pub supports_reservations: bool,
    /// The component's processors are idle there now (for the scheduler: idle minus placed).
    pub fits_now: bool,
    pub estimate: Option<&'a QueueEstimate>,
    /// How long the job holds the processors there: its wall-time limit (the runtime estimate
    /// at the site's speed), at least the predicted execution. A start must leave room for it.
    pub hold_ms: Millis,
}

/// Predicts a component of `processors` at a site; `None` when the site gives no start.
pub fn predict(
    now: Millis,
    state: SiteState<'_>,
    processors: u32,
    stage_in_ms: Millis,
    execution_ms: Millis,
    stage_out_ms: Millis,
) -> Option<Prediction> {
    let ready = now.saturating_add(stage_in_ms);
    let (start, reserved) = if state.supports_reservations {
        let start = match state.estimate {
            Some(e) => e.reservation_start(ready, processors, state.hold_ms.max(execution_ms))?,
            None if state.fits_now => ready,
            None => return None,
        };
        (start, true)
    } else if state.fits_now {
        (ready, false)
    } else {
        (
            state.estimate?.queue_start(ready, processors, state.hold_ms.max(execution_ms))?,
            false,
        )
    };
    Some(Prediction {
        site: state.site,
        made_at: now,
        stage_in_ms,
        queue_wait_ms: start - ready,
        execution_ms,
        stage_out_ms,
        reserved,
    })
}

/// Ranks predictions best first by the policy's total (ties: the other total, then site id).
pub fn rank(mut predictions: Vec<Prediction>, policy: PolicyKind) -> Vec<Prediction> {
    predictions.sort_by_key(|p| (p.key(policy), p.site));
    predictions
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::BenchmarkRef;

    fn site(name: &str, speed: f64, bench: &[(&str, f64)]) -> Site {
        let mut s = Site {
            name: name.into(),
            processors: 16,
            speed,
            supports_reservations: false,
            attributes: Default::default(),
        };
        s.attributes.benchmarks = bench.iter().map(|&(n, p)| (n.to_string(), p)).collect();
        s
    }

    #[test]
    fn benchmark_prediction_is_the_mean_of_scaled_reference_times() {
        let sites = vec![
            site("a", 1.0, &[("linpack", 200.0), ("stream", 50.0)]),
            site("b", 1.0, &[("linpack", 100.0)]),
        ];
        let prefs = JobPreferences {
            benchmarks: vec![
                BenchmarkRef {
                    name: "linpack".into(),
                    reference_score: 100.0,
                    reference_time_ms: 600_000,
                },
                BenchmarkRef {
                    name: "stream".into(),
                    reference_score: 100.0,
                    reference_time_ms: 300_000,
                },
            ],
            ..Default::default()
        };
        // a: linpack 600 s·100/200 = 300 s, stream 300 s·100/50 = 600 s → mean 450 s.
        assert_eq!(execution_ms(&prefs, 1, &sites[0], &sites), 450_000);
        // b: linpack 600 s; stream not published → the slowest publisher (a, 50) → 600 s.
        assert_eq!(execution_ms(&prefs, 1, &sites[1], &sites), 600_000);
        // No benchmarks: the runtime estimate over the speed.
        assert_eq!(execution_ms(&JobPreferences::default(), 1000, &site("c", 2.0, &[]), &sites), 500);
    }

    #[test]
    fn queue_plan_fcfs_and_backfill() {
        // 8 processors: 6 held until 100; queued: 4 for 50, then 2 for 10.
        let held = [(0, 100, 6)];
        let fcfs = QueueEstimate::plan(8, 0, held, [(4, 50), (2, 10)], QueueOrder::Fcfs);
        // The 4 start at 100; FCFS: the 2 not before them, nor a new job.
        assert_eq!(fcfs.planned.used_at(100), 6);
        assert_eq!(fcfs.queue_start(0, 2, 10), Some(100));
        let bf = QueueEstimate::plan(8, 0, held, [(4, 50), (2, 10)], QueueOrder::Backfill);
        assert_eq!(bf.planned.used_at(0), 8); // the 2 backfilled at 0
        assert_eq!(bf.queue_start(0, 2, 10), Some(10));
        // A reservation only avoids what is held, not the queue.
        assert_eq!(bf.reservation_start(0, 2, 10), Some(0));
        assert_eq!(QueueEstimate::constant_wait(8, 5, 60).queue_start(0, 1, 1), Some(65));
        assert_eq!(QueueEstimate::idle_only(8, 0, 3).reservation_start(0, 4, 1), None);
    }
}
