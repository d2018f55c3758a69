//! The replica catalogue cache of 004 §3.3: "a linked list with a limited size and with the
//! last used entry always at the front ... When the maximum size is reached, entries are
//! removed from the cache on a least recently used basis. In addition, each entry includes a
//! timestamp. Before trusting the information of an entry, GridWay checks that the information
//! is not older than a configurable time limit. Otherwise, the entry is discarded and the
//! location of the data is queried to the catalogue again."
//!
//! One cache serves the whole daemon, so each requested file costs one catalogue query per age
//! limit, however many sites and jobs evaluate it. Time is an argument (the core reads no
//! clock); the query is a closure the driver supplies.
//!
//! Written here rather than taken from an LRU crate: it is a few dozen lines, needs expiry by a
//! caller-supplied time and hit/miss counters, and keeps the core free of dependencies.

use std::collections::{BTreeMap, HashMap};

use crate::model::Millis;

/// Counters of a [`CatalogueCache`] (for `/metrics`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Answers served from the cache.
    pub hits: u64,
    /// Lookups that queried the catalogue (absent or expired entries).
    pub misses: u64,
    /// Of the misses, those whose entry had expired.
    pub expired: u64,
    /// Entries dropped to stay within the size bound.
    pub evictions: u64,
    /// Entries held now.
    pub entries: usize,
}

#[derive(Debug, Clone)]
struct Entry<V> {
    fetched: Millis,
    used: u64,
    value: V,
}

/// A bounded LRU cache of catalogue answers whose entries expire `max_age_ms` after they were
/// fetched.
#[derive(Debug, Clone)]
pub struct CatalogueCache<V> {
    capacity: usize,
    max_age_ms: Millis,
    entries: HashMap<String, Entry<V>>,
    /// Use stamp → name, oldest first.
    lru: BTreeMap<u64, String>,
    tick: u64,
    stats: CacheStats,
}

impl<V: Clone> CatalogueCache<V> {
    /// A cache of at most `capacity` entries (at least 1), each trusted for `max_age_ms`.
    pub fn new(capacity: usize, max_age_ms: Millis) -> Self {
        CatalogueCache {
            capacity: capacity.max(1),
            max_age_ms,
            entries: HashMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
            stats: CacheStats::default(),
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn max_age_ms(&self) -> Millis {
        self.max_age_ms
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            entries: self.entries.len(),
            ..self.stats
        }
    }

    fn fresh(&self, e: &Entry<V>, now: Millis) -> bool {
        now.saturating_sub(e.fetched) < self.max_age_ms
    }

    fn touch(&mut self, name: &str) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(e) = self.entries.get_mut(name) {
            self.lru.remove(&e.used);
            e.used = tick;
            self.lru.insert(tick, name.to_string());
        }
    }

    /// The answer for `name`: from the cache when fresh (a hit), else from `query` (a miss),
    /// which is then cached.
    pub fn get_or_query(&mut self, name: &str, now: Millis, query: impl FnOnce(&str) -> V) -> V {
        match self.try_get_or_query(name, now, |n| Ok::<V, std::convert::Infallible>(query(n))) {
            Ok(v) => v,
            Err(never) => match never {},
        }
    }

    /// Like [`CatalogueCache::get_or_query`] with a query that may fail; a failed answer is
    /// not cached (the next lookup asks again).
    pub fn try_get_or_query<E>(&mut self, name: &str, now: Millis, query: impl FnOnce(&str) -> Result<V, E>) -> Result<V, E> {
        if let Some(v) = self.lookup(name, now) {
            return Ok(v);
        }
        let value = query(name)?;
        self.insert(name, now, value.clone());
        Ok(value)
    }

    /// The cached answer for `name` if it is fresh at `now` (counted as a hit, else a miss);
    /// an expired entry is dropped.
    pub fn lookup(&mut self, name: &str, now: Millis) -> Option<V> {
        match self.entries.get(name) {
            Some(e) if self.fresh(e, now) => {
                let v = e.value.clone();
                self.stats.hits += 1;
                self.touch(name);
                Some(v)
            }
            Some(_) => {
                self.stats.misses += 1;
                self.stats.expired += 1;
                self.remove(name);
                None
            }
            None => {
                self.stats.misses += 1;
                None
            }
        }
    }

