//! The federation's endpoints: for users (the grid queue and the federation's state, user
//! tokens) and for peers (offers and handoffs, peer secrets only).

use std::sync::Arc;

use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use koalesce_api::dto::Submitted;
use koalesce_core::federation::live::Requirements;

use super::client::PEER_HEADER;
use super::journal::{state, GridRow, Incoming};
use super::wire::{FederationStatus, GridJob, HandoffRequest, HandoffState, OfferAnswer, OfferRequest, PeerStatus};
use super::{blocking, data, Federation};
use crate::api::{self, err, ApiError};
use crate::jobdesc::{DescriptionError, JobDescription};
use crate::now_ms;

type F = Arc<Federation>;
type R<T> = Result<T, ApiError>;

pub(super) fn router(fed: F) -> Router {
    Router::new()
        .route("/api/v1/grid/jobs", post(submit).get(list))
        .route("/api/v1/grid/jobs/{id}", get(show))
        .route("/api/v1/grid/jobs/{id}/cancel", post(super::results::cancel_grid_job))
        .route("/api/v1/grid/jobs/{id}/logs", get(super::results::grid_logs))
        .route("/api/v1/federation", get(status))
        .route("/api/v1/peer/offer", post(offer))
        .route("/api/v1/peer/volunteer", post(volunteer))
        .route("/api/v1/peer/handoffs", post(prepare))
        .route("/api/v1/peer/handoffs/{h}", get(handoff_state))
        .route("/api/v1/peer/handoffs/{h}/commit", post(commit))
        .route("/api/v1/peer/handoffs/{h}/abort", post(abort))
        .route("/api/v1/peer/handoffs/{h}/done", post(done))
        .route("/api/v1/peer/handoffs/{h}/outputs/{*name}", get(output_file))
        .route("/api/v1/peer/handoffs/{h}/cancel", post(super::results::cancel_handoff))
        .route("/api/v1/peer/handoffs/{h}/logs/{*name}", get(super::results::log_file))
        .route("/api/v1/peer/sent/{h}/inputs/{*name}", get(input_file))
        .route("/api/v1/peer/probe", get(probe))
        .with_state(fed)
}

