//! Calls into the sites' LRMs, off the state lock. The LRM worker takes [`LrmOp`]s in the order
//! the core's actions produced them: claims (and reservations) are carried out one after the
//! other on the blocking pool, so a job's claims are done before its launch starts; each launch
//! then runs as a task of its own (waits for its launch intent to be durable, spawns the
//! components' supervisors in one blocking call, waits for them at the start barrier and lets
//! them all run). Results come back as core inputs under the lock, briefly.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
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
        /// Claim inside the component's granted reservation (taken from `State::reservations`).
        reserved: bool,
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
    /// The inputs each component uses at its site (checked before it starts).
    inputs: HashMap<u32, Vec<InputCheck>>,
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
    // An op taken from the queue behind a batch of reservations, carried out next.
    let mut pending: Option<LrmOp> = None;
    loop {
        let op = if let Some(op) = pending.take() {
            op
        } else {
            tokio::select! {
                op = rx.recv() => match op {
                    Some(op) => op,
                    None => return,
                },
                _ = shutdown.changed() => {
                    kill_pending(&shared, &mut rx).await;
                    return;
                }
            }
        };
        match op {
            LrmOp::Claim {
                job,
                component,
                site,
                processors,
                reserved,
            } => claim(&shared, job, component, site, processors, reserved).await,
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
                let mut batch = vec![(job, component, site, request)];
                if shared.config.batch_reservations {
                    // The reservations queued right behind it go with it; the first other
                    // op is carried out next, so the order of the queue is kept.
                    while let Ok(next) = rx.try_recv() {
                        match next {
                            LrmOp::Reserve {
                                job,
                                component,
                                site,
                                request,
                            } => batch.push((job, component, site, request)),
                            other => {
                                pending = Some(other);
                                break;
                            }
                        }
                    }
                }
                reserve_batch(&shared, batch).await;
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

/// Reservations the scheduler asked for, `(job, component, site, request)` in queue order:
/// one [`crate::backend::Reservations::reserve_many`] call per site (off the lock), then the
/// answers to the core under one lock. A grant for a component that no longer waits for it
/// (its job went back to the queue, e.g. after another component's refusal) is given back.
async fn reserve_batch(shared: &Arc<Shared>, batch: Vec<(u64, u32, SiteId, ReservationRequest)>) {
    let mut by_site: BTreeMap<SiteId, Vec<usize>> = BTreeMap::new();
    for (i, (_, _, site, _)) in batch.iter().enumerate() {
        by_site.entry(*site).or_default().push(i);
    }
    let s = shared.clone();
    let requests: Vec<ReservationRequest> = batch.iter().map(|b| b.3.clone()).collect();
    let n = batch.len();
    let answers: Vec<Result<String, BackendError>> = blocking(move || {
        let mut out: Vec<Option<Result<String, BackendError>>> = (0..n).map(|_| None).collect();
        for (site, idx) in by_site {
            let reqs: Vec<ReservationRequest> = idx.iter().map(|&i| requests[i].clone()).collect();
            s.metrics.reservation_calls.fetch_add(1, Ordering::Relaxed);
            let results = match s.site(site).backend.reservations() {
                Some(r) => r.reserve_many(&reqs),
                None => reqs
                    .iter()
                    .map(|q| {
                        Err(BackendError::Site {
                            site: q.site.clone(),
                            reason: "no advance reservations".into(),
                        })
                    })
                    .collect(),
            };
            for (i, r) in idx.into_iter().zip(results) {
                out[i] = Some(r);
            }
        }
        Ok(out
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(BackendError::Site {
                        site: "?".into(),
                        reason: "no answer".into(),
                    })
                })
            })
            .collect())
    })
    .await
    .unwrap_or_else(|e| (0..n).map(|_| Err(e.clone())).collect());
    {
        let mut guard = shared.lock();
        let st = &mut *guard;
        for ((job, component, site, _), r) in batch.into_iter().zip(answers) {
            let granted = match r {
                Ok(id) => {
                    shared.metrics.reservations_granted.fetch_add(1, Ordering::Relaxed);
                    // Its job went back to the queue (or ended) before the answer came.
                    let stale = st.core.job(JobId(job)).is_none_or(|j| {
                        j.state.is_terminal()
                            || matches!(j.state, koalesce_core::JobState::Queued | koalesce_core::JobState::Held)
                            || j.components
                                .get(component as usize)
                                .is_none_or(|c| c.state == ComponentState::Unplaced)
                    });
                    if !stale {
                        st.reservations.insert((job, component), id);
                    } else {
                        shared.lrm.send(LrmOp::CancelReservation { site, id });
                    }
                    true
                }
                Err(e) => {
                    tracing::info!(job, component, error = %e, "reservation refused");
                    shared.metrics.reservations_refused.fetch_add(1, Ordering::Relaxed);
                    false
                }
            };
            st.core.reservation_answer(now_ms(), JobId(job), component, granted);
        }
        process_actions(shared, st);
    }
    // Granting them may have moved flexible reservations to make room.
    crate::reservations::apply_moves(shared).await;
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

