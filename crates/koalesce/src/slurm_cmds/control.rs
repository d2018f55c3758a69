//! `scancel` and `scontrol` (`show job`, `show hostnames`, `show config`: showconfig.rs).

use std::process::ExitCode;

use clap::Parser;

use super::jobview::{parse_state_list, SlurmJob, State};
use super::timefmt::{long_duration, now_ms, timestamp};
use super::{load_jobs, parse_job_ids, parse_options, SResult, SlurmError};
use crate::client_cmds::api::{ApiError, Client};

/// scancel - cancel koalesce jobs.
#[derive(Debug, Parser)]
#[command(disable_version_flag = true)]
pub struct ScancelArgs {
    /// Job ids (`ID`, `ID.step` cancels the job).
    #[arg(value_name = "JOB_ID")]
    ids: Vec<String>,
    /// Do not report errors.
    #[arg(short = 'Q', long = "quiet")]
    quiet: bool,
    /// Only this user's jobs.
    #[arg(short = 'u', long = "user", value_name = "USER")]
    user: Option<String>,
    /// Only jobs with this name.
    #[arg(short = 'n', long = "name", alias = "jobname", value_name = "NAME")]
    name: Option<String>,
    /// Only jobs in these states (pending, running, ...).
    #[arg(short = 't', long = "state", value_name = "STATES")]
    state: Option<String>,
    /// Signal to send: koalesce cancels (KILL / TERM / INT), it cannot deliver other signals.
    #[arg(short = 's', long = "signal", value_name = "SIGNAL")]
    signal: Option<String>,
    /// Signal only the batch step (koalesce cancels the job).
    #[arg(short = 'b', long = "batch")]
    batch: bool,
    /// Signal all steps (koalesce cancels the job).
    #[arg(short = 'f', long = "full")]
    full: bool,
    /// Report each job and what failed (without it, ended and unknown jobs are passed over).
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,
    /// Clusters: koalesce is one (`koalesce`, or `all`).
    #[arg(short = 'M', long = "clusters", alias = "cluster", value_name = "CLUSTERS")]
    clusters: Option<String>,
}

