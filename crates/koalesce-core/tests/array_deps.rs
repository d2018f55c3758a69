//! Dependencies on a whole array or bag of tasks (Slurm's `afterok:<array id>` waits for every
//! task), `%M` throttles that depend on one task, and dependents of a job that stages out
//! waiting until its outputs are registered.

mod common;

use common::*;
use koalesce_core::model::PolicyKind;
use koalesce_core::scheduler::{BagError, BagTask, ComponentOutcome, Dependency, DependencyKind, Gate};
use koalesce_core::state::FailureReason;
use koalesce_core::{JobId, JobSpec, JobState, Scheduler, SiteId};
use proptest::prelude::*;

fn spec(name: &str, stages_out: bool) -> JobSpec {
    let mut s = JobSpec::simple(name, &[1], &[], 60_000);
    s.policy = Some(PolicyKind::Wf);
    s.stages_out = stages_out;
    s
}

/// An array of `n` tasks with ids `first..first+n` (task k throttled behind task k-m with
/// `throttle = Some(m)`, as the daemon submits `--array=...%m`), declared one bag.
fn array(s: &mut Scheduler, now: u64, first: u64, n: u64, needed: u32, throttle: Option<u64>, stages_out: bool) -> Vec<JobId> {
    let mut ids = Vec::new();
    for k in 0..n {
        let gate = match throttle.filter(|&m| k >= m) {
            Some(m) => after(&[(ids[(k - m) as usize], DependencyKind::AfterAny)]),
            None => Gate::default(),
        };
        ids.push(
            s.submit_gated(now, JobId(first + k), spec(&format!("t{k}"), stages_out), gate)
                .unwrap(),
        );
    }
    let tasks: Vec<BagTask> = ids
        .iter()
        .enumerate()
        .map(|(k, &job)| BagTask {
            job,
            index: k as u64,
            ended: None,
        })
        .collect();
    s.declare_bag(JobId(first), needed, &tasks).unwrap();
    ids
}

fn dependent(s: &mut Scheduler, now: u64, id: u64, on: JobId, kind: DependencyKind) -> JobId {
    s.submit_gated(now, JobId(id), spec("dep", false), after(&[(on, kind)])).unwrap()
}

#[test]
fn afterok_on_an_array_waits_for_every_task_not_only_the_first() {
    let mut s = grid();
    let tasks = array(&mut s, 0, 1, 3, 3, None, false);
    let ok = dependent(&mut s, 0, 10, JobId(1), DependencyKind::AfterOk);
    let any = dependent(&mut s, 0, 11, JobId(1), DependencyKind::AfterAny);
    let started = dependent(&mut s, 0, 12, JobId(1), DependencyKind::After);
    tick(&mut s, 60_000);
    assert!(tasks.iter().all(|t| state(&s, *t) == JobState::Running));
    assert_eq!(state(&s, started), JobState::Queued, "after: every task started");
    s.component_finished(61_000, tasks[0], 0, ComponentOutcome::Success);
    assert_eq!(state(&s, tasks[0]), JobState::Succeeded);
    assert_eq!(
        state(&s, ok),
        JobState::Held,
        "task 0 alone (the array's id) does not satisfy afterok"
    );
    assert_eq!(state(&s, any), JobState::Held);
    s.component_finished(62_000, tasks[2], 0, ComponentOutcome::Success);
    assert_eq!(state(&s, ok), JobState::Held);
    s.component_finished(63_000, tasks[1], 0, ComponentOutcome::Success);
    assert_eq!((state(&s, ok), state(&s, any)), (JobState::Queued, JobState::Queued));
    assert_eq!(s.bag_progress(JobId(1)).unwrap().succeeded, 3);
}

#[test]
fn a_failed_task_ends_afterok_at_once_and_afternotok_waits_for_the_last_task() {
    let mut s = grid();
    let tasks = array(&mut s, 0, 1, 3, 3, None, false);
    let ok = dependent(&mut s, 0, 10, JobId(1), DependencyKind::AfterOk);
    let notok = dependent(&mut s, 0, 11, JobId(1), DependencyKind::AfterNotOk);
    tick(&mut s, 60_000);
    s.component_finished(61_000, tasks[1], 0, ComponentOutcome::ApplicationError);
    assert_eq!(state(&s, ok), JobState::Failed(FailureReason::DependencyNeverSatisfied));
    assert_eq!(state(&s, notok), JobState::Held, "the array has not ended");
    s.component_finished(62_000, tasks[0], 0, ComponentOutcome::Success);
    assert!(s.cancel(63_000, tasks[2]));
    assert_eq!(state(&s, notok), JobState::Queued);
    // Submitted once the array ended: decided at once.
    let late = dependent(&mut s, 64_000, 12, JobId(1), DependencyKind::AfterOk);
    assert_eq!(state(&s, late), JobState::Failed(FailureReason::DependencyNeverSatisfied));
}

