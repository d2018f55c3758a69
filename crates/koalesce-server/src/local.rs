//! The local executor: one site on this machine with a number of processor slots. Components
//! run as real processes under a supervisor (see [`crate::supervise`]), held at its start
//! barrier from `submit` until `start`; a component's LRM id is its directory, so it can be
//! found again after a daemon restart. The site never runs more processor slots than it has:
//! every component runs inside a claim, and claims are refused beyond the site's slots; the
//! slots of a component are given back only once every process of it is gone (its control
//! group is empty), even when it was cancelled.
//!
//! Supervisors start with a clean environment (the job's variables only) and are told how to
//! confine the program ([`JobSandbox`], see [`crate::sandbox`]). A supervisor that cannot be
//! started because this machine is short of descriptors or processes is
//! [`BackendError::Exhausted`], not a fault of the site.
//!
//! A site may offer advance reservations (`reservations = true` in its config): a reservation
//! sets processors aside for a window `[start, end)`. As in a real LRM's availability profile,
//! a plain claim holds its processors until released (for all the scheduler knows, forever),
//! so a reservation is granted only if the slots not held by claims cover it and every other
//! reservation overlapping its window, and a plain claim only if it leaves every future
//! reservation its processors. A reservation is claimed with [`Reservations::claim_reserved`]
//! and expires, unclaimed, at its end.

use std::collections::HashMap;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use crate::backend::{
    Backend, BackendError, BarrierState, ComponentSubmission, LrmState, ProcessorCount, ReservationRequest, Reservations,
};
use crate::cgroup::Cgroup;
use crate::supervise::{self, SupervisorRecord};
use crate::supervised;
pub use crate::supervisor_cmd::{JobSandbox, SupervisorCommand};

/// Whether an error starting a process means this machine is short of something for now.
fn exhausted(e: &std::io::Error) -> bool {
    use nix::errno::Errno;
    matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(Errno::EMFILE | Errno::ENFILE | Errno::EAGAIN | Errno::ENOMEM | Errno::ENOSPC)
    )
}

/// Whether no process of the component in `dir` is left. With a control group: it is empty
/// (leftovers of a supervisor that died are killed here); without: its supervisor is gone.
fn component_gone(dir: &Path) -> bool {
    let alive =
        supervise::read_json::<SupervisorRecord>(&dir.join(supervise::SUPERVISOR_FILE)).is_some_and(|r| supervise::supervisor_alive(&r));
    match Cgroup::recorded(dir) {
        Some(cg) if cg.is_empty() => {
            if !alive {
                cg.remove();
            }
            true
        }
        Some(cg) => {
            if !alive {
                cg.kill_all();
            }
            false
        }
        None => !alive || dir.join(supervise::EXIT_FILE).exists(),
    }
}

#[derive(Debug, Clone, Copy)]
struct Reservation {
    processors: u32,
    start: u64,
    end: u64,
}

#[derive(Default)]
struct Inner {
    /// claim id → processors
    claims: HashMap<String, u32>,
    /// claim id → the component directory running in it
    claim_dirs: HashMap<String, String>,
    /// Released claims whose component still has processes: (processors, dir). Their slots
    /// stay used until the processes are gone.
    draining: Vec<(u32, String)>,
    used: u32,
    next_id: u64,
    /// Granted, unclaimed reservations by id.
    reservations: HashMap<String, Reservation>,
    /// Supervisors this instance spawned and that have not exited yet (reaped by `status`,
    /// no thread per supervisor).
    spawned: HashMap<String, std::process::Child>,
    /// High-water mark of used slots.
    peak: u32,
}

impl Inner {
    /// Gives back the slots of drained components (every process gone).
    fn drain(&mut self) {
        let mut i = 0;
        while i < self.draining.len() {
            if component_gone(Path::new(&self.draining[i].1)) {
                let (p, _) = self.draining.swap_remove(i);
                self.used = self.used.saturating_sub(p);
            } else {
                i += 1;
            }
        }
    }

    /// Reaps supervisors that exited (no zombies).
    fn reap(&mut self) {
        self.spawned.retain(|_, child| matches!(child.try_wait(), Ok(None)));
    }

