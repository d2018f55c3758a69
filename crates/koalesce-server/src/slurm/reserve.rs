//! Advance reservations on Slurm: `scontrol create reservation` / `scontrol delete
//! reservation`. Creating reservations needs Slurm operator rights: koalesce must run as
//! root or as the cluster's SlurmUser (docs/slurm.md).
//!
//! A request with a start window (001 §2.3, [`Reservations::reserve_window`]) is planned
//! against what holds the partition's cores (the core's [`plan_window`]): running jobs until
//! their end (start + time limit, as `squeue` prints it; forever without a limit) and the
//! reservations of the partition (`scontrol show reservation`; a job running inside one is
//! counted by its reservation). The planned starts are asked of Slurm in order (`scontrol
//! create reservation StartTime=now+N`); Slurm may refuse one the profile allows (free cores
//! split over nodes), so the next is tried, at most [`TRIES`]. When none is granted the answer
//! is `<rejected, T_next>` with the plan's next start, or `<rejected>` when the cores never
//! fit (more than the partition's usable CPUs, or jobs without a time limit holding them).
//! Components koalesce has claimed but Slurm has not allocated yet are not in the plan (their
//! end is unknown): Slurm's own check has the last word.
//!
//! A reservation id (`resv:CLUSTER:NAME`) doubles as a claim: a component submitted with it
//! as its claim runs in the reservation (`sbatch --reservation=NAME`) and starts once the
//! reservation starts; releasing the claim deletes the reservation.

use koalesce_core::broker::{plan_window, Profile, QueueEstimate, ReservationRequest as CoreRequest, FOREVER};

use crate::backend::{BackendError, ReservationRequest, Reservations, WindowAnswer, WindowRequest};

use super::parse::{self, SlurmTime};
use super::{parse_reservation_id, site_err, ReservationEntry, SlurmBackend, RESERVATION_PREFIX};

/// Starts asked of Slurm for one window request before answering `<rejected, T_next>`.
pub const TRIES: usize = 4;

/// `squeue --start` format of pending jobs: CPUs, expected start, expected end (`N/A` when
/// Slurm has not planned the job yet).
pub const PENDING_FORMAT: &str = "%C|%S|%e";

/// Parses `squeue -h --start -o` [`PENDING_FORMAT`]: `(start, end, cpus)` of the jobs Slurm
/// planned (the others are skipped: Slurm gives them no start).
pub fn parse_pending(out: &str) -> Vec<(u64, u64, u32)> {
    out.lines()
        .filter_map(|line| {
            let mut f = line.trim().splitn(3, '|');
            let cpus: u32 = f.next()?.trim().parse().ok()?;
            let start = SlurmTime::parse(f.next()?)?.to_unix_ms_local()?;
            let end = SlurmTime::parse(f.next()?)?.to_unix_ms_local()?;
            Some((start, end + INCLUSIVE_END_MS, cpus))
        })
        .collect()
}

/// `squeue` format of what holds cores: CPUs, end time (start + time limit; `NONE` without a
/// limit), reservation.
pub const HOLDING_FORMAT: &str = "%C|%e|%v";

/// A job holding cores: CPUs, end (Unix ms; `None`: no end known), reservation.
pub type Holding = (u32, Option<u64>, Option<String>);

/// Parses `squeue -h -o` [`HOLDING_FORMAT`].
pub fn parse_holding(out: &str) -> Result<Vec<Holding>, parse::ParseError> {
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let bad = |detail: String| parse::ParseError {
                what: "squeue (running jobs)",
                detail,
            };
            let f: Vec<&str> = line.trim().splitn(3, '|').collect();
            let [cpus, end, resv] = f.as_slice() else {
                return Err(bad(format!("expected cpus|end|reservation, got '{line}'")));
            };
            let cpus = cpus.trim().parse().map_err(|_| bad(format!("CPUs '{cpus}' is not a number")))?;
            let end = SlurmTime::parse(end).and_then(|t| t.to_unix_ms_local());
            let resv = resv.trim();
            let resv = (!resv.is_empty() && resv != "(null)" && resv != "N/A").then(|| resv.to_string());
            Ok((cpus, end, resv))
        })
        .collect()
}

/// Slurm's end times are inclusive at its 1 s resolution: a job that ends at `E` holds its
/// cores through `E` (a reservation starting at `E` is refused, at `E + 1 s` granted; checked
/// on Slurm 22.05).
const INCLUSIVE_END_MS: u64 = 1000;

