//! The LRM's vocabulary: ids, configuration, local jobs, claims, reservations, events and
//! rejections.

use serde::{Deserialize, Serialize};

/// Integer milliseconds of simulated time.
pub type Millis = u64;

/// "Never" / "forever": the end of a claim with no known end.
pub const NEVER: Millis = Millis::MAX;

/// Opaque identifier of a grid claim or reservation: (job id, component index) by convention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GridKey(pub u64, pub u32);

/// Identifier of a local job, assigned by the LRM in submission order (0, 1, 2, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LocalJobId(pub u64);

/// Identifier of a granted advance reservation, unique within one LRM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ReservationId(pub u64);

/// The LRM's policy for its local queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LocalPolicy {
    /// First come, first served: only queue heads start.
    Fcfs,
    /// EASY backfilling: the blocked head gets a reservation, later jobs may jump ahead if they
    /// do not delay it.
    EasyBackfill,
}

/// Static configuration of one site's LRM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LrmConfig {
    /// Number of processor slots `P`.
    pub procs: u32,
    /// Local queue policy.
    pub policy: LocalPolicy,
    /// Whether [`LocalRm::reserve`](super::LocalRm::reserve) can grant advance reservations.
    pub supports_reservations: bool,
}

impl LrmConfig {
    /// A site with `procs` processors, EASY backfilling and advance reservations.
    pub fn new(procs: u32) -> Self {
        LrmConfig {
            procs,
            policy: LocalPolicy::EasyBackfill,
            supports_reservations: true,
        }
    }
}

/// A local job as submitted to the LRM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalJob {
    /// Processors needed (1 ≤ procs ≤ P).
    pub procs: u32,
    /// Actual runtime; raised to at least 1 ms on submission.
    pub runtime_ms: Millis,
    /// User's runtime estimate; raised to at least the runtime on submission.
    pub estimate_ms: Millis,
    /// A dummy job injected by the background-load generator (may be killed by it).
    pub injected: bool,
}

impl LocalJob {
    /// An ordinary (non-injected) local job.
    pub fn new(procs: u32, runtime_ms: Millis, estimate_ms: Millis) -> Self {
        LocalJob {
            procs,
            runtime_ms,
            estimate_ms,
            injected: false,
        }
    }

    /// A dummy job injected by a background-load generator.
    pub fn injected(procs: u32, runtime_ms: Millis, estimate_ms: Millis) -> Self {
        LocalJob {
            injected: true,
            ..LocalJob::new(procs, runtime_ms, estimate_ms)
        }
    }
}

/// Life-cycle state of a local job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LocalJobState {
    /// Waiting in the local queue.
    Queued,
    /// Holding its processors.
    Running,
    /// Ran to completion.
    Finished,
    /// Killed (while queued or running) by [`LocalRm::kill_local`](super::LocalRm::kill_local).
    Killed,
}

/// Everything the LRM remembers about one local job (for statistics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalJobRecord {
    /// The job's id.
    pub id: LocalJobId,
    /// Processors used.
    pub procs: u32,
    /// Actual runtime (after clamping).
    pub runtime_ms: Millis,
    /// Runtime estimate (after clamping, ≥ runtime).
    pub estimate_ms: Millis,
    /// Injected dummy job.
    pub injected: bool,
    /// Submission time.
    pub submit_ms: Millis,
    /// Start time, once started.
    pub start_ms: Option<Millis>,
    /// Finish or kill time, once finished or killed.
    pub end_ms: Option<Millis>,
    /// Current state.
    pub state: LocalJobState,
}

impl LocalJobRecord {
    /// Time spent in the queue (`start - submit`), once started.
    pub fn wait_ms(&self) -> Option<Millis> {
        self.start_ms.map(|s| s - self.submit_ms)
    }

    /// Processor-milliseconds used by this job up to `now` (0 if never started).
    pub fn proc_ms_until(&self, now: Millis) -> u64 {
        match self.start_ms {
            None => 0,
            Some(s) => {
                let e = self.end_ms.unwrap_or(now).min(now.max(s));
                u64::from(self.procs) * e.saturating_sub(s)
            }
        }
    }
}

/// A grid claim currently held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// Processors held.
    pub procs: u32,
    /// When the claim was made.
    pub since: Millis,
    /// The end of the reservation it was made from, if any (else it may hold forever).
    pub reservation_end: Option<Millis>,
}

/// A granted, not yet claimed advance reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// Its id.
    pub id: ReservationId,
    /// Processors reserved.
    pub procs: u32,
    /// Window start (inclusive).
    pub start: Millis,
    /// Window end (exclusive).
    pub end: Millis,
}

/// Something that happened inside the LRM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LrmEvent {
    /// A queued local job started (its record holds the time).
    LocalJobStarted { id: LocalJobId },
    /// A running local job completed (not emitted for kills).
    LocalJobFinished { id: LocalJobId },
    /// A reservation reached its end without being claimed and was removed.
    ReservationExpired { key: GridKey },
}

/// [`LocalRm::submit_local`](super::LocalRm::submit_local) refused a job that can never run here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("local job needs {procs} processors, site has {capacity} (0 is invalid)")]
pub struct SubmitRejected {
    /// Processors the job asked for.
    pub procs: u32,
    /// The site's processor count.
    pub capacity: u32,
}

/// Why [`LocalRm::claim`](super::LocalRm::claim) or [`LocalRm::claim_reservation`](super::LocalRm::claim_reservation) failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClaimRejected {
    /// Fewer processors available than requested (`available` = [`LocalRm::claimable`](super::LocalRm::claimable) for a
    /// plain claim, idle processors for a reservation claim).
    #[error("claim of {requested} processors rejected: only {available} available")]
    NotEnoughIdle { requested: u32, available: u32 },
    /// The key already holds a claim or a reservation.
    #[error("key already holds a claim or reservation")]
    DuplicateKey,
    /// `claim_reservation` for a key without a reservation.
    #[error("no reservation for this key")]
    NoReservation,
    /// `claim_reservation` before the reservation's start.
    #[error("reservation starts at {start}")]
    TooEarly { start: Millis },
    /// `claim_reservation` at or after the reservation's end (it has expired).
    #[error("reservation ended at {end}")]
    Expired { end: Millis },
}

/// [`LocalRm::reserve`](super::LocalRm::reserve) refused a reservation.
///
/// `earliest_possible` is the earliest start ≥ max(requested start, now) at which the same
/// reservation would be granted now, or `None` if the site does not support reservations, the
/// key is already in use, or no start is possible (more processors than the site has, or claims
/// that may hold forever leave too few).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("reservation rejected (earliest possible start: {earliest_possible:?})")]
pub struct ReservationRejected {
    pub earliest_possible: Option<Millis>,
}
