//! Evaluating jobs' REQUIREMENTS and RANK against sites inside the placement scan, cheaply.
//!
//! The core keeps one [`SiteSnapshot`] per site with its published attributes (built once: sites
//! do not change); the load-dependent variables (QUEUE_FREENODECOUNT, CPU_FREE) are taken from
//! the processors the scan still has at the site when an expression is evaluated. Values are
//! cached per (expression text, site):
//! - an expression that does not read the load (`!depends_on_load()`) is evaluated once per site
//!   until the replica catalogue changes;
//! - one that does is evaluated again only when the site's free count differs from the one of
//!   the cached value;
//! - the data functions' answers (the site's replica of each file the expression names) are
//!   bound once per (expression, site) and catalogue version.
//!
//! Jobs with the same expression text (arrays, templates) share one cache. The cache is bounded:
//! past [`MAX_EXPRESSIONS`] distinct texts it is emptied and refilled on demand.

use std::collections::HashMap;

use crate::expr::{Compiled, HostVars, IntVar, SiteSnapshot, StrVar};
use crate::model::{ReplicaCatalogue, Site, SiteId};

/// Distinct expression texts cached before the cache is emptied.
pub const MAX_EXPRESSIONS: usize = 4096;

/// Marks an entry with no cached value.
const NO_VALUE: u32 = u32::MAX;

#[derive(Debug, Clone, Default)]
struct SiteEntry {
    /// Catalogue version the file answers were bound at (0: never).
    version: u64,
    files: Box<[Option<u64>]>,
    /// Whether the site offers each software tag the expression names.
    software: Box<[bool]>,
    /// Free count the value was computed for (or 0 for load-independent values); NO_VALUE: none.
    free: u32,
    value: i64,
}

/// One site as an expression sees it: its snapshot, its current free count, and the answers of
/// the data functions for the expression being evaluated.
struct Host<'a> {
    base: &'a SiteSnapshot,
    processors: u32,
    free: u32,
    files: &'a [Option<u64>],
    software: &'a [bool],
}

impl HostVars for Host<'_> {
    #[inline]
    fn int(&self, var: IntVar) -> i64 {
        match var {
            IntVar::QueueFreeNodeCount => self.free as i64,
            IntVar::CpuFree if self.processors > 0 => self.free as i64 * 100 / self.processors as i64,
            _ => self.base.int(var),
        }
    }
    #[inline]
    fn str(&self, var: StrVar) -> &str {
        self.base.str(var)
    }
    #[inline]
    fn close_file(&self, file: usize) -> Option<u64> {
        self.files.get(file).copied().flatten()
    }
    #[inline]
    fn has_software(&self, tag: usize) -> bool {
        self.software.get(tag).copied().unwrap_or(false)
    }
}

/// The data functions' answers at `site`: the size of its replica of each file `expr` names.
fn bind_files(expr: &Compiled, catalogue: &ReplicaCatalogue, site: SiteId) -> Box<[Option<u64>]> {
    expr.files()
        .iter()
        .map(|f| catalogue.get(f).filter(|x| x.replicas.contains(&site)).map(|x| x.size_bytes))
        .collect()
}

/// Whether a site offering `offers` has each software tag `expr` names.
fn bind_software(expr: &Compiled, offers: &[String]) -> Box<[bool]> {
    expr.software()
        .iter()
        .map(|t| offers.iter().any(|o| o.eq_ignore_ascii_case(t)))
        .collect()
}

/// Counters of the matcher (for benchmarks and metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MatchStats {
    /// Expression programs run.
    pub evaluations: u64,
    /// Values served from the cache.
    pub cached: u64,
}

/// Site snapshots and the per-(expression, site) value caches.
#[derive(Debug, Clone)]
pub struct Matcher {
    base: Vec<SiteSnapshot>,
    processors: Vec<u32>,
    /// The software tags each site offers.
    offers: Vec<Vec<String>>,
    /// Catalogue version; bumped whenever the catalogue may have changed.
    version: u64,
    /// One slot of per-site values per distinct expression text.
    slots: Vec<Slot>,
    by_text: HashMap<String, usize>,
    /// Compiled program address → slot: jobs share one compiled program per text, so the
    /// text is hashed only the first time a program is seen (the slot's text is compared
    /// on every use, so a reused address cannot alias another expression).
    by_program: HashMap<usize, usize>,
    stats: MatchStats,
}

