//! The start barrier across a server crash in the middle of a launch.
//!
//! The first server runs with a supervisor wrapper that holds back the supervisor of component
//! 1 of the first attempt (`a1-c1`) until the test opens a gate, so the server can be stopped
//! deterministically at the moment the crash tests hit by chance: component 0's supervisor is
//! up, component 1's is not (or is up but not let through yet). A second server then recovers
//! the data dir, and each component's program must have run exactly once in the end.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use koalesce_server::supervise::{self, ExitRecord, SupervisorRecord};
use koalesce_server::{BackgroundServer, SupervisorCommand};

const SITES: &[(&str, u32)] = &[("a", 2), ("b", 2)];

struct Setup {
    _tmp: tempfile::TempDir,
    data: PathBuf,
    markers: PathBuf,
    gate: PathBuf,
    token: String,
}

impl Setup {
    fn new() -> Setup {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let markers = tmp.path().join("markers");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::create_dir_all(&markers).unwrap();
        let gate = tmp.path().join("gate");
        let token = token(&data, "tester", false);
        Setup {
            _tmp: tmp,
            data,
            markers,
            gate,
            token,
        }
    }

    /// `koalesce-supervise`, except that the supervisor of `a1-c1` starts only once the gate
    /// file exists (a daemon that is slow to spawn it, or dies before); it gives up when the
    /// test's directory is gone.
    fn gated_supervisor(&self) -> SupervisorCommand {
        let script = format!(
            "case \"$2\" in */a1-c1) while [ ! -e '{}' ]; do [ -d '{}' ] || exit 1; sleep 0.02; done ;; esac; exec '{}' \"$@\"",
            self.gate.display(),
            self.data.display(),
            supervisor().program.display()
        );
        SupervisorCommand {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script, "gated-supervise".into()],
            launcher: None,
        }
    }

    fn server(&self) -> BackgroundServer {
        self.server_with(|_| {})
    }

    fn server_with(&self, adjust: impl FnOnce(&mut koalesce_server::ServerConfig)) -> BackgroundServer {
        let mut opts = koalesce_server::test_options(&self.data, SITES, self.gated_supervisor());
        adjust(&mut opts.config);
        // The programs leave their markers outside their sandbox.
        opts.config.sandbox.read_write.push(self.markers.clone());
        BackgroundServer::start(opts).expect("server starts")
    }

    /// A coupled job of two components (one per site); each program leaves a marker.
    fn submit(&self, srv: &BackgroundServer) -> u64 {
        let job = format!(
            "name = \"barrier\"\nexecutable = \"/bin/sh\"\n\
             arguments = [\"-c\", \"touch \\\"$MARKERS/r$KOALESCE_RANK.$$\\\"\"]\n\
             environment = {{ MARKERS = \"{}\" }}\nrunner = \"coupled\"\nruntime_estimate = \"1m\"\n\
             [[components]]\nprocessors = 1\nsite = \"a\"\n\
             [[components]]\nprocessors = 1\nsite = \"b\"\n",
            self.markers.display()
        );
        submit(srv, &self.token, &job)
    }

    fn dir(&self, site: &str, job: u64, attempt: u32, comp: u32) -> PathBuf {
        self.data.join(format!("sites/{site}/jobs/{job}/a{attempt}-c{comp}"))
    }

    /// Markers per rank.
    fn runs(&self) -> [usize; 2] {
        let mut n = [0; 2];
        for f in std::fs::read_dir(&self.markers).unwrap().flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            if name.starts_with("r0.") {
                n[0] += 1;
            } else if name.starts_with("r1.") {
                n[1] += 1;
            }
        }
        n
    }

    fn open_gate(&self) {
        std::fs::write(&self.gate, b"").unwrap();
    }
}

fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn record(dir: &Path) -> Option<SupervisorRecord> {
    supervise::read_json(&dir.join(supervise::SUPERVISOR_FILE))
}

fn live_record(dir: &Path) -> bool {
    record(dir).is_some_and(|r| !r.fenced && r.pid > 0)
}

