//! The scheduler state machine: placement queues, claiming queue, reservations and faults.
//!
//! Sans-IO: a driver (the simulator, or the daemon) feeds it inputs with the current time —
//! [`Scheduler::submit`], [`Scheduler::update_site_idle`], [`Scheduler::transfer_finished`],
//! [`Scheduler::component_finished`], … — asks [`Scheduler::poll_timeout`] when it wants to be
//! called back, calls [`Scheduler::handle_timeout`] then, and carries out the [`Action`]s it
//! pulls with [`Scheduler::poll_action`]. The core never reads a clock and performs no I/O.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::config::{HistorySeed, OnJstReached, ScanInterval, SchedulerConfig};
use crate::model::{FileMode, JobId, JobSpec, Millis, NetworkForecast, PolicyKind, Priority, ReplicaCatalogue, Site, SiteId, Timeline};
use crate::placement::{Capacity, CloseToFiles, ComponentPlacement, FileSource, PlacementContext, PlacementRequest, Policies};
use crate::queues::PlacementQueues;
use crate::state::{ComponentState, FailureReason, IllegalTransition, JobState};

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
    /// Copy (part of) an input file; report with [`Scheduler::transfer_finished`].
    StartTransfer {
        job: JobId,
        key: TransferKey,
        from: SiteId,
        bytes: u64,
    },
    /// Stop a transfer that is no longer needed.
    CancelTransfer { job: JobId, key: TransferKey },
    /// Ask the site's LRM for an advance reservation of `processors` during
    /// `[start, start + duration)`; answer with [`Scheduler::reservation_answer`].
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
    /// If the LRM refuses, report [`Scheduler::claim_rejected`].
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
}

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
}

/// One component of an active job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Component {
    pub processors: u32,
    pub fixed_site: Option<SiteId>,
    pub site: Option<SiteId>,
    pub state: ComponentState,
    pub sources: Vec<FileSourceRecord>,
    pub ftt_ms: Millis,
    /// Whether the component's processors come from an advance reservation.
    pub reserved: bool,
}

impl Component {
    /// A component not placed yet.
    pub fn unplaced(processors: u32, fixed_site: Option<SiteId>) -> Self {
        Component {
            processors,
            fixed_site,
            site: None,
            state: ComponentState::Unplaced,
            sources: Vec::new(),
            ftt_ms: 0,
            reserved: false,
        }
    }
}

/// Serializable copy of a [`FileSource`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSourceRecord {
    pub file: String,
    pub from: SiteId,
    pub bytes: u64,
    pub estimated_ms: Millis,
}

impl From<&FileSource> for FileSourceRecord {
    fn from(s: &FileSource) -> Self {
        FileSourceRecord {
            file: s.file.clone(),
            from: s.from,
            bytes: s.bytes,
            estimated_ms: s.estimated_ms,
        }
    }
}

/// Transfer progress of one [`TransferKey`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TransferStatus {
    InFlight,
    Done,
}

/// Everything the scheduler knows about one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    pub spec: JobSpec,
    pub state: JobState,
    /// Current priority (anti-starvation may raise it above the submitted one).
    pub priority: Priority,
    pub policy: PolicyKind,
    pub components: Vec<Component>,
    pub timeline: Timeline,
    /// Placement tries in all (every scan that considered the job, successful ones included).
    pub placement_tries: u32,
    /// Placement tries since the last promotion (anti-starvation).
    pub tries_at_level: u32,
    /// Claiming tries in all.
    pub claiming_tries: u32,
    /// Successful placements (more than one after returns to the queue).
    pub placements: u32,
    /// Current L.
    pub claim_fraction: f64,
    /// Current JCT while in the claiming queue.
    pub next_claim: Option<Millis>,
    /// Returns to the placement queue after soft errors.
    pub error_resubmissions: u32,
    /// Returns to the placement queue because the JST was reached.
    pub jst_returns: u32,
    pub preemptions: u32,
    pub transfers: BTreeMap<TransferKey, TransferStatus>,
    /// Whole files already copied to a site for this job (free to reuse after re-placement).
    pub staged: BTreeSet<(String, SiteId)>,
}

impl Job {
    /// Distinct sites of the current placement (job spread).
    pub fn sites(&self) -> BTreeSet<SiteId> {
        self.components.iter().filter_map(|c| c.site).collect()
    }

    pub fn total_processors(&self) -> u32 {
        self.components.iter().map(|c| c.processors).sum()
    }

    fn claimed_count(&self) -> usize {
        self.components
            .iter()
            .filter(|c| {
                matches!(
                    c.state,
                    ComponentState::Claimed | ComponentState::Running | ComponentState::Finished
                )
            })
            .count()
    }

    /// Components taking part in the current run (all but the skipped ones of a bag).
    pub fn active_count(&self) -> usize {
        self.components.iter().filter(|c| c.state != ComponentState::Skipped).count()
    }

    fn data_ready(&self) -> bool {
        self.transfers.values().all(|s| *s == TransferStatus::Done)
    }

    fn estimated_start(&self) -> Millis {
        self.timeline.estimated_start.unwrap_or(self.timeline.submitted)
    }
}

/// What the scheduler knows of one site.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteView {
    /// Idle processors as last reported by the site (minus claims issued since).
    pub idle: u32,
    /// Processors placed for grid jobs but not yet claimed (not given to other grid jobs).
    pub placed_unclaimed: u32,
    pub consecutive_errors: u32,
    pub total_errors: u32,
    pub blacklisted: bool,
    /// When a blacklisted site is re-admitted (with `blacklist_expiry_ms`).
    pub blacklisted_until: Option<Millis>,
}

