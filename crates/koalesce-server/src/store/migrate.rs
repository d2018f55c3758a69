//! Migrations of older schemas to [`super::SCHEMA_VERSION`]. They run inside the transaction
//! that opens the database, so a failed migration leaves the database as it was.
//!
//! | from | to | change |
//! |---|---|---|
//! | 0 | 2 | `jobs.record` (the daemon's copy of a job) split into `core`, `meta` and `detail` |
//! | 2 | 3 | `tokens.expires_ms` (token expiry), `launches.lrm_id` (the LRM's id of a component) |
//! | 3 | 4 | `files.owner` (who registered a file; `NULL`: before owners, an admin's), `counters` (durable job id counter, seeded with the largest id) |
//! | 4 | 5 | `gridway_history` (GridWay bans and usage history) |
//! | 5 | 6 | `launches.nonce` (the launch's nonce, `''` for launches before nonces: their records carry none) |
//! | 6 | 7 | `removals` (replica files pending removal) and the index `replicas_by_path`; both created by the schema |
//!
//! Databases written by servers between these versions may carry part of a later change
//! already (a server with token expiry but the first jobs schema still wrote version 0):
//! each step checks the columns it changes rather than trusting the version alone.

use koalesce_api::dto::{ComponentDetail, JobDetail, Timeline as TimelineDto};
use koalesce_core::model::Timeline;
use koalesce_core::{JobState, Priority};
use rusqlite::{params, Transaction};
use serde::Deserialize;

use crate::daemon::records::{json, ComponentMeta, CoreSnapshot, StoredMeta};
use crate::jobdesc::JobDescription;

/// A component as schema 0 kept it inside a job's `record`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct LegacyComponent {
    processors: u32,
    site: Option<String>,
    state: String,
    exit_code: Option<i32>,
    stdout: Option<String>,
    stderr: Option<String>,
    dir: Option<String>,
}

/// The daemon's copy of a job in schema 0 (`jobs.record`).
#[derive(Debug, Deserialize)]
struct LegacyRecord {
    desc: Option<JobDescription>,
    state: JobState,
    priority: Priority,
    #[serde(default)]
    failure: Option<String>,
    #[serde(default)]
    started_ms: Option<u64>,
    #[serde(default)]
    finished_ms: Option<u64>,
    #[serde(default)]
    exit_ok: Option<bool>,
    #[serde(default)]
    placement_tries: u32,
    #[serde(default)]
    claiming_tries: u32,
    #[serde(default)]
    error_resubmissions: u32,
    #[serde(default)]
    attempt: u32,
    #[serde(default)]
    timeline: Timeline,
    #[serde(default)]
    components: Vec<LegacyComponent>,
    #[serde(default)]
    outputs: Vec<String>,
}

/// Brings a database of schema `version` to the current one (tables not there yet are left to
/// the schema's `CREATE TABLE IF NOT EXISTS`).
pub(super) fn migrate(tx: &Transaction<'_>, version: i64) -> Result<(), Box<dyn std::error::Error>> {
    if version < 2 && has_table(tx, "jobs")? {
        v0_to_v2(tx)?;
    }
    if version < 3 {
        v2_to_v3(tx)?;
    }
    if version < 4 {
        v3_to_v4(tx)?;
    }
    if version < 5 {
        v4_to_v5(tx)?;
    }
    if version < 6 {
        v5_to_v6(tx)?;
    }
    Ok(())
}

/// Schema 5 → 6: launch intents keep their launch's nonce (existing ones: `''`, which is what
/// their supervisors' records carry, having none).
fn v5_to_v6(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    if has_table(tx, "launches")? && !has_column(tx, "launches", "nonce")? {
        tx.execute_batch("ALTER TABLE launches ADD COLUMN nonce TEXT NOT NULL DEFAULT ''")?;
    }
    Ok(())
}

/// Schema 4 → 5: GridWay's bans and usage history survive restarts (`gridway_history`; an
/// older database has none, so the history starts empty, as it did before).
fn v4_to_v5(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS gridway_history (id INTEGER PRIMARY KEY CHECK (id = 1), history TEXT NOT NULL, saved_ms INTEGER NOT NULL)",
    )
}

/// Schema 3 → 4: files have owners (existing files: `NULL`, only an admin deletes them), and
/// the job id counter starts at the largest id given so far.
fn v3_to_v4(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    if has_table(tx, "files")? && !has_column(tx, "files", "owner")? {
        tx.execute_batch("ALTER TABLE files ADD COLUMN owner TEXT")?;
    }
    tx.execute_batch("CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)")?;
    if has_table(tx, "jobs")? {
        tx.execute_batch(
            "INSERT INTO counters (name, value) SELECT 'job_id', COALESCE(MAX(id), 0) FROM jobs WHERE true \
             ON CONFLICT(name) DO UPDATE SET value = max(value, excluded.value)",
        )?;
    }
    Ok(())
}

