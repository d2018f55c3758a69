//! What the importers share: the error type, file locations, requirement expressions.

use koalesce_api::fields::InputFile;

use crate::Format;

/// Why a job file is refused: the format, where (line and column when known) and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct FormatError {
    pub format: Format,
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub message: String,
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.format)?;
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, ", line {l}, column {c}")?,
            (Some(l), None) => write!(f, ", line {l}")?,
            _ => {}
        }
        write!(f, ": {}", self.message)
    }
}

impl FormatError {
    pub fn at(format: Format, line: usize, column: Option<usize>, message: impl Into<String>) -> Self {
        FormatError {
            format,
            line: Some(line),
            column,
            message: message.into(),
        }
    }

    pub fn general(format: Format, message: impl Into<String>) -> Self {
        FormatError {
            format,
            line: None,
            column: None,
            message: message.into(),
        }
    }
}

/// Where a file named in a job file lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Location {
    /// A logical name in koalesce's replica catalogue (a bare name or `koalesce:NAME`).
    Catalogue(String),
    /// An absolute path on the execution host.
    Absolute(String),
}

/// Interprets a file reference: `koalesce:NAME`, `koalesce:///NAME` and bare names are
/// catalogue names; `/path` is an absolute path; any other URL scheme is refused (koalesce
/// moves data only between its own sites' storage).
pub(crate) fn locate(reference: &str) -> Result<Location, String> {
    let r = reference.trim();
    if r.is_empty() {
        return Err("empty file name".into());
    }
    if let Some(rest) = r.strip_prefix("koalesce:") {
        let name = rest.trim_start_matches('/');
        if name.is_empty() {
            return Err(format!("'{r}' names no file"));
        }
        return Ok(Location::Catalogue(name.to_string()));
    }
    if let Some(scheme_end) = r.find("://") {
        let scheme = &r[..scheme_end];
        if !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) {
            return Err(format!(
                "'{r}': {scheme}:// URLs cannot be staged by koalesce (it moves files between its sites' storage); register the file with `koalesce files add` and name it by its logical name or koalesce:NAME"
            ));
        }
    }
    if r.starts_with('/') {
        return Ok(Location::Absolute(r.to_string()));
    }
    Ok(Location::Catalogue(r.to_string()))
}

/// An input staged from the catalogue under `local` in the working directory.
pub(crate) fn staged(logical: &str, local: Option<&str>, executable: bool) -> InputFile {
    let default_local = logical.rsplit('/').next().unwrap_or(logical);
    InputFile {
        file: logical.to_string(),
        as_name: local.filter(|l| *l != default_local).map(str::to_string),
        executable,
    }
}

/// Adds an input unless the same file is already staged under the same name (then only the
/// executable mark is merged); a different file under the same name is left for the native
/// validation to refuse.
pub(crate) fn push_input(inputs: &mut Vec<InputFile>, f: InputFile) {
    match inputs.iter_mut().find(|i| i.local_name() == f.local_name() && i.file == f.file) {
        Some(existing) => existing.executable |= f.executable,
        None => inputs.push(f),
    }
}

/// Checks that a name is a plain relative path inside the working directory.
pub(crate) fn relative_name(what: &str, name: &str) -> Result<String, String> {
    let n = name.trim();
    if n.is_empty() {
        return Err(format!("{what}: empty file name"));
    }
    if n.starts_with('/') || n.contains("://") {
        return Err(format!("{what}: '{n}' must be a name in the job's directory, not a path or URL"));
    }
    if n.split('/').any(|c| c == "..") {
        return Err(format!("{what}: '{n}' must not contain '..'"));
    }
    Ok(n.to_string())
}

/// Collects requirement terms and joins them with `&`, each in parentheses (GridWay's `&` and
/// `|` share one precedence level).
#[derive(Debug, Default)]
pub(crate) struct Requirements(Vec<String>);

impl Requirements {
    pub fn add(&mut self, term: impl Into<String>) {
        let t = term.into();
        if !t.trim().is_empty() {
            self.0.push(t);
        }
    }

    /// `VAR = "a" | VAR = "b"` for string alternatives (wildcards allowed).
    pub fn any_of(&mut self, var: &str, patterns: &[String]) {
        let alts: Vec<String> = patterns.iter().map(|p| format!("{var} = \"{}\"", p.replace('"', ""))).collect();
        self.add(alts.join(" | "));
    }

    pub fn build(self) -> Option<String> {
        match self.0.len() {
            0 => None,
            1 => Some(self.0.into_iter().next().unwrap()),
            _ => Some(self.0.iter().map(|t| format!("({t})")).collect::<Vec<_>>().join(" & ")),
        }
    }
}

/// A string safe as a job name: the file's stem or a default.
pub(crate) fn default_name(hint: Option<&str>, fallback: &str) -> String {
    hint.map(str::trim).filter(|h| !h.is_empty()).unwrap_or(fallback).to_string()
}

/// Splits a command line into words: whitespace separates, '…' and "…" group, backslash
/// escapes. Also says whether a shell would expand something (`$NAME`, `$(…)`, backquotes)
/// outside single quotes — `${KOALESCE_…}` references are koalesce's own and do not count.
pub(crate) fn split_words(s: &str) -> Result<(Vec<String>, bool), String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut shell = false;
    let mut chars = s.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (Some(q), c) if c == q => quote = None,
            (q, '\\') if q != Some('\'') => {
                in_word = true;
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            (q, '$' | '`') if q != Some('\'') => {
                in_word = true;
                let rest: String = chars.clone().take(10).collect();
                if !(c == '$' && rest.starts_with("{KOALESCE_")) {
                    shell = true;
                }
                cur.push(c);
            }
            (_, c) => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if let Some(q) = quote {
        return Err(format!("unbalanced {q} quote in '{s}'"));
    }
    if in_word {
        words.push(cur);
    }
    Ok((words, shell))
}

