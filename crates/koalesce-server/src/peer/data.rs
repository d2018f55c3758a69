//! A migrated job's data (issue 14, 002 §III): its input files go to the receiver before it
//! runs there, and its outputs come back to the origin once it succeeded, so the user gets
//! them from the server they submitted to (`koalesce files get`).
//!
//! Transfers are pulls over the peers' HTTP API (peer secrets): the receiver of a handoff
//! fetches each input from the origin (`GET /api/v1/peer/sent/{h}/inputs/{name}`), the origin
//! fetches each output from the receiver (`GET /api/v1/peer/handoffs/{h}/outputs/{name}`).
//! Both go through the file catalogue as it is: the source is a registered replica, streamed
//! with its SHA-256 in `X-Checksum-Sha256`; the destination writes a resumable partial (the
//! data plane's [`Partial`]: an interrupted transfer, a killed server, resumes from the last
//! checkpoint with `Range`), checks size and SHA-256 against what the handoff declared, renames
//! it into a site's storage and registers it (`api_files::register_replica`).
//!
//! Names here: an input from peer `alpha` is registered as `peer-alpha/<sha256>` (owned by
//! `peer-alpha`; the same content is fetched once), and the job's description is rewritten to
//! stage it under the name it had; outputs of grid job N that ran at a peer are registered as
//! `grid-N/<file>` (or the output's `to`). Both prefixes are reserved: users cannot upload or
//! register such names. What a peer sends is untrusted: names never become paths (the storage
//! path is derived and sanitized), sizes and checksums are checked while the bytes arrive, and
//! a peer sending more than it declared, other bytes or an unknown name gets a clear error.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use koalesce_api::fields::InputFile;

use super::client::CallError;
use super::journal::{GridRow, Incoming};
use super::wire::PeerFile;
use super::{blocking, Federation};
use crate::dataplane::partial::Partial;
use crate::jobdesc::JobDescription;

/// Head of the names under which files received from a peer are registered (`peer-<name>/`).
pub const RECEIVED_PREFIX: &str = "peer-";
/// Head of the names under which outputs of jobs that ran at a peer are registered here.
pub const GRID_OUTPUT_PREFIX: &str = "grid-";
/// Where transfers from peers keep their resumable partial files (in the data directory).
pub const PARTIAL_DIR: &str = "federation-partial";

/// Bytes between two durable checkpoints of a transfer from a peer.
const CHECKPOINT_BYTES: u64 = 1 << 20;

/// Most input files a handoff may declare.
pub const MAX_INPUTS: usize = 1000;

