//! The grid scheduler: every `check_interval_ms` (or when a job arrives) it finishes what a
//! crash may have interrupted, follows migrated jobs, then decides the grid queue in order.

use std::sync::Arc;
use std::time::Duration;

use koalesce_core::federation::live::explain;
use koalesce_core::federation::policy::{sender_initiated, stays_local, Offer, Target};

use super::given_back::Abort;
use super::journal::{state, GridRow, Transition};
use super::wire::{HandoffRequest, HandoffState, OfferAnswer, OfferRequest};
use super::{blocking, CallError, Federation, PeerAlgorithm};
use crate::jobdesc::JobDescription;

pub(super) async fn run(fed: Arc<Federation>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let period = Duration::from_millis(fed.cfg.check_interval_ms);
    let mut next_check = 0u64;
    loop {
        if *stop.borrow() {
            return;
        }
        if let Err(e) = step(&fed).await {
            tracing::warn!(error = %e, "grid scheduler step failed");
        }
        let now = crate::now_ms();
        if fed.cfg.algorithm.volunteers() && now >= next_check {
            next_check = now + fed.params.sigma_ms;
            volunteer_if_idle(&fed).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = fed.wake.notified() => {}
            _ = stop.changed() => {}
        }
    }
}

async fn rows(fed: &Arc<Federation>, st: &'static str) -> anyhow::Result<Vec<GridRow>> {
    let j = fed.journal.clone();
    Ok(blocking(move || j.grid_jobs(&[st], None)).await?)
}

async fn transition(fed: &Arc<Federation>, id: u64, from: &'static str, to: &'static str, t: Transition<'_>) -> anyhow::Result<bool> {
    let j = fed.journal.clone();
    let (peer, handoff, reason) = (
        t.peer.map(str::to_string),
        t.handoff.map(str::to_string),
        t.reason.map(str::to_string),
    );
    let (local_id, remote_id, new_attempt, given_back) = (t.local_id, t.remote_id, t.new_attempt, t.given_back);
    Ok(blocking(move || {
        j.transition(
            id,
            from,
            to,
            &Transition {
                local_id,
                peer: peer.as_deref(),
                handoff: handoff.as_deref(),
                remote_id,
                reason: reason.as_deref(),
                new_attempt,
                given_back,
            },
        )
    })
    .await?)
}

/// One pass: unfinished business first, then the waiting jobs in order.
pub(super) async fn step(fed: &Arc<Federation>) -> anyhow::Result<()> {
    let _one = fed.gs_lock.lock().await;
    for row in rows(fed, state::SUBMITTING).await? {
        submit_local(fed, &row, state::SUBMITTING, None).await?;
    }
    for row in rows(fed, state::HANDING).await? {
        resolve_handing(fed, &row).await?;
    }
    // Released ones are over for the federation: nothing left to follow.
    let j = fed.journal.clone();
    for row in blocking(move || j.migrated_unreleased()).await? {
        follow(fed, &row).await?;
    }
    for row in rows(fed, state::WAITING).await? {
        decide(fed, &row).await?;
    }
    // As a receiver: handoffs prepared and never committed, data of aborted ones.
    super::cleanup::housekeeping(fed).await?;
    Ok(())
}

/// Calls peer `i` off the async threads and records whether it answered.
async fn call<B, T>(fed: &Arc<Federation>, i: usize, path: String, body: Option<B>) -> Result<T, CallError>
where
    B: serde::Serialize + Send + 'static,
    T: serde::de::DeserializeOwned + Send + 'static,
{
    let peer = fed.peers[i].clone();
    let r = blocking(move || peer.call::<B, T>(&path, body.as_ref())).await;
    fed.record(i, &r);
    r
}

/// Why a job cannot leave this server, if so.
fn pinned(desc: &JobDescription) -> Option<&'static str> {
    desc.components
        .iter()
        .any(|c| c.site.is_some())
        .then_some("a component is fixed to a site of this server")
}

