//! The local executor: N sites on this machine, each with a slot count and a storage
//! directory. Components run as real processes under a supervisor (see [`crate::supervise`]),
//! held at its start barrier from `submit` until `start`; a component's LRM id is its
//! directory, so it can be found again after a daemon restart. A site never runs more
//! processor slots than it has: every component runs inside a claim, and claims are refused
//! beyond the site's slots, and the slots of a component are given back only once every
//! process of it is gone (its control group is empty), even when it was cancelled.
//!
//! Supervisors start with a clean environment (the job's variables only) and are told how to
//! confine the program (see [`crate::sandbox`], [`LocalSandbox`]).

use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use crate::backend::{Backend, BackendError, ComponentSubmission, LrmState, ProcessorCount};
use crate::cgroup::Cgroup;
use crate::sandbox::SandboxConfig;
use crate::supervise::{self, ExitRecord, SupervisorRecord};

/// How components are confined: the server config's `[users]`, `allow_root_jobs` and
/// `[sandbox]`, and whether this server can switch accounts (it runs as root).
#[derive(Debug, Clone, Default)]
pub struct LocalSandbox {
    pub users: BTreeMap<String, String>,
    pub allow_root_jobs: bool,
    pub config: SandboxConfig,
    /// Run components as the mapped accounts (the server runs as root).
    pub switch_users: bool,
}

impl LocalSandbox {
    /// From the server config, switching accounts when this process runs as root.
    pub fn from_config(config: &crate::ServerConfig) -> Self {
        let switch_users = crate::users::can_switch();
        if !switch_users && !config.users.is_empty() {
            tracing::warn!("the server does not run as root: [users] is ignored, jobs run as this account (confined by Landlock)");
        }
        LocalSandbox {
            users: config.users.clone(),
            allow_root_jobs: config.allow_root_jobs,
            config: config.sandbox.clone(),
            switch_users,
        }
    }
}

/// Whether an error starting a process means this machine is short of something for now.
fn exhausted(e: &std::io::Error) -> bool {
    use nix::errno::Errno;
    matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(Errno::EMFILE | Errno::ENFILE | Errno::EAGAIN | Errno::ENOMEM | Errno::ENOSPC)
    )
}

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

#[derive(Debug, Clone)]
pub struct LocalSite {
    pub name: String,
    pub slots: u32,
    pub storage: PathBuf,
    pub jobs: PathBuf,
}

#[derive(Default)]
struct Inner {
    /// claim id → (site, processors)
    claims: HashMap<String, (String, u32)>,
    /// claim id → the component directory running in it
    claim_dirs: HashMap<String, String>,
    /// Released claims whose component still has processes: (site, processors, dir). Their
    /// slots stay used until the processes are gone.
    draining: Vec<(String, u32, String)>,
    used: HashMap<String, u32>,
    next_claim: u64,
    /// Supervisors this instance spawned and that have not exited yet (reaped by `status`).
    spawned: HashMap<String, std::process::Child>,
    /// High-water mark of used slots per site (for tests and metrics).
    peak: HashMap<String, u32>,
}

impl Inner {
    /// Gives back the slots of drained components (every process gone).
    fn drain(&mut self) {
        let mut i = 0;
        while i < self.draining.len() {
            if component_gone(Path::new(&self.draining[i].2)) {
                let (site, p, _) = self.draining.swap_remove(i);
                let u = self.used.entry(site).or_default();
                *u = u.saturating_sub(p);
            } else {
                i += 1;
            }
        }
    }

