//! The federation's durable journal, `DIR/federation.db` (SQLite, WAL, synchronous = FULL):
//! the grid queue (jobs submitted to this server's grid scheduler and where each went; here) and
//! the handoffs peers made to this server (`incoming.rs`). Every step of a migration is committed
//! here before the next message is sent, so that either server can be killed at any moment (see
//! [`super`] for the protocol).

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::{params, Connection, OptionalExtension};

mod incoming;

pub use incoming::Incoming;

/// The grid queue's states (column `grid_jobs.state`).
pub mod state {
    /// In the grid queue: not decided.
    pub const WAITING: &str = "waiting";
    /// Decided local: being submitted to this server's core (recovery looks the job up by
    /// its marked name before submitting again).
    pub const SUBMITTING: &str = "submitting";
    /// In this server's core as `local_id`.
    pub const LOCAL: &str = "local";
    /// Handoff sent to `peer`, not yet confirmed: the job runs nowhere. Recovery aborts it at
    /// the peer and puts the job back in the grid queue.
    pub const HANDING: &str = "handing";
    /// The peer holds the job prepared (commit point passed): it runs there, never here.
    pub const MIGRATED: &str = "migrated";
    /// Could not be submitted anywhere (its description was refused here): `reason` says why.
    pub const FAILED: &str = "failed";
    /// Cancelled by its user before it went into a core (here or at a peer).
    pub const CANCELLED: &str = "cancelled";
}

/// One row of the grid queue.
#[derive(Debug, Clone, PartialEq)]
pub struct GridRow {
    pub id: u64,
    pub user: String,
    pub name: String,
    pub description: String,
    pub submitted_ms: u64,
    pub state: String,
    pub local_id: Option<u64>,
    pub peer: Option<String>,
    pub handoff: Option<String>,
    pub remote_id: Option<u64>,
    /// The remote job's last known state, sites and result (JSON of `HandoffState`).
    pub remote: Option<String>,
    pub reason: Option<String>,
    /// Handoffs of this job (each names its handoff `ORIGIN-ID-N`, N = attempts).
    pub attempts: u32,
    /// Outputs fetched back from the peer and registered here (JSON list of names; None: not
    /// yet).
    pub outputs: Option<String>,
    /// Why the job's data did not move (yet).
    pub data_error: Option<String>,
    /// The peer confirmed it let go of the job's inputs (`POST .../done` answered): the job is
    /// over for the federation.
    pub released: bool,
    /// The logs of a migrated job that ended, fetched back and stored here (JSON list of
    /// `c<component>/<stream>`; None: not yet).
    pub logs: Option<String>,
    /// Its user asked to cancel it: delivered to wherever it is (retried until the peer
    /// answers).
    pub cancel: bool,
    /// Handoffs a peer accepted (confirmed phase one) and then gave back before the job ran
    /// there (aborted, lost): those [`super::MAX_HANDOFFS`] bounds.
    pub given_back: u32,
}

