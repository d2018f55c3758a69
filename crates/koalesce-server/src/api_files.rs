//! The replica catalogue's endpoints: list, upload (`PUT /api/v1/files/{name}?site=S`, the
//! content streamed in the body and checksummed on the way), registration of a server-local
//! path (`POST /api/v1/files`: admins, and users inside their `[files] import_dirs`; see
//! [`crate::file_import`]) and deletion (the owner or an admin).
//!
//! Every file has an owner: who uploaded or registered it, or the user of the job whose output
//! it is. Names `<job-id>/...` are reserved for the outputs of that job.

use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State as AxState};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use koalesce_api::dto::{FileInfo, NewFile};
use serde::Deserialize;

use crate::api::{authenticate, err, read_body, Caller, R};
use crate::daemon::removals::PathGuard;
use crate::daemon::transfers::add_replica_mem;
use crate::daemon::{self, Shared};
use crate::file_import::{self, ImportError};
use crate::{store, transfer};

type S = Arc<Shared>;

pub(crate) fn file_json(name: &str, f: &daemon::FileInfo) -> FileInfo {
    FileInfo {
        name: name.to_string(),
        size_bytes: f.size_bytes,
        sha256: f.sha256.clone(),
        replicas: f.replicas.keys().cloned().collect(),
        owner: f.owner.clone().unwrap_or_default(),
    }
}

/// `GET /api/v1/files?limit=N&after=NAME`: the catalogue in name order, a page at a time
/// (as the job list: [`crate::job_list::DEFAULT_LIMIT`] files unless `limit` says, at most
/// [`crate::job_list::MAX_LIMIT`]); a cut page names the next one's `after` (percent-encoded)
/// in `X-Koalesce-Next-After` and links it (`Link: <...>; rel="next"`).
pub(crate) async fn list_files(
    AxState(s): AxState<S>,
    headers: HeaderMap,
    q: Result<Query<FilesQuery>, axum::extract::rejection::QueryRejection>,
) -> R<Response> {
    authenticate(&s, &headers)?;
    let Query(q) = q.map_err(|e| err(StatusCode::BAD_REQUEST, format!("query: {e}")))?;
    let limit = crate::job_list::page_limit(q.limit).map_err(|e| err(StatusCode::UNPROCESSABLE_ENTITY, e))?;
    let mut page: Vec<FileInfo> = {
        let st = s.lock();
        let from = match &q.after {
            Some(a) => std::ops::Bound::Excluded(a.as_str()),
            None => std::ops::Bound::Unbounded,
        };
        st.files
            .range::<str, _>((from, std::ops::Bound::Unbounded))
            .take(limit + 1)
            .map(|(n, f)| file_json(n, f))
            .collect()
    };
    let mut h = HeaderMap::new();
    if page.len() > limit {
        page.truncate(limit);
        if let Some(last) = page.last() {
            let enc: String = form_urlencoded::byte_serialize(last.name.as_bytes()).collect();
            h = crate::job_list::next_page_headers("/api/v1/files", &format!("limit={limit}"), &enc);
        }
    }
    Ok((StatusCode::OK, h, Json(page)).into_response())
}

#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct FilesQuery {
    limit: Option<usize>,
    after: Option<String>,
}

/// Checks a name a user gives a file.
fn check_name(name: &str) -> R<()> {
    let chars = name.chars().count();
    if chars == 0 || chars > 255 || name.chars().any(char::is_control) {
        return Err(err(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("field 'name': must be 1 to 255 characters without control characters (got {chars})"),
        ));
    }
    if crate::peer::data::reserved_name(name) {
        return Err(err(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "field 'name': names 'peer-*/...' and 'grid-<id>/...' are reserved for files moved between federated servers ('{name}')"
            ),
        ));
    }
    if let Some(job) = file_import::reserved_output_name(name) {
        let job = if job == u64::MAX {
            "that job".to_string()
        } else {
            format!("job {job}")
        };
        return Err(err(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("field 'name': names '<job-id>/...' are reserved for the outputs of that job ('{name}' is {job}'s)"),
        ));
    }
    Ok(())
}

