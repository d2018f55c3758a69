//! A koalesce server seen as one of 002's compute servers, for the live federation: the
//! snapshot of its local scheduler (the core) that AWT is computed on, its RU, and its offer
//! for a peer's job (ATT and RU), all from the core's state at a given time. Pure: the daemon
//! calls it under its state lock with its clock; the peers' answers and the decision then go
//! through [`super::policy`], the same code the simulator runs.
//!
//! A server with several sites is taken as one machine of all their processors (one node per
//! processor), with the rule that a job larger than its largest site cannot run there (AWT
//! infinite). Running components end at their start plus the job's runtime estimate; placed
//! and claimed ones hold their processors for the estimate from now; the placement queues,
//! highest priority first and in queue order, are the local queue.

use super::easy::{HeldJob, QueuedJob, RunningJob, Snapshot};
use super::policy::{att, ert, ru, Offer};
use super::Params;
use crate::model::{JobSpec, Millis, Priority};
use crate::scheduler::{Job, Scheduler};
use crate::state::{ComponentState, JobState};

/// What AWT and RU are computed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerView {
    pub snapshot: Snapshot,
    /// Processors of the largest site: no job larger than this runs here.
    pub largest_site: u32,
    /// Processors held by components (placed, claimed or running).
    pub busy: u32,
}

/// Processors a job asks for in all.
pub fn job_processors(spec: &JobSpec) -> u32 {
    match &spec.flexible {
        Some(f) => f.total,
        None => spec.components.iter().map(|c| c.processors).sum(),
    }
}

fn holds_processors(c: ComponentState) -> bool {
    matches!(
        c,
        ComponentState::Placed | ComponentState::Reserved | ComponentState::Claimed | ComponentState::Running
    )
}

/// The view of `core` at `now`.
pub fn server_view(core: &Scheduler, now: Millis) -> ServerView {
    let nodes: u32 = core.sites().iter().map(|s| s.processors).sum();
    let largest_site = core.sites().iter().map(|s| s.processors).max().unwrap_or(0);
    let mut running = Vec::new();
    let mut held = Vec::new();
    let mut busy: u32 = 0;
    for job in core.jobs() {
        if !matches!(job.state, JobState::Placed | JobState::Claimed | JobState::Running) {
            continue;
        }
        let procs: u32 = job
            .components
            .iter()
            .filter(|c| holds_processors(c.state))
            .map(|c| c.processors)
            .sum();
        // Never more than the server has (a site that reports more cannot make AWT fail).
        let procs = procs.min(nodes - busy);
        if procs == 0 {
            continue;
        }
        busy += procs;
        let estimate = job.spec.runtime_estimate_ms;
        match (job.state, job.timeline.started) {
            (JobState::Running, Some(start)) => running.push(RunningJob {
                nodes: procs,
                expected_end: start.saturating_add(estimate),
            }),
            _ => held.push(HeldJob {
                nodes: procs,
                estimate_ms: estimate,
            }),
        }
    }
    let mut queued = Vec::new();
    for p in Priority::ALL {
        for id in core.queued(p) {
            if let Some(job) = core.job(id) {
                queued.push(queued_job(job, nodes));
            }
        }
    }
    queued.retain(|q| q.nodes > 0);
    ServerView {
        snapshot: Snapshot {
            now,
            nodes,
            running,
            held,
            queued,
        },
        largest_site,
        busy,
    }
}

fn queued_job(job: &Job, nodes: u32) -> QueuedJob {
    QueuedJob {
        nodes: job_processors(&job.spec).min(nodes),
        estimate_ms: job.spec.runtime_estimate_ms,
    }
}

/// What a job needs, as a peer asks for it (002 §III-A1: "we only consider the CPU and run time
/// requirements of each job"), plus its data volumes for the ADTs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requirements {
    pub processors: u32,
    /// Runtime estimate on the job's home server.
    pub estimate_ms: Millis,
    /// Clock of the home server's processors (ERT scales with the ratio).
    pub home_mhz: u32,
    pub input_bytes: u64,
    pub output_bytes: u64,
}

/// ADT: bytes over a forecast bandwidth, in ms (rounded up; 0 bytes take no time).
pub fn adt(bytes: u64, bandwidth_bps: f64) -> Millis {
    if bytes == 0 {
        return 0;
    }
    let ms = (bytes as f64 * 8.0 / bandwidth_bps.max(1.0) * 1000.0).ceil();
    if ms >= Millis::MAX as f64 {
        Millis::MAX
    } else {
        ms as Millis
    }
}

/// AWT of a job here (`None`: infinite, it does not fit the largest site).
pub fn awt_here(view: &ServerView, processors: u32, estimate_ms: Millis) -> Option<Millis> {
    if processors == 0 || processors > view.largest_site {
        return None;
    }
    // The snapshot is built to be valid; a failure would be a bug, seen as "cannot hold it".
    super::easy::awt(&view.snapshot, processors, estimate_ms).ok().flatten()
}

