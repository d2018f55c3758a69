//! File copies between site storages: stage-in before a job starts, stage-out after, and
//! registration of user files. Every copy is written to a temporary name, checksummed while
//! copying, fsynced and renamed into place only when its SHA-256 matches the catalogue: a
//! half-written or corrupted file is never used.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use sha2::{Digest, Sha256};

#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("checksum mismatch for {path}: expected {expected}, got {actual}")]
    Checksum { path: String, expected: String, actual: String },
    #[error("size mismatch for {path}: expected {expected} bytes, got {actual}")]
    Size { path: String, expected: u64, actual: u64 },
}

/// Result of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    pub bytes: u64,
    pub sha256: String,
    pub millis: u64,
}

/// The storage path of a logical file at a site (logical names may contain '/').
pub fn storage_path(storage: &Path, logical: &str) -> PathBuf {
    let safe: String = logical
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' })
        .collect();
    // Keep distinct logical names distinct even when sanitizing collides.
    let tag = &crate::store::sha256_hex(logical.as_bytes())[..8];
    storage.join(format!("{safe}.{tag}"))
}

/// Copies `src` to `dest` via a temporary file; when `expect` is given (sha256, size), the copy
/// is refused (and the temporary removed) unless it matches.
pub fn copy_verified(src: &Path, dest: &Path, expect: Option<(&str, u64)>) -> Result<Copied, TransferError> {
    let started = Instant::now();
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut tmp_name = dest.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(format!(".part.{}.{}", std::process::id(), crate::now_ms()));
    let tmp = dest.with_file_name(tmp_name);
    let result = (|| -> Result<Copied, TransferError> {
        let mut input = File::open(src)?;
        let mut out = File::create(&tmp)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut bytes = 0u64;
        loop {
            let n = input.read(&mut buf)?;
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
                    path: src.display().to_string(),
                    expected: want_size,
                    actual: bytes,
                });
            }
            if sha != want_sha {
                return Err(TransferError::Checksum {
                    path: src.display().to_string(),
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

/// SHA-256 and size of a file.
pub fn checksum(path: &Path) -> io::Result<(String, u64)> {
    let mut f = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut bytes = 0;
    loop {
        let n = f.read(&mut buf)?;
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
