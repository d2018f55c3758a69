//! The placement queues seen through placements (003 §4.2.1): weighted round-robin with the
//! 003 §5.2 weights, anti-starvation promotion every P tries, the placement-tries threshold.

mod common;

use common::*;
use koalesce_core::config::QueueWeights;
use koalesce_core::model::{NetworkForecast, PolicyKind, Priority, ReplicaCatalogue};
use koalesce_core::state::FailureReason;
use koalesce_core::{JobId, JobSpec, JobState, Scheduler, SchedulerConfig, SiteId};

const A: SiteId = SiteId(0);

fn one_site(config: SchedulerConfig, processors: u32) -> Scheduler {
    Scheduler::new(
        config,
        vec![site("a", processors)],
        NetworkForecast::uniform(1, 8e6, 0),
        ReplicaCatalogue::new(),
    )
}

fn ten(name: &str, priority: Priority) -> JobSpec {
    JobSpec {
        priority,
        policy: Some(PolicyKind::Wf),
        ..JobSpec::simple(name, &[10], &[], 10_000)
    }
}

#[test]
fn weighted_round_robin_with_the_5_2_weights_scans_high_twice_per_low() {
    // 003 §5.2.1: N_h = N_l = 1, n1 = 1, n2 = 2, n3 = n4 = 1. The round is
    // [super-high, high, high, low, super-low]; super-high and super-low are empty and skipped,
    // so successive scans walk high, high, low, high, high, low.
    // Before each scan the LRM reports exactly 10 idle processors, so each scan places exactly
    // the head of the queue it walks (the others are tried and do not fit).
    let config = SchedulerConfig {
        queue_weights: QueueWeights {
            n_high_group: 1,
            n_low_group: 1,
            n1: 1,
            n2: 2,
            n3: 1,
            n4: 1,
        },
        ..SchedulerConfig::default()
    };
    let mut s = one_site(config, 100);
    // Submission order interleaves the priorities; FCFS holds within each queue.
    let names = ["h1", "l1", "h2", "l2", "h3", "h4"];
    let ids: Vec<JobId> = names
        .iter()
        .map(|n| {
            let p = if n.starts_with('h') { Priority::High } else { Priority::Low };
            s.submit(0, ten(n, p)).unwrap()
        })
        .collect();
    let name_of = |id: JobId| names[ids.iter().position(|&x| x == id).unwrap()];
    let mut order = Vec::new();
    for k in 1..=6u64 {
        s.update_site_idle(A, 10);
        s.handle_timeout(60_000 * k);
        let placed: Vec<&str> = claims(&drain(&mut s)).into_iter().map(|c| name_of(c.0)).collect();
        assert_eq!(placed.len(), 1, "scan {k}: {placed:?}");
        order.push(placed[0]);
    }
    assert_eq!(order, vec!["h1", "h2", "l1", "h3", "h4", "l2"]);
    // Placement tries count the scans of a job's queue while it is in it: h4 was in the high
    // queue for scans 1, 2, 4 and 5 (placed at the 4th of its tries).
    assert_eq!(s.job(ids[5]).unwrap().placement_tries, 4);
    // l2 was tried at scans 3 and 6.
    assert_eq!(s.job(ids[3]).unwrap().placement_tries, 2);
    assert_eq!(s.stats().scans, 6);
}

#[test]
fn anti_starvation_moves_a_low_job_up_one_level_every_p_tries() {
    // P = 2, no processors free: the low job is tried at scans 1, 2 → promoted to high;
    // tried in the high queue at scans 3, 4 → promoted to super-high, where it stays.
    let config = SchedulerConfig {
        anti_starvation_tries: Some(2),
        ..SchedulerConfig::default()
    };
    let mut s = one_site(config, 10);
    s.update_site_idle(A, 0);
    let j = s.submit(0, ten("starving", Priority::Low)).unwrap();
    let mut levels = Vec::new();
    for k in 1..=6u64 {
        s.handle_timeout(60_000 * k);
        levels.push(s.job(j).unwrap().priority);
    }
    use Priority::*;
    assert_eq!(levels, vec![Low, High, High, SuperHigh, SuperHigh, SuperHigh]);
    assert_eq!(s.queued(SuperHigh).collect::<Vec<_>>(), vec![j]);
    assert_eq!(s.queue_length(), 1);
    assert_eq!(s.job(j).unwrap().spec.priority, Low, "the submitted priority is kept");
    // Once processors are free it is placed from the super-high queue.
    s.update_site_idle(A, 10);
    s.handle_timeout(60_000 * 7);
    assert_eq!(state(&s, j), JobState::Running);
}

#[test]
fn anti_starvation_never_promotes_super_low_jobs() {
    let config = SchedulerConfig {
        anti_starvation_tries: Some(1),
        ..SchedulerConfig::default()
    };
    let mut s = one_site(config, 10);
    s.update_site_idle(A, 0);
    let j = s.submit(0, ten("sl", Priority::SuperLow)).unwrap();
    for k in 1..=5u64 {
        s.handle_timeout(60_000 * k);
    }
    assert_eq!(s.job(j).unwrap().priority, Priority::SuperLow);
    assert_eq!(s.job(j).unwrap().placement_tries, 5);
}

