//! Slurm clusters as sites: [`SlurmBackend`] implements [`Backend`] (and [`Reservations`]) by
//! running Slurm's commands, each with a time limit (see [`cmd`]).
//!
//! A site is a partition of a cluster; the cluster is named by its slurm.conf (`[sites.slurm]
//! conf`, see [`config`]). Several sites may share a cluster. Everything is keyed by
//! (cluster, job id): job ids start at 1 in every cluster.
//!
//! | Backend call | Slurm | per call |
//! |---|---|---|
//! | `processors` | `sinfo` + `scontrol show reservation` (+ the `squeue` below) | cached per cluster for [`SlurmOptions::info_ttl`] |
//! | `claim` | none: checks the idle processors above, minus claims not yet allocated | |
//! | `submit` | `sbatch --parsable` of a batch script that runs `koalesce supervise` | one per component |
//! | `ready` | none: the supervisor's record in the component's directory | |
//! | `start` | none: `go` files, renamed into place back to back | |
//! | `status` | one `squeue -h -t all -j IDS` per cluster, with the supervisors' records | cached for [`SlurmOptions::status_ttl`] |
//! | `cancel` | `abort` (or a fence) in the directory, then `scancel` | one per component |
//! | `barrier_state` / `abort_held` | none: the supervisor's records ([`crate::supervised`]) | |
//! | `reserve_window` / `reserve` / `cancel_reservation` | `squeue` + `scontrol show reservation` (the plan, see `reserve`), `scontrol create` / `delete reservation` | per request |
//! | `claim_reserved` | none: the reservation id is the claim (`sbatch --reservation`) | |
//!
//! The supervisor is started exactly as the local executor starts it (the same command line
//! from [`crate::supervisor_cmd`]: account, Landlock paths, hidden data directory, control
//! group), so a component is confined the same way on every kind of site.
//!
//! **The start barrier across clusters.** A component's Slurm job runs the supervisor once
//! Slurm has allocated its processors; the supervisor checks in (creates `supervisor.json`
//! exclusively: that is [`Backend::ready`]) and holds the processors until the daemon writes
//! `go` ([`Backend::start`] writes them all at once, so the programs start within milliseconds
//! of each other whatever the controllers' scheduling ticks). A component whose job still
//! pends in Slurm is [`LrmState::Pending`] in [`Backend::status`]; one allocated but not yet
//! checked in is `Running` and not ready.
//!
//! **Faults.** An unreachable controller makes the calls for its sites fail within the
//! command timeout as [`BackendError::Site`]; the failure is remembered for
//! [`SlurmOptions::retry_after_error`] so a dead cluster does not slow every call. While the
//! controller is away, `status` keeps each component's last state (its supervisor's records
//! still say when it ends). A job the controller lost (crash) is fenced and reported as a
//! node failure; a job it ran twice is counted once (the second supervisor stops at the
//! existing `supervisor.json`).

pub mod cmd;
pub mod config;
pub mod parse;
mod query;
mod reserve;
pub mod script;
pub mod state;

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use cmd::{CmdError, SlurmClient};
pub use config::SlurmSiteConfig;

use crate::backend::{Backend, BackendError, BarrierState, ComponentSubmission, LrmState, ProcessorCount, Reservations};
use crate::supervise;
use crate::supervised;
use crate::supervisor_cmd::{JobSandbox, SupervisorCommand};
use query::{Cache, JobsAnswer};
use state::{combine, Records, SlurmView, Verdict};

/// One site of the Slurm backend (a `[[sites]]` entry with `kind = "slurm"`).
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmSiteSpec {
    pub name: String,
    /// Processors as configured; [`SlurmBackend::verify`] checks them against sinfo.
    pub processors: u32,
    pub slurm: SlurmSiteConfig,
}

/// How often the backend asks the clusters.
#[derive(Debug, Clone)]
pub struct SlurmOptions {
    /// How long one `sinfo` + reservations answer serves `processors` and `claim`.
    pub info_ttl: Duration,
    /// How long one `squeue` answer serves `status`.
    pub status_ttl: Duration,
    /// After a failed call, how long the failure stands before the cluster is asked again.
    pub retry_after_error: Duration,
}

