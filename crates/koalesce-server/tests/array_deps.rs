//! Dependencies as Slurm users write them, against a real server: `afterok:<array id>` waits
//! for every task of the array (not only the first, whose id the array shares), also across a
//! restart and once the array's tasks were let go; `afterok:<array id>_<task>` waits for that
//! task alone; a `%M` throttle keeps working; and a job
//! depending on one that declares outputs starts only once they are registered, so it reads
//! them from the catalogue every time.

mod common;

use std::time::Duration;

use common::*;
use koalesce_server::BackgroundServer;
use serde_json::Value;

/// Submits a job `name` (`true`) with the dependency `dep` in Slurm's syntax; its id.
fn depending(srv: &BackgroundServer, tok: &str, name: &str, dep: &str) -> u64 {
    let path = format!("/api/v1/jobs?dependency={dep}");
    post_job(srv, &path, tok, &shell_job(name, "true", 1, ""))["id"].as_u64().unwrap()
}

fn ids_of(v: &Value) -> Vec<u64> {
    v["ids"].as_array().unwrap().iter().map(|i| i.as_u64().unwrap()).collect()
}

/// Task 0 ends at once; the others take a while (the shape that made `afterok` on the array's
/// id start after task 0 alone).
const TASK: &str = "[ \"$KOALESCE_TASK_ID\" = 0 ] || sleep 1.5";

#[test]
fn afterok_on_an_array_waits_for_every_task_also_across_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = server(tmp.path(), &[("vu", 8)]);
    // %2 throttles task 2 behind task 0 (the array's id) and task 3 behind task 1.
    let a = post_job(&srv, "/api/v1/jobs?array=0-3%252", &tok, &shell_job("sweep", TASK, 1, ""));
    let array = a["id"].as_u64().unwrap();
    let tasks = ids_of(&a);
    let dep = depending(&srv, &tok, "after", &format!("afterok:{array}"));
    let notok = depending(&srv, &tok, "on-failure", &format!("afternotok:{array}"));
    // Slurm's `<array>_<task>`: task 0 alone, whose id is the array's.
    let first = depending(&srv, &tok, "after-task-0", &format!("afterok:{array}_0"));
    // Task 0 ends first (and is let go); the dependent still waits, the one on task 0 starts.
    assert_eq!(ended(&srv, &tok, tasks[0], 30)["state"], "succeeded");
    let jf = ended(&srv, &tok, first, 30);
    assert_eq!(jf["state"], "succeeded", "{jf}");
    std::thread::sleep(Duration::from_millis(300));
    let j = job(&srv, &tok, dep);
    assert_eq!(j["state"], "held", "afterok on the array started after its first task: {j}");
    // A restart while tasks still run: the array is one unit again.
    srv.stop();
    let srv = server(tmp.path(), &[("vu", 8)]);
    assert_eq!(job(&srv, &tok, dep)["state"], "held");
    let jd = ended(&srv, &tok, dep, 60);
    assert_eq!(jd["state"], "succeeded", "{jd}");
    let last_end = tasks
        .iter()
        .map(|t| {
            let j = ended(&srv, &tok, *t, 5);
            assert_eq!(j["state"], "succeeded", "{j}");
            j["finished_ms"].as_u64().unwrap()
        })
        .max()
        .unwrap();
    assert!(
        jd["started_ms"].as_u64().unwrap() >= last_end,
        "{jd}: the last task ended at {last_end}"
    );
    assert!(
        jf["started_ms"].as_u64().unwrap() < last_end,
        "{jf}: afterok:{array}_0 waited for more than task 0"
    );
    let jn = ended(&srv, &tok, notok, 30);
    assert!(
        jn["failure"].as_str().unwrap().contains("dependency can never be satisfied"),
        "{jn}"
    );

    // Once every task ended and was let go, the array is decided from the store.
    let (code, v) = post(
        &srv,
        &format!("/api/v1/jobs?dependency=afternotok:{array}"),
        &tok,
        &shell_job("late", "true", 1, ""),
    );
    assert!(
        code == 422 && v["error"].as_str().unwrap().contains("never be satisfied"),
        "{code} {v}"
    );
    let v = depending(&srv, &tok, "late", &format!("afterok:{array}"));
    assert_eq!(ended(&srv, &tok, v, 30)["state"], "succeeded");
    // One task of it, from the store: task 2 (index 2), and a task it does not have.
    let v = depending(&srv, &tok, "late", &format!("afterany:{array}_2"));
    assert_eq!(ended(&srv, &tok, v, 30)["state"], "succeeded");
    let (code, v) = post(
        &srv,
        &format!("/api/v1/jobs?dependency=afterok:{array}_9"),
        &tok,
        &shell_job("late", "true", 1, ""),
    );
    assert!(code == 422 && v["error"].as_str().unwrap().contains("no task 9"), "{code} {v}");
}

