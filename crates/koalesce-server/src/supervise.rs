//! The component supervisor: `koalesce supervise --dir DIR [OPTIONS] -- PROGRAM ARGS...`
//! (hidden; [`SuperviseOptions`]).
//!
//! The daemon starts one supervisor per component: the local executor has its resident
//! launcher fork it ([`crate::launcher`]; a session of its own), a Slurm batch script or a
//! wrapper `exec`s it (a process group of its own; it then leaves the daemon's controlling
//! terminal, see `detach_from_terminal`), so the daemon's death, even a kill of the daemon's
//! process group, does not kill it. The supervisor keeps records in the component's *record
//! directory* `DIR`, each written to a temporary name, then linked/renamed into place, so a
//! reader sees a record whole or not at all. The program runs in `DIR/work/`, its working directory, and is
//! confined there ([`crate::sandbox`]): it can neither read nor write the records, so it can
//! neither forge its own outcome nor disturb the start barrier.
//!
//! ```text
//! DIR/                record directory (the daemon's and the supervisor's only)
//!   supervisor.json   {pid, proc_start, started_ms, nonce, cgroup} or {fenced: true}   (created
//!                     exclusively; `cgroup`: where the component's control group is made right
//!                     after, see crate::cgroup, so that it needs no record file of its own)
//!   held              set up, only the exec remains (the check-in the daemon waits for; a hard
//!                     link of supervisor.json, no inode of its own)
//!   go, abort         written by the daemon (the start barrier; go: a hard link of
//!                     supervisor.json where it exists, else of the local site's shared
//!                     marker `../../.go`: no inode of its own either); `abort` also by a
//!                     supervisor that gave up on its own (barrier timeout)
//!   running.json      the program started (a hard link of supervisor.json, no inode of its own)
//!   exit.json         {exit_code, signal, spawn_error, finished_ms, never_started, oom_killed, timed_out, site_fault, nonce,
//!                     running: {child_pid, started_ms, go_seen_ms, held_ms, realtime}} ([`read_running`])
//!   stdout, stderr    the program's output (it writes them through its descriptors)
//!   supervisor.log    the supervisor's own diagnostics (created only when there are any)
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
//! - Everything but the `exec` happens before the barrier (`launch`): the working directory,
//!   output files, staged inputs, start directory, control group (with its memory limit),
//!   environment and the prepared confinement; then the program's process is forked, enters
//!   its confinement (control group, mount namespace, Landlock, account) and waits on a pipe.
//!   A failure there is recorded at once (the program never ran). Then the supervisor writes
//!   `held`.
//! - Then the supervisor waits at the *start barrier*: it lets the program's process exec only
//!   once the daemon has written `go` into the directory, and it gives up if `abort` appears
//!   (or its record is no longer its own), at SIGTERM, or after `--barrier-timeout` (default
//!   [`DEFAULT_BARRIER_TIMEOUT_MS`]; the daemon is gone), recording `exit.json` with
//!   `never_started: true` and removing the control group. The daemon writes the `go` files of
//!   a launch only once *every* component's supervisor is `held`, so a launch the daemon
//!   abandons half-way (a crash between two spawns) never ran any program.
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
//! of a node that failed. So every record, `exit.json` too, is published without waiting for
//! the disk ([`publish`], [`create_exclusive`]): an outcome the daemon has read is durable in
//! its database; one it had not read yet when the machine crashed vouches for outputs
//! (`stdout`, `work/`) that were not flushed either, so the launch is better run again than
//! believed. An fsync per launch (two, with the directory's) made the disk flush its cache
//! hundreds of times a second beside the server's SQLite group commits, which waited behind
//! them (`koalesce bench e2e`, docs/operations.md).

/// `eprintln!` for the supervisor's diagnostics: to `supervisor.log`, created at the first
/// message, when [`log_lazily`] was called (a supervisor forked by the resident launcher);
/// else to the standard error the supervisor was started with.
macro_rules! say {
    ($($t:tt)*) => {{
        $crate::supervise::open_log();
        eprintln!($($t)*);
    }};
}

