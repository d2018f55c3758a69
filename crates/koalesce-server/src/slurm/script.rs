//! What koalesce hands to `sbatch`: the batch script and the options (pure functions).
//!
//! The batch script only exports the component's environment and `exec`s the supervisor with
//! the local executor's command line (`koalesce supervise --dir DIR [sandbox options] -- PROGRAM
//! ARGS...`, built by [`crate::supervisor_cmd`]) plus `--env-keep NAMES`: the same account
//! mapping, Landlock rules, hidden data directory, control group and limits. The job is
//! submitted with sbatch's default `--export=ALL` of the clean environment [`super::cmd`] runs
//! it in (`PATH`, `SLURM_CONF`); Slurm adds its own (`SLURM_*`, HOME, USER, SHELL, ...). The
//! supervisor gives the program the variables `--env-keep` names (the job's) and Slurm's
//! `SLURM*` ones, never the rest ([`crate::supervise::kept_environment`]); the script no longer
//! clears its environment in a shell loop (`env | sed`: two more processes to start on the
//! path from allocation to check-in). (`--export=NONE` or `--export=VAR` would make Slurm 22.05 load the
//! account's login environment for every job, `su - USER` on the node: 1–2 s and a login
//! shell per job, measured on the test bed; a burst of 100 jobs then overloaded the machine.) The supervisor takes the component's directory exclusively
//! (`supervisor.json`: a second run of the same Slurm job, after a controller crash, stops
//! there), holds at the start barrier until the daemon writes `go`, runs the program and
//! records `exit.json`.

use std::ffi::OsString;
use std::path::Path;

use crate::backend::ComponentSubmission;

use super::config::SlurmSiteConfig;

/// Name of the batch script in the component's directory.
pub const SCRIPT_FILE: &str = "koalesce.sbatch";
/// Slurm's own output of the batch script (the supervisor's diagnostics), `%j` = job id.
pub const SLURM_OUTPUT: &str = "slurm-%j.out";
/// Added to a component's time limit for `--time`: the time its job may wait at the start
/// barrier, holding its processors, before the program runs.
pub const BARRIER_MARGIN_MS: u64 = 120_000;

/// A valid environment variable name (what a POSIX shell can `export`).
fn env_name_ok(k: &str) -> bool {
    let mut c = k.chars();
    c.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Why no batch script could be written for a component.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    /// A word (a variable's value, an argument) holds a NUL byte.
    #[error("'{}' cannot be passed to a shell (NUL byte)", .0.escape_debug())]
    Nul(String),
    #[error("environment variable name '{}' is not valid", .0.escape_debug())]
    EnvName(String),
    #[error("the supervisor's command line is not valid UTF-8")]
    NotUtf8,
}

fn quote(s: &str) -> Result<String, ScriptError> {
    shlex::try_quote(s)
        .map(|q| q.into_owned())
        .map_err(|_| ScriptError::Nul(s.to_string()))
}

/// The batch script of a component: exports the job's variables and execs `program` with
/// `args` (the supervisor's command line, [`crate::supervisor_cmd::SupervisorCommand::arguments_keeping_env`],
/// whose `--env-keep` keeps the job's variables and Slurm's for the program).
pub(crate) fn batch_script(program: &Path, args: &[OsString], sub: &ComponentSubmission) -> Result<String, ScriptError> {
    let mut s = String::from(
        "#!/bin/sh\n\
         # A koalesce component, written by koalesce's Slurm backend. Slurm runs it once it has\n\
         # allocated the processors; the supervisor then checks in (supervisor.json), holds at the\n\
         # start barrier until koalesce writes `go`, runs the program and records exit.json.\n",
    );
    for (k, v) in &sub.environment {
        if !env_name_ok(k) {
            return Err(ScriptError::EnvName(k.clone()));
        }
        s.push_str(&format!("export {k}={}\n", quote(v)?));
    }
    let words: Vec<String> = std::iter::once(program.as_os_str())
        .chain(args.iter().map(|a| a.as_os_str()))
        .map(|w| w.to_str().map(str::to_string))
        .collect::<Option<_>>()
        .ok_or(ScriptError::NotUtf8)?;
    let quoted: Vec<String> = words.iter().map(|w| quote(w)).collect::<Result<_, _>>()?;
    s.push_str("exec ");
    s.push_str(&quoted.join(" "));
    s.push('\n');
    Ok(s)
}

