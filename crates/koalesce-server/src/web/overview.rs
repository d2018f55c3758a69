//! The overview (`GET /`): sites' processors, utilization over the last hour, the four
//! placement queues with their lengths and heads, throughput, the bandwidth forecast.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use koalesce_core::{JobId, Priority, SiteId};
use koalesce_web::chart;
use koalesce_web::html::{self as ui, Column, Table};
use koalesce_web::views::{self, SiteProcessors, QUEUES};
use maud::{html, Markup, Render};

use super::history::{self, Sample};
use super::{live, query, require, Nav, Viewer, Web, WebState};
use crate::now_ms;

/// Jobs shown at the head of each queue.
pub const HEADS: usize = 5;

/// The overview's live parts: `(id, HTML)`.
pub fn parts(w: &Web, v: &Viewer) -> Vec<(String, String)> {
    let s = &w.shared;
    let now = now_ms();
    let current = history::sample(s, now);
    let mut samples: Vec<Sample> = w.history().samples.iter().cloned().collect();
    samples.push(current.clone());
    let counts = query::state_counts(s, v).unwrap_or_default();
    vec![
        ("overview-stats".into(), stats(&counts, &current).into_string()),
        ("overview-sites".into(), sites(w, &current).into_string()),
        ("overview-queues".into(), queues(w, v).into_string()),
        ("overview-time".into(), over_time(&samples).into_string()),
        ("overview-bandwidth".into(), bandwidth(w).into_string()),
    ]
}

fn stats(counts: &[(&str, u64)], now: &Sample) -> Markup {
    let get = |k: &str| counts.iter().find(|(s, _)| *s == k).map_or(0, |x| x.1);
    let total: u32 = now.sites.iter().map(|s| s.total).sum();
    let busy: u32 = now.sites.iter().map(|s| s.running + s.waiting).sum();
    let queued: u32 = now.queues.iter().sum();
    html! {
        div id="overview-stats" {
            (ui::stats(&[
                ("queued", queued.to_string()),
                ("placed or claimed", (get("placed") + get("claimed")).to_string()),
                ("running", get("running").to_string()),
                ("succeeded", get("succeeded").to_string()),
                ("failed", get("failed").to_string()),
                ("cancelled", get("cancelled").to_string()),
                ("processors held by koalesce", format!("{busy} of {total}")),
            ]))
        }
    }
}

fn sites(w: &Web, now: &Sample) -> Markup {
    let s = &w.shared;
    let names: Vec<String> = s.sites.iter().map(|h| h.name.clone()).collect();
    let bars: Vec<SiteProcessors> = names
        .iter()
        .zip(&now.sites)
        .map(|(n, x)| SiteProcessors {
            name: n.clone(),
            used: x.background as u64,
            claimed: (x.running + x.waiting) as u64,
            idle: x.idle as u64,
            blacklisted: x.blacklisted,
        })
        .collect();
    let mut t = Table::new(vec![
        Column::text("site"),
        Column::text("kind"),
        Column::num("processors"),
        Column::num("idle"),
        Column::num("used by local jobs"),
        Column::num("claimed by koalesce"),
        Column::num("placed, not claimed"),
        Column::text("status"),
    ]);
    for (i, (n, x)) in names.iter().zip(&now.sites).enumerate() {
        t.row(vec![
            html! { (n) },
            html! { (s.site(SiteId(i as u32)).backend.kind()) },
            html! { (x.total) },
            html! { (x.idle) },
            html! { (x.background) },
            html! { (x.running + x.waiting) },
            html! { (x.placed) },
            html! { @if x.blacklisted { span.badge.state-failed { "blacklisted" } } @else { span.badge.state-succeeded { "in use" } } },
        ]);
    }
    html! {
        section id="overview-sites" {
            h2 { "Sites" }
            (ui::chart(Some("site-processors"), &views::site_processors("Processors per site", &bars), None))
            (t.render())
        }
    }
}

fn queues(w: &Web, v: &Viewer) -> Markup {
    let st = w.shared.lock();
    let mut t = Table::new(vec![
        Column::text("queue"),
        Column::num("jobs"),
        Column::text("head (next to be tried)"),
    ]);
    for (p, name) in Priority::ALL.into_iter().zip(QUEUES) {
        let heads: Vec<Markup> = st
            .core
            .queued(p)
            .take(HEADS)
            .map(|id| {
                let owner = st.meta.get(&id.0).map(|m| m.user.as_str()).unwrap_or("");
                let name = st.core.job(JobId(id.0)).map(|j| j.spec.name.as_str()).unwrap_or("");
                if v.sees(owner) {
                    html! { a href={ "/jobs/" (id.0) } { (id.0) @if !name.is_empty() { " " (name) } } }
                } else {
                    html! { span.muted { "another user's job" } }
                }
            })
            .collect();
        t.row(vec![
            html! { (name) },
            html! { (st.core.queued(p).count()) },
            html! { @for (i, h) in heads.iter().enumerate() { @if i > 0 { ", " } (h) } @if heads.is_empty() { span.muted { "empty" } } },
        ]);
    }
    html! { section id="overview-queues" { h2 { "Placement queues" } (t.render()) } }
}

