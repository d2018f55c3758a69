//! GridWay in a real server (issue 13): the data functions through the catalogue cache and the
//! GW_* environment, banning of a site where components fail, site attributes in REQUIREMENTS
//! and RANK, and GridWay's job priority order — each through the REST API, with jobs run by
//! real supervisors.

mod common;

use std::time::{Duration, Instant};

use common::*;
use koalesce_core::gridway::Queueing;
use koalesce_core::model::SiteAttributes;
use koalesce_server::{BackgroundServer, ServerOptions};
use serde_json::Value;

fn options(dir: &std::path::Path, sites: &[(&str, u32)]) -> ServerOptions {
    koalesce_server::test_options(dir, sites, supervisor())
}

/// The value of an unlabelled metric (or one with `labels`, e.g. `{site="b"}`).
fn metric(srv: &BackgroundServer, name: &str) -> f64 {
    let (code, text) = srv.request("GET", "/metrics", None, b"");
    assert_eq!(code, 200);
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
}

/// Registers `bytes` as `name` at `site` from a server-local file outside the data directory
/// (which the server refuses to read from).
fn register(srv: &BackgroundServer, tok: &str, name: &str, site: &str, bytes: &[u8]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join(format!("src-{name}-{site}"));
    std::fs::write(&src, bytes).unwrap();
    let body = format!(r#"{{"name":"{name}","path":"{}","site":"{site}"}}"#, src.display());
    let (code, f) = srv.request("POST", "/api/v1/files", Some(tok), body.as_bytes());
    assert_eq!(code, 201, "{f}");
    json(&f)
}

fn stdout_of(j: &Value) -> String {
    std::fs::read_to_string(j["components"][0]["stdout"].as_str().unwrap()).unwrap()
}

fn site_info(srv: &BackgroundServer, tok: &str, name: &str) -> Value {
    let (code, body) = srv.request("GET", "/api/v1/sites", Some(tok), b"");
    assert_eq!(code, 200, "{body}");
    json(&body).as_array().unwrap().iter().find(|s| s["name"] == name).cloned().unwrap()
}

fn wait_until(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn data_functions_go_through_the_catalogue_cache_and_jobs_get_gw_close_se_and_remote_files() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = BackgroundServer::start(options(tmp.path(), &[("a", 2), ("b", 2), ("c", 2)])).unwrap();
    register(&srv, &tok, "near.dat", "b", &[1; 1000]);
    register(&srv, &tok, "far.dat", "c", &[2; 3000]);
    let data_job = shell_job(
        "data",
        "echo \"$GW_CLOSE_SE $GW_REMOTE_FILES_0 ${GW_REMOTE_FILES_1:-none}\"",
        1,
        "requirements = 'CLOSE_DATA(\"near.dat\")'\nrank = 'HAS_CLOSE_DATA(\"far.dat\") + SIZE_CLOSE_DATA(\"near.dat\")'",
    );
    let id = submit(&srv, &tok, &data_job);
    let j = wait_state(&srv, &tok, id, &["succeeded", "failed"], 20);
    assert_eq!(j["state"], "succeeded", "{j}");
    assert_eq!(j["components"][0]["site"], "b", "{j}");
    // b holds near.dat; far.dat, asked about by the rank, is not there: the job must get it.
    assert_eq!(stdout_of(&j), "b far.dat none\n");
    // One catalogue query per file, however many sites and scans evaluated them.
    assert_eq!(metric(&srv, "koalesce_catalogue_cache_queries_total"), 2.0);
    let hits = metric(&srv, "koalesce_catalogue_cache_hits_total");
    let id2 = submit(&srv, &tok, &data_job);
    assert_eq!(wait_state(&srv, &tok, id2, &["succeeded", "failed"], 20)["state"], "succeeded");
    assert_eq!(
        metric(&srv, "koalesce_catalogue_cache_queries_total"),
        2.0,
        "the second job asked the catalogue again"
    );
    assert!(metric(&srv, "koalesce_catalogue_cache_hits_total") > hits);
    assert_eq!(metric(&srv, "koalesce_catalogue_cache_entries"), 2.0);
    // A job needing a file nobody registered waits; registering it (at a) lets it run there.
    let late = shell_job("late", "echo $GW_CLOSE_SE", 1, "requirements = 'CLOSE_DATA(\"late.dat\")'");
    let id3 = submit(&srv, &tok, &late);
    wait_until(10, "the catalogue query for late.dat", || {
        metric(&srv, "koalesce_catalogue_cache_queries_total") >= 3.0
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(job(&srv, &tok, id3)["state"], "queued");
    register(&srv, &tok, "late.dat", "a", &[3; 10]);
    let j3 = wait_state(&srv, &tok, id3, &["succeeded", "failed"], 20);
    assert_eq!(
        (j3["state"].as_str(), j3["components"][0]["site"].as_str()),
        (Some("succeeded"), Some("a")),
        "{j3}"
    );
    assert_eq!(stdout_of(&j3), "a\n");
    // The evaluations show in /metrics too.
    assert!(metric(&srv, "koalesce_expression_evaluations_total") > 0.0);
}

#[test]
fn the_catalogue_cache_is_bounded_and_its_entries_expire() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let mut opts = options(tmp.path(), &[("a", 1)]);
    opts.config.catalogue.cache_entries = 1;
    opts.config.catalogue.cache_max_age_ms = 150;
    let srv = BackgroundServer::start(opts).unwrap();
    // Two files no site holds: the job stays queued and every scan evaluates both.
    let id = submit(
        &srv,
        &tok,
        &shell_job("never", "true", 1, "requirements = 'CLOSE_DATA(\"x\") & CLOSE_DATA(\"y\")'"),
    );
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(job(&srv, &tok, id)["state"], "queued");
    assert!(metric(&srv, "koalesce_catalogue_cache_entries") <= 1.0);
    assert!(metric(&srv, "koalesce_catalogue_cache_evictions_total") >= 1.0);
    // 1.2 s of 50 ms scans with a 150 ms age limit and room for one file: asked again and
    // again, but never more than twice per scan.
    let queries = metric(&srv, "koalesce_catalogue_cache_queries_total");
    let scans = metric(&srv, "koalesce_scan_duration_seconds_count");
    assert!(queries >= 4.0 && queries <= 2.0 * scans + 10.0, "queries {queries}, scans {scans}");
    assert_eq!(metric(&srv, "koalesce_catalogue_cache_query_failures_total"), 0.0);
}

#[test]
fn a_site_that_fails_a_component_is_banned_for_gridway_jobs_until_its_ban_ends_and_cleared_by_a_success() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let mut opts = options(tmp.path(), &[("a", 2), ("b", 2)]);
    // The first ban lasts a tenth of the longest: 4 s.
    opts.config.scheduler.gridway.banning.max_ms = 40_000;
    let srv = BackgroundServer::start(opts).unwrap();
    let good = vec![5u8; 50_000];
    register(&srv, &tok, "in.dat", "a", &good);
    // Site b cannot store anything (its storage is not a directory): the copy of the input
    // there fails, a fault of b. (A corrupt source replica would blame nobody: it is
    // quarantined.)
    let storage = tmp.path().join("sites/b/storage");
    std::fs::remove_dir_all(&storage).unwrap();
    std::fs::write(&storage, b"not a directory").unwrap();
    let needs_b = shell_job(
        "needs-b",
        "cat \"$KOALESCE_INPUT_IN_DAT\" | wc -c",
        1,
        "policy = \"gridway\"\nrequirements = 'HOSTNAME = \"b\"'\ninputs = [\"in.dat\"]",
    );
    let id = submit(&srv, &tok, &needs_b);
    wait_until(10, "a failed copy to b", || site_info(&srv, &tok, "b")["failure_streak"] == 1);
    let b = site_info(&srv, &tok, "b");
    let until = b["banned_until_ms"].as_u64().unwrap_or_else(|| panic!("b not banned: {b}"));
    assert_eq!(metric(&srv, "koalesce_site_banned{site=\"b\"}"), 1.0);
    assert_eq!(metric(&srv, "koalesce_site_banned{site=\"a\"}"), 0.0);
    // Banned, b gets no new try: the number of failed copies stays where it is.
    let failures = metric(&srv, "koalesce_transfer_failures_total");
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(
        metric(&srv, "koalesce_transfer_failures_total"),
        failures,
        "b was tried while banned"
    );
    assert_eq!(job(&srv, &tok, id)["state"], "queued");
    // b's storage is repaired; once the ban ends the job runs at b and the success clears it.
    std::fs::remove_file(&storage).unwrap();
    std::fs::create_dir_all(&storage).unwrap();
    let j = wait_state(&srv, &tok, id, &["succeeded", "failed"], 20);
    assert_eq!(j["state"], "succeeded", "{j}");
    assert!(j["timeline"]["placed"].as_u64().unwrap() >= until, "placed during the ban: {j}");
    assert_eq!(stdout_of(&j).trim(), "50000");
    let b = site_info(&srv, &tok, "b");
    assert_eq!((b["failure_streak"].as_u64(), b.get("banned_until_ms")), (Some(0), None), "{b}");
    assert_eq!(metric(&srv, "koalesce_site_banned{site=\"b\"}"), 0.0);
}

#[test]
fn bans_and_usage_history_survive_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let opts = || {
        let mut o = options(tmp.path(), &[("a", 2), ("b", 2)]);
        // The first ban lasts a tenth of the longest: 60 s, well past the restart.
        o.config.scheduler.gridway.banning.max_ms = 600_000;
        o
    };
    let srv = BackgroundServer::start(opts()).unwrap();
    register(&srv, &tok, "in.dat", "a", &[7u8; 1000]);
    // A job that ran well at a: a's usage history has its time.
    let at_a = shell_job("at-a", "sleep 0.2", 1, "policy = \"gridway\"\nrequirements = 'HOSTNAME = \"a\"'");
    let id = submit(&srv, &tok, &at_a);
    assert_eq!(wait_state(&srv, &tok, id, &["succeeded", "failed"], 20)["state"], "succeeded");
    // b cannot store anything: the copy of the input there fails and b is banned.
    let storage = tmp.path().join("sites/b/storage");
    std::fs::remove_dir_all(&storage).unwrap();
    std::fs::write(&storage, b"not a directory").unwrap();
    let needs_b = shell_job(
        "needs-b",
        "true",
        1,
        "policy = \"gridway\"\nrequirements = 'HOSTNAME = \"b\"'\ninputs = [\"in.dat\"]",
    );
    let queued = submit(&srv, &tok, &needs_b);
    wait_until(10, "a failed copy to b", || site_info(&srv, &tok, "b")["failure_streak"] == 1);
    let until = site_info(&srv, &tok, "b")["banned_until_ms"].as_u64().expect("b banned");
    let usage_a = srv.shared().lock().core.usage_history(koalesce_core::SiteId(0)).clone();
    assert!(usage_a.last_ms.is_some(), "the job at a is in a's usage history");
    // Let the writer commit what the last events changed, then restart on the same data.
    std::thread::sleep(Duration::from_millis(300));
    srv.stop();
    // b is repaired meanwhile: only the remembered ban keeps jobs away from it now.
    std::fs::remove_file(&storage).unwrap();
    std::fs::create_dir_all(&storage).unwrap();

    let srv = BackgroundServer::start(opts()).unwrap();
    let b = site_info(&srv, &tok, "b");
    assert_eq!(b["banned_until_ms"].as_u64(), Some(until), "the ban outlives the restart: {b}");
    assert_eq!(b["failure_streak"], 1, "{b}");
    assert_eq!(metric(&srv, "koalesce_site_banned{site=\"b\"}"), 1.0);
    let core_usage = srv.shared().lock().core.usage_history(koalesce_core::SiteId(0)).clone();
    assert_eq!(core_usage, usage_a, "a's usage history outlives the restart");
    // The job that needs b stays queued: banned b gets no try although it could run there.
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(job(&srv, &tok, queued)["state"], "queued");
    assert_eq!(metric(&srv, "koalesce_transfer_failures_total"), 0.0, "b was tried while banned");
}

