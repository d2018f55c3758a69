//! Jobs entering the core: submission, and re-adoption after a daemon restart.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{JobId, JobSpec, Millis, PolicyKind, Priority, SiteId, Timeline};
use crate::state::{ComponentState, JobState};

use super::{Component, Job, Scheduler, SubmitError};

impl Scheduler {
    /// Validates and enqueues a job. The job's id is returned; it is placed at the next scan
    /// (or now, with `place_on_submit`).
    pub fn submit(&mut self, now: Millis, spec: JobSpec) -> Result<JobId, SubmitError> {
        let id = JobId(self.next_job);
        self.submit_with_id(now, id, spec)
    }

    /// Like [`Scheduler::submit`] with an id chosen by the caller (the daemon allocates ids
    /// durably before the core sees the job). Ids must be unique.
    pub fn submit_with_id(&mut self, now: Millis, id: JobId, spec: JobSpec) -> Result<JobId, SubmitError> {
        if spec.begin_ms.is_some_and(|b| b > now) {
            return self.submit_gated(now, id, spec, super::Gate::default());
        }
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
    /// its submission time, tries and (possibly promoted) priority. For queued jobs (which keep
    /// their place in the queue of `priority`, appended in the order of these calls) and held
    /// ones.
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
        if job.state == JobState::Held {
            // Held again (user hold, dependencies, begin time): not in a queue to keep a place in.
            job.timeline.submitted = submitted;
            job.placement_tries = placement_tries;
            job.claiming_tries = claiming_tries;
            job.error_resubmissions = error_resubmissions;
            job.priority = priority;
            return;
        }
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
            let v = &mut self.views[c.site.expect("a placed component has a site").index()];
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
    pub(super) fn new_job(&self, id: JobId, spec: JobSpec, components: Vec<Component>, state: JobState, timeline: Timeline) -> Job {
        let policy = match (&spec.flexible, spec.policy) {
            (Some(_), _) => PolicyKind::Fcm,
            (None, Some(p)) => p,
            // A RANK without a policy asks for GridWay's ranking (see crate::gridway).
            (None, None) if spec.rank.is_some() => PolicyKind::Gridway,
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
            progress_pending: false,
            prediction: None,
            user_hold: false,
            waiting_on: Vec::new(),
            begin_pending: false,
            outputs_pending: false,
            bag: None,
        }
    }

    pub(super) fn insert_job(&mut self, now: Millis, id: JobId, spec: JobSpec) {
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
}
