//! Plain-text tables and time formatting for the client commands.
//!
//! Everything that comes from the server (names, users, sites, failures, output) is printed
//! through [`escape`]: a job named with terminal escape codes or newlines cannot repaint the
//! terminal or forge table rows.

use std::fmt::Write as _;

use super::api::{FileInfo, JobDetail, JobSummary, SiteInfo};

/// Text made safe for a terminal: control characters (C0, DEL, C1: escape sequences, newlines,
/// carriage returns, tabs) and bidirectional-override characters are written as visible
/// escapes (`\n`, `\t`, `\r`, `\u{1b}`, …); everything else is kept.
pub fn escape(s: &str) -> String {
    let bidi = |c: char| matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}');
    if !s.chars().any(|c| c.is_control() || bidi(c)) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || bidi(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// A left-aligned text table with a header row; columns are as wide as their widest cell.
/// Columns listed in `right` are right-aligned (numbers).
#[derive(Debug, Clone)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    right: Vec<bool>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Table {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
            right: vec![false; header.len()],
        }
    }

    /// Right-align the named columns.
    pub fn right_align(mut self, cols: &[&str]) -> Self {
        for (i, h) in self.header.iter().enumerate() {
            if cols.contains(&h.as_str()) {
                self.right[i] = true;
            }
        }
        self
    }

    /// Adds a row; every cell is [`escape`]d.
    pub fn push(&mut self, row: Vec<String>) {
        debug_assert_eq!(row.len(), self.header.len());
        self.rows.push(row.iter().map(|c| escape(c)).collect());
    }

    pub fn render(&self) -> String {
        let n = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(n) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let line = |out: &mut String, cells: &[String]| {
            let mut s = String::new();
            for (i, cell) in cells.iter().enumerate().take(n) {
                let pad = widths[i] - cell.chars().count();
                let last = i + 1 == n;
                if self.right[i] {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(cell);
                } else {
                    s.push_str(cell);
                    if !last {
                        s.push_str(&" ".repeat(pad));
                    }
                }
                if !last {
                    s.push_str("  ");
                }
            }
            out.push_str(s.trim_end());
            out.push('\n');
        };
        line(&mut out, &self.header);
        for row in &self.rows {
            line(&mut out, row);
        }
        out
    }
}

/// The broker's predicted and actual TTS/TTD (001 §3.1), for `koalesce status`.
fn broker_lines(b: &koalesce_api::dto::BrokerTimes) -> String {
    let d = |ms: u64| format_duration_ms(ms as i64);
    let actual = |a: Option<u64>, err: Option<i64>| match (a, err) {
        (Some(a), Some(e)) => {
            let sign = if e < 0 { "-" } else { "+" };
            format!("{} ({sign}{})", d(a), format_duration_ms(e.abs()))
        }
        _ => "-".to_string(),
    };
    format!(
        "broker at {} ({}): predicted TTS {} (stage-in {}, {} {}), TTD {} (execution {}, stage-out {})\n  actual TTS {}, TTD {}\n",
        escape(&b.site),
        format_time_of_day_ms(b.made_ms as i64),
        d(b.predicted_tts_ms),
        d(b.stage_in_ms),
        if b.reserved { "reservation starts after" } else { "queue wait" },
        d(b.queue_wait_ms),
        d(b.predicted_ttd_ms),
        d(b.execution_ms),
        d(b.stage_out_ms),
        actual(b.actual_tts_ms, b.tts_error_ms()),
        actual(b.actual_ttd_ms, b.ttd_error_ms()),
    )
}

/// Unix milliseconds as a UTC date and time, `YYYY-MM-DD HH:MM:SS`.
pub fn format_unix_ms(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", rem / 3600, (rem / 60) % 60, rem % 60)
}

