//! The writer thread's loop (group commits, new jobs' rows ahead of a burst) and the WAL
//! checkpointer (see the module docs of [`super`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rusqlite::Connection;

use super::{Request, WriteFailed, WriterStats, MAX_OTHER_GROUP};

/// How often the WAL is checkpointed into the database file.
const CHECKPOINT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// WAL frames (pages) the writer copies at most itself: once a background pass left no more
/// than these behind, the writer catches up (see [`checkpoint_loop`]).
const CATCH_UP_FRAMES: i64 = 256;

/// Background passes in a row before giving up until the next interval (a burst of writes
/// that keeps ahead of the copying).
const MAX_PASSES: usize = 8;

/// What the checkpointer tells the writer.
#[derive(Default)]
pub(super) struct Checkpoints {
    /// A background pass left at most [`CATCH_UP_FRAMES`] behind: the writer's next
    /// checkpoint (after it answered its group) copies the rest, and the group after restarts
    /// the WAL from its beginning.
    catch_up: AtomicBool,
}

/// Copies committed WAL frames into the database file on a connection of its own, at the
/// normal priority: passive checkpoints (they never block the writer or readers) every
/// [`CHECKPOINT_INTERVAL`]. SQLite's automatic checkpoint ran inside the commit that crossed
/// 1,000 pages, so that commit also copied the pages and fsynced the database file: on this
/// machine's ext4, commits of up to 130 ms that every submission in the group waited for.
///
/// A checkpoint on another connection than the writer's never lets the WAL start over, though:
/// SQLite rewinds the WAL only when a write transaction begins with every frame copied, and
/// under a steady stream of commits some frames always came after the background pass. The
/// WAL then grew without end (70 MB after 10,000 submissions), every commit appended to the
/// file (an fsync that also journals the file's new size and blocks) and readers searched an
/// ever longer WAL index: `bench submit` ran at half its former rate. So the background passes
/// copy until the last one left at most [`CATCH_UP_FRAMES`] behind, and then the writer copies
/// that rest itself, between two groups (see [`writer_loop`]): the next group writes the WAL
/// from its beginning again, over blocks the file already has.
///
/// Durability is the WAL's (fsynced at every commit); a checkpoint only moves committed pages.
/// Ends after every handle of the store is gone.
pub(super) fn checkpoint_loop(conn: Connection, store: std::sync::Weak<()>, ck: Arc<Checkpoints>) {
    loop {
        std::thread::sleep(CHECKPOINT_INTERVAL);
        let mut last_log = None;
        for _ in 0..MAX_PASSES {
            match passive_checkpoint(&conn) {
                Ok((log, done)) => {
                    // `log`: the WAL's frames when the pass began; frames committed since came
                    // after. Two passes in a row tell how many came during the first.
                    let behind = match last_log {
                        Some(prev) if log >= prev => log - prev,
                        // The WAL started over meanwhile: `log` frames are all new.
                        Some(_) => log,
                        None => log - done,
                    };
                    if done >= log && behind <= CATCH_UP_FRAMES {
                        ck.catch_up.store(log > 0, Ordering::Release);
                        break;
                    }
                    last_log = Some(log);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "WAL checkpoint failed");
                    break;
                }
            }
        }
        if store.strong_count() == 0 {
            return;
        }
    }
}

/// A passive checkpoint: (frames in the WAL, frames copied into the database file).
fn passive_checkpoint(conn: &Connection) -> rusqlite::Result<(i64, i64)> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| Ok((r.get(1)?, r.get(2)?)))
}

/// How long the writer puts its catch-up checkpoint off while writes are pending (see
/// [`writer_loop`]); the WAL grows meanwhile by what those writes add.
const CATCH_UP_DEFER_MAX: std::time::Duration = std::time::Duration::from_millis(250);

/// Pending ops beyond which the first ops among them are committed in a group of their own.
const FIRST_SPLIT: usize = 16;