pub(super) fn internal(e: impl std::fmt::Display) -> ApiError {
    err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

// ----- users ---------------------------------------------------------------------------

fn parse_description(text: &str) -> R<JobDescription> {
    JobDescription::parse(text).map_err(|e| match e {
        DescriptionError::Malformed(m) => err(StatusCode::BAD_REQUEST, format!("malformed TOML: {m}")),
        DescriptionError::Invalid(m) => err(StatusCode::UNPROCESSABLE_ENTITY, m),
    })
}

async fn submit(State(fed): State<F>, req: Request) -> R<Response> {
    let caller = api::authenticate(&fed.shared, req.headers())?;
    let body = api::read_body(&fed.shared, req).await?;
    let text = std::str::from_utf8(&body).map_err(|_| err(StatusCode::BAD_REQUEST, "body: not UTF-8 text"))?;
    let desc = parse_description(text)?;
    // Checked against this server now (it may end up here): 422 like a direct submission.
    fed.requirements(&desc).map_err(|e| err(StatusCode::UNPROCESSABLE_ENTITY, e))?;
    let j = fed.journal.clone();
    let (user, name, text) = (caller.user.clone(), desc.name.clone(), desc.to_toml());
    let id = blocking(move || j.add_grid_job(&user, &name, &text, now_ms()))
        .await
        .map_err(internal)?;
    fed.wake.notify_one();
    Ok((StatusCode::CREATED, Json(Submitted { id, ids: Vec::new() })).into_response())
}

/// A grid job as users see it: where it runs, its state there, why.
pub(super) async fn render(fed: &F, row: GridRow) -> GridJob {
    let mut g = GridJob {
        id: row.id,
        name: row.name.clone(),
        user: row.user.clone(),
        state: "waiting".into(),
        runs_at: None,
        job: None,
        sites: Vec::new(),
        exit_ok: None,
        reason: row.reason.clone().filter(|r| !r.is_empty()),
        submitted_ms: row.submitted_ms,
        finished_ms: None,
        outputs: row
            .outputs
            .as_deref()
            .and_then(|o| serde_json::from_str(o).ok())
            .unwrap_or_default(),
        data_error: row.data_error.clone(),
        failure: None,
        cancel_requested: row.cancel,
    };
    match row.state.as_str() {
        state::LOCAL => {
            g.runs_at = Some("local".into());
            g.job = row.local_id;
            if let Some(id) = row.local_id {
                if let Ok(d) = api::job_detail(&fed.shared, id).await {
                    g.state = d.state;
                    g.sites = d.sites.iter().map(|s| format!("{}/{s}", fed.cfg.name)).collect();
                    g.exit_ok = d.exit_ok;
                    g.finished_ms = d.finished_ms;
                    g.outputs = d.outputs;
                    g.failure = d.failure;
                }
            }
        }
        state::HANDING | state::MIGRATED => {
            g.runs_at = row.peer.clone();
            g.job = row.remote_id;
            g.state = "handing-over".into();
            // As the peer said it, made plain text (rows written before that was done on receipt).
            let remote = row.remote.as_deref().and_then(|r| serde_json::from_str::<HandoffState>(r).ok());
            if let Some(r) = remote.map(HandoffState::from_peer) {
                if let Some(s) = r.job_state {
                    g.state = s;
                }
                g.sites = r.sites;
                g.exit_ok = r.exit_ok;
                g.finished_ms = r.finished_ms;
                g.failure = r.failure.clone();
                let ended = koalesce_api::dto::is_final_state(&g.state);
                if r.job.is_none() {
                    if let Some((here, of)) = r.inputs_here {
                        g.state = format!("staging-in ({here}/{of})");
                        g.data_error = g.data_error.or(r.failure);
                    }
                } else if ended && (row.logs.is_none() || (g.state == "succeeded" && row.outputs.is_none())) {
                    // Ended there; ended here once its logs (and a succeeded job's outputs)
                    // are back.
                    g.state = "staging-out".into();
                }
            }
        }
        state::FAILED => g.state = "failed".into(),
        state::CANCELLED => g.state = "cancelled".into(),
        _ => {}
    }
    g
}

async fn list(State(fed): State<F>, headers: HeaderMap) -> R<Json<Vec<GridJob>>> {
    let caller = api::authenticate(&fed.shared, &headers)?;
    let j = fed.journal.clone();
    let user = (!caller.admin).then(|| caller.user.clone());
    let rows = blocking(move || j.grid_jobs(&[], user.as_deref())).await.map_err(internal)?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        out.push(render(&fed, r).await);
    }
    Ok(Json(out))
}

async fn show(State(fed): State<F>, headers: HeaderMap, Path(raw): Path<String>) -> R<Json<GridJob>> {
    let caller = api::authenticate(&fed.shared, &headers)?;
    let row = super::results::own_row(&fed, &caller, &raw).await?;
    Ok(Json(render(&fed, row).await))
}

async fn status(State(fed): State<F>, headers: HeaderMap) -> R<Json<FederationStatus>> {
    api::authenticate(&fed.shared, &headers)?;
    let now = now_ms();
    let peers = {
        let a = fed.avail.lock().unwrap_or_else(|p| p.into_inner());
        fed.peers
            .iter()
            .zip(a.iter())
            .map(|(p, a)| PeerStatus {
                name: p.name.clone(),
                url: p.url.clone(),
                available: a.available(now),
                failures: a.failures,
                retry_at_ms: (!a.available(now)).then_some(a.until_ms),
                last_error: a.last_error.clone(),
                measured_bps: None,
            })
            .collect::<Vec<_>>()
    };
    let mut peers = peers;
    for (i, p) in peers.iter_mut().enumerate() {
        p.measured_bps = fed.bandwidth.lock().unwrap_or_else(|p| p.into_inner())[i].map(|m| m.0);
    }
    let j = fed.journal.clone();
    let (counts, received) = blocking(move || j.counts()).await.map_err(internal)?;
    let count = |states: &[&str]| counts.iter().filter(|(s, _)| states.contains(&s.as_str())).map(|c| c.1).sum();
    Ok(Json(FederationStatus {
        name: fed.cfg.name.clone(),
        algorithm: fed.cfg.algorithm.name().into(),
        peers,
        local: count(&[state::LOCAL, state::SUBMITTING]),
        migrated_out: count(&[state::MIGRATED, state::HANDING]),
        waiting: count(&[state::WAITING]),
        received,
    }))
}

