//! Co-allocation by advance reservations: Algorithms 1 and 2 of 001 §3.2.
//!
//! Input (001 §3.2.1): jobs `J_1 … J_n` (here: the components of one job), for each the
//! resources `R_i` that can run it, ranked best first; the acceptable start window `[T_e, T_l]`
//! and the maximum start deviation `ε`. Output: one reservation per job, all starting inside one
//! window `[t_e, t_l]` of width `ε` with `t_e ≤ T_l`, or failure.
//!
//! Algorithm 1, as in the seed: the window starts at `[T_e, T_e + ε]`. Each iteration, every job
//! without a reservation inside the window either moves the reservation it has (Step 7: modify,
//! same resource, which loses it when refused) or creates one at its resources in rank order
//! (Step 9), noting the `T_next` of every refusal. Jobs left without one form `A`; if every job
//! of `A` may be augmented (some other job holds a resource it can use, Step 13), each gets a
//! breadth-first augmenting path (Step 15) updated by Algorithm 2 (Step 16): a new reservation for
//! the path's last job at its end resource, then, back along the path, each reservation modified
//! (same start, new size and duration) for the job before. If a job still lacks a reservation, the
//! window moves to end at the earliest `T_next` seen (Step 20); past `T_l` the algorithm fails
//! (Step 22), and it also fails when no refusal named a `T_next` (no window will ever do).
//!
//! Three readings of Steps 15–16 ([`Augmentation`]):
//! - [`Augmentation::SinglePath`] is the seed's text: the BFS finds *one* path, "of alternating
//!   unmatched and matched edges, starting and ending in an unmatched edge" (001 §3.2.3), i.e.
//!   ending at the first resource (in BFS order) the path's last job can use other than its own —
//!   which may hold another job's reservation, since "some resources can [...] hold reservations
//!   for multiple jobs concurrently" (001 §3.2.1) — and Algorithm 2 tries it once. The site may
//!   refuse that end reservation (001 §5.2.2.2: "a background load job prevents the new
//!   reservation"), and the window then moves to the `T_next` of the refusal, possibly past a
//!   window in which another path would have worked.
//! - [`Augmentation::SinglePathFree`]: the same, but the path ends at the first resource no job
//!   of the request holds.
//! - [`Augmentation::Exhaustive`] (the default) lets the BFS ask the site for each path's end
//!   reservation as it reaches it and go on searching when refused (a refusal already seen for
//!   the same request at an unchanged site is not asked again). With components that each need
//!   more than half of any site (so a site holds at most one of them at a time) and one duration
//!   longer than `ε`, this makes the algorithm exact: it succeeds exactly when a window exists
//!   inside `[T_e, T_l + ε]`, and the window it finds ends no later than `ε` after the earliest
//!   such window starts (property-tested against brute force in
//!   `tests/broker_coalloc.rs`). The refusals it sees are the ones Step 18 asks for, so `T_next`
//!   never passes over a feasible window. (With per-resource earliest starts,
//!   [`ComponentRequest::not_before`], the algorithm stays sound but not exact: a job taking over
//!   a reservation may not be allowed to start that early.)
//!
//! Modifications are release + create (001 §3.3.2); the service decides whether that is atomic.
//! Components are taken largest first (001 §3.3.4: "in decreasing order of the size of the
//! requirements": processors, then duration). On failure every reservation still held is
//! released. The statistics are those of 001 Tables I and II.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::profile::Profile;
use super::reservations::{ReservationId, ReservationReply, ReservationRequest, ReservationTable};
use crate::model::{Millis, SiteId};

/// The sites' reservation services, as Algorithm 1 sees them: every call is one request to a
/// site and its reply.
pub trait ReservationService {
    /// Asks `site` for a reservation.
    fn create(&mut self, site: SiteId, req: &ReservationRequest) -> ReservationReply;
    /// Gives a reservation back.
    fn release(&mut self, site: SiteId, id: ReservationId);
    /// Moves or reshapes a reservation: release + create (001 §3.3.2).
    fn modify(&mut self, site: SiteId, id: ReservationId, req: &ReservationRequest) -> ReservationReply {
        self.release(site, id);
        self.create(site, req)
    }
}

/// How Steps 15–16 search for augmenting paths (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Augmentation {
    /// One BFS path per job, to the first unmatched edge; tried once (the seed's text).
    SinglePath,
    /// One BFS path per job, to the first resource no job of the request holds; tried once.
    SinglePathFree,
    /// The BFS tries path ends as it reaches them and searches on when refused.
    #[default]
    Exhaustive,
}