#[derive(Debug, Clone)]
struct Slot {
    source: String,
    sites: Vec<SiteEntry>,
}

impl Matcher {
    pub fn new(sites: &[Site]) -> Self {
        Matcher {
            base: sites.iter().map(|s| SiteSnapshot::for_site(s, s.processors)).collect(),
            processors: sites.iter().map(|s| s.processors).collect(),
            offers: sites.iter().map(|s| s.attributes.tags()).collect(),
            version: 1,
            slots: Vec::new(),
            by_text: HashMap::new(),
            by_program: HashMap::new(),
            stats: MatchStats::default(),
        }
    }

    /// The replica catalogue changed: every data function answer must be bound again.
    pub fn catalogue_changed(&mut self) {
        self.version += 1;
    }

    pub fn stats(&self) -> MatchStats {
        self.stats
    }

    /// Distinct expression texts cached now.
    pub fn cached_expressions(&self) -> usize {
        self.slots.len()
    }

    /// The site's snapshot (published attributes, all processors free).
    pub fn snapshot(&self, site: SiteId) -> &SiteSnapshot {
        &self.base[site.index()]
    }

    /// `expr` at `site` with `free` processors free, evaluated now without the cache (for the
    /// few candidates of a decision that cannot update it).
    pub fn value_uncached(&self, expr: &Compiled, catalogue: &ReplicaCatalogue, site: SiteId, free: u32) -> i64 {
        let files = bind_files(expr, catalogue, site);
        let software = bind_software(expr, &self.offers[site.index()]);
        let host = Host {
            base: &self.base[site.index()],
            processors: self.processors[site.index()],
            free,
            files: &files,
            software: &software,
        };
        expr.eval(&host).as_int()
    }

    /// An evaluator of `expr` against the sites, reading data functions from `catalogue`.
    pub fn evaluator<'a>(&'a mut self, expr: &'a Compiled, catalogue: &'a ReplicaCatalogue) -> Evaluator<'a> {
        let slot = self.slot(expr);
        Evaluator {
            expr,
            catalogue,
            load: expr.depends_on_load(),
            base: &self.base,
            processors: &self.processors,
            offers: &self.offers,
            version: self.version,
            entries: &mut self.slots[slot].sites,
            stats: &mut self.stats,
        }
    }

    fn slot(&mut self, expr: &Compiled) -> usize {
        let address = expr as *const Compiled as usize;
        if let Some(&i) = self.by_program.get(&address) {
            if self.slots[i].source == expr.source() {
                return i;
            }
        }
        if self.slots.len() >= MAX_EXPRESSIONS || self.by_program.len() >= 64 * MAX_EXPRESSIONS {
            self.slots.clear();
            self.by_text.clear();
            self.by_program.clear();
        }
        let i = match self.by_text.get(expr.source()) {
            Some(&i) => i,
            None => {
                self.slots.push(Slot {
                    source: expr.source().to_string(),
                    sites: vec![
                        SiteEntry {
                            free: NO_VALUE,
                            ..SiteEntry::default()
                        };
                        self.base.len()
                    ],
                });
                self.by_text.insert(expr.source().to_string(), self.slots.len() - 1);
                self.slots.len() - 1
            }
        };
        self.by_program.insert(address, i);
        i
    }
}

/// Evaluates one expression at sites, through the cache.
pub struct Evaluator<'a> {
    expr: &'a Compiled,
    catalogue: &'a ReplicaCatalogue,
    load: bool,
    base: &'a [SiteSnapshot],
    processors: &'a [u32],
    offers: &'a [Vec<String>],
    version: u64,
    entries: &'a mut [SiteEntry],
    stats: &'a mut MatchStats,
}

