//! The driver: one [`koalesce_core::Scheduler`] fed with real time, its [`Action`]s carried out
//! against the local executor, every change persisted through the group-commit store.
//!
//! All mutable state lives in [`State`] behind one mutex; HTTP handlers and the driver task
//! take it briefly and call [`process_actions`] after every input they give the core, so the
//! core's decisions are carried out in the order it made them. Slow work (copies, waiting for
//! a launch intent to commit) runs in tasks that take the lock again when done.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use koalesce_core::model::{NetworkForecast, ReplicaCatalogue, Site, Timeline};
use koalesce_core::scheduler::Job;
use koalesce_core::state::{ComponentState, FailureReason};
use koalesce_core::{Action, ComponentOutcome, JobId, JobSpec, JobState, Priority, Scheduler, SiteId, TransferKey};
use rusqlite::params;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::backend::{Backend, BackendError, ComponentSubmission, LrmState};
use crate::config::ServerConfig;
use crate::jobdesc::{JobDescription, Runner};
use crate::local::{BarrierState, LocalBackend};
use crate::now_ms;
use crate::store::{self, FileRow, LaunchRow, Store};
use crate::supervise;
use crate::transfer;

/// One component as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentRecord {
    pub index: u32,
    pub processors: u32,
    pub site: Option<String>,
    pub state: String,
    pub exit_code: Option<i32>,
    pub stdout: Option<String>,
    pub stderr: Option<String>,
    #[serde(default)]
    pub dir: Option<String>,
}

impl ComponentRecord {
    /// Component `index` before any placement.
    pub fn unplaced(index: u32, processors: u32) -> Self {
        ComponentRecord {
            index,
            processors,
            site: None,
            state: "unplaced".into(),
            exit_code: None,
            stdout: None,
            stderr: None,
            dir: None,
        }
    }
}

/// Everything the server keeps about a job (persisted as JSON in `jobs.record`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: u64,
    pub user: String,
    pub name: String,
    pub desc: JobDescription,
    pub state: JobState,
    pub priority: Priority,
    pub failure: Option<String>,
    pub submitted_ms: u64,
    pub started_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    pub exit_ok: Option<bool>,
    pub placement_tries: u32,
    pub claiming_tries: u32,
    pub error_resubmissions: u32,
    /// Launches so far; component directories are `a<attempt>-c<index>`.
    pub attempt: u32,
    pub timeline: Timeline,
    pub components: Vec<ComponentRecord>,
    pub outputs: Vec<String>,
}

impl JobRecord {
    pub fn size(&self) -> u32 {
        self.components.iter().map(|c| c.processors).sum()
    }
    pub fn sites(&self) -> Vec<String> {
        let s: BTreeSet<String> = self.components.iter().filter_map(|c| c.site.clone()).collect();
        s.into_iter().collect()
    }
}

/// A catalogue file: size, checksum and replica paths per site.
#[derive(Debug, Clone, PartialEq)]
pub struct FileInfo {
    pub size_bytes: u64,
    pub sha256: String,
    pub replicas: BTreeMap<String, PathBuf>,
}

/// A claimed or running component.
#[derive(Debug, Clone)]
pub struct Exec {
    pub site: String,
    pub processors: u32,
    pub claim: String,
    pub attempt: u32,
    pub dir: Option<PathBuf>,
    /// LRM id once submitted.
    pub lrm_id: Option<String>,
    /// Launch intent enqueued, supervisor not spawned yet.
    pub pending_launch: bool,
}

/// Counters for /metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    pub transfer_bytes: AtomicU64,
    pub transfers: AtomicU64,
    pub transfer_failures: AtomicU64,
    pub scans: AtomicU64,
    pub scan_micros_total: AtomicU64,
    pub last_scan_micros: AtomicU64,
    pub submissions: AtomicU64,
    pub launches: AtomicU64,
    pub blacklisted: AtomicU64,
}

pub struct State {
    pub core: Scheduler,
    pub jobs: BTreeMap<u64, JobRecord>,
    pub next_id: u64,
    pub site_names: Vec<String>,
    pub site_ids: HashMap<String, SiteId>,
    pub files: BTreeMap<String, FileInfo>,
    pub exec: HashMap<(u64, u32), Exec>,
}

impl State {
    pub fn site_id(&self, name: &str) -> Option<SiteId> {
        self.site_ids.get(name).copied()
    }
    fn site_name(&self, s: SiteId) -> String {
        self.site_names[s.index()].clone()
    }
}

pub struct Shared {
    pub state: Mutex<State>,
    pub store: Store,
    pub backend: Arc<LocalBackend>,
    pub wake: Notify,
    pub config: ServerConfig,
    pub data_dir: PathBuf,
    pub metrics: Metrics,
}

// ----- persistence helpers ------------------------------------------------------------

pub fn insert_job_op(rec: &JobRecord, description: String, spec: &JobSpec) -> store::WriteOp {
    let id = rec.id as i64;
    let user = rec.user.clone();
    let name = rec.name.clone();
    let spec = serde_json::to_string(spec).unwrap();
    let state = rec.state.name().to_string();
    let record = serde_json::to_string(rec).unwrap();
    let submitted = rec.submitted_ms as i64;
    Box::new(move |tx| {
        tx.execute(
            "INSERT INTO jobs (id, user, name, description, spec, state, record, submitted_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![id, user, name, description, spec, state, record, submitted],
        )?;
        Ok(())
    })
}

