//! Server-sent events that keep a page current (`assets/koalesce.js` applies them): a stream
//! re-renders the page's live parts when the store committed something new (every state change
//! of a job is committed) or every few seconds (sites' idle counts move without a commit), and
//! sends a `swap` event for each part whose HTML changed. The session is checked on every
//! round: once the token is revoked or expired the page is told to reload (and lands on the
//! sign-in form). A stream ends after [`MAX_LIFETIME`]; the browser reconnects by itself.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use koalesce_web::html::{sse_reload, sse_swap};
use tokio::sync::mpsc;

use super::{session, Viewer, Web, W};

/// How often a stream looks for changes.
const ROUND: Duration = Duration::from_millis(400);
/// Re-rendered at least this often even without commits.
const REFRESH: Duration = Duration::from_secs(5);
/// A comment line this often keeps proxies from closing an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
const MAX_LIFETIME: Duration = Duration::from_secs(600);

/// What a page's live parts are now: `(element id, element HTML)`.
pub(crate) type Render = Arc<dyn Fn(&Web, &Viewer) -> Vec<(String, String)> + Send + Sync>;

struct Events(mpsc::Receiver<String>);

impl futures_core::Stream for Events {
    type Item = Result<Bytes, Infallible>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|m| m.map(|s| Ok(Bytes::from(s))))
    }
}

/// The event stream of a page for the viewer whose session cookie is in `headers`.
pub(crate) fn stream(w: W, headers: &HeaderMap, render: Render) -> Response {
    let token = session::cookie_value(headers, session::SESSION_COOKIE).unwrap_or_default();
    let (tx, rx) = mpsc::channel::<String>(16);
    tokio::spawn(async move {
        let started = Instant::now();
        let mut last: Vec<(String, String)> = Vec::new();
        let mut seen_commits = u64::MAX;
        let mut rendered_at = Instant::now();
        let mut pinged_at = Instant::now();
        // "retry" makes the browser reconnect after a second when the stream ends.
        if tx.send("retry: 1000\n\n".into()).await.is_err() {
            return;
        }
        while started.elapsed() < MAX_LIFETIME {
            let commits = w.shared.store.stats().commits;
            if commits != seen_commits || rendered_at.elapsed() >= REFRESH {
                seen_commits = commits;
                rendered_at = Instant::now();
                let (w2, t2, r2) = (w.clone(), token.clone(), render.clone());
                let now = tokio::task::spawn_blocking(move || session::viewer_of_token(&w2.shared, &t2).map(|v| r2(&w2, &v))).await;
                let Ok(Some(parts)) = now else {
                    let _ = tx.send(sse_reload().to_string()).await;
                    return;
                };
                for (id, html) in &parts {
                    if !last.iter().any(|(i, h)| i == id && h == html) && tx.send(sse_swap(id, html)).await.is_err() {
                        return;
                    }
                }
                last = parts;
            } else if pinged_at.elapsed() >= KEEP_ALIVE {
                pinged_at = Instant::now();
                if tx.send(": ping\n\n".into()).await.is_err() {
                    return;
                }
            }
            if tx.is_closed() {
                return;
            }
            tokio::time::sleep(ROUND).await;
        }
    });
    super::secure(
        (
            [
                (header::CONTENT_TYPE, "text/event-stream"),
                (header::HeaderName::from_static("x-accel-buffering"), "no"),
            ],
            Body::from_stream(Events(rx)),
        )
            .into_response(),
    )
}
