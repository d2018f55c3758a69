//! What the KOALA experiments measure in one run, and means with 95% confidence intervals
//! over runs.

use std::collections::BTreeMap;
use std::fmt;

use koalesce_core::state::JobState;

use crate::engine::{JobRecord, SimResult, UtilizationBucket};
use crate::metrics::{utilization_series, UtilizationSeries};
use crate::stats;

/// Utilization split as in 003 Fig. 5.1, in % of all processors.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Util {
    pub background: f64,
    pub grid: f64,
    pub pwt: f64,
    pub pgt: f64,
}

impl Util {
    /// The seeds' "real total utilization": background + grid load + PWT (000 §5.1). PGT is
    /// left out: those processors are idle or used by local jobs.
    pub fn total(&self) -> f64 {
        self.background + self.grid + self.pwt
    }

    fn of(buckets: &[UtilizationBucket], capacity_ms: f64) -> Util {
        let sum = |f: fn(&UtilizationBucket) -> u64| 100.0 * buckets.iter().map(f).sum::<u64>() as f64 / capacity_ms.max(1.0);
        Util {
            background: sum(|b| b.background),
            grid: sum(|b| b.grid),
            pwt: sum(|b| b.pwt),
            pgt: sum(|b| b.pgt),
        }
    }
}

/// Means over the succeeded jobs of one group (a job shape, or shape and priority).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Group {
    pub jobs: usize,
    /// Placement time, s: the total over all placements (003 §4.2.2); equal to the placement
    /// time of 003 §4.2.1 for a job never returned to the queue.
    pub placement_s: f64,
    /// Estimated file transfer time of the last placement, s.
    pub ftt_s: f64,
    /// Submission to actual start, s.
    pub twt_s: f64,
    pub placement_tries: f64,
    pub claiming_tries: f64,
    /// Job spread (003 §5.1.7): execution sites / components, %.
    pub spread_pct: f64,
    /// Jobs whose components ran on more than one site, %.
    pub coallocated_pct: f64,
    /// Failure rate (003 §5.2.4): soft-error failures / successful placement tries, %.
    pub failure_pct: f64,
    /// Start delay (003 §4.2.2): final JST − first JST, s.
    pub start_delay_s: f64,
    /// Percentiles of the (total) placement time over the group's jobs, s (003 Fig. 5.3).
    pub placement_p25_s: f64,
    pub placement_p50_s: f64,
    pub placement_p90_s: f64,
    /// Jobs that moved at least one file (estimated FTT of the last placement > 0), %.
    pub transfer_pct: f64,
    /// Soft-error failures per job (003 §6.2.5, Fig. 6.6).
    pub failures_per_job: f64,
}

impl Group {
    fn of(jobs: &[&JobRecord]) -> Group {
        let n = jobs.len().max(1) as f64;
        let mean = |f: &dyn Fn(&JobRecord) -> f64| jobs.iter().map(|j| f(j)).sum::<f64>() / n;
        let s = |ms: u64| ms as f64 / 1000.0;
        let mut placement: Vec<f64> = jobs.iter().map(|j| s(j.total_placement_ms)).collect();
        placement.sort_by(f64::total_cmp);
        let pct = |p: f64| stats::percentile_sorted(&placement, p).unwrap_or(f64::NAN);
        Group {
            jobs: jobs.len(),
            placement_s: mean(&|j| s(j.total_placement_ms)),
            ftt_s: mean(&|j| s(j.ftt_ms)),
            twt_s: mean(&|j| s(j.start.unwrap_or(j.submit).saturating_sub(j.submit))),
            placement_tries: mean(&|j| j.placement_tries as f64),
            claiming_tries: mean(&|j| j.claiming_tries as f64),
            spread_pct: mean(&|j| 100.0 * j.sites.len() as f64 / j.components.max(1) as f64),
            coallocated_pct: mean(&|j| if j.sites.len() > 1 { 100.0 } else { 0.0 }),
            failure_pct: mean(&|j| 100.0 * j.error_resubmissions as f64 / (j.error_resubmissions as f64 + 1.0)),
            start_delay_s: mean(&|j| s(j.start_delay_ms.unwrap_or(0))),
            placement_p25_s: pct(25.0),
            placement_p50_s: pct(50.0),
            placement_p90_s: pct(90.0),
            transfer_pct: mean(&|j| if j.ftt_ms > 0 { 100.0 } else { 0.0 }),
            failures_per_job: mean(&|j| j.error_resubmissions as f64),
        }
    }
}

