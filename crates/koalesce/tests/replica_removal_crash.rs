//! The files of replicas the catalogue drops (a file deleted by its user, a replica replaced by
//! a new version) are removed exactly when their records say so, across crashes: the commit
//! that drops a replica records its file as a pending removal, the file goes after it, and a
//! `koalesce server` SIGKILLed in between removes it after its restart. Failure injection
//! (`KOALESCE_FAULT_REMOVAL_HOLD`) holds the daemon between the commit and the removal, as a
//! real daemon cannot be stopped on cue there.

mod server_common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use server_common::*;

/// A server (`config`) whose replica file removals wait while the returned hold file exists,
/// and alice's token.
fn server_holding_removals(config: &str) -> (TestServer, String, PathBuf) {
    let mut s = TestServer::new(config);
    let token = s.token("alice", false);
    let hold = s.path().join("hold-removal");
    std::fs::write(&hold, "").unwrap();
    s.env.push(("KOALESCE_FAULT_REMOVAL_HOLD", hold.clone()));
    s.start();
    (s, token, hold)
}

fn wait_for(what: &str, s: &TestServer, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < Duration::from_secs(30), "{what}: timed out\n{}", s.log_tail());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until a removal stopped at the hold.
fn wait_at_hold(s: &TestServer, hold: &Path) {
    let mut reached = hold.as_os_str().to_owned();
    reached.push(".reached");
    let reached = PathBuf::from(reached);
    wait_for("a removal reaching the hold", s, || reached.exists());
}

/// `PUT /api/v1/files/{name}?site=SITE` with `body`: (status, answer).
fn upload(s: &TestServer, token: &str, name: &str, site: &str, body: &[u8]) -> (u16, String) {
    let mut resp = agent()
        .put(&format!("{}/api/v1/files/{name}?site={site}", s.url))
        .header("Authorization", &format!("Bearer {token}"))
        .send(body)
        .unwrap();
    (resp.status().as_u16(), resp.body_mut().read_to_string().unwrap())
}

fn catalogue_entry(s: &TestServer, token: &str, name: &str) -> Option<Value> {
    let (code, body) = http(&s.url, "GET", "/api/v1/files", Some(token), None, b"").unwrap();
    assert_eq!(code, 200, "{body}");
    json(&body).as_array().unwrap().iter().find(|f| f["name"] == name).cloned()
}

/// The stored copies of `name` (`data` → `data.<tag>`) at `site`.
fn stored_at(s: &TestServer, site: &str, name: &str) -> Vec<PathBuf> {
    stored_files(s, &format!("{name}."))
        .into_iter()
        .filter(|p| p.parent().and_then(Path::parent).and_then(Path::file_name) == Some(site.as_ref()))
        .collect()
}

/// A user deletes a file; the daemon is SIGKILLed after the deletion committed and before the
/// replica's file was removed. After the restart the file is removed (before the fix it stayed
/// on disk for good, no record pointing to it) and the catalogue does not list it.
#[test]
fn a_deleted_files_replica_is_removed_after_a_crash_between_commit_and_removal() {
    let _g = serial();
    let (mut s, token, hold) = server_holding_removals(&test_config(&[("alpha", 1)]));
    let (code, body) = upload(&s, &token, "data", "alpha", b"old content\n");
    assert_eq!(code, 201, "{body}");
    assert_eq!(stored_at(&s, "alpha", "data").len(), 1);
    let (url, t) = (s.url.clone(), token.clone());
    let deleting = std::thread::spawn(move || http(&url, "DELETE", "/api/v1/files/data", Some(&t), None, b""));
    wait_at_hold(&s, &hold);
    // Committed: out of the catalogue; the file not removed yet.
    assert!(catalogue_entry(&s, &token, "data").is_none());
    assert_eq!(stored_at(&s, "alpha", "data").len(), 1, "held before the removal");
    s.kill9();
    assert!(deleting.join().unwrap().is_err(), "the DELETE never got an answer");
    std::fs::remove_file(&hold).unwrap();
    s.start();
    wait_for("the deleted file's replica removed after the restart", &s, || {
        stored_at(&s, "alpha", "data").is_empty()
    });
    assert!(catalogue_entry(&s, &token, "data").is_none());
}