/// Counters for metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerStats {
    pub scans: u64,
    pub placement_tries: u64,
    pub claiming_tries: u64,
    pub preemptions: u64,
    pub soft_errors: u64,
    pub max_queue_length: usize,
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
    queues: PlacementQueues,
    /// Claiming queue ordered by JCT.
    claiming: BTreeSet<(Millis, JobId)>,
    /// Jobs holding reservations, by the JST at which the reservations are claimed.
    reservation_starts: BTreeSet<(Millis, JobId)>,
    next_scan: Option<Millis>,
    actions: VecDeque<Action>,
    next_job: u64,
    stats: SchedulerStats,
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
        let views = sites
            .iter()
            .map(|s| SiteView {
                idle: s.processors,
                placed_unclaimed: 0,
                consecutive_errors: 0,
                total_errors: 0,
                blacklisted: false,
                blacklisted_until: None,
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
            claiming: BTreeSet::new(),
            reservation_starts: BTreeSet::new(),
            next_scan: None,
            actions: VecDeque::new(),
            next_job: 1,
            stats: SchedulerStats::default(),
        }
    }

    // ----- inputs -------------------------------------------------------------------------

    /// Validates and enqueues a job. The job's id is returned; it is placed at the next scan
    /// (or now, with `place_on_submit`).
    pub fn submit(&mut self, now: Millis, spec: JobSpec) -> Result<JobId, SubmitError> {
        self.validate(&spec)?;
        let id = JobId(self.next_job);
        self.next_job += 1;
        self.insert_job(now, id, spec);
        Ok(id)
    }

    /// Like [`Scheduler::submit`] with an id chosen by the caller (the daemon allocates ids
    /// durably before the core sees the job). Ids must be unique.
    pub fn submit_with_id(&mut self, now: Millis, id: JobId, spec: JobSpec) -> Result<JobId, SubmitError> {
        self.validate(&spec)?;
        self.next_job = self.next_job.max(id.0 + 1);
        self.insert_job(now, id, spec);
        Ok(id)
    }

    /// Checks a job as [`Scheduler::submit`] would, without enqueueing it.
    pub fn check(&self, spec: &JobSpec) -> Result<(), SubmitError> {
        self.validate(spec)
    }

    /// After a daemon restart: gives a job resubmitted with [`Scheduler::submit_with_id`] back
    /// its submission time, tries and (possibly promoted) priority. Only for queued jobs; the
    /// job keeps its place in the queue of `priority` (appended in the order of these calls).
    pub fn restore_progress(
        &mut self,
        id: JobId,
        submitted: Millis,
        placement_tries: u32,
        claiming_tries: u32,
        error_resubmissions: u32,
        priority: Priority,
    ) {
        let Some(job) = self.jobs.get_mut(&id) else { return };
        if job.state != JobState::Queued {
            return;
        }
        job.timeline.submitted = submitted;
        job.placement_tries = placement_tries;
        job.claiming_tries = claiming_tries;
        job.error_resubmissions = error_resubmissions;
        if job.priority != priority {
            job.priority = priority;
            self.queues.remove(id);
            self.queues.push(priority, id);
        }
    }

    /// After a daemon restart: re-adopts a job whose components were running when the daemon
    /// stopped. The job enters directly in [`JobState::Running`]; `placement[i]` is component
    /// `i`'s (site, processors), or `None` for a component of a bag that was skipped in that run.
    /// Running components' processors count as claimed (the site's idle view is lowered). No
    /// action is emitted; [`Scheduler::component_finished`] then works as for any running job.
    pub fn adopt_running(
        &mut self,
        id: JobId,
        spec: JobSpec,
        placement: &[Option<(SiteId, u32)>],
        timeline: Timeline,
        placement_tries: u32,
        claiming_tries: u32,
    ) -> Result<JobId, SubmitError> {
        self.validate(&spec)?;
        if let Some((bad, site)) = placement
            .iter()
            .enumerate()
            .find_map(|(i, p)| p.filter(|(s, _)| s.index() >= self.sites.len()).map(|(s, _)| (i, s)))
        {
            return Err(SubmitError::UnknownSite {
                job: spec.name.clone(),
                component: bad,
                site,
            });
        }
        if spec.flexible.is_none() && placement.len() != spec.components.len() {
            return Err(SubmitError::PlacementMismatch {
                job: spec.name.clone(),
                placements: placement.len(),
                components: spec.components.len(),
            });
        }
        self.next_job = self.next_job.max(id.0 + 1);
        let components = placement
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let fixed = spec.components.get(i).and_then(|c| c.fixed_site);
                match *p {
                    Some((site, processors)) => Component {
                        site: Some(site),
                        state: ComponentState::Running,
                        ..Component::unplaced(processors, fixed)
                    },
                    None => Component {
                        state: ComponentState::Skipped,
                        ..Component::unplaced(spec.components.get(i).map_or(0, |c| c.processors), fixed)
                    },
                }
            })
            .collect::<Vec<_>>();
        for c in components.iter().filter(|c| c.state == ComponentState::Running) {
            let v = &mut self.views[c.site.unwrap().index()];
            v.idle = v.idle.saturating_sub(c.processors);
        }
        let mut job = self.new_job(id, spec, components, JobState::Running, timeline);
        job.placement_tries = placement_tries;
        job.claiming_tries = claiming_tries;
        job.placements = 1;
        self.jobs.insert(id, job);
        Ok(id)
    }

    /// A job record with no tries yet; flexible jobs always use FCM.
    fn new_job(&self, id: JobId, spec: JobSpec, components: Vec<Component>, state: JobState, timeline: Timeline) -> Job {
        let policy = match (&spec.flexible, spec.policy) {
            (Some(_), _) => PolicyKind::Fcm,
            (None, Some(p)) => p,
            (None, None) => self.config.default_policy,
        };
        Job {
            id,
            priority: spec.priority,
            policy,
            components,
            spec,
            state,
            timeline,
            placement_tries: 0,
            tries_at_level: 0,
            claiming_tries: 0,
            placements: 0,
            claim_fraction: self.config.claim_fraction,
            next_claim: None,
            error_resubmissions: 0,
            jst_returns: 0,
            preemptions: 0,
            transfers: BTreeMap::new(),
            staged: BTreeSet::new(),
        }
    }

    fn insert_job(&mut self, now: Millis, id: JobId, spec: JobSpec) {
        let components = spec
            .components
            .iter()
            .map(|c| Component::unplaced(c.processors, c.fixed_site))
            .collect();
        let timeline = Timeline {
            submitted: now,
            queued: now,
            ..Timeline::default()
        };
        let job = self.new_job(id, spec, components, JobState::Queued, timeline);
        self.queues.push(job.priority, id);
        self.jobs.insert(id, job);
        if self.config.place_on_submit {
            let mut capacity = self.capacity();
            self.try_place_job(now, id, &mut capacity);
            self.prune_queue_entry(id);
        }
        // Measured after the try at submission: a job placed at once never waited in the queue.
        self.note_queue_length();
        self.arm_scan(now);
    }

    fn validate(&self, spec: &JobSpec) -> Result<(), SubmitError> {
        let job = || spec.name.clone();
        let largest = self.sites.iter().map(|s| s.processors).max().unwrap_or(0);
        if let Some(flex) = &spec.flexible {
            let total_procs: u32 = self.sites.iter().map(|s| s.processors).sum();
            let reason = if flex.total == 0 {
                Some("total must be positive".to_string())
            } else if flex.max_components == 0 {
                Some("max_components must be at least 1".to_string())
            } else if flex.total > total_procs {
                Some(format!("total {} exceeds the grid's {} processors", flex.total, total_procs))
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(SubmitError::InvalidFlexible { job: job(), reason });
            }
        } else if spec.components.is_empty() {
            return Err(SubmitError::NoComponents { job: job() });
        }
        for (i, c) in spec.components.iter().enumerate() {
            if c.processors == 0 {
                return Err(SubmitError::ZeroProcessors { job: job(), component: i });
            }
            match c.fixed_site {
                Some(site) => {
                    let Some(s) = self.sites.get(site.index()) else {
                        return Err(SubmitError::UnknownSite {
                            job: job(),
                            component: i,
                            site,
                        });
                    };
                    if c.processors > s.processors {
                        return Err(SubmitError::FixedSiteTooSmall {
                            job: job(),
                            component: i,
                            site: s.name.clone(),
                            processors: c.processors,
                            capacity: s.processors,
                        });
                    }
                }
                None if c.processors > largest => {
                    return Err(SubmitError::ComponentTooLarge {
                        job: job(),
                        component: i,
                        processors: c.processors,
                        largest,
                    });
                }
                None => {}
            }
        }
        if spec.flexible.is_none() {
            let capacity: u64 = self.sites.iter().map(|s| s.processors as u64).sum();
            // A bag needs only its k smallest components to fit.
            let mut sizes: Vec<u64> = spec.components.iter().map(|c| c.processors as u64).collect();
            sizes.sort_unstable();
            let needed = spec.min_components.map_or(sizes.len(), |k| (k as usize).min(sizes.len()));
            let processors: u64 = sizes[..needed].iter().sum();
            if processors > capacity {
                return Err(SubmitError::JobTooLarge {
                    job: job(),
                    processors,
                    capacity,
                });
            }
            for (i, site) in self.sites.iter().enumerate() {
                let fixed: u64 = spec
                    .components
                    .iter()
                    .filter(|c| c.fixed_site == Some(SiteId(i as u32)))
                    .map(|c| c.processors as u64)
                    .sum();
                if fixed > site.processors as u64 {
                    return Err(SubmitError::FixedSiteOverbooked {
                        job: job(),
                        site: site.name.clone(),
                        processors: fixed,
                        capacity: site.processors,
                    });
                }
            }
        }
        if let Some(min) = spec.min_components {
            if min == 0 || min as usize > spec.components.len() {
                return Err(SubmitError::InvalidMinComponents {
                    job: job(),
                    min,
                    components: spec.components.len(),
                });
            }
        }
        for f in &spec.input_files {
            match self.catalogue.get(f) {
                None => {
                    return Err(SubmitError::UnknownFile {
                        job: job(),
                        file: f.clone(),
                    })
                }
                Some(e) if e.replicas.is_empty() => {
                    return Err(SubmitError::NoReplica {
                        job: job(),
                        file: f.clone(),
                    })
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// The site's LRM reports `idle` processors (not used by local jobs nor by our claims).
    pub fn update_site_idle(&mut self, site: SiteId, idle: u32) {
        self.views[site.index()].idle = idle;
    }

    /// The information service has a new bandwidth/latency forecast for a pair of sites.
    pub fn update_forecast(&mut self, from: SiteId, to: SiteId, bandwidth_bps: f64, latency_ms: Millis) {
        self.forecast.set(from, to, bandwidth_bps, latency_ms);
    }

    /// The replica catalogue changed (a file registered or a replica added).
    pub fn catalogue_mut(&mut self) -> &mut ReplicaCatalogue {
        &mut self.catalogue
    }

    /// Blacklists or re-admits a site by hand (an administrator's decision).
    pub fn set_blacklisted(&mut self, site: SiteId, blacklisted: bool) {
        let v = &mut self.views[site.index()];
        v.blacklisted = blacklisted;
        v.blacklisted_until = None;
        if !blacklisted {
            v.consecutive_errors = 0;
        }
    }

    /// A transfer the core asked for has completed.
    pub fn transfer_finished(&mut self, now: Millis, job: JobId, key: &TransferKey) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        let Some(status) = j.transfers.get_mut(key) else { return };
        *status = TransferStatus::Done;
        if key.chunk.is_none() {
            j.staged.insert((key.file.clone(), key.to));
        }
        self.maybe_launch(now, job);
    }

    /// A transfer failed at the destination or source site: a soft error of the destination;
    /// the job goes back to the placement queue.
    pub fn transfer_failed(&mut self, now: Millis, job: JobId, key: &TransferKey) {
        if !self.jobs.get(&job).is_some_and(|j| j.transfers.contains_key(key)) {
            return;
        }
        // The failed transfer is over: not one to cancel when the job is released.
        self.jobs.get_mut(&job).unwrap().transfers.remove(key);
        self.record_soft_error(now, key.to);
        self.return_to_queue(now, job, Requeue::SoftError);
    }

    /// The LRM answered a reservation request.
    pub fn reservation_answer(&mut self, now: Millis, job: JobId, component: u32, granted: bool) {
        let Some(j) = self.jobs.get(&job) else { return };
        if j.state != JobState::Placed {
            return;
        }
        if !granted {
            // Treat as an unsuccessful placement: try again at a later scan. The refused
            // reservation does not exist, so it is not cancelled (only un-placed).
            if let Some(c) = self.jobs.get_mut(&job).unwrap().components.get_mut(component as usize) {
                if c.state == ComponentState::Reserved {
                    c.state = ComponentState::Placed;
                }
            }
            self.return_to_queue(now, job, Requeue::ReservationRejected);
        }
    }

    /// The LRM refused a [`Action::Claim`] (fewer idle processors than the core believed, or
    /// a fault of the site when `soft_error`). The job goes back to the placement queue.
    pub fn claim_rejected(&mut self, now: Millis, job: JobId, component: u32, soft_error: bool) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        if j.state.is_terminal() {
            return;
        }
        let Some(c) = j.components.get_mut(component as usize) else {
            return;
        };
        if !matches!(c.state, ComponentState::Claimed | ComponentState::Running) {
            return;
        }
        let site = c.site.expect("claimed component has a site");
        // It never got its processors: nothing to abort at the site.
        c.state = ComponentState::Unplaced;
        if soft_error {
            self.record_soft_error(now, site);
        }
        self.return_to_queue(now, job, if soft_error { Requeue::SoftError } else { Requeue::ClaimRejected });
    }

    /// A component ended.
    pub fn component_finished(&mut self, now: Millis, job: JobId, component: u32, outcome: ComponentOutcome) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        if j.state != JobState::Running {
            return;
        }
        let Some(c) = j.components.get_mut(component as usize) else {
            return;
        };
        if c.state != ComponentState::Running {
            return;
        }
        let site = c.site.expect("running component has a site");
        c.state = ComponentState::Finished;
        match outcome {
            ComponentOutcome::Success => {
                self.views[site.index()].consecutive_errors = 0;
                let j = &self.jobs[&job];
                if j.components
                    .iter()
                    .all(|c| matches!(c.state, ComponentState::Finished | ComponentState::Skipped))
                {
                    self.jobs.get_mut(&job).unwrap().timeline.finished = Some(now);
                    self.set_state(now, job, JobState::Succeeded);
                }
            }
            ComponentOutcome::SoftError => {
                self.record_soft_error(now, site);
                self.return_to_queue(now, job, Requeue::SoftError);
            }
            ComponentOutcome::ApplicationError => {
                self.release_placement(job);
                self.jobs.get_mut(&job).unwrap().timeline.finished = Some(now);
                self.set_state(now, job, JobState::Failed(FailureReason::ApplicationError));
            }
        }
    }

    /// Cancels a job in any non-terminal state. Returns false when it is unknown or finished.
    pub fn cancel(&mut self, now: Millis, job: JobId) -> bool {
        let Some(j) = self.jobs.get(&job) else { return false };
        if j.state.is_terminal() {
            return false;
        }
        self.release_placement(job);
        self.queues.remove(job);
        let j = self.jobs.get_mut(&job).unwrap();
        j.timeline.finished = Some(now);
        self.set_state(now, job, JobState::Cancelled);
        true
    }

    // ----- timers -------------------------------------------------------------------------

    /// When the scheduler next wants [`Scheduler::handle_timeout`] to be called.
    pub fn poll_timeout(&self) -> Option<Millis> {
        [
            self.next_scan,
            self.claiming.first().map(|x| x.0),
            self.reservation_starts.first().map(|x| x.0),
            self.views.iter().filter_map(|v| v.blacklisted_until).min(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs everything due at `now`: claiming tries (in JCT order), reservation starts, and
    /// a placement scan.
    pub fn handle_timeout(&mut self, now: Millis) {
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
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Pulls every pending decision.
    pub fn drain_actions(&mut self) -> impl Iterator<Item = Action> + '_ {
        self.actions.drain(..)
    }

    // ----- read access --------------------------------------------------------------------

    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.jobs.get(&id)
    }
    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values()
    }
    pub fn sites(&self) -> &[Site] {
        &self.sites
    }
    pub fn site_view(&self, site: SiteId) -> &SiteView {
        &self.views[site.index()]
    }
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }
    pub fn catalogue(&self) -> &ReplicaCatalogue {
        &self.catalogue
    }
    pub fn forecast(&self) -> &NetworkForecast {
        &self.forecast
    }
    pub fn queue_length(&self) -> usize {
        self.queues.len()
    }
    pub fn queued(&self, priority: Priority) -> impl Iterator<Item = JobId> + '_ {
        self.queues.queue(priority).iter().copied()
    }
    pub fn stats(&self) -> &SchedulerStats {
        &self.stats
    }
    /// CF's history table H.
    pub fn history(&self) -> &BTreeSet<(SiteId, SiteId)> {
        self.policies.cf.history()
    }
    /// Jobs not yet in a terminal state.
    pub fn active_jobs(&self) -> usize {
        self.jobs.values().filter(|j| !j.state.is_terminal()).count()
    }

    /// Processors per site held by grid components (claimed, waiting or running).
    pub fn claimed_processors(&self, site: SiteId) -> u32 {
        self.jobs
            .values()
            .filter(|j| matches!(j.state, JobState::Placed | JobState::Claimed | JobState::Running))
            .flat_map(|j| j.components.iter())
            .filter(|c| c.site == Some(site) && matches!(c.state, ComponentState::Claimed | ComponentState::Running))
            .map(|c| c.processors)
            .sum()
    }

    // ----- placement ----------------------------------------------------------------------

    fn arm_scan(&mut self, now: Millis) {
        if self.queues.is_empty() {
            self.next_scan = None;
            return;
        }
        if self.next_scan.is_some() {
            return;
        }
        let interval = match self.config.scan_interval {
            ScanInterval::Fixed { interval_ms } => interval_ms,
            ScanInterval::Adaptive { base_ms } => {
                let n = self.queues.len() as u64;
                let tries: u64 = self.queues.iter().map(|id| self.jobs[&id].placement_tries.max(1) as u64).sum();
                (base_ms * tries / n.max(1)).max(base_ms)
            }
        };
        // Scans are periodic: the next one is on the interval grid after now.
        self.next_scan = Some((now / interval + 1) * interval);
    }

    fn note_queue_length(&mut self) {
        self.stats.max_queue_length = self.stats.max_queue_length.max(self.queues.len());
    }

    /// One scan: pick a queue by weighted round-robin, walk it head to tail, place what fits.
    fn scan(&mut self, now: Millis) {
        let Some(priority) = self.queues.next_queue() else { return };
        self.stats.scans += 1;
        let snapshot: Vec<JobId> = self.queues.queue(priority).iter().copied().collect();
        // One capacity view per scan, lowered by each placement the scan makes.
        let mut capacity = self.capacity();
        for id in snapshot {
            self.try_place_job(now, id, &mut capacity);
        }
        // Keep only jobs still queued at this level, in order; promoted jobs were appended
        // to their new queue by `try_place_job`.
        let kept: VecDeque<JobId> = self
            .queues
            .queue(priority)
            .iter()
            .copied()
            .filter(|id| self.jobs[id].state == JobState::Queued && self.jobs[id].priority == priority)
            .collect();
        self.queues.set_queue(priority, kept);
    }

    fn prune_queue_entry(&mut self, id: JobId) {
        if self.jobs[&id].state != JobState::Queued {
            self.queues.remove(id);
        }
    }

    fn capacity(&self) -> Capacity {
        let available = self
            .views
            .iter()
            .map(|v| {
                if v.blacklisted {
                    0
                } else {
                    v.idle.saturating_sub(v.placed_unclaimed)
                }
            })
            .collect();
        Capacity::with_excluded_sites(available, self.views.iter().any(|v| v.blacklisted))
    }

    /// One placement try of a queued job. On success the job enters the claiming queue.
    fn try_place_job(&mut self, now: Millis, id: JobId, capacity: &mut Capacity) {
        let job = &self.jobs[&id];
        if job.state != JobState::Queued {
            return;
        }
        self.stats.placement_tries += 1;
        // Only a blacklisted site can make a job that passed validation impossible to hold.
        if self.config.blacklist_expiry_ms.is_none() && capacity.has_excluded_sites() && !self.could_ever_fit(id) {
            self.queues.remove(id);
            let job = self.jobs.get_mut(&id).unwrap();
            job.placement_tries += 1;
            job.timeline.finished = Some(now);
            self.set_state(now, id, JobState::Failed(FailureReason::Unplaceable));
            return;
        }
        let decision = self.decide_placement(id, capacity);
        let job = self.jobs.get_mut(&id).unwrap();
        job.placement_tries += 1;
        job.tries_at_level += 1;
        match decision {
            Some(placements) => self.commit_placement(now, id, placements),
            None => {
                let job = self.jobs.get_mut(&id).unwrap();
                if self.config.max_placement_tries.is_some_and(|max| job.placement_tries >= max) {
                    job.timeline.finished = Some(now);
                    self.queues.remove(id);
                    self.set_state(now, id, JobState::Failed(FailureReason::PlacementTries));
                    return;
                }
                if let Some(p) = self.config.anti_starvation_tries {
                    let job = self.jobs.get_mut(&id).unwrap();
                    if job.tries_at_level >= p && matches!(job.priority, Priority::Low | Priority::High) {
                        job.priority = job.priority.promoted();
                        job.tries_at_level = 0;
                        let new = job.priority;
                        self.queues.remove(id);
                        self.queues.push(new, id);
                    }
                }
            }
        }
    }

    /// Whether the sites that are not blacklisted could hold the job if they were empty.
    fn could_ever_fit(&self, id: JobId) -> bool {
        let job = &self.jobs[&id];
        let usable = |s: usize| !self.views[s].blacklisted;
        let largest_site = (0..self.sites.len())
            .filter(|&s| usable(s))
            .map(|s| self.sites[s].processors)
            .max()
            .unwrap_or(0);
        let total: u64 = (0..self.sites.len())
            .filter(|&s| usable(s))
            .map(|s| self.sites[s].processors as u64)
            .sum();
        if let Some(f) = &job.spec.flexible {
            return f.total as u64 <= total;
        }
        let fixed_ok = job.components.iter().all(|c| c.fixed_site.is_none_or(|s| usable(s.index())));
        let free: Vec<u32> = job
            .components
            .iter()
            .filter(|c| c.fixed_site.is_none())
            .map(|c| c.processors)
            .collect();
        if job.spec.min_components.is_some_and(|k| (k as usize) < job.components.len()) {
            // A bag: at least k of its components must be able to fit somewhere.
            let fitting = job.components.iter().filter(|c| c.processors <= largest_site).count();
            return fitting >= job.spec.min_components.unwrap_or(0) as usize;
        }
        fixed_ok && free.iter().all(|&p| p <= largest_site) && job.total_processors() as u64 <= total
    }

    /// Asks the job's policy for a placement of every component (fixed ones at their site).
    fn decide_placement(&mut self, id: JobId, available: &mut Capacity) -> Option<Vec<ComponentPlacement>> {
        let job = &self.jobs[&id];
        // Fast rejection without asking a policy: a component larger than every site's
        // available processors, or a flexible total larger than their sum.
        let largest = job
            .components
            .iter()
            .filter(|c| c.fixed_site.is_none())
            .map(|c| c.processors)
            .max()
            .unwrap_or(0);
        if largest > available.max_available()
            || job
                .spec
                .flexible
                .as_ref()
                .is_some_and(|f| f.total as u64 > available.total_available())
        {
            return None;
        }
        let mut capacity = available.clone();
        let ctx = PlacementContext {
            sites: &self.sites,
            catalogue: &self.catalogue,
            forecast: &self.forecast,
            staged: &job.staged,
        };
        let mut out = Vec::new();
        let mut free: Vec<(usize, u32)> = Vec::new();
        let n = job.components.len();
        let bag_minimum = job.spec.min_components.filter(|&k| (k as usize) < n && job.spec.flexible.is_none());
        for (i, c) in job.components.iter().enumerate() {
            match c.fixed_site {
                Some(site) => {
                    if !capacity.fits(site, c.processors) || self.views[site.index()].blacklisted {
                        if let Some(k) = bag_minimum {
                            return self.place_bag(id, k as usize, available);
                        }
                        return None;
                    }
                    capacity.take(site, c.processors);
                    out.push(placement_at(&ctx, &job.spec, n, i, site, c.processors));
                }
                None => free.push((i, c.processors)),
            }
        }
        let req = PlacementRequest {
            components: &free,
            flexible: job.spec.flexible.as_ref(),
            files: &job.spec.input_files,
            file_mode: job.spec.file_mode,
            job_components: n.max(1),
        };
        if !free.is_empty() || req.flexible.is_some() {
            let policy = self.policies.get_mut(job.policy);
            match policy.place(&req, &mut capacity, &ctx) {
                Some(placed) => out.extend(placed),
                None => return bag_minimum.and_then(|k| self.place_bag(id, k as usize, available)),
            }
        }
        out.sort_by_key(|c| c.component);
        *available = capacity;
        Some(out)
    }

    /// Bag of tasks (003 §3.3, "at least k components placed"): when the whole bag does not fit,
    /// place components one at a time, largest first (fixed ones at their site, the others with
    /// the job's policy); succeed if at least `k` got a site. The rest are skipped in this run.
    fn place_bag(&mut self, id: JobId, k: usize, available: &mut Capacity) -> Option<Vec<ComponentPlacement>> {
        let job = &self.jobs[&id];
        let mut capacity = available.clone();
        let ctx = PlacementContext {
            sites: &self.sites,
            catalogue: &self.catalogue,
            forecast: &self.forecast,
            staged: &job.staged,
        };
        let n = job.components.len();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(job.components[i].processors), i));
        let mut out = Vec::new();
        for i in order {
            let c = &job.components[i];
            match c.fixed_site {
                Some(site) => {
                    if capacity.fits(site, c.processors) && !self.views[site.index()].blacklisted {
                        capacity.take(site, c.processors);
                        out.push(placement_at(&ctx, &job.spec, n, i, site, c.processors));
                    }
                }
                None => {
                    let one = [(i, c.processors)];
                    let req = PlacementRequest {
                        components: &one,
                        flexible: None,
                        files: &job.spec.input_files,
                        file_mode: job.spec.file_mode,
                        job_components: n,
                    };
                    if let Some(mut placed) = self.policies.get_mut(job.policy).place(&req, &mut capacity, &ctx) {
                        out.append(&mut placed);
                    }
                }
            }
        }
        if out.len() < k {
            return None;
        }
        out.sort_by_key(|c| c.component);
        *available = capacity;
        Some(out)
    }

    fn commit_placement(&mut self, now: Millis, id: JobId, placements: Vec<ComponentPlacement>) {
        let job = self.jobs.get_mut(&id).unwrap();
        if job.spec.flexible.is_some() {
            job.components = placements.iter().map(|p| Component::unplaced(p.processors, None)).collect();
        }
        if job.spec.flexible.is_none() && placements.len() < job.components.len() {
            for c in &mut job.components {
                c.state = ComponentState::Skipped;
            }
        }
        let mut ftt = 0;
        let mut any_reserved = false;
        let mut any_claim = false;
        for p in &placements {
            let reservable = self.sites[p.site.index()].supports_reservations;
            let c = &mut job.components[p.component];
            c.site = Some(p.site);
            c.sources = p.sources.iter().map(FileSourceRecord::from).collect();
            c.ftt_ms = p.ftt_ms;
            c.reserved = reservable;
            c.state = if reservable {
                ComponentState::Reserved
            } else {
                ComponentState::Placed
            };
            any_reserved |= reservable;
            any_claim |= !reservable;
            self.views[p.site.index()].placed_unclaimed += p.processors;
            ftt = ftt.max(p.ftt_ms);
        }
        let chunked = job.spec.file_mode == FileMode::Chunks;
        let mut new_transfers = Vec::new();
        for p in &placements {
            for s in &p.sources {
                let key = TransferKey {
                    file: s.file.clone(),
                    to: p.site,
                    chunk: chunked.then_some(p.component as u32),
                };
                if s.from == p.site || job.transfers.contains_key(&key) {
                    continue;
                }
                job.transfers.insert(key.clone(), TransferStatus::InFlight);
                new_transfers.push(Action::StartTransfer {
                    job: id,
                    key,
                    from: s.from,
                    bytes: s.bytes,
                });
            }
        }
        let tl = &mut job.timeline;
        tl.total_placement_ms += now.saturating_sub(tl.queued);
        tl.placed = Some(now);
        tl.first_placed.get_or_insert(now);
        tl.ftt_ms = ftt;
        tl.claimed = None;
        let jst = now + ftt;
        tl.estimated_start = Some(jst);
        tl.first_estimated_start.get_or_insert(jst);
        job.placements += 1;
        let jct = now + (job.claim_fraction * ftt as f64).round() as Millis;
        job.next_claim = any_claim.then_some(jct);
        let duration = job.spec.runtime_estimate_ms;
        let reserve: Vec<Action> = job
            .components
            .iter()
            .enumerate()
            .filter(|(_, c)| c.reserved)
            .map(|(i, c)| Action::Reserve {
                job: id,
                component: i as u32,
                site: c.site.unwrap(),
                processors: c.processors,
                start: jst,
                duration: duration.max(1),
            })
            .collect();
        self.set_state(now, id, JobState::Placed);
        self.actions.extend(new_transfers);
        self.actions.extend(reserve);
        if any_reserved {
            self.reservation_starts.insert((jst, id));
        }
        if any_claim {
            self.schedule_claim(id, jct);
        }
        if jct <= now && any_claim {
            // L·FTT = 0: claim right at placement.
            self.claiming.remove(&(jct, id));
            self.claiming_try(now, id);
        }
    }

    // ----- claiming -----------------------------------------------------------------------

    fn schedule_claim(&mut self, id: JobId, at: Millis) {
        let job = self.jobs.get_mut(&id).unwrap();
        if let Some(old) = job.next_claim.take() {
            self.claiming.remove(&(old, id));
        }
        job.next_claim = Some(at);
        self.claiming.insert((at, id));
    }

    /// One claiming try with the Incremental Claiming Policy (003 Alg. 2).
    fn claiming_try(&mut self, now: Millis, id: JobId) {
        let Some(job) = self.jobs.get_mut(&id) else { return };
        if job.state != JobState::Placed {
            return;
        }
        job.next_claim = None;
        job.claiming_tries += 1;
        self.stats.claiming_tries += 1;
        if self.config.max_claiming_tries.is_some_and(|m| job.claiming_tries > m) {
            self.release_placement(id);
            self.jobs.get_mut(&id).unwrap().timeline.finished = Some(now);
            self.set_state(now, id, JobState::Failed(FailureReason::ClaimingTries));
            return;
        }
        let jst = job.estimated_start();
        let n = job.active_count();
        // Sets of Alg. 2 line 1: C_prev (already claimed or secured by reservation), C_now, C_not.
        let mut idle: Vec<u32> = self.views.iter().map(|v| if v.blacklisted { 0 } else { v.idle }).collect();
        let mut prev = 0;
        let mut now_set = Vec::new();
        let mut not_set = Vec::new();
        for (i, c) in job.components.iter().enumerate() {
            match c.state {
                ComponentState::Claimed | ComponentState::Running | ComponentState::Reserved => prev += 1,
                ComponentState::Placed => {
                    let s = c.site.unwrap().index();
                    if idle[s] >= c.processors {
                        idle[s] -= c.processors;
                        now_set.push(i);
                    } else {
                        not_set.push(i);
                    }
                }
                _ => {}
            }
        }
        let fraction = (prev + now_set.len()) as f64 / n as f64;
        if fraction + 1e-9 >= self.config.claim_threshold {
            for i in not_set {
                if self.icp_recover(now, id, i, jst, &mut idle).is_some() {
                    now_set.push(i);
                }
            }
            for i in now_set {
                self.claim_component(id, i);
            }
        }
        let job = &self.jobs[&id];
        if job.state != JobState::Placed {
            return;
        }
        let all_secured = job.components.iter().all(|c| {
            matches!(
                c.state,
                ComponentState::Claimed | ComponentState::Running | ComponentState::Reserved | ComponentState::Skipped
            )
        });
        if all_secured {
            if job.claimed_count() == n {
                self.jobs.get_mut(&id).unwrap().timeline.claimed = Some(now);
                self.set_state(now, id, JobState::Claimed);
                self.maybe_launch(now, id);
            }
            return;
        }
        // Claiming failed for some component: the next try, or the JST was reached.
        let jct = now;
        let l = job.claim_fraction;
        if jct < jst {
            let step = ((l * (jst - jct) as f64).round() as Millis).max(self.config.min_claim_retry_ms.max(1));
            self.schedule_claim(id, (jct + step).min(jst));
            return;
        }
        match self.config.on_jst_reached {
            OnJstReached::ReturnToPlacement => self.return_to_queue(now, id, Requeue::JstReached),
            OnJstReached::ExtendJst { interval_ms } => {
                let job = self.jobs.get_mut(&id).unwrap();
                let new_jst = jst + interval_ms.max(1);
                job.timeline.estimated_start = Some(new_jst);
                job.jst_returns += 1;
                let step = ((l * (new_jst - now) as f64).round() as Millis).max(self.config.min_claim_retry_ms.max(1));
                self.schedule_claim(id, (now + step).min(new_jst));
            }
        }
    }

    /// ICP lines 4–14 for one component that cannot be claimed where it was placed: re-place it
    /// with the job's policy if its file can arrive before the JST; otherwise, unless the job is
    /// super-low, preempt lower-priority grid jobs at its site. Returns the component's site
    /// when it can now be claimed.
    fn icp_recover(&mut self, now: Millis, id: JobId, i: usize, jst: Millis, idle: &mut [u32]) -> Option<SiteId> {
        let job = &self.jobs[&id];
        let comp = &job.components[i];
        let procs = comp.processors;
        let old_site = comp.site.unwrap();
        let mut target = old_site;
        if comp.fixed_site.is_none() {
            // Line 5: Place(j) with the job's policy against what is idle now.
            let mut capacity = Capacity::new(
                self.views
                    .iter()
                    .enumerate()
                    .map(|(s, v)| {
                        if v.blacklisted {
                            0
                        } else {
                            idle[s].saturating_sub(v.placed_unclaimed)
                        }
                    })
                    .collect(),
            );
            let ctx = PlacementContext {
                sites: &self.sites,
                catalogue: &self.catalogue,
                forecast: &self.forecast,
                staged: &job.staged,
            };
            let one = [(i, procs)];
            let req = PlacementRequest {
                components: &one,
                flexible: None,
                files: &job.spec.input_files,
                file_mode: job.spec.file_mode,
                job_components: job.components.len(),
            };
            let kind = if job.policy == PolicyKind::Fcm {
                PolicyKind::Cm
            } else {
                job.policy
            };
            let placed = self
                .policies
                .get_mut(kind)
                .place(&req, &mut capacity, &ctx)
                .and_then(|mut v| v.pop());
            if let Some(p) = placed {
                if now + p.ftt_ms < jst && !self.sites[p.site.index()].supports_reservations {
                    idle[p.site.index()] -= procs;
                    self.move_component(id, i, p);
                    return Some(self.jobs[&id].components[i].site.unwrap());
                }
                target = p.site;
            }
        }
        // Lines 8–14: preempt lower-priority grid jobs at the target site (never to start a
        // component on a blacklisted site).
        let job = &self.jobs[&id];
        if !self.config.preemption || job.priority == Priority::SuperLow || self.views[target.index()].blacklisted {
            return None;
        }
        let my_rank = job.priority.rank();
        let mut victims: Vec<(Millis, JobId, u32)> = self
            .jobs
            .values()
            .filter(|v| v.id != id && v.priority.rank() > my_rank)
            .filter(|v| matches!(v.state, JobState::Placed | JobState::Claimed | JobState::Running))
            .filter_map(|v| {
                let held: u32 = v
                    .components
                    .iter()
                    .filter(|c| c.site == Some(target) && matches!(c.state, ComponentState::Claimed | ComponentState::Running))
                    .map(|c| c.processors)
                    .sum();
                (held > 0).then(|| (v.estimated_start(), v.id, held))
            })
            .collect();
        let preemptible: u32 = victims.iter().map(|v| v.2).sum();
        if idle[target.index()] + preemptible < procs {
            return None;
        }
        // Newest JST first.
        victims.sort_by_key(|&(jst, vid, _)| (std::cmp::Reverse(jst), std::cmp::Reverse(vid)));
        for (_, vid, held) in victims {
            if idle[target.index()] >= procs {
                break;
            }
            self.stats.preemptions += 1;
            self.jobs.get_mut(&vid).unwrap().preemptions += 1;
            let before = self.views[target.index()].idle;
            self.return_to_queue(now, vid, Requeue::Preempted);
            // Claims the driver never pulled were already given back by release_placement.
            let restored = self.views[target.index()].idle - before;
            idle[target.index()] += held;
            self.views[target.index()].idle += held - restored;
        }
        if target != old_site {
            let job = &self.jobs[&id];
            let ctx = PlacementContext {
                sites: &self.sites,
                catalogue: &self.catalogue,
                forecast: &self.forecast,
                staged: &job.staged,
            };
            let placement = placement_at(&ctx, &job.spec, job.components.len(), i, target, procs);
            self.move_component(id, i, placement);
        }
        idle[target.index()] -= procs;
        Some(target)
    }

    /// Moves a placed component to a new site (ICP re-placement), starting its transfers.
    fn move_component(&mut self, id: JobId, i: usize, p: ComponentPlacement) {
        let job = self.jobs.get_mut(&id).unwrap();
        let c = &mut job.components[i];
        let old = c.site.replace(p.site).unwrap();
        self.views[old.index()].placed_unclaimed -= c.processors;
        self.views[p.site.index()].placed_unclaimed += c.processors;
        c.sources = p.sources.iter().map(FileSourceRecord::from).collect();
        c.ftt_ms = p.ftt_ms;
        let chunked = job.spec.file_mode == FileMode::Chunks;
        // Drop this component's transfers to the old site when nobody else there needs them.
        let still_needed: BTreeSet<TransferKey> = job
            .components
            .iter()
            .enumerate()
            .filter_map(|(k, c)| c.site.map(|s| (k, s)))
            .flat_map(|(k, s)| c_sources_keys(&job.components[k].sources, s, chunked.then_some(k as u32)))
            .collect();
        let stale: Vec<TransferKey> = job
            .transfers
            .iter()
            .filter(|(k, st)| **st == TransferStatus::InFlight && !still_needed.contains(*k))
            .map(|(k, _)| k.clone())
            .collect();
        for key in stale {
            job.transfers.remove(&key);
            self.actions.push_back(Action::CancelTransfer { job: id, key });
        }
        for s in &p.sources {
            let key = TransferKey {
                file: s.file.clone(),
                to: p.site,
                chunk: chunked.then_some(i as u32),
            };
            if s.from == p.site || job.transfers.contains_key(&key) {
                continue;
            }
            job.transfers.insert(key.clone(), TransferStatus::InFlight);
            self.actions.push_back(Action::StartTransfer {
                job: id,
                key,
                from: s.from,
                bytes: s.bytes,
            });
        }
    }

    fn claim_component(&mut self, id: JobId, i: usize) {
        let job = self.jobs.get_mut(&id).unwrap();
        let c = &mut job.components[i];
        let site = c.site.unwrap();
        let reservation = c.reserved;
        c.state = ComponentState::Claimed;
        let v = &mut self.views[site.index()];
        v.placed_unclaimed -= c.processors;
        v.idle = v.idle.saturating_sub(c.processors);
        self.actions.push_back(Action::Claim {
            job: id,
            component: i as u32,
            site,
            processors: c.processors,
            reservation,
        });
    }

    /// At the JST, reserved components are claimed inside their reservations.
    fn claim_reservations(&mut self, now: Millis, id: JobId) {
        let Some(job) = self.jobs.get(&id) else { return };
        if job.state != JobState::Placed {
            return;
        }
        let reserved: Vec<usize> = job
            .components
            .iter()
            .enumerate()
            .filter(|(_, c)| c.reserved && c.state == ComponentState::Reserved)
            .map(|(i, _)| i)
            .collect();
        // A site blacklisted since placement is not used, reservation or not: re-place the job.
        if reserved
            .iter()
            .any(|&i| job.components[i].site.is_some_and(|s| self.views[s.index()].blacklisted))
        {
            self.return_to_queue(now, id, Requeue::ReservationRejected);
            return;
        }
        for i in reserved {
            self.claim_component(id, i);
        }
        let job = &self.jobs[&id];
        if job.claimed_count() == job.active_count() {
            self.jobs.get_mut(&id).unwrap().timeline.claimed = Some(now);
            self.set_state(now, id, JobState::Claimed);
            self.maybe_launch(now, id);
        }
    }

    fn maybe_launch(&mut self, now: Millis, id: JobId) {
        let job = &self.jobs[&id];
        if job.state != JobState::Claimed || !job.data_ready() {
            return;
        }
        let job = self.jobs.get_mut(&id).unwrap();
        for c in job.components.iter_mut().filter(|c| c.state != ComponentState::Skipped) {
            c.state = ComponentState::Running;
        }
        job.timeline.started = Some(now);
        self.set_state(now, id, JobState::Running);
        self.actions.push_back(Action::Launch { job: id });
    }

    // ----- faults and returns -------------------------------------------------------------

    fn record_soft_error(&mut self, now: Millis, site: SiteId) {
        self.stats.soft_errors += 1;
        let threshold = self.config.blacklist_threshold;
        let expiry = self.config.blacklist_expiry_ms;
        let v = &mut self.views[site.index()];
        v.consecutive_errors += 1;
        v.total_errors += 1;
        if !v.blacklisted && v.consecutive_errors >= threshold {
            v.blacklisted = true;
            v.blacklisted_until = expiry.map(|e| now + e.max(1));
            self.actions.push_back(Action::Blacklist { site });
        }
    }

    /// Aborts claimed/running components and gives back placed processors, reservations and
    /// transfers of a job.
    fn release_placement(&mut self, id: JobId) {
        if let Some(&(at, _)) = self.claiming.iter().find(|&&(_, j)| j == id) {
            self.claiming.remove(&(at, id));
        }
        if let Some(&(at, _)) = self.reservation_starts.iter().find(|&&(_, j)| j == id) {
            self.reservation_starts.remove(&(at, id));
        }
        // Decisions about this job that the driver has not pulled yet are withdrawn instead of
        // being undone: a claim never issued needs no abort, a transfer never started no cancel.
        let mut unissued_claims = BTreeSet::new();
        let mut unissued_reservations = BTreeSet::new();
        let mut unissued_transfers = BTreeSet::new();
        self.actions.retain(|a| match a {
            Action::Claim { job, component, .. } if *job == id => {
                unissued_claims.insert(*component);
                false
            }
            Action::Reserve { job, component, .. } if *job == id => {
                unissued_reservations.insert(*component);
                false
            }
            Action::StartTransfer { job, key, .. } if *job == id => {
                unissued_transfers.insert(key.clone());
                false
            }
            Action::Launch { job } => *job != id,
            _ => true,
        });
        let job = self.jobs.get_mut(&id).unwrap();
        job.next_claim = None;
        for (i, c) in job.components.iter_mut().enumerate() {
            let Some(site) = c.site else { continue };
            let issued = |set: &BTreeSet<u32>| !set.contains(&(i as u32));
            match c.state {
                ComponentState::Placed => self.views[site.index()].placed_unclaimed -= c.processors,
                ComponentState::Reserved if !issued(&unissued_reservations) => {
                    self.views[site.index()].placed_unclaimed -= c.processors;
                }
                ComponentState::Reserved => {
                    self.views[site.index()].placed_unclaimed -= c.processors;
                    self.actions.push_back(Action::CancelReservation {
                        job: id,
                        component: i as u32,
                        site,
                    });
                }
                ComponentState::Claimed | ComponentState::Running if !issued(&unissued_claims) => {
                    // The core lowered its idle view when it claimed; give it back.
                    self.views[site.index()].idle += c.processors;
                    if c.reserved {
                        // Its reservation was granted and is now unused.
                        self.actions.push_back(Action::CancelReservation {
                            job: id,
                            component: i as u32,
                            site,
                        });
                    }
                }
                ComponentState::Claimed | ComponentState::Running => {
                    self.actions.push_back(Action::Abort {
                        job: id,
                        component: i as u32,
                        site,
                    });
                }
                ComponentState::Unplaced | ComponentState::Finished | ComponentState::Skipped => {}
            }
            if job.spec.flexible.is_none() {
                c.site = None;
            }
            c.state = ComponentState::Unplaced;
            c.reserved = false;
        }
        let in_flight: Vec<TransferKey> = job
            .transfers
            .iter()
            .filter(|(k, s)| **s == TransferStatus::InFlight && !unissued_transfers.contains(*k))
            .map(|(k, _)| k.clone())
            .collect();
        for key in in_flight {
            self.actions.push_back(Action::CancelTransfer { job: id, key });
        }
        job.transfers.clear();
    }

    fn return_to_queue(&mut self, now: Millis, id: JobId, why: Requeue) {
        let Some(job) = self.jobs.get(&id) else { return };
        if job.state.is_terminal() || job.state == JobState::Queued {
            return;
        }
        self.release_placement(id);
        let step = self.config.claim_fraction_step;
        let max_errors = self.config.max_error_resubmissions;
        let job = self.jobs.get_mut(&id).unwrap();
        match why {
            Requeue::JstReached => {
                job.claim_fraction = (job.claim_fraction - step).max(0.0);
                job.jst_returns += 1;
            }
            Requeue::SoftError => job.error_resubmissions += 1,
            Requeue::Preempted | Requeue::ReservationRejected | Requeue::ClaimRejected => {}
        }
        if why == Requeue::SoftError && max_errors.is_some_and(|m| job.error_resubmissions > m) {
            job.timeline.finished = Some(now);
            self.set_state(now, id, JobState::Failed(FailureReason::TooManyErrors));
            return;
        }
        if job.spec.flexible.is_some() {
            job.components.clear();
        }
        job.timeline.queued = now;
        job.timeline.claimed = None;
        job.timeline.started = None;
        let priority = job.priority;
        self.set_state(now, id, JobState::Queued);
        self.queues.push(priority, id);
        self.note_queue_length();
        self.arm_scan(now);
    }

    fn set_state(&mut self, now: Millis, id: JobId, to: JobState) {
        let job = self.jobs.get_mut(&id).unwrap();
        let from = job.state;
        if let Err(e) = transition(from, to) {
            panic!("scheduler bug: job {id}: {e}");
        }
        job.state = to;
        self.actions.push_back(Action::StateChanged {
            job: id,
            from,
            to,
            at: now,
        });
    }
}

