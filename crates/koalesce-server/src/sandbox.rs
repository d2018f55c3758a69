//! The job sandbox: what a component's program can touch.
//!
//! The supervisor prepares a [`Confinement`] before it forks the program and applies it in
//! the child between `fork` and `exec` ([`Confinement::enter`]), in this order:
//!
//! 1. the child joins the component's control group ([`crate::cgroup`]);
//! 2. when the supervisor runs as root and the server's data directory is given to hide, the
//!    child gets a private mount namespace in which the data directory is an empty read-only
//!    tmpfs showing only the component's working directory and its input files, at their
//!    real paths (as Slurm's `job_container/tmpfs` gives each job a private view), so the
//!    database, the storage, other jobs and the supervisor's records are not even there;
//! 3. it changes into its working directory;
//! 4. Landlock (ABI 7 here; best effort with a warning where the kernel has less) confines it
//!    to: its working directory (read-write), its stdout/stderr files, its input files and the
//!    configured `sandbox.read_only` paths (read-only), `sandbox.read_write` paths, the mapped
//!    user's home, system paths read-only (`/usr`, `/bin`, `/lib*`, `/etc` without its
//!    secrets, `/proc`, `/dev/null` and friends) and its own executable. Signals to and
//!    abstract sockets of processes outside the sandbox (the supervisor, the daemon) are
//!    refused too (Landlock scopes), as is `ptrace`;
//! 5. as root it switches to the mapped Unix account (supplementary groups, gid, uid).
//!
//! The program gets a clean environment (see [`job_environment`]).

use std::ffi::{CString, OsStr, OsString};
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use landlock::{
    path_beneath_rules, Access, AccessFs, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr,
    RulesetError, Scope, ABI,
};
use nix::fcntl::{open, OFlag};
use nix::mount::{mount, MsFlags};
use nix::sys::stat::Mode;
use serde::{Deserialize, Serialize};

use crate::users::Account;

/// The Landlock ABI the sandbox asks for (what this machine's kernel offers).
pub const LANDLOCK_ABI: ABI = ABI::V7;
/// PATH of a job that did not set one.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// System paths a job may read (and execute from).
const SYSTEM_READ_ONLY: [&str; 11] = [
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/sys/devices/system/cpu",
    "/dev/random",
    "/dev/urandom",
];
/// Device files a job may write.
const SYSTEM_READ_WRITE: [&str; 3] = ["/dev/null", "/dev/zero", "/dev/full"];
/// Secrets under /etc that stay out of the sandbox even for a root job (relative paths; a
/// trailing `*` matches a prefix, `.pub` keys stay readable).
const ETC_SECRETS: [&str; 10] = [
    "shadow",
    "shadow-",
    "gshadow",
    "gshadow-",
    "sudoers",
    "sudoers.d",
    "munge",
    "ssl/private",
    "security/opasswd",
    "ssh/ssh_host_*",
];

/// `[sandbox]` of the server config: what jobs may reach besides their working directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    /// Extra paths jobs may read (software trees, shared read-only data).
    pub read_only: Vec<PathBuf>,
    /// Extra paths jobs may read and write (a shared scratch file system).
    pub read_write: Vec<PathBuf>,
    /// Control-group directory (under each controller) holding the components' groups.
    pub cgroup_parent: String,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            read_only: Vec::new(),
            read_write: Vec::new(),
            cgroup_parent: "koalesce".into(),
        }
    }
}

/// Whether the running kernel enforces everything the sandbox asks of Landlock; the error
/// says what is missing.
pub(crate) fn landlock_fully_supported() -> Result<(), String> {
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(LANDLOCK_ABI))
        .and_then(|r| r.scope(Scope::from_all(LANDLOCK_ABI)))
        .and_then(|r| r.create())
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Whether `rel` (a path relative to /etc) is one of [`ETC_SECRETS`].
fn is_etc_secret(rel: &Path) -> bool {
    let rel = rel.to_string_lossy();
    ETC_SECRETS.iter().any(|s| match s.strip_suffix('*') {
        Some(prefix) => rel.starts_with(prefix) && !rel.ends_with(".pub"),
        None => rel == *s,
    })
}

