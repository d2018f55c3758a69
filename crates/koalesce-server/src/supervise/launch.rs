//! Setting a component up before the start barrier and starting it after (see the parent
//! module): [`prepare`] makes everything the program needs (working directory, outputs,
//! inputs, start directory, control group, environment, confinement), [`Prepared::hold`] forks
//! the program's process, which enters its confinement (control group, mount namespace,
//! Landlock, account) and then waits on a pipe, so that after `go` only the `exec` remains
//! ([`Held::release`]): a loaded host then starts its component within milliseconds of the
//! others, the set-up having been paid before the check-in.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::{publish, work_dir, Outcome, RunningRecord, SuperviseOptions, INPUTS_DIR, RUNNING_FILE, STDERR_FILE, STDOUT_FILE};

/// How long leftovers of a component may take to die after SIGKILL before the supervisor
/// records the exit anyway (a process stuck in the kernel).
pub(super) const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A component set up and ready to run: everything the program needs exists (working
/// directory, output files, staged inputs, control group with its limits) and its confinement
/// is prepared (Landlock ruleset, mount plan, account, environment, resolved program).
pub(super) struct Prepared {
    launcher: Launcher,
    confinement: crate::sandbox::Confinement,
    cgroup: Option<crate::cgroup::Cgroup>,
}

/// What starting the program takes, owned by the thread that forks it.
struct Launcher {
    request: crate::sandbox::Request,
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    args: Vec<String>,
    start_dir: Option<std::ffi::CString>,
    out: File,
    err: File,
    /// The supervisor's scheduling policy before it raised anything: the program's process
    /// goes back to it before it execs (see [`crate::realtime`]).
    policy: i32,
}

/// Sets the component up (working directory, outputs, inputs, start directory, control group,
/// environment, sandbox), all before the supervisor reports itself held at the barrier. An
/// error is the outcome to record (a fault of the site, or of the job for a bad start
/// directory); the program has not run.
pub(super) fn prepare(opts: &SuperviseOptions, account: Option<&crate::users::Account>) -> Result<Prepared, Outcome> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = opts.dir.as_path();
    let site = |what: &str, e: io::Error| Outcome::site(format!("{what}: {e}"));
    let work = work_dir(dir);
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&work)
        .map_err(|e| site("cannot create the working directory", e))?;
    if let Some(a) = account {
        nix::unistd::chown(&work, Some(a.uid), Some(a.gid))
            .map_err(|e| site("cannot give the working directory to the job's account", e.into()))?;
    }
    let open = |name: &str| OpenOptions::new().create(true).append(true).mode(0o600).open(dir.join(name));
    let (out, err) = match (open(STDOUT_FILE), open(STDERR_FILE)) {
        (Ok(o), Ok(e)) => (o, e),
        (Err(e), _) | (_, Err(e)) => return Err(site("cannot open output files", e)),
    };
    let inputs = stage_inputs(dir, opts, account).map_err(|e| site("cannot provide the input files", e))?;
    // The job's `working_directory`: a directory inside work/ (checked relative by the API).
    let start_dir = match opts.chdir.as_deref().filter(|d| !d.is_empty() && *d != ".") {
        Some(rel) => Some(make_start_dir(&work, rel, account).map_err(|e| Outcome::failed(format!("working directory '{rel}': {e}")))?),
        None => None,
    };
    let cgroup = match crate::cgroup::Cgroup::create(&opts.cgroup_parent, &crate::cgroup::name_for(dir)) {
        Ok(cg) => {
            let limited = match opts.memory_limit {
                Some(bytes) => cg.set_memory_limit(bytes).map_err(|e| site("cannot set the memory limit", e)),
                None => Ok(()),
            };
            if let Err(o) = limited.and_then(|()| cg.record(dir).map_err(|e| site("cannot record the control group", e))) {
                cg.remove();
                return Err(o);
            }
            Some(cg)
        }
        Err(e) => {
            say!("supervise: warning: no control group ({e}); descendants that leave the process group cannot be tracked");
            None
        }
    };
    let drop_cgroup = |o: Outcome| {
        if let Some(cg) = &cgroup {
            cg.remove();
        }
        o
    };
    if let Err(e) = crate::sandbox::landlock_fully_supported() {
        say!("supervise: warning: Landlock is not fully enforced on this kernel ({e}); the job is less confined");
    }
    let (program, args) = (&opts.command[0], &opts.command[1..]);
    let given: Vec<(std::ffi::OsString, std::ffi::OsString)> = match &opts.environment {
        Some(env) => env.clone(),
        None => std::env::vars_os().collect(),
    };
    let given = super::kept_environment(given, opts.env_keep.as_deref());
    let mut env = crate::sandbox::job_environment(given, &work, account);
    if let Some(d) = &start_dir {
        for (k, v) in env.iter_mut() {
            if k == "PWD" {
                *v = d.as_os_str().to_owned();
            }
        }
    }
    let path_var = env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.clone()).unwrap_or_default();
    let request = crate::sandbox::Request {
        work: work.clone(),
        program: crate::sandbox::resolve_program(program, start_dir.as_deref().unwrap_or(&work), &path_var),
        outputs: vec![dir.join(STDOUT_FILE), dir.join(STDERR_FILE)],
        inputs,
        read_only: opts.read_only.clone(),
        read_write: opts.read_write.clone(),
        account: account.cloned(),
        hide: opts.hide.clone().filter(|_| crate::users::can_switch()),
        cgroup_procs: cgroup.as_ref().map(|c| c.procs_files()).unwrap_or_default(),
    };
    let confinement = crate::sandbox::Confinement::prepare(&request).map_err(|e| drop_cgroup(site("cannot prepare the sandbox", e)))?;
    let start_dir = start_dir
        .map(|d| std::ffi::CString::new(d.into_os_string().into_encoded_bytes()))
        .transpose()
        .map_err(|e| drop_cgroup(Outcome::failed(format!("start directory: {e}"))))?;
    Ok(Prepared {
        launcher: Launcher {
            request,
            env,
            args: args.to_vec(),
            start_dir,
            out,
            err,
            policy: crate::realtime::policy(0).unwrap_or(libc::SCHED_OTHER),
        },
        confinement,
        cgroup,
    })
}

