//! Single-cluster FCFS and EASY-backfilling simulator driven by an SWF trace.
//!
//! This is a standalone, fast reference simulator (it does not use the
//! koalesce core types) whose semantics are fixed so that results compare job
//! by job with other simulators:
//!
//! * **Job parameters.** processors = field 8 (requested), or field 5
//!   (allocated) when field 8 is ≤ 0; runtime = field 4 (a job always runs
//!   exactly its runtime); estimate = field 9, or the runtime when field 9
//!   ≤ 0, and raised to the runtime when smaller.
//! * **Dropped jobs.** Checked in this order, each job counted once: runtime
//!   ≤ 0, then processors ≤ 0, then processors > N (see [`DroppedCounts`]).
//! * **Time.** Integer seconds as in the trace. Events are only job ends and
//!   job arrivals. At one instant all ends are processed first, then all
//!   arrivals, then exactly one scheduling pass.
//! * **Queue.** In submit order, ties in trace order.
//! * **FCFS.** Start queue heads while they fit.
//! * **EASY** (Mu'alem & Feitelson 2001). FCFS pass; then the blocked head
//!   gets a reservation at the shadow time S = the earliest estimated end
//!   (start + estimate) of a running job at which enough processors are free
//!   for it (all running jobs with estimated end ≤ S count as freed);
//!   extra = processors free at S minus the head's. Each later queued job (in
//!   queue order) that fits in the currently free processors starts if it
//!   ends by S (now + estimate ≤ S), or else if it uses no more than extra
//!   processors, which it then consumes. The reservation is recomputed at
//!   every scheduling pass.
//!
//! Complexity: O(log R) per start/end (a binary heap of actual ends and, for
//! EASY, a `BTreeMap` of running jobs by estimated end), plus per EASY pass a
//! walk over the running jobs up to the shadow time and a scan of the queue
//! that stops as soon as no processors are free.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::fmt;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::str::FromStr;

use crate::swf::{SwfRecord, SwfTrace};

/// Milliseconds, the time unit of the koalesce core (kept as a plain alias so
/// this module does not depend on core types).
pub type Millis = u64;

/// Whole seconds, the time unit of SWF traces and of this simulator.
pub type Seconds = u64;

/// Converts simulator seconds to core milliseconds (saturating).
pub fn secs_to_millis(s: Seconds) -> Millis {
    s.saturating_mul(1000)
}

/// Queueing policy of the single-cluster simulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueuePolicy {
    /// First come, first served without backfilling.
    Fcfs,
    /// EASY backfilling (one reservation, for the queue head).
    Easy,
}

impl QueuePolicy {
    /// Valid names accepted by [`FromStr`].
    pub const NAMES: [&'static str; 2] = ["fcfs", "easy"];

    /// Lower-case name (`fcfs`, `easy`).
    pub fn name(self) -> &'static str {
        match self {
            QueuePolicy::Fcfs => "fcfs",
            QueuePolicy::Easy => "easy",
        }
    }
}

impl fmt::Display for QueuePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error for an unknown queue policy name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown queue policy `{0}` (valid: fcfs, easy)")]
pub struct ParsePolicyError(pub String);

impl FromStr for QueuePolicy {
    type Err = ParsePolicyError;

    /// Accepts `fcfs` and `easy`, case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fcfs" => Ok(QueuePolicy::Fcfs),
            "easy" => Ok(QueuePolicy::Easy),
            _ => Err(ParsePolicyError(s.to_string())),
        }
    }
}

/// Per-job result, in the order of the trace's job lines (dropped jobs omitted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobOutcome {
    /// SWF job number (field 1).
    pub job_id: u64,
    /// Submit time, seconds.
    pub submit: Seconds,
    /// Start time, seconds.
    pub start: Seconds,
    /// End time (start + runtime), seconds.
    pub end: Seconds,
    /// Processors used.
    pub procs: u64,
}

impl JobOutcome {
    /// Wait time (start − submit), seconds.
    pub fn wait(&self) -> Seconds {
        self.start - self.submit
    }

    /// Runtime (end − start), seconds.
    pub fn runtime(&self) -> Seconds {
        self.end - self.start
    }

    /// Bounded slowdown max(1, (wait + runtime) / max(runtime, threshold)).
    pub fn bounded_slowdown(&self, threshold: Seconds) -> f64 {
        let resp = (self.end - self.submit) as f64;
        let denom = self.runtime().max(threshold).max(1) as f64;
        (resp / denom).max(1.0)
    }

