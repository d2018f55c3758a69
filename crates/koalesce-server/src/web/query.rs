//! The jobs the dashboard lists: live jobs from the core (filtered in memory), ended jobs from
//! the store (filtered and paged in SQL over [`INDEX`]), merged newest first.
//!
//! [`INDEX`] (ended jobs only) covers what the table filters on (id, state, user, name and the sites of the
//! rendering), so a page, its count and any filter scan small index entries instead of the job
//! rows (which carry descriptions and renderings): at 100,000 ended jobs a page costs a few
//! milliseconds (`koalesce bench dashboard`). Queries name the index (`INDEXED BY`): SQLite's
//! planner would otherwise scan the table for the sites expression.

use std::collections::BTreeMap;

use koalesce_api::dto::{JobDetail, JobSummary};
use koalesce_core::JobId;
use rusqlite::{Connection, OptionalExtension};
use serde::Deserialize;

use super::Viewer;
use crate::daemon::{records, Shared};
use crate::store::StoreError;

/// The condition of [`ENDED_SQL`] as a literal, so that the index and the queries below are
/// built from the one text.
macro_rules! ended_sql {
    () => {
        "state IN ('succeeded', 'failed', 'timeout', 'out_of_memory', 'cancelled')"
    };
}

/// The ended jobs the store lists, as every query over [`INDEX`] says it, word for word (the
/// index is partial: SQLite uses it only for a query with its condition): every state of
/// `JobState::TERMINAL_NAMES` (the test `ended_sql_names_every_terminal_state` keeps them equal).
const ENDED_SQL: &str = ended_sql!();

/// The dashboard's index on the jobs table (created at startup if missing), over ended jobs
/// only: the dashboard lists live jobs from the core, and an index entry for every new job
/// cost each group commit of submissions two more pages (`bench submit`). Replaces
/// `jobs_web_list`, which indexed every job. Live jobs' rows have an empty rendering: the
/// expression must not fail on it (a failing expression fails the insert).
pub const INDEX: &str = concat!(
    "DROP INDEX IF EXISTS jobs_web_list; DROP INDEX IF EXISTS jobs_web_ended; \
     CREATE INDEX IF NOT EXISTS jobs_web_terminal ON jobs \
     (id, state, user, name, (CASE WHEN json_valid(detail) THEN json_extract(detail, '$.sites') END)) \
     WHERE ",
    ended_sql!(),
    ";"
);

/// Rows per page of the jobs table.
pub const PER_PAGE: usize = 50;

/// Job states in display order: every state a job can be in (the filter's choices and the
/// overview's counts).
pub const STATES: &[&str] = &koalesce_core::JobState::NAMES;

/// The jobs table's filters (each optional; empty strings count as absent).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Filter {
    pub state: Option<String>,
    pub user: Option<String>,
    pub site: Option<String>,
    /// A part of the job's name (case-insensitive).
    pub name: Option<String>,
}

impl Filter {
    /// Empty values dropped, and a user who is not an admin sees only their own jobs.
    pub fn normalized(&self, v: &Viewer) -> Filter {
        let clean = |x: &Option<String>| x.as_ref().map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
        Filter {
            state: clean(&self.state),
            user: if v.admin { clean(&self.user) } else { Some(v.user.clone()) },
            site: clean(&self.site),
            name: clean(&self.name),
        }
    }

    fn matches_live(&self, user: &str, state: &str, name: &str, sites: &[&str]) -> bool {
        self.state.as_deref().is_none_or(|s| s == state)
            && self.user.as_deref().is_none_or(|u| u == user)
            && self.site.as_deref().is_none_or(|s| sites.contains(&s))
            && self.name.as_deref().is_none_or(|n| name.to_lowercase().contains(&n.to_lowercase()))
    }

    /// Whether ended jobs can match at all.
    fn wants_ended(&self) -> bool {
        self.state.as_deref().is_none_or(|s| crate::store::ENDED.contains(&s))
    }
}

/// One page of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    pub rows: Vec<JobSummary>,
    /// Matching jobs in all.
    pub total: usize,
    /// 1-based, clamped to `1..=pages`.
    pub page: usize,
    pub pages: usize,
}

/// `%text%` for LIKE, with the pattern characters of `text` escaped (`\`).
fn like(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('%');
    out
}

/// The sites of a job's rendering, as the index holds them.
const SITES_EXPR: &str = "(CASE WHEN json_valid(detail) THEN json_extract(detail, '$.sites') END)";

/// The store's side of a [`Filter`]: only the conditions that are set go into the SQL, so that
/// a query without a site filter reads the index alone (a condition naming `detail`, even one
/// switched off by a NULL parameter, would make SQLite read every row).
struct Sql {
    clauses: Vec<String>,
    params: Vec<String>,
}