/// The data a job would move, in words ("" when none).
fn data_words(req: &koalesce_core::federation::live::Requirements) -> String {
    if req.input_bytes == 0 {
        return String::new();
    }
    let size = |b: u64| {
        if b >= 1_000_000 {
            format!("{:.1} MB", b as f64 / 1e6)
        } else {
            format!("{:.1} kB", b as f64 / 1e3)
        }
    };
    format!("; data: {} in, {} out expected", size(req.input_bytes), size(req.output_bytes))
}

async fn decide(fed: &Arc<Federation>, row: &GridRow) -> anyhow::Result<()> {
    if row.cancel {
        // Cancelled while being handed over, and the handoff was aborted: it ends here.
        transition(fed, row.id, state::WAITING, state::CANCELLED, reason("cancelled by its user")).await?;
        return Ok(());
    }
    let desc = match JobDescription::parse(&row.description) {
        Ok(d) => d,
        Err(e) => {
            // Validated at submission; a broken row fails alone.
            transition(fed, row.id, state::WAITING, state::FAILED, reason(&format!("description: {e:?}"))).await?;
            return Ok(());
        }
    };
    let req = match fed.requirements(&desc) {
        Ok(r) => r,
        Err(e) => {
            transition(fed, row.id, state::WAITING, state::FAILED, reason(&e)).await?;
            return Ok(());
        }
    };
    let (local, local_awt) = fed.offer(&req, None);
    let s = |m: Option<u64>| m.map_or("infinite".to_string(), |v| format!("{:.1} s", v as f64 / 1000.0));
    if fed.cfg.algorithm == PeerAlgorithm::Local {
        return submit_local(fed, row, state::WAITING, Some("federation algorithm is local".into())).await;
    }
    if let Some(why) = pinned(&desc) {
        return submit_local(fed, row, state::WAITING, Some(format!("stays here: {why}"))).await;
    }
    if stays_local(&fed.params, local_awt) {
        let why = format!("local AWT {} < φ = {} s", s(local_awt), fed.params.phi_ms / 1000);
        return submit_local(fed, row, state::WAITING, Some(why)).await;
    }
    let receiver_only = match fed.cfg.algorithm {
        PeerAlgorithm::ReceiverInitiated => true,
        PeerAlgorithm::Symmetric => !fed.recent_volunteers().is_empty(),
        _ => false,
    };
    if receiver_only {
        // R-I (and SY-I while volunteers are about): wait in the grid queue for a volunteer,
        // re-examining the local AWT every pass.
        let why = format!(
            "waiting for a volunteer: local AWT {} ≥ φ = {} s",
            s(local_awt),
            fed.params.phi_ms / 1000
        );
        if row.reason.as_deref() != Some(why.as_str()) {
            transition(fed, row.id, state::WAITING, state::WAITING, reason(&why)).await?;
        }
        return Ok(());
    }
    // S-I: ask every available peer at once; those that do not answer are left out.
    let ask = OfferRequest {
        processors: req.processors,
        estimate_ms: req.estimate_ms,
        home_mhz: req.home_mhz,
        input_bytes: req.input_bytes,
        output_bytes: req.output_bytes,
    };
    let mut asked = Vec::new();
    for i in (0..fed.peers.len()).filter(|&i| fed.available(i)) {
        let f = fed.clone();
        asked.push((
            i,
            tokio::spawn(async move { call::<_, OfferAnswer>(&f, i, "/api/v1/peer/offer".into(), Some(ask)).await }),
        ));
    }
    let mut peers: Vec<usize> = Vec::new();
    let mut offers: Vec<Offer> = Vec::new();
    for (i, h) in asked {
        if let Ok(Ok(a)) = h.await {
            if let Some(o) = usable(&a) {
                peers.push(i);
                offers.push(o);
            }
        }
    }
    let d = sender_initiated(&fed.params, local, &offers);
    let best = koalesce_core::federation::policy::best(&fed.params, &offers).map(|k| (fed.peers[peers[k]].name.as_str(), &offers[k]));
    let why = format!("{}{}", explain(&fed.params, &local, local_awt, best), data_words(&req));
    match d.target {
        Target::Local => submit_local(fed, row, state::WAITING, Some(format!("stays: {why}"))).await,
        Target::Peer(k) => hand_off(fed, row, peers[k], format!("moved: {why}")).await,
    }
}

