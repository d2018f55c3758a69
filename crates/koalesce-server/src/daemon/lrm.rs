//! Calls into the sites' LRMs, off the state lock. The LRM worker takes [`LrmOp`]s in the order
//! the core's actions produced them: claims (and reservations) are carried out one after the
//! other on the blocking pool, so a job's claims are done before its launch starts; each launch
//! then runs as a task of its own (waits for its launch intent to be durable, spawns the
//! components' supervisors in one blocking call, waits for them at the start barrier and lets
//! them all run). Results come back as core inputs under the lock, briefly.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use koalesce_core::state::ComponentState;
use koalesce_core::{ComponentOutcome, JobId, SiteId};
use tokio::sync::mpsc;

use super::{process_actions, Shared, State};
use crate::backend::{BackendError, ComponentSubmission, LrmState, ReservationRequest};
use crate::jobdesc::Runner;
use crate::store::{self, LaunchRow};
use crate::{now_ms, supervise, transfer};

/// Work for the LRM worker.
#[derive(Debug)]
pub enum LrmOp {
    Claim {
        job: u64,
        component: u32,
        site: SiteId,
        processors: u32,
        reservation: Option<String>,
    },
    Launch(Launch),
    /// Kills a component (if submitted) and gives its claim back.
    Kill {
        site: SiteId,
        lrm_id: Option<String>,
        claim: Option<String>,
    },
    Release {
        site: SiteId,
        claim: String,
    },
    Reserve {
        job: u64,
        component: u32,
        site: SiteId,
        request: ReservationRequest,
    },
    CancelReservation {
        site: SiteId,
        id: String,
    },
}

/// One launch: the components of one attempt of a job.
#[derive(Debug)]
pub struct Launch {
    job: u64,
    attempt: u32,
    /// (component, site, submission without its claim id yet)
    components: Vec<(u32, SiteId, ComponentSubmission)>,
    /// Answered once the launch intents are committed.
    committed: tokio::sync::oneshot::Receiver<Result<(), crate::store::WriteFailed>>,
}

/// The sending end of the LRM worker's queue.
pub struct LrmQueue(mpsc::UnboundedSender<LrmOp>);

impl LrmQueue {
    pub fn new() -> (LrmQueue, mpsc::UnboundedReceiver<LrmOp>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (LrmQueue(tx), rx)
    }

    pub fn send(&self, op: LrmOp) {
        if self.0.send(op).is_err() {
            tracing::warn!("the LRM worker has stopped; an LRM call is dropped");
        }
    }
}

/// Runs `f` on the blocking pool; a panic there is reported as a site error.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, BackendError> + Send + 'static) -> Result<T, BackendError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(BackendError::Site {
            site: "?".into(),
            reason: format!("LRM call panicked: {e}"),
        })
    })
}

/// Reads a site's processor counts into its cache (on the blocking pool).
fn refresh_site(shared: &Shared, site: SiteId) {
    let h = shared.site(site);
    if let Ok(p) = h.backend.processors(&h.name) {
        h.idle.store(p.idle, Ordering::Relaxed);
        h.used.store(p.used, Ordering::Relaxed);
    }
}

