//! The driver: one [`koalesce_core::Scheduler`] fed with real time, its [`Action`](koalesce_core::Action)s carried out
//! against the sites' backends, every change persisted through the group-commit store.
//!
//! **One source of truth.** Job and component state live in the core. The daemon keeps only
//! what the core does not know, keyed by job id ([`records::JobMeta`]: user, description,
//! launch attempt, exit codes, outputs) and its LRM bookkeeping ([`Exec`]: claim and LRM ids).
//! It persists what the core says (`StateChanged` actions, `take_progress`) and renders the API
//! from the core (live jobs) and the store (ended jobs, which the core then forgets).
//!
//! **No blocking call under the lock.** All mutable state is in [`State`] behind one mutex,
//! held only to change state. Calls into a site's LRM ([`crate::backend::Backend`]) run on the
//! LRM worker (`lrm`) and tokio's blocking pool; their results come back as core inputs.
//!
//! Modules: `records` (daemon data and rendering), `actions` (carrying out core actions),
//! `lrm` (LRM calls off the lock: claims, launches, the start barrier, status polling),
//! `transfers` (stage-in and stage-out), `recovery` (rebuilding state at startup),
//! `driver` (timers).

pub(crate) mod actions;
pub(crate) mod blacklist;
pub(crate) mod driver;
pub(crate) mod launch;
pub(crate) mod lrm;
pub mod network;
pub(crate) mod records;
pub(crate) mod recovery;
pub(crate) mod removals;
pub(crate) mod scrub;
pub(crate) mod starter;
pub(crate) mod transfers;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use koalesce_core::{Priority, Scheduler, SiteId};
use tokio::sync::Notify;

use crate::backend::Backend;
use crate::config::ServerConfig;
use crate::local::SitePaths;
use crate::store::Store;

pub(crate) use actions::{drain_actions, process_actions};
pub(crate) use driver::drive;
pub use records::{FileInfo, JobMeta};
pub(crate) use recovery::recover;

/// One site: its backend (any kind), its directories and the last idle count it reported.
pub struct SiteHandle {
    pub name: String,
    pub backend: Arc<dyn Backend>,
    pub paths: SitePaths,
    /// The site's storage agent (`[sites.agent]`): its files are moved only through it
    /// (`paths.storage` is then where the site's nodes see the agent's root).
    pub agent: Option<crate::dataplane::SiteAgent>,
    /// Idle and used processors as the backend last reported them (refreshed off the lock).
    pub idle: AtomicU32,
    pub used: AtomicU32,
    /// When the backend's queue-wait estimate was last asked for (Unix ms; see
    /// [`Backend::queue_estimate`]).
    pub estimated_at: std::sync::atomic::AtomicU64,
}

/// A claimed or running component: the daemon's LRM bookkeeping.
#[derive(Debug, Clone)]
pub struct Exec {
    pub site: SiteId,
    pub processors: u32,
    /// The claim id once the LRM granted it.
    pub claim: Option<String>,
    /// The reservation the claim is made in, if any.
    pub reservation: Option<String>,
    pub attempt: u32,
    pub dir: Option<PathBuf>,
    /// LRM id once submitted.
    pub lrm_id: Option<String>,
}

