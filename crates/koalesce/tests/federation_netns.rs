//! Federation over a real, slow network (issue 14 item 5): `koalesce netbed up` makes a
//! namespace per server joined by a veth pair shaped with tc tbf (8 Mbit/s each way: the
//! seed's 40 Mbit/s WAN scaled down five times, so that seconds of transfer matter), and a
//! `koalesce server` runs inside each. Their forecast bandwidth is set absurdly high
//! (1 Gbit/s): only the bandwidth they measure on the link can make a data-heavy job stay.
//!
//! - each server measures the other within the shaped rate (probes over the link);
//! - a job with a 4 MB input stays at its busy origin (moving it would cost 4 s in and an
//!   expected 20 s out at 8 Mbit/s), while a job with a 20 KB input moves to the idle peer,
//!   gets its input over the link, runs there and its output comes back;
//! - `koalesce status g<N>` and `koalesce jobs` at the origin show where the moved job runs
//!   (the peer and its id there) and its state followed from there.
//!
//! Needs root (network namespaces), as CI has; without it the test says so and does nothing.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_koalesce");
const SECRET: &str = "netns-pair-secret-0123456789abcdef";
const PORT: u16 = 7878;
const LINK_MBIT: f64 = 8.0;

fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// The bed: down when dropped (also when the test fails).
struct Bed {
    dir: PathBuf,
    status: Value,
}

impl Bed {
    fn up(dir: &Path) -> Bed {
        let cfg = dir.join("netbed.toml");
        std::fs::write(
            &cfg,
            format!(
                "[[sites]]\nname = \"alpha\"\n[[sites]]\nname = \"beta\"\n[[links]]\nfrom = \"alpha\"\nto = \"beta\"\nmbit = {LINK_MBIT}\n"
            ),
        )
        .unwrap();
        let out = Command::new(BIN)
            .args(["netbed", "up", "--require-namespaces", "--dir"])
            .arg(dir)
            .arg("--config")
            .arg(&cfg)
            .output()
            .unwrap();
        let mut bed = Bed {
            dir: dir.to_path_buf(),
            status: Value::Null,
        };
        assert!(out.status.success(), "netbed up: {}", String::from_utf8_lossy(&out.stderr));
        let out = Command::new(BIN)
            .args(["netbed", "status", "--json", "--dir"])
            .arg(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "netbed status: {}", String::from_utf8_lossy(&out.stderr));
        bed.status = serde_json::from_slice(&out.stdout).unwrap();
        bed
    }

    fn netns(&self, site: &str) -> String {
        format!("{}-{site}", self.status["plan"]["prefix"].as_str().unwrap())
    }

    fn url(&self, site: &str) -> String {
        let ns = self.netns(site);
        let all = self.status["plan"]["namespaces"].as_array().unwrap();
        let n = all.iter().find(|n| n["name"] == ns.as_str()).unwrap();
        format!("http://{}:{PORT}", n["address"].as_str().unwrap())
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = Command::new(BIN).args(["netbed", "down", "--dir"]).arg(&self.dir).output();
    }
}

/// A `koalesce server` inside a site's namespace; killed when dropped.
struct Server {
    ns: String,
    url: String,
    data: PathBuf,
    config: PathBuf,
    child: Child,
    log: PathBuf,
}

impl Server {
    /// Starts the server with a token for `user` (made before it starts: the database is
    /// the server's once it runs).
    fn start(bed: &Bed, dir: &Path, name: &str, procs: u32, peer: &str, user: &str) -> (Server, String) {
        Server::start_with(bed, dir, name, procs, peer, user, "probe_bytes = 1048576\n")
    }

    /// As [`Server::start`], with `extra` lines in `[federation]`.
    fn start_with(bed: &Bed, dir: &Path, name: &str, procs: u32, peer: &str, user: &str, extra: &str) -> (Server, String) {
        let data = dir.join(name).join("data");
        std::fs::create_dir_all(&data).unwrap();
        let secret = dir.join("pair.secret");
        std::fs::write(&secret, SECRET).unwrap();
        let config = dir.join(name).join("server.toml");
        std::fs::write(
            &config,
            format!(
                "allow_root_jobs = true\npoll_interval_ms = 50\n[[sites]]\nname = \"{name}1\"\nprocessors = {procs}\n\
                 [scheduler]\nplace_on_submit = true\nmin_claim_retry_ms = 100\nscan_interval = {{ kind = \"fixed\", interval_ms = 100 }}\n\
                 [users]\n\"*\" = \"root\"\n[federation]\nname = \"{name}\"\nphi = \"1s\"\ncheck_interval_ms = 100\n\
                 peer_timeout_ms = 3000\nbandwidth_bps = 1e9\n{extra}\
                 [[federation.peers]]\nname = \"{peer}\"\nurl = \"{}\"\nsecret_file = {:?}\n",
                bed.url(peer),
                secret
            ),
        )
        .unwrap();
        let token = make_token(&data, user);
        let log = dir.join(name).join("server.log");
        let url = bed.url(name);
        let ns = bed.netns(name);
        let child = spawn(&ns, &data, &config, &url, &log);
        let s = Server {
            ns,
            url,
            data,
            config,
            child,
            log,
        };
        (s, token)
    }