/// A peer's answer as an offer, unless its RU is not a fraction (an untrusted peer's say-so).
fn usable(a: &OfferAnswer) -> Option<Offer> {
    (a.ru.is_finite() && (0.0..=1.0).contains(&a.ru)).then_some(Offer { att: a.att_ms, ru: a.ru })
}

fn reason(r: &str) -> Transition<'_> {
    Transition {
        reason: Some(r),
        ..Default::default()
    }
}

/// Puts a grid job into this server's core (once, whatever crashes in between).
async fn submit_local(fed: &Arc<Federation>, row: &GridRow, from: &'static str, why: Option<String>) -> anyhow::Result<()> {
    if from != state::SUBMITTING && !transition(fed, row.id, from, state::SUBMITTING, reason(why.as_deref().unwrap_or(""))).await? {
        return Ok(());
    }
    let desc = JobDescription::parse(&row.description).map_err(|e| anyhow::anyhow!("grid job {}: {e:?}", row.id))?;
    let tag = format!("{}/{}", fed.cfg.name, row.id);
    let one = fed.submit_lock.lock().await;
    let submitted = fed.submit_once(&one, &desc, &tag, &row.user).await;
    drop(one);
    match submitted {
        Ok(id) => {
            transition(
                fed,
                row.id,
                state::SUBMITTING,
                state::LOCAL,
                Transition {
                    local_id: Some(id),
                    ..Default::default()
                },
            )
            .await?;
            // Its user cancelled it while it was being decided: cancelled here now.
            let j = fed.journal.clone();
            let gid = row.id;
            if blocking(move || j.grid_job(gid)).await?.is_some_and(|r| r.cancel) {
                let admin = crate::api::Caller {
                    user: String::new(),
                    admin: true,
                };
                let _ = crate::api::cancel_for(&fed.shared, &admin, id).await;
            }
        }
        Err(e) if e.0.is_client_error() => {
            transition(
                fed,
                row.id,
                state::SUBMITTING,
                state::FAILED,
                reason(&format!("refused here: {}", e.1)),
            )
            .await?;
        }
        // Not durable (the store failed): tried again on the next pass.
        Err(e) => anyhow::bail!("grid job {}: {}", row.id, e.1),
    }
    Ok(())
}

async fn hand_off(fed: &Arc<Federation>, row: &GridRow, i: usize, why: String) -> anyhow::Result<()> {
    let peer = fed.peers[i].name.clone();
    let h = format!("{}-{}-{}", fed.cfg.name, row.id, row.attempts + 1);
    let t = Transition {
        peer: Some(&peer),
        handoff: Some(&h),
        reason: Some(&why),
        new_attempt: true,
        ..Default::default()
    };
    if !transition(fed, row.id, state::WAITING, state::HANDING, t).await? {
        return Ok(());
    }
    let (description, inputs) = match JobDescription::parse(&row.description).map_err(|e| format!("{e:?}")).and_then(|d| {
        let inputs = super::data::input_files(fed, &d)?;
        Ok((super::data::for_peer(&d).to_toml(), inputs))
    }) {
        Ok(x) => x,
        Err(e) => {
            let r = format!("{why}; but its data cannot move ({e}): runs here");
            transition(fed, row.id, state::HANDING, state::SUBMITTING, reason(&r)).await?;
            return submit_local(fed, row, state::SUBMITTING, None).await;
        }
    };
    let body = HandoffRequest {
        handoff: h.clone(),
        user: row.user.clone(),
        description,
        inputs,
    };
    match call::<_, HandoffState>(fed, i, "/api/v1/peer/handoffs".into(), Some(body)).await {
        // Committed already (it held this handoff from before): the peer's, as after a commit.
        Ok(s) if s.state == "prepared" || s.state == "committed" => {
            // The commit point: from here on the job is the peer's.
            transition(fed, row.id, state::HANDING, state::MIGRATED, Transition::default()).await?;
            let mut row = row.clone();
            row.handoff = Some(h);
            row.peer = Some(peer);
            // As the journal has it since WAITING → HANDING.
            row.attempts += 1;
            follow(fed, &row).await
        }
        Ok(s) => {
            let r = format!("{why}; but {peer} answered '{}': runs here", super::wire::plain(&s.state, 64));
            transition(fed, row.id, state::HANDING, state::SUBMITTING, reason(&r)).await?;
            submit_local(fed, row, state::SUBMITTING, None).await
        }
        Err(CallError::Refused(code, m)) => {
            let r = format!("{why}; but {peer} refused it ({code}: {m}): runs here");
            transition(fed, row.id, state::HANDING, state::SUBMITTING, reason(&r)).await?;
            submit_local(fed, row, state::SUBMITTING, None).await
        }
        // No answer: the peer may or may not hold it; resolved on a later pass.
        Err(CallError::Unreachable(_)) => Ok(()),
    }
}

