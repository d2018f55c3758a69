//! The interface to a site's local resource manager (LRM).
//!
//! Shaped after Slurm (sbatch / squeue / scontrol / scancel): jobs are identified by opaque
//! strings, status is asked for a batch of ids at once, states follow Slurm's names. The
//! daemon holds one backend per site (`Arc<dyn Backend>`, kinds may be mixed) and calls these
//! methods only from its blocking pool, never under its state lock, so an implementation may
//! block (a Slurm one shells out to `sbatch`/`squeue`/`scontrol`).
//!
//! Recovery after a daemon restart goes through the trait as well: [`Backend::adopt`] re-attaches
//! to a component, [`Backend::barrier_state`] tells where a launch stands at the start barrier
//! and [`Backend::abort_held`] makes a held component give up. Every implementation answers
//! these from the component's supervisor records (see `supervise.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::{SiteConfig, SiteKind};
use crate::local::LocalBackend;
use crate::slurm::{SlurmBackend, SlurmOptions, SlurmSiteSpec};
use crate::supervisor_cmd::{JobSandbox, SupervisorCommand};

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
    /// Killed at its wall-time limit (Slurm's TIMEOUT): the job ends as `timeout`.
    Timeout {
        reason: String,
    },
    /// Killed over its memory limit (Slurm's OUT_OF_MEMORY): the job ends as `out_of_memory`.
    OutOfMemory {
        reason: String,
    },
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
    /// Wall-time limit of the component (its supervisor kills it there; Slurm `--time` gets a
    /// margin above it); 0: none.
    pub time_limit_ms: u64,
    /// Memory limit of the whole component in bytes (its control group; Slurm `--mem`).
    pub memory_limit: Option<u64>,
    /// Directory the program starts in, relative to its working directory.
    pub working_directory: Option<String>,
    /// The launch's nonce (random, stored with the launch before the submission): the
    /// supervisor writes it into its records and the backend believes only records with it
    /// (see [`crate::supervise`]).
    pub nonce: String,
    /// A signal to send before the wall-time limit (the job's `signal`, sbatch `--signal`);
    /// only with a limit.
    pub early_signal: Option<koalesce_api::timing::EarlySignal>,
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

/// Where a launched component stands at the start barrier (for recovery).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierState {
    /// No supervisor took the component's directory (it is fenced, now or earlier): the
    /// component can never start there.
    Fenced,
    /// A supervisor took it and has not been let through: it never ran the program. `alive`:
    /// it still waits (else it died or gave up).
    Held { alive: bool },
    /// It was let through (or the program was spawned): the component may have run.
    Released,
}

/// An advance reservation (Slurm `scontrol create reservation`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservationRequest {
    pub site: String,
    pub processors: u32,
    pub start_ms: u64,
    pub duration_ms: u64,
}

/// A reservation asked for any start in `[earliest_ms, latest_ms]` (001 §2.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowRequest {
    pub site: String,
    pub processors: u32,
    pub duration_ms: u64,
    pub earliest_ms: u64,
    pub latest_ms: u64,
    /// The site may move the reservation inside `[earliest_ms, latest_ms]` later (001 §2.3);
    /// only a site that [`Reservations::moves_flexible`] takes it.
    pub flexible: bool,
}

/// A flexible reservation a site moved (001 §2.3), as [`Reservations::take_moves`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservationMove {
    /// The site's id of the reservation.
    pub id: String,
    pub start_ms: u64,
    /// Exclusive end.
    pub end_ms: u64,
}

/// The replies of 001 §2.3 to a [`WindowRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowAnswer {
    /// `<granted>`: reservation `id` starts at `start_ms`.
    Granted { id: String, start_ms: u64 },
    /// `<rejected>` (`t_next_ms: None`) or `<rejected, T_next>`: the same request starting at
    /// `t_next_ms` would be granted now.
    Rejected { t_next_ms: Option<u64>, reason: String },
}

