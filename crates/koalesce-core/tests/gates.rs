//! Jobs held back from placement (user holds, Slurm-style dependencies) and the limit
//! outcomes (TIMEOUT, OUT_OF_MEMORY): what the core does with them, in virtual time.

mod common;

use common::*;
use koalesce_core::model::PolicyKind;
use koalesce_core::scheduler::{ComponentOutcome, Dependency, DependencyKind, Gate, GateError};
use koalesce_core::state::{ComponentState, FailureReason};
use koalesce_core::{JobId, JobSpec, JobState, Scheduler};

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
