//! The workflow tools that drive koalesce's Slurm-compatible commands (issue 18), against a
//! real `koalesce server`:
//!
//! - `workflow_tools_command_lines_work`: the command lines Parsl's, Snakemake's and Nextflow's
//!   Slurm executors run, as they run them.
//! - `workflow_tools_run_on_koalesce`: code no one here wrote, from PyPI: PSI/J's own test
//!   suite with the `koalesce` executor (python/) and with PSI/J's `slurm` executor on our
//!   commands, dask-jobqueue's SLURMCluster and Parsl's SlurmProvider
//!   (`python/ci/setup-venv.sh`, then `python/ci/run-tools.sh`). It needs Python 3 with venv
//!   and PyPI (CI installs them); it fails, not skips, without them.

mod slurm_common;
mod slurm_server;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use slurm_common::BIN;
use slurm_server::{Server, LOCAL_SITES};

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
