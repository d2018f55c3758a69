//! The bodies peers exchange and the grid job as users see it (JSON).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /api/v1/peer/offer`: a job's requirements (002 §III-A1: CPUs and run time, plus its
/// data volumes for the transfer times).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OfferRequest {
    pub processors: u32,
    /// Runtime estimate on the asking server.
    pub estimate_ms: u64,
    /// Clock of the asking server's processors.
    pub home_mhz: u32,
    #[serde(default)]
    pub input_bytes: u64,
    #[serde(default)]
    pub output_bytes: u64,
}

/// The answer: ATT (null: infinite, the job does not fit), the AWT behind it, and RU.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OfferAnswer {
    pub att_ms: Option<u64>,
    pub awt_ms: Option<u64>,
    pub ru: f64,
}

/// `POST /api/v1/peer/handoffs`: phase one of a migration. The receiver stores it durably
/// and does not run it until the origin commits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HandoffRequest {
    /// `<origin>-<grid id>-<attempt>`: unique, and it names the origin.
    pub handoff: String,
    /// The origin's user (shown; the job runs as the receiver's `peer-<origin>` user).
    pub user: String,
    /// The job description (TOML).
    pub description: String,
    /// Its input files as the origin's catalogue has them: the receiver fetches each from
    /// `GET /api/v1/peer/sent/{handoff}/inputs/{name}` and checks size and SHA-256.
    #[serde(default)]
    pub inputs: Vec<PeerFile>,
}

/// A file one peer offers another: its logical name where it is, size and SHA-256 (64
/// lower-case hex digits).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PeerFile {
    pub name: String,
    pub size_bytes: u64,
    pub sha256: String,
}

/// A handoff as the receiver holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HandoffState {
    pub handoff: String,
    /// `prepared`, `committed` or `aborted`.
    pub state: String,
    /// The receiver's job id once committed.
    pub job: Option<u64>,
    /// That job's state (`queued` … `succeeded`, `failed`, `cancelled`).
    pub job_state: Option<String>,
    /// Where it runs or ran (`<receiver>/<site>`).
    pub sites: Vec<String>,
    pub exit_ok: Option<bool>,
    pub failure: Option<String>,
    /// When it ended (Unix ms, the receiver's clock).
    #[serde(default)]
    pub finished_ms: Option<u64>,
    /// Its registered outputs (once it succeeded): the origin fetches each from
    /// `GET /api/v1/peer/handoffs/{handoff}/outputs/{name}`.
    #[serde(default)]
    pub outputs: Vec<PeerFile>,
    /// While prepared with input files: how many are here, of how many (and `failure` says why
    /// the last fetch failed).
    #[serde(default)]
    #[schema(value_type = Option<Vec<u64>>)]
    pub inputs_here: Option<(usize, usize)>,
    /// Once its job ended: each component's stdout and stderr (`c<component>/stdout`, …), for
    /// the origin to fetch from `GET /api/v1/peer/handoffs/{handoff}/logs/{name}`.
    #[serde(default)]
    pub logs: Vec<PeerFile>,
    /// The receiver let go of the job's data (inputs received for it, its outputs there): on
    /// the origin's `done`, or `received_retention_ms` after the job ended without one.
    #[serde(default)]
    pub released: bool,
}

/// Most sites of a peer's job kept at the origin.
const MAX_PEER_SITES: usize = 64;

impl HandoffState {
    /// This view as a peer sent it, made plain text for this server's users: states that are
    /// not state words become `unknown`, control and bidirectional-override characters in
    /// sites and the failure are written as visible escapes (`\n`, `\u{1b}`: they would reach
    /// users' terminals), and there are at most 64 sites (an untrusted peer's say-so).
    pub fn from_peer(mut self) -> HandoffState {
        fn word(s: &str) -> String {
            if !s.is_empty() && s.len() <= 32 && s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_' || b == b'-') {
                s.to_string()
            } else {
                "unknown".to_string()
            }
        }
        self.state = word(&self.state);
        self.job_state = self.job_state.as_deref().map(word);
        self.sites.truncate(MAX_PEER_SITES);
        for s in &mut self.sites {
            *s = plain(s, 200);
        }
        self.failure = self.failure.as_deref().map(|f| plain(f, 2000));
        self
    }
}

