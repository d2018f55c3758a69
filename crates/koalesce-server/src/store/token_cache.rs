//! The server's memory of valid bearer tokens, so that a request does not read SQLite to check
//! its token, with every revocation seen at once, by the server's own API and by
//! `koalesce token revoke --data-dir` in another process alike.
//!
//! Only valid tokens are remembered (by SHA-256, with their expiry); an unknown token is looked
//! up in the database every time, so a token created by the CLI works at once. What forgets them:
//! - a revocation through the server: after its commit ([`TokenCache::forget_all`]);
//! - a revocation by another process ([`revoke_token_at`]): it takes an exclusive `flock` on
//!   the data dir's [`REVOCATIONS_FILE`], appends a line to it, commits its `DELETE` and only
//!   then lets the lock go. Every check looks at the file (one `stat`): when it changed, all is
//!   forgotten, and nothing is remembered while the file's lock is held (a revocation under
//!   way: the database is asked every time), so no answer read before the commit is kept after
//!   it. A revoking process that died between its line and its commit released the lock with
//!   its death: the database, final by then, is asked again. Remembering resumes only once the
//!   lock is free.
//!
//! A look-up that started before a forgetting does not enter what it read afterwards (a
//! generation counter), so a row read just before a revocation's commit is not kept.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context;

use super::tokens::{revoke_token, sha256_hex, TokenCheck, TokenInfo, TokenRow};

/// File in the data dir that a revocation by another process appends to under its lock (one
/// line per revocation: the token's id, the time and the revoking process).
pub const REVOCATIONS_FILE: &str = "token-revocations";

/// What [`TokenCache`] knows of the revocations file: enough to see that it changed (a
/// revocation appends, so the size grows; a replaced file has another inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Absent,
    File {
        dev: u64,
        ino: u64,
        size: u64,
        mtime_ns: i128,
    },
    /// It could not be read: never equal to anything, nothing is remembered.
    Unreadable,
}

fn look(file: &Path) -> Seen {
    match std::fs::metadata(file) {
        Ok(m) => Seen::File {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Seen::Absent,
        Err(_) => Seen::Unreadable,
    }
}

/// Whether no revocation by another process is under way (the file's lock is free).
fn settled(file: &Path) -> bool {
    let f = match std::fs::File::open(file) {
        Ok(f) => f,
        // No file: no other process ever revoked on this data dir.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return true,
        Err(_) => return false,
    };
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockSharedNonblock).is_ok()
}

struct Inner {
    seen: Option<Seen>,
    /// The file changed and a revocation may be under way: nothing is remembered.
    unsettled: bool,
    /// Raised by every forgetting.
    generation: u64,
    valid: HashMap<String, TokenRow>,
}

/// Valid tokens by SHA-256 (see the module docs).
pub(crate) struct TokenCache {
    file: PathBuf,
    inner: Mutex<Inner>,
}

impl TokenCache {
    /// The cache of the server whose data dir is `data_dir`.
    pub(crate) fn new(data_dir: &Path) -> TokenCache {
        TokenCache {
            file: data_dir.join(REVOCATIONS_FILE),
            inner: Mutex::new(Inner {
                seen: None,
                unsettled: true,
                generation: 0,
                valid: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks `token` at `now_ms`: from memory when it is remembered and nothing was revoked
    /// since, else with `lookup` (given the token's SHA-256), whose valid answer is remembered.
    pub(crate) fn check<E>(
        &self,
        token: &str,
        now_ms: u64,
        lookup: impl FnOnce(&str) -> Result<Option<TokenRow>, E>,
    ) -> Result<TokenCheck, E> {
        let hash = sha256_hex(token.as_bytes());
        let seen = look(&self.file);
        let generation = {
            let mut g = self.lock();
            if g.seen != Some(seen) || seen == Seen::Unreadable {
                g.seen = Some(seen);
                g.generation += 1;
                g.valid.clear();
                g.unsettled = true;
            }
            if g.unsettled && seen != Seen::Unreadable && settled(&self.file) {
                g.unsettled = false;
            }
            if !g.unsettled {
                if let Some(row) = g.valid.get(&hash) {
                    return Ok(row.check(now_ms));
                }
            }
            g.generation
        };
        let Some(row) = lookup(&hash)? else {
            return Ok(TokenCheck::Unknown);
        };
        let answer = row.check(now_ms);
        if matches!(answer, TokenCheck::Valid { .. }) {
            let mut g = self.lock();
            if g.generation == generation && !g.unsettled {
                g.valid.insert(hash, row);
            }
        }
        Ok(answer)
    }

    /// Forgets every token (after a revocation through the server committed).
    pub(crate) fn forget_all(&self) {
        let mut g = self.lock();
        g.generation += 1;
        g.valid.clear();
    }
}

/// Revokes the token whose public id is `id` in the database of `data_dir` from another process
/// than the server (`koalesce token revoke --data-dir`), so that a running server refuses it
/// from its next request on (see the module docs); returns the token revoked.
pub fn revoke_token_at(data_dir: &Path, id: &str) -> anyhow::Result<Option<TokenInfo>> {
    let conn = super::open_tokens(data_dir)?;
    let path = data_dir.join(REVOCATIONS_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    let mut file = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .with_context(|| format!("locking {}", path.display()))?;
    // Before the commit, under the lock: a server that sees the line asks the database until
    // the lock is free again, by then the commit is done (or will never be).
    let line = format!(
        "revoking {} at {} ms by process {}\n",
        id.chars().filter(char::is_ascii_hexdigit).take(64).collect::<String>(),
        crate::now_ms(),
        std::process::id()
    );
    file.write_all(line.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    let revoked = revoke_token(&conn, id)?;
    drop(file);
    Ok(revoked)
}
