//! The REST API's answer and request bodies (docs/server-contract.md), defined once: the
//! server renders them, the client reads them, and the OpenAPI document describes them.
//!
//! The OpenAPI document's schemas are generated from these types (utoipa). Times are Unix
//! milliseconds. Readers accept missing fields (`#[serde(default)]`) so that a
//! newer server with more fields, or an older one with fewer, still reads.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One job as `GET /api/v1/jobs` lists it (and `POST /api/v1/jobs/{id}/cancel` answers).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct JobSummary {
    pub id: u64,
    pub name: String,
    pub user: String,
    /// queued, placed, claimed, running, succeeded, failed, timeout, out_of_memory, cancelled.
    pub state: String,
    /// super-high, high, low, super-low (anti-starvation may have raised it).
    pub priority: String,
    /// Number of components.
    pub components: u64,
    /// Processors of all components.
    pub size: u64,
    /// Distinct sites of the current (or last) placement.
    pub sites: Vec<String>,
    pub submitted_ms: u64,
    pub started_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    /// Whether the job succeeded, once it ended.
    pub exit_ok: Option<bool>,
    /// Why a held job waits (`held by its user`, `waiting for afterok:12`, `waiting for its
    /// begin time`), as squeue's REASON.
    pub reason: Option<String>,
    /// The array the job is a task of (`submit --array`): the array's id (its first task's).
    pub array_id: Option<u64>,
    /// The task's index in its array (`KOALESCE_TASK_ID`).
    pub task_id: Option<u64>,
    /// On a bag's id (`submit --tasks N`): the whole bag's state and progress.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bag: Option<BagStatus>,
    /// Not placed before this instant (the job file's `begin`, sbatch `--begin`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub begin_ms: Option<u64>,
}

/// Where a bag of tasks stands (`koalesce submit --tasks N`): its state (running until every
/// task ended; then succeeded when at least `needed` tasks succeeded, else failed, or
/// cancelled when tasks were cancelled) and its tasks counted by state.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct BagStatus {
    /// queued, running, succeeded, failed, cancelled.
    pub state: String,
    pub tasks: u64,
    /// Successful tasks the bag needs (`--min-tasks`; default: all).
    pub needed: u64,
    /// Not started yet (held, queued, placed, claimed).
    pub waiting: u64,
    pub running: u64,
    pub succeeded: u64,
    /// Ended without success (failed, timeout, out_of_memory).
    pub failed: u64,
    pub cancelled: u64,
}

impl JobSummary {
    /// Whether the job reached a final state.
    pub fn is_finished(&self) -> bool {
        is_final_state(&self.state)
    }
}

/// Whether a job state is final (`succeeded`, `failed`, `timeout`, `out_of_memory`,
/// `cancelled`).
pub fn is_final_state(state: &str) -> bool {
    koalesce_core::JobState::TERMINAL_NAMES.contains(&state)
}

/// The job's timeline (003 §4.1): instants and the derived durations.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct Timeline {
    pub submitted: u64,
    /// JPT: the last component was placed.
    pub placed: Option<u64>,
    /// JCT: every component was claimed.
    pub claimed: Option<u64>,
    pub started: Option<u64>,
    pub finished: Option<u64>,
    /// File transfer time (estimate at placement); 0 and meaningless until `placed` is set.
    pub ftt_ms: u64,
    /// The measured stage-in time: the longest input transfer the job had (absent when it
    /// needed none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transfer_ms: Option<u64>,
    /// Processor gained time, JCT − JPT.
    pub pgt_ms: Option<u64>,
    /// Processor wasted time, JST − JCT.
    pub pwt_ms: Option<u64>,
    /// Total waiting time, submission to start.
    pub twt_ms: Option<u64>,
}

/// One component of a job.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct ComponentDetail {
    pub index: u64,
    pub processors: u64,
    pub site: Option<String>,
    /// unplaced, placed, reserved, claimed, running, finished, failed, aborted, skipped.
    pub state: String,
    pub exit_code: Option<i64>,
    /// Path of the component's stdout file on the server.
    pub stdout: Option<String>,
    pub stderr: Option<String>,
}

