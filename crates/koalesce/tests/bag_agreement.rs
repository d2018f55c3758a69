//! One scheduling core, two worlds: the same bags of tasks run through the simulator (virtual
//! time, simulated LRM) and through the daemon (real processes under supervisors) end the
//! same way, because the bag's semantics live in the core (a failed task does not fail the
//! bag; the bag succeeds when at least `min_components` tasks succeed).

use std::path::Path;
use std::time::{Duration, Instant};

use koalesce_core::JobState;
use koalesce_server::{BackgroundServer, SupervisorCommand};
use koalesce_sim::scenario::Scenario;

/// (name, tasks, min_components, failing tasks). The site (16 processors) holds every bag whole,
/// so each runs all its tasks in both worlds.
const BAGS: &[(&str, u32, u32, &[u32])] = &[
    ("all-ok", 3, 2, &[]),
    ("one-fails-k2", 3, 2, &[1]),
    ("one-fails-k3", 3, 3, &[1]),
    ("two-fail-k1", 3, 1, &[0, 2]),
    ("all-fail", 2, 1, &[0, 1]),
];

fn sim_states() -> Vec<(String, JobState)> {
    let jobs: Vec<String> = BAGS
        .iter()
        .enumerate()
        .map(|(i, (name, n, k, failing))| {
            format!(
                "{{ name = \"{name}\", submit_s = {i}, components = {:?}, runtime_s = 5, min_components = {k}, failing_components = {failing:?} }}",
                vec![1; *n as usize]
            )
        })
        .collect();
    let text = format!(
        "name = \"bags\"\n[[sites]]\nname = \"vu\"\nprocessors = 16\n[workload]\nkind = \"jobs\"\njobs = [\n{}\n]\n",
        jobs.join(",\n")
    );
    let scenario = Scenario::parse(&text, Path::new("bags.toml")).expect("scenario");
    let result = koalesce_sim::engine::run(&scenario, 1, &mut |_| {}).expect("simulation runs");
    assert!(result.rejected.is_empty(), "{:?}", result.rejected);
    result.jobs.iter().map(|j| (j.name.clone(), j.state)).collect()
}

