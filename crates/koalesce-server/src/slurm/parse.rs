//! Parsers of Slurm's command output: pure functions, tested on output captured from a real
//! Slurm 22.05 test bed (`fixtures/`, captured with `koalesce testbed`).
//!
//! | command | format koalesce asks for | parser |
//! |---|---|---|
//! | `sinfo -h -o` [`SINFO_FORMAT`] | `partition|avail|A/I/O/T|state|nodes` | [`parse_sinfo`] |
//! | `squeue -h -t all -j IDS -o` [`SQUEUE_FORMAT`] | `id|state|cpus|reservation|reason|comment` | [`parse_squeue`] |
//! | `scontrol show job` | `Key=Value` records | [`parse_show_job`] |
//! | `scontrol show reservation` | `Key=Value` records | [`parse_show_reservation`] |
//! | jobcomp/filetxt log | one `Key=Value` line per finished job | [`parse_jobcomp_line`] |
//! | `sbatch --parsable` | `id[;cluster]` | [`parse_sbatch_parsable`] |

use std::collections::BTreeMap;

/// `sinfo` output format: partition (without the default marker `*`), availability, CPUs as
/// allocated/idle/other/total, node state (compact), node count. One line per (partition,
/// state) group.
pub const SINFO_FORMAT: &str = "%R|%a|%C|%t|%D";
/// `squeue` output format: job id, state (long), CPUs, reservation, reason, comment. The
/// comment is last because it is free text (koalesce puts `koalesce:DIR` there, to tell its
/// job from another that got the same id after a controller lost its state).
pub const SQUEUE_FORMAT: &str = "%i|%T|%C|%v|%r|%k";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot parse {what} from Slurm: {detail}")]
pub struct ParseError {
    pub what: &'static str,
    pub detail: String,
}

fn perr(what: &'static str, detail: impl Into<String>) -> ParseError {
    ParseError {
        what,
        detail: detail.into(),
    }
}

// ----- sinfo ------------------------------------------------------------------------------

/// CPUs and nodes of one partition, summed over `sinfo`'s state groups.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PartitionInfo {
    /// `up` (jobs may start); `down`, `drain` and `inact` partitions run nothing new.
    pub up: bool,
    pub allocated: u32,
    pub idle: u32,
    /// CPUs on nodes that are down, drained or otherwise unusable.
    pub other: u32,
    pub total: u32,
    pub nodes: u32,
    /// Nodes by compact state (`idle`, `mix`, `alloc`, `drain`, `down*`, `idle*`, ...). A
    /// trailing `*` means the node does not respond.
    pub node_states: BTreeMap<String, u32>,
}

impl PartitionInfo {
    /// Nodes that respond and can run jobs (idle, mixed or allocated, no `*`).
    pub fn nodes_responding(&self) -> u32 {
        self.node_states
            .iter()
            .filter(|(s, _)| matches!(s.as_str(), "idle" | "mix" | "alloc" | "resv" | "comp" | "plnd"))
            .map(|(_, n)| n)
            .sum()
    }
}

/// Parses `sinfo -h -o` [`SINFO_FORMAT`] into partitions by name.
pub fn parse_sinfo(out: &str) -> Result<BTreeMap<String, PartitionInfo>, ParseError> {
    let mut parts: BTreeMap<String, PartitionInfo> = BTreeMap::new();
    for line in out.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let f: Vec<&str> = line.split('|').collect();
        let [name, avail, cpus, state, nodes] = f.as_slice() else {
            return Err(perr("sinfo", format!("expected 5 fields in '{line}'")));
        };
        let c: Vec<u32> = cpus
            .split('/')
            .map(|x| x.parse::<u32>())
            .collect::<Result<_, _>>()
            .map_err(|_| perr("sinfo", format!("bad CPU counts '{cpus}' in '{line}'")))?;
        let [a, i, o, t] = c.as_slice() else {
            return Err(perr("sinfo", format!("expected A/I/O/T, got '{cpus}'")));
        };
        let n: u32 = nodes.parse().map_err(|_| perr("sinfo", format!("bad node count '{nodes}'")))?;
        let p = parts.entry(name.trim_end_matches('*').to_string()).or_default();
        p.up = *avail == "up";
        p.allocated += a;
        p.idle += i;
        p.other += o;
        p.total += t;
        p.nodes += n;
        *p.node_states.entry(state.to_string()).or_default() += n;
    }
    Ok(parts)
}

