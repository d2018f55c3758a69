//! The client side of koalesce: commands that talk to a running `koalesce server` over its
//! HTTP API (`docs/server-contract.md`), the self-contained `koalesce demo`, and
//! `koalesce bench submit`.
//!
//! Every command that talks to a server takes `--url` / `KOALESCE_URL` and
//! `--token` / `KOALESCE_TOKEN`. Errors the server reports (`{"error": ...}`) are printed
//! verbatim with the HTTP status; a connection failure names the URL.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
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
#[path = "client/format.rs"]
pub mod format;
#[path = "client/local_server.rs"]
pub mod local_server;
#[path = "client/logs.rs"]
pub mod logs;
#[path = "client/output.rs"]
pub mod output;
#[path = "client/reservations.rs"]
pub mod reservations;
#[path = "client/sites_long.rs"]
pub mod sites_long;

use api::{error_is_transient, Client};
pub use output::{Output, OutputArgs};

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

/// Arguments of `koalesce submit`.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// Job file (TOML, see examples/; or JSDL, a GridWay template, RSL, xRSL); `-` reads
    /// standard input.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// `--json`: the answer (`{"id": N}`) instead of the bare id.
    #[command(flatten)]
    pub output: OutputArgs,
    /// Format, GridWay array tasks (JSDL, GridWay templates, RSL, xRSL: docs/job-formats.md).
    #[command(flatten)]
    pub formats: crate::format_cmds::FormatArgs,
    /// Submit held: the job is not placed until `koalesce release ID` (sbatch --hold).
    #[arg(long)]
    pub hold: bool,
    /// Start only after other jobs, in Slurm's syntax: `afterok:12:13,afterany:9` (also
    /// `after`, `afternotok`; or the job file's `afterok = [12, 13]` fields).
    #[arg(long, short = 'd', value_name = "KIND:ID[:ID...][,...]", value_parser = check_dependency)]
    pub dependency: Option<String>,
    /// A job array (sbatch --array): one job per task index, `1-100`, `0-30:10`, `1,3,5`;
    /// `%M` at the end: at most M tasks queued or running at once. Each task sees its index in
    /// KOALESCE_TASK_ID; the array's id (printed) is its first task's, and `koalesce status`
    /// of it lists every task.
    #[arg(long, value_name = "SPEC", value_parser = check_array, conflicts_with = "tasks")]
    pub array: Option<String>,
    /// Run in this advance reservation of yours (`koalesce reservations create` prints its id,
    /// e.g. `R3`): at the reservation's site, on its processors, from its start (sbatch
    /// --reservation; or the job file's `reservation = "R3"`). Any job format.
    #[arg(long, value_name = "ID")]
    pub reservation: Option<String>,
    #[command(flatten)]
    pub conn: Connection,
}

fn check_array(s: &str) -> Result<String, String> {
    koalesce_api::jobdesc::parse_array(s).map(|_| s.to_string())
}

fn check_dependency(s: &str) -> Result<String, String> {
    koalesce_api::jobdesc::parse_dependency_list(s).map(|_| s.to_string())
}

/// Arguments of `koalesce hold` and `koalesce release`.
#[derive(Debug, Args)]
pub struct HoldArgs {
    /// Job id.
    #[arg(value_name = "ID")]
    pub id: u64,
    /// `--json`: the server's answer (the job summary).
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: Connection,
}

impl HoldArgs {
    pub fn run(self, hold: bool) -> anyhow::Result<ExitCode> {
        let v = self.conn.client().hold_json(self.id, hold)?;
        Output::from(self.output).print(&v, || {
            let state = v.get("state").and_then(|s| s.as_str()).unwrap_or("?");
            let reason = v
                .get("reason")
                .and_then(|s| s.as_str())
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            Ok(format!("job {} {}{}\n", self.id, format::escape(state), format::escape(&reason)))
        })?;
        Ok(ExitCode::SUCCESS)
    }
}