    /// Whether the supervisor spawned for `id` is still starting or running.
    fn starting(&mut self, id: &str) -> bool {
        self.spawned.get_mut(id).is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Drops reservations that ended unclaimed.
    fn expire(&mut self, now: u64) {
        self.reservations.retain(|_, r| r.end > now);
    }

    /// Most processors reserved at once at any instant in `[from, to)`.
    fn max_reserved(&self, from: u64, to: u64) -> u32 {
        // The sum is largest at some reservation's start (or at `from`).
        let points = std::iter::once(from).chain(self.reservations.values().map(|r| r.start).filter(|&s| s > from && s < to));
        points
            .map(|t| {
                self.reservations
                    .values()
                    .filter(|r| r.start <= t && t < r.end)
                    .map(|r| r.processors)
                    .sum::<u32>()
            })
            .max()
            .unwrap_or(0)
    }

    fn take(&mut self, processors: u32) -> String {
        self.next_id += 1;
        let id = format!("claim-{}", self.next_id);
        self.claims.insert(id.clone(), processors);
        self.used += processors;
        self.peak = self.peak.max(self.used);
        id
    }
}

/// One site of the local executor.
pub struct LocalBackend {
    site: String,
    slots: u32,
    reservations: bool,
    supervisor: SupervisorCommand,
    sandbox: JobSandbox,
    inner: Mutex<Inner>,
}

impl LocalBackend {
    /// Site `site` with `slots` processor slots; `reservations`: whether it grants advance
    /// reservations. Components are confined by the default sandbox until
    /// [`LocalBackend::with_sandbox`].
    pub fn new(site: &str, slots: u32, reservations: bool, supervisor: SupervisorCommand) -> Self {
        LocalBackend {
            site: site.to_string(),
            slots,
            reservations,
            supervisor,
            sandbox: JobSandbox::default(),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Confines components as `sandbox` says.
    pub fn with_sandbox(mut self, sandbox: JobSandbox) -> Self {
        self.sandbox = sandbox;
        self
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        // The bookkeeping stays consistent even if a holder panicked (every update is one
        // statement group that cannot panic half-way).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn check_site(&self, site: &str) -> Result<(), BackendError> {
        if site == self.site {
            Ok(())
        } else {
            Err(BackendError::UnknownSite(site.into()))
        }
    }

    /// Most slots ever in use at once.
    pub fn peak_used(&self) -> u32 {
        self.inner().peak
    }

    fn spawn_supervisor(&self, sub: &ComponentSubmission) -> std::io::Result<std::process::Child> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&sub.dir)?;
        let mut cmd = Command::new(&self.supervisor.program);
        cmd.args(self.supervisor.arguments(&self.sandbox, sub))
            // The job's environment only, never the daemon's.
            .env_clear()
            .envs(&sub.environment)
            .current_dir(&sub.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(sub.dir.join("supervisor.log"))?);
        // A process group of its own: the daemon's death (even kill -9 of its process group)
        // does not reach the supervisor or the component, and cancel kills the supervisor's
        // whole group. A process group (not setsid in a pre_exec hook) keeps the spawn on
        // posix_spawn: a fork of the daemon copies its page tables, which made launching the
        // daemon's most expensive work (bench e2e). The supervisor then leaves the daemon's
        // controlling terminal (see `supervise.rs`).
        cmd.process_group(0);
        cmd.spawn()
    }

    fn busy(&self, wanted: u32, idle: u32) -> BackendError {
        BackendError::Busy {
            site: self.site.clone(),
            wanted,
            idle,
        }
    }

    /// Processors a plain claim may take now: free slots, less what future reservations need.
    fn claimable(&self, inner: &Inner, now: u64) -> u32 {
        self.slots.saturating_sub(inner.used + inner.max_reserved(now, u64::MAX))
    }
}

impl Backend for LocalBackend {
    fn kind(&self) -> &'static str {
        "local"
    }

    fn sites(&self) -> Vec<String> {
        vec![self.site.clone()]
    }

    fn processors(&self, site: &str) -> Result<ProcessorCount, BackendError> {
        self.check_site(site)?;
        let mut inner = self.inner();
        inner.expire(crate::now_ms());
        inner.drain();
        let idle = self.claimable(&inner, crate::now_ms());
        Ok(ProcessorCount {
            total: self.slots,
            idle,
            used: inner.used,
        })
    }

    fn claim(&self, site: &str, processors: u32) -> Result<String, BackendError> {
        self.check_site(site)?;
        let now = crate::now_ms();
        let mut inner = self.inner();
        inner.expire(now);
        inner.drain();
        let idle = self.claimable(&inner, now);
        if processors > idle {
            return Err(self.busy(processors, idle));
        }
        Ok(inner.take(processors))
    }

    fn release(&self, claim: &str) {
        let mut inner = self.inner();
        if let Some(p) = inner.claims.remove(claim) {
            match inner.claim_dirs.remove(claim) {
                // Its processes may still be dying (a cancel): the slots stay used until
                // they are gone.
                Some(dir) if !component_gone(Path::new(&dir)) => inner.draining.push((p, dir)),
                _ => inner.used = inner.used.saturating_sub(p),
            }
        }
    }

    fn submit(&self, sub: &ComponentSubmission) -> Result<String, BackendError> {
        let site_err = |reason: String| BackendError::Site {
            site: sub.site.clone(),
            reason,
        };
        self.check_site(&sub.site)?;
        match self.inner().claims.get(&sub.claim) {
            Some(&p) if p >= sub.processors => {}
            _ => {
                return Err(site_err(format!(
                    "claim '{}' does not hold {} processors here",
                    sub.claim, sub.processors
                )))
            }
        }
        let id = sub.dir.to_string_lossy().into_owned();
        let child = self.spawn_supervisor(sub).map_err(|e| {
            let reason = format!("cannot start supervisor: {e}");
            if exhausted(&e) {
                BackendError::Exhausted {
                    site: sub.site.clone(),
                    reason,
                }
            } else {
                site_err(reason)
            }
        })?;
        let mut inner = self.inner();
        inner.spawned.insert(id.clone(), child);
        inner.claim_dirs.insert(sub.claim.clone(), id.clone());
        Ok(id)
    }

