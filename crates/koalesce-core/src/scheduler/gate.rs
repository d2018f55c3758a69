//! Jobs that may not be placed yet: held by their user (`hold` / `release`, Slurm's
//! `scontrol hold|release`) or waiting for other jobs (dependencies, Slurm's `--dependency`).
//! Such a job is [`JobState::Held`]: known to the core, in no placement queue, and moved to
//! the queue once it is released and every dependency is satisfied.
//!
//! A dependency that can never be satisfied (`afterok` on a job that failed) ends the dependent
//! job as failed with [`FailureReason::DependencyNeverSatisfied`] (Slurm leaves such a job
//! pending forever unless `kill_invalid_depend` is set; ending it tells the user at once), and
//! that end may in turn decide its own dependents.
//!
//! A dependency on an array's or a bag's id (declared with [`Scheduler::declare_bag`]) is on
//! the whole array, as Slurm's `afterok:<array id>`: it is decided by every task
//! ([`DependencyKind::decided_by_bag`]), not by the first task whose id the array shares. A
//! task's own dependency on its array's id (a `%M` throttle on the first task) is on that one
//! task: a task cannot wait for the array it is part of.
//!
//! A job that stages out outputs ([`crate::model::JobSpec::stages_out`]) decides the
//! dependencies on it once its outputs are registered, not when it succeeds; a job with
//! dependencies may name inputs that the jobs it waits for will register (they are checked
//! when it may start: one still missing then fails it, [`FailureReason::MissingInput`]).
//!
//! The core only knows jobs it has not forgotten: a driver resolves dependencies on jobs that
//! ended earlier itself ([`DependencyKind::decided_by`], [`DependencyKind::decided_by_bag`])
//! and passes only the open ones.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::bag::BagProgress;
use crate::model::{JobId, Millis};
use crate::state::{FailureReason, JobState};

use super::{known, Scheduler};

/// Slurm's dependency kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DependencyKind {
    /// The other job started running (or ended without starting).
    After,
    /// The other job ended, however.
    AfterAny,
    /// The other job succeeded.
    AfterOk,
    /// The other job ended without success (failed, timeout, out of memory, cancelled).
    AfterNotOk,
}

impl DependencyKind {
    pub const ALL: [DependencyKind; 4] = [
        DependencyKind::After,
        DependencyKind::AfterAny,
        DependencyKind::AfterOk,
        DependencyKind::AfterNotOk,
    ];

    /// The name in job descriptions (`after`, `afterany`, `afterok`, `afternotok`).
    pub fn name(self) -> &'static str {
        match self {
            DependencyKind::After => "after",
            DependencyKind::AfterAny => "afterany",
            DependencyKind::AfterOk => "afterok",
            DependencyKind::AfterNotOk => "afternotok",
        }
    }

    /// What the other job being in `state` means for the dependency: `Some(true)` satisfied,
    /// `Some(false)` never satisfiable, `None` not decided yet.
    pub fn decided_by(self, state: JobState) -> Option<bool> {
        match (self, state) {
            (DependencyKind::After, JobState::Running) => Some(true),
            (_, s) if !s.is_terminal() => None,
            (DependencyKind::After | DependencyKind::AfterAny, _) => Some(true),
            (DependencyKind::AfterOk, s) => Some(s == JobState::Succeeded),
            (DependencyKind::AfterNotOk, s) => Some(s != JobState::Succeeded),
        }
    }

    /// What a whole array or bag of tasks in `progress` means for the dependency (Slurm's
    /// `afterok:<array id>`, which waits for every task): `after` once every task started (or
    /// ended), `afterany` once every task ended, `afterok` once every task ended and the bag
    /// succeeded (at least its `needed` tasks; never satisfiable as soon as too many failed),
    /// `afternotok` once every task ended and the bag did not succeed.
    pub fn decided_by_bag(self, progress: &BagProgress) -> Option<bool> {
        let outcome = progress.outcome();
        match self {
            DependencyKind::After => (progress.waiting == 0).then_some(true),
            DependencyKind::AfterAny => outcome.map(|_| true),
            DependencyKind::AfterOk if outcome.is_none() && progress.cannot_succeed() => Some(false),
            DependencyKind::AfterOk => outcome.map(|s| s == JobState::Succeeded),
            DependencyKind::AfterNotOk => outcome.map(|s| s != JobState::Succeeded),
        }
    }
}

/// One dependency of a job on another (or on a whole array, or on one task of an array).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Dependency {
    pub job: JobId,
    pub kind: DependencyKind,
    /// Slurm's `<array id>_<task>`: only the task with this index of the array (or bag) `job`
    /// ([`Scheduler::declare_bag`]), not the whole array.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<u64>,
}

impl Dependency {
    /// A dependency on job `job` (on the whole array when `job` is an array's id).
    pub fn on(job: JobId, kind: DependencyKind) -> Self {
        Dependency { job, kind, task: None }
    }
}

