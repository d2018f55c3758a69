//! Advance reservations on a real Slurm bed (001 §2.3 over `scontrol create reservation`):
//! the start is planned on the partition's running jobs and reservations, a window that
//! cannot be met is `<rejected, T_next>` with the start Slurm would grant, and the service
//! (`POST /api/v1/reservations`) works on a Slurm site as on a local one, except that
//! koalesce does not move Slurm reservations: a flexible request there is a 422.

mod slurm_common;

use std::time::Duration;

use koalesce_server::backend::{Backend, WindowAnswer, WindowRequest};
use koalesce_server::slurm::parse::{parse_show_reservation, SlurmTime};
use slurm_common::*;

const MIN: u64 = 60_000;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn window(processors: u32, duration_ms: u64, earliest_ms: u64, latest_ms: u64) -> WindowRequest {
    WindowRequest {
        site: "alpha".into(),
        processors,
        duration_ms,
        earliest_ms,
        latest_ms,
        flexible: false,
    }
}

/// Unix ms of a reservation's start as Slurm shows it.
fn slurm_start(b: &koalesce_server::slurm::SlurmBackend, id: &str) -> u64 {
    let name = id.rsplit(':').next().unwrap();
    let out = b
        .client("alpha")
        .unwrap()
        .run_args("scontrol", &["show", "reservation", name])
        .unwrap();
    let r = parse_show_reservation(&out.stdout).unwrap().remove(0);
    r.start.unwrap().to_unix_ms_local().unwrap()
}

#[test]
fn reservations_with_t_next_on_a_real_bed() {
    let bed = Bed::up(1, 2, 0);
    let b = bed.backend("scratch");
    let r = b.reservations().expect("Slurm sites take reservations");
    let client = b.client("alpha").unwrap();
    // Someone else's job holds 60 of the 64 cores for 3 minutes.
    client
        .run_args("sbatch", &["-n", "60", "-t", "3", "-p", "debug", "--wrap", "sleep 600"])
        .unwrap();
    let job_end = wait_for("the blocking job to run", Duration::from_secs(30), || {
        let out = client.run_args("squeue", &["-h", "-t", "R", "-o", "%e"]).ok()?;
        SlurmTime::parse(out.stdout.trim())?.to_unix_ms_local()
    });

    // The queue estimate (001 §3.1) sees the job until its end: 8 cores wait for it, 4 not.
    let now = now_ms();
    let e = b.queue_estimate("alpha", now).expect("Slurm sites estimate").unwrap();
    assert_eq!(e.queue_start(now, 8, MIN), Some(job_end + 1_000));
    assert_eq!(e.queue_start(now, 4, MIN), Some(now));

    // 8 cores within the next 30 s: not before the job ends; T_next is its end.
    let t0 = now_ms();
    let a = r.reserve_window(&window(8, MIN, t0, t0 + 30_000)).unwrap();
    let WindowAnswer::Rejected {
        t_next_ms: Some(t_next), ..
    } = a
    else {
        panic!("expected <rejected, T_next>: {a:?}")
    };
    // Slurm's end times are inclusive: the cores are free one second after the job's end.
    assert_eq!(t_next, job_end + 1_000, "T_next is the second after the blocking job's end");
    assert!(b.reservations_held().is_empty());

    // Within 10 minutes: granted at the job's end, as Slurm booked it.
    let a = r.reserve_window(&window(8, MIN, t0, t0 + 10 * MIN)).unwrap();
    let WindowAnswer::Granted { id: first, start_ms } = a else {
        panic!("expected granted: {a:?}")
    };
    assert_eq!(start_ms, slurm_start(&b, &first));
    assert!(start_ms == t_next, "granted at {start_ms}, the job ends at {job_end}");

    // 4 cores now: they are free now.
    let t1 = now_ms();
    let a = r.reserve_window(&window(4, MIN, t1, t1 + 5_000)).unwrap();
    let WindowAnswer::Granted { id: now_id, start_ms } = a else {
        panic!("expected granted now: {a:?}")
    };
    assert!(start_ms <= t1 + 6_000, "granted at {start_ms}, asked from {t1}");

    // 60 cores after the job: the first reservation holds 8 of 64 for a minute, so they fit
    // only once it ends (reservations are in the plan, not only jobs).
    let a = r.reserve_window(&window(60, MIN, t0, t0 + 20 * MIN)).unwrap();
    let WindowAnswer::Granted { id: big, start_ms } = a else {
        panic!("expected granted after the first reservation: {a:?}")
    };
    let first_end = slurm_start(&b, &first) + MIN;
    assert!(
        start_ms == first_end + 1_000,
        "granted at {start_ms}, the first reservation ends at {first_end}"
    );

    // More cores than the partition has: plainly rejected.
    let a = r.reserve_window(&window(65, MIN, t0, t0 + 60 * MIN)).unwrap();
    assert!(matches!(a, WindowAnswer::Rejected { t_next_ms: None, .. }), "{a:?}");
    // An unknown site is an error, not an answer.
    assert!(r
        .reserve_window(&WindowRequest {
            site: "nowhere".into(),
            ..window(1, MIN, t0, t0)
        })
        .is_err());

    for id in [&first, &now_id, &big] {
        r.cancel_reservation(id).unwrap();
    }
    assert!(b.reservations_held().is_empty());
    let out = client.run_args("scontrol", &["show", "reservation"]).unwrap();
    assert!(out.stdout.contains("No reservations"), "{}", out.stdout);
    client.run_args("scancel", &["-p", "debug"]).unwrap();
    wait_for("the blocking job to go", Duration::from_secs(30), || {
        let out = client.run_args("squeue", &["-h", "-t", "R,CG"]).ok()?;
        out.stdout.trim().is_empty().then_some(())
    });

    service_and_a_job_in_a_reservation(&bed);
}

