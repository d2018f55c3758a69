//! `GET /api/v1/jobs`: the job list, filtered and paged as `squeue`/`sacct` users expect.
//!
//! Query parameters (all optional): `state` (one state or a comma-separated list), `name` (a
//! shell wildcard, `*` / `?` / `[..]`, ASCII case ignored), `site` (jobs placed at that site),
//! `since` (submitted at or after this Unix time in ms), `user` (admins: that user's jobs;
//! others may only name themselves), `all=true` (admins: every user's jobs; refused with 403
//! for others, saying why), `limit` (at most that many jobs: [`DEFAULT_LIMIT`] when not given,
//! at most [`MAX_LIMIT`]) and `after` (only ids above it: the cursor). Jobs come in id order,
//! one page at a time: when the page was cut, the `X-Koalesce-Next-After` header holds the
//! `after` of the next page and a `Link: <...>; rel="next"` header (RFC 8288) its whole URL;
//! the last page has neither.
//!
//! Live jobs are rendered from the core, ended ones read from the store (a job in both is
//! shown as the core has it).

use std::collections::BTreeMap;

use axum::extract::{Query, State as AxState};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use koalesce_api::dto::{JobDetail, JobSummary};
use koalesce_core::expr::glob_match;
use koalesce_core::JobState;
use rusqlite::params;
use serde::Deserialize;

use crate::api::{authenticate, err, read_store, ApiError};
use crate::daemon::Shared;
use crate::store;

type S = std::sync::Arc<Shared>;

/// Header: the `after` of the next page when `limit` cut the list.
pub const NEXT_AFTER_HEADER: &str = "x-koalesce-next-after";
/// Largest `limit` (documented in docs/server-contract.md).
pub const MAX_LIMIT: usize = 10_000;
/// The page size when the query gives no `limit`: no request renders an unbounded list.
pub const DEFAULT_LIMIT: usize = 1_000;

#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    state: Option<String>,
    all: Option<bool>,
    user: Option<String>,
    name: Option<String>,
    site: Option<String>,
    since: Option<u64>,
    limit: Option<usize>,
    after: Option<u64>,
}

/// A checked [`ListQuery`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    /// Wanted states (empty: any).
    pub states: Vec<String>,
    /// Only this user's jobs (`None`: everyone's, admins only).
    pub user: Option<String>,
    pub name: Option<String>,
    pub site: Option<String>,
    pub since: Option<u64>,
    /// Page size ([`DEFAULT_LIMIT`] unless the query says).
    pub limit: usize,
    pub after: u64,
}

impl Filter {
    /// Checks the query against the caller's rights.
    pub fn from_query(q: ListQuery, user: &str, admin: bool) -> Result<Filter, ApiError> {
        let mut states = Vec::new();
        for st in q.state.iter().flat_map(|s| s.split(',')).map(str::trim).filter(|s| !s.is_empty()) {
            if !JobState::NAMES.contains(&st) {
                return Err(err(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!(
                        "parameter 'state': unknown state '{st}' (expected one of {})",
                        JobState::NAMES.join(", ")
                    ),
                ));
            }
            states.push(st.to_string());
        }
        if q.all.unwrap_or(false) && !admin {
            return Err(err(
                StatusCode::FORBIDDEN,
                format!(
                    "parameter 'all': only an admin may list other users' jobs ('{user}' is not an admin); without it you see your own"
                ),
            ));
        }
        let who = match q.user {
            Some(u) if u != user && !admin => {
                return Err(err(
                    StatusCode::FORBIDDEN,
                    format!("parameter 'user': only an admin may list another user's jobs ('{user}' is not an admin)"),
                ))
            }
            Some(u) => Some(u),
            None if admin && q.all.unwrap_or(false) => None,
            None => Some(user.to_string()),
        };
        let limit = page_limit(q.limit).map_err(|e| err(StatusCode::UNPROCESSABLE_ENTITY, e))?;
        Ok(Filter {
            states,
            user: who,
            name: q.name.filter(|n| !n.is_empty()),
            site: q.site.filter(|n| !n.is_empty()),
            since: q.since,
            limit,
            after: q.after.unwrap_or(0),
        })
    }

    /// Whether a job (its summary) passes the filter.
    pub fn matches(&self, j: &JobSummary) -> bool {
        j.id > self.after
            && (self.states.is_empty() || self.states.contains(&j.state))
            && self.user.as_ref().is_none_or(|u| *u == j.user)
            && self.name.as_ref().is_none_or(|n| glob_match(n.as_bytes(), j.name.as_bytes()))
            && self.site.as_ref().is_none_or(|s| j.sites.contains(s))
            && self.since.is_none_or(|t| j.submitted_ms >= t)
    }

