//! Placement policies: WF, CF, CM, FCM (and the broker's ranking reduced to idle processors)
//! behind one trait (003 §4.3).
//!
//! Every policy is *atomic* for co-allocated jobs: it returns a site for every component or
//! nothing. Components are considered in decreasing size order, and several components of one
//! job may share a site. A policy sees only [`Capacity`] — processors idle now at each usable
//! site minus those already placed-but-unclaimed by the scheduler itself (003 §5.1.4) — and the
//! file information in [`PlacementContext`]; it decides and returns values, it changes nothing
//! outside itself (CF's history table H is the policy's own state).
//!
//! Transfer-time estimate of a component: the sum over its input files of
//! `latency + bytes / forecast bandwidth(source → site)`, zero for a file already at the site
//! (files of one component are assumed to be fetched one after the other). The job's FTT is the
//! maximum over its components.

use std::collections::BTreeSet;

use crate::model::{FileMode, FlexibleRequest, Millis, NetworkForecast, PolicyKind, ReplicaCatalogue, Site, SiteId};

/// Processors a policy may still hand out per site during one placement attempt.
#[derive(Debug, Clone)]
pub struct Capacity {
    available: Vec<u32>,
    /// The largest entry of `available`, kept up to date by `take`.
    max: u32,
    /// Whether some site is excluded (blacklisted) from this view.
    excluded: bool,
    /// Sites with processors, by decreasing availability when first asked (built on demand by
    /// [`Capacity::sites_with_room`]). Availability only falls afterwards, so the sites that
    /// have at least n now are among the leading entries that had at least n then.
    by_room: std::cell::OnceCell<std::sync::Arc<[(u32, SiteId)]>>,
}

impl PartialEq for Capacity {
    fn eq(&self, other: &Self) -> bool {
        (&self.available, self.max, self.excluded) == (&other.available, other.max, other.excluded)
    }
}

impl Eq for Capacity {}

impl Capacity {
    /// `available[i]` = idle processors at site i minus placed-unclaimed ones; 0 for an
    /// unusable (blacklisted) site.
    pub fn new(available: Vec<u32>) -> Self {
        let max = available.iter().copied().max().unwrap_or(0);
        Capacity {
            available,
            max,
            excluded: false,
            by_room: std::cell::OnceCell::new(),
        }
    }
    /// The same, remembering that some sites were left out as unusable.
    pub fn with_excluded_sites(available: Vec<u32>, excluded: bool) -> Self {
        Capacity {
            excluded,
            ..Self::new(available)
        }
    }
    /// Whether some site was left out of this view as unusable.
    pub fn has_excluded_sites(&self) -> bool {
        self.excluded
    }
    pub fn available(&self, site: SiteId) -> u32 {
        self.available[site.index()]
    }
    pub fn fits(&self, site: SiteId, processors: u32) -> bool {
        self.available(site) >= processors
    }
    pub fn take(&mut self, site: SiteId, processors: u32) {
        let slot = &mut self.available[site.index()];
        debug_assert!(*slot >= processors, "over-placing {site}");
        let was_max = *slot == self.max;
        *slot -= processors;
        if was_max && processors > 0 {
            self.max = self.available.iter().copied().max().unwrap_or(0);
        }
    }
    /// The largest number of processors available at one site.
    pub fn max_available(&self) -> u32 {
        self.max
    }
    /// The sites with at least `n` available processors (`n` ≥ 1), most available first (as
    /// of the first call; ties by id), without visiting the others: the index is built once per
    /// view.
    pub fn sites_with_room(&self, n: u32) -> impl Iterator<Item = SiteId> + '_ {
        let index = self.by_room.get_or_init(|| {
            let mut v: Vec<(u32, SiteId)> = self
                .available
                .iter()
                .enumerate()
                .filter(|(_, &a)| a > 0)
                .map(|(i, &a)| (a, SiteId(i as u32)))
                .collect();
            v.sort_by_key(|&(a, s)| (std::cmp::Reverse(a), s));
            v.into()
        });
        let n = n.max(1);
        index
            .iter()
            .take_while(move |&&(a, _)| a >= n)
            .map(|&(_, s)| s)
            .filter(move |&s| self.available(s) >= n)
    }
    /// Processors available over all sites.
    pub fn total_available(&self) -> u64 {
        self.available.iter().map(|&a| a as u64).sum()
    }
    pub fn sites(&self) -> impl Iterator<Item = SiteId> + '_ {
        (0..self.available.len()).map(|i| SiteId(i as u32))
    }
    pub fn len(&self) -> usize {
        self.available.len()
    }
    pub fn is_empty(&self) -> bool {
        self.available.is_empty()
    }
}