const PINNED_JOB: &str = "name = \"v2\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"echo new content > out.txt\"]\n\
                          outputs = [{ file = \"out.txt\", to = \"data\" }]\n[[components]]\nprocessors = 1\nsite = \"alpha\"\n";

/// A job at alpha writes a new version of the user's file `data` (whose replica is at beta):
/// the stage-out replaces the file, and beta's copy of the old content is no replica any more.
/// The daemon is SIGKILLed after that commit and before beta's copy was removed: after the
/// restart it is removed (before the fix it stayed for good), and the new version at alpha,
/// which the catalogue names, is kept.
#[test]
fn a_replaced_replica_is_removed_after_a_crash_between_commit_and_removal() {
    let _g = serial();
    let (mut s, token, hold) = server_holding_removals(&test_config(&[("alpha", 1), ("beta", 1)]));
    let (code, body) = upload(&s, &token, "data", "beta", b"old content\n");
    assert_eq!(code, 201, "{body}");
    let job = submit(&s, &token, PINNED_JOB);
    wait_at_hold(&s, &hold);
    let entry = catalogue_entry(&s, &token, "data").unwrap();
    assert_eq!(entry["replicas"], serde_json::json!(["alpha"]), "{entry}");
    assert_eq!(stored_at(&s, "beta", "data").len(), 1, "held before the removal");
    s.kill9();
    std::fs::remove_file(&hold).unwrap();
    s.start();
    let j = wait_final(&s, &token, job, Duration::from_secs(30));
    assert_eq!(j["state"], "succeeded", "{j}");
    wait_for("the old version's copy at beta removed after the restart", &s, || {
        stored_at(&s, "beta", "data").is_empty()
    });
    let at_alpha = stored_at(&s, "alpha", "data");
    assert_eq!(at_alpha.len(), 1);
    assert_eq!(std::fs::read(&at_alpha[0]).unwrap(), b"new content\n");
    let entry = catalogue_entry(&s, &token, "data").unwrap();
    assert_eq!(entry["replicas"], serde_json::json!(["alpha"]), "{entry}");
}

/// While a dropped replica's file is being removed, a new replica of the file at the same
/// site (the same storage path) is refused (409) rather than written and then removed under a
/// record that names it; once the removal is done it is stored and stays.
#[test]
fn a_path_being_removed_is_not_written_and_a_replica_stored_after_stays() {
    let _g = serial();
    let (s, token, hold) = server_holding_removals(&test_config(&[("alpha", 1), ("beta", 1)]));
    let (code, body) = upload(&s, &token, "data", "beta", b"old content\n");
    assert_eq!(code, 201, "{body}");
    let job = submit(&s, &token, PINNED_JOB);
    wait_at_hold(&s, &hold);
    let (code, body) = upload(&s, &token, "data", "beta", b"new content\n");
    assert_eq!(code, 409, "{body}");
    std::fs::remove_file(&hold).unwrap();
    let j = wait_final(&s, &token, job, Duration::from_secs(30));
    assert_eq!(j["state"], "succeeded", "{j}");
    wait_for("the old version's copy at beta removed", &s, || {
        stored_at(&s, "beta", "data").is_empty()
    });
    let (code, body) = upload(&s, &token, "data", "beta", b"new content\n");
    assert_eq!(code, 201, "{body}");
    std::thread::sleep(Duration::from_millis(1000));
    let at_beta = stored_at(&s, "beta", "data");
    assert_eq!(at_beta.len(), 1, "the new replica stays");
    assert_eq!(std::fs::read(&at_beta[0]).unwrap(), b"new content\n");
    let entry = catalogue_entry(&s, &token, "data").unwrap();
    assert_eq!(entry["replicas"], serde_json::json!(["alpha", "beta"]), "{entry}");
}