impl Default for SlurmOptions {
    fn default() -> Self {
        SlurmOptions {
            info_ttl: Duration::from_millis(1000),
            status_ttl: Duration::from_millis(500),
            retry_after_error: Duration::from_millis(2000),
        }
    }
}

/// A component's LRM id: `CLUSTER:JOB:DIR` (the directory holds the supervisor's records, so
/// a daemon restart needs nothing else to find the component again).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SlurmJobRef {
    pub cluster: String,
    pub job: u32,
    pub dir: PathBuf,
}

impl SlurmJobRef {
    pub fn parse(id: &str) -> Option<SlurmJobRef> {
        let mut it = id.splitn(3, ':');
        let (cluster, job, dir) = (it.next()?, it.next()?, it.next()?);
        if cluster.is_empty() || !dir.starts_with('/') {
            return None;
        }
        Some(SlurmJobRef {
            cluster: cluster.to_string(),
            job: job.parse().ok()?,
            dir: PathBuf::from(dir),
        })
    }

    pub fn id(&self) -> String {
        format!("{}:{}:{}", self.cluster, self.job, self.dir.display())
    }
}

const CLAIM_PREFIX: &str = "claim:";
const RESERVATION_PREFIX: &str = "resv:";

/// A reservation id as handed out by [`Reservations::reserve`]: `resv:CLUSTER:NAME`. It is
/// also a claim: a component submitted with it as its claim runs in the reservation, and
/// releasing it deletes the reservation.
fn parse_reservation_id(id: &str) -> Option<(&str, &str)> {
    id.strip_prefix(RESERVATION_PREFIX)?.split_once(':')
}

struct Site {
    spec: SlurmSiteSpec,
    cluster: usize,
    supervisor: SupervisorCommand,
}

struct Cluster {
    client: SlurmClient,
    cache: Mutex<Cache>,
}

struct JobEntry {
    site: usize,
    dir: PathBuf,
    processors: u32,
    reservation: Option<String>,
    /// None for an adopted job (submitted by an earlier daemon).
    submitted: Option<Instant>,
    /// First squeue answer (its end) that showed the job allocated.
    allocated_seen: Option<Instant>,
    last: LrmState,
    /// The launch's nonce: records without it are not believed.
    nonce: String,
}

struct ClaimEntry {
    site: usize,
    processors: u32,
    job: Option<(usize, u32)>,
}

struct ReservationEntry {
    site: usize,
    processors: u32,
}

#[derive(Default)]
struct Inner {
    next: u64,
    claims: HashMap<String, ClaimEntry>,
    jobs: HashMap<(usize, u32), JobEntry>,
    reservations: HashMap<(usize, String), ReservationEntry>,
    /// Reservations to delete once their job is gone ("in use" until then).
    pending_deletes: Vec<(usize, String)>,
    /// `go` files written ahead by `prepare_start`: component directory → temporary name.
    staged: HashMap<PathBuf, PathBuf>,
}

/// Slurm clusters as koalesce sites (see the module docs).
pub struct SlurmBackend {
    sites: Vec<Site>,
    by_name: HashMap<String, usize>,
    clusters: Vec<Cluster>,
    options: SlurmOptions,
    user: String,
    sandbox: JobSandbox,
    /// Offer advance reservations to the scheduler (`reservations = true` in the site config;
    /// creating them needs Slurm operator rights).
    reservations: bool,
    inner: Mutex<Inner>,
}

fn site_err(site: &str, reason: impl std::fmt::Display) -> BackendError {
    BackendError::Site {
        site: site.to_string(),
        reason: reason.to_string(),
    }
}

