//! One job (`GET /jobs/{id}`): its timeline as a Gantt chart (one row per component and site,
//! phases coloured), FTT / PGT / PWT / TWT, placement and claiming tries and why it waits now,
//! its components, input files and where they were staged from, outputs, the tail of each
//! component's stdout and stderr, and a cancel button (`POST /jobs/{id}/cancel`).

use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;

use axum::extract::{Path, State as AxState};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use koalesce_api::dto::JobDetail;
use koalesce_core::state::ComponentState;
use koalesce_core::{JobId, JobState, SiteId};
use koalesce_web::chart::{fmt_duration, JobTimes};
use koalesce_web::html::{self as ui, Column, Table};
use koalesce_web::views::{self, ComponentView, JobView};
use maud::{html, Markup, Render};

use super::{live, query, require, session, Nav, Viewer, Web, WebState};
use crate::daemon::{self, records};
use crate::jobdesc::JobDescription;
use crate::now_ms;

/// Bytes of stdout / stderr shown.
pub const TAIL_BYTES: u64 = 4096;

/// A staged input: file, from which site, to which component's site, bytes, estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staged {
    pub file: String,
    pub from: String,
    pub to: String,
    pub bytes: u64,
    pub estimated_ms: u64,
}

/// What the page shows of a job.
#[derive(Debug, Clone)]
pub struct JobPage {
    pub detail: JobDetail,
    /// Input files (logical names) of the description.
    pub inputs: Vec<String>,
    /// Live jobs only: where each input is staged from.
    pub staged: Vec<Staged>,
    /// Live jobs only: why the job waits now.
    pub waiting: Option<String>,
    pub error_resubmissions: Option<u32>,
}

/// Why a live job waits, from the core's view of the sites (placement: no site set with
/// enough idle processors; claiming: some components' sites lack idle processors now).
fn why_waiting(st: &daemon::State, names: &[String], job: &koalesce_core::scheduler::Job) -> Option<String> {
    let site = |s: SiteId| names.get(s.index()).cloned().unwrap_or_default();
    let n = st.core.sites().len();
    let free = |i: usize| {
        let v = st.core.site_view(SiteId(i as u32));
        if v.blacklisted {
            0
        } else {
            v.idle.saturating_sub(v.placed_unclaimed)
        }
    };
    match job.state {
        JobState::Queued => {
            let sizes: Vec<String> = job.components.iter().map(|c| c.processors.to_string()).collect();
            let avail: Vec<String> = (0..n)
                .map(|i| {
                    let v = st.core.site_view(SiteId(i as u32));
                    if v.blacklisted {
                        format!("{} blacklisted", site(SiteId(i as u32)))
                    } else {
                        format!("{} {}", site(SiteId(i as u32)), free(i))
                    }
                })
                .collect();
            let tried = match job.placement_tries {
                0 => "not tried yet".to_string(),
                n => format!("try {n} found no fit"),
            };
            Some(format!(
                "Waiting for placement ({tried}): components of {} processors; processors free for placement now: {}.",
                sizes.join(", "),
                avail.join(", ")
            ))
        }
        JobState::Placed => {
            let short: Vec<String> = job
                .components
                .iter()
                .enumerate()
                .filter(|(_, c)| c.state == ComponentState::Placed)
                .filter_map(|(i, c)| {
                    let s = c.site?;
                    let idle = st.core.site_view(s).idle;
                    (idle < c.processors).then(|| format!("component {i} needs {} at {} ({} idle)", c.processors, site(s), idle))
                })
                .collect();
            let next = job
                .next_claim
                .map(|t| format!(" Next claiming try in {}.", fmt_duration(t.saturating_sub(now_ms()))));
            Some(if short.is_empty() {
                format!("Placed; claiming (try {}).{}", job.claiming_tries, next.unwrap_or_default())
            } else {
                format!(
                    "Claiming try {} could not claim: {}.{}",
                    job.claiming_tries,
                    short.join("; "),
                    next.unwrap_or_default()
                )
            })
        }
        JobState::Claimed => Some("Every component holds its processors: waiting for input files and the start barrier.".into()),
        _ => None,
    }
}

