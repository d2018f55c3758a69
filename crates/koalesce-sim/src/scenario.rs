//! Scenario files: the sites, network, files, workload, background load, faults and scheduler
//! parameters of one simulation, as TOML.
//!
//! Unknown keys are errors; every error names the file, the field and the reason.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use koalesce_core::config::SchedulerConfig;
use koalesce_core::model::{Millis, Priority, SiteAttributes};
use serde::Deserialize;
use thiserror::Error;

/// A scenario that cannot be used.
#[derive(Debug, Error)]
pub enum ScenarioError {
    #[error("{path}: cannot read")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: field '{field}': {reason}")]
    Invalid { path: PathBuf, field: String, reason: String },
}

fn default_speed() -> f64 {
    1.0
}
fn default_lan() -> f64 {
    1200.0
}
fn default_wan() -> f64 {
    100.0
}
fn default_latency() -> Millis {
    10
}
fn default_sample() -> u64 {
    60
}

/// Local scheduling policy of a simulated site's resource manager.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum LocalPolicyName {
    Fcfs,
    #[default]
    Easy,
}

/// An SWF trace replayed as one site's background load.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TraceBackgroundSpec {
    /// Path of the SWF file (plain or .gz), relative to the scenario file.
    pub path: PathBuf,
    /// Skip this many seconds of the trace (start the replay later in the log).
    #[serde(default)]
    pub skip_s: u64,
}

/// One cluster.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SiteSpec {
    pub name: String,
    pub processors: u32,
    #[serde(default = "default_speed")]
    pub speed: f64,
    /// Whether the site's LRM offers advance reservations.
    #[serde(default)]
    pub reservations: bool,
    /// LAN bandwidth of this site (overrides `network.lan_mbps`).
    pub lan_mbps: Option<f64>,
    #[serde(default)]
    pub local_policy: LocalPolicyName,
    /// Replay an SWF trace as this site's background load (instead of `[background]`).
    pub background_trace: Option<TraceBackgroundSpec>,
    /// A file server without processors (a storage element): it holds replicas and serves
    /// transfers but runs no job and has no background load. `processors` must be 0. When a
    /// scenario has storage-only sites, generated input files are stored only on them.
    #[serde(default)]
    pub storage_only: bool,
    /// This site's own background band `[low, high]` (overrides `[background]`'s band edges;
    /// the rest of the band method stays the same).
    pub background_band: Option<(f64, f64)>,
    /// What the site publishes (GridWay's host variables: `cpu_mhz`, `architecture`, …).
    #[serde(default)]
    pub attributes: SiteAttributes,
}

/// A WAN link whose parameters differ from the default.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    pub a: String,
    pub b: String,
    pub mbps: f64,
    #[serde(default = "default_latency")]
    pub latency_ms: Millis,
}

/// The network: LAN per site, a WAN link between every pair (002 §IV-A).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NetworkSection {
    #[serde(default = "default_lan")]
    pub lan_mbps: f64,
    #[serde(default = "default_wan")]
    pub wan_mbps: f64,
    #[serde(default = "default_latency")]
    pub latency_ms: Millis,
    #[serde(default)]
    pub links: Vec<LinkSpec>,
    /// The throughput one transfer can reach on its own (one GridFTP/TCP stream), drawn per
    /// transfer uniformly from these values (Mbit/s); empty: only the links limit it.
    #[serde(default)]
    pub stream_mbps: Vec<f64>,
    /// The copy of a job's input from its site's own storage to the worker node before it runs
    /// (004 §3.4.2's "transfer time" of the jobs that ran where their file was).
    pub worker_copy: Option<WorkerCopySpec>,
}

/// The worker-node copy: a fixed start-up plus a time per GB drawn per job.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WorkerCopySpec {
    #[serde(default)]
    pub overhead_s: f64,
    /// Seconds per GB, one drawn uniformly per job (empty: 0).
    #[serde(default)]
    pub s_per_gb: Vec<f64>,
}