impl SlurmBackend {
    /// Sites over their clusters. Reads each cluster's slurm.conf (for its `ClusterName`) and
    /// writes the client copies into `scratch`; asks Slurm nothing yet, so a daemon starts
    /// even when a cluster is down. `supervisor` runs each component's supervisor (a site's
    /// `supervisor` path replaces its program).
    pub fn new(sites: Vec<SlurmSiteSpec>, scratch: &Path, supervisor: SupervisorCommand, options: SlurmOptions) -> anyhow::Result<Self> {
        use anyhow::Context;
        let mut clusters: Vec<Cluster> = Vec::new();
        let mut by_conf: HashMap<PathBuf, usize> = HashMap::new();
        let mut out = Vec::new();
        let mut by_name = HashMap::new();
        for spec in sites {
            spec.slurm.validate(&spec.name).map_err(anyhow::Error::msg)?;
            let conf = fs::canonicalize(&spec.slurm.conf)
                .with_context(|| format!("site '{}': slurm conf {}", spec.name, spec.slurm.conf.display()))?;
            let timeout = Duration::from_millis(spec.slurm.command_timeout_ms);
            let ci = match by_conf.get(&conf) {
                Some(&i) => i,
                None => {
                    let client = SlurmClient::new(&conf, scratch, timeout).with_context(|| format!("site '{}'", spec.name))?;
                    if let Some(other) = clusters.iter().find(|c| c.client.cluster() == client.cluster()) {
                        anyhow::bail!(
                            "site '{}': cluster name '{}' of {} is also the name of {}; job ids are keyed by cluster name",
                            spec.name,
                            client.cluster(),
                            conf.display(),
                            other.client.conf().display()
                        );
                    }
                    clusters.push(Cluster {
                        client,
                        cache: Mutex::new(Cache::default()),
                    });
                    by_conf.insert(conf, clusters.len() - 1);
                    clusters.len() - 1
                }
            };
            anyhow::ensure!(
                by_name.insert(spec.name.clone(), out.len()).is_none(),
                "site '{}' appears twice",
                spec.name
            );
            let mut sup = supervisor.clone();
            if let Some(p) = &spec.slurm.supervisor {
                sup.program = p.clone();
            }
            out.push(Site {
                spec,
                cluster: ci,
                supervisor: sup,
            });
        }
        Ok(SlurmBackend {
            sites: out,
            by_name,
            clusters,
            options,
            user: current_user(),
            sandbox: JobSandbox::default(),
            reservations: true,
            inner: Mutex::new(Inner::default()),
        })
    }

    /// Confines components as `sandbox` says (as the local executor does).
    pub fn with_sandbox(mut self, sandbox: JobSandbox) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// Whether [`Backend::reservations`] offers advance reservations (default: yes).
    pub fn with_reservations(mut self, on: bool) -> Self {
        self.reservations = on;
        self
    }

    fn site(&self, name: &str) -> Result<(usize, &Site), BackendError> {
        let i = *self.by_name.get(name).ok_or_else(|| BackendError::UnknownSite(name.into()))?;
        Ok((i, &self.sites[i]))
    }

    fn cluster_index(&self, name: &str) -> Option<usize> {
        self.clusters.iter().position(|c| c.client.cluster() == name)
    }

    /// The Slurm client of a site's cluster (for tools and tests).
    pub fn client(&self, site: &str) -> Option<&SlurmClient> {
        self.site(site).ok().map(|(_, s)| &self.clusters[s.cluster].client)
    }

    /// Slurm commands run so far, over all clusters.
    pub fn commands_run(&self) -> u64 {
        self.clusters.iter().map(|c| c.client.commands_run()).sum()
    }

    /// Checks every site against its cluster: the partition exists and has the configured
    /// number of processors. Asks each cluster (cached).
    pub fn verify(&self) -> Result<(), BackendError> {
        for s in &self.sites {
            let p = self.partition(s)?;
            if p.total != s.spec.processors {
                return Err(site_err(
                    &s.spec.name,
                    format!(
                        "configured with {} processors but partition '{}' of cluster '{}' has {} CPUs",
                        s.spec.processors,
                        s.spec.slurm.partition,
                        self.clusters[s.cluster].client.cluster(),
                        p.total
                    ),
                ));
            }
        }
        Ok(())
    }

