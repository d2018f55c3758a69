//! Local executor: supervisor records, fencing, slots, checksum-verified copies.

mod common;

use common::{wait_file, wait_terminal};

use std::path::Path;
use std::time::{Duration, Instant};

use koalesce_server::backend::{Backend, BarrierState, ComponentSubmission, LrmState};
use koalesce_server::local::LocalBackend;
use koalesce_server::supervise::{self, ExitRecord, SupervisorRecord};
use koalesce_server::transfer;

fn sub(dir: &Path, claim: String, script: &str) -> ComponentSubmission {
    ComponentSubmission {
        site: "a".into(),
        user: "tester".into(),
        processors: 2,
        claim,
        dir: dir.to_path_buf(),
        executable: "/bin/sh".into(),
        arguments: vec!["-c".into(), script.into()],
        environment: [("GREETING".to_string(), "hello".to_string())].into(),
        time_limit_ms: 60_000,
        memory_limit: None,
        working_directory: None,
        nonce: NONCE.into(),
        early_signal: None,
    }
}

/// The launch nonce of the components these tests submit.
const NONCE: &str = "5eed0000000000000000000000000001";

/// Waits until the held component is ready at its start barrier, then starts it.
fn start_when_ready(b: &LocalBackend, id: &str) {
    let ids = [id.to_string()];
    let deadline = Instant::now() + Duration::from_secs(20);
    while !b.ready(&ids)[0].1 {
        assert!(Instant::now() < deadline, "supervisor never reached its start barrier");
        std::thread::sleep(Duration::from_millis(5));
    }
    b.start(&ids).unwrap();
}

