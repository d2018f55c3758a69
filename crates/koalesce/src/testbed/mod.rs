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
pub mod hostlink;
pub mod network;
pub mod procs;

use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use koalesce_server::slurm::parse::{self, PartitionInfo};
use koalesce_server::slurm::{SlurmClient, SlurmSiteConfig, SlurmSiteSpec};
use serde::Serialize;

pub use conf::{BedSpec, ClusterSpec};

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
    _file: std::fs::File,
}

fn lock_dir(dir: &Path) -> anyhow::Result<DirLock> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(dir.join("testbed.lock"))
        .with_context(|| format!("locking {}", dir.display()))?;
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    anyhow::ensure!(r == 0, "cannot lock {}", dir.display());
    Ok(DirLock { _file: f })
}

/// Status of one daemon.
#[derive(Debug, Clone, Serialize)]
pub struct DaemonStatus {
    pub name: String,
    pub pid: Option<u32>,
    pub port: Option<u16>,
}

impl DaemonStatus {
    pub fn up(&self) -> bool {
        self.pid.is_some()
    }
}

/// CPUs of a cluster's partition as sinfo reports them.
#[derive(Debug, Clone, Serialize)]
pub struct CpuStatus {
    pub allocated: u32,
    pub idle: u32,
    pub other: u32,
    pub total: u32,
    pub nodes_responding: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClusterStatus {
    pub name: String,
    pub conf: PathBuf,
    pub controller: DaemonStatus,
    pub nodes: Vec<DaemonStatus>,
    pub cpus: Option<CpuStatus>,
    /// Jobs finished so far (lines of the jobcomp log).
    pub jobs_finished: usize,
    pub error: Option<String>,
    /// On a network bed: the namespace the daemons run in and their addresses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<network::Placement>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BedStatus {
    pub dir: PathBuf,
    pub server_toml: PathBuf,
    pub munge: DaemonStatus,
    pub clusters: Vec<ClusterStatus>,
    /// The clusters' storage agents and shaped links (`up --network`); absent without.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<Vec<network::AgentStatus>>,
}

impl BedStatus {
    /// munged, every controller and every slurmd run, and every node responds.
    pub fn all_up(&self) -> bool {
        self.munge.up()
            && self.clusters.iter().all(|c| {
                c.controller.up()
                    && c.nodes.iter().all(DaemonStatus::up)
                    && c.cpus.as_ref().is_some_and(|x| x.nodes_responding as usize == c.nodes.len())
            })
            && self.network.as_ref().is_none_or(|n| n.iter().all(|a| a.pid.is_some()))
    }
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

    fn munge_pid(&self) -> Option<u32> {
        procs::daemon_pid(
            &self.spec.munge_dir().join("run/munged.pid"),
            &self.spec.munge_socket().display().to_string(),
        )
    }

    fn ensure_munge(&self, started: &mut Vec<String>) -> anyhow::Result<()> {
        if self.munge_pid().is_some() {
            return Ok(());
        }
        let m = self.spec.munge_dir();
        let log = m.join("log/munged.log");
        let mut cmd = Command::new(self.program("munged"));
        cmd.arg(format!("--socket={}", self.spec.munge_socket().display()))
            .arg(format!("--key-file={}", m.join("etc/munge.key").display()))
            .arg(format!("--pid-file={}", m.join("run/munged.pid").display()))
            .arg(format!("--log-file={}", log.display()))
            .arg(format!("--seed-file={}", m.join("lib/munge.seed").display()))
            // A socket left by a munged that was killed would stop a plain start.
            .arg("--force");
        let child = procs::spawn_daemon(cmd, &log)?;
        procs::finish_spawn(child, "munged", &log)?;
        procs::wait_pid(
            &m.join("run/munged.pid"),
            &self.spec.munge_socket().display().to_string(),
            Duration::from_secs(10),
            &log,
        )?;
        started.push("munged".into());
        Ok(())
    }

    fn daemon_env(&self, cmd: &mut Command, cluster: &str) {
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("SLURM_") {
                cmd.env_remove(k);
            }
        }
        // slurmstepd inherits it: `down` finds the jobs a stopped bed left behind by it.
        cmd.env("SLURM_CONF", self.conf(cluster));
    }

    fn controller_pid(&self, cluster: &str) -> Option<u32> {
        procs::daemon_pid(&self.spec.controller_pid_file(cluster), &self.conf(cluster).display().to_string())
    }