/// Whether `name` is reserved for files moved between federated servers (`peer-*/...`,
/// `grid-<digits>/...`): users cannot upload or register it.
pub fn reserved_name(name: &str) -> bool {
    let Some((head, _)) = name.split_once('/') else {
        return false;
    };
    head.starts_with(RECEIVED_PREFIX)
        || head
            .strip_prefix(GRID_OUTPUT_PREFIX)
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// The name an input received from `origin` with content `sha256` has here.
pub fn received_name(origin: &str, sha256: &str) -> String {
    format!("{RECEIVED_PREFIX}{origin}/{sha256}")
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Checks what a peer declares about a file (field names it in errors).
fn check_file(field: &str, f: &PeerFile, max_bytes: u64) -> Result<(), String> {
    if f.name.is_empty() || f.name.len() > 1024 || f.name.chars().any(char::is_control) {
        return Err(format!("field '{field}.name': 1-1024 bytes without control characters"));
    }
    if !is_sha256(&f.sha256) {
        return Err(format!("field '{field}.sha256': not 64 lower-case hex digits"));
    }
    if f.size_bytes > max_bytes {
        return Err(format!(
            "field '{field}.size_bytes': {} bytes is over this server's limit of {max_bytes} (files.max_upload_bytes)",
            f.size_bytes
        ));
    }
    Ok(())
}

// ----- the origin ------------------------------------------------------------------------

/// The job's input files as this server's catalogue has them, once per logical name.
pub(crate) fn input_files(fed: &Federation, desc: &JobDescription) -> Result<Vec<PeerFile>, String> {
    let st = fed.shared.lock();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for f in &desc.inputs {
        if !seen.insert(f.logical()) {
            continue;
        }
        let info = st
            .files
            .get(f.logical())
            .ok_or_else(|| format!("input '{}' is not in this server's file catalogue", f.logical()))?;
        out.push(PeerFile {
            name: f.logical().to_string(),
            size_bytes: info.size_bytes,
            sha256: info.sha256.clone(),
        });
    }
    Ok(out)
}

/// The description a peer gets: outputs without `to` (it registers them as `<its id>/<file>`;
/// the origin registers them under the user's names when they come back).
pub(crate) fn for_peer(desc: &JobDescription) -> JobDescription {
    let mut d = desc.clone();
    for o in &mut d.outputs {
        o.to = None;
    }
    d
}

/// Where output `file` of grid job `gid` is registered here when it comes back from a peer.
pub(crate) fn output_name_here(desc: &JobDescription, gid: u64, file: &str) -> Option<String> {
    let out = desc.outputs.iter().find(|o| o.file == file)?;
    Some(match &out.to {
        Some(_) => out.logical_name(gid),
        None => format!("{GRID_OUTPUT_PREFIX}{gid}/{file}"),
    })
}

// ----- fetching --------------------------------------------------------------------------

/// One finished fetch: bytes received in this try and how long they took.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fetched {
    pub bytes: u64,
    pub took: Duration,
}

/// Fetches `f` from peer `i` (`path` on it) to `dest`, resuming a partial an earlier try left,
/// checking the size and SHA-256 the handoff declared; `dest` appears only when both match.
/// Blocking.
pub(crate) fn fetch(fed: &Federation, i: usize, path: &str, f: &PeerFile, dest: &Path) -> Result<Fetched, String> {
    let peer = &fed.peers[i];
    let what = format!("'{}' from {}", f.name, peer.name);
    // Partials live apart from the site storages, whose leftovers of interrupted local copies
    // are removed at every start: a transfer from a peer resumes after a restart.
    let part_path = partial_for(fed, dest, &f.sha256);
    let mut part = Partial::open(part_path, &f.sha256).map_err(|e| format!("{what}: partial file: {e}"))?;
    if part.len() > f.size_bytes {
        part.restart().map_err(|e| format!("{what}: {e}"))?;
    }
    let started = Instant::now();
    let offset = part.len();
    let mut received = 0u64;
    if offset < f.size_bytes {
        let mut resp = peer
            .get_bytes(path, offset, f.size_bytes - offset)
            .map_err(|e| format!("{what}: {e}"))?;
        let status = resp.status().as_u16();
        let head = |n: &str| resp.headers().get(n).and_then(|v| v.to_str().ok()).map(str::to_string);
        match status {
            206 => {
                let start = head("content-range").and_then(|r| crate::dataplane::parse_content_range(&r));
                if start.map(|(s, _, _)| s) != Some(offset) {
                    return Err(format!("{what}: answered a range that does not start at byte {offset}"));
                }
            }
            200 if offset > 0 => part.restart().map_err(|e| format!("{what}: {e}"))?,
            200 => {}
            _ => {
                let text = resp.body_mut().with_config().limit(64 << 10).read_to_string().unwrap_or_default();
                return Err(format!("{what}: {}", CallError::Refused(status, crate::api::cut_message(&text))));
            }
        }
        if let Some(sha) = head(crate::api_output::SHA256_HEADER).filter(|s| !s.eq_ignore_ascii_case(&f.sha256)) {
            return Err(format!(
                "{what}: the peer now has other content (SHA-256 {}, the handoff said {})",
                crate::api::cut_message(&sha),
                f.sha256
            ));
        }
        let want = f.size_bytes - part.len();
        // One byte more than declared is enough to refuse: never read (or store) beyond.
        let mut body = resp.body_mut().with_config().limit(u64::MAX).reader().take(want + 1);
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = match body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let _ = part.checkpoint();
                    return Err(format!(
                        "{what}: interrupted after {} of {} bytes ({e}); resumes from there",
                        part.len(),
                        f.size_bytes
                    ));
                }
            };
            if part.len() + n as u64 > f.size_bytes {
                part.discard();
                return Err(format!("{what}: the peer sent more than the {} bytes it declared", f.size_bytes));
            }
            part.write_all(&buf[..n]).map_err(|e| format!("{what}: writing: {e}"))?;
            received += n as u64;
            // A killed server resumes from the last checkpoint: one every MiB over a peer link
            // (slower than the data plane's LANs, where every 4 MiB is enough).
            if received % CHECKPOINT_BYTES < n as u64 {
                part.checkpoint().map_err(|e| format!("{what}: {e}"))?;
            }
        }
        if part.len() < f.size_bytes {
            let _ = part.checkpoint();
            return Err(format!(
                "{what}: the answer ended after {} of {} bytes; resumes from there",
                part.len(),
                f.size_bytes
            ));
        }
    }
    let done = part.complete().map_err(|e| format!("{what}: {e}"))?;
    if !done.sha256.eq_ignore_ascii_case(&f.sha256) || done.len != f.size_bytes {
        crate::dataplane::partial::remove(&done.path);
        return Err(format!(
            "{what}: checksum mismatch: received SHA-256 {}, the handoff declared {}; discarded",
            done.sha256, f.sha256
        ));
    }
    if let Some(dir) = dest.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{what}: {e}"))?;
    }
    std::fs::rename(&done.path, dest).map_err(|e| format!("{what}: {e}"))?;
    Ok(Fetched {
        bytes: received,
        took: started.elapsed(),
    })
}

