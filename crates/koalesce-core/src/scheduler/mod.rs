//! The scheduler state machine: placement queues, claiming queue, reservations and faults.
//!
//! Sans-IO: a driver (the simulator, or the daemon) feeds it inputs with the current time —
//! [`Scheduler::submit`], [`Scheduler::update_site_idle`], [`Scheduler::transfer_finished`],
//! [`Scheduler::component_finished`], … — asks [`Scheduler::poll_timeout`] when it wants to be
//! called back, calls [`Scheduler::handle_timeout`] then, and carries out the [`Action`]s it
//! pulls with [`Scheduler::poll_action`]. The core never reads a clock and performs no I/O.
//!
//! One concern per module, each adding methods to [`Scheduler`]:
//! - `action`, `error`, `job`: what goes out ([`Action`]), why a submission is refused
//!   ([`SubmitError`]), and what the core knows of a job, a component and a site.
//! - `submit`, `validate`: jobs entering the core (and re-adopted after a daemon restart).
//! - `info`: inputs from the information service and the administrator.
//! - `scan`: placement scans, bags of tasks, committing a placement.
//! - `claiming`: the claiming queue, ICP (re-placement, preemption), the launch.
//! - `reservation`: claiming with advance reservations.
//! - `broker`: placement by predicted TTD/TTS and co-allocation by reservations (001).
//! - `gate`, `bags`: held jobs and dependencies (on jobs, and on whole arrays and bags of
//!   tasks), outputs registered after success.
//! - `release`: faults, ends, cancellation, blacklisting, returns to the placement queue.
//! - `gridway`: REQUIREMENTS / RANK and GridWay's priorities and banning in placement tries,
//!   the `queueing = "gridway"` scan, the GW_* environment.
//! - `read`: read access for drivers, metrics and tests.
//!
//! This file holds the [`Scheduler`] itself and the timer interface (`poll_timeout`,
//! `handle_timeout`, `poll_action`).

mod action;
mod bags;
mod broker;
mod claiming;
mod error;
mod estimate;
mod gate;
mod gridway;
mod info;
mod job;
mod read;
mod release;
mod reservation;
mod scan;
mod submit;
mod validate;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::config::{HistorySeed, SchedulerConfig};
use crate::model::{JobId, Millis, NetworkForecast, ReplicaCatalogue, Site};
use crate::placement::{CloseToFiles, Policies};
use crate::queues::PlacementQueues;

pub use action::{Action, ComponentOutcome, TransferKey};
pub use bags::{BagError, BagTask};
pub use broker::BrokerStats;
pub use error::SubmitError;
pub use gate::{Dependency, DependencyKind, Gate, GateError};
pub use gridway::{GridwayHistory, SiteHistory};
pub use job::{Component, FileSourceRecord, Job, SchedulerStats, SiteView, TransferStatus};
pub use release::transition;

/// A job the scheduler is working on. Internal methods are only called for ids they took from
/// the scheduler's own tables in the same call (queues, claiming queue, a job's own actions),
/// and jobs are removed only by [`Scheduler::forget`] once ended, so the id is always there; a
/// missing one is a bug of the scheduler, not a condition to handle.
#[inline]
fn known(jobs: &mut BTreeMap<JobId, Job>, id: JobId) -> &mut Job {
    match jobs.get_mut(&id) {
        Some(job) => job,
        None => panic!("scheduler bug: job {id} is not in the scheduler's table"),
    }
}

/// The scheduling core.
#[derive(Debug, Clone)]
pub struct Scheduler {
    config: SchedulerConfig,
    sites: Vec<Site>,
    catalogue: ReplicaCatalogue,
    forecast: NetworkForecast,
    views: Vec<SiteView>,
    policies: Policies,
    jobs: BTreeMap<JobId, Job>,
    /// Per site: whether the core estimates its queue from its own jobs (`estimate.rs`).
    own_estimates: Vec<bool>,
    /// When they were last refreshed.
    own_estimated_at: Option<Millis>,
    /// Per site: the advance reservations granted through the reservation service there
    /// (`estimate.rs`: they hold processors in the site's queue estimate).
    service_reservations: Vec<Vec<crate::model::HeldReservation>>,
    queues: PlacementQueues,
    /// Jobs waiting on each job (the reverse of their dependencies).
    dependents: BTreeMap<JobId, BTreeSet<JobId>>,
    /// Arrays and bags of tasks declared as one unit, by id (`bags.rs`).
    bags: BTreeMap<JobId, bags::BagRecord>,
    /// Jobs waiting on each whole array or bag.
    bag_dependents: BTreeMap<JobId, BTreeSet<JobId>>,
    /// Claiming queue ordered by JCT.
    claiming: BTreeSet<(Millis, JobId)>,
    /// Jobs holding reservations, by the JST at which the reservations are claimed.
    reservation_starts: BTreeSet<(Millis, JobId)>,
    /// Held jobs by their begin time (`gate.rs`), queued then.
    begins: BTreeSet<(Millis, JobId)>,
    next_scan: Option<Millis>,
    actions: VecDeque<Action>,
    /// Queued jobs whose tries changed without a change of state, for `take_progress`.
    progress: Vec<JobId>,
    next_job: u64,
    stats: SchedulerStats,
    /// GridWay's matching caches, bans, usage and share history (`gridway.rs`).
    gridway: gridway::GridwayState,
    /// Queue estimates, reservation plans and counters of the broker (`broker.rs`).
    broker: broker::BrokerState,
    /// What a scan in progress watches for (`scan.rs`).
    scan_watch: ScanWatch,
}