mod barrier;
mod launch;

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use barrier::{abort, barrier_check, go_marker, release, wait_at_barrier, Barrier, GO_MARKER};
pub use launch::KILL_WAIT;

pub const SUPERVISOR_FILE: &str = "supervisor.json";
pub const RUNNING_FILE: &str = "running.json";
pub const EXIT_FILE: &str = "exit.json";
pub const STDOUT_FILE: &str = "stdout";
pub const STDERR_FILE: &str = "stderr";
/// The supervisor's own diagnostics (created only when there are any, see [`log_lazily`]).
pub const LOG_FILE: &str = "supervisor.log";
/// The program's working directory, inside the record directory.
pub const WORK_DIR: &str = "work";
/// Copies of input files for a program that runs under another account.
pub const INPUTS_DIR: &str = "inputs";
/// Written by the daemon (atomically) to let a supervisor held at the start barrier run.
pub const GO_FILE: &str = "go";
/// Written by the daemon to make a supervisor held at the start barrier give up.
pub const ABORT_FILE: &str = "abort";
/// Written by the supervisor once the component is set up and only the `exec` remains: the
/// component is held at the start barrier, ready to start at once.
pub const HELD_FILE: &str = "held";
/// How long a supervisor waits at the start barrier by default before it gives up on its own
/// (`--barrier-timeout`; the server's `barrier_timeout_ms`): past it the daemon that
/// submitted the component is gone or has given up on the launch (its claim timeout is
/// shorter), and the processors the supervisor holds are better given back.
pub const DEFAULT_BARRIER_TIMEOUT_MS: u64 = 120_000;
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
    /// Where the component's control group is (made right after this record; where it could
    /// not be made, there is no such directory: see [`crate::cgroup::Cgroup::recorded`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<crate::cgroup::Cgroup>,
}

/// How the program was started: in `exit.json` under `running` ([`read_running`]; supervisors
/// of earlier versions wrote it into `running.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningRecord {
    pub child_pid: u32,
    pub started_ms: u64,
    /// When the supervisor saw `go` (so `started_ms - go_seen_ms` is what starting the
    /// program took after the barrier).
    #[serde(default)]
    pub go_seen_ms: u64,
    /// When the supervisor reported the component held (0: `go` was there first). `held` is a
    /// hard link of `supervisor.json`, so it carries no time of its own.
    #[serde(default)]
    pub held_ms: u64,
    /// The supervisor waited for `go` and started the program's process at a real-time
    /// priority (the program itself runs at its normal one; see [`crate::realtime`]).
    #[serde(default)]
    pub realtime: bool,
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

static LAZY_LOG: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

/// Sends this process's standard error to `path`, created (0600, appended) only when the first
/// diagnostic is written (`say!`) or on a panic: most launches have nothing to say, and a
/// file fewer is a new inode fewer per launch. Call it in a single-threaded process (the
/// forked supervisor before it starts).
pub fn log_lazily(path: PathBuf) {
    *LAZY_LOG.lock().unwrap_or_else(|p| p.into_inner()) = Some(path);
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        open_log();
        default(info)
    }));
}

