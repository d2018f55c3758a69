//! Background (local user) load for one site's [`LocalRm`].
//!
//! Two sources:
//!
//! * [`BandGenerator`] keeps the site's local utilization inside a band, the way the KOALA
//!   experiments did (003 §5.1.3: "we try to maintain it at 30% in each cluster … we allow this
//!   value to increase up to 40%. When this utilization falls below 30% … we inject dummy jobs …
//!   When this utilization rises above 40% with some of this utilization contributed by our
//!   dummy jobs, we kill the dummy jobs"). Optionally it also produces a Poisson stream of
//!   ordinary ("organic") local jobs so the LRM's queue sees real contention.
//! * [`TraceBackground`] replays a workload trace (already parsed into [`LocalJobSpec`]s) as
//!   local jobs of one site.
//!
//! Both are driven by the caller's event loop: ask for the next time they need attention
//! ([`BandGenerator::next_tick`], [`TraceBackground::next_arrival`]) and call them at that time.
//! All randomness comes from the [`Rng`] passed in.

use serde::{Deserialize, Serialize};

use crate::lrm::{LocalJob, LocalJobId, LocalJobState, LocalRm, Millis};
use crate::rng::Rng;

// ============================================================================================
// Band generator
// ============================================================================================

/// Optional stream of ordinary local jobs produced by a [`BandGenerator`].
///
/// Arrivals are Poisson (exponential inter-arrival times); sizes uniform in
/// `1..=max(1, floor(P · max_job_fraction))`; runtimes exponential (at least 1 s); estimates are
/// the runtime times a factor uniform in `[1, estimate_factor_max]`, rounded up.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct OrganicSpec {
    /// Mean time between arrivals.
    pub mean_interarrival_ms: f64,
    /// Mean runtime.
    pub mean_runtime_ms: f64,
    /// Largest job as a fraction of the site's processors.
    pub max_job_fraction: f64,
    /// Estimates overestimate the runtime by a factor uniform in `[1, estimate_factor_max]`.
    pub estimate_factor_max: f64,
}

impl Default for OrganicSpec {
    /// One arrival every 5 min, 10-minute mean runtime, jobs up to 1/8 of the site, estimates up
    /// to 2× the runtime (≈ 13% utilization on average with the band defaults).
    fn default() -> Self {
        OrganicSpec {
            mean_interarrival_ms: 300_000.0,
            mean_runtime_ms: 600_000.0,
            max_job_fraction: 0.125,
            estimate_factor_max: 2.0,
        }
    }
}

/// Parameters of a [`BandGenerator`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BandSpec {
    /// Lower edge of the band (fraction of the site's processors used by local jobs).
    pub low: f64,
    /// Upper edge of the band.
    pub high: f64,
    /// How often the utilization is checked.
    pub check_interval_ms: Millis,
    /// Mean runtime of injected dummy jobs (exponentially distributed, at least 1 s).
    pub mean_runtime_ms: f64,
    /// Largest injected job as a fraction of the site's processors (at least 1 processor).
    pub max_job_fraction: f64,
    /// Optional stream of ordinary local jobs (`None`: only injected jobs).
    pub organic: Option<OrganicSpec>,
}

impl Default for BandSpec {
    /// The KOALA experiments' band: 30%–40%, checked every 10 s, dummy jobs of mean 10 min and
    /// up to 1/8 of the site, no organic jobs.
    fn default() -> Self {
        BandSpec {
            low: 0.30,
            high: 0.40,
            check_interval_ms: 10_000,
            mean_runtime_ms: 600_000.0,
            max_job_fraction: 0.125,
            organic: None,
        }
    }
}

/// Counters kept by a [`BandGenerator`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BandStats {
    /// Utilization checks performed.
    pub checks: u64,
    /// Checks that found the utilization below the band.
    pub checks_below: u64,
    /// Checks that found the utilization above the band.
    pub checks_above: u64,
    /// Dummy jobs injected (and started).
    pub injected_jobs: u64,
    /// Dummy jobs killed to bring the utilization down.
    pub killed_jobs: u64,
    /// Injection attempts abandoned because the LRM would not start the dummy job at once
    /// (e.g. a blocked FCFS queue or a reservation window); the dummy job was withdrawn.
    pub blocked_injections: u64,
    /// Organic local jobs submitted.
    pub organic_jobs: u64,
    /// Organic jobs the LRM refused (larger than the site).
    pub organic_rejected: u64,
    /// Longest time the utilization was seen above `high` after acting (consecutive checks); the
    /// KOALA experiments were void if this exceeded one minute.
    pub longest_above_high_ms: Millis,
}

