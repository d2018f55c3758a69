//! End to end: job files in other formats submitted with the real `koalesce` binary to a real
//! server (embedded local executor): a GridWay array, an RSL multi-request with per-subjob
//! environments and a fixed site, a JSDL flexible request.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_koalesce");

/// A server on a temporary data dir, killed on drop (also when the test fails).
struct Server {
    dir: tempfile::TempDir,
    child: Child,
    url: String,
    token: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start() -> Server {
        let dir = tempfile::Builder::new().prefix("koalesce-formats-e2e-").tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let cfg = dir.path().join("server.toml");
        std::fs::write(
            &cfg,
            "poll_interval_ms = 50\n[users]\n\"*\" = \"nobody\"\n[[sites]]\nname = \"vu\"\nprocessors = 4\n[[sites]]\nname = \"leiden\"\nprocessors = 4\n\
             [scheduler]\nplace_on_submit = true\nmin_claim_retry_ms = 100\nscan_interval = { kind = \"fixed\", interval_ms = 100 }\n",
        )
        .unwrap();
        let out = Command::new(BIN)
            .args(["token", "create", "alice", "--data-dir"])
            .arg(&data)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let token = String::from_utf8_lossy(&out.stdout).split_whitespace().last().unwrap().to_string();
        let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
        let child = Command::new(BIN)
            .args(["server", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(&data)
            .arg("--config")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut s = Server {
            dir,
            child,
            url: String::new(),
            token,
        };
        let t0 = Instant::now();
        while s.url.is_empty() {
            if let Ok(a) = std::fs::read_to_string(data.join("server.addr")) {
                if !a.trim().is_empty() {
                    s.url = format!("http://{}", a.trim());
                    if !s.cli(&["sites"]).status.success() {
                        s.url.clear();
                    }
                }
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "server not ready: {}", s.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    fn cli(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .env("KOALESCE_URL", &self.url)
            .env("KOALESCE_TOKEN", &self.token)
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "koalesce {args:?} failed: {}\n--- server log ---\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn submit(&self, file: &Path, extra: &[&str]) -> Vec<u64> {
        let mut args = vec!["submit", file.to_str().unwrap()];
        args.extend_from_slice(extra);
        self.ok(&args).lines().map(|l| l.trim().parse().expect("a job id")).collect()
    }

    /// Waits for a job and returns its detail; the job must have succeeded.
    fn succeeded(&self, id: u64) -> Value {
        let out = self.cli(&["wait", &id.to_string(), "--timeout", "60s", "--quiet"]);
        let detail: Value = serde_json::from_str(&self.ok(&["status", &id.to_string(), "--json"])).unwrap();
        assert!(
            out.status.success(),
            "job {id} did not succeed: {detail:#}\n--- server log ---\n{}",
            self.log()
        );
        detail
    }
}

#[test]
fn other_formats_run_on_a_real_server() {
    let s = Server::start();
    let params = s.file("params.txt", "alpha\n");
    s.ok(&["files", "add", "params.txt", params.to_str().unwrap(), "--site", "vu"]);

    // A GridWay array: one bag of 3 tasks, ${TASK_ID} substituted per task, outputs
    // registered under the destination names.
    let jt = s.file(
        "sweep.jt",
        "# a parameter sweep\nEXECUTABLE = /bin/sh\n\
         ARGUMENTS = -c 'cat \"$KOALESCE_INPUT_PARAMS_TXT\" > out.${TASK_ID}; echo ${TASK_ID} of ${TOTAL_TASKS} >> out.${TASK_ID}'\n\
         INPUT_FILES = params.txt\nOUTPUT_FILES = out.${TASK_ID} sweep/out.${TASK_ID}\nRANK = CPU_MHZ\n",
    );
    let bag = s.submit(&jt, &["--tasks", "3"]);
    assert_eq!(bag.len(), 1, "--tasks 3 prints the bag's id alone");

    // A DUROC multi-request: one co-allocated job; each subjob checks its own environment and
    // arguments (a wrong one exits 1), the first is fixed to "vu" by its contact.
    let rsl = s.file(
        "coalloc.rsl",
        "+\n( &(resourceManagerContact=\"vu.das2.example.org:2119/jobmanager-pbs\")(count=2)\n   (executable=/bin/sh)(arguments=-c \"test $ROLE = zero\")\n   (environment=(ROLE zero)(SHARED yes)) )\n\
         ( &(count=1)(executable=/bin/sh)(arguments=-c \"test $ROLE = one -a $SHARED = yes\")\n   (environment=(ROLE one)(SHARED yes)) )\n",
    );
    let rsl_id = s.submit(&rsl, &[])[0];

    // JSDL with only a total CPU count: a flexible request split by FCM.
    let jsdl = s.file(
        "flex.jsdl",
        r#"<?xml version="1.0"?>
<JobDefinition xmlns="http://schemas.ggf.org/jsdl/2005/11/jsdl" xmlns:p="http://schemas.ggf.org/jsdl/2005/11/jsdl-posix">
 <JobDescription>
  <JobIdentification><JobName>flex</JobName></JobIdentification>
  <Application><p:POSIXApplication><p:Executable>/bin/true</p:Executable></p:POSIXApplication></Application>
  <Resources><TotalCPUCount><Exact>6</Exact></TotalCPUCount></Resources>
 </JobDescription>
</JobDefinition>"#,
    );
    let jsdl_id = s.submit(&jsdl, &[])[0];

    let d = s.succeeded(bag[0]);
    assert_eq!(
        (d["bag"]["tasks"].as_u64(), d["bag"]["succeeded"].as_u64()),
        (Some(3), Some(3)),
        "{d:#}"
    );
    let files: Value = serde_json::from_str(&s.ok(&["files", "ls", "--json"])).unwrap();
    let names: Vec<&str> = files.as_array().unwrap().iter().filter_map(|f| f["name"].as_str()).collect();
    for i in 0..3 {
        assert!(
            names.contains(&format!("sweep/out.{i}").as_str()),
            "sweep/out.{i} not registered: {names:?}"
        );
    }

    let d = s.succeeded(rsl_id);
    let comps = d["components"].as_array().unwrap();
    assert_eq!(comps.len(), 2);
    assert_eq!(comps[0]["site"], "vu", "{d:#}");

    let d = s.succeeded(jsdl_id);
    let total: u64 = d["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["processors"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 6, "{d:#}");

    // A file that cannot be honoured is refused before anything reaches the server.
    let bad = s.file("bad.jt", "EXECUTABLE = /bin/true\nRESTART_FILES = ckpt\n");
    let out = s.cli(&["submit", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 2"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = s.ok(&["convert", jt.to_str().unwrap(), "--tasks", "3", "--task", "2"]);
    assert!(out.contains("out.2") && out.contains("3 tasks"), "{out}");
}

/// `koalesce submit --tasks N` of a GridWay template: ONE bag job. Each task gets its index
/// (${TASK_ID}, ${PARAM}, GW_TASK_ID, KOALESCE_TASK_ID) in its arguments and file names; the
/// bag's id shows its progress in `status` and `jobs`, `wait` answers for the bag (at least
/// --min-tasks successes), `cancel` stops every task.
#[test]
fn a_gridway_bag_is_one_job_from_submit_to_cancel() {
    let s = Server::start();
    // Task 1 fails; the others write their numbers into an output named by their index.
    let jt = s.file(
        "bag.jt",
        "EXECUTABLE = /bin/sh\n\
         ARGUMENTS = -c 'echo ${TASK_ID} ${PARAM} ${MAX_PARAM} ${TOTAL_TASKS} $GW_TASK_ID $KOALESCE_TASK_ID > res.${TASK_ID}; test ${TASK_ID} != 1'\n\
         OUTPUT_FILES = res.${TASK_ID} bag/res.${TASK_ID}\n",
    );
    let args = ["--tasks", "4", "--min-tasks", "3", "--param-start", "10", "--param-increment", "5"];
    let ids = s.submit(&jt, &args);
    assert_eq!(ids.len(), 1, "one bag: {ids:?}");
    let bag = ids[0].to_string();
    let out = s.cli(&["wait", &bag, "--timeout", "60s"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "3 of 4 is enough: {text} {}", s.log());
    assert!(text.contains("succeeded, 3 succeeded, 1 failed (of 4; 3 needed)"), "{text}");
    let status = s.ok(&["status", &bag]);
    assert!(status.contains("bag of 4 tasks: succeeded"), "{status}");
    let d: Value = serde_json::from_str(&s.ok(&["status", &bag, "--json"])).unwrap();
    let tasks = d["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 4, "{d:#}");
    assert_eq!(tasks[1]["state"], "failed", "{d:#}");
    // Task 3: TASK_ID 3, PARAM 10 + 5·3, MAX_PARAM 10 + 5·3, TOTAL_TASKS 4, and the variables.
    let res = s.dir.path().join("res3");
    s.ok(&["files", "get", "bag/res.3", "-o", res.to_str().unwrap(), "--quiet"]);
    assert_eq!(std::fs::read_to_string(&res).unwrap(), "3 25 25 4 3 3\n");
    s.ok(&["files", "get", "bag/res.0", "-o", res.to_str().unwrap(), "--quiet"]);
    assert_eq!(std::fs::read_to_string(&res).unwrap(), "0 10 25 4 0 0\n");
    // A bag needing every task fails with the one failed task.
    let strict = s.submit(&jt, &["--tasks", "2"])[0].to_string();
    let out = s.cli(&["wait", &strict, "--timeout", "60s"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains("failed, 1 succeeded, 1 failed"));

    // A bag submitted held: release of the bag's id releases every task.
    let held = s.submit(&jt, &["--tasks", "3", "--min-tasks", "2", "--hold"])[0].to_string();
    std::thread::sleep(Duration::from_millis(300));
    let d: Value = serde_json::from_str(&s.ok(&["status", &held, "--json"])).unwrap();
    assert!(d["tasks"].as_array().unwrap().iter().all(|t| t["state"] == "held"), "{d:#}");
    assert_eq!(d["bag"]["waiting"], 3, "{d:#}");
    s.ok(&["release", &held]);
    let out = s.cli(&["wait", &held, "--timeout", "60s"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));

    // A bag of long tasks: 3 run (4 + 4 processors, 3 needed), cancel stops them all.
    let long = s.file("long.jt", "EXECUTABLE = /bin/sleep\nARGUMENTS = 60\n");
    let bag = s.submit(&long, &["--tasks", "3"])[0].to_string();
    let t0 = Instant::now();
    loop {
        let d: Value = serde_json::from_str(&s.ok(&["status", &bag, "--json"])).unwrap();
        if d["bag"]["running"] == 3 {
            assert_eq!(d["state"], "running");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "the tasks did not start: {d:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let jobs = s.ok(&["jobs"]);
    assert!(jobs.contains("running [bag: 0/3 succeeded, 0 failed, 3 running]"), "{jobs}");
    s.ok(&["cancel", &bag]);
    let out = s.cli(&["wait", &bag, "--timeout", "30s"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("cancelled, 3 cancelled"), "{text}");
    let d: Value = serde_json::from_str(&s.ok(&["status", &bag, "--json"])).unwrap();
    assert!(d["tasks"].as_array().unwrap().iter().all(|t| t["state"] == "cancelled"), "{d:#}");
    // Cancelling it again: already finished.
    assert!(!s.cli(&["cancel", &bag]).status.success());
}
