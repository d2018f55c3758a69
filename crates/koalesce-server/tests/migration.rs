//! A data dir written by the first schema (version 0: the daemon's copy of every job in one
//! `record` column) is migrated when a server opens it: ended jobs are served as they were,
//! a queued job runs, and the database says it is at the current schema version.

mod common;

use common::*;
use koalesce_core::model::Timeline;
use koalesce_server::jobdesc::JobDescription;
use koalesce_server::store;
use rusqlite::{params, Connection};
use serde_json::json;

/// The first schema, as the daemon created it before versioning.
const SCHEMA_V0: &str = r#"
CREATE TABLE jobs (id INTEGER PRIMARY KEY, user TEXT NOT NULL, name TEXT NOT NULL, description TEXT NOT NULL,
    spec TEXT NOT NULL, state TEXT NOT NULL, record TEXT NOT NULL, submitted_ms INTEGER NOT NULL);
CREATE TABLE tokens (hash TEXT PRIMARY KEY, user TEXT NOT NULL, admin INTEGER NOT NULL, created_ms INTEGER NOT NULL);
CREATE TABLE files (name TEXT PRIMARY KEY, size_bytes INTEGER NOT NULL, sha256 TEXT NOT NULL);
CREATE TABLE replicas (name TEXT NOT NULL, site TEXT NOT NULL, path TEXT NOT NULL, PRIMARY KEY (name, site));
CREATE TABLE progress (id INTEGER PRIMARY KEY, placement_tries INTEGER NOT NULL, claiming_tries INTEGER NOT NULL,
    error_resubmissions INTEGER NOT NULL, priority TEXT NOT NULL);
CREATE TABLE launches (job INTEGER NOT NULL, attempt INTEGER NOT NULL, component INTEGER NOT NULL, site TEXT NOT NULL,
    processors INTEGER NOT NULL, dir TEXT NOT NULL, done INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (job, attempt, component));
"#;

fn legacy_row(conn: &Connection, id: i64, state: &str, toml: &str, submitted: u64, finished: Option<u64>) {
    let desc = JobDescription::parse(toml).unwrap();
    let spec = desc.to_spec(|n| (n == "vu").then_some(koalesce_core::SiteId(0))).unwrap();
    let timeline = Timeline {
        submitted,
        queued: submitted,
        placed: finished.map(|_| submitted + 10),
        started: finished.map(|_| submitted + 20),
        finished,
        ..Timeline::default()
    };
    let record = json!({
        "id": id, "user": "alice", "name": desc.name, "desc": desc, "state": {"state": state},
        "priority": "high", "failure": null, "submitted_ms": submitted, "started_ms": timeline.started,
        "finished_ms": finished, "exit_ok": finished.map(|_| true), "placement_tries": 1, "claiming_tries": 1,
        "error_resubmissions": 0, "attempt": finished.map_or(0, |_| 1), "timeline": timeline,
        "components": [{"index": 0, "processors": 1, "site": finished.map(|_| "vu"),
                        "state": if finished.is_some() { "exited" } else { "unplaced" },
                        "exit_code": finished.map(|_| 0), "stdout": null, "stderr": null, "dir": null}],
        "outputs": []
    });
    conn.execute(
        "INSERT INTO jobs (id, user, name, description, spec, state, record, submitted_ms) VALUES (?1, 'alice', ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            id,
            desc.name,
            toml,
            serde_json::to_string(&spec).unwrap(),
            state,
            record.to_string(),
            submitted as i64
        ],
    )
    .unwrap();
}

#[test]
fn a_database_of_schema_0_is_migrated_and_served() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let conn = Connection::open(tmp.path().join(koalesce_server::DB_FILE)).unwrap();
        conn.execute_batch(SCHEMA_V0).unwrap();
        legacy_row(&conn, 1, "succeeded", &shell_job("old", "true", 1, ""), 1_000, Some(2_000));
        legacy_row(&conn, 2, "queued", &shell_job("waiting", "echo migrated", 1, ""), 3_000, None);
        let v: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        assert_eq!(v, 0);
    }
    let tok = token(tmp.path(), "alice", false);
    let srv = server(tmp.path(), &[("vu", 2)]);
    // The ended job is served as it was stored.
    let old = job(&srv, &tok, 1);
    assert_eq!(old["state"], "succeeded", "{old}");
    assert_eq!(old["name"], "old");
    assert_eq!(old["finished_ms"], 2_000);
    assert_eq!(old["components"][0]["site"], "vu");
    // The queued one is resubmitted with its id and runs.
    let j = wait_state(&srv, &tok, 2, &["succeeded", "failed"], 30);
    assert_eq!(j["state"], "succeeded", "{j}");
    assert_eq!(j["submitted_ms"], 3_000, "submission time kept: {j}");
    let out = std::fs::read_to_string(j["components"][0]["stdout"].as_str().unwrap()).unwrap();
    assert_eq!(out, "migrated\n");
    // New ids continue after the old ones.
    assert_eq!(submit(&srv, &tok, &shell_job("new", "true", 1, "")), 3);
    drop(srv);
    let conn = store::open_db(&tmp.path().join(koalesce_server::DB_FILE)).unwrap();
    let v: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
    assert_eq!(v, store::SCHEMA_VERSION);
    let cols: i64 = conn
        .query_row("SELECT COUNT(*) FROM pragma_table_info('jobs') WHERE name = 'record'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(cols, 0, "the old column is gone");
}

#[test]
fn a_database_of_a_newer_schema_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(koalesce_server::DB_FILE);
    {
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", store::SCHEMA_VERSION + 1).unwrap();
    }
    let e = store::open_db(&path).unwrap_err().to_string();
    assert!(e.contains("newer"), "{e}");
}