/// `--time` in whole minutes (Slurm's resolution), covering the time limit plus the barrier
/// margin; `None` for no limit (0).
pub fn time_limit_minutes(time_limit_ms: u64) -> Option<u64> {
    (time_limit_ms > 0).then(|| (time_limit_ms + BARRIER_MARGIN_MS).div_ceil(60_000))
}

/// `--mem` in whole megabytes (Slurm's unit, per node), rounded up so Slurm never kills the
/// job below the limit the supervisor enforces; None for 0 (no limit).
pub fn memory_megabytes(bytes: u64) -> Option<u64> {
    (bytes > 0).then(|| bytes.div_ceil(1 << 20))
}

/// The Slurm comment of a component's job: `koalesce:DIR`. A controller that lost its state
/// (SIGKILL) hands the same job id to the next job; the comment tells koalesce's job apart.
pub fn comment(dir: &Path) -> String {
    format!("koalesce:{}", dir.display())
}

/// Whether a squeue line is the job of the component in `dir`.
pub fn is_ours(row: &super::parse::JobRow, dir: &Path) -> bool {
    row.comment.as_deref() == Some(comment(dir).as_str())
}

/// Slurm job name: `koalesce-JOB-RANK` when the daemon passed those, else `koalesce`.
pub fn job_name(sub: &ComponentSubmission) -> String {
    match (sub.environment.get("KOALESCE_JOB_ID"), sub.environment.get("KOALESCE_RANK")) {
        (Some(j), Some(r)) if env_name_ok(&format!("x{j}{r}")) => format!("koalesce-{j}-{r}"),
        _ => "koalesce".into(),
    }
}

