//! `squeue`: koalesce's jobs in Slurm's formats (`-o` letters, `-O` field names, `-l`).

use std::process::ExitCode;

use clap::Parser;

use super::jobview::{parse_state_list, SlurmJob, State};
use super::timefmt::{now_ms, squeue_duration, timestamp};
use super::{load_jobs, parse_job_ids, parse_options, SResult, SlurmError};
use crate::client_cmds::api::Client;

/// squeue's default `-o` format.
pub const DEFAULT_FORMAT: &str = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R";
/// `squeue -l`.
pub const LONG_FORMAT: &str = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R";

/// squeue - view information about jobs in the koalesce grid, in Slurm's formats.
#[derive(Debug, Parser)]
#[command(disable_version_flag = true, disable_help_flag = true)]
pub struct SqueueArgs {
    /// Print this help.
    #[arg(long = "help", action = clap::ArgAction::Help)]
    help: Option<bool>,
    /// Do not print a header.
    #[arg(short = 'h', long = "noheader")]
    noheader: bool,
    /// Output format (%i %j %u %t %T %r %R %M %l %L %D %C %N %P %V %S %e %a %q %Q %A %F %K %%).
    #[arg(short = 'o', long = "format", value_name = "FORMAT")]
    format: Option<String>,
    /// Output format by field names (JobID, JobArrayID, State, StateCompact, Reason, ...).
    #[arg(short = 'O', long = "Format", value_name = "FIELDS")]
    long_format: Option<String>,
    /// Comma-separated job ids.
    #[arg(short = 'j', long = "jobs", value_name = "JOB_ID_LIST")]
    jobs: Option<String>,
    /// Job states to show (comma-separated names or `all`).
    #[arg(short = 't', long = "states", value_name = "STATES")]
    states: Option<String>,
    /// Only jobs of these users.
    #[arg(short = 'u', long = "user", value_name = "USER_LIST")]
    user: Option<String>,
    /// Only the caller's jobs.
    #[arg(long = "me")]
    me: bool,
    /// Clusters: koalesce is one (`koalesce`, or `all`).
    #[arg(short = 'M', long = "clusters", alias = "cluster", value_name = "CLUSTERS")]
    clusters: Option<String>,
    /// Only jobs with these names.
    #[arg(short = 'n', long = "name", value_name = "NAMES")]
    name: Option<String>,
    /// Only jobs in these partitions (koalesce sites).
    #[arg(short = 'p', long = "partition", value_name = "PARTITIONS")]
    partition: Option<String>,
    /// One array element per line (every koalesce job is one line anyway).
    #[arg(short = 'r', long = "array")]
    array: bool,
    /// All partitions (koalesce shows all anyway).
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// Long format (state names and time limits).
    #[arg(short = 'l', long = "long")]
    long: bool,
    /// Sort order: `i` / `-i` (job id) is honoured; other keys sort by job id.
    #[arg(short = 'S', long = "sort", value_name = "FIELDS")]
    sort: Option<String>,
    /// Quiet on errors about unknown jobs.
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,
}