/// Opens the log [`log_lazily`] named, once, onto standard error.
pub fn open_log() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let Some(path) = LAZY_LOG.lock().unwrap_or_else(|p| p.into_inner()).take() else {
        return;
    };
    if let Ok(f) = fs::OpenOptions::new().create(true).append(true).mode(0o600).open(&path) {
        // SAFETY: dup2 onto standard error, which this process owns; `f` stays valid meanwhile.
        unsafe { nix::libc::dup2(f.as_raw_fd(), 2) };
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
    /// With `--time-limit`: send this signal before the limit, as `[B:]SIG[@SECONDS]` (default
    /// 60 s; `B:` the program alone, else the component's other processes).
    #[arg(long, value_name = "SPEC", value_parser = parse_signal_spec)]
    pub signal: Option<String>,
    /// Directory the program starts in, relative to its working directory (created).
    #[arg(long, value_name = "DIR")]
    pub chdir: Option<String>,
    /// Give up at the start barrier after this many milliseconds without `go` (the daemon is
    /// gone), recording that the program never started [default: 120000].
    #[arg(long, value_name = "MS")]
    pub barrier_timeout: Option<u64>,
    /// Give the program only these variables of the supervisor's environment
    /// (comma-separated names) and Slurm's (`SLURM*`); without it, all of them. A Slurm batch
    /// script starts the supervisor with the job's variables plus what Slurm sets (HOME,
    /// SHELL, ...): this keeps the job's and Slurm's, without a shell loop in the script.
    #[arg(long, value_name = "NAMES")]
    pub env_keep: Option<String>,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
    /// The job's environment, when it is not this process's own (a supervisor forked by the
    /// resident launcher, see [`crate::launcher`]); None: this process's environment.
    #[arg(skip)]
    pub environment: Option<Vec<(std::ffi::OsString, std::ffi::OsString)>>,
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
        if let Some(s) = &self.signal {
            opt("--signal", s.into());
        }
        if let Some(d) = &self.chdir {
            opt("--chdir", d.into());
        }
        if let Some(t) = self.barrier_timeout {
            opt("--barrier-timeout", t.to_string().into());
        }
        if let Some(k) = &self.env_keep {
            opt("--env-keep", k.into());
        }
        if self.allow_root {
            a.push("--allow-root".into());
        }
        a.push("--".into());
        a.extend(self.command.iter().map(OsString::from));
        a
    }
}

/// `--signal`: checked when the options are read (the wall clock parses it again).
fn parse_signal_spec(s: &str) -> Result<String, String> {
    s.parse::<koalesce_api::timing::EarlySignal>().map(|e| e.to_string())
}

/// The variables of `given` the program gets: with `keep` (`--env-keep`, comma-separated
/// names) those it names and Slurm's (`SLURM*`), else all.
pub fn kept_environment(
    given: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    keep: Option<&str>,
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let Some(keep) = keep else {
        return given.into_iter().collect();
    };
    let names: std::collections::HashSet<&str> = keep.split(',').filter(|n| !n.is_empty()).collect();
    given
        .into_iter()
        .filter(|(k, _)| k.to_str().is_some_and(|k| k.starts_with("SLURM") || names.contains(k)))
        .collect()
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
        say!("supervise: warning: cannot leave the controlling terminal: {e}");
    }
}