pub fn scancel(args: &[String], conn: impl FnOnce() -> SResult<Client>) -> SResult<ExitCode> {
    let a: ScancelArgs = parse_options("scancel", args)?;
    super::check_clusters("scancel", a.clusters.as_deref())?;
    if let Some(sig) = &a.signal {
        let s = sig.trim().trim_start_matches("SIG").to_ascii_uppercase();
        if !matches!(s.as_str(), "KILL" | "TERM" | "INT" | "9" | "15" | "2") {
            return Err(SlurmError::msg(format!(
                "koalesce cannot deliver signal {sig} to a job: it can only cancel it (KILL, TERM, INT)"
            )));
        }
    }
    let _ = (a.batch, a.full);
    let mut ids = Vec::new();
    for raw in &a.ids {
        ids.extend(parse_job_ids(raw)?);
    }
    let filters = a.user.is_some() || a.name.is_some() || a.state.is_some();
    if ids.is_empty() && !filters {
        return Err(SlurmError::msg("No job identification provided"));
    }
    let client = conn()?;
    if filters {
        let states: Option<Vec<State>> = a.state.as_deref().map(parse_state_list).transpose().map_err(SlurmError::msg)?;
        let scope = (!ids.is_empty()).then_some(ids.as_slice());
        // `-u $USER` (the Unix account): the caller's own jobs.
        let users = super::user_filter(a.user.as_deref());
        let jobs = load_jobs(&client, scope, users.is_some())?;
        ids = jobs
            .iter()
            .filter(|j| j.state.is_active())
            .filter(|j| users.as_ref().is_none_or(|u| u.contains(&j.user)))
            .filter(|j| a.name.as_ref().is_none_or(|n| &j.name == n))
            .filter(|j| states.as_ref().is_none_or(|s| s.contains(&j.state)))
            .map(|j| j.id)
            .collect();
    }
    // As Slurm 22.05's scancel: a job that already ended or does not exist is reported only
    // with -v, and is not an error (exit 0).
    for id in ids {
        if a.verbose {
            eprintln!("scancel: Terminating job {id}");
        }
        if let Err(e) = client.cancel_json(id) {
            let why = match e.downcast_ref::<ApiError>() {
                Some(ApiError::Status { status: 409, .. }) => "Job/step already completing or completed",
                Some(ApiError::Status { status: 404, .. }) => "Invalid job id specified",
                _ => return Err(e.into()),
            };
            if a.verbose && !a.quiet {
                eprintln!("scancel: error: Kill job error on job id {id}: {why}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `scontrol show job [ID]`, `scontrol show hostnames [LIST]`, `scontrol show config`; other
/// requests are errors.
pub fn scontrol(args: &[String], conn: impl FnOnce() -> SResult<Client>) -> SResult<ExitCode> {
    // scontrol takes a few global flags before the command.
    let mut rest: Vec<&str> = Vec::new();
    let mut oneliner = false;
    for a in args {
        match a.as_str() {
            "-o" | "--oneliner" => oneliner = true,
            // getopt's `-V` and `--version` (abbreviated down to `--vers`), anywhere.
            v if v == "-V" || (v.len() >= 6 && "--version".starts_with(v)) => {
                super::print_version();
                return Ok(ExitCode::SUCCESS);
            }
            "-d" | "--details" | "-a" | "--all" | "-Q" | "--quiet" => {}
            "-h" | "--help" => {
                println!("scontrol [-o] show job [JOB_ID]\nscontrol show hostnames [HOSTLIST]\nscontrol show config\nscontrol ping\nscontrol version\n(koalesce's scontrol answers only these; keywords may be abbreviated as Slurm's: sho j, vers)");
                return Ok(ExitCode::SUCCESS);
            }
            s => rest.push(s),
        }
    }
    // Keywords and entities as Slurm matches them (abbreviations, any case: `scontrol vers`,
    // `scontrol sho j 5`); what Slurm knows and koalesce does not offer is refused by name.
    let Some(&tag) = rest.first() else {
        return Err(SlurmError::msg(
            "koalesce's scontrol needs a command: show job [ID], show hostnames [LIST], show config, ping or version",
        ));
    };
    let esc = crate::client_cmds::format::escape;
    let raw = |message: String| SlurmError {
        message,
        raw: true,
        code: 1,
    };
    match super::scontrol_words::keyword(tag) {
        Some("version") => {
            super::print_version();
            if rest.len() > 1 {
                // Slurm prints the version and then complains.
                return Err(raw(format!("too many arguments for {} keyword\n", esc(tag))));
            }
            Ok(ExitCode::SUCCESS)
        }
        Some("ping") => Ok(super::showconfig::ping(&conn()?)),
        Some("show") => {
            let Some(arg) = rest.get(1) else {
                return Err(raw(format!("too few arguments for keyword:{}\n", esc(tag))));
            };
            if rest.len() > 3 {
                return Err(raw(format!("too many arguments for keyword:{}\n", esc(tag))));
            }
            // `show job=5` as `show job 5`.
            let (entity, value) = match arg.split_once('=') {
                Some((e, v)) => (e, Some(v)),
                None => (*arg, rest.get(2).copied()),
            };
            match super::scontrol_words::show_entity(entity) {
                Some("hostnames") => show_hostnames(value),
                Some("jobs" | "jobid") => show_jobs(value, oneliner, conn),
                Some("config") => {
                    super::showconfig::run(&conn()?)?;
                    Ok(ExitCode::SUCCESS)
                }
                Some(other) => Err(SlurmError::msg(format!(
                    "koalesce's scontrol does not offer 'show {other}' (only: show job, show hostnames, show config)"
                ))),
                None => Err(raw(format!("invalid entity:{} for keyword:{} \n", esc(entity), esc(tag)))),
            }
        }
        Some(other) => Err(SlurmError::msg(format!(
            "koalesce's scontrol does not offer '{other}' (only: show job, show hostnames, show config, ping, version)"
        ))),
        None => Err(raw(format!("invalid keyword: {}\n", esc(tag)))),
    }
}

/// `scontrol show hostnames [LIST]` (the job's node list without one).
fn show_hostnames(list: Option<&str>) -> SResult<ExitCode> {
    let list = match list {
        Some(l) => l.to_string(),
        None => {
            std::env::var("SLURM_JOB_NODELIST").map_err(|_| SlurmError::msg("No hostlist specified (and SLURM_JOB_NODELIST is not set)"))?
        }
    };
    for h in expand_hostlist(&list).map_err(SlurmError::msg)? {
        println!("{h}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `scontrol show job [IDS]`.
fn show_jobs(ids: Option<&str>, oneliner: bool, conn: impl FnOnce() -> SResult<Client>) -> SResult<ExitCode> {
    let ids = ids.map(parse_job_ids).transpose()?;
    let client = conn()?;
    let jobs = load_jobs(&client, ids.as_deref(), false)?;
    if jobs.is_empty() {
        if ids.is_some() {
            return Err(SlurmError {
                message: "slurm_load_jobs error: Invalid job id specified\n".into(),
                raw: true,
                code: 1,
            });
        }
        println!("No jobs in the system");
        return Ok(ExitCode::SUCCESS);
    }
    let now = now_ms();
    let mut out = String::new();
    for j in &jobs {
        out.push_str(&show_job(j, now, oneliner));
    }
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

/// One job as `scontrol show job` prints it (key=value lines, a blank line after).
pub fn show_job(j: &SlurmJob, now: u64, oneliner: bool) -> String {
    let esc = crate::client_cmds::format::escape;
    let ts = |t: Option<u64>| t.map(timestamp).unwrap_or_else(|| "Unknown".into());
    let node_list = if j.node_list.is_empty() {
        "(null)".to_string()
    } else {
        esc(&j.node_list)
    };
    let batch_host = j
        .node_list
        .split(',')
        .next()
        .filter(|s| !s.is_empty())
        .map(esc)
        .unwrap_or_else(|| "(null)".into());
    let array = match j.array {
        Some((a, t)) => format!(" ArrayJobId={a} ArrayTaskId={t}"),
        None => String::new(),
    };
    let lines = [
        format!("JobId={}{array} JobName={}", j.id, esc(&j.name)),
        format!("UserId={}(N/A) GroupId=(N/A) MCS_label=N/A", esc(&j.user)),
        "Priority=1 Nice=0 Account=(null) QOS=normal".to_string(),
        format!("JobState={} Reason={} Dependency=(null)", j.state.long(), j.reason),
        format!("Requeue=0 Restarts=0 BatchFlag=1 Reboot=0 ExitCode={}", j.exit_code_text()),
        format!("RunTime={} TimeLimit=N/A TimeMin=N/A", long_duration(j.elapsed_secs(now))),
        format!("SubmitTime={} EligibleTime={}", timestamp(j.submit_ms), timestamp(j.eligible_ms())),
        format!("StartTime={} EndTime={} Deadline=N/A", ts(j.expected_start_ms()), ts(j.end_ms)),
        format!("Partition={}", esc(&j.partition())),
        format!("NodeList={node_list}"),
        format!("BatchHost={batch_host}"),
        format!("NumNodes={} NumCPUs={} NumTasks={} CPUs/Task=1", j.nodes, j.cpus, j.cpus),
        format!("TRES=cpu={},node={}", j.cpus, j.nodes),
        format!("Comment={}", j.failure.as_deref().map(esc).unwrap_or_else(|| "(null)".into())),
        "Power=".to_string(),
    ];
    if oneliner {
        format!("{}\n", lines.join(" "))
    } else {
        let mut out = String::new();
        for (i, l) in lines.iter().enumerate() {
            out.push_str(if i == 0 { "" } else { "   " });
            out.push_str(l);
            out.push('\n');
        }
        // Slurm ends each record with an indented empty line and a blank line.
        out.push_str("   \n\n");
        out
    }
}

/// Expands a Slurm host list (`a1,b[01-03,7]`) into host names.
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    // Split on commas outside brackets.
    let mut depth = 0;
    let mut item = String::new();
    let mut items = Vec::new();
    for c in list.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut item));
                continue;
            }
            _ => {}
        }
        if depth < 0 {
            return Err(format!("Invalid hostlist: {list}"));
        }
        item.push(c);
    }
    items.push(item);
    for it in items.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()) {
        let Some(open) = it.find('[') else {
            out.push(it);
            continue;
        };
        let close = it
            .rfind(']')
            .filter(|c| *c > open)
            .ok_or_else(|| format!("Invalid hostlist: {list}"))?;
        let (prefix, body, suffix) = (&it[..open], &it[open + 1..close], &it[close + 1..]);
        for r in body.split(',') {
            let (lo, hi) = r.split_once('-').unwrap_or((r, r));
            let width = lo.len();
            let (a, b): (u64, u64) = (
                lo.parse().map_err(|_| format!("Invalid hostlist: {list}"))?,
                hi.parse().map_err(|_| format!("Invalid hostlist: {list}"))?,
            );
            if b < a || b - a > 65_536 {
                return Err(format!("Invalid hostlist: {list}"));
            }
            for n in a..=b {
                out.push(format!("{prefix}{n:0width$}{suffix}"));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostlists_expand() {
        assert_eq!(expand_hostlist("vu").unwrap(), ["vu"]);
        assert_eq!(expand_hostlist("a1,b[01-03,7]").unwrap(), ["a1", "b01", "b02", "b03", "b7"]);
        assert_eq!(expand_hostlist("n[8-10]x").unwrap(), ["n8x", "n9x", "n10x"]);
        assert!(expand_hostlist("n[3-1]").is_err());
        assert!(expand_hostlist("n[1-").is_err());
    }

    #[test]
    fn show_job_is_key_value_lines() {
        let j = SlurmJob {
            id: 5,
            name: "x".into(),
            user: "u".into(),
            state: State::Completed,
            reason: "None",
            exit_code: (0, 0),
            cpus: 2,
            nodes: 1,
            node_list: "vu".into(),
            submit_ms: 0,
            start_ms: Some(0),
            end_ms: Some(61_000),
            begin_ms: None,
            failure: None,
            array: None,
        };
        let s = show_job(&j, 0, false);
        assert!(s.starts_with("JobId=5 JobName=x\n   UserId=u"), "{s}");
        assert!(s.contains("   JobState=COMPLETED Reason=None"), "{s}");
        assert!(s.contains("ExitCode=0:0"), "{s}");
        assert!(s.contains("RunTime=00:01:01"), "{s}");
        assert!(s.ends_with("   Power=\n   \n\n"), "{s}");
        assert_eq!(show_job(&j, 0, true).lines().count(), 1);
    }

    /// Slurm 22.05's scontrol takes abbreviated keywords and entities (`scontrol vers` answered
    /// `slurm-wlm 22.05.8` on the test bed, `scontrol ver` "invalid keyword: ver").
    #[test]
    fn scontrol_takes_slurms_abbreviations() {
        let no_server = || -> SResult<Client> { panic!("no server is needed") };
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for ok in [
            &["vers"][..],
            &["VERSION"],
            &["-o", "versi"],
            &["sho", "hostn", "a[1-2]"],
            &["show", "hostname=b1"],
        ] {
            assert!(scontrol(&args(ok), no_server).is_ok(), "{ok:?}");
        }
        let e = scontrol(&args(&["ver"]), no_server).unwrap_err();
        assert_eq!((e.render("scontrol"), e.code), ("invalid keyword: ver\n".to_string(), 1));
        let e = scontrol(&args(&["show", "bogus"]), no_server).unwrap_err();
        assert_eq!(e.render("scontrol"), "invalid entity:bogus for keyword:show \n");
        let e = scontrol(&args(&["sho"]), no_server).unwrap_err();
        assert_eq!(e.render("scontrol"), "too few arguments for keyword:sho\n");
        let e = scontrol(&args(&["show", "n"]), no_server).unwrap_err();
        assert!(
            e.message.starts_with("koalesce's scontrol does not offer 'show nodes'"),
            "{}",
            e.message
        );
        let e = scontrol(&args(&["upd", "JobId=5"]), no_server).unwrap_err();
        assert!(
            e.message.starts_with("koalesce's scontrol does not offer 'update'"),
            "{}",
            e.message
        );
    }
}