// ----- peers ---------------------------------------------------------------------------

/// The calling peer (its index), from its name and the pair's secret. User tokens are never
/// peer credentials.
pub(super) fn peer_auth(fed: &Federation, headers: &HeaderMap) -> R<usize> {
    let refused = || {
        err(
            StatusCode::UNAUTHORIZED,
            "peer authentication failed (header X-Koalesce-Peer and the pair's secret)",
        )
    };
    let name = headers.get(PEER_HEADER).and_then(|v| v.to_str().ok()).ok_or_else(refused)?;
    let secret = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(refused)?;
    let i = fed.peer_index(name).ok_or_else(refused)?;
    if fed.peers[i].secret_matches(secret.trim()) {
        Ok(i)
    } else {
        Err(refused())
    }
}

/// A JSON body or 400 naming what is wrong and where (`body: field 'processors': ...`).
fn json<T: serde::de::DeserializeOwned>(body: &[u8]) -> R<T> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let v = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let at = e.path().to_string();
        let inner = api::cut_message(&e.into_inner().to_string());
        match at.as_str() {
            "." | "" => err(StatusCode::BAD_REQUEST, format!("body: {inner}")),
            _ => err(StatusCode::BAD_REQUEST, format!("body: field '{at}': {inner}")),
        }
    })?;
    de.end().map_err(|e| err(StatusCode::BAD_REQUEST, format!("body: {e}")))?;
    Ok(v)
}

async fn offer(State(fed): State<F>, req: Request) -> R<Json<OfferAnswer>> {
    let i = peer_auth(&fed, req.headers())?;
    let body = api::read_body(&fed.shared, req).await?;
    let q: OfferRequest = json(&body)?;
    if q.processors == 0 || q.home_mhz == 0 {
        return Err(err(
            StatusCode::UNPROCESSABLE_ENTITY,
            "fields 'processors' and 'home_mhz' must be positive",
        ));
    }
    let req = Requirements {
        processors: q.processors,
        estimate_ms: q.estimate_ms,
        home_mhz: q.home_mhz,
        input_bytes: q.input_bytes,
        output_bytes: q.output_bytes,
    };
    let (o, awt) = fed.offer(&req, Some(i));
    Ok(Json(OfferAnswer {
        att_ms: o.att,
        awt_ms: awt,
        ru: o.ru,
    }))
}

/// A peer volunteers (its RU is below δ, 002 §III-A2): the first job of the grid queue is
/// offered to it, in the background.
async fn volunteer(State(fed): State<F>, headers: HeaderMap) -> R<StatusCode> {
    let i = peer_auth(&fed, &headers)?;
    fed.volunteered(i);
    tokio::spawn(async move {
        if let Err(e) = super::gs::on_volunteer(&fed, i).await {
            tracing::warn!(error = %e, "offering a job to a volunteer failed");
        }
    });
    Ok(StatusCode::ACCEPTED)
}

/// The handoff as the receiver holds it, with its job's state here.
pub(super) async fn handoff_view(fed: &F, inc: Incoming) -> HandoffState {
    let mut s = HandoffState {
        handoff: inc.handoff.clone(),
        state: inc.state.clone(),
        job: inc.local_id,
        job_state: None,
        sites: Vec::new(),
        exit_ok: None,
        failure: None,
        finished_ms: None,
        outputs: Vec::new(),
        inputs_here: None,
        logs: Vec::new(),
        released: inc.released,
    };
    if let Some(id) = inc.local_id {
        if let Ok(d) = api::job_detail(&fed.shared, id).await {
            // Ended and still in the core: its final row (and a succeeded job's outputs) is
            // being stored; the job is let go once it is. Until then it is not shown ended,
            // so the origin never takes an incomplete view as the last one.
            let ended = koalesce_api::dto::is_final_state(&d.state);
            let settling = ended && fed.shared.lock().core.job(koalesce_core::JobId(id)).is_some();
            if d.state == "succeeded" && !settling {
                s.outputs = data::outputs_of(fed, &d.outputs);
            }
            if ended && !settling {
                s.logs = super::results::logs_of(&d).await;
            }
            s.job_state = Some(if settling { "staging-out".to_string() } else { d.state.clone() });
            s.sites = d.sites.iter().map(|x| format!("{}/{x}", fed.cfg.name)).collect();
            s.exit_ok = d.exit_ok;
            s.failure = d.failure;
            s.finished_ms = d.finished_ms;
        }
    } else if s.state == "prepared" && inc.inputs != "[]" {
        s.inputs_here = Some(data::inputs_here(fed, &inc));
        s.failure = data::fetch_error(fed, &format!("in:{}", inc.handoff));
    }
    s
}

