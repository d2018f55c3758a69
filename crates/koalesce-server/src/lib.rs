//! # koalesce-server
//!
//! The koalesce daemon: the scheduling core of `koalesce-core` driven in real time (tokio),
//! its state in SQLite, components run by the local executor under supervisors, a REST API
//! (axum) as in `docs/server-contract.md`.
//!
//! ## Data directory layout
//!
//! ```text
//! DIR/                                              0700: the server's alone
//!   koalesce.db, koalesce.db-wal, koalesce.db-shm   SQLite (WAL), 0600: jobs, tokens, files,
//!                                                   replicas, launches (launch intents)
//!   server.lock                                     flock held by the running server
//!   federation.db                                   the federation's journal (grid queue,
//!                                                   handoffs; only with [federation], see peer)
//!   server.addr                                     "host:port" the server listens on
//!                                                   (written after bind; with --listen :0 too)
//!   sites/<site>/storage/<file>.<hash8>             replicas and staged inputs of that site, 0600
//!                                                   (copies land as *.part.* then are renamed)
//!   sites/<site>/jobs/<job>/a<attempt>-c<component>/   record directory (0700)
//!       supervisor.json  {pid, proc_start, started_ms, cgroup} or {fenced: true}   (created
//!                        O_EXCL; cgroup: the component's control group, where writable)
//!       go               written by the daemon: the held supervisor may run the program (a
//!                        hard link of supervisor.json, or of a local site's `jobs/.go`)
//!       abort            written by the daemon: the held supervisor gives up, never runs it
//!       running.json     the program started (a hard link of supervisor.json)
//!       exit.json        {exit_code, signal, spawn_error, finished_ms, never_started, oom_killed, site_fault,
//!                         running: {child_pid, started_ms, ...}}   (not fsynced: see supervise)
//!       stdout, stderr   the component's output
//!       supervisor.log   the supervisor's own diagnostics (only when it has any)
//!       inputs/          private copies of inputs for a job run under another account
//!       work/            the program's working directory (the only place it may write;
//!                        owned by the job's account); declared outputs are collected here
//! ```
//!
//! ## Security
//!
//! Jobs and API users are untrusted (README, "Security"). A component runs confined
//! ([`sandbox`]): Landlock to its `work/` directory and read-only system paths; as root,
//! under the job user's Unix account ([`users`]) and with the data directory hidden; in a
//! control group per component ([`cgroup`]) so cancel kills every descendant. Outputs are
//! collected without following links ([`transfer::find_output`]). The HTTP server caps
//! connections and times out idle ones ([`listener`]).
//!
//! ## Crash safety
//!
//! - A submission is answered 201 only after its row is committed (group commit, see
//!   [`store`]).
//! - Before a component is spawned its launch intent (row in `launches`) is committed. The
//!   supervisor's first act is to create `supervisor.json` exclusively; if it exists, it does
//!   not run. On restart, an intent whose directory has no record is *fenced* by the daemon
//!   (it creates the record itself, exclusively), so a late supervisor can never start it;
//!   the component is then a soft error and the job is requeued. A launch is never repeated
//!   in the same directory and every attempt has a new directory.
//! - Start barrier: a supervisor, once its record exists, holds until the daemon writes `go`
//!   into its directory; the daemon writes the `go` files of a launch only once *every*
//!   component's supervisor holds its directory. So after a crash in the middle of a launch
//!   either some supervisor never took its directory (it is fenced, the others are told to
//!   `abort` and exit without running anything, the job is requeued: no program ran, so the
//!   next attempt is no second launch), or all did (recovery writes the missing `go` files,
//!   rolling the launch forward, and re-adopts the job). No component runs twice.
//! - On restart (`daemon::recover`), jobs are rebuilt from the database in id order:
//!   running jobs whose launch intents are all present and whose launch goes on at the start
//!   barrier are re-adopted
//!   ([`koalesce_core::Scheduler::adopt_running`]) and their components tracked through the
//!   supervisors' records; every other unfinished job is resubmitted with its id and tries
//!   ([`koalesce_core::Scheduler::restore_progress`]). Placed/claimed jobs go back to the queue
//!   (their claims died with the daemon).
//! - Copies are verified against the catalogue's SHA-256 and renamed into place only then.
//!
//! ## Runners
//!
//! - `independent`: components start together (the core's `Launch`; their programs start at
//!   once behind the start barrier, when every supervisor is up) but do not know each other; a
//!   non-zero exit fails the job.
//! - `coupled`: as independent, plus `KOALESCE_PEERS` (one `127.0.0.1:port` per rank, ports
//!   free at launch) so components can connect; every component gets `KOALESCE_RANK`,
//!   `KOALESCE_SIZE`, `KOALESCE_JOB_ID`, `KOALESCE_SITE`, `KOALESCE_PROCESSORS` and
//!   `KOALESCE_INPUT_<NAME>` (name upper-cased, other characters as `_`).
//! - `bag`: placed when at least k = `min_components` of its n components fit (the core places
//!   the whole bag if it can, else one component at a time, largest first); components that do
//!   not fit are skipped in that run. A failing component does not fail the bag: the job
//!   succeeds when at least k components exit 0, and fails otherwise.

