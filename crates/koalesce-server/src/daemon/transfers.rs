//! Stage-in (the core's `StartTransfer`) and stage-out (declared outputs of a job that
//! succeeded): verified transfers on the blocking pool, replicas registered in the catalogue.
//!
//! A site with a storage agent (`[sites.agent]`) is reached only through it: stage-in between
//! two agent sites is a third-party push from the source replica's agent, between an agent
//! site and a plain one an upload or download, and plain sites keep local verified copies
//! ([`crate::dataplane::route`]). An interrupted transfer resumes; a source that stays
//! unreachable or turns out corrupt (quarantined) gives way to the next replica. Every
//! transfer's measured throughput feeds the network forecast ([`network::observe`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use koalesce_core::{JobId, SiteId, TransferKey};

use super::{actions, network, process_actions, records, FileInfo, Shared, SiteHandle, State};
use crate::dataplane::{self, Blame, Expected, Place, RetryPolicy, TransferError, TransferReport};
use crate::store;
use crate::{now_ms, transfer};

/// Adds a replica to the in-memory catalogue and the core's (`owner`: of a new file). A
/// replica of other content (size or SHA-256) than the file's replaces the file: its size and
/// checksum become the new ones and its other replicas, which hold the old content, are no
/// replicas any more — as [`store::register_replica_op`] does in the database, which records
/// their files as pending removals ([`super::removals`]).
pub fn add_replica_mem(st: &mut State, name: &str, size: u64, sha: &str, site: &str, path: PathBuf, owner: Option<&str>) {
    let sid = st.site_id(site);
    if let Some(f) = st.files.get_mut(name).filter(|f| f.size_bytes != size || f.sha256 != sha) {
        f.size_bytes = size;
        f.sha256 = sha.to_string();
        f.replicas.clear();
        st.core.catalogue_mut().remove(name);
    }
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

/// Where a site keeps logical file `name` (written or read there): through the site's agent
/// when it has one, else the file itself. `path` is the replica's path as the site's nodes see
/// it (under `paths.storage`, which is the agent's root for an agent site).
pub fn place_at(h: &SiteHandle, path: &Path) -> Place {
    match &h.agent {
        Some(agent) => {
            let rel = path
                .strip_prefix(&h.paths.storage)
                .ok()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|| path.file_name().unwrap_or_default().to_string_lossy().into_owned());
            Place::Agent {
                agent: agent.clone(),
                path: rel,
            }
        }
        None => Place::Local(path.to_path_buf()),
    }
}

/// What one stage-in did: the source that served it (or the last that failed), and which
/// sources turned out corrupt.
struct Staged {
    result: Result<(SiteId, TransferReport), (SiteId, TransferError)>,
    corrupt: Vec<(SiteId, PathBuf, TransferError)>,
}

/// Tries the sources in order: a transfer that fails on the way is resumed
/// ([`crate::dataplane::move_resuming`]); a source that stays unreachable or is corrupt gives
/// way to the next replica; a failure of the destination ends the stage-in.
fn stage_from(shared: &Shared, sources: &[(SiteId, PathBuf)], dest: &Place, expect: &Expected) -> Staged {
    let retry = RetryPolicy {
        tries: shared.config.network.transfer_tries,
        ..RetryPolicy::default()
    };
    let mut corrupt = Vec::new();
    let mut last = None;
    for (sid, path) in sources {
        let from = place_at(shared.site(*sid), path);
        match dataplane::move_resuming(&shared.agents, &from, dest, expect, &retry) {
            Ok(r) => {
                return Staged {
                    result: Ok((*sid, r)),
                    corrupt,
                }
            }
            Err(e) if e.blame() == Blame::Source => {
                tracing::warn!(file = %path.display(), source = %from.describe(), error = %e, "source replica failed; trying the next");
                if e.source_is_corrupt() {
                    corrupt.push((*sid, path.clone(), e.clone()));
                }
                last = Some((*sid, e));
            }
            Err(e) => {
                return Staged {
                    result: Err((*sid, e)),
                    corrupt,
                }
            }
        }
    }
    Staged {
        result: Err(last.unwrap_or_else(|| {
            (
                SiteId(0),
                TransferError::SourceMissing {
                    url: String::new(),
                    path: String::new(),
                },
            )
        })),
        corrupt,
    }
}

/// A job waiting for a stage-in that another job started (same file, same destination):
/// it gets that transfer's outcome, its own `transfer_ms` counted from when it asked.
#[derive(Debug)]
pub struct Waiter {
    pub job: u64,
    pub key: TransferKey,
    pub since: std::time::Instant,
}