/// Where a transfer from a peer to `dest` keeps its resumable partial (apart from the site
/// storages, whose leftovers of interrupted local copies are removed at every start).
pub(crate) fn partial_for(fed: &Federation, dest: &Path, sha256: &str) -> PathBuf {
    let parts = fed.shared.data_dir.join(PARTIAL_DIR);
    crate::dataplane::partial_path(&parts.join(dest.file_name().unwrap_or_default()), sha256)
}

/// Where a file for `dest` at a site with a storage agent is written before it is uploaded
/// there.
pub(crate) fn spool_path(fed: &Federation, dest: &Path) -> PathBuf {
    fed.shared.data_dir.join("spool").join(dest.file_name().unwrap_or_default())
}

/// Where input `sha256` received from `origin` is stored here, and its partial while it
/// arrives.
pub(crate) fn received_paths(fed: &Federation, origin: &str, sha256: &str) -> Result<(PathBuf, PathBuf), String> {
    let (_, storage) = storage_site(fed)?;
    let dest = crate::transfer::storage_path(&storage, &received_name(origin, sha256));
    let part = partial_for(fed, &dest, sha256);
    Ok((dest, part))
}

/// The site whose storage receives files from peers: the first one (the core stages them on
/// to where a job runs, like any catalogue file).
fn storage_site(fed: &Federation) -> Result<(String, PathBuf), String> {
    let s = fed.shared.sites.first().ok_or("this server has no site")?;
    Ok((s.name.clone(), s.paths.storage.clone()))
}