    /// SIGKILL, then the same server again (same data, port, namespace).
    fn kill_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn(&self.ns, &self.data, &self.config, &self.url, &self.log);
    }

    /// A client command run inside the server's namespace (where its address is).
    fn cli(&self, token: &str, args: &[&str]) -> (bool, String) {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns, BIN])
            .args(args)
            .args(["--url", &self.url, "--token", token])
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    }

    fn json(&self, token: &str, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let (ok, text) = self.cli(token, &all);
        assert!(ok, "{args:?}: {text}\n{}", self.log_tail());
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"))
    }

    fn log_tail(&self) -> String {
        let t = std::fs::read_to_string(&self.log).unwrap_or_default();
        t.lines().rev().take(20).collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(ns: &str, data: &Path, config: &Path, url: &str, log: &Path) -> Child {
    let out = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
    Command::new("ip")
        .args(["netns", "exec", ns, BIN, "server", "--data-dir"])
        .arg(data)
        .arg("--config")
        .arg(config)
        .arg("--listen")
        .arg(url.trim_start_matches("http://"))
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap()
}

/// Bytes sent so far from `ns` over its links (every header and resend included).
fn tx_bytes(ns: &str) -> u64 {
    let out = Command::new("ip").args(["-n", ns, "-s", "-j", "link", "show"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .filter(|l| l["ifname"] != "lo")
        .map(|l| l["stats64"]["tx"]["bytes"].as_u64().unwrap_or(0))
        .sum()
}

/// The tests move data over the shaped link one at a time: two at once would share it.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// For a test that needs root: this file's turn, its directory and the bed up in it; None
/// (saying the test was skipped) without root.
fn root_bed() -> Option<(std::sync::MutexGuard<'static, ()>, tempfile::TempDir, Bed)> {
    if !is_root() {
        eprintln!("SKIPPED: this test needs root (network namespaces and tc shaping); CI runs as root");
        return None;
    }
    let one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let bed_dir = tmp.path().join("bed");
    std::fs::create_dir_all(&bed_dir).unwrap();
    let bed = Bed::up(&bed_dir);
    Some((one, tmp, bed))
}

/// The offset a resumable partial under `dir` holds durably (0: none).
fn partial_offset(dir: &Path) -> u64 {
    let mut best = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            best = best.max(partial_offset(&p));
        } else if p.to_string_lossy().ends_with(".part.offset") {
            let v: Value = std::fs::read(&p)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or(Value::Null);
            best = best.max(v["offset"].as_u64().unwrap_or(0));
        }
    }
    best
}

fn make_token(data: &Path, user: &str) -> String {
    let mut cmd = Command::new(BIN);
    cmd.args(["token", "create", user, "--data-dir"]).arg(data);
    if user == "root" {
        cmd.arg("--admin");
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).split_whitespace().last().unwrap().to_string()
}

fn job(name: &str, input: &str, script: &str, estimate: &str) -> String {
    let inputs = if input.is_empty() {
        String::new()
    } else {
        format!("inputs = [\"{input}\"]\n")
    };
    format!(
        "name = \"{name}\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", {script:?}]\nruntime_estimate = \"{estimate}\"\n{inputs}outputs = [\"out.txt\"]\n[[components]]\nprocessors = 1\n"
    )
}

