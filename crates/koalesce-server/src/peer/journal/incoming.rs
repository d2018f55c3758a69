//! The handoffs peers made to this server (table `incoming`), as the receiver keeps them:
//! prepared (phase one), committed to a job here, aborted (tombstones of handoffs never seen
//! included), released by their origin, and when what was received for them may go.

use rusqlite::{params, Connection, OptionalExtension};

use super::Journal;

/// One handoff received from a peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incoming {
    pub handoff: String,
    pub origin: String,
    pub user: String,
    pub description: String,
    /// `prepared`, `committed`, `aborted`.
    pub state: String,
    pub local_id: Option<u64>,
    /// The input files the origin offered (JSON list of `PeerFile`).
    pub inputs: String,
    /// The origin is done with the job (its outputs are back): its inputs are no longer needed
    /// for it here.
    pub released: bool,
    /// Last word from the origin about this prepared handoff (phase one, a commit try; Unix
    /// ms; 0: unknown): a handoff prepared and not committed for `handoff_timeout_ms` after it
    /// is aborted here.
    pub touched_ms: u64,
    /// When its job ended here (Unix ms; 0: not known to have ended): received data is kept
    /// `received_retention_ms` after it when the origin never releases the handoff.
    pub ended_ms: u64,
}

const INCOMING_COLUMNS: &str = "handoff, origin, user, description, state, local_id, inputs, released, touched_ms, ended_ms";

fn incoming_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Incoming> {
    Ok(Incoming {
        handoff: r.get(0)?,
        origin: r.get(1)?,
        user: r.get(2)?,
        description: r.get(3)?,
        state: r.get(4)?,
        local_id: r.get::<_, Option<i64>>(5)?.map(|v| v as u64),
        inputs: r.get(6)?,
        released: r.get::<_, i64>(7)? != 0,
        touched_ms: r.get::<_, i64>(8)?.max(0) as u64,
        ended_ms: r.get::<_, i64>(9)?.max(0) as u64,
    })
}

impl Journal {
    /// Phase one at the receiver: stores a handoff as prepared unless it is known; returns
    /// the stored row either way.
    pub fn prepare(&self, handoff: &str, origin: &str, user: &str, description: &str, inputs: &str) -> rusqlite::Result<Incoming> {
        self.with(|c| prepare_row(c, handoff, origin, user, description, inputs))
    }

    /// [`Journal::prepare`], unless the handoff is new and `origin` already has `cap` handoffs
    /// prepared here and not committed: then `Ok(Err(held))`, nothing stored (one lock: no
    /// other phase one comes between the count and the insert).
    pub fn prepare_within(
        &self,
        handoff: &str,
        origin: &str,
        user: &str,
        description: &str,
        inputs: &str,
        cap: u64,
    ) -> rusqlite::Result<Result<Incoming, u64>> {
        self.with(|c| {
            let known = c
                .query_row("SELECT 1 FROM incoming WHERE handoff = ?1", [handoff], |_| Ok(()))
                .optional()?
                .is_some();
            if !known {
                let held: i64 = c.query_row(
                    "SELECT COUNT(*) FROM incoming WHERE origin = ?1 AND state = 'prepared'",
                    [origin],
                    |r| r.get(0),
                )?;
                if held as u64 >= cap {
                    return Ok(Err(held as u64));
                }
            }
            prepare_row(c, handoff, origin, user, description, inputs).map(Ok)
        })
    }

    /// The tombstones `origin` left here: aborts of handoffs this server never saw.
    pub fn tombstones_of(&self, origin: &str) -> rusqlite::Result<u64> {
        self.with(|c| {
            c.query_row(
                "SELECT COUNT(*) FROM incoming WHERE origin = ?1 AND state = 'aborted' AND description = ''",
                [origin],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n as u64)
        })
    }

    pub fn incoming(&self, handoff: &str) -> rusqlite::Result<Option<Incoming>> {
        self.with(|c| {
            c.query_row(
                &format!("SELECT {INCOMING_COLUMNS} FROM incoming WHERE handoff = ?1"),
                [handoff],
                incoming_row,
            )
            .optional()
        })
    }

