//! Attack tests: what an attacker with ordinary user tokens tries against a real `koalesce
//! server` (the binary, on loopback), as in issue 8. Each test plays one attack and checks
//! that it fails while ordinary use keeps working.
//!
//! The tests that need root (user mapping, control groups, a server under another account)
//! fail, not skip, when not run as root: CI runs as root. Test accounts (`ksec1…`) are made
//! with `useradd` and removed on drop; control groups live under `ksec1-<pid>`.

mod attack_common;

use attack_common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

// ----- item 1: the job sandbox -----------------------------------------------------------

/// Every probe prints `PROBE <name> ALLOWED|DENIED`; the job then writes its own file, says
/// who it is and exits 7 (so a forged `exit.json` would show as a success).
const ATTACK: &str = r#"p() { n=$1; shift; if "$@" >/dev/null 2>&1; then echo "PROBE $n ALLOWED"; else echo "PROBE $n DENIED"; fi; }
p db-append-relative sh -c 'echo x >> ../../../../../../koalesce.db'
p db-append sh -c 'echo x >> "$DB"'
p db-read cat "$DB"
p db-sqlite-admin sqlite3 "$DB" "INSERT INTO tokens (hash, user, admin, created_ms) VALUES ('ksec1forged', 'alice', 1, 0)"
p wal-read cat "$DB-wal"
p data-dir-list ls "$DATA"
p storage-read sh -c 'cat "$DATA"/sites/s1/storage/*'
p other-job-write sh -c 'echo pwned > "$OTHER_WORK/pwned"'
p other-job-read cat "$OTHER_WORK/secret.txt"
p other-output-read cat "$OTHER_STDOUT"
p exit-forge sh -c 'echo "{\"exit_code\":0,\"signal\":null,\"spawn_error\":null,\"finished_ms\":1}" > ../exit.json'
p supervisor-forge sh -c 'echo "{}" > ../supervisor.json'
p barrier-write sh -c 'echo x > ../abort'
p shared-tmp-write sh -c 'echo x > /tmp/ksec1-escape'
p kill-supervisor kill -9 $PPID
echo own > mine.txt && cat mine.txt >/dev/null && echo "OWN-WRITE ok"
echo "UID=$(id -u) USER=$USER HOME=$HOME"
env | grep -q KSEC1_DAEMON_SECRET && echo "DAEMON-ENV leaked"
exit 7
"#;

/// Plays [`ATTACK`] as alice while bob's job runs; checks every probe was denied, alice's own
/// directory stayed writable, the database is unchanged and the outcome not forged. Returns
/// alice's stdout.
fn play_sandbox_attack(s: &Server, alice: &str, bob: &str) -> String {
    let db = s.data.join("koalesce.db");
    let victim = s.submit(
        bob,
        &shell_job("victim", "echo secret-of-bob > secret.txt; echo bob-output; sleep 60", &[], ""),
    );
    let vj = s.wait_state(bob, victim, &["running"], 20);
    let vdir = record_dir(&vj);
    wait_for("bob's output", 10, || {
        std::fs::read_to_string(vdir.join("stdout")).is_ok_and(|t| t.contains("bob-output"))
    });
    let env = [
        ("DB", db.display().to_string()),
        ("DATA", s.data.display().to_string()),
        ("OTHER_WORK", vdir.join("work").display().to_string()),
        ("OTHER_STDOUT", vdir.join("stdout").display().to_string()),
    ];
    let id = s.submit(alice, &shell_job("attack", ATTACK, &env, ""));
    let j = s.wait_state(alice, id, &["succeeded", "failed"], 30);
    let out = std::fs::read_to_string(record_dir(&j).join("stdout")).unwrap();
    let err = std::fs::read_to_string(record_dir(&j).join("stderr")).unwrap_or_default();
    assert_eq!(j["state"], "failed", "the job's own exit code 7 must stand: {j}\n{out}");
    assert_eq!(j["components"][0]["exit_code"], 7, "{j}");
    let probes: Vec<&str> = out.lines().filter(|l| l.starts_with("PROBE ")).collect();
    assert_eq!(probes.len(), 15, "{out}\n{err}");
    let allowed: Vec<&&str> = probes.iter().filter(|l| l.ends_with("ALLOWED")).collect();
    assert!(allowed.is_empty(), "attacks that got through: {allowed:?}\n{out}");
    assert!(
        out.contains("OWN-WRITE ok"),
        "the job's own directory must stay writable:\n{out}\n{err}"
    );
    assert!(!out.contains("DAEMON-ENV"), "the daemon's environment leaked into the job:\n{out}");
    // Nothing changed behind the server's back.
    let forged = Command::new("sqlite3")
        .arg(&db)
        .arg("SELECT count(*) FROM tokens WHERE hash = 'ksec1forged'")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&forged.stdout).trim(), "0");
    assert!(!vdir.join("work/pwned").exists());
    assert!(!Path::new("/tmp/ksec1-escape").exists());
    assert_eq!(std::fs::read_to_string(vdir.join("work/secret.txt")).unwrap(), "secret-of-bob\n");
    // The supervisor survived the job's kill and the barrier was untouched.
    assert!(!record_dir(&j).join("abort").exists());
    let (code, _) = s.request("POST", &format!("/api/v1/jobs/{victim}/cancel"), Some(bob), b"");
    assert_eq!(code, 200);
    out
}

