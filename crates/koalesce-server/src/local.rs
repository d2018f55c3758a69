//! The local executor: one site on this machine with a number of processor slots. Components
//! run as real processes under a supervisor (see [`crate::supervise`]), held at its start
//! barrier from `submit` until `start`; a component's LRM id is its directory, so it can be
//! found again after a daemon restart. The site never runs more processor slots than it has:
//! every component runs inside a claim, and claims are refused beyond the site's slots; the
//! slots of a component are given back only once every process of it is gone (its control
//! group is empty), even when it was cancelled.
//!
//! Supervisors start with a clean environment (the job's variables only) and are told how to
//! confine the program ([`JobSandbox`], see [`crate::sandbox`]). When the supervisor command
//! has a launcher mode (`koalesce supervise-launcher`), a resident launcher started at the
//! site's first launch forks them ([`crate::launcher`]): the same supervisor without an
//! exec of the server binary per component. A supervisor that cannot be
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

use crate::backend::ReservationMove;
use crate::backend::{
    Backend, BackendError, BarrierState, ComponentSubmission, LrmState, ProcessorCount, ReservationRequest, Reservations, WindowAnswer,
    WindowRequest,
};
use crate::cgroup::Cgroup;
use crate::supervise::{self, SupervisorRecord};
use crate::supervised;
pub use crate::supervisor_cmd::{JobSandbox, SupervisorCommand};
use koalesce_core::broker::{Profile, ReservationId, ReservationReply, ReservationRequest as CoreRequest, ReservationTable, FOREVER};

/// Whether an error starting a process means this machine is short of something for now
/// (also when the resident launcher's fork met it).
fn exhausted(e: &std::io::Error) -> bool {
    use nix::errno::Errno;
    matches!(
        crate::launcher::errno_of(e).map(Errno::from_raw),
        Some(Errno::EMFILE | Errno::ENFILE | Errno::EAGAIN | Errno::ENOMEM | Errno::ENOSPC)
    )
}

