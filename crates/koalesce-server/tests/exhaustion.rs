//! Running out of file descriptors when a component starts is not a fault of the site: the
//! local executor reports it as `Exhausted` (the daemon retries the job later and blames
//! nobody). Alone in its test binary: it lowers the process's open-files limit.

mod common;

use koalesce_server::backend::{Backend, BackendError, ComponentSubmission};
use koalesce_server::local::LocalBackend;
use nix::sys::resource::{getrlimit, setrlimit, Resource};

#[test]
fn out_of_descriptors_at_launch_is_exhaustion_not_a_site_fault() {
    let tmp = tempfile::tempdir().unwrap();
    let b = LocalBackend::new("a", 2, false, common::supervisor());
    let sub = |i: u32, claim: String| ComponentSubmission {
        site: "a".into(),
        user: "tester".into(),
        processors: 1,
        claim,
        dir: tmp.path().join(format!("sites/a/jobs/{i}/a1-c0")),
        executable: "/bin/true".into(),
        arguments: vec![],
        environment: Default::default(),
        time_limit_ms: 60_000,
        memory_limit: None,
        working_directory: None,
        nonce: String::new(),
        early_signal: None,
    };
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    setrlimit(Resource::RLIMIT_NOFILE, open.saturating_sub(1), hard).unwrap();
    // The site's first launch: starting its resident launcher (a socketpair) meets the limit.
    let r = b.submit(&sub(1, b.claim("a", 1).unwrap()));
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    match r {
        Err(BackendError::Exhausted { reason, .. }) => assert!(reason.contains("Too many open files"), "{reason}"),
        other => panic!("expected exhaustion, got {other:?}"),
    }
    // With descriptors back, the next launch works.
    let id = b.submit(&sub(2, b.claim("a", 1).unwrap())).unwrap();
    // Its supervisor (forked by the resident launcher: the job is not in its command line)
    // is a process whose working directory is the launch's; it is held at its barrier, so
    // it is seen before the cancel (the check below cannot pass for want of looking).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while common::processes_in(&id) == 0 {
        assert!(std::time::Instant::now() < deadline, "the component's supervisor is never seen");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    b.cancel(&id).unwrap();
    // Its supervisor is gone before the directory is: it used to start after the test had
    // ended, re-create the directory and hold its barrier for ever.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while common::processes_in(&id) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the cancelled component's supervisor does not end"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
