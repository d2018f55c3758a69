//! GridWay's failure-rate policy: banning the sites where components fail (004 §2.1: "an
//! exponential linear back-off strategy to ban resources for which submissions have failed ...
//! for a period of time that is incremented after each successive error").
//!
//! GridWay 5 (`gw_scheduler_job_failed`) computes the ban from the time `t` since the first
//! failure of the current streak: the first failure bans for a tenth of FR_MAX_BANNED; a later
//! one for `FR_MAX_BANNED · (1 − e^(−t / FR_BANNED_C))`, or not at all within 10 s of the first
//! (several jobs failing together count once). A success clears the streak and the ban. Since a
//! banned site gets no new components, each new failure comes later than the previous ban's end,
//! so `t` grows and so does the ban, towards FR_MAX_BANNED.
//!
//! Two differences from GridWay, both to keep bans monotone: a failure reported during a ban
//! (from a component started before it) never shortens that ban — GridWay overwrote the end
//! time, so such a failure could shorten it — and a new ban of a streak is never shorter than
//! the previous one (GridWay's second ban is shorter than its first when FR_MAX_BANNED <
//! 1.06 · FR_BANNED_C). Ban lengths are rounded up to the millisecond.

use serde::{Deserialize, Serialize};

use super::config::BanningConfig;
use crate::model::{Millis, SiteId};

/// Within this time of a streak's first failure, further failures do not ban again.
pub const SAME_FAILURE_MS: Millis = 10_000;

/// The ban state of one site.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ban {
    /// First failure of the current streak (GridWay's `last_banned`); `None` after a success.
    pub streak_start: Option<Millis>,
    /// Failures in the current streak.
    pub failures: u32,
    /// The site takes no component before this time.
    pub until: Millis,
    /// Length of the streak's latest ban.
    pub last_ms: Millis,
}

/// Ban states of every site.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BanTable {
    config: BanningConfig,
    sites: Vec<Ban>,
}

impl BanTable {
    pub fn new(sites: usize, config: BanningConfig) -> Self {
        BanTable {
            config,
            sites: vec![Ban::default(); sites],
        }
    }

    /// Whether banning is on (FR_MAX_BANNED > 0).
    pub fn enabled(&self) -> bool {
        self.config.max_ms > 0
    }

    /// The length of a ban `elapsed` after the streak's first failure, as GridWay computes it
    /// (before the monotonicity rule): 0.1 · max at the first failure, 0 within 10 s of it.
    pub fn formula_ms(&self, first: bool, elapsed: Millis) -> Millis {
        let max = self.config.max_ms;
        if first {
            return max.div_ceil(10);
        }
        if elapsed <= SAME_FAILURE_MS {
            return 0;
        }
        let c = self.config.constant_ms.max(1) as f64;
        let f = max as f64 * (1.0 - (-(elapsed as f64) / c).exp());
        (f.ceil() as Millis).min(max)
    }

    /// A component failed at `site` (a soft error): bans it. Returns the end of the ban when
    /// this failure set or extended one.
    pub fn on_failure(&mut self, now: Millis, site: SiteId) -> Option<Millis> {
        if !self.enabled() {
            return None;
        }
        let first = self.sites[site.index()].streak_start.is_none();
        let elapsed = self.sites[site.index()].streak_start.map_or(0, |s| now.saturating_sub(s));
        let formula = self.formula_ms(first, elapsed);
        let b = &mut self.sites[site.index()];
        b.failures += 1;
        if first {
            b.streak_start = Some(now);
        }
        if formula == 0 {
            return None;
        }
        let len = formula.max(b.last_ms);
        b.last_ms = len;
        let end = now + len;
        if end <= b.until {
            return None;
        }
        b.until = end;
        Some(end)
    }

    /// A component ended successfully at `site`: the streak and any ban are cleared (GridWay's
    /// `gw_scheduler_job_success`).
    pub fn on_success(&mut self, site: SiteId) {
        self.sites[site.index()] = Ban::default();
    }

    /// Whether `site` may take no component at `now`.
    pub fn is_banned(&self, site: SiteId, now: Millis) -> bool {
        self.enabled() && now < self.sites[site.index()].until
    }

    pub fn get(&self, site: SiteId) -> &Ban {
        &self.sites[site.index()]
    }

