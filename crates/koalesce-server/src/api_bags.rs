//! Bags of tasks in the API (`POST /api/v1/jobs?tasks=N`, `koalesce submit --tasks N`,
//! GridWay's array jobs): one submission makes N tasks with consecutive job ids, each a job
//! of the core placed and matched on its own; the first id is the bag's. The bag's id answers
//! for the whole bag: `GET` shows its state and progress (`bag`) and every task, the list
//! shows the progress on the bag's row, `cancel` cancels every task not ended. What the
//! tasks' states make of the bag is the core's ([`koalesce_core::bag`]), as in the simulator.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use koalesce_api::dto::{ArrayTask, BagStatus, JobDetail, JobSummary};
use koalesce_api::jobdesc::{ArraySpec, MAX_ARRAY_TASKS};
use koalesce_core::bag::BagProgress;
use koalesce_core::JobId;

use crate::api::{err, ApiError, Caller};
use crate::daemon::records::BagMeta;
use crate::daemon::{self, Shared, State};
use crate::now_ms;

/// The query parameters of a bag submission.
#[derive(Debug, Clone, Copy, Default)]
pub struct BagQuery {
    /// Tasks in the bag.
    pub tasks: Option<u32>,
    /// Successful tasks the bag needs (default: all).
    pub min_tasks: Option<u32>,
    /// `KOALESCE_PARAM` of task 0 and its step per task (GridWay's `gwsubmit -s` / `-i`).
    pub param_start: Option<i64>,
    pub param_increment: Option<i64>,
}

impl BagQuery {
    /// The bag asked for, as the array of its task indices 0..N and its data; `None` without
    /// `tasks`. `array` is the submission's Slurm-style array, which a bag excludes.
    pub fn bag(&self, array: bool) -> Result<Option<(ArraySpec, BagMeta)>, String> {
        let Some(n) = self.tasks else {
            if self.min_tasks.is_some() || self.param_start.is_some() || self.param_increment.is_some() {
                return Err("parameters 'min_tasks', 'param_start', 'param_increment' need 'tasks'".into());
            }
            return Ok(None);
        };
        if array {
            return Err("parameters 'tasks' (a bag) and 'array' exclude each other".into());
        }
        if n == 0 || n as usize > MAX_ARRAY_TASKS {
            return Err(format!("parameter 'tasks': {n} is not in 1..={MAX_ARRAY_TASKS}"));
        }
        let needed = self.min_tasks.unwrap_or(n);
        if needed == 0 || needed > n {
            return Err(format!("parameter 'min_tasks': {needed} is not in 1..={n}"));
        }
        let spec = ArraySpec {
            tasks: (0..u64::from(n)).collect(),
            max_active: None,
        };
        let meta = BagMeta {
            needed,
            param_start: self.param_start.unwrap_or(0),
            param_increment: self.param_increment.unwrap_or(1),
        };
        Ok(Some((spec, meta)))
    }
}

/// A bag's status from its tasks' states (the core's [`BagProgress`]).
pub fn bag_status(tasks: &[ArrayTask], needed: u64) -> BagStatus {
    let p = BagProgress::of_names(tasks.iter().map(|t| t.state.as_str()), needed.min(u64::from(u32::MAX)) as u32);
    BagStatus {
        state: p.state().name().to_string(),
        tasks: u64::from(p.tasks),
        needed: u64::from(p.needed),
        waiting: u64::from(p.waiting),
        running: u64::from(p.running),
        succeeded: u64::from(p.succeeded),
        failed: u64::from(p.failed),
        cancelled: u64::from(p.cancelled),
    }
}

/// On a bag's id: its tasks and the bag's status (its `state` is then the bag's).
pub async fn fill_detail(s: &crate::api::S, d: &mut JobDetail) -> Result<(), ApiError> {
    if d.array_id != Some(d.id) {
        return Ok(());
    }
    d.tasks = crate::api_jobctl::array_tasks(s, d.id).await?;
    if let Some(b) = d.bag.as_mut() {
        *b = bag_status(&d.tasks, b.needed);
        // The id is the bag's: its state is the bag's (task 0's is in `tasks`).
        d.state = b.state.clone();
        d.exit_ok = koalesce_api::dto::is_final_state(&b.state).then(|| b.state == "succeeded");
    }
    Ok(())
}

