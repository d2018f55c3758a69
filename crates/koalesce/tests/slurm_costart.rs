//! The synchronized start across clusters on real Slurm: 3 components on 3 clusters (one
//! test bed each time, controllers started back to back and then out of phase) are released
//! together at the start barrier; each program records its own clock reading (`date +%s%N`)
//! and the spread is printed. Slurm allocates on each controller's own ~1 s tick, so the
//! check-ins spread over up to a second when the ticks are out of phase; the start does not,
//! because the barrier (one `go` file per component, renamed back to back) decides it.
//!
//! The target (p99 ≤ 50 ms) is measured by the benchmark; this test asserts that no program
//! starts before the release and that the spread stays far below Slurm's tick.

mod slurm_common;

use std::time::{Duration, Instant};

use koalesce_server::backend::{Backend, LrmState};
use koalesce_server::slurm::SlurmBackend;
use koalesce_server::supervise::{self, SupervisorRecord};
use slurm_common::*;

const ROUNDS: usize = 10;
const T: Duration = Duration::from_secs(30);

struct Round {
    /// Spread of the programs' own clock readings (ms).
    start_spread: f64,
    /// Spread of the supervisors' check-ins, i.e. of Slurm's allocations (ms).
    checkin_spread: f64,
    /// From submission to the last check-in (ms).
    submit_to_ready: f64,
}

fn round(bed: &Bed, b: &SlurmBackend, r: usize) -> Round {
    let sites = ["alpha", "beta", "gamma"];
    let mut ids = Vec::new();
    let mut claims = Vec::new();
    let t0 = Instant::now();
    for s in sites {
        let c = b.claim(s, 16).unwrap();
        ids.push(
            b.submit(&component(s, 16, &c, &bed.dir(&format!("r{r}-{s}")), "/bin/date", &["+%s%N"]))
                .unwrap(),
        );
        claims.push(c);
    }
    wait_for("every component to check in", T, || all_ready(b, &ids).then_some(()));
    let submit_to_ready = t0.elapsed().as_secs_f64() * 1000.0;
    let go_ms = koalesce_server::now_ms();
    b.start(&ids).unwrap();
    let mut clocks = Vec::new();
    let mut checkins = Vec::new();
    for id in &ids {
        assert_eq!(wait_terminal(b, id, T), LrmState::Completed);
        let dir = dir_of(id);
        let ns: u64 = std::fs::read_to_string(dir.join(supervise::STDOUT_FILE))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            ns / 1_000_000 >= go_ms,
            "{id} started before the release ({} < {go_ms})",
            ns / 1_000_000
        );
        clocks.push(ns as f64 / 1e6);
        let rec: SupervisorRecord = supervise::read_json(&dir.join(supervise::SUPERVISOR_FILE)).unwrap();
        checkins.push(rec.started_ms as f64);
    }
    for c in claims {
        b.release(&c);
    }
    let spread = |v: &[f64]| v.iter().cloned().fold(f64::MIN, f64::max) - v.iter().cloned().fold(f64::MAX, f64::min);
    Round {
        start_spread: spread(&clocks),
        checkin_spread: spread(&checkins),
        submit_to_ready,
    }
}

fn summary(label: &str, rounds: &[Round]) -> f64 {
    let sorted = |f: fn(&Round) -> f64| {
        let mut v: Vec<f64> = rounds.iter().map(f).collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v
    };
    let start = sorted(|r| r.start_spread);
    let checkin = sorted(|r| r.checkin_spread);
    let ready = sorted(|r| r.submit_to_ready);
    eprintln!(
        "co-start, {label}, {} rounds x 3 clusters: start spread p50 {:.1} / p99 {:.1} / max {:.1} ms; \
         check-in (allocation) spread p50 {:.0} / max {:.0} ms; submit to all checked in p50 {:.0} / max {:.0} ms",
        rounds.len(),
        pct(&start, 50.0),
        pct(&start, 99.0),
        start[start.len() - 1],
        pct(&checkin, 50.0),
        checkin[checkin.len() - 1],
        pct(&ready, 50.0),
        ready[ready.len() - 1],
    );
    start[start.len() - 1]
}

#[test]
fn three_clusters_start_together_in_and_out_of_phase() {
    for (label, offset) in [("controllers in phase", 0), ("controllers 333 ms out of phase", 333)] {
        let bed = Bed::up(3, 1, offset);
        let b = bed.backend("scratch");
        let rounds: Vec<Round> = (0..ROUNDS).map(|r| round(&bed, &b, r)).collect();
        let max = summary(label, &rounds);
        // Far below a scheduling tick (~1 s); the benchmark holds the 50 ms target.
        assert!(max < 500.0, "{label}: start spread {max:.1} ms");
    }
}
