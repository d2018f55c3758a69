//! The grid model: sites, network forecasts, files and their replicas, jobs and components.
//!
//! Everything here is plain data. Time is integer milliseconds ([`Millis`]); sizes are bytes;
//! bandwidths are bits per second.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::expr::JobExpr;

/// Time in milliseconds. The core never reads a clock: every entry point takes `now`.
pub type Millis = u64;

/// Index of a site in the grid (dense, `0..grid.sites.len()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SiteId(pub u32);

impl SiteId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for SiteId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "site#{}", self.0)
    }
}

/// Identifier of a grid job, assigned by the scheduler in submission order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JobId(pub u64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One cluster of the grid as the scheduler knows it (003 §2.2.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Site {
    /// Unique name; CF breaks ties between file sites alphabetically by this name.
    pub name: String,
    /// Processors managed by the site's local resource manager.
    pub processors: u32,
    /// Relative processor speed (1.0 = reference). Runtimes on this site are `runtime / speed`.
    pub speed: f64,
    /// Whether the local resource manager offers advance reservations (Slurm does; PBS in the
    /// seeds did not). When it does, the core reserves right after placement instead of claiming.
    pub supports_reservations: bool,
    /// What the information service publishes about the site beyond its size (GLUE-style):
    /// used by requirements and rank expressions and by benchmark-based runtime prediction.
    #[serde(default)]
    pub attributes: SiteAttributes,
}

/// The static description of a site, normalized GLUE-style (001 §3.1, the host variables of
/// GridWay in 004). Values that change (free processors, queue wait) live in the scheduler's
/// view of the site, not here. Empty strings and zeros mean "not published".
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SiteAttributes {
    /// CPU architecture as `uname -m` prints it ("x86_64", "aarch64").
    pub architecture: String,
    /// Operating system name ("Linux") and version ("6.1").
    pub os_name: String,
    pub os_version: String,
    /// CPU model and clock (MHz) of the site's nodes.
    pub cpu_model: String,
    pub cpu_mhz: u32,
    /// Nodes of the site and processors per node (0: not published).
    pub nodes: u32,
    pub cpus_per_node: u32,
    /// Memory per node and disk of the site's scratch space, in MiB.
    pub memory_mb: u64,
    pub disk_mb: u64,
    /// The local resource manager ("local", "slurm") and the queue/partition jobs go to.
    pub lrms_type: String,
    pub queue_name: String,
    /// The queue's wall-time limit, if any.
    pub queue_max_walltime_ms: Option<Millis>,
    /// Benchmark scores p_b(R) by benchmark name (001 §3.1: higher is faster).
    pub benchmarks: BTreeMap<String, f64>,
    /// Software / runtime environments the site offers (xRSL's runTimeEnvironment), as
    /// `HAS_SOFTWARE("tag")` asks (compared ignoring ASCII case).
    pub software: Vec<String>,
    /// Features of the site's nodes (Slurm's node features: `ib`, `haswell`, ...), as
    /// `HAS_FEATURE("name")` asks (compared ignoring ASCII case) and `sbatch --constraint`
    /// requires.
    pub features: Vec<String>,
}

impl SiteAttributes {
    /// The tags `HAS_SOFTWARE` and `HAS_FEATURE` are answered from: the software tags, and
    /// the features behind [`crate::expr::FEATURE_TAG_PREFIX`].
    pub fn tags(&self) -> Vec<String> {
        let features = self.features.iter().map(|f| format!("{}{f}", crate::expr::FEATURE_TAG_PREFIX));
        self.software.iter().cloned().chain(features).collect()
    }
}

/// Forecast of the network between sites, as the information service provides it (003 §3.1).
///
/// Bandwidth is in bits per second, latency in milliseconds. The driver refreshes it from
/// measured transfers; the core only reads it to estimate transfer times.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkForecast {
    sites: usize,
    /// Row-major `sites × sites` matrix of (bandwidth bps, latency ms) from → to.
    links: Vec<(f64, Millis)>,
}