/// The job `v` may see, from the core (live) or the store (ended); `None` also for another
/// user's job (ids do not leak).
pub fn load(w: &Web, v: &Viewer, id: u64) -> Option<JobPage> {
    let s = &w.shared;
    {
        let st = s.lock();
        if let (Some(job), Some(meta)) = (st.core.job(JobId(id)), st.meta.get(&id)) {
            if !v.sees(&meta.user) {
                return None;
            }
            let names: Vec<String> = s.sites.iter().map(|h| h.name.clone()).collect();
            let at = |x: Option<SiteId>| x.and_then(|s| names.get(s.index()).cloned()).unwrap_or_default();
            let staged = job
                .components
                .iter()
                .flat_map(|c| {
                    c.sources.iter().map(|src| Staged {
                        file: src.file.clone(),
                        from: at(Some(src.from)),
                        to: at(c.site),
                        bytes: src.bytes,
                        estimated_ms: src.estimated_ms,
                    })
                })
                .collect();
            return Some(JobPage {
                detail: records::render(id, job, meta, &s.sites),
                inputs: meta.desc.inputs.iter().map(|i| i.file.clone()).collect(),
                staged,
                waiting: why_waiting(&st, &names, job),
                error_resubmissions: Some(job.error_resubmissions),
            });
        }
    }
    let (user, detail, description) = s
        .store
        .read(|c| {
            let row = query::stored_detail(c, id)?;
            let desc: Option<String> = c
                .prepare_cached("SELECT description FROM jobs WHERE id = ?1")?
                .query_row([id as i64], |r| r.get(0))
                .ok();
            Ok(row.map(|(u, d)| (u, d, desc.unwrap_or_default())))
        })
        .ok()??;
    if !v.sees(&user) {
        return None;
    }
    let detail: JobDetail = serde_json::from_str(&detail).ok()?;
    let inputs = JobDescription::parse(&description)
        .map(|d| d.inputs.iter().map(|i| i.file.clone()).collect())
        .unwrap_or_default();
    Some(JobPage {
        detail,
        inputs,
        staged: Vec::new(),
        waiting: None,
        error_resubmissions: None,
    })
}

/// The charts' view of a job.
pub fn job_view(d: &JobDetail) -> JobView {
    let t = &d.timeline;
    JobView {
        id: d.id,
        name: d.name.clone(),
        state: d.state.clone(),
        times: JobTimes {
            submitted: t.submitted,
            placed: t.placed,
            claimed: t.claimed,
            started: t.started,
            finished: t.finished,
            ftt_ms: t.ftt_ms,
        },
        components: d
            .components
            .iter()
            .map(|c| ComponentView {
                site: c.site.clone(),
                processors: c.processors as u32,
            })
            .collect(),
    }
}

/// The last [`TAIL_BYTES`] of a file the server wrote (opened without following links).
pub fn tail(path: &str) -> Option<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let len = f.metadata().ok()?.len();
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let from = len.saturating_sub(TAIL_BYTES);
    f.seek(SeekFrom::Start(from)).ok()?;
    let mut buf = Vec::with_capacity((len - from) as usize);
    f.take(TAIL_BYTES).read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    Some(if from > 0 {
        format!("… ({from} bytes before)\n{text}")
    } else {
        text
    })
}

fn head(p: &JobPage, v: &Viewer) -> Markup {
    let d = &p.detail;
    let open = !koalesce_api::dto::is_final_state(&d.state);
    html! {
        div id="job-head" class="job-head" {
            h1 { "Job " (d.id) @if !d.name.is_empty() { " · " (d.name) } " " (ui::state_badge(&d.state)) }
            p.muted { "by " (d.user) ", priority " (d.priority) ", submitted " (ui::instant(d.submitted_ms)) }
            @if open {
                form method="post" action={ "/jobs/" (d.id) "/cancel" } data-confirm={ "Cancel job " (d.id) "?" } id="cancel-form" {
                    input type="hidden" name="csrf" value=(v.csrf);
                    button.danger type="submit" id="cancel" { "Cancel job" }
                }
            }
        }
    }
}

