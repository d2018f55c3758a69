//! Peer-to-peer grid scheduling with job and data migration: the simulated study of seed 002
//! (Shan, Oliker, Smith, Biswas).
//!
//! Twelve compute servers (002 Table I) grouped into 3, 6 or 12 sites; per server a local
//! scheduler (FCFS with EASY backfilling, LQ) and a grid scheduler (GQ); 800 Mb/s LANs and
//! 40 Mb/s point-to-point WAN links shared max-min fairly, a transfer crossing the sender's LAN,
//! the WAN link and the receiver's LAN; workloads from real traces carrying Table II's work
//! (see [`workload`]); the grid schedulers' decisions come from the core's
//! [`koalesce_core::federation`] module, the same code the live federation runs.
//!
//! - [`grid`]: Table I, Table II, sites, networks, the trace standing in for each server.
//! - [`workload`]: trace windows, scaling, data sizes, duplicated jobs.
//! - [`sim`]: the event loop.
//! - [`net`]: the max-min fair network, computed per path.
//! - [`metrics`]: ART, AWT, UTIL, FOJM, FDVM, DMOH (002 §IV-C), blocked jobs.
//! - [`bench`](mod@bench): `koalesce bench p2p`.

pub mod bench;
pub mod grid;
pub mod metrics;
pub mod net;
pub mod sim;
pub mod workload;

use std::fmt;
use std::str::FromStr;

use koalesce_core::federation::Params;

pub use grid::Sites;
pub use metrics::Metrics;
pub use sim::Counters;
pub use workload::{Traces, Workload, WorkloadOptions};

/// The five scheduling methods of 002 §III.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// No grid schedulers: every job runs where it was submitted.
    Local,
    /// One grid scheduler with perfect information places every job.
    Centralized,
    /// S-I: a job whose local AWT reaches φ asks every peer for ATT and RU.
    SenderInitiated,
    /// R-I: servers with RU < δ volunteer every σ; jobs wait in the grid queue.
    ReceiverInitiated,
    /// SY-I: R-I, and S-I when nobody volunteers.
    Symmetric,
}

impl Algorithm {
    pub const ALL: [Algorithm; 5] = [
        Algorithm::Local,
        Algorithm::Centralized,
        Algorithm::SenderInitiated,
        Algorithm::ReceiverInitiated,
        Algorithm::Symmetric,
    ];

    /// The seed's abbreviation.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Local => "Local",
            Algorithm::Centralized => "Central",
            Algorithm::SenderInitiated => "S-I",
            Algorithm::ReceiverInitiated => "R-I",
            Algorithm::Symmetric => "SY-I",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "local" => Ok(Algorithm::Local),
            "central" | "centralized" => Ok(Algorithm::Centralized),
            "s-i" | "si" | "sender" => Ok(Algorithm::SenderInitiated),
            "r-i" | "ri" | "receiver" => Ok(Algorithm::ReceiverInitiated),
            "sy-i" | "syi" | "symmetric" => Ok(Algorithm::Symmetric),
            other => Err(format!("unknown algorithm '{other}' (expected local, central, s-i, r-i or sy-i)")),
        }
    }
}

/// Everything that defines one run besides the workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunConfig {
    pub algorithm: Algorithm,
    pub sites: Sites,
    /// B: KB (1000 bytes) of input per CPU-second (the seed's sets 0B … 100B: 0 … 100).
    pub data_kb: f64,
    /// Whether ATT counts the data transfers (false: the communication-oblivious S-I of §V-D;
    /// the data still move).
    pub data_aware: bool,
    pub params: Params,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            algorithm: Algorithm::SenderInitiated,
            sites: Sites::Twelve,
            data_kb: 1.0,
            data_aware: true,
            params: Params::default(),
        }
    }
}

/// What happened to one job (times in ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobRecord {
    /// Server it was submitted to, and the one it ran on.
    pub origin: u8,
    pub exec: u8,
    /// Nodes held on `exec`, and their CPUs.
    pub nodes: u32,
    pub cpus: u32,
    /// QT: queued to the grid.
    pub submit: u64,
    /// Entered the local queue of `exec`.
    pub queued: u64,
    /// Got its nodes.
    pub alloc: u64,
    /// ST: started executing (its input had arrived).
    pub start: u64,
    pub run_end: u64,
    /// ET: ended, its output back at the origin.
    pub end: u64,
    pub input: u64,
    pub output: u64,
    /// When a migrated job's input arrived (None without transfer).
    pub input_done: Option<u64>,
    /// When a migrated job's output left (None without transfer).
    pub output_start: Option<u64>,
}

impl JobRecord {
    pub fn migrated(&self) -> bool {
        self.origin != self.exec
    }
}

/// The result of one run.
#[derive(Debug, Clone)]
pub struct RunOutput {
    pub records: Vec<JobRecord>,
    pub metrics: Metrics,
    pub counters: Counters,
}

/// Runs `workload` under `cfg`; `progress(arrived)` is called now and then.
pub fn run(cfg: &RunConfig, workload: &Workload, progress: &mut dyn FnMut(usize)) -> RunOutput {
    finish(sim::Sim::new(cfg, &workload.jobs).run(progress))
}

/// Like [`run`], checking every sender-initiated decision against one computed from all offers
/// in full, without the bounds that make runs fast (panics on a difference; slow: for tests).
pub fn run_checked(cfg: &RunConfig, workload: &Workload) -> RunOutput {
    finish(sim::Sim::new(cfg, &workload.jobs).verify_decisions(true).run(&mut |_| {}))
}

fn finish((records, counters): (Vec<JobRecord>, Counters)) -> RunOutput {
    let metrics = Metrics::of(&records);
    RunOutput {
        records,
        metrics,
        counters,
    }
}