impl NetworkForecast {
    /// A forecast where every pair of distinct sites has the same bandwidth and latency.
    pub fn uniform(sites: usize, bandwidth_bps: f64, latency_ms: Millis) -> Self {
        NetworkForecast {
            sites,
            links: vec![(bandwidth_bps, latency_ms); sites * sites],
        }
    }

    pub fn set(&mut self, from: SiteId, to: SiteId, bandwidth_bps: f64, latency_ms: Millis) {
        let i = from.index() * self.sites + to.index();
        self.links[i] = (bandwidth_bps, latency_ms);
    }

    pub fn get(&self, from: SiteId, to: SiteId) -> (f64, Millis) {
        self.links[from.index() * self.sites + to.index()]
    }

    /// Estimated time to move `bytes` from `from` to `to`: latency + size / bandwidth, rounded
    /// up to the millisecond; zero when the file is already there.
    pub fn transfer_ms(&self, from: SiteId, to: SiteId, bytes: u64) -> Millis {
        if from == to || bytes == 0 {
            return 0;
        }
        let (bps, latency) = self.get(from, to);
        if bps <= 0.0 || !bps.is_finite() {
            return Millis::MAX / 4;
        }
        latency + ((bytes as f64) * 8.0 * 1000.0 / bps).ceil() as Millis
    }

    pub fn sites(&self) -> usize {
        self.sites
    }
}

/// A read-only logical file and the sites that hold a replica of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub size_bytes: u64,
    pub replicas: BTreeSet<SiteId>,
}

/// The replica catalogue: logical file name → size and replica sites (003 §3.1, 004).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaCatalogue {
    files: BTreeMap<String, FileEntry>,
}

impl ReplicaCatalogue {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a file (or replaces its size) with the given replicas.
    pub fn insert(&mut self, name: impl Into<String>, size_bytes: u64, replicas: impl IntoIterator<Item = SiteId>) {
        self.files.insert(
            name.into(),
            FileEntry {
                size_bytes,
                replicas: replicas.into_iter().collect(),
            },
        );
    }

    /// Records one more replica of an existing file. Returns false when the file is unknown.
    pub fn add_replica(&mut self, name: &str, site: SiteId) -> bool {
        match self.files.get_mut(name) {
            Some(entry) => {
                entry.replicas.insert(site);
                true
            }
            None => false,
        }
    }

    pub fn get(&self, name: &str) -> Option<&FileEntry> {
        self.files.get(name)
    }

    pub fn remove(&mut self, name: &str) -> Option<FileEntry> {
        self.files.remove(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &FileEntry)> {
        self.files.iter()
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// Job priority, highest first (003 §2.2.3). Each has its own placement queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Priority {
    SuperHigh,
    #[default]
    High,
    Low,
    SuperLow,
}

impl Priority {
    pub const ALL: [Priority; 4] = [Priority::SuperHigh, Priority::High, Priority::Low, Priority::SuperLow];

    /// Position in [`Priority::ALL`], 0 = highest.
    pub fn rank(self) -> usize {
        self as usize
    }

    /// One level up, used by anti-starvation; super-low and super-high never move.
    pub fn promoted(self) -> Priority {
        match self {
            Priority::Low => Priority::High,
            Priority::High => Priority::SuperHigh,
            other => other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Priority::SuperHigh => "super-high",
            Priority::High => "high",
            Priority::Low => "low",
            Priority::SuperLow => "super-low",
        }
    }
}

/// A priority name that is none of the four (the text given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown priority '{0}' (expected super-high, high, low or super-low)")]
pub struct UnknownPriority(pub String);

impl std::str::FromStr for Priority {
    type Err = UnknownPriority;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Priority::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| UnknownPriority(s.to_string()))
    }
}

