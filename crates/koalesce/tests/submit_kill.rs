//! A `koalesce server` SIGKILLed while 16 clients submit and earlier jobs run (so that its
//! group-commit writer has a burst of launch and state writes pending, and new jobs' rows are
//! committed ahead of them, see `koalesce_server::store`): after a restart on the same data
//! directory every acknowledged job is there, under its id, and no job is there twice.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_koalesce");

fn http(method: &str, port: u16, path: &str, token: &str, body: &str) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let url = format!("http://127.0.0.1:{port}{path}");
    let auth = format!("Bearer {token}");
    let r = match method {
        "POST" => agent.post(&url).header("Authorization", &auth).send(body),
        _ => agent.get(&url).header("Authorization", &auth).call(),
    };
    match r {
        Ok(mut resp) => (resp.status().as_u16(), resp.body_mut().read_to_string().unwrap_or_default()),
        Err(_) => (0, String::new()),
    }
}

fn start(data: &Path, config: &Path, port: u16, log: &Path) -> Child {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
    let child = Command::new(BIN)
        .args(["server", "--data-dir"])
        .arg(data)
        .arg("--config")
        .arg(config)
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while http("GET", port, "/healthz", "", "").0 != 200 {
        assert!(t0.elapsed() < Duration::from_secs(30), "server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

#[test]
fn every_acknowledged_job_survives_a_sigkill_during_submissions_and_none_is_there_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let config = tmp.path().join("server.toml");
    std::fs::write(
        &config,
        "allow_root_jobs = true\npoll_interval_ms = 20\n[[sites]]\nname = \"a\"\nprocessors = 8\n\
         [scheduler]\nplace_on_submit = true\nscan_interval = { kind = \"fixed\", interval_ms = 50 }\n\
         [users]\n\"*\" = \"root\"\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["token", "create", "kim", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let token = String::from_utf8_lossy(&out.stdout).split_whitespace().last().unwrap().to_string();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let log = tmp.path().join("server.log");
    let mut server = start(&data, &config, port, &log);

    // 16 clients submit uniquely named /bin/true jobs until the server dies.
    let acked: Arc<Mutex<Vec<(u64, String)>>> = Arc::default();
    let next = Arc::new(AtomicUsize::new(0));
    let dead = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..16)
        .map(|_| {
            let (acked, next, dead, token) = (acked.clone(), next.clone(), dead.clone(), token.clone());
            std::thread::spawn(move || {
                while !dead.load(Ordering::Relaxed) {
                    let name = format!("k{}", next.fetch_add(1, Ordering::Relaxed));
                    let body = format!("name = \"{name}\"\nexecutable = \"/bin/true\"\n[[components]]\nprocessors = 1\n");
                    let (code, text) = http("POST", port, "/api/v1/jobs", &token, &body);
                    if code == 201 {
                        let id = serde_json::from_str::<Value>(&text).unwrap()["id"].as_u64().unwrap();
                        acked.lock().unwrap().push((id, name));
                    }
                }
            })
        })
        .collect();
    // Killed while submissions go on and the first jobs run.
    let t0 = Instant::now();
    while acked.lock().unwrap().len() < 300 {
        assert!(t0.elapsed() < Duration::from_secs(60), "submissions too slow");
        std::thread::sleep(Duration::from_millis(5));
    }
    let metrics = http("GET", port, "/metrics", "", "").1;
    let firsts = metrics
        .lines()
        .find(|l| l.starts_with("koalesce_db_first_groups_total "))
        .unwrap_or("");
    eprintln!("killed after {} acknowledgements; {firsts}", acked.lock().unwrap().len());
    server.kill().unwrap();
    server.wait().unwrap();
    dead.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();

    let mut server = start(&data, &config, port, &log);
    // Every acknowledged job is there under its id and name.
    for (id, name) in &acked {
        let (code, text) = http("GET", port, &format!("/api/v1/jobs/{id}"), &token, "");
        assert_eq!(code, 200, "acknowledged job {id} ({name}) lost: {text}");
        let j: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(j["name"], name.as_str(), "{j}");
    }
    // No job twice: every name once among all jobs.
    let (code, text) = http("GET", port, "/api/v1/jobs?limit=10000", &token, "");
    assert_eq!(code, 200, "{text}");
    let list: Value = serde_json::from_str(&text).unwrap();
    let jobs = list.as_array().or_else(|| list["jobs"].as_array()).expect("a list of jobs");
    let mut names: Vec<&str> = jobs.iter().map(|j| j["name"].as_str().unwrap()).collect();
    assert!(
        jobs.len() >= acked.len(),
        "{} jobs listed, {} acknowledged",
        jobs.len(),
        acked.len()
    );
    names.sort();
    let before = names.len();
    names.dedup();
    assert_eq!(names.len(), before, "a job is there twice");
    server.kill().unwrap();
    let _ = server.wait();
}
