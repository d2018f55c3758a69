//! One control group per component, so that every process a component starts can be found,
//! limited and killed, including descendants that left the process group with `setsid`.
//!
//! - cgroup v1 (the `memory`, `pids` and `freezer` hierarchies, as mounted on this kind of
//!   machine under `/sys/fs/cgroup/<controller>`): the component gets
//!   `<controller>/<parent>/<name>` in each; killing first sets the group's `pids.max` to 0,
//!   so no member can fork while it is being killed, then sends SIGKILL to every member. It
//!   does not freeze: a killer that dies between freezing and thawing (a supervisor killed by
//!   Slurm, a daemon SIGKILLed) left the group frozen, its members stuck for good. A group
//!   still frozen by an older killer is thawed first.
//! - cgroup v2 (a unified hierarchy at `/sys/fs/cgroup`): one directory; killing writes
//!   `cgroup.kill` (Linux 5.14+) or freezes with `cgroup.freeze` and kills.
//! - Neither writable (an unprivileged server without delegation): [`Cgroup::create`] fails and
//!   the supervisor falls back to the process group, with a warning in its log.
//!
//! The supervisor creates the group before the program starts (before its own record, which
//! says where the group is), the program joins it between `fork` and `exec` (so not even its
//! first child can escape), and the supervisor removes it once it is empty. The daemon reads
//! where it lives from the supervisor's record (`supervisor.json`; `cgroup.json` from
//! supervisors of earlier versions), so it can kill the group too (cancel) and see when it is
//! empty (slots are held until it is).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Root of the cgroup file systems.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The record of a component's control group that supervisors of earlier versions wrote into
/// its record directory (read for their launches; now the supervisor's record says).
pub const CGROUP_FILE: &str = "cgroup.json";
/// v1 controllers a component gets a group in (memory: limits and OOM events; pids: counting,
/// and no forks while the group is killed; freezer: thawing a group an older killer froze).
const V1_CONTROLLERS: [&str; 3] = ["memory", "pids", "freezer"];

/// Which cgroup interface a group uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Version {
    V1,
    V2,
}

/// A component's control group: one directory per v1 controller, or one v2 directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cgroup {
    pub version: Version,
    /// v1: memory, pids, freezer directories (in that order); v2: the one directory.
    pub dirs: Vec<PathBuf>,
}

/// Whether `dir` is the mount point of a cgroup file system of the given type, as
/// /proc/self/mountinfo says (`cgroup` with `controller` among its options, or `cgroup2`).
fn mounted(dir: &Path, fstype: &str, controller: Option<&str>) -> bool {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    info.lines().any(|l| {
        let fields: Vec<&str> = l.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            return false;
        };
        fields.get(4).is_some_and(|m| Path::new(m) == dir)
            && fields.get(sep + 1) == Some(&fstype)
            && controller.is_none_or(|c| fields.get(sep + 3).is_some_and(|o| o.split(',').any(|x| x == c)))
    })
}

/// Which cgroup hierarchy this machine offers (v1 with the memory, pids and freezer
/// controllers preferred, else v2), read from /proc/self/mountinfo once per process: a
/// supervisor used to parse it once per controller for every component.
fn mounted_hierarchy() -> Option<Version> {
    static HIERARCHY: std::sync::OnceLock<Option<Version>> = std::sync::OnceLock::new();
    *HIERARCHY.get_or_init(|| {
        let root = Path::new(CGROUP_ROOT);
        if V1_CONTROLLERS.iter().all(|c| mounted(&root.join(c), "cgroup", Some(c))) {
            Some(Version::V1)
        } else if mounted(root, "cgroup2", None) {
            Some(Version::V2)
        } else {
            None
        }
    })
}

/// Reads which hierarchy this machine offers now, so that processes forked from this one
/// (the resident launcher's supervisors) know it without parsing /proc/self/mountinfo.
pub fn detect_hierarchy() {
    let _ = mounted_hierarchy();
}

/// Valid cgroup directory name (one path component of letters, digits, `-`, `_`, `.`).
fn check_name(name: &str) -> io::Result<()> {
    let ok = !name.is_empty() && name != "." && name != ".." && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad cgroup name '{name}'")))
    }
}