/// A handoff id the calling peer may use: `<its name>-<digits>-<digits>`.
pub(super) fn check_handoff(fed: &Federation, i: usize, h: &str) -> R<()> {
    let rest = h.strip_prefix(&format!("{}-", fed.peers[i].name));
    let ok = rest.is_some_and(|r| {
        let mut parts = r.split('-');
        let digits = |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.len() <= 19 && p.bytes().all(|b| b.is_ascii_digit()));
        digits(parts.next()) && digits(parts.next()) && parts.next().is_none()
    });
    if ok {
        Ok(())
    } else {
        Err(err(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("field 'handoff': '{}' is not '<your name>-<job>-<attempt>'", api::cut_message(h)),
        ))
    }
}

async fn prepare(State(fed): State<F>, req: Request) -> R<Json<HandoffState>> {
    let i = peer_auth(&fed, req.headers())?;
    let body = api::read_body(&fed.shared, req).await?;
    let q: HandoffRequest = json(&body)?;
    check_handoff(&fed, i, &q.handoff)?;
    if q.user.is_empty() || q.user.len() > 256 || q.user.chars().any(char::is_control) {
        return Err(err(
            StatusCode::UNPROCESSABLE_ENTITY,
            "field 'user': 1-256 characters without control characters",
        ));
    }
    let desc = parse_description(&q.description)?;
    if desc.components.iter().any(|c| c.site.is_some()) {
        return Err(err(
            StatusCode::UNPROCESSABLE_ENTITY,
            "field 'description': jobs fixed to a site are not taken from peers",
        ));
    }
    if desc.outputs.iter().any(|o| o.to.is_some()) {
        return Err(err(
            StatusCode::UNPROCESSABLE_ENTITY,
            "field 'description': outputs with 'to' are the origin's to name; a peer's description has none",
        ));
    }
    data::check_inputs(&desc, &q.inputs, fed.shared.config.files.max_upload_bytes).map_err(|e| err(StatusCode::UNPROCESSABLE_ENTITY, e))?;
    fed.requirements_here(&desc).map_err(|e| err(StatusCode::UNPROCESSABLE_ENTITY, e))?;
    let j = fed.journal.clone();
    let origin = fed.peers[i].name.clone();
    let inputs = serde_json::to_string(&q.inputs).map_err(internal)?;
    let cap = fed.cfg.max_handoffs_per_peer;
    let inc = blocking(move || {
        let inc = j.prepare_within(&q.handoff, &origin, &q.user, &desc.to_toml(), &inputs, cap)?;
        if let Ok(inc) = &inc {
            j.touch(&inc.handoff, now_ms())?;
        }
        Ok::<_, rusqlite::Error>(inc)
    })
    .await
    .map_err(internal)?
    .map_err(|held| {
        err(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "peer '{}' has {held} handoffs prepared here and not committed (max_handoffs_per_peer = {cap}): commit or abort some first",
                fed.peers[i].name
            ),
        )
    })?;
    Ok(Json(handoff_view(&fed, inc).await))
}

/// The calling peer's handoff `h`, or 404 (another peer's handoffs do not exist for it).
pub(super) async fn find(fed: &F, i: usize, h: &str) -> R<Incoming> {
    let j = fed.journal.clone();
    let key = h.to_string();
    match blocking(move || j.incoming(&key)).await.map_err(internal)? {
        Some(inc) if inc.origin == fed.peers[i].name => Ok(inc),
        _ => Err(err(StatusCode::NOT_FOUND, format!("handoff '{}' not found", api::cut_message(h)))),
    }
}