fn daemon_states() -> Vec<(String, JobState)> {
    let tmp = tempfile::tempdir().unwrap();
    let supervisor = SupervisorCommand {
        program: env!("CARGO_BIN_EXE_koalesce").into(),
        args: vec!["supervise".into()],
        launcher: Some(vec!["supervise-launcher".into()]),
    };
    let tok = koalesce_server::create_token(tmp.path(), "tester", false).unwrap();
    let srv = BackgroundServer::start(koalesce_server::test_options(tmp.path(), &[("vu", 16)], supervisor)).unwrap();
    let ids: Vec<u64> = BAGS
        .iter()
        .map(|(name, n, k, failing)| {
            // A task fails when its rank is one of the failing ones.
            let cond: Vec<String> = failing.iter().map(|f| format!("[ $KOALESCE_RANK = {f} ]")).collect();
            let script = if cond.is_empty() {
                "true".to_string()
            } else {
                format!("! {{ {}; }}", cond.join(" || "))
            };
            let comps = "[[components]]\nprocessors = 1\n".repeat(*n as usize);
            let toml = format!(
                "name = \"{name}\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", {script:?}]\nrunner = \"bag\"\nmin_components = {k}\n{comps}"
            );
            let (code, body) = srv.request("POST", "/api/v1/jobs", Some(&tok), toml.as_bytes());
            assert_eq!(code, 201, "{body}");
            serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"].as_u64().unwrap()
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut out = Vec::new();
    for id in ids {
        loop {
            let (_, body) = srv.request("GET", &format!("/api/v1/jobs/{id}"), Some(&tok), b"");
            let j: serde_json::Value = serde_json::from_str(&body).unwrap();
            // The API names the state; the core's full state (with the bag's counts) is in the
            // snapshot the daemon stores once the job has ended.
            let stored = srv
                .shared()
                .store
                .read(|c| c.query_row("SELECT core FROM jobs WHERE id = ?1", [id as i64], |r| r.get::<_, String>(0)))
                .unwrap();
            let snap: serde_json::Value = serde_json::from_str(&stored).unwrap();
            let state: JobState = serde_json::from_value(snap["state"].clone()).unwrap();
            if state.is_terminal() {
                out.push((j["name"].as_str().unwrap().to_string(), state));
                break;
            }
            assert!(Instant::now() < deadline, "job {id} did not end: {j}");
            std::thread::sleep(Duration::from_millis(25));
        }
    }
    out
}

#[test]
fn the_same_bags_end_the_same_in_the_simulator_and_the_daemon() {
    let sim = sim_states();
    let daemon = daemon_states();
    assert_eq!(sim, daemon);
    // And they end as the semantics say.
    let state = |name: &str| sim.iter().find(|(n, _)| n == name).unwrap().1;
    assert_eq!(state("all-ok"), JobState::Succeeded);
    assert_eq!(state("one-fails-k2"), JobState::Succeeded);
    assert!(matches!(
        state("one-fails-k3"),
        JobState::Failed(koalesce_core::state::FailureReason::TooFewTasks {
            succeeded: 2,
            needed: 3,
            tasks: 3
        })
    ));
    assert_eq!(state("two-fail-k1"), JobState::Succeeded);
    assert!(matches!(state("all-fail"), JobState::Failed(_)));
}

/// Bags of tasks (`submit --tasks N`): N jobs placed on their own, one verdict. The site has
/// 2 processors for tasks of 1, so a bag of 3 or 4 never runs whole at once: its tasks are
/// placed as processors free up, in both worlds.
const TASK_BAGS: &[(&str, u32, u32, &[u32])] = &[
    ("t-all-ok", 4, 4, &[]),
    ("t-one-fails-k3", 4, 3, &[2]),
    ("t-one-fails-k4", 4, 4, &[2]),
    ("t-two-fail-k1", 3, 1, &[0, 1]),
];

/// (bag name, state, succeeded, failed) per task bag.
type BagEnd = (String, String, u32, u32);

fn sim_task_bags() -> Vec<BagEnd> {
    let jobs: Vec<String> = TASK_BAGS
        .iter()
        .enumerate()
        .map(|(i, (name, n, k, failing))| {
            format!(
                "{{ name = \"{name}\", submit_s = {i}, components = [1], runtime_s = 2, tasks = {n}, min_tasks = {k}, failing_tasks = {failing:?} }}"
            )
        })
        .collect();
    let text = format!(
        "name = \"task-bags\"\n[[sites]]\nname = \"vu\"\nprocessors = 2\n[workload]\nkind = \"jobs\"\njobs = [\n{}\n]\n",
        jobs.join(",\n")
    );
    let scenario = Scenario::parse(&text, Path::new("task-bags.toml")).expect("scenario");
    let result = koalesce_sim::engine::run(&scenario, 1, &mut |_| {}).expect("simulation runs");
    assert!(result.rejected.is_empty(), "{:?}", result.rejected);
    // At no moment did a bag run whole: the site holds 2 of its tasks at a time.
    for b in &result.bags {
        let starts: Vec<u64> = b
            .tasks
            .iter()
            .filter_map(|t| result.jobs.iter().find(|j| j.id == *t)?.start)
            .collect();
        assert!(
            starts.iter().min() < starts.iter().max(),
            "{}: its tasks started at different times: {starts:?}",
            b.name
        );
    }
    let mut out: Vec<BagEnd> = result
        .bags
        .iter()
        .map(|b| {
            (
                b.name.clone(),
                b.progress.state().name().to_string(),
                b.progress.succeeded,
                b.progress.failed,
            )
        })
        .collect();
    out.sort();
    out
}

fn daemon_task_bags() -> Vec<BagEnd> {
    let tmp = tempfile::tempdir().unwrap();
    let supervisor = SupervisorCommand {
        program: env!("CARGO_BIN_EXE_koalesce").into(),
        args: vec!["supervise".into()],
        launcher: Some(vec!["supervise-launcher".into()]),
    };
    let tok = koalesce_server::create_token(tmp.path(), "tester", false).unwrap();
    let srv = BackgroundServer::start(koalesce_server::test_options(tmp.path(), &[("vu", 2)], supervisor)).unwrap();
    let ids: Vec<u64> = TASK_BAGS
        .iter()
        .map(|(name, n, k, failing)| {
            // A task fails when its index is one of the failing ones.
            let cond: Vec<String> = failing.iter().map(|f| format!("[ $KOALESCE_TASK_ID = {f} ]")).collect();
            let script = if cond.is_empty() {
                "sleep 0.3".to_string()
            } else {
                format!("sleep 0.3; ! {{ {}; }}", cond.join(" || "))
            };
            let toml =
                format!("name = \"{name}\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", {script:?}]\n[[components]]\nprocessors = 1\n");
            let (code, body) = srv.request(
                "POST",
                &format!("/api/v1/jobs?tasks={n}&min_tasks={k}"),
                Some(&tok),
                toml.as_bytes(),
            );
            assert_eq!(code, 201, "{body}");
            serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"].as_u64().unwrap()
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut out = Vec::new();
    for (id, (name, ..)) in ids.into_iter().zip(TASK_BAGS) {
        loop {
            let (_, body) = srv.request("GET", &format!("/api/v1/jobs/{id}"), Some(&tok), b"");
            let j: serde_json::Value = serde_json::from_str(&body).unwrap();
            let bag = &j["bag"];
            let state = bag["state"].as_str().unwrap_or_default().to_string();
            if koalesce_api::dto::is_final_state(&state) {
                assert_eq!(j["state"], bag["state"], "the bag's id shows the bag's state: {j}");
                let n = |k: &str| bag[k].as_u64().unwrap() as u32;
                out.push((name.to_string(), state, n("succeeded"), n("failed")));
                break;
            }
            assert!(Instant::now() < deadline, "bag {id} did not end: {j}");
            std::thread::sleep(Duration::from_millis(25));
        }
    }
    out.sort();
    out
}

#[test]
fn the_same_bags_of_tasks_end_the_same_in_the_simulator_and_the_daemon() {
    let sim = sim_task_bags();
    let daemon = daemon_task_bags();
    assert_eq!(sim, daemon);
    let s = |a: &str, b: &str, c: u32, d: u32| (a.to_string(), b.to_string(), c, d);
    assert_eq!(
        sim,
        [
            s("t-all-ok", "succeeded", 4, 0),
            s("t-one-fails-k3", "succeeded", 3, 1),
            s("t-one-fails-k4", "failed", 3, 1),
            s("t-two-fail-k1", "succeeded", 1, 2),
        ]
    );
}
