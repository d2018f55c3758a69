//! Registering a file that is already on the server's machine (`POST /api/v1/files` with a
//! `path`): who may, and opening it without being tricked.
//!
//! Users upload content through the API (`PUT /api/v1/files/{name}`); making the server
//! read a server-local path is reserved to admins, and to users for the directories
//! `[files] import_dirs` names for them. For everyone, admins too, the server's data directory,
//! `/proc`, `/sys` and `/dev` are refused, and the server never opens its own database files
//! as data (closing any descriptor of the database drops SQLite's locks on it).
//!
//! The path is opened one component at a time from `/` with `O_NOFOLLOW` (a symbolic link
//! anywhere on it is refused), so the path checked is the path read; the file must be a
//! regular file; the directories on the way are compared with the data directory by device
//! and inode, and the file with the database files, *before* it is opened.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{open, openat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, Mode, SFlag};
use serde::{Deserialize, Serialize};

/// `[files]` in the server config.
///
/// ```toml
/// [files]
/// max_upload_bytes = 1073741824          # one upload at most (413 above)
/// [files.import_dirs]                    # server-local directories users may register from
/// alice = ["/srv/data/alice"]
/// "*" = ["/srv/data/shared"]             # everyone
/// ```
///
/// and the scrub of replicas no job uses (`crate::daemon::scrub`): `scrub_interval_ms =
/// 30000` (a round every 30 s; 0: never), `scrub_bytes = 268435456` (at most 256 MiB hashed
/// per round), `scrub_rehash_days = 7` (hashed again after a week even when unchanged).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilesConfig {
    /// koalesce user (or `"*"`) → directories whose files that user may register by path.
    pub import_dirs: BTreeMap<String, Vec<PathBuf>>,
    /// Largest upload (bytes).
    pub max_upload_bytes: u64,
    /// How often the scrub re-checks a round of replicas no job uses (ms; 0: never). See
    /// `crate::daemon::scrub`.
    pub scrub_interval_ms: u64,
    /// Most bytes the scrub hashes in one round (a larger replica alone).
    pub scrub_bytes: u64,
    /// A replica is hashed again after this many days even when its size and modification
    /// time did not change.
    pub scrub_rehash_days: u64,
}

impl Default for FilesConfig {
    fn default() -> Self {
        FilesConfig {
            import_dirs: BTreeMap::new(),
            max_upload_bytes: 1 << 30,
            scrub_interval_ms: 30_000,
            scrub_bytes: 256 << 20,
            scrub_rehash_days: 7,
        }
    }
}

impl FilesConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        for (user, dirs) in &self.import_dirs {
            for d in dirs {
                anyhow::ensure!(
                    plain_absolute(d),
                    "config: files.import_dirs.{user}: '{}' must be an absolute path without '.' or '..'",
                    d.display()
                );
            }
        }
        anyhow::ensure!(self.max_upload_bytes > 0, "config: 'files.max_upload_bytes' must be positive");
        anyhow::ensure!(self.scrub_bytes > 0, "config: 'files.scrub_bytes' must be positive");
        Ok(())
    }

    /// The directories `user` may register files from.
    fn dirs_of<'a>(&'a self, user: &'a str) -> impl Iterator<Item = &'a PathBuf> {
        [user, crate::users::DEFAULT_KEY]
            .into_iter()
            .filter_map(|k| self.import_dirs.get(k))
            .flatten()
    }
}

/// Why a path is not registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    /// The caller may not make the server read this path (403).
    #[error("{0}")]
    Forbidden(String),
    /// Never registered, whoever asks (422).
    #[error("{0}")]
    Refused(String),
    /// It could not be read (422).
    #[error("{0}")]
    Io(String),
}

