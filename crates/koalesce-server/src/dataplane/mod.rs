//! The data plane's client side: one module that stage-in, stage-out and server-to-server
//! migration all use to move files between storage agents ([`crate::agent`]).
//!
//! - [`AgentClient`]: download with resume and verification, upload with resume, third-party
//!   push (agent A sends to agent B, as GridFTP did for KOALA) and probes, with timeouts.
//! - [`TransferError`]: a typed failure that says whose fault it is ([`Blame`]): the source
//!   (unreachable, missing, corrupt content — quarantine that replica), the destination
//!   (unreachable, full, refusing, or data damaged on the way) or the caller.
//! - [`partial`]: resumable partial files (bytes + a record of how many are durable).
//! - [`wire`]: headers and JSON bodies shared with the agent.
//!
//! The protocol is described in `docs/data-plane.md`.

mod client;
mod error;
pub mod partial;
pub mod wire;

pub use client::{parse_content_range, partial_path, AgentClient, ClientConfig};
pub use error::{Blame, Role, TransferError};
pub use wire::{AgentStats, Endpoint, Expected, ListEntry, TransferReport, UploadStatus};
