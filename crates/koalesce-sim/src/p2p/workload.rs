//! The workloads of 002 §IV-B built from our real traces.
//!
//! The seed drove each server Si with its own 3-month log Wi (Table II); those logs are not
//! public, so each server gets a window of one of our traces ([`super::grid::SERVER_TRACE`]):
//!
//! * **Sizes.** A job's processors are scaled by server CPUs / trace processors (so it occupies
//!   the same fraction of the machine) and rounded up to whole nodes, which the seed allocates
//!   ("allocate each node to a single application", §IV-A). Its CPUs are then nodes × CPUs per
//!   node of its home server; a migrated job needs ⌈CPUs / CPUs per node⌉ nodes elsewhere.
//! * **Load.** Table II gives each workload's jobs and average input size at B = 1 KB per
//!   CPU-second, hence its total work (CPU-seconds). A window starts at a random time of the
//!   trace (drawn from the run's seed) and takes consecutive jobs until their work reaches that
//!   total; its submit times are then stretched or compressed onto the 92 (91) days of the
//!   seed's period. Every server thus carries the seed's work, and the grid the seed's mix of
//!   busy and idle servers. The two windows of a shared trace do not overlap.
//! * **Run times** are the trace's, on the home server; **estimates** are the trace's requested
//!   times (raised to the run time), or the run time when there is none or with
//!   `exact_estimates`.
//! * **Data.** Each job draws z ~ N(0, 1) once; its input is max(0, μ(1 + z/3)) with
//!   μ = B · CPUs · run time (§IV-B: "a Gaussian distribution with mean μ_j = B × cpus_j ×
//!   runtime_secs_j and standard deviation σ_j = μ_j/3"), its output five times that. The same z
//!   serve every B, so the data sets differ only by scale, as the seed reads them.
//! * **More jobs** (§V-E: "to obtain a workload that is 125% heavier than the baseline, we
//!   duplicated every fourth job"): with load factor f, job k of a window gets
//!   ⌊(k+1)(f−1)⌋ − ⌊k(f−1)⌋ copies at its own submit time, each with its own data draw.

use std::path::Path;

use crate::rng::Rng;
use crate::swf::{read_swf, SwfError};

use super::grid::{TraceSpec, SERVER_TRACE, TABLE_I, TABLE_II, TRACES};

/// One usable job of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceJob {
    pub submit_s: i64,
    pub run_s: u64,
    pub procs: u32,
    /// Requested time (≥ run time), or the run time when the log has none.
    pub estimate_s: u64,
}

/// A trace read and filtered: jobs with a run time and processors, at most the machine's size,
/// in submit order.
#[derive(Debug, Clone)]
pub struct LoadedTrace {
    pub spec: TraceSpec,
    pub jobs: Vec<TraceJob>,
    /// Jobs without run time or processors, or larger than the machine.
    pub dropped: usize,
    /// The log's `UnixStartTime` (submit times count from it).
    pub unix_start: Option<i64>,
}

/// The seven traces of [`TRACES`].
#[derive(Debug, Clone)]
pub struct Traces {
    pub traces: Vec<LoadedTrace>,
}

impl Traces {
    /// Reads the traces from `dir` (normally `../shared/traces`).
    pub fn load(dir: &Path) -> Result<Traces, SwfError> {
        let traces = TRACES
            .iter()
            .map(|spec| {
                let t = read_swf(&dir.join(spec.file))?;
                Ok(from_records(*spec, &t.records, t.unix_start_time))
            })
            .collect::<Result<Vec<_>, SwfError>>()?;
        Ok(Traces { traces })
    }

    /// Traces built from job lists (tests, small configurations).
    pub fn from_jobs(jobs: Vec<Vec<TraceJob>>) -> Traces {
        assert_eq!(jobs.len(), TRACES.len(), "one job list per trace");
        let traces = TRACES
            .iter()
            .zip(jobs)
            .map(|(spec, mut jobs)| {
                jobs.sort_by_key(|j| j.submit_s);
                LoadedTrace {
                    spec: *spec,
                    jobs,
                    dropped: 0,
                    unix_start: None,
                }
            })
            .collect();
        Traces { traces }
    }
}

