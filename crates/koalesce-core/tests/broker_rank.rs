//! The broker's ranking (001 §3.1) and co-allocation by reservations (001 §3.2) through the
//! scheduler, with rankings computed by hand.

use koalesce_core::broker::{PreferencesError, Profile, QueueEstimate, FOREVER};
use koalesce_core::config::ScanInterval;
use koalesce_core::model::{BenchmarkRef, CoallocationMode, JobPreferences, NetworkForecast, PolicyKind, ReplicaCatalogue, Site};
use koalesce_core::state::{ComponentState, FailureReason};
use koalesce_core::{Action, JobId, JobSpec, JobState, Millis, Scheduler, SchedulerConfig, SiteId, SubmitError};

const S: Millis = 1000;
const MB: u64 = 1_000_000;

fn site(name: &str, processors: u32, speed: f64, reservations: bool) -> Site {
    Site {
        name: name.into(),
        processors,
        speed,
        supports_reservations: reservations,
        attributes: Default::default(),
    }
}

fn config() -> SchedulerConfig {
    SchedulerConfig {
        place_on_submit: true,
        scan_interval: ScanInterval::Fixed { interval_ms: 10 * S },
        claim_fraction: 0.0,
        ..SchedulerConfig::default()
    }
}

/// 1 MB/s between every pair of sites, no latency: 100 MB take 100 s.
fn core(sites: Vec<Site>, catalogue: ReplicaCatalogue) -> Scheduler {
    let n = sites.len();
    Scheduler::new(config(), sites, NetworkForecast::uniform(n, 8e6, 0), catalogue)
}

fn job(policy: PolicyKind, sizes: &[u32], files: &[&str], runtime_s: u64) -> JobSpec {
    let mut spec = JobSpec::simple("j", sizes, files, runtime_s * S);
    spec.policy = Some(policy);
    spec
}

fn placed_sites(core: &Scheduler, id: JobId) -> Vec<SiteId> {
    core.job(id).unwrap().components.iter().map(|c| c.site.unwrap()).collect()
}

#[test]
fn ttd_and_tts_rank_the_same_sites_differently() {
    // A holds the 100 MB input; B runs twice as fast. Runtime estimate 400 s.
    //   A: TTS = 0 + 0 = 0 s,    TTD = 0 + 400 = 400 s
    //   B: TTS = 100 + 0 = 100 s, TTD = 100 + 200 = 300 s
    let mut cat = ReplicaCatalogue::new();
    cat.insert("in", 100 * MB, [SiteId(0)]);
    let sites = vec![site("a", 8, 1.0, false), site("b", 8, 2.0, false)];
    let mut c = core(sites.clone(), cat.clone());
    let ttd = c.submit(0, job(PolicyKind::Ttd, &[4], &["in"], 400)).unwrap();
    assert_eq!(placed_sites(&c, ttd), vec![SiteId(1)]);
    let p = c.job(ttd).unwrap().prediction.unwrap();
    assert_eq!(
        (p.site, p.stage_in_ms, p.queue_wait_ms, p.execution_ms),
        (SiteId(1), 100 * S, 0, 200 * S)
    );
    assert_eq!((p.tts_ms(), p.ttd_ms(), p.delivery()), (100 * S, 300 * S, 300 * S));

    let mut c = core(sites, cat);
    let tts = c.submit(0, job(PolicyKind::Tts, &[4], &["in"], 400)).unwrap();
    assert_eq!(placed_sites(&c, tts), vec![SiteId(0)]);
    let p = c.job(tts).unwrap().prediction.unwrap();
    assert_eq!((p.tts_ms(), p.ttd_ms()), (0, 400 * S));
}