#[test]
fn a_bag_needing_fewer_tasks_satisfies_afterok_once_every_task_ended() {
    let mut s = grid();
    let tasks = array(&mut s, 0, 1, 3, 2, None, false);
    let ok = dependent(&mut s, 0, 10, JobId(1), DependencyKind::AfterOk);
    tick(&mut s, 60_000);
    s.component_finished(61_000, tasks[0], 0, ComponentOutcome::Timeout);
    assert_eq!(state(&s, ok), JobState::Held, "2 of 3 may still succeed");
    s.component_finished(62_000, tasks[1], 0, ComponentOutcome::Success);
    assert_eq!(state(&s, ok), JobState::Held, "task 2 has not ended");
    s.component_finished(63_000, tasks[2], 0, ComponentOutcome::Success);
    assert_eq!(state(&s, ok), JobState::Queued);
}

#[test]
fn a_throttled_array_runs_task_by_task_and_its_dependent_waits_for_the_last() {
    let mut s = grid();
    // %1: task k waits for task k-1; task 1 waits for task 0, whose id is the array's.
    let tasks = array(&mut s, 0, 1, 3, 3, Some(1), false);
    let ok = dependent(&mut s, 0, 10, JobId(1), DependencyKind::AfterOk);
    let mut now = 0;
    for (k, t) in tasks.iter().enumerate() {
        now += 60_000;
        tick(&mut s, now);
        assert_eq!(state(&s, *t), JobState::Running, "task {k}");
        for later in &tasks[k + 1..] {
            assert_eq!(state(&s, *later), JobState::Held, "task {k} runs alone");
        }
        assert_eq!(state(&s, ok), JobState::Held);
        s.component_finished(now + 1_000, *t, 0, ComponentOutcome::Success);
    }
    assert_eq!(state(&s, ok), JobState::Queued);
}

#[test]
fn dependents_of_a_job_that_stages_out_wait_for_its_outputs() {
    let mut s = grid();
    let parent = s.submit_gated(0, JobId(1), spec("parent", true), Gate::default()).unwrap();
    let ok = dependent(&mut s, 0, 2, parent, DependencyKind::AfterOk);
    let any = dependent(&mut s, 0, 3, parent, DependencyKind::AfterAny);
    tick(&mut s, 60_000);
    s.component_finished(61_000, parent, 0, ComponentOutcome::Success);
    assert_eq!(state(&s, parent), JobState::Succeeded);
    assert!(s.job(parent).unwrap().outputs_pending);
    assert_eq!((state(&s, ok), state(&s, any)), (JobState::Held, JobState::Held));
    assert!(s.forget(parent).is_none(), "not forgotten before its outputs are registered");
    // Submitted meanwhile: waits too.
    let late = dependent(&mut s, 62_000, 4, parent, DependencyKind::AfterOk);
    assert_eq!(state(&s, late), JobState::Held);
    assert!(s.outputs_registered(63_000, parent));
    assert!(!s.outputs_registered(63_000, parent), "once");
    assert!([ok, any, late].iter().all(|j| state(&s, *j) == JobState::Queued));
    assert!(s.forget(parent).is_some());
    // A failure has no outputs to wait for.
    let failing = s.submit_gated(64_000, JobId(5), spec("f", true), Gate::default()).unwrap();
    let notok = dependent(&mut s, 64_000, 6, failing, DependencyKind::AfterNotOk);
    tick(&mut s, 130_000);
    s.component_finished(131_000, failing, 0, ComponentOutcome::ApplicationError);
    assert_eq!(state(&s, notok), JobState::Queued);
    assert!(!s.job(failing).unwrap().outputs_pending);
}