fn from_records(spec: TraceSpec, records: &[crate::swf::SwfRecord], unix_start: Option<i64>) -> LoadedTrace {
    let mut jobs = Vec::with_capacity(records.len());
    let mut dropped = 0;
    for r in records {
        let procs = if r.requested_procs > 0 {
            r.requested_procs
        } else {
            r.allocated_procs
        };
        if r.run_s <= 0 || procs <= 0 || procs > i64::from(spec.procs) {
            dropped += 1;
            continue;
        }
        let run_s = r.run_s as u64;
        let estimate_s = if r.requested_time_s > 0 {
            (r.requested_time_s as u64).max(run_s)
        } else {
            run_s
        };
        jobs.push(TraceJob {
            submit_s: r.submit_s,
            run_s,
            procs: procs as u32,
            estimate_s,
        });
    }
    jobs.sort_by_key(|j| j.submit_s);
    LoadedTrace {
        spec,
        jobs,
        dropped,
        unix_start,
    }
}

/// How to build a workload besides the seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkloadOptions {
    /// Load factor in per mille (1000 = Table II; 1250 = every fourth job duplicated).
    pub load_per_mille: u32,
    /// Estimates equal to the run times.
    pub exact_estimates: bool,
    /// Scale of Table II's work (per mille; 1000 = the seed's), on the same share of the period
    /// so that the loads stay the seed's: small configurations for quick runs and tests.
    pub work_per_mille: u32,
}

impl Default for WorkloadOptions {
    fn default() -> Self {
        WorkloadOptions {
            load_per_mille: 1000,
            exact_estimates: false,
            work_per_mille: 1000,
        }
    }
}

/// One grid job, as submitted to its home server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Job {
    /// Home server (index into Table I), where it is submitted and where its data live.
    pub origin: u8,
    pub submit_ms: u64,
    /// CPUs on the home server (whole nodes).
    pub cpus: u32,
    /// Run time and estimate on the home server.
    pub run_ms: u64,
    pub estimate_ms: u64,
    /// The job's standard normal draw for its data size.
    pub z: f64,
    /// A duplicate added by the load factor.
    pub copy: bool,
}

impl Job {
    /// Input bytes for B = `b_kb` KB (1000 bytes) per CPU-second.
    pub fn input_bytes(&self, b_kb: f64) -> u64 {
        let mu = b_kb * 1000.0 * f64::from(self.cpus) * (self.run_ms as f64 / 1000.0);
        (mu * (1.0 + self.z / 3.0)).max(0.0).round() as u64
    }
}

/// The trace window that fed one server.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub server: usize,
    pub trace: usize,
    /// First and last trace job (indices into the loaded trace).
    pub first: usize,
    pub last: usize,
    /// Trace time span [start, end) mapped onto the seed's period.
    pub start_s: i64,
    pub end_s: i64,
    /// Simulated seconds per trace second.
    pub stretch: f64,
    /// Work taken (CPU-seconds on the server, whole nodes) and Table II's target.
    pub work_cpu_s: f64,
    pub target_cpu_s: f64,
    /// The window overlaps the other window of the same trace (no disjoint one was found).
    pub overlaps: bool,
}

/// The jobs of all twelve servers, in submit order (ties by server, then window order).
#[derive(Debug, Clone)]
pub struct Workload {
    pub jobs: Vec<Job>,
    pub windows: Vec<Window>,
}

/// A job's size on a server: nodes for `procs` processors of a machine of `trace_procs`.
pub fn scaled_nodes(procs: u32, trace_procs: u32, server_cpus: u32, cpus_per_node: u32) -> u32 {
    let scaled = ((f64::from(procs) * f64::from(server_cpus) / f64::from(trace_procs)).round() as u32).max(1);
    scaled.div_ceil(cpus_per_node)
}

