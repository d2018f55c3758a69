//! The local executor: one site on this machine with a number of processor slots. Components
//! run as real processes under a supervisor (see [`crate::supervise`]), held at its start
//! barrier from `submit` until `start`; a component's LRM id is its directory, so it can be
//! found again after a daemon restart. The site never runs more processor slots than it has:
//! every component runs inside a claim, and claims are refused beyond the site's slots.
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::backend::{
    Backend, BackendError, BarrierState, ComponentSubmission, LrmState, ProcessorCount, ReservationRequest, Reservations,
};
use crate::supervised;

/// How to start a supervisor: `program args... --dir DIR -- EXE ARGS...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupervisorCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

impl SupervisorCommand {
    /// `koalesce supervise` from the running executable (what `koalesce server` uses).
    pub fn current_exe() -> std::io::Result<Self> {
        Ok(SupervisorCommand {
            program: std::env::current_exe()?,
            args: vec!["supervise".into()],
        })
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
    used: u32,
    next_id: u64,
    /// Granted, unclaimed reservations by id.
    reservations: HashMap<String, Reservation>,
    /// Supervisors this instance spawned: dir → exited flag.
    spawned: HashMap<String, Arc<AtomicBool>>,
    /// High-water mark of used slots.
    peak: u32,
}

impl Inner {
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
    inner: Mutex<Inner>,
}

impl LocalBackend {
    /// Site `site` with `slots` processor slots; `reservations`: whether it grants advance
    /// reservations.
    pub fn new(site: &str, slots: u32, reservations: bool, supervisor: SupervisorCommand) -> Self {
        LocalBackend {
            site: site.to_string(),
            slots,
            reservations,
            supervisor,
            inner: Mutex::new(Inner::default()),
        }
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
        std::fs::create_dir_all(&sub.dir)?;
        let mut cmd = Command::new(&self.supervisor.program);
        cmd.args(&self.supervisor.args)
            .arg("--dir")
            .arg(&sub.dir)
            .arg("--")
            .arg(&sub.executable)
            .args(&sub.arguments)
            .envs(&sub.environment)
            .current_dir(&sub.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(sub.dir.join("supervisor.log"))?);
        // A process group of its own: the daemon's death (even kill -9 of its process group)
        // does not reach the supervisor or the component, and cancel kills the supervisor's
        // whole group. A process group (not setsid in a pre_exec hook) keeps the spawn on
        // posix_spawn: a fork of the daemon copies its page tables, which made launching the
        // daemon's most expensive work (bench e2e).
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
        let idle = self.claimable(&inner, now);
        if processors > idle {
            return Err(self.busy(processors, idle));
        }
        Ok(inner.take(processors))
    }

    fn release(&self, claim: &str) {
        let mut inner = self.inner();
        if let Some(p) = inner.claims.remove(claim) {
            inner.used = inner.used.saturating_sub(p);
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
        let mut child = self
            .spawn_supervisor(sub)
            .map_err(|e| site_err(format!("cannot start supervisor: {e}")))?;
        let flag = Arc::new(AtomicBool::new(false));
        self.inner().spawned.insert(id.clone(), flag.clone());
        std::thread::Builder::new()
            .name("koalesce-reaper".into())
            .spawn(move || {
                let _ = child.wait();
                flag.store(true, Ordering::SeqCst);
            })
            .map_err(|e| site_err(format!("cannot start reaper: {e}")))?;
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
            let inner = self.inner();
            ids.iter()
                .map(|id| inner.spawned.get(id).is_some_and(|f| !f.load(Ordering::SeqCst)))
                .collect()
        };
        let out: Vec<(String, LrmState)> = ids
            .iter()
            .zip(starting)
            .map(|(id, starting)| (id.clone(), supervised::state_of(Path::new(id), starting)))
            .collect();
        let mut inner = self.inner();
        for (id, st) in &out {
            if st.is_terminal() {
                inner.spawned.remove(id);
            }
        }
        out
    }

    fn cancel(&self, id: &str) -> Result<(), BackendError> {
        supervised::kill(Path::new(id));
        Ok(())
    }

    fn adopt(&self, _id: &str, site: &str, processors: u32) -> Result<String, BackendError> {
        self.check_site(site)?;
        // The component holds its processors already: no check against the free slots.
        Ok(self.inner().take(processors))
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
