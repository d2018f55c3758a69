//! Helpers of the real-Slurm tests: a test bed of their own (own directory, free ports, torn
//! down on drop, also when a test fails), a Slurm backend over it, components, waiting.
//!
//! Slurm missing is a failure here, not a skip: `TestBed::up` names the apt-get command.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use koalesce::testbed::{BedGuard, TestBed, UpOptions};
use koalesce_server::backend::{Backend, ComponentSubmission, LrmState};
use koalesce_server::local::SupervisorCommand;
use koalesce_server::slurm::{SlurmBackend, SlurmJobRef, SlurmOptions};

pub const BIN: &str = env!("CARGO_BIN_EXE_koalesce");

/// A bed in a fresh temporary directory. Fields drop in order: the bed first (stopped and
/// deleted), then the rest of the directory.
pub struct Bed {
    pub bed: BedGuard,
    pub tmp: tempfile::TempDir,
    pub startup: Duration,
}

impl Bed {
    /// `clusters` × `nodes` × 32 CPUs; `tick_offset_ms` between controller starts.
    pub fn up(clusters: u32, nodes: u32, tick_offset_ms: u64) -> Bed {
        // Short path: Unix sockets live under it.
        let tmp = tempfile::Builder::new().prefix("ks").tempdir_in("/tmp").unwrap();
        let mut o = UpOptions::new(tmp.path().join("bed"));
        o.clusters = clusters;
        o.nodes = nodes;
        o.tick_offset_ms = tick_offset_ms;
        let t0 = Instant::now();
        let (bed, _) = TestBed::up(&o).unwrap_or_else(|e| panic!("the real-Slurm tests need Slurm: {e:#}"));
        let startup = t0.elapsed();
        eprintln!(
            "test bed: {clusters} clusters x {nodes} nodes up in {:.2} s (tick offset {tick_offset_ms} ms)",
            startup.as_secs_f64()
        );
        Bed {
            bed: BedGuard(bed),
            tmp,
            startup,
        }
    }

    pub fn supervisor() -> SupervisorCommand {
        SupervisorCommand {
            program: PathBuf::from(BIN),
            args: vec!["supervise".into()],
            launcher: None,
        }
    }

    /// A Slurm backend over every cluster of the bed (one site per cluster).
    pub fn backend(&self, scratch: &str) -> SlurmBackend {
        SlurmBackend::new(
            self.bed.site_specs(),
            &self.tmp.path().join(scratch),
            Self::supervisor(),
            SlurmOptions::default(),
        )
        .unwrap()
    }

    /// A fresh component directory.
    pub fn dir(&self, name: &str) -> PathBuf {
        let d = self.tmp.path().join("jobs").join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}

pub fn component(site: &str, processors: u32, claim: &str, dir: &Path, exe: &str, args: &[&str]) -> ComponentSubmission {
    ComponentSubmission {
        site: site.into(),
        user: "root".into(),
        processors,
        claim: claim.into(),
        dir: dir.to_path_buf(),
        executable: exe.into(),
        arguments: args.iter().map(|s| s.to_string()).collect(),
        environment: BTreeMap::from([("KOALESCE_TEST".to_string(), "it's \"quoted\" $HOME".to_string())]),
        time_limit_ms: 60_000,
        memory_limit: None,
        working_directory: None,
        nonce: NONCE.into(),
        early_signal: None,
    }
}

/// The launch nonce of the components these tests submit (a restarted backend adopts with it).
pub const NONCE: &str = "51a77000000000000000000000000001";

/// Polls `f` every 20 ms until it gives a value; panics naming `what` after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(t0.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn all_ready(b: &dyn Backend, ids: &[String]) -> bool {
    b.ready(ids).iter().all(|(_, r)| *r)
}

pub fn state(b: &dyn Backend, id: &str) -> LrmState {
    b.status(&[id.to_string()]).remove(0).1
}

/// Waits until the component is terminal; returns its state.
pub fn wait_terminal(b: &dyn Backend, id: &str, timeout: Duration) -> LrmState {
    wait_for(&format!("{id} to end"), timeout, || Some(state(b, id)).filter(|s| s.is_terminal()))
}

/// The component's directory.
pub fn dir_of(id: &str) -> PathBuf {
    SlurmJobRef::parse(id).expect("a Slurm job id").dir
}

/// Percentile (nearest rank) of sorted values.
pub fn pct(sorted: &[f64], p: f64) -> f64 {
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1]
}
