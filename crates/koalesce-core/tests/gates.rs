//! Jobs held back from placement (user holds, Slurm-style dependencies) and the limit
//! outcomes (TIMEOUT, OUT_OF_MEMORY): what the core does with them, in virtual time.

mod common;

use common::*;
use koalesce_core::model::{NetworkForecast, PolicyKind, ReplicaCatalogue};
use koalesce_core::scheduler::{ComponentOutcome, Dependency, DependencyKind, Gate, GateError};
use koalesce_core::state::{ComponentState, FailureReason};
use koalesce_core::{JobId, JobSpec, JobState, Scheduler, SchedulerConfig};
use proptest::prelude::*;

fn spec(name: &str) -> JobSpec {
    let mut s = JobSpec::simple(name, &[2], &[], 60_000);
    s.policy = Some(PolicyKind::Wf);
    s
}

fn submit(s: &mut Scheduler, now: u64, id: u64, name: &str, gate: Gate) -> JobId {
    s.submit_gated(now, JobId(id), spec(name), gate).unwrap()
}

#[test]
fn afterok_waits_for_success_and_a_failure_ends_the_dependents_in_a_cascade() {
    let mut s = grid();
    let a = submit(&mut s, 0, 1, "a", Gate::default());
    let b = submit(&mut s, 0, 2, "b", after(&[(a, DependencyKind::AfterOk)]));
    let c = submit(&mut s, 0, 3, "c", after(&[(a, DependencyKind::After)]));
    assert_eq!(state(&s, b), JobState::Held);
    assert_eq!(s.job(b).unwrap().waiting_on.len(), 1);
    tick(&mut s, 60_000);
    assert_eq!(state(&s, a), JobState::Running);
    assert_eq!(state(&s, b), JobState::Held, "a held job is never placed");
    assert_eq!(state(&s, c), JobState::Queued, "after: released once a started");
    s.component_finished(61_000, a, 0, ComponentOutcome::Success);
    assert_eq!(state(&s, b), JobState::Queued);
    tick(&mut s, 120_000);
    assert_eq!(state(&s, b), JobState::Running);

    // A failed dependency: afterok can never be met, afternotok can; the end of the
    // dependent decides its own dependents in turn.
    let d = submit(&mut s, 120_000, 4, "d", after(&[(b, DependencyKind::AfterOk)]));
    let e = submit(&mut s, 120_000, 5, "e", after(&[(d, DependencyKind::AfterAny)]));
    let f = submit(&mut s, 120_000, 6, "f", after(&[(b, DependencyKind::AfterNotOk)]));
    s.component_finished(121_000, b, 0, ComponentOutcome::Timeout);
    assert_eq!(state(&s, b), JobState::Failed(FailureReason::Timeout));
    assert_eq!(state(&s, b).name(), "timeout");
    assert_eq!(state(&s, d), JobState::Failed(FailureReason::DependencyNeverSatisfied));
    assert_eq!(s.job(d).unwrap().timeline.finished, Some(121_000));
    assert_eq!(state(&s, e), JobState::Queued, "afterany: any end of d");
    assert_eq!(state(&s, f), JobState::Queued);
    // A dependency on an ended job is decided at once; on an unknown one refused.
    let g = submit(&mut s, 130_000, 7, "g", after(&[(b, DependencyKind::AfterOk)]));
    assert_eq!(state(&s, g), JobState::Failed(FailureReason::DependencyNeverSatisfied));
    let err = s
        .submit_gated(130_000, JobId(8), spec("h"), after(&[(JobId(99), DependencyKind::AfterAny)]))
        .unwrap_err();
    assert!(err.to_string().contains("afterany:99"), "{err}");
}

