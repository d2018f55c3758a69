//! Stage-in (the core's `StartTransfer`) and stage-out (declared outputs of a job that
//! succeeded): verified copies on the blocking pool, replicas registered in the catalogue.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use koalesce_core::{JobId, SiteId, TransferKey};

use super::{actions, process_actions, records, FileInfo, Shared, State};
use crate::store;
use crate::{now_ms, transfer};

/// Adds a replica to the in-memory catalogue and the core's (`owner`: of a new file).
pub fn add_replica_mem(st: &mut State, name: &str, size: u64, sha: &str, site: &str, path: PathBuf, owner: Option<&str>) {
    let sid = st.site_id(site);
    let entry = st.files.entry(name.to_string()).or_insert_with(|| FileInfo {
        size_bytes: size,
        sha256: sha.to_string(),
        replicas: Default::default(),
        owner: owner.map(str::to_string),
    });
    entry.replicas.insert(site.to_string(), path);
    let new = st.core.catalogue().get(name).is_none();
    if let Some(sid) = sid {
        if new {
            st.core.catalogue_mut().insert(name, size, [sid]);
        } else {
            st.core.catalogue_mut().add_replica(name, sid);
        }
    }
}

pub fn start_transfer(shared: &Arc<Shared>, st: &mut State, job: u64, key: TransferKey, from: SiteId) {
    let from_name = shared.site(from).name.clone();
    let to = shared.site(key.to);
    let to_name = to.name.clone();
    let info = st.files.get(&key.file).cloned();
    let Some(info) = info else {
        st.core.transfer_failed(now_ms(), JobId(job), &key);
        return;
    };
    if info.replicas.contains_key(&to_name) {
        st.core.transfer_finished(now_ms(), JobId(job), &key);
        return;
    }
    let Some(src) = info.replicas.get(&from_name).cloned() else {
        st.core.transfer_failed(now_ms(), JobId(job), &key);
        return;
    };
    let dest = transfer::storage_path(&to.paths.storage, &key.file);
    let shared = shared.clone();
    tokio::spawn(async move {
        let (sha, size) = (info.sha256.clone(), info.size_bytes);
        let (d, s) = (dest.clone(), src.clone());
        let result = tokio::task::spawn_blocking(move || transfer::copy_verified(&s, &d, Some((&sha, size)))).await;
        let mut guard = shared.lock();
        let st = &mut *guard;
        let now = now_ms();
        match result {
            Ok(Ok(copied)) => {
                shared.metrics.transfer_bytes.fetch_add(copied.bytes, Ordering::Relaxed);
                shared.metrics.transfers.fetch_add(1, Ordering::Relaxed);
                transfer::note_verified(&dest);
                add_replica_mem(st, &key.file, copied.bytes, &copied.sha256, &to_name, dest.clone(), None);
                shared.store.enqueue(store::register_replica_op(store::NewReplica {
                    name: key.file.clone(),
                    size: copied.bytes,
                    sha256: copied.sha256.clone(),
                    owner: None,
                    site: to_name.clone(),
                    path: dest.display().to_string(),
                }));
                // Measured bandwidth feeds the forecast (bits/s; local copies are fast, keep sane).
                let ms = copied.millis.max(1) as f64;
                let bps = (copied.bytes as f64 * 8.0 * 1000.0 / ms).max(1e6);
                st.core.update_forecast(from, key.to, bps, 1);
                st.core.transfer_finished(now, JobId(job), &key);
            }
            Ok(Err(e)) if e.is_source_fault() => {
                // The source replica is bad (its content no longer matches the catalogue, or
                // it cannot be read): it is quarantined, the destination is not blamed, and
                // the job goes back to the queue to be placed with the replicas that are left.
                shared.metrics.transfer_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(job, file = %key.file, from = %from_name, error = %e, "source replica is corrupt; quarantined");
                quarantine_replica(&shared, st, &key.file, &from_name, &src);
                if let Some(m) = st.meta.get_mut(&job) {
                    m.failure = Some(format!(
                        "stage-in of '{}': the replica at {from_name} is corrupt and was quarantined ({e})",
                        key.file
                    ));
                }
                st.core.transfer_source_failed(now, JobId(job), &key);
            }
            Ok(Err(e)) => {
                shared.metrics.transfer_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(job, file = %key.file, from = %from_name, to = %to_name, error = %e, "stage-in failed");
                if let Some(m) = st.meta.get_mut(&job) {
                    m.failure = Some(format!("stage-in of '{}' to {to_name} failed: {e}", key.file));
                }
                st.core.transfer_failed(now, JobId(job), &key);
            }
            Err(e) => {
                tracing::error!(error = %e, "transfer task panicked");
                st.core.transfer_failed(now, JobId(job), &key);
            }
        }
        process_actions(&shared, st);
    });
}