#[test]
fn forgotten_tasks_still_count_and_a_restart_declares_them_with_their_final_states() {
    let mut s = grid();
    let tasks = array(&mut s, 0, 1, 2, 2, None, true);
    tick(&mut s, 60_000);
    s.component_finished(61_000, tasks[0], 0, ComponentOutcome::Success);
    assert!(s.outputs_registered(61_500, tasks[0]));
    assert!(s.forget(tasks[0]).is_some(), "the array's own id may go; the array stays");
    let ok = dependent(&mut s, 62_000, 10, JobId(1), DependencyKind::AfterOk);
    assert_eq!(state(&s, ok), JobState::Held);
    s.component_finished(63_000, tasks[1], 0, ComponentOutcome::Success);
    assert_eq!(state(&s, ok), JobState::Held, "task 1's outputs are not registered yet");
    assert!(s.outputs_registered(64_000, tasks[1]));
    assert_eq!(state(&s, ok), JobState::Queued);
    assert!(s.forget(tasks[1]).is_some());
    assert_eq!(s.bag_progress(JobId(1)), None, "gone with its last task");

    // After a restart: task 0 ended (forgotten), task 1 still staging out.
    let mut r = grid();
    let task1 = r
        .adopt_staging_out(JobId(2), spec("t1", true), &[Some(SiteId(0))], Default::default())
        .unwrap();
    let task = |job, index, ended| BagTask { job, index, ended };
    assert_eq!(
        r.declare_bag(JobId(1), 2, &[task(JobId(1), 0, None), task(task1, 1, None)]),
        Err(BagError::UnknownTask {
            bag: JobId(1),
            task: JobId(1)
        })
    );
    let ok0 = Some(JobState::Succeeded);
    assert_eq!(
        r.declare_bag(JobId(1), 2, &[task(JobId(1), 0, ok0), task(task1, 0, None)]),
        Err(BagError::DuplicateIndex { bag: JobId(1), index: 0 })
    );
    r.declare_bag(JobId(1), 2, &[task(JobId(1), 0, ok0), task(task1, 1, None)]).unwrap();
    let ok = dependent(&mut r, 70_000, 10, JobId(1), DependencyKind::AfterOk);
    assert_eq!(state(&r, ok), JobState::Held);
    assert!(r.outputs_registered(71_000, task1));
    assert_eq!(state(&r, ok), JobState::Queued);
}

#[test]
fn a_dependency_on_one_task_of_an_array_waits_for_that_task_alone() {
    let mut s = grid();
    let tasks = array(&mut s, 0, 1, 3, 3, None, false);
    let on = |job: u64, task: Option<u64>| Gate {
        hold: false,
        after: vec![Dependency {
            job: JobId(job),
            kind: DependencyKind::AfterOk,
            task,
        }],
    };
    // Task 0 alone: its id is the array's, which without `_0` means every task.
    let first = s.submit_gated(0, JobId(10), spec("first", false), on(1, Some(0))).unwrap();
    let second = s.submit_gated(0, JobId(11), spec("second", false), on(1, Some(1))).unwrap();
    let whole = s.submit_gated(0, JobId(12), spec("whole", false), on(1, None)).unwrap();
    assert_eq!(s.job(first).unwrap().waiting_on[0].to_string(), "afterok:1_0");
    let err = s.submit_gated(0, JobId(13), spec("x", false), on(1, Some(7))).unwrap_err();
    assert!(err.to_string().contains("afterok:1_7: no such task"), "{err}");
    tick(&mut s, 60_000);
    s.component_finished(61_000, tasks[0], 0, ComponentOutcome::Success);
    assert_eq!(state(&s, first), JobState::Queued);
    assert_eq!((state(&s, second), state(&s, whole)), (JobState::Held, JobState::Held));
    assert!(s.forget(tasks[0]).is_some());
    // Decided at once on a forgotten task, by the state the array keeps of it.
    let late = s.submit_gated(62_000, JobId(14), spec("late", false), on(1, Some(0))).unwrap();
    assert_eq!(state(&s, late), JobState::Queued);
    s.component_finished(63_000, tasks[1], 0, ComponentOutcome::ApplicationError);
    assert_eq!(state(&s, second), JobState::Failed(FailureReason::DependencyNeverSatisfied));
    assert_eq!(state(&s, whole), JobState::Failed(FailureReason::DependencyNeverSatisfied));
}

