//! The Slurm backend against a real 3-cluster test bed (`koalesce testbed`): one bed for the
//! whole file, one test function whose steps share it (the bed costs seconds to start; the
//! fault steps come last because they stop clusters).
//!
//! Needs slurm-wlm and munge (`apt-get install -y slurm-wlm munge`); fails without them.

mod slurm_common;

use std::path::Path;
use std::time::{Duration, Instant};

use koalesce::testbed::StopHow;
use koalesce_server::backend::{Backend, BackendError, LrmState, ReservationRequest};
use koalesce_server::slurm::{parse, SlurmBackend, SlurmOptions, SlurmSiteSpec};
use koalesce_server::supervise;
use slurm_common::*;

const T: Duration = Duration::from_secs(30);

#[test]
fn slurm_backend_on_a_real_bed() {
    let bed = Bed::up(3, 2, 0);
    let b = bed.backend("scratch");
    lifecycle(&bed, &b);
    cancel_held_and_pending(&bed, &b);
    status_is_one_squeue_per_cluster(&bed, &b);
    reservations(&bed, &b);
    server_on_slurm_sites(&bed);
    controller_faults(&bed, &b);
    job_run_twice_after_controller_crash(&bed, &b);
}

/// Processors from sinfo, claim accounting, submit → pends/allocates → checks in (ready) →
/// holds until `start` → runs with its environment → Completed from the supervisor's record;
/// a failing program is Failed with its exit code; a new backend adopts a running component.
fn lifecycle(bed: &Bed, b: &SlurmBackend) {
    b.verify().unwrap();
    let p = b.processors("alpha").unwrap();
    assert_eq!((p.total, p.idle), (64, 64), "{p:?}");
    // The configured size is checked against the cluster.
    let mut wrong: Vec<SlurmSiteSpec> = bed.bed.site_specs();
    wrong[0].processors = 65;
    let wb = SlurmBackend::new(wrong, &bed.tmp.path().join("scratch-w"), Bed::supervisor(), SlurmOptions::default()).unwrap();
    let e = wb.verify().unwrap_err().to_string();
    assert!(e.contains("65") && e.contains("64"), "{e}");

    // A claim sets processors aside at once (no Slurm call), a larger one is refused.
    let claim = b.claim("alpha", 40).unwrap();
    assert_eq!(b.processors("alpha").unwrap().idle, 24);
    assert!(matches!(b.claim("alpha", 30), Err(BackendError::Busy { idle: 24, .. })));
    let dir = bed.dir("life");
    let sub = component(
        "alpha",
        40,
        &claim,
        &dir,
        "/bin/sh",
        &["-c", "echo \"$KOALESCE_TEST\"; echo job=$SLURM_JOB_ID; touch ran"],
    );
    let t0 = Instant::now();
    let id = b.submit(&sub).unwrap();
    assert!(id.starts_with("alpha:"), "{id}");
    // Submitted, not yet allocated: still set aside.
    assert!(b.processors("alpha").unwrap().idle <= 24);
    wait_for("check-in", T, || all_ready(b, std::slice::from_ref(&id)).then_some(()));
    let checkin = t0.elapsed();
    assert_eq!(state(b, &id), LrmState::Running, "allocated and held");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !supervise::work_dir(&dir).join("ran").exists(),
        "the program must not run before start"
    );
    b.start(std::slice::from_ref(&id)).unwrap();
    assert_eq!(wait_terminal(b, &id, T), LrmState::Completed);
    let out = std::fs::read_to_string(dir.join(supervise::STDOUT_FILE)).unwrap();
    assert!(out.contains("it's \"quoted\" $HOME"), "environment passed unchanged: {out}");
    let job: u32 = id.split(':').nth(1).unwrap().parse().unwrap();
    assert!(out.contains(&format!("job={job}")), "{out}");
    eprintln!("lifecycle: submit to check-in {:.0} ms", checkin.as_secs_f64() * 1000.0);
    b.release(&claim);
    wait_for("processors back", T, || (b.processors("alpha").unwrap().idle == 64).then_some(()));

    // A failing program: its exit code, from the record.
    let c = b.claim("beta", 2).unwrap();
    let id = b
        .submit(&component("beta", 2, &c, &bed.dir("fail"), "/bin/sh", &["-c", "exit 7"]))
        .unwrap();
    wait_for("check-in", T, || all_ready(b, std::slice::from_ref(&id)).then_some(()));
    b.start(std::slice::from_ref(&id)).unwrap();
    match wait_terminal(b, &id, T) {
        LrmState::Failed { exit_code: Some(7), .. } => {}
        s => panic!("expected exit code 7, got {s:?}"),
    }
    b.release(&c);

    // Adoption by a second backend (a daemon restart): same component, same answers.
    let c = b.claim("gamma", 4).unwrap();
    let id = b
        .submit(&component("gamma", 4, &c, &bed.dir("adopt"), "/bin/sleep", &["1"]))
        .unwrap();
    wait_for("check-in", T, || all_ready(b, std::slice::from_ref(&id)).then_some(()));
    let b2 = bed.backend("scratch2");
    assert!(
        b2.adopt(&id, "alpha", 4, NONCE).is_err(),
        "adopting on the wrong cluster is refused"
    );
    let c2 = b2.adopt(&id, "gamma", 4, NONCE).unwrap();
    assert_eq!(state(&b2, &id), LrmState::Running);
    assert!(all_ready(&b2, std::slice::from_ref(&id)));
    b2.start(std::slice::from_ref(&id)).unwrap();
    assert_eq!(wait_terminal(&b2, &id, T), LrmState::Completed);
    b2.release(&c2);
    b.release(&c);
}

