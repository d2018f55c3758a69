//! Advance reservations as a service (001 §2.3): a user asks a site for processors during a
//! time, starting anywhere in `[earliest, latest]`; the answer is granted (with the start),
//! rejected, or rejected with `T_next` (the earliest later start the site would grant).
//! Modify = release + create (001 §3.3.2; a refused modification gets the old reservation
//! back when its processors are still free). Reservations are durable like jobs: the table
//! `reservations` holds them, and a restarted server re-creates them at their sites (the local
//! executor keeps its reservation table in memory) before any job may claim.
//!
//! The site's LRM enforces them: the local executor lets no claim take reserved processors
//! (see [`crate::local`]); a site without reservations answers 409.

use std::sync::atomic::Ordering;

use axum::extract::{Path, Request, State as AxState};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use koalesce_api::dto::{NewReservation, ReservationInfo};
use serde_json::{json, Value};

use crate::api::{authenticate, err, read_body, ApiError, Caller, R, S};
use std::sync::Arc;

use crate::backend::{ReservationMove, WindowAnswer, WindowRequest};
use crate::daemon::{Shared, SiteHandle};
use crate::now_ms;
use crate::store::{self, ReservationRow, Store};

/// The same reservation asked for again when a refused modification gives it back: at its
/// granted start, or now for the rest of its time if it has begun.
fn same_again(info: &ReservationInfo, now: u64) -> WindowRequest {
    let start = info.start_ms.max(now);
    WindowRequest {
        site: info.site.clone(),
        processors: info.processors,
        duration_ms: info.end_ms.saturating_sub(start).max(1),
        earliest_ms: start,
        latest_ms: start,
        flexible: false,
    }
}

/// A stored reservation as its site is asked for it again after a restart: its window and
/// flexibility, its whole duration ([`Reservations::rebook`] puts it at its stored start).
fn stored_request(info: &ReservationInfo) -> WindowRequest {
    WindowRequest {
        site: info.site.clone(),
        processors: info.processors,
        duration_ms: info.end_ms.saturating_sub(info.start_ms).max(1),
        earliest_ms: info.earliest_start_ms,
        latest_ms: info.latest_start_ms,
        flexible: info.flexible,
    }
}

/// Re-creates the stored reservations that have not ended at their sites (at their stored
/// start, which is where a flexible one was last moved to, with their window and flexibility)
/// and drops the ended ones; called at startup before jobs are recovered. A reservation its
/// site can no longer grant is dropped with an error in the log.
pub fn restore(store: &Store, sites: &[SiteHandle]) -> anyhow::Result<()> {
    let now = now_ms();
    let rows = store.read(|c| store::load_reservations(c, None, now))?;
    let mut updates = Vec::new();
    for r in rows {
        let keep = r.info.end_ms > now;
        let granted = keep
            .then(|| sites.iter().find(|h| h.name == r.info.site))
            .flatten()
            .and_then(|h| h.backend.reservations())
            .map(|res| res.rebook(&stored_request(&r.info), r.info.start_ms));
        match granted {
            Some(Ok(WindowAnswer::Granted { id, .. })) => updates.push((r.id, Some(id))),
            other => {
                if keep {
                    tracing::error!(reservation = %r.info.id, site = %r.info.site, answer = ?other, "a stored reservation could not be re-created at its site; dropped");
                }
                updates.push((r.id, None));
            }
        }
    }
    store.write_blocking(Box::new(move |tx| {
        for (id, backend) in updates {
            match backend {
                Some(b) => store::set_reservation_backend_id(tx, id, &b)?,
                None => store::delete_reservation(tx, id)?,
            }
        }
        Ok(())
    }))?;
    Ok(())
}

