//! koalesce's Slurm-compatible commands against a real `koalesce server`, and the workflow
//! tools that drive them (issue 18).
//!
//! - `commands_speak_slurm`: `koalesce slurm-commands install DIR`, then sbatch / squeue /
//!   sacct / scancel / scontrol through the installed names, checking Slurm's formats, states,
//!   exit codes, output files and refusals.
//! - `workflow_tools_run_on_koalesce`: code no one here wrote, from PyPI: PSI/J's own test
//!   suite with the `koalesce` executor (python/) and with PSI/J's `slurm` executor on our
//!   commands, dask-jobqueue's SLURMCluster and Parsl's SlurmProvider
//!   (`python/ci/setup-venv.sh`, then `python/ci/run-tools.sh`). It needs Python 3 with venv
//!   and PyPI (CI installs them); it fails, not skips, without them.

mod slurm_common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use slurm_common::BIN;

/// Two local sites.
const LOCAL_SITES: &str = "[[sites]]\nname = \"vu\"\nprocessors = 8\n[[sites]]\nname = \"leiden\"\nprocessors = 4\n";

/// A `koalesce server` child on a temporary directory, with the Slurm commands installed.
struct Server {
    dir: tempfile::TempDir,
    child: Child,
    url: String,
    token: String,
    bin: PathBuf,
}