#[test]
fn a_failed_task_fails_afterok_on_its_bag_unless_the_bag_needs_fewer() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = server(tmp.path(), &[("vu", 8)]);
    // Task 1 fails, the others succeed (task 2 after a while).
    let script = "[ \"$KOALESCE_TASK_ID\" != 1 ] || exit 3; [ \"$KOALESCE_TASK_ID\" != 2 ] || sleep 1";
    let mut deps = Vec::new();
    for min in [3, 2] {
        let b = post_job(
            &srv,
            &format!("/api/v1/jobs?tasks=3&min_tasks={min}"),
            &tok,
            &shell_job("bag", script, 1, ""),
        );
        let bag = b["id"].as_u64().unwrap();
        deps.push((min, bag, depending(&srv, &tok, "after", &format!("afterok:{bag}"))));
    }
    for (min, bag, dep) in deps {
        let j = ended(&srv, &tok, dep, 60);
        let b = ended(&srv, &tok, bag, 60);
        if min == 3 {
            assert_eq!(
                (b["state"].as_str(), j["state"].as_str()),
                (Some("failed"), Some("failed")),
                "{b}\n{j}"
            );
        } else {
            assert_eq!(
                (b["state"].as_str(), j["state"].as_str()),
                (Some("succeeded"), Some("succeeded")),
                "{b}\n{j}"
            );
            let last = b["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| ended(&srv, &tok, t["id"].as_u64().unwrap(), 5)["finished_ms"].as_u64().unwrap())
                .max()
                .unwrap();
            assert!(j["started_ms"].as_u64().unwrap() >= last, "{j}");
        }
    }
}

#[test]
fn a_dependent_reads_the_output_its_parent_registered_every_time() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = server(tmp.path(), &[("vu", 8)]);
    // Outputs of a few MB: their stage-out takes a moment after the parent succeeded.
    let mut pairs = Vec::new();
    for k in 0..4 {
        let parent = submit(
            &srv,
            &tok,
            &shell_job(
                "parent",
                &format!("head -c 4000000 /dev/zero > big.bin; echo value-{k} > result.txt"),
                1,
                "outputs = [\"big.bin\", \"result.txt\"]",
            ),
        );
        // Inputs are passed as KOALESCE_INPUT_<logical name> (the path of the staged copy).
        let child = submit(
            &srv,
            &tok,
            &shell_job(
                "child",
                &format!(
                    "grep -qx value-{k} \"$KOALESCE_INPUT_{parent}_RESULT_TXT\" && [ $(stat -c %s \"$KOALESCE_INPUT_{parent}_BIG_BIN\") = 4000000 ]"
                ),
                1,
                &format!("afterok = [{parent}]\ninputs = [\"{parent}/result.txt\", \"{parent}/big.bin\"]"),
            ),
        );
        pairs.push((parent, child));
    }
    for (parent, child) in pairs {
        let c = ended(&srv, &tok, child, 60);
        assert_eq!(c["state"], "succeeded", "the dependent found its parent's outputs: {c}");
        let p = job(&srv, &tok, parent);
        assert_eq!(p["outputs"].as_array().unwrap().len(), 2, "{p}");
    }
    // A dependency whose job did not register the input: the dependent fails, naming why.
    let parent = submit(&srv, &tok, &shell_job("no-output", "true", 1, "outputs = [\"result.txt\"]"));
    let child = submit(
        &srv,
        &tok,
        &shell_job(
            "child",
            "true",
            1,
            &format!("afterok = [{parent}]\ninputs = [\"{parent}/result.txt\"]"),
        ),
    );
    let c = ended(&srv, &tok, child, 30);
    assert_eq!(c["state"], "failed");
    assert!(c["failure"].as_str().unwrap().contains("input file"), "{c}");
    // Without dependencies, an unknown input is still refused at submission.
    let (code, v) = post(&srv, "/api/v1/jobs", &tok, &shell_job("x", "true", 1, "inputs = [\"nowhere.dat\"]"));
    assert_eq!(code, 422, "{v}");
}

/// The catalogue entry of `name` as `GET /api/v1/files` lists it.
fn file_entry(srv: &BackgroundServer, tok: &str, name: &str) -> Value {
    let (code, body) = srv.request("GET", "/api/v1/files", Some(tok), b"");
    assert_eq!(code, 200, "{body}");
    let files = json(&body);
    let f = files.as_array().unwrap().iter().find(|f| f["name"] == name).cloned();
    f.unwrap_or_else(|| panic!("{name} not in {files}"))
}

