//! Why the core refuses a submission.

use thiserror::Error;

use crate::model::SiteId;

/// A submission the core refuses, naming what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SubmitError {
    #[error("job '{job}': no components requested")]
    NoComponents { job: String },
    #[error("job '{job}': component {component} requests 0 processors")]
    ZeroProcessors { job: String, component: usize },
    #[error("job '{job}': component {component} requests {processors} processors, more than any site has (largest: {largest})")]
    ComponentTooLarge {
        job: String,
        component: usize,
        processors: u32,
        largest: u32,
    },
    #[error("job '{job}': component {component} is fixed to {site}, which does not exist")]
    UnknownSite { job: String, component: usize, site: SiteId },
    #[error("job '{job}': component {component} requests {processors} processors, more than its fixed site '{site}' has ({capacity})")]
    FixedSiteTooSmall {
        job: String,
        component: usize,
        site: String,
        processors: u32,
        capacity: u32,
    },
    #[error("job '{job}': requests {processors} processors in all, more than the grid has ({capacity})")]
    JobTooLarge { job: String, processors: u64, capacity: u64 },
    #[error("job '{job}': components fixed to site '{site}' request {processors} processors together, more than it has ({capacity})")]
    FixedSiteOverbooked {
        job: String,
        site: String,
        processors: u64,
        capacity: u32,
    },
    #[error("job '{job}': {placements} placements given for {components} components")]
    PlacementMismatch { job: String, placements: usize, components: usize },
    #[error("job '{job}': input file '{file}' is not in the replica catalogue")]
    UnknownFile { job: String, file: String },
    #[error("job '{job}': input file '{file}' has no replica")]
    NoReplica { job: String, file: String },
    #[error("job '{job}': flexible request invalid: {reason}")]
    InvalidFlexible { job: String, reason: String },
    #[error("job '{job}': min_components {min} is not in 1..={components}")]
    InvalidMinComponents { job: String, min: u32, components: usize },
    #[error("job '{job}': preferences: {reason}")]
    InvalidPreferences {
        job: String,
        reason: crate::broker::PreferencesError,
    },
    #[error("job '{job}': {reason}")]
    Invalid { job: String, reason: String },
}