impl Prepared {
    /// Gives up without running the program: removes the control group.
    pub(super) fn discard(self) {
        if let Some(cg) = &self.cgroup {
            cg.remove();
        }
    }

    /// Forks the program's process now: it enters its confinement, reports that on a pipe
    /// and waits for [`Held::release`]. Returns once the process waits (or failed: the
    /// outcome to record; the program never ran). `released`: `go` is there already (a
    /// launch of one component): the gate is open from the start, the process goes through
    /// without waiting.
    pub(super) fn hold(self, released: bool) -> Result<Held, Outcome> {
        let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| Outcome::site(format!("cannot create a pipe: {e}")));
        let (gate_read, gate_write) = match pipe() {
            Ok(p) => p,
            Err(o) => return Err(self.discarded(o)),
        };
        let (entered_read, entered_write) = match pipe() {
            Ok(p) => p,
            Err(o) => return Err(self.discarded(o)),
        };
        if released {
            if let Err(e) = nix::unistd::write(&gate_write, b"g") {
                return Err(self.discarded(Outcome::site(format!("cannot open the gate: {e}"))));
            }
        }
        let Prepared {
            launcher,
            confinement,
            cgroup,
        } = self;
        let program = launcher.request.program.display().to_string();
        let policy = launcher.policy;
        let gate_write_raw = gate_write.as_raw_fd();
        // Command::spawn returns only once the child has exec'd (or failed), that is after
        // `go`: it runs on a thread of its own while this one waits at the barrier.
        let spawned = std::thread::spawn(move || {
            let r = launcher.spawn_gated(confinement, &gate_read, gate_write_raw, &entered_write);
            drop(entered_write);
            r
        });
        // Its pid (4 bytes, written at once): the process waits at its gate. End of file: the
        // spawn failed before.
        let mut b = [0u8; 4];
        let pid = loop {
            match nix::unistd::read(&entered_read, &mut b) {
                Err(nix::errno::Errno::EINTR) => continue,
                Ok(4) => break Some(i32::from_ne_bytes(b)).filter(|p| *p > 0).map(|p| p as u32),
                _ => break None,
            }
        };
        let held = Held {
            gate: Some(gate_write),
            gate_open: released,
            spawned: Some(spawned),
            cgroup,
            program,
            pid,
            policy,
            realtime: false,
            held_ms: 0,
        };
        if pid.is_some() {
            Ok(held)
        } else {
            Err(held.failed())
        }
    }

    fn discarded(self, o: Outcome) -> Outcome {
        self.discard();
        o
    }
}

