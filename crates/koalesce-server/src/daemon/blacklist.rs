//! Re-admitting blacklisted sites, with back-off.
//!
//! The core blacklists a site after `blacklist_threshold` consecutive soft errors (003 §4.2.3)
//! and, as in KOALA, keeps it out until an administrator re-admits it (or for
//! `blacklist_expiry_ms`). A site whose LRM went away for a while (a Slurm controller stopped
//! for maintenance) comes back by itself, though, so the daemon probes a blacklisted site's
//! backend (`processors`, which asks its controller) with exponential back-off: the first
//! probe `site_probe_ms` after the blacklisting, then twice as long after every failed probe,
//! at most `site_probe_max_ms`. A probe that answers re-admits the site. A site blacklisted
//! again within `site_probe_max_ms` of being re-admitted starts one step further along, so a
//! flapping site is tried less and less often.
//!
//! A site is also blacklisted when its LRM has not answered the daemon's refreshes (its
//! `processors`) for `site_down_ms`, whether or not jobs were tried there: a cluster whose
//! controller stopped while it was full would otherwise keep its last counts and hold jobs fixed
//! to it silently.
//!
//! While probes are on, the core re-admits a blacklisted site after `site_probe_max_ms` at the
//! latest (its `blacklist_expiry_ms`, unless the configuration sets one), so that a job only a
//! blacklisted site can hold waits for it instead of failing as unplaceable.
//!
//! The probes run off the state lock, on the blocking pool. `site_probe_ms = 0` turns them off
//! (blacklisting is then the core's alone, as in KOALA).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use koalesce_core::SiteId;

use super::Shared;

/// The back-off state of sites the core blacklisted.
#[derive(Debug, Default)]
pub struct Probes {
    sites: HashMap<SiteId, Probe>,
    /// Sites whose refreshes fail, since when.
    unreachable: HashMap<SiteId, Instant>,
}

#[derive(Debug, Clone, Copy)]
struct Probe {
    /// Failed probes plus blacklistings in a row: the next wait is `base · 2^(level-1)`.
    level: u32,
    /// When to probe next (`None`: re-admitted, remembered for the flapping rule).
    next: Option<Instant>,
    readmitted: Option<Instant>,
}

/// `base · 2^(level-1)`, at most `max`.
pub fn backoff(base: Duration, max: Duration, level: u32) -> Duration {
    let shift = level.saturating_sub(1).min(20);
    base.saturating_mul(1 << shift).min(max)
}

impl Probes {
    /// The core blacklisted `site` at `now`.
    pub fn blacklisted(&mut self, site: SiteId, now: Instant, base: Duration, max: Duration) {
        if base.is_zero() {
            return;
        }
        let p = self.sites.entry(site).or_insert(Probe {
            level: 0,
            next: None,
            readmitted: None,
        });
        let recent = p.readmitted.is_some_and(|t| now.duration_since(t) < max);
        p.level = if recent { p.level + 1 } else { 1 };
        p.next = Some(now + backoff(base, max, p.level));
    }

    /// Sites whose probe is due at `now`.
    pub fn due(&self, now: Instant) -> Vec<SiteId> {
        let mut v: Vec<SiteId> = self
            .sites
            .iter()
            .filter(|(_, p)| p.next.is_some_and(|t| t <= now))
            .map(|(s, _)| *s)
            .collect();
        v.sort();
        v
    }

    /// The probe of `site` answered (`ok`) or not; returns whether to re-admit it.
    pub fn probed(&mut self, site: SiteId, ok: bool, now: Instant, base: Duration, max: Duration) -> bool {
        let Some(p) = self.sites.get_mut(&site) else { return false };
        if p.next.is_none() {
            return false;
        }
        if ok {
            p.next = None;
            p.readmitted = Some(now);
        } else {
            p.level += 1;
            p.next = Some(now + backoff(base, max, p.level));
        }
        ok
    }

    /// The site is no longer blacklisted by other means (an administrator, the core's expiry).
    pub fn forget(&mut self, site: SiteId) {
        if let Some(p) = self.sites.get_mut(&site) {
            p.next = None;
        }
    }

    /// When `site` is probed next, if it waits for one.
    pub fn next_probe(&self, site: SiteId) -> Option<Instant> {
        self.sites.get(&site).and_then(|p| p.next)
    }
}

/// The core's configuration as the daemon runs it: with probes on and no `blacklist_expiry_ms`
/// configured, a blacklisted site is re-admitted after `site_probe_max_ms` at the latest.
pub fn core_config(config: &crate::config::ServerConfig) -> koalesce_core::SchedulerConfig {
    let mut c = config.scheduler.clone();
    if config.site_probe_ms > 0 && c.blacklist_expiry_ms.is_none() {
        c.blacklist_expiry_ms = Some(config.site_probe_max_ms.max(config.site_probe_ms));
    }
    c
}

