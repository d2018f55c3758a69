//! The agent's file system access: every path a client names is checked here and resolved
//! *beneath* the root directory by the kernel (`openat2` with `RESOLVE_BENEATH`), so no
//! request can read, write or delete anything outside the root — not through `..`, not
//! through an absolute path, not through a symlink that points out (even one swapped in
//! while the request runs), not through `/proc` magic links.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Mutex;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags};

/// The directory inside the root where the agent keeps its own state (partial uploads, a
/// generated token). No client path may enter it.
pub const RESERVED: &str = ".koalesce-agent";

/// Longest path a client may name (bytes).
const MAX_PATH: usize = 1024;

/// A client's path that is safe to resolve beneath the root: relative, no `.`/`..`/empty
/// components, no NUL or control characters, not inside [`RESERVED`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SafePath {
    parts: Vec<String>,
}

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("empty path")]
    Empty,
    #[error("absolute paths are not allowed (paths are relative to the agent's root)")]
    Absolute,
    #[error("path component '{0}' is not allowed ('.', '..' and empty components are refused)")]
    Component(String),
    #[error("path contains a NUL or control character")]
    Control,
    #[error("path is longer than {MAX_PATH} bytes")]
    TooLong,
    #[error("'{RESERVED}' is the agent's own directory")]
    Reserved,
}

impl SafePath {
    pub fn parse(raw: &str) -> Result<SafePath, PathError> {
        if raw.is_empty() {
            return Err(PathError::Empty);
        }
        if raw.len() > MAX_PATH {
            return Err(PathError::TooLong);
        }
        if raw.chars().any(|c| c.is_control()) {
            return Err(PathError::Control);
        }
        if raw.starts_with('/') {
            return Err(PathError::Absolute);
        }
        let mut parts = Vec::new();
        for p in raw.split('/') {
            if p.is_empty() || p == "." || p == ".." || p.contains('\\') || p.len() > 255 {
                return Err(PathError::Component(p.chars().take(40).collect()));
            }
            parts.push(p.to_string());
        }
        if parts[0] == RESERVED {
            return Err(PathError::Reserved);
        }
        Ok(SafePath { parts })
    }

    pub fn as_str(&self) -> String {
        self.parts.join("/")
    }

    fn file_name(&self) -> &str {
        self.parts.last().expect("non-empty")
    }

    fn parent_parts(&self) -> &[String] {
        &self.parts[..self.parts.len() - 1]
    }
}

impl std::fmt::Display for SafePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.as_str())
    }
}

const BENEATH: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);

fn io_err(e: rustix::io::Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

/// True when the error means the path tried to leave the root (a symlink pointing out).
pub fn is_escape(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EXDEV) || e.raw_os_error() == Some(libc::ELOOP)
}

/// The agent's root directory, opened once.
pub struct Root {
    fd: OwnedFd,
}

impl Root {
    pub fn open(path: &Path) -> io::Result<Root> {
        let fd = rustix::fs::open(path, OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).map_err(io_err)?;
        Ok(Root { fd })
    }

    fn open_beneath(&self, rel: &str, flags: OFlags) -> io::Result<OwnedFd> {
        let rel = if rel.is_empty() { "." } else { rel };
        rustix::fs::openat2(&self.fd, rel, flags | OFlags::CLOEXEC | OFlags::NOCTTY, Mode::empty(), BENEATH).map_err(io_err)
    }

