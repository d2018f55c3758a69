//! What the daemon knows beyond the core, keyed by job id, and how a job is rendered for the
//! API and persisted: from the core's job (state, priority, tries, timeline, components) plus
//! this data (user, description, attempt, exit codes, outputs). Nothing here repeats the
//! core's state.

use std::collections::BTreeMap;
use std::path::PathBuf;

use koalesce_api::dto::{BrokerTimes, ComponentDetail, JobDetail, Timeline as TimelineDto};
use koalesce_core::model::Timeline;
use koalesce_core::scheduler::{Dependency, Job};
use koalesce_core::state::FailureReason;
use koalesce_core::{JobState, Priority};
use serde::{Deserialize, Serialize};

use super::SiteHandle;
use crate::jobdesc::JobDescription;
use crate::store::{self, JobUpdate};
use crate::supervise;

/// The daemon's data about one job: what the core does not know. Stored as `StoredMeta`
/// (the user and the description have columns of their own).
#[derive(Debug, Clone, PartialEq)]
pub struct JobMeta {
    pub user: String,
    pub desc: JobDescription,
    /// Launches so far; component directories are `a<attempt>-c<index>`.
    pub attempt: u32,
    /// What went wrong last, as observed at the site (a component's exit, a failed copy).
    pub failure: Option<String>,
    pub components: Vec<ComponentMeta>,
    /// Registered outputs (`<job-id>/<name>`).
    pub outputs: Vec<String>,
    /// Every dependency the job was submitted with (its description's and `--dependency`'s),
    /// resolved again after a restart.
    pub dependencies: Vec<Dependency>,
    /// The array the job is a task of.
    pub array: Option<ArrayTaskMeta>,
    /// The longest input transfer (stage-in) the job had, measured, ms.
    pub transfer_ms: Option<u64>,
    /// The job succeeded and its outputs are being registered: until they are, it is shown as
    /// `running` (as Slurm shows a job in its epilog as COMPLETING), so nobody sees it
    /// succeeded without its outputs. Stored: a restart redoes the stage-out of a job whose
    /// final row says it was still under way.
    pub staging_out: bool,
    /// The advance reservation the job runs in (its public id, `R7`), resolved again after a
    /// restart (the job follows the reservation's moves).
    pub reservation: Option<String>,
}

/// A task of an array (`submit --array`): its tasks have consecutive job ids from the array's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayTaskMeta {
    /// The array's id (its first task's job id).
    pub array_id: u64,
    /// The task's index (`KOALESCE_TASK_ID`).
    pub task_id: u64,
    /// Tasks in the array.
    pub count: u64,
    /// Set when the array is a bag of tasks (`submit --tasks N`), one unit to the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bag: Option<BagMeta>,
}

/// What makes an array a bag of tasks (`submit --tasks N`, GridWay's array job).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BagMeta {
    /// Successful tasks the bag needs (`min_tasks`).
    pub needed: u32,
    /// `KOALESCE_PARAM` = start + increment × task index (GridWay's `${PARAM}`).
    pub param_start: i64,
    pub param_increment: i64,
}

impl ArrayTaskMeta {
    /// The task's values of the task variables (`koalesce_api::fields::TASK_VARIABLES`): its
    /// environment, and what its description's `${...}` references are replaced with.
    pub fn variables(&self) -> BTreeMap<String, String> {
        let mut v = BTreeMap::new();
        v.insert("KOALESCE_TASK_ID".to_string(), self.task_id.to_string());
        v.insert("KOALESCE_ARRAY_JOB_ID".to_string(), self.array_id.to_string());
        v.insert("KOALESCE_ARRAY_TASK_COUNT".to_string(), self.count.to_string());
        if let Some(b) = self.bag {
            let param = |i: u64| b.param_start.saturating_add(b.param_increment.saturating_mul(i as i64));
            v.insert("KOALESCE_PARAM".to_string(), param(self.task_id).to_string());
            v.insert("KOALESCE_MAX_PARAM".to_string(), param(self.count.saturating_sub(1)).to_string());
        }
        v
    }
}