/// The reservations service on a Slurm site: granted (a Slurm reservation exists), rejected
/// with T_next (the second after the first one's end), and a job submitted into it with
/// `koalesce submit --reservation` runs in it (`sbatch --reservation`) from its start.
fn service_and_a_job_in_a_reservation(bed: &Bed) {
    let data = bed.tmp.path().join("server");
    let mut config = koalesce_server::ServerConfig::load(&bed.bed.server_toml()).unwrap();
    for s in &mut config.sites {
        s.reservations = true;
    }
    let mut o = koalesce_server::test_options(&data, &[], Bed::supervisor());
    o.config.sites = config.sites.clone();
    o.config.users.insert("*".into(), "nobody".into());
    o.config.allow_root_jobs = false;
    let srv = koalesce_server::BackgroundServer::start(o).unwrap();
    let tok = koalesce_server::create_token(&data, "alice", false).unwrap();
    let post = |path: &str, body: serde_json::Value| {
        let (code, text) = srv.request("POST", path, Some(&tok), body.to_string().as_bytes());
        (code, serde_json::from_str::<serde_json::Value>(&text).unwrap_or_default())
    };
    let t0 = now_ms();
    // koalesce does not move Slurm's reservations: a flexible one is refused, naming why.
    let (code, v) = post(
        "/api/v1/reservations",
        serde_json::json!({"site": "alpha", "processors": 8, "duration": "5m", "earliest_start_ms": t0 + 4_000,
                           "latest_start_ms": t0 + 600_000, "flexible": true}),
    );
    assert_eq!(code, 422, "{v}");
    let e = v["error"].as_str().unwrap_or_default();
    assert!(
        e.contains("field 'flexible'") && e.contains("(slurm) does not move reservations"),
        "{v}"
    );
    let (code, v) = post(
        "/api/v1/reservations",
        serde_json::json!({"site": "alpha", "processors": 8, "duration": "5m", "earliest_start_ms": t0 + 4_000}),
    );
    assert_eq!(code, 201, "{v}");
    let rid = v["reservation"]["id"].as_str().unwrap().to_string();
    let (start, end) = (
        v["reservation"]["start_ms"].as_u64().unwrap(),
        v["reservation"]["end_ms"].as_u64().unwrap(),
    );
    assert!(start >= t0 + 3_000 && start <= t0 + 6_000, "{v}");
    let out = bed
        .bed
        .site_specs()
        .into_iter()
        .next()
        .map(|spec| {
            std::process::Command::new("scontrol")
                .args(["show", "reservation"])
                .env("SLURM_CONF", &spec.slurm.conf)
                .output()
                .unwrap()
        })
        .unwrap();
    let shown = parse_show_reservation(&String::from_utf8_lossy(&out.stdout)).unwrap();
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0].cores, 8);
    // The whole partition within the next 10 s: taken by it; T_next is after its end.
    let (code, v) = post(
        "/api/v1/reservations",
        serde_json::json!({"site": "alpha", "processors": 64, "duration": "1m", "latest_start_ms": now_ms() + 10_000}),
    );
    assert_eq!(code, 409, "{v}");
    assert_eq!(v["answer"], "rejected", "{v}");
    assert_eq!(v["t_next_ms"].as_u64(), Some(end + 1_000), "{v}");

    // The site publishes its estimate (from squeue, refreshed every few seconds).
    let wait = wait_for("alpha's queue estimate", Duration::from_secs(20), || {
        let (_, body) = srv.request("GET", "/api/v1/sites", Some(&tok), b"");
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v[0]["queue_wait_ms"].as_u64()
    });
    assert_eq!(wait, 0, "64 idle cores: no wait for one");

    // A job into it from the command line.
    let file = bed.tmp.path().join("in-resv.toml");
    std::fs::write(
        &file,
        "name = 'in-resv'\nexecutable = '/bin/sh'\narguments = ['-c', 'date +%s%3N']\nruntime_estimate = '20s'\n[[components]]\nprocessors = 4\n",
    )
    .unwrap();
    let out = std::process::Command::new(BIN)
        .args(["submit", "--reservation", &rid])
        .arg(&file)
        .env("KOALESCE_URL", srv.url())
        .env("KOALESCE_TOKEN", &tok)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let j = wait_for("the job in the reservation to end", Duration::from_secs(60), || {
        let (_, body) = srv.request("GET", &format!("/api/v1/jobs/{id}"), Some(&tok), b"");
        let j: serde_json::Value = serde_json::from_str(&body).ok()?;
        matches!(j["state"].as_str(), Some("succeeded" | "failed")).then_some(j)
    });
    assert_eq!(j["state"], "succeeded", "{j}");
    assert_eq!(j["components"][0]["site"], "alpha", "{j}");
    let stdout = std::fs::read_to_string(j["components"][0]["stdout"].as_str().unwrap()).unwrap();
    let ran: u64 = stdout.trim().parse().unwrap();
    eprintln!(
        "job in Slurm reservation {rid}: ran {} ms after the reservation's start",
        ran as i64 - start as i64
    );
    assert!(ran + 1_000 >= start, "ran at {ran}, before the reservation's start {start}");
    srv.stop();
}