fn timeline(p: &JobPage) -> Markup {
    let view = job_view(&p.detail);
    let t = &p.detail.timeline;
    let mut facts: Vec<(&str, Markup)> = view.figures().into_iter().map(|(k, v)| (k, html! { (v) })).collect();
    for (k, at) in [
        ("placed (JPT)", t.placed),
        ("claimed (JCT)", t.claimed),
        ("started", t.started),
        ("finished", t.finished),
    ] {
        if let Some(ms) = at {
            facts.push((k, ui::instant(ms)));
        }
    }
    html! {
        section id="job-timeline" {
            (ui::chart(Some("job-gantt"), &views::job_gantt(&view, now_ms()), Some("One row per component and its site; queued, placed, staging, claimed, running.")))
            (ui::kv_table(&facts))
        }
    }
}

fn facts(p: &JobPage) -> Markup {
    let d = &p.detail;
    let mut comps = Table::new(vec![
        Column::num("component"),
        Column::num("processors"),
        Column::text("site"),
        Column::text("state"),
        Column::num("exit code"),
    ]);
    for c in &d.components {
        comps.row(vec![
            html! { (c.index) },
            html! { (c.processors) },
            html! { (c.site.as_deref().unwrap_or("—")) },
            html! { (c.state) },
            html! { @if let Some(x) = c.exit_code { (x) } @else { "—" } },
        ]);
    }
    let mut tries: Vec<(&str, Markup)> = vec![
        ("placement tries", html! { (d.placement_tries) }),
        ("claiming tries", html! { (d.claiming_tries) }),
    ];
    if let Some(n) = p.error_resubmissions {
        tries.push(("returns after site errors", html! { (n) }));
    }
    if let Some(why) = &p.waiting {
        tries.push(("why it waits now", html! { (why) }));
    }
    if let Some(f) = &d.failure {
        tries.push(("failure or last fault", html! { (f) }));
    }
    let mut files = Table::new(vec![
        Column::text("input"),
        Column::text("staged from"),
        Column::text("to"),
        Column::num("bytes"),
        Column::num("estimated transfer"),
    ]);
    for f in &p.inputs {
        let staged: Vec<&Staged> = p.staged.iter().filter(|s| &s.file == f).collect();
        if staged.is_empty() {
            let why = if koalesce_api::dto::is_final_state(&d.state) {
                "not recorded (the core keeps sources while the job is live)"
            } else {
                "not staged yet"
            };
            files.row(vec![html! { (f) }, html! { span.muted { (why) } }]);
        }
        for s in staged {
            files.row(vec![
                html! { (f) },
                html! { (s.from) },
                html! { (s.to) },
                html! { (s.bytes) },
                html! { (fmt_duration(s.estimated_ms)) },
            ]);
        }
    }
    html! {
        section id="job-facts" {
            h2 { "Tries" }
            (ui::kv_table(&tries))
            h2 { "Components" }
            (comps.render())
            h2 { "Files" }
            @if p.inputs.is_empty() { p.muted { "No input files." } } @else { (files.render()) }
            @if !d.outputs.is_empty() {
                p { "Outputs registered: " @for (i, o) in d.outputs.iter().enumerate() { @if i > 0 { ", " } code { (o) } } }
            }
        }
    }
}

fn output(p: &JobPage) -> Markup {
    html! {
        section id="job-output" {
            h2 { "Output (last " (TAIL_BYTES / 1024) " KiB)" }
            @for c in &p.detail.components {
                @for (label, path) in [("stdout", &c.stdout), ("stderr", &c.stderr)] {
                    @if let Some(text) = path.as_deref().and_then(tail) {
                        h3 { "component " (c.index) " " (label) }
                        pre.log id={ "c" (c.index) "-" (label) } { (text) }
                    }
                }
            }
        }
    }
}

