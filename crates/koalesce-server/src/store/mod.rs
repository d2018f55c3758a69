//! Durable state in SQLite (WAL, `synchronous=FULL`) with group commit.
//!
//! One writer thread owns the write connection. Callers enqueue [`WriteOp`]s; the writer takes
//! every op pending at that moment, applies them in one transaction (each inside its own
//! savepoint, so one failing op does not undo the others), commits once (one fsync for the
//! whole group) and then answers every waiter. An op is acknowledged only after its commit.
//! Ops are applied in the order they were enqueued, but for *first* ops ([`Store::submit_first`]:
//! a new job's row, which a submission's answer waits for): when many ops are pending (a burst
//! of launches and state changes), the first ops among them are committed in a group of their
//! own before the others (still in their own order, each acknowledged after its commit), so a
//! submission does not wait for the writes of the jobs that run meanwhile. The other ops are
//! committed in groups of at most [`MAX_OTHER_GROUP`], and before each such group the writer
//! takes the first ops enqueued meanwhile ahead of the rest: a submission that arrives while a
//! burst of state changes is being committed waits for one bounded group, not for the whole
//! burst. A first op must not depend on ops enqueued before it: a new job's row concerns a job
//! nothing was written about yet. After a crash the database then holds a prefix of the other ops plus, possibly, first
//! ops enqueued after that prefix: new jobs, each of which was answered only once durable.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

mod history;
mod launches;
mod migrate;
mod readers;
mod removals;
mod reservations;
mod token_cache;
mod tokens;
mod writer;
pub use history::*;
pub use launches::*;
pub use removals::{load_removals, removal_done_op, removals_of, replica_at, stage_in_op, Removal};
pub use reservations::*;
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde::{Deserialize, Serialize};
pub use token_cache::{revoke_token_at, REVOCATIONS_FILE};
pub use tokens::*;
use tokio::sync::oneshot;

/// A unit of work for the writer; runs inside the group's transaction.
pub type WriteOp = Box<dyn FnOnce(&Transaction<'_>) -> rusqlite::Result<()> + Send>;

struct Request {
    op: WriteOp,
    done: Option<oneshot::Sender<Result<(), WriteFailed>>>,
    /// May be committed ahead of the ops enqueued before it (see the module docs).
    first: bool,
}

/// Why one enqueued write did not commit (its own statement failed, or the group's commit).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct WriteFailed {
    pub reason: String,
}

impl WriteFailed {
    fn new(reason: impl std::fmt::Display) -> Self {
        WriteFailed {
            reason: reason.to_string(),
        }
    }
}

/// Statistics of the writer, for metrics and tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct WriterStats {
    pub commits: u64,
    pub ops: u64,
    pub largest_group: u64,
    /// The longest a group took from its first statement to its commit (µs).
    pub longest_group_us: u64,
    /// Groups of first ops committed ahead of the other pending ops.
    pub first_groups: u64,
    /// Checkpoints the writer ran itself to copy what the checkpointer left, so that the WAL
    /// starts over (see `writer::checkpoint_loop`).
    pub catch_ups: u64,
    /// The longest of those catch-up checkpoints (µs): the writer commits nothing meanwhile.
    pub longest_catch_up_us: u64,
}

/// Other (not first) ops the writer commits at most in one group. While jobs run, a scan's
/// launches and the jobs' ends enqueue hundreds of state changes at once; committed in one
/// group (up to 1,900 ops in `bench e2e`), that group took up to 120 ms to apply and commit on
/// a busy 2-core machine, and every submission enqueued meanwhile waited for all of it before
/// its own group. In groups of this size, a new job's row waits for one such group at most:
/// the writer takes the pending first ops ahead of the rest of the backlog before each group
/// (see `store::writer`).
pub const MAX_OTHER_GROUP: usize = 64;

/// Bytes the WAL file keeps once it starts over (`journal_size_limit`).
const WAL_SIZE_LIMIT: i64 = 16 * 1024 * 1024;

/// Handle to the database: the group-commit writer and a few read connections (`store::readers`).
#[derive(Clone)]
pub struct Store {
    tx: mpsc::Sender<Request>,
    read: Arc<readers::Readers>,
    stats: Arc<Mutex<WriterStats>>,
    path: PathBuf,
    tokens: Arc<token_cache::TokenCache>,
    /// Held by every handle: the checkpointer stops when the last one is dropped.
    _alive: Arc<()>,
}