/// The sbatch command line (without the program name) for a component whose batch script is
/// at `script`. `reservation`: the Slurm reservation it runs in.
pub fn sbatch_args(site: &SlurmSiteConfig, sub: &ComponentSubmission, reservation: Option<&str>, script: &Path) -> Vec<String> {
    let mut a = vec![
        "--parsable".to_string(),
        format!("--job-name={}", job_name(sub)),
        format!("--partition={}", site.partition),
        format!("--ntasks={}", sub.processors),
        // A requeued job would run in the same directory, where the supervisor refuses to
        // start twice: let a node failure end the job (a soft error koalesce re-places).
        "--no-requeue".into(),
        format!("--chdir={}", sub.dir.display()),
        format!("--output={}", sub.dir.join(SLURM_OUTPUT).display()),
        "--open-mode=append".into(),
        format!("--comment={}", comment(&sub.dir)),
        // The job's environment is in the script; sbatch runs in a clean environment (see the
        // module docs for why not NONE).
        "--export=ALL".into(),
    ];
    if let Some(m) = time_limit_minutes(sub.time_limit_ms) {
        a.push(format!("--time={m}"));
    }
    if let Some(mb) = sub.memory_limit.and_then(memory_megabytes) {
        a.push(format!("--mem={mb}M"));
    }
    if let Some(acc) = &site.account {
        a.push(format!("--account={acc}"));
    }
    if let Some(q) = &site.qos {
        a.push(format!("--qos={q}"));
    }
    if let Some(r) = reservation {
        a.push(format!("--reservation={r}"));
    }
    a.extend(site.sbatch_args.iter().cloned());
    a.push(script.display().to_string());
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervisor_cmd::{JobSandbox, SupervisorCommand};
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    fn sub(env: &[(&str, &str)], args: &[&str]) -> ComponentSubmission {
        ComponentSubmission {
            site: "alpha".into(),
            user: "alice".into(),
            processors: 8,
            claim: "c".into(),
            dir: PathBuf::from("/data/jobs/3/a1 c0"),
            executable: "/bin/echo".into(),
            arguments: args.iter().map(|s| s.to_string()).collect(),
            environment: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
            time_limit_ms: 90_000,
            memory_limit: None,
            working_directory: None,
            nonce: String::new(),
            early_signal: None,
        }
    }

    fn sup() -> SupervisorCommand {
        SupervisorCommand {
            program: PathBuf::from("/opt/koalesce"),
            args: vec!["supervise".into()],
            launcher: None,
        }
    }

    /// The script for `sub` run by `supervisor`, with the sandbox options of `sandbox`.
    fn script(supervisor: &SupervisorCommand, sandbox: &JobSandbox, sub: &ComponentSubmission) -> Result<String, ScriptError> {
        batch_script(&supervisor.program, &supervisor.arguments_keeping_env(sandbox, sub), sub)
    }

    #[test]
    fn script_quotes_everything_and_runs_the_supervisor() {
        let s = sub(&[("KOALESCE_RANK", "0"), ("X", "a'b $HOME `id`")], &["it's", "$(reboot)", ""]);
        let text = script(&sup(), &JobSandbox::default(), &s).unwrap();
        assert!(text.starts_with("#!/bin/sh\n"));
        assert!(text.contains("export KOALESCE_RANK=0\n"), "{text}");
        let last = text.lines().last().unwrap();
        assert!(
            last.starts_with(
                "exec /opt/koalesce supervise --dir '/data/jobs/3/a1 c0' --cgroup-parent koalesce --time-limit 90000 --env-keep 'KOALESCE_RANK,X' -- /bin/echo "
            ),
            "{last}"
        );
        // Run it through a real shell with `echo` in place of the supervisor: every word
        // arrives unchanged, nothing is expanded.
        let dir = tempfile::tempdir().unwrap();
        let printer = SupervisorCommand {
            program: PathBuf::from("/usr/bin/printf"),
            args: vec!["[%s]\\n".into()],
            launcher: None,
        };
        let mut s2 = s.clone();
        s2.executable = "/bin/true".into();
        let text = script(&printer, &JobSandbox::default(), &s2)
            .unwrap()
            .replace("exec ", "printf '%s\\n' \"$X\"; exec ");
        let path = dir.path().join("s.sh");
        std::fs::write(&path, text).unwrap();
        let out = std::process::Command::new("sh").arg(&path).output().unwrap();
        let out = String::from_utf8(out.stdout).unwrap();
        assert_eq!(
            out,
            "a'b $HOME `id`\n[--dir]\n[/data/jobs/3/a1 c0]\n[--cgroup-parent]\n[koalesce]\n[--time-limit]\n[90000]\n[--env-keep]\n[KOALESCE_RANK,X]\n[--]\n[/bin/true]\n[it's]\n[$(reboot)]\n[]\n"
        );
    }

    /// A Slurm component is confined exactly as a local one: the script execs the command line
    /// the local executor spawns (account, hidden data directory, Landlock paths, inputs,
    /// control group), plus `--env-keep` with the job's variables.
    #[test]
    fn the_script_passes_the_local_executors_sandbox_options() {
        let sandbox = JobSandbox {
            users: [("alice".to_string(), "nobody".to_string())].into_iter().collect(),
            allow_root_jobs: false,
            config: crate::sandbox::SandboxConfig {
                read_only: vec!["/opt/sw".into()],
                read_write: vec!["/scratch".into()],
                cgroup_parent: "koalesce-slurm".into(),
            },
            switch_users: true,
            data_dir: "/data".into(),
            barrier_timeout_ms: None,
        };
        let s = sub(&[("KOALESCE_INPUT_IN", "/data/sites/alpha/storage/in.0a1b2c3d")], &["x"]);
        let text = script(&sup(), &sandbox, &s).unwrap();
        let last = text.lines().last().unwrap();
        let local: Vec<String> = sup()
            .arguments(&sandbox, &s)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let mut words = shlex::split(last.strip_prefix("exec ").unwrap()).unwrap();
        assert_eq!(words[0], "/opt/koalesce");
        let keep = words.iter().position(|w| w == "--env-keep").expect("--env-keep");
        assert_eq!(words[keep + 1], "KOALESCE_INPUT_IN");
        words.drain(keep..keep + 2);
        assert_eq!(words[1..], local[..], "the same command line as the local executor's");
        for want in [
            "--user nobody",
            "--hide /data",
            "--read-only /opt/sw",
            "--read-write /scratch",
            "--input /data/sites/alpha/storage/in.0a1b2c3d",
            "--cgroup-parent koalesce-slurm",
        ] {
            assert!(last.contains(want), "{want} missing: {last}");
        }
        let a = sbatch_args(&SlurmSiteConfig::new("/c", "p"), &s, None, Path::new("/s"));
        assert!(a.contains(&"--export=ALL".to_string()), "the daemon's environment stays out: {a:?}");
    }

    /// What the program gets: the job's variables and Slurm's, nothing else of what the
    /// script runs with. The batch script runs through a real shell with `env -0` in place of
    /// the supervisor; the supervisor's filter is applied to what it printed with the
    /// script's `--env-keep` (`tests/executor.rs` runs the real supervisor with it).
    #[test]
    fn the_program_sees_the_jobs_and_slurms_variables_only() {
        let printer = SupervisorCommand {
            program: PathBuf::from("/usr/bin/env"),
            args: vec!["-0".into()],
            launcher: None,
        };
        let s = sub(&[("KOALESCE_RANK", "1"), ("MODE", "a b\nc")], &[]);
        let text = script(&printer, &JobSandbox::default(), &s).unwrap();
        assert!(!text.contains("unset"), "no shell loop clears the environment: {text}");
        let last = text.lines().last().unwrap();
        let words = shlex::split(last.strip_prefix("exec ").unwrap()).unwrap();
        let keep = words[words.iter().position(|w| w == "--env-keep").unwrap() + 1].clone();
        assert_eq!(keep, "KOALESCE_RANK,MODE");
        // `env -0 --dir ...` fails on its options: print the environment instead.
        let text = text.replace(last, "exec /usr/bin/env -0");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sh");
        std::fs::write(&path, text).unwrap();
        let out = std::process::Command::new("/bin/sh")
            .arg(&path)
            .env_clear()
            .env("HOME", "/root")
            .env("USER", "root")
            .env("PATH", "/usr/bin:/bin")
            .env("SECRET", "x\nSLURM_FAKE=1")
            .env("SLURM_JOB_ID", "7")
            .env("SLURMD_NODENAME", "a1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        // What the supervisor is started with: everything, SECRET too.
        let given: Vec<(OsString, OsString)> = out
            .stdout
            .split(|b| *b == 0)
            .filter_map(|kv| std::str::from_utf8(kv).ok()?.split_once('=').map(|(k, v)| (k.into(), v.into())))
            .collect();
        assert!(given.iter().any(|(k, _)| k == "SECRET"), "{given:?}");
        let kept = crate::supervise::kept_environment(given, Some(&keep));
        let mut names: Vec<String> = kept.iter().map(|(k, _)| k.to_string_lossy().into_owned()).collect();
        names.sort();
        assert_eq!(names, ["KOALESCE_RANK", "MODE", "SLURMD_NODENAME", "SLURM_JOB_ID"], "{kept:?}");
        assert!(kept.contains(&("MODE".into(), "a b\nc".into())), "{kept:?}");
        assert_eq!(
            crate::supervise::kept_environment(kept.clone(), None),
            kept,
            "no --env-keep: everything"
        );
    }

    #[test]
    fn bad_environment_names_and_nul_bytes_are_refused() {
        let sb = JobSandbox::default();
        let e = script(&sup(), &sb, &sub(&[("A=B", "x")], &[])).unwrap_err();
        assert_eq!(e, ScriptError::EnvName("A=B".into()));
        assert_eq!(e.to_string(), "environment variable name 'A=B' is not valid");
        assert!(script(&sup(), &sb, &sub(&[("1X", "x")], &[])).is_err());
        assert!(script(&sup(), &sb, &sub(&[("X; rm -rf /", "x")], &[])).is_err());
        let e = script(&sup(), &sb, &sub(&[], &["a\0b"])).unwrap_err();
        assert_eq!(e, ScriptError::Nul("a\0b".into()));
        assert_eq!(e.to_string(), "'a\\0b' cannot be passed to a shell (NUL byte)");
    }

    #[test]
    fn sbatch_options() {
        let mut site = SlurmSiteConfig::new("/b/alpha/slurm.conf", "debug");
        site.account = Some("grid".into());
        site.sbatch_args = vec!["--constraint=ib".into()];
        let s = sub(&[("KOALESCE_JOB_ID", "3"), ("KOALESCE_RANK", "1")], &[]);
        let a = sbatch_args(&site, &s, Some("koalesce-r1"), Path::new("/data/x/koalesce.sbatch"));
        for want in [
            "--parsable",
            "--job-name=koalesce-3-1",
            "--partition=debug",
            "--ntasks=8",
            "--no-requeue",
            "--chdir=/data/jobs/3/a1 c0",
            "--output=/data/jobs/3/a1 c0/slurm-%j.out",
            "--time=4",
            "--account=grid",
            "--reservation=koalesce-r1",
            "--constraint=ib",
        ] {
            assert!(a.iter().any(|x| x == want), "{want} missing from {a:?}");
        }
        assert_eq!(a.last().unwrap(), "/data/x/koalesce.sbatch");
        let mut s = sub(&[], &[]);
        s.time_limit_ms = 0;
        let a = sbatch_args(&SlurmSiteConfig::new("/c", "p"), &s, None, Path::new("/s"));
        assert!(!a
            .iter()
            .any(|x| x.starts_with("--time") || x.starts_with("--reservation") || x.starts_with("--account")));
        assert!(a.contains(&"--job-name=koalesce".to_string()));
        assert!(!a.iter().any(|x| x.starts_with("--mem")), "no memory limit, no --mem");
        let mut s = sub(&[], &[]);
        s.memory_limit = Some((3 << 30) + 1);
        let a = sbatch_args(&SlurmSiteConfig::new("/c", "p"), &s, None, Path::new("/s"));
        assert!(a.contains(&"--mem=3073M".to_string()), "{a:?}");
        assert!(a.contains(&"--time=4".to_string()), "{a:?}");
        assert_eq!(memory_megabytes(0), None);
        assert_eq!(memory_megabytes(1), Some(1));
        assert_eq!(memory_megabytes(1 << 20), Some(1));
    }

    #[test]
    fn the_comment_tells_our_job_from_one_that_reused_its_id() {
        let row = |c: Option<&str>| super::super::parse::JobRow {
            job: 9,
            state: super::super::parse::JobState::Completed,
            cpus: 1,
            reservation: None,
            reason: "None".into(),
            comment: c.map(str::to_string),
        };
        let dir = Path::new("/data/jobs/3/a1 c0");
        assert_eq!(comment(dir), "koalesce:/data/jobs/3/a1 c0");
        assert!(is_ours(&row(Some("koalesce:/data/jobs/3/a1 c0")), dir));
        assert!(!is_ours(&row(None), dir), "the testbed's probe job got the id after a crash");
        assert!(!is_ours(&row(Some("koalesce:/data/jobs/3/a1 c1")), dir));
    }

    #[test]
    fn time_limits_round_up_to_minutes() {
        assert_eq!(time_limit_minutes(0), None);
        assert_eq!(time_limit_minutes(1), Some(3));
        assert_eq!(time_limit_minutes(60_000), Some(3));
        assert_eq!(time_limit_minutes(60_001), Some(4));
    }
}
