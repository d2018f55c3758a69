//! Running Slurm's commands against one cluster, each with a time limit.
//!
//! Two limits make an unreachable controller a quick, clear error instead of a hang:
//! - the commands read a *client copy* of the cluster's slurm.conf with a short
//!   `MessageTimeout` (clients give up after about MessageTimeout − 1 s against a stopped
//!   controller; the default of 10 s would make every call of a dead site take 9 s);
//! - the process is killed when it has not finished within the command timeout (a controller
//!   that accepts connections but does not answer).
//!
//! The environment of the commands is the daemon's minus `SLURM_*`/`SBATCH_*`/`SQUEUE_*`/...
//! variables, which would change what sbatch submits or what squeue prints.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wait_timeout::ChildExt;

/// Why a Slurm command failed.
#[derive(Debug, thiserror::Error)]
pub enum CmdError {
    #[error("cannot run {program}: {source} (is slurm-wlm installed? apt-get install -y slurm-wlm munge)")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{program} did not finish within {after_ms} ms (controller unreachable?)")]
    Timeout { program: String, after_ms: u64 },
    #[error("{program} failed ({status}): {stderr}")]
    Failed { program: String, status: String, stderr: String },
}

impl CmdError {
    /// The command's error output, when it ran and failed.
    pub fn stderr(&self) -> &str {
        match self {
            CmdError::Failed { stderr, .. } => stderr,
            _ => "",
        }
    }

    /// The controller could not be reached (as opposed to a refusal of the request).
    pub fn is_unreachable(&self) -> bool {
        match self {
            CmdError::Timeout { .. } | CmdError::Spawn { .. } => true,
            CmdError::Failed { stderr, .. } => {
                stderr.contains("Unable to contact slurm controller")
                    || stderr.contains("Socket timed out")
                    || stderr.contains("Zero Bytes were transmitted")
                    || stderr.contains("Connection refused")
                    || stderr.contains("Communication connection failure")
            }
        }
    }
}

/// Output of a finished command.
#[derive(Debug, Clone)]
pub struct CmdOutput {
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

/// One Slurm cluster as its commands see it.
#[derive(Debug)]
pub struct SlurmClient {
    cluster: String,
    conf: PathBuf,
    client_conf: PathBuf,
    timeout: Duration,
    commands: AtomicU64,
}

/// Prefixes of environment variables that change Slurm clients' behaviour.
/// Variables of the daemon's environment the Slurm commands get (all others are dropped).
const KEPT_ENV: &[&str] = &["PATH", "TZ", "LANG", "LC_ALL"];
/// `PATH` for the commands when the daemon has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

const SLURM_ENV_PREFIXES: &[&str] = &[
    "SLURM_",
    "SBATCH_",
    "SQUEUE_",
    "SINFO_",
    "SCANCEL_",
    "SCONTROL_",
    "SALLOC_",
    "SRUN_",
];

impl SlurmClient {
    /// A client of the cluster whose slurm.conf is `conf`. Writes the client copy of the
    /// configuration into `scratch` (created) as `<cluster>.client.conf`, with
    /// `MessageTimeout` derived from `timeout` (half of it, 2..=10 s).
    pub fn new(conf: &Path, scratch: &Path, timeout: Duration) -> std::io::Result<SlurmClient> {
        let text = std::fs::read_to_string(conf)
            .map_err(|e| std::io::Error::new(e.kind(), format!("reading Slurm configuration {}: {e}", conf.display())))?;
        let cluster = conf_value(&text, "ClusterName")
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{} has no ClusterName", conf.display())))?;
        std::fs::create_dir_all(scratch)?;
        let message_timeout = (timeout.as_secs() / 2).clamp(2, 10);
        let copy = client_conf_text(&text, conf.parent().unwrap_or(Path::new("/")), message_timeout);
        let client_conf = scratch.join(format!("{cluster}.client.conf"));
        crate::supervise::write_atomic(&client_conf, copy.as_bytes())?;
        Ok(SlurmClient {
            cluster,
            conf: conf.to_path_buf(),
            client_conf,
            timeout,
            commands: AtomicU64::new(0),
        })
    }

