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

use std::collections::{BTreeMap, BTreeSet, VecDeque};

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
    /// Whether [`LocalRm::reserve`] can grant advance reservations.
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
    /// Killed (while queued or running) by [`LocalRm::kill_local`].
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

/// [`LocalRm::submit_local`] refused a job that can never run here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("local job needs {procs} processors, site has {capacity} (0 is invalid)")]
pub struct SubmitRejected {
    /// Processors the job asked for.
    pub procs: u32,
    /// The site's processor count.
    pub capacity: u32,
}

/// Why [`LocalRm::claim`] or [`LocalRm::claim_reservation`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClaimRejected {
    /// Fewer processors available than requested (`available` = [`LocalRm::claimable`] for a
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

/// [`LocalRm::reserve`] refused a reservation.
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

/// Step function of committed processors from an origin time onwards.
///
/// `steps[i] = (t_i, used_i)`: `used_i` processors are committed during `[t_i, t_{i+1})`; the last
/// step extends forever. `steps[0].0` is the origin; times strictly increase.
#[derive(Clone, Debug)]
struct Profile {
    cap: u64,
    steps: Vec<(Millis, u64)>,
}

impl Profile {
    /// Builds the profile from `(start, end, procs)` intervals, clipped to `[origin, ∞)`.
    fn build(cap: u32, origin: Millis, items: impl IntoIterator<Item = (Millis, Millis, u32)>) -> Self {
        let mut base: i64 = 0;
        let mut deltas: Vec<(Millis, i64)> = Vec::new();
        for (start, end, procs) in items {
            let s = start.max(origin);
            if end <= s || procs == 0 {
                continue;
            }
            if s == origin {
                base += i64::from(procs);
            } else {
                deltas.push((s, i64::from(procs)));
            }
            if end != NEVER {
                deltas.push((end, -i64::from(procs)));
            }
        }
        deltas.sort_unstable();
        let mut steps = Vec::with_capacity(deltas.len() + 1);
        steps.push((origin, base as u64));
        let mut cur = base;
        for (t, d) in deltas {
            cur += d;
            debug_assert!(cur >= 0);
            let last = steps.last_mut().expect("non-empty");
            if last.0 == t {
                last.1 = cur as u64;
            } else {
                steps.push((t, cur as u64));
            }
        }
        Profile {
            cap: u64::from(cap),
            steps,
        }
    }

    /// Index of the step containing `t` (`t` ≥ origin).
    fn index_at(&self, t: Millis) -> usize {
        self.steps.partition_point(|s| s.0 <= t).max(1) - 1
    }

    /// Committed processors at `t`.
    fn used_at(&self, t: Millis) -> u64 {
        self.steps[self.index_at(t)].1
    }

    /// Free processors at `t`.
    fn free_at(&self, t: Millis) -> u64 {
        self.cap.saturating_sub(self.used_at(t))
    }

    /// Maximum committed processors over `[from, to)` (0 for an empty window).
    fn max_used(&self, from: Millis, to: Millis) -> u64 {
        if to <= from {
            return 0;
        }
        let mut m = 0;
        for &(t, used) in &self.steps[self.index_at(from)..] {
            if t >= to {
                break;
            }
            m = m.max(used);
        }
        m
    }

    /// Whether `procs` more processors fit during `[from, to)`.
    fn fits(&self, from: Millis, to: Millis, procs: u32) -> bool {
        self.max_used(from, to) + u64::from(procs) <= self.cap
    }

    /// Makes `t` a step boundary and returns the index of the step starting at `t`.
    fn split(&mut self, t: Millis) -> usize {
        let i = self.index_at(t);
        if self.steps[i].0 == t {
            i
        } else {
            let used = self.steps[i].1;
            self.steps.insert(i + 1, (t, used));
            i + 1
        }
    }

    /// Commits `procs` processors during `[from, to)` (`to == NEVER`: forever).
    fn add(&mut self, from: Millis, to: Millis, procs: u32) {
        if to <= from || procs == 0 {
            return;
        }
        let i = self.split(from);
        let j = if to == NEVER { self.steps.len() } else { self.split(to) };
        for s in &mut self.steps[i..j] {
            s.1 += u64::from(procs);
        }
    }