/// The server's own files are private: data dir 0700, database (and WAL/SHM) and storage 0600.
fn assert_private_files(s: &Server, token: &str) {
    let (code, text) = s.upload(token, "input.dat", "s1", b"data");
    assert_eq!(code, 201, "{text}");
    let mode = |p: &Path| {
        std::fs::metadata(p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode(&s.data), 0o700);
    for f in ["koalesce.db", "koalesce.db-wal", "koalesce.db-shm"] {
        assert_eq!(mode(&s.data.join(f)), 0o600, "{f}");
    }
    let stored: Vec<PathBuf> = std::fs::read_dir(s.data.join("sites/s1/storage"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(!stored.is_empty());
    for p in stored {
        assert_eq!(mode(&p), 0o600, "{}", p.display());
    }
}

#[test]
fn a_job_of_a_mapped_user_cannot_reach_the_database_records_or_other_jobs() {
    let _g = serial();
    require_root();
    let (a, b) = (Account::new("a"), Account::new("b"));
    let cg = CgroupParent::new();
    let users = format!(
        "[users]\nalice = \"{}\"\nbob = \"{}\"\n[sandbox]\ncgroup_parent = \"{}\"\n",
        a.name, b.name, cg.0
    );
    let mut s = Server::new(&config("", &users));
    let (alice, bob) = (s.token("alice", false, None), s.token("bob", false, None));
    s.start();
    let out = play_sandbox_attack(&s, &alice, &bob);
    assert!(
        out.contains(&format!("UID={} USER={} ", a.uid, a.name)),
        "alice's job must run as her account:\n{out}"
    );
    assert_private_files(&s, &alice);
    // The job's working directory belongs to its account.
    let (_, list) = s.request("GET", "/api/v1/jobs", Some(&alice), b"");
    let id = json(&list)[0]["id"].as_u64().unwrap();
    let work = record_dir(&s.job(&alice, id)).join("work");
    assert_eq!(std::fs::metadata(&work).unwrap().uid(), a.uid);

    // A user without an account fails with that reason (not a site fault), and nobody runs
    // as root unless allowed.
    let carol = s.token("carol-has-no-account", false, None);
    let root = s.token("root", false, None);
    for (tok, want) in [(&carol, "does not exist"), (&root, "allow_root_jobs")] {
        let id = s.submit(tok, &shell_job("x", "touch ran", &[], ""));
        let j = s.wait_state(tok, id, &["failed", "succeeded"], 20);
        assert_eq!(j["state"], "failed", "{j}");
        assert!(j["failure"].as_str().unwrap_or("").contains(want), "{j}");
        assert!(!record_dir(&j).join("work/ran").exists());
    }
    let (_, sites) = s.request("GET", "/api/v1/sites", Some(&alice), b"");
    assert_eq!(json(&sites)[0]["blacklisted"], false, "{sites}");
}

#[test]
fn landlock_alone_confines_the_jobs_of_an_unprivileged_server() {
    let _g = serial();
    require_root();
    let srv = Account::new("s");
    let mut s = Server::new(&config("", ""));
    let (alice, bob) = (s.token("alice", false, None), s.token("bob", false, None));
    // The server runs as an ordinary account that owns its data dir: no user switching, no
    // control groups, only Landlock stands between a job and the server's files.
    std::fs::set_permissions(s.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let chown = Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", srv.uid, srv.gid))
        .arg(&s.data)
        .status()
        .unwrap();
    assert!(chown.success());
    std::fs::File::create(s.path().join("server.log")).unwrap();
    nix::unistd::chown(&s.path().join("server.log"), Some(srv.uid.into()), None).unwrap();
    s.start_with(&[], Some(&srv));
    let out = play_sandbox_attack(&s, &alice, &bob);
    assert!(out.contains(&format!("UID={} ", srv.uid)), "{out}");
    assert_private_files(&s, &alice);
}

// ----- item 10: a control group per component ----------------------------------------------

#[test]
fn cancel_kills_descendants_that_left_the_process_group_and_frees_the_slots_after() {
    let _g = serial();
    require_root();
    let a = Account::new("c");
    let cg = CgroupParent::new();
    let mut s = Server::new(&config(
        "",
        &format!("[users]\nalice = \"{}\"\n[sandbox]\ncgroup_parent = \"{}\"\n", a.name, cg.0),
    ));
    let alice = s.token("alice", false, None);
    s.start();
    // A double fork with setsid: the beater leaves the component's process group and session.
    let script = "(setsid sh -c 'while :; do echo x >> beat; sleep 0.1; done' &); sleep 60";
    let id = s.submit(&alice, &shell_job("escaper", script, &[], ""));
    let j = s.wait_state(&alice, id, &["running"], 20);
    let beat = record_dir(&j).join("work/beat");
    let lines = |p: &Path| std::fs::read_to_string(p).map(|t| t.lines().count()).unwrap_or(0);
    wait_for("the beater", 10, || lines(&beat) >= 3);
    let (code, body) = s.request("POST", &format!("/api/v1/jobs/{id}/cancel"), Some(&alice), b"");
    assert_eq!(code, 200, "{body}");
    s.wait_state(&alice, id, &["cancelled"], 10);
    std::thread::sleep(Duration::from_millis(500));
    let n = lines(&beat);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(lines(&beat), n, "a descendant of the cancelled job is still writing");
    wait_for("the slots to be free", 10, || {
        let (_, sites) = s.request("GET", "/api/v1/sites", Some(&alice), b"");
        json(&sites)[0]["idle"] == 8
    });
}

// ----- item 4: outputs without following links ----------------------------------------------

#[test]
fn outputs_that_are_links_are_refused_and_regular_ones_collected() {
    let _g = serial();
    require_root();
    let a = Account::new("o");
    let mut s = Server::new(&config("", &format!("[users]\nalice = \"{}\"\n", a.name)));
    let alice = s.token("alice", false, None);
    s.start();
    let db = s.data.join("koalesce.db").display().to_string();
    let script = "ln -s /etc/shadow out.txt; ln -s \"$DB\" db.txt; mkdir d; ln -s /etc sub; echo real > real.txt";
    let id = s.submit(
        &alice,
        &shell_job("links", script, &[("DB", db)], "outputs = [\"out.txt\", \"db.txt\", \"real.txt\"]"),
    );
    let j = s.wait_state(&alice, id, &["succeeded", "failed"], 20);
    assert_eq!(j["state"], "succeeded", "{j}");
    let logical = format!("{id}/real.txt");
    wait_for("the regular output", 10, || {
        s.job(&alice, id)["outputs"].to_string().contains(&logical)
    });
    let j = s.job(&alice, id);
    let failure = j["failure"].as_str().unwrap_or("");
    for name in ["out.txt", "db.txt"] {
        assert!(failure.contains(&format!("output '{name}' refused: it is a symbolic link")), "{j}");
    }
    let (_, files) = s.request("GET", "/api/v1/files", Some(&alice), b"");
    assert!(
        files.contains(&logical) && !files.contains("out.txt") && !files.contains("db.txt"),
        "{files}"
    );
    let (code, out, _) = s.cli(&alice, &["status", &id.to_string()]);
    assert_eq!(code, 0);
    assert!(out.contains("refused"), "{out}");
}

// ----- item 6: idle connections and resource exhaustion ---------------------------------------

#[test]
fn idle_connections_are_closed_and_a_submission_still_runs_on_a_server_short_of_descriptors() {
    let _g = serial();
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    assert!(hard >= 4096, "the test needs 2,000 sockets (hard limit {hard})");
    let mut s = Server::new(&config(
        "header_timeout_ms = 2000\nallow_root_jobs = true",
        "[users]\n\"*\" = \"root\"\n",
    ));
    let alice = s.token("alice", false, None);
    // The server gets fewer descriptors than the attacker opens connections.
    s.start_with(&["prlimit", "--nofile=1200:1200", "--"], None);
    let addr = s.addr.unwrap();
    let t0 = Instant::now();
    let mut idle: Vec<TcpStream> = (0..2000)
        .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(3)).ok())
        .collect();
    assert!(idle.len() >= 1900, "only {} connections opened", idle.len());
    // A normal submission gets through and its job runs.
    let id = s.submit(&alice, &shell_job("after-flood", "echo ok", &[], ""));
    let j = s.wait_state(&alice, id, &["succeeded", "failed"], 60);
    assert_eq!(j["state"], "succeeded", "{j}");
    // Every idle connection was closed by the server (EOF or reset) within a few timeouts.
    let mut closed = 0;
    for c in &mut idle {
        c.set_read_timeout(Some(
            Duration::from_secs(20).saturating_sub(t0.elapsed()).max(Duration::from_millis(10)),
        ))
        .unwrap();
        let mut b = [0u8; 1];
        match c.read(&mut b) {
            Ok(0) => closed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => closed += 1,
            _ => {}
        }
    }
    assert_eq!(closed, idle.len(), "idle connections still open after {:?}", t0.elapsed());
    // Running short of descriptors is nobody's fault: the site is not blacklisted.
    let (_, sites) = s.request("GET", "/api/v1/sites", Some(&alice), b"");
    assert_eq!(json(&sites)[0]["blacklisted"], false, "{sites}");
    let (_, metrics) = s.request("GET", "/metrics", None, b"");
    assert!(metrics.contains("koalesce_soft_errors_total 0"), "{metrics}");
}

// ----- item 14: error answers ------------------------------------------------------------------

/// Sends a request whose body stops short of its Content-Length; returns the status.
fn truncated_status(addr: SocketAddr, token: &str) -> (u16, String) {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/toml\r\nContent-Length: 1000\r\n\r\nname = \"trunc"
    );
    c.write_all(head.as_bytes()).unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let mut raw = String::new();
    let _ = c.read_to_string(&mut raw);
    let status = raw.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, raw.split_once("\r\n\r\n").map(|x| x.1.to_string()).unwrap_or_default())
}

