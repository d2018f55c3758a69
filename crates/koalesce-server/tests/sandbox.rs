//! The sandbox's mechanisms one by one: a memory limit enforced by the component's control
//! group and its OOM kill recorded, the HTTP connection cap with its header timeout.
//! (The attacks themselves are played against the real binary in
//! `crates/koalesce/tests/attacks.rs`.)

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use koalesce_server::backend::{Backend, LrmState};
use koalesce_server::local::LocalBackend;
use koalesce_server::supervise::{self, ExitRecord, SupervisorRecord};

fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(secs), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A program that allocates past a small memory limit is killed by the kernel's OOM killer,
/// and the supervisor records that it was (the job fails naming it; cgroups are required:
/// this test runs as root, as CI does).
#[test]
fn a_component_over_its_memory_limit_is_oom_killed_and_that_is_recorded() {
    assert!(nix::unistd::geteuid().is_root(), "control groups need root (CI runs as root)");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sites/a/jobs/1/a1-c0");
    std::fs::create_dir_all(&dir).unwrap(); // made by whoever starts the supervisor
    let parent = format!("ksec1-oom-{}", std::process::id());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_koalesce-supervise"))
        .args([
            "--dir",
            dir.to_str().unwrap(),
            "--memory-limit",
            "33554432",
            "--cgroup-parent",
            &parent,
            "--",
        ])
        .args(["/bin/sh", "-c", "x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo ${#x}"])
        .spawn()
        .unwrap();
    wait_for("the supervisor's record", 10, || {
        supervise::read_json::<SupervisorRecord>(&dir.join(supervise::SUPERVISOR_FILE)).is_some()
    });
    supervise::release(&dir).unwrap();
    assert!(child.wait().unwrap().success());
    let exit: ExitRecord = supervise::read_json(&dir.join(supervise::EXIT_FILE)).unwrap();
    assert!(exit.oom_killed && exit.signal == Some(9) && !exit.success(), "{exit:?}");
    let b = LocalBackend::new("a", 1, false, common::supervisor());
    match b.status(&[dir.display().to_string()]).pop().unwrap().1 {
        LrmState::OutOfMemory { reason } => assert!(reason.contains("OOM killer"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // The group is gone with the component.
    for c in ["memory", "pids", "freezer"] {
        let p = Path::new("/sys/fs/cgroup").join(c).join(&parent);
        assert_eq!(
            std::fs::read_dir(&p)
                .map(|d| d.flatten().filter(|e| e.path().is_dir()).count())
                .unwrap_or(0),
            0
        );
        let _ = std::fs::remove_dir(p);
    }
}

/// No more than `max_connections` at once: a further client waits until an idle connection
/// is closed by the header timeout, then is served.
#[test]
fn connections_are_capped_and_idle_ones_time_out() {
    let tmp = tempfile::tempdir().unwrap();
    let mut opts = koalesce_server::test_options(tmp.path(), &[("a", 1)], common::supervisor());
    opts.config.max_connections = 4;
    opts.config.header_timeout_ms = 1000;
    let srv = koalesce_server::BackgroundServer::start(opts).unwrap();
    let idle: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(srv.addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    let mut c = TcpStream::connect(srv.addr).unwrap();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    c.set_read_timeout(Some(Duration::from_millis(400))).unwrap();
    let mut buf = [0u8; 256];
    assert!(c.read(&mut buf).is_err(), "served beyond the connection cap");
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(4),
        "{waited:?}"
    );
    for mut i in idle {
        i.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        assert_eq!(i.read(&mut buf).unwrap_or(0), 0, "an idle connection was not closed");
    }
}

/// The local executor starts supervisors in a process group of their own (posix_spawn), not a
/// session, so they are still in the daemon's session. A daemon run from a terminal must not
/// hand that terminal to jobs: the supervisor gives up the controlling terminal before the
/// program starts (the program could otherwise open /dev/tty, type into the admin's shell
/// with TIOCSTI where the kernel allows it, or be stopped by the terminal's job control).
/// Here `script` gives a shell a terminal, and the shell's job control puts the supervisor in
/// a process group of its own, as the daemon does.
#[test]
fn a_supervisor_in_a_process_group_gives_its_program_no_controlling_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sites/a/jobs/1/a1-c0");
    std::fs::create_dir_all(&dir).unwrap(); // made by whoever starts the supervisor
    let run = tmp.path().join("run.sh");
    std::fs::write(
        &run,
        "set -m\n\"$SUP\" --dir \"$DIR\" --cgroup-parent \"$CG\" -- /bin/sh -c 'exec cat /proc/self/stat' &\nwait\n",
    )
    .unwrap();
    let cmd = format!("bash {}", run.display());
    let parent = format!("ksec1-tty-{}", std::process::id());
    let mut script = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("SUP", env!("CARGO_BIN_EXE_koalesce-supervise"))
        .env("DIR", &dir)
        .env("CG", &parent)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("script(1) from util-linux");
    wait_for("the supervisor's record", 20, || {
        supervise::read_json::<SupervisorRecord>(&dir.join(supervise::SUPERVISOR_FILE)).is_some()
    });
    let rec: SupervisorRecord = supervise::read_json(&dir.join(supervise::SUPERVISOR_FILE)).unwrap();
    let pgid = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(rec.pid as i32))).unwrap();
    let sid = nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(rec.pid as i32))).unwrap();
    assert_eq!(pgid.as_raw(), rec.pid as i32, "the supervisor leads its process group");
    assert_ne!(sid.as_raw(), rec.pid as i32, "…but not a session (the case under test)");
    supervise::release(&dir).unwrap();
    wait_for("the component's end", 20, || dir.join(supervise::EXIT_FILE).exists());
    assert!(script.wait().unwrap().success());
    let exit: ExitRecord = supervise::read_json(&dir.join(supervise::EXIT_FILE)).unwrap();
    assert!(exit.success(), "{exit:?}");
    let stat = std::fs::read_to_string(dir.join(supervise::STDOUT_FILE)).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split_whitespace().collect();
    // Field 7 of /proc/PID/stat (the 5th after the command name): the controlling terminal.
    assert_eq!(fields[4], "0", "the program has a controlling terminal: {stat}");
    for c in ["memory", "pids", "freezer"] {
        let _ = std::fs::remove_dir(Path::new("/sys/fs/cgroup").join(c).join(&parent));
    }
}