/// Builds the workload of a run.
pub fn build(traces: &Traces, seed: u64, opts: &WorkloadOptions) -> Workload {
    let mut windows: Vec<Window> = Vec::with_capacity(12);
    let mut jobs: Vec<(u64, u8, u32, u32, Job)> = Vec::new();
    for (s, spec) in TABLE_I.iter().enumerate() {
        let t = SERVER_TRACE[s];
        let trace = &traces.traces[t];
        let wl = &TABLE_II[s];
        let cpus: Vec<u32> = trace
            .jobs
            .iter()
            .map(|j| scaled_nodes(j.procs, trace.spec.procs, spec.cpus(), spec.cpus_per_node) * spec.cpus_per_node)
            .collect();
        // prefix[k] = work of jobs 0..k.
        let mut prefix = Vec::with_capacity(trace.jobs.len() + 1);
        let mut work = 0u64;
        prefix.push(work);
        for (j, &c) in trace.jobs.iter().zip(&cpus) {
            work += u64::from(c) * j.run_s;
            prefix.push(work);
        }
        let target = wl.work_cpu_s() * f64::from(opts.work_per_mille) / 1000.0;
        let mut rng = Rng::seed_from(seed, 1000 + s as u64);
        let others: Vec<(i64, i64)> = windows.iter().filter(|w| w.trace == t).map(|w| (w.start_s, w.end_s)).collect();
        let window = choose_window(trace, &prefix, target, &mut rng, &others, s, t);
        let mut z_rng = Rng::seed_from(seed, 2000 + s as u64);
        let mut copy_rng = Rng::seed_from(seed, 3000 + s as u64);
        let extra = u64::from(opts.load_per_mille.saturating_sub(1000));
        for (k, i) in (window.first..=window.last).enumerate() {
            let j = &trace.jobs[i];
            let submit_ms = ((j.submit_s - window.start_s) as f64 * 1000.0 * window.stretch).round() as u64;
            let run_ms = j.run_s * 1000;
            let estimate_ms = if opts.exact_estimates { run_ms } else { j.estimate_s * 1000 };
            let job = Job {
                origin: s as u8,
                submit_ms,
                cpus: cpus[i],
                run_ms,
                estimate_ms,
                z: z_rng.normal(0.0, 1.0),
                copy: false,
            };
            jobs.push((submit_ms, s as u8, k as u32, 0, job));
            let k = k as u64;
            let copies = ((k + 1) * extra / 1000 - k * extra / 1000) as u32;
            for c in 1..=copies {
                let copy = Job {
                    z: copy_rng.normal(0.0, 1.0),
                    copy: true,
                    ..job
                };
                jobs.push((submit_ms, s as u8, k as u32, c, copy));
            }
        }
        windows.push(window);
    }
    jobs.sort_unstable_by_key(|&(t, s, k, c, _)| (t, s, k, c));
    Workload {
        jobs: jobs.into_iter().map(|x| x.4).collect(),
        windows,
    }
}