/// The entries of /etc a job may read: everything but [`ETC_SECRETS`] (directories holding
/// a secret are listed entry by entry).
fn etc_paths(dir: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let r = rel.join(e.file_name());
        if is_etc_secret(&r) {
            continue;
        }
        let holds_secret = ETC_SECRETS.iter().any(|s| Path::new(s).starts_with(&r) && Path::new(s) != r);
        if holds_secret && e.file_type().is_ok_and(|t| t.is_dir()) {
            etc_paths(&e.path(), &r, out);
        } else {
            out.push(e.path());
        }
    }
}

/// How long the opened system paths ([`system_paths`]) are reused: a file added to /etc
/// becomes readable to jobs within this time.
pub const SYSTEM_PATHS_TTL: std::time::Duration = std::time::Duration::from_secs(30);

/// The system paths every job may read (`SYSTEM_READ_ONLY` and /etc but its secrets, about
/// 160 here), opened (`O_PATH`) with whether each is a file.
pub struct SystemPaths {
    at: std::time::Instant,
    fds: Vec<(OwnedFd, bool)>,
}

static SYSTEM_PATHS: std::sync::Mutex<Option<std::sync::Arc<SystemPaths>>> = std::sync::Mutex::new(None);

/// The system paths, opened once per [`SYSTEM_PATHS_TTL`] in this process: the resident
/// launcher opens them ([`crate::launcher`]) and each supervisor it forks inherits the
/// descriptors, instead of listing /etc and opening and inspecting every entry per launch
/// (four system calls a path, a fifth of a launch's system calls).
pub fn system_paths() -> std::sync::Arc<SystemPaths> {
    let mut cached = SYSTEM_PATHS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = cached.as_ref().filter(|c| c.at.elapsed() < SYSTEM_PATHS_TTL) {
        return c.clone();
    }
    let mut paths: Vec<PathBuf> = SYSTEM_READ_ONLY.iter().map(PathBuf::from).collect();
    etc_paths(Path::new("/etc"), Path::new(""), &mut paths);
    let fds = paths
        .iter()
        .filter_map(|p| {
            // A path that does not exist here (/lib32, /libx32) is no rule, as in
            // `path_beneath_rules`.
            let fd = open(p, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()).ok()?;
            let is_file = nix::sys::stat::fstat(&fd).is_ok_and(|st| st.st_mode & nix::libc::S_IFMT != nix::libc::S_IFDIR);
            Some((fd, is_file))
        })
        .collect();
    let fresh = std::sync::Arc::new(SystemPaths {
        at: std::time::Instant::now(),
        fds,
    });
    *cached = Some(fresh.clone());
    fresh
}

/// Where the program is: a path with a slash is taken as is (relative to the working
/// directory), a bare name is looked up in the job's PATH.
pub fn resolve_program(program: &str, work: &Path, path_var: &OsStr) -> PathBuf {
    if program.contains('/') {
        return work.join(program);
    }
    for dir in std::env::split_paths(path_var) {
        let candidate = work.join(dir).join(program);
        if fs::metadata(&candidate).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0) {
            return candidate;
        }
    }
    PathBuf::from(program)
}