pub fn start_transfer(shared: &Arc<Shared>, st: &mut State, job: u64, key: TransferKey, from: SiteId) {
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
    // The core's source first (the replica it estimated fastest), then every other replica.
    let from_name = shared.site(from).name.clone();
    let mut sources: Vec<(SiteId, PathBuf)> = info.replicas.get(&from_name).map(|p| (from, p.clone())).into_iter().collect();
    sources.extend(
        info.replicas
            .iter()
            .filter(|(site, _)| **site != from_name)
            .filter_map(|(site, p)| Some((st.site_id(site)?, p.clone()))),
    );
    if sources.is_empty() {
        st.core.transfer_failed(now_ms(), JobId(job), &key);
        return;
    }
    // The same file to the same site is on its way already (another job's stage-in): wait
    // for it. Two transfers of one file into one destination would take the receiver's
    // partial upload from each other in turn, and the loser's job would be placed again.
    let flight = (key.file.clone(), key.to);
    if let Some(waiting) = st.inflight.get_mut(&flight) {
        tracing::debug!(job, file = %key.file, to = %to_name, "stage-in already on its way; waiting for it");
        waiting.push(Waiter {
            job,
            key,
            since: std::time::Instant::now(),
        });
        return;
    }
    st.inflight.insert(flight.clone(), Vec::new());
    let dest_path = transfer::storage_path(&to.paths.storage, &key.file);
    let dest = place_at(to, &dest_path);
    let shared = shared.clone();
    let started = std::time::Instant::now();
    tokio::spawn(async move {
        let expect = Expected {
            sha256: info.sha256.clone(),
            size: info.size_bytes,
        };
        // A crash after the copy and before its registration would leave a file no record
        // names: it is a pending removal until the registration commits (which clears it).
        let intent = store::stage_in_op(key.file.clone(), to_name.clone(), dest_path.display().to_string());
        if let Err(e) = shared.store.write(intent).await {
            tracing::warn!(job, file = %key.file, error = %e, "stage-in's pending removal not recorded");
        }
        let s = shared.clone();
        let staged = tokio::task::spawn_blocking(move || stage_from(&s, &sources, &dest, &expect)).await;
        if matches!(&staged, Ok(Staged { result: Ok(_), .. })) {
            fault_hold("KOALESCE_FAULT_STAGE_IN_HOLD", job).await;
        }
        let mut guard = shared.lock();
        let st = &mut *guard;
        let now = now_ms();
        // This job and every job that asked for the same transfer meanwhile.
        let mut jobs = vec![Waiter {
            job,
            key: key.clone(),
            since: started,
        }];
        jobs.extend(st.inflight.remove(&flight).unwrap_or_default());
        // Unless registered below, what the copy left goes (its pending removal).
        let left_over = |shared: &Arc<Shared>, name: &str| {
            let (s2, name) = (shared.clone(), name.to_string());
            tokio::spawn(async move { super::removals::after_commit(&s2, &name).await });
        };
        let Ok(staged) = staged else {
            tracing::error!("transfer task panicked");
            for w in &jobs {
                st.core.transfer_failed(now, JobId(w.job), &w.key);
            }
            left_over(&shared, &key.file);
            process_actions(&shared, st);
            return;
        };
        for (sid, path, e) in &staged.corrupt {
            // The source replica's content no longer matches the catalogue: quarantined, the
            // destination not blamed.
            let site = shared.site(*sid).name.clone();
            tracing::warn!(job, file = %key.file, from = %site, error = %e, "source replica is corrupt; quarantined");
            quarantine_replica(&shared, st, &key.file, &site, path);
        }
        // The file was registered again with other content while this copy of the old one
        // was on its way: the copy is no replica of it, and the jobs get the new content.
        let stale = |r: &TransferReport| {
            st.files
                .get(&key.file)
                .is_none_or(|f| f.sha256 != r.sha256 || f.size_bytes != r.size)
        };
        match staged.result {
            Ok((_, report)) if stale(&report) => {
                tracing::warn!(job, file = %key.file, to = %to_name, "file replaced while being copied; placing again");
                for w in &jobs {
                    st.core.transfer_source_failed(now, JobId(w.job), &w.key);
                }
                left_over(&shared, &key.file);
            }
            Ok((sid, report)) => {
                shared.metrics.transfer_bytes.fetch_add(report.bytes, Ordering::Relaxed);
                shared.metrics.transfers.fetch_add(1, Ordering::Relaxed);
                transfer::note_verified(&dest_path);
                // Of the file's content (not stale): drops nothing.
                add_replica_mem(st, &key.file, report.size, &report.sha256, &to_name, dest_path.clone(), None);
                shared.store.enqueue(store::register_replica_op(store::NewReplica {
                    name: key.file.clone(),
                    size: report.size,
                    sha256: report.sha256.clone(),
                    owner: None,
                    site: to_name.clone(),
                    path: dest_path.display().to_string(),
                }));
                // The measured throughput feeds the pair's forecast, which the core uses.
                network::observe(st, sid, key.to, &report, now);
                for w in &jobs {
                    if let Some(m) = st.meta.get_mut(&w.job) {
                        let took = w.since.elapsed().as_millis() as u64;
                        m.transfer_ms = Some(m.transfer_ms.map_or(took, |t| t.max(took)));
                    }
                    st.core.transfer_finished(now, JobId(w.job), &w.key);
                }
            }
            Err((sid, e)) => {
                shared.metrics.transfer_failures.fetch_add(1, Ordering::Relaxed);
                let site = shared.site(sid).name.clone();
                tracing::warn!(job, file = %key.file, from = %site, to = %to_name, error = %e, "stage-in failed");
                left_over(&shared, &key.file);
                let blame_source = e.blame() == Blame::Source;
                let failure = if e.source_is_corrupt() {
                    format!(
                        "stage-in of '{}': the replica at {site} is corrupt (checksum mismatch) and was quarantined ({e})",
                        key.file
                    )
                } else {
                    format!("stage-in of '{}' to {to_name} failed: {e}", key.file)
                };
                for w in &jobs {
                    if let Some(m) = st.meta.get_mut(&w.job) {
                        m.failure = Some(failure.clone());
                    }
                    if blame_source {
                        // Every replica failed: nobody's site is blamed; the job is placed
                        // again with the replicas that are left.
                        st.core.transfer_source_failed(now, JobId(w.job), &w.key);
                    } else {
                        st.core.transfer_failed(now, JobId(w.job), &w.key);
                    }
                }
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
/// refused, named in the job's `failure`. Then the core is told the outputs are registered
/// (jobs depending on this one may start: they find the outputs), the job's final row (with
/// its outputs) is written and the job forgotten.
///
/// Idempotent: after a restart that interrupted it (the job's row still says `staging_out`),
/// [`resume_stage_outs`] does it again; a copy lands on the same storage path and registering
/// a replica again replaces the row, so each output ends registered once (and one registered
/// already with the same content at the same site is not counted again against the quota).
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
        for (k, out) in outputs.iter().enumerate() {
            if k > 0 {
                fault_hold_stage_out(id).await;
            }
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
            // Registered already with this content at this site (a stage-out redone after a
            // restart) adds nothing; replacing other content adds only the difference.
            let adding = bytes_added(&shared, &user, &logical, &site, size, &src).await;
            if let Err(why) = may_register_output(&shared, id, &user, &logical, adding) {
                tracing::warn!(job = id, output = %out.file, "stage-out refused: {why}");
                refused.push(format!("output '{}' refused: {why}", out.file));
                continue;
            }
            let Some(h) = shared.site_by_name(&site) else { continue };
            let dest = transfer::storage_path(&h.paths.storage, &logical);
            // Nobody removes (or writes) the path until the replica is in the catalogue.
            let busy = super::removals::PathGuard::take(&dest).await;
            let place = place_at(h, &dest);
            let (client, what) = (shared.agents.clone(), PathBuf::from(&out.file));
            match tokio::task::spawn_blocking(move || dataplane::send_open(&client, src, &what, &place, None)).await {
                Ok(Ok(c)) => {
                    shared.metrics.transfer_bytes.fetch_add(c.bytes, Ordering::Relaxed);
                    transfer::note_verified(&dest);
                    let op = store::register_replica_op(store::NewReplica {
                        name: logical.clone(),
                        size: c.size,
                        sha256: c.sha256.clone(),
                        owner: Some(user.clone()),
                        site: h.name.clone(),
                        path: dest.display().to_string(),
                    });
                    if let Err(e) = shared.store.write(op).await {
                        tracing::warn!(job = id, output = %out.file, error = %e, "output not registered");
                        continue;
                    }
                    registered.push((logical, c, h.name.clone(), dest, busy));
                }
                Ok(Err(e)) => tracing::warn!(job = id, output = %out.file, error = %e, "stage-out failed"),
                Err(e) => tracing::error!(error = %e, "stage-out task panicked"),
            }
        }
        let committed = {
            let mut guard = shared.lock();
            let st = &mut *guard;
            for (logical, c, site, dest, busy) in registered {
                // As a registration through the API: the data functions ask the catalogue again.
                shared.data_catalogue.invalidate(&logical);
                add_replica_mem(st, &logical, c.size, &c.sha256, &site, dest, Some(&user));
                drop(busy);
                // Registered durably above: the old content's copies elsewhere can go.
                let (s2, name) = (shared.clone(), logical.clone());
                tokio::spawn(async move { super::removals::after_commit(&s2, &name).await });
                if let Some(m) = st.meta.get_mut(&id).filter(|m| !m.outputs.contains(&logical)) {
                    m.outputs.push(logical);
                }
            }
            if let (Some(m), false) = (st.meta.get_mut(&id), refused.is_empty()) {
                m.failure = Some(refused.join("; "));
            }
            // The outputs are in the catalogue: the job may be seen succeeded now, and the jobs
            // depending on it may start.
            if let Some(m) = st.meta.get_mut(&id) {
                m.staging_out = false;
            }
            st.core.outputs_registered(crate::now_ms(), JobId(id));
            let (Some(job), Some(meta)) = (st.core.job(JobId(id)), st.meta.get(&id)) else {
                return;
            };
            let committed = shared
                .store
                .submit(store::update_job_op(records::update(id, job, meta, &shared.sites)));
            super::process_actions(&shared, st);
            committed
        };
        shared.wake.notify_one();
        actions::forget_when_committed(&shared, id, committed);
    });
}

/// After a restart: the stage-outs that a stop interrupted (jobs whose final row still says
/// `staging_out`, re-adopted by recovery) are done again ([`stage_out`] is idempotent).
pub fn resume_stage_outs(shared: &Arc<Shared>, st: &State) {
    let ids: Vec<u64> = st.meta.iter().filter(|(_, m)| m.staging_out).map(|(id, _)| *id).collect();
    for id in ids {
        tracing::info!(job = id, "redoing a stage-out a stop interrupted");
        stage_out(shared, st, id);
    }
}

/// Failure injection for the kill tests (a real daemon cannot be stopped on cue between two
/// outputs of a stage-out): with `KOALESCE_FAULT_STAGE_OUT_HOLD=<path>` in the daemon's
/// environment, a stage-out that registered its first output writes `<path>.reached` and
/// waits while `<path>` exists.
async fn fault_hold_stage_out(id: u64) {
    fault_hold("KOALESCE_FAULT_STAGE_OUT_HOLD", id).await
}

/// Failure injection: with `<var>=<path>` in the daemon's environment, writes `<path>.reached`
/// (holding `id`) and waits while `<path>` exists. `KOALESCE_FAULT_STAGE_IN_HOLD`: a stage-in
/// whose copy is in place, before it is registered; `KOALESCE_FAULT_REGISTER_HOLD`: an upload or
/// registration through the API, likewise.
pub(crate) async fn fault_hold(var: &str, id: u64) {
    let Some(hold) = std::env::var_os(var).map(PathBuf::from) else {
        return;
    };
    if !hold.exists() {
        return;
    }
    let mut reached = hold.clone().into_os_string();
    reached.push(".reached");
    let _ = std::fs::write(&reached, id.to_string());
    while hold.exists() {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// What registering `src` (`size` bytes) as `logical` at `site` adds to what `user` stores:
/// nothing when it is registered already with this content there (an output a stage-out
/// interrupted by a stop had registered before it); its size less the file's present bytes
/// when it replaces one of the user's files with other content (the old replicas go,
/// [`add_replica_mem`]); its size otherwise (a new file, or one more replica). Hashes `src`
/// (off the runtime, by position: the copy still reads it from its start) only when the
/// user has a file of that name.
async fn bytes_added(shared: &Shared, user: &str, logical: &str, site: &str, size: u64, src: &std::fs::File) -> u64 {
    let known = {
        let st = shared.lock();
        st.files.get(logical).filter(|f| f.owner.as_deref() == Some(user)).map(|f| {
            (
                f.sha256.clone(),
                f.size_bytes,
                f.replicas.len() as u64,
                f.replicas.contains_key(site),
            )
        })
    };
    let Some((sha256, old_size, replicas, here)) = known else {
        return size;
    };
    let Ok(src) = src.try_clone() else { return size };
    match tokio::task::spawn_blocking(move || transfer::checksum_open(&src)).await {
        Ok(Ok((actual, bytes))) if bytes == old_size && actual == sha256 => {
            if here {
                0
            } else {
                size
            }
        }
        Ok(Ok((_, bytes))) => bytes.saturating_sub(old_size.saturating_mul(replicas.max(1))),
        _ => size,
    }
}

/// Whether job `id` of `user` may register an output as `logical` that adds `adding` bytes to
/// what the user stores: a name `<job-id>/...` only for its own id, never a name another
/// user's file has, and within the user's stored-bytes quota (not checked when it adds
/// nothing, see [`bytes_added`]).
fn may_register_output(shared: &Shared, id: u64, user: &str, logical: &str, adding: u64) -> Result<(), String> {
    if let Some(owner_job) = crate::file_import::reserved_output_name(logical).filter(|j| *j != id) {
        return Err(format!("'{logical}' is reserved for the outputs of job {owner_job}"));
    }
    let st = shared.lock();
    match st.files.get(logical).map(|f| f.owner.as_deref()) {
        Some(owner) if owner != Some(user) => Err(format!("'{logical}' is another user's file")),
        _ if adding == 0 => Ok(()),
        _ => shared.config.quotas.check_bytes(&st, user, adding).map_err(|e| e.to_string()),
    }
}