pub mod agent;
pub mod api;
mod api_bags;
mod api_files;
pub mod api_jobctl;
pub mod api_output;
pub mod backend;
pub mod backup;
pub mod bench;
pub mod cgroup;
pub mod config;
pub mod daemon;
pub mod dataplane;
pub mod file_import;
pub mod gridway;
pub mod http_agent;
pub mod job_list;
pub use koalesce_api::jobdesc;
pub mod launcher;
pub mod listener;
pub mod local;
pub mod metrics;
pub mod openapi;
pub mod peer;
pub mod priority;
pub mod quotas;
pub mod realtime;
pub mod reservations;
pub mod sandbox;
pub mod slurm;
pub mod store;
pub mod supervise;
pub mod supervised;
pub mod supervisor_cmd;
pub mod transfer;
pub mod users;
pub mod web;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;

pub use config::ServerConfig;
pub use store::create_token;
pub use supervisor_cmd::SupervisorCommand;

/// Name of the database file in the data dir.
pub const DB_FILE: &str = "koalesce.db";
/// File the server writes its bound address to.
pub const ADDR_FILE: &str = "server.addr";

/// The daemon's clock in Unix milliseconds (the core's `now`): a monotonic clock anchored once
/// to the wall clock, so it never goes backwards when the wall clock is stepped.
pub fn now_ms() -> u64 {
    static ANCHOR: OnceLock<(Instant, u64)> = OnceLock::new();
    let (at, epoch_ms) = ANCHOR.get_or_init(|| {
        // Before 1970 only on a broken clock; the anchor is then 0 and times are relative.
        let epoch_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        (Instant::now(), epoch_ms)
    });
    epoch_ms + at.elapsed().as_millis() as u64
}

/// Installs the `tracing` subscriber (env filter `RUST_LOG`, default `info`). Idempotent.
pub fn init_tracing() {
    init_tracing_as(LogFormat::Text);
}

/// How the server's log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event; ANSI colours only on a terminal without NO_COLOR.
    #[default]
    Text,
    /// One JSON object per line (timestamp, level, target, fields), for log collectors.
    Json,
}

/// Logging to standard error at `RUST_LOG`'s levels (default info), in `format`. The first
/// call wins.
pub fn init_tracing_as(format: LogFormat) {
    use std::io::IsTerminal;
    let filter = || tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter()).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()))
            .try_init(),
    };
}

/// How to start a server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    pub data_dir: PathBuf,
    /// Overrides `config.listen` ("127.0.0.1:0" picks a free port).
    pub listen: Option<String>,
    pub config: ServerConfig,
    /// How components' supervisors are started (`koalesce supervise` in production).
    pub supervisor: SupervisorCommand,
}

