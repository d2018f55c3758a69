//! Every scheduler parameter in one place, with the seeds' values as defaults.

use serde::{Deserialize, Serialize};

use crate::broker::Augmentation;
use crate::gridway::{GridwayConfig, Queueing};
use crate::model::{CoallocationMode, Millis, PolicyKind, SiteId};

/// How the time between placement-queue scans is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum ScanInterval {
    /// A fixed interval (003 §4.2.1: 1 minute in §5.1, 4 minutes in §5.2).
    Fixed { interval_ms: Millis },
    /// The PDCA's adaptive interval (000 §3.2): average placement tries of the queued jobs
    /// times a base interval (at least one base interval).
    Adaptive { base_ms: Millis },
}

/// What happens when the JST is reached before every component is claimed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum OnJstReached {
    /// 003 §4.2.2: abort claimed components, lower L, return the job to the placement queue.
    ReturnToPlacement,
    /// 000 §3.3: push the JST by a fixed interval and keep claiming (up to the claiming limit).
    ExtendJst { interval_ms: Millis },
}

/// The initial contents of CF's history table H (003 Alg. 1 needs it seeded).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum HistorySeed {
    /// Every (execution site, file site) pair, as in the experiments.
    AllPairs,
    /// Start empty (CF then only places components on file sites).
    Empty,
    /// An explicit list of (execution, file) pairs.
    Pairs { pairs: Vec<(SiteId, SiteId)> },
}

/// Weighted round-robin weights of the four placement queues (003 §4.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueWeights {
    /// Scans of the higher group {super-high, high} per round (N_h ≥ N_l ≥ 1).
    pub n_high_group: u32,
    /// Scans of the lower group {low, super-low} per round.
    pub n_low_group: u32,
    /// super-high scans per higher-group scan. 003 §4.2.1 asks n1 ≥ n2 ≥ 1, but §5.2.1 runs
    /// n1 = 1, n2 = 2, so only n1, n2 ≥ 1 is enforced.
    pub n1: u32,
    /// high scans per higher-group scan.
    pub n2: u32,
    /// low scans per lower-group scan (n3 ≥ n4 ≥ 1).
    pub n3: u32,
    /// super-low scans per lower-group scan.
    pub n4: u32,
}

impl Default for QueueWeights {
    fn default() -> Self {
        QueueWeights {
            n_high_group: 1,
            n_low_group: 1,
            n1: 1,
            n2: 1,
            n3: 1,
            n4: 1,
        }
    }
}

/// The broker's parameters (001 §3): co-allocation by reservations and its windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BrokerConfig {
    /// How jobs that do not choose are co-allocated.
    pub coallocation: CoallocationMode,
    /// ε, the largest start deviation between components, for jobs that give none (001 §5.2.2
    /// used 5 minutes; §3.2.2: "in the order of a half minute to a few minutes").
    pub max_start_deviation_ms: Millis,
    /// How far after a try the start window reaches for a job that gives no latest start
    /// (001 §5.2.2 used four hours).
    pub window_ms: Millis,
    /// How Algorithm 1 searches augmenting paths.
    pub augmentation: Augmentation,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            coallocation: CoallocationMode::Claiming,
            max_start_deviation_ms: 300_000,
            window_ms: 4 * 3_600_000,
            augmentation: Augmentation::Exhaustive,
        }
    }
}