/// `GET /api/v1/jobs/{id}`: the summary's fields (with `components` as the component list
/// instead of its count) plus timeline, tries, failure and outputs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct JobDetail {
    pub id: u64,
    pub name: String,
    pub user: String,
    pub state: String,
    pub priority: String,
    pub components: Vec<ComponentDetail>,
    pub size: u64,
    pub sites: Vec<String>,
    pub submitted_ms: u64,
    pub started_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    pub exit_ok: Option<bool>,
    pub timeline: Timeline,
    pub placement_tries: u64,
    pub claiming_tries: u64,
    /// Why the job failed (or the last fault it recovered from), for people.
    pub failure: Option<String>,
    /// Logical names of the registered outputs (`<job-id>/<name>`).
    pub outputs: Vec<String>,
    /// Why a held job waits (`held by its user`, `waiting for afterok:12`).
    pub reason: Option<String>,
    /// The array the job is a task of: the array's id (its first task's).
    pub array_id: Option<u64>,
    /// The task's index in its array.
    pub task_id: Option<u64>,
    /// For an array's id: every task of the array with its state.
    pub tasks: Vec<ArrayTask>,
    /// On a bag's id: the whole bag's state and progress.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bag: Option<BagStatus>,
    /// The broker's prediction for a `ttd`/`tts` job (001 §3.1) and, once known, the actual
    /// times; absent for other policies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker: Option<BrokerTimes>,
    /// Not placed before this instant (the job file's `begin`, sbatch `--begin`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub begin_ms: Option<u64>,
}

/// Predicted and actual Total Time to Start / to Delivery of a broker job (001 §3.1), in ms
/// from the moment of the prediction (`made_ms`, the placement).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct BrokerTimes {
    /// The site the prediction chose.
    pub site: String,
    pub made_ms: u64,
    pub stage_in_ms: u64,
    pub queue_wait_ms: u64,
    pub execution_ms: u64,
    pub stage_out_ms: u64,
    /// The queue wait is an advance reservation's start.
    pub reserved: bool,
    pub predicted_tts_ms: u64,
    pub predicted_ttd_ms: u64,
    /// Start − `made_ms`, once the job started.
    pub actual_tts_ms: Option<u64>,
    /// End − `made_ms`, once the job ended.
    pub actual_ttd_ms: Option<u64>,
}

impl BrokerTimes {
    /// Actual minus predicted TTD (ms; positive: later than predicted), once the job ended.
    pub fn ttd_error_ms(&self) -> Option<i64> {
        self.actual_ttd_ms.map(|a| a as i64 - self.predicted_ttd_ms as i64)
    }
    /// Actual minus predicted TTS (ms), once the job started.
    pub fn tts_error_ms(&self) -> Option<i64> {
        self.actual_tts_ms.map(|a| a as i64 - self.predicted_tts_ms as i64)
    }
}

/// One task of an array, as `GET /api/v1/jobs/{array-id}` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct ArrayTask {
    pub task_id: u64,
    /// The task's own job id.
    pub id: u64,
    pub state: String,
}

impl JobDetail {
    /// The job as the list shows it.
    pub fn summary(&self) -> JobSummary {
        JobSummary {
            id: self.id,
            name: self.name.clone(),
            user: self.user.clone(),
            state: self.state.clone(),
            priority: self.priority.clone(),
            components: self.components.len() as u64,
            size: self.size,
            sites: self.sites.clone(),
            submitted_ms: self.submitted_ms,
            started_ms: self.started_ms,
            finished_ms: self.finished_ms,
            exit_ok: self.exit_ok,
            reason: self.reason.clone(),
            array_id: self.array_id,
            task_id: self.task_id,
            bag: self.bag.clone(),
            begin_ms: self.begin_ms,
        }
    }
}

/// A site as `GET /api/v1/sites` lists it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct SiteInfo {
    pub name: String,
    /// "local", "slurm", ...
    pub kind: String,
    pub processors: u64,
    pub idle: u64,
    pub used: u64,
    pub placed_unclaimed: u64,
    pub blacklisted: bool,
    /// When a blacklisted site is re-admitted by itself (none: only by an admin).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blacklisted_until_ms: Option<u64>,
    pub supports_reservations: bool,
    /// Until when (Unix ms) the site takes no component of a `gridway` job, after failures
    /// there (GridWay's failure-rate policy); absent when it is not banned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub banned_until_ms: Option<u64>,
    /// Failures (soft errors) at the site since its last success.
    pub failure_streak: u32,
    /// GridWay's host variables as REQUIREMENTS and RANK see them now (ARCH, CPU_MHZ,
    /// QUEUE_FREENODECOUNT, ...), by name.
    pub host: std::collections::BTreeMap<String, String>,
    /// Software tags the site offers (HAS_SOFTWARE).
    pub software: Vec<String>,
    /// Features of the site's nodes (HAS_FEATURE; sbatch `--constraint`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
    /// Estimated queue wait of a 1-processor job submitted now, in ms (001 §3.1; GLUE's
    /// EstimatedResponseTime): local sites plan their running components to their expected
    /// ends; absent where the scheduler has no estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_wait_ms: Option<u64>,
    /// Relative CPU speed (the site's configuration; 1.0 = reference).
    #[serde(default)]
    pub speed: f64,
    /// Benchmark scores the site publishes (its configuration), by benchmark name; the
    /// broker predicts execution times from them (001 §3.1).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub benchmarks: std::collections::BTreeMap<String, f64>,
}

