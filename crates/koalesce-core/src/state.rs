//! The job and component state machines: closed sets of states and the only legal transitions.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Why a job ended without success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureReason {
    /// More placement tries than the configured threshold.
    PlacementTries,
    /// More claiming rounds than the configured threshold.
    ClaimingTries,
    /// More resubmissions after soft errors than the configured threshold.
    TooManyErrors,
    /// The application itself failed (non-zero exit not caused by the site).
    ApplicationError,
    /// No usable site can ever hold the job (e.g. every large enough site is blacklisted).
    Unplaceable,
    /// A bag of tasks ended with fewer successful tasks than it needs.
    TooFewTasks { succeeded: u32, needed: u32, tasks: u32 },
    /// A component reached its wall-time limit and was killed (Slurm's TIMEOUT).
    Timeout,
    /// A component went over its memory limit and was killed (Slurm's OUT_OF_MEMORY).
    OutOfMemory,
    /// A job it depends on ended so that the dependency can never be satisfied (Slurm's
    /// DependencyNeverSatisfied).
    DependencyNeverSatisfied,
    /// The advance reservation the job was to run in ended or was cancelled before the job
    /// could start in it.
    ReservationGone,
    /// An input file of a job that waited for other jobs is not in the catalogue when it may
    /// start (the job it depends on did not register it).
    MissingInput,
}

impl std::fmt::Display for FailureReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FailureReason::PlacementTries => f.write_str("placement tries exceeded the threshold"),
            FailureReason::ClaimingTries => f.write_str("claiming tries exceeded the threshold"),
            FailureReason::TooManyErrors => f.write_str("too many resubmissions after soft errors"),
            FailureReason::ApplicationError => f.write_str("a component failed"),
            FailureReason::Unplaceable => f.write_str("no usable site can hold the job"),
            FailureReason::TooFewTasks { succeeded, needed, tasks } => {
                write!(f, "bag: {succeeded} of {tasks} components succeeded, at least {needed} needed")
            }
            FailureReason::Timeout => f.write_str("a component reached its wall-time limit"),
            FailureReason::OutOfMemory => f.write_str("a component went over its memory limit"),
            FailureReason::DependencyNeverSatisfied => f.write_str("a dependency can never be satisfied"),
            FailureReason::ReservationGone => f.write_str("its advance reservation ended or was cancelled before it could start"),
            FailureReason::MissingInput => f.write_str("an input file is not in the catalogue when the job may start"),
        }
    }
}

/// State of a grid job. Terminal states are `Succeeded`, `Failed` and `Cancelled`; a job that
/// failed by reaching its wall time or its memory limit is named `timeout` / `out_of_memory`
/// (as Slurm's TIMEOUT and OUT_OF_MEMORY) instead of `failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "state", content = "reason")]
pub enum JobState {
    /// In a placement queue, waiting for a successful placement.
    Queued,
    /// Not eligible for placement: held by its user, or waiting for jobs it depends on (see
    /// [`crate::scheduler::Gate`]). Released into the placement queue.
    Held,
    /// Placed; in the claiming queue (or holding reservations) until every component is claimed.
    Placed,
    /// Every component holds its processors; waiting for input files / the start barrier.
    Claimed,
    /// Components are executing.
    Running,
    Succeeded,
    Failed(FailureReason),
    Cancelled,
}

impl JobState {
    /// Every state name [`JobState::name`] gives, in lifecycle order (the API's `state` values).
    pub const NAMES: [&'static str; 10] = [
        "held",
        "queued",
        "placed",
        "claimed",
        "running",
        "succeeded",
        "failed",
        "timeout",
        "out_of_memory",
        "cancelled",
    ];

    /// Names of the terminal states.
    pub const TERMINAL_NAMES: [&'static str; 5] = ["succeeded", "failed", "timeout", "out_of_memory", "cancelled"];

    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Succeeded | JobState::Failed(_) | JobState::Cancelled)
    }

    pub fn name(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Held => "held",
            JobState::Placed => "placed",
            JobState::Claimed => "claimed",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed(FailureReason::Timeout) => "timeout",
            JobState::Failed(FailureReason::OutOfMemory) => "out_of_memory",
            JobState::Failed(_) => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    /// The legal transitions. Any non-terminal job can be cancelled or failed; jobs go back to
    /// the placement queue from every active state (JST reached, preemption, soft error).
    pub fn can_become(self, next: JobState) -> bool {
        use JobState::*;
        match (self, next) {
            (s, _) if s.is_terminal() => false,
            (_, Cancelled) => true,
            (_, Failed(_)) => true,
            (Queued, Placed) | (Queued, Held) | (Held, Queued) => true,
            (Placed, Claimed) | (Placed, Queued) => true,
            (Claimed, Running) | (Claimed, Queued) => true,
            (Running, Succeeded) | (Running, Queued) => true,
            _ => false,
        }
    }
}

/// An attempt to make a job take a transition the state machine forbids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("illegal job state transition {from:?} -> {to:?}")]
pub struct IllegalTransition {
    pub from: JobState,
    pub to: JobState,
}

/// State of one component within an active job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ComponentState {
    /// Not placed (job in the placement queue).
    Unplaced,
    /// Placed on a site; processors counted as placed-but-unclaimed there.
    Placed,
    /// A reservation was asked for and is pending or granted.
    Reserved,
    /// Processors claimed at the site; waiting at the start barrier.
    Claimed,
    Running,
    /// Ended successfully.
    Finished,
    /// The application failed (a bag of tasks goes on without it; any other job fails).
    Failed,
    /// Killed because its job ended (cancelled, or failed by another component).
    Aborted,
    /// Not placed in this run of a bag-of-tasks job (placed with at least `min_components`);
    /// placed again if the job returns to the queue.
    Skipped,
}

impl ComponentState {
    /// The state's name in the API and logs.
    pub fn name(self) -> &'static str {
        match self {
            ComponentState::Unplaced => "unplaced",
            ComponentState::Placed => "placed",
            ComponentState::Reserved => "reserved",
            ComponentState::Claimed => "claimed",
            ComponentState::Running => "running",
            ComponentState::Finished => "finished",
            ComponentState::Failed => "failed",
            ComponentState::Aborted => "aborted",
            ComponentState::Skipped => "skipped",
        }
    }

    /// Whether the component ended in this run (successfully or not).
    pub fn is_done(self) -> bool {
        matches!(self, ComponentState::Finished | ComponentState::Failed | ComponentState::Aborted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_states_are_final() {
        for t in [
            JobState::Succeeded,
            JobState::Cancelled,
            JobState::Failed(FailureReason::PlacementTries),
        ] {
            for n in [JobState::Queued, JobState::Placed, JobState::Running, JobState::Cancelled] {
                assert!(!t.can_become(n), "{t:?} -> {n:?}");
            }
        }
    }

    #[test]
    fn forward_path_is_legal_and_skips_are_not() {
        use JobState::*;
        assert!(Queued.can_become(Placed));
        assert!(Placed.can_become(Claimed));
        assert!(Claimed.can_become(Running));
        assert!(Running.can_become(Succeeded));
        assert!(!Queued.can_become(Running));
        assert!(!Queued.can_become(Succeeded));
        assert!(!Placed.can_become(Running));
        assert!(!Queued.can_become(Queued));
    }
}
