//! How a backend starts a component's supervisor (`koalesce supervise`, see
//! [`crate::supervise`]): the program, and its command line built in one place for every
//! backend, so that a component is confined the same way whatever its site's LRM. The local
//! executor spawns the command ([`crate::local`]); a Slurm job's batch script `exec`s it
//! ([`crate::slurm::script`]).
//!
//! The command line is `PROGRAM ARGS... --dir DIR [sandbox options] -- EXECUTABLE ARGS...`,
//! rendered from a [`SuperviseOptions`] (the same type the supervisor parses, so the two
//! cannot drift apart); the environment is the job's alone (the caller passes
//! [`ComponentSubmission::environment`] and nothing else).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

use crate::backend::ComponentSubmission;
use crate::sandbox::SandboxConfig;
use crate::supervise::SuperviseOptions;

/// How to start a supervisor: `program args... --dir DIR ... -- EXE ARGS...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupervisorCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The arguments that make `program` a resident launcher ([`crate::launcher`]), which the
    /// local executor asks to fork each supervisor; None: it spawns `program args...` for each
    /// (a wrapper script in tests; Slurm batch scripts always exec the command).
    pub launcher: Option<Vec<String>>,
}

impl SupervisorCommand {
    /// `koalesce supervise` from the running executable (what `koalesce server` uses).
    pub fn current_exe() -> std::io::Result<Self> {
        Ok(SupervisorCommand {
            program: std::env::current_exe()?,
            args: vec!["supervise".into()],
            launcher: Some(vec!["supervise-launcher".into()]),
        })
    }

    /// The arguments (after [`SupervisorCommand::program`]) that supervise `sub` confined as
    /// `sandbox` says.
    pub fn arguments(&self, sandbox: &JobSandbox, sub: &ComponentSubmission) -> Vec<OsString> {
        let mut out: Vec<OsString> = self.args.iter().map(OsString::from).collect();
        out.extend(sandbox.options(sub).to_args());
        out
    }

    /// [`Self::arguments`] for a supervisor that a batch script starts (Slurm): the program
    /// gets the job's variables (`--env-keep` names them) and Slurm's of the environment the
    /// script starts it with, nothing else of it (see `slurm::script`).
    pub fn arguments_keeping_env(&self, sandbox: &JobSandbox, sub: &ComponentSubmission) -> Vec<OsString> {
        let mut o = sandbox.options(sub);
        o.env_keep = Some(sub.environment.keys().map(String::as_str).collect::<Vec<_>>().join(","));
        let mut out: Vec<OsString> = self.args.iter().map(OsString::from).collect();
        out.extend(o.to_args());
        out
    }
}

/// How components are confined: the server config's `[users]`, `allow_root_jobs` and
/// `[sandbox]`, the data directory jobs must not see, and whether this server can switch
/// accounts (it runs as root).
#[derive(Debug, Clone, Default)]
pub struct JobSandbox {
    pub users: BTreeMap<String, String>,
    pub allow_root_jobs: bool,
    pub config: SandboxConfig,
    /// Run components as the mapped accounts (the server runs as root).
    pub switch_users: bool,
    /// The server's data directory: hidden from jobs that run under another account.
    pub data_dir: PathBuf,
    /// How long a supervisor waits at the start barrier before it gives up on its own (the
    /// server's `barrier_timeout_ms`; None: the supervisor's default).
    pub barrier_timeout_ms: Option<u64>,
}

impl JobSandbox {
    /// From the server config, switching accounts when this process runs as root.
    pub fn from_config(config: &crate::ServerConfig, data_dir: &std::path::Path) -> Self {
        let switch_users = crate::users::can_switch();
        if !switch_users && !config.users.is_empty() {
            tracing::warn!("the server does not run as root: [users] is ignored, jobs run as this account (confined by Landlock)");
        }
        JobSandbox {
            users: config.users.clone(),
            allow_root_jobs: config.allow_root_jobs,
            config: config.sandbox.clone(),
            switch_users,
            data_dir: data_dir.to_path_buf(),
            barrier_timeout_ms: Some(config.barrier_timeout_ms),
        }
    }

