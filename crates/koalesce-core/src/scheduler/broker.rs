//! The broker inside the scheduler: placement by predicted TTD/TTS (`policy = "ttd"` /
//! `"tts"`, 001 §3.1) and co-allocation by advance reservations (`coallocation =
//! "reservations"`, 001 §3.2). The decisions are the pure functions of [`crate::broker`]; this
//! module feeds them the scheduler's view and turns their answers into placements.
//!
//! **Inputs.** Besides idle processors, the driver may give each site a
//! [`QueueEstimate`] with [`Scheduler::update_site_queue_estimate`] (the simulator simulates its
//! LRM's queue; the daemon asks the local executor or Slurm's `squeue --start`). Without one, a
//! site is assumed to keep forever what it uses now. The scheduler books its own reservations and
//! claims into its copy until the next estimate.
//!
//! **Ranking (`ttd`, `tts`), claiming mode.**
//! - A single-component job goes to the site with the least predicted TTD (TTS) over every
//!   usable site large enough. At a site with advance reservations it gets one at the predicted
//!   start (its queue wait *is* the reservation's start, 001 §3.1). At another site it is placed
//!   only if its processors are idle now (then claimed as KOALA claims); when the best site is
//!   busy and does not reserve, the job stays queued and waits for it (ranked again at every
//!   scan), as a job submitted to that site's batch queue would.
//! - A multi-component job is placed atomically, components largest first, each at the site of
//!   least predicted TTD (TTS) among the sites where it fits now; it is then claimed (or
//!   reserved at its JST) like any KOALA placement.
//!
//! **Co-allocation by reservations.** The components' candidate sites are the usable sites with
//! advance reservations that are large enough (a fixed component: its site), ranked by predicted
//! TTD (TTS with `policy = "tts"`). The start window is `[T_e, T_l]` with `T_e` = the later of
//! the job's earliest start and now, and `T_l` = the job's latest start, or now +
//! `broker.window_ms`; at each site a component starts no earlier than its stage-in there
//! allows (Algorithm 1's per-resource bound, [`ComponentRequest::not_before`]). Algorithm 1 asks for the
//! component's longest predicted execution over its candidates plus `ε`, so a component claimed
//! at the end of the window still has its whole run, and runs against the scheduler's model of
//! the sites (their queue estimates, as [`TableService`]). The job's JST is the latest start of
//! its reservations; each becomes a `Reserve` action from its start to the end of the
//! component's run from the JST (at most the run plus ε), and the components are claimed inside
//! their reservations at the JST. A site that refuses (the model was stale) sends
//! the job back to the queue. When no window exists the job stays queued for the next scan;
//! once its latest start has passed it fails as unplaceable, as does a job one of whose
//! components no site with reservations can hold.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::broker::coalloc::{coallocate, CoallocationRequest, ComponentRequest, TableService};
use crate::broker::rank::{self, predict, Prediction, QueueEstimate, SiteState};
use crate::broker::CoallocationStats;
use crate::config::SchedulerConfig;
use crate::model::{CoallocationMode, HeldReservation, JobId, Millis, SiteId};
use crate::placement::{Capacity, ComponentPlacement, PlacementContext};
use crate::state::{FailureReason, JobState};

use super::scan::placement_at;
use super::{Job, Scheduler};

/// The broker's state inside the scheduler.
#[derive(Debug, Clone, Default)]
pub(super) struct BrokerState {
    /// Per site: the driver's latest estimate plus the scheduler's bookings since.
    estimates: Vec<Option<QueueEstimate>>,
    /// Reservations decided for a placement about to be committed.
    plans: BTreeMap<JobId, Plan>,
    stats: BrokerStats,
}

impl BrokerState {
    pub(super) fn new(sites: usize) -> Self {
        BrokerState {
            estimates: vec![None; sites],
            ..Default::default()
        }
    }
}

/// Reservations of one placement: per component `(start, duration)` (`None`: claimed, or
/// reserved at the JST as KOALA does), and the job's start.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    pub(super) reserve: Vec<Option<(Millis, Millis)>>,
    pub(super) start: Millis,
    /// The reservation exists already (the job's owner holds it): nothing to ask the site.
    pub(super) held: bool,
}