async fn handoff_state(State(fed): State<F>, headers: HeaderMap, Path(h): Path<String>) -> R<Json<HandoffState>> {
    let i = peer_auth(&fed, &headers)?;
    let inc = find(&fed, i, &h).await?;
    Ok(Json(handoff_view(&fed, inc).await))
}

async fn commit(State(fed): State<F>, headers: HeaderMap, Path(h): Path<String>) -> R<Json<HandoffState>> {
    let i = peer_auth(&fed, &headers)?;
    // Under the lock an abort cannot come between the state read here and the commit.
    let one = fed.submit_lock.lock().await;
    let inc = find(&fed, i, &h).await?;
    match inc.state.as_str() {
        "committed" => {
            drop(one);
            return Ok(Json(handoff_view(&fed, inc).await));
        }
        "aborted" => return Err(err(StatusCode::CONFLICT, format!("handoff '{h}' was aborted"))),
        _ => {}
    }
    let (j, key) = (fed.journal.clone(), h.clone());
    blocking(move || j.touch(&key, now_ms())).await.map_err(internal)?;
    let desc = parse_description(&inc.description)?;
    let Some(desc) = data::inputs_ready(&fed, i, &inc, &desc) else {
        // Still fetching its inputs: committed once they are here (the origin asks again).
        drop(one);
        return Ok(Json(handoff_view(&fed, inc).await));
    };
    let user = format!("peer-{}", inc.origin);
    let id = fed.submit_once(&one, &desc, &h, &user).await?;
    let j = fed.journal.clone();
    let key = h.clone();
    blocking(move || j.committed(&key, id)).await.map_err(internal)?;
    drop(one);
    let inc = find(&fed, i, &h).await?;
    Ok(Json(handoff_view(&fed, inc).await))
}

async fn abort(State(fed): State<F>, headers: HeaderMap, Path(h): Path<String>) -> R<Json<HandoffState>> {
    let i = peer_auth(&fed, &headers)?;
    check_handoff(&fed, i, &h)?;
    let one = fed.submit_lock.lock().await;
    // A tombstone for a handoff never seen here is a row kept for good: at most
    // max_handoffs_per_peer per peer (tombstones are made only here, under submit_lock).
    let (j, key, origin) = (fed.journal.clone(), h.clone(), fed.peers[i].name.clone());
    let held = blocking(move || match j.incoming(&key)? {
        Some(_) => Ok(None),
        None => j.tombstones_of(&origin).map(Some),
    })
    .await
    .map_err(internal)?;
    let cap = fed.cfg.max_handoffs_per_peer;
    if let Some(held) = held.filter(|&n| n >= cap) {
        // The bound is on tombstones: a handoff whose job is here (a journal lost, the jobs
        // kept) is taken back instead, which leaves none; refusing it would make the origin
        // fail a job it can follow.
        let name = fed.peers[i].name.clone();
        if let Some(inc) = fed.adopt(&one, &h, &name).await.map_err(internal)? {
            drop(one);
            return Ok(Json(handoff_view(&fed, inc).await));
        }
        return Err(err(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "peer '{}' has {held} tombstones here (aborts of handoffs never seen here; max_handoffs_per_peer = {cap}): handoff '{}' not aborted",
                fed.peers[i].name,
                api::cut_message(&h)
            ),
        ));
    }
    let inc = fed.abort_incoming(&one, &h, &fed.peers[i].name).await.map_err(internal)?;
    drop(one);
    // What was received for it goes (a crash before this: the next pass sweeps).
    super::cleanup::sweep(&fed, &inc).await.map_err(internal)?;
    Ok(Json(handoff_view(&fed, inc).await))
}