/// A handoff whose phase one was not confirmed: abort it at the peer, then the job waits in
/// the grid queue again. Without an answer it stays as it is (it runs nowhere meanwhile).
async fn resolve_handing(fed: &Arc<Federation>, row: &GridRow) -> anyhow::Result<()> {
    let (Some(peer), Some(h)) = (row.peer.as_deref(), row.handoff.as_deref()) else {
        anyhow::bail!("grid job {}: handing without peer or handoff", row.id);
    };
    let Some(i) = fed.peer_index(peer) else {
        // The peer left the configuration: it cannot have committed (only we commit).
        transition(
            fed,
            row.id,
            state::HANDING,
            state::WAITING,
            reason(&format!("peer {peer} is no longer configured")),
        )
        .await?;
        return Ok(());
    };
    if !fed.available(i) {
        return Ok(());
    }
    match call::<(), HandoffState>(fed, i, format!("/api/v1/peer/handoffs/{h}/abort"), Some(())).await {
        Ok(s) if s.state == "aborted" => {
            // Not the peer's doing (its answer never came): not counted as given back.
            let r = format!("handoff {h} to {peer} was not confirmed; aborted there");
            let here = fed.runs_here(&row.description);
            let next = super::given_back::decided_again(row, peer, r, Abort::Unconfirmed, here);
            if transition(fed, row.id, state::HANDING, next.to, reason(&next.reason)).await? && next.to == state::SUBMITTING {
                tracing::warn!(grid_job = row.id, %peer, "{}", next.reason);
                submit_local(fed, row, state::SUBMITTING, None).await?;
            }
        }
        Ok(s) if s.state == "committed" => {
            transition(fed, row.id, state::HANDING, state::MIGRATED, Transition::default()).await?;
        }
        Ok(_) | Err(_) => {}
    }
    Ok(())
}

/// A migrated job: commit it at the peer (again, after a crash; while the peer fetches its
/// inputs), follow its state, and once it ended fetch its logs (and a succeeded job's outputs)
/// back. A cancel its user asked for goes to the peer instead of the commit.
async fn follow(fed: &Arc<Federation>, row: &GridRow) -> anyhow::Result<()> {
    let remote = row.remote.as_deref().and_then(|r| serde_json::from_str::<HandoffState>(r).ok());
    if let Some(r) = &remote {
        if r.job_state.as_deref().is_some_and(koalesce_api::dto::is_final_state) {
            let i = row.peer.as_deref().and_then(|p| fed.peer_index(p));
            if row.logs.is_none() {
                if let Some(i) = i.filter(|&i| fed.available(i)) {
                    super::results::logs_back(fed, i, row, r);
                }
            } else if r.job_state.as_deref() == Some("succeeded") && row.outputs.is_none() {
                outputs_back(fed, row, r.clone()).await?;
            } else if !row.released {
                release(fed, row).await?;
            }
            return Ok(());
        }
    }
    if super::results::cancel_pending(row, remote.as_ref()) {
        return super::results::deliver_cancel(fed, row).await;
    }
    let (Some(peer), Some(h)) = (row.peer.as_deref(), row.handoff.as_deref()) else {
        anyhow::bail!("grid job {}: migrated without peer or handoff", row.id);
    };
    let Some(i) = fed.peer_index(peer) else { return Ok(()) };
    if !fed.available(i) {
        return Ok(());
    }
    let r = if row.remote_id.is_none() {
        call::<(), HandoffState>(fed, i, format!("/api/v1/peer/handoffs/{h}/commit"), Some(())).await
    } else {
        call::<(), HandoffState>(fed, i, format!("/api/v1/peer/handoffs/{h}"), None).await
    };
    if row.remote_id.is_none() && super::results::is_conflict(&r) {
        return super::given_back::commit_refused(fed, i, row, h).await;
    }
    if super::lost::is_missing(&r, h) {
        let asked = if row.remote_id.is_none() { "commit" } else { "look" };
        return super::lost::handoff_missing(fed, i, row, h, asked).await;
    }
    super::lost::answered(fed, row.id, h, &r);
    if let Ok(s) = r.map(HandoffState::from_peer) {
        let json = serde_json::to_string(&s)?;
        // Written (a synchronous commit) only when it changed, not for every job every pass.
        if row.remote.as_deref() != Some(json.as_str()) || (s.job.is_some() && row.remote_id != s.job) {
            let (j, id) = (fed.journal.clone(), row.id);
            blocking(move || j.set_remote(id, s.job, &json)).await?;
        }
    }
    Ok(())
}

