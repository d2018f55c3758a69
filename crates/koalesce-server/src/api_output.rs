//! What a job left behind, through the API: a component's stdout/stderr
//! (`GET /api/v1/jobs/{id}/logs`) and the content of a catalogue file or job output
//! (`GET /api/v1/files/{name}`), both streamed from the server's disk, so that clients need
//! not run on the server's machine.
//!
//! Logs are read by byte offset: `offset=N` answers the bytes from N to the end of the file as
//! it is now (`X-Koalesce-Log-Size` says how far that is), so a client follows a running job by
//! asking again from the new size (`koalesce logs --follow`). `tail=L` answers the last L lines
//! and says in `X-Koalesce-Lines-Cut` how many earlier lines it left out.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State as AxState};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body::Frame;
use serde::Deserialize;
use tokio::io::AsyncRead;

use crate::api::{authenticate, err, find_job, ApiError};
use crate::daemon::Shared;

type S = std::sync::Arc<Shared>;
type R<T> = Result<T, ApiError>;

/// Header: the size of the log file when the answer was made (the next `offset`).
pub const LOG_SIZE_HEADER: &str = "x-koalesce-log-size";
/// Header: the job's state when the answer was made.
pub const JOB_STATE_HEADER: &str = "x-koalesce-job-state";
/// Header: lines before the ones a `tail` answer shows.
pub const LINES_CUT_HEADER: &str = "x-koalesce-lines-cut";
/// Header: the SHA-256 of a file's content (hex), for the client to verify.
pub const SHA256_HEADER: &str = "x-checksum-sha256";

/// Longest `tail` asked for.
pub const MAX_TAIL_LINES: usize = 100_000;

#[derive(Deserialize)]
pub struct LogQuery {
    pub(crate) component: Option<u64>,
    pub(crate) stream: Option<String>,
    pub(crate) offset: Option<u64>,
    pub(crate) tail: Option<usize>,
}

/// A file streamed as an HTTP body, `len` bytes from where `file` stands (read in chunks, off
/// the runtime's worker threads by tokio's file I/O).
struct FileBody {
    file: tokio::fs::File,
    remaining: u64,
    buf: Vec<u8>,
}

impl FileBody {
    fn new(file: std::fs::File, len: u64) -> Self {
        FileBody {
            file: tokio::fs::File::from_std(file),
            remaining: len,
            buf: vec![0; 64 * 1024],
        }
    }
}

impl http_body::Body for FileBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = &mut *self;
        if this.remaining == 0 {
            return Poll::Ready(None);
        }
        let want = this.buf.len().min(usize::try_from(this.remaining).unwrap_or(usize::MAX));
        let mut rb = tokio::io::ReadBuf::new(&mut this.buf[..want]);
        match Pin::new(&mut this.file).poll_read(cx, &mut rb) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Ready(Ok(())) => {
                let n = rb.filled().len();
                if n == 0 {
                    // The file shrank under us: end early (the client sees a short body).
                    this.remaining = 0;
                    return Poll::Ready(None);
                }
                this.remaining -= n as u64;
                Poll::Ready(Some(Ok(Frame::data(Bytes::copy_from_slice(&this.buf[..n])))))
            }
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.remaining)
    }
}

/// `len` bytes of `file` from where it stands, as a streamed body (also for peers' transfers).
pub(crate) fn file_body(file: std::fs::File, len: u64) -> Body {
    Body::new(FileBody::new(file, len))
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

fn header_value(v: impl ToString) -> HeaderValue {
    HeaderValue::from_str(&v.to_string()).unwrap_or_else(|_| HeaderValue::from_static("?"))
}

/// The last `lines` lines of `path` (a final line without newline counts) and how many lines
/// come before them.
pub fn tail_lines(path: &std::path::Path, lines: usize) -> std::io::Result<(Vec<u8>, u64)> {
    let mut f = std::fs::File::open(path)?;
    let size = f.metadata()?.len();
    // Count every line (a stream of newlines), then read back from the end far enough.
    let mut total: u64 = 0;
    let mut buf = vec![0u8; 64 * 1024];
    let mut last = b'\n';
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        total += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        last = buf[n - 1];
    }
    if size > 0 && last != b'\n' {
        total += 1;
    }
    let keep = (lines as u64).min(total);
    let cut = total - keep;
    if keep == 0 {
        return Ok((Vec::new(), cut));
    }
    // Find the start of line `cut` (0-based) scanning backwards from the end.
    let mut newlines_needed = keep + u64::from(last == b'\n' && size > 0);
    let mut pos = size;
    let mut start = 0;
    'scan: while pos > 0 {
        let step = (buf.len() as u64).min(pos);
        pos -= step;
        f.seek(SeekFrom::Start(pos))?;
        f.read_exact(&mut buf[..step as usize])?;
        for i in (0..step as usize).rev() {
            if buf[i] == b'\n' {
                newlines_needed -= 1;
                if newlines_needed == 0 {
                    start = pos + i as u64 + 1;
                    break 'scan;
                }
            }
        }
    }
    f.seek(SeekFrom::Start(start))?;
    let mut out = Vec::with_capacity((size - start) as usize);
    f.take(size - start).read_to_end(&mut out)?;
    Ok((out, cut))
}