/// Tells the core every stored reservation that has not ended, per site: at a site whose
/// queue the core estimates (the local executor) they hold processors in the queue-wait
/// estimate (`queue_wait_ms`, `sites --long`, the TTS/TTD ranking).
pub fn publish(store: &Store, st: &mut crate::daemon::State) -> anyhow::Result<()> {
    let now = now_ms();
    let rows = store.read(|c| store::load_reservations(c, None, now))?;
    let sites = st.core.sites().len();
    let mut per_site: Vec<Vec<koalesce_core::model::HeldReservation>> = vec![Vec::new(); sites];
    for r in rows.into_iter().filter(|r| r.info.end_ms > now) {
        if let Some(site) = st.site_id(&r.info.site) {
            per_site[site.index()].push(koalesce_core::model::HeldReservation {
                id: r.info.id,
                site,
                processors: r.info.processors,
                start: r.info.start_ms,
                end: r.info.end_ms,
            });
        }
    }
    for (i, list) in per_site.into_iter().enumerate() {
        st.core.set_service_reservations(koalesce_core::SiteId(i as u32), list);
    }
    Ok(())
}

/// [`publish`] from a handler or task.
fn publish_now(shared: &Shared) {
    let mut st = shared.lock();
    if let Err(e) = publish(&shared.store, &mut st) {
        tracing::warn!(error = %e, "cannot read the reservations for the queue estimates");
    }
}

/// Carries out the moves of flexible reservations the sites made (001 §2.3: to make room
/// for a request, or earlier into room that freed up): stores each reservation's new times
/// (so a restart keeps them) and lets the jobs held in it follow (the core claims them at
/// the new start). Called by the API after every reservation it changed, by the LRM worker
/// after reservations it asked for, and by the driver at each refresh of the sites.
pub async fn apply_moves(shared: &Arc<Shared>) {
    // `take_moves` does not block (it reads what the site noted), so no blocking-pool hop.
    let moves: Vec<(String, ReservationMove)> = shared
        .sites
        .iter()
        .filter_map(|h| h.backend.reservations().map(|r| (h, r)))
        .flat_map(|(h, r)| r.take_moves().into_iter().map(|m| (h.name.clone(), m)))
        .collect();
    if moves.is_empty() {
        return;
    }
    let (tx_out, rx) = tokio::sync::oneshot::channel();
    let written = shared
        .store
        .write(Box::new(move |tx| {
            let mut moved = Vec::with_capacity(moves.len());
            for (site, m) in &moves {
                if let Some(public) = store::move_reservation(tx, site, &m.id, m.start_ms, m.end_ms)? {
                    moved.push((public, m.start_ms, m.end_ms));
                }
            }
            let _ = tx_out.send(moved);
            Ok(())
        }))
        .await;
    let moved = match (written, rx.await) {
        (Ok(()), Ok(moved)) => moved,
        (written, _) => {
            tracing::error!(error = ?written.err(), "moved reservations could not be stored; a restart puts them back where they were");
            return;
        }
    };
    publish_now(shared);
    let mut guard = shared.lock();
    let st = &mut *guard;
    let now = now_ms();
    for (public, start, end) in moved {
        let jobs = st.core.held_reservation_moved(now, &public, start, end);
        shared.metrics.reservations_moved.fetch_add(1, Ordering::Relaxed);
        tracing::info!(reservation = %public, start_ms = start, end_ms = end, ?jobs, "flexible reservation moved");
    }
    crate::daemon::process_actions(shared, st);
}

