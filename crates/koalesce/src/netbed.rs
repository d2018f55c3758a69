//! A real shaped network on one machine: each site gets its own network namespace (its
//! "head", where its storage agent runs, plus optional host namespaces), joined by veth links
//! whose egress is shaped with `tc tbf` — fast links inside a site, slower and possibly
//! unequal links between sites, as a config file says ([`plan::NetbedConfig`]).
//!
//! Addresses exist only inside the namespaces the bed creates (10.250.0.0/16: site `i`'s head
//! is 10.250.0.(i+1), its host `k` is 10.250.(i+1).k) and there is no default route, so no
//! traffic can leave the bed. The namespaces are named `kdp<hash>-<site>[-h<k>]`, the hash
//! taken from the bed's directory, so two beds (two engineers' tests) never collide. `down`
//! stops whatever still runs inside them and deletes them (the veths go with them).
//!
//! Where namespaces are not allowed (not root, no CAP_SYS_ADMIN, no `ip`/`tc`), `up` falls
//! back to loopback with a clear message: every site is 127.0.0.1 and nothing is shaped.

pub mod plan;

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use serde::{Deserialize, Serialize};

pub use plan::{NetbedConfig, Plan};

/// The state file in the bed's directory.
pub const STATE_FILE: &str = "netbed.json";

/// The example bed (`examples/netbed.toml`), used when no configuration is given.
pub const DEFAULT_CONFIG: &str = include_str!("../../../examples/netbed.toml");

/// How the bed was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Mode {
    /// Network namespaces and shaped veth links.
    Namespaces,
    /// Namespaces were not allowed: every site on 127.0.0.1, nothing shaped.
    Loopback { reason: String },
}

/// A bed that is up (or was brought up), as recorded in `DIR/netbed.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetBed {
    pub dir: PathBuf,
    pub mode: Mode,
    pub config: NetbedConfig,
    pub plan: Plan,
}

/// The namespace prefix of a bed in `dir`: `kdp` and 8 hex digits of its canonical path.
pub fn prefix_for(dir: &Path) -> String {
    let canon = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let hash = koalesce_server::store::sha256_hex(canon.as_os_str().as_encoded_bytes());
    format!("kdp{}", &hash[..8])
}

/// Runs a command (`ip`, `tc`) and returns its standard output; a failure names the command
/// and what it printed.
pub(crate) fn output<S: AsRef<str>>(args: &[S]) -> anyhow::Result<String> {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .with_context(|| format!("running {} (is iproute2 installed?)", args[0]))?;
    anyhow::ensure!(
        out.status.success(),
        "`{}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn run<S: AsRef<str>>(args: &[S]) -> anyhow::Result<()> {
    output(args).map(|_| ())
}

/// Why namespaces cannot be used here (`None`: they can).
fn namespaces_unavailable(prefix: &str) -> Option<String> {
    if unsafe { libc::geteuid() } != 0 {
        return Some("not running as root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)".into());
    }
    for tool in ["ip", "tc"] {
        if Command::new(tool).arg("-V").output().is_err() {
            return Some(format!("`{tool}` is not installed (apt-get install iproute2)"));
        }
    }
    let probe = format!("{prefix}-probe");
    let r = run(&["ip", "netns", "add", &probe]);
    let _ = run(&["ip", "netns", "del", &probe]);
    r.err().map(|e| format!("cannot create a network namespace: {e:#}"))
}

/// The bed's namespaces that exist now (by prefix, whatever the state file says).
pub fn existing_namespaces(prefix: &str) -> anyhow::Result<Vec<String>> {
    let list = output(&["ip", "netns", "list"])?;
    let mine = format!("{prefix}-");
    Ok(list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&mine))
        .map(str::to_string)
        .collect())
}

