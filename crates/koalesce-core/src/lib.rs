//! # koalesce-core
//!
//! The scheduling core of koalesce, shared by the daemon (real time, real clusters) and the
//! simulator (virtual time, simulated clusters). It performs no I/O and reads no clock: time
//! comes in as integer milliseconds, decisions go out as [`Action`] values.
//!
//! - [`model`]: sites, network forecast, replica catalogue, jobs and components, timeline.
//! - [`state`]: the job and component state machines.
//! - [`bag`]: what a bag's tasks' states make of the bag (`submit --tasks N`).
//! - [`config`]: every parameter, with the seeds' values as defaults.
//! - [`expr`]: GridWay's REQUIREMENTS / RANK expressions with 004's data functions, compiled
//!   once per job and evaluated per site.
//! - [`gridway`]: GridWay's matching (REQUIREMENTS/RANK in the scan), resource priority (004
//!   Eq. 1), banning, job priority policies and the replica-catalogue cache.
//! - [`queues`]: the four priority placement queues and their weighted round-robin.
//! - [`placement`]: WF, CF (with history table H), CM and FCM behind [`PlacementPolicy`].
//! - [`scheduler`]: placement scans, claiming (ICP, reservations), preemption, soft errors.
//! - [`federation`]: peer-to-peer grid scheduling with job and data migration (seed 002): the
//!   local scheduler's AWT, ATT, sender-/receiver-/symmetrically-initiated decisions.
//! - [`broker`]: the broker of 001: TTS/TTD ranking, reservation tables, co-allocation by
//!   reservations (Algorithms 1 and 2).
//! - [`nws`]: bandwidth forecasting as the Network Weather Service does, and the probe policy.

pub mod bag;
pub mod broker;
pub mod config;
pub mod expr;
pub mod federation;
pub mod gridway;
pub mod model;
pub mod nws;
pub mod placement;
pub mod queues;
pub mod scheduler;
pub mod state;

pub use config::SchedulerConfig;
pub use model::{JobId, JobSpec, Millis, Priority, SiteId};
pub use placement::PlacementPolicy;
pub use scheduler::{Action, ComponentOutcome, Scheduler, SubmitError, TransferKey};
pub use state::JobState;
