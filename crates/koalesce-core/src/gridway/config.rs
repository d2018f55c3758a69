//! GridWay's scheduler parameters (GridWay 5 `sched.conf`), with the values GridWay ships as
//! defaults. Times are milliseconds; GridWay's days and seconds are converted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::Millis;

/// One day in milliseconds.
pub const DAY_MS: Millis = 86_400_000;

/// How a placement scan orders the queued jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Queueing {
    /// KOALA's four priority queues, scanned by weighted round-robin (003 §4.2.1).
    #[default]
    Koala,
    /// GridWay's job priority: every queued job in one list ordered by the weighted sum of the
    /// fixed, share, deadline and waiting-time policies (see [`super::jobprio`]).
    Gridway,
}

impl Queueing {
    pub fn name(self) -> &'static str {
        match self {
            Queueing::Koala => "koala",
            Queueing::Gridway => "gridway",
        }
    }
}

/// A queueing name that is neither `koala` nor `gridway` (the text given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown queueing '{0}' (expected koala or gridway)")]
pub struct UnknownQueueing(pub String);

impl std::str::FromStr for Queueing {
    type Err = UnknownQueueing;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "koala" => Ok(Queueing::Koala),
            "gridway" => Ok(Queueing::Gridway),
            _ => Err(UnknownQueueing(s.to_string())),
        }
    }
}

/// Weights and parameters of GridWay's job priority policies (`sched.conf` §1):
/// `priority = fixed·FP + share·SH + deadline·DL + waiting·WT`, each term normalized to [0, 1].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JobPriorityConfig {
    /// FP_WEIGHT (default 1).
    pub fixed: f64,
    /// SH_WEIGHT (default 1).
    pub share: f64,
    /// DL_WEIGHT (default 1).
    pub deadline: f64,
    /// WT_WEIGHT (default 0).
    pub waiting: f64,
    /// DL_HALF: remaining time at which a job gets (about) half of the deadline priority
    /// (default one day).
    pub deadline_half_ms: Millis,
    /// SH_WINDOW_SIZE: length of one window of dispatch history (default one day).
    pub share_window_ms: Millis,
    /// SH_WINDOW_DEPTH: windows remembered, forgotten exponentially (default 5, at most 10).
    pub share_window_depth: u32,
    /// `SH_USER[DEFAULT]`: the share of an owner not listed in `shares` (GridWay ships 5).
    pub default_share: u32,
    /// `SH_USER[name]`: shares per owner (the dispatch ratio GridWay targets between owners).
    pub shares: BTreeMap<String, u32>,
}

impl Default for JobPriorityConfig {
    fn default() -> Self {
        JobPriorityConfig {
            fixed: 1.0,
            share: 1.0,
            deadline: 1.0,
            waiting: 0.0,
            deadline_half_ms: DAY_MS,
            share_window_ms: DAY_MS,
            share_window_depth: 5,
            default_share: 5,
            shares: BTreeMap::new(),
        }
    }
}

/// Weights of the resource priority of 004 Eq. 1 (`sched.conf` §2):
/// `P = usage·(history·P_hist + (1 − history)·P_current) + fixed·P_fixed + rank·P_rank`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResourcePriorityConfig {
    /// W_fixed, GridWay's RP_WEIGHT (default 1).
    pub fixed: f64,
    /// W_rank, RA_WEIGHT (GridWay ships 1).
    pub rank: f64,
    /// W_usage, UG_WEIGHT (default 1).
    pub usage: f64,
    /// W_hist: weight of the history term, 1 − UG_HISTORY_RATIO (GridWay: 0.25 for the last
    /// job, so 0.75).
    pub history: f64,
    /// UG_HISTORY_WINDOW: how far back P_hist averages (default three days).
    pub usage_window_ms: Millis,
    /// `RP_IM[DEFAULT]`: fixed priority of a site not listed in `site_priority` (default 1).
    pub default_site_priority: u32,
    /// `RP_HOST[site]`: fixed priority per site name, 1–99; 0 means the site is never used.
    pub site_priority: BTreeMap<String, u32>,
}

impl Default for ResourcePriorityConfig {
    fn default() -> Self {
        ResourcePriorityConfig {
            fixed: 1.0,
            rank: 1.0,
            usage: 1.0,
            history: 0.75,
            usage_window_ms: 3 * DAY_MS,
            default_site_priority: 1,
            site_priority: BTreeMap::new(),
        }
    }
}

/// GridWay's failure-rate policy: a site where a component failed is banned for a time that
/// grows with each further failure (see [`super::banning`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BanningConfig {
    /// FR_MAX_BANNED: the longest ban (default one hour); 0 disables banning.
    pub max_ms: Millis,
    /// FR_BANNED_C: the exponential constant of the ban time (default 650 s).
    pub constant_ms: Millis,
}

impl Default for BanningConfig {
    fn default() -> Self {
        BanningConfig {
            max_ms: 3_600_000,
            constant_ms: 650_000,
        }
    }
}

/// Every GridWay parameter (`[scheduler.gridway]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct GridwayConfig {
    pub job_priority: JobPriorityConfig,
    pub resource_priority: ResourcePriorityConfig,
    pub banning: BanningConfig,
}

impl GridwayConfig {
    /// Checks the ranges GridWay documents. Errors name the field under `gridway.`.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let j = &self.job_priority;
        let r = &self.resource_priority;
        for (field, w) in [
            ("gridway.job_priority.fixed", j.fixed),
            ("gridway.job_priority.share", j.share),
            ("gridway.job_priority.deadline", j.deadline),
            ("gridway.job_priority.waiting", j.waiting),
            ("gridway.resource_priority.fixed", r.fixed),
            ("gridway.resource_priority.rank", r.rank),
            ("gridway.resource_priority.usage", r.usage),
        ] {
            if !(w.is_finite() && w >= 0.0) {
                return Err((field, format!("a weight must be a non-negative number, got {w}")));
            }
        }
        if !(0.0..=1.0).contains(&r.history) {
            return Err(("gridway.resource_priority.history", format!("must be in [0, 1], got {}", r.history)));
        }
        if j.deadline_half_ms == 0 {
            return Err(("gridway.job_priority.deadline_half_ms", "must be positive".into()));
        }
        if j.share_window_ms == 0 {
            return Err(("gridway.job_priority.share_window_ms", "must be positive".into()));
        }
        if !(1..=10).contains(&j.share_window_depth) {
            return Err((
                "gridway.job_priority.share_window_depth",
                format!("must be in 1..=10 (GridWay's limit), got {}", j.share_window_depth),
            ));
        }
        if j.default_share == 0 || j.shares.values().any(|&s| s == 0) {
            return Err(("gridway.job_priority.shares", "a share must be at least 1".into()));
        }
        if r.usage_window_ms == 0 {
            return Err(("gridway.resource_priority.usage_window_ms", "must be positive".into()));
        }
        if r.default_site_priority > 99 || r.site_priority.values().any(|&p| p > 99) {
            return Err(("gridway.resource_priority.site_priority", "a fixed priority is in 0..=99".into()));
        }
        if r.default_site_priority == 0 {
            return Err((
                "gridway.resource_priority.default_site_priority",
                "0 would exclude every site not listed".into(),
            ));
        }
        if self.banning.max_ms > 0 && self.banning.constant_ms == 0 {
            return Err(("gridway.banning.constant_ms", "must be positive when banning is on".into()));
        }
        Ok(())
    }
}
