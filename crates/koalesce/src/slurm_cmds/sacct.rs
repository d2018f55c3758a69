//! `sacct`: koalesce's jobs as Slurm's accounting shows them (`--format`, `-X`, `-P`, `-p`).
//!
//! koalesce keeps every job, so `sacct` always works (unlike a Slurm without slurmdbd).
//! Without `-X`, a job that started also has its `ID.batch` step line, as in Slurm.

use std::process::ExitCode;

use clap::Parser;

use super::jobview::{parse_state_list, SlurmJob, State};
use super::timefmt::{local_midnight_ms, long_duration, now_ms, timestamp};
use super::{load_jobs, parse_job_ids, parse_options, SResult, SlurmError};
use crate::client_cmds::api::Client;

/// sacct's default fields.
pub const DEFAULT_FIELDS: &str = "jobid,jobname,partition,account,alloccpus,state,exitcode";
/// `sacct -b`.
pub const BRIEF_FIELDS: &str = "jobid,state,exitcode";

/// sacct - accounting data of koalesce jobs, in Slurm's formats.
#[derive(Debug, Parser)]
#[command(disable_version_flag = true, disable_help_flag = true)]
pub struct SacctArgs {
    /// Print this help.
    #[arg(short = 'h', long = "help", action = clap::ArgAction::Help)]
    help: Option<bool>,
    /// Only the allocation of each job (no step lines).
    #[arg(short = 'X', long = "allocations")]
    allocations: bool,
    /// No header.
    #[arg(short = 'n', long = "noheader")]
    noheader: bool,
    /// Fields, comma-separated, each optionally `%WIDTH` (JobID, JobName, State, ExitCode, ...).
    #[arg(short = 'o', long = "format", value_name = "FIELDS")]
    format: Option<String>,
    /// Comma-separated job ids.
    #[arg(short = 'j', long = "jobs", value_name = "JOB_ID_LIST")]
    jobs: Option<String>,
    /// `|`-separated output without a trailing `|`.
    #[arg(short = 'P', long = "parsable2")]
    parsable2: bool,
    /// `|`-separated output with a trailing `|`.
    #[arg(short = 'p', long = "parsable")]
    parsable: bool,
    /// Field delimiter for -p / -P.
    #[arg(long = "delimiter", value_name = "CHARACTERS")]
    delimiter: Option<String>,
    /// Only these states (comma-separated names).
    #[arg(short = 's', long = "state", value_name = "STATES")]
    state: Option<String>,
    /// Only these users' jobs.
    #[arg(short = 'u', long = "user", value_name = "USER_LIST")]
    user: Option<String>,
    /// Every user's jobs (admins).
    #[arg(short = 'a', long = "allusers")]
    allusers: bool,
    /// Only jobs with these names.
    #[arg(long = "name", value_name = "NAMES")]
    name: Option<String>,
    /// JobID, State and ExitCode only.
    #[arg(short = 'b', long = "brief")]
    brief: bool,
    /// Jobs submitted at or after this time (`now`, `now-1hour`, YYYY-MM-DD[THH:MM[:SS]]); default: midnight.
    #[arg(short = 'S', long = "starttime", value_name = "TIME")]
    starttime: Option<String>,
    /// Jobs submitted before this time.
    #[arg(short = 'E', long = "endtime", value_name = "TIME")]
    endtime: Option<String>,
    /// All clusters (koalesce is one).
    #[arg(short = 'L', long = "allclusters")]
    allclusters: bool,
    /// Clusters: koalesce is one (`koalesce`, or `all`).
    #[arg(short = 'M', long = "clusters", alias = "cluster", value_name = "CLUSTERS")]
    clusters: Option<String>,
    /// Accepted for compatibility (fields are truncated to their width anyway).
    #[arg(short = 'T', long = "truncate")]
    truncate: bool,
    /// Accepted for compatibility.
    #[arg(short = 'D', long = "duplicates")]
    duplicates: bool,
    /// Accepted for compatibility.
    #[arg(long = "noconvert")]
    noconvert: bool,
    /// Print the field names.
    #[arg(short = 'e', long = "helpformat")]
    helpformat: bool,
}