/// A server running in this process.
pub struct RunningServer {
    pub addr: SocketAddr,
    pub shared: Arc<daemon::Shared>,
    shutdown: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    _lock: nix::fcntl::Flock<std::fs::File>,
}

impl RunningServer {
    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting requests and stops the driver. Running components keep running (they
    /// are supervised outside the server) and are re-adopted by the next server.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        let _ = self.shared.store.flush().await;
    }
}

fn lock_data_dir(dir: &Path) -> anyhow::Result<nix::fcntl::Flock<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .mode(0o600)
        .open(dir.join("server.lock"))?;
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|_| anyhow::anyhow!("another server is running on {}", dir.display()))
}

/// Creates the data directory (0700, also when it exists: it holds the database and every
/// user's data) and returns its absolute path.
fn prepare_data_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).with_context(|| format!("making {} private", dir.display()))?;
    dir.canonicalize().with_context(|| format!("resolving {}", dir.display()))
}

/// Starts a server inside the current tokio runtime: binds, writes `DIR/server.addr`, recovers
/// state from `data_dir`, serves until [`RunningServer::shutdown`]. The runtime's threads keep
/// their priority ([`start_on`] favours them while components run).
pub async fn start(opts: ServerOptions) -> anyhow::Result<RunningServer> {
    start_on(opts, Arc::default()).await
}

