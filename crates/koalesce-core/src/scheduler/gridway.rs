//! GridWay in the scheduler: the sites a job may use and its preference among them (REQUIREMENTS,
//! RANK, resource priority, banning) for each placement try; the `queueing = "gridway"` scan;
//! usage history, bans and share history fed from the job events; and what drivers read (the
//! job's GW_* environment, the files the expressions name). The policy logic is in
//! [`crate::gridway`]; this module only connects it to the scheduler's state.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::config::SchedulerConfig;
use crate::expr::{gridway_data_environment, Compiled};
use crate::gridway::banning::Ban;
use crate::gridway::jobprio::{self, JobPriority, Pending, ShareHistory};
use crate::gridway::priority::{priority_key, resource_priorities, Candidate, UsageHistory};
use crate::gridway::{BanTable, MatchStats, Matcher};
use crate::model::{FileEntry, JobId, Millis, PolicyKind, Priority, ReplicaCatalogue, Site, SiteId};
use crate::placement::Capacity;
use crate::state::JobState;

use super::Scheduler;

/// The scheduler's GridWay state.
#[derive(Debug, Clone)]
pub(super) struct GridwayState {
    matcher: Matcher,
    bans: BanTable,
    usage: Vec<UsageHistory>,
    shares: ShareHistory,
    /// Fixed priority per site (RP_HOST / RP_IM[DEFAULT]); 0: never used by `gridway` jobs.
    site_fixed: Vec<u32>,
    /// The answers a driver's catalogue cache gave ([`Scheduler::set_catalogue_entry`]); once
    /// there, the data functions read only these, never the placement catalogue.
    data: Option<ReplicaCatalogue>,
    /// Bumped whenever bans, usage or share history change (a driver persists on change).
    history_version: u64,
}

/// What GridWay learned from past jobs, which its rank and banning read and which must outlive
/// a daemon restart: per site (by name) its ban state and usage history, and the owners' share
/// history. See [`Scheduler::gridway_history`] and [`Scheduler::restore_gridway_history`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GridwayHistory {
    pub sites: BTreeMap<String, SiteHistory>,
    #[serde(default)]
    pub shares: ShareHistory,
}

/// One site's part of a [`GridwayHistory`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SiteHistory {
    #[serde(default)]
    pub ban: Ban,
    #[serde(default)]
    pub usage: UsageHistory,
}

impl GridwayState {
    pub(super) fn new(config: &SchedulerConfig, sites: &[Site]) -> Self {
        let rp = &config.gridway.resource_priority;
        GridwayState {
            matcher: Matcher::new(sites),
            bans: BanTable::new(sites.len(), config.gridway.banning),
            usage: vec![UsageHistory::default(); sites.len()],
            shares: ShareHistory::default(),
            site_fixed: sites
                .iter()
                .map(|s| rp.site_priority.get(&s.name).copied().unwrap_or(rp.default_site_priority))
                .collect(),
            data: None,
            history_version: 0,
        }
    }

    pub(super) fn catalogue_changed(&mut self) {
        self.matcher.catalogue_changed();
    }
}

/// The sites one placement try of a job may use (the others have no capacity here) and the
/// job's preference for each, higher first.
#[derive(Debug, Clone)]
pub(super) struct SiteChoice {
    pub capacity: Capacity,
    pub preference: Vec<i64>,
}

/// No site may take a component of the job now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct NoSite;

impl SiteChoice {
    /// Takes what `placed` took out of the restricted view out of the full one too.
    pub fn apply(placed: &[crate::placement::ComponentPlacement], full: &mut Capacity) {
        for p in placed {
            full.take(p.site, p.processors);
        }
    }
}