/// An ended migrated job whose outputs are recorded here: tells the peer it may drop the
/// inputs it received for it (`done`, idempotent), then records that it answered. Unanswered:
/// asked again at the next pass; a peer that never hears it keeps files, nothing more.
async fn release(fed: &Arc<Federation>, row: &GridRow) -> anyhow::Result<()> {
    let (Some(peer), Some(h)) = (row.peer.as_deref(), row.handoff.as_deref()) else {
        return Ok(());
    };
    let Some(i) = fed.peer_index(peer) else { return Ok(()) };
    if !fed.available(i) {
        return Ok(());
    }
    let path = format!("/api/v1/peer/handoffs/{}/done", super::data::encode(h));
    match call::<(), HandoffState>(fed, i, path, Some(())).await {
        Ok(_) => {
            let (j, id) = (fed.journal.clone(), row.id);
            blocking(move || j.set_released(id)).await?;
        }
        Err(e) => tracing::warn!(grid_job = row.id, peer, error = %e, "telling the peer the job is done failed"),
    }
    Ok(())
}

/// Fetches a succeeded migrated job's outputs back (in the background; nothing to fetch:
/// recorded at once). A peer that released the job without our `done` (its
/// `received_retention_ms` passed while this server was away) no longer has them: recorded as
/// none, with a `data_error` saying so.
async fn outputs_back(fed: &Arc<Federation>, row: &GridRow, r: HandoffState) -> anyhow::Result<()> {
    let (Some(peer), Some(rid)) = (row.peer.as_deref(), r.job) else {
        return Ok(());
    };
    let Some(i) = fed.peer_index(peer) else { return Ok(()) };
    let desc = JobDescription::parse(&row.description).map_err(|e| anyhow::anyhow!("grid job {}: {e:?}", row.id))?;
    let lost = (r.released && !desc.outputs.is_empty())
        .then(|| format!("outputs from {peer}: removed there before they were fetched (its received_retention_ms passed)"));
    if desc.outputs.is_empty() || lost.is_some() {
        let (j, id) = (fed.journal.clone(), row.id);
        blocking(move || {
            j.set_outputs(id, "[]")?;
            j.set_data_error(id, lost.as_deref())
        })
        .await?;
        return Ok(());
    }
    if fed.available(i) {
        super::data::fetch_outputs(fed, i, row, rid, &desc, r.outputs);
    }
    Ok(())
}

