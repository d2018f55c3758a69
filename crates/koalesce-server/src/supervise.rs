//! The component supervisor: `koalesce supervise --dir DIR [OPTIONS] -- PROGRAM ARGS...`
//! (hidden; [`SuperviseOptions`]).
//!
//! The daemon spawns one supervisor per component, in a process group of its own (it then
//! leaves the daemon's controlling terminal, see `detach_from_terminal`), so the daemon's
//! death, even a kill of the daemon's process group, does not kill it. The supervisor keeps records in the component's *record
//! directory* `DIR`, each written to a temporary name, then linked/renamed into place, so a
//! reader sees a record whole or not at all. The program runs in `DIR/work/`, its working directory, and is
//! confined there ([`crate::sandbox`]): it can neither read nor write the records, so it can
//! neither forge its own outcome nor disturb the start barrier.
//!
//! ```text
//! DIR/                record directory (the daemon's and the supervisor's only)
//!   supervisor.json   {pid, proc_start, started_ms, nonce} or {fenced: true}   (created exclusively)
//!   go, abort         written by the daemon (the start barrier)
//!   cgroup.json       the component's control group (see crate::cgroup), before the program starts
//!   running.json      {child_pid, started_ms}
//!   exit.json         {exit_code, signal, spawn_error, finished_ms, never_started, oom_killed, timed_out, site_fault, nonce}
//!   stdout, stderr    the program's output (it writes them through its descriptors)
//!   supervisor.log    the supervisor's own diagnostics
//!   inputs/           copies of input files for a job that runs under another account
//!   work/             the program's working directory (owned by the job's account)
//! ```
//!
//! - `supervisor.json` is created first, *exclusively* (hard link of a temp file, fails if it
//!   exists). If it already exists the supervisor exits without running anything, so a
//!   component can never be started twice. The daemon uses the same exclusive create to
//!   *fence* a launch it gave up on (`{"fenced": true}`).
//! - Each launch has a *nonce* (`--nonce`, random, chosen by the daemon and stored with the
//!   launch before it is spawned). The supervisor writes it into `supervisor.json` and
//!   `exit.json`, and every reader ([`read_supervisor`], [`read_exit`]) ignores a record that
//!   does not carry the launch's nonce: an old or forged `exit.json` (a directory left by
//!   another launch) is no record at all, so it can never make a job succeed.
//! - A job whose user has no Unix account (or maps to root without `allow_root_jobs`) is
//!   refused right then, before the barrier, with that reason (an application error: the
//!   job fails, the site is not blamed).
//! - Then the supervisor waits at the *start barrier*: it runs the program only once the daemon
//!   has written `go` into the directory, and it gives up if `abort` appears (or its record is
//!   no longer its own), recording `exit.json` with `never_started: true`. The daemon writes
//!   the `go` files of a launch only once *every* component's supervisor has its record, so a
//!   launch the daemon abandons half-way (a crash between two spawns) never ran any program.
//! - The program starts inside the component's control group; when it ends, whatever it left
//!   running (daemonized descendants too) is killed and the supervisor waits until the group
//!   is empty before it records `exit.json`: a component has ended only when all its
//!   processes have. A kill by the OOM killer (past `--memory-limit`) is recorded as such.
//! - With `--time-limit MS` the program runs at most that long (its wall time, as Slurm's
//!   `--time`): at the limit every process of the component gets SIGTERM, and SIGKILL
//!   [`KILL_WAIT`] later; the exit is recorded with `timed_out`. The supervisor enforces it, so
//!   the limit holds while the daemon is down.
//!
//! **Durability.** The records are messages between a supervisor and the daemon on one machine:
//! they must outlive the death of either process (they do: written files are the kernel's),
//! not a crash of the machine, which ends every supervisor and program too. After such a crash
//! a launch whose records are incomplete counts as not run (no record: fenced; no `go`: held
//! and dead; no `exit.json`: a soft error) and its job is requeued, as Slurm requeues the jobs
//! of a node that failed. So only `exit.json`, the outcome of a program that ran, is fsynced
//! ([`write_atomic`]); the others are published without waiting for the disk ([`publish`],
//! [`create_exclusive`]). That keeps a launch from costing eight journal commits, which shared
//! the disk's journal with the server's SQLite group commits (`koalesce bench e2e`).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