impl std::fmt::Display for Dependency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.kind.name(), self.job)?;
        match self.task {
            Some(t) => write!(f, "_{t}"),
            None => Ok(()),
        }
    }
}

/// What keeps a job from the placement queue at submission.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gate {
    /// Submitted held (`submit --hold`).
    pub hold: bool,
    /// Dependencies on jobs the core knows (the driver resolved those on forgotten jobs).
    pub after: Vec<Dependency>,
}

impl Gate {
    pub fn is_open(&self) -> bool {
        !self.hold && self.after.is_empty()
    }
}

/// Why `hold` or `release` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    #[error("job {0} not found")]
    Unknown(JobId),
    #[error("job {job} is {state}: only a queued or held job can be held")]
    NotPending { job: JobId, state: &'static str },
    #[error("job {0} is not held")]
    NotHeld(JobId),
}

impl Scheduler {
    /// Enters a job behind `gate` (see the module docs): placed only once released and its
    /// dependencies are satisfied. A dependency on a job the core does not know is an error
    /// of the driver's (it resolves those), reported as a submission error naming it.
    pub fn submit_gated(&mut self, now: Millis, id: JobId, spec: crate::model::JobSpec, gate: Gate) -> Result<JobId, super::SubmitError> {
        let unknown = |d: &Dependency| match d.task {
            Some(_) => self.dependency_target(d).is_none(),
            None => !(self.jobs.contains_key(&d.job) || self.bags.contains_key(&d.job)),
        };
        if let Some(d) = gate.after.iter().find(|d| unknown(d) || d.job == id) {
            let what = if d.task.is_some() { "task" } else { "job" };
            return Err(super::SubmitError::Invalid {
                job: spec.name.clone(),
                reason: format!("dependency {d}: no such {what}"),
            });
        }
        let begins_later = spec.begin_ms.is_some_and(|b| b > now);
        if gate.is_open() && !begins_later {
            return self.submit_with_id(now, id, spec);
        }
        self.validate_shape(&spec)?;
        // What each dependency's job (or array) decides already; the others are waited for.
        let mut never = false;
        let mut open = Vec::new();
        for d in gate.after {
            let whole = self.bags.get(&d.job).filter(|b| d.task.is_none() && !b.has_member(id));
            let target = self.dependency_target(&d).unwrap_or(d.job);
            let decision = match whole {
                Some(bag) => d.kind.decided_by_bag(&bag.progress),
                None => d.kind.decided_by(self.visible_state(target)),
            };
            match decision {
                Some(ok) => never |= !ok,
                None => open.push((d, target, whole.is_some())),
            }
        }
        // A job that waits for others may read what they will produce: its inputs are checked
        // when it may start. One that waits for nothing is checked now, as any submission.
        if open.is_empty() && !never {
            self.validate_inputs(&spec)?;
        }
        self.next_job = self.next_job.max(id.0 + 1);
        let components = spec
            .components
            .iter()
            .map(|c| super::Component::unplaced(c.processors, c.fixed_site))
            .collect();
        let timeline = crate::model::Timeline {
            submitted: now,
            queued: now,
            ..Default::default()
        };
        let begin = spec.begin_ms.filter(|_| begins_later);
        let mut job = self.new_job(id, spec, components, JobState::Held, timeline);
        job.user_hold = gate.hold;
        job.begin_pending = begin.is_some();
        self.jobs.insert(id, job);
        if let Some(at) = begin {
            self.begins.insert((at, id));
        }
        for (d, target, whole) in open {
            known(&mut self.jobs, id).waiting_on.push(d);
            let waiters = if whole { &mut self.bag_dependents } else { &mut self.dependents };
            waiters.entry(target).or_default().insert(id);
        }
        if never {
            self.never_satisfied(now, id);
        } else {
            self.maybe_unblock(now, id);
        }
        Ok(id)
    }

    /// Holds a queued job (Slurm's `scontrol hold`): it leaves the placement queue until
    /// [`Scheduler::release_hold`].
    pub fn hold(&mut self, now: Millis, id: JobId) -> Result<(), GateError> {
        let j = self.jobs.get_mut(&id).ok_or(GateError::Unknown(id))?;
        match j.state {
            JobState::Held => {
                j.user_hold = true;
                Ok(())
            }
            JobState::Queued => {
                j.user_hold = true;
                self.queues.remove(id);
                self.set_state(now, id, JobState::Held);
                Ok(())
            }
            s => Err(GateError::NotPending { job: id, state: s.name() }),
        }
    }

    /// Releases a user hold; the job is queued unless it still waits for dependencies.
    pub fn release_hold(&mut self, now: Millis, id: JobId) -> Result<(), GateError> {
        let j = self.jobs.get_mut(&id).ok_or(GateError::Unknown(id))?;
        if !j.user_hold || j.state != JobState::Held {
            return Err(GateError::NotHeld(id));
        }
        j.user_hold = false;
        self.maybe_unblock(now, id);
        Ok(())
    }