/// [`start`] on a runtime whose threads `threads` registers (its `on_thread_start` and
/// `on_thread_stop` hooks, see [`runtime_builder`]): they are favoured while the server has
/// components claimed or running ([`priority::RuntimeThreads`]).
pub async fn start_on(opts: ServerOptions, threads: Arc<priority::RuntimeThreads>) -> anyhow::Result<RunningServer> {
    let mut opts = opts;
    opts.config.validate()?;
    opts.data_dir = prepare_data_dir(&opts.data_dir)?;
    listener::raise_nofile_limit();
    let lock = lock_data_dir(&opts.data_dir)?;
    let store = store::Store::open(&opts.data_dir.join(DB_FILE))?;
    let build = backend::BuildContext {
        supervisor: opts.supervisor.clone(),
        sandbox: supervisor_cmd::JobSandbox::from_config(&opts.config, &opts.data_dir),
        data_dir: opts.data_dir.clone(),
    };
    let sites = opts
        .config
        .effective_sites()
        .iter()
        .map(|s| -> anyhow::Result<daemon::SiteHandle> {
            let mut paths = local::SitePaths::create(&opts.data_dir, &s.name).with_context(|| format!("site '{}' directories", s.name))?;
            let agent = s.agent.as_ref().map(|a| a.resolve(&s.name)).transpose()?;
            if let Some(root) = s.agent.as_ref().and_then(|a| a.root.clone()) {
                paths.storage = root;
            }
            Ok(daemon::SiteHandle {
                name: s.name.clone(),
                backend: backend::build(s, &build).with_context(|| format!("site '{}'", s.name))?,
                paths,
                agent,
                idle: AtomicU32::new(0),
                used: AtomicU32::new(0),
                estimated_at: Default::default(),
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    // The port is taken before recovery (which may take a while on a big database): nobody
    // else can bind it meanwhile and pose as this server to collect tokens; connections made
    // during recovery wait in the listen queue and are answered once it is done.
    let listen = opts.listen.clone().unwrap_or_else(|| opts.config.listen.clone());
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let addr = listener.local_addr()?;
    supervise::write_atomic(&opts.data_dir.join(ADDR_FILE), addr.to_string().as_bytes())?;
    tracing::info!(%addr, "bound; recovering state");
    let (st, store, sites) = {
        let config = opts.config.clone();
        tokio::task::spawn_blocking(move || {
            web::prepare(&store)?;
            // Reservations first: no job may claim what they hold.
            reservations::restore(&store, &sites)?;
            // The sites' counts only now, with the reservations back: read before, a site
            // would show the processors they hold as idle, and the first scan (which may come
            // before the first refresh) would place jobs on them.
            for h in &sites {
                if let Ok(p) = h.backend.processors(&h.name) {
                    h.idle.store(p.idle, std::sync::atomic::Ordering::Relaxed);
                    h.used.store(p.used, std::sync::atomic::Ordering::Relaxed);
                }
            }
            let mut st = daemon::recover(&config, &store, &sites)?;
            // The core plans the reservations into the local sites' queue estimates.
            reservations::publish(&store, &mut st)?;
            anyhow::Ok((st, store, sites))
        })
        .await??
    };
    let (lrm, lrm_rx) = daemon::lrm::LrmQueue::new();
    let shared = Arc::new(daemon::Shared {
        state: Mutex::new(st),
        store,
        sites,
        lrm,
        wake: tokio::sync::Notify::new(),
        config: opts.config.clone(),
        data_dir: opts.data_dir.clone(),
        metrics: Default::default(),
        agents: dataplane::AgentClient::new(Default::default()),
        data_catalogue: gridway::DataCatalogue::new(&opts.config.catalogue),
        threads,
    });
    {
        let mut guard = shared.lock();
        daemon::drain_actions(&shared, &mut guard);
        daemon::transfers::resume_stage_outs(&shared, &guard);
    }
    daemon::removals::resume(&shared);
    daemon::lrm::poll_running(shared.clone()).await;
    let (tx, rx) = tokio::sync::watch::channel(false);
    let driver = tokio::spawn(daemon::drive(shared.clone(), rx.clone()));
    let worker = tokio::spawn(daemon::lrm::worker(shared.clone(), lrm_rx, rx.clone()));
    // The dashboard shares the API's port (its pages under /, the API under /api/v1).
    let mut app = api::router(shared.clone()).merge(web::router(shared.clone()));
    let scrub = tokio::spawn(daemon::scrub::run(shared.clone(), rx.clone()));
    let mut tasks = vec![driver, worker, scrub];
    if let Some(f) = &opts.config.federation {
        let (routes, gs) = peer::start(shared.clone(), f, &opts.data_dir, rx.clone()).context("starting the federation")?;
        app = routes.merge(app);
        tasks.push(gs);
    }
    let http = tokio::spawn(listener::serve(
        listener,
        app,
        listener::Limits::from_config(&opts.config),
        rx.clone(),
    ));
    tracing::info!(%addr, data_dir = %opts.data_dir.display(), sites = shared.sites.len(), "koalesce server listening");
    Ok(RunningServer {
        addr,
        shared,
        shutdown: tx,
        tasks: {
            tasks.push(http);
            tasks
        },
        _lock: lock,
    })
}

/// The server runtime's worker threads: two more than the cores (at least 4). A handler waits
/// for the state lock on its worker thread (it is held only to change state, but a scan that
/// places and launches hundreds of jobs holds it for tens of milliseconds on a loaded host);
/// with one worker per core, two such waits stalled every other connection, acknowledgements
/// included.
fn worker_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()).max(2) + 2
}

/// A multi-threaded runtime whose threads register with `threads` (for [`start_on`]).
pub fn runtime_builder(threads: &Arc<priority::RuntimeThreads>) -> tokio::runtime::Builder {
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    let (on_start, on_stop) = (threads.clone(), threads.clone());
    rt.on_thread_start(move || on_start.register_current())
        .on_thread_stop(move || on_stop.unregister_current());
    rt
}

/// `koalesce server`: builds a runtime, starts, runs until SIGINT/SIGTERM.
pub fn run_blocking(opts: ServerOptions) -> anyhow::Result<()> {
    init_tracing();
    let threads = Arc::new(priority::RuntimeThreads::default());
    let mut rt = runtime_builder(&threads);
    // TOKIO_WORKER_THREADS, when set, is tokio's own.
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        rt.worker_threads(worker_threads());
    }
    let rt = rt.enable_all().build()?;
    rt.block_on(async move {
        // Handled from the start: the address is published before recovery.
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let server = start_on(opts, threads).await?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        tracing::info!("shutting down (running components keep running)");
        server.shutdown().await;
        Ok(())
    })
}

/// One request to a server, for tests and tools (ureq; no error for 4xx/5xx answers).
/// Returns (status, body); `token` adds a bearer header.
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<(u16, String), ureq::Error> {
    let agent: ureq::Agent = crate::http_agent::agent(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(std::time::Duration::from_secs(30)))
            .build(),
    );
    let url = format!("http://{addr}{path}");
    let mut req = ureq::http::Request::builder().method(method).uri(&url);
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    if let Some(ct) = content_type {
        req = req.header("Content-Type", ct);
    }
    let req = req.body(body.to_vec()).map_err(ureq::Error::from)?;
    let mut resp = agent.run(req)?;
    let status = resp.status().as_u16();
    let text = resp.body_mut().with_config().limit(64 << 20).read_to_string()?;
    Ok((status, text))
}