    /// Reaps supervisors that exited (no zombies, no thread per supervisor).
    fn reap(&mut self) {
        self.spawned.retain(|_, child| matches!(child.try_wait(), Ok(None)));
    }
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

pub struct LocalBackend {
    sites: Vec<LocalSite>,
    by_name: HashMap<String, usize>,
    supervisor: SupervisorCommand,
    data_dir: PathBuf,
    sandbox: LocalSandbox,
    inner: Mutex<Inner>,
}

impl LocalBackend {
    /// Sites `(name, slots)` under `data_dir/sites/NAME/{storage,jobs}` (created).
    pub fn new(data_dir: &Path, sites: &[(String, u32)], supervisor: SupervisorCommand) -> std::io::Result<Self> {
        let mut v = Vec::new();
        for (name, slots) in sites {
            let base = data_dir.join("sites").join(name);
            let storage = base.join("storage");
            let jobs = base.join("jobs");
            std::fs::create_dir_all(&storage)?;
            std::fs::create_dir_all(&jobs)?;
            v.push(LocalSite {
                name: name.clone(),
                slots: *slots,
                storage,
                jobs,
            });
        }
        let by_name = v.iter().enumerate().map(|(i, s)| (s.name.clone(), i)).collect();
        Ok(LocalBackend {
            sites: v,
            by_name,
            supervisor,
            data_dir: data_dir.to_path_buf(),
            sandbox: LocalSandbox::default(),
            inner: Mutex::new(Inner::default()),
        })
    }

    /// Confines components as `sandbox` says.
    pub fn with_sandbox(mut self, sandbox: LocalSandbox) -> Self {
        self.sandbox = sandbox;
        self
    }

    pub fn site(&self, name: &str) -> Option<&LocalSite> {
        self.by_name.get(name).map(|&i| &self.sites[i])
    }

    pub fn local_sites(&self) -> &[LocalSite] {
        &self.sites
    }

    /// Most slots ever in use at once at `site`.
    pub fn peak_used(&self, site: &str) -> u32 {
        self.inner.lock().unwrap().peak.get(site).copied().unwrap_or(0)
    }