#[test]
fn error_answers_are_exact_and_do_not_leak() {
    let _g = serial();
    let mut s = Server::new(&config("allow_root_jobs = true", "[users]\n\"*\" = \"root\"\n"));
    let (alice, bob) = (s.token("alice", false, None), s.token("bob", false, None));
    s.start();
    // A truncated body is a bad request, not a too-large one.
    let (code, body) = truncated_status(s.addr.unwrap(), &alice);
    assert_eq!(code, 400, "{body}");
    assert!(json(&body)["error"].as_str().unwrap().contains("incomplete"), "{body}");
    // 405 answers JSON.
    let (code, body) = s.request("PUT", "/api/v1/jobs", Some(&alice), b"");
    assert_eq!(code, 405, "{body}");
    assert!(json(&body)["error"].as_str().unwrap().contains("PUT"), "{body}");
    // A TOML error on a 400 KB line is cut, with its reason kept.
    let long = format!("name = \"x\"\nexecutable = \"{}\" junk\n", "a".repeat(400_000));
    let (code, body) = s.request("POST", "/api/v1/jobs", Some(&alice), long.as_bytes());
    assert_eq!(code, 400);
    let msg = json(&body)["error"].as_str().unwrap().to_string();
    assert!(
        msg.chars().count() <= 1100 && msg.contains('…'),
        "{} chars: {}",
        msg.len(),
        &msg[..200.min(msg.len())]
    );
    // A huge HH:MM:SS runtime is refused naming the field, never wrapped round.
    let huge = shell_job("huge", "true", &[], "walltime = \"99999999999999999:00:00\"");
    let (code, body) = s.request("POST", "/api/v1/jobs", Some(&alice), huge.as_bytes());
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("walltime"), "{body}");
    // File names of 247-255 characters are fine; longer ones are refused naming the field.
    for (len, want) in [(247, 201), (255, 201), (256, 422)] {
        let (code, text) = s.upload(&alice, &"n".repeat(len), "s1", b"x");
        assert_eq!(code, want, "name of {len}: {text}");
        if want == 422 {
            assert!(text.contains("field 'name'"), "{text}");
        }
    }
    // Cancel of another user's job answers exactly like a job that does not exist.
    let id = s.submit(&alice, &shell_job("mine", "sleep 30", &[], ""));
    let (c1, b1) = s.request("POST", &format!("/api/v1/jobs/{id}/cancel"), Some(&bob), b"");
    let (c2, b2) = s.request("POST", "/api/v1/jobs/999999/cancel", Some(&bob), b"");
    assert_eq!((c1, c2), (404, 404));
    assert_eq!(b1.replace(&id.to_string(), "N"), b2.replace("999999", "N"));
    s.request("POST", &format!("/api/v1/jobs/{id}/cancel"), Some(&alice), b"");
}

