//! The writer thread's loop (group commits, new jobs' rows ahead of a burst) and the WAL
//! checkpointer (see the module docs of [`super`]).

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rusqlite::Connection;

use super::{Request, WriteFailed, WriterStats};

/// How often the WAL is checkpointed into the database file.
const CHECKPOINT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

/// Copies committed WAL frames into the database file on a connection of its own, at the
/// normal priority: a passive checkpoint (it never blocks the writer or readers) every
/// [`CHECKPOINT_INTERVAL`]. SQLite's automatic checkpoint ran inside the commit that crossed
/// 1,000 pages, so that commit also copied the pages and fsynced the database file: on this
/// machine's ext4, commits of up to 130 ms that every submission in the group waited for.
/// Durability is the WAL's (fsynced at every commit); a checkpoint only moves committed pages.
/// Ends after every handle of the store is gone.
pub(super) fn checkpoint_loop(conn: Connection, store: std::sync::Weak<()>) {
    loop {
        std::thread::sleep(CHECKPOINT_INTERVAL);
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(error = %e, "WAL checkpoint failed");
        }
        if store.strong_count() == 0 {
            return;
        }
    }
}

/// Pending ops beyond which the first ops among them are committed in a group of their own.
const FIRST_SPLIT: usize = 16;

pub(super) fn writer_loop(mut conn: Connection, rx: mpsc::Receiver<Request>, stats: Arc<Mutex<WriterStats>>) {
    const MAX_GROUP: usize = 4096;
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(r) => group.push(r),
                Err(_) => break,
            }
        }
        if group.len() > FIRST_SPLIT && group.iter().any(|r| r.first) && group.iter().any(|r| !r.first) {
            let (firsts, rest): (Vec<Request>, Vec<Request>) = group.into_iter().partition(|r| r.first);
            commit_group(&mut conn, firsts, &stats, true);
            commit_group(&mut conn, rest, &stats, false);
        } else {
            commit_group(&mut conn, group, &stats, false);
        }
    }
}

/// Applies `group` in one transaction (each op in its own savepoint), commits, answers.
fn commit_group(conn: &mut Connection, group: Vec<Request>, stats: &Mutex<WriterStats>, firsts: bool) {
    let started = Instant::now();
    let n = group.len();
    let mut results: Vec<Result<(), WriteFailed>> = Vec::with_capacity(n);
    let mut waiters = Vec::with_capacity(n);
    let outcome = (|| -> rusqlite::Result<()> {
        let tx = conn.transaction()?;
        for req in group {
            waiters.push(req.done);
            let r = (|| -> rusqlite::Result<()> {
                let sp_tx = &tx;
                sp_tx.execute_batch("SAVEPOINT op")?;
                match (req.op)(sp_tx) {
                    Ok(()) => sp_tx.execute_batch("RELEASE op"),
                    Err(e) => {
                        let _ = sp_tx.execute_batch("ROLLBACK TO op; RELEASE op");
                        Err(e)
                    }
                }
            })();
            results.push(r.map_err(WriteFailed::new));
        }
        tx.commit()
    })();
    if let Err(e) = &outcome {
        tracing::error!(error = %e, ops = n, "group commit failed");
    }
    let us = started.elapsed().as_micros() as u64;
    {
        let mut s = stats.lock().unwrap_or_else(|p| p.into_inner());
        s.commits += 1;
        s.ops += n as u64;
        s.largest_group = s.largest_group.max(n as u64);
        s.longest_group_us = s.longest_group_us.max(us);
        s.first_groups += u64::from(firsts);
    }
    for (i, done) in waiters.into_iter().enumerate() {
        let r = match &outcome {
            Ok(()) => results.get(i).cloned().unwrap_or(Ok(())),
            Err(e) => Err(WriteFailed::new(format!("commit failed: {e}"))),
        };
        if let Some(d) = done {
            let _ = d.send(r);
        }
    }
    tracing::trace!(ops = n, ms = us as f64 / 1e3, firsts, "group committed");
}