    /// Whether ended jobs can pass at all.
    fn wants_ended(&self) -> bool {
        self.states.is_empty() || self.states.iter().any(|s| store::ENDED.contains(&s.as_str()))
    }
}

/// Ended jobs that pass `f`, in id order, at most `max` of them.
pub fn load_ended(conn: &rusqlite::Connection, f: &Filter, max: usize) -> rusqlite::Result<Vec<JobSummary>> {
    let states = (!f.states.is_empty()).then(|| format!(",{},", f.states.join(",")));
    let mut st = conn.prepare_cached(&format!(
        "SELECT detail FROM jobs WHERE state IN {} AND id > ?1 AND (?2 IS NULL OR user = ?2) \
         AND (?3 IS NULL OR instr(?3, ',' || state || ',') > 0) AND (?4 IS NULL OR submitted_ms >= ?4) \
         AND (?5 IS NULL OR EXISTS (SELECT 1 FROM json_each(detail, '$.sites') WHERE value = ?5)) ORDER BY id",
        store::ended_sql()
    ))?;
    let mut rows = st.query(params![f.after as i64, f.user, states, f.since.map(|t| t as i64), f.site])?;
    let mut out = Vec::new();
    while out.len() < max {
        let Some(row) = rows.next()? else { break };
        let detail: String = row.get(0)?;
        // A rendering that does not parse (written by a future version) is left out.
        if let Ok(d) = serde_json::from_str::<JobDetail>(&detail) {
            let j = d.summary();
            if f.matches(&j) {
                out.push(j);
            }
        }
    }
    Ok(out)
}

/// The live jobs that pass `f` from its `after` on, at most `max` of them: the state lock is
/// held for the walk and at most `max` renderings, not for the whole list (issue 8).
fn live_page(s: &Shared, f: &Filter, max: usize) -> Vec<JobSummary> {
    let st = s.lock();
    st.meta
        .range(f.after.saturating_add(1)..)
        .filter(|(_, m)| f.user.as_ref().is_none_or(|u| *u == m.user))
        .filter_map(|(id, m)| Some(crate::daemon::records::render(*id, st.core.job(koalesce_core::JobId(*id))?, m, &s.sites).summary()))
        .filter(|j| f.matches(j))
        .take(max)
        .collect()
}

/// `GET /api/v1/jobs`.
pub async fn list_jobs(
    AxState(s): AxState<S>,
    headers: HeaderMap,
    raw: axum::extract::RawQuery,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let caller = authenticate(&s, &headers)?;
    let Query(q) = q.map_err(|e| err(StatusCode::BAD_REQUEST, format!("query: {e}")))?;
    let f = Filter::from_query(q, &caller.user, caller.admin)?;
    let want = f.limit + 1;
    // Live jobs first, then the store: a job leaves the live set only after its final row is
    // committed, so read in this order it is in one or the other (the other order missed a
    // job that ended between the two reads). A job in both is shown by its final row.
    let mut out: BTreeMap<u64, JobSummary> = BTreeMap::new();
    for j in live_page(&s, &f, want) {
        out.insert(j.id, j);
    }
    if f.wants_ended() {
        let fe = f.clone();
        for j in read_store(&s, move |c| load_ended(c, &fe, want)).await? {
            out.insert(j.id, j);
        }
    }
    let mut jobs: Vec<JobSummary> = out.into_values().take(want).collect();
    for j in &mut jobs {
        crate::api_bags::fill_summary(&s, j).await?;
    }
    let mut h = HeaderMap::new();
    if jobs.len() > f.limit {
        jobs.truncate(f.limit);
        if let Some(last) = jobs.last() {
            h = next_page_headers("/api/v1/jobs", raw.0.as_deref().unwrap_or(""), &last.id.to_string());
        }
    }
    Ok((StatusCode::OK, h, Json(jobs)).into_response())
}

/// `limit` of a paged list (jobs, files, reservations): [`DEFAULT_LIMIT`] when not given, and
/// an error naming it outside 1..=[`MAX_LIMIT`].
pub(crate) fn page_limit(limit: Option<usize>) -> Result<usize, String> {
    match limit {
        Some(l) if l == 0 || l > MAX_LIMIT => Err(format!("parameter 'limit': must be in 1..={MAX_LIMIT}")),
        l => Ok(l.unwrap_or(DEFAULT_LIMIT)),
    }
}

