//! What the core knows of one job, its components and one site.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::broker::Prediction;
use crate::model::{JobId, JobSpec, Millis, PolicyKind, Priority, SiteId, Timeline};
use crate::placement::FileSource;
use crate::state::{ComponentState, JobState};

use super::TransferKey;

/// One component of an active job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Component {
    pub processors: u32,
    pub fixed_site: Option<SiteId>,
    pub site: Option<SiteId>,
    pub state: ComponentState,
    pub sources: Vec<FileSourceRecord>,
    pub ftt_ms: Millis,
    /// Whether the component's processors come from an advance reservation.
    pub reserved: bool,
}

impl Component {
    /// A component not placed yet.
    pub fn unplaced(processors: u32, fixed_site: Option<SiteId>) -> Self {
        Component {
            processors,
            fixed_site,
            site: None,
            state: ComponentState::Unplaced,
            sources: Vec::new(),
            ftt_ms: 0,
            reserved: false,
        }
    }
}

/// Serializable copy of a [`FileSource`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSourceRecord {
    pub file: String,
    pub from: SiteId,
    pub bytes: u64,
    pub estimated_ms: Millis,
}

impl From<&FileSource> for FileSourceRecord {
    fn from(s: &FileSource) -> Self {
        FileSourceRecord {
            file: s.file.clone(),
            from: s.from,
            bytes: s.bytes,
            estimated_ms: s.estimated_ms,
        }
    }
}

/// Transfer progress of one [`TransferKey`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TransferStatus {
    InFlight,
    Done,
}

/// Everything the scheduler knows about one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    pub spec: JobSpec,
    pub state: JobState,
    /// Current priority (anti-starvation may raise it above the submitted one).
    pub priority: Priority,
    pub policy: PolicyKind,
    pub components: Vec<Component>,
    pub timeline: Timeline,
    /// Placement tries in all (every scan that considered the job, successful ones included).
    pub placement_tries: u32,
    /// Placement tries since the last promotion (anti-starvation).
    pub tries_at_level: u32,
    /// Claiming tries in all.
    pub claiming_tries: u32,
    /// Successful placements (more than one after returns to the queue).
    pub placements: u32,
    /// Current L.
    pub claim_fraction: f64,
    /// Current JCT while in the claiming queue.
    pub next_claim: Option<Millis>,
    /// Returns to the placement queue after soft errors.
    pub error_resubmissions: u32,
    /// Returns to the placement queue because the JST was reached.
    pub jst_returns: u32,
    pub preemptions: u32,
    pub transfers: BTreeMap<TransferKey, TransferStatus>,
    /// Whole files already copied to a site for this job (free to reuse after re-placement).
    pub staged: BTreeSet<(String, SiteId)>,
    /// Tries changed since a driver last took them ([`super::Scheduler::take_progress`]).
    #[serde(skip)]
    pub progress_pending: bool,
    /// The broker's prediction for the latest placement (TTD/TTS ranking or co-allocation by
    /// reservations): compare with the timeline for the prediction error.
    #[serde(default)]
    pub prediction: Option<Prediction>,
    /// Held by its user (`hold`); placed only after `release`.
    #[serde(default)]
    pub user_hold: bool,
    /// Dependencies not satisfied yet; the job is [`crate::state::JobState::Held`] while any
    /// is left.
    #[serde(default)]
    pub waiting_on: Vec<super::Dependency>,
    /// Held until its begin time ([`crate::model::JobSpec::begin_ms`]), which has not come yet.
    #[serde(default)]
    pub begin_pending: bool,
    /// Succeeded, and its outputs ([`crate::model::JobSpec::stages_out`]) are not registered
    /// yet: jobs depending on it still wait ([`super::Scheduler::outputs_registered`]).
    #[serde(default)]
    pub outputs_pending: bool,
    /// The array or bag of tasks the job is a task of (its id: the first task's), once the
    /// driver declared it ([`super::Scheduler::declare_bag`]).
    #[serde(default)]
    pub bag: Option<JobId>,
}

impl Job {
    /// A bag of tasks (003 §3.3): placed with at least `min_components` components, and a
    /// failed task does not fail the job (see [`super::Scheduler::component_finished`]).
    pub fn is_bag(&self) -> bool {
        self.spec.min_components.is_some() && self.spec.flexible.is_none()
    }

    /// Distinct sites of the current placement (job spread).
    pub fn sites(&self) -> BTreeSet<SiteId> {
        self.components.iter().filter_map(|c| c.site).collect()
    }

    pub fn total_processors(&self) -> u32 {
        self.components.iter().map(|c| c.processors).sum()
    }

    pub(crate) fn claimed_count(&self) -> usize {
        self.components
            .iter()
            .filter(|c| {
                matches!(
                    c.state,
                    ComponentState::Claimed | ComponentState::Running | ComponentState::Finished
                )
            })
            .count()
    }

    /// Components taking part in the current run (all but the skipped ones of a bag).
    pub fn active_count(&self) -> usize {
        self.components.iter().filter(|c| c.state != ComponentState::Skipped).count()
    }

    pub(crate) fn data_ready(&self) -> bool {
        self.transfers.values().all(|s| *s == TransferStatus::Done)
    }

    pub(crate) fn estimated_start(&self) -> Millis {
        self.timeline.estimated_start.unwrap_or(self.timeline.submitted)
    }
}

/// What the scheduler knows of one site.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteView {
    /// Idle processors as last reported by the site (minus claims issued since).
    pub idle: u32,
    /// Processors placed for grid jobs but not yet claimed (not given to other grid jobs).
    pub placed_unclaimed: u32,
    pub consecutive_errors: u32,
    pub total_errors: u32,
    pub blacklisted: bool,
    /// When a blacklisted site is re-admitted (with `blacklist_expiry_ms`).
    pub blacklisted_until: Option<Millis>,
    /// Times the site was blacklisted since it last ran a component to success: each ban
    /// lasts twice the one before (as GridWay's bans grow), up to 64 × `blacklist_expiry_ms`.
    #[serde(default)]
    pub bans: u32,
}

/// Counters for metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerStats {
    pub scans: u64,
    pub placement_tries: u64,
    pub claiming_tries: u64,
    pub preemptions: u64,
    pub soft_errors: u64,
    pub max_queue_length: usize,
}
