//! Killing a component's control group (root, cgroup v1 as on these machines, or v2): every
//! member dies, forks cannot outrun the kill, and the group is never left frozen, even when
//! an earlier killer died half-way through an older freeze-kill-thaw.

use std::path::Path;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use koalesce_server::cgroup::Cgroup;

/// A fresh group under a parent of this test process's own (removed at the end).
fn group(tag: &str) -> (String, Cgroup) {
    let parent = format!("koalesce-test-kill-{}", std::process::id());
    let cg = Cgroup::create(&parent, tag).expect("tests run as root with cgroups mounted (as CI does)");
    (parent, cg)
}

/// Starts `script` under sh as a member of `cg` (it joins before running the script).
fn spawn_in(cg: &Cgroup, script: &str) -> Child {
    let joins: String = cg.procs_files().iter().map(|f| format!("echo $$ > {} && ", f.display())).collect();
    Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("{joins} exec /bin/sh -c '{script}'"))
        .spawn()
        .unwrap()
}

fn wait_members(cg: &Cgroup, at_least: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while cg.pids().len() < at_least {
        assert!(std::time::Instant::now() < deadline, "only {} members", cg.pids().len());
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn clean(parent: &str, cg: &Cgroup) {
    cg.remove();
    for c in ["memory", "pids", "freezer"] {
        let _ = std::fs::remove_dir(Path::new("/sys/fs/cgroup").join(c).join(parent));
    }
    let _ = std::fs::remove_dir(Path::new("/sys/fs/cgroup").join(parent));
}

/// A member forking as fast as it can is killed with all its children, and the group is never
/// frozen meanwhile (a freeze outlives a killer that dies before its thaw).
#[test]
fn a_forking_group_is_killed_without_ever_being_frozen() {
    let (parent, cg) = group("forker");
    // Bounded so the fork loop cannot exhaust the machine: forks past 300 members fail.
    let pids_max = Path::new("/sys/fs/cgroup/pids").join(&parent).join("forker/pids.max");
    if pids_max.exists() {
        std::fs::write(&pids_max, "300").unwrap();
    }
    let mut child = spawn_in(&cg, "while :; do sleep 600 & done");
    wait_members(&cg, 50);
    let stop = Arc::new(AtomicBool::new(false));
    let seen_frozen = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (cg, stop, seen) = (cg.clone(), stop.clone(), seen_frozen.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if cg.is_frozen() {
                    seen.store(true, Ordering::Relaxed);
                }
            }
        })
    };
    cg.kill_all();
    stop.store(true, Ordering::Relaxed);
    watcher.join().unwrap();
    let _ = child.wait();
    assert!(cg.wait_empty(Duration::from_secs(20)), "members left: {:?}", cg.pids().len());
    assert!(!seen_frozen.load(Ordering::Relaxed), "the group was frozen while being killed");
    if pids_max.exists() {
        assert_eq!(
            std::fs::read_to_string(&pids_max).unwrap().trim(),
            "0",
            "forks are refused from the kill on"
        );
    }
    clean(&parent, &cg);
}

/// A group an earlier killer froze and never thawed (it died in between) is thawed by the next
/// kill, and its members die.
#[test]
fn a_group_left_frozen_by_a_dead_killer_is_thawed_and_killed() {
    let (parent, cg) = group("frozen");
    let mut child = spawn_in(&cg, "sleep 600 & sleep 600 & wait");
    wait_members(&cg, 3);
    let freezer = Path::new("/sys/fs/cgroup/freezer").join(&parent).join("frozen/freezer.state");
    if freezer.exists() {
        std::fs::write(&freezer, "FROZEN").unwrap();
    } else {
        std::fs::write(Path::new("/sys/fs/cgroup").join(&parent).join("frozen/cgroup.freeze"), "1").unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !cg.is_frozen() {
        assert!(std::time::Instant::now() < deadline, "the group never froze");
        std::thread::sleep(Duration::from_millis(5));
    }
    cg.kill_all();
    let _ = child.wait();
    assert!(cg.wait_empty(Duration::from_secs(20)), "members left: {:?}", cg.pids());
    assert!(!cg.is_frozen(), "the group is thawed");
    clean(&parent, &cg);
}