    fn spawn_supervisor(&self, sub: &ComponentSubmission) -> std::io::Result<std::process::Child> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&sub.dir)?;
        let sb = &self.sandbox;
        let mut cmd = Command::new(&self.supervisor.program);
        // `--dir DIR` first: wrappers in tests look at it.
        cmd.args(&self.supervisor.args).arg("--dir").arg(&sub.dir);
        if sb.switch_users {
            cmd.arg("--user").arg(crate::users::account_name(&sb.users, &sub.user));
            cmd.arg("--hide").arg(&self.data_dir);
        }
        if sb.allow_root_jobs {
            cmd.arg("--allow-root");
        }
        for p in &sb.config.read_only {
            cmd.arg("--read-only").arg(p);
        }
        for p in &sb.config.read_write {
            cmd.arg("--read-write").arg(p);
        }
        for (k, v) in &sub.environment {
            if k.starts_with("KOALESCE_INPUT_") {
                cmd.arg("--input").arg(v);
            }
        }
        cmd.arg("--cgroup-parent")
            .arg(&sb.config.cgroup_parent)
            .arg("--")
            .arg(&sub.executable)
            .args(&sub.arguments)
            // The job's environment only, never the daemon's.
            .env_clear()
            .envs(&sub.environment)
            .current_dir(&sub.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(sub.dir.join("supervisor.log"))?);
        // SAFETY: the closure runs in the forked child before exec and only calls setsid(2),
        // which is async-signal-safe. A session of its own: the daemon's death (even kill -9
        // of its process group) does not reach the supervisor or the component.
        unsafe {
            cmd.pre_exec(|| {
                nix::unistd::setsid()?;
                Ok(())
            });
        }
        cmd.spawn()
    }

    /// For recovery: where the launch in directory `id` stands at the start barrier. A
    /// directory no supervisor has taken is fenced first, so the answer cannot change under
    /// the caller by a late supervisor (a `Held` one can only become `Released` by [`Backend::start`]
    /// or give up by [`LocalBackend::abort_held`]).
    pub fn barrier_state(&self, id: &str) -> std::io::Result<BarrierState> {
        let dir = Path::new(id);
        let rec = match supervise::read_json::<SupervisorRecord>(&dir.join(supervise::SUPERVISOR_FILE)) {
            Some(rec) => rec,
            None => {
                if supervise::fence(dir)? {
                    return Ok(BarrierState::Fenced);
                }
                supervise::read_json::<SupervisorRecord>(&dir.join(supervise::SUPERVISOR_FILE))
                    .ok_or_else(|| std::io::Error::other(format!("unreadable supervisor record in {}", dir.display())))?
            }
        };
        if rec.fenced {
            return Ok(BarrierState::Fenced);
        }
        if dir.join(supervise::GO_FILE).exists() || dir.join(supervise::RUNNING_FILE).exists() {
            return Ok(BarrierState::Released);
        }
        match supervise::read_json::<ExitRecord>(&dir.join(supervise::EXIT_FILE)) {
            Some(exit) if exit.never_started => Ok(BarrierState::Held { alive: false }),
            // An outcome without `go` cannot happen; count it as run, to be safe.
            Some(_) => Ok(BarrierState::Released),
            // Told to give up (it is about to): it will not run any more.
            None if dir.join(supervise::ABORT_FILE).exists() => Ok(BarrierState::Held { alive: false }),
            None => Ok(BarrierState::Held {
                alive: supervise::supervisor_alive(&rec),
            }),
        }
    }

    /// For recovery: makes a supervisor held at the barrier give up without running its
    /// program (it records `never_started` and exits). Must only be used on a launch that was
    /// never released.
    pub fn abort_held(&self, id: &str) -> std::io::Result<()> {
        supervise::abort(Path::new(id))
    }

    /// A live supervisor holds the directory and nothing told it to give up.
    fn is_ready(&self, id: &str) -> bool {
        let dir = Path::new(id);
        supervise::read_json::<SupervisorRecord>(&dir.join(supervise::SUPERVISOR_FILE)).is_some_and(|r| supervise::supervisor_alive(&r))
            && !dir.join(supervise::ABORT_FILE).exists()
            && !dir.join(supervise::EXIT_FILE).exists()
    }

    fn state_of(&self, id: &str) -> LrmState {
        let dir = Path::new(id);
        if let Some(exit) = supervise::read_json::<ExitRecord>(&dir.join(supervise::EXIT_FILE)) {
            return exit_state(&exit);
        }
        match supervise::read_json::<SupervisorRecord>(&dir.join(supervise::SUPERVISOR_FILE)) {
            Some(rec) if rec.fenced => LrmState::NodeFail {
                reason: "launch abandoned before the supervisor started (fenced)".into(),
            },
            Some(rec) if supervise::supervisor_alive(&rec) => LrmState::Running,
            Some(_) => match supervise::read_json::<ExitRecord>(&dir.join(supervise::EXIT_FILE)) {
                Some(exit) => exit_state(&exit),
                None => LrmState::NodeFail {
                    reason: "supervisor died without recording an exit".into(),
                },
            },
            None => {
                let starting = self
                    .inner
                    .lock()
                    .unwrap()
                    .spawned
                    .get_mut(id)
                    .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
                if starting {
                    return LrmState::Pending;
                }
                // Nobody (or a dead supervisor) owns this directory: fence it so that no
                // late supervisor can ever start the component.
                match supervise::fence(dir) {
                    Ok(true) => LrmState::NodeFail {
                        reason: "supervisor never started".into(),
                    },
                    Ok(false) => LrmState::Pending,
                    Err(e) => LrmState::NodeFail {
                        reason: format!("cannot fence {}: {e}", dir.display()),
                    },
                }
            }
        }
    }
}

/// Where a launch directory stands at the start barrier (see [`LocalBackend::barrier_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierState {
    /// No supervisor took the directory (it is fenced, now or earlier): the component can
    /// never start there.
    Fenced,
    /// A supervisor took it and has not been let through: it never ran the program. `alive`:
    /// it still waits (else it died or gave up).
    Held { alive: bool },
    /// `go` was written (or the program was spawned): the component may have run.
    Released,
}