/// One input file a component needs, with the bytes it must receive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileNeed {
    pub name: String,
    pub bytes: u64,
}

/// Where a component reads one input file from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSource {
    pub file: String,
    pub from: SiteId,
    pub bytes: u64,
    pub estimated_ms: Millis,
}

/// The decision for one component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentPlacement {
    /// Index of the component in the job (for flexible jobs: in the split the policy chose).
    pub component: usize,
    pub site: SiteId,
    pub processors: u32,
    pub sources: Vec<FileSource>,
    /// Estimated transfer time of this component's input.
    pub ftt_ms: Millis,
}

/// What the policy is asked to place.
#[derive(Debug, Clone)]
pub struct PlacementRequest<'a> {
    /// (component index, processors) of the components to place; for a flexible job, empty.
    pub components: &'a [(usize, u32)],
    pub flexible: Option<&'a FlexibleRequest>,
    pub files: &'a [String],
    pub file_mode: FileMode,
    /// Number of components the job has in all (for chunked files).
    pub job_components: usize,
}

/// Read-only information the policies use.
#[derive(Debug, Clone, Copy)]
pub struct PlacementContext<'a> {
    pub sites: &'a [Site],
    pub catalogue: &'a ReplicaCatalogue,
    pub forecast: &'a NetworkForecast,
    /// Files already copied to a site for this job (their transfer time is zero there).
    pub staged: &'a BTreeSet<(String, SiteId)>,
    /// The job's preference per site, higher first (its RANK, or its GridWay resource priority
    /// for the `gridway` policy); `None`: no preference. KOALA's policies use it only to break
    /// their ties (see [`crate::gridway`]).
    pub preference: Option<&'a [i64]>,
}

