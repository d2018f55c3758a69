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

/// A simulation that cannot run.
#[derive(Debug, Error)]
pub enum SimError {
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error("{path}: background trace of site '{site}'")]
    Trace {
        path: String,
        site: String,
        #[source]
        source: crate::swf::SwfError,
    },
    #[error("{path}: network: {reason}")]
    Network { path: String, reason: String },
}

/// Progress of a run, reported to the caller now and then.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub now_ms: Millis,
    pub finished_jobs: usize,
    pub total_jobs: usize,
}

/// Processor-milliseconds per category in one bucket of the utilization timeline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UtilizationBucket {
    pub start_ms: Millis,
    /// Local (background) jobs.
    pub background: u64,
    /// Grid components executing.
    pub grid: u64,
    /// Claimed processors waiting at the start barrier (PWT).
    pub pwt: u64,
    /// Placed but not yet claimed processors (PGT: usable by local jobs).
    pub pgt: u64,
    /// Jobs in each placement queue (super-high, high, low, super-low) at the start of the
    /// bucket (timeline buckets only).
    pub queued: [u32; 4],
}

/// What one job did, for the per-job CSV.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    pub id: JobId,
    pub name: String,
    pub state: JobState,
    pub priority: &'static str,
    pub submit: Millis,
    pub placed: Option<Millis>,
    pub claimed: Option<Millis>,
    pub start: Option<Millis>,
    pub end: Option<Millis>,
    pub ftt_ms: Millis,
    pub components: usize,
    /// Processors per component (equal for the generated workloads; the first otherwise).
    pub component_size: u32,
    pub size: u32,
    pub sites: Vec<String>,
    pub placement_tries: u32,
    pub claiming_tries: u32,
    pub total_placement_ms: Millis,
    pub error_resubmissions: u32,
    pub preemptions: u32,
    pub jst_returns: u32,
    /// Final JST minus the first JST estimated (003 §4.2.2 start delay).
    pub start_delay_ms: Option<Millis>,
    /// Input files of the last placement fetched from another site (transfers).
    pub transfers: u32,
    /// Time the last launch spent copying local input to the worker node before running
    /// (`[network.worker_copy]`; the longest over components).
    pub worker_copy_ms: Millis,
    /// The broker's predicted start and delivery (TTS / TTD from the placement), if it ranked
    /// or co-allocated the job.
    pub predicted_start: Option<Millis>,
    pub predicted_delivery: Option<Millis>,
    /// Each component's site (of its last placement; `None` if never placed) and processors.
    pub placement: Vec<ComponentRecord>,
}

/// Where one component of a job was placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentRecord {
    pub site: Option<String>,
    pub processors: u32,
}

impl JobRecord {
    /// "components x size", e.g. "4x16".
    pub fn shape(&self) -> String {
        format!("{}x{}", self.components, self.component_size)
    }
}

/// How a bag of tasks (an explicit job with `tasks`) ended: the core's verdict over its tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BagRecord {
    pub name: String,
    /// Its tasks' job ids, in task order.
    pub tasks: Vec<JobId>,
    pub progress: koalesce_core::bag::BagProgress,
}

