//! One call that moves a file between any two places a site's storage can be: a site's
//! storage agent or a file on this machine. Stage-in, stage-out, replication and
//! server-to-server migration all go through [`move_file`] (or [`move_resuming`]), so every
//! transfer is verified against the same [`Expected`] content and reports the same
//! [`TransferReport`] (with the throughput that feeds the forecaster).
//!
//! | from → to       | how                                                              |
//! |-----------------|------------------------------------------------------------------|
//! | agent → agent   | third-party push: the source agent sends to the destination's data URL |
//! | local → agent   | upload from this machine (resumes what the agent holds)          |
//! | agent → local   | download to this machine (resumes its partial file)              |
//! | local → local   | verified copy (today's path for sites without agents)            |

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{AgentClient, Expected, SiteAgent, TransferError, TransferReport};
use crate::transfer;

/// Where a file is, or is to be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// At a site's storage agent, under `path` (relative to the agent's root).
    Agent { agent: SiteAgent, path: String },
    /// A file on this machine.
    Local(PathBuf),
}

impl Place {
    /// How the place is named in messages.
    pub fn describe(&self) -> String {
        match self {
            Place::Agent { agent, path } => format!("{}:{path} (agent {})", agent.site, agent.control.url),
            Place::Local(p) => p.display().to_string(),
        }
    }
}

/// How often a transfer that failed on the way is asked again (each try resumes).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Tries in all (at least 1).
    pub tries: u32,
    /// Wait before the second try; doubled before every later one.
    pub backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            tries: 4,
            backoff: Duration::from_millis(250),
        }
    }
}

/// Moves `from` to `to` as content `expect` (refused, and nothing installed at `to`, unless
/// the bytes that arrive have that size and SHA-256).
pub fn move_file(client: &AgentClient, from: &Place, to: &Place, expect: &Expected) -> Result<TransferReport, TransferError> {
    match (from, to) {
        (Place::Agent { agent: a, path: p }, Place::Agent { agent: b, path: q }) => {
            client.push(&a.control, p, &b.data_endpoint(), q, expect)
        }
        (Place::Local(src), Place::Agent { agent, path }) => client.upload(&agent.control, path, src, Some(expect)),
        (Place::Agent { agent, path }, Place::Local(dest)) => client.download(&agent.control, path, dest, expect),
        (Place::Local(src), Place::Local(dest)) => {
            let copied = transfer::copy_verified(src, dest, Some((&expect.sha256, expect.size))).map_err(|e| local_error(src, dest, e))?;
            Ok(local_report(copied))
        }
    }
}

/// Sends an open local file (`what` names it in errors) to `to`; without `expect` its content
/// is whatever the file holds.
pub fn send_open(
    client: &AgentClient,
    file: File,
    what: &Path,
    to: &Place,
    expect: Option<&Expected>,
) -> Result<TransferReport, TransferError> {
    match to {
        Place::Agent { agent, path } => client.upload_open(&agent.control, path, file, what, expect),
        Place::Local(dest) => {
            let name = what.display().to_string();
            let copied = transfer::copy_file_verified(file, &name, dest, expect.map(|e| (e.sha256.as_str(), e.size)))
                .map_err(|e| local_error(what, dest, e))?;
            Ok(local_report(copied))
        }
    }
}

/// [`move_file`], asked again after a failure that a later try may overcome (an agent that
/// stopped answering, bytes damaged on the way): every try resumes where the last stopped.
pub fn move_resuming(
    client: &AgentClient,
    from: &Place,
    to: &Place,
    expect: &Expected,
    retry: &RetryPolicy,
) -> Result<TransferReport, TransferError> {
    let mut wait = retry.backoff;
    let mut tries = 1;
    loop {
        match move_file(client, from, to, expect) {
            Err(e) if e.is_transient() && tries < retry.tries.max(1) => {
                tracing::info!(from = %from.describe(), to = %to.describe(), error = %e, "transfer interrupted; resuming");
                std::thread::sleep(wait);
                wait *= 2;
                tries += 1;
            }
            other => return other,
        }
    }
}

fn local_report(c: transfer::Copied) -> TransferReport {
    let secs = c.millis.max(1) as f64 / 1e3;
    TransferReport {
        size: c.bytes,
        bytes: c.bytes,
        resumed_from: 0,
        duration_ms: c.millis as f64,
        throughput_bps: c.bytes as f64 * 8.0 / secs,
        latency_ms: None,
        sha256: c.sha256,
    }
}

/// A local copy's failure in the data plane's terms (whose fault it is).
fn local_error(src: &Path, dest: &Path, e: transfer::TransferError) -> TransferError {
    let src_path = src.display().to_string();
    match e {
        transfer::TransferError::Io(e) => TransferError::Local {
            path: dest.display().to_string(),
            reason: e.to_string(),
        },
        transfer::TransferError::Source { source, .. } => TransferError::SourceUnreadable {
            url: "local".into(),
            path: src_path,
            reason: source.to_string(),
        },
        transfer::TransferError::Checksum { expected, actual, .. } => TransferError::SourceCorrupt {
            url: "local".into(),
            path: src_path,
            expected_sha256: expected,
            expected_size: 0,
            actual_sha256: actual,
            actual_size: 0,
        },
        transfer::TransferError::Size { expected, actual, .. } => TransferError::SourceCorrupt {
            url: "local".into(),
            path: src_path,
            expected_sha256: String::new(),
            expected_size: expected,
            actual_sha256: "unknown".into(),
            actual_size: actual,
        },
    }
}
