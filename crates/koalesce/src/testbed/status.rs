//! `koalesce testbed status`: which daemons of a bed run (munged, each cluster's slurmctld and
//! slurmd's, the network's agents) and the CPUs each running controller reports.

use std::path::PathBuf;

use koalesce_server::slurm::parse::{self, PartitionInfo};
use serde::Serialize;

use super::{network, ClusterSpec, TestBed};

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
