//! `koalesce storage-agent`: one site's storage served over HTTP, as GridFTP served KOALA's
//! sites (003 §3.2.1).
//!
//! - `GET/HEAD/PUT/DELETE /v1/files/{path}`: streamed download (with `Range`, for resume),
//!   size and SHA-256, verified upload (resumable, see below) and deletion.
//! - `GET /v1/uploads/{path}?sha256=H`: how many bytes of that content the agent holds.
//! - `GET /v1/list?prefix=DIR`, `GET /v1/stats`.
//! - `POST /v1/push`: third-party transfer — this agent sends one of its files to another
//!   agent with that agent's credential (passed along by the server); the answer reports bytes,
//!   duration and measured throughput, or a typed fault that says whose it is.
//! - `POST /v1/probe` and `PUT/HEAD /v1/sink`: a bandwidth probe that stores nothing.
//! - `GET /healthz` (the only call without the bearer secret).
//!
//! An upload lands in a partial file under `ROOT/.koalesce-agent/partial/`, checkpointed
//! (fsync + recorded offset) every few MB and when the connection ends early; it is renamed
//! into place only once the whole file's SHA-256 equals the one the uploader declared, so a
//! file whose checksum does not match is never visible. Every client path is resolved beneath
//! the root by the kernel ([`fsops`]). The full interface is in `docs/data-plane.md`.

mod files;
pub mod fsops;
pub mod serve;
mod transfer;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::{watch, Semaphore};

use crate::dataplane::wire::{AgentStats, ErrorBody, OFFSET_HEADER};
use crate::dataplane::{AgentClient, ClientConfig};
use fsops::{PathError, Root, ShaCache};

/// Shortest secret the agent accepts.
const MIN_TOKEN_LEN: usize = 16;

/// How an agent runs.
#[derive(Clone)]
pub struct AgentConfig {
    /// The directory served; nothing outside it is reachable.
    pub root: PathBuf,
    /// The bearer secret clients must present.
    pub token: String,
    /// Largest file an upload may create.
    pub max_file_bytes: u64,
    /// Largest probe (sent or received).
    pub max_probe_bytes: u64,
    /// Uploads are refused (507) when they would leave less than this free.
    pub min_free_bytes: u64,
    /// Request headers must arrive within this; idle kept-alive connections close after it.
    pub header_timeout: Duration,
    /// A request body that delivers nothing, or a client that reads nothing, for this long is
    /// dropped (an upload keeps what arrived, for a resume).
    pub idle_timeout: Duration,
    pub max_connections: usize,
    /// Pushes and probes this agent sends at once (more wait).
    pub max_transfers: usize,
    /// Timeouts of the pushes this agent sends.
    pub client: ClientConfig,
}

impl AgentConfig {
    pub fn new(root: impl Into<PathBuf>, token: impl Into<String>) -> Self {
        AgentConfig {
            root: root.into(),
            token: token.into(),
            max_file_bytes: 1 << 40,
            max_probe_bytes: 64 << 20,
            min_free_bytes: 64 << 20,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            max_connections: 256,
            max_transfers: 8,
            client: ClientConfig::default(),
        }
    }
}

impl std::fmt::Debug for AgentConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentConfig").field("root", &self.root).finish_non_exhaustive()
    }
}