/// Everything one run contributes to an experiment.
#[derive(Debug, Clone)]
pub struct RunMetrics {
    pub seed: u64,
    pub jobs: usize,
    pub succeeded: usize,
    pub failed: usize,
    pub unfinished: usize,
    /// Mean utilization while jobs arrive ([0, last arrival], whole buckets).
    pub util: Util,
    /// Mean utilization over the whole run ([0, last grid job done]).
    pub util_run: Util,
    /// Utilization over the whole run of the sites that were never blacklisted, in % of *their*
    /// processors (003 §5.2.3 reports the 250 processors left after Delft was taken out).
    pub usable: Util,
    pub usable_processors: u64,
    /// 10th and 90th percentile of the total utilization (background + grid + PWT) over
    /// 5-minute windows of the arrival window, the first 10 minutes left out (the range a
    /// figure of the utilization over time would show).
    pub util_total_p10: f64,
    pub util_total_p90: f64,
    /// PWT split (s per started job, last placement): claimed before the estimated JST (JST −
    /// JCT) and waiting past it for transfers that ran longer than estimated (start − JST).
    pub pwt_before_jst_s: f64,
    pub pwt_after_jst_s: f64,
    /// Jobs still waiting for placement at the last arrival, by total size (003 §6.2.2: "at the
    /// end of the job submissions, only jobs of size 48 are still in the queue").
    pub queued_at_last_arrival: BTreeMap<u32, usize>,
    /// Share of each size's jobs submitted by the last arrival that had started by then, %.
    pub started_by_last_arrival_pct: BTreeMap<u32, f64>,
    /// Start times of the started jobs by total size, s (cumulative-jobs plots).
    pub starts_by_size: BTreeMap<u32, Vec<f64>>,
    /// Failure rate (as [`Group::failure_pct`]) of the jobs that ran on several clusters and of
    /// those that ran on one (003 §5.2.4: co-allocation increases the failure rate).
    pub failure_pct_coallocated: f64,
    pub failure_pct_single: f64,
    pub max_queue: usize,
    pub last_arrival_s: f64,
    pub end_s: f64,
    /// End of the run − last arrival.
    pub drain_s: f64,
    pub all: Group,
    pub placement_p50_s: f64,
    pub placement_p90_s: f64,
    /// Multi-component jobs only.
    pub multi: Group,
    /// Started jobs per minute, from the first arrival to the end of the run.
    pub throughput_per_min: f64,
    pub preemptions: u64,
    pub soft_errors: u64,
    pub blacklisted: Vec<(f64, String)>,
    pub transferred_gb: f64,
    /// By job shape ("4x16").
    pub by_shape: BTreeMap<String, Group>,
    /// By job shape and priority ("4x18 high").
    pub by_shape_priority: BTreeMap<String, Group>,
    /// By total job size ("36 high").
    pub by_size_priority: BTreeMap<String, Group>,
}

impl RunMetrics {
    /// Stable as the seeds judge it (003 §5.1.5): every job done and the run over shortly after
    /// the last arrival (here: within 10% of the arrival span, at least 5 minutes).
    pub fn stable(&self) -> bool {
        self.unfinished == 0 && self.failed == 0 && self.drain_s <= (0.1 * self.last_arrival_s).max(300.0)
    }