/// Counters of the broker's work, for metrics and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerStats {
    /// Placements decided by TTD/TTS ranking.
    pub ranked_placements: u64,
    /// Ranking tries that left the job waiting for its best site.
    pub waits_for_best_site: u64,
    /// Co-allocations by reservations tried and succeeded.
    pub coallocations: u64,
    pub coallocations_succeeded: u64,
    /// Sums of Algorithm 1's counters over all co-allocations.
    pub algorithm: CoallocationStats,
}

fn add_stats(a: &mut CoallocationStats, b: &CoallocationStats) {
    a.iterations += b.iterations;
    a.new_ars += b.new_ars;
    a.failed_new_ars += b.failed_new_ars;
    a.modified_ars += b.modified_ars;
    a.failed_modified_ars += b.failed_modified_ars;
    a.path_augmentations += b.path_augmentations;
    a.failed_path_augmentations += b.failed_path_augmentations;
    a.requests += b.requests;
    a.invocations += b.invocations;
}

/// One candidate site of one component, with its placement (sources, FTT) and prediction.
struct Candidate {
    placement: ComponentPlacement,
    prediction: Prediction,
    fits_now: bool,
    /// How long it would hold the processors there (see [`SiteState::hold_ms`]).
    hold_ms: Millis,
}

impl Scheduler {
    /// The site's queue-wait estimate (001 §3.1): what its LRM holds and plans from now on.
    /// Replaces the previous one (and the scheduler's bookings since).
    pub fn update_site_queue_estimate(&mut self, site: SiteId, estimate: QueueEstimate) {
        if let Some(slot) = self.broker.estimates.get_mut(site.index()) {
            *slot = Some(estimate);
        }
    }

    /// The estimate the scheduler currently uses for a site.
    pub fn queue_estimate(&self, site: SiteId) -> Option<&QueueEstimate> {
        self.broker.estimates.get(site.index())?.as_ref()
    }

    /// What the broker did so far.
    pub fn broker_stats(&self) -> &BrokerStats {
        &self.broker.stats
    }

    /// The broker's placement decision for a queued job, or `None` when the job is KOALA's
    /// (not ranked, not co-allocated by reservations). The job may have failed when this returns.
    pub(super) fn broker_decide(&mut self, now: Millis, id: JobId, capacity: &mut Capacity) -> Option<Option<Vec<ComponentPlacement>>> {
        let job = &self.jobs[&id];
        if !brokered(&self.config, job) {
            return None;
        }
        if let Some(h) = job.spec.preferences.held_reservation.clone() {
            return Some(self.place_in_held(now, id, h));
        }
        let by_reservations = coallocation(&self.config, job) == CoallocationMode::Reservations;
        self.refresh_own_estimates(now);
        if by_reservations {
            return Some(self.place_by_reservations(now, id, capacity));
        }
        Some(self.place_by_rank(now, id, capacity))
    }

    /// A job in a reservation its owner holds: its one component at the reservation's site,
    /// claimed inside the reservation at its start (or at once if it began). A reservation
    /// that has ended, or a site blacklisted since, fails the job.
    fn place_in_held(&mut self, now: Millis, id: JobId, h: HeldReservation) -> Option<Vec<ComponentPlacement>> {
        if now >= h.end || self.views[h.site.index()].blacklisted {
            self.fail_held(now, id);
            return None;
        }
        let job = &self.jobs[&id];
        let ctx = PlacementContext {
            sites: &self.sites,
            catalogue: &self.catalogue,
            forecast: &self.forecast,
            staged: &job.staged,
            preference: None,
        };
        let placement = placement_at(&ctx, &job.spec, 1, 0, h.site, job.components[0].processors);
        let start = h.start.max(now);
        self.broker.plans.insert(
            id,
            Plan {
                reserve: vec![Some((start, h.end - start))],
                start,
                held: true,
            },
        );
        Some(vec![placement])
    }