    /// Submit time in milliseconds.
    pub fn submit_ms(&self) -> Millis {
        secs_to_millis(self.submit)
    }

    /// Start time in milliseconds.
    pub fn start_ms(&self) -> Millis {
        secs_to_millis(self.start)
    }

    /// End time in milliseconds.
    pub fn end_ms(&self) -> Millis {
        secs_to_millis(self.end)
    }
}

/// Number of trace jobs not simulated, per reason (each job counted once, in
/// this order of checks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DroppedCounts {
    /// Runtime (field 4) ≤ 0.
    pub no_runtime: usize,
    /// Processors (field 8, else field 5) ≤ 0.
    pub no_procs: usize,
    /// Processors > the cluster size.
    pub too_wide: usize,
}

impl DroppedCounts {
    /// Total number of dropped jobs.
    pub fn total(&self) -> usize {
        self.no_runtime + self.no_procs + self.too_wide
    }
}

/// Threshold (seconds) of the bounded slowdown reported in [`SingleResult`].
pub const BSLD_THRESHOLD_S: Seconds = 10;

/// Result of a single-cluster simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct SingleResult {
    /// Policy simulated.
    pub policy: QueuePolicy,
    /// Cluster size N (processors).
    pub cluster_procs: u64,
    /// Simulated jobs, in the order of the trace's job lines.
    pub jobs: Vec<JobOutcome>,
    /// Jobs not simulated, per reason.
    pub dropped: DroppedCounts,
    /// Events processed (job arrivals + job ends).
    pub events: u64,
    /// Scheduling passes (distinct event instants).
    pub passes: u64,
    /// Longest waiting queue seen (after arrivals, before a pass).
    pub max_queue_len: usize,
    /// Last end − first submit of the simulated jobs (0 if none), seconds.
    pub makespan: Seconds,
    /// Σ procs·runtime / (N · makespan); 0 if makespan is 0.
    pub utilization: f64,
    /// Mean wait (start − submit), seconds.
    pub mean_wait: f64,
    /// Mean bounded slowdown with threshold [`BSLD_THRESHOLD_S`].
    pub mean_bounded_slowdown: f64,
}

impl fmt::Display for SingleResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "policy {}  processors {}  jobs {}  dropped {} (runtime<=0 {}, procs<=0 {}, procs>N {})",
            self.policy,
            self.cluster_procs,
            self.jobs.len(),
            self.dropped.total(),
            self.dropped.no_runtime,
            self.dropped.no_procs,
            self.dropped.too_wide
        )?;
        writeln!(
            f,
            "events {}  passes {}  max queue {}",
            self.events, self.passes, self.max_queue_len
        )?;
        write!(
            f,
            "makespan {} s  utilization {:.4}  mean wait {:.1} s  mean bounded slowdown ({} s) {:.3}",
            self.makespan, self.utilization, self.mean_wait, BSLD_THRESHOLD_S, self.mean_bounded_slowdown
        )
    }
}

/// Writes `job_id,submit,start,end,procs,wait,runtime` (header + one row per
/// simulated job, in trace order).
pub fn write_jobs_csv(path: &Path, result: &SingleResult) -> io::Result<()> {
    let file = std::fs::File::create(path)?;
    let mut w = BufWriter::with_capacity(1 << 16, file);
    write_jobs_csv_to(&mut w, result)?;
    w.flush()
}

/// Like [`write_jobs_csv`] but to any writer.
pub fn write_jobs_csv_to<W: Write>(w: &mut W, result: &SingleResult) -> io::Result<()> {
    let mut out = csv::WriterBuilder::new().terminator(csv::Terminator::Any(b'\n')).from_writer(w);
    let err = |e: csv::Error| io::Error::other(e.to_string());
    out.write_record(["job_id", "submit", "start", "end", "procs", "wait", "runtime"])
        .map_err(err)?;
    for j in &result.jobs {
        out.serialize((j.job_id, j.submit, j.start, j.end, j.procs, j.wait(), j.runtime()))
            .map_err(err)?;
    }
    out.flush()
}

/// Simulation parameters of one job, derived from its SWF record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimJob {
    /// Submit time, seconds.
    pub submit: Seconds,
    /// Actual runtime (> 0), seconds.
    pub runtime: Seconds,
    /// Runtime estimate (≥ runtime), seconds.
    pub estimate: Seconds,
    /// Processors (> 0).
    pub procs: u64,
}

/// Why a job is not simulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Runtime ≤ 0.
    NoRuntime,
    /// Processors ≤ 0.
    NoProcs,
    /// Processors > cluster size.
    TooWide,
}

