//! A handoff the receiver no longer knows (issue 14's edge): a receiver that lost its journal
//! answers the origin's commit (or look, or cancel) with 404, and the origin used to ask
//! again for ever.
//!
//! Not committed there yet (the origin has no remote job id): the commit is what makes a
//! receiver run a job, so a handoff it has no record of has not run there from that record.
//! The origin aborts it at the receiver, whose abort of an unknown handoff leaves a tombstone
//! (a late phase one or commit of it is refused from then on). Once the receiver confirms
//! `aborted`, the job is decided again here, as after a receiver's own abort
//! (`given_back::commit_refused`: counted as given back); a job whose user cancelled it ends cancelled there.
//!
//! Committed there (the receiver gave it a job id) and now unknown: before the job fails the
//! origin sends an abort, which a receiver that lost its journal but not its jobs answers by taking the job back
//! (`committed`, the same job id): it is followed as before. Otherwise the job may have run, or
//! still run, and its outcome can no longer be learned, so it is not run again. Either way,
//! after [`MISSING_TRIES`] answers of 404 in a row (with, before the commit, no confirmed
//! abort) the job fails here with a reason saying what happened, rather than wait for ever or
//! risk running it on both sides; a 404 once is not taken for the peer's last word. Any other
//! answer starts the count again. The count lives in memory: a restart of the origin gives a
//! handoff its tries again, still a bounded number per run. Only koalesce's own 404 for the
//! handoff counts (`is_missing`): a proxy's or another server's 404 page is no answer about it.

use std::sync::Arc;

use super::journal::{state, GridRow};
use super::wire::HandoffState;
use super::{blocking, data, CallError, Federation};

/// Answers of 404 in a row about one handoff (without a confirmed abort) after which its job
/// fails.
pub const MISSING_TRIES: u32 = 5;

/// Whether a call's answer about handoff `h` is the receiver saying it has no such handoff: a
/// 404 with koalesce's own message for it. Any other 404 (a proxy's page, another server now at
/// the peer's address, a path it does not serve) says nothing about the handoff.
pub(crate) fn is_missing<T>(r: &Result<T, CallError>, h: &str) -> bool {
    matches!(r, Err(CallError::Refused(404, m)) if *m == format!("handoff '{}' not found", crate::api::cut_message(h)))
}

/// After a call about grid job `id`'s handoff: forgets its 404 count unless the peer said 404
/// or did not answer.
pub(crate) fn answered<T>(fed: &Federation, id: u64, h: &str, r: &Result<T, CallError>) {
    if !is_missing(r, h) && !matches!(r, Err(CallError::Unreachable(_))) {
        fed.missing.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
    }
}

/// Peer `i` answered 404 to the `asked` (commit, look, cancel) of handoff `h` of grid job `row`:
/// see the module's documentation.
pub(crate) async fn handoff_missing(fed: &Arc<Federation>, i: usize, row: &GridRow, h: &str, asked: &str) -> anyhow::Result<()> {
    let peer = fed.peers[i].name.clone();
    let tries = {
        let mut m = fed.missing.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(row.id).or_insert(0);
        *n += 1;
        *n
    };
    if let Some(rid) = row.remote_id.filter(|_| tries >= MISSING_TRIES) {
        // Before it fails: its journal lost, its jobs kept, the abort of a handoff unknown there
        // takes the job back (answered committed, as the same job) when it is still there (an
        // abort of a committed handoff changes nothing). Then it is followed as usual. Not
        // sooner: an abort of a handoff it has no job of leaves a tombstone, which it would
        // then show to the looks instead of 404.
        let client = fed.peers[i].clone();
        let path = format!("/api/v1/peer/handoffs/{}/abort", data::encode(h));
        let r = blocking(move || client.call::<(), HandoffState>(&path, Some(&()))).await;
        fed.record(i, &r);
        if let Ok(s) = r {
            if s.state == "committed" && s.job == Some(rid) {
                tracing::warn!(grid_job = row.id, %peer, handoff = h, "committed handoff unknown at the peer, whose job is still there: taken back there");
                fed.missing.lock().unwrap_or_else(|p| p.into_inner()).remove(&row.id);
                return Ok(());
            }
        }
    }
    let (to, why) = match row.remote_id {
        Some(rid) if tries >= MISSING_TRIES => (
            state::FAILED,
            format!(
                "handoff {h} was committed at {peer} as its job {rid}, but {peer} no longer knows it (404 to {tries} requests in a row: it lost its record of it); its outcome cannot be learned, so it failed here"
            ),
        ),
        Some(_) => {
            tracing::warn!(grid_job = row.id, %peer, handoff = h, tries, asked, "committed handoff unknown at the peer: asked again");
            return Ok(());
        }
        None => {
            let client = fed.peers[i].clone();
            let path = format!("/api/v1/peer/handoffs/{}/abort", data::encode(h));
            let r = blocking(move || client.call::<(), HandoffState>(&path, Some(&()))).await;
            fed.record(i, &r);
            match r {
                Ok(s) if s.state == "aborted" => {
                    let why = format!("handoff {h} is unknown at {peer} (404 to its {asked}: it lost its record of it); aborted there: decided again");
                    tracing::warn!(grid_job = row.id, %peer, handoff = h, "{why}");
                    super::given_back::given_back(fed, row, &peer, why).await?;
                    fed.missing.lock().unwrap_or_else(|p| p.into_inner()).remove(&row.id);
                    return Ok(());
                }
                // It knows the handoff (committed meanwhile): followed as usual.
                Ok(_) => {
                    fed.missing.lock().unwrap_or_else(|p| p.into_inner()).remove(&row.id);
                    return Ok(());
                }
                Err(e) if tries >= MISSING_TRIES => (
                    state::FAILED,
                    format!(
                        "handoff {h} is unknown at {peer} (404 to {tries} requests in a row) and its abort there was not confirmed ({}): failed here rather than risk running it twice",
                        // The peer's words: plain text, bounded, before users see them.
                        super::wire::plain(&e.to_string(), 2000)
                    ),
                ),
                Err(e) => {
                    tracing::warn!(grid_job = row.id, %peer, handoff = h, tries, error = %e, "handoff unknown at the peer; its abort was not confirmed: tried again");
                    return Ok(());
                }
            }
        }
    };
    tracing::warn!(grid_job = row.id, %peer, handoff = h, "{why}");
    let next = super::given_back::Next {
        to,
        reason: why,
        given_back: false,
    };
    super::given_back::leave_migrated(fed, row.id, next).await?;
    fed.missing.lock().unwrap_or_else(|p| p.into_inner()).remove(&row.id);
    Ok(())
}
