//! The daily-use commands as a user types them, against a real server (in-process, random port,
//! components under `koalesce supervise`): `koalesce logs [--stderr] [--follow] [--tail]`,
//! `koalesce files get [-o]`, `koalesce status` with the tail of the output and how much was
//! cut, `koalesce jobs` filters, and the help texts the README relies on.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use koalesce_server::{BackgroundServer, SupervisorCommand};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_koalesce");

fn server(dir: &Path) -> BackgroundServer {
    let supervisor = SupervisorCommand {
        program: BIN.into(),
        args: vec!["supervise".into()],
        launcher: Some(vec!["supervise-launcher".into()]),
    };
    let mut opts = koalesce_server::test_options(dir, &[("vu", 4), ("leiden", 4)], supervisor);
    opts.config.sandbox.cgroup_parent = format!("kdailycli-{}", std::process::id());
    BackgroundServer::start(opts).expect("server starts")
}

/// Runs the CLI as `token`'s user: (exit code, stdout, stderr).
fn cli(srv: &BackgroundServer, token: &str, args: &[&str]) -> (i32, Vec<u8>, String) {
    let out = Command::new(BIN)
        .args(args)
        .env("KOALESCE_URL", srv.url())
        .env("KOALESCE_TOKEN", token)
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn submit(srv: &BackgroundServer, token: &str, dir: &Path, name: &str, toml: &str) -> u64 {
    let f = dir.join(format!("{name}.toml"));
    std::fs::write(&f, toml).unwrap();
    let (code, out, err) = cli(srv, token, &["submit", f.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    text(&out).trim().parse().unwrap()
}

fn shell(name: &str, script: &str) -> String {
    format!("name = {name:?}\nexecutable = \"/bin/sh\"\narguments = [\"-c\", {script:?}]\n[[components]]\nprocessors = 1\n")
}

fn wait(srv: &BackgroundServer, token: &str, id: u64) -> Value {
    let (code, out, err) = cli(srv, token, &["wait", &id.to_string(), "--timeout", "60s", "--json"]);
    assert!(code == 0 || code == 1, "wait: {code} {err}");
    serde_json::from_slice(&out).unwrap()
}

#[test]
fn logs_status_and_files_get_work_from_the_command_line() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = koalesce_server::create_token(tmp.path(), "alice", false).unwrap();
    let srv = server(tmp.path());
    let script = "for i in $(seq 1 25); do echo line $i; done; echo warn >&2; echo result > r.txt";
    let toml = shell("chatty", script).replacen("[[components]]", "outputs = [\"r.txt\"]\n[[components]]", 1);
    let id = submit(&srv, &tok, tmp.path(), "chatty", &toml);
    assert_eq!(wait(&srv, &tok, id)["state"], "succeeded");
    let all: String = (1..=25).map(|i| format!("line {i}\n")).collect();
    let (code, out, err) = cli(&srv, &tok, &["logs", &id.to_string()]);
    assert_eq!((code, text(&out)), (0, all.clone()), "{err}");
    let (_, out, _) = cli(&srv, &tok, &["logs", &id.to_string(), "--stderr"]);
    assert_eq!(text(&out), "warn\n");
    let (_, out, err) = cli(&srv, &tok, &["logs", &id.to_string(), "--tail", "3"]);
    assert_eq!(text(&out), "line 23\nline 24\nline 25\n");
    assert!(err.contains("22 earlier line(s) not shown"), "{err}");
    let (code, _, err) = cli(&srv, &tok, &["logs", &id.to_string(), "--component", "2"]);
    assert!(code != 0 && err.contains("has 1 component"), "{err}");
    // status shows the last lines and says how many it left out, read through the API.
    let (_, out, _) = cli(&srv, &tok, &["status", &id.to_string()]);
    let status = text(&out);
    assert!(
        status.contains(&format!(
            "component 0 stdout (last 10 of 25 lines; all: koalesce logs {id} --component 0):"
        )),
        "{status}"
    );
    assert!(status.contains("  | line 25\n") && !status.contains("  | line 15\n"), "{status}");
    assert!(status.contains("component 0 stderr:\n  | warn\n"), "{status}");

    // files get: the output, to a chosen path, into a directory and to stdout.
    let name = format!("{id}/r.txt");
    let t0 = Instant::now();
    while cli(&srv, &tok, &["files", "ls", "--json"])
        .1
        .windows(name.len())
        .all(|w| w != name.as_bytes())
    {
        assert!(t0.elapsed() < Duration::from_secs(10), "output not registered");
        std::thread::sleep(Duration::from_millis(50));
    }
    let dest = tmp.path().join("got.txt");
    let (code, _, err) = cli(&srv, &tok, &["files", "get", &name, "-o", dest.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("verified"), "{err}");
    assert_eq!(std::fs::read_to_string(&dest).unwrap(), "result\n");
    let sub = tmp.path().join("into");
    std::fs::create_dir(&sub).unwrap();
    cli(&srv, &tok, &["files", "get", &name, "-o", sub.to_str().unwrap(), "--quiet"]);
    assert_eq!(std::fs::read_to_string(sub.join("r.txt")).unwrap(), "result\n");
    let (_, out, _) = cli(&srv, &tok, &["files", "get", &name, "-o", "-"]);
    assert_eq!(out, b"result\n");
    // A big registered file, byte for byte; a missing one fails and leaves nothing behind.
    let big = tmp.path().join("big.bin");
    let data: Vec<u8> = (0..5_000_000u32).map(|i| (i.wrapping_mul(40_503) >> 7) as u8).collect();
    std::fs::write(&big, &data).unwrap();
    let (code, _, err) = cli(&srv, &tok, &["files", "add", "big.bin", big.to_str().unwrap(), "--site", "vu"]);
    assert_eq!(code, 0, "{err}");
    let back = tmp.path().join("back.bin");
    assert_eq!(cli(&srv, &tok, &["files", "get", "big.bin", "-o", back.to_str().unwrap()]).0, 0);
    assert!(std::fs::read(&back).unwrap() == data);
    let (code, _, err) = cli(&srv, &tok, &["files", "get", "nope.bin", "-o", sub.join("nope").to_str().unwrap()]);
    assert!(code != 0 && err.contains("404") && err.contains("nope.bin"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&sub).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, ["r.txt"], "no partial download left behind");
}

#[test]
fn logs_follow_prints_until_the_job_ends_and_jobs_filters() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = koalesce_server::create_token(tmp.path(), "alice", false).unwrap();
    let srv = server(tmp.path());
    let id = submit(
        &srv,
        &tok,
        tmp.path(),
        "slow",
        &shell("slow", "for i in 1 2 3 4 5; do echo tick $i; sleep 0.3; done"),
    );
    let t0 = Instant::now();
    let (code, out, err) = cli(&srv, &tok, &["logs", &id.to_string(), "--follow"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(text(&out), "tick 1\ntick 2\ntick 3\ntick 4\ntick 5\n");
    assert!(t0.elapsed() >= Duration::from_millis(1000), "--follow waited for the job to end");
    let other = submit(&srv, &tok, tmp.path(), "other", &shell("other", "exit 2"));
    wait(&srv, &tok, other);
    let (_, out, _) = cli(&srv, &tok, &["jobs", "--name", "SLO*", "--json"]);
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    let (_, out, _) = cli(&srv, &tok, &["jobs", "--state", "failed,timeout"]);
    let table = text(&out);
    assert!(table.contains("other") && !table.contains("slow"), "{table}");
    let (_, out, err) = cli(&srv, &tok, &["jobs", "--limit", "1"]);
    assert_eq!(text(&out).lines().count(), 2, "header and one job");
    assert!(err.contains(&format!("--after {id}")), "{err}");
    let (_, out, _) = cli(&srv, &tok, &["jobs", "--since", "1h", "--site", "vu", "--json"]);
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert!(v.as_array().unwrap().iter().all(|j| j["sites"] == serde_json::json!(["vu"])), "{v}");
    let (code, _, err) = cli(&srv, &tok, &["jobs", "--all"]);
    assert!(code != 0 && err.contains("403") && err.contains("only an admin"), "{err}");
    let (code, _, err) = cli(&srv, &tok, &["jobs", "--state", "bogus"]);
    assert!(code != 0 && err.contains("timeout"), "{err}");
}

#[test]
fn help_texts_say_what_the_commands_take() {
    let help = |args: &[&str]| {
        let out = Command::new(BIN).args(args).arg("--help").output().unwrap();
        assert!(out.status.success());
        text(&out.stdout)
    };
    let token = help(&["token", "create"]);
    assert!(
        token.contains("<USER>") && token.contains("The koalesce user the token acts as"),
        "{token}"
    );
    assert!(token.contains("--data-dir <DIR>") && token.contains("data directory"), "{token}");
    let add = help(&["files", "add"]);
    assert!(add.contains("one more") && add.contains("replica") && add.contains("409"), "{add}");
    let logs = help(&["logs"]);
    for flag in ["--component", "--stderr", "--follow", "--tail"] {
        assert!(logs.contains(flag), "{flag}: {logs}");
    }
    let get = help(&["files", "get"]);
    assert!(get.contains("-o, --output") && get.contains("SHA-256"), "{get}");
    let jobs = help(&["jobs"]);
    for flag in ["--state", "--name", "--since", "--user", "--site", "--limit", "--after"] {
        assert!(jobs.contains(flag), "{flag}: {jobs}");
    }
}

#[test]
fn hold_release_dependencies_and_arrays_from_the_command_line() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = koalesce_server::create_token(tmp.path(), "alice", false).unwrap();
    let srv = server(tmp.path());
    let f = tmp.path().join("j.toml");
    std::fs::write(&f, shell("first", "echo one")).unwrap();
    let f = f.to_str().unwrap();
    let (code, out, err) = cli(&srv, &tok, &["submit", f, "--hold"]);
    assert_eq!(code, 0, "{err}");
    let held: u64 = text(&out).trim().parse().unwrap();
    let (_, out, _) = cli(&srv, &tok, &["submit", f, "--dependency", &format!("afterok:{held}")]);
    let dep: u64 = text(&out).trim().parse().unwrap();
    let (_, out, _) = cli(&srv, &tok, &["status", &dep.to_string()]);
    assert!(
        text(&out).contains("HELD") && text(&out).contains(&format!("reason: waiting for afterok:{held}")),
        "{}",
        text(&out)
    );
    let (_, out, _) = cli(&srv, &tok, &["jobs", "--state", "held", "--json"]);
    assert_eq!(serde_json::from_slice::<Value>(&out).unwrap().as_array().unwrap().len(), 2);
    let (code, out, err) = cli(&srv, &tok, &["release", &held.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(text(&out).starts_with(&format!("job {held} queued")), "{}", text(&out));
    assert_eq!(wait(&srv, &tok, dep)["state"], "succeeded");
    let (code, _, err) = cli(&srv, &tok, &["hold", &dep.to_string()]);
    assert!(code != 0 && err.contains("409"), "{err}");
    let (code, _, err) = cli(&srv, &tok, &["submit", f, "--dependency", "afterok"]);
    assert!(code != 0 && err.contains("no job id"), "{err}");
    // An array: one id printed, every task under it.
    let (code, out, err) = cli(&srv, &tok, &["submit", f, "--array", "1-4%2"]);
    assert_eq!(code, 0, "{err}");
    let array: u64 = text(&out).trim().parse().unwrap();
    // `wait` on an array's id waits for every task.
    let (code, out, err) = cli(&srv, &tok, &["wait", &array.to_string(), "--timeout", "60s"]);
    assert_eq!((code, text(&out)), (0, format!("array {array}: succeeded 4\n")), "{err}");
    let (_, out, _) = cli(&srv, &tok, &["status", &array.to_string()]);
    let status = text(&out);
    assert!(
        status.contains("array of 4 tasks: succeeded 4") && status.contains("task 1 of array"),
        "{status}"
    );
    let (code, _, err) = cli(&srv, &tok, &["submit", f, "--array", "4-1"]);
    assert!(code != 0 && err.contains("empty"), "{err}");
}

#[test]
fn completions_man_pages_backup_and_log_formats() {
    let run = |args: &[&str]| {
        let out = Command::new(BIN).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    for shell in ["bash", "zsh", "fish"] {
        let script = run(&["completions", shell]);
        assert!(
            script.contains("koalesce") && script.contains("logs") && script.contains("--follow"),
            "{shell}"
        );
    }
    let page = run(&["man"]);
    assert!(page.starts_with(".ie") || page.contains(".TH"), "{}", &page[..200.min(page.len())]);
    assert!(page.contains("submit"));
    let tmp = tempfile::tempdir().unwrap();
    let pages = tmp.path().join("man1");
    run(&["man", "--dir", pages.to_str().unwrap()]);
    for p in ["koalesce.1", "koalesce-logs.1", "koalesce-files-get.1", "koalesce-admin-backup.1"] {
        let t = std::fs::read_to_string(pages.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
        assert!(t.contains(".TH"), "{p}");
    }
    assert!(!pages.join("koalesce-supervise.1").exists(), "hidden commands have no page");

    // A backup of a live server's database restores into a server that knows its jobs.
    let live = tmp.path().join("live");
    let tok = koalesce_server::create_token(&live, "alice", false).unwrap();
    let srv = server(&live);
    let id = submit(&srv, &tok, tmp.path(), "kept", &shell("kept", "echo kept"));
    assert_eq!(wait(&srv, &tok, id)["state"], "succeeded");
    let copy = tmp.path().join("copy.db");
    let out = run(&["admin", "backup", copy.to_str().unwrap(), "--data-dir", live.to_str().unwrap()]);
    assert!(out.contains("backed up"), "{out}");
    let again = Command::new(BIN)
        .args(["admin", "backup", copy.to_str().unwrap(), "--data-dir", live.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!again.status.success() && text(&again.stderr).contains("exists"));
    drop(srv);
    let restored = tmp.path().join("restored");
    std::fs::create_dir_all(&restored).unwrap();
    std::fs::copy(&copy, restored.join("koalesce.db")).unwrap();
    let srv = server(&restored);
    let (code, out, err) = cli(&srv, &tok, &["status", &id.to_string(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!((v["name"].as_str(), v["state"].as_str()), (Some("kept"), Some("succeeded")));
    drop(srv);

    // Log formats: JSON lines, and text without colour codes when not on a terminal.
    for (format, check) in [("json", true), ("text", false)] {
        let dir = tmp.path().join(format!("log-{format}"));
        let child = Command::new(BIN)
            .args([
                "server",
                "--data-dir",
                dir.to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
                "--log-format",
                format,
            ])
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        while !dir.join("server.addr").exists() && t0.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        // The address is written before recovery; the server handles SIGTERM once it serves.
        let addr: std::net::SocketAddr = std::fs::read_to_string(dir.join("server.addr")).unwrap().trim().parse().unwrap();
        while !koalesce_server::http_request(addr, "GET", "/healthz", None, None, b"").is_ok_and(|r| r.0 == 200)
            && t0.elapsed() < Duration::from_secs(20)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "SIGTERM ends the server cleanly");
        let log = text(&out.stderr);
        assert!(log.contains("koalesce server listening"), "{log}");
        assert!(!log.contains('\u{1b}'), "no ANSI codes off a terminal: {log:?}");
        for line in log.lines().filter(|l| !l.trim().is_empty()) {
            assert_eq!(serde_json::from_str::<Value>(line).is_ok(), check, "{format}: {line}");
        }
    }
}