/// Fetches `f` (unless the catalogue has `name` with its content) and registers it as `name`
/// owned by `owner`. Feeds the measured bandwidth from peer `i`. `for_handoff`: an input of
/// that handoff, registered only while it is prepared (an abort meanwhile discards it).
async fn fetch_and_register(
    fed: &Arc<Federation>,
    i: usize,
    path: String,
    f: PeerFile,
    name: String,
    owner: String,
    for_handoff: Option<String>,
) -> Result<(), String> {
    let (site, storage) = storage_site(fed)?;
    let dest = crate::transfer::storage_path(&storage, &name);
    // Nobody removes (or writes) the path until the file is registered or discarded: a fetch
    // of the same content for another handoff waits, then finds it here.
    let _busy = crate::daemon::removals::PathGuard::take(&dest).await;
    {
        let st = fed.shared.lock();
        match st.files.get(&name) {
            Some(have) if have.sha256 == f.sha256 && have.size_bytes == f.size_bytes => return Ok(()),
            Some(_) => return Err(format!("'{name}' exists here with other content")),
            None => {}
        }
    }
    // A site with a storage agent is reached only through it: the verified file is uploaded
    // there from a spool copy (removed once it is there).
    let place = fed
        .shared
        .site_by_name(&site)
        .filter(|h| h.agent.is_some())
        .map(|h| crate::daemon::transfers::place_at(h, &dest));
    let write_to = match &place {
        Some(_) => spool_path(fed, &dest),
        None => dest.clone(),
    };
    let (fd, d, ff) = (fed.clone(), write_to.clone(), f.clone());
    let got = blocking(move || fetch(&fd, i, &path, &ff, &d)).await?;
    if got.bytes >= 64 << 10 && !got.took.is_zero() {
        fed.measured(i, got.bytes as f64 * 8.0 / got.took.as_secs_f64());
    }
    if let Some(place) = &place {
        super::via_agent::store(fed, &write_to, place, &f).await?;
    }
    // Under the lock aborts take: either this registers before an abort (whose sweep then
    // removes it) or it sees the abort and discards the file.
    let _one = match &for_handoff {
        Some(h) => {
            let one = fed.submit_lock.lock().await;
            let (j, key) = (fed.journal.clone(), h.clone());
            let state = blocking(move || j.incoming(&key))
                .await
                .map_err(|e| e.to_string())?
                .map(|inc| inc.state);
            if state.as_deref() != Some("prepared") {
                match &place {
                    Some(p) => super::via_agent::remove(fed, p).await,
                    None => {
                        let _ = std::fs::remove_file(&dest);
                    }
                }
                return Err(format!("handoff '{h}' is no longer prepared here: '{}' discarded", f.name));
            }
            Some(one)
        }
        None => None,
    };
    crate::api_files::register_replica(&fed.shared, &name, f.size_bytes, &f.sha256, &site, &dest, &owner).await
}

/// A background transfer: whether it runs, and why its last run failed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Fetch {
    running: bool,
    last_error: Option<String>,
}

/// Runs `work` in the background under `key` unless it already runs; its error is kept under
/// the key (shown while the next run goes) until a run succeeds.
pub(crate) fn spawn_once<Fut>(fed: &Arc<Federation>, key: String, work: Fut)
where
    Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    {
        let mut m = fed.fetches.lock().unwrap_or_else(|p| p.into_inner());
        let f = m.entry(key.clone()).or_default();
        if f.running {
            return;
        }
        f.running = true;
    }
    let fed = fed.clone();
    tokio::spawn(async move {
        let r = work.await;
        let mut m = fed.fetches.lock().unwrap_or_else(|p| p.into_inner());
        match r {
            Ok(()) => {
                m.remove(&key);
            }
            Err(e) => {
                tracing::warn!(key = %key, error = %e, "peer transfer failed");
                m.insert(
                    key,
                    Fetch {
                        running: false,
                        last_error: Some(e),
                    },
                );
            }
        }
    });
}

/// Whether the background transfer `key` runs now.
pub(crate) fn fetch_running(fed: &Federation, key: &str) -> bool {
    fed.fetches
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(key)
        .is_some_and(|f| f.running)
}

/// Forgets the last error of background transfer `key` unless it runs (its handoff is over:
/// nothing will show the error again, and the map would only grow).
pub(crate) fn forget_fetch(fed: &Federation, key: &str) {
    let mut m = fed.fetches.lock().unwrap_or_else(|p| p.into_inner());
    if m.get(key).is_some_and(|f| !f.running) {
        m.remove(key);
    }
}

