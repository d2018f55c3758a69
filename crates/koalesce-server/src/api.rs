//! The REST API of docs/server-contract.md (v1).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State as AxState};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use koalesce_core::JobId;
use serde::Deserialize;
use serde_json::json;

use koalesce_api::dto::{JobDetail, JobSummary, SiteInfo, Submitted};

use crate::daemon::records::{self, CoreSnapshot, JobMeta};
use crate::daemon::{self, Shared};
use crate::jobdesc::{DescriptionError, JobDescription};
use crate::{api_files, now_ms, store};

pub(crate) type S = Arc<Shared>;

/// An error answer: status and `{"error": message}`.
#[derive(Debug)]
pub struct ApiError(pub StatusCode, pub String);

/// Longest error message sent back (characters); longer ones keep their head and tail.
pub const MAX_ERROR_CHARS: usize = 1000;

/// Cuts a message to [`MAX_ERROR_CHARS`] with an ellipsis in the middle (a TOML error quotes
/// the offending line, which may be 400 KB; its reason comes last, so the tail is kept).
pub fn cut_message(msg: &str) -> String {
    let n = msg.chars().count();
    if n <= MAX_ERROR_CHARS {
        return msg.to_string();
    }
    let head: String = msg.chars().take(MAX_ERROR_CHARS * 3 / 5).collect();
    let tail: String = msg.chars().skip(n - MAX_ERROR_CHARS * 2 / 5).collect();
    format!(
        "{head} … ({} characters cut) … {tail}",
        n - head.chars().count() - tail.chars().count()
    )
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": cut_message(&self.1) }))).into_response()
    }
}

pub(crate) fn err(code: StatusCode, msg: impl Into<String>) -> ApiError {
    ApiError(code, msg.into())
}

pub(crate) type R<T> = Result<T, ApiError>;

#[derive(Clone)]
pub struct Caller {
    pub user: String,
    pub admin: bool,
}

pub(crate) fn authenticate(s: &Shared, headers: &HeaderMap) -> R<Caller> {
    let unauthorized = || {
        err(
            StatusCode::UNAUTHORIZED,
            "missing or invalid bearer token (header 'Authorization: Bearer <token>')",
        )
    };
    let value = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(unauthorized)?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .ok_or_else(unauthorized)?
        .trim();
    if token.is_empty() {
        return Err(unauthorized());
    }
    // Valid tokens are remembered; a revoked token is refused at once, even when it was revoked
    // with `koalesce token revoke --data-dir` while the server runs (see store::token_cache).
    let found = s
        .store
        .check_token(token, now_ms())
        .map_err(|e| err(StatusCode::INTERNAL_SERVER_ERROR, format!("token lookup failed: {e}")))?;
    match found {
        store::TokenCheck::Valid { user, admin } => Ok(Caller { user, admin }),
        store::TokenCheck::Expired => Err(err(StatusCode::UNAUTHORIZED, "bearer token expired")),
        store::TokenCheck::Unknown => Err(unauthorized()),
    }
}

pub(crate) async fn read_body(s: &Shared, req: Request) -> R<Bytes> {
    let limit = s.config.body_limit;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if let Some(len) = declared.filter(|&l| l > limit) {
        return Err(err(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body: {len} bytes is over the limit of {limit} bytes"),
        ));
    }
    let timeout = std::time::Duration::from_millis(s.config.body_timeout_ms);
    match tokio::time::timeout(timeout, axum::body::to_bytes(req.into_body(), limit)).await {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(e)) if is_length_limit(&e) => Err(err(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body: over the limit of {limit} bytes"),
        )),
        // The client closed the connection or broke the framing before the end.
        Ok(Err(e)) => Err(err(StatusCode::BAD_REQUEST, format!("request body: incomplete ({e})"))),
        Err(_) => Err(err(
            StatusCode::REQUEST_TIMEOUT,
            format!("request body: not received within {} ms", timeout.as_millis()),
        )),
    }
}

