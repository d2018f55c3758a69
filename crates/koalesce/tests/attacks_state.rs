//! Attack tests, part 2 (issue 8): file registration and owners (item 2), ids and launch
//! directories after lost rows (3), blame and bans (5, 7), pinned sites across a config change
//! (8), pages and quotas (9), and the port held during recovery (12). Each plays the attack
//! against a real `koalesce server` on loopback (as root, as CI runs) and checks it fails
//! while ordinary use keeps working.

mod attack_common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use attack_common::*;
use serde_json::Value;

/// A grid of local sites, jobs as root, prompt scans; `scheduler`: more `[scheduler]` keys;
/// `tables`: more tables at the end.
fn grid(sites: &[(&str, u32)], scheduler: &str, tables: &str) -> String {
    let mut s = String::from("allow_root_jobs = true\npoll_interval_ms = 50\n");
    for (n, p) in sites {
        s += &format!("[[sites]]\nname = \"{n}\"\nprocessors = {p}\n");
    }
    s += &format!(
        "[scheduler]\nplace_on_submit = true\nmin_claim_retry_ms = 100\n\
         scan_interval = {{ kind = \"fixed\", interval_ms = 100 }}\n{scheduler}\n\
         [users]\n\"*\" = \"root\"\n{tables}\n"
    );
    s
}

fn sqlite(db: &Path, sql: &str) -> String {
    let out = Command::new("sqlite3").arg(db).arg(sql).output().expect("sqlite3 runs");
    assert!(out.status.success(), "sqlite3 {sql}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn register_path(s: &Server, token: &str, name: &str, path: &Path) -> (u16, String) {
    let body = serde_json::json!({"name": name, "path": path, "site": "s1"}).to_string();
    s.request("POST", "/api/v1/files", Some(token), body.as_bytes())
}

fn files(s: &Server, token: &str) -> Vec<Value> {
    let (code, body) = s.request("GET", "/api/v1/files", Some(token), b"");
    assert_eq!(code, 200, "{body}");
    json(&body).as_array().unwrap().clone()
}

fn file<'a>(list: &'a [Value], name: &str) -> Option<&'a Value> {
    list.iter().find(|f| f["name"] == name)
}

/// The storage files of a site whose names start with `prefix`.
fn stored(s: &Server, site: &str, prefix: &str) -> Vec<PathBuf> {
    std::fs::read_dir(s.data.join("sites").join(site).join("storage"))
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// A shell job pinned to `site`.
fn pinned(name: &str, script: &str, site: &str, extra: &str) -> String {
    shell_job(name, script, &[], extra).replace("processors = 1\n", &format!("processors = 1\nsite = \"{site}\"\n"))
}

fn site<'a>(sites: &'a Value, name: &str) -> &'a Value {
    sites.as_array().unwrap().iter().find(|x| x["name"] == name).unwrap()
}

fn sites(s: &Server, token: &str, query: &str) -> Value {
    let (code, body) = s.request("GET", &format!("/api/v1/sites{query}"), Some(token), b"");
    assert_eq!(code, 200, "{body}");
    json(&body)
}

// ----- item 2: files ------------------------------------------------------------------------