/// The last `lines` lines of `b` (a final line without newline counts) and how many lines come
/// before them: [`tail_lines`] for bytes in memory.
pub(crate) fn tail_bytes(b: &[u8], lines: usize) -> (Vec<u8>, u64) {
    let Some(&last) = b.last() else {
        return (Vec::new(), 0);
    };
    let total = b.iter().filter(|&&x| x == b'\n').count() as u64 + u64::from(last != b'\n');
    let cut = total - (lines as u64).min(total);
    if cut == total {
        return (Vec::new(), cut);
    }
    let mut start = 0;
    let mut seen = 0u64;
    if cut > 0 {
        for (i, &x) in b.iter().enumerate() {
            if x == b'\n' {
                seen += 1;
                if seen == cut {
                    start = i + 1;
                    break;
                }
            }
        }
    }
    (b[start..].to_vec(), cut)
}

/// A log answer made of `bytes` (a log read elsewhere): `size` is the next offset, `cut` the
/// lines a tail left out, `state` the job's.
pub(crate) fn log_bytes_answer(bytes: Vec<u8>, size: u64, cut: u64, state: &str) -> Response {
    let mut h = HeaderMap::new();
    h.insert(JOB_STATE_HEADER, header_value(state));
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    h.insert(LOG_SIZE_HEADER, header_value(size));
    h.insert(LINES_CUT_HEADER, header_value(cut));
    (StatusCode::OK, h, Body::from(bytes)).into_response()
}

/// `GET /api/v1/jobs/{id}/logs?component=N&stream=stdout|stderr&offset=B&tail=L`.
pub async fn job_logs(
    AxState(s): AxState<S>,
    headers: HeaderMap,
    Path(raw): Path<String>,
    q: Result<Query<LogQuery>, axum::extract::rejection::QueryRejection>,
) -> R<Response> {
    let caller = authenticate(&s, &headers)?;
    let Query(q) = q.map_err(|e| err(StatusCode::BAD_REQUEST, format!("query: {e}")))?;
    let id: u64 = raw
        .parse()
        .map_err(|_| err(StatusCode::NOT_FOUND, format!("job '{raw}' not found")))?;
    let job = find_job(&s, &caller, id).await?;
    let index = q.component.unwrap_or(0);
    let Some(c) = job.components.iter().find(|c| c.index == index) else {
        return Err(err(
            StatusCode::NOT_FOUND,
            format!(
                "parameter 'component': job {id} has {} component(s) (0..{})",
                job.components.len(),
                job.components.len().saturating_sub(1)
            ),
        ));
    };
    let path = match log_stream(&q)? {
        "stdout" => c.stdout.clone(),
        _ => c.stderr.clone(),
    };
    log_answer(path.map(PathBuf::from), &job.state, &q, &format!("job {id}")).await
}

/// The stream a log request asks for (`stdout` unless said), or 422.
pub(crate) fn log_stream(q: &LogQuery) -> R<&'static str> {
    match q.stream.as_deref().unwrap_or("stdout") {
        "stdout" => Ok("stdout"),
        "stderr" => Ok("stderr"),
        other => Err(err(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("parameter 'stream': '{other}' is not stdout or stderr"),
        )),
    }
}