/// The profile of a partition of `capacity` usable cores from `now` on: `jobs` until their
/// end (a job whose end passed is still finishing: one more second), reservations for their
/// time (a job inside a listed reservation is not counted twice); every end is inclusive.
pub fn partition_profile(capacity: u32, now: u64, jobs: &[Holding], reservations: &[(String, u64, u64, u32)]) -> Profile {
    let in_listed = |r: &Option<String>| r.as_ref().is_some_and(|r| reservations.iter().any(|(n, ..)| n == r));
    let job_items = jobs
        .iter()
        .filter(|(_, _, r)| !in_listed(r))
        .map(|&(cpus, end, _)| (now, end.map_or(FOREVER, |e| e.max(now) + INCLUSIVE_END_MS), cpus));
    let resv_items = reservations.iter().map(|&(_, s, e, c)| (s, e + INCLUSIVE_END_MS, c));
    Profile::build(capacity, now, job_items.chain(resv_items))
}

/// `scontrol create reservation` arguments for `processors` cores of `partition`, starting
/// `start_in_ms` from now (rounded up to seconds; Slurm's `now+N` is in seconds) for
/// `duration_ms` (rounded up to whole minutes, Slurm's resolution), usable by `user`.
pub fn create_args(name: &str, partition: &str, user: &str, processors: u32, start_in_ms: u64, duration_ms: u64) -> Vec<String> {
    let start = match start_in_ms.div_ceil(1000) {
        0 => "now".to_string(),
        s => format!("now+{s}"),
    };
    vec![
        "create".into(),
        "reservation".into(),
        format!("ReservationName={name}"),
        format!("StartTime={start}"),
        format!("Duration={}", duration_ms.div_ceil(60_000).max(1)),
        format!("Users={user}"),
        format!("CoreCnt={processors}"),
        format!("PartitionName={partition}"),
    ]
}

impl SlurmBackend {
    /// The usable cores of site `si` and what holds them from `now` on (fresh queries: a
    /// reservation is planned on the cluster's present state).
    fn committed(&self, si: usize, now: u64) -> Result<Profile, BackendError> {
        let s = &self.sites[si];
        let part = self.partition(s)?;
        let capacity = if part.up { part.total.saturating_sub(part.other) } else { 0 };
        let client = &self.clusters[s.cluster].client;
        let fault = |what: &str, e: &dyn std::fmt::Display| site_err(&s.spec.name, format!("{what}: {e}"));
        let partition = s.spec.slurm.partition.as_str();
        let out = client
            .run_args("squeue", &["-h", "-t", "R,CG,CF,S", "-p", partition, "-o", HOLDING_FORMAT])
            .map_err(|e| fault("squeue (running jobs)", &e))?;
        let jobs = parse_holding(&out.stdout).map_err(|e| fault("squeue", &e))?;
        let out = client
            .run_args("scontrol", &["show", "reservation"])
            .map_err(|e| fault("scontrol show reservation", &e))?;
        let resv: Vec<(String, u64, u64, u32)> = parse::parse_show_reservation(&out.stdout)
            .map_err(|e| fault("scontrol show reservation", &e))?
            .into_iter()
            .filter(|r| r.partition.as_deref().is_none_or(|p| p == partition))
            .filter_map(|r| {
                let start = r.start?.to_unix_ms_local()?;
                let end = r.end?.to_unix_ms_local()?;
                Some((r.name, start, end, r.cores))
            })
            .collect();
        Ok(partition_profile(capacity, now, &jobs, &resv))
    }

    /// 001 §3.1's queue estimate of a site: what holds its cores (see [`Self::committed`])
    /// and, planned, the pending jobs at the starts `squeue --start` expects.
    pub(super) fn slurm_queue_estimate(&self, site: &str, now: u64) -> Result<QueueEstimate, BackendError> {
        let (si, s) = self.site(site)?;
        let held = self.committed(si, now)?;
        let client = &self.clusters[s.cluster].client;
        let out = client
            .run_args(
                "squeue",
                &["-h", "--start", "-t", "PD", "-p", &s.spec.slurm.partition, "-o", PENDING_FORMAT],
            )
            .map_err(|e| site_err(site, format!("squeue --start: {e}")))?;
        let mut planned = held.clone();
        for (start, end, cpus) in parse_pending(&out.stdout) {
            planned.add(start.max(now), end.max(now + 1), cpus);
        }
        Ok(QueueEstimate::from_profiles(held, planned))
    }

