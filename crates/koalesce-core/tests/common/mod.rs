//! A tiny deterministic driver for the scheduling core, shared by the integration tests.
//!
//! The [`Harness`] plays every site's LRM, the file movers and the running components:
//! - sites have `processors`, a local load (`local`), grid processors held by claims (`held`)
//!   and processors set aside by granted reservations (`reserved`);
//!   idle = processors − local − held − reserved;
//! - `Claim` takes processors from idle (or from the component's reservation); when idle is too
//!   small the claim is refused and reported with `claim_rejected` (counted in `overdraws`);
//! - `Abort` gives them back; `Reserve` is granted when idle suffices (the processors are then
//!   set aside until claimed or cancelled) and refused otherwise;
//! - `StartTransfer` completes after the forecast's estimate (or a fixed time);
//! - `Launch` runs every component of the job for its runtime, then reports
//!   `component_finished` (a soft error while the site's error budget lasts).
//!
//! Before every input to the core (and only when the core's action queue is empty) the harness
//! reports each site's true idle count with `update_site_idle`, as an information service would.
//! After every step it checks invariants and records violations as strings.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use koalesce_core::model::{NetworkForecast, ReplicaCatalogue, Site};
use koalesce_core::scheduler::ComponentOutcome;
use koalesce_core::state::ComponentState;
use koalesce_core::{Action, JobId, JobSpec, JobState, Millis, Scheduler, SchedulerConfig, SiteId, TransferKey};

/// 1 MB: moves in 1000 ms at 8 Mbit/s.
pub const MB: u64 = 1_000_000;

/// Two sites of 8 processors, "a" and "b", 1 MB/s between them, an empty catalogue.
pub fn grid() -> Scheduler {
    Scheduler::new(
        SchedulerConfig::default(),
        vec![site("a", 8), site("b", 8)],
        NetworkForecast::uniform(2, 8e6, 0),
        ReplicaCatalogue::new(),
    )
}

/// Runs every timer due up to `now` and drops the actions (a driver that launches what was
/// claimed at once).
pub fn tick(s: &mut Scheduler, now: u64) {
    while let Some(t) = s.poll_timeout().filter(|&t| t <= now) {
        s.handle_timeout(t);
    }
    drain(s);
}

/// A gate of dependencies on jobs (`Dependency::on`: an array's id is the whole array).
pub fn after(deps: &[(JobId, koalesce_core::scheduler::DependencyKind)]) -> koalesce_core::scheduler::Gate {
    koalesce_core::scheduler::Gate {
        hold: false,
        after: deps
            .iter()
            .map(|&(job, kind)| koalesce_core::scheduler::Dependency::on(job, kind))
            .collect(),
    }
}

pub fn site(name: &str, processors: u32) -> Site {
    Site {
        name: name.to_string(),
        processors,
        speed: 1.0,
        supports_reservations: false,
        attributes: Default::default(),
    }
}

pub fn reserving_site(name: &str, processors: u32) -> Site {
    Site {
        supports_reservations: true,
        ..site(name, processors)
    }
}

/// Bandwidth (bit/s) that moves `bytes` in exactly `ms` milliseconds (no latency).
pub fn bps_for(bytes: u64, ms: Millis) -> f64 {
    (bytes as f64) * 8.0 * 1000.0 / ms as f64
}

/// Pulls every pending action of a scheduler used without the harness.
pub fn drain(s: &mut Scheduler) -> Vec<Action> {
    s.drain_actions().collect()
}

pub fn claims(actions: &[Action]) -> Vec<(JobId, u32, SiteId, u32, bool)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Claim {
                job,
                component,
                site,
                processors,
                reservation,
            } => Some((*job, *component, *site, *processors, *reservation)),
            _ => None,
        })
        .collect()
}

pub fn aborts(actions: &[Action]) -> Vec<(JobId, u32, SiteId)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Abort { job, component, site } => Some((*job, *component, *site)),
            _ => None,
        })
        .collect()
}