impl Scheduler {
    /// For a job with REQUIREMENTS, a RANK or the `gridway` policy: the sites it may use now
    /// and its preference among them (`Ok(None)` for any other job: every site, no
    /// preference; `Err(NoSite)` when no site qualifies, so the try can stop at once).
    ///
    /// Only the sites with room for the job's smallest free component (and its fixed sites)
    /// are visited and evaluated: the others could not take a component anyway.
    pub(super) fn site_choice(&mut self, now: Millis, id: JobId, available: &Capacity) -> Result<Option<SiteChoice>, NoSite> {
        let job = &self.jobs[&id];
        let gridway = job.policy == PolicyKind::Gridway;
        let (req, rank) = (job.spec.requirements.as_ref(), job.spec.rank.as_ref());
        if req.is_none() && rank.is_none() && !gridway {
            return Ok(None);
        }
        let need = if job.spec.flexible.is_some() {
            1
        } else {
            job.components
                .iter()
                .filter(|c| c.fixed_site.is_none())
                .map(|c| c.processors)
                .min()
                .unwrap_or(u32::MAX)
        };
        let g = &mut self.gridway;
        let banning = gridway && g.bans.enabled();
        let mut cands: Vec<SiteId> = available.sites_with_room(need).collect();
        for c in &job.components {
            if let Some(s) = c.fixed_site {
                if available.available(s) > 0 && !cands.contains(&s) {
                    cands.push(s);
                }
            }
        }
        let banned = |s: SiteId| banning && g.bans.is_banned(s, now);
        let excluded = |s: SiteId| gridway && g.site_fixed[s.index()] == 0;
        cands.retain(|&s| !banned(s) && !excluded(s));
        let catalogue = g.data.as_ref().unwrap_or(&self.catalogue);
        if let Some(e) = req {
            let mut ev = g.matcher.evaluator(e.compiled(), catalogue);
            cands.retain(|&s| ev.matches(s, available.available(s)));
        }
        if cands.is_empty() {
            return Err(NoSite);
        }
        let ranks: Vec<i64> = match rank {
            Some(e) => {
                let mut ev = g.matcher.evaluator(e.compiled(), catalogue);
                cands.iter().map(|&s| ev.value(s, available.available(s))).collect()
            }
            None => vec![0; cands.len()],
        };
        let mut preference = vec![0i64; self.sites.len()];
        if gridway {
            let cfg = &self.config.gridway.resource_priority;
            let c: Vec<Candidate> = cands
                .iter()
                .zip(&ranks)
                .map(|(&s, &r)| Candidate {
                    site: s,
                    rank: r,
                    fixed: g.site_fixed[s.index()],
                    hist_ms: g.usage[s.index()].mean_ms(now, cfg.usage_window_ms),
                    last_ms: g.usage[s.index()].last_ms.map(|x| x as f64),
                })
                .collect();
            for (cand, p) in c.iter().zip(resource_priorities(&c, cfg)) {
                preference[cand.site.index()] = priority_key(p.total);
            }
        } else {
            for (&s, &r) in cands.iter().zip(&ranks) {
                preference[s.index()] = r;
            }
        }
        let mut masked = vec![0u32; self.sites.len()];
        for &s in &cands {
            masked[s.index()] = available.available(s);
        }
        Ok(Some(SiteChoice {
            capacity: Capacity::with_excluded_sites(masked, available.has_excluded_sites()),
            preference,
        }))
    }

    /// Whether job `id`'s REQUIREMENTS hold at `site` with `free` processors free (for the
    /// broker's TTD/TTS candidates, which it ranks itself).
    pub(super) fn requirements_hold(&self, id: JobId, site: SiteId, free: u32) -> bool {
        match &self.jobs[&id].spec.requirements {
            Some(r) => r.is_empty() || self.gridway.matcher.value_uncached(r.compiled(), self.data_catalogue(), site, free) != 0,
            None => true,
        }
    }

    /// A scan under `queueing = "gridway"`: every queued job, in GridWay's job priority order.
    pub(super) fn gridway_scan(&mut self, now: Millis) {
        if self.queues.is_empty() {
            return;
        }
        self.stats.scans += 1;
        let order = self.gridway_priorities(now);
        let mut capacity = self.capacity();
        for jp in order {
            self.try_place_job(now, jp.id, &mut capacity);
        }
        for p in Priority::ALL {
            let kept = self
                .queues
                .queue(p)
                .iter()
                .copied()
                .filter(|id| {
                    let job = &self.jobs[id];
                    job.state == JobState::Queued && job.priority == p
                })
                .collect();
            self.queues.set_queue(p, kept);
        }
    }

    /// GridWay's job priorities of the queued jobs at `now`, in dispatch order (the order a
    /// `queueing = "gridway"` scan tries them).
    pub fn gridway_priorities(&self, now: Millis) -> Vec<JobPriority> {
        let pending: Vec<Pending<'_>> = self
            .queues
            .iter()
            .map(|id| {
                let j = &self.jobs[&id];
                Pending {
                    id,
                    priority: j.priority,
                    queued_at: j.timeline.queued,
                    deadline_at: j.spec.deadline_ms.map(|d| j.timeline.submitted.saturating_add(d)),
                    owner: j.spec.owner.as_deref().unwrap_or(""),
                }
            })
            .collect();
        jobprio::order(&pending, now, &self.config.gridway.job_priority, &self.gridway.shares)
    }

    /// A job was placed (dispatched): counted for its owner's share.
    pub(super) fn gridway_on_placed(&mut self, now: Millis, id: JobId) {
        let owner = self.jobs[&id].spec.owner.as_deref().unwrap_or("");
        self.gridway.shares.record(now, owner, &self.config.gridway.job_priority);
        self.gridway.history_version += 1;
    }

    /// A component ended well at `site`: its time from placement joins the site's usage
    /// history, and the site's failure streak and ban are cleared.
    pub(super) fn gridway_on_success(&mut self, now: Millis, id: JobId, site: SiteId) {
        let placed = self.jobs[&id].timeline.placed.unwrap_or(now);
        let window = self.config.gridway.resource_priority.usage_window_ms;
        self.gridway.usage[site.index()].record(now, now.saturating_sub(placed), window);
        self.gridway.bans.on_success(site);
        self.gridway.history_version += 1;
    }