/// The last error of the background transfer `key`, if it failed.
pub(crate) fn fetch_error(fed: &Federation, key: &str) -> Option<String> {
    fed.fetches
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(key)
        .and_then(|f| f.last_error.clone())
}

// ----- the receiver ----------------------------------------------------------------------

/// Checks the input files a handoff declares against its description (phase one).
pub(crate) fn check_inputs(desc: &JobDescription, inputs: &[PeerFile], max_bytes: u64) -> Result<(), String> {
    if inputs.len() > MAX_INPUTS {
        return Err(format!("field 'inputs': at most {MAX_INPUTS} files"));
    }
    let mut names = BTreeSet::new();
    for (k, f) in inputs.iter().enumerate() {
        check_file(&format!("inputs[{k}]"), f, max_bytes)?;
        if !names.insert(f.name.as_str()) {
            return Err(format!(
                "field 'inputs[{k}].name': '{}' is declared twice",
                crate::api::cut_message(&f.name)
            ));
        }
    }
    let wanted: BTreeSet<&str> = desc.inputs.iter().map(InputFile::logical).collect();
    if let Some(missing) = wanted.difference(&names).next() {
        return Err(format!(
            "field 'inputs': the job's input '{}' is not declared",
            crate::api::cut_message(missing)
        ));
    }
    if let Some(extra) = names.difference(&wanted).next() {
        return Err(format!(
            "field 'inputs': '{}' is not an input of the job",
            crate::api::cut_message(extra)
        ));
    }
    Ok(())
}

/// The inputs received from `origin` that a job submitted for one of its handoffs reads (its
/// description's inputs named `peer-<origin>/<sha256>`, with the size the catalogue has):
/// what a handoff taken back from its job ([`super::Federation::adopt`]) declares, so that its
/// release removes them and no other handoff's release removes them while the job needs them.
pub(crate) fn received_inputs_of(fed: &Federation, origin: &str, desc: &JobDescription) -> Vec<PeerFile> {
    let st = fed.shared.lock();
    let prefix = received_name(origin, "");
    let mut seen = BTreeSet::new();
    desc.inputs
        .iter()
        .filter_map(|f| {
            let sha = f.logical().strip_prefix(&prefix).filter(|s| is_sha256(s))?;
            seen.insert(sha.to_string()).then(|| PeerFile {
                name: f.local_name().to_string(),
                size_bytes: st.files.get(f.logical()).map_or(0, |i| i.size_bytes),
                sha256: sha.to_string(),
            })
        })
        .collect()
}

pub(crate) fn declared(inc: &Incoming) -> Vec<PeerFile> {
    serde_json::from_str(&inc.inputs).unwrap_or_default()
}

/// How many of a handoff's inputs are here.
pub(crate) fn inputs_here(fed: &Federation, inc: &Incoming) -> (usize, usize) {
    let files = declared(inc);
    let st = fed.shared.lock();
    let here = files
        .iter()
        .filter(|f| {
            st.files
                .get(&received_name(&inc.origin, &f.sha256))
                .is_some_and(|h| h.sha256 == f.sha256)
        })
        .count();
    (here, files.len())
}