/// All parameters of the scheduling core. `Default` gives the values of 003 §5.1.1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    /// Placement policy of jobs that do not name one.
    pub default_policy: PolicyKind,
    pub scan_interval: ScanInterval,
    pub queue_weights: QueueWeights,
    /// Anti-starvation: low and high jobs move up one level every P placement tries
    /// (`None` = ∞, never).
    pub anti_starvation_tries: Option<u32>,
    /// A job fails after this many placement tries (`None` = ∞).
    pub max_placement_tries: Option<u32>,
    /// A job fails after this many claiming tries in total (`None` = ∞).
    pub max_claiming_tries: Option<u32>,
    /// Initial L: first claim at JPT + L·FTT.
    pub claim_fraction: f64,
    /// How much L drops each time the JST is reached (floor 0).
    pub claim_fraction_step: f64,
    /// Never retry claiming sooner than this after the previous try (keeps L = 0 from spinning).
    pub min_claim_retry_ms: Millis,
    pub on_jst_reached: OnJstReached,
    /// ICP threshold T in [0, 1]: claim when (|C_prev| + |C_now|) / |J| ≥ T. 1 = atomic.
    pub claim_threshold: f64,
    /// Whether ICP may preempt lower-priority grid jobs (003 Alg. 2 lines 8–14).
    pub preemption: bool,
    /// Consecutive soft errors after which a site is blacklisted.
    pub blacklist_threshold: u32,
    /// A blacklisted site is re-admitted after this long (`None`: it stays out until an
    /// administrator re-admits it, as in KOALA). While blacklisting is permanent, a job that no
    /// remaining site could ever hold fails as unplaceable instead of waiting forever.
    pub blacklist_expiry_ms: Option<Millis>,
    /// A job fails after this many returns to the queue because of soft errors (`None` = ∞).
    pub max_error_resubmissions: Option<u32>,
    pub history: HistorySeed,
    /// Try to place a job as soon as it is submitted instead of at the next scan.
    pub place_on_submit: bool,
    /// How a scan orders the queued jobs: KOALA's four queues or GridWay's job priority.
    pub queueing: Queueing,
    /// GridWay's job and resource priorities and banning (004; `sched.conf`).
    pub gridway: GridwayConfig,
    /// The broker (TTD/TTS ranking, co-allocation by reservations).
    pub broker: BrokerConfig,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            default_policy: PolicyKind::Cf,
            scan_interval: ScanInterval::Fixed { interval_ms: 60_000 },
            queue_weights: QueueWeights::default(),
            anti_starvation_tries: None,
            max_placement_tries: None,
            max_claiming_tries: None,
            claim_fraction: 0.75,
            claim_fraction_step: 0.25,
            min_claim_retry_ms: 1_000,
            on_jst_reached: OnJstReached::ReturnToPlacement,
            claim_threshold: 1.0,
            preemption: true,
            blacklist_threshold: 5,
            blacklist_expiry_ms: None,
            max_error_resubmissions: None,
            history: HistorySeed::AllPairs,
            place_on_submit: false,
            queueing: Queueing::Koala,
            gridway: GridwayConfig::default(),
            broker: BrokerConfig::default(),
        }
    }
}

/// A parameter out of its range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid scheduler parameter '{field}': {reason}")]
pub struct ConfigError {
    pub field: &'static str,
    pub reason: String,
}

impl SchedulerConfig {
    /// Checks the ranges the seeds give (L and T in [0, 1], N_h ≥ N_l ≥ 1, n1, n2 ≥ 1 (see
    /// [`QueueWeights::n1`]), n3 ≥ n4 ≥ 1, …).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field, reason: &str| {
            Err(ConfigError {
                field,
                reason: reason.to_string(),
            })
        };
        if !(0.0..=1.0).contains(&self.claim_fraction) {
            return err("claim_fraction", "L must be in [0, 1]");
        }
        if !(0.0..=1.0).contains(&self.claim_fraction_step) {
            return err("claim_fraction_step", "must be in [0, 1]");
        }
        if !(0.0..=1.0).contains(&self.claim_threshold) {
            return err("claim_threshold", "T must be in [0, 1]");
        }
        let w = &self.queue_weights;
        if w.n_low_group < 1 || w.n_high_group < w.n_low_group {
            return err("queue_weights", "need N_h >= N_l >= 1");
        }
        // 003 §4.2.1 asks n1 >= n2, but 003 §5.2.1 itself runs n1 = 1, n2 = 2 ("we scan the
        // high placement queue twice before we scan the low placement queue once"; the
        // super-high queue is empty and skipped), so only positivity is required here.
        if w.n1 < 1 || w.n2 < 1 {
            return err("queue_weights", "need n1 >= 1 and n2 >= 1");
        }
        if w.n4 < 1 || w.n3 < w.n4 {
            return err("queue_weights", "need n3 >= n4 >= 1");
        }
        match self.scan_interval {
            ScanInterval::Fixed { interval_ms: 0 } | ScanInterval::Adaptive { base_ms: 0 } => {
                return err("scan_interval", "interval must be positive");
            }
            _ => {}
        }
        if self.blacklist_threshold == 0 {
            return err("blacklist_threshold", "must be at least 1");
        }
        if let Err((field, reason)) = self.gridway.validate() {
            return Err(ConfigError { field, reason });
        }
        if self.broker.window_ms == 0 {
            return err("broker.window_ms", "must be positive");
        }
        if self.anti_starvation_tries == Some(0) {
            return err("anti_starvation_tries", "P must be at least 1 (omit it for infinity)");
        }
        Ok(())
    }
}