async fn claim(shared: &Arc<Shared>, job: u64, component: u32, site: SiteId, processors: u32, reserved: bool) {
    // A job in a reservation its owner holds: the reservation's id at the site is read from
    // the store when claiming (a restarted server re-created it under a new id).
    let held = reserved
        .then(|| {
            let st = shared.lock();
            let h = st.core.job(JobId(job))?.spec.preferences.held_reservation.as_ref()?;
            Some(h.id.clone())
        })
        .flatten();
    if let Some(public) = held {
        let s = shared.clone();
        let result = blocking(move || {
            let h = s.site(site);
            let now = now_ms();
            let row = store::parse_reservation_id(&public)
                .and_then(|id| s.store.read(|c| store::load_reservation(c, id, now)).ok().flatten())
                .filter(|r| r.info.end_ms > now);
            let r = match (row, h.backend.reservations()) {
                // Starts later than the job was claimed for (a move the core had not been told
                // of yet, a race of milliseconds): claiming now would take the processors
                // before their time.
                (Some(row), _) if row.info.start_ms > now + 1_000 => Err(BackendError::Site {
                    site: h.name.clone(),
                    reason: format!(
                        "reservation '{public}' starts at {}, after the job was claimed in it",
                        row.info.start_ms
                    ),
                }),
                (Some(row), Some(res)) => res.claim_reserved(&row.backend_id),
                _ => Err(BackendError::Site {
                    site: h.name.clone(),
                    reason: format!("reservation '{public}' ended or was cancelled"),
                }),
            };
            refresh_site(&s, site);
            r
        })
        .await;
        return claimed(shared, job, component, site, result, false);
    }
    let reservation = if reserved {
        let mut st = shared.lock();
        let id = st.reservations.remove(&(job, component));
        if let (Some(e), Some(id)) = (st.exec.get_mut(&(job, component)), &id) {
            e.reservation = Some(id.clone());
        }
        id
    } else {
        None
    };
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
    claimed(shared, job, component, site, result, true);
}

/// The LRM's answer to a claim. `blame`: a refusal other than busy is the site's fault (not
/// for a reservation the user lost).
fn claimed(shared: &Arc<Shared>, job: u64, component: u32, site: SiteId, result: Result<String, BackendError>, blame: bool) {
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
                let soft = blame && !matches!(e, BackendError::Busy { .. });
                if soft {
                    tracing::warn!(job, component, error = %e, "claim failed");
                }
                st.core.claim_rejected(now_ms(), JobId(job), component, soft);
            }
        }
    }
    process_actions(shared, st);
}

pub(crate) fn env_name(file: &str) -> String {
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
    let mut inputs: HashMap<u32, Vec<InputCheck>> = HashMap::new();
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
            env.extend(a.variables());
        }
        let arch = st.core.sites().get(site.index()).map(|s| s.attributes.architecture.clone());
        env.insert("KOALESCE_ARCH".into(), arch.unwrap_or_default());
        // GW_CLOSE_SE and GW_REMOTE_FILES_i (004 §3.2) for a job with REQUIREMENTS or RANK.
        env.extend(st.core.gridway_environment(JobId(job), i as u32).into_iter().flatten());
        for f in meta.desc.inputs.iter().map(|f| f.logical()) {
            let fi = st.files.get(f);
            let path = fi
                .and_then(|fi| fi.replicas.get(&handle.name).cloned())
                .unwrap_or_else(|| transfer::storage_path(&handle.paths.storage, f));
            if let Some(fi) = fi {
                inputs.entry(i as u32).or_default().push(InputCheck {
                    file: f.to_string(),
                    path: path.clone(),
                    sha256: fi.sha256.clone(),
                    size: fi.size_bytes,
                });
            }
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
        // Binds the supervisor's records to this launch; stored with the launch row below.
        let nonce = supervise::new_nonce();
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
                nonce: nonce.clone(),
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
            nonce,
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
        inputs,
        committed,
    }));
}

/// Why a component of a launch was not submitted.
#[derive(Debug)]
enum NotLaunched {
    /// The site's LRM (or this machine) refused.
    Backend(BackendError),
    /// Its directory exists already (left by another launch): nobody's fault; the next
    /// attempt gets a new directory.
    StaleDir,
    /// An input replica at its site is not what the catalogue says: it is quarantined and
    /// the job placed again; nobody's site is blamed.
    CorruptInput {
        file: String,
        site: String,
        path: PathBuf,
        reason: String,
    },
}