pub fn run(args: &[String], conn: impl FnOnce() -> SResult<Client>) -> SResult<ExitCode> {
    let a: SqueueArgs = parse_options("squeue", args)?;
    let pieces = match (&a.long_format, &a.format) {
        (Some(f), _) => parse_long_format(f)?,
        (None, Some(f)) => parse_format(f)?,
        (None, None) => parse_format(if a.long { LONG_FORMAT } else { DEFAULT_FORMAT })?,
    };
    let ids = a.jobs.as_deref().map(parse_job_ids).transpose()?;
    // Without -t, squeue lists pending and running jobs, or any state for jobs named by -j.
    let states: Option<Vec<State>> = match &a.states {
        Some(s) => Some(parse_state_list(s).map_err(SlurmError::msg)?),
        None if ids.is_some() => None,
        None => Some(super::jobview::ALL_STATES.into_iter().filter(|s| s.is_active()).collect()),
    };
    let clustered = super::check_clusters("squeue", a.clusters.as_deref())?;
    let users: Option<Vec<String>> = super::user_filter(a.user.as_deref());
    let names: Option<Vec<String>> = a.name.as_ref().map(|u| split_list(u));
    let parts: Option<Vec<String>> = a.partition.as_ref().map(|u| split_list(u));
    let now = now_ms();
    let mut head = String::new();
    if a.long && !a.noheader && a.format.is_none() && a.long_format.is_none() {
        // `squeue -l` starts with the time, as ctime(3) writes it.
        head.push_str(&super::timefmt::ctime(now));
        head.push('\n');
    }
    head.push_str(&cluster_line(clustered, a.noheader));
    // As Slurm's squeue, the cluster's line comes before the query (also before its error).
    print!("{head}");
    let client = conn()?;
    let jobs = load_jobs(&client, ids.as_deref(), users.is_some() && !a.me)?;
    if let Some(ids) = &ids {
        if jobs.is_empty() && !ids.is_empty() {
            return Err(SlurmError {
                message: "slurm_load_jobs error: Invalid job id specified\n".into(),
                raw: true,
                code: 1,
            });
        }
    }
    let mut shown: Vec<&SlurmJob> = jobs
        .iter()
        .filter(|j| states.as_ref().is_none_or(|s| s.contains(&j.state)))
        .filter(|j| users.as_ref().is_none_or(|u| u.contains(&j.user)))
        .filter(|j| names.as_ref().is_none_or(|n| n.contains(&j.name)))
        // A job not placed yet has no site: it is listed under every partition asked for
        // (Nextflow's `squeue -p QUEUE` must not lose a pending job of its own).
        .filter(|j| {
            parts
                .as_ref()
                .is_none_or(|p| j.node_list.is_empty() || j.node_list.split(',').any(|s| p.iter().any(|x| x == s)))
        })
        .collect();
    if a.sort.as_deref().is_some_and(|s| s.trim() == "-i") {
        shown.reverse();
    }
    let _ = (a.array, a.all, a.verbose);
    let mut out = String::new();
    if !a.noheader {
        out.push_str(&render_line(&pieces, |f| f.title().to_string()));
    }
    for j in shown {
        out.push_str(&render_line(&pieces, |f| f.value(j, now)));
    }
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

/// `CLUSTER: koalesce` when `-M/--clusters` was given, as Slurm 22.05's squeue prints it before
/// each cluster's table; not with `-h` (Slurm prints it only with the header; Parsl reads
/// `squeue --clusters=NAME --noheader` line by line). Any `-M` list is one cluster to koalesce
/// ([`super::check_clusters`]): one line, and never the CLUSTER column Slurm adds under `-h`
/// when the list holds several clusters.
fn cluster_line(clustered: bool, noheader: bool) -> String {
    if clustered && !noheader {
        format!("CLUSTER: {}\n", super::CLUSTER_NAME)
    } else {
        String::new()
    }
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect()
}

/// A field squeue can print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    JobId,
    ArrayJobId,
    ArrayTaskId,
    Name,
    User,
    StateCompact,
    State,
    Reason,
    ReasonList,
    TimeUsed,
    TimeLimit,
    TimeLeft,
    Nodes,
    Cpus,
    NodeList,
    Partition,
    SubmitTime,
    StartTime,
    EndTime,
    Account,
    Qos,
    Priority,
    ExitCode,
}

impl Field {
    /// The `-o` letter's field.
    fn from_letter(c: char) -> Option<Field> {
        Some(match c {
            'i' | 'A' => Field::JobId,
            'F' => Field::ArrayJobId,
            'K' => Field::ArrayTaskId,
            'j' => Field::Name,
            'u' => Field::User,
            't' => Field::StateCompact,
            'T' => Field::State,
            'r' => Field::Reason,
            'R' => Field::ReasonList,
            'M' => Field::TimeUsed,
            'l' => Field::TimeLimit,
            'L' => Field::TimeLeft,
            'D' => Field::Nodes,
            'C' => Field::Cpus,
            'N' => Field::NodeList,
            'P' => Field::Partition,
            'V' => Field::SubmitTime,
            'S' => Field::StartTime,
            'e' => Field::EndTime,
            'a' => Field::Account,
            'q' => Field::Qos,
            'Q' | 'p' => Field::Priority,
            _ => return None,
        })
    }

    /// The `-O` name's field (case-insensitive).
    fn from_name(n: &str) -> Option<Field> {
        Some(match n.to_ascii_lowercase().as_str() {
            "jobid" | "jobarrayid" => Field::JobId,
            "arrayjobid" => Field::ArrayJobId,
            "arraytaskid" => Field::ArrayTaskId,
            "name" => Field::Name,
            "username" => Field::User,
            "statecompact" => Field::StateCompact,
            "state" => Field::State,
            "reason" => Field::Reason,
            "reasonlist" => Field::ReasonList,
            "timeused" => Field::TimeUsed,
            "timelimit" => Field::TimeLimit,
            "timeleft" => Field::TimeLeft,
            "numnodes" => Field::Nodes,
            "numcpus" => Field::Cpus,
            "nodelist" => Field::NodeList,
            "partition" => Field::Partition,
            "submittime" => Field::SubmitTime,
            "starttime" => Field::StartTime,
            "endtime" => Field::EndTime,
            "account" => Field::Account,
            "qos" => Field::Qos,
            "priority" | "prioritylong" => Field::Priority,
            "exit_code" => Field::ExitCode,
            _ => return None,
        })
    }