impl Launcher {
    fn command(&self) -> io::Result<Command> {
        let mut cmd = Command::new(&self.request.program);
        cmd.args(&self.args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(self.out.try_clone()?)
            .stderr(self.err.try_clone()?);
        Ok(cmd)
    }

    /// Spawns the program gated: the child enters `confinement`, writes a byte to `entered`,
    /// waits for a byte on `gate` and then execs; end of file on `gate` (the supervisor gave
    /// up or died) makes it exit instead. Retries without a mount namespace where namespaces
    /// are refused (a container without CAP_SYS_ADMIN): the program still runs confined by
    /// Landlock and its account.
    fn spawn_gated(
        self,
        confinement: crate::sandbox::Confinement,
        gate: &OwnedFd,
        gate_write: i32,
        entered: &OwnedFd,
    ) -> io::Result<Child> {
        let hides = confinement.hides();
        match self.spawn_once(confinement, gate, gate_write, entered) {
            Err(e) if hides => {
                say!("supervise: warning: cannot hide the data directory ({e}); running without a private mount namespace");
                let c = crate::sandbox::Confinement::prepare(&self.request)?.without_mounts();
                self.spawn_once(c, gate, gate_write, entered)
            }
            other => other,
        }
    }

    fn spawn_once(
        &self,
        confinement: crate::sandbox::Confinement,
        gate: &OwnedFd,
        gate_write: i32,
        entered: &OwnedFd,
    ) -> io::Result<Child> {
        let mut cmd = self.command()?;
        let mut confinement = confinement;
        let cwd = self.start_dir.clone();
        let policy = self.policy;
        let (gate, entered) = (gate.as_raw_fd(), entered.as_raw_fd());
        // SAFETY: the closure runs in the forked child before exec; it only makes system calls
        // on descriptors and strings prepared before the fork (no allocation, no locks).
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || {
                // The supervisor's end of the gate: only the supervisor may hold it open.
                nix::libc::close(gate_write);
                confinement.enter()?;
                if let Some(c) = &cwd {
                    nix::unistd::chdir(c.as_c_str())?;
                }
                // Its pid tells the supervisor whom to raise to a real-time priority for the
                // start (getpid(2): the child's, after the fork).
                let pid = nix::libc::getpid().to_ne_bytes();
                if nix::libc::write(entered, pid.as_ptr().cast(), pid.len()) != pid.len() as isize {
                    return Err(io::Error::last_os_error());
                }
                let mut b = [0u8; 1];
                let opened = loop {
                    match nix::libc::read(gate, b.as_mut_ptr().cast(), 1) {
                        1 => break true,
                        -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => continue,
                        _ => break false,
                    }
                };
                // Back to the supervisor's policy before anything else: the program never
                // runs real-time (and the process does not exit real-time either).
                crate::realtime::leave(policy)?;
                if opened {
                    Ok(())
                } else {
                    Err(io::Error::other("not released"))
                }
            });
        }
        cmd.spawn()
    }
}

/// The program's process, forked and confined, waiting at its gate.
pub(super) struct Held {
    gate: Option<OwnedFd>,
    /// The gate was opened before the fork (`go` was there already).
    gate_open: bool,
    spawned: Option<std::thread::JoinHandle<io::Result<Child>>>,
    cgroup: Option<crate::cgroup::Cgroup>,
    program: String,
    /// The waiting process.
    pid: Option<u32>,
    /// The supervisor's scheduling policy before [`Held::raise`].
    policy: i32,
    /// The supervisor's waiting thread and the process are real-time.
    realtime: bool,
    /// When the component was reported held (0: it never was, `go` came first).
    pub(super) held_ms: u64,
}

