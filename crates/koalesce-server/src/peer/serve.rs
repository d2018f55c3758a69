//! Files a peer fetches from this server (issue 14): an input of a job handed over, an output
//! or log of a job received, a probe's bytes. From a local replica, or through the storage
//! agent of a site that has one ([`super::via_agent`]); always from byte N on when asked
//! `Range: bytes=N-`, with the content's SHA-256 in `X-Checksum-Sha256`.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::Federation;
use crate::api::{err, ApiError};

/// Streams catalogue file `name` to a peer: from byte N on when asked `Range: bytes=N-` (206),
/// with its SHA-256 and whole size in headers.
pub(crate) async fn serve(fed: &Federation, name: &str, headers: &HeaderMap) -> Result<Response, ApiError> {
    let found = {
        let st = fed.shared.lock();
        st.files.get(name).map(|f| {
            let replicas: Vec<(String, std::path::PathBuf)> = f.replicas.iter().map(|(s, p)| (s.clone(), p.clone())).collect();
            (f.size_bytes, f.sha256.clone(), replicas)
        })
    };
    let Some((size, sha, replicas)) = found else {
        return Err(err(StatusCode::NOT_FOUND, format!("file '{name}' not found")));
    };
    // A site with a storage agent is reached only through it (the data plane).
    let at_agent = replicas.iter().find_map(|(site, p)| match fed.shared.site_by_name(site) {
        Some(h) if h.agent.is_some() => Some(crate::daemon::transfers::place_at(h, p)),
        _ => None,
    });
    let local: Vec<std::path::PathBuf> = replicas
        .iter()
        .filter(|(site, _)| fed.shared.site_by_name(site).is_none_or(|h| h.agent.is_none()))
        .map(|(_, p)| p.clone())
        .collect();
    // Opened off the async threads (a slow disk holds up no other request).
    let opened = super::blocking(move || {
        local.iter().find_map(|p| {
            let f = std::fs::File::open(p).ok()?;
            (f.metadata().ok()?.len() == size).then_some(f)
        })
    })
    .await;
    match (opened, at_agent) {
        (Some(file), _) => serve_open(file, size, Some(&sha), headers),
        (None, Some(crate::dataplane::Place::Agent { agent, path })) => {
            let offset = asked_offset(headers, size)?;
            let body = super::via_agent::read(&agent.control, &path, offset, size);
            let (status, h) = answer_headers(size, offset, Some(&sha));
            Ok((status, h, body).into_response())
        }
        _ => Err(err(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("file '{name}': no readable replica of {size} bytes"),
        )),
    }
}

/// The offset a peer asks for (`Range: bytes=N-`, N ≤ `size`; none: 0), or 416.
fn asked_offset(headers: &HeaderMap, size: u64) -> Result<u64, ApiError> {
    match headers.get(header::RANGE).map(|v| v.to_str().unwrap_or("")) {
        None => Ok(0),
        Some(r) => r
            .strip_prefix("bytes=")
            .and_then(|r| r.strip_suffix('-'))
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|&n| n <= size)
            .ok_or_else(|| {
                err(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    format!("Range '{}': only 'bytes=N-' with N ≤ {size}", crate::api::cut_message(r)),
                )
            }),
    }
}

/// Status and headers of a file answer from `offset` (206 unless 0).
fn answer_headers(size: u64, offset: u64, sha: Option<&str>) -> (StatusCode, HeaderMap) {
    let mut h = HeaderMap::new();
    let value = |v: String| HeaderValue::from_str(&v).unwrap_or(HeaderValue::from_static("?"));
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    if let Some(sha) = sha {
        h.insert(crate::api_output::SHA256_HEADER, value(sha.to_string()));
    }
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    let status = if offset > 0 {
        h.insert(
            header::CONTENT_RANGE,
            value(format!("bytes {offset}-{}/{size}", size.saturating_sub(1))),
        );
        StatusCode::PARTIAL_CONTENT
    } else {
        StatusCode::OK
    };
    (status, h)
}

/// Streams the open `file` of `size` bytes and content `sha` (None: a file still growing) to a
/// peer: from byte N on when asked `Range: bytes=N-` (206), with its SHA-256 and whole size in
/// headers.
pub(crate) fn serve_open(mut file: std::fs::File, size: u64, sha: Option<&str>, headers: &HeaderMap) -> Result<Response, ApiError> {
    use std::io::{Seek, SeekFrom};
    let offset = asked_offset(headers, size)?;
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let (status, h) = answer_headers(size, offset, sha);
    Ok((status, h, crate::api_output::file_body(file, size - offset)).into_response())
}

/// `GET /api/v1/peer/probe?bytes=N`: N zero bytes, for the caller to measure the bandwidth
/// from here to it. At most MAX_PROBE_BYTES (16 MiB), streamed from one shared 64 KiB chunk:
/// however many probes peers ask for at once, none allocates its size.
pub(crate) fn probe_body(bytes: u64) -> Response {
    let n = bytes.min(super::config::MAX_PROBE_BYTES);
    let mut h = HeaderMap::new();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
    (StatusCode::OK, h, axum::body::Body::from_stream(Zeros { left: n })).into_response()
}

/// `left` zero bytes as a body stream.
struct Zeros {
    left: u64,
}

impl futures_core::Stream for Zeros {
    type Item = Result<axum::body::Bytes, std::convert::Infallible>;

    fn poll_next(mut self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<Option<Self::Item>> {
        const CHUNK: usize = 64 << 10;
        static ZEROS: [u8; CHUNK] = [0; CHUNK];
        if self.left == 0 {
            return std::task::Poll::Ready(None);
        }
        let len = self.left.min(CHUNK as u64) as usize;
        self.left -= len as u64;
        std::task::Poll::Ready(Some(Ok(axum::body::Bytes::from_static(&ZEROS[..len]))))
    }
}