/// An input a component uses at its site, checked before it is started.
#[derive(Debug, Clone)]
pub struct InputCheck {
    pub file: String,
    pub path: PathBuf,
    pub sha256: String,
    pub size: u64,
}

/// Sets a component up at its site: a new directory, intact inputs, then the LRM. `solo`: the
/// launch has this one component, so there is nobody to start together with: its `go` is
/// written before the LRM gets it and the supervisor runs the program as soon as it is set
/// up, without a round trip through the daemon. (Safe as the barrier's other cases: a
/// directory no supervisor took yet is still fenced by a cancel or by recovery, and `abort`
/// wins over `go`.)
fn submit_component(
    s: &Shared,
    job: u64,
    site: SiteId,
    sub: &ComponentSubmission,
    inputs: &[InputCheck],
    committed: bool,
    solo: bool,
) -> Result<String, NotLaunched> {
    let site_err = |reason: String| {
        NotLaunched::Backend(BackendError::Site {
            site: sub.site.clone(),
            reason,
        })
    };
    if !committed {
        return Err(site_err("launch intent could not be recorded".into()));
    }
    // The launch directory is made here, only if new: records left in a directory of the
    // same name (a lost job's) are never read as this launch's.
    match supervise::create_launch_dir(&sub.dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            tracing::error!(job, dir = %sub.dir.display(), "launch directory exists already; not reused");
            return Err(NotLaunched::StaleDir);
        }
        Err(e) => return Err(site_err(format!("cannot create {}: {e}", sub.dir.display()))),
        Ok(()) => {}
    }
    for i in inputs {
        if let Err(reason) = transfer::verify_replica(&i.path, &i.sha256, i.size) {
            return Err(NotLaunched::CorruptInput {
                file: i.file.clone(),
                site: sub.site.clone(),
                path: i.path.clone(),
                reason,
            });
        }
    }
    if solo {
        supervise::release(&sub.dir).map_err(|e| site_err(format!("cannot write the go file of {}: {e}", sub.dir.display())))?;
    }
    s.site(site).backend.submit(sub).map_err(NotLaunched::Backend)
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
        inputs,
        committed,
    } = l;
    let committed = matches!(committed.await, Ok(Ok(())));
    let solo = components.len() == 1;
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
        let inputs = &inputs;
        let submit = |(i, site, sub): (u32, SiteId, ComponentSubmission)| {
            let r = submit_component(&s, job, site, &sub, inputs.get(&i).map_or(&[][..], |v| &v[..]), committed, solo);
            if matches!(r, Err(NotLaunched::Backend(_)) | Err(NotLaunched::CorruptInput { .. })) {
                let _ = supervise::fence(&sub.dir);
            }
            (i, site, r)
        };
        let mut per_site: BTreeMap<SiteId, Vec<(u32, SiteId, ComponentSubmission)>> = BTreeMap::new();
        for c in subs {
            per_site.entry(c.1).or_default().push(c);
        }
        if per_site.len() < 2 {
            return per_site.into_values().flatten().map(submit).collect::<Vec<_>>();
        }
        // The sites of a launch get their components at once (one thread per site, in order
        // within a site): a Slurm submission takes tens to hundreds of milliseconds.
        std::thread::scope(|scope| {
            let handles: Vec<_> = per_site
                .into_values()
                .map(|group| {
                    let ids: Vec<(u32, SiteId)> = group.iter().map(|c| (c.0, c.1)).collect();
                    (ids, scope.spawn(move || group.into_iter().map(submit).collect::<Vec<_>>()))
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|(ids, h)| {
                    h.join().unwrap_or_else(|_| {
                        ids.into_iter()
                            .map(|(i, site)| {
                                let e = BackendError::Site {
                                    site: "?".into(),
                                    reason: "submission panicked".into(),
                                };
                                (i, site, Err(NotLaunched::Backend(e)))
                            })
                            .collect()
                    })
                })
                .collect::<Vec<_>>()
        })
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
                        match err {
                            NotLaunched::StaleDir => st.core.claim_rejected(now_ms(), JobId(job), i, false),
                            NotLaunched::CorruptInput { file, site, path, reason } => {
                                tracing::warn!(job, component = i, %file, %site, %reason, "input replica corrupt; quarantined");
                                super::transfers::quarantine_replica(&shared, st, &file, &site, &path);
                                if let Some(m) = st.meta.get_mut(&job) {
                                    m.failure = Some(format!(
                                        "input '{file}': the replica at {site} is corrupt and was quarantined ({reason})"
                                    ));
                                }
                                st.core.claim_rejected(now_ms(), JobId(job), i, false);
                            }
                            // This machine is short of descriptors or processes for a moment:
                            // the claim is refused and retried later, never held against the
                            // site.
                            NotLaunched::Backend(err @ BackendError::Exhausted { .. }) => {
                                tracing::warn!(job, component = i, error = %err, "launch postponed");
                                st.core.claim_rejected(now_ms(), JobId(job), i, false);
                            }
                            NotLaunched::Backend(err) => {
                                tracing::warn!(job, component = i, error = %err, "launch failed (soft error)");
                                st.core.component_finished(now_ms(), JobId(job), i, ComponentOutcome::SoftError);
                            }
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
        start_at_barrier(shared, job, attempt, submitted, solo).await;
    }
}

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
/// component is not ready within the shortest [`crate::backend::Backend::claim_timeout`] of
/// its sites: that is a failed claim (see [`claim_timed_out`]).
///
/// `go` is written only once every supervisor of the launch holds its directory, so a daemon
/// crash before that leaves a launch of which no program ran (recovery aborts it and requeues
/// the job), and a crash after that leaves one in which no directory can be fenced any more
/// (recovery writes the missing `go` files and re-adopts the job).
///
/// `released`: the launch's `go` was written before its submission (one component): only
/// the check-in is waited for (the claim), nothing is written after it. Otherwise the `go`
/// files are written in one burst from the starter thread ([`super::starter`]).
async fn start_at_barrier(shared: Arc<Shared>, job: u64, attempt: u32, comps: Vec<(u32, SiteId, String)>, released: bool) {
    let t0 = Instant::now();
    let sites = by_site(&comps);
    let timeout = sites
        .keys()
        .map(|s| shared.site(*s).backend.claim_timeout())
        .min()
        .unwrap_or(crate::backend::DEFAULT_CLAIM_TIMEOUT);
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
        if t0.elapsed() >= timeout {
            claim_timed_out(&shared, job, attempt, &comps, not_ready).await;
            return;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(10));
    }
    if released {
        tracing::debug!(
            job,
            attempt,
            ms = t0.elapsed().as_millis() as u64,
            "launch checked in (released before)"
        );
        return;
    }
    let s = shared.clone();
    let groups = sites.clone();
    // Everything slow first (staging the files), for every site; then every site's start back
    // to back (renames), on the one real-time starter thread.
    let result = super::starter::run(move || {
        groups.iter().try_for_each(|(site, ids)| s.site(*site).backend.prepare_start(ids))?;
        groups.iter().try_for_each(|(site, ids)| s.site(*site).backend.start(ids))
    })
    .await;
    match result {
        Some(Ok(())) => tracing::debug!(
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

/// A launch whose components were not all ready in time: 003's claiming failure. The
/// components that are not ready are cancelled (a held or pending one never runs its program)
/// and given back to the core as rejected claims, so the job goes back to placement and the
/// others of the launch are killed with it. It is a soft error of a site only when that site
/// does not answer (its controller is down): a component that merely waits in a busy LRM's
/// queue is not the site's fault.
async fn claim_timed_out(shared: &Arc<Shared>, job: u64, attempt: u32, comps: &[(u32, SiteId, String)], not_ready: Vec<(SiteId, String)>) {
    let s = shared.clone();
    let sites: Vec<SiteId> = not_ready.iter().map(|(site, _)| *site).collect();
    let down: Vec<SiteId> = tokio::task::spawn_blocking(move || {
        let mut down: Vec<SiteId> = Vec::new();
        for site in sites {
            let h = s.site(site);
            if !down.contains(&site) && matches!(h.backend.processors(&h.name), Err(BackendError::Site { .. })) {
                down.push(site);
            }
        }
        down
    })
    .await
    .unwrap_or_default();
    tracing::warn!(job, attempt, waiting = ?not_ready, ?down, "components not allocated in time: the claim failed; cancelling the launch");
    let mut guard = shared.lock();
    let st = &mut *guard;
    let mut done = Vec::new();
    for (site, id) in not_ready {
        let Some(&(i, _, _)) = comps.iter().find(|(_, _, x)| *x == id) else {
            continue;
        };
        let current = st
            .exec
            .get(&(job, i))
            .is_some_and(|e| e.attempt == attempt && e.lrm_id.as_deref() == Some(id.as_str()));
        if !current {
            continue;
        }
        let claim = st.exec.remove(&(job, i)).and_then(|e| e.claim);
        shared.lrm.send(LrmOp::Kill {
            site,
            lrm_id: Some(id),
            claim,
        });
        done.push((job, attempt, i));
        st.core.claim_rejected(now_ms(), JobId(job), i, down.contains(&site));
    }
    if !done.is_empty() {
        shared.store.enqueue(store::launches_done_op(done));
    }
    process_actions(shared, st);
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