fn has_table(tx: &Transaction<'_>, name: &str) -> rusqlite::Result<bool> {
    tx.query_row(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [name],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
}

fn has_column(tx: &Transaction<'_>, table: &str, column: &str) -> rusqlite::Result<bool> {
    tx.query_row("SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2", [table, column], |r| {
        r.get::<_, i64>(0)
    })
    .map(|n| n > 0)
}

/// Schema 2 → 3: tokens may expire (`NULL`: never; existing tokens keep never expiring), and
/// launch intents keep their component's LRM id (`NULL`: the directory, as before).
fn v2_to_v3(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    if has_table(tx, "tokens")? && !has_column(tx, "tokens", "expires_ms")? {
        tx.execute_batch("ALTER TABLE tokens ADD COLUMN expires_ms INTEGER")?;
    }
    if has_table(tx, "launches")? && !has_column(tx, "launches", "lrm_id")? {
        tx.execute_batch("ALTER TABLE launches ADD COLUMN lrm_id TEXT")?;
    }
    Ok(())
}

/// Schema 0 → 2: the job's `record` is split into the core's snapshot, the daemon's data and
/// the API rendering.
fn v0_to_v2(tx: &Transaction<'_>) -> Result<(), Box<dyn std::error::Error>> {
    if !has_column(tx, "jobs", "record")? {
        return Ok(());
    }
    tx.execute_batch(
        "ALTER TABLE jobs RENAME TO jobs_v0;
         CREATE TABLE jobs (
             id INTEGER PRIMARY KEY, user TEXT NOT NULL, name TEXT NOT NULL, description TEXT NOT NULL,
             spec TEXT NOT NULL, state TEXT NOT NULL, core TEXT NOT NULL, meta TEXT NOT NULL,
             detail TEXT NOT NULL, submitted_ms INTEGER NOT NULL);",
    )?;
    let rows: Vec<(i64, String, String, String, String, String, i64)> = {
        let mut st = tx.prepare("SELECT id, user, name, description, spec, record, submitted_ms FROM jobs_v0 ORDER BY id")?;
        let rows = st.query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?))
        })?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    let mut insert = tx.prepare(
        "INSERT INTO jobs (id, user, name, description, spec, state, core, meta, detail, submitted_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?;
    for (id, user, name, description, spec, record, submitted) in rows {
        let rec: LegacyRecord = serde_json::from_str(&record).map_err(|e| format!("job {id}: unreadable record: {e}"))?;
        let desc = match rec.desc {
            Some(d) => d,
            None => JobDescription::parse(&description).map_err(|e| format!("job {id}: {e}"))?,
        };
        let mut timeline = rec.timeline;
        timeline.submitted = submitted as u64;
        timeline.started = timeline.started.or(rec.started_ms);
        timeline.finished = timeline.finished.or(rec.finished_ms);
        let core = CoreSnapshot {
            state: rec.state,
            priority: rec.priority,
            timeline,
            placement_tries: rec.placement_tries,
            claiming_tries: rec.claiming_tries,
            error_resubmissions: rec.error_resubmissions,
            held: false,
        };
        // The description column is what recovery parses; a record's copy must agree.
        let _ = desc;
        let meta = StoredMeta {
            attempt: rec.attempt,
            failure: rec.failure.clone(),
            components: rec
                .components
                .iter()
                .map(|c| ComponentMeta {
                    exit_code: c.exit_code,
                    dir: c.dir.clone(),
                })
                .collect(),
            outputs: rec.outputs.clone(),
            dependencies: Vec::new(),
            array: None,
            transfer_ms: None,
            reservation: None,
            staging_out: false,
        };
        let mut sites: Vec<String> = rec.components.iter().filter_map(|c| c.site.clone()).collect();
        sites.sort();
        sites.dedup();
        let detail = JobDetail {
            id: id as u64,
            name: name.clone(),
            user: user.clone(),
            state: rec.state.name().to_string(),
            priority: rec.priority.name().to_string(),
            size: rec.components.iter().map(|c| c.processors as u64).sum(),
            components: rec
                .components
                .iter()
                .enumerate()
                .map(|(i, c)| ComponentDetail {
                    index: i as u64,
                    processors: c.processors as u64,
                    site: c.site.clone(),
                    state: c.state.clone(),
                    exit_code: c.exit_code.map(i64::from),
                    stdout: c.stdout.clone(),
                    stderr: c.stderr.clone(),
                })
                .collect(),
            sites,
            submitted_ms: submitted as u64,
            started_ms: timeline.started,
            finished_ms: timeline.finished,
            exit_ok: rec.exit_ok,
            timeline: TimelineDto {
                submitted: submitted as u64,
                placed: timeline.placed,
                claimed: timeline.claimed,
                started: timeline.started,
                finished: timeline.finished,
                ftt_ms: timeline.ftt_ms,
                transfer_ms: None,
                pgt_ms: timeline.pgt_ms(),
                pwt_ms: timeline.pwt_ms(),
                twt_ms: timeline.twt_ms(),
            },
            placement_tries: rec.placement_tries as u64,
            claiming_tries: rec.claiming_tries as u64,
            failure: rec.failure,
            outputs: rec.outputs,
            broker: None,
            reason: None,
            array_id: None,
            task_id: None,
            tasks: Vec::new(),
            bag: None,
            begin_ms: None,
        };
        insert.execute(params![
            id,
            user,
            name,
            description,
            spec,
            rec.state.name(),
            json(&core),
            json(&meta),
            json(&detail),
            submitted
        ])?;
    }
    drop(insert);
    tx.execute_batch("DROP TABLE jobs_v0;")?;
    Ok(())
}