/// The driver refreshed every site's processor counts: `answers` says which answered. A site
/// that has not answered for `site_down_ms` is blacklisted and probed from then on.
pub fn observe_refresh(shared: &Arc<Shared>, answers: &[(SiteId, bool)]) {
    let down_after = Duration::from_millis(shared.config.site_down_ms);
    let mut guard = shared.lock();
    let st = &mut *guard;
    let now = Instant::now();
    let mut changed = false;
    for &(site, ok) in answers {
        if ok {
            st.probes.unreachable.remove(&site);
            continue;
        }
        let since = *st.probes.unreachable.entry(site).or_insert(now);
        if down_after.is_zero() || now.duration_since(since) < down_after || st.core.site_view(site).blacklisted {
            continue;
        }
        st.core.set_blacklisted(site, true);
        shared.metrics.blacklisted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!(
            site = %shared.site(site).name,
            for_ms = now.duration_since(since).as_millis() as u64,
            "site does not answer: blacklisted"
        );
        on_blacklist(shared, st, site);
        changed = true;
    }
    if changed {
        super::process_actions(shared, st);
    }
}

fn limits(shared: &Shared) -> (Duration, Duration) {
    let c = &shared.config;
    (
        Duration::from_millis(c.site_probe_ms),
        Duration::from_millis(c.site_probe_max_ms.max(c.site_probe_ms)),
    )
}

/// `Action::Blacklist` (under the lock): starts the back-off of `site`.
pub fn on_blacklist(shared: &Shared, st: &mut super::State, site: SiteId) {
    let (base, max) = limits(shared);
    st.probes.blacklisted(site, Instant::now(), base, max);
    if let Some(t) = st.probes.next_probe(site) {
        tracing::warn!(
            site = %shared.site(site).name,
            probe_in_ms = t.saturating_duration_since(Instant::now()).as_millis() as u64,
            "site blacklisted; probing it with back-off"
        );
    }
}

/// Probes the blacklisted sites whose time has come (off the lock) and re-admits those that
/// answer. Called by the driver on every poll.
pub async fn probe_due(shared: &Arc<Shared>) {
    let (base, max) = limits(shared);
    let due = {
        let mut st = shared.lock();
        let due = st.probes.due(Instant::now());
        // Re-admitted meanwhile by other means: nothing to probe.
        let (blacklisted, gone): (Vec<SiteId>, Vec<SiteId>) = due.into_iter().partition(|s| st.core.site_view(*s).blacklisted);
        for s in gone {
            st.probes.forget(s);
        }
        blacklisted
    };
    if due.is_empty() {
        return;
    }
    let s = shared.clone();
    let answers: Vec<(SiteId, Result<(), String>)> = tokio::task::spawn_blocking(move || {
        due.into_iter()
            .map(|site| {
                let h = s.site(site);
                (site, h.backend.processors(&h.name).map(|_| ()).map_err(|e| e.to_string()))
            })
            .collect()
    })
    .await
    .unwrap_or_default();
    let mut guard = shared.lock();
    let st = &mut *guard;
    let now = Instant::now();
    for (site, answer) in answers {
        let name = &shared.site(site).name;
        if st.probes.probed(site, answer.is_ok(), now, base, max) {
            st.core.set_blacklisted(site, false);
            tracing::warn!(site = %name, "site answers again: re-admitted");
        } else if let Err(e) = answer {
            let wait = st
                .probes
                .next_probe(site)
                .map(|t| t.saturating_duration_since(now).as_millis() as u64);
            tracing::info!(site = %name, error = %e, next_probe_in_ms = wait, "blacklisted site still does not answer");
        }
    }
    super::process_actions(shared, st);
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Duration = Duration::from_secs(5);
    const M: Duration = Duration::from_secs(60);

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let waits: Vec<u64> = (1..=6).map(|l| backoff(B, M, l).as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 60, 60]);
        assert_eq!(backoff(B, M, 0), B);
        assert_eq!(backoff(B, Duration::MAX, 200), B * (1 << 20), "no overflow");
    }

    #[test]
    fn probes_back_off_and_readmit() {
        let s = SiteId(1);
        let t0 = Instant::now();
        let mut p = Probes::default();
        assert!(p.due(t0 + M).is_empty());
        p.blacklisted(s, t0, B, M);
        assert!(p.due(t0 + B - Duration::from_millis(1)).is_empty());
        assert_eq!(p.due(t0 + B), vec![s]);
        // Fails twice: 10 s, then 20 s.
        assert!(!p.probed(s, false, t0 + B, B, M));
        assert_eq!(p.next_probe(s), Some(t0 + B + 2 * B));
        assert!(!p.probed(s, false, t0 + 3 * B, B, M));
        assert_eq!(p.next_probe(s), Some(t0 + 3 * B + 4 * B));
        // Answers: re-admitted, no more probes.
        assert!(p.probed(s, true, t0 + 7 * B, B, M));
        assert!(p.due(t0 + 100 * M).is_empty());
        assert!(!p.probed(s, true, t0 + 8 * B, B, M), "a second answer re-admits nothing");
        // Blacklisted again soon after: one step further (level 4 → 40 s).
        let t1 = t0 + 8 * B;
        p.blacklisted(s, t1, B, M);
        assert_eq!(p.next_probe(s), Some(t1 + 8 * B));
        assert!(p.probed(s, true, t1 + 8 * B, B, M));
        // Blacklisted long after the re-admission: from the start.
        let t2 = t1 + 8 * B + M;
        p.blacklisted(s, t2, B, M);
        assert_eq!(p.next_probe(s), Some(t2 + B));
        p.forget(s);
        assert!(p.due(t2 + M).is_empty());
    }

    #[test]
    fn zero_base_turns_probing_off() {
        let mut p = Probes::default();
        p.blacklisted(SiteId(0), Instant::now(), Duration::ZERO, M);
        assert_eq!(p.next_probe(SiteId(0)), None);
    }
}
