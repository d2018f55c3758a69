//! The `launches` table: a component's launch intent, recorded durably before its supervisor is
//! spawned, and what became of it (submitted to its site, done), for recovery to adopt or settle.

use rusqlite::{params, Connection, Transaction};
use serde::{Deserialize, Serialize};

use super::WriteOp;

/// A launch intent (recorded durably before the component's supervisor is spawned).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchRow {
    pub job: u64,
    pub attempt: u32,
    pub component: u32,
    pub site: String,
    pub processors: u32,
    pub dir: String,
    pub done: bool,
    /// The component's LRM id once submitted, when it is not `dir` (a Slurm job:
    /// `CLUSTER:JOB:DIR`); recovery hands it to the site's backend.
    pub lrm_id: Option<String>,
    /// The launch's nonce (see [`crate::supervise`]): the component's records count only if
    /// they carry it. Empty for a launch of a server before nonces.
    #[serde(default)]
    pub nonce: String,
}

impl LaunchRow {
    /// The id the site's backend knows the component by: its LRM id, else its directory (the
    /// local executor's id; or a launch that crashed before its LRM answered).
    pub fn backend_id(&self) -> &str {
        self.lrm_id.as_deref().unwrap_or(&self.dir)
    }
}

pub fn insert_launch(tx: &Transaction<'_>, l: &LaunchRow) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT OR REPLACE INTO launches (job, attempt, component, site, processors, dir, done, lrm_id, nonce) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![l.job as i64, l.attempt, l.component, l.site, l.processors, l.dir, l.done as i64, l.lrm_id, l.nonce],
    )?;
    Ok(())
}

/// Records the launch intents of one attempt (all rows in one op: any row means all).
pub fn insert_launches_op(rows: Vec<LaunchRow>) -> WriteOp {
    Box::new(move |tx| rows.iter().try_for_each(|r| insert_launch(tx, r)))
}

/// Marks launch intents as done (the component ended, or will never run).
pub fn launches_done_op(done: Vec<(u64, u32, u32)>) -> WriteOp {
    Box::new(move |tx| {
        let mut stmt = tx.prepare_cached("UPDATE launches SET done = 1 WHERE job = ?1 AND attempt = ?2 AND component = ?3")?;
        for (job, attempt, comp) in &done {
            stmt.execute(params![*job as i64, attempt, comp])?;
        }
        Ok(())
    })
}

/// Records the LRM ids of submitted components: (job, attempt, component, id).
pub fn launches_submitted_op(ids: Vec<(u64, u32, u32, String)>) -> WriteOp {
    Box::new(move |tx| {
        let mut stmt = tx.prepare_cached("UPDATE launches SET lrm_id = ?4 WHERE job = ?1 AND attempt = ?2 AND component = ?3")?;
        for (j, a, c, id) in &ids {
            stmt.execute(params![*j as i64, a, c, id])?;
        }
        Ok(())
    })
}

pub fn load_open_launches(conn: &Connection) -> rusqlite::Result<Vec<LaunchRow>> {
    let mut st = conn.prepare(
        "SELECT job, attempt, component, site, processors, dir, done, lrm_id, nonce FROM launches WHERE done = 0 ORDER BY job, attempt, component",
    )?;
    let rows = st.query_map([], launch_row)?;
    rows.collect()
}

/// Every launch row (done or not) of one attempt of a job.
pub fn load_attempt(conn: &Connection, job: u64, attempt: u32) -> rusqlite::Result<Vec<LaunchRow>> {
    let mut st = conn.prepare_cached(
        "SELECT job, attempt, component, site, processors, dir, done, lrm_id, nonce FROM launches WHERE job = ?1 AND attempt = ?2 ORDER BY component",
    )?;
    let rows = st.query_map(params![job as i64, attempt], launch_row)?;
    rows.collect()
}

fn launch_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<LaunchRow> {
    Ok(LaunchRow {
        job: r.get::<_, i64>(0)? as u64,
        attempt: r.get(1)?,
        component: r.get(2)?,
        site: r.get(3)?,
        processors: r.get(4)?,
        dir: r.get(5)?,
        done: r.get::<_, i64>(6)? != 0,
        lrm_id: r.get(7)?,
        nonce: r.get(8)?,
    })
}