impl Server {
    /// Starts a server with `sites` (TOML `[[sites]]` tables); jobs may also read `read_only`
    /// and write the test directory's `shared/` (and `/dev/shm`, which Python's
    /// multiprocessing needs).
    fn start(sites: &str, read_only: &[PathBuf]) -> Server {
        let dir = tempfile::Builder::new().prefix("koalesce-slurmcmd-").tempdir().unwrap();
        let data = dir.path().join("data");
        let shared = dir.path().join("shared");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::create_dir_all(&shared).unwrap();
        let ro: Vec<String> = read_only.iter().map(|p| format!("{:?}", p.display().to_string())).collect();
        // Test users have no Unix accounts: as root their jobs run as root (still sandboxed).
        let config = format!(
            "poll_interval_ms = 50\nallow_root_jobs = true\n{sites}\n\
             [scheduler]\nplace_on_submit = true\nmin_claim_retry_ms = 100\n\
             scan_interval = {{ kind = \"fixed\", interval_ms = 100 }}\n\
             [users]\n\"*\" = \"root\"\n[sandbox]\nread_only = [{}]\nread_write = [{:?}, \"/dev/shm\"]\n",
            ro.join(", "),
            shared.display().to_string()
        );
        std::fs::write(dir.path().join("server.toml"), config).unwrap();
        let out = Command::new(BIN)
            .args(["token", "create", "alice", "--data-dir"])
            .arg(&data)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let token = String::from_utf8_lossy(&out.stdout).split_whitespace().last().unwrap().to_string();
        let (child, url) = Server::spawn(dir.path());
        let bin = dir.path().join("bin");
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, format!("{token}\n")).unwrap();
        let s = Server {
            dir,
            child,
            url,
            token,
            bin,
        };
        s.install();
        s
    }

    /// Starts `koalesce server` on DIR/data with DIR/server.toml; its URL once it listens.
    fn spawn(dir: &Path) -> (Child, String) {
        let data = dir.join("data");
        let addr_file = data.join("server.addr");
        let _ = std::fs::remove_file(&addr_file);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("server.log"))
            .unwrap();
        let child = Command::new(BIN)
            .arg("server")
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen", "127.0.0.1:0", "--config"])
            .arg(dir.join("server.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        let url = loop {
            if let Ok(a) = std::fs::read_to_string(&addr_file) {
                if !a.trim().is_empty() {
                    break format!("http://{}", a.trim());
                }
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "the server did not start");
            std::thread::sleep(Duration::from_millis(50));
        };
        (child, url)
    }

    /// `koalesce slurm-commands install DIR/bin` for the server's current URL.
    fn install(&self) {
        let out = Command::new(BIN)
            .args(["slurm-commands", "install"])
            .arg(&self.bin)
            .arg("--url")
            .arg(&self.url)
            .arg("--token-file")
            .arg(self.dir.path().join("token"))
            .arg("--force")
            .output()
            .unwrap();
        assert!(out.status.success(), "install: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Stops the server (SIGTERM) and starts it again on the same data directory.
    fn restart(&mut self) {
        self.stop();
        let (child, url) = Server::spawn(self.dir.path());
        self.child = child;
        self.url = url;
        self.install();
    }

    fn stop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn shared(&self) -> PathBuf {
        self.dir.path().join("shared")
    }

    /// Runs an installed command (found through the link in DIR, connection from
    /// DIR/koalesce-client.toml: no KOALESCE_* variables) in `shared/`.
    fn run(&self, cmd: &str, args: &[&str]) -> Output {
        Command::new(self.bin.join(cmd))
            .args(args)
            .current_dir(self.shared())
            .env_remove("KOALESCE_URL")
            .env_remove("KOALESCE_TOKEN")
            .output()
            .unwrap()
    }

    fn stdout(&self, cmd: &str, args: &[&str]) -> String {
        let o = self.run(cmd, args);
        assert!(
            o.status.success(),
            "{cmd} {args:?}: {}\n{}",
            String::from_utf8_lossy(&o.stderr),
            self.log_tail()
        );
        String::from_utf8(o.stdout).unwrap()
    }

    fn log_tail(&self) -> String {
        let t = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Polls `squeue -h -j ID -o %T` until the job's state is final.
    fn wait_final(&self, id: &str) -> String {
        let t0 = Instant::now();
        loop {
            let s = self.stdout("squeue", &["-h", "-j", id, "-o", "%T"]).trim().to_string();
            if ["COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY"].contains(&s.as_str()) {
                return s;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "job {id} still {s}\n{}", self.log_tail());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

#[test]
fn commands_speak_slurm() {
    let s = Server::start(LOCAL_SITES, &[]);
    let shared = s.shared();
    std::fs::write(
        shared.join("job.sh"),
        "#!/bin/bash\n#SBATCH -J hello\n#SBATCH -n 2 --cpus-per-task=2\n#SBATCH -t 5\n#SBATCH -o out-%j.txt\n#SBATCH -e err-%x.txt\n\n\
         echo \"id=$SLURM_JOB_ID tasks=$SLURM_NTASKS cpus=$SLURM_CPUS_ON_NODE arg=$1 dir=$(pwd) user=$PROBE\"\n\
         scontrol show hostnames | wc -l\necho to-stderr >&2\nexit 3\n",
    )
    .unwrap();
    // sbatch prints Slurm's line; --parsable the bare id.
    let out = Command::new(s.bin.join("sbatch"))
        .args(["job.sh", "first-arg"])
        .current_dir(&shared)
        .env("PROBE", "exported")
        .env("PATH", format!("{}:{}", s.bin.display(), std::env::var("PATH").unwrap_or_default()))
        .env("KOALESCE_TOKEN", &s.token)
        .env("KOALESCE_URL", &s.url)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line = String::from_utf8(out.stdout).unwrap();
    let id = line
        .trim()
        .strip_prefix("Submitted batch job ")
        .unwrap_or_else(|| panic!("{line}"))
        .to_string();
    let long = s.stdout("sbatch", &["--parsable", "-J", "sleeper", "--wrap", "sleep 30"]);
    let id2 = long.trim().to_string();
    assert!(id2.parse::<u64>().is_ok(), "{long}");

    // A failing script: FAILED with its exit code, output where -o/-e said.
    assert_eq!(s.wait_final(&id), "FAILED");
    let text = std::fs::read_to_string(shared.join(format!("out-{id}.txt"))).unwrap();
    assert_eq!(
        text,
        format!("id={id} tasks=2 cpus=4 arg=first-arg dir={} user=exported\n1\n", shared.display()),
        "the environment was exported, the script ran in the submission directory"
    );
    assert_eq!(std::fs::read_to_string(shared.join("err-hello.txt")).unwrap(), "to-stderr\n");

    // squeue: the default format (only active jobs), -t all, -O as PSI/J asks, Parsl's form.
    let t0 = Instant::now();
    while s.stdout("squeue", &["-h", "-j", &id2, "-o", "%t"]).trim() != "R" {
        assert!(t0.elapsed() < Duration::from_secs(30), "{}", s.log_tail());
        std::thread::sleep(Duration::from_millis(100));
    }
    let q = s.stdout("squeue", &[]);
    let lines: Vec<&str> = q.lines().collect();
    assert_eq!(
        lines[0],
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)"
    );
    assert_eq!(lines.len(), 2, "the failed job is not listed without -t: {q}");
    let cols: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        (cols[0], cols[2], cols[3], cols[4], cols[6]),
        (id2.as_str(), "sleeper", "alice", "R", "1")
    );
    let q = s.stdout("squeue", &["-O", "JobArrayID,StateCompact,Reason", "-t", "all", "--me"]);
    let rows: Vec<Vec<&str>> = q.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
    assert!(rows.contains(&vec![id.as_str(), "F", "NonZeroExitCode"]), "{q}");
    assert!(rows.contains(&vec![id2.as_str(), "R", "None"]), "{q}");
    assert_eq!(
        s.stdout("squeue", &["--noheader", "--format=%i %t", "--job", &id]),
        format!("{id} F\n")
    );

    // sacct: Parsl's query, parsable output with the batch step.
    assert_eq!(
        s.stdout("sacct", &["-X", "--noheader", "--format=jobid,state%20", "--job", &id])
            .split_whitespace()
            .collect::<Vec<_>>(),
        [id.as_str(), "FAILED"]
    );
    assert_eq!(
        s.stdout("sacct", &["-P", "-j", &id, "-o", "JobID,JobName,State,ExitCode"]),
        format!("JobID|JobName|State|ExitCode\n{id}|hello|FAILED|3:0\n{id}.batch|batch|FAILED|3:0\n")
    );

    // scontrol show job, scancel (again: already finished), squeue's error for unknown ids.
    let sj = s.stdout("scontrol", &["show", "job", &id]);
    assert!(sj.starts_with(&format!("JobId={id} JobName=hello\n")), "{sj}");
    assert!(
        sj.contains("JobState=FAILED Reason=NonZeroExitCode") && sj.contains("ExitCode=3:0"),
        "{sj}"
    );
    assert!(s.run("scancel", &[&id2]).status.success());
    assert_eq!(s.wait_final(&id2), "CANCELLED");
    // As Slurm 22.05: ended and unknown jobs are reported only with -v, exit 0.
    let again = s.run("scancel", &[&id2]);
    assert!(again.status.success() && again.stderr.is_empty());
    let again = s.run("scancel", &["-v", &id2]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("Job/step already completing or completed"));
    assert!(s.run("scancel", &["-Q", "-v", &id2]).status.success());
    let missing = s.run("squeue", &["-j", "9999"]);
    assert_eq!(missing.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&missing.stderr),
        "slurm_load_jobs error: Invalid job id specified\n"
    );
    let missing = s.run("scancel", &["-v", "9999"]);
    assert_eq!(missing.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("Kill job error on job id 9999: Invalid job id specified"));
    let bad = s.run("scancel", &["abc"]);
    assert_eq!(bad.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&bad.stderr), "scancel: error: Invalid job id abc\n");

    // What koalesce cannot honour is refused in Slurm's words, before anything is submitted.
    let before = s.stdout("squeue", &["-h", "-t", "all", "-o", "%i"]);
    for (args, words) in [
        (&["--array=x", "job.sh"][..], "sbatch: error: Invalid job array specification"),
        (&["--dependency=singleton", "job.sh"], "sbatch: error: Job dependency problem"),
        (&["--gres=gpu:1", "job.sh"], "sbatch: error: koalesce cannot honour --gpus/--gres"),
        (&["-p", "nowhere", "job.sh"], "sbatch: error: invalid partition specified: nowhere"),
        (&["--frobnicate", "job.sh"], "sbatch: unrecognized option '--frobnicate'"),
    ] {
        let o = s.run("sbatch", args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.starts_with(words), "{args:?}: {err}");
    }
    std::fs::write(shared.join("noshebang.sh"), "echo hi\n").unwrap();
    let o = s.run("sbatch", &["noshebang.sh"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("This does not look like a batch script"));
    assert_eq!(
        s.stdout("squeue", &["-h", "-t", "all", "-o", "%i"]),
        before,
        "nothing was submitted"
    );

    // Dependencies and holds: a held job pends with Slurm's reason; its dependant waits.
    let held = s
        .stdout("sbatch", &["--parsable", "-H", "-o", "/dev/null", "--wrap", "true"])
        .trim()
        .to_string();
    let dep = s
        .stdout(
            "sbatch",
            &[
                "--parsable",
                &format!("--dependency=afterok:{held}"),
                "-o",
                "/dev/null",
                "--wrap",
                "true",
            ],
        )
        .trim()
        .to_string();
    assert_eq!(s.stdout("squeue", &["-h", "-j", &held, "-o", "%T %r"]), "PENDING JobHeldUser\n");
    assert_eq!(s.stdout("squeue", &["-h", "-j", &dep, "-o", "%T %r"]), "PENDING Dependency\n");
    assert!(s.run("scancel", &[&held, &dep]).status.success());
    // An array: one job per task, shown as ARRAY_TASK, each with its SLURM_ARRAY_TASK_ID.
    let arr = s
        .stdout(
            "sbatch",
            &[
                "--parsable",
                "--array=1-3",
                "-o",
                "arr-%A_%a.txt",
                "--wrap",
                "echo $SLURM_ARRAY_TASK_ID",
            ],
        )
        .trim()
        .to_string();
    let t0 = Instant::now();
    loop {
        let st = s.stdout("sacct", &["-X", "-n", "-P", "-o", "JobID,State", "-S", "now-1hour"]);
        let mine: Vec<&str> = st.lines().filter(|l| l.starts_with(&format!("{arr}_"))).collect();
        if mine.len() == 3 && mine.iter().all(|l| l.ends_with("|COMPLETED")) {
            assert_eq!(
                mine,
                [
                    format!("{arr}_1|COMPLETED"),
                    format!("{arr}_2|COMPLETED"),
                    format!("{arr}_3|COMPLETED")
                ]
            );
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "{st}\n{}", s.log_tail());
        std::thread::sleep(Duration::from_millis(200));
    }
    for t in 1..=3 {
        assert_eq!(
            std::fs::read_to_string(shared.join(format!("arr-{arr}_{t}.txt"))).unwrap(),
            format!("{t}\n")
        );
    }

    // -p SITE pins the job; --wait returns the exit code.
    let o = s.run("sbatch", &["-W", "-p", "leiden", "-o", "/dev/null", "--wrap", "exit 0"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let jid = String::from_utf8_lossy(&o.stdout).trim().rsplit(' ').next().unwrap().to_string();
    assert_eq!(s.stdout("squeue", &["-h", "-j", &jid, "-o", "%P %T"]), "leiden COMPLETED\n");
}

/// `sbatch --dependency=afterok:<array id>` waits for every task of the array, as in Slurm
/// (it used to start after the array's first task alone, whose id the array shares), also with
/// a `%M` throttle; `afterok:<array id>_<task>` waits for that task alone (task 0 included, whose
/// id is the array's).
#[test]
fn an_sbatch_dependency_on_an_array_waits_for_every_task() {
    let s = Server::start(LOCAL_SITES, &[]);
    let shared = s.shared();
    let done = shared.join("done");
    std::fs::create_dir_all(&done).unwrap();
    // Task 0 ends at once, the others later; each leaves a mark when it ends.
    let task = format!(
        "[ $SLURM_ARRAY_TASK_ID = 0 ] || sleep 1.5; touch {}/task-$SLURM_ARRAY_TASK_ID",
        done.display()
    );
    let arr = s
        .stdout("sbatch", &["--parsable", "--array=0-2%2", "-o", "/dev/null", "--wrap", &task])
        .trim()
        .to_string();
    let count = shared.join("count.txt");
    let dep = s
        .stdout(
            "sbatch",
            &[
                "--parsable",
                &format!("--dependency=afterok:{arr}"),
                "-o",
                "/dev/null",
                "--wrap",
                &format!("ls {} | wc -l > {}", done.display(), count.display()),
            ],
        )
        .trim()
        .to_string();
    // `<array>_<task>`, submitted while the array runs: starts after task 0 alone.
    let count0 = shared.join("count0.txt");
    let first = s
        .stdout(
            "sbatch",
            &[
                "--parsable",
                &format!("--dependency=afterok:{arr}_0"),
                "-o",
                "/dev/null",
                "--wrap",
                &format!("ls {} | wc -l > {}", done.display(), count0.display()),
            ],
        )
        .trim()
        .to_string();
    assert_eq!(s.wait_final(&first), "COMPLETED");
    let n0: u32 = std::fs::read_to_string(&count0).unwrap().trim().parse().unwrap();
    assert!((1..3).contains(&n0), "afterok:{arr}_0 started after task 0 alone ({n0} tasks done)");
    assert_eq!(s.wait_final(&dep), "COMPLETED");
    assert_eq!(
        std::fs::read_to_string(&count).unwrap().trim(),
        "3",
        "the dependent ran after every task of the array"
    );
    let o = s.run(
        "sbatch",
        &["--parsable", &format!("--dependency=afterok:{arr}_7"), "--wrap", "true"],
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("afterok:{arr}_7")) && err.contains("task"), "{err}");
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// `--begin`: the job pends (BeginTime) until its time, also across a server restart;
/// `--signal=B:USR1@58` with `-t 1`: the batch shell's trap runs about 2 s after the start.
#[test]
fn sbatch_begin_waits_across_a_restart_and_signal_reaches_the_trap() {
    let mut s = Server::start(LOCAL_SITES, &[]);
    let shared = s.shared();
    let started = shared.join("started.txt");
    let script = format!("date +%s%3N > {}", started.display());
    let asked = now_ms();
    let id = s
        .stdout("sbatch", &["--parsable", "--begin=now+4", "-o", "/dev/null", "--wrap", &script])
        .trim()
        .to_string();
    let answered = now_ms();
    // Seconds resolution, as Slurm's: not before the second after 4 s from now.
    let begin_ms = (asked / 1000 + 4) * 1000;
    assert_eq!(s.stdout("squeue", &["-h", "-j", &id, "-o", "%T %r"]), "PENDING BeginTime\n");
    let show = s.stdout("scontrol", &["show", "job", &id]);
    assert!(show.contains("Reason=BeginTime"), "{show}");
    // squeue's %S and scontrol's EligibleTime: the begin time, in local time (sbatch read
    // `now` between `asked` and `answered`).
    let local = |secs: u64| {
        let o = Command::new("date")
            .args(["-d", &format!("@{secs}"), "+%Y-%m-%dT%H:%M:%S"])
            .output()
            .unwrap();
        String::from_utf8(o.stdout).unwrap().trim().to_string()
    };
    let shown = s.stdout("squeue", &["-h", "-j", &id, "-o", "%S"]).trim().to_string();
    let possible: Vec<String> = (asked / 1000 + 4..=answered / 1000 + 4).map(local).collect();
    assert!(possible.contains(&shown), "{shown} not in {possible:?}");
    assert!(show.contains(&format!("EligibleTime={shown}")), "{show}");
    // Stopped and started again before the begin time: still pending for it.
    s.restart();
    assert_eq!(s.stdout("squeue", &["-h", "-j", &id, "-o", "%T %r"]), "PENDING BeginTime\n");
    assert_eq!(s.wait_final(&id), "COMPLETED");
    let ran: u64 = std::fs::read_to_string(&started).unwrap().trim().parse().unwrap();
    assert!(ran >= begin_ms, "started at {ran}, before its begin time {begin_ms}");

    // A begin time in the past: at once.
    let o = s.stdout(
        "sbatch",
        &["--parsable", "--begin=2020-01-01T00:00", "-o", "/dev/null", "--wrap", "true"],
    );
    assert_eq!(s.wait_final(o.trim()), "COMPLETED");

    let got = shared.join("signal.txt");
    let script = format!(
        "#!/bin/bash\n#SBATCH -t 1\n#SBATCH --signal=B:USR1@58\n#SBATCH -o /dev/null\n\
         t0=$(date +%s%3N)\ntrap 'echo $(( $(date +%s%3N) - t0 )) > {}; exit 0' USR1\n\
         while :; do sleep 0.1; done\n",
        got.display()
    );
    std::fs::write(shared.join("sig.sh"), script).unwrap();
    let id = s.stdout("sbatch", &["--parsable", "sig.sh"]).trim().to_string();
    assert_eq!(s.wait_final(&id), "COMPLETED", "the trap ended the job");
    let after: u64 = std::fs::read_to_string(&got).unwrap().trim().parse().unwrap();
    assert!(
        (1_000..10_000).contains(&after),
        "58 s before a 60 s limit: came {after} ms after the start"
    );
    let o = s.run("sbatch", &["--signal=R:USR1@30", "--wrap", "true"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("Invalid signal specification") && err.contains("R:"), "{err}");
    let o = s.run("sbatch", &["--begin=someday", "--wrap", "true"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("Invalid --begin specification"));
}

/// `-C/--constraint`: only a site with the features takes the job; a constraint no site
/// satisfies is refused at submission, and a feature no site has also by the server.
#[test]
fn sbatch_constraint_picks_the_sites_with_the_features() {
    let sites = "[[sites]]\nname = \"vu\"\nprocessors = 8\n[sites.attributes]\nfeatures = [\"ib\", \"haswell\"]\n\
                 [[sites]]\nname = \"leiden\"\nprocessors = 8\n[sites.attributes]\nfeatures = [\"skylake\"]\n";
    let s = Server::start(sites, &[]);
    for (constraint, site) in [
        ("ib", "vu"),
        ("skylake", "leiden"),
        ("[haswell|skylake]&ib", "vu"),
        ("ib|skylake&haswell", "vu"),
    ] {
        let id = s
            .stdout("sbatch", &["--parsable", "-C", constraint, "-o", "/dev/null", "--wrap", "true"])
            .trim()
            .to_string();
        assert_eq!(s.wait_final(&id), "COMPLETED");
        assert_eq!(s.stdout("squeue", &["-h", "-j", &id, "-o", "%N"]).trim(), site, "{constraint}");
    }
    for bad in ["ib&skylake", "gpu", "gpu|ib", "ib*2"] {
        let o = s.run("sbatch", &["-C", bad, "--wrap", "true"]);
        assert!(!o.status.success(), "{bad}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("Invalid feature specification"), "{bad}: {err}");
    }
    // The server itself refuses a feature no site has (a job file written by hand).
    let job = s.shared().join("job.toml");
    std::fs::write(
        &job,
        "name = \"f\"\nexecutable = \"/bin/true\"\nrequirements = 'HAS_FEATURE(\"gpu\")'\n[[components]]\nprocessors = 1\n",
    )
    .unwrap();
    let o = Command::new(BIN)
        .arg("submit")
        .arg(&job)
        .env("KOALESCE_URL", &s.url)
        .env("KOALESCE_TOKEN", &s.token)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("Invalid feature specification") && err.contains("gpu"), "{err}");
}

/// The command lines the Slurm executors of Parsl (parsl/providers/slurm/slurm.py), Snakemake
/// (snakemake-executor-plugin-slurm: submit_string.py, job_status_query.py,
/// job_cancellation.py) and Nextflow (SlurmExecutor.groovy) run, as they run them.
#[test]
fn workflow_tools_command_lines_work() {
    let s = Server::start(LOCAL_SITES, &[]);
    let shared = s.shared();
    let lines = |out: String| -> Vec<String> { out.lines().map(str::to_string).collect() };

    // Parsl: `sacct -X` tells whether accounting works; then status by sacct, cancel by scancel.
    assert!(s.run("sacct", &["-X"]).status.success());
    std::fs::write(
        shared.join("parsl.sh"),
        "#!/bin/bash\n\n#SBATCH --job-name=parsl.slurm.1\n#SBATCH --output=/dev/null\n#SBATCH --nodes=1\n\
         #SBATCH --time=10\n#SBATCH --ntasks-per-node=1\n#SBATCH --exclusive\n#SBATCH --clusters=koalesce\nsleep 30\n",
    )
    .unwrap();
    let out = s.stdout("sbatch", &["parsl.sh"]);
    let id = out
        .trim()
        .strip_prefix("Submitted batch job ")
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();
    let done = s
        .stdout("sbatch", &["--parsable", "-o", "/dev/null", "--wrap", "true"])
        .trim()
        .to_string();
    assert_eq!(s.wait_final(&done), "COMPLETED");
    let st = lines(s.stdout(
        "sacct",
        &[
            "--clusters=koalesce",
            "-X",
            "--noheader",
            "--format=jobid,state%20",
            "--job",
            &format!("{id},{done}"),
        ],
    ));
    assert_eq!(st.len(), 2, "{st:?}");
    let words: Vec<Vec<&str>> = st.iter().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(words[1], [done.as_str(), "COMPLETED"]);
    assert_eq!(words[0][0], id);
    assert!(["PENDING", "RUNNING"].contains(&words[0][1]), "{st:?}");
    let sq = s.stdout("squeue", &["--clusters=koalesce", "--noheader", "--format=%i %t", "--job", &id]);
    assert!(
        sq == format!("{id} R\n") || sq == format!("{id} PD\n") || sq == format!("{id} CF\n"),
        "{sq}"
    );
    assert!(s.run("scancel", &["--clusters=koalesce", &id]).status.success());
    assert_eq!(s.wait_final(&id), "CANCELLED");
    let o = s.run("squeue", &["--clusters=alpha", "-h"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("No cluster 'alpha' known by database."));

    // Snakemake: the script on standard input, its options, then sacct / squeue by run name.
    let run = "3f2a-snakemake-run";
    let mut child = Command::new(s.bin.join("sbatch"))
        .args([
            "--parsable",
            "--job-name",
            run,
            "--output",
            "/dev/null",
            "--export=ALL",
            "--comment",
            "rule_a_wildcards",
            "-A",
            "proj",
            "-p",
            "vu",
            "-t",
            "5",
            "-C",
            "",
            "--qos=",
            "--mem",
            "100",
            "--ntasks=1",
            "--cpus-per-task=1",
            "-D",
        ])
        .arg(&shared)
        .current_dir(&shared)
        .env_remove("KOALESCE_URL")
        .env_remove("KOALESCE_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"#!/bin/sh\n# properties = {}\ntrue\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let sm = String::from_utf8(o.stdout).unwrap().trim().to_string();
    assert_eq!(s.wait_final(&sm), "COMPLETED");
    let since = String::from_utf8(
        Command::new("date")
            .args(["-d", "2 days ago", "+%Y-%m-%dT%H:00"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let st = s.stdout(
        "sacct",
        &[
            "-X",
            "--parsable2",
            "--clusters",
            "all",
            "--noheader",
            "--format=JobIdRaw,State",
            "--starttime",
            since.trim(),
            "--endtime",
            "now",
            "--name",
            run,
        ],
    );
    assert_eq!(st, format!("{sm}|COMPLETED\n"));
    let sq = s.stdout("squeue", &["--format=%i|%T", "--states=all", "--noheader", "--name", run]);
    assert_eq!(sq, format!("{sm}|COMPLETED\n"));
    assert!(
        s.run("scancel", &[&sm, "--clusters=all"]).status.success(),
        "an ended job: no error"
    );
    // Its `--requeue` (settings.requeue) with --parsable: the id alone, no koalesce warning
    // (older plugins read standard error merged into the output).
    let o = s.run("sbatch", &["--parsable", "--requeue", "-o", "/dev/null", "--wrap", "true"]);
    assert!(o.status.success() && o.stderr.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8(o.stdout).unwrap().trim().parse::<u64>().is_ok());
    let o = s.run("sbatch", &["--requeue", "-o", "/dev/null", "--wrap", "true"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("sbatch: warning: koalesce ignores --requeue"));
    // Its account guess (`sacct -nu $USER -o Account%256`, before its `| tail -1`).
    let me = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_string();
    let user = std::env::var("USER").ok().filter(|u| !u.is_empty()).unwrap_or(me);
    let acct = s.stdout("sacct", &["-nu", &user, "-o", "Account%256"]);
    assert!(acct.lines().count() >= 1, "the caller's jobs of today: {acct:?}");

    // Nextflow: #SBATCH pairs, `--signal B:USR2@30` unless given, status by `squeue -u $USER`.
    std::fs::write(
        shared.join(".command.run"),
        format!(
            "#!/bin/bash\n#SBATCH -J nf-hello_1\n#SBATCH -o {}/.command.log\n#SBATCH --no-requeue\n#SBATCH --signal B:USR2@30\n\
             #SBATCH -t 00:01:00\n#SBATCH --mem 100M\n#SBATCH -p vu\nset -e\ntrap 'exit 143' TERM INT USR2\necho hi\n",
            shared.display()
        ),
    )
    .unwrap();
    let out = s.stdout("sbatch", &[".command.run"]);
    let nf = out
        .trim()
        .strip_prefix("Submitted batch job ")
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();
    // Listed under its partition and its Unix user from submission to its end.
    let t0 = Instant::now();
    loop {
        let q = s.stdout("squeue", &["--noheader", "-o", "%i %t", "-t", "all", "-p", "vu", "-u", &user]);
        let line = q
            .lines()
            .find(|l| l.starts_with(&format!("{nf} ")))
            .unwrap_or_else(|| panic!("job {nf} missing: {q:?}"))
            .to_string();
        if line.ends_with(" CD") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "{line}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(std::fs::read_to_string(shared.join(".command.log")).unwrap(), "hi\n");

    // A user's own `scancel -u $USER` cancels every job of the caller's that has not ended.
    let a = s
        .stdout("sbatch", &["--parsable", "-o", "/dev/null", "--wrap", "sleep 30"])
        .trim()
        .to_string();
    let b = s
        .stdout("sbatch", &["--parsable", "-H", "-o", "/dev/null", "--wrap", "true"])
        .trim()
        .to_string();
    assert!(s.run("scancel", &["-u", &user]).status.success());
    assert_eq!(
        (s.wait_final(&a), s.wait_final(&b)),
        ("CANCELLED".to_string(), "CANCELLED".to_string())
    );
    assert_eq!(s.wait_final(&nf), "COMPLETED", "an ended job stays as it ended");
}

/// The venv with the tools (made by python/ci/setup-venv.sh, which CI runs too).
fn tools_venv(target: &Path) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/ci/setup-venv.sh");
    let out = Command::new("bash")
        .arg(&script)
        .env("CARGO_TARGET_DIR", target)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} failed (needs python3 with venv, and PyPI): {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    target.join("py-venv")
}

/// Runs `python/ci/run-tools.sh PARTS...` against a fresh server on `sites` and checks each
/// part's result line.
fn run_tools(sites: &str, parts: &[&str]) {
    let target = Path::new(BIN).parent().and_then(Path::parent).unwrap().to_path_buf();
    let venv = tools_venv(&target);
    let prefix = Command::new(venv.join("bin/python"))
        .args(["-c", "import sys; print(sys.base_prefix)"])
        .output()
        .unwrap();
    let prefix = PathBuf::from(String::from_utf8(prefix.stdout).unwrap().trim());
    let s = Server::start(sites, &[prefix, venv.clone()]);
    let tools_dir = s.shared().join("tools");
    std::fs::create_dir_all(&tools_dir).unwrap();
    let path = format!("{}:{}", s.bin.display(), std::env::var("PATH").unwrap_or_default());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/ci/run-tools.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(parts)
        .env("CARGO_TARGET_DIR", &target)
        .env("KOALESCE_TOOLS_DIR", &tools_dir)
        .env("KOALESCE_URL", &s.url)
        .env("KOALESCE_TOKEN", &s.token)
        .env("PATH", path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    let logs = || {
        let mut all = String::new();
        for e in std::fs::read_dir(&tools_dir).unwrap().flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "log") {
                let t = std::fs::read_to_string(&p).unwrap_or_default();
                let tail: Vec<&str> = t.lines().rev().take(40).collect();
                all.push_str(&format!(
                    "--- {}\n{}\n",
                    p.display(),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                ));
            }
        }
        all
    };
    assert!(
        out.status.success(),
        "run-tools.sh failed:\n{text}\n{}\n{}\nserver:\n{}",
        String::from_utf8_lossy(&out.stderr),
        logs(),
        s.log_tail()
    );
    // Each part reported its result line.
    for part in parts {
        let needle = match *part {
            "unit" => "executor unit tests: ",
            "psij-koalesce" => "PSI/J test suite, executors koalesce:single,koalesce:multiple:",
            "psij-slurm" => "PSI/J test suite, executors slurm:single,slurm:multiple:",
            "dask" => "dask: 3 workers",
            "parsl" => "parsl: 12 tasks",
            other => panic!("unknown part {other}"),
        };
        assert!(text.contains(needle), "missing '{needle}' in:\n{text}");
    }
    assert!(!text.contains(" failed"), "{text}");
}

#[test]
fn workflow_tools_run_on_koalesce() {
    run_tools(LOCAL_SITES, &["unit", "psij-koalesce", "psij-slurm", "dask", "parsl"]);
}

/// The same tools when koalesce's sites are real Slurm clusters (a test bed of two): every
/// job is a Slurm job running koalesce's supervisor, which runs the batch step.
#[test]
fn workflow_tools_run_on_slurm_sites() {
    let bed = slurm_common::Bed::up(2, 1, 0);
    let conf = std::fs::read_to_string(bed.tmp.path().join("bed/server.toml")).unwrap();
    let sites = &conf[conf.find("[[sites]]").expect("the bed's server.toml has sites")..];
    run_tools(sites, &["psij-koalesce", "dask", "parsl"]);
}

/// `sbatch --test-only` validates a real script and prints what would be submitted, without
/// a server (none listens at the installed URL); SBATCH_* variables sit between the script's
/// `#SBATCH` lines and the command line; what cannot be honoured is refused all the same.
#[test]
fn sbatch_test_only_needs_no_server() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    let out = Command::new(BIN)
        .args(["slurm-commands", "install"])
        .arg(&bin)
        .args(["--url", "http://127.0.0.1:1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "install: {}", String::from_utf8_lossy(&out.stderr));
    let real = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sbatch/real");
    let sbatch = |args: &[&str], env: &[(&str, &str)]| {
        let mut c = Command::new(bin.join("sbatch"));
        c.args(args).current_dir(dir.path()).env_remove("KOALESCE_URL");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    // A script with a site QoS name and --ntasks-per-core: one warning each, then the summary.
    let script = real.join("ksh-time-minutes.sh");
    let o = sbatch(&["--test-only", script.to_str().unwrap()], &[("SBATCH_JOB_NAME", "fromenv")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("sbatch: warning: koalesce ignores --ntasks-per-core=2"), "{err}");
    assert!(
        err.contains("sbatch: Job \"fromenv\" would be submitted: 1 processor(s)") && err.contains("walltime 600s"),
        "{err}"
    );
    assert!(o.stdout.is_empty(), "no job id: nothing was submitted");
    // An empty -C (Snakemake writes one) needs no sites; --begin and --deadline are shown.
    let o = sbatch(
        &[
            "--test-only",
            "-C",
            "",
            "--begin=2099-01-01T00:00:00",
            "--deadline=2099-01-02",
            script.to_str().unwrap(),
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains(", begin 2099-01-0") && err.contains(", start deadline "), "{err}");
    // The command line wins over SBATCH_*.
    let o = sbatch(
        &["--test-only", "-J", "cli", script.to_str().unwrap()],
        &[("SBATCH_JOB_NAME", "fromenv")],
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("Job \"cli\" would be"));
    // A byte order mark before "#!" is dropped; Windows line ends are refused as Slurm does.
    let text = std::fs::read_to_string(&script).unwrap();
    std::fs::write(dir.path().join("bom.sh"), format!("\u{feff}{text}")).unwrap();
    let o = sbatch(&["--test-only", "bom.sh"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::write(dir.path().join("crlf.sh"), text.replace('\n', "\r\n")).unwrap();
    let o = sbatch(&["--test-only", "crlf.sh"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("DOS line breaks"));
    // GPUs: refused in Slurm's words, from the script or from SBATCH_GRES.
    let gpu = real.join("nnunet-gpu.sh");
    let o = sbatch(&["--test-only", "-p", "x", gpu.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(1));
    let o = sbatch(&["--test-only", "bom.sh"], &[("SBATCH_GRES", "gpu:1")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.starts_with("sbatch: error: koalesce cannot honour --gpus/--gres"), "{err}");
    // Without --test-only the same script goes to the server (here: none).
    let o = sbatch(&[script.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cannot reach the koalesce server"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