    /// On a network bed, makes `cmd` enter the cluster's namespace before exec (as `ip netns
    /// exec` does, without its mount namespace); the returned file must live until spawned.
    fn enter_netns(&self, cmd: &mut Command, cluster: &str) -> anyhow::Result<Option<std::fs::File>> {
        let Some(place) = network::placement(self.dir(), cluster) else {
            return Ok(None);
        };
        let path = Path::new("/run/netns").join(&place.netns);
        let f = std::fs::File::open(&path).with_context(|| {
            format!(
                "opening the namespace of cluster {cluster} ({}); is the network bed up?",
                path.display()
            )
        })?;
        let fd = f.as_raw_fd();
        // SAFETY: setns is async-signal-safe; the fd stays open in the parent until spawn
        // returns (it is close-on-exec, so the daemon does not keep it).
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(Some(f))
    }

    /// Where the cluster's daemons run (`None`: the host namespace, on loopback).
    pub fn placement(&self, cluster: &str) -> Option<network::Placement> {
        network::placement(self.dir(), cluster)
    }

    fn node_pid(&self, cluster: &str, node: &str) -> Option<u32> {
        procs::daemon_pid(&self.spec.node_pid_file(cluster, node), &format!("-N {node}"))
    }

    /// Starts the controllers (back to back, or `offset_ms` apart) and slurmd's of `names`
    /// that are not running; returns the clusters whose controller was started.
    fn start_daemons(&self, names: &[String], offset_ms: u64, started: &mut Vec<String>) -> anyhow::Result<Vec<String>> {
        let t0 = Instant::now();
        let mut fresh = Vec::new();
        let mut children = Vec::new();
        for (i, name) in names.iter().enumerate() {
            if self.controller_pid(name).is_some() {
                continue;
            }
            let due = Duration::from_millis(offset_ms * i as u64);
            if let Some(wait) = due.checked_sub(t0.elapsed()) {
                std::thread::sleep(wait);
            }
            let log = self.spec.cluster_dir(name).join("log/slurmctld.log");
            let mut cmd = Command::new(self.program("slurmctld"));
            cmd.arg("-f").arg(self.conf(name));
            self.daemon_env(&mut cmd, name);
            let _ns = self.enter_netns(&mut cmd, name)?;
            children.push((procs::spawn_daemon(cmd, &log)?, format!("slurmctld {name}"), log));
            fresh.push(name.clone());
        }
        for (child, what, log) in children.drain(..) {
            procs::finish_spawn(child, &what, &log)?;
            started.push(what);
        }
        for name in &fresh {
            let log = self.spec.cluster_dir(name).join("log/slurmctld.log");
            procs::wait_pid(
                &self.spec.controller_pid_file(name),
                &self.conf(name).display().to_string(),
                Duration::from_secs(20),
                &log,
            )?;
        }
        for name in names {
            let c = self.cluster(name)?;
            for n in &c.nodes {
                if self.node_pid(name, &n.name).is_some() {
                    continue;
                }
                let log = self.spec.cluster_dir(name).join(format!("log/slurmd-{}.log", n.name));
                let mut cmd = Command::new(self.program("slurmd"));
                cmd.arg("-f").arg(self.conf(name)).arg("-N").arg(&n.name);
                self.daemon_env(&mut cmd, name);
                let _ns = self.enter_netns(&mut cmd, name)?;
                children.push((procs::spawn_daemon(cmd, &log)?, format!("slurmd {}", n.name), log));
            }
        }
        for (child, what, log) in children {
            procs::finish_spawn(child, &what, &log)?;
            started.push(what);
        }
        for name in names {
            for n in &self.cluster(name)?.nodes {
                let log = self.spec.cluster_dir(name).join(format!("log/slurmd-{}.log", n.name));
                procs::wait_pid(
                    &self.spec.node_pid_file(name, &n.name),
                    &format!("-N {}", n.name),
                    Duration::from_secs(20),
                    &log,
                )?;
            }
        }
        Ok(fresh)
    }

