//! koalesce's Slurm-compatible commands against a real `koalesce server` (issue 18):
//! `koalesce slurm-commands install DIR`, then sbatch / squeue / sacct / scancel / scontrol
//! through the installed names, checking Slurm's formats, states, exit codes, output files and
//! refusals. The workflow tools that drive them: `slurm_workflow_tools.rs`.

mod slurm_common;
mod slurm_server;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use slurm_common::BIN;
use slurm_server::{Server, LOCAL_SITES};

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

/// Installs the commands into `dir/bin`, pointed at a URL where no server listens (the
/// commands that need none: `--test-only`, `-V`, `show config`); returns the bin directory.
fn install_offline(dir: &Path) -> std::path::PathBuf {
    let bin = dir.join("bin");
    let out = Command::new(BIN)
        .args(["slurm-commands", "install"])
        .arg(&bin)
        .args(["--url", "http://127.0.0.1:1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "install: {}", String::from_utf8_lossy(&out.stderr));
    bin
}

/// `sbatch --test-only` validates a real script and prints what would be submitted, without
/// a server (none listens at the installed URL); SBATCH_* variables sit between the script's
/// `#SBATCH` lines and the command line; what cannot be honoured is refused all the same.
#[test]
fn sbatch_test_only_needs_no_server() {
    let dir = tempfile::tempdir().unwrap();
    let bin = install_offline(dir.path());
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

/// `scontrol show config` answers in Slurm 22.05's format once the server answers (tools read
/// MinJobAge or just check the controller), with the version `--version` prints; `squeue -M`
/// prints Slurm's `CLUSTER:` line before the table, not with `-h`.
#[test]
fn show_config_and_the_cluster_line_read_like_slurm() {
    let mut s = Server::start(LOCAL_SITES, &[]);
    let conf = s.stdout("scontrol", &["show", "config"]);
    let lines: Vec<&str> = conf.lines().collect();
    assert!(lines[0].starts_with("Configuration data as of 20"), "{conf}");
    let value = |key: &str| {
        lines
            .iter()
            .find_map(|l| l.split_once(" = ").filter(|(k, _)| k.trim_end() == key).map(|(_, v)| v.to_string()))
            .unwrap_or_else(|| panic!("{key} missing: {conf}"))
    };
    assert_eq!(value("ClusterName"), "koalesce");
    assert_eq!(value("MinJobAge"), "0 sec", "koalesce never purges a job's record");
    let version = s.stdout("sbatch", &["--version"]);
    assert_eq!(version, format!("slurm-wlm {}\n", value("SLURM_VERSION")));
    assert_eq!(s.stdout("scontrol", &["--version"]), version);
    // Anywhere among the options, and Slurm's abbreviation of scontrol's keyword.
    assert_eq!(s.stdout("squeue", &["-h", "--version"]), version);
    assert_eq!(s.stdout("scontrol", &["vers"]), version);
    let port = s.url.rsplit(':').next().unwrap().trim_end_matches('/').to_string();
    assert_eq!(value("SlurmctldPort"), port);
    assert!(conf.ends_with(" is UP\n"), "{conf}");
    // Slurm's abbreviation.
    assert!(s.stdout("scontrol", &["show", "conf"]).contains("ClusterName"));
    let host = value("SlurmctldHost[0]");
    assert_eq!(s.stdout("scontrol", &["ping"]), format!("Slurmctld(primary) at {host} is UP\n"));

    let q = s.stdout("squeue", &["-M", "koalesce"]);
    assert_eq!(
        q.lines().take(2).collect::<Vec<_>>(),
        [
            "CLUSTER: koalesce",
            "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)"
        ]
    );
    assert_eq!(s.stdout("squeue", &["--clusters=all", "-h"]), "", "no line without the header");
    // Several names are still the one cluster (Slurm lower-cases them and reports an unknown
    // one, then goes on): no CLUSTER column under -h, which Slurm adds for several clusters.
    let o = s.run("squeue", &["-M", "KOALESCE,alpha,koalesce", "-h"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        (
            String::from_utf8_lossy(&o.stdout).as_ref(),
            String::from_utf8_lossy(&o.stderr).as_ref()
        ),
        ("", "squeue: error: No cluster 'alpha' known by database.\n")
    );

    // The controller down: an error, exit 1.
    s.stop();
    let o = s.run("scontrol", &["show", "config"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Unable to contact the koalesce server"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.stdout.is_empty());
    let o = s.run("scontrol", &["ping"]);
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with(&format!("Slurmctld(primary) at {host} is DOWN\n")), "{out}");
}

/// koalesce's `scontrol show config` beside real Slurm's (a test bed's cluster): the same
/// header, every key koalesce prints is one Slurm prints, padded the same and with a value of
/// the same form, the same controller line at the end, and the same `--version` line.
#[test]
fn show_config_reads_like_real_slurm() {
    let bed = slurm_common::Bed::up(1, 1, 0);
    let conf = bed.tmp.path().join("bed/alpha/slurm.conf");
    let real_cmd = |args: &[&str]| {
        let o = Command::new("scontrol").args(args).env("SLURM_CONF", &conf).output().unwrap();
        assert!(o.status.success(), "scontrol {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let real = real_cmd(&["show", "config"]);
    let s = Server::start(LOCAL_SITES, &[]);
    let ours = s.stdout("scontrol", &["show", "config"]);
    let header = |t: &str| {
        let first = t.lines().next().unwrap_or_default().to_string();
        let stamp = first.strip_prefix("Configuration data as of ").unwrap_or_else(|| panic!("{first}"));
        assert_eq!(stamp.len(), "2026-11-28T12:02:46".len(), "{first}");
        assert_eq!(&stamp[10..11], "T", "{first}");
    };
    header(&real);
    header(&ours);
    let lines: Vec<&str> = ours.lines().collect();
    for l in &lines[1..lines.len() - 2] {
        let (key, value) = l.split_once(" = ").unwrap_or_else(|| panic!("{l}"));
        let real_line = real
            .lines()
            .find(|r| r.split_once(" = ").is_some_and(|(k, _)| k == key))
            .unwrap_or_else(|| panic!("Slurm has no line '{key} = ...': {real}"));
        let real_value = &real_line[key.len() + 3..];
        // Units as Slurm writes them ("300 sec"), numbers where Slurm has numbers.
        let unit = |v: &str| v.split_once(' ').map(|(_, u)| u.to_string());
        assert_eq!(unit(value), unit(real_value), "{l} / {real_line}");
        if real_value.parse::<u64>().is_ok() {
            assert!(value.parse::<u64>().is_ok(), "{l} / {real_line}");
        }
    }
    let trailer = |t: &str| t.lines().rev().take(2).map(str::to_string).collect::<Vec<_>>();
    for t in [trailer(&real), trailer(&ours)] {
        assert!(
            t[0].starts_with("Slurmctld(primary) at ") && t[0].ends_with(" is UP") && t[1].is_empty(),
            "{t:?}"
        );
    }
    for ping in [real_cmd(&["ping"]), s.stdout("scontrol", &["ping"])] {
        assert!(
            ping.starts_with("Slurmctld(primary) at ") && ping.ends_with(" is UP\n") && ping.lines().count() == 1,
            "{ping}"
        );
    }
    assert_eq!(s.stdout("scontrol", &["--version"]), real_cmd(&["--version"]));
    let slurm_version = |t: &str| {
        t.lines()
            .find_map(|l| l.strip_prefix("SLURM_VERSION"))
            .map(|v| v.trim_start_matches([' ', '=']).to_string())
    };
    assert_eq!(slurm_version(&ours), slurm_version(&real));
}

/// `sbatch -N` forms beside real Slurm 22.05's sbatch on a test bed: the same ones accepted,
/// the same refused with the same message and exit status, under `--test-only` (which needs
/// no server) and, for what Slurm refuses, without it.
#[test]
fn sbatch_node_counts_as_real_slurm() {
    let bed = slurm_common::Bed::up(1, 2, 0);
    let conf = bed.tmp.path().join("bed/alpha/slurm.conf");
    let dir = tempfile::tempdir().unwrap();
    let bin = install_offline(dir.path());
    let first_line = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).lines().next().unwrap_or_default().to_string();
    // Also Slurm's corners: a range without a minimum ("-2": 1-2), without a maximum, with two
    // dashes, a bad part (named alone), a leading blank. Each with --test-only on both sides
    // (Slurm's will-run test takes `-N 0`, its controller refuses it on submission), then
    // without, where real Slurm refuses (ours would need a server to submit the others).
    for test_only in [true, false] {
        for n in [
            "0", "0-0", "0-1", "1-0", "1-2", "2", "3-2", "abc", "-2", "2-", "1-2-3", "abc-2", " 2",
        ] {
            let mut args = vec![format!("--nodes={n}"), "--wrap".into(), "true".into()];
            if test_only {
                args.insert(0, "--test-only".into());
            }
            let real = Command::new("sbatch")
                .args(&args)
                .args(["-o", "/dev/null"])
                .env("SLURM_CONF", &conf)
                .current_dir(dir.path())
                .output()
                .unwrap();
            if !test_only && real.status.success() {
                continue;
            }
            let ours = Command::new(bin.join("sbatch"))
                .args(&args)
                .current_dir(dir.path())
                .env_remove("KOALESCE_URL")
                .output()
                .unwrap();
            assert_eq!(
                ours.status.code(),
                real.status.code(),
                "-N {n} (test only: {test_only}): {} / {}",
                first_line(&ours),
                first_line(&real)
            );
            if !real.status.success() {
                assert_eq!(first_line(&ours), first_line(&real), "-N {n} (test only: {test_only})");
            }
        }
    } // The processors Slurm's will-run test answers for, where the node count is one number (a
      // range gets its maximum from Slurm when its nodes are idle, its minimum from koalesce):
      // `-N 0` is a job of no processors unless -n or -c (alone) give it some.
    let procs = |o: &std::process::Output, before: &str, after: &str| {
        let e = String::from_utf8_lossy(&o.stderr).to_string();
        let from = e.find(before).map(|i| i + before.len());
        from.and_then(|i| e[i..].split_once(after).and_then(|(n, _)| n.parse::<u64>().ok()))
            .unwrap_or_else(|| panic!("no processors in: {e}"))
    };
    for args in [
        &["-N", "0"][..],
        &["-N", "0-0"],
        &["-N", "0-1"],
        &["-N", "2"],
        &["-N", "0", "--ntasks-per-node=2"],
        &["-N", "0", "--ntasks-per-node=2", "-c", "4"],
        &["-N", "0", "-n", "3"],
        &["-N", "0", "-c", "4"],
        &["-N", "0-0", "-n", "2", "-c", "2"],
    ] {
        let run = |cmd: &std::path::Path, real: bool| {
            let mut c = Command::new(cmd);
            c.arg("--test-only")
                .args(args)
                .args(["-o", "/dev/null", "--wrap", "true"])
                .current_dir(dir.path());
            if real {
                c.env("SLURM_CONF", &conf);
            } else {
                c.env_remove("KOALESCE_URL");
            }
            c.output().unwrap()
        };
        let real = run(std::path::Path::new("sbatch"), true);
        let ours = run(&bin.join("sbatch"), false);
        assert_eq!(
            procs(&ours, "would be submitted: ", " processor(s)"),
            procs(&real, " using ", " processors"),
            "{args:?}"
        );
    }
    // No tasks are refused whatever the node count, in Slurm's words.
    for args in [
        &["-n", "0"][..],
        &["--ntasks-per-node=0"],
        &["-N", "0", "-n", "0"],
        &["-N", "2", "--ntasks-per-node", "0"],
    ] {
        let run = |cmd: &std::path::Path| {
            Command::new(cmd)
                .arg("--test-only")
                .args(args)
                .args(["-o", "/dev/null", "--wrap", "true"])
                .current_dir(dir.path())
                .env("SLURM_CONF", &conf)
                .env_remove("KOALESCE_URL")
                .output()
                .unwrap()
        };
        let (real, ours) = (run(std::path::Path::new("sbatch")), run(&bin.join("sbatch")));
        assert_eq!(
            (ours.status.code(), first_line(&ours)),
            (real.status.code(), first_line(&real)),
            "{args:?}"
        );
    }
}

/// `scontrol version` after scontrol's global flags (`-o`, `-Q`, `-d`), as Slurm 22.05's
/// scontrol takes it (`scontrol -o version` prints the version there too), and without a
/// server: the version needs none.
#[test]
fn scontrol_version_after_global_flags() {
    let dir = tempfile::tempdir().unwrap();
    let bin = install_offline(dir.path());
    let scontrol = |args: &[&str]| {
        Command::new(bin.join("scontrol"))
            .args(args)
            .env_remove("KOALESCE_URL")
            .output()
            .unwrap()
    };
    let want = String::from_utf8(scontrol(&["version"]).stdout).unwrap();
    assert!(want.starts_with("slurm-wlm 22.05."), "{want}");
    for args in [&["-o", "version"][..], &["-Q", "version"], &["-d", "-o", "VERSION"]] {
        let o = scontrol(args);
        assert_eq!(
            (o.status.code(), String::from_utf8_lossy(&o.stdout).to_string()),
            (Some(0), want.clone()),
            "scontrol {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// Every command's `-V` and `--version` print what Debian's Slurm 22.05 commands installed here
/// print (`slurm-wlm 22.05.8`; they need a slurm.conf to read, not a controller).
#[test]
fn version_lines_are_debians() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("slurm.conf");
    std::fs::write(
        &conf,
        "ClusterName=v\nSlurmctldHost=localhost\nNodeName=localhost CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=localhost Default=YES\n",
    )
    .unwrap();
    let bin = install_offline(dir.path());
    for cmd in ["sbatch", "squeue", "scancel", "sacct", "scontrol"] {
        for flag in ["-V", "--version"] {
            let real = Command::new(format!("/usr/bin/{cmd}"))
                .arg(flag)
                .env("SLURM_CONF", &conf)
                .output()
                .unwrap();
            let ours = Command::new(bin.join(cmd)).arg(flag).env_remove("KOALESCE_URL").output().unwrap();
            assert!(real.status.success(), "{cmd} {flag}: {}", String::from_utf8_lossy(&real.stderr));
            assert_eq!(
                (ours.status.code(), String::from_utf8_lossy(&ours.stdout)),
                (real.status.code(), String::from_utf8_lossy(&real.stdout)),
                "{cmd} {flag}"
            );
        }
    }
}