    /// Sets the ban state of `site` (a driver restoring what it persisted).
    pub fn set(&mut self, site: SiteId, ban: Ban) {
        self.sites[site.index()] = ban;
    }

    /// The earliest end of a ban still in force at `now`.
    pub fn next_expiry(&self, now: Millis) -> Option<Millis> {
        self.sites.iter().map(|b| b.until).filter(|&u| u > now).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn table(max_s: u64, c_s: u64) -> BanTable {
        BanTable::new(
            2,
            BanningConfig {
                max_ms: max_s * 1000,
                constant_ms: c_s * 1000,
            },
        )
    }

    #[test]
    fn gridway_defaults_by_hand() {
        // FR_MAX_BANNED 3600 s, FR_BANNED_C 650 s.
        let mut t = table(3600, 650);
        let s = SiteId(0);
        // First failure: 360 s.
        assert_eq!(t.on_failure(1_000, s), Some(361_000));
        assert!(t.is_banned(s, 360_999) && !t.is_banned(s, 361_000));
        assert!(!t.is_banned(SiteId(1), 1_000));
        // 5 s later (same incident): no new ban.
        assert_eq!(t.on_failure(6_000, s), None);
        // After the ban: t = 400 s since the first failure → 3600·(1 − e^(−400/650)) =
        // 1654.4416 s, rounded up to the ms.
        let want = (3_600_000.0 * (1.0 - (-400.0f64 / 650.0).exp())).ceil() as u64;
        assert_eq!(want, 1_654_442);
        assert_eq!(t.on_failure(401_000, s), Some(401_000 + want));
        assert_eq!(t.get(s).failures, 3);
        // A success clears the ban and the streak: the next failure is a first one again.
        t.on_success(s);
        assert!(!t.is_banned(s, 402_000));
        assert_eq!(t.on_failure(500_000, s), Some(500_000 + 360_000));
    }

    #[test]
    fn a_failure_during_a_ban_never_shortens_it() {
        let mut t = table(3600, 650);
        let s = SiteId(1);
        assert_eq!(t.on_failure(0, s), Some(360_000));
        // 20 s after the first failure GridWay computes 3600·(1 − e^(−20/650)) ≈ 109 s and sets
        // the end to 129 s, shortening the ban; here the streak's ban is at least as long as
        // the previous one (360 s from now).
        assert_eq!(t.formula_ms(false, 20_000), 109_083);
        assert_eq!(t.on_failure(20_000, s), Some(380_000));
        assert_eq!(t.get(s).until, 380_000);
    }

    #[test]
    fn disabled_bans_nothing() {
        let mut t = table(0, 650);
        assert_eq!(t.on_failure(0, SiteId(0)), None);
        assert!(!t.is_banned(SiteId(0), 1));
    }

    proptest! {
        /// Consecutive failures, each after the previous ban ended, get strictly longer bans
        /// until the maximum; after a success the next ban is the first one again.
        #[test]
        fn bans_grow_with_consecutive_failures_and_reset_after_success(
            max_s in 101u64..20_000,
            c_frac in 0.01f64..0.9,
            gaps in proptest::collection::vec(0u64..5_000_000, 1..12),
            start in 0u64..1_000_000_000,
        ) {
            let c_s = ((max_s as f64 * c_frac) as u64).max(1);
            let mut t = table(max_s, c_s);
            let max = max_s * 1000;
            let s = SiteId(0);
            let mut now = start;
            let mut prev: Option<Millis> = None;
            for gap in &gaps {
                let end = t.on_failure(now, s).expect("a failure after the ban bans again");
                let len = end - now;
                prop_assert!(len <= max);
                prop_assert!(t.is_banned(s, now) && t.is_banned(s, end - 1) && !t.is_banned(s, end));
                if let Some(p) = prev {
                    prop_assert!(len > p || (len == p && p == max), "ban {len} after {p}");
                } else {
                    prop_assert_eq!(len, max.div_ceil(10));
                }
                prev = Some(len);
                now = end + gap;
            }
            t.on_success(s);
            prop_assert!(!t.is_banned(s, now));
            prop_assert_eq!(t.on_failure(now, s), Some(now + max.div_ceil(10)));
        }
    }
}
