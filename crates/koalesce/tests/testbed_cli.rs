//! `koalesce testbed` as users run it: up (idempotent), status, stop-cluster / start-cluster,
//! a second bed beside the first, down --purge leaving nothing behind.
//!
//! Needs slurm-wlm and munge (`apt-get install -y slurm-wlm munge`); fails without them.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use koalesce::testbed::{procs, BedGuard, TestBed};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_koalesce");

fn koalesce(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).env_remove("KOALESCE_TESTBED_DIR").output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn tb(cmd: &str, dir: &Path, extra: &[&str]) -> (i32, String, String) {
    let d = dir.display().to_string();
    let mut args = vec!["testbed", cmd];
    args.extend_from_slice(extra);
    args.extend(["--dir", &d]);
    koalesce(&args)
}

#[test]
fn testbed_commands() {
    let tmp = tempfile::Builder::new().prefix("kt").tempdir_in("/tmp").unwrap();
    let dir = tmp.path().join("bed");

    let (code, _, err) = tb("status", &dir, &[]);
    assert_eq!(code, 2);
    assert!(err.contains("no test bed") && err.contains("testbed up"), "{err}");

    let t0 = Instant::now();
    let (code, out, err) = tb("up", &dir, &["--clusters", "2", "--nodes", "1", "--cpus", "8", "--json"]);
    assert_eq!(code, 0, "{err}");
    eprintln!("testbed up (2 clusters x 1 node): {:.2} s", t0.elapsed().as_secs_f64());
    // Torn down even if an assertion below fails.
    let bed = BedGuard(TestBed::open(&dir).unwrap());
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["up"]["started"].as_array().unwrap().len() >= 5,
        "munged, 2 controllers, 2 slurmd: {v}"
    );
    let clusters = v["status"]["clusters"].as_array().unwrap();
    assert_eq!(clusters.len(), 2);
    assert_eq!(clusters[0]["name"], "alpha");
    assert_eq!(clusters[1]["cpus"]["total"], 8);
    assert_eq!(clusters[1]["cpus"]["idle"], 8, "the probe job is done: every CPU idle");

    // Idempotent: nothing started, quick.
    let t0 = Instant::now();
    let (code, out, _) = tb("up", &dir, &["--clusters", "2", "--nodes", "1", "--cpus", "8"]);
    assert_eq!(code, 0);
    assert!(out.contains("already running"), "{out}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    // Another shape in the same directory is refused with the way out.
    let (code, _, err) = tb("up", &dir, &["--clusters", "3"]);
    assert_eq!(code, 2);
    assert!(err.contains("down --purge"), "{err}");

    // The server configuration: one Slurm site per cluster.
    let toml_text = std::fs::read_to_string(dir.join("server.toml")).unwrap();
    let doc: toml::Table = toml::from_str(&toml_text).unwrap();
    let sites = doc["sites"].as_array().unwrap();
    assert_eq!(sites.len(), 2);
    assert_eq!(sites[1]["kind"].as_str(), Some("slurm"));
    assert_eq!(sites[1]["processors"].as_integer(), Some(8));
    let slurm: koalesce_server::slurm::SlurmSiteConfig = sites[1]["slurm"].clone().try_into().unwrap();
    assert_eq!(slurm.conf, bed.conf("beta"));
    assert!(slurm.conf.exists());

    // A cluster stopped and started again; status says so (exit 1 while it is down).
    let (code, out, _) = tb("status", &dir, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("all up"), "{out}");
    let (code, out, err) = tb("stop-cluster", &dir, &["beta"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("SIGTERM"));
    let (code, out, _) = tb("status", &dir, &["--json"]);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["clusters"][1]["controller"]["pid"], Value::Null);
    assert_eq!(v["clusters"][1]["error"], "controller down");
    assert!(v["clusters"][0]["controller"]["pid"].is_number(), "alpha is untouched");
    let (code, _, err) = tb("stop-cluster", &dir, &["omega"]);
    assert_eq!(code, 2);
    assert!(err.contains("no cluster 'omega'"), "{err}");
    let (code, _, err) = tb("start-cluster", &dir, &["beta"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, _) = tb("status", &dir, &[]);
    assert_eq!(code, 0);

    // A second bed beside the first: its own ports (here from --port-base) and munge.
    let dir2 = tmp.path().join("bed2");
    let ports = procs::pick_ports(2, None).unwrap();
    let base = ports[0].to_string();
    let (code, _, err) = tb(
        "up",
        &dir2,
        &["--clusters", "1", "--nodes", "1", "--cpus", "4", "--port-base", &base],
    );
    assert_eq!(code, 0, "{err}");
    let bed2 = BedGuard(TestBed::open(&dir2).unwrap());
    assert_eq!(bed2.spec().clusters[0].controller_port, ports[0]);
    let mine: Vec<u16> = bed.spec().ports();
    assert!(bed2.spec().ports().iter().all(|p| !mine.contains(p)));
    assert!(bed.status().all_up() && bed2.status().all_up());
    // Both answer, each for its own cluster.
    let a1 = bed.client("alpha").unwrap().run_args("sinfo", &["-h", "-o", "%C"]).unwrap();
    let a2 = bed2.client("alpha").unwrap().run_args("sinfo", &["-h", "-o", "%C"]).unwrap();
    assert_eq!((a1.stdout.trim(), a2.stdout.trim()), ("0/8/0/8", "0/4/0/4"));
    drop(bed2);
    assert!(!dir2.exists());

    // A job still running when the bed goes down: cancelled, nothing left behind.
    let job = bed
        .client("alpha")
        .unwrap()
        .run_args("sbatch", &["--parsable", "-n", "1", "-o", "/dev/null", "--wrap", "sleep 300"])
        .unwrap();
    assert!(!job.stdout.trim().is_empty());
    std::thread::sleep(Duration::from_millis(1500));
    let pids: Vec<u32> = ["alpha/run/slurmctld.pid", "beta/run/slurmctld.pid", "munge/run/munged.pid"]
        .iter()
        .filter_map(|f| procs::read_pid(&dir.join(f)))
        .collect();
    assert_eq!(pids.len(), 3);
    let (code, out, err) = tb("down", &dir, &["--purge"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("stopped and deleted"), "{out}");
    assert!(!dir.exists());
    for p in pids {
        assert!(!procs::alive_with(p, ""), "daemon {p} still runs");
    }
    assert!(procs::leftovers(&dir).is_empty());
    drop(bed); // already down: a no-op
}

/// Every process whose command line mentions `needle` (its pid).
fn processes_mentioning(needle: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmd).contains(needle) {
                out.push(pid);
            }
        }
    }
    out
}

