//! `koalesce testbed up --network`: the bed's clusters get a shaped network for their
//! storage. A network bed ([`crate::netbed`]) in `DIR/net` gives every cluster a namespace
//! joined to the others by tc-shaped veth links (a config file says the rates; by default
//! unequal links as in `examples/netbed.toml`), and a storage agent per cluster runs inside
//! its namespace: its control side on the host's loopback (for the server), its data side on
//! the cluster's address in the bed (for third-party pushes and probes between clusters).
//! `server.toml` then gives every site a `[sites.agent]`.
//!
//! Each cluster's slurmctld and slurmd's run inside the cluster's namespace too (entered with
//! setns before exec; munge's Unix socket works across network namespaces): the controller
//! is reached from the host namespace, where the koalesce server and its sbatch/squeue run,
//! over an unshaped control link ([`super::hostlink`]), and the slurmd's listen on the
//! cluster's address in the bed. What crosses the shaped links is the data: stage-in between
//! clusters and the probes that measure them. Jobs (which run in the namespace) read their
//! inputs from the agent's root on this machine's file system (`[sites.agent] root`).
//!
//! ```text
//! DIR/net/
//!   netbed.json             the network bed (namespaces kdp<hash>-<cluster>)
//!   agent.token             the agents' shared secret (0600)
//!   storage-<cluster>/      the agent's root: the cluster's storage
//!   agent-<cluster>.{pid,addr,log}
//!   hostlinks.json          the clusters' control links (host side, namespace side)
//! ```

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use koalesce_server::config::AgentSiteConfig;
use serde::Serialize;

use std::net::Ipv4Addr;

use super::{hostlink, procs};
use crate::netbed::{NetBed, NetbedConfig};

/// The network part's directory under the bed.
pub const NET_DIR: &str = "net";
/// Port of every agent's data side inside its namespace (namespaces do not share ports).
pub const DATA_PORT: u16 = 7000;
/// What identifies an agent of the bed in its command line.
const NEEDLE: &str = "storage-agent";

/// A default network for `clusters`: 100 Mbit/s between clusters, except unequal links
/// among the first three (alpha→beta 40, back 20; alpha↔gamma and beta↔gamma 10).
pub fn default_config(clusters: &[String]) -> NetbedConfig {
    let mut text = String::from("intra_site_mbit = 1000\ninter_site_mbit = 100\n");
    for c in clusters {
        text.push_str(&format!("[[sites]]\nname = \"{c}\"\n"));
    }
    let link = |a: usize, b: usize, mbit: u32, back: u32| {
        format!(
            "[[links]]\nfrom = \"{}\"\nto = \"{}\"\nmbit = {mbit}\nreverse_mbit = {back}\n",
            clusters[a], clusters[b]
        )
    };
    if clusters.len() >= 2 {
        text.push_str(&link(0, 1, 40, 20));
    }
    if clusters.len() >= 3 {
        text.push_str(&link(0, 2, 10, 10));
        text.push_str(&link(1, 2, 10, 10));
    }
    NetbedConfig::parse(&text).expect("the default network parses")
}

/// One cluster's agent as the server reaches it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentStatus {
    pub site: String,
    pub pid: Option<u32>,
    pub control_url: Option<String>,
    pub data_url: String,
    pub netns: Option<String>,
    /// The shaped rate to every other cluster, Mbit/s (none on loopback).
    pub rates_mbit: Vec<(String, f64)>,
}

fn net_dir(dir: &Path) -> PathBuf {
    dir.join(NET_DIR)
}

fn file(dir: &Path, site: &str, ext: &str) -> PathBuf {
    net_dir(dir).join(format!("agent-{site}.{ext}"))
}

/// Where a cluster's Slurm daemons run on a network bed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placement {
    /// The cluster's namespace (the daemons enter it before exec).
    pub netns: String,
    /// Where the controller is reached (also from the host): its control link's namespace side.
    pub controller_addr: Ipv4Addr,
    /// Where the controller reaches the slurmd's: the cluster's address in the bed.
    pub node_addr: Ipv4Addr,
}