/// `POST /api/v1/peer/handoffs/{h}/done` (at the receiver): the origin has what it needs of
/// the ended job (its outputs and logs are back). Releases the handoff ([`super::cleanup::release`]:
/// durable, then the inputs received for it that nothing live needs and the job's outputs here
/// go). Idempotent: a repeated call sweeps again.
async fn done(State(fed): State<F>, headers: HeaderMap, Path(h): Path<String>) -> R<Json<HandoffState>> {
    let i = peer_auth(&fed, &headers)?;
    let inc = find(&fed, i, &h).await?;
    let conflict = |why: &str| err(StatusCode::CONFLICT, format!("handoff '{}' {why}", api::cut_message(&h)));
    let Some(id) = inc.local_id.filter(|_| inc.state == "committed") else {
        return Err(conflict(&format!("is {}, not committed", inc.state)));
    };
    let d = api::job_detail(&fed.shared, id).await?;
    let ended = koalesce_api::dto::is_final_state(&d.state) && fed.shared.lock().core.job(koalesce_core::JobId(id)).is_none();
    if !ended {
        return Err(conflict(&format!("has a job that has not ended ({})", d.state)));
    }
    let removed = super::cleanup::release(&fed, &inc).await.map_err(internal)?;
    if removed > 0 {
        tracing::info!(handoff = %h, removed, "inputs and outputs of an ended job removed");
    }
    let inc = find(&fed, i, &h).await?;
    Ok(Json(handoff_view(&fed, inc).await))
}

/// `GET /api/v1/peer/handoffs/{h}/outputs/{name}` (at the receiver): an output of the job the
/// calling peer handed over as `h`, once it succeeded.
async fn output_file(State(fed): State<F>, headers: HeaderMap, Path((h, name)): Path<(String, String)>) -> R<Response> {
    let i = peer_auth(&fed, &headers)?;
    let inc = find(&fed, i, &h).await?;
    let not_found = || {
        err(
            StatusCode::NOT_FOUND,
            format!("'{}' is not an output of handoff '{h}'", api::cut_message(&name)),
        )
    };
    let id = inc.local_id.ok_or_else(not_found)?;
    let d = api::job_detail(&fed.shared, id).await?;
    if d.state != "succeeded" || !d.outputs.contains(&name) {
        return Err(not_found());
    }
    super::serve::serve(&fed, &name, &headers).await
}

/// `GET /api/v1/peer/sent/{h}/inputs/{name}` (at the origin): an input of the job this server
/// handed to the calling peer as `h`.
async fn input_file(State(fed): State<F>, headers: HeaderMap, Path((h, name)): Path<(String, String)>) -> R<Response> {
    let i = peer_auth(&fed, &headers)?;
    let j = fed.journal.clone();
    let key = h.clone();
    let row = blocking(move || j.grid_job_by_handoff(&key)).await.map_err(internal)?;
    let not_found = || {
        err(
            StatusCode::NOT_FOUND,
            format!(
                "'{}' is not an input of handoff '{}'",
                api::cut_message(&name),
                api::cut_message(&h)
            ),
        )
    };
    let row = row
        .filter(|r| r.peer.as_deref() == Some(fed.peers[i].name.as_str()) && matches!(r.state.as_str(), state::HANDING | state::MIGRATED))
        .ok_or_else(not_found)?;
    let desc = parse_description(&row.description)?;
    if !desc.inputs.iter().any(|f| f.logical() == name) {
        return Err(not_found());
    }
    super::serve::serve(&fed, &name, &headers).await
}

#[derive(serde::Deserialize)]
struct ProbeQuery {
    bytes: u64,
}

/// `GET /api/v1/peer/probe?bytes=N`: N zero bytes (at most 16 MiB), for the calling peer to
/// measure the bandwidth from here.
async fn probe(
    State(fed): State<F>,
    headers: HeaderMap,
    q: Result<Query<ProbeQuery>, axum::extract::rejection::QueryRejection>,
) -> R<Response> {
    peer_auth(&fed, &headers)?;
    let Query(q) = q.map_err(|e| err(StatusCode::BAD_REQUEST, format!("query: {e}")))?;
    if q.bytes > super::config::MAX_PROBE_BYTES {
        return Err(err(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("parameter 'bytes': at most {}", super::config::MAX_PROBE_BYTES),
        ));
    }
    Ok(super::serve::probe_body(q.bytes))
}