fn plain_absolute(p: &Path) -> bool {
    p.is_absolute() && p.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

/// Kernel places that are never data.
const SYSTEM_TREES: [&str; 3] = ["/proc", "/sys", "/dev"];

/// Whether `user` (an admin or not) may have the server read `path`, by the path alone.
pub fn check_path(path: &Path, user: &str, admin: bool, cfg: &FilesConfig, data_dir: &Path) -> Result<(), ImportError> {
    let shown = path.display();
    if !plain_absolute(path) {
        return Err(ImportError::Refused(format!(
            "field 'path': '{shown}' must be an absolute path without '.' or '..'"
        )));
    }
    if path.starts_with(data_dir) {
        return Err(ImportError::Refused(format!(
            "field 'path': '{shown}' is inside the server's data directory"
        )));
    }
    if let Some(t) = SYSTEM_TREES.iter().find(|t| path.starts_with(t)) {
        return Err(ImportError::Refused(format!(
            "field 'path': '{shown}' is under {t}, which is never data"
        )));
    }
    if admin || cfg.dirs_of(user).any(|d| path.starts_with(d)) {
        return Ok(());
    }
    Err(ImportError::Forbidden(format!(
        "field 'path': registering a file on the server's machine is for admins and for the directories \
         [files] import_dirs gives '{user}'; '{shown}' is not in one. Upload the content instead \
         (`koalesce files add NAME LOCAL-FILE --site SITE`, or PUT /api/v1/files/NAME?site=SITE)"
    )))
}

/// (device, inode) of a path, without following a link at its end; `None` when it is not there.
fn id_of(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The files of the server that are never read as data: the database and its companions.
pub fn protected_files(data_dir: &Path) -> Vec<PathBuf> {
    ["", "-wal", "-shm", "-journal"]
        .iter()
        .map(|s| data_dir.join(format!("{}{s}", crate::DB_FILE)))
        .chain([data_dir.join("server.lock")])
        .collect()
}

/// Opens `path` (already allowed by [`check_path`]) for reading without following links and
/// without ever opening the data directory's contents; the file must be a regular file.
pub fn open_checked(path: &Path, data_dir: &Path) -> Result<File, ImportError> {
    let shown = path.display().to_string();
    let io = |e: Errno| ImportError::Io(format!("field 'path': '{shown}': {}", e.desc()));
    let refused = |why: &str| ImportError::Refused(format!("field 'path': '{shown}' {why}"));
    let data_id = id_of(data_dir);
    let protected: Vec<(u64, u64)> = protected_files(data_dir).iter().filter_map(|p| id_of(p)).collect();
    let parts: Vec<&std::ffi::OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p),
            _ => None,
        })
        .collect();
    let Some((last, dirs)) = parts.split_last() else {
        return Err(refused("is not a file"));
    };
    let dir_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let same = |st: &nix::sys::stat::FileStat, id: Option<(u64, u64)>| id == Some((st.st_dev, st.st_ino));
    let mut at = open("/", dir_flags, Mode::empty()).map_err(io)?;
    for d in dirs {
        at = match openat(&at, *d, dir_flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ELOOP) | Err(Errno::ENOTDIR) => {
                return Err(refused(&format!(
                    "goes through '{}', a symbolic link or not a directory",
                    d.to_string_lossy()
                )))
            }
            Err(e) => return Err(io(e)),
        };
        if same(&fstat(&at).map_err(io)?, data_id) {
            return Err(refused("is inside the server's data directory"));
        }
    }
    // Looked at before it is opened: the database is never opened here.
    let st = fstatat(&at, *last, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(io)?;
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    if kind == SFlag::S_IFLNK {
        return Err(refused("is a symbolic link"));
    }
    if kind != SFlag::S_IFREG {
        return Err(refused("is not a regular file"));
    }
    if protected.contains(&(st.st_dev, st.st_ino)) {
        return Err(refused("is one of the server's database files"));
    }
    // O_NONBLOCK: a FIFO swapped in meanwhile must not hang the server.
    let fd = openat(
        &at,
        *last,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        Errno::ELOOP => refused("is a symbolic link"),
        e => io(e),
    })?;
    let opened = fstat(&fd).map_err(io)?;
    if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino) {
        return Err(refused("changed while it was opened"));
    }
    let file = File::from(fd);
    nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_SETFL(OFlag::empty())).map_err(io)?;
    Ok(file)
}

/// Whether `name` is reserved for a job's outputs (`<job-id>/...`): registered only by the
/// server, for job `<job-id>`.
pub fn reserved_output_name(name: &str) -> Option<u64> {
    let (head, _) = name.split_once('/')?;
    if head.is_empty() || !head.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    head.parse().ok().or(Some(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_checked_before_anything_is_opened() {
        let data = Path::new("/var/lib/koalesce");
        let mut cfg = FilesConfig::default();
        cfg.import_dirs.insert("alice".into(), vec!["/srv/alice".into()]);
        cfg.import_dirs.insert("*".into(), vec!["/srv/shared".into()]);
        let ok = |p: &str, u: &str, admin: bool| check_path(Path::new(p), u, admin, &cfg, data);
        assert_eq!(ok("/srv/alice/x", "alice", false), Ok(()));
        assert_eq!(ok("/srv/shared/x", "bob", false), Ok(()));
        assert!(matches!(ok("/srv/alice/x", "bob", false), Err(ImportError::Forbidden(_))));
        assert!(matches!(ok("/etc/shadow", "alice", false), Err(ImportError::Forbidden(_))));
        assert_eq!(ok("/etc/hosts", "root", true), Ok(()));
        for p in ["/proc/self/environ", "/sys/kernel/x", "/dev/sda", "/var/lib/koalesce/koalesce.db"] {
            assert!(matches!(ok(p, "root", true), Err(ImportError::Refused(_))), "{p}");
        }
        assert!(matches!(
            ok("/srv/alice/../../etc/shadow", "alice", false),
            Err(ImportError::Refused(_))
        ));
        assert!(matches!(ok("relative", "root", true), Err(ImportError::Refused(_))));
        // "/srv/alicex" is not inside "/srv/alice".
        assert!(matches!(ok("/srv/alicex/y", "alice", false), Err(ImportError::Forbidden(_))));
    }

    #[test]
    fn output_names_are_reserved_by_job_id() {
        assert_eq!(reserved_output_name("17/result.txt"), Some(17));
        assert_eq!(reserved_output_name("99999999999999999999999/x"), Some(u64::MAX));
        assert_eq!(reserved_output_name("logs/17.log"), None);
        assert_eq!(reserved_output_name("data.bin"), None);
        assert_eq!(reserved_output_name("/x"), None);
    }
}
