//! Asking the clusters, cached: the squeue answer for koalesce's jobs, the sinfo and
//! reservations answer, the processor accounting built on them, and readiness.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::{BackendError, ProcessorCount};

use super::parse::{self, JobRow, PartitionInfo, ReservationInfo};
use super::script;
use super::state::Records;
use super::{site_err, JobEntry, Site, SlurmBackend, SlurmJobRef};

pub(super) struct InfoAnswer {
    /// When sinfo was started: jobs seen allocated before this are in its counts.
    pub(super) at: Instant,
    pub(super) result: Result<(BTreeMap<String, PartitionInfo>, Vec<ReservationInfo>), String>,
}

pub(super) struct JobsAnswer {
    /// When squeue was started: jobs submitted before and missing from the answer are
    /// unknown to the controller.
    pub(super) at: Instant,
    pub(super) queried: HashSet<u32>,
    pub(super) result: Result<HashMap<u32, JobRow>, String>,
}

#[derive(Default)]
pub(super) struct Cache {
    pub(super) info: Option<Arc<InfoAnswer>>,
    pub(super) jobs: Option<Arc<JobsAnswer>>,
}

impl SlurmBackend {
    fn fresh(&self, at: Instant, ok: bool, ttl: Duration) -> bool {
        at.elapsed() < if ok { ttl } else { self.options.retry_after_error }
    }

    /// The latest squeue answer for cluster `ci` covering `want` (asked again when stale or
    /// not covering). Call with the cluster's cache locked.
    pub(super) fn jobs_answer(&self, ci: usize, cache: &mut Cache, want: &[u32]) -> Arc<JobsAnswer> {
        if let Some(a) = &cache.jobs {
            if self.fresh(a.at, a.result.is_ok(), self.options.status_ttl) && want.iter().all(|j| a.queried.contains(j)) {
                return a.clone();
            }
        }
        let mut ids: HashSet<u32> = want.iter().copied().collect();
        {
            let inner = self.inner.lock().unwrap();
            ids.extend(
                inner
                    .jobs
                    .iter()
                    .filter(|((c, _), e)| *c == ci && !e.last.is_terminal())
                    .map(|((_, j), _)| *j),
            );
        }
        let at = Instant::now();
        let result = if ids.is_empty() {
            Ok(HashMap::new())
        } else {
            let mut sorted: Vec<u32> = ids.iter().copied().collect();
            sorted.sort_unstable();
            let list = sorted.iter().map(|j| j.to_string()).collect::<Vec<_>>().join(",");
            let args = ["-h", "-t", "all", "-j", &list, "-o", parse::SQUEUE_FORMAT];
            match self.clusters[ci].client.run_args("squeue", &args) {
                Ok(out) => parse::parse_squeue(&out.stdout)
                    .map(|rows| rows.into_iter().map(|r| (r.job, r)).collect())
                    .map_err(|e| e.to_string()),
                Err(e) if parse::is_invalid_job_id(e.stderr()) => Ok(HashMap::new()),
                Err(e) => Err(e.to_string()),
            }
        };
        if let Ok(rows) = &result {
            let seen = Instant::now();
            let mut inner = self.inner.lock().unwrap();
            for (j, row) in rows {
                if let Some(e) = inner.jobs.get_mut(&(ci, *j)) {
                    if script::is_ours(row, &e.dir) && (row.state.is_allocated() || row.state.is_terminal()) {
                        e.allocated_seen.get_or_insert(seen);
                    }
                }
            }
        }
        let a = Arc::new(JobsAnswer { at, queried: ids, result });
        cache.jobs = Some(a.clone());
        a
    }

    /// The latest sinfo + reservations answer for cluster `ci`; refreshes the jobs answer
    /// first, so that jobs seen allocated are in the CPU counts.
    pub(super) fn info_answer(&self, ci: usize) -> Arc<InfoAnswer> {
        let mut cache = self.clusters[ci].cache.lock().unwrap();
        if let Some(a) = &cache.info {
            if self.fresh(a.at, a.result.is_ok(), self.options.info_ttl) {
                return a.clone();
            }
        }
        let t0 = Instant::now();
        let jobs = self.jobs_answer(ci, &mut cache, &[]);
        let client = &self.clusters[ci].client;
        let at = Instant::now();
        let result = match &jobs.result {
            // squeue just failed: do not wait for sinfo to fail too.
            Err(e) if jobs.at >= t0 => Err(e.clone()),
            _ => client
                .run_args("sinfo", &["-h", "-o", parse::SINFO_FORMAT])
                .map_err(|e| e.to_string()),
        };
        let result = result
            .and_then(|o| parse::parse_sinfo(&o.stdout).map_err(|e| e.to_string()))
            .and_then(|parts| {
                let out = client.run_args("scontrol", &["show", "reservation"]).map_err(|e| e.to_string())?;
                let resv = parse::parse_show_reservation(&out.stdout).map_err(|e| e.to_string())?;
                Ok((parts, resv))
            });
        let a = Arc::new(InfoAnswer { at, result });
        cache.info = Some(a.clone());
        drop(cache);
        if a.result.is_ok() {
            self.retry_deletes(ci);
        }
        a
    }