/// Keeps one site's local utilization within `[low, high]` by injecting and killing dummy jobs.
///
/// At every check (every `check_interval_ms`) the generator looks at `busy_local / P`:
/// * below `low`: it injects dummy jobs (`injected = true`, estimate = runtime) of random size
///   `1..=max(1, floor(P · max_job_fraction))`, clipped to the remaining deficit and to the
///   processors free now, until the utilization reaches the middle of the band. A dummy job the
///   LRM would not start immediately is withdrawn (killed while queued) and injection stops for
///   this check, so dummy jobs never pile up in the queue;
/// * above `high`: it kills its running dummy jobs, newest first, until the utilization is at
///   most `high` or none are left.
///
/// "Utilization" counts all local jobs, organic and injected, but not grid claims. Integer
/// thresholds: below the band means `busy < ceil(low · P)`, above means `busy > floor(high · P)`.
#[derive(Clone, Debug)]
pub struct BandGenerator {
    spec: BandSpec,
    next_check: Millis,
    next_organic: Option<Millis>,
    /// Injected jobs, oldest first (may include ones that already ended).
    injected: Vec<LocalJobId>,
    above_since: Option<Millis>,
    stats: BandStats,
}

impl BandGenerator {
    /// A generator whose first tick (check and, with organic jobs, first arrival draw) is at
    /// `start_ms`.
    pub fn new(spec: BandSpec, start_ms: Millis) -> Self {
        assert!(
            0.0 <= spec.low && spec.low <= spec.high && spec.high <= 1.0,
            "band must satisfy 0 ≤ low ≤ high ≤ 1"
        );
        assert!(spec.check_interval_ms > 0, "check interval must be positive");
        BandGenerator {
            spec,
            next_check: start_ms,
            next_organic: None,
            injected: Vec::new(),
            above_since: None,
            stats: BandStats::default(),
        }
    }

    /// The parameters.
    pub fn spec(&self) -> &BandSpec {
        &self.spec
    }

    /// The counters.
    pub fn stats(&self) -> &BandStats {
        &self.stats
    }

    /// When [`BandGenerator::on_tick`] should be called next.
    pub fn next_tick(&self) -> Millis {
        match self.next_organic {
            Some(t) => t.min(self.next_check),
            None => self.next_check,
        }
    }

    /// Submits organic arrivals due by `now`, checks the band if a check is due, and returns the
    /// time of the next tick. Calling it early is harmless (nothing is due). It first brings the
    /// LRM up to `now` with [`LocalRm::sync`]; LRM events stay buffered for the caller.
    pub fn on_tick(&mut self, now: Millis, lrm: &mut LocalRm, rng: &mut Rng) -> Millis {
        lrm.sync(now);
        let now = lrm.now();
        if let Some(org) = self.spec.organic {
            let mut next = match self.next_organic {
                Some(t) => t,
                None => now + draw_ms(rng, org.mean_interarrival_ms, 1),
            };
            while next <= now {
                self.submit_organic(now, &org, lrm, rng);
                next += draw_ms(rng, org.mean_interarrival_ms, 1);
            }
            self.next_organic = Some(next);
        }
        if now >= self.next_check {
            self.check(now, lrm, rng);
            while self.next_check <= now {
                self.next_check += self.spec.check_interval_ms;
            }
        }
        self.next_tick()
    }

    fn submit_organic(&mut self, now: Millis, org: &OrganicSpec, lrm: &mut LocalRm, rng: &mut Rng) {
        let size = draw_size(rng, lrm.capacity(), org.max_job_fraction);
        let runtime = draw_ms(rng, org.mean_runtime_ms, 1000);
        let factor = 1.0 + (org.estimate_factor_max.max(1.0) - 1.0) * rng.uniform();
        let estimate = ((runtime as f64) * factor).ceil() as Millis;
        match lrm.submit_local(now, LocalJob::new(size, runtime, estimate.max(runtime))) {
            Ok(_) => self.stats.organic_jobs += 1,
            Err(_) => self.stats.organic_rejected += 1,
        }
    }