impl SubmitArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let text = crate::format_cmds::read_job_file(&self.file)?;
        let client = self.formats.bag_client(
            self.conn
                .client()
                .with_submit_options(self.hold, self.dependency.as_deref(), self.array.as_deref())
                .with_reservation(self.reservation.as_deref()),
        );
        let ids = crate::format_cmds::submit(&client, &self.file, &text, &self.formats)?;
        crate::format_cmds::print_ids(&ids, Output::from(self.output))?;
        Ok(ExitCode::SUCCESS)
    }
}

/// Arguments of `koalesce jobs`.
#[derive(Debug, Args)]
pub struct JobsArgs {
    /// Only jobs in these states (comma-separated): queued, placed, claimed, running,
    /// succeeded, failed, timeout, out_of_memory, cancelled.
    #[arg(long, value_delimiter = ',', value_parser = koalesce_core::JobState::NAMES, value_name = "STATE[,STATE...]")]
    pub state: Vec<String>,
    /// Only jobs whose name matches this shell wildcard (`sweep-*`; case ignored).
    #[arg(long, value_name = "PATTERN")]
    pub name: Option<String>,
    /// Only jobs placed at this site.
    #[arg(long, value_name = "SITE")]
    pub site: Option<String>,
    /// Only jobs submitted within this long (`2h`, `1d`, `90m`).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub since: Option<Duration>,
    /// Only this user's jobs (admins; others may name only themselves).
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// Every user's jobs (admins only: anyone else is refused, with the reason).
    #[arg(long)]
    pub all: bool,
    /// At most this many jobs (the next page: --after the last id shown).
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Only jobs with an id above this one (paging with --limit).
    #[arg(long, value_name = "ID")]
    pub after: Option<u64>,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: Connection,
}

impl JobsArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let client = self.conn.client();
        let mut query: Vec<(&str, String)> = Vec::new();
        if !self.state.is_empty() {
            query.push(("state", self.state.join(",")));
        }
        if self.all {
            query.push(("all", "true".into()));
        }
        for (key, v) in [("name", &self.name), ("site", &self.site), ("user", &self.user)] {
            if let Some(v) = v {
                query.push((key, v.clone()));
            }
        }
        if let Some(d) = self.since {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
            query.push(("since", now.saturating_sub(d).as_millis().to_string()));
        }
        // Without --limit every page is fetched (the server answers a page at a time).
        let (v, next) = match self.limit {
            Some(l) => {
                query.push(("limit", l.to_string()));
                if let Some(a) = self.after {
                    query.push(("after", a.to_string()));
                }
                client.jobs_query(&query)?
            }
            None => (client.jobs_pages(&query, self.after)?, None),
        };
        let unfiltered =
            self.state.is_empty() && self.name.is_none() && self.site.is_none() && self.since.is_none() && self.after.is_none();
        Output::from(self.output).print(&v, || {
            let jobs: Vec<api::JobSummary> = serde_json::from_value(v.clone()).context("reading the job list")?;
            let mut text = format::jobs_table(&jobs);
            if unfiltered {
                text.push_str(&crate::federation_cmds::grid_jobs_elsewhere(&client));
            }
            Ok(text)
        })?;
        if let Some(after) = next {
            eprintln!("(more jobs: koalesce jobs --after {after} ...)");
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// Arguments of `koalesce status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Job id, or `g<N>` for grid job N of a federated server (`koalesce federation submit`):
    /// where it runs (here or the peer, with its id there), its state followed from there,
    /// why it moved, and its outputs here.
    #[arg(value_name = "ID")]
    pub id: crate::federation_cmds::JobRef,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: Connection,
}

impl StatusArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let client = self.conn.client();
        let id = match self.id {
            crate::federation_cmds::JobRef::Job(id) => id,
            crate::federation_cmds::JobRef::Grid(g) => return crate::federation_cmds::grid_status(&client, g, self.output),
        };
        let v = client.job_json(id)?;
        Output::from(self.output).print(&v, || {
            let d: api::JobDetail = serde_json::from_value(v.clone()).context("reading the job")?;
            let mut tails = Vec::new();
            for c in &d.components {
                for (stream, path) in [("stdout", &c.stdout), ("stderr", &c.stderr)] {
                    if path.is_none() {
                        continue;
                    }
                    let q = api::LogRequest {
                        component: c.index,
                        stderr: stream == "stderr",
                        offset: 0,
                        tail: Some(format::STATUS_TAIL_LINES),
                    };
                    let mut text = Vec::new();
                    // A server without the logs endpoint (older) shows no output here.
                    if let Ok(chunk) = client.logs_to(id, &q, &mut text) {
                        tails.push(format::OutputTail {
                            component: c.index,
                            stream,
                            text: String::from_utf8_lossy(&text).into_owned(),
                            lines_cut: chunk.lines_cut,
                        });
                    }
                }
            }
            Ok(format::status_report(&d, &tails))
        })?;
        Ok(ExitCode::SUCCESS)
    }
}

