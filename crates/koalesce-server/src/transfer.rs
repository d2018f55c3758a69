//! File copies between site storages: stage-in before a job starts, stage-out after, and
//! registration of user files. Every copy is written to a temporary name, checksummed while
//! copying, fsynced and renamed into place only when its SHA-256 matches the catalogue: a
//! half-written or corrupted file is never used.
//!
//! Outputs are collected without following links ([`find_output`]): only a regular file
//! inside the component's working directory, opened component by component with
//! `O_NOFOLLOW` relative to the directory above it, so a job cannot make the server copy
//! `/etc/shadow` (or its database) by naming a link as its output.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use sha2::{Digest, Sha256};

/// Why a declared output is not collected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutputError {
    #[error("output '{name}' refused: {reason} (only regular files inside the working directory are collected)")]
    Refused { name: String, reason: String },
    #[error("output '{name}': {reason}")]
    Io { name: String, reason: String },
}

#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// Writing the copy failed (the destination's fault).
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The source could not be opened or read.
    #[error("reading {path}: {source}")]
    Source {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("checksum mismatch for {path}: expected {expected}, got {actual}")]
    Checksum { path: String, expected: String, actual: String },
    #[error("size mismatch for {path}: expected {expected} bytes, got {actual}")]
    Size { path: String, expected: u64, actual: u64 },
}

impl TransferError {
    /// Whether the source is to blame (unreadable, or not the content the catalogue says),
    /// not the destination.
    pub fn is_source_fault(&self) -> bool {
        !matches!(self, TransferError::Io(_))
    }
}

/// Result of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    pub bytes: u64,
    pub sha256: String,
    pub millis: u64,
}

/// Longest sanitized part of a storage file name: with the tag and a copy's temporary suffix
/// the name stays well under the 255 bytes a file name may have, whatever the logical name.
const MAX_STORED_NAME: usize = 160;

/// The storage path of a logical file at a site (logical names may contain '/'; long names
/// are shortened, the tag keeps them distinct).
pub fn storage_path(storage: &Path, logical: &str) -> PathBuf {
    let safe: String = logical
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' })
        .take(MAX_STORED_NAME)
        .collect();
    // Keep distinct logical names distinct even when sanitizing collides.
    let tag = &crate::store::sha256_hex(logical.as_bytes())[..8];
    storage.join(format!("{safe}.{tag}"))
}

/// Copies `src` to `dest` via a temporary file; when `expect` is given (sha256, size), the copy
/// is refused (and the temporary removed) unless it matches.
pub fn copy_verified(src: &Path, dest: &Path, expect: Option<(&str, u64)>) -> Result<Copied, TransferError> {
    let what = src.display().to_string();
    let input = File::open(src).map_err(|e| TransferError::Source {
        path: what.clone(),
        source: e,
    })?;
    copy_file_verified(input, &what, dest, expect)
}

/// [`copy_verified`] from an open file or any stream (an upload; `what` names it in errors).
pub fn copy_file_verified(mut input: impl Read, what: &str, dest: &Path, expect: Option<(&str, u64)>) -> Result<Copied, TransferError> {
    use std::os::unix::fs::OpenOptionsExt;
    let started = Instant::now();
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut tmp_name = dest.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(format!(".part.{}.{}", std::process::id(), crate::now_ms()));
    let tmp = dest.with_file_name(tmp_name);
    let result = (|| -> Result<Copied, TransferError> {
        // Storage files are the server's alone.
        let mut out = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut bytes = 0u64;
        loop {
            let n = input.read(&mut buf).map_err(|e| TransferError::Source {
                path: what.to_string(),
                source: e,
            })?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])?;
            bytes += n as u64;
        }
        out.sync_all()?;
        let sha = crate::store::hex(&hasher.finalize());
        if let Some((want_sha, want_size)) = expect {
            if bytes != want_size {
                return Err(TransferError::Size {
                    path: what.to_string(),
                    expected: want_size,
                    actual: bytes,
                });
            }
            if sha != want_sha {
                return Err(TransferError::Checksum {
                    path: what.to_string(),
                    expected: want_sha.to_string(),
                    actual: sha,
                });
            }
        }
        std::fs::rename(&tmp, dest)?;
        if let Some(parent) = dest.parent() {
            File::open(parent)?.sync_all()?;
        }
        Ok(Copied {
            bytes,
            sha256: sha,
            millis: started.elapsed().as_millis() as u64,
        })
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Opens output `name` (a relative path) inside the working directory `work` without
/// following any link: every directory on the way is opened with `O_NOFOLLOW|O_DIRECTORY`
/// relative to the one above it, the file itself with `O_NOFOLLOW`, and it must be a regular
/// file with one link. `Ok(None)`: the component did not write it.
pub fn open_output(work: &Path, name: &str) -> Result<Option<File>, OutputError> {
    use nix::errno::Errno;
    use nix::fcntl::{open, openat, OFlag};
    use nix::sys::stat::{fstat, Mode, SFlag};
    use std::path::Component;
    let refused = |reason: &str| OutputError::Refused {
        name: name.to_string(),
        reason: reason.to_string(),
    };
    let parts: Vec<&std::ffi::OsStr> = Path::new(name)
        .components()
        .map(|c| match c {
            Component::Normal(p) => Ok(p),
            _ => Err(refused("not a plain relative path ('..', '/' and '.' are not allowed)")),
        })
        .collect::<Result<_, _>>()?;
    let Some((last, dirs)) = parts.split_last() else {
        return Err(refused("empty name"));
    };
    let io_err = |e: Errno| OutputError::Io {
        name: name.to_string(),
        reason: e.desc().to_string(),
    };
    let dir_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut at = match open(work, dir_flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(None),
        Err(e) => return Err(io_err(e)),
    };
    for d in dirs {
        at = match openat(&at, *d, dir_flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(Errno::ELOOP) | Err(Errno::ENOTDIR) => {
                return Err(refused(&format!("'{}' is a symbolic link or not a directory", d.to_string_lossy())))
            }
            Err(e) => return Err(io_err(e)),
        };
    }
    // O_NONBLOCK: a FIFO named as output must not hang the server.
    let fd = match openat(
        &at,
        *last,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(None),
        Err(Errno::ELOOP) => return Err(refused("it is a symbolic link")),
        Err(e) => return Err(io_err(e)),
    };
    let st = fstat(&fd).map_err(io_err)?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return Err(refused("it is not a regular file"));
    }
    if st.st_nlink > 1 {
        return Err(refused("it has other hard links"));
    }
    let file = File::from(fd);
    // Back to blocking reads for the copy.
    nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_SETFL(OFlag::empty())).map_err(io_err)?;
    Ok(Some(file))
}