// ----- item 13: tokens ---------------------------------------------------------------------------

#[test]
fn tokens_can_be_listed_revoked_at_once_and_expire() {
    let _g = serial();
    let mut s = Server::new(&config("", ""));
    let alice = s.token("alice", false, None);
    let alice2 = s.token("alice", false, None);
    let bob = s.token("bob", false, None);
    let admin = s.token("boss", true, None);
    let short = s.token("carol", false, Some("1s"));
    s.start();
    let ok = |t: &str| s.request("GET", "/api/v1/jobs", Some(t), b"").0;
    assert_eq!(ok(&alice), 200);
    // Users see their own tokens only; never the tokens themselves.
    let (code, out, err) = s.cli(&alice, &["token", "list", "--json"]);
    assert_eq!(code, 0, "{err}");
    let mine = json(&out);
    assert_eq!(mine.as_array().unwrap().len(), 2, "{out}");
    assert!(mine.as_array().unwrap().iter().all(|t| t["user"] == "alice"), "{out}");
    assert!(!out.contains(&alice[4..]), "a token was printed");
    let (code, _, err) = s.cli(&bob, &["token", "list", "--all"]);
    assert_ne!(code, 0);
    assert!(err.contains("403"), "{err}");
    let (code, out, err) = s.cli(&admin, &["token", "list", "--all"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 6, "header and five tokens:\n{out}");
    // Bob cannot revoke Alice's token (404, as if it did not exist); Alice can, at once.
    let id_of = |list: &Value, i: usize| list[i]["id"].as_str().unwrap().to_string();
    let alice2_id = id_of(&mine, 1);
    let (code, _, err) = s.cli(&bob, &["token", "revoke", &alice2_id]);
    assert!(code != 0 && err.contains("404"), "{err}");
    let still = [ok(&alice), ok(&alice2)];
    assert_eq!(still, [200, 200]);
    // Which of the two is alice2: revoke both one by one and see.
    let (code, _, err) = s.cli(&alice, &["token", "revoke", &alice2_id]);
    assert_eq!(code, 0, "{err}");
    assert!([ok(&alice), ok(&alice2)].contains(&401), "revocation not effective at once");
    // Revoking in the database while the server runs works at once too.
    let (_, out, _) = s.cli(&admin, &["token", "list", "--all", "--json"]);
    let bob_id = json(&out).as_array().unwrap().iter().find(|t| t["user"] == "bob").unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Bob's token works just before (the server remembers it now): a stale memory would keep
    // letting him in.
    assert_eq!(ok(&bob), 200);
    assert_eq!(ok(&bob), 200);
    let st = Command::new(BIN)
        .args(["token", "revoke", &bob_id, "--data-dir"])
        .arg(&s.data)
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    assert_eq!(ok(&bob), 401);
    // Expiry.
    std::thread::sleep(Duration::from_millis(1200));
    let (code, body) = s.request("GET", "/api/v1/jobs", Some(&short), b"");
    assert_eq!(code, 401);
    assert!(body.contains("expired"), "{body}");
    let out = Command::new(BIN)
        .args(["token", "list", "--data-dir"])
        .arg(&s.data)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("(expired)"));
}