/// The files under `root` whose names start with `prefix` (a logical name's stored form).
fn stored_copies(root: &std::path::Path, prefix: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let (p, t) = (e.path(), e.file_type());
            if t.as_ref().is_ok_and(|t| t.is_dir()) {
                dirs.push(p);
            } else if e.file_name().to_string_lossy().starts_with(prefix) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn an_output_registered_again_with_other_content_replaces_the_file_in_memory_and_store() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = server(tmp.path(), &[("vu", 2), ("leiden", 2)]);
    let at = |site: &str| format!("\n[[components]]\nprocessors = 1\nsite = \"{site}\"\n");
    let job_at = |name: &str, script: &str, extra: &str, site: &str| {
        format!(
            "name = {name:?}\nexecutable = \"/bin/sh\"\narguments = [\"-c\", {script:?}]\n{extra}{}",
            at(site)
        )
    };
    // v1 registered at vu, copied to leiden by a reader there, then v2 registered at vu.
    let first = submit(
        &srv,
        &tok,
        &job_at(
            "v1",
            "printf aaaa > r.txt",
            "outputs = [{ file = \"r.txt\", to = \"shared/r.txt\" }]",
            "vu",
        ),
    );
    let reader = submit(
        &srv,
        &tok,
        &job_at(
            "reader",
            "true",
            &format!("afterok = [{first}]\ninputs = [\"shared/r.txt\"]"),
            "leiden",
        ),
    );
    assert_eq!(ended(&srv, &tok, reader, 30)["state"], "succeeded");
    let v1 = file_entry(&srv, &tok, "shared/r.txt");
    assert_eq!(v1["replicas"], serde_json::json!(["leiden", "vu"]), "{v1}");
    let at_leiden = || {
        stored_copies(tmp.path(), "shared_r.txt.")
            .into_iter()
            .filter(|p| p.to_string_lossy().contains("leiden"))
            .collect::<Vec<_>>()
    };
    assert_eq!(at_leiden().len(), 1, "the copy at leiden is on disk");
    let second = submit(
        &srv,
        &tok,
        &job_at(
            "v2",
            "printf bbbbbbbb > r.txt",
            "outputs = [{ file = \"r.txt\", to = \"shared/r.txt\" }]",
            "vu",
        ),
    );
    assert_eq!(ended(&srv, &tok, second, 30)["state"], "succeeded");
    // The new content: its size and checksum, and leiden's copy of the old one is no replica.
    let live = file_entry(&srv, &tok, "shared/r.txt");
    assert_eq!(live["size_bytes"], 8, "{live}");
    assert_ne!(live["sha256"], v1["sha256"], "{live}");
    assert_eq!(live["replicas"], serde_json::json!(["vu"]), "{live}");
    // ... and its bytes are gone from leiden's storage too (once the store dropped the replica).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !at_leiden().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        at_leiden(),
        Vec::<std::path::PathBuf>::new(),
        "the old content's copy at leiden stays on disk"
    );
    // What the store holds (read back after a restart) is what memory held.
    srv.stop();
    let srv = server(tmp.path(), &[("vu", 2), ("leiden", 2)]);
    assert_eq!(file_entry(&srv, &tok, "shared/r.txt"), live);
    // A reader at leiden gets the new content.
    let check = submit(
        &srv,
        &tok,
        &job_at(
            "check",
            "[ \"$(cat \"$KOALESCE_INPUT_SHARED_R_TXT\")\" = bbbbbbbb ]",
            "inputs = [\"shared/r.txt\"]",
            "leiden",
        ),
    );
    let c = ended(&srv, &tok, check, 30);
    assert_eq!(c["state"], "succeeded", "{c}");
}