    /// Aborts a handoff that is not committed (a tombstone when it was never seen, so that a
    /// late phase one is refused). Returns the row as it is afterwards.
    pub fn abort(&self, handoff: &str, origin: &str) -> rusqlite::Result<Incoming> {
        self.with(|c| {
            c.execute(
                "INSERT OR IGNORE INTO incoming (handoff, origin, user, description, state) VALUES (?1, ?2, '', '', 'aborted')",
                params![handoff, origin],
            )?;
            c.execute(
                "UPDATE incoming SET state = 'aborted', touched_ms = 0 WHERE handoff = ?1 AND state = 'prepared'",
                [handoff],
            )?;
            c.query_row(
                &format!("SELECT {INCOMING_COLUMNS} FROM incoming WHERE handoff = ?1"),
                [handoff],
                incoming_row,
            )
        })
    }

    /// Records handoff `handoff`, unknown here, committed as job `local_id` (submitted for it
    /// with `description` before this journal lost its entry), whose received `inputs` (JSON
    /// list of `PeerFile`) it declares. The row afterwards.
    pub fn adopt(&self, handoff: &str, origin: &str, description: &str, inputs: &str, local_id: u64) -> rusqlite::Result<Incoming> {
        self.with(|c| {
            c.execute(
                "INSERT OR IGNORE INTO incoming (handoff, origin, user, description, state, local_id, inputs) VALUES (?1, ?2, '', ?3, 'committed', ?4, ?5)",
                params![handoff, origin, description, local_id as i64, inputs],
            )?;
            c.query_row(
                &format!("SELECT {INCOMING_COLUMNS} FROM incoming WHERE handoff = ?1"),
                [handoff],
                incoming_row,
            )
        })
    }

    /// Marks a prepared handoff committed as job `local_id`.
    pub fn committed(&self, handoff: &str, local_id: u64) -> rusqlite::Result<()> {
        self.with(|c| {
            c.execute(
                "UPDATE incoming SET state = 'committed', local_id = ?2 WHERE handoff = ?1 AND state = 'prepared'",
                params![handoff, local_id as i64],
            )?;
            Ok(())
        })
    }

    /// Marks a committed handoff done (its origin has what it needs); false when it is not
    /// committed.
    pub fn release(&self, handoff: &str) -> rusqlite::Result<bool> {
        self.with(|c| {
            c.execute(
                "UPDATE incoming SET released = 1 WHERE handoff = ?1 AND state = 'committed'",
                [handoff],
            )?;
            let r: Option<i64> = c
                .query_row(
                    "SELECT released FROM incoming WHERE handoff = ?1 AND state = 'committed'",
                    [handoff],
                    |r| r.get(0),
                )
                .optional()?;
            Ok(r == Some(1))
        })
    }

    /// The handoffs from `origin` whose inputs are still needed here (prepared, or committed
    /// and not released).
    pub fn live_incoming(&self, origin: &str) -> rusqlite::Result<Vec<Incoming>> {
        self.with(|c| {
            let mut st = c.prepare(&format!(
                "SELECT {INCOMING_COLUMNS} FROM incoming WHERE origin = ?1 AND released = 0 AND state IN ('prepared', 'committed')"
            ))?;
            let rows = st.query_map([origin], incoming_row)?;
            rows.collect()
        })
    }

    /// The origin spoke about prepared handoff `handoff` at `now` (Unix ms).
    pub fn touch(&self, handoff: &str, now: u64) -> rusqlite::Result<()> {
        self.with(|c| {
            c.execute(
                "UPDATE incoming SET touched_ms = ?2 WHERE handoff = ?1 AND state = 'prepared'",
                params![handoff, now as i64],
            )?;
            Ok(())
        })
    }

    /// Prepared handoffs the origin last spoke about before `before` (Unix ms). Those with no
    /// time recorded (written by an older version, or a crash between phase one and its
    /// time) get `now` first, so they have a full deadline from here.
    pub fn stale_prepared(&self, before: u64, now: u64) -> rusqlite::Result<Vec<String>> {
        self.with(|c| {
            c.execute(
                "UPDATE incoming SET touched_ms = ?1 WHERE state = 'prepared' AND touched_ms = 0",
                [now as i64],
            )?;
            let mut st = c.prepare("SELECT handoff FROM incoming WHERE state = 'prepared' AND touched_ms < ?1 ORDER BY handoff")?;
            let rows = st.query_map([before as i64], |r| r.get::<_, String>(0))?;
            rows.collect()
        })
    }