/// Whether a body error is the size limit (413) rather than a broken body (400).
fn is_length_limit(e: &axum::Error) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(x) = cur {
        if x.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cur = x.source();
    }
    false
}

pub fn router(shared: S) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(crate::metrics::metrics))
        .route("/api/v1/openapi.json", get(|| async { Json(crate::openapi::document()) }))
        .route("/api/v1/jobs", post(submit).get(crate::job_list::list_jobs))
        .route("/api/v1/jobs/{id}", get(get_job))
        .route("/api/v1/jobs/{id}/cancel", post(cancel_job))
        .route("/api/v1/jobs/{id}/logs", get(crate::api_output::job_logs))
        .route("/api/v1/jobs/{id}/hold", post(crate::api_jobctl::hold_job))
        .route("/api/v1/jobs/{id}/release", post(crate::api_jobctl::release_job))
        .route("/api/v1/sites", get(sites))
        .route("/api/v1/network", get(network))
        .route("/api/v1/sites/{name}/readmit", post(readmit_site))
        .route("/api/v1/files", get(api_files::list_files).post(api_files::add_file))
        .route(
            "/api/v1/files/{*name}",
            get(crate::api_output::get_file)
                .put(api_files::upload_file)
                .delete(api_files::delete_file),
        )
        .route("/api/v1/tokens", get(list_tokens))
        .route("/api/v1/tokens/{id}", axum::routing::delete(revoke_token))
        .route(
            "/api/v1/reservations",
            get(crate::reservations::list).post(crate::reservations::create),
        )
        .route(
            "/api/v1/reservations/{id}",
            get(crate::reservations::get_one)
                .put(crate::reservations::modify)
                .delete(crate::reservations::cancel),
        )
        .fallback(|| async { err(StatusCode::NOT_FOUND, "no such endpoint") })
        .method_not_allowed_fallback(|req: Request| async move {
            err(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("method {} is not allowed on {}", req.method(), req.uri().path()),
            )
        })
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(shared)
}

// ----- jobs ---------------------------------------------------------------------------

/// `POST /api/v1/jobs?hold=true&dependency=afterok:12`: the query's options of a submission.
#[derive(Deserialize, Default)]
struct SubmitQuery {
    hold: Option<bool>,
    dependency: Option<String>,
    /// A job array: `1-100`, `0-30:10`, `1,3,5`, with `%M` at most M active tasks.
    array: Option<String>,
    /// Run in this advance reservation of the caller's (as the job file's `reservation`).
    reservation: Option<String>,
    /// A bag of tasks: N tasks, at least `min_tasks` of which must succeed, with GridWay's
    /// `${PARAM}` = `param_start` + `param_increment` × task index (api_bags).
    tasks: Option<u32>,
    min_tasks: Option<u32>,
    param_start: Option<i64>,
    param_increment: Option<i64>,
}

async fn submit(AxState(s): AxState<S>, req: Request) -> R<Response> {
    let started = std::time::Instant::now();
    let caller = authenticate(&s, req.headers())?;
    let q: SubmitQuery = match req.uri().query() {
        Some(text) => Query::<SubmitQuery>::try_from_uri(req.uri())
            .map(|Query(q)| q)
            .map_err(|e| err(StatusCode::BAD_REQUEST, format!("query '{text}': {e}")))?,
        None => SubmitQuery::default(),
    };
    let extra = koalesce_api::jobdesc::parse_dependency_list(q.dependency.as_deref().unwrap_or(""))
        .map_err(|e| err(StatusCode::UNPROCESSABLE_ENTITY, format!("parameter 'dependency': {e}")))?;
    let body = read_body(&s, req).await?;
    let text = std::str::from_utf8(&body).map_err(|_| err(StatusCode::BAD_REQUEST, "body: not UTF-8 text"))?;
    let answer = submit_query(&s, &caller, &q, extra, text, started).await?;
    Ok((StatusCode::CREATED, Json(answer)).into_response())
}