/// A server on its own tokio runtime, for tests and tools that are not async themselves.
/// Dropping it (or [`BackgroundServer::stop`]) stops the server; components keep running.
pub struct BackgroundServer {
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    server: Option<RunningServer>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl BackgroundServer {
    /// Starts `opts` on a new 2-thread runtime and waits until it listens.
    pub fn start(opts: ServerOptions) -> anyhow::Result<Self> {
        if std::env::var_os("RUST_LOG").is_some() {
            init_tracing();
        }
        let threads = Arc::new(priority::RuntimeThreads::default());
        let runtime = runtime_builder(&threads).worker_threads(2).enable_all().build()?;
        let data_dir = opts.data_dir.clone();
        let server = runtime.block_on(start_on(opts, threads))?;
        Ok(BackgroundServer {
            addr: server.addr,
            data_dir,
            server: Some(server),
            runtime: Some(runtime),
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The server's shared state (core, daemon data, sites), for white-box checks.
    pub fn shared(&self) -> Arc<daemon::Shared> {
        match &self.server {
            Some(s) => s.shared.clone(),
            None => unreachable!("the server is there until stop() consumes it"),
        }
    }

    /// One request (see [`http_request`]).
    pub fn request(&self, method: &str, path: &str, token: Option<&str>, body: &[u8]) -> (u16, String) {
        let ct = if path.starts_with("/api/v1/files") {
            "application/json"
        } else {
            "application/toml"
        };
        http_request(self.addr, method, path, token, Some(ct), body).unwrap_or((0, String::new()))
    }

    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        if let (Some(s), Some(rt)) = (self.server.take(), self.runtime.as_ref()) {
            rt.block_on(s.shutdown());
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(std::time::Duration::from_secs(2));
        }
    }
}

impl Drop for BackgroundServer {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// Options for a small test grid: `sites` as (name, slots), scans every 50 ms, components
/// polled every 20 ms, supervisor `program args...` (e.g. `koalesce supervise`).
pub fn test_options(data_dir: &Path, sites: &[(&str, u32)], supervisor: SupervisorCommand) -> ServerOptions {
    let mut config = ServerConfig {
        listen: "127.0.0.1:0".into(),
        poll_interval_ms: 20,
        sites: sites.iter().map(|(n, p)| config::SiteConfig::local(n, *p)).collect(),
        ..ServerConfig::default()
    };
    config.scheduler.scan_interval = koalesce_core::config::ScanInterval::Fixed { interval_ms: 50 };
    config.scheduler.min_claim_retry_ms = 50;
    // Test users have no Unix accounts: as root, their jobs run as root (still confined by
    // Landlock, the hidden data directory and a control group).
    config.users.insert(users::DEFAULT_KEY.into(), "root".into());
    config.allow_root_jobs = true;
    config.sandbox.cgroup_parent = "koalesce-test".into();
    // Test users register their temporary files by path (the data directory, /proc, /sys and
    // /dev stay refused); a real server leaves this to admins and configured directories.
    config.files.import_dirs.insert(users::DEFAULT_KEY.into(), vec!["/".into()]);
    ServerOptions {
        data_dir: data_dir.to_path_buf(),
        listen: None,
        config,
        supervisor,
    }
}
