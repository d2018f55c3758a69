//! `koalesce files get NAME [-o PATH]`: downloads a catalogue file or a job's output
//! (`<job-id>/<name>`) from the server (`GET /api/v1/files/{name}`), streamed to a temporary
//! file next to PATH while its SHA-256 is computed; only a download whose checksum and size
//! are the server's is renamed into place (`-o -`: standard output, checked at the end).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use sha2::{Digest, Sha256};

use super::api::{encode_path_segment, Client};

/// Where a download goes by default: the last part of the logical name, in the current
/// directory.
pub fn default_target(name: &str) -> PathBuf {
    let base = name
        .rsplit('/')
        .find(|p| !p.is_empty() && *p != "." && *p != "..")
        .unwrap_or("download");
    PathBuf::from(base)
}

/// Copies `from` to `to`, hashing what passes; returns (bytes, hex SHA-256).
fn copy_hashed(from: &mut dyn Read, to: &mut dyn Write) -> std::io::Result<(u64, String)> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut n = 0u64;
    loop {
        let k = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.update(&buf[..k]);
        to.write_all(&buf[..k])?;
        n += k as u64;
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok((n, hex))
}

/// Downloads `name` to `target` (`-`: standard output). Returns (bytes, SHA-256).
pub fn download(client: &Client, name: &str, target: &Path) -> anyhow::Result<(u64, String)> {
    let path = format!("/api/v1/files/{}", encode_path_segment(name));
    let mut resp = client.get_stream(&path)?;
    let header = |n: &str| resp.headers().get(n).and_then(|v| v.to_str().ok()).map(str::to_string);
    let want_sha = header("x-checksum-sha256").unwrap_or_default();
    let want_len: Option<u64> = header("content-length").and_then(|v| v.parse().ok());
    let mut body = resp.body_mut().with_config().limit(u64::MAX).reader();
    let check = |n: u64, sha: &str| -> anyhow::Result<()> {
        if let Some(len) = want_len.filter(|&l| l != n) {
            anyhow::bail!("'{name}': received {n} of {len} bytes (connection cut?)");
        }
        if !want_sha.is_empty() && !sha.eq_ignore_ascii_case(&want_sha) {
            anyhow::bail!("'{name}': checksum mismatch: received SHA-256 {sha}, the server's is {want_sha}");
        }
        Ok(())
    };
    if target == Path::new("-") {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        let (n, sha) = copy_hashed(&mut body, &mut out).with_context(|| format!("downloading '{name}'"))?;
        out.flush()?;
        check(n, &sha)?;
        return Ok((n, sha));
    }
    let dir = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".koalesce-download.")
        .tempfile_in(&dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    let (n, sha) = copy_hashed(&mut body, tmp.as_file_mut()).with_context(|| format!("downloading '{name}'"))?;
    // The temporary file is removed (dropped) when the download is not the server's file.
    check(n, &sha)?;
    tmp.as_file().sync_all()?;
    // A download is the user's file like any other (the temporary file was private).
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o644))?;
    }
    tmp.persist(target).with_context(|| format!("writing {}", target.display()))?;
    Ok((n, sha))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_targets_are_the_last_part_of_the_name() {
        assert_eq!(default_target("17/result.txt"), PathBuf::from("result.txt"));
        assert_eq!(default_target("dataset.bin"), PathBuf::from("dataset.bin"));
        assert_eq!(default_target("logs/../"), PathBuf::from("logs"));
        assert_eq!(default_target(".."), PathBuf::from("download"));
    }

    #[test]
    fn the_hash_is_of_what_was_copied() {
        let mut out = Vec::new();
        let (n, sha) = copy_hashed(&mut &b"abc"[..], &mut out).unwrap();
        assert_eq!((n, out.as_slice()), (3, &b"abc"[..]));
        assert_eq!(sha, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