    /// A component failed at `site` (a soft error): the site is banned for `gridway` jobs.
    pub(super) fn gridway_on_failure(&mut self, now: Millis, site: SiteId) {
        self.gridway.bans.on_failure(now, site);
        self.gridway.history_version += 1;
    }

    /// The environment 004 §3.2 gives component `component` of a job with REQUIREMENTS or RANK
    /// at the site it is placed on: GW_CLOSE_SE and GW_REMOTE_FILES_0, _1, … (the files its
    /// HAS_CLOSE_DATA / SIZE_CLOSE_DATA asked about that the site does not hold, per the
    /// catalogue now). `None` for other jobs and unplaced components. Drivers add it to the
    /// component's environment when they launch it.
    pub fn gridway_environment(&self, job: JobId, component: u32) -> Option<Vec<(String, String)>> {
        let j = self.jobs.get(&job)?;
        let exprs: Vec<&Compiled> = [j.spec.requirements.as_ref(), j.spec.rank.as_ref()]
            .into_iter()
            .flatten()
            .map(|e| e.compiled())
            .collect();
        if exprs.is_empty() {
            return None;
        }
        let site = j.components.get(component as usize)?.site?;
        Some(gridway_data_environment(
            &exprs,
            self.data_catalogue(),
            site,
            &self.sites[site.index()].name,
        ))
    }

    /// The logical files the REQUIREMENTS and RANK of the jobs not yet ended ask about: what a
    /// daemon refreshes through its catalogue cache before a scan.
    pub fn expression_files(&self) -> BTreeSet<String> {
        self.jobs
            .values()
            .filter(|j| !j.state.is_terminal())
            .flat_map(|j| [j.spec.requirements.as_ref(), j.spec.rank.as_ref()])
            .flatten()
            .flat_map(|e| e.files().iter().cloned())
            .collect()
    }

    /// The catalogue's answer for one file (`None`: not in the catalogue), from a driver's
    /// catalogue cache (004 §3.3). From the first answer on, the data functions (CLOSE_DATA,
    /// HAS_CLOSE_DATA, SIZE_CLOSE_DATA, the GW_* environment) read only the answers given
    /// here, as GridWay reads its cache, and no longer the placement catalogue (which keeps
    /// serving CF and staging, always current). The simulator never calls this.
    pub fn set_catalogue_entry(&mut self, name: &str, entry: Option<FileEntry>) {
        let data = self.gridway.data.get_or_insert_with(ReplicaCatalogue::new);
        match entry {
            Some(e) => data.insert(name, e.size_bytes, e.replicas),
            None => {
                data.remove(name);
            }
        }
        self.gridway.catalogue_changed();
    }

    /// The catalogue the data functions read: the cache's answers once a driver gave one,
    /// else the placement catalogue.
    pub fn data_catalogue(&self) -> &ReplicaCatalogue {
        self.gridway.data.as_ref().unwrap_or(&self.catalogue)
    }

    /// The failure-rate state of a site.
    pub fn ban(&self, site: SiteId) -> &Ban {
        self.gridway.bans.get(site)
    }

    /// Whether `site` is banned for `gridway` jobs at `now`.
    pub fn is_banned(&self, site: SiteId, now: Millis) -> bool {
        self.gridway.bans.is_banned(site, now)
    }

    /// The usage history of a site (Eq. 1's P_hist and P_current).
    pub fn usage_history(&self, site: SiteId) -> &UsageHistory {
        &self.gridway.usage[site.index()]
    }

    /// GridWay's bans, usage and share history, for a driver to persist (it changes when
    /// [`Scheduler::gridway_history_version`] does).
    pub fn gridway_history(&self) -> GridwayHistory {
        let g = &self.gridway;
        GridwayHistory {
            sites: self
                .sites
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let h = SiteHistory {
                        ban: *g.bans.get(SiteId(i as u32)),
                        usage: g.usage[i].clone(),
                    };
                    (s.name.clone(), h)
                })
                .collect(),
            shares: g.shares.clone(),
        }
    }

    /// A number that changes whenever [`Scheduler::gridway_history`] does.
    pub fn gridway_history_version(&self) -> u64 {
        self.gridway.history_version
    }

    /// Restores what [`Scheduler::gridway_history`] gave (at a driver's restart, before any
    /// scan). Sites no longer configured are ignored; new sites start with no history.
    pub fn restore_gridway_history(&mut self, history: GridwayHistory) {
        for (i, site) in self.sites.iter().enumerate() {
            if let Some(h) = history.sites.get(&site.name) {
                self.gridway.bans.set(SiteId(i as u32), h.ban);
                self.gridway.usage[i] = h.usage.clone();
            }
        }
        self.gridway.shares = history.shares;
        self.gridway.matcher.catalogue_changed();
    }

    /// Counters of REQUIREMENTS / RANK evaluations in scans.
    pub fn match_stats(&self) -> MatchStats {
        self.gridway.matcher.stats()
    }
}
