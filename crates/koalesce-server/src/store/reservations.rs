//! The `reservations` table: advance reservations granted through the API (see
//! [`crate::reservations`]), with the site's own id for each.

use koalesce_api::dto::ReservationInfo;
use rusqlite::{params, Connection, OptionalExtension, Transaction};

/// A stored reservation: what the API shows, and the id its site gave it.
#[derive(Debug, Clone)]
pub struct ReservationRow {
    pub id: i64,
    pub info: ReservationInfo,
    pub backend_id: String,
}

/// The public id of row `id` (`R7`).
pub fn reservation_public_id(id: i64) -> String {
    format!("R{id}")
}

/// The row id of a public id (`R7`, `r7` or `7`).
pub fn parse_reservation_id(raw: &str) -> Option<i64> {
    raw.strip_prefix('R')
        .or_else(|| raw.strip_prefix('r'))
        .unwrap_or(raw)
        .parse()
        .ok()
        .filter(|&n| n > 0)
}

fn state_at(start: u64, end: u64, now: u64) -> &'static str {
    if now < start {
        "waiting"
    } else if now < end {
        "active"
    } else {
        "ended"
    }
}

const COLUMNS: &str = "id, user, site, processors, start_ms, end_ms, earliest_ms, latest_ms, flexible, created_ms, backend_id";

fn row(r: &rusqlite::Row<'_>, now: u64) -> rusqlite::Result<ReservationRow> {
    let id: i64 = r.get(0)?;
    let start = r.get::<_, i64>(4)? as u64;
    let end = r.get::<_, i64>(5)? as u64;
    Ok(ReservationRow {
        id,
        info: ReservationInfo {
            id: reservation_public_id(id),
            user: r.get(1)?,
            site: r.get(2)?,
            processors: r.get::<_, i64>(3)? as u32,
            start_ms: start,
            end_ms: end,
            earliest_start_ms: r.get::<_, i64>(6)? as u64,
            latest_start_ms: r.get::<_, i64>(7)? as u64,
            flexible: r.get::<_, i64>(8)? != 0,
            created_ms: r.get::<_, i64>(9)? as u64,
            state: state_at(start, end, now).to_string(),
        },
        backend_id: r.get(10)?,
    })
}

/// Reservations of `user` (everyone's with None), oldest first, their state as of `now`.
pub fn load_reservations(conn: &Connection, user: Option<&str>, now: u64) -> rusqlite::Result<Vec<ReservationRow>> {
    let mut st = conn.prepare(&format!(
        "SELECT {COLUMNS} FROM reservations WHERE ?1 IS NULL OR user = ?1 ORDER BY id"
    ))?;
    let rows = st.query_map([user], |r| row(r, now))?;
    rows.collect()
}

/// One page of [`load_reservations`]: ids above `after`, at most `limit` of them.
pub fn load_reservations_page(
    conn: &Connection,
    user: Option<&str>,
    now: u64,
    after: i64,
    limit: usize,
) -> rusqlite::Result<Vec<ReservationRow>> {
    let mut st = conn.prepare(&format!(
        "SELECT {COLUMNS} FROM reservations WHERE (?1 IS NULL OR user = ?1) AND id > ?2 ORDER BY id LIMIT ?3"
    ))?;
    let rows = st.query_map(params![user, after, limit as i64], |r| row(r, now))?;
    rows.collect()
}

pub fn load_reservation(conn: &Connection, id: i64, now: u64) -> rusqlite::Result<Option<ReservationRow>> {
    conn.query_row(&format!("SELECT {COLUMNS} FROM reservations WHERE id = ?1"), [id], |r| row(r, now))
        .optional()
}

/// Stores a granted reservation (its `id` and `state` are ignored) and returns it with its id
/// and state as of `info.created_ms`.
pub fn insert_reservation(tx: &Transaction<'_>, info: &ReservationInfo, backend_id: &str) -> rusqlite::Result<ReservationInfo> {
    tx.execute(
        &format!(
            "INSERT INTO reservations ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            &COLUMNS[4..]
        ),
        params![
            info.user,
            info.site,
            info.processors as i64,
            info.start_ms as i64,
            info.end_ms as i64,
            info.earliest_start_ms as i64,
            info.latest_start_ms as i64,
            info.flexible as i64,
            info.created_ms as i64,
            backend_id
        ],
    )?;
    let id = tx.last_insert_rowid();
    Ok(ReservationInfo {
        id: reservation_public_id(id),
        state: state_at(info.start_ms, info.end_ms, info.created_ms).to_string(),
        ..info.clone()
    })
}

pub fn delete_reservation(tx: &Transaction<'_>, id: i64) -> rusqlite::Result<()> {
    tx.execute("DELETE FROM reservations WHERE id = ?1", [id]).map(drop)
}

/// The site's new id for a reservation re-created at restart.
pub fn set_reservation_backend_id(tx: &Transaction<'_>, id: i64, backend_id: &str) -> rusqlite::Result<()> {
    tx.execute("UPDATE reservations SET backend_id = ?2 WHERE id = ?1", params![id, backend_id])
        .map(drop)
}

/// A flexible reservation its site moved: its new times, found by its site's id; the row's
/// public id, or `None` when no stored reservation has that id (not one of the API's).
pub fn move_reservation(tx: &Transaction<'_>, site: &str, backend_id: &str, start: u64, end: u64) -> rusqlite::Result<Option<String>> {
    let id: Option<i64> = tx
        .query_row(
            "UPDATE reservations SET start_ms = ?3, end_ms = ?4 WHERE site = ?1 AND backend_id = ?2 RETURNING id",
            params![site, backend_id, start as i64, end as i64],
            |r| r.get(0),
        )
        .optional()?;
    Ok(id.map(reservation_public_id))
}
