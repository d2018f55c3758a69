//! The component supervisor: `koalesce supervise --dir DIR -- PROGRAM ARGS...` (hidden).
//!
//! The daemon spawns one supervisor per component, in a new session (setsid), so the daemon's
//! death does not kill it. The supervisor keeps durable records in the component's directory,
//! each written to a temporary name, fsynced, then linked/renamed into place (and the
//! directory fsynced):
//!
//! - `supervisor.json` — created first, *exclusively* (hard link of a temp file, fails if it
//!   exists): `{pid, proc_start, started_ms}`. If it already exists the supervisor exits without
//!   running anything, so a component can never be started twice. The daemon uses the same
//!   exclusive create to *fence* a launch it gave up on (`{"fenced": true}`).
//! - then the supervisor waits at the *start barrier*: it runs the program only once the daemon
//!   has written `go` into the directory, and it gives up if `abort` appears (or its record is
//!   no longer its own), recording `exit.json` with `never_started: true`. The daemon writes
//!   the `go` files of a launch only once *every* component's supervisor has its record, so a
//!   launch the daemon abandons half-way (a crash between two spawns) never ran any program.
//! - `running.json` — `{child_pid, started_ms}` once the program is spawned.
//! - `exit.json` — `{exit_code, signal, spawn_error, finished_ms, never_started}` once it
//!   ended (or gave up at the barrier).
//!
//! The program's stdout and stderr go to `stdout` and `stderr` in the same directory, which is
//! also its working directory.

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
}

impl ExitRecord {
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && self.spawn_error.is_none() && !self.never_started
    }
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

/// Creates `path` with `bytes` only if it does not exist (atomic, durable). Returns
/// `ErrorKind::AlreadyExists` when it does.
pub fn create_exclusive(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = tmp_name(path);
    {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    let r = fs::hard_link(&tmp, path);
    let _ = fs::remove_file(&tmp);
    r?;
    fsync_dir(path.parent().unwrap_or(Path::new(".")))
}

pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    let bytes = fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
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

/// The supervisor's main. Returns the process exit code (0 when it recorded an outcome).
pub fn supervise_main(dir: &Path, program: &str, args: &[String]) -> i32 {
    // A session of our own (already one when the daemon spawned us with setsid).
    unsafe {
        libc::setsid();
    }
    if let Err(e) = fs::create_dir_all(dir) {
        eprintln!("supervise: cannot create {}: {e}", dir.display());
        return 2;
    }
    let me = std::process::id();
    let rec = SupervisorRecord {
        pid: me,
        proc_start: proc_start_time(me).unwrap_or(0),
        started_ms: crate::now_ms(),
        fenced: false,
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
            },
        );
    }
    let open = |name: &str| OpenOptions::new().create(true).append(true).open(dir.join(name));
    let (out, err) = match (open(STDOUT_FILE), open(STDERR_FILE)) {
        (Ok(o), Ok(e)) => (o, e),
        (Err(e), _) | (_, Err(e)) => return record_exit(dir, None, None, Some(format!("cannot open output files: {e}"))),
    };
    let child = Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return record_exit(dir, Some(127), None, Some(format!("cannot start '{program}': {e}"))),
    };
    let running = RunningRecord {
        child_pid: child.id(),
        started_ms: crate::now_ms(),
    };
    let _ = write_atomic(&dir.join(RUNNING_FILE), &serde_json::to_vec(&running).unwrap());
    let status = loop {
        match child.wait() {
            Ok(s) => break s,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return record_exit(dir, None, None, Some(format!("wait failed: {e}"))),
        }
    };
    use std::os::unix::process::ExitStatusExt;
    record_exit(dir, status.code(), status.signal(), None)
}

fn record_exit(dir: &Path, code: Option<i32>, signal: Option<i32>, spawn_error: Option<String>) -> i32 {
    let rec = ExitRecord {
        exit_code: code,
        signal,
        spawn_error,
        finished_ms: crate::now_ms(),
        never_started: false,
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
    fd: std::os::fd::OwnedFd,
}

impl DirWatch {
    fn new(dir: &Path) -> Option<DirWatch> {
        use std::os::fd::FromRawFd;
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
        let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if raw < 0 {
            return None;
        }
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
        let mask = libc::IN_CREATE | libc::IN_MOVED_TO | libc::IN_DELETE | libc::IN_DELETE_SELF | libc::IN_MOVE_SELF;
        let wd = unsafe { libc::inotify_add_watch(raw, path.as_ptr(), mask) };
        (wd >= 0).then_some(DirWatch { fd })
    }

    /// Returns after an event or `timeout_ms`, whichever comes first (events are drained).
    fn wait(&self, timeout_ms: u64) {
        use std::os::fd::AsRawFd;
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms as libc::c_int) };
        if n > 0 {
            let mut buf = [0u8; 4096];
            while unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
        } else if n < 0 {
            // EINTR or worse: do not spin.
            std::thread::sleep(std::time::Duration::from_millis(timeout_ms.min(10)));
        }
    }
}

/// The daemon's side of the barrier: lets the supervisor in `dir` run its program (`go`,
/// written atomically and durably).
pub fn release(dir: &Path) -> io::Result<()> {
    let body = format!("{{\"go_ms\":{}}}", crate::now_ms());
    write_atomic(&dir.join(GO_FILE), body.as_bytes())
}

/// The daemon's side of the barrier: makes the supervisor held in `dir` give up without
/// running its program (`abort`, written atomically and durably).
pub fn abort(dir: &Path) -> io::Result<()> {
    let body = format!("{{\"abort_ms\":{}}}", crate::now_ms());
    write_atomic(&dir.join(ABORT_FILE), body.as_bytes())
}