#[test]
fn a_held_job_is_placed_only_after_release() {
    let mut s = grid();
    let held = submit(&mut s, 0, 1, "h", Gate { hold: true, after: vec![] });
    let q = submit(&mut s, 0, 2, "q", Gate::default());
    assert_eq!(s.hold(0, q), Ok(()));
    tick(&mut s, 60_000);
    assert_eq!((state(&s, held), state(&s, q)), (JobState::Held, JobState::Held));
    assert_eq!(s.queue_length(), 0);
    assert_eq!(s.release_hold(60_000, q), Ok(()));
    assert_eq!(s.release_hold(60_000, q), Err(GateError::NotHeld(q)));
    tick(&mut s, 120_000);
    assert_eq!(state(&s, q), JobState::Running);
    assert!(matches!(s.hold(120_000, q), Err(GateError::NotPending { state: "running", .. })));
    // Held and waiting: released by the user, still waits for the dependency.
    let w = submit(
        &mut s,
        120_000,
        3,
        "w",
        Gate {
            hold: true,
            after: vec![Dependency::on(q, DependencyKind::AfterAny)],
        },
    );
    s.release_hold(121_000, w).unwrap();
    assert_eq!(state(&s, w), JobState::Held);
    s.component_finished(122_000, q, 0, ComponentOutcome::OutOfMemory);
    assert_eq!(state(&s, q).name(), "out_of_memory");
    assert_eq!(state(&s, w), JobState::Queued);
    // A held job can be cancelled.
    assert!(s.cancel(123_000, held));
    assert_eq!(state(&s, held), JobState::Cancelled);
}

#[test]
fn a_limit_fails_one_task_of_a_bag_and_the_whole_of_any_other_job() {
    let mut s = grid();
    let mut bag = JobSpec::simple("bag", &[2, 2], &[], 60_000);
    bag.min_components = Some(1);
    let bag = s.submit(0, bag).unwrap();
    tick(&mut s, 60_000);
    s.component_finished(61_000, bag, 0, ComponentOutcome::Timeout);
    assert_eq!(state(&s, bag), JobState::Running, "a bag goes on");
    s.component_finished(62_000, bag, 1, ComponentOutcome::Success);
    assert_eq!(state(&s, bag), JobState::Succeeded);
    let two = s.submit(62_000, JobSpec::simple("two", &[2, 2], &[], 60_000)).unwrap();
    tick(&mut s, 120_000);
    s.component_finished(121_000, two, 1, ComponentOutcome::OutOfMemory);
    assert_eq!(state(&s, two), JobState::Failed(FailureReason::OutOfMemory));
    let comps: Vec<_> = s.job(two).unwrap().components.iter().map(|c| (c.state, c.site.is_some())).collect();
    assert_eq!(comps, [(ComponentState::Aborted, true), (ComponentState::Failed, true)]);
}

/// A job cancelled while held for its begin time leaves the core's timer: however far its
/// begin time (here u64's last millisecond), the core asks for no wake-up for it.
#[test]
fn a_cancelled_job_leaves_the_begin_timer() {
    let mut s = grid();
    let mut far = spec("far");
    far.begin_ms = Some(u64::MAX);
    let a = s.submit(1_000, far).unwrap();
    assert_eq!(s.poll_timeout(), Some(u64::MAX));
    assert!(s.cancel(2_000, a));
    assert_eq!(state(&s, a), JobState::Cancelled);
    assert!(!s.job(a).unwrap().begin_pending);
    assert_eq!(s.poll_timeout(), None, "no wake-up for a cancelled job");
}