impl Sql {
    fn of(f: &Filter) -> Sql {
        let mut sql = Sql {
            clauses: vec![ENDED_SQL.into()],
            params: Vec::new(),
        };
        let mut add = |clause: String, value: String| {
            sql.params.push(value);
            sql.clauses.push(clause.replace('?', &format!("?{}", sql.params.len())));
        };
        if let Some(s) = &f.state {
            add("state = ?".into(), s.clone());
        }
        if let Some(u) = &f.user {
            add("user = ?".into(), u.clone());
        }
        if let Some(site) = &f.site {
            // The rendering's `sites` is a JSON array of strings: match one element exactly.
            add(
                format!("{SITES_EXPR} LIKE ? ESCAPE '\\'"),
                like(&serde_json::to_string(site).unwrap_or_default()),
            );
        }
        if let Some(n) = &f.name {
            add("name LIKE ? ESCAPE '\\'".into(), like(n));
        }
        sql
    }

    fn where_(&self) -> String {
        self.clauses.join(" AND ")
    }

    fn count(&self, c: &Connection) -> rusqlite::Result<usize> {
        let q = format!("SELECT COUNT(*) FROM jobs INDEXED BY jobs_web_terminal WHERE {}", self.where_());
        c.prepare_cached(&q)?
            .query_row(rusqlite::params_from_iter(&self.params), |r| r.get::<_, i64>(0))
            .map(|n| n as usize)
    }

    fn ids(&self, c: &Connection, limit: usize, offset: usize) -> rusqlite::Result<Vec<u64>> {
        let q = format!(
            "SELECT id FROM jobs INDEXED BY jobs_web_terminal WHERE {} ORDER BY id DESC LIMIT {limit} OFFSET {offset}",
            self.where_()
        );
        let mut st = c.prepare_cached(&q)?;
        let rows = st.query_map(rusqlite::params_from_iter(&self.params), |r| r.get::<_, i64>(0))?;
        rows.map(|r| r.map(|x| x as u64)).collect()
    }
}

/// Ids of the live jobs (those the core holds) that match, newest first.
fn live_ids(s: &Shared, f: &Filter) -> Vec<u64> {
    let st = s.lock();
    let site_name = |i: koalesce_core::SiteId| s.sites.get(i.index()).map(|h| h.name.as_str()).unwrap_or("");
    st.meta
        .iter()
        .rev()
        .filter_map(|(id, m)| {
            let job = st.core.job(JobId(*id))?;
            let sites: Vec<&str> = job.sites().into_iter().map(site_name).collect();
            f.matches_live(&m.user, job.state.name(), &job.spec.name, &sites).then_some(*id)
        })
        .collect()
}

/// The live jobs' rows as the API renders them (`None` for those the core let go meanwhile).
fn live_rows(s: &Shared, ids: &[u64]) -> BTreeMap<u64, JobSummary> {
    let st = s.lock();
    ids.iter()
        .filter_map(|id| {
            let (job, meta) = (st.core.job(JobId(*id))?, st.meta.get(id)?);
            Some((*id, records::render(*id, job, meta, &s.sites).summary()))
        })
        .collect()
}

