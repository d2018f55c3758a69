//! Store: durability across reopen, group commit correctness.

use std::sync::Arc;

use koalesce_server::store::{self, Store};
use rusqlite::params;

fn insert(id: i64) -> store::WriteOp {
    Box::new(move |tx| {
        tx.execute(
            "INSERT INTO jobs (id, user, name, description, spec, state, core, meta, detail, submitted_ms) \
             VALUES (?1, 'u', 'n', 'd', 's', 'queued', '{}', '{}', '{}', ?1)",
            params![id],
        )?;
        Ok(())
    })
}

fn count(store: &Store) -> i64 {
    store.read(|c| c.query_row("SELECT COUNT(*) FROM jobs", [], |r| r.get(0))).unwrap()
}

#[test]
fn committed_writes_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.db");
    {
        let s = Store::open(&path).unwrap();
        for i in 1..=10 {
            s.write_blocking(insert(i)).unwrap();
        }
        assert_eq!(count(&s), 10);
    }
    let s = Store::open(&path).unwrap();
    assert_eq!(count(&s), 10);
    let ids: Vec<i64> = s
        .read(|c| {
            let mut st = c.prepare("SELECT id FROM jobs ORDER BY id")?;
            let v = st.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<Vec<i64>>>();
            v
        })
        .unwrap();
    assert_eq!(ids, (1..=10).collect::<Vec<_>>());
}

#[test]
fn group_commit_acks_every_op_after_commit_and_batches() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(Store::open(&dir.path().join("k.db")).unwrap());
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..100 {
                    let id = t * 1000 + i + 1;
                    s.write_blocking(insert(id)).unwrap();
                    // Acknowledged → visible to a reader.
                    let seen: i64 = s
                        .read(|c| c.query_row("SELECT COUNT(*) FROM jobs WHERE id = ?1", [id], |r| r.get(0)))
                        .unwrap();
                    assert_eq!(seen, 1, "acked op {id} not committed");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(count(&s), 1600);
    let st = s.stats();
    assert!(st.ops >= 1600);
    assert!(st.commits < st.ops, "no grouping: {st:?}");
}

#[test]
fn a_failing_op_does_not_undo_its_group() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join("k.db")).unwrap();
    let a = s.submit(insert(1));
    let b = s.submit(insert(1)); // duplicate key: fails alone
    let c = s.submit(insert(2));
    assert!(a.blocking_recv().unwrap().is_ok());
    assert!(b.blocking_recv().unwrap().is_err());
    assert!(c.blocking_recv().unwrap().is_ok());
    assert_eq!(count(&s), 2);
}

#[test]
fn tokens_are_stored_hashed() {
    let dir = tempfile::tempdir().unwrap();
    let tok = koalesce_server::create_token(dir.path(), "alice", true).unwrap();
    let conn = store::open_db(&dir.path().join(koalesce_server::DB_FILE)).unwrap();
    let stored: String = conn.query_row("SELECT hash FROM tokens", [], |r| r.get(0)).unwrap();
    assert_ne!(stored, tok);
    assert_eq!(stored, store::sha256_hex(tok.as_bytes()));
    assert_eq!(store::lookup_token(&conn, &tok).unwrap(), Some(("alice".into(), true)));
    assert_eq!(store::lookup_token(&conn, "nope").unwrap(), None);
}

/// Opening the database (as `koalesce token create` does beside a running server) waits for
/// the server's writer instead of failing with "database is locked" when the server commits
/// between the opener's read of the schema version and its write of it.
#[test]
fn the_database_opens_beside_a_busy_writer() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.db");
    let s = Arc::new(Store::open(&path).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writer = {
        let (s, stop, written) = (s.clone(), stop.clone(), written.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let id = written.fetch_add(1, Ordering::Relaxed) as i64 + 1;
                s.write_blocking(insert(id)).unwrap();
            }
        })
    };
    // Opens go on for a second and until the writer committed 50 times meanwhile.
    let t0 = std::time::Instant::now();
    let mut opens = 0;
    while t0.elapsed() < std::time::Duration::from_secs(1) || written.load(Ordering::Relaxed) < 50 {
        if let Err(e) = store::open_db(&path) {
            panic!("open {opens} beside the writer: {e}");
        }
        opens += 1;
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(opens > 0);
}