/// The supervisor's main. Returns the process exit code (0 when it recorded an outcome).
pub fn supervise_main(opts: &SuperviseOptions) -> i32 {
    let dir = opts.dir.as_path();
    detach_from_terminal();
    // Whoever started the supervisor made the directory (the local executor, the Slurm
    // backend). One that is gone was abandoned and removed (a supervisor that starts late,
    // after its launch was cancelled and cleaned up): re-creating it would hold a barrier no
    // daemon knows of.
    if !dir.is_dir() {
        say!("supervise: {} does not exist (the launch was removed); not starting", dir.display());
        return 2;
    }
    let me = std::process::id();
    // Where the component's control group will be, in the record (no file of its own); it
    // is made after the check-in, in `launch::prepare`.
    let cgroup = launch::planned_cgroup(opts);
    let rec = SupervisorRecord {
        pid: me,
        proc_start: proc_start_time(me).unwrap_or(0),
        started_ms: crate::now_ms(),
        fenced: false,
        nonce: opts.nonce.clone(),
        cgroup: cgroup.clone(),
    };
    match create_exclusive(&dir.join(SUPERVISOR_FILE), &serde_json::to_vec(&rec).unwrap()) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            say!("supervise: {} already has a supervisor record; not starting twice", dir.display());
            return 3;
        }
        Err(e) => {
            say!("supervise: cannot write record: {e}");
            return 2;
        }
    }
    // The account, before the barrier: a job whose user cannot run here fails at once.
    let account = match &opts.user {
        Some(name) if crate::users::can_switch() => match crate::users::resolve_cached(name, opts.allow_root) {
            Ok(a) => Some(a),
            Err(e) => return record_exit(dir, &opts.nonce, Outcome::failed(format!("the job cannot run as its user: {e}"))),
        },
        Some(name) => {
            say!("supervise: not running as root: the program runs as this account, not '{name}'");
            None
        }
        None => None,
    };
    // Everything but the exec, before the barrier: after `go` the program starts at once, so
    // the components of a coupled job start together however loaded their hosts are.
    // A SIGTERM at the barrier (`scancel` of a held Slurm job) makes the supervisor give up
    // like an abort, cleaning up (caught before the program's process is forked: it must not
    // die of it while it waits either).
    let terminated = barrier::BarrierSignals::catch();
    let prepared = match launch::prepare(opts, account.as_ref(), cgroup) {
        Ok(p) => p,
        Err(outcome) => return record_exit(dir, &opts.nonce, outcome),
    };
    // Released already (`go` written before the submission: a launch of one component, or
    // while the supervisor set up): nothing to wait for, the program's process goes through
    // its gate at once.
    if barrier_check(dir, &rec) == Some(Barrier::Go) {
        terminated.restore();
        let go_seen_ms = crate::now_ms();
        return match prepared.hold(true).and_then(|held| held.release(opts, go_seen_ms)) {
            Ok(outcome) | Err(outcome) => record_exit(dir, &opts.nonce, outcome),
        };
    }
    let mut held = match prepared.hold(false) {
        Ok(h) => h,
        Err(outcome) => return record_exit(dir, &opts.nonce, outcome),
    };
    // Real-time from here to the start (where permitted): see crate::realtime.
    held.raise();
    // Held: the daemon starts the launch once every component has this.
    // A hard link of the supervisor's record, like `go`: no new inode (see "Durability").
    if let Err(e) = fs::hard_link(dir.join(SUPERVISOR_FILE), dir.join(HELD_FILE)) {
        held.discard();
        return record_exit(dir, &opts.nonce, Outcome::site(format!("cannot report the component held: {e}")));
    }
    held.held_ms = crate::now_ms();
    // The start barrier: nothing runs before the daemon says so.
    let limit = std::time::Duration::from_millis(opts.barrier_timeout.unwrap_or(DEFAULT_BARRIER_TIMEOUT_MS));
    let barrier = wait_at_barrier(dir, &rec, limit);
    terminated.restore();
    if let Barrier::Abort(reason) = barrier {
        held.discard();
        say!("supervise: {}: {reason}; the program was not started", dir.display());
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
    let go_seen_ms = crate::now_ms();
    match held.release(opts, go_seen_ms) {
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
    /// How the program was started, if it was.
    running: Option<RunningRecord>,
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
    write_exit_running(dir, rec, o.running)
}

fn write_exit(dir: &Path, rec: ExitRecord) -> i32 {
    write_exit_running(dir, rec, None)
}

/// `exit.json`: the exit record, with how the program was started (one file for both).
#[derive(Serialize)]
struct ExitFile {
    #[serde(flatten)]
    exit: ExitRecord,
    #[serde(skip_serializing_if = "Option::is_none")]
    running: Option<RunningRecord>,
}

/// How the program in `dir` was started: from its `exit.json` once it ended, or from a
/// `running.json` of its own (supervisors of earlier versions). None while it runs.
pub fn read_running(dir: &Path) -> Option<RunningRecord> {
    #[derive(Deserialize)]
    struct Running {
        running: Option<RunningRecord>,
    }
    read_json::<Running>(&dir.join(EXIT_FILE))
        .and_then(|f| f.running)
        .or_else(|| read_json(&dir.join(RUNNING_FILE)))
}

fn write_exit_running(dir: &Path, exit: ExitRecord, running: Option<RunningRecord>) -> i32 {
    match publish(&dir.join(EXIT_FILE), &serde_json::to_vec(&ExitFile { exit, running }).unwrap()) {
        Ok(()) => 0,
        Err(e) => {
            say!("supervise: cannot record exit: {e}");
            2
        }
    }
}
