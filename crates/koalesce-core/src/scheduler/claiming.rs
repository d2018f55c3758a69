//! Claiming without reservations: the claiming queue, the Incremental Claiming Policy
//! (003 Alg. 2) with re-placement and preemption, and the launch once data and processors are there.

use std::collections::BTreeSet;

use crate::config::OnJstReached;
use crate::model::{FileMode, JobId, Millis, PolicyKind, Priority, SiteId};
use crate::placement::{Capacity, ComponentPlacement, PlacementContext, PlacementRequest};
use crate::state::{ComponentState, FailureReason, JobState};

use super::gridway::SiteChoice;
use super::release::Requeue;
use super::scan::placement_at;
use super::{known, Action, FileSourceRecord, Scheduler, TransferKey, TransferStatus};

impl Scheduler {
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

    pub(super) fn schedule_claim(&mut self, id: JobId, at: Millis) {
        let job = known(&mut self.jobs, id);
        if let Some(old) = job.next_claim.take() {
            self.claiming.remove(&(old, id));
        }
        job.next_claim = Some(at);
        self.claiming.insert((at, id));
    }

    /// One claiming try with the Incremental Claiming Policy (003 Alg. 2).
    pub(super) fn claiming_try(&mut self, now: Millis, id: JobId) {
        let Some(job) = self.jobs.get_mut(&id) else { return };
        if job.state != JobState::Placed {
            return;
        }
        job.next_claim = None;
        job.claiming_tries += 1;
        self.stats.claiming_tries += 1;
        if self.config.max_claiming_tries.is_some_and(|m| job.claiming_tries > m) {
            self.end_job(now, id, JobState::Failed(FailureReason::ClaimingTries));
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
                    let s = c.site.expect("a placed component has a site").index();
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
                known(&mut self.jobs, id).timeline.claimed = Some(now);
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
                let job = known(&mut self.jobs, id);
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
        let old_site = comp.site.expect("a placed component has a site");
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
            // REQUIREMENTS, RANK, GridWay's priority and bans hold here too (gridway.rs).
            let choice = match self.site_choice(now, id, &capacity) {
                Ok(c) => c,
                // No site qualifies: the policy has nothing to choose from.
                Err(_) => Some(SiteChoice {
                    capacity: Capacity::new(vec![0; self.sites.len()]),
                    preference: vec![0; self.sites.len()],
                }),
            };
            if let Some(c) = &choice {
                capacity = c.capacity.clone();
            }
            let job = &self.jobs[&id];
            let ctx = PlacementContext {
                sites: &self.sites,
                catalogue: &self.catalogue,
                forecast: &self.forecast,
                staged: &job.staged,
                preference: choice.as_ref().map(|c| c.preference.as_slice()),
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
                    return Some(self.jobs[&id].components[i].site.expect("a component just moved has a site"));
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
            known(&mut self.jobs, vid).preemptions += 1;
            let before = self.views[target.index()].idle;
            self.return_to_queue(now, vid, Requeue::Preempted);
            // Claims the driver never pulled were already given back by release.
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
                preference: None,
            };
            let placement = placement_at(&ctx, &job.spec, job.components.len(), i, target, procs);
            self.move_component(id, i, placement);
        }
        idle[target.index()] -= procs;
        Some(target)
    }

    /// Moves a placed component to a new site (ICP re-placement), starting its transfers.
    pub(super) fn move_component(&mut self, id: JobId, i: usize, p: ComponentPlacement) {
        let job = known(&mut self.jobs, id);
        let c = &mut job.components[i];
        let old = c.site.replace(p.site).expect("a placed component has a site");
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

    pub(super) fn claim_component(&mut self, id: JobId, i: usize) {
        let job = known(&mut self.jobs, id);
        let c = &mut job.components[i];
        let site = c.site.expect("a placed component has a site");
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

    pub(super) fn maybe_launch(&mut self, now: Millis, id: JobId) {
        let job = &self.jobs[&id];
        if job.state != JobState::Claimed || !job.data_ready() {
            return;
        }
        let job = known(&mut self.jobs, id);
        for c in job.components.iter_mut().filter(|c| c.state != ComponentState::Skipped) {
            c.state = ComponentState::Running;
        }
        job.timeline.started = Some(now);
        self.set_state(now, id, JobState::Running);
        self.actions.push_back(Action::Launch { job: id });
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
