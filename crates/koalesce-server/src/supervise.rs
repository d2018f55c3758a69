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
//! - `running.json` — `{child_pid, started_ms}` once the program is spawned.
//! - `exit.json` — `{exit_code, signal, spawn_error, finished_ms}` once it ended.
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
}

impl ExitRecord {
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && self.spawn_error.is_none()
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
    };
    match write_atomic(&dir.join(EXIT_FILE), &serde_json::to_vec(&rec).unwrap()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("supervise: cannot record exit: {e}");
            2
        }
    }
}