// ----- squeue -----------------------------------------------------------------------------

/// Slurm's job states (`squeue %T`, `JobState=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    Pending,
    Configuring,
    Running,
    Completing,
    Suspended,
    /// Other live states (`RESIZING`, `SIGNALING`, `STAGE_OUT`, `STOPPED`, `REQUEUED`, ...).
    OtherActive(String),
    Completed,
    Failed,
    Cancelled,
    Timeout,
    NodeFail,
    BootFail,
    Preempted,
    Deadline,
    OutOfMemory,
    /// A terminal state this parser does not know by name (`REVOKED`, `SPECIAL_EXIT`, ...).
    OtherTerminal(String),
}

impl JobState {
    pub fn parse(s: &str) -> JobState {
        match s.trim() {
            "PENDING" => JobState::Pending,
            "CONFIGURING" => JobState::Configuring,
            "RUNNING" => JobState::Running,
            "COMPLETING" => JobState::Completing,
            "SUSPENDED" => JobState::Suspended,
            "COMPLETED" => JobState::Completed,
            "FAILED" => JobState::Failed,
            "CANCELLED" => JobState::Cancelled,
            "TIMEOUT" => JobState::Timeout,
            "NODE_FAIL" => JobState::NodeFail,
            "BOOT_FAIL" => JobState::BootFail,
            "PREEMPTED" => JobState::Preempted,
            "DEADLINE" => JobState::Deadline,
            "OUT_OF_MEMORY" => JobState::OutOfMemory,
            s @ ("RESIZING" | "SIGNALING" | "STAGE_OUT" | "STOPPED" | "REQUEUED" | "REQUEUE_FED" | "REQUEUE_HOLD" | "RESV_DEL_HOLD") => {
                JobState::OtherActive(s.to_string())
            }
            // `CANCELLED by 0` in some outputs.
            s if s.starts_with("CANCELLED") => JobState::Cancelled,
            s => JobState::OtherTerminal(s.to_string()),
        }
    }

    /// The job no longer holds or waits for processors.
    pub fn is_terminal(&self) -> bool {
        !matches!(
            self,
            JobState::Pending
                | JobState::Configuring
                | JobState::Running
                | JobState::Completing
                | JobState::Suspended
                | JobState::OtherActive(_)
        )
    }

    /// Slurm gave the job its processors (the batch script may not run yet: configuring).
    pub fn is_allocated(&self) -> bool {
        matches!(
            self,
            JobState::Configuring | JobState::Running | JobState::Completing | JobState::Suspended
        )
    }
}

/// One line of `squeue -o` [`SQUEUE_FORMAT`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRow {
    pub job: u32,
    pub state: JobState,
    pub cpus: u32,
    pub reservation: Option<String>,
    /// Why it pends (`Resources`, `Priority`, `Reservation`, `JobHeldUser`, ...) or ended
    /// (`NonZeroExitCode`, `TimeLimit`); `None` otherwise.
    pub reason: String,
    pub comment: Option<String>,
}

/// Parses `squeue -h -o` [`SQUEUE_FORMAT`].
pub fn parse_squeue(out: &str) -> Result<Vec<JobRow>, ParseError> {
    let mut rows = Vec::new();
    for line in out.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let f: Vec<&str> = line.splitn(6, '|').collect();
        let [id, state, cpus, resv, reason, comment] = f.as_slice() else {
            return Err(perr("squeue", format!("expected 6 fields in '{line}'")));
        };
        let job = id.parse().map_err(|_| {
            perr(
                "squeue",
                format!("job id '{id}' is not a plain number (arrays and het jobs are not used)"),
            )
        })?;
        let cpus = cpus.parse().map_err(|_| perr("squeue", format!("bad CPU count '{cpus}'")))?;
        rows.push(JobRow {
            job,
            state: JobState::parse(state),
            cpus,
            reservation: null_to_none(resv),
            reason: reason.to_string(),
            comment: null_to_none(comment),
        });
    }
    Ok(rows)
}