#[test]
fn registering_files_reads_no_server_path_it_should_not_and_files_have_owners() {
    let _g = serial();
    require_root();
    let mut s = Server::new("");
    let share = s.path().join("alice-share");
    std::fs::create_dir_all(&share).unwrap();
    std::fs::write(share.join("ok.dat"), b"shared data").unwrap();
    std::os::unix::fs::symlink("/etc/shadow", share.join("shadow")).unwrap();
    std::os::unix::fs::symlink("/etc", share.join("etc")).unwrap();
    std::fs::write(
        &s.config,
        grid(
            &[("s1", 4), ("s2", 4)],
            "",
            &format!("[files.import_dirs]\nalice = [{}]\n", q(&share.display().to_string())),
        ),
    )
    .unwrap();
    let (alice, bob, admin) = (
        s.token("alice", false, None),
        s.token("bob", false, None),
        s.token("boss", true, None),
    );
    s.start();
    // The live database, linked into alice's directory (as a user who could make such a link would).
    std::fs::hard_link(s.data.join("koalesce.db"), share.join("db-link")).unwrap();

    // A user may not make the server read a path outside the directories given to them.
    for (tok, path) in [
        (&alice, PathBuf::from("/etc/shadow")),
        (&alice, "/etc/hostname".into()),
        (&bob, share.join("ok.dat")),
    ] {
        let (code, body) = register_path(&s, tok, "x", &path);
        assert_eq!(code, 403, "{}: {body}", path.display());
        assert!(body.contains("import_dirs") && body.contains("Upload"), "{body}");
    }
    // Inside them: a regular file is registered, owned by alice...
    let (code, body) = register_path(&s, &alice, "ok.dat", &share.join("ok.dat"));
    assert_eq!(code, 201, "{body}");
    assert_eq!(json(&body)["owner"], "alice", "{body}");
    // ... but never through a link, past '..', or a database file, whoever asks.
    for (tok, path, why) in [
        (&alice, share.join("shadow"), "symbolic link"),
        (&alice, share.join("etc/shadow"), "symbolic link"),
        (&alice, share.join("../../../etc/shadow"), "'..'"),
        (&alice, share.join("db-link"), "database"),
        (&admin, share.join("db-link"), "database"),
        (&admin, s.data.join("koalesce.db"), "data directory"),
        (&admin, s.data.join("koalesce.db-wal"), "data directory"),
        (&admin, "/proc/self/environ".into(), "/proc"),
        (&admin, "/sys/kernel/notes".into(), "/sys"),
        (&admin, "/dev/zero".into(), "/dev"),
    ] {
        let (code, body) = register_path(&s, tok, "evil", &path);
        assert_eq!(code, 422, "{}: {body}", path.display());
        assert!(body.contains(why), "{}: {body}", path.display());
    }
    assert!(file(&files(&s, &alice), "evil").is_none());
    assert!(stored(&s, "s1", "evil").is_empty());
    // The database kept its locks: a token made next to the running server, a job
    // acknowledged, the server killed: the job is still there after the restart.
    let late = s.token("late", false, None);
    let id = s.submit(&late, &shell_job("durable", "true", &[], ""));
    s.kill();
    assert!(s.data.join("koalesce.db-wal").exists(), "the live WAL was deleted");
    s.start();
    assert_eq!(s.job(&late, id)["name"], "durable");

    // Uploads: owned by whoever uploads; only the owner or an admin deletes or adds replicas.
    let (code, body) = s.upload(&alice, "mine.dat", "s1", b"alice's data");
    assert_eq!(code, 201, "{body}");
    assert_eq!(json(&body)["owner"], "alice");
    let (code, body) = s.upload(&bob, "mine.dat", "s2", b"alice's data");
    assert_eq!(code, 403, "{body}");
    let (code, body) = s.request("DELETE", "/api/v1/files/mine.dat", Some(&bob), b"");
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("owner"), "{body}");
    assert_eq!(s.request("DELETE", "/api/v1/files/mine.dat", Some(&alice), b"").0, 204);
    assert_eq!(s.request("DELETE", "/api/v1/files/ok.dat", Some(&admin), b"").0, 204);
    // A damaged upload (its checksum is not the one sent) is not registered.
    let (code, body) = koalesce_server::http_request(
        s.addr.unwrap(),
        "PUT",
        &format!("/api/v1/files/sum.dat?site=s1&sha256={}", "0".repeat(64)),
        Some(&alice),
        Some("application/octet-stream"),
        b"content",
    )
    .unwrap();
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("checksum"), "{body}");
    assert!(file(&files(&s, &alice), "sum.dat").is_none());
    // `<job-id>/` names are the job's: nobody squats them, by upload or by another job's output.
    let (code, body) = s.upload(&alice, "4242/result.txt", "s1", b"squat");
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("reserved"), "{body}");
    let (code, body) = s.upload(&alice, "shared.dat", "s1", b"alice's shared file");
    assert_eq!(code, 201, "{body}");
    let sha = json(&body)["sha256"].clone();
    let outputs = "outputs = [{ file = \"o.txt\", to = \"shared.dat\" }, { file = \"o.txt\", to = \"4242/result.txt\" }, \"o.txt\"]";
    let id = s.submit(&bob, &shell_job("squatter", "echo bob > o.txt", &[], outputs));
    let own = format!("{id}/o.txt");
    wait_for("bob's own output", 20, || file(&files(&s, &bob), &own).is_some());
    let j = s.wait_state(&bob, id, &["succeeded"], 20);
    let failure = j["failure"].as_str().unwrap_or("");
    assert!(
        failure.contains("another user's file") && failure.contains("reserved for the outputs of job 4242"),
        "{j}"
    );
    let list = files(&s, &bob);
    assert_eq!(file(&list, "shared.dat").unwrap()["sha256"], sha, "alice's file was overwritten");
    assert_eq!(file(&list, "shared.dat").unwrap()["owner"], "alice");
    assert!(file(&list, "4242/result.txt").is_none());
    assert_eq!(file(&list, &own).unwrap()["owner"], "bob");
}