    /// Queues the held jobs whose begin time ([`crate::model::JobSpec::begin_ms`]) came, unless
    /// something else still holds them.
    pub(super) fn begin_due(&mut self, now: Millis) {
        while let Some(&(at, id)) = self.begins.first() {
            if at > now {
                break;
            }
            self.begins.remove(&(at, id));
            if let Some(j) = self.jobs.get_mut(&id) {
                j.begin_pending = false;
                self.maybe_unblock(now, id);
            }
        }
    }

    /// Job `id` reached `to` as jobs depending on it see it (running, or an end — for a job
    /// that stages out, success once its outputs are registered): decides the dependencies on
    /// it, then those on its bag.
    pub(super) fn dependency_event(&mut self, now: Millis, id: JobId, to: JobState) {
        if let Some(waiting) = self.dependents.get(&id).cloned() {
            // The dependencies on this one job: by its id (on an array's id, only those of the
            // array's own tasks: the others are on the whole array), or as `<array>_<task>`.
            let array = self.jobs.get(&id).and_then(|j| j.bag);
            let task = array.and_then(|b| self.bags.get(&b)).and_then(|b| b.index_of(id));
            let is_array = self.bags.contains_key(&id);
            let on_this = |d: &Dependency, waiter_array: Option<JobId>| match d.task {
                Some(t) => Some(d.job) == array && Some(t) == task,
                None => d.job == id && !(is_array && waiter_array != Some(id)),
            };
            self.decide_waiters(now, waiting, on_this, |kind| kind.decided_by(to));
            if to.is_terminal() {
                self.dependents.remove(&id);
            }
        }
        self.bag_member_event(now, id, to);
    }

    /// Decides the dependencies of the jobs `waiting` that `on_this` picks (given the
    /// dependency and the waiting job's own array), by `decide`.
    pub(super) fn decide_waiters(
        &mut self,
        now: Millis,
        waiting: BTreeSet<JobId>,
        on_this: impl Fn(&Dependency, Option<JobId>) -> bool,
        decide: impl Fn(DependencyKind) -> Option<bool>,
    ) {
        for w in waiting {
            let Some(j) = self.jobs.get_mut(&w) else { continue };
            if j.state != JobState::Held {
                continue;
            }
            let mut never = false;
            let waiter_array = j.bag;
            j.waiting_on
                .retain(|d| match on_this(d, waiter_array).then(|| decide(d.kind)).flatten() {
                    None => true,
                    Some(ok) => {
                        never |= !ok;
                        false
                    }
                });
            if never {
                self.never_satisfied(now, w);
            } else {
                self.maybe_unblock(now, w);
            }
        }
    }

    /// Ends a held job one of whose dependencies can never be satisfied.
    fn never_satisfied(&mut self, now: Millis, id: JobId) {
        let j = known(&mut self.jobs, id);
        j.waiting_on.clear();
        j.timeline.finished = Some(now);
        self.set_state(now, id, JobState::Failed(FailureReason::DependencyNeverSatisfied));
    }

    /// Queues a held job that is released and waits for nothing more.
    fn maybe_unblock(&mut self, now: Millis, id: JobId) {
        let j = known(&mut self.jobs, id);
        if j.state != JobState::Held || j.user_hold || j.begin_pending || !j.waiting_on.is_empty() {
            return;
        }
        if self.validate_inputs(&self.jobs[&id].spec).is_err() {
            let j = known(&mut self.jobs, id);
            j.timeline.finished = Some(now);
            self.set_state(now, id, JobState::Failed(FailureReason::MissingInput));
            return;
        }
        let j = known(&mut self.jobs, id);
        j.timeline.queued = now;
        let priority = j.priority;
        self.set_state(now, id, JobState::Queued);
        // Placed at the next scan (not here: this may run inside another job's transition).
        self.queues.push(priority, id);
        self.note_queue_length();
        self.arm_scan(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_decide_as_slurm_does() {
        use DependencyKind::*;
        use JobState::*;
        let failed = Failed(FailureReason::Timeout);
        assert_eq!(After.decided_by(Running), Some(true));
        assert_eq!(After.decided_by(Queued), None);
        assert_eq!(After.decided_by(Cancelled), Some(true), "ended without starting");
        assert_eq!(AfterAny.decided_by(Running), None);
        assert_eq!(AfterAny.decided_by(failed), Some(true));
        assert_eq!(AfterOk.decided_by(Succeeded), Some(true));
        assert_eq!(AfterOk.decided_by(failed), Some(false));
        assert_eq!(AfterOk.decided_by(Cancelled), Some(false));
        assert_eq!(AfterNotOk.decided_by(failed), Some(true));
        assert_eq!(AfterNotOk.decided_by(Succeeded), Some(false));
        assert_eq!(AfterNotOk.decided_by(Held), None);
    }
}