/// `koalesce demo --slurm` interrupted with Ctrl-C (SIGINT to its process group, as a terminal
/// sends it) while its jobs run: the server stops, the fresh bed is torn down (no slurmctld,
/// slurmd or munged of it left), its directory and the server's temporary one are deleted;
/// exit status 130.
#[test]
fn an_interrupted_slurm_demo_tears_its_bed_down() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(BIN)
        .args(["demo", "--slurm", "--jobs", "12"])
        .env_remove("KOALESCE_TESTBED_DIR")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut bed = None;
    let mut data_dir = None;
    let t0 = Instant::now();
    for line in lines.by_ref() {
        let line = line.unwrap();
        eprintln!("demo: {line}");
        if let Some(rest) = line.split_once("(data dir ").map(|x| x.1) {
            data_dir = rest.strip_suffix(')').map(std::path::PathBuf::from);
        }
        if let Some(rest) = line.split_once("up in").map(|x| x.1) {
            // "... up in 3.2 s (/tmp/kzbedXXXX/bed; torn down at the end)"
            bed = rest.split_once('(').and_then(|x| x.1.split_once(';')).map(|x| x.0.to_string());
        }
        if line.starts_with("submitted") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "the demo did not get to its jobs");
    }
    let bed = bed.expect("the demo printed its bed's directory");
    assert!(!processes_mentioning(&bed).is_empty(), "the bed's daemons run");
    let pgid = nix::unistd::Pid::from_raw(-(child.id() as i32));
    nix::sys::signal::kill(pgid, nix::sys::signal::Signal::SIGINT).unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    eprintln!("demo after SIGINT: {}", rest.join("\n"));
    let left = processes_mentioning(&bed);
    for &p in &left {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
    }
    assert!(left.is_empty(), "processes of the bed survive the interrupt: {left:?}");
    assert_eq!(status.code(), Some(130), "{rest:?}");
    assert!(rest.iter().any(|l| l.contains("test bed torn down")), "{rest:?}");
    assert!(!Path::new(&bed).exists(), "{bed} is left behind");
    let server_dir = data_dir.expect("the demo printed its server's data dir");
    let server_dir = server_dir.parent().unwrap();
    assert!(!server_dir.exists(), "the server's {} is left behind", server_dir.display());
}