/// Everything a run measured.
#[derive(Debug, Clone)]
pub struct SimResult {
    pub scenario: String,
    pub policy: String,
    pub seed: u64,
    pub site_names: Vec<String>,
    /// Processors per site (same order as `site_names`).
    pub site_processors: Vec<u32>,
    pub total_processors: u64,
    pub jobs: Vec<JobRecord>,
    pub rejected: Vec<String>,
    pub bucket_ms: Millis,
    pub timeline: Vec<UtilizationBucket>,
    /// Processor-milliseconds per category and site over the whole run (index = site;
    /// `start_ms` is 0), e.g. for the utilization of the sites left after blacklisting.
    pub site_totals: Vec<UtilizationBucket>,
    pub end_ms: Millis,
    pub last_arrival_ms: Millis,
    pub events: u64,
    pub max_queue_length: usize,
    pub blacklisted: Vec<(Millis, String)>,
    pub soft_errors: u64,
    pub transferred_bytes: u64,
    pub horizon_reached: bool,
    /// Broken invariants seen when checks were on (see [`Simulation::check_invariants`]).
    pub invariant_violations: Vec<String>,
    /// Advance reservations the sites granted / refused, and granted ones that could not be
    /// claimed at their start (a grid job before them overran its reservation).
    pub reservations_granted: u64,
    pub reservations_refused: u64,
    pub reservation_claims_refused: u64,
    /// The scheduler's bandwidth forecast at the end of the run, Mbit/s from (row) → to
    /// (column); 0 on the diagonal.
    pub forecast_mbps: Vec<Vec<f64>>,
    /// Bags of tasks, in workload order.
    pub bags: Vec<BagRecord>,
}

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
    /// Builds the simulation of `scenario` with `seed`.
    pub fn new(scenario: &Scenario, seed: u64) -> Result<Simulation, SimError> {
        let mut rng = Rng::new(seed);
        let n = scenario.sites.len();
        let sites: Vec<Site> = scenario
            .sites
            .iter()
            .map(|s| Site {
                name: s.name.clone(),
                processors: s.processors,
                speed: s.speed,
                supports_reservations: s.reservations,
                attributes: s.attributes.clone(),
            })
            .collect();
        let mbps = 1e6;
        let lan: Vec<f64> = scenario
            .sites
            .iter()
            .map(|s| s.lan_mbps.unwrap_or(scenario.network.lan_mbps) * mbps)
            .collect();
        let mut spec = NetworkSpec::uniform(
            n,
            scenario.network.lan_mbps * mbps,
            scenario.network.wan_mbps * mbps,
            scenario.network.latency_ms,
        );
        spec.lan_bps = lan.clone();
        let mut wan = vec![vec![(scenario.network.wan_mbps * mbps, scenario.network.latency_ms); n]; n];
        for l in &scenario.network.links {
            let (a, b) = (scenario.site_index(&l.a).unwrap(), scenario.site_index(&l.b).unwrap());
            spec.wan_overrides.insert((a.min(b), a.max(b)), (l.mbps * mbps, l.latency_ms));
            wan[a][b] = (l.mbps * mbps, l.latency_ms);
            wan[b][a] = (l.mbps * mbps, l.latency_ms);
        }
        let network = Network::new(spec).map_err(|e| SimError::Network {
            path: scenario.path.display().to_string(),
            reason: e.to_string(),
        })?;
        // The information service's initial forecast: the path's bottleneck bandwidth.
        let mut forecast = NetworkForecast::uniform(n, scenario.network.wan_mbps * mbps, scenario.network.latency_ms);
        let mut latency = vec![vec![0; n]; n];
        for a in 0..n {
            for b in 0..n {
                if a != b {
                    let bps = lan[a].min(lan[b]).min(wan[a][b].0);
                    forecast.set(SiteId(a as u32), SiteId(b as u32), bps, wan[a][b].1);
                    latency[a][b] = wan[a][b].1;
                }
            }
        }
        let mut catalogue = ReplicaCatalogue::new();
        let mut workload_rng = rng.fork();
        let arrivals = workload::build(scenario, &mut workload_rng, &mut catalogue)?;
        let cfg = &scenario.scheduler;
        let broker = cfg.default_policy.is_broker()
            || cfg.broker.coallocation == CoallocationMode::Reservations
            || arrivals.iter().any(|a| {
                a.spec.policy.is_some_and(|p| p.is_broker()) || a.spec.preferences.coallocation == Some(CoallocationMode::Reservations)
            });
        // Transfers only ever start at a replica and end where a component runs, so only those
        // pairs' forecasts are refreshed (with storage-only sites, 25 pairs of 90).
        let holds: Vec<bool> = (0..n)
            .map(|s| catalogue.iter().any(|(_, e)| e.replicas.contains(&SiteId(s as u32))))
            .collect();
        let forecast_pairs = (0..n)
            .flat_map(|a| (0..n).map(move |b| (a, b)))
            .filter(|&(a, b)| a != b && holds[a] && sites[b].processors > 0)
            .collect();
        let scheduler = Scheduler::new(scenario.scheduler.clone(), sites.clone(), forecast, catalogue);
        let lrms = scenario
            .sites
            .iter()
            .map(|s| {
                LocalRm::new(LrmConfig {
                    procs: s.processors,
                    policy: match s.local_policy {
                        LocalPolicyName::Fcfs => LocalPolicy::Fcfs,
                        LocalPolicyName::Easy => LocalPolicy::EasyBackfill,
                    },
                    supports_reservations: s.reservations,
                })
            })
            .collect();
        let mut bands = Vec::with_capacity(n);
        let mut traces = Vec::with_capacity(n);
        for s in &scenario.sites {
            if let Some(t) = &s.background_trace {
                let path = scenario.base_dir.join(&t.path);
                let trace = crate::swf::read_swf(&path).map_err(|source| SimError::Trace {
                    path: scenario.path.display().to_string(),
                    site: s.name.clone(),
                    source,
                })?;
                let first = trace.records.first().map(|r| r.submit_s).unwrap_or(0).max(0);
                let jobs = trace
                    .records
                    .iter()
                    .filter(|r| r.run_s > 0)
                    .map(|r| {
                        let procs = if r.requested_procs > 0 {
                            r.requested_procs
                        } else {
                            r.allocated_procs
                        };
                        let runtime = r.run_s as Millis * 1000;
                        LocalJobSpec {
                            submit_ms: (r.submit_s - first).max(0) as Millis * 1000,
                            procs: procs.max(1) as u32,
                            runtime_ms: runtime,
                            estimate_ms: (r.requested_time_s.max(0) as Millis * 1000).max(runtime),
                        }
                    })
                    .collect();
                let opts = TraceOptions {
                    shift_ms: -((t.skip_s * 1000) as i64),
                    ..TraceOptions::default()
                };
                traces.push(Some(TraceBackground::new(jobs, s.processors, opts)));
                bands.push(None);
                continue;
            }
            traces.push(None);
            let (low, high) = match &scenario.background {
                BackgroundSpec::Band(b) => s.background_band.unwrap_or((b.low, b.high)),
                BackgroundSpec::None => (0.0, 0.0),
            };
            bands.push(match &scenario.background {
                // A storage-only site runs nothing, local jobs included.
                _ if s.storage_only => None,
                BackgroundSpec::None => None,
                BackgroundSpec::Band(b) => Some(BandGenerator::new(
                    BandSpec {
                        low,
                        high,
                        check_interval_ms: b.check_interval_s * 1000,
                        mean_runtime_ms: b.mean_runtime_s * 1000.0,
                        max_job_fraction: b.max_job_fraction,
                        organic: (b.organic_interarrival_s > 0.0).then(|| OrganicSpec {
                            mean_interarrival_ms: b.organic_interarrival_s * 1000.0,
                            ..OrganicSpec::default()
                        }),
                    },
                    0,
                )),
            });
        }
        let soft_error_p = scenario
            .sites
            .iter()
            .map(|s| scenario.faults.soft_error_probability.get(&s.name).copied().unwrap_or(0.0))
            .collect();
        Ok(Simulation {
            scenario_name: scenario.name.clone(),
            seed,
            sites,
            scheduler,
            lrms,
            bands,
            traces,
            network,
            rng,
            arrivals,
            next_arrival: 0,
            runtime_of: BTreeMap::new(),
            failing: BTreeMap::new(),
            bags: BTreeMap::new(),
            transfers: BTreeMap::new(),
            transfer_ids: BTreeMap::new(),
            held: BTreeMap::new(),
            ends: BTreeSet::new(),
            outcomes: BTreeMap::new(),
            seq: 0,
            soft_error_p,
            soft_errors_until: scenario.faults.until_s.map(|s| s * 1000),
            now: 0,
            horizon: scenario.horizon_s.map(|s| s * 1000).unwrap_or(30 * 24 * 3_600_000),
            bucket_ms: scenario.sample_interval_s * 1000,
            timeline: Vec::new(),
            site_totals: vec![UtilizationBucket::default(); n],
            waiting: vec![0; n],
            running: vec![0; n],
            finished: 0,
            rejected: Vec::new(),
            events: 0,
            blacklisted: Vec::new(),
            latency,
            forecast_pairs,
            check_invariants: false,
            violations: Vec::new(),
            stream_bps: scenario.network.stream_mbps.iter().map(|m| m * mbps).collect(),
            worker_copy: scenario
                .network
                .worker_copy
                .as_ref()
                .map(|w| ((w.overhead_s * 1000.0).round() as Millis, w.s_per_gb.clone())),
            net_rng: Rng::seed_from(seed, 0x006e_6574_776f_726b),
            worker_copy_of: BTreeMap::new(),
            broker,
            reservations: (0, 0, 0),
        })
    }

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

    fn result(self, horizon_reached: bool) -> SimResult {
        let names: Vec<String> = self.sites.iter().map(|s| s.name.clone()).collect();
        let jobs = self
            .scheduler
            .jobs()
            .map(|j| {
                let tl = &j.timeline;
                JobRecord {
                    id: j.id,
                    name: j.spec.name.clone(),
                    state: j.state,
                    priority: j.spec.priority.name(),
                    submit: tl.submitted,
                    placed: tl.placed,
                    claimed: tl.claimed,
                    start: tl.started,
                    end: tl.finished,
                    ftt_ms: tl.ftt_ms,
                    components: j.components.len(),
                    component_size: j.components.first().map(|c| c.processors).unwrap_or(0),
                    size: j.total_processors(),
                    sites: j.sites().iter().map(|s| names[s.index()].clone()).collect(),
                    placement_tries: j.placement_tries,
                    claiming_tries: j.claiming_tries,
                    total_placement_ms: tl.total_placement_ms,
                    error_resubmissions: j.error_resubmissions,
                    preemptions: j.preemptions,
                    jst_returns: j.jst_returns,
                    start_delay_ms: match (tl.estimated_start, tl.first_estimated_start, tl.started) {
                        (Some(last), Some(first), Some(_)) => Some(last.saturating_sub(first)),
                        _ => None,
                    },
                    transfers: j
                        .components
                        .iter()
                        .map(|c| c.sources.iter().filter(|s| Some(s.from) != c.site).count() as u32)
                        .sum(),
                    worker_copy_ms: self.worker_copy_of.get(&j.id).copied().unwrap_or(0),
                    predicted_start: j.prediction.map(|p| p.start()),
                    predicted_delivery: j.prediction.map(|p| p.delivery()),
                    placement: j
                        .components
                        .iter()
                        .map(|c| ComponentRecord {
                            site: c.site.map(|s| names[s.index()].clone()),
                            processors: c.processors,
                        })
                        .collect(),
                }
            })
            .collect();
        let n = self.sites.len();
        let forecast = self.scheduler.forecast();
        let forecast_mbps = (0..n)
            .map(|a| {
                (0..n)
                    .map(|b| {
                        if a == b {
                            0.0
                        } else {
                            forecast.get(SiteId(a as u32), SiteId(b as u32)).0 / 1e6
                        }
                    })
                    .collect()
            })
            .collect();
        let bags = self
            .bags
            .values()
            .map(|(name, needed, tasks)| {
                let states = tasks.iter().map(|t| self.scheduler.job(*t).map_or(JobState::Queued, |j| j.state));
                BagRecord {
                    name: name.clone(),
                    tasks: tasks.clone(),
                    progress: koalesce_core::bag::BagProgress::of(states, *needed),
                }
            })
            .collect();
        SimResult {
            bags,
            forecast_mbps,
            scenario: self.scenario_name,
            policy: self.scheduler.config().default_policy.name().to_string(),
            seed: self.seed,
            total_processors: self.sites.iter().map(|s| s.processors as u64).sum(),
            site_processors: self.sites.iter().map(|s| s.processors).collect(),
            site_names: names,
            jobs,
            rejected: self.rejected,
            bucket_ms: self.bucket_ms,
            timeline: self.timeline,
            site_totals: self.site_totals,
            end_ms: self.now,
            last_arrival_ms: self.arrivals.last().map(|a| a.submit_ms).unwrap_or(0),
            events: self.events,
            max_queue_length: self.scheduler.stats().max_queue_length,
            blacklisted: self.blacklisted,
            soft_errors: self.scheduler.stats().soft_errors,
            transferred_bytes: self.network.bytes_delivered(),
            horizon_reached,
            invariant_violations: self.violations,
            reservations_granted: self.reservations.0,
            reservations_refused: self.reservations.1,
            reservation_claims_refused: self.reservations.2,
        }
    }
}

/// Builds and runs a scenario.
pub fn run(scenario: &Scenario, seed: u64, progress: &mut dyn FnMut(Progress)) -> Result<SimResult, SimError> {
    Ok(Simulation::new(scenario, seed)?.run(progress))
}