    /// Stores an answer fetched at `now`, evicting the least recently used entry when full.
    pub fn insert(&mut self, name: &str, now: Millis, value: V) {
        self.remove(name);
        while self.entries.len() >= self.capacity {
            let Some((_, oldest)) = self.lru.pop_first() else { break };
            self.entries.remove(&oldest);
            self.stats.evictions += 1;
        }
        self.tick += 1;
        self.entries.insert(
            name.to_string(),
            Entry {
                fetched: now,
                used: self.tick,
                value,
            },
        );
        self.lru.insert(self.tick, name.to_string());
    }

    /// Forgets `name` (the catalogue changed it). Returns whether it was cached.
    pub fn remove(&mut self, name: &str) -> bool {
        match self.entries.remove(name) {
            Some(e) => {
                self.lru.remove(&e.used);
                true
            }
            None => false,
        }
    }

    /// Forgets every entry.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.lru.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hits_misses_expiry_and_lru_by_hand() {
        let mut c: CatalogueCache<u32> = CatalogueCache::new(2, 1_000);
        let queries = std::cell::Cell::new(0);
        let q = |n: &str| {
            queries.set(queries.get() + 1);
            n.len() as u32
        };
        assert_eq!(c.get_or_query("a", 0, q), 1); // miss
        assert_eq!(c.get_or_query("a", 100, q), 1); // fresh: hit
        assert_eq!(c.get_or_query("bb", 200, q), 2); // miss
        assert_eq!(c.get_or_query("ccc", 300, q), 3); // miss; full: evicts "a" (used at 100)
        assert_eq!(c.len(), 2);
        assert_eq!(c.get_or_query("bb", 400, q), 2); // hit
        assert_eq!(c.get_or_query("a", 500, q), 1); // miss; evicts "ccc" (used at 300)
        assert_eq!(c.get_or_query("bb", 1_200, q), 2); // fetched at 200: expired
        assert_eq!(queries.get(), 5);
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.expired, s.evictions, s.entries), (2, 5, 1, 2, 2));
    }

    #[test]
    fn a_failed_query_is_not_cached() {
        let mut c: CatalogueCache<u32> = CatalogueCache::new(4, 1_000);
        assert_eq!(c.try_get_or_query("f", 0, |_| Err::<u32, &str>("down")), Err("down"));
        assert!(c.is_empty());
        assert_eq!(c.try_get_or_query("f", 1, |_| Ok::<u32, &str>(7)), Ok(7));
        assert_eq!(c.try_get_or_query("f", 2, |_| Err::<u32, &str>("not asked")), Ok(7));
    }

    proptest! {
        /// Under any sequence of lookups: the size stays within the bound; an answer never
        /// comes from an entry older than the age limit; and with room for every file, each
        /// file is queried at most once per age limit.
        #[test]
        fn bounded_never_stale_one_query_per_file(
            capacity in 1usize..6,
            max_age in 1u64..500,
            ops in proptest::collection::vec((0usize..8, 0u64..200), 1..200),
        ) {
            let mut small: CatalogueCache<(String, Millis)> = CatalogueCache::new(capacity, max_age);
            let mut roomy: CatalogueCache<(String, Millis)> = CatalogueCache::new(8, max_age);
            let mut now = 0;
            let mut last_query: BTreeMap<String, Millis> = BTreeMap::new();
            let mut queries = 0u64;
            for (file, dt) in ops {
                now += dt;
                let name = format!("lfn-{file}");
                let (got, fetched) = small.get_or_query(&name, now, |n| (n.to_string(), now));
                prop_assert_eq!(&got, &name);
                prop_assert!(now - fetched < max_age, "stale answer fetched at {} used at {}", fetched, now);
                prop_assert!(small.len() <= capacity);
                let mut asked = false;
                let (_, f2) = roomy.get_or_query(&name, now, |n| { asked = true; (n.to_string(), now) });
                if asked {
                    queries += 1;
                    if let Some(&prev) = last_query.get(&name) {
                        prop_assert!(now - prev >= max_age, "{} queried at {} and again at {}", name, prev, now);
                    }
                    last_query.insert(name.clone(), now);
                }
                prop_assert!(now - f2 < max_age);
            }
            prop_assert_eq!(roomy.stats().misses, queries);
        }
    }
}