/// A dropped replica's file waits while a job at its site reads the file; a new replica of the
/// file stored at that site meanwhile (the same storage path) is named by a record again when
/// the removal comes: it is kept, and its pending removal just goes.
#[test]
fn a_pending_removal_never_removes_a_path_a_record_names_again() {
    let _g = serial();
    let mut s = TestServer::new(&test_config(&[("alpha", 1), ("beta", 1)]));
    let token = s.token("alice", false);
    s.start();
    let (code, body) = upload(&s, &token, "data", "beta", b"old content\n");
    assert_eq!(code, 201, "{body}");
    let reader = submit(
        &s,
        &token,
        "name = \"reader\"\nexecutable = \"/bin/sleep\"\narguments = [\"4\"]\ninputs = [\"data\"]\n\
         [[components]]\nprocessors = 1\nsite = \"beta\"\n",
    );
    wait_for("the reader running at beta", &s, || {
        get_job(&s, &token, reader).1["state"] == "running"
    });
    let writer = submit(&s, &token, PINNED_JOB);
    assert_eq!(wait_final(&s, &token, writer, Duration::from_secs(30))["state"], "succeeded");
    let entry = catalogue_entry(&s, &token, "data").unwrap();
    assert_eq!(entry["replicas"], serde_json::json!(["alpha"]), "{entry}");
    assert_eq!(stored_at(&s, "beta", "data").len(), 1, "kept while the reader at beta runs");
    // The new version stored at beta, at the path of the old copy still pending removal.
    let (code, body) = upload(&s, &token, "data", "beta", b"new content\n");
    assert_eq!(code, 201, "{body}");
    assert_eq!(wait_final(&s, &token, reader, Duration::from_secs(30))["state"], "succeeded");
    std::thread::sleep(Duration::from_millis(1500));
    let at_beta = stored_at(&s, "beta", "data");
    assert_eq!(at_beta.len(), 1, "the new replica at beta stays");
    assert_eq!(std::fs::read(&at_beta[0]).unwrap(), b"new content\n");
    let entry = catalogue_entry(&s, &token, "data").unwrap();
    assert_eq!(entry["replicas"], serde_json::json!(["alpha", "beta"]), "{entry}");
}

/// A stage-in's copy is in place at beta, not registered yet, when the daemon is SIGKILLed
/// (its job was cancelled meanwhile, so nothing stages the file there again): after the
/// restart the copy, which no record names, is removed (before, it stayed for good); the
/// replica at alpha stays.
#[test]
fn a_stage_ins_copy_not_registered_at_a_crash_is_removed_after_the_restart() {
    let _g = serial();
    let mut s = TestServer::new(&test_config(&[("alpha", 1), ("beta", 1)]));
    let token = s.token("alice", false);
    let hold = s.path().join("hold-stage-in");
    std::fs::write(&hold, "").unwrap();
    s.env.push(("KOALESCE_FAULT_STAGE_IN_HOLD", hold.clone()));
    s.start();
    let (code, body) = upload(&s, &token, "data", "alpha", b"content\n");
    assert_eq!(code, 201, "{body}");
    let job = submit(
        &s,
        &token,
        "name = \"reader\"\nexecutable = \"/bin/true\"\ninputs = [\"data\"]\n[[components]]\nprocessors = 1\nsite = \"beta\"\n",
    );
    wait_at_hold(&s, &hold);
    assert_eq!(stored_at(&s, "beta", "data").len(), 1, "the copy is in place");
    let (code, body) = http(&s.url, "POST", &format!("/api/v1/jobs/{job}/cancel"), Some(&token), None, b"").unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(wait_final(&s, &token, job, Duration::from_secs(30))["state"], "cancelled");
    s.kill9();
    std::fs::remove_file(&hold).unwrap();
    s.start();
    wait_for("the unregistered copy at beta removed after the restart", &s, || {
        stored_at(&s, "beta", "data").is_empty()
    });
    let entry = catalogue_entry(&s, &token, "data").unwrap();
    assert_eq!(entry["replicas"], serde_json::json!(["alpha"]), "{entry}");
    assert_eq!(stored_at(&s, "alpha", "data").len(), 1);
}

/// An upload's copy is in place at alpha, not registered yet, when the daemon is SIGKILLed
/// (`KOALESCE_FAULT_REGISTER_HOLD`): after the restart the copy, which no record names, is
/// removed (before, it stayed for good), and the file is not in the catalogue.
#[test]
fn an_uploads_copy_not_registered_at_a_crash_is_removed_after_the_restart() {
    let _g = serial();
    let mut s = TestServer::new(&test_config(&[("alpha", 1)]));
    let token = s.token("alice", false);
    let hold = s.path().join("hold-register");
    std::fs::write(&hold, "").unwrap();
    s.env.push(("KOALESCE_FAULT_REGISTER_HOLD", hold.clone()));
    s.start();
    let (url, t) = (s.url.clone(), token.clone());
    let uploading = std::thread::spawn(move || {
        agent()
            .put(&format!("{url}/api/v1/files/data?site=alpha"))
            .header("Authorization", &format!("Bearer {t}"))
            .send(&b"content\n"[..])
            .map(|r| r.status().as_u16())
    });
    wait_at_hold(&s, &hold);
    assert_eq!(stored_at(&s, "alpha", "data").len(), 1, "the copy is in place");
    s.kill9();
    assert!(uploading.join().unwrap().is_err(), "the upload never got an answer");
    std::fs::remove_file(&hold).unwrap();
    s.start();
    wait_for("the unregistered copy removed after the restart", &s, || {
        stored_at(&s, "alpha", "data").is_empty()
    });
    assert!(catalogue_entry(&s, &token, "data").is_none());
}