#[test]
fn a_dependent_may_name_an_input_its_parent_will_register_checked_when_it_may_start() {
    let mut s = grid();
    let reader = |name: &str, file: &str| {
        let mut r = spec(name, false);
        r.input_files = vec![file.to_string()];
        r
    };
    let parent = s.submit_gated(0, JobId(1), spec("parent", true), Gate::default()).unwrap();
    let gate = || after(&[(parent, DependencyKind::AfterOk)]);
    let child = s.submit_gated(0, JobId(2), reader("child", "1/out"), gate()).unwrap();
    let orphan = s.submit_gated(0, JobId(3), reader("orphan", "1/never"), gate()).unwrap();
    tick(&mut s, 60_000);
    s.component_finished(61_000, parent, 0, ComponentOutcome::Success);
    // The driver registers the output, then tells the core.
    s.catalogue_mut().insert("1/out", 10, [SiteId(0)]);
    assert!(s.outputs_registered(62_000, parent));
    assert_eq!(state(&s, child), JobState::Queued);
    assert_eq!(state(&s, orphan), JobState::Failed(FailureReason::MissingInput));
    // Nothing left to wait for: an unknown input is refused at submission, as without a gate.
    let err = s.submit_gated(63_000, JobId(4), reader("late", "1/never"), gate()).unwrap_err();
    assert!(err.to_string().contains("1/never"), "{err}");
    assert!(s.job(JobId(4)).is_none());
}

/// What a task does in the property test.
#[derive(Debug, Clone, Copy)]
enum End {
    Succeed,
    Fail,
    Cancel,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the tasks do and in whatever order, each dependency on the array is decided
    /// exactly when the tasks as dependents see them (succeeded only once their outputs are
    /// registered) decide it, and a throttled array never deadlocks.
    #[test]
    fn array_dependencies_follow_every_task(
        ends in prop::collection::vec(prop_oneof![Just(End::Succeed), Just(End::Fail), Just(End::Cancel)], 1..6),
        order in prop::collection::vec(any::<prop::sample::Index>(), 6),
        needed in 1u32..6,
        stages_out in any::<bool>(),
        throttle in prop::option::of(1u64..3),
    ) {
        let n = ends.len() as u64;
        let mut s = grid();
        let tasks = array(&mut s, 0, 1, n, needed, throttle, stages_out);
        // Every kind on the whole array, on its task 0 alone (whose id is the array's) and on
        // its last task alone.
        let mut deps = Vec::new();
        for (i, task) in [None, Some(0), Some(n - 1)].into_iter().enumerate() {
            for (j, kind) in DependencyKind::ALL.into_iter().enumerate() {
                let d = Dependency { job: JobId(1), kind, task };
                let gate = Gate { hold: false, after: vec![d] };
                let id = JobId(100 + 10 * i as u64 + j as u64);
                deps.push((s.submit_gated(0, id, spec("dep", false), gate).unwrap(), d));
            }
        }
        let mut seen = vec![JobState::Queued; tasks.len()];
        let mut pending: Vec<usize> = (0..tasks.len()).collect();
        let mut now = 0;
        let mut step = 0;
        while !pending.is_empty() {
            now += 60_000;
            tick(&mut s, now);
            for (k, t) in tasks.iter().enumerate() {
                if state(&s, *t) == JobState::Running && seen[k] != JobState::Running && !seen[k].is_terminal() {
                    seen[k] = JobState::Running;
                }
            }
            prop_assert!(now < 100 * 60_000, "the throttled array does not deadlock");
            // A task that can act: running (to end), or any not ended (to be cancelled); else
            // the first one left, which no throttle holds back.
            let can_act = |k: usize| matches!(ends[k], End::Cancel) || state(&s, tasks[k]) == JobState::Running;
            let mut pick = order[step % order.len()].index(pending.len());
            step += 1;
            if !can_act(pending[pick]) {
                pick = 0;
            }
            let k = pending[pick];
            let t = tasks[k];
            match (ends[k], state(&s, t)) {
                (End::Cancel, _) => {
                    prop_assert!(s.cancel(now, t));
                    seen[k] = JobState::Cancelled;
                }
                (_, JobState::Running) => {
                    let outcome = if matches!(ends[k], End::Succeed) { ComponentOutcome::Success } else { ComponentOutcome::ApplicationError };
                    s.component_finished(now, t, 0, outcome);
                    if state(&s, t) == JobState::Succeeded && stages_out {
                        // Succeeded, but not seen so before its outputs are registered.
                        check(&s, &deps, &seen, needed)?;
                        prop_assert!(s.outputs_registered(now, t));
                    }
                    seen[k] = state(&s, t);
                }
                // Not placed yet: at the next tick.
                _ => continue,
            }
            pending.remove(pick);
            check(&s, &deps, &seen, needed)?;
        }
        prop_assert!(deps.iter().all(|d| state(&s, d.0) != JobState::Held), "every dependency decided once the array ended");
    }
}

