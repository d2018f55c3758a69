//! The jobs table (`GET /jobs`): filters (state, user, site, name), 50 rows a page, newest
//! first, kept current over server-sent events (`GET /events/jobs?<the same filters>`).

use std::sync::Arc;

use axum::extract::State as AxState;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use koalesce_api::dto::JobSummary;
use koalesce_web::html::{self as ui, Column, Table};
use maud::{html, Markup, Render};

use super::query::{self, Filter, STATES};
use super::{live, require, Nav, Viewer, Web, WebState};

/// The query string of the jobs page.
#[derive(Debug, Clone, Default)]
pub struct JobsQuery {
    pub filter: Filter,
    pub page: Option<usize>,
}

impl JobsQuery {
    /// The query string for page `p` with the same filters.
    pub fn href(&self, base: &str, p: usize) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        let f = &self.filter;
        for (k, v) in [("state", &f.state), ("user", &f.user), ("site", &f.site), ("name", &f.name)] {
            if let Some(v) = v.as_deref().filter(|v| !v.is_empty()) {
                q.append_pair(k, v);
            }
        }
        if p > 1 {
            q.append_pair("page", &p.to_string());
        }
        let q = q.finish();
        if q.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{q}")
        }
    }
}

fn time_cell(ms: Option<u64>) -> Markup {
    match ms {
        Some(ms) => ui::instant(ms),
        None => html! { span.muted { "—" } },
    }
}

fn row_cells(j: &JobSummary) -> Vec<Markup> {
    vec![
        html! { a href={ "/jobs/" (j.id) } { (j.id) } },
        html! { a href={ "/jobs/" (j.id) } { (j.name) } },
        html! { (j.user) },
        ui::state_badge(&j.state),
        html! { (j.priority) },
        html! { (j.components) " × " @if j.components > 0 { (j.size / j.components.max(1)) } " = " (j.size) },
        html! { (j.sites.join(", ")) },
        time_cell(Some(j.submitted_ms)),
        time_cell(j.started_ms),
        time_cell(j.finished_ms),
    ]
}

/// The live part: count, table, pager.
pub fn list(w: &Web, v: &Viewer, q: &JobsQuery) -> Markup {
    let page = match query::list(&w.shared, v, &q.filter, q.page.unwrap_or(1)) {
        Ok(p) => p,
        Err(e) => return html! { div id="jobs-list" { (ui::notice(&format!("Cannot read the jobs: {e}"), true)) } },
    };
    let mut t = Table::new(vec![
        Column::num("id"),
        Column::text("name"),
        Column::text("user"),
        Column::text("state"),
        Column::text("priority"),
        Column::text("components × processors"),
        Column::text("sites"),
        Column::text("submitted"),
        Column::text("started"),
        Column::text("finished"),
    ])
    .id("jobs-rows");
    for j in &page.rows {
        t.row_with_id(format!("job-{}", j.id), row_cells(j));
    }
    let first = (page.page - 1) * query::PER_PAGE + 1;
    html! {
        div id="jobs-list" data-total=(page.total) {
            p.muted {
                @if page.total == 0 { "No jobs match." }
                @else { "Jobs " (first) "–" (first + page.rows.len() - 1) " of " (page.total) ", newest first." }
            }
            (t.render())
            (ui::pager(page.page, page.pages, |p| q.href("/jobs", p)))
        }
    }
}

fn filters(w: &Web, v: &Viewer, q: &JobsQuery) -> Markup {
    let f = &q.filter;
    let is = |a: &Option<String>, b: &str| a.as_deref() == Some(b);
    html! {
        form.filters method="get" action="/jobs" id="job-filters" {
            label { "State "
                select name="state" {
                    option value="" { "any" }
                    @for s in STATES { option value=(s) selected[is(&f.state, s)] { (s) } }
                }
            }
            @if v.admin {
                label { "User " input type="text" name="user" value=[f.user.as_deref()] size="10"; }
            }
            label { "Site "
                select name="site" {
                    option value="" { "any" }
                    @for h in &w.shared.sites { option value=(h.name) selected[is(&f.site, &h.name)] { (h.name) } }
                }
            }
            label { "Name " input type="search" name="name" value=[f.name.as_deref()] size="14"; }
            button type="submit" { "Filter" }
            @if !q.href("", 1).is_empty() { a.button.secondary href="/jobs" { "Clear" } }
        }
    }
}

