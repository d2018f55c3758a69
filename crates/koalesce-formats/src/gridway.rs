//! GridWay 5 job templates (`KEYWORD = value` lines, `#` comments; GridWay 5 user guide,
//! "Job Template options", and GridWay's own template lexer).
//!
//! Every keyword of GridWay's template is known; each either maps onto the native
//! description, is accepted because koalesce already behaves that way (documented in
//! docs/job-formats.md), or is refused with its line. Variables `${JOB_ID}`, `${ARCH}` become
//! runtime references the runner expands (`${KOALESCE_JOB_ID}`, `${KOALESCE_ARCH}`);
//! `${TASK_ID}`, `${TOTAL_TASKS}`, `${ARRAY_ID}`, `${PARAM}`, `${MAX_PARAM}` are substituted per
//! task: for a bag of N tasks (`koalesce submit --tasks N`, GridWay's `gwsubmit -n N` array)
//! the one description keeps them as `${KOALESCE_TASK_ID}`-style references that the server
//! replaces in each task's copy ([`TaskContext::bag`]); `koalesce convert --task K` shows one
//! task with its numbers. Other `${NAME}`s take the value of the template's ENVIRONMENT variable NAME, or stay as written.

use std::collections::BTreeMap;

use koalesce_api::fields::{format_seconds, InputFile, OutputFile};
use koalesce_api::JobDescription;
use koalesce_core::expr::Expr;

use crate::common::push_input;
use crate::common::{
    default_name, job_type_components, locate, relative_name, shell_double_quote, split_words, staged, FormatError, Location,
};
use crate::Format;

const FMT: Format = Format::GridWay;

/// Every keyword GridWay's template parser knows, plus 004's DATA_CATALOG(_TYPE).
pub const KEYWORDS: [&str; 30] = [
    "NAME",
    "EXECUTABLE",
    "ARGUMENTS",
    "ENVIRONMENT",
    "TYPE",
    "NP",
    "INPUT_FILES",
    "OUTPUT_FILES",
    "RESTART_FILES",
    "STDIN_FILE",
    "STDOUT_FILE",
    "STDERR_FILE",
    "CHECKPOINT_INTERVAL",
    "CHECKPOINT_URL",
    "REQUIREMENTS",
    "RANK",
    "RESCHEDULING_INTERVAL",
    "RESCHEDULING_THRESHOLD",
    "DEADLINE",
    "SUSPENSION_TIMEOUT",
    "CPULOAD_THRESHOLD",
    "MONITOR",
    "RESCHEDULE_ON_FAILURE",
    "NUMBER_OF_RETRIES",
    "WRAPPER",
    "PRE_WRAPPER",
    "PRE_WRAPPER_ARGUMENTS",
    "JOB_DEPENDENCIES",
    "DATA_CATALOG",
    "DATA_CATALOG_TYPE",
];

/// One task of a GridWay array (`koalesce submit --tasks N`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskContext {
    /// 0-based task index (`${TASK_ID}`).
    pub task_id: u32,
    /// Tasks in the array (`${TOTAL_TASKS}`).
    pub total_tasks: u32,
    /// The array's id: the job id of task 0, known once task 0 is submitted (task 0 itself
    /// refers to its own id at run time).
    pub array_id: Option<u64>,
    /// `${PARAM}` = start + increment × TASK_ID (gwsubmit -s / -i).
    pub param_start: i64,
    pub param_increment: i64,
    /// One description for the whole bag (`koalesce submit --tasks N`): the task's values are
    /// left as the runtime references the server substitutes per task (`${KOALESCE_TASK_ID}`,
    /// `${KOALESCE_ARRAY_TASK_COUNT}`, `${KOALESCE_ARRAY_JOB_ID}`, `${KOALESCE_PARAM}`,
    /// `${KOALESCE_MAX_PARAM}`) instead of this task's numbers.
    pub deferred: bool,
}

impl TaskContext {
    pub fn new(task_id: u32, total_tasks: u32) -> Self {
        TaskContext {
            task_id,
            total_tasks,
            array_id: None,
            param_start: 0,
            param_increment: 1,
            deferred: false,
        }
    }