/// Where the daemons of `cluster` run (`None`: no network bed, or loopback: the host).
pub fn placement(dir: &Path, cluster: &str) -> Option<Placement> {
    let net = net_dir(dir);
    let bed = NetBed::load(&net).ok()?;
    let netns = bed.netns(cluster)?.to_string();
    let link = hostlink::load(&net).into_iter().find(|l| l.site == cluster)?;
    let node_addr = match bed.address(cluster)? {
        std::net::IpAddr::V4(a) => a,
        std::net::IpAddr::V6(_) => return None,
    };
    Some(Placement {
        netns,
        controller_addr: link.ns_addr(),
        node_addr,
    })
}

/// Brings the network up (if not up) and starts every site's agent that is not running, for
/// sites without Slurm daemons (no control links); returns each site's `[sites.agent]`.
pub fn up(
    dir: &Path,
    clusters: &[String],
    config: Option<&NetbedConfig>,
    require_namespaces: bool,
) -> anyhow::Result<Vec<(String, AgentSiteConfig)>> {
    up_network(dir, clusters, config, require_namespaces, false)?;
    start_agents(dir, clusters)
}

/// Brings the network up (if not up): the namespaces and shaped links, and with
/// `control_links` the clusters' control links from the host ([`hostlink`]).
pub fn up_network(
    dir: &Path,
    clusters: &[String],
    config: Option<&NetbedConfig>,
    require_namespaces: bool,
    control_links: bool,
) -> anyhow::Result<()> {
    let net = net_dir(dir);
    std::fs::create_dir_all(&net)?;
    let bed = match NetBed::load(&net) {
        Ok(bed) => bed,
        Err(_) => {
            let config = config.cloned().unwrap_or_else(|| default_config(clusters));
            let names: Vec<&str> = config.sites.iter().map(|s| s.name.as_str()).collect();
            for c in clusters {
                anyhow::ensure!(
                    names.contains(&c.as_str()),
                    "the network configuration has no site '{c}' (it names {names:?})"
                );
            }
            let bed = NetBed::up(&net, &config, require_namespaces)?;
            if let crate::netbed::Mode::Loopback { reason } = &bed.mode {
                eprintln!("warning: network namespaces are not available here: {reason}");
                eprintln!("warning: falling back to loopback: the clusters' storage agents run on 127.0.0.1 and links are NOT shaped");
            }
            bed
        }
    };
    let sites: Vec<(String, String, usize)> = clusters
        .iter()
        .filter_map(|c| Some((c.clone(), bed.netns(c)?.to_string(), bed.sites().iter().position(|s| s == c)?)))
        .collect();
    if control_links && !sites.is_empty() {
        hostlink::ensure(&net, &bed.plan.prefix, &sites)?;
    }
    Ok(())
}