/// Quotes a word for `/bin/sh` so that `$` and backquotes still expand (double quotes).
pub(crate) fn shell_double_quote(w: &str) -> String {
    let mut out = String::from("\"");
    for c in w.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// A native description with only a name and a program; the importers fill in the rest.
pub(crate) fn blank_job(name: String, executable: String) -> koalesce_api::JobDescription {
    koalesce_api::JobDescription {
        name,
        executable,
        arguments: Vec::new(),
        environment: Default::default(),
        runner: koalesce_api::Runner::Independent,
        min_components: None,
        priority: None,
        policy: None,
        runtime_estimate: None,
        walltime: None,
        cputime: None,
        memory: None,
        deadline: None,
        begin: None,
        signal: None,
        retries: None,
        requirements: None,
        rank: None,
        working_directory: None,
        stdin: None,
        stdout: None,
        stderr: None,
        limits: Default::default(),
        inputs: Vec::new(),
        outputs: Vec::new(),
        flexible: None,
        components: Vec::new(),
        broker: Default::default(),
        reservation: None,
        after: Vec::new(),
        afterany: Vec::new(),
        afterok: Vec::new(),
        afternotok: Vec::new(),
        dependency: None,
    }
}

/// The most components a job file may ask for one per process (`multiple`, `mpi`): a few
/// bytes must not ask for billions of them.
pub(crate) const MAX_PROCESS_COMPONENTS: u32 = 100_000;

/// GRAM's job types onto components: `single` runs the program once on `count` processors;
/// `multiple` runs `count` copies and `mpi` an MPI program of `count` ranks — one-processor
/// components (coupled for MPI: a start barrier, ranks and peers), packed on few sites (CM),
/// at most [`MAX_PROCESS_COMPONENTS`] of them. `None`: not a job type; `Some(Err)`: too many
/// processes, said.
#[allow(clippy::type_complexity)]
pub(crate) fn job_type_components(
    kind: &str,
    count: u32,
) -> Option<Result<(Vec<koalesce_api::ComponentDescription>, koalesce_api::Runner, Option<String>), String>> {
    use koalesce_api::{ComponentDescription, Runner};
    let ones = |runner| {
        if count > MAX_PROCESS_COMPONENTS {
            return Err(format!(
                "{count} processes of job type {kind} (one component each): at most {MAX_PROCESS_COMPONENTS}"
            ));
        }
        Ok((
            (0..count).map(|_| ComponentDescription::new(1)).collect(),
            runner,
            Some("cm".into()),
        ))
    };
    match kind.to_ascii_lowercase().as_str() {
        "single" => Some(Ok((vec![ComponentDescription::new(count)], Runner::Independent, None))),
        "multiple" => Some(ones(Runner::Independent)),
        "mpi" => Some(ones(Runner::Coupled)),
        _ => None,
    }
}

/// Whether a resource manager contact (`host[:port][/service][:subject]`) names one of the
/// sites: the host itself or its first label (`vu.das2.nl` → `vu`), ignoring case.
pub(crate) fn site_of_contact(contact: &str, sites: &[String]) -> Option<String> {
    let host = contact.trim().split([':', '/']).next().unwrap_or_default();
    let first = host.split('.').next().unwrap_or_default();
    sites
        .iter()
        .find(|s| s.eq_ignore_ascii_case(host) || s.eq_ignore_ascii_case(first))
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations() {
        assert_eq!(locate("data.bin"), Ok(Location::Catalogue("data.bin".into())));
        assert_eq!(locate("koalesce:///sets/a"), Ok(Location::Catalogue("sets/a".into())));
        assert_eq!(locate("/bin/ls"), Ok(Location::Absolute("/bin/ls".into())));
        assert!(locate("gsiftp://h/p").unwrap_err().contains("gsiftp"));
        assert!(locate("").is_err());
    }

    #[test]
    fn words() {
        assert_eq!(
            split_words("a 'b c' \"d e\" f\\ g").unwrap(),
            (vec!["a".into(), "b c".into(), "d e".into(), "f g".into()], false)
        );
        assert!(split_words("$RANDOM").unwrap().1);
        assert!(!split_words("'$RANDOM'").unwrap().1);
        assert!(!split_words("${KOALESCE_JOB_ID}").unwrap().1);
        assert!(split_words("`expr 1 + 2`").unwrap().1);
        assert!(split_words("\"open").is_err());
        assert_eq!(split_words("  ").unwrap().0, Vec::<String>::new());
        assert_eq!(split_words("''").unwrap().0, vec![String::new()]);
    }

    #[test]
    fn requirement_terms() {
        let mut r = Requirements::default();
        assert_eq!(Requirements::default().build(), None);
        r.add("CPU_MHZ > 1");
        r.any_of("ARCH", &["x86_64".into(), "amd64".into()]);
        assert_eq!(r.build().unwrap(), "(CPU_MHZ > 1) & (ARCH = \"x86_64\" | ARCH = \"amd64\")");
    }
}