/// Counters behind `GET /v1/stats`.
#[derive(Default)]
struct Counters {
    bytes_received: AtomicU64,
    bytes_sent: AtomicU64,
    uploads_completed: AtomicU64,
    uploads_refused_checksum: AtomicU64,
    uploads_interrupted: AtomicU64,
    pushes_completed: AtomicU64,
    pushes_failed: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> AgentStats {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        AgentStats {
            bytes_received: r(&self.bytes_received),
            bytes_sent: r(&self.bytes_sent),
            uploads_completed: r(&self.uploads_completed),
            uploads_refused_checksum: r(&self.uploads_refused_checksum),
            uploads_interrupted: r(&self.uploads_interrupted),
            pushes_completed: r(&self.pushes_completed),
            pushes_failed: r(&self.pushes_failed),
        }
    }
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// Everything a request handler needs.
pub(crate) struct AgentState {
    config: AgentConfig,
    root: Root,
    partial_dir: PathBuf,
    token_hash: [u8; 32],
    sha: ShaCache,
    stats: Counters,
    uploads: Mutex<HashMap<PathBuf, Arc<files::UploadSlot>>>,
    transfers: Semaphore,
    client: AgentClient,
}

type S = Arc<AgentState>;

/// Partials older than this are removed when an agent starts.
const PARTIAL_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

impl AgentState {
    fn new(config: AgentConfig) -> anyhow::Result<Self> {
        anyhow::ensure!(
            config.token.len() >= MIN_TOKEN_LEN,
            "the agent's secret must be at least {MIN_TOKEN_LEN} characters"
        );
        let root = Root::open(&config.root).with_context(|| format!("opening the root directory {}", config.root.display()))?;
        let partial_dir = config.root.join(fsops::RESERVED).join("partial");
        std::fs::create_dir_all(&partial_dir).with_context(|| format!("creating {}", partial_dir.display()))?;
        remove_old_partials(&partial_dir);
        let token_hash = Sha256::digest(config.token.as_bytes()).into();
        Ok(AgentState {
            root,
            partial_dir,
            token_hash,
            sha: ShaCache::default(),
            stats: Counters::default(),
            uploads: Mutex::new(HashMap::new()),
            transfers: Semaphore::new(config.max_transfers.max(1)),
            client: AgentClient::new(config.client.clone()),
            config,
        })
    }

    /// The constant-time check of a presented secret (hashed first, so lengths match too).
    fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(presented) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        else {
            return false;
        };
        let hash: [u8; 32] = Sha256::digest(presented.trim().as_bytes()).into();
        hash.ct_eq(&self.token_hash).into()
    }
}

fn remove_old_partials(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > PARTIAL_MAX_AGE);
        if old {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// An error answer: status and [`ErrorBody`].
#[derive(Debug)]
pub(crate) struct AgentError {
    status: StatusCode,
    body: Box<ErrorBody>,
    /// `X-Upload-Offset` on a 409 to an upload.
    offset: Option<u64>,
}

impl AgentError {
    fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        AgentError {
            status,
            body: Box::new(ErrorBody {
                error: message.into(),
                code: code.to_string(),
                fault: None,
                actual_sha256: None,
                actual_size: None,
            }),
            offset: None,
        }
    }

    /// An I/O failure on `what`, mapped to the status that says what went wrong.
    fn io(e: std::io::Error, what: &str) -> Self {
        use std::io::ErrorKind as K;
        if fsops::is_escape(&e) {
            return AgentError::new(
                StatusCode::FORBIDDEN,
                "outside_root",
                format!("{what}: the path leads outside the agent's root"),
            );
        }
        match e.kind() {
            K::NotFound => AgentError::new(StatusCode::NOT_FOUND, "not_found", format!("{what}: no such file")),
            K::NotADirectory => AgentError::new(
                StatusCode::CONFLICT,
                "not_a_directory",
                format!("{what}: a parent is not a directory"),
            ),
            K::IsADirectory => AgentError::new(StatusCode::CONFLICT, "is_a_directory", format!("{what}: {e}")),
            K::PermissionDenied => AgentError::new(StatusCode::FORBIDDEN, "permission_denied", format!("{what}: {e}")),
            K::StorageFull | K::QuotaExceeded => AgentError::new(StatusCode::INSUFFICIENT_STORAGE, "storage_full", format!("{what}: {e}")),
            _ => AgentError::new(StatusCode::INTERNAL_SERVER_ERROR, "io_error", format!("{what}: {e}")),
        }
    }
}

impl From<PathError> for AgentError {
    fn from(e: PathError) -> Self {
        AgentError::new(StatusCode::BAD_REQUEST, "bad_path", e.to_string())
    }
}

impl IntoResponse for AgentError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, Json(*self.body)).into_response();
        if let Some(o) = self.offset {
            resp.headers_mut().insert(OFFSET_HEADER, o.into());
        }
        resp
    }
}

type R<T> = Result<T, AgentError>;

/// Runs blocking file work off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> R<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| AgentError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("worker failed: {e}")))
}

async fn require_secret(State(s): State<S>, req: Request, next: Next) -> Response {
    if !s.authorized(req.headers()) {
        return AgentError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong secret (header 'Authorization: Bearer <secret>')",
        )
        .into_response();
    }
    next.run(req).await
}

