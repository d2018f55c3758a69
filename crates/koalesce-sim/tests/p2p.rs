//! The P2P grid simulator (seed 002) on small workloads: determinism, the orderings the model
//! must produce, and invariants of every run (no job lost or run twice, no server
//! over-allocated, a migrated job's input there before it runs, decisions equal to unbounded
//! ones), plus the local scheduler against the reference EASY simulator.

use std::collections::VecDeque;

use koalesce_core::federation::{Easy, Waiting};
use koalesce_core::Millis;
use koalesce_sim::experiments::{p2p as exp, p2p_checks, p2p_report};
use koalesce_sim::p2p::grid::{Sites, TABLE_I, TRACES};
use koalesce_sim::p2p::workload::{self, TraceJob, Traces, WorkloadOptions};
use koalesce_sim::p2p::{self, Algorithm, JobRecord, RunConfig};
use koalesce_sim::rng::Rng;
use koalesce_sim::single_cluster::{self, QueuePolicy, SimJob};
use proptest::prelude::*;

/// Trace-like jobs for each of the seven traces: bursts of arrivals (so queues form), sizes up
/// to a third of the machine, run times from a minute to ten hours, estimates above them.
fn synthetic_traces(seed: u64, jobs: usize) -> Traces {
    let lists = TRACES
        .iter()
        .enumerate()
        .map(|(t, spec)| {
            let mut rng = Rng::seed_from(seed, t as u64);
            let mut now = 0i64;
            (0..jobs)
                .map(|_| {
                    // Mostly short gaps, now and then a quiet hour.
                    now += if rng.bernoulli(0.1) { 3_600 } else { rng.range_u64(0, 120) as i64 };
                    let run_s = 60 + rng.exponential(3_000.0) as u64;
                    TraceJob {
                        submit_s: now,
                        run_s,
                        procs: 1 + rng.below(u64::from(spec.procs / 3).max(1)) as u32,
                        estimate_s: run_s * (1 + rng.below(4)),
                    }
                })
                .collect()
        })
        .collect();
    Traces::from_jobs(lists)
}

fn small(per_mille: u32) -> WorkloadOptions {
    WorkloadOptions {
        work_per_mille: per_mille,
        ..WorkloadOptions::default()
    }
}

fn config(algorithm: Algorithm, data_kb: f64, sites: Sites, data_aware: bool) -> RunConfig {
    RunConfig {
        algorithm,
        sites,
        data_kb,
        data_aware,
        ..RunConfig::default()
    }
}

#[test]
fn same_seed_same_bytes_whatever_the_threads() {
    let traces = synthetic_traces(1, 3_000);
    let wl = workload::build(&traces, 5, &small(15));
    let cfg = config(Algorithm::SenderInitiated, 1.0, Sites::Twelve, true);
    let a = p2p::run(&cfg, &wl, &mut |_| {});
    let b = p2p::run(&cfg, &wl, &mut |_| {});
    assert_eq!(a.records, b.records);
    assert_eq!(a.metrics, b.metrics);
    // The whole experiment on one and on two threads writes the same files.
    let opts = exp::Options {
        seeds: vec![1, 2],
        work_per_mille: 8,
        loads: vec![1000, 1400],
    };
    // Removed when dropped, also when an assertion fails.
    let tmp = tempfile::Builder::new()
        .prefix("koalesce-p2p-test-")
        .tempdir()
        .expect("a temporary directory");
    let dirs = (tmp.path().join("one"), tmp.path().join("two"));
    for (threads, dir) in [(1, &dirs.0), (2, &dirs.1)] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        let outcome = pool.install(|| exp::run(&traces, &opts, &|_, _| {}));
        p2p_report::write_report(&outcome, dir).unwrap();
        assert!(!p2p_checks::checks(&outcome).is_empty());
    }
    for name in ["p2p.md", "p2p.html", "runs.csv", "fig2-methods.svg", "fig6-more-jobs.svg"] {
        let x = std::fs::read(dirs.0.join(name)).unwrap();
        let y = std::fs::read(dirs.1.join(name)).unwrap();
        assert!(x == y, "{name} differs between 1 and 2 threads");
    }
}

