//! Durable state in SQLite (WAL, `synchronous=FULL`) with group commit.
//!
//! One writer thread owns the write connection. Callers enqueue [`WriteOp`]s; the writer takes
//! every op pending at that moment, applies them in one transaction (each inside its own
//! savepoint, so one failing op does not undo the others), commits once (one fsync for the
//! whole group) and then answers every waiter. An op is acknowledged only after its commit.
//! Ops are applied in the order they were enqueued.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;

/// A unit of work for the writer; runs inside the group's transaction.
pub type WriteOp = Box<dyn FnOnce(&Transaction<'_>) -> rusqlite::Result<()> + Send>;

struct Request {
    op: WriteOp,
    done: Option<oneshot::Sender<Result<(), String>>>,
}

/// Statistics of the writer, for metrics and tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct WriterStats {
    pub commits: u64,
    pub ops: u64,
    pub largest_group: u64,
}

/// Handle to the database: the group-commit writer and a read connection.
#[derive(Clone)]
pub struct Store {
    tx: mpsc::Sender<Request>,
    read: Arc<Mutex<Connection>>,
    stats: Arc<Mutex<WriterStats>>,
    path: PathBuf,
}

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY,
    user TEXT NOT NULL,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    record TEXT NOT NULL,
    submitted_ms INTEGER NOT NULL
);
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
    sha256 TEXT NOT NULL
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
CREATE TABLE IF NOT EXISTS launches (
    job INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    component INTEGER NOT NULL,
    site TEXT NOT NULL,
    processors INTEGER NOT NULL,
    dir TEXT NOT NULL,
    done INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job, attempt, component)
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

/// Creates the schema (idempotent) and returns a connection; used by `token create` too.
pub fn open_db(path: &Path) -> anyhow::Result<Connection> {
    make_private(path).with_context(|| format!("making {} private", path.display()))?;
    let conn = open_conn(path).with_context(|| format!("opening database {}", path.display()))?;
    conn.execute_batch(SCHEMA).context("creating schema")?;
    // Databases from before token expiry.
    let has_expiry: bool = conn
        .prepare("SELECT 1 FROM pragma_table_info('tokens') WHERE name = 'expires_ms'")?
        .exists([])?;
    if !has_expiry {
        conn.execute_batch("ALTER TABLE tokens ADD COLUMN expires_ms INTEGER")
            .context("adding token expiry")?;
    }
    Ok(conn)
}

impl Store {
    /// Opens (creating if needed) the database at `path` and starts the writer thread.
    pub fn open(path: &Path) -> anyhow::Result<Store> {
        let write = open_db(path)?;
        let read = open_conn(path)?;
        let (tx, rx) = mpsc::channel::<Request>();
        let stats = Arc::new(Mutex::new(WriterStats::default()));
        let st = stats.clone();
        std::thread::Builder::new()
            .name("koalesce-db-writer".into())
            .spawn(move || writer_loop(write, rx, st))
            .context("starting the database writer")?;
        Ok(Store {
            tx,
            read: Arc::new(Mutex::new(read)),
            stats,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Enqueues an op and returns a receiver answered after its group commits.
    pub fn submit(&self, op: WriteOp) -> oneshot::Receiver<Result<(), String>> {
        let (done, rx) = oneshot::channel();
        if let Err(mpsc::SendError(req)) = self.tx.send(Request { op, done: Some(done) }) {
            if let Some(d) = req.done {
                let _ = d.send(Err("database writer stopped".into()));
            }
        }
        rx
    }

    /// Enqueues an op nobody waits for (still applied in order, committed with its group).
    pub fn enqueue(&self, op: WriteOp) {
        let _ = self.tx.send(Request { op, done: None });
    }

    /// Enqueues and waits (async) for the commit.
    pub async fn write(&self, op: WriteOp) -> anyhow::Result<()> {
        match self.submit(op).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => anyhow::bail!("database write failed: {e}"),
            Err(_) => anyhow::bail!("database writer stopped"),
        }
    }

    /// Enqueues and blocks the thread until the commit (not for async contexts).
    pub fn write_blocking(&self, op: WriteOp) -> anyhow::Result<()> {
        let rx = self.submit(op);
        match rx.blocking_recv() {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => anyhow::bail!("database write failed: {e}"),
            Err(_) => anyhow::bail!("database writer stopped"),
        }
    }

    /// Runs a read-only closure on the read connection (sees every committed group).
    pub fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> anyhow::Result<T> {
        let conn = self.read.lock().unwrap();
        Ok(f(&conn)?)
    }

    pub fn stats(&self) -> WriterStats {
        *self.stats.lock().unwrap()
    }

    /// Waits until everything enqueued so far is committed.
    pub async fn flush(&self) -> anyhow::Result<()> {
        self.write(Box::new(|_| Ok(()))).await
    }
}

fn writer_loop(mut conn: Connection, rx: mpsc::Receiver<Request>, stats: Arc<Mutex<WriterStats>>) {
    const MAX_GROUP: usize = 4096;
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(r) => group.push(r),
                Err(_) => break,
            }
        }
        let started = Instant::now();
        let n = group.len();
        let mut results: Vec<Result<(), String>> = Vec::with_capacity(n);
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
                results.push(r.map_err(|e| e.to_string()));
            }
            tx.commit()
        })();
        if let Err(e) = &outcome {
            tracing::error!(error = %e, ops = n, "group commit failed");
        }
        {
            let mut s = stats.lock().unwrap();
            s.commits += 1;
            s.ops += n as u64;
            s.largest_group = s.largest_group.max(n as u64);
        }
        for (i, done) in waiters.into_iter().enumerate() {
            let r = match &outcome {
                Ok(()) => results.get(i).cloned().unwrap_or(Ok(())),
                Err(e) => Err(format!("commit failed: {e}")),
            };
            if let Some(d) = done {
                let _ = d.send(r);
            }
        }
        tracing::trace!(ops = n, ms = started.elapsed().as_secs_f64() * 1e3, "group committed");
    }
}

