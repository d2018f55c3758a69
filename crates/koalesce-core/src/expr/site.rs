//! A koalesce site as GridWay's host variables: the bridge the placement scan uses to build one
//! [`SiteSnapshot`] per site from the core's model (site attributes, idle processors, replica
//! catalogue).

use super::{Compiled, IntVar, SiteSnapshot, StrVar};
use crate::model::{ReplicaCatalogue, Site, SiteId};

impl SiteSnapshot {
    /// The site's published attributes as host variables, with `idle` processors free for grid
    /// jobs. Attributes a site does not publish read as "" or 0. A site is one GridWay host
    /// with one queue: its processors are the queue's nodes.
    pub fn for_site(site: &Site, idle: u32) -> SiteSnapshot {
        let a = &site.attributes;
        let mut s = SiteSnapshot::default();
        s.set_str(StrVar::Hostname, site.name.clone());
        s.set_str(StrVar::Arch, a.architecture.clone());
        s.set_str(StrVar::OsName, a.os_name.clone());
        s.set_str(StrVar::OsVersion, a.os_version.clone());
        s.set_str(StrVar::CpuModel, a.cpu_model.clone());
        s.set_str(StrVar::LrmsName, a.lrms_type.clone());
        s.set_str(StrVar::LrmsType, a.lrms_type.clone());
        s.set_str(StrVar::QueueName, a.queue_name.clone());
        s.set_str(StrVar::QueueDispatchType, "batch");
        s.set_str(StrVar::QueueStatus, "active");
        s.set_int(IntVar::CpuMhz, a.cpu_mhz as i64);
        s.set_int(IntVar::CpuSmp, a.cpus_per_node as i64);
        s.set_int(IntVar::NodeCount, if a.nodes > 0 { a.nodes } else { site.processors } as i64);
        let mem = a.memory_mb.min(i64::MAX as u64) as i64;
        let disk = a.disk_mb.min(i64::MAX as u64) as i64;
        s.set_int(IntVar::SizeMemMb, mem);
        s.set_int(IntVar::FreeMemMb, mem);
        s.set_int(IntVar::SizeDiskMb, disk);
        s.set_int(IntVar::FreeDiskMb, disk);
        s.set_int(IntVar::QueueNodeCount, site.processors as i64);
        s.set_int(IntVar::QueueMaxCount, site.processors as i64);
        s.set_int(IntVar::QueueMaxTime, a.queue_max_walltime_ms.map_or(0, |ms| (ms / 60_000) as i64));
        s.set_idle(site.processors, idle);
        s
    }

    /// Updates the load-dependent variables (QUEUE_FREENODECOUNT, CPU_FREE) as processors are
    /// taken or freed during a scan.
    pub fn set_idle(&mut self, processors: u32, idle: u32) {
        self.set_int(IntVar::QueueFreeNodeCount, idle as i64);
        self.set_int(
            IntVar::CpuFree,
            if processors == 0 {
                0
            } else {
                idle as i64 * 100 / processors as i64
            },
        );
    }

    /// Resolves the data functions of `expr` for site `site`: for each of `expr.files()`, the
    /// size of the site's replica, if it holds one. Call once per (job expression, site), not
    /// per evaluation.
    pub fn bind_files(&mut self, expr: &Compiled, catalogue: &ReplicaCatalogue, site: SiteId) {
        self.close_files.clear();
        self.close_files.extend(
            expr.files()
                .iter()
                .map(|f| catalogue.get(f).filter(|e| e.replicas.contains(&site)).map(|e| e.size_bytes)),
        );
    }
}

/// The environment 004 §3.2 gives a job placed at `site`: `GW_CLOSE_SE` (the storage elements
/// close to it: koalesce's site storage, named after the site) and `GW_REMOTE_FILES_0`,
/// `GW_REMOTE_FILES_1`, … — the files its expressions asked about with HAS_CLOSE_DATA or
/// SIZE_CLOSE_DATA that the site does not hold (files of CLOSE_DATA are there by definition).
pub fn gridway_data_environment(exprs: &[&Compiled], catalogue: &ReplicaCatalogue, site: SiteId, site_name: &str) -> Vec<(String, String)> {
    let mut env = vec![("GW_CLOSE_SE".to_string(), site_name.to_string())];
    let mut remote: Vec<&str> = Vec::new();
    for e in exprs {
        for f in e.requested_files() {
            let here = catalogue.get(f).is_some_and(|x| x.replicas.contains(&site));
            if !here && !remote.contains(&f) {
                remote.push(f);
            }
        }
    }
    for (i, f) in remote.into_iter().enumerate() {
        env.push((format!("GW_REMOTE_FILES_{i}"), f.to_string()));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::Expr;
    use crate::model::SiteAttributes;

    #[test]
    fn a_site_as_host_variables() {
        let site = Site {
            name: "leiden".into(),
            processors: 56,
            speed: 1.0,
            supports_reservations: false,
            attributes: SiteAttributes {
                architecture: "x86_64".into(),
                os_name: "Linux".into(),
                cpu_mhz: 2800,
                lrms_type: "slurm".into(),
                ..Default::default()
            },
        };
        let mut cat = ReplicaCatalogue::new();
        cat.insert("myfile", 405_000_000, [SiteId(1)]);
        let rank = Expr::compile("CPU_MHZ + QUEUE_FREENODECOUNT + SIZE_CLOSE_DATA(\"myfile\") / 135").unwrap();
        let req = Expr::compile("HOSTNAME = \"lei*\" & LRMS_TYPE = \"slurm\" & CPU_FREE >= 50 & NODECOUNT = 56").unwrap();
        let mut s = SiteSnapshot::for_site(&site, 28);
        s.bind_files(&rank, &cat, SiteId(1));
        assert_eq!(rank.rank(&s), 2800 + 28 + 3000);
        assert!(req.matches(&s));
        s.set_idle(56, 10);
        assert!(!req.matches(&s), "CPU_FREE 17%");
        s.bind_files(&rank, &cat, SiteId(0));
        assert_eq!(rank.rank(&s), 2810);
    }

    #[test]
    fn remote_files_are_the_requested_ones_not_held_here() {
        let mut cat = ReplicaCatalogue::new();
        cat.insert("a", 1, [SiteId(0)]);
        cat.insert("b", 1, [SiteId(1)]);
        let req = Expr::compile("CLOSE_DATA(\"c\")").unwrap();
        let rank = Expr::compile("HAS_CLOSE_DATA(\"a\") + SIZE_CLOSE_DATA(\"b\") + HAS_CLOSE_DATA(\"missing\")").unwrap();
        let env = gridway_data_environment(&[&req, &rank], &cat, SiteId(0), "vu");
        let want: Vec<(String, String)> = [("GW_CLOSE_SE", "vu"), ("GW_REMOTE_FILES_0", "b"), ("GW_REMOTE_FILES_1", "missing")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(env, want);
    }
}