#[test]
fn benchmarks_predict_execution_and_stage_out_counts_in_ttd() {
    // Same speed field, different published scores: linpack ref 100 → 600 s.
    //   a: 100 → 600 s; b: 300 → 200 s; c: 150 → 400 s (and stream missing → conservative).
    let mut sites = vec![site("a", 8, 1.0, false), site("b", 8, 1.0, false), site("c", 8, 1.0, false)];
    for (s, score) in sites.iter_mut().zip([100.0, 300.0, 150.0]) {
        s.attributes.benchmarks.insert("linpack".into(), score);
    }
    let mut c = core(sites, ReplicaCatalogue::new());
    let mut spec = job(PolicyKind::Ttd, &[2], &[], 9999);
    spec.preferences = JobPreferences {
        benchmarks: vec![BenchmarkRef {
            name: "linpack".into(),
            reference_score: 100.0,
            reference_time_ms: 600 * S,
        }],
        stage_in_ms: Some(30 * S),
        stage_out_ms: 50 * S,
        ..Default::default()
    };
    let id = c.submit(0, spec).unwrap();
    assert_eq!(placed_sites(&c, id), vec![SiteId(1)]);
    let p = c.job(id).unwrap().prediction.unwrap();
    // TTD = 30 (user's stage-in) + 0 + 200 + 50.
    assert_eq!(
        (p.stage_in_ms, p.execution_ms, p.stage_out_ms, p.ttd_ms()),
        (30 * S, 200 * S, 50 * S, 280 * S)
    );
}

#[test]
fn a_busy_site_is_ranked_by_its_queue_estimate_and_waited_for() {
    // a (speed 4) is full; b (speed 1) is idle. Runtime 400 s: a runs it in 100 s, b in 400 s.
    let sites = vec![site("a", 8, 4.0, false), site("b", 8, 1.0, false)];
    let mut c = core(sites, ReplicaCatalogue::new());
    c.update_site_idle(SiteId(0), 0);
    // a's queue frees its processors at 1000 s: TTD(a) = 1000 + 100 > TTD(b) = 400.
    c.update_site_queue_estimate(
        SiteId(0),
        QueueEstimate::plan(8, 0, [(0, 1000 * S, 8)], [], koalesce_core::broker::QueueOrder::Fcfs),
    );
    let first = c.submit(0, job(PolicyKind::Ttd, &[4], &[], 400)).unwrap();
    assert_eq!(placed_sites(&c, first), vec![SiteId(1)]);
    // Now a frees at 100 s: TTD(a) = 100 + 100 = 200 < TTD(b) = 400 (b is still idle enough).
    c.update_site_queue_estimate(
        SiteId(0),
        QueueEstimate::plan(8, 0, [(0, 100 * S, 8)], [], koalesce_core::broker::QueueOrder::Fcfs),
    );
    let second = c.submit(0, job(PolicyKind::Ttd, &[4], &[], 400)).unwrap();
    // a does not reserve: the job waits for it in the queue rather than take b.
    assert_eq!(c.job(second).unwrap().state, JobState::Queued);
    assert_eq!(c.broker_stats().waits_for_best_site, 1);
    // a's processors come free; the next scan places the job there.
    c.update_site_idle(SiteId(0), 8);
    c.update_site_queue_estimate(
        SiteId(0),
        QueueEstimate::plan(8, 100 * S, [], [], koalesce_core::broker::QueueOrder::Fcfs),
    );
    let at = c.poll_timeout().unwrap();
    c.handle_timeout(at.max(100 * S));
    assert_eq!(placed_sites(&c, second), vec![SiteId(0)]);
}

