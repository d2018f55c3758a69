//! `koalesce testbed up | status | down | stop-cluster | start-cluster` (see
//! [`koalesce::testbed`]).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use koalesce::testbed::{self, BedStatus, StopHow, TestBed, UpOptions};

#[derive(Debug, Subcommand)]
pub enum TestbedCommand {
    /// Start munged and N independent Slurm clusters on this machine (idempotent), wait until
    /// every node is idle and every controller schedules, and write DIR/server.toml.
    Up(UpArgs),
    /// Show what runs: munged, each cluster's controller and slurmd's, CPUs, finished jobs.
    /// Exit status 1 when something is down.
    Status(DirArgs),
    /// Stop everything the bed started (its jobs are cancelled first).
    Down {
        #[command(flatten)]
        dir: DirArgs,
        /// Also delete the bed's directory.
        #[arg(long)]
        purge: bool,
    },
    /// Stop one cluster (controller and slurmd's), e.g. to see how koalesce handles a site
    /// fault.
    StopCluster {
        /// Cluster name (alpha, beta, ...).
        name: String,
        #[command(flatten)]
        dir: DirArgs,
        /// SIGKILL instead of SIGTERM: a crash (the controller loses its last seconds of
        /// state; jobs may vanish or be launched twice).
        #[arg(long, conflicts_with = "freeze")]
        kill: bool,
        /// SIGSTOP: a hung controller that accepts connections and answers nothing
        /// (start-cluster resumes it).
        #[arg(long)]
        freeze: bool,
        /// Stop only the controller; the slurmd's (and running jobs) go on.
        #[arg(long)]
        controller_only: bool,
    },
    /// Start a stopped (or frozen) cluster again and wait until it schedules.
    StartCluster {
        name: String,
        #[command(flatten)]
        dir: DirArgs,
    },
}

#[derive(Debug, Args)]
pub struct DirArgs {
    /// The bed's directory (default: $KOALESCE_TESTBED_DIR, else /tmp/koalesce-testbed-UID).
    #[arg(long, env = "KOALESCE_TESTBED_DIR")]
    pub dir: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

impl DirArgs {
    fn dir(&self) -> PathBuf {
        self.dir.clone().unwrap_or_else(testbed::default_dir)
    }
}

#[derive(Debug, Args)]
pub struct UpArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// Number of clusters (named alpha, beta, gamma, ...).
    #[arg(long, default_value_t = 3)]
    pub clusters: u32,
    /// slurmd's (nodes) per cluster.
    #[arg(long, default_value_t = 2)]
    pub nodes: u32,
    /// CPUs per node (fake: Slurm trusts the configuration, not the hardware).
    #[arg(long, default_value_t = 32)]
    pub cpus: u32,
    /// The clusters' partition.
    #[arg(long, default_value = "debug")]
    pub partition: String,
    /// Use consecutive ports from this one (default: a free block picked at random in
    /// 20000..32000).
    #[arg(long)]
    pub port_base: Option<u16>,
    /// Start each controller this many ms after the previous one, so their scheduling ticks
    /// are out of phase (default 0: back to back, ticks in phase).
    #[arg(long, default_value_t = 0)]
    pub tick_offset_ms: u64,
    /// Longest wait for the bed to become ready, in seconds.
    #[arg(long, default_value_t = 90)]
    pub timeout: u64,
    /// Give each cluster's storage its own network namespace with a storage agent, joined to
    /// the others by links shaped with tc (server.toml then has [sites.agent] per site).
    /// Falls back to loopback, unshaped, where namespaces are not allowed.
    #[arg(long)]
    pub network: bool,
    /// The links' rates (a netbed TOML whose sites are the clusters; see examples/netbed.toml).
    /// Default: alpha→beta 40 Mbit/s (20 back), gamma 10 from both, 100 otherwise.
    #[arg(long, requires = "network")]
    pub network_config: Option<PathBuf>,
    /// With --network: fail instead of falling back to loopback.
    #[arg(long, requires = "network")]
    pub require_namespaces: bool,
}