/// One job of the co-allocation (a component).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentRequest {
    pub processors: u32,
    pub duration_ms: Millis,
    /// The resources `R_i` that can run it, best ranked first.
    pub sites: Vec<SiteId>,
    /// Per resource (same order as `sites`), the earliest start there, e.g. when its input can
    /// have arrived (001 §3.1: the stage-in estimate coordinates "the start of the execution
    /// with the arrival of the executable and the input files"). Empty: no such bound. A
    /// resource whose bound is past the window is not asked; its bound counts as its `T_next`.
    #[serde(default)]
    pub not_before: Vec<Millis>,
}

impl ComponentRequest {
    pub fn new(processors: u32, duration_ms: Millis, sites: Vec<SiteId>) -> Self {
        ComponentRequest {
            processors,
            duration_ms,
            sites,
            not_before: Vec::new(),
        }
    }
}

/// The input of Algorithm 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoallocationRequest {
    pub components: Vec<ComponentRequest>,
    /// `T_e`.
    pub earliest_start: Millis,
    /// `T_l`.
    pub latest_start: Millis,
    /// `ε`.
    pub epsilon_ms: Millis,
    pub augmentation: Augmentation,
}

/// A reservation held for one component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub site: SiteId,
    pub id: ReservationId,
    pub start: Millis,
}

/// The counters of 001 Tables I and II (plus every request sent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoallocationStats {
    pub iterations: u32,
    /// Step 9 creations granted / refused.
    pub new_ars: u32,
    pub failed_new_ars: u32,
    /// Step 7 modifications granted / refused.
    pub modified_ars: u32,
    pub failed_modified_ars: u32,
    /// Algorithm 2 runs that matched their job / that a site refused.
    pub path_augmentations: u32,
    pub failed_path_augmentations: u32,
    /// Every create, modify and release sent (a modify counts once).
    pub requests: u32,
    /// Service invocations as 001 §5.2.2 counts them: a modify is two (release, create).
    pub invocations: u32,
}

/// What happened, step by step (for tests and the worked example).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    Window {
        t_e: Millis,
        t_l: Millis,
    },
    Created {
        component: usize,
        site: SiteId,
        start: Millis,
    },
    CreateRefused {
        component: usize,
        site: SiteId,
        t_next: Option<Millis>,
    },
    Moved {
        component: usize,
        site: SiteId,
        start: Millis,
    },
    MoveRefused {
        component: usize,
        site: SiteId,
    },
    /// Algorithm 2 matched `path[0]`; `path` lists (component, resource) as in 001: the
    /// resource of each pair is the one that component now holds.
    Augmented {
        path: Vec<(usize, SiteId)>,
    },
    AugmentRefused {
        path: Vec<(usize, SiteId)>,
        t_next: Option<Millis>,
    },
    Released {
        component: usize,
        site: SiteId,
    },
}

/// The result of Algorithm 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoallocationOutcome {
    /// One reservation per component (in request order), or `None` when it failed.
    pub reservations: Option<Vec<Held>>,
    /// The final window `[t_e, t_l]` of a success.
    pub window: Option<(Millis, Millis)>,
    pub stats: CoallocationStats,
    pub trace: Vec<Event>,
}

impl CoallocationOutcome {
    pub fn succeeded(&self) -> bool {
        self.reservations.is_some()
    }
}

/// Runs Algorithm 1 against `service`.
pub fn coallocate<S: ReservationService + ?Sized>(req: &CoallocationRequest, service: &mut S) -> CoallocationOutcome {
    let mut run = Run {
        req,
        service,
        held: vec![None; req.components.len()],
        stats: CoallocationStats::default(),
        trace: Vec::new(),
        window: (0, 0),
        refused: BTreeMap::new(),
        version: BTreeMap::new(),
    };
    let result = run.main();
    let Run {
        held, stats, mut trace, ..
    } = run;
    let window = result;
    match window {
        Some(w) => CoallocationOutcome {
            reservations: Some(held.into_iter().map(|h| h.expect("every component holds one")).collect()),
            window: Some(w),
            stats,
            trace,
        },
        None => {
            let mut stats = stats;
            for (component, h) in held.into_iter().enumerate() {
                if let Some(h) = h {
                    service.release(h.site, h.id);
                    stats.requests += 1;
                    stats.invocations += 1;
                    trace.push(Event::Released { component, site: h.site });
                }
            }
            CoallocationOutcome {
                reservations: None,
                window: None,
                stats,
                trace,
            }
        }
    }
}