/// The LRM worker (one task per server), until `shutdown`.
pub async fn worker(shared: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<LrmOp>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    loop {
        let op = tokio::select! {
            op = rx.recv() => match op {
                Some(op) => op,
                None => return,
            },
            _ = shutdown.changed() => {
                kill_pending(&shared, &mut rx).await;
                return;
            }
        };
        match op {
            LrmOp::Claim {
                job,
                component,
                site,
                processors,
                reservation,
            } => claim(&shared, job, component, site, processors, reservation).await,
            LrmOp::Launch(l) => {
                tokio::spawn(launch(shared.clone(), l));
            }
            LrmOp::Kill { site, lrm_id, claim } => {
                let s = shared.clone();
                tokio::task::spawn_blocking(move || {
                    let h = s.site(site);
                    if let Some(id) = lrm_id {
                        let _ = h.backend.cancel(&id);
                    }
                    if let Some(c) = claim {
                        h.backend.release(&c);
                    }
                    refresh_site(&s, site);
                });
            }
            LrmOp::Release { site, claim } => {
                let s = shared.clone();
                tokio::task::spawn_blocking(move || {
                    s.site(site).backend.release(&claim);
                    refresh_site(&s, site);
                });
            }
            LrmOp::Reserve {
                job,
                component,
                site,
                request,
            } => {
                let s = shared.clone();
                let r = blocking(move || match s.site(site).backend.reservations() {
                    Some(r) => r.reserve(&request),
                    None => Err(BackendError::Site {
                        site: request.site.clone(),
                        reason: "no advance reservations".into(),
                    }),
                })
                .await;
                let mut guard = shared.lock();
                let st = &mut *guard;
                let granted = match r {
                    Ok(id) => {
                        st.reservations.insert((job, component), id);
                        shared.metrics.reservations_granted.fetch_add(1, Ordering::Relaxed);
                        true
                    }
                    Err(e) => {
                        tracing::info!(job, component, error = %e, "reservation refused");
                        shared.metrics.reservations_refused.fetch_add(1, Ordering::Relaxed);
                        false
                    }
                };
                st.core.reservation_answer(now_ms(), JobId(job), component, granted);
                process_actions(&shared, st);
            }
            LrmOp::CancelReservation { site, id } => {
                let s = shared.clone();
                tokio::task::spawn_blocking(move || {
                    if let Some(r) = s.site(site).backend.reservations() {
                        let _ = r.cancel_reservation(&id);
                    }
                });
            }
        }
    }
}

/// At shutdown: the kills the core asked for are still carried out (a component of a
/// cancelled job must not run on, held at its barrier, after the server stopped); everything
/// else is left to the next server's recovery.
async fn kill_pending(shared: &Arc<Shared>, rx: &mut mpsc::UnboundedReceiver<LrmOp>) {
    let mut kills = Vec::new();
    while let Ok(op) = rx.try_recv() {
        if let LrmOp::Kill {
            site, lrm_id: Some(id), ..
        } = op
        {
            kills.push((site, id));
        }
    }
    if kills.is_empty() {
        return;
    }
    let s = shared.clone();
    let _ = tokio::task::spawn_blocking(move || {
        for (site, id) in kills {
            let _ = s.site(site).backend.cancel(&id);
        }
    })
    .await;
}

