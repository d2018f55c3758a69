//! The store's read connections: a few of them, so that concurrent reads (every request looks
//! its bearer token up) do not queue behind one connection's mutex. With one, 16 clients'
//! token look-ups put the runtime's worker threads to sleep on it and woke them again, a tenth
//! of the server's CPU time in `bench submit`. SQLite's WAL lets them read side by side.

use std::sync::{Mutex, MutexGuard, TryLockError};

use rusqlite::Connection;

/// Read connections to one database.
pub(super) struct Readers {
    conns: Vec<Mutex<Connection>>,
    next: std::sync::atomic::AtomicUsize,
}

/// Read connections a store opens.
pub(super) const READERS: usize = 4;

impl Readers {
    pub(super) fn new(conns: Vec<Connection>) -> Readers {
        assert!(!conns.is_empty(), "a store reads through at least one connection");
        Readers {
            conns: conns.into_iter().map(Mutex::new).collect(),
            next: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Runs `f` on a free connection (the next one in turn if none is free).
    pub(super) fn with<T>(&self, f: impl FnOnce(&Connection) -> T) -> T {
        let n = self.conns.len();
        let start = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % n;
        for k in (0..n).map(|i| (start + i) % n) {
            match self.conns[k].try_lock() {
                Ok(c) => return f(&c),
                // A reader that panicked left the connection as it was (reads change nothing).
                Err(TryLockError::Poisoned(p)) => return f(&p.into_inner()),
                Err(TryLockError::WouldBlock) => {}
            }
        }
        f(&lock(&self.conns[start]))
    }

    /// Runs `f` with every connection held: no read of this store is under way meanwhile.
    pub(super) fn exclusive<T>(&self, f: impl FnOnce() -> T) -> T {
        // Always in the same order; a reader holds one connection at most.
        let _all: Vec<MutexGuard<'_, Connection>> = self.conns.iter().map(lock).collect();
        f()
    }
}

fn lock(c: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    c.lock().unwrap_or_else(|p| p.into_inner())
}
