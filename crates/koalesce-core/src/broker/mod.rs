//! The broker of 001 (Elmroth & Tordsson): ranking by predicted Total Time to Start / Delivery,
//! advance reservations as a service, and co-allocation by reservations.
//!
//! Pure decision code, shared by the simulator and the daemon like every policy of the core:
//! - [`profile`]: processors committed over time (a step function).
//! - [`reservations`]: one site's reservation table (001 §2.3): granted / rejected / rejected
//!   with `T_next`; modify = release + create; flexible reservations.
//! - [`rank`]: TTS and TTD (001 §3.1), benchmark-based runtime prediction, queue-wait estimates.
//! - [`coalloc`]: Algorithms 1 and 2 of 001 §3.2 over any [`coalloc::ReservationService`].
//!
//! The scheduler uses them for jobs with `policy = "ttd"` / `"tts"` and for jobs co-allocated
//! by reservations (`coallocation = "reservations"`), see `scheduler/broker.rs`.

pub mod coalloc;
pub mod profile;
pub mod rank;
pub mod reservations;

pub use coalloc::{
    coallocate, Augmentation, CoallocationOutcome, CoallocationRequest, CoallocationStats, ComponentRequest, ReservationService,
    TableService,
};
pub use profile::{Profile, FOREVER};
pub use rank::{Prediction, QueueEstimate, QueueOrder};
pub use reservations::{
    plan_window, Relocation, Reservation, ReservationId, ReservationReply, ReservationRequest, ReservationTable, WindowPlan,
};

use crate::model::JobPreferences;

/// Why a job's preferences are refused; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PreferencesError {
    #[error("benchmarks[{index}].name must not be empty")]
    EmptyBenchmarkName { index: usize },
    #[error("benchmarks[{index}].reference_score must be a positive number")]
    BadReferenceScore { index: usize },
    #[error("benchmarks[{index}].reference_time_ms must be positive")]
    ZeroReferenceTime { index: usize },
    #[error("latest_start_ms {latest_ms} is before earliest_start_ms {earliest_ms}")]
    LatestBeforeEarliest { earliest_ms: u64, latest_ms: u64 },
}

/// Checks a job's preferences; the error names the field.
pub fn validate_preferences(p: &JobPreferences) -> Result<(), PreferencesError> {
    for (index, b) in p.benchmarks.iter().enumerate() {
        if b.name.trim().is_empty() {
            return Err(PreferencesError::EmptyBenchmarkName { index });
        }
        if !(b.reference_score.is_finite() && b.reference_score > 0.0) {
            return Err(PreferencesError::BadReferenceScore { index });
        }
        if b.reference_time_ms == 0 {
            return Err(PreferencesError::ZeroReferenceTime { index });
        }
    }
    if let (Some(earliest_ms), Some(latest_ms)) = (p.earliest_start_ms, p.latest_start_ms) {
        if latest_ms < earliest_ms {
            return Err(PreferencesError::LatestBeforeEarliest { earliest_ms, latest_ms });
        }
    }
    Ok(())
}
