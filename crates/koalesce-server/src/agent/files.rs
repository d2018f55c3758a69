//! `/v1/files/{path}` (GET with Range, HEAD, PUT, DELETE), `/v1/uploads/{path}` and
//! `/v1/list`.

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use http_body::Frame;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncSeekExt, ReadBuf};
use tokio::sync::Notify;

use super::fsops::SafePath;
use super::{add, blocking, AgentError, AgentState, R, S};
use crate::dataplane::parse_content_range;
use crate::dataplane::partial::{self, Partial};
use crate::dataplane::wire::{is_sha256_hex, ListEntry, Listing, UploadReceipt, UploadStatus, SHA256_HEADER};

/// Files a listing returns at most.
const LIST_LIMIT: usize = 100_000;
/// Bytes buffered before a write to the partial file.
const WRITE_CHUNK: usize = 256 << 10;

fn octet_headers(resp: &mut Response, len: u64, sha: Option<String>) {
    let h = resp.headers_mut();
    h.insert(header::CONTENT_LENGTH, len.into());
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    if let Some(sha) = sha.and_then(|s| HeaderValue::from_str(&s).ok()) {
        h.insert(SHA256_HEADER, sha);
    }
}

/// A `Range` request against a file of `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RangeRequest {
    /// No (usable) range: the whole file.
    Whole,
    /// Bytes `start..=end`.
    Part(u64, u64),
    Unsatisfiable,
}

/// Parses one `bytes=` range (RFC 9110 §14.1.2). Hand-written because the agent supports
/// exactly one range (what a resume needs); a multi-range or malformed header is ignored, as
/// the RFC allows, and the whole file is sent.
pub(crate) fn parse_range(value: &str, size: u64) -> RangeRequest {
    let Some(spec) = value.trim().strip_prefix("bytes=") else {
        return RangeRequest::Whole;
    };
    if spec.contains(',') {
        return RangeRequest::Whole;
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return RangeRequest::Whole;
    };
    let (a, b) = (a.trim(), b.trim());
    if a.is_empty() {
        // The last `n` bytes.
        return match b.parse::<u64>() {
            Ok(0) => RangeRequest::Unsatisfiable,
            Ok(_) if size == 0 => RangeRequest::Unsatisfiable,
            Ok(n) => RangeRequest::Part(size - n.min(size), size - 1),
            Err(_) => RangeRequest::Whole,
        };
    }
    let Ok(start) = a.parse::<u64>() else {
        return RangeRequest::Whole;
    };
    let end = if b.is_empty() {
        u64::MAX
    } else {
        match b.parse::<u64>() {
            Ok(e) if e >= start => e,
            _ => return RangeRequest::Whole,
        }
    };
    if start >= size {
        return RangeRequest::Unsatisfiable;
    }
    RangeRequest::Part(start, end.min(size - 1))
}

pub(super) async fn get_file(State(s): State<S>, Path(raw): Path<String>, headers: HeaderMap) -> R<Response> {
    let p = SafePath::parse(&raw)?;
    let what = p.to_string();
    let s2 = s.clone();
    let (file, meta) = blocking(move || s2.root.open_file(&p))
        .await?
        .map_err(|e| AgentError::io(e, &what))?;
    let size = meta.len();
    let range = match headers.get(header::RANGE).and_then(|v| v.to_str().ok()) {
        Some(v) => parse_range(v, size),
        None => RangeRequest::Whole,
    };
    let (start, len, status) = match range {
        RangeRequest::Whole => (0, size, StatusCode::OK),
        RangeRequest::Part(a, b) => (a, b - a + 1, StatusCode::PARTIAL_CONTENT),
        RangeRequest::Unsatisfiable => {
            let mut resp = AgentError::new(StatusCode::RANGE_NOT_SATISFIABLE, "range", format!("{what} has {size} bytes")).into_response();
            resp.headers_mut()
                .insert(header::CONTENT_RANGE, HeaderValue::from_str(&format!("bytes */{size}")).unwrap());
            return Ok(resp);
        }
    };
    let mut file = tokio::fs::File::from_std(file);
    file.seek(io::SeekFrom::Start(start)).await.map_err(|e| AgentError::io(e, &what))?;
    let body = FileBody {
        file,
        remaining: len,
        buf: vec![0u8; 64 << 10],
        sent: s.clone(),
    };
    let mut resp = Response::new(Body::new(body));
    *resp.status_mut() = status;
    octet_headers(&mut resp, len, s.sha.get(&meta));
    if status == StatusCode::PARTIAL_CONTENT {
        let v = format!("bytes {start}-{}/{size}", start + len - 1);
        resp.headers_mut().insert(header::CONTENT_RANGE, HeaderValue::from_str(&v).unwrap());
    }
    Ok(resp)
}