    fn new_claim(inner: &mut Inner, site: usize, processors: u32, job: Option<(usize, u32)>) -> String {
        inner.next += 1;
        let id = format!("{CLAIM_PREFIX}{}", inner.next);
        inner.claims.insert(id.clone(), ClaimEntry { site, processors, job });
        id
    }
}

/// Lets every supervisor in `dirs` run: each `go` file is written under a temporary name
/// first, then all are renamed into place back to back (a supervisor wakes at its rename
/// through inotify, so the programs start within a few milliseconds of each other).
#[cfg(test)]
fn release_all(dirs: &[&Path]) -> std::io::Result<()> {
    let staged = dirs.iter().map(|d| stage_go(d)).collect::<std::io::Result<Vec<_>>>()?;
    let refs: Vec<(&Path, &Path)> = staged.iter().zip(dirs).map(|(t, d)| (t.as_path(), *d)).collect();
    release_staged(&refs)
}

/// Writes the `go` file of `dir` under a temporary name; returns that name. Not synced, as
/// the local executor's `go` (see "Durability" in [`crate::supervise`]): it must outlive the
/// daemon's death, not a crash of the machine, which ends the supervisors on it too (and a
/// record directory shared with other nodes over NFS is durable at each rename's reply).
/// Syncing put a journal commit between the last check-in and the start.
fn stage_go(dir: &Path) -> std::io::Result<PathBuf> {
    let body = format!("{{\"go_ms\":{}}}", crate::now_ms());
    let tmp = dir.join(format!(".{}.tmp.{}", supervise::GO_FILE, std::process::id()));
    fs::write(&tmp, body)?;
    Ok(tmp)
}

/// Renames staged `go` files (temporary name, directory) into place back to back.
fn release_staged(staged: &[(&Path, &Path)]) -> std::io::Result<()> {
    for (tmp, dir) in staged {
        fs::rename(tmp, dir.join(supervise::GO_FILE))?;
    }
    Ok(())
}

fn current_user() -> String {
    let uid = unsafe { libc::geteuid() };
    let mut buf = vec![0u8; 4096];
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    let r = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut out) };
    if r == 0 && !out.is_null() {
        let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
        return name.to_string_lossy().into_owned();
    }
    uid.to_string()
}

