//! What a launch leaves on the machine: the files of its record directory (each new inode is
//! the largest per-launch cost on this machine's file system, docs/operations.md), and its
//! control group, which is gone once it ended; a control group of the same name found
//! already there (an earlier launch's) carries nothing of that launch into this one.
//! Control groups need root and a cgroup file system (as CI has).

mod common;

use common::{wait_file, wait_terminal};

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use koalesce_server::backend::{Backend, ComponentSubmission, LrmState};
use koalesce_server::cgroup::{self, Cgroup};
use koalesce_server::local::LocalBackend;
use koalesce_server::supervise::{self, SupervisorRecord};

const NONCE: &str = "5eed0000000000000000000000000009";

fn sub(dir: &Path, claim: String, script: &str) -> ComponentSubmission {
    ComponentSubmission {
        site: "a".into(),
        user: "tester".into(),
        processors: 1,
        claim,
        dir: dir.to_path_buf(),
        executable: "/bin/sh".into(),
        arguments: vec!["-c".into(), script.into()],
        environment: Default::default(),
        time_limit_ms: 60_000,
        memory_limit: None,
        working_directory: None,
        early_signal: None,
        nonce: NONCE.into(),
    }
}

fn ino(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).unwrap().ino()
}

/// Where a group named `name` under `parent` would be, in every hierarchy it could be in.
fn group_paths(parent: &str, name: &str) -> Vec<PathBuf> {
    let root = Path::new(cgroup::CGROUP_ROOT);
    let mut v: Vec<PathBuf> = ["memory", "pids", "freezer"]
        .iter()
        .map(|c| root.join(c).join(parent).join(name))
        .collect();
    v.push(root.join(parent).join(name));
    v
}

fn remove_parent(parent: &str) {
    for c in ["memory", "pids", "freezer"] {
        let _ = std::fs::remove_dir(Path::new(cgroup::CGROUP_ROOT).join(c).join(parent));
    }
    let _ = std::fs::remove_dir(Path::new(cgroup::CGROUP_ROOT).join(parent));
}