/// Arguments of `koalesce wait`.
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Job id.
    #[arg(value_name = "ID")]
    pub id: u64,
    /// Give up after this long (`90s`, `10m`, `2h`, `HH:MM:SS` or seconds); exit code 3.
    /// Default: wait forever.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Option<Duration>,
    /// `--json`: the finished job (the server's job detail); `--quiet`: nothing.
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: Connection,
}

/// Exit code of `koalesce wait` when the timeout expired.
pub const WAIT_TIMEOUT_EXIT: u8 = 3;

impl WaitArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let client = self.conn.client();
        let t0 = Instant::now();
        let mut delay = Duration::from_millis(100);
        let mut warned = false;
        loop {
            match client.job_json(self.id) {
                Ok(v) => {
                    // A bag's id: wait for the bag (the server's state of the id is the bag's,
                    // succeeded when enough tasks did).
                    let bag: Option<api::BagStatus> = v.get("bag").and_then(|b| serde_json::from_value(b.clone()).ok());
                    if let Some(b) = bag.filter(|b| api::is_final_state(&b.state)) {
                        Output::from(self.output).print(&v, || {
                            Ok(format!(
                                "bag {}: {}, {}\n",
                                self.id,
                                format::escape(&b.state),
                                format::bag_progress(&b)
                            ))
                        })?;
                        return Ok(if b.state == "succeeded" {
                            ExitCode::SUCCESS
                        } else {
                            ExitCode::from(1)
                        });
                    }
                    let bag_running = v.get("bag").is_some();
                    // An array's id: wait for every task; it succeeded when all of them did.
                    let tasks: Vec<api::ArrayTask> = v
                        .get("tasks")
                        .and_then(|t| serde_json::from_value(t.clone()).ok())
                        .unwrap_or_default();
                    if bag_running {
                        // Not ended yet.
                    } else if !tasks.is_empty() {
                        if tasks.iter().all(|t| api::is_final_state(&t.state)) {
                            let ok = tasks.iter().all(|t| t.state == "succeeded");
                            Output::from(self.output).print(&v, || {
                                let states: Vec<api::JobSummary> = tasks
                                    .iter()
                                    .map(|t| api::JobSummary {
                                        state: t.state.clone(),
                                        ..Default::default()
                                    })
                                    .collect();
                                Ok(format!("array {}: {}\n", self.id, format::state_counts(&states)))
                            })?;
                            return Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) });
                        }
                    } else if let Some(state) = v
                        .get("state")
                        .and_then(|s| s.as_str())
                        .map(str::to_string)
                        .filter(|s| api::is_final_state(s))
                    {
                        Output::from(self.output).print(&v, || {
                            Ok(match v.get("failure").and_then(|f| f.as_str()) {
                                Some(f) if state != "succeeded" => {
                                    format!("job {} {}: {}\n", self.id, format::escape(&state), format::escape(f))
                                }
                                _ => format!("job {} {}\n", self.id, format::escape(&state)),
                            })
                        })?;
                        return Ok(if state == "succeeded" {
                            ExitCode::SUCCESS
                        } else {
                            ExitCode::from(1)
                        });
                    }
                }
                Err(e) if error_is_transient(&e) => {
                    // The server may be restarting: keep trying until the timeout.
                    if !warned {
                        eprintln!("warning: {e:#}; retrying");
                        warned = true;
                    }
                }
                Err(e) => return Err(e),
            }
            if let Some(limit) = self.timeout {
                let elapsed = t0.elapsed();
                if elapsed >= limit {
                    if Output::from(self.output) != Output::Quiet {
                        eprintln!("timed out after {limit:?} waiting for job {}", self.id);
                    }
                    return Ok(ExitCode::from(WAIT_TIMEOUT_EXIT));
                }
                delay = delay.min(limit - elapsed);
            }
            std::thread::sleep(delay);
            delay = next_backoff(delay);
        }
    }
}