/// A component's state from its supervisor's exit record (shared with the Slurm backend).
pub(crate) fn exit_state(exit: &ExitRecord) -> LrmState {
    if exit.success() {
        return LrmState::Completed;
    }
    if exit.site_fault {
        // The supervisor could not set the component up: the site's fault, not the job's.
        return LrmState::NodeFail {
            reason: exit
                .spawn_error
                .clone()
                .unwrap_or_else(|| "the component could not be set up".into()),
        };
    }
    if exit.oom_killed {
        return LrmState::Failed {
            exit_code: exit.exit_code,
            reason: "killed by the OOM killer: the component went over its memory limit".into(),
        };
    }
    if exit.never_started {
        // Aborted at the start barrier: the program never ran; not the application's fault.
        return LrmState::NodeFail {
            reason: exit.spawn_error.clone().unwrap_or_else(|| "never started".into()),
        };
    }
    let reason = match (&exit.spawn_error, exit.exit_code, exit.signal) {
        (Some(e), _, _) => e.clone(),
        (None, Some(c), _) => format!("exit code {c}"),
        (None, None, Some(s)) => format!("killed by signal {s}"),
        _ => "unknown exit".into(),
    };
    LrmState::Failed {
        exit_code: exit.exit_code,
        reason,
    }
}