// ----- item 11: escaping in the CLI ---------------------------------------------------------------

#[test]
fn names_with_escape_codes_cannot_forge_cli_output() {
    let _g = serial();
    let mut s = Server::new(&config("allow_root_jobs = true", "[users]\n\"*\" = \"root\"\n"));
    let alice = s.token("alice", false, None);
    s.start();
    let evil = "pwn\u{1b}[2J\u{1b}]0;title\u{7}\nID  NAME  FORGED\r";
    let id = s.submit(&alice, &shell_job(evil, "printf 'out\\033[31mred\\n'", &[], ""));
    s.wait_state(&alice, id, &["succeeded", "failed"], 20);
    for args in [vec!["jobs"], vec!["status", &id.to_string()]] {
        let (code, out, err) = s.cli(&alice, &args.iter().map(|a| &**a).collect::<Vec<_>>());
        assert_eq!(code, 0, "{err}");
        assert!(
            !out.contains('\u{1b}') && !out.contains('\r') && !out.contains('\u{7}'),
            "{args:?}: {out:?}"
        );
        assert!(!out.lines().any(|l| l.starts_with("ID  NAME  FORGED")), "{args:?}: {out}");
        assert!(out.contains("pwn\\u{1b}[2J"), "{args:?}: {out}");
    }
}
