//! Metrics of a simulation run: per-job CSV, utilization timeline CSV and SVG, and a summary
//! table. Everything written is a function of the run alone (no wall-clock), so one seed gives
//! byte-identical files.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::io::{self, Write};
use std::path::Path;

use koalesce_core::state::JobState;

use crate::engine::{JobRecord, SimResult};
use crate::plot;
use crate::stats::Summary;

fn opt(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// A CSV writer (the csv crate quotes fields that need it, e.g. a job name with a comma).
fn csv_writer<W: Write>(w: W) -> csv::Writer<W> {
    csv::WriterBuilder::new().terminator(csv::Terminator::Any(b'\n')).from_writer(w)
}

fn csv_err(e: csv::Error) -> io::Error {
    match e.into_kind() {
        csv::ErrorKind::Io(e) => e,
        other => io::Error::other(format!("{other:?}")),
    }
}

/// Writes one line per job, times in milliseconds.
pub fn write_jobs_csv<W: Write>(w: &mut W, r: &SimResult) -> io::Result<()> {
    let mut out = csv_writer(w);
    out.write_record([
        "job_id",
        "name",
        "state",
        "priority",
        "submit",
        "placed",
        "claimed",
        "start",
        "end",
        "ftt_ms",
        "components",
        "size",
        "sites",
        "placement_tries",
        "claiming_tries",
        "placement_ms",
        "pgt_ms",
        "pwt_ms",
        "twt_ms",
        "error_resubmissions",
        "preemptions",
        "start_delay_ms",
    ])
    .map_err(csv_err)?;
    for j in &r.jobs {
        let pgt = j.placed.zip(j.claimed).map(|(p, c)| c.saturating_sub(p));
        let pwt = j.claimed.zip(j.start).map(|(c, s)| s.saturating_sub(c));
        let twt = j.start.map(|s| s.saturating_sub(j.submit));
        out.write_record([
            j.id.to_string(),
            j.name.clone(),
            j.state.name().to_string(),
            j.priority.to_string(),
            j.submit.to_string(),
            opt(j.placed),
            opt(j.claimed),
            opt(j.start),
            opt(j.end),
            j.ftt_ms.to_string(),
            j.components.to_string(),
            j.size.to_string(),
            j.sites.join(";"),
            j.placement_tries.to_string(),
            j.claiming_tries.to_string(),
            j.total_placement_ms.to_string(),
            opt(pgt),
            opt(pwt),
            opt(twt),
            j.error_resubmissions.to_string(),
            j.preemptions.to_string(),
            opt(j.start_delay_ms),
        ])
        .map_err(csv_err)?;
    }
    out.flush()
}

/// Utilization per bucket as percentages of all processors.
#[derive(Debug, Clone, PartialEq)]
pub struct UtilizationSeries {
    pub start_s: Vec<f64>,
    pub background: Vec<f64>,
    pub grid: Vec<f64>,
    pub pwt: Vec<f64>,
    pub pgt: Vec<f64>,
}

pub fn utilization_series(r: &SimResult) -> UtilizationSeries {
    let cap = (r.total_processors * r.bucket_ms).max(1) as f64;
    let pct = |v: u64| 100.0 * v as f64 / cap;
    UtilizationSeries {
        start_s: r.timeline.iter().map(|b| b.start_ms as f64 / 1000.0).collect(),
        background: r.timeline.iter().map(|b| pct(b.background)).collect(),
        grid: r.timeline.iter().map(|b| pct(b.grid)).collect(),
        pwt: r.timeline.iter().map(|b| pct(b.pwt)).collect(),
        pgt: r.timeline.iter().map(|b| pct(b.pgt)).collect(),
    }
}

pub fn write_utilization_csv<W: Write>(w: &mut W, r: &SimResult) -> io::Result<()> {
    let u = utilization_series(r);
    let mut out = csv_writer(w);
    out.write_record(["start_s", "background_pct", "grid_pct", "pwt_pct", "pgt_pct", "total_pct"])
        .map_err(csv_err)?;
    for k in 0..u.start_s.len() {
        // The seeds' total: PGT processors are idle or used by local jobs, not extra load.
        let total = u.background[k] + u.grid[k] + u.pwt[k];
        let pct = |v: f64| format!("{v:.3}");
        out.write_record([
            u.start_s[k].to_string(),
            pct(u.background[k]),
            pct(u.grid[k]),
            pct(u.pwt[k]),
            pct(u.pgt[k]),
            pct(total),
        ])
        .map_err(csv_err)?;
    }
    out.flush()
}

/// The stacked utilization plot (background, grid load, PWT, PGT), as in 003 Fig. 5.1.
pub fn utilization_svg(r: &SimResult) -> String {
    let u = utilization_series(r);
    let xs: Vec<f64> = u.start_s.iter().map(|s| s / 60.0).collect();
    plot::stacked_area_svg(
        &format!("{} — {} (seed {}): utilization", r.scenario, r.policy.to_uppercase(), r.seed),
        "time (min)",
        "utilization (%)",
        &xs,
        &[
            ("background".to_string(), u.background),
            ("grid load".to_string(), u.grid),
            ("PWT".to_string(), u.pwt),
            ("PGT".to_string(), u.pgt),
        ],
        Some(100.0),
    )
}

/// Means per job shape (components × size).
#[derive(Debug, Clone, PartialEq)]
pub struct ShapeRow {
    pub shape: String,
    pub jobs: usize,
    pub placement_s: f64,
    pub ftt_s: f64,
    pub placement_tries: f64,
    pub claiming_tries: f64,
    pub spread: f64,
}

/// The summary of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub scenario: String,
    pub policy: String,
    pub seed: u64,
    pub jobs: usize,
    pub succeeded: usize,
    pub failed: usize,
    pub unfinished: usize,
    pub rejected: usize,
    /// Mean utilization in % over [0, end of the last grid job].
    pub util_background: f64,
    pub util_grid: f64,
    pub util_pwt: f64,
    pub util_pgt: f64,
    pub placement_s: Option<Summary>,
    pub ftt_s: Option<Summary>,
    pub twt_s: Option<Summary>,
    pub response_s: Option<Summary>,
    /// Submission to the successful claim (processors held).
    pub wait_s: Option<Summary>,
    pub shapes: Vec<ShapeRow>,
    pub mean_spread: f64,
    /// Share of multi-component jobs whose components ran on more than one site.
    pub coallocated_share: f64,
    pub max_queue_length: usize,
    pub last_arrival_s: f64,
    pub end_s: f64,
    pub soft_errors: u64,
    pub blacklisted: Vec<String>,
    pub transferred_gb: f64,
    pub events: u64,
}