    fn ready(&self, ids: &[String]) -> Vec<(String, bool)> {
        ids.iter().map(|id| (id.clone(), supervised::is_ready(Path::new(id)))).collect()
    }

    fn start(&self, ids: &[String]) -> Result<(), BackendError> {
        let site_err = |reason: String| BackendError::Site {
            site: self.site.clone(),
            reason,
        };
        let not_ready: Vec<&String> = ids.iter().filter(|id| !supervised::is_ready(Path::new(id))).collect();
        if !not_ready.is_empty() {
            return Err(site_err(format!("not ready to start: {not_ready:?}")));
        }
        for id in ids {
            crate::supervise::release(Path::new(id)).map_err(|e| site_err(format!("cannot start {id}: {e}")))?;
        }
        Ok(())
    }

    fn status(&self, ids: &[String]) -> Vec<(String, LrmState)> {
        let starting: Vec<bool> = {
            let mut inner = self.inner();
            ids.iter().map(|id| inner.starting(id)).collect()
        };
        let out: Vec<(String, LrmState)> = ids
            .iter()
            .zip(starting)
            .map(|(id, starting)| (id.clone(), supervised::state_of(Path::new(id), starting)))
            .collect();
        let mut inner = self.inner();
        inner.reap();
        inner.drain();
        out
    }

    fn cancel(&self, id: &str) -> Result<(), BackendError> {
        supervised::kill(Path::new(id));
        Ok(())
    }

    fn adopt(&self, id: &str, site: &str, processors: u32) -> Result<String, BackendError> {
        self.check_site(site)?;
        // The component holds its processors already: no check against the free slots.
        let mut inner = self.inner();
        let claim = inner.take(processors);
        inner.claim_dirs.insert(claim.clone(), id.to_string());
        Ok(claim)
    }

    fn barrier_state(&self, id: &str) -> Result<BarrierState, BackendError> {
        supervised::barrier_state(Path::new(id)).map_err(|e| BackendError::Site {
            site: self.site.clone(),
            reason: format!("cannot read the start barrier of {id}: {e}"),
        })
    }

    fn abort_held(&self, id: &str) -> Result<(), BackendError> {
        crate::supervise::abort(Path::new(id)).map_err(|e| BackendError::Site {
            site: self.site.clone(),
            reason: format!("cannot abort {id}: {e}"),
        })
    }

    fn reservations(&self) -> Option<&dyn Reservations> {
        self.reservations.then_some(self as &dyn Reservations)
    }
}

impl Reservations for LocalBackend {
    fn reserve(&self, req: &ReservationRequest) -> Result<String, BackendError> {
        self.check_site(&req.site)?;
        let now = crate::now_ms();
        let mut inner = self.inner();
        inner.expire(now);
        let (start, end) = (req.start_ms.max(now), req.start_ms.max(now).saturating_add(req.duration_ms.max(1)));
        let free = self.slots.saturating_sub(inner.used + inner.max_reserved(start, end));
        if req.processors > free {
            return Err(self.busy(req.processors, free));
        }
        inner.next_id += 1;
        let id = format!("resv-{}", inner.next_id);
        inner.reservations.insert(
            id.clone(),
            Reservation {
                processors: req.processors,
                start,
                end,
            },
        );
        Ok(id)
    }

    fn claim_reserved(&self, reservation: &str) -> Result<String, BackendError> {
        let mut inner = self.inner();
        inner.expire(crate::now_ms());
        let Some(r) = inner.reservations.remove(reservation) else {
            return Err(BackendError::Site {
                site: self.site.clone(),
                reason: format!("reservation '{reservation}' does not exist (expired or cancelled)"),
            });
        };
        Ok(inner.take(r.processors))
    }

    fn cancel_reservation(&self, id: &str) -> Result<(), BackendError> {
        self.inner().reservations.remove(id);
        Ok(())
    }
}

/// The storage and job directories of a site under the data dir (created).
#[derive(Debug, Clone)]
pub struct SitePaths {
    /// Replicas and staged inputs of the site.
    pub storage: PathBuf,
    /// Component directories: `jobs/<job>/a<attempt>-c<component>`.
    pub jobs: PathBuf,
}

impl SitePaths {
    pub fn create(data_dir: &Path, site: &str) -> std::io::Result<Self> {
        let base = data_dir.join("sites").join(site);
        let paths = SitePaths {
            storage: base.join("storage"),
            jobs: base.join("jobs"),
        };
        std::fs::create_dir_all(&paths.storage)?;
        std::fs::create_dir_all(&paths.jobs)?;
        Ok(paths)
    }
}