async fn claim(shared: &Arc<Shared>, job: u64, component: u32, site: SiteId, processors: u32, reservation: Option<String>) {
    let s = shared.clone();
    let result = blocking(move || {
        let h = s.site(site);
        let r = match &reservation {
            Some(id) => match h.backend.reservations() {
                Some(res) => res.claim_reserved(id),
                None => h.backend.claim(&h.name, processors),
            },
            None => h.backend.claim(&h.name, processors),
        };
        refresh_site(&s, site);
        r
    })
    .await;
    let mut guard = shared.lock();
    let st = &mut *guard;
    match result {
        Ok(claim) => match st.exec.get_mut(&(job, component)) {
            Some(e) => e.claim = Some(claim),
            // Aborted meanwhile: give it back.
            None => shared.lrm.send(LrmOp::Release { site, claim }),
        },
        Err(e) => {
            if st.exec.remove(&(job, component)).is_some() {
                let soft = !matches!(e, BackendError::Busy { .. });
                if soft {
                    tracing::warn!(job, component, error = %e, "claim failed");
                }
                st.core.claim_rejected(now_ms(), JobId(job), component, soft);
            }
        }
    }
    process_actions(shared, st);
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

/// `Action::Launch` (under the lock): a new attempt, its component directories and
/// environments, the launch intents enqueued for the writer; the rest is the LRM worker's.
pub fn prepare_launch(shared: &Arc<Shared>, st: &mut State, job: u64) {
    let Some(core_job) = st.core.job(JobId(job)) else { return };
    let Some(meta) = st.meta.get_mut(&job) else { return };
    meta.attempt += 1;
    let attempt = meta.attempt;
    let n = core_job.components.len();
    let coupled = meta.desc.runner == Runner::Coupled;
    let peers: Vec<String> = if coupled {
        (0..n).map(|_| format!("127.0.0.1:{}", free_port())).collect()
    } else {
        Vec::new()
    };
    let mut components = Vec::with_capacity(n);
    let mut rows = Vec::with_capacity(n);
    for (i, c) in core_job.components.iter().enumerate() {
        // Components of a bag skipped in this run have no site and are not launched.
        let Some(site) = c.site.filter(|_| c.state != ComponentState::Skipped) else {
            continue;
        };
        let handle = shared.site(site);
        let dir = handle.paths.jobs.join(job.to_string()).join(format!("a{attempt}-c{i}"));
        // The component's KOALESCE_* variables; they win over the user's environment.
        let mut env: BTreeMap<String, String> = BTreeMap::new();
        env.insert("KOALESCE_RANK".into(), i.to_string());
        env.insert("KOALESCE_SIZE".into(), n.to_string());
        env.insert("KOALESCE_JOB_ID".into(), job.to_string());
        env.insert("KOALESCE_SITE".into(), handle.name.clone());
        env.insert("KOALESCE_PROCESSORS".into(), c.processors.to_string());
        if coupled {
            env.insert("KOALESCE_PEERS".into(), peers.join(","));
        }
        env.insert("KOALESCE_JOB_DIR".into(), dir.display().to_string());
        if let Some(a) = meta.array {
            env.insert("KOALESCE_TASK_ID".into(), a.task_id.to_string());
            env.insert("KOALESCE_ARRAY_JOB_ID".into(), a.array_id.to_string());
            env.insert("KOALESCE_ARRAY_TASK_COUNT".into(), a.count.to_string());
        }
        let arch = st.core.sites().get(site.index()).map(|s| s.attributes.architecture.clone());
        env.insert("KOALESCE_ARCH".into(), arch.unwrap_or_default());
        // GW_CLOSE_SE and GW_REMOTE_FILES_i (004 §3.2) for a job with REQUIREMENTS or RANK.
        env.extend(st.core.gridway_environment(JobId(job), i as u32).into_iter().flatten());
        for f in meta.desc.inputs.iter().map(|f| f.logical()) {
            let path = st
                .files
                .get(f)
                .and_then(|fi| fi.replicas.get(&handle.name).cloned())
                .unwrap_or_else(|| transfer::storage_path(&handle.paths.storage, f));
            env.insert(format!("KOALESCE_INPUT_{}", env_name(f)), path.display().to_string());
        }
        // The component's program (per-component overrides, ${KOALESCE_*} expanded).
        let process = meta.desc.process(i, &env);
        let mut environment = process.environment;
        environment.extend(env);
        let working_directory = meta
            .desc
            .working_directory
            .as_deref()
            .map(|w| koalesce_api::fields::expand_runtime(w, |n| environment.get(n).cloned()));
        let Some(exec) = st.exec.get_mut(&(job, i as u32)) else { continue };
        exec.attempt = attempt;
        exec.dir = Some(dir.clone());
        exec.lrm_id = None;
        components.push((
            i as u32,
            site,
            ComponentSubmission {
                site: handle.name.clone(),
                user: meta.user.clone(),
                processors: c.processors,
                claim: String::new(),
                dir: dir.clone(),
                executable: process.executable,
                arguments: process.arguments,
                environment,
                time_limit_ms: meta.desc.walltime_ms(shared.config.walltime_factor).unwrap_or(0),
                memory_limit: meta.desc.memory_limit(c.processors),
                working_directory,
            },
        ));
        rows.push(LaunchRow {
            job,
            attempt,
            component: i as u32,
            site: handle.name.clone(),
            processors: c.processors,
            dir: dir.display().to_string(),
            done: false,
            lrm_id: None,
        });
        let cm = meta.component_mut(i);
        cm.dir = Some(dir.display().to_string());
        cm.exit_code = None;
    }
    shared.metrics.launches.fetch_add(1, Ordering::Relaxed);
    // Recorded before the intents, which the launch waits for: a launch that may run is never
    // behind a stored state that is not Running, and its attempt and directories are known.
    if let Some(j) = st.core.job(JobId(job)) {
        super::records::persist_state(shared, job, j);
    }
    if let Some(meta) = st.meta.get(&job) {
        super::records::persist_meta(shared, job, meta);
    }
    let committed = shared.store.submit(store::insert_launches_op(rows));
    shared.lrm.send(LrmOp::Launch(Launch {
        job,
        attempt,
        components,
        committed,
    }));
}

/// Whether component `i` of `job` still belongs to launch `attempt` (not aborted meanwhile).
fn current(st: &State, job: u64, i: u32, attempt: u32) -> bool {
    st.exec.get(&(job, i)).is_some_and(|e| e.attempt == attempt)
}

async fn launch(shared: Arc<Shared>, l: Launch) {
    let Launch {
        job,
        attempt,
        components,
        committed,
    } = l;
    let committed = matches!(committed.await, Ok(Ok(())));
    // The claims were carried out before this launch was taken up: fill their ids in.
    let (mut subs, mut dropped) = (Vec::new(), Vec::new());
    {
        let st = shared.lock();
        for (i, site, sub) in components {
            match st
                .exec
                .get(&(job, i))
                .filter(|e| e.attempt == attempt)
                .and_then(|e| e.claim.clone())
            {
                Some(claim) => subs.push((i, site, ComponentSubmission { claim, ..sub })),
                None => dropped.push(sub),
            }
        }
    }
    let s = shared.clone();
    let results = tokio::task::spawn_blocking(move || {
        // Aborted before they started: make sure they never will.
        for sub in &dropped {
            let _ = supervise::fence(&sub.dir);
        }
        subs.into_iter()
            .map(|(i, site, sub)| {
                let r = if committed {
                    s.site(site).backend.submit(&sub)
                } else {
                    Err(BackendError::Site {
                        site: sub.site.clone(),
                        reason: "launch intent could not be recorded".into(),
                    })
                };
                if r.is_err() {
                    let _ = supervise::fence(&sub.dir);
                }
                (i, site, r)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    let mut submitted = Vec::with_capacity(results.len());
    {
        let mut guard = shared.lock();
        let st = &mut *guard;
        let (mut done, mut ids) = (Vec::new(), Vec::new());
        for (i, site, r) in results {
            match r {
                Ok(id) if current(st, job, i, attempt) => {
                    if let Some(e) = st.exec.get_mut(&(job, i)) {
                        // Recovery finds a component by its directory; an LRM id that says more
                        // (a Slurm job) is recorded with the launch intent.
                        if e.dir.as_ref().is_none_or(|d| d.as_os_str() != id.as_str()) {
                            ids.push((job, attempt, i, id.clone()));
                        }
                        e.lrm_id = Some(id.clone());
                    }
                    submitted.push((i, site, id));
                }
                // Aborted while its supervisor was being spawned.
                Ok(id) => shared.lrm.send(LrmOp::Kill {
                    site,
                    lrm_id: Some(id),
                    claim: None,
                }),
                Err(err) => {
                    if let Some(e) = st.exec.remove(&(job, i)) {
                        if let Some(claim) = e.claim {
                            shared.lrm.send(LrmOp::Release { site, claim });
                        }
                        done.push((job, attempt, i));
                        if let BackendError::Exhausted { .. } = err {
                            // This machine is short of descriptors or processes for a moment:
                            // the claim is refused and retried later, never held against the
                            // site.
                            tracing::warn!(job, component = i, error = %err, "launch postponed");
                            st.core.claim_rejected(now_ms(), JobId(job), i, false);
                        } else {
                            tracing::warn!(job, component = i, error = %err, "launch failed (soft error)");
                            st.core.component_finished(now_ms(), JobId(job), i, ComponentOutcome::SoftError);
                        }
                    }
                }
            }
        }
        if !ids.is_empty() {
            shared.store.enqueue(store::launches_submitted_op(ids));
        }
        if !done.is_empty() {
            shared.store.enqueue(store::launches_done_op(done));
        }
        process_actions(&shared, st);
    }
    // Every supervisor of the launch is spawned and holds at its start barrier; let them
    // all run once all are there. (Components whose launch failed were aborted with the
    // job, which the barrier notices: then nothing of this launch ever runs.)
    if !submitted.is_empty() {
        start_at_barrier(shared, job, attempt, submitted).await;
    }
}

/// Longest wait for the supervisors of a launch to reach their start barrier; those not there
/// by then are cancelled (fenced), a soft error.
pub const BARRIER_TIMEOUT: Duration = Duration::from_secs(60);

/// Launch components grouped by site: site → LRM ids.
fn by_site(comps: &[(u32, SiteId, String)]) -> BTreeMap<SiteId, Vec<String>> {
    let mut m: BTreeMap<SiteId, Vec<String>> = BTreeMap::new();
    for (_, site, id) in comps {
        m.entry(*site).or_default().push(id.clone());
    }
    m
}

/// The daemon's half of the start barrier: waits (checking every few ms, off the lock) until
/// every component of the launch is held ready by its supervisor, then starts them all. Gives
/// up when the launch is aborted meanwhile (the abort cancels the components) or when a
/// supervisor does not come up in [`BARRIER_TIMEOUT`].
///
/// `go` is written only once every supervisor of the launch holds its directory, so a daemon
/// crash before that leaves a launch of which no program ran (recovery aborts it and requeues
/// the job), and a crash after that leaves one in which no directory can be fenced any more
/// (recovery writes the missing `go` files and re-adopts the job).
async fn start_at_barrier(shared: Arc<Shared>, job: u64, attempt: u32, comps: Vec<(u32, SiteId, String)>) {
    let t0 = Instant::now();
    let sites = by_site(&comps);
    let mut delay = Duration::from_millis(1);
    loop {
        let still = {
            let st = shared.lock();
            comps.iter().all(|(i, _, id)| {
                st.exec
                    .get(&(job, *i))
                    .is_some_and(|e| e.attempt == attempt && e.lrm_id.as_deref() == Some(id.as_str()))
            })
        };
        if !still {
            return;
        }
        let (s, groups) = (shared.clone(), sites.clone());
        let not_ready: Vec<(SiteId, String)> = tokio::task::spawn_blocking(move || {
            groups
                .iter()
                .flat_map(|(site, ids)| {
                    s.site(*site)
                        .backend
                        .ready(ids)
                        .into_iter()
                        .filter(|(_, r)| !r)
                        .map(|(id, _)| (*site, id))
                        .collect::<Vec<_>>()
                })
                .collect()
        })
        .await
        .unwrap_or_default();
        if not_ready.is_empty() {
            break;
        }
        if t0.elapsed() >= BARRIER_TIMEOUT {
            tracing::warn!(job, attempt, waiting = ?not_ready, "supervisors did not reach the start barrier; cancelling");
            for (site, id) in not_ready {
                shared.lrm.send(LrmOp::Kill {
                    site,
                    lrm_id: Some(id),
                    claim: None,
                });
            }
            return;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(10));
    }
    let s = shared.clone();
    let groups = sites.clone();
    let result = tokio::task::spawn_blocking(move || groups.iter().try_for_each(|(site, ids)| s.site(*site).backend.start(ids))).await;
    match result {
        Ok(Ok(())) => tracing::debug!(
            job,
            attempt,
            components = comps.len(),
            ms = t0.elapsed().as_millis() as u64,
            "launch started"
        ),
        other => {
            // A supervisor went away in between (it will show as a soft error), or `go` could
            // not be written: make sure nothing of the launch keeps waiting or running.
            tracing::warn!(job, attempt, result = ?other.map(|r| r.err()), "cannot start the launch; cancelling it");
            for (_, site, id) in comps {
                shared.lrm.send(LrmOp::Kill {
                    site,
                    lrm_id: Some(id),
                    claim: None,
                });
            }
        }
    }
}

/// Checks every submitted component (one batched status call per site, off the lock) and
/// reports the ended ones to the core.
pub async fn poll_running(shared: Arc<Shared>) {
    let ids: Vec<((u64, u32), SiteId, String)> = {
        let st = shared.lock();
        st.exec
            .iter()
            .filter_map(|(k, e)| e.lrm_id.clone().map(|id| (*k, e.site, id)))
            .collect()
    };
    if ids.is_empty() {
        return;
    }
    let mut groups: BTreeMap<SiteId, Vec<String>> = BTreeMap::new();
    for (_, site, id) in &ids {
        groups.entry(*site).or_default().push(id.clone());
    }
    let s = shared.clone();
    let states: HashMap<String, LrmState> =
        tokio::task::spawn_blocking(move || groups.iter().flat_map(|(site, list)| s.site(*site).backend.status(list)).collect())
            .await
            .unwrap_or_default();
    let mut guard = shared.lock();
    let st = &mut *guard;
    let now = now_ms();
    let mut done = Vec::new();
    for ((job, comp), site, id) in ids {
        let Some(state) = states.get(&id).filter(|s| s.is_terminal()) else {
            continue;
        };
        // Still the same component (not aborted and relaunched in between)?
        if st.exec.get(&(job, comp)).and_then(|e| e.lrm_id.as_deref()) != Some(id.as_str()) {
            continue;
        }
        let Some(e) = st.exec.remove(&(job, comp)) else { continue };
        if let Some(claim) = e.claim {
            shared.lrm.send(LrmOp::Release { site, claim });
        }
        done.push((job, e.attempt, comp));
        let (outcome, exit_code, note) = match state {
            LrmState::Completed => (ComponentOutcome::Success, Some(0), None),
            LrmState::Failed { exit_code, reason } => (ComponentOutcome::ApplicationError, exit_code.or(Some(-1)), Some(reason.clone())),
            LrmState::Timeout { reason } => {
                let limit = st
                    .meta
                    .get(&job)
                    .and_then(|m| m.desc.walltime_ms(shared.config.walltime_factor))
                    .map(|ms| format!(" ({})", koalesce_api::duration::format_ms(ms)))
                    .unwrap_or_default();
                (ComponentOutcome::Timeout, None, Some(format!("{reason}{limit}")))
            }
            LrmState::OutOfMemory { reason } => {
                let limit = st
                    .meta
                    .get(&job)
                    .and_then(|m| m.desc.memory.clone())
                    .map(|m| format!(" ({m} per processor)"))
                    .unwrap_or_default();
                (ComponentOutcome::OutOfMemory, None, Some(format!("{reason}{limit}")))
            }
            LrmState::NodeFail { reason } => (ComponentOutcome::SoftError, None, Some(reason.clone())),
            other => (ComponentOutcome::SoftError, None, Some(format!("{other:?}"))),
        };
        let site_name = &shared.site(site).name;
        if let Some(meta) = st.meta.get_mut(&job) {
            meta.component_mut(comp as usize).exit_code = exit_code;
            let fails_job = matches!(
                outcome,
                ComponentOutcome::ApplicationError | ComponentOutcome::Timeout | ComponentOutcome::OutOfMemory
            );
            if fails_job && meta.failure.is_none() && meta.desc.runner != Runner::Bag {
                meta.failure = Some(format!("component {comp} at {site_name}: {}", note.clone().unwrap_or_default()));
            }
        }
        if outcome == ComponentOutcome::SoftError {
            tracing::warn!(job, component = comp, site = %site_name, reason = note.as_deref().unwrap_or(""), "soft error");
        }
        st.core.component_finished(now, JobId(job), comp, outcome);
    }
    if !done.is_empty() {
        shared.store.enqueue(store::launches_done_op(done));
    }
    process_actions(&shared, st);
}
