//! Soft errors and blacklisting (003 §3.2.2, §3.7), and submission validation.

mod common;

use common::*;
use koalesce_core::model::{ComponentSpec, NetworkForecast, PolicyKind, ReplicaCatalogue};
use koalesce_core::{Action, JobSpec, JobState, Scheduler, SchedulerConfig, SiteId, SubmitError};

const A: SiteId = SiteId(0);
const B: SiteId = SiteId(1);

fn wf(name: &str, sizes: &[u32]) -> JobSpec {
    JobSpec {
        policy: Some(PolicyKind::Wf),
        ..JobSpec::simple(name, sizes, &[], 10_000)
    }
}

fn two_sites(threshold: u32) -> Harness {
    let config = SchedulerConfig {
        blacklist_threshold: threshold,
        ..SchedulerConfig::default()
    };
    Harness::new(
        config,
        vec![site("a", 32), site("b", 16)],
        NetworkForecast::uniform(2, 8e6, 0),
        ReplicaCatalogue::new(),
    )
}

fn blacklists(h: &Harness) -> Vec<SiteId> {
    h.log
        .iter()
        .filter_map(|(_, a)| match a {
            Action::Blacklist { site } => Some(*site),
            _ => None,
        })
        .collect()
}

#[test]
fn consecutive_soft_errors_blacklist_a_site_and_the_job_completes_elsewhere() {
    // Threshold 2. WF sends the 16-processor job to a (32 > 16). Runs 10 s.
    //   60 000 placed, launched; 70 000 soft error at a (1) → back to the queue;
    //  120 000 placed at a again; 130 000 soft error (2) → Blacklist a, back to the queue;
    //  180 000 a counts 0 processors: placed at b; 190 000 succeeds.
    let mut h = two_sites(2);
    h.component_soft_errors[A.index()] = 2;
    let j = h.submit(wf("j", &[16]));
    h.run_until(70_000);
    assert_eq!(h.state(j), JobState::Queued);
    assert_eq!(h.s.site_view(A).consecutive_errors, 1);
    assert!(blacklists(&h).is_empty());
    h.run_until(130_000);
    assert_eq!(blacklists(&h), vec![A]);
    assert!(h.s.site_view(A).blacklisted);
    assert_eq!(h.state(j), JobState::Queued);
    assert_eq!(h.s.job(j).unwrap().error_resubmissions, 2);
    h.run_until(200_000);
    assert_eq!(h.state(j), JobState::Succeeded);
    assert_eq!(h.sites_of(j), vec![B]);
    assert_eq!(h.s.job(j).unwrap().timeline.finished, Some(190_000));
    assert_eq!(h.s.job(j).unwrap().timeline.submitted, 0);
    // The blacklisted site is no longer used, although it is the larger one.
    let k = h.submit(wf("k", &[8]));
    h.run_until(400_000);
    assert_eq!(h.state(k), JobState::Succeeded);
    assert_eq!(h.sites_of(k), vec![B]);
    assert_eq!(blacklists(&h), vec![A]);
    h.assert_clean();
}

#[test]
fn a_success_resets_the_consecutive_error_counter() {
    // Threshold 3: error, success, error, error at a → the counter goes 1, 0, 1, 2: never 3.
    let mut h = two_sites(3);
    h.component_soft_errors[A.index()] = 1;
    let j = h.submit(wf("j", &[16]));
    h.run_until(200_000);
    assert_eq!(h.state(j), JobState::Succeeded);
    assert_eq!(h.sites_of(j), vec![A]);
    assert_eq!(h.s.site_view(A).consecutive_errors, 0);
    assert_eq!(h.s.site_view(A).total_errors, 1);
    h.component_soft_errors[A.index()] = 2;
    // k: placed at a at 240 000, error at 250 000; again at 300 000, error at 310 000.
    let k = h.submit(wf("k", &[16]));
    h.run_until(320_000);
    assert_eq!(h.s.site_view(A).consecutive_errors, 2);
    assert!(!h.s.site_view(A).blacklisted);
    assert!(blacklists(&h).is_empty());
    h.run_until(1_000_000);
    assert_eq!(h.state(k), JobState::Succeeded);
    h.assert_clean();
}

#[test]
fn a_soft_error_in_one_component_aborts_the_others_and_resubmits_the_job() {
    // [16, 16] on a(32)… WF: 16 → a, 16 → max(a 16, b 16) → a. A soft error of one component
    // aborts the other, and the job is queued again with its submission time kept.
    let mut h = two_sites(5);
    h.component_soft_errors[A.index()] = 1;
    let j = h.submit(wf("j", &[16, 16]));
    h.run_until(70_000);
    assert_eq!(h.state(j), JobState::Queued);
    assert_eq!(aborts(&h.actions_since(0)), vec![(j, 1, A)]);
    assert!(h.held.is_empty());
    h.run_until(200_000);
    assert_eq!(h.state(j), JobState::Succeeded);
    h.assert_clean();
}