#[test]
fn a_reserving_site_gets_a_reservation_at_the_predicted_start() {
    // a (speed 2, reservations) is held until 100 s; b (speed 1) is idle. Runtime 400 s:
    //   a: TTS = 100, TTD = 100 + 200 = 300; b: TTS = 0, TTD = 400.
    let sites = vec![site("a", 8, 2.0, true), site("b", 8, 1.0, false)];
    let mut c = core(sites, ReplicaCatalogue::new());
    c.update_site_idle(SiteId(0), 0);
    c.update_site_queue_estimate(
        SiteId(0),
        QueueEstimate::from_profiles(Profile::build(8, 0, [(0, 100 * S, 8)]), Profile::build(8, 0, [(0, 100 * S, 8)])),
    );
    let id = c.submit(0, job(PolicyKind::Ttd, &[4], &[], 400)).unwrap();
    let actions: Vec<Action> = c.drain_actions().collect();
    // The reservation covers the runtime estimate at a's speed (200 s).
    assert!(actions.contains(&Action::Reserve {
        job: id,
        component: 0,
        site: SiteId(0),
        processors: 4,
        start: 100 * S,
        duration: 200 * S,
    }));
    let j = c.job(id).unwrap();
    assert_eq!(j.timeline.estimated_start, Some(100 * S));
    let p = j.prediction.unwrap();
    assert!(p.reserved);
    assert_eq!((p.queue_wait_ms, p.ttd_ms()), (100 * S, 300 * S));
    c.reservation_answer(0, id, 0, true);
    // Claimed inside the reservation at its start.
    assert_eq!(c.poll_timeout(), Some(100 * S));
    c.handle_timeout(100 * S);
    let actions: Vec<Action> = c.drain_actions().collect();
    assert!(actions
        .iter()
        .any(|a| matches!(a, Action::Claim { job, reservation: true, .. } if *job == id)));
    // The estimate now holds the booking: a second identical job is predicted after it.
    let e = c.queue_estimate(SiteId(0)).unwrap();
    assert_eq!(e.held.used_at(150 * S), 4);
}

#[test]
fn multi_component_jobs_go_to_the_best_sites_where_they_fit_now() {
    // Speeds 1, 3, 2; 8 processors each; no files. Components 6, 6, 4, runtime 600 s:
    // exec 600 / 200 / 300 s. 6 → b (200 s), 6 → c (b is left with 2), 4 → a (the only room).
    let sites = vec![site("a", 8, 1.0, false), site("b", 8, 3.0, false), site("c", 8, 2.0, false)];
    let mut c = core(sites, ReplicaCatalogue::new());
    let id = c.submit(0, job(PolicyKind::Ttd, &[4, 6, 6], &[], 600)).unwrap();
    assert_eq!(placed_sites(&c, id), vec![SiteId(0), SiteId(1), SiteId(2)]);
    // The job's prediction: all start at once; the slowest component (a: 600 s) delivers last.
    let p = c.job(id).unwrap().prediction.unwrap();
    assert_eq!((p.tts_ms(), p.execution_ms), (0, 600 * S));
}