/// Optional capability: advance reservations (003 §4.2.2 "claiming with reservations").
pub trait Reservations: Send + Sync {
    /// 001 §2.3: a reservation starting anywhere in the window, at the earliest start the site
    /// can grant. The default asks [`Reservations::reserve`] for the window's first instant
    /// and knows no `T_next` (an LRM that can say more overrides it).
    fn reserve_window(&self, req: &WindowRequest) -> Result<WindowAnswer, BackendError> {
        let at = ReservationRequest {
            site: req.site.clone(),
            processors: req.processors,
            start_ms: req.earliest_ms,
            duration_ms: req.duration_ms,
        };
        match self.reserve(&at) {
            Ok(id) => Ok(WindowAnswer::Granted {
                id,
                start_ms: req.earliest_ms,
            }),
            Err(e @ BackendError::Busy { .. }) => Ok(WindowAnswer::Rejected {
                t_next_ms: None,
                reason: e.to_string(),
            }),
            Err(e) => Err(e),
        }
    }
    /// Asks for `req`; the returned id names the granted reservation. Refused with
    /// [`BackendError::Busy`] when the processors are not free during the whole window.
    fn reserve(&self, req: &ReservationRequest) -> Result<String, BackendError>;
    /// Claims the processors of a granted reservation (at or after its start); the returned
    /// claim id is used like one of [`Backend::claim`] (passed to `submit`, given back with
    /// [`Backend::release`]). Slurm: a held job with `--reservation`.
    fn claim_reserved(&self, reservation: &str) -> Result<String, BackendError>;
    /// Gives a reservation back (unused, or no longer needed).
    fn cancel_reservation(&self, id: &str) -> Result<(), BackendError>;
    /// Many [`Reservations::reserve`]s at once (the reservations of one batch of the LRM
    /// worker at this site), answered in order. Default: one after the other.
    fn reserve_many(&self, reqs: &[ReservationRequest]) -> Vec<Result<String, BackendError>> {
        reqs.iter().map(|r| self.reserve(r)).collect()
    }
    /// Whether the site takes flexible reservations and moves them inside their windows
    /// (001 §2.3). A site that does not (Slurm: its reservations are not moved by koalesce)
    /// gets no flexible request: the API refuses it.
    fn moves_flexible(&self) -> bool {
        false
    }
    /// The flexible reservations the site moved since the last call (their new times). Called
    /// on the async threads: it must not block (report what was noted, call no LRM).
    fn take_moves(&self) -> Vec<ReservationMove> {
        Vec::new()
    }
    /// After a restart: re-creates a reservation granted earlier at `start_ms` (where it was,
    /// or was moved to), keeping its window and flexibility where the site can. Default: the
    /// same request for exactly that start.
    fn rebook(&self, req: &WindowRequest, start_ms: u64) -> Result<WindowAnswer, BackendError> {
        self.reserve_window(&WindowRequest {
            earliest_ms: start_ms,
            latest_ms: start_ms,
            flexible: false,
            ..req.clone()
        })
    }
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
    /// The slow half of [`Backend::start`], done for every site of a launch before any site
    /// starts: whatever takes time (writing and syncing release records) is done here, so that
    /// the `start` calls of all sites, made right after, let the programs run within
    /// milliseconds of each other. Default: nothing.
    fn prepare_start(&self, _ids: &[String]) -> Result<(), BackendError> {
        Ok(())
    }
    /// Lets held components run (Slurm: `scontrol release`). The daemon calls it for all the
    /// components of a launch at once, once every one of them is ready. Fails, starting none,
    /// when one of them is not ready.
    fn start(&self, ids: &[String]) -> Result<(), BackendError>;
    /// States of many components at once (Slurm: one `squeue`/`sacct` call for the id list).
    fn status(&self, ids: &[String]) -> Vec<(String, LrmState)>;
    /// Kills a component (Slurm: `scancel`).
    fn cancel(&self, id: &str) -> Result<(), BackendError>;
    /// After a daemon restart: re-attaches to a component submitted by a previous instance,
    /// holding its processors again; returns the claim id to release when it ends. `nonce`
    /// is the launch's (as stored with it): the component's records must carry it.
    fn adopt(&self, id: &str, site: &str, processors: u32, nonce: &str) -> Result<String, BackendError>;
    /// After a daemon restart: where the launch of component `id` stands at the start barrier.
    /// A component no supervisor has taken is fenced first, so the answer cannot change under
    /// the caller by a late supervisor (a `Held` one only becomes `Released` by
    /// [`Backend::start`], or gives up by [`Backend::abort_held`]).
    /// `nonce` is the launch's: records of another launch are not believed.
    fn barrier_state(&self, id: &str, nonce: &str) -> Result<BarrierState, BackendError>;
    /// After a daemon restart: makes a component held at the start barrier give up without
    /// running its program. Only for a launch that was never released.
    fn abort_held(&self, id: &str) -> Result<(), BackendError>;
    /// Advance reservations, when the LRM supports them.
    fn reservations(&self) -> Option<&dyn Reservations> {
        None
    }
    /// 001 §3.1's queue-wait estimate from the LRM's own state at `now`, when the LRM has one
    /// (Slurm: running jobs to their end, reservations, pending jobs at `squeue --start`'s
    /// expected starts). Default: none (the core estimates a local site from its own jobs).
    /// The daemon asks at most every [`QUEUE_ESTIMATE_INTERVAL_MS`].
    fn queue_estimate(&self, _site: &str, _now: u64) -> Option<Result<koalesce_core::broker::QueueEstimate, BackendError>> {
        None
    }
    /// How long a launch waits for this backend's components to be [`Backend::ready`] (003's
    /// claim: the LRM gave the processors and the supervisor checked in). Past it the claim
    /// has failed: the launch is cancelled and the job goes back to placement.
    fn claim_timeout(&self) -> std::time::Duration {
        DEFAULT_CLAIM_TIMEOUT
    }
}