/// A stored job's owner and rendering.
pub fn stored_detail(c: &Connection, id: u64) -> rusqlite::Result<Option<(String, String)>> {
    c.prepare_cached("SELECT user, detail FROM jobs WHERE id = ?1")?
        .query_row([id as i64], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
}

/// One page of the jobs `v` may see that match `f`.
pub fn list(s: &Shared, v: &Viewer, f: &Filter, page: usize) -> Result<Page, StoreError> {
    let f = f.normalized(v);
    let live = live_ids(s, &f);
    let sql = Sql::of(&f);
    let ended_total = if f.wants_ended() { s.store.read(|c| sql.count(c))? } else { 0 };
    let total = live.len() + ended_total;
    let pages = total.div_ceil(PER_PAGE).max(1);
    let page = page.clamp(1, pages);
    let offset = (page - 1) * PER_PAGE;
    // Without live matches the store pages by itself; with them, the newest `offset + PER_PAGE`
    // ended ids are merged with the live ones (ids only, from the index).
    let ended: Vec<u64> = match (f.wants_ended(), live.is_empty()) {
        (false, _) => Vec::new(),
        (true, true) => s.store.read(|c| sql.ids(c, PER_PAGE, offset))?,
        (true, false) => s.store.read(|c| sql.ids(c, offset + PER_PAGE, 0))?,
    };
    let ids: Vec<(u64, bool)> = if live.is_empty() {
        ended.into_iter().map(|id| (id, false)).collect()
    } else {
        let mut merged: Vec<(u64, bool)> = live
            .iter()
            .map(|&id| (id, true))
            .chain(ended.into_iter().map(|id| (id, false)))
            .collect();
        merged.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
        merged.dedup_by_key(|x| x.0);
        merged.into_iter().skip(offset).take(PER_PAGE).collect()
    };
    let live_page: Vec<u64> = ids.iter().filter(|x| x.1).map(|x| x.0).collect();
    let mut rendered = live_rows(s, &live_page);
    let missing: Vec<u64> = ids.iter().map(|x| x.0).filter(|id| !rendered.contains_key(id)).collect();
    let stored = s.store.read(|c| {
        missing
            .iter()
            .map(|&id| Ok((id, stored_detail(c, id)?)))
            .collect::<rusqlite::Result<Vec<_>>>()
    })?;
    for (id, row) in stored {
        if let Some((_, detail)) = row {
            if let Ok(d) = serde_json::from_str::<JobDetail>(&detail) {
                rendered.insert(id, d.summary());
            }
        }
    }
    let rows = ids.iter().filter_map(|(id, _)| rendered.remove(id)).collect();
    Ok(Page { rows, total, page, pages })
}

/// Jobs per state that `v` may see: live ones from the core, ended ones from the store.
pub fn state_counts(s: &Shared, v: &Viewer) -> Result<Vec<(&'static str, u64)>, StoreError> {
    let mut counts: BTreeMap<&'static str, u64> = STATES.iter().map(|k| (*k, 0)).collect();
    {
        let st = s.lock();
        for (id, m) in &st.meta {
            if let Some(j) = st.core.job(JobId(*id)).filter(|j| !j.state.is_terminal() && v.sees(&m.user)) {
                *counts.entry(j.state.name()).or_default() += 1;
            }
        }
        if v.admin {
            for (k, n) in &st.ended {
                *counts.entry(k).or_default() += n;
            }
        }
    }
    if !v.admin {
        let user = v.user.clone();
        let rows = s.store.read(|c| {
            let mut st = c.prepare_cached(concat!(
                "SELECT state, COUNT(*) FROM jobs WHERE user = ?1 AND ",
                ended_sql!(),
                " GROUP BY state"
            ))?;
            let rows = st.query_map([user], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)))?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
        })?;
        for (k, n) in rows {
            if let Some(key) = STATES.iter().find(|x| **x == k) {
                *counts.entry(key).or_default() += n;
            }
        }
    }
    Ok(STATES.iter().map(|k| (*k, counts[k])).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn viewer(user: &str, admin: bool) -> Viewer {
        Viewer {
            user: user.into(),
            admin,
            csrf: String::new(),
        }
    }

    #[test]
    fn users_see_only_their_own_jobs_whatever_they_ask() {
        let f = Filter {
            user: Some("bob".into()),
            state: Some(" ".into()),
            ..Filter::default()
        };
        assert_eq!(f.normalized(&viewer("alice", false)).user.as_deref(), Some("alice"));
        assert_eq!(f.normalized(&viewer("root", true)).user.as_deref(), Some("bob"));
        assert_eq!(f.normalized(&viewer("root", true)).state, None);
    }

    #[test]
    fn ended_sql_names_every_terminal_state() {
        let names: Vec<String> = koalesce_core::JobState::TERMINAL_NAMES.iter().map(|n| format!("'{n}'")).collect();
        let list = format!("state IN ({})", names.join(", "));
        assert_eq!(ENDED_SQL, list);
        assert!(INDEX.contains(&format!("WHERE {list};")), "{INDEX}");
        for n in koalesce_core::JobState::TERMINAL_NAMES {
            assert!(STATES.contains(&n), "the dashboard's state filter offers {n}");
        }
    }

    #[test]
    fn like_patterns_escape_wildcards() {
        assert_eq!(like("a%b_c\\"), "%a\\%b\\_c\\\\%");
        assert_eq!(like("\"alpha\""), "%\"alpha\"%");
    }

    #[test]
    fn live_filters() {
        let f = Filter {
            state: Some("running".into()),
            site: Some("beta".into()),
            name: Some("SIM".into()),
            user: None,
        };
        assert!(f.matches_live("u", "running", "big-sim-1", &["alpha", "beta"]));
        assert!(!f.matches_live("u", "queued", "big-sim-1", &["beta"]));
        assert!(!f.matches_live("u", "running", "big-sim-1", &["alpha"]));
        assert!(!f.matches_live("u", "running", "other", &["beta"]));
    }
}