impl PlacementContext<'_> {
    /// The job's preference for `site` (0 without one).
    pub fn preference(&self, site: SiteId) -> i64 {
        self.preference.map_or(0, |p| p[site.index()])
    }

    pub(crate) fn needs(&self, req: &PlacementRequest<'_>, parts: usize) -> Vec<FileNeed> {
        req.files
            .iter()
            .filter_map(|name| {
                let size = self.catalogue.get(name)?.size_bytes;
                let bytes = match req.file_mode {
                    FileMode::Whole => size,
                    FileMode::Chunks => size.div_ceil(parts.max(1) as u64),
                };
                Some(FileNeed { name: name.clone(), bytes })
            })
            .collect()
    }

    fn holds(&self, site: SiteId, file: &str) -> bool {
        self.staged.contains(&(file.to_string(), site)) || self.catalogue.get(file).is_some_and(|e| e.replicas.contains(&site))
    }

    /// Sites holding at least one of the files (the job's *file sites*).
    pub fn file_sites(&self, files: &[String]) -> BTreeSet<SiteId> {
        files
            .iter()
            .filter_map(|f| self.catalogue.get(f))
            .flat_map(|e| e.replicas.iter().copied())
            .collect()
    }

    /// The fastest replica of `need` for `dest`: (source, estimated ms); ties → lowest site.
    pub fn best_source(&self, need: &FileNeed, dest: SiteId) -> Option<(SiteId, Millis)> {
        if self.holds(dest, &need.name) {
            return Some((dest, 0));
        }
        let entry = self.catalogue.get(&need.name)?;
        entry
            .replicas
            .iter()
            .map(|&src| (src, self.forecast.transfer_ms(src, dest, need.bytes)))
            .min_by_key(|&(src, ms)| (ms, src))
    }

    /// Sources and FTT for a component at `dest`, preferring `preferred` for files it holds.
    fn sources(&self, needs: &[FileNeed], dest: SiteId, preferred: Option<SiteId>) -> (Vec<FileSource>, Millis) {
        let mut total = 0;
        let sources = needs
            .iter()
            .map(|need| {
                let (from, ms) = match preferred {
                    _ if self.holds(dest, &need.name) => (dest, 0),
                    Some(f) if self.holds(f, &need.name) => (f, self.forecast.transfer_ms(f, dest, need.bytes)),
                    _ => self.best_source(need, dest).unwrap_or((dest, 0)),
                };
                total += ms;
                FileSource {
                    file: need.name.clone(),
                    from,
                    bytes: need.bytes,
                    estimated_ms: ms,
                }
            })
            .collect();
        (sources, total)
    }

    pub(crate) fn component(
        &self,
        index: usize,
        processors: u32,
        site: SiteId,
        needs: &[FileNeed],
        preferred: Option<SiteId>,
    ) -> ComponentPlacement {
        let (sources, ftt_ms) = self.sources(needs, site, preferred);
        ComponentPlacement {
            component: index,
            site,
            processors,
            sources,
            ftt_ms,
        }
    }
}

/// A placement policy. `place` either returns a decision for every requested component (and
/// has taken their processors out of `capacity`) or returns `None` and leaves the job unplaced.
pub trait PlacementPolicy {
    fn kind(&self) -> PolicyKind;
    fn place(&mut self, req: &PlacementRequest<'_>, capacity: &mut Capacity, ctx: &PlacementContext<'_>)
        -> Option<Vec<ComponentPlacement>>;
}

/// Components in decreasing size order, ties by index (003 Alg. 1 line 1).
pub(crate) fn by_decreasing_size(components: &[(usize, u32)]) -> Vec<(usize, u32)> {
    let mut sorted = components.to_vec();
    sorted.sort_by_key(|&(i, p)| (std::cmp::Reverse(p), i));
    sorted
}

/// The all-or-nothing loop of the policies that place one component at a time: components,
/// largest first, each placed by `choose` on the capacity its predecessors left (given the
/// component's index, processors and the job's file needs); `None` from `choose` fails the job
/// and leaves `capacity` as it was.
pub(crate) fn place_one_by_one(
    req: &PlacementRequest<'_>,
    capacity: &mut Capacity,
    ctx: &PlacementContext<'_>,
    mut choose: impl FnMut(&Capacity, usize, u32, &[FileNeed]) -> Option<ComponentPlacement>,
) -> Option<Vec<ComponentPlacement>> {
    let needs = ctx.needs(req, req.job_components);
    let mut trial = capacity.clone();
    let mut out = Vec::with_capacity(req.components.len());
    for (index, procs) in by_decreasing_size(req.components) {
        let placed = choose(&trial, index, procs, &needs)?;
        trial.take(placed.site, procs);
        out.push(placed);
    }
    *capacity = trial;
    Some(out)
}

/// The usable site with the most available processors that fits `processors`; ties → the
/// job's preference, then the lowest id.
fn worst_fit_site(capacity: &Capacity, processors: u32, ctx: &PlacementContext<'_>) -> Option<SiteId> {
    capacity
        .sites()
        .filter(|&s| capacity.fits(s, processors) && capacity.available(s) > 0)
        .max_by_key(|&s| (capacity.available(s), ctx.preference(s), std::cmp::Reverse(s)))
}

