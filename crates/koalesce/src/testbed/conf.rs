//! The test bed's layout and the files it writes (pure functions): `testbed.json` (what was
//! set up), one slurm.conf per cluster, and `server.toml` for `koalesce server --config`.

use std::path::{Path, PathBuf};

use koalesce_server::slurm::SlurmSiteConfig;
use serde::{Deserialize, Serialize};

/// Cluster names, in order.
pub const CLUSTER_NAMES: [&str; 24] = [
    "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu", "nu", "xi", "omicron", "pi",
    "rho", "sigma", "tau", "upsilon", "phi", "chi", "psi", "omega",
];

/// Name of the state file in the bed's directory.
pub const STATE_FILE: &str = "testbed.json";
/// The server configuration the bed writes.
pub const SERVER_TOML: &str = "server.toml";
/// Unix sockets live under the bed's directory (munge's socket, slurmstepd's sockets in the
/// spool directories); their paths must stay below the kernel's 108 bytes.
pub const MAX_DIR_LEN: usize = 60;

/// One node (one slurmd) of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSpec {
    pub name: String,
    pub port: u16,
}

/// One cluster: its own slurmctld, slurmd's, ports, state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSpec {
    pub name: String,
    pub controller_port: u16,
    pub nodes: Vec<NodeSpec>,
}

/// What `koalesce testbed up` set up in a directory (`testbed.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BedSpec {
    pub version: u32,
    pub dir: PathBuf,
    /// `hostname -s` (the nodes' NodeHostname).
    pub host: String,
    pub nodes: u32,
    pub cpus: u32,
    pub partition: String,
    pub clusters: Vec<ClusterSpec>,
}

impl BedSpec {
    /// A bed of `clusters` × `nodes` × `cpus` with ports taken in order from `ports`
    /// (1 + nodes per cluster).
    pub fn new(dir: &Path, host: &str, clusters: u32, nodes: u32, cpus: u32, partition: &str, ports: &[u16]) -> anyhow::Result<BedSpec> {
        anyhow::ensure!(
            (1..=CLUSTER_NAMES.len() as u32).contains(&clusters),
            "--clusters must be within 1..={}",
            CLUSTER_NAMES.len()
        );
        anyhow::ensure!((1..=64).contains(&nodes), "--nodes must be within 1..=64");
        anyhow::ensure!((1..=4096).contains(&cpus), "--cpus must be within 1..=4096");
        anyhow::ensure!(ports.len() >= ports_needed(clusters, nodes) as usize, "not enough ports");
        // The check above leaves a port for every `it.next().unwrap()` below.
        let mut it = ports.iter().copied();
        let clusters = CLUSTER_NAMES[..clusters as usize]
            .iter()
            .map(|name| ClusterSpec {
                name: name.to_string(),
                controller_port: it.next().unwrap(),
                nodes: (1..=nodes)
                    .map(|i| NodeSpec {
                        name: format!("{name}{i}"),
                        port: it.next().unwrap(),
                    })
                    .collect(),
            })
            .collect();
        Ok(BedSpec {
            version: 1,
            dir: dir.to_path_buf(),
            host: host.to_string(),
            nodes,
            cpus,
            partition: partition.to_string(),
            clusters,
        })
    }

    pub fn cluster(&self, name: &str) -> Option<&ClusterSpec> {
        self.clusters.iter().find(|c| c.name == name)
    }

