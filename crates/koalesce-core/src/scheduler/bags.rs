//! Arrays and bags of tasks as one unit for the jobs that depend on them, and outputs that
//! must be registered before a success counts for dependents.
//!
//! A driver submits an array's (or a bag's) tasks as jobs of their own, with consecutive ids,
//! the first one being the array's, and then declares them one unit ([`Scheduler::declare_bag`]).
//! From then on a dependency on the array's id waits for every task, as Slurm's
//! `afterok:<array id>` does ([`super::DependencyKind::decided_by_bag`]), and one on
//! `<array id>_<task>` ([`super::Dependency::task`]) waits for that one task; the core keeps
//! each task's index and state as dependents see it, including tasks it has forgotten since,
//! until every task is forgotten.
//!
//! A job whose spec [`stages_out`](crate::model::JobSpec::stages_out) succeeds as any job, but
//! the jobs depending on it (and on its bag) see it succeeded only once the driver reports its
//! outputs registered ([`Scheduler::outputs_registered`]); until then it may not be forgotten.

use std::collections::{BTreeMap, BTreeSet};

use crate::bag::BagProgress;
use crate::model::{JobId, JobSpec, Millis, SiteId, Timeline};
use crate::state::{ComponentState, JobState};

use super::{known, Component, Scheduler, SubmitError};

/// An array or bag of tasks the core knows as one unit.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct BagRecord {
    /// Each task's index and state as jobs depending on it see it (a task that stages out is
    /// running until its outputs are registered).
    seen: BTreeMap<JobId, (u64, JobState)>,
    /// The tasks by index (Slurm's `<array id>_<task>`).
    by_index: BTreeMap<u64, JobId>,
    /// Tasks still in the core's table (the record goes when the last one is forgotten).
    live: BTreeSet<JobId>,
    pub(super) progress: BagProgress,
}

impl BagRecord {
    pub(super) fn has_member(&self, id: JobId) -> bool {
        self.seen.contains_key(&id)
    }

    pub(super) fn index_of(&self, id: JobId) -> Option<u64> {
        self.seen.get(&id).map(|s| s.0)
    }
}

/// A task of an array or bag being declared ([`Scheduler::declare_bag`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BagTask {
    pub job: JobId,
    /// Its index in the array (`KOALESCE_TASK_ID`, Slurm's array index).
    pub index: u64,
    /// `None` for a job the core holds; its final state for one that ended and that the core
    /// forgot (a driver rebuilding its state after a restart).
    pub ended: Option<JobState>,
}

/// Why [`Scheduler::declare_bag`] was refused (a driver's mistake, named).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BagError {
    #[error("bag {0}: declared already")]
    Declared(JobId),
    #[error("bag {bag}: it has no task")]
    Empty { bag: JobId },
    #[error("bag {bag}: task {task} is not in the core and no final state was given for it")]
    UnknownTask { bag: JobId, task: JobId },
    #[error("bag {bag}: task {task} is a task of bag {other} already")]
    OtherBag { bag: JobId, task: JobId, other: JobId },
    #[error("bag {bag}: task {task} was given the state {state}, which is not a final one")]
    NotEnded { bag: JobId, task: JobId, state: &'static str },
    #[error("bag {bag}: two tasks have the index {index}")]
    DuplicateIndex { bag: JobId, index: u64 },
}

impl Scheduler {
    /// Declares jobs one array or bag of tasks with id `bag` that succeeds when at least
    /// `needed` tasks succeed (all of them for a Slurm array): `tasks` are its tasks in order.
    pub fn declare_bag(&mut self, bag: JobId, needed: u32, tasks: &[BagTask]) -> Result<(), BagError> {
        if self.bags.contains_key(&bag) {
            return Err(BagError::Declared(bag));
        }
        if tasks.is_empty() {
            return Err(BagError::Empty { bag });
        }
        let mut seen = BTreeMap::new();
        let mut by_index = BTreeMap::new();
        let mut live = BTreeSet::new();
        for &BagTask { job: task, index, ended } in tasks {
            if by_index.insert(index, task).is_some() {
                return Err(BagError::DuplicateIndex { bag, index });
            }
            let state = match (self.jobs.get(&task), ended) {
                (Some(j), _) => {
                    if let Some(other) = j.bag {
                        return Err(BagError::OtherBag { bag, task, other });
                    }
                    live.insert(task);
                    self.visible_state(task)
                }
                (None, Some(s)) if s.is_terminal() => s,
                (None, Some(s)) => {
                    return Err(BagError::NotEnded {
                        bag,
                        task,
                        state: s.name(),
                    })
                }
                (None, None) => return Err(BagError::UnknownTask { bag, task }),
            };
            seen.insert(task, (index, state));
        }
        for t in &live {
            known(&mut self.jobs, *t).bag = Some(bag);
        }
        let progress = BagProgress::of(seen.values().map(|s| s.1), needed);
        if live.is_empty() {
            // Every task ended and was forgotten: the driver decides from its own records.
            return Ok(());
        }
        self.bags.insert(
            bag,
            BagRecord {
                seen,
                by_index,
                live,
                progress,
            },
        );
        // Jobs that depended on the first task's id before the declaration depend on the
        // whole array from now on, as every later one (its own tasks' throttles stay on that
        // one task). Their first task has not ended (its end would have decided them): the
        // next task event decides them if the bag's progress already does.
        let jobs = &self.jobs;
        if let Some(waiters) = self.dependents.get_mut(&bag) {
            let outside: BTreeSet<JobId> = waiters
                .iter()
                .copied()
                .filter(|w| jobs.get(w).is_some_and(|j| j.bag != Some(bag)))
                .collect();
            waiters.retain(|w| !outside.contains(w));
            if waiters.is_empty() {
                self.dependents.remove(&bag);
            }
            if !outside.is_empty() {
                self.bag_dependents.entry(bag).or_default().extend(outside);
            }
        }
        Ok(())
    }