/// The live parts of the page.
pub fn parts(w: &Web, v: &Viewer, id: u64) -> Vec<(String, String)> {
    match load(w, v, id) {
        Some(p) => vec![
            ("job-head".into(), head(&p, v).into_string()),
            ("job-timeline".into(), timeline(&p).into_string()),
            ("job-facts".into(), facts(&p).into_string()),
            ("job-output".into(), output(&p).into_string()),
        ],
        None => Vec::new(),
    }
}

/// The whole page, `None` when `v` may not see job `id` (or it does not exist).
pub fn render(w: &Web, v: &Viewer, id: u64) -> Option<String> {
    let p = load(w, v, id)?;
    let title = format!("Job {id}");
    let body = html! {
        (ui::live_region(&format!("/events/jobs/{id}"), html! {
            (head(&p, v)) (timeline(&p)) (facts(&p)) (output(&p))
        }))
    };
    Some(super::page(&title, Nav::Jobs, v, body))
}

fn not_found(v: &Viewer, raw: &str) -> Response {
    super::error_page(StatusCode::NOT_FOUND, Some(v), &format!("job {raw} not found"))
}

/// `GET /jobs/{id}`.
pub async fn page(AxState(w): WebState, headers: HeaderMap, Path(raw): Path<String>) -> Response {
    let v = match require(&w, &headers, Some(&format!("/jobs/{}", session::url_encode(&raw)))).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Ok(id) = raw.parse::<u64>() else { return not_found(&v, &raw) };
    let v2 = v.clone();
    match super::blocking(move || render(&w, &v2, id)).await {
        Ok(Some(body)) => super::html_response(StatusCode::OK, body),
        Ok(None) => not_found(&v, &raw),
        Err(r) => r,
    }
}

/// `GET /events/jobs/{id}`.
pub async fn events(AxState(w): WebState, headers: HeaderMap, Path(raw): Path<String>) -> Response {
    if let Err(r) = require(&w, &headers, None).await {
        return r;
    }
    let Ok(id) = raw.parse::<u64>() else {
        return super::error_page(StatusCode::NOT_FOUND, None, "no such job");
    };
    live::stream(w, &headers, Arc::new(move |w: &Web, v: &Viewer| parts(w, v, id)))
}

/// `POST /jobs/{id}/cancel` (a form with the CSRF token): cancels the job as the API's cancel
/// does (same visibility; a job that ended cannot be cancelled) and shows its page again.
pub async fn cancel(AxState(w): WebState, headers: HeaderMap, Path(raw): Path<String>, body: axum::body::Body) -> Response {
    let v = match require(&w, &headers, Some("/jobs")).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let fields = match session::read_form(body).await {
        Ok(f) => f,
        Err(r) => return r,
    };
    if let Err(r) = session::check_post(&v, &headers, &fields) {
        return r;
    }
    let Ok(id) = raw.parse::<u64>() else { return not_found(&v, &raw) };
    let s = &w.shared;
    let outcome = {
        let mut guard = s.lock();
        let st = &mut *guard;
        let found = st
            .meta
            .get(&id)
            .map(|m| m.user.clone())
            .zip(st.core.job(JobId(id)).map(|j| j.state));
        match found {
            Some((user, _)) if !v.sees(&user) => Err(StatusCode::NOT_FOUND),
            Some((_, state)) if state.is_terminal() || !st.core.cancel(now_ms(), JobId(id)) => Err(StatusCode::CONFLICT),
            Some(_) => {
                daemon::process_actions(s, st);
                Ok(())
            }
            None => Err(StatusCode::NOT_FOUND),
        }
    };
    match outcome {
        Ok(()) => {
            s.wake.notify_one();
            super::secure(Redirect::to(&format!("/jobs/{id}")).into_response())
        }
        // Ended jobs the core let go are in the store: their page says how they ended.
        Err(StatusCode::NOT_FOUND) if load(&w, &v, id).is_some() => {
            super::error_page(StatusCode::CONFLICT, Some(&v), &format!("job {id} already finished"))
        }
        Err(StatusCode::CONFLICT) => super::error_page(StatusCode::CONFLICT, Some(&v), &format!("job {id} already finished")),
        Err(_) => not_found(&v, &raw),
    }
}
