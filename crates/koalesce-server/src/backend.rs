//! The interface to a site's local resource manager (LRM).
//!
//! Shaped after Slurm (sbatch / squeue / scontrol / scancel): jobs are identified by opaque
//! strings, status is asked for a batch of ids at once, states follow Slurm's names. The
//! daemon calls these methods from its driver; they must be quick (a Slurm implementation
//! would shell out in a blocking thread and cache).

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Processors of a site as the LRM reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcessorCount {
    pub total: u32,
    pub idle: u32,
    pub used: u32,
}

/// State of a component in the LRM (Slurm's JOB_STATE names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LrmState {
    Pending,
    Running,
    Completed,
    /// Ended with a non-zero exit code (or could not start the program: an application error).
    Failed {
        exit_code: Option<i32>,
        reason: String,
    },
    Cancelled,
    /// The site failed under the component (node failure, lost supervisor, launch fenced):
    /// a soft error in 003's terms.
    NodeFail {
        reason: String,
    },
    /// The LRM does not know the id.
    Unknown,
}

impl LrmState {
    pub fn is_terminal(&self) -> bool {
        !matches!(self, LrmState::Pending | LrmState::Running)
    }
}

/// One component handed to the LRM.
#[derive(Debug, Clone, PartialEq)]
pub struct ComponentSubmission {
    pub site: String,
    /// The koalesce user the job belongs to (the LRM runs it as that user's account).
    pub user: String,
    pub processors: u32,
    /// The claim (processor hold) this component runs in.
    pub claim: String,
    /// The component's record directory (stdout/stderr, the supervisor's records); the program
    /// runs in its `work/` subdirectory (see [`crate::supervise`]).
    pub dir: PathBuf,
    pub executable: String,
    pub arguments: Vec<String>,
    pub environment: BTreeMap<String, String>,
    /// Wall-time limit for the LRM (Slurm `--time`).
    pub time_limit_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// Not enough idle processors (claim refused; not a fault of the site).
    #[error("site '{site}': {wanted} processors requested, {idle} idle")]
    Busy { site: String, wanted: u32, idle: u32 },
    #[error("unknown site '{0}'")]
    UnknownSite(String),
    /// A fault of the site (a soft error).
    #[error("site '{site}': {reason}")]
    Site { site: String, reason: String },
    /// This machine ran out of something (file descriptors, processes, memory) for a moment:
    /// not a fault of the site nor of the job; the job is retried later and nobody is blamed.
    #[error("site '{site}': local resources exhausted: {reason}")]
    Exhausted { site: String, reason: String },
}

/// An advance reservation (Slurm `scontrol create reservation`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservationRequest {
    pub site: String,
    pub processors: u32,
    pub start_ms: u64,
    pub duration_ms: u64,
}

/// Optional capability: advance reservations.
pub trait Reservations: Send + Sync {
    fn reserve(&self, req: &ReservationRequest) -> Result<String, BackendError>;
    fn cancel_reservation(&self, id: &str) -> Result<(), BackendError>;
}

/// A local resource manager driving one or more sites.
pub trait Backend: Send + Sync + 'static {
    /// "local", "slurm", ...
    fn kind(&self) -> &'static str;
    fn sites(&self) -> Vec<String>;
    /// Processors total / idle / used at a site (Slurm: `sinfo`/`scontrol show partition`).
    fn processors(&self, site: &str) -> Result<ProcessorCount, BackendError>;
    /// Claims `processors` now (003 §4.2.2); the returned id is passed to `submit` and
    /// `release`. Slurm: an allocation (`salloc --no-shell`) or a held job.
    fn claim(&self, site: &str, processors: u32) -> Result<String, BackendError>;
    /// Gives back a claim (after the component ended, or when aborting before launch).
    fn release(&self, claim: &str);
    /// Submits a component inside its claim, *held*: it does not run before [`Backend::start`]
    /// (the start barrier); returns its LRM job id (Slurm: `sbatch --hold`).
    fn submit(&self, sub: &ComponentSubmission) -> Result<String, BackendError>;
    /// Whether each submitted component is in place and held, ready to be started (Slurm: the
    /// held job exists). A component that is not ready yet may still become ready; one that
    /// never will shows up as terminal in [`Backend::status`].
    fn ready(&self, ids: &[String]) -> Vec<(String, bool)>;
    /// Lets held components run (Slurm: `scontrol release`). The daemon calls it for all the
    /// components of a launch at once, once every one of them is ready. Fails, starting none,
    /// when one of them is not ready.
    fn start(&self, ids: &[String]) -> Result<(), BackendError>;
    /// States of many components at once (Slurm: one `squeue`/`sacct` call for the id list).
    fn status(&self, ids: &[String]) -> Vec<(String, LrmState)>;
    /// Kills a component (Slurm: `scancel`).
    fn cancel(&self, id: &str) -> Result<(), BackendError>;
    /// After a daemon restart: re-attaches to a component submitted by a previous instance,
    /// holding its processors again; returns the claim id to release when it ends.
    fn adopt(&self, id: &str, site: &str, processors: u32) -> Result<String, BackendError>;
    /// Advance reservations, when the LRM supports them.
    fn reservations(&self) -> Option<&dyn Reservations> {
        None
    }
}