pub const SUPERVISOR_FILE: &str = "supervisor.json";
pub const RUNNING_FILE: &str = "running.json";
pub const EXIT_FILE: &str = "exit.json";
pub const STDOUT_FILE: &str = "stdout";
pub const STDERR_FILE: &str = "stderr";
/// The program's working directory, inside the record directory.
pub const WORK_DIR: &str = "work";
/// Copies of input files for a program that runs under another account.
pub const INPUTS_DIR: &str = "inputs";
/// Written by the daemon (atomically) to let a supervisor held at the start barrier run.
pub const GO_FILE: &str = "go";
/// Written by the daemon to make a supervisor held at the start barrier give up.
pub const ABORT_FILE: &str = "abort";
/// How often a supervisor held at the barrier looks again (it is woken at once by inotify
/// when that is available).
pub const BARRIER_POLL_MS: u64 = 25;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct SupervisorRecord {
    #[serde(default)]
    pub pid: u32,
    /// Start time of the process (field 22 of /proc/PID/stat), to tell a live supervisor from
    /// a recycled pid.
    #[serde(default)]
    pub proc_start: u64,
    #[serde(default)]
    pub started_ms: u64,
    /// Written by the daemon instead of a supervisor: this launch must never run.
    #[serde(default)]
    pub fenced: bool,
    /// The launch's nonce (see the module docs); empty for a fence.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub nonce: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningRecord {
    pub child_pid: u32,
    pub started_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub spawn_error: Option<String>,
    pub finished_ms: u64,
    /// The supervisor gave up at the start barrier (`abort`): the program never ran.
    #[serde(default)]
    pub never_started: bool,
    /// The kernel's OOM killer killed a process of the component (over its memory limit).
    #[serde(default)]
    pub oom_killed: bool,
    /// The component reached its wall-time limit (`--time-limit`) and was killed.
    #[serde(default)]
    pub timed_out: bool,
    /// The supervisor could not set the component up (working directory, sandbox, control
    /// group): a fault of the site, not of the job.
    #[serde(default)]
    pub site_fault: bool,
    /// The launch's nonce: a reader ignores a record without the nonce it expects.
    #[serde(default)]
    pub nonce: String,
}

impl ExitRecord {
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && self.spawn_error.is_none() && !self.never_started && !self.oom_killed && !self.timed_out
    }
}

/// The program's working directory for the record directory `dir`.
pub fn work_dir(dir: &Path) -> PathBuf {
    dir.join(WORK_DIR)
}

fn tmp_name(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp.{}.{}", std::process::id(), crate::now_ms()));
    path.with_file_name(name)
}

fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Writes `bytes` to `path` atomically and durably: temp file, fsync, rename, fsync dir.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = tmp_name(path);
    {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    fsync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Writes `bytes` to `path` atomically (temp file, rename), without waiting for the disk: the
/// file survives the death of any process, not a crash of the machine (see "Durability" above).
pub fn publish(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = tmp_name(path);
    fs::write(&tmp, bytes)?;
    fs::rename(&tmp, path)
}

/// Creates `path` with `bytes` only if it does not exist (atomic: a hard link of a complete
/// temp file; not fsynced, see "Durability" above). Returns `ErrorKind::AlreadyExists` when it
/// does.
pub fn create_exclusive(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = tmp_name(path);
    fs::write(&tmp, bytes)?;
    let r = fs::hard_link(&tmp, path);
    let _ = fs::remove_file(&tmp);
    r
}

pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    let bytes = fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// A new launch nonce: 128 random bits from the kernel, in hex.
pub fn new_nonce() -> String {
    let mut buf = [0u8; 16];
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            // getrandom(2) cannot fail otherwise on Linux ≥ 3.17 with a valid buffer.
            Err(e) => panic!("getrandom: {e}"),
        }
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// The exit record in `dir`, only if it belongs to the launch with `nonce`: a record of
/// another launch (a stale or forged `exit.json`) reads as no record.
pub fn read_exit(dir: &Path, nonce: &str) -> Option<ExitRecord> {
    let rec = read_json::<ExitRecord>(&dir.join(EXIT_FILE))?;
    if rec.nonce != nonce {
        tracing::warn!(dir = %dir.display(), "ignoring an exit record of another launch (nonce mismatch)");
        return None;
    }
    Some(rec)
}

/// The supervisor record in `dir`. A record of a supervisor of another launch (its nonce is
/// not `nonce`) reads as a fence: that directory can never run this launch's program.
pub fn read_supervisor(dir: &Path, nonce: &str) -> Option<SupervisorRecord> {
    let rec = read_json::<SupervisorRecord>(&dir.join(SUPERVISOR_FILE))?;
    if !rec.fenced && rec.nonce != nonce {
        tracing::warn!(dir = %dir.display(), "a supervisor record of another launch (nonce mismatch): treated as fenced");
        return Some(SupervisorRecord { fenced: true, ..rec });
    }
    Some(rec)
}

/// Start time of a live process, from /proc (None when it does not exist or is a zombie).
pub fn proc_start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); starttime is field 22.
    if fields.first() == Some(&"Z") || fields.first() == Some(&"X") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// Whether the supervisor described by `rec` is still alive.
pub fn supervisor_alive(rec: &SupervisorRecord) -> bool {
    !rec.fenced && rec.pid != 0 && proc_start_time(rec.pid) == Some(rec.proc_start)
}

/// Creates a launch's record directory for the daemon, *only if it is new* (its parents as
/// needed, all 0700): a directory that exists already belongs to another launch (a job whose
/// row was lost and whose id came round again), and its records (`exit.json`) must never be
/// taken for this launch's. `ErrorKind::AlreadyExists` then.
pub fn create_launch_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(parent) = dir.parent() {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(parent)?;
    }
    fs::DirBuilder::new().mode(0o700).create(dir)
}

