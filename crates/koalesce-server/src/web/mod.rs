//! The dashboard (issue 15): server-rendered pages on the API's port, for people.
//!
//! - [`session`]: sign-in with a koalesce token kept in an `HttpOnly; SameSite=Strict` cookie
//!   (checked against the token table on every request, so revoking a token signs its pages
//!   out), CSRF tokens on every form, `Origin` checks on every post;
//! - [`overview`]: sites' processors, utilization over the last hour, the four placement
//!   queues, throughput, the bandwidth forecast (its time series from [`history`]);
//! - [`jobs`]: the jobs table with filters and pagination (live jobs from the core, ended jobs
//!   from the store through [`query`]);
//! - [`job`]: one job's timeline, figures, tries, files, output tails and cancel button;
//! - `live`: server-sent events that keep each page current.
//!
//! Visibility is the API's: a user sees their own jobs, an admin everyone's; another user's
//! job answers exactly like a missing one. Pages are HTML rendered with maud
//! ([`koalesce_web::html`]), charts are [`koalesce_web::views`]; the stylesheet, the script and
//! the icon are embedded ([`koalesce_web::assets`]): nothing is fetched from elsewhere.

// Handlers answer early with a finished page (a redirect, a 403, a 404) through `Result<_,
// Response>`; those are rare paths of a page request, where boxing saves nothing that matters.
#![allow(clippy::result_large_err)]

pub mod bench;
pub mod history;
pub mod job;
pub mod jobs;
mod live;
pub mod overview;
pub mod query;
pub mod session;

use std::sync::{Arc, Mutex};

use axum::extract::{Path, State as AxState};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use koalesce_web::assets;
use koalesce_web::html::{self, NavItem};
use maud::Markup;

use crate::daemon::Shared;
pub use session::Viewer;

/// What the dashboard's handlers share: the daemon's state and the sampled history.
pub struct Web {
    pub shared: Arc<Shared>,
    pub history: Arc<Mutex<history::History>>,
}

impl Web {
    pub fn new(shared: Arc<Shared>) -> Arc<Web> {
        Arc::new(Web {
            shared,
            history: Arc::new(Mutex::new(history::History::default())),
        })
    }

    pub(crate) fn history(&self) -> std::sync::MutexGuard<'_, history::History> {
        self.history.lock().unwrap_or_else(|p| p.into_inner())
    }
}

type W = Arc<Web>;

/// The dashboard's routes (merged into the API's router) and its history sampler.
pub fn router(shared: Arc<Shared>) -> Router {
    let web = Web::new(shared);
    history::spawn_sampler(&web);
    Router::new()
        .route("/", get(overview::page))
        .route("/events/overview", get(overview::events))
        .route("/signin", get(session::signin_form).post(session::signin))
        .route("/signout", post(session::signout))
        .route("/jobs", get(jobs::page))
        .route("/events/jobs", get(jobs::events))
        .route("/jobs/{id}", get(job::page))
        .route("/events/jobs/{id}", get(job::events))
        .route("/jobs/{id}/cancel", post(job::cancel))
        .route("/static/{name}", get(asset))
        .route("/favicon.ico", get(|| async { Redirect::permanent(&assets::ICON.url()) }))
        .with_state(web)
}

/// Prepares the database for the dashboard's queries (idempotent; at startup, before serving).
pub fn prepare(store: &crate::store::Store) -> Result<(), crate::store::StoreError> {
    store.write_blocking(Box::new(|tx| tx.execute_batch(query::INDEX)))
}

async fn asset(Path(name): Path<String>) -> Response {
    match assets::get(&format!("{}{name}", assets::PREFIX)) {
        Some(a) => (
            [
                (header::CONTENT_TYPE, a.content_type),
                (header::CACHE_CONTROL, "public, max-age=31536000, immutable"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            a.body,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}

/// The headers every dashboard page carries: a content security policy that allows only the
/// embedded script and stylesheet (styles inline for the charts' attributes), no framing, no
/// caching of pages with data, no referrer outside the site.
pub(crate) fn secure(mut r: Response) -> Response {
    let h = r.headers_mut();
    let set = |h: &mut HeaderMap, k: header::HeaderName, v: &'static str| {
        h.insert(k, HeaderValue::from_static(v));
    };
    set(
        h,
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
         connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    );
    set(h, header::X_FRAME_OPTIONS, "DENY");
    set(h, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(h, header::REFERRER_POLICY, "same-origin");
    set(h, header::CACHE_CONTROL, "no-store");
    r
}

/// An HTML answer with [`secure`] headers.
pub(crate) fn html_response(status: StatusCode, body: String) -> Response {
    secure((status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response())
}

/// Which page of the navigation is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Overview,
    Jobs,
}

/// A dashboard page for a signed-in viewer.
pub(crate) fn page(title: &str, nav: Nav, v: &Viewer, body: Markup) -> String {
    let items = [
        NavItem {
            href: "/",
            label: "Overview",
            active: nav == Nav::Overview,
        },
        NavItem {
            href: "/jobs",
            label: "Jobs",
            active: nav == Nav::Jobs,
        },
    ];
    let who = if v.admin { format!("{} (admin)", v.user) } else { v.user.clone() };
    html::app_page(title, &items, Some((&who, "/signout", &v.csrf)), body).into_string()
}

/// An error page (signed in or not) with `status`.
pub(crate) fn error_page(status: StatusCode, v: Option<&Viewer>, msg: &str) -> Response {
    let body = maud::html! { h1 { (status.canonical_reason().unwrap_or("Error")) } (html::notice(msg, true)) };
    let text = match v {
        Some(v) => page("Error", Nav::Overview, v, body),
        None => html::app_page("Error", &[], None, body).into_string(),
    };
    html_response(status, text)
}

/// Runs a blocking render off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Response> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| error_page(StatusCode::INTERNAL_SERVER_ERROR, None, &format!("rendering failed: {e}")))
}

/// The signed-in viewer, or the answer to send instead: a page request goes to the sign-in
/// form (and comes back after), anything else is 401.
pub(crate) async fn require(w: &W, headers: &HeaderMap, back_to: Option<&str>) -> Result<Viewer, Response> {
    match session::viewer(&w.shared, headers) {
        Some(v) => Ok(v),
        None => Err(match back_to {
            Some(path) => secure(Redirect::to(&format!("/signin?next={}", session::url_encode(path))).into_response()),
            None => secure((StatusCode::UNAUTHORIZED, "sign in first").into_response()),
        }),
    }
}

// Keeps the handler type aliases in one place.
pub(crate) type WebState = AxState<W>;
