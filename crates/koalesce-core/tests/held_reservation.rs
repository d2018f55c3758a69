//! A job submitted into an advance reservation its owner holds (`reservation = "ID"`): it
//! runs at the reservation's site, claimed inside the reservation at its start, without
//! asking the site for another reservation; an invalid one is refused at submission; a
//! reservation gone at claim time fails the job instead of sending it elsewhere. Also the
//! queue-wait estimate the core makes of a site from its own jobs.

use koalesce_core::config::ScanInterval;
use koalesce_core::model::{HeldReservation, NetworkForecast, ReplicaCatalogue, Site};
use koalesce_core::state::FailureReason;
use koalesce_core::{Action, JobId, JobSpec, JobState, Millis, Scheduler, SchedulerConfig, SiteId};

const S: Millis = 1000;

fn core() -> Scheduler {
    let sites: Vec<Site> = ["a", "b"]
        .iter()
        .map(|n| Site {
            name: (*n).into(),
            processors: 8,
            speed: 1.0,
            supports_reservations: true,
            attributes: Default::default(),
        })
        .collect();
    let config = SchedulerConfig {
        place_on_submit: true,
        scan_interval: ScanInterval::Fixed { interval_ms: 10 * S },
        claim_fraction: 0.0,
        ..SchedulerConfig::default()
    };
    Scheduler::new(config, sites, NetworkForecast::uniform(2, 8e6, 0), ReplicaCatalogue::new())
}

fn held(site: u32, processors: u32, start: Millis, end: Millis) -> HeldReservation {
    HeldReservation {
        id: "R7".into(),
        site: SiteId(site),
        processors,
        start,
        end,
    }
}

fn job_in(sizes: &[u32], h: HeldReservation) -> JobSpec {
    let mut spec = JobSpec::simple("in-resv", sizes, &[], 60 * S);
    spec.preferences.held_reservation = Some(h);
    spec
}

