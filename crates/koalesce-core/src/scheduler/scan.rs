//! Placement scans: the weighted round-robin over the four queues, one placement try per job,
//! bags of tasks ("at least k components placed"), and committing a placement.

use std::collections::VecDeque;

use crate::config::ScanInterval;
use crate::gridway::Queueing;
use crate::model::{FileMode, JobId, JobSpec, Millis, Priority, SiteId};
use crate::placement::{Capacity, ComponentPlacement, FileSource, PlacementContext, PlacementRequest};
use crate::state::{ComponentState, FailureReason, JobState};

use super::broker::brokered;
use super::gridway::SiteChoice;
use super::{known, Action, Component, FileSourceRecord, Job, ScanWatch, Scheduler, TransferKey, TransferStatus};

impl Scheduler {
    pub(super) fn arm_scan(&mut self, now: Millis) {
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

    pub(super) fn note_queue_length(&mut self) {
        self.stats.max_queue_length = self.stats.max_queue_length.max(self.queues.len());
    }

    /// One scan: pick a queue by weighted round-robin, walk it head to tail, place what fits.
    pub(super) fn scan(&mut self, now: Millis) {
        if self.config.queueing == Queueing::Gridway {
            return self.gridway_scan(now);
        }
        let Some(priority) = self.queues.next_queue() else { return };
        self.stats.scans += 1;
        let snapshot: Vec<JobId> = self.queues.queue(priority).iter().copied().collect();
        // One capacity view per scan, lowered by each placement the scan makes.
        let mut capacity = self.capacity();
        // What remains of the queue is the jobs still queued at this level, in order (promoted
        // jobs were appended to their new queue by `try_place_job`). Each job is judged right
        // after its own try, while its record is in cache; that is the judgement of the end of
        // the scan unless something changed another job's state or this queue's entries (a
        // state change of another job, a job queued, an entry twice in the queue): then the
        // queue is filtered again at the end, as a whole.
        let pushes = self.queues.pushes();
        self.scan_watch = ScanWatch {
            trying: None,
            disturbed: !all_distinct(&snapshot),
        };
        let mut kept: VecDeque<JobId> = VecDeque::with_capacity(snapshot.len());
        for id in snapshot {
            self.scan_watch.trying = Some(id);
            self.try_place_job(now, id, &mut capacity);
            let job = &self.jobs[&id];
            if job.state == JobState::Queued && job.priority == priority {
                kept.push_back(id);
            }
        }
        let watch = std::mem::take(&mut self.scan_watch);
        if watch.disturbed || self.queues.pushes() != pushes {
            kept = self
                .queues
                .queue(priority)
                .iter()
                .copied()
                .filter(|id| {
                    let job = &self.jobs[id];
                    job.state == JobState::Queued && job.priority == priority
                })
                .collect();
        }
        self.queues.set_queue(priority, kept);
    }

    pub(super) fn prune_queue_entry(&mut self, id: JobId) {
        if self.jobs[&id].state != JobState::Queued {
            self.queues.remove(id);
        }
    }

    pub(super) fn capacity(&self) -> Capacity {
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
    pub(super) fn try_place_job(&mut self, now: Millis, id: JobId, capacity: &mut Capacity) {
        // A scan tries every queued job and most do not fit: the common outcome (a job KOALA's
        // policies place, rejected because it exceeds the available processors) takes one
        // lookup of the job, the others look it up again after each step that needs `self`.
        let mut job = known(&mut self.jobs, id);
        if job.state != JobState::Queued {
            return;
        }
        self.stats.placement_tries += 1;
        // Only a blacklisted site can make a job that passed validation impossible to hold.
        if self.config.blacklist_expiry_ms.is_none() && capacity.has_excluded_sites() {
            if !self.could_ever_fit(id) {
                self.queues.remove(id);
                let job = known(&mut self.jobs, id);
                job.placement_tries += 1;
                job.timeline.finished = Some(now);
                self.set_state(now, id, JobState::Failed(FailureReason::Unplaceable));
                return;
            }
            job = known(&mut self.jobs, id);
        }
        // Exactly what `broker_decide` then `decide_placement` would answer for such a job,
        // without asking them.
        let decision = if !brokered(&self.config, job) && exceeds_available(job, capacity) {
            None
        } else {
            let decision = match self.broker_decide(now, id, capacity) {
                Some(decision) => decision,
                None => self.decide_placement(now, id, capacity),
            };
            job = known(&mut self.jobs, id);
            if job.state != JobState::Queued {
                return; // the broker found it unplaceable
            }
            decision
        };
        job.placement_tries += 1;
        job.tries_at_level += 1;
        let Some(placements) = decision else {
            if self.config.max_placement_tries.is_some_and(|max| job.placement_tries >= max) {
                job.timeline.finished = Some(now);
                self.queues.remove(id);
                self.set_state(now, id, JobState::Failed(FailureReason::PlacementTries));
                return;
            }
            if let Some(p) = self.config.anti_starvation_tries {
                if job.tries_at_level >= p && matches!(job.priority, Priority::Low | Priority::High) {
                    job.priority = job.priority.promoted();
                    job.tries_at_level = 0;
                    let new = job.priority;
                    self.queues.remove(id);
                    self.queues.push(new, id);
                }
            }
            // The tries changed without a change of state: noted for drivers that persist
            // the queue (once per job until they take it).
            if !job.progress_pending {
                job.progress_pending = true;
                self.progress.push(id);
            }
            return;
        };
        self.commit_placement(now, id, placements);
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
    fn decide_placement(&mut self, now: Millis, id: JobId, available: &mut Capacity) -> Option<Vec<ComponentPlacement>> {
        if exceeds_available(&self.jobs[&id], available) {
            return None;
        }
        // REQUIREMENTS, RANK, GridWay's priority and bans (gridway.rs).
        let Ok(choice) = self.site_choice(now, id, available) else {
            return None;
        };
        let job = &self.jobs[&id];
        let mut capacity = choice.as_ref().map_or_else(|| available.clone(), |c| c.capacity.clone());
        let ctx = PlacementContext {
            sites: &self.sites,
            catalogue: &self.catalogue,
            forecast: &self.forecast,
            staged: &job.staged,
            preference: choice.as_ref().map(|c| c.preference.as_slice()),
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
                            return self.place_bag(now, id, k as usize, available);
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
                None => return bag_minimum.and_then(|k| self.place_bag(now, id, k as usize, available)),
            }
        }
        out.sort_by_key(|c| c.component);
        match choice {
            Some(_) => SiteChoice::apply(&out, available),
            None => *available = capacity,
        }
        Some(out)
    }

    /// Bag of tasks (003 §3.3, "at least k components placed"): when the whole bag does not fit,
    /// place components one at a time, largest first (fixed ones at their site, the others with
    /// the job's policy); succeed if at least `k` got a site. The rest are skipped in this run.
    fn place_bag(&mut self, now: Millis, id: JobId, k: usize, available: &mut Capacity) -> Option<Vec<ComponentPlacement>> {
        let Ok(choice) = self.site_choice(now, id, available) else {
            return None;
        };
        let job = &self.jobs[&id];
        let mut capacity = choice.as_ref().map_or_else(|| available.clone(), |c| c.capacity.clone());
        let ctx = PlacementContext {
            sites: &self.sites,
            catalogue: &self.catalogue,
            forecast: &self.forecast,
            staged: &job.staged,
            preference: choice.as_ref().map(|c| c.preference.as_slice()),
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
        match choice {
            Some(_) => SiteChoice::apply(&out, available),
            None => *available = capacity,
        }
        Some(out)
    }

    fn commit_placement(&mut self, now: Millis, id: JobId, placements: Vec<ComponentPlacement>) {
        // The broker's reservations (start, duration) per component, if it decided them.
        let plan = self.take_plan(id);
        let job = known(&mut self.jobs, id);
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
            let reservable = match &plan {
                Some(plan) => plan.reserve[p.component].is_some(),
                None => self.sites[p.site.index()].supports_reservations,
            };
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
        let jst = plan.as_ref().map_or(now + ftt, |plan| plan.start);
        tl.estimated_start = Some(jst);
        tl.first_estimated_start.get_or_insert(jst);
        job.placements += 1;
        let jct = now + (job.claim_fraction * ftt as f64).round() as Millis;
        job.next_claim = any_claim.then_some(jct);
        let duration = job.spec.runtime_estimate_ms;
        // A reservation the job's owner holds exists already: nothing to ask.
        let held = plan.as_ref().is_some_and(|p| p.held);
        let reserve: Vec<Action> = job
            .components
            .iter()
            .enumerate()
            .filter(|(_, c)| c.reserved && !held)
            .map(|(i, c)| {
                let (start, duration) = plan.as_ref().and_then(|plan| plan.reserve[i]).unwrap_or((jst, duration.max(1)));
                Action::Reserve {
                    job: id,
                    component: i as u32,
                    site: c.site.expect("a placed component has a site"),
                    processors: c.processors,
                    start,
                    duration,
                }
            })
            .collect();
        self.set_state(now, id, JobState::Placed);
        self.gridway_on_placed(now, id);
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
}

/// Whether no job is in `ids` twice (most queues are in submission order: checked first).
fn all_distinct(ids: &[JobId]) -> bool {
    if ids.windows(2).all(|w| w[0] < w[1]) {
        return true;
    }
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    sorted.windows(2).all(|w| w[0] != w[1])
}

/// Fast rejection without asking a policy: a component larger than every site's available
/// processors, or a flexible total larger than their sum.
#[inline]
fn exceeds_available(job: &Job, available: &Capacity) -> bool {
    let largest = job
        .components
        .iter()
        .filter(|c| c.fixed_site.is_none())
        .map(|c| c.processors)
        .max()
        .unwrap_or(0);
    largest > available.max_available()
        || job
            .spec
            .flexible
            .as_ref()
            .is_some_and(|f| f.total as u64 > available.total_available())
}

/// Component `component` of a job at a given site (a fixed site, or ICP's preemption target),
/// reading every input from its fastest replica.
pub(super) fn placement_at(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_distinct_finds_a_job_twice_in_any_order() {
        let ids = |v: &[u64]| v.iter().map(|&i| JobId(i)).collect::<Vec<_>>();
        assert!(all_distinct(&ids(&[])));
        assert!(all_distinct(&ids(&[1, 2, 5])));
        assert!(all_distinct(&ids(&[5, 1, 2])));
        assert!(!all_distinct(&ids(&[1, 2, 2])));
        assert!(!all_distinct(&ids(&[7, 1, 3, 7])));
    }
}