/// The inputs of prepared handoff `inc` from peer `i`: all here, then the description to
/// submit (inputs renamed to their names here); else None while they are fetched in the
/// background (started here if no fetch runs; the handoff's view says how many are here and
/// why the last fetch failed).
pub(crate) fn inputs_ready(fed: &Arc<Federation>, i: usize, inc: &Incoming, desc: &JobDescription) -> Option<JobDescription> {
    let files = declared(inc);
    let (here, of) = inputs_here(fed, inc);
    if here == of {
        let by_name: BTreeMap<&str, &PeerFile> = files.iter().map(|f| (f.name.as_str(), f)).collect();
        let renamed: Vec<(String, String)> = by_name
            .iter()
            .map(|(n, f)| (n.to_string(), received_name(&inc.origin, &f.sha256)))
            .collect();
        return Some(renamed_inputs(desc, &renamed));
    }
    let key = format!("in:{}", inc.handoff);
    let (f2, h, origin) = (fed.clone(), inc.handoff.clone(), inc.origin.clone());
    spawn_once(fed, key, async move {
        let mut result = Ok(());
        for f in files {
            let path = format!("/api/v1/peer/sent/{}/inputs/{}", encode(&h), encode(&f.name));
            let name = received_name(&origin, &f.sha256);
            result = fetch_and_register(&f2, i, path, f, name, format!("peer-{origin}"), Some(h.clone())).await;
            if result.is_err() {
                break;
            }
        }
        // Aborted while this ran: what it left (a partial it wrote after the abort's sweep)
        // goes now, and its error is not kept (nothing would show it again).
        if super::cleanup::after_fetch(&f2, &h).await {
            return Ok(());
        }
        result
    });
    None
}

/// Removes the inputs received for released handoff `inc` that no live handoff from the same
/// origin declares (prepared, or committed and not released) and no unended job uses: (how
/// many went, how many an unended job here still reads — not a handoff's: a job of this
/// server's users may name a received file too; they go on a later pass, once it ended). The
/// caller holds `submit_lock` (no commit takes an input meanwhile). A crash before or during
/// leaves files that are not needed (a repeated `done` sweeps them), never removes one that is.
pub(crate) async fn release_inputs(fed: &Arc<Federation>, inc: &Incoming) -> Result<(usize, usize), String> {
    let needed = needed_by_others(fed, inc).await.map_err(|e| e.to_string())?;
    let (mut removed, mut in_use) = (0, 0);
    for f in declared(inc) {
        if needed.contains(&f.sha256) {
            continue;
        }
        let name = received_name(&inc.origin, &f.sha256);
        if crate::api_files::remove_file(&fed.shared, &name).await? {
            removed += 1;
        } else if fed.shared.lock().files.contains_key(&name) {
            in_use += 1;
        }
    }
    Ok((removed, in_use))
}

/// The contents (SHA-256) that live handoffs from `inc`'s origin other than `inc` declare
/// (prepared, or committed and not released: their jobs may still read them). The caller holds
/// `submit_lock`, so no commit changes that meanwhile.
pub(crate) async fn needed_by_others(fed: &Arc<Federation>, inc: &Incoming) -> rusqlite::Result<BTreeSet<String>> {
    let (j, origin) = (fed.journal.clone(), inc.origin.clone());
    let live = blocking(move || j.live_incoming(&origin)).await?;
    Ok(live
        .iter()
        .filter(|l| l.handoff != inc.handoff)
        .flat_map(|l| declared(l).into_iter().map(|f| f.sha256))
        .collect())
}

/// `desc` with its inputs renamed (`(old, new)` logical names): the job still finds each
/// under the names it used — staged as before (`as`), and `KOALESCE_INPUT_<OLD>` both in its
/// environment and in `${...}` references of its program, arguments and environment.
pub(crate) fn renamed_inputs(desc: &JobDescription, renamed: &[(String, String)]) -> JobDescription {
    use crate::daemon::launch::env_name;
    let mut d = desc.clone();
    let vars: Vec<(String, String)> = renamed
        .iter()
        .map(|(old, new)| {
            (
                format!("KOALESCE_INPUT_{}", env_name(old)),
                format!("KOALESCE_INPUT_{}", env_name(new)),
            )
        })
        .collect();
    let fix = |s: &mut String| {
        for (old, new) in &vars {
            *s = s.replace(&format!("${{{old}}}"), &format!("${{{new}}}"));
        }
    };
    fix(&mut d.executable);
    d.arguments.iter_mut().for_each(fix);
    d.environment.values_mut().for_each(fix);
    for c in &mut d.components {
        c.executable.iter_mut().for_each(fix);
        c.arguments.iter_mut().flatten().for_each(fix);
        c.environment.values_mut().for_each(fix);
    }
    for (old, new) in &vars {
        d.environment.entry(old.clone()).or_insert_with(|| format!("${{{new}}}"));
    }
    for input in &mut d.inputs {
        if let Some((_, new)) = renamed.iter().find(|(old, _)| old == input.logical()) {
            let staged = input.local_name().to_string();
            input.file = new.clone();
            input.as_name = Some(staged);
        }
    }
    d
}