/// An upload refused after it claimed its storage path (over `files.max_upload_bytes`) has
/// that path's copy removed as the request ends. The same file sent again at once waits for
/// that removal (here held for 300 ms) and is stored; before, it was refused with 409 as
/// "another upload of this file to this site is under way" (`attacks_state` met it when its
/// requests came quickly one after another).
#[test]
fn a_file_sent_again_right_after_a_refused_upload_waits_for_its_removal() {
    let _g = serial();
    let config = format!("{}[files]\nmax_upload_bytes = 64\n", test_config(&[("alpha", 1)]));
    let (s, token, hold) = server_holding_removals(&config);
    let (code, body) = upload(&s, &token, "data", "alpha", &[b'x'; 100]);
    assert_eq!(code, 413, "{body}");
    wait_at_hold(&s, &hold);
    let release = {
        let hold = hold.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            std::fs::remove_file(&hold).unwrap();
        })
    };
    let (code, body) = upload(&s, &token, "data", "alpha", b"small\n");
    release.join().unwrap();
    assert_eq!(code, 201, "{body}");
    std::thread::sleep(Duration::from_millis(500));
    let at_alpha = stored_at(&s, "alpha", "data");
    assert_eq!(at_alpha.len(), 1, "{at_alpha:?}");
    assert_eq!(std::fs::read(&at_alpha[0]).unwrap(), b"small\n");
}

fn sqlite(db: &Path, sql: &str) -> String {
    let out = std::process::Command::new("sqlite3")
        .arg(db)
        .arg(sql)
        .output()
        .expect("sqlite3 (apt-get install sqlite3)");
    assert!(out.status.success(), "sqlite3 {sql}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Pending removals whose path is not koalesce's copy in the site's storage — a user's own
/// file, as a replica registered in place by a server from before the copies went into
/// storage names, and a path that climbs out of the storage with `..` — are dropped at the
/// start and the files stay (before, the first was removed); the copy in storage stays too.
#[test]
fn a_pending_removal_outside_the_sites_storage_leaves_the_file() {
    let _g = serial();
    let mut s = TestServer::new(&test_config(&[("alpha", 1)]));
    let token = s.token("alice", false);
    s.start();
    let (code, body) = upload(&s, &token, "data", "alpha", b"stored\n");
    assert_eq!(code, 201, "{body}");
    s.kill9();
    let stored = stored_at(&s, "alpha", "data");
    assert_eq!(stored.len(), 1);
    let home = s.path().join("alice-home");
    std::fs::create_dir_all(&home).unwrap();
    let own = home.join("results.dat");
    std::fs::write(&own, "precious\n").unwrap();
    let climbing = stored[0]
        .parent()
        .unwrap()
        .join("../../../../../../../..")
        .join(own.strip_prefix("/").unwrap());
    assert!(climbing.exists(), "{}", climbing.display());
    let db = s.data_dir.join("koalesce.db");
    sqlite(
        &db,
        &format!(
            "INSERT INTO removals (name, site, path) VALUES ('data', 'alpha', '{}'), ('data', 'alpha', '{}')",
            own.display(),
            climbing.display()
        ),
    );
    s.start();
    wait_for("the pending removals dropped", &s, || {
        sqlite(&db, "SELECT COUNT(*) FROM removals") == "0"
    });
    assert_eq!(std::fs::read_to_string(&own).unwrap(), "precious\n");
    assert_eq!(std::fs::read(&stored[0]).unwrap(), b"stored\n");
    assert!(s.log_tail().contains("outside the site's storage"), "{}", s.log_tail());
}
