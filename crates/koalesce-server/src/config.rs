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
//! # [sites.agent]                # the site's storage is reached only through its agent
//! # url = "http://127.0.0.1:7100"        # how the server reaches it
//! # data_url = "http://10.250.0.1:7000"  # how other agents reach it (default: url)
//! # token_file = "/etc/koalesce/agent-vu.token"
//! # root = "/srv/vu/storage"             # where the site's nodes see its files (default: site storage dir)
//! # [sites.attributes]           # GridWay host variables (ARCH, CPU_MHZ, software tags, ...)
//! # cpu_mhz = 2800               # unset ones are discovered (see crate::gridway::sites)
//! [scheduler]                    # koalesce_core::SchedulerConfig; daemon defaults below
//! scan_interval = { kind = "fixed", interval_ms = 500 }
//! queueing = "koala"             # or "gridway": GridWay's job priority (fixed, share, deadline, waiting)
//! # [scheduler.gridway.banning]  # max_ms = 3600000, constant_ms = 650000 (GridWay's defaults)
//! [network]                      # links between agent sites (see docs/data-plane.md)
//! probe_stale_ms = 300000        # a pair unmeasured this long is probed
//! probe_min_interval_ms = 60000  # at most one probe per pair per this
//! probe_max_concurrent = 1       # probes at once
//! probe_bytes = 1048576          # bytes per probe
//! transfer_tries = 4             # tries of an interrupted transfer (each resumes) before another replica
//! forecasts = true               # false: the core keeps initial_bandwidth_bps (a baseline)
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
//! barrier_timeout_ms = 120000    # a supervisor held at the start barrier gives up after this
//!                                # without `go` (the daemon is gone); > every claim timeout
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
    /// `[sites.agent]`: the site's storage is reached only through its storage agent
    /// (`koalesce storage-agent`); absent: a directory under the data dir, copied locally.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentSiteConfig>,
}

/// `[sites.agent]`: how the server and the other sites' agents reach a site's storage agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSiteConfig {
    /// How the server reaches the agent: `http://host:port`.
    pub url: String,
    /// How the other sites' agents reach it (third-party pushes and probes); default `url`.
    /// On a shaped bed: its address inside the bed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_url: Option<String>,
    /// File holding the agent's bearer secret (its `--token-file`).
    pub token_file: std::path::PathBuf,
    /// Where the site's compute nodes see the agent's root: jobs get their inputs there
    /// (`KOALESCE_INPUT_*`). Default: the site's storage directory under the data dir.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<std::path::PathBuf>,
}

impl AgentSiteConfig {
    /// The agent as the data plane knows it (reads the secret).
    pub fn resolve(&self, site: &str) -> anyhow::Result<crate::dataplane::SiteAgent> {
        let token = std::fs::read_to_string(&self.token_file)
            .with_context(|| format!("site '{site}': reading the agent's token_file {}", self.token_file.display()))?;
        let token = token.trim();
        anyhow::ensure!(
            !token.is_empty(),
            "site '{site}': the agent's token_file {} is empty",
            self.token_file.display()
        );
        let control = crate::dataplane::Endpoint::new(self.url.clone(), token);
        let data_url = self.data_url.clone().unwrap_or_else(|| control.url.clone());
        Ok(crate::dataplane::SiteAgent {
            site: site.to_string(),
            data_url: data_url.trim_end_matches('/').to_string(),
            control,
        })
    }

    fn validate(&self, site: &str) -> anyhow::Result<()> {
        for (key, url) in [("url", Some(&self.url)), ("data_url", self.data_url.as_ref())] {
            let Some(url) = url else { continue };
            let rest = url.strip_prefix("http://");
            anyhow::ensure!(
                rest.is_some_and(|r| !r.is_empty() && !r.trim_end_matches('/').contains('/')),
                "config: site '{site}': agent.{key} '{url}' must be http://host:port (no path)"
            );
        }
        if let Some(root) = &self.root {
            anyhow::ensure!(
                root.is_absolute(),
                "config: site '{site}': agent.root '{}' must be absolute",
                root.display()
            );
        }
        Ok(())
    }
}

/// `[network]`: probes of the links between sites with agents, and transfer retries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkConfig {
    /// A pair of agent sites without a measurement younger than this is probed.
    pub probe_stale_ms: u64,
    /// One pair is probed at most once per this interval.
    pub probe_min_interval_ms: u64,
    /// Probes running at once (each moves `probe_bytes`): the bound on probing traffic.
    pub probe_max_concurrent: usize,
    /// Bytes one probe moves (at least 64 KiB, or it measures latency, not bandwidth).
    pub probe_bytes: u64,
    /// Tries of a transfer that fails on the way (each resumes) before another replica.
    pub transfer_tries: u32,
    /// Give the core the NWS forecasts (default). `false`: the core keeps
    /// `initial_bandwidth_bps` for every pair and nothing is probed (measurements are still
    /// shown): the "no forecasts" baseline of `koalesce experiment live-cf`.
    pub forecasts: bool,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        let p = koalesce_core::nws::ProbePolicy::default();
        NetworkConfig {
            probe_stale_ms: p.stale_after_ms,
            probe_min_interval_ms: p.min_interval_ms,
            probe_max_concurrent: p.max_concurrent,
            probe_bytes: p.probe_bytes,
            transfer_tries: 4,
            forecasts: true,
        }
    }
}