impl Backend for SlurmBackend {
    fn kind(&self) -> &'static str {
        "slurm"
    }

    fn sites(&self) -> Vec<String> {
        self.sites.iter().map(|s| s.spec.name.clone()).collect()
    }

    fn processors(&self, site: &str) -> Result<ProcessorCount, BackendError> {
        let (si, _) = self.site(site)?;
        self.count(si)
    }

    /// Checks the idle processors (cached sinfo, minus what koalesce holds) and sets them
    /// aside for a submission; Slurm itself is asked nothing.
    fn claim(&self, site: &str, processors: u32) -> Result<String, BackendError> {
        let (si, _) = self.site(site)?;
        let c = self.count(si)?;
        if processors > c.idle {
            return Err(BackendError::Busy {
                site: site.into(),
                wanted: processors,
                idle: c.idle,
            });
        }
        let mut inner = self.inner.lock().unwrap();
        Ok(Self::new_claim(&mut inner, si, processors, None))
    }

    fn release(&self, claim: &str) {
        if let Some((cluster, name)) = parse_reservation_id(claim) {
            if let Some(ci) = self.cluster_index(cluster) {
                if let Err(e) = self.delete_reservation(ci, name) {
                    tracing::info!(reservation = name, error = %e, "reservation not deleted yet; retrying later");
                    self.inner.lock().unwrap().pending_deletes.push((ci, name.to_string()));
                }
            }
            return;
        }
        let mut inner = self.inner.lock().unwrap();
        if let Some(c) = inner.claims.remove(claim) {
            if let Some(key) = c.job {
                inner.jobs.remove(&key);
            }
        }
    }

    fn submit(&self, sub: &ComponentSubmission) -> Result<String, BackendError> {
        let (si, s) = self.site(&sub.site)?;
        let ci = s.cluster;
        let client = &self.clusters[ci].client;
        let err = |r: String| site_err(&sub.site, r);
        let reservation = match parse_reservation_id(&sub.claim) {
            Some((cluster, name)) if cluster == client.cluster() => Some(name.to_string()),
            Some(_) => return Err(err(format!("reservation '{}' is not on this site's cluster", sub.claim))),
            None => {
                let inner = self.inner.lock().unwrap();
                match inner.claims.get(&sub.claim) {
                    Some(c) if c.site == si && c.processors >= sub.processors && c.job.is_none() => None,
                    _ => {
                        return Err(err(format!(
                            "claim '{}' does not hold {} processors here",
                            sub.claim, sub.processors
                        )))
                    }
                }
            }
        };
        let script = script::batch_script(&s.supervisor.program, &s.supervisor.arguments_keeping_env(&self.sandbox, sub), sub)
            .map_err(|e| err(e.to_string()))?;
        {
            use std::os::unix::fs::DirBuilderExt;
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&sub.dir)
                .map_err(|e| err(format!("cannot create {}: {e}", sub.dir.display())))?;
        }
        let path = sub.dir.join(script::SCRIPT_FILE);
        fs::write(&path, script).map_err(|e| err(format!("cannot write {}: {e}", path.display())))?;
        let args = script::sbatch_args(&s.spec.slurm, sub, reservation.as_deref(), &path);
        let submitted = Instant::now();
        let job = client
            .run("sbatch", &args)
            .map_err(|e| e.to_string())
            .and_then(|o| parse::parse_sbatch_parsable(&o.stdout).map_err(|e| e.to_string()));
        let job = match job {
            Ok((job, _)) => job,
            Err(e) => {
                // The job may exist all the same (an answer lost to the time limit): make sure
                // it can never run the program.
                let _ = supervise::fence(&sub.dir);
                return Err(err(format!("sbatch: {e}")));
            }
        };
        let mut inner = self.inner.lock().unwrap();
        inner.jobs.insert(
            (ci, job),
            JobEntry {
                site: si,
                dir: sub.dir.clone(),
                processors: sub.processors,
                reservation,
                submitted: Some(submitted),
                allocated_seen: None,
                last: LrmState::Pending,
                nonce: sub.nonce.clone(),
            },
        );
        if let Some(c) = inner.claims.get_mut(&sub.claim) {
            c.job = Some((ci, job));
        }
        Ok(SlurmJobRef {
            cluster: client.cluster().to_string(),
            job,
            dir: sub.dir.clone(),
        }
        .id())
    }

    /// Ready = the supervisor checked in (so Slurm allocated the processors and launched the
    /// job), holds at the barrier, and Slurm's latest answer does not say the job ended (a
    /// restarted controller may kill a launch it forgot). Reads the directories and the cached
    /// squeue answer only: cheap enough to poll.
    fn ready(&self, ids: &[String]) -> Vec<(String, bool)> {
        ids.iter()
            .map(|id| {
                let ok = SlurmJobRef::parse(id).is_some_and(|r| self.is_ready(&r));
                (id.clone(), ok)
            })
            .collect()
    }

    /// Writes the `go` files under temporary names (see [`Backend::start`]).
    fn prepare_start(&self, ids: &[String]) -> Result<(), BackendError> {
        for r in self.ready_refs(ids)? {
            let tmp = stage_go(&r.dir).map_err(|e| site_err(&r.cluster, format!("cannot write the go file of {}: {e}", r.job)))?;
            self.inner.lock().unwrap().staged.insert(r.dir, tmp);
        }
        Ok(())
    }

    fn start(&self, ids: &[String]) -> Result<(), BackendError> {
        let refs = self.ready_refs(ids)?;
        let mut staged = Vec::with_capacity(refs.len());
        for r in &refs {
            let ahead = self.inner.lock().unwrap().staged.remove(&r.dir).filter(|t| t.exists());
            let tmp = match ahead {
                Some(t) => t,
                None => stage_go(&r.dir).map_err(|e| site_err(&r.cluster, format!("cannot write the go file of {}: {e}", r.job)))?,
            };
            staged.push((tmp, r.dir.as_path()));
        }
        let staged: Vec<(&Path, &Path)> = staged.iter().map(|(t, d)| (t.as_path(), *d)).collect();
        release_staged(&staged).map_err(|e| site_err("slurm", format!("cannot write go files: {e}")))
    }

    fn status(&self, ids: &[String]) -> Vec<(String, LrmState)> {
        let mut by_cluster: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
        let refs: Vec<Option<(usize, SlurmJobRef)>> = ids
            .iter()
            .map(|id| {
                let r = SlurmJobRef::parse(id)?;
                let ci = self.cluster_index(&r.cluster)?;
                by_cluster.entry(ci).or_default().push(r.job);
                Some((ci, r))
            })
            .collect();
        let answers: HashMap<usize, Arc<JobsAnswer>> = by_cluster
            .iter()
            .map(|(&ci, jobs)| {
                let mut cache = self.clusters[ci].cache.lock().unwrap();
                (ci, self.jobs_answer(ci, &mut cache, jobs))
            })
            .collect();
        ids.iter()
            .zip(refs)
            .map(|(id, r)| {
                let Some((ci, r)) = r else {
                    return (id.clone(), LrmState::Unknown);
                };
                let a = &answers[&ci];
                let (last, submitted, nonce) = {
                    let inner = self.inner.lock().unwrap();
                    inner.jobs.get(&(ci, r.job)).map_or((None, None, String::new()), |e| {
                        (Some(e.last.clone()), e.submitted, e.nonce.clone())
                    })
                };
                let view = match &a.result {
                    // A line with another comment is another job that got the same id.
                    Ok(rows) => match rows.get(&r.job).filter(|row| script::is_ours(row, &r.dir)) {
                        Some(row) => SlurmView::Row(row),
                        None if submitted.is_none_or(|t| t < a.at) => SlurmView::Missing,
                        None => SlurmView::NoAnswer,
                    },
                    Err(_) => SlurmView::NoAnswer,
                };
                let alive = supervise::supervisor_alive;
                let st = match combine(view, &Records::read(&r.dir, &nonce), alive, last.as_ref()) {
                    Verdict::State(s) => s,
                    Verdict::FenceVanished => match supervise::fence(&r.dir) {
                        Ok(true) => LrmState::NodeFail {
                            reason: "the Slurm job vanished before it started (controller restart?); its directory is fenced".into(),
                        },
                        Ok(false) => match combine(SlurmView::Missing, &Records::read(&r.dir, &nonce), alive, None) {
                            Verdict::State(s) => s,
                            Verdict::FenceVanished => LrmState::NodeFail {
                                reason: "unreadable supervisor record".into(),
                            },
                        },
                        Err(e) => LrmState::NodeFail {
                            reason: format!("cannot fence {}: {e}", r.dir.display()),
                        },
                    },
                };
                if let Some(e) = self.inner.lock().unwrap().jobs.get_mut(&(ci, r.job)) {
                    e.last = st.clone();
                }
                (id.clone(), st)
            })
            .collect()
    }

    /// Makes sure a component that was not started never will (fence or `abort` in its
    /// directory, which needs no controller), then `scancel`s its job.
    fn cancel(&self, id: &str) -> Result<(), BackendError> {
        let r = SlurmJobRef::parse(id).ok_or_else(|| site_err("slurm", format!("'{id}' is not a Slurm job id")))?;
        let rec = Records::read(&r.dir, &self.nonce_of(&r));
        if rec.exit.is_none() {
            // (A directory no supervisor took is fenced even when its `go` was written ahead,
            // as for a launch of one component.)
            let fenced_now = rec.supervisor.is_none() && supervise::fence(&r.dir).unwrap_or(false);
            if !fenced_now && !rec.released {
                let _ = supervise::abort(&r.dir);
            }
        }
        let ci = self
            .cluster_index(&r.cluster)
            .ok_or_else(|| site_err(&r.cluster, "no site of this backend is on that cluster"))?;
        self.clusters[ci]
            .client
            .run_args("scancel", &[&r.job.to_string()])
            .map_err(|e| site_err(&r.cluster, format!("scancel {}: {e}", r.job)))?;
        Ok(())
    }

    fn adopt(&self, id: &str, site: &str, processors: u32, nonce: &str) -> Result<String, BackendError> {
        let (si, s) = self.site(site)?;
        let r = SlurmJobRef::parse(id).ok_or_else(|| site_err(site, format!("'{id}' is not a Slurm job id")))?;
        if self.clusters[s.cluster].client.cluster() != r.cluster {
            return Err(site_err(site, format!("job '{id}' is not on this site's cluster")));
        }
        let key = (s.cluster, r.job);
        let mut inner = self.inner.lock().unwrap();
        inner.jobs.entry(key).or_insert(JobEntry {
            site: si,
            dir: r.dir.clone(),
            processors,
            reservation: None,
            submitted: None,
            allocated_seen: None,
            last: LrmState::Pending,
            nonce: nonce.to_string(),
        });
        Ok(Self::new_claim(&mut inner, si, processors, Some(key)))
    }

    fn barrier_state(&self, id: &str, nonce: &str) -> Result<BarrierState, BackendError> {
        let dir = component_dir(id);
        supervised::barrier_state(&dir, nonce).map_err(|e| site_err("slurm", format!("cannot read the start barrier of {id}: {e}")))
    }

    fn abort_held(&self, id: &str) -> Result<(), BackendError> {
        let dir = component_dir(id);
        supervise::abort(&dir).map_err(|e| site_err("slurm", format!("cannot abort {id}: {e}")))
    }

    fn reservations(&self) -> Option<&dyn Reservations> {
        self.reservations.then_some(self as &dyn Reservations)
    }

    /// `squeue` + `scontrol show reservation` + `squeue --start` (see `reserve.rs`).
    fn queue_estimate(&self, site: &str, now: u64) -> Option<Result<koalesce_core::broker::QueueEstimate, BackendError>> {
        Some(self.slurm_queue_estimate(site, now))
    }

    /// The longest `claim_timeout_ms` of the backend's sites: how long a component may pend in
    /// Slurm's queue before its claim counts as failed (see `docs/slurm.md`, claiming).
    fn claim_timeout(&self) -> Duration {
        let ms = self.sites.iter().map(|s| s.spec.slurm.claim_timeout_ms).max();
        ms.map_or(crate::backend::DEFAULT_CLAIM_TIMEOUT, Duration::from_millis)
    }
}