/// Cancelling a component held at the barrier, and one still pending in Slurm: neither ever
/// runs its program.
fn cancel_held_and_pending(bed: &Bed, b: &SlurmBackend) {
    // Held at the barrier (it fills beta), then cancelled: `abort` first, so it never runs.
    let big = b.claim("beta", 64).unwrap();
    let dir_big = bed.dir("big");
    let id_big = b.submit(&component("beta", 64, &big, &dir_big, "/bin/touch", &["ran"])).unwrap();
    wait_for("check-in", T, || all_ready(b, std::slice::from_ref(&id_big)).then_some(()));
    assert_eq!(b.processors("beta").unwrap().idle, 0);
    assert!(matches!(b.claim("beta", 1), Err(BackendError::Busy { .. })));
    b.cancel(&id_big).unwrap();
    let s = wait_terminal(b, &id_big, T);
    assert!(matches!(s, LrmState::Cancelled | LrmState::NodeFail { .. }), "{s:?}");
    assert!(!supervise::work_dir(&dir_big).join("ran").exists());
    b.release(&big);

    // A local user's job takes alpha between koalesce's claim and its submission: the
    // component pends in Slurm (Pending, not ready, reason Resources). Cancelled, its
    // directory is fenced: it never runs, even once alpha is free again.
    let claim = b.claim("alpha", 8).unwrap();
    let ra = bed.bed.client("alpha").unwrap();
    let (blocker, _) = parse::parse_sbatch_parsable(
        &ra.run_args("sbatch", &["--parsable", "-n", "64", "-o", "/dev/null", "--wrap", "sleep 60"])
            .unwrap()
            .stdout,
    )
    .unwrap();
    wait_for("blocker running", T, || {
        let r = ra.run_args("squeue", &["-h", "-j", &blocker.to_string(), "-o", "%T"]).ok()?;
        r.stdout.contains("RUNNING").then_some(())
    });
    let id = b
        .submit(&component("alpha", 8, &claim, &bed.dir("pending"), "/bin/touch", &["ran"]))
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(state(b, &id), LrmState::Pending);
    assert!(!all_ready(b, std::slice::from_ref(&id)));
    let (_, row) = b.slurm_jobs(std::slice::from_ref(&id)).remove(0);
    let row = row.expect("squeue knows the pending job");
    assert_eq!(row.reason, "Resources", "{row:?}");
    b.cancel(&id).unwrap();
    assert!(matches!(wait_terminal(b, &id, T), LrmState::NodeFail { .. }));
    ra.run_args("scancel", &[&blocker.to_string()]).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!supervise::work_dir(&dir_of(&id)).join("ran").exists());
    b.release(&claim);
}

/// One `squeue` per cluster for any number of components (O(clusters), not O(jobs)).
fn status_is_one_squeue_per_cluster(bed: &Bed, b: &SlurmBackend) {
    let mut ids = Vec::new();
    let mut claims = Vec::new();
    for site in ["alpha", "beta", "gamma"] {
        for i in 0..3 {
            let c = b.claim(site, 1).unwrap();
            ids.push(
                b.submit(&component(site, 1, &c, &bed.dir(&format!("n-{site}-{i}")), "/bin/true", &[]))
                    .unwrap(),
            );
            claims.push(c);
        }
    }
    std::thread::sleep(Duration::from_millis(600)); // past the status cache
    let before = b.commands_run();
    let states = b.status(&ids);
    assert_eq!(states.len(), 9);
    assert_eq!(b.commands_run() - before, 3, "one squeue per cluster");
    // Within the cache time, no command at all.
    b.status(&ids);
    assert_eq!(b.commands_run() - before, 3);
    for id in &ids {
        let _ = b.cancel(id);
    }
    for c in claims {
        b.release(&c);
    }
}