/// The placement policies the core implements (003 §4.3; CM/FCM after Sonmez et al.; TTD/TTS
/// after 001 §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PolicyKind {
    /// Worst-Fit: each component to the site with most idle processors.
    Wf,
    /// Close-to-Files: components close to their input files, with history table H.
    #[default]
    Cf,
    /// Cluster Minimization: as few sites as possible for a non-fixed job.
    Cm,
    /// Flexible Cluster Minimization: split a flexible job's total over as few sites as possible.
    Fcm,
    /// The broker's earliest completion (001 §3.1): the site with the least predicted Total Time
    /// to Delivery = stage-in + queue wait + execution + stage-out (see [`crate::broker`]).
    Ttd,
    /// The broker's earliest start (001 §3.1): the site with the least predicted Total Time to
    /// Start = stage-in + queue wait.
    Tts,
    /// GridWay's resource prioritization (004 Eq. 1): each component to the site of highest
    /// priority among those meeting the job's REQUIREMENTS, with the job's RANK, fixed site
    /// priorities and usage history as weighted terms (see [`crate::gridway`]).
    Gridway,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 7] = [
        PolicyKind::Wf,
        PolicyKind::Cf,
        PolicyKind::Cm,
        PolicyKind::Fcm,
        PolicyKind::Ttd,
        PolicyKind::Tts,
        PolicyKind::Gridway,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Wf => "wf",
            PolicyKind::Cf => "cf",
            PolicyKind::Cm => "cm",
            PolicyKind::Fcm => "fcm",
            PolicyKind::Ttd => "ttd",
            PolicyKind::Tts => "tts",
            PolicyKind::Gridway => "gridway",
        }
    }

    /// Whether the broker's ranking (001 §3.1) places jobs of this policy.
    pub fn is_broker(self) -> bool {
        matches!(self, PolicyKind::Ttd | PolicyKind::Tts)
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A placement policy name the core does not implement (the text given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown placement policy '{0}' (expected one of: wf, cf, cm, fcm, ttd, tts, gridway)")]
pub struct UnknownPolicy(pub String);

impl std::str::FromStr for PolicyKind {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.to_ascii_lowercase();
        PolicyKind::ALL
            .into_iter()
            .find(|p| p.name() == lower)
            .ok_or_else(|| UnknownPolicy(s.to_string()))
    }
}

/// One component of a job: a number of processors, optionally on a named site.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentSpec {
    pub processors: u32,
    /// The site the user fixed for this component, if any.
    pub fixed_site: Option<SiteId>,
}

/// A flexible request (003 §2.2.2): only a total; the scheduler splits it into components.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlexibleRequest {
    pub total: u32,
    /// No component smaller than this (except when the whole job fits one site).
    pub min_component: u32,
    /// At most this many components.
    pub max_components: u32,
}

/// The kinds of request of 003 §2.2.2, derived from a [`JobSpec`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequestKind {
    Fixed,
    NonFixed,
    SemiFixed,
    Flexible,
}

/// How input files are delivered: every component gets the whole of each file, or each
/// component gets a disjoint chunk (size / components).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum FileMode {
    #[default]
    Whole,
    Chunks,
}

