//! Daily use against a real server (in-process, random port, components under the real
//! supervisor in control groups of their own): wall-time and memory limits ending jobs as
//! `timeout` / `out_of_memory`, the working directory, logs and file downloads through the API,
//! placement kept by ended jobs, and the job list's filters and pages.

mod common;

use std::time::{Duration, Instant};

use common::*;
use koalesce_server::BackgroundServer;
use serde_json::Value;

/// A server whose components' control groups carry this test binary's own prefix.
fn daily_server(dir: &std::path::Path, sites: &[(&str, u32)]) -> BackgroundServer {
    let mut opts = koalesce_server::test_options(dir, sites, supervisor());
    opts.config.sandbox.cgroup_parent = format!("kdaily-{}", std::process::id());
    BackgroundServer::start(opts).expect("server starts")
}

/// GET with the answer's headers: (status, headers, body bytes).
fn get(srv: &BackgroundServer, path: &str, tok: &str) -> (u16, ureq::http::HeaderMap, Vec<u8>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut resp = agent
        .get(format!("{}{path}", srv.url()))
        .header("Authorization", format!("Bearer {tok}"))
        .call()
        .unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.body_mut().with_config().limit(1 << 30).read_to_vec().unwrap();
    (status, headers, body)
}

fn header(h: &ureq::http::HeaderMap, name: &str) -> String {
    h.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string()
}

fn ran_ms(j: &Value) -> u64 {
    j["finished_ms"].as_u64().unwrap() - j["started_ms"].as_u64().unwrap()
}

#[test]
fn a_component_over_its_wall_time_is_killed_and_the_job_ends_in_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = daily_server(tmp.path(), &[("vu", 4)]);
    // An explicit walltime, a default one (runtime estimate × walltime_factor 2) and a job that
    // ends in time; the long ones trap SIGTERM to show it comes first.
    let explicit = submit(
        &srv,
        &tok,
        &shell_job(
            "long",
            "trap 'echo got TERM; exit 3' TERM; echo start; sleep 30 & wait",
            1,
            "walltime = \"1s\"",
        ),
    );
    let default = submit(&srv, &tok, &shell_job("est", "sleep 30", 1, "runtime_estimate = \"1s\""));
    let quick = submit(&srv, &tok, &shell_job("quick", "sleep 0.2", 1, "walltime = \"20s\""));
    let j = ended(&srv, &tok, explicit, 30);
    assert_eq!(j["state"], "timeout", "{j}");
    let failure = j["failure"].as_str().unwrap();
    assert!(failure.contains("wall-time limit") && failure.contains("1s"), "{failure}");
    assert_eq!(j["components"][0]["state"], "failed", "{j}");
    let (_, _, out) = get(&srv, &format!("/api/v1/jobs/{explicit}/logs"), &tok);
    assert_eq!(String::from_utf8_lossy(&out), "start\ngot TERM\n", "SIGTERM first, as Slurm does");
    let ms = ran_ms(&j);
    assert!((900..6_000).contains(&ms), "ran {ms} ms with a 1 s limit");
    let j = ended(&srv, &tok, default, 30);
    assert_eq!(j["state"], "timeout", "{j}");
    let ms = ran_ms(&j);
    assert!(
        (1_900..8_000).contains(&ms),
        "ran {ms} ms with a 2 s default limit (1 s estimate × 2)"
    );
    assert!(j["failure"].as_str().unwrap().contains("2s"), "{j}");
    assert_eq!(ended(&srv, &tok, quick, 30)["state"], "succeeded");
    // The state filter tells timeouts from failures.
    let (_, list) = srv.request("GET", "/api/v1/jobs?state=timeout", Some(&tok), b"");
    let ids: Vec<u64> = json(&list).as_array().unwrap().iter().map(|j| j["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [explicit, default]);
    let (_, list) = srv.request("GET", "/api/v1/jobs?state=failed", Some(&tok), b"");
    assert_eq!(json(&list), serde_json::json!([]));
    let (_, metrics) = srv.request("GET", "/metrics", None, b"");
    assert!(metrics.contains("koalesce_jobs{state=\"timeout\"} 2"), "{metrics}");
    // Ended jobs stay ended (and timeouts) after a restart.
    srv.stop();
    let srv = daily_server(tmp.path(), &[("vu", 4)]);
    assert_eq!(job(&srv, &tok, explicit)["state"], "timeout");
    let (_, list) = srv.request("GET", "/api/v1/jobs?state=timeout", Some(&tok), b"");
    assert_eq!(json(&list).as_array().unwrap().len(), 2, "{list}");
}

#[test]
fn a_component_over_its_memory_ends_in_out_of_memory_and_the_working_directory_is_used() {
    assert!(nix::unistd::geteuid().is_root(), "control groups need root (CI runs as root)");
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = daily_server(tmp.path(), &[("vu", 4)]);
    let hog = submit(
        &srv,
        &tok,
        &shell_job(
            "hog",
            "x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo ${#x}",
            1,
            "memory = \"32M\"",
        ),
    );
    // Per processor: 2 processors × 64M is room for 20 MB.
    let fits = submit(
        &srv,
        &tok,
        &shell_job(
            "fits",
            "x=$(head -c 20000000 /dev/zero | tr '\\0' a); echo ${#x}",
            2,
            "memory = \"64M\"\nworking_directory = \"run/sub\"",
        ),
    );
    let j = ended(&srv, &tok, hog, 60);
    assert_eq!(j["state"], "out_of_memory", "{j}");
    let failure = j["failure"].as_str().unwrap();
    assert!(failure.contains("memory limit") && failure.contains("32M"), "{failure}");
    let j = ended(&srv, &tok, fits, 60);
    assert_eq!(j["state"], "succeeded", "{j}");

    let wd = submit(
        &srv,
        &tok,
        &shell_job("wd", "pwd; echo $PWD; touch made-here; ls", 1, "working_directory = \"run/sub\""),
    );
    let j = ended(&srv, &tok, wd, 30);
    assert_eq!(j["state"], "succeeded", "{j}");
    let (_, _, out) = get(&srv, &format!("/api/v1/jobs/{wd}/logs"), &tok);
    let out = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].ends_with("/work/run/sub") && lines[1] == lines[0], "{out}");
    assert_eq!(lines[2], "made-here");
    let dir = std::path::Path::new(j["components"][0]["stdout"].as_str().unwrap())
        .parent()
        .unwrap();
    assert!(dir.join("work/run/sub/made-here").is_file());
}