/// The outputs of a job that succeeded here, as its origin fetches them.
pub(crate) fn outputs_of(fed: &Federation, names: &[String]) -> Vec<PeerFile> {
    let st = fed.shared.lock();
    names
        .iter()
        .filter_map(|n| {
            st.files.get(n).map(|f| PeerFile {
                name: n.clone(),
                size_bytes: f.size_bytes,
                sha256: f.sha256.clone(),
            })
        })
        .collect()
}

/// Percent-encodes one path segment (names may hold '/', spaces, anything).
pub(crate) fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

// ----- outputs back at the origin --------------------------------------------------------

/// Fetches the outputs of migrated grid job `row` (description `desc`) that ran as job `rid` at
/// peer `i`, registers them here and records their names; in
/// the background, once at a time. The journal's `data_error` says why it failed.
pub(crate) fn fetch_outputs(fed: &Arc<Federation>, i: usize, row: &GridRow, rid: u64, desc: &JobDescription, outputs: Vec<PeerFile>) {
    let gid = row.id;
    let key = format!("out:{gid}");
    let (f2, h, desc, user) = (fed.clone(), row.handoff.clone().unwrap_or_default(), desc.clone(), row.user.clone());
    let max = fed.shared.config.files.max_upload_bytes;
    spawn_once(fed, key, async move {
        let result = async {
            let mut names = Vec::new();
            for (k, f) in outputs.into_iter().enumerate() {
                check_file(&format!("outputs[{k}]"), &f, max)?;
                let file = f
                    .name
                    .strip_prefix(&format!("{rid}/"))
                    .ok_or_else(|| format!("output '{}' is not an output of job {rid}", crate::api::cut_message(&f.name)))?;
                let here = output_name_here(&desc, gid, file)
                    .ok_or_else(|| format!("'{}' is not a declared output of the job", crate::api::cut_message(file)))?;
                let own = format!("{GRID_OUTPUT_PREFIX}{gid}/");
                if crate::file_import::reserved_output_name(&here).is_some() || (reserved_name(&here) && !here.starts_with(&own)) {
                    return Err(format!("output '{file}': '{here}' is reserved for a job of this server"));
                }
                if let Some(owner) = f2.shared.lock().files.get(&here).map(|x| x.owner.clone()) {
                    if owner.as_deref() != Some(user.as_str()) {
                        return Err(format!("output '{file}': '{here}' is another user's file here"));
                    }
                }
                let path = format!("/api/v1/peer/handoffs/{}/outputs/{}", encode(&h), encode(&f.name));
                fetch_and_register(&f2, i, path, f, here.clone(), user.clone(), None).await?;
                names.push(here);
            }
            Ok::<_, String>(names)
        }
        .await;
        let j = f2.journal.clone();
        match result {
            Ok(names) => {
                let json = serde_json::to_string(&names).unwrap_or_else(|_| "[]".into());
                blocking(move || j.set_outputs(gid, &json)).await.map_err(|e| e.to_string())
            }
            Err(e) => {
                let msg = format!("outputs from {}: {e}", f2.peers[i].name);
                let m = msg.clone();
                let _ = blocking(move || j.set_data_error(gid, Some(&m))).await;
                Err(msg)
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, size: u64) -> PeerFile {
        PeerFile {
            name: name.into(),
            size_bytes: size,
            sha256: "a".repeat(64),
        }
    }

    #[test]
    fn reserved_names_are_the_federations() {
        assert!(reserved_name("peer-alpha/abc"));
        assert!(reserved_name("grid-12/out.txt"));
        assert!(!reserved_name("grid-x/out.txt") && !reserved_name("grid-/x") && !reserved_name("peer-alpha"));
        assert!(!reserved_name("data/peer-x") && !reserved_name("12/x"));
    }

    #[test]
    fn declared_inputs_must_be_the_jobs_and_well_formed() {
        let desc = JobDescription::parse(
            "name = 'j'\nexecutable = '/bin/true'\ninputs = ['a', { file = 'b', as = 'c' }]\n[[components]]\nprocessors = 1\n",
        )
        .unwrap();
        assert!(check_inputs(&desc, &[file("a", 1), file("b", 2)], 10).is_ok());
        let cases: Vec<(Vec<PeerFile>, &str)> = vec![
            (vec![file("a", 1)], "'b' is not declared"),
            (
                vec![file("a", 1), file("b", 2), file("../../etc/passwd", 1)],
                "not an input of the job",
            ),
            (vec![file("a", 1), file("b", 11)], "inputs[1].size_bytes"),
            (vec![file("a", 1), file("a", 1), file("b", 1)], "declared twice"),
            (
                vec![
                    file("a", 1),
                    PeerFile {
                        sha256: "../x".into(),
                        ..file("b", 1)
                    },
                ],
                "inputs[1].sha256",
            ),
            (
                vec![
                    file("a", 1),
                    PeerFile {
                        sha256: "A".repeat(64),
                        ..file("b", 1)
                    },
                ],
                "inputs[1].sha256",
            ),
            (vec![file("a\n", 1), file("b", 1)], "inputs[0].name"),
            (vec![file(&"x".repeat(2000), 1), file("b", 1)], "inputs[0].name"),
        ];
        for (inputs, want) in cases {
            let e = check_inputs(&desc, &inputs, 10).unwrap_err();
            assert!(e.contains(want), "{e} should say {want}");
        }
    }

    #[test]
    fn renamed_inputs_keep_the_names_the_job_uses() {
        let desc = JobDescription::parse(
            "name = 'j'\nexecutable = '/bin/cat'\narguments = ['${KOALESCE_INPUT_DATA_BIN}']\ninputs = ['data.bin']\n\
             [[components]]\nprocessors = 1\nenvironment = { X = '${KOALESCE_INPUT_DATA_BIN}' }\n",
        )
        .unwrap();
        let d = renamed_inputs(&desc, &[("data.bin".into(), "peer-a/abc".into())]);
        assert_eq!(d.inputs[0].file, "peer-a/abc");
        assert_eq!(d.inputs[0].local_name(), "data.bin");
        assert_eq!(d.arguments, vec!["${KOALESCE_INPUT_PEER_A_ABC}".to_string()]);
        assert_eq!(d.components[0].environment["X"], "${KOALESCE_INPUT_PEER_A_ABC}");
        assert_eq!(d.environment["KOALESCE_INPUT_DATA_BIN"], "${KOALESCE_INPUT_PEER_A_ABC}");
        // What the receiver submits is a valid description.
        JobDescription::parse(&d.to_toml()).unwrap();
    }

    #[test]
    fn outputs_come_back_under_the_grid_jobs_names() {
        let desc = JobDescription::parse(
            "name = 'j'\nexecutable = '/bin/true'\noutputs = ['r.txt', { file = 'log', to = 'logs/${KOALESCE_JOB_ID}.log' }]\n[[components]]\nprocessors = 1\n",
        )
        .unwrap();
        assert_eq!(output_name_here(&desc, 7, "r.txt").as_deref(), Some("grid-7/r.txt"));
        assert_eq!(output_name_here(&desc, 7, "log").as_deref(), Some("logs/7.log"));
        assert_eq!(output_name_here(&desc, 7, "other"), None);
        assert!(for_peer(&desc).outputs.iter().all(|o| o.to.is_none()));
    }
}