pub fn transfers(actions: &[Action]) -> Vec<(JobId, String, SiteId, SiteId, u64)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::StartTransfer { job, key, from, bytes } => Some((*job, key.file.clone(), *from, key.to, *bytes)),
            _ => None,
        })
        .collect()
}

/// Sites of a job's components, by component index.
pub fn sites_of(s: &Scheduler, job: JobId) -> Vec<SiteId> {
    s.job(job).unwrap().components.iter().map(|c| c.site.expect("placed")).collect()
}

pub fn state(s: &Scheduler, job: JobId) -> JobState {
    s.job(job).unwrap().state
}

/// Something the test scripts to happen at a given time.
#[derive(Debug, Clone)]
pub enum Script {
    /// Local jobs now use this many processors (capped at what the grid leaves them).
    LocalBusy(SiteId, u32),
    Submit(Box<JobSpec>),
    /// Cancel the n-th job submitted through the harness.
    Cancel(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    TransferDone(u64),
    ComponentDone(JobId, u32),
}

pub struct Harness {
    pub s: Scheduler,
    pub now: Millis,
    pub processors: Vec<u32>,
    pub local: Vec<u32>,
    /// (job, component) → (site, processors) held by a successful claim.
    pub held: BTreeMap<(JobId, u32), (SiteId, u32)>,
    /// (job, component) → (site, processors) of a granted reservation not yet claimed.
    pub reserved: BTreeMap<(JobId, u32), (SiteId, u32)>,
    /// In-flight transfers: id → (job, key, completion time).
    transfers: BTreeMap<u64, (JobId, TransferKey)>,
    running: BTreeMap<(JobId, u32), Millis>,
    events: BTreeSet<(Millis, Event)>,
    scripts: BTreeMap<(Millis, u64), Script>,
    seq: u64,
    /// Every action pulled, with the time it was pulled.
    pub log: Vec<(Millis, Action)>,
    pub violations: Vec<String>,
    /// Claims the harness refused for lack of idle processors.
    pub overdraws: u32,
    /// Refuse every reservation request.
    pub reject_reservations: bool,
    /// Fixed transfer time; `None` = the forecast's estimate.
    pub transfer_ms: Option<Millis>,
    /// Runtime per job; default the job's runtime estimate.
    pub runtime: BTreeMap<JobId, Millis>,
    /// Per site: how many more component completions there end in a soft error.
    pub component_soft_errors: Vec<u32>,
    /// Per site: how many more claims there are refused as soft errors.
    pub claim_soft_errors: Vec<u32>,
    /// Per destination site: how many more transfers there fail.
    pub transfer_failures: Vec<u32>,
    /// Report true idle counts to the core before every input.
    pub sync_idle: bool,
    pub blacklisted: BTreeSet<SiteId>,
    /// Jobs submitted through the harness, in order.
    pub submitted: Vec<JobId>,
}

impl Harness {
    pub fn new(config: SchedulerConfig, sites: Vec<Site>, forecast: NetworkForecast, catalogue: ReplicaCatalogue) -> Self {
        config.validate().expect("valid config");
        let n = sites.len();
        let processors = sites.iter().map(|s| s.processors).collect();
        Harness {
            s: Scheduler::new(config, sites, forecast, catalogue),
            now: 0,
            processors,
            local: vec![0; n],
            held: BTreeMap::new(),
            reserved: BTreeMap::new(),
            transfers: BTreeMap::new(),
            running: BTreeMap::new(),
            events: BTreeSet::new(),
            scripts: BTreeMap::new(),
            seq: 0,
            log: Vec::new(),
            violations: Vec::new(),
            overdraws: 0,
            reject_reservations: false,
            transfer_ms: None,
            runtime: BTreeMap::new(),
            component_soft_errors: vec![0; n],
            claim_soft_errors: vec![0; n],
            transfer_failures: vec![0; n],
            sync_idle: true,
            blacklisted: BTreeSet::new(),
            submitted: Vec::new(),
        }
    }