#[test]
fn supervisor_records_survive_and_a_launch_never_runs_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let b = LocalBackend::new("a", 4, false, common::supervisor());
    let claim = b.claim("a", 2).unwrap();
    let dir = tmp.path().join("sites/a/jobs/1/a1-c0");
    let id = b
        .submit(&sub(&dir, claim.clone(), "echo $GREETING; echo run >> runs; exit 3"))
        .unwrap();
    start_when_ready(&b, &id);
    let st = wait_terminal(&b, &id);
    assert!(matches!(st, LrmState::Failed { exit_code: Some(3), .. }), "{st:?}");
    // The records are on disk, complete, and readable by a fresh backend (a restarted daemon).
    let rec: SupervisorRecord = supervise::read_json(&dir.join(supervise::SUPERVISOR_FILE)).unwrap();
    assert!(rec.pid > 0 && !rec.fenced);
    let exit: ExitRecord = supervise::read_json(&dir.join(supervise::EXIT_FILE)).unwrap();
    assert_eq!(exit.exit_code, Some(3));
    assert_eq!(std::fs::read_to_string(dir.join("stdout")).unwrap(), "hello\n");
    let b2 = LocalBackend::new("a", 4, false, common::supervisor());
    let claim2 = b2.adopt(&id, "a", 2, NONCE).unwrap();
    assert!(matches!(
        b2.status(std::slice::from_ref(&id)).pop().unwrap().1,
        LrmState::Failed { exit_code: Some(3), .. }
    ));
    // A second supervisor on the same directory refuses to run the program.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_koalesce-supervise"))
        .args(["--dir", dir.to_str().unwrap(), "--", "/bin/sh", "-c", "echo run >> runs"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(std::fs::read_to_string(supervise::work_dir(&dir).join("runs")).unwrap(), "run\n");
    b.release(&claim);
    b2.release(&claim2);
}

/// Issue 8, item 3: an exit record is believed only with its launch's nonce. A stale record
/// (another launch's, left in a reused directory) or a forged one (no nonce) never makes a
/// component succeed: not while it runs, not for a restarted daemon that adopts it.
#[test]
fn an_exit_record_of_another_launch_is_not_believed() {
    let tmp = tempfile::tempdir().unwrap();
    let b = LocalBackend::new("a", 4, false, common::supervisor());
    // A finished launch whose record could be taken for another's.
    let old_dir = tmp.path().join("sites/a/jobs/5/a1-c0");
    let old_claim = b.claim("a", 2).unwrap();
    let old = b
        .submit(&ComponentSubmission {
            nonce: "01d".into(),
            ..sub(&old_dir, old_claim.clone(), "exit 0")
        })
        .unwrap();
    start_when_ready(&b, &old);
    assert_eq!(wait_terminal(&b, &old), LrmState::Completed);
    b.release(&old_claim);
    let stale = std::fs::read(old_dir.join(supervise::EXIT_FILE)).unwrap();
    // The launch under attack runs a while, then fails.
    let dir = tmp.path().join("sites/a/jobs/6/a1-c0");
    let claim = b.claim("a", 2).unwrap();
    let id = b.submit(&sub(&dir, claim.clone(), "sleep 3; exit 7")).unwrap();
    start_when_ready(&b, &id);
    let forged = br#"{"exit_code":0,"signal":null,"spawn_error":null,"finished_ms":1}"#;
    for record in [&stale[..], &forged[..]] {
        std::fs::write(dir.join(supervise::EXIT_FILE), record).unwrap();
        assert_eq!(b.status(std::slice::from_ref(&id)).pop().unwrap().1, LrmState::Running);
        assert!(!b.ready(std::slice::from_ref(&id))[0].1);
        // A restarted daemon adopts the launch with the nonce stored with it.
        let b2 = LocalBackend::new("a", 4, false, common::supervisor());
        assert_eq!(b2.barrier_state(&id, NONCE).unwrap(), BarrierState::Released);
        let c2 = b2.adopt(&id, "a", 2, NONCE).unwrap();
        assert_eq!(b2.status(std::slice::from_ref(&id)).pop().unwrap().1, LrmState::Running);
        b2.release(&c2);
    }
    // The real outcome replaces the forgery.
    let st = wait_terminal(&b, &id);
    assert!(matches!(st, LrmState::Failed { exit_code: Some(7), .. }), "{st:?}");
    let exit: ExitRecord = supervise::read_json(&dir.join(supervise::EXIT_FILE)).unwrap();
    assert_eq!(exit.nonce, NONCE);
    let rec: SupervisorRecord = supervise::read_json(&dir.join(supervise::SUPERVISOR_FILE)).unwrap();
    assert_eq!(rec.nonce, NONCE);
    // Read with another launch's nonce, the directory's records are no outcome of that launch.
    let b3 = LocalBackend::new("a", 4, false, common::supervisor());
    let c3 = b3.adopt(&id, "a", 2, "0ther").unwrap();
    let st = b3.status(std::slice::from_ref(&id)).pop().unwrap().1;
    assert!(matches!(st, LrmState::NodeFail { .. }), "{st:?}");
    b3.release(&c3);
    b.release(&claim);
}

#[test]
fn a_fenced_directory_never_starts_and_reports_a_soft_error() {
    let tmp = tempfile::tempdir().unwrap();
    let b = LocalBackend::new("a", 4, false, common::supervisor());
    let dir = tmp.path().join("sites/a/jobs/9/a1-c0");
    // A restarted daemon finds an intent without a record: it fences.
    let st = b.status(&[dir.display().to_string()]).pop().unwrap().1;
    assert!(matches!(st, LrmState::NodeFail { .. }), "{st:?}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_koalesce-supervise"))
        .args(["--dir", dir.to_str().unwrap(), "--", "/bin/sh", "-c", "touch ran"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(!supervise::work_dir(&dir).join("ran").exists());
}

#[test]
fn a_held_component_runs_only_once_started_and_gives_up_on_abort() {
    let tmp = tempfile::tempdir().unwrap();
    let b = LocalBackend::new("a", 4, false, common::supervisor());
    let (go_dir, abort_dir) = (tmp.path().join("sites/a/jobs/3/a1-c0"), tmp.path().join("sites/a/jobs/3/a1-c1"));
    let go = b.submit(&sub(&go_dir, b.claim("a", 2).unwrap(), "touch ran")).unwrap();
    let abort = b.submit(&sub(&abort_dir, b.claim("a", 2).unwrap(), "touch ran")).unwrap();
    let ids = [go.clone(), abort.clone()];
    let deadline = Instant::now() + Duration::from_secs(20);
    while !b.ready(&ids).iter().all(|(_, r)| *r) {
        assert!(Instant::now() < deadline, "supervisors never reached their start barrier");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Held: up (and running as far as the LRM is concerned), but the program has not started.
    std::thread::sleep(Duration::from_millis(200));
    let ran = |d: &Path| supervise::work_dir(d).join("ran").exists();
    assert!(!ran(&go_dir) && !ran(&abort_dir));
    assert_eq!(b.barrier_state(&go, NONCE).unwrap(), BarrierState::Held { alive: true });
    assert_eq!(b.status(std::slice::from_ref(&go)).pop().unwrap().1, LrmState::Running);
    // Abort one: it records that it never started and is a soft error, not an application error.
    b.abort_held(&abort).unwrap();
    let st = wait_terminal(&b, &abort);
    assert!(matches!(st, LrmState::NodeFail { .. }), "{st:?}");
    let exit: ExitRecord = supervise::read_json(&abort_dir.join(supervise::EXIT_FILE)).unwrap();
    assert!(exit.never_started && !exit.success(), "{exit:?}");
    assert!(!ran(&abort_dir));
    assert_eq!(b.barrier_state(&abort, NONCE).unwrap(), BarrierState::Held { alive: false });
    // Starting a launch of which one is not ready starts none.
    assert!(b.start(&ids).is_err());
    assert!(!go_dir.join(supervise::GO_FILE).exists());
    b.start(std::slice::from_ref(&go)).unwrap();
    assert_eq!(wait_terminal(&b, &go), LrmState::Completed);
    assert!(ran(&go_dir));
    assert_eq!(b.barrier_state(&go, NONCE).unwrap(), BarrierState::Released);
    // A directory nobody took is fenced by the check.
    let empty = tmp.path().join("sites/a/jobs/3/a1-c2").display().to_string();
    assert_eq!(b.barrier_state(&empty, NONCE).unwrap(), BarrierState::Fenced);
    assert!(supervise::read_json::<SupervisorRecord>(&Path::new(&empty).join(supervise::SUPERVISOR_FILE)).is_some_and(|r| r.fenced));
}

#[test]
fn claims_never_exceed_slots() {
    let b = LocalBackend::new("a", 4, false, common::supervisor());
    let c1 = b.claim("a", 3).unwrap();
    assert!(b.claim("a", 2).is_err());
    let c2 = b.claim("a", 1).unwrap();
    assert_eq!(b.processors("a").unwrap().idle, 0);
    b.release(&c1);
    assert_eq!(b.processors("a").unwrap().idle, 3);
    b.release(&c2);
    assert_eq!(b.peak_used(), 4);
}

#[test]
fn cancel_kills_the_component() {
    let tmp = tempfile::tempdir().unwrap();
    let b = LocalBackend::new("a", 4, false, common::supervisor());
    let claim = b.claim("a", 2).unwrap();
    let dir = tmp.path().join("sites/a/jobs/2/a1-c0");
    let id = b.submit(&sub(&dir, claim, "sleep 30")).unwrap();
    start_when_ready(&b, &id);
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.status(std::slice::from_ref(&id)).pop().unwrap().1 != LrmState::Running {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(10));
    }
    b.cancel(&id).unwrap();
    let st = wait_terminal(&b, &id);
    assert!(matches!(st, LrmState::NodeFail { .. } | LrmState::Failed { .. }), "{st:?}");
}

#[test]
fn checksum_verified_copy_refuses_a_corrupted_source() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src.bin");
    std::fs::write(&src, b"the real data").unwrap();
    let (sha, size) = transfer::checksum(&src).unwrap();
    let dest = tmp.path().join("dest/file");
    let ok = transfer::copy_verified(&src, &dest, Some((&sha, size))).unwrap();
    assert_eq!(ok.sha256, sha);
    std::fs::remove_file(&dest).unwrap();
    std::fs::write(&src, b"the REAL data").unwrap(); // same size, other content
    let err = transfer::copy_verified(&src, &dest, Some((&sha, size))).unwrap_err();
    assert!(err.to_string().contains("checksum mismatch"), "{err}");
    assert!(!dest.exists(), "a corrupted copy must not land");
    let leftovers: Vec<_> = std::fs::read_dir(dest.parent().unwrap()).unwrap().collect();
    assert!(leftovers.is_empty(), "temporary not removed");
}

/// `go` is the supervisor record under a second name: letting a component run costs no new
/// inode (the largest per-launch cost on this machine's file system, see docs/operations.md).
#[test]
fn go_is_the_supervisor_record_under_a_second_name() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let b = LocalBackend::new("a", 4, false, common::supervisor());
    let dir = tmp.path().join("sites/a/jobs/9/a1-c0");
    let id = b.submit(&sub(&dir, b.claim("a", 2).unwrap(), "echo ran")).unwrap();
    start_when_ready(&b, &id);
    assert_eq!(wait_terminal(&b, &id), LrmState::Completed);
    assert_eq!(std::fs::read_to_string(dir.join("stdout")).unwrap(), "ran\n");
    let (go, rec) = (
        std::fs::metadata(dir.join(supervise::GO_FILE)).unwrap(),
        std::fs::metadata(dir.join(supervise::SUPERVISOR_FILE)).unwrap(),
    );
    assert_eq!(go.ino(), rec.ino(), "go is a hard link of the supervisor record");
    // Released twice (recovery writes missing go files): still fine, still the same record.
    supervise::release(&dir).unwrap();
    assert_eq!(std::fs::metadata(dir.join(supervise::GO_FILE)).unwrap().ino(), rec.ino());
}