fn unprocessable(m: String) -> ApiError {
    err(StatusCode::UNPROCESSABLE_ENTITY, m)
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

/// Reads a request's body.
async fn read_request(s: &S, req: Request) -> R<NewReservation> {
    let body = read_body(s, req).await?;
    serde_json::from_slice(&body).map_err(|e| unprocessable(format!("reservation: {e}")))
}

/// Checks a request and makes it a [`WindowRequest`] at `now`.
fn window(s: &S, req: &NewReservation, now: u64) -> R<WindowRequest> {
    let Some(site) = s.site_by_name(&req.site) else {
        return Err(unprocessable(format!("field 'site': unknown site '{}'", req.site)));
    };
    if req.processors == 0 {
        return Err(unprocessable("field 'processors': must be at least 1".into()));
    }
    // The configured size, as the scheduler knows it (no LRM call on this thread).
    let total = s
        .lock()
        .core
        .sites()
        .iter()
        .find(|c| c.name == req.site)
        .map_or(u32::MAX, |c| c.processors);
    if req.processors > total {
        return Err(unprocessable(format!(
            "field 'processors': site '{}' has {total} processors, {} cannot be reserved",
            req.site, req.processors
        )));
    }
    let duration = koalesce_api::duration::parse_ms(&req.duration).map_err(|e| unprocessable(format!("field 'duration': {e}")))?;
    if duration == 0 {
        return Err(unprocessable("field 'duration': must be longer than 0".into()));
    }
    let max = s.config.max_reservation_ms;
    if duration > max {
        return Err(unprocessable(format!(
            "field 'duration': {} is longer than this server allows ({} ms, max_reservation_ms)",
            req.duration, max
        )));
    }
    let earliest = req.earliest_start_ms.unwrap_or(now).max(now);
    let latest = req.latest_start_ms.unwrap_or(earliest);
    if latest < earliest {
        return Err(unprocessable(format!(
            "field 'latest_start_ms': {latest} is before the earliest start {earliest}"
        )));
    }
    earliest
        .checked_add(duration)
        .ok_or_else(|| unprocessable("field 'duration': too long".into()))?;
    let Some(res) = site.backend.reservations() else {
        return Err(err(
            StatusCode::CONFLICT,
            format!(
                "site '{}' does not take advance reservations (its config says reservations = false)",
                req.site
            ),
        ));
    };
    if req.flexible && !res.moves_flexible() {
        return Err(unprocessable(format!(
            "field 'flexible': site '{}' ({}) does not move reservations; ask for a fixed one (flexible = false)",
            req.site,
            site.backend.kind()
        )));
    }
    Ok(WindowRequest {
        site: req.site.clone(),
        processors: req.processors,
        duration_ms: duration,
        earliest_ms: earliest,
        latest_ms: latest,
        flexible: req.flexible,
    })
}

/// Gives a reservation back at its site.
async fn give_back(s: &S, site: String, backend_id: String) {
    let s2 = s.clone();
    let _ = tokio::task::spawn_blocking(move || {
        if let Some(res) = s2.site_by_name(&site).and_then(|h| h.backend.reservations()) {
            let _ = res.cancel_reservation(&backend_id);
        }
    })
    .await;
}

/// A site's refusal (001 §2.3: rejected, or rejected with `T_next`).
struct Rejection {
    t_next_ms: Option<u64>,
    reason: String,
}

impl Rejection {
    fn body(&self) -> Value {
        match self.t_next_ms {
            Some(t) => json!({ "answer": "rejected", "t_next_ms": t, "error": self.reason }),
            None => json!({ "answer": "rejected", "error": self.reason }),
        }
    }
}

/// Asks the site for `w` (off the async threads: an LRM call may block) and stores what it
/// grants, owned by `user`; a grant that cannot be stored is given back at the site.
async fn grant(s: &S, user: &str, w: WindowRequest) -> R<Result<ReservationInfo, Rejection>> {
    let s2 = s.clone();
    let w2 = w.clone();
    let answer = tokio::task::spawn_blocking(move || {
        let site = s2.site_by_name(&w2.site).expect("checked in window()");
        site.backend.reservations().expect("checked in window()").reserve_window(&w2)
    })
    .await
    .map_err(|e| internal(format!("reservation: {e}")))?
    .map_err(|e| err(StatusCode::BAD_GATEWAY, format!("site: {e}")))?;
    let (id, start) = match answer {
        WindowAnswer::Granted { id, start_ms } => (id, start_ms),
        WindowAnswer::Rejected { t_next_ms, reason } => {
            s.metrics.reservations_refused.fetch_add(1, Ordering::Relaxed);
            return Ok(Err(Rejection { t_next_ms, reason }));
        }
    };
    s.metrics.reservations_granted.fetch_add(1, Ordering::Relaxed);
    let info = ReservationInfo {
        id: String::new(),
        user: user.to_string(),
        site: w.site.clone(),
        processors: w.processors,
        start_ms: start,
        end_ms: start + w.duration_ms,
        earliest_start_ms: w.earliest_ms,
        latest_start_ms: w.latest_ms,
        flexible: w.flexible,
        created_ms: now_ms(),
        state: String::new(),
    };
    let (tx_out, rx) = tokio::sync::oneshot::channel();
    let (row, backend_id) = (info, id.clone());
    let written = s
        .store
        .write(Box::new(move |tx| {
            let _ = tx_out.send(store::insert_reservation(tx, &row, &backend_id)?);
            Ok(())
        }))
        .await;
    match (written, rx.await) {
        (Ok(()), Ok(stored)) => Ok(Ok(stored)),
        (written, _) => {
            give_back(s, w.site, id).await;
            let why = written.err().map(|e| e.to_string()).unwrap_or_else(|| "no row".into());
            Err(internal(format!("reservation not stored: {why}")))
        }
    }
}

fn granted(status: StatusCode, info: ReservationInfo) -> Response {
    (status, Json(json!({ "answer": "granted", "reservation": info }))).into_response()
}

fn rejected(body: Value) -> Response {
    (StatusCode::CONFLICT, Json(body)).into_response()
}

/// `POST /api/v1/reservations`: 201 with the reservation, or 409 with the rejection (and
/// `t_next_ms` when the site knows one).
pub(crate) async fn create(AxState(s): AxState<S>, req: Request) -> R<Response> {
    let caller = authenticate(&s, req.headers())?;
    let new = read_request(&s, req).await?;
    let w = window(&s, &new, now_ms())?;
    let answer = grant(&s, &caller.user, w).await?;
    // A grant may have moved flexible reservations to make room.
    apply_moves(&s).await;
    publish_now(&s);
    Ok(match answer {
        Ok(info) => granted(StatusCode::CREATED, info),
        Err(rejection) => rejected(rejection.body()),
    })
}

/// The caller's reservation `raw` (an admin: anyone's); another user's answers 404 like a
/// missing one.
fn find(s: &S, caller: &Caller, raw: &str) -> R<ReservationRow> {
    let not_found = || err(StatusCode::NOT_FOUND, format!("reservation '{raw}' not found"));
    let id = store::parse_reservation_id(raw).ok_or_else(not_found)?;
    let row = s.store.read(|c| store::load_reservation(c, id, now_ms())).map_err(internal)?;
    row.filter(|r| caller.admin || r.info.user == caller.user).ok_or_else(not_found)
}

/// The reservation a job names (`reservation = "ID"`), for its submission by `caller`: only
/// the owner's own (another user's answers 404 like a missing one, an admin's included), not
/// ended; a job array may not share one. Its site's name and the core's view of it (the site
/// id filled in by the caller).
pub(crate) fn held_by(s: &S, caller: &Caller, raw: &str, array: bool) -> R<(String, koalesce_core::model::HeldReservation)> {
    let owner = Caller {
        user: caller.user.clone(),
        admin: false,
    };
    let row =
        find(s, &owner, raw).map_err(|_| err(StatusCode::NOT_FOUND, format!("field 'reservation': reservation '{raw}' not found")))?;
    let r = row.info;
    if r.end_ms <= now_ms() {
        return Err(unprocessable(format!(
            "field 'reservation': reservation '{}' ended at {}",
            r.id, r.end_ms
        )));
    }
    if array {
        return Err(unprocessable(format!(
            "field 'reservation': a job array or bag of tasks cannot run in one reservation (reservation '{}' serves one job)",
            r.id
        )));
    }
    let held = koalesce_core::model::HeldReservation {
        id: r.id.clone(),
        site: koalesce_core::SiteId(0),
        processors: r.processors,
        start: r.start_ms,
        end: r.end_ms,
    };
    Ok((r.site, held))
}

/// Query of `GET /api/v1/reservations`.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct ListQuery {
    limit: Option<usize>,
    after: Option<u64>,
}