/// Schema 2 (before token expiry and recorded LRM ids): the migration adds both columns; an
/// existing token keeps working and never expires. A version-0 database that already has
/// `tokens.expires_ms` (written by a server with token expiry but the first jobs schema)
/// migrates too.
#[test]
fn a_database_of_schema_2_gains_token_expiry_and_lrm_ids() {
    const SCHEMA_V2: &str = r#"
CREATE TABLE jobs (id INTEGER PRIMARY KEY, user TEXT NOT NULL, name TEXT NOT NULL, description TEXT NOT NULL,
    spec TEXT NOT NULL, state TEXT NOT NULL, core TEXT NOT NULL, meta TEXT NOT NULL, detail TEXT NOT NULL,
    submitted_ms INTEGER NOT NULL);
CREATE TABLE tokens (hash TEXT PRIMARY KEY, user TEXT NOT NULL, admin INTEGER NOT NULL, created_ms INTEGER NOT NULL);
CREATE TABLE launches (job INTEGER NOT NULL, attempt INTEGER NOT NULL, component INTEGER NOT NULL, site TEXT NOT NULL,
    processors INTEGER NOT NULL, dir TEXT NOT NULL, done INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (job, attempt, component));
PRAGMA user_version = 2;
"#;
    let column = |conn: &Connection, table: &str, col: &str| -> bool {
        conn.query_row("SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2", [table, col], |r| {
            r.get::<_, i64>(0)
        })
        .unwrap()
            > 0
    };
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(koalesce_server::DB_FILE);
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(SCHEMA_V2).unwrap();
        conn.execute(
            "INSERT INTO tokens (hash, user, admin, created_ms) VALUES (?1, 'alice', 0, 1)",
            [store::sha256_hex(b"koa_old")],
        )
        .unwrap();
    }
    let conn = store::open_db(&path).unwrap();
    assert_eq!(
        conn.pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0)).unwrap(),
        store::SCHEMA_VERSION
    );
    assert!(column(&conn, "tokens", "expires_ms") && column(&conn, "launches", "lrm_id"));
    assert_eq!(
        store::check_token(&conn, "koa_old", u64::MAX / 2).unwrap(),
        store::TokenCheck::Valid {
            user: "alice".into(),
            admin: false
        }
    );
    drop(conn);
    let srv = server(tmp.path(), &[("vu", 1)]);
    let (code, body) = srv.request("GET", "/api/v1/jobs", Some("koa_old"), b"");
    assert_eq!(code, 200, "{body}");
    drop(srv);

    // Version 0 with the expiry column already there.
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(koalesce_server::DB_FILE);
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(SCHEMA_V0).unwrap();
        conn.execute_batch("ALTER TABLE tokens ADD COLUMN expires_ms INTEGER").unwrap();
    }
    let conn = store::open_db(&path).unwrap();
    assert!(column(&conn, "tokens", "expires_ms") && column(&conn, "launches", "lrm_id") && column(&conn, "jobs", "detail"));
}

/// Schema 4 (before GridWay's history was kept): the migration adds `gridway_history`, empty
/// (the history starts as it did before), and it then keeps what is saved.
#[test]
fn a_database_of_schema_4_gains_the_gridway_history() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(koalesce_server::DB_FILE);
    {
        let conn = store::open_db(&path).unwrap();
        conn.execute_batch("DROP TABLE gridway_history; PRAGMA user_version = 4;").unwrap();
    }
    let mut conn = store::open_db(&path).unwrap();
    assert_eq!(
        conn.pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0)).unwrap(),
        store::SCHEMA_VERSION
    );
    assert_eq!(store::load_gridway_history(&conn).unwrap(), None);
    for text in ["{\"sites\":{}}", "{\"sites\":{\"vu\":{}}}"] {
        let tx = conn.transaction().unwrap();
        store::save_gridway_history_op(text.to_string(), 5)(&tx).unwrap();
        tx.commit().unwrap();
    }
    assert_eq!(
        store::load_gridway_history(&conn).unwrap().as_deref(),
        Some("{\"sites\":{\"vu\":{}}}"),
        "one row, the latest"
    );
}

/// Schema 6 (before pending removals were recorded): the database opens at the current
/// version with its files and replicas as they were, gains the `removals` table, and a
/// deletion then records the replica's file as a pending removal.
#[test]
fn a_database_of_schema_6_gains_pending_removals() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(koalesce_server::DB_FILE);
    {
        let conn = store::open_db(&path).unwrap();
        conn.execute_batch(
            "DROP TABLE removals; \
             INSERT INTO files (name, size_bytes, sha256, owner) VALUES ('data', 4, 'ab', 'alice'); \
             INSERT INTO replicas (name, site, path) VALUES ('data', 'alpha', '/srv/storage/data.1'); \
             PRAGMA user_version = 6;",
        )
        .unwrap();
    }
    let mut conn = store::open_db(&path).unwrap();
    assert_eq!(
        conn.pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0)).unwrap(),
        store::SCHEMA_VERSION
    );
    assert_eq!(store::load_removals(&conn).unwrap().len(), 0);
    let files = store::load_files(&conn).unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].replicas, vec![("alpha".to_string(), "/srv/storage/data.1".to_string())]);
    let tx = conn.transaction().unwrap();
    store::delete_file_op("data".into())(&tx).unwrap();
    tx.commit().unwrap();
    let pending = store::load_removals(&conn).unwrap();
    assert_eq!(
        pending
            .iter()
            .map(|r| (r.name.as_str(), r.site.as_str(), r.path.as_str()))
            .collect::<Vec<_>>(),
        vec![("data", "alpha", "/srv/storage/data.1")]
    );
}
