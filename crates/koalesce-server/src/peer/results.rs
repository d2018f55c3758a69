//! What a migrated job leaves, back at its origin, and its user's cancel, to where it runs
//! (issue 14): once the job ended at the peer — succeeded, failed, timed out, out of memory or
//! cancelled — every component's stdout and stderr come back to the origin (checksummed and
//! resumable, as inputs and outputs travel) before the grid job is shown ended, so
//! `koalesce logs g<N>` at the origin answers as `koalesce logs` does for a job that ran there.
//! A cancel at the origin (`POST /api/v1/grid/jobs/{id}/cancel`) is recorded in its journal and
//! delivered to the peer on every pass until the peer answers: a job not yet committed there
//! is aborted (its received inputs go), a committed one is cancelled like any job there.

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use koalesce_api::dto::{is_final_state, JobDetail};

use super::journal::{state, GridRow, Transition};
use super::routes::{find, handoff_view, internal, peer_auth, render};
use super::wire::{GridJob, HandoffState, PeerFile};
use super::{blocking, data, CallError, Federation};
use crate::api::{self, err, ApiError, Caller};
use crate::api_output::LogQuery;

type F = Arc<Federation>;
type R<T> = Result<T, ApiError>;
type LogQ = Result<Query<LogQuery>, axum::extract::rejection::QueryRejection>;

/// Where the logs of migrated jobs are kept at the origin (in the data directory).
pub const LOG_DIR: &str = "federation-logs";

/// `c<component>/<stream>` → (component, stream), for names a peer sends.
fn parse_log_name(name: &str) -> Option<(u64, &'static str)> {
    let (c, stream) = name.split_once('/')?;
    let digits = c
        .strip_prefix('c')
        .filter(|d| !d.is_empty() && d.len() <= 6 && d.bytes().all(|b| b.is_ascii_digit()))?;
    let stream = match stream {
        "stdout" => "stdout",
        "stderr" => "stderr",
        _ => return None,
    };
    Some((digits.parse().ok()?, stream))
}

/// The log file of component `c`, stream `stream` of job `d` here, if it has one.
fn log_path(d: &JobDetail, c: u64, stream: &str) -> Option<PathBuf> {
    let comp = d.components.iter().find(|x| x.index == c)?;
    let p = if stream == "stdout" { &comp.stdout } else { &comp.stderr };
    p.as_ref().map(PathBuf::from)
}

// ----- the receiver --------------------------------------------------------------------

/// The logs of an ended job here, as its origin fetches them (files that exist).
pub(crate) async fn logs_of(d: &JobDetail) -> Vec<PeerFile> {
    let mut want = Vec::new();
    for c in &d.components {
        for stream in ["stdout", "stderr"] {
            if let Some(p) = log_path(d, c.index, stream) {
                want.push((format!("c{}/{stream}", c.index), p));
            }
        }
    }
    blocking(move || {
        want.into_iter()
            .filter_map(|(name, p)| {
                let (sha256, size_bytes) = crate::transfer::checksum(&p).ok()?;
                Some(PeerFile { name, size_bytes, sha256 })
            })
            .collect()
    })
    .await
}

/// The job of the calling peer's committed handoff `h`, and whether it ended (its logs no
/// longer change).
async fn handoff_job(fed: &F, i: usize, h: &str) -> R<(JobDetail, bool)> {
    let inc = find(fed, i, h).await?;
    let id = inc
        .local_id
        .ok_or_else(|| err(StatusCode::CONFLICT, format!("handoff '{}' has no job here", api::cut_message(h))))?;
    let d = api::job_detail(&fed.shared, id).await?;
    let ended = is_final_state(&d.state) && fed.shared.lock().core.job(koalesce_core::JobId(id)).is_none();
    Ok((d, ended))
}

