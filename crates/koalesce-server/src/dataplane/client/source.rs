//! What an upload or push reads from ([`Source`]: a local file or an agent's file, which
//! decides whose fault a read error or bad content is) and the request [`Body`] that hashes
//! and counts the bytes it sends.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::super::partial::HashWriter;
use super::super::wire::Expected;
use super::super::{Endpoint, TransferError};
use super::http::local_error;
use super::CHUNK;

/// What an upload reads from: a file and where it lives.
pub(super) struct Source {
    pub(super) file: File,
    pub(super) origin: Origin,
}

pub(super) enum Origin {
    /// A file of the caller (an upload).
    Local(PathBuf),
    /// A file of the agent that pushes it (failures are the source's).
    Agent { url: String, path: String },
}

impl Source {
    /// A body reader from `offset`, its checksum seeded with the bytes before.
    pub(super) fn body_from_parts(file: &mut File, offset: u64) -> io::Result<Body<&mut File>> {
        file.seek(SeekFrom::Start(0))?;
        let mut hasher = Sha256::new();
        let n = io::copy(&mut (&mut *file).take(offset), &mut HashWriter(&mut hasher))?;
        if n != offset {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while being sent"));
        }
        let mut body = Body::new(file, 0);
        body.hasher = hasher;
        Ok(body)
    }

    pub(super) fn hash_all(&mut self) -> io::Result<String> {
        self.file.seek(SeekFrom::Start(0))?;
        hash_reader(&mut self.file)
    }
}

impl Origin {
    pub(super) fn read_error(&self, dest: &Endpoint, e: io::Error) -> TransferError {
        match self {
            Origin::Local(path) => local_error(path, e),
            Origin::Agent { url, path } => TransferError::SourceUnreadable {
                url: url.clone(),
                path: path.clone(),
                reason: format!("{e} (while sending to {})", dest.url),
            },
        }
    }

    pub(super) fn corrupt(&self, expect: &Expected, actual_sha256: String, actual_size: u64) -> TransferError {
        let (url, path) = match self {
            Origin::Local(path) => ("local".to_string(), path.display().to_string()),
            Origin::Agent { url, path } => (url.clone(), path.clone()),
        };
        TransferError::SourceCorrupt {
            url,
            path,
            expected_sha256: expect.sha256.clone(),
            expected_size: expect.size,
            actual_sha256,
            actual_size,
        }
    }
}

/// A request body that hashes and counts what it sends and keeps its reader's error.
pub(super) struct Body<R> {
    pub(super) inner: R,
    pub(super) hasher: Sha256,
    pub(super) sent: u64,
    pub(super) started: Option<Instant>,
    pub(super) error: Option<io::Error>,
}

impl<R: Read> Body<R> {
    pub(super) fn new(inner: R, sent: u64) -> Self {
        Body {
            inner,
            hasher: Sha256::new(),
            sent,
            started: None,
            error: None,
        }
    }
}

impl<R: Read> Read for Body<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.started.get_or_insert_with(Instant::now);
        let cap = buf.len().min(CHUNK);
        match self.inner.read(&mut buf[..cap]) {
            Ok(n) => {
                self.hasher.update(&buf[..n]);
                self.sent += n as u64;
                Ok(n)
            }
            Err(e) => {
                let copy = io::Error::new(e.kind(), e.to_string());
                self.error = Some(e);
                Err(copy)
            }
        }
    }
}
pub(super) fn hash_reader(r: &mut impl Read) -> io::Result<String> {
    let mut hasher = Sha256::new();
    io::copy(r, &mut HashWriter(&mut hasher))?;
    Ok(crate::store::hex(&hasher.finalize()))
}
