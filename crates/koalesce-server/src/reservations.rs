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

use axum::body::Bytes;
use axum::extract::{Path, Request, State as AxState};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use koalesce_api::dto::{NewReservation, ReservationInfo};
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::json;

use crate::api::{authenticate, err, read_body, Caller, R, S};
use crate::backend::{WindowAnswer, WindowRequest};
use crate::daemon::SiteHandle;
use crate::now_ms;
use crate::store::Store;

const TABLE: &str = "CREATE TABLE IF NOT EXISTS reservations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user TEXT NOT NULL,
    site TEXT NOT NULL,
    processors INTEGER NOT NULL,
    start_ms INTEGER NOT NULL,
    end_ms INTEGER NOT NULL,
    earliest_ms INTEGER NOT NULL,
    latest_ms INTEGER NOT NULL,
    flexible INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    backend_id TEXT NOT NULL
)";

/// A stored reservation.
#[derive(Debug, Clone)]
struct Row {
    id: i64,
    info: ReservationInfo,
    backend_id: String,
}

fn public_id(id: i64) -> String {
    format!("R{id}")
}

fn parse_public_id(raw: &str) -> Option<i64> {
    raw.strip_prefix('R')
        .or_else(|| raw.strip_prefix('r'))
        .unwrap_or(raw)
        .parse()
        .ok()
        .filter(|&n| n > 0)
}

fn row(r: &rusqlite::Row<'_>, now: u64) -> rusqlite::Result<Row> {
    let id: i64 = r.get(0)?;
    let start = r.get::<_, i64>(4)? as u64;
    let end = r.get::<_, i64>(5)? as u64;
    Ok(Row {
        id,
        info: ReservationInfo {
            id: public_id(id),
            user: r.get(1)?,
            site: r.get(2)?,
            processors: r.get::<_, i64>(3)? as u32,
            start_ms: start,
            end_ms: end,
            earliest_start_ms: r.get::<_, i64>(6)? as u64,
            latest_start_ms: r.get::<_, i64>(7)? as u64,
            flexible: r.get::<_, i64>(8)? != 0,
            created_ms: r.get::<_, i64>(9)? as u64,
            state: state_at(start, end, now).to_string(),
        },
        backend_id: r.get(10)?,
    })
}

fn state_at(start: u64, end: u64, now: u64) -> &'static str {
    if now < start {
        "waiting"
    } else if now < end {
        "active"
    } else {
        "ended"
    }
}

const COLUMNS: &str = "id, user, site, processors, start_ms, end_ms, earliest_ms, latest_ms, flexible, created_ms, backend_id";

fn load(conn: &Connection, user: Option<&str>, now: u64) -> rusqlite::Result<Vec<Row>> {
    conn.execute(TABLE, [])?;
    let mut st = conn.prepare(&format!(
        "SELECT {COLUMNS} FROM reservations WHERE ?1 IS NULL OR user = ?1 ORDER BY id"
    ))?;
    let rows = st.query_map([user], |r| row(r, now))?;
    rows.collect()
}

fn load_one(conn: &Connection, id: i64, now: u64) -> rusqlite::Result<Option<Row>> {
    conn.execute(TABLE, [])?;
    conn.query_row(&format!("SELECT {COLUMNS} FROM reservations WHERE id = ?1"), [id], |r| row(r, now))
        .optional()
}

/// Re-creates the stored reservations that have not ended at their sites (at their granted
/// start) and drops the ended ones; called at startup before jobs are recovered. A
/// reservation its site can no longer grant is dropped with an error in the log.
pub fn restore(store: &Store, sites: &[SiteHandle]) -> anyhow::Result<()> {
    let now = now_ms();
    let rows = store.read(|c| load(c, None, now))?;
    let mut updates = Vec::new();
    for r in rows {
        let keep = r.info.end_ms > now;
        let granted = keep
            .then(|| sites.iter().find(|h| h.name == r.info.site))
            .flatten()
            .and_then(|h| h.backend.reservations())
            .map(|res| {
                res.reserve_window(&WindowRequest {
                    site: r.info.site.clone(),
                    processors: r.info.processors,
                    duration_ms: r.info.end_ms - r.info.start_ms.max(now),
                    earliest_ms: r.info.start_ms,
                    latest_ms: r.info.start_ms,
                })
            });
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
                Some(b) => tx.execute("UPDATE reservations SET backend_id = ?2 WHERE id = ?1", params![id, b])?,
                None => tx.execute("DELETE FROM reservations WHERE id = ?1", [id])?,
            };
        }
        Ok(())
    }))?;
    Ok(())
}

fn parse_body(bytes: &Bytes) -> R<NewReservation> {
    serde_json::from_slice(bytes).map_err(|e| err(StatusCode::UNPROCESSABLE_ENTITY, format!("reservation: {e}")))
}

