//! Jobs as people script them: dependencies resolved at submission (and again after a
//! restart), `POST /api/v1/jobs/{id}/hold` and `.../release` (Slurm's `scontrol hold|release`).
//!
//! The core knows live jobs only ([`koalesce_core::scheduler::Gate`]): a dependency on a job
//! that ended earlier is decided here from the job's stored state. Dependencies name the
//! caller's own jobs (an admin's: anyone's); another user's job is "no such job", as a missing
//! one (ids do not leak).

use axum::extract::{Path, State as AxState};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use koalesce_api::dto::JobSummary;
use koalesce_core::bag::BagProgress;
use koalesce_core::scheduler::{BagTask, Dependency, Gate, GateError};
use koalesce_core::state::FailureReason;
use koalesce_core::{JobId, JobState};

use crate::api::{authenticate, err, ApiError};
use crate::daemon::{records, Shared, State};
use crate::{now_ms, store};

type S = std::sync::Arc<Shared>;

/// A job's stored owner and state name, for jobs the core may have let go; for an array's
/// (or bag's) id, also its tasks' stored states.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredJob {
    pub user: String,
    pub state: String,
    pub array: Option<StoredArray>,
}

/// The tasks of an array as the store has them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredArray {
    /// Successful tasks the array needs (all of them, for a Slurm array).
    pub needed: u32,
    /// Each task's index (`None`: unreadable) and stored state name, in task order.
    pub tasks: Vec<(Option<u64>, String)>,
}

pub type StoredJobs = std::collections::BTreeMap<u64, StoredJob>;

/// Reads the stored owner and state of the jobs `deps` name (and of every task of an array
/// whose id one names).
pub fn stored_jobs(conn: &rusqlite::Connection, deps: &[Dependency]) -> rusqlite::Result<StoredJobs> {
    let mut out = StoredJobs::new();
    for d in deps {
        let row = conn
            .prepare_cached("SELECT user, state, meta FROM jobs WHERE id = ?1")?
            .query_row([d.job.0 as i64], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?))
            });
        let (user, state, meta) = match row {
            Ok(r) => r,
            Err(rusqlite::Error::QueryReturnedNoRows) => continue,
            Err(e) => return Err(e),
        };
        let meta: Option<records::StoredMeta> = serde_json::from_str(&meta).ok();
        let array = match meta.and_then(|m| m.array).filter(|a| a.array_id == d.job.0) {
            Some(a) => Some(StoredArray {
                needed: a.bag.map_or(a.count as u32, |b| b.needed),
                tasks: array_states(conn, d.job.0, a.count)?.into_values().map(|(s, t)| (t, s)).collect(),
            }),
            None => None,
        };
        out.insert(d.job.0, StoredJob { user, state, array });
    }
    Ok(out)
}

/// The stored state names and task indices of the `count` tasks of array `array_id`
/// (consecutive ids), by id.
pub fn array_states(
    conn: &rusqlite::Connection,
    array_id: u64,
    count: u64,
) -> rusqlite::Result<std::collections::BTreeMap<u64, (String, Option<u64>)>> {
    let mut st = conn.prepare_cached("SELECT id, state, meta FROM jobs WHERE id >= ?1 AND id < ?2 ORDER BY id")?;
    let last = array_id.saturating_add(count.min(koalesce_api::jobdesc::MAX_ARRAY_TASKS as u64));
    let rows = st.query_map(rusqlite::params![array_id as i64, last as i64], |r| {
        let meta: Option<records::StoredMeta> = serde_json::from_str(&r.get::<_, String>(2)?).ok();
        let task = meta.and_then(|m| m.array).filter(|a| a.array_id == array_id).map(|a| a.task_id);
        Ok((r.get::<_, i64>(0)? as u64, (r.get::<_, String>(1)?, task)))
    })?;
    rows.collect()
}

/// Declares the array (or bag) just submitted as tasks `ids` with indices `indices` to the
/// core, one unit to the jobs depending on its id (Slurm's `afterok:<array id>`); `needed`:
/// the bag's `min_tasks` (an array needs every task).
pub fn declare_array(st: &mut State, first: u64, ids: &[u64], indices: &[u64], needed: Option<u32>) {
    let tasks: Vec<BagTask> = ids
        .iter()
        .zip(indices)
        .map(|(&i, &index)| BagTask {
            job: JobId(i),
            index,
            ended: None,
        })
        .collect();
    let needed = needed.unwrap_or(tasks.len() as u32);
    if let Err(e) = st.core.declare_bag(JobId(first), needed, &tasks) {
        tracing::error!(array = first, error = %e, "array not declared to the core");
    }
}