/// A bag of tasks (`?tasks=N`): each task is matched and placed on its own, with its own
/// task variables in its inputs and RANK, so each goes to its own data; bad bag parameters
/// are refused with the parameter named.
#[test]
fn each_task_of_a_bag_is_placed_by_its_own_data() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let srv = BackgroundServer::start(options(tmp.path(), &[("a", 2), ("b", 2)])).unwrap();
    register(&srv, &tok, "in.0", "a", &[1u8; 20_000]);
    register(&srv, &tok, "in.1", "b", &[2u8; 20_000]);
    let bag = shell_job(
        "by-data",
        "wc -c < \"$KOALESCE_INPUT_IN_${KOALESCE_TASK_ID}\"; echo $GW_CLOSE_SE",
        1,
        "inputs = [\"in.${KOALESCE_TASK_ID}\"]\nrank = 'SIZE_CLOSE_DATA(\"in.${KOALESCE_TASK_ID}\")'",
    );
    let (code, body) = srv.request("POST", "/api/v1/jobs?tasks=2", Some(&tok), bag.as_bytes());
    assert_eq!(code, 201, "{body}");
    let id = json(&body)["id"].as_u64().unwrap();
    wait_until(30, "the bag to end", || job(&srv, &tok, id)["bag"]["state"] == "succeeded");
    let d = job(&srv, &tok, id);
    assert_eq!(d["state"], "succeeded", "{d}");
    for (task, site) in [(0u64, "a"), (1, "b")] {
        let t = job(&srv, &tok, id + task);
        assert_eq!((t["task_id"].as_u64(), t["array_id"].as_u64()), (Some(task), Some(id)), "{t}");
        assert_eq!(t["name"], "by-data", "{t}");
        assert_eq!(t["sites"][0], site, "task {task} went to its data: {t}");
        assert_eq!(stdout_of(&t), format!("20000\n{site}\n"), "{t}");
    }
    for (query, named) in [
        ("tasks=0", "'tasks'"),
        ("tasks=10001", "'tasks'"),
        ("tasks=3&min_tasks=4", "'min_tasks'"),
        ("tasks=3&min_tasks=0", "'min_tasks'"),
        ("tasks=3&array=1-3", "exclude"),
        ("min_tasks=2", "need 'tasks'"),
        ("tasks=x", "tasks"),
    ] {
        let (code, body) = srv.request("POST", &format!("/api/v1/jobs?{query}"), Some(&tok), bag.as_bytes());
        assert!(code == 400 || code == 422, "{query}: {code} {body}");
        assert!(body.contains(named), "{query}: {body}");
    }
    // Two tasks whose inputs would be staged under one name are refused before any is made.
    let (code, body) = srv.request(
        "POST",
        "/api/v1/jobs?tasks=2",
        Some(&tok),
        shell_job("dup", "true", 1, "inputs = [\"in.${KOALESCE_TASK_ID}\", \"x/in.0\"]").as_bytes(),
    );
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("task 0") && body.contains("two inputs"), "{body}");
    let (_, list) = srv.request("GET", "/api/v1/jobs", Some(&tok), b"");
    assert_eq!(
        json(&list).as_array().unwrap().len(),
        2,
        "nothing of the refused bags was made: {list}"
    );
}