/// Whether no process of the component in `dir` is left. With a control group: it is empty
/// (leftovers of a supervisor that died are killed here); without: its supervisor is gone.
fn component_gone(dir: &Path) -> bool {
    let rec = supervise::read_json::<SupervisorRecord>(&dir.join(supervise::SUPERVISOR_FILE));
    let alive = rec.as_ref().is_some_and(supervise::supervisor_alive);
    match Cgroup::of_record(rec.as_ref(), dir) {
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

/// A supervisor this instance started.
enum Spawned {
    /// Spawned by the daemon (its child, to reap).
    Child(std::process::Child),
    /// Forked by the resident launcher (which reaps it).
    Forked(crate::launcher::Launched),
}

impl Spawned {
    fn alive(&mut self) -> bool {
        match self {
            Spawned::Child(c) => matches!(c.try_wait(), Ok(None)),
            Spawned::Forked(l) => supervise::proc_start_time(l.pid) == Some(l.proc_start),
        }
    }
}

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
    /// Granted, unclaimed reservations (the core's table: it answers requests and moves
    /// flexible reservations); a reservation's id here is `resv-<table id>`.
    table: ReservationTable,
    /// Flexible reservations the table moved, not yet taken by [`Reservations::take_moves`].
    moved: Vec<ReservationMove>,
    /// Supervisors this instance started and that may not have made their record yet
    /// (spawned ones are reaped by `status`, no thread per supervisor).
    spawned: HashMap<String, Spawned>,
    /// High-water mark of used slots.
    peak: u32,
    /// Component id → its launch's nonce (from `submit` or `adopt`): records without it are
    /// not believed.
    nonces: HashMap<String, String>,
}

impl Inner {
    fn nonce(&self, id: &str) -> String {
        self.nonces.get(id).cloned().unwrap_or_default()
    }
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

    /// Reaps supervisors that exited (no zombies); forgets forked ones whose component has
    /// a state of its own (`settled`: not pending), so that only those starting are looked at.
    fn reap(&mut self, settled: &[&str]) {
        for id in settled {
            if matches!(self.spawned.get(*id), Some(Spawned::Forked(_))) {
                self.spawned.remove(*id);
            }
        }
        self.spawned.retain(|_, s| match s {
            Spawned::Child(c) => matches!(c.try_wait(), Ok(None)),
            Spawned::Forked(_) => true,
        });
    }

    /// Whether the supervisor started for `id` is still starting or running.
    fn starting(&mut self, id: &str) -> bool {
        self.spawned.get_mut(id).is_some_and(Spawned::alive)
    }

    fn new(slots: u32) -> Self {
        Inner {
            claims: HashMap::new(),
            claim_dirs: HashMap::new(),
            draining: Vec::new(),
            used: 0,
            next_id: 0,
            table: ReservationTable::new(slots),
            moved: Vec::new(),
            spawned: HashMap::new(),
            peak: 0,
            nonces: HashMap::new(),
        }
    }

    /// What holds processors besides the reservations: every claim, until released (for all
    /// the scheduler knows, forever).
    fn others(&self, now: u64) -> Profile {
        Profile::build(self.table.capacity(), now, [(now, FOREVER, self.used)])
    }

    /// Most processors reserved at once at any instant in `[from, to)`.
    fn max_reserved(&self, from: u64, to: u64) -> u32 {
        self.table.reserved().max_used(from, to) as u32
    }

    /// Keeps the moves the table made, by reservation id.
    fn note_moves(&mut self) {
        for m in self.table.take_relocations() {
            if let Some(r) = self.table.get(m.id) {
                self.moved.push(ReservationMove {
                    id: backend_id(m.id),
                    start_ms: r.start,
                    end_ms: r.end,
                });
            }
        }
    }

    /// Drops reservations that ended unclaimed, gives back the slots of drained components,
    /// and moves flexible reservations earlier into room that freed up (001 §2.3).
    fn settle(&mut self, now: u64) {
        self.table.expire(now);
        self.drain();
        let others = self.others(now);
        self.table.advance(now, Some(&others));
        self.note_moves();
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
    /// Forks the supervisors when the supervisor command has a launcher mode.
    launcher: Option<crate::launcher::ResidentLauncher>,
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
            launcher: supervisor
                .launcher
                .as_ref()
                .map(|args| crate::launcher::ResidentLauncher::new(&supervisor.program, args)),
            supervisor,
            sandbox: JobSandbox::default(),
            inner: Mutex::new(Inner::new(slots)),
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

    /// The resident launcher's pid, when one runs (started at the first launch).
    pub fn launcher_pid(&self) -> Option<u32> {
        self.launcher.as_ref().and_then(|l| l.pid())
    }

    fn spawn_supervisor(&self, sub: &ComponentSubmission) -> std::io::Result<Spawned> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&sub.dir)?;
        // The site's shared `go` marker: the early `go` of its next solo launches is a link of
        // it, not a file of its own (see `supervise::release`).
        let _ = supervise::go_marker(&sub.dir);
        if let Some(launcher) = &self.launcher {
            // The same options the command line would carry, and the job's environment
            // only; the supervisor forked makes `supervisor.log` only if it has something
            // to say.
            let req = crate::launcher::request(&self.sandbox.options(sub), &sub.environment);
            return launcher.launch(&req).map(Spawned::Forked);
        }
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
        cmd.spawn().map(Spawned::Child)
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
        let now = crate::now_ms();
        let mut inner = self.inner();
        inner.settle(now);
        let idle = self.claimable(&inner, now);
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
        inner.table.expire(now);
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
            let dir = inner.claim_dirs.remove(claim);
            if let Some(d) = &dir {
                inner.nonces.remove(d);
            }
            match dir {
                // Its processes may still be dying (a cancel): the slots stay used until
                // they are gone.
                Some(dir) if !component_gone(Path::new(&dir)) => inner.draining.push((p, dir)),
                _ => inner.used = inner.used.saturating_sub(p),
            }
            // Room for flexible reservations waiting for it.
            inner.settle(crate::now_ms());
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
        inner.nonces.insert(id.clone(), sub.nonce.clone());
        Ok(id)
    }

    fn ready(&self, ids: &[String]) -> Vec<(String, bool)> {
        let nonces: Vec<String> = {
            let inner = self.inner();
            ids.iter().map(|id| inner.nonce(id)).collect()
        };
        ids.iter()
            .zip(nonces)
            .map(|(id, n)| (id.clone(), supervised::is_ready(Path::new(id), &n)))
            .collect()
    }

    fn start(&self, ids: &[String]) -> Result<(), BackendError> {
        let site_err = |reason: String| BackendError::Site {
            site: self.site.clone(),
            reason,
        };
        let not_ready: Vec<&String> = {
            let inner = self.inner();
            ids.iter()
                .filter(|id| !supervised::can_start(Path::new(id), &inner.nonce(id)))
                .collect()
        };
        if !not_ready.is_empty() {
            return Err(site_err(format!("not ready to start: {not_ready:?}")));
        }
        for id in ids {
            crate::supervise::release(Path::new(id)).map_err(|e| site_err(format!("cannot start {id}: {e}")))?;
        }
        Ok(())
    }

    fn status(&self, ids: &[String]) -> Vec<(String, LrmState)> {
        let known: Vec<(bool, String)> = {
            let mut inner = self.inner();
            ids.iter().map(|id| (inner.starting(id), inner.nonce(id))).collect()
        };
        let out: Vec<(String, LrmState)> = ids
            .iter()
            .zip(known)
            .map(|(id, (starting, nonce))| (id.clone(), supervised::state_of(Path::new(id), &nonce, starting)))
            .collect();
        let settled: Vec<&str> = out
            .iter()
            .filter(|(_, s)| !matches!(s, LrmState::Pending))
            .map(|(id, _)| id.as_str())
            .collect();
        let mut inner = self.inner();
        inner.reap(&settled);
        inner.drain();
        out
    }

    fn cancel(&self, id: &str) -> Result<(), BackendError> {
        supervised::kill(Path::new(id));
        Ok(())
    }

    fn adopt(&self, id: &str, site: &str, processors: u32, nonce: &str) -> Result<String, BackendError> {
        self.check_site(site)?;
        // The component holds its processors already: no check against the free slots.
        let mut inner = self.inner();
        let claim = inner.take(processors);
        inner.claim_dirs.insert(claim.clone(), id.to_string());
        inner.nonces.insert(id.to_string(), nonce.to_string());
        Ok(claim)
    }

    fn barrier_state(&self, id: &str, nonce: &str) -> Result<BarrierState, BackendError> {
        supervised::barrier_state(Path::new(id), nonce).map_err(|e| BackendError::Site {
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

/// The site's id of a reservation of the table.
fn backend_id(id: ReservationId) -> String {
    format!("resv-{}", id.0)
}

/// The table's id of a reservation id given out by [`backend_id`].
fn table_id(id: &str) -> Option<ReservationId> {
    id.strip_prefix("resv-")?.parse().ok().map(ReservationId)
}

impl Reservations for LocalBackend {
    /// The core's reservation table decides (see [`koalesce_core::broker::reservations`]): the
    /// earliest start in the window where the processors are free of claims (held until
    /// released: their end is unknown) and of other reservations, moving flexible reservations
    /// inside their windows if that makes room; else `T_next`, the earliest later such start.
    fn reserve_window(&self, req: &WindowRequest) -> Result<WindowAnswer, BackendError> {
        self.check_site(&req.site)?;
        let now = crate::now_ms();
        let mut inner = self.inner();
        inner.table.expire(now);
        inner.drain();
        let free_ever = self.slots.saturating_sub(inner.used);
        if req.processors > free_ever {
            return Ok(WindowAnswer::Rejected {
                t_next_ms: None,
                reason: format!(
                    "site '{}' has {} processor(s), {} of them claimed until released: {} cannot be reserved",
                    self.site, self.slots, inner.used, req.processors
                ),
            });
        }
        let earliest = req.earliest_ms.max(now);
        // A window whose latest start passed while the request travelled (milliseconds: the
        // API checks windows against its own clock) starts now.
        let request = CoreRequest {
            processors: req.processors,
            duration_ms: req.duration_ms.max(1),
            earliest_start: req.earliest_ms.min(earliest),
            latest_start: req.latest_ms.max(earliest),
            flexible: req.flexible,
        };
        let others = inner.others(now);
        let reply = inner.table.request(now, &request, Some(&others));
        inner.note_moves();
        Ok(match reply {
            ReservationReply::Granted { id, start } => WindowAnswer::Granted {
                id: backend_id(id),
                start_ms: start,
            },
            ReservationReply::RejectedNext { t_next } => WindowAnswer::Rejected {
                t_next_ms: Some(t_next),
                reason: format!("the processors are reserved during the whole window; free from {t_next}"),
            },
            ReservationReply::Rejected => WindowAnswer::Rejected {
                t_next_ms: None,
                reason: "no start after the window has the processors free".into(),
            },
        })
    }

    fn reserve(&self, req: &ReservationRequest) -> Result<String, BackendError> {
        let mut inner = self.inner();
        self.reserve_locked(&mut inner, req)
    }

    /// All of them under one lock (the LRM worker's batch).
    fn reserve_many(&self, reqs: &[ReservationRequest]) -> Vec<Result<String, BackendError>> {
        let mut inner = self.inner();
        reqs.iter().map(|r| self.reserve_locked(&mut inner, r)).collect()
    }

    fn moves_flexible(&self) -> bool {
        true
    }

    fn take_moves(&self) -> Vec<ReservationMove> {
        std::mem::take(&mut self.inner().moved)
    }

    /// Puts the reservation back into the table at its (possibly moved) start, with its window
    /// and flexibility.
    fn rebook(&self, req: &WindowRequest, start_ms: u64) -> Result<WindowAnswer, BackendError> {
        self.check_site(&req.site)?;
        let now = crate::now_ms();
        let mut inner = self.inner();
        inner.table.expire(now);
        inner.drain();
        let r = koalesce_core::broker::Reservation {
            id: ReservationId(0),
            processors: req.processors,
            start: start_ms,
            end: start_ms.saturating_add(req.duration_ms.max(1)),
            earliest_start: req.earliest_ms,
            latest_start: req.latest_ms,
            flexible: req.flexible,
        };
        let others = inner.others(now);
        Ok(match inner.table.restore(now, &r, Some(&others)) {
            Some(id) => WindowAnswer::Granted {
                id: backend_id(id),
                start_ms: start_ms.max(now),
            },
            None => WindowAnswer::Rejected {
                t_next_ms: None,
                reason: format!("its processors are no longer free from {start_ms}"),
            },
        })
    }

    /// Claims the reservation's processors, from its start on (a flexible reservation moved
    /// later cannot be claimed at its old start).
    fn claim_reserved(&self, reservation: &str) -> Result<String, BackendError> {
        let now = crate::now_ms();
        let mut inner = self.inner();
        inner.table.expire(now);
        let gone = || BackendError::Site {
            site: self.site.clone(),
            reason: format!("reservation '{reservation}' does not exist (expired or cancelled)"),
        };
        let id = table_id(reservation).ok_or_else(gone)?;
        let r = *inner.table.get(id).ok_or_else(gone)?;
        if r.start > now + CLAIM_EARLY_MS {
            return Err(BackendError::Site {
                site: self.site.clone(),
                reason: format!("reservation '{reservation}' starts at {}, not yet", r.start),
            });
        }
        inner.table.release(id);
        Ok(inner.take(r.processors))
    }

    fn cancel_reservation(&self, id: &str) -> Result<(), BackendError> {
        let mut inner = self.inner();
        if let Some(id) = table_id(id) {
            inner.table.release(id);
        }
        inner.settle(crate::now_ms());
        Ok(())
    }
}

/// How long before its start a reservation may be claimed (the scheduler's timer and the
/// LRM worker see slightly different instants).
const CLAIM_EARLY_MS: u64 = 1_000;

impl LocalBackend {
    /// A reservation at exactly `req.start_ms` (or now, if that passed), under the lock.
    fn reserve_locked(&self, inner: &mut Inner, req: &ReservationRequest) -> Result<String, BackendError> {
        self.check_site(&req.site)?;
        let now = crate::now_ms();
        inner.table.expire(now);
        let start = req.start_ms.max(now);
        let others = inner.others(now);
        let reply = inner
            .table
            .request(now, &CoreRequest::at(req.processors, start, req.duration_ms.max(1)), Some(&others));
        inner.note_moves();
        match reply {
            ReservationReply::Granted { id, .. } => Ok(backend_id(id)),
            _ => {
                let end = start.saturating_add(req.duration_ms.max(1));
                let free = self.slots.saturating_sub(inner.used + inner.max_reserved(start, end));
                Err(self.busy(req.processors, free))
            }
        }
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
        spread_new_directories(&paths.jobs);
        Ok(paths)
    }
}

/// Marks `dir` as the top of a directory hierarchy (`FS_TOPDIR_FL`, what `chattr +T` sets), so
/// that ext2/3/4 place each new directory in it (every job's `jobs/<job>`) in a block group of
/// its own choosing (the Orlov allocator's spreading) instead of next to `dir`, and the files
/// and directories made in it follow. Without it every launch's inodes land in the block groups
/// where the previous launches' were: on an ext4 without a journal, where each new inode skips
/// one by one the inodes of its group deleted in the last one to six minutes, removing a few
/// thousand old launch directories made every new launch slower for minutes (docs/operations.md,
/// "What a launch costs in files"). Best effort: file systems without the flag refuse it, and
/// nothing else depends on it.
pub(crate) fn spread_new_directories(dir: &Path) -> bool {
    use rustix::fs::{ioctl_getflags, ioctl_setflags, IFlags};
    let Ok(f) = std::fs::File::open(dir) else { return false };
    match ioctl_getflags(&f) {
        Ok(flags) if flags.contains(IFlags::TOPDIR) => true,
        Ok(flags) => ioctl_setflags(&f, flags | IFlags::TOPDIR).is_ok(),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests;