#[test]
fn logs_are_read_through_the_api_by_offset_and_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let bob = token(tmp.path(), "bob", false);
    let srv = daily_server(tmp.path(), &[("vu", 4), ("leiden", 4)]);
    let script = "for i in $(seq 1 25); do echo line $i; done; echo oops >&2; sleep 0.5; echo late";
    let id = submit(&srv, &tok, &shell_job("chatty", script, 1, ""));
    // While it runs, the log grows; read it from offsets as `logs --follow` does.
    let mut seen = Vec::new();
    let t0 = Instant::now();
    loop {
        let (code, h, body) = get(&srv, &format!("/api/v1/jobs/{id}/logs?offset={}", seen.len()), &tok);
        assert_eq!(code, 200);
        seen.extend_from_slice(&body);
        assert_eq!(header(&h, "x-koalesce-log-size"), seen.len().to_string());
        if koalesce_api::dto::is_final_state(&header(&h, "x-koalesce-job-state")) && body.is_empty() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "job did not end");
        std::thread::sleep(Duration::from_millis(50));
    }
    let expected: String = (1..=25).map(|i| format!("line {i}\n")).collect::<String>() + "late\n";
    assert_eq!(String::from_utf8(seen).unwrap(), expected);
    let (_, h, body) = get(&srv, &format!("/api/v1/jobs/{id}/logs?tail=10"), &tok);
    assert_eq!(header(&h, "x-koalesce-lines-cut"), "16");
    assert_eq!(String::from_utf8(body).unwrap().lines().next(), Some("line 17"));
    let (_, _, body) = get(&srv, &format!("/api/v1/jobs/{id}/logs?stream=stderr"), &tok);
    assert_eq!(body, b"oops\n");
    let (_, _, body) = get(&srv, &format!("/api/v1/jobs/{id}/logs?offset=99999"), &tok);
    assert!(body.is_empty(), "past the end: nothing");
    // What is refused, and why.
    for (path, who, code, says) in [
        (format!("/api/v1/jobs/{id}/logs?component=3"), &tok, 404, "has 1 component"),
        (format!("/api/v1/jobs/{id}/logs?stream=both"), &tok, 422, "stream"),
        (format!("/api/v1/jobs/{id}/logs?tail=1000000"), &tok, 422, "tail"),
        (format!("/api/v1/jobs/{id}/logs"), &bob, 404, "not found"),
        ("/api/v1/jobs/999/logs".to_string(), &tok, 404, "not found"),
    ] {
        let (c, _, body) = get(&srv, &path, who);
        let body = String::from_utf8_lossy(&body);
        assert!(c == code && body.contains(says), "{path}: {c} {body}");
    }
    // A queued job has no output yet: an empty answer saying so, not an error.
    let fill = "name = \"fill\"\nexecutable = \"/bin/sleep\"\narguments = [\"30\"]\n\
                [[components]]\nprocessors = 4\nsite = \"vu\"\n[[components]]\nprocessors = 4\nsite = \"leiden\"\n";
    let fill = submit(&srv, &tok, fill);
    wait_state(&srv, &tok, fill, &["running"], 30);
    let big = submit(&srv, &tok, &shell_job("waits", "true", 1, ""));
    let (code, h, body) = get(&srv, &format!("/api/v1/jobs/{big}/logs"), &tok);
    assert_eq!((code, body.len(), header(&h, "x-koalesce-log-size")), (200, 0, "0".into()));
    assert_eq!(header(&h, "x-koalesce-job-state"), "queued");
    for id in [big, fill] {
        srv.request("POST", &format!("/api/v1/jobs/{id}/cancel"), Some(&tok), b"");
    }
}

