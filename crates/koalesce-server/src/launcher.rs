//! The resident launcher: one small single-threaded process per local site, started once by
//! the local executor (`koalesce supervise-launcher`, `koalesce-supervise --resident-launcher`),
//! that forks a component's supervisor on request instead of the daemon spawning (exec'ing)
//! the whole server binary for every component. The forked supervisor runs exactly what
//! `koalesce supervise` runs ([`crate::supervise::supervise_main`], with options parsed from
//! the same command line), so confinement is unchanged: it still creates its record
//! exclusively, drops to the job's account, enters Landlock and its control group.
//!
//! Exec'ing the 130 MB binary (dynamic loading, page faults, parsing) cost a job about 1.5 ms
//! of CPU; a fork of a process that touched a few pages costs a fraction of that. The
//! launcher also keeps the account lookups (NSS) and the opened system paths of its sandbox
//! rules (all of /etc but its secrets) of the last half minute, and the control-group
//! hierarchy, which the forked supervisor inherits.
//!
//! **Protocol** (over a Unix socketpair: the launcher's standard input). A request is one
//! frame: `u32` length (little-endian, at most [`MAX_FRAME`]) then the body: the supervisor's
//! arguments (`u32` count, each `u32` length + bytes), its environment (`u32` count, each key
//! and value as above) and nothing after. The answer is one frame of JSON ([`Reply`]): the
//! supervisor's pid and process start time, or an error with its errno (so that a fork refused
//! for want of processes is [`crate::backend::BackendError::Exhausted`]). A malformed request
//! is answered with an error; a frame the launcher cannot read whole makes it exit (the
//! backend starts a new one). End of file on the socket (the daemon is gone) makes it exit;
//! the supervisors it forked lead sessions of their own and run on.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::supervise::SuperviseOptions;

/// The largest request or reply frame (arguments and environment of one component).
pub const MAX_FRAME: usize = 8 << 20;

/// The argument that makes `koalesce-supervise` a resident launcher.
pub const LAUNCHER_FLAG: &str = "--resident-launcher";

/// One launch: the supervisor's command line (as [`SuperviseOptions::to_args`] renders it)
/// and its environment (the job's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub args: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
}

/// The launcher's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// The supervisor was forked: its pid and start time (field 22 of /proc/PID/stat).
    Launched { pid: u32, proc_start: u64 },
    /// Nothing was forked.
    Failed { error: String, errno: Option<i32> },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtocolError {
    #[error("launch request truncated: wanted {wanted} more bytes for {what}, {left} left")]
    Truncated { what: &'static str, wanted: usize, left: usize },
    #[error("launch request has {0} bytes after its end")]
    Trailing(usize),
    #[error("launch frame of {0} bytes is over the limit of {MAX_FRAME}")]
    TooLarge(usize),
    #[error("launch request: {what} contains a NUL byte")]
    Nul { what: &'static str },
    #[error("launch request: environment variable name {0:?} is empty or contains '='")]
    BadName(String),
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

impl Request {
    /// The request's body (without the frame's length).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(self.args.len() as u32).to_le_bytes());
        for a in &self.args {
            put(&mut out, a.as_bytes());
        }
        out.extend_from_slice(&(self.env.len() as u32).to_le_bytes());
        for (k, v) in &self.env {
            put(&mut out, k.as_bytes());
            put(&mut out, v.as_bytes());
        }
        out
    }

    /// Parses a request body; every length is checked against what is left.
    pub fn decode(body: &[u8]) -> Result<Request, ProtocolError> {
        struct Cursor<'a>(&'a [u8]);
        impl<'a> Cursor<'a> {
            fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ProtocolError> {
                if self.0.len() < n {
                    return Err(ProtocolError::Truncated {
                        what,
                        wanted: n,
                        left: self.0.len(),
                    });
                }
                let (a, b) = self.0.split_at(n);
                self.0 = b;
                Ok(a)
            }
            fn u32(&mut self, what: &'static str) -> Result<usize, ProtocolError> {
                let b = self.take(4, what)?;
                Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            }
            fn string(&mut self, what: &'static str) -> Result<OsString, ProtocolError> {
                let n = self.u32(what)?;
                let b = self.take(n, what)?;
                if b.contains(&0) {
                    return Err(ProtocolError::Nul { what });
                }
                Ok(OsString::from_vec(b.to_vec()))
            }
        }
        let mut c = Cursor(body);
        // Counts are not trusted for allocation: each item needs at least 4 bytes.
        let n = c.u32("the argument count")?;
        let mut args = Vec::with_capacity(n.min(body.len() / 4));
        for _ in 0..n {
            args.push(c.string("an argument")?);
        }
        let n = c.u32("the environment count")?;
        let mut env = Vec::with_capacity(n.min(body.len() / 8));
        for _ in 0..n {
            let k = c.string("an environment variable's name")?;
            if k.is_empty() || k.as_bytes().contains(&b'=') {
                return Err(ProtocolError::BadName(k.to_string_lossy().into_owned()));
            }
            env.push((k, c.string("an environment variable's value")?));
        }
        if !c.0.is_empty() {
            return Err(ProtocolError::Trailing(c.0.len()));
        }
        Ok(Request { args, env })
    }
}

/// Writes one frame.
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> io::Result<()> {
    if body.len() > MAX_FRAME {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, ProtocolError::TooLarge(body.len())));
    }
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
    buf.extend_from_slice(body);
    w.write_all(&buf)
}

