//! What the Slurm benchmarks measure and how they print it: the clocks the jobs' programs
//! print, each component's launch steps from its records, nearest-rank summaries, the load
//! average, and the progress bar.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde_json::{json, Value};

/// A progress bar on stderr (indicatif draws it only on a terminal).
pub(super) fn bar(len: u64, what: &str) -> indicatif::ProgressBar {
    let b = indicatif::ProgressBar::new(len);
    if let Ok(style) = indicatif::ProgressStyle::with_template(&format!("{what} [{{bar:40}}] {{pos}}/{{len}} {{elapsed}}")) {
        b.set_style(style.progress_chars("=> "));
    }
    b
}

/// Nanoseconds since the epoch (the clock the programs' `date +%s%N` read).
pub(super) fn now_ns() -> i128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128)
}

/// The clock readings a succeeded job's components printed (one per component, in order).
pub(super) fn printed_clocks(job: &Value) -> anyhow::Result<Vec<i128>> {
    let comps = job["components"].as_array().context("job without components")?;
    comps
        .iter()
        .map(|c| {
            let path = c["stdout"].as_str().context("component without stdout")?;
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
            text.trim()
                .parse::<i128>()
                .with_context(|| format!("{path}: not a clock reading: {text:?}"))
        })
        .collect()
}

/// When a component passed each step of its launch, in ms since the epoch, from the records
/// in its directory (the parent of its stdout): the batch script written (just before
/// `sbatch`), the supervisor checked in (`supervisor.json`), set up and held (`held`; a
/// component released before it checked in does not hold: then when it saw `go`), `go`
/// staged by the daemon, `go` seen by the supervisor and the program started (`exit.json`'s
/// `running`), and whether its start was real-time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Steps {
    pub(super) script: u64,
    pub(super) checkin: u64,
    pub(super) held: u64,
    pub(super) go: u64,
    pub(super) go_seen: u64,
    pub(super) realtime: bool,
}

pub(super) fn launch_steps(job: &Value) -> anyhow::Result<Vec<Steps>> {
    let comps = job["components"].as_array().context("job without components")?;
    comps
        .iter()
        .map(|c| {
            let dir = Path::new(c["stdout"].as_str().context("component without stdout")?)
                .parent()
                .context("stdout without a directory")?;
            let read = |f: &str, key: &str| -> anyhow::Result<u64> {
                let p = dir.join(f);
                let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?)?;
                v[key].as_u64().with_context(|| format!("{}: no {key}", p.display()))
            };
            let script = std::fs::metadata(dir.join(koalesce_server::slurm::script::SCRIPT_FILE))
                .and_then(|m| m.modified())
                .map(|t| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64))
                .unwrap_or(0);
            // How the program started: in exit.json (running.json of earlier supervisors).
            let running = koalesce_server::supervise::read_running(dir)
                .with_context(|| format!("{}: no record of the program's start", dir.display()))?;
            let go_seen = running.go_seen_ms;
            let realtime = running.realtime;
            Ok(Steps {
                script,
                checkin: read("supervisor.json", "started_ms")?,
                // `held` is a hard link of supervisor.json; the supervisor records the moment with
                // the start (0 when `go` was there before it checked in).
                held: Some(running.held_ms).filter(|&t| t > 0).unwrap_or(go_seen),
                go: read("go", "go_ms")?,
                go_seen,
                realtime,
            })
        })
        .collect()
}

/// p50 / p99 / max (nearest rank) of values in ms, as JSON.
pub(super) fn summary(values: &[f64]) -> Value {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let pct = |p: f64| -> f64 {
        if v.is_empty() {
            return f64::NAN;
        }
        let i = ((p / 100.0) * v.len() as f64).ceil() as usize;
        v[i.clamp(1, v.len()) - 1]
    };
    let r = |x: f64| (x * 10.0).round() / 10.0;
    json!({"n": v.len(), "p50": r(pct(50.0)), "p99": r(pct(99.0)), "max": r(pct(100.0))})
}

pub(super) fn fmt_summary(s: &Value) -> String {
    format!("p50 {} / p99 {} / max {} ms (n = {})", s["p50"], s["p99"], s["max"], s["n"])
}

/// The machine's load averages (1, 5, 15 min) from /proc/loadavg, as the benchmarks print them.
pub(super) fn load_average() -> Value {
    let t = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let v: Vec<f64> = t.split_whitespace().take(3).filter_map(|x| x.parse().ok()).collect();
    json!(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = summary(&v);
        assert_eq!(
            (s["p50"].as_f64(), s["p99"].as_f64(), s["max"].as_f64()),
            (Some(50.0), Some(99.0), Some(100.0))
        );
        assert_eq!(summary(&[3.0])["p99"].as_f64(), Some(3.0));
        assert_eq!(summary(&[])["n"], 0);
    }
}