/// The daemon's fence: makes sure a launch directory can never start a component. Returns
/// Ok(true) when the fence was set (no supervisor ever started there), Ok(false) when a
/// supervisor record already exists.
pub fn fence(dir: &Path) -> io::Result<bool> {
    fs::create_dir_all(dir)?;
    let rec = SupervisorRecord {
        fenced: true,
        started_ms: crate::now_ms(),
        ..Default::default()
    };
    match create_exclusive(&dir.join(SUPERVISOR_FILE), &serde_json::to_vec(&rec).unwrap()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// What `koalesce supervise` is told (the daemon's local executor sets these; the defaults
/// run the program as the supervisor's own account, confined by Landlock).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SuperviseOptions {
    /// The component's record directory (the program runs in DIR/work).
    #[arg(long)]
    pub dir: PathBuf,
    /// Unix account to run the program as (only when the supervisor runs as root).
    #[arg(long)]
    pub user: Option<String>,
    /// Allow running the program as root (uid 0).
    #[arg(long)]
    pub allow_root: bool,
    /// Extra path the program may read (repeatable).
    #[arg(long = "read-only", value_name = "PATH")]
    pub read_only: Vec<PathBuf>,
    /// Extra path the program may read and write (repeatable).
    #[arg(long = "read-write", value_name = "PATH")]
    pub read_write: Vec<PathBuf>,
    /// An input file the program reads (repeatable).
    #[arg(long = "input", value_name = "PATH")]
    pub inputs: Vec<PathBuf>,
    /// Directory (the server's data directory) the program must not see: hidden behind a
    /// private mount namespace when the supervisor runs as root.
    #[arg(long, value_name = "DIR")]
    pub hide: Option<PathBuf>,
    /// The launch's nonce, written into `supervisor.json` and `exit.json`.
    #[arg(long, default_value = "", hide_default_value = true)]
    pub nonce: String,
    /// Control-group directory the component's group is created under.
    #[arg(long, default_value = "koalesce", value_name = "NAME")]
    pub cgroup_parent: String,
    /// Memory limit of the component (bytes; its control group's).
    #[arg(long, value_name = "BYTES")]
    pub memory_limit: Option<u64>,
    /// Wall-time limit of the program in milliseconds (SIGTERM at the limit, SIGKILL later).
    #[arg(long, value_name = "MS")]
    pub time_limit: Option<u64>,
    /// Directory the program starts in, relative to its working directory (created).
    #[arg(long, value_name = "DIR")]
    pub chdir: Option<String>,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

impl SuperviseOptions {
    /// Options for `program args...` in `dir`, everything else default.
    pub fn new(dir: &Path, command: &[String]) -> Self {
        SuperviseOptions {
            dir: dir.to_path_buf(),
            cgroup_parent: crate::sandbox::SandboxConfig::default().cgroup_parent,
            command: command.to_vec(),
            ..Default::default()
        }
    }

    /// The command line that parses back to these options (`--dir DIR` first, the program
    /// last after `--`); see [`crate::supervisor_cmd`].
    pub fn to_args(&self) -> Vec<std::ffi::OsString> {
        use std::ffi::OsString;
        let mut a: Vec<OsString> = vec!["--dir".into(), self.dir.clone().into()];
        let mut opt = |name: &str, value: OsString| {
            a.push(name.into());
            a.push(value);
        };
        if let Some(u) = &self.user {
            opt("--user", u.into());
        }
        for p in &self.read_only {
            opt("--read-only", p.into());
        }
        for p in &self.read_write {
            opt("--read-write", p.into());
        }
        for p in &self.inputs {
            opt("--input", p.into());
        }
        if let Some(h) = &self.hide {
            opt("--hide", h.into());
        }
        if !self.nonce.is_empty() {
            opt("--nonce", (&self.nonce).into());
        }
        opt("--cgroup-parent", (&self.cgroup_parent).into());
        if let Some(m) = self.memory_limit {
            opt("--memory-limit", m.to_string().into());
        }
        if let Some(t) = self.time_limit {
            opt("--time-limit", t.to_string().into());
        }
        if let Some(d) = &self.chdir {
            opt("--chdir", d.into());
        }
        if self.allow_root {
            a.push("--allow-root".into());
        }
        a.push("--".into());
        a.extend(self.command.iter().map(OsString::from));
        a
    }
}

/// Leaves the terminal of whoever started the supervisor, so that neither it nor the program
/// can read or write it (`/dev/tty`, `TIOCSTI`) or be stopped by its job control. Under Slurm,
/// or started by hand, the supervisor starts a session of its own. The local executor starts it
/// as the leader of a process group of its own in the daemon's session (posix_spawn cannot
/// start a session), and a group leader cannot start a session: it gives up the daemon's
/// controlling terminal instead (`TIOCNOTTY`, which for a process that does not lead its
/// session detaches that process alone), and the program inherits none. Its process group
/// stays what `cancel` kills.
fn detach_from_terminal() {
    use nix::fcntl::{open, OFlag};
    use std::os::fd::AsRawFd;
    if nix::unistd::setsid().is_ok() {
        return;
    }
    if nix::unistd::getsid(None).ok() == Some(nix::unistd::getpid()) {
        // Already leads its session (and its terminal, if any, is its own).
        return;
    }
    // Fails when there is no controlling terminal: nothing to leave.
    let Ok(tty) = open(
        "/dev/tty",
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    ) else {
        return;
    };
    nix::ioctl_none_bad!(tiocnotty, nix::libc::TIOCNOTTY);
    // SAFETY: TIOCNOTTY takes no argument; `tty` is an open descriptor owned here.
    if let Err(e) = unsafe { tiocnotty(tty.as_raw_fd()) } {
        eprintln!("supervise: warning: cannot leave the controlling terminal: {e}");
    }
}

/// How long leftovers of a component may take to die after SIGKILL before the supervisor
/// records the exit anyway (a process stuck in the kernel).
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The supervisor's main. Returns the process exit code (0 when it recorded an outcome).
pub fn supervise_main(opts: &SuperviseOptions) -> i32 {
    use std::os::unix::fs::DirBuilderExt;
    let dir = opts.dir.as_path();
    detach_from_terminal();
    if let Err(e) = fs::DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        eprintln!("supervise: cannot create {}: {e}", dir.display());
        return 2;
    }
    let me = std::process::id();
    let rec = SupervisorRecord {
        pid: me,
        proc_start: proc_start_time(me).unwrap_or(0),
        started_ms: crate::now_ms(),
        fenced: false,
        nonce: opts.nonce.clone(),
    };
    match create_exclusive(&dir.join(SUPERVISOR_FILE), &serde_json::to_vec(&rec).unwrap()) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            eprintln!("supervise: {} already has a supervisor record; not starting twice", dir.display());
            return 3;
        }
        Err(e) => {
            eprintln!("supervise: cannot write record: {e}");
            return 2;
        }
    }
    // The account, before the barrier: a job whose user cannot run here fails at once.
    let account = match &opts.user {
        Some(name) if crate::users::can_switch() => match crate::users::resolve(name, opts.allow_root) {
            Ok(a) => Some(a),
            Err(e) => return record_exit(dir, &opts.nonce, Outcome::failed(format!("the job cannot run as its user: {e}"))),
        },
        Some(name) => {
            eprintln!("supervise: not running as root: the program runs as this account, not '{name}'");
            None
        }
        None => None,
    };
    // The start barrier: nothing runs before the daemon says so.
    if let Barrier::Abort(reason) = wait_at_barrier(dir, &rec) {
        eprintln!("supervise: {}: {reason}; the program was not started", dir.display());
        return write_exit(
            dir,
            ExitRecord {
                exit_code: None,
                signal: None,
                spawn_error: Some(format!("never started: {reason}")),
                finished_ms: crate::now_ms(),
                never_started: true,
                oom_killed: false,
                timed_out: false,
                site_fault: false,
                nonce: opts.nonce.clone(),
            },
        );
    }
    match run(opts, account.as_ref()) {
        Ok(outcome) | Err(outcome) => record_exit(dir, &opts.nonce, outcome),
    }
}