/// Applies the job-parameter rules (see the module docs) to one record.
pub fn sim_job(rec: &SwfRecord, cluster_procs: u64) -> Result<SimJob, DropReason> {
    let procs = if rec.requested_procs > 0 {
        rec.requested_procs
    } else {
        rec.allocated_procs
    };
    if rec.run_s <= 0 {
        return Err(DropReason::NoRuntime);
    }
    if procs <= 0 {
        return Err(DropReason::NoProcs);
    }
    let procs = procs as u64;
    if procs > cluster_procs {
        return Err(DropReason::TooWide);
    }
    let runtime = rec.run_s as u64;
    let estimate = if rec.requested_time_s > 0 {
        (rec.requested_time_s as u64).max(runtime)
    } else {
        runtime
    };
    Ok(SimJob {
        // Placeholders (negative submit) are skipped by the reader; clamp anyway.
        submit: rec.submit_s.max(0) as u64,
        runtime,
        estimate,
        procs,
    })
}

/// Simulates `trace` on a cluster of `procs` processors.
pub fn simulate(trace: &SwfTrace, procs: u64, policy: QueuePolicy) -> SingleResult {
    simulate_with_progress(trace, procs, policy, &mut |_, _| {})
}

/// How often (in finished jobs) the progress callback is called.
pub const PROGRESS_EVERY: usize = 1 << 14;

/// Like [`simulate`], calling `progress(finished_jobs, total_jobs)` every
/// [`PROGRESS_EVERY`] finished jobs and once at the end.
pub fn simulate_with_progress(trace: &SwfTrace, procs: u64, policy: QueuePolicy, progress: &mut dyn FnMut(usize, usize)) -> SingleResult {
    let mut dropped = DroppedCounts::default();
    let mut jobs: Vec<SimJob> = Vec::with_capacity(trace.records.len());
    let mut outcomes: Vec<JobOutcome> = Vec::with_capacity(trace.records.len());
    for rec in &trace.records {
        match sim_job(rec, procs) {
            Ok(j) => {
                jobs.push(j);
                outcomes.push(JobOutcome {
                    job_id: rec.job_number,
                    submit: j.submit,
                    start: 0,
                    end: 0,
                    procs: j.procs,
                });
            }
            Err(DropReason::NoRuntime) => dropped.no_runtime += 1,
            Err(DropReason::NoProcs) => dropped.no_procs += 1,
            Err(DropReason::TooWide) => dropped.too_wide += 1,
        }
    }
    let stats = run(&jobs, procs, policy, &mut outcomes, progress);
    finish(policy, procs, outcomes, dropped, stats)
}

/// Simulates already-derived jobs (in trace order). Returns outcomes with
/// `job_id` = index in `jobs`. Mostly useful for tests and other front ends.
pub fn simulate_jobs(jobs: &[SimJob], procs: u64, policy: QueuePolicy) -> SingleResult {
    let mut dropped = DroppedCounts::default();
    let mut kept = Vec::with_capacity(jobs.len());
    let mut outcomes = Vec::with_capacity(jobs.len());
    for (i, j) in jobs.iter().enumerate() {
        if j.runtime == 0 {
            dropped.no_runtime += 1;
        } else if j.procs == 0 {
            dropped.no_procs += 1;
        } else if j.procs > procs {
            dropped.too_wide += 1;
        } else {
            let j = SimJob {
                estimate: j.estimate.max(j.runtime),
                ..*j
            };
            kept.push(j);
            outcomes.push(JobOutcome {
                job_id: i as u64,
                submit: j.submit,
                start: 0,
                end: 0,
                procs: j.procs,
            });
        }
    }
    let stats = run(&kept, procs, policy, &mut outcomes, &mut |_, _| {});
    finish(policy, procs, outcomes, dropped, stats)
}

struct RunStats {
    events: u64,
    passes: u64,
    max_queue_len: usize,
}

/// A waiting job.
#[derive(Clone, Copy)]
struct Queued {
    estimate: Seconds,
    procs: u64,
    idx: usize,
}

/// A running job, ordered by (actual end, index) in a min-heap.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Running {
    end: Seconds,
    idx: usize,
    est_end: Seconds,
    procs: u64,
}

struct Cluster<'a> {
    jobs: &'a [SimJob],
    outcomes: &'a mut [JobOutcome],
    free: u64,
    running: BinaryHeap<Reverse<Running>>,
    /// Running jobs by (estimated end, index) → processors; EASY only.
    by_est: BTreeMap<(Seconds, usize), u64>,
    track_estimates: bool,
}