/// What Slurm users expect of a dependency of `kind` on an array whose tasks are `seen` (as
/// dependents see them) and that needs `needed` successes: `None` undecided.
fn expected(kind: DependencyKind, seen: &[JobState], needed: u32) -> Option<bool> {
    let n = seen.len();
    let needed = (needed as usize).clamp(1, n);
    let ended = seen.iter().filter(|s| s.is_terminal()).count();
    let ok = seen.iter().filter(|s| **s == JobState::Succeeded).count();
    let started = seen.iter().filter(|s| **s == JobState::Running || s.is_terminal()).count();
    match kind {
        DependencyKind::After => (started == n).then_some(true),
        DependencyKind::AfterAny => (ended == n).then_some(true),
        // Never, as soon as more tasks ended badly than the array can spare.
        DependencyKind::AfterOk if ended - ok > n - needed => Some(false),
        DependencyKind::AfterOk => (ended == n).then_some(true),
        DependencyKind::AfterNotOk => (ended == n).then_some(ok < needed),
    }
}

/// Each dependent is held while its dependency is undecided, queued (or further) once
/// satisfied, failed once never satisfiable; one on a task alone as one on an array of that
/// task.
fn check(s: &Scheduler, deps: &[(JobId, Dependency)], seen: &[JobState], needed: u32) -> Result<(), TestCaseError> {
    for &(d, dep) in deps {
        let (k, got) = (dep.kind, state(s, d));
        let decided = match dep.task {
            Some(t) => expected(k, &seen[t as usize..=t as usize], 1),
            None => expected(k, seen, needed),
        };
        match decided {
            None => prop_assert_eq!(got, JobState::Held, "{:?} with {:?}", k, seen),
            Some(true) => prop_assert!(
                !matches!(got, JobState::Held | JobState::Failed(_)),
                "{:?} with {:?}: {:?}",
                k,
                seen,
                got
            ),
            Some(false) => prop_assert_eq!(
                got,
                JobState::Failed(FailureReason::DependencyNeverSatisfied),
                "{:?} with {:?}",
                k,
                seen
            ),
        }
    }
    Ok(())
}

/// A job that depended on the first task's id before the tasks were declared one array: from
/// the declaration on, its dependency is on the whole array (as every later one), not left
/// waiting for an event that would never decide it.
#[test]
fn dependents_of_the_first_task_before_the_declaration_wait_for_the_whole_array() {
    let mut s = grid();
    let t0 = s.submit_gated(0, JobId(1), spec("t0", false), Gate::default()).unwrap();
    let t1 = s.submit_gated(0, JobId(2), spec("t1", false), Gate::default()).unwrap();
    let early = dependent(&mut s, 0, 10, t0, DependencyKind::AfterOk);
    let task = |job, index| BagTask { job, index, ended: None };
    s.declare_bag(JobId(1), 2, &[task(t0, 0), task(t1, 1)]).unwrap();
    tick(&mut s, 60_000);
    s.component_finished(61_000, t0, 0, ComponentOutcome::Success);
    assert_eq!(
        state(&s, early),
        JobState::Held,
        "task 0 alone does not decide afterok on the array"
    );
    s.component_finished(62_000, t1, 0, ComponentOutcome::Success);
    assert_eq!(state(&s, early), JobState::Queued, "decided by the whole array");
}

/// A job that ran and whose stage-out a stop interrupted comes back even when one of its
/// inputs left the catalogue since (the user deleted it): it needs no input any more, and its
/// dependents wait for its outputs.
#[test]
fn a_job_staging_out_is_adopted_again_without_its_inputs() {
    let mut s = grid();
    let mut ran = spec("ran", true);
    ran.input_files = vec!["deleted.dat".into()];
    let id = s
        .adopt_staging_out(JobId(7), ran, &[Some(SiteId(1))], Default::default())
        .expect("adopted: its inputs were read already");
    let ok = dependent(&mut s, 0, 8, id, DependencyKind::AfterOk);
    assert_eq!(state(&s, ok), JobState::Held);
    // Adopting an id the core holds would replace that job, and its dependents with it.
    let again = s.adopt_staging_out(JobId(8), spec("x", true), &[Some(SiteId(0))], Default::default());
    assert!(again.unwrap_err().to_string().contains("job 8 is in the core already"));
    assert_eq!(state(&s, ok), JobState::Held);
    assert!(s.outputs_registered(1_000, id));
    assert_eq!(state(&s, ok), JobState::Queued);
}