/// A new job's row (`submit_first`) enqueued behind a burst of other writes is committed in a
/// group of its own ahead of them and acknowledged after that commit; the other writes keep
/// their order among themselves, and all are committed in the end.
#[test]
fn first_ops_go_ahead_of_a_burst_and_the_others_keep_their_order() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join("k.db")).unwrap();
    s.write_blocking(Box::new(|tx| tx.execute_batch("CREATE TABLE log (seq INTEGER NOT NULL)")))
        .unwrap();
    // Holds the writer while the burst is enqueued behind it.
    let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
    let (inside_tx, inside_rx) = std::sync::mpsc::channel::<()>();
    let held = s.submit(Box::new(move |_| {
        let _ = inside_tx.send(());
        let _ = hold_rx.recv_timeout(std::time::Duration::from_secs(10));
        Ok(())
    }));
    inside_rx.recv().unwrap();
    let burst: Vec<_> = (0..100i64)
        .map(|k| s.submit(Box::new(move |tx| tx.execute("INSERT INTO log (seq) VALUES (?1)", [k]).map(drop))))
        .collect();
    let first = s.submit_first(insert(7));
    hold_tx.send(()).unwrap();
    first.blocking_recv().unwrap().unwrap();
    // Acknowledged: committed and visible.
    let seen: i64 = s
        .read(|c| c.query_row("SELECT COUNT(*) FROM jobs WHERE id = 7", [], |r| r.get(0)))
        .unwrap();
    assert_eq!(seen, 1);
    for b in burst {
        b.blocking_recv().unwrap().unwrap();
    }
    held.blocking_recv().unwrap().unwrap();
    let order: Vec<i64> = s
        .read(|c| {
            let mut st = c.prepare("SELECT seq FROM log ORDER BY rowid")?;
            let v = st.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<Vec<i64>>>();
            v
        })
        .unwrap();
    assert_eq!(order, (0..100).collect::<Vec<_>>());
    let st = s.stats();
    assert_eq!(st.first_groups, 1, "{st:?}");
}

/// A backlog of other writes (a scan's launches and the jobs' ends) is committed in groups of
/// at most `store::MAX_OTHER_GROUP`, and a new job's row enqueued while the first of them is
/// being applied is committed right after that group, ahead of the rest of the backlog (before,
/// the whole backlog was one group, and the new job's row waited for all of it). The row's own
/// op counts the backlog's rows committed before it; the backlog keeps its order.
#[test]
fn a_new_jobs_row_waits_for_one_bounded_group_of_a_backlog() {
    const BACKLOG: i64 = 1000;
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join("k.db")).unwrap();
    s.write_blocking(Box::new(|tx| {
        tx.execute_batch("CREATE TABLE log (seq INTEGER NOT NULL); CREATE TABLE seen (n INTEGER NOT NULL)")
    }))
    .unwrap();
    // Holds the writer while the backlog is enqueued behind it.
    let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
    let (inside_tx, inside_rx) = std::sync::mpsc::channel::<()>();
    let held = s.submit(Box::new(move |_| {
        let _ = inside_tx.send(());
        let _ = hold_rx.recv_timeout(std::time::Duration::from_secs(10));
        Ok(())
    }));
    inside_rx.recv().unwrap();
    // The backlog's 11th op holds the writer again, inside the backlog's first group.
    let (hold2_tx, hold2_rx) = std::sync::mpsc::channel::<()>();
    let (inside2_tx, inside2_rx) = std::sync::mpsc::channel::<()>();
    let mut hold2 = Some((hold2_rx, inside2_tx));
    let backlog: Vec<_> = (0..BACKLOG)
        .map(|k| {
            let wait = if k == 10 { hold2.take() } else { None };
            s.submit(Box::new(move |tx| {
                if let Some((rx, inside)) = wait {
                    let _ = inside.send(());
                    let _ = rx.recv_timeout(std::time::Duration::from_secs(10));
                }
                tx.execute("INSERT INTO log (seq) VALUES (?1)", [k]).map(drop)
            }))
        })
        .collect();
    hold_tx.send(()).unwrap();
    inside2_rx.recv().unwrap();
    let first = s.submit_first(Box::new(|tx| {
        tx.execute("INSERT INTO seen (n) SELECT COUNT(*) FROM log", []).map(drop)
    }));
    hold2_tx.send(()).unwrap();
    first.blocking_recv().unwrap().unwrap();
    for b in backlog {
        b.blocking_recv().unwrap().unwrap();
    }
    held.blocking_recv().unwrap().unwrap();
    let before: i64 = s.read(|c| c.query_row("SELECT n FROM seen", [], |r| r.get(0))).unwrap();
    assert_eq!(
        before,
        store::MAX_OTHER_GROUP as i64,
        "the new job's row was committed after {before} of the backlog's {BACKLOG} writes"
    );
    let order: Vec<i64> = s
        .read(|c| {
            let mut st = c.prepare("SELECT seq FROM log ORDER BY rowid")?;
            let v = st.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<Vec<i64>>>();
            v
        })
        .unwrap();
    assert_eq!(order, (0..BACKLOG).collect::<Vec<_>>());
    let st = s.stats();
    assert!(st.largest_group <= store::MAX_OTHER_GROUP as u64, "{st:?}");
    assert_eq!(st.first_groups, 1, "{st:?}");
}