/// The agent's HTTP interface.
pub(crate) fn router(state: S) -> Router {
    let api = Router::new()
        .route(
            "/v1/files/{*path}",
            get(files::get_file)
                .head(files::head_file)
                .put(files::put_file)
                .delete(files::delete_file),
        )
        .route("/v1/uploads/{*path}", get(files::upload_status))
        .route("/v1/list", get(files::list))
        .route("/v1/stats", get(|State(s): State<S>| async move { Json(s.stats.snapshot()) }))
        .route("/v1/push", post(transfer::push))
        .route("/v1/probe", post(transfer::probe))
        .route("/v1/sink", put(transfer::sink).head(|| async { StatusCode::OK }))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), require_secret));
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .merge(api)
        .fallback(|| async { AgentError::new(StatusCode::NOT_FOUND, "no_endpoint", "no such endpoint") })
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(state)
}

/// Reads a small JSON request body (at most 64 KiB, within the idle timeout).
async fn read_json<T: serde::de::DeserializeOwned>(s: &AgentState, body: Body) -> R<T> {
    let bytes = tokio::time::timeout(s.config.idle_timeout, axum::body::to_bytes(body, 64 << 10))
        .await
        .map_err(|_| AgentError::new(StatusCode::REQUEST_TIMEOUT, "timeout", "request body did not arrive in time"))?
        .map_err(|_| AgentError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", "request body over 64 KiB"))?;
    serde_json::from_slice(&bytes).map_err(|e| AgentError::new(StatusCode::BAD_REQUEST, "bad_request", format!("request body: {e}")))
}

/// An agent serving in the current tokio runtime.
pub struct RunningAgent {
    /// The addresses it listens on, in the order given.
    pub addrs: Vec<SocketAddr>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl RunningAgent {
    /// `http://` + the first address.
    pub fn url(&self) -> String {
        format!("http://{}", self.addrs[0])
    }

    /// Stops accepting; requests in progress get a few seconds to end.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Starts an agent on already bound listeners (inside a tokio runtime).
pub fn start(config: AgentConfig, listeners: Vec<std::net::TcpListener>) -> anyhow::Result<RunningAgent> {
    anyhow::ensure!(!listeners.is_empty(), "the agent needs at least one address to listen on");
    let limits = serve::ConnLimits {
        header_timeout: config.header_timeout,
        idle_timeout: config.idle_timeout,
        max_connections: config.max_connections,
    };
    let app = router(Arc::new(AgentState::new(config)?));
    let (tx, rx) = watch::channel(false);
    let mut addrs = Vec::new();
    let mut tasks = Vec::new();
    for l in listeners {
        l.set_nonblocking(true)?;
        addrs.push(l.local_addr()?);
        let l = tokio::net::TcpListener::from_std(l)?;
        tasks.push(tokio::spawn(serve::serve(
            l,
            app.clone(),
            limits,
            rx.clone(),
            Duration::from_secs(5),
        )));
    }
    Ok(RunningAgent {
        addrs,
        shutdown: tx,
        tasks,
    })
}

/// An agent on its own runtime, for tests and tools that are not async. Dropping it stops it.
pub struct BackgroundAgent {
    agent: Option<RunningAgent>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl BackgroundAgent {
    /// Starts `config` on 127.0.0.1 (a free port).
    pub fn start(config: AgentConfig) -> anyhow::Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let agent = runtime.block_on(async { start(config, vec![listener]) })?;
        Ok(BackgroundAgent {
            agent: Some(agent),
            runtime: Some(runtime),
        })
    }

    pub fn url(&self) -> String {
        self.agent.as_ref().expect("running").url()
    }

    pub fn addr(&self) -> SocketAddr {
        self.agent.as_ref().expect("running").addrs[0]
    }
}

impl Drop for BackgroundAgent {
    fn drop(&mut self) {
        if let (Some(a), Some(rt)) = (self.agent.take(), self.runtime.as_ref()) {
            rt.block_on(a.shutdown());
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

/// How `koalesce storage-agent` was asked to run.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    pub root: PathBuf,
    /// Addresses bound in the namespace the command starts in (the control side the server
    /// reaches).
    pub listen: Vec<String>,
    /// A network namespace (`ip netns` name) the agent moves into after binding `listen`:
    /// its pushes leave from there and `netns_listen` is bound there.
    pub netns: Option<String>,
    pub netns_listen: Vec<String>,
    /// File holding the secret; without one, `ROOT/.koalesce-agent/token` is used (and
    /// created with a random secret when missing).
    pub token_file: Option<PathBuf>,
    /// Written with the first bound address ("host:port") once listening.
    pub addr_file: Option<PathBuf>,
}

/// The secret from `file`, or the agent's own generated one.
pub fn load_or_create_token(root: &Path, file: Option<&Path>) -> anyhow::Result<(String, PathBuf)> {
    let path = match file {
        Some(f) => f.to_path_buf(),
        None => {
            let p = root.join(fsops::RESERVED).join("token");
            if !p.exists() {
                std::fs::create_dir_all(p.parent().unwrap())?;
                let mut raw = [0u8; 32];
                rustix::rand::getrandom(&mut raw, rustix::rand::GetRandomFlags::empty()).context("reading random bytes")?;
                crate::supervise::write_atomic(&p, crate::store::hex(&raw).as_bytes())?;
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))?;
            }
            p
        }
    };
    let token = std::fs::read_to_string(&path).with_context(|| format!("reading the secret from {}", path.display()))?;
    let token = token.trim().to_string();
    anyhow::ensure!(
        token.len() >= MIN_TOKEN_LEN,
        "the secret in {} must be at least {MIN_TOKEN_LEN} characters",
        path.display()
    );
    Ok((token, path))
}

/// Moves the calling thread into the network namespace `name` (as `ip netns exec` does).
pub fn enter_netns(name: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        !name.is_empty() && !name.contains('/') && name != "." && name != "..",
        "bad network namespace name '{name}'"
    );
    let path = ["/run/netns", "/var/run/netns"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
        .ok_or_else(|| anyhow::anyhow!("no network namespace '{name}' (see `ip netns list`)"))?;
    let f = std::fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
    use std::os::fd::AsFd;
    rustix::thread::move_into_link_name_space(f.as_fd(), Some(rustix::thread::LinkNameSpaceType::Network))
        .with_context(|| format!("entering network namespace '{name}' (needs CAP_SYS_ADMIN)"))?;
    Ok(())
}

/// `koalesce storage-agent`: binds, optionally enters a namespace, serves until SIGINT/SIGTERM.
pub fn run_blocking(opts: AgentOptions, mut config: AgentConfig) -> anyhow::Result<()> {
    crate::init_tracing();
    anyhow::ensure!(!opts.listen.is_empty(), "give at least one --listen address");
    anyhow::ensure!(opts.netns.is_some() || opts.netns_listen.is_empty(), "--netns-listen needs --netns");
    std::fs::create_dir_all(&opts.root).with_context(|| format!("creating the root {}", opts.root.display()))?;
    let (token, token_path) = load_or_create_token(&opts.root, opts.token_file.as_deref())?;
    config.root = opts.root.clone();
    config.token = token;
    let bind = |a: &String| std::net::TcpListener::bind(a.as_str()).with_context(|| format!("binding {a}"));
    let mut listeners: Vec<std::net::TcpListener> = opts.listen.iter().map(bind).collect::<anyhow::Result<_>>()?;
    // Before any thread exists: the runtime's threads are created in the namespace.
    if let Some(ns) = &opts.netns {
        enter_netns(ns)?;
        for a in &opts.netns_listen {
            listeners.push(bind(a)?);
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(async move {
        let agent = start(config, listeners)?;
        if let Some(f) = &opts.addr_file {
            crate::supervise::write_atomic(f, agent.addrs[0].to_string().as_bytes())?;
        }
        let shown: Vec<String> = agent.addrs.iter().map(|a| format!("http://{a}")).collect();
        println!(
            "koalesce storage-agent: serving {} on {}{} (secret in {})",
            opts.root.display(),
            shown.join(", "),
            opts.netns
                .as_ref()
                .map(|n| format!(" (pushes leave from network namespace {n})"))
                .unwrap_or_default(),
            token_path.display()
        );
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        agent.shutdown().await;
        anyhow::Ok(())
    })
}