/// `GET /api/v1/peer/handoffs/{h}/logs/{c<N>/stdout|stderr}` (at the receiver): a log of the
/// job the calling peer handed over as `h` (Range: bytes=N- resumes). Once the job ended with
/// its SHA-256 (the origin fetches it and checks); before, as it is now (the origin shows it
/// to a user following a running job).
pub(crate) async fn log_file(
    State(fed): State<F>,
    headers: HeaderMap,
    Path((h, name)): Path<(String, String)>,
    q: Result<Query<TailQuery>, axum::extract::rejection::QueryRejection>,
) -> R<Response> {
    let i = peer_auth(&fed, &headers)?;
    let Query(q) = q.map_err(|e| err(StatusCode::BAD_REQUEST, format!("query: {e}")))?;
    check_tail(q.tail)?;
    let (d, ended) = handoff_job(&fed, i, &h).await?;
    let not_found = || {
        err(
            StatusCode::NOT_FOUND,
            format!("'{}' is not a log of handoff '{}'", api::cut_message(&name), api::cut_message(&h)),
        )
    };
    let (c, stream) = parse_log_name(&name).ok_or_else(not_found)?;
    if !d.components.iter().any(|x| x.index == c) {
        return Err(not_found());
    }
    let Some(path) = log_path(&d, c, stream) else {
        // Not started yet: nothing so far (an ended job that never started has no log).
        return if ended {
            Err(not_found())
        } else {
            Ok(tail_answer(Vec::new(), 0, 0))
        };
    };
    if let Some(lines) = q.tail {
        // Read here, from the end: only the lines asked for cross to the peer.
        let read = blocking(move || {
            let size = std::fs::metadata(&path)?.len();
            let (bytes, cut) = crate::api_output::tail_lines(&path, lines)?;
            let (bytes, dropped) = cap_tail(bytes, LIVE_LOG_BYTES as usize);
            Ok::<_, std::io::Error>((bytes, size, cut + dropped))
        })
        .await;
        return match read {
            Ok((bytes, size, cut)) => Ok(tail_answer(bytes, size, cut)),
            Err(_) if !ended => Ok(tail_answer(Vec::new(), 0, 0)),
            Err(_) => Err(not_found()),
        };
    }
    let opened = blocking(move || {
        let sha = if ended { Some(crate::transfer::checksum(&path)?.0) } else { None };
        let f = std::fs::File::open(&path)?;
        let size = f.metadata()?.len();
        Ok::<_, std::io::Error>((f, size, sha))
    })
    .await;
    match opened {
        Ok((f, size, sha)) => super::serve::serve_open(f, size, sha.as_deref(), &headers),
        // Not written yet (a job that has not started): nothing so far.
        Err(_) if !ended => Ok((StatusCode::OK, Vec::<u8>::new()).into_response()),
        Err(_) => Err(not_found()),
    }
}

/// 422 for a tail of more lines than a log answer gives (as for a local job's log).
fn check_tail(tail: Option<usize>) -> R<()> {
    match tail {
        Some(t) if t > crate::api_output::MAX_TAIL_LINES => Err(err(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("parameter 'tail': at most {} lines", crate::api_output::MAX_TAIL_LINES),
        )),
        _ => Ok(()),
    }
}

/// `?tail=L` on a log a peer reads: its last L lines.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct TailQuery {
    tail: Option<usize>,
}

/// A tail a peer asked for: the bytes, with the log's whole size and the lines left out in
/// the headers a local log answer has.
fn tail_answer(bytes: Vec<u8>, size: u64, cut: u64) -> Response {
    let mut h = HeaderMap::new();
    h.insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(crate::api_output::LOG_SIZE_HEADER, axum::http::HeaderValue::from(size));
    h.insert(crate::api_output::LINES_CUT_HEADER, axum::http::HeaderValue::from(cut));
    (StatusCode::OK, h, bytes).into_response()
}