/// The old content's copy at another site stays while a job there that reads the file runs
/// (it reads the old content to its end), and goes once that job ended.
#[test]
fn a_replaced_files_old_copy_stays_while_a_job_at_its_site_reads_it() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = server(tmp.path(), &[("vu", 2), ("leiden", 2)]);
    let job_at = |name: &str, script: &str, extra: &str, site: &str| {
        format!(
            "name = {name:?}\nexecutable = \"/bin/sh\"\narguments = [\"-c\", {script:?}]\n{extra}\n[[components]]\nprocessors = 1\nsite = \"{site}\"\n"
        )
    };
    let out = "outputs = [{ file = \"r.txt\", to = \"shared/r.txt\" }]";
    let first = submit(&srv, &tok, &job_at("v1", "printf aaaa > r.txt", out, "vu"));
    let reader = submit(
        &srv,
        &tok,
        &job_at(
            "reader",
            "sleep 4; [ \"$(cat \"$KOALESCE_INPUT_SHARED_R_TXT\")\" = aaaa ]",
            &format!("afterok = [{first}]\ninputs = [\"shared/r.txt\"]"),
            "leiden",
        ),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while job(&srv, &tok, reader)["state"] != "running" {
        assert!(std::time::Instant::now() < deadline, "{}", job(&srv, &tok, reader));
        std::thread::sleep(Duration::from_millis(50));
    }
    let at_leiden = || {
        stored_copies(tmp.path(), "shared_r.txt.")
            .into_iter()
            .filter(|p| p.to_string_lossy().contains("leiden/storage"))
            .collect::<Vec<_>>()
    };
    assert_eq!(at_leiden().len(), 1);
    let second = submit(&srv, &tok, &job_at("v2", "printf bbbbbbbb > r.txt", out, "vu"));
    assert_eq!(ended(&srv, &tok, second, 30)["state"], "succeeded");
    assert_eq!(file_entry(&srv, &tok, "shared/r.txt")["replicas"], serde_json::json!(["vu"]));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(job(&srv, &tok, reader)["state"], "running", "the reader outlasts the replacement");
    assert_eq!(at_leiden().len(), 1, "the old copy stays while the job at leiden reads it");
    let r = ended(&srv, &tok, reader, 30);
    assert_eq!(r["state"], "succeeded", "the reader read the old content to its end: {r}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !at_leiden().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(at_leiden(), Vec::<std::path::PathBuf>::new(), "gone once the reader ended");
}

#[test]
fn a_job_file_names_one_task_of_an_array_as_sbatch_does() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = server(tmp.path(), &[("vu", 8)]);
    let a = post_job(&srv, "/api/v1/jobs?array=0-1", &tok, &shell_job("sweep", TASK, 1, ""));
    let array = a["id"].as_u64().unwrap();
    let tasks = ids_of(&a);
    // In the job file, as `sbatch --dependency` takes it: task 0 alone, and the whole array.
    let one = submit(
        &srv,
        &tok,
        &shell_job("one", "true", 1, &format!("dependency = \"afterok:{array}_0\"")),
    );
    let all = submit(
        &srv,
        &tok,
        &shell_job("all", "true", 1, &format!("dependency = \"afterok:{array}\"")),
    );
    let j1 = ended(&srv, &tok, one, 30);
    let ja = ended(&srv, &tok, all, 30);
    let t1 = ended(&srv, &tok, tasks[1], 30);
    assert_eq!((j1["state"].as_str(), ja["state"].as_str()), (Some("succeeded"), Some("succeeded")));
    let last = t1["finished_ms"].as_u64().unwrap();
    assert!(j1["started_ms"].as_u64().unwrap() < last, "{j1}: waited for task 1 too");
    assert!(ja["started_ms"].as_u64().unwrap() >= last, "{ja}: did not wait for task 1");
    // What the parser refuses is a 422 naming the field.
    let (code, v) = post(
        &srv,
        "/api/v1/jobs",
        &tok,
        &shell_job("bad", "true", 1, "dependency = \"singleton\""),
    );
    assert!(
        code == 422 && v["error"].as_str().unwrap().contains("field 'dependency'"),
        "{code} {v}"
    );
}

/// A user right at their stored-bytes quota: an output that replaces one of theirs (same `to`
/// name, other content) frees what it replaces, so it is not refused as if it added its size.
#[test]
fn an_output_replacing_one_of_the_users_files_counts_only_what_it_adds() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let mut opts = koalesce_server::test_options(tmp.path(), &[("vu", 2)], supervisor());
    opts.config.quotas.max_stored_bytes = Some(8);
    let srv = koalesce_server::BackgroundServer::start(opts).expect("server starts");
    let writes = |name: &str, content: &str| {
        shell_job(
            name,
            &format!("printf {content} > r.txt"),
            1,
            "outputs = [{ file = \"r.txt\", to = \"shared/r.txt\" }]",
        )
    };
    let first = submit(&srv, &tok, &writes("v1", "aaaaaaaa"));
    let j = ended(&srv, &tok, first, 30);
    assert!(j["failure"].is_null(), "{j}");
    let second = submit(&srv, &tok, &writes("v2", "bbbbbb"));
    let j = ended(&srv, &tok, second, 30);
    assert!(j["failure"].is_null(), "replacing 8 bytes by 6 is within a quota of 8: {j}");
    assert_eq!(file_entry(&srv, &tok, "shared/r.txt")["size_bytes"], 6);
    // Growing it past the quota is still refused.
    let third = submit(&srv, &tok, &writes("v3", "ccccccccc"));
    let j = ended(&srv, &tok, third, 30);
    assert!(j["failure"].as_str().unwrap_or_default().contains("quota"), "{j}");
    assert_eq!(file_entry(&srv, &tok, "shared/r.txt")["size_bytes"], 6);
}