    pub(super) fn partition(&self, s: &Site) -> Result<PartitionInfo, BackendError> {
        let info = self.info_answer(s.cluster);
        let (parts, _) = info.result.as_ref().map_err(|e| site_err(&s.spec.name, e))?;
        parts.get(&s.spec.slurm.partition).cloned().ok_or_else(|| {
            site_err(
                &s.spec.name,
                format!(
                    "cluster '{}' has no partition '{}'",
                    self.clusters[s.cluster].client.cluster(),
                    s.spec.slurm.partition
                ),
            )
        })
    }

    /// Processors of a site as koalesce may use them: sinfo's idle CPUs, minus cores of
    /// active reservations not used by koalesce's jobs in them, minus koalesce's claims and
    /// submitted jobs that sinfo does not count as allocated yet.
    pub(super) fn count(&self, si: usize) -> Result<ProcessorCount, BackendError> {
        let s = &self.sites[si];
        let info = self.info_answer(s.cluster);
        let (parts, resv) = info.result.as_ref().map_err(|e| site_err(&s.spec.name, e))?;
        let p = parts.get(&s.spec.slurm.partition).ok_or_else(|| {
            site_err(
                &s.spec.name,
                format!(
                    "no partition '{}' in cluster '{}'",
                    s.spec.slurm.partition,
                    self.clusters[s.cluster].client.cluster()
                ),
            )
        })?;
        let inner = self.inner.lock().unwrap();
        let reflected = |e: &JobEntry| e.allocated_seen.is_some_and(|t| t <= info.at);
        let mut hold: u32 = inner
            .claims
            .values()
            .filter(|c| c.site == si && c.job.is_none())
            .map(|c| c.processors)
            .sum();
        hold += inner
            .jobs
            .values()
            .filter(|e| e.site == si && e.reservation.is_none() && !e.last.is_terminal() && !reflected(e))
            .map(|e| e.processors)
            .sum::<u32>();
        let mut reserved_unused = 0u32;
        for r in resv.iter().filter(|r| r.active) {
            if r.partition.as_deref().is_some_and(|pn| pn != s.spec.slurm.partition) {
                continue;
            }
            let ours: u32 = inner
                .jobs
                .values()
                .filter(|e| e.reservation.as_deref() == Some(r.name.as_str()) && !e.last.is_terminal() && reflected(e))
                .map(|e| e.processors)
                .sum();
            reserved_unused += r.cores.saturating_sub(ours);
        }
        let idle = if p.up { p.idle.saturating_sub(hold + reserved_unused) } else { 0 };
        Ok(ProcessorCount {
            total: p.total,
            idle,
            used: p.total.saturating_sub(idle),
        })
    }

    /// Each job's line in the latest squeue answer of its cluster (cached; `None` when Slurm
    /// does not know it or did not answer): the pending reason tells why a component waits.
    pub fn slurm_jobs(&self, ids: &[String]) -> Vec<(String, Option<JobRow>)> {
        ids.iter()
            .map(|id| {
                let row = SlurmJobRef::parse(id).and_then(|r| {
                    let ci = self.cluster_index(&r.cluster)?;
                    let mut cache = self.clusters[ci].cache.lock().unwrap();
                    let a = self.jobs_answer(ci, &mut cache, &[r.job]);
                    a.result
                        .as_ref()
                        .ok()?
                        .get(&r.job)
                        .filter(|row| script::is_ours(row, &r.dir))
                        .cloned()
                });
                (id.clone(), row)
            })
            .collect()
    }

    /// Ready: set up and held at the barrier (see [`Records::ready`]).
    pub(super) fn is_ready(&self, r: &SlurmJobRef) -> bool {
        self.at_barrier(r, true)
    }

    /// Checked in at the barrier and not ended or told to give up; with `set_up`, also done
    /// setting up (`held`). Writing `go` needs only the first: a supervisor still setting up
    /// runs once it is done (recovery rolls a launch forward that way).
    pub(super) fn at_barrier(&self, r: &SlurmJobRef, set_up: bool) -> bool {
        let rec = Records::read(&r.dir, &self.nonce_of(r));
        if !(if set_up { rec.ready() } else { rec.startable() }) {
            return false;
        }
        let Some(ci) = self.cluster_index(&r.cluster) else {
            return false;
        };
        // Never wait for a query in progress (a dead controller takes seconds to fail).
        if let Ok(cache) = self.clusters[ci].cache.try_lock() {
            let row = cache.jobs.as_ref().and_then(|a| {
                a.result
                    .as_ref()
                    .ok()?
                    .get(&r.job)
                    .filter(|row| script::is_ours(row, &r.dir))
                    .cloned()
            });
            if row.is_some_and(|row| row.state.is_terminal()) {
                return false;
            }
        }
        !self
            .inner
            .lock()
            .unwrap()
            .jobs
            .get(&(ci, r.job))
            .is_some_and(|e| e.last.is_terminal())
    }

    fn retry_deletes(&self, ci: usize) {
        let todo: Vec<String> = {
            let inner = self.inner.lock().unwrap();
            inner
                .pending_deletes
                .iter()
                .filter(|(c, _)| *c == ci)
                .map(|(_, n)| n.clone())
                .collect()
        };
        for name in todo {
            if self.delete_reservation(ci, &name).is_ok() {
                self.inner
                    .lock()
                    .unwrap()
                    .pending_deletes
                    .retain(|(c, n)| !(*c == ci && *n == name));
            }
        }
    }
}
