//! A koalesce job seen as a Slurm job: Slurm's state (long and compact names), reason,
//! exit code, nodes (components) and node list (sites).
//!
//! | koalesce            | squeue            | sacct       | reason            |
//! |---------------------|-------------------|-------------|-------------------|
//! | queued              | PENDING / PD      | PENDING     | Resources         |
//! | placed              | PENDING / PD      | PENDING     | None              |
//! | claimed             | CONFIGURING / CF  | RUNNING     | None              |
//! | running             | RUNNING / R       | RUNNING     | None              |
//! | succeeded           | COMPLETED / CD    | COMPLETED   | None              |
//! | failed, exit ≠ 0    | FAILED / F        | FAILED      | NonZeroExitCode   |
//! | failed, time limit  | TIMEOUT / TO      | TIMEOUT     | TimeLimit         |
//! | failed, memory      | OUT_OF_MEMORY/OOM | OUT_OF_MEMORY | OutOfMemory     |
//! | failed, no exit     | FAILED / F        | FAILED      | JobLaunchFailure  |
//! | cancelled           | CANCELLED / CA    | CANCELLED   | None              |

use crate::client_cmds::api::{JobDetail, JobSummary};

/// Slurm's job states (the ones a koalesce job can be in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum State {
    Pending,
    Configuring,
    Running,
    Completed,
    Cancelled,
    Failed,
    Timeout,
    OutOfMemory,
}

/// Every state, for `-t` / `--state` filters.
pub const ALL_STATES: [State; 8] = [
    State::Pending,
    State::Configuring,
    State::Running,
    State::Completed,
    State::Cancelled,
    State::Failed,
    State::Timeout,
    State::OutOfMemory,
];

impl State {
    /// squeue's `%T`, scontrol's `JobState`.
    pub fn long(self) -> &'static str {
        match self {
            State::Pending => "PENDING",
            State::Configuring => "CONFIGURING",
            State::Running => "RUNNING",
            State::Completed => "COMPLETED",
            State::Cancelled => "CANCELLED",
            State::Failed => "FAILED",
            State::Timeout => "TIMEOUT",
            State::OutOfMemory => "OUT_OF_MEMORY",
        }
    }

    /// squeue's `%t`.
    pub fn short(self) -> &'static str {
        match self {
            State::Pending => "PD",
            State::Configuring => "CF",
            State::Running => "R",
            State::Completed => "CD",
            State::Cancelled => "CA",
            State::Failed => "F",
            State::Timeout => "TO",
            State::OutOfMemory => "OOM",
        }
    }

    /// sacct's `State`: accounting knows a configuring job as RUNNING (allocated).
    pub fn sacct(self) -> &'static str {
        match self {
            State::Configuring => "RUNNING",
            s => s.long(),
        }
    }

    /// Pending or running (what squeue lists without `-t`).
    pub fn is_active(self) -> bool {
        matches!(self, State::Pending | State::Configuring | State::Running)
    }

    /// A state named in `-t` / `--state` (long or compact, any case; `all` is the caller's).
    pub fn parse(name: &str) -> Option<State> {
        let n = name.trim().to_ascii_uppercase();
        ALL_STATES.into_iter().find(|s| s.long() == n || s.short() == n)
    }
}

/// Parses a `-t` / `--state` list: `all` or comma-separated state names.
pub fn parse_state_list(list: &str) -> Result<Vec<State>, String> {
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if part.eq_ignore_ascii_case("all") {
            return Ok(ALL_STATES.to_vec());
        }
        match State::parse(part) {
            Some(s) => out.push(s),
            // Slurm states koalesce never produces (SUSPENDED, NODE_FAIL, ...) select nothing.
            None if KNOWN_SLURM_STATES.contains(&part.to_ascii_uppercase().as_str()) => {}
            None => return Err(format!("Invalid job state specified: {part}")),
        }
    }
    Ok(out)
}

/// Slurm state names (long and compact) that koalesce jobs never have.
const KNOWN_SLURM_STATES: [&str; 26] = [
    "BOOT_FAIL",
    "BF",
    "COMPLETING",
    "CG",
    "DEADLINE",
    "DL",
    "NODE_FAIL",
    "NF",
    "PREEMPTED",
    "PR",
    "RESV_DEL_HOLD",
    "RD",
    "REQUEUE_FED",
    "RF",
    "REQUEUE_HOLD",
    "RH",
    "REQUEUED",
    "RQ",
    "RESIZING",
    "RS",
    "REVOKED",
    "RV",
    "SIGNALING",
    "SI",
    "SUSPENDED",
    "S",
];