    fn check(&mut self, now: Millis, lrm: &mut LocalRm, rng: &mut Rng) {
        self.stats.checks += 1;
        // Forget dummy jobs that have ended on their own.
        self.injected
            .retain(|&id| lrm.job(id).map(|r| r.state) == Some(LocalJobState::Running));
        let cap = lrm.capacity();
        let capf = f64::from(cap);
        let low_n = ((self.spec.low * capf) - 1e-9).ceil().max(0.0) as u32;
        // A band narrower than one processor keeps at least the lower edge.
        let high_n = (((self.spec.high * capf) + 1e-9).floor().min(capf) as u32).max(low_n);
        let target = ((0.5 * (self.spec.low + self.spec.high) * capf).round() as u32).clamp(low_n, high_n);
        if lrm.busy_local() < low_n {
            self.stats.checks_below += 1;
            self.inject(now, target, lrm, rng);
        } else if lrm.busy_local() > high_n {
            self.stats.checks_above += 1;
            self.kill(now, high_n, lrm);
        }
        if lrm.busy_local() > high_n {
            let since = *self.above_since.get_or_insert(now);
            self.stats.longest_above_high_ms = self.stats.longest_above_high_ms.max(now - since);
        } else {
            self.above_since = None;
        }
    }

    fn inject(&mut self, now: Millis, target: u32, lrm: &mut LocalRm, rng: &mut Rng) {
        let max_size = max_size(lrm.capacity(), self.spec.max_job_fraction);
        while lrm.busy_local() < target {
            let free = lrm.free_now();
            if free == 0 {
                break;
            }
            let size = (rng.range_inclusive_u64(1, u64::from(max_size)) as u32)
                .min(target - lrm.busy_local())
                .min(free);
            let runtime = draw_ms(rng, self.spec.mean_runtime_ms, 1000);
            let Ok(id) = lrm.submit_local(now, LocalJob::injected(size, runtime, runtime)) else {
                break;
            };
            if lrm.job(id).map(|r| r.state) != Some(LocalJobState::Running) {
                lrm.kill_local(now, id);
                self.stats.blocked_injections += 1;
                break;
            }
            self.injected.push(id);
            self.stats.injected_jobs += 1;
        }
    }

    fn kill(&mut self, now: Millis, high_n: u32, lrm: &mut LocalRm) {
        while lrm.busy_local() > high_n {
            let Some(id) = self.injected.pop() else {
                break;
            };
            if lrm.job(id).map(|r| r.state) == Some(LocalJobState::Running) && lrm.kill_local(now, id) {
                self.stats.killed_jobs += 1;
            }
        }
    }
}

/// `1..=max(1, floor(P · fraction))` upper bound, never above `P` (`P ≥ 1`).
fn max_size(cap: u32, fraction: f64) -> u32 {
    ((f64::from(cap) * fraction).floor() as u32).clamp(1, cap.max(1))
}

fn draw_size(rng: &mut Rng, cap: u32, fraction: f64) -> u32 {
    rng.range_inclusive_u64(1, u64::from(max_size(cap, fraction))) as u32
}

/// Exponential draw with the given mean, rounded, at least `min`.
fn draw_ms(rng: &mut Rng, mean: f64, min: Millis) -> Millis {
    (rng.exponential(mean.max(0.0)).round() as Millis).max(min)
}

// ============================================================================================
// Trace replay
// ============================================================================================

/// One job of a background trace (times in the trace's own clock, milliseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalJobSpec {
    /// Submission time in the trace.
    pub submit_ms: Millis,
    /// Processors.
    pub procs: u32,
    /// Actual runtime.
    pub runtime_ms: Millis,
    /// User estimate (raised to the runtime if smaller).
    pub estimate_ms: Millis,
}

/// What to do with trace jobs larger than the site.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum OversizePolicy {
    /// Shrink them to the site's size (counted in [`TraceStats::clipped`]).
    #[default]
    Clip,
    /// Drop them (counted in [`TraceStats::dropped_oversize`]).
    Drop,
}

/// How trace times map to simulation times:
/// `arrival = round(submit_ms · time_scale) + shift_ms`; jobs arriving before 0 are dropped.
/// Runtimes and estimates are not scaled.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceOptions {
    /// Added to every (scaled) submission time; negative values skip the trace's beginning.
    pub shift_ms: i64,
    /// Multiplies submission times (< 1 compresses inter-arrival times: more load).
    pub time_scale: f64,
    /// Jobs larger than the site.
    pub oversize: OversizePolicy,
}