/// The end of tail `b` within `max` bytes, from the start of a line; and how many more lines
/// that left out.
fn cap_tail(mut b: Vec<u8>, max: usize) -> (Vec<u8>, u64) {
    if b.len() <= max {
        return (b, 0);
    }
    let from = b.len() - max;
    let start = if b[from - 1] == b'\n' {
        from
    } else {
        b[from..].iter().position(|&x| x == b'\n').map_or(b.len(), |p| from + p + 1)
    };
    let mut dropped = b[..start].iter().filter(|&&x| x == b'\n').count() as u64;
    if start == b.len() && b.last() != Some(&b'\n') {
        // One last line longer than `max`, without its newline yet: left out too.
        dropped += 1;
    }
    (b.split_off(start), dropped)
}

/// `POST /api/v1/peer/handoffs/{h}/cancel` (at the receiver): the origin's user cancelled the
/// job. Prepared: aborted (never runs here; its received inputs go). Committed: its job is
/// cancelled unless it ended. Answers the handoff as it is then.
pub(crate) async fn cancel_handoff(State(fed): State<F>, headers: HeaderMap, Path(h): Path<String>) -> R<Json<HandoffState>> {
    let i = peer_auth(&fed, &headers)?;
    let inc = find(&fed, i, &h).await?;
    let inc = match inc.state.as_str() {
        "prepared" => {
            let one = fed.submit_lock.lock().await;
            let inc = fed.abort_incoming(&one, &h, &inc.origin).await.map_err(internal)?;
            drop(one);
            super::cleanup::sweep(&fed, &inc).await.map_err(internal)?;
            inc
        }
        _ => inc,
    };
    if let (Some(id), "committed") = (inc.local_id, inc.state.as_str()) {
        let admin = Caller {
            user: String::new(),
            admin: true,
        };
        match api::cancel_for(&fed.shared, &admin, id).await {
            Ok(_) => tracing::info!(handoff = %h, job = id, "cancelled by the origin's user"),
            // Ended already: nothing to cancel; the answer shows how it ended.
            Err(e) if e.0 == StatusCode::CONFLICT => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Json(handoff_view(&fed, inc).await))
}

// ----- the origin ----------------------------------------------------------------------

/// Where log `name` (`c<N>/<stream>`) of grid job `gid` is kept here.
fn stored_log(fed: &Federation, gid: u64, c: u64, stream: &str) -> PathBuf {
    fed.shared.data_dir.join(LOG_DIR).join(format!("{gid}-c{c}.{stream}"))
}

/// The logs peer `name` lists for a job of `components` components that this server takes:
/// each `c<N>/stdout|stderr` of a component the job has, once, with a well-formed SHA-256 and
/// at most `max` bytes. What it leaves out, in words (the peer's say-so never makes this server
/// fetch or store more than the job's own logs, nor hold the job up).
fn logs_to_fetch(listed: &[PeerFile], components: u64, max: u64) -> (Vec<(u64, &'static str, PeerFile)>, Vec<String>) {
    let mut take = Vec::new();
    let mut left = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for f in listed {
        let name = api::cut_message(&f.name);
        match parse_log_name(&f.name) {
            None => left.push(format!("'{name}' (not a log name)")),
            Some((c, _)) if c >= components => left.push(format!("{name} (not a log of the job: it has {components} component(s))")),
            Some(_) if f.sha256.len() != 64 || !f.sha256.bytes().all(|b| b.is_ascii_hexdigit()) => {
                left.push(format!("{name} (a malformed SHA-256)"))
            }
            // Not held up for ever by one huge log: it stays at the peer, said so.
            Some(_) if f.size_bytes > max => left.push(format!("{name} ({} bytes)", f.size_bytes)),
            Some((c, stream)) if seen.insert((c, stream)) => take.push((c, stream, f.clone())),
            Some(_) => {}
        }
    }
    (take, left)
}

/// Fetches the logs of migrated grid job `row`, ended at peer `i` (view `r`), in the
/// background, once at a time; records their names when all are here (`data_error` says why
/// not, and which listed logs it left at the peer).
pub(crate) fn logs_back(fed: &F, i: usize, row: &GridRow, r: &HandoffState) {
    let gid = row.id;
    let max = fed.shared.config.files.max_upload_bytes;
    let components = crate::jobdesc::JobDescription::parse(&row.description).map_or(1, |d| d.components.len().max(1)) as u64;
    let (take, left) = logs_to_fetch(&r.logs, components, max);
    let (f2, h) = (fed.clone(), row.handoff.clone().unwrap_or_default());
    data::spawn_once(fed, format!("logs:{gid}"), async move {
        let result = async {
            let dir = f2.shared.data_dir.join(LOG_DIR);
            blocking(move || std::fs::create_dir_all(dir)).await.map_err(|e| e.to_string())?;
            let mut names = Vec::new();
            for (c, stream, f) in take {
                let dest = stored_log(&f2, gid, c, stream);
                let path = format!("/api/v1/peer/handoffs/{}/logs/{}", data::encode(&h), f.name);
                let (fd, ff) = (f2.clone(), f.clone());
                blocking(move || data::fetch(&fd, i, &path, &ff, &dest)).await?;
                names.push(f.name);
            }
            Ok::<_, String>(names)
        }
        .await;
        let j = f2.journal.clone();
        match result {
            Ok(names) => {
                let json = serde_json::to_string(&names).unwrap_or_else(|_| "[]".into());
                let note = (!left.is_empty()).then(|| {
                    let mut list = left.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
                    if left.len() > 5 {
                        list.push_str(&format!(" and {} more", left.len() - 5));
                    }
                    format!("logs left at {} (files.max_upload_bytes is {max}): {list}", f2.peers[i].name)
                });
                blocking(move || {
                    j.set_logs(gid, &json)?;
                    j.set_data_error(gid, note.as_deref())
                })
                .await
                .map_err(|e| e.to_string())
            }
            Err(e) => {
                let msg = format!("logs from {}: {e}", f2.peers[i].name);
                let m = msg.clone();
                let _ = blocking(move || j.set_data_error(gid, Some(&m))).await;
                Err(msg)
            }
        }
    });
}

/// Sends the cancel of migrated grid job `row` to its peer; on an answer records what the
/// peer holds (aborted there before it ran: the grid job is cancelled here). Unanswered: sent
/// again at the next pass.
pub(crate) async fn deliver_cancel(fed: &F, row: &GridRow) -> anyhow::Result<()> {
    let (Some(peer), Some(h)) = (row.peer.as_deref(), row.handoff.as_deref()) else {
        return Ok(());
    };
    let Some(i) = fed.peer_index(peer) else { return Ok(()) };
    if !fed.available(i) {
        return Ok(());
    }
    let client = fed.peers[i].clone();
    let path = format!("/api/v1/peer/handoffs/{}/cancel", data::encode(h));
    let r = blocking(move || client.call::<(), HandoffState>(&path, Some(&()))).await;
    fed.record(i, &r);
    if super::lost::is_missing(&r, h) {
        return super::lost::handoff_missing(fed, i, row, h, "cancel").await;
    }
    super::lost::answered(fed, row.id, h, &r);
    match r.map(HandoffState::from_peer) {
        Ok(s) if s.state == "aborted" => {
            let why = format!("cancelled by its user before it started at {peer}");
            let (j, id) = (fed.journal.clone(), row.id);
            blocking(move || {
                let t = Transition {
                    reason: Some(&why),
                    ..Default::default()
                };
                j.transition(id, state::MIGRATED, state::CANCELLED, &t)
            })
            .await?;
        }
        Ok(s) => {
            let (j, id, json) = (fed.journal.clone(), row.id, serde_json::to_string(&s)?);
            blocking(move || j.set_remote(id, s.job, &json)).await?;
        }
        Err(e) => tracing::warn!(grid_job = row.id, peer, error = %e, "delivering a cancel failed; tried again"),
    }
    Ok(())
}

/// The caller's grid job `raw`, or 404.
pub(super) async fn own_row(fed: &F, caller: &Caller, raw: &str) -> R<GridRow> {
    let not_found = || err(StatusCode::NOT_FOUND, format!("grid job '{}' not found", api::cut_message(raw)));
    let id: u64 = raw.parse().map_err(|_| not_found())?;
    let j = fed.journal.clone();
    match blocking(move || j.grid_job(id)).await.map_err(internal)? {
        Some(r) if caller.admin || r.user == caller.user => Ok(r),
        _ => Err(not_found()),
    }
}

/// `POST /api/v1/grid/jobs/{id}/cancel`: cancels a grid job wherever it is — waiting here, in
/// this server's core, or at a peer (the cancel is durable and delivered until the peer
/// answers; 202 while on its way). 409 once it ended.
pub(crate) async fn cancel_grid_job(State(fed): State<F>, headers: HeaderMap, Path(raw): Path<String>) -> R<Response> {
    let caller = api::authenticate(&fed.shared, &headers)?;
    let row = own_row(&fed, &caller, &raw).await?;
    let id = row.id;
    let conflict = |why: String| err(StatusCode::CONFLICT, format!("grid job {id} {why}"));
    let j = fed.journal.clone();
    match row.state.as_str() {
        state::LOCAL => {
            let local = row.local_id.ok_or_else(|| conflict("has no job here".into()))?;
            let _ = api::cancel_for(&fed.shared, &caller, local).await?;
        }
        state::SUBMITTING => return Err(conflict("is being submitted here; ask again in a moment".into())),
        state::FAILED | state::CANCELLED => return Err(conflict(format!("already ended ({})", row.state))),
        state::MIGRATED
            if row
                .remote
                .as_deref()
                .and_then(|r| serde_json::from_str::<HandoffState>(r).ok())
                .and_then(|r| r.job_state)
                .is_some_and(|s| is_final_state(&s)) =>
        {
            return Err(conflict("already ended at its peer".into()));
        }
        _ => {
            // Waiting, being handed over or at a peer: recorded first (durable), then acted on.
            blocking(move || j.request_cancel(id)).await.map_err(internal)?;
            let why = "cancelled by its user while waiting in the grid queue";
            let t = Transition {
                reason: Some(why),
                ..Default::default()
            };
            let j = fed.journal.clone();
            let waiting = blocking(move || j.transition(id, state::WAITING, state::CANCELLED, &t))
                .await
                .map_err(internal)?;
            if !waiting {
                // Moved on meanwhile (decided, handed over): where it is now.
                let j = fed.journal.clone();
                let now = blocking(move || j.grid_job(id)).await.map_err(internal)?;
                match now {
                    Some(r) if r.state == state::MIGRATED => deliver_cancel(&fed, &r).await.map_err(internal)?,
                    Some(r) if r.state == state::LOCAL => {
                        if let Some(local) = r.local_id {
                            let _ = api::cancel_for(&fed.shared, &caller, local).await;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    let j = fed.journal.clone();
    let row = blocking(move || j.grid_job(id))
        .await
        .map_err(internal)?
        .ok_or_else(|| internal("vanished"))?;
    let g: GridJob = render(&fed, row).await;
    let code = if is_final_state(&g.state) {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((code, Json(g)).into_response())
}

/// `GET /api/v1/grid/jobs/{id}/logs?component=N&stream=stdout|stderr&offset=B&tail=L`: as
/// `GET /api/v1/jobs/{id}/logs` for the job wherever it ran — here, or at a peer once it ended
/// and its logs are back (until then: nothing yet, with the job's state).
pub(crate) async fn grid_logs(State(fed): State<F>, headers: HeaderMap, Path(raw): Path<String>, q: LogQ) -> R<Response> {
    let caller = api::authenticate(&fed.shared, &headers)?;
    let row = own_row(&fed, &caller, &raw).await?;
    if let (state::LOCAL, Some(local)) = (row.state.as_str(), row.local_id) {
        return crate::api_output::job_logs(State(fed.shared.clone()), headers, Path(local.to_string()), q).await;
    }
    let Query(q) = q.map_err(|e| err(StatusCode::BAD_REQUEST, format!("query: {e}")))?;
    let stream = crate::api_output::log_stream(&q)?;
    check_tail(q.tail)?;
    let c = q.component.unwrap_or(0);
    let components = crate::jobdesc::JobDescription::parse(&row.description).map_or(1, |d| d.components.len().max(1)) as u64;
    if c >= components {
        return Err(err(
            StatusCode::NOT_FOUND,
            format!(
                "parameter 'component': grid job {} has {components} component(s) (0..{})",
                row.id,
                components - 1
            ),
        ));
    }
    let back: Option<Vec<String>> = row.logs.as_deref().and_then(|l| serde_json::from_str(l).ok());
    let path = back
        .as_ref()
        .is_some_and(|b| b.iter().any(|n| parse_log_name(n) == Some((c, stream))))
        .then(|| stored_log(&fed, row.id, c, stream));
    let (gid, live) = (row.id, back.is_none() && row.state == state::MIGRATED && row.remote_id.is_some());
    let peer = row.peer.clone();
    let handoff = row.handoff.clone();
    let g = render(&fed, row).await;
    if let (true, Some(peer), Some(h)) = (live, peer, handoff) {
        // Not back yet: as the peer has it now (within the peer's time limit).
        let (bytes, size, cut) = live_log(&fed, &peer, &h, c, stream, &q).await;
        return Ok(crate::api_output::log_bytes_answer(bytes, size, cut, &g.state));
    }
    crate::api_output::log_answer(path, &g.state, &q, &format!("grid job {gid}")).await
}

/// Most bytes of a log read from a peer for one answer.
const LIVE_LOG_BYTES: u64 = 16 << 20;

/// What a read of a peer's live log brought: the bytes, and the log's size and lines cut when
/// the peer cut a tail.
type LiveRead = (Vec<u8>, Option<u64>, Option<u64>);

/// Log `c<c>/<stream>` of handoff `h` as peer `peer` has it now: (bytes, next offset, lines
/// cut) for the request `q`; nothing (from the asked offset) when the peer does not answer. A
/// tail is cut at the peer (`?tail=L`): only the end asked for crosses, however large the log.
async fn live_log(fed: &F, peer: &str, h: &str, c: u64, stream: &str, q: &LogQuery) -> (Vec<u8>, u64, u64) {
    let offset = if q.tail.is_some() { 0 } else { q.offset.unwrap_or(0) };
    let nothing = (Vec::new(), offset, 0);
    let Some(i) = fed.peer_index(peer).filter(|&i| fed.available(i)) else {
        return nothing;
    };
    let client = fed.peers[i].clone();
    let mut path = format!("/api/v1/peer/handoffs/{}/logs/c{c}/{stream}", data::encode(h));
    if let Some(lines) = q.tail {
        path.push_str(&format!("?tail={lines}"));
    }
    let got = blocking(move || -> Result<LiveRead, CallError> {
        let mut resp = client.get_bytes(&path, offset, LIVE_LOG_BYTES)?;
        let status = resp.status().as_u16();
        if status != 200 && status != 206 {
            return Err(CallError::Refused(status, String::new()));
        }
        let head = |n: &str| {
            resp.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok())
        };
        let (size, cut) = (head(crate::api_output::LOG_SIZE_HEADER), head(crate::api_output::LINES_CUT_HEADER));
        let mut out = Vec::new();
        let mut body = std::io::Read::take(resp.body_mut().with_config().limit(u64::MAX).reader(), LIVE_LOG_BYTES);
        std::io::Read::read_to_end(&mut body, &mut out).map_err(|e| CallError::Unreachable(e.to_string()))?;
        Ok((out, size, cut))
    })
    .await;
    if matches!(got, Err(CallError::Unreachable(_))) {
        fed.record(i, &got);
    }
    let Ok((bytes, size, cut)) = got else { return nothing };
    match (q.tail, size, cut) {
        // Cut at the peer.
        (Some(_), Some(size), Some(cut)) => {
            let size = size.max(bytes.len() as u64);
            (bytes, size, cut)
        }
        // A peer that sent the log from its start (no tail there): its last lines of that.
        (Some(lines), _, _) => {
            let size = bytes.len() as u64;
            let (b, cut) = crate::api_output::tail_bytes(&bytes, lines);
            (b, size, cut)
        }
        (None, _, _) => {
            let size = offset + bytes.len() as u64;
            (bytes, size, 0)
        }
    }
}

/// Whether a migrated job's cancel still has to reach its peer.
pub(crate) fn cancel_pending(row: &GridRow, remote: Option<&HandoffState>) -> bool {
    row.cancel && !remote.and_then(|r| r.job_state.as_deref()).is_some_and(is_final_state)
}

/// `CallError` of a refused commit.
pub(crate) fn is_conflict<T>(r: &Result<T, CallError>) -> bool {
    matches!(r, Err(CallError::Refused(409, _)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_names_from_peers_are_only_component_and_stream() {
        assert_eq!(parse_log_name("c0/stdout"), Some((0, "stdout")));
        assert_eq!(parse_log_name("c12/stderr"), Some((12, "stderr")));
        for bad in [
            "c/stdout",
            "0/stdout",
            "c0/other",
            "c0/../../etc/passwd",
            "../c0/stdout",
            "c1234567/stdout",
            "c0",
        ] {
            assert_eq!(parse_log_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn only_the_jobs_own_logs_are_fetched_once_each() {
        let f = |name: &str, size: u64, sha: &str| PeerFile {
            name: name.into(),
            size_bytes: size,
            sha256: sha.into(),
        };
        let good = "a".repeat(64);
        let listed = [
            f("c0/stdout", 5, &good),
            f("c0/stdout", 5, &good),
            f("c1/stderr", 5, &good),
            f("c2/stdout", 5, &good),
            f("../c0/stderr", 5, &good),
            f("c0/stderr", 5, "../x"),
            f("c1/stdout", 50, &good),
        ];
        let (take, left) = logs_to_fetch(&listed, 2, 10);
        let names: Vec<(u64, &str)> = take.iter().map(|(c, s, _)| (*c, *s)).collect();
        assert_eq!(names, vec![(0, "stdout"), (1, "stderr")]);
        assert_eq!(left.len(), 4, "{left:?}");
        assert!(
            left[0].contains("c2/stdout (not a log of the job: it has 2 component(s))"),
            "{left:?}"
        );
        assert!(left[3].contains("c1/stdout (50 bytes)"), "{left:?}");
    }

    #[test]
    fn a_capped_tail_keeps_whole_lines_from_the_end_and_counts_the_rest() {
        assert_eq!(cap_tail(b"ab\ncd\n".to_vec(), 10), (b"ab\ncd\n".to_vec(), 0));
        assert_eq!(cap_tail(b"ab\ncd\nef\n".to_vec(), 6), (b"cd\nef\n".to_vec(), 1));
        assert_eq!(cap_tail(b"ab\ncd\nef\n".to_vec(), 5), (b"ef\n".to_vec(), 2));
        assert_eq!(cap_tail(b"ab\ncd\nef".to_vec(), 4), (b"ef".to_vec(), 2));
        assert_eq!(cap_tail(b"ab\nlonglong".to_vec(), 4), (Vec::new(), 2));
        assert_eq!(cap_tail(b"ab\nlonglong\n".to_vec(), 4), (Vec::new(), 2));
    }
}
