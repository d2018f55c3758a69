//! The REST API in-process (random port), with real components under the test supervisor.

mod common;

use std::time::{Duration, Instant};

use common::*;
use koalesce_server::supervise;

#[test]
fn submit_runs_and_succeeds_with_outputs_and_metrics() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = server(tmp.path(), &[("vu", 8), ("leiden", 4)]);
    let id = submit(
        &srv,
        &tok,
        &shell_job(
            "hello",
            "echo hi $KOALESCE_RANK/$KOALESCE_SIZE > out.txt; cat out.txt",
            2,
            "outputs = [\"out.txt\"]",
        ),
    );
    let j = wait_state(&srv, &tok, id, &["succeeded", "failed"], 20);
    assert_eq!(j["state"], "succeeded", "{j}");
    assert_eq!(j["exit_ok"], true);
    assert_eq!(j["user"], "alice");
    let stdout = j["components"][0]["stdout"].as_str().unwrap();
    assert_eq!(std::fs::read_to_string(stdout).unwrap(), "hi 0/1\n");
    // Stage-out registers "<id>/out.txt".
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, files) = srv.request("GET", "/api/v1/files", Some(&tok), b"");
        if files.contains(&format!("\"{id}/out.txt\"")) {
            break;
        }
        assert!(Instant::now() < deadline, "output not registered: {files}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, m) = srv.request("GET", "/metrics", None, b"");
    assert_eq!(code, 200);
    assert!(m.contains("koalesce_jobs{state=\"succeeded\"} 1"), "{m}");
    assert!(m.contains("koalesce_placement_tries_total"));
    let (code, doc) = srv.request("GET", "/api/v1/openapi.json", None, b"");
    assert_eq!(code, 200);
    assert!(json(&doc)["paths"]["/api/v1/jobs"].is_object());
    assert_eq!(srv.request("GET", "/healthz", None, b""), (200, "ok".into()));
}

#[test]
fn users_see_only_their_jobs() {
    let tmp = tempfile::tempdir().unwrap();
    let a = token(tmp.path(), "alice", false);
    let b = token(tmp.path(), "bob", false);
    let admin = token(tmp.path(), "root", true);
    let srv = server(tmp.path(), &[("vu", 4)]);
    let id = submit(&srv, &a, &shell_job("mine", "sleep 5", 1, ""));
    let (code, body) = srv.request("GET", &format!("/api/v1/jobs/{id}"), Some(&b), b"");
    assert_eq!(code, 404, "{body}");
    assert!(json(&body)["error"].is_string());
    // Cancel of another user's job answers like GET: 404, the id does not leak.
    let (code, body) = srv.request("POST", &format!("/api/v1/jobs/{id}/cancel"), Some(&b), b"");
    assert_eq!(code, 404, "{body}");
    let (_, list) = srv.request("GET", "/api/v1/jobs", Some(&b), b"");
    assert_eq!(json(&list).as_array().unwrap().len(), 0);
    let (_, list) = srv.request("GET", "/api/v1/jobs?all=true", Some(&admin), b"");
    assert_eq!(json(&list).as_array().unwrap().len(), 1);
    let (code, _) = srv.request("GET", &format!("/api/v1/jobs/{id}"), Some(&admin), b"");
    assert_eq!(code, 200);
    let (code, body) = srv.request("POST", &format!("/api/v1/jobs/{id}/cancel"), Some(&a), b"");
    assert_eq!(code, 200, "{body}");
    assert_eq!(json(&body)["state"], "cancelled");
    let (code, _) = srv.request("POST", &format!("/api/v1/jobs/{id}/cancel"), Some(&a), b"");
    assert_eq!(code, 409);
    let (code, _) = srv.request("GET", "/api/v1/jobs/999", Some(&a), b"");
    assert_eq!(code, 404);
}

