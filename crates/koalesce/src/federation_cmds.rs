//! `koalesce federation …`: the grid queue of a server with peers (issue 14, seed 002) — submit a
//! job to its grid scheduler, see where each job runs and why it moved, see the peers.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use koalesce_server::peer::wire::{FederationStatus, GridJob};

use crate::client_cmds::format::escape;
use crate::client_cmds::output::{Output, OutputArgs};
use crate::client_cmds::Connection;

#[derive(Debug, Subcommand)]
pub enum FederationCommand {
    /// Submit a job (koalesce TOML; `-` reads standard input) to the server's grid queue: its
    /// grid scheduler runs it there or migrates it to a peer where it is expected to finish
    /// sooner (sender-initiated, 002 §III-A1). Prints the grid job's id.
    Submit(SubmitArgs),
    /// A grid job: its state, where it runs (local or the peer), its id and sites there, and
    /// why it stayed or moved (the ATTs and RUs compared).
    Status(StatusArgs),
    /// The grid jobs as a table: ID NAME STATE RUNS_AT JOB SITES.
    Jobs(ListArgs),
    /// The peers (available, or backed off with the last error) and how many jobs ran here,
    /// moved out and came in.
    Peers(ListArgs),
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    #[arg(value_name = "FILE")]
    file: PathBuf,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: Connection,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Grid job id.
    #[arg(value_name = "ID")]
    id: u64,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: Connection,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: Connection,
}

impl FederationCommand {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            FederationCommand::Submit(a) => {
                let text = crate::format_cmds::read_job_file(&a.file)?;
                let (_, body) = a
                    .conn
                    .client()
                    .send("POST", "/api/v1/grid/jobs", Some("application/toml"), text.as_bytes())?;
                let v: serde_json::Value = serde_json::from_str(&body).context("reading the answer")?;
                Output::from(a.output).print(&v, || Ok(format!("{}\n", v["id"])))?;
            }
            FederationCommand::Status(a) => return grid_status(&a.conn.client(), a.id, a.output),
            FederationCommand::Jobs(a) => {
                let v = a.conn.client().get_json("/api/v1/grid/jobs")?;
                Output::from(a.output).print(&v, || {
                    let jobs: Vec<GridJob> = serde_json::from_value(v.clone()).context("reading the grid jobs")?;
                    Ok(jobs_table(&jobs))
                })?;
            }
            FederationCommand::Peers(a) => {
                let v = a.conn.client().get_json("/api/v1/federation")?;
                Output::from(a.output).print(&v, || {
                    let f: FederationStatus = serde_json::from_value(v.clone()).context("reading the federation")?;
                    Ok(peers_report(&f))
                })?;
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// A job as `koalesce status` takes it: a job id, or `g<N>` for grid job N.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobRef {
    Job(u64),
    Grid(u64),
}

impl std::str::FromStr for JobRef {
    type Err = String;