#[test]
fn a_slow_link_keeps_data_heavy_jobs_home_and_light_ones_move_over_it() {
    let Some((_one, tmp, bed)) = root_bed() else { return };
    let (a, alice) = Server::start(&bed, tmp.path(), "alpha", 1, "beta", "alice");
    let (b, root_b) = Server::start(&bed, tmp.path(), "beta", 4, "alpha", "root");
    // Each has measured the other over the shaped link (a 1 MiB probe), not assumed 1 Gbit/s.
    let deadline = Instant::now() + Duration::from_secs(30);
    let measured = |s: &Server, tok: &str| -> Option<f64> {
        let (ok, text) = s.cli(tok, &["federation", "peers", "--json"]);
        ok.then(|| serde_json::from_str::<Value>(&text).ok()?["peers"][0]["measured_bps"].as_f64())
            .flatten()
    };
    let (bw_a, bw_b) = loop {
        if let (Some(x), Some(y)) = (measured(&a, &alice), measured(&b, &root_b)) {
            break (x, y);
        }
        assert!(
            Instant::now() < deadline,
            "no bandwidth measured:\n{}\n{}",
            a.log_tail(),
            b.log_tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    for bw in [bw_a, bw_b] {
        let mbit = bw / 1e6;
        assert!(
            (0.5 * LINK_MBIT..1.3 * LINK_MBIT).contains(&mbit),
            "measured {mbit:.2} Mbit/s on an {LINK_MBIT} Mbit/s link"
        );
    }
    // Inputs at alpha: 4 MB and 20 KB.
    let dir = tmp.path().join("inputs");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in [("big.bin", 4_000_000usize), ("small.bin", 20_000)] {
        let p = dir.join(name);
        std::fs::write(&p, vec![b'x'; bytes]).unwrap();
        let (ok, text) = a.cli(&alice, &["files", "add", name, p.to_str().unwrap(), "--site", "alpha1"]);
        assert!(ok, "{text}");
    }
    // alpha's one processor is busy for ~20 s as far as its estimates go.
    let submit = |toml: &str| -> u64 {
        let f = tmp.path().join(format!("job-{}.toml", toml.len()));
        std::fs::write(&f, toml).unwrap();
        let v = a.json(&alice, &["federation", "submit", f.to_str().unwrap()]);
        v["id"].as_u64().unwrap()
    };
    let blocker = submit(&job("blocker", "", "sleep 3; echo b > out.txt", "20s"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while a.json(&alice, &["federation", "status", &blocker.to_string()])["state"] != "running" {
        assert!(Instant::now() < deadline, "blocker never ran");
        std::thread::sleep(Duration::from_millis(100));
    }
    let heavy = submit(&job("heavy", "big.bin", "wc -c < \"$KOALESCE_INPUT_BIG_BIN\" > out.txt", "10s"));
    let light = submit(&job("light", "small.bin", "wc -c < \"$KOALESCE_INPUT_SMALL_BIN\" > out.txt", "10s"));
    let wait = |id: u64| -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let g = a.json(&alice, &["federation", "status", &id.to_string()]);
            if ["succeeded", "failed", "cancelled"].contains(&g["state"].as_str().unwrap_or("")) {
                return g;
            }
            assert!(Instant::now() < deadline, "grid job {id} stuck: {g}\n{}", a.log_tail());
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let (h, l) = (wait(heavy), wait(light));
    eprintln!(
        "measured {:.2} / {:.2} Mbit/s\nheavy: {}\nlight: {}",
        bw_a / 1e6,
        bw_b / 1e6,
        h["reason"],
        l["reason"]
    );
    assert_eq!(
        (h["state"].as_str(), h["runs_at"].as_str()),
        (Some("succeeded"), Some("local")),
        "{h}"
    );
    let why = h["reason"].as_str().unwrap();
    assert!(
        why.starts_with("stays: local ATT") && why.contains("at beta") && why.contains("4.0 MB in"),
        "{why}"
    );
    assert_eq!(
        (l["state"].as_str(), l["runs_at"].as_str()),
        (Some("succeeded"), Some("beta")),
        "{l}"
    );
    assert!(l["reason"].as_str().unwrap().starts_with("moved:"), "{l}");
    // The light job's output came back over the link; the user gets it from alpha.
    let out_name = format!("grid-{light}/out.txt");
    assert_eq!(l["outputs"], serde_json::json!([out_name]), "{l}");
    let got = tmp.path().join("got.txt");
    let (ok, text) = a.cli(&alice, &["files", "get", &out_name, "-o", got.to_str().unwrap()]);
    assert!(ok, "{text}");
    assert_eq!(std::fs::read_to_string(&got).unwrap().trim(), "20000");
    // status and jobs at the origin show where it runs and its id there.
    let (ok, text) = a.cli(&alice, &["status", &format!("g{light}")]);
    assert!(
        ok && text.contains("runs at  beta") && text.contains("state    succeeded"),
        "{text}"
    );
    let remote_id = l["job"].as_u64().unwrap();
    assert!(
        text.contains(&format!("job id   {remote_id} (on the server that runs it: beta)")),
        "{text}"
    );
    let (ok, text) = a.cli(&alice, &["jobs"]);
    assert!(ok && text.contains("grid jobs not in this server's queue"), "{text}");
    let row = text.lines().find(|l| l.contains("light")).unwrap_or_default();
    assert!(row.contains("beta") && row.contains("succeeded"), "{text}");
    // beta ran the light job only, as peer-alpha.
    let there = b.json(&root_b, &["jobs", "--all"]);
    let there = there.as_array().unwrap();
    assert_eq!(there.len(), 1, "{there:?}");
    assert_eq!(there[0]["user"], "peer-alpha");
}

/// The receiver is SIGKILLed while it pulls a 4 MB input over the 8 Mbit/s link: restarted, it
/// resumes from its last checkpoint (the origin sends less than the whole file again), the job
/// runs once there on the verified bytes, and nothing runs at the origin.
#[test]
fn a_receiver_killed_during_an_input_transfer_resumes_it_and_runs_the_job_once() {
    let Some((_one, tmp, bed)) = root_bed() else { return };
    // Small probes (the decision only needs "move"); no expected output: ADT is the input's.
    let extra = "probe_bytes = 65536\noutput_ratio = 0.0\n";
    let (a, alice) = Server::start_with(&bed, tmp.path(), "alpha", 1, "beta", "alice", extra);
    let (mut b, root_b) = Server::start_with(&bed, tmp.path(), "beta", 4, "alpha", "root", extra);
    let data: Vec<u8> = (0..4_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    let sha = koalesce_server::store::sha256_hex(&data);
    let input = tmp.path().join("big.bin");
    std::fs::write(&input, &data).unwrap();
    let (ok, text) = a.cli(&alice, &["files", "add", "big.bin", input.to_str().unwrap(), "--site", "alpha1"]);
    assert!(ok, "{text}");
    let submit = |toml: &str| -> u64 {
        let f = tmp.path().join(format!("job-{}.toml", toml.len()));
        std::fs::write(&f, toml).unwrap();
        a.json(&alice, &["federation", "submit", f.to_str().unwrap()])["id"]
            .as_u64()
            .unwrap()
    };
    let blocker = submit(&job("blocker", "", "sleep 60; echo b > out.txt", "60s"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while a.json(&alice, &["federation", "status", &blocker.to_string()])["state"] != "running" {
        assert!(Instant::now() < deadline, "blocker never ran");
        std::thread::sleep(Duration::from_millis(100));
    }
    let check = format!("test \"$(sha256sum < $KOALESCE_INPUT_BIG_BIN | cut -d' ' -f1)\" = {sha} && echo ok > out.txt");
    let id = submit(&job("moved", "big.bin", &check, "10s"));
    // Kill beta once it holds at least 2 MiB durably.
    let deadline = Instant::now() + Duration::from_secs(30);
    while partial_offset(&b.data) < 2 << 20 {
        assert!(
            Instant::now() < deadline,
            "no transfer under way: {}",
            a.json(&alice, &["federation", "status", &id.to_string()])
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    b.kill_and_restart();
    let kept = partial_offset(&b.data);
    assert!(kept >= 2 << 20, "the partial was lost: {kept}");
    let sent_before = tx_bytes(&bed.netns("alpha"));
    let deadline = Instant::now() + Duration::from_secs(60);
    let g = loop {
        let g = a.json(&alice, &["federation", "status", &id.to_string()]);
        if ["succeeded", "failed", "cancelled"].contains(&g["state"].as_str().unwrap_or("")) {
            break g;
        }
        assert!(Instant::now() < deadline, "stuck: {g}\n{}", b.log_tail());
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        (g["state"].as_str(), g["runs_at"].as_str()),
        (Some("succeeded"), Some("beta")),
        "{g}"
    );
    let resent = tx_bytes(&bed.netns("alpha")) - sent_before;
    assert!(
        resent < data.len() as u64 - kept + (600 << 10),
        "alpha sent {resent} bytes after the restart; beta held {kept} of {}\nbeta: {}\nalpha: {}",
        data.len(),
        b.log_tail(),
        a.log_tail()
    );
    let there = b.json(&root_b, &["jobs", "--all"]);
    assert_eq!(there.as_array().unwrap().len(), 1, "ran once at beta: {there}");
    let here = a.json(&alice, &["jobs"]);
    assert_eq!(here.as_array().unwrap().len(), 1, "only the blocker at alpha: {here}");
}

/// The origin is SIGKILLed while the receiver pulls a 4 MB input from it over the 8 Mbit/s
/// link: restarted on its port, it commits the handoff again (its journal says `migrated`), the
/// receiver resumes its partial, and the job runs exactly once there on the verified bytes;
/// once its output is back, the receiver drops the input it received.
#[test]
fn an_origin_killed_during_an_input_transfer_is_restarted_and_the_job_runs_once() {
    let Some((_one, tmp, bed)) = root_bed() else { return };
    let extra = "probe_bytes = 65536\noutput_ratio = 0.0\n";
    let (mut a, alice) = Server::start_with(&bed, tmp.path(), "alpha", 1, "beta", "alice", extra);
    let (b, root_b) = Server::start_with(&bed, tmp.path(), "beta", 4, "alpha", "root", extra);
    let data: Vec<u8> = (0..4_000_000u32).map(|i| (i.wrapping_mul(2_246_822_519) >> 24) as u8).collect();
    let sha = koalesce_server::store::sha256_hex(&data);
    let input = tmp.path().join("big.bin");
    std::fs::write(&input, &data).unwrap();
    let (ok, text) = a.cli(&alice, &["files", "add", "big.bin", input.to_str().unwrap(), "--site", "alpha1"]);
    assert!(ok, "{text}");
    let submit = |a: &Server, toml: &str| -> u64 {
        let f = tmp.path().join(format!("job-{}.toml", toml.len()));
        std::fs::write(&f, toml).unwrap();
        a.json(&alice, &["federation", "submit", f.to_str().unwrap()])["id"]
            .as_u64()
            .unwrap()
    };
    let blocker = submit(&a, &job("blocker", "", "sleep 30; echo b > out.txt", "60s"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while a.json(&alice, &["federation", "status", &blocker.to_string()])["state"] != "running" {
        assert!(Instant::now() < deadline, "blocker never ran");
        std::thread::sleep(Duration::from_millis(100));
    }
    let check = format!("test \"$(sha256sum < $KOALESCE_INPUT_BIG_BIN | cut -d' ' -f1)\" = {sha} && echo ok > out.txt");
    let id = submit(&a, &job("moved", "big.bin", &check, "10s"));
    // Kill alpha once beta holds at least 1 MiB of the input durably (the pull is under way).
    let deadline = Instant::now() + Duration::from_secs(30);
    while partial_offset(&b.data) < 1 << 20 {
        assert!(
            Instant::now() < deadline,
            "no transfer under way: {}",
            a.json(&alice, &["federation", "status", &id.to_string()])
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    a.kill_and_restart();
    let deadline = Instant::now() + Duration::from_secs(90);
    let g = loop {
        let (ok, text) = a.cli(&alice, &["federation", "status", &id.to_string(), "--json"]);
        let g: Value = if ok {
            serde_json::from_str(&text).unwrap_or(Value::Null)
        } else {
            Value::Null
        };
        if ["succeeded", "failed", "cancelled"].contains(&g["state"].as_str().unwrap_or("")) {
            break g;
        }
        assert!(
            Instant::now() < deadline,
            "stuck: {text}\nbeta: {}\nalpha: {}",
            b.log_tail(),
            a.log_tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        (g["state"].as_str(), g["runs_at"].as_str()),
        (Some("succeeded"), Some("beta")),
        "{g}"
    );
    assert_eq!(g["exit_ok"], true, "the job read exactly alpha's bytes: {g}");
    let there = b.json(&root_b, &["jobs", "--all"]);
    assert_eq!(there.as_array().unwrap().len(), 1, "ran once at beta: {there}");
    let here = a.json(&alice, &["jobs"]);
    assert_eq!(here.as_array().unwrap().len(), 1, "only the blocker at alpha: {here}");
    // Its output came back to alpha; then beta drops the input it received (catalogue).
    let out = g["outputs"][0].as_str().unwrap_or_default().to_string();
    assert!(!out.is_empty(), "{g}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let files = b.json(&root_b, &["files", "ls"]);
        let kept: Vec<&Value> = files
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["name"].as_str().is_some_and(|n| n.starts_with("peer-")))
            .collect();
        if kept.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "beta keeps {kept:?}\n{}", b.log_tail());
        std::thread::sleep(Duration::from_millis(200));
    }
}
