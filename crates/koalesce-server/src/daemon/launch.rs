//! Launching a job's components, off the state lock: the launch intent made durable, the
//! components' supervisors spawned at their sites, the start barrier (every component checked
//! in and held before any runs), and a claim that times out at the barrier.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use koalesce_core::state::ComponentState;
use koalesce_core::{ComponentOutcome, JobId, SiteId};

use super::lrm::{Launch, LrmOp};
use super::{process_actions, Shared, State};
use crate::backend::{BackendError, ComponentSubmission};
use crate::jobdesc::Runner;
use crate::store::{self, LaunchRow};
use crate::{now_ms, supervise, transfer};

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
                early_signal: meta.desc.early_signal(),
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
        reason: Box<crate::transfer::ReplicaError>,
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
                reason: Box::new(reason),
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

pub(super) async fn launch(shared: Arc<Shared>, l: Launch) {
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

/// How long after its submission a released launch (see [`start_at_barrier`]) is first
/// checked for its check-in, and the longest pause between checks after that.
const RELEASED_FIRST_CHECK: Duration = Duration::from_millis(20);
const RELEASED_MAX_CHECK: Duration = Duration::from_millis(250);

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
    // A launch that waits for its `go` is checked often (its programs start only then); one
    // released before (a single component, already running) only for its check-in, which
    // nothing waits for but the claim timeout: seldom, after a first pause (most such
    // components have ended by then, and the loop stops at once). Each check takes the state
    // lock and a blocking call.
    let (mut delay, max_delay) = if released {
        (RELEASED_FIRST_CHECK, RELEASED_MAX_CHECK)
    } else {
        (Duration::from_millis(1), Duration::from_millis(10))
    };
    if released {
        tokio::time::sleep(delay).await;
    }
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
        delay = (delay * 2).min(max_delay);
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