/// squeue answers a single unknown id with rc 1 and this message (a list of unknown ids
/// answers rc 0 and no lines).
pub fn is_invalid_job_id(stderr: &str) -> bool {
    stderr.contains("Invalid job id specified")
}

fn null_to_none(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty() && s != "(null)" && s != "N/A").then(|| s.to_string())
}

// ----- Key=Value records (scontrol, jobcomp) ---------------------------------------------

/// Splits `scontrol show ...` output into records of `Key=Value` pairs. Records are separated
/// by blank lines (or are one per line with `-o`). A value runs to the next token that looks
/// like `Key=`; so values with spaces (a `WorkDir` with a blank, a reason text) are kept whole.
/// A key that repeats inside a record (the `NodeName=` lines of a reservation) keeps its first
/// value.
pub fn parse_records(out: &str) -> Vec<BTreeMap<String, String>> {
    let mut records = Vec::new();
    let mut cur: BTreeMap<String, String> = BTreeMap::new();
    let mut last_key: Option<String> = None;
    let mut first_key_of_record: Option<String> = None;
    for line in out.lines() {
        if line.trim().is_empty() {
            if !cur.is_empty() {
                records.push(std::mem::take(&mut cur));
            }
            last_key = None;
            first_key_of_record = None;
            continue;
        }
        // With `-o` every record is one line that starts with the record's first key again.
        let starts_record =
            !line.starts_with(char::is_whitespace) && first_key_of_record.as_deref().is_some_and(|k| line.starts_with(&format!("{k}=")));
        if starts_record && !cur.is_empty() {
            records.push(std::mem::take(&mut cur));
            last_key = None;
        }
        for tok in line.split_whitespace() {
            match split_key(tok) {
                Some((k, v)) => {
                    if first_key_of_record.is_none() {
                        first_key_of_record = Some(k.to_string());
                    }
                    if cur.contains_key(k) {
                        // A repeated key (sub-lines): ignore its value and what follows it.
                        last_key = None;
                    } else {
                        cur.insert(k.to_string(), v.to_string());
                        last_key = Some(k.to_string());
                    }
                }
                None => {
                    if let Some(v) = last_key.as_ref().and_then(|k| cur.get_mut(k)) {
                        v.push(' ');
                        v.push_str(tok);
                    }
                }
            }
        }
    }
    if !cur.is_empty() {
        records.push(cur);
    }
    records
}

fn split_key(tok: &str) -> Option<(&str, &str)> {
    let (k, v) = tok.split_once('=')?;
    let mut chars = k.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '/' | '_' | '-'));
    ok.then_some((k, v))
}

/// A local date and time as Slurm prints it (`2026-11-23T13:40:10`), 1 s resolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct SlurmTime {
    pub year: i32,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

impl SlurmTime {
    /// `None` for `Unknown`, `None`, `N/A` and anything malformed.
    pub fn parse(s: &str) -> Option<SlurmTime> {
        let (date, time) = s.trim().split_once('T')?;
        let d: Vec<&str> = date.split('-').collect();
        let t: Vec<&str> = time.split(':').collect();
        let ([y, mo, da], [h, mi, se]) = (d.as_slice(), t.as_slice()) else {
            return None;
        };
        let st = SlurmTime {
            year: y.parse().ok()?,
            month: mo.parse().ok()?,
            day: da.parse().ok()?,
            hour: h.parse().ok()?,
            minute: mi.parse().ok()?,
            second: se.parse().ok()?,
        };
        let valid = (1..=12).contains(&st.month) && (1..=31).contains(&st.day) && st.hour < 24 && st.minute < 60 && st.second < 61;
        valid.then_some(st)
    }

    /// Unix milliseconds, reading the time as local time of this machine (Slurm prints the
    /// controller's local time; koalesce and the controller are expected to share a zone).
    pub fn to_unix_ms_local(&self) -> Option<u64> {
        self.to_unix_local().filter(|t| *t >= 0).map(|t| t as u64 * 1000)
    }