    /// The whole bag of `total_tasks` tasks in one description (see [`TaskContext::deferred`]).
    pub fn bag(total_tasks: u32) -> Self {
        TaskContext {
            deferred: true,
            ..TaskContext::new(0, total_tasks)
        }
    }

    /// The text `${TASK_ID}`, `${TOTAL_TASKS}`, `${ARRAY_ID}`, `${PARAM}` or `${MAX_PARAM}`
    /// becomes in a bag's description (`None` for other names or a single task).
    fn deferred_reference(&self, name: &str) -> Option<&'static str> {
        if !self.deferred {
            return None;
        }
        Some(match name {
            "TASK_ID" | "GW_TASK_ID" => "${KOALESCE_TASK_ID}",
            "TOTAL_TASKS" | "GW_TOTAL_TASKS" => "${KOALESCE_ARRAY_TASK_COUNT}",
            "ARRAY_ID" => "${KOALESCE_ARRAY_JOB_ID}",
            "PARAM" => "${KOALESCE_PARAM}",
            "MAX_PARAM" => "${KOALESCE_MAX_PARAM}",
            _ => return None,
        })
    }
}

/// Whether the text looks like a job template: its first meaningful line is
/// `KEYWORD = ...` with one of GridWay's (upper-case) keywords.
pub fn looks_like_template(text: &str) -> bool {
    for line in text.lines() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let key: String = t.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        let rest = t[key.len()..].trim_start();
        return rest.starts_with('=') && KEYWORDS.contains(&key.as_str());
    }
    false
}

struct Entry {
    value: String,
    line: usize,
    col: usize,
}

/// Splits the template into entries: the last occurrence of a keyword wins (as in GridWay).
fn entries(text: &str) -> Result<BTreeMap<&'static str, Entry>, FormatError> {
    let mut out = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let t = raw.trim_start();
        if t.trim().is_empty() || t.starts_with('#') {
            continue;
        }
        let indent = raw.chars().count() - t.chars().count();
        let key: String = t.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if key.is_empty() {
            return Err(FormatError::at(FMT, line, Some(indent + 1), "expected KEYWORD = value"));
        }
        let Some(&kw) = KEYWORDS.iter().find(|k| k.eq_ignore_ascii_case(&key)) else {
            return Err(FormatError::at(
                FMT,
                line,
                Some(indent + 1),
                format!("unknown keyword {key} (GridWay's keywords: {})", KEYWORDS.join(", ")),
            ));
        };
        let after = &t[key.len()..];
        let rest = after.trim_start();
        if !rest.starts_with('=') {
            return Err(FormatError::at(
                FMT,
                line,
                Some(indent + key.chars().count() + 1),
                format!("expected '=' after {kw}"),
            ));
        }
        let value_raw = &rest[1..];
        let lead = value_raw.chars().take_while(|c| c.is_whitespace()).count();
        let col = indent + key.chars().count() + (after.chars().count() - rest.chars().count()) + 1 + lead + 1;
        let value = strip_comment(value_raw.trim());
        out.insert(kw, Entry { value, line, col });
    }
    Ok(out)
}

/// Removes a trailing `# comment` (a `#` at the start or after a blank, outside double
/// quotes) and unquotes a value that is one double-quoted string.
fn strip_comment(v: &str) -> String {
    let mut in_q = false;
    let mut prev_blank = true;
    let mut end = v.len();
    for (i, c) in v.char_indices() {
        match c {
            '"' => in_q = !in_q,
            '#' if !in_q && prev_blank => {
                end = i;
                break;
            }
            _ => {}
        }
        prev_blank = c.is_whitespace();
    }
    let v = v[..end].trim();
    if v.len() >= 2 && v.starts_with('"') && v.ends_with('"') && !v[1..v.len() - 1].contains('"') {
        v[1..v.len() - 1].to_string()
    } else {
        v.to_string()
    }
}

/// `VAR value, VAR2=value2, VAR3 = "a b"` → pairs.
fn parse_environment(v: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for item in split_commas(v) {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let name: String = item.chars().take_while(|c| !c.is_whitespace() && *c != '=').collect();
        let mut rest = item[name.len()..].trim_start();
        if let Some(r) = rest.strip_prefix('=') {
            rest = r.trim_start();
        }
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("ENVIRONMENT: '{item}' is not NAME=value"));
        }
        let value = if rest.len() >= 2 && rest.starts_with('"') && rest.ends_with('"') {
            rest[1..rest.len() - 1].to_string()
        } else {
            rest.to_string()
        };
        out.push((name, value));
    }
    Ok(out)
}