impl SlurmBackend {
    /// The nonce of the launch of job `r` (empty for a job this backend does not know).
    pub(super) fn nonce_of(&self, r: &SlurmJobRef) -> String {
        let Some(ci) = self.cluster_index(&r.cluster) else {
            return String::new();
        };
        let inner = self.inner.lock().unwrap();
        inner.jobs.get(&(ci, r.job)).map(|e| e.nonce.clone()).unwrap_or_default()
    }

    /// The components of `ids`, all at the barrier (checked in, perhaps still setting up), or
    /// an error naming those that are not.
    fn ready_refs(&self, ids: &[String]) -> Result<Vec<SlurmJobRef>, BackendError> {
        let refs: Vec<Option<SlurmJobRef>> = ids.iter().map(|id| SlurmJobRef::parse(id)).collect();
        let not_ready: Vec<&String> = ids
            .iter()
            .zip(&refs)
            .filter(|(_, r)| !r.as_ref().is_some_and(|r| self.at_barrier(r, false)))
            .map(|(id, _)| id)
            .collect();
        if let Some(first) = not_ready.first() {
            return Err(site_err(
                SlurmJobRef::parse(first).map(|r| r.cluster).unwrap_or_default().as_str(),
                format!("not ready to start: {not_ready:?}"),
            ));
        }
        Ok(refs.into_iter().flatten().collect())
    }
}

