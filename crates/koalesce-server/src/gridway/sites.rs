//! What REQUIREMENTS and RANK see of a site in the daemon: GridWay's host variables (ARCH,
//! OS_NAME, OS_VERSION, CPU_MODEL, CPU_MHZ, CPU_SMP, SIZE_MEM_MB, SIZE_DISK_MB, LRMS_TYPE,
//! QUEUE_NAME, QUEUE_MAXTIME, HAS_SOFTWARE tags …), as the core's
//! [`koalesce_core::model::SiteAttributes`].
//!
//! A site's `[sites.attributes]` table sets them; whatever it leaves empty (or 0) is
//! discovered on this machine, where the local executor runs the site's components (and where
//! the Slurm testbed's nodes are): the architecture this build runs on, the kernel's name and
//! release, the first CPU's model and clock from /proc/cpuinfo, the memory from /proc/meminfo,
//! the free space of the file system holding the site's storage. The LRM type and queue come
//! from the site's kind (a Slurm site's queue is its partition).
//!
//! ```toml
//! [[sites]]
//! name = "vu"
//! processors = 8
//! [sites.attributes]
//! architecture = "x86_64"
//! cpu_mhz = 2800
//! software = ["APPS/CHEM/GAUSSIAN-03", "ENV/MPI"]
//! queue_max_walltime_ms = 3600000
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use koalesce_core::expr::{HostVars, IntVar, SiteSnapshot, StrVar};
use koalesce_core::model::{Site, SiteAttributes};

use crate::config::{SiteConfig, SiteKind};

/// The attributes the daemon publishes for `site`: its configured ones, the rest discovered.
pub fn attributes(site: &SiteConfig, storage: &Path) -> SiteAttributes {
    let mut a = site.attributes.clone().unwrap_or_default();
    let host = HostFacts::discover(storage);
    fill(&mut a.architecture, || std::env::consts::ARCH.to_string());
    fill(&mut a.os_name, || host.os_name.clone());
    fill(&mut a.os_version, || host.os_version.clone());
    fill(&mut a.cpu_model, || host.cpu_model.clone());
    fill(&mut a.lrms_type, || site.kind.name().to_string());
    fill(&mut a.queue_name, || match (&site.kind, &site.slurm) {
        (SiteKind::Slurm, Some(s)) => s.partition.clone(),
        _ => site.name.clone(),
    });
    if a.cpu_mhz == 0 {
        a.cpu_mhz = host.cpu_mhz;
    }
    if a.cpus_per_node == 0 && site.kind == SiteKind::Local {
        // The local executor is one node holding all of the site's processors.
        a.nodes = a.nodes.max(1);
        a.cpus_per_node = site.processors;
    }
    if a.memory_mb == 0 {
        a.memory_mb = host.memory_mb;
    }
    if a.disk_mb == 0 {
        a.disk_mb = host.disk_mb;
    }
    a
}

/// GridWay's host variables of `site` with `idle` processors free, by name, as text (what
/// `GET /api/v1/sites` shows, GridWay's `gwhost -f`).
pub fn host_variables(site: &Site, idle: u32) -> BTreeMap<String, String> {
    let snap = SiteSnapshot::for_site(site, idle);
    let strs = StrVar::ALL.iter().map(|&v| (v.name().to_string(), snap.str(v).to_string()));
    let ints = IntVar::ALL.iter().map(|&v| (v.name().to_string(), snap.int(v).to_string()));
    strs.chain(ints).collect()
}

fn fill(field: &mut String, value: impl FnOnce() -> String) {
    if field.is_empty() {
        *field = value();
    }
}

/// Facts about this machine (missing ones read as empty or 0: "not published").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFacts {
    pub os_name: String,
    pub os_version: String,
    pub cpu_model: String,
    pub cpu_mhz: u32,
    pub memory_mb: u64,
    pub disk_mb: u64,
}

impl HostFacts {
    /// Reads /proc and the file system holding `storage`.
    pub fn discover(storage: &Path) -> HostFacts {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let (cpu_model, cpu_mhz) = parse_cpuinfo(&cpuinfo);
        let disk_mb = nix::sys::statvfs::statvfs(storage)
            .map(|s| s.blocks_available().saturating_mul(s.fragment_size()) >> 20)
            .unwrap_or(0);
        HostFacts {
            os_name: read("/proc/sys/kernel/ostype").trim().to_string(),
            os_version: read("/proc/sys/kernel/osrelease").trim().to_string(),
            cpu_model,
            cpu_mhz,
            memory_mb: parse_meminfo_total_mb(&read("/proc/meminfo")),
            disk_mb,
        }
    }
}

/// The first processor's "model name" and "cpu MHz" (rounded) from /proc/cpuinfo's text.
pub fn parse_cpuinfo(text: &str) -> (String, u32) {
    let field = |key: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
    };
    let model = field("model name").unwrap_or_default();
    let mhz = field("cpu MHz")
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map_or(0, |v| v.round().min(u32::MAX as f64) as u32);
    (model, mhz)
}

/// MemTotal from /proc/meminfo's text, in MiB.
pub fn parse_meminfo_total_mb(text: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_and_meminfo_parse_and_odd_input_reads_as_unpublished() {
        let cpu = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\ncpu MHz\t\t: 2596.130\n\nprocessor\t: 1\nmodel name\t: other\n";
        assert_eq!(parse_cpuinfo(cpu), ("AMD EPYC 7B13".to_string(), 2596));
        assert_eq!(parse_cpuinfo(""), (String::new(), 0));
        assert_eq!(parse_cpuinfo("cpu MHz : NaN\ncpu MHz: -3"), (String::new(), 0));
        assert_eq!(parse_meminfo_total_mb("MemTotal:       25165824 kB\nMemFree: 1 kB\n"), 24_576);
        assert_eq!(parse_meminfo_total_mb("MemTotal: lots"), 0);
    }

    #[test]
    fn configured_attributes_win_and_the_rest_is_discovered() {
        let mut site = SiteConfig::local("vu", 8);
        site.attributes = Some(SiteAttributes {
            architecture: "sparc".into(),
            cpu_mhz: 2800,
            software: vec!["ENV/MPI".into()],
            ..Default::default()
        });
        let a = attributes(&site, Path::new("/"));
        assert_eq!((a.architecture.as_str(), a.cpu_mhz), ("sparc", 2800));
        assert_eq!(a.software, ["ENV/MPI"]);
        assert_eq!((a.lrms_type.as_str(), a.queue_name.as_str()), ("local", "vu"));
        assert_eq!((a.nodes, a.cpus_per_node), (1, 8));
        assert_eq!(a.os_name, "Linux");
        assert!(a.memory_mb > 0 && a.disk_mb > 0, "{a:?}");
        let plain = attributes(&SiteConfig::local("uva", 2), Path::new("/"));
        assert_eq!(plain.architecture, std::env::consts::ARCH);
    }
}