#[test]
fn bad_input_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = server(tmp.path(), &[("vu", 4)]);
    let post = |body: &str, t: Option<&str>| srv.request("POST", "/api/v1/jobs", t, body.as_bytes());
    let good = shell_job("ok", "true", 1, "");
    // 401: missing and bad token.
    assert_eq!(post(&good, None).0, 401);
    let (code, body) = post(&good, Some("koa_not_a_token"));
    assert_eq!(code, 401);
    assert!(json(&body)["error"].as_str().unwrap().contains("token"));
    assert_eq!(srv.request("GET", "/api/v1/sites", Some("x"), b"").0, 401);
    // 400: malformed TOML.
    let (code, body) = post("name = = 'x'", Some(&tok));
    assert_eq!(code, 400, "{body}");
    // 422: unknown key, named.
    let (code, body) = post(&format!("bogus_key = 1\n{good}"), Some(&tok));
    assert_eq!(code, 422, "{body}");
    assert!(json(&body)["error"].as_str().unwrap().contains("bogus_key"), "{body}");
    // 422: unknown site, too large, unknown input file, bad priority.
    let (code, body) = post(
        &shell_job("x", "true", 1, "").replace("processors = 1", "processors = 1\nsite = \"mars\""),
        Some(&tok),
    );
    assert_eq!(code, 422);
    assert!(body.contains("mars"), "{body}");
    let (code, body) = post(&shell_job("x", "true", 64, ""), Some(&tok));
    assert_eq!(code, 422);
    assert!(body.contains("64"), "{body}");
    let (code, body) = post(&shell_job("x", "true", 1, "inputs = [\"nowhere.dat\"]"), Some(&tok));
    assert_eq!(code, 422);
    assert!(body.contains("nowhere.dat"), "{body}");
    let (code, body) = post(&shell_job("x", "true", 1, "priority = \"urgent\""), Some(&tok));
    assert_eq!(code, 422);
    assert!(body.contains("priority"), "{body}");
    // 413: over the 1 MiB limit.
    let (code, body) = post_oversized(srv.addr, &tok, 2 << 20);
    assert_eq!(code, 413, "{body}");
    assert!(json(&body)["error"].is_string());
    // Nothing was stored.
    let (_, list) = srv.request("GET", "/api/v1/jobs", Some(&tok), b"");
    assert_eq!(json(&list).as_array().unwrap().len(), 0);
    // Files: malformed JSON 400, unknown site 422.
    assert_eq!(srv.request("POST", "/api/v1/files", Some(&tok), b"{nope").0, 400);
    let (code, body) = srv.request(
        "POST",
        "/api/v1/files",
        Some(&tok),
        br#"{"name":"f","path":"/etc/hostname","site":"mars"}"#,
    );
    assert_eq!(code, 422, "{body}");
}

#[test]
fn a_site_never_runs_more_than_its_slots() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = server(tmp.path(), &[("small", 4), ("tiny", 3)]);
    let ids: Vec<u64> = (0..12)
        .map(|i| submit(&srv, &tok, &shell_job(&format!("j{i}"), "sleep 0.2", 1 + (i % 3), "")))
        .collect();
    let mut runs: Vec<(String, u64, u64, u32)> = Vec::new();
    for id in ids {
        let j = wait_state(&srv, &tok, id, &["succeeded", "failed"], 60);
        assert_eq!(j["state"], "succeeded", "{j}");
        // When the program really ran, from its supervisor's own records.
        let c = &j["components"][0];
        let dir = std::path::Path::new(c["stdout"].as_str().unwrap()).parent().unwrap().to_path_buf();
        let run: supervise::RunningRecord = supervise::read_json(&dir.join(supervise::RUNNING_FILE)).unwrap();
        let exit: supervise::ExitRecord = supervise::read_json(&dir.join(supervise::EXIT_FILE)).unwrap();
        let site = c["site"].as_str().unwrap().to_string();
        runs.push((site, run.started_ms, exit.finished_ms, c["processors"].as_u64().unwrap() as u32));
    }
    // Most processors running at once per site: at each start, the runs that overlap it.
    let peak = |site: &str| {
        let mine: Vec<_> = runs.iter().filter(|r| r.0 == site).collect();
        mine.iter()
            .map(|a| mine.iter().filter(|b| b.1 <= a.1 && a.1 < b.2).map(|b| b.3).sum::<u32>())
            .max()
            .unwrap_or(0)
    };
    assert!(peak("small") <= 4, "{runs:?}");
    assert!(peak("tiny") <= 3, "{runs:?}");
    assert!(peak("small") >= 2, "the test should have loaded the site: {runs:?}");
}