fn persist(shared: &Shared, rec: &JobRecord) {
    let id = rec.id as i64;
    let state = rec.state.name().to_string();
    let record = serde_json::to_string(rec).unwrap();
    shared.store.enqueue(Box::new(move |tx| {
        tx.execute("UPDATE jobs SET state = ?2, record = ?3 WHERE id = ?1", params![id, state, record])?;
        Ok(())
    }));
}

fn mark_launch_done(shared: &Shared, job: u64, attempt: u32, comp: u32) {
    shared.store.enqueue(Box::new(move |tx| {
        tx.execute(
            "UPDATE launches SET done = 1 WHERE job = ?1 AND attempt = ?2 AND component = ?3",
            params![job as i64, attempt, comp],
        )?;
        Ok(())
    }));
}

pub fn register_replica_op(name: String, size: u64, sha: String, site: String, path: String) -> store::WriteOp {
    Box::new(move |tx| {
        tx.execute(
            "INSERT INTO files (name, size_bytes, sha256) VALUES (?1, ?2, ?3) ON CONFLICT(name) DO UPDATE SET size_bytes = excluded.size_bytes, sha256 = excluded.sha256",
            params![name, size as i64, sha],
        )?;
        tx.execute(
            "INSERT OR REPLACE INTO replicas (name, site, path) VALUES (?1, ?2, ?3)",
            params![name, site, path],
        )?;
        Ok(())
    })
}

/// Adds a replica to the in-memory catalogue and the core's.
pub fn add_replica_mem(st: &mut State, name: &str, size: u64, sha: &str, site: &str, path: PathBuf) {
    let sid = st.site_id(site);
    let entry = st.files.entry(name.to_string()).or_insert_with(|| FileInfo {
        size_bytes: size,
        sha256: sha.to_string(),
        replicas: BTreeMap::new(),
    });
    entry.replicas.insert(site.to_string(), path);
    let new = st.core.catalogue().get(name).is_none();
    if let Some(sid) = sid {
        if new {
            st.core.catalogue_mut().insert(name, size, [sid]);
        } else {
            st.core.catalogue_mut().add_replica(name, sid);
        }
    }
}

// ----- syncing records from the core --------------------------------------------------

fn component_state_name(s: ComponentState) -> &'static str {
    match s {
        ComponentState::Unplaced => "unplaced",
        ComponentState::Placed => "placed",
        ComponentState::Reserved => "reserved",
        ComponentState::Claimed => "claimed",
        ComponentState::Running => "running",
        ComponentState::Finished => "finished",
        ComponentState::Skipped => "skipped",
    }
}

fn sync_record(rec: &mut JobRecord, job: &Job, names: &[String]) {
    rec.state = job.state;
    rec.priority = job.priority;
    rec.placement_tries = job.placement_tries;
    rec.claiming_tries = job.claiming_tries;
    rec.error_resubmissions = job.error_resubmissions;
    let submitted = rec.submitted_ms;
    rec.timeline = job.timeline;
    rec.timeline.submitted = submitted;
    if rec.components.len() != job.components.len() {
        rec.components = job
            .components
            .iter()
            .enumerate()
            .map(|(i, c)| ComponentRecord::unplaced(i as u32, c.processors))
            .collect();
    }
    for (r, c) in rec.components.iter_mut().zip(&job.components) {
        r.processors = c.processors;
        r.site = c.site.map(|s| names[s.index()].clone());
        // Keep the executor's terminal view (exited/failed) once the core has finished it.
        if !(c.state == ComponentState::Finished && r.exit_code.is_some()) {
            r.state = component_state_name(c.state).into();
        }
    }
}

fn failure_text(reason: FailureReason) -> &'static str {
    match reason {
        FailureReason::PlacementTries => "placement tries exceeded the threshold",
        FailureReason::ClaimingTries => "claiming tries exceeded the threshold",
        FailureReason::TooManyErrors => "too many resubmissions after soft errors",
        FailureReason::ApplicationError => "a component failed",
        FailureReason::Unplaceable => "no usable site can hold the job",
    }
}

// ----- carrying out actions -----------------------------------------------------------

/// Pulls and carries out every pending core action (call after every core input, with the
/// state lock held), then refreshes the core's view of idle processors.
pub fn process_actions(shared: &Arc<Shared>, st: &mut State) {
    while let Some(action) = st.core.poll_action() {
        let now = now_ms();
        match action {
            Action::StateChanged { job, from, to, at } => on_state_changed(shared, st, job, from, to, at),
            Action::Claim {
                job,
                component,
                site,
                processors,
                ..
            } => {
                let name = st.site_name(site);
                match shared.backend.claim(&name, processors) {
                    Ok(claim) => {
                        st.exec.insert(
                            (job.0, component),
                            Exec {
                                site: name,
                                processors,
                                claim,
                                attempt: 0,
                                dir: None,
                                lrm_id: None,
                                pending_launch: false,
                            },
                        );
                    }
                    Err(BackendError::Busy { .. }) => st.core.claim_rejected(now, job, component, false),
                    Err(e) => {
                        tracing::warn!(job = job.0, component, error = %e, "claim failed");
                        st.core.claim_rejected(now, job, component, true)
                    }
                }
            }
            Action::Launch { job } => launch(shared, st, job.0),
            Action::Abort { job, component, .. } => {
                if let Some(e) = st.exec.remove(&(job.0, component)) {
                    if let Some(id) = &e.lrm_id {
                        let _ = shared.backend.cancel(id);
                    } else if e.pending_launch {
                        // The launch task sees the exec gone and fences the directory.
                    }
                    if e.attempt > 0 {
                        mark_launch_done(shared, job.0, e.attempt, component);
                    }
                    shared.backend.release(&e.claim);
                    if let Some(rec) = st.jobs.get_mut(&job.0) {
                        if let Some(c) = rec.components.get_mut(component as usize) {
                            if e.lrm_id.is_some() {
                                c.state = "aborted".into();
                            }
                        }
                    }
                }
            }
            Action::StartTransfer { job, key, from, bytes } => start_transfer(shared, st, job.0, key, from, bytes),
            Action::CancelTransfer { .. } => {
                // Copies are short and land under a temporary name; an unneeded one is simply
                // ignored when it completes (and its replica kept as a cache).
            }
            Action::Reserve { job, component, .. } => {
                // The local executor has no advance reservations (its sites say so); refuse.
                st.core.reservation_answer(now, job, component, false);
            }
            Action::CancelReservation { .. } => {}
            Action::Blacklist { site } => {
                shared.metrics.blacklisted.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(site = %st.site_name(site), "site blacklisted after consecutive soft errors");
            }
        }
    }
    refresh_idle(shared, st);
}