/// The headers of a page that `limit` cut: the next page's `after` in
/// `X-Koalesce-Next-After` and its whole URL in `Link: <...>; rel="next"` (RFC 8288), the
/// request's `query` with `after` set to `cursor` (given ready for a query: percent-encoded
/// where it needs to be).
pub(crate) fn next_page_headers(path: &str, query: &str, cursor: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(cursor) {
        h.insert(NEXT_AFTER_HEADER, v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("<{path}?{}>; rel=\"next\"", next_query(query, cursor))) {
        h.insert(axum::http::header::LINK, v);
    }
    h
}

/// The query of the next page: the request's own, with `after` set to `after` (the request's
/// parameters are kept as they came, so the next page has the same filter and size).
pub fn next_query(query: &str, after: impl std::fmt::Display) -> String {
    let mut parts: Vec<String> = query
        .split('&')
        .filter(|p| !p.is_empty() && p.split('=').next() != Some("after"))
        .map(str::to_string)
        .collect();
    parts.push(format!("after={after}"));
    parts.join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> ListQuery {
        let text: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        serde_urlencoded_like(&text.join("&"))
    }

    /// Parses a query string the way axum's `Query` does (through serde).
    fn serde_urlencoded_like(s: &str) -> ListQuery {
        let uri: axum::http::Uri = format!("/?{s}").parse().unwrap();
        Query::<ListQuery>::try_from_uri(&uri).unwrap().0
    }

    #[test]
    fn rights_and_values_are_checked() {
        let f = Filter::from_query(q(&[]), "bob", false).unwrap();
        assert_eq!(f.user.as_deref(), Some("bob"), "a user sees their own jobs");
        let e = Filter::from_query(q(&[("all", "true")]), "bob", false).unwrap_err();
        assert_eq!(e.0, StatusCode::FORBIDDEN);
        assert!(e.1.contains("only an admin"), "{}", e.1);
        assert_eq!(
            Filter::from_query(q(&[("user", "alice")]), "bob", false).unwrap_err().0,
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            Filter::from_query(q(&[("user", "bob")]), "bob", false).unwrap().user.as_deref(),
            Some("bob")
        );
        assert_eq!(Filter::from_query(q(&[("all", "true")]), "root", true).unwrap().user, None);
        assert_eq!(
            Filter::from_query(q(&[("user", "alice")]), "root", true).unwrap().user.as_deref(),
            Some("alice")
        );
        let e = Filter::from_query(q(&[("state", "running,bogus")]), "bob", false).unwrap_err();
        assert!(e.1.contains("'bogus'") && e.1.contains("timeout"), "{}", e.1);
        assert_eq!(
            Filter::from_query(q(&[("limit", "0")]), "bob", false).unwrap_err().0,
            StatusCode::UNPROCESSABLE_ENTITY
        );
        let f = Filter::from_query(q(&[("state", "timeout,failed")]), "bob", false).unwrap();
        assert_eq!(f.states, ["timeout", "failed"]);
        assert_eq!(
            Filter::from_query(q(&[]), "bob", false).unwrap().limit,
            DEFAULT_LIMIT,
            "a default page size"
        );
        let over = (MAX_LIMIT + 1).to_string();
        assert_eq!(
            Filter::from_query(q(&[("limit", over.as_str())]), "bob", false).unwrap_err().0,
            StatusCode::UNPROCESSABLE_ENTITY
        );
    }

    #[test]
    fn the_next_page_keeps_the_query_and_moves_the_cursor() {
        assert_eq!(next_query("", 7), "after=7");
        assert_eq!(next_query("state=failed&after=3&limit=2", 9), "state=failed&limit=2&after=9");
        assert_eq!(next_query("name=a%26b&afterwards=1", 4), "name=a%26b&afterwards=1&after=4");
    }

    #[test]
    fn jobs_match_every_filter() {
        let j = JobSummary {
            id: 7,
            name: "Sweep-12".into(),
            user: "bob".into(),
            state: "timeout".into(),
            sites: vec!["vu".into(), "delft".into()],
            submitted_ms: 1000,
            ..Default::default()
        };
        let f = |pairs: &[(&str, &str)]| Filter::from_query(q(pairs), "bob", false).unwrap();
        assert!(f(&[]).matches(&j));
        assert!(f(&[("name", "sweep-*")]).matches(&j), "wildcards, case ignored");
        assert!(!f(&[("name", "sweep")]).matches(&j));
        assert!(f(&[("site", "delft")]).matches(&j));
        assert!(!f(&[("site", "uva")]).matches(&j));
        assert!(f(&[("since", "1000")]).matches(&j));
        assert!(!f(&[("since", "1001")]).matches(&j));
        assert!(f(&[("after", "6")]).matches(&j));
        assert!(!f(&[("after", "7")]).matches(&j));
        assert!(f(&[("state", "running,timeout")]).matches(&j));
        assert!(!f(&[("state", "failed")]).matches(&j), "a timeout is not listed as failed");
    }
}