#[test]
fn files_and_job_outputs_download_with_their_checksum() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = daily_server(tmp.path(), &[("vu", 4)]);
    // Registered by path from outside the data directory (never read as data).
    let outside = tempfile::tempdir().unwrap();
    let src = outside.path().join("data.bin");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(&src, &data).unwrap();
    let body = serde_json::json!({"name": "sets/data.bin", "path": src, "site": "vu"}).to_string();
    let (code, answer) = srv.request("POST", "/api/v1/files", Some(&tok), body.as_bytes());
    assert_eq!(code, 201, "{answer}");
    let sha = json(&answer)["sha256"].as_str().unwrap().to_string();
    let (code, h, got) = get(&srv, "/api/v1/files/sets%2Fdata.bin", &tok);
    assert_eq!(code, 200);
    assert!(got == data, "the content comes back byte for byte");
    assert_eq!(header(&h, "x-checksum-sha256"), sha);
    assert_eq!(header(&h, "content-length"), data.len().to_string());
    // A job's output is a catalogue file too.
    let id = submit(&srv, &tok, &shell_job("out", "echo result > r.txt", 1, "outputs = [\"r.txt\"]"));
    assert_eq!(ended(&srv, &tok, id, 30)["state"], "succeeded");
    let t0 = Instant::now();
    let got = loop {
        let (code, _, got) = get(&srv, &format!("/api/v1/files/{id}%2Fr.txt"), &tok);
        if code == 200 {
            break got;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "output not registered");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(got, b"result\n");
    let (code, _, body) = get(&srv, "/api/v1/files/nope", &tok);
    assert_eq!(code, 404, "{}", String::from_utf8_lossy(&body));
    let (code, _, _) = get(&srv, "/api/v1/files/sets%2Fdata.bin", "bogus-token");
    assert_eq!(code, 401);
}