pub(super) fn writer_loop(
    mut conn: Connection,
    rx: mpsc::Receiver<Request>,
    stats: Arc<Mutex<WriterStats>>,
    ck: Arc<Checkpoints>,
    readers: Arc<super::readers::Readers>,
) {
    // Ops taken from the channel and not committed yet, in the order they were enqueued.
    let mut pending: VecDeque<Request> = VecDeque::new();
    // Since when a catch-up checkpoint waits for a moment without pending writes.
    let mut catch_up_since: Option<Instant> = None;
    loop {
        if pending.is_empty() {
            match rx.recv() {
                Ok(r) => pending.push_back(r),
                Err(_) => return,
            }
        }
        take_queued(&rx, &mut pending);
        if pending.len() > FIRST_SPLIT && pending.iter().any(|r| r.first) && pending.iter().any(|r| !r.first) {
            let (firsts, rest): (VecDeque<Request>, VecDeque<Request>) = std::mem::take(&mut pending).into_iter().partition(|r| r.first);
            pending = rest;
            commit_group(&mut conn, firsts.into(), &stats, true);
        }
        // A few ops go together whatever they are; of a backlog, the next bounded group.
        let n = if pending.len() <= FIRST_SPLIT {
            pending.len()
        } else {
            pending.len().min(MAX_OTHER_GROUP)
        };
        if n > 0 {
            commit_group(&mut conn, pending.drain(..n).collect(), &stats, false);
        }
        // After the group was answered: the few frames the checkpointer left (so that the next
        // group writes the WAL from its beginning; see checkpoint_loop). With the store's read
        // connections held: a read that began before would keep the frames after its snapshot
        // from being copied, and the WAL from starting over (one that begins after, with every
        // frame copied, reads the database file and stands in the way of neither).
        //
        // Only when no write waits, or once it was put off for CATCH_UP_DEFER_MAX: the
        // checkpoint ends with an fsync of the database file, which on a shared disk took up
        // to 69 ms (`bench e2e`, `db_catch_up_max_ms`), and every write enqueued meanwhile
        // waited for it.
        let wanted = ck.catch_up.load(Ordering::Acquire);
        if !wanted {
            catch_up_since = None;
        } else {
            take_queued(&rx, &mut pending);
        }
        let due = wanted && {
            let since = *catch_up_since.get_or_insert_with(Instant::now);
            pending.is_empty() || since.elapsed() >= CATCH_UP_DEFER_MAX
        };
        if due {
            ck.catch_up.store(false, Ordering::Release);
            catch_up_since = None;
            let started = Instant::now();
            match readers.exclusive(|| passive_checkpoint(&conn)) {
                Ok(_) => {
                    let us = started.elapsed().as_micros() as u64;
                    let mut s = stats.lock().unwrap_or_else(|p| p.into_inner());
                    s.catch_ups += 1;
                    s.longest_catch_up_us = s.longest_catch_up_us.max(us);
                }
                Err(e) => tracing::warn!(error = %e, "WAL catch-up checkpoint failed"),
            }
        }
    }
}

/// Ops taken from the channel at most and not committed yet.
const MAX_PENDING: usize = 4096;

/// Moves what is queued in the channel to `pending` (up to [`MAX_PENDING`]), without waiting.
fn take_queued(rx: &mpsc::Receiver<Request>, pending: &mut VecDeque<Request>) {
    while pending.len() < MAX_PENDING {
        match rx.try_recv() {
            Ok(r) => pending.push_back(r),
            Err(_) => break,
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
                // Prepared once (parsing them for every op was a tenth of the writer's time).
                let run = |sql: &str| tx.prepare_cached(sql)?.execute([]).map(drop);
                run("SAVEPOINT op")?;
                match (req.op)(&tx) {
                    Ok(()) => run("RELEASE op"),
                    Err(e) => {
                        let _ = run("ROLLBACK TO op").and_then(|()| run("RELEASE op"));
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