/// Worst-Fit (003 §4.3.2): each component, largest first, to the site with the largest
/// remaining number of available processors; for each component the replica with the least
/// estimated transfer time.
#[derive(Debug, Default, Clone)]
pub struct WorstFit;

impl PlacementPolicy for WorstFit {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Wf
    }

    fn place(
        &mut self,
        req: &PlacementRequest<'_>,
        capacity: &mut Capacity,
        ctx: &PlacementContext<'_>,
    ) -> Option<Vec<ComponentPlacement>> {
        place_one_by_one(req, capacity, ctx, |trial, index, procs, needs| {
            let site = worst_fit_site(trial, procs, ctx)?;
            Some(ctx.component(index, procs, site, needs, None))
        })
    }
}

/// Close-to-Files (003 Alg. 1, 000 Fig. 1) with its history table H of (execution site, file
/// site) pairs.
///
/// For each component, largest first: if a file site of the job has enough available processors,
/// the alphabetically first such site (by name) is chosen and the file is local (with a RANK: the
/// highest-ranked such site, then alphabetically). Otherwise, among the pairs (E, F) in H with E
/// having enough processors and F a file site of the job, the pair with the least estimated
/// transfer time T(E, F) wins (ties: highest-ranked E, lowest E, then F), and (E, F') is added to H
/// for every file site F' of the job. No such pair: the job cannot be placed now. A job without
/// input files has no file sites; every site is equally close, so its components go where Worst-Fit
/// would put them.
#[derive(Debug, Default, Clone)]
pub struct CloseToFiles {
    history: BTreeSet<(SiteId, SiteId)>,
}

impl CloseToFiles {
    pub fn with_history(history: impl IntoIterator<Item = (SiteId, SiteId)>) -> Self {
        CloseToFiles {
            history: history.into_iter().collect(),
        }
    }

    /// Every (E, F) pair over `sites` sites, as the experiments seeded H.
    pub fn all_pairs(sites: usize) -> Self {
        let ids: Vec<SiteId> = (0..sites as u32).map(SiteId).collect();
        Self::with_history(ids.iter().flat_map(|&e| ids.iter().map(move |&f| (e, f))))
    }

    pub fn history(&self) -> &BTreeSet<(SiteId, SiteId)> {
        &self.history
    }
}

impl PlacementPolicy for CloseToFiles {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Cf
    }

    fn place(
        &mut self,
        req: &PlacementRequest<'_>,
        capacity: &mut Capacity,
        ctx: &PlacementContext<'_>,
    ) -> Option<Vec<ComponentPlacement>> {
        let needs = ctx.needs(req, req.job_components);
        let file_sites = ctx.file_sites(req.files);
        let mut trial = capacity.clone();
        let mut out = Vec::with_capacity(req.components.len());
        for (index, procs) in by_decreasing_size(req.components) {
            if file_sites.is_empty() {
                let site = worst_fit_site(&trial, procs, ctx)?;
                trial.take(site, procs);
                out.push(ctx.component(index, procs, site, &needs, None));
                continue;
            }
            // Line 3–5: a file site with enough processors, alphabetically first (after the
            // job's preference, when it has one).
            let local = file_sites.iter().copied().filter(|&s| trial.fits(s, procs)).min_by(|a, b| {
                ctx.preference(*b)
                    .cmp(&ctx.preference(*a))
                    .then(ctx.sites[a.index()].name.cmp(&ctx.sites[b.index()].name))
                    .then(a.cmp(b))
            });
            if let Some(site) = local {
                trial.take(site, procs);
                out.push(ctx.component(index, procs, site, &needs, Some(site)));
                continue;
            }
            // Line 7–13: the pair in H with the least estimated transfer time.
            let best = self
                .history
                .iter()
                .filter(|(e, f)| file_sites.contains(f) && trial.fits(*e, procs) && trial.available(*e) > 0)
                .map(|&(e, f)| {
                    let c = ctx.component(index, procs, e, &needs, Some(f));
                    (c.ftt_ms, e, f, c)
                })
                .min_by_key(|(ms, e, f, _)| (*ms, std::cmp::Reverse(ctx.preference(*e)), *e, *f))?;
            let (_, e, _, placement) = best;
            for &f2 in &file_sites {
                self.history.insert((e, f2));
            }
            trial.take(e, procs);
            out.push(placement);
        }
        *capacity = trial;
        Some(out)
    }
}