/// Set up before the barrier, only the exec after: a held supervisor has its working
/// directory, output files and control group (with the program's process forked into it,
/// confined, waiting), and nothing ran. A SIGTERM there (Slurm's `scancel` of a held job)
/// makes it give up as an abort does: `never_started`, the control group removed, the gated
/// process gone, the program never run.
#[test]
fn a_held_supervisor_is_set_up_and_gives_up_cleanly_at_sigterm() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sites/a/jobs/4/a1-c0");
    let parent = format!("koalesce-test-held-{}", std::process::id());
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_koalesce-supervise"))
        .args(["--dir", dir.to_str().unwrap(), "--cgroup-parent", &parent])
        .args(["--", "/bin/sh", "-c", "touch ran"])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !dir.join(supervise::HELD_FILE).exists() {
        assert!(Instant::now() < deadline, "the supervisor never reported itself held");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(supervise::work_dir(&dir).is_dir() && dir.join(supervise::STDOUT_FILE).exists());
    let cg = koalesce_server::cgroup::Cgroup::recorded(&dir);
    if let Some(cg) = &cg {
        assert_eq!(
            cg.pids().len(),
            1,
            "the program's process waits in its control group: {:?}",
            cg.pids()
        );
    }
    std::thread::sleep(Duration::from_millis(100));
    assert!(!supervise::work_dir(&dir).join("ran").exists(), "ran before go");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "it records its outcome and exits normally");
    let exit: ExitRecord = supervise::read_json(&dir.join(supervise::EXIT_FILE)).unwrap();
    assert!(
        exit.never_started && exit.spawn_error.as_deref().unwrap_or("").contains("SIGTERM"),
        "{exit:?}"
    );
    assert!(!supervise::work_dir(&dir).join("ran").exists());
    if let Some(cg) = cg {
        assert!(!cg.exists(), "the control group is removed");
    }
    for c in ["memory", "pids", "freezer", "cpu"] {
        let _ = std::fs::remove_dir(format!("/sys/fs/cgroup/{c}/{parent}"));
    }
}