    /// Forgets aborted handoffs (tombstones included) aborted before `before` (Unix ms) whose
    /// received data is gone; those with no time recorded (aborted since the last pass, or by
    /// an older version) get `now` first, so each is kept a full period from here. Returns how
    /// many went.
    pub fn forget_aborted(&self, before: u64, now: u64) -> rusqlite::Result<usize> {
        self.with(|c| {
            c.execute(
                "UPDATE incoming SET touched_ms = ?1 WHERE state = 'aborted' AND touched_ms = 0",
                [now as i64],
            )?;
            c.execute(
                "DELETE FROM incoming WHERE state = 'aborted' AND swept = 1 AND touched_ms < ?1",
                [before as i64],
            )
        })
    }

    /// Aborted handoffs whose received data has not been swept yet.
    pub fn unswept_aborted(&self) -> rusqlite::Result<Vec<Incoming>> {
        self.with(|c| {
            let mut st = c.prepare(&format!(
                "SELECT {INCOMING_COLUMNS} FROM incoming WHERE state = 'aborted' AND swept = 0 ORDER BY handoff"
            ))?;
            let rows = st.query_map([], incoming_row)?;
            rows.collect()
        })
    }

    /// Records that the data received for `handoff` is gone: an aborted handoff, or a committed
    /// one that was released (by its origin's `done`, or after `received_retention_ms`).
    pub fn set_swept(&self, handoff: &str) -> rusqlite::Result<()> {
        self.with(|c| {
            c.execute(
                "UPDATE incoming SET swept = 1 WHERE handoff = ?1 AND (state = 'aborted' OR (state = 'committed' AND released = 1))",
                [handoff],
            )?;
            Ok(())
        })
    }

    /// Committed handoffs their origin has not released whose job is not known to have ended
    /// (it may still run here), or ended before `before` (Unix ms): those the retention of
    /// received data looks at.
    pub fn committed_unreleased(&self, before: u64) -> rusqlite::Result<Vec<Incoming>> {
        self.with(|c| {
            let mut st = c.prepare(&format!(
                "SELECT {INCOMING_COLUMNS} FROM incoming WHERE state = 'committed' AND released = 0 AND local_id IS NOT NULL \
                 AND (ended_ms = 0 OR ended_ms < ?1) ORDER BY handoff"
            ))?;
            let rows = st.query_map([before as i64], incoming_row)?;
            rows.collect()
        })
    }

    /// Records when the job of committed handoff `handoff` ended here (Unix ms, at least 1).
    pub fn set_ended(&self, handoff: &str, ended_ms: u64) -> rusqlite::Result<()> {
        self.with(|c| {
            c.execute(
                "UPDATE incoming SET ended_ms = ?2 WHERE handoff = ?1 AND state = 'committed'",
                params![handoff, ended_ms.max(1) as i64],
            )?;
            Ok(())
        })
    }

    /// Released handoffs whose received data has not been swept yet (a crash between the
    /// release and the removals).
    pub fn unswept_released(&self) -> rusqlite::Result<Vec<Incoming>> {
        self.with(|c| {
            let mut st = c.prepare(&format!(
                "SELECT {INCOMING_COLUMNS} FROM incoming WHERE state = 'committed' AND released = 1 AND swept = 0 ORDER BY handoff"
            ))?;
            let rows = st.query_map([], incoming_row)?;
            rows.collect()
        })
    }
}