/// `s` with control and bidirectional-override characters written as visible escapes, cut to
/// `max` characters.
pub(crate) fn plain(s: &str, max: usize) -> String {
    let bidi = |c: char| matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}');
    let mut out = String::new();
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || bidi(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    if out.chars().count() > max {
        out = out.chars().take(max).collect::<String>() + "…";
    }
    out
}

/// A job of the grid queue, as `GET /api/v1/grid/jobs/{id}` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct GridJob {
    pub id: u64,
    pub name: String,
    pub user: String,
    /// `waiting` (grid queue), then the state of the job where it runs (`queued` …
    /// `succeeded`, `failed`, `cancelled`); `handing-over` during a migration.
    pub state: String,
    /// `local` or the peer's name; null while waiting.
    pub runs_at: Option<String>,
    /// The job's id on the server that runs it.
    pub job: Option<u64>,
    /// Sites it runs or ran on (`<server>/<site>`).
    pub sites: Vec<String>,
    pub exit_ok: Option<bool>,
    /// Why it stayed or moved: the ATTs and RUs the decision compared.
    pub reason: Option<String>,
    pub submitted_ms: u64,
    /// When it ended (Unix ms, on the clock of the server that ran it).
    pub finished_ms: Option<u64>,
    /// Its outputs in this server's catalogue (`koalesce files get NAME`): a job that ran at a
    /// peer has them fetched back and registered here as `grid-<id>/<file>` (or its `to`).
    #[serde(default)]
    pub outputs: Vec<String>,
    /// Why the job's data could not move (yet), if so.
    #[serde(default)]
    pub data_error: Option<String>,
    /// Why it failed (where it ran), if it did.
    #[serde(default)]
    pub failure: Option<String>,
    /// Its user asked to cancel it and the cancel is on its way to the peer that runs it.
    #[serde(default)]
    pub cancel_requested: bool,
}

/// A peer as `GET /api/v1/federation` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PeerStatus {
    pub name: String,
    pub url: String,
    pub available: bool,
    /// Failed calls in a row.
    pub failures: u32,
    /// When it is tried again (Unix ms), if unavailable.
    pub retry_at_ms: Option<u64>,
    pub last_error: Option<String>,
    /// The bandwidth from this peer to here, as last measured (bits/s; null: not measured,
    /// `bandwidth_bps` is used), and what ADTs for its jobs are computed with.
    #[serde(default)]
    pub measured_bps: Option<f64>,
}

/// `GET /api/v1/federation`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FederationStatus {
    pub name: String,
    pub algorithm: String,
    pub peers: Vec<PeerStatus>,
    /// Grid jobs by where they run: local, migrated out, waiting.
    pub local: u64,
    pub migrated_out: u64,
    pub waiting: u64,
    /// Jobs peers handed to this server.
    pub received: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peers_view_becomes_plain_text() {
        let v: HandoffState = serde_json::from_value(serde_json::json!({
            "handoff": "alpha-1-1", "state": "committed\u{1b}[2J", "job": 1, "job_state": "timeout",
            "sites": ["b/b1\n", "b/\u{202e}x"], "exit_ok": null, "failure": "a\tb\u{7}"}))
        .unwrap();
        let v = v.from_peer();
        assert_eq!((v.state.as_str(), v.job_state.as_deref()), ("unknown", Some("timeout")));
        assert_eq!(v.sites, vec!["b/b1\\n".to_string(), "b/\\u{202e}x".to_string()]);
        assert_eq!(v.failure.as_deref(), Some("a\\tb\\u{7}"));
        assert_eq!(plain(&"x".repeat(10), 4), "xxxx…");
    }
}
