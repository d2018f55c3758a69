//! Benchmark of the single-cluster simulator: read an SWF trace and simulate
//! it, several times, timing each phase. Used by `koalesce bench easy`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::single_cluster::{simulate, QueuePolicy, SingleResult};
use crate::swf::{read_swf, SwfError};

/// Minimum and median of a set of timings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimingStats {
    /// Fastest repeat.
    pub min: Duration,
    /// Median repeat (mean of the two middle ones for an even count).
    pub median: Duration,
}

impl TimingStats {
    /// Statistics of `samples` (all zero when empty).
    pub fn from_samples(samples: &[Duration]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        let mut s = samples.to_vec();
        s.sort();
        let n = s.len();
        let median = if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2 };
        TimingStats { min: s[0], median }
    }
}

/// Result of [`bench_single_cluster`].
#[derive(Debug, Clone)]
pub struct BenchReport {
    /// Trace file.
    pub trace: PathBuf,
    /// Cluster size.
    pub procs: u64,
    /// Policy simulated.
    pub policy: QueuePolicy,
    /// Number of repeats measured.
    pub repeats: usize,
    /// Job records read (placeholders excluded).
    pub records: usize,
    /// Jobs simulated.
    pub jobs: usize,
    /// Jobs dropped by the simulator.
    pub dropped: usize,
    /// Events (arrivals + ends) per simulation.
    pub events: u64,
    /// Time to read and parse the trace.
    pub read: TimingStats,
    /// Time to simulate.
    pub simulate: TimingStats,
    /// Time of read + simulate, per repeat.
    pub total: TimingStats,
    /// Events per second of simulation (median simulate time).
    pub events_per_sec: f64,
    /// Peak resident set size of the process (`VmHWM`), KiB; `None` if unknown.
    pub peak_rss_kib: Option<u64>,
    /// Makespan of the simulated schedule, seconds.
    pub makespan_s: u64,
    /// Utilization of the simulated schedule.
    pub utilization: f64,
    /// Mean wait, seconds.
    pub mean_wait_s: f64,
    /// Mean bounded slowdown (10 s).
    pub mean_bounded_slowdown: f64,
}

/// Peak resident set size of this process in KiB (`VmHWM` in
/// `/proc/self/status`); `None` where unavailable (non-Linux).
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line["VmHWM:".len()..].split_ascii_whitespace().next()?.parse().ok()
}

/// Reads and simulates `trace` `repeats` times (at least once), timing the
/// read and the simulation separately.
pub fn bench_single_cluster(trace: &Path, procs: u64, policy: QueuePolicy, repeats: usize) -> Result<BenchReport, SwfError> {
    let repeats = repeats.max(1);
    let mut reads = Vec::with_capacity(repeats);
    let mut sims = Vec::with_capacity(repeats);
    let mut totals = Vec::with_capacity(repeats);
    let mut last: Option<(usize, SingleResult)> = None;
    for _ in 0..repeats {
        // Drop the previous result first so repeats do not stack memory.
        drop(last.take());
        let t0 = Instant::now();
        let swf = read_swf(trace)?;
        let t1 = Instant::now();
        let result = simulate(&swf, procs, policy);
        let t2 = Instant::now();
        reads.push(t1 - t0);
        sims.push(t2 - t1);
        totals.push(t2 - t0);
        last = Some((swf.records.len(), result));
    }
    let (records, result) = last.expect("repeats >= 1");
    let simulate = TimingStats::from_samples(&sims);
    let secs = simulate.median.as_secs_f64();
    Ok(BenchReport {
        trace: trace.to_path_buf(),
        procs,
        policy,
        repeats,
        records,
        jobs: result.jobs.len(),
        dropped: result.dropped.total(),
        events: result.events,
        read: TimingStats::from_samples(&reads),
        simulate,
        total: TimingStats::from_samples(&totals),
        events_per_sec: if secs > 0.0 { result.events as f64 / secs } else { 0.0 },
        peak_rss_kib: peak_rss_kib(),
        makespan_s: result.makespan,
        utilization: result.utilization,
        mean_wait_s: result.mean_wait,
        mean_bounded_slowdown: result.mean_bounded_slowdown,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "trace      {}", self.trace.display())?;
        writeln!(
            f,
            "setup      {} processors, policy {}, {} repeat(s)",
            self.procs, self.policy, self.repeats
        )?;
        writeln!(
            f,
            "jobs       {} records, {} simulated, {} dropped, {} events",
            self.records, self.jobs, self.dropped, self.events
        )?;
        writeln!(f, "phase          min (ms)   median (ms)")?;
        for (name, t) in [("read", self.read), ("simulate", self.simulate), ("total", self.total)] {
            writeln!(f, "{name:<10} {:>12.2} {:>13.2}", ms(t.min), ms(t.median))?;
        }
        writeln!(f, "events/s   {:.3e} (median simulate)", self.events_per_sec)?;
        match self.peak_rss_kib {
            Some(k) => writeln!(f, "peak RSS   {:.1} MiB", k as f64 / 1024.0)?,
            None => writeln!(f, "peak RSS   unknown")?,
        }
        write!(
            f,
            "schedule   makespan {} s, utilization {:.4}, mean wait {:.1} s, mean bsld {:.3}",
            self.makespan_s, self.utilization, self.mean_wait_s, self.mean_bounded_slowdown
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_stats() {
        let d = Duration::from_millis;
        let s = TimingStats::from_samples(&[d(5), d(1), d(3)]);
        assert_eq!((s.min, s.median), (d(1), d(3)));
        let s = TimingStats::from_samples(&[d(4), d(1), d(2), d(3)]);
        assert_eq!(s.median, Duration::from_micros(2500));
        assert_eq!(TimingStats::from_samples(&[]), TimingStats::default());
    }

    #[test]
    fn rss_is_readable_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(peak_rss_kib().unwrap() > 0);
        }
    }
}