    /// The site moved the flexible reservation `reservation` (001 §2.3) to `[start, end)`:
    /// every job held in it follows. A queued job is placed at the new start when its turn
    /// comes; a job placed and waiting for the reservation's start is claimed at the new start
    /// instead (at once when that has come). A job already claimed inside it is not touched
    /// (a site moves only reservations that have not begun). Returns the jobs that followed.
    pub fn held_reservation_moved(&mut self, now: Millis, reservation: &str, start: Millis, end: Millis) -> Vec<JobId> {
        let ids: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, j)| !j.state.is_terminal())
            .filter(|(_, j)| j.spec.preferences.held_reservation.as_ref().is_some_and(|h| h.id == reservation))
            .map(|(id, _)| *id)
            .collect();
        let mut followed = Vec::new();
        for id in ids {
            let job = self.jobs.get_mut(&id).expect("listed above");
            let h = job.spec.preferences.held_reservation.as_mut().expect("filtered above");
            if (h.start, h.end) == (start, end) {
                continue;
            }
            match job.state {
                JobState::Queued | JobState::Held => {}
                JobState::Placed => {
                    let waiting = self.reservation_starts.iter().find(|&&(_, j)| j == id).copied();
                    let Some((at, _)) = waiting else { continue };
                    let new_start = start.max(now);
                    self.reservation_starts.remove(&(at, id));
                    self.reservation_starts.insert((new_start, id));
                    job.timeline.estimated_start = Some(new_start);
                }
                _ => continue,
            }
            h.start = start;
            h.end = end;
            followed.push(id);
        }
        followed
    }

    /// The job's reservation is gone: it fails (it cannot run anywhere else).
    pub(super) fn fail_held(&mut self, now: Millis, id: JobId) {
        self.end_job(now, id, JobState::Failed(FailureReason::ReservationGone));
    }

    /// Takes the reservation plan of a placement being committed.
    pub(super) fn take_plan(&mut self, id: JobId) -> Option<Plan> {
        self.broker.plans.remove(&id)
    }

    /// Every candidate of component `i` (`processors`) of job `id`: its fixed site, or every
    /// usable site large enough (`reserving_only`: with advance reservations), with predictions.
    fn candidates(&self, now: Millis, id: JobId, i: usize, capacity: &Capacity, reserving_only: bool) -> Vec<Candidate> {
        let job = &self.jobs[&id];
        let spec = &job.spec;
        let comp = &job.components[i];
        let procs = comp.processors;
        let ctx = PlacementContext {
            sites: &self.sites,
            catalogue: &self.catalogue,
            forecast: &self.forecast,
            staged: &job.staged,
            preference: None,
        };
        let sites: Vec<SiteId> = match comp.fixed_site {
            Some(s) => vec![s],
            None => (0..self.sites.len() as u32).map(SiteId).collect(),
        };
        let knows_files = spec.input_files.iter().any(|f| self.catalogue.get(f).is_some());
        let mut out = Vec::new();
        for s in sites {
            let site = &self.sites[s.index()];
            if self.views[s.index()].blacklisted
                || site.processors < procs
                || (reserving_only && !site.supports_reservations)
                || !self.requirements_hold(id, s, capacity.available(s))
            {
                continue;
            }
            let placement = placement_at(&ctx, spec, job.components.len(), i, s, procs);
            let stage_in = if knows_files {
                placement.ftt_ms
            } else {
                spec.preferences.stage_in_ms.unwrap_or(0)
            };
            let exec = rank::execution_ms(&spec.preferences, spec.runtime_estimate_ms, site, &self.sites);
            let fits_now = capacity.fits(s, procs) && capacity.available(s) > 0;
            let speed = if site.speed.is_finite() && site.speed > 0.0 {
                site.speed
            } else {
                1.0
            };
            let hold_ms = exec.max((spec.runtime_estimate_ms as f64 / speed).round() as Millis).max(1);
            let state = SiteState {
                site: s,
                supports_reservations: site.supports_reservations,
                fits_now,
                estimate: self.broker.estimates[s.index()].as_ref(),
                hold_ms,
            };
            if let Some(prediction) = predict(now, state, procs, stage_in, exec, spec.preferences.stage_out_ms) {
                out.push(Candidate {
                    placement,
                    prediction,
                    fits_now,
                    hold_ms,
                });
            }
        }
        out.sort_by_key(|c| (c.prediction.key(job.policy), c.prediction.site));
        out
    }

    /// Components in decreasing size order, ties by index (as every policy).
    fn largest_first(&self, id: JobId) -> Vec<usize> {
        let job = &self.jobs[&id];
        let mut order: Vec<usize> = (0..job.components.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(job.components[i].processors), i));
        order
    }

    fn book(&mut self, site: SiteId, start: Millis, end: Millis, processors: u32) {
        if let Some(e) = self.broker.estimates[site.index()].as_mut() {
            e.book(start, end, processors);
        }
    }

    /// Placement by TTD/TTS ranking (claiming mode); see the module docs.
    fn place_by_rank(&mut self, now: Millis, id: JobId, capacity: &mut Capacity) -> Option<Vec<ComponentPlacement>> {
        let order = self.largest_first(id);
        let single = order.len() == 1;
        let mut trial = capacity.clone();
        let mut chosen: Vec<Candidate> = Vec::with_capacity(order.len());
        for &i in &order {
            let best = self
                .candidates(now, id, i, &trial, false)
                .into_iter()
                .find(|c| single || c.fits_now)?;
            if single && !best.prediction.reserved && best.prediction.queue_wait_ms > 0 {
                self.broker.stats.waits_for_best_site += 1;
                return None;
            }
            if best.fits_now {
                trial.take(best.prediction.site, best.placement.processors);
            }
            chosen.push(best);
        }
        self.broker.stats.ranked_placements += 1;
        let n = chosen.len();
        let (reserve, start, prediction) = if single {
            let c = &chosen[0];
            let p = c.prediction;
            let reserve = p.reserved.then_some((p.start(), c.hold_ms));
            (vec![reserve], p.start(), p)
        } else {
            // KOALA's atomic placement: start together at now + the largest stage-in.
            let start = now + chosen.iter().map(|c| c.prediction.stage_in_ms).max().unwrap_or(0);
            let mut agg = chosen[0].prediction;
            agg.stage_in_ms = chosen.iter().map(|c| c.prediction.stage_in_ms).max().unwrap_or(0);
            agg.queue_wait_ms = start - now - agg.stage_in_ms;
            agg.execution_ms = chosen.iter().map(|c| c.prediction.execution_ms).max().unwrap_or(0);
            agg.reserved = chosen.iter().any(|c| c.prediction.reserved);
            (vec![None; n], start, agg)
        };
        for (c, r) in chosen.iter().zip(&reserve) {
            let p = &c.prediction;
            let (from, to) = match r {
                Some((s, d)) => (*s, s + d),
                None => (now, start + p.execution_ms),
            };
            self.book(p.site, from, to, c.placement.processors);
        }
        *capacity = trial;
        let mut placements: Vec<ComponentPlacement> = chosen.into_iter().map(|c| c.placement).collect();
        // Plans are per component index.
        let mut by_index = vec![None; self.jobs[&id].components.len()];
        for (p, r) in placements.iter().zip(reserve) {
            by_index[p.component] = r;
        }
        if single && by_index[0].is_some() {
            self.broker.plans.insert(
                id,
                Plan {
                    reserve: by_index,
                    start,
                    held: false,
                },
            );
        }
        self.jobs.get_mut(&id).unwrap().prediction = Some(prediction);
        placements.sort_by_key(|p| p.component);
        Some(placements)
    }

    /// Co-allocation by reservations (Algorithm 1 against the scheduler's model of the sites).
    fn place_by_reservations(&mut self, now: Millis, id: JobId, capacity: &Capacity) -> Option<Vec<ComponentPlacement>> {
        let order = self.largest_first(id);
        let job = &self.jobs[&id];
        let prefs = job.spec.preferences.clone();
        let submitted = job.timeline.submitted;
        let latest_user = prefs.latest_start_ms.map(|l| submitted.saturating_add(l));
        if latest_user.is_some_and(|l| now > l) {
            self.fail_unplaceable(now, id);
            return None;
        }
        let eps = prefs.max_start_deviation_ms.unwrap_or(self.config.broker.max_start_deviation_ms);
        let n = job.components.len();
        let mut ranked: Vec<Vec<Candidate>> = (0..n).map(|_| Vec::new()).collect();
        for &i in &order {
            ranked[i] = self.candidates(now, id, i, capacity, true);
        }
        // No site with reservations can ever hold a component: unplaceable in this mode.
        let never = (0..n).any(|i| {
            let c = &self.jobs[&id].components[i];
            !self.sites.iter().enumerate().any(|(s, site)| {
                site.supports_reservations && site.processors >= c.processors && c.fixed_site.is_none_or(|f| f.index() == s)
            })
        });
        if never {
            self.fail_unplaceable(now, id);
            return None;
        }
        if ranked.iter().any(|r| r.is_empty()) {
            return None;
        }
        let t_e = now.max(submitted.saturating_add(prefs.earliest_start_ms.unwrap_or(0)));
        let t_l = latest_user.unwrap_or(now.saturating_add(self.config.broker.window_ms));
        let components: Vec<ComponentRequest> = (0..n)
            .map(|i| ComponentRequest {
                processors: self.jobs[&id].components[i].processors,
                duration_ms: ranked[i].iter().map(|c| c.prediction.execution_ms).max().unwrap_or(0).max(1) + eps,
                sites: ranked[i].iter().map(|c| c.prediction.site).collect(),
                // Not before the component's input can be there.
                not_before: ranked[i].iter().map(|c| now + c.prediction.stage_in_ms).collect(),
            })
            .collect();
        let request = CoallocationRequest {
            components,
            earliest_start: t_e,
            latest_start: t_l,
            epsilon_ms: eps,
            augmentation: self.config.broker.augmentation,
        };
        let mut service = TableService::new(now, &self.sites.iter().map(|s| s.processors).collect::<Vec<_>>());
        for (s, site) in self.sites.iter().enumerate() {
            let held = match &self.broker.estimates[s] {
                Some(e) => e.held.clone(),
                None => QueueEstimate::idle_only(site.processors, now, capacity.available(SiteId(s as u32))).held,
            };
            service.others[s] = Some(held);
        }
        let outcome = coallocate(&request, &mut service);
        self.broker.stats.coallocations += 1;
        add_stats(&mut self.broker.stats.algorithm, &outcome.stats);
        let Some(held) = outcome.reservations else {
            if latest_user.is_some_and(|l| now >= l) {
                self.fail_unplaceable(now, id);
            }
            return None;
        };
        self.broker.stats.coallocations_succeeded += 1;
        let start = held.iter().map(|h| h.start).max().unwrap_or(t_e);
        let mut placements = Vec::with_capacity(n);
        let mut reserve = vec![None; n];
        let mut prediction: Option<Prediction> = None;
        for (i, h) in held.iter().enumerate() {
            let c = ranked[i]
                .iter()
                .find(|c| c.prediction.site == h.site)
                .expect("a reservation is at a candidate site");
            // Algorithm 1 reserved the run plus ε; the component starts at the job's start, so
            // its reservation is cut to end with its run.
            let run = request.components[i].duration_ms - eps;
            reserve[i] = Some((h.start, start - h.start + run));
            placements.push(c.placement.clone());
            let mut p = c.prediction;
            p.queue_wait_ms = start.saturating_sub(now + p.stage_in_ms);
            p.reserved = true;
            if prediction.is_none_or(|q| p.ttd_ms() > q.ttd_ms()) {
                prediction = Some(p);
            }
        }
        for (i, h) in held.iter().enumerate() {
            let (start, duration) = reserve[i].expect("every component is reserved");
            let procs = self.jobs[&id].components[i].processors;
            self.book(h.site, start, start + duration, procs);
        }
        self.broker.plans.insert(
            id,
            Plan {
                reserve,
                start,
                held: false,
            },
        );
        self.jobs.get_mut(&id).unwrap().prediction = prediction;
        Some(placements)
    }

    fn fail_unplaceable(&mut self, now: Millis, id: JobId) {
        self.queues.remove(id);
        self.jobs.get_mut(&id).unwrap().timeline.finished = Some(now);
        self.set_state(now, id, JobState::Failed(FailureReason::Unplaceable));
    }
}

/// The job's co-allocation mode: its own preference, else the configured one.
fn coallocation(config: &SchedulerConfig, job: &Job) -> CoallocationMode {
    job.spec.preferences.coallocation.unwrap_or(config.broker.coallocation)
}

/// Whether the broker decides the job's placement ([`Scheduler::broker_decide`] answers
/// `Some`): a job in a held reservation, or (neither flexible nor a bag) one co-allocated by
/// reservations or with a broker policy (TTD/TTS). Otherwise KOALA's policies place it and the
/// broker does nothing, which lets a scan reject such a job without asking it.
#[inline]
pub(super) fn brokered(config: &SchedulerConfig, job: &Job) -> bool {
    if job.spec.preferences.held_reservation.is_some() {
        return true;
    }
    let bag = job.spec.min_components.is_some_and(|k| (k as usize) < job.components.len());
    if job.spec.flexible.is_some() || bag {
        return false;
    }
    coallocation(config, job) == CoallocationMode::Reservations || job.policy.is_broker()
}
