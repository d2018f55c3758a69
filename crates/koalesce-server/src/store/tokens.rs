//! Bearer tokens: created by `koalesce token create` (only their SHA-256 is stored), checked on
//! every request (a revoked or expired token is refused at once), listed and revoked by id (a
//! prefix of the hash). Every token statement of the server and the CLI is here.

use std::path::Path;

use anyhow::Context;
use rusqlite::{params, Connection, OptionalExtension};
use sha2::{Digest, Sha256};

use super::open_db;

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

/// A token's row: whose it is, and until when it is valid (`None`: no expiry).
#[derive(Debug, Clone)]
pub(crate) struct TokenRow {
    pub(crate) user: String,
    pub(crate) admin: bool,
    pub(crate) expires_ms: Option<i64>,
}

impl TokenRow {
    /// What the token is worth at `now_ms`.
    pub(crate) fn check(&self, now_ms: u64) -> TokenCheck {
        match self.expires_ms {
            Some(exp) if exp <= now_ms as i64 => TokenCheck::Expired,
            _ => TokenCheck::Valid {
                user: self.user.clone(),
                admin: self.admin,
            },
        }
    }
}

/// The row of the token whose SHA-256 (lower-case hex) is `hash`.
pub(crate) fn token_by_hash(conn: &Connection, hash: &str) -> rusqlite::Result<Option<TokenRow>> {
    conn.prepare_cached("SELECT user, admin, expires_ms FROM tokens WHERE hash = ?1")?
        .query_row([hash], |r| {
            Ok(TokenRow {
                user: r.get(0)?,
                admin: r.get::<_, i64>(1)? != 0,
                expires_ms: r.get(2)?,
            })
        })
        .optional()
}

/// Looks a bearer token up in the database (the server checks through its
/// [`Store::check_token`](super::Store::check_token), which remembers valid tokens).
pub fn check_token(conn: &Connection, token: &str, now_ms: u64) -> rusqlite::Result<TokenCheck> {
    Ok(match token_by_hash(conn, &sha256_hex(token.as_bytes()))? {
        None => TokenCheck::Unknown,
        Some(row) => row.check(now_ms),
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

pub use koalesce_api::dto::TokenInfo;

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
    Ok(open_db(&path)?)
}