    /// The header Slurm prints for the field.
    pub fn title(self) -> &'static str {
        match self {
            Field::JobId => "JOBID",
            Field::ArrayJobId => "ARRAY_JOB_ID",
            Field::ArrayTaskId => "ARRAY_TASK_ID",
            Field::Name => "NAME",
            Field::User => "USER",
            Field::StateCompact => "ST",
            Field::State => "STATE",
            Field::Reason => "REASON",
            Field::ReasonList => "NODELIST(REASON)",
            Field::TimeUsed => "TIME",
            Field::TimeLimit => "TIME_LIMIT",
            Field::TimeLeft => "TIME_LEFT",
            Field::Nodes => "NODES",
            Field::Cpus => "CPUS",
            Field::NodeList => "NODELIST",
            Field::Partition => "PARTITION",
            Field::SubmitTime => "SUBMIT_TIME",
            Field::StartTime => "START_TIME",
            Field::EndTime => "END_TIME",
            Field::Account => "ACCOUNT",
            Field::Qos => "QOS",
            Field::Priority => "PRIORITY",
            Field::ExitCode => "EXIT_CODE",
        }
    }

    /// The field's value for job `j` at `now` (Unix ms).
    pub fn value(self, j: &SlurmJob, now: u64) -> String {
        match self {
            Field::JobId => j.slurm_id(),
            Field::ArrayJobId => j.array.map_or(j.id, |(a, _)| a).to_string(),
            Field::ArrayTaskId => j.array.map_or_else(|| "N/A".into(), |(_, t)| t.to_string()),
            Field::Name => j.name.clone(),
            Field::User => j.user.clone(),
            Field::StateCompact => j.state.short().into(),
            Field::State => j.state.long().into(),
            Field::Reason => j.reason.into(),
            Field::ReasonList => {
                if j.state == State::Pending || j.node_list.is_empty() {
                    format!("({})", j.reason)
                } else {
                    j.node_list.clone()
                }
            }
            Field::TimeUsed => squeue_duration(j.elapsed_secs(now)),
            // The API does not say a job's time limit.
            Field::TimeLimit | Field::TimeLeft => "N/A".into(),
            Field::Nodes => j.nodes.to_string(),
            Field::Cpus => j.cpus.to_string(),
            Field::NodeList => j.node_list.clone(),
            Field::Partition => j.partition(),
            Field::SubmitTime => timestamp(j.submit_ms),
            Field::StartTime => j.expected_start_ms().map(timestamp).unwrap_or_else(|| "N/A".into()),
            Field::EndTime => j.end_ms.map(timestamp).unwrap_or_else(|| "N/A".into()),
            Field::Account => "(null)".into(),
            Field::Qos => "normal".into(),
            Field::Priority => "1".into(),
            Field::ExitCode => j.exit_code_text(),
        }
    }
}

/// One part of an output format: literal text or a field with its width and justification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Field { field: Field, width: Option<usize>, right: bool },
}

/// Parses an `-o` format (`%[.][width]letter`, `%%`, other text literal).
pub fn parse_format(f: &str) -> SResult<Vec<Piece>> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut chars = f.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            text.push(c);
            continue;
        }
        if chars.peek() == Some(&'%') {
            chars.next();
            text.push('%');
            continue;
        }
        let right = chars.peek() == Some(&'.');
        if right {
            chars.next();
        }
        let mut digits = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            digits.push(*d);
            chars.next();
        }
        let letter = chars
            .next()
            .ok_or_else(|| SlurmError::msg(format!("Invalid job format specification: {f}")))?;
        let field = Field::from_letter(letter)
            .ok_or_else(|| SlurmError::msg(format!("Invalid job format specification: {letter} (koalesce knows %i %A %F %K %j %u %t %T %r %R %M %l %L %D %C %N %P %V %S %e %a %q %Q %p)")))?;
        if !text.is_empty() {
            out.push(Piece::Text(std::mem::take(&mut text)));
        }
        let width = if digits.is_empty() {
            None
        } else {
            Some(
                digits
                    .parse::<usize>()
                    .map_err(|_| SlurmError::msg(format!("Invalid field width in {f}")))?
                    .min(4096),
            )
        };
        out.push(Piece::Field { field, width, right });
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    Ok(out)
}

/// Parses an `-O` format: `Name[:[.][width]]` comma-separated; each field is 20 wide unless
/// given, left-justified unless `.`, and followed by a space.
pub fn parse_long_format(f: &str) -> SResult<Vec<Piece>> {
    let mut out = Vec::new();
    for spec in f.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, size) = spec.split_once(':').unwrap_or((spec, ""));
        let field = Field::from_name(name).ok_or_else(|| SlurmError::msg(format!("Invalid job format specification: {name}")))?;
        let right = size.starts_with('.');
        let digits = size.trim_start_matches('.');
        let width = if digits.is_empty() {
            20
        } else {
            digits
                .parse::<usize>()
                .map_err(|_| SlurmError::msg(format!("Invalid field width in {spec}")))?
                .min(4096)
        };
        out.push(Piece::Field {
            field,
            width: Some(width.saturating_sub(1).max(1)),
            right,
        });
        out.push(Piece::Text(" ".into()));
    }
    Ok(out)
}