impl Default for NetworkSection {
    fn default() -> Self {
        NetworkSection {
            lan_mbps: default_lan(),
            wan_mbps: default_wan(),
            latency_ms: default_latency(),
            links: Vec::new(),
            stream_mbps: Vec::new(),
            worker_copy: None,
        }
    }
}

/// A file registered before the run.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileSpec {
    pub name: String,
    pub size_gb: f64,
    pub replicas: Vec<String>,
}

/// One explicitly listed grid job.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExplicitJob {
    #[serde(default)]
    pub name: Option<String>,
    pub submit_s: f64,
    /// Processors per component.
    pub components: Vec<u32>,
    /// Fixed sites per component ("" = not fixed); same length as `components` when given.
    #[serde(default)]
    pub sites: Vec<String>,
    pub runtime_s: f64,
    #[serde(default)]
    pub files: Vec<String>,
    #[serde(default)]
    pub priority: Priority,
    /// GridWay's REQUIREMENTS and RANK (004 §3.2), as in a native job description.
    #[serde(default)]
    pub requirements: Option<String>,
    #[serde(default)]
    pub rank: Option<String>,
    /// A bag of tasks: at least this many components must be placed and succeed.
    #[serde(default)]
    pub min_components: Option<u32>,
    /// Components whose program fails (an application error) every time they run.
    #[serde(default)]
    pub failing_components: Vec<u32>,
    /// A bag of this many tasks (`koalesce submit --tasks N`): each task is this job, placed
    /// and run on its own (named `NAME-<task>`); the bag's outcome is in the result's `bags`.
    #[serde(default)]
    pub tasks: Option<u32>,
    /// With `tasks`: successful tasks the bag needs (default: all).
    #[serde(default)]
    pub min_tasks: Option<u32>,
    /// With `tasks`: tasks whose every component fails (an application error).
    #[serde(default)]
    pub failing_tasks: Vec<u32>,
}

/// Generated workload parameters (KOALA's experiments; `preset` fills the seeds' values).
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct GeneratedSpec {
    /// w30, w50 (000 §4.2 / 003 §5.1.2), unreliable (003 §5.2), wc, wnc (003 Table 6.1).
    pub preset: Option<String>,
    pub jobs: Option<usize>,
    /// (components, component size) pairs to draw from uniformly.
    pub shapes: Option<Vec<(u32, u32)>>,
    /// Runtime in seconds by component size (key: the size as a string).
    pub runtime_s: Option<BTreeMap<String, f64>>,
    /// Runtime in seconds for sizes not listed in `runtime_s`.
    pub default_runtime_s: Option<f64>,
    pub file_sizes_gb: Option<Vec<f64>>,
    /// Replicas of each job's input file (1 = unreplicated), at distinct random sites.
    pub replicas: Option<u32>,
    /// Target grid utilization: the Poisson arrival rate is scaled to it.
    pub utilization: Option<f64>,
    /// Or a fixed arrival rate.
    pub arrivals_per_min: Option<f64>,
    /// Priorities drawn uniformly.
    pub priorities: Option<Vec<Priority>>,
    /// Time of the first arrival.
    pub start_s: Option<u64>,
    /// Estimate = runtime × this factor.
    pub estimate_factor: Option<f64>,
}

/// Where the grid jobs come from.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase", tag = "kind", deny_unknown_fields)]
pub enum WorkloadSpec {
    Generated(Box<GeneratedSpec>),
    Jobs { jobs: Vec<ExplicitJob> },
}

/// The seeds' background method: keep every site's local utilization inside a band.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BandSection {
    pub low: f64,
    pub high: f64,
    #[serde(default = "default_check")]
    pub check_interval_s: u64,
    #[serde(default = "default_bg_runtime")]
    pub mean_runtime_s: f64,
    #[serde(default = "default_bg_fraction")]
    pub max_job_fraction: f64,
    /// Mean time between ordinary (organic) local jobs per site; 0 = none.
    #[serde(default)]
    pub organic_interarrival_s: f64,
}

fn default_check() -> u64 {
    30
}
fn default_bg_runtime() -> f64 {
    900.0
}
fn default_bg_fraction() -> f64 {
    0.125
}

