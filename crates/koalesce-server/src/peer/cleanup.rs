//! The receiver lets go of what it received for handoffs that will not run here: an aborted
//! handoff's input files (registered ones and the partials of transfers under way) are
//! removed, unless a live handoff from the same origin declares the same content. A handoff
//! prepared and never committed is aborted here once its origin has not spoken about it for
//! `handoff_timeout_ms` (the origin then gets 409 on a late commit and decides the job again:
//! it never ran here; an aborted handoff, or a tombstone, is forgotten `handoff_timeout_ms` after
//! its abort, and a commit after that gets 404, with the same outcome). A committed handoff is released on its origin's `done` (its outputs and
//! logs are back there) or, when that never comes (the origin was lost, or its journal),
//! `received_retention_ms` after its job ended here (10 days by default, as long as HTCondor
//! keeps a finished spooled job): its received inputs and its outputs here go.
//!
//! Durable: the abort is in the journal before anything is removed, and an aborted handoff is
//! marked swept only after its files are gone, so a server killed at any moment sweeps at the
//! next pass after its restart. Only the names an aborted handoff declared (checked at phase
//! one: `peer-<origin>/<64 hex digits>`, stored paths derived from them) are ever removed.

use std::sync::Arc;

use super::journal::Incoming;
use super::{blocking, data, Federation};
use crate::now_ms;

/// One pass at the receiver: aborts prepared handoffs past their deadline, then sweeps the
/// data of aborted handoffs not swept yet (including those a crash interrupted).
pub(crate) async fn housekeeping(fed: &Arc<Federation>) -> anyhow::Result<()> {
    let now = now_ms();
    let before = now.saturating_sub(fed.cfg.handoff_timeout_ms);
    let j = fed.journal.clone();
    for h in blocking(move || j.stale_prepared(before, now)).await? {
        let Some(origin) = h.rsplitn(3, '-').nth(2).map(str::to_string) else {
            continue;
        };
        let one = fed.submit_lock.lock().await;
        let inc = fed.abort_incoming(&one, &h, &origin).await.map_err(anyhow::Error::msg)?;
        drop(one);
        if inc.state == "aborted" {
            tracing::warn!(handoff = %h, "prepared handoff not committed within handoff_timeout_ms: aborted here");
        }
    }
    let j = fed.journal.clone();
    for inc in blocking(move || j.unswept_aborted()).await? {
        sweep(fed, &inc).await?;
    }
    // Aborted rows, tombstones included, are kept `handoff_timeout_ms` (as long as a prepared
    // one lives) to refuse a late phase one or commit, then go: what a peer makes this server
    // keep stays bounded, and max_handoffs_per_peer's bound on tombstones frees up again. A
    // commit after that gets 404, and its origin aborts and decides the job again ([`super::lost`]).
    let j = fed.journal.clone();
    let gone = blocking(move || j.forget_aborted(before, now)).await?;
    if gone > 0 {
        tracing::info!(gone, "aborted handoffs older than handoff_timeout_ms forgotten");
    }
    retention(fed, now).await
}

/// Received jobs whose origin never said `done` (it was lost, or its journal): once a job
/// ended here `received_retention_ms` ago, what was received for it and its outputs go, as
/// on a `done`. Then released handoffs a crash left unswept are swept.
async fn retention(fed: &Arc<Federation>, now: u64) -> anyhow::Result<()> {
    let before = now.saturating_sub(fed.cfg.received_retention_ms);
    let j = fed.journal.clone();
    for inc in blocking(move || j.committed_unreleased(before)).await? {
        let Some(id) = inc.local_id else { continue };
        if inc.ended_ms == 0 {
            // Still in the core: it has not ended (in memory: no store read per pass).
            if fed.shared.lock().core.job(koalesce_core::JobId(id)).is_some() {
                continue;
            }
            let ended = match crate::api::job_detail(&fed.shared, id).await {
                Ok(d) if koalesce_api::dto::is_final_state(&d.state) => d.finished_ms.unwrap_or(d.submitted_ms),
                Ok(_) => continue,
                // Forgotten by the store: it ended long ago.
                Err(e) if e.0 == axum::http::StatusCode::NOT_FOUND => 1,
                Err(e) => anyhow::bail!("job {id} of handoff {}: {}", inc.handoff, e.1),
            };
            let (j, h) = (fed.journal.clone(), inc.handoff.clone());
            blocking(move || j.set_ended(&h, ended)).await?;
            if ended >= before {
                continue;
            }
        }
        let removed = release(fed, &inc).await?;
        tracing::warn!(
            handoff = %inc.handoff,
            removed,
            "a received job ended received_retention_ms ago and its origin never said done: its data here removed"
        );
    }
    let j = fed.journal.clone();
    for inc in blocking(move || j.unswept_released()).await? {
        release(fed, &inc).await?;
    }
    Ok(())
}

