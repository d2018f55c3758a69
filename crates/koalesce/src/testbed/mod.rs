//! `koalesce testbed`: several independent Slurm clusters on this machine, for trying and
//! testing koalesce against a real resource manager.
//!
//! `up` starts its own munged and N clusters (alpha, beta, gamma, ...), each with its own
//! slurmctld, slurmd's (one per node, fake CPUs), ports and state, all under one directory;
//! waits until every node is idle and every controller has scheduled a probe job; and writes
//! `DIR/server.toml` with one Slurm site per cluster. It is idempotent: run again, it starts
//! only what is not running. `down` stops everything it started (by pid file) and, with
//! `--purge`, deletes the directory. `stop-cluster` / `start-cluster` take one cluster away
//! and bring it back, for fault tests.
//!
//! ```text
//! DIR/
//!   testbed.json          what was set up (clusters, nodes, CPUs, ports)
//!   server.toml           koalesce server --config DIR/server.toml
//!   munge/                key, socket (run/munge.socket.2), pid, log
//!   client/               client copies of the slurm.conf files (short MessageTimeout)
//!   alpha/slurm.conf      SLURM_CONF=DIR/alpha/slurm.conf squeue ...
//!   alpha/{state,spool,run,log}/   controller state, slurmd spools, pid files, logs, jobcomp.txt
//!   net/                  with `up --network`: the shaped network, storage agents, control
//!                         links ([`network`], [`hostlink`]); each cluster's daemons then run
//!                         inside its namespace
//! ```
//!
//! Ports are picked free (or taken from `--port-base`), so beds in different directories do
//! not collide. Controllers start back to back so their scheduling ticks are in phase
//! (`--tick-offset-ms` starts them out of phase on purpose).

pub mod conf;
mod daemons;
pub mod hostlink;
pub mod network;
pub mod procs;
mod status;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use koalesce_server::slurm::{SlurmClient, SlurmSiteConfig, SlurmSiteSpec};
use serde::Serialize;

pub use conf::{BedSpec, ClusterSpec};
pub use daemons::StopHow;
pub use status::{BedStatus, ClusterStatus, CpuStatus, DaemonStatus};

/// What `koalesce testbed up` is asked for.
#[derive(Debug, Clone)]
pub struct UpOptions {
    pub dir: PathBuf,
    pub clusters: u32,
    pub nodes: u32,
    pub cpus: u32,
    pub partition: String,
    /// First of the consecutive ports to use; None: a free block picked at random.
    pub port_base: Option<u16>,
    /// Start controller i this many ms after controller i−1 (0: back to back).
    pub tick_offset_ms: u64,
    /// Longest wait for the bed to be ready.
    pub timeout: Duration,
    /// Give the clusters' storage a shaped network ([`network`]): agents in namespaces.
    pub network: bool,
    /// Its rates (default: [`network::default_config`]).
    pub network_config: Option<crate::netbed::NetbedConfig>,
    /// Fail instead of falling back to loopback when namespaces are not allowed.
    pub require_namespaces: bool,
}

impl UpOptions {
    /// 3 clusters × 2 nodes × 32 CPUs, partition `debug`, in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        UpOptions {
            dir: dir.into(),
            clusters: 3,
            nodes: 2,
            cpus: 32,
            partition: "debug".into(),
            port_base: None,
            tick_offset_ms: 0,
            network: false,
            network_config: None,
            require_namespaces: false,
            timeout: Duration::from_secs(90),
        }
    }
}

/// What `up` did.
#[derive(Debug, Clone, Serialize)]
pub struct UpReport {
    /// Daemons started now (empty when everything was running already).
    pub started: Vec<String>,
    /// From the call to every node idle and every controller scheduling.
    pub elapsed_ms: u64,
}

/// A test bed in a directory (see the module docs).
#[derive(Debug, Clone)]
pub struct TestBed {
    spec: BedSpec,
    programs: Vec<PathBuf>,
}