/// This server's answer to `req`: ATT(j, here) and RU, with the AWT behind the ATT.
/// `remote` says whether the job would come from elsewhere (then its data move over
/// `bandwidth_bps`); the origin's own offer has no transfers.
pub fn offer(view: &ServerView, req: &Requirements, clock_mhz: u32, bandwidth_bps: f64, remote: bool) -> (Offer, Option<Millis>) {
    let run = ert(req.estimate_ms, req.home_mhz, clock_mhz);
    let wait = awt_here(view, req.processors, run);
    let (adt_in, adt_out) = if remote {
        (adt(req.input_bytes, bandwidth_bps), adt(req.output_bytes, bandwidth_bps))
    } else {
        (0, 0)
    };
    let offer = Offer {
        att: att(wait, adt_in, run, adt_out),
        ru: ru(view.busy, view.snapshot.nodes),
    };
    (offer, wait)
}

/// Why a job stays or moves, in words (what `koalesce federation status` shows).
pub fn explain(params: &Params, local: &Offer, local_awt: Option<Millis>, best_peer: Option<(&str, &Offer)>) -> String {
    let s = |m: Option<Millis>| m.map_or("infinite".to_string(), |v| format!("{:.1} s", v as f64 / 1000.0));
    match best_peer {
        None => format!(
            "local AWT {} (φ = {} s); no peer offered a finite ATT",
            s(local_awt),
            params.phi_ms / 1000
        ),
        Some((name, p)) => format!(
            "local ATT {} vs {} at {name} (RU {:.2}); migrate when local ATT > τ = {} × the minimum",
            s(local.att),
            s(p.att),
            p.ru,
            params.tau
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SchedulerConfig;
    use crate::model::{JobId, NetworkForecast, ReplicaCatalogue, Site};

    fn core(sites: &[u32]) -> Scheduler {
        let sites: Vec<Site> = sites
            .iter()
            .enumerate()
            .map(|(i, &p)| Site {
                name: format!("s{i}"),
                processors: p,
                speed: 1.0,
                supports_reservations: false,
                attributes: Default::default(),
            })
            .collect();
        let n = sites.len();
        Scheduler::new(
            SchedulerConfig::default(),
            sites,
            NetworkForecast::uniform(n, 1e9, 0),
            ReplicaCatalogue::default(),
        )
    }

    fn req(processors: u32, estimate_ms: Millis) -> Requirements {
        Requirements {
            processors,
            estimate_ms,
            home_mhz: 1000,
            input_bytes: 0,
            output_bytes: 0,
        }
    }

    #[test]
    fn an_idle_server_offers_its_run_time() {
        let c = core(&[8, 4]);
        let v = server_view(&c, 1_000);
        assert_eq!(v.snapshot.nodes, 12);
        assert_eq!(v.largest_site, 8);
        let (o, w) = offer(&v, &req(4, 60_000), 1000, 40e6, false);
        assert_eq!(w, Some(0));
        assert_eq!(o.att, Some(60_000));
        assert_eq!(o.ru, 0.0);
        // Twice the clock: half the run time. A job larger than the largest site: infinite.
        assert_eq!(offer(&v, &req(4, 60_000), 2000, 40e6, false).0.att, Some(30_000));
        assert_eq!(offer(&v, &req(9, 60_000), 1000, 40e6, false).0.att, None);
        // Coming from a peer: 5 MB in (1 s at 40 Mb/s, hidden by no wait: it decides the
        // start) and 25 MB out (5 s).
        let r = Requirements {
            input_bytes: 5_000_000,
            output_bytes: 25_000_000,
            ..req(4, 60_000)
        };
        assert_eq!(offer(&v, &r, 1000, 40e6, true).0.att, Some(1_000 + 60_000 + 5_000));
        assert_eq!(offer(&v, &r, 1000, 40e6, false).0.att, Some(60_000));
    }

    #[test]
    fn queued_jobs_make_the_wait() {
        let mut c = core(&[4]);
        // Two whole-server jobs queued (nothing runs: the core only places on a scan).
        for i in 0..2 {
            let spec = JobSpec::simple(format!("j{i}"), &[4], &[], 100_000);
            c.submit_with_id(0, JobId(i + 1), spec).unwrap();
        }
        let v = server_view(&c, 0);
        assert_eq!(v.snapshot.queued.len(), 2);
        // A third waits for both: 200 s.
        assert_eq!(awt_here(&v, 4, 10_000), Some(200_000));
        // A 1-processor job waits for both too (FCFS: no hole to backfill).
        assert_eq!(awt_here(&v, 1, 10_000), Some(200_000));
    }

    #[test]
    fn adt_rounds_up() {
        assert_eq!(adt(0, 1.0), 0);
        assert_eq!(adt(1, 8_000.0), 1);
        assert_eq!(adt(5_000_000, 40e6), 1_000);
        assert_eq!(adt(u64::MAX, 1.0), Millis::MAX);
    }
}