fn read_u64_field(path: &Path, key: &str) -> Option<u64> {
    let text = fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

impl Cgroup {
    /// Creates `<parent>/<name>` under every controller this machine offers (v1 preferred,
    /// as it is where the controllers are on a hybrid system; else v2). The caller must be
    /// allowed to write there (root, or a delegated subtree).
    pub fn create(parent: &str, name: &str) -> io::Result<Cgroup> {
        Self::create_new(parent, name).map(|(cg, _)| cg)
    }

    /// [`Cgroup::create`], also saying whether the group was made by this call (false: a
    /// directory of that name was there already, under some controller).
    pub fn create_new(parent: &str, name: &str) -> io::Result<(Cgroup, bool)> {
        let cg = Self::planned(parent, name)?;
        let made = cg.make()?;
        Ok((cg, made))
    }

    /// Where `<parent>/<name>` is under every controller this machine offers (v1 preferred,
    /// as it is where the controllers are on a hybrid system; else v2), not made yet.
    pub fn planned(parent: &str, name: &str) -> io::Result<Cgroup> {
        for part in parent.split('/') {
            check_name(part)?;
        }
        check_name(name)?;
        let root = Path::new(CGROUP_ROOT);
        match mounted_hierarchy() {
            Some(Version::V1) => Ok(Cgroup {
                version: Version::V1,
                dirs: V1_CONTROLLERS.iter().map(|c| root.join(c).join(parent).join(name)).collect(),
            }),
            Some(Version::V2) => Ok(Cgroup {
                version: Version::V2,
                dirs: vec![root.join(parent).join(name)],
            }),
            None => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "no cgroup v1 memory/pids/freezer or cgroup v2 mounted",
            )),
        }
    }

    /// Makes the group's directories (and their parents as needed; v2: enabling the memory
    /// and pids controllers for the subtree on the way down, best effort). Returns whether they
    /// were made here (false: a directory of that name was there already). A group half made
    /// here is removed again on an error.
    pub fn make(&self) -> io::Result<bool> {
        let root = Path::new(CGROUP_ROOT);
        let mut fresh = true;
        let mut made = || -> io::Result<()> {
            for d in &self.dirs {
                let parent = d.parent().unwrap_or(root);
                if self.version == Version::V2 {
                    let mut at = root.to_path_buf();
                    for part in parent.strip_prefix(root).unwrap_or(Path::new("")).components() {
                        let _ = fs::write(at.join("cgroup.subtree_control"), "+memory +pids");
                        at.push(part);
                        fs::create_dir_all(&at)?;
                    }
                    let _ = fs::write(at.join("cgroup.subtree_control"), "+memory +pids");
                } else if !parent.is_dir() {
                    fs::create_dir_all(parent)?;
                }
                match fs::create_dir(d) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => fresh = false,
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        };
        match made() {
            Ok(()) => Ok(fresh),
            Err(e) => {
                if fresh {
                    self.remove();
                }
                Err(e)
            }
        }
    }

    /// The `cgroup.procs` files a new process writes "0" to, to join the group.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    fn memory_dir(&self) -> &Path {
        &self.dirs[0]
    }

    fn freezer_dir(&self) -> &Path {
        self.dirs.last().expect("a cgroup has a directory")
    }

    /// Limits the memory of the group (v1 `memory.limit_in_bytes`, v2 `memory.max`). Past
    /// it, the kernel's OOM killer kills a member of the group (see [`Cgroup::oom_kills`]).
    pub fn set_memory_limit(&self, bytes: u64) -> io::Result<()> {
        let file = match self.version {
            Version::V1 => "memory.limit_in_bytes",
            Version::V2 => "memory.max",
        };
        fs::write(self.memory_dir().join(file), bytes.to_string())
    }

    /// Lifts the memory limit of the group (v1 `-1`, v2 `max`).
    pub fn clear_memory_limit(&self) -> io::Result<()> {
        let (file, value) = match self.version {
            Version::V1 => ("memory.limit_in_bytes", "-1"),
            Version::V2 => ("memory.max", "max"),
        };
        fs::write(self.memory_dir().join(file), value)
    }

    /// The memory limit of the group in bytes (None: unlimited or unreadable).
    pub fn memory_limit(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.limit_in_bytes",
            Version::V2 => "memory.max",
        };
        let v: u64 = fs::read_to_string(self.memory_dir().join(file)).ok()?.trim().parse().ok()?;
        // v1 reports "unlimited" as the largest page-aligned i64.
        (v < (i64::MAX as u64 & !0xfff)).then_some(v)
    }

    /// How many processes of the group the OOM killer killed (v1 `memory.oom_control`,
    /// v2 `memory.events`).
    pub fn oom_kills(&self) -> u64 {
        match self.version {
            Version::V1 => read_u64_field(&self.memory_dir().join("memory.oom_control"), "oom_kill"),
            Version::V2 => read_u64_field(&self.memory_dir().join("memory.events"), "oom_kill"),
        }
        .unwrap_or(0)
    }

    /// Pids of the processes in the group (none when it is gone).
    pub fn pids(&self) -> Vec<i32> {
        let mut all: Vec<i32> = self
            .dirs
            .iter()
            .filter_map(|d| fs::read_to_string(d.join("cgroup.procs")).ok())
            .flat_map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect::<Vec<i32>>())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// No process left in the group.
    pub fn is_empty(&self) -> bool {
        self.pids().is_empty()
    }

    fn set_frozen(&self, frozen: bool) -> io::Result<()> {
        match self.version {
            Version::V1 => fs::write(self.freezer_dir().join("freezer.state"), if frozen { "FROZEN" } else { "THAWED" }),
            Version::V2 => fs::write(self.freezer_dir().join("cgroup.freeze"), if frozen { "1" } else { "0" }),
        }
    }

    fn pids_dir(&self) -> Option<&Path> {
        (self.version == Version::V1)
            .then(|| self.dirs.get(1).map(PathBuf::as_path))
            .flatten()
    }

    /// Whether the group's freezer says it is frozen (or freezing).
    pub fn is_frozen(&self) -> bool {
        match self.version {
            Version::V1 => fs::read_to_string(self.freezer_dir().join("freezer.state")).is_ok_and(|s| s.trim() != "THAWED"),
            Version::V2 => fs::read_to_string(self.freezer_dir().join("cgroup.freeze")).is_ok_and(|s| s.trim() == "1"),
        }
    }

    /// Kills every process of the group, so that none can fork meanwhile (see the module
    /// docs): v2 writes `cgroup.kill`; v1 forbids forks with `pids.max = 0` and sends SIGKILL
    /// to each member until none is new. Only without a pids controller does it freeze, kill
    /// and thaw. A group left frozen by an earlier killer that died is thawed first, so its
    /// members can take their SIGKILL.
    pub fn kill_all(&self) {
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        if self.is_frozen() {
            let _ = self.set_frozen(false);
        }
        if self.version == Version::V2 && fs::write(self.freezer_dir().join("cgroup.kill"), "1").is_ok() {
            return;
        }
        // An empty group has no member that could fork into it: nothing to do (the usual case
        // once a program ended without leaving anything behind). A program that has not
        // joined its group yet (between fork and exec) is its supervisor's process group's,
        // which `supervised::kill` kills as well, as before.
        if self.is_empty() {
            return;
        }
        if let Some(dir) = self.pids_dir() {
            if fs::write(dir.join("pids.max"), "0").is_ok() {
                // A fork already under way when the limit was set may still add a member:
                // go round until a round finds no one new.
                let mut killed = std::collections::BTreeSet::new();
                for _ in 0..100 {
                    let fresh: Vec<i32> = self.pids().into_iter().filter(|p| !killed.contains(p)).collect();
                    if fresh.is_empty() {
                        return;
                    }
                    for p in fresh {
                        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
                        killed.insert(p);
                    }
                }
                return;
            }
        }
        for _ in 0..10 {
            let frozen = self.set_frozen(true).is_ok();
            let pids = self.pids();
            for &p in &pids {
                let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
            }
            if frozen {
                let _ = self.set_frozen(false);
            }
            // Without a freezer a process may have forked in between: go round again.
            if frozen || self.is_empty() {
                return;
            }
        }
    }

    /// Waits until the group is empty (killed processes are gone once their parent reaped
    /// them or they were re-parented and reaped). Returns whether it is.
    pub fn wait_empty(&self, timeout: Duration) -> bool {
        let t0 = Instant::now();
        loop {
            if self.is_empty() {
                return true;
            }
            if t0.elapsed() >= timeout {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Whether any of the group's directories is still there.
    pub fn exists(&self) -> bool {
        self.dirs.iter().any(|d| d.exists())
    }

    /// Removes the group's directories (only empty groups can be removed; errors ignored).
    pub fn remove(&self) {
        for d in &self.dirs {
            let _ = fs::remove_dir(d);
        }
    }

    /// The group recorded in a component's record directory, if it is there: in its
    /// supervisor's record (which names it before the supervisor makes it, so a group whose
    /// directory is not there was not made yet, could not be made, or is removed already:
    /// none), or in `cgroup.json` (a supervisor of an earlier version).
    pub fn recorded(record_dir: &Path) -> Option<Cgroup> {
        let rec = crate::supervise::read_json(&record_dir.join(crate::supervise::SUPERVISOR_FILE));
        Self::of_record(rec.as_ref(), record_dir)
    }

    /// [`Cgroup::recorded`] with the supervisor's record read already.
    pub fn of_record(rec: Option<&crate::supervise::SupervisorRecord>, record_dir: &Path) -> Option<Cgroup> {
        let cg = match rec.and_then(|r| r.cgroup.clone()) {
            Some(cg) if cg.exists() => cg,
            Some(_) => return None,
            None if rec.is_some_and(|r| r.fenced) => return None,
            None => crate::supervise::read_json(&record_dir.join(CGROUP_FILE))?,
        };
        // Only trust paths inside the cgroup file system.
        cg.dirs
            .iter()
            .all(|d| d.starts_with(CGROUP_ROOT) && !d.components().any(|c| c == std::path::Component::ParentDir))
            .then_some(cg)
    }
}

/// The name of a component's group: a digest of its record directory (unique per launch
/// across data directories, and a valid cgroup name).
pub fn name_for(record_dir: &Path) -> String {
    let digest = crate::store::sha256_hex(record_dir.as_os_str().as_encoded_bytes());
    format!("c-{}", &digest[..20])
}