/// The default directory: `$KOALESCE_TESTBED_DIR`, else `/tmp/koalesce-testbed-UID`.
pub fn default_dir() -> PathBuf {
    std::env::var_os("KOALESCE_TESTBED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!("/tmp/koalesce-testbed-{}", unsafe { libc::geteuid() })))
}

/// An exclusive lock on the bed's directory while a command changes it.
struct DirLock {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

fn lock_dir(dir: &Path) -> anyhow::Result<DirLock> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(dir.join("testbed.lock"))
        .with_context(|| format!("locking {}", dir.display()))?;
    let lock = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow::anyhow!("cannot lock {}: {e}", dir.display()))?;
    Ok(DirLock { _lock: lock })
}

impl TestBed {
    /// The bed set up in `dir` earlier.
    pub fn open(dir: &Path) -> anyhow::Result<TestBed> {
        let path = dir.join(conf::STATE_FILE);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "no test bed in {} (start one with: koalesce testbed up --dir {})",
                dir.display(),
                dir.display()
            )
        })?;
        let spec: BedSpec = serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
        let programs = procs::find_programs(&procs::search_path())?;
        Ok(TestBed { spec, programs })
    }

    /// Starts (or completes) a bed and waits until it is ready.
    pub fn up(opts: &UpOptions) -> anyhow::Result<(TestBed, UpReport)> {
        let t0 = Instant::now();
        let programs = procs::find_programs(&procs::search_path())?;
        std::fs::create_dir_all(&opts.dir).with_context(|| format!("creating {}", opts.dir.display()))?;
        let dir = std::fs::canonicalize(&opts.dir)?;
        anyhow::ensure!(
            dir.as_os_str().len() <= conf::MAX_DIR_LEN,
            "the test bed's directory {} is longer than {} characters (Unix socket paths under it would be too long); choose a shorter --dir",
            dir.display(),
            conf::MAX_DIR_LEN
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        let _lock = lock_dir(&dir)?;
        let spec = match std::fs::read_to_string(dir.join(conf::STATE_FILE)) {
            Ok(text) => {
                let spec: BedSpec = serde_json::from_str(&text).context("reading testbed.json")?;
                anyhow::ensure!(
                    spec.clusters.len() as u32 == opts.clusters && spec.nodes == opts.nodes && spec.cpus == opts.cpus && spec.partition == opts.partition,
                    "{} holds a bed of {} clusters x {} nodes x {} CPUs (partition {}); stop it with `koalesce testbed down --purge --dir {}` first",
                    dir.display(),
                    spec.clusters.len(),
                    spec.nodes,
                    spec.cpus,
                    spec.partition,
                    dir.display()
                );
                spec
            }
            Err(_) => {
                let ports = procs::pick_ports(conf::ports_needed(opts.clusters, opts.nodes), opts.port_base)?;
                let spec = BedSpec::new(
                    &dir,
                    &procs::short_hostname(),
                    opts.clusters,
                    opts.nodes,
                    opts.cpus,
                    &opts.partition,
                    &ports,
                )?;
                koalesce_server::supervise::write_atomic(&dir.join(conf::STATE_FILE), &serde_json::to_vec_pretty(&spec)?)?;
                spec
            }
        };
        let bed = TestBed { spec, programs };
        let names: Vec<String> = bed.spec.clusters.iter().map(|c| c.name.clone()).collect();
        let network = opts.network || network::present(&bed.spec.dir);
        if network && !network::present(&bed.spec.dir) {
            // The daemons move into the namespaces: a bed already running without them would
            // keep daemons listening on loopback under a slurm.conf that says otherwise.
            let running: Vec<&String> = names.iter().filter(|n| bed.controller_pid(n).is_some()).collect();
            anyhow::ensure!(
                running.is_empty(),
                "the bed in {} runs without a network (controllers of {running:?} are up); stop it with `koalesce testbed down --dir {}` first",
                dir.display(),
                dir.display()
            );
        }
        if network {
            network::up_network(&bed.spec.dir, &names, opts.network_config.as_ref(), opts.require_namespaces, true)?;
        }
        bed.write_files()?;
        let mut started = Vec::new();
        bed.ensure_munge(&mut started)?;
        let fresh = bed.start_daemons(&names, opts.tick_offset_ms, &mut started)?;
        bed.wait_ready(&names, &fresh, opts.timeout)?;
        if network {
            let agents = network::start_agents(&bed.spec.dir, &names)?;
            koalesce_server::supervise::write_atomic(&bed.server_toml(), conf::server_toml(&bed.spec, &agents).as_bytes())?;
            started.extend(names.iter().map(|n| format!("storage agent {n}")));
        }
        Ok((
            bed,
            UpReport {
                started,
                elapsed_ms: t0.elapsed().as_millis() as u64,
            },
        ))
    }

    pub fn spec(&self) -> &BedSpec {
        &self.spec
    }

    pub fn dir(&self) -> &Path {
        &self.spec.dir
    }

    pub fn clusters(&self) -> Vec<String> {
        self.spec.clusters.iter().map(|c| c.name.clone()).collect()
    }

    pub fn conf(&self, cluster: &str) -> PathBuf {
        self.spec.conf(cluster)
    }

    pub fn server_toml(&self) -> PathBuf {
        self.spec.dir.join(conf::SERVER_TOML)
    }

    fn cluster(&self, name: &str) -> anyhow::Result<&ClusterSpec> {
        self.spec
            .cluster(name)
            .ok_or_else(|| anyhow::anyhow!("the bed has no cluster '{name}' (it has {})", self.clusters().join(", ")))
    }

    /// A Slurm client of one cluster (5 s command timeout).
    pub fn client(&self, cluster: &str) -> anyhow::Result<SlurmClient> {
        self.cluster(cluster)?;
        Ok(SlurmClient::new(
            &self.conf(cluster),
            &self.spec.dir.join("client"),
            Duration::from_secs(5),
        )?)
    }

    /// One Slurm site per cluster, as in server.toml.
    pub fn site_specs(&self) -> Vec<SlurmSiteSpec> {
        self.spec
            .clusters
            .iter()
            .map(|c| SlurmSiteSpec {
                name: c.name.clone(),
                processors: self.spec.processors(),
                slurm: SlurmSiteConfig::new(self.conf(&c.name), self.spec.partition.clone()),
            })
            .collect()
    }

    /// Where the cluster's daemons run (`None`: the host namespace, on loopback).
    pub fn placement(&self, cluster: &str) -> Option<network::Placement> {
        network::placement(self.dir(), cluster)
    }

    fn program(&self, name: &str) -> &Path {
        let i = procs::PROGRAMS.iter().position(|p| *p == name).expect("known program");
        &self.programs[i]
    }

    fn write_files(&self) -> anyhow::Result<()> {
        let s = &self.spec;
        for sub in ["munge/etc", "munge/run", "munge/log", "munge/lib", "client"] {
            std::fs::create_dir_all(s.dir.join(sub))?;
        }
        std::fs::set_permissions(s.dir.join("munge"), std::fs::Permissions::from_mode(0o755))?;
        std::fs::set_permissions(s.dir.join("munge/run"), std::fs::Permissions::from_mode(0o755))?;
        std::fs::set_permissions(s.dir.join("munge/etc"), std::fs::Permissions::from_mode(0o700))?;
        let key = s.dir.join("munge/etc/munge.key");
        if !key.exists() {
            let mut bytes = vec![0u8; 1024];
            std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
            std::fs::write(&key, &bytes)?;
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400))?;
        }
        for c in &s.clusters {
            let d = s.cluster_dir(&c.name);
            for sub in ["state", "spool", "run", "log"] {
                std::fs::create_dir_all(d.join(sub))?;
            }
            if !d.join("plugstack.conf").exists() {
                std::fs::write(d.join("plugstack.conf"), "")?;
            }
            let text = conf::slurm_conf(s, c, network::placement(&s.dir, &c.name).as_ref());
            if std::fs::read_to_string(s.conf(&c.name)).ok().as_deref() != Some(text.as_str()) {
                koalesce_server::supervise::write_atomic(&s.conf(&c.name), text.as_bytes())?;
            }
        }
        if !network::present(&s.dir) {
            koalesce_server::supervise::write_atomic(&self.server_toml(), conf::server_toml(s, &[]).as_bytes())?;
        }
        Ok(())
    }
}

/// A bed that is torn down (and its directory deleted) when dropped, also when a test panics.
pub struct BedGuard(pub TestBed);

impl std::ops::Deref for BedGuard {
    type Target = TestBed;
    fn deref(&self) -> &TestBed {
        &self.0
    }
}

impl Drop for BedGuard {
    fn drop(&mut self) {
        if let Err(e) = self.0.down(true) {
            eprintln!("testbed down failed: {e:#}");
        }
    }
}