/// While a scan walks a queue: the job it is trying, and whether the state of another job
/// changed since the scan began (or its queue held a job twice).
#[derive(Debug, Clone, Default)]
struct ScanWatch {
    trying: Option<JobId>,
    disturbed: bool,
}

impl Scheduler {
    /// A scheduler for `sites`, with the forecast and catalogue the information service gives.
    /// Sites start with all processors idle until the driver reports otherwise.
    pub fn new(config: SchedulerConfig, sites: Vec<Site>, forecast: NetworkForecast, catalogue: ReplicaCatalogue) -> Self {
        let cf = match &config.history {
            HistorySeed::AllPairs => CloseToFiles::all_pairs(sites.len()),
            HistorySeed::Empty => CloseToFiles::default(),
            HistorySeed::Pairs { pairs } => CloseToFiles::with_history(pairs.iter().copied()),
        };
        let gridway = gridway::GridwayState::new(&config, &sites);
        let sites_len = sites.len();
        let views = sites
            .iter()
            .map(|s| SiteView {
                idle: s.processors,
                placed_unclaimed: 0,
                consecutive_errors: 0,
                total_errors: 0,
                blacklisted: false,
                blacklisted_until: None,
                bans: 0,
            })
            .collect();
        Scheduler {
            queues: PlacementQueues::new(config.queue_weights),
            config,
            sites,
            catalogue,
            forecast,
            views,
            policies: Policies::new(cf),
            jobs: BTreeMap::new(),
            own_estimates: vec![false; sites_len],
            service_reservations: vec![Vec::new(); sites_len],
            own_estimated_at: None,
            claiming: BTreeSet::new(),
            dependents: BTreeMap::new(),
            bags: BTreeMap::new(),
            bag_dependents: BTreeMap::new(),
            reservation_starts: BTreeSet::new(),
            begins: BTreeSet::new(),
            next_scan: None,
            actions: VecDeque::new(),
            progress: Vec::new(),
            next_job: 1,
            stats: SchedulerStats::default(),
            gridway,
            broker: broker::BrokerState::new(sites_len),
            scan_watch: ScanWatch::default(),
        }
    }

    /// When the scheduler next wants [`Scheduler::handle_timeout`] to be called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Millis> {
        [
            self.next_scan,
            self.claiming.first().map(|x| x.0),
            self.reservation_starts.first().map(|x| x.0),
            self.begins.first().map(|x| x.0),
            self.views.iter().filter_map(|v| v.blacklisted_until).min(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs everything due at `now`: held jobs whose begin time came, claiming tries (in JCT
    /// order), reservation starts, and a placement scan.
    pub fn handle_timeout(&mut self, now: Millis) {
        self.begin_due(now);
        for v in &mut self.views {
            if v.blacklisted_until.is_some_and(|t| t <= now) {
                v.blacklisted = false;
                v.blacklisted_until = None;
                v.consecutive_errors = 0;
            }
        }
        while let Some(&(at, job)) = self.claiming.first() {
            if at > now {
                break;
            }
            self.claiming.remove(&(at, job));
            self.claiming_try(now, job);
        }
        while let Some(&(at, job)) = self.reservation_starts.first() {
            if at > now {
                break;
            }
            self.reservation_starts.remove(&(at, job));
            self.claim_reservations(now, job);
        }
        if self.next_scan.is_some_and(|t| t <= now) {
            self.next_scan = None;
            self.scan(now);
            self.arm_scan(now);
        }
    }

    /// Pulls the next decision to carry out.
    #[must_use = "a decision the driver does not carry out is lost"]
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Jobs still queued whose tries (and, after an anti-starvation promotion, priority)
    /// changed without a change of state since the last call: (job, placement tries, claiming
    /// tries, priority). For drivers that persist the queue (the daemon, so a restart keeps
    /// them); each job is listed once however many tries it had, so a driver that never asks
    /// (the simulator) holds at most one entry per job.
    pub fn take_progress(&mut self) -> Vec<(JobId, u32, u32, crate::model::Priority)> {
        let ids = std::mem::take(&mut self.progress);
        let take = |id: JobId, job: &mut Job| {
            job.progress_pending = false;
            (id, job.placement_tries, job.claiming_tries, job.priority)
        };
        if ids.len() < 64 || ids.len() * 2 < self.jobs.len() {
            return ids
                .into_iter()
                .filter_map(|id| self.jobs.get_mut(&id).map(|job| take(id, job)))
                .collect();
        }
        // After a scan of a long queue most jobs are listed: one walk of the table in id order
        // (its records in memory order) instead of one lookup each, the answers put back in
        // the order of `ids`.
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|&i| ids[i]);
        let mut found: Vec<Option<(JobId, u32, u32, crate::model::Priority)>> = vec![None; ids.len()];
        let mut jobs = self.jobs.iter_mut().peekable();
        for i in order {
            while jobs.next_if(|(&id, _)| id < ids[i]).is_some() {}
            if let Some((_, job)) = jobs.peek_mut().filter(|(&id, _)| id == ids[i]) {
                found[i] = Some(take(ids[i], job));
            }
        }
        found.into_iter().flatten().collect()
    }

    /// Pulls every pending decision.
    pub fn drain_actions(&mut self) -> impl Iterator<Item = Action> + '_ {
        self.actions.drain(..)
    }
}