    /// Opens a regular file for reading (`NotFound` for anything else).
    pub fn open_file(&self, p: &SafePath) -> io::Result<(File, std::fs::Metadata)> {
        // O_NONBLOCK: opening a FIFO planted in the root must not hang the agent.
        let fd = self.open_beneath(&p.as_str(), OFlags::RDONLY | OFlags::NONBLOCK)?;
        let file = File::from(fd);
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(io::ErrorKind::NotFound, "not a regular file"));
        }
        Ok((file, meta))
    }

    /// The directory that holds `p`, created (each level beneath the root) when `create`.
    pub fn parent_dir(&self, p: &SafePath, create: bool) -> io::Result<OwnedFd> {
        let mut dir = self.open_beneath("", OFlags::DIRECTORY | OFlags::RDONLY)?;
        let mut prefix = String::new();
        for part in p.parent_parts() {
            if create {
                match rustix::fs::mkdirat(&dir, part.as_str(), Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(io_err(e)),
                }
            }
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            // Resolved from the root each time: a symlinked level may point anywhere beneath
            // the root, never out of it.
            dir = self.open_beneath(&prefix, OFlags::DIRECTORY | OFlags::RDONLY)?;
        }
        Ok(dir)
    }

    /// Moves a verified file (anywhere on the root's file system) to `p`, durably.
    pub fn install(&self, from: &Path, p: &SafePath) -> io::Result<()> {
        let dir = self.parent_dir(p, true)?;
        if let Ok(st) = rustix::fs::statat(&dir, p.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                return Err(io::Error::new(io::ErrorKind::IsADirectory, "a directory of that name exists"));
            }
        }
        rustix::fs::renameat(rustix::fs::CWD, from, &dir, p.file_name()).map_err(io_err)?;
        rustix::fs::fsync(&dir).map_err(io_err)
    }

    /// Checks, before a body is read, that `p` can be created: its parents are (or can be)
    /// directories beneath the root and it is not a directory itself.
    pub fn check_writable(&self, p: &SafePath) -> io::Result<()> {
        let dir = self.parent_dir(p, true)?;
        match rustix::fs::statat(&dir, p.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                Err(io::Error::new(io::ErrorKind::IsADirectory, "a directory of that name exists"))
            }
            _ => Ok(()),
        }
    }

    /// Deletes the file (or symlink) `p`; directories are refused.
    pub fn remove(&self, p: &SafePath) -> io::Result<()> {
        let dir = self.parent_dir(p, false)?;
        let st = rustix::fs::statat(&dir, p.file_name(), AtFlags::SYMLINK_NOFOLLOW).map_err(io_err)?;
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            return Err(io::Error::new(io::ErrorKind::IsADirectory, "a directory; only files are deleted"));
        }
        rustix::fs::unlinkat(&dir, p.file_name(), AtFlags::empty()).map_err(io_err)?;
        rustix::fs::fsync(&dir).map_err(io_err)
    }

    /// Free bytes on the root's file system (for an unprivileged writer).
    pub fn free_bytes(&self) -> io::Result<u64> {
        let st = rustix::fs::fstatvfs(&self.fd).map_err(io_err)?;
        Ok(st.f_bavail.saturating_mul(st.f_frsize))
    }

    /// Regular files under `prefix` (a directory; `None` for the whole root), without
    /// following symlinks, at most `limit` (the bool: the limit cut the listing).
    pub fn list(&self, prefix: Option<&SafePath>, limit: usize) -> io::Result<(Vec<(String, std::fs::Metadata)>, bool)> {
        let (start, base) = match prefix {
            Some(p) => (self.open_beneath(&p.as_str(), OFlags::DIRECTORY | OFlags::RDONLY)?, p.as_str()),
            None => (self.open_beneath("", OFlags::DIRECTORY | OFlags::RDONLY)?, String::new()),
        };
        let mut out = Vec::new();
        let mut stack = vec![(start, base)];
        while let Some((fd, rel)) = stack.pop() {
            let mut names: Vec<String> = Vec::new();
            for entry in Dir::read_from(&fd).map_err(io_err)? {
                let entry = entry.map_err(io_err)?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if name == "." || name == ".." || (rel.is_empty() && name == RESERVED) {
                    continue;
                }
                names.push(name);
            }
            names.sort();
            for name in names.into_iter().rev() {
                let child = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
                let Ok(st) = rustix::fs::statat(&fd, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) else {
                    continue;
                };
                match FileType::from_raw_mode(st.st_mode) {
                    FileType::Directory if stack.len() < 64 => {
                        let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                        if let Ok(sub) = rustix::fs::openat(&fd, name.as_str(), flags, Mode::empty()) {
                            stack.push((sub, child));
                        }
                    }
                    FileType::RegularFile => {
                        if out.len() >= limit {
                            return Ok((out, true));
                        }
                        let f = rustix::fs::openat(&fd, name.as_str(), OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty());
                        if let Ok(meta) = f.map_err(io_err).and_then(|f| File::from(f).metadata()) {
                            out.push((child, meta));
                        }
                    }
                    _ => {}
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok((out, false))
    }
}

impl AsFd for Root {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// SHA-256 of files the agent has seen, keyed by identity and change time, so that a HEAD
/// does not re-read a large file and any change (content, replacement) invalidates it.
#[derive(Default)]
pub struct ShaCache {
    map: Mutex<HashMap<(u64, u64), (FileStamp, String)>>,
}

/// What identifies one version of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

fn stamp(meta: &std::fs::Metadata) -> ((u64, u64), FileStamp) {
    use std::os::unix::fs::MetadataExt;
    (
        (meta.dev(), meta.ino()),
        FileStamp {
            size: meta.size(),
            mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
            ctime_ns: meta.ctime() as i128 * 1_000_000_000 + meta.ctime_nsec() as i128,
        },
    )
}

const SHA_CACHE_MAX: usize = 100_000;

impl ShaCache {
    /// The cached SHA-256 of this version of the file, if known.
    pub fn get(&self, meta: &std::fs::Metadata) -> Option<String> {
        let (key, st) = stamp(meta);
        let map = self.map.lock().unwrap();
        map.get(&key).filter(|(s, _)| *s == st).map(|(_, sha)| sha.clone())
    }

    pub fn put(&self, meta: &std::fs::Metadata, sha: String) {
        let (key, st) = stamp(meta);
        let mut map = self.map.lock().unwrap();
        if map.len() >= SHA_CACHE_MAX {
            map.clear();
        }
        map.insert(key, (st, sha));
    }

    /// The SHA-256 of an open file (from the cache or by reading it).
    pub fn of(&self, file: &mut File, meta: &std::fs::Metadata) -> io::Result<String> {
        if let Some(s) = self.get(meta) {
            return Ok(s);
        }
        use std::io::{Seek, SeekFrom};
        file.seek(SeekFrom::Start(0))?;
        let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
        io::copy(file, &mut crate::dataplane::partial::HashWriter(&mut hasher))?;
        let sha = crate::store::hex(&sha2::Digest::finalize(hasher));
        // Only cache if the file did not change while it was read.
        if stamp(&file.metadata()?) == stamp(meta) {
            self.put(meta, sha.clone());
        }
        Ok(sha)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_checked() {
        assert_eq!(SafePath::parse("a/b.txt").unwrap().as_str(), "a/b.txt");
        assert_eq!(SafePath::parse("..a/b..").unwrap().as_str(), "..a/b..");
        for (raw, want) in [
            ("", PathError::Empty),
            ("/etc/passwd", PathError::Absolute),
            ("a/../../etc", PathError::Component("..".into())),
            ("..", PathError::Component("..".into())),
            ("a/./b", PathError::Component(".".into())),
            ("a//b", PathError::Component(String::new())),
            ("a/", PathError::Component(String::new())),
            ("a\0b", PathError::Control),
            ("a\nb", PathError::Control),
            ("a\\..\\b", PathError::Component("a\\..\\b".into())),
            (".koalesce-agent/token", PathError::Reserved),
        ] {
            assert_eq!(SafePath::parse(raw), Err(want), "{raw:?}");
        }
        assert_eq!(SafePath::parse(&"x".repeat(2000)), Err(PathError::TooLong));
        assert!(
            SafePath::parse("sub/.koalesce-agent").is_ok(),
            "only the root's own directory is reserved"
        );
    }
}
