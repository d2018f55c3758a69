//! GridWay in the daemon (004, issue 13): what the core's GridWay policies need from a real
//! server, and what they show.
//!
//! - [`catalogue`]: the replica-catalogue cache of 004 §3.3. The data functions of REQUIREMENTS
//!   and RANK (CLOSE_DATA, HAS_CLOSE_DATA, SIZE_CLOSE_DATA) and the GW_* environment read the
//!   answers of one bounded, expiring LRU cache in front of the catalogue of record (the
//!   server's database): before each placement scan the daemon looks up every file the live
//!   jobs' expressions name, and queries the database only for entries absent or older than
//!   the age limit — one query per file, however many sites and jobs evaluate it.
//! - [`sites`]: the GridWay host variables of each site (ARCH, OS_NAME, CPU_MHZ, SIZE_MEM_MB,
//!   LRMS_TYPE, QUEUE_NAME, HAS_SOFTWARE tags …): discovered on this machine, overridden by
//!   `[sites.attributes]`.
//! - Banning (GridWay's failure-rate policy), the resource priority of 004 Eq. 1 and GridWay's
//!   job priority order are the core's ([`koalesce_core::gridway`]); the daemon feeds them the
//!   real outcomes (a soft error at a site bans it for `gridway` jobs) and shows their state in
//!   `GET /api/v1/sites` and `/metrics` ([`render_metrics`]).
//! - At launch a component of a job with REQUIREMENTS or RANK gets GW_CLOSE_SE and
//!   GW_REMOTE_FILES_0, _1, … ([`koalesce_core::Scheduler::gridway_environment`]).

pub mod catalogue;
pub mod sites;

use std::fmt::Write;
use std::sync::atomic::Ordering;

use koalesce_core::SiteId;

pub use catalogue::{CatalogueConfig, DataCatalogue};

use crate::daemon::State;
use crate::now_ms;

/// The GridWay part of `/metrics`: the catalogue cache's counters, the evaluation counters of
/// REQUIREMENTS/RANK, and each site's ban and usage history.
pub fn render_metrics(st: &State, data: &DataCatalogue, o: &mut String) {
    let c = data.stats();
    let counters = [
        ("hits", "Data-function lookups answered from the catalogue cache.", c.hits),
        (
            "misses",
            "Lookups that had to query the catalogue (absent or expired entries).",
            c.misses,
        ),
        ("expired", "Of the misses, entries older than the age limit.", c.expired),
        ("evictions", "Entries dropped to stay within the size bound.", c.evictions),
        (
            "queries",
            "Catalogue queries made (one per missed file).",
            data.queries.load(Ordering::Relaxed),
        ),
        (
            "query_failures",
            "Catalogue queries that failed (asked again at the next scan).",
            data.query_failures.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, v) in counters {
        let _ = writeln!(
            o,
            "# HELP koalesce_catalogue_cache_{name}_total {help}\n# TYPE koalesce_catalogue_cache_{name}_total counter\nkoalesce_catalogue_cache_{name}_total {v}"
        );
    }
    let _ = writeln!(
        o,
        "# HELP koalesce_catalogue_cache_entries Entries in the catalogue cache.\n# TYPE koalesce_catalogue_cache_entries gauge\nkoalesce_catalogue_cache_entries {}",
        c.entries
    );
    let m = st.core.match_stats();
    let _ = writeln!(
        o,
        "# HELP koalesce_expression_evaluations_total REQUIREMENTS/RANK programs run in placement scans.\n# TYPE koalesce_expression_evaluations_total counter\nkoalesce_expression_evaluations_total {}",
        m.evaluations
    );
    let _ = writeln!(
        o,
        "# HELP koalesce_expression_cached_total REQUIREMENTS/RANK values reused without running the program.\n# TYPE koalesce_expression_cached_total counter\nkoalesce_expression_cached_total {}",
        m.cached
    );
    let now = now_ms();
    let _ = writeln!(
        o,
        "# HELP koalesce_site_banned Whether the site is banned for gridway jobs after failures (GridWay's failure-rate policy).\n# TYPE koalesce_site_banned gauge"
    );
    for (i, site) in st.core.sites().iter().enumerate() {
        let _ = writeln!(
            o,
            "koalesce_site_banned{{site=\"{}\"}} {}",
            site.name,
            u8::from(st.core.is_banned(SiteId(i as u32), now))
        );
    }
    let _ = writeln!(
        o,
        "# HELP koalesce_site_failure_streak Failures at the site since its last success.\n# TYPE koalesce_site_failure_streak gauge"
    );
    for (i, site) in st.core.sites().iter().enumerate() {
        let _ = writeln!(
            o,
            "koalesce_site_failure_streak{{site=\"{}\"}} {}",
            site.name,
            st.core.ban(SiteId(i as u32)).failures
        );
    }
    let _ = writeln!(
        o,
        "# HELP koalesce_site_last_job_seconds Time from placement to end of the last job that ended well at the site (004 Eq. 1's P_current).\n# TYPE koalesce_site_last_job_seconds gauge"
    );
    for (i, site) in st.core.sites().iter().enumerate() {
        if let Some(ms) = st.core.usage_history(SiteId(i as u32)).last_ms {
            let _ = writeln!(o, "koalesce_site_last_job_seconds{{site=\"{}\"}} {}", site.name, ms as f64 / 1000.0);
        }
    }
}
