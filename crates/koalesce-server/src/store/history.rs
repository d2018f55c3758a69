//! GridWay's history in the store: the bans, usage history and share history the core's
//! GridWay rank and banning read ([`koalesce_core::scheduler::GridwayHistory`]), kept as one
//! JSON row so a restart ranks and bans as before it. Written whenever the core's copy changes
//! (after the actions of a scan or an event), read once at recovery.

use rusqlite::{params, Connection, OptionalExtension};

use super::WriteOp;

/// An op that stores `history` (the core's [`koalesce_core::scheduler::GridwayHistory`] as
/// JSON), replacing the previous one.
pub fn save_gridway_history_op(history: String, saved_ms: u64) -> WriteOp {
    Box::new(move |tx| {
        tx.execute(
            "INSERT INTO gridway_history (id, history, saved_ms) VALUES (1, ?1, ?2) \
             ON CONFLICT(id) DO UPDATE SET history = excluded.history, saved_ms = excluded.saved_ms",
            params![history, saved_ms as i64],
        )?;
        Ok(())
    })
}

/// The stored GridWay history (JSON), if any was saved.
pub fn load_gridway_history(conn: &Connection) -> rusqlite::Result<Option<String>> {
    conn.query_row("SELECT history FROM gridway_history WHERE id = 1", [], |r| r.get(0))
        .optional()
}