pub fn run(args: &[String], conn: impl FnOnce() -> SResult<Client>) -> SResult<ExitCode> {
    let a: SacctArgs = parse_options("sacct", args)?;
    if a.helpformat {
        println!("{}", FIELDS.iter().map(|f| f.name).collect::<Vec<_>>().join(" "));
        return Ok(ExitCode::SUCCESS);
    }
    let spec = a.format.as_deref().unwrap_or(if a.brief { BRIEF_FIELDS } else { DEFAULT_FIELDS });
    let cols = parse_fields(spec)?;
    let ids = a.jobs.as_deref().map(parse_job_ids).transpose()?;
    let states: Option<Vec<State>> = a.state.as_deref().map(parse_state_list).transpose().map_err(SlurmError::msg)?;
    super::check_clusters("sacct", a.clusters.as_deref())?;
    let users: Option<Vec<String>> = super::user_filter(a.user.as_deref());
    let names: Option<Vec<String>> = a.name.as_ref().map(|u| u.split(',').map(|s| s.trim().to_string()).collect());
    let now = now_ms();
    // Without -j, sacct shows jobs since midnight unless -S says otherwise.
    let start = match &a.starttime {
        Some(t) => Some(parse_sacct_time(t, now)?),
        None if ids.is_none() => Some(local_midnight_ms(now)),
        None => None,
    };
    let end = a.endtime.as_deref().map(|t| parse_sacct_time(t, now)).transpose()?;
    let _ = (a.allclusters, a.truncate, a.duplicates, a.noconvert);
    let client = conn()?;
    let jobs = load_jobs(&client, ids.as_deref(), a.allusers || users.is_some())?;
    let delimiter = a.delimiter.clone().unwrap_or_else(|| "|".into());
    let parsable = a.parsable || a.parsable2;
    let mut out = String::new();
    if !a.noheader {
        let titles: Vec<String> = cols.iter().map(|c| c.field.name.to_string()).collect();
        out.push_str(&render_row(&cols, &titles, parsable, a.parsable, &delimiter));
        if !parsable {
            let dashes: Vec<String> = cols.iter().map(|c| "-".repeat(c.width)).collect();
            out.push_str(&render_row(&cols, &dashes, false, false, &delimiter));
        }
    }
    for j in jobs.iter().filter(|j| {
        states.as_ref().is_none_or(|s| s.contains(&j.state))
            && users.as_ref().is_none_or(|u| u.contains(&j.user))
            && names.as_ref().is_none_or(|n| n.contains(&j.name))
            && start.is_none_or(|s| j.submit_ms >= s || j.end_ms.is_none_or(|e| e >= s))
            && end.is_none_or(|e| j.submit_ms < e)
    }) {
        let values: Vec<String> = cols.iter().map(|c| (c.field.value)(j, Line::Allocation, now)).collect();
        out.push_str(&render_row(&cols, &values, parsable, a.parsable, &delimiter));
        if !a.allocations && j.start_ms.is_some() {
            let values: Vec<String> = cols.iter().map(|c| (c.field.value)(j, Line::Batch, now)).collect();
            out.push_str(&render_row(&cols, &values, parsable, a.parsable, &delimiter));
        }
    }
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

/// Which line of a job: its allocation or its batch step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    Allocation,
    Batch,
}

/// A sacct field: name (as the header prints it), default width (negative: left-justified)
/// and value.
pub struct FieldDef {
    pub name: &'static str,
    pub width: i32,
    pub value: fn(&SlurmJob, Line, u64) -> String,
}

fn job_id(j: &SlurmJob, l: Line, _: u64) -> String {
    match l {
        Line::Allocation => j.slurm_id(),
        Line::Batch => format!("{}.batch", j.slurm_id()),
    }
}

fn job_id_raw(j: &SlurmJob, l: Line, _: u64) -> String {
    match l {
        Line::Allocation => j.id.to_string(),
        Line::Batch => format!("{}.batch", j.id),
    }
}