impl Cluster<'_> {
    fn start(&mut self, now: Seconds, q: Queued) {
        let job = &self.jobs[q.idx];
        let end = now.saturating_add(job.runtime);
        let est_end = now.saturating_add(q.estimate);
        self.free -= q.procs;
        self.running.push(Reverse(Running {
            end,
            idx: q.idx,
            est_end,
            procs: q.procs,
        }));
        if self.track_estimates {
            self.by_est.insert((est_end, q.idx), q.procs);
        }
        let out = &mut self.outcomes[q.idx];
        out.start = now;
        out.end = end;
    }

    /// Shadow time and extra processors for a blocked head needing `need`.
    fn reservation(&self, need: u64) -> (Seconds, u64) {
        let mut avail = self.free;
        let mut iter = self.by_est.iter().peekable();
        while let Some((&(est_end, _), &p)) = iter.next() {
            avail += p;
            if avail >= need {
                // Every job with the same estimated end is also free at S.
                while let Some((&(e, _), &p2)) = iter.peek() {
                    if e != est_end {
                        break;
                    }
                    avail += p2;
                    iter.next();
                }
                return (est_end, avail - need);
            }
        }
        // Unreachable when need ≤ N; be defensive: no backfilling.
        (Seconds::MAX, 0)
    }
}

fn run(jobs: &[SimJob], procs: u64, policy: QueuePolicy, outcomes: &mut [JobOutcome], progress: &mut dyn FnMut(usize, usize)) -> RunStats {
    let total = jobs.len();
    // Arrival order: submit time, ties in trace order (stable sort).
    let mut arrivals: Vec<usize> = (0..total).collect();
    if !jobs.windows(2).all(|w| w[0].submit <= w[1].submit) {
        arrivals.sort_by_key(|&i| jobs[i].submit);
    }
    let easy = policy == QueuePolicy::Easy;
    let mut cl = Cluster {
        jobs,
        outcomes,
        free: procs,
        running: BinaryHeap::with_capacity(1024),
        by_est: BTreeMap::new(),
        track_estimates: easy,
    };
    let mut queue: VecDeque<Queued> = VecDeque::with_capacity(1024);
    let mut next_arrival = 0usize;
    let mut stats = RunStats {
        events: 0,
        passes: 0,
        max_queue_len: 0,
    };
    let mut finished = 0usize;
    let mut until_progress = PROGRESS_EVERY;

    loop {
        let next_end = cl.running.peek().map(|r| r.0.end);
        let next_arr = arrivals.get(next_arrival).map(|&i| jobs[i].submit);
        let now = match (next_end, next_arr) {
            (None, None) => break,
            (Some(e), None) => e,
            (None, Some(a)) => a,
            (Some(e), Some(a)) => e.min(a),
        };
        // 1. All ends at `now`.
        while let Some(&Reverse(r)) = cl.running.peek() {
            if r.end != now {
                break;
            }
            cl.running.pop();
            cl.free += r.procs;
            if easy {
                cl.by_est.remove(&(r.est_end, r.idx));
            }
            stats.events += 1;
            finished += 1;
            until_progress -= 1;
            if until_progress == 0 {
                until_progress = PROGRESS_EVERY;
                progress(finished, total);
            }
        }
        // 2. All arrivals at `now`.
        while let Some(&i) = arrivals.get(next_arrival) {
            if jobs[i].submit != now {
                break;
            }
            queue.push_back(Queued {
                estimate: jobs[i].estimate,
                procs: jobs[i].procs,
                idx: i,
            });
            next_arrival += 1;
            stats.events += 1;
        }
        stats.max_queue_len = stats.max_queue_len.max(queue.len());
        // 3. One scheduling pass.
        stats.passes += 1;
        while let Some(&head) = queue.front() {
            if head.procs > cl.free {
                break;
            }
            queue.pop_front();
            cl.start(now, head);
        }
        if easy && cl.free > 0 && queue.len() > 1 {
            let (shadow, mut extra) = cl.reservation(queue[0].procs);
            let mut i = 1;
            while i < queue.len() && cl.free > 0 {
                let q = queue[i];
                if q.procs <= cl.free {
                    let by_shadow = now.saturating_add(q.estimate) <= shadow;
                    if by_shadow || q.procs <= extra {
                        if !by_shadow {
                            extra -= q.procs;
                        }
                        queue.remove(i);
                        cl.start(now, q);
                        continue;
                    }
                }
                i += 1;
            }
        }
    }
    progress(finished, total);
    stats
}