// ----- rows ------------------------------------------------------------------------------

/// A job row as loaded at startup.
#[derive(Debug, Clone)]
pub struct JobRow {
    pub id: u64,
    pub user: String,
    pub description: String,
    pub spec: String,
    pub state: String,
    pub record: String,
    pub submitted_ms: u64,
}

pub fn load_jobs(conn: &Connection) -> rusqlite::Result<Vec<JobRow>> {
    let mut st = conn.prepare("SELECT id, user, description, spec, state, record, submitted_ms FROM jobs ORDER BY id")?;
    let rows = st.query_map([], |r| {
        Ok(JobRow {
            id: r.get::<_, i64>(0)? as u64,
            user: r.get(1)?,
            description: r.get(2)?,
            spec: r.get(3)?,
            state: r.get(4)?,
            record: r.get(5)?,
            submitted_ms: r.get::<_, i64>(6)? as u64,
        })
    })?;
    rows.collect()
}

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
}

pub fn insert_launch(tx: &Transaction<'_>, l: &LaunchRow) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT OR REPLACE INTO launches (job, attempt, component, site, processors, dir, done) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![l.job as i64, l.attempt, l.component, l.site, l.processors, l.dir, l.done as i64],
    )?;
    Ok(())
}

pub fn load_open_launches(conn: &Connection) -> rusqlite::Result<Vec<LaunchRow>> {
    let mut st = conn.prepare(
        "SELECT job, attempt, component, site, processors, dir, done FROM launches WHERE done = 0 ORDER BY job, attempt, component",
    )?;
    let rows = st.query_map([], launch_row)?;
    rows.collect()
}

/// Every launch row (done or not) of one attempt of a job.
pub fn load_attempt(conn: &Connection, job: u64, attempt: u32) -> rusqlite::Result<Vec<LaunchRow>> {
    let mut st = conn.prepare_cached(
        "SELECT job, attempt, component, site, processors, dir, done FROM launches WHERE job = ?1 AND attempt = ?2 ORDER BY component",
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
    })
}

/// A catalogue file with its replicas (site → path).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileRow {
    pub name: String,
    pub size_bytes: u64,
    pub sha256: String,
    pub replicas: Vec<(String, String)>,
}

