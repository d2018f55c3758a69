//! Bags of tasks: what a bag's tasks' states make of the bag (GridWay's array jobs,
//! `koalesce submit --tasks N`; 003 §3.3's bag semantics).
//!
//! A bag of N tasks is N jobs of the core, one per task, each queued, matched (REQUIREMENTS,
//! RANK), placed and run on its own: a task's placement never waits for another's. What makes
//! them a bag is this module, which both drivers (the daemon, the simulator) use to tell where
//! the bag stands:
//! - a task that fails (application error, time-out, out of memory, a failed dependency) is a
//!   failed task, not a failure of the others — they go on;
//! - the bag ends when every task has ended, and it succeeded when at least `needed` tasks
//!   succeeded (all of them unless the user asked for fewer), as a bag of components does
//!   ([`bag_verdict`], which the scheduler's component bags use too);
//! - a bag some of whose tasks were cancelled and that did not reach `needed` is cancelled.

use serde::{Deserialize, Serialize};

use crate::state::{FailureReason, JobState};

/// How far a bag has come: its tasks counted by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BagProgress {
    /// Tasks in the bag.
    pub tasks: u32,
    /// Successful tasks the bag needs.
    pub needed: u32,
    /// Not started yet (held, queued, placed or claiming).
    pub waiting: u32,
    pub running: u32,
    pub succeeded: u32,
    /// Ended without success (failed, timed out, out of memory).
    pub failed: u32,
    pub cancelled: u32,
}

impl BagProgress {
    /// The progress of a bag whose tasks are in `states`; `needed` is capped at the number of
    /// tasks (and is at least 1).
    pub fn of(states: impl IntoIterator<Item = JobState>, needed: u32) -> Self {
        let mut p = BagProgress::default();
        for s in states {
            p.tasks += 1;
            *p.count_of(s) += 1;
        }
        p.needed = needed.clamp(1, p.tasks.max(1));
        p
    }

    /// The counter a task in state `s` is counted in.
    fn count_of(&mut self, s: JobState) -> &mut u32 {
        match s {
            JobState::Running => &mut self.running,
            JobState::Succeeded => &mut self.succeeded,
            JobState::Cancelled => &mut self.cancelled,
            s if s.is_terminal() => &mut self.failed,
            _ => &mut self.waiting,
        }
    }

    /// One task went from state `from` to state `to` (a driver or the core keeping the
    /// progress of a large bag without counting every task again).
    pub fn moved(&mut self, from: JobState, to: JobState) {
        let old = self.count_of(from);
        *old = old.saturating_sub(1);
        *self.count_of(to) += 1;
    }

    /// Whether the bag can no longer succeed: more tasks ended without success than it can
    /// spare (decided before every task ended).
    pub fn cannot_succeed(&self) -> bool {
        self.failed + self.cancelled > self.tasks.saturating_sub(self.needed)
    }

    /// [`BagProgress::of`] from state names ([`JobState::name`]: `failed`, `timeout` and
    /// `out_of_memory` count as failed), as a driver stores them.
    pub fn of_names<'a>(names: impl IntoIterator<Item = &'a str>, needed: u32) -> Self {
        let state = |n: &str| match n {
            "running" => JobState::Running,
            "succeeded" => JobState::Succeeded,
            "cancelled" => JobState::Cancelled,
            n if JobState::TERMINAL_NAMES.contains(&n) => JobState::Failed(FailureReason::ApplicationError),
            _ => JobState::Queued,
        };
        BagProgress::of(names.into_iter().map(state), needed)
    }

    /// Tasks that have ended, however.
    pub fn ended(&self) -> u32 {
        self.succeeded + self.failed + self.cancelled
    }

    /// The bag's final state once every task has ended (`None` before).
    pub fn outcome(&self) -> Option<JobState> {
        if self.ended() < self.tasks {
            return None;
        }
        Some(match bag_verdict(self.succeeded, self.needed, self.tasks) {
            JobState::Failed(_) if self.cancelled > 0 => JobState::Cancelled,
            s => s,
        })
    }

    /// The bag's state: its outcome once every task ended; before, running while any task
    /// runs or has ended, else queued.
    pub fn state(&self) -> JobState {
        match self.outcome() {
            Some(s) => s,
            None if self.running > 0 || self.ended() > 0 => JobState::Running,
            None => JobState::Queued,
        }
    }

    /// "3 succeeded, 1 failed, 2 running, 4 waiting (of 10; 10 needed)".
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (n, what) in [
            (self.succeeded, "succeeded"),
            (self.failed, "failed"),
            (self.cancelled, "cancelled"),
            (self.running, "running"),
            (self.waiting, "waiting"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {what}"));
            }
        }
        format!("{} (of {}; {} needed)", parts.join(", "), self.tasks, self.needed)
    }
}

/// The final state of a bag (of tasks or of components) whose `tasks` all ended,
/// `succeeded` of them well, that needs `needed` successes.
pub fn bag_verdict(succeeded: u32, needed: u32, tasks: u32) -> JobState {
    let needed = needed.min(tasks);
    if succeeded >= needed {
        JobState::Succeeded
    } else {
        JobState::Failed(FailureReason::TooFewTasks { succeeded, needed, tasks })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed() -> JobState {
        JobState::Failed(FailureReason::ApplicationError)
    }

    #[test]
    fn counts_and_outcomes() {
        use JobState::*;
        let p = BagProgress::of([Queued, Running, Succeeded, failed()], 3);
        assert_eq!((p.tasks, p.waiting, p.running, p.succeeded, p.failed), (4, 1, 1, 1, 1));
        assert_eq!(p.outcome(), None);
        assert_eq!(p.state(), Running);
        assert_eq!(p.describe(), "1 succeeded, 1 failed, 1 running, 1 waiting (of 4; 3 needed)");
        let done = BagProgress::of([Succeeded, Succeeded, Succeeded, failed()], 3);
        assert_eq!(
            done.outcome(),
            Some(Succeeded),
            "one failed task does not fail a bag needing 3 of 4"
        );
        let short = BagProgress::of([Succeeded, failed(), Succeeded, failed()], 3);
        let too_few = FailureReason::TooFewTasks {
            succeeded: 2,
            needed: 3,
            tasks: 4,
        };
        assert_eq!(short.outcome(), Some(JobState::Failed(too_few)));
        assert_eq!(BagProgress::of([Cancelled, Succeeded], 2).outcome(), Some(Cancelled));
        assert_eq!(BagProgress::of([Held, Queued], 5).needed, 2, "needed is capped at the tasks");
        assert_eq!(BagProgress::of([Held, Queued], 0).state(), Queued);
        let named = BagProgress::of_names(["timeout", "out_of_memory", "succeeded", "claimed", "running", "cancelled"], 1);
        assert_eq!(
            (named.failed, named.succeeded, named.waiting, named.running, named.cancelled),
            (2, 1, 1, 1, 1)
        );
    }
}