    /// `ClusterName` from the cluster's slurm.conf.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The cluster's own slurm.conf.
    pub fn conf(&self) -> &Path {
        &self.conf
    }

    /// The copy the commands read (short `MessageTimeout`).
    pub fn client_conf(&self) -> &Path {
        &self.client_conf
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// How many commands this client ran (to check that calls stay O(clusters)).
    pub fn commands_run(&self) -> u64 {
        self.commands.load(Ordering::Relaxed)
    }

    /// Runs `program args...` against the cluster; Ok only for exit status 0.
    pub fn run(&self, program: &str, args: &[String]) -> Result<CmdOutput, CmdError> {
        self.commands.fetch_add(1, Ordering::Relaxed);
        let t0 = Instant::now();
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        // A clean environment: nothing of the daemon's reaches a command, nor (through sbatch's
        // default `--export=ALL`) a job; `SLURM_*`/`SBATCH_*`/... variables would change what
        // the commands do.
        cmd.env_clear();
        for (k, v) in std::env::vars_os() {
            let name = k.to_string_lossy();
            if KEPT_ENV.contains(&name.as_ref()) && !SLURM_ENV_PREFIXES.iter().any(|p| name.starts_with(p)) {
                cmd.env(&k, v);
            }
        }
        if std::env::var_os("PATH").is_none() {
            cmd.env("PATH", DEFAULT_PATH);
        }
        cmd.env("SLURM_CONF", &self.client_conf);
        let mut child = cmd.spawn().map_err(|source| CmdError::Spawn {
            program: program.to_string(),
            source,
        })?;
        let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        // Read both pipes while waiting, so a large answer cannot block the command.
        let (status, stdout, stderr) = std::thread::scope(|s| {
            let o = s.spawn(move || {
                let mut b = Vec::new();
                let _ = out.read_to_end(&mut b);
                b
            });
            let e = s.spawn(move || {
                let mut b = Vec::new();
                let _ = err.read_to_end(&mut b);
                b
            });
            let status = match child.wait_timeout(self.timeout) {
                Ok(Some(st)) => Some(st),
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    None
                }
            };
            (status, o.join().unwrap_or_default(), e.join().unwrap_or_default())
        });
        let stdout = String::from_utf8_lossy(&stdout).into_owned();
        let stderr = String::from_utf8_lossy(&stderr).trim().to_string();
        let elapsed = t0.elapsed();
        tracing::debug!(cluster = %self.cluster, program, ?args, ms = elapsed.as_millis() as u64, ok = status.is_some_and(|s| s.success()), "slurm command");
        match status {
            None => Err(CmdError::Timeout {
                program: program.to_string(),
                after_ms: self.timeout.as_millis() as u64,
            }),
            Some(st) if st.success() => Ok(CmdOutput { stdout, stderr, elapsed }),
            Some(st) => Err(CmdError::Failed {
                program: program.to_string(),
                status: st.to_string(),
                stderr,
            }),
        }
    }

    /// [`SlurmClient::run`] with string-slice arguments.
    pub fn run_args(&self, program: &str, args: &[&str]) -> Result<CmdOutput, CmdError> {
        let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        self.run(program, &v)
    }
}

/// The value of `Key=` in a slurm.conf (case-insensitive key, first occurrence, comments
/// stripped).
pub fn conf_value(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let line = line.split('#').next().unwrap_or("").trim();
        let (k, v) = line.split_once('=')?;
        (k.trim().eq_ignore_ascii_case(key)).then(|| v.split_whitespace().next().unwrap_or("").to_string())
    })
}