/// A reservation's processors are kept from other jobs; a component in it starts at the
/// reservation's start; releasing it deletes the reservation.
fn reservations(bed: &Bed, b: &SlurmBackend) {
    let r = b.reservations().expect("Slurm sites take reservations");
    let start_ms = koalesce_server::now_ms() + 6_000;
    let rid = r
        .reserve(&ReservationRequest {
            site: "gamma".into(),
            processors: 48,
            start_ms,
            duration_ms: 120_000,
        })
        .unwrap();
    assert!(rid.starts_with("resv:gamma:"), "{rid}");
    let name = rid.rsplit(':').next().unwrap().to_string();
    // Submitted before the reservation starts, with the reservation as its claim: it pends.
    let dir = bed.dir("resv");
    let id = b.submit(&component("gamma", 48, &rid, &dir, "/bin/date", &["+%s%N"])).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(state(b, &id), LrmState::Pending, "waits for the reservation");
    let checkin = wait_for("check-in in the reservation", Duration::from_secs(40), || {
        all_ready(b, std::slice::from_ref(&id)).then(|| {
            let rec: supervise::SupervisorRecord = supervise::read_json(&dir.join(supervise::SUPERVISOR_FILE)).unwrap();
            rec.started_ms
        })
    });
    let late = checkin as i64 - start_ms as i64;
    eprintln!("reservation: the component checked in {late} ms after the reservation's start");
    assert!(
        late >= -1000,
        "started {late} ms before the reservation (Slurm's 1 s resolution allowed)"
    );
    assert!(late < 10_000, "started {late} ms after the reservation");
    // The reservation is active: koalesce counts its cores as taken, and a job outside it
    // (a local user's, straight to Slurm) cannot use them.
    let p = b.processors("gamma").unwrap();
    assert_eq!(p.idle, 16, "{p:?}");
    assert!(matches!(b.claim("gamma", 32), Err(BackendError::Busy { idle: 16, .. })));
    let raw = bed.bed.client("gamma").unwrap();
    let (other, _) = parse::parse_sbatch_parsable(
        &raw.run_args("sbatch", &["--parsable", "-n", "32", "-o", "/dev/null", "--wrap", "true"])
            .unwrap()
            .stdout,
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    let q = raw.run_args("squeue", &["-h", "-j", &other.to_string(), "-o", "%T|%r"]).unwrap();
    assert!(
        q.stdout.starts_with("PENDING"),
        "a 32-CPU job must not get the reserved cores: {}",
        q.stdout
    );
    raw.run_args("scancel", &[&other.to_string()]).unwrap();
    // Run the component; its own clock is past the reservation's start.
    b.start(std::slice::from_ref(&id)).unwrap();
    assert_eq!(wait_terminal(b, &id, T), LrmState::Completed);
    let clock: u64 = std::fs::read_to_string(dir.join(supervise::STDOUT_FILE))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(clock / 1_000_000 + 1000 >= start_ms);
    // Releasing the claim (the reservation) deletes it (retried while Slurm says "in use").
    b.release(&rid);
    wait_for("reservation deleted", T, || {
        let _ = b.processors("gamma");
        let out = raw.run_args("scontrol", &["show", "reservation", &name]);
        out.is_err().then_some(())
    });
    assert!(b.reservations_held().is_empty(), "{:?}", b.reservations_held());
    // An unused reservation is cancelled outright; one too large is refused as Busy.
    let rid = r
        .reserve(&ReservationRequest {
            site: "alpha".into(),
            processors: 8,
            start_ms: koalesce_server::now_ms() + 60_000,
            duration_ms: 60_000,
        })
        .unwrap();
    r.cancel_reservation(&rid).unwrap();
    assert!(raw
        .run_args("scontrol", &["show", "reservation"])
        .unwrap()
        .stdout
        .contains("No reservations"));
    let e = r
        .reserve(&ReservationRequest {
            site: "alpha".into(),
            processors: 1000,
            start_ms: 0,
            duration_ms: 60_000,
        })
        .unwrap_err();
    assert!(matches!(e, BackendError::Busy { wanted: 1000, .. }), "{e:?}");
}

/// The daemon with the bed's `server.toml` (`kind = "slurm"` sites built by `backend::build`):
/// a coupled job too large for one cluster runs across two, its components start together,
/// confined as local components are (the job's user's account, a clean environment); the
/// server is stopped while the job runs and the next one re-adopts it through the recorded
/// Slurm ids, so each component runs once and the job succeeds.
fn server_on_slurm_sites(bed: &Bed) {
    let data = bed.tmp.path().join("server");
    let config = koalesce_server::ServerConfig::load(&bed.bed.server_toml()).unwrap();
    assert!(config.sites.iter().all(|s| s.kind == koalesce_server::config::SiteKind::Slurm));
    let options = || {
        let mut o = koalesce_server::test_options(&data, &[], Bed::supervisor());
        o.config.sites = config.sites.clone();
        o.config.users.insert("*".into(), "nobody".into());
        o.config.allow_root_jobs = false;
        o
    };
    let mut srv = koalesce_server::BackgroundServer::start(options()).unwrap();
    let tok = koalesce_server::create_token(&data, "alice", false).unwrap();
    let (code, sites) = srv.request("GET", "/api/v1/sites", Some(&tok), b"");
    assert_eq!(code, 200, "{sites}");
    assert!(sites.contains("\"kind\":\"slurm\""), "{sites}");
    // 40 + 40 processors: no cluster of 64 holds both.
    let job = "name = 'span'\nexecutable = '/bin/sh'\nrunner = 'coupled'\nruntime_estimate = '2m'\n\
               arguments = ['-c', 'date +%s%N > start; echo site=$KOALESCE_SITE user=$(id -un) home=$HOME slurm=${SLURM_JOB_ID:+yes}; sleep 4']\n\
               [[components]]\nprocessors = 40\n[[components]]\nprocessors = 40\n";
    let (code, body) = srv.request("POST", "/api/v1/jobs", Some(&tok), job.as_bytes());
    assert_eq!(code, 201, "{body}");
    let id: u64 = serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"].as_u64().unwrap();
    let get = |srv: &koalesce_server::BackgroundServer| -> serde_json::Value {
        let (code, body) = srv.request("GET", &format!("/api/v1/jobs/{id}"), Some(&tok), b"");
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    };
    // Restart while both programs run.
    let dirs: Vec<std::path::PathBuf> = wait_for("both programs to start", T, || {
        let j = get(&srv);
        let dirs: Vec<std::path::PathBuf> = j["components"]
            .as_array()?
            .iter()
            .filter_map(|c| Some(Path::new(c["stdout"].as_str()?).parent()?.to_path_buf()))
            .collect();
        (dirs.len() == 2 && dirs.iter().all(|d| d.join("work/start").exists())).then_some(dirs)
    });
    srv.stop();
    srv = koalesce_server::BackgroundServer::start(options()).unwrap();
    let j = wait_for("the job to end", T, || {
        let j = get(&srv);
        matches!(j["state"].as_str(), Some("succeeded" | "failed")).then_some(j)
    });
    assert_eq!(j["state"], "succeeded", "{j}");
    let sites: Vec<&str> = j["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["site"].as_str().unwrap())
        .collect();
    assert_ne!(sites[0], sites[1], "the job spans two clusters: {j}");
    let last: Vec<&str> = j["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["stdout"].as_str().unwrap())
        .collect();
    assert!(
        last.iter().zip(&dirs).all(|(o, d)| Path::new(o).parent() == Some(d.as_path())),
        "the launch was re-adopted, not run again: {j}"
    );
    let mut starts = Vec::new();
    for (d, site) in dirs.iter().zip(&sites) {
        let out = std::fs::read_to_string(d.join(supervise::STDOUT_FILE)).unwrap();
        let home = d.join("work");
        assert_eq!(
            out,
            format!("site={site} user=nobody home={} slurm=yes\n", home.display()),
            "ran once, as the mapped account, with a clean environment"
        );
        starts.push(
            std::fs::read_to_string(d.join("work/start"))
                .unwrap()
                .trim()
                .parse::<i128>()
                .unwrap(),
        );
    }
    let spread_ms = (starts[0] - starts[1]).abs() as f64 / 1e6;
    eprintln!("server on Slurm sites: job {id} at {sites:?}, start spread {spread_ms:.1} ms, re-adopted after a restart");
    assert!(spread_ms < 1000.0, "{spread_ms} ms");
    srv.stop();
}

/// A stopped controller: the calls for its site fail as site errors within a few seconds, the
/// other clusters go on, a component running there still ends by its records, and the site
/// works again once the cluster is back.
fn controller_faults(bed: &Bed, b: &SlurmBackend) {
    let c = b.claim("beta", 2).unwrap();
    let dir = bed.dir("through-fault");
    let id = b.submit(&component("beta", 2, &c, &dir, "/bin/sleep", &["3"])).unwrap();
    wait_for("check-in", T, || all_ready(b, std::slice::from_ref(&id)).then_some(()));
    b.start(std::slice::from_ref(&id)).unwrap();
    bed.bed.stop_cluster("beta", StopHow::Term, false).unwrap();
    std::thread::sleep(Duration::from_millis(1100)); // past the info cache
    let bound = Duration::from_secs(6);
    let t = Instant::now();
    let e = b.processors("beta").unwrap_err();
    let took_sinfo = t.elapsed();
    assert!(matches!(e, BackendError::Site { .. }), "{e:?}");
    assert!(took_sinfo < bound, "sinfo against a stopped controller took {took_sinfo:?}");
    let t = Instant::now();
    let claim_err = b.claim("beta", 1).unwrap_err();
    assert!(matches!(claim_err, BackendError::Site { .. }));
    let took_cached = t.elapsed();
    let c2 = b.claim("alpha", 1).unwrap();
    let alpha_job = b
        .submit(&component("alpha", 1, &c2, &bed.dir("alpha-meanwhile"), "/bin/true", &[]))
        .unwrap();
    let t = Instant::now();
    let beta_claim = b.claim("beta", 1);
    assert!(matches!(beta_claim, Err(BackendError::Site { .. })), "{beta_claim:?}");
    let took_claim = t.elapsed();
    assert!(took_claim < bound);
    let fake = format!("beta:{}:{}", 999_999, bed.dir("never").display());
    let t2 = Instant::now();
    let e = b.cancel(&fake).unwrap_err();
    let took_scancel = t2.elapsed();
    assert!(matches!(e, BackendError::Site { .. }), "{e:?}");
    assert!(took_scancel < bound, "scancel took {took_scancel:?}");
    let _ = b.cancel(&alpha_job);
    // The component on beta ends while its controller is away: its records say so.
    assert_eq!(wait_terminal(b, &id, T), LrmState::Completed);
    eprintln!(
        "stopped controller: sinfo failed after {:.0} ms, then claims fail from the cache ({:.0} / {:.0} ms), scancel after {:.0} ms",
        took_sinfo.as_secs_f64() * 1000.0,
        took_cached.as_secs_f64() * 1000.0,
        took_claim.as_secs_f64() * 1000.0,
        took_scancel.as_secs_f64() * 1000.0
    );
    let back = bed.bed.start_cluster("beta").unwrap();
    eprintln!("start-cluster beta: scheduling again after {:.1} s", back.as_secs_f64());
    wait_for("beta back", T, || b.processors("beta").ok());
    let c3 = b.claim("beta", 1).unwrap();
    let id3 = b
        .submit(&component("beta", 1, &c3, &bed.dir("after-fault"), "/bin/true", &[]))
        .unwrap();
    wait_for("check-in", T, || all_ready(b, std::slice::from_ref(&id3)).then_some(()));
    b.start(std::slice::from_ref(&id3)).unwrap();
    assert_eq!(wait_terminal(b, &id3, T), LrmState::Completed);
    for x in [c, c2, c3] {
        b.release(&x);
    }

    // A hung controller (SIGSTOP): sbatch gets no answer, the submission fails as a site
    // error within the command timeout, and the directory is fenced, because the controller
    // may still queue the job once it wakes up: that job then stops at the fence.
    let c = b.claim("gamma", 1).unwrap();
    bed.bed.stop_cluster("gamma", StopHow::Freeze, true).unwrap();
    let dir = bed.dir("hung");
    let t = Instant::now();
    let e = b.submit(&component("gamma", 1, &c, &dir, "/bin/touch", &["ran"])).unwrap_err();
    let took_hung = t.elapsed();
    assert!(matches!(e, BackendError::Site { .. }), "{e:?}");
    assert!(took_hung < bound, "sbatch against a hung controller took {took_hung:?}");
    let rec: supervise::SupervisorRecord = supervise::read_json(&dir.join(supervise::SUPERVISOR_FILE)).unwrap();
    assert!(rec.fenced, "a failed submission fences its directory");
    bed.bed.start_cluster("gamma").unwrap();
    let raw = bed.bed.client("gamma").unwrap();
    let comment = koalesce_server::slurm::script::comment(&dir);
    let orphan = wait_for("the woken controller to settle", T, || {
        let rows = parse::parse_squeue(
            &raw.run_args("squeue", &["-h", "-t", "all", "-o", parse::SQUEUE_FORMAT])
                .ok()?
                .stdout,
        )
        .ok()?;
        match rows.into_iter().find(|r| r.comment.as_deref() == Some(comment.as_str())) {
            Some(r) if r.state.is_terminal() => Some(Some(r)),
            Some(_) => None,
            None if t.elapsed() > Duration::from_secs(12) => Some(None),
            None => None,
        }
    });
    assert!(
        !supervise::work_dir(&dir).join("ran").exists(),
        "the orphan job must not run the program"
    );
    eprintln!(
        "hung controller: sbatch failed after {:.0} ms; the woken controller {}",
        took_hung.as_secs_f64() * 1000.0,
        match &orphan {
            Some(r) => format!(
                "ran the submission anyway (job {}, {:?}), which stopped at the fence",
                r.job, r.state
            ),
            None => "dropped the submission".into(),
        }
    );
    b.release(&c);
}

/// SIGKILL of a controller just after it launched a job: it loses the last seconds of state,
/// so after the restart it finds the job running where it thinks it pends, kills that launch
/// and launches the job again. The second supervisor finds `supervisor.json` and stops: the
/// program runs at most once, and the component ends once (here, killed before its start,
/// as a node failure: a soft error the daemon re-places).
fn job_run_twice_after_controller_crash(bed: &Bed, b: &SlurmBackend) {
    let c = b.claim("alpha", 2).unwrap();
    let dir = bed.dir("twice");
    let id = b
        .submit(&component("alpha", 2, &c, &dir, "/bin/sh", &["-c", "echo run >> runs"]))
        .unwrap();
    wait_for("check-in", T, || all_ready(b, std::slice::from_ref(&id)).then_some(()));
    bed.bed.stop_cluster("alpha", StopHow::Kill, true).unwrap();
    bed.bed.start_cluster("alpha").unwrap();
    // Wait until the restarted controller settled the job (killed and relaunched it, or not).
    let t0 = Instant::now();
    let relaunched = wait_for("the controller to settle the job", T, || {
        let second = slurm_outputs(&dir).contains("not starting twice");
        (second || t0.elapsed() > Duration::from_secs(8)).then_some(second)
    });
    let s = if all_ready(b, std::slice::from_ref(&id)) {
        b.start(std::slice::from_ref(&id)).unwrap();
        wait_terminal(b, &id, T)
    } else {
        wait_terminal(b, &id, T)
    };
    let runs = std::fs::read_to_string(supervise::work_dir(&dir).join("runs"))
        .unwrap_or_default()
        .lines()
        .count();
    assert!(runs <= 1, "the program ran {runs} times");
    match (&s, runs) {
        (LrmState::Completed, 1) | (LrmState::NodeFail { .. }, 0) => {}
        _ => panic!("state {s:?} after {runs} runs"),
    }
    if relaunched {
        assert_eq!(runs, 0, "the first launch was killed before its start; the second did not run it");
    }
    let what = if relaunched {
        "killed the first launch and launched the job again (the second supervisor stopped at supervisor.json)"
    } else if matches!(&s, LrmState::NodeFail { reason } if reason.contains("no longer knows")) {
        "forgot the job (its id went to the next job; the comment tells them apart)"
    } else {
        "kept the job"
    };
    eprintln!("controller SIGKILL right after a launch: Slurm {what}; the program ran {runs} time(s); the component ended {s:?}");
    let job = id.split(':').nth(1).unwrap();
    let log = std::fs::read_to_string(bed.bed.dir().join("alpha/log/slurmctld.log")).unwrap_or_default();
    for l in log
        .lines()
        .filter(|l| l.contains(&format!("JobId={job} ")) || l.ends_with(&format!("JobId={job}")))
    {
        eprintln!("  slurmctld: {l}");
    }
    b.release(&c);
}

fn slurm_outputs(dir: &Path) -> String {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("slurm-"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect()
}
