//! The replica scrub: replicas no job is using are re-checked in the background, so a replica
//! that rotted on disk is found before a job needs it (issue 8, item 7). Every
//! `[files] scrub_interval_ms` the scrub takes the next replicas of the catalogue (in name
//! and site order, round and round) and checks them with [`transfer::scrub_replica`]: size and
//! modification time as when last found intact are the fast path (nothing read), a changed
//! replica, one not hashed since the server started, or one last hashed `scrub_rehash_days`
//! ago or more is hashed in full. At most `scrub_bytes` are hashed per round (a larger replica
//! alone), so the disk sees a bounded rate. A corrupt replica is quarantined and taken out of
//! the catalogue, as when a job finds it ([`super::transfers::quarantine_replica`]); counted
//! in `/metrics` (`koalesce_replica_checks_total`, `koalesce_replicas_quarantined_total`).
//! Replicas of files that a job not yet ended names as input are left to the check before
//! that job starts.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use koalesce_core::JobId;

use super::Shared;
use crate::transfer;

/// One replica to check: (file, site, path, sha256, size).
type Replica = (String, String, PathBuf, String, u64);

/// Most replicas looked at in one round (the fast path reads no data, but stats the file).
const MAX_PER_ROUND: usize = 1000;

/// Runs the scrub until shutdown (`[files] scrub_interval_ms = 0`: never).
pub async fn run(shared: Arc<Shared>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let cfg = shared.config.files.clone();
    if cfg.scrub_interval_ms == 0 {
        return;
    }
    let mut cursor: Option<(String, String)> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_millis(cfg.scrub_interval_ms)) => {}
            _ = shutdown.changed() => return,
        }
        let batch = next_batch(&shared, cursor.as_ref());
        if batch.is_empty() {
            cursor = None;
            continue;
        }
        let rehash_ms = cfg.scrub_rehash_days.saturating_mul(86_400_000);
        let budget = cfg.scrub_bytes;
        let checked = tokio::task::spawn_blocking(move || check(batch, budget, rehash_ms)).await;
        let Ok((done, corrupt)) = checked else { continue };
        shared.metrics.replica_checks.fetch_add(done.len() as u64, Ordering::Relaxed);
        cursor = done.last().map(|r| (r.0.clone(), r.1.clone()));
        if corrupt.is_empty() {
            continue;
        }
        let mut st = shared.lock();
        for ((name, site, path, ..), reason) in corrupt {
            // Still the catalogue's replica (not replaced or deleted meanwhile)?
            if st.files.get(&name).and_then(|f| f.replicas.get(&site)) != Some(&path) {
                continue;
            }
            tracing::warn!(file = %name, %site, %reason, "scrub: replica corrupt; quarantined");
            super::transfers::quarantine_replica(&shared, &mut st, &name, &site, &path);
            shared.metrics.replicas_quarantined.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The replicas after `cursor`, in (file, site) order, leaving out files that jobs not yet
/// ended use as input.
fn next_batch(shared: &Shared, cursor: Option<&(String, String)>) -> Vec<Replica> {
    let st = shared.lock();
    let in_use: BTreeSet<&str> = st
        .meta
        .iter()
        .filter(|(id, _)| st.core.job(JobId(**id)).is_some_and(|j| !j.state.is_terminal()))
        .flat_map(|(_, m)| m.desc.inputs.iter().map(|f| f.logical()))
        .collect();
    let from = cursor.map_or("", |c| c.0.as_str());
    let mut out = Vec::new();
    for (name, f) in st
        .files
        .range::<str, _>((std::ops::Bound::Included(from), std::ops::Bound::Unbounded))
    {
        if in_use.contains(name.as_str()) {
            continue;
        }
        for (site, path) in &f.replicas {
            if cursor.is_some_and(|(n, s)| (name, site) <= (n, s)) {
                continue;
            }
            out.push((name.clone(), site.clone(), path.clone(), f.sha256.clone(), f.size_bytes));
        }
        if out.len() >= MAX_PER_ROUND {
            break;
        }
    }
    out
}

/// Checks replicas in order until `budget` bytes were hashed: the replicas looked at, and the
/// corrupt ones with why.
fn check(batch: Vec<Replica>, budget: u64, rehash_ms: u64) -> (Vec<Replica>, Vec<(Replica, transfer::ReplicaError)>) {
    let (mut done, mut corrupt, mut hashed) = (Vec::new(), Vec::new(), 0u64);
    for r in batch {
        if hashed >= budget {
            break;
        }
        match transfer::scrub_replica(&r.2, &r.3, r.4, rehash_ms) {
            Ok(transfer::Intact::Unchanged) => {}
            Ok(transfer::Intact::Hashed(n)) => hashed += n,
            Err(reason) => corrupt.push((r.clone(), reason)),
        }
        done.push(r);
    }
    (done, corrupt)
}