    /// Unix seconds of this date and time read in this machine's time zone (mktime:
    /// out-of-range days and months roll over, as Slurm's parse_time relies on).
    pub fn to_unix_local(&self) -> Option<i64> {
        // SAFETY: an all-zero `tm` is a valid value of the plain C struct.
        let mut tm: libc::tm = unsafe { std::mem::zeroed() };
        tm.tm_year = self.year - 1900;
        tm.tm_mon = self.month as i32 - 1;
        tm.tm_mday = self.day as i32;
        tm.tm_hour = self.hour as i32;
        tm.tm_min = self.minute as i32;
        tm.tm_sec = self.second as i32;
        tm.tm_isdst = -1;
        // SAFETY: mktime reads and normalizes our own `tm` and nothing else.
        let t = unsafe { libc::mktime(&mut tm) };
        (t != -1).then_some(t as i64)
    }

    /// The date and time of Unix seconds `t` in this machine's time zone (all zero if the C
    /// library cannot represent it).
    pub fn from_unix_local(t: i64) -> SlurmTime {
        let secs = t as libc::time_t;
        // SAFETY: an all-zero `tm` is a valid value of the plain C struct.
        let mut tm: libc::tm = unsafe { std::mem::zeroed() };
        // SAFETY: localtime_r writes only into `tm`, which lives on our stack.
        if unsafe { libc::localtime_r(&secs, &mut tm) }.is_null() {
            return SlurmTime::default();
        }
        SlurmTime {
            year: tm.tm_year + 1900,
            month: (tm.tm_mon + 1) as u32,
            day: tm.tm_mday as u32,
            hour: tm.tm_hour as u32,
            minute: tm.tm_min as u32,
            second: tm.tm_sec as u32,
        }
    }
}

/// `ExitCode=5:0` → (exit status 5, signal 0).
pub fn parse_exit_code(s: &str) -> Option<(i32, i32)> {
    let (a, b) = s.trim().split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Slurm durations: `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`; `UNLIMITED`
/// and `INFINITE` give `None`. In milliseconds.
pub fn parse_duration_ms(s: &str) -> Option<u64> {
    let s = s.trim();
    if matches!(s, "UNLIMITED" | "INFINITE" | "Partition_Limit" | "NONE" | "N/A") {
        return None;
    }
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().ok()?, Some(r)),
        None => (0, None),
    };
    let parts: Vec<u64> = rest
        .unwrap_or(s)
        .split(':')
        .map(|x| x.parse::<u64>())
        .collect::<Result<_, _>>()
        .ok()?;
    let secs = match (rest.is_some(), parts.as_slice()) {
        (false, [m]) => m * 60,
        (false, [m, s]) => m * 60 + s,
        (_, [h, m, s]) => h * 3600 + m * 60 + s,
        (true, [h]) => h * 3600,
        (true, [h, m]) => h * 3600 + m * 60,
        _ => return None,
    };
    Some((days * 86_400 + secs) * 1000)
}

fn req<'a>(r: &'a BTreeMap<String, String>, what: &'static str, key: &str) -> Result<&'a str, ParseError> {
    r.get(key).map(String::as_str).ok_or_else(|| perr(what, format!("missing {key}=")))
}

fn num<T: std::str::FromStr>(r: &BTreeMap<String, String>, what: &'static str, key: &str) -> Result<T, ParseError> {
    let v = req(r, what, key)?;
    v.parse().map_err(|_| perr(what, format!("{key}='{v}' is not a number")))
}

/// What koalesce reads of `scontrol show job`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    pub job: u32,
    pub name: String,
    pub state: JobState,
    pub reason: String,
    /// (exit status, signal) of the batch script.
    pub exit_code: Option<(i32, i32)>,
    pub start: Option<SlurmTime>,
    pub end: Option<SlurmTime>,
    pub partition: String,
    pub reservation: Option<String>,
    pub cpus: u32,
    pub nodes: Option<String>,
    pub work_dir: Option<String>,
    pub time_limit_ms: Option<u64>,
}