/// The first component (in the order given) whose working directory holds output `name`:
/// `(site, open file)`. A refusal (link, not a regular file, bad name) is an error naming
/// the output; a component that did not write it is skipped.
pub fn find_output(components: impl IntoIterator<Item = (String, PathBuf)>, name: &str) -> Result<Option<(String, File)>, OutputError> {
    for (site, dir) in components {
        if let Some(f) = open_output(&crate::supervise::work_dir(&dir), name)? {
            return Ok(Some((site, f)));
        }
    }
    Ok(None)
}

/// SHA-256 and size of a file.
pub fn checksum(path: &Path) -> io::Result<(String, u64)> {
    checksum_open(&File::open(path)?)
}

/// SHA-256 and size of an open file, read from its start by position: its offset stays where
/// it was (the file can still be copied from it afterwards).
pub fn checksum_open(f: &File) -> io::Result<(String, u64)> {
    use std::os::unix::fs::FileExt;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut bytes = 0;
    loop {
        let n = match f.read_at(&mut buf, bytes) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    Ok((crate::store::hex(&hasher.finalize()), bytes))
}

/// Removes temporary files left by an interrupted copy or record write (startup).
pub fn remove_partials(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.contains(".part.") {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

// ----- replicas in use -----------------------------------------------------------------------

/// Size and modification time of a replica when it was last found intact.
type Stamp = (u64, i64, i64);

/// Replicas found intact: the stamp they had then, and when their content was last hashed
/// (ms; the fast path of [`verify_replica`] and [`scrub_replica`]).
type Verified = std::collections::HashMap<PathBuf, (Stamp, u64)>;
static VERIFIED: std::sync::Mutex<Option<Verified>> = std::sync::Mutex::new(None);

fn stamp(path: &Path) -> io::Result<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path)?;
    if !m.file_type().is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok((m.len(), m.mtime(), m.mtime_nsec()))
}

fn verified() -> std::sync::MutexGuard<'static, Option<Verified>> {
    VERIFIED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Records that the replica at `path` was just written and checked (a verified copy).
pub fn note_verified(path: &Path) {
    if let Ok(st) = stamp(path) {
        verified()
            .get_or_insert_with(Default::default)
            .insert(path.to_path_buf(), (st, crate::now_ms()));
    }
}

/// How [`scrub_replica`] found a replica intact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intact {
    /// Same size and modification time as when last hashed, recently enough: not read.
    Unchanged,
    /// Hashed now (this many bytes read).
    Hashed(u64),
}

/// Why a replica is not what the catalogue says.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// It cannot be read (gone, not a regular file, an I/O error).
    #[error("{}: {error}", path.display())]
    Unreadable { path: PathBuf, error: io::Error },
    #[error("{}: {actual} bytes, the catalogue says {expected}", path.display())]
    WrongSize { path: PathBuf, actual: u64, expected: u64 },
    #[error("{}: content changed (sha256 {actual}, the catalogue says {expected})", path.display())]
    ContentChanged { path: PathBuf, actual: String, expected: String },
}