#[test]
fn sender_initiated_beats_local_on_a_loaded_grid() {
    let traces = synthetic_traces(2, 4_000);
    let wl = workload::build(&traces, 3, &small(20));
    let local = p2p::run(&config(Algorithm::Local, 0.0, Sites::Twelve, true), &wl, &mut |_| {});
    let si = p2p::run(&config(Algorithm::SenderInitiated, 0.0, Sites::Twelve, true), &wl, &mut |_| {});
    assert!(
        local.metrics.awt_s > 600.0,
        "the grid is not loaded: local wait {} s",
        local.metrics.awt_s
    );
    assert!(
        si.metrics.art_s < 0.9 * local.metrics.art_s,
        "S-I {} s vs local {} s",
        si.metrics.art_s,
        local.metrics.art_s
    );
    assert!(si.metrics.awt_s < 0.5 * local.metrics.awt_s);
    assert!(si.metrics.fojm > 0.0 && local.metrics.fojm == 0.0);
    // Without data nothing moves over the network.
    assert_eq!(si.metrics.dmoh, 0.0);
    assert_eq!(si.metrics.blocked, 0.0);
}

#[test]
fn ignoring_huge_data_makes_turnaround_explode() {
    let traces = synthetic_traces(3, 3_000);
    let wl = workload::build(&traces, 4, &small(15));
    let aware = p2p::run(&config(Algorithm::SenderInitiated, 100.0, Sites::Twelve, true), &wl, &mut |_| {});
    let oblivious = p2p::run(&config(Algorithm::SenderInitiated, 100.0, Sites::Twelve, false), &wl, &mut |_| {});
    assert!(
        oblivious.metrics.art_s > 3.0 * aware.metrics.art_s,
        "ignoring data: {} s, considering it: {} s",
        oblivious.metrics.art_s,
        aware.metrics.art_s
    );
    assert!(oblivious.metrics.dmoh > 0.3 && oblivious.metrics.dmoh > 3.0 * aware.metrics.dmoh);
    assert!(oblivious.metrics.blocked_time > aware.metrics.blocked_time);
}