/// Why a job goes back to the placement queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Requeue {
    JstReached,
    SoftError,
    Preempted,
    ReservationRejected,
    ClaimRejected,
}

/// Checks a transition against the state machine.
pub fn transition(from: JobState, to: JobState) -> Result<JobState, IllegalTransition> {
    if from.can_become(to) {
        Ok(to)
    } else {
        Err(IllegalTransition { from, to })
    }
}

fn c_sources_keys(sources: &[FileSourceRecord], site: SiteId, chunk: Option<u32>) -> Vec<TransferKey> {
    sources
        .iter()
        .map(|s| TransferKey {
            file: s.file.clone(),
            to: site,
            chunk,
        })
        .collect()
}

/// Component `component` of a job at a given site (a fixed site, or ICP's preemption target),
/// reading every input from its fastest replica.
fn placement_at(
    ctx: &PlacementContext<'_>,
    spec: &JobSpec,
    parts: usize,
    component: usize,
    site: SiteId,
    processors: u32,
) -> ComponentPlacement {
    let (files, mode) = (&spec.input_files, spec.file_mode);
    let mut total = 0;
    let sources = files
        .iter()
        .filter_map(|name| {
            let size = ctx.catalogue.get(name)?.size_bytes;
            let bytes = match mode {
                FileMode::Whole => size,
                FileMode::Chunks => size.div_ceil(parts.max(1) as u64),
            };
            let need = crate::placement::FileNeed { name: name.clone(), bytes };
            let (from, ms) = ctx.best_source(&need, site)?;
            total += ms;
            Some(FileSource {
                file: name.clone(),
                from,
                bytes,
                estimated_ms: ms,
            })
        })
        .collect();
    ComponentPlacement {
        component,
        site,
        processors,
        sources,
        ftt_ms: total,
    }
}