    /// What the supervisor of `sub` is told.
    pub fn options(&self, sub: &ComponentSubmission) -> SuperviseOptions {
        let mut o = SuperviseOptions::new(&sub.dir, &[]);
        o.command = std::iter::once(sub.executable.clone())
            .chain(sub.arguments.iter().cloned())
            .collect();
        if self.switch_users {
            o.user = Some(crate::users::account_name(&self.users, &sub.user).to_string());
            o.hide = Some(self.data_dir.clone());
        }
        o.allow_root = self.allow_root_jobs;
        o.nonce = sub.nonce.clone();
        o.read_only = self.config.read_only.clone();
        o.read_write = self.config.read_write.clone();
        o.inputs = sub
            .environment
            .iter()
            .filter(|(k, _)| k.starts_with("KOALESCE_INPUT_"))
            .map(|(_, v)| PathBuf::from(v))
            .collect();
        o.cgroup_parent = self.config.cgroup_parent.clone();
        o.memory_limit = sub.memory_limit;
        o.time_limit = (sub.time_limit_ms > 0).then_some(sub.time_limit_ms);
        o.signal = sub.early_signal.filter(|_| o.time_limit.is_some()).map(|s| s.to_string());
        o.chdir = sub.working_directory.clone();
        o.barrier_timeout = self.barrier_timeout_ms;
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        opts: SuperviseOptions,
    }

    fn sub() -> ComponentSubmission {
        ComponentSubmission {
            site: "a".into(),
            user: "alice".into(),
            processors: 2,
            claim: "c".into(),
            dir: PathBuf::from("/data/sites/a/jobs/1/a1-c0"),
            executable: "/bin/sh".into(),
            arguments: vec!["-c".into(), "echo --dir x -- y".into()],
            environment: [
                ("KOALESCE_INPUT_IN".to_string(), "/data/sites/a/storage/in.1234abcd".to_string()),
                ("MODE".to_string(), "fast".to_string()),
            ]
            .into_iter()
            .collect(),
            time_limit_ms: 1000,
            memory_limit: Some(2 << 30),
            working_directory: Some("run".into()),
            nonce: "0123456789abcdef0123456789abcdef".into(),
            early_signal: Some(koalesce_api::timing::EarlySignal {
                signal: 12,
                before_s: 30,
                batch_only: true,
            }),
        }
    }

    /// What the backends pass is what the supervisor reads back, option for option.
    #[test]
    fn the_command_line_parses_back_to_the_options() {
        let mut users = BTreeMap::new();
        users.insert("alice".to_string(), "nobody".to_string());
        let sandbox = JobSandbox {
            users,
            allow_root_jobs: true,
            config: SandboxConfig {
                read_only: vec!["/opt/sw".into(), "/opt/other dir".into()],
                read_write: vec!["/scratch".into()],
                cgroup_parent: "koalesce-x".into(),
            },
            switch_users: true,
            data_dir: "/data".into(),
            barrier_timeout_ms: Some(90_000),
        };
        let cmd = SupervisorCommand {
            program: "/usr/bin/koalesce".into(),
            args: vec!["supervise".into()],
            launcher: None,
        };
        let expected = sandbox.options(&sub());
        assert_eq!(
            (expected.memory_limit, expected.time_limit, expected.chdir.as_deref()),
            (Some(2 << 30), Some(1000), Some("run")),
            "the job's limits and working directory reach the supervisor"
        );
        assert_eq!(expected.signal.as_deref(), Some("B:12@30"), "and its early signal");
        let no_limit = ComponentSubmission { time_limit_ms: 0, ..sub() };
        assert_eq!(sandbox.options(&no_limit).signal, None, "no limit, nothing to signal before");
        let args = {
            let mut a: Vec<OsString> = cmd.args.iter().map(OsString::from).collect();
            a.extend(expected.to_args());
            a
        };
        assert_eq!(args[1], "--dir", "--dir comes first (test wrappers look for it)");
        let parsed = Cli::try_parse_from(std::iter::once(OsString::from("supervise")).chain(args.into_iter().skip(1)))
            .unwrap()
            .opts;
        assert_eq!(format!("{parsed:?}"), format!("{expected:?}"));
        assert_eq!(parsed.user.as_deref(), Some("nobody"));
        assert_eq!(
            parsed.barrier_timeout,
            Some(90_000),
            "the server's barrier timeout reaches the supervisor"
        );
        assert_eq!(parsed.hide, Some(PathBuf::from("/data")));
        assert_eq!(parsed.inputs, vec![PathBuf::from("/data/sites/a/storage/in.1234abcd")]);
        assert_eq!(parsed.command, vec!["/bin/sh", "-c", "echo --dir x -- y"]);

        // Without account switching: no user, nothing hidden; the rest the same.
        let plain = JobSandbox {
            switch_users: false,
            ..sandbox
        };
        let o = plain.options(&sub());
        assert_eq!((o.user, o.hide), (None, None));
        assert!(cmd.arguments(&plain, &sub()).iter().any(|a| a == "--cgroup-parent"));
    }
}
