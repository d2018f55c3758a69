//! What koalesce hands to `sbatch`: the batch script and the options (pure functions).
//!
//! The batch script only sets the component's environment and `exec`s the supervisor (the
//! local executor's, through its command line: `koalesce supervise --dir DIR -- PROGRAM
//! ARGS...`). The supervisor takes the component's directory exclusively (`supervisor.json`:
//! a second run of the same Slurm job, after a controller crash, stops there), holds at the
//! start barrier until the daemon writes `go`, runs the program and records `exit.json`.

use std::path::Path;

use crate::backend::ComponentSubmission;
use crate::local::SupervisorCommand;

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

fn quote(s: &str) -> Result<String, String> {
    shlex::try_quote(s)
        .map(|q| q.into_owned())
        .map_err(|_| format!("'{}' cannot be passed to a shell (NUL byte)", s.escape_debug()))
}

/// The batch script of a component: exports its environment and execs the supervisor.
pub fn batch_script(supervisor: &SupervisorCommand, sub: &ComponentSubmission) -> Result<String, String> {
    let mut s = String::from(
        "#!/bin/sh\n\
         # A koalesce component, written by koalesce's Slurm backend. Slurm runs it once it has\n\
         # allocated the processors; the supervisor then checks in (supervisor.json), holds at the\n\
         # start barrier until koalesce writes `go`, runs the program and records exit.json.\n",
    );
    for (k, v) in &sub.environment {
        if !env_name_ok(k) {
            return Err(format!("environment variable name '{}' is not valid", k.escape_debug()));
        }
        s.push_str(&format!("export {k}={}\n", quote(v)?));
    }
    let mut words: Vec<String> = vec![supervisor.program.to_string_lossy().into_owned()];
    words.extend(supervisor.args.iter().cloned());
    words.push("--dir".into());
    words.push(sub.dir.to_string_lossy().into_owned());
    words.push("--".into());
    words.push(sub.executable.clone());
    words.extend(sub.arguments.iter().cloned());
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
    ];
    if let Some(m) = time_limit_minutes(sub.time_limit_ms) {
        a.push(format!("--time={m}"));
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
        }
    }

    fn sup() -> SupervisorCommand {
        SupervisorCommand {
            program: PathBuf::from("/opt/koalesce"),
            args: vec!["supervise".into()],
        }
    }

    #[test]
    fn script_quotes_everything_and_runs_the_supervisor() {
        let s = sub(&[("KOALESCE_RANK", "0"), ("X", "a'b $HOME `id`")], &["it's", "$(reboot)", ""]);
        let text = batch_script(&sup(), &s).unwrap();
        assert!(text.starts_with("#!/bin/sh\n"));
        assert!(text.contains("export KOALESCE_RANK=0\n"), "{text}");
        let last = text.lines().last().unwrap();
        assert!(
            last.starts_with("exec /opt/koalesce supervise --dir '/data/jobs/3/a1 c0' -- /bin/echo "),
            "{last}"
        );
        // Run it through a real shell with `echo` in place of the supervisor: every word
        // arrives unchanged, nothing is expanded.
        let dir = tempfile::tempdir().unwrap();
        let printer = SupervisorCommand {
            program: PathBuf::from("/usr/bin/printf"),
            args: vec!["[%s]\\n".into()],
        };
        let mut s2 = s.clone();
        s2.executable = "/bin/true".into();
        let text = batch_script(&printer, &s2)
            .unwrap()
            .replace("exec ", "printf '%s\\n' \"$X\"; exec ");
        let path = dir.path().join("s.sh");
        std::fs::write(&path, text).unwrap();
        let out = std::process::Command::new("sh").arg(&path).output().unwrap();
        let out = String::from_utf8(out.stdout).unwrap();
        assert_eq!(
            out,
            "a'b $HOME `id`\n[--dir]\n[/data/jobs/3/a1 c0]\n[--]\n[/bin/true]\n[it's]\n[$(reboot)]\n[]\n"
        );
    }

    #[test]
    fn bad_environment_names_and_nul_bytes_are_refused() {
        assert!(batch_script(&sup(), &sub(&[("A=B", "x")], &[])).unwrap_err().contains("A=B"));
        assert!(batch_script(&sup(), &sub(&[("1X", "x")], &[])).is_err());
        assert!(batch_script(&sup(), &sub(&[("X; rm -rf /", "x")], &[])).is_err());
        assert!(batch_script(&sup(), &sub(&[], &["a\0b"])).unwrap_err().contains("NUL"));
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