fn claims(c: &mut Scheduler, id: JobId) -> Vec<(SiteId, bool)> {
    c.drain_actions()
        .filter_map(|a| match a {
            Action::Claim {
                job, site, reservation, ..
            } if job == id => Some((site, reservation)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_job_in_a_reservation_is_claimed_inside_it_at_its_start() {
    let mut c = core();
    // Site b is wholly idle, site a too: without the reservation the job could start at
    // once anywhere; with it, it waits for 100 s at b.
    let id = c.submit(0, job_in(&[4], held(1, 6, 100 * S, 400 * S))).unwrap();
    let actions: Vec<Action> = c.drain_actions().collect();
    assert!(
        !actions.iter().any(|a| matches!(a, Action::Reserve { .. } | Action::Claim { .. })),
        "no new reservation, no claim before the start: {actions:?}"
    );
    let j = c.job(id).unwrap();
    assert_eq!(j.state, JobState::Placed);
    assert_eq!(j.components[0].site, Some(SiteId(1)));
    assert_eq!(j.timeline.estimated_start, Some(100 * S));
    assert_eq!(c.poll_timeout(), Some(100 * S));
    c.handle_timeout(100 * S);
    assert_eq!(claims(&mut c, id), vec![(SiteId(1), true)]);
}

#[test]
fn a_reservation_that_began_is_claimed_at_once() {
    let mut c = core();
    let id = c.submit(50 * S, job_in(&[2], held(0, 2, 10 * S, 400 * S))).unwrap();
    // Due now: the driver's next timeout.
    assert_eq!(c.poll_timeout(), Some(50 * S));
    c.handle_timeout(50 * S);
    assert_eq!(claims(&mut c, id), vec![(SiteId(0), true)]);
}

#[test]
fn invalid_jobs_in_reservations_are_refused_naming_why() {
    let mut c = core();
    let cases = [
        (job_in(&[4, 4], held(0, 8, 0, 100 * S)), "exactly one component"),
        (job_in(&[6], held(0, 4, 0, 100 * S)), "holds 4 processor(s), the job asks for 6"),
        (job_in(&[1], held(5, 4, 0, 100 * S)), "its site does not exist"),
        (job_in(&[1], held(0, 4, 100 * S, 100 * S)), "ends before it starts"),
    ];
    for (spec, want) in cases {
        let e = c.submit(0, spec).unwrap_err().to_string();
        assert!(e.contains(want) && e.contains("R7"), "{e} (wanted '{want}')");
    }
    let mut spec = job_in(&[1], held(0, 4, 0, 100 * S));
    spec.components[0].fixed_site = Some(SiteId(1));
    assert!(c.submit(0, spec).unwrap_err().to_string().contains("another site"));
}

#[test]
fn a_reservation_gone_fails_the_job() {
    // Refused at claim time (cancelled at the site): the job fails, it is not re-placed.
    let mut c = core();
    let id = c.submit(0, job_in(&[4], held(0, 4, 0, 400 * S))).unwrap();
    c.handle_timeout(0);
    assert_eq!(claims(&mut c, id), vec![(SiteId(0), true)]);
    c.claim_rejected(S, id, 0, false);
    assert_eq!(c.job(id).unwrap().state, JobState::Failed(FailureReason::ReservationGone));
    assert!(claims(&mut c, id).is_empty());
    // Ended before the job could be placed (queued behind nothing, submitted late).
    let id = c.submit(500 * S, job_in(&[4], held(0, 4, 0, 400 * S))).unwrap();
    assert_eq!(c.job(id).unwrap().state, JobState::Failed(FailureReason::ReservationGone));
}

/// The queue-wait estimate the core makes from its own jobs (a local-executor site): a
/// running component holds its processors until its expected end; the TTD ranking uses it,
/// so a job waits for a faster busy site instead of taking a slower idle one.
#[test]
fn own_queue_estimates_plan_running_jobs_and_steer_the_ranking() {
    let run = |own: bool| {
        let mut sites_speed = core().sites().to_vec();
        sites_speed[0].speed = 2.0;
        for s in &mut sites_speed {
            s.supports_reservations = false;
        }
        let config = SchedulerConfig {
            place_on_submit: true,
            scan_interval: ScanInterval::Fixed { interval_ms: 10 * S },
            claim_fraction: 0.0,
            ..SchedulerConfig::default()
        };
        let mut c = Scheduler::new(config, sites_speed, NetworkForecast::uniform(2, 8e6, 0), ReplicaCatalogue::new());
        for s in 0..2 {
            c.estimate_queue_from_own_jobs(SiteId(s), own);
        }
        // 8 processors of a for 200 s of estimate (100 s at a's speed 2).
        let mut first = JobSpec::simple("first", &[8], &[], 200 * S);
        first.components[0].fixed_site = Some(SiteId(0));
        let first = c.submit(0, first).unwrap();
        assert_eq!(c.job(first).unwrap().state, JobState::Running);
        // At 10 s: a 1-processor job would wait 90 s at a, none at b (without an estimate of
        // its own or the driver's, the scheduler publishes none).
        let waits = [0, 1].map(|s| c.queue_wait_estimate(10 * S, SiteId(s), 1));
        assert_eq!(waits, if own { [Some(90 * S), Some(0)] } else { [None, None] });
        let e = c.own_queue_estimate(10 * S, SiteId(0));
        assert_eq!((e.held.used_at(10 * S), e.held.used_at(100 * S)), (8, 0));
        // A ttd job of 400 s: at a 90 + 200 = 290 s, at b 0 + 400 s.
        let mut second = JobSpec::simple("second", &[4], &[], 400 * S);
        second.policy = Some(koalesce_core::model::PolicyKind::Ttd);
        let second = c.submit(10 * S, second).unwrap();
        c.handle_timeout(10 * S);
        c.job(second).unwrap().components[0].site
    };
    // Idle-only view: a has no prediction, the job goes to b at once.
    assert_eq!(run(false), Some(SiteId(1)));
    // Planned: it waits for a.
    assert_eq!(run(true), None);
}

/// Advance reservations granted through the reservation service hold processors in the
/// queue estimate the core makes of a site (001 §3.1's queue wait), so `queue_wait_estimate`
/// and the TTS ranking see them; a job held in one is inside it and not counted twice.
#[test]
fn service_reservations_count_in_the_own_queue_estimate_and_the_ranking() {
    let mut c = core();
    for s in 0..2 {
        c.estimate_queue_from_own_jobs(SiteId(s), true);
    }
    assert_eq!(c.queue_wait_estimate(0, SiteId(0), 4), Some(0));
    // 6 of a's 8 processors reserved during [0, 50 s), all 8 during [50 s, 80 s).
    let service = vec![
        held(0, 6, 0, 50 * S),
        HeldReservation {
            id: "R8".into(),
            ..held(0, 8, 50 * S, 80 * S)
        },
    ];
    c.set_service_reservations(SiteId(0), service.clone());
    assert_eq!(c.queue_wait_estimate(0, SiteId(0), 2), Some(0));
    assert_eq!(c.queue_wait_estimate(0, SiteId(0), 4), Some(80 * S));
    assert_eq!(c.queue_wait_estimate(10 * S, SiteId(1), 4), Some(0));
    let e = c.own_queue_estimate(10 * S, SiteId(0));
    assert_eq!((e.held.used_at(10 * S), e.held.used_at(60 * S), e.held.used_at(80 * S)), (6, 8, 0));
    // A job held in R7 (6 processors at a from 0) is inside it: still 6 at 10 s, not 10.
    let id = c.submit(0, job_in(&[4], held(0, 6, 0, 50 * S))).unwrap();
    c.handle_timeout(0);
    assert_ne!(c.job(id).unwrap().components[0].site, None);
    assert_eq!(c.own_queue_estimate(10 * S, SiteId(0)).held.used_at(10 * S), 6);
    // The TTS ranking: a 4-processor job goes to idle b, not to a where it would wait.
    let mut tts = JobSpec::simple("tts", &[4], &[], 10 * S);
    tts.policy = Some(koalesce_core::model::PolicyKind::Tts);
    let j = c.submit(S, tts).unwrap();
    c.handle_timeout(S);
    assert_eq!(c.job(j).unwrap().components[0].site, Some(SiteId(1)));
    // Without them a would have won the tie (4 of its processors free now, lower id).
    c.set_service_reservations(SiteId(0), Vec::new());
    assert_eq!(c.queue_wait_estimate(S, SiteId(0), 4), Some(0));
}
