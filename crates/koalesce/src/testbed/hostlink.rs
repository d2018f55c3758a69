//! The control links of a network bed's Slurm clusters: with `testbed up --network`, each
//! cluster's slurmctld and slurmd's run inside the cluster's namespace, and the koalesce server
//! (with the sbatch/squeue/scontrol it runs) stays in the host's. An unshaped veth pair per
//! cluster joins the host to the cluster's namespace on a /30 of 10.251.0.0/16: the host side
//! gets `.1`, the namespace side `.2`, which is the address slurmctld is reached at
//! (`SlurmctldHost=HOST(10.251.x.y+2)`). Only the two connected /30 routes exist: no default
//! route in the namespace, and the host does not forward (nor is it asked to), so nothing in
//! the namespace reaches beyond the host's end of its control link.
//!
//! The host namespace is shared by every bed on the machine, so the /30s are allocated under
//! a machine-wide lock among those no host interface uses, and recorded in
//! `DIR/net/hostlinks.json`. Deleting the namespace deletes both ends of the pair (and the
//! host's route with it).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// The state file under the bed's `net/` directory.
pub const STATE_FILE: &str = "hostlinks.json";
/// The machine-wide lock while /30s are picked.
const LOCK: &str = "/tmp/koalesce-hostlinks.lock";
/// The namespace side's device name.
pub const NS_DEV: &str = "to-host";

/// One cluster's control link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostLink {
    pub site: String,
    pub netns: String,
    /// The host side's device (in the host namespace).
    pub host_dev: String,
    /// Index of the /30 in 10.251.0.0/16.
    pub slot: u16,
}

impl HostLink {
    /// The host side's address.
    pub fn host_addr(&self) -> Ipv4Addr {
        slot_addr(self.slot, 1)
    }

    /// The namespace side's address: where the cluster's controller is reached.
    pub fn ns_addr(&self) -> Ipv4Addr {
        slot_addr(self.slot, 2)
    }
}

fn slot_addr(slot: u16, host: u8) -> Ipv4Addr {
    let base = u32::from(Ipv4Addr::new(10, 251, 0, 0)) + u32::from(slot) * 4;
    Ipv4Addr::from(base + u32::from(host))
}

/// The /30 slot of an address in 10.251.0.0/16.
fn slot_of(a: Ipv4Addr) -> Option<u16> {
    let o = a.octets();
    (o[0] == 10 && o[1] == 251).then(|| ((u16::from(o[2])) << 6) | (u16::from(o[3]) >> 2))
}

/// The host side's device name for site index `i` of the bed with namespace prefix `prefix`
/// (`kdp` + 8 hex digits): `kh` + the hex digits + the index, at most 15 bytes.
pub fn host_dev(prefix: &str, i: usize) -> String {
    let hex = prefix.strip_prefix("kdp").unwrap_or(prefix);
    let mut s = format!("kh{}", &hex[..hex.len().min(8)]);
    s.push_str(&i.to_string());
    s.truncate(15);
    s
}

/// The lowest `n` slots not in `used`.
fn free_slots(used: &BTreeSet<u16>, n: usize) -> anyhow::Result<Vec<u16>> {
    let slots: Vec<u16> = (0..=u16::MAX >> 2).filter(|s| !used.contains(s)).take(n).collect();
    anyhow::ensure!(
        slots.len() == n,
        "no free /30 left in 10.251.0.0/16 for the clusters' control links"
    );
    Ok(slots)
}

/// The `ip` commands that make one link (run in order).
pub fn commands(l: &HostLink) -> Vec<Vec<String>> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    let host = format!("{}/30", l.host_addr());
    let ns = format!("{}/30", l.ns_addr());
    vec![
        s(&[
            "ip",
            "link",
            "add",
            &l.host_dev,
            "type",
            "veth",
            "peer",
            "name",
            NS_DEV,
            "netns",
            &l.netns,
        ]),
        s(&["ip", "addr", "add", &host, "dev", &l.host_dev]),
        s(&["ip", "link", "set", &l.host_dev, "up"]),
        s(&["ip", "-n", &l.netns, "addr", "add", &ns, "dev", NS_DEV]),
        s(&["ip", "-n", &l.netns, "link", "set", NS_DEV, "up"]),
    ]
}

fn run(args: &[String]) -> anyhow::Result<()> {
    crate::netbed::output(args).map(drop)
}

/// The slots the host's interfaces use now.
fn used_slots() -> anyhow::Result<BTreeSet<u16>> {
    let out = crate::netbed::output(&["ip", "-4", "-o", "addr", "show"])?;
    Ok(out
        .split_whitespace()
        .filter_map(|w| w.split('/').next()?.parse::<Ipv4Addr>().ok())
        .filter_map(slot_of)
        .collect())
}