/// A launch of one component, released before its submission as the daemon does it: `go` is
/// a link of the local site's shared marker (from its second launch on), the control group is recorded in `supervisor.json`
/// (no `cgroup.json`), `running.json` is a link of that record (how the program started is
/// in `exit.json`), and after the end the directory holds five inodes of its own (record,
/// exit record, stdout, stderr, work/) and no temporary, and the control group is gone.
#[test]
fn a_solo_launch_makes_five_inodes_and_leaves_no_control_group() {
    let tmp = tempfile::tempdir().unwrap();
    let jobs = tmp.path().join("sites/a/jobs");
    let b = LocalBackend::new("a", 4, false, common::supervisor());
    // The site's first solo launch: no marker yet, `go` is a file of its own (as at a Slurm
    // site, which keeps none); the local executor makes the marker at the submission.
    let first = jobs.join("6/a1-c0");
    supervise::create_launch_dir(&first).unwrap();
    supervise::release(&first).unwrap();
    let marker = jobs.join(supervise::GO_MARKER);
    assert!(!marker.exists());
    let id = b.submit(&sub(&first, b.claim("a", 1).unwrap(), "true")).unwrap();
    assert_eq!(wait_terminal(&b, &id), LrmState::Completed);
    assert!(marker.exists(), "the local executor keeps a go marker");
    assert_ne!(ino(&first.join(supervise::GO_FILE)), ino(&marker));

    let dir = jobs.join("7/a1-c0");
    supervise::create_launch_dir(&dir).unwrap();
    supervise::release(&dir).unwrap();
    assert_eq!(
        ino(&dir.join(supervise::GO_FILE)),
        ino(&marker),
        "go is a link of the shared marker"
    );
    let id = b.submit(&sub(&dir, b.claim("a", 1).unwrap(), "echo ran")).unwrap();
    assert_eq!(wait_terminal(&b, &id), LrmState::Completed);
    assert_eq!(std::fs::read_to_string(dir.join(supervise::STDOUT_FILE)).unwrap(), "ran\n");

    let names: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let expected: BTreeSet<String> = ["exit.json", "go", "running.json", "stderr", "stdout", "supervisor.json", "work"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(names, expected, "the record directory holds these and nothing else");
    let own: BTreeSet<u64> = names.iter().map(|n| ino(&dir.join(n))).filter(|&i| i != ino(&marker)).collect();
    assert_eq!(own.len(), 5, "five inodes of its own: {names:?}");
    assert_eq!(
        ino(&dir.join(supervise::RUNNING_FILE)),
        ino(&dir.join(supervise::SUPERVISOR_FILE)),
        "running.json is a link of the supervisor's record"
    );
    let running = supervise::read_running(&dir).expect("how the program started is in exit.json");
    assert!(running.child_pid > 0 && running.started_ms >= running.go_seen_ms, "{running:?}");
    let exit = supervise::read_exit(&dir, NONCE).expect("the exit record is read as before");
    assert!(exit.success() && exit.finished_ms >= running.started_ms, "{exit:?}");
    // Released again (recovery writes missing go files): `go` stays what it was.
    supervise::release(&dir).unwrap();
    assert_eq!(ino(&dir.join(supervise::GO_FILE)), ino(&marker));

    let rec: SupervisorRecord = supervise::read_json(&dir.join(supervise::SUPERVISOR_FILE)).unwrap();
    let cg = rec.cgroup.clone().expect("tests run as root with cgroups mounted (as CI does)");
    assert!(!cg.exists(), "the control group is removed once the component ended: {:?}", cg.dirs);
    assert_eq!(Cgroup::recorded(&dir), None, "a recorded group that is gone reads as none");

    // The next launch's early `go` is one more link of the same marker.
    let dir2 = jobs.join("8/a1-c0");
    supervise::create_launch_dir(&dir2).unwrap();
    supervise::release(&dir2).unwrap();
    assert_eq!(ino(&dir2.join(supervise::GO_FILE)), ino(&marker));
    assert_eq!(std::fs::metadata(&marker).unwrap().nlink(), 3);
}

/// A group of the component's name that is there already (an earlier launch of the same
/// directory name, in a data directory started afresh) is emptied before use: its process is
/// killed and its memory limit lifted, or replaced by the component's own.
#[test]
fn a_control_group_left_by_an_earlier_launch_carries_no_process_or_limit() {
    let parent = format!("koalesce-test-stale-{}", std::process::id());
    let tmp = tempfile::tempdir().unwrap();
    for (i, limit) in [None, Some(256u64 << 20)].into_iter().enumerate() {
        let dir = tmp.path().join(format!("sites/a/jobs/{i}/a1-c0"));
        std::fs::create_dir_all(&dir).unwrap();
        let (stale, made) =
            Cgroup::create_new(&parent, &cgroup::name_for(&dir)).expect("tests run as root with cgroups mounted (as CI does)");
        assert!(made);
        stale.set_memory_limit(64 << 20).unwrap();
        assert_eq!(stale.memory_limit(), Some(64 << 20));
        let mut earlier = Command::new("sleep").arg("600").spawn().unwrap();
        for f in stale.procs_files() {
            std::fs::write(f, earlier.id().to_string()).unwrap();
        }
        assert_eq!(stale.pids(), vec![earlier.id() as i32]);

        let mut cmd = Command::new(env!("CARGO_BIN_EXE_koalesce-supervise"));
        cmd.args(["--dir", dir.to_str().unwrap(), "--cgroup-parent", &parent]);
        if let Some(l) = limit {
            cmd.args(["--memory-limit", &l.to_string()]);
        }
        let mut sup = cmd.args(["--", "/bin/true"]).spawn().unwrap();
        wait_file(&dir.join(supervise::HELD_FILE), "held");
        let cg = Cgroup::recorded(&dir).expect("the group is recorded in supervisor.json");
        assert_eq!(cg, stale, "the group of that name is used");
        // Killed before the supervisor reported itself held (a zombie of this test's now).
        let st = earlier.try_wait().unwrap();
        if st.is_none() {
            let _ = earlier.kill();
            let _ = earlier.wait();
        }
        assert_eq!(
            st.and_then(|s| s.signal()),
            Some(9),
            "the earlier launch's process was killed: {st:?}"
        );
        assert_eq!(cg.memory_limit(), limit, "no limit carried over from the earlier launch");
        let pids = cg.pids();
        assert_eq!(pids.len(), 1, "only this component's process (waiting at its gate): {pids:?}");

        supervise::abort(&dir).unwrap();
        assert!(sup.wait().unwrap().success());
        assert!(!cg.exists(), "removed once the component gave up");
    }
    remove_parent(&parent);
}

/// A supervisor whose directory is not its own (fenced by the daemon) runs nothing and makes
/// no control group (it is made only after the check-in); a group of that name (the
/// directory's supervisor's) it leaves alone.
#[test]
fn a_supervisor_refused_by_its_directory_makes_no_control_group_and_leaves_others_alone() {
    let parent = format!("koalesce-test-refused-{}", std::process::id());
    let tmp = tempfile::tempdir().unwrap();
    let run = |dir: &Path| {
        Command::new(env!("CARGO_BIN_EXE_koalesce-supervise"))
            .args(["--dir", dir.to_str().unwrap(), "--cgroup-parent", &parent])
            .args(["--", "/bin/sh", "-c", "touch ran"])
            .status()
            .unwrap()
    };
    let d1 = tmp.path().join("sites/a/jobs/1/a1-c0");
    std::fs::create_dir_all(&d1).unwrap();
    assert!(supervise::fence(&d1).unwrap());
    assert_eq!(run(&d1).code(), Some(3));
    let paths = group_paths(&parent, &cgroup::name_for(&d1));
    assert!(paths.iter().all(|p| !p.exists()), "no group made: {paths:?}");

    let d2 = tmp.path().join("sites/a/jobs/2/a1-c0");
    std::fs::create_dir_all(&d2).unwrap();
    assert!(supervise::fence(&d2).unwrap());
    let theirs = Cgroup::create(&parent, &cgroup::name_for(&d2)).expect("tests run as root with cgroups mounted (as CI does)");
    assert_eq!(run(&d2).code(), Some(3));
    assert!(theirs.exists(), "a group it did not make stays");
    assert!(!supervise::work_dir(&d1).join("ran").exists() && !supervise::work_dir(&d2).join("ran").exists());
    theirs.remove();
    remove_parent(&parent);
}