/// Takes a corrupt replica out of use: out of both catalogues and the database, its file
/// renamed to `<file>.quarantined` (kept for an administrator to look at, never used).
pub fn quarantine_replica(shared: &Shared, st: &mut State, name: &str, site: &str, path: &std::path::Path) {
    transfer::quarantine(path);
    if let Some(f) = st.files.get_mut(name) {
        f.replicas.remove(site);
    }
    if let (Some(sid), Some(mut e)) = (st.site_id(site), st.core.catalogue_mut().remove(name)) {
        e.replicas.remove(&sid);
        st.core.catalogue_mut().insert(name, e.size_bytes, e.replicas);
    }
    shared.store.enqueue(store::delete_replica_op(name.to_string(), site.to_string()));
}

/// After success: copy each declared output from the first component (rank order) that wrote
/// it (in its `work/` directory, never through a link) into that site's storage and register
/// it as `<job-id>/<name>` (or its `to` name); outputs that are links or not regular files are
/// refused, named in the job's `failure`. Then the job's final row (with its outputs) is
/// written and the job forgotten.
pub fn stage_out(shared: &Arc<Shared>, st: &State, id: u64) {
    let (Some(job), Some(meta)) = (st.core.job(JobId(id)), st.meta.get(&id)) else {
        return;
    };
    // (site name, record directory) of every component that ran, in rank order
    let sources: Vec<(String, PathBuf)> = job
        .components
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let dir = meta.components.get(i)?.dir.as_ref()?;
            Some((shared.site(c.site?).name.clone(), PathBuf::from(dir)))
        })
        .collect();
    let outputs = meta.desc.outputs.clone();
    let user = meta.user.clone();
    let shared = shared.clone();
    tokio::spawn(async move {
        let mut registered = Vec::new();
        let mut refused = Vec::new();
        for out in &outputs {
            let (site, src) = match transfer::find_output(sources.iter().cloned(), &out.file) {
                Ok(Some(found)) => found,
                Ok(None) => {
                    tracing::warn!(job = id, output = %out.file, "declared output not produced");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(job = id, error = %e, "stage-out refused");
                    refused.push(e.to_string());
                    continue;
                }
            };
            let logical = out.logical_name(id);
            let size = src.metadata().map(|m| m.len()).unwrap_or(0);
            if let Err(why) = may_register_output(&shared, id, &user, &logical, size) {
                tracing::warn!(job = id, output = %out.file, "stage-out refused: {why}");
                refused.push(format!("output '{}' refused: {why}", out.file));
                continue;
            }
            let Some(h) = shared.site_by_name(&site) else { continue };
            let dest = transfer::storage_path(&h.paths.storage, &logical);
            let (d, what) = (dest.clone(), out.file.clone());
            match tokio::task::spawn_blocking(move || transfer::copy_file_verified(src, &what, &d, None)).await {
                Ok(Ok(c)) => {
                    shared.metrics.transfer_bytes.fetch_add(c.bytes, Ordering::Relaxed);
                    transfer::note_verified(&dest);
                    let op = store::register_replica_op(store::NewReplica {
                        name: logical.clone(),
                        size: c.bytes,
                        sha256: c.sha256.clone(),
                        owner: Some(user.clone()),
                        site: h.name.clone(),
                        path: dest.display().to_string(),
                    });
                    if let Err(e) = shared.store.write(op).await {
                        tracing::warn!(job = id, output = %out.file, error = %e, "output not registered");
                        continue;
                    }
                    registered.push((logical, c, h.name.clone(), dest));
                }
                Ok(Err(e)) => tracing::warn!(job = id, output = %out.file, error = %e, "stage-out failed"),
                Err(e) => tracing::error!(error = %e, "stage-out task panicked"),
            }
        }
        let committed = {
            let mut guard = shared.lock();
            let st = &mut *guard;
            for (logical, c, site, dest) in registered {
                add_replica_mem(st, &logical, c.bytes, &c.sha256, &site, dest, Some(&user));
                if let Some(m) = st.meta.get_mut(&id) {
                    m.outputs.push(logical);
                }
            }
            if let (Some(m), false) = (st.meta.get_mut(&id), refused.is_empty()) {
                m.failure = Some(refused.join("; "));
            }
            // The outputs are in the catalogue: the job may be seen succeeded now.
            if let Some(m) = st.meta.get_mut(&id) {
                m.staging_out = false;
            }
            let (Some(job), Some(meta)) = (st.core.job(JobId(id)), st.meta.get(&id)) else {
                return;
            };
            shared
                .store
                .submit(store::update_job_op(records::update(id, job, meta, &shared.sites)))
        };
        actions::forget_when_committed(&shared, id, committed);
    });
}

/// Whether job `id` of `user` may register an output of `size` bytes as `logical`: a name
/// `<job-id>/...` only for its own id, never a name another user's file has, and within the
/// user's stored-bytes quota.
fn may_register_output(shared: &Shared, id: u64, user: &str, logical: &str, size: u64) -> Result<(), String> {
    if let Some(owner_job) = crate::file_import::reserved_output_name(logical).filter(|j| *j != id) {
        return Err(format!("'{logical}' is reserved for the outputs of job {owner_job}"));
    }
    let st = shared.lock();
    match st.files.get(logical).map(|f| f.owner.as_deref()) {
        Some(owner) if owner != Some(user) => Err(format!("'{logical}' is another user's file")),
        _ => shared.config.quotas.check_bytes(&st, user, size).map_err(|e| e.to_string()),
    }
}