#[test]
fn a_job_with_a_begin_time_is_held_until_then_whatever_else_holds_it() {
    let mut s = grid();
    let mut late = spec("late");
    late.begin_ms = Some(50_000);
    let a = s.submit(1_000, late.clone()).unwrap();
    assert_eq!(state(&s, a), JobState::Held);
    assert!(s.job(a).unwrap().begin_pending);
    assert_eq!(s.poll_timeout(), Some(50_000), "the core asks to be woken at the begin time");
    tick(&mut s, 49_999);
    assert_eq!(state(&s, a), JobState::Held, "not a millisecond early");
    tick(&mut s, 50_000);
    assert!(!s.job(a).unwrap().begin_pending);
    tick(&mut s, 60_000);
    assert_eq!(state(&s, a), JobState::Running);

    // A begin time in the past changes nothing.
    let mut past = spec("past");
    past.begin_ms = Some(10_000);
    let b = s.submit(60_000, past).unwrap();
    assert_eq!(state(&s, b), JobState::Queued);

    // Held by its user as well: the begin time passing does not release it, release does;
    // released before the begin time, it still waits for it.
    late.begin_ms = Some(200_000);
    let c = s
        .submit_gated(100_000, JobId(10), late.clone(), Gate { hold: true, after: vec![] })
        .unwrap();
    tick(&mut s, 200_000);
    assert_eq!(state(&s, c), JobState::Held);
    s.release_hold(200_000, c).unwrap();
    assert_eq!(state(&s, c), JobState::Queued);
    late.begin_ms = Some(400_000);
    let d = s
        .submit_gated(300_000, JobId(11), late.clone(), Gate { hold: true, after: vec![] })
        .unwrap();
    s.release_hold(300_000, d).unwrap();
    assert_eq!(state(&s, d), JobState::Held, "released, but its begin time has not come");
    // With a dependency that is met before the begin time.
    late.begin_ms = Some(500_000);
    let e = s
        .submit_gated(300_000, JobId(12), late, after(&[(d, DependencyKind::AfterAny)]))
        .unwrap();
    assert!(s.cancel(300_500, d));
    assert_eq!(state(&s, e), JobState::Held, "dependency met, begin time not yet");
    tick(&mut s, 500_000);
    assert_eq!(state(&s, e), JobState::Queued);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Whatever the mix of jobs, policies (claiming, and reserving at a site that grants
    /// reservations, and the broker's TTD) and begin times (past, now, later), no job with a
    /// begin time is placed, reserved or started before it, and every job still ends.
    #[test]
    fn no_job_is_placed_before_its_begin_time(
        jobs in prop::collection::vec((0u64..100_000, prop::option::of(-50_000i64..200_000), 1u32..8, 1_000u64..60_000, 0usize..3), 1..12),
    ) {
        let mut h = Harness::new(
            SchedulerConfig::default(),
            vec![site("a", 8), reserving_site("b", 8)],
            NetworkForecast::uniform(2, 8e6, 0),
            ReplicaCatalogue::new(),
        );
        for (i, &(at, offset, size, runtime, policy)) in jobs.iter().enumerate() {
            let mut spec = JobSpec::simple(format!("j{i}"), &[size], &[], runtime);
            spec.policy = Some([PolicyKind::Wf, PolicyKind::Cf, PolicyKind::Ttd][policy]);
            spec.begin_ms = offset.map(|o| at.saturating_add_signed(o));
            h.at(at, Script::Submit(Box::new(spec)));
        }
        h.run_to_end(100_000_000);
        h.assert_clean();
        prop_assert_eq!(h.submitted.len(), jobs.len());
        for &id in &h.submitted {
            let j = h.s.job(id).unwrap();
            prop_assert!(j.state.is_terminal(), "{} is {:?}", id, j.state);
            if let Some(begin) = j.spec.begin_ms {
                let t = &j.timeline;
                for (what, when) in [("placed", t.first_placed), ("started", t.started)] {
                    prop_assert!(when.is_none_or(|w| w >= begin), "{} {} at {:?}, before its begin time {}", id, what, when, begin);
                }
            }
        }
        let reserved_early = h.log.iter().any(|(at, a)| match a {
            koalesce_core::Action::Reserve { job, .. } => h.s.job(*job).and_then(|j| j.spec.begin_ms).is_some_and(|b| *at < b),
            _ => false,
        });
        prop_assert!(!reserved_early, "a reservation was asked for before a job's begin time");
    }
}