/// Checks a replica: its size against the catalogue, then its content: hashed unless its
/// size and modification time are those it had when last found intact, at most `rehash_ms`
/// ago (the fast path).
fn check_replica(path: &Path, sha256: &str, size: u64, rehash_ms: u64) -> Result<Intact, ReplicaError> {
    let unreadable = |error| ReplicaError::Unreadable {
        path: path.to_path_buf(),
        error,
    };
    let before = stamp(path).map_err(unreadable)?;
    if before.0 != size {
        return Err(ReplicaError::WrongSize {
            path: path.to_path_buf(),
            actual: before.0,
            expected: size,
        });
    }
    let now = crate::now_ms();
    let known = verified().as_ref().and_then(|m| m.get(path).copied());
    if known.is_some_and(|(st, at)| st == before && now.saturating_sub(at) < rehash_ms) {
        return Ok(Intact::Unchanged);
    }
    let (actual, bytes) = checksum(path).map_err(unreadable)?;
    if bytes != size || actual != sha256 {
        return Err(ReplicaError::ContentChanged {
            path: path.to_path_buf(),
            actual,
            expected: sha256.to_string(),
        });
    }
    verified()
        .get_or_insert_with(Default::default)
        .insert(path.to_path_buf(), (before, now));
    Ok(Intact::Hashed(bytes))
}

/// Checks a replica before a job uses it: when its size and modification time are those it
/// had when last found intact, it is taken as intact (fast path); otherwise (changed, or not
/// checked since the server started) its SHA-256 is computed and compared with the catalogue.
pub(crate) fn verify_replica(path: &Path, sha256: &str, size: u64) -> Result<(), ReplicaError> {
    check_replica(path, sha256, size, u64::MAX).map(|_| ())
}

/// The periodic re-check of a replica no job is using (see `crate::daemon::scrub`): as
/// `verify_replica`, and hashed in any case when its content was last hashed `rehash_ms`
/// ago or more (a change that kept size and modification time: bit rot, a careless restore).
pub fn scrub_replica(path: &Path, sha256: &str, size: u64, rehash_ms: u64) -> Result<Intact, ReplicaError> {
    check_replica(path, sha256, size, rehash_ms)
}

/// Moves a corrupt replica aside (`<file>.quarantined`), out of every job's way.
pub fn quarantine(path: &Path) {
    if let Some(m) = verified().as_mut() {
        m.remove(path);
    }
    let mut to = path.as_os_str().to_owned();
    to.push(".quarantined");
    if let Err(e) = std::fs::rename(path, &to) {
        tracing::warn!(path = %path.display(), error = %e, "cannot quarantine a corrupt replica");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scrub's fast path trusts an unchanged size and modification time until the rehash
    /// age; a change that kept both is found once the replica is due again.
    #[test]
    fn a_replica_is_hashed_when_changed_and_again_when_due() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("r");
        // Writes `bytes` with modification time `secs` (explicit: writes in one tick of the
        // file system's clock would share a time).
        let put = |bytes: &[u8], secs: u64| {
            std::fs::write(&path, bytes).unwrap();
            let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
            std::fs::File::options().write(true).open(&path).unwrap().set_modified(t).unwrap();
        };
        put(b"intact bytes", 1_000);
        let (sha, size) = checksum(&path).unwrap();
        let week = 7 * 86_400_000;
        assert_eq!(
            scrub_replica(&path, &sha, size, week).unwrap(),
            Intact::Hashed(size),
            "first look: hashed"
        );
        assert_eq!(scrub_replica(&path, &sha, size, week).unwrap(), Intact::Unchanged, "fast path");
        // Bit rot: same size, same modification time.
        put(b"rotted bytes", 1_000);
        assert_eq!(scrub_replica(&path, &sha, size, week).unwrap(), Intact::Unchanged, "not due yet");
        let e = scrub_replica(&path, &sha, size, 0).unwrap_err();
        assert!(
            matches!(&e, ReplicaError::ContentChanged { expected, .. } if *expected == sha),
            "{e}"
        );
        assert!(e.to_string().contains("content changed"), "{e}");
        // A change of modification time is hashed at once.
        put(b"intact bytes", 2_000);
        assert_eq!(scrub_replica(&path, &sha, size, week).unwrap(), Intact::Hashed(size));
        put(b"other  bytes", 3_000);
        assert!(scrub_replica(&path, &sha, size, week).is_err());
        assert!(verify_replica(&path, &sha, size).is_err());
        // A size other than the catalogue's, and a replica gone, name the path.
        put(b"short", 4_000);
        let e = verify_replica(&path, &sha, size).unwrap_err();
        assert!(
            matches!(e, ReplicaError::WrongSize { actual: 5, expected, .. } if expected == size),
            "{e}"
        );
        assert_eq!(e.to_string(), format!("{}: 5 bytes, the catalogue says {size}", path.display()));
        std::fs::remove_file(&path).unwrap();
        let e = verify_replica(&path, &sha, size).unwrap_err();
        assert!(matches!(e, ReplicaError::Unreadable { .. }), "{e}");
        assert!(e.to_string().starts_with(&format!("{}: ", path.display())), "{e}");
    }
}