impl TestbedCommand {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            TestbedCommand::Up(a) => {
                let mut o = UpOptions::new(a.dir.dir());
                o.clusters = a.clusters;
                o.nodes = a.nodes;
                o.cpus = a.cpus;
                o.partition = a.partition;
                o.port_base = a.port_base;
                o.tick_offset_ms = a.tick_offset_ms;
                o.timeout = Duration::from_secs(a.timeout);
                o.network = a.network;
                o.require_namespaces = a.require_namespaces;
                if let Some(p) = &a.network_config {
                    let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
                    o.network_config = Some(koalesce::netbed::NetbedConfig::parse(&text).with_context(|| format!("in {}", p.display()))?);
                }
                let (bed, report) = TestBed::up(&o)?;
                let status = bed.status();
                if a.dir.json {
                    println!("{}", serde_json::json!({ "up": report, "status": status }));
                } else {
                    let what = if report.started.is_empty() {
                        "already running".to_string()
                    } else {
                        format!("started {} daemons", report.started.len())
                    };
                    println!(
                        "test bed ready in {:.1} s ({what}): {} clusters x {} nodes x {} CPUs in {}",
                        report.elapsed_ms as f64 / 1000.0,
                        bed.spec().clusters.len(),
                        bed.spec().nodes,
                        bed.spec().cpus,
                        bed.dir().display()
                    );
                    print_status(&status);
                }
                Ok(ExitCode::SUCCESS)
            }
            TestbedCommand::Status(d) => {
                let bed = TestBed::open(&d.dir())?;
                let status = bed.status();
                if d.json {
                    println!("{}", serde_json::to_string_pretty(&status)?);
                } else {
                    println!(
                        "test bed {}: {}",
                        bed.dir().display(),
                        if status.all_up() { "all up" } else { "NOT all up" }
                    );
                    print_status(&status);
                }
                Ok(if status.all_up() { ExitCode::SUCCESS } else { ExitCode::from(1) })
            }
            TestbedCommand::Down { dir, purge } => {
                let d = dir.dir();
                let bed = TestBed::open(&d)?;
                let killed = bed.down(purge)?;
                let extra = if killed > 0 {
                    format!(" ({killed} leftover job processes killed)")
                } else {
                    String::new()
                };
                println!("test bed {} stopped{}{extra}", d.display(), if purge { " and deleted" } else { "" });
                Ok(ExitCode::SUCCESS)
            }
            TestbedCommand::StopCluster {
                name,
                dir,
                kill,
                freeze,
                controller_only,
            } => {
                let bed = TestBed::open(&dir.dir())?;
                let (how, sig) = match (kill, freeze) {
                    (true, _) => (StopHow::Kill, "SIGKILL"),
                    (_, true) => (StopHow::Freeze, "SIGSTOP"),
                    _ => (StopHow::Term, "SIGTERM"),
                };
                bed.stop_cluster(&name, how, controller_only)?;
                let what = if controller_only { "controller" } else { "controller and slurmd's" };
                println!("cluster {name}: {what} stopped ({sig})");
                Ok(ExitCode::SUCCESS)
            }
            TestbedCommand::StartCluster { name, dir } => {
                let bed = TestBed::open(&dir.dir())?;
                let took = bed.start_cluster(&name)?;
                println!("cluster {name}: running and scheduling ({:.1} s)", took.as_secs_f64());
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

fn print_status(s: &BedStatus) {
    let pid = |p: Option<u32>| p.map_or("down".to_string(), |p| format!("pid {p}"));
    println!("munged: {} (socket under {}/munge/run)", pid(s.munge.pid), s.dir.display());
    println!(
        "{:<8} {:<22} {:<7} {:<18} {:<5} CONF",
        "CLUSTER", "CONTROLLER", "NODES", "CPUS alloc/idle/all", "DONE"
    );
    for c in &s.clusters {
        let ctl = format!(":{} {}", c.controller.port.unwrap_or(0), pid(c.controller.pid));
        let up = c.nodes.iter().filter(|n| n.up()).count();
        let cpus = match (&c.cpus, &c.error) {
            (Some(x), _) => format!("{}/{}/{}", x.allocated, x.idle, x.total),
            (None, Some(e)) => e.chars().take(18).collect(),
            (None, None) => "-".into(),
        };
        println!(
            "{:<8} {:<22} {:<7} {:<18} {:<5} {}",
            c.name,
            ctl,
            format!("{up}/{}", c.nodes.len()),
            cpus,
            c.jobs_finished,
            c.conf.display()
        );
    }
    let placed: Vec<_> = s.clusters.iter().filter_map(|c| Some((&c.name, c.placement.as_ref()?))).collect();
    if !placed.is_empty() {
        println!("{:<8} {:<24} {:<18} NODES AT", "DAEMONS", "NETWORK NAMESPACE", "CONTROLLER AT");
        for (name, p) in placed {
            println!("{:<8} {:<24} {:<18} {}", name, p.netns, p.controller_addr, p.node_addr);
        }
    }
    if let Some(net) = &s.network {
        println!(
            "{:<8} {:<8} {:<28} {:<26} SHAPED TO (Mbit/s)",
            "STORAGE", "AGENT", "CONTROL", "DATA"
        );
        for a in net {
            let rates: Vec<String> = a.rates_mbit.iter().map(|(to, r)| format!("{to} {r}")).collect();
            println!(
                "{:<8} {:<8} {:<28} {:<26} {}",
                a.site,
                pid(a.pid),
                a.control_url.as_deref().unwrap_or("-"),
                a.data_url,
                if rates.is_empty() {
                    "unshaped (loopback)".to_string()
                } else {
                    rates.join(", ")
                }
            );
        }
    }
    println!(
        "server config: {} (koalesce server --config {} --data-dir DIR)",
        s.server_toml.display(),
        s.server_toml.display()
    );
}