fn finish(policy: QueuePolicy, procs: u64, jobs: Vec<JobOutcome>, dropped: DroppedCounts, stats: RunStats) -> SingleResult {
    let n = jobs.len();
    let (mut first_submit, mut last_end) = (Seconds::MAX, 0);
    let (mut work, mut wait, mut bsld) = (0u128, 0f64, 0f64);
    for j in &jobs {
        first_submit = first_submit.min(j.submit);
        last_end = last_end.max(j.end);
        work += u128::from(j.procs) * u128::from(j.runtime());
        wait += j.wait() as f64;
        bsld += j.bounded_slowdown(BSLD_THRESHOLD_S);
    }
    let makespan = if n == 0 { 0 } else { last_end.saturating_sub(first_submit) };
    let capacity = u128::from(procs) * u128::from(makespan);
    let mean = |s: f64| if n == 0 { 0.0 } else { s / n as f64 };
    SingleResult {
        policy,
        cluster_procs: procs,
        jobs,
        dropped,
        events: stats.events,
        passes: stats.passes,
        max_queue_len: stats.max_queue_len,
        makespan,
        utilization: if capacity == 0 { 0.0 } else { work as f64 / capacity as f64 },
        mean_wait: mean(wait),
        mean_bounded_slowdown: mean(bsld),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(job: u64, submit: i64, run: i64, req_procs: i64, alloc: i64, req_time: i64) -> SwfRecord {
        SwfRecord {
            job_number: job,
            submit_s: submit,
            wait_s: -1,
            run_s: run,
            allocated_procs: alloc,
            avg_cpu_s: -1.0,
            used_memory_kb: -1.0,
            requested_procs: req_procs,
            requested_time_s: req_time,
            requested_memory_kb: -1.0,
            status: 1,
            user: 1,
            group: 1,
            executable: -1,
            queue: -1,
            partition: -1,
            preceding_job: -1,
            think_time_s: -1,
        }
    }

    #[test]
    fn job_parameter_rules() {
        let j = sim_job(&rec(1, 5, 100, -1, 4, -1), 10).unwrap();
        assert_eq!((j.procs, j.runtime, j.estimate), (4, 100, 100));
        let j = sim_job(&rec(1, 5, 100, 3, 4, 50), 10).unwrap();
        assert_eq!((j.procs, j.estimate), (3, 100));
        let j = sim_job(&rec(1, 5, 100, 3, 4, 500), 10).unwrap();
        assert_eq!(j.estimate, 500);
        assert_eq!(sim_job(&rec(1, 5, 0, 3, 4, 5), 10), Err(DropReason::NoRuntime));
        assert_eq!(sim_job(&rec(1, 5, 0, -1, -1, 5), 10), Err(DropReason::NoRuntime));
        assert_eq!(sim_job(&rec(1, 5, 1, -1, -1, 5), 10), Err(DropReason::NoProcs));
        assert_eq!(sim_job(&rec(1, 5, 1, 11, 4, 5), 10), Err(DropReason::TooWide));
    }

    #[test]
    fn policy_from_str() {
        assert_eq!("fcfs".parse::<QueuePolicy>(), Ok(QueuePolicy::Fcfs));
        assert_eq!(" EASY ".parse::<QueuePolicy>(), Ok(QueuePolicy::Easy));
        let err = "sjf".parse::<QueuePolicy>().unwrap_err().to_string();
        assert!(err.contains("sjf") && err.contains("fcfs") && err.contains("easy"));
        assert_eq!(QueuePolicy::Easy.to_string(), "easy");
    }

    #[test]
    fn empty_trace() {
        let r = simulate(&SwfTrace::default(), 10, QueuePolicy::Easy);
        assert_eq!(r.jobs.len(), 0);
        assert_eq!(r.makespan, 0);
        assert_eq!(r.utilization, 0.0);
        assert_eq!(r.mean_wait, 0.0);
    }

    #[test]
    fn huge_values_do_not_panic() {
        let mut t = SwfTrace::default();
        t.records.push(rec(1, i64::MAX, i64::MAX, 1, 1, i64::MAX));
        t.records.push(rec(2, i64::MAX, i64::MAX, 1, 1, -1));
        t.records.push(rec(3, 0, i64::MAX, 1, 1, -1));
        for p in [QueuePolicy::Fcfs, QueuePolicy::Easy] {
            let r = simulate(&t, 1, p);
            assert_eq!(r.jobs.len(), 3);
        }
        assert_eq!(simulate(&t, 0, QueuePolicy::Easy).dropped.too_wide, 3);
    }
}
