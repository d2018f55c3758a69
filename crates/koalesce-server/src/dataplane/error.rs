//! Whose fault a failed transfer is.
//!
//! A transfer has a source (the agent or local file the bytes come from) and a destination
//! (where they go); the caller is whoever asked. Issue 8 requires that a checksum failure
//! blames — and quarantines — the *source* replica, never the destination: so a content
//! mismatch is [`TransferError::SourceCorrupt`] only when the sender itself hashed the bytes it
//! sent and they were wrong; when the sender's bytes were right and the receiver got others it
//! is [`TransferError::DamagedInTransit`], blamed on the destination side.

use serde::{Deserialize, Serialize};

/// The two agents of a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Source,
    Destination,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Source => "source",
            Role::Destination => "destination",
        })
    }
}

/// Who is to blame for a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Blame {
    /// The source replica or its agent: try another replica; quarantine it if corrupt.
    Source,
    /// The destination agent (unreachable, full, refusing, or the path to it damaged data).
    Destination,
    /// The caller itself (its own disk, a request it should not have made).
    Caller,
}

/// A failed transfer, typed by whose fault it is ([`TransferError::blame`]). Serializable: a
/// source agent that fails a push answers with it, so the server sees the same error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TransferError {
    #[error("{role} agent {url} unreachable: {reason}")]
    Unreachable { role: Role, url: String, reason: String },
    #[error("{role} agent {url} refused the request ({status}): {message}")]
    Refused {
        role: Role,
        url: String,
        status: u16,
        message: String,
    },
    #[error("source {url} has no file '{path}'")]
    SourceMissing { url: String, path: String },
    #[error("source {url} cannot read '{path}': {reason}")]
    SourceUnreadable { url: String, path: String, reason: String },
    #[error(
        "source content of '{path}' at {url} is corrupt: expected sha256 {expected_sha256} ({expected_size} bytes), it holds {actual_sha256} ({actual_size} bytes)"
    )]
    SourceCorrupt {
        url: String,
        path: String,
        expected_sha256: String,
        expected_size: u64,
        actual_sha256: String,
        actual_size: u64,
    },
    #[error("destination {url} is full: {message}")]
    DestinationFull { url: String, message: String },
    #[error("'{path}' was damaged on the way to {url}: the sender's bytes had sha256 {expected_sha256}, the receiver got {actual_sha256}")]
    DamagedInTransit {
        url: String,
        path: String,
        expected_sha256: String,
        actual_sha256: String,
    },
    #[error("local file {path}: {reason}")]
    Local { path: String, reason: String },
    #[error("{role} agent {url} answered unexpectedly: {message}")]
    Protocol { role: Role, url: String, message: String },
}

impl TransferError {
    /// Whose fault the failure is.
    pub fn blame(&self) -> Blame {
        match self {
            TransferError::Unreachable { role, .. } | TransferError::Refused { role, .. } | TransferError::Protocol { role, .. } => {
                match role {
                    Role::Source => Blame::Source,
                    Role::Destination => Blame::Destination,
                }
            }
            TransferError::SourceMissing { .. } | TransferError::SourceUnreadable { .. } | TransferError::SourceCorrupt { .. } => {
                Blame::Source
            }
            TransferError::DestinationFull { .. } | TransferError::DamagedInTransit { .. } => Blame::Destination,
            TransferError::Local { .. } => Blame::Caller,
        }
    }

    /// The source replica's content is wrong: quarantine it in the catalogue.
    pub fn source_is_corrupt(&self) -> bool {
        matches!(self, TransferError::SourceCorrupt { .. })
    }

    /// A later try of the same transfer may succeed (it resumes where this one stopped).
    pub fn is_transient(&self) -> bool {
        matches!(self, TransferError::Unreachable { .. } | TransferError::DamagedInTransit { .. })
    }
}