/// Reads one frame; `Ok(None)` at end of file before its first byte.
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let n = u32::from_le_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(io::Error::new(io::ErrorKind::InvalidData, ProtocolError::TooLarge(n)));
    }
    let mut body = vec![0u8; n];
    r.read_exact(&mut body)?;
    Ok(Some(body))
}

// ---------------------------------------------------------------------------------------------
// The launcher process.

#[derive(clap::Parser)]
#[command(name = "supervise")]
struct SuperviseCli {
    #[command(flatten)]
    opts: SuperviseOptions,
}

/// The launcher's main: serves requests on standard input (the socket) until end of file.
/// Returns the process exit code.
pub fn launcher_main() -> i32 {
    let sock = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => UnixStream::from(fd),
        Err(e) => {
            eprintln!("koalesce launcher: no socket on standard input: {e}");
            return 2;
        }
    };
    serve(sock, true)
}

/// Serves requests on `sock`; `reap`: reap every ended child (the launcher process; not in a
/// unit test, whose process has children of other tests).
fn serve(mut sock: UnixStream, reap_children: bool) -> i32 {
    loop {
        if reap_children {
            reap();
        }
        // Wake now and then to reap supervisors that ended (no zombie lingers long).
        let ready = {
            let mut fds = [nix::poll::PollFd::new(sock.as_fd(), nix::poll::PollFlags::POLLIN)];
            nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(200u16))
        };
        match ready {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                eprintln!("koalesce launcher: poll: {e}");
                return 2;
            }
        }
        let body = match read_frame(&mut sock) {
            Ok(Some(b)) => b,
            Ok(None) => return 0,
            Err(e) => {
                // The stream cannot be trusted to be in step any more: answer and leave.
                let _ = answer(&mut sock, &failed(format!("unreadable request: {e}"), None));
                eprintln!("koalesce launcher: unreadable request: {e}");
                return 1;
            }
        };
        let reply = match Request::decode(&body) {
            Ok(req) => launch(&req, sock.as_raw_fd()),
            Err(e) => failed(e.to_string(), None),
        };
        if answer(&mut sock, &reply).is_err() {
            return 0;
        }
    }
}

fn failed(error: String, errno: Option<i32>) -> Reply {
    Reply::Failed { error, errno }
}

fn answer(sock: &mut UnixStream, reply: &Reply) -> io::Result<()> {
    // A Reply always serializes.
    write_frame(sock, &serde_json::to_vec(reply).unwrap_or_default())
}

/// Reaps every supervisor that ended.
fn reap() {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    while let Ok(s) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if s == WaitStatus::StillAlive {
            break;
        }
    }
}