#[test]
fn a_soft_error_while_claiming_counts_against_the_site() {
    let mut h = two_sites(1);
    h.claim_soft_errors[A.index()] = 1;
    let j = h.submit(wf("j", &[16]));
    h.run_until(60_000);
    assert_eq!(blacklists(&h), vec![A]);
    assert_eq!(h.state(j), JobState::Queued);
    h.run_until(200_000);
    assert_eq!(h.state(j), JobState::Succeeded);
    assert_eq!(h.sites_of(j), vec![B]);
    h.assert_clean();
}

// ----- submission validation ----------------------------------------------------------------

fn validator() -> Scheduler {
    let mut cat = ReplicaCatalogue::new();
    cat.insert("known.dat", MB, [A]);
    Scheduler::new(
        SchedulerConfig::default(),
        vec![site("a", 16), site("b", 32)],
        NetworkForecast::uniform(2, 8e6, 0),
        cat,
    )
}

#[test]
fn a_component_larger_than_every_site_is_refused() {
    let mut s = validator();
    let err = s.submit(0, wf("huge", &[8, 40])).unwrap_err();
    assert_eq!(
        err,
        SubmitError::ComponentTooLarge {
            job: "huge".into(),
            component: 1,
            processors: 40,
            largest: 32,
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("'huge'") && msg.contains("component 1") && msg.contains("40") && msg.contains("32"),
        "{msg}"
    );
    assert_eq!(s.jobs().count(), 0);
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn an_unknown_fixed_site_is_refused() {
    let mut s = validator();
    let mut spec = wf("pinned", &[4, 4]);
    spec.components[0] = ComponentSpec {
        processors: 4,
        fixed_site: Some(SiteId(7)),
    };
    let err = s.submit(0, spec).unwrap_err();
    assert_eq!(
        err,
        SubmitError::UnknownSite {
            job: "pinned".into(),
            component: 0,
            site: SiteId(7),
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("'pinned'") && msg.contains("component 0") && msg.contains("site#7"),
        "{msg}"
    );
    assert_eq!(s.jobs().count(), 0);
}

#[test]
fn an_unknown_input_file_is_refused() {
    let mut s = validator();
    let spec = JobSpec::simple("reader", &[4], &["known.dat", "nope.dat"], 1_000);
    let err = s.submit(0, spec).unwrap_err();
    assert_eq!(
        err,
        SubmitError::UnknownFile {
            job: "reader".into(),
            file: "nope.dat".into(),
        }
    );
    let msg = err.to_string();
    assert!(msg.contains("'reader'") && msg.contains("'nope.dat'"), "{msg}");
    assert_eq!(s.jobs().count(), 0);
    // The same job without the unknown file is accepted.
    assert!(s.submit(0, JobSpec::simple("reader", &[4], &["known.dat"], 1_000)).is_ok());
}

#[test]
fn a_fixed_component_larger_than_its_site_is_refused() {
    let mut s = validator();
    let mut spec = wf("tight", &[20]);
    spec.components[0].fixed_site = Some(A);
    let err = s.submit(0, spec).unwrap_err();
    assert!(matches!(
        err,
        SubmitError::FixedSiteTooSmall {
            component: 0,
            processors: 20,
            capacity: 16,
            ..
        }
    ));
    assert!(err.to_string().contains("'a'"), "{err}");
}

#[test]
fn a_failed_transfer_is_a_soft_error_of_its_destination_and_is_not_cancelled() {
    // a(32) f(4); the 1 MB input takes 10 000 ms from f. The transfer to a fails at 70 000:
    // a soft error of a, the job returns to the queue; the failed transfer is over, so the
    // core must not ask to cancel it. The next placement (120 000) succeeds.
    let mut cat = ReplicaCatalogue::new();
    cat.insert("in", MB, [B]);
    let mut h = Harness::new(
        SchedulerConfig::default(),
        vec![site("a", 32), site("f", 4)],
        NetworkForecast::uniform(2, bps_for(MB, 10_000), 0),
        cat,
    );
    h.transfer_failures[A.index()] = 1;
    let j = h.submit(JobSpec {
        policy: Some(PolicyKind::Wf),
        ..JobSpec::simple("j", &[16], &["in"], 10_000)
    });
    h.run_until(70_000);
    assert_eq!(h.state(j), JobState::Queued);
    assert_eq!(h.s.site_view(A).consecutive_errors, 1);
    assert!(!h.log.iter().any(|(_, a)| matches!(a, Action::CancelTransfer { .. })));
    assert_eq!(aborts(&h.actions_since(0)), vec![(j, 0, A)], "the claimed component is aborted");
    h.run_until(300_000);
    assert_eq!(h.state(j), JobState::Succeeded);
    h.assert_clean();
}

#[test]
fn reservation_on_a_site_blacklisted_after_placement_is_not_claimed() {
    use koalesce_core::model::{NetworkForecast, ReplicaCatalogue, Site};
    use koalesce_core::{Action, JobSpec, Scheduler, SchedulerConfig, SiteId};
    let sites = vec![
        Site {
            name: "a".into(),
            processors: 8,
            speed: 1.0,
            supports_reservations: true,
            attributes: Default::default(),
        },
        Site {
            name: "b".into(),
            processors: 8,
            speed: 1.0,
            supports_reservations: false,
            attributes: Default::default(),
        },
    ];
    let mut catalogue = ReplicaCatalogue::new();
    catalogue.insert("f", 1_000_000_000, [SiteId(1)]);
    let config = SchedulerConfig {
        place_on_submit: true,
        ..SchedulerConfig::default()
    };
    let mut s = Scheduler::new(config, sites, NetworkForecast::uniform(2, 8e8, 0), catalogue);
    s.update_site_idle(SiteId(1), 0);
    let job = s.submit(0, JobSpec::simple("r", &[4], &["f"], 60_000)).unwrap();
    let actions: Vec<Action> = s.drain_actions().collect();
    assert!(
        actions.iter().any(|a| matches!(a, Action::Reserve { site: SiteId(0), .. })),
        "{actions:?}"
    );
    s.reservation_answer(0, job, 0, true);
    s.set_blacklisted(SiteId(0), true);
    let jst = s.job(job).unwrap().timeline.estimated_start.unwrap();
    s.handle_timeout(jst);
    let actions: Vec<Action> = s.drain_actions().collect();
    assert!(!actions.iter().any(|a| matches!(a, Action::Claim { .. })), "{actions:?}");
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::CancelReservation { site: SiteId(0), .. })),
        "{actions:?}"
    );
    assert_eq!(s.job(job).unwrap().state, koalesce_core::JobState::Queued);
}