    fn from_str(s: &str) -> Result<JobRef, String> {
        let bad = || format!("'{s}' is neither a job id nor g<N> (a grid job)");
        match s.strip_prefix('g').or_else(|| s.strip_prefix("grid:")) {
            Some(n) => n.parse().map(JobRef::Grid).map_err(|_| bad()),
            None => s.parse().map(JobRef::Job).map_err(|_| bad()),
        }
    }
}

/// `koalesce status g<N>` and `koalesce federation status N`.
pub fn grid_status(client: &crate::client_cmds::api::Client, id: u64, output: OutputArgs) -> anyhow::Result<ExitCode> {
    let v = client.get_json(&format!("/api/v1/grid/jobs/{id}"))?;
    Output::from(output).print(&v, || {
        let g: GridJob = serde_json::from_value(v.clone()).context("reading the grid job")?;
        Ok(status_report(&g))
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `koalesce cancel g<N>`: cancels grid job N wherever it is; says where the cancel went.
pub fn grid_cancel(client: &crate::client_cmds::api::Client, id: u64, output: OutputArgs) -> anyhow::Result<ExitCode> {
    let (_, body) = client.send("POST", &format!("/api/v1/grid/jobs/{id}/cancel"), None, b"")?;
    let v: serde_json::Value = serde_json::from_str(&body).context("reading the answer")?;
    Output::from(output).print(&v, || {
        let g: GridJob = serde_json::from_value(v.clone()).context("reading the grid job")?;
        Ok(match (g.cancel_requested, g.runs_at.as_deref()) {
            (true, Some(peer)) if peer != "local" => {
                format!(
                    "grid job {id} {}: the cancel is on its way to {peer} (sent until it answers)\n",
                    g.state
                )
            }
            _ => format!("grid job {id} {}\n", g.state),
        })
    })?;
    Ok(ExitCode::SUCCESS)
}

/// For `koalesce jobs`: the grid jobs that are not in this server's queue (waiting in the grid
/// queue, being handed over, or at a peer), as a second table; "" when there are none or the
/// server has no federation.
pub fn grid_jobs_elsewhere(client: &crate::client_cmds::api::Client) -> String {
    let Ok(v) = client.get_json("/api/v1/grid/jobs") else {
        return String::new();
    };
    let Ok(jobs) = serde_json::from_value::<Vec<GridJob>>(v) else {
        return String::new();
    };
    let elsewhere: Vec<GridJob> = jobs.into_iter().filter(|g| g.runs_at.as_deref() != Some("local")).collect();
    if elsewhere.is_empty() {
        return String::new();
    }
    format!(
        "\ngrid jobs not in this server's queue (koalesce status g<ID>):\n{}",
        jobs_table(&elsewhere)
    )
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or("-".to_string(), |x| x.to_string())
}

fn status_report(g: &GridJob) -> String {
    // Everything from the server goes through `escape` (a job's name, or a peer's words about
    // it, with terminal escapes or newlines cannot repaint the terminal or forge lines).
    let e = |v: &str| escape(v);
    let eo = |v: &Option<String>| v.as_deref().map_or("-".to_string(), escape);
    let mut s = String::new();
    let _ = writeln!(s, "grid job {}  {}  ({})", g.id, e(&g.name), e(&g.user));
    let _ = writeln!(s, "state    {}", e(&g.state));
    let _ = writeln!(s, "runs at  {}", eo(&g.runs_at));
    let _ = writeln!(s, "job id   {} (on the server that runs it: {})", opt(&g.job), eo(&g.runs_at));
    let _ = writeln!(
        s,
        "sites    {}",
        if g.sites.is_empty() { "-".into() } else { e(&g.sites.join(", ")) }
    );
    let _ = writeln!(s, "exit ok  {}", opt(&g.exit_ok));
    let _ = writeln!(s, "why      {}", eo(&g.reason));
    if !g.outputs.is_empty() {
        let _ = writeln!(s, "outputs  {} (koalesce files get NAME)", e(&g.outputs.join(", ")));
    }
    if let Some(f) = &g.failure {
        let _ = writeln!(s, "failure  {}", e(f));
    }
    if g.cancel_requested && !koalesce_api::dto::is_final_state(&g.state) {
        let _ = writeln!(s, "cancel   requested; on its way to {}", eo(&g.runs_at));
    }
    if g.runs_at.as_deref().is_some_and(|r| r != "local") && koalesce_api::dto::is_final_state(&g.state) {
        let _ = writeln!(
            s,
            "logs     koalesce logs g{} [--stderr] (brought back from {})",
            g.id,
            eo(&g.runs_at)
        );
    }
    if let Some(d) = &g.data_error {
        let _ = writeln!(s, "data     {}", e(d));
    }
    s
}

fn jobs_table(jobs: &[GridJob]) -> String {
    let mut s = format!(
        "{:>6}  {:<20}  {:<16}  {:<10}  {:>6}  {}\n",
        "ID", "NAME", "STATE", "RUNS_AT", "JOB", "SITES"
    );
    for g in jobs {
        let name: String = escape(&g.name).chars().take(20).collect();
        let _ = writeln!(
            s,
            "{:>6}  {:<20}  {:<16}  {:<10}  {:>6}  {}",
            g.id,
            name,
            escape(&g.state),
            g.runs_at.as_deref().map_or("-".to_string(), escape),
            opt(&g.job),
            escape(&g.sites.join(","))
        );
    }
    s
}

fn peers_report(f: &FederationStatus) -> String {
    let mut s = format!(
        "server {} ({}): {} jobs here, {} moved out, {} waiting, {} received from peers\n",
        f.name, f.algorithm, f.local, f.migrated_out, f.waiting, f.received
    );
    for p in &f.peers {
        let state = if p.available {
            "available".to_string()
        } else {
            format!(
                "backed off ({} failures): {}",
                p.failures,
                p.last_error.as_deref().map_or("-".to_string(), escape)
            )
        };
        let bw = p
            .measured_bps
            .map_or("bandwidth not measured".to_string(), |b| format!("{:.1} Mbit/s measured", b / 1e6));
        let _ = writeln!(s, "  {:<12} {:<32} {state}, {bw}", escape(&p.name), escape(&p.url));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grid_jobs_words_reach_the_terminal_without_control_characters() {
        let evil = "x\n\u{1b}[2Jforged\u{202e}";
        let g: GridJob = serde_json::from_value(serde_json::json!({
            "id": 3, "name": evil, "user": "alice", "state": evil, "runs_at": evil, "job": 1,
            "sites": [evil], "exit_ok": false, "reason": evil, "submitted_ms": 0, "finished_ms": null,
            "outputs": [evil], "data_error": evil, "failure": evil, "cancel_requested": true}))
        .unwrap();
        for text in [status_report(&g), jobs_table(std::slice::from_ref(&g))] {
            assert!(!text.chars().any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'), "{text:?}");
            assert!(text.contains("x\\n\\u{1b}[2Jforged"), "{text}");
            assert!(text.lines().all(|l| !l.starts_with("forged")), "{text}");
        }
    }
}