/// Cluster Minimization (after Sonmez et al. 2006; only named in 003): place a non-fixed
/// job's components on as few sites as possible.
///
/// Definition used here: order usable sites by available processors, largest first (ties: highest
/// RANK, then lowest id). Take components largest first; put each on the first site *already used
/// by this job* (in that order) where it still fits; only when none fits, open the first unused
/// site where it fits (first-fit decreasing into bins ordered by capacity). Files come from the
/// fastest replica.
#[derive(Debug, Default, Clone)]
pub struct ClusterMinimization;

impl PlacementPolicy for ClusterMinimization {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Cm
    }

    fn place(
        &mut self,
        req: &PlacementRequest<'_>,
        capacity: &mut Capacity,
        ctx: &PlacementContext<'_>,
    ) -> Option<Vec<ComponentPlacement>> {
        let needs = ctx.needs(req, req.job_components);
        let mut trial = capacity.clone();
        let mut order: Vec<SiteId> = trial.sites().filter(|&s| trial.available(s) > 0).collect();
        order.sort_by_key(|&s| (std::cmp::Reverse(trial.available(s)), std::cmp::Reverse(ctx.preference(s)), s));
        let mut used: Vec<SiteId> = Vec::new();
        let mut out = Vec::with_capacity(req.components.len());
        for (index, procs) in by_decreasing_size(req.components) {
            let site = order
                .iter()
                .copied()
                .filter(|s| used.contains(s))
                .find(|&s| trial.fits(s, procs))
                .or_else(|| order.iter().copied().filter(|s| !used.contains(s)).find(|&s| trial.fits(s, procs)))?;
            if !used.contains(&site) {
                used.push(site);
            }
            trial.take(site, procs);
            out.push(ctx.component(index, procs, site, &needs, None));
        }
        *capacity = trial;
        Some(out)
    }
}

/// Flexible Cluster Minimization (after Sonmez et al.; only named in 003): split a flexible
/// job's total over as few sites as possible.
///
/// Definition used here: order usable sites by available processors, largest first (ties: highest
/// RANK, then lowest id); take `min(available, remaining)` from each in turn until the total is
/// covered, but never so much that the rest would be a piece smaller than `min_component` (then
/// take `remaining − min_component`). A piece smaller than `min_component` is not taken (the site
/// is skipped) unless it is the whole job; more than `max_components` pieces fails. The pieces
/// become the job's components. A rigid (non-flexible) job given to FCM is placed as by CM.
#[derive(Debug, Default, Clone)]
pub struct FlexibleClusterMinimization;