fn one_site_scheduler(config: koalesce_core::SchedulerConfig) -> koalesce_core::Scheduler {
    use koalesce_core::model::{NetworkForecast, ReplicaCatalogue, Site};
    let sites = vec![Site {
        name: "only".into(),
        processors: 8,
        speed: 1.0,
        supports_reservations: false,
        attributes: Default::default(),
    }];
    koalesce_core::Scheduler::new(config, sites, NetworkForecast::uniform(1, 8e8, 0), ReplicaCatalogue::new())
}

fn run_to_soft_error(s: &mut koalesce_core::Scheduler, now: u64, job: koalesce_core::JobId) {
    use koalesce_core::{Action, ComponentOutcome};
    s.handle_timeout(now);
    let launched = s.drain_actions().any(|a| matches!(a, Action::Launch { .. }));
    assert!(launched, "job {job} did not launch at {now}");
    s.component_finished(now + 1, job, 0, ComponentOutcome::SoftError);
    s.drain_actions().for_each(drop);
}

#[test]
fn with_every_site_blacklisted_for_good_a_job_fails_as_unplaceable() {
    use koalesce_core::state::FailureReason;
    use koalesce_core::{JobSpec, JobState, SchedulerConfig};
    let config = SchedulerConfig {
        blacklist_threshold: 1,
        ..SchedulerConfig::default()
    };
    let mut s = one_site_scheduler(config);
    let job = s.submit(0, JobSpec::simple("j", &[4], &[], 1000)).unwrap();
    run_to_soft_error(&mut s, 60_000, job);
    assert!(s.site_view(koalesce_core::SiteId(0)).blacklisted);
    s.handle_timeout(120_000);
    assert_eq!(s.job(job).unwrap().state, JobState::Failed(FailureReason::Unplaceable));
}

#[test]
fn a_blacklist_with_expiry_readmits_the_site_and_the_job_runs_again() {
    use koalesce_core::{Action, JobSpec, JobState, SchedulerConfig};
    let config = SchedulerConfig {
        blacklist_threshold: 1,
        blacklist_expiry_ms: Some(300_000),
        ..SchedulerConfig::default()
    };
    let mut s = one_site_scheduler(config);
    let job = s.submit(0, JobSpec::simple("j", &[4], &[], 1000)).unwrap();
    run_to_soft_error(&mut s, 60_000, job);
    // Blacklisted at 60 001 until 360 001: scans in between place nothing.
    s.handle_timeout(120_000);
    assert_eq!(s.job(job).unwrap().state, JobState::Queued);
    assert_eq!(s.poll_timeout(), Some(180_000));
    s.handle_timeout(360_000);
    assert!(s.site_view(koalesce_core::SiteId(0)).blacklisted, "not yet re-admitted at 360 000");
    s.handle_timeout(360_001);
    assert!(!s.site_view(koalesce_core::SiteId(0)).blacklisted);
    s.handle_timeout(420_000);
    assert!(s.drain_actions().any(|a| matches!(a, Action::Launch { .. })));
    assert_eq!(s.job(job).unwrap().state, JobState::Running);
}
