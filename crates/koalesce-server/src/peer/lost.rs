//! A handoff the receiver no longer knows (issue 14's edge): a receiver that lost its journal
//! answers the origin's commit with 404, and the origin used to ask again for ever. The commit
//! is what makes a receiver run a job, so a handoff it has no record of has not run there
//! from that record; the origin then aborts it at the receiver, whose abort of an unknown
//! handoff leaves a tombstone (a late phase one or commit of it is refused from then on). Once
//! the receiver confirms `aborted`, the job is decided again here, as after a receiver's own
//! abort ([`super::results::commit_refused`]).
//!
//! An abort the receiver does not confirm (it refuses it, or does not answer) is tried again on
//! the next passes; after [`MISSING_TRIES`] commits in a row answered 404 without a confirmed
//! abort the job fails here with a reason saying so, rather than wait for ever or risk running
//! it on both sides. Any other answer to the commit starts the count again. The count lives in
//! memory: a restart of the origin gives a handoff its tries again, still a bounded number
//! per run.

use std::sync::Arc;

use super::journal::{state, GridRow, Transition};
use super::wire::HandoffState;
use super::{blocking, data, CallError, Federation};

/// Commits answered 404 in a row, without a confirmed abort, after which the job fails.
pub const MISSING_TRIES: u32 = 5;

/// Whether a commit's answer is the receiver saying it has no such handoff.
pub(crate) fn is_missing<T>(r: &Result<T, CallError>) -> bool {
    matches!(r, Err(CallError::Refused(404, _)))
}

/// Forgets the 404 count of grid job `id` (its commit got another answer, or it moved on).
pub(crate) fn reset(fed: &Federation, id: u64) {
    fed.missing.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
}

/// Commit of handoff `h` (grid job `row`, at peer `i`) answered 404: abort it there, then
/// decide the job again; without a confirmed abort, count the try and fail the job after
/// [`MISSING_TRIES`].
pub(crate) async fn commit_missing(fed: &Arc<Federation>, i: usize, row: &GridRow, h: &str) -> anyhow::Result<()> {
    let peer = fed.peers[i].name.clone();
    let tries = {
        let mut m = fed.missing.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(row.id).or_insert(0);
        *n += 1;
        *n
    };
    let client = fed.peers[i].clone();
    let path = format!("/api/v1/peer/handoffs/{}/abort", data::encode(h));
    let r = blocking(move || client.call::<(), HandoffState>(&path, Some(&()))).await;
    fed.record(i, &r);
    let (to, why) = match r {
        Ok(s) if s.state == "aborted" => (
            state::WAITING,
            format!("handoff {h} is unknown at {peer} (404 to its commit: it lost its record of it); aborted there: decided again"),
        ),
        // It knows the handoff again (committed meanwhile): followed as usual.
        Ok(_) => {
            reset(fed, row.id);
            return Ok(());
        }
        Err(e) if tries >= MISSING_TRIES => (
            state::FAILED,
            format!(
                "handoff {h} is unknown at {peer} (404 to {tries} commits in a row) and its abort there was not confirmed ({e}): failed here rather than risk running it twice"
            ),
        ),
        Err(e) => {
            tracing::warn!(grid_job = row.id, %peer, handoff = h, tries, error = %e, "handoff unknown at the peer; its abort was not confirmed: tried again");
            return Ok(());
        }
    };
    tracing::warn!(grid_job = row.id, %peer, handoff = h, "{why}");
    let (j, id) = (fed.journal.clone(), row.id);
    blocking(move || {
        let t = Transition {
            reason: Some(&why),
            ..Default::default()
        };
        j.set_remote(id, None, "null")?;
        j.transition(id, state::MIGRATED, to, &t)
    })
    .await?;
    reset(fed, row.id);
    Ok(())
}
