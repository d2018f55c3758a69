//! A resumable partial file: the bytes of an interrupted transfer, kept under a temporary
//! name with a small sidecar that records how many of them are known to be on disk.
//!
//! `NAME` holds the bytes, `NAME.offset` holds `{"sha256": …, "offset": N}`: the file's first
//! N bytes were fsynced before the sidecar was written, so after any interruption (a closed
//! connection, a killed process, a crash) the transfer resumes from N. Bytes after N may be
//! missing or torn and are cut off. The content the bytes belong to is part of the record, so
//! a partial is never resumed for other content. A partial is only ever renamed into place by
//! its owner after the whole file's SHA-256 matched.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Bytes between two checkpoints (fsync + sidecar).
pub const CHECKPOINT_BYTES: u64 = 4 << 20;

#[derive(Debug, Serialize, Deserialize)]
struct Record {
    sha256: String,
    offset: u64,
}

fn sidecar(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(".offset");
    PathBuf::from(s)
}

/// Bytes of content `sha256` that a partial at `path` holds durably (0 when none), without
/// opening it for writing.
pub fn resumable_offset(path: &Path, sha256: &str) -> u64 {
    let Some(rec) = std::fs::read(sidecar(path))
        .ok()
        .and_then(|b| serde_json::from_slice::<Record>(&b).ok())
    else {
        return 0;
    };
    if !rec.sha256.eq_ignore_ascii_case(sha256) {
        return 0;
    }
    let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    rec.offset.min(len)
}

/// An open partial file being appended to.
pub struct Partial {
    path: PathBuf,
    file: File,
    sha256: String,
    len: u64,
    checkpointed: u64,
    hasher: Sha256,
}

/// A partial whose every byte is written and synced.
pub struct Complete {
    pub path: PathBuf,
    pub file: File,
    pub len: u64,
    /// SHA-256 (lower-case hex) of the whole content.
    pub sha256: String,
}

impl Partial {
    /// Opens the partial at `path` for content `sha256`, keeping what an earlier transfer of
    /// the same content left durably (the prefix is read back to seed the checksum), or
    /// starting empty.
    pub fn open(path: PathBuf, sha256: &str) -> io::Result<Partial> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let keep = resumable_offset(&path, sha256);
        let mut file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path)?;
        file.set_len(keep)?;
        let mut hasher = Sha256::new();
        if keep > 0 {
            file.seek(SeekFrom::Start(0))?;
            let n = io::copy(&mut (&mut file).take(keep), &mut HashWriter(&mut hasher))?;
            if n != keep {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "partial file shorter than its record"));
            }
        }
        file.seek(SeekFrom::Start(keep))?;
        Ok(Partial {
            path,
            file,
            sha256: sha256.to_ascii_lowercase(),
            len: keep,
            checkpointed: keep,
            hasher,
        })
    }

    /// Bytes held.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Drops everything held and starts again from byte 0.
    pub fn restart(&mut self) -> io::Result<()> {
        let _ = std::fs::remove_file(sidecar(&self.path));
        self.file.set_len(0)?;
        self.file.seek(SeekFrom::Start(0))?;
        self.len = 0;
        self.checkpointed = 0;
        self.hasher = Sha256::new();
        Ok(())
    }

    /// Appends `buf`; checkpoints every [`CHECKPOINT_BYTES`].
    pub fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.file.write_all(buf)?;
        self.hasher.update(buf);
        self.len += buf.len() as u64;
        if self.len - self.checkpointed >= CHECKPOINT_BYTES {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// Makes the bytes held so far durable and records their count for a resume.
    pub fn checkpoint(&mut self) -> io::Result<()> {
        if self.len == self.checkpointed && sidecar(&self.path).exists() {
            return Ok(());
        }
        self.file.sync_data()?;
        let rec = serde_json::to_vec(&Record {
            sha256: self.sha256.clone(),
            offset: self.len,
        })
        .map_err(io::Error::other)?;
        crate::supervise::write_atomic(&sidecar(&self.path), &rec)?;
        self.checkpointed = self.len;
        Ok(())
    }

    /// All bytes are in: syncs them, forgets the resume record and returns the file with
    /// the content's SHA-256 (the caller compares it and renames or discards).
    pub fn complete(self) -> io::Result<Complete> {
        self.file.sync_all()?;
        let _ = std::fs::remove_file(sidecar(&self.path));
        Ok(Complete {
            path: self.path,
            file: self.file,
            len: self.len,
            sha256: crate::store::hex(&self.hasher.finalize()),
        })
    }

    /// Removes the partial and its record.
    pub fn discard(self) {
        remove(&self.path);
    }
}

/// Removes a partial file and its record.
pub fn remove(path: &Path) {
    let _ = std::fs::remove_file(sidecar(path));
    let _ = std::fs::remove_file(path);
}

/// An `io::Write` that feeds a hasher.
pub(crate) struct HashWriter<'a>(pub &'a mut Sha256);

impl Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "aa00000000000000000000000000000000000000000000000000000000000000";

    #[test]
    fn resumes_only_checkpointed_bytes_of_the_same_content() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.part");
        let mut part = Partial::open(p.clone(), SHA).unwrap();
        part.write_all(b"hello ").unwrap();
        part.checkpoint().unwrap();
        part.write_all(b"world").unwrap(); // not checkpointed: cut off on reopen
        drop(part);
        assert_eq!(resumable_offset(&p, SHA), 6);
        assert_eq!(resumable_offset(&p, &SHA.replace("aa", "bb")), 0, "other content");
        let mut part = Partial::open(p.clone(), SHA).unwrap();
        assert_eq!(part.len(), 6);
        part.write_all(b"there").unwrap();
        let done = part.complete().unwrap();
        assert_eq!(std::fs::read(&done.path).unwrap(), b"hello there");
        assert_eq!(done.sha256, crate::store::sha256_hex(b"hello there"));
        assert_eq!(resumable_offset(&p, SHA), 0, "a completed partial is not resumed");
        // Another content at the same name starts over.
        let part = Partial::open(p.clone(), &SHA.replace("aa", "cc")).unwrap();
        assert_eq!(part.len(), 0);
        part.discard();
        assert!(!p.exists());
    }

    #[test]
    fn a_record_longer_than_the_file_is_clamped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("y.part");
        let mut part = Partial::open(p.clone(), SHA).unwrap();
        part.write_all(&[7u8; 100]).unwrap();
        part.checkpoint().unwrap();
        drop(part);
        std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(40).unwrap();
        assert_eq!(resumable_offset(&p, SHA), 40);
        let mut part = Partial::open(p, SHA).unwrap();
        assert_eq!(part.len(), 40);
        part.restart().unwrap();
        assert!(part.is_empty());
    }
}