#[test]
fn promoted_jobs_are_scanned_in_their_new_queue() {
    // Weights 1: round [SH, H, L, SL], P = 1.
    //   Scan 1 (SH empty → H): h1 takes the 10 free processors; h2 fails → super-high.
    //   Scan 2 (L): l1 fails (nothing free) → high.
    //   Scan 3 (SL empty → SH): h2 placed; l1, now in the high queue, is not tried.
    //   Scan 4 (H): l1 placed.
    let config = SchedulerConfig {
        anti_starvation_tries: Some(1),
        ..SchedulerConfig::default()
    };
    let mut s = one_site(config, 100);
    let h1 = s.submit(0, ten("h1", Priority::High)).unwrap();
    let h2 = s.submit(0, ten("h2", Priority::High)).unwrap();
    let l1 = s.submit(0, ten("l1", Priority::Low)).unwrap();
    s.update_site_idle(A, 10);
    s.handle_timeout(60_000);
    assert_eq!(state(&s, h1), JobState::Running);
    // h2 failed its try and was promoted to super-high.
    assert_eq!(s.job(h2).unwrap().priority, Priority::SuperHigh);
    s.update_site_idle(A, 0);
    s.handle_timeout(120_000);
    assert_eq!(s.job(l1).unwrap().priority, Priority::High);
    // Scan 3 walks super-high (h2); scan 4 walks high (l1).
    s.update_site_idle(A, 10);
    s.handle_timeout(180_000);
    assert_eq!(state(&s, h2), JobState::Running);
    assert_eq!(state(&s, l1), JobState::Queued);
    s.update_site_idle(A, 10);
    s.handle_timeout(240_000);
    assert_eq!(state(&s, l1), JobState::Running);
}

#[test]
fn the_placement_tries_threshold_fails_a_job() {
    let config = SchedulerConfig {
        max_placement_tries: Some(3),
        ..SchedulerConfig::default()
    };
    let mut s = one_site(config, 10);
    s.update_site_idle(A, 5);
    let j = s.submit(0, ten("never", Priority::High)).unwrap();
    s.handle_timeout(60_000);
    s.handle_timeout(120_000);
    assert_eq!(state(&s, j), JobState::Queued);
    s.handle_timeout(180_000);
    assert_eq!(state(&s, j), JobState::Failed(FailureReason::PlacementTries));
    assert_eq!(s.queue_length(), 0);
    assert_eq!(s.poll_timeout(), None);
    assert_eq!(s.job(j).unwrap().timeline.finished, Some(180_000));
}

#[test]
fn a_job_queued_while_a_scan_runs_stays_in_the_queue_it_walked() {
    // The scan judges each job right after its try; a job released into the walked queue by
    // another job's outcome (here a dependent of a job that fails in the scan) was not in the
    // queue when the scan began and must still be there after it.
    use koalesce_core::scheduler::{DependencyKind, Gate};
    let config = SchedulerConfig {
        max_placement_tries: Some(1),
        ..SchedulerConfig::default()
    };
    let mut s = one_site(config, 10);
    s.update_site_idle(A, 5);
    let a = s.submit_gated(0, JobId(1), ten("never", Priority::High), Gate::default()).unwrap();
    let small = JobSpec {
        priority: Priority::High,
        policy: Some(PolicyKind::Wf),
        ..JobSpec::simple("dependent", &[2], &[], 10_000)
    };
    let b = s
        .submit_gated(0, JobId(2), small, after(&[(a, DependencyKind::AfterNotOk)]))
        .unwrap();
    assert_eq!(state(&s, b), JobState::Held);
    s.handle_timeout(60_000);
    assert_eq!(state(&s, a), JobState::Failed(FailureReason::PlacementTries));
    assert_eq!(state(&s, b), JobState::Queued);
    assert_eq!(s.queued(Priority::High).collect::<Vec<_>>(), vec![b]);
    let next = s.poll_timeout().expect("a scan for the released job");
    s.handle_timeout(next);
    assert_ne!(state(&s, b), JobState::Queued, "placed by the next scan");
    assert_eq!(s.queue_length(), 0);
}

#[test]
fn take_progress_lists_jobs_in_the_order_their_tries_changed_with_their_current_tries() {
    // Enough jobs that the core walks its table instead of looking each one up (more than 64,
    // most of the table): the answer is the same, in the order the scans tried the jobs.
    let mut s = one_site(SchedulerConfig::default(), 10);
    s.update_site_idle(A, 5);
    let low: Vec<JobId> = (0..40)
        .map(|i| s.submit(0, ten(&format!("l{i}"), Priority::Low)).unwrap())
        .collect();
    let high: Vec<JobId> = (0..60)
        .map(|i| s.submit(0, ten(&format!("h{i}"), Priority::High)).unwrap())
        .collect();
    // First scan walks the high queue, the second the low one, the third the high one again.
    let mut now = 60_000;
    for _ in 0..3 {
        s.handle_timeout(now);
        now = s.poll_timeout().expect("jobs still queued");
    }
    let expected: Vec<_> = high
        .iter()
        .chain(&low)
        .map(|&id| {
            let j = s.job(id).unwrap();
            (id, j.placement_tries, j.claiming_tries, j.priority)
        })
        .collect();
    assert_eq!(expected[0].1, 2, "high jobs were tried twice");
    assert_eq!(expected[60].1, 1, "low jobs once");
    assert_eq!(s.take_progress(), expected);
    assert!(s.take_progress().is_empty());
    assert!(s.jobs().all(|j| !j.progress_pending));
}