    pub fn of(r: &SimResult) -> RunMetrics {
        let done: Vec<&JobRecord> = r.jobs.iter().filter(|j| j.state == JobState::Succeeded).collect();
        let procs = r.total_processors as f64;
        let window = ((r.last_arrival_ms.div_ceil(r.bucket_ms)) as usize)
            .clamp(1, r.timeline.len().max(1))
            .min(r.timeline.len());
        let util = Util::of(&r.timeline[..window], procs * (window as u64 * r.bucket_ms) as f64);
        let util_run = Util::of(&r.timeline, procs * r.end_ms as f64);
        let black: Vec<&str> = r.blacklisted.iter().map(|(_, s)| s.as_str()).collect();
        let mut usable_sum = UtilizationBucket::default();
        let mut usable_procs = 0u64;
        for (i, name) in r.site_names.iter().enumerate() {
            if black.contains(&name.as_str()) {
                continue;
            }
            let t = &r.site_totals[i];
            usable_sum.background += t.background;
            usable_sum.grid += t.grid;
            usable_sum.pwt += t.pwt;
            usable_sum.pgt += t.pgt;
            usable_procs += r.site_processors[i] as u64;
        }
        let usable = Util::of(&[usable_sum], usable_procs as f64 * r.end_ms as f64);
        let (util_total_p10, util_total_p90) = total_range(r, window);
        let started: Vec<&JobRecord> = r.jobs.iter().filter(|j| j.start.is_some() && j.placed.is_some()).collect();
        let per_started = |f: &dyn Fn(&JobRecord) -> f64| started.iter().map(|j| f(j)).sum::<f64>() / started.len().max(1) as f64;
        // `started` holds only jobs with `start` and `placed` set: the unwraps below cannot fail.
        let pwt_before_jst_s = per_started(&|j| {
            let jst = j.placed.unwrap() + j.ftt_ms;
            jst.saturating_sub(j.claimed.unwrap_or(jst)) as f64 / 1000.0
        });
        let pwt_after_jst_s = per_started(&|j| j.start.unwrap().saturating_sub(j.placed.unwrap() + j.ftt_ms) as f64 / 1000.0);
        let last = r.last_arrival_ms;
        let mut queued_at_last_arrival = BTreeMap::new();
        let mut started_by: BTreeMap<u32, (usize, usize)> = BTreeMap::new();
        let mut starts_by_size: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        for j in &r.jobs {
            let first_placed = j.placed.map(|p| p.min(j.start.unwrap_or(p)));
            if first_placed.is_none_or(|p| p > last) {
                *queued_at_last_arrival.entry(j.size).or_insert(0) += 1;
            }
            let e = started_by.entry(j.size).or_insert((0, 0));
            e.1 += 1;
            if j.start.is_some_and(|t| t <= last) {
                e.0 += 1;
            }
            if let Some(t) = j.start {
                starts_by_size.entry(j.size).or_default().push(t as f64 / 1000.0);
            }
        }
        for v in starts_by_size.values_mut() {
            v.sort_by(f64::total_cmp);
        }
        let started_by_last_arrival_pct = started_by
            .into_iter()
            .map(|(k, (a, n))| (k, 100.0 * a as f64 / n.max(1) as f64))
            .collect();
        let mut by_shape: BTreeMap<String, Vec<&JobRecord>> = BTreeMap::new();
        let mut by_sp: BTreeMap<String, Vec<&JobRecord>> = BTreeMap::new();
        let mut by_zp: BTreeMap<String, Vec<&JobRecord>> = BTreeMap::new();
        for j in &done {
            by_shape.entry(j.shape()).or_default().push(j);
            by_sp.entry(format!("{} {}", j.shape(), j.priority)).or_default().push(j);
            by_zp.entry(format!("{} {}", j.size, j.priority)).or_default().push(j);
        }
        let groups = |m: BTreeMap<String, Vec<&JobRecord>>| m.into_iter().map(|(k, v)| (k, Group::of(&v))).collect();
        let multi: Vec<&JobRecord> = done.iter().copied().filter(|j| j.components > 1).collect();
        let mut placement: Vec<f64> = done.iter().map(|j| j.total_placement_ms as f64 / 1000.0).collect();
        placement.sort_by(f64::total_cmp);
        let first = r.jobs.iter().map(|j| j.submit).min().unwrap_or(0);
        let span_min = (r.end_ms.saturating_sub(first)).max(1) as f64 / 60_000.0;
        RunMetrics {
            seed: r.seed,
            jobs: r.jobs.len() + r.rejected.len(),
            succeeded: done.len(),
            failed: r
                .jobs
                .iter()
                .filter(|j| matches!(j.state, JobState::Failed(_) | JobState::Cancelled))
                .count()
                + r.rejected.len(),
            unfinished: r.jobs.iter().filter(|j| !j.state.is_terminal()).count(),
            util,
            util_run,
            usable,
            usable_processors: usable_procs,
            util_total_p10,
            util_total_p90,
            pwt_before_jst_s,
            pwt_after_jst_s,
            queued_at_last_arrival,
            started_by_last_arrival_pct,
            starts_by_size,
            failure_pct_coallocated: Group::of(&done.iter().copied().filter(|j| j.sites.len() > 1).collect::<Vec<_>>()).failure_pct,
            failure_pct_single: Group::of(&done.iter().copied().filter(|j| j.sites.len() <= 1).collect::<Vec<_>>()).failure_pct,
            max_queue: r.max_queue_length,
            last_arrival_s: r.last_arrival_ms as f64 / 1000.0,
            end_s: r.end_ms as f64 / 1000.0,
            drain_s: r.end_ms.saturating_sub(r.last_arrival_ms) as f64 / 1000.0,
            all: Group::of(&done),
            placement_p50_s: stats::percentile_sorted(&placement, 50.0).unwrap_or(0.0),
            placement_p90_s: stats::percentile_sorted(&placement, 90.0).unwrap_or(0.0),
            multi: Group::of(&multi),
            throughput_per_min: done.len() as f64 / span_min,
            preemptions: r.jobs.iter().map(|j| j.preemptions as u64).sum(),
            soft_errors: r.soft_errors,
            blacklisted: r.blacklisted.iter().map(|(t, s)| (*t as f64 / 1000.0, s.clone())).collect(),
            transferred_gb: r.transferred_bytes as f64 / 1e9,
            by_shape: groups(by_shape),
            by_shape_priority: groups(by_sp),
            by_size_priority: groups(by_zp),
        }
    }
}