impl Report {
    /// The seeds' "real total utilization" (000 §5.1, 003 §5.1.4): background + grid load +
    /// PWT. PGT is *not* part of it: those processors were placed but not claimed, so they are
    /// idle or in use by local jobs (already counted as background).
    pub fn util_total(&self) -> f64 {
        self.util_background + self.util_grid + self.util_pwt
    }

    /// The run finished "shortly" after the last arrival: within an hour (jobs here run minutes).
    pub fn stable(&self) -> bool {
        self.unfinished == 0 && self.end_s - self.last_arrival_s <= 3600.0
    }
}

fn secs(v: u64) -> f64 {
    v as f64 / 1000.0
}

fn summary_of<F: Fn(&JobRecord) -> Option<u64>>(jobs: &[&JobRecord], f: F) -> Option<Summary> {
    let v: Vec<f64> = jobs.iter().filter_map(|j| f(j)).map(secs).collect();
    Summary::of(&v)
}

pub fn report(r: &SimResult) -> Report {
    let done: Vec<&JobRecord> = r.jobs.iter().filter(|j| j.state == JobState::Succeeded).collect();
    let cap = (r.total_processors * r.end_ms).max(1) as f64;
    let total = |f: fn(&crate::engine::UtilizationBucket) -> u64| 100.0 * r.timeline.iter().map(f).sum::<u64>() as f64 / cap;
    let mut by_shape: BTreeMap<(usize, u32), Vec<&JobRecord>> = BTreeMap::new();
    for j in &done {
        by_shape.entry((j.components, j.component_size)).or_default().push(j);
    }
    let mean = |v: &[&JobRecord], f: &dyn Fn(&JobRecord) -> f64| v.iter().map(|j| f(j)).sum::<f64>() / v.len().max(1) as f64;
    let shapes = by_shape
        .iter()
        .map(|(&(n, size), v)| ShapeRow {
            shape: format!("{n}x{size}"),
            jobs: v.len(),
            placement_s: mean(v, &|j| secs(j.total_placement_ms)),
            ftt_s: mean(v, &|j| secs(j.ftt_ms)),
            placement_tries: mean(v, &|j| j.placement_tries as f64),
            claiming_tries: mean(v, &|j| j.claiming_tries as f64),
            spread: mean(v, &|j| j.sites.len() as f64),
        })
        .collect();
    let multi: Vec<&&JobRecord> = done.iter().filter(|j| j.components > 1).collect();
    Report {
        scenario: r.scenario.clone(),
        policy: r.policy.clone(),
        seed: r.seed,
        jobs: r.jobs.len(),
        succeeded: done.len(),
        failed: r
            .jobs
            .iter()
            .filter(|j| matches!(j.state, JobState::Failed(_) | JobState::Cancelled))
            .count(),
        unfinished: r.jobs.iter().filter(|j| !j.state.is_terminal()).count(),
        rejected: r.rejected.len(),
        util_background: total(|b| b.background),
        util_grid: total(|b| b.grid),
        util_pwt: total(|b| b.pwt),
        util_pgt: total(|b| b.pgt),
        placement_s: summary_of(&done, |j| Some(j.total_placement_ms)),
        ftt_s: summary_of(&done, |j| Some(j.ftt_ms)),
        twt_s: summary_of(&done, |j| j.start.map(|s| s - j.submit)),
        response_s: summary_of(&done, |j| j.end.map(|e| e - j.submit)),
        wait_s: summary_of(&done, |j| j.claimed.map(|c| c.saturating_sub(j.submit))),
        shapes,
        mean_spread: mean(&done, &|j| j.sites.len() as f64),
        coallocated_share: if multi.is_empty() {
            0.0
        } else {
            multi.iter().filter(|j| j.sites.len() > 1).count() as f64 / multi.len() as f64
        },
        max_queue_length: r.max_queue_length,
        last_arrival_s: secs(r.last_arrival_ms),
        end_s: secs(r.end_ms),
        soft_errors: r.soft_errors,
        blacklisted: r.blacklisted.iter().map(|(_, s)| s.clone()).collect(),
        transferred_gb: r.transferred_bytes as f64 / 1e9,
        events: r.events,
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "scenario {}  policy {}  seed {}",
            self.scenario,
            self.policy.to_uppercase(),
            self.seed
        )?;
        writeln!(
            f,
            "jobs {}: {} succeeded, {} failed, {} unfinished, {} rejected at submission",
            self.jobs, self.succeeded, self.failed, self.unfinished, self.rejected
        )?;
        writeln!(
            f,
            "utilization  total {:5.1}% (background + grid + PWT)  background {:5.1}%  grid {:5.1}%  PWT {:4.1}%  PGT {:4.1}% (not in total)",
            self.util_total(),
            self.util_background,
            self.util_grid,
            self.util_pwt,
            self.util_pgt
        )?;
        writeln!(
            f,
            "{:<22} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "time (s)", "mean", "p50", "p90", "p99", "max"
        )?;
        for (name, s) in [
            ("placement time", &self.placement_s),
            ("file transfer (FTT)", &self.ftt_s),
            ("wait (submit→claim)", &self.wait_s),
            ("total waiting (TWT)", &self.twt_s),
            ("response", &self.response_s),
        ] {
            match s {
                Some(s) => writeln!(
                    f,
                    "{:<22} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                    name, s.mean, s.p50, s.p90, s.p99, s.max
                )?,
                None => writeln!(f, "{:<22} {:>9}", name, "-")?,
            }
        }
        writeln!(
            f,
            "{:<7} {:>5} {:>12} {:>9} {:>11} {:>11} {:>7}",
            "shape", "jobs", "placement s", "FTT s", "plc tries", "clm tries", "spread"
        )?;
        for s in &self.shapes {
            writeln!(
                f,
                "{:<7} {:>5} {:>12.1} {:>9.1} {:>11.2} {:>11.2} {:>7.2}",
                s.shape, s.jobs, s.placement_s, s.ftt_s, s.placement_tries, s.claiming_tries, s.spread
            )?;
        }
        let mut tail = String::new();
        let _ = write!(
            tail,
            "job spread {:.2} sites (co-allocated {:.0}% of multi-component jobs); max placement queue {}; ",
            self.mean_spread,
            100.0 * self.coallocated_share,
            self.max_queue_length
        );
        let _ = write!(
            tail,
            "last arrival {:.0} s, last finish {:.0} s ({}); soft errors {}",
            self.last_arrival_s,
            self.end_s,
            if self.stable() { "stable" } else { "not stable" },
            self.soft_errors
        );
        if !self.blacklisted.is_empty() {
            let _ = write!(tail, "; blacklisted: {}", self.blacklisted.join(", "));
        }
        writeln!(f, "{tail}")?;
        write!(f, "moved {:.1} GB over the network; {} events", self.transferred_gb, self.events)
    }
}

/// Writes jobs.csv, utilization.csv, utilization.svg and summary.txt into `dir`.
pub fn write_all(dir: &Path, r: &SimResult) -> io::Result<Report> {
    std::fs::create_dir_all(dir)?;
    let mut jobs = io::BufWriter::new(std::fs::File::create(dir.join("jobs.csv"))?);
    write_jobs_csv(&mut jobs, r)?;
    jobs.flush()?;
    let mut util = io::BufWriter::new(std::fs::File::create(dir.join("utilization.csv"))?);
    write_utilization_csv(&mut util, r)?;
    util.flush()?;
    std::fs::write(dir.join("utilization.svg"), utilization_svg(r))?;
    let rep = report(r);
    std::fs::write(dir.join("summary.txt"), format!("{rep}\n"))?;
    Ok(rep)
}