pub(super) async fn head_file(State(s): State<S>, Path(raw): Path<String>) -> R<Response> {
    let p = SafePath::parse(&raw)?;
    let what = p.to_string();
    let s2 = s.clone();
    let (size, sha) = blocking(move || {
        let (mut file, meta) = s2.root.open_file(&p)?;
        let sha = s2.sha.of(&mut file, &meta)?;
        io::Result::Ok((meta.len(), sha))
    })
    .await?
    .map_err(|e| AgentError::io(e, &what))?;
    let mut resp = Response::new(Body::empty());
    octet_headers(&mut resp, size, Some(sha));
    Ok(resp)
}

pub(super) async fn delete_file(State(s): State<S>, Path(raw): Path<String>) -> R<StatusCode> {
    let p = SafePath::parse(&raw)?;
    let what = p.to_string();
    blocking(move || s.root.remove(&p)).await?.map_err(|e| AgentError::io(e, &what))?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn list(State(s): State<S>, Query(q): Query<HashMap<String, String>>) -> R<Json<Listing>> {
    let prefix = match q.get("prefix").map(|p| p.trim_end_matches('/')) {
        None | Some("") => None,
        Some(p) => Some(SafePath::parse(p)?),
    };
    let what = prefix.as_ref().map(|p| p.to_string()).unwrap_or_else(|| "the root".into());
    let (files, truncated) = blocking(move || s.root.list(prefix.as_ref(), LIST_LIMIT))
        .await?
        .map_err(|e| AgentError::io(e, &what))?;
    let files = files
        .into_iter()
        .map(|(path, meta)| ListEntry {
            path,
            size: meta.len(),
            modified_ms: meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
        })
        .collect();
    Ok(Json(Listing { files, truncated }))
}

fn declared_sha(headers: &HeaderMap) -> R<String> {
    let sha = headers.get(SHA256_HEADER).and_then(|v| v.to_str().ok()).ok_or_else(|| {
        AgentError::new(
            StatusCode::BAD_REQUEST,
            "no_checksum",
            "an upload must declare its content's SHA-256 in 'X-Sha256'",
        )
    })?;
    if !is_sha256_hex(sha) {
        return Err(AgentError::new(
            StatusCode::BAD_REQUEST,
            "bad_checksum",
            "'X-Sha256' must be 64 hex digits",
        ));
    }
    Ok(sha.to_ascii_lowercase())
}

impl AgentState {
    /// The partial file of content `sha` for `p`.
    fn partial_path(&self, p: &SafePath, sha: &str) -> PathBuf {
        let id = crate::store::sha256_hex(p.as_str().as_bytes());
        self.partial_dir.join(format!("{}-{sha}.part", &id[..32]))
    }
}

pub(super) async fn upload_status(
    State(s): State<S>,
    Path(raw): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> R<Json<UploadStatus>> {
    let p = SafePath::parse(&raw)?;
    let sha = q.get("sha256").map(|v| v.to_ascii_lowercase()).unwrap_or_default();
    if !is_sha256_hex(&sha) {
        return Err(AgentError::new(
            StatusCode::BAD_REQUEST,
            "bad_checksum",
            "query 'sha256' must be 64 hex digits",
        ));
    }
    let part = s.partial_path(&p, &sha);
    let status = blocking(move || {
        let complete = match s.root.open_file(&p) {
            Ok((mut file, meta)) => s.sha.of(&mut file, &meta).is_ok_and(|have| have == sha),
            Err(_) => false,
        };
        UploadStatus {
            offset: if complete { 0 } else { partial::resumable_offset(&part, &sha) },
            complete,
        }
    })
    .await?;
    Ok(Json(status))
}

/// One upload at a time per (path, content); a newer one supersedes an older one that still
/// holds the partial (its client is probably gone and the connection not yet noticed).
pub(crate) struct UploadSlot {
    lock: Arc<tokio::sync::Mutex<()>>,
    generation: AtomicU64,
    superseded: Notify,
}

/// The slot of a partial, held by one upload.
struct Held<'a> {
    s: &'a AgentState,
    part: PathBuf,
    slot: Arc<UploadSlot>,
    generation: u64,
    _guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Held<'_> {
    /// Takes the slot of `part` for a new upload, superseding the one in progress.
    async fn take<'a>(s: &'a AgentState, part: &std::path::Path) -> R<Held<'a>> {
        let slot = s
            .uploads
            .lock()
            .unwrap()
            .entry(part.to_path_buf())
            .or_insert_with(|| {
                Arc::new(UploadSlot {
                    lock: Arc::new(tokio::sync::Mutex::new(())),
                    generation: AtomicU64::new(0),
                    superseded: Notify::new(),
                })
            })
            .clone();
        let generation = slot.generation.fetch_add(1, Ordering::SeqCst) + 1;
        slot.superseded.notify_waiters();
        let mut held = Held {
            s,
            part: part.to_path_buf(),
            slot,
            generation,
            _guard: None,
        };
        let guard = tokio::time::timeout(s.config.idle_timeout, held.slot.lock.clone().lock_owned())
            .await
            .map_err(|_| AgentError::new(StatusCode::CONFLICT, "busy", "another upload of this content does not let go"))?;
        held._guard = Some(guard);
        if held.is_superseded() {
            return Err(AgentError::new(
                StatusCode::CONFLICT,
                "superseded",
                "a newer upload of this content arrived",
            ));
        }
        Ok(held)
    }

    fn is_superseded(&self) -> bool {
        self.slot.generation.load(Ordering::SeqCst) != self.generation
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self._guard = None;
        let mut map = self.s.uploads.lock().unwrap();
        // Only the map's reference and ours: nobody else waits for it.
        if Arc::strong_count(&self.slot) <= 2 {
            map.remove(&self.part);
        }
    }
}