/// The client copy of a slurm.conf: `MessageTimeout` replaced (or added), relative `Include`
/// paths made absolute against `conf_dir`, and `PlugStackConfig` pinned to the original
/// directory's plugstack.conf when the file relies on that default.
pub fn client_conf_text(text: &str, conf_dir: &Path, message_timeout_s: u64) -> String {
    let mut out = String::with_capacity(text.len() + 200);
    out.push_str("# Client copy written by koalesce (short MessageTimeout, so calls to a dead controller fail fast).\n");
    let mut plugstack = false;
    for line in text.lines() {
        let body = line.split('#').next().unwrap_or("").trim();
        let key = body.split('=').next().unwrap_or("").trim().to_ascii_lowercase();
        if key == "messagetimeout" {
            continue;
        }
        plugstack |= key == "plugstackconfig";
        let lower = body.to_ascii_lowercase();
        if lower.starts_with("include ") {
            let path = body[8..].trim();
            if !path.starts_with('/') {
                out.push_str(&format!("Include {}\n", conf_dir.join(path).display()));
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    if !plugstack && conf_dir.join("plugstack.conf").exists() {
        out.push_str(&format!("PlugStackConfig={}\n", conf_dir.join("plugstack.conf").display()));
    }
    out.push_str(&format!("MessageTimeout={message_timeout_s}\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conf_values_and_client_copy() {
        let conf = "# test\nClusterName=alpha # the name\nSlurmctldPort=1234\nmessagetimeout=10\nInclude extra.conf\nInclude /abs/x.conf\n";
        assert_eq!(conf_value(conf, "clustername").as_deref(), Some("alpha"));
        assert_eq!(conf_value(conf, "SlurmctldPort").as_deref(), Some("1234"));
        assert_eq!(conf_value(conf, "Nope"), None);
        let copy = client_conf_text(conf, Path::new("/etc/slurm"), 2);
        assert!(copy.contains("MessageTimeout=2\n"));
        assert!(!copy.contains("messagetimeout=10"));
        assert!(copy.contains("Include /etc/slurm/extra.conf\n"));
        assert!(copy.contains("Include /abs/x.conf\n"));
        assert_eq!(conf_value(&copy, "MessageTimeout").as_deref(), Some("2"));
    }

    #[test]
    fn refusals_are_not_unreachable_controllers() {
        let fx = |n: &str| std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/slurm/fixtures").join(n)).unwrap();
        let failed = |stderr: String| CmdError::Failed {
            program: "sbatch".into(),
            status: "exit status: 1".into(),
            stderr,
        };
        for f in ["sbatch_bad_partition.err", "sbatch_bad_reservation.err", "sbatch_too_big.err"] {
            assert!(!failed(fx(f)).is_unreachable(), "{f}");
        }
        // Captured against a stopped and a frozen controller.
        for e in [
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
            "slurm_load_jobs error: Socket timed out on send/recv operation",
        ] {
            assert!(failed(e.into()).is_unreachable(), "{e}");
        }
    }

    #[test]
    fn runs_with_a_time_limit() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("slurm.conf");
        std::fs::write(&conf, "ClusterName=t\n").unwrap();
        let c = SlurmClient::new(&conf, &dir.path().join("scratch"), Duration::from_millis(300)).unwrap();
        assert_eq!(c.cluster(), "t");
        let out = c.run_args("sh", &["-c", "echo $SLURM_CONF; echo oops >&2"]).unwrap();
        assert_eq!(out.stdout.trim(), c.client_conf().display().to_string());
        assert_eq!(out.stderr, "oops");
        let t0 = Instant::now();
        let e = c.run_args("sleep", &["5"]).unwrap_err();
        assert!(matches!(e, CmdError::Timeout { .. }), "{e}");
        assert!(e.is_unreachable());
        assert!(t0.elapsed() < Duration::from_secs(2));
        let e = c
            .run_args(
                "sh",
                &["-c", "echo 'Unable to contact slurm controller (connect failure)' >&2; exit 1"],
            )
            .unwrap_err();
        assert!(e.is_unreachable(), "{e}");
        let e = c
            .run_args("sh", &["-c", "echo 'Invalid partition name specified' >&2; exit 1"])
            .unwrap_err();
        assert!(!e.is_unreachable());
        assert!(e.to_string().contains("Invalid partition"));
        let e = c.run_args("/nonexistent/sbatch", &[]).unwrap_err();
        assert!(e.to_string().contains("apt-get install -y slurm-wlm munge"), "{e}");
        assert_eq!(c.commands_run(), 5);
        // Large answers are read while the command runs.
        let c = SlurmClient::new(&conf, &dir.path().join("scratch"), Duration::from_secs(20)).unwrap();
        let out = c.run_args("sh", &["-c", "head -c 300000 /dev/zero | tr '\\0' x"]).unwrap();
        assert_eq!(out.stdout.len(), 300_000);
    }
}