/// One output line: each field padded (and truncated) to its width.
pub fn render_line(pieces: &[Piece], value: impl Fn(Field) -> String) -> String {
    let mut line = String::new();
    for p in pieces {
        match p {
            Piece::Text(t) => line.push_str(t),
            Piece::Field { field, width, right } => {
                let v = crate::client_cmds::format::escape(&value(*field));
                match width {
                    None => line.push_str(&v),
                    Some(w) => {
                        let v: String = v.chars().take(*w).collect();
                        if *right {
                            line.push_str(&format!("{v:>w$}"));
                        } else {
                            line.push_str(&format!("{v:<w$}"));
                        }
                    }
                }
            }
        }
    }
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(state: State, node_list: &str) -> SlurmJob {
        SlurmJob {
            id: 42,
            name: "a-rather-long-name".into(),
            user: "alice".into(),
            state,
            reason: if state == State::Pending { "Resources" } else { "None" },
            exit_code: (0, 0),
            cpus: 4,
            nodes: 1,
            node_list: node_list.into(),
            submit_ms: 1_000,
            start_ms: (state != State::Pending).then_some(1_000),
            end_ms: None,
            begin_ms: None,
            failure: None,
            array: None,
        }
    }

    fn lines(fmt: &[Piece], jobs: &[SlurmJob], now: u64) -> String {
        let mut s = render_line(fmt, |f| f.title().to_string());
        for j in jobs {
            s.push_str(&render_line(fmt, |f| f.value(j, now)));
        }
        s
    }

    #[test]
    fn default_format_matches_slurm() {
        let f = parse_format(DEFAULT_FORMAT).unwrap();
        let out = lines(&f, &[job(State::Pending, ""), job(State::Running, "vu")], 66_000);
        let expected = [
            "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)",
            "                42       any a-rather    alice PD       0:00      1 (Resources)",
            "                42        vu a-rather    alice  R       1:05      1 vu",
        ]
        .map(|l| format!("{l}\n"))
        .concat();
        assert_eq!(out, expected);
    }

    #[test]
    fn psij_and_parsl_formats() {
        // Parsl: --noheader --format='%i %t'.
        let f = parse_format("%i %t").unwrap();
        assert_eq!(render_line(&f, |x| x.value(&job(State::Running, "vu"), 0)), "42 R\n");
        // PSI/J: -O JobArrayID,StateCompact,Reason (header skipped, split on whitespace).
        let f = parse_long_format("JobArrayID,StateCompact,Reason").unwrap();
        let head = render_line(&f, |x| x.title().to_string());
        assert_eq!(head, format!("{:<19} {:<19} {:<19} \n", "JOBID", "ST", "REASON"));
        let row = render_line(&f, |x| x.value(&job(State::Pending, ""), 0));
        assert_eq!(row.split_whitespace().collect::<Vec<_>>(), ["42", "PD", "Resources"]);
        // %% and literal text.
        let f = parse_format("id=%i|%%|%.5T").unwrap();
        assert_eq!(render_line(&f, |x| x.value(&job(State::Running, "vu"), 0)), "id=42|%|RUNNI\n");
    }

    #[test]
    fn clusters_get_their_line_only_with_the_header() {
        assert_eq!(cluster_line(true, false), "CLUSTER: koalesce\n");
        assert_eq!(cluster_line(true, true), "");
        assert_eq!(cluster_line(false, false), "");
    }

    #[test]
    fn bad_formats_are_errors() {
        assert!(parse_format("%i %z").is_err());
        assert!(parse_format("%.").is_err());
        assert!(parse_long_format("JobID,Bogus").is_err());
    }

    #[test]
    fn options_parse_like_getopt() {
        let a: SqueueArgs = parse_options(
            "squeue",
            &["--noheader".into(), "--format=%i %t".into(), "--job".into(), "3,4".into()],
        )
        .unwrap();
        assert!(a.noheader);
        assert_eq!(a.jobs.as_deref(), Some("3,4"));
        let a: SqueueArgs = parse_options("squeue", &["-h".into(), "-t".into(), "all".into(), "--me".into(), "-r".into()]).unwrap();
        assert!(a.me && a.array);
        let e = parse_options::<SqueueArgs>("squeue", &["--frobnicate".into()]).unwrap_err();
        assert!(e.message.starts_with("squeue: unrecognized option '--frobnicate'"), "{}", e.message);
    }
}