impl Backend for LocalBackend {
    fn kind(&self) -> &'static str {
        "local"
    }

    fn sites(&self) -> Vec<String> {
        self.sites.iter().map(|s| s.name.clone()).collect()
    }

    fn processors(&self, site: &str) -> Result<ProcessorCount, BackendError> {
        let s = self.site(site).ok_or_else(|| BackendError::UnknownSite(site.into()))?;
        let mut inner = self.inner.lock().unwrap();
        inner.drain();
        let used = inner.used.get(site).copied().unwrap_or(0);
        Ok(ProcessorCount {
            total: s.slots,
            idle: s.slots.saturating_sub(used),
            used,
        })
    }

    fn claim(&self, site: &str, processors: u32) -> Result<String, BackendError> {
        let s = self.site(site).ok_or_else(|| BackendError::UnknownSite(site.into()))?;
        let mut inner = self.inner.lock().unwrap();
        inner.drain();
        let used = inner.used.get(site).copied().unwrap_or(0);
        if used + processors > s.slots {
            return Err(BackendError::Busy {
                site: site.into(),
                wanted: processors,
                idle: s.slots.saturating_sub(used),
            });
        }
        inner.next_claim += 1;
        let id = format!("{site}:{}", inner.next_claim);
        inner.claims.insert(id.clone(), (site.to_string(), processors));
        let now_used = used + processors;
        inner.used.insert(site.to_string(), now_used);
        let peak = inner.peak.entry(site.to_string()).or_default();
        *peak = (*peak).max(now_used);
        Ok(id)
    }

    fn release(&self, claim: &str) {
        let mut inner = self.inner.lock().unwrap();
        if let Some((site, p)) = inner.claims.remove(claim) {
            match inner.claim_dirs.remove(claim) {
                // Its processes may still be dying (a cancel): the slots stay used until
                // they are gone.
                Some(dir) if !component_gone(Path::new(&dir)) => inner.draining.push((site, p, dir)),
                _ => {
                    let u = inner.used.entry(site).or_default();
                    *u = u.saturating_sub(p);
                }
            }
        }
    }

    fn submit(&self, sub: &ComponentSubmission) -> Result<String, BackendError> {
        let site_err = |reason: String| BackendError::Site {
            site: sub.site.clone(),
            reason,
        };
        {
            let inner = self.inner.lock().unwrap();
            match inner.claims.get(&sub.claim) {
                Some((site, p)) if *site == sub.site && *p >= sub.processors => {}
                _ => {
                    return Err(site_err(format!(
                        "claim '{}' does not hold {} processors here",
                        sub.claim, sub.processors
                    )))
                }
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
        let mut inner = self.inner.lock().unwrap();
        inner.spawned.insert(id.clone(), child);
        inner.claim_dirs.insert(sub.claim.clone(), id.clone());
        Ok(id)
    }

    fn ready(&self, ids: &[String]) -> Vec<(String, bool)> {
        ids.iter().map(|id| (id.clone(), self.is_ready(id))).collect()
    }

    fn start(&self, ids: &[String]) -> Result<(), BackendError> {
        let not_ready: Vec<&String> = ids.iter().filter(|id| !self.is_ready(id)).collect();
        if !not_ready.is_empty() {
            return Err(BackendError::Site {
                site: "local".into(),
                reason: format!("not ready to start: {not_ready:?}"),
            });
        }
        for id in ids {
            supervise::release(Path::new(id)).map_err(|e| BackendError::Site {
                site: "local".into(),
                reason: format!("cannot start {id}: {e}"),
            })?;
        }
        Ok(())
    }

    fn status(&self, ids: &[String]) -> Vec<(String, LrmState)> {
        let out: Vec<(String, LrmState)> = ids.iter().map(|id| (id.clone(), self.state_of(id))).collect();
        let mut inner = self.inner.lock().unwrap();
        inner.reap();
        inner.drain();
        out
    }

    fn cancel(&self, id: &str) -> Result<(), BackendError> {
        use nix::sys::signal::{killpg, Signal};
        use nix::unistd::Pid;
        let dir = Path::new(id);
        let kill_supervisor = |rec: &SupervisorRecord| {
            // The supervisor leads its own process group (without a control group the
            // component is in it too).
            let _ = killpg(Pid::from_raw(rec.pid as i32), Signal::SIGKILL);
        };
        match supervise::read_json::<SupervisorRecord>(&dir.join(supervise::SUPERVISOR_FILE)) {
            Some(rec) if supervise::supervisor_alive(&rec) => {
                if !dir.join(supervise::GO_FILE).exists() {
                    // Held at the barrier: it must not start even if the kill went astray.
                    let _ = supervise::abort(dir);
                    kill_supervisor(&rec);
                } else if let Some(cg) = Cgroup::recorded(dir) {
                    // Every process of the component, also those that left its process
                    // group; the supervisor records the end once the group is empty.
                    cg.kill_all();
                    if !dir.join(supervise::RUNNING_FILE).exists() {
                        // Let through but the program not started yet: stop the supervisor
                        // (and a child between fork and exec, in its process group).
                        kill_supervisor(&rec);
                    }
                } else {
                    kill_supervisor(&rec);
                }
            }
            Some(_) => {
                if let Some(cg) = Cgroup::recorded(dir) {
                    cg.kill_all();
                }
            }
            None => {
                let _ = supervise::fence(dir);
                // A supervisor that got its record in between: kill it too.
                if let Some(rec) = supervise::read_json::<SupervisorRecord>(&dir.join(supervise::SUPERVISOR_FILE)) {
                    if supervise::supervisor_alive(&rec) {
                        kill_supervisor(&rec);
                    }
                }
            }
        }
        Ok(())
    }

    fn adopt(&self, dir_id: &str, site: &str, processors: u32) -> Result<String, BackendError> {
        self.site(site).ok_or_else(|| BackendError::UnknownSite(site.into()))?;
        let mut inner = self.inner.lock().unwrap();
        inner.next_claim += 1;
        let id = format!("{site}:{}", inner.next_claim);
        inner.claims.insert(id.clone(), (site.to_string(), processors));
        inner.claim_dirs.insert(id.clone(), dir_id.to_string());
        let u = inner.used.entry(site.to_string()).or_default();
        *u += processors;
        let now_used = *u;
        let peak = inner.peak.entry(site.to_string()).or_default();
        *peak = (*peak).max(now_used);
        Ok(id)
    }
}

/// Environment map helper.
pub type Env = BTreeMap<String, String>;