    pub fn cluster_dir(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub fn conf(&self, name: &str) -> PathBuf {
        self.cluster_dir(name).join("slurm.conf")
    }

    pub fn munge_dir(&self) -> PathBuf {
        self.dir.join("munge")
    }

    pub fn munge_socket(&self) -> PathBuf {
        self.munge_dir().join("run/munge.socket.2")
    }

    pub fn controller_pid_file(&self, name: &str) -> PathBuf {
        self.cluster_dir(name).join("run/slurmctld.pid")
    }

    pub fn node_pid_file(&self, cluster: &str, node: &str) -> PathBuf {
        self.cluster_dir(cluster).join(format!("run/slurmd-{node}.pid"))
    }

    /// Processors of one cluster.
    pub fn processors(&self) -> u32 {
        self.nodes * self.cpus
    }

    /// Every port the bed uses.
    pub fn ports(&self) -> Vec<u16> {
        self.clusters
            .iter()
            .flat_map(|c| std::iter::once(c.controller_port).chain(c.nodes.iter().map(|n| n.port)))
            .collect()
    }
}

/// Ports a bed of this shape needs.
pub fn ports_needed(clusters: u32, nodes: u32) -> u32 {
    clusters * (1 + nodes)
}

/// The slurm.conf of one cluster (see ../shared/notes/slurm-testbed.md for why each line).
/// `place`: the cluster's daemons run in a network namespace and listen on its addresses
/// (else on loopback).
pub fn slurm_conf(bed: &BedSpec, c: &ClusterSpec, place: Option<&super::network::Placement>) -> String {
    let (ctl_addr, node_addr) = match place {
        Some(p) => (p.controller_addr.to_string(), p.node_addr.to_string()),
        None => ("127.0.0.1".to_string(), "127.0.0.1".to_string()),
    };
    let d = bed.cluster_dir(&c.name);
    let d = d.display();
    let host = &bed.host;
    let mut s = format!(
        "# Written by `koalesce testbed up`; cluster {name} of the bed in {bed_dir}.\n\
         ClusterName={name}\n\
         SlurmctldHost={host}({ctl_addr})\n\
         SlurmctldPort={cport}\n\
         SlurmdPort={dport}\n\
         SlurmUser=root\n\
         SlurmdUser=root\n\
         AuthType=auth/munge\n\
         AuthInfo=socket={socket}\n\
         CredType=cred/munge\n\
         StateSaveLocation={d}/state\n\
         SlurmdSpoolDir={d}/spool/%n\n\
         SlurmctldPidFile={d}/run/slurmctld.pid\n\
         SlurmdPidFile={d}/run/slurmd-%n.pid\n\
         SlurmctldLogFile={d}/log/slurmctld.log\n\
         SlurmdLogFile={d}/log/slurmd-%n.log\n\
         PlugStackConfig={d}/plugstack.conf\n\
         ProctrackType=proctrack/linuxproc\n\
         # task/affinity would bind to cores that do not exist\n\
         TaskPlugin=task/none\n\
         # trust this file's CPUs, not the hardware's\n\
         SlurmdParameters=config_overrides\n\
         SelectType=select/cons_tres\n\
         SelectTypeParameters=CR_Core\n\
         SchedulerType=sched/backfill\n\
         SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,default_queue_depth=1000\n\
         ReturnToService=2\n\
         AccountingStorageType=accounting_storage/none\n\
         JobAcctGatherType=jobacct_gather/none\n\
         JobCompType=jobcomp/filetxt\n\
         JobCompLoc={d}/log/jobcomp.txt\n\
         MinJobAge=300\n\
         MpiDefault=none\n\
         SwitchType=switch/none\n\
         MailProg=/bin/true\n\
         KillWait=5\n\
         InactiveLimit=0\n\
         # an oversized job is refused at submission instead of pending forever\n\
         EnforcePartLimits=ALL\n",
        name = c.name,
        bed_dir = bed.dir.display(),
        cport = c.controller_port,
        dport = c.nodes.first().map(|n| n.port).unwrap_or(0),
        socket = bed.munge_socket().display(),
    );
    for n in &c.nodes {
        s.push_str(&format!(
            "NodeName={} NodeHostname={host} NodeAddr={node_addr} Port={} CPUs={cpus} Boards=1 SocketsPerBoard=1 CoresPerSocket={cpus} ThreadsPerCore=1 RealMemory=64000 State=UNKNOWN\n",
            n.name,
            n.port,
            cpus = bed.cpus
        ));
    }
    s.push_str(&format!(
        "PartitionName={} Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
        bed.partition
    ));
    s
}

#[derive(Serialize)]
struct TomlSite {
    name: String,
    kind: &'static str,
    processors: u32,
    slurm: SlurmSiteConfig,
    #[serde(skip_serializing_if = "Option::is_none")]
    agent: Option<koalesce_server::config::AgentSiteConfig>,
}

#[derive(Serialize)]
struct TomlServer {
    sites: Vec<TomlSite>,
}

/// `server.toml`: one Slurm site per cluster (with its storage agent, when the bed has a
/// network: `agents` by site name).
pub fn server_toml(bed: &BedSpec, agents: &[(String, koalesce_server::config::AgentSiteConfig)]) -> String {
    let doc = TomlServer {
        sites: bed
            .clusters
            .iter()
            .map(|c| TomlSite {
                name: c.name.clone(),
                kind: "slurm",
                processors: bed.processors(),
                slurm: SlurmSiteConfig::new(bed.conf(&c.name), bed.partition.clone()),
                agent: agents.iter().find(|(s, _)| *s == c.name).map(|(_, a)| a.clone()),
            })
            .collect(),
    };
    format!(
        "# Written by `koalesce testbed up`: one Slurm site per cluster of the bed in {}.\n\
         # Run: koalesce server --config {} --data-dir DIR\n\
         # Optional per site under [sites.slurm]: account, qos, sbatch_args = [...], command_timeout_ms.\n\n{}",
        bed.dir.display(),
        bed.dir.join(SERVER_TOML).display(),
        toml::to_string(&doc).expect("server.toml serializes")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bed() -> BedSpec {
        let ports: Vec<u16> = (20000..20009).collect();
        BedSpec::new(Path::new("/tmp/bed"), "vm", 3, 2, 32, "debug", &ports).unwrap()
    }

    #[test]
    fn names_ports_and_paths() {
        let b = bed();
        let names: Vec<&str> = b.clusters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["alpha", "beta", "gamma"]);
        assert_eq!(b.clusters[1].controller_port, 20003);
        assert_eq!(
            b.clusters[1].nodes[1],
            NodeSpec {
                name: "beta2".into(),
                port: 20005
            }
        );
        assert_eq!(b.ports().len(), 9);
        assert_eq!(ports_needed(3, 2), 9);
        assert_eq!(b.processors(), 64);
        assert_eq!(b.conf("beta"), Path::new("/tmp/bed/beta/slurm.conf"));
        assert!(BedSpec::new(Path::new("/b"), "h", 0, 2, 32, "debug", &[1; 9]).is_err());
        assert!(BedSpec::new(Path::new("/b"), "h", 25, 2, 32, "debug", &[1; 100]).is_err());
        assert!(BedSpec::new(Path::new("/b"), "h", 3, 2, 32, "debug", &[1; 8]).is_err());
    }

    #[test]
    fn slurm_conf_has_the_cluster_ports_and_nodes() {
        let b = bed();
        let c = slurm_conf(&b, &b.clusters[2], None);
        for want in [
            "ClusterName=gamma\n",
            "SlurmctldPort=20006\n",
            "SlurmctldHost=vm(127.0.0.1)\n",
            "AuthInfo=socket=/tmp/bed/munge/run/munge.socket.2\n",
            "StateSaveLocation=/tmp/bed/gamma/state\n",
            "NodeName=gamma1 NodeHostname=vm NodeAddr=127.0.0.1 Port=20007 CPUs=32 ",
            "NodeName=gamma2 NodeHostname=vm NodeAddr=127.0.0.1 Port=20008 CPUs=32 ",
            "PartitionName=debug Nodes=ALL",
            "EnforcePartLimits=ALL\n",
        ] {
            assert!(c.contains(want), "{want} missing:\n{c}");
        }
        assert_eq!(koalesce_server::slurm::cmd::conf_value(&c, "ClusterName").as_deref(), Some("gamma"));
        // In a namespace: the controller on its control link, the nodes on the bed's address.
        let place = super::super::network::Placement {
            netns: "kdpx-gamma".into(),
            controller_addr: "10.251.0.10".parse().unwrap(),
            node_addr: "10.250.0.3".parse().unwrap(),
        };
        let c = slurm_conf(&b, &b.clusters[2], Some(&place));
        assert!(c.contains("SlurmctldHost=vm(10.251.0.10)\n"), "{c}");
        assert!(c.contains("NodeName=gamma1 NodeHostname=vm NodeAddr=10.250.0.3 Port=20007 "), "{c}");
        assert!(!c.contains("127.0.0.1"), "{c}");
    }

    #[test]
    fn server_toml_lists_one_slurm_site_per_cluster() {
        let b = bed();
        let text = server_toml(&b, &[]);
        #[derive(Deserialize)]
        struct Site {
            name: String,
            kind: String,
            processors: u32,
            slurm: SlurmSiteConfig,
        }
        #[derive(Deserialize)]
        struct Doc {
            sites: Vec<Site>,
        }
        let doc: Doc = toml::from_str(&text).unwrap();
        assert_eq!(doc.sites.len(), 3);
        let beta = &doc.sites[1];
        assert_eq!((beta.name.as_str(), beta.kind.as_str(), beta.processors), ("beta", "slurm", 64));
        assert_eq!(beta.slurm.conf, Path::new("/tmp/bed/beta/slurm.conf"));
        assert_eq!(beta.slurm.partition, "debug");
        // The whole file is a configuration the server accepts ([sites.slurm] checks included).
        let cfg: koalesce_server::ServerConfig = toml::from_str(&text).unwrap();
        cfg.validate().unwrap();
        assert!(text.contains("[[sites]]") && text.contains("[sites.slurm]"), "{text}");
    }
}