impl NetworkConfig {
    pub fn probe_policy(&self) -> koalesce_core::nws::ProbePolicy {
        koalesce_core::nws::ProbePolicy {
            stale_after_ms: self.probe_stale_ms,
            min_interval_ms: self.probe_min_interval_ms,
            max_concurrent: self.probe_max_concurrent,
            probe_bytes: self.probe_bytes,
        }
    }

    fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.probe_bytes >= crate::dataplane::MIN_MEASURED_BYTES,
            "config: network.probe_bytes must be at least {} (smaller probes measure latency, not bandwidth)",
            crate::dataplane::MIN_MEASURED_BYTES
        );
        anyhow::ensure!(self.transfer_tries >= 1, "config: network.transfer_tries must be at least 1");
        Ok(())
    }
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
            agent: None,
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
    /// Forecast bandwidth between sites before any transfer or probe was measured (bits/s);
    /// afterwards the core is given the NWS forecasts (see [`crate::daemon::network`]).
    pub initial_bandwidth_bps: f64,
    /// `[network]`: probes between agent sites, transfer retries.
    pub network: NetworkConfig,
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
    /// The LRM worker hands the reservations the scheduler asks for that are waiting in its
    /// queue (those of one job, and of jobs placed together) to each site in one call
    /// ([`crate::backend::Reservations::reserve_many`]) and answers them under one lock;
    /// `false`: one call and one lock each (kept to measure the difference, `koalesce bench
    /// submit --policy ttd` compares both).
    pub batch_reservations: bool,
    /// `[files]`: uploads, and which server-local directories users may register from.
    pub files: crate::file_import::FilesConfig,
    /// `[quotas]`: per-user limits (queued jobs, stored bytes).
    pub quotas: crate::quotas::QuotaConfig,
    /// `[catalogue]`: the catalogue cache of the data functions (004 §3.3).
    pub catalogue: crate::gridway::CatalogueConfig,
    /// A job without `walltime` is killed after its runtime estimate (default 1 h) times this
    /// (TIMEOUT), as a site's default time limit; 0: no limit unless the job gives one.
    pub walltime_factor: f64,
    /// How long a component's supervisor waits at the start barrier for the daemon's `go`
    /// before it gives up on its own (records that the program never started, so the job is
    /// placed again): a supervisor never outlives a daemon that does not come back by more.
    /// Must exceed every site's claim timeout (the daemon's own wait at the barrier).
    pub barrier_timeout_ms: u64,
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
            network: Default::default(),
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
            batch_reservations: true,
            files: Default::default(),
            quotas: Default::default(),
            catalogue: Default::default(),
            walltime_factor: DEFAULT_WALLTIME_FACTOR,
            barrier_timeout_ms: crate::supervise::DEFAULT_BARRIER_TIMEOUT_MS,
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
            if let Some(a) = &s.agent {
                a.validate(&s.name)?;
            }
        }
        anyhow::ensure!(self.body_limit > 0, "config: 'body_limit' must be positive");
        anyhow::ensure!(self.max_connections > 0, "config: 'max_connections' must be positive");
        anyhow::ensure!(
            self.header_timeout_ms > 0 && self.body_timeout_ms > 0,
            "config: 'header_timeout_ms' and 'body_timeout_ms' must be positive"
        );
        self.files.validate()?;
        // A component of a Slurm site may wait in Slurm's queue up to its claim timeout while
        // the others of its launch hold at the barrier (local supervisors check in at once).
        let longest_claim = sites
            .iter()
            .filter_map(|s| s.slurm.as_ref().map(|c| c.claim_timeout_ms))
            .max()
            .unwrap_or(0);
        anyhow::ensure!(
            self.barrier_timeout_ms > longest_claim && self.barrier_timeout_ms >= 1000,
            "config: 'barrier_timeout_ms' ({}) must be at least 1000 and exceed the longest claim_timeout_ms of the Slurm sites ({longest_claim}): the daemon waits that long at the start barrier",
            self.barrier_timeout_ms
        );
        self.network.validate()?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A supervisor must not give up at the barrier before the daemon does: the barrier
    /// timeout has to exceed every Slurm site's claim timeout (and be at least a second).
    #[test]
    fn the_barrier_timeout_must_exceed_the_claim_timeouts() {
        let mut slurm = SiteConfig::local("s", 8);
        slurm.kind = SiteKind::Slurm;
        slurm.slurm = Some(crate::slurm::SlurmSiteConfig::new("/etc/slurm/slurm.conf", "debug"));
        let claim = slurm.slurm.as_ref().unwrap().claim_timeout_ms;
        let mut c = ServerConfig {
            sites: vec![SiteConfig::local("a", 4), slurm],
            ..ServerConfig::default()
        };
        c.validate().unwrap();
        c.barrier_timeout_ms = claim;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("barrier_timeout_ms") && e.contains("claim_timeout_ms"), "{e}");
        c.sites.truncate(1);
        c.validate().unwrap();
        c.barrier_timeout_ms = 999;
        assert!(c.validate().is_err(), "at least a second");
    }
}