/// The links recorded in `net_dir` (empty when none).
pub fn load(net_dir: &Path) -> Vec<HostLink> {
    std::fs::read(net_dir.join(STATE_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Makes the control links of `sites` (site name, namespace, index) that do not exist yet.
pub fn ensure(net_dir: &Path, prefix: &str, sites: &[(String, String, usize)]) -> anyhow::Result<Vec<HostLink>> {
    let mut links = load(net_dir);
    let missing: Vec<&(String, String, usize)> = sites.iter().filter(|(s, _, _)| !links.iter().any(|l| &l.site == s)).collect();
    if missing.is_empty() {
        return Ok(links);
    }
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(LOCK)
        .with_context(|| format!("opening {LOCK}"))?;
    anyhow::ensure!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } == 0, "cannot lock {LOCK}");
    let slots = free_slots(&used_slots()?, missing.len())?;
    for ((site, ns, i), slot) in missing.into_iter().zip(slots) {
        let l = HostLink {
            site: site.clone(),
            netns: ns.clone(),
            host_dev: host_dev(prefix, *i),
            slot,
        };
        for c in commands(&l) {
            if let Err(e) = run(&c) {
                let _ = run(&["ip".into(), "link".into(), "del".into(), l.host_dev.clone()]);
                return Err(e.context(format!("making the control link of {site}")));
            }
        }
        links.push(l);
        koalesce_server::supervise::write_atomic(&net_dir.join(STATE_FILE), &serde_json::to_vec_pretty(&links)?)?;
    }
    Ok(links)
}

/// Deletes the host ends of the bed's control links (which deletes their namespace ends too).
/// Deleting a namespace also removes them, but only once the kernel has freed it, which it
/// does asynchronously: on a busy machine the host ends outlived `testbed down`.
pub fn remove(net_dir: &Path) {
    for l in load(net_dir) {
        let _ = crate::netbed::output(&["ip", "link", "del", &l.host_dev]);
    }
}

/// Forgets the links (after [`remove`] and the namespaces' deletion).
pub fn forget(net_dir: &Path) {
    let _ = std::fs::remove_file(net_dir.join(STATE_FILE));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_map_to_disjoint_slash_30s() {
        let l = |slot| HostLink {
            site: "a".into(),
            netns: "n".into(),
            host_dev: "d".into(),
            slot,
        };
        assert_eq!(l(0).host_addr(), Ipv4Addr::new(10, 251, 0, 1));
        assert_eq!(l(0).ns_addr(), Ipv4Addr::new(10, 251, 0, 2));
        assert_eq!(l(1).host_addr(), Ipv4Addr::new(10, 251, 0, 5));
        assert_eq!(l(64).ns_addr(), Ipv4Addr::new(10, 251, 1, 2));
        assert_eq!(l(16383).ns_addr(), Ipv4Addr::new(10, 251, 255, 254));
        for s in [0u16, 1, 63, 64, 1000, 16383] {
            assert_eq!(slot_of(l(s).host_addr()), Some(s));
            assert_eq!(slot_of(l(s).ns_addr()), Some(s));
        }
        assert_eq!(slot_of(Ipv4Addr::new(10, 250, 0, 1)), None);
        assert_eq!(slot_of(Ipv4Addr::new(192, 0, 2, 2)), None);
    }

    #[test]
    fn free_slots_skip_the_used_ones() {
        let used: BTreeSet<u16> = [0, 1, 3].into_iter().collect();
        assert_eq!(free_slots(&used, 3).unwrap(), [2, 4, 5]);
        let all: BTreeSet<u16> = (0..=u16::MAX >> 2).collect();
        assert!(free_slots(&all, 1).is_err());
    }

    #[test]
    fn device_names_fit_and_commands_stay_in_the_bed() {
        assert_eq!(host_dev("kdp0123abcd", 2), "kh0123abcd2");
        assert!(host_dev("kdp0123abcd", 199).len() <= 15);
        let l = HostLink {
            site: "alpha".into(),
            netns: "kdp0123abcd-alpha".into(),
            host_dev: host_dev("kdp0123abcd", 0),
            slot: 5,
        };
        let text: Vec<String> = commands(&l).iter().map(|c| c.join(" ")).collect();
        assert_eq!(
            text[0],
            "ip link add kh0123abcd0 type veth peer name to-host netns kdp0123abcd-alpha"
        );
        assert!(text.contains(&"ip -n kdp0123abcd-alpha addr add 10.251.0.22/30 dev to-host".to_string()));
        // No route is added: only the connected /30 on each side.
        assert!(text.iter().all(|c| !c.contains("route")), "{text:?}");
    }
}