/// Counters for /metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    pub transfer_bytes: AtomicU64,
    pub transfers: AtomicU64,
    pub transfer_failures: AtomicU64,
    pub scans: AtomicU64,
    pub scan_micros_total: AtomicU64,
    pub last_scan_micros: AtomicU64,
    pub submissions: AtomicU64,
    pub launches: AtomicU64,
    /// Calls of `process_actions` that left actions for the next chunk (a scan or a poll
    /// carried out in several holds of the state lock).
    pub action_chunks_left: AtomicU64,
    pub blacklisted: AtomicU64,
    /// Advance reservations the sites granted / refused (for jobs and through the API).
    pub reservations_granted: AtomicU64,
    pub reservations_refused: AtomicU64,
    /// Flexible reservations the sites moved (001 §2.3).
    pub reservations_moved: AtomicU64,
    /// Calls the LRM worker made to sites for the scheduler's reservations (one per site per
    /// batch; see `batch_reservations`).
    pub reservation_calls: AtomicU64,
    /// Broker jobs (`ttd`/`tts`) that succeeded, with the sums of their prediction errors
    /// (actual − predicted, ms) and of the errors' absolute values.
    pub broker_finished: AtomicU64,
    pub broker_ttd_error_ms: std::sync::atomic::AtomicI64,
    pub broker_ttd_abs_error_ms: AtomicU64,
    pub broker_tts_error_ms: std::sync::atomic::AtomicI64,
    pub broker_tts_abs_error_ms: AtomicU64,
    /// Replicas the scrub looked at, and the corrupt ones it quarantined.
    pub replica_checks: AtomicU64,
    pub replicas_quarantined: AtomicU64,
    /// How long the state lock is held and submissions wait for their answer.
    pub latency: Latency,
}

/// How long the state lock was held and submissions took to be acknowledged (the figures of
/// `koalesce bench e2e`'s submit latency, as the server sees them).
#[derive(Debug, Default)]
pub struct Latency {
    lock_held_max_us: AtomicU64,
    /// Where the longest hold took the lock.
    lock_held_max_at: Mutex<Option<&'static std::panic::Location<'static>>>,
    /// Holds of at least [`Latency::LONG_HOLD_US`].
    pub lock_long_holds: AtomicU64,
    /// Threads waiting for the state lock right now (a holder that releases it to let
    /// others in between chunks of work waits until they got it, see [`Shared::let_waiters_in`]).
    waiters: std::sync::atomic::AtomicU32,
    /// Holds of at least [`Latency::SITE_HOLD_US`] by the source line that took the lock.
    lock_sites: Mutex<HashMap<&'static std::panic::Location<'static>, SiteHolds>>,
    /// Acknowledged submissions: the longest from the request to the answer, how many took
    /// more than [`Latency::SLOW_ACK_US`], and the longest waits for the state lock and for the
    /// commit.
    pub ack_max_us: AtomicU64,
    pub acks_slow: AtomicU64,
    pub ack_lock_wait_max_us: AtomicU64,
    pub ack_commit_max_us: AtomicU64,
}

/// The holds of the state lock of at least [`Latency::SITE_HOLD_US`] that one source line
/// took: how many, their sum and the longest (µs).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SiteHolds {
    pub count: u64,
    pub total_us: u64,
    pub max_us: u64,
}

impl Latency {
    pub const LONG_HOLD_US: u64 = 5_000;
    /// Holds from this long on are counted by the line that took the lock (shorter ones cost
    /// only the two atomics above: the table's mutex is not taken for them).
    pub const SITE_HOLD_US: u64 = 1_000;
    /// Issue 9's target for the submit p99.
    pub const SLOW_ACK_US: u64 = 20_000;

    fn held(&self, us: u64, at: &'static std::panic::Location<'static>) {
        if us >= Self::LONG_HOLD_US {
            self.lock_long_holds.fetch_add(1, Ordering::Relaxed);
        }
        if us > self.lock_held_max_us.fetch_max(us, Ordering::Relaxed) {
            *self.lock_held_max_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(at);
        }
        if us >= Self::SITE_HOLD_US {
            let mut sites = self.lock_sites.lock().unwrap_or_else(|p| p.into_inner());
            let h = sites.entry(at).or_default();
            h.count += 1;
            h.total_us += us;
            h.max_us = h.max_us.max(us);
        }
    }

    /// The holds of at least [`Latency::SITE_HOLD_US`] by the `file:line` that took the lock,
    /// longest first.
    pub fn lock_sites(&self) -> Vec<(String, SiteHolds)> {
        let sites = self.lock_sites.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<(String, SiteHolds)> = sites.iter().map(|(l, h)| (format!("{}:{}", l.file(), l.line()), *h)).collect();
        v.sort_by(|a, b| b.1.max_us.cmp(&a.1.max_us).then_with(|| a.0.cmp(&b.0)));
        v
    }