/// `GET /api/v1/reservations?limit=N&after=ID`: the caller's reservations (an admin's:
/// everyone's) in id order, a page at a time as the job list
/// ([`crate::job_list::DEFAULT_LIMIT`] unless `limit` says, at most
/// [`crate::job_list::MAX_LIMIT`]); a cut page names the next one's `after` in
/// `X-Koalesce-Next-After` and links it (`Link: <...>; rel="next"`).
pub(crate) async fn list(
    AxState(s): AxState<S>,
    headers: HeaderMap,
    q: Result<axum::extract::Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> R<Response> {
    let caller = authenticate(&s, &headers)?;
    let axum::extract::Query(q) = q.map_err(|e| err(StatusCode::BAD_REQUEST, format!("query: {e}")))?;
    let limit = crate::job_list::page_limit(q.limit).map_err(|e| err(StatusCode::UNPROCESSABLE_ENTITY, e))?;
    let after = i64::try_from(q.after.unwrap_or(0)).map_err(|_| err(StatusCode::UNPROCESSABLE_ENTITY, "parameter 'after': too large"))?;
    let user = (!caller.admin).then_some(caller.user.clone());
    let mut rows = s
        .store
        .read(|c| store::load_reservations_page(c, user.as_deref(), now_ms(), after, limit + 1))
        .map_err(internal)?;
    let mut h = HeaderMap::new();
    if rows.len() > limit {
        rows.truncate(limit);
        if let Some(last) = rows.last() {
            h = crate::job_list::next_page_headers("/api/v1/reservations", &format!("limit={limit}"), &last.id.to_string());
        }
    }
    let page: Vec<ReservationInfo> = rows.into_iter().map(|r| r.info).collect();
    Ok((StatusCode::OK, h, Json(page)).into_response())
}

/// `GET /api/v1/reservations/{id}`.
pub(crate) async fn get_one(AxState(s): AxState<S>, headers: HeaderMap, Path(raw): Path<String>) -> R<Json<ReservationInfo>> {
    let caller = authenticate(&s, &headers)?;
    Ok(Json(find(&s, &caller, &raw)?.info))
}

/// Gives the reservation back at its site and forgets it.
async fn delete_row(s: &S, row: &ReservationRow) -> R<()> {
    give_back(s, row.info.site.clone(), row.backend_id.clone()).await;
    let id = row.id;
    s.store
        .write(Box::new(move |tx| store::delete_reservation(tx, id)))
        .await
        .map_err(internal)
}

/// `DELETE /api/v1/reservations/{id}`: gives the processors back at once.
pub(crate) async fn cancel(AxState(s): AxState<S>, headers: HeaderMap, Path(raw): Path<String>) -> R<Json<ReservationInfo>> {
    let caller = authenticate(&s, &headers)?;
    let row = find(&s, &caller, &raw)?;
    delete_row(&s, &row).await?;
    // The freed processors may let flexible reservations move earlier.
    apply_moves(&s).await;
    publish_now(&s);
    let mut info = row.info;
    info.state = "cancelled".into();
    Ok(Json(info))
}

/// `PUT /api/v1/reservations/{id}`: modify = release + create (001 §3.3.2). When the new
/// request is refused, the old reservation is asked for again at its old start, so a refused
/// modification keeps it whenever its processors are still free (they are, unless another
/// request took them in between); the answer says which (`kept`).
pub(crate) async fn modify(AxState(s): AxState<S>, Path(raw): Path<String>, req: Request) -> R<Response> {
    let caller = authenticate(&s, req.headers())?;
    let new = read_request(&s, req).await?;
    let old = find(&s, &caller, &raw)?;
    let w = window(&s, &new, now_ms())?;
    delete_row(&s, &old).await?;
    let owner = &old.info.user;
    let answer = grant(&s, owner, w).await?;
    match answer {
        Ok(info) => {
            apply_moves(&s).await;
            publish_now(&s);
            Ok(granted(StatusCode::OK, info))
        }
        Err(rejection) => {
            let back = same_again(&old.info, now_ms());
            let kept = grant(&s, owner, back).await?.ok();
            apply_moves(&s).await;
            publish_now(&s);
            let mut body = rejection.body();
            body["kept"] = json!(kept);
            Ok(rejected(body))
        }
    }
}
