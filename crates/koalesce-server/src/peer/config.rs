//! `[federation]` in the server configuration: this server's name among its peers, the grid
//! scheduler's algorithm and the seed's parameters, and the peers (URL + shared peer secret).
//!
//! ```toml
//! [federation]
//! name = "alpha"                 # this server's name among its peers
//! algorithm = "s-i"              # "s-i", "r-i", "sy-i" (002 §III-A) or "local" (no migration)
//! clock_mhz = 1000               # clock of this server's processors: ERT scales with it
//! bandwidth_bps = 40e6           # forecast bandwidth to a peer (ADT) until one is measured
//! check_interval_ms = 1000       # how often the grid queue is examined
//! peer_timeout_ms = 2000         # a peer that does not answer within this is left out
//! backoff_initial_ms = 1000      # then marked unavailable for this long, doubling ...
//! backoff_max_ms = 60000         # ... up to this
//! handoff_timeout_ms = 600000    # a handoff prepared here and not committed for this long is aborted
//! received_retention_ms = 864000000 # a received job's inputs and outputs kept this long after it ended
//!                                #   when its origin never says `done` (10 days, as HTCondor's spool)
//! max_handoffs_per_peer = 10000  # at most this many handoffs from one peer prepared here and not
//!                                #   committed, and as many tombstones of it (aborts of handoffs never
//!                                #   seen here); beyond, its phase one / abort is refused with 429
//! tau = 1.4                      # the seed's parameters (002 §V); phi as a duration
//! phi = "1m"
//! epsilon = 0.01
//! sigma = "5m"                   # R-I / SY-I: RU checked every σ; volunteer below δ
//! delta = 0.7
//! output_ratio = 5.0             # expected output bytes per input byte (ADT out; the seed's 5)
//! probe_bytes = 262144           # measure each peer's bandwidth with this many bytes (0: never)
//! probe_interval_ms = 60000      # ... this often
//! [[federation.peers]]
//! name = "beta"
//! url = "http://10.0.0.2:7878"
//! secret_file = "/etc/koalesce/peer-beta.secret"   # the same secret on both sides of the pair
//! ```

use std::path::PathBuf;

use koalesce_core::federation::Params;
use serde::{Deserialize, Serialize};

/// The largest bandwidth probe a peer may ask for (and this server sends).
pub const MAX_PROBE_BYTES: u64 = 16 << 20;

/// The grid scheduler's method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum PeerAlgorithm {
    /// Sender-initiated: a job whose local AWT reaches φ asks every peer for ATT and RU.
    #[default]
    #[serde(rename = "s-i")]
    SenderInitiated,
    /// Receiver-initiated: servers whose RU is below δ volunteer every σ; a job whose local
    /// AWT reaches φ waits in the grid queue for a volunteer (002 §III-A2).
    #[serde(rename = "r-i")]
    ReceiverInitiated,
    /// Symmetric: R-I, and S-I at once when no volunteer is known (002 §III-A3).
    #[serde(rename = "sy-i")]
    Symmetric,
    /// Every job runs here (the seed's local baseline); the server still answers peers.
    #[serde(rename = "local")]
    Local,
}

impl PeerAlgorithm {
    pub fn name(self) -> &'static str {
        match self {
            PeerAlgorithm::SenderInitiated => "s-i",
            PeerAlgorithm::ReceiverInitiated => "r-i",
            PeerAlgorithm::Symmetric => "sy-i",
            PeerAlgorithm::Local => "local",
        }
    }

    /// Whether the server volunteers when its RU is below δ.
    pub fn volunteers(self) -> bool {
        matches!(self, PeerAlgorithm::ReceiverInitiated | PeerAlgorithm::Symmetric)
    }
}

/// One peer server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    pub name: String,
    /// Base URL of its API (`http://host:port`).
    pub url: String,
    /// File holding the secret this pair of servers shares (either side presents it).
    pub secret_file: PathBuf,
}