    /// `scontrol create reservation` of `processors` cores at site `si` from `start_ms` for
    /// `duration_ms`; the id and the start Slurm gave it (1 s resolution).
    fn create_at(&self, si: usize, start_ms: u64, processors: u32, duration_ms: u64) -> Result<(String, u64), BackendError> {
        let s = &self.sites[si];
        let site = s.spec.name.as_str();
        let ci = s.cluster;
        let name = {
            let mut inner = self.inner.lock().unwrap();
            inner.next += 1;
            format!("koalesce-{site}-{}-{}", crate::now_ms(), inner.next)
        };
        let now = crate::now_ms();
        let start_in = start_ms.saturating_sub(now);
        let args = create_args(&name, &s.spec.slurm.partition, &self.user, processors, start_in, duration_ms);
        let client = &self.clusters[ci].client;
        match client.run("scontrol", &args) {
            Ok(_) => {}
            Err(e) if e.stderr().contains("Requested nodes are busy") || e.stderr().contains("Insufficient") => {
                let idle = self.count(si).map(|c| c.idle).unwrap_or(0);
                return Err(BackendError::Busy {
                    site: site.to_string(),
                    wanted: processors,
                    idle,
                });
            }
            Err(e) if e.stderr().contains("Access/permission denied") => {
                return Err(site_err(
                    site,
                    format!("creating a reservation needs Slurm operator rights (run koalesce as root or the SlurmUser): {e}"),
                ))
            }
            Err(e) => return Err(site_err(site, format!("scontrol create reservation: {e}"))),
        }
        self.inner
            .lock()
            .unwrap()
            .reservations
            .insert((ci, name.clone()), ReservationEntry { site: si, processors });
        // The start as Slurm booked it (`now+N` is counted from the controller's clock).
        let booked = client
            .run_args("scontrol", &["show", "reservation", &name])
            .ok()
            .and_then(|o| parse::parse_show_reservation(&o.stdout).ok())
            .and_then(|v| v.into_iter().next())
            .and_then(|r| r.start?.to_unix_ms_local());
        let start = booked.unwrap_or(now + start_in.div_ceil(1000) * 1000);
        Ok((format!("{RESERVATION_PREFIX}{}:{name}", client.cluster()), start))
    }

    pub(super) fn delete_reservation(&self, ci: usize, name: &str) -> Result<(), BackendError> {
        let client = &self.clusters[ci].client;
        match client.run_args("scontrol", &["delete", "reservation", name]) {
            Ok(_) => {}
            // Already gone (ended, or deleted before).
            Err(e) if e.stderr().contains("Requested reservation is invalid") => {}
            Err(e) => return Err(site_err(client.cluster(), format!("deleting reservation {name}: {e}"))),
        }
        self.inner.lock().unwrap().reservations.remove(&(ci, name.to_string()));
        Ok(())
    }

    /// Reservations this backend created and has not deleted: (id, site, processors).
    pub fn reservations_held(&self) -> Vec<(String, String, u32)> {
        let inner = self.inner.lock().unwrap();
        let mut v: Vec<(String, String, u32)> = inner
            .reservations
            .iter()
            .map(|((ci, name), r)| {
                (
                    format!("{RESERVATION_PREFIX}{}:{name}", self.clusters[*ci].client.cluster()),
                    self.sites[r.site].spec.name.clone(),
                    r.processors,
                )
            })
            .collect();
        v.sort();
        v
    }
}

impl Reservations for SlurmBackend {
    /// See the module docs: planned on the partition's running jobs and reservations, then
    /// asked of Slurm start by start.
    fn reserve_window(&self, req: &WindowRequest) -> Result<WindowAnswer, BackendError> {
        let (si, s) = self.site(&req.site)?;
        let now = crate::now_ms();
        let committed = self.committed(si, now)?;
        // Slurm books whole minutes.
        let duration = req.duration_ms.div_ceil(60_000).max(1) * 60_000;
        let plan = plan_window(
            now,
            &CoreRequest::window(req.processors, duration, req.earliest_ms, req.latest_ms),
            &committed,
            TRIES,
        );
        let mut refused = Vec::new();
        for &start in &plan.starts {
            match self.create_at(si, start, req.processors, req.duration_ms) {
                Ok((id, start_ms)) => return Ok(WindowAnswer::Granted { id, start_ms }),
                Err(e @ BackendError::Busy { .. }) => refused.push(format!("{start}: {e}")),
                Err(e) => return Err(e),
            }
        }
        let reason = match (plan.starts.is_empty(), plan.t_next) {
            (true, None) => format!(
                "partition '{}' never has {} core(s) free for {} ms ({} usable, the rest held without an end)",
                s.spec.slurm.partition,
                req.processors,
                duration,
                committed.capacity()
            ),
            (true, Some(t)) => format!("the cores are held during the whole window (running jobs, reservations); free from {t}"),
            (false, _) => format!("Slurm refused every start tried ({})", refused.join("; ")),
        };
        Ok(WindowAnswer::Rejected {
            t_next_ms: plan.t_next,
            reason,
        })
    }

