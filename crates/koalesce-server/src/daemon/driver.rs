//! The driver task: the core's timers, polling of running components, the bulk write of
//! queued jobs' tries, and refreshing the sites' processor counts.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{blacklist, lrm, process_actions, Shared};
use crate::{now_ms, store};

/// How often queued jobs' tries (from the core's `take_progress`) are written.
pub const PROGRESS_FLUSH: Duration = Duration::from_secs(2);

/// Writes the tries and priorities the core reported since the last flush (one bulk write).
pub fn flush_progress(shared: &Shared) {
    let rows: Vec<(u64, u32, u32, String)> = {
        let mut st = shared.lock();
        st.progress
            .drain()
            .map(|(id, (p, c, prio))| (id, p, c, prio.name().to_string()))
            .collect()
    };
    if !rows.is_empty() {
        shared.store.enqueue(store::progress_op(rows));
    }
}

/// Refreshes every site's idle/used counts (off the lock); a site that keeps failing to answer
/// is blacklisted (see [`blacklist::observe_refresh`]).
async fn refresh_sites(shared: &Arc<Shared>) {
    let s = shared.clone();
    let answers = tokio::task::spawn_blocking(move || {
        s.sites
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let r = h.backend.processors(&h.name);
                if let Ok(p) = &r {
                    h.idle.store(p.idle, Ordering::Relaxed);
                    h.used.store(p.used, Ordering::Relaxed);
                }
                (
                    koalesce_core::SiteId(i as u32),
                    !matches!(r, Err(crate::backend::BackendError::Site { .. })),
                )
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    blacklist::observe_refresh(shared, &answers);
    // Freed processors may have let flexible reservations move earlier.
    crate::reservations::apply_moves(shared).await;
    refresh_queue_estimates(shared).await;
}

/// The queue-wait estimates of the sites whose LRM makes them (Slurm), at most every
/// [`crate::backend::QUEUE_ESTIMATE_INTERVAL_MS`], handed to the core (the TTD ranking and
/// `GET /api/v1/sites` use them).
async fn refresh_queue_estimates(shared: &Arc<Shared>) {
    let s = shared.clone();
    let estimates = tokio::task::spawn_blocking(move || {
        let now = now_ms();
        let mut out = Vec::new();
        for (i, h) in s.sites.iter().enumerate() {
            let last = h.estimated_at.load(Ordering::Relaxed);
            if now.saturating_sub(last) < crate::backend::QUEUE_ESTIMATE_INTERVAL_MS {
                continue;
            }
            h.estimated_at.store(now, Ordering::Relaxed);
            match h.backend.queue_estimate(&h.name, now) {
                Some(Ok(e)) => out.push((koalesce_core::SiteId(i as u32), e)),
                Some(Err(e)) => tracing::debug!(site = %h.name, error = %e, "no queue estimate"),
                None => {}
            }
        }
        out
    })
    .await
    .unwrap_or_default();
    if !estimates.is_empty() {
        let mut st = shared.lock();
        for (site, e) in estimates {
            st.core.update_site_queue_estimate(site, e);
        }
    }
}

/// Carries out the actions left pending (`State::actions_pending`) chunk by chunk, the state
/// lock released and the runtime given a turn between chunks: submissions and the other
/// holders of the lock get in between.
pub(crate) async fn drain_pending(shared: &Arc<Shared>) {
    loop {
        {
            let mut guard = shared.lock();
            if !guard.actions_pending {
                return;
            }
            process_actions(shared, &mut guard);
            if !guard.actions_pending {
                return;
            }
        }
        shared.let_waiters_in();
        tokio::task::yield_now().await;
    }
}

/// The driver task.
pub async fn drive(shared: Arc<Shared>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let poll = Duration::from_millis(shared.config.poll_interval_ms.max(10));
    let mut last_poll = Instant::now();
    let mut last_flush = Instant::now();
    loop {
        let wait = {
            let st = shared.lock();
            match st.core.poll_timeout() {
                Some(t) => Duration::from_millis(t.saturating_sub(now_ms())).min(poll),
                None => poll,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shared.wake.notified() => {}
            _ = shutdown.changed() => return,
        }
        if shared.lock().core.poll_timeout().is_some_and(|t| t <= now_ms()) {
            // The data functions' answers for this scan (004 §3.3's catalogue cache).
            crate::gridway::catalogue::refresh(&shared).await;
        }
        // The actions a caller left (see `process_actions`) first: the core does not scan
        // again before every claim of its last scan is carried out.
        drain_pending(&shared).await;
        let more = {
            let mut guard = shared.lock();
            let st = &mut *guard;
            let now = now_ms();
            if st.core.poll_timeout().is_some_and(|t| t <= now) {
                let scans_before = st.core.stats().scans;
                let t0 = Instant::now();
                st.core.handle_timeout(now);
                let us = t0.elapsed().as_micros() as u64;
                if st.core.stats().scans > scans_before {
                    shared.metrics.scans.fetch_add(1, Ordering::Relaxed);
                    shared.metrics.scan_micros_total.fetch_add(us, Ordering::Relaxed);
                    shared.metrics.last_scan_micros.store(us, Ordering::Relaxed);
                }
                process_actions(&shared, st);
            }
            st.actions_pending
        };
        if more {
            drain_pending(&shared).await;
        }
        if last_poll.elapsed() >= poll {
            last_poll = Instant::now();
            refresh_sites(&shared).await;
            lrm::poll_running(shared.clone()).await;
            blacklist::probe_due(&shared).await;
            super::network::probe_due(&shared);
        }
        if last_flush.elapsed() >= PROGRESS_FLUSH {
            last_flush = Instant::now();
            flush_progress(&shared);
        }
        // The runtime's favour ends a while after the last component did.
        shared.threads.settle(Instant::now());
    }
}