/// A supervisor whose launch directory is gone (cancelled and cleaned up before the
/// supervisor got to run) does not re-create it and wait there for ever.
#[test]
fn a_supervisor_started_after_its_directory_was_removed_does_not_start() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sites/a/jobs/5/a1-c0");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_koalesce-supervise"))
        .args(["--dir", dir.to_str().unwrap(), "--", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    assert!(!tmp.path().join("sites").exists(), "nothing re-created");
}

/// Field `n` (1-based, after the command's name) of `/proc/PID/stat`.
fn stat_field(pid: &str, n: usize) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    after_name.split(' ').nth(n - 3).unwrap().to_string()
}

fn remove_parent(parent: &str) {
    for c in ["memory", "pids", "freezer", "cpu"] {
        let _ = std::fs::remove_dir(format!("/sys/fs/cgroup/{c}/{parent}"));
    }
}

/// The start is real-time where permitted (root here): the supervisor waits at the barrier
/// and opens the gate at a real-time priority, the program's process passes its gate at one
/// too, but goes back to its normal policy, at the nice value it was started with, before it
/// execs: the program itself never runs real-time, and neither does the supervisor once the
/// program runs. The program reads its own policy and nice value (`/proc/$$/sched`, `stat`).
#[test]
fn the_start_is_real_time_but_the_program_never_is() {
    use koalesce_server::realtime;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sites/a/jobs/6/a1-c0");
    let parent = format!("koalesce-test-rt-{}", std::process::id());
    std::fs::create_dir_all(&dir).unwrap();
    // Whether this process may raise a thread at all (root, or an RLIMIT_RTPRIO).
    let permitted = std::thread::spawn(|| realtime::raise_thread().is_ok()).join().unwrap();
    let own_nice: i32 = stat_field("self", 19).parse().unwrap();
    // The program reports, then runs until the test lets it end (`proceed`).
    let gate = tmp.path().join("gate");
    std::fs::create_dir_all(&gate).unwrap();
    let script = format!(
        "sed -n 's/^policy *: *//p' /proc/$$/sched; cut -d' ' -f19 /proc/$$/stat; while [ ! -e '{}/proceed' ]; do sleep 0.02; done",
        gate.display()
    );
    let mut child = std::process::Command::new("nice")
        .args(["-n", "5", env!("CARGO_BIN_EXE_koalesce-supervise")])
        .args([
            "--dir",
            dir.to_str().unwrap(),
            "--cgroup-parent",
            &parent,
            "--read-write",
            gate.to_str().unwrap(),
        ])
        .args(["--", "/bin/sh", "-c", &script])
        .spawn()
        .unwrap();
    wait_file(&dir.join(supervise::HELD_FILE), "held");
    let rec: SupervisorRecord = supervise::read_json(&dir.join(supervise::SUPERVISOR_FILE)).unwrap();
    let sup_policy = realtime::policy(rec.pid).unwrap();
    if permitted {
        assert_eq!(sup_policy, libc::SCHED_FIFO, "the supervisor waits at the barrier real-time");
        if let Some(cg) = koalesce_server::cgroup::Cgroup::recorded(&dir) {
            let pids = cg.pids();
            assert_eq!(pids.len(), 1, "{pids:?}");
            assert_eq!(realtime::policy(pids[0] as u32).unwrap(), libc::SCHED_FIFO, "the gated process too");
        }
    } else {
        assert!(!realtime::is_realtime(sup_policy));
    }
    supervise::release(&dir).unwrap();
    wait_file(&dir.join(supervise::RUNNING_FILE), "running.json");
    // The program runs (it waits for `proceed`): the supervisor is back to normal.
    let sup_policy = realtime::policy(rec.pid).unwrap();
    assert!(
        !realtime::is_realtime(sup_policy),
        "the supervisor after the start: policy {sup_policy}"
    );
    std::fs::write(gate.join("proceed"), b"").unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let exit: ExitRecord = supervise::read_json(&dir.join(supervise::EXIT_FILE)).unwrap();
    assert!(exit.success(), "{exit:?}");
    let running = supervise::read_running(&dir).unwrap();
    assert_eq!(running.realtime, permitted, "{running:?}");
    let out = std::fs::read_to_string(dir.join(supervise::STDOUT_FILE)).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out:?}");
    assert_eq!(lines[0].trim(), "0", "the program runs SCHED_OTHER (0): {out:?}");
    assert_eq!(
        lines[1].trim().parse::<i32>().unwrap(),
        (own_nice + 5).min(19),
        "at the nice value it was started with"
    );
    remove_parent(&parent);
}