/// Unix milliseconds as UTC `HH:MM:SS.mmm` (for timelines, where the date is given once).
pub fn format_time_of_day_ms(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let rem = secs.rem_euclid(86_400);
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        ms.rem_euclid(1000)
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// A duration in milliseconds, compactly: `850ms`, `1.25s`, `2m03s`, `1h02m`.
pub fn format_duration_ms(ms: i64) -> String {
    let neg = ms < 0;
    let a = ms.unsigned_abs();
    let s = if a < 1000 {
        format!("{a}ms")
    } else if a < 60_000 {
        format!("{:.2}s", a as f64 / 1000.0)
    } else if a < 3_600_000 {
        format!("{}m{:02}s", a / 60_000, (a / 1000) % 60)
    } else {
        format!("{}h{:02}m", a / 3_600_000, (a / 60_000) % 60)
    };
    if neg {
        format!("-{s}")
    } else {
        s
    }
}

fn opt_duration(ms: Option<i64>) -> String {
    ms.map(format_duration_ms).unwrap_or_else(|| "-".to_string())
}

fn sites_cell(sites: &[String]) -> String {
    if sites.is_empty() {
        "-".to_string()
    } else {
        sites.join(",")
    }
}

/// The `koalesce jobs` table (squeue-like).
pub fn jobs_table(jobs: &[JobSummary]) -> String {
    let mut t =
        Table::new(&["ID", "NAME", "USER", "STATE", "PRIO", "COMPS", "SIZE", "SITES", "SUBMITTED"]).right_align(&["ID", "COMPS", "SIZE"]);
    for j in jobs {
        t.push(vec![
            j.id.to_string(),
            j.name.clone(),
            j.user.clone(),
            match &j.bag {
                // A bag's row: its state and progress.
                Some(b) => format!(
                    "{} [bag: {}/{} succeeded, {} failed, {} running]",
                    j.state, b.succeeded, b.tasks, b.failed, b.running
                ),
                None => j.state.clone(),
            },
            j.priority.clone(),
            j.components.to_string(),
            j.size.to_string(),
            sites_cell(&j.sites),
            format_unix_ms(j.submitted_ms as i64),
        ]);
    }
    t.render()
}

/// The `koalesce sites` table.
pub fn sites_table(sites: &[SiteInfo]) -> String {
    let mut t = Table::new(&["SITE", "PROCS", "IDLE", "USED", "PLACED", "BLACKLISTED", "RESERVATIONS", "BANNED"])
        .right_align(&["PROCS", "IDLE", "USED", "PLACED"]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    for s in sites {
        t.push(vec![
            s.name.clone(),
            s.processors.to_string(),
            s.idle.to_string(),
            s.used.to_string(),
            s.placed_unclaimed.to_string(),
            match (s.blacklisted, s.blacklisted_until_ms) {
                (false, _) => "no".to_string(),
                (true, None) => "yes".to_string(),
                // When the ban ends by itself (UTC).
                (true, Some(ms)) => format!(
                    "yes, until {}",
                    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
                ),
            },
            if s.supports_reservations { "yes" } else { "no" }.to_string(),
            // GridWay's failure-rate policy: banned for gridway jobs, seconds left.
            match s.banned_until_ms {
                Some(until) => format!("{}s ({} failures)", until.saturating_sub(now).div_ceil(1000), s.failure_streak),
                None => "no".to_string(),
            },
        ]);
    }
    t.render()
}

/// Bytes as a human size (`512 B`, `2.0 MiB`).
pub fn format_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// The `koalesce files ls` table.
pub fn files_table(files: &[FileInfo]) -> String {
    let mut t = Table::new(&["NAME", "SIZE", "SHA256", "REPLICAS"]).right_align(&["SIZE"]);
    for f in files {
        let sha: String = f.sha256.chars().take(12).collect();
        t.push(vec![f.name.clone(), format_bytes(f.size_bytes), sha, sites_cell(&f.replicas)]);
    }
    t.render()
}

/// The last lines of one component's stdout or stderr, as `koalesce status` shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputTail {
    pub component: u64,
    /// "stdout" or "stderr".
    pub stream: &'static str,
    pub text: String,
    /// Lines before the shown ones.
    pub lines_cut: u64,
}

/// Lines of output `koalesce status` shows per stream.
pub const STATUS_TAIL_LINES: usize = 10;

/// The `koalesce status` report: state, timeline with the derived times, tries, components and
/// the last lines of their output (`tails`, read through the API).
pub fn status_report(d: &JobDetail, tails: &[OutputTail]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "job {} '{}' of {}: {}",
        d.id,
        escape(&d.name),
        escape(&d.user),
        escape(&d.state.to_uppercase())
    );
    let _ = writeln!(
        out,
        "priority {}, {} component(s), {} processor(s), sites: {}",
        escape(&d.priority),
        d.components.len(),
        d.size,
        escape(&sites_cell(&d.sites))
    );
    let tl = &d.timeline;
    let ms = |t: Option<u64>| t.map(|t| t as i64);
    let submitted = Some(tl.submitted.max(d.submitted_ms) as i64);
    let _ = writeln!(out, "timeline (UTC):");
    let events = [
        ("submitted", submitted),
        ("placed", ms(tl.placed)),
        ("claimed", ms(tl.claimed)),
        ("started", ms(tl.started.or(d.started_ms))),
        ("finished", ms(tl.finished.or(d.finished_ms))),
    ];
    for (label, at) in events {
        match at {
            Some(t) => {
                let rel = match submitted {
                    Some(s) if label != "submitted" => format!("  (+{})", format_duration_ms(t - s)),
                    _ => String::new(),
                };
                let when = if label == "submitted" {
                    format_unix_ms(t)
                } else {
                    format_time_of_day_ms(t)
                };
                let _ = writeln!(out, "  {label:<10} {when}{rel}");
            }
            None => {
                let _ = writeln!(out, "  {label:<10} -");
            }
        }
    }
    // The FTT is the placement's estimate: unknown before the job was placed.
    let ftt = tl.placed.map(|_| tl.ftt_ms as i64);
    let _ = writeln!(
        out,
        "  FTT {}   PGT {}   PWT {}   TWT {}",
        opt_duration(ftt),
        opt_duration(ms(tl.pgt_ms)),
        opt_duration(ms(tl.pwt_ms)),
        opt_duration(ms(tl.twt_ms))
    );
    if let Some(b) = &d.broker {
        let _ = write!(out, "{}", broker_lines(b));
    }
    let tries = |t: Option<u64>| t.map(|n| n.to_string()).unwrap_or_else(|| "-".to_string());
    let _ = writeln!(
        out,
        "tries: placement {}, claiming {}",
        tries(Some(d.placement_tries)),
        tries(Some(d.claiming_tries))
    );
    if let Some(r) = &d.reason {
        let _ = writeln!(out, "reason: {}", escape(r));
    }
    if let Some(f) = &d.failure {
        let _ = writeln!(out, "failure: {}", escape(f));
    }
    if !d.components.is_empty() {
        let mut t = Table::new(&["COMP", "PROCS", "SITE", "STATE", "EXIT"]).right_align(&["COMP", "PROCS", "EXIT"]);
        for c in &d.components {
            t.push(vec![
                c.index.to_string(),
                c.processors.to_string(),
                c.site.clone().unwrap_or_else(|| "-".into()),
                c.state.clone(),
                c.exit_code.map(|e| e.to_string()).unwrap_or_else(|| "-".into()),
            ]);
        }
        let _ = writeln!(out, "components:");
        for l in t.render().lines() {
            let _ = writeln!(out, "  {l}");
        }
    }
    for t in tails.iter().filter(|t| !t.text.trim().is_empty()) {
        let shown = t.text.trim_end().lines().count();
        let note = if t.lines_cut > 0 {
            format!(
                " (last {shown} of {} lines; all: koalesce logs {} --component {}{})",
                t.lines_cut + shown as u64,
                d.id,
                t.component,
                if t.stream == "stderr" { " --stderr" } else { "" }
            )
        } else {
            String::new()
        };
        let _ = writeln!(out, "component {} {}{note}:", t.component, t.stream);
        for l in t.text.trim_end().lines() {
            let _ = writeln!(out, "  | {}", escape(l));
        }
    }
    if !d.outputs.is_empty() {
        let _ = writeln!(out, "outputs: {}", escape(&d.outputs.join(", ")));
    }
    match (&d.bag, d.array_id, d.task_id) {
        (Some(b), _, _) => {
            let _ = writeln!(out, "bag of {} tasks: {}, {}", b.tasks, escape(&b.state), bag_progress(b));
        }
        (None, Some(array), Some(task)) => {
            let _ = writeln!(out, "task {task} of array {array}");
        }
        _ => {}
    }
    if !d.tasks.is_empty() {
        if d.bag.is_none() {
            let summaries: Vec<JobSummary> = d
                .tasks
                .iter()
                .map(|t| JobSummary {
                    state: t.state.clone(),
                    ..Default::default()
                })
                .collect();
            let _ = writeln!(out, "array of {} tasks: {}", d.tasks.len(), state_counts(&summaries));
        }
        let mut t = Table::new(&["TASK", "JOB", "STATE"]).right_align(&["TASK", "JOB"]);
        for task in &d.tasks {
            t.push(vec![task.task_id.to_string(), task.id.to_string(), task.state.clone()]);
        }
        for l in t.render().lines() {
            let _ = writeln!(out, "  {l}");
        }
    }
    out
}