/// Lets go of committed handoff `inc`, whose job ended here: marks it released (durable),
/// removes the inputs received for it that no live handoff or unended job needs and the job's
/// outputs here (copies registered for `peer-<origin>`), then marks it swept. How many files
/// went. Idempotent: a crash anywhere in between leaves it released and unswept, and the next
/// pass sweeps again; a file still needed is never removed.
pub(crate) async fn release(fed: &Arc<Federation>, inc: &Incoming) -> anyhow::Result<usize> {
    // Under the lock no commit can take an input between the look-up and the removal.
    let one = fed.submit_lock.lock().await;
    let (j, key) = (fed.journal.clone(), inc.handoff.clone());
    blocking(move || j.release(&key)).await?;
    let (mut removed, in_use) = data::release_inputs(fed, inc).await.map_err(anyhow::Error::msg)?;
    drop(one);
    if let Some(id) = inc.local_id {
        let outputs = match crate::api::job_detail(&fed.shared, id).await {
            Ok(d) => d.outputs,
            Err(e) if e.0 == axum::http::StatusCode::NOT_FOUND => Vec::new(),
            Err(e) => anyhow::bail!("job {id} of handoff {}: {}", inc.handoff, e.1),
        };
        let owner = format!("peer-{}", inc.origin);
        for name in &outputs {
            let theirs = fed
                .shared
                .lock()
                .files
                .get(name)
                .is_some_and(|f| f.owner.as_deref() == Some(owner.as_str()));
            if theirs && crate::api_files::remove_file(&fed.shared, name).await.map_err(anyhow::Error::msg)? {
                removed += 1;
            }
        }
    }
    if in_use > 0 {
        // Left unswept: the next pass sweeps again once the jobs reading them ended.
        tracing::debug!(handoff = %inc.handoff, in_use, "received inputs kept while jobs here read them");
        return Ok(removed);
    }
    let (j, h) = (fed.journal.clone(), inc.handoff.clone());
    blocking(move || j.set_swept(&h)).await?;
    Ok(removed)
}

/// Removes what was received for aborted handoff `inc` (not needed by a live handoff from its
/// origin), then marks it swept unless a transfer for it still runs (its end sweeps again).
pub(crate) async fn sweep(fed: &Arc<Federation>, inc: &Incoming) -> anyhow::Result<usize> {
    if inc.state != "aborted" {
        return Ok(0);
    }
    let _one = fed.submit_lock.lock().await;
    let (removed, in_use) = remove_unneeded(fed, inc).await?;
    let key = format!("in:{}", inc.handoff);
    // A file an unended job here reads is kept: the next pass sweeps again once it ended.
    if !data::fetch_running(fed, &key) && in_use == 0 {
        let (j, h) = (fed.journal.clone(), inc.handoff.clone());
        blocking(move || j.set_swept(&h)).await?;
        data::forget_fetch(fed, &key);
    }
    if removed > 0 {
        tracing::info!(handoff = %inc.handoff, removed, "inputs received for an aborted handoff removed");
    }
    Ok(removed)
}

/// The caller holds `submit_lock`. How many files (registered or partial) went, and how many
/// registered ones an unended job here still reads (kept).
async fn remove_unneeded(fed: &Arc<Federation>, inc: &Incoming) -> anyhow::Result<(usize, usize)> {
    let needed = data::needed_by_others(fed, inc).await?;
    let (mut removed, mut in_use) = (0, 0);
    for f in data::declared(inc) {
        if needed.contains(&f.sha256) {
            continue;
        }
        let name = data::received_name(&inc.origin, &f.sha256);
        if crate::api_files::remove_file(&fed.shared, &name)
            .await
            .map_err(anyhow::Error::msg)?
        {
            removed += 1;
        }
        let Ok((dest, part)) = data::received_paths(fed, &inc.origin, &f.sha256) else {
            continue;
        };
        // A verified file not registered yet (a crash between rename and registration), and
        // the partial of a transfer under way or interrupted.
        let registered = fed.shared.lock().files.contains_key(&name);
        if registered {
            in_use += 1;
        } else {
            // At a site with a storage agent: its spool copy here, and what reached the agent.
            for p in [dest.clone(), data::spool_path(fed, &dest)] {
                if std::fs::remove_file(&p).is_ok() {
                    removed += 1;
                }
            }
            if let Some(place) = fed
                .shared
                .sites
                .first()
                .filter(|h| h.agent.is_some())
                .map(|h| crate::daemon::transfers::place_at(h, &dest))
            {
                super::via_agent::remove(fed, &place).await;
            }
        }
        removed += remove_partial(&part);
    }
    Ok((removed, in_use))
}

/// Removes the partial `part`, its resume record and any temporary copy of that record a kill
/// left (`….part.offset.tmp.<pid>.<ms>`): every file of its directory whose name starts with
/// the partial's. How many went.
fn remove_partial(part: &std::path::Path) -> usize {
    let (Some(dir), Some(head)) = (part.parent(), part.file_name().map(|n| n.to_string_lossy().into_owned())) else {
        return 0;
    };
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&head))
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}

/// A transfer of handoff `h`'s inputs ended: if the handoff was aborted meanwhile, what the
/// transfer left goes. Whether it was aborted (the transfer's error then no longer matters).
pub(crate) async fn after_fetch(fed: &Arc<Federation>, h: &str) -> bool {
    let (j, key) = (fed.journal.clone(), h.to_string());
    let Ok(Some(inc)) = blocking(move || j.incoming(&key)).await else {
        return false;
    };
    if inc.state != "aborted" {
        return false;
    }
    let _one = fed.submit_lock.lock().await;
    match remove_unneeded(fed, &inc).await {
        Ok((_, 0)) => {
            let (j, h) = (fed.journal.clone(), inc.handoff.clone());
            let _ = blocking(move || j.set_swept(&h)).await;
        }
        // Kept for a job here that reads it: the next pass sweeps again.
        Ok(_) => {}
        Err(e) => tracing::warn!(handoff = %h, error = %e, "sweeping an aborted handoff failed"),
    }
    true
}