/// How often the daemon asks a backend for its [`Backend::queue_estimate`].
pub const QUEUE_ESTIMATE_INTERVAL_MS: u64 = 5_000;

/// [`Backend::claim_timeout`] unless a backend says otherwise (the local executor's
/// supervisors check in within milliseconds; this bounds a machine under heavy load).
pub const DEFAULT_CLAIM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// What every backend of a server shares: how supervisors are started and confined, and
/// where a backend may keep files of its own.
#[derive(Debug, Clone)]
pub struct BuildContext {
    pub supervisor: SupervisorCommand,
    pub sandbox: JobSandbox,
    /// The server's data directory (a Slurm site keeps its client configuration under
    /// `sites/<site>/slurm/`).
    pub data_dir: PathBuf,
}

/// Builds the backend of one site from its configuration: the one place that names the
/// backend types (adding a kind of LRM is one match arm). A Slurm site's cluster is not asked
/// anything yet (a server starts while a cluster is down).
pub fn build(site: &SiteConfig, ctx: &BuildContext) -> Result<Arc<dyn Backend>, BackendError> {
    let fault = |reason: String| BackendError::Site {
        site: site.name.clone(),
        reason,
    };
    match (site.kind, &site.slurm) {
        (SiteKind::Local, _) => Ok(Arc::new(
            LocalBackend::new(&site.name, site.processors, site.reservations, ctx.supervisor.clone()).with_sandbox(ctx.sandbox.clone()),
        )),
        (SiteKind::Slurm, Some(slurm)) => {
            let spec = SlurmSiteSpec {
                name: site.name.clone(),
                processors: site.processors,
                slurm: slurm.clone(),
            };
            let scratch = slurm_scratch(&ctx.data_dir, &site.name);
            std::fs::create_dir_all(&scratch).map_err(|e| fault(format!("cannot create {}: {e}", scratch.display())))?;
            let b = SlurmBackend::new(vec![spec], &scratch, ctx.supervisor.clone(), SlurmOptions::default())
                .map_err(|e| fault(format!("{e:#}")))?
                .with_sandbox(ctx.sandbox.clone())
                .with_reservations(site.reservations);
            Ok(Arc::new(b))
        }
        (SiteKind::Slurm, None) => Err(fault("kind = \"slurm\" needs a [sites.slurm] table".into())),
    }
}

/// Where a Slurm site's backend keeps its client configuration.
pub fn slurm_scratch(data_dir: &Path, site: &str) -> PathBuf {
    data_dir.join("sites").join(site).join("slurm")
}
