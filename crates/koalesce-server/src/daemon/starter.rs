//! The thread that writes the `go` files of launches (the daemon's half of the start
//! barrier's release): one dedicated thread for the whole process, real-time where permitted
//! ([`crate::realtime`]), so that the release of a launch is one burst of file operations
//! that no runnable process of normal priority delays or interrupts. A thread spawned per
//! launch (or per site) would first wait for the run queue to start it on a loaded host.

use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, OnceLock};

type Work = Box<dyn FnOnce() + Send>;

static STARTER: OnceLock<Mutex<Sender<Work>>> = OnceLock::new();

fn sender() -> Sender<Work> {
    STARTER
        .get_or_init(|| {
            let (tx, rx) = channel::<Work>();
            let spawned = std::thread::Builder::new().name("koalesce-starter".into()).spawn(move || {
                if let Err(e) = crate::realtime::raise_thread() {
                    tracing::debug!(error = %e, "the starter thread runs at normal priority");
                }
                while let Ok(work) = rx.recv() {
                    // A panic ends that work (its caller sees no result), not the thread.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
                }
            });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot spawn the starter thread; launches start from the runtime's threads");
            }
            Mutex::new(tx)
        })
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}

/// Runs `f` on the starter thread and returns its result; on a blocking thread of the runtime
/// when the starter is not there.
pub(crate) async fn run<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let f = std::sync::Arc::new(Mutex::new(Some(f)));
    let on_starter = f.clone();
    let work: Work = Box::new(move || {
        if let Some(f) = on_starter.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = tx.send(f());
        }
    });
    if sender().send(work).is_ok() {
        if let Ok(v) = rx.await {
            return Some(v);
        }
    }
    // The starter is gone (it could not be spawned, or `f` panicked on it): run it here if
    // it did not run there.
    let f = f.lock().unwrap_or_else(|p| p.into_inner()).take()?;
    tokio::task::spawn_blocking(f).await.ok()
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn work_runs_on_the_starter_thread() {
        let name = super::run(|| std::thread::current().name().map(str::to_string)).await;
        assert_eq!(name, Some(Some("koalesce-starter".to_string())));
        assert_eq!(super::run(|| 6 * 7).await, Some(42));
    }
}