/// The `koalesce token list` table; `now_ms` marks expired tokens.
pub fn tokens_table(tokens: &[koalesce_server::store::TokenInfo], now_ms: u64) -> String {
    let mut t = Table::new(&["ID", "USER", "ADMIN", "CREATED", "EXPIRES"]);
    for k in tokens {
        let expires = match k.expires_ms {
            None => "never".to_string(),
            Some(e) if e <= now_ms => format!("{} (expired)", format_unix_ms(e as i64)),
            Some(e) => format_unix_ms(e as i64),
        };
        t.push(vec![
            k.id.clone(),
            k.user.clone(),
            if k.admin { "yes" } else { "no" }.to_string(),
            format_unix_ms(k.created_ms as i64),
            expires,
        ]);
    }
    t.render()
}

/// Counts of jobs by state, in lifecycle order, e.g. `queued 3, running 2, succeeded 10`.
/// A bag's progress as the core words it: "3 succeeded, 1 failed, 2 running (of 6; 6 needed)".
pub fn bag_progress(b: &koalesce_api::dto::BagStatus) -> String {
    let n = |v: u64| v.min(u64::from(u32::MAX)) as u32;
    koalesce_core::bag::BagProgress {
        tasks: n(b.tasks),
        needed: n(b.needed),
        waiting: n(b.waiting),
        running: n(b.running),
        succeeded: n(b.succeeded),
        failed: n(b.failed),
        cancelled: n(b.cancelled),
    }
    .describe()
}