/// On a bag's row of the list: the bag's status.
pub async fn fill_summary(s: &crate::api::S, j: &mut JobSummary) -> Result<(), ApiError> {
    let Some(needed) = j.bag.as_ref().filter(|_| j.array_id == Some(j.id)).map(|b| b.needed) else {
        return Ok(());
    };
    let tasks = crate::api_jobctl::array_tasks(s, j.id).await?;
    let b = bag_status(&tasks, needed);
    j.state = b.state.clone();
    j.exit_ok = koalesce_api::dto::is_final_state(&b.state).then(|| b.state == "succeeded");
    j.bag = Some(b);
    Ok(())
}

/// The tasks of bag `id` the daemon still holds in memory (not ended, or ended and not yet
/// let go): `None` when there are none (or `id` is no bag's), `Some(Err)` (404, as for any
/// job) when the bag is another user's.
fn live_tasks(st: &State, caller: &Caller, id: u64) -> Option<Result<Vec<u64>, ApiError>> {
    // A bag's ids are consecutive (given under one lock): its tasks still in memory are the
    // entries from `id` on up to the first one of another job.
    let tasks: Vec<(u64, &str)> = st
        .meta
        .range(id..)
        .take_while(|(_, m)| m.array.is_some_and(|a| a.array_id == id && a.bag.is_some()))
        .map(|(t, m)| (*t, m.user.as_str()))
        .collect();
    let owner = tasks.first()?.1;
    if !caller.admin && owner != caller.user {
        return Some(Err(err(StatusCode::NOT_FOUND, format!("job {id} not found"))));
    }
    Some(Ok(tasks.into_iter().map(|(t, _)| t).collect()))
}

/// `cancel` of a bag's id: cancels every task of the bag not ended yet. `None` when `id` is
/// not a bag with a task still in memory (the caller goes on as for any job); `Some(Ok(n))`
/// with the tasks cancelled.
pub fn cancel(s: &std::sync::Arc<Shared>, st: &mut State, caller: &Caller, id: u64) -> Option<Result<usize, ApiError>> {
    let tasks = match live_tasks(st, caller, id)? {
        Ok(t) => t,
        Err(e) => return Some(Err(e)),
    };
    let now = now_ms();
    let cancelled = tasks.iter().filter(|t| st.core.cancel(now, JobId(**t))).count();
    daemon::process_actions(s, st);
    if cancelled == 0 {
        return Some(Err(err(StatusCode::CONFLICT, format!("bag {id} already finished"))));
    }
    Some(Ok(cancelled))
}

/// `hold` / `release` of a bag's id: holds (releases) every task of the bag that can be (the
/// queued or held ones); the answer is the first such task's summary. `None` as for
/// [`cancel`].
pub fn hold(s: &std::sync::Arc<Shared>, st: &mut State, caller: &Caller, id: u64, hold: bool) -> Option<Result<JobSummary, ApiError>> {
    let tasks = match live_tasks(st, caller, id)? {
        Ok(t) => t,
        Err(e) => return Some(Err(e)),
    };
    let now = now_ms();
    let mut first = None;
    for t in tasks {
        let r = if hold {
            st.core.hold(now, JobId(t))
        } else {
            st.core.release_hold(now, JobId(t))
        };
        if r.is_err() {
            // A task already placed, running or ended (or not held) stays as it is.
            continue;
        }
        if let (Some(j), Some(m)) = (st.core.job(JobId(t)), st.meta.get(&t)) {
            crate::daemon::records::persist_state(s, t, j);
            first.get_or_insert_with(|| crate::daemon::records::render(t, j, m, &s.sites).summary());
        }
    }
    daemon::process_actions(s, st);
    let what = if hold { "held" } else { "released" };
    Some(first.ok_or_else(|| {
        err(
            StatusCode::CONFLICT,
            format!("bag {id}: no task can be {what} (only queued or held tasks)"),
        )
    }))
}

/// The descriptions of the tasks of an array or bag, with their task variables substituted
/// (checked for every task before any is submitted).
pub fn task_descriptions(
    desc: &crate::jobdesc::JobDescription,
    metas: &[Option<crate::daemon::records::ArrayTaskMeta>],
) -> Result<Vec<crate::jobdesc::JobDescription>, ApiError> {
    metas
        .iter()
        .map(|m| match m {
            None => Ok(desc.clone()),
            Some(a) => {
                let vars: BTreeMap<String, String> = a.variables();
                desc.for_task(&vars)
                    .map_err(|e| err(StatusCode::UNPROCESSABLE_ENTITY, format!("task {}: {e}", a.task_id)))
            }
        })
        .collect()
}
