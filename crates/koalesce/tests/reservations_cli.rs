//! `koalesce reservations` against a real server: create (granted, then rejected with T_next),
//! list, modify, cancel, with the exit codes a script relies on.

use std::process::Command;

use koalesce_server::{BackgroundServer, SupervisorCommand};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_koalesce");

fn cli(url: &str, token: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .arg("reservations")
        .args(args)
        .env("KOALESCE_URL", url)
        .env("KOALESCE_TOKEN", token)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn create_list_modify_and_cancel_from_the_command_line() {
    let tmp = tempfile::tempdir().unwrap();
    let supervisor = SupervisorCommand {
        program: BIN.into(),
        args: vec!["supervise".into()],
        launcher: Some(vec!["supervise-launcher".into()]),
    };
    let tok = koalesce_server::create_token(tmp.path(), "alice", false).unwrap();
    let mut opts = koalesce_server::test_options(tmp.path(), &[("vu", 8)], supervisor);
    opts.config.sites[0].reservations = true;
    let srv = BackgroundServer::start(opts).unwrap();
    let url = srv.url();

    let (code, out, err) = cli(
        &url,
        &tok,
        &[
            "create",
            "--site",
            "vu",
            "--cpus",
            "6",
            "--duration",
            "1h",
            "--start",
            "2h",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["answer"], "granted");
    let id = v["reservation"]["id"].as_str().unwrap().to_string();
    let end = v["reservation"]["end_ms"].as_u64().unwrap();

    // 4 more at the same time do not fit in 8: rejected, T_next = the end of the first; exit 1.
    let four = ["create", "--site", "vu", "--cpus", "4", "--duration", "10m", "--start", "2h"];
    let (code, out, err) = cli(&url, &tok, &four);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.starts_with("rejected, T_next "), "{err}");
    let (code, out, _) = cli(&url, &tok, &[&four[..], &["--json"]].concat());
    assert_eq!(code, 1);
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["t_next_ms"], end, "{out}");
    // A window wide enough is granted.
    let (code, out, err) = cli(&url, &tok, &[&four[..], &["--latest", "4h"]].concat());
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("granted R2 at vu: 4 processor(s)"), "{out}");

    let (code, out, _) = cli(&url, &tok, &["list"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("ID"), "{out}");
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[1].contains(&id) && lines[1].contains("waiting"), "{out}");

    let (code, out, err) = cli(
        &url,
        &tok,
        &["modify", &id, "--site", "vu", "--cpus", "2", "--duration", "30m", "--start", "3h"],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("2 processor(s)"), "{out}");
    let new_id = out.split_whitespace().nth(1).unwrap().to_string();

    let (code, out, _) = cli(&url, &tok, &["cancel", &new_id]);
    assert_eq!((code, out.trim()), (0, format!("cancelled {new_id}").as_str()));
    let (code, _, err) = cli(&url, &tok, &["show", &new_id]);
    assert_ne!(code, 0);
    assert!(err.contains("not found"), "{err}");
    let (code, _, err) = cli(&url, &tok, &["create", "--site", "vu", "--cpus", "1", "--duration", "later"]);
    assert_ne!(code, 0);
    assert!(err.contains("--duration") || err.contains("duration"), "{err}");
}

/// A flexible reservation the site moves (here: later, to make room for a fixed request at
/// its start) shows its moved start in `koalesce reservations list`.
#[test]
fn list_shows_where_the_site_moved_a_flexible_reservation() {
    let tmp = tempfile::tempdir().unwrap();
    let supervisor = SupervisorCommand {
        program: BIN.into(),
        args: vec!["supervise".into()],
        launcher: Some(vec!["supervise-launcher".into()]),
    };
    let tok = koalesce_server::create_token(tmp.path(), "alice", false).unwrap();
    let mut opts = koalesce_server::test_options(tmp.path(), &[("vu", 8)], supervisor);
    opts.config.sites[0].reservations = true;
    let srv = BackgroundServer::start(opts).unwrap();
    let url = srv.url();
    let create = |args: &[&str]| {
        let (code, out, err) = cli(&url, &tok, &[&["create", "--site", "vu", "--json"][..], args].concat());
        assert_eq!(code, 0, "{out}{err}");
        serde_json::from_str::<Value>(&out).unwrap()["reservation"].clone()
    };
    let flex = create(&["--cpus", "8", "--duration", "1h", "--start", "2h", "--latest", "10h", "--flexible"]);
    let fixed = create(&["--cpus", "8", "--duration", "30m", "--start", "2h"]);
    // The fixed one's start (2 h from its own `now`, a few ms after the flexible one's)
    // overlaps the flexible one: the site moved the flexible one behind it.
    assert!(fixed["start_ms"].as_u64() < flex["end_ms"].as_u64(), "{fixed} {flex}");
    // START, END: "YYYY-MM-DD HH:MM:SS" each.
    let (code, out, _) = cli(&url, &tok, &["list"]);
    assert_eq!(code, 0);
    let row = |id: &Value| -> Vec<String> {
        let line = out
            .lines()
            .find(|l| l.starts_with(id.as_str().unwrap()))
            .unwrap_or_else(|| panic!("{out}"));
        let t: Vec<&str> = line.split_whitespace().collect();
        vec![
            format!("{} {}", t[4], t[5]),
            format!("{} {}", t[6], t[7]),
            t[8].to_string(),
            t[9].to_string(),
        ]
    };
    let (f, x) = (row(&flex["id"]), row(&fixed["id"]));
    assert_eq!(f[0], x[1], "the flexible one now starts where the fixed one ends:\n{out}");
    assert_ne!(f[0], x[0], "{out}");
    assert_eq!((f[2].as_str(), f[3].as_str(), x[3].as_str()), ("waiting", "yes", "no"), "{out}");
    let (code, out, _) = cli(&url, &tok, &["show", flex["id"].as_str().unwrap(), "--json"]);
    assert_eq!(code, 0);
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["start_ms"], fixed["end_ms"], "{shown}");
}