    // ----- the simulated sites ------------------------------------------------------------

    pub fn held_at(&self, site: SiteId) -> u32 {
        self.held.values().filter(|(s, _)| *s == site).map(|(_, p)| p).sum()
    }

    pub fn reserved_at(&self, site: SiteId) -> u32 {
        self.reserved.values().filter(|(s, _)| *s == site).map(|(_, p)| p).sum()
    }

    pub fn idle(&self, site: SiteId) -> u32 {
        let i = site.index();
        self.processors[i] - self.local[i] - self.held_at(site) - self.reserved_at(site)
    }

    /// Local jobs now use `busy` processors at `site` (they can only use what the grid leaves).
    pub fn set_local_busy(&mut self, site: SiteId, busy: u32) {
        let i = site.index();
        let cap = self.processors[i] - self.held_at(site) - self.reserved_at(site);
        self.local[i] = busy.min(cap);
        self.sync();
    }

    fn sync(&mut self) {
        if !self.sync_idle {
            return;
        }
        for i in 0..self.processors.len() {
            let site = SiteId(i as u32);
            let idle = self.idle(site);
            self.s.update_site_idle(site, idle);
        }
    }

    // ----- inputs -------------------------------------------------------------------------

    pub fn submit(&mut self, spec: JobSpec) -> JobId {
        self.sync();
        let id = self.s.submit(self.now, spec).expect("valid job");
        self.submitted.push(id);
        self.drain();
        id
    }

    pub fn at(&mut self, t: Millis, script: Script) {
        self.seq += 1;
        self.scripts.insert((t, self.seq), script);
    }

    fn apply(&mut self, script: Script) {
        match script {
            Script::LocalBusy(site, busy) => self.set_local_busy(site, busy),
            Script::Submit(spec) => {
                self.sync();
                match self.s.submit(self.now, *spec) {
                    Ok(id) => self.submitted.push(id),
                    Err(e) => self.violations.push(format!("scripted submission refused: {e}")),
                }
            }
            Script::Cancel(n) => {
                if let Some(&id) = self.submitted.get(n) {
                    self.sync();
                    self.s.cancel(self.now, id);
                }
            }
        }
        self.drain();
    }

    /// Carries out every pending action, feeding refusals back at once.
    pub fn drain(&mut self) {
        while let Some(a) = self.s.poll_action() {
            self.log.push((self.now, a.clone()));
            self.execute(a);
        }
    }