/// The daemon's data about one component.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ComponentMeta {
    pub exit_code: Option<i32>,
    /// Working directory of its latest launch (stdout, stderr, supervisor records).
    pub dir: Option<String>,
}

/// The part of [`JobMeta`] kept in `jobs.meta`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StoredMeta {
    pub attempt: u32,
    pub failure: Option<String>,
    pub components: Vec<ComponentMeta>,
    pub outputs: Vec<String>,
    pub dependencies: Vec<Dependency>,
    pub array: Option<ArrayTaskMeta>,
    pub transfer_ms: Option<u64>,
    pub reservation: Option<String>,
    /// Succeeded, its outputs not registered yet (see [`JobMeta::staging_out`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub staging_out: bool,
}

impl JobMeta {
    /// The stored part.
    pub fn stored(&self) -> StoredMeta {
        StoredMeta {
            attempt: self.attempt,
            failure: self.failure.clone(),
            components: self.components.clone(),
            outputs: self.outputs.clone(),
            dependencies: self.dependencies.clone(),
            array: self.array,
            transfer_ms: self.transfer_ms,
            reservation: self.reservation.clone(),
            staging_out: self.staging_out,
        }
    }

    /// Back from the database: the user and description columns with the stored part.
    pub fn restore(user: String, desc: JobDescription, m: StoredMeta) -> Self {
        JobMeta {
            user,
            desc,
            attempt: m.attempt,
            failure: m.failure,
            components: m.components,
            outputs: m.outputs,
            dependencies: m.dependencies,
            array: m.array,
            transfer_ms: m.transfer_ms,
            staging_out: m.staging_out,
            reservation: m.reservation,
        }
    }

    pub fn new(user: String, desc: JobDescription) -> Self {
        let n = desc.components.len();
        let dependencies = desc.dependencies();
        JobMeta {
            dependencies,
            array: None,
            user,
            desc,
            attempt: 0,
            failure: None,
            components: vec![ComponentMeta::default(); n],
            outputs: Vec::new(),
            transfer_ms: None,
            staging_out: false,
            reservation: None,
        }
    }

    pub fn component_mut(&mut self, i: usize) -> &mut ComponentMeta {
        if self.components.len() <= i {
            self.components.resize(i + 1, ComponentMeta::default());
        }
        &mut self.components[i]
    }
}

/// What recovery needs of the core's job, as its last state change left it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoreSnapshot {
    pub state: JobState,
    pub priority: Priority,
    pub timeline: Timeline,
    pub placement_tries: u32,
    pub claiming_tries: u32,
    pub error_resubmissions: u32,
    /// Held by its user (`koalesce hold`).
    #[serde(default)]
    pub held: bool,
}

impl CoreSnapshot {
    pub fn of(job: &Job) -> Self {
        CoreSnapshot {
            state: job.state,
            priority: job.priority,
            timeline: job.timeline,
            placement_tries: job.placement_tries,
            claiming_tries: job.claiming_tries,
            error_resubmissions: job.error_resubmissions,
            held: job.user_hold,
        }
    }
}

/// A catalogue file: size, checksum and replica paths per site.
#[derive(Debug, Clone, PartialEq)]
pub struct FileInfo {
    pub size_bytes: u64,
    pub sha256: String,
    pub replicas: BTreeMap<String, PathBuf>,
    /// Who registered it (`None`: before files had owners; admins only).
    pub owner: Option<String>,
}

/// Why a held job is not placed (squeue's REASON).
fn waiting_reason(job: &Job) -> Option<String> {
    if job.state != JobState::Held {
        return None;
    }
    let deps: Vec<String> = job.waiting_on.iter().map(|d| d.to_string()).collect();
    // As Slurm, the begin time is named before dependencies (squeue's BeginTime).
    if job.begin_pending && !job.user_hold {
        let at = job.spec.begin_ms.map(koalesce_api::timing::format_begin).unwrap_or_default();
        return Some(match deps.is_empty() {
            true => format!("waiting for its begin time {at}"),
            false => format!("waiting for its begin time {at}, and for {}", deps.join(", ")),
        });
    }
    Some(match (job.user_hold, deps.is_empty()) {
        (true, true) => "held by its user (koalesce release)".into(),
        (true, false) => format!("held by its user, and waiting for {}", deps.join(", ")),
        (false, _) => format!("waiting for {}", deps.join(", ")),
    })
}

