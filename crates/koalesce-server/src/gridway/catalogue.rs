//! The replica-catalogue cache of 004 §3.3 in the daemon.
//!
//! "Given that GridWay evaluates the expressions once for each possible destination resource,
//! a data function needs to be evaluated once for each known host. In order to avoid multiple
//! catalogue queries requesting the same information ... a global cache, managed by the
//! GridWay daemon ... each requested file produces just one query to the catalogue" (004 §3.3).
//!
//! Here the catalogue of record is the server's database (tables `files` and `replicas`, which
//! `POST /api/v1/files` and every verified copy write). One [`DataCatalogue`] serves the whole
//! daemon: before each placement scan, [`refresh`] looks up every file the live jobs'
//! REQUIREMENTS and RANK name ([`koalesce_core::Scheduler::expression_files`]); a fresh entry
//! is a hit, an absent or expired one a miss that costs one database query (off the state
//! lock), whose answer is cached and handed to the core
//! ([`koalesce_core::Scheduler::set_catalogue_entry`]). The core's data functions read only
//! these answers, so an answer used in a scan is never older than `max_age_ms`; the placement
//! catalogue (CF, staging) is not affected and stays exact. A file registered or deleted
//! through the API is dropped from the cache at once ([`DataCatalogue::invalidate`]); replicas
//! that copies add are seen when their entry expires, as GridWay sees catalogue changes.
//!
//! The cache itself ([`koalesce_core::gridway::CatalogueCache`]) is the core's pure code: the
//! simulator and tests exercise the same LRU and expiry.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use koalesce_core::gridway::{CacheStats, CatalogueCache};
use koalesce_core::model::FileEntry;
use rusqlite::OptionalExtension;
use serde::{Deserialize, Serialize};

use crate::daemon::Shared;
use crate::now_ms;
use crate::store::{Store, StoreError};

/// `[catalogue]` in the server's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CatalogueConfig {
    /// Files the cache holds at most; the least recently used is dropped first.
    pub cache_entries: usize,
    /// How long (ms) a cached answer is trusted before the catalogue is asked again.
    pub cache_max_age_ms: u64,
}

impl Default for CatalogueConfig {
    fn default() -> Self {
        CatalogueConfig {
            cache_entries: 1024,
            cache_max_age_ms: 60_000,
        }
    }
}

impl CatalogueConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.cache_entries > 0, "config: 'catalogue.cache_entries' must be at least 1");
        anyhow::ensure!(self.cache_max_age_ms > 0, "config: 'catalogue.cache_max_age_ms' must be positive");
        Ok(())
    }
}

/// One catalogue answer: the file's size and the sites holding a replica; `None`: the
/// catalogue does not know the file.
pub type Answer = Option<(u64, Vec<String>)>;

/// The daemon's one catalogue cache and its query counters.
pub struct DataCatalogue {
    cache: Mutex<CatalogueCache<Answer>>,
    /// Queries made to the catalogue.
    pub queries: AtomicU64,
    /// Queries that failed (the file is asked again at the next scan).
    pub query_failures: AtomicU64,
}

impl DataCatalogue {
    pub fn new(config: &CatalogueConfig) -> Self {
        DataCatalogue {
            cache: Mutex::new(CatalogueCache::new(config.cache_entries, config.cache_max_age_ms)),
            queries: AtomicU64::new(0),
            query_failures: AtomicU64::new(0),
        }
    }

    fn cache(&self) -> MutexGuard<'_, CatalogueCache<Answer>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn stats(&self) -> CacheStats {
        self.cache().stats()
    }

    /// The daemon changed `name` in the catalogue (registered or deleted it): the next scan
    /// asks again.
    pub fn invalidate(&self, name: &str) {
        self.cache().remove(name);
    }
}

/// One catalogue query for `name`.
pub fn query(store: &Store, name: &str) -> Result<Answer, StoreError> {
    store.read(|c| {
        let Some(size) = c
            .query_row("SELECT size_bytes FROM files WHERE name = ?1", [name], |r| r.get::<_, i64>(0))
            .optional()?
        else {
            return Ok(None);
        };
        let mut st = c.prepare_cached("SELECT site FROM replicas WHERE name = ?1 ORDER BY site")?;
        let sites = st
            .query_map([name], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(Some((size.max(0) as u64, sites)))
    })
}

/// Before a placement scan: makes the core's data-function answers current for every file the
/// live jobs' expressions name — from the cache when fresh, else one catalogue query per file.
pub async fn refresh(shared: &Arc<Shared>) {
    let files = shared.lock().core.expression_files();
    if files.is_empty() {
        return;
    }
    let now = now_ms();
    let missed: Vec<String> = {
        let mut cache = shared.data_catalogue.cache();
        files.into_iter().filter(|f| cache.lookup(f, now).is_none()).collect()
    };
    if missed.is_empty() {
        return;
    }
    let s = shared.clone();
    let answers = tokio::task::spawn_blocking(move || {
        missed
            .into_iter()
            .map(|f| {
                s.data_catalogue.queries.fetch_add(1, Ordering::Relaxed);
                let a = query(&s.store, &f);
                (f, a)
            })
            .collect::<Vec<_>>()
    })
    .await;
    let Ok(answers) = answers else { return };
    let mut st = shared.lock();
    let mut cache = shared.data_catalogue.cache();
    for (name, answer) in answers {
        match answer {
            Ok(a) => {
                let entry = a.as_ref().map(|(size, sites)| FileEntry {
                    size_bytes: *size,
                    replicas: sites.iter().filter_map(|s| st.site_id(s)).collect(),
                });
                cache.insert(&name, now, a);
                st.core.set_catalogue_entry(&name, entry);
            }
            Err(e) => {
                shared.data_catalogue.query_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(file = %name, error = %e, "catalogue query failed");
            }
        }
    }
}