pub fn state_counts(jobs: &[JobSummary]) -> String {
    const ORDER: &[&str] = &koalesce_core::JobState::NAMES;
    let mut parts = Vec::new();
    for s in ORDER {
        let n = jobs.iter().filter(|j| j.state == *s).count();
        if n > 0 {
            parts.push(format!("{s} {n}"));
        }
    }
    let other = jobs.iter().filter(|j| !ORDER.contains(&j.state.as_str())).count();
    if other > 0 {
        parts.push(format!("other {other}"));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u64, state: &str) -> JobSummary {
        JobSummary {
            id,
            name: format!("job-{id}"),
            user: "alice".into(),
            state: state.into(),
            priority: "high".into(),
            components: 2,
            size: 12,
            sites: vec!["vu".into(), "leiden".into()],
            submitted_ms: 1_700_000_000_000,
            ..Default::default()
        }
    }

    #[test]
    fn unix_ms_formats_as_utc() {
        assert_eq!(format_unix_ms(0), "1970-01-01 00:00:00");
        assert_eq!(format_unix_ms(1_700_000_000_000), "2023-11-14 22:13:20");
        assert_eq!(format_unix_ms(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(format_time_of_day_ms(1_700_000_000_123), "22:13:20.123");
    }

    #[test]
    fn durations_are_compact() {
        assert_eq!(format_duration_ms(850), "850ms");
        assert_eq!(format_duration_ms(1250), "1.25s");
        assert_eq!(format_duration_ms(123_000), "2m03s");
        assert_eq!(format_duration_ms(3_720_000), "1h02m");
        assert_eq!(format_duration_ms(-5), "-5ms");
    }

    #[test]
    fn jobs_table_has_squeue_columns_aligned() {
        let s = jobs_table(&[job(7, "running"), job(123, "queued")]);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with(" ID  NAME"), "{s}");
        for col in ["USER", "STATE", "PRIO", "COMPS", "SIZE", "SITES", "SUBMITTED"] {
            assert!(lines[0].contains(col), "missing {col}: {s}");
        }
        assert!(lines[1].starts_with("  7  job-7"), "{s}");
        assert!(lines[2].starts_with("123  job-123"), "{s}");
        assert!(lines[1].contains("vu,leiden"));
        assert!(lines[1].ends_with("2023-11-14 22:13:20"));
        // The STATE column starts at the same offset on every line.
        let at = lines[0].find("STATE").unwrap();
        assert_eq!(&lines[1][at..at + 7], "running");
        assert_eq!(&lines[2][at..at + 6], "queued");
    }

    #[test]
    fn sites_table_shows_processor_counts() {
        let s = sites_table(&[SiteInfo {
            name: "vu".into(),
            processors: 144,
            idle: 100,
            used: 40,
            placed_unclaimed: 4,
            blacklisted: false,
            supports_reservations: true,
            ..Default::default()
        }]);
        assert!(s.lines().next().unwrap().contains("PLACED"));
        assert!(s.lines().nth(1).unwrap().ends_with("no"), "{s}");
        let banned = sites_table(&[SiteInfo {
            name: "uva".into(),
            banned_until_ms: Some(u64::MAX),
            failure_streak: 2,
            ..Default::default()
        }]);
        assert!(banned.contains("(2 failures)"), "{banned}");
        assert!(s.contains("vu      144   100    40       4  no           yes"), "{s}");
    }

    #[test]
    fn status_report_has_timeline_and_derived_times() {
        let d = JobDetail {
            id: 5,
            name: "poisson".into(),
            user: "bob".into(),
            state: "succeeded".into(),
            priority: "low".into(),
            size: 4,
            timeline: koalesce_api::dto::Timeline {
                submitted: 1_000_000,
                placed: Some(1_000_500),
                claimed: Some(1_001_000),
                started: Some(1_002_000),
                finished: Some(1_005_000),
                ftt_ms: 1500,
                pgt_ms: Some(500),
                pwt_ms: Some(1000),
                twt_ms: Some(2000),
            },
            placement_tries: 1,
            claiming_tries: 2,
            ..Default::default()
        };
        let s = status_report(&d, &[]);
        assert!(s.contains("SUCCEEDED"));
        assert!(s.contains("placed     00:16:40.500  (+500ms)"), "{s}");
        assert!(s.contains("FTT 1.50s   PGT 500ms   PWT 1.00s   TWT 2.00s"), "{s}");
        assert!(s.contains("tries: placement 1, claiming 2"));
        let queued = JobDetail {
            state: "queued".into(),
            timeline: koalesce_api::dto::Timeline {
                submitted: 1_000_000,
                ..Default::default()
            },
            ..d.clone()
        };
        let s = status_report(&queued, &[]);
        assert!(s.contains("FTT -   PGT -"), "a queued job's FTT is not known yet: {s}");
        let tail = OutputTail {
            component: 0,
            stream: "stderr",
            text: "l16\nl17\n".into(),
            lines_cut: 15,
        };
        let s = status_report(&d, &[tail]);
        assert!(
            s.contains("component 0 stderr (last 2 of 17 lines; all: koalesce logs 5 --component 0 --stderr):\n  | l16\n  | l17\n"),
            "{s}"
        );
        assert!(!s.contains("broker"), "{s}");
    }

    #[test]
    fn status_report_shows_the_brokers_prediction_beside_the_actual_times() {
        let d = JobDetail {
            id: 6,
            state: "succeeded".into(),
            broker: Some(koalesce_api::dto::BrokerTimes {
                site: "vu".into(),
                made_ms: 1_000_000,
                stage_in_ms: 2_000,
                queue_wait_ms: 1_000,
                execution_ms: 10_000,
                stage_out_ms: 500,
                reserved: false,
                predicted_tts_ms: 3_000,
                predicted_ttd_ms: 13_500,
                actual_tts_ms: Some(2_500),
                actual_ttd_ms: Some(14_000),
            }),
            ..Default::default()
        };
        let s = status_report(&d, &[]);
        assert!(s.contains("broker at vu (00:16:40.000): predicted TTS 3.00s (stage-in 2.00s, queue wait 1.00s), TTD 13.50s (execution 10.00s, stage-out 500ms)"), "{s}");
        assert!(s.contains("actual TTS 2.50s (-500ms), TTD 14.00s (+500ms)"), "{s}");
    }

    #[test]
    fn state_counts_in_lifecycle_order() {
        let jobs = vec![job(1, "succeeded"), job(2, "queued"), job(3, "succeeded")];
        assert_eq!(state_counts(&jobs), "queued 1, succeeded 2");
    }

    #[test]
    fn names_with_escape_codes_and_newlines_are_escaped_in_every_table() {
        let evil = "x\u{1b}[2J\u{1b}]0;pwned\u{7}\nID  NAME  forged\r\t\u{202e}";
        let mut j = job(1, "running");
        j.name = evil.into();
        j.user = "bob\nmallory".into();
        j.sites = vec!["s\u{1b}[31m".into()];
        let jobs = jobs_table(&[j.clone()]);
        let sites = sites_table(&[SiteInfo {
            name: evil.into(),
            ..Default::default()
        }]);
        let files = files_table(&[FileInfo {
            name: evil.into(),
            replicas: vec![evil.into()],
            ..Default::default()
        }]);
        let detail = JobDetail {
            id: 1,
            name: evil.into(),
            user: "bob\nmallory".into(),
            state: "failed".into(),
            failure: Some(evil.into()),
            sites: vec![evil.into()],
            components: vec![koalesce_api::dto::ComponentDetail {
                site: Some(evil.into()),
                state: evil.into(),
                stdout: Some(format!("{evil}\nsecond")),
                ..Default::default()
            }],
            ..Default::default()
        };
        let tail = OutputTail {
            component: 0,
            stream: "stdout",
            text: format!("{evil}\nsecond"),
            lines_cut: 0,
        };
        let status = status_report(&detail, &[tail]);
        for (what, text, rows) in [("jobs", &jobs, 2), ("sites", &sites, 2), ("files", &files, 2)] {
            assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{what}: {text:?}");
            assert_eq!(text.lines().count(), rows, "{what}: a name forged a row: {text}");
            assert!(text.contains("\\u{1b}[2J") && text.contains("\\n"), "{what}: {text}");
        }
        assert!(jobs.contains("bob\\nmallory") && jobs.contains("s\\u{1b}[31m"), "{jobs}");
        assert!(
            !status.chars().any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
            "{status:?}"
        );
        assert!(status.contains("of bob\\nmallory:") && status.contains("\\u{202e}"), "{status}");
        assert!(status.lines().all(|l| !l.starts_with("ID  NAME")), "{status}");
        assert_eq!(escape("plain name-1.txt"), "plain name-1.txt");
    }

    #[test]
    fn bytes_are_human() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(2 * 1024 * 1024), "2.0 MiB");
    }
}
