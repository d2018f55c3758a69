//! The server's configuration file (`koalesce server --config FILE`).
//!
//! ```toml
//! listen = "127.0.0.1:7878"      # overridden by --listen
//! body_limit = 1048576           # bytes; larger request bodies answer 413
//! poll_interval_ms = 100         # how often running components are checked
//! walltime_factor = 2.0          # a job without `walltime` may run its runtime estimate × this (0: no limit)
//! # Sites; default: the five DAS-2 clusters on the local executor.
//! [[sites]]
//! name = "vu"
//! processors = 144
//! kind = "local"                 # the site's LRM: "local" (default) or "slurm"
//! reservations = false           # whether it grants advance reservations
//! # A Slurm site (what `koalesce testbed up` writes into DIR/server.toml):
//! # [[sites]]
//! # name = "alpha"
//! # processors = 64
//! # kind = "slurm"
//! # [sites.slurm]
//! # conf = "/tmp/bed/alpha/slurm.conf"
//! # partition = "debug"          # also: account, qos, sbatch_args = [...], command_timeout_ms
//! # Or scale the default grid down (e.g. 0.1 → vu 14, leiden 5, ...; never below 1).
//! # site_scale = 0.1
//! # [sites.attributes]           # GridWay host variables (ARCH, CPU_MHZ, software tags, ...)
//! # cpu_mhz = 2800               # unset ones are discovered (see crate::gridway::sites)
//! [scheduler]                    # koalesce_core::SchedulerConfig; daemon defaults below
//! scan_interval = { kind = "fixed", interval_ms = 500 }
//! queueing = "koala"             # or "gridway": GridWay's job priority (fixed, share, deadline, waiting)
//! # [scheduler.gridway.banning]  # max_ms = 3600000, constant_ms = 650000 (GridWay's defaults)
//! [catalogue]                    # the data functions' catalogue cache (004 §3.3)
//! cache_entries = 1024           # files held at most (least recently used dropped first)
//! cache_max_age_ms = 60000       # an answer older than this is asked again
//!
//! # HTTP limits (see listener.rs)
//! max_connections = 4096         # open connections at once; more wait to be accepted
//! header_timeout_ms = 10000      # a request's header (and an idle keep-alive gap) within this
//! body_timeout_ms = 30000        # a request's body within this (else 408)
//!
//! # A blacklisted site is probed (its LRM asked for its processors) this long after the
//! # blacklisting, then with the wait doubled after every failed probe, at most
//! # site_probe_max_ms; a probe that answers re-admits it. 0 = no probes (as KOALA).
//! site_probe_ms = 5000
//! site_probe_max_ms = 300000
//! site_down_ms = 10000           # a site whose LRM does not answer this long is blacklisted
//!
//! # When the server runs as root: the Unix account of each koalesce user (default: the
//! # account of the same name; "*" for everyone not listed). uid 0 only with allow_root_jobs.
//! allow_root_jobs = false
//! [users]
//! alice = "alice"
//! "*" = "nobody"
//! [sandbox]                      # what jobs reach besides their working directory
//! read_only = ["/opt/software"]
//! read_write = ["/scratch"]
//! cgroup_parent = "koalesce"     # control-group directory of the components
//! [files]                        # see crate::file_import
//! max_upload_bytes = 1073741824  # one upload at most
//! import_dirs = { alice = ["/srv/data/alice"] }   # server-local paths users may register
//! scrub_interval_ms = 30000      # re-check unused replicas a round at a time (0: never)
//! scrub_bytes = 268435456        # at most this many bytes hashed per round
//! scrub_rehash_days = 7          # hash again after this long even when unchanged
//! [quotas]                       # per user (see crate::quotas); absent: unlimited
//! max_queued_jobs = 10000        # jobs not ended yet
//! max_stored_bytes = 107374182400   # bytes of the files the user registered (all replicas)
//! users = { alice = { max_queued_jobs = 100 } }
//! [federation]                   # peers and the grid scheduler: see crate::peer::config
//! name = "alpha"
//! [[federation.peers]]
//! name = "beta"
//! url = "http://10.0.0.2:7878"
//! secret_file = "/etc/koalesce/peer-beta.secret"
//! ```

use std::path::Path;

use anyhow::Context;
use koalesce_core::config::ScanInterval;
use koalesce_core::SchedulerConfig;
use serde::{Deserialize, Serialize};

/// Which local resource manager runs a site.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SiteKind {
    /// The embedded local executor (slot pool on this machine).
    #[default]
    Local,
    /// A partition of a Slurm cluster (`[sites.slurm]`, see [`crate::slurm`]).
    Slurm,
}

impl SiteKind {
    pub fn name(self) -> &'static str {
        match self {
            SiteKind::Local => "local",
            SiteKind::Slurm => "slurm",
        }
    }
}