impl Default for TraceOptions {
    /// No shift, no scaling, clip oversized jobs.
    fn default() -> Self {
        TraceOptions {
            shift_ms: 0,
            time_scale: 1.0,
            oversize: OversizePolicy::Clip,
        }
    }
}

/// Counters kept by a [`TraceBackground`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceStats {
    /// Jobs in the input.
    pub input: usize,
    /// Jobs larger than the site shrunk to its size.
    pub clipped: usize,
    /// Jobs larger than the site dropped.
    pub dropped_oversize: usize,
    /// Jobs asking for 0 processors dropped.
    pub dropped_invalid: usize,
    /// Jobs whose shifted arrival fell before time 0 dropped.
    pub dropped_before_start: usize,
    /// Jobs submitted to the LRM so far.
    pub submitted: usize,
}

/// Replays a trace's jobs into one site's LRM as ordinary local jobs.
#[derive(Clone, Debug)]
pub struct TraceBackground {
    /// Jobs to submit, with simulation arrival times, sorted by arrival (stable).
    jobs: Vec<LocalJobSpec>,
    next: usize,
    stats: TraceStats,
}

impl TraceBackground {
    /// Prepares `jobs` for a site of `site_procs` processors (see [`TraceOptions`]).
    pub fn new(jobs: Vec<LocalJobSpec>, site_procs: u32, opts: TraceOptions) -> Self {
        assert!(opts.time_scale.is_finite() && opts.time_scale > 0.0, "time_scale must be positive");
        let mut stats = TraceStats {
            input: jobs.len(),
            ..TraceStats::default()
        };
        let mut out = Vec::with_capacity(jobs.len());
        for mut j in jobs {
            if j.procs == 0 {
                stats.dropped_invalid += 1;
                continue;
            }
            if j.procs > site_procs {
                match opts.oversize {
                    OversizePolicy::Drop => {
                        stats.dropped_oversize += 1;
                        continue;
                    }
                    OversizePolicy::Clip if site_procs > 0 => {
                        stats.clipped += 1;
                        j.procs = site_procs;
                    }
                    OversizePolicy::Clip => {
                        stats.dropped_oversize += 1;
                        continue;
                    }
                }
            }
            let arrival = (j.submit_ms as f64 * opts.time_scale).round() as i64 + opts.shift_ms;
            if arrival < 0 {
                stats.dropped_before_start += 1;
                continue;
            }
            j.submit_ms = arrival as Millis;
            j.estimate_ms = j.estimate_ms.max(j.runtime_ms);
            out.push(j);
        }
        out.sort_by_key(|j| j.submit_ms);
        TraceBackground { jobs: out, next: 0, stats }
    }

    /// The counters.
    pub fn stats(&self) -> &TraceStats {
        &self.stats
    }

    /// The prepared jobs (simulation arrival times), in arrival order.
    pub fn jobs(&self) -> &[LocalJobSpec] {
        &self.jobs
    }

    /// Jobs not yet submitted.
    pub fn remaining(&self) -> usize {
        self.jobs.len() - self.next
    }

    /// Arrival time of the next job to submit, if any.
    pub fn next_arrival(&self) -> Option<Millis> {
        self.jobs.get(self.next).map(|j| j.submit_ms)
    }

