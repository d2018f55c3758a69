//! Pending removals of replica files (`removals`): a row for every replica the catalogue
//! drops while its file is still on disk (replaced by other content, or its file deleted),
//! written in the same transaction that drops the replica. The file goes after the commit and
//! the row after the file ([`crate::daemon::removals`]); rows a crash left are done at the next
//! start. So a crash never leaves a file no record points to, nor a record whose file is gone.
//! A writer of a new copy records its path first ([`stage_in_op`]); registering a replica
//! clears every row of its path ([`note_registered`]).

use rusqlite::{params, Connection, Transaction};

use super::WriteOp;

/// A replica file to remove: the file's name when it was dropped, its site and path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    pub id: i64,
    pub name: String,
    pub site: String,
    pub path: String,
}

/// In [`super::register_replica_op`]'s transaction, before it changes the rows: the replicas
/// that registering `(name, size, sha256)` at `(site, path)` drops — those at other sites when
/// the content changes, and the one at `site` when its path is another.
pub(super) fn note_replaced(tx: &Transaction<'_>, name: &str, site: &str, path: &str, size: u64, sha256: &str) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO removals (name, site, path) SELECT name, site, path FROM replicas \
         WHERE name = ?1 AND ((site = ?2 AND path != ?3) OR (site != ?2 AND EXISTS \
         (SELECT 1 FROM files WHERE name = ?1 AND (size_bytes != ?4 OR sha256 != ?5))))",
        params![name, site, path, size as i64, sha256],
    )?;
    Ok(())
}

/// In [`super::register_replica_op`]'s transaction: `path` at `site` is a replica now, so no
/// pending removal of it is due any more (one a stage-in recorded before it wrote there,
/// [`stage_in_op`], or one of an older copy the new one overwrote).
pub(super) fn note_registered(tx: &Transaction<'_>, site: &str, path: &str) -> rusqlite::Result<()> {
    tx.execute("DELETE FROM removals WHERE site = ?1 AND path = ?2", [site, path])?;
    Ok(())
}

/// Before a stage-in writes `path` at `site` (committed first): a crash after the copy and
/// before its registration leaves a file no record names, which this row removes at the next
/// start; the registration clears it ([`note_registered`]).
pub fn stage_in_op(name: String, site: String, path: String) -> WriteOp {
    Box::new(move |tx| {
        tx.execute("INSERT INTO removals (name, site, path) VALUES (?1, ?2, ?3)", [&name, &site, &path])?;
        Ok(())
    })
}

/// In [`super::delete_file_op`]'s transaction, before it deletes the rows: every replica of
/// `name`.
pub(super) fn note_deleted(tx: &Transaction<'_>, name: &str) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO removals (name, site, path) SELECT name, site, path FROM replicas WHERE name = ?1",
        [name],
    )?;
    Ok(())
}

fn rows(conn: &Connection, sql: &str, p: impl rusqlite::Params) -> rusqlite::Result<Vec<Removal>> {
    let mut st = conn.prepare(sql)?;
    let rows = st.query_map(p, |r| {
        Ok(Removal {
            id: r.get(0)?,
            name: r.get(1)?,
            site: r.get(2)?,
            path: r.get(3)?,
        })
    })?;
    rows.collect()
}

/// Every pending removal, oldest first.
pub fn load_removals(conn: &Connection) -> rusqlite::Result<Vec<Removal>> {
    rows(conn, "SELECT id, name, site, path FROM removals ORDER BY id", [])
}

/// The pending removals of replicas of `name`, oldest first.
pub fn removals_of(conn: &Connection, name: &str) -> rusqlite::Result<Vec<Removal>> {
    rows(
        conn,
        "SELECT id, name, site, path FROM removals WHERE name = ?1 ORDER BY id",
        [name],
    )
}

/// Whether a replica (of any file) at `site` is recorded at `path`: its file is live.
pub fn replica_at(conn: &Connection, site: &str, path: &str) -> rusqlite::Result<bool> {
    conn.query_row("SELECT COUNT(*) FROM replicas WHERE site = ?1 AND path = ?2", [site, path], |r| {
        r.get::<_, i64>(0)
    })
    .map(|n| n > 0)
}

/// Removal `id` is done (its file is gone, or live again).
pub fn removal_done_op(id: i64) -> WriteOp {
    Box::new(move |tx| {
        tx.execute("DELETE FROM removals WHERE id = ?1", [id])?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{self, NewReplica, Store};

    fn replica(name: &str, site: &str, path: &str, sha: &str) -> NewReplica {
        NewReplica {
            name: name.into(),
            size: 4,
            sha256: sha.into(),
            owner: Some("alice".into()),
            site: site.into(),
            path: path.into(),
        }
    }

    fn pending(s: &Store) -> Vec<(String, String, String)> {
        s.read(load_removals)
            .unwrap()
            .into_iter()
            .map(|r| (r.name, r.site, r.path))
            .collect()
    }

    /// The rows a replacement or a deletion drops are pending removals in the same commit;
    /// another replica of the same content, or the same path overwritten, drops nothing.
    #[test]
    fn dropped_replicas_become_pending_removals_in_the_same_commit() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("db")).unwrap();
        s.write_blocking(store::register_replica_op(replica("f", "a", "/a/f", "v1")))
            .unwrap();
        s.write_blocking(store::register_replica_op(replica("f", "b", "/b/f", "v1")))
            .unwrap();
        assert!(pending(&s).is_empty(), "one more replica of the same content drops nothing");
        // New content at a: a's path is overwritten (not pending), b's copy is dropped.
        s.write_blocking(store::register_replica_op(replica("f", "a", "/a/f", "v2")))
            .unwrap();
        assert_eq!(pending(&s), [("f".into(), "b".into(), "/b/f".into())]);
        assert!(!s.read(|c| replica_at(c, "b", "/b/f")).unwrap());
        assert!(s.read(|c| replica_at(c, "a", "/a/f")).unwrap());
        // The same content at a under another path: the old path goes.
        s.write_blocking(store::register_replica_op(replica("f", "a", "/a/f2", "v2")))
            .unwrap();
        assert_eq!(pending(&s)[1], ("f".into(), "a".into(), "/a/f".into()));
        let first = s.read(|c| removals_of(c, "f")).unwrap()[0].id;
        s.write_blocking(removal_done_op(first)).unwrap();
        s.write_blocking(store::delete_file_op("f".into())).unwrap();
        assert_eq!(
            pending(&s),
            [("f".into(), "a".into(), "/a/f".into()), ("f".into(), "a".into(), "/a/f2".into())]
        );
        assert!(s.read(|c| removals_of(c, "g")).unwrap().is_empty());
        // A stage-in's row goes with its registration, and with it any other row of that path.
        s.write_blocking(stage_in_op("g".into(), "c".into(), "/c/g".into())).unwrap();
        assert_eq!(s.read(|c| removals_of(c, "g")).unwrap().len(), 1);
        s.write_blocking(store::register_replica_op(replica("g", "c", "/c/g", "v1")))
            .unwrap();
        assert!(s.read(|c| removals_of(c, "g")).unwrap().is_empty());
        assert_eq!(pending(&s).len(), 2, "other paths' rows stay");
    }
}
