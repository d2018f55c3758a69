//! Removing the files of replicas the catalogue dropped (a file replaced by other content, a
//! replica moved to another path, a file deleted), crash-safe: the transaction that drops a
//! replica also records its file as a pending removal (`store::removals`); after the commit
//! the file is removed, then the row. A crash before the commit leaves the replica and its
//! file; after it, the row, which the next start finishes ([`resume`]). Writers of a new copy
//! (a stage-in, an upload through the API) commit a row for its path before they write it,
//! which their registration clears (`store::stage_in_op`): a copy a crash left unregistered
//! goes the same way. A file is removed only
//! while no record names it: not the memory's catalogue, not the database (a path registered
//! again since keeps its file and the row just goes), and nobody writes that path meanwhile
//! ([`PathGuard`], taken by every writer of a storage path: uploads, registrations, stage-outs,
//! files received from peers; stage-ins of the file into that site wait, as for another
//! stage-in). A copy that something may still read is kept until it is done: a stage-in of
//! the file on its way, or a job not ended placed at its site with the file as an input.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use koalesce_core::JobId;

use super::{process_actions, transfers, Shared, State};
use crate::dataplane::{self, Place};
use crate::now_ms;
use crate::store::{self, Removal};

/// Storage paths being written (or removed) right now.
static BUSY: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

/// The right to write (or remove) one storage path; released when dropped.
pub(crate) struct PathGuard(PathBuf);

impl PathGuard {
    /// None while another holds `path`.
    pub(crate) fn try_take(path: &Path) -> Option<PathGuard> {
        let mut g = BUSY.lock().unwrap_or_else(|p| p.into_inner());
        g.get_or_insert_with(HashSet::new)
            .insert(path.to_path_buf())
            .then(|| PathGuard(path.to_path_buf()))
    }

    /// Waits until `path` is free, for `limit` at most (None: still taken then).
    pub(crate) async fn take_within(path: &Path, limit: Duration) -> Option<PathGuard> {
        PathGuard::wait(path, Some(tokio::time::Instant::now() + limit)).await
    }

    /// Waits until `path` is free.
    pub(crate) async fn take(path: &Path) -> PathGuard {
        match PathGuard::wait(path, None).await {
            Some(g) => g,
            None => unreachable!("waiting without a deadline ends only with the path"),
        }
    }