/// Component 0's supervisor is up and held at the barrier, component 1's never came up before
/// the server went away: recovery fences component 1, tells component 0 to give up (it exits
/// without running its program) and requeues the job; the next attempt runs both, once.
#[test]
fn a_half_spawned_launch_is_abandoned_without_running_anything() {
    let s = Setup::new();
    let srv = s.server();
    let id = s.submit(&srv);
    let (c0, c1) = (s.dir("a", id, 1, 0), s.dir("b", id, 1, 1));
    wait_for("component 0's supervisor", 20, || live_record(&c0));
    // Held: its partner is not up, so nothing was let through and nothing ran.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(s.runs(), [0, 0], "a component ran before every supervisor was up");
    assert!(!c0.join(supervise::GO_FILE).exists());
    assert!(record(&c1).is_none());
    let held_pid = record(&c0).unwrap().pid;
    srv.stop(); // the daemon goes away between the two spawns

    let srv = s.server();
    // Recovery fenced component 1 and aborted component 0, which records that it never started.
    assert!(record(&c1).is_some_and(|r| r.fenced), "component 1 not fenced");
    assert!(c0.join(supervise::ABORT_FILE).exists());
    wait_for("component 0 to give up", 10, || c0.join(supervise::EXIT_FILE).exists());
    let exit: ExitRecord = supervise::read_json(&c0.join(supervise::EXIT_FILE)).unwrap();
    assert!(exit.never_started && exit.exit_code.is_none(), "{exit:?}");
    // Set up before the barrier (its output file exists), but nothing ran.
    assert!(!c0.join(supervise::RUNNING_FILE).exists());
    assert!(std::fs::metadata(c0.join(supervise::STDOUT_FILE)).map_or(true, |m| m.len() == 0));
    wait_for("the held supervisor to exit", 10, || {
        supervise::proc_start_time(held_pid).is_none() || !supervise::supervisor_alive(&record(&c0).unwrap())
    });
    // The late supervisor of component 1 finds the fence and does not run.
    s.open_gate();
    wait_for("the late supervisor to refuse", 10, || {
        std::fs::read_to_string(c1.join("supervisor.log")).is_ok_and(|l| l.contains("not starting twice"))
    });

    // The job was requeued and ran in a second attempt, each component exactly once.
    let j = wait_state(&srv, &s.token, id, &["succeeded", "failed"], 30);
    assert_eq!(j["state"], "succeeded", "{j}");
    assert_eq!(s.runs(), [1, 1], "each component must run exactly once");
    for c in j["components"].as_array().unwrap() {
        assert!(c["stdout"].as_str().unwrap().contains("/a2-c"), "{j}");
    }
    assert!(!c1.join(supervise::RUNNING_FILE).exists());
    srv.stop();
}

/// A supervisor held at the barrier by a server that never comes back gives up on its own
/// after the barrier timeout: it records that its program never started, removes the control
/// group it had set up and exits (it no longer holds its processors). When a server does come
/// back, the job is placed again and each component runs once.
#[test]
fn a_held_supervisor_gives_up_when_the_server_does_not_come_back() {
    const TIMEOUT_MS: u64 = 1500;
    let s = Setup::new();
    let srv = s.server_with(|c| c.barrier_timeout_ms = TIMEOUT_MS);
    let id = s.submit(&srv);
    let (c0, c1) = (s.dir("a", id, 1, 0), s.dir("b", id, 1, 1));
    wait_for("component 0 held at the barrier", 20, || c0.join(supervise::HELD_FILE).exists());
    let held_pid = record(&c0).unwrap().pid;
    let cgroup = koalesce_server::cgroup::Cgroup::recorded(&c0).expect("set up before the barrier");
    assert!(cgroup.exists(), "the control group exists while held");
    srv.stop();
    let t0 = Instant::now();
    wait_for("the held supervisor to give up", 20, || c0.join(supervise::EXIT_FILE).exists());
    let waited = t0.elapsed();
    let exit: ExitRecord = supervise::read_json(&c0.join(supervise::EXIT_FILE)).unwrap();
    assert!(exit.never_started && exit.exit_code.is_none(), "{exit:?}");
    assert!(exit.spawn_error.as_deref().unwrap_or("").contains("barrier timeout"), "{exit:?}");
    assert!(waited < Duration::from_millis(TIMEOUT_MS + 5000), "gave up after {waited:?}");
    wait_for("the held supervisor to exit", 10, || supervise::proc_start_time(held_pid).is_none());
    assert!(!cgroup.exists(), "the control group is removed");
    assert!(c0.join(supervise::ABORT_FILE).exists(), "the supervisor marks its barrier aborted");
    assert_eq!(s.runs(), [0, 0], "nothing ran");

    // The server comes back: the launch is abandoned and the job placed again.
    s.open_gate();
    let srv = s.server();
    let j = wait_state(&srv, &s.token, id, &["succeeded", "failed"], 30);
    assert_eq!(j["state"], "succeeded", "{j}");
    assert_eq!(s.runs(), [1, 1], "each component must run exactly once");
    for c in j["components"].as_array().unwrap() {
        assert!(c["stdout"].as_str().unwrap().contains("/a2-c"), "{j}");
    }
    assert!(!c1.join(supervise::RUNNING_FILE).exists());
    srv.stop();
}