/// The fields koalesce can fill (names as Slurm's `sacct -e` lists them).
pub const FIELDS: &[FieldDef] = &[
    FieldDef {
        name: "JobID",
        width: -12,
        value: job_id,
    },
    FieldDef {
        name: "JobIDRaw",
        width: -12,
        value: job_id_raw,
    },
    FieldDef {
        name: "JobName",
        width: 10,
        value: |j, l, _| if l == Line::Batch { "batch".into() } else { j.name.clone() },
    },
    FieldDef {
        name: "Partition",
        width: 10,
        value: |j, l, _| if l == Line::Batch { String::new() } else { j.partition() },
    },
    FieldDef {
        name: "Account",
        width: 10,
        value: |_, _, _| String::new(),
    },
    FieldDef {
        name: "AllocCPUS",
        width: 10,
        value: |j, _, _| j.cpus.to_string(),
    },
    FieldDef {
        name: "NCPUS",
        width: 10,
        value: |j, _, _| j.cpus.to_string(),
    },
    FieldDef {
        name: "ReqCPUS",
        width: 8,
        value: |j, _, _| j.cpus.to_string(),
    },
    FieldDef {
        name: "State",
        width: 10,
        value: |j, _, _| j.state.sacct().into(),
    },
    FieldDef {
        name: "ExitCode",
        width: 8,
        value: |j, _, _| j.exit_code_text(),
    },
    FieldDef {
        name: "DerivedExitCode",
        width: 10,
        value: |j, _, _| j.exit_code_text(),
    },
    FieldDef {
        name: "User",
        width: 9,
        value: |j, l, _| if l == Line::Batch { String::new() } else { j.user.clone() },
    },
    FieldDef {
        name: "Elapsed",
        width: 10,
        value: |j, _, now| long_duration(j.elapsed_secs(now)),
    },
    FieldDef {
        name: "ElapsedRaw",
        width: 10,
        value: |j, _, now| j.elapsed_secs(now).to_string(),
    },
    FieldDef {
        name: "Submit",
        width: 19,
        value: |j, _, _| timestamp(j.submit_ms),
    },
    FieldDef {
        name: "Start",
        width: 19,
        value: |j, _, _| j.start_ms.map(timestamp).unwrap_or_else(|| "Unknown".into()),
    },
    FieldDef {
        name: "End",
        width: 19,
        value: |j, _, _| j.end_ms.map(timestamp).unwrap_or_else(|| "Unknown".into()),
    },
    FieldDef {
        name: "Timelimit",
        width: 10,
        value: |_, _, _| String::new(),
    },
    FieldDef {
        name: "NNodes",
        width: 8,
        value: |j, _, _| j.nodes.to_string(),
    },
    FieldDef {
        name: "AllocNodes",
        width: 10,
        value: |j, _, _| j.nodes.to_string(),
    },
    FieldDef {
        name: "NodeList",
        width: 15,
        value: |j, _, _| {
            if j.node_list.is_empty() {
                "None assigned".into()
            } else {
                j.node_list.clone()
            }
        },
    },
    FieldDef {
        name: "Reason",
        width: 20,
        value: |j, _, _| j.reason.into(),
    },
    FieldDef {
        name: "QOS",
        width: 10,
        value: |_, _, _| "normal".into(),
    },
    FieldDef {
        name: "Cluster",
        width: 10,
        value: |_, _, _| "koalesce".into(),
    },
];

/// A column: field and width (sign: justification).
pub struct Column {
    pub field: &'static FieldDef,
    pub width: usize,
    pub left: bool,
}

/// Parses `--format`: `name[%width]` comma-separated, case-insensitive. A negative width
/// left-justifies (as in Slurm).
pub fn parse_fields(spec: &str) -> SResult<Vec<Column>> {
    let mut out = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, width) = match item.split_once('%') {
            Some((n, w)) => (
                n,
                Some(
                    w.parse::<i32>()
                        .map_err(|_| SlurmError::msg(format!("Invalid field width: {item}")))?,
                ),
            ),
            None => (item, None),
        };
        let field = FIELDS
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| SlurmError::msg(format!("Invalid field requested: \"{name}\"")))?;
        let w = width.unwrap_or(field.width);
        out.push(Column {
            field,
            width: (w.unsigned_abs() as usize).clamp(1, 4096),
            left: w < 0,
        });
    }
    if out.is_empty() {
        return Err(SlurmError::msg("no fields given to --format"));
    }
    Ok(out)
}

/// One row: fixed-width columns separated (and ended) by a space, a value longer than its
/// column cut with a `+`; or, parsable, values joined by the delimiter.
pub fn render_row(cols: &[Column], values: &[String], parsable: bool, trailing: bool, delimiter: &str) -> String {
    let mut out = String::new();
    if parsable {
        let vals: Vec<String> = values.iter().map(|v| crate::client_cmds::format::escape(v)).collect();
        out.push_str(&vals.join(delimiter));
        if trailing {
            out.push_str(delimiter);
        }
    } else {
        for (c, v) in cols.iter().zip(values) {
            let v = crate::client_cmds::format::escape(v);
            let w = c.width;
            let v: String = if v.chars().count() > w {
                let mut t: String = v.chars().take(w - 1).collect();
                t.push('+');
                t
            } else {
                v
            };
            if c.left {
                out.push_str(&format!("{v:<w$} "));
            } else {
                out.push_str(&format!("{v:>w$} "));
            }
        }
    }
    out.push('\n');
    out
}