#[test]
fn stage_in_copies_verified_inputs_and_refuses_corrupted_replicas() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = server(tmp.path(), &[("a", 4), ("b", 4)]);
    // Registered by path from outside the data directory (which is never read as data).
    let outside = tempfile::tempdir().unwrap();
    let src = outside.path().join("input.dat");
    std::fs::write(&src, vec![7u8; 100_000]).unwrap();
    let body = format!(r#"{{"name":"input.dat","path":"{}","site":"a"}}"#, src.display());
    let (code, f) = srv.request("POST", "/api/v1/files", Some(&tok), body.as_bytes());
    assert_eq!(code, 201, "{f}");
    let f = json(&f);
    assert_eq!(f["size_bytes"], 100_000);
    // A job fixed at site b needs a copy; it checks it.
    let job_toml = shell_job("reader", "sha256sum \"$KOALESCE_INPUT_INPUT_DAT\"", 1, "inputs = [\"input.dat\"]")
        .replace("processors = 1", "processors = 1\nsite = \"b\"");
    let id = submit(&srv, &tok, &job_toml);
    let j = wait_state(&srv, &tok, id, &["succeeded", "failed"], 20);
    assert_eq!(j["state"], "succeeded", "{j}");
    let out = std::fs::read_to_string(j["components"][0]["stdout"].as_str().unwrap()).unwrap();
    assert!(out.starts_with(f["sha256"].as_str().unwrap()), "{out}");
    // Corrupt the replica at a, then need it at a third place: the copy must be refused.
    let shared = srv.shared();
    let replica_a = shared.state.lock().unwrap().files["input.dat"].replicas["a"].clone();
    std::fs::write(&replica_a, vec![8u8; 100_000]).unwrap();
    drop(srv);
    let srv = server(tmp.path(), &[("a", 4), ("b", 4), ("c", 4)]);
    // Remove b's good copy so that a is the only source.
    let shared = srv.shared();
    {
        let mut st = shared.state.lock().unwrap();
        let sid = st.site_id("b").unwrap();
        st.files.get_mut("input.dat").unwrap().replicas.remove("b");
        let size = st.core.catalogue().get("input.dat").unwrap().size_bytes;
        st.core.catalogue_mut().insert("input.dat", size, [koalesce_core::SiteId(0)]);
        let _ = sid;
    }
    let id = submit(&srv, &tok, &job_toml.replace("site = \"b\"", "site = \"c\""));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let j = job(&srv, &tok, id);
        if j["failure"].as_str().is_some_and(|f| f.contains("checksum mismatch")) {
            assert_ne!(j["state"], "succeeded");
            break;
        }
        assert!(Instant::now() < deadline, "corruption not detected: {j}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let c_storage = tmp.path().join("sites/c/storage");
    let landed: Vec<_> = std::fs::read_dir(c_storage).unwrap().flatten().collect();
    assert!(landed.is_empty(), "a corrupted copy landed: {landed:?}");
    let (_, m) = srv.request("GET", "/metrics", None, b"");
    assert!(!m.contains("koalesce_transfer_failures_total 0"), "{m}");
}

#[test]
fn coupled_components_learn_rank_and_peers_and_bags_need_k() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = server(tmp.path(), &[("vu", 8), ("leiden", 4)]);
    let coupled = "name = \"mpi\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"echo $KOALESCE_RANK $KOALESCE_SIZE $KOALESCE_PEERS\"]\nrunner = \"coupled\"\n[[components]]\nprocessors = 2\n[[components]]\nprocessors = 2\n[[components]]\nprocessors = 1\n";
    let id = submit(&srv, &tok, coupled);
    let j = wait_state(&srv, &tok, id, &["succeeded", "failed"], 20);
    assert_eq!(j["state"], "succeeded", "{j}");
    let lines: Vec<String> = (0..3)
        .map(|i| std::fs::read_to_string(j["components"][i]["stdout"].as_str().unwrap()).unwrap())
        .collect();
    let peers: Vec<&str> = lines.iter().map(|l| l.split_whitespace().nth(2).unwrap()).collect();
    assert!(peers.iter().all(|p| *p == peers[0] && p.split(',').count() == 3), "{lines:?}");
    for (i, l) in lines.iter().enumerate() {
        assert!(l.starts_with(&format!("{i} 3 ")), "{l}");
    }
    let bag = |k: u32| {
        format!("name = \"bag\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"test $KOALESCE_RANK != 1\"]\nrunner = \"bag\"\nmin_components = {k}\n[[components]]\nprocessors = 1\n[[components]]\nprocessors = 1\n[[components]]\nprocessors = 1\n")
    };
    let two = submit(&srv, &tok, &bag(2));
    let three = submit(&srv, &tok, &bag(3));
    let j2 = wait_state(&srv, &tok, two, &["succeeded", "failed"], 20);
    let j3 = wait_state(&srv, &tok, three, &["succeeded", "failed"], 20);
    assert_eq!(j2["state"], "succeeded", "{j2}");
    assert_eq!(j3["state"], "failed", "{j3}");
    assert!(j3["failure"].as_str().unwrap().contains("2 of 3"), "{j3}");
    let (code, body) = srv.request("POST", "/api/v1/jobs", Some(&tok), bag(4).as_bytes());
    assert_eq!(code, 422, "{body}");
}