/// Splits on commas outside double quotes.
fn split_commas(v: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut in_q = false;
    let mut start = 0;
    for (i, c) in v.char_indices() {
        match c {
            '"' => in_q = !in_q,
            ',' if !in_q => {
                parts.push(&v[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&v[start..]);
    parts
}

struct Subst<'a> {
    task: Option<&'a TaskContext>,
    env: &'a BTreeMap<String, String>,
}

impl Subst<'_> {
    fn apply(&self, v: &str) -> Result<String, String> {
        let mut out = String::new();
        let mut rest = v;
        while let Some(start) = rest.find("${") {
            let Some(len) = rest[start + 2..].find('}') else { break };
            let name = &rest[start + 2..start + 2 + len];
            out.push_str(&rest[..start]);
            let t = self.task;
            let deferred = t.and_then(|t| t.deferred_reference(name));
            let value = match name {
                _ if deferred.is_some() => deferred.unwrap_or_default().to_string(),
                "JOB_ID" => "${KOALESCE_JOB_ID}".to_string(),
                "ARCH" => "${KOALESCE_ARCH}".to_string(),
                // GridWay's gw_job_init sets task_id = 0 and total_tasks = 0 and only an
                // array sets them otherwise; its template variable parser prints them as
                // they are (gw_job_template_var_parser.l), so a single job sees 0 and 0.
                "TASK_ID" => t.map_or(0, |t| t.task_id as i64).to_string(),
                "TOTAL_TASKS" => t.map_or(0, |t| t.total_tasks as i64).to_string(),
                // The wrapper's environment variables, which GridWay's own default template
                // uses in file names (`INPUT_FILES = param.${GW_TASK_ID} param`): an array
                // task's values are known here. (A single job has no GW_TASK_ID; the name is
                // left for the job's shell, as GridWay leaves it.)
                "GW_TASK_ID" if t.is_some() => t.map_or(0, |t| t.task_id as i64).to_string(),
                "GW_TOTAL_TASKS" if t.is_some() => t.map_or(0, |t| t.total_tasks as i64).to_string(),
                "GW_JOB_ID" => "${KOALESCE_JOB_ID}".to_string(),
                "PARAM" => t
                    .map_or(0, |t| {
                        t.param_start.saturating_add(t.param_increment.saturating_mul(t.task_id as i64))
                    })
                    .to_string(),
                "MAX_PARAM" => t
                    .map_or(0, |t| {
                        t.param_start
                            .saturating_add(t.param_increment.saturating_mul(t.total_tasks as i64 - 1))
                    })
                    .to_string(),
                "ARRAY_ID" => match t {
                    None => "-1".to_string(),
                    Some(t) if t.task_id == 0 => "${KOALESCE_JOB_ID}".to_string(),
                    Some(t) => match t.array_id {
                        Some(a) => a.to_string(),
                        None => {
                            return Err(format!(
                                "${{ARRAY_ID}} of task {} is the job id of task 0, known only when the array is submitted",
                                t.task_id
                            ))
                        }
                    },
                },
                other => match self.env.get(other) {
                    Some(e) => e.clone(),
                    None => format!("${{{other}}}"),
                },
            };
            out.push_str(&value);
            rest = &rest[start + 3 + len..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

fn int(e: &Entry, kw: &str) -> Result<i64, FormatError> {
    e.value
        .trim()
        .parse::<i64>()
        .ok()
        .filter(|v| *v >= 0)
        .ok_or_else(|| FormatError::at(FMT, e.line, Some(e.col), format!("{kw}: '{}' is not a whole number", e.value)))
}

/// GridWay's DEADLINE: `[[D:]H:]M` → seconds (`None`: not of that form, or too far off
/// to count in seconds).
fn deadline_seconds(v: &str) -> Option<u64> {
    let parts: Vec<u64> = v.split(':').map(|p| p.trim().parse().ok()).collect::<Option<_>>()?;
    let (d, h, m) = match parts.as_slice() {
        [m] => (0, 0, *m),
        [h, m] => (0, *h, *m),
        [d, h, m] => (*d, *h, *m),
        _ => return None,
    };
    d.checked_mul(86_400)?
        .checked_add(h.checked_mul(3600)?)?
        .checked_add(m.checked_mul(60)?)
}

/// Converts a template; `task` is the array task (None: a single job).
pub fn convert(text: &str, name_hint: Option<&str>, task: Option<&TaskContext>) -> Result<JobDescription, FormatError> {
    let entries = entries(text)?;
    let err = |e: &Entry, m: String| FormatError::at(FMT, e.line, Some(e.col), m);
    let empty = |k: &str| entries.get(k).is_none_or(|e| e.value.trim().is_empty());

    // ENVIRONMENT first: its variables can be used in the other values.
    let mut raw_env = BTreeMap::new();
    if let Some(e) = entries.get("ENVIRONMENT") {
        for (k, v) in parse_environment(&e.value).map_err(|m| err(e, m))? {
            raw_env.insert(k, v);
        }
    }
    let subst = Subst { task, env: &raw_env };
    let value = |k: &str| -> Result<Option<(String, &Entry)>, FormatError> {
        match entries.get(k) {
            None => Ok(None),
            Some(e) => Ok(Some((subst.apply(&e.value).map_err(|m| err(e, format!("{k}: {m}")))?, e))),
        }
    };

    // Keywords koalesce cannot honour: refused unless empty (or at the value that means off).
    for kw in ["RESTART_FILES", "CHECKPOINT_URL", "MONITOR", "PRE_WRAPPER"] {
        if let Some(e) = entries.get(kw).filter(|e| !e.value.trim().is_empty()) {
            let why = match kw {
                "RESTART_FILES" | "CHECKPOINT_URL" => "koalesce does not checkpoint jobs (a restarted job starts afresh)",
                "MONITOR" => "koalesce runs no per-job monitor program",
                _ => "koalesce runs no pre-wrapper on the front end",
            };
            return Err(err(e, format!("{kw} cannot be honoured: {why}")));
        }
    }
    // JOB_DEPENDENCIES (gwsubmit -d): job ids, blank- or comma-separated; the job starts once
    // all of them finished successfully (koalesce's `afterok`).
    let mut afterok = Vec::new();
    if let Some((v, e)) = value("JOB_DEPENDENCIES")? {
        for id in v.split(|c: char| c.is_whitespace() || c == ',').filter(|w| !w.is_empty()) {
            match id.parse::<u64>() {
                Ok(n) if n > 0 => afterok.push(n),
                _ => return Err(err(e, format!("JOB_DEPENDENCIES: '{id}' is not a job id"))),
            }
        }
    }
    if let Some(e) = entries.get("RESCHEDULING_INTERVAL") {
        if int(e, "RESCHEDULING_INTERVAL")? != 0 {
            return Err(err(
                e,
                "RESCHEDULING_INTERVAL cannot be honoured: koalesce does not migrate running jobs to better sites (use 0)".into(),
            ));
        }
    }
    for kw in ["RESCHEDULING_THRESHOLD", "SUSPENSION_TIMEOUT", "CHECKPOINT_INTERVAL"] {
        if let Some(e) = entries.get(kw).filter(|e| !e.value.trim().is_empty()) {
            int(e, kw)?;
        }
    }
    if let Some(e) = entries.get("CPULOAD_THRESHOLD").filter(|e| !e.value.trim().is_empty()) {
        if int(e, "CPULOAD_THRESHOLD")? > 100 {
            return Err(err(e, "CPULOAD_THRESHOLD is a percentage (0-100)".into()));
        }
    }
    if let Some(e) = entries.get("WRAPPER").filter(|e| !e.value.trim().is_empty()) {
        if !e.value.trim().ends_with("gw_wrapper.sh") {
            return Err(err(
                e,
                format!(
                    "WRAPPER '{}' cannot be honoured: koalesce starts the program under its own supervisor",
                    e.value
                ),
            ));
        }
    }
    if let Some(e) = entries.get("DATA_CATALOG_TYPE").filter(|e| !e.value.trim().is_empty()) {
        if !e.value.trim().eq_ignore_ascii_case("koalesce") && !e.value.trim().eq_ignore_ascii_case("dli") {
            return Err(err(
                e,
                format!("DATA_CATALOG_TYPE '{}': koalesce queries its own replica catalogue", e.value),
            ));
        }
    }

    let name = match value("NAME")? {
        Some((n, _)) if !n.trim().is_empty() => n.trim().to_string(),
        _ => default_name(name_hint, "gridway-job"),
    };
    let name = match task {
        Some(t) if t.deferred => format!("{name}-${{KOALESCE_TASK_ID}}"),
        Some(t) => format!("{name}-{}", t.task_id),
        None => name,
    };

    let mut inputs: Vec<InputFile> = Vec::new();
    let mut outputs: Vec<OutputFile> = Vec::new();

    let Some((exe, exe_e)) = value("EXECUTABLE")?.filter(|(v, _)| !v.trim().is_empty()) else {
        return Err(FormatError::general(FMT, "EXECUTABLE is required"));
    };
    let executable = match locate(&exe).map_err(|m| err(exe_e, format!("EXECUTABLE: {m}")))? {
        Location::Absolute(p) => p,
        Location::Catalogue(logical) => {
            if logical.contains("${") {
                return Err(err(
                    exe_e,
                    format!("EXECUTABLE '{logical}': a staged program's name must be known at submission"),
                ));
            }
            let f = staged(&logical, None, true);
            let local = f.local_name().to_string();
            inputs.push(f);
            format!("./{local}")
        }
    };

    let mut arguments = Vec::new();
    let mut shell = false;
    if let Some((a, e)) = value("ARGUMENTS")? {
        let (words, needs_shell) = split_words(&a).map_err(|m| err(e, format!("ARGUMENTS: {m}")))?;
        arguments = words;
        shell = needs_shell;
    }

    let mut environment = BTreeMap::new();
    if let Some(t) = task {
        let value = |name: &str, n: u32| t.deferred_reference(name).map_or_else(|| n.to_string(), str::to_string);
        environment.insert("GW_TASK_ID".to_string(), value("TASK_ID", t.task_id));
        environment.insert("GW_TOTAL_TASKS".to_string(), value("TOTAL_TASKS", t.total_tasks));
    }
    environment.insert("GW_JOB_ID".to_string(), "${KOALESCE_JOB_ID}".to_string());
    if let Some(e) = entries.get("ENVIRONMENT") {
        for (k, v) in parse_environment(&e.value).map_err(|m| err(e, m))? {
            let v = subst.apply(&v).map_err(|m| err(e, format!("ENVIRONMENT: {m}")))?;
            if v.contains('`') || split_words(&v).map(|(_, s)| s).unwrap_or(false) {
                shell = true;
            }
            environment.insert(k, v);
        }
    }
    if shell {
        // GridWay's wrapper runs the program from a bash script that sources the environment
        // (expanding `…` and $VARS); a shell does the same here.
        let mut script = String::new();
        if let Some(e) = entries.get("ENVIRONMENT") {
            for (k, _) in parse_environment(&e.value).map_err(|m| err(e, m))? {
                if let Some(v) = environment.remove(&k) {
                    script.push_str(&format!("export {k}={}; ", shell_double_quote(&v)));
                }
            }
        }
        let raw_args = value("ARGUMENTS")?.map(|(a, _)| a).unwrap_or_default();
        script.push_str(&format!("exec {} {raw_args}", shell_double_quote(&executable)));
        arguments = vec!["-c".to_string(), script.trim_end().to_string()];
    }
    let executable = if shell { "/bin/sh".to_string() } else { executable };

    let np = match entries.get("NP").filter(|e| !e.value.trim().is_empty()) {
        Some(e) => {
            let n = int(e, "NP")?;
            if n == 0 || n > u32::MAX as i64 {
                return Err(err(e, format!("NP: {n} processors is not a valid count")));
            }
            n as u32
        }
        None => 1,
    };
    let kind = match value("TYPE")? {
        Some((t, e)) if !t.trim().is_empty() => match t.trim().to_ascii_lowercase().as_str() {
            "single" => "single",
            "multiple" => "multiple",
            "mpi" => "mpi",
            other => return Err(err(e, format!("TYPE '{other}': expected single, multiple or mpi"))),
        },
        _ => "single",
    };
    let (components, runner, policy) = job_type_components(kind, np).expect("checked job type").map_err(|m| {
        let e = entries.get("NP").expect("more than one process comes from NP");
        err(e, format!("NP: {m}"))
    })?;

    if let Some((v, e)) = value("INPUT_FILES")? {
        for item in split_commas(&v) {
            let words: Vec<&str> = item.split_whitespace().collect();
            let (src, dst) = match words.as_slice() {
                [] => continue,
                [s] => (*s, None),
                [s, d] => (*s, Some(*d)),
                _ => return Err(err(e, format!("INPUT_FILES: '{}' is not 'source [destination]'", item.trim()))),
            };
            let dst = dst
                .map(|d| relative_name("INPUT_FILES destination", d))
                .transpose()
                .map_err(|m| err(e, m))?;
            match locate(src).map_err(|m| err(e, format!("INPUT_FILES: {m}")))? {
                Location::Catalogue(l) => push_input(&mut inputs, staged(&l, dst.as_deref(), false)),
                Location::Absolute(p) => {
                    return Err(err(
                        e,
                        format!(
                        "INPUT_FILES: '{p}' is an absolute path; koalesce stages inputs from its replica catalogue (koalesce files add)"
                    ),
                    ))
                }
            }
        }
    }

    let mut stdin = None;
    if let Some((v, e)) = value("STDIN_FILE")?.filter(|(v, _)| !v.trim().is_empty() && v.trim() != "/dev/null") {
        match locate(&v).map_err(|m| err(e, format!("STDIN_FILE: {m}")))? {
            Location::Catalogue(l) => {
                let f = staged(&l, None, false);
                stdin = Some(f.local_name().to_string());
                push_input(&mut inputs, f);
            }
            Location::Absolute(p) => {
                return Err(err(
                    e,
                    format!("STDIN_FILE: '{p}' is an absolute path; name a file in the replica catalogue"),
                ))
            }
        }
    }

    // Outputs: "remote [destination]"; a destination becomes the logical name it is
    // registered under.
    let output_target = |d: &str, e: &Entry, what: &str| -> Result<Option<String>, FormatError> {
        match locate(d).map_err(|m| err(e, format!("{what}: {m}")))? {
            Location::Catalogue(l) => Ok(Some(l)),
            Location::Absolute(p) => Err(err(
                e,
                format!("{what}: '{p}' is an absolute path; koalesce registers outputs in its replica catalogue under a logical name"),
            )),
        }
    };
    if let Some((v, e)) = value("OUTPUT_FILES")? {
        for item in split_commas(&v) {
            let words: Vec<&str> = item.split_whitespace().collect();
            let (src, dst) = match words.as_slice() {
                [] => continue,
                [s] => (*s, None),
                [s, d] => (*s, Some(*d)),
                _ => return Err(err(e, format!("OUTPUT_FILES: '{}' is not 'file [destination]'", item.trim()))),
            };
            let file = relative_name("OUTPUT_FILES", src).map_err(|m| err(e, m))?;
            let to = match dst {
                Some(d) => output_target(d, e, "OUTPUT_FILES")?,
                None => None,
            };
            outputs.push(OutputFile { file, to });
        }
    }
    let mut stream = |kw: &str| -> Result<Option<String>, FormatError> {
        let Some((v, e)) = value(kw)?.filter(|(v, _)| !v.trim().is_empty() && v.trim() != "/dev/null") else {
            return Ok(None);
        };
        // The stream is written in the job's directory and copied back like an output.
        let to = output_target(&v, e, kw)?;
        let local = to.as_deref().unwrap_or(&v).rsplit('/').next().unwrap_or_default().to_string();
        let local = relative_name(kw, &local).map_err(|m| err(e, m))?;
        if !outputs.iter().any(|o| o.file == local) {
            outputs.push(OutputFile {
                file: local.clone(),
                to: to.filter(|t| *t != local),
            });
        }
        Ok(Some(local))
    };
    let stdout = stream("STDOUT_FILE")?;
    let stderr = stream("STDERR_FILE")?;

    let check_expr = |kw: &str| -> Result<Option<String>, FormatError> {
        let Some((v, e)) = value(kw)? else { return Ok(None) };
        let v = v.trim().to_string();
        if v.is_empty() || v == ";" {
            return Ok(None);
        }
        Expr::compile(&v).map_err(|x| FormatError::at(FMT, e.line, Some(e.col + x.column - 1), format!("{kw}: {}", x.message)))?;
        Ok(Some(v))
    };
    let requirements = check_expr("REQUIREMENTS")?;
    let rank = check_expr("RANK")?;

    let deadline = match entries.get("DEADLINE").filter(|e| !e.value.trim().is_empty()) {
        Some(e) => match deadline_seconds(&e.value) {
            Some(0) => None,
            Some(s) => Some(format_seconds(s)),
            None => {
                return Err(err(
                    e,
                    format!(
                        "DEADLINE '{}': expected [[D:]H:]M (whole numbers, at most 2^64 seconds in all)",
                        e.value
                    ),
                ))
            }
        },
        None => None,
    };
    let reschedule = match entries.get("RESCHEDULE_ON_FAILURE").filter(|e| !e.value.trim().is_empty()) {
        Some(e) => match e.value.trim().to_ascii_lowercase().as_str() {
            "yes" => Some(true),
            "no" => Some(false),
            _ => return Err(err(e, format!("RESCHEDULE_ON_FAILURE '{}': expected yes or no", e.value))),
        },
        None => None,
    };
    let retries_given = match entries.get("NUMBER_OF_RETRIES").filter(|e| !e.value.trim().is_empty()) {
        Some(e) => Some(u32::try_from(int(e, "NUMBER_OF_RETRIES")?).map_err(|_| err(e, "NUMBER_OF_RETRIES is too large".into()))?),
        None => None,
    };
    let retries = match (reschedule, retries_given) {
        (Some(false), _) => Some(0),
        (_, r) => r,
    };
    let _ = empty;

    Ok(JobDescription {
        name,
        executable,
        arguments,
        environment,
        runner,
        min_components: None,
        priority: None,
        policy,
        runtime_estimate: None,
        walltime: None,
        cputime: None,
        memory: None,
        deadline,
        begin: None,
        signal: None,
        retries,
        requirements,
        rank,
        working_directory: None,
        stdin,
        stdout,
        stderr,
        limits: Default::default(),
        inputs,
        outputs,
        flexible: None,
        components,
        broker: Default::default(),
        reservation: None,
        after: Vec::new(),
        afterany: Vec::new(),
        afterok,
        afternotok: Vec::new(),
        dependency: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_quotes() {
        assert_eq!(strip_comment("/bin/ls      #Will use remote ls!"), "/bin/ls");
        assert_eq!(strip_comment("\"I am # not a comment\""), "I am # not a comment");
        assert_eq!(strip_comment("a#b"), "a#b");
        assert_eq!(strip_comment("\"${TASK_ID}\""), "${TASK_ID}");
        assert_eq!(strip_comment("\"a\" \"b\""), "\"a\" \"b\"");
    }

    #[test]
    fn environment_forms() {
        let e = parse_environment("SCRATCH_DIR /tmp, LD_LIBRARY_PATH=/usr/local/lib,VAL1 =\"example, with comma\"").unwrap();
        assert_eq!(
            e,
            vec![
                ("SCRATCH_DIR".into(), "/tmp".into()),
                ("LD_LIBRARY_PATH".into(), "/usr/local/lib".into()),
                ("VAL1".into(), "example, with comma".into())
            ]
        );
        assert!(parse_environment("=x").is_err());
    }

    #[test]
    fn deadlines() {
        assert_eq!(deadline_seconds("30"), Some(1800));
        assert_eq!(deadline_seconds("2:30"), Some(9000));
        assert_eq!(deadline_seconds("1:0:5"), Some(86_700));
        assert_eq!(deadline_seconds("1:2:3:4"), None);
        assert_eq!(deadline_seconds("x"), None);
    }
}
