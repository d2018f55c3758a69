//! End-to-end tests of `koalesce sim` and `koalesce bench easy`: the real binary on the shipped
//! scenario, on a real trace, and on bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn koalesce(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_koalesce"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("run koalesce")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A fresh directory, removed when the guard is dropped (also when the test fails), and the
/// path NAME inside it.
fn tmp(name: &str) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::Builder::new()
        .prefix("koalesce-sim-e2e-")
        .tempdir()
        .expect("a temporary directory");
    let p = d.path().join(name);
    (d, p)
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn shipped_scenario_runs_with_cf_and_wf_and_repeats_byte_for_byte() {
    let mut outputs = Vec::new();
    for (policy, dir) in [("cf", "cf1"), ("cf", "cf2"), ("wf", "wf")] {
        let (_tmp, out) = tmp(dir);
        let o = koalesce(&[
            "sim",
            "scenarios/das2-w30.toml",
            "--policy",
            policy,
            "--seed",
            "3",
            "--out",
            out.to_str().unwrap(),
            "-q",
        ]);
        assert!(o.status.success(), "{}", text(&o));
        let stdout = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(stdout.contains(&format!("policy {}", policy.to_uppercase())), "{stdout}");
        assert!(stdout.contains("jobs 200: 200 succeeded"), "{stdout}");
        for f in ["jobs.csv", "utilization.csv", "utilization.svg", "summary.txt"] {
            assert!(out.join(f).is_file(), "{f} missing");
        }
        let jobs = std::fs::read_to_string(out.join("jobs.csv")).unwrap();
        let header = jobs.lines().next().unwrap();
        for col in [
            "job_id",
            "submit",
            "placed",
            "claimed",
            "start",
            "end",
            "ftt_ms",
            "components",
            "size",
            "sites",
            "placement_tries",
            "claiming_tries",
        ] {
            assert!(header.split(',').any(|c| c == col), "column {col} missing from {header}");
        }
        assert_eq!(jobs.lines().count(), 201);
        assert!(std::fs::read_to_string(out.join("utilization.svg")).unwrap().contains("<svg "));
        outputs.push((jobs, std::fs::read(out.join("utilization.csv")).unwrap()));
    }
    assert_eq!(outputs[0], outputs[1], "same seed, different output");
    assert_ne!(outputs[0].0, outputs[2].0, "CF and WF gave the same schedule");
}

#[test]
fn single_cluster_mode_writes_the_jobs_csv() {
    let (_tmp, out) = tmp("kth");
    let o = koalesce(&[
        "sim",
        "--trace",
        "../shared/traces/KTH-SP2-1996-2.1-cln.swf.gz",
        "--procs",
        "100",
        "--policy",
        "fcfs",
        "--out",
        out.to_str().unwrap(),
        "-q",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let csv = std::fs::read_to_string(out.join("jobs.csv")).unwrap();
    assert!(csv.starts_with("job_id,submit,start,end,procs"), "{}", &csv[..80]);
    assert!(csv.lines().count() > 28_000);
}

fn fails_with(args: &[&str], needles: &[&str]) {
    let o = koalesce(args);
    let t = text(&o);
    assert!(!o.status.success(), "expected failure: {args:?}\n{t}");
    assert!(!t.contains("panicked"), "{t}");
    for n in needles {
        assert!(t.contains(n), "'{n}' missing from: {t}");
    }
}

fn scenario_with(extra: &str, name: &str) -> (tempfile::TempDir, PathBuf) {
    let base = std::fs::read_to_string(repo().join("scenarios/das2-w30.toml")).unwrap();
    let (d, p) = tmp(name);
    let p = p.with_extension("toml");
    std::fs::write(&p, base.replace("[scheduler]", &format!("{extra}\n[scheduler]"))).unwrap();
    (d, p)
}

#[test]
fn bad_input_is_named_and_never_panics() {
    fails_with(
        &["sim", "scenarios/das2-w30.toml", "--policy", "bestfit", "-q"],
        &["--policy", "bestfit"],
    );
    fails_with(&["sim", "--trace", "no/such/trace.swf", "--procs", "10"], &["no/such/trace.swf"]);
    fails_with(
        &[
            "sim",
            "--trace",
            "../shared/traces/KTH-SP2-1996-2.1-cln.swf.gz",
            "--procs",
            "10",
            "--policy",
            "sjf",
        ],
        &["sjf"],
    );
    fails_with(&["sim", "no-such-scenario.toml"], &["no-such-scenario.toml"]);

    let (_tmp_unknown_key, p) = scenario_with("[faults]\nsoft_error_probabilty = { vu = 0.1 }", "unknown-key");
    fails_with(
        &["sim", p.to_str().unwrap(), "-q"],
        &[p.file_name().unwrap().to_str().unwrap(), "soft_error_probabilty"],
    );
    let text = std::fs::read_to_string(repo().join("scenarios/das2-w30.toml")).unwrap();
    let (_tmp_negative_bw, p) = tmp("negative-bw");
    let p = p.with_extension("toml");
    std::fs::write(&p, text.replace("wan_mbps = ", "wan_mbps = -")).unwrap();
    fails_with(&["sim", p.to_str().unwrap(), "-q"], &["network.wan_mbps", "positive"]);
    let (_tmp_too_large, p) = tmp("too-large");
    let p = p.with_extension("toml");
    std::fs::write(&p, text.replace("replicas = 3", "replicas = 3\nshapes = [[1, 500]]")).unwrap();
    fails_with(&["sim", p.to_str().unwrap(), "-q"], &["workload.shapes", "500"]);
    let (_tmp_bad_swf, p) = tmp("bad-swf");
    let p = p.with_extension("swf");
    std::fs::write(&p, "; header\n1 0 0 10 4 -1 -1 4 20 -1 1 1 1 1 1 1 -1 -1\n2 zero 0 10\n").unwrap();
    fails_with(
        &["sim", "--trace", p.to_str().unwrap(), "--procs", "8"],
        &[p.to_str().unwrap(), ":3"],
    );
}

#[test]
fn a_closed_stdout_ends_the_command_quietly_not_with_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let (_tmp, out) = tmp("pipe");
    let mut child = Command::new(env!("CARGO_BIN_EXE_koalesce"))
        .args(["sim", "scenarios/das2-w30.toml", "--seed", "1", "-q", "--out"])
        .arg(&out)
        .current_dir(repo())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run koalesce");
    // Close the reading end before the summary is printed, as `| head -0` would.
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        o.status.success() || o.status.signal() == Some(13),
        "ended with {:?}: {stderr}",
        o.status
    );
}

#[test]
fn an_error_names_its_cause_once() {
    let o = koalesce(&["sim", "no-such-scenario.toml"]);
    assert_eq!(o.status.code(), Some(2));
    let t = text(&o);
    assert!(t.contains("no-such-scenario.toml"), "{t}");
    assert_eq!(t.matches("No such file or directory").count(), 1, "{t}");
    let o = koalesce(&["sim", "--trace", "/no/such/trace.swf", "--procs", "4"]);
    let t = text(&o);
    assert_eq!(t.matches("No such file or directory").count(), 1, "{t}");
}