/// A state like the stored `name` of an ended job, for deciding dependencies on it.
pub(crate) fn ended_state(name: &str) -> Option<JobState> {
    match name {
        "succeeded" => Some(JobState::Succeeded),
        "cancelled" => Some(JobState::Cancelled),
        "timeout" => Some(JobState::Failed(FailureReason::Timeout)),
        "out_of_memory" => Some(JobState::Failed(FailureReason::OutOfMemory)),
        "failed" => Some(JobState::Failed(FailureReason::ApplicationError)),
        _ => None,
    }
}

/// The gate of a job of `user` (`admin`: may depend on anyone's jobs) with `deps`: the
/// dependencies on jobs the core knows, the others decided from `stored`. Refused, naming the
/// dependency, when one names no (visible) job or can never be satisfied.
pub fn gate(st: &State, stored: &StoredJobs, user: &str, admin: bool, deps: &[Dependency], hold: bool) -> Result<Gate, String> {
    gate_of_task(st, stored, user, admin, deps, hold, None)
}

/// [`gate`] for a job that is a task of the array `array` (after a restart): its dependency on
/// its array's id (a `%M` throttle) is on the first task alone. Any other dependency on an
/// array's id is on the whole array (Slurm's `afterok:<array id>`), one on `<array>_<task>` on
/// that task: the core decides them while it knows the array
/// ([`koalesce_core::Scheduler::declare_bag`]); an array every task of which ended and was let
/// go is decided here from the tasks' stored states.
pub fn gate_of_task(
    st: &State,
    stored: &StoredJobs,
    user: &str,
    admin: bool,
    deps: &[Dependency],
    hold: bool,
    array: Option<u64>,
) -> Result<Gate, String> {
    let mut after = Vec::new();
    for d in deps {
        let owner = st
            .meta
            .get(&d.job.0)
            .map(|m| m.user.as_str())
            .or(stored.get(&d.job.0).map(|j| j.user.as_str()));
        if owner.is_none_or(|o| o != user && !admin) {
            return Err(format!("dependency {d}: job {} not found", d.job));
        }
        let array_live = st.core.bag_progress(d.job).is_some();
        if array_live || (d.task.is_none() && st.core.job(d.job).is_some()) {
            after.push(*d);
            continue;
        }
        let stored_array = stored.get(&d.job.0).and_then(|j| j.array.as_ref());
        if let Some(t) = d.task {
            // `<array>_<task>`: that task's stored state.
            let Some(a) = stored_array else {
                return Err(format!("dependency {d}: job {} is not an array", d.job));
            };
            let Some((_, state)) = a.tasks.iter().find(|(index, _)| *index == Some(t)) else {
                return Err(format!("dependency {d}: array {} has no task {t}", d.job));
            };
            decide_ended(d, Some(state.as_str()))?;
            continue;
        }
        let whole = stored
            .get(&d.job.0)
            .and_then(|j| j.array.as_ref())
            .filter(|_| array != Some(d.job.0));
        if let Some(a) = whole {
            if a.tasks.iter().any(|(_, s)| ended_state(s).is_none()) {
                return Err(format!("dependency {d}: array {} is ending right now; submit again", d.job));
            }
            let progress = BagProgress::of_names(a.tasks.iter().map(|(_, s)| s.as_str()), a.needed);
            match d.kind.decided_by_bag(&progress) {
                Some(true) => continue,
                _ => {
                    return Err(format!(
                        "dependency {d}: array {} ended {} ({}), so it can never be satisfied",
                        d.job,
                        progress.state().name(),
                        progress.describe()
                    ))
                }
            }
        }
        decide_ended(d, stored.get(&d.job.0).map(|j| j.state.as_str()))?;
    }
    Ok(Gate { hold, after })
}

/// Decides `d` on a job (or task) the core let go, by its stored state name: satisfied, or
/// refused naming why.
fn decide_ended(d: &Dependency, stored_state: Option<&str>) -> Result<(), String> {
    let job = match d.task {
        Some(t) => format!("task {t} of array {}", d.job),
        None => format!("job {}", d.job),
    };
    match stored_state.and_then(ended_state).map(|s| (s, d.kind.decided_by(s))) {
        Some((_, Some(true))) => Ok(()),
        Some((s, _)) => Err(format!("dependency {d}: {job} ended {}, so it can never be satisfied", s.name())),
        // Live in the store but no longer in the core: it ended a moment ago.
        None => Err(format!("dependency {d}: {job} is ending right now; submit again")),
    }
}