/// Submits a job description for `user` (no query options); returns the job id once the job
/// is durable. The federation's way in: a grid job going into the local core, a job handed
/// over by a peer.
pub(crate) async fn submit_text(s: &S, user: &str, text: &str) -> R<u64> {
    let caller = Caller {
        user: user.to_string(),
        admin: false,
    };
    submit_query(s, &caller, &SubmitQuery::default(), Vec::new(), text, std::time::Instant::now())
        .await
        .map(|a| a.id)
}

/// A submission with its query's options and `extra` dependencies; the answer once durable.
/// `started`: when its request was taken up (for [`daemon::Latency`]).
async fn submit_query(
    s: &S,
    caller: &Caller,
    q: &SubmitQuery,
    extra: Vec<koalesce_core::scheduler::Dependency>,
    text: &str,
    started: std::time::Instant,
) -> R<Submitted> {
    let desc = JobDescription::parse(text).map_err(|e| match e {
        DescriptionError::Malformed(m) => err(StatusCode::BAD_REQUEST, format!("malformed TOML: {m}")),
        DescriptionError::Invalid(m) => err(StatusCode::UNPROCESSABLE_ENTITY, m),
    })?;
    let named = match (&desc.reservation, &q.reservation) {
        (Some(a), Some(b)) if a != b => {
            return Err(err(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("field 'reservation' ('{a}') and parameter 'reservation' ('{b}') differ"),
            ))
        }
        (a, b) => a.as_ref().or(b.as_ref()),
    };
    let held = match named {
        Some(raw) => Some(crate::reservations::held_by(
            s,
            caller,
            raw,
            q.array.is_some() || q.tasks.is_some(),
        )?),
        None => None,
    };
    let mut deps = desc.dependencies();
    deps.extend(extra);
    deps.sort();
    deps.dedup();
    let stored = if deps.is_empty() {
        Default::default()
    } else {
        let d = deps.clone();
        read_store(s, move |c| crate::api_jobctl::stored_jobs(c, &d)).await?
    };
    let mut array = match q.array.as_deref() {
        Some(a) => Some(
            koalesce_api::jobdesc::parse_array(a).map_err(|e| err(StatusCode::UNPROCESSABLE_ENTITY, format!("parameter 'array': {e}")))?,
        ),
        None => None,
    };
    let bag_query = crate::api_bags::BagQuery {
        tasks: q.tasks,
        min_tasks: q.min_tasks,
        param_start: q.param_start,
        param_increment: q.param_increment,
    };
    let bag = match bag_query
        .bag(array.is_some())
        .map_err(|e| err(StatusCode::UNPROCESSABLE_ENTITY, e))?
    {
        Some((tasks, bag)) => {
            array = Some(tasks);
            Some(bag)
        }
        None => None,
    };
    let tasks: Vec<Option<u64>> = match &array {
        Some(a) => a.tasks.iter().map(|&t| Some(t)).collect(),
        None => vec![None],
    };
    // Each task's description, its task variables substituted; ids are consecutive from
    // `first` (the array's / bag's id), allocated under the lock below.
    let task_metas = |first: u64| -> Vec<Option<records::ArrayTaskMeta>> {
        tasks
            .iter()
            .map(|task| {
                task.map(|task_id| records::ArrayTaskMeta {
                    array_id: first,
                    task_id,
                    count: tasks.len() as u64,
                    bag,
                })
            })
            .collect()
    };
    let mut ids: Vec<u64> = Vec::with_capacity(tasks.len());
    let mut receivers = Vec::with_capacity(tasks.len());
    let lock_wait;
    {
        let asked = std::time::Instant::now();
        let mut guard = s.lock();
        lock_wait = asked.elapsed();
        let st = &mut *guard;
        let held = match held {
            Some((site, h)) => {
                let site = st.site_id(&site).ok_or_else(|| {
                    err(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        format!("field 'reservation': its site '{site}' is no longer configured"),
                    )
                })?;
                Some(koalesce_core::model::HeldReservation { site, ..h })
            }
            None => None,
        };
        let first = st.next_id;
        let metas = task_metas(first);
        let descs = match metas.as_slice() {
            // One job: its description as parsed (moved, not copied under the lock).
            [None] => vec![desc],
            _ => crate::api_bags::task_descriptions(&desc, &metas)?,
        };
        let mut specs = Vec::with_capacity(descs.len());
        for d in &descs {
            let mut spec = d
                .to_spec(|n| st.site_id(n))
                .map_err(|e| err(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()))?;
            // GridWay's share policy balances dispatches between owners.
            spec.owner = Some(caller.user.clone());
            spec.preferences.held_reservation = held.clone();
            specs.push(spec);
        }
        let gate = crate::api_jobctl::gate(st, &stored, &caller.user, caller.admin, &deps, q.hold.unwrap_or(false))
            .map_err(|e| err(StatusCode::UNPROCESSABLE_ENTITY, e))?;
        // An array's tasks have consecutive ids (allocated under this one lock); with `%M`,
        // task k waits for the end of task k-M, so at most M are active at once.
        s.config
            .quotas
            .check_submit(st, &caller.user, tasks.len() as u64)
            .map_err(|e| err(StatusCode::TOO_MANY_REQUESTS, e.to_string()))?;
        for (k, ((task_desc, spec), array_meta)) in descs.into_iter().zip(specs).zip(metas).enumerate() {
            let id = first + k as u64;
            let mut gate = gate.clone();
            let throttle = array.as_ref().and_then(|a| a.max_active).map(|m| m as usize).filter(|&m| k >= m);
            let mut job_deps = deps.clone();
            if let Some(m) = throttle {
                let d = koalesce_core::scheduler::Dependency::on(JobId(ids[k - m]), koalesce_core::scheduler::DependencyKind::AfterAny);
                gate.after.push(d);
                job_deps.push(d);
            }
            let spec_json = records::spec_json(&spec, &s.sites);
            let submitted = st.core.submit_gated(now_ms(), JobId(id), spec, gate);
            if let Err(e) = submitted {
                // Only the first task can be refused (they are alike): nothing to withdraw.
                return Err(err(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()));
            }
            st.next_id = id + 1;
            let mut meta = JobMeta::new(caller.user.clone(), task_desc);
            meta.dependencies = job_deps;
            meta.array = array_meta;
            meta.reservation = held.as_ref().map(|h| h.id.clone());
            let job = st
                .core
                .job(JobId(id))
                .ok_or_else(|| err(StatusCode::INTERNAL_SERVER_ERROR, "job vanished at submission"))?;
            let row = store::NewJob {
                id,
                user: caller.user.clone(),
                name: meta.desc.name.clone(),
                // A task's own description (its variables substituted) is what a restart reads.
                description: if meta.array.is_some() {
                    meta.desc.to_toml()
                } else {
                    text.to_string()
                },
                spec: spec_json,
                update: store::JobUpdate {
                    id,
                    state: job.state.name().to_string(),
                    core: records::json(&CoreSnapshot::of(job)),
                    meta: records::json(&meta.stored()),
                    // Live jobs are rendered from the core; the rendering is stored when they end.
                    detail: String::new(),
                },
                submitted_ms: job.timeline.submitted,
            };
            // Enqueued before any later write about this job (the writer keeps order; a new
            // job's row may go ahead of earlier writes about other jobs: see store).
            receivers.push(s.store.submit_first(store::insert_job_op(row)));
            st.meta.insert(id, meta);
            ids.push(id);
        }
        if let Some(a) = &array {
            crate::api_jobctl::declare_array(st, first, &ids, &a.tasks, bag.map(|b| b.needed));
        }
        daemon::process_actions(s, st);
    }
    s.metrics.submissions.fetch_add(ids.len() as u64, Ordering::Relaxed);
    let enqueued = std::time::Instant::now();
    let mut failure = None;
    for rx in receivers {
        match rx.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failure = Some(e.reason),
            Err(_) => failure = Some("database writer stopped".into()),
        }
    }
    match failure {
        None => {
            let us = |d: std::time::Duration| d.as_micros() as u64;
            s.metrics
                .latency
                .acknowledged(us(started.elapsed()), us(lock_wait), us(enqueued.elapsed()));
            s.wake.notify_one();
            Ok(Submitted {
                id: ids[0],
                ids: if array.is_some() { ids } else { Vec::new() },
            })
        }
        Some(msg) => {
            // Not durable: withdraw them.
            let mut guard = s.lock();
            let st = &mut *guard;
            for id in ids {
                st.core.cancel(now_ms(), JobId(id));
                st.core.forget(JobId(id));
                st.meta.remove(&id);
            }
            daemon::process_actions(s, st);
            Err(err(StatusCode::INTERNAL_SERVER_ERROR, format!("job not stored: {msg}")))
        }
    }
}

