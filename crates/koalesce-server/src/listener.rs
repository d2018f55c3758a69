//! The HTTP accept loop, hardened against clients that hold connections without using them.
//!
//! - At most `max_connections` connections are served at once: the loop takes a permit
//!   before it accepts, so further clients wait in the kernel's backlog instead of taking
//!   the server's file descriptors (which launches need).
//! - A connection must deliver each request's header within `header_timeout_ms` (hyper's
//!   header-read timeout, which also runs while a keep-alive connection is idle), else it is
//!   closed: idle and half-open connections do not accumulate. Request bodies have their own
//!   time limit (see `api.rs`).
//! - `TCP_NODELAY` on every connection (answers are small).
//! - A failing `accept` (EMFILE, ENFILE, ENOBUFS: this process or machine is out of
//!   descriptors) is logged and retried after a pause; it never stops the server.
//!
//! axum's own `serve` offers none of these knobs, so the loop is written here on hyper's
//! connection builder.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

/// Connection limits (from the server config).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
}

impl Limits {
    pub fn from_config(c: &crate::ServerConfig) -> Self {
        Limits {
            max_connections: c.max_connections,
            header_timeout: Duration::from_millis(c.header_timeout_ms),
        }
    }
}

/// How long a graceful shutdown waits for requests in flight.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Raises this process's soft limit of open files to its hard limit (connections and
/// components' files need many; the default soft limit is often 1024).
pub fn raise_nofile_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                tracing::warn!(error = %e, soft, hard, "cannot raise the open-files limit");
            }
        }
    }
}

fn is_resource_error(e: &std::io::Error) -> bool {
    use nix::errno::Errno;
    matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(Errno::EMFILE | Errno::ENFILE | Errno::ENOBUFS | Errno::ENOMEM)
    )
}

/// Serves `app` on `listener` until `shutdown` turns true.
pub async fn serve(listener: TcpListener, app: Router, limits: Limits, mut shutdown: watch::Receiver<bool>) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = shutdown.changed() => break,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) if is_resource_error(&e) => {
                    tracing::warn!(error = %e, "cannot accept a connection (out of resources); retrying shortly");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "accept failed");
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let _ = stream.set_nodelay(true);
        let conn = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended");
            }
            drop(permit);
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(SHUTDOWN_GRACE) => tracing::warn!("connections still open at shutdown"),
    }
}