/// The whole page.
pub fn render(w: &Web, v: &Viewer, q: &JobsQuery) -> String {
    let body = html! {
        h1 { "Jobs" }
        (filters(w, v, q))
        (ui::live_region(&q.href("/events/jobs", q.page.unwrap_or(1)), list(w, v, q)))
    };
    super::page("Jobs", Nav::Jobs, v, body)
}

fn parse_query(raw: Option<&str>) -> Result<JobsQuery, String> {
    serde_urlencoded_lite(raw.unwrap_or(""))
}

/// The query string as [`JobsQuery`] (unknown parameters ignored, a bad page number refused).
fn serde_urlencoded_lite(raw: &str) -> Result<JobsQuery, String> {
    let mut q = JobsQuery::default();
    for (k, v) in form_urlencoded::parse(raw.as_bytes()) {
        let v = v.into_owned();
        match k.as_ref() {
            "state" => q.filter.state = Some(v),
            "user" => q.filter.user = Some(v),
            "site" => q.filter.site = Some(v),
            "name" => q.filter.name = Some(v),
            "page" => q.page = Some(v.parse().map_err(|_| format!("parameter 'page': '{v}' is not a page number"))?),
            _ => {}
        }
    }
    if let Some(s) = q.filter.state.as_deref().filter(|s| !s.is_empty()) {
        if !STATES.contains(&s) {
            return Err(format!(
                "parameter 'state': unknown state '{s}' (expected one of {})",
                STATES.join(", ")
            ));
        }
    }
    Ok(q)
}

/// `GET /jobs`.
pub async fn page(AxState(w): WebState, headers: HeaderMap, uri: axum::http::Uri) -> Response {
    let back = uri.path_and_query().map_or("/jobs".to_string(), |p| p.to_string());
    let v = match require(&w, &headers, Some(&back)).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let q = match parse_query(uri.query()) {
        Ok(q) => q,
        Err(e) => return super::error_page(StatusCode::BAD_REQUEST, Some(&v), &e),
    };
    match super::blocking(move || render(&w, &v, &q)).await {
        Ok(body) => super::html_response(StatusCode::OK, body),
        Err(r) => r,
    }
}

/// `GET /events/jobs?…`.
pub async fn events(AxState(w): WebState, headers: HeaderMap, uri: axum::http::Uri) -> Response {
    if let Err(r) = require(&w, &headers, None).await {
        return r;
    }
    let q = match parse_query(uri.query()) {
        Ok(q) => q,
        Err(e) => return super::error_page(StatusCode::BAD_REQUEST, None, &e),
    };
    live::stream(
        w,
        &headers,
        Arc::new(move |w: &Web, v: &Viewer| vec![("jobs-list".to_string(), list(w, v, &q).into_string())]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_strings_round_trip() {
        let q = serde_urlencoded_lite("state=running&site=a%20b&page=3&x=1").unwrap();
        assert_eq!(q.filter.state.as_deref(), Some("running"));
        assert_eq!(q.filter.site.as_deref(), Some("a b"));
        assert_eq!(q.page, Some(3));
        assert_eq!(q.href("/jobs", 2), "/jobs?state=running&site=a+b&page=2");
        assert_eq!(JobsQuery::default().href("/jobs", 1), "/jobs");
        assert!(serde_urlencoded_lite("state=nope").unwrap_err().contains("unknown state 'nope'"));
        assert!(serde_urlencoded_lite("page=x").is_err());
    }
}
