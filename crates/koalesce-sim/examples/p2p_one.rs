//! One P2P run, for profiling and for checking that a change keeps the results:
//! `cargo run --release -p koalesce-sim --example p2p_one -- ALG DATA_KB SITES AWARE SEED PER_MILLE [LOAD]`
//! e.g. `... -- s-i 10 3 false 1 300`. Prints the run's counters, its wall-clock time and a hash
//! of every job record (the same hash before and after a change: the same results), then its
//! metrics.

use std::hash::{Hash, Hasher};
use std::path::Path;
use std::time::Instant;

use koalesce_sim::p2p::{self, workload, RunConfig, Traces, WorkloadOptions};

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() < 6 {
        eprintln!("usage: p2p_one ALG DATA_KB SITES AWARE SEED PER_MILLE [LOAD] [TRACES]");
        std::process::exit(2);
    }
    let cfg = RunConfig {
        algorithm: a[0].parse().expect("algorithm"),
        data_kb: a[1].parse().expect("data KB"),
        sites: a[2].parse().expect("sites"),
        data_aware: a[3].parse().expect("aware: true or false"),
        ..RunConfig::default()
    };
    let seed: u64 = a[4].parse().expect("seed");
    let opts = WorkloadOptions {
        work_per_mille: a[5].parse().expect("per mille"),
        load_per_mille: a.get(6).map_or(1000, |l| l.parse().expect("load")),
        exact_estimates: false,
    };
    let dir = a.get(7).map_or("/work/shared/traces", String::as_str);
    let traces = Traces::load(Path::new(dir)).expect("traces");
    let wl = workload::build(&traces, seed, &opts);
    let t = Instant::now();
    let cpu0 = cpu_s();
    let out = p2p::run(&cfg, &wl, &mut |_| {});
    let cpu = cpu_s() - cpu0;
    let took = t.elapsed();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for r in &out.records {
        (r.origin, r.exec, r.nodes, r.cpus, r.submit, r.queued, r.alloc).hash(&mut h);
        (r.start, r.run_end, r.end, r.input, r.output, r.input_done, r.output_start).hash(&mut h);
    }
    println!(
        "{} jobs in {:.2} s ({:.2} s on the CPU); {:?}; records hash {:016x}",
        out.records.len(),
        took.as_secs_f64(),
        cpu,
        out.counters,
        h.finish()
    );
    println!("{:?}", out.metrics);
}

/// Seconds this thread has spent on a CPU (Linux: /proc/thread-self/schedstat), so that timings
/// on a loaded machine count the run's own work.
fn cpu_s() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|ns| ns.parse::<f64>().ok()))
        .map_or(f64::NAN, |ns| ns / 1e9)
}