#[test]
fn ended_jobs_keep_their_placement_and_the_list_filters_and_pages() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let bob = token(tmp.path(), "bob", false);
    let admin = token(tmp.path(), "root", true);
    let srv = daily_server(tmp.path(), &[("vu", 4), ("leiden", 4)]);
    let comps = "[[components]]\nprocessors = 1\nsite = \"leiden\"\n";
    let mut ids = Vec::new();
    for i in 0..5 {
        let toml = format!("name = \"sweep-{i}\"\nexecutable = \"/bin/true\"\n[[components]]\nprocessors = 1\nsite = \"vu\"\n{comps}");
        ids.push(submit(&srv, &tok, &toml));
    }
    let fail = submit(&srv, &tok, &shell_job("other", "exit 4", 1, ""));
    let long = submit(&srv, &tok, &shell_job("long", "sleep 60", 1, ""));
    let bobs = submit(&srv, &bob, &shell_job("sweep-bob", "true", 1, ""));
    for &id in ids.iter().chain([&fail, &bobs]) {
        ended(&srv, if id == bobs { &bob } else { &tok }, id, 30);
    }
    wait_state(&srv, &tok, long, &["running"], 30);
    let (code, _) = srv.request("POST", &format!("/api/v1/jobs/{long}/cancel"), Some(&tok), b"");
    assert_eq!(code, 200);
    ended(&srv, &tok, long, 30);
    // Restart: ended jobs now come from the store; they keep where they ran.
    srv.stop();
    let srv = daily_server(tmp.path(), &[("vu", 4), ("leiden", 4)]);
    let j = job(&srv, &tok, ids[0]);
    assert_eq!(j["sites"], serde_json::json!(["vu", "leiden"]), "{j}");
    assert_eq!(j["components"][1]["site"], "leiden");
    assert_eq!(j["components"][1]["state"], "finished");
    let j = job(&srv, &tok, long);
    assert_eq!(j["state"], "cancelled");
    assert!(
        j["components"][0]["site"].is_string() && j["components"][0]["state"] == "aborted",
        "{j}"
    );
    assert_eq!(job(&srv, &tok, fail)["sites"].as_array().unwrap().len(), 1);

    let list = |tok: &str, q: &str| -> (u16, Vec<u64>, String) {
        let (code, h, body) = get(&srv, &format!("/api/v1/jobs{q}"), tok);
        let ids = match serde_json::from_slice::<Value>(&body) {
            Ok(Value::Array(a)) => a.iter().map(|j| j["id"].as_u64().unwrap()).collect(),
            _ => Vec::new(),
        };
        let summaries_have_sites = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .is_none_or(|a| a.iter().all(|j| !j["sites"].as_array().unwrap().is_empty()));
        assert!(
            summaries_have_sites,
            "an ended job lost its sites: {}",
            String::from_utf8_lossy(&body)
        );
        (code, ids, header(&h, "x-koalesce-next-after"))
    };
    assert_eq!(list(&tok, "?name=SWEEP-*").1, ids, "wildcards, case ignored; not bob's");
    let at_leiden = list(&tok, "?site=leiden").1;
    assert!(ids.iter().all(|i| at_leiden.contains(i)), "{at_leiden:?}");
    for id in at_leiden {
        assert!(job(&srv, &tok, id)["sites"].as_array().unwrap().contains(&"leiden".into()));
    }
    assert!(list(&tok, "?site=nowhere").1.is_empty());
    assert_eq!(list(&tok, "?state=failed,cancelled").1, [fail, long]);
    let (_, page1, next) = list(&tok, "?limit=2");
    assert_eq!((page1.as_slice(), next.as_str()), (&ids[..2], ids[1].to_string().as_str()));
    let (_, page2, _) = list(&tok, &format!("?limit=2&after={next}"));
    assert_eq!(page2, &ids[2..4]);
    let (_, last, next) = list(&tok, &format!("?limit=10&after={}", ids[4]));
    assert_eq!((last, next.as_str()), (vec![fail, long], ""), "the last page has no next");
    let now = koalesce_server::now_ms();
    assert!(list(&tok, &format!("?since={}", now + 60_000)).1.is_empty());
    // Other users' jobs: admins only, and a refusal says why.
    let (code, _, _) = list(&tok, "?all=true");
    assert_eq!(code, 403);
    let (_, _, body) = get(&srv, "/api/v1/jobs?all=true", &tok);
    assert!(String::from_utf8_lossy(&body).contains("only an admin"));
    assert_eq!(list(&tok, "?user=bob").0, 403);
    assert_eq!(list(&admin, "?user=bob").1, [bobs]);
    assert_eq!(list(&admin, "?all=true&name=sweep-*").1.len(), 6);
    assert_eq!(list(&tok, "?limit=0").0, 422);
    assert_eq!(list(&tok, "?state=bogus").0, 422);
}