    fn reserve(&self, req: &ReservationRequest) -> Result<String, BackendError> {
        let (si, _) = self.site(&req.site)?;
        self.create_at(si, req.start_ms, req.processors, req.duration_ms).map(|(id, _)| id)
    }

    /// The reservation id is the claim: a component submitted with it runs in the reservation
    /// (`sbatch --reservation`), and releasing it deletes the reservation.
    fn claim_reserved(&self, reservation: &str) -> Result<String, BackendError> {
        let (cluster, name) =
            parse_reservation_id(reservation).ok_or_else(|| site_err("slurm", format!("'{reservation}' is not a Slurm reservation id")))?;
        let ci = self
            .cluster_index(cluster)
            .ok_or_else(|| site_err(cluster, "no site of this backend is on that cluster"))?;
        if !self.inner.lock().unwrap().reservations.contains_key(&(ci, name.to_string())) {
            return Err(site_err(
                cluster,
                format!("reservation '{name}' does not exist (expired or cancelled)"),
            ));
        }
        Ok(reservation.to_string())
    }

    fn cancel_reservation(&self, id: &str) -> Result<(), BackendError> {
        let (cluster, name) = parse_reservation_id(id).ok_or_else(|| site_err("slurm", format!("'{id}' is not a Slurm reservation id")))?;
        let ci = self
            .cluster_index(cluster)
            .ok_or_else(|| site_err(cluster, "no site of this backend is on that cluster"))?;
        self.delete_reservation(ci, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holding_jobs_and_the_partition_profile() {
        let out = "6|2026-11-23T20:29:14|(null)\n1|NONE|(null)\n4|2026-11-23T20:40:00|koalesce-x-1\n\n";
        let jobs = parse_holding(out).unwrap();
        assert_eq!(jobs.len(), 3);
        assert_eq!(jobs[1], (1, None, None));
        assert_eq!(jobs[2].2.as_deref(), Some("koalesce-x-1"));
        let end = jobs[0].1.unwrap();
        assert_eq!(Some(end), SlurmTime::parse("2026-11-23T20:29:14").unwrap().to_unix_ms_local());
        for bad in ["x|NONE|(null)", "4|NONE", ""] {
            assert!(bad.is_empty() || parse_holding(bad).is_err(), "{bad}");
        }
        // 16 cores; now = end - 60 s: 6 until `end`, 1 forever, the job in the listed
        // reservation counts through the reservation (4 cores from end to end + 10 min).
        let now = end - 60_000;
        let resv = vec![("koalesce-x-1".to_string(), end, end + 600_000, 4)];
        let p = partition_profile(16, now, &jobs, &resv);
        assert_eq!(p.used_at(now), 7);
        // Ends are inclusive: the 6 cores are free one second after `end`.
        assert_eq!(p.used_at(end), 11);
        assert_eq!(p.used_at(end + 1_000), 5);
        assert_eq!(p.used_at(end + 600_000), 5);
        assert_eq!(p.used_at(end + 601_000), 1);
        // A job past its end still holds its cores for a second.
        let p = partition_profile(16, end + 5_000, &jobs[..1], &[]);
        assert_eq!((p.used_at(end + 5_000), p.used_at(end + 6_000)), (6, 0));
    }

    #[test]
    fn pending_jobs_with_expected_starts() {
        let out = "8|2026-11-23T21:00:00|2026-11-23T21:05:00\n4|N/A|N/A\nx|y|z\n";
        let p = parse_pending(out);
        assert_eq!(p.len(), 1);
        let start = SlurmTime::parse("2026-11-23T21:00:00").unwrap().to_unix_ms_local().unwrap();
        assert_eq!(p[0], (start, start + 300_000 + 1_000, 8));
    }

    #[test]
    fn reservation_arguments() {
        let a = create_args("r1", "debug", "root", 8, 0, 1);
        assert_eq!(
            a,
            [
                "create",
                "reservation",
                "ReservationName=r1",
                "StartTime=now",
                "Duration=1",
                "Users=root",
                "CoreCnt=8",
                "PartitionName=debug"
            ]
        );
        let a = create_args("r1", "debug", "root", 8, 10_001, 3_600_001);
        assert!(a.contains(&"StartTime=now+11".to_string()));
        assert!(a.contains(&"Duration=61".to_string()));
    }
}