/// What a new replica must be, checked before any byte is copied.
struct Prepared {
    name: String,
    site: String,
    dest: PathBuf,
    /// Where the bytes are written first: `dest`, or for a site with a storage agent a spool
    /// file on the server's disk that is then uploaded to the agent (`agent`).
    write_to: PathBuf,
    agent: Option<crate::dataplane::Place>,
    /// (sha256, size) of the registered file this is one more replica of.
    expected: Option<(String, u64)>,
    /// Bytes the caller may still store (quota).
    bytes_left: Option<u64>,
    /// Set once `dest` is a pending removal ([`Prepared::intend`]) until the registration
    /// clears it: a request that ends otherwise has what it wrote removed.
    intent: Option<Arc<Shared>>,
    _busy: PathGuard,
}

impl Prepared {
    /// Commits a pending removal of `dest` before any byte is written there: a crash between
    /// the copy and its registration leaves a file no record names, which it removes at the
    /// next start (the registration clears it, `store::stage_in_op`).
    async fn intend(&mut self, s: &Arc<Shared>) -> R<()> {
        let op = store::stage_in_op(self.name.clone(), self.site.clone(), self.dest.display().to_string());
        s.store
            .write(op)
            .await
            .map_err(|e| err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
        self.intent = Some(s.clone());
        Ok(())
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        // Not registered: what it wrote (if anything) goes, once this path is free.
        if let (Some(s), Ok(rt)) = (self.intent.take(), tokio::runtime::Handle::try_current()) {
            let name = self.name.clone();
            rt.spawn(async move { crate::daemon::removals::after_commit(&s, &name).await });
        }
    }
}

/// How long a new copy waits for its storage path while another writer has it: the removal
/// of what an upload that just failed wrote there (it starts as that request ends, so the
/// same file sent again at once finds it under way), or another upload of the same file,
/// after which the catalogue is looked at again.
const PATH_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

async fn prepare(s: &Shared, caller: &Caller, name: &str, site: &str) -> R<Prepared> {
    check_name(name)?;
    let Some(handle) = s.site_by_name(site) else {
        return Err(err(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("field 'site': site '{site}' does not exist"),
        ));
    };
    let dest = transfer::storage_path(&handle.paths.storage, name);
    let (write_to, agent) = match handle.agent {
        Some(_) => {
            let spool = s.data_dir.join("spool");
            std::fs::create_dir_all(&spool).map_err(|e| err(StatusCode::INTERNAL_SERVER_ERROR, format!("spool directory: {e}")))?;
            let file = dest.file_name().unwrap_or_default();
            (spool.join(file), Some(crate::daemon::transfers::place_at(handle, &dest)))
        }
        None => (dest.clone(), None),
    };
    let busy = PathGuard::take_within(&dest, PATH_WAIT)
        .await
        .ok_or_else(|| err(StatusCode::CONFLICT, "another upload of this file to this site is under way"))?;
    let st = s.lock();
    let expected = match st.files.get(name) {
        Some(f) if !caller.admin && f.owner.as_deref() != Some(caller.user.as_str()) => {
            return Err(err(
                StatusCode::FORBIDDEN,
                format!("file '{name}' belongs to another user; only its owner or an admin adds replicas"),
            ));
        }
        Some(f) if f.replicas.contains_key(site) => {
            return Err(err(
                StatusCode::CONFLICT,
                format!("file '{name}' already has a replica at '{site}'"),
            ));
        }
        Some(f) => Some((f.sha256.clone(), f.size_bytes)),
        None => None,
    };
    let bytes_left = s.config.quotas.bytes_left(&st, &caller.user);
    if let (Some(left), Some((_, size))) = (bytes_left, &expected) {
        if *size > left {
            let e = s.config.quotas.check_bytes(&st, &caller.user, *size).err();
            return Err(err(StatusCode::TOO_MANY_REQUESTS, e.map(|e| e.to_string()).unwrap_or_default()));
        }
    }
    drop(st);
    Ok(Prepared {
        name: name.to_string(),
        site: site.to_string(),
        _busy: busy,
        dest,
        write_to,
        agent,
        expected,
        bytes_left,
        intent: None,
    })
}

/// Registers a copied replica (durably, then in memory) owned by the caller (a new file) and
/// answers 201 with the catalogue entry.
async fn register(s: &S, caller: &Caller, mut p: Prepared, copied: transfer::Copied) -> R<Response> {
    if let Some(place) = p.agent.clone() {
        // A site with an agent is reached only through it: the spooled copy is uploaded
        // (verified against the checksum just computed), then removed.
        let (client, spool) = (s.agents.clone(), p.write_to.clone());
        let expect = crate::dataplane::Expected {
            sha256: copied.sha256.clone(),
            size: copied.bytes,
        };
        let sent = tokio::task::spawn_blocking(move || {
            let r = crate::dataplane::move_file(&client, &crate::dataplane::Place::Local(spool.clone()), &place, &expect);
            let _ = std::fs::remove_file(&spool);
            r
        })
        .await
        .map_err(|e| err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
        sent.map_err(|e| {
            err(
                StatusCode::BAD_GATEWAY,
                format!("storing '{}' at site '{}' through its agent: {e}", p.name, p.site),
            )
        })?;
    }
    crate::daemon::transfers::fault_hold("KOALESCE_FAULT_REGISTER_HOLD", 0).await;
    register_replica(s, &p.name, copied.bytes, &copied.sha256, &p.site, &p.dest, &caller.user)
        .await
        .map_err(|e| err(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    // Registered: the commit cleared the pending removal of its path.
    p.intent = None;
    let st = s.lock();
    let entry = file_json(&p.name, &st.files[&p.name]);
    Ok((StatusCode::CREATED, Json(entry)).into_response())
}

/// Registers a verified copy at `dest` as a replica of `name` at `site` (owned by `owner` when
/// the file is new): durably, then in the catalogues. Also used for files received from peers.
pub(crate) async fn register_replica(
    s: &Arc<Shared>,
    name: &str,
    bytes: u64,
    sha256: &str,
    site: &str,
    dest: &std::path::Path,
    owner: &str,
) -> Result<(), String> {
    s.store
        .write(store::register_replica_op(store::NewReplica {
            name: name.to_string(),
            size: bytes,
            sha256: sha256.to_string(),
            owner: Some(owner.to_string()),
            site: site.to_string(),
            path: dest.display().to_string(),
        }))
        .await
        .map_err(|e| e.to_string())?;
    s.metrics.transfer_bytes.fetch_add(bytes, Ordering::Relaxed);
    s.data_catalogue.invalidate(name);
    transfer::note_verified(dest);
    add_replica_mem(&mut s.lock(), name, bytes, sha256, site, dest.to_path_buf(), Some(owner));
    // Its replicas of other content are out of the database, pending removal: their bytes go.
    let (s, name) = (s.clone(), name.to_string());
    tokio::spawn(async move { crate::daemon::removals::after_commit(&s, &name).await });
    Ok(())
}

/// The answer for a copy that failed.
fn copy_error(p: &Prepared, e: transfer::TransferError) -> crate::api::ApiError {
    match &p.expected {
        Some(_) => err(StatusCode::CONFLICT, format!("not a replica of the registered '{}': {e}", p.name)),
        None => err(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
    }
}

/// `POST /api/v1/files` `{name, path, site}`: registers a file on the server's machine.
pub(crate) async fn add_file(AxState(s): AxState<S>, req: Request) -> R<Response> {
    let caller = authenticate(&s, req.headers())?;
    let body = read_body(&s, req).await?;
    let raw: serde_json::Value = serde_json::from_slice(&body).map_err(|e| err(StatusCode::BAD_REQUEST, format!("malformed JSON: {e}")))?;
    let add: NewFile = serde_json::from_value(raw).map_err(|e| err(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()))?;
    check_name(&add.name)?;
    if s.site_by_name(&add.site).is_none() {
        return Err(err(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("field 'site': site '{}' does not exist", add.site),
        ));
    }
    file_import::check_path(&add.path, &caller.user, caller.admin, &s.config.files, &s.data_dir).map_err(import_error)?;
    let mut p = prepare(&s, &caller, &add.name, &add.site).await?;
    p.intend(&s).await?;
    let (src, data_dir, dest) = (add.path.clone(), s.data_dir.clone(), p.write_to.clone());
    let want = p.expected.clone();
    let left = p.bytes_left;
    let copied = tokio::task::spawn_blocking(move || -> Result<Result<transfer::Copied, transfer::TransferError>, ImportError> {
        let file = file_import::open_checked(&src, &data_dir)?;
        if let (Some(left), Ok(m)) = (left, file.metadata()) {
            if m.len() > left {
                return Err(ImportError::Forbidden(format!("quota: {} bytes, {left} left", m.len())));
            }
        }
        let what = src.display().to_string();
        Ok(transfer::copy_file_verified(
            file,
            &what,
            &dest,
            want.as_ref().map(|(sha, size)| (sha.as_str(), *size)),
        ))
    })
    .await
    .map_err(|e| err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let copied = match copied {
        Err(ImportError::Forbidden(m)) if m.starts_with("quota") => {
            let st = s.lock();
            let used = s.config.quotas.check_bytes(&st, &caller.user, u64::MAX).err();
            return Err(err(StatusCode::TOO_MANY_REQUESTS, used.map(|e| e.to_string()).unwrap_or(m)));
        }
        Err(e) => return Err(import_error(e)),
        Ok(Err(e)) => return Err(copy_error(&p, e)),
        Ok(Ok(c)) => c,
    };
    register(&s, &caller, p, copied).await
}

fn import_error(e: ImportError) -> crate::api::ApiError {
    match e {
        ImportError::Forbidden(m) => err(StatusCode::FORBIDDEN, m),
        ImportError::Refused(m) | ImportError::Io(m) => err(StatusCode::UNPROCESSABLE_ENTITY, m),
    }
}

#[derive(Deserialize)]
pub(crate) struct UploadQuery {
    site: Option<String>,
    /// The content's SHA-256 as the client computed it: the upload is refused unless it
    /// arrived with that checksum.
    sha256: Option<String>,
}

/// Reads an upload's chunks on a blocking thread (the copy's side of the stream).
struct ChunkReader {
    rx: tokio::sync::mpsc::Receiver<Result<Bytes, String>>,
    cur: Bytes,
}

impl Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.cur = b,
                Some(Err(e)) => return Err(io::Error::other(e)),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur.split_to(n));
        Ok(n)
    }
}

/// `PUT /api/v1/files/{name}?site=S[&sha256=HEX]`: the body is the file's content.
pub(crate) async fn upload_file(
    AxState(s): AxState<S>,
    Path(name): Path<String>,
    q: Result<Query<UploadQuery>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> R<Response> {
    use http_body_util::BodyExt;
    let caller = authenticate(&s, req.headers())?;
    let Query(q) = q.map_err(|e| err(StatusCode::BAD_REQUEST, format!("query: {e}")))?;
    let site = q.site.ok_or_else(|| {
        err(
            StatusCode::UNPROCESSABLE_ENTITY,
            "parameter 'site': the site whose storage receives the file is required",
        )
    })?;
    let mut p = prepare(&s, &caller, &name, &site).await?;
    p.intend(&s).await?;
    let max = s.config.files.max_upload_bytes;
    let limit = p.bytes_left.map_or(max, |l| l.min(max));
    let over = |len: u64| -> crate::api::ApiError {
        if p.bytes_left.is_some_and(|l| l < max && len > l) {
            let st = s.lock();
            let msg = s.config.quotas.check_bytes(&st, &caller.user, len).err().map(|e| e.to_string());
            err(StatusCode::TOO_MANY_REQUESTS, msg.unwrap_or_else(|| "quota exceeded".into()))
        } else {
            err(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("upload: over the limit of {max} bytes (files.max_upload_bytes)"),
            )
        }
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(len) = declared.filter(|&l| l > limit) {
        return Err(over(len));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, String>>(8);
    let (dest, want) = (p.write_to.clone(), p.expected.clone());
    let what = format!("upload of '{name}'");
    let writer = tokio::task::spawn_blocking(move || {
        let reader = ChunkReader { rx, cur: Bytes::new() };
        transfer::copy_file_verified(reader, &what, &dest, want.as_ref().map(|(sha, size)| (sha.as_str(), *size)))
    });
    let idle = std::time::Duration::from_millis(s.config.body_timeout_ms);
    let mut body: Body = req.into_body();
    let mut total = 0u64;
    let mut failed: Option<crate::api::ApiError> = None;
    loop {
        let frame = match tokio::time::timeout(idle, body.frame()).await {
            Err(_) => {
                failed = Some(err(
                    StatusCode::REQUEST_TIMEOUT,
                    format!("upload: nothing received for {} ms", idle.as_millis()),
                ));
                break;
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                failed = Some(err(StatusCode::BAD_REQUEST, format!("upload: incomplete ({e})")));
                break;
            }
            Ok(Some(Ok(f))) => f,
        };
        let Ok(data) = frame.into_data() else { continue };
        total += data.len() as u64;
        if total > limit {
            failed = Some(over(total));
            break;
        }
        if tx.send(Ok(data)).await.is_err() {
            break;
        }
    }
    if let Some(e) = failed {
        let _ = tx.send(Err(e.1.clone())).await;
        drop(tx);
        let _ = writer.await;
        return Err(e);
    }
    drop(tx);
    let copied = writer
        .await
        .map_err(|e| err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| copy_error(&p, e))?;
    if let Some(want) = q.sha256.as_deref().filter(|w| !w.eq_ignore_ascii_case(&copied.sha256)) {
        if p.expected.is_none() || p.agent.is_some() {
            let _ = std::fs::remove_file(&p.write_to);
        }
        return Err(err(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "upload of '{name}': checksum mismatch (sent sha256 {want}, received {}); nothing registered",
                copied.sha256
            ),
        ));
    }
    register(&s, &caller, p, copied).await
}

/// `DELETE /api/v1/files/{name}`: the owner or an admin.
pub(crate) async fn delete_file(AxState(s): AxState<S>, headers: HeaderMap, Path(name): Path<String>) -> R<Response> {
    let caller = authenticate(&s, &headers)?;
    {
        let st = s.lock();
        let Some(info) = st.files.get(&name) else {
            return Err(err(StatusCode::NOT_FOUND, format!("file '{name}' not found")));
        };
        if !caller.admin && info.owner.as_deref() != Some(caller.user.as_str()) {
            return Err(err(
                StatusCode::FORBIDDEN,
                format!("file '{name}' belongs to another user; only its owner or an admin deletes it"),
            ));
        }
        if let Some(j) = st
            .core
            .jobs()
            .find(|j| !j.state.is_terminal() && j.spec.input_files.contains(&name))
        {
            return Err(err(
                StatusCode::CONFLICT,
                format!("file '{name}' is an input of job {} ({})", j.id.0, j.state.name()),
            ));
        };
    }
    let removed = remove_file(&s, &name)
        .await
        .map_err(|e| err(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    if !removed {
        return Err(err(StatusCode::CONFLICT, format!("file '{name}' became an input of a job")));
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Removes catalogue file `name` unless a job that has not ended uses it as an input; false
/// when it is in use (or unknown). The commit that deletes its rows records its replicas'
/// files as pending removals; they go before this returns (a copy a job placed at its site
/// may still read: once it ended), and what a crash left pending goes at the next start
/// ([`crate::daemon::removals`]).
pub(crate) async fn remove_file(s: &Arc<Shared>, name: &str) -> Result<bool, String> {
    let name = name.to_string();
    {
        let mut st = s.lock();
        if !st.files.contains_key(&name) || st.core.jobs().any(|j| !j.state.is_terminal() && j.spec.input_files.contains(&name)) {
            return Ok(false);
        }
        st.files.remove(&name);
        st.core.catalogue_mut().remove(&name);
    }
    s.data_catalogue.invalidate(&name);
    s.store
        .write(store::delete_file_op(name.clone()))
        .await
        .map_err(|e| e.to_string())?;
    crate::daemon::removals::after_commit(s, &name).await;
    Ok(true)
}