/// 10th and 90th percentile of the total utilization over 5-minute windows of the first
/// `window` buckets, without the first 10 minutes (warm-up).
fn total_range(r: &SimResult, window: usize) -> (f64, f64) {
    let per = (300_000 / r.bucket_ms.max(1)).max(1) as usize;
    let skip = (600_000 / r.bucket_ms.max(1)) as usize;
    let buckets = &r.timeline[skip.min(window)..window];
    let mut v: Vec<f64> = buckets
        .chunks(per)
        .filter(|c| c.len() == per)
        .map(|c| Util::of(c, r.total_processors as f64 * (c.len() as u64 * r.bucket_ms) as f64).total())
        .collect();
    v.sort_by(f64::total_cmp);
    (
        stats::percentile_sorted(&v, 10.0).unwrap_or(f64::NAN),
        stats::percentile_sorted(&v, 90.0).unwrap_or(f64::NAN),
    )
}

/// A proportion `k / n` with its 95% Wilson interval (in %): the interval for shares near 0 or
/// 100% (seeds that were stable, jobs that finished), where mean ± t·s would collapse to zero
/// width or leave [0, 100].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prop {
    pub k: u64,
    pub n: u64,
    pub lo: f64,
    pub hi: f64,
}

impl Prop {
    pub fn new(k: u64, n: u64) -> Prop {
        let (lo, hi) = stats::wilson(k, n, 1.96).unwrap_or((f64::NAN, f64::NAN));
        Prop {
            k,
            n,
            lo: 100.0 * lo,
            hi: 100.0 * hi,
        }
    }

    /// Over runs: how many satisfy `f`.
    pub fn seeds(runs: &[RunMetrics], f: impl Fn(&RunMetrics) -> bool) -> Prop {
        Prop::new(runs.iter().filter(|m| f(m)).count() as u64, runs.len() as u64)
    }

    pub fn pct(&self) -> f64 {
        if self.n == 0 {
            f64::NAN
        } else {
            100.0 * self.k as f64 / self.n as f64
        }
    }

    /// "10/10 (95% CI 72–100%)".
    pub fn fmt(&self) -> String {
        if self.n == 0 {
            return "–".to_string();
        }
        format!("{}/{} (95% CI {:.0}–{:.0}%)", self.k, self.n, self.lo, self.hi)
    }
}

/// A mean and the half-width of its 95% confidence interval (Student t) over runs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Agg {
    pub mean: f64,
    pub ci: f64,
    pub n: usize,
    pub min: f64,
    pub max: f64,
}

impl Agg {
    pub fn of(samples: &[f64]) -> Agg {
        let v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return Agg {
                mean: f64::NAN,
                ci: f64::NAN,
                n: 0,
                min: f64::NAN,
                max: f64::NAN,
            };
        }
        let (mean, ci) = stats::mean_ci95(&v).unwrap_or((v[0], 0.0));
        Agg {
            mean,
            ci,
            n: v.len(),
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }

    /// Over runs, of one value per run.
    pub fn over(runs: &[RunMetrics], f: impl Fn(&RunMetrics) -> f64) -> Agg {
        Agg::of(&runs.iter().map(f).collect::<Vec<_>>())
    }

    /// Over the runs that have group `key` (in the map `m` picks).
    pub fn group(runs: &[RunMetrics], m: impl Fn(&RunMetrics) -> &BTreeMap<String, Group>, key: &str, f: impl Fn(&Group) -> f64) -> Agg {
        Agg::of(&runs.iter().filter_map(|r| m(r).get(key)).map(f).collect::<Vec<_>>())
    }

    /// "12.3 ± 0.4" with `d` decimals.
    pub fn fmt(&self, d: usize) -> String {
        if self.n == 0 || !self.mean.is_finite() {
            return "–".to_string();
        }
        if self.n < 2 || !self.ci.is_finite() {
            return format!("{:.*}", d, self.mean);
        }
        format!("{:.*} ± {:.*}", d, self.mean, d, self.ci)
    }
}

impl fmt::Display for Agg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&Agg::fmt(self, 1))
    }
}

/// The utilization over time of one run, for the plots.
pub fn series(r: &SimResult) -> UtilizationSeries {
    utilization_series(r)
}