/// Why a body stopped before its end.
enum Cut {
    Superseded,
    Idle,
    Broken(String),
}

/// `PUT /v1/files/{path}`: a verified, resumable upload (see the module docs).
pub(super) async fn put_file(State(s): State<S>, Path(raw): Path<String>, headers: HeaderMap, body: Body) -> R<Response> {
    let p = SafePath::parse(&raw)?;
    let what = p.to_string();
    let sha = declared_sha(&headers)?;
    let length: u64 = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| AgentError::new(StatusCode::LENGTH_REQUIRED, "length_required", "an upload needs a Content-Length"))?;
    let (offset, total) = match headers.get(header::CONTENT_RANGE).and_then(|v| v.to_str().ok()) {
        None => (0, length),
        Some(v) => match parse_content_range(v) {
            Some((start, end, total)) if end + 1 == total && end - start + 1 == length => (start, total),
            _ => {
                return Err(AgentError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_range",
                    format!("Content-Range '{v}' must cover the rest of the file and match Content-Length"),
                ))
            }
        },
    };
    if total > s.config.max_file_bytes {
        return Err(AgentError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!(
                "{total} bytes is over this agent's limit of {} bytes per file",
                s.config.max_file_bytes
            ),
        ));
    }
    let need = total - offset;
    let (s2, p2) = (s.clone(), p.clone());
    let free = blocking(move || {
        s2.root.check_writable(&p2)?;
        s2.root.free_bytes()
    })
    .await?
    .map_err(|e| AgentError::io(e, &what))?;
    if free < need.saturating_add(s.config.min_free_bytes) {
        return Err(AgentError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "storage_full",
            format!(
                "{need} bytes do not fit: {free} bytes free, {} kept in reserve",
                s.config.min_free_bytes
            ),
        ));
    }
    let part_path = s.partial_path(&p, &sha);
    let held = Held::take(&s, &part_path).await?;
    let (pp, sh) = (part_path.clone(), sha.clone());
    let mut part = blocking(move || Partial::open(pp, &sh))
        .await?
        .map_err(|e| AgentError::io(e, "partial file"))?;
    if part.len() != offset {
        if offset == 0 {
            part = blocking(move || part.restart().map(|_| part))
                .await?
                .map_err(|e| AgentError::io(e, "partial file"))?;
        } else {
            let mut e = AgentError::new(
                StatusCode::CONFLICT,
                "offset",
                format!("this agent holds {} bytes of that content, not {offset}", part.len()),
            );
            e.offset = Some(part.len());
            return Err(e);
        }
    }
    // Stream the body into the partial file.
    let mut body = body;
    let mut buf: Vec<u8> = Vec::with_capacity(WRITE_CHUNK);
    let mut received = 0u64;
    // Arrival times of the first and the last chunk, for the receiver's rate.
    let mut first: Option<(std::time::Instant, u64)> = None;
    let mut last = std::time::Instant::now();
    let cut = loop {
        let notified = held.slot.superseded.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if held.is_superseded() {
            break Some(Cut::Superseded);
        }
        let next = tokio::select! {
            n = tokio::time::timeout(s.config.idle_timeout, body.frame()) => n,
            _ = notified => break Some(Cut::Superseded),
        };
        let chunk = match next {
            Err(_) => break Some(Cut::Idle),
            Ok(None) => break None,
            Ok(Some(Err(e))) => break Some(Cut::Broken(e.to_string())),
            Ok(Some(Ok(frame))) => match frame.into_data() {
                Ok(c) => c,
                Err(_) => continue, // trailers carry no data
            },
        };
        last = std::time::Instant::now();
        first.get_or_insert((last, chunk.len() as u64));
        received += chunk.len() as u64;
        add(&s.stats.bytes_received, chunk.len() as u64);
        buf.extend_from_slice(&chunk);
        if buf.len() >= WRITE_CHUNK {
            let data = std::mem::replace(&mut buf, Vec::with_capacity(WRITE_CHUNK));
            part = blocking(move || part.write_all(&data).map(|_| part))
                .await?
                .map_err(|e| AgentError::io(e, "partial file"))?;
        }
    };
    let data = std::mem::take(&mut buf);
    part = blocking(move || part.write_all(&data).map(|_| part))
        .await?
        .map_err(|e| AgentError::io(e, "partial file"))?;
    if cut.is_some() || received != length {
        add(&s.stats.uploads_interrupted, 1);
        let held_bytes = part.len();
        let _ = blocking(move || part.checkpoint()).await;
        let (status, code, why) = match cut {
            Some(Cut::Superseded) => (
                StatusCode::CONFLICT,
                "superseded",
                "a newer upload of this content took over".to_string(),
            ),
            Some(Cut::Idle) => (StatusCode::REQUEST_TIMEOUT, "timeout", "no body bytes arrived in time".to_string()),
            Some(Cut::Broken(e)) => (StatusCode::BAD_REQUEST, "interrupted", e),
            None => (
                StatusCode::BAD_REQUEST,
                "interrupted",
                format!("{received} of {length} bytes arrived"),
            ),
        };
        tracing::info!(path = %what, held = held_bytes, "upload interrupted: {why}");
        let mut e = AgentError::new(
            status,
            code,
            format!("upload of {what} stopped at {held_bytes} bytes (kept for a resume): {why}"),
        );
        e.offset = Some(held_bytes);
        return Err(e);
    }
    // Every byte is in: verify, then (only then) make it visible.
    let done = blocking(move || part.complete())
        .await?
        .map_err(|e| AgentError::io(e, "partial file"))?;
    if done.len != total || done.sha256 != sha {
        add(&s.stats.uploads_refused_checksum, 1);
        let path = done.path.clone();
        let _ = blocking(move || partial::remove(&path)).await;
        tracing::warn!(path = %what, declared = %sha, actual = %done.sha256, "upload refused: content does not match its checksum");
        let mut e = AgentError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "checksum_mismatch",
            format!(
                "{what}: the content's sha256 is {} ({} bytes), the upload declared {sha} ({total} bytes)",
                done.sha256, done.len
            ),
        );
        e.body.actual_sha256 = Some(done.sha256);
        e.body.actual_size = Some(done.len);
        return Err(e);
    }
    let s2 = s.clone();
    let result_sha = done.sha256.clone();
    blocking(move || {
        let meta = done.file.metadata()?;
        s2.root.install(&done.path, &p)?;
        s2.sha.put(&meta, done.sha256);
        io::Result::Ok(())
    })
    .await?
    .map_err(|e| AgentError::io(e, &what))?;
    drop(held);
    add(&s.stats.uploads_completed, 1);
    let network_bps = first.and_then(|(t0, first_len)| {
        let secs = last.duration_since(t0).as_secs_f64();
        (secs > 0.0 && received > first_len).then(|| (received - first_len) as f64 * 8.0 / secs)
    });
    let receipt = UploadReceipt {
        size: total,
        sha256: result_sha,
        network_bps,
    };
    Ok((StatusCode::CREATED, Json(receipt)).into_response())
}