/// The program's environment: what the supervisor was given (the job's own variables and
/// the `KOALESCE_*` ones; the daemon starts the supervisor with nothing else), plus PATH,
/// HOME (the mapped user's home, else the working directory), USER/LOGNAME and TMPDIR (the
/// working directory) where the job did not set them, and PWD.
pub fn job_environment(
    given: impl IntoIterator<Item = (OsString, OsString)>,
    work: &Path,
    account: Option<&Account>,
) -> Vec<(OsString, OsString)> {
    let mut env: std::collections::BTreeMap<OsString, OsString> = given.into_iter().collect();
    let user = account.map(|a| a.name.clone()).or_else(crate::users::current_name);
    let home = account
        .map(|a| a.home.clone())
        .filter(|h| h.is_dir() && h != Path::new("/"))
        .unwrap_or_else(|| work.to_path_buf());
    let mut defaults: Vec<(&str, OsString)> = vec![
        ("PATH", DEFAULT_PATH.into()),
        ("HOME", home.into_os_string()),
        ("TMPDIR", work.as_os_str().to_owned()),
    ];
    if let Some(u) = user {
        defaults.push(("USER", u.clone().into()));
        defaults.push(("LOGNAME", u.into()));
    }
    for (k, v) in defaults {
        env.entry(k.into()).or_insert(v);
    }
    env.insert("PWD".into(), work.as_os_str().to_owned());
    env.into_iter().collect()
}

/// What the program may touch, for [`Confinement::prepare`].
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// The working directory (read-write; the program's cwd).
    pub work: PathBuf,
    /// The resolved executable.
    pub program: PathBuf,
    /// Files the program writes its output to (stdout, stderr): read-write by path too.
    pub outputs: Vec<PathBuf>,
    /// Input files (read-only). With `hide`, `(view, source)`: the file `source` appears at
    /// `view`; else both are the same path.
    pub inputs: Vec<(PathBuf, PathBuf)>,
    pub read_only: Vec<PathBuf>,
    pub read_write: Vec<PathBuf>,
    /// The account to switch to (the supervisor runs as root).
    pub account: Option<Account>,
    /// A directory (the data directory) to hide behind a private mount namespace.
    pub hide: Option<PathBuf>,
    /// `cgroup.procs` files the program joins.
    pub cgroup_procs: Vec<PathBuf>,
}

/// Mounts of the private namespace, prepared before `fork` (the child only makes syscalls).
#[derive(Debug)]
struct MountPlan {
    hide: CString,
    /// Directories to create inside the tmpfs, parents first.
    dirs: Vec<CString>,
    /// (target, source, read-only, is a file)
    binds: Vec<(CString, CString, bool, bool)>,
    /// The sources opened in the new namespace (capacity reserved before the fork).
    opened: Vec<OwnedFd>,
}

/// A confinement prepared by the supervisor and entered by the child before `exec`.
#[derive(Debug)]
pub struct Confinement {
    work: CString,
    landlock: Option<RulesetCreated>,
    mounts: Option<MountPlan>,
    cgroup_procs: Vec<OwnedFd>,
    account: Option<Account>,
}