/// The schema version this build writes (`PRAGMA user_version`). Version 0 is the first
/// schema (jobs with one `record` column holding the daemon's copy of the job); version 2
/// keeps the core's snapshot, the daemon's data and the API rendering apart; version 3 gives
/// tokens an expiry (`tokens.expires_ms`) and launch intents the LRM's id of their component
/// (`launches.lrm_id`, when it is not the directory); version 4 gives files an owner
/// (`files.owner`) and job ids a durable counter (`counters`); version 5 keeps GridWay's bans
/// and usage history (`gridway_history`, one row); version 6 binds launch intents to their
/// supervisors' records (`launches.nonce`); version 7 keeps the pending removals of replica
/// files the catalogue dropped (`removals`, see `removals`). See `migrate`.
pub const SCHEMA_VERSION: i64 = 7;

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY,
    user TEXT NOT NULL,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    core TEXT NOT NULL,
    meta TEXT NOT NULL,
    detail TEXT NOT NULL,
    submitted_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_by_user_state ON jobs (user, state);
-- Succeeded jobs whose stage-out a stop interrupted (load_staging_out, at every start).
CREATE INDEX IF NOT EXISTS jobs_staging_out ON jobs (id)
    WHERE state = 'succeeded' AND instr(meta, '"staging_out":true') > 0;
CREATE TABLE IF NOT EXISTS tokens (
    hash TEXT PRIMARY KEY,
    user TEXT NOT NULL,
    admin INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    expires_ms INTEGER
);
CREATE TABLE IF NOT EXISTS files (
    name TEXT PRIMARY KEY,
    size_bytes INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    owner TEXT
);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS replicas (
    name TEXT NOT NULL,
    site TEXT NOT NULL,
    path TEXT NOT NULL,
    PRIMARY KEY (name, site)
);
CREATE TABLE IF NOT EXISTS progress (
    id INTEGER PRIMARY KEY,
    placement_tries INTEGER NOT NULL,
    claiming_tries INTEGER NOT NULL,
    error_resubmissions INTEGER NOT NULL,
    priority TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS reservations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user TEXT NOT NULL,
    site TEXT NOT NULL,
    processors INTEGER NOT NULL,
    start_ms INTEGER NOT NULL,
    end_ms INTEGER NOT NULL,
    earliest_ms INTEGER NOT NULL,
    latest_ms INTEGER NOT NULL,
    flexible INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    backend_id TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS gridway_history (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    history TEXT NOT NULL,
    saved_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS launches (
    job INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    component INTEGER NOT NULL,
    site TEXT NOT NULL,
    processors INTEGER NOT NULL,
    dir TEXT NOT NULL,
    done INTEGER NOT NULL DEFAULT 0,
    lrm_id TEXT,
    nonce TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (job, attempt, component)
);
-- Whether a path is a replica's (before its file is removed, store::replica_at).
CREATE INDEX IF NOT EXISTS replicas_by_path ON replicas (site, path);
CREATE TABLE IF NOT EXISTS removals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    site TEXT NOT NULL,
    path TEXT NOT NULL
);
"#;

fn open_conn(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(conn)
}

/// Creates the database file if needed and makes it and its WAL/SHM files private (0600):
/// SQLite gives the WAL and SHM files the database file's permissions.
fn make_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        match std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// Opens the database (private, 0600), creating the schema or migrating an older one to
/// [`SCHEMA_VERSION`] (in one transaction); used by `token create` too. A database of a newer
/// version is refused.
pub fn open_db(path: &Path) -> Result<Connection, StoreError> {
    let open = |e| StoreError::Open {
        path: path.to_path_buf(),
        source: e,
    };
    make_private(path).map_err(|e| StoreError::Private {
        path: path.to_path_buf(),
        source: e,
    })?;
    let mut conn = open_conn(path).map_err(open)?;
    // Immediate: the write lock is taken at the start, where the busy timeout waits for a
    // running server's writer. A deferred transaction that read first and then writes cannot
    // wait (SQLite answers "database is locked" at once when another connection committed
    // since the read): `koalesce token create` failed that way beside a busy server.
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(open)?;
    let version: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(open)?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            path: path.to_path_buf(),
            version,
        });
    }
    migrate::migrate(&tx, version).map_err(|e| StoreError::Migrate {
        path: path.to_path_buf(),
        from: version,
        reason: e.to_string(),
    })?;
    tx.execute_batch(SCHEMA).map_err(open)?;
    tx.pragma_update(None, "user_version", SCHEMA_VERSION).map_err(open)?;
    tx.commit().map_err(open)?;
    Ok(conn)
}