/// The journal; cheap to clone. Calls block on SQLite (run them off the async threads).
#[derive(Clone)]
pub struct Journal {
    conn: Arc<Mutex<Connection>>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS grid_jobs (
    id INTEGER PRIMARY KEY, user TEXT NOT NULL, name TEXT NOT NULL, description TEXT NOT NULL,
    submitted_ms INTEGER NOT NULL, state TEXT NOT NULL, local_id INTEGER, peer TEXT, handoff TEXT,
    remote_id INTEGER, remote TEXT, reason TEXT, attempts INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS grid_jobs_state ON grid_jobs(state);
CREATE TABLE IF NOT EXISTS incoming (
    handoff TEXT PRIMARY KEY, origin TEXT NOT NULL, user TEXT NOT NULL, description TEXT NOT NULL,
    state TEXT NOT NULL, local_id INTEGER);
CREATE INDEX IF NOT EXISTS incoming_state ON incoming(state);
CREATE INDEX IF NOT EXISTS incoming_origin_state ON incoming(origin, state);
";

/// Columns added after the first release of the journal (added to an older file on open).
const ADDED_COLUMNS: [(&str, &str); 11] = [
    ("grid_jobs", "outputs TEXT"),
    ("grid_jobs", "data_error TEXT"),
    ("incoming", "inputs TEXT NOT NULL DEFAULT '[]'"),
    ("grid_jobs", "released INTEGER NOT NULL DEFAULT 0"),
    ("incoming", "released INTEGER NOT NULL DEFAULT 0"),
    ("grid_jobs", "logs TEXT"),
    ("grid_jobs", "cancel INTEGER NOT NULL DEFAULT 0"),
    ("incoming", "touched_ms INTEGER NOT NULL DEFAULT 0"),
    ("incoming", "swept INTEGER NOT NULL DEFAULT 0"),
    ("incoming", "ended_ms INTEGER NOT NULL DEFAULT 0"),
    ("grid_jobs", "given_back INTEGER NOT NULL DEFAULT 0"),
];

const GRID_COLUMNS: &str =
    "id, user, name, description, submitted_ms, state, local_id, peer, handoff, remote_id, remote, reason, attempts, \
     outputs, data_error, released, logs, cancel, given_back";

fn grid_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<GridRow> {
    Ok(GridRow {
        id: r.get::<_, i64>(0)? as u64,
        user: r.get(1)?,
        name: r.get(2)?,
        description: r.get(3)?,
        submitted_ms: r.get::<_, i64>(4)? as u64,
        state: r.get(5)?,
        local_id: r.get::<_, Option<i64>>(6)?.map(|v| v as u64),
        peer: r.get(7)?,
        handoff: r.get(8)?,
        remote_id: r.get::<_, Option<i64>>(9)?.map(|v| v as u64),
        remote: r.get(10)?,
        reason: r.get(11)?,
        attempts: r.get::<_, i64>(12)? as u32,
        outputs: r.get(13)?,
        data_error: r.get(14)?,
        released: r.get::<_, i64>(15)? != 0,
        logs: r.get(16)?,
        cancel: r.get::<_, i64>(17)? != 0,
        given_back: r.get::<_, i64>(18)?.max(0) as u32,
    })
}

impl Journal {
    pub fn open(path: &Path) -> rusqlite::Result<Journal> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.execute_batch(SCHEMA)?;
        for (table, column) in ADDED_COLUMNS {
            let name = column.split(' ').next().unwrap_or(column);
            let has: bool = conn.query_row(
                &format!("SELECT COUNT(*) > 0 FROM pragma_table_info('{table}') WHERE name = ?1"),
                [name],
                |r| r.get(0),
            )?;
            if !has {
                conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column}"))?;
            }
        }
        Ok(Journal {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> rusqlite::Result<T> {
        let c = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        f(&c)
    }

    /// Adds a job to the grid queue; returns its id (durable on return).
    pub fn add_grid_job(&self, user: &str, name: &str, description: &str, now: u64) -> rusqlite::Result<u64> {
        self.with(|c| {
            c.execute(
                "INSERT INTO grid_jobs (user, name, description, submitted_ms, state) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![user, name, description, now as i64, state::WAITING],
            )?;
            Ok(c.last_insert_rowid() as u64)
        })
    }

    pub fn grid_job(&self, id: u64) -> rusqlite::Result<Option<GridRow>> {
        self.with(|c| {
            c.query_row(
                &format!("SELECT {GRID_COLUMNS} FROM grid_jobs WHERE id = ?1"),
                [id as i64],
                grid_row,
            )
            .optional()
        })
    }

    /// The grid job handed over as `handoff`.
    pub fn grid_job_by_handoff(&self, handoff: &str) -> rusqlite::Result<Option<GridRow>> {
        self.with(|c| {
            c.query_row(
                &format!("SELECT {GRID_COLUMNS} FROM grid_jobs WHERE handoff = ?1"),
                [handoff],
                grid_row,
            )
            .optional()
        })
    }

    /// Records the outputs fetched back for a migrated job (JSON list of names here).
    pub fn set_outputs(&self, id: u64, outputs: &str) -> rusqlite::Result<()> {
        self.with(|c| {
            c.execute(
                "UPDATE grid_jobs SET outputs = ?2, data_error = NULL WHERE id = ?1",
                params![id as i64, outputs],
            )?;
            Ok(())
        })
    }

    /// Records why a job's data did not move (None: clears it).
    pub fn set_data_error(&self, id: u64, error: Option<&str>) -> rusqlite::Result<()> {
        self.with(|c| {
            c.execute("UPDATE grid_jobs SET data_error = ?2 WHERE id = ?1", params![id as i64, error])?;
            Ok(())
        })
    }

    /// Grid jobs in the given states (all when empty), of `user` (all: None), by id. Selected
    /// by SQLite (the state index), not read whole: the grid scheduler asks every pass, and
    /// the queue keeps every grid job ever submitted.
    pub fn grid_jobs(&self, states: &[&str], user: Option<&str>) -> rusqlite::Result<Vec<GridRow>> {
        self.select_grid(states, user, false)
    }

    /// Migrated grid jobs not released at their peer yet: those the grid scheduler follows.
    pub fn migrated_unreleased(&self) -> rusqlite::Result<Vec<GridRow>> {
        self.select_grid(&[state::MIGRATED], None, true)
    }

    fn select_grid(&self, states: &[&str], user: Option<&str>, unreleased: bool) -> rusqlite::Result<Vec<GridRow>> {
        let mut sql = format!("SELECT {GRID_COLUMNS} FROM grid_jobs WHERE 1 = 1");
        let mut args: Vec<&str> = Vec::new();
        if !states.is_empty() {
            let marks = (0..states.len()).map(|k| format!("?{}", k + 1)).collect::<Vec<_>>().join(", ");
            sql.push_str(&format!(" AND state IN ({marks})"));
            args.extend_from_slice(states);
        }
        if let Some(u) = user {
            args.push(u);
            sql.push_str(&format!(" AND user = ?{}", args.len()));
        }
        if unreleased {
            sql.push_str(" AND released = 0");
        }
        sql.push_str(" ORDER BY id");
        self.with(|c| {
            let mut st = c.prepare(&sql)?;
            let rows = st.query_map(rusqlite::params_from_iter(args), grid_row)?;
            rows.collect()
        })
    }

    /// Moves a grid job from `from` to `to` (and sets the given columns); false when it was
    /// not in `from` (someone else moved it).
    pub fn transition(&self, id: u64, from: &str, to: &str, set: &Transition<'_>) -> rusqlite::Result<bool> {
        self.with(|c| {
            let n = c.execute(
                "UPDATE grid_jobs SET state = ?3,
                     local_id = COALESCE(?4, local_id), peer = COALESCE(?5, peer), handoff = COALESCE(?6, handoff),
                     remote_id = COALESCE(?7, remote_id), reason = COALESCE(?8, reason), attempts = attempts + ?9,
                     given_back = given_back + ?10
                 WHERE id = ?1 AND state = ?2",
                params![
                    id as i64,
                    from,
                    to,
                    set.local_id.map(|v| v as i64),
                    set.peer,
                    set.handoff,
                    set.remote_id.map(|v| v as i64),
                    set.reason,
                    i64::from(set.new_attempt),
                    i64::from(set.given_back)
                ],
            )?;
            Ok(n == 1)
        })
    }

    /// Records the remote job's last known state (JSON).
    pub fn set_remote(&self, id: u64, remote_id: Option<u64>, remote: &str) -> rusqlite::Result<()> {
        self.with(|c| {
            c.execute(
                "UPDATE grid_jobs SET remote = ?2, remote_id = COALESCE(?3, remote_id) WHERE id = ?1",
                params![id as i64, remote, remote_id.map(|v| v as i64)],
            )?;
            Ok(())
        })
    }

    /// Marks grid job `id` released at its peer (the peer confirmed `done`).
    pub fn set_released(&self, id: u64) -> rusqlite::Result<()> {
        self.with(|c| {
            c.execute("UPDATE grid_jobs SET released = 1 WHERE id = ?1", [id as i64])?;
            Ok(())
        })
    }

    /// Records the logs fetched back for a migrated job that ended (JSON list of names).
    pub fn set_logs(&self, id: u64, logs: &str) -> rusqlite::Result<()> {
        self.with(|c| {
            c.execute(
                "UPDATE grid_jobs SET logs = ?2, data_error = NULL WHERE id = ?1",
                params![id as i64, logs],
            )?;
            Ok(())
        })
    }

    /// Records that grid job `id`'s user asked to cancel it (durable: delivered to the peer
    /// that runs it until it answers).
    pub fn request_cancel(&self, id: u64) -> rusqlite::Result<()> {
        self.with(|c| {
            c.execute("UPDATE grid_jobs SET cancel = 1 WHERE id = ?1", [id as i64])?;
            Ok(())
        })
    }

    /// Counts of grid jobs per state and of committed incoming handoffs.
    pub fn counts(&self) -> rusqlite::Result<(Vec<(String, u64)>, u64)> {
        self.with(|c| {
            let mut st = c.prepare("SELECT state, COUNT(*) FROM grid_jobs GROUP BY state ORDER BY state")?;
            let rows = st
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let received: i64 = c.query_row("SELECT COUNT(*) FROM incoming WHERE state = 'committed'", [], |r| r.get(0))?;
            Ok((rows, received as u64))
        })
    }
}

/// Columns a transition sets (None: unchanged).
#[derive(Debug, Default)]
pub struct Transition<'a> {
    pub local_id: Option<u64>,
    pub peer: Option<&'a str>,
    pub handoff: Option<&'a str>,
    pub remote_id: Option<u64>,
    pub reason: Option<&'a str>,
    /// Counts a new handoff attempt.
    pub new_attempt: bool,
    /// Counts a handoff a peer accepted and gave back.
    pub given_back: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_only_from_the_expected_state() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(&dir.path().join("f.db")).unwrap();
        let id = j.add_grid_job("u", "n", "d", 5).unwrap();
        let t = Transition {
            peer: Some("beta"),
            handoff: Some("alpha-1-1"),
            new_attempt: true,
            ..Default::default()
        };
        assert!(j.transition(id, state::WAITING, state::HANDING, &t).unwrap());
        assert!(!j.transition(id, state::WAITING, state::SUBMITTING, &Transition::default()).unwrap());
        let r = j.grid_job(id).unwrap().unwrap();
        assert_eq!((r.state.as_str(), r.peer.as_deref(), r.attempts), (state::HANDING, Some("beta"), 1));
        // Reopened: the same rows (durable).
        drop(j);
        let j = Journal::open(&dir.path().join("f.db")).unwrap();
        assert_eq!(j.grid_jobs(&[state::HANDING], None).unwrap().len(), 1);
        // Selected by state and user; migrated ones followed until released.
        let other = j.add_grid_job("v", "m", "d", 6).unwrap();
        assert!(j.transition(id, state::HANDING, state::MIGRATED, &Transition::default()).unwrap());
        let ids = |rows: Vec<GridRow>| rows.into_iter().map(|r| r.id).collect::<Vec<_>>();
        assert_eq!(ids(j.grid_jobs(&[], None).unwrap()), vec![id, other]);
        assert_eq!(ids(j.grid_jobs(&[state::WAITING, state::MIGRATED], None).unwrap()), vec![id, other]);
        assert_eq!(ids(j.grid_jobs(&[state::WAITING], None).unwrap()), vec![other]);
        assert_eq!(ids(j.grid_jobs(&[], Some("v")).unwrap()), vec![other]);
        assert!(j.grid_jobs(&[state::MIGRATED], Some("v")).unwrap().is_empty());
        assert_eq!(ids(j.migrated_unreleased().unwrap()), vec![id]);
        j.set_released(id).unwrap();
        assert!(j.migrated_unreleased().unwrap().is_empty());
        assert_eq!(ids(j.grid_jobs(&[state::MIGRATED], None).unwrap()), vec![id]);
        // Given back by its peer: counted apart from the handoffs.
        let back = Transition {
            given_back: true,
            ..Default::default()
        };
        assert!(j.transition(id, state::MIGRATED, state::WAITING, &back).unwrap());
        let r = j.grid_job(id).unwrap().unwrap();
        assert_eq!((r.attempts, r.given_back), (1, 1));
    }
}