impl Held {
    /// The spawn's result (after the gate was opened or closed).
    fn join(&mut self) -> io::Result<Child> {
        match self.spawned.take().map(|h| h.join()) {
            Some(Ok(r)) => r,
            _ => Err(io::Error::other("the spawning thread failed")),
        }
    }

    /// The spawn failed before the barrier: the outcome to record.
    fn failed(mut self) -> Outcome {
        self.gate = None;
        let e = self
            .join()
            .err()
            .unwrap_or_else(|| io::Error::other("the program did not wait at its gate"));
        self.remove_cgroup();
        Outcome {
            code: Some(127),
            ..Outcome::failed(format!("cannot start '{}': {e}", self.program))
        }
    }

    fn remove_cgroup(&mut self) {
        if let Some(cg) = self.cgroup.take() {
            // The gated process is gone (reaped by the failed spawn) or dying.
            cg.wait_empty(std::time::Duration::from_secs(2));
            cg.remove();
        }
    }

    /// Raises the calling thread (the one that waits at the barrier and opens the gate) and
    /// the waiting process to a real-time priority for the start, where permitted (see
    /// [`crate::realtime`]); both leave it at the start. Returns whether they did.
    pub(super) fn raise(&mut self) -> bool {
        let Some(pid) = self.pid else { return false };
        if crate::realtime::bound_rttime().is_err() || crate::realtime::raise_thread().is_err() {
            return false;
        }
        if crate::realtime::raise(pid).is_err() {
            let _ = crate::realtime::leave(self.policy);
            return false;
        }
        self.realtime = true;
        true
    }

    /// The calling thread back to its policy (the process leaves on its own at the gate).
    fn lower(&mut self) {
        if std::mem::take(&mut self.realtime) {
            if let Err(e) = crate::realtime::leave(self.policy) {
                eprintln!("supervise: warning: cannot leave the real-time priority: {e}");
            }
        }
    }

    /// Gives up without running the program: the gate closes, the waiting process exits.
    pub(super) fn discard(mut self) {
        self.lower();
        self.gate = None;
        let _ = self.join();
        self.remove_cgroup();
    }

    /// After `go`: lets the process exec the program and waits until every process of the
    /// component is gone. `go_seen_ms`: when the supervisor saw `go`.
    pub(super) fn release(mut self, opts: &SuperviseOptions, go_seen_ms: u64) -> Result<Outcome, Outcome> {
        let dir = opts.dir.as_path();
        let opened = match self.gate.take() {
            Some(_) if self.gate_open => Ok(()),
            Some(g) => nix::unistd::write(&g, b"g").map(drop),
            None => Err(nix::errno::Errno::EBADF),
        };
        let realtime = self.realtime;
        // The process runs (real-time until its exec) once this thread is normal again.
        self.lower();
        let child = opened.map_err(io::Error::from).and_then(|()| self.join());
        let mut child = match child {
            Ok(c) => c,
            Err(e) => {
                self.remove_cgroup();
                return Err(Outcome {
                    code: Some(127),
                    ..Outcome::failed(format!("cannot start '{}': {e}", self.program))
                });
            }
        };
        let cgroup = self.cgroup.take();
        let running = RunningRecord {
            child_pid: child.id(),
            started_ms: crate::now_ms(),
            go_seen_ms,
            held_ms: self.held_ms,
            realtime,
        };
        let _ = publish(&dir.join(RUNNING_FILE), &serde_json::to_vec(&running).unwrap());
        let early = opts.signal.as_deref().and_then(|s| s.parse().ok());
        let timer = opts.time_limit.map(|ms| WallClock::start(ms, early, child.id(), cgroup.clone()));
        // Seen ended but not reaped (WNOWAIT) until the clock is stopped: its pid stays the
        // program's, so the clock's signals (the early one, the limit's) never reach a process
        // that took the pid over once it was reaped.
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let flags = nix::sys::wait::WaitPidFlag::WEXITED | nix::sys::wait::WaitPidFlag::WNOWAIT;
        while let Err(nix::errno::Errno::EINTR) = nix::sys::wait::waitid(nix::sys::wait::Id::Pid(pid), flags) {}
        let timed_out = timer.is_some_and(|t| t.stop());
        let status = loop {
            match child.wait() {
                Ok(s) => break Some(s),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    say!("supervise: wait failed: {e}");
                    break None;
                }
            }
        };
        let mut oom_killed = false;
        if let Some(cg) = &cgroup {
            // Whatever the program left behind ends with it.
            cg.kill_all();
            if !cg.wait_empty(DRAIN_TIMEOUT) {
                say!("supervise: warning: processes of the component survive SIGKILL: {:?}", cg.pids());
            }
            oom_killed = cg.oom_kills() > 0;
            cg.remove();
        }
        use std::os::unix::process::ExitStatusExt;
        Ok(match status {
            Some(s) => Outcome {
                code: s.code(),
                signal: s.signal(),
                error: None,
                oom_killed,
                timed_out,
                site_fault: false,
            },
            None => Outcome::site("lost track of the program".into()),
        })
    }
}