/// A request as the exhaustive search remembers refusals: (site, processors, duration, earliest).
type RequestKey = (SiteId, u32, Millis, Millis);

struct Run<'a, S: ReservationService + ?Sized> {
    req: &'a CoallocationRequest,
    service: &'a mut S,
    held: Vec<Option<Held>>,
    stats: CoallocationStats,
    trace: Vec<Event>,
    window: (Millis, Millis),
    /// (site, processors, duration, earliest) → (site version, T_next) of a refusal in the
    /// current window (the exhaustive search does not ask the same again).
    refused: BTreeMap<RequestKey, (u64, Option<Millis>)>,
    /// Changes made at each site by this run.
    version: BTreeMap<SiteId, u64>,
}

impl<S: ReservationService + ?Sized> Run<'_, S> {
    fn in_window(&self, h: &Held) -> bool {
        (self.window.0..=self.window.1).contains(&h.start)
    }

    /// Component `i`'s request at `site` for the current window, or at exactly `start` if given
    /// (Algorithm 2 keeps a reservation's start, unless the component may not start there that
    /// early: then the rest of the window, 001 §3.2.3's "individual job start time offsets");
    /// `Err(bound)` when the site's earliest start for it is past the window.
    fn request(&self, i: usize, site: SiteId, start: Option<Millis>) -> Result<ReservationRequest, Millis> {
        let c = &self.req.components[i];
        let bound = c
            .sites
            .iter()
            .position(|&s| s == site)
            .and_then(|k| c.not_before.get(k).copied())
            .unwrap_or(0);
        if bound > self.window.1 {
            return Err(bound);
        }
        Ok(match start {
            Some(s) if s >= bound => ReservationRequest::at(c.processors, s, c.duration_ms),
            _ => ReservationRequest::window(c.processors, c.duration_ms, self.window.0.max(bound), self.window.1),
        })
    }

    fn touch(&mut self, site: SiteId) {
        *self.version.entry(site).or_insert(0) += 1;
    }

    /// Asks `site` to create a reservation for component `i` in the window. A bound past the
    /// window answers without asking; `reuse`: a refusal of the same request at the unchanged
    /// site in this window answers without asking again. `None` when nothing was asked.
    fn create(&mut self, i: usize, site: SiteId, reuse: bool) -> (ReservationReply, bool) {
        let req = match self.request(i, site, None) {
            Ok(req) => req,
            Err(bound) => return (ReservationReply::RejectedNext { t_next: bound }, false),
        };
        let key = (site, req.processors, req.duration_ms, req.earliest_start);
        let version = self.version.get(&site).copied().unwrap_or(0);
        if reuse {
            if let Some(&(seen, t)) = self.refused.get(&key) {
                if seen == version {
                    return (
                        t.map_or(ReservationReply::Rejected, |t_next| ReservationReply::RejectedNext { t_next }),
                        false,
                    );
                }
            }
        }
        self.stats.requests += 1;
        self.stats.invocations += 1;
        let reply = self.service.create(site, &req);
        if reply.is_granted() {
            self.touch(site);
        } else {
            self.refused.insert(key, (version, reply.t_next()));
        }
        (reply, true)
    }

    /// Release + create at the same site, for component `i` (in the window, or at `start`).
    fn modify(&mut self, i: usize, held: Held, start: Option<Millis>) -> ReservationReply {
        self.touch(held.site);
        match self.request(i, held.site, start) {
            Ok(req) => {
                self.stats.requests += 1;
                self.stats.invocations += 2;
                self.service.modify(held.site, held.id, &req)
            }
            Err(bound) => {
                self.stats.requests += 1;
                self.stats.invocations += 1;
                self.service.release(held.site, held.id);
                ReservationReply::RejectedNext { t_next: bound }
            }
        }
    }

    /// Algorithm 1; returns the window of a success.
    fn main(&mut self) -> Option<(Millis, Millis)> {
        let eps = self.req.epsilon_ms;
        let mut order: Vec<usize> = (0..self.req.components.len()).collect();
        order.sort_by_key(|&i| {
            let c = &self.req.components[i];
            (std::cmp::Reverse(c.processors), std::cmp::Reverse(c.duration_ms), i)
        });
        // Step 1.
        self.window = (self.req.earliest_start, self.req.earliest_start.saturating_add(eps));
        loop {
            // Steps 3–4.
            self.stats.iterations += 1;
            self.refused.clear();
            let (t_e, t_l) = self.window;
            self.trace.push(Event::Window { t_e, t_l });
            let mut a: Vec<usize> = Vec::new();
            let mut t_best: Option<Millis> = None;
            let note = |t: Option<Millis>, t_best: &mut Option<Millis>| {
                if let Some(t) = t.filter(|&t| t > t_l) {
                    *t_best = Some(t_best.map_or(t, |b| b.min(t)));
                }
            };
            // Step 5.
            for &i in &order {
                if self.held[i].is_some_and(|h| self.in_window(&h)) {
                    continue;
                }
                // Steps 6–7: move the reservation held before the window.
                if let Some(h) = self.held[i] {
                    match self.modify(i, h, None) {
                        ReservationReply::Granted { id, start } => {
                            self.stats.modified_ars += 1;
                            self.held[i] = Some(Held { site: h.site, id, start });
                            self.trace.push(Event::Moved {
                                component: i,
                                site: h.site,
                                start,
                            });
                            continue;
                        }
                        _ => {
                            self.stats.failed_modified_ars += 1;
                            self.held[i] = None;
                            self.trace.push(Event::MoveRefused {
                                component: i,
                                site: h.site,
                            });
                        }
                    }
                }
                // Step 9: create at the resources in rank order.
                for k in 0..self.req.components[i].sites.len() {
                    let site = self.req.components[i].sites[k];
                    let (reply, asked) = self.create(i, site, false);
                    match reply {
                        ReservationReply::Granted { id, start } => {
                            self.stats.new_ars += 1;
                            self.held[i] = Some(Held { site, id, start });
                            self.trace.push(Event::Created { component: i, site, start });
                            break;
                        }
                        reply => {
                            // Step 12.
                            note(reply.t_next(), &mut t_best);
                            if asked {
                                self.stats.failed_new_ars += 1;
                                self.trace.push(Event::CreateRefused {
                                    component: i,
                                    site,
                                    t_next: reply.t_next(),
                                });
                            }
                        }
                    }
                }
                // Steps 10–11.
                if self.held[i].is_none() {
                    a.push(i);
                }
            }
            // Steps 13–18.
            if !a.is_empty() && a.iter().all(|&j| self.augmentable(j)) {
                for &j in &a {
                    if let Err(t) = self.augment(j) {
                        note(t, &mut t_best);
                    }
                }
            }
            // Step 23.
            if self.held.iter().all(|h| h.is_some_and(|h| self.in_window(&h))) {
                return Some(self.window);
            }
            // Steps 19–22.
            let t = t_best?;
            self.window = (t.saturating_sub(eps), t);
            if self.window.0 > self.req.latest_start {
                return None;
            }
        }
    }

    /// Step 13: some other job holds a reservation in the window at a resource `j` can use.
    fn augmentable(&self, j: usize) -> bool {
        self.req.components[j].sites.iter().any(|&r| self.holders(r, j).next().is_some())
    }

    /// Jobs other than `except` holding a reservation inside the window at `site`.
    fn holders(&self, site: SiteId, except: usize) -> impl Iterator<Item = usize> + '_ {
        self.held
            .iter()
            .enumerate()
            .filter(move |&(k, h)| k != except && h.is_some_and(|h| h.site == site && self.in_window(&h)))
            .map(|(k, _)| k)
    }

    /// Steps 15–16 for job `j`: Ok when it got a reservation; Err with a `T_next` otherwise.
    fn augment(&mut self, j: usize) -> Result<(), Option<Millis>> {
        let n = self.req.components.len();
        // parent[k] = (job before k on the path, the resource k holds that it can use).
        let mut parent: Vec<Option<(usize, SiteId)>> = vec![None; n];
        let mut visited = vec![false; n];
        visited[j] = true;
        let mut queue = VecDeque::from([j]);
        let mut t_best: Option<Millis> = None;
        while let Some(k) = queue.pop_front() {
            let own = self.held[k].map(|h| h.site);
            if k != j {
                for idx in 0..self.req.components[k].sites.len() {
                    let r = self.req.components[k].sites[idx];
                    if Some(r) == own {
                        continue;
                    }
                    let free = self.held.iter().all(|h| !h.is_some_and(|h| h.site == r && self.in_window(&h)));
                    match self.req.augmentation {
                        Augmentation::SinglePathFree if !free => continue,
                        // The first path found is the one Algorithm 2 tries.
                        Augmentation::SinglePath | Augmentation::SinglePathFree => {
                            return self.update_path(&parent, k, r).map_err(|t| t.or(t_best));
                        }
                        Augmentation::Exhaustive => {}
                    }
                    match self.update_path(&parent, k, r) {
                        Ok(()) => return Ok(()),
                        Err(t) => {
                            t_best = min_opt(t_best, t);
                            if self.held[k].is_none_or(|h| Some(h.site) != own) {
                                // The path was broken part-way (a modification refused): stop.
                                return Err(t_best);
                            }
                        }
                    }
                }
            }
            for idx in 0..self.req.components[k].sites.len() {
                let r = self.req.components[k].sites[idx];
                if Some(r) == own && k != j {
                    continue;
                }
                let next: Vec<usize> = self.holders(r, k).filter(|&m| !visited[m]).collect();
                for m in next {
                    visited[m] = true;
                    parent[m] = Some((k, r));
                    queue.push_back(m);
                }
            }
        }
        Err(t_best)
    }

    /// Algorithm 2 for the path ending with job `last` at resource `end`.
    fn update_path(&mut self, parent: &[Option<(usize, SiteId)>], last: usize, end: SiteId) -> Result<(), Option<Millis>> {
        // The path as (job, resource it will hold), from the start job to `last`.
        let mut path = vec![(last, end)];
        let mut k = last;
        while let Some((prev, r)) = parent[k] {
            path.push((prev, r));
            k = prev;
        }
        path.reverse();
        // Step 1: a new reservation for the last job at the end resource (the exhaustive search
        // does not ask again what the unchanged site refused in this window).
        let reuse = self.req.augmentation == Augmentation::Exhaustive;
        let (reply, asked) = self.create(last, end, reuse);
        let ReservationReply::Granted { id, start } = reply else {
            if asked {
                self.stats.failed_path_augmentations += 1;
                self.trace.push(Event::AugmentRefused {
                    path,
                    t_next: reply.t_next(),
                });
            }
            return Err(reply.t_next());
        };
        let mut freed = self.held[last].replace(Held { site: end, id, start });
        // Steps 4–7: back along the path, each reservation reshaped for the job before.
        for idx in (0..path.len() - 1).rev() {
            let (job, site) = path[idx];
            let old = freed.expect("every inner job of a path holds a reservation");
            debug_assert_eq!(old.site, site);
            match self.modify(job, old, Some(old.start)) {
                ReservationReply::Granted { id, start } => {
                    freed = self.held[job].replace(Held { site, id, start });
                }
                reply => {
                    self.stats.failed_path_augmentations += 1;
                    self.trace.push(Event::AugmentRefused {
                        path,
                        t_next: reply.t_next(),
                    });
                    return Err(reply.t_next());
                }
            }
        }
        self.stats.path_augmentations += 1;
        self.trace.push(Event::Augmented { path });
        Ok(())
    }
}

fn min_opt(a: Option<Millis>, b: Option<Millis>) -> Option<Millis> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Reservation services over [`ReservationTable`]s, one per site, each with the site's other
/// commitments: the scheduler's model of the sites, the simulated sites of the broker
/// experiment, and tests.
#[derive(Debug, Clone)]
pub struct TableService {
    pub now: Millis,
    pub tables: Vec<ReservationTable>,
    /// Other commitments per site (`None`: nothing else).
    pub others: Vec<Option<Profile>>,
}

impl TableService {
    /// Empty tables for sites of the given capacities.
    pub fn new(now: Millis, capacities: &[u32]) -> Self {
        TableService {
            now,
            tables: capacities.iter().map(|&c| ReservationTable::new(c)).collect(),
            others: vec![None; capacities.len()],
        }
    }
}

impl ReservationService for TableService {
    fn create(&mut self, site: SiteId, req: &ReservationRequest) -> ReservationReply {
        let i = site.index();
        self.tables[i].request(self.now, req, self.others[i].as_ref())
    }

    fn release(&mut self, site: SiteId, id: ReservationId) {
        self.tables[site.index()].release(id);
    }
}
