//! The data plane's client side: one module that stage-in, stage-out and server-to-server
//! migration all use to move files between storage agents ([`crate::agent`]).
//!
//! - [`AgentClient`]: download with resume and verification, upload with resume, third-party
//!   push (agent A sends to agent B, as GridFTP did for KOALA) and probes, with timeouts.
//! - [`TransferError`]: a typed failure that says whose fault it is ([`Blame`]): the source
//!   (unreachable, missing, corrupt content — quarantine that replica), the destination
//!   (unreachable, full, refusing, or data damaged on the way) or the caller.
//! - [`partial`]: resumable partial files (bytes + a record of how many are durable).
//! - [`route`]: [`move_file`] between any two [`Place`]s (agent or local file), with
//!   [`move_resuming`] retrying what a later try can finish.
//! - [`wire`]: headers and JSON bodies shared with the agent.
//!
//! The protocol is described in `docs/data-plane.md`.

mod client;
mod error;
pub mod partial;
pub mod route;
pub mod wire;

pub(crate) use client::parse_content_range;
pub use client::{partial_path, AgentClient, ClientConfig};
pub use error::{Blame, Role, TransferError};
pub use route::{move_file, move_resuming, send_open, Place, RetryPolicy};
pub use wire::{AgentStats, Endpoint, Expected, ListEntry, TransferReport, UploadStatus};

use koalesce_core::model::Millis;
use koalesce_core::nws::Measurement;

/// Transfers smaller than this say more about latency than bandwidth: no measurement.
pub const MIN_MEASURED_BYTES: u64 = 64 << 10;

impl TransferReport {
    /// The bandwidth sample this transfer gives the forecaster (`None` when too little
    /// moved to time it), taken at `at`.
    pub fn measurement(&self, at: Millis) -> Option<Measurement> {
        (self.bytes >= MIN_MEASURED_BYTES && self.throughput_bps > 0.0).then_some(Measurement {
            at,
            bandwidth_bps: self.throughput_bps,
            latency_ms: self.latency_ms,
        })
    }
}

/// A site's storage agent as the server knows it: how the server reaches it (`control`) and
/// the URL other agents reach it by (`data_url`: on a shaped bed, its address inside the
/// bed; otherwise the same as the control URL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteAgent {
    pub site: String,
    pub control: Endpoint,
    pub data_url: String,
}

impl SiteAgent {
    /// The endpoint a *source* agent pushes to.
    pub fn data_endpoint(&self) -> Endpoint {
        Endpoint::new(self.data_url.clone(), self.control.token.clone())
    }

    /// Stage-in and replication: `from` pushes its `path` to this agent's `path`.
    pub fn pull_from(
        &self,
        client: &AgentClient,
        from: &SiteAgent,
        path: &str,
        expect: &Expected,
    ) -> Result<TransferReport, TransferError> {
        client.push(&from.control, path, &self.data_endpoint(), path, expect)
    }

    /// A bandwidth probe from `from` to this agent.
    pub fn probe_from(&self, client: &AgentClient, from: &SiteAgent, bytes: u64) -> Result<TransferReport, TransferError> {
        client.probe(&from.control, &self.data_endpoint(), bytes)
    }
}