/// Renders the jobs the core holds (live ones, and ended ones not yet forgotten).
pub(crate) fn live_details(s: &Shared, filter: impl Fn(u64, &JobMeta) -> bool) -> Vec<JobDetail> {
    let st = s.lock();
    st.meta
        .iter()
        .filter(|(id, m)| filter(**id, m))
        .filter_map(|(id, m)| Some(records::render(*id, st.core.job(JobId(*id))?, m, &s.sites)))
        .collect()
}

/// Reads from the store on the blocking pool.
pub(crate) async fn read_store<T: Send + 'static>(
    s: &S,
    f: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<T> + Send + 'static,
) -> R<T> {
    let store = s.store.clone();
    tokio::task::spawn_blocking(move || store.read(f))
        .await
        .map_err(|e| err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

fn parse_id(raw: &str) -> R<u64> {
    raw.parse()
        .map_err(|_| err(StatusCode::NOT_FOUND, format!("job '{raw}' not found")))
}

/// A job as the caller may see it: from the core, else from the store; 404 for another
/// user's job (so ids do not leak).
pub(crate) async fn find_job(s: &S, caller: &Caller, id: u64) -> R<JobDetail> {
    let not_found = || err(StatusCode::NOT_FOUND, format!("job {id} not found"));
    if let Some(d) = live_details(s, |j, _| j == id).pop() {
        return if caller.admin || d.user == caller.user {
            Ok(d)
        } else {
            Err(not_found())
        };
    }
    match read_store(s, move |c| store::load_detail(c, id)).await? {
        Some((user, _, detail)) if caller.admin || user == caller.user => {
            serde_json::from_str(&detail).map_err(|e| err(StatusCode::INTERNAL_SERVER_ERROR, format!("job {id}: stored rendering: {e}")))
        }
        _ => Err(not_found()),
    }
}

/// A job's detail whoever owns it (the federation shows where a grid job runs).
pub(crate) async fn job_detail(s: &S, id: u64) -> R<JobDetail> {
    let admin = Caller {
        user: String::new(),
        admin: true,
    };
    find_job(s, &admin, id).await
}

async fn get_job(AxState(s): AxState<S>, headers: HeaderMap, Path(raw): Path<String>) -> R<Json<JobDetail>> {
    let caller = authenticate(&s, &headers)?;
    let id = parse_id(&raw)?;
    let mut d = find_job(&s, &caller, id).await?;
    crate::api_bags::fill_detail(&s, &mut d).await?;
    Ok(Json(d))
}

async fn cancel_job(AxState(s): AxState<S>, headers: HeaderMap, Path(raw): Path<String>) -> R<Json<JobSummary>> {
    let caller = authenticate(&s, &headers)?;
    let id = parse_id(&raw)?;
    cancel_for(&s, &caller, id).await
}

/// Cancels job (or bag) `id` for `caller`: 404 for another user's, 409 once it ended.
pub(crate) async fn cancel_for(s: &S, caller: &Caller, id: u64) -> R<Json<JobSummary>> {
    let (s, caller) = (s.clone(), caller.clone());
    // A bag's id cancels the whole bag.
    let bag = {
        let mut guard = s.lock();
        crate::api_bags::cancel(&s, &mut guard, &caller, id)
    };
    if let Some(r) = bag {
        r?;
        let mut d = find_job(&s, &caller, id).await?;
        crate::api_bags::fill_detail(&s, &mut d).await?;
        return Ok(Json(d.summary()));
    }
    let cancelled = {
        let mut guard = s.lock();
        let st = &mut *guard;
        let found = st
            .meta
            .get(&id)
            .map(|m| m.user.clone())
            .zip(st.core.job(JobId(id)).map(|j| j.state));
        match found {
            // Another user's job answers exactly like a missing one (as GET does): ids do
            // not leak.
            Some((user, _)) if !caller.admin && user != caller.user => {
                return Err(err(StatusCode::NOT_FOUND, format!("job {id} not found")));
            }
            Some((_, state)) => {
                if state.is_terminal() || !st.core.cancel(now_ms(), JobId(id)) {
                    return Err(err(StatusCode::CONFLICT, format!("job {id} already finished ({})", state.name())));
                }
                // Rendered before the actions run: an ended job may be let go right after.
                let d = st
                    .core
                    .job(JobId(id))
                    .zip(st.meta.get(&id))
                    .map(|(j, m)| records::render(id, j, m, &s.sites));
                daemon::process_actions(&s, st);
                d
            }
            None => None,
        }
    };
    if let Some(d) = cancelled {
        return Ok(Json(d.summary()));
    }
    // Not in the core: ended (or unknown).
    match read_store(&s, move |c| store::load_detail(c, id)).await? {
        Some((user, _, _)) if !caller.admin && user != caller.user => Err(err(StatusCode::NOT_FOUND, format!("job {id} not found"))),
        Some((_, state, _)) => Err(err(StatusCode::CONFLICT, format!("job {id} already finished ({state})"))),
        None => Err(err(StatusCode::NOT_FOUND, format!("job {id} not found"))),
    }
}

// ----- sites and files ----------------------------------------------------------------

fn site_info(s: &Shared, st: &daemon::State, i: usize) -> SiteInfo {
    let site = &st.core.sites()[i];
    let sid = koalesce_core::SiteId(i as u32);
    let view = st.core.site_view(sid);
    let now = now_ms();
    let h = &s.sites[i];
    SiteInfo {
        name: site.name.clone(),
        kind: h.backend.kind().to_string(),
        processors: site.processors as u64,
        idle: h.idle.load(Ordering::Relaxed) as u64,
        used: h.used.load(Ordering::Relaxed) as u64,
        placed_unclaimed: view.placed_unclaimed as u64,
        blacklisted: view.blacklisted,
        blacklisted_until_ms: view.blacklisted_until,
        supports_reservations: site.supports_reservations,
        banned_until_ms: st.core.is_banned(sid, now).then(|| st.core.ban(sid).until),
        failure_streak: st.core.ban(sid).failures,
        host: crate::gridway::sites::host_variables(site, view.idle),
        software: site.attributes.software.clone(),
        features: site.attributes.features.clone(),
        queue_wait_ms: st.core.queue_wait_estimate(now, sid, 1),
        speed: site.speed,
        benchmarks: site.attributes.benchmarks.clone(),
    }
}

#[derive(Deserialize)]
struct SitesQuery {
    blacklisted: Option<bool>,
}

/// `GET /api/v1/network`: bandwidth and latency between every ordered pair of sites, as the
/// scheduler uses them and as measured and forecast (NWS).
async fn network(AxState(s): AxState<S>, headers: HeaderMap) -> R<Json<koalesce_api::dto::NetworkMatrix>> {
    authenticate(&s, &headers)?;
    let st = s.lock();
    Ok(Json(crate::daemon::network::matrix(&s, &st)))
}

/// `GET /api/v1/sites[?blacklisted=true]`.
async fn sites(
    AxState(s): AxState<S>,
    headers: HeaderMap,
    q: Result<Query<SitesQuery>, axum::extract::rejection::QueryRejection>,
) -> R<Json<Vec<SiteInfo>>> {
    authenticate(&s, &headers)?;
    let Query(q) = q.map_err(|e| err(StatusCode::BAD_REQUEST, format!("query: {e}")))?;
    let st = s.lock();
    let out = (0..st.core.sites().len())
        .map(|i| site_info(&s, &st, i))
        .filter(|i| q.blacklisted.is_none_or(|b| i.blacklisted == b))
        .collect();
    Ok(Json(out))
}

/// `POST /api/v1/sites/{name}/readmit` (admins): takes a site off the blacklist at once and
/// forgets its ban history.
async fn readmit_site(AxState(s): AxState<S>, headers: HeaderMap, Path(name): Path<String>) -> R<Json<SiteInfo>> {
    let caller = authenticate(&s, &headers)?;
    if !caller.admin {
        return Err(err(StatusCode::FORBIDDEN, "only an admin may re-admit a site"));
    }
    let mut guard = s.lock();
    let st = &mut *guard;
    let Some(id) = st.site_id(&name) else {
        return Err(err(StatusCode::NOT_FOUND, format!("site '{name}' not found")));
    };
    st.core.set_blacklisted(id, false);
    tracing::info!(site = %name, by = %caller.user, "site re-admitted");
    daemon::process_actions(&s, st);
    s.wake.notify_one();
    Ok(Json(site_info(&s, st, id.index())))
}

// ----- tokens -------------------------------------------------------------------------

#[derive(Deserialize)]
struct TokenQuery {
    all: Option<bool>,
}

/// `GET /api/v1/tokens`: the caller's tokens (an admin with `all=true`: everyone's). Ids,
/// owners, expiry; never the tokens.
async fn list_tokens(
    AxState(s): AxState<S>,
    headers: HeaderMap,
    q: Result<Query<TokenQuery>, axum::extract::rejection::QueryRejection>,
) -> R<Json<Vec<store::TokenInfo>>> {
    let caller = authenticate(&s, &headers)?;
    let Query(q) = q.map_err(|e| err(StatusCode::BAD_REQUEST, format!("query: {e}")))?;
    if q.all.unwrap_or(false) && !caller.admin {
        return Err(err(
            StatusCode::FORBIDDEN,
            "parameter 'all': only an admin may list other users' tokens",
        ));
    }
    let user = (!(caller.admin && q.all.unwrap_or(false))).then_some(caller.user.as_str());
    s.store
        .read(|c| store::list_tokens(c, user))
        .map(Json)
        .map_err(|e| err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

/// `DELETE /api/v1/tokens/{id}`: revokes a token at once. Users revoke their own; an admin
/// anyone's; another user's token answers 404 like a missing one.
async fn revoke_token(AxState(s): AxState<S>, headers: HeaderMap, Path(id): Path<String>) -> R<Json<store::TokenInfo>> {
    let caller = authenticate(&s, &headers)?;
    let not_found = || err(StatusCode::NOT_FOUND, format!("token '{id}' not found"));
    let found = s
        .store
        .read(|c| store::find_token(c, &id))
        .map_err(|e| err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let Some(t) = found.filter(|t| caller.admin || t.user == caller.user) else {
        return Err(not_found());
    };
    let tid = t.id.clone();
    s.store
        .revoke_token(tid)
        .await
        .map_err(|e| err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(Json(t))
}