#[test]
fn bad_preferences_are_refused_naming_the_field() {
    let mut c = core(vec![site("a", 8, 1.0, false)], ReplicaCatalogue::new());
    let mut spec = job(PolicyKind::Ttd, &[1], &[], 1);
    spec.preferences.benchmarks = vec![BenchmarkRef {
        name: "x".into(),
        reference_score: 0.0,
        reference_time_ms: 1,
    }];
    let e = c.submit(0, spec.clone()).unwrap_err();
    assert!(
        matches!(
            &e,
            SubmitError::InvalidPreferences {
                reason: PreferencesError::BadReferenceScore { index: 0 },
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("benchmarks[0].reference_score"), "{e}");
    spec.preferences = JobPreferences {
        earliest_start_ms: Some(10),
        latest_start_ms: Some(5),
        ..Default::default()
    };
    let e = c.submit(0, spec).unwrap_err();
    assert!(
        matches!(
            &e,
            SubmitError::InvalidPreferences {
                reason: PreferencesError::LatestBeforeEarliest {
                    earliest_ms: 10,
                    latest_ms: 5
                },
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("latest_start_ms"), "{e}");
}

fn reservations_job(sizes: &[u32], runtime_s: u64, latest_s: Option<u64>) -> JobSpec {
    let mut spec = job(PolicyKind::Ttd, sizes, &[], runtime_s);
    spec.preferences.coallocation = Some(CoallocationMode::Reservations);
    spec.preferences.max_start_deviation_ms = Some(60 * S);
    spec.preferences.latest_start_ms = latest_s.map(|l| l * S);
    spec
}

fn reserves(actions: &[Action]) -> Vec<(u32, SiteId, Millis, Millis)> {
    let mut v: Vec<_> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Reserve {
                component,
                site,
                start,
                duration,
                ..
            } => Some((*component, *site, *start, *duration)),
            _ => None,
        })
        .collect();
    v.sort();
    v
}

#[test]
fn co_allocation_by_reservations_books_one_window() {
    // Three reserving sites of 8. a is held until 300 s, b until 500 s, c is free; each
    // component needs 8 processors for 100 s; ε = 60 s. The earliest window with three free
    // sites starts at 500 s (b).
    let sites = vec![site("a", 8, 1.0, true), site("b", 8, 1.0, true), site("c", 8, 1.0, true)];
    let mut c = core(sites, ReplicaCatalogue::new());
    let held = |until: Millis| QueueEstimate::from_starts(8, 0, [(0, until, 8)], []);
    c.update_site_queue_estimate(SiteId(0), held(300 * S));
    c.update_site_queue_estimate(SiteId(1), held(500 * S));
    c.update_site_queue_estimate(SiteId(2), held(0));
    let id = c.submit(0, reservations_job(&[8, 8, 8], 100, None)).unwrap();
    let actions: Vec<Action> = c.drain_actions().collect();
    let r = reserves(&actions);
    assert_eq!(r.len(), 3, "{actions:?}");
    let starts: Vec<Millis> = r.iter().map(|x| x.2).collect();
    let (lo, hi) = (*starts.iter().min().unwrap(), *starts.iter().max().unwrap());
    assert!(hi - lo <= 60 * S && hi <= 500 * S && lo >= 440 * S, "{r:?}");
    // Each reservation ends with the 100 s run from the job's start.
    assert!(r.iter().all(|x| x.2 + x.3 == hi + 100 * S), "{r:?}");
    let mut used: Vec<SiteId> = r.iter().map(|x| x.1).collect();
    used.sort();
    assert_eq!(used, vec![SiteId(0), SiteId(1), SiteId(2)]);
    let j = c.job(id).unwrap();
    assert_eq!(j.state, JobState::Placed);
    assert_eq!(j.timeline.estimated_start, Some(hi));
    assert!(j.components.iter().all(|c| c.state == ComponentState::Reserved));
    for comp in 0..3 {
        c.reservation_answer(0, id, comp, true);
    }
    assert_eq!(c.poll_timeout(), Some(hi));
    c.handle_timeout(hi);
    let claims = c
        .drain_actions()
        .filter(|a| matches!(a, Action::Claim { reservation: true, .. }))
        .count();
    assert_eq!(claims, 3);
    let stats = c.broker_stats();
    assert_eq!((stats.coallocations, stats.coallocations_succeeded), (1, 1));
}

#[test]
fn co_allocation_waits_for_a_window_and_fails_past_the_latest_start() {
    // Two reserving sites held forever: no window ever. A job with a latest start of 100 s
    // stays queued until then and fails as unplaceable at the first try after it.
    let sites = vec![site("a", 8, 1.0, true), site("b", 8, 1.0, true)];
    let mut c = core(sites, ReplicaCatalogue::new());
    for s in 0..2 {
        c.update_site_queue_estimate(SiteId(s), QueueEstimate::from_starts(8, 0, [(0, FOREVER, 8)], []));
    }
    let id = c.submit(0, reservations_job(&[4, 4], 100, Some(100))).unwrap();
    assert_eq!(c.job(id).unwrap().state, JobState::Queued);
    let mut now = 0;
    while c.job(id).unwrap().state == JobState::Queued {
        now = c.poll_timeout().unwrap();
        c.handle_timeout(now);
    }
    assert!(now > 100 * S && now <= 110 * S, "failed at {now}");
    assert_eq!(c.job(id).unwrap().state, JobState::Failed(FailureReason::Unplaceable));
    // A component no reserving site can hold fails at once.
    let mut c = core(vec![site("a", 8, 1.0, false), site("b", 8, 1.0, true)], ReplicaCatalogue::new());
    let mut spec = reservations_job(&[4], 10, None);
    spec.components[0].fixed_site = Some(SiteId(0));
    let id = c.submit(0, spec).unwrap();
    assert_eq!(c.job(id).unwrap().state, JobState::Failed(FailureReason::Unplaceable));
}