#[test]
fn site_attributes_drive_requirements_and_rank_and_show_in_the_sites_list() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let mut opts = options(tmp.path(), &[("fast", 2), ("slow", 2)]);
    opts.config.sites[0].attributes = Some(SiteAttributes {
        cpu_mhz: 3000,
        ..Default::default()
    });
    opts.config.sites[1].attributes = Some(SiteAttributes {
        cpu_mhz: 1000,
        architecture: "sparc".into(),
        software: vec!["ENV/MPI".into()],
        ..Default::default()
    });
    let srv = BackgroundServer::start(opts).unwrap();
    let fast = site_info(&srv, &tok, "fast");
    assert_eq!(fast["host"]["CPU_MHZ"], "3000", "{fast}");
    assert_eq!(fast["host"]["ARCH"], std::env::consts::ARCH);
    assert_eq!(fast["host"]["LRMS_TYPE"], "local");
    assert_eq!(site_info(&srv, &tok, "slow")["software"][0], "ENV/MPI");
    let run = |extra: &str| {
        let id = submit(&srv, &tok, &shell_job("attr", "echo $GW_CLOSE_SE", 1, extra));
        let j = wait_state(&srv, &tok, id, &["succeeded", "failed"], 20);
        assert_eq!(j["state"], "succeeded", "{j}");
        (j["components"][0]["site"].as_str().unwrap().to_string(), stdout_of(&j))
    };
    assert_eq!(run("rank = 'CPU_MHZ'"), ("fast".to_string(), "fast\n".to_string()));
    assert_eq!(run("rank = '-CPU_MHZ'").0, "slow");
    assert_eq!(run("requirements = 'HAS_SOFTWARE(\"env/mpi\")'").0, "slow");
    assert_eq!(run("requirements = 'ARCH = \"sp*\"'\npolicy = \"wf\"").0, "slow");
    // A requirement no site meets: the job waits.
    let id = submit(&srv, &tok, &shell_job("none", "true", 1, "requirements = 'CPU_MHZ > 5000'"));
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(job(&srv, &tok, id)["state"], "queued");
    // A bad expression is refused with its column.
    let (code, body) = srv.request(
        "POST",
        "/api/v1/jobs",
        Some(&tok),
        shell_job("bad", "true", 1, "rank = 'CPU_MHZ +'").as_bytes(),
    );
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("rank") && body.contains("column"), "{body}");
}