/// Picks a window of consecutive jobs whose work reaches `target`, starting at a uniformly drawn
/// time, not overlapping `others` if one can be found in 1000 draws.
fn choose_window(
    trace: &LoadedTrace,
    prefix: &[u64],
    target: f64,
    rng: &mut Rng,
    others: &[(i64, i64)],
    server: usize,
    t: usize,
) -> Window {
    let n = trace.jobs.len();
    let total = *prefix.last().unwrap_or(&0);
    let need = target.ceil().max(1.0) as u64;
    // Latest start index from which enough work remains.
    let kmax = prefix
        .partition_point(|&p| total - p >= need)
        .saturating_sub(1)
        .min(n.saturating_sub(1));
    let span_of = |first: usize| -> (usize, i64, i64) {
        // Smallest last with prefix[last + 1] - prefix[first] >= need.
        let last = (prefix.partition_point(|&p| p < prefix[first] + need).max(first + 1) - 1).min(n - 1);
        let start = trace.jobs[first].submit_s;
        let end = trace
            .jobs
            .get(last + 1)
            .map(|j| j.submit_s)
            .unwrap_or(trace.jobs[last].submit_s + 1)
            .max(start + 1);
        (last, start, end)
    };
    let (t_lo, t_hi) = (trace.jobs[0].submit_s, trace.jobs[kmax].submit_s);
    let mut chosen = None;
    for _ in 0..1000 {
        let at = if t_hi > t_lo {
            t_lo + rng.range_inclusive_u64(0, (t_hi - t_lo) as u64) as i64
        } else {
            t_lo
        };
        let first = trace.jobs.partition_point(|j| j.submit_s < at).min(kmax);
        let (last, start, end) = span_of(first);
        let overlaps = others.iter().any(|&(a, b)| start < b && a < end);
        if !overlaps {
            chosen = Some((first, last, start, end, false));
            break;
        }
        chosen.get_or_insert((first, last, start, end, true));
    }
    let (first, last, start_s, end_s, overlaps) = chosen.expect("1000 draws");
    // A smaller share of Table II's work fills the same share of the period (same load).
    let period_ms = TABLE_II[server].period_ms() as f64 * (target / TABLE_II[server].work_cpu_s()).min(1.0);
    Window {
        server,
        trace: t,
        first,
        last,
        start_s,
        end_s,
        stretch: period_ms / ((end_s - start_s) as f64 * 1000.0),
        work_cpu_s: (prefix[last + 1] - prefix[first]) as f64,
        target_cpu_s: target,
        overlaps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synthetic(n: usize, procs: u32) -> Vec<TraceJob> {
        (0..n)
            .map(|i| TraceJob {
                submit_s: i as i64 * 600,
                run_s: 3_600 + (i as u64 * 37) % 7_200,
                procs: 1 + (i as u32 * 7) % procs,
                estimate_s: 14_400,
            })
            .collect()
    }

    fn traces() -> Traces {
        Traces::from_jobs(TRACES.iter().map(|t| synthetic(20_000, t.procs)).collect())
    }

    #[test]
    fn scaling_rounds_up_to_whole_nodes() {
        // 1 of 100 procs onto 64 CPUs (2 per node): 0.64 -> 1 CPU -> 1 node.
        assert_eq!(scaled_nodes(1, 100, 64, 2), 1);
        // 100 of 100 onto 2944 CPUs, 16 per node: 184 nodes, the whole server.
        assert_eq!(scaled_nodes(100, 100, 2944, 16), 184);
        // 17 of 338 onto 1152 (8 per node): 57.9 -> 58 CPUs -> 8 nodes.
        assert_eq!(scaled_nodes(17, 338, 1152, 8), 8);
    }

    #[test]
    fn windows_carry_table_ii_work_and_fill_the_period() {
        let opts = WorkloadOptions {
            work_per_mille: 20,
            ..WorkloadOptions::default()
        };
        let w = build(&traces(), 7, &opts);
        assert_eq!(w.windows.len(), 12);
        for win in &w.windows {
            assert!(win.work_cpu_s >= win.target_cpu_s, "{win:?}");
            assert!(!win.overlaps, "{win:?}");
        }
        // Shared traces get disjoint windows.
        for (a, b) in [(2, 7), (3, 8), (4, 9), (5, 10), (6, 11)] {
            let (x, y) = (&w.windows[a], &w.windows[b]);
            assert!(x.end_s <= y.start_s || y.end_s <= x.start_s);
        }
        assert!(w.jobs.windows(2).all(|p| p[0].submit_ms <= p[1].submit_ms));
        let last = w.jobs.iter().map(|j| j.submit_ms).max().unwrap();
        // 2% of the work on 2% of the 92 days.
        assert!(last <= 92 * 86_400_000 / 50, "{last}");
        assert!(last >= 92 * 86_400_000 / 100, "{last}");
        // Deterministic, and another seed draws other windows.
        let again = build(&traces(), 7, &opts);
        assert_eq!(w.jobs, again.jobs);
        let other = build(&traces(), 8, &opts);
        assert_ne!(w.windows[0].first, other.windows[0].first);
    }

    #[test]
    fn load_factor_duplicates_every_fourth_job() {
        let base = WorkloadOptions {
            work_per_mille: 20,
            ..WorkloadOptions::default()
        };
        let heavier = WorkloadOptions {
            load_per_mille: 1250,
            ..base
        };
        let a = build(&traces(), 3, &base);
        let b = build(&traces(), 3, &heavier);
        for s in 0..12u8 {
            let n = a.jobs.iter().filter(|j| j.origin == s).count();
            let copies = b.jobs.iter().filter(|j| j.origin == s && j.copy).count();
            assert_eq!(copies, n / 4, "server {s}");
        }
        // The originals are the same jobs with the same data draws.
        let originals: Vec<&Job> = b.jobs.iter().filter(|j| !j.copy).collect();
        assert_eq!(originals.len(), a.jobs.len());
        assert!(originals.iter().zip(&a.jobs).all(|(x, y)| **x == *y));
    }

    #[test]
    fn input_sizes_follow_the_formula() {
        let j = Job {
            origin: 0,
            submit_ms: 0,
            cpus: 16,
            run_ms: 1_000_000,
            estimate_ms: 1_000_000,
            z: 0.0,
            copy: false,
        };
        // B = 1 KB per CPU-second: 16 CPUs x 1000 s = 16 MB.
        assert_eq!(j.input_bytes(1.0), 16_000_000);
        assert_eq!(j.input_bytes(0.0), 0);
        assert_eq!(Job { z: 3.0, ..j }.input_bytes(1.0), 32_000_000);
        assert_eq!(Job { z: -4.0, ..j }.input_bytes(1.0), 0);
    }
}