fn cstring(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

fn o_path_c(p: &std::ffi::CStr) -> io::Result<OwnedFd> {
    Ok(open(p, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())?)
}

impl Confinement {
    /// Prepares everything (path descriptors, the Landlock ruleset, the mount plan) so that
    /// [`Confinement::enter`] only makes system calls.
    pub fn prepare(req: &Request) -> io::Result<Confinement> {
        let abi = LANDLOCK_ABI;
        let system = system_paths();
        let read = AccessFs::from_read(abi);
        // Access rights of directories do not apply to a file (as `path_beneath_rules`).
        let system_rules = system.fds.iter().map(|(fd, is_file)| {
            Ok::<_, RulesetError>(PathBeneath::new(fd, if *is_file { read & AccessFs::from_file(abi) } else { read }))
        });
        let mut ro: Vec<PathBuf> = Vec::new();
        ro.extend(req.read_only.iter().cloned());
        ro.extend(req.inputs.iter().map(|(_, src)| src.clone()));
        ro.push(req.program.clone());
        let mut rw: Vec<PathBuf> = SYSTEM_READ_WRITE.iter().map(PathBuf::from).collect();
        rw.push(req.work.clone());
        rw.extend(req.outputs.iter().cloned());
        rw.extend(req.read_write.iter().cloned());
        if let Some(a) = &req.account {
            // The user's own home, as on any cluster node (not "/" or a missing one).
            if a.home != Path::new("/") && fs::metadata(&a.home).is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == a.uid.as_raw()) {
                rw.push(a.home.clone());
            }
        }
        let ruleset = Ruleset::default()
            .handle_access(AccessFs::from_all(abi))
            .and_then(|r| r.scope(Scope::from_all(abi)))
            .and_then(|r| r.create())
            .and_then(|r| r.add_rules(system_rules))
            .and_then(|r| r.add_rules(path_beneath_rules(&ro, AccessFs::from_read(abi))))
            .and_then(|r| r.add_rules(path_beneath_rules(&rw, AccessFs::from_all(abi))))
            .map_err(|e| io::Error::other(format!("landlock: {e}")))?;
        let mounts = match &req.hide {
            Some(hide) => Some(Self::mount_plan(hide, req)?),
            None => None,
        };
        let cgroup_procs = req
            .cgroup_procs
            .iter()
            .map(|p| Ok(open(p, OFlag::O_WRONLY | OFlag::O_CLOEXEC, Mode::empty())?))
            .collect::<io::Result<Vec<OwnedFd>>>()?;
        Ok(Confinement {
            work: cstring(&req.work)?,
            landlock: Some(ruleset),
            mounts,
            cgroup_procs,
            account: req.account.clone(),
        })
    }

    fn mount_plan(hide: &Path, req: &Request) -> io::Result<MountPlan> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut binds = Vec::new();
        let add_parents = |target: &Path, dirs: &mut Vec<PathBuf>| -> io::Result<()> {
            let rel = target
                .strip_prefix(hide)
                .map_err(|_| io::Error::other(format!("{} is not inside {}", target.display(), hide.display())))?;
            let mut at = hide.to_path_buf();
            for c in rel.parent().into_iter().flat_map(|p| p.components()) {
                at.push(c);
                if !dirs.contains(&at) {
                    dirs.push(at.clone());
                }
            }
            Ok(())
        };
        add_parents(&req.work, &mut dirs)?;
        dirs.push(req.work.clone());
        binds.push((cstring(&req.work)?, cstring(&req.work)?, false, false));
        for (view, src) in &req.inputs {
            if !view.starts_with(hide) {
                continue;
            }
            add_parents(view, &mut dirs)?;
            binds.push((cstring(view)?, cstring(src)?, true, true));
        }
        Ok(MountPlan {
            hide: cstring(hide)?,
            dirs: dirs.iter().map(|d| cstring(d)).collect::<io::Result<_>>()?,
            opened: Vec::with_capacity(binds.len()),
            binds,
        })
    }

    /// Whether a private mount namespace is part of this confinement.
    pub fn hides(&self) -> bool {
        self.mounts.is_some()
    }

    /// Drops the private mount namespace (for a retry where namespaces are not permitted).
    pub fn without_mounts(mut self) -> Self {
        self.mounts = None;
        self
    }

    /// In the child, between `fork` and `exec`: joins the control group, enters the mount
    /// namespace, changes into the working directory, restricts itself with Landlock and
    /// switches to the mapped account. Only system calls (no allocation).
    pub fn enter(&mut self) -> io::Result<()> {
        for fd in &self.cgroup_procs {
            nix::unistd::write(fd, b"0")?;
        }
        if let Some(m) = &mut self.mounts {
            enter_mount_namespace(m)?;
        }
        nix::unistd::chdir(self.work.as_c_str())?;
        if let Some(rs) = self.landlock.take() {
            rs.restrict_self().map_err(|e| io::Error::other(e.to_string()))?;
        }
        if let Some(a) = &self.account {
            nix::unistd::setgroups(&a.groups)?;
            nix::unistd::setgid(a.gid)?;
            nix::unistd::setuid(a.uid)?;
        }
        Ok(())
    }
}

