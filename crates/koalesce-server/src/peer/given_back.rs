//! A handoff that ends without the job running at the peer: where the job goes then.
//!
//! Two kinds of such handoffs are told apart, as a P2P grid scheduler of 002 treats a peer
//! that does not answer ("simply ignored for that request") apart from a peer that takes a
//! job:
//!
//! - **Given back** ([`Abort::GivenBack`]): the peer accepted the job (it answered phase one
//!   `prepared`, the origin's commit point) and then aborted it before it ran there — it
//!   refused the commit as aborted, or lost its record of the handoff and confirmed the abort.
//!   Counted per job (`GridRow::given_back`): once peers gave a job back [`MAX_HANDOFFS`]
//!   times it is handed over no more and runs here, so a peer that offers the best turnaround
//!   and then aborts every handoff cannot keep it in the grid queue for ever. It fails only
//!   when it cannot run here (a submission here would refuse it), with a reason saying so.
//! - **Unconfirmed** ([`Abort::Unconfirmed`]): the origin never had the peer's answer to phase
//!   one (a link that dropped, a peer too slow, a peer no longer configured, a crash of the
//!   origin), and the peer then confirmed the abort. Nobody's promise was broken: not counted,
//!   so a flapping link never fails a job. Still bounded: a job handed over
//!   [`MAX_HANDOFFS_IN_ALL`] times in all without running anywhere runs here when it can (and
//!   is decided again when it cannot: it is never failed for a link's sake).
//!
//! A job its user cancelled goes back to `waiting` whatever the counts: the grid scheduler
//! ends it `cancelled` from there.

use std::sync::Arc;

use super::journal::{state, GridRow, Transition};
use super::wire::HandoffState;
use super::{blocking, data, Federation};

/// Handoffs of one grid job that peers accepted and then gave back after which it runs here
/// (or fails, when it cannot run here) instead of being decided again.
pub const MAX_HANDOFFS: u32 = 10;

/// Handoffs of one grid job in all (given back or never confirmed) after which it runs here
/// when it can, instead of being handed over again.
pub const MAX_HANDOFFS_IN_ALL: u32 = 3 * MAX_HANDOFFS;

/// How a handoff ended without the job running at the peer (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Abort {
    /// The peer accepted it and then gave it back: counted.
    GivenBack,
    /// Its phase one was never confirmed here, then it was aborted there: not counted.
    Unconfirmed,
}

/// Where a grid job goes after a handoff that did not run it: the state, the reason users
/// read, and whether the handoff counts as given back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Next {
    pub to: &'static str,
    pub reason: String,
    pub given_back: bool,
}

/// Where grid job `row` goes after its handoff to `peer` was aborted before it ran (`why`;
/// how: `abort`). `here`: whether the job can run at this server's sites (Err: why not).
/// `waiting`, decided again; at [`MAX_HANDOFFS`] handoffs given back `submitting` (it runs
/// here) or, when it cannot run here, `failed`; at [`MAX_HANDOFFS_IN_ALL`] handoffs in all
/// `submitting` when it can run here. Each reason names the peer and the count.
pub(crate) fn decided_again(row: &GridRow, peer: &str, why: String, abort: Abort, here: Result<(), String>) -> Next {
    let counted = abort == Abort::GivenBack;
    let given_back = row.given_back.saturating_add(u32::from(counted));
    let next = |to, reason| Next {
        to,
        reason,
        given_back: counted,
    };
    if row.cancel {
        return next(state::WAITING, why);
    }
    let what = why.strip_suffix(": decided again").unwrap_or(&why);
    if counted && given_back >= MAX_HANDOFFS {
        let head =
            format!("{what}; peers accepted the job and gave it back {given_back} times (the last {peer}; at most {MAX_HANDOFFS} per job)");
        return match here {
            Ok(()) => next(state::SUBMITTING, format!("{head}: runs here rather than handed over again")),
            Err(e) => next(state::FAILED, format!("{head}, and it cannot run here ({e}): failed")),
        };
    }
    if row.attempts >= MAX_HANDOFFS_IN_ALL && here.is_ok() {
        return next(
            state::SUBMITTING,
            format!(
                "{what}; the job was handed over {} times and never ran (the last to {peer}; at most {MAX_HANDOFFS_IN_ALL} handoffs per job): runs here rather than handed over again",
                row.attempts
            ),
        );
    }
    next(state::WAITING, why)
}

/// A commit answered 409: if the peer aborted the handoff (it was not committed within its
/// `handoff_timeout_ms`), the job never ran there: it was given back ([`given_back`]).
pub(crate) async fn commit_refused(fed: &Arc<Federation>, i: usize, row: &GridRow, h: &str) -> anyhow::Result<()> {
    let client = fed.peers[i].clone();
    let path = format!("/api/v1/peer/handoffs/{}", data::encode(h));
    let r = blocking(move || client.call::<(), HandoffState>(&path, None)).await;
    fed.record(i, &r);
    if let Ok(s) = r {
        if s.state == "aborted" {
            let peer = &fed.peers[i].name;
            let why = format!("handoff {h} was aborted at {peer} before it was committed: decided again");
            given_back(fed, row, peer, why).await?;
        }
    }
    Ok(())
}