/// Everything the commands print about one job.
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmJob {
    pub id: u64,
    pub name: String,
    pub user: String,
    pub state: State,
    pub reason: &'static str,
    /// Exit code and signal (`ExitCode=0:0`).
    pub exit_code: (i64, i64),
    pub cpus: u64,
    /// Components (each is one "node" of the allocation).
    pub nodes: u64,
    /// Sites of the components, comma-separated (empty while pending).
    pub node_list: String,
    pub submit_ms: u64,
    pub start_ms: Option<u64>,
    pub end_ms: Option<u64>,
    /// Not started before this instant (`--begin`).
    pub begin_ms: Option<u64>,
    /// The koalesce failure text, for scontrol's `Comment`.
    pub failure: Option<String>,
    /// The array this job is a task of (its id) and the task's index.
    pub array: Option<(u64, u64)>,
}

/// Whether a job in this koalesce state needs its detail to tell its Slurm state, reason and
/// exit code (a failed job: exit code or time limit?).
pub fn needs_detail(koalesce_state: &str) -> bool {
    koalesce_state == "failed"
}

impl SlurmJob {
    /// The Slurm view of a job from its list entry and (for ended jobs) its detail.
    pub fn new(s: &JobSummary, detail: Option<&JobDetail>) -> SlurmJob {
        let exit_codes: Vec<i64> = detail
            .map(|d| d.components.iter().filter_map(|c| c.exit_code).collect())
            .unwrap_or_default();
        let failure = detail.and_then(|d| d.failure.clone());
        // A waiting job's reason: held by its user, or waiting for its dependencies.
        let waiting = match s.reason.as_deref() {
            Some(r) if r.starts_with("held") => Some("JobHeldUser"),
            Some(r) if r.starts_with("waiting for its begin time") => Some("BeginTime"),
            Some(r) if r.starts_with("waiting") => Some("Dependency"),
            _ => None,
        };
        let (state, reason) = match s.state.as_str() {
            "held" => (State::Pending, waiting.unwrap_or("JobHeldUser")),
            "queued" => (State::Pending, waiting.unwrap_or("Resources")),
            "placed" => (State::Pending, "None"),
            "claimed" => (State::Configuring, "None"),
            "running" => (State::Running, "None"),
            "succeeded" => (State::Completed, "None"),
            "cancelled" => (State::Cancelled, "None"),
            // The limit states of servers that report them by name (issue 11).
            "timeout" => (State::Timeout, "TimeLimit"),
            "out_of_memory" => (State::OutOfMemory, "OutOfMemory"),
            _ => classify_failure(failure.as_deref(), &exit_codes),
        };
        let exit_code = match state {
            State::Cancelled if s.started_ms.is_some() => (0, 15),
            State::Cancelled | State::Pending | State::Configuring | State::Running => (0, 0),
            State::Timeout => (0, 15),
            State::OutOfMemory => (0, 9),
            _ => match exit_codes.iter().find(|c| **c != 0) {
                Some(c) if *c > 0 => (*c, 0),
                Some(c) if *c < -1 => (0, -c),
                Some(_) => (1, 0),
                None if state == State::Failed => (1, 0),
                None => (0, 0),
            },
        };
        SlurmJob {
            id: s.id,
            name: s.name.clone(),
            user: s.user.clone(),
            state,
            reason,
            exit_code,
            cpus: s.size,
            nodes: s.components.max(1),
            node_list: s.sites.join(","),
            submit_ms: s.submitted_ms,
            start_ms: s.started_ms,
            end_ms: s.finished_ms,
            begin_ms: s.begin_ms,
            failure,
            array: s.array_id.zip(s.task_id),
        }
    }

    /// When the job may start (scontrol's `EligibleTime`): its submission, or its begin time.
    pub fn eligible_ms(&self) -> u64 {
        self.submit_ms.max(self.begin_ms.unwrap_or(0))
    }

    /// squeue's `%S`: the start, or for a pending job with a begin time the earliest start
    /// (Slurm prints the expected start of pending jobs).
    pub fn expected_start_ms(&self) -> Option<u64> {
        match (self.start_ms, self.state) {
            (Some(s), _) => Some(s),
            (None, State::Pending) => self.begin_ms,
            (None, _) => None,
        }
    }

    /// The id as Slurm prints it: `ID`, or `ARRAY_TASK` for a task of an array.
    pub fn slurm_id(&self) -> String {
        match self.array {
            Some((a, t)) => format!("{a}_{t}"),
            None => self.id.to_string(),
        }
    }

    /// `ExitCode` as Slurm prints it.
    pub fn exit_code_text(&self) -> String {
        format!("{}:{}", self.exit_code.0, self.exit_code.1)
    }