/// Why the job failed, or the last fault it recovered from.
fn failure(job: &Job, meta: &JobMeta) -> Option<String> {
    match job.state {
        JobState::Failed(r @ FailureReason::TooFewTasks { .. }) => Some(r.to_string()),
        JobState::Failed(r) => Some(meta.failure.clone().unwrap_or_else(|| r.to_string())),
        JobState::Cancelled => Some(meta.failure.clone().unwrap_or_else(|| "cancelled".into())),
        _ => meta.failure.clone(),
    }
}

/// The job as `GET /api/v1/jobs/{id}` shows it.
pub fn render(id: u64, job: &Job, meta: &JobMeta, sites: &[SiteHandle]) -> JobDetail {
    let t = &job.timeline;
    let site_name = |s: koalesce_core::SiteId| sites.get(s.index()).map(|h| h.name.clone());
    let mut site_names: Vec<String> = job.sites().into_iter().filter_map(site_name).collect();
    site_names.dedup();
    let components = job
        .components
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let m = meta.components.get(i).cloned().unwrap_or_default();
            let file = |name: &str| m.dir.as_ref().map(|d| PathBuf::from(d).join(name).display().to_string());
            ComponentDetail {
                index: i as u64,
                processors: c.processors as u64,
                site: c.site.and_then(site_name),
                state: c.state.name().to_string(),
                exit_code: m.exit_code.map(i64::from),
                stdout: file(supervise::STDOUT_FILE),
                stderr: file(supervise::STDERR_FILE),
            }
        })
        .collect();
    // Succeeded, but shown as running until its outputs are registered (see `staging_out`).
    let state = if meta.staging_out { JobState::Running } else { job.state };
    JobDetail {
        id,
        name: job.spec.name.clone(),
        user: meta.user.clone(),
        state: state.name().to_string(),
        priority: job.priority.name().to_string(),
        components,
        size: job.total_processors() as u64,
        sites: site_names,
        submitted_ms: t.submitted,
        started_ms: t.started,
        finished_ms: t.finished,
        exit_ok: state.is_terminal().then_some(state == JobState::Succeeded),
        timeline: TimelineDto {
            submitted: t.submitted,
            placed: t.placed,
            claimed: t.claimed,
            started: t.started,
            finished: t.finished,
            ftt_ms: t.ftt_ms,
            transfer_ms: meta.transfer_ms,
            pgt_ms: t.pgt_ms(),
            pwt_ms: t.pwt_ms(),
            twt_ms: t.twt_ms(),
        },
        placement_tries: job.placement_tries as u64,
        claiming_tries: job.claiming_tries as u64,
        failure: failure(job, meta),
        outputs: meta.outputs.clone(),
        broker: broker_times(job, sites),
        reason: waiting_reason(job),
        begin_ms: job.spec.begin_ms,
        array_id: meta.array.map(|a| a.array_id),
        task_id: meta.array.map(|a| a.task_id),
        tasks: Vec::new(),
        // A bag's id: its progress is counted from every task by the API (api_bags).
        bag: meta.array.filter(|a| a.array_id == id).and_then(|a| {
            a.bag.map(|b| koalesce_api::dto::BagStatus {
                tasks: a.count,
                needed: u64::from(b.needed),
                ..Default::default()
            })
        }),
    }
}

