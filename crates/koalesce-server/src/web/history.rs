//! The overview's time series: every [`INTERVAL_MS`] the sampler notes each site's processors
//! (local jobs, koalesce's running and waiting components, placed but unclaimed) and the four
//! queues' lengths, and the totals of submitted and finished jobs, keeping the last hour.
//! These are observations for the plots, not job state: the core stays the one source of truth.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use koalesce_core::state::ComponentState;
use koalesce_core::{JobState, Priority, SiteId};

use super::Web;
use crate::daemon::Shared;

/// Sampling interval.
pub const INTERVAL_MS: u64 = 10_000;
/// How far back the overview looks.
pub const WINDOW_MS: u64 = 3_600_000;

/// One site at one instant (processors).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SiteSample {
    pub total: u32,
    /// Busy with the site's own (local) jobs: used minus koalesce's.
    pub background: u32,
    /// koalesce's components running.
    pub running: u32,
    /// koalesce's components claimed and waiting at the start barrier (PWT).
    pub waiting: u32,
    /// Placed for koalesce's jobs, not claimed yet (PGT).
    pub placed: u32,
    pub idle: u32,
    pub blacklisted: bool,
}

/// Everything at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub at_ms: u64,
    pub sites: Vec<SiteSample>,
    /// Queue lengths, highest priority first.
    pub queues: [u32; 4],
    /// Jobs submitted since the server started, and jobs ended (any final state).
    pub submitted: u64,
    pub finished: u64,
}

/// The last hour of samples.
#[derive(Debug, Default)]
pub struct History {
    pub samples: VecDeque<Sample>,
}

impl History {
    pub fn push(&mut self, s: Sample) {
        let cut = s.at_ms.saturating_sub(WINDOW_MS);
        while self.samples.front().is_some_and(|x| x.at_ms < cut) {
            self.samples.pop_front();
        }
        self.samples.push_back(s);
    }
}

/// The state now.
pub fn sample(s: &Shared, now: u64) -> Sample {
    let st = s.lock();
    let n = st.core.sites().len();
    let mut running = vec![0u32; n];
    let mut waiting = vec![0u32; n];
    for j in st.core.jobs() {
        if !matches!(j.state, JobState::Placed | JobState::Claimed | JobState::Running) {
            continue;
        }
        for c in &j.components {
            let Some(site) = c.site else { continue };
            match c.state {
                ComponentState::Running if j.state == JobState::Running => running[site.index()] += c.processors,
                ComponentState::Claimed | ComponentState::Running => waiting[site.index()] += c.processors,
                _ => {}
            }
        }
    }
    let sites = st
        .core
        .sites()
        .iter()
        .enumerate()
        .map(|(i, site)| {
            let view = st.core.site_view(SiteId(i as u32));
            let h = &s.sites[i];
            let used = h.used.load(Ordering::Relaxed);
            let mine = running[i] + waiting[i];
            SiteSample {
                total: site.processors,
                background: used.saturating_sub(mine),
                running: running[i],
                waiting: waiting[i],
                placed: view.placed_unclaimed,
                idle: h.idle.load(Ordering::Relaxed),
                blacklisted: view.blacklisted,
            }
        })
        .collect();
    let mut queues = [0u32; 4];
    for (q, p) in queues.iter_mut().zip(Priority::ALL) {
        *q = st.core.queued(p).count() as u32;
    }
    Sample {
        at_ms: now,
        sites,
        queues,
        submitted: s.metrics.submissions.load(Ordering::Relaxed),
        finished: st.ended.values().sum(),
    }
}

/// Starts the sampler: one sample now, then one every [`INTERVAL_MS`] while the server runs
/// (it holds only weak references, so it ends with the server).
pub fn spawn_sampler(web: &Arc<Web>) {
    let shared: Weak<Shared> = Arc::downgrade(&web.shared);
    let history = Arc::downgrade(&web.history);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(INTERVAL_MS));
        loop {
            tick.tick().await;
            let (Some(s), Some(h)) = (shared.upgrade(), history.upgrade()) else {
                return;
            };
            let x = sample(&s, crate::now_ms());
            h.lock().unwrap_or_else(|p| p.into_inner()).push(x);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Sample {
        Sample {
            at_ms: ms,
            sites: vec![],
            queues: [0; 4],
            submitted: 0,
            finished: 0,
        }
    }

    #[test]
    fn keeps_the_last_hour() {
        let mut h = History::default();
        for i in 0..400 {
            h.push(at(i * INTERVAL_MS));
        }
        let first = h.samples.front().unwrap().at_ms;
        let last = h.samples.back().unwrap().at_ms;
        assert_eq!(last - first, WINDOW_MS);
        assert_eq!(h.samples.len() as u64, WINDOW_MS / INTERVAL_MS + 1);
    }
}