    /// The longest hold of the state lock (µs) and the source location that took it.
    pub fn lock_held_max(&self) -> (u64, Option<String>) {
        let at = self
            .lock_held_max_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map(|l| format!("{}:{}", l.file(), l.line()));
        (self.lock_held_max_us.load(Ordering::Relaxed), at)
    }

    /// Records one acknowledged submission: its total time, its wait for the lock and for the
    /// commit (µs).
    pub fn acknowledged(&self, total_us: u64, lock_wait_us: u64, commit_us: u64) {
        if total_us > Self::SLOW_ACK_US {
            self.acks_slow.fetch_add(1, Ordering::Relaxed);
        }
        self.ack_max_us.fetch_max(total_us, Ordering::Relaxed);
        self.ack_lock_wait_max_us.fetch_max(lock_wait_us, Ordering::Relaxed);
        self.ack_commit_max_us.fetch_max(commit_us, Ordering::Relaxed);
    }
}

/// The state lock while held ([`Shared::lock`]); measures how long (see [`Latency`]), writes
/// the log lines the holder left in `State::log` once it released the lock, and tells the
/// runtime's threads whether components are claimed or running ([`Shared::threads`]).
pub struct StateGuard<'a> {
    /// `Some` until the guard is dropped (taken there to release the lock before logging).
    guard: Option<MutexGuard<'a, State>>,
    since: std::time::Instant,
    at: &'static std::panic::Location<'static>,
    latency: &'a Latency,
    threads: &'a crate::priority::RuntimeThreads,
}

impl std::ops::Deref for StateGuard<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        self.guard.as_deref().expect("the state lock is held until the guard is dropped")
    }
}

impl std::ops::DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut State {
        self.guard
            .as_deref_mut()
            .expect("the state lock is held until the guard is dropped")
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        let Some(mut guard) = self.guard.take() else { return };
        let log = std::mem::take(&mut guard.log);
        let components = !guard.exec.is_empty();
        self.latency.held(self.since.elapsed().as_micros() as u64, self.at);
        drop(guard);
        self.threads.components(components);
        for line in log {
            line.emit();
        }
    }
}

/// A log line about a change made under the state lock, written after the lock is released
/// (a write to the server's log is a system call: the holder does not make the others wait
/// for it).
#[derive(Debug, Clone, Copy)]
pub enum LogLine {
    JobState { job: u64, from: &'static str, to: &'static str },
}

impl LogLine {
    fn emit(self) {
        match self {
            // The target they had when written in `actions` (RUST_LOG filters keep working).
            LogLine::JobState { job, from, to } => {
                tracing::info!(target: "koalesce_server::daemon::actions", job, from, to, "job state")
            }
        }
    }
}

impl Metrics {
    /// Counts a broker job's prediction errors (once, when it ended).
    pub fn record_prediction(&self, times: &koalesce_api::dto::BrokerTimes) {
        let (Some(ttd), Some(tts)) = (times.ttd_error_ms(), times.tts_error_ms()) else {
            return;
        };
        self.broker_finished.fetch_add(1, Ordering::Relaxed);
        self.broker_ttd_error_ms.fetch_add(ttd, Ordering::Relaxed);
        self.broker_ttd_abs_error_ms.fetch_add(ttd.unsigned_abs(), Ordering::Relaxed);
        self.broker_tts_error_ms.fetch_add(tts, Ordering::Relaxed);
        self.broker_tts_abs_error_ms.fetch_add(tts.unsigned_abs(), Ordering::Relaxed);
    }
}