/// Checks a request and makes it a [`WindowRequest`] at `now`.
fn window(s: &S, req: &NewReservation, now: u64) -> R<WindowRequest> {
    let unprocessable = |m: String| err(StatusCode::UNPROCESSABLE_ENTITY, m);
    let Some(site) = s.site_by_name(&req.site) else {
        return Err(unprocessable(format!("field 'site': unknown site '{}'", req.site)));
    };
    if req.processors == 0 {
        return Err(unprocessable("field 'processors': must be at least 1".into()));
    }
    let total = site.backend.processors(&site.name).map(|p| p.total).unwrap_or(u32::MAX);
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
    if site.backend.reservations().is_none() {
        return Err(err(
            StatusCode::CONFLICT,
            format!(
                "site '{}' does not take advance reservations (its config says reservations = false)",
                req.site
            ),
        ));
    }
    Ok(WindowRequest {
        site: req.site.clone(),
        processors: req.processors,
        duration_ms: duration,
        earliest_ms: earliest,
        latest_ms: latest,
    })
}

/// Asks the site (off the async threads: an LRM call may block).
async fn ask(s: &S, w: WindowRequest) -> R<WindowAnswer> {
    let s2 = s.clone();
    let answer = tokio::task::spawn_blocking(move || {
        let site = s2.site_by_name(&w.site).expect("checked in window()");
        site.backend.reservations().expect("checked in window()").reserve_window(&w)
    })
    .await
    .map_err(|e| err(StatusCode::INTERNAL_SERVER_ERROR, format!("reservation: {e}")))?
    .map_err(|e| err(StatusCode::BAD_GATEWAY, format!("site: {e}")))?;
    let counter = match answer {
        WindowAnswer::Granted { .. } => &s.metrics.reservations_granted,
        WindowAnswer::Rejected { .. } => &s.metrics.reservations_refused,
    };
    counter.fetch_add(1, Ordering::Relaxed);
    Ok(answer)
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

fn rejected(t_next: Option<u64>, reason: String) -> Response {
    let body = match t_next {
        Some(t) => json!({ "answer": "rejected", "t_next_ms": t, "error": reason }),
        None => json!({ "answer": "rejected", "error": reason }),
    };
    (StatusCode::CONFLICT, Json(body)).into_response()
}

/// Stores a granted reservation; gives it back at the site when the store fails.
async fn store_granted(s: &S, caller: &Caller, w: &WindowRequest, flexible: bool, id: String, start: u64) -> R<ReservationInfo> {
    let now = now_ms();
    let (user, site, backend_id) = (caller.user.clone(), w.site.clone(), id.clone());
    let (p, end, e, l) = (w.processors, start + w.duration_ms, w.earliest_ms, w.latest_ms);
    let (tx_out, rx) = tokio::sync::oneshot::channel();
    let written = s
        .store
        .write(Box::new(move |tx| {
            tx.execute(TABLE, [])?;
            tx.execute(
                &format!(
                    "INSERT INTO reservations ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                    &COLUMNS[4..]
                ),
                params![
                    user,
                    site,
                    p as i64,
                    start as i64,
                    end as i64,
                    e as i64,
                    l as i64,
                    flexible as i64,
                    now as i64,
                    backend_id
                ],
            )?;
            let _ = tx_out.send(tx.last_insert_rowid());
            Ok(())
        }))
        .await;
    let row_id = match (written, rx.await) {
        (Ok(()), Ok(row_id)) => row_id,
        (written, _) => {
            give_back(s, w.site.clone(), id).await;
            let why = written.err().map(|e| e.to_string()).unwrap_or_else(|| "no row id".into());
            return Err(err(StatusCode::INTERNAL_SERVER_ERROR, format!("reservation not stored: {why}")));
        }
    };
    Ok(ReservationInfo {
        id: public_id(row_id),
        user: caller.user.clone(),
        site: w.site.clone(),
        processors: w.processors,
        start_ms: start,
        end_ms: end,
        earliest_start_ms: e,
        latest_start_ms: l,
        flexible,
        created_ms: now,
        state: state_at(start, end, now).to_string(),
    })
}

/// Asks the site for `w` and stores what it grants: 201 with the reservation, or 409 with
/// the rejection (and `t_next_ms` when the site knows one).
async fn grant(s: &S, caller: &Caller, w: WindowRequest, flexible: bool) -> R<Result<ReservationInfo, Response>> {
    match ask(s, w.clone()).await? {
        WindowAnswer::Granted { id, start_ms } => Ok(Ok(store_granted(s, caller, &w, flexible, id, start_ms).await?)),
        WindowAnswer::Rejected { t_next_ms, reason } => Ok(Err(rejected(t_next_ms, reason))),
    }
}

fn granted(status: StatusCode, info: ReservationInfo) -> Response {
    (status, Json(json!({ "answer": "granted", "reservation": info }))).into_response()
}

/// `POST /api/v1/reservations`.
pub(crate) async fn create(AxState(s): AxState<S>, req: Request) -> R<Response> {
    let caller = authenticate(&s, req.headers())?;
    let body = read_body(&s, req).await?;
    let new = parse_body(&body)?;
    let w = window(&s, &new, now_ms())?;
    Ok(match grant(&s, &caller, w, new.flexible).await? {
        Ok(info) => granted(StatusCode::CREATED, info),
        Err(rejection) => rejection,
    })
}

fn internal(e: impl std::fmt::Display) -> crate::api::ApiError {
    err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

/// The caller's reservation `raw` (an admin: anyone's); another user's answers 404 like a
/// missing one.
fn find(s: &S, caller: &Caller, raw: &str) -> R<Row> {
    let not_found = || err(StatusCode::NOT_FOUND, format!("reservation '{raw}' not found"));
    let id = parse_public_id(raw).ok_or_else(not_found)?;
    let row = s.store.read(|c| load_one(c, id, now_ms())).map_err(internal)?;
    row.filter(|r| caller.admin || r.info.user == caller.user).ok_or_else(not_found)
}

/// `GET /api/v1/reservations`: the caller's reservations (an admin's: everyone's).
pub(crate) async fn list(AxState(s): AxState<S>, headers: HeaderMap) -> R<Json<Vec<ReservationInfo>>> {
    let caller = authenticate(&s, &headers)?;
    let user = (!caller.admin).then_some(caller.user.clone());
    let rows = s.store.read(|c| load(c, user.as_deref(), now_ms())).map_err(internal)?;
    Ok(Json(rows.into_iter().map(|r| r.info).collect()))
}

/// `GET /api/v1/reservations/{id}`.
pub(crate) async fn get_one(AxState(s): AxState<S>, headers: HeaderMap, Path(raw): Path<String>) -> R<Json<ReservationInfo>> {
    let caller = authenticate(&s, &headers)?;
    Ok(Json(find(&s, &caller, &raw)?.info))
}

async fn delete_row(s: &S, row: &Row) -> R<()> {
    give_back(s, row.info.site.clone(), row.backend_id.clone()).await;
    let id = row.id;
    s.store
        .write(Box::new(move |tx| {
            tx.execute("DELETE FROM reservations WHERE id = ?1", [id]).map(drop)
        }))
        .await
        .map_err(internal)
}

/// `DELETE /api/v1/reservations/{id}`: gives the processors back at once.
pub(crate) async fn cancel(AxState(s): AxState<S>, headers: HeaderMap, Path(raw): Path<String>) -> R<Json<ReservationInfo>> {
    let caller = authenticate(&s, &headers)?;
    let row = find(&s, &caller, &raw)?;
    delete_row(&s, &row).await?;
    let mut info = row.info;
    info.state = "cancelled".into();
    Ok(Json(info))
}

/// `PUT /api/v1/reservations/{id}`: modify = release + create (001 §3.3.2). When the new
/// request is refused, the old reservation is asked for again at its old start, so a refused
/// modification keeps it whenever its processors are still free (they are, unless another
/// request took them in between); the answer says which.
pub(crate) async fn modify(AxState(s): AxState<S>, Path(raw): Path<String>, req: Request) -> R<Response> {
    let caller = authenticate(&s, req.headers())?;
    let body = read_body(&s, req).await?;
    let new = parse_body(&body)?;
    let old = find(&s, &caller, &raw)?;
    let w = window(&s, &new, now_ms())?;
    delete_row(&s, &old).await?;
    let owner = Caller {
        user: old.info.user.clone(),
        admin: false,
    };
    match grant(&s, &owner, w, new.flexible).await? {
        Ok(info) => Ok(granted(StatusCode::OK, info)),
        Err(rejection) => {
            let now = now_ms();
            let back = WindowRequest {
                site: old.info.site.clone(),
                processors: old.info.processors,
                duration_ms: old.info.end_ms.saturating_sub(old.info.start_ms.max(now)).max(1),
                earliest_ms: old.info.start_ms,
                latest_ms: old.info.start_ms,
            };
            let kept = match grant(&s, &owner, back, old.info.flexible).await? {
                Ok(info) => json!(info),
                Err(_) => serde_json::Value::Null,
            };
            let (parts, body) = rejection.into_parts();
            let bytes = axum::body::to_bytes(body, 1 << 16).await.unwrap_or_default();
            let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_else(|_| json!({}));
            v["kept"] = kept;
            Ok((parts.status, Json(v)).into_response())
        }
    }
}