pub fn load_files(conn: &Connection) -> rusqlite::Result<Vec<FileRow>> {
    let mut st = conn.prepare("SELECT name, size_bytes, sha256 FROM files ORDER BY name")?;
    let mut files: Vec<FileRow> = st
        .query_map([], |r| {
            Ok(FileRow {
                name: r.get(0)?,
                size_bytes: r.get::<_, i64>(1)? as u64,
                sha256: r.get(2)?,
                replicas: Vec::new(),
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

// ----- tokens ----------------------------------------------------------------------------

/// SHA-256 of `data`, lower-case hex.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Creates a token for `user` in the data dir's database and returns it (printed once; only
/// its SHA-256 is stored). Safe while a server runs on the same data dir.
pub fn create_token(data_dir: &Path, user: &str, admin: bool) -> anyhow::Result<String> {
    create_token_expiring(data_dir, user, admin, None)
}

/// [`create_token`] with an optional lifetime (ms): after it the token is refused.
pub fn create_token_expiring(data_dir: &Path, user: &str, admin: bool, lifetime_ms: Option<u64>) -> anyhow::Result<String> {
    anyhow::ensure!(
        !user.is_empty() && user.len() <= 64 && user.chars().all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c)),
        "user name '{user}' must be 1 to 64 letters, digits, '-', '_', '.', '@'"
    );
    std::fs::create_dir_all(data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
    let conn = open_db(&data_dir.join(crate::DB_FILE))?;
    let mut raw = [0u8; 32];
    getrandom(&mut raw)?;
    let token = format!("koa_{}", hex(&raw));
    let now = crate::now_ms();
    let expires = lifetime_ms.map(|l| now.saturating_add(l).min(i64::MAX as u64) as i64);
    conn.execute(
        "INSERT INTO tokens (hash, user, admin, created_ms, expires_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![sha256_hex(token.as_bytes()), user, admin as i64, now as i64, expires],
    )?;
    Ok(token)
}

fn getrandom(buf: &mut [u8]) -> anyhow::Result<()> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")?.read_exact(buf)?;
    Ok(())
}

/// How a bearer token checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenCheck {
    Valid { user: String, admin: bool },
    Expired,
    Unknown,
}

/// Looks a bearer token up (every request: a revoked token is refused at once).
pub fn check_token(conn: &Connection, token: &str, now_ms: u64) -> rusqlite::Result<TokenCheck> {
    let row = conn
        .query_row(
            "SELECT user, admin, expires_ms FROM tokens WHERE hash = ?1",
            [sha256_hex(token.as_bytes())],
            |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? != 0, r.get::<_, Option<i64>>(2)?)),
        )
        .optional()?;
    Ok(match row {
        None => TokenCheck::Unknown,
        Some((_, _, Some(exp))) if exp <= now_ms as i64 => TokenCheck::Expired,
        Some((user, admin, _)) => TokenCheck::Valid { user, admin },
    })
}

/// Looks a bearer token up: (user, admin) of a valid token.
pub fn lookup_token(conn: &Connection, token: &str) -> rusqlite::Result<Option<(String, bool)>> {
    Ok(match check_token(conn, token, crate::now_ms())? {
        TokenCheck::Valid { user, admin } => Some((user, admin)),
        _ => None,
    })
}

/// Length of a token's public id (a prefix of its hash).
pub const TOKEN_ID_LEN: usize = 16;

/// A token as listed (never the token itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    /// Public id: the first [`TOKEN_ID_LEN`] hex digits of the token's SHA-256.
    pub id: String,
    pub user: String,
    pub admin: bool,
    pub created_ms: u64,
    pub expires_ms: Option<u64>,
}

fn token_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TokenInfo> {
    let hash: String = r.get(0)?;
    Ok(TokenInfo {
        id: hash[..TOKEN_ID_LEN.min(hash.len())].to_string(),
        user: r.get(1)?,
        admin: r.get::<_, i64>(2)? != 0,
        created_ms: r.get::<_, i64>(3)? as u64,
        expires_ms: r.get::<_, Option<i64>>(4)?.map(|v| v as u64),
    })
}

/// Tokens of `user` (every user's with None), oldest first.
pub fn list_tokens(conn: &Connection, user: Option<&str>) -> rusqlite::Result<Vec<TokenInfo>> {
    let mut st = conn
        .prepare("SELECT hash, user, admin, created_ms, expires_ms FROM tokens WHERE ?1 IS NULL OR user = ?1 ORDER BY created_ms, hash")?;
    let rows = st.query_map([user], token_row)?;
    rows.collect()
}

/// The token whose public id is `id` (a hex prefix of its hash, at least 8 digits), if
/// exactly one matches.
pub fn find_token(conn: &Connection, id: &str) -> rusqlite::Result<Option<TokenInfo>> {
    if id.len() < 8 || id.len() > 64 || !id.chars().all(|c| c.is_ascii_hexdigit()) {
        return Ok(None);
    }
    let mut st = conn.prepare("SELECT hash, user, admin, created_ms, expires_ms FROM tokens WHERE substr(hash, 1, length(?1)) = ?1")?;
    let mut hits = st
        .query_map([id.to_ascii_lowercase()], token_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(if hits.len() == 1 { hits.pop() } else { None })
}

/// Deletes the token whose public id is `id` (see [`find_token`]); returns it.
pub fn revoke_token(conn: &Connection, id: &str) -> rusqlite::Result<Option<TokenInfo>> {
    let Some(t) = find_token(conn, id)? else { return Ok(None) };
    conn.execute(
        "DELETE FROM tokens WHERE substr(hash, 1, length(?1)) = ?1",
        [id.to_ascii_lowercase()],
    )?;
    Ok(Some(t))
}

/// Opens the data dir's database for token administration (`koalesce token list|revoke`).
pub fn open_tokens(data_dir: &Path) -> anyhow::Result<Connection> {
    let path = data_dir.join(crate::DB_FILE);
    anyhow::ensure!(path.exists(), "no database in {}", data_dir.display());
    open_db(&path)
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