/// Background (local users') load.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(rename_all = "lowercase", tag = "kind", deny_unknown_fields)]
pub enum BackgroundSpec {
    #[default]
    None,
    Band(BandSection),
}

/// Failure injection.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// Probability, per site, that a component launched there ends with a soft error.
    #[serde(default)]
    pub soft_error_probability: BTreeMap<String, f64>,
    /// Soft errors only happen before this time (seconds; none = always).
    pub until_s: Option<u64>,
}

/// A whole scenario file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub seed: u64,
    /// Stop the simulation at this time even if jobs remain (seconds).
    pub horizon_s: Option<u64>,
    /// Width of the buckets of the utilization timeline.
    #[serde(default = "default_sample")]
    pub sample_interval_s: u64,
    pub sites: Vec<SiteSpec>,
    #[serde(default)]
    pub network: NetworkSection,
    #[serde(default)]
    pub files: Vec<FileSpec>,
    pub workload: WorkloadSpec,
    #[serde(default)]
    pub background: BackgroundSpec,
    #[serde(default)]
    pub scheduler: SchedulerConfig,
    #[serde(default)]
    pub faults: FaultSpec,
    /// Directory the scenario was read from (relative paths resolve against it).
    #[serde(skip)]
    pub base_dir: PathBuf,
    #[serde(skip)]
    pub path: PathBuf,
}

impl Scenario {
    /// Reads and validates a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses scenario text; `path` names it in errors and anchors relative paths.
    pub fn parse(text: &str, path: &Path) -> Result<Scenario, ScenarioError> {
        let mut scenario: Scenario = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        scenario.path = path.to_path_buf();
        scenario.base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        scenario.validate()?;
        Ok(scenario)
    }

    pub(crate) fn invalid(&self, field: impl Into<String>, reason: impl Into<String>) -> ScenarioError {
        ScenarioError::Invalid {
            path: self.path.clone(),
            field: field.into(),
            reason: reason.into(),
        }
    }

    pub fn site_index(&self, name: &str) -> Option<usize> {
        self.sites.iter().position(|s| s.name == name)
    }

