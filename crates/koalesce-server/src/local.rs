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

use crate::backend::{
    Backend, BackendError, BarrierState, ComponentSubmission, LrmState, ProcessorCount, ReservationRequest, Reservations, WindowAnswer,
    WindowRequest,
};
use crate::cgroup::Cgroup;
use crate::supervise::{self, SupervisorRecord};
use crate::supervised;
pub use crate::supervisor_cmd::{JobSandbox, SupervisorCommand};

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

    /// Drops reservations that ended unclaimed.
    fn expire(&mut self, now: u64) {
        self.reservations.retain(|_, r| r.end > now);
    }

    /// Most processors reserved at once at any instant in `[from, to)`: a sweep over the
    /// starts and ends of the reservations overlapping it (ends first at equal times: a
    /// reservation's end is exclusive), O(n log n) in the reservations.
    fn max_reserved(&self, from: u64, to: u64) -> u32 {
        let mut events: Vec<(u64, i64)> = Vec::new();
        for r in self.reservations.values().filter(|r| r.start < to && r.end > from) {
            events.push((r.start.max(from), i64::from(r.processors)));
            events.push((r.end, -i64::from(r.processors)));
        }
        events.sort_unstable();
        let (mut now, mut most) = (0i64, 0i64);
        for (_, delta) in events {
            now += delta;
            most = most.max(now);
        }
        most as u32
    }

    /// Records a granted reservation; returns its id.
    fn add_reservation(&mut self, processors: u32, start: u64, end: u64) -> String {
        self.next_id += 1;
        let id = format!("resv-{}", self.next_id);
        self.reservations.insert(id.clone(), Reservation { processors, start, end });
        id
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

    /// The resident launcher's pid, when one runs (started at the first launch).
    pub fn launcher_pid(&self) -> Option<u32> {
        self.launcher.as_ref().and_then(|l| l.pid())
    }

    fn spawn_supervisor(&self, sub: &ComponentSubmission) -> std::io::Result<Spawned> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&sub.dir)?;
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

impl Reservations for LocalBackend {
    /// The earliest start in the window where the processors are free of claims (held until
    /// released: their end is unknown) and of other reservations; else `T_next`, the earliest
    /// later such start. The free processors change only where a reservation starts or ends,
    /// so the earliest feasible start is the window's first instant or a reservation's end.
    fn reserve_window(&self, req: &WindowRequest) -> Result<WindowAnswer, BackendError> {
        self.check_site(&req.site)?;
        let now = crate::now_ms();
        let mut inner = self.inner();
        inner.expire(now);
        inner.drain();
        let duration = req.duration_ms.max(1);
        let earliest = req.earliest_ms.max(now);
        let never = |why: String| {
            Ok(WindowAnswer::Rejected {
                t_next_ms: None,
                reason: why,
            })
        };
        let free_ever = self.slots.saturating_sub(inner.used);
        if req.processors > free_ever {
            return never(format!(
                "site '{}' has {} processor(s), {} of them claimed until released: {} cannot be reserved",
                self.site, self.slots, inner.used, req.processors
            ));
        }
        let mut starts: Vec<u64> = std::iter::once(earliest)
            .chain(inner.reservations.values().map(|r| r.end).filter(|&e| e > earliest))
            .collect();
        starts.sort_unstable();
        starts.dedup();
        let fits = |t: u64| req.processors + inner.max_reserved(t, t.saturating_add(duration)) <= free_ever;
        let Some(start) = starts.into_iter().find(|&t| fits(t)) else {
            return never("no start after the window has the processors free".into());
        };
        // A window whose latest start passed while the request travelled (milliseconds: the
        // API checks windows against its own clock) starts now.
        if start > req.latest_ms.max(earliest) {
            return Ok(WindowAnswer::Rejected {
                t_next_ms: Some(start),
                reason: format!("the processors are reserved during the whole window; free from {start}"),
            });
        }
        let id = inner.add_reservation(req.processors, start, start.saturating_add(duration));
        Ok(WindowAnswer::Granted { id, start_ms: start })
    }

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
        Ok(inner.add_reservation(req.processors, start, end))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The sweep equals the most reserved at any instant, checked at every millisecond of
    /// small random windows (xorshift-seeded, so the test is deterministic).
    #[test]
    fn max_reserved_is_the_peak_at_every_instant() {
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..300 {
            let mut inner = Inner::default();
            for i in 0..rnd(8) {
                let start = rnd(60);
                inner.reservations.insert(
                    format!("r{i}"),
                    Reservation {
                        processors: 1 + rnd(5) as u32,
                        start,
                        end: start + 1 + rnd(30),
                    },
                );
            }
            let from = rnd(70);
            let to = from + 1 + rnd(40);
            let brute = (from..to)
                .map(|t| {
                    inner
                        .reservations
                        .values()
                        .filter(|r| r.start <= t && t < r.end)
                        .map(|r| r.processors)
                        .sum::<u32>()
                })
                .max()
                .unwrap_or(0);
            assert_eq!(inner.max_reserved(from, to), brute, "round {round}: [{from}, {to})");
        }
    }
}