    fn execute(&mut self, a: Action) {
        let now = self.now;
        match a {
            Action::StartTransfer { job, key, from, bytes } => {
                if self.transfers.values().any(|(j, k)| *j == job && *k == key) {
                    self.violations
                        .push(format!("t={now}: transfer {key:?} of job {job} started twice"));
                }
                let ms = self
                    .transfer_ms
                    .unwrap_or_else(|| self.s.forecast().transfer_ms(from, key.to, bytes));
                self.seq += 1;
                self.transfers.insert(self.seq, (job, key));
                self.events.insert((now + ms, Event::TransferDone(self.seq)));
            }
            Action::CancelTransfer { job, key } => {
                match self.transfers.iter().find(|(_, (j, k))| *j == job && *k == key).map(|(id, _)| *id) {
                    Some(id) => {
                        self.transfers.remove(&id);
                        self.events.retain(|(_, e)| *e != Event::TransferDone(id));
                    }
                    None => self
                        .violations
                        .push(format!("t={now}: cancel of unknown transfer {key:?} of job {job}")),
                }
            }
            Action::Reserve {
                job,
                component,
                site,
                processors,
                ..
            } => {
                if self.reserved.contains_key(&(job, component)) {
                    self.violations
                        .push(format!("t={now}: job {job} component {component} reserved twice"));
                }
                if self.reject_reservations || self.idle(site) < processors {
                    self.s.reservation_answer(now, job, component, false);
                } else {
                    self.reserved.insert((job, component), (site, processors));
                    self.s.reservation_answer(now, job, component, true);
                }
            }
            Action::CancelReservation { job, component, site } => {
                if self.reserved.remove(&(job, component)).is_none() {
                    self.violations.push(format!(
                        "t={now}: cancel of unknown reservation of job {job} component {component} at {site}"
                    ));
                }
            }
            Action::Claim {
                job,
                component,
                site,
                processors,
                reservation,
            } => {
                if self.held.contains_key(&(job, component)) {
                    self.violations
                        .push(format!("t={now}: job {job} component {component} claimed twice"));
                }
                if reservation {
                    match self.reserved.remove(&(job, component)) {
                        Some((s, p)) if s == site && p == processors => {
                            self.held.insert((job, component), (site, processors));
                        }
                        other => {
                            self.violations.push(format!(
                                "t={now}: job {job} component {component} claimed inside reservation {other:?}, expected ({site}, {processors})"
                            ));
                        }
                    }
                    return;
                }
                if self.blacklisted.contains(&site) {
                    self.violations
                        .push(format!("t={now}: job {job} component {component} claimed at blacklisted {site}"));
                }
                let i = site.index();
                if self.claim_soft_errors[i] > 0 {
                    self.claim_soft_errors[i] -= 1;
                    self.s.claim_rejected(now, job, component, true);
                } else if self.idle(site) < processors {
                    self.overdraws += 1;
                    self.s.claim_rejected(now, job, component, false);
                } else {
                    self.held.insert((job, component), (site, processors));
                }
            }
            Action::Launch { job } => {
                let j = self.s.job(job).expect("launched job exists");
                for (i, c) in j.components.iter().enumerate() {
                    if self.held.get(&(job, i as u32)) != Some(&(c.site.unwrap(), c.processors)) {
                        self.violations
                            .push(format!("t={now}: job {job} launched without holding component {i}"));
                    }
                }
                if self.transfers.values().any(|(j, _)| *j == job) {
                    self.violations
                        .push(format!("t={now}: job {job} launched with input still in flight"));
                }
                let runtime = self.runtime.get(&job).copied().unwrap_or(j.spec.runtime_estimate_ms);
                let comps: Vec<u32> = self.held.keys().filter(|(j, _)| *j == job).map(|(_, c)| *c).collect();
                for c in comps {
                    self.running.insert((job, c), now + runtime);
                    self.events.insert((now + runtime, Event::ComponentDone(job, c)));
                }
            }
            Action::Abort { job, component, site } => {
                match self.held.remove(&(job, component)) {
                    Some((s, _)) if s == site => {}
                    other => self.violations.push(format!(
                        "t={now}: abort of job {job} component {component} at {site}, held {other:?}"
                    )),
                }
                if let Some(t) = self.running.remove(&(job, component)) {
                    self.events.remove(&(t, Event::ComponentDone(job, component)));
                }
            }
            Action::Blacklist { site } => {
                if !self.blacklisted.insert(site) {
                    self.violations.push(format!("t={now}: {site} blacklisted twice"));
                }
            }
            Action::StateChanged { .. } => {}
        }
    }

    fn fire(&mut self, e: Event) {
        let now = self.now;
        match e {
            Event::TransferDone(id) => {
                let Some((job, key)) = self.transfers.remove(&id) else { return };
                let i = key.to.index();
                self.sync();
                if self.transfer_failures[i] > 0 {
                    self.transfer_failures[i] -= 1;
                    self.s.transfer_failed(now, job, &key);
                } else {
                    self.s.transfer_finished(now, job, &key);
                }
            }
            Event::ComponentDone(job, c) => {
                self.running.remove(&(job, c));
                let Some((site, _)) = self.held.remove(&(job, c)) else {
                    self.violations
                        .push(format!("t={now}: job {job} component {c} finished without processors"));
                    return;
                };
                let i = site.index();
                let outcome = if self.component_soft_errors[i] > 0 {
                    self.component_soft_errors[i] -= 1;
                    ComponentOutcome::SoftError
                } else {
                    ComponentOutcome::Success
                };
                self.sync();
                self.s.component_finished(now, job, c, outcome);
            }
        }
        self.drain();
    }