/// Starts every cluster's agent that is not running (the network is up); returns each
/// site's `[sites.agent]`.
pub fn start_agents(dir: &Path, clusters: &[String]) -> anyhow::Result<Vec<(String, AgentSiteConfig)>> {
    let net = net_dir(dir);
    let bed = NetBed::load(&net)?;
    let token = net.join("agent.token");
    if !token.exists() {
        let mut bytes = [0u8; 24];
        std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
        std::fs::write(&token, koalesce_server::store::hex(&bytes))?;
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600))?;
    }
    let exe = std::env::current_exe().context("finding the koalesce executable")?;
    let mut out = Vec::new();
    for c in clusters {
        let root = net.join(format!("storage-{c}"));
        std::fs::create_dir_all(&root)?;
        let (pid_file, addr_file, log) = (file(dir, c, "pid"), file(dir, c, "addr"), file(dir, c, "log"));
        // On loopback the control address serves the other agents too.
        let data_addr = match bed.netns(c) {
            Some(_) => Some(format!("{}:{DATA_PORT}", bed.address(c).context("site address")?)),
            None => None,
        };
        if procs::daemon_pid(&pid_file, NEEDLE).is_none() {
            let _ = std::fs::remove_file(&addr_file);
            let mut cmd = Command::new(&exe);
            cmd.arg("storage-agent").arg("--root").arg(&root).arg("--token-file").arg(&token);
            cmd.arg("--addr-file").arg(&addr_file).args(["--listen", "127.0.0.1:0"]);
            if let (Some(ns), Some(data)) = (bed.netns(c), &data_addr) {
                cmd.args(["--netns", ns, "--netns-listen", data]);
            }
            let logf = std::fs::File::create(&log)?;
            cmd.stdin(Stdio::null()).stdout(logf.try_clone()?).stderr(logf);
            // Its own session: it outlives this command, as the Slurm daemons do.
            unsafe {
                cmd.pre_exec(|| {
                    libc::setsid();
                    Ok(())
                });
            }
            let child = cmd.spawn().with_context(|| format!("starting the storage agent of {c}"))?;
            std::fs::write(&pid_file, child.id().to_string())?;
        }
        let control = wait_addr(&addr_file, &pid_file, &log)?;
        out.push((
            c.clone(),
            AgentSiteConfig {
                url: format!("http://{control}"),
                data_url: data_addr.map(|a| format!("http://{a}")),
                token_file: token.clone(),
                root: Some(root),
            },
        ));
    }
    Ok(out)
}

/// Waits until the agent wrote its control address.
fn wait_addr(addr_file: &Path, pid_file: &Path, log: &Path) -> anyhow::Result<String> {
    let t0 = Instant::now();
    loop {
        if let Some(a) = std::fs::read_to_string(addr_file).ok().filter(|a| !a.trim().is_empty()) {
            return Ok(a.trim().to_string());
        }
        anyhow::ensure!(
            procs::daemon_pid(pid_file, NEEDLE).is_some(),
            "the storage agent exited\n{}",
            procs::log_tail(log, 10)
        );
        anyhow::ensure!(
            t0.elapsed() < Duration::from_secs(10),
            "the storage agent did not start\n{}",
            procs::log_tail(log, 10)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether the bed in `dir` has a network part.
pub fn present(dir: &Path) -> bool {
    net_dir(dir).join(crate::netbed::STATE_FILE).exists()
}

/// The agents and their links (`None`: the bed has no network part).
pub fn status(dir: &Path, clusters: &[String]) -> Option<Vec<AgentStatus>> {
    let bed = NetBed::load(&net_dir(dir)).ok()?;
    Some(
        clusters
            .iter()
            .map(|c| AgentStatus {
                site: c.clone(),
                pid: procs::daemon_pid(&file(dir, c, "pid"), NEEDLE),
                control_url: std::fs::read_to_string(file(dir, c, "addr"))
                    .ok()
                    .map(|a| format!("http://{}", a.trim())),
                data_url: match bed.netns(c) {
                    Some(_) => bed.address(c).map(|a| format!("http://{a}:{DATA_PORT}")).unwrap_or_default(),
                    None => "(control url)".into(),
                },
                netns: bed.netns(c).map(str::to_string),
                rates_mbit: clusters
                    .iter()
                    .filter(|o| *o != c)
                    .filter_map(|o| Some((o.clone(), bed.rate_mbit(c, o)?)))
                    .collect(),
            })
            .collect(),
    )
}

/// Stops the agents and takes the network down.
pub fn down(dir: &Path, clusters: &[String]) -> anyhow::Result<()> {
    let pids: Vec<(u32, String)> = clusters
        .iter()
        .filter_map(|c| procs::daemon_pid(&file(dir, c, "pid"), NEEDLE).map(|p| (p, format!("storage agent of {c}"))))
        .collect();
    procs::stop_pids(&pids, libc::SIGTERM, Duration::from_secs(5));
    if net_dir(dir).exists() {
        hostlink::remove(&net_dir(dir));
        NetBed::down(&net_dir(dir))?;
        hostlink::forget(&net_dir(dir));
    }
    Ok(())
}