    async fn wait(path: &Path, until: Option<tokio::time::Instant>) -> Option<PathGuard> {
        loop {
            if let Some(g) = PathGuard::try_take(path) {
                return Some(g);
            }
            if until.is_some_and(|u| tokio::time::Instant::now() >= u) {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for PathGuard {
    fn drop(&mut self) {
        let mut g = BUSY.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(set) = g.as_mut() {
            set.remove(&self.0);
        }
    }
}

/// After a commit that dropped replicas of `name`: their files go now, those still read
/// later (in the background).
pub(crate) async fn after_commit(shared: &Arc<Shared>, name: &str) {
    let n = name.to_string();
    match shared.store.read(|c| store::removals_of(c, &n)) {
        Ok(rows) => {
            let later = pass(shared, rows).await;
            spawn(shared, later);
        }
        Err(e) => tracing::warn!(file = %name, error = %e, "pending removals not read; done at the next start"),
    }
}

/// At start: the removals a stop or crash left pending.
pub(crate) fn resume(shared: &Arc<Shared>) {
    match shared.store.read(store::load_removals) {
        Ok(rows) => {
            if !rows.is_empty() {
                tracing::info!(pending = rows.len(), "finishing replica file removals a stop left pending");
            }
            spawn(shared, rows);
        }
        Err(e) => tracing::warn!(error = %e, "pending removals not read"),
    }
}

/// Retries `rows` every 200 ms until each is done or failed (a failed one stays pending for
/// the next start).
fn spawn(shared: &Arc<Shared>, rows: Vec<Removal>) {
    if rows.is_empty() {
        return;
    }
    let shared = shared.clone();
    tokio::spawn(async move {
        let mut left = rows;
        while !left.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            left = pass(&shared, left).await;
        }
    });
}

/// Tries each removal once; those to try again later.
async fn pass(shared: &Arc<Shared>, rows: Vec<Removal>) -> Vec<Removal> {
    let mut later = Vec::new();
    for r in rows {
        if let Outcome::Later = one(shared, &r).await {
            later.push(r);
        }
    }
    later
}

enum Outcome {
    Done,
    Later,
    Failed,
}

/// Whether the memory's catalogue has a replica of `name` at `path` of `site` (a storage path
/// is derived from one name; other names' replicas are asked of the database, which has every
/// one but a stage-in's not committed yet, and a stage-in writes only its own name's path).
fn named(st: &State, name: &str, site: &str, path: &Path) -> bool {
    st.files.get(name).and_then(|f| f.replicas.get(site)).is_some_and(|p| p == path)
}

/// Whether something may still read or write `name`'s copy at `site`: a stage-in of it on
/// its way, or a job not ended placed there with it as an input.
fn in_use(st: &State, name: &str, site: &str) -> bool {
    let sid = st.site_id(site);
    st.inflight.keys().any(|(f, _)| f == name)
        || st.core.jobs().any(|j| {
            !j.state.is_terminal()
                && j.spec.input_files.iter().any(|f| f == name)
                && j.components.iter().any(|c| c.site.is_some() && c.site == sid)
        })
}

async fn one(shared: &Arc<Shared>, r: &Removal) -> Outcome {
    let path = PathBuf::from(&r.path);
    let (guard, sid) = {
        let mut st = shared.lock();
        if named(&st, &r.name, &r.site, &path) {
            shared.store.enqueue(store::removal_done_op(r.id));
            return Outcome::Done;
        }
        if in_use(&st, &r.name, &r.site) {
            return Outcome::Later;
        }
        let Some(guard) = PathGuard::try_take(&path) else {
            return Outcome::Later;
        };
        let sid = st.site_id(&r.site);
        if let Some(sid) = sid {
            // Stage-ins of the file into this site wait until it is removed.
            st.inflight.insert((r.name.clone(), sid), Vec::new());
        }
        (guard, sid)
    };
    fault_hold().await;
    let outcome = remove(shared, r, &path).await;
    if let Some(sid) = sid {
        // The stage-ins that asked meanwhile start now.
        let mut locked = shared.lock();
        let st = &mut *locked;
        let waiting = st.inflight.remove(&(r.name.clone(), sid)).unwrap_or_default();
        let from = st.files.get(&r.name).and_then(|f| f.replicas.keys().find_map(|s| st.site_id(s)));
        for w in waiting {
            match from {
                Some(from) => transfers::start_transfer(shared, st, w.job, w.key, from),
                None => st.core.transfer_failed(now_ms(), JobId(w.job), &w.key),
            }
        }
        process_actions(shared, st);
    }
    drop(guard);
    outcome
}

/// Removes the file unless the database names it, then the row (a failure keeps the row for
/// the next start).
async fn remove(shared: &Arc<Shared>, r: &Removal, path: &Path) -> Outcome {
    let (site, p) = (r.site.clone(), r.path.clone());
    match shared.store.read(|c| store::replica_at(c, &site, &p)) {
        Ok(true) => {
            shared.store.enqueue(store::removal_done_op(r.id));
            return Outcome::Done;
        }
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(file = %r.name, site = %r.site, error = %e, "replica file not removed (retried at the next start)");
            return Outcome::Failed;
        }
    }
    // Only koalesce's own copies: a row that names a path outside the site's storage (a
    // replica registered in place, where the user's file was, by a server before the copies
    // went into storage; a site no longer configured) goes, and the file stays.
    let checked = shared
        .site_by_name(&r.site)
        .ok_or_else(|| "the site is no longer configured".to_string())
        .and_then(|h| within_storage(&h.paths.storage, path, h.agent.is_none()).map(|()| h));
    let place = match checked {
        Ok(h) => transfers::place_at(h, path),
        Err(why) => {
            tracing::warn!(file = %r.name, site = %r.site, path = %r.path, "not removed: {why}; its pending removal is dropped");
            shared.store.enqueue(store::removal_done_op(r.id));
            return Outcome::Done;
        }
    };
    let client = shared.agents.clone();
    let gone = tokio::task::spawn_blocking(move || match place {
        Place::Local(p) => match std::fs::remove_file(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.to_string()),
            _ => Ok(()),
        },
        Place::Agent { agent, path } => client
            .delete(&agent.control, &path, dataplane::Role::Destination)
            .map(drop)
            .map_err(|e| e.to_string()),
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()));
    match gone {
        Ok(()) => {
            shared.store.enqueue(store::removal_done_op(r.id));
            Outcome::Done
        }
        Err(e) => {
            tracing::warn!(file = %r.name, site = %r.site, path = %r.path, error = %e, "replica file not removed (retried at the next start)");
            Outcome::Failed
        }
    }
}

/// Whether `path` is a file in the site storage directory `storage`: absolute, without `..`,
/// below `storage`; `local` (the server's own disk): its directory, symbolic links resolved,
/// is still below `storage` resolved (a missing directory: nothing to remove, and nothing
/// outside either). Err: why not.
pub(crate) fn within_storage(storage: &Path, path: &Path, local: bool) -> Result<(), String> {
    use std::path::Component;
    if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
        return Err(format!("'{}' is not a plain absolute path", path.display()));
    }
    if !path.starts_with(storage) || path == storage {
        return Err(format!(
            "'{}' is outside the site's storage '{}'",
            path.display(),
            storage.display()
        ));
    }
    if local {
        let (Some(dir), Ok(root)) = (path.parent(), storage.canonicalize()) else {
            return Ok(());
        };
        if let Ok(dir) = dir.canonicalize() {
            if !dir.starts_with(&root) {
                return Err(format!("'{}' leads outside the site's storage through a link", path.display()));
            }
        }
    }
    Ok(())
}