/// What a user submits: the job as the core sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct JobSpec {
    pub name: String,
    /// Components of a rigid job; empty when `flexible` is set.
    pub components: Vec<ComponentSpec>,
    pub flexible: Option<FlexibleRequest>,
    /// Logical names of input files (must be in the replica catalogue).
    pub input_files: Vec<String>,
    pub file_mode: FileMode,
    /// GridWay's REQUIREMENTS (004 §3.2): only sites where it holds may take a component, under
    /// every placement policy. Compiled once, evaluated per site in the placement scan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirements: Option<JobExpr>,
    /// GridWay's RANK: preference among qualifying sites, highest first. With no policy chosen
    /// the job is placed by the `gridway` policy (004 Eq. 1); with a KOALA policy it breaks that
    /// policy's ties (see [`crate::gridway`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<JobExpr>,
    /// GridWay's DEADLINE: the job should start within this time of its submission (drives
    /// the deadline job-priority policy under `queueing = "gridway"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<Millis>,
    /// Not placed before this instant (Slurm's `--begin`), on the driver's clock: the job is
    /// [`crate::state::JobState::Held`] until then, and the core's timer queues it. Absolute,
    /// unlike [`JobPreferences::earliest_start_ms`] (the broker's T_e, relative to submission),
    /// so a driver that re-enters the job after a restart keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub begin_ms: Option<Millis>,
    /// Who submitted the job (GridWay's share policy divides dispatches among owners).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The user's runtime estimate, used for reservations.
    pub runtime_estimate_ms: Millis,
    pub priority: Priority,
    /// Placement policy for this job; `None` uses the scheduler's default.
    pub policy: Option<PolicyKind>,
    /// Minimum number of components that must be placed and started (bag of tasks, 003 §3.3);
    /// `None` means all (co-allocation is atomic).
    pub min_components: Option<u32>,
    /// The optional job preferences document of 001 §2.4: benchmarks for runtime prediction,
    /// stage-in/out estimates, the start window and how to co-allocate.
    #[serde(default)]
    pub preferences: JobPreferences,
    /// The driver registers the job's outputs after it succeeds (stage-out of declared
    /// outputs): jobs depending on it wait until [`crate::Scheduler::outputs_registered`], so a
    /// dependent that reads an output finds it (as Slurm holds dependents while a job is
    /// COMPLETING).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stages_out: bool,
}

impl JobSpec {
    /// A non-fixed job of equal components with the given input files.
    pub fn simple(name: impl Into<String>, sizes: &[u32], input_files: &[&str], runtime_estimate_ms: Millis) -> Self {
        JobSpec {
            name: name.into(),
            components: sizes
                .iter()
                .map(|&p| ComponentSpec {
                    processors: p,
                    fixed_site: None,
                })
                .collect(),
            flexible: None,
            input_files: input_files.iter().map(|s| s.to_string()).collect(),
            file_mode: FileMode::Whole,
            runtime_estimate_ms,
            priority: Priority::High,
            policy: None,
            min_components: None,
            preferences: JobPreferences::default(),
            ..JobSpec::default()
        }
    }

    pub fn request_kind(&self) -> RequestKind {
        if self.flexible.is_some() {
            return RequestKind::Flexible;
        }
        let fixed = self.components.iter().filter(|c| c.fixed_site.is_some()).count();
        match fixed {
            0 => RequestKind::NonFixed,
            n if n == self.components.len() => RequestKind::Fixed,
            _ => RequestKind::SemiFixed,
        }
    }

    /// Total processors requested.
    pub fn total_processors(&self) -> u32 {
        match &self.flexible {
            Some(f) => f.total,
            None => self.components.iter().map(|c| c.processors).sum(),
        }
    }
}

/// One benchmark the user names for runtime prediction (001 §3.1): its score `p_b_ref` on some
/// reference system, and the application's (predicted) execution time `t_ref` there. A site
/// publishing score `p_b(R)` ([`SiteAttributes::benchmarks`]) is predicted to run the
/// application in `t_b(R) = t_ref · p_b_ref / p_b(R)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchmarkRef {
    pub name: String,
    pub reference_score: f64,
    pub reference_time_ms: Millis,
}

/// How the components of a job are made to start together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum CoallocationMode {
    /// KOALA's claiming without reservations (003 §4.2.2), with reservations right after
    /// placement at sites that offer them.
    #[default]
    Claiming,
    /// The broker's co-allocation by advance reservations (001 §3.2, Algorithms 1 and 2): one
    /// reservation per component, all starting within ε of each other inside the start window.
    Reservations,
}

impl CoallocationMode {
    pub fn name(self) -> &'static str {
        match self {
            CoallocationMode::Claiming => "claiming",
            CoallocationMode::Reservations => "reservations",
        }
    }
}

/// A co-allocation mode that is neither `claiming` nor `reservations` (the text given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown co-allocation mode '{0}' (expected claiming or reservations)")]
pub struct UnknownCoallocationMode(pub String);

