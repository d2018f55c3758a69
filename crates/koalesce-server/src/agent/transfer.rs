//! Third-party transfers: `POST /v1/push` (send one of this agent's files to another agent)
//! and `POST /v1/probe` + `PUT /v1/sink` (a throughput sample that stores nothing).

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::Json;
use http_body_util::BodyExt;

use super::fsops::SafePath;
use super::{add, blocking, read_json, AgentError, R, S};
use crate::dataplane::wire::{is_sha256_hex, ProbeRequest, PushRequest, PushTarget, TransferReport};
use crate::dataplane::{Blame, Endpoint, Expected, TransferError};

/// The URL this agent was reached by (for the source's name in errors).
fn self_url(headers: &HeaderMap) -> String {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("storage-agent");
    format!("http://{host}")
}

fn check_target(t: &PushTarget) -> R<Endpoint> {
    let ok = t
        .url
        .strip_prefix("http://")
        .is_some_and(|rest| !rest.is_empty() && !rest.contains(['/', '?', '#', '@', ' ']));
    if !ok {
        return Err(AgentError::new(
            StatusCode::BAD_REQUEST,
            "bad_target",
            format!("destination URL '{}' must be http://HOST:PORT", t.url),
        ));
    }
    Ok(Endpoint::new(t.url.clone(), t.token.clone()))
}

/// A failed push or probe: the status says whose fault, the body carries the typed fault.
fn fault_answer(fault: TransferError) -> AgentError {
    let status = match (&fault, fault.blame()) {
        (TransferError::SourceMissing { .. }, _) => StatusCode::NOT_FOUND,
        (TransferError::SourceCorrupt { .. }, _) => StatusCode::UNPROCESSABLE_ENTITY,
        (_, Blame::Source | Blame::Caller) => StatusCode::INTERNAL_SERVER_ERROR,
        (_, Blame::Destination) => StatusCode::BAD_GATEWAY,
    };
    let mut e = AgentError::new(status, "transfer_failed", fault.to_string());
    e.body.fault = Some(fault);
    e
}

pub(super) async fn push(State(s): State<S>, headers: HeaderMap, body: Body) -> R<Json<TransferReport>> {
    let req: PushRequest = read_json(&s, body).await?;
    let p = SafePath::parse(&req.path)?;
    if !is_sha256_hex(&req.sha256) {
        return Err(AgentError::new(
            StatusCode::BAD_REQUEST,
            "bad_checksum",
            "'sha256' must be 64 hex digits",
        ));
    }
    let dest = check_target(&req.dest)?;
    let dest_path = if req.dest.path.is_empty() {
        req.path.clone()
    } else {
        req.dest.path.clone()
    };
    SafePath::parse(&dest_path)?;
    let me = self_url(&headers);
    let expect = Expected {
        sha256: req.sha256.to_ascii_lowercase(),
        size: req.size,
    };
    let _permit = s.transfers.acquire().await.expect("semaphore never closed");
    let s2 = s.clone();
    let result = blocking(move || {
        let file = match s2.root.open_file(&p) {
            Ok((f, _)) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound || super::fsops::is_escape(&e) => {
                return Err(TransferError::SourceMissing { url: me, path: req.path })
            }
            Err(e) => {
                return Err(TransferError::SourceUnreadable {
                    url: me,
                    path: req.path,
                    reason: e.to_string(),
                })
            }
        };
        s2.client.push_local(&me, file, &req.path, &dest, &dest_path, &expect)
    })
    .await?;
    match result {
        Ok(report) => {
            add(&s.stats.bytes_sent, report.bytes);
            add(&s.stats.pushes_completed, 1);
            Ok(Json(report))
        }
        Err(fault) => {
            add(&s.stats.pushes_failed, 1);
            tracing::warn!(error = %fault, "push failed");
            Err(fault_answer(fault))
        }
    }
}

pub(super) async fn probe(State(s): State<S>, body: Body) -> R<Json<TransferReport>> {
    let req: ProbeRequest = read_json(&s, body).await?;
    if req.bytes == 0 || req.bytes > s.config.max_probe_bytes {
        return Err(AgentError::new(
            StatusCode::BAD_REQUEST,
            "bad_probe",
            format!("a probe moves 1 to {} bytes", s.config.max_probe_bytes),
        ));
    }
    let dest = check_target(&req.dest)?;
    let _permit = s.transfers.acquire().await.expect("semaphore never closed");
    let s2 = s.clone();
    let bytes = req.bytes;
    match blocking(move || s2.client.probe_local(&dest, bytes)).await? {
        Ok(report) => {
            add(&s.stats.bytes_sent, report.bytes);
            Ok(Json(report))
        }
        Err(fault) => Err(fault_answer(fault)),
    }
}

/// `PUT /v1/sink`: receives and discards a probe's bytes.
pub(super) async fn sink(State(s): State<S>, headers: HeaderMap, mut body: Body) -> R<Json<serde_json::Value>> {
    let length: u64 = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| AgentError::new(StatusCode::LENGTH_REQUIRED, "length_required", "a probe needs a Content-Length"))?;
    if length > s.config.max_probe_bytes {
        return Err(AgentError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("a probe is at most {} bytes", s.config.max_probe_bytes),
        ));
    }
    let mut received = 0u64;
    loop {
        match tokio::time::timeout(s.config.idle_timeout, body.frame()).await {
            Err(_) => {
                return Err(AgentError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "timeout",
                    "no probe bytes arrived in time",
                ))
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(AgentError::new(StatusCode::BAD_REQUEST, "interrupted", e.to_string())),
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    received += data.len() as u64;
                    add(&s.stats.bytes_received, data.len() as u64);
                }
            }
        }
    }
    Ok(Json(serde_json::json!({ "bytes": received })))
}