/// Migrated grid job `row`, which `peer` accepted, was aborted there before it ran (`why`):
/// counted, and decided again, run here or failed ([`decided_again`]).
pub(crate) async fn given_back(fed: &Arc<Federation>, row: &GridRow, peer: &str, why: String) -> anyhow::Result<()> {
    let next = decided_again(row, peer, why, Abort::GivenBack, fed.runs_here(&row.description));
    if next.to != state::WAITING {
        tracing::warn!(grid_job = row.id, %peer, "{}", next.reason);
    }
    leave_migrated(fed, row.id, next).await
}

/// Migrated grid job `id` is no longer the peer's: its remote job is forgotten and it leaves
/// `migrated` as `next` says (`waiting`: decided again; `submitting`: run here at the next
/// pass, which it wakes; or an end).
pub(crate) async fn leave_migrated(fed: &Arc<Federation>, id: u64, next: Next) -> anyhow::Result<()> {
    let j = fed.journal.clone();
    let to = next.to;
    blocking(move || {
        let t = Transition {
            reason: Some(&next.reason),
            given_back: next.given_back,
            ..Default::default()
        };
        j.set_remote(id, None, "null")?;
        j.transition(id, state::MIGRATED, next.to, &t)
    })
    .await?;
    if to == state::SUBMITTING {
        fed.wake.notify_one();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(attempts: u32, given_back: u32, cancel: bool) -> GridRow {
        GridRow {
            id: 1,
            user: "u".into(),
            name: "n".into(),
            description: String::new(),
            submitted_ms: 0,
            state: state::MIGRATED.into(),
            local_id: None,
            peer: Some("beta".into()),
            handoff: Some("alpha-1-1".into()),
            remote_id: None,
            remote: None,
            reason: None,
            attempts,
            outputs: None,
            data_error: None,
            released: false,
            logs: None,
            cancel,
            given_back,
        }
    }

    fn why() -> String {
        "aborted: decided again".to_string()
    }

    #[test]
    fn handoffs_given_back_are_counted_and_at_the_cap_the_job_runs_here() {
        let n = decided_again(&row(3, MAX_HANDOFFS - 2, false), "beta", why(), Abort::GivenBack, Ok(()));
        assert_eq!(
            n,
            Next {
                to: state::WAITING,
                reason: why(),
                given_back: true
            }
        );
        let n = decided_again(&row(MAX_HANDOFFS, MAX_HANDOFFS - 1, false), "beta", why(), Abort::GivenBack, Ok(()));
        assert_eq!((n.to, n.given_back), (state::SUBMITTING, true), "{n:?}");
        assert!(
            n.reason
                .starts_with("aborted; peers accepted the job and gave it back 10 times (the last beta")
                && n.reason.ends_with("runs here rather than handed over again"),
            "{n:?}"
        );
    }

    #[test]
    fn at_the_cap_a_job_that_cannot_run_here_fails_saying_why() {
        let n = decided_again(
            &row(MAX_HANDOFFS, MAX_HANDOFFS - 1, false),
            "beta",
            why(),
            Abort::GivenBack,
            Err("component 0 needs 8 processors".into()),
        );
        assert_eq!(n.to, state::FAILED, "{n:?}");
        assert!(
            n.reason.contains("gave it back 10 times") && n.reason.contains("cannot run here (component 0 needs 8 processors)"),
            "{n:?}"
        );
    }

    /// A link that drops every answer to phase one: the handoffs are not counted, so the job is
    /// decided again (not failed, as it was after 10 handoffs in all), and after
    /// `MAX_HANDOFFS_IN_ALL` it runs here when it can.
    #[test]
    fn unconfirmed_handoffs_are_not_counted_and_never_fail_a_job() {
        for attempts in [MAX_HANDOFFS, MAX_HANDOFFS + 1, MAX_HANDOFFS_IN_ALL - 1] {
            let n = decided_again(&row(attempts, 0, false), "beta", why(), Abort::Unconfirmed, Ok(()));
            assert_eq!(
                n,
                Next {
                    to: state::WAITING,
                    reason: why(),
                    given_back: false
                },
                "{attempts}"
            );
        }
        // Given back 9 times, then unconfirmed ones: still not at the cap.
        let n = decided_again(
            &row(MAX_HANDOFFS + 5, MAX_HANDOFFS - 1, false),
            "beta",
            why(),
            Abort::Unconfirmed,
            Ok(()),
        );
        assert_eq!(n.to, state::WAITING, "{n:?}");
        let n = decided_again(&row(MAX_HANDOFFS_IN_ALL, 0, false), "beta", why(), Abort::Unconfirmed, Ok(()));
        assert_eq!((n.to, n.given_back), (state::SUBMITTING, false), "{n:?}");
        assert!(n.reason.contains("handed over 30 times and never ran (the last to beta"), "{n:?}");
        // It cannot run here: decided again (a peer may still take it), never failed.
        let n = decided_again(
            &row(MAX_HANDOFFS_IN_ALL + 7, 0, false),
            "beta",
            why(),
            Abort::Unconfirmed,
            Err("no".into()),
        );
        assert_eq!(n.to, state::WAITING, "{n:?}");
    }

    #[test]
    fn a_cancelled_job_past_the_caps_goes_back_to_be_cancelled() {
        for abort in [Abort::GivenBack, Abort::Unconfirmed] {
            let n = decided_again(&row(MAX_HANDOFFS_IN_ALL, MAX_HANDOFFS, true), "beta", why(), abort, Ok(()));
            assert_eq!((n.to, n.reason), (state::WAITING, why()), "{abort:?}");
        }
    }
}
