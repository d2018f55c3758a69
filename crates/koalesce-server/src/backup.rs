//! `koalesce admin backup`: a consistent copy of a live server's database through SQLite's
//! online backup API (the server may keep writing; WAL mode), checked before it is kept.

use std::path::Path;

use anyhow::Context;

/// Copies the database of data directory `data_dir` to `dest` (which must not exist) in steps of
/// `pages_per_step` pages, calling `progress(done, total)` after each; the copy is checked with
/// `PRAGMA integrity_check` and written through a temporary file renamed into place. Returns the
/// copy's size in bytes.
pub fn backup(data_dir: &Path, dest: &Path, mut progress: impl FnMut(u64, u64)) -> anyhow::Result<u64> {
    let db = data_dir.join(crate::DB_FILE);
    anyhow::ensure!(db.is_file(), "{}: no koalesce database here", db.display());
    anyhow::ensure!(!dest.exists(), "{} exists: give a new file", dest.display());
    let src = rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .with_context(|| format!("opening {}", db.display()))?;
    src.busy_timeout(std::time::Duration::from_secs(10))?;
    let dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let tmp = tempfile::Builder::new()
        .prefix(".koalesce-backup.")
        .tempfile_in(&dir)
        .with_context(|| format!("creating a file in {}", dir.display()))?;
    {
        let mut out = rusqlite::Connection::open(tmp.path())?;
        {
            let b = rusqlite::backup::Backup::new(&src, &mut out)?;
            loop {
                let more = b.step(256).context("copying the database")?;
                let p = b.progress();
                progress((p.pagecount - p.remaining) as u64, p.pagecount as u64);
                match more {
                    rusqlite::backup::StepResult::Done => break,
                    // The server holds a lock for a moment: try again shortly.
                    rusqlite::backup::StepResult::More | rusqlite::backup::StepResult::Busy | rusqlite::backup::StepResult::Locked => {
                        if !matches!(more, rusqlite::backup::StepResult::More) {
                            std::thread::sleep(std::time::Duration::from_millis(20));
                        }
                    }
                    _ => std::thread::sleep(std::time::Duration::from_millis(20)),
                }
            }
        }
        let check: String = out.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
        anyhow::ensure!(check == "ok", "the copy failed its integrity check: {check}");
        // A self-contained file (no WAL beside it).
        out.pragma_update(None, "journal_mode", "DELETE")?;
    }
    tmp.as_file().sync_all()?;
    let size = tmp.as_file().metadata()?.len();
    tmp.persist_noclobber(dest).with_context(|| format!("writing {}", dest.display()))?;
    Ok(size)
}