/// Polling backoff: ×1.5 per round, at most 2 s.
pub fn next_backoff(d: Duration) -> Duration {
    (d.mul_f64(1.5)).clamp(Duration::from_millis(50), Duration::from_secs(2))
}

/// Arguments of `koalesce cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Job id, or `g<N>` for grid job N (cancelled wherever it is: waiting, here, or at the
    /// peer it migrated to).
    #[arg(value_name = "ID")]
    pub id: crate::federation_cmds::JobRef,
    /// `--json`: the server's answer (the job summary).
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: Connection,
}

impl CancelArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let id = match self.id {
            crate::federation_cmds::JobRef::Job(id) => id,
            crate::federation_cmds::JobRef::Grid(g) => return crate::federation_cmds::grid_cancel(&self.conn.client(), g, self.output),
        };
        let v = self.conn.client().cancel_json(id)?;
        Output::from(self.output).print(&v, || {
            let state = v.get("state").and_then(|s| s.as_str()).unwrap_or("cancelled");
            match v.get("bag").and_then(|b| serde_json::from_value::<api::BagStatus>(b.clone()).ok()) {
                Some(b) => Ok(format!("bag {id} {}: {}\n", format::escape(state), format::bag_progress(&b))),
                None => Ok(format!("job {id} {}\n", format::escape(state))),
            }
        })?;
        Ok(ExitCode::SUCCESS)
    }
}

/// Arguments of `koalesce sites`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SitesArgs {
    /// Only the blacklisted sites (with when each comes back by itself).
    #[arg(long)]
    pub blacklisted: bool,
    /// Each site as a GLUE-style record: processors, architecture, OS, memory, CPU speed,
    /// benchmark scores, software and the estimated queue wait.
    #[arg(long, short = 'l')]
    pub long: bool,
    /// The network between the sites: bandwidth the scheduler's transfer-time estimate uses
    /// (a matrix, from → to), and per link the NWS forecaster chosen, its error, latency,
    /// measurements and bytes moved.
    #[arg(long, conflicts_with_all = ["blacklisted", "long"])]
    pub network: bool,
    #[command(subcommand)]
    pub command: Option<SitesCommand>,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: Connection,
}

/// `koalesce sites ...` subcommands.
#[derive(Debug, Subcommand)]
pub enum SitesCommand {
    /// Take a blacklisted site back at once (admins).
    Readmit {
        /// Site name.
        #[arg(value_name = "NAME")]
        name: String,
        #[command(flatten)]
        conn: Connection,
    },
}

impl SitesArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        if let Some(SitesCommand::Readmit { name, conn }) = self.command {
            conn.client().readmit_site_json(&name)?;
            println!("re-admitted {}", format::escape(&name));
            return Ok(ExitCode::SUCCESS);
        }
        let client = self.conn.client();
        if self.network {
            let v = client.network_json()?;
            Output::from(self.output).print(&v, || {
                let m: api::NetworkMatrix = serde_json::from_value(v.clone()).context("reading the network matrix")?;
                Ok(format::network_table(&m))
            })?;
            return Ok(ExitCode::SUCCESS);
        }
        let v = if self.blacklisted {
            client.blacklisted_sites_json()?
        } else {
            client.sites_json()?
        };
        Output::from(self.output).print(&v, || {
            let sites: Vec<api::SiteInfo> = serde_json::from_value(v.clone()).context("reading the site list")?;
            Ok(if self.long {
                sites_long::sites_long(&sites)
            } else {
                format::sites_table(&sites)
            })
        })?;
        Ok(ExitCode::SUCCESS)
    }
}