#[test]
fn gridway_queueing_dispatches_by_job_priority_deadline_first() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token(tmp.path(), "alice", false);
    let mut opts = options(tmp.path(), &[("one", 1)]);
    opts.config.scheduler.queueing = Queueing::Gridway;
    let srv = BackgroundServer::start(opts).unwrap();
    // The only processor is busy; two jobs queue behind it, the later one with a deadline.
    let blocker = submit(&srv, &tok, &shell_job("blocker", "sleep 1", 1, ""));
    wait_state(&srv, &tok, blocker, &["running"], 20);
    let plain = submit(&srv, &tok, &shell_job("plain", "true", 1, ""));
    let urgent = submit(&srv, &tok, &shell_job("urgent", "true", 1, "deadline = \"10m\""));
    let started = |id| {
        let j = wait_state(&srv, &tok, id, &["succeeded", "failed"], 30);
        assert_eq!(j["state"], "succeeded", "{j}");
        j["timeline"]["started"].as_u64().unwrap()
    };
    let (p, u) = (started(plain), started(urgent));
    assert!(
        u < p,
        "the job with a deadline should start first under GridWay's job priority (urgent {u}, plain {p})"
    );
}

#[test]
fn the_gridway_configuration_is_read_and_bad_values_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("server.toml");
    std::fs::write(
        &path,
        r#"
[[sites]]
name = "vu"
processors = 8
[sites.attributes]
cpu_mhz = 2800
software = ["ENV/MPI"]
[scheduler]
queueing = "gridway"
[scheduler.gridway.banning]
max_ms = 600000
[scheduler.gridway.job_priority]
deadline = 2.0
shares = { alice = 10 }
[catalogue]
cache_entries = 10
cache_max_age_ms = 5000
"#,
    )
    .unwrap();
    let c = koalesce_server::ServerConfig::load(&path).unwrap();
    assert_eq!(c.scheduler.queueing, Queueing::Gridway);
    assert_eq!(c.scheduler.gridway.banning.max_ms, 600_000);
    assert_eq!(c.scheduler.gridway.job_priority.shares["alice"], 10);
    assert_eq!((c.catalogue.cache_entries, c.catalogue.cache_max_age_ms), (10, 5000));
    assert_eq!(c.sites[0].attributes.as_ref().unwrap().cpu_mhz, 2800);
    for (bad, named) in [
        ("[catalogue]\ncache_entries = 0\n", "catalogue.cache_entries"),
        ("[catalogue]\ncache_max_age_ms = 0\n", "catalogue.cache_max_age_ms"),
        ("[catalogue]\nsize = 3\n", "size"),
        ("[scheduler]\nqueueing = \"lifo\"\n", "lifo"),
        ("[scheduler.gridway.resource_priority]\nhistory = 2.0\n", "history"),
        (
            "[[sites]]\nname = \"x\"\nprocessors = 1\n[sites.attributes]\ncpu_ghz = 3\n",
            "cpu_ghz",
        ),
    ] {
        std::fs::write(&path, bad).unwrap();
        let e = format!("{:#}", koalesce_server::ServerConfig::load(&path).unwrap_err());
        assert!(e.contains(named), "{bad}: {e}");
    }
}

