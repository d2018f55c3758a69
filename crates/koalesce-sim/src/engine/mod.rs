//! The simulation driver: runs the scheduling core on virtual time against simulated sites
//! (local resource managers with background load), a shared network and failure injection.
//!
//! Determinism: one seeded [`Rng`], integer time, and a fixed order of work at every instant —
//! (1) finished transfers, (2) finished grid components, (3) local resource managers and
//! background load, (4) grid arrivals, (5) the scheduler's timers, (6) the scheduler's actions
//! until none are left. Simultaneous component ends are ordered by a sequence number.

use std::collections::{BTreeMap, BTreeSet};

use koalesce_core::model::{CoallocationMode, JobId, Millis, NetworkForecast, Priority, ReplicaCatalogue, Site, SiteId};
use koalesce_core::scheduler::{Action, ComponentOutcome, Scheduler, TransferKey};
use koalesce_core::state::JobState;
use thiserror::Error;

use crate::background::{BandGenerator, BandSpec, LocalJobSpec, OrganicSpec, TraceBackground, TraceOptions};
use crate::lrm::{GridKey, LocalPolicy, LocalRm, LrmConfig};
use crate::network::{Network, NetworkSpec, TransferId};
use crate::rng::Rng;
use crate::scenario::{BackgroundSpec, LocalPolicyName, Scenario, ScenarioError};
use crate::workload::{self, GridArrival};

mod records;
mod result;
mod setup;

pub use records::{BagRecord, ComponentRecord, JobRecord, Progress, SimError, SimResult, UtilizationBucket};

#[derive(Debug, Clone, Copy)]
enum Held {
    Waiting { site: SiteId, procs: u32 },
    Running { site: SiteId, procs: u32, end: Millis, seq: u64 },
}

/// One simulation in progress.
pub struct Simulation {
    scenario_name: String,
    seed: u64,
    sites: Vec<Site>,
    scheduler: Scheduler,
    lrms: Vec<LocalRm>,
    bands: Vec<Option<BandGenerator>>,
    traces: Vec<Option<TraceBackground>>,
    network: Network,
    rng: Rng,
    arrivals: Vec<GridArrival>,
    next_arrival: usize,
    runtime_of: BTreeMap<JobId, Millis>,
    /// Components whose program fails (application error) whenever they run.
    failing: BTreeMap<JobId, Vec<u32>>,
    /// Bags of tasks by explicit job: name, the tasks needed and the tasks' ids.
    bags: BTreeMap<usize, (String, u32, Vec<JobId>)>,
    transfers: BTreeMap<TransferId, (JobId, TransferKey)>,
    transfer_ids: BTreeMap<(JobId, TransferKey), TransferId>,
    held: BTreeMap<(JobId, u32), Held>,
    ends: BTreeSet<(Millis, u64, JobId, u32)>,
    outcomes: BTreeMap<(JobId, u32), ComponentOutcome>,
    seq: u64,
    soft_error_p: Vec<f64>,
    soft_errors_until: Option<Millis>,
    now: Millis,
    horizon: Millis,
    bucket_ms: Millis,
    timeline: Vec<UtilizationBucket>,
    site_totals: Vec<UtilizationBucket>,
    waiting: Vec<u32>,
    running: Vec<u32>,
    finished: usize,
    rejected: Vec<String>,
    events: u64,
    blacklisted: Vec<(Millis, String)>,
    latency: Vec<Vec<Millis>>,
    /// The (source, destination) pairs whose forecast placement can use: from a site holding a
    /// replica to a site with processors.
    forecast_pairs: Vec<(usize, usize)>,
    check_invariants: bool,
    violations: Vec<String>,
    /// Per-transfer stream throughputs to draw from (bits/s); empty: none.
    stream_bps: Vec<f64>,
    /// Worker-node copy: fixed start-up (ms) and seconds per GB to draw from.
    worker_copy: Option<(Millis, Vec<f64>)>,
    /// The draws of the network model, apart from the other randomness of the run.
    net_rng: Rng,
    worker_copy_of: BTreeMap<JobId, Millis>,
    /// Some job is ranked by TTD/TTS or co-allocated by reservations: the core gets every
    /// site's queue estimate before it decides.
    broker: bool,
    reservations: (u64, u64, u64),
}

const GB_BITS: f64 = 8e9;

impl Simulation {
    /// Checks after every instant that no site is over-allocated (local + grid ≤ processors,
    /// the LRM's own invariants) and that the processors the driver holds for grid components
    /// match the LRM's grid count. Violations end up in [`SimResult::invariant_violations`].
    pub fn check_invariants(mut self, on: bool) -> Self {
        self.check_invariants = on;
        self
    }