#[test]
fn dependencies_and_holds_gate_jobs_and_survive_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let bob = token(tmp.path(), "bob", false);
    let srv = daily_server(tmp.path(), &[("vu", 4)]);
    let a = submit(&srv, &tok, &shell_job("a", "sleep 0.5", 1, ""));
    let b = submit(&srv, &tok, &shell_job("b", "true", 1, &format!("afterok = [{a}]")));
    let (code, c) = post(
        &srv,
        &format!("/api/v1/jobs?dependency=afternotok:{a}"),
        &tok,
        &shell_job("c", "true", 1, ""),
    );
    assert_eq!(code, 201, "{c}");
    let c = c["id"].as_u64().unwrap();
    let j = job(&srv, &tok, b);
    assert_eq!(j["state"], "held", "{j}");
    assert_eq!(j["reason"], format!("waiting for afterok:{a}"));
    // b starts only after a succeeded; c can never start.
    let jb = ended(&srv, &tok, b, 30);
    let ja = job(&srv, &tok, a);
    assert_eq!((ja["state"].as_str(), jb["state"].as_str()), (Some("succeeded"), Some("succeeded")));
    assert!(jb["started_ms"].as_u64() >= ja["finished_ms"].as_u64(), "{ja}\n{jb}");
    let jc = ended(&srv, &tok, c, 30);
    assert_eq!(jc["state"], "failed");
    assert!(
        jc["failure"].as_str().unwrap().contains("dependency can never be satisfied"),
        "{jc}"
    );
    // Refused at submission, naming why.
    let bobs = submit(&srv, &bob, &shell_job("bobs", "true", 1, ""));
    for (q, says) in [
        (format!("dependency=afterok:{c}"), "ended failed, so it can never be satisfied"),
        (format!("dependency=afterok:{bobs}"), "not found"),
        ("dependency=afterok:999".to_string(), "not found"),
        ("dependency=whenever:3".to_string(), "unknown kind"),
    ] {
        let (code, v) = post(&srv, &format!("/api/v1/jobs?{q}"), &tok, &shell_job("x", "true", 1, ""));
        assert!(code == 422 && v["error"].as_str().unwrap().contains(says), "{q}: {code} {v}");
    }
    // Holds.
    let long = submit(&srv, &tok, &shell_job("long", "sleep 60", 1, ""));
    wait_state(&srv, &tok, long, &["running"], 30);
    let (code, v) = post(&srv, &format!("/api/v1/jobs/{long}/hold"), &tok, "");
    assert!(code == 409 && v["error"].as_str().unwrap().contains("running"), "{v}");
    let (code, h) = post(&srv, "/api/v1/jobs?hold=true", &tok, &shell_job("held", "true", 1, ""));
    assert_eq!(code, 201);
    let held = h["id"].as_u64().unwrap();
    let waits = submit(&srv, &tok, &shell_job("waits", "true", 1, &format!("afterany = [{long}]")));
    let (code, _) = post(&srv, &format!("/api/v1/jobs/{held}/release"), &bob, "");
    assert_eq!(code, 404, "another user's job");
    let (code, v) = post(&srv, &format!("/api/v1/jobs/{waits}/hold"), &tok, "");
    assert_eq!(
        (code, v["reason"].as_str()),
        (200, Some(format!("held by its user, and waiting for afterany:{long}").as_str()))
    );
    // Across a restart: still held, still waiting.
    srv.stop();
    let srv = daily_server(tmp.path(), &[("vu", 4)]);
    let j = job(&srv, &tok, held);
    assert_eq!(
        (j["state"].as_str(), j["reason"].as_str()),
        (Some("held"), Some("held by its user (koalesce release)"))
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(job(&srv, &tok, held)["state"], "held", "a held job is never placed");
    let (code, v) = post(&srv, &format!("/api/v1/jobs/{held}/release"), &tok, "");
    assert_eq!(code, 200, "{v}");
    assert_eq!(ended(&srv, &tok, held, 30)["state"], "succeeded");
    let (code, _) = post(&srv, &format!("/api/v1/jobs/{held}/release"), &tok, "");
    assert_eq!(code, 409, "ended: nothing to release");
    post(&srv, &format!("/api/v1/jobs/{waits}/release"), &tok, "");
    assert_eq!(job(&srv, &tok, waits)["reason"], format!("waiting for afterany:{long}"));
    post(&srv, &format!("/api/v1/jobs/{long}/cancel"), &tok, "");
    assert_eq!(ended(&srv, &tok, waits, 30)["state"], "succeeded", "afterany: any end");
    let (_, list) = srv.request("GET", "/api/v1/jobs?state=held", Some(&tok), b"");
    assert_eq!(json(&list), serde_json::json!([]));
}