/// Parses `scontrol show job [ID]` (multi-line or `-o`).
pub fn parse_show_job(out: &str) -> Result<Vec<JobInfo>, ParseError> {
    parse_records(out)
        .iter()
        .map(|r| {
            const W: &str = "scontrol show job";
            Ok(JobInfo {
                job: num(r, W, "JobId")?,
                name: r.get("JobName").cloned().unwrap_or_default(),
                state: JobState::parse(req(r, W, "JobState")?),
                reason: r.get("Reason").cloned().unwrap_or_default(),
                exit_code: r.get("ExitCode").and_then(|s| parse_exit_code(s)),
                start: r.get("StartTime").and_then(|s| SlurmTime::parse(s)),
                end: r.get("EndTime").and_then(|s| SlurmTime::parse(s)),
                partition: r.get("Partition").cloned().unwrap_or_default(),
                reservation: r.get("Reservation").and_then(|s| null_to_none(s)),
                cpus: num(r, W, "NumCPUs")?,
                nodes: r.get("NodeList").and_then(|s| null_to_none(s)),
                work_dir: r.get("WorkDir").and_then(|s| null_to_none(s)),
                time_limit_ms: r.get("TimeLimit").and_then(|s| parse_duration_ms(s)),
            })
        })
        .collect()
}

/// What koalesce reads of `scontrol show reservation`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservationInfo {
    pub name: String,
    pub start: Option<SlurmTime>,
    pub end: Option<SlurmTime>,
    pub duration_ms: Option<u64>,
    /// Cores (`CoreCnt`); for a node reservation without a core count, 0.
    pub cores: u32,
    pub node_count: u32,
    pub nodes: Option<String>,
    pub partition: Option<String>,
    /// `State=ACTIVE`: it holds its cores now.
    pub active: bool,
    pub users: Vec<String>,
    pub flags: Vec<String>,
}

/// Parses `scontrol show reservation` (multi-line or `-o`). "No reservations in the system"
/// gives an empty list.
pub fn parse_show_reservation(out: &str) -> Result<Vec<ReservationInfo>, ParseError> {
    if out.trim().starts_with("No reservations") {
        return Ok(Vec::new());
    }
    parse_records(out)
        .iter()
        .map(|r| {
            const W: &str = "scontrol show reservation";
            let list = |k: &str| -> Vec<String> {
                r.get(k)
                    .and_then(|s| null_to_none(s))
                    .map(|s| s.split(',').map(str::to_string).filter(|x| !x.is_empty()).collect())
                    .unwrap_or_default()
            };
            Ok(ReservationInfo {
                name: req(r, W, "ReservationName")?.to_string(),
                start: r.get("StartTime").and_then(|s| SlurmTime::parse(s)),
                end: r.get("EndTime").and_then(|s| SlurmTime::parse(s)),
                duration_ms: r.get("Duration").and_then(|s| parse_duration_ms(s)),
                cores: r.get("CoreCnt").and_then(|s| s.parse().ok()).unwrap_or(0),
                node_count: r.get("NodeCnt").and_then(|s| s.parse().ok()).unwrap_or(0),
                nodes: r.get("Nodes").and_then(|s| null_to_none(s)),
                partition: r.get("PartitionName").and_then(|s| null_to_none(s)),
                active: req(r, W, "State")? == "ACTIVE",
                users: list("Users"),
                flags: list("Flags"),
            })
        })
        .collect()
}

/// One line of the jobcomp/filetxt log (written by the controller when a job ends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobCompRecord {
    pub job: u32,
    pub name: String,
    pub state: JobState,
    pub partition: String,
    /// (exit status, signal); `0:0` for a cancelled job.
    pub exit_code: Option<(i32, i32)>,
    pub start: Option<SlurmTime>,
    pub end: Option<SlurmTime>,
    pub submit: Option<SlurmTime>,
    pub cpus: u32,
    pub nodes: Option<String>,
    pub reservation: Option<String>,
    pub work_dir: Option<String>,
}

