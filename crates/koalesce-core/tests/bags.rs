//! How jobs end: bags of tasks (a failed task does not fail the bag; at least k must succeed),
//! other jobs (the first application error fails the job and aborts the rest), and the final
//! record the core keeps of a job that ended (what ran where, and how it ended).

mod common;

use common::*;
use koalesce_core::model::PolicyKind;
use koalesce_core::scheduler::ComponentOutcome;
use koalesce_core::state::{ComponentState, FailureReason};
use koalesce_core::{JobId, JobSpec, JobState, Scheduler};

/// Submits `sizes` (a bag with `k` when given), runs it, and returns the job id and its
/// claimed components in order.
fn running(s: &mut Scheduler, sizes: &[u32], k: Option<u32>) -> (JobId, Vec<u32>) {
    let mut spec = JobSpec::simple("j", sizes, &[], 60_000);
    spec.policy = Some(PolicyKind::Wf);
    spec.min_components = k;
    let j = s.submit(0, spec).unwrap();
    s.handle_timeout(60_000);
    let claimed: Vec<u32> = claims(&drain(s)).into_iter().map(|c| c.1).collect();
    assert_eq!(state(s, j), JobState::Running);
    (j, claimed)
}

fn component_states(s: &Scheduler, j: JobId) -> Vec<ComponentState> {
    s.job(j).unwrap().components.iter().map(|c| c.state).collect()
}

#[test]
fn a_failed_task_does_not_fail_a_bag_that_still_reaches_k() {
    let mut s = grid();
    let (j, comps) = running(&mut s, &[2, 2, 2], Some(2));
    assert_eq!(comps, vec![0, 1, 2]);
    s.component_finished(61_000, j, 1, ComponentOutcome::ApplicationError);
    // The bag goes on: nothing is aborted, the other tasks keep running.
    assert_eq!(state(&s, j), JobState::Running);
    assert!(aborts(&drain(&mut s)).is_empty());
    s.component_finished(62_000, j, 0, ComponentOutcome::Success);
    assert_eq!(state(&s, j), JobState::Running);
    s.component_finished(63_000, j, 2, ComponentOutcome::Success);
    assert_eq!(state(&s, j), JobState::Succeeded);
    assert_eq!(
        component_states(&s, j),
        vec![ComponentState::Finished, ComponentState::Failed, ComponentState::Finished]
    );
    assert_eq!(s.job(j).unwrap().timeline.finished, Some(63_000));
}

#[test]
fn a_bag_with_too_few_successes_fails_once_every_task_is_done() {
    let mut s = grid();
    let (j, _) = running(&mut s, &[2, 2, 2], Some(3));
    s.component_finished(61_000, j, 0, ComponentOutcome::ApplicationError);
    assert_eq!(state(&s, j), JobState::Running, "the other tasks run to their end");
    s.component_finished(62_000, j, 1, ComponentOutcome::Success);
    s.component_finished(63_000, j, 2, ComponentOutcome::Success);
    let reason = FailureReason::TooFewTasks {
        succeeded: 2,
        needed: 3,
        tasks: 3,
    };
    assert_eq!(state(&s, j), JobState::Failed(reason));
    assert_eq!(reason.to_string(), "bag: 2 of 3 components succeeded, at least 3 needed");
}

#[test]
fn any_other_job_fails_at_its_first_application_error_and_keeps_its_record() {
    let mut s = grid();
    let (j, _) = running(&mut s, &[4, 4, 4], None);
    let sites_before: Vec<_> = s.job(j).unwrap().components.iter().map(|c| c.site).collect();
    s.component_finished(61_000, j, 2, ComponentOutcome::ApplicationError);
    assert_eq!(state(&s, j), JobState::Failed(FailureReason::ApplicationError));
    let aborted: Vec<u32> = aborts(&drain(&mut s)).into_iter().map(|a| a.1).collect();
    assert_eq!(aborted, vec![0, 1]);
    // What ran where stays in the job's record, with how each component ended.
    let job = s.job(j).unwrap();
    assert_eq!(job.components.iter().map(|c| c.site).collect::<Vec<_>>(), sites_before);
    assert_eq!(
        component_states(&s, j),
        vec![ComponentState::Aborted, ComponentState::Aborted, ComponentState::Failed]
    );
}

#[test]
fn a_soft_error_in_a_bag_requeues_the_whole_bag() {
    let mut s = grid();
    let (j, _) = running(&mut s, &[2, 2], Some(1));
    s.component_finished(61_000, j, 0, ComponentOutcome::SoftError);
    assert_eq!(state(&s, j), JobState::Queued);
    assert_eq!(aborts(&drain(&mut s)).len(), 1);
    assert!(component_states(&s, j).iter().all(|c| *c == ComponentState::Unplaced));
}

#[test]
fn only_ended_jobs_can_be_forgotten() {
    let mut s = grid();
    let (j, _) = running(&mut s, &[2], None);
    assert!(s.forget(j).is_none(), "a running job stays");
    s.component_finished(61_000, j, 0, ComponentOutcome::Success);
    let job = s.forget(j).expect("an ended job is handed back");
    assert_eq!(job.state, JobState::Succeeded);
    assert!(s.job(j).is_none());
    assert!(s.cancel(62_000, JobId(99)).then_some(()).is_none());
}

#[test]
fn one_success_is_enough_for_a_bag_of_k_1() {
    let mut s = grid();
    let (j, _) = running(&mut s, &[1, 1, 1], Some(1));
    s.component_finished(61_000, j, 0, ComponentOutcome::ApplicationError);
    s.component_finished(61_000, j, 1, ComponentOutcome::Success);
    s.component_finished(61_000, j, 2, ComponentOutcome::ApplicationError);
    assert_eq!(state(&s, j), JobState::Succeeded, "{:?}", component_states(&s, j));
}