// ----- item 3: ids and directories ------------------------------------------------------------

#[test]
fn a_new_job_never_takes_the_outcome_of_an_old_one_after_lost_rows() {
    let _g = serial();
    require_root();
    let mut s = Server::new(&grid(&[("s1", 4)], "", ""));
    let alice = s.token("alice", false, None);
    s.start();
    let first = s.submit(&alice, &shell_job("first", "echo first", &[], ""));
    let j = s.wait_state(&alice, first, &["succeeded"], 20);
    let first_dir = record_dir(&j);
    s.kill();
    // The job's rows are lost (a purge, a restored backup): its id must not come round again.
    let db = s.data.join("koalesce.db");
    sqlite(&db, "DELETE FROM jobs; DELETE FROM launches; DELETE FROM progress;");
    s.start();
    let second = s.submit(&alice, &shell_job("second", "echo second; exit 7", &[], ""));
    assert_ne!(second, first, "a lost job's id was given again");
    let j = s.wait_state(&alice, second, &["succeeded", "failed"], 20);
    assert_eq!(
        (j["state"].as_str(), j["components"][0]["exit_code"].as_i64()),
        (Some("failed"), Some(7)),
        "{j}"
    );
    s.kill();
    // Everything lost, the counter too: the id comes round, but the old launch directory is
    // not reused and its exit record is not taken for the new job's.
    sqlite(
        &db,
        "DELETE FROM jobs; DELETE FROM launches; DELETE FROM progress; DELETE FROM counters;",
    );
    s.start();
    let third = s.submit(&alice, &shell_job("third", "echo third; exit 7", &[], ""));
    assert_eq!(third, first, "the test needs the id to come round");
    let j = s.wait_state(&alice, third, &["succeeded", "failed"], 30);
    assert_eq!(j["state"], "failed", "the new job was given the old one's outcome: {j}");
    assert_eq!(j["components"][0]["exit_code"], 7, "{j}");
    let dir = record_dir(&j);
    assert_ne!(dir, first_dir);
    assert_eq!(std::fs::read_to_string(dir.join("stdout")).unwrap(), "third\n");
    assert_eq!(std::fs::read_to_string(first_dir.join("stdout")).unwrap(), "first\n");
}

/// Item 3, the exit record bound to its launch: an `exit.json` of another launch (a stale one
/// from a reused directory) or a forged one (no nonce) in a running component's directory is
/// not believed, neither by the running server nor by one that recovers the job after a crash;
/// the job ends with its own outcome.
#[test]
fn a_stale_or_forged_exit_record_never_makes_a_job_succeed() {
    let _g = serial();
    require_root();
    let mut s = Server::new(&grid(&[("s1", 4)], "", ""));
    let alice = s.token("alice", false, None);
    s.start();
    let old = s.submit(&alice, &shell_job("old", "echo old", &[], ""));
    let stale = std::fs::read(record_dir(&s.wait_state(&alice, old, &["succeeded"], 20)).join("exit.json")).unwrap();
    let forged = br#"{"exit_code":0,"signal":null,"spawn_error":null,"finished_ms":1}"#.to_vec();
    for (record, restart) in [(&stale, false), (&forged, false), (&stale, true), (&forged, true)] {
        let id = s.submit(&alice, &shell_job("victim", "touch started; sleep 3; exit 7", &[], ""));
        let j = s.wait_state(&alice, id, &["running"], 20);
        let dir = record_dir(&j);
        wait_for("the program to start", 20, || dir.join("work/started").exists());
        if restart {
            s.kill();
        }
        std::fs::write(dir.join("exit.json"), record).unwrap();
        if restart {
            s.start();
        }
        let j = s.wait_state(&alice, id, &["succeeded", "failed"], 30);
        assert_eq!(
            (j["state"].as_str(), j["components"][0]["exit_code"].as_i64()),
            (Some("failed"), Some(7)),
            "a record of another launch was believed (restart: {restart}): {j}"
        );
    }
}