/// Failure injection for the kill tests (a real daemon cannot be stopped on cue between the
/// commit that drops a replica and the removal of its file): with
/// `KOALESCE_FAULT_REMOVAL_HOLD=<path>` in the daemon's environment, a removal writes
/// `<path>.reached` and waits while `<path>` exists.
async fn fault_hold() {
    let Some(hold) = std::env::var_os("KOALESCE_FAULT_REMOVAL_HOLD").map(PathBuf::from) else {
        return;
    };
    if !hold.exists() {
        return;
    }
    let mut reached = hold.clone().into_os_string();
    reached.push(".reached");
    let _ = std::fs::write(&reached, "");
    while hold.exists() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::within_storage;
    use std::path::Path;

    #[test]
    fn only_paths_below_the_storage_are_removed() {
        let d = tempfile::tempdir().unwrap();
        let storage = d.path().join("storage");
        std::fs::create_dir_all(storage.join("ab")).unwrap();
        let outside = d.path().join("home");
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, storage.join("link")).unwrap();
        assert_eq!(within_storage(&storage, &storage.join("ab/data.1"), true), Ok(()));
        // `.` inside a path names the same place (Rust's components drop it).
        assert_eq!(within_storage(&storage, &storage.join("./ab/data.1"), true), Ok(()));
        // Not created yet (or gone): nothing outside either.
        assert_eq!(within_storage(&storage, &storage.join("cd/data.1"), true), Ok(()));
        for p in [
            outside.join("data"),
            storage.clone(),
            storage.join("ab/../../home/data"),
            Path::new("ab/data.1").to_path_buf(),
            storage.join("link/data"),
        ] {
            assert!(within_storage(&storage, &p, true).is_err(), "{}", p.display());
        }
        // A site reached through its agent: the same rules but the links (not on this disk).
        assert_eq!(within_storage(&storage, &storage.join("link/data"), false), Ok(()));
        assert!(within_storage(&storage, &outside.join("data"), false).is_err());
    }
}
