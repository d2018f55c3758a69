//! A peer transfer at a site whose storage is a storage agent (the data plane, issue 17): such
//! a site is reached only through its agent, so a file a peer sends is uploaded to the agent
//! (verified against the size and SHA-256 the handoff declared) and a file a peer fetches is
//! read from the agent and streamed on, with no copy left on the server.

use std::io::Read;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};

use super::wire::PeerFile;
use super::{blocking, Federation};
use crate::dataplane::{move_file, Endpoint, Expected, Place, Role};

/// Uploads the verified file `spool` to `place` (an agent site's storage) as `f`'s content,
/// then removes the spool copy (also when the upload failed: the next try fetches again).
pub(crate) async fn store(fed: &Arc<Federation>, spool: &Path, place: &Place, f: &PeerFile) -> Result<(), String> {
    let (client, from, to) = (fed.shared.agents.clone(), spool.to_path_buf(), place.clone());
    let expect = Expected {
        sha256: f.sha256.clone(),
        size: f.size_bytes,
    };
    let sent = blocking(move || {
        let r = move_file(&client, &Place::Local(from.clone()), &to, &expect);
        let _ = std::fs::remove_file(&from);
        r
    })
    .await;
    // Counted once, when it is registered (as at a site without an agent).
    sent.map(|_| ())
        .map_err(|e| format!("'{}': storing it at {}: {e}", f.name, place.describe()))
}

/// Deletes a file that was stored at an agent and is not wanted after all.
pub(crate) async fn remove(fed: &Arc<Federation>, place: &Place) {
    if let Place::Agent { agent, path } = place.clone() {
        let client = fed.shared.agents.clone();
        let gone = blocking(move || client.delete(&agent.control, &path, Role::Destination)).await;
        if let Err(e) = gone {
            tracing::warn!(place = %place.describe(), error = %e, "a received file not deleted at its agent");
        }
    }
}

/// Chunks read on a blocking thread, as a response body.
struct Chunks(tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl futures_core::Stream for Chunks {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// The bytes of `path` at the agent `ep` from `offset` to `size` (the catalogue's), streamed
/// as they come. An agent that fails, or sends other than that many bytes, ends the body early
/// or with an error: the peer's fetch sees a short or broken answer and resumes later (and
/// checks the SHA-256 of all it got).
pub(crate) fn read(ep: &Endpoint, path: &str, offset: u64, size: u64) -> Body {
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let url = format!("{}/v1/files/{}", ep.url, super::data::encode(path));
    let token = ep.token.clone();
    tokio::task::spawn_blocking(move || {
        let fail = |m: String| std::io::Error::other(m);
        // Never waited on for ever: the answer within 30 s, the bytes at 256 kbit/s at least.
        let t = |ms: u64| Some(std::time::Duration::from_millis(ms));
        let body_ms = 30_000 + (size - offset).saturating_mul(8_000) / super::client::MIN_RATE_BPS;
        let agent: ureq::Agent = crate::http_agent::agent(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_connect(t(10_000))
                .timeout_recv_response(t(30_000))
                .timeout_recv_body(t(body_ms))
                .build(),
        );
        let mut req = agent.get(&url).header("Authorization", &format!("Bearer {token}"));
        if offset > 0 {
            req = req.header("Range", &format!("bytes={offset}-"));
        }
        let mut resp = match req.call() {
            Ok(r) if r.status().as_u16() == if offset > 0 { 206 } else { 200 } => r,
            Ok(r) => return tx.blocking_send(Err(fail(format!("agent answered {} for {url}", r.status())))),
            Err(e) => return tx.blocking_send(Err(fail(format!("agent at {url}: {e}")))),
        };
        let mut body = resp.body_mut().with_config().limit(u64::MAX).reader().take(size - offset);
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match body.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => tx.blocking_send(Ok(Bytes::copy_from_slice(&buf[..n])))?,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return tx.blocking_send(Err(e)),
            }
        }
    });
    Body::from_stream(Chunks(rx))
}