/// Parses the request as `koalesce supervise` would and forks its supervisor.
fn launch(req: &Request, sock: i32) -> Reply {
    use clap::Parser;
    let argv = std::iter::once(OsString::from("supervise")).chain(req.args.iter().cloned());
    let mut opts = match SuperviseCli::try_parse_from(argv) {
        Ok(c) => c.opts,
        Err(e) => return failed(format!("bad supervisor arguments: {}", e.render()), None),
    };
    opts.environment = Some(req.env.clone());
    // The account, looked up here so that the supervisor finds it in its copy of the cache.
    if let Some(name) = opts.user.as_deref().filter(|_| crate::users::can_switch()) {
        let _ = crate::users::resolve_cached(name, opts.allow_root);
    }
    // The system paths every sandbox reads, opened here once a while: the supervisor
    // inherits the descriptors.
    drop(crate::sandbox::system_paths());
    crate::cgroup::detect_hierarchy();
    let title = process_title(&opts.dir);
    // SAFETY: the launcher is single-threaded, so the child may do anything the parent could
    // (allocate, take locks): no other thread held a lock at the fork.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            let code = supervisor_child(&opts, sock, &title);
            std::process::exit(code)
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            let pid = child.as_raw() as u32;
            match crate::supervise::proc_start_time(pid) {
                Some(proc_start) => Reply::Launched { pid, proc_start },
                // Already gone (and not yet reaped: a zombie reads as gone too): it made its
                // records or failed to; the daemon reads them.
                None => Reply::Launched { pid, proc_start: 0 },
            }
        }
        Err(e) => failed(format!("cannot fork a supervisor: {e}"), Some(e as i32)),
    }
}

/// `ks:JOB/aN-cI` (the kernel keeps 15 bytes): what `ps`/`top` show for a forked supervisor.
fn process_title(dir: &Path) -> Vec<u8> {
    let launch = dir.file_name().unwrap_or_default().as_bytes();
    let job = dir.parent().and_then(Path::file_name).unwrap_or_default().as_bytes();
    let mut t = b"ks:".to_vec();
    t.extend_from_slice(job);
    t.push(b'/');
    t.extend_from_slice(launch);
    t.truncate(15);
    t.retain(|&b| b != 0);
    t
}

/// In the forked child: become the supervisor of `opts.dir` (a session of its own, standard
/// descriptors on /dev/null, diagnostics in `supervisor.log` created only if there are any).
fn supervisor_child(opts: &SuperviseOptions, sock: i32, title: &[u8]) -> i32 {
    // The daemon's end of nothing: only the launcher talks on the socket.
    // SAFETY: `sock` is the launcher's descriptor, not used again in this process.
    unsafe { nix::libc::close(sock) };
    let _ = nix::unistd::setsid();
    if let Ok(name) = std::ffi::CString::new(title) {
        let _ = nix::sys::prctl::set_name(&name);
    }
    let _ = std::env::set_current_dir(&opts.dir);
    if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard descriptors of this (single-threaded) process.
            unsafe { nix::libc::dup2(null.as_raw_fd(), fd) };
        }
    }
    crate::supervise::log_lazily(opts.dir.join(crate::supervise::LOG_FILE));
    crate::supervise::supervise_main(opts)
}

// ---------------------------------------------------------------------------------------------
// The daemon's side.

/// A supervisor forked by the launcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launched {
    pub pid: u32,
    pub proc_start: u64,
}

struct Running {
    child: Child,
    sock: UnixStream,
}

/// The daemon's handle on its resident launcher: started at the first launch, started again
/// when it is found dead (a write that fails with EPIPE, end of file instead of an answer).
pub struct ResidentLauncher {
    program: PathBuf,
    args: Vec<String>,
    running: Mutex<Option<Running>>,
}

/// How long an answer may take before the launcher counts as hung (a fork on a machine
/// under heavy load takes milliseconds).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

impl ResidentLauncher {
    /// `program args...` starts a launcher (it is not started yet).
    pub fn new(program: &Path, args: &[String]) -> Self {
        ResidentLauncher {
            program: program.to_path_buf(),
            args: args.to_vec(),
            running: Mutex::new(None),
        }
    }