/// A component whose `go` is there before its supervisor starts (a launch of one component)
/// goes through at once: no `held`, no wait at the barrier, no real-time start.
#[test]
fn a_component_released_before_its_supervisor_starts_does_not_hold() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sites/a/jobs/7/a1-c0");
    let parent = format!("koalesce-test-pre-{}", std::process::id());
    std::fs::create_dir_all(&dir).unwrap();
    supervise::release(&dir).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_koalesce-supervise"))
        .args(["--dir", dir.to_str().unwrap(), "--cgroup-parent", &parent])
        .args(["--", "/bin/sh", "-c", "echo ran"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let exit: ExitRecord = supervise::read_json(&dir.join(supervise::EXIT_FILE)).unwrap();
    assert!(exit.success(), "{exit:?}");
    assert_eq!(std::fs::read_to_string(dir.join(supervise::STDOUT_FILE)).unwrap(), "ran\n");
    assert!(!dir.join(supervise::HELD_FILE).exists(), "it never held");
    let running = supervise::read_running(&dir).unwrap();
    assert!(
        !running.realtime && running.go_seen_ms > 0 && running.started_ms >= running.go_seen_ms,
        "{running:?}"
    );
    // The daemon's barrier counts it ready: checked in and released.
    assert!(koalesce_server::supervised::is_ready(&dir, "") || dir.join(supervise::EXIT_FILE).exists());
    remove_parent(&parent);
}

/// `--env-keep NAMES` (what a Slurm batch script passes): the program gets the named
/// variables and Slurm's, nothing else of the supervisor's environment; without it, all.
#[test]
fn env_keep_passes_the_named_and_slurms_variables_only() {
    let tmp = tempfile::tempdir().unwrap();
    let parent = format!("koalesce-test-env-{}", std::process::id());
    let run = |name: &str, keep: Option<&str>| -> String {
        let dir = tmp.path().join(format!("sites/a/jobs/8/{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        supervise::release(&dir).unwrap();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_koalesce-supervise"));
        cmd.args(["--dir", dir.to_str().unwrap(), "--cgroup-parent", &parent]);
        if let Some(k) = keep {
            cmd.args(["--env-keep", k]);
        }
        let out = cmd
            .args(["--", "/usr/bin/env"])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("SHELL", "/bin/bash")
            .env("SECRET", "x")
            .env("GREETING", "hello")
            .env("MODE", "a b")
            .env("SLURM_JOB_ID", "7")
            .env("SLURMD_NODENAME", "a1")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        std::fs::read_to_string(dir.join(supervise::STDOUT_FILE)).unwrap()
    };
    let kept = run("a1-c0", Some("GREETING,MODE"));
    for want in ["GREETING=hello\n", "MODE=a b\n", "SLURM_JOB_ID=7\n", "SLURMD_NODENAME=a1\n"] {
        assert!(kept.contains(want), "{want} missing: {kept}");
    }
    for gone in ["SECRET=", "SHELL="] {
        assert!(!kept.contains(gone), "{gone} kept: {kept}");
    }
    assert!(
        kept.contains("PATH=") && !kept.contains("PATH=/usr/bin:/bin\n"),
        "the default PATH: {kept}"
    );
    let all = run("a1-c1", None);
    assert!(all.contains("SECRET=x\n") && all.contains("SHELL=/bin/bash\n"), "{all}");
    remove_parent(&parent);
}

/// The resident launcher forks the supervisors: killed, it is started again at the next
/// launch, and the supervisors it forked run on (they lead sessions of their own): the
/// component held at its barrier when the launcher died still starts and records its outcome.
/// A supervisor forked by it writes no `supervisor.log` when it has nothing to say, and is
/// named after its job in `ps` (its comm).
#[test]
fn a_killed_launcher_is_started_again_and_its_supervisors_run_on() {
    let tmp = tempfile::tempdir().unwrap();
    let b = LocalBackend::new("a", 4, false, common::supervisor());
    assert_eq!(b.launcher_pid(), None, "started at the first launch, not before");
    let dir1 = tmp.path().join("sites/a/jobs/31/a1-c0");
    let c1 = b.claim("a", 2).unwrap();
    let id1 = b.submit(&sub(&dir1, c1.clone(), "echo $GREETING")).unwrap();
    let first = b.launcher_pid().expect("a launcher runs");
    // Held at the barrier: its supervisor lives, forked by the launcher.
    let ids = [id1.clone()];
    let deadline = Instant::now() + Duration::from_secs(20);
    while !b.ready(&ids)[0].1 {
        assert!(Instant::now() < deadline, "supervisor never reached its start barrier");
        std::thread::sleep(Duration::from_millis(5));
    }
    let rec: SupervisorRecord = supervise::read_json(&dir1.join(supervise::SUPERVISOR_FILE)).unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", rec.pid)).unwrap();
    let ppid: u32 = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(ppid, first, "the supervisor is the launcher's child");
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{}/comm", rec.pid)).unwrap().trim(),
        "ks:31/a1-c0"
    );
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(first as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.launcher_pid().is_some() {
        assert!(Instant::now() < deadline, "the killed launcher is still seen alive");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(supervise::supervisor_alive(&rec), "the supervisor outlives its launcher");
    // The next launch starts a new launcher.
    let dir2 = tmp.path().join("sites/a/jobs/32/a1-c0");
    let c2 = b.claim("a", 2).unwrap();
    let id2 = b.submit(&sub(&dir2, c2.clone(), "exit 0")).unwrap();
    let second = b.launcher_pid().expect("a new launcher runs");
    assert_ne!(first, second);
    start_when_ready(&b, &id1);
    start_when_ready(&b, &id2);
    assert_eq!(wait_terminal(&b, &id2), LrmState::Completed);
    assert_eq!(wait_terminal(&b, &id1), LrmState::Completed);
    assert_eq!(std::fs::read_to_string(dir1.join("stdout")).unwrap(), "hello\n");
    for d in [&dir1, &dir2] {
        assert!(!d.join(supervise::LOG_FILE).exists(), "nothing to say, no supervisor.log");
    }
    // A supervisor that has something to say writes it: a second one for the same directory.
    // (Through the launcher: the same fork, refused by the exclusive record.)
    let mut again = sub(&dir2, c2.clone(), "exit 0");
    again.claim = c2.clone();
    b.submit(&again).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(dir2.join(supervise::LOG_FILE)).is_ok_and(|l| l.contains("not starting twice")) {
        assert!(
            Instant::now() < deadline,
            "the refused supervisor's reason is not in supervisor.log"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    b.release(&c1);
    b.release(&c2);
}

/// The `se.slice` (ns) and nice value of the thread whose /proc directory is `path`.
fn slice_and_nice(path: &str) -> (u64, i32) {
    let sched = std::fs::read_to_string(format!("{path}/sched")).unwrap();
    let field = |name: &str| -> i64 {
        let line = sched
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} in {sched}"));
        line.rsplit(':').next().unwrap().trim().parse().unwrap()
    };
    (field("se.slice") as u64, field("prio") as i32 - 120)
}

/// What a favoured thread runs with here, or None when this kernel cannot favour one (no
/// `sched_setattr` for normal threads, or a kernel before 6.12 without custom slices).
fn favour_of_a_thread() -> Option<koalesce_server::priority::Favour> {
    use koalesce_server::priority;
    let favoured = std::thread::spawn(priority::favour_thread).join().unwrap().ok()?;
    (favoured.slice_ns == priority::SLICE_NS).then_some(favoured)
}

/// The daemon's threads are favoured (a short slice, and a lower nice value as root: see
/// `koalesce_server::priority`), but nothing it starts inherits that: the program and its
/// supervisor run at the default slice and at the test's own nice value. The program reports
/// its own and its supervisor's (`$PPID`) slice and priority from /proc.
#[test]
fn the_daemon_is_favoured_but_its_supervisors_and_programs_are_not() {
    use koalesce_server::priority;
    let Some(favoured) = favour_of_a_thread() else { return };
    let own_nice: i32 = stat_field("self", 19).parse().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let tok = common::token(tmp.path(), "alice", false);
    let srv = common::server(tmp.path(), &[("a", 2)]);
    let script = "for p in $$ $PPID; do sed -n 's/^se.slice *: *//p; s/^prio *: *//p' /proc/$p/sched; done";
    let id = common::submit(&srv, &tok, &common::shell_job("prio", script, 1, ""));
    let j = common::wait_state(&srv, &tok, id, &["succeeded", "failed"], 30);
    assert_eq!(j["state"], "succeeded", "{j}");
    let out = std::fs::read_to_string(j["components"][0]["stdout"].as_str().unwrap()).unwrap();
    let v: Vec<i64> = out.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(v.len(), 4, "{out:?}");
    // /proc/PID/sched lists prio before se.slice.
    for (who, prio, slice) in [("program", v[0], v[1]), ("supervisor", v[2], v[3])] {
        assert_ne!(slice as u64, priority::SLICE_NS, "the {who} runs at the default slice: {out:?}");
        assert_eq!(
            prio - 120,
            own_nice.max(0) as i64,
            "the {who} runs at the normal nice value: {out:?}"
        );
    }
    // The database writer (which every acknowledgement waits for) is favoured.
    let writers: Vec<(u64, i32)> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .map(|t| t.path().display().to_string())
        .filter(|p| std::fs::read_to_string(format!("{p}/comm")).is_ok_and(|c| c.trim() == "koalesce-db-wri"))
        .map(|p| slice_and_nice(&p))
        .collect();
    assert!(!writers.is_empty());
    for (slice, nice) in writers {
        assert_eq!(slice, priority::SLICE_NS);
        assert_eq!(nice, favoured.nice);
    }
}

/// The server's runtime threads are favoured while it has a component claimed or running,
/// and back at their own priority once it has had none for `RUNTIME_FAVOUR_HOLD`: a
/// queue-only server's workers do not preempt the clients on its host (see
/// `koalesce_server::priority`). Read with `sched_getattr` for each of the runtime's threads.
#[test]
fn the_runtime_is_favoured_while_components_run_and_not_when_none_do() {
    use koalesce_server::priority;
    let Some(favoured) = favour_of_a_thread() else { return };
    let own_nice: i32 = stat_field("self", 19).parse().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let tok = common::token(tmp.path(), "alice", false);
    let srv = common::server(tmp.path(), &[("a", 2)]);
    let threads = srv.shared().threads.clone();
    let attrs = || -> Vec<(i32, u64)> {
        threads
            .tids()
            .iter()
            .filter_map(|&t| priority::of(t).ok())
            .map(|f| (f.nice, f.slice_ns))
            .collect()
    };
    let normal = |a: &[(i32, u64)]| !a.is_empty() && a.iter().all(|&(nice, slice)| nice == own_nice && slice != priority::SLICE_NS);
    assert!(normal(&attrs()), "no component yet: {:?}", attrs());

    let id = common::submit(&srv, &tok, &common::shell_job("busy", "sleep 2", 1, ""));
    let j = common::wait_state(&srv, &tok, id, &["running", "succeeded", "failed"], 30);
    assert_eq!(j["state"], "running", "{j}");
    let during = attrs();
    assert!(
        during.len() >= 2 && during.iter().all(|&a| a == (favoured.nice, priority::SLICE_NS)),
        "favoured while the component runs: {during:?}"
    );

    let j = common::wait_state(&srv, &tok, id, &["succeeded", "failed"], 30);
    assert_eq!(j["state"], "succeeded", "{j}");
    let deadline = Instant::now() + priority::RUNTIME_FAVOUR_HOLD + Duration::from_secs(10);
    while !normal(&attrs()) {
        assert!(Instant::now() < deadline, "still favoured with no component: {:?}", attrs());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!threads.favoured());
}

/// sbatch's `--signal`: a real job traps the early signal, which comes its seconds before the
/// wall-time limit; `B:` reaches the program (the batch shell) alone, otherwise every other
/// process of the component gets it but not the shell, as Slurm spares the batch shell (which,
/// without a trap, would die of it).
#[test]
fn an_early_signal_comes_before_the_time_limit_to_the_shell_or_to_every_process() {
    use koalesce_api::timing::EarlySignal;
    let tmp = tempfile::tempdir().unwrap();
    let b = LocalBackend::new("a", 4, false, common::supervisor());
    for (k, batch_only) in [(0, false), (1, true)] {
        let dir = tmp.path().join(format!("sites/a/jobs/{k}/a1-c0"));
        // In the program's working directory (the sandbox lets it write there only).
        let got = dir.join("work/got");
        let g = "got";
        // Whoever gets the signal records when it came (ms since the shell started): the shell
        // then ends its child, the child ends itself.
        let script = format!(
            "export t0=$(date +%s%3N); \
             sh -c 'trap \"echo child \\$(( \\$(date +%s%3N) - t0 )) >> {g}; exit 0\" USR1; while :; do sleep 0.05; done' & c=$!; \
             trap 'echo shell $(( $(date +%s%3N) - t0 )) >> {g}; sleep 0.3; kill $c 2>/dev/null' USR1; \
             wait $c; wait $c; echo done >> {g}"
        );
        let claim = b.claim("a", 2).unwrap();
        let id = b
            .submit(&ComponentSubmission {
                time_limit_ms: 6_000,
                early_signal: Some(EarlySignal {
                    signal: 10,
                    before_s: 3,
                    batch_only,
                }),
                ..sub(&dir, claim.clone(), &script)
            })
            .unwrap();
        start_when_ready(&b, &id);
        let end = wait_terminal(&b, &id);
        let err = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
        assert_eq!(end, LrmState::Completed, "the trap ended the job before its limit; stderr: {err}");
        b.release(&claim);
        let text = std::fs::read_to_string(&got).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let when = |who: &str| {
            lines
                .iter()
                .find_map(|l| l.strip_prefix(who))
                .map(|t| t.trim().parse::<u64>().unwrap())
        };
        let (shell, child) = (when("shell "), when("child "));
        assert_eq!(lines.last(), Some(&"done"), "{text:?}");
        let at = if batch_only {
            assert!(child.is_none(), "B: the batch shell alone: {text:?}");
            shell.unwrap_or_else(|| panic!("B: the shell got no signal: {text:?}"))
        } else {
            assert!(shell.is_none(), "without B: the batch shell is spared, as Slurm's: {text:?}");
            child.unwrap_or_else(|| panic!("without B: the other processes got no signal: {text:?}"))
        };
        assert!((2_000..4_500).contains(&at), "3 s before a 6 s limit, came at {at} ms: {text:?}");
    }
}