/// Under a steady stream of commits (writers always waiting, a reader beside them) the WAL
/// starts over again and again instead of growing with everything ever written: the
/// checkpointer copies in the background and the writer copies the rest between two groups
/// (store::writer). Before, the WAL grew without end (70 MB after 10,000 submissions) and
/// every commit appended to the file. Counts restarts (the WAL header's checkpoint sequence)
/// and catch-ups, not time.
#[test]
fn the_wal_starts_over_under_a_steady_stream_of_commits() {
    const ROW: usize = 16 * 1024;
    const WRITTEN: usize = 32 * 1024 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.db");
    let s = Arc::new(Store::open(&path).unwrap());
    s.write_blocking(Box::new(|tx| {
        tx.execute_batch("CREATE TABLE blobs (id INTEGER PRIMARY KEY, b BLOB NOT NULL)")
    }))
    .unwrap();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (s, done) = (s.clone(), done.clone());
        std::thread::spawn(move || {
            let mut reads = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let n: i64 = s.read(|c| c.query_row("SELECT COUNT(*) FROM blobs", [], |r| r.get(0))).unwrap();
                assert!(n >= 0);
                reads += 1;
            }
            reads
        })
    };
    let started = std::time::Instant::now();
    let writers: Vec<_> = (0..4)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut i = 0;
                // Past the written volume and several checkpointer rounds (a slow machine
                // writes the volume in longer than that anyway).
                while i * ROW * 4 < WRITTEN || started.elapsed() < std::time::Duration::from_secs(1) {
                    let id = (t * 1_000_000 + i) as i64;
                    s.write_blocking(Box::new(move |tx| {
                        tx.execute("INSERT INTO blobs (id, b) VALUES (?1, zeroblob(?2))", params![id, ROW as i64])?;
                        Ok(())
                    }))
                    .unwrap();
                    i += 1;
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
    let wal_file = std::fs::read(dir.path().join("k.db-wal")).unwrap();
    let wal = wal_file.len();
    // The WAL header's checkpoint sequence number: how often the WAL started over.
    let restarts = u32::from_be_bytes(wal_file[12..16].try_into().unwrap());
    let stats = s.stats();
    assert!(
        restarts >= 2,
        "the WAL started over {restarts} times ({wal} bytes after {WRITTEN} bytes of rows): {stats:?}"
    );
    assert!(stats.catch_ups >= 2, "the writer did not catch up with the checkpointer: {stats:?}");
}

/// WAL pages a group commit of 8 new jobs writes (rows as a submission writes them, the
/// schema as the server creates it, plus `extra` SQL), averaged over 100 groups.
fn pages_per_group_of_new_jobs(extra: &str) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.db");
    let mut conn = store::open_db(&path).unwrap();
    conn.execute_batch(extra).unwrap();
    conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
    let wal_frames = || {
        std::fs::metadata(dir.path().join("k.db-wal"))
            .map(|m| m.len())
            .unwrap_or(0)
            .saturating_sub(32)
            / (4096 + 24)
    };
    let pad = |n: usize| "x".repeat(n);
    let row = |id: u64| store::NewJob {
        id,
        user: "bench".into(),
        name: format!("bench-{id}"),
        description: format!("name = \"bench-{id}\"\n[[components]]\nprocessors = 1\nexecutable = \"/bin/true\"\n"),
        spec: format!(
            "{{\"name\":\"bench-{id}\",\"components\":[{{\"processors\":1}}],\"pad\":\"{}\"}}",
            pad(360)
        ),
        update: store::JobUpdate {
            id,
            state: "queued".into(),
            core: format!("{{\"state\":\"queued\",\"submitted\":{id},\"pad\":\"{}\"}}", pad(320)),
            meta: format!("{{\"user\":\"bench\",\"pad\":\"{}\"}}", pad(130)),
            detail: String::new(),
        },
        submitted_ms: id,
    };
    let mut next = 1u64;
    let mut group = |conn: &mut rusqlite::Connection| {
        let tx = conn.transaction().unwrap();
        for _ in 0..8 {
            store::insert_job_op(row(next))(&tx).unwrap();
            next += 1;
        }
        tx.commit().unwrap();
    };
    // The tables past their first pages first.
    for _ in 0..50 {
        group(&mut conn);
    }
    let before = wal_frames();
    for _ in 0..100 {
        group(&mut conn);
    }
    (wal_frames() - before) as f64 / 100.0
}