    /// Submits every job arriving at or before `now`, each at its own arrival time (or at the
    /// LRM's current time if that is later). Returns how many were submitted.
    pub fn release_due(&mut self, now: Millis, lrm: &mut LocalRm) -> usize {
        let mut n = 0;
        while let Some(j) = self.jobs.get(self.next).copied() {
            if j.submit_ms > now {
                break;
            }
            self.next += 1;
            let at = j.submit_ms.max(lrm.now());
            if lrm.submit_local(at, LocalJob::new(j.procs, j.runtime_ms, j.estimate_ms)).is_ok() {
                n += 1;
            } else {
                // Only if the LRM is smaller than the `site_procs` given to `new`.
                self.stats.dropped_oversize += 1;
            }
        }
        self.stats.submitted += n;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lrm::{GridKey, LocalPolicy, LrmConfig};

    const HOUR: Millis = 3_600_000;

    fn site(procs: u32, policy: LocalPolicy) -> LocalRm {
        LocalRm::new(LrmConfig {
            procs,
            policy,
            supports_reservations: true,
        })
    }

    /// Drives an LRM and a band generator until `end`; returns the fraction of checks that saw
    /// the utilization (after acting) above `high`.
    fn run_band(lrm: &mut LocalRm, gen: &mut BandGenerator, rng: &mut Rng, end: Millis) {
        loop {
            let t = lrm.next_event_time().map_or(gen.next_tick(), |e| e.min(gen.next_tick()));
            if t > end {
                break;
            }
            lrm.advance(t);
            if t >= gen.next_tick() {
                gen.on_tick(t, lrm, rng);
            }
            lrm.check_invariants().unwrap();
        }
        lrm.advance(end);
    }

    #[test]
    fn band_keeps_time_averaged_utilization_in_band_over_six_hours() {
        for (seed, policy) in [
            (1, LocalPolicy::EasyBackfill),
            (2, LocalPolicy::Fcfs),
            (3, LocalPolicy::EasyBackfill),
        ] {
            let mut rng = Rng::new(seed);
            let mut lrm = site(100, policy);
            let spec = BandSpec {
                organic: Some(OrganicSpec::default()),
                ..BandSpec::default()
            };
            let mut gen = BandGenerator::new(spec, 0);
            let end = 6 * HOUR;
            run_band(&mut lrm, &mut gen, &mut rng, end);
            let avg = lrm.local_busy_proc_ms(end) as f64 / (100.0 * end as f64);
            eprintln!("seed {seed} {policy:?}: avg {avg:.4} {:?}", gen.stats());
            let s = *gen.stats();
            assert!((0.28..=0.42).contains(&avg), "seed {seed}: average local utilization {avg}, {s:?}");
            assert!(s.organic_jobs > 30, "{s:?}");
            assert!(s.injected_jobs > 10, "{s:?}");
            assert!(s.checks >= 6 * 360, "{s:?}");
            let organic = lrm.local_busy_proc_ms(end) - lrm.injected_busy_proc_ms(end);
            assert!(organic > 0);
        }
    }

    #[test]
    fn band_kills_injected_jobs_when_organic_load_pushes_above() {
        let mut rng = Rng::new(7);
        let mut lrm = site(100, LocalPolicy::EasyBackfill);
        let mut gen = BandGenerator::new(BandSpec::default(), 0);
        assert_eq!(gen.on_tick(0, &mut lrm, &mut rng), 10_000);
        assert_eq!(lrm.busy_local(), 35, "injects up to the band middle");
        assert_eq!(lrm.busy_injected(), 35);
        // Local users arrive with 30 processors' worth of long jobs: 65%.
        for _ in 0..3 {
            lrm.submit_local(1_000, LocalJob::new(10, 4 * HOUR, 4 * HOUR)).unwrap();
        }
        assert_eq!(lrm.busy_local(), 65);
        gen.on_tick(10_000, &mut lrm, &mut rng);
        let s = *gen.stats();
        assert!(lrm.busy_local() <= 40, "busy {}", lrm.busy_local());
        assert!(lrm.busy_local() >= 30);
        assert!(s.killed_jobs > 0);
        assert_eq!(s.checks_above, 1);
        assert_eq!(lrm.busy_local() - lrm.busy_injected(), 30);
        // Newest first: the surviving dummy jobs are the oldest ones.
        let killed: Vec<_> = lrm
            .jobs()
            .iter()
            .filter(|r| r.state == LocalJobState::Killed)
            .map(|r| r.id)
            .collect();
        let alive_injected: Vec<_> = lrm
            .jobs()
            .iter()
            .filter(|r| r.injected && r.state == LocalJobState::Running)
            .map(|r| r.id)
            .collect();
        assert!(alive_injected.iter().all(|a| killed.iter().all(|k| a < k)));
    }

    #[test]
    fn band_reports_organic_overload_it_cannot_fix() {
        let mut rng = Rng::new(8);
        let mut lrm = site(100, LocalPolicy::Fcfs);
        let mut gen = BandGenerator::new(BandSpec::default(), 0);
        lrm.submit_local(0, LocalJob::new(60, HOUR, HOUR)).unwrap();
        let mut t = 0;
        for _ in 0..10 {
            t = gen.on_tick(t, &mut lrm, &mut rng);
        }
        let s = *gen.stats();
        assert_eq!(s.injected_jobs, 0);
        assert_eq!(s.killed_jobs, 0);
        assert_eq!(s.checks_above, 10);
        assert_eq!(s.longest_above_high_ms, 90_000);
    }

    #[test]
    fn band_does_not_queue_dummy_jobs() {
        let mut rng = Rng::new(9);
        let mut lrm = site(10, LocalPolicy::Fcfs);
        lrm.claim(0, GridKey(1, 0), 7).unwrap();
        lrm.submit_local(0, LocalJob::new(5, HOUR, HOUR)).unwrap(); // blocked head
        let mut gen = BandGenerator::new(BandSpec::default(), 0);
        gen.on_tick(0, &mut lrm, &mut rng);
        assert_eq!(lrm.queued_local(), 1);
        assert_eq!(lrm.busy_local(), 0);
        assert_eq!(gen.stats().blocked_injections, 1);
        assert_eq!(gen.stats().injected_jobs, 0);
        // Once the grid releases, the organic head starts and no dummy is needed below 3.
        lrm.release(5_000, GridKey(1, 0));
        gen.on_tick(10_000, &mut lrm, &mut rng);
        assert_eq!(lrm.busy_local(), 5, "50% is above the band: nothing injected");
    }

    #[test]
    fn band_generator_is_deterministic() {
        let run = |seed| {
            let mut rng = Rng::new(seed);
            let mut lrm = site(64, LocalPolicy::EasyBackfill);
            let spec = BandSpec {
                organic: Some(OrganicSpec::default()),
                ..BandSpec::default()
            };
            let mut gen = BandGenerator::new(spec, 0);
            run_band(&mut lrm, &mut gen, &mut rng, HOUR);
            lrm.jobs().to_vec()
        };
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6));
    }

    fn spec(submit_ms: Millis, procs: u32, runtime_ms: Millis, estimate_ms: Millis) -> LocalJobSpec {
        LocalJobSpec {
            submit_ms,
            procs,
            runtime_ms,
            estimate_ms,
        }
    }

    #[test]
    fn trace_clips_drops_and_transforms_times() {
        let jobs = vec![
            spec(3_000, 4, 100, 50),
            spec(1_000, 20, 100, 100),
            spec(2_000, 0, 100, 100),
            spec(0, 2, 100, 100),
        ];
        let tb = TraceBackground::new(jobs.clone(), 16, TraceOptions::default());
        let s = *tb.stats();
        assert_eq!((s.input, s.clipped, s.dropped_invalid), (4, 1, 1));
        let arr: Vec<_> = tb.jobs().iter().map(|j| (j.submit_ms, j.procs)).collect();
        assert_eq!(arr, vec![(0, 2), (1_000, 16), (3_000, 4)]);
        assert_eq!(tb.jobs()[2].estimate_ms, 100, "estimate raised to the runtime");

        let opts = TraceOptions {
            shift_ms: -1_000,
            time_scale: 0.5,
            oversize: OversizePolicy::Drop,
        };
        let tb = TraceBackground::new(jobs, 16, opts);
        let s = *tb.stats();
        assert_eq!((s.dropped_oversize, s.dropped_before_start), (1, 1));
        let arr: Vec<_> = tb.jobs().iter().map(|j| j.submit_ms).collect();
        assert_eq!(arr, vec![500]);
    }

    #[test]
    fn trace_releases_jobs_at_their_arrival_times() {
        let jobs = vec![
            spec(0, 8, 1_000, 1_000),
            spec(100, 8, 1_000, 1_000),
            spec(200, 4, 500, 500),
            spec(5_000, 1, 10, 10),
        ];
        let mut tb = TraceBackground::new(jobs, 8, TraceOptions::default());
        let mut lrm = site(8, LocalPolicy::Fcfs);
        assert_eq!(tb.next_arrival(), Some(0));
        assert_eq!(tb.release_due(0, &mut lrm), 1);
        assert_eq!(tb.next_arrival(), Some(100));
        // Called late: each job is still submitted at its own arrival time.
        assert_eq!(tb.release_due(300, &mut lrm), 2);
        let subs: Vec<_> = lrm.jobs().iter().map(|r| r.submit_ms).collect();
        assert_eq!(subs, vec![0, 100, 200]);
        assert_eq!(tb.remaining(), 1);
        loop {
            let next = [tb.next_arrival(), lrm.next_event_time()].into_iter().flatten().min();
            let Some(t) = next else { break };
            lrm.advance(t);
            tb.release_due(t, &mut lrm);
        }
        let starts: Vec<_> = lrm.jobs().iter().map(|r| r.start_ms.unwrap()).collect();
        assert_eq!(starts, vec![0, 1_000, 2_000, 5_000]);
        assert_eq!(tb.stats().submitted, 4);
    }
}