#[test]
fn gridway_queueing_shares_dispatches_between_users() {
    let tmp = tempfile::tempdir().unwrap();
    let alice = token(tmp.path(), "alice", false);
    let bob = token(tmp.path(), "bob", false);
    let mut opts = options(tmp.path(), &[("one", 1)]);
    opts.config.scheduler.queueing = Queueing::Gridway;
    // One job per share unit (GridWay counts an owner's jobs in units of its share).
    opts.config.scheduler.gridway.job_priority.default_share = 1;
    let srv = BackgroundServer::start(opts).unwrap();
    // alice has had the processor; her second and third jobs queue before bob's first.
    let blocker = submit(&srv, &alice, &shell_job("blocker", "sleep 1", 1, ""));
    wait_state(&srv, &alice, blocker, &["running"], 20);
    let a1 = submit(&srv, &alice, &shell_job("a1", "true", 1, ""));
    let a2 = submit(&srv, &alice, &shell_job("a2", "true", 1, ""));
    let b1 = submit(&srv, &bob, &shell_job("b1", "true", 1, ""));
    let started = |tok: &str, id| {
        let j = wait_state(&srv, tok, id, &["succeeded", "failed"], 30);
        assert_eq!(j["state"], "succeeded", "{j}");
        j["timeline"]["started"].as_u64().unwrap()
    };
    let (t1, t2, tb) = (started(&alice, a1), started(&alice, a2), started(&bob, b1));
    // GridWay's share policy: bob, who has had nothing, goes before alice's queued jobs.
    assert!(tb < t1 && tb < t2, "bob {tb}, alice {t1} and {t2}");
}