/// `[federation]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FederationConfig {
    pub name: String,
    pub algorithm: PeerAlgorithm,
    pub clock_mhz: u32,
    pub bandwidth_bps: f64,
    pub check_interval_ms: u64,
    pub peer_timeout_ms: u64,
    pub backoff_initial_ms: u64,
    pub backoff_max_ms: u64,
    /// A handoff a peer prepared here and did not commit (nor ask about) for this long is
    /// aborted here and its received inputs removed.
    pub handoff_timeout_ms: u64,
    /// A job a peer handed over that ended here this long ago, and whose origin never said
    /// `done` (it was lost, or its journal), has its received inputs and its outputs here
    /// removed (10 days by default: HTCondor keeps a finished spooled job's files as long).
    pub received_retention_ms: u64,
    /// At most this many handoffs from one peer prepared here and not committed, and at most
    /// as many of its tombstones (aborts of handoffs never seen here): what one peer can make
    /// this server keep. Beyond it its phase one, or its abort of an unknown handoff, answers
    /// 429 naming the bound.
    pub max_handoffs_per_peer: u64,
    pub tau: f64,
    /// φ as a duration ("1m", "30s", "500ms" are not allowed: whole seconds or more).
    pub phi: String,
    pub epsilon: f64,
    /// σ: how often RU is checked (R-I, SY-I) and a waiting job's AWT examined again.
    pub sigma: String,
    /// δ: a server with RU below it volunteers.
    pub delta: f64,
    /// Expected output bytes per input byte of a job (its ADT out; 002 §IV-B assumes 5).
    pub output_ratio: f64,
    /// Bytes of a bandwidth probe of each peer (0: no probes; measured transfers still count).
    pub probe_bytes: u64,
    /// How often each peer's bandwidth is probed.
    pub probe_interval_ms: u64,
    pub peers: Vec<PeerConfig>,
}

impl Default for FederationConfig {
    fn default() -> Self {
        let p = Params::default();
        FederationConfig {
            name: String::new(),
            algorithm: PeerAlgorithm::default(),
            clock_mhz: 1000,
            bandwidth_bps: 40e6,
            check_interval_ms: 1000,
            peer_timeout_ms: 2000,
            backoff_initial_ms: 1000,
            backoff_max_ms: 60_000,
            handoff_timeout_ms: 600_000,
            received_retention_ms: 10 * 24 * 3_600_000,
            max_handoffs_per_peer: 10_000,
            tau: p.tau,
            phi: format!("{}s", p.phi_ms / 1000),
            epsilon: p.epsilon,
            sigma: format!("{}m", p.sigma_ms / 60_000),
            delta: p.delta,
            output_ratio: 5.0,
            probe_bytes: 256 << 10,
            probe_interval_ms: 60_000,
            peers: Vec::new(),
        }
    }
}

fn plain_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl FederationConfig {
    /// The seed's parameters as configured.
    pub fn params(&self) -> anyhow::Result<Params> {
        let phi_ms = koalesce_api::duration::parse_ms(&self.phi).map_err(|e| anyhow::anyhow!("config: federation.phi: {e}"))?;
        let sigma_ms = koalesce_api::duration::parse_ms(&self.sigma).map_err(|e| anyhow::anyhow!("config: federation.sigma: {e}"))?;
        anyhow::ensure!(sigma_ms > 0, "config: federation.sigma must be positive");
        Ok(Params {
            tau: self.tau,
            phi_ms,
            epsilon: self.epsilon,
            sigma_ms,
            delta: self.delta,
        })
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            plain_name(&self.name),
            "config: federation.name '{}' must be 1-64 letters, digits, '-' or '_'",
            self.name
        );
        anyhow::ensure!(self.clock_mhz > 0, "config: federation.clock_mhz must be positive");
        anyhow::ensure!(
            self.bandwidth_bps.is_finite() && self.bandwidth_bps > 0.0,
            "config: federation.bandwidth_bps must be positive"
        );
        anyhow::ensure!(
            self.check_interval_ms > 0
                && self.peer_timeout_ms > 0
                && self.backoff_initial_ms > 0
                && self.handoff_timeout_ms > 0
                && self.received_retention_ms > 0
                && self.max_handoffs_per_peer > 0,
            "config: federation.check_interval_ms, peer_timeout_ms, backoff_initial_ms, handoff_timeout_ms, \
             received_retention_ms and max_handoffs_per_peer must be positive"
        );
        anyhow::ensure!(
            self.backoff_max_ms >= self.backoff_initial_ms,
            "config: federation.backoff_max_ms must be at least backoff_initial_ms"
        );
        anyhow::ensure!(self.tau.is_finite() && self.tau >= 1.0, "config: federation.tau must be at least 1");
        anyhow::ensure!(
            self.epsilon.is_finite() && (0.0..1.0).contains(&self.epsilon),
            "config: federation.epsilon must be in [0, 1)"
        );
        anyhow::ensure!(
            self.delta.is_finite() && (0.0..=1.0).contains(&self.delta),
            "config: federation.delta must be in [0, 1]"
        );
        anyhow::ensure!(
            self.output_ratio.is_finite() && (0.0..=1000.0).contains(&self.output_ratio),
            "config: federation.output_ratio must be in [0, 1000]"
        );
        anyhow::ensure!(
            self.probe_bytes <= MAX_PROBE_BYTES,
            "config: federation.probe_bytes must be at most {MAX_PROBE_BYTES}"
        );
        anyhow::ensure!(self.probe_interval_ms > 0, "config: federation.probe_interval_ms must be positive");
        self.params()?;
        let mut names = std::collections::BTreeSet::from([self.name.as_str()]);
        for p in &self.peers {
            anyhow::ensure!(
                plain_name(&p.name),
                "config: federation.peers: name '{}' must be 1-64 letters, digits, '-' or '_'",
                p.name
            );
            anyhow::ensure!(
                names.insert(p.name.as_str()),
                "config: federation.peers: '{}' appears twice (or is this server's own name)",
                p.name
            );
            anyhow::ensure!(
                p.url.starts_with("http://") || p.url.starts_with("https://"),
                "config: federation.peers '{}': url '{}' must start with http:// or https://",
                p.name,
                p.url
            );
        }
        Ok(())
    }
}

