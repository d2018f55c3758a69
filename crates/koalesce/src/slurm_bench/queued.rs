//! `koalesce bench slurm-overhead --queued N`: many jobs placed by koalesce over every cluster
//! at once, with the controllers' load from `sdiag` (RPCs by message type, koalesce's share of
//! them, server threads, agent queue, scheduler cycle).

use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::{json, Value};

use super::measure::bar;
use super::{Bed, Grid};

/// `sdiag` counters of one controller.
#[derive(Debug, Clone, Default)]
pub(super) struct Sdiag {
    rpcs: u64,
    threads: u64,
    agent_queue: u64,
    /// RPCs served, by message type.
    by_type: std::collections::BTreeMap<String, u64>,
    /// The main scheduler's longest cycle (µs).
    max_cycle_us: u64,
}

pub(super) fn sdiag(client: &koalesce_server::slurm::SlurmClient) -> Option<Sdiag> {
    let out = client.run_args("sdiag", &[]).ok()?.stdout;
    Some(parse_sdiag(&out))
}

/// Total RPCs by message type, server threads and agent queue from `sdiag`'s output.
pub(super) fn parse_sdiag(out: &str) -> Sdiag {
    let mut s = Sdiag::default();
    let mut in_types = false;
    for line in out.lines() {
        let l = line.trim();
        if let Some(v) = l.strip_prefix("Server thread count:") {
            s.threads = v.trim().parse().unwrap_or(0);
        } else if let Some(v) = l.strip_prefix("Agent queue size:") {
            s.agent_queue = v.trim().parse().unwrap_or(0);
        } else if l.starts_with("Remote Procedure Call statistics by message type") {
            in_types = true;
        } else if l.starts_with("Remote Procedure Call statistics by user") {
            in_types = false;
        } else if in_types {
            // "REQUEST_JOB_INFO ( 2003) count:10 ave_time:123 total_time:1230"
            if let Some(c) = l.split_whitespace().find_map(|w| w.strip_prefix("count:")) {
                let c = c.parse::<u64>().unwrap_or(0);
                s.rpcs += c;
                if let Some(name) = l.split_whitespace().next() {
                    *s.by_type.entry(name.to_string()).or_default() += c;
                }
            }
        } else if let Some(v) = l.strip_prefix("Max cycle:") {
            // The first one is the main scheduler's (the backfill section follows).
            if s.max_cycle_us == 0 {
                s.max_cycle_us = v.trim().parse().unwrap_or(0);
            }
        }
    }
    s
}
/// `n` jobs of one processor submitted at once, placed by koalesce over every cluster:
/// time until all ended, the most jobs koalesce had in Slurm at once (sampled), and the
/// controllers' load from `sdiag`: RPCs served during the run by message type, koalesce's
/// share of them (the run's RPCs minus this benchmark's own sampling: its `sdiag` and `squeue`
/// calls, whose cost per call is measured first) and its rate, the peak server threads, agent
/// queue and main scheduler cycle.
pub(super) fn queued(bed: &Bed, grid: &Grid, n: usize) -> anyhow::Result<Value> {
    use std::collections::BTreeMap;
    let clients: Vec<_> = bed
        .bed
        .clusters()
        .iter()
        .map(|c| bed.bed.client(c))
        .collect::<anyhow::Result<_>>()?;
    // What one sample (an squeue) costs a controller, by message type (sdiag's own requests
    // are left out below: koalesce never calls sdiag).
    let sample_cost: BTreeMap<String, u64> = {
        let c = &clients[0];
        let a = sdiag(c).unwrap_or_default();
        let _ = c.run_args("squeue", &["-h", "-o", "%i"]);
        let b = sdiag(c).unwrap_or_default();
        diff(&b.by_type, &a.by_type).into_iter().filter(|(k, _)| k != STATS_RPC).collect()
    };
    let before: Vec<Sdiag> = clients.iter().map(|c| sdiag(c).unwrap_or_default()).collect();
    let t0 = Instant::now();
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let job = format!(
            "name = \"q-{i}\"\nexecutable = \"/bin/true\"\nruntime_estimate = \"1m\"\npriority = \"low\"\n\n[[components]]\nprocessors = 1\n"
        );
        ids.push(grid.client.submit(&job)?);
    }
    let submitted = t0.elapsed();
    let pb = bar(n as u64, "queued jobs");
    let (mut peak_threads, mut peak_agent, mut peak_in_slurm, mut peak_cycle) = (0u64, 0u64, 0usize, 0u64);
    let mut samples = 0u64;
    let ended = loop {
        let list = grid.client.jobs_json(None, true)?;
        let arr = list.as_array().cloned().unwrap_or_default();
        let ended = arr
            .iter()
            .filter(|j| ids.contains(&j["id"].as_u64().unwrap_or(0)))
            .filter(|j| matches!(j["state"].as_str(), Some("succeeded" | "failed" | "cancelled")))
            .count();
        pb.set_position(ended as u64);
        for c in &clients {
            if let Some(s) = sdiag(c) {
                peak_threads = peak_threads.max(s.threads);
                peak_agent = peak_agent.max(s.agent_queue);
                peak_cycle = peak_cycle.max(s.max_cycle_us);
            }
            if let Ok(o) = c.run_args("squeue", &["-h", "-o", "%i"]) {
                peak_in_slurm = peak_in_slurm.max(o.stdout.lines().count());
            }
        }
        samples += 1;
        if ended == n {
            break ended;
        }
        if t0.elapsed() > Duration::from_secs(1800) {
            bail!("{ended}/{n} queued jobs ended after 30 minutes");
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    pb.finish_and_clear();
    let elapsed = t0.elapsed();
    let after: Vec<Sdiag> = clients.iter().map(|c| sdiag(c).unwrap_or_default()).collect();
    let rpcs: u64 = after.iter().zip(&before).map(|(a, b)| a.rpcs.saturating_sub(b.rpcs)).sum();
    let mut by_type: BTreeMap<String, u64> = BTreeMap::new();
    let mut per_cluster = serde_json::Map::new();
    let mut koalesce_total = 0u64;
    let mut koalesce_by_type: BTreeMap<String, u64> = BTreeMap::new();
    for ((a, b), name) in after.iter().zip(&before).zip(bed.bed.clusters()) {
        let d = diff(&a.by_type, &b.by_type);
        let k = koalesce_rpcs(&d, samples, &sample_cost);
        let kn: u64 = k.values().sum();
        koalesce_total += kn;
        per_cluster.insert(
            name,
            json!({"rpcs": d.values().sum::<u64>(), "koalesce_rpcs": kn, "koalesce_rpcs_per_s": rate(kn, elapsed)}),
        );
        for (t, c) in d {
            *by_type.entry(t).or_default() += c;
        }
        for (t, c) in k {
            *koalesce_by_type.entry(t).or_default() += c;
        }
    }
    let mut succeeded = 0;
    for id in &ids {
        if grid.client.job_json(*id)?["state"] == "succeeded" {
            succeeded += 1;
        }
    }
    Ok(json!({
        "jobs": n,
        "ended": ended,
        "succeeded": succeeded,
        "submit_s": (submitted.as_secs_f64() * 100.0).round() / 100.0,
        "all_ended_s": (elapsed.as_secs_f64() * 10.0).round() / 10.0,
        "jobs_per_s": ((n as f64 / elapsed.as_secs_f64()) * 10.0).round() / 10.0,
        "controller_rpcs": rpcs,
        "controller_rpcs_per_s": rate(rpcs, elapsed),
        "controller_rpcs_by_type": by_type,
        "koalesce_rpcs": koalesce_total,
        "koalesce_rpcs_per_s": rate(koalesce_total, elapsed),
        "koalesce_rpcs_by_type": koalesce_by_type,
        "node_daemon_rpcs": by_type.iter().filter(|(t, _)| node_rpc(t)).map(|(_, c)| c).sum::<u64>(),
        "per_cluster": per_cluster,
        "sampler": {"samples": samples, "rpcs_per_squeue": sample_cost},
        "peak_jobs_in_slurm": peak_in_slurm,
        "peak_server_threads": peak_threads,
        "peak_agent_queue": peak_agent,
        "peak_main_sched_cycle_us": peak_cycle,
    }))
}

/// sdiag's own message type (only this benchmark asks for it).
pub(super) const STATS_RPC: &str = "REQUEST_STATS_INFO";

pub(super) fn rate(n: u64, d: Duration) -> f64 {
    ((n as f64 / d.as_secs_f64().max(1e-9)) * 10.0).round() / 10.0
}

/// Counts of `a` minus those of `b`, by key (missing: 0), without the zeros.
pub(super) fn diff(
    a: &std::collections::BTreeMap<String, u64>,
    b: &std::collections::BTreeMap<String, u64>,
) -> std::collections::BTreeMap<String, u64> {
    a.iter()
        .map(|(k, v)| (k.clone(), v.saturating_sub(b.get(k).copied().unwrap_or(0))))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// Whether message type `t` comes from the clusters' node daemons (slurmd, slurmstepd: a batch
/// script's or a step's end, epilogs, registrations), not from a client command.
pub(super) fn node_rpc(t: &str) -> bool {
    t.starts_with("MESSAGE_")
        || t.starts_with("REQUEST_COMPLETE_")
        || t.starts_with("REQUEST_STEP_COMPLETE")
        || t.starts_with("REQUEST_NODE_REGISTRATION")
        || t.starts_with("RESPONSE_")
}

/// koalesce's RPCs among `run` (by message type): its Slurm commands' requests, without the
/// node daemons' messages, sdiag's and `samples` × `per_sample` (the benchmark's own squeue
/// calls).
pub(super) fn koalesce_rpcs(
    run: &std::collections::BTreeMap<String, u64>,
    samples: u64,
    per_sample: &std::collections::BTreeMap<String, u64>,
) -> std::collections::BTreeMap<String, u64> {
    run.iter()
        .filter(|(k, _)| k.as_str() != STATS_RPC && !node_rpc(k))
        .map(|(k, v)| (k.clone(), v.saturating_sub(samples * per_sample.get(k).copied().unwrap_or(0))))
        .filter(|(_, v)| *v > 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdiag_counters() {
        let out = "*******************************************************\n\
                   Server thread count:  3\n\
                   Agent queue size:     1\n\
                   Remote Procedure Call statistics by message type\n\
                   \tREQUEST_JOB_INFO                        ( 2003) count:10     ave_time:123    total_time:1230\n\
                   \tREQUEST_SUBMIT_BATCH_JOB                ( 4003) count:5      ave_time:400    total_time:2000\n\
                   \n\
                   Remote Procedure Call statistics by user\n\
                   \troot            (       0) count:15     ave_time:200    total_time:3230\n";
        let s = parse_sdiag(out);
        assert_eq!((s.rpcs, s.threads, s.agent_queue), (15, 3, 1));
        assert_eq!(s.by_type.get("REQUEST_JOB_INFO"), Some(&10));
        assert_eq!(s.by_type.get("REQUEST_SUBMIT_BATCH_JOB"), Some(&5));
        assert_eq!(s.by_type.len(), 2, "users are not message types: {:?}", s.by_type);
        let koalesce = koalesce_rpcs(&s.by_type, 4, &[("REQUEST_JOB_INFO".into(), 1)].into_iter().collect());
        assert_eq!(
            koalesce.get("REQUEST_JOB_INFO"),
            Some(&6),
            "the sampler's squeue calls are not koalesce's"
        );
        assert_eq!(koalesce.get("REQUEST_SUBMIT_BATCH_JOB"), Some(&5));
        let node: std::collections::BTreeMap<String, u64> = [
            ("REQUEST_COMPLETE_BATCH_SCRIPT".to_string(), 7),
            ("MESSAGE_EPILOG_COMPLETE".to_string(), 2),
        ]
        .into_iter()
        .collect();
        assert!(
            koalesce_rpcs(&node, 0, &Default::default()).is_empty(),
            "slurmd's messages are not koalesce's"
        );
    }
}