/// How the component ended, for `exit.json`.
#[derive(Debug, Default)]
struct Outcome {
    code: Option<i32>,
    signal: Option<i32>,
    error: Option<String>,
    oom_killed: bool,
    timed_out: bool,
    site_fault: bool,
}

impl Outcome {
    fn failed(error: String) -> Self {
        Outcome {
            error: Some(error),
            ..Default::default()
        }
    }
    fn site(error: String) -> Self {
        Outcome {
            error: Some(error),
            site_fault: true,
            ..Default::default()
        }
    }
}

/// Sets the component up (working directory, outputs, inputs, control group, sandbox), runs
/// the program and waits until every process of it is gone.
fn run(opts: &SuperviseOptions, account: Option<&crate::users::Account>) -> Result<Outcome, Outcome> {
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
            if let Some(bytes) = opts.memory_limit {
                cg.set_memory_limit(bytes).map_err(|e| site("cannot set the memory limit", e))?;
            }
            cg.record(dir).map_err(|e| site("cannot record the control group", e))?;
            Some(cg)
        }
        Err(e) => {
            eprintln!("supervise: warning: no control group ({e}); descendants that leave the process group cannot be tracked");
            None
        }
    };
    if let Err(e) = crate::sandbox::landlock_fully_supported() {
        eprintln!("supervise: warning: Landlock is not fully enforced on this kernel ({e}); the job is less confined");
    }
    let (program, args) = (&opts.command[0], &opts.command[1..]);
    let given: Vec<(std::ffi::OsString, std::ffi::OsString)> = std::env::vars_os().collect();
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
    let spawn = |confinement: crate::sandbox::Confinement| -> io::Result<std::process::Child> {
        let mut cmd = Command::new(&request.program);
        cmd.args(args)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(err.try_clone()?);
        let mut confinement = confinement;
        let cwd = start_dir
            .as_ref()
            .map(|d| std::ffi::CString::new(d.as_os_str().as_encoded_bytes()))
            .transpose()?;
        // SAFETY: the closure runs in the forked child before exec; `Confinement::enter` and
        // `chdir` only make system calls on descriptors and strings prepared before the fork
        // (no allocation, no locks), and this supervisor is single-threaded.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || {
                confinement.enter()?;
                if let Some(c) = &cwd {
                    nix::unistd::chdir(c.as_c_str())?;
                }
                Ok(())
            });
        }
        cmd.spawn()
    };
    let prepare = || crate::sandbox::Confinement::prepare(&request).map_err(|e| site("cannot prepare the sandbox", e));
    let confinement = prepare()?;
    let hides = confinement.hides();
    let child = match spawn(confinement) {
        Err(e) if hides => {
            // Mount namespaces may be refused (a container without CAP_SYS_ADMIN): without
            // one the program still runs confined by Landlock and its account.
            eprintln!("supervise: warning: cannot hide the data directory ({e}); running without a private mount namespace");
            spawn(prepare()?.without_mounts())
        }
        other => other,
    };
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            if let Some(cg) = &cgroup {
                cg.remove();
            }
            return Err(Outcome {
                code: Some(127),
                ..Outcome::failed(format!("cannot start '{program}': {e}"))
            });
        }
    };
    let running = RunningRecord {
        child_pid: child.id(),
        started_ms: crate::now_ms(),
    };
    let _ = publish(&dir.join(RUNNING_FILE), &serde_json::to_vec(&running).unwrap());
    let timer = opts.time_limit.map(|ms| WallClock::start(ms, child.id(), cgroup.clone()));
    let status = loop {
        match child.wait() {
            Ok(s) => break Some(s),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                eprintln!("supervise: wait failed: {e}");
                break None;
            }
        }
    };
    let timed_out = timer.is_some_and(|t| t.stop());
    let mut oom_killed = false;
    if let Some(cg) = &cgroup {
        // Whatever the program left behind ends with it.
        cg.kill_all();
        if !cg.wait_empty(DRAIN_TIMEOUT) {
            eprintln!("supervise: warning: processes of the component survive SIGKILL: {:?}", cg.pids());
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

/// How long a component that reached its wall time has between SIGTERM and SIGKILL (Slurm's
/// `KillWait`, shorter).
pub const KILL_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Enforces a wall-time limit: a thread that sleeps until the limit, then signals every
/// process of the component (its control group, else the program): SIGTERM, and SIGKILL
/// [`KILL_WAIT`] later.
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
    fn start(limit_ms: u64, pid: u32, cgroup: Option<crate::cgroup::Cgroup>) -> WallClock {
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        let state = std::sync::Arc::new((std::sync::Mutex::new(WallState::Running), std::sync::Condvar::new()));
        let shared = state.clone();
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

fn record_exit(dir: &Path, nonce: &str, o: Outcome) -> i32 {
    let rec = ExitRecord {
        exit_code: o.code,
        signal: o.signal,
        spawn_error: o.error,
        finished_ms: crate::now_ms(),
        never_started: false,
        oom_killed: o.oom_killed,
        timed_out: o.timed_out,
        site_fault: o.site_fault,
        nonce: nonce.to_string(),
    };
    write_exit(dir, rec)
}

fn write_exit(dir: &Path, rec: ExitRecord) -> i32 {
    match write_atomic(&dir.join(EXIT_FILE), &serde_json::to_vec(&rec).unwrap()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("supervise: cannot record exit: {e}");
            2
        }
    }
}

// ----- the start barrier ------------------------------------------------------------------

/// What the supervisor found at the start barrier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Barrier {
    /// `go`: run the program.
    Go,
    /// Give up without running it (the reason is recorded).
    Abort(String),
}

/// Where a supervisor's directory stands at the barrier, as the files say (no waiting).
/// `abort` wins over `go`: the daemon never writes both for a launch it means to run.
pub fn barrier_check(dir: &Path, me: &SupervisorRecord) -> Option<Barrier> {
    if dir.join(ABORT_FILE).exists() {
        return Some(Barrier::Abort("the launch was aborted before it started".into()));
    }
    if dir.join(GO_FILE).exists() {
        return Some(Barrier::Go);
    }
    match read_json::<SupervisorRecord>(&dir.join(SUPERVISOR_FILE)) {
        Some(r) if r == *me => None,
        Some(r) if r.fenced => Some(Barrier::Abort("the launch directory was fenced".into())),
        _ => Some(Barrier::Abort("the supervisor record is gone or not this supervisor's".into())),
    }
}

/// Waits until the daemon writes `go` (or `abort`) into `dir`. Woken by inotify on the
/// directory when available, and looks again every [`BARRIER_POLL_MS`] in any case.
pub fn wait_at_barrier(dir: &Path, me: &SupervisorRecord) -> Barrier {
    let watch = DirWatch::new(dir);
    loop {
        if let Some(b) = barrier_check(dir, me) {
            return b;
        }
        match &watch {
            Some(w) => w.wait(BARRIER_POLL_MS),
            None => std::thread::sleep(std::time::Duration::from_millis(BARRIER_POLL_MS)),
        }
    }
}

/// An inotify watch on a directory (new names, renames into it, its removal).
struct DirWatch {
    inotify: nix::sys::inotify::Inotify,
}

impl DirWatch {
    fn new(dir: &Path) -> Option<DirWatch> {
        use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).ok()?;
        let mask = AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_DELETE_SELF
            | AddWatchFlags::IN_MOVE_SELF;
        inotify.add_watch(dir, mask).ok()?;
        Some(DirWatch { inotify })
    }

    /// Returns after an event or `timeout_ms`, whichever comes first (events are drained).
    fn wait(&self, timeout_ms: u64) {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        let mut fds = [PollFd::new(self.inotify.as_fd(), PollFlags::POLLIN)];
        let timeout = PollTimeout::try_from(timeout_ms).unwrap_or(PollTimeout::MAX);
        match poll(&mut fds, timeout) {
            Ok(n) if n > 0 => while self.inotify.read_events().is_ok_and(|ev| !ev.is_empty()) {},
            Ok(_) => {}
            // EINTR or worse: do not spin.
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(timeout_ms.min(10))),
        }
    }
}

/// The daemon's side of the barrier: lets the supervisor in `dir` run its program (`go`,
/// written atomically; see "Durability" above).
pub fn release(dir: &Path) -> io::Result<()> {
    let body = format!("{{\"go_ms\":{}}}", crate::now_ms());
    publish(&dir.join(GO_FILE), body.as_bytes())
}

/// The daemon's side of the barrier: makes the supervisor held in `dir` give up without
/// running its program (`abort`, written atomically).
pub fn abort(dir: &Path) -> io::Result<()> {
    let body = format!("{{\"abort_ms\":{}}}", crate::now_ms());
    publish(&dir.join(ABORT_FILE), body.as_bytes())
}