// ----- items 5 and 7: blame, quarantine, bans -------------------------------------------------

/// The storage file of a registered replica.
fn replica_path(s: &Server, site: &str, name: &str) -> PathBuf {
    let found: Vec<PathBuf> = stored(s, site, &format!("{name}."))
        .into_iter()
        .filter(|p| !p.to_string_lossy().contains(".part.") && !p.to_string_lossy().ends_with(".quarantined"))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found[0].clone()
}

/// Overwrites a file with other bytes of the same size.
fn corrupt(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    for b in &mut bytes {
        *b ^= 0x5a;
    }
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_corrupt_replica_is_quarantined_and_no_site_is_blamed_for_it() {
    let _g = serial();
    require_root();
    // One soft error blacklists a site: any blame would show.
    // (No scrub: the jobs must find the corruption themselves.)
    let mut s = Server::new(&grid(
        &[("s1", 2), ("s2", 2)],
        "blacklist_threshold = 1",
        "[files]\nscrub_interval_ms = 0",
    ));
    let alice = s.token("alice", false, None);
    s.start();
    // Stage-in from a corrupt source replica: the source is quarantined, the destination
    // (which did nothing wrong) is not blamed.
    assert_eq!(s.upload(&alice, "in.dat", "s1", &[7u8; 65536]).0, 201);
    let src = replica_path(&s, "s1", "in.dat");
    corrupt(&src);
    let job = pinned(
        "reader",
        "echo ran; cat \"$KOALESCE_INPUT_IN_DAT\" >/dev/null",
        "s2",
        "inputs = [\"in.dat\"]",
    );
    let id = s.submit(&alice, &job);
    wait_for("the corrupt replica to be found", 20, || {
        s.job(&alice, id)["failure"].as_str().is_some_and(|f| f.contains("corrupt"))
    });
    let all = sites(&s, &alice, "");
    assert_eq!(site(&all, "s2")["blacklisted"], false, "the destination was blamed: {all}");
    assert_eq!(site(&all, "s1")["blacklisted"], false, "{all}");
    assert_eq!(file(&files(&s, &alice), "in.dat").unwrap()["replicas"], serde_json::json!([]));
    assert!(!src.exists() && PathBuf::from(format!("{}.quarantined", src.display())).exists());
    assert!(stored(&s, "s2", "in.dat").is_empty(), "a corrupt copy landed");
    s.request("POST", &format!("/api/v1/jobs/{id}/cancel"), Some(&alice), b"");
    // A replica corrupted where it is used is checked before the job starts, and never used.
    assert_eq!(s.upload(&alice, "own.dat", "s1", &[9u8; 4096]).0, 201);
    let own = replica_path(&s, "s1", "own.dat");
    corrupt(&own);
    let job = pinned("user", "echo ran; cat \"$KOALESCE_INPUT_OWN_DAT\"", "s1", "inputs = [\"own.dat\"]");
    let id = s.submit(&alice, &job);
    wait_for("the corrupt replica to be found", 20, || {
        s.job(&alice, id)["failure"].as_str().is_some_and(|f| f.contains("corrupt"))
    });
    let j = s.job(&alice, id);
    assert_ne!(j["state"], "succeeded", "{j}");
    let ran = j["components"][0]["stdout"]
        .as_str()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    assert!(!ran.contains("ran"), "the job ran on a corrupt input: {j}");
    assert_eq!(site(&sites(&s, &alice, ""), "s1")["blacklisted"], false);
    assert!(PathBuf::from(format!("{}.quarantined", own.display())).exists());
    s.request("POST", &format!("/api/v1/jobs/{id}/cancel"), Some(&alice), b"");
}

/// Item 7, replicas no job uses: the scrub re-checks them at a bounded rate and quarantines a
/// corrupt one (out of the catalogue, counted in /metrics) before any job needs it; intact
/// replicas and those of files a queued job is about to use are left alone.
#[test]
fn the_scrub_quarantines_a_corrupt_replica_no_job_uses() {
    let _g = serial();
    require_root();
    let mut s = Server::new(&grid(&[("s1", 2)], "", "[files]\nscrub_interval_ms = 100\nscrub_bytes = 4096"));
    let alice = s.token("alice", false, None);
    s.start();
    for (name, byte) in [("cold.dat", 1u8), ("fine.dat", 2), ("zzz.dat", 3)] {
        assert_eq!(s.upload(&alice, name, "s1", &[byte; 8192]).0, 201);
    }
    let metric = |name: &str| -> u64 {
        let (_, body) = s.request("GET", "/metrics", None, b"");
        body.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /metrics: {body}"))
    };
    // A full round over the intact replicas (8 KiB each, 4 KiB per round: one per round).
    wait_for("a round of the scrub", 20, || metric("koalesce_replica_checks_total") >= 3);
    let cold = replica_path(&s, "s1", "cold.dat");
    corrupt(&cold);
    wait_for("the scrub to quarantine the corrupt replica", 20, || {
        file(&files(&s, &alice), "cold.dat").is_some_and(|f| f["replicas"] == serde_json::json!([]))
    });
    assert!(!cold.exists() && PathBuf::from(format!("{}.quarantined", cold.display())).exists());
    assert_eq!(metric("koalesce_replicas_quarantined_total"), 1);
    for name in ["fine.dat", "zzz.dat"] {
        assert_eq!(
            file(&files(&s, &alice), name).unwrap()["replicas"],
            serde_json::json!(["s1"]),
            "{name}"
        );
    }
    let sites = sites(&s, &alice, "");
    assert_eq!(site(&sites, "s1")["blacklisted"], false, "{sites}");
}

#[test]
fn bans_expire_with_back_off_and_an_admin_readmits_a_site() {
    let _g = serial();
    require_root();
    let mut s = Server::new(&grid(
        &[("s1", 2), ("s2", 2)],
        "blacklist_threshold = 1\nblacklist_expiry_ms = 1500",
        "",
    ));
    let (alice, admin) = (s.token("alice", false, None), s.token("boss", true, None));
    s.start();
    // A job's own failure is the job's: its site is not blamed.
    let id = s.submit(&alice, &pinned("fails", "exit 3", "s1", ""));
    assert_eq!(s.wait_state(&alice, id, &["failed"], 20)["components"][0]["exit_code"], 3);
    assert_eq!(site(&sites(&s, &alice, ""), "s1")["blacklisted"], false);
    // A real fault of s2: it cannot store anything (its storage is not a directory).
    assert_eq!(s.upload(&alice, "in.dat", "s1", b"input").0, 201);
    let storage = s.data.join("sites/s2/storage");
    std::fs::remove_dir_all(&storage).unwrap();
    std::fs::write(&storage, b"not a directory").unwrap();
    let id = s.submit(&alice, &pinned("needs-s2", "true", "s2", "inputs = [\"in.dat\"]"));
    // None also while `?blacklisted=true` lists no s2 yet (the first poll may come before the
    // ban; `site` would panic on the empty list).
    let until = |v: &Value| v.as_array()?.iter().find(|x| x["name"] == "s2")?["blacklisted_until_ms"].as_u64();
    let t0 = Instant::now();
    let first = loop {
        let v = sites(&s, &alice, "?blacklisted=true");
        if let Some(u) = until(&v) {
            assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
            break u;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "s2 never blacklisted:\n{}", s.log());
        std::thread::sleep(Duration::from_millis(20));
    };
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    assert!(first <= now_ms() + 1500, "the first ban lasts blacklist_expiry_ms");
    let (code, out, err) = s.cli(&alice, &["sites", "--blacklisted"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("s2") && !out.contains("s1") && out.contains("yes, until"), "{out}");
    // It comes back by itself, fails again, and is banned twice as long.
    let t0 = Instant::now();
    let second = loop {
        if let Some(u) = until(&sites(&s, &alice, "")).filter(|u| *u != first) {
            break u;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "s2 not banned again:\n{}", s.log());
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        second >= first + 3000,
        "no back-off: first ban until {first}, second until {second}"
    );
    // Only an admin re-admits, at once.
    s.request("POST", &format!("/api/v1/jobs/{id}/cancel"), Some(&alice), b"");
    let (code, _, err) = s.cli(&alice, &["sites", "readmit", "s2"]);
    assert!(code != 0 && err.contains("403"), "{err}");
    let (code, out, err) = s.cli(&admin, &["sites", "readmit", "s2"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("re-admitted s2"), "{out}");
    let v = sites(&s, &alice, "");
    assert_eq!(site(&v, "s2")["blacklisted"], false, "{v}");
    assert!(sites(&s, &alice, "?blacklisted=true").as_array().unwrap().is_empty());
}

// ----- item 8: pinned sites by name -----------------------------------------------------------

#[test]
fn a_job_pinned_to_a_site_stays_there_when_the_config_is_reordered() {
    let _g = serial();
    require_root();
    let config = |order: &[&str], scan: &str| {
        let sites: Vec<(&str, u32)> = order.iter().map(|n| (*n, 2)).collect();
        grid(&sites, "", "")
            .replace("place_on_submit = true", "place_on_submit = false")
            .replace("interval_ms = 100", scan)
    };
    let mut s = Server::new(&config(&["s1", "s2", "s3"], "interval_ms = 3600000"));
    let alice = s.token("alice", false, None);
    s.start();
    let id = s.submit(&alice, &pinned("pinned", "echo here", "s2", ""));
    let gone = s.submit(&alice, &pinned("pinned-to-s3", "echo here", "s3", ""));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(s.job(&alice, id)["state"], "queued", "the test needs the job to wait");
    s.kill();
    // The administrator lists the sites in another order, and drops one.
    std::fs::write(&s.config, config(&["s2", "s1"], "interval_ms = 100")).unwrap();
    s.start();
    let j = s.job(&alice, gone);
    assert_eq!(
        (j["state"].as_str(), j["name"].as_str()),
        (Some("failed"), Some("pinned-to-s3")),
        "{j}"
    );
    assert!(j["failure"].as_str().unwrap_or("").contains("site 's3' does not exist"), "{j}");
    let j = s.wait_state(&alice, id, &["succeeded", "failed"], 20);
    assert_eq!(j["state"], "succeeded", "{j}");
    assert_eq!(j["sites"], serde_json::json!(["s2"]), "the job moved to another site: {j}");
    let spec = sqlite(&s.data.join("koalesce.db"), &format!("SELECT spec FROM jobs WHERE id = {id}"));
    assert!(spec.contains("\"fixed_site\":\"s2\""), "{spec}");
}

// ----- item 9: pages and quotas --------------------------------------------------------------

#[test]
fn job_lists_come_in_pages_and_quotas_answer_429() {
    let _g = serial();
    require_root();
    let mut s = Server::new(&grid(
        &[("s1", 8)],
        "",
        "[quotas]\nmax_stored_bytes = 1000\n[quotas.users.alice]\nmax_queued_jobs = 2\n",
    ));
    let (alice, bob) = (s.token("alice", false, None), s.token("bob", false, None));
    s.start();
    let ids: Vec<u64> = (0..25)
        .map(|i| s.submit(&bob, &shell_job(&format!("j{i}"), "true", &[], "")))
        .collect();
    let page = |args: &[&str]| {
        let mut all = vec!["jobs", "--json"];
        all.extend_from_slice(args);
        let (code, out, err) = s.cli(&bob, &all);
        assert_eq!(code, 0, "{err}");
        let got: Vec<u64> = json(&out).as_array().unwrap().iter().map(|j| j["id"].as_u64().unwrap()).collect();
        let next = err
            .lines()
            .find_map(|l| l.strip_prefix("(more jobs: koalesce jobs --after "))
            .and_then(|n| n.split_whitespace().next())
            .map(str::to_string);
        (got, next)
    };
    let (p1, next) = page(&["--limit", "10"]);
    assert_eq!(p1, ids[..10], "first page");
    let next = next.expect("a cursor after a full page");
    let (p2, next) = page(&["--limit", "10", "--after", &next]);
    assert_eq!(p2, ids[10..20]);
    let (p3, next) = page(&["--limit", "10", "--after", &next.unwrap()]);
    assert_eq!((p3.as_slice(), next), (&ids[20..], None));
    // Without --limit the client walks every page.
    assert_eq!(page(&[]).0, ids);
    // No request gets an unbounded list: without `limit` a page of the default size, and a
    // `Link: rel="next"` to the rest; the client follows the pages.
    let carol = s.token("carol", false, None);
    let held: Vec<u64> = (0..1001)
        .map(|i| {
            let (code, body) = s.request(
                "POST",
                "/api/v1/jobs?hold=true",
                Some(&carol),
                shell_job(&format!("h{i}"), "true", &[], "").as_bytes(),
            );
            assert_eq!(code, 201, "{body}");
            json(&body)["id"].as_u64().unwrap()
        })
        .collect();
    let get = |path: &str| {
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let mut r = agent
            .get(&format!("http://{}{path}", s.addr.unwrap()))
            .header("Authorization", &format!("Bearer {carol}"))
            .call()
            .unwrap();
        let link = r.headers().get("link").map(|v| v.to_str().unwrap().to_string());
        let ids: Vec<u64> = json(&r.body_mut().read_to_string().unwrap())
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_u64().unwrap())
            .collect();
        (ids, link)
    };
    let (first, link) = get("/api/v1/jobs?state=held");
    assert_eq!(first, held[..1000], "the default page");
    let link = link.expect("a link to the next page");
    let next = link.strip_prefix('<').and_then(|l| l.split_once(">; rel=\"next\"")).expect(&link).0;
    assert!(
        next.contains("state=held") && next.contains(&format!("after={}", held[999])),
        "{next}"
    );
    assert_eq!(get(next), (held[1000..].to_vec(), None), "the last page has no next");
    let (code, out, err) = s.cli(&carol, &["jobs", "--json", "--state", "held"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out).as_array().unwrap().len(), 1001, "the client follows every page");
    // The file catalogue comes in pages too (cursor: the last name, percent-encoded).
    for name in ["p 1", "p&2", "p3"] {
        assert_eq!(s.upload(&carol, name, "s1", b"x").0, 201);
    }
    let names = |path: &str| {
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let mut r = agent
            .get(&format!("http://{}{path}", s.addr.unwrap()))
            .header("Authorization", &format!("Bearer {carol}"))
            .call()
            .unwrap();
        let link = r.headers().get("link").map(|v| v.to_str().unwrap().to_string());
        let got: Vec<String> = json(&r.body_mut().read_to_string().unwrap())
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap().to_string())
            .collect();
        (got, link)
    };
    let (first, link) = names("/api/v1/files?limit=2");
    assert_eq!(first, ["p 1", "p&2"]);
    let link = link.expect("a link to the next page");
    let next = link.strip_prefix('<').and_then(|l| l.split_once(">; rel=\"next\"")).expect(&link).0;
    assert_eq!(names(next), (vec!["p3".to_string()], None));
    assert_eq!(s.request("GET", "/api/v1/files?limit=10001", Some(&carol), b"").0, 422);
    for bad in ["limit=0", "limit=10001", "limit=100001"] {
        let (code, body) = s.request("GET", &format!("/api/v1/jobs?{bad}"), Some(&bob), b"");
        assert_eq!(code, 422, "{body}");
    }
    // Jobs that have not ended: alice may have 2, bob is not limited.
    let a1 = s.submit(&alice, &shell_job("a1", "sleep 30", &[], ""));
    s.submit(&alice, &shell_job("a2", "sleep 30", &[], ""));
    let (code, body) = s.request("POST", "/api/v1/jobs", Some(&alice), shell_job("a3", "true", &[], "").as_bytes());
    assert_eq!(code, 429, "{body}");
    assert!(body.contains("quota") && body.contains("at most 2"), "{body}");
    s.submit(&bob, &shell_job("b", "true", &[], ""));
    assert_eq!(s.request("POST", &format!("/api/v1/jobs/{a1}/cancel"), Some(&alice), b"").0, 200);
    s.wait_state(&alice, a1, &["cancelled"], 10);
    let a3 = s.submit(&alice, &shell_job("a3", "true", &[], ""));
    s.wait_state(&alice, a3, &["succeeded"], 20);
    // Stored bytes: 1000 each.
    assert_eq!(s.upload(&alice, "a.dat", "s1", &[1u8; 600]).0, 201);
    let (code, body) = s.upload(&alice, "b.dat", "s1", &[2u8; 600]);
    assert_eq!(code, 429, "{body}");
    assert!(body.contains("bytes of stored files"), "{body}");
    assert!(file(&files(&s, &alice), "b.dat").is_none());
    assert!(stored(&s, "s1", "b.dat").is_empty());
    assert_eq!(s.upload(&bob, "b.dat", "s1", &[2u8; 600]).0, 201);
    // A job's outputs count too.
    let id = s.submit(
        &alice,
        &shell_job("big", "head -c 600 /dev/zero > big.out", &[], "outputs = [\"big.out\"]"),
    );
    wait_for("the refused output", 20, || {
        s.job(&alice, id)["failure"]
            .as_str()
            .is_some_and(|f| f.contains("bytes of stored files"))
    });
    assert!(file(&files(&s, &alice), &format!("{id}/big.out")).is_none());
    for tok in [&alice, &bob] {
        let (_, body) = s.request("GET", "/api/v1/jobs", Some(tok), b"");
        for j in json(&body).as_array().unwrap() {
            if j["state"] == "running" || j["state"] == "queued" {
                s.request("POST", &format!("/api/v1/jobs/{}/cancel", j["id"]), Some(tok), b"");
            }
        }
    }
}

// ----- item 12: the port before recovery ------------------------------------------------------

#[test]
fn the_port_is_held_while_the_state_is_recovered() {
    let _g = serial();
    require_root();
    let mut s = Server::new(
        &grid(&[("s1", 2)], "", "")
            .replace("place_on_submit = true", "place_on_submit = false")
            .replace("interval_ms = 100", "interval_ms = 3600000"),
    );
    let alice = s.token("alice", false, None);
    s.start();
    let id = s.submit(&alice, &shell_job("queued", "true", &[], ""));
    s.kill();
    // A large queue makes recovery take a while.
    sqlite(
        &s.data.join("koalesce.db"),
        &format!(
            "WITH RECURSIVE n(x) AS (SELECT {} UNION ALL SELECT x + 1 FROM n WHERE x < 2000) \
             INSERT INTO jobs (id, user, name, description, spec, state, core, meta, detail, submitted_ms) \
             SELECT x, user, name, description, spec, state, core, meta, detail, submitted_ms FROM n, jobs WHERE jobs.id = {id};",
            id + 1
        ),
    );
    s.spawn();
    let addr_file = s.data.join("server.addr");
    let t0 = Instant::now();
    while !addr_file.exists() {
        if let Some(st) = s.child.as_mut().unwrap().try_wait().unwrap() {
            panic!("server exited ({st}):\n{}", s.log());
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no address:\n{}", s.log());
        std::thread::sleep(Duration::from_millis(2));
    }
    // The address is there while recovery still runs: the port is this server's already, and
    // nobody else can take it to pose as the server.
    let log = s.log();
    assert!(!log.contains("state recovered"), "the port was bound only after recovery:\n{log}");
    let addr: std::net::SocketAddr = std::fs::read_to_string(&addr_file).unwrap().trim().parse().unwrap();
    let impostor = std::net::TcpListener::bind(addr);
    assert!(impostor.is_err(), "another process could take the port during recovery");
    // A request made meanwhile is answered once the state is back.
    let started = Instant::now();
    s.addr = Some(addr);
    let (code, body) = s.request("GET", "/api/v1/jobs?limit=5", Some(&alice), b"");
    assert_eq!(code, 200, "{body}");
    assert_eq!(json(&body).as_array().unwrap().len(), 5);
    assert!(s.log().contains("state recovered"), "answered before recovery ended");
    eprintln!("request during recovery answered after {:?}", started.elapsed());
    s.wait_ready();
}
