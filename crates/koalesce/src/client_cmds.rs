//! The client side of koalesce: commands that talk to a running `koalesce server` over its
//! HTTP API (`docs/server-contract.md`), the self-contained `koalesce demo`, and
//! `koalesce bench submit`.
//!
//! Every command that talks to a server takes `--url` / `KOALESCE_URL` and
//! `--token` / `KOALESCE_TOKEN`. Errors the server reports (`{"error": ...}`) are printed
//! verbatim with the HTTP status; a connection failure names the URL.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};

#[path = "client/api.rs"]
pub mod api;
#[path = "client/bench.rs"]
mod bench;
#[path = "client/bench_e2e.rs"]
mod bench_e2e;
#[path = "client/demo.rs"]
pub mod demo;
#[path = "client/download.rs"]
pub mod download;
#[path = "client/files.rs"]
mod files;
#[path = "client/format.rs"]
pub mod format;
#[path = "client/jobs.rs"]
mod jobs;
#[path = "client/local_server.rs"]
pub mod local_server;
#[path = "client/logs.rs"]
pub mod logs;
#[path = "client/output.rs"]
pub mod output;
#[path = "client/reservations.rs"]
pub mod reservations;
#[path = "client/sites.rs"]
mod sites;
#[path = "client/sites_long.rs"]
pub mod sites_long;

use api::Client;
pub use files::FilesCommand;
pub(crate) use jobs::next_backoff;
pub use jobs::{CancelArgs, HoldArgs, JobsArgs, StatusArgs, SubmitArgs, WaitArgs};
pub use output::{Output, OutputArgs};
pub use sites::SitesArgs;

/// Where the server listens when `--url` / `KOALESCE_URL` is not given.
pub const DEFAULT_URL: &str = "http://127.0.0.1:7878";

/// How to reach the server.
#[derive(Debug, Clone, Args)]
pub struct Connection {
    /// Base URL of the koalesce server, e.g. http://127.0.0.1:7878.
    #[arg(long, env = "KOALESCE_URL", default_value = DEFAULT_URL, value_name = "URL")]
    pub url: String,
    /// API token (made with `koalesce token create USER --data-dir DIR` on the server).
    #[arg(long, env = "KOALESCE_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Per-request timeout in seconds.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub request_timeout: f64,
}

impl Connection {
    pub fn client(&self) -> Client {
        Client::new(
            &self.url,
            self.token.clone(),
            Duration::from_secs_f64(self.request_timeout.max(0.001)),
        )
    }
}

/// Client commands (talk to a running server) and the demo.
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Submit a job file (koalesce TOML, JSDL, GridWay template, RSL or xRSL; `-` reads standard
    /// input) and print the new job's id (one per job for arrays and xRSL job lists).
    Submit(SubmitArgs),
    /// List jobs as a table: ID NAME USER STATE PRIO COMPS SIZE SITES SUBMITTED.
    Jobs(JobsArgs),
    /// Show a job's state, timeline (submitted, placed, claimed, started, finished, FTT, PGT,
    /// PWT, TWT), tries and components.
    Status(StatusArgs),
    /// Wait until a job finishes; exit 0 if it succeeded, 1 if it failed or was cancelled,
    /// 3 on timeout.
    Wait(WaitArgs),
    /// Cancel a job.
    Cancel(CancelArgs),
    /// Print a component's standard output (or --stderr) through the API; --follow keeps
    /// printing until the job ends.
    Logs(logs::LogsArgs),
    /// Hold a queued job: it is not placed until `koalesce release` (scontrol hold).
    Hold(HoldArgs),
    /// Release a held job into the placement queue (it still waits for its dependencies).
    Release(HoldArgs),
    /// Per site: processors idle / used / placed-but-unclaimed, and whether it is blacklisted.
    Sites(SitesArgs),
    /// The replica catalogue: register, list and remove files.
    Files {
        #[command(subcommand)]
        command: FilesCommand,
    },
    /// Start a private server with five DAS-2-shaped sites, register sample files, run a few
    /// dozen jobs (single, co-allocated, with data) with live progress, print a per-job summary;
    /// exit 0 only if every job succeeded.
    Demo(demo::DemoArgs),
    /// Advance reservations (001 §2.3): create (granted / rejected / rejected with T_next),
    /// list, show, modify, cancel.
    Reservations {
        #[command(subcommand)]
        command: reservations::ReservationsCommand,
    },
}

impl ClientCommand {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            ClientCommand::Submit(a) => a.run(),
            ClientCommand::Jobs(a) => a.run(),
            ClientCommand::Status(a) => a.run(),
            ClientCommand::Wait(a) => a.run(),
            ClientCommand::Cancel(a) => a.run(),
            ClientCommand::Logs(a) => a.run(),
            ClientCommand::Hold(a) => a.run(true),
            ClientCommand::Release(a) => a.run(false),
            ClientCommand::Sites(a) => a.run(),
            ClientCommand::Files { command } => command.run(),
            ClientCommand::Demo(a) => a.run(),
            ClientCommand::Reservations { command } => command.run(),
        }
    }
}

pub use bench::BenchSubmitArgs;
pub use bench_e2e::BenchE2eArgs;