#[test]
fn restart_keeps_jobs_queue_and_running_components() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = server(tmp.path(), &[("vu", 4)]);
    let running = submit(&srv, &tok, &shell_job("long", "echo begin; sleep 1.5; echo end", 4, ""));
    wait_state(&srv, &tok, running, &["running"], 20);
    let queued: Vec<u64> = (0..3)
        .map(|i| submit(&srv, &tok, &shell_job(&format!("q{i}"), "echo q", 3, "")))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let tries_before = job(&srv, &tok, queued[0])["placement_tries"].as_u64().unwrap();
    assert!(tries_before >= 1);
    std::thread::sleep(Duration::from_millis(2200)); // let the progress flush happen
    let dir_of_running = job(&srv, &tok, running)["components"][0]["stdout"].as_str().unwrap().to_string();
    drop(srv);
    let srv = server(tmp.path(), &[("vu", 4)]);
    let j = job(&srv, &tok, running);
    assert!(["running", "succeeded"].contains(&j["state"].as_str().unwrap()), "{j}");
    for &q in &queued {
        let jq = job(&srv, &tok, q);
        assert!(jq["placement_tries"].as_u64().unwrap() >= tries_before.min(1), "{jq}");
    }
    let j = wait_state(&srv, &tok, running, &["succeeded", "failed"], 20);
    assert_eq!(j["state"], "succeeded", "{j}");
    // Ran once, in the same directory.
    assert_eq!(j["components"][0]["stdout"].as_str().unwrap(), dir_of_running);
    assert_eq!(std::fs::read_to_string(&dir_of_running).unwrap(), "begin\nend\n");
    for &q in &queued {
        assert_eq!(wait_state(&srv, &tok, q, &["succeeded", "failed"], 30)["state"], "succeeded");
    }
    let (_, list) = srv.request("GET", "/api/v1/jobs", Some(&tok), b"");
    let ids: Vec<u64> = json(&list).as_array().unwrap().iter().map(|j| j["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, vec![1, 2, 3, 4]);
    let next = submit(&srv, &tok, &shell_job("after", "true", 1, ""));
    assert_eq!(next, 5);
}

#[test]
fn a_running_bag_with_a_skipped_component_is_readopted_after_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = server(tmp.path(), &[("vu", 4)]);
    // Three components of 2 on 4 slots, at least 2: two run, the third is skipped.
    let bag = "name = \"bag\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"echo begin; sleep 1.5; echo end\"]\nrunner = \"bag\"\nmin_components = 2\n[[components]]\nprocessors = 2\n[[components]]\nprocessors = 2\n[[components]]\nprocessors = 2\n";
    let id = submit(&srv, &tok, bag);
    let j = wait_state(&srv, &tok, id, &["running"], 20);
    let states: Vec<String> = (0..3)
        .map(|i| j["components"][i]["state"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(states.iter().filter(|s| *s == "skipped").count(), 1, "{j}");
    let outputs: Vec<String> = (0..3)
        .filter(|&i| states[i] != "skipped")
        .map(|i| j["components"][i]["stdout"].as_str().unwrap().to_string())
        .collect();
    // The job is running in the core from its launch on; wait until both programs really run.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !outputs
        .iter()
        .all(|o| std::fs::read_to_string(o).is_ok_and(|t| t.starts_with("begin")))
    {
        assert!(Instant::now() < deadline, "the bag's components did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(srv);
    let srv = server(tmp.path(), &[("vu", 4)]);
    let j = wait_state(&srv, &tok, id, &["succeeded", "failed"], 20);
    assert_eq!(j["state"], "succeeded", "{j}");
    // The two running components were adopted, not run again.
    for out in &outputs {
        assert_eq!(std::fs::read_to_string(out).unwrap(), "begin\nend\n", "{out}");
    }
    assert!(
        !j["components"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["stdout"].as_str().is_some_and(|p| p.contains("/a2-"))),
        "{j}"
    );
}

#[test]
fn registering_a_name_again_at_another_site_adds_a_replica_of_the_same_content() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = server(tmp.path(), &[("a", 4), ("b", 4), ("c", 4)]);
    let outside = tempfile::tempdir().unwrap();
    let src = outside.path().join("input.dat");
    std::fs::write(&src, vec![7u8; 10_000]).unwrap();
    let add = |site: &str, path: &std::path::Path| {
        let body = format!(r#"{{"name":"input.dat","path":"{}","site":"{site}"}}"#, path.display());
        srv.request("POST", "/api/v1/files", Some(&tok), body.as_bytes())
    };
    assert_eq!(add("a", &src).0, 201);
    let (code, f) = add("b", &src);
    assert_eq!(code, 201, "{f}");
    assert_eq!(json(&f)["replicas"], serde_json::json!(["a", "b"]), "{f}");
    // The same site again, or other content under the same name: refused, nothing lands.
    let (code, body) = add("a", &src);
    assert_eq!(code, 409, "{body}");
    let other = outside.path().join("other.dat");
    std::fs::write(&other, vec![8u8; 10_000]).unwrap();
    let (code, body) = add("c", &other);
    assert_eq!(code, 409, "{body}");
    assert!(body.contains("not a replica"), "{body}");
    let landed: Vec<_> = std::fs::read_dir(tmp.path().join("sites/c/storage"))
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(landed.is_empty(), "{landed:?}");
    let (_, list) = srv.request("GET", "/api/v1/files", Some(&tok), b"");
    assert_eq!(json(&list)[0]["replicas"], serde_json::json!(["a", "b"]), "{list}");
}

/// A site that grants advance reservations gets a reservation for [JST, JST + estimate) right
/// after placement, and the job runs inside it (were `Reserve` refused, the job would go back
/// to the queue after every placement and never run there).
#[test]
fn a_site_with_reservations_runs_jobs_inside_their_reservations() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let mut opts = koalesce_server::test_options(tmp.path(), &[("res", 4)], supervisor());
    opts.config.sites[0].reservations = true;
    let srv = koalesce_server::BackgroundServer::start(opts).unwrap();
    let (_, sites) = srv.request("GET", "/api/v1/sites", Some(&tok), b"");
    assert_eq!(json(&sites)[0]["supports_reservations"], true, "{sites}");
    let ids: Vec<u64> = (0..3)
        .map(|i| {
            submit(
                &srv,
                &tok,
                &shell_job(&format!("r{i}"), "echo reserved", 2, "runtime_estimate = \"3s\""),
            )
        })
        .collect();
    // Two fit at once; the third's reservation begins where the first ones' windows end (3 s
    // on): a generous deadline for a loaded machine.
    for id in ids {
        let j = wait_state(&srv, &tok, id, &["succeeded", "failed"], 120);
        assert_eq!(j["state"], "succeeded", "{j}");
        assert_eq!(j["components"][0]["site"], "res");
    }
}

/// A job file's `begin` and `signal` from an API body: what is wrong is a 422 naming the field
/// (text that is not ASCII, a year past 9999, an unknown signal), never a panic; the server
/// still answers after them.
#[test]
fn begin_and_signal_errors_name_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = server(tmp.path(), &[("a", 2)]);
    for (extra, field) in [
        ("signal = \"Ré\"", "field 'signal'"),
        ("signal = \"B:é@1\"", "field 'signal'"),
        ("signal = \"USR3\"", "field 'signal'"),
        ("begin = \"10000-01-01T00:00:00Z\"", "field 'begin'"),
        ("begin = \"tomorrow\"", "field 'begin'"),
    ] {
        let (code, v) = post(&srv, "/api/v1/jobs", &tok, &shell_job("x", "true", 1, extra));
        assert!(
            code == 422 && v["error"].as_str().unwrap_or_default().contains(field),
            "{extra}: {code} {v}"
        );
    }
    let (code, v) = post(&srv, "/api/v1/jobs", &tok, &shell_job("ok", "true", 1, "signal = \"B:USR1@5\""));
    assert_eq!(code, 201, "{v}");
}