/// Measures the bandwidth from peer `i` to here every `probe_interval_ms` (one probe of
/// `probe_bytes`; after a failure again in `backoff_initial_ms`). Apart from the grid
/// scheduler, so a slow or silent peer never delays its decisions; a probe that fails does
/// not mark the peer unavailable (calls that matter do).
pub(super) async fn probe_peer(fed: Arc<Federation>, i: usize, mut stop: tokio::sync::watch::Receiver<bool>) {
    if fed.cfg.probe_bytes == 0 {
        return;
    }
    loop {
        if *stop.borrow() {
            return;
        }
        let (peer, n) = (fed.peers[i].clone(), fed.cfg.probe_bytes);
        let r = blocking(move || -> Result<f64, String> {
            let started = std::time::Instant::now();
            let mut resp = peer
                .get_bytes(&format!("/api/v1/peer/probe?bytes={n}"), 0, n)
                .map_err(|e| e.to_string())?;
            let status = resp.status().as_u16();
            let mut got = 0u64;
            let mut body = resp.body_mut().with_config().limit(n + 1).reader();
            let mut buf = vec![0u8; 64 << 10];
            loop {
                match std::io::Read::read(&mut body, &mut buf) {
                    Ok(0) => break,
                    Ok(k) => got += k as u64,
                    Err(e) => return Err(e.to_string()),
                }
            }
            if status != 200 || got != n {
                return Err(format!("probe: status {status}, {got} of {n} bytes"));
            }
            Ok(n as f64 * 8.0 / started.elapsed().as_secs_f64().max(1e-6))
        })
        .await;
        let wait = match r {
            Ok(bps) => {
                fed.measured(i, bps);
                fed.cfg.probe_interval_ms
            }
            Err(e) => {
                tracing::debug!(peer = %fed.peers[i].name, error = %e, "bandwidth probe failed");
                fed.cfg.backoff_initial_ms
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
            _ = stop.changed() => {}
        }
    }
}

/// R-I and SY-I: at each σ, a server whose RU is below δ volunteers to every available peer
/// (they answer at once; what they offer comes later, as handoffs).
async fn volunteer_if_idle(fed: &Arc<Federation>) {
    let ru = {
        let st = fed.shared.lock();
        let view = koalesce_core::federation::live::server_view(&st.core, crate::now_ms());
        koalesce_core::federation::policy::ru(view.busy, view.snapshot.nodes)
    };
    if !koalesce_core::federation::policy::volunteers(&fed.params, ru) {
        return;
    }
    for i in (0..fed.peers.len()).filter(|&i| fed.available(i)) {
        let _ = call::<(), serde_json::Value>(fed, i, "/api/v1/peer/volunteer".into(), Some(())).await;
    }
}

/// A peer volunteered: the first job waiting in the grid queue is offered to it and moves if
/// its ATT there is lower (or within ε with a lower RU), 002 §III-A2.
pub(crate) async fn on_volunteer(fed: &Arc<Federation>, i: usize) -> anyhow::Result<()> {
    let _one = fed.gs_lock.lock().await;
    let Some(row) = rows(fed, state::WAITING).await?.into_iter().next() else {
        return Ok(());
    };
    let Ok(desc) = JobDescription::parse(&row.description) else {
        return Ok(());
    };
    if pinned(&desc).is_some() {
        return Ok(());
    }
    let Ok(req) = fed.requirements(&desc) else { return Ok(()) };
    let (local, _) = fed.offer(&req, None);
    let ask = OfferRequest {
        processors: req.processors,
        estimate_ms: req.estimate_ms,
        home_mhz: req.home_mhz,
        input_bytes: req.input_bytes,
        output_bytes: req.output_bytes,
    };
    let Ok(a) = call::<_, OfferAnswer>(fed, i, "/api/v1/peer/offer".into(), Some(ask)).await else {
        return Ok(());
    };
    let Some(theirs) = usable(&a) else {
        tracing::warn!(peer = %fed.peers[i].name, ru = a.ru, "a volunteer's offer has an RU outside [0, 1]: ignored");
        return Ok(());
    };
    if !koalesce_core::federation::policy::receiver_initiated(&fed.params, local, theirs) {
        return Ok(());
    }
    let s = |m: Option<u64>| m.map_or("infinite".to_string(), |v| format!("{:.1} s", v as f64 / 1000.0));
    let why = format!(
        "moved (R-I): {} volunteered; its ATT {} (RU {:.2}) against {} here (RU {:.2})",
        fed.peers[i].name,
        s(theirs.att),
        theirs.ru,
        s(local.att),
        local.ru
    );
    hand_off(fed, &row, i, why).await
}
