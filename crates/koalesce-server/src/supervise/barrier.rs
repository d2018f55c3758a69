//! The start barrier, the supervisor's side and the daemon's (see the parent module): the
//! supervisor waits until the daemon writes `go` or `abort` into the record directory, or
//! gives up on its own after its barrier timeout or at SIGTERM.

use std::fs;
use std::io;
use std::path::Path;

use super::{create_exclusive, publish, read_json, SupervisorRecord, ABORT_FILE, BARRIER_POLL_MS, GO_FILE, SUPERVISOR_FILE};

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

/// Waits until the daemon writes `go` (or `abort`) into `dir`, or for `limit` at most: then the
/// supervisor gives up on its own, writing `abort` itself (exclusively, so that the daemon's
/// view, [`crate::supervised::barrier_state`], says so too). Woken by inotify on the directory
/// when available, and looks again every [`BARRIER_POLL_MS`] in any case.
pub fn wait_at_barrier(dir: &Path, me: &SupervisorRecord, limit: std::time::Duration) -> Barrier {
    let deadline = std::time::Instant::now() + limit;
    let watch = DirWatch::new(dir);
    loop {
        if let Some(b) = barrier_check(dir, me) {
            return b;
        }
        if TERMINATED.load(std::sync::atomic::Ordering::SeqCst) {
            return Barrier::Abort("terminated (SIGTERM) at the start barrier".into());
        }
        let now = std::time::Instant::now();
        if now >= deadline {
            let body = format!("{{\"abort_ms\":{},\"by\":\"supervisor\"}}", crate::now_ms());
            return match create_exclusive(&dir.join(ABORT_FILE), body.as_bytes()) {
                // `go` may have come in between: it wins, as the daemon may have started the
                // other components already.
                Ok(()) if dir.join(GO_FILE).exists() => {
                    let _ = fs::remove_file(dir.join(ABORT_FILE));
                    Barrier::Go
                }
                Ok(()) | Err(_) => Barrier::Abort(format!(
                    "no go from the daemon within {} ms (the barrier timeout)",
                    limit.as_millis()
                )),
            };
        }
        let wait_ms = (deadline - now).as_millis().min(u128::from(BARRIER_POLL_MS)) as u64;
        match &watch {
            Some(w) => w.wait(wait_ms.max(1)),
            None => std::thread::sleep(std::time::Duration::from_millis(wait_ms.max(1))),
        }
    }
}

/// Set by SIGTERM or SIGINT while the supervisor waits at the barrier.
static TERMINATED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_terminate(_: nix::libc::c_int) {
    TERMINATED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// SIGTERM and SIGINT caught (into [`TERMINATED`]) while the supervisor waits at the barrier,
/// so that it removes what it set up before it goes; the defaults again after.
pub(super) struct BarrierSignals {
    old: Vec<(nix::sys::signal::Signal, nix::sys::signal::SigAction)>,
}

impl BarrierSignals {
    pub(super) fn catch() -> BarrierSignals {
        use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
        let action = SigAction::new(SigHandler::Handler(on_terminate), SaFlags::empty(), SigSet::empty());
        let old = [Signal::SIGTERM, Signal::SIGINT]
            .into_iter()
            // SAFETY: the handler only stores to an atomic (async-signal-safe).
            .filter_map(|sig| unsafe { sigaction(sig, &action) }.ok().map(|o| (sig, o)))
            .collect();
        BarrierSignals { old }
    }

    pub(super) fn restore(self) {
        for (sig, old) in self.old {
            // SAFETY: puts back the disposition the process had before `catch`.
            let _ = unsafe { nix::sys::signal::sigaction(sig, &old) };
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

/// The daemon's side of the barrier: lets the supervisor in `dir` run its program. `go` is a
/// second name (hard link) of the supervisor's own record, so it says which supervisor was let
/// through and costs no new inode (an inode allocation was the largest cost of a launch on
/// this machine's ext4: `koalesce bench e2e`, docs/operations.md). Before the supervisor
/// made its record (a single component's `go`, written before its submission) it is a hard
/// link of the shared marker [`GO_MARKER`] two levels up (the site's `jobs/` directory) where
/// the site keeps one (the local executor, [`go_marker`]), again no inode of its own; else a
/// file of its own (`{"go_ms": ...}`, which a Slurm launch's timing is read from).
pub fn release(dir: &Path) -> io::Result<()> {
    let go = dir.join(GO_FILE);
    let linked = match fs::hard_link(dir.join(SUPERVISOR_FILE), &go) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => link_marker(dir, &go),
        other => other,
    };
    match linked {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(_) => {
            let body = format!("{{\"go_ms\":{}}}", crate::now_ms());
            publish(&go, body.as_bytes())
        }
    }
}

/// The file every early `go` of a site that keeps one is a hard link of, in the launch
/// directories' grandparent.
pub const GO_MARKER: &str = ".go";

/// The shared `go` marker for launch directory `dir` (None: `dir` has no grandparent).
fn marker_of(dir: &Path) -> Option<std::path::PathBuf> {
    dir.parent()
        .and_then(Path::parent)
        .filter(|p| !p.as_os_str().is_empty())
        .map(|p| p.join(GO_MARKER))
}

/// Makes sure the shared `go` marker for launch directories like `dir` exists (the local
/// executor calls it for each launch: a look-up when it does).
pub fn go_marker(dir: &Path) -> io::Result<()> {
    match marker_of(dir) {
        Some(m) if !m.exists() => publish(&m, b"{\"go\":true}"),
        _ => Ok(()),
    }
}

/// Links `go` to the shared marker above `dir` where there is one. A marker with as many links
/// as the file system allows is replaced by a new one (the old keeps its links).
fn link_marker(dir: &Path, go: &Path) -> io::Result<()> {
    let marker = marker_of(dir).ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no directory for the go marker"))?;
    match fs::hard_link(&marker, go) {
        Err(e) if e.raw_os_error() == Some(nix::libc::EMLINK) => {
            publish(&marker, b"{\"go\":true}")?;
            fs::hard_link(&marker, go)
        }
        other => other,
    }
}

/// The daemon's side of the barrier: makes the supervisor held in `dir` give up without
/// running its program (`abort`, written atomically).
pub fn abort(dir: &Path) -> io::Result<()> {
    let body = format!("{{\"abort_ms\":{}}}", crate::now_ms());
    publish(&dir.join(ABORT_FILE), body.as_bytes())
}