/// Why the database cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("opening database {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("making database {path} private: {source}")]
    Private {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("database {path} has schema version {version}, newer than this koalesce ({SCHEMA_VERSION}); use a newer koalesce")]
    TooNew { path: PathBuf, version: i64 },
    #[error("migrating database {path} from schema version {from}: {reason}")]
    Migrate { path: PathBuf, from: i64, reason: String },
    #[error("starting the database writer: {0}")]
    Writer(#[source] std::io::Error),
    #[error("database write failed: {0}")]
    Write(String),
    #[error("database writer stopped")]
    Stopped,
    #[error("database read failed: {0}")]
    Read(#[from] rusqlite::Error),
}

impl Store {
    /// Opens (creating if needed) the database at `path` and starts the writer thread.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let write = open_db(path)?;
        let conn = |path: &Path| {
            open_conn(path).map_err(|e| StoreError::Open {
                path: path.to_path_buf(),
                source: e,
            })
        };
        let read = Arc::new(readers::Readers::new(
            (0..readers::READERS).map(|_| conn(path)).collect::<Result<_, _>>()?,
        ));
        // Checkpoints off the commit path (see checkpoint_loop): a commit only appends to the
        // WAL and fsyncs it.
        // A WAL that grew past the limit (a backlog the checkpointer was slow to copy) is cut
        // back to it when it starts over; below it, it is written over in place.
        for (pragma, value) in [("wal_autocheckpoint", 0), ("journal_size_limit", WAL_SIZE_LIMIT)] {
            write.pragma_update(None, pragma, value).map_err(|e| StoreError::Open {
                path: path.to_path_buf(),
                source: e,
            })?;
        }
        let checkpoints = conn(path)?;
        let (tx, rx) = mpsc::channel::<Request>();
        let stats = Arc::new(Mutex::new(WriterStats::default()));
        let st = stats.clone();
        let ck = Arc::new(writer::Checkpoints::default());
        let writer_ck = ck.clone();
        let readers = read.clone();
        std::thread::Builder::new()
            .name("koalesce-db-writer".into())
            .spawn(move || {
                // Acknowledgements wait for its commits (see crate::priority).
                crate::priority::favour_thread_or_log();
                writer::writer_loop(write, rx, st, writer_ck, readers)
            })
            .map_err(StoreError::Writer)?;
        let alive = Arc::new(());
        let handles = Arc::downgrade(&alive);
        std::thread::Builder::new()
            .name("koalesce-db-checkpoint".into())
            .spawn(move || writer::checkpoint_loop(checkpoints, handles, ck))
            .map_err(StoreError::Writer)?;
        Ok(Store {
            tx,
            read,
            stats,
            path: path.to_path_buf(),
            tokens: Arc::new(token_cache::TokenCache::new(path.parent().unwrap_or(Path::new(".")))),
            _alive: alive,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Enqueues an op and returns a receiver answered after its group commits.
    pub fn submit(&self, op: WriteOp) -> oneshot::Receiver<Result<(), WriteFailed>> {
        self.submit_in_lane(op, false)
    }

    /// [`Store::submit`] for an op that may be committed ahead of the ops enqueued before it
    /// (a new job's row; see the module docs).
    pub fn submit_first(&self, op: WriteOp) -> oneshot::Receiver<Result<(), WriteFailed>> {
        self.submit_in_lane(op, true)
    }

    fn submit_in_lane(&self, op: WriteOp, first: bool) -> oneshot::Receiver<Result<(), WriteFailed>> {
        let (done, rx) = oneshot::channel();
        if let Err(mpsc::SendError(req)) = self.tx.send(Request {
            op,
            done: Some(done),
            first,
        }) {
            if let Some(d) = req.done {
                let _ = d.send(Err(WriteFailed::new("database writer stopped")));
            }
        }
        rx
    }

    /// Enqueues an op nobody waits for (still applied in order, committed with its group).
    pub fn enqueue(&self, op: WriteOp) {
        let _ = self.tx.send(Request {
            op,
            done: None,
            first: false,
        });
    }

    /// Enqueues and waits (async) for the commit.
    pub async fn write(&self, op: WriteOp) -> Result<(), StoreError> {
        match self.submit(op).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(StoreError::Write(e.reason)),
            Err(_) => Err(StoreError::Stopped),
        }
    }

    /// Enqueues and blocks the thread until the commit (not for async contexts).
    pub fn write_blocking(&self, op: WriteOp) -> Result<(), StoreError> {
        let rx = self.submit(op);
        match rx.blocking_recv() {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(StoreError::Write(e.reason)),
            Err(_) => Err(StoreError::Stopped),
        }
    }

    /// Runs a read-only closure on a free read connection (sees every committed group).
    pub fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T, StoreError> {
        Ok(self.read.with(f)?)
    }

    /// Checks a bearer token (every request): valid tokens are remembered, revocations seen at
    /// once (see `store::token_cache`).
    pub fn check_token(&self, token: &str, now_ms: u64) -> Result<TokenCheck, StoreError> {
        self.tokens.check(token, now_ms, |hash| self.read(|c| token_by_hash(c, hash)))
    }

    /// Revokes a token through the writer; once committed, no request is let in with it.
    pub async fn revoke_token(&self, id: String) -> Result<(), StoreError> {
        let done = self.write(Box::new(move |tx| revoke_token(tx, &id).map(drop))).await;
        self.tokens.forget_all();
        done
    }

    pub fn stats(&self) -> WriterStats {
        *self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until everything enqueued so far is committed.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.write(Box::new(|_| Ok(()))).await
    }
}

// ----- rows ------------------------------------------------------------------------------

/// A new job's row (inserted before the submission is acknowledged).
#[derive(Debug, Clone)]
pub struct NewJob {
    pub id: u64,
    pub user: String,
    pub name: String,
    pub description: String,
    pub spec: String,
    pub update: JobUpdate,
    pub submitted_ms: u64,
}

/// What a state change writes: the state, the core's snapshot, the daemon's data and the API
/// rendering (all JSON).
#[derive(Debug, Clone)]
pub struct JobUpdate {
    pub id: u64,
    pub state: String,
    pub core: String,
    pub meta: String,
    pub detail: String,
}

pub fn insert_job_op(j: NewJob) -> WriteOp {
    Box::new(move |tx| {
        tx.prepare_cached(
            "INSERT INTO jobs (id, user, name, description, spec, state, core, meta, detail, submitted_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )?
        .execute(params![
            j.id as i64,
            j.user,
            j.name,
            j.description,
            j.spec,
            j.update.state,
            j.update.core,
            j.update.meta,
            j.update.detail,
            j.submitted_ms as i64
        ])?;
        // The id counter only grows, also when rows are lost or purged later: an id (and the
        // directories named after it) is never given twice.
        tx.prepare_cached(
            "INSERT INTO counters (name, value) VALUES ('job_id', ?1) \
             ON CONFLICT(name) DO UPDATE SET value = max(value, excluded.value)",
        )?
        .execute([j.id as i64])?;
        Ok(())
    })
}

pub fn update_job_op(u: JobUpdate) -> WriteOp {
    Box::new(move |tx| update_job(tx, &u))
}

fn update_job(tx: &Transaction<'_>, u: &JobUpdate) -> rusqlite::Result<()> {
    tx.prepare_cached("UPDATE jobs SET state = ?2, core = ?3, meta = ?4, detail = ?5 WHERE id = ?1")?
        .execute(params![u.id as i64, u.state, u.core, u.meta, u.detail])?;
    Ok(())
}

/// A live job's state change: its state and the core's snapshot.
pub fn update_state_op(id: u64, state: String, core: String) -> WriteOp {
    Box::new(move |tx| {
        tx.prepare_cached("UPDATE jobs SET state = ?2, core = ?3 WHERE id = ?1")?
            .execute(params![id as i64, state, core])?;
        Ok(())
    })
}

/// A live job's daemon data.
pub fn update_meta_op(id: u64, meta: String) -> WriteOp {
    Box::new(move |tx| {
        tx.prepare_cached("UPDATE jobs SET meta = ?2 WHERE id = ?1")?
            .execute(params![id as i64, meta])?;
        Ok(())
    })
}

/// Several updates in one op (recovery).
pub fn update_jobs_op(us: Vec<JobUpdate>) -> WriteOp {
    Box::new(move |tx| us.iter().try_for_each(|u| update_job(tx, u)))
}

/// Names of the states in which a job has ended.
pub const ENDED: [&str; 5] = koalesce_core::JobState::TERMINAL_NAMES;

/// [`ENDED`] as an SQL list: `('succeeded', 'failed', ...)` (the names are plain words).
pub fn ended_sql() -> String {
    let names: Vec<String> = ENDED.iter().map(|s| format!("'{s}'")).collect();
    format!("({})", names.join(", "))
}

/// A job row that is not ended, as recovery loads it.
#[derive(Debug, Clone)]
pub struct LiveJobRow {
    pub id: u64,
    pub user: String,
    pub description: String,
    pub spec: String,
    pub core: String,
    pub meta: String,
}

/// Every job that has not ended, in id order, and the largest id ever given (the durable
/// counter's, or the largest row's).
pub fn load_live_jobs(conn: &Connection) -> rusqlite::Result<(Vec<LiveJobRow>, u64)> {
    let mut st = conn.prepare(&format!(
        "SELECT id, user, description, spec, core, meta FROM jobs WHERE state NOT IN {} ORDER BY id",
        ended_sql()
    ))?;
    let rows = st
        .query_map([], |r| {
            Ok(LiveJobRow {
                id: r.get::<_, i64>(0)? as u64,
                user: r.get(1)?,
                description: r.get(2)?,
                spec: r.get(3)?,
                core: r.get(4)?,
                meta: r.get(5)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let max: i64 = conn.query_row(
        "SELECT max(COALESCE((SELECT MAX(id) FROM jobs), 0), COALESCE((SELECT value FROM counters WHERE name = 'job_id'), 0))",
        [],
        |r| r.get(0),
    )?;
    Ok((rows, max as u64))
}

/// Jobs that succeeded and whose stage-out a stop interrupted (their final row was written
/// with `staging_out`), in id order. The partial index `jobs_staging_out` holds just them (its
/// condition is this query's, word for word), so a start does not read every ended job.
pub fn load_staging_out(conn: &Connection) -> rusqlite::Result<Vec<LiveJobRow>> {
    let mut st = conn.prepare(
        "SELECT id, user, description, spec, core, meta FROM jobs WHERE state = 'succeeded' \
         AND instr(meta, '\"staging_out\":true') > 0 ORDER BY id",
    )?;
    let rows = st.query_map([], |r| {
        Ok(LiveJobRow {
            id: r.get::<_, i64>(0)? as u64,
            user: r.get(1)?,
            description: r.get(2)?,
            spec: r.get(3)?,
            core: r.get(4)?,
            meta: r.get(5)?,
        })
    })?;
    rows.collect()
}

/// Ended jobs' API renderings (JSON), in id order: of `user` (all users: `None`), in `state`
/// (any ended state: `None`).
pub fn load_ended(conn: &Connection, user: Option<&str>, state: Option<&str>) -> rusqlite::Result<Vec<(u64, String)>> {
    let mut st = conn.prepare_cached(&format!(
        "SELECT id, detail FROM jobs WHERE state IN {} AND (?1 IS NULL OR user = ?1) AND (?2 IS NULL OR state = ?2) ORDER BY id",
        ended_sql()
    ))?;
    let rows = st.query_map(params![user, state], |r| Ok((r.get::<_, i64>(0)? as u64, r.get(1)?)))?;
    rows.collect()
}

/// One job's owner, state and API rendering.
pub fn load_detail(conn: &Connection, id: u64) -> rusqlite::Result<Option<(String, String, String)>> {
    conn.prepare_cached("SELECT user, state, detail FROM jobs WHERE id = ?1")?
        .query_row([id as i64], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()
}

/// Ended jobs per state.
pub fn count_ended(conn: &Connection) -> rusqlite::Result<Vec<(String, u64)>> {
    let mut st = conn.prepare(&format!(
        "SELECT state, COUNT(*) FROM jobs WHERE state IN {} GROUP BY state",
        ended_sql()
    ))?;
    let rows = st.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?;
    rows.collect()
}

/// Tries and priority of queued jobs (a failed placement try changes no state).
pub fn progress_op(rows: Vec<(u64, u32, u32, String)>) -> WriteOp {
    Box::new(move |tx| {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO progress (id, placement_tries, claiming_tries, error_resubmissions, priority) VALUES (?1, ?2, ?3, 0, ?4) \
             ON CONFLICT(id) DO UPDATE SET placement_tries = excluded.placement_tries, claiming_tries = excluded.claiming_tries, \
             priority = excluded.priority",
        )?;
        for (id, p, c, prio) in &rows {
            stmt.execute(params![*id as i64, p, c, prio])?;
        }
        Ok(())
    })
}

/// A catalogue file with its replicas (site → path).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileRow {
    pub name: String,
    pub size_bytes: u64,
    pub sha256: String,
    pub replicas: Vec<(String, String)>,
    pub owner: Option<String>,
}

/// A replica to register: the file's name, size and checksum, who registers it (a new file's
/// owner; an existing file keeps its owner), and where the replica is.
#[derive(Debug, Clone)]
pub struct NewReplica {
    pub name: String,
    pub size: u64,
    pub sha256: String,
    pub owner: Option<String>,
    pub site: String,
    pub path: String,
}

/// Registers a file (or updates its size and checksum) and one replica of it; a replica of
/// other content than the file's replaces the file (its replicas at other sites are dropped).
pub fn register_replica_op(r: NewReplica) -> WriteOp {
    let NewReplica {
        name,
        size,
        sha256: sha,
        owner,
        site,
        path,
    } = r;
    Box::new(move |tx| {
        // The replicas this drops have their files removed once it committed.
        removals::note_replaced(tx, &name, &site, &path, size, &sha)?;
        // Other content than the file's replaces it: the other sites' copies hold the old one.
        tx.execute(
            "DELETE FROM replicas WHERE name = ?1 AND site != ?2 AND EXISTS \
             (SELECT 1 FROM files WHERE name = ?1 AND (size_bytes != ?3 OR sha256 != ?4))",
            params![name, site, size as i64, sha],
        )?;
        tx.execute(
            "INSERT INTO files (name, size_bytes, sha256, owner) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT(name) DO UPDATE SET size_bytes = excluded.size_bytes, sha256 = excluded.sha256, \
             owner = COALESCE(files.owner, excluded.owner)",
            params![name, size as i64, sha, owner],
        )?;
        tx.execute(
            "INSERT OR REPLACE INTO replicas (name, site, path) VALUES (?1, ?2, ?3)",
            params![name, site, path],
        )?;
        removals::note_registered(tx, &site, &path)?;
        Ok(())
    })
}

/// Removes one replica of a file (found corrupt: quarantined). No pending removal: its file
/// was renamed to `<file>.quarantined` before, to be kept for an administrator
/// (`transfers::quarantine_replica`); a crash before this commit leaves a row whose path no
/// longer exists, which the next start does not use (the recovery loads only replicas whose
/// file is there).
pub fn delete_replica_op(name: String, site: String) -> WriteOp {
    Box::new(move |tx| {
        tx.execute("DELETE FROM replicas WHERE name = ?1 AND site = ?2", [&name, &site])?;
        Ok(())
    })
}

/// Removes a file and its replicas from the catalogue (their files pending removal).
pub fn delete_file_op(name: String) -> WriteOp {
    Box::new(move |tx| {
        removals::note_deleted(tx, &name)?;
        tx.execute("DELETE FROM replicas WHERE name = ?1", [&name])?;
        tx.execute("DELETE FROM files WHERE name = ?1", [&name])?;
        Ok(())
    })
}

pub fn load_files(conn: &Connection) -> rusqlite::Result<Vec<FileRow>> {
    let mut st = conn.prepare("SELECT name, size_bytes, sha256, owner FROM files ORDER BY name")?;
    let mut files: Vec<FileRow> = st
        .query_map([], |r| {
            Ok(FileRow {
                name: r.get(0)?,
                size_bytes: r.get::<_, i64>(1)? as u64,
                sha256: r.get(2)?,
                replicas: Vec::new(),
                owner: r.get(3)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut st = conn.prepare("SELECT site, path FROM replicas WHERE name = ?1 ORDER BY site")?;
    for f in &mut files {
        f.replicas = st
            .query_map([&f.name], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
    }
    Ok(files)
}

/// Tries and current priority of queued jobs, flushed in bulk (a failed placement try changes
/// no state, so it is not in `jobs.record`): id → (placement, claiming, error resubmissions,
/// priority).
pub fn load_progress(conn: &Connection) -> rusqlite::Result<std::collections::HashMap<u64, (u32, u32, u32, String)>> {
    let mut st = conn.prepare("SELECT id, placement_tries, claiming_tries, error_resubmissions, priority FROM progress")?;
    let rows = st.query_map([], |r| {
        Ok((r.get::<_, i64>(0)? as u64, (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
    })?;
    rows.collect()
}