/// Parses one jobcomp/filetxt line.
pub fn parse_jobcomp_line(line: &str) -> Result<JobCompRecord, ParseError> {
    const W: &str = "jobcomp line";
    let recs = parse_records(line);
    let r = match recs.as_slice() {
        [r] => r,
        _ => return Err(perr(W, format!("expected one record in '{line}'"))),
    };
    Ok(JobCompRecord {
        job: num(r, W, "JobId")?,
        name: r.get("Name").cloned().unwrap_or_default(),
        state: JobState::parse(req(r, W, "JobState")?),
        partition: r.get("Partition").cloned().unwrap_or_default(),
        exit_code: r.get("ExitCode").and_then(|s| parse_exit_code(s)),
        start: r.get("StartTime").and_then(|s| SlurmTime::parse(s)),
        end: r.get("EndTime").and_then(|s| SlurmTime::parse(s)),
        submit: r.get("SubmitTime").and_then(|s| SlurmTime::parse(s)),
        cpus: num(r, W, "ProcCnt")?,
        nodes: r.get("NodeList").and_then(|s| null_to_none(s)),
        reservation: r.get("ReservationName").and_then(|s| null_to_none(s)),
        work_dir: r.get("WorkDir").and_then(|s| null_to_none(s)),
    })
}

/// Parses a whole jobcomp/filetxt log; malformed lines are skipped.
pub fn parse_jobcomp(text: &str) -> Vec<JobCompRecord> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| parse_jobcomp_line(l).ok())
        .collect()
}