    /// The launcher's pid, when one runs.
    pub fn pid(&self) -> Option<u32> {
        let mut guard = self.lock();
        let r = guard.as_mut()?;
        matches!(r.child.try_wait(), Ok(None)).then(|| r.child.id())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Running>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn start(&self) -> io::Result<Running> {
        let (ours, theirs) = UnixStream::pair()?;
        ours.set_read_timeout(Some(ANSWER_TIMEOUT))?;
        let child = Command::new(&self.program)
            .args(&self.args)
            // Nothing of the daemon's environment: each supervisor gets its job's.
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            // Out of the daemon's process group: a kill of that group leaves the launcher
            // (and it leaves when the daemon's end of the socket closes).
            .process_group(0)
            .spawn()?;
        Ok(Running { child, sock: ours })
    }

    /// Forks the supervisor of `req`; starts the launcher first if none runs, and once again
    /// if the one that ran is found dead. A second supervisor for the same directory (the old
    /// launcher forked one before it died) stops at once: `supervisor.json` is created
    /// exclusively.
    pub fn launch(&self, req: &Request) -> io::Result<Launched> {
        let body = req.encode();
        let mut guard = self.lock();
        for attempt in 0..2 {
            let alive = guard.as_mut().is_some_and(|r| matches!(r.child.try_wait(), Ok(None)));
            if !alive {
                if let Some(mut old) = guard.take() {
                    let _ = old.child.kill();
                    let _ = old.child.wait();
                }
                *guard = Some(self.start()?);
            }
            let Some(r) = guard.as_mut() else { unreachable!("started above") };
            let answer = write_frame(&mut r.sock, &body).and_then(|()| read_frame(&mut r.sock));
            match answer {
                Ok(Some(frame)) => {
                    return match serde_json::from_slice::<Reply>(&frame) {
                        Ok(Reply::Launched { pid, proc_start }) => Ok(Launched { pid, proc_start }),
                        Ok(Reply::Failed { error, errno: Some(n) }) => Err(io::Error::new(
                            io::Error::from_raw_os_error(n).kind(),
                            LauncherError { error, errno: n },
                        )),
                        Ok(Reply::Failed { error, errno: None }) => Err(io::Error::other(error)),
                        Err(e) => Err(io::Error::other(format!("unreadable answer from the launcher: {e}"))),
                    };
                }
                // Dead (end of file, EPIPE, reset): start another and try once more.
                Ok(None) if attempt == 0 => {}
                Err(e)
                    if attempt == 0
                        && matches!(
                            e.kind(),
                            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof
                        ) => {}
                Ok(None) => return Err(io::Error::other("the launcher ended without answering")),
                Err(e) => {
                    // Hung or out of step: a new one next time.
                    if let Some(mut old) = guard.take() {
                        let _ = old.child.kill();
                        let _ = old.child.wait();
                    }
                    return Err(io::Error::new(e.kind(), format!("the launcher did not answer: {e}")));
                }
            }
            if let Some(mut old) = guard.take() {
                let _ = old.child.kill();
                let _ = old.child.wait();
            }
        }
        Err(io::Error::other("the launcher ended without answering"))
    }
}

impl Drop for ResidentLauncher {
    /// Closes the socket (the launcher leaves at end of file) and reaps it.
    fn drop(&mut self) {
        if let Some(Running { mut child, sock }) = self.lock().take() {
            drop(sock);
            for _ in 0..100 {
                if !matches!(child.try_wait(), Ok(None)) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A launch the launcher refused, with the errno of the failed call (so that
/// [`std::io::Error::raw_os_error`]-based checks see it through [`LauncherError::errno`]).
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct LauncherError {
    pub error: String,
    pub errno: i32,
}

/// The errno behind `e`, also when the launcher reported it.
pub fn errno_of(e: &io::Error) -> Option<i32> {
    e.raw_os_error()
        .or_else(|| e.get_ref().and_then(|i| i.downcast_ref::<LauncherError>()).map(|l| l.errno))
}

/// The request for a supervisor with `opts` and environment `env`.
pub fn request(opts: &SuperviseOptions, env: impl IntoIterator<Item = (impl AsRef<OsStr>, impl AsRef<OsStr>)>) -> Request {
    Request {
        args: opts.to_args(),
        env: env
            .into_iter()
            .map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned()))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> Request {
        Request {
            args: vec![
                "--dir".into(),
                "/d/jobs/7/a1-c0".into(),
                "--".into(),
                "/bin/true".into(),
                OsString::from_vec(vec![0xff, b'x']),
            ],
            env: vec![("PATH".into(), "/bin".into()), ("EMPTY".into(), "".into())],
        }
    }

    #[test]
    fn a_request_survives_encoding() {
        assert_eq!(Request::decode(&req().encode()).unwrap(), req());
        let empty = Request { args: vec![], env: vec![] };
        assert_eq!(Request::decode(&empty.encode()).unwrap(), empty);
    }

    /// Every prefix of a valid request, and hostile counts and lengths, give an error (no
    /// panic, no huge allocation).
    #[test]
    fn short_and_hostile_requests_are_errors() {
        let body = req().encode();
        for n in 0..body.len() {
            assert!(
                matches!(Request::decode(&body[..n]), Err(ProtocolError::Truncated { .. })),
                "prefix of {n} bytes"
            );
        }
        let mut trailing = body.clone();
        trailing.push(1);
        assert_eq!(Request::decode(&trailing), Err(ProtocolError::Trailing(1)));
        // A count of 4 billion arguments with nothing behind it.
        assert!(matches!(
            Request::decode(&u32::MAX.to_le_bytes()),
            Err(ProtocolError::Truncated { .. })
        ));
        // One argument claiming 4 GB.
        let mut huge = 1u32.to_le_bytes().to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(Request::decode(&huge), Err(ProtocolError::Truncated { wanted, .. }) if wanted == u32::MAX as usize));
        let nul = Request {
            args: vec!["a\0b".into()],
            env: vec![],
        };
        assert_eq!(Request::decode(&nul.encode()), Err(ProtocolError::Nul { what: "an argument" }));
        for bad in ["", "A=B"] {
            let r = Request {
                args: vec![],
                env: vec![(bad.into(), "v".into())],
            };
            assert_eq!(Request::decode(&r.encode()), Err(ProtocolError::BadName(bad.into())));
        }
    }

    #[test]
    fn frames_over_the_limit_or_cut_short_are_errors() {
        let mut big = ((MAX_FRAME + 1) as u32).to_le_bytes().to_vec();
        big.extend_from_slice(b"xx");
        assert_eq!(read_frame(&mut &big[..]).unwrap_err().kind(), io::ErrorKind::InvalidData);
        let mut cut = 10u32.to_le_bytes().to_vec();
        cut.extend_from_slice(b"abc");
        assert_eq!(read_frame(&mut &cut[..]).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(read_frame(&mut &[1u8, 0][..]).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        assert!(read_frame(&mut &[][..]).unwrap().is_none(), "end of file between frames");
        let mut buf = Vec::new();
        write_frame(&mut buf, b"hello").unwrap();
        assert_eq!(read_frame(&mut &buf[..]).unwrap().unwrap(), b"hello");
        assert!(write_frame(&mut Vec::new(), &vec![0; MAX_FRAME + 1]).is_err());
    }

    /// A launcher served over a socketpair (in a thread of the test: the same code as the
    /// process) answers a malformed request with an error and stays up for the next, and a
    /// request whose arguments do not parse forks nothing.
    #[test]
    fn the_launcher_answers_bad_requests_with_errors() {
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        let server = std::thread::spawn(move || serve(theirs, false));
        write_frame(&mut ours, b"\x05\x00").unwrap();
        let r: Reply = serde_json::from_slice(&read_frame(&mut ours).unwrap().unwrap()).unwrap();
        assert!(matches!(&r, Reply::Failed { error, .. } if error.contains("truncated")), "{r:?}");
        let bad = Request {
            args: vec!["--no-such-option".into()],
            env: vec![],
        };
        write_frame(&mut ours, &bad.encode()).unwrap();
        let r: Reply = serde_json::from_slice(&read_frame(&mut ours).unwrap().unwrap()).unwrap();
        assert!(
            matches!(&r, Reply::Failed { error, errno: None } if error.contains("bad supervisor arguments")),
            "{r:?}"
        );
        // A frame over the limit: answered, then the launcher leaves (it cannot resync).
        ours.write_all(&((MAX_FRAME + 1) as u32).to_le_bytes()).unwrap();
        let r: Reply = serde_json::from_slice(&read_frame(&mut ours).unwrap().unwrap()).unwrap();
        assert!(
            matches!(&r, Reply::Failed { error, .. } if error.contains("over the limit")),
            "{r:?}"
        );
        assert_eq!(server.join().unwrap(), 1);
    }

    #[test]
    fn the_title_names_the_job_and_launch() {
        assert_eq!(process_title(Path::new("/d/sites/a/jobs/1234/a1-c0")), b"ks:1234/a1-c0");
        assert_eq!(process_title(Path::new("/d/sites/a/jobs/123456789/a12-c3")).len(), 15);
    }

    #[test]
    fn a_refused_fork_keeps_its_errno() {
        let e = io::Error::other(LauncherError {
            error: "cannot fork".into(),
            errno: nix::libc::EAGAIN,
        });
        assert_eq!(errno_of(&e), Some(nix::libc::EAGAIN));
        assert_eq!(errno_of(&io::Error::from_raw_os_error(nix::libc::EMFILE)), Some(nix::libc::EMFILE));
    }
}