/// Everything that changes, behind one mutex.
pub struct State {
    pub core: Scheduler,
    /// Daemon data of the jobs the core knows (live ones, and ended ones until their final
    /// row is committed).
    pub meta: BTreeMap<u64, JobMeta>,
    pub next_id: u64,
    pub site_ids: HashMap<String, SiteId>,
    pub files: BTreeMap<String, FileInfo>,
    pub exec: HashMap<(u64, u32), Exec>,
    /// Granted reservations by (job, component).
    pub reservations: HashMap<(u64, u32), String>,
    /// Tries and priority of queued jobs from the core's `take_progress`, written in bulk
    /// by the driver.
    pub progress: HashMap<u64, (u32, u32, Priority)>,
    /// Ended jobs by state name (for /metrics; the jobs themselves are in the store).
    pub ended: BTreeMap<&'static str, u64>,
    /// Blacklisted sites waiting to be probed (with back-off) and re-admitted.
    pub probes: blacklist::Probes,
    /// Measured links between sites and their forecasts (see [`network`]).
    pub network: network::Network,
    /// The core's GridWay history version last written to the store.
    pub gridway_history_saved: u64,
    /// Stage-ins on the way, by (file, destination site): the jobs waiting for one that
    /// another job started (one transfer per file and destination at a time).
    pub inflight: HashMap<(String, SiteId), Vec<transfers::Waiter>>,
    /// The core has actions that `process_actions` left for the next chunk (the driver
    /// carries them out, releasing the lock between chunks).
    pub actions_pending: bool,
    /// Log lines to write once the lock is released (see [`StateGuard`]).
    pub log: Vec<LogLine>,
}

impl State {
    pub fn site_id(&self, name: &str) -> Option<SiteId> {
        self.site_ids.get(name).copied()
    }
}

/// What the HTTP handlers, the driver and the LRM worker share.
pub struct Shared {
    pub state: Mutex<State>,
    pub store: Store,
    pub sites: Vec<SiteHandle>,
    pub(crate) lrm: lrm::LrmQueue,
    pub wake: Notify,
    pub config: ServerConfig,
    pub data_dir: PathBuf,
    pub metrics: Metrics,
    /// The client of the sites' storage agents (pooled connections).
    pub agents: crate::dataplane::AgentClient,
    /// The data functions' catalogue cache (004 §3.3).
    pub data_catalogue: crate::gridway::DataCatalogue,
    /// The runtime's threads, favoured while components are claimed or running (see
    /// [`crate::priority::RuntimeThreads`]; told on each release of the state lock).
    pub threads: Arc<crate::priority::RuntimeThreads>,
}

impl Shared {
    /// The state lock. A panic while it was held cannot leave a half-changed state behind
    /// that is worse than stopping: the poisoned lock is taken over, so that the server keeps
    /// answering (the panic itself is logged by the task that had it).
    #[track_caller]
    pub fn lock(&self) -> StateGuard<'_> {
        let at = std::panic::Location::caller();
        let waiters = &self.metrics.latency.waiters;
        waiters.fetch_add(1, Ordering::Relaxed);
        let guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        waiters.fetch_sub(1, Ordering::Relaxed);
        StateGuard {
            guard: Some(guard),
            since: std::time::Instant::now(),
            at,
            latency: &self.metrics.latency,
            threads: &self.threads,
        }
    }

    /// Called between chunks of work with the state lock released: gives the threads waiting
    /// for it (a submission's handler, the LRM worker) a moment to take it before this one
    /// takes it again. The standard mutex is not fair: an unlocking thread that locks again
    /// at once usually gets the lock before the waiter it woke has run.
    pub fn let_waiters_in(&self) {
        let waiters = &self.metrics.latency.waiters;
        for _ in 0..64 {
            if waiters.load(Ordering::Relaxed) == 0 {
                return;
            }
            std::thread::yield_now();
        }
    }

    pub fn site(&self, s: SiteId) -> &SiteHandle {
        &self.sites[s.index()]
    }

    pub fn site_by_name(&self, name: &str) -> Option<&SiteHandle> {
        self.sites.iter().find(|s| s.name == name)
    }
}