    /// Runs every event and timeout up to and including `horizon`; `now` ends at `horizon`.
    pub fn run_until(&mut self, horizon: Millis) {
        self.drain();
        self.check();
        let mut steps = 0u64;
        loop {
            steps += 1;
            assert!(steps < 2_000_000, "harness: no progress");
            let next = [
                self.s.poll_timeout(),
                self.events.first().map(|e| e.0),
                self.scripts.first_key_value().map(|(k, _)| k.0),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(t) = next else { break };
            if t > horizon {
                break;
            }
            self.now = self.now.max(t);
            while let Some(entry) = self.scripts.first_entry() {
                if entry.key().0 > self.now {
                    break;
                }
                let script = entry.remove();
                self.apply(script);
            }
            while let Some(&(t, e)) = self.events.first() {
                if t > self.now {
                    break;
                }
                self.events.remove(&(t, e));
                self.fire(e);
            }
            if self.s.poll_timeout().is_some_and(|t| t <= self.now) {
                self.sync();
                self.s.handle_timeout(self.now);
                self.drain();
            }
            self.check();
        }
        self.now = self.now.max(horizon);
    }

    /// Runs until nothing is left to do (or `limit`).
    pub fn run_to_end(&mut self, limit: Millis) {
        self.run_until(limit);
    }

    /// Invariants that hold whenever the core's action queue is empty.
    pub fn check(&mut self) {
        let now = self.now;
        for i in 0..self.processors.len() {
            let site = SiteId(i as u32);
            let grid = self.held_at(site) + self.reserved_at(site);
            if grid + self.local[i] > self.processors[i] {
                self.violations.push(format!("t={now}: {site} over-allocated"));
            }
            let core_claimed = self.s.claimed_processors(site);
            if core_claimed != self.held_at(site) {
                self.violations.push(format!(
                    "t={now}: core believes {core_claimed} processors claimed at {site}, the site has {}",
                    self.held_at(site)
                ));
            }
            if core_claimed + self.local[i] > self.processors[i] {
                self.violations.push(format!("t={now}: core over-allocates {site}"));
            }
            let placed: u32 = self
                .s
                .jobs()
                .filter(|j| !j.state.is_terminal() && j.state != JobState::Queued)
                .flat_map(|j| j.components.iter())
                .filter(|c| c.site == Some(site) && matches!(c.state, ComponentState::Placed | ComponentState::Reserved))
                .map(|c| c.processors)
                .sum();
            let view = self.s.site_view(site).placed_unclaimed;
            if view != placed {
                self.violations.push(format!(
                    "t={now}: {site} placed_unclaimed {view} but placed components hold {placed}"
                ));
            }
        }
        if self.violations.len() > 50 {
            panic!("too many violations: {:#?}", self.violations);
        }
    }

    pub fn all_terminal(&self) -> bool {
        self.s.jobs().all(|j| j.state.is_terminal())
    }

    pub fn state(&self, job: JobId) -> JobState {
        self.s.job(job).unwrap().state
    }

    pub fn sites_of(&self, job: JobId) -> Vec<SiteId> {
        sites_of(&self.s, job)
    }

    /// Actions pulled since log index `from`.
    pub fn actions_since(&self, from: usize) -> Vec<Action> {
        self.log[from..].iter().map(|(_, a)| a.clone()).collect()
    }

    pub fn assert_clean(&self) {
        assert!(self.violations.is_empty(), "violations: {:#?}", self.violations);
    }
}