    /// Earliest `t ≥ from` such that `procs` fit during `[t, t + dur)` (`dur` at least 1 ms).
    fn earliest_fit(&self, from: Millis, dur: Millis, procs: u32) -> Option<Millis> {
        if u64::from(procs) > self.cap {
            return None;
        }
        let dur = dur.max(1);
        let mut cand = from;
        for i in self.index_at(from)..self.steps.len() {
            let used = self.steps[i].1;
            let end = self.steps.get(i + 1).map_or(NEVER, |s| s.0);
            if end <= cand {
                continue;
            }
            if used + u64::from(procs) > self.cap {
                if end == NEVER {
                    return None;
                }
                cand = end;
            } else if end == NEVER || end >= cand.saturating_add(dur) {
                return Some(cand);
            }
        }
        None
    }
}

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

    // ----------------------------------------------------------------------------------------
    // Read-only state
    // ----------------------------------------------------------------------------------------

    /// The configuration.
    pub fn config(&self) -> &LrmConfig {
        &self.cfg
    }

    /// Number of processors `P`.
    pub fn capacity(&self) -> u32 {
        self.cfg.procs
    }

    /// Time of the last operation seen by this LRM.
    pub fn now(&self) -> Millis {
        self.now
    }

    /// Processors used neither by local jobs nor by grid claims (reserved ones count as idle).
    pub fn idle(&self) -> u32 {
        self.cfg.procs - self.busy_local - self.busy_grid
    }

    /// Processors used by running local jobs (injected ones included).
    pub fn busy_local(&self) -> u32 {
        self.busy_local
    }

    /// Processors used by running injected (dummy) local jobs.
    pub fn busy_injected(&self) -> u32 {
        self.busy_injected
    }

    /// Processors held by grid claims.
    pub fn busy_grid(&self) -> u32 {
        self.busy_grid
    }

    /// Number of local jobs waiting in the queue.
    pub fn queued_local(&self) -> usize {
        self.queue.len()
    }

    /// Number of running local jobs.
    pub fn running_local(&self) -> usize {
        self.running.len()
    }

    /// Instantaneous local utilization `busy_local / P` (0 for an empty site).
    pub fn local_utilization(&self) -> f64 {
        if self.cfg.procs == 0 {
            0.0
        } else {
            f64::from(self.busy_local) / f64::from(self.cfg.procs)
        }
    }

    /// Idle processors set aside for reservations whose window contains the current time.
    pub fn reserved_now(&self) -> u32 {
        self.reserved_at(self.now)
    }

    /// Processors a local job could start on right now: idle minus [`LocalRm::reserved_now`]
    /// (a job also needs room for its whole estimated run; see the module docs).
    pub fn free_now(&self) -> u32 {
        self.idle().saturating_sub(self.reserved_now())
    }

    /// Processors a plain [`LocalRm::claim`] could take now without endangering any
    /// reservation (equals [`LocalRm::idle`] when there are no reservations).
    pub fn claimable(&self) -> u32 {
        if self.reservations.is_empty() {
            return self.idle();
        }
        let prof = self.profile(self.now);
        prof.cap.saturating_sub(prof.max_used(self.now, NEVER)) as u32
    }

    /// The record of local job `id`, if it exists.
    pub fn job(&self, id: LocalJobId) -> Option<&LocalJobRecord> {
        self.jobs.get(id.0 as usize)
    }

    /// All local job records, in submission (id) order.
    pub fn jobs(&self) -> &[LocalJobRecord] {
        &self.jobs
    }

    /// Queued local jobs in queue order.
    pub fn queue(&self) -> impl Iterator<Item = LocalJobId> + '_ {
        self.queue.iter().map(|q| q.id)
    }

    /// Running local jobs, by increasing actual end.
    pub fn running(&self) -> impl Iterator<Item = LocalJobId> + '_ {
        self.running.iter().map(|&(_, id)| id)
    }

    /// The claim held under `key`, if any.
    pub fn claim_of(&self, key: GridKey) -> Option<&Claim> {
        self.claims.get(&key)
    }

    /// All claims, by key.
    pub fn claims(&self) -> impl Iterator<Item = (GridKey, &Claim)> + '_ {
        self.claims.iter().map(|(k, c)| (*k, c))
    }

    /// The unclaimed reservation held under `key`, if any.
    pub fn reservation(&self, key: GridKey) -> Option<&Reservation> {
        self.reservations.get(&key)
    }

    /// All unclaimed reservations, by key.
    pub fn reservations(&self) -> impl Iterator<Item = (GridKey, &Reservation)> + '_ {
        self.reservations.iter().map(|(k, r)| (*k, r))
    }

    /// Total processor-milliseconds used by local jobs (injected included) up to `now`
    /// (`now` ≥ [`LocalRm::now`]; jobs due to end before `now` but not yet processed count as
    /// running).
    pub fn local_busy_proc_ms(&self, now: Millis) -> u64 {
        self.acc_local + u64::from(self.busy_local) * now.saturating_sub(self.now)
    }

    /// Processor-milliseconds used by injected (dummy) local jobs up to `now`.
    pub fn injected_busy_proc_ms(&self, now: Millis) -> u64 {
        self.acc_injected + u64::from(self.busy_injected) * now.saturating_sub(self.now)
    }

    /// Processor-milliseconds held by grid claims up to `now`.
    pub fn grid_busy_proc_ms(&self, now: Millis) -> u64 {
        self.acc_grid + u64::from(self.busy_grid) * now.saturating_sub(self.now)
    }

    /// The earliest time something is due: a local job end, a reservation start (if later than
    /// [`LocalRm::now`]) or a reservation expiry.
    pub fn next_event_time(&self) -> Option<Millis> {
        let mut t = self.running.first().map(|&(e, _)| e);
        for r in self.reservations.values() {
            let mut consider = |x: Millis| t = Some(t.map_or(x, |t| t.min(x)));
            if r.start > self.now {
                consider(r.start);
            }
            consider(r.end);
        }
        t
    }

    // ----------------------------------------------------------------------------------------
    // Driving time
    // ----------------------------------------------------------------------------------------

    /// Processes everything due at or before `now` (each instant: ends and expiries, then a
    /// scheduling pass) and returns all events buffered since the last call.
    pub fn advance(&mut self, now: Millis) -> Vec<LrmEvent> {
        self.sync(now);
        self.take_events()
    }

    /// Like [`LocalRm::advance`] but keeps the events buffered.
    pub fn sync(&mut self, now: Millis) {
        debug_assert!(now >= self.now, "time went backwards: {now} < {}", self.now);
        let now = now.max(self.now);
        loop {
            let due_end = self.running.first().map(|&(e, _)| e);
            let due_exp = self.reservations.values().map(|r| r.end).min();
            let t = match (due_end, due_exp) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) | (None, Some(a)) => a,
                (None, None) => break,
            };
            if t > now {
                break;
            }
            let t = t.max(self.now);
            self.touch(t);
            while let Some(&(e, id)) = self.running.first() {
                if e > t {
                    break;
                }
                self.running.pop_first();
                self.finish_job(id, t, LocalJobState::Finished);
                self.events.push(LrmEvent::LocalJobFinished { id });
            }
            let expired: Vec<GridKey> = self.reservations.iter().filter(|(_, r)| r.end <= t).map(|(k, _)| *k).collect();
            for key in expired {
                self.reservations.remove(&key);
                self.events.push(LrmEvent::ReservationExpired { key });
            }
            self.schedule_from(t, 0);
        }
        self.touch(now);
    }

    /// Removes and returns the buffered events.
    pub fn take_events(&mut self) -> Vec<LrmEvent> {
        std::mem::take(&mut self.events)
    }

    /// Runs a full scheduling pass at `now` (normally not needed: every operation already does).
    pub fn schedule(&mut self, now: Millis) {
        self.sync(now);
        self.schedule_from(self.now, 0);
    }

    // ----------------------------------------------------------------------------------------
    // Local jobs
    // ----------------------------------------------------------------------------------------

    /// Submits a local job at `now` (runtime raised to ≥ 1 ms, estimate to ≥ runtime) and tries
    /// to start it. Rejected if it needs 0 or more than `P` processors.
    pub fn submit_local(&mut self, now: Millis, job: LocalJob) -> Result<LocalJobId, SubmitRejected> {
        if job.procs == 0 || job.procs > self.cfg.procs {
            return Err(SubmitRejected {
                procs: job.procs,
                capacity: self.cfg.procs,
            });
        }
        self.sync(now);
        let now = self.now;
        let id = LocalJobId(self.jobs.len() as u64);
        let runtime_ms = job.runtime_ms.max(1);
        self.jobs.push(LocalJobRecord {
            id,
            procs: job.procs,
            runtime_ms,
            estimate_ms: job.estimate_ms.max(runtime_ms),
            injected: job.injected,
            submit_ms: now,
            start_ms: None,
            end_ms: None,
            state: LocalJobState::Queued,
        });
        self.queue.push_back(Queued {
            id,
            procs: job.procs,
            estimate_ms: self.jobs[id.0 as usize].estimate_ms,
        });
        *self.queued_procs.entry(job.procs).or_insert(0) += 1;
        let first = self.queue.len() - 1;
        self.schedule_from(now, first);
        Ok(id)
    }

    /// Kills local job `id` at `now`, whether queued or running (no event is emitted). Returns
    /// `false` if it does not exist or already ended.
    pub fn kill_local(&mut self, now: Millis, id: LocalJobId) -> bool {
        self.sync(now);
        let now = self.now;
        let Some(rec) = self.jobs.get(id.0 as usize).copied() else {
            return false;
        };
        match rec.state {
            LocalJobState::Queued => {
                let pos = self.queue.iter().position(|q| q.id == id).expect("queued job is in the queue");
                self.queue.remove(pos);
                self.remove_queued_procs(rec.procs);
                let r = &mut self.jobs[id.0 as usize];
                r.state = LocalJobState::Killed;
                r.end_ms = Some(now);
                // The head may have changed: full pass.
                self.schedule_from(now, 0);
                true
            }
            LocalJobState::Running => {
                let start = rec.start_ms.expect("running job has a start");
                let removed = self.running.remove(&(start + rec.runtime_ms, id));
                debug_assert!(removed);
                self.finish_job(id, now, LocalJobState::Killed);
                self.schedule_from(now, 0);
                true
            }
            LocalJobState::Finished | LocalJobState::Killed => false,
        }
    }

    // ----------------------------------------------------------------------------------------
    // Grid claims
    // ----------------------------------------------------------------------------------------

    /// Takes `procs` processors for `key` immediately (no queueing), holding them until
    /// [`LocalRm::release`]. Rejected if fewer than `procs` are [`LocalRm::claimable`] or the key
    /// is in use.
    pub fn claim(&mut self, now: Millis, key: GridKey, procs: u32) -> Result<(), ClaimRejected> {
        self.sync(now);
        let now = self.now;
        if self.claims.contains_key(&key) || self.reservations.contains_key(&key) {
            return Err(ClaimRejected::DuplicateKey);
        }
        let available = self.claimable();
        if procs > available {
            return Err(ClaimRejected::NotEnoughIdle {
                requested: procs,
                available,
            });
        }
        self.claims.insert(
            key,
            Claim {
                procs,
                since: now,
                reservation_end: None,
            },
        );
        self.busy_grid += procs;
        self.debug_check();
        // A claim can move the EASY head's shadow time later, allowing new backfills.
        self.schedule_from(now, 0);
        Ok(())
    }

    /// Releases the claim held by `key` and runs a scheduling pass. Returns `false` if there was
    /// no such claim.
    pub fn release(&mut self, now: Millis, key: GridKey) -> bool {
        self.sync(now);
        let now = self.now;
        match self.claims.remove(&key) {
            None => false,
            Some(c) => {
                self.busy_grid -= c.procs;
                self.schedule_from(now, 0);
                true
            }
        }
    }

    // ----------------------------------------------------------------------------------------
    // Advance reservations
    // ----------------------------------------------------------------------------------------

    /// Reserves `procs` processors for `key` during `[start, start + duration)` (`duration` at
    /// least 1 ms; `start` ≥ `now`). Granted if the profile leaves room during the whole window.
    pub fn reserve(
        &mut self,
        now: Millis,
        key: GridKey,
        procs: u32,
        start: Millis,
        duration: Millis,
    ) -> Result<ReservationId, ReservationRejected> {
        self.sync(now);
        let now = self.now;
        let none = ReservationRejected { earliest_possible: None };
        if !self.cfg.supports_reservations
            || self.claims.contains_key(&key)
            || self.reservations.contains_key(&key)
            || procs > self.cfg.procs
        {
            return Err(none);
        }
        let duration = duration.max(1);
        let prof = self.profile(now);
        if start >= now && prof.fits(start, start.saturating_add(duration), procs) {
            let id = ReservationId(self.next_reservation_id);
            self.next_reservation_id += 1;
            self.reservations.insert(
                key,
                Reservation {
                    id,
                    procs,
                    start,
                    end: start.saturating_add(duration),
                },
            );
            self.debug_check();
            // A reservation can move the EASY head's shadow time later, allowing backfills.
            self.schedule_from(now, 0);
            Ok(id)
        } else {
            Err(ReservationRejected {
                earliest_possible: prof.earliest_fit(start.max(now), duration, procs),
            })
        }
    }

    /// Converts the reservation of `key` into a grid claim holding its processors (until
    /// [`LocalRm::release`]; planned until the reservation's end). Allowed during
    /// `[start, end)`.
    pub fn claim_reservation(&mut self, now: Millis, key: GridKey) -> Result<(), ClaimRejected> {
        self.sync(now);
        let now = self.now;
        let Some(r) = self.reservations.get(&key).copied() else {
            return Err(ClaimRejected::NoReservation);
        };
        if now < r.start {
            return Err(ClaimRejected::TooEarly { start: r.start });
        }
        if now >= r.end {
            // Unreachable after sync (it would have expired), kept for safety.
            return Err(ClaimRejected::Expired { end: r.end });
        }
        let idle = self.idle();
        if r.procs > idle {
            // Only possible if a reservation-derived claim overran its reservation.
            return Err(ClaimRejected::NotEnoughIdle {
                requested: r.procs,
                available: idle,
            });
        }
        self.reservations.remove(&key);
        self.claims.insert(
            key,
            Claim {
                procs: r.procs,
                since: now,
                reservation_end: Some(r.end),
            },
        );
        self.busy_grid += r.procs;
        self.debug_check();
        // The profile is unchanged from `now` on: no scheduling pass needed.
        Ok(())
    }

    /// Cancels the unclaimed reservation of `key` at `now` and runs a scheduling pass. Returns
    /// `false` if there was none.
    pub fn cancel_reservation(&mut self, now: Millis, key: GridKey) -> bool {
        self.sync(now);
        let now = self.now;
        if self.reservations.remove(&key).is_some() {
            self.schedule_from(now, 0);
            true
        } else {
            false
        }
    }

    // ----------------------------------------------------------------------------------------
    // Invariants
    // ----------------------------------------------------------------------------------------

    /// Checks internal consistency: counters match the jobs and claims, `busy_local + busy_grid
    /// ≤ P`, the queue holds exactly the queued jobs, and (unless a reservation-derived claim
    /// has overrun its reservation) the profile stays within `P` at every future instant, so
    /// every reservation can be claimed at its start.
    pub fn check_invariants(&self) -> Result<(), String> {
        let p = self.cfg.procs;
        if u64::from(self.busy_local) + u64::from(self.busy_grid) > u64::from(p) {
            return Err(format!("busy_local {} + busy_grid {} > P {p}", self.busy_local, self.busy_grid));
        }
        let mut local = 0u32;
        let mut injected = 0u32;
        for &(end, id) in &self.running {
            let r = &self.jobs[id.0 as usize];
            if r.state != LocalJobState::Running {
                return Err(format!("{id:?} in running set but {:?}", r.state));
            }
            if r.start_ms.map(|s| s + r.runtime_ms) != Some(end) {
                return Err(format!("{id:?} has a wrong end in the running set"));
            }
            if end <= self.now {
                return Err(format!("{id:?} should have ended at {end} ≤ now {}", self.now));
            }
            local += r.procs;
            if r.injected {
                injected += r.procs;
            }
        }
        if local != self.busy_local || injected != self.busy_injected {
            return Err(format!(
                "busy_local {} / busy_injected {} but running jobs use {local} / {injected}",
                self.busy_local, self.busy_injected
            ));
        }
        let grid: u32 = self.claims.values().map(|c| c.procs).sum();
        if grid != self.busy_grid {
            return Err(format!("busy_grid {} but claims hold {grid}", self.busy_grid));
        }
        let mut qp: BTreeMap<u32, usize> = BTreeMap::new();
        for q in &self.queue {
            let id = q.id;
            let r = &self.jobs[id.0 as usize];
            if (r.procs, r.estimate_ms) != (q.procs, q.estimate_ms) {
                return Err(format!("{id:?} has a stale shape in the queue"));
            }
            if r.state != LocalJobState::Queued {
                return Err(format!("{id:?} in queue but {:?}", r.state));
            }
            *qp.entry(r.procs).or_insert(0) += 1;
        }
        if qp != self.queued_procs {
            return Err("queued_procs multiset out of sync".into());
        }
        let n_queued = self.jobs.iter().filter(|r| r.state == LocalJobState::Queued).count();
        if n_queued != self.queue.len() {
            return Err(format!("{n_queued} queued jobs but queue length {}", self.queue.len()));
        }
        if self.running.len() != self.jobs.iter().filter(|r| r.state == LocalJobState::Running).count() {
            return Err("running set out of sync".into());
        }
        for r in self.reservations.values() {
            if r.end <= self.now {
                return Err(format!("reservation {:?} should have expired", r.id));
            }
        }
        let overrun = self.claims.values().any(|c| matches!(c.reservation_end, Some(e) if e <= self.now));
        if !overrun {
            let prof = self.profile(self.now);
            let m = prof.max_used(self.now, NEVER);
            if m > u64::from(p) {
                return Err(format!("profile commits {m} > P {p} processors"));
            }
        }
        Ok(())
    }

    // ----------------------------------------------------------------------------------------
    // Internals
    // ----------------------------------------------------------------------------------------

    fn debug_check(&self) {
        debug_assert!(
            self.busy_local + self.busy_grid <= self.cfg.procs,
            "busy_local {} + busy_grid {} > P {}",
            self.busy_local,
            self.busy_grid,
            self.cfg.procs
        );
    }

    /// Integrates the busy counters up to `t` and moves the clock there.
    fn touch(&mut self, t: Millis) {
        debug_assert!(t >= self.now);
        let dt = t.saturating_sub(self.now);
        self.acc_local += u64::from(self.busy_local) * dt;
        self.acc_injected += u64::from(self.busy_injected) * dt;
        self.acc_grid += u64::from(self.busy_grid) * dt;
        self.now = self.now.max(t);
    }

    fn reserved_at(&self, t: Millis) -> u32 {
        self.reservations
            .values()
            .filter(|r| r.start <= t && t < r.end)
            .map(|r| r.procs)
            .sum()
    }

    /// The committed-processor profile from `now` (see the module docs).
    fn profile(&self, now: Millis) -> Profile {
        let jobs = self.running.iter().map(|&(_, id)| {
            let r = &self.jobs[id.0 as usize];
            let start = r.start_ms.expect("running job has a start");
            let est_end = (start + r.estimate_ms).max(now + 1);
            (start, est_end, r.procs)
        });
        let claims = self.claims.values().map(|c| {
            let end = match c.reservation_end {
                Some(e) if e > now => e,
                _ => NEVER,
            };
            (c.since, end, c.procs)
        });
        let res = self.reservations.values().map(|r| (r.start, r.end, r.procs));
        Profile::build(self.cfg.procs, now, jobs.chain(claims).chain(res))
    }

    fn remove_queued_procs(&mut self, procs: u32) {
        let n = self.queued_procs.get_mut(&procs).expect("queued procs multiset holds the job");
        *n -= 1;
        if *n == 0 {
            self.queued_procs.remove(&procs);
        }
    }

    /// Starts queued job `id` at `now` (the caller removes it from the queue).
    fn start_job(&mut self, now: Millis, id: LocalJobId) {
        let r = &mut self.jobs[id.0 as usize];
        debug_assert_eq!(r.state, LocalJobState::Queued);
        r.state = LocalJobState::Running;
        r.start_ms = Some(now);
        let (procs, injected, end) = (r.procs, r.injected, now + r.runtime_ms);
        self.running.insert((end, id));
        self.busy_local += procs;
        if injected {
            self.busy_injected += procs;
        }
        self.remove_queued_procs(procs);
        self.events.push(LrmEvent::LocalJobStarted { id });
        self.debug_check();
    }

    /// Marks running job `id` ended at `now` (already removed from the running set).
    fn finish_job(&mut self, id: LocalJobId, now: Millis, state: LocalJobState) {
        let r = &mut self.jobs[id.0 as usize];
        debug_assert_eq!(r.state, LocalJobState::Running);
        r.state = state;
        r.end_ms = Some(now);
        self.busy_local -= r.procs;
        if r.injected {
            self.busy_injected -= r.procs;
        }
    }

    /// Scheduling pass at `now`; queue positions before `first` (other than the head) are known
    /// not to be startable in the current state.
    fn schedule_from(&mut self, now: Millis, first: usize) {
        let Some(&min_procs) = self.queued_procs.keys().next() else {
            return;
        };
        if self.free_now() < min_procs {
            return;
        }
        let mut prof = self.profile(now);
        let mut first = first;
        // FCFS part: start heads while they fit.
        while let Some(&q) = self.queue.front() {
            let end = now.saturating_add(q.estimate_ms);
            if !prof.fits(now, end, q.procs) {
                break;
            }
            self.queue.pop_front();
            self.start_job(now, q.id);
            prof.add(now, end, q.procs);
            first = 0;
        }
        if self.cfg.policy == LocalPolicy::Fcfs || self.queue.len() < 2 {
            return;
        }
        // EASY: the blocked head gets a reservation at its shadow time.
        let head = self.queue[0];
        if let Some(shadow) = prof.earliest_fit(now, head.estimate_ms, head.procs) {
            prof.add(shadow, shadow.saturating_add(head.estimate_ms), head.procs);
        }
        // `free`: processors free now; `free_always`: free at every instant from now on (a job
        // this small fits whatever its estimate). Both only change when a job starts.
        let min_procs = u64::from(min_procs);
        let mut free = prof.free_at(now);
        let mut free_always = prof.cap.saturating_sub(prof.max_used(now, NEVER));
        let mut started = false;
        for i in first.max(1)..self.queue.len() {
            if free < min_procs {
                break;
            }
            let q = self.queue[i];
            let procs = u64::from(q.procs);
            if procs > free {
                continue;
            }
            let end = now.saturating_add(q.estimate_ms);
            if procs <= free_always || prof.fits(now, end, q.procs) {
                self.start_job(now, q.id);
                prof.add(now, end, q.procs);
                free = prof.free_at(now);
                free_always = prof.cap.saturating_sub(prof.max_used(now, NEVER));
                started = true;
            }
        }
        if started {
            let jobs = &self.jobs;
            self.queue.retain(|q| jobs[q.id.0 as usize].state == LocalJobState::Queued);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lrm(procs: u32, policy: LocalPolicy) -> LocalRm {
        LocalRm::new(LrmConfig {
            procs,
            policy,
            supports_reservations: true,
        })
    }

    fn start(l: &LocalRm, id: LocalJobId) -> Option<Millis> {
        l.job(id).unwrap().start_ms
    }

    fn ok(l: &LocalRm) {
        l.check_invariants().unwrap();
    }

    #[test]
    fn fcfs_starts_in_order_and_does_not_backfill() {
        let mut l = lrm(10, LocalPolicy::Fcfs);
        let a = l.submit_local(0, LocalJob::new(6, 100, 100)).unwrap();
        let b = l.submit_local(1, LocalJob::new(6, 10, 10)).unwrap();
        let c = l.submit_local(2, LocalJob::new(2, 10, 10)).unwrap();
        assert_eq!(start(&l, a), Some(0));
        assert_eq!(start(&l, b), None);
        assert_eq!(start(&l, c), None, "FCFS must not let C overtake B");
        assert_eq!(l.queued_local(), 2);
        assert_eq!(l.next_event_time(), Some(100));
        let ev = l.advance(100);
        assert_eq!(start(&l, b), Some(100));
        assert_eq!(start(&l, c), Some(100));
        assert_eq!(
            ev,
            vec![
                LrmEvent::LocalJobStarted { id: a },
                LrmEvent::LocalJobFinished { id: a },
                LrmEvent::LocalJobStarted { id: b },
                LrmEvent::LocalJobStarted { id: c },
            ]
        );
        assert_eq!(l.busy_local(), 8);
        l.advance(110);
        assert_eq!(l.busy_local(), 0);
        assert_eq!(l.job(b).unwrap().end_ms, Some(110));
        assert_eq!(l.job(b).unwrap().state, LocalJobState::Finished);
        assert_eq!(l.job(b).unwrap().wait_ms(), Some(99));
        ok(&l);
    }

    #[test]
    fn easy_backfills_short_job_ahead_of_blocked_head() {
        let mut l = lrm(10, LocalPolicy::EasyBackfill);
        let a = l.submit_local(0, LocalJob::new(6, 100, 100)).unwrap();
        let b = l.submit_local(0, LocalJob::new(6, 50, 50)).unwrap();
        let c = l.submit_local(0, LocalJob::new(4, 50, 50)).unwrap();
        assert_eq!(start(&l, a), Some(0));
        assert_eq!(start(&l, b), None);
        assert_eq!(start(&l, c), Some(0), "C ends before the shadow time 100");
        l.advance(100);
        assert_eq!(start(&l, b), Some(100));
        ok(&l);
    }

    #[test]
    fn easy_backfills_into_extra_processors() {
        // Head B needs 6 at shadow 100 where 10 are free: extra = 4.
        let mut l = lrm(10, LocalPolicy::EasyBackfill);
        l.submit_local(0, LocalJob::new(6, 100, 100)).unwrap();
        let b = l.submit_local(0, LocalJob::new(6, 50, 50)).unwrap();
        let c = l.submit_local(0, LocalJob::new(4, 500, 500)).unwrap();
        assert_eq!(start(&l, c), Some(0), "C runs past the shadow time but uses only extra");
        l.advance(100);
        assert_eq!(start(&l, b), Some(100));
        ok(&l);
    }

    #[test]
    fn easy_does_not_backfill_a_job_that_delays_the_head() {
        let mut l = lrm(10, LocalPolicy::EasyBackfill);
        let a = l.submit_local(0, LocalJob::new(6, 80, 100)).unwrap();
        let b = l.submit_local(0, LocalJob::new(8, 50, 50)).unwrap(); // shadow 100, extra 2
        let c = l.submit_local(0, LocalJob::new(3, 200, 200)).unwrap(); // would delay B
        let d = l.submit_local(0, LocalJob::new(3, 40, 50)).unwrap(); // ends by 100
        assert_eq!(start(&l, a), Some(0));
        assert_eq!(start(&l, c), None);
        assert_eq!(start(&l, d), Some(0));
        // A really ends at 80 (before its estimate): B starts then, C still waits.
        l.advance(80);
        assert_eq!(start(&l, b), Some(80));
        assert_eq!(start(&l, c), None);
        l.advance(130);
        assert_eq!(start(&l, c), Some(130));
        ok(&l);
    }

    #[test]
    fn submit_rejects_impossible_jobs_and_clamps_times() {
        let mut l = lrm(4, LocalPolicy::Fcfs);
        assert!(l.submit_local(0, LocalJob::new(5, 10, 10)).is_err());
        assert!(l.submit_local(0, LocalJob::new(0, 10, 10)).is_err());
        let id = l.submit_local(0, LocalJob::new(1, 0, 0)).unwrap();
        let r = *l.job(id).unwrap();
        assert_eq!((r.runtime_ms, r.estimate_ms), (1, 1));
        let id = l.submit_local(0, LocalJob::new(1, 50, 10)).unwrap();
        assert_eq!(l.job(id).unwrap().estimate_ms, 50);
    }

    #[test]
    fn claim_takes_idle_processors_and_is_rejected_when_too_few() {
        let mut l = lrm(10, LocalPolicy::EasyBackfill);
        l.submit_local(0, LocalJob::new(6, 100, 100)).unwrap();
        assert_eq!(l.idle(), 4);
        l.claim(5, GridKey(1, 0), 3).unwrap();
        assert_eq!((l.idle(), l.busy_grid(), l.busy_local()), (1, 3, 6));
        assert_eq!(
            l.claim(5, GridKey(2, 0), 2),
            Err(ClaimRejected::NotEnoughIdle {
                requested: 2,
                available: 1
            })
        );
        assert_eq!(l.claim(5, GridKey(1, 0), 1), Err(ClaimRejected::DuplicateKey));
        l.claim(5, GridKey(1, 1), 1).unwrap();
        assert_eq!(l.idle(), 0);
        assert_eq!(l.claim_of(GridKey(1, 1)).unwrap().since, 5);
        ok(&l);
    }

    #[test]
    fn release_starts_queued_local_jobs() {
        let mut l = lrm(10, LocalPolicy::Fcfs);
        l.claim(0, GridKey(7, 0), 8).unwrap();
        let j = l.submit_local(10, LocalJob::new(4, 100, 100)).unwrap();
        assert_eq!(start(&l, j), None);
        assert!(l.release(30, GridKey(7, 0)));
        assert!(!l.release(30, GridKey(7, 0)));
        assert_eq!(start(&l, j), Some(30));
        assert_eq!(l.busy_grid(), 0);
        assert_eq!(l.take_events(), vec![LrmEvent::LocalJobStarted { id: j }]);
        ok(&l);
    }

    #[test]
    fn reservation_granted_when_free_and_rejected_with_earliest_possible() {
        let mut l = lrm(10, LocalPolicy::EasyBackfill);
        l.submit_local(0, LocalJob::new(6, 60, 100)).unwrap();
        let r1 = l.reserve(0, GridKey(1, 0), 4, 50, 100).unwrap(); // [50, 150)
        assert_eq!(l.reservation(GridKey(1, 0)).unwrap().id, r1);
        // 6 more at 50: the local job holds 6 until its estimated end 100 → earliest 100.
        assert_eq!(
            l.reserve(0, GridKey(2, 0), 6, 50, 100),
            Err(ReservationRejected {
                earliest_possible: Some(100)
            })
        );
        // 7 at 50 for 100: also blocked by R1 until 150.
        assert_eq!(
            l.reserve(0, GridKey(2, 0), 7, 50, 100),
            Err(ReservationRejected {
                earliest_possible: Some(150)
            })
        );
        assert_eq!(
            l.reserve(0, GridKey(2, 0), 11, 50, 100),
            Err(ReservationRejected { earliest_possible: None })
        );
        let r2 = l.reserve(0, GridKey(2, 0), 6, 100, 100).unwrap();
        assert_ne!(r1, r2);
        // Duplicate key, start in the past.
        assert_eq!(l.reserve(0, GridKey(2, 0), 1, 500, 10).unwrap_err().earliest_possible, None);
        l.advance(20);
        assert_eq!(
            l.reserve(20, GridKey(3, 0), 0, 10, 10),
            Err(ReservationRejected {
                earliest_possible: Some(20)
            })
        );
        // A claim that may hold forever cannot take reserved processors.
        assert_eq!(l.idle(), 4);
        assert_eq!(l.claimable(), 0);
        assert!(matches!(
            l.claim(20, GridKey(4, 0), 1),
            Err(ClaimRejected::NotEnoughIdle { available: 0, .. })
        ));
        ok(&l);
    }

    #[test]
    fn reservations_unsupported_are_rejected() {
        let mut l = LocalRm::new(LrmConfig {
            procs: 10,
            policy: LocalPolicy::Fcfs,
            supports_reservations: false,
        });
        assert_eq!(
            l.reserve(0, GridKey(1, 0), 1, 10, 10),
            Err(ReservationRejected { earliest_possible: None })
        );
    }

    #[test]
    fn local_jobs_are_not_started_into_a_reservation_window() {
        for policy in [LocalPolicy::Fcfs, LocalPolicy::EasyBackfill] {
            let mut l = lrm(10, policy);
            l.reserve(0, GridKey(1, 0), 8, 100, 100).unwrap(); // [100, 200)
            assert_eq!(l.free_now(), 10);
            // Overlaps the window on needed processors: waits.
            let x = l.submit_local(0, LocalJob::new(4, 150, 150)).unwrap();
            assert_eq!(start(&l, x), None, "{policy:?}");
            if policy == LocalPolicy::EasyBackfill {
                // Ends before the window: runs.
                let y = l.submit_local(0, LocalJob::new(4, 50, 50)).unwrap();
                assert_eq!(start(&l, y), Some(0));
                // Fits beside the reservation and beside X's shadow reservation at 200.
                let z = l.submit_local(0, LocalJob::new(2, 500, 500)).unwrap();
                assert_eq!(start(&l, z), Some(0));
            }
            l.advance(100);
            assert_eq!(start(&l, x), None);
            assert_eq!(l.reserved_now(), 8);
            l.claim_reservation(100, GridKey(1, 0)).unwrap();
            l.advance(199);
            assert_eq!(start(&l, x), None);
            assert!(l.release(199, GridKey(1, 0)));
            assert_eq!(start(&l, x), Some(199), "{policy:?}");
            ok(&l);
        }
    }

    #[test]
    fn a_job_ending_before_the_window_starts_under_fcfs() {
        let mut l = lrm(10, LocalPolicy::Fcfs);
        l.reserve(0, GridKey(1, 0), 10, 100, 100).unwrap();
        let y = l.submit_local(0, LocalJob::new(10, 100, 100)).unwrap();
        assert_eq!(start(&l, y), Some(0), "ends exactly at the window start");
        let x = l.submit_local(0, LocalJob::new(1, 50, 101)).unwrap();
        assert_eq!(start(&l, x), None);
        l.advance(100);
        assert_eq!(start(&l, x), None, "starting now it would overlap the window");
        assert_eq!(
            l.advance(200),
            vec![
                LrmEvent::ReservationExpired { key: GridKey(1, 0) },
                LrmEvent::LocalJobStarted { id: x },
            ]
        );
        assert_eq!(start(&l, x), Some(200));
    }

    #[test]
    fn claim_reservation_at_start_succeeds() {
        let mut l = lrm(10, LocalPolicy::EasyBackfill);
        // Local work keeps the site busy, with estimates reaching the window.
        l.submit_local(0, LocalJob::new(5, 90, 100)).unwrap();
        l.reserve(0, GridKey(9, 2), 5, 100, 50).unwrap();
        for _ in 0..20 {
            l.submit_local(1, LocalJob::new(3, 30, 40)).unwrap();
        }
        assert_eq!(l.claim_reservation(50, GridKey(9, 2)), Err(ClaimRejected::TooEarly { start: 100 }));
        assert_eq!(l.claim_reservation(50, GridKey(9, 3)), Err(ClaimRejected::NoReservation));
        let mut t = 50;
        while let Some(n) = l.next_event_time() {
            if n > 100 {
                break;
            }
            t = n;
            l.advance(t);
            ok(&l);
        }
        assert_eq!(t, 100);
        l.claim_reservation(100, GridKey(9, 2)).unwrap();
        assert_eq!(l.busy_grid(), 5);
        let c = *l.claim_of(GridKey(9, 2)).unwrap();
        assert_eq!(c.reservation_end, Some(150));
        assert!(l.reservation(GridKey(9, 2)).is_none());
        // The claim is planned to end at 150: local jobs may plan around it.
        l.advance(130);
        assert!(l.release(130, GridKey(9, 2)));
        ok(&l);
    }

    #[test]
    fn unclaimed_reservation_expires() {
        let mut l = lrm(10, LocalPolicy::EasyBackfill);
        l.reserve(0, GridKey(1, 0), 10, 100, 100).unwrap();
        assert_eq!(l.next_event_time(), Some(100));
        assert!(l.advance(100).is_empty());
        assert_eq!(l.next_event_time(), Some(200));
        assert_eq!(l.advance(250), vec![LrmEvent::ReservationExpired { key: GridKey(1, 0) }]);
        assert_eq!(l.next_event_time(), None);
        assert_eq!(l.claim_reservation(250, GridKey(1, 0)), Err(ClaimRejected::NoReservation));
        // Cancelling.
        l.reserve(250, GridKey(2, 0), 10, 300, 100).unwrap();
        let j = l.submit_local(250, LocalJob::new(1, 100, 100)).unwrap();
        assert_eq!(start(&l, j), None);
        assert!(l.cancel_reservation(260, GridKey(2, 0)));
        assert!(!l.cancel_reservation(260, GridKey(2, 0)));
        assert_eq!(start(&l, j), Some(260));
        ok(&l);
    }

    #[test]
    fn kill_running_and_queued_jobs() {
        let mut l = lrm(10, LocalPolicy::Fcfs);
        let a = l.submit_local(0, LocalJob::injected(8, 100, 100)).unwrap();
        let b = l.submit_local(0, LocalJob::new(8, 100, 100)).unwrap();
        let c = l.submit_local(0, LocalJob::new(2, 100, 100)).unwrap();
        assert_eq!(l.busy_injected(), 8);
        assert!(l.kill_local(10, c));
        assert_eq!(l.job(c).unwrap().state, LocalJobState::Killed);
        assert!(l.kill_local(20, a));
        assert!(!l.kill_local(20, a));
        assert_eq!(l.busy_injected(), 0);
        assert_eq!(start(&l, b), Some(20));
        assert_eq!(l.job(a).unwrap().end_ms, Some(20));
        assert!(!l.kill_local(20, LocalJobId(99)));
        // The killed job's end is not an event any more.
        assert_eq!(l.next_event_time(), Some(120));
        ok(&l);
    }

    #[test]
    fn busy_processor_time_accounting() {
        let mut l = lrm(10, LocalPolicy::Fcfs);
        l.submit_local(0, LocalJob::injected(2, 100, 100)).unwrap();
        l.submit_local(0, LocalJob::new(3, 50, 50)).unwrap();
        l.claim(10, GridKey(1, 0), 4).unwrap();
        l.advance(200);
        assert_eq!(l.local_busy_proc_ms(200), 2 * 100 + 3 * 50);
        assert_eq!(l.injected_busy_proc_ms(200), 200);
        assert_eq!(l.grid_busy_proc_ms(300), 4 * 290);
        let total: u64 = l.jobs().iter().map(|r| r.proc_ms_until(200)).sum();
        assert_eq!(total, 350);
    }

    #[test]
    fn many_jobs_are_handled_quickly() {
        // 20k jobs on a 256-processor site at ~90% offered load (queues of hundreds).
        let mut l = lrm(256, LocalPolicy::EasyBackfill);
        let mut rng = crate::rng::Rng::new(3);
        let mut t = 0;
        for _ in 0..20_000 {
            t += rng.exponential(14_000.0) as Millis;
            l.advance(t);
            let procs = rng.range_inclusive_u64(1, 64) as u32;
            let rt = rng.range_inclusive_u64(1_000, 200_000);
            let est = rt + rng.range_inclusive_u64(0, 200_000);
            l.submit_local(t, LocalJob::new(procs, rt, est)).unwrap();
        }
        while let Some(n) = l.next_event_time() {
            l.advance(n);
        }
        assert_eq!(l.queued_local(), 0);
        assert!(l.jobs().iter().all(|r| r.state == LocalJobState::Finished));
        let used = l.local_busy_proc_ms(l.now()) as f64 / (256.0 * l.now() as f64);
        assert!(used > 0.8, "utilization {used}");
        ok(&l);
    }

    // ------------------------------------------------------------------------------------
    // Property tests
    // ------------------------------------------------------------------------------------

    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Submit { procs: u32, runtime: Millis, slack: Millis },
        Claim { key: u32, procs: u32 },
        Release { key: u32 },
        Reserve { key: u32, procs: u32, lead: Millis, dur: Millis },
        ClaimRes { key: u32 },
        Cancel { key: u32 },
        Kill { idx: u64 },
        Advance { dt: Millis },
        AdvanceToEvent,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1u32..=14, 1u64..300, 0u64..200)
                .prop_map(|(procs, runtime, slack)| Op::Submit { procs, runtime, slack }),
            2 => (0u32..6, 0u32..8).prop_map(|(key, procs)| Op::Claim { key, procs }),
            2 => (0u32..6).prop_map(|key| Op::Release { key }),
            2 => (0u32..6, 1u32..=12, 0u64..300, 1u64..300)
                .prop_map(|(key, procs, lead, dur)| Op::Reserve { key, procs, lead, dur }),
            1 => (0u32..6).prop_map(|key| Op::ClaimRes { key }),
            1 => (0u32..6).prop_map(|key| Op::Cancel { key }),
            1 => (0u64..40).prop_map(|idx| Op::Kill { idx }),
            3 => (0u64..120).prop_map(|dt| Op::Advance { dt }),
            3 => Just(Op::AdvanceToEvent),
        ]
    }

    fn has_overrun(l: &LocalRm) -> bool {
        l.claims().any(|(_, c)| matches!(c.reservation_end, Some(e) if e <= l.now()))
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 300,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn random_operations_keep_invariants(
            easy in any::<bool>(),
            ops in proptest::collection::vec(op(), 1..120),
        ) {
            let policy = if easy { LocalPolicy::EasyBackfill } else { LocalPolicy::Fcfs };
            let mut l = lrm(12, policy);
            let mut now: Millis = 0;
            for op in ops {
                match op {
                    Op::Submit { procs, runtime, slack } => {
                        let r = l.submit_local(now, LocalJob::new(procs, runtime, runtime + slack));
                        prop_assert_eq!(r.is_ok(), procs <= 12);
                    }
                    Op::Claim { key, procs } => {
                        let before = l.claimable();
                        let r = l.claim(now, GridKey(u64::from(key), 0), procs);
                        if r.is_ok() {
                            prop_assert!(procs <= before);
                        }
                    }
                    Op::Release { key } => {
                        l.release(now, GridKey(u64::from(key), 0));
                    }
                    Op::Reserve { key, procs, lead, dur } => {
                        let key = GridKey(u64::from(key), 0);
                        if let Err(e) = l.reserve(now, key, procs, now + lead, dur) {
                            // The suggested start must be grantable right away.
                            if let Some(t) = e.earliest_possible {
                                prop_assert!(t >= now + lead);
                                let mut copy = l.clone();
                                prop_assert!(copy.reserve(now, key, procs, t, dur).is_ok());
                            }
                        }
                    }
                    Op::ClaimRes { key } => {
                        let key = GridKey(u64::from(key), 0);
                        if let Some(r) = l.reservation(key).copied() {
                            // Jump to the start (if needed) and claim: must succeed.
                            now = now.max(r.start);
                            l.advance(now);
                            if l.reservation(key).is_some() && !has_overrun(&l) {
                                prop_assert_eq!(l.claim_reservation(now, key), Ok(()));
                            }
                        }
                    }
                    Op::Cancel { key } => {
                        l.cancel_reservation(now, GridKey(u64::from(key), 0));
                    }
                    Op::Kill { idx } => {
                        l.kill_local(now, LocalJobId(idx));
                    }
                    Op::Advance { dt } => {
                        now += dt;
                        l.advance(now);
                    }
                    Op::AdvanceToEvent => {
                        if let Some(t) = l.next_event_time() {
                            now = now.max(t);
                            l.advance(now);
                        }
                    }
                }
                prop_assert!(l.busy_local() + l.busy_grid() <= 12);
                if let Err(e) = l.check_invariants() {
                    prop_assert!(false, "{}", e);
                }
                // No local job ever runs into an unclaimed reservation's processors.
                prop_assert!(l.idle() >= l.reserved_now() || has_overrun(&l));
            }
        }

        #[test]
        fn easy_matches_reference_without_grid_load(
            jobs in proptest::collection::vec((0u64..50, 1u32..=16, 1u64..200, 0u64..200), 1..80),
            easy in any::<bool>(),
        ) {
            let jobs: Vec<RefJob> = {
                let mut t = 0;
                jobs.into_iter().map(|(gap, procs, rt, slack)| {
                    t += gap;
                    RefJob { submit: t, procs, runtime: rt, estimate: rt + slack }
                }).collect()
            };
            let expected = reference_sim(&jobs, 16, easy);
            let policy = if easy { LocalPolicy::EasyBackfill } else { LocalPolicy::Fcfs };
            let mut l = lrm(16, policy);
            let mut next = 0;
            loop {
                let arrival = jobs.get(next).map(|j| j.submit);
                let t = match (arrival, l.next_event_time()) {
                    (Some(a), Some(e)) => a.min(e),
                    (Some(a), None) | (None, Some(a)) => a,
                    (None, None) => break,
                };
                l.advance(t);
                while next < jobs.len() && jobs[next].submit == t {
                    let j = jobs[next];
                    l.submit_local(t, LocalJob::new(j.procs, j.runtime, j.estimate)).unwrap();
                    next += 1;
                }
            }
            let got: Vec<Millis> = l.jobs().iter().map(|r| r.start_ms.unwrap()).collect();
            prop_assert_eq!(got, expected);
        }
    }

    #[derive(Clone, Copy, Debug)]
    struct RefJob {
        submit: Millis,
        procs: u32,
        runtime: Millis,
        estimate: Millis,
    }

    /// Straightforward FCFS / EASY (Mu'alem & Feitelson) simulator: at each instant process ends,
    /// then arrivals, then one pass. Returns start times.
    fn reference_sim(jobs: &[RefJob], cap: u32, easy: bool) -> Vec<Millis> {
        let mut starts = vec![None; jobs.len()];
        let mut queue: Vec<usize> = Vec::new();
        let mut running: Vec<(Millis, Millis, u32)> = Vec::new(); // (end, est_end, procs)
        let mut free = cap;
        let mut next = 0;
        loop {
            let t = running.iter().map(|r| r.0).chain(jobs.get(next).map(|j| j.submit)).min();
            let Some(t) = t else { break };
            running.retain(|r| {
                if r.0 <= t {
                    free += r.2;
                    false
                } else {
                    true
                }
            });
            while next < jobs.len() && jobs[next].submit <= t {
                queue.push(next);
                next += 1;
            }
            // FCFS heads.
            while let Some(&h) = queue.first() {
                if jobs[h].procs > free {
                    break;
                }
                queue.remove(0);
                free -= jobs[h].procs;
                starts[h] = Some(t);
                running.push((t + jobs[h].runtime, t + jobs[h].estimate, jobs[h].procs));
            }
            if easy && queue.len() > 1 {
                let h = jobs[queue[0]];
                let mut ests: Vec<(Millis, u32)> = running.iter().map(|r| (r.1, r.2)).collect();
                ests.sort();
                let mut avail = free;
                let mut shadow = Millis::MAX;
                for (e, p) in ests {
                    // Every job ending by the shadow time counts as freed there.
                    if avail >= h.procs && e > shadow {
                        break;
                    }
                    avail += p;
                    if avail >= h.procs && shadow == Millis::MAX {
                        shadow = e;
                    }
                }
                let mut extra = avail - h.procs;
                let mut i = 1;
                while i < queue.len() {
                    let j = jobs[queue[i]];
                    let fits_now = j.procs <= free;
                    if fits_now && (t + j.estimate <= shadow || j.procs <= extra) {
                        if t + j.estimate > shadow {
                            extra -= j.procs;
                        }
                        free -= j.procs;
                        starts[queue[i]] = Some(t);
                        running.push((t + j.runtime, t + j.estimate, j.procs));
                        queue.remove(i);
                    } else {
                        i += 1;
                    }
                }
            }
        }
        starts.into_iter().map(|s| s.unwrap()).collect()
    }
}