    /// Waits until every node of `names` responds and, for the clusters in `probe`, the
    /// controller has scheduled and finished a probe job (a fresh controller takes a few
    /// seconds before its first scheduling pass), so every CPU is idle again.
    fn wait_ready(&self, names: &[String], probe: &[String], timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        std::thread::scope(|s| {
            let handles: Vec<_> = names
                .iter()
                .map(|n| {
                    let p = probe.contains(n);
                    s.spawn(move || self.wait_cluster(n, p, deadline))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("readiness check panicked"))))
                .collect::<anyhow::Result<Vec<()>>>()
        })?;
        Ok(())
    }

    fn wait_cluster(&self, name: &str, probe: bool, deadline: Instant) -> anyhow::Result<()> {
        let client = self.client(name)?;
        let log = self.spec.cluster_dir(name).join("log/slurmctld.log");
        let fail = |what: String| anyhow::anyhow!("cluster {name}: {what}\n{}", procs::log_tail(&log, 8));
        let mut last;
        loop {
            match client.run_args("sinfo", &["-h", "-o", parse::SINFO_FORMAT]) {
                Ok(out) => match parse::parse_sinfo(&out.stdout) {
                    Ok(parts) => match parts.get(&self.spec.partition) {
                        Some(p) if p.nodes_responding() == self.spec.nodes => break,
                        Some(p) => last = format!("nodes: {:?}", p.node_states),
                        None => last = format!("no partition {}", self.spec.partition),
                    },
                    Err(e) => last = e.to_string(),
                },
                Err(e) => last = e.to_string(),
            }
            if Instant::now() > deadline {
                return Err(fail(format!("nodes not ready in time ({last})")));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if !probe {
            return Ok(());
        }
        let job = loop {
            let r = client
                .run_args(
                    "sbatch",
                    &[
                        "--parsable",
                        "--job-name=testbed-probe",
                        "--ntasks=1",
                        "--output=/dev/null",
                        "--wrap=true",
                    ],
                )
                .map_err(|e| e.to_string())
                .and_then(|o| parse::parse_sbatch_parsable(&o.stdout).map_err(|e| e.to_string()));
            match r {
                Ok((j, _)) => break j,
                Err(e) if Instant::now() > deadline => return Err(fail(format!("probe job not accepted: {e}"))),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        loop {
            let out = client.run_args("squeue", &["-h", "-t", "all", "-j", &job.to_string(), "-o", parse::SQUEUE_FORMAT]);
            if let Ok(rows) = out.map(|o| parse::parse_squeue(&o.stdout).unwrap_or_default()) {
                if rows.iter().any(|r| r.job == job && r.state.is_terminal()) {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(fail("the controller did not schedule the probe job in time".into()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What runs, and the CPUs of every cluster whose controller runs.
    pub fn status(&self) -> BedStatus {
        let munge = DaemonStatus {
            name: "munged".into(),
            pid: self.munge_pid(),
            port: None,
        };
        let clusters = std::thread::scope(|s| {
            let hs: Vec<_> = self.spec.clusters.iter().map(|c| s.spawn(move || self.cluster_status(c))).collect();
            hs.into_iter().map(|h| h.join().expect("status thread")).collect()
        });
        BedStatus {
            dir: self.spec.dir.clone(),
            server_toml: self.server_toml(),
            munge,
            clusters,
            network: network::status(&self.spec.dir, &self.clusters()),
        }
    }

    fn cluster_status(&self, c: &ClusterSpec) -> ClusterStatus {
        let controller = DaemonStatus {
            name: "slurmctld".into(),
            pid: self.controller_pid(&c.name),
            port: Some(c.controller_port),
        };
        let nodes = c
            .nodes
            .iter()
            .map(|n| DaemonStatus {
                name: n.name.clone(),
                pid: self.node_pid(&c.name, &n.name),
                port: Some(n.port),
            })
            .collect();
        let jobcomp = std::fs::read_to_string(self.spec.cluster_dir(&c.name).join("log/jobcomp.txt")).unwrap_or_default();
        let (mut cpus, mut error) = (None, None);
        if controller.up() {
            let r = self
                .client(&c.name)
                .map_err(|e| e.to_string())
                .and_then(|cl| cl.run_args("sinfo", &["-h", "-o", parse::SINFO_FORMAT]).map_err(|e| e.to_string()))
                .and_then(|o| parse::parse_sinfo(&o.stdout).map_err(|e| e.to_string()));
            match r.map(|p| p.get(&self.spec.partition).cloned()) {
                Ok(Some(p)) => cpus = Some(cpu_status(&p)),
                Ok(None) => error = Some(format!("no partition {}", self.spec.partition)),
                Err(e) => error = Some(e),
            }
        } else {
            error = Some("controller down".into());
        }
        ClusterStatus {
            name: c.name.clone(),
            conf: self.conf(&c.name),
            controller,
            nodes,
            cpus,
            jobs_finished: parse::parse_jobcomp(&jobcomp).len(),
            error,
            placement: self.placement(&c.name),
        }
    }

    /// Stops one cluster: its controller and (unless `controller_only`) its slurmd's (see
    /// [`StopHow`]).
    pub fn stop_cluster(&self, name: &str, how: StopHow, controller_only: bool) -> anyhow::Result<()> {
        let c = self.cluster(name)?.clone();
        let _lock = lock_dir(self.dir())?;
        let pids = self.cluster_pids(&c, controller_only);
        match how {
            StopHow::Term => {
                procs::stop_pids(&pids, libc::SIGTERM, Duration::from_secs(10));
            }
            StopHow::Kill => {
                procs::stop_pids(&pids, libc::SIGKILL, Duration::from_secs(10));
            }
            StopHow::Freeze => {
                for (p, _) in &pids {
                    unsafe {
                        libc::kill(*p as i32, libc::SIGSTOP);
                    }
                }
            }
        }
        Ok(())
    }

    /// The live daemons of a cluster: (pid, what its command line contains).
    fn cluster_pids(&self, c: &ClusterSpec, controller_only: bool) -> Vec<(u32, String)> {
        let conf = self.conf(&c.name).display().to_string();
        let mut pids: Vec<(u32, String)> = self.controller_pid(&c.name).map(|p| (p, conf)).into_iter().collect();
        if !controller_only {
            pids.extend(
                c.nodes
                    .iter()
                    .filter_map(|n| self.node_pid(&c.name, &n.name).map(|p| (p, format!("-N {}", n.name)))),
            );
        }
        pids
    }

    /// Starts what is not running of one cluster (and resumes what is frozen) and waits until
    /// it schedules again.
    pub fn start_cluster(&self, name: &str) -> anyhow::Result<Duration> {
        let c = self.cluster(name)?.clone();
        let t0 = Instant::now();
        let _lock = lock_dir(self.dir())?;
        for (p, _) in self.cluster_pids(&c, false) {
            unsafe {
                libc::kill(p as i32, libc::SIGCONT);
            }
        }
        let mut started = Vec::new();
        self.ensure_munge(&mut started)?;
        let names = [name.to_string()];
        let fresh = self.start_daemons(&names, 0, &mut started)?;
        self.wait_ready(&names, &fresh, Duration::from_secs(90))?;
        Ok(t0.elapsed())
    }

    /// Stops everything the bed started: cancels the clusters' jobs, stops slurmd's,
    /// controllers and munged (by their pid files), kills job processes left behind, and with
    /// `purge` deletes the directory. Returns how many leftover processes were killed.
    pub fn down(&self, purge: bool) -> anyhow::Result<usize> {
        if !self.dir().exists() {
            return Ok(0); // purged before
        }
        let lock = lock_dir(self.dir())?;
        std::thread::scope(|s| {
            for c in &self.spec.clusters {
                if self.controller_pid(&c.name).is_some() {
                    s.spawn(move || self.cancel_all(&c.name));
                }
            }
        });
        let mut pids = Vec::new();
        for c in &self.spec.clusters {
            pids.extend(self.cluster_pids(c, false));
        }
        for (p, _) in &pids {
            // A frozen daemon would not see SIGTERM.
            unsafe {
                libc::kill(*p as i32, libc::SIGCONT);
            }
        }
        procs::stop_pids(&pids, libc::SIGTERM, Duration::from_secs(5));
        if let Some(p) = self.munge_pid() {
            procs::stop_pids(
                &[(p, self.spec.munge_socket().display().to_string())],
                libc::SIGTERM,
                Duration::from_secs(5),
            );
        }
        network::down(self.dir(), &self.clusters())?;
        let killed = procs::kill_leftovers(self.dir());
        drop(lock);
        if purge {
            std::fs::remove_dir_all(self.dir()).with_context(|| format!("deleting {}", self.dir().display()))?;
        }
        Ok(killed)
    }

    /// Cancels every job of a cluster and waits (a few seconds at most) until they are gone.
    fn cancel_all(&self, name: &str) {
        let Ok(client) = self.client(name) else { return };
        let active = || -> Vec<String> {
            client
                .run_args("squeue", &["-h", "-o", parse::SQUEUE_FORMAT])
                .ok()
                .and_then(|o| parse::parse_squeue(&o.stdout).ok())
                .unwrap_or_default()
                .into_iter()
                .filter(|r| !r.state.is_terminal())
                .map(|r| r.job.to_string())
                .collect()
        };
        let ids = active();
        if ids.is_empty() {
            return;
        }
        let _ = client.run("scancel", &ids);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(8) && !active().is_empty() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn cpu_status(p: &PartitionInfo) -> CpuStatus {
    CpuStatus {
        allocated: p.allocated,
        idle: p.idle,
        other: p.other,
        total: p.total,
        nodes_responding: p.nodes_responding(),
    }
}

/// How `stop-cluster` stops a cluster's daemons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopHow {
    /// SIGTERM: a planned stop (state saved; running jobs go on).
    Term,
    /// SIGKILL: a crash (the controller loses its last seconds of state; jobs may vanish,
    /// be launched again, or their ids be given to new jobs).
    Kill,
    /// SIGSTOP: a hung controller (connections are accepted, nothing is answered);
    /// `start-cluster` resumes it.
    Freeze,
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
