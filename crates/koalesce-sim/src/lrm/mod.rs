//! The simulated local resource manager (LRM) of one site.
//!
//! A site has `P` processor slots shared by three kinds of users:
//!
//! 1. **Local jobs** (background load from a trace or a generator) are submitted to the LRM's
//!    FCFS queue and started by the LRM's own policy, [`LocalPolicy::Fcfs`] or
//!    [`LocalPolicy::EasyBackfill`] (Mu'alem & Feitelson 2001). A local job always runs exactly
//!    its `runtime_ms`; its `estimate_ms` (≥ runtime) is what the scheduler plans with.
//! 2. **Grid claims** ([`LocalRm::claim`]) take processors *immediately* (no queueing) and hold
//!    them until [`LocalRm::release`]. A grid job component holds its claim both while it waits
//!    at its start barrier and while it runs. Claims are identified by an opaque [`GridKey`].
//! 3. **Advance reservations** ([`LocalRm::reserve`], only if the site supports them) set
//!    processors aside for a window `[start, end)`; [`LocalRm::claim_reservation`] turns a started
//!    reservation into a grid claim; unclaimed reservations expire at their end.
//!
//! # The availability profile
//!
//! Everything that commits processors is described by a step function of time, the *profile*,
//! built from the current time `now`:
//! * a running local job holds its processors until its **estimated** end `start + estimate`;
//! * a grid claim holds its processors forever, except a claim made from a reservation, which
//!   holds them until the reservation's end (once that end has passed while the claim is still
//!   held, the claim is again treated as holding forever);
//! * an unclaimed reservation holds its processors during `[start, end)`.
//!
//! The LRM maintains the invariant *profile ≤ P at every instant ≥ now*, which is what makes a
//! granted reservation claimable at its start:
//! * a local job starts only if the profile leaves room for it during its whole estimated run
//!   (so local jobs never run into a reservation window on processors the reservation needs;
//!   reservations are treated exactly like EASY's head reservation);
//! * a reservation is granted only if the profile leaves room for it during its whole window;
//! * a plain claim (which may hold forever) is granted only if the profile leaves room from now
//!   on, i.e. `procs ≤` [`LocalRm::claimable`]. Without reservations this is exactly the number
//!   of idle processors.
//!
//! The invariant can only break if a grid claim made from a reservation is held past the
//! reservation's end (a grid job overrunning its reservation); a later reservation may then find
//! its processors taken and `claim_reservation` is rejected. Local jobs never overrun, because a
//! job's estimate is raised to its runtime on submission.
//!
//! # Scheduling passes
//!
//! After every change that can allow a local job to start (job end, kill, release, claim,
//! reservation grant/cancel/expiry, submission) the LRM runs a scheduling pass at that instant:
//! start queue heads while they fit (FCFS); with EASY the blocked head then gets a reservation at
//! its shadow time (its earliest start in the profile) and every later queued job, in queue
//! order, starts if it fits in the profile now (it fits now and either ends by the shadow time or
//! uses no more than the extra processors). If the head can never start while the current claims
//! are held (claims that may hold forever leave too few processors), it gets no reservation and
//! later jobs backfill freely. A submission only evaluates the new job (the rest of
//! the queue was already evaluated against the same state). The queue scan stops as soon as
//! fewer processors are free than the smallest queued job needs.
//!
//! # Time and events
//!
//! Time is integer milliseconds and must never go backwards across calls. Every operation that
//! takes `now` first processes everything due at or before `now` (local job ends and reservation
//! expiries, each at its own instant followed by a scheduling pass). Events ([`LrmEvent`]) from any
//! operation are buffered and handed out by [`LocalRm::advance`] or [`LocalRm::take_events`].
//! The LRM is fully deterministic: ordered collections only, no clock, no randomness.
//!
//! # Modules
//!
//! `types` (ids, configuration, records, events, rejections), `profile` (the availability
//! profile), `time` (processing what is due, accounting), `local` (local jobs and the FCFS / EASY
//! pass), `grid` (claims and advance reservations), `read` (read-only state), `invariants`
//! (consistency checks). This file holds [`LocalRm`] itself.

mod grid;
mod invariants;
mod local;
mod profile;
#[cfg(test)]
mod proptests;
mod read;
#[cfg(test)]
mod tests;
mod time;
mod types;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

pub use invariants::InvariantViolation;
pub use types::*;

/// A queued job's shape, kept inline in the queue for a cache-friendly scan.
#[derive(Clone, Copy, Debug)]
struct Queued {
    id: LocalJobId,
    procs: u32,
    estimate_ms: Millis,
}

/// The simulated local resource manager of one site. See the module docs.
#[derive(Clone, Debug)]
pub struct LocalRm {
    cfg: LrmConfig,
    /// Time of the last operation (time never goes backwards).
    now: Millis,
    /// All local jobs ever submitted, indexed by id.
    jobs: Vec<LocalJobRecord>,
    /// Queued jobs in FCFS order.
    queue: VecDeque<Queued>,
    /// Multiset of the processor counts of queued jobs (for the "nothing can start" test).
    queued_procs: BTreeMap<u32, usize>,
    /// Running jobs by actual end.
    running: BTreeSet<(Millis, LocalJobId)>,
    claims: BTreeMap<GridKey, Claim>,
    reservations: BTreeMap<GridKey, Reservation>,
    next_reservation_id: u64,
    busy_local: u32,
    busy_injected: u32,
    busy_grid: u32,
    /// Processor-milliseconds integrated up to `now`.
    acc_local: u64,
    acc_injected: u64,
    acc_grid: u64,
    events: Vec<LrmEvent>,
}

impl LocalRm {
    /// Creates an empty LRM at time 0.
    pub fn new(cfg: LrmConfig) -> Self {
        LocalRm {
            cfg,
            now: 0,
            jobs: Vec::new(),
            queue: VecDeque::new(),
            queued_procs: BTreeMap::new(),
            running: BTreeSet::new(),
            claims: BTreeMap::new(),
            reservations: BTreeMap::new(),
            next_reservation_id: 0,
            busy_local: 0,
            busy_injected: 0,
            busy_grid: 0,
            acc_local: 0,
            acc_injected: 0,
            acc_grid: 0,
            events: Vec::new(),
        }
    }
}