    /// Checks every value whose range the types do not express.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.sites.is_empty() {
            return Err(self.invalid("sites", "at least one site is needed"));
        }
        for (i, s) in self.sites.iter().enumerate() {
            if s.storage_only && s.processors != 0 {
                return Err(self.invalid(format!("sites[{i}].processors"), "a storage-only site has no processors (give 0)"));
            }
            if !s.storage_only && s.processors == 0 {
                return Err(self.invalid(format!("sites[{i}].processors"), "must be positive"));
            }
            if let Some((lo, hi)) = s.background_band {
                if !(0.0 <= lo && lo <= hi && hi <= 1.0) {
                    return Err(self.invalid(
                        format!("sites[{i}].background_band"),
                        format!("need 0 ≤ low ≤ high ≤ 1, got [{lo}, {hi}]"),
                    ));
                }
            }
            if !(s.speed.is_finite() && s.speed > 0.0) {
                return Err(self.invalid(format!("sites[{i}].speed"), "must be a positive number"));
            }
            if let Some(l) = s.lan_mbps {
                if !(l.is_finite() && l > 0.0) {
                    return Err(self.invalid(format!("sites[{i}].lan_mbps"), format!("bandwidth must be positive, got {l}")));
                }
            }
            if self.sites[..i].iter().any(|o| o.name == s.name) {
                return Err(self.invalid(format!("sites[{i}].name"), format!("duplicate site name '{}'", s.name)));
            }
        }
        let n = &self.network;
        for (field, v) in [("network.lan_mbps", n.lan_mbps), ("network.wan_mbps", n.wan_mbps)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(self.invalid(field, format!("bandwidth must be positive, got {v}")));
            }
        }
        for (i, l) in n.links.iter().enumerate() {
            if !(l.mbps.is_finite() && l.mbps > 0.0) {
                return Err(self.invalid(
                    format!("network.links[{i}].mbps"),
                    format!("bandwidth must be positive, got {}", l.mbps),
                ));
            }
            for (end, name) in [("a", &l.a), ("b", &l.b)] {
                if self.site_index(name).is_none() {
                    return Err(self.invalid(format!("network.links[{i}].{end}"), format!("unknown site '{name}'")));
                }
            }
        }
        if let Some(v) = n.stream_mbps.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
            return Err(self.invalid("network.stream_mbps", format!("throughputs must be positive, got {v}")));
        }
        if let Some(w) = &n.worker_copy {
            if !(w.overhead_s.is_finite() && w.overhead_s >= 0.0) || w.s_per_gb.iter().any(|v| !(v.is_finite() && *v >= 0.0)) {
                return Err(self.invalid("network.worker_copy", "times must be non-negative numbers"));
            }
        }
        for (i, f) in self.files.iter().enumerate() {
            if !(f.size_gb.is_finite() && f.size_gb >= 0.0) {
                return Err(self.invalid(format!("files[{i}].size_gb"), "must be a non-negative number"));
            }
            if f.replicas.is_empty() {
                return Err(self.invalid(format!("files[{i}].replicas"), "a file needs at least one replica"));
            }
            for r in &f.replicas {
                if self.site_index(r).is_none() {
                    return Err(self.invalid(format!("files[{i}].replicas"), format!("unknown site '{r}'")));
                }
            }
        }
        if let BackgroundSpec::Band(b) = &self.background {
            if !(0.0 <= b.low && b.low <= b.high && b.high <= 1.0) {
                return Err(self.invalid(
                    "background",
                    format!("need 0 <= low <= high <= 1, got low {} high {}", b.low, b.high),
                ));
            }
        }
        for (site, p) in &self.faults.soft_error_probability {
            if self.site_index(site).is_none() {
                return Err(self.invalid("faults.soft_error_probability", format!("unknown site '{site}'")));
            }
            if !(0.0..=1.0).contains(p) {
                return Err(self.invalid(format!("faults.soft_error_probability.{site}"), "must be in [0, 1]"));
            }
        }
        if self.sample_interval_s == 0 {
            return Err(self.invalid("sample_interval_s", "must be positive"));
        }
        self.scheduler
            .validate()
            .map_err(|e| self.invalid(format!("scheduler.{}", e.field), e.reason))?;
        Ok(())
    }

    /// The error for a workload value, for the workload generator.
    pub fn workload_error(&self, field: &str, reason: impl Into<String>) -> ScenarioError {
        self.invalid(format!("workload.{field}"), reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
name = "t"
[[sites]]
name = "a"
processors = 8
[workload]
kind = "jobs"
jobs = [{ submit_s = 0, components = [4], runtime_s = 10 }]
"#;

    #[test]
    fn minimal_scenario_parses_with_defaults() {
        let s = Scenario::parse(MINIMAL, Path::new("t.toml")).unwrap();
        assert_eq!(s.sites[0].processors, 8);
        assert_eq!(s.network.wan_mbps, 100.0);
        assert_eq!(s.scheduler.claim_fraction, 0.75);
    }

    #[test]
    fn unknown_key_is_named() {
        let text = MINIMAL.replace("processors = 8", "processors = 8\nprocesors = 9");
        let e = Scenario::parse(&text, Path::new("t.toml")).unwrap_err().to_string();
        assert!(e.contains("t.toml") && e.contains("procesors"), "{e}");
    }

    #[test]
    fn negative_bandwidth_names_the_field() {
        let text = format!("{MINIMAL}\n[network]\nwan_mbps = -5\n");
        let e = Scenario::parse(&text, Path::new("t.toml")).unwrap_err().to_string();
        assert!(e.contains("network.wan_mbps") && e.contains("positive"), "{e}");
    }

    #[test]
    fn unknown_policy_is_named() {
        let text = format!("{MINIMAL}\n[scheduler]\ndefault_policy = \"bestfit\"\n");
        let e = Scenario::parse(&text, Path::new("t.toml")).unwrap_err().to_string();
        assert!(e.contains("bestfit") && e.contains("default_policy"), "{e}");
    }
}