    /// The job a dependency is on: `job` itself, or for `<array>_<task>` that task's job
    /// (`None`: no such array or task).
    pub(super) fn dependency_target(&self, d: &super::Dependency) -> Option<JobId> {
        match d.task {
            None => Some(d.job),
            Some(t) => self.bags.get(&d.job)?.by_index.get(&t).copied(),
        }
    }

    /// The array or bag of tasks `bag` as jobs depending on it see it; `None` when it was not
    /// declared or every task of it was forgotten.
    pub fn bag_progress(&self, bag: JobId) -> Option<BagProgress> {
        self.bags.get(&bag).map(|b| b.progress)
    }

    /// Job `id`'s state as jobs depending on it see it: succeeded only once its outputs are
    /// registered (running before). A job the core forgot is seen as its bag last saw it.
    pub(super) fn visible_state(&self, id: JobId) -> JobState {
        match self.jobs.get(&id) {
            Some(j) if j.outputs_pending => JobState::Running,
            Some(j) => j.state,
            None => {
                let seen = self.bags.values().find_map(|b| b.seen.get(&id).map(|s| s.1));
                seen.unwrap_or(JobState::Queued)
            }
        }
    }

    /// The outputs of job `id` (which succeeded, and [`JobSpec::stages_out`]) are registered:
    /// the jobs depending on it (and on its bag) see it succeeded now. Returns false when the
    /// job is unknown or had no outputs pending (so a driver that redoes a stage-out after a
    /// restart may call it again).
    pub fn outputs_registered(&mut self, now: Millis, id: JobId) -> bool {
        match self.jobs.get_mut(&id) {
            Some(j) if j.outputs_pending => j.outputs_pending = false,
            _ => return false,
        }
        self.dependency_event(now, id, JobState::Succeeded);
        true
    }

    /// After a daemon restart: re-adopts a job that had succeeded and whose outputs were
    /// still being registered when the daemon stopped (the driver redoes its stage-out and
    /// then calls [`Scheduler::outputs_registered`]). `sites[i]` is where component `i` ran
    /// (`None`: skipped). The job holds no processors; no action is emitted.
    pub fn adopt_staging_out(
        &mut self,
        id: JobId,
        spec: JobSpec,
        sites: &[Option<SiteId>],
        timeline: Timeline,
    ) -> Result<JobId, SubmitError> {
        if self.jobs.contains_key(&id) {
            return Err(SubmitError::Invalid {
                job: spec.name.clone(),
                reason: format!("job {id} is in the core already"),
            });
        }
        // Its inputs were read when it ran: one deleted since does not keep its outputs out.
        self.validate_shape(&spec)?;
        if let Some((component, site)) = sites
            .iter()
            .enumerate()
            .find_map(|(i, s)| s.filter(|s| s.index() >= self.sites.len()).map(|s| (i, s)))
        {
            return Err(SubmitError::UnknownSite {
                job: spec.name.clone(),
                component,
                site,
            });
        }
        self.next_job = self.next_job.max(id.0 + 1);
        let components = spec
            .components
            .iter()
            .enumerate()
            .map(|(i, c)| match sites.get(i).copied().flatten() {
                Some(site) => Component {
                    site: Some(site),
                    state: ComponentState::Finished,
                    ..Component::unplaced(c.processors, c.fixed_site)
                },
                None => Component {
                    state: ComponentState::Skipped,
                    ..Component::unplaced(c.processors, c.fixed_site)
                },
            })
            .collect();
        let stages_out = spec.stages_out;
        let mut job = self.new_job(id, spec, components, JobState::Succeeded, timeline);
        job.outputs_pending = stages_out;
        job.placements = 1;
        self.jobs.insert(id, job);
        Ok(id)
    }

    /// A task of a bag reached `to` as dependents see it: the bag's progress moves, and the
    /// dependencies on the whole bag that this decides are decided.
    pub(super) fn bag_member_event(&mut self, now: Millis, id: JobId, to: JobState) {
        let Some(bag) = self.jobs.get(&id).and_then(|j| j.bag) else {
            return;
        };
        let Some(record) = self.bags.get_mut(&bag) else { return };
        let Some(seen) = record.seen.get_mut(&id) else { return };
        let from = std::mem::replace(&mut seen.1, to);
        record.progress.moved(from, to);
        let progress = record.progress;
        let Some(waiting) = self.bag_dependents.get(&bag).cloned() else {
            return;
        };
        let on_bag = |d: &super::Dependency, _: Option<JobId>| d.job == bag && d.task.is_none();
        self.decide_waiters(now, waiting, on_bag, |kind| kind.decided_by_bag(&progress));
        if progress.outcome().is_some() {
            self.bag_dependents.remove(&bag);
        }
    }

    /// Job `id` is being forgotten: its bag keeps the state dependents saw, and goes with its
    /// last task.
    pub(super) fn forget_bag_member(&mut self, id: JobId, bag: Option<JobId>) {
        let Some(bag) = bag else { return };
        let Some(record) = self.bags.get_mut(&bag) else { return };
        record.live.remove(&id);
        if record.live.is_empty() {
            self.bags.remove(&bag);
            self.bag_dependents.remove(&bag);
        }
    }
}