impl NetBed {
    /// Brings a bed up in `dir` (created). Falls back to loopback when namespaces are not
    /// allowed, unless `require_namespaces`. Refuses when a bed is already up there.
    pub fn up(dir: &Path, config: &NetbedConfig, require_namespaces: bool) -> anyhow::Result<NetBed> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let state = dir.join(STATE_FILE);
        anyhow::ensure!(
            !state.exists(),
            "a bed is already up in {} (run `koalesce netbed down --dir {}` first)",
            dir.display(),
            dir.display()
        );
        let prefix = prefix_for(dir);
        let plan = plan::plan(config, &prefix)?;
        let mode = match namespaces_unavailable(&prefix) {
            None => Mode::Namespaces,
            Some(reason) if require_namespaces => anyhow::bail!("network namespaces are not available here: {reason}"),
            Some(reason) => Mode::Loopback { reason },
        };
        if mode == Mode::Namespaces {
            let left = existing_namespaces(&prefix)?;
            anyhow::ensure!(
                left.is_empty(),
                "namespaces of an earlier bed in {} still exist ({}): run `koalesce netbed down --dir {}`",
                dir.display(),
                left.join(", "),
                dir.display()
            );
            for c in &plan.commands {
                if let Err(e) = run(c) {
                    let _ = teardown(&prefix);
                    return Err(e.context("building the network bed (rolled back)"));
                }
            }
        }
        let bed = NetBed {
            dir: dir.to_path_buf(),
            mode,
            config: config.clone(),
            plan,
        };
        let json = serde_json::to_vec_pretty(&bed)?;
        koalesce_server::supervise::write_atomic(&state, &json)?;
        Ok(bed)
    }

    /// The bed recorded in `dir`.
    pub fn load(dir: &Path) -> anyhow::Result<NetBed> {
        let path = dir.join(STATE_FILE);
        let text = std::fs::read(&path).with_context(|| format!("no bed is up in {} (no {})", dir.display(), path.display()))?;
        serde_json::from_slice(&text).with_context(|| format!("reading {}", path.display()))
    }

    /// Stops every process still inside the bed's namespaces, deletes the namespaces (their
    /// links go with them) and the state file. Works from the directory alone, even when the
    /// state file is gone. Returns the namespaces deleted.
    pub fn down(dir: &Path) -> anyhow::Result<Vec<String>> {
        let prefix = prefix_for(dir);
        let deleted = match NetBed::load(dir) {
            Ok(NetBed {
                mode: Mode::Loopback { .. },
                ..
            }) => Vec::new(),
            _ if unsafe { libc::geteuid() } != 0 => Vec::new(),
            _ => teardown(&prefix)?,
        };
        let state = dir.join(STATE_FILE);
        if state.exists() {
            std::fs::remove_file(&state)?;
        }
        Ok(deleted)
    }

    pub fn is_shaped(&self) -> bool {
        self.mode == Mode::Namespaces
    }

    fn site_index(&self, site: &str) -> Option<usize> {
        self.config.sites.iter().position(|s| s.name == site)
    }

    /// The namespace of a site's head (`None` on loopback or for an unknown site).
    pub fn netns(&self, site: &str) -> Option<&str> {
        if !self.is_shaped() {
            return None;
        }
        self.plan
            .namespaces
            .iter()
            .find(|n| n.site == site && n.host.is_none())
            .map(|n| n.name.as_str())
    }

    /// The namespace of host `k` (from 1) of a site.
    pub fn host_netns(&self, site: &str, k: u32) -> Option<&str> {
        if !self.is_shaped() {
            return None;
        }
        self.plan
            .namespaces
            .iter()
            .find(|n| n.site == site && n.host == Some(k))
            .map(|n| n.name.as_str())
    }

    /// The address other sites reach a site's head at (127.0.0.1 on loopback).
    pub fn address(&self, site: &str) -> Option<IpAddr> {
        let i = self.site_index(site)?;
        Some(if self.is_shaped() {
            IpAddr::V4(plan::site_address(i))
        } else {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        })
    }

    /// The shaped rate from one site to another, Mbit/s (`None` on loopback: unshaped).
    pub fn rate_mbit(&self, from: &str, to: &str) -> Option<f64> {
        if !self.is_shaped() {
            return None;
        }
        let (a, b) = (self.site_index(from)?, self.site_index(to)?);
        (a != b).then(|| self.plan.site_kbit[a][b] as f64 / 1000.0)
    }

    /// The site names, in configuration order.
    pub fn sites(&self) -> Vec<&str> {
        self.config.sites.iter().map(|s| s.name.as_str()).collect()
    }
}

/// Stops the processes inside the namespaces with `prefix` and deletes them.
fn teardown(prefix: &str) -> anyhow::Result<Vec<String>> {
    let names = existing_namespaces(prefix)?;
    let pids_of = |ns: &str| -> Vec<i32> {
        output(&["ip", "netns", "pids", ns])
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    };
    for (signal, wait) in [(libc::SIGTERM, 20), (libc::SIGKILL, 20)] {
        let pids: Vec<i32> = names.iter().flat_map(|n| pids_of(n)).collect();
        if pids.is_empty() {
            break;
        }
        for p in &pids {
            unsafe {
                libc::kill(*p, signal);
            }
        }
        for _ in 0..wait {
            if names.iter().all(|n| pids_of(n).is_empty()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let mut failed = Vec::new();
    for n in &names {
        if let Err(e) = run(&["ip", "netns", "del", n]) {
            failed.push(format!("{e:#}"));
        }
    }
    anyhow::ensure!(failed.is_empty(), "deleting namespaces: {}", failed.join("; "));
    Ok(names)
}