/// The answer to a log request for the log file at `path` (None, or not there: nothing yet)
/// of a job in `state` (`what` names it in errors): the bytes from `offset`, or the last
/// `tail` lines, with the size, lines-cut and job-state headers.
pub(crate) async fn log_answer(path: Option<PathBuf>, state: &str, q: &LogQuery, what: &str) -> R<Response> {
    let stream = log_stream(q)?;
    if q.tail.is_some_and(|t| t > MAX_TAIL_LINES) {
        return Err(err(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("parameter 'tail': at most {MAX_TAIL_LINES} lines"),
        ));
    }
    let mut resp_headers = HeaderMap::new();
    resp_headers.insert(JOB_STATE_HEADER, header_value(state));
    resp_headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    // Not started yet (or started where no file was written yet): nothing so far.
    let file = path.and_then(|p| std::fs::File::open(&p).ok().map(|f| (p, f)));
    let Some((path, mut file)) = file else {
        resp_headers.insert(LOG_SIZE_HEADER, header_value(0));
        resp_headers.insert(LINES_CUT_HEADER, header_value(0));
        return Ok((StatusCode::OK, resp_headers, Body::empty()).into_response());
    };
    if let Some(lines) = q.tail {
        let (bytes, cut) = tokio::task::spawn_blocking(move || tail_lines(&path, lines))
            .await
            .map_err(internal)?
            .map_err(|e| internal(format!("reading the {stream} of {what}: {e}")))?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        resp_headers.insert(LOG_SIZE_HEADER, header_value(size));
        resp_headers.insert(LINES_CUT_HEADER, header_value(cut));
        return Ok((StatusCode::OK, resp_headers, Body::from(bytes)).into_response());
    }
    let size = file.metadata().map_err(internal)?.len();
    let offset = q.offset.unwrap_or(0).min(size);
    file.seek(SeekFrom::Start(offset)).map_err(internal)?;
    resp_headers.insert(LOG_SIZE_HEADER, header_value(size));
    Ok((StatusCode::OK, resp_headers, Body::new(FileBody::new(file, size - offset))).into_response())
}

/// `GET /api/v1/files/{name}`: the content of a catalogue file (a job's outputs are registered
/// as `<job-id>/<name>`), streamed from one of its replicas, with its SHA-256 in
/// `X-Checksum-Sha256` for the client to verify.
pub async fn get_file(AxState(s): AxState<S>, headers: HeaderMap, Path(name): Path<String>) -> R<Response> {
    authenticate(&s, &headers)?;
    let found = {
        let st = s.lock();
        st.files
            .get(&name)
            .map(|f| (f.size_bytes, f.sha256.clone(), f.replicas.values().cloned().collect::<Vec<_>>()))
    };
    let Some((size, sha, replicas)) = found else {
        return Err(err(StatusCode::NOT_FOUND, format!("file '{name}' not found")));
    };
    // The first replica that is there with the registered size.
    let opened = replicas.iter().find_map(|p| {
        let f = std::fs::File::open(p).ok()?;
        (f.metadata().ok()?.len() == size).then_some(f)
    });
    let Some(file) = opened else {
        return Err(err(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("file '{name}': no readable replica of {size} bytes on the server"),
        ));
    };
    let mut h = HeaderMap::new();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    h.insert(SHA256_HEADER, header_value(&sha));
    Ok((StatusCode::OK, h, Body::new(FileBody::new(file, size))).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_counts_what_it_leaves_out() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out");
        let text: String = (1..=25).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&p, &text).unwrap();
        let (b, cut) = tail_lines(&p, 10).unwrap();
        assert_eq!(cut, 15);
        assert_eq!(
            String::from_utf8(b).unwrap(),
            (16..=25).map(|i| format!("line {i}\n")).collect::<String>()
        );
        // No final newline: the last line still counts.
        std::fs::write(&p, "a\nb\nc").unwrap();
        let (b, cut) = tail_lines(&p, 2).unwrap();
        assert_eq!((String::from_utf8(b).unwrap().as_str(), cut), ("b\nc", 1));
        // Fewer lines than asked: all of them, nothing cut.
        let (b, cut) = tail_lines(&p, 10).unwrap();
        assert_eq!((b.len(), cut), (5, 0));
        std::fs::write(&p, "").unwrap();
        assert_eq!(tail_lines(&p, 3).unwrap(), (Vec::new(), 0));
        // Lines longer than the read buffer.
        let long = "x".repeat(200_000);
        std::fs::write(&p, format!("{long}\n{long}\nend\n")).unwrap();
        let (b, cut) = tail_lines(&p, 2).unwrap();
        assert_eq!((b.len(), cut), (long.len() + 1 + 4, 1));
    }

    #[test]
    fn tail_of_bytes_agrees_with_tail_of_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out");
        let texts = ["", "\n", "a", "a\n", "a\nb\nc", "a\n\nb\n", "1\n2\n3\n4\n5\n"];
        for text in texts {
            std::fs::write(&p, text).unwrap();
            for lines in 0..7 {
                assert_eq!(
                    tail_bytes(text.as_bytes(), lines),
                    tail_lines(&p, lines).unwrap(),
                    "{text:?} {lines}"
                );
            }
        }
    }
}