impl std::str::FromStr for CoallocationMode {
    type Err = UnknownCoallocationMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "claiming" => Ok(CoallocationMode::Claiming),
            "reservations" => Ok(CoallocationMode::Reservations),
            _ => Err(UnknownCoallocationMode(s.to_string())),
        }
    }
}

/// The optional job preferences document (001 §2.4). Every field is optional; the defaults
/// change nothing.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JobPreferences {
    /// Benchmarks relevant to the application; execution is predicted as the mean of
    /// `t_b(R)` over them. Empty: the runtime estimate scaled by the site's speed.
    pub benchmarks: Vec<BenchmarkRef>,
    /// The user's stage-in time, used when the core cannot estimate transfers (the job names
    /// no input file of the replica catalogue) (001 §3.1).
    pub stage_in_ms: Option<Millis>,
    /// The user's stage-out time (001 §3.1: only user input can predict it).
    pub stage_out_ms: Millis,
    /// How a job is co-allocated; `None`: the scheduler's default.
    pub coallocation: Option<CoallocationMode>,
    /// Earliest acceptable start T_e, in ms after submission (001 §2.4); `None`: at once.
    pub earliest_start_ms: Option<Millis>,
    /// Latest acceptable start T_l, in ms after submission; `None`: the scheduler's
    /// co-allocation horizon after the time of each try.
    pub latest_start_ms: Option<Millis>,
    /// Maximum deviation ε between the components' starts (001 §3.2.2); `None`: the
    /// scheduler's default.
    pub max_start_deviation_ms: Option<Millis>,
    /// The job runs inside an advance reservation its owner already holds (`reservation =
    /// "ID"` in the job file; 001 §2.3's admission of a job into its reservation): at the
    /// reservation's site, on its processors, from its start. The driver checked the owner.
    pub held_reservation: Option<HeldReservation>,
}

/// A granted reservation a job runs in (see [`JobPreferences::held_reservation`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeldReservation {
    /// The reservation's id as the user knows it (opaque to the core).
    pub id: String,
    pub site: SiteId,
    pub processors: u32,
    pub start: Millis,
    /// Exclusive end.
    pub end: Millis,
}

/// The timeline of one job (003 §4.1, 000 Fig. 2). After a return to the placement queue,
/// placement/claiming/start are the latest values; `submitted` stays.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timeline {
    /// A: submission.
    pub submitted: Millis,
    /// When the job (last) entered a placement queue.
    pub queued: Millis,
    /// B: job placement time (JPT) of the latest placement.
    pub placed: Option<Millis>,
    /// First JPT, for the start delay.
    pub first_placed: Option<Millis>,
    /// C: when claiming (last) succeeded for every component.
    pub claimed: Option<Millis>,
    /// Estimated job start time JST = JPT + FTT of the latest placement.
    pub estimated_start: Option<Millis>,
    /// The first JST ever estimated (start delay = final JST − first JST).
    pub first_estimated_start: Option<Millis>,
    /// D: actual start (all components released from the barrier).
    pub started: Option<Millis>,
    /// E: finish.
    pub finished: Option<Millis>,
    /// Estimated file transfer time of the latest placement (max over components).
    pub ftt_ms: Millis,
    /// Sum of all placement times (entering the queue to JPT), 003 §4.2.2.
    pub total_placement_ms: Millis,
}

impl Timeline {
    /// Processor gained time PGT = JCT − JPT.
    pub fn pgt_ms(&self) -> Option<Millis> {
        Some(self.claimed?.saturating_sub(self.placed?))
    }
    /// Processor wasted time PWT = start − JCT.
    pub fn pwt_ms(&self) -> Option<Millis> {
        Some(self.started?.saturating_sub(self.claimed?))
    }
    /// Total waiting time TWT = submission to actual start.
    pub fn twt_ms(&self) -> Option<Millis> {
        Some(self.started?.saturating_sub(self.submitted))
    }
    /// Response time: submission to finish.
    pub fn response_ms(&self) -> Option<Millis> {
        Some(self.finished?.saturating_sub(self.submitted))
    }
}