/// The record directory of a component from its LRM id (`CLUSTER:JOB:DIR`), or the id itself
/// when it is a bare directory (what a launch intent records before the job has its Slurm id).
fn component_dir(id: &str) -> PathBuf {
    SlurmJobRef::parse(id).map_or_else(|| PathBuf::from(id), |r| r.dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_refs_round_trip() {
        let r = SlurmJobRef {
            cluster: "beta".into(),
            job: 17,
            dir: PathBuf::from("/data/sites/beta/jobs/3/a1-c0:x"),
        };
        assert_eq!(r.id(), "beta:17:/data/sites/beta/jobs/3/a1-c0:x");
        assert_eq!(SlurmJobRef::parse(&r.id()), Some(r));
        for bad in ["", "beta", "beta:x:/d", "beta:1:rel", ":1:/d", "/local/dir"] {
            assert_eq!(SlurmJobRef::parse(bad), None, "{bad}");
        }
        assert_eq!(parse_reservation_id("resv:alpha:koalesce-a-1"), Some(("alpha", "koalesce-a-1")));
        assert_eq!(parse_reservation_id("claim:3"), None);
    }

    #[test]
    fn go_files_appear_for_all() {
        let d = tempfile::tempdir().unwrap();
        let dirs: Vec<PathBuf> = (0..3).map(|i| d.path().join(format!("c{i}"))).collect();
        for x in &dirs {
            fs::create_dir_all(x).unwrap();
        }
        let refs: Vec<&Path> = dirs.iter().map(|p| p.as_path()).collect();
        release_all(&refs).unwrap();
        for x in &dirs {
            assert!(x.join(supervise::GO_FILE).exists());
            assert_eq!(fs::read_dir(x).unwrap().count(), 1, "no temporary file left");
        }
        assert!(release_all(&[Path::new("/nonexistent/dir")]).is_err());
    }

    #[test]
    fn construction_checks_sites() {
        let d = tempfile::tempdir().unwrap();
        let conf = |name: &str, cluster: &str| {
            let p = d.path().join(name);
            fs::write(&p, format!("ClusterName={cluster}\n")).unwrap();
            p
        };
        let (a, b, a2) = (conf("a.conf", "alpha"), conf("b.conf", "beta"), conf("a2.conf", "alpha"));
        let sup = SupervisorCommand {
            program: "/bin/koalesce".into(),
            args: vec!["supervise".into()],
            launcher: None,
        };
        let spec = |n: &str, c: &Path| SlurmSiteSpec {
            name: n.into(),
            processors: 8,
            slurm: SlurmSiteConfig::new(c, "debug"),
        };
        let b1 = SlurmBackend::new(
            vec![spec("s1", &a), spec("s2", &b), spec("s3", &a)],
            &d.path().join("scratch"),
            sup.clone(),
            SlurmOptions::default(),
        )
        .unwrap();
        assert_eq!(b1.clusters.len(), 2, "two sites on one cluster share it");
        assert_eq!(b1.sites(), vec!["s1", "s2", "s3"]);
        assert!(d.path().join("scratch/alpha.client.conf").exists());
        let e = SlurmBackend::new(
            vec![spec("s1", &a), spec("s2", &a2)],
            d.path(),
            sup.clone(),
            SlurmOptions::default(),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("also the name"), "{e}");
        let e = SlurmBackend::new(vec![spec("s1", &a), spec("s1", &b)], d.path(), sup.clone(), SlurmOptions::default())
            .err()
            .unwrap();
        assert!(e.to_string().contains("twice"), "{e}");
        let e = SlurmBackend::new(
            vec![spec("s1", Path::new("/nonexistent/slurm.conf"))],
            d.path(),
            sup,
            SlurmOptions::default(),
        )
        .err()
        .unwrap();
        assert!(format!("{e:#}").contains("/nonexistent/slurm.conf"), "{e:#}");
        // Unknown ids and sites.
        assert!(matches!(b1.processors("nope"), Err(BackendError::UnknownSite(_))));
        assert_eq!(b1.status(&["garbage".into()]), vec![("garbage".to_string(), LrmState::Unknown)]);
        assert_eq!(b1.ready(&["garbage".into()]), vec![("garbage".to_string(), false)]);
        assert!(b1.start(&["garbage".into()]).is_err());
    }
}