impl Evaluator<'_> {
    /// The expression's value at `site` when `free` processors are free there (a boolean is
    /// 1 or 0; the empty expression is 0).
    pub fn value(&mut self, site: SiteId, free: u32) -> i64 {
        let i = site.index();
        let e = &mut self.entries[i];
        if e.version != self.version {
            e.version = self.version;
            e.free = NO_VALUE;
            e.files = bind_files(self.expr, self.catalogue, site);
            e.software = bind_software(self.expr, &self.offers[i]);
        }
        let key = if self.load { free.min(NO_VALUE - 1) } else { 0 };
        if e.free == key {
            self.stats.cached += 1;
            return e.value;
        }
        let host = Host {
            base: &self.base[i],
            processors: self.processors[i],
            free,
            files: &e.files,
            software: &e.software,
        };
        e.value = self.expr.eval(&host).as_int();
        e.free = key;
        self.stats.evaluations += 1;
        e.value
    }

    /// As requirements: whether the site qualifies (the empty expression accepts every site).
    pub fn matches(&mut self, site: SiteId, free: u32) -> bool {
        self.expr.is_empty() || self.value(site, free) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::Expr;
    use crate::model::SiteAttributes;

    fn sites() -> Vec<Site> {
        [("a", 2800), ("b", 2800), ("c", 1001)]
            .iter()
            .map(|&(n, mhz)| Site {
                name: n.into(),
                processors: 50,
                speed: 1.0,
                supports_reservations: false,
                attributes: SiteAttributes {
                    cpu_mhz: mhz,
                    software: if n == "b" { vec!["APPS/BLAST-2.2".into()] } else { Vec::new() },
                    ..Default::default()
                },
            })
            .collect()
    }

    #[test]
    fn cached_values_follow_load_and_catalogue() {
        let mut m = Matcher::new(&sites());
        let mut cat = ReplicaCatalogue::new();
        cat.insert("myfile", 405_000_000, [SiteId(2)]);
        let rank = Expr::compile("CPU_MHZ + QUEUE_FREENODECOUNT + SIZE_CLOSE_DATA(\"myfile\") / 135").unwrap();
        let fixed = Expr::compile("CPU_MHZ > 2000 & HAS_CLOSE_DATA(\"myfile\") = 0").unwrap();
        {
            let mut ev = m.evaluator(&rank, &cat);
            assert_eq!(ev.value(SiteId(2), 0), 4001); // 004 Table 3 (c), 405 MB at C
            assert_eq!(ev.value(SiteId(0), 16), 2816);
            assert_eq!(ev.value(SiteId(0), 16), 2816); // cached
            assert_eq!(ev.value(SiteId(0), 15), 2815); // the load changed
        }
        let sw = Expr::compile("HAS_SOFTWARE(\"apps/blast-2.2\")").unwrap();
        assert!(m.evaluator(&sw, &cat).matches(SiteId(1), 0));
        assert!(!m.evaluator(&sw, &cat).matches(SiteId(0), 0));
        assert_eq!(m.stats(), MatchStats { evaluations: 5, cached: 1 });
        {
            let mut ev = m.evaluator(&fixed, &cat);
            assert!(ev.matches(SiteId(0), 3) && ev.matches(SiteId(0), 40)); // one evaluation
            assert!(!ev.matches(SiteId(2), 3));
        }
        assert_eq!(m.stats().evaluations, 7);
        // A replica appears at A: the data functions see it once the catalogue changed.
        cat.add_replica("myfile", SiteId(0));
        m.catalogue_changed();
        let mut ev = m.evaluator(&fixed, &cat);
        assert!(!ev.matches(SiteId(0), 3));
        let mut ev = m.evaluator(&rank, &cat);
        assert_eq!(ev.value(SiteId(0), 15), 2815 + 3000);
    }

    #[test]
    fn the_cache_is_bounded() {
        let mut m = Matcher::new(&sites());
        let cat = ReplicaCatalogue::new();
        for i in 0..MAX_EXPRESSIONS + 10 {
            let e = Expr::compile(&format!("CPU_MHZ + {i}")).unwrap();
            assert_eq!(m.evaluator(&e, &cat).value(SiteId(1), 0), 2800 + i as i64);
            assert!(m.cached_expressions() <= MAX_EXPRESSIONS);
        }
    }
}