/// Invariants every run must keep, checked on its job records.
fn check_invariants(cfg: &RunConfig, wl: &workload::Workload, recs: &[JobRecord]) -> Result<(), TestCaseError> {
    prop_assert_eq!(recs.len(), wl.jobs.len(), "a job lost or counted twice");
    let mut busy: Vec<Vec<(u64, i64)>> = vec![Vec::new(); TABLE_I.len()];
    for (job, r) in wl.jobs.iter().zip(recs) {
        prop_assert_eq!(r.origin, job.origin);
        prop_assert!(
            r.submit <= r.queued && r.queued <= r.alloc && r.alloc <= r.start && r.start <= r.run_end && r.run_end <= r.end,
            "{r:?}"
        );
        let (home, exec) = (&TABLE_I[usize::from(job.origin)], &TABLE_I[usize::from(r.exec)]);
        // It ran exactly its run time scaled by the clocks, on whole nodes of its server.
        prop_assert_eq!(
            r.run_end - r.start,
            koalesce_core::federation::ert(job.run_ms, home.clock_mhz, exec.clock_mhz)
        );
        prop_assert_eq!(r.nodes, job.cpus.div_ceil(exec.cpus_per_node));
        if cfg.algorithm == Algorithm::Local {
            prop_assert!(!r.migrated());
        }
        if r.migrated() && r.input > 0 {
            let done = r.input_done.expect("a migrated job's input arrives");
            prop_assert!(r.queued <= done && done <= r.start, "ran before its input arrived: {r:?}");
            prop_assert_eq!(r.output_start, Some(r.run_end));
            prop_assert!(r.end >= r.run_end);
        } else {
            prop_assert_eq!(r.alloc, r.start, "a job with local data waited on nodes");
            prop_assert!(r.input_done.is_none());
        }
        prop_assert_eq!(r.input, job.input_bytes(cfg.data_kb));
        busy[usize::from(r.exec)].push((r.alloc, i64::from(r.nodes)));
        busy[usize::from(r.exec)].push((r.run_end, -i64::from(r.nodes)));
    }
    for (s, events) in busy.iter_mut().enumerate() {
        // Releases before allocations at the same instant.
        events.sort_unstable();
        let mut used = 0i64;
        for &(_, d) in events.iter() {
            used += d;
            prop_assert!(
                used <= i64::from(TABLE_I[s].nodes),
                "server S{} over-allocated: {used} nodes",
                s + 1
            );
            prop_assert!(used >= 0);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn runs_keep_their_invariants(
        seed in 0u64..1_000,
        alg in 0usize..5,
        data in 0usize..5,
        sites in 0usize..3,
        aware in proptest::bool::ANY,
        load in prop_oneof![Just(1000u32), Just(1400u32)],
    ) {
        let traces = synthetic_traces(seed, 1_500);
        let wl = workload::build(&traces, seed, &WorkloadOptions { load_per_mille: load, ..small(6) });
        let cfg = config(Algorithm::ALL[alg], exp::DATA_SETS[data], Sites::ALL[sites], aware);
        let out = p2p::run_checked(&cfg, &wl);
        check_invariants(&cfg, &wl, &out.records)?;
    }
}

/// The local scheduler (the core's FCFS + EASY over nodes) schedules a real trace exactly like
/// the reference single-cluster EASY simulator, job by job.
#[test]
fn local_scheduler_matches_reference_easy() {
    let mut rng = Rng::new(9);
    let jobs: Vec<SimJob> = (0..3_000u64)
        .map(|i| {
            let runtime = 1 + rng.exponential(2_000.0) as u64;
            SimJob {
                submit: i * 90 + rng.below(60),
                runtime,
                estimate: runtime * (1 + rng.below(5)),
                procs: 1 + rng.below(64),
            }
        })
        .collect();
    let reference = single_cluster::simulate_jobs(&jobs, 128, QueuePolicy::Easy);

    #[derive(Clone, Copy)]
    struct Q {
        key: u64,
        nodes: u32,
        est: Millis,
    }
    impl Waiting for Q {
        fn key(&self) -> u64 {
            self.key
        }
        fn nodes(&self) -> u32 {
            self.nodes
        }
        fn estimate_ms(&self) -> Millis {
            self.est
        }
    }
    let mut easy = Easy::new(128);
    let mut queue: VecDeque<Q> = VecDeque::new();
    let mut ends: std::collections::BTreeSet<(u64, u64)> = Default::default();
    let mut start = vec![0u64; jobs.len()];
    let mut next = 0;
    let mut started = Vec::new();
    while next < jobs.len() || !ends.is_empty() || !queue.is_empty() {
        let now = [jobs.get(next).map(|j| j.submit), ends.first().map(|e| e.0)]
            .into_iter()
            .flatten()
            .min()
            .unwrap();
        while let Some(&(t, k)) = ends.first() {
            if t != now {
                break;
            }
            ends.pop_first();
            let j = &jobs[k as usize];
            assert!(easy.release(k, start[k as usize] + j.estimate).is_some());
        }
        while next < jobs.len() && jobs[next].submit == now {
            queue.push_back(Q {
                key: next as u64,
                nodes: jobs[next].procs as u32,
                est: jobs[next].estimate,
            });
            next += 1;
        }
        started.clear();
        easy.schedule(now, &mut queue, &mut started);
        for q in &started {
            start[q.key as usize] = now;
            ends.insert((now + jobs[q.key as usize].runtime, q.key));
        }
    }
    for (o, s) in reference.jobs.iter().zip(&start) {
        assert_eq!(o.start, *s, "job {}", o.job_id);
    }
}