/// Parses a duration for a flag: the same syntax as job descriptions
/// ([`koalesce_api::duration`]: `90s`, `10m`, `2h`, `500ms`, `HH:MM:SS`, `MM:SS`, seconds).
pub fn parse_duration(s: &str) -> Result<Duration, koalesce_api::duration::DurationError> {
    koalesce_api::duration::parse(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};
    use std::path::PathBuf;

    /// A stand-in for main.rs's CLI, to test parsing of the flattened subcommands.
    #[derive(Debug, Parser)]
    struct TestCli {
        #[command(subcommand)]
        command: ClientCommand,
    }

    fn parse(args: &[&str]) -> ClientCommand {
        let mut v = vec!["koalesce"];
        v.extend_from_slice(args);
        TestCli::try_parse_from(v).unwrap_or_else(|e| panic!("{e}")).command
    }

    #[test]
    fn cli_is_consistent() {
        TestCli::command().debug_assert();
    }

    #[test]
    fn every_option_is_documented() {
        fn walk(cmd: &clap::Command, path: &str) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                assert!(arg.get_help().is_some(), "{path}: argument '{id}' has no help text");
            }
            for sub in cmd.get_subcommands() {
                assert!(sub.get_about().is_some(), "{path} {}: no about text", sub.get_name());
                walk(sub, &format!("{path} {}", sub.get_name()));
            }
        }
        walk(&TestCli::command(), "koalesce");
    }

    #[test]
    fn url_and_token_flags() {
        match parse(&["submit", "job.toml", "--url", "http://h:1", "--token", "t0k"]) {
            ClientCommand::Submit(a) => {
                assert_eq!(a.file, PathBuf::from("job.toml"));
                assert_eq!(a.conn.url, "http://h:1");
                assert_eq!(a.conn.token.as_deref(), Some("t0k"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn listings_take_json() {
        assert!(matches!(
            parse(&["jobs", "--json", "--state", "running"]),
            ClientCommand::Jobs(JobsArgs {
                output: OutputArgs { json: true, .. },
                ..
            })
        ));
        assert!(matches!(
            parse(&["sites", "--json"]),
            ClientCommand::Sites(SitesArgs {
                output: OutputArgs { json: true, .. },
                ..
            })
        ));
        assert!(matches!(
            parse(&["files", "ls", "--json"]),
            ClientCommand::Files {
                command: FilesCommand::Ls {
                    output: OutputArgs { json: true, .. },
                    ..
                }
            }
        ));
        assert!(matches!(
            parse(&["status", "4", "--json"]),
            ClientCommand::Status(StatusArgs {
                id: crate::federation_cmds::JobRef::Job(4),
                output: OutputArgs { json: true, .. },
                ..
            })
        ));
        assert!(matches!(
            parse(&["status", "g12"]),
            ClientCommand::Status(StatusArgs {
                id: crate::federation_cmds::JobRef::Grid(12),
                ..
            })
        ));
        assert!(matches!(
            parse(&["logs", "g7", "--stderr"]),
            ClientCommand::Logs(logs::LogsArgs {
                id: crate::federation_cmds::JobRef::Grid(7),
                stderr: true,
                ..
            })
        ));
        assert!(matches!(
            parse(&["cancel", "g7"]),
            ClientCommand::Cancel(CancelArgs {
                id: crate::federation_cmds::JobRef::Grid(7),
                ..
            })
        ));
        assert!(matches!(
            parse(&["cancel", "7"]),
            ClientCommand::Cancel(CancelArgs {
                id: crate::federation_cmds::JobRef::Job(7),
                ..
            })
        ));
        assert!(TestCli::try_parse_from(["koalesce", "status", "g"]).is_err());
        assert!(TestCli::try_parse_from(["koalesce", "status", "-3"]).is_err());
        assert!(TestCli::try_parse_from(["koalesce", "jobs", "--state", "bogus"]).is_err());
    }

    #[test]
    fn files_add_and_wait_timeout() {
        match parse(&["files", "add", "data.bin", "/tmp/d", "--site", "vu"]) {
            ClientCommand::Files {
                command: FilesCommand::Add { name, path, site, .. },
            } => {
                assert_eq!((name.as_str(), path.to_str().unwrap(), site.as_str()), ("data.bin", "/tmp/d", "vu"));
            }
            other => panic!("{other:?}"),
        }
        assert!(
            TestCli::try_parse_from(["koalesce", "files", "add", "x", "/p"]).is_err(),
            "--site is required"
        );
        match parse(&["wait", "9", "--timeout", "2m"]) {
            ClientCommand::Wait(w) => assert_eq!(w.timeout, Some(Duration::from_secs(120))),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("01:30:00").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-3s").is_err());
        assert!(parse_duration("99999999999999999999:00:00").is_err(), "a huge HH:MM:SS is an error");
    }

    #[test]
    fn backoff_grows_and_caps() {
        let mut d = Duration::from_millis(100);
        for _ in 0..20 {
            d = next_backoff(d);
        }
        assert_eq!(d, Duration::from_secs(2));
        assert_eq!(next_backoff(Duration::from_millis(100)), Duration::from_millis(150));
    }
}