/// Utilization, queue lengths and throughput over the samples (x: minutes since the first).
fn over_time(samples: &[Sample]) -> Markup {
    let enough = samples.len() >= 2 && samples.last().map(|l| l.at_ms) > samples.first().map(|f| f.at_ms);
    if !enough {
        return html! { section id="overview-time" { h2 { "The last hour" } (ui::notice("Collecting samples (one every 10 s).", false)) } };
    }
    let t0 = samples[0].at_ms;
    let minutes: Vec<f64> = samples.iter().map(|x| (x.at_ms - t0) as f64 / 60_000.0).collect();
    let pct = |f: &dyn Fn(&history::SiteSample) -> u32| -> Vec<f64> {
        samples
            .iter()
            .map(|x| {
                let total: u32 = x.sites.iter().map(|s| s.total).sum();
                let part: u32 = x.sites.iter().map(f).sum();
                if total == 0 {
                    0.0
                } else {
                    100.0 * part as f64 / total as f64
                }
            })
            .collect()
    };
    let util = views::utilization(
        "Utilization (% of all processors)",
        &minutes,
        &pct(&|s| s.background),
        &pct(&|s| s.running),
        &pct(&|s| s.waiting),
        &pct(&|s| s.placed),
    );
    let q: [Vec<f64>; 4] = std::array::from_fn(|i| samples.iter().map(|x| x.queues[i] as f64).collect());
    let queue_chart = views::queue_lengths("Jobs waiting in the placement queues", &minutes, &q);
    let rate = |f: &dyn Fn(&Sample) -> u64| -> Vec<(f64, f64)> {
        samples
            .windows(2)
            .zip(&minutes[1..])
            .map(|(p, &m)| {
                let dt = (p[1].at_ms - p[0].at_ms).max(1) as f64 / 60_000.0;
                (m, f(&p[1]).saturating_sub(f(&p[0])) as f64 / dt)
            })
            .collect()
    };
    // Rates between samples mean something once a minute of them exists.
    let through = (samples[samples.len() - 1].at_ms - t0 >= 60_000).then(|| {
        chart::line_svg(
            "Throughput",
            "time (min)",
            "jobs per minute",
            &[
                ("submitted".to_string(), rate(&|x| x.submitted)),
                ("finished".to_string(), rate(&|x| x.finished)),
            ],
        )
    });
    let (first, last) = (&samples[0], &samples[samples.len() - 1]);
    let span = format!("over the last {}", chart::fmt_duration(last.at_ms - first.at_ms));
    html! {
        section id="overview-time" {
            h2 { "The last hour" }
            (ui::stats(&[
                ("submitted", (last.submitted - first.submitted.min(last.submitted)).to_string()),
                ("finished", (last.finished - first.finished.min(last.finished)).to_string()),
                ("", span.clone()),
            ]))
            div.charts {
                (ui::chart(Some("utilization"), &util, Some("Local jobs, koalesce's running components, claimed components waiting to start (PWT), placed processors not yet claimed (PGT).")))
                (ui::chart(Some("queues"), &queue_chart, None))
            }
            @if let Some(t) = &through {
                (ui::chart(Some("throughput"), t, Some("Jobs submitted and finished per minute, between samples.")))
            }
        }
    }
}

fn bandwidth(w: &Web) -> Markup {
    let st = w.shared.lock();
    let names: Vec<String> = st.core.sites().iter().map(|s| s.name.clone()).collect();
    let f = st.core.forecast();
    let n = names.len().min(f.sites());
    let mbps: Vec<Vec<Option<f64>>> = (0..n)
        .map(|i| {
            (0..n)
                .map(|j| {
                    let (bps, _) = f.get(SiteId(i as u32), SiteId(j as u32));
                    (i != j && bps.is_finite() && bps > 0.0).then_some(bps / 1e6)
                })
                .collect()
        })
        .collect();
    html! {
        section id="overview-bandwidth" {
            h2 { "Network forecast" }
            (ui::chart(Some("bandwidth"), &views::bandwidth("Forecast bandwidth between sites (from → to)", &names[..n], &mbps), None))
        }
    }
}

/// The whole page.
pub fn render(w: &Web, v: &Viewer) -> String {
    let parts = parts(w, v);
    let body = html! {
        h1 { "Overview" }
        (ui::live_region("/events/overview", html! {
            @for (_, h) in &parts { (maud::PreEscaped(h)) }
        }))
    };
    super::page("Overview", Nav::Overview, v, body)
}

/// `GET /`.
pub async fn page(axum::extract::State(w): WebState, headers: HeaderMap) -> Response {
    let v = match require(&w, &headers, Some("/")).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    match super::blocking(move || render(&w, &v)).await {
        Ok(body) => super::html_response(StatusCode::OK, body),
        Err(r) => r,
    }
}

/// `GET /events/overview`.
pub async fn events(axum::extract::State(w): WebState, headers: HeaderMap) -> Response {
    if let Err(r) = require(&w, &headers, None).await {
        return r;
    }
    live::stream(w, &headers, Arc::new(parts))
}