/// The broker's prediction of a `ttd`/`tts` job beside what happened (001 §3.1).
pub fn broker_times(job: &Job, sites: &[SiteHandle]) -> Option<BrokerTimes> {
    let p = job.prediction?;
    let t = &job.timeline;
    Some(BrokerTimes {
        site: sites.get(p.site.index()).map(|h| h.name.clone()).unwrap_or_default(),
        made_ms: p.made_at,
        stage_in_ms: p.stage_in_ms,
        queue_wait_ms: p.queue_wait_ms,
        execution_ms: p.execution_ms,
        stage_out_ms: p.stage_out_ms,
        reserved: p.reserved,
        predicted_tts_ms: p.tts_ms(),
        predicted_ttd_ms: p.ttd_ms(),
        actual_tts_ms: t.started.map(|s| s.saturating_sub(p.made_at)),
        actual_ttd_ms: (job.state == JobState::Succeeded)
            .then_some(t.finished)
            .flatten()
            .map(|f| f.saturating_sub(p.made_at)),
    })
}

/// The full row update (state, core snapshot, daemon data, API rendering): written when the
/// job ends, after which the store answers for it.
pub fn update(id: u64, job: &Job, meta: &JobMeta, sites: &[SiteHandle]) -> JobUpdate {
    JobUpdate {
        id,
        state: job.state.name().to_string(),
        core: json(&CoreSnapshot::of(job)),
        meta: json(&meta.stored()),
        detail: json(&render(id, job, meta, sites)),
    }
}

/// The core's spec as `jobs.spec` keeps it, for people reading the database: pinned sites by
/// name (`fixed_site`), never by their position in the config. (Recovery rebuilds the spec
/// from the description, which names them too.)
pub fn spec_json(spec: &koalesce_core::JobSpec, sites: &[SiteHandle]) -> String {
    if spec.components.iter().all(|c| c.fixed_site.is_none()) {
        // No site to name (most jobs): written straight, without a `serde_json::Value` built
        // first (a tenth of a submission's handling); keys in field order, not sorted.
        return json(spec);
    }
    let mut v = serde_json::to_value(spec).unwrap_or_else(|e| unreachable!("serializing a plain record: {e}"));
    if let Some(comps) = v.get_mut("components").and_then(|c| c.as_array_mut()) {
        for (c, spec_c) in comps.iter_mut().zip(&spec.components) {
            if let (Some(obj), Some(s)) = (c.as_object_mut(), spec_c.fixed_site) {
                let name = sites.get(s.index()).map(|h| h.name.clone()).unwrap_or_default();
                obj.insert("fixed_site".into(), serde_json::Value::String(name));
            }
        }
    }
    v.to_string()
}

/// JSON of a value whose serialization cannot fail (plain structs with string keys).
pub fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| unreachable!("serializing a plain record: {e}"))
}

/// Persists a state change of a live job: its state and the core's snapshot (small; the
/// API renders live jobs from the core).
pub fn persist_state(shared: &super::Shared, id: u64, job: &Job) {
    shared.store.enqueue(store::update_state_op(
        id,
        job.state.name().to_string(),
        json(&CoreSnapshot::of(job)),
    ));
}

/// Persists the daemon's data of a live job (after it changed: a new launch).
pub fn persist_meta(shared: &super::Shared, id: u64, meta: &JobMeta) {
    shared.store.enqueue(store::update_meta_op(id, json(&meta.stored())));
}

#[cfg(test)]
mod tests {
    use super::spec_json;
    use koalesce_core::{JobSpec, SiteId};
    use serde_json::Value;

    #[test]
    fn the_stored_spec_is_the_specs_json_with_pinned_sites_named() {
        let spec = JobSpec::simple("j".to_string(), &[2, 3], &[], 60_000);
        // Without pinned sites: written straight, the same document as the spec's own JSON.
        let text = spec_json(&spec, &[]);
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), serde_json::to_value(&spec).unwrap());
        // A pinned component is named (by the config's sites; none here: an empty name), never
        // given by its position.
        let mut pinned = spec.clone();
        pinned.components[1].fixed_site = Some(SiteId(0));
        let v: Value = serde_json::from_str(&spec_json(&pinned, &[])).unwrap();
        assert_eq!(v["components"][1]["fixed_site"], Value::String(String::new()), "{v}");
        assert_eq!(v["components"][0]["fixed_site"], Value::Null, "{v}");
    }
}