    /// Seconds the job has run (until now, or until it ended).
    pub fn elapsed_secs(&self, now_ms: u64) -> u64 {
        match self.start_ms {
            Some(st) => self.end_ms.unwrap_or(now_ms).saturating_sub(st) / 1000,
            None => 0,
        }
    }

    /// The partition column: the sites of the placement, or `any` before placement.
    pub fn partition(&self) -> String {
        if self.node_list.is_empty() {
            "any".into()
        } else {
            self.node_list.clone()
        }
    }
}

/// State and reason of a failed job from its failure text and exit codes.
fn classify_failure(failure: Option<&str>, exit_codes: &[i64]) -> (State, &'static str) {
    let f = failure.unwrap_or("").to_ascii_lowercase();
    if f.contains("walltime") || f.contains("time limit") || f.contains("timed out") {
        (State::Timeout, "TimeLimit")
    } else if f.contains("out of memory") || f.contains("memory limit") || f.contains("oom") {
        (State::OutOfMemory, "OutOfMemory")
    } else if exit_codes.iter().any(|c| *c != 0 && *c != -1) {
        (State::Failed, "NonZeroExitCode")
    } else {
        (State::Failed, "JobLaunchFailure")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client_cmds::api::JobDetail;

    fn summary(state: &str) -> JobSummary {
        JobSummary {
            id: 7,
            name: "j".into(),
            user: "u".into(),
            state: state.into(),
            components: 1,
            size: 4,
            sites: vec!["vu".into()],
            submitted_ms: 1000,
            started_ms: Some(2000),
            finished_ms: Some(5000),
            ..Default::default()
        }
    }

    fn detail(exit: Option<i64>, failure: Option<&str>) -> JobDetail {
        serde_json::from_value(serde_json::json!({
            "components": [{"index": 0, "processors": 4, "exit_code": exit}],
            "failure": failure,
        }))
        .unwrap()
    }

    #[test]
    fn states_map_to_slurm_names() {
        for (k, long, short) in [
            ("queued", "PENDING", "PD"),
            ("placed", "PENDING", "PD"),
            ("claimed", "CONFIGURING", "CF"),
            ("running", "RUNNING", "R"),
            ("succeeded", "COMPLETED", "CD"),
            ("cancelled", "CANCELLED", "CA"),
            ("timeout", "TIMEOUT", "TO"),
            ("out_of_memory", "OUT_OF_MEMORY", "OOM"),
        ] {
            let j = SlurmJob::new(&summary(k), None);
            assert_eq!((j.state.long(), j.state.short()), (long, short), "{k}");
        }
        assert_eq!(SlurmJob::new(&summary("claimed"), None).state.sacct(), "RUNNING");
    }

    #[test]
    fn failures_are_classified() {
        let j = SlurmJob::new(&summary("failed"), Some(&detail(Some(3), Some("component 0 exited with 3"))));
        assert_eq!(
            (j.state, j.reason, j.exit_code_text().as_str()),
            (State::Failed, "NonZeroExitCode", "3:0")
        );
        let j = SlurmJob::new(&summary("failed"), Some(&detail(None, Some("walltime 10s exceeded"))));
        assert_eq!((j.state.short(), j.reason), ("TO", "TimeLimit"));
        let j = SlurmJob::new(&summary("failed"), Some(&detail(None, Some("site vu unreachable"))));
        assert_eq!(
            (j.state, j.reason, j.exit_code_text().as_str()),
            (State::Failed, "JobLaunchFailure", "1:0")
        );
        let j = SlurmJob::new(&summary("failed"), Some(&detail(Some(-9), Some("killed"))));
        assert_eq!(j.exit_code_text(), "0:9");
        let j = SlurmJob::new(&summary("cancelled"), None);
        assert_eq!(j.exit_code_text(), "0:15");
        let j = SlurmJob::new(&summary("succeeded"), Some(&detail(Some(0), None)));
        assert_eq!(j.exit_code_text(), "0:0");
        let mut held = summary("held");
        held.reason = Some("held by its user".into());
        assert_eq!(SlurmJob::new(&held, None).reason, "JobHeldUser");
        let mut dep = summary("queued");
        dep.reason = Some("waiting for afterok:3".into());
        dep.array_id = Some(40);
        dep.task_id = Some(2);
        let j = SlurmJob::new(&dep, None);
        assert_eq!((j.state, j.reason, j.slurm_id().as_str()), (State::Pending, "Dependency", "40_2"));
    }

    #[test]
    fn state_lists() {
        assert_eq!(parse_state_list("all").unwrap().len(), ALL_STATES.len());
        assert_eq!(parse_state_list("pd,R").unwrap(), vec![State::Pending, State::Running]);
        assert_eq!(parse_state_list("SUSPENDED").unwrap(), vec![]);
        assert!(parse_state_list("sleeping").is_err());
    }
}