/// A download body: `remaining` bytes of a file from its current position.
struct FileBody {
    file: tokio::fs::File,
    remaining: u64,
    buf: Vec<u8>,
    sent: S,
}

impl http_body::Body for FileBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        let this = &mut *self;
        let want = (this.buf.len() as u64).min(this.remaining) as usize;
        let mut rb = ReadBuf::new(&mut this.buf[..want]);
        match Pin::new(&mut this.file).poll_read(cx, &mut rb) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Ready(Ok(())) => {
                let n = rb.filled().len();
                if n == 0 {
                    // The file shrank under us: end the response short (the client sees it).
                    return Poll::Ready(Some(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "file shrank while being sent",
                    ))));
                }
                let chunk = Bytes::copy_from_slice(rb.filled());
                this.remaining -= n as u64;
                add(&this.sent.stats.bytes_sent, n as u64);
                Poll::Ready(Some(Ok(Frame::data(chunk))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        use RangeRequest::*;
        assert_eq!(parse_range("bytes=0-", 10), Part(0, 9));
        assert_eq!(parse_range("bytes=4-", 10), Part(4, 9));
        assert_eq!(parse_range("bytes=2-5", 10), Part(2, 5));
        assert_eq!(parse_range("bytes=2-50", 10), Part(2, 9));
        assert_eq!(parse_range("bytes=-3", 10), Part(7, 9));
        assert_eq!(parse_range("bytes=-30", 10), Part(0, 9));
        assert_eq!(parse_range("bytes=10-", 10), Unsatisfiable);
        assert_eq!(parse_range("bytes=-0", 10), Unsatisfiable);
        assert_eq!(parse_range("bytes=0-", 0), Unsatisfiable);
        assert_eq!(parse_range("bytes=5-2", 10), Whole);
        assert_eq!(parse_range("bytes=0-1,3-4", 10), Whole);
        assert_eq!(parse_range("lines=0-1", 10), Whole);
        assert_eq!(parse_range("bytes=x-", 10), Whole);
    }
}
