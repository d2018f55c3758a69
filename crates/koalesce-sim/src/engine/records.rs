//! What a run measured: the per-job, per-bag and utilization records and the result.

use super::*;

/// A simulation that cannot run.
#[derive(Debug, Error)]
pub enum SimError {
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error("{path}: background trace of site '{site}'")]
    Trace {
        path: String,
        site: String,
        #[source]
        source: crate::swf::SwfError,
    },
    #[error("{path}: network: {reason}")]
    Network { path: String, reason: String },
}

/// Progress of a run, reported to the caller now and then.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub now_ms: Millis,
    pub finished_jobs: usize,
    pub total_jobs: usize,
}

/// Processor-milliseconds per category in one bucket of the utilization timeline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UtilizationBucket {
    pub start_ms: Millis,
    /// Local (background) jobs.
    pub background: u64,
    /// Grid components executing.
    pub grid: u64,
    /// Claimed processors waiting at the start barrier (PWT).
    pub pwt: u64,
    /// Placed but not yet claimed processors (PGT: usable by local jobs).
    pub pgt: u64,
    /// Jobs in each placement queue (super-high, high, low, super-low) at the start of the
    /// bucket (timeline buckets only).
    pub queued: [u32; 4],
}

/// What one job did, for the per-job CSV.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    pub id: JobId,
    pub name: String,
    pub state: JobState,
    pub priority: &'static str,
    pub submit: Millis,
    pub placed: Option<Millis>,
    pub claimed: Option<Millis>,
    pub start: Option<Millis>,
    pub end: Option<Millis>,
    pub ftt_ms: Millis,
    pub components: usize,
    /// Processors per component (equal for the generated workloads; the first otherwise).
    pub component_size: u32,
    pub size: u32,
    pub sites: Vec<String>,
    pub placement_tries: u32,
    pub claiming_tries: u32,
    pub total_placement_ms: Millis,
    pub error_resubmissions: u32,
    pub preemptions: u32,
    pub jst_returns: u32,
    /// Final JST minus the first JST estimated (003 §4.2.2 start delay).
    pub start_delay_ms: Option<Millis>,
    /// Input files of the last placement fetched from another site (transfers).
    pub transfers: u32,
    /// Time the last launch spent copying local input to the worker node before running
    /// (`[network.worker_copy]`; the longest over components).
    pub worker_copy_ms: Millis,
    /// The broker's predicted start and delivery (TTS / TTD from the placement), if it ranked
    /// or co-allocated the job.
    pub predicted_start: Option<Millis>,
    pub predicted_delivery: Option<Millis>,
    /// Each component's site (of its last placement; `None` if never placed) and processors.
    pub placement: Vec<ComponentRecord>,
}

/// Where one component of a job was placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentRecord {
    pub site: Option<String>,
    pub processors: u32,
}

impl JobRecord {
    /// "components x size", e.g. "4x16".
    pub fn shape(&self) -> String {
        format!("{}x{}", self.components, self.component_size)
    }
}

/// How a bag of tasks (an explicit job with `tasks`) ended: the core's verdict over its tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BagRecord {
    pub name: String,
    /// Its tasks' job ids, in task order.
    pub tasks: Vec<JobId>,
    pub progress: koalesce_core::bag::BagProgress,
}

/// Everything a run measured.
#[derive(Debug, Clone)]
pub struct SimResult {
    pub scenario: String,
    pub policy: String,
    pub seed: u64,
    pub site_names: Vec<String>,
    /// Processors per site (same order as `site_names`).
    pub site_processors: Vec<u32>,
    pub total_processors: u64,
    pub jobs: Vec<JobRecord>,
    pub rejected: Vec<String>,
    pub bucket_ms: Millis,
    pub timeline: Vec<UtilizationBucket>,
    /// Processor-milliseconds per category and site over the whole run (index = site;
    /// `start_ms` is 0), e.g. for the utilization of the sites left after blacklisting.
    pub site_totals: Vec<UtilizationBucket>,
    pub end_ms: Millis,
    pub last_arrival_ms: Millis,
    pub events: u64,
    pub max_queue_length: usize,
    pub blacklisted: Vec<(Millis, String)>,
    pub soft_errors: u64,
    pub transferred_bytes: u64,
    pub horizon_reached: bool,
    /// Broken invariants seen when checks were on (see [`Simulation::check_invariants`]).
    pub invariant_violations: Vec<String>,
    /// Advance reservations the sites granted / refused, and granted ones that could not be
    /// claimed at their start (a grid job before them overran its reservation).
    pub reservations_granted: u64,
    pub reservations_refused: u64,
    pub reservation_claims_refused: u64,
    /// The scheduler's bandwidth forecast at the end of the run, Mbit/s from (row) → to
    /// (column); 0 on the diagonal.
    pub forecast_mbps: Vec<Vec<f64>>,
    /// Bags of tasks, in workload order.
    pub bags: Vec<BagRecord>,
}