/// `koalesce files ...`: the replica catalogue.
#[derive(Debug, Subcommand)]
pub enum FilesCommand {
    /// Register a file: uploads the local file PATH (streamed, checksummed) into SITE's
    /// storage and registers it as NAME, owned by you. A NAME already registered (yours) gets
    /// one more replica at SITE if PATH has the same content; a different content, or SITE
    /// already holding a replica, answers 409. Names `<job-id>/...` are reserved for job outputs.
    Add {
        /// Logical file name, as jobs name it in `inputs`.
        #[arg(value_name = "NAME")]
        name: String,
        /// The file to upload (with --server-path: a path on the server's machine).
        #[arg(value_name = "PATH")]
        path: PathBuf,
        /// Site whose storage receives the replica.
        #[arg(long, value_name = "SITE")]
        site: String,
        /// Do not upload: have the server copy PATH from its own machine (admins, and users
        /// inside the directories `[files] import_dirs` gives them).
        #[arg(long)]
        server_path: bool,
        /// `--json`: the server's answer (the catalogue entry).
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        conn: Connection,
    },
    /// Download a file, or a job's output (`JOB/NAME`), streamed and checked against the
    /// server's SHA-256 before it is written to PATH.
    Get {
        /// Logical file name (`koalesce files ls`; a job's outputs are `JOB-ID/NAME`).
        #[arg(value_name = "NAME")]
        name: String,
        /// Where to write it (an existing directory: into it; `-`: standard output). Default:
        /// the last part of NAME in the current directory.
        #[arg(short, long, value_name = "PATH")]
        output: Option<PathBuf>,
        /// Print nothing on success.
        #[arg(long, short)]
        quiet: bool,
        #[command(flatten)]
        conn: Connection,
    },
    /// List the catalogue: name, size, checksum, replica sites.
    Ls {
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        conn: Connection,
    },
    /// Remove a file and its replicas from the catalogue (refused while a job needs it).
    Rm {
        /// Logical file name.
        #[arg(value_name = "NAME")]
        name: String,
        #[command(flatten)]
        conn: Connection,
    },
}

impl FilesCommand {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            FilesCommand::Add {
                name,
                path,
                site,
                server_path,
                output,
                conn,
            } => {
                let v = if server_path {
                    let abs = std::path::absolute(&path).with_context(|| format!("resolving {}", path.display()))?;
                    let path_str = abs.to_str().with_context(|| format!("{} is not valid UTF-8", abs.display()))?;
                    conn.client().add_file_json(&name, path_str, &site)?
                } else {
                    conn.client().upload_file_json(&name, &path, &site)?
                };
                Output::from(output).print(&v, || {
                    Ok(match serde_json::from_value::<api::FileInfo>(v.clone()) {
                        Ok(f) if !f.name.is_empty() => format!(
                            "registered {} ({}, sha256 {}) at {}\n",
                            format::escape(&f.name),
                            format::format_bytes(f.size_bytes),
                            format::escape(&f.sha256),
                            format::escape(&f.replicas.join(","))
                        ),
                        _ => format!("registered {} at {}\n", format::escape(&name), format::escape(&site)),
                    })
                })?;
            }
            FilesCommand::Get { name, output, quiet, conn } => {
                let target = match output {
                    Some(p) if p.is_dir() => p.join(download::default_target(&name)),
                    Some(p) => p,
                    None => download::default_target(&name),
                };
                let (bytes, sha) = download::download(&conn.client(), &name, &target)?;
                if !quiet && target != std::path::Path::new("-") {
                    eprintln!(
                        "{} → {} ({}, sha256 {} verified)",
                        format::escape(&name),
                        target.display(),
                        format::format_bytes(bytes),
                        sha
                    );
                }
            }
            FilesCommand::Ls { output, conn } => {
                let v = conn.client().files_json()?;
                Output::from(output).print(&v, || {
                    let files: Vec<api::FileInfo> = serde_json::from_value(v.clone()).context("reading the catalogue")?;
                    Ok(format::files_table(&files))
                })?;
            }
            FilesCommand::Rm { name, conn } => {
                conn.client().remove_file(&name)?;
                println!("removed {}", format::escape(&name));
            }
        }
        Ok(ExitCode::SUCCESS)
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