/// One site.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteConfig {
    pub name: String,
    /// Processor slots; the site never runs more at once.
    pub processors: u32,
    #[serde(default = "one")]
    pub speed: f64,
    /// The site's LRM: `"local"` (default) or `"slurm"` (with a `[sites.slurm]` table).
    #[serde(default)]
    pub kind: SiteKind,
    /// Whether the site grants advance reservations (local sites: off by default). The
    /// scheduler then reserves processors for [JST, JST + runtime estimate) right after
    /// placement instead of claiming them.
    #[serde(default)]
    pub reservations: bool,
    /// `[sites.slurm]`: the site is a partition of a Slurm cluster (see
    /// [`crate::slurm::SlurmSiteConfig`]); absent for a site of the local executor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<crate::slurm::SlurmSiteConfig>,
    /// `[sites.attributes]`: the site's GridWay host variables for REQUIREMENTS and RANK
    /// (what it leaves empty is discovered, see [`crate::gridway::sites`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<koalesce_core::model::SiteAttributes>,
}

impl SiteConfig {
    /// A local site without reservations.
    pub fn local(name: &str, processors: u32) -> Self {
        SiteConfig {
            name: name.to_string(),
            processors,
            speed: 1.0,
            kind: SiteKind::Local,
            reservations: false,
            slurm: None,
            attributes: None,
        }
    }
}

fn one() -> f64 {
    1.0
}

/// Everything `--config` may set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub listen: String,
    pub body_limit: usize,
    pub poll_interval_ms: u64,
    /// Explicit sites; empty = the DAS-2 grid scaled by `site_scale`.
    pub sites: Vec<SiteConfig>,
    pub site_scale: f64,
    /// Forecast bandwidth between sites before any transfer was measured (bits/s).
    pub initial_bandwidth_bps: f64,
    pub scheduler: SchedulerConfig,
    /// Open HTTP connections at once.
    pub max_connections: usize,
    /// Time for a request's header (and for an idle keep-alive connection's next one).
    pub header_timeout_ms: u64,
    /// Time for a request's body.
    pub body_timeout_ms: u64,
    /// koalesce user → Unix account (root servers); `"*"`: everyone not listed.
    pub users: std::collections::BTreeMap<String, String>,
    /// Jobs may run as root (uid 0).
    pub allow_root_jobs: bool,
    pub sandbox: crate::sandbox::SandboxConfig,
    /// `[federation]`: peers and the grid scheduler (see [`crate::peer`]); absent: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub federation: Option<crate::peer::FederationConfig>,
    /// First probe of a blacklisted site, this long after the blacklisting; doubled after
    /// every probe it does not answer (see `daemon/blacklist.rs`). 0: no probes.
    pub site_probe_ms: u64,
    /// Longest wait between two probes of a blacklisted site.
    pub site_probe_max_ms: u64,
    /// A site whose LRM has not answered (`processors` a site error) for this long is
    /// blacklisted (and then probed). 0: only soft errors of jobs blacklist a site.
    pub site_down_ms: u64,
    /// Longest advance reservation a user may ask for through the API (ms): a longer one is
    /// refused (422), so nobody holds a site's processors indefinitely.
    pub max_reservation_ms: u64,
    /// `[files]`: uploads, and which server-local directories users may register from.
    pub files: crate::file_import::FilesConfig,
    /// `[quotas]`: per-user limits (queued jobs, stored bytes).
    pub quotas: crate::quotas::QuotaConfig,
    /// `[catalogue]`: the catalogue cache of the data functions (004 §3.3).
    pub catalogue: crate::gridway::CatalogueConfig,
    /// A job without `walltime` is killed after its runtime estimate (default 1 h) times this
    /// (TIMEOUT), as a site's default time limit; 0: no limit unless the job gives one.
    pub walltime_factor: f64,
}

/// Default [`ServerConfig::walltime_factor`].
pub const DEFAULT_WALLTIME_FACTOR: f64 = 2.0;

/// The five DAS-2 clusters (003 §5.1).
pub const DAS2: [(&str, u32); 5] = [("vu", 144), ("leiden", 56), ("uva", 56), ("delft", 64), ("utrecht", 64)];

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:7878".into(),
            body_limit: 1 << 20,
            poll_interval_ms: 100,
            sites: Vec::new(),
            site_scale: 1.0,
            initial_bandwidth_bps: 1e9,
            scheduler: daemon_scheduler_defaults(),
            max_connections: 4096,
            header_timeout_ms: 10_000,
            body_timeout_ms: 30_000,
            users: Default::default(),
            allow_root_jobs: false,
            sandbox: Default::default(),
            federation: None,
            site_probe_ms: 5_000,
            site_probe_max_ms: 300_000,
            site_down_ms: 10_000,
            max_reservation_ms: 7 * 24 * 3_600_000,
            files: Default::default(),
            quotas: Default::default(),
            catalogue: Default::default(),
            walltime_factor: DEFAULT_WALLTIME_FACTOR,
        }
    }
}