/// `sbatch --parsable` prints `JOBID` or `JOBID;CLUSTER`.
pub fn parse_sbatch_parsable(out: &str) -> Result<(u32, Option<String>), ParseError> {
    let line = out
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .ok_or_else(|| perr("sbatch --parsable", "empty output"))?;
    let (id, cluster) = match line.split_once(';') {
        Some((i, c)) => (i, Some(c.to_string())),
        None => (line, None),
    };
    let id = id
        .parse()
        .map_err(|_| perr("sbatch --parsable", format!("'{line}' is not a job id")))?;
    Ok((id, cluster))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fx(name: &str) -> String {
        std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("src/slurm/fixtures")
                .join(name),
        )
        .unwrap()
    }

    #[test]
    fn sinfo_groups_are_summed_per_partition() {
        let p = parse_sinfo(&fx("sinfo_alpha_mix_alloc.txt")).unwrap();
        let d = &p["debug"];
        assert!(d.up);
        assert_eq!((d.allocated, d.idle, d.other, d.total, d.nodes), (40, 24, 0, 64, 2));
        assert_eq!(d.nodes_responding(), 2);
        // A drained node's CPUs are "other"; a node that does not respond is `idle*`.
        let g = parse_sinfo(&fx("sinfo_gamma_drain.txt")).unwrap();
        let d = &g["debug"];
        assert_eq!((d.idle, d.other, d.total), (32, 32, 64));
        assert_eq!(d.node_states["drain"], 1);
        assert_eq!(d.node_states["idle*"], 1);
        assert_eq!(d.nodes_responding(), 0);
        // Cores in an active reservation still count as idle in sinfo.
        let r = parse_sinfo(&fx("sinfo_alpha_reservation.txt")).unwrap();
        assert_eq!((r["debug"].allocated, r["debug"].idle), (44, 20));
    }

    #[test]
    fn sinfo_rejects_garbage_and_strips_default_marker() {
        assert!(parse_sinfo("debug|up|1/2/3|idle|1").is_err());
        assert!(parse_sinfo("nonsense").is_err());
        assert!(parse_sinfo("debug|up|a/b/c/d|idle|1").is_err());
        let p = parse_sinfo("batch*|up|0/8/0/8|idle|1\nother|down|0/0/4/4|down*|1\n").unwrap();
        assert!(p["batch"].up);
        assert!(!p["other"].up);
        assert!(parse_sinfo("").unwrap().is_empty());
    }

    #[test]
    fn squeue_states_reasons_reservations_comments() {
        let rows = parse_squeue(&fx("squeue_states.txt")).unwrap();
        let by: BTreeMap<u32, &JobRow> = rows.iter().map(|r| (r.job, r)).collect();
        assert_eq!(by[&5].state, JobState::Cancelled);
        assert_eq!(by[&4].state, JobState::Completed);
        assert_eq!(by[&3].state, JobState::Failed);
        assert_eq!(by[&3].reason, "NonZeroExitCode");
        assert_eq!(by[&3].comment.as_deref(), Some("koalesce:/tmp/x/fail"));
        assert_eq!(
            (by[&7].state.clone(), by[&7].reason.as_str(), by[&7].cpus),
            (JobState::Pending, "Resources", 40)
        );
        assert_eq!(by[&7].comment, None);
        assert_eq!(by[&8].reason, "JobHeldUser");
        assert_eq!(by[&2].state, JobState::Timeout);
        assert_eq!(by[&2].reason, "TimeLimit");
        // A comment with blanks and the separator stays whole.
        assert_eq!(by[&6].comment.as_deref(), Some("koalesce:/tmp/odd dir|with pipe"));
        assert_eq!(by[&10].reservation.as_deref(), Some("koalesce-gamma-1"));
        assert_eq!((by[&10].state.clone(), by[&10].cpus), (JobState::Running, 4));
        assert_eq!(
            (by[&9].state.clone(), by[&9].reservation.as_deref()),
            (JobState::Completed, Some("koalesce-gamma-1"))
        );
        assert!(rows.iter().filter(|r| r.job < 9).all(|r| r.reservation.is_none()));
        assert!(is_invalid_job_id(&fx("squeue_invalid_single.err")));
    }

    #[test]
    fn squeue_rejects_array_ids_and_short_lines() {
        assert!(parse_squeue("12_3|PENDING|1|(null)|None|(null)").is_err());
        assert!(parse_squeue("12|PENDING|1|(null)|None").is_err());
    }

    #[test]
    fn job_states_terminal_and_allocated() {
        for s in ["PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED"] {
            assert!(!JobState::parse(s).is_terminal(), "{s}");
        }
        for s in [
            "COMPLETED",
            "FAILED",
            "CANCELLED",
            "TIMEOUT",
            "NODE_FAIL",
            "BOOT_FAIL",
            "PREEMPTED",
            "OUT_OF_MEMORY",
            "REVOKED",
        ] {
            assert!(JobState::parse(s).is_terminal(), "{s}");
        }
        assert!(JobState::Running.is_allocated());
        assert!(!JobState::Pending.is_allocated());
        assert_eq!(JobState::parse("CANCELLED by 0"), JobState::Cancelled);
    }

    #[test]
    fn show_job_multi_line_and_one_line() {
        let jobs = parse_show_job(&fx("scontrol_show_job_all.txt")).unwrap();
        assert!(jobs.len() >= 8, "{}", jobs.len());
        let t = parse_show_job(&fx("scontrol_show_job_timeout.txt")).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].state, JobState::Timeout);
        assert_eq!(t[0].reason, "TimeLimit");
        assert_eq!(t[0].time_limit_ms, Some(60_000));
        assert!(t[0].start.is_some() && t[0].end.is_some());
        let f = parse_show_job(&fx("scontrol_show_job_failed_oneliner.txt")).unwrap();
        assert_eq!(f[0].job, 6);
        assert_eq!(f[0].exit_code, Some((5, 0)));
        assert_eq!(f[0].state, JobState::Failed);
        assert_eq!(f[0].work_dir.as_deref(), Some("/work/main"));
        let h = parse_show_job(&fx("scontrol_show_job_held.txt")).unwrap();
        assert_eq!(
            (h[0].state.clone(), h[0].reason.as_str(), h[0].start),
            (JobState::Pending, "JobHeldUser", None)
        );
        let r = parse_show_job(&fx("scontrol_show_job_reservation.txt")).unwrap();
        assert_eq!(r[0].reservation.as_deref(), Some("koalesce-alpha-1"));
        assert_eq!(r[0].cpus, 4);
    }

    #[test]
    fn show_job_values_with_spaces_and_missing_keys() {
        let out = "JobId=3 JobName=x y JobState=RUNNING Reason=None NumCPUs=2\n   WorkDir=/tmp/a b/c Power=\n";
        let j = parse_show_job(out).unwrap();
        assert_eq!(j[0].name, "x y");
        assert_eq!(j[0].work_dir.as_deref(), Some("/tmp/a b/c"));
        assert!(parse_show_job("JobName=x JobState=RUNNING NumCPUs=1").is_err());
        assert!(parse_show_job("JobId=abc JobState=RUNNING NumCPUs=1").is_err());
    }

    #[test]
    fn reservations_active_and_future() {
        for f in ["scontrol_show_reservation.txt", "scontrol_show_reservation_oneliner.txt"] {
            let r = parse_show_reservation(&fx(f)).unwrap();
            assert!(r.len() >= 2, "{f}: {r:?}");
            let a = r.iter().find(|x| x.name == "koalesce-alpha-1").unwrap();
            assert!(a.active);
            assert_eq!((a.cores, a.node_count, a.partition.as_deref()), (8, 1, Some("debug")));
            assert_eq!(a.duration_ms, Some(300_000));
            assert_eq!(a.users, vec!["root".to_string()]);
            let b = r.iter().find(|x| x.name == "koalesce-alpha-2").unwrap();
            assert!(!b.active);
            assert_eq!((b.cores, b.duration_ms), (20, Some(5_400_000)));
            assert!(b.start.unwrap() > a.start.unwrap());
        }
        assert!(parse_show_reservation("No reservations in the system\n").unwrap().is_empty());
    }

    #[test]
    fn jobcomp_lines() {
        let recs = parse_jobcomp(&fx("jobcomp_alpha.txt"));
        assert_eq!(recs.len(), 5);
        let failed = recs.iter().find(|r| r.job == 6).unwrap();
        assert_eq!((failed.state.clone(), failed.exit_code), (JobState::Failed, Some((5, 0))));
        let cancelled = recs.iter().find(|r| r.job == 7).unwrap();
        assert_eq!((cancelled.state.clone(), cancelled.exit_code), (JobState::Cancelled, Some((0, 0))));
        let to = recs.iter().find(|r| r.job == 5).unwrap();
        assert_eq!(to.state, JobState::Timeout);
        let two = recs.iter().find(|r| r.job == 2).unwrap();
        assert_eq!((two.cpus, two.nodes.as_deref()), (40, Some("a[1-2]")));
        assert!(two.reservation.is_none());
        assert!(parse_jobcomp_line("garbage").is_err());
    }

    #[test]
    fn sbatch_output() {
        assert_eq!(parse_sbatch_parsable(&fx("sbatch_parsable.txt")).unwrap(), (5, None));
        assert_eq!(parse_sbatch_parsable("17;beta\n").unwrap(), (17, Some("beta".into())));
        assert!(parse_sbatch_parsable("").is_err());
        assert!(parse_sbatch_parsable("Submitted batch job x").is_err());
    }

    #[test]
    fn times_and_durations() {
        let t = SlurmTime::parse("2026-11-23T13:40:10").unwrap();
        assert_eq!((t.year, t.month, t.day, t.hour, t.minute, t.second), (2026, 11, 23, 13, 40, 10));
        assert!(SlurmTime::parse("Unknown").is_none());
        assert!(SlurmTime::parse("2026-13-01T00:00:00").is_none());
        let a = SlurmTime::parse("2026-11-23T13:40:10").unwrap().to_unix_ms_local().unwrap();
        let b = SlurmTime::parse("2026-11-23T13:41:11").unwrap().to_unix_ms_local().unwrap();
        assert_eq!(b - a, 61_000);
        assert_eq!(parse_duration_ms("5"), Some(300_000));
        assert_eq!(parse_duration_ms("00:05:00"), Some(300_000));
        assert_eq!(parse_duration_ms("1:30"), Some(90_000));
        assert_eq!(parse_duration_ms("365-00:00:00"), Some(365 * 86_400_000));
        assert_eq!(parse_duration_ms("2-3"), Some((2 * 86_400 + 3 * 3600) * 1000));
        assert_eq!(parse_duration_ms("UNLIMITED"), None);
        assert_eq!(parse_duration_ms("x:y"), None);
        assert_eq!(parse_exit_code("5:0"), Some((5, 0)));
        assert_eq!(parse_exit_code("0:9"), Some((0, 9)));
        assert_eq!(parse_exit_code("nope"), None);
    }
}