fn control(s: &S, headers: &HeaderMap, raw: &str, hold: bool) -> Result<Json<JobSummary>, ApiError> {
    let caller = authenticate(s, headers)?;
    let not_found = || err(StatusCode::NOT_FOUND, format!("job '{raw}' not found"));
    let id: u64 = raw.parse().map_err(|_| not_found())?;
    let mut guard = s.lock();
    let st = &mut *guard;
    // A bag's id holds or releases the whole bag.
    if let Some(r) = crate::api_bags::hold(s, st, &caller, id, hold) {
        return r.map(Json);
    }
    match st.meta.get(&id) {
        Some(m) if caller.admin || m.user == caller.user => {}
        // Ended jobs (and other users') cannot be held; an ended one of the caller's answers
        // as the core would.
        _ => {
            drop(guard);
            return match s.store.read(|c| store::load_detail(c, id)) {
                Ok(Some((user, state, _))) if caller.admin || user == caller.user => Err(err(
                    StatusCode::CONFLICT,
                    format!("job {id} is {state}: only a queued or held job can be held or released"),
                )),
                _ => Err(not_found()),
            };
        }
    }
    let now = now_ms();
    let r = if hold {
        st.core.hold(now, JobId(id))
    } else {
        st.core.release_hold(now, JobId(id))
    };
    r.map_err(|e| match e {
        GateError::Unknown(_) => not_found(),
        GateError::NotPending { .. } | GateError::NotHeld(_) => err(StatusCode::CONFLICT, e.to_string()),
    })?;
    // The hold flag is state too: persisted even when the job's state did not change (a
    // job released while it still waits for a dependency).
    let rendered = match (st.core.job(JobId(id)), st.meta.get(&id)) {
        (Some(j), Some(m)) => {
            records::persist_state(s, id, j);
            Some(records::render(id, j, m, &s.sites).summary())
        }
        _ => None,
    };
    crate::daemon::process_actions(s, st);
    s.wake.notify_one();
    rendered.map(Json).ok_or_else(not_found)
}

/// `POST /api/v1/jobs/{id}/hold`: a queued job leaves the placement queue until released.
pub async fn hold_job(AxState(s): AxState<S>, headers: HeaderMap, Path(raw): Path<String>) -> Result<Json<JobSummary>, ApiError> {
    control(&s, &headers, &raw, true)
}

/// `POST /api/v1/jobs/{id}/release`: a held job goes back to the placement queue (or keeps
/// waiting for its dependencies).
pub async fn release_job(AxState(s): AxState<S>, headers: HeaderMap, Path(raw): Path<String>) -> Result<Json<JobSummary>, ApiError> {
    control(&s, &headers, &raw, false)
}

/// The tasks of the array `array_id` (consecutive job ids from it) with their states: live
/// ones as the core has them (a succeeded one still staging out its outputs as `running`),
/// ended ones as stored.
pub async fn array_tasks(s: &S, array_id: u64) -> Result<Vec<koalesce_api::dto::ArrayTask>, ApiError> {
    let rows = crate::api::read_store(s, move |c| {
        let mut st = c.prepare_cached("SELECT id, state, meta FROM jobs WHERE id >= ?1 AND id <= ?2 ORDER BY id")?;
        let last = array_id.saturating_add(koalesce_api::jobdesc::MAX_ARRAY_TASKS as u64);
        let rows = st.query_map(rusqlite::params![array_id as i64, last as i64], |r| {
            Ok((r.get::<_, i64>(0)? as u64, r.get::<_, String>(1)?, r.get::<_, String>(2)?))
        })?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
    })
    .await?;
    let st = s.lock();
    Ok(rows
        .into_iter()
        .filter_map(|(id, state, meta)| {
            let m: records::StoredMeta = serde_json::from_str(&meta).ok()?;
            let a = m.array.filter(|a| a.array_id == array_id)?;
            let state = match (st.core.job(JobId(id)), st.meta.get(&id)) {
                // Succeeded but its outputs still being staged out (the job is let go once they
                // are registered): not done yet, so a bag or array that ends has its outputs.
                (Some(_), Some(m)) if m.staging_out => koalesce_core::JobState::Running.name().to_string(),
                (Some(j), _) => j.state.name().to_string(),
                (None, _) => state,
            };
            Some(koalesce_api::dto::ArrayTask {
                task_id: a.task_id,
                id,
                state,
            })
        })
        .collect())
}
