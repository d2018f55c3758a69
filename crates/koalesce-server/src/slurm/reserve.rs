//! Advance reservations on Slurm: `scontrol create reservation` / `scontrol delete
//! reservation`. Creating reservations needs Slurm operator rights: koalesce must run as
//! root or as the cluster's SlurmUser (docs/slurm.md).
//!
//! A reservation id (`resv:CLUSTER:NAME`) doubles as a claim: a component submitted with it
//! as its claim runs in the reservation (`sbatch --reservation=NAME`) and starts once the
//! reservation starts; releasing the claim deletes the reservation.

use crate::backend::{BackendError, ReservationRequest, Reservations};

use super::{parse_reservation_id, site_err, ReservationEntry, SlurmBackend, RESERVATION_PREFIX};

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
    fn reserve(&self, req: &ReservationRequest) -> Result<String, BackendError> {
        let (si, s) = self.site(&req.site)?;
        let ci = s.cluster;
        let name = {
            let mut inner = self.inner.lock().unwrap();
            inner.next += 1;
            format!("koalesce-{}-{}-{}", req.site, crate::now_ms(), inner.next)
        };
        let start_in = req.start_ms.saturating_sub(crate::now_ms());
        let args = create_args(
            &name,
            &s.spec.slurm.partition,
            &self.user,
            req.processors,
            start_in,
            req.duration_ms,
        );
        let client = &self.clusters[ci].client;
        match client.run("scontrol", &args) {
            Ok(_) => {}
            Err(e) if e.stderr().contains("Requested nodes are busy") || e.stderr().contains("Insufficient") => {
                let idle = self.count(si).map(|c| c.idle).unwrap_or(0);
                return Err(BackendError::Busy {
                    site: req.site.clone(),
                    wanted: req.processors,
                    idle,
                });
            }
            Err(e) if e.stderr().contains("Access/permission denied") => {
                return Err(site_err(
                    &req.site,
                    format!("creating a reservation needs Slurm operator rights (run koalesce as root or the SlurmUser): {e}"),
                ))
            }
            Err(e) => return Err(site_err(&req.site, format!("scontrol create reservation: {e}"))),
        }
        self.inner.lock().unwrap().reservations.insert(
            (ci, name.clone()),
            ReservationEntry {
                site: si,
                processors: req.processors,
            },
        );
        Ok(format!("{RESERVATION_PREFIX}{}:{name}", client.cluster()))
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