#[test]
fn an_array_runs_one_job_per_task_at_most_m_at_once_under_one_id() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = daily_server(tmp.path(), &[("vu", 8)]);
    let toml = shell_job(
        "sweep",
        "echo task $KOALESCE_TASK_ID of $KOALESCE_ARRAY_TASK_COUNT in $KOALESCE_ARRAY_JOB_ID; sleep 0.4",
        1,
        "arguments = [\"-c\", \"echo task $KOALESCE_TASK_ID of $KOALESCE_ARRAY_TASK_COUNT in $KOALESCE_ARRAY_JOB_ID arg ${KOALESCE_TASK_ID}; sleep 0.4\"]",
    );
    // shell_job wrote its own arguments first: keep the one with the ${...} reference.
    let toml = toml.replacen(
        "arguments = [\"-c\", \"echo task $KOALESCE_TASK_ID of $KOALESCE_ARRAY_TASK_COUNT in $KOALESCE_ARRAY_JOB_ID; sleep 0.4\"]\n",
        "",
        1,
    );
    let (code, v) = post(&srv, "/api/v1/jobs?array=0-50:10%2", &tok, &toml);
    assert_eq!(code, 201, "{v}");
    let array = v["id"].as_u64().unwrap();
    let ids: Vec<u64> = v["ids"].as_array().unwrap().iter().map(|i| i.as_u64().unwrap()).collect();
    assert_eq!(ids, (array..array + 6).collect::<Vec<_>>());
    let mut spans = Vec::new();
    for (k, &id) in ids.iter().enumerate() {
        let j = ended(&srv, &tok, id, 60);
        assert_eq!(j["state"], "succeeded", "{j}");
        assert_eq!((j["array_id"].as_u64(), j["task_id"].as_u64()), (Some(array), Some(10 * k as u64)));
        let (_, _, out) = get(&srv, &format!("/api/v1/jobs/{id}/logs"), &tok);
        let t = 10 * k;
        assert_eq!(String::from_utf8(out).unwrap(), format!("task {t} of 6 in {array} arg {t}\n"));
        spans.push((j["started_ms"].as_u64().unwrap(), j["finished_ms"].as_u64().unwrap()));
    }
    // %2: never more than two tasks ran at the same time.
    for &(s, _) in &spans {
        let at_once = spans.iter().filter(|&&(a, b)| a <= s && s < b).count();
        assert!(at_once <= 2, "{at_once} tasks at once: {spans:?}");
    }
    // One id shows every task.
    let j = job(&srv, &tok, array);
    let tasks: Vec<(u64, u64, String)> = j["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["task_id"].as_u64().unwrap(),
                t["id"].as_u64().unwrap(),
                t["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(u64, u64, String)> = (0..6).map(|k| (10 * k, array + k, "succeeded".to_string())).collect();
    assert_eq!(tasks, want);
    assert_eq!(
        job(&srv, &tok, ids[1])["tasks"],
        serde_json::json!([]),
        "a task's own id shows itself"
    );
    let (code, v) = post(&srv, "/api/v1/jobs?array=5-1", &tok, &toml);
    assert!(code == 422 && v["error"].as_str().unwrap().contains("array"), "{v}");
}