impl PlacementPolicy for FlexibleClusterMinimization {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Fcm
    }

    fn place(
        &mut self,
        req: &PlacementRequest<'_>,
        capacity: &mut Capacity,
        ctx: &PlacementContext<'_>,
    ) -> Option<Vec<ComponentPlacement>> {
        let Some(flex) = req.flexible else {
            return ClusterMinimization.place(req, capacity, ctx);
        };
        let mut trial = capacity.clone();
        let mut order: Vec<SiteId> = trial.sites().filter(|&s| trial.available(s) > 0).collect();
        order.sort_by_key(|&s| (std::cmp::Reverse(trial.available(s)), std::cmp::Reverse(ctx.preference(s)), s));
        let mut remaining = flex.total;
        let mut pieces: Vec<(SiteId, u32)> = Vec::new();
        for site in order {
            if remaining == 0 {
                break;
            }
            let mut take = trial.available(site).min(remaining);
            if take < remaining && remaining - take < flex.min_component {
                // Taking all would leave a last piece below min_component: leave exactly that.
                take = remaining - flex.min_component.min(remaining);
            }
            if take < flex.min_component.max(1) && take < remaining {
                continue;
            }
            pieces.push((site, take));
            remaining -= take;
        }
        if remaining > 0 || pieces.len() as u32 > flex.max_components.max(1) {
            return None;
        }
        let parts = pieces.len();
        let chunk_req = PlacementRequest {
            job_components: parts,
            ..req.clone()
        };
        let needs = ctx.needs(&chunk_req, parts);
        let out = pieces
            .iter()
            .enumerate()
            .map(|(i, &(site, procs))| {
                trial.take(site, procs);
                ctx.component(i, procs, site, &needs, None)
            })
            .collect();
        *capacity = trial;
        Some(out)
    }
}

/// The broker's ranking reduced to what a [`PlacementRequest`] carries, for the paths that
/// place one component at a time against idle processors (bags of tasks, ICP re-placement):
/// each component, largest first, to the site where it fits now with the least estimated
/// transfer time, then the fastest (highest speed), then the lowest id. Whole jobs with
/// `policy = "ttd"` / `"tts"` are placed by the broker with full predictions (queue waits,
/// benchmarks, stage-out: `scheduler/broker.rs`).
#[derive(Debug, Default, Clone)]
pub struct TimeRank {
    pub kind: Option<PolicyKind>,
}

impl PlacementPolicy for TimeRank {
    fn kind(&self) -> PolicyKind {
        self.kind.unwrap_or(PolicyKind::Ttd)
    }

    fn place(
        &mut self,
        req: &PlacementRequest<'_>,
        capacity: &mut Capacity,
        ctx: &PlacementContext<'_>,
    ) -> Option<Vec<ComponentPlacement>> {
        place_one_by_one(req, capacity, ctx, |trial, index, procs, needs| {
            trial
                .sites()
                .filter(|&s| trial.fits(s, procs) && trial.available(s) > 0)
                .map(|s| ctx.component(index, procs, s, needs, None))
                .min_by(|a, b| {
                    let speed = |c: &ComponentPlacement| ctx.sites[c.site.index()].speed;
                    a.ftt_ms
                        .cmp(&b.ftt_ms)
                        .then(speed(b).total_cmp(&speed(a)))
                        .then(a.site.cmp(&b.site))
                })
        })
    }
}

/// The policies, owned by the scheduler (CF keeps its history table across jobs).
#[derive(Debug, Clone)]
pub struct Policies {
    pub wf: WorstFit,
    pub cf: CloseToFiles,
    pub cm: ClusterMinimization,
    pub fcm: FlexibleClusterMinimization,
    pub gridway: crate::gridway::GridwayPolicy,
    pub rank: TimeRank,
}

impl Policies {
    pub fn new(cf: CloseToFiles) -> Self {
        Policies {
            wf: WorstFit,
            cf,
            cm: ClusterMinimization,
            fcm: FlexibleClusterMinimization,
            gridway: crate::gridway::GridwayPolicy,
            rank: TimeRank::default(),
        }
    }

    pub fn get_mut(&mut self, kind: PolicyKind) -> &mut dyn PlacementPolicy {
        match kind {
            PolicyKind::Wf => &mut self.wf,
            PolicyKind::Cf => &mut self.cf,
            PolicyKind::Cm => &mut self.cm,
            PolicyKind::Fcm => &mut self.fcm,
            PolicyKind::Gridway => &mut self.gridway,
            PolicyKind::Ttd | PolicyKind::Tts => {
                self.rank.kind = Some(kind);
                &mut self.rank
            }
        }
    }
}