/// How long a site's first ban lasts (later ones double).
pub const DEFAULT_BLACKLIST_EXPIRY_MS: u64 = 60_000;

/// The core's defaults are the seeds' (1-minute scans, permanent blacklisting); a daemon wants
/// prompt placement and bans that expire.
pub fn daemon_scheduler_defaults() -> SchedulerConfig {
    SchedulerConfig {
        scan_interval: ScanInterval::Fixed { interval_ms: 500 },
        min_claim_retry_ms: 500,
        // A blacklisted site comes back after a minute, twice as long after each ban that
        // follows (up to 64 minutes); an admin re-admits it at once (`koalesce sites readmit`).
        blacklist_expiry_ms: Some(DEFAULT_BLACKLIST_EXPIRY_MS),
        ..SchedulerConfig::default()
    }
}

impl ServerConfig {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut cfg: ServerConfig = toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        // A [scheduler] table given in the file starts from the core's defaults field by field;
        // keep the daemon's scan interval unless the file set one.
        let raw: toml::Table = toml::from_str(&text)?;
        if let Some(s) = raw.get("scheduler").and_then(|v| v.as_table()) {
            let d = daemon_scheduler_defaults();
            if !s.contains_key("scan_interval") {
                cfg.scheduler.scan_interval = d.scan_interval;
            }
            if !s.contains_key("min_claim_retry_ms") {
                cfg.scheduler.min_claim_retry_ms = d.min_claim_retry_ms;
            }
            if !s.contains_key("blacklist_expiry_ms") {
                cfg.scheduler.blacklist_expiry_ms = d.blacklist_expiry_ms;
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        self.scheduler.validate()?;
        self.catalogue.validate()?;
        anyhow::ensure!(
            self.walltime_factor.is_finite() && self.walltime_factor >= 0.0,
            "config: 'walltime_factor' must be 0 (no default limit) or more, not {}",
            self.walltime_factor
        );
        let sites = self.effective_sites();
        anyhow::ensure!(!sites.is_empty(), "config: 'sites' is empty");
        let mut names = std::collections::BTreeSet::new();
        for s in &sites {
            anyhow::ensure!(s.processors > 0, "config: site '{}' has 0 processors", s.name);
            anyhow::ensure!(
                !s.name.is_empty() && s.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                "config: site name '{}' must be alphanumeric ('-' and '_' allowed)",
                s.name
            );
            anyhow::ensure!(names.insert(s.name.clone()), "config: site '{}' appears twice", s.name);
            match (s.kind, &s.slurm) {
                (SiteKind::Slurm, Some(slurm)) => slurm.validate(&s.name).map_err(|e| anyhow::anyhow!("config: {e}"))?,
                (SiteKind::Slurm, None) => anyhow::bail!("config: site '{}' has kind = \"slurm\" but no [sites.slurm] table", s.name),
                (SiteKind::Local, Some(_)) => {
                    anyhow::bail!(
                        "config: site '{}' has a [sites.slurm] table but kind = \"local\" (set kind = \"slurm\")",
                        s.name
                    )
                }
                (SiteKind::Local, None) => {}
            }
        }
        anyhow::ensure!(self.body_limit > 0, "config: 'body_limit' must be positive");
        anyhow::ensure!(self.max_connections > 0, "config: 'max_connections' must be positive");
        anyhow::ensure!(
            self.header_timeout_ms > 0 && self.body_timeout_ms > 0,
            "config: 'header_timeout_ms' and 'body_timeout_ms' must be positive"
        );
        self.files.validate()?;
        for p in self.sandbox.read_only.iter().chain(&self.sandbox.read_write) {
            anyhow::ensure!(p.is_absolute(), "config: sandbox path '{}' must be absolute", p.display());
        }
        anyhow::ensure!(
            !self.sandbox.cgroup_parent.is_empty()
                && self
                    .sandbox
                    .cgroup_parent
                    .split('/')
                    .all(|p| !p.is_empty() && p != ".." && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))),
            "config: sandbox.cgroup_parent '{}' must be a relative path of plain names",
            self.sandbox.cgroup_parent
        );
        if let Some(f) = &self.federation {
            f.validate()?;
        }
        Ok(())
    }

    /// The sites the server runs: the explicit list, or DAS-2 scaled.
    pub fn effective_sites(&self) -> Vec<SiteConfig> {
        if !self.sites.is_empty() {
            return self.sites.clone();
        }
        DAS2.iter()
            .map(|&(name, p)| SiteConfig::local(name, ((p as f64 * self.site_scale).round() as u32).max(1)))
            .collect()
    }
}