/// How long a component that reached its wall time has between SIGTERM and SIGKILL (Slurm's
/// `KillWait`, shorter).
pub const KILL_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Enforces a wall-time limit: a thread that sleeps until the limit, then signals every
/// process of the component (its control group, else the program): SIGTERM, and SIGKILL
/// [`KILL_WAIT`] later. With an early signal (`--signal`, sbatch's), it first sends that
/// signal its seconds before the limit (at once when the limit is shorter): with `B:` to the
/// program alone, else to the component's other processes.
struct WallClock {
    state: std::sync::Arc<(std::sync::Mutex<WallState>, std::sync::Condvar)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WallState {
    Running,
    /// The program ended before the limit: the thread signals nothing.
    Ended,
    /// The limit was reached and the component signalled.
    Expired,
}

impl WallClock {
    fn start(
        limit_ms: u64,
        early: Option<koalesce_api::timing::EarlySignal>,
        pid: u32,
        cgroup: Option<crate::cgroup::Cgroup>,
    ) -> WallClock {
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        let state = std::sync::Arc::new((std::sync::Mutex::new(WallState::Running), std::sync::Condvar::new()));
        let shared = state.clone();
        // The early signal by number (real-time ones have no `Signal`). As Slurm's: `B:` the
        // program (the batch shell) alone; else every other process of the component, not the
        // shell (Slurm signals the job's steps, not its batch shell: a shell without a trap
        // would die of it). Never a pid of 0 or less (kill(2) would reach the supervisor's group).
        let pids_of = cgroup.clone();
        let send_early = move |e: koalesce_api::timing::EarlySignal| {
            let program = pid as i32;
            let pids = match (&pids_of, e.batch_only) {
                (_, true) => vec![program],
                (Some(cg), false) => cg.pids(),
                (None, false) => descendants(program),
            };
            for p in pids.into_iter().filter(|&p| p > 0 && (e.batch_only || p != program)) {
                // SAFETY: kill(2) with a pid of the component's and a signal number 1..=64.
                unsafe { libc::kill(p, e.signal) };
            }
        };
        let signal_all = move |sig: Signal| match &cgroup {
            Some(cg) if sig == Signal::SIGKILL => cg.kill_all(),
            Some(cg) => {
                for p in cg.pids() {
                    let _ = kill(Pid::from_raw(p), sig);
                }
            }
            None => {
                let _ = kill(Pid::from_raw(pid as i32), sig);
            }
        };
        std::thread::spawn(move || {
            let (lock, cv) = &*shared;
            let deadline = std::time::Instant::now() + std::time::Duration::from_millis(limit_ms);
            let mut st = lock.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(e) = early {
                let at = deadline
                    .checked_sub(std::time::Duration::from_secs(e.before_s))
                    .unwrap_or_else(std::time::Instant::now);
                while *st == WallState::Running {
                    let now = std::time::Instant::now();
                    if now >= at {
                        send_early(e);
                        break;
                    }
                    st = cv.wait_timeout(st, at - now).unwrap_or_else(|p| p.into_inner()).0;
                }
            }
            // Sleeps until the limit unless the program ends first (the pid is not signalled
            // once it may have been reaped and reused).
            while *st == WallState::Running {
                let now = std::time::Instant::now();
                if now >= deadline {
                    *st = WallState::Expired;
                    signal_all(Signal::SIGTERM);
                    break;
                }
                st = cv.wait_timeout(st, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
            }
            if *st != WallState::Expired {
                return;
            }
            let kill_at = std::time::Instant::now() + KILL_WAIT;
            while *st == WallState::Expired {
                let now = std::time::Instant::now();
                if now >= kill_at {
                    signal_all(Signal::SIGKILL);
                    return;
                }
                st = cv.wait_timeout(st, kill_at - now).unwrap_or_else(|p| p.into_inner()).0;
            }
        });
        WallClock { state }
    }

    /// The program ended: stops the clock. Returns whether the limit had been reached.
    fn stop(self) -> bool {
        let (lock, cv) = &*self.state;
        let mut st = lock.lock().unwrap_or_else(|p| p.into_inner());
        let expired = *st == WallState::Expired;
        *st = WallState::Ended;
        cv.notify_all();
        expired
    }
}

/// The processes descended from `pid` (its children, theirs, ...), from /proc: the component's
/// other processes when it has no control group.
fn descendants(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let tasks = fs::read_dir(format!("/proc/{p}/task")).into_iter().flatten().flatten();
        for t in tasks {
            let text = fs::read_to_string(t.path().join("children")).unwrap_or_default();
            for c in text.split_whitespace().filter_map(|c| c.parse::<i32>().ok()) {
                if !out.contains(&c) {
                    out.push(c);
                    todo.push(c);
                }
            }
        }
    }
    out
}

/// Creates the program's start directory `rel` inside `work` (owned by the job's account).
/// `rel` must stay inside `work`: no absolute path, no `..`, no symbolic link on the way.
fn make_start_dir(work: &Path, rel: &str, account: Option<&crate::users::Account>) -> io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let mut at = work.to_path_buf();
    for part in Path::new(rel).components() {
        match part {
            std::path::Component::Normal(p) => at.push(p),
            std::path::Component::CurDir => continue,
            _ => return Err(io::Error::other("must be a relative path inside the working directory")),
        }
        match fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(io::Error::other(format!("{} is not a directory", at.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::DirBuilder::new().mode(0o700).create(&at)?;
                if let Some(a) = account {
                    nix::unistd::chown(&at, Some(a.uid), Some(a.gid))?;
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(at)
}

/// The input files as the program sees them: `(path it uses, file behind it)`. A program that
/// runs as another account than the files' owner (root mode) gets private read-only copies
/// (the replicas stay 0600); it sees them at the replicas' paths in its mount namespace.
fn stage_inputs(dir: &Path, opts: &SuperviseOptions, account: Option<&crate::users::Account>) -> io::Result<Vec<(PathBuf, PathBuf)>> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let mut out = Vec::new();
    for (i, input) in opts.inputs.iter().enumerate() {
        let meta = fs::metadata(input)?;
        match account {
            Some(a) if opts.hide.is_some() && meta.uid() != a.uid.as_raw() && !a.uid.is_root() => {
                let copies = dir.join(INPUTS_DIR);
                match fs::DirBuilder::new().mode(0o755).create(&copies) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
                let copy = copies.join(format!("{i}"));
                fs::copy(input, &copy)?;
                nix::unistd::chown(&copy, Some(a.uid), Some(a.gid))?;
                fs::set_permissions(&copy, fs::Permissions::from_mode(0o400))?;
                out.push((input.clone(), copy));
            }
            _ => out.push((input.clone(), input.clone())),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    /// Without a control group, the early signal reaches the program's descendants: its
    /// children and theirs, not itself.
    #[test]
    fn descendants_are_the_children_and_theirs() {
        let mut sh = std::process::Command::new("/bin/sh")
            .args(["-c", "sh -c 'sleep 5 & wait' & sleep 5 & wait"])
            .spawn()
            .unwrap();
        let pid = sh.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut found = super::descendants(pid);
        while found.len() < 3 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            found = super::descendants(pid);
        }
        for p in &found {
            // SAFETY: our own test's processes.
            unsafe { libc::kill(*p, libc::SIGKILL) };
        }
        let _ = sh.kill();
        let _ = sh.wait();
        assert_eq!(found.len(), 3, "sh, sleep and its sleep: {found:?}");
        assert!(!found.contains(&pid));
    }
}