    fn verify(&mut self) {
        for (s, l) in self.lrms.iter().enumerate() {
            let name = &self.sites[s].name;
            if let Err(e) = l.check_invariants() {
                self.violations.push(format!("t={} {name}: {e}", self.now));
            }
            if l.busy_local() + l.busy_grid() > self.sites[s].processors {
                self.violations.push(format!("t={} {name}: over-allocated", self.now));
            }
            if l.busy_grid() != self.waiting[s] + self.running[s] {
                self.violations.push(format!(
                    "t={} {name}: LRM holds {} grid processors, driver {}",
                    self.now,
                    l.busy_grid(),
                    self.waiting[s] + self.running[s]
                ));
            }
        }
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    pub fn total_jobs(&self) -> usize {
        self.arrivals.len()
    }

    fn grid_work_left(&self) -> bool {
        self.next_arrival < self.arrivals.len() || self.finished + self.rejected.len() < self.arrivals.len()
    }

    fn next_time(&self) -> Option<Millis> {
        let mut t: Option<Millis> = None;
        let mut at = |x: Option<Millis>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        at(self.arrivals.get(self.next_arrival).map(|a| a.submit_ms));
        at(self.scheduler.poll_timeout());
        at(self.network.next_completion());
        at(self.ends.first().map(|e| e.0));
        for l in &self.lrms {
            at(l.next_event_time());
        }
        for b in self.bands.iter().flatten() {
            at(Some(b.next_tick()));
        }
        for tr in self.traces.iter().flatten() {
            at(tr.next_arrival());
        }
        t.map(|t| t.max(self.now))
    }

    /// Runs to the end (every grid job terminal) or the horizon.
    pub fn run(mut self, progress: &mut dyn FnMut(Progress)) -> SimResult {
        let mut horizon_reached = false;
        while self.grid_work_left() {
            let Some(t) = self.next_time() else { break };
            if t > self.horizon {
                horizon_reached = true;
                self.accumulate(self.horizon);
                self.now = self.horizon;
                break;
            }
            self.accumulate(t);
            self.now = t;
            self.step();
            if self.check_invariants {
                self.verify();
            }
            self.events += 1;
            if self.events.is_multiple_of(2048) {
                progress(Progress {
                    now_ms: self.now,
                    finished_jobs: self.finished,
                    total_jobs: self.arrivals.len(),
                });
            }
        }
        progress(Progress {
            now_ms: self.now,
            finished_jobs: self.finished,
            total_jobs: self.arrivals.len(),
        });
        self.result(horizon_reached)
    }

    /// Adds the processor time of each category over [self.now, t) to the timeline buckets.
    fn accumulate(&mut self, t: Millis) {
        if t <= self.now {
            return;
        }
        let background: u64 = self.lrms.iter().map(|l| l.busy_local() as u64).sum();
        let grid: u64 = self.running.iter().map(|&p| p as u64).sum();
        let pwt: u64 = self.waiting.iter().map(|&p| p as u64).sum();
        let pgt: u64 = (0..self.sites.len())
            .map(|s| self.scheduler.site_view(SiteId(s as u32)).placed_unclaimed as u64)
            .sum();
        let d = t - self.now;
        for (s, tot) in self.site_totals.iter_mut().enumerate() {
            tot.background += self.lrms[s].busy_local() as u64 * d;
            tot.grid += self.running[s] as u64 * d;
            tot.pwt += self.waiting[s] as u64 * d;
            tot.pgt += self.scheduler.site_view(SiteId(s as u32)).placed_unclaimed as u64 * d;
        }
        let mut from = self.now;
        while from < t {
            let b = (from / self.bucket_ms) as usize;
            let to = t.min((b as u64 + 1) * self.bucket_ms);
            while self.timeline.len() <= b {
                let start_ms = self.timeline.len() as u64 * self.bucket_ms;
                // The queues do not change over [self.now, t): this is their length at start_ms.
                let queued = Priority::ALL.map(|p| self.scheduler.queued(p).count() as u32);
                self.timeline.push(UtilizationBucket {
                    start_ms,
                    queued,
                    ..Default::default()
                });
            }
            let d = to - from;
            let bucket = &mut self.timeline[b];
            bucket.background += background * d;
            bucket.grid += grid * d;
            bucket.pwt += pwt * d;
            bucket.pgt += pgt * d;
            from = to;
        }
    }

    fn step(&mut self) {
        let now = self.now;
        // (1) Transfers.
        for (_, id) in self.network.advance_to_timed(now) {
            if let Some((job, key)) = self.transfers.remove(&id) {
                self.transfer_ids.remove(&(job, key.clone()));
                self.scheduler.transfer_finished(now, job, &key);
            }
        }
        // (2) Grid components that end now.
        while let Some(&(end, seq, job, comp)) = self.ends.first() {
            if end > now {
                break;
            }
            self.ends.remove(&(end, seq, job, comp));
            if let Some(Held::Running { site, procs, .. }) = self.held.remove(&(job, comp)) {
                self.lrms[site.index()].release(now, GridKey(job.0, comp));
                self.running[site.index()] -= procs;
            }
            let outcome = self.outcomes.remove(&(job, comp)).unwrap_or(ComponentOutcome::Success);
            self.scheduler.component_finished(now, job, comp, outcome);
        }
        // (3) Local resource managers and background load.
        for s in 0..self.lrms.len() {
            self.lrms[s].sync(now);
            self.lrms[s].take_events();
            if let Some(tr) = &mut self.traces[s] {
                tr.release_due(now, &mut self.lrms[s]);
            }
            if let Some(b) = &mut self.bands[s] {
                if b.next_tick() <= now {
                    b.on_tick(now, &mut self.lrms[s], &mut self.rng);
                }
            }
            self.lrms[s].take_events();
        }
        // (4) Grid arrivals. With placement on submission the core decides right here, so it
        // must see what step (3) just changed (local jobs started or ended) and the current
        // network, not the values of the previous instant.
        if self.arrivals.get(self.next_arrival).is_some_and(|a| a.submit_ms <= now) {
            self.refresh_idle();
            self.refresh_forecast();
            self.refresh_queue_estimates();
        }
        while let Some(a) = self.arrivals.get(self.next_arrival) {
            if a.submit_ms > now {
                break;
            }
            let a = a.clone();
            self.next_arrival += 1;
            match self.scheduler.submit(now, a.spec) {
                Ok(id) => {
                    self.runtime_of.insert(id, a.runtime_ms);
                    if !a.failing_components.is_empty() {
                        self.failing.insert(id, a.failing_components);
                    }
                    if let Some(b) = a.bag {
                        self.bags.entry(b.job).or_insert_with(|| (b.bag, b.needed, Vec::new())).2.push(id);
                    }
                }
                Err(e) => self.rejected.push(e.to_string()),
            }
        }
        self.refresh_idle();
        // (5) Timers: placement scans, claiming tries, reservation starts.
        if self.scheduler.poll_timeout().is_some_and(|t| t <= now) {
            self.refresh_forecast();
            self.refresh_queue_estimates();
            self.scheduler.handle_timeout(now);
        }
        // (6) Decisions.
        self.carry_out_actions();
    }

    fn refresh_idle(&mut self) {
        for (s, l) in self.lrms.iter().enumerate() {
            self.scheduler.update_site_idle(SiteId(s as u32), l.claimable());
        }
    }

    /// Every site's queue-wait estimate, from simulating its LRM's queue (only when the broker
    /// is in use: it costs a plan of every local queue).
    fn refresh_queue_estimates(&mut self) {
        if !self.broker {
            return;
        }
        for (s, l) in self.lrms.iter().enumerate() {
            let estimate = crate::broker::queue_estimate(l, self.now);
            self.scheduler.update_site_queue_estimate(SiteId(s as u32), estimate);
        }
    }

    /// The information service's bandwidth forecast: what a new transfer would get now.
    fn refresh_forecast(&mut self) {
        if self.sites.len() > 64 {
            return;
        }
        for &(a, b) in &self.forecast_pairs {
            let lat = self.latency[a][b];
            let ms = self.network.estimate_ms(a, b, 1_000_000_000).saturating_sub(lat).max(1);
            let bps = GB_BITS * 1000.0 / ms as f64;
            self.scheduler.update_forecast(SiteId(a as u32), SiteId(b as u32), bps, lat);
        }
    }

    fn carry_out_actions(&mut self) {
        let now = self.now;
        while let Some(action) = self.scheduler.poll_action() {
            match action {
                Action::StartTransfer { job, key, from, bytes } => {
                    let cap = (from != key.to && !self.stream_bps.is_empty())
                        .then(|| self.stream_bps[self.net_rng.choose_index(self.stream_bps.len())]);
                    let id = self.network.start_capped(now, from.index(), key.to.index(), bytes, cap);
                    self.transfer_ids.insert((job, key.clone()), id);
                    self.transfers.insert(id, (job, key));
                }
                Action::CancelTransfer { job, key } => {
                    if let Some(id) = self.transfer_ids.remove(&(job, key)) {
                        self.network.cancel(now, id);
                        self.transfers.remove(&id);
                    }
                }
                Action::Reserve {
                    job,
                    component,
                    site,
                    processors,
                    start,
                    duration,
                } => {
                    let granted = self.lrms[site.index()]
                        .reserve(now, GridKey(job.0, component), processors, start, duration)
                        .is_ok();
                    if granted {
                        self.reservations.0 += 1;
                    } else {
                        self.reservations.1 += 1;
                    }
                    self.scheduler.reservation_answer(now, job, component, granted);
                }
                Action::CancelReservation { job, component, site } => {
                    self.lrms[site.index()].cancel_reservation(now, GridKey(job.0, component));
                }
                Action::Claim {
                    job,
                    component,
                    site,
                    processors,
                    reservation,
                } => {
                    let key = GridKey(job.0, component);
                    let lrm = &mut self.lrms[site.index()];
                    let ok = if reservation {
                        lrm.claim_reservation(now, key)
                    } else {
                        lrm.claim(now, key, processors)
                    };
                    match ok {
                        Ok(()) => {
                            self.waiting[site.index()] += processors;
                            self.held.insert((job, component), Held::Waiting { site, procs: processors });
                        }
                        Err(_) => {
                            if reservation {
                                // A reservation that cannot be claimed (an earlier job overran
                                // its own) is of no more use: give it back.
                                lrm.cancel_reservation(now, key);
                                self.reservations.2 += 1;
                            }
                            self.scheduler.claim_rejected(now, job, component, false)
                        }
                    }
                }
                Action::Launch { job } => self.launch(job),
                Action::Abort { job, component, site } => {
                    if let Some(h) = self.held.remove(&(job, component)) {
                        match h {
                            Held::Waiting { site, procs } => self.waiting[site.index()] -= procs,
                            Held::Running { site, procs, end, seq } => {
                                self.running[site.index()] -= procs;
                                self.ends.remove(&(end, seq, job, component));
                                self.outcomes.remove(&(job, component));
                            }
                        }
                        self.lrms[site.index()].release(now, GridKey(job.0, component));
                    }
                }
                Action::Blacklist { site } => self.blacklisted.push((now, self.sites[site.index()].name.clone())),
                Action::StateChanged { to, .. } => {
                    if to.is_terminal() {
                        self.finished += 1;
                    }
                }
            }
            self.refresh_idle();
        }
    }

    fn launch(&mut self, job: JobId) {
        let now = self.now;
        let runtime = self.runtime_of.get(&job).copied().unwrap_or(0);
        let Some(j) = self.scheduler.job(job) else { return };
        let comps: Vec<(u32, SiteId, u32, u64)> = j
            .components
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let site = c.site?;
                let local: u64 = c.sources.iter().filter(|s| s.from == site).map(|s| s.bytes).sum();
                Some((i as u32, site, c.processors, local))
            })
            .collect();
        for (comp, site, procs, local_bytes) in comps {
            let speed = self.sites[site.index()].speed;
            let copy = self.worker_copy_ms(local_bytes);
            let slot = self.worker_copy_of.entry(job).or_default();
            *slot = (*slot).max(copy);
            let run = ((runtime as f64 / speed).round() as Millis).max(1) + copy;
            let p = self.soft_error_p[site.index()];
            let faulty = p > 0.0 && self.soft_errors_until.is_none_or(|u| now < u) && self.rng.bernoulli(p);
            let end = if faulty {
                // The fault shows after a random part of the run.
                self.outcomes.insert((job, comp), ComponentOutcome::SoftError);
                now + self.rng.range_inclusive_u64(1, run)
            } else {
                if self.failing.get(&job).is_some_and(|f| f.contains(&comp)) {
                    self.outcomes.insert((job, comp), ComponentOutcome::ApplicationError);
                }
                now + run
            };
            self.seq += 1;
            if let Some(Held::Waiting { .. }) = self.held.get(&(job, comp)) {
                self.waiting[site.index()] -= procs;
            }
            self.running[site.index()] += procs;
            self.held.insert(
                (job, comp),
                Held::Running {
                    site,
                    procs,
                    end,
                    seq: self.seq,
                },
            );
            self.ends.insert((end, self.seq, job, comp));
        }
    }

    /// The worker-node copy of `bytes` of local input (0 without `[network.worker_copy]` or
    /// local input).
    fn worker_copy_ms(&mut self, bytes: u64) -> Millis {
        let Some((overhead, s_per_gb)) = &self.worker_copy else { return 0 };
        if bytes == 0 {
            return 0;
        }
        let per_gb = if s_per_gb.is_empty() {
            0.0
        } else {
            s_per_gb[self.net_rng.choose_index(s_per_gb.len())]
        };
        overhead + (bytes as f64 / 1e9 * per_gb * 1000.0).round() as Millis
    }
}

/// Builds and runs a scenario.
pub fn run(scenario: &Scenario, seed: u64, progress: &mut dyn FnMut(Progress)) -> Result<SimResult, SimError> {
    Ok(Simulation::new(scenario, seed)?.run(progress))
}
