//! What the core tells its driver: the [`Action`]s it pulls, and how a component ended.

use serde::{Deserialize, Serialize};

use crate::model::{JobId, Millis, SiteId};
use crate::state::JobState;

/// One file copy the driver must perform for a job.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TransferKey {
    pub file: String,
    pub to: SiteId,
    /// The component whose chunk this is (chunked files); `None` for whole files, which are
    /// copied once per site and shared by the job's components there.
    pub chunk: Option<u32>,
}

/// A decision the driver must carry out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Action {
    /// Copy (part of) an input file; report with [`Scheduler::transfer_finished`](crate::Scheduler::transfer_finished).
    StartTransfer {
        job: JobId,
        key: TransferKey,
        from: SiteId,
        bytes: u64,
    },
    /// Stop a transfer that is no longer needed.
    CancelTransfer { job: JobId, key: TransferKey },
    /// Ask the site's LRM for an advance reservation of `processors` during
    /// `[start, start + duration)`; answer with [`Scheduler::reservation_answer`](crate::Scheduler::reservation_answer).
    Reserve {
        job: JobId,
        component: u32,
        site: SiteId,
        processors: u32,
        start: Millis,
        duration: Millis,
    },
    /// Give back a reservation that will not be used.
    CancelReservation { job: JobId, component: u32, site: SiteId },
    /// Claim `processors` at `site` now (submit the component to the LRM, where it holds them at
    /// the start barrier); `reservation` says whether it runs inside its granted reservation.
    /// If the LRM refuses, report [`Scheduler::claim_rejected`](crate::Scheduler::claim_rejected).
    Claim {
        job: JobId,
        component: u32,
        site: SiteId,
        processors: u32,
        reservation: bool,
    },
    /// Every component holds its processors and has its input: release the start barrier.
    Launch { job: JobId },
    /// Kill a claimed or running component and free its processors.
    Abort { job: JobId, component: u32, site: SiteId },
    /// A site reached the soft-error threshold and is no longer used.
    Blacklist { site: SiteId },
    /// A job changed state (for logs, persistence and metrics).
    StateChanged {
        job: JobId,
        from: JobState,
        to: JobState,
        at: Millis,
    },
}

/// How a component ended, as the driver observed it (003 §3.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ComponentOutcome {
    Success,
    /// An error of the execution site (node or LRM fault): counted against the site; the job
    /// is returned to the placement queue.
    SoftError,
    /// The application failed: reported to the user, the job fails.
    ApplicationError,
    /// The component reached its wall-time limit and was killed: the job ends as
    /// [`crate::state::FailureReason::Timeout`] (a bag of tasks counts it as a failed task).
    Timeout,
    /// The component went over its memory limit and was killed: the job ends as
    /// [`crate::state::FailureReason::OutOfMemory`] (a bag counts it as a failed task).
    OutOfMemory,
}