fn refresh_idle(shared: &Shared, st: &mut State) {
    for (i, name) in st.site_names.iter().enumerate() {
        if let Ok(p) = shared.backend.processors(name) {
            st.core.update_site_idle(SiteId(i as u32), p.idle);
        }
    }
}

fn on_state_changed(shared: &Arc<Shared>, st: &mut State, job: JobId, from: JobState, to: JobState, at: u64) {
    let names = st.site_names.clone();
    let Some(core_job) = st.core.job(job) else { return };
    let core_job = core_job.clone();
    let Some(rec) = st.jobs.get_mut(&job.0) else { return };
    sync_record(rec, &core_job, &names);
    tracing::info!(job = job.0, from = from.name(), to = to.name(), "job state");
    match to {
        JobState::Running => {
            rec.started_ms = Some(at);
            rec.finished_ms = None;
        }
        JobState::Queued => {
            rec.started_ms = None;
        }
        JobState::Succeeded => {
            rec.finished_ms = Some(at);
            let ok = if rec.desc.runner == Runner::Bag {
                let k = rec.desc.min_components.unwrap_or(rec.components.len() as u32) as usize;
                let good = rec.components.iter().filter(|c| c.exit_code == Some(0)).count();
                if good < k {
                    rec.state = JobState::Failed(FailureReason::ApplicationError);
                    rec.failure = Some(format!(
                        "bag: {good} of {} components succeeded, at least {k} needed",
                        rec.components.len()
                    ));
                }
                good >= k
            } else {
                true
            };
            rec.exit_ok = Some(ok);
            if ok && !rec.desc.outputs.is_empty() {
                stage_out(shared, rec.clone());
            }
        }
        JobState::Failed(reason) => {
            rec.finished_ms = Some(at);
            rec.exit_ok = Some(false);
            if rec.failure.is_none() {
                rec.failure = Some(failure_text(reason).into());
            }
        }
        JobState::Cancelled => {
            rec.finished_ms = Some(at);
            if rec.failure.is_none() {
                rec.failure = Some("cancelled".into());
            }
        }
        JobState::Placed | JobState::Claimed => {}
    }
    persist(shared, rec);
}