/// Both supervisors are up when the server goes away; with `release_c0` component 0 was let
/// through already (the crash came between writing the two `go` files) and ran. Recovery rolls
/// the launch forward (writes the missing `go`) and re-adopts the job: nothing runs twice and
/// there is no second attempt.
fn roll_forward(release_c0: bool) {
    let s = Setup::new();
    let srv = s.server();
    let id = s.submit(&srv);
    let (c0, c1) = (s.dir("a", id, 1, 0), s.dir("b", id, 1, 1));
    wait_for("component 0's supervisor", 20, || live_record(&c0));
    srv.stop();
    s.open_gate();
    wait_for("component 1's supervisor", 20, || live_record(&c1));
    if release_c0 {
        supervise::release(&c0).unwrap();
        wait_for("component 0 to run", 10, || s.runs()[0] == 1);
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(s.runs(), [release_c0 as usize, 0], "a held component ran");

    let srv = s.server();
    let j = wait_state(&srv, &s.token, id, &["succeeded", "failed"], 30);
    assert_eq!(j["state"], "succeeded", "{j}");
    assert_eq!(s.runs(), [1, 1], "each component must run exactly once");
    for c in [&c0, &c1] {
        let exit: ExitRecord = supervise::read_json(&c.join(supervise::EXIT_FILE)).unwrap();
        assert!(exit.success(), "{exit:?}");
    }
    for c in j["components"].as_array().unwrap() {
        assert!(c["stdout"].as_str().unwrap().contains("/a1-c"), "{j}");
    }
    assert!(
        !s.dir("a", id, 2, 0).exists() && !s.dir("b", id, 2, 1).exists(),
        "a second attempt was launched"
    );
    srv.stop();
}

#[test]
fn a_fully_spawned_launch_is_rolled_forward() {
    roll_forward(false);
}

#[test]
fn a_partly_released_launch_is_rolled_forward() {
    roll_forward(true);
}

/// In normal operation the components of a launch start together once all supervisors are up
/// (the gate holds component 1's supervisor back a while: component 0 must wait for it).
#[test]
fn components_start_together_behind_the_barrier() {
    let s = Setup::new();
    let srv = s.server();
    let id = s.submit(&srv);
    let c0 = s.dir("a", id, 1, 0);
    wait_for("component 0's supervisor", 20, || live_record(&c0));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(s.runs(), [0, 0], "component 0 ran before component 1's supervisor was up");
    s.open_gate();
    let j = wait_state(&srv, &s.token, id, &["succeeded", "failed"], 30);
    assert_eq!(j["state"], "succeeded", "{j}");
    assert_eq!(s.runs(), [1, 1]);
    let started = |c: &Path| -> u64 { supervise::read_running(c).unwrap().started_ms };
    let (t0, t1) = (started(&c0), started(&s.dir("b", id, 1, 1)));
    assert!(t0.abs_diff(t1) < 1000, "components started {} ms apart", t0.abs_diff(t1));
    srv.stop();
}
