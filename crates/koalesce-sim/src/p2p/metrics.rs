//! The metrics of 002 §IV-C, computed from the job records of one run.

use super::grid::{total_clock_weighted_cpus, TABLE_I};
use super::JobRecord;

/// One run's metrics. Times are seconds; fractions are 0–1.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Metrics {
    pub jobs: usize,
    /// ART = (1/N) Σ (ET_j − QT_j): queued to the grid until the job has ended (its output back
    /// at the origin).
    pub art_s: f64,
    /// AWT = (1/N) Σ (ST_j − QT_j): until the job starts executing.
    pub awt_s: f64,
    /// UTIL = Σ (ET_j − ST_j) · CPU_j · Clock_j / ((ET_last − QT_first) · Σ CPU_m · Clock_m),
    /// with ET_j − ST_j the run (not the output's return) and CPU_j the whole nodes held.
    pub util: f64,
    /// FOJM: jobs transferred / all jobs.
    pub fojm: f64,
    /// FDVM: input + output of migrated jobs / input + output of all jobs (0 without data).
    pub fdvm: f64,
    /// DMOH: total data migration time / Σ (ET_j − QT_j); a migrated job's data migration time
    /// is its input transfer plus its output transfer.
    pub dmoh: f64,
    /// Jobs that held nodes waiting for their input (the §V-D "blocked jobs with allocated
    /// resources unable to execute because their data have not arrived"), as a fraction of
    /// all jobs.
    pub blocked: f64,
    /// The same as a share of time: node-time held while waiting for input / all node-time
    /// held (the time-average fraction of held nodes that are blocked).
    pub blocked_time: f64,
    /// ET_last − QT_first.
    pub makespan_s: f64,
}

impl Metrics {
    pub fn of(records: &[JobRecord]) -> Metrics {
        let n = records.len();
        if n == 0 {
            return Metrics::default();
        }
        let (mut resp, mut wait, mut work, mut data, mut data_migrated, mut moving) = (0u128, 0u128, 0f64, 0u128, 0u128, 0u128);
        let (mut migrated, mut blocked) = (0usize, 0usize);
        let (mut held, mut held_blocked) = (0u128, 0u128);
        let (mut first, mut last) = (u64::MAX, 0u64);
        for r in records {
            resp += u128::from(r.end - r.submit);
            wait += u128::from(r.start - r.submit);
            work += (r.run_end - r.start) as f64 * f64::from(r.cpus) * f64::from(TABLE_I[usize::from(r.exec)].clock_mhz);
            let bytes = u128::from(r.input) + u128::from(r.output);
            data += bytes;
            if r.migrated() {
                migrated += 1;
                data_migrated += bytes;
                if let Some(done) = r.input_done {
                    moving += u128::from(done - r.queued);
                }
                if let Some(out) = r.output_start {
                    moving += u128::from(r.end - out);
                }
            }
            if r.alloc < r.start {
                blocked += 1;
            }
            held += u128::from(r.run_end - r.alloc) * u128::from(r.cpus);
            held_blocked += u128::from(r.start - r.alloc) * u128::from(r.cpus);
            first = first.min(r.submit);
            last = last.max(r.end);
        }
        let span = (last - first) as f64;
        let frac = |a: u128, b: u128| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        Metrics {
            jobs: n,
            art_s: resp as f64 / n as f64 / 1000.0,
            awt_s: wait as f64 / n as f64 / 1000.0,
            util: if span > 0.0 {
                work / (span * total_clock_weighted_cpus())
            } else {
                0.0
            },
            fojm: migrated as f64 / n as f64,
            fdvm: frac(data_migrated, data),
            dmoh: frac(moving, resp),
            blocked: blocked as f64 / n as f64,
            blocked_time: frac(held_blocked, held),
            makespan_s: span / 1000.0,
        }
    }
}