fn env_name(file: &str) -> String {
    file.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' })
        .collect()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// `Action::Launch`: record the intent durably, then spawn every component's supervisor.
fn launch(shared: &Arc<Shared>, st: &mut State, job: u64) {
    let Some(core_job) = st.core.job(JobId(job)).cloned() else { return };
    let names = st.site_names.clone();
    let archs: Vec<String> = st.core.sites().iter().map(|s| s.attributes.architecture.clone()).collect();
    let files = st.files.clone();
    let Some(rec) = st.jobs.get_mut(&job) else { return };
    rec.attempt += 1;
    let attempt = rec.attempt;
    let n = core_job.components.len();
    let coupled = rec.desc.runner == Runner::Coupled;
    let peers: Vec<String> = if coupled {
        (0..n).map(|_| format!("127.0.0.1:{}", free_port())).collect()
    } else {
        Vec::new()
    };
    let mut subs = Vec::with_capacity(n);
    let mut rows = Vec::with_capacity(n);
    for (i, c) in core_job.components.iter().enumerate() {
        // Components of a bag skipped in this run have no site and are not launched.
        let Some(site_id) = c.site.filter(|_| c.state != ComponentState::Skipped) else {
            continue;
        };
        let site = names[site_id.index()].clone();
        let Some(local) = shared.backend.site(&site) else { continue };
        let dir = local.jobs.join(job.to_string()).join(format!("a{attempt}-c{i}"));
        // The component's KOALESCE_* variables; they win over the user's environment.
        let mut env: std::collections::BTreeMap<String, String> = Default::default();
        env.insert("KOALESCE_RANK".into(), i.to_string());
        env.insert("KOALESCE_SIZE".into(), n.to_string());
        env.insert("KOALESCE_JOB_ID".into(), job.to_string());
        env.insert("KOALESCE_SITE".into(), site.clone());
        env.insert("KOALESCE_PROCESSORS".into(), c.processors.to_string());
        if coupled {
            env.insert("KOALESCE_PEERS".into(), peers.join(","));
        }
        env.insert("KOALESCE_JOB_DIR".into(), dir.display().to_string());
        env.insert("KOALESCE_ARCH".into(), archs.get(site_id.index()).cloned().unwrap_or_default());
        for f in rec.desc.inputs.iter().map(|f| f.logical()) {
            let path = files
                .get(f)
                .and_then(|fi| fi.replicas.get(&site).cloned())
                .unwrap_or_else(|| transfer::storage_path(&local.storage, f));
            env.insert(format!("KOALESCE_INPUT_{}", env_name(f)), path.display().to_string());
        }
        // The component's program (per-component overrides, ${KOALESCE_*} expanded).
        let process = rec.desc.process(i, &env);
        let mut environment = process.environment;
        environment.extend(env);
        let Some(exec) = st.exec.get_mut(&(job, i as u32)) else { continue };
        exec.attempt = attempt;
        exec.dir = Some(dir.clone());
        exec.lrm_id = None;
        exec.pending_launch = true;
        subs.push((
            i as u32,
            ComponentSubmission {
                site: site.clone(),
                user: rec.user.clone(),
                processors: c.processors,
                claim: exec.claim.clone(),
                dir: dir.clone(),
                executable: process.executable,
                arguments: process.arguments,
                environment,
                time_limit_ms: core_job.spec.runtime_estimate_ms,
            },
        ));
        rows.push(LaunchRow {
            job,
            attempt,
            component: i as u32,
            site: site.clone(),
            processors: c.processors,
            dir: dir.display().to_string(),
            done: false,
        });
        if let Some(cr) = rec.components.get_mut(i) {
            cr.dir = Some(dir.display().to_string());
            cr.stdout = Some(dir.join(supervise::STDOUT_FILE).display().to_string());
            cr.stderr = Some(dir.join(supervise::STDERR_FILE).display().to_string());
            cr.exit_code = None;
            cr.state = "launching".into();
        }
    }
    persist(shared, rec);
    shared.metrics.launches.fetch_add(1, Ordering::Relaxed);
    let rx = shared.store.submit(Box::new(move |tx| {
        for r in &rows {
            store::insert_launch(tx, r)?;
        }
        Ok(())
    }));
    let shared = shared.clone();
    tokio::spawn(async move {
        let committed = matches!(rx.await, Ok(Ok(())));
        let mut submitted = Vec::with_capacity(subs.len());
        let mut guard = shared.state.lock().unwrap();
        let st = &mut *guard;
        for (i, sub) in subs {
            let current = st.exec.get(&(job, i)).is_some_and(|e| e.attempt == attempt && e.pending_launch);
            if !current {
                // Aborted before it started: make sure it never will.
                let _ = supervise::fence(&sub.dir);
                continue;
            }
            let result = if committed {
                shared.backend.submit(&sub)
            } else {
                Err(BackendError::Site {
                    site: sub.site.clone(),
                    reason: "launch intent could not be recorded".into(),
                })
            };
            match result {
                Ok(id) => {
                    let e = st.exec.get_mut(&(job, i)).unwrap();
                    e.lrm_id = Some(id.clone());
                    e.pending_launch = false;
                    submitted.push((i, id));
                    if let Some(cr) = st.jobs.get_mut(&job).and_then(|r| r.components.get_mut(i as usize)) {
                        cr.state = "running".into();
                    }
                }
                Err(err) => {
                    let _ = supervise::fence(&sub.dir);
                    let e = st.exec.remove(&(job, i)).unwrap();
                    shared.backend.release(&e.claim);
                    mark_launch_done(&shared, job, attempt, i);
                    if let BackendError::Exhausted { .. } = err {
                        // This machine is short of descriptors or processes for a moment:
                        // retried later, never held against the site.
                        tracing::warn!(job, component = i, error = %err, "launch postponed");
                        st.core.claim_rejected(now_ms(), JobId(job), i, false);
                    } else {
                        tracing::warn!(job, component = i, error = %err, "launch failed (soft error)");
                        st.core.component_finished(now_ms(), JobId(job), i, ComponentOutcome::SoftError);
                    }
                }
            }
        }
        if let Some(rec) = st.jobs.get(&job) {
            persist(&shared, rec);
        }
        process_actions(&shared, st);
        // Every supervisor of the launch is spawned and holds at its start barrier; let them
        // all run once all are there. (Components whose launch failed were aborted with the
        // job, which the barrier notices: then nothing of this launch ever runs.)
        if !submitted.is_empty() {
            tokio::spawn(start_at_barrier(shared.clone(), job, attempt, submitted));
        }
    });
}

/// Longest wait for the supervisors of a launch to reach their start barrier; those not there
/// by then are cancelled (fenced), a soft error.
pub const BARRIER_TIMEOUT: Duration = Duration::from_secs(60);

/// The daemon's half of the start barrier: waits (checking every few ms) until every
/// component of the launch is held ready by its supervisor, then starts them all. Gives up
/// when the launch is aborted meanwhile (the abort cancels the components) or when a
/// supervisor does not come up in [`BARRIER_TIMEOUT`].
///
/// `go` is written only once every supervisor of the launch holds its directory, so a daemon
/// crash before that leaves a launch of which no program ran (recovery aborts it and requeues
/// the job), and a crash after that leaves one in which no directory can be fenced any more
/// (recovery writes the missing `go` files and re-adopts the job).
async fn start_at_barrier(shared: Arc<Shared>, job: u64, attempt: u32, comps: Vec<(u32, String)>) {
    let t0 = Instant::now();
    let ids: Vec<String> = comps.iter().map(|(_, id)| id.clone()).collect();
    let mut delay = Duration::from_millis(1);
    loop {
        let current = {
            let st = shared.state.lock().unwrap();
            comps.iter().all(|(i, id)| {
                st.exec
                    .get(&(job, *i))
                    .is_some_and(|e| e.attempt == attempt && e.lrm_id.as_deref() == Some(id.as_str()))
            })
        };
        if !current {
            return;
        }
        let not_ready: Vec<String> = shared
            .backend
            .ready(&ids)
            .into_iter()
            .filter(|(_, r)| !r)
            .map(|(id, _)| id)
            .collect();
        if not_ready.is_empty() {
            break;
        }
        if t0.elapsed() >= BARRIER_TIMEOUT {
            tracing::warn!(job, attempt, waiting = ?not_ready, "supervisors did not reach the start barrier; cancelling");
            for id in &not_ready {
                let _ = shared.backend.cancel(id);
            }
            return;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(10));
    }
    let backend = shared.backend.clone();
    let ids2 = ids.clone();
    let result = tokio::task::spawn_blocking(move || backend.start(&ids2)).await;
    match result {
        Ok(Ok(())) => tracing::debug!(
            job,
            attempt,
            components = ids.len(),
            ms = t0.elapsed().as_millis() as u64,
            "launch started"
        ),
        Ok(Err(e)) => {
            // A supervisor went away in between (it will show as a soft error), or `go` could
            // not be written: make sure nothing of the launch keeps waiting or running.
            tracing::warn!(job, attempt, error = %e, "cannot start the launch; cancelling it");
            for id in &ids {
                let _ = shared.backend.cancel(id);
            }
        }
        Err(e) => tracing::error!(error = %e, "start task panicked"),
    }
}

/// Checks every submitted component with one batched status call and reports the ended ones.
pub fn poll_running(shared: &Arc<Shared>, st: &mut State) {
    let ids: Vec<((u64, u32), String)> = st.exec.iter().filter_map(|(k, e)| e.lrm_id.clone().map(|id| (*k, id))).collect();
    if ids.is_empty() {
        return;
    }
    let list: Vec<String> = ids.iter().map(|(_, id)| id.clone()).collect();
    let states: HashMap<String, LrmState> = shared.backend.status(&list).into_iter().collect();
    let now = now_ms();
    for ((job, comp), id) in ids {
        let Some(state) = states.get(&id) else { continue };
        if !state.is_terminal() {
            continue;
        }
        let Some(e) = st.exec.remove(&(job, comp)) else { continue };
        shared.backend.release(&e.claim);
        mark_launch_done(shared, job, e.attempt, comp);
        let bag = st.jobs.get(&job).is_some_and(|r| r.desc.runner == Runner::Bag);
        let (outcome, exit_code, note) = match state {
            LrmState::Completed => (ComponentOutcome::Success, Some(0), None),
            LrmState::Failed { exit_code, reason } => (
                if bag {
                    ComponentOutcome::Success
                } else {
                    ComponentOutcome::ApplicationError
                },
                exit_code.or(Some(-1)),
                Some(reason.clone()),
            ),
            LrmState::NodeFail { reason } => (ComponentOutcome::SoftError, None, Some(reason.clone())),
            other => (ComponentOutcome::SoftError, None, Some(format!("{other:?}"))),
        };
        if let Some(rec) = st.jobs.get_mut(&job) {
            if let Some(c) = rec.components.get_mut(comp as usize) {
                c.exit_code = exit_code;
                c.state = match outcome {
                    ComponentOutcome::SoftError => "site-error".into(),
                    _ if exit_code == Some(0) => "exited".into(),
                    _ => "failed".into(),
                };
            }
            if outcome == ComponentOutcome::ApplicationError && rec.failure.is_none() {
                rec.failure = Some(format!("component {comp} at {}: {}", e.site, note.clone().unwrap_or_default()));
            }
            if outcome == ComponentOutcome::SoftError {
                tracing::warn!(job, component = comp, site = %e.site, reason = note.as_deref().unwrap_or(""), "soft error");
            }
        }
        st.core.component_finished(now, JobId(job), comp, outcome);
    }
    process_actions(shared, st);
}

fn start_transfer(shared: &Arc<Shared>, st: &mut State, job: u64, key: TransferKey, from: SiteId, bytes: u64) {
    let from_name = st.site_name(from);
    let to_name = st.site_name(key.to);
    let info = st.files.get(&key.file).cloned();
    let Some(info) = info else {
        st.core.transfer_failed(now_ms(), JobId(job), &key);
        return;
    };
    if info.replicas.contains_key(&to_name) {
        st.core.transfer_finished(now_ms(), JobId(job), &key);
        return;
    }
    let Some(src) = info.replicas.get(&from_name).cloned() else {
        st.core.transfer_failed(now_ms(), JobId(job), &key);
        return;
    };
    let dest = transfer::storage_path(&shared.backend.site(&to_name).unwrap().storage, &key.file);
    let shared = shared.clone();
    let _ = bytes;
    tokio::spawn(async move {
        let (sha, size) = (info.sha256.clone(), info.size_bytes);
        let d = dest.clone();
        let result = tokio::task::spawn_blocking(move || transfer::copy_verified(&src, &d, Some((&sha, size)))).await;
        let mut guard = shared.state.lock().unwrap();
        let st = &mut *guard;
        let now = now_ms();
        match result {
            Ok(Ok(copied)) => {
                shared.metrics.transfer_bytes.fetch_add(copied.bytes, Ordering::Relaxed);
                shared.metrics.transfers.fetch_add(1, Ordering::Relaxed);
                add_replica_mem(st, &key.file, copied.bytes, &copied.sha256, &to_name, dest.clone());
                shared.store.enqueue(register_replica_op(
                    key.file.clone(),
                    copied.bytes,
                    copied.sha256.clone(),
                    to_name.clone(),
                    dest.display().to_string(),
                ));
                // Measured bandwidth feeds the forecast (bits/s; local copies are fast, keep sane).
                let ms = copied.millis.max(1) as f64;
                let bps = (copied.bytes as f64 * 8.0 * 1000.0 / ms).max(1e6);
                st.core.update_forecast(from, key.to, bps, 1);
                st.core.transfer_finished(now, JobId(job), &key);
            }
            Ok(Err(e)) => {
                shared.metrics.transfer_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(job, file = %key.file, from = %from_name, to = %to_name, error = %e, "stage-in failed");
                if let Some(rec) = st.jobs.get_mut(&job) {
                    rec.failure = Some(format!("stage-in of '{}' to {to_name} failed: {e}", key.file));
                }
                st.core.transfer_failed(now, JobId(job), &key);
            }
            Err(e) => {
                tracing::error!(error = %e, "transfer task panicked");
                st.core.transfer_failed(now, JobId(job), &key);
            }
        }
        process_actions(&shared, st);
    });
}

/// After success: copy each declared output from the first component (rank order) that wrote
/// it into that site's storage and register it as `<job-id>/<name>` (or its `to` name).
fn stage_out(shared: &Arc<Shared>, rec: JobRecord) {
    let shared = shared.clone();
    tokio::spawn(async move {
        let mut registered = Vec::new();
        let mut refused = Vec::new();
        for out in &rec.desc.outputs {
            let dirs = rec
                .components
                .iter()
                .filter_map(|c| Some((c.site.clone().unwrap_or_default(), PathBuf::from(c.dir.as_ref()?))));
            let (site, src) = match transfer::find_output(dirs, &out.file) {
                Ok(Some(found)) => found,
                Ok(None) => {
                    tracing::warn!(job = rec.id, output = %out.file, "declared output not produced");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(job = rec.id, error = %e, "stage-out refused");
                    refused.push(e.to_string());
                    continue;
                }
            };
            let logical = out.logical_name(rec.id);
            let Some(local) = shared.backend.site(&site) else { continue };
            let dest = transfer::storage_path(&local.storage, &logical);
            let (d, what) = (dest.clone(), out.file.clone());
            match tokio::task::spawn_blocking(move || transfer::copy_file_verified(src, &what, &d, None)).await {
                Ok(Ok(c)) => {
                    shared.metrics.transfer_bytes.fetch_add(c.bytes, Ordering::Relaxed);
                    let _ = shared
                        .store
                        .write(register_replica_op(
                            logical.clone(),
                            c.bytes,
                            c.sha256.clone(),
                            site.clone(),
                            dest.display().to_string(),
                        ))
                        .await;
                    registered.push((logical, c, site, dest));
                }
                Ok(Err(e)) => tracing::warn!(job = rec.id, output = %out.file, error = %e, "stage-out failed"),
                Err(e) => tracing::error!(error = %e, "stage-out task panicked"),
            }
        }
        let mut guard = shared.state.lock().unwrap();
        let st = &mut *guard;
        for (logical, c, site, dest) in registered {
            add_replica_mem(st, &logical, c.bytes, &c.sha256, &site, dest);
            if let Some(r) = st.jobs.get_mut(&rec.id) {
                r.outputs.push(logical);
            }
        }
        if let (Some(r), false) = (st.jobs.get_mut(&rec.id), refused.is_empty()) {
            r.failure = Some(refused.join("; "));
        }
        if let Some(r) = st.jobs.get(&rec.id) {
            persist(&shared, r);
        }
    });
}

// ----- startup and recovery -----------------------------------------------------------

/// Builds the state from the database: catalogue, jobs (non-terminal ones resubmitted to the
/// core in id order with their tries; running ones re-adopted), open launch intents reconciled.
pub fn recover(config: &ServerConfig, store: &Store, backend: &LocalBackend) -> anyhow::Result<State> {
    let sites_cfg = config.effective_sites();
    let sites: Vec<Site> = sites_cfg
        .iter()
        .map(|s| Site {
            name: s.name.clone(),
            processors: s.processors,
            speed: s.speed,
            supports_reservations: false,
            attributes: Default::default(),
        })
        .collect();
    let site_names: Vec<String> = sites.iter().map(|s| s.name.clone()).collect();
    let site_ids: HashMap<String, SiteId> = site_names.iter().enumerate().map(|(i, n)| (n.clone(), SiteId(i as u32))).collect();
    let forecast = NetworkForecast::uniform(sites.len(), config.initial_bandwidth_bps, 1);
    let file_rows: Vec<FileRow> = store.read(store::load_files)?;
    let mut catalogue = ReplicaCatalogue::new();
    let mut files = BTreeMap::new();
    for f in file_rows {
        let mut replicas = BTreeMap::new();
        let mut sids = Vec::new();
        for (site, path) in &f.replicas {
            // A replica whose file vanished is not used.
            if Path::new(path).is_file() {
                replicas.insert(site.clone(), PathBuf::from(path));
                if let Some(&s) = site_ids.get(site) {
                    sids.push(s);
                }
            }
        }
        catalogue.insert(f.name.clone(), f.size_bytes, sids);
        files.insert(
            f.name.clone(),
            FileInfo {
                size_bytes: f.size_bytes,
                sha256: f.sha256,
                replicas,
            },
        );
    }
    for s in backend.local_sites() {
        transfer::remove_partials(&s.storage);
    }
    let core = Scheduler::new(config.scheduler.clone(), sites, forecast, catalogue);
    let mut st = State {
        core,
        jobs: BTreeMap::new(),
        next_id: 1,
        site_names,
        site_ids,
        files,
        exec: HashMap::new(),
    };
    let rows = store.read(store::load_jobs)?;
    let launches = store.read(store::load_open_launches)?;
    let progress = store.read(store::load_progress)?;
    let mut adopted: BTreeSet<(u64, u32)> = BTreeSet::new();
    let now = now_ms();
    let mut requeued = 0;
    for row in rows {
        st.next_id = st.next_id.max(row.id + 1);
        let mut rec: JobRecord = serde_json::from_str(&row.record)?;
        if rec.state.is_terminal() {
            st.jobs.insert(row.id, rec);
            continue;
        }
        let spec: JobSpec = serde_json::from_str(&row.spec)?;
        if let Some((p, c, e, prio)) = progress.get(&row.id) {
            if *p > rec.placement_tries {
                rec.placement_tries = *p;
                rec.claiming_tries = rec.claiming_tries.max(*c);
                rec.error_resubmissions = rec.error_resubmissions.max(*e);
                if let Ok(pr) = prio.parse() {
                    rec.priority = pr;
                }
            }
        }
        let attempt_rows = if rec.state == JobState::Running {
            store.read(|c| store::load_attempt(c, row.id, rec.attempt))?
        } else {
            Vec::new()
        };
        // The rows of one attempt are written in one transaction: any row means all of them
        // (a bag's skipped components have none).
        let launched = Some(&attempt_rows).filter(|ls| !ls.is_empty());
        if let (JobState::Running, Some(ls)) = (rec.state, launched) {
            let mut placement = vec![None; rec.components.len().max(ls.len())];
            let mut ok = true;
            for l in ls {
                match (st.site_ids.get(&l.site), placement.get_mut(l.component as usize)) {
                    (Some(&s), Some(slot)) => *slot = Some((s, l.processors)),
                    _ => ok = false,
                }
            }
            // The start barrier decides whether the launch goes on: it does when a component
            // was let through (it may have run) or when every supervisor holds its directory
            // (roll forward: start them all); otherwise no program of it ever ran and it is
            // abandoned (below), the job requeued as if never launched.
            let barrier: Vec<BarrierState> = ls
                .iter()
                .map(|l| backend.barrier_state(&l.dir))
                .collect::<std::io::Result<_>>()
                .with_context(|| format!("checking the launch of job {} attempt {}", row.id, rec.attempt))?;
            let released = barrier.contains(&BarrierState::Released);
            let all_held = barrier.iter().all(|b| *b == BarrierState::Held { alive: true });
            if !(released || all_held) {
                tracing::info!(
                    job = row.id,
                    attempt = rec.attempt,
                    ?barrier,
                    "abandoning a launch that never started"
                );
            }
            if (released || all_held)
                && ok
                && st
                    .core
                    .adopt_running(
                        JobId(row.id),
                        spec.clone(),
                        &placement,
                        rec.timeline,
                        rec.placement_tries,
                        rec.claiming_tries,
                    )
                    .is_ok()
            {
                let held: Vec<String> = ls
                    .iter()
                    .zip(&barrier)
                    .filter(|(_, b)| **b == BarrierState::Held { alive: true })
                    .map(|(l, _)| l.dir.clone())
                    .collect();
                if !held.is_empty() {
                    // A supervisor that went away meanwhile shows up as a soft error.
                    match backend.start(&held) {
                        Ok(()) => tracing::info!(
                            job = row.id,
                            attempt = rec.attempt,
                            started = held.len(),
                            "rolled a held launch forward"
                        ),
                        Err(e) => tracing::warn!(job = row.id, error = %e, "cannot roll the launch forward"),
                    }
                }
                for l in ls {
                    let claim = backend.adopt(&l.dir, &l.site, l.processors).map_err(|e| anyhow::anyhow!("{e}"))?;
                    st.exec.insert(
                        (row.id, l.component),
                        Exec {
                            site: l.site.clone(),
                            processors: l.processors,
                            claim,
                            attempt: l.attempt,
                            dir: Some(PathBuf::from(&l.dir)),
                            lrm_id: Some(l.dir.clone()),
                            pending_launch: false,
                        },
                    );
                }
                adopted.insert((row.id, rec.attempt));
                tracing::info!(job = row.id, components = ls.len(), "re-adopted running job");
                st.jobs.insert(row.id, rec);
                continue;
            }
        }
        // Anything else that was not finished goes back to its queue, in id order.
        match st.core.submit_with_id(now, JobId(row.id), spec) {
            Ok(_) => {
                st.core.restore_progress(
                    JobId(row.id),
                    rec.submitted_ms,
                    rec.placement_tries,
                    rec.claiming_tries,
                    rec.error_resubmissions,
                    rec.priority,
                );
                let names = st.site_names.clone();
                if let Some(j) = st.core.job(JobId(row.id)) {
                    sync_record(&mut rec, j, &names);
                }
                rec.started_ms = None;
                requeued += 1;
            }
            Err(e) => {
                rec.state = JobState::Failed(FailureReason::Unplaceable);
                rec.failure = Some(format!("cannot be resubmitted after restart: {e}"));
                rec.finished_ms = Some(now);
                rec.exit_ok = Some(false);
            }
        }
        st.jobs.insert(row.id, rec);
    }
    // Launch intents of attempts that are not running any more: make sure nothing of them
    // runs. A directory no supervisor took is fenced; a supervisor still held at its start
    // barrier is told to give up (it exits, recording that it never started); one that was
    // let through is killed.
    let mut stale = Vec::new();
    for l in &launches {
        if !adopted.contains(&(l.job, l.attempt)) {
            match backend.barrier_state(&l.dir) {
                Ok(BarrierState::Fenced) | Ok(BarrierState::Held { alive: false }) => {}
                Ok(BarrierState::Held { alive: true }) => {
                    if let Err(e) = backend.abort_held(&l.dir) {
                        tracing::warn!(dir = %l.dir, error = %e, "cannot abort a held launch; killing it");
                        let _ = backend.cancel(&l.dir);
                    }
                }
                Ok(BarrierState::Released) | Err(_) => {
                    let _ = backend.cancel(&l.dir);
                }
            }
            stale.push(l.clone());
        }
    }
    if !stale.is_empty() {
        store.write_blocking(Box::new(move |tx| {
            for l in &stale {
                tx.execute(
                    "UPDATE launches SET done = 1 WHERE job = ?1 AND attempt = ?2 AND component = ?3",
                    params![l.job as i64, l.attempt, l.component],
                )?;
            }
            Ok(())
        }))?;
    }
    // Persist the re-synced records.
    let recs: Vec<(i64, String, String)> = st
        .jobs
        .values()
        .filter(|r| !r.state.is_terminal() || r.finished_ms == Some(now))
        .map(|r| (r.id as i64, r.state.name().to_string(), serde_json::to_string(r).unwrap()))
        .collect();
    if !recs.is_empty() {
        store.write_blocking(Box::new(move |tx| {
            let mut stmt = tx.prepare_cached("UPDATE jobs SET state = ?2, record = ?3 WHERE id = ?1")?;
            for (id, state, rec) in &recs {
                stmt.execute(params![id, state, rec])?;
            }
            Ok(())
        }))?;
    }
    tracing::info!(jobs = st.jobs.len(), requeued, adopted = adopted.len(), "state recovered");
    Ok(st)
}

/// Writes the tries and priority of queued jobs that changed since the last flush (one
/// bulk write; called every few seconds by the driver).
pub fn flush_progress(shared: &Shared, st: &mut State) {
    let mut changed = Vec::new();
    for p in Priority::ALL {
        for id in st.core.queued(p) {
            let Some(j) = st.core.job(id) else { continue };
            let Some(rec) = st.jobs.get_mut(&id.0) else { continue };
            if rec.placement_tries != j.placement_tries || rec.priority != j.priority {
                rec.placement_tries = j.placement_tries;
                rec.claiming_tries = j.claiming_tries;
                rec.error_resubmissions = j.error_resubmissions;
                rec.priority = j.priority;
                changed.push((
                    id.0 as i64,
                    j.placement_tries,
                    j.claiming_tries,
                    j.error_resubmissions,
                    j.priority.name(),
                ));
            }
        }
    }
    if changed.is_empty() {
        return;
    }
    shared.store.enqueue(Box::new(move |tx| {
        let mut stmt = tx.prepare_cached(
            "INSERT OR REPLACE INTO progress (id, placement_tries, claiming_tries, error_resubmissions, priority) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for (id, p, c, e, prio) in &changed {
            stmt.execute(params![id, p, c, e, prio])?;
        }
        Ok(())
    }));
}

/// How often queued jobs' tries are flushed.
pub const PROGRESS_FLUSH: Duration = Duration::from_secs(2);

/// The driver task: timers of the core, polling of running components.
pub async fn drive(shared: Arc<Shared>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let poll = Duration::from_millis(shared.config.poll_interval_ms.max(10));
    let mut last_poll = Instant::now();
    let mut last_flush = Instant::now();
    loop {
        let wait = {
            let st = shared.state.lock().unwrap();
            match st.core.poll_timeout() {
                Some(t) => Duration::from_millis(t.saturating_sub(now_ms())).min(poll),
                None => poll,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shared.wake.notified() => {}
            _ = shutdown.changed() => return,
        }
        let mut guard = shared.state.lock().unwrap();
        let st = &mut *guard;
        let now = now_ms();
        if st.core.poll_timeout().is_some_and(|t| t <= now) {
            let scans_before = st.core.stats().scans;
            let t0 = Instant::now();
            st.core.handle_timeout(now);
            let us = t0.elapsed().as_micros() as u64;
            if st.core.stats().scans > scans_before {
                shared.metrics.scans.fetch_add(1, Ordering::Relaxed);
                shared.metrics.scan_micros_total.fetch_add(us, Ordering::Relaxed);
                shared.metrics.last_scan_micros.store(us, Ordering::Relaxed);
            }
            process_actions(&shared, st);
        }
        if last_poll.elapsed() >= poll {
            last_poll = Instant::now();
            poll_running(&shared, st);
        }
        if last_flush.elapsed() >= PROGRESS_FLUSH {
            last_flush = Instant::now();
            flush_progress(&shared, st);
        }
    }
}