/// Stores handoff `handoff` as prepared unless it is known; the stored row either way.
fn prepare_row(c: &Connection, handoff: &str, origin: &str, user: &str, description: &str, inputs: &str) -> rusqlite::Result<Incoming> {
    c.execute(
        "INSERT OR IGNORE INTO incoming (handoff, origin, user, description, state, inputs) VALUES (?1, ?2, ?3, ?4, 'prepared', ?5)",
        params![handoff, origin, user, description, inputs],
    )?;
    c.query_row(
        &format!("SELECT {INCOMING_COLUMNS} FROM incoming WHERE handoff = ?1"),
        [handoff],
        incoming_row,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handoffs_are_idempotent_and_aborts_leave_tombstones() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(&dir.path().join("f.db")).unwrap();
        let a = j.prepare("alpha-1-1", "alpha", "u", "name = 'x'", "[]").unwrap();
        assert_eq!(a.state, "prepared");
        // A second phase one (a retry) finds the same row.
        assert_eq!(j.prepare("alpha-1-1", "alpha", "u", "other", "[]").unwrap(), a);
        j.committed("alpha-1-1", 7).unwrap();
        // Committed cannot be aborted.
        let c = j.abort("alpha-1-1", "alpha").unwrap();
        assert_eq!((c.state.as_str(), c.local_id), ("committed", Some(7)));
        // An abort of an unknown handoff leaves a tombstone: a late phase one is refused.
        assert_eq!(j.abort("alpha-2-1", "alpha").unwrap().state, "aborted");
        assert_eq!(j.prepare("alpha-2-1", "alpha", "u", "d", "[]").unwrap().state, "aborted");
        j.committed("alpha-2-1", 9).unwrap();
        assert_eq!(j.incoming("alpha-2-1").unwrap().unwrap().local_id, None);
    }

    #[test]
    fn prepared_handoffs_expire_by_the_last_word_and_aborted_ones_wait_for_their_sweep() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(&dir.path().join("f.db")).unwrap();
        for h in ["alpha-1-1", "alpha-2-1", "alpha-3-1"] {
            j.prepare(h, "alpha", "u", "d", "[]").unwrap();
        }
        j.touch("alpha-1-1", 1_000).unwrap();
        j.touch("alpha-3-1", 5_000).unwrap();
        j.committed("alpha-3-1", 4).unwrap();
        j.touch("alpha-3-1", 1).unwrap();
        // alpha-2-1 has no time yet: it gets `now`, a full deadline from here.
        assert_eq!(j.stale_prepared(2_000, 9_000).unwrap(), vec!["alpha-1-1".to_string()]);
        assert_eq!(j.incoming("alpha-2-1").unwrap().unwrap().touched_ms, 9_000);
        assert_eq!(
            j.incoming("alpha-3-1").unwrap().unwrap().touched_ms,
            5_000,
            "only prepared ones are touched"
        );
        assert_eq!(
            j.stale_prepared(9_500, 9_600).unwrap(),
            vec!["alpha-1-1".to_string(), "alpha-2-1".to_string()]
        );
        // Aborted: waits for its sweep; a sweep mark on a prepared handoff does nothing.
        j.set_swept("alpha-2-1").unwrap();
        j.abort("alpha-1-1", "alpha").unwrap();
        j.abort("alpha-2-1", "alpha").unwrap();
        let unswept = |j: &Journal| j.unswept_aborted().unwrap().into_iter().map(|i| i.handoff).collect::<Vec<_>>();
        assert_eq!(unswept(&j), vec!["alpha-1-1".to_string(), "alpha-2-1".to_string()]);
        j.set_swept("alpha-1-1").unwrap();
        // Durable.
        drop(j);
        let j = Journal::open(&dir.path().join("f.db")).unwrap();
        assert_eq!(unswept(&j), vec!["alpha-2-1".to_string()]);
        assert!(
            j.stale_prepared(u64::MAX, 0).unwrap().is_empty(),
            "aborted and committed never expire"
        );
    }

    #[test]
    fn only_swept_aborted_handoffs_are_forgotten_a_full_period_after_their_abort() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(&dir.path().join("f.db")).unwrap();
        for h in ["alpha-1-1", "alpha-2-1", "alpha-3-1", "alpha-4-1"] {
            j.prepare(h, "alpha", "u", "d", "[]").unwrap();
            j.touch(h, 1).unwrap();
        }
        j.committed("alpha-2-1", 4).unwrap();
        j.abort("alpha-3-1", "alpha").unwrap();
        j.abort("alpha-9-1", "alpha").unwrap(); // a tombstone
        j.adopt("alpha-8-1", "alpha", "d", "[]", 5).unwrap();
        for h in ["alpha-3-1", "alpha-9-1"] {
            j.set_swept(h).unwrap();
        }
        // Aborted at some moment before this pass: stamped now, kept a full period from here,
        // even when the handoff was last touched long ago.
        assert_eq!(j.forget_aborted(5_000, 10_000).unwrap(), 0);
        assert_eq!(j.tombstones_of("alpha").unwrap(), 1);
        assert_eq!(j.forget_aborted(9_999, 10_001).unwrap(), 0);
        assert_eq!(j.forget_aborted(10_001, 20_000).unwrap(), 2);
        assert_eq!(j.tombstones_of("alpha").unwrap(), 0);
        // Prepared, committed (adopted too) and unswept aborted handoffs stay.
        j.abort("alpha-4-1", "alpha").unwrap();
        assert_eq!(j.forget_aborted(u64::MAX, 30_000).unwrap(), 0, "not swept");
        let left: Vec<String> = ["alpha-1-1", "alpha-2-1", "alpha-3-1", "alpha-4-1", "alpha-8-1", "alpha-9-1"]
            .into_iter()
            .filter(|h| j.incoming(h).unwrap().is_some())
            .map(str::to_string)
            .collect();
        assert_eq!(left, ["alpha-1-1", "alpha-2-1", "alpha-4-1", "alpha-8-1"]);
        assert_eq!(j.incoming("alpha-8-1").unwrap().unwrap().local_id, Some(5));
    }

    #[test]
    fn released_handoffs_no_longer_hold_their_inputs() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(&dir.path().join("f.db")).unwrap();
        for h in ["alpha-1-1", "alpha-2-1", "alpha-3-1"] {
            j.prepare(h, "alpha", "u", "d", "[]").unwrap();
        }
        j.prepare("gamma-1-1", "gamma", "u", "d", "[]").unwrap();
        j.abort("alpha-3-1", "alpha").unwrap();
        // Only a committed handoff is released (a prepared one may still run).
        assert!(!j.release("alpha-2-1").unwrap());
        j.committed("alpha-1-1", 4).unwrap();
        assert!(j.release("alpha-1-1").unwrap());
        assert!(j.release("alpha-1-1").unwrap(), "idempotent");
        let handoffs = |v: Vec<Incoming>| v.into_iter().map(|i| i.handoff).collect::<Vec<_>>();
        // Released and not swept: swept at the next pass, also after a crash.
        assert_eq!(handoffs(j.unswept_released().unwrap()), vec!["alpha-1-1".to_string()]);
        assert!(j.committed_unreleased(u64::MAX).unwrap().is_empty());
        let live: Vec<String> = j.live_incoming("alpha").unwrap().into_iter().map(|i| i.handoff).collect();
        assert_eq!(
            live,
            vec!["alpha-2-1".to_string()],
            "prepared stays live; released and aborted do not; other origins apart"
        );
        // Durable.
        drop(j);
        let j = Journal::open(&dir.path().join("f.db")).unwrap();
        assert!(j.incoming("alpha-1-1").unwrap().unwrap().released);
        assert_eq!(handoffs(j.unswept_released().unwrap()), vec!["alpha-1-1".to_string()]);
        j.set_swept("alpha-1-1").unwrap();
        assert!(j.unswept_released().unwrap().is_empty());
        // A committed handoff not released is the retention's to watch; a prepared one never is.
        j.committed("alpha-2-1", 5).unwrap();
        assert_eq!(
            handoffs(j.committed_unreleased(0).unwrap()),
            vec!["alpha-2-1".to_string()],
            "not known to have ended"
        );
        j.set_ended("alpha-2-1", 7_000).unwrap();
        assert!(j.committed_unreleased(7_000).unwrap().is_empty(), "ended, within the retention");
        assert_eq!(handoffs(j.committed_unreleased(7_001).unwrap()), vec!["alpha-2-1".to_string()]);
        j.set_swept("alpha-2-1").unwrap();
        assert!(j.unswept_released().unwrap().is_empty(), "not released: no sweep mark");
    }
}