/// Reads a peer secret file: its first line, at least 16 characters.
pub fn read_secret(p: &PeerConfig) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(&p.secret_file)
        .map_err(|e| anyhow::anyhow!("federation peer '{}': reading secret_file {}: {e}", p.name, p.secret_file.display()))?;
    let secret = text.lines().next().unwrap_or("").trim().to_string();
    anyhow::ensure!(
        secret.len() >= 16,
        "federation peer '{}': the secret in {} is shorter than 16 characters",
        p.name,
        p.secret_file.display()
    );
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> FederationConfig {
        FederationConfig {
            name: "alpha".into(),
            peers: vec![PeerConfig {
                name: "beta".into(),
                url: "http://127.0.0.1:1".into(),
                secret_file: "/nonexistent".into(),
            }],
            ..FederationConfig::default()
        }
    }

    #[test]
    fn defaults_are_the_seeds_parameters() {
        let c = base();
        c.validate().unwrap();
        assert_eq!(c.params().unwrap(), Params::default());
    }

    #[test]
    fn bad_values_name_the_field() {
        type Edit = Box<dyn Fn(&mut FederationConfig)>;
        let cases: Vec<(Edit, &str)> = vec![
            (Box::new(|c| c.name = "a b".into()), "federation.name"),
            (Box::new(|c| c.tau = 0.5), "federation.tau"),
            (Box::new(|c| c.epsilon = f64::NAN), "federation.epsilon"),
            (Box::new(|c| c.phi = "soon".into()), "federation.phi"),
            (Box::new(|c| c.peers[0].name = "alpha".into()), "appears twice"),
            (Box::new(|c| c.peers[0].url = "ftp://x".into()), "url"),
            (Box::new(|c| c.backoff_max_ms = 1), "backoff_max_ms"),
            (Box::new(|c| c.delta = 1.5), "federation.delta"),
            (Box::new(|c| c.sigma = "0s".into()), "federation.sigma"),
            (Box::new(|c| c.output_ratio = -1.0), "federation.output_ratio"),
            (Box::new(|c| c.probe_bytes = 1 << 40), "federation.probe_bytes"),
            (Box::new(|c| c.handoff_timeout_ms = 0), "handoff_timeout_ms"),
            (Box::new(|c| c.received_retention_ms = 0), "received_retention_ms"),
            (Box::new(|c| c.max_handoffs_per_peer = 0), "max_handoffs_per_peer"),
        ];
        for (edit, want) in cases {
            let mut c = base();
            edit(&mut c);
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(want), "{e} should name {want}");
        }
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = toml::from_str::<FederationConfig>("name = \"a\"\ntua = 1.4\n").unwrap_err();
        assert!(e.to_string().contains("tua"), "{e}");
        let c: FederationConfig = toml::from_str("name = \"a\"\nalgorithm = \"local\"\n").unwrap();
        assert_eq!(c.algorithm, PeerAlgorithm::Local);
    }
}