/// sacct's `-S` / `-E`: `now`, `now-N[unit]`, `YYYY-MM-DD[THH:MM[:SS]]`, `MM/DD[/YY]`.
fn parse_sacct_time(t: &str, now: u64) -> SResult<u64> {
    let bad = || SlurmError::msg(format!("Invalid time specification: {t}"));
    let s = t.trim();
    if s.eq_ignore_ascii_case("now") {
        return Ok(now);
    }
    if let Some(rest) = s.strip_prefix("now-") {
        let split = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let n: u64 = rest[..split].parse().map_err(|_| bad())?;
        let unit = match &rest[split..] {
            "" | "seconds" | "second" | "s" => 1,
            "minutes" | "minute" | "min" | "m" => 60,
            "hours" | "hour" | "h" => 3600,
            "days" | "day" | "d" => 86_400,
            "weeks" | "week" | "w" => 604_800,
            _ => return Err(bad()),
        };
        return Ok(now.saturating_sub(n.saturating_mul(unit).saturating_mul(1000)));
    }
    // YYYY-MM-DD[THH:MM[:SS]] in local time.
    let (date, time) = s.split_once('T').unwrap_or((s, "00:00:00"));
    let d: Vec<i32> = date.split('-').map(|p| p.parse().map_err(|_| bad())).collect::<SResult<_>>()?;
    let tm_parts: Vec<i32> = time.split(':').map(|p| p.parse().map_err(|_| bad())).collect::<SResult<_>>()?;
    if d.len() != 3 || tm_parts.is_empty() || tm_parts.len() > 3 {
        return Err(bad());
    }
    // SAFETY: mktime reads and normalizes our own zeroed `tm`.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    tm.tm_year = d[0] - 1900;
    tm.tm_mon = d[1] - 1;
    tm.tm_mday = d[2];
    tm.tm_hour = tm_parts[0];
    tm.tm_min = *tm_parts.get(1).unwrap_or(&0);
    tm.tm_sec = *tm_parts.get(2).unwrap_or(&0);
    tm.tm_isdst = -1;
    let secs = unsafe { libc::mktime(&mut tm) };
    if secs < 0 {
        return Err(bad());
    }
    Ok(secs as u64 * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(state: State) -> SlurmJob {
        SlurmJob {
            id: 9,
            name: "parsl.slurm.1700".into(),
            user: "alice".into(),
            state,
            reason: "None",
            exit_code: if state == State::Cancelled { (0, 15) } else { (0, 0) },
            cpus: 2,
            nodes: 1,
            node_list: "vu".into(),
            submit_ms: 0,
            start_ms: Some(0),
            end_ms: Some(5_000),
            begin_ms: None,
            failure: None,
            array: None,
        }
    }

    fn table(spec: &str, parsable: bool, trailing: bool, jobs: &[SlurmJob]) -> String {
        let cols = parse_fields(spec).unwrap();
        let mut s = String::new();
        let titles: Vec<String> = cols.iter().map(|c| c.field.name.to_string()).collect();
        s.push_str(&render_row(&cols, &titles, parsable, trailing, "|"));
        for j in jobs {
            let v: Vec<String> = cols.iter().map(|c| (c.field.value)(j, Line::Allocation, 0)).collect();
            s.push_str(&render_row(&cols, &v, parsable, trailing, "|"));
        }
        s
    }

    #[test]
    fn default_columns_match_slurm() {
        let out = table(DEFAULT_FIELDS, false, false, &[job(State::Cancelled)]);
        let expected = "JobID           JobName  Partition    Account  AllocCPUS      State ExitCode \n\
                        9            parsl.slu+         vu                     2  CANCELLED     0:15 \n";
        assert_eq!(out, expected);
    }

    #[test]
    fn parsl_reads_jobid_and_state() {
        // Parsl: sacct -X --noheader --format=jobid,state%20 --job ID.
        let cols = parse_fields("jobid,state%20").unwrap();
        let v: Vec<String> = cols
            .iter()
            .map(|c| (c.field.value)(&job(State::Completed), Line::Allocation, 0))
            .collect();
        let row = render_row(&cols, &v, false, false, "|");
        assert_eq!(row.split_whitespace().collect::<Vec<_>>(), ["9", "COMPLETED"]);
    }

    #[test]
    fn parsable_forms() {
        let out = table("JobID,State,ExitCode", true, false, &[job(State::Completed)]);
        assert_eq!(out, "JobID|State|ExitCode\n9|COMPLETED|0:0\n");
        let out = table("JobID,State", true, true, &[job(State::Completed)]);
        assert_eq!(out, "JobID|State|\n9|COMPLETED|\n");
        assert!(parse_fields("jobid,bogus").is_err());
        assert!(parse_fields("jobid%x").is_err());
    }

    #[test]
    fn times() {
        let now = 10_000_000_000;
        assert_eq!(parse_sacct_time("now", now).unwrap(), now);
        assert_eq!(parse_sacct_time("now-1hour", now).unwrap(), now - 3_600_000);
        assert!(parse_sacct_time("2026-11-23", now).is_ok());
        assert!(parse_sacct_time("2026-11-23T10:00", now).is_ok());
        assert!(parse_sacct_time("yesterday-ish", now).is_err());
    }
}
