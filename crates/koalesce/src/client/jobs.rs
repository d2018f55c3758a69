//! The job commands: `koalesce submit`, `hold` / `release`, `jobs`, `status`, `wait` and
//! `cancel` (their arguments and what each prints).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;

use super::api::{self, error_is_transient};
use super::format;
use crate::client_cmds::{parse_duration, Connection, Output, OutputArgs};

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