/// The dashboard's index costs a group commit of new jobs no page: it holds ended jobs only
/// (`jobs_web_list`, which took an entry for every new job, cost about two pages a group, a
/// fifth of what `bench submit` waited for at every commit). Counts WAL pages, not time.
#[test]
fn the_dashboard_index_costs_new_jobs_no_page() {
    let without = pages_per_group_of_new_jobs("");
    let with = pages_per_group_of_new_jobs(koalesce_server::web::query::INDEX);
    assert!(
        with <= without + 0.1,
        "a group of 8 new jobs wrote {with:.2} pages with the dashboard's index, {without:.2} without"
    );
    // The index that indexed every job, for scale: the comparison can tell.
    let every_job = pages_per_group_of_new_jobs(
        "CREATE INDEX jobs_web_list ON jobs (id, state, user, name, \
         (CASE WHEN json_valid(detail) THEN json_extract(detail, '$.sites') END));",
    );
    assert!(
        every_job >= without + 1.0,
        "{every_job:.2} pages with an index of every job, {without:.2} without"
    );
}

/// A read does not wait for another one in progress (every request looks its token up: with
/// one read connection they queued behind its mutex).
#[test]
fn reads_go_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(Store::open(&dir.path().join("k.db")).unwrap());
    s.write_blocking(insert(1)).unwrap();
    let (inside_tx, inside_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let long = {
        let s = s.clone();
        std::thread::spawn(move || {
            s.read(move |c| {
                inside_tx.send(()).unwrap();
                // Held until the other read is done (or the test gives up).
                let _ = release_rx.recv_timeout(std::time::Duration::from_secs(20));
                c.query_row("SELECT COUNT(*) FROM jobs", [], |r| r.get::<_, i64>(0))
            })
            .unwrap()
        })
    };
    inside_rx.recv().unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    {
        let s = s.clone();
        std::thread::spawn(move || done_tx.send(count(&s)).unwrap());
    }
    let other = done_rx.recv_timeout(std::time::Duration::from_secs(10));
    release_tx.send(()).unwrap();
    assert_eq!(other, Ok(1), "a read waited for another read in progress");
    assert_eq!(long.join().unwrap(), 1);
}

/// The child half of [`commits_sync_the_wal_with_fdatasync`]: commits a few writes and exits
/// (run by that test under strace, in the directory it names).
#[test]
#[ignore = "the child of commits_sync_the_wal_with_fdatasync, which runs it"]
fn sync_probe_child() {
    let Some(dir) = std::env::var_os("KOALESCE_SYNC_PROBE_DIR") else {
        return;
    };
    let s = Store::open(&std::path::Path::new(&dir).join("k.db")).unwrap();
    for i in 1..=5 {
        s.write_blocking(insert(i)).unwrap();
    }
    assert_eq!(count(&s), 5);
}

/// SQLite is built with `HAVE_FDATASYNC` (`.cargo/config.toml`): a commit syncs the WAL with
/// fdatasync(2), which writes the data and the size but not the timestamps (no write of the
/// WAL's inode for a commit that did not change its size). Without the
/// flag SQLite's unix VFS calls fsync(2) (`#define fdatasync fsync`).
#[test]
fn commits_sync_the_wal_with_fdatasync() {
    let strace = ["/usr/bin/strace", "/bin/strace"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("strace is needed for this test (apt-get install strace; .ci/run installs it)");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("strace.txt");
    let out = std::process::Command::new(strace)
        .args(["-f", "-y", "-e", "trace=fsync,fdatasync", "-o"])
        .arg(&log)
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "sync_probe_child", "--ignored", "--test-threads=1"])
        .env("KOALESCE_SYNC_PROBE_DIR", dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "child failed: {}", String::from_utf8_lossy(&out.stderr));
    let trace = std::fs::read_to_string(&log).unwrap();
    let on_wal = |call: &str| {
        trace
            .lines()
            .filter(|l| l.contains(&format!("{call}(")) && l.contains("k.db-wal>"))
            .count()
    };
    assert!(on_wal("fdatasync") >= 5, "five commits, fewer fdatasyncs of the WAL:\n{trace}");
    assert_eq!(on_wal("fsync"), 0, "the WAL was synced with fsync:\n{trace}");
}