/// `GET /api/v1/network`: the information service's view of the links between sites
/// (`koalesce sites --network`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct NetworkMatrix {
    /// Site names in configuration order.
    pub sites: Vec<String>,
    /// Every ordered pair of distinct sites, `from` major.
    pub links: Vec<NetworkLink>,
}

/// One direction of the link between two sites.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct NetworkLink {
    pub from: String,
    pub to: String,
    /// The bandwidth the scheduler's transfer-time estimate (FTT) uses now, bits/s.
    pub bandwidth_bps: f64,
    /// The latency it adds, ms.
    pub latency_ms: u64,
    /// Where those values come from: "forecast" (NWS, from measurements) or "initial"
    /// (`initial_bandwidth_bps`: nothing measured yet).
    pub source: String,
    /// The forecaster chosen for this pair (lowest recent error), e.g. "median(5)".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Its recent mean absolute error, bits/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mae_bps: Option<f64>,
    /// The forecast latency, ms (from the round trip before each transfer's body).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_forecast_ms: Option<f64>,
    /// Measurements so far (real transfers and probes).
    pub samples: u64,
    /// When the last was taken (Unix ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_measured_ms: Option<u64>,
    /// Bytes transfers moved from `from` to `to` since the server started.
    pub bytes_moved: u64,
    /// Both sites have storage agents (so the pair is probed when unmeasured).
    pub agents: bool,
}

/// A catalogue entry as `GET /api/v1/files` lists it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct FileInfo {
    pub name: String,
    pub size_bytes: u64,
    pub sha256: String,
    pub replicas: Vec<String>,
    /// The user who registered it (only they or an admin delete it); empty for files
    /// registered before files had owners (admins only).
    pub owner: String,
}

/// `POST /api/v1/files`: register the server-side file `path` at `site` as `name`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewFile {
    pub name: String,
    /// Path of the file on the server's machine.
    #[schema(value_type = String)]
    pub path: std::path::PathBuf,
    pub site: String,
}

/// `POST /api/v1/jobs` answer: the new job's id (sent once the job is durable).
/// A bearer token as `GET /api/v1/tokens` lists it (never the token itself).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct TokenInfo {
    /// Public id: the first 16 hex digits of the token's SHA-256 (`DELETE /api/v1/tokens/{id}`).
    pub id: String,
    pub user: String,
    pub admin: bool,
    pub created_ms: u64,
    /// After this instant the token is refused; none: never expires.
    pub expires_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Submitted {
    /// The job's id; for an array, the array's id (its first task's).
    pub id: u64,
    /// For an array: every task's job id, in task order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<u64>,
}

/// Every 4xx/5xx answer: a message naming the field and the reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: String,
}

/// `POST /api/v1/reservations` and `PUT /api/v1/reservations/{id}`: an advance reservation
/// request (001 §2.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewReservation {
    pub site: String,
    pub processors: u32,
    /// How long the processors are held (`90s`, `2h`, `HH:MM:SS`).
    pub duration: String,
    /// Earliest acceptable start, Unix ms (default: now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earliest_start_ms: Option<u64>,
    /// Latest acceptable start, Unix ms (default: the earliest start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_start_ms: Option<u64>,
    /// The site may move the reservation inside the window later (001 §2.3): later to make
    /// room for another request, earlier when processors free up; a job held in it follows.
    /// Only sites that move reservations (the local executor) take it: elsewhere (Slurm) 422.
    #[serde(default)]
    pub flexible: bool,
}

/// A granted advance reservation.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct ReservationInfo {
    /// `R<n>`.
    pub id: String,
    pub user: String,
    pub site: String,
    pub processors: u32,
    /// Start as it is now (a flexible reservation: where its site last moved it).
    pub start_ms: u64,
    /// Exclusive end (start + duration).
    pub end_ms: u64,
    /// The window the request accepted; a flexible reservation stays inside it.
    pub earliest_start_ms: u64,
    pub latest_start_ms: u64,
    pub flexible: bool,
    pub created_ms: u64,
    /// waiting, active, ended (cancelled in the answer to a cancel).
    pub state: String,
}