/// `/proc/self/fd/N`: a mount source naming an O_PATH descriptor (works for a directory the
/// tmpfs has already covered), formatted without allocating.
fn fd_path(fd: i32, buf: &mut [u8; 32]) -> &OsStr {
    let prefix = b"/proc/self/fd/";
    buf[..prefix.len()].copy_from_slice(prefix);
    let mut digits = [0u8; 12];
    let (mut n, mut len) = (fd.unsigned_abs(), 0);
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        buf[prefix.len() + i] = digits[len - 1 - i];
    }
    OsStr::from_bytes(&buf[..prefix.len() + len])
}

fn enter_mount_namespace(m: &mut MountPlan) -> io::Result<()> {
    use nix::sched::{unshare, CloneFlags};
    let none: Option<&str> = None;
    unshare(CloneFlags::CLONE_NEWNS)?;
    // Nothing done here propagates back to the host.
    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)?;
    // The sources, opened in the new namespace (a bind mount's source must be in it) before
    // the tmpfs covers them. `opened` has room for all: no allocation.
    m.opened.clear();
    for (_, src, _, _) in &m.binds {
        m.opened.push(o_path_c(src)?);
    }
    let hidden_flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(
        Some("tmpfs"),
        m.hide.as_c_str(),
        Some("tmpfs"),
        hidden_flags,
        Some("mode=0755,size=64k"),
    )?;
    for d in &m.dirs {
        match nix::unistd::mkdir(d.as_c_str(), Mode::from_bits_truncate(0o755)) {
            Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
            Err(e) => return Err(e.into()),
        }
    }
    for ((target, _, read_only, is_file), src) in m.binds.iter().zip(&m.opened) {
        if *is_file {
            drop(open(
                target.as_c_str(),
                OFlag::O_CREAT | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o444),
            )?);
        }
        let mut buf = [0u8; 32];
        mount(
            Some(fd_path(src.as_raw_fd(), &mut buf)),
            target.as_c_str(),
            none,
            MsFlags::MS_BIND,
            none,
        )?;
        if *read_only {
            mount(
                none,
                target.as_c_str(),
                none,
                MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
                none,
            )?;
        }
    }
    mount(
        none,
        m.hide.as_c_str(),
        none,
        MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | hidden_flags,
        none,
    )?;
    m.opened.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etc_secrets_stay_out() {
        let mut v = Vec::new();
        etc_paths(Path::new("/etc"), Path::new(""), &mut v);
        assert!(v.contains(&PathBuf::from("/etc/passwd")));
        for secret in ["/etc/shadow", "/etc/gshadow", "/etc/sudoers"] {
            assert!(!v.contains(&PathBuf::from(secret)), "{secret}");
        }
        assert!(!v.iter().any(|p| p.starts_with("/etc/ssl/private")));
        assert!(is_etc_secret(Path::new("ssh/ssh_host_ed25519_key")));
        assert!(!is_etc_secret(Path::new("ssh/ssh_host_ed25519_key.pub")));
    }

    #[test]
    fn fd_paths_format_without_allocating() {
        let mut buf = [0u8; 32];
        assert_eq!(fd_path(7, &mut buf), "/proc/self/fd/7");
        assert_eq!(fd_path(1234, &mut buf), "/proc/self/fd/1234");
    }

    #[test]
    fn environment_is_clean_with_defaults() {
        let env = job_environment(
            [("KOALESCE_RANK".into(), "0".into()), ("HOME".into(), "/mine".into())],
            Path::new("/w"),
            None,
        );
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("HOME"), Some("/mine".into()));
        assert_eq!(get("PATH"), Some(DEFAULT_PATH.into()));
        assert_eq!(get("TMPDIR"), Some("/w".into()));
        assert_eq!(get("PWD"), Some("/w".into()));
        assert_eq!(get("KOALESCE_RANK"), Some("0".into()));
        assert!(get("CARGO").is_none());
    }
}
