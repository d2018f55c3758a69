//! The optional fields of the native job description that the format importers need
//! (docs/server-contract.md, docs/job-formats.md): staged files, the flexible request,
//! POSIX limits, sizes, paths inside the job's directory and the runtime variables the runner
//! expands.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An input file staged from the replica catalogue before the job starts.
///
/// Written as a bare logical name (`"dataset.bin"`) or as a table
/// `{ file = "param.3", as = "param", executable = true }`: `as` is the name the file gets in
/// the job's working directory (default: the last component of the logical name), and
/// `executable` marks a staged program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputFile {
    pub file: String,
    pub as_name: Option<String>,
    pub executable: bool,
}

impl InputFile {
    pub fn named(file: impl Into<String>) -> Self {
        InputFile {
            file: file.into(),
            as_name: None,
            executable: false,
        }
    }

    /// The logical name in the replica catalogue.
    pub fn logical(&self) -> &str {
        &self.file
    }

    /// The name in the job's working directory.
    pub fn local_name(&self) -> &str {
        match &self.as_name {
            Some(a) => a,
            None => self.file.rsplit('/').next().unwrap_or(&self.file),
        }
    }
}

impl Serialize for InputFile {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.as_name.is_none() && !self.executable {
            return s.serialize_str(&self.file);
        }
        let mut m = BTreeMap::new();
        m.insert("file", toml::Value::String(self.file.clone()));
        if let Some(a) = &self.as_name {
            m.insert("as", toml::Value::String(a.clone()));
        }
        if self.executable {
            m.insert("executable", toml::Value::Boolean(true));
        }
        m.serialize(s)
    }
}

impl<'de> Deserialize<'de> for InputFile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = InputFile;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a logical file name or a table { file, as, executable }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<InputFile, E> {
                Ok(InputFile::named(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<InputFile, A::Error> {
                let mut out = InputFile::named("");
                let mut seen_file = false;
                while let Some(k) = m.next_key::<String>()? {
                    match k.as_str() {
                        "file" => {
                            out.file = m.next_value()?;
                            seen_file = true;
                        }
                        "as" => out.as_name = Some(m.next_value()?),
                        "executable" => out.executable = m.next_value()?,
                        other => return Err(de::Error::unknown_field(other, &["file", "as", "executable"])),
                    }
                }
                if !seen_file {
                    return Err(de::Error::missing_field("file"));
                }
                Ok(out)
            }
        }
        d.deserialize_any(V)
    }
}

/// An output file copied back after success and registered in the catalogue.
///
/// Written as a bare name in the working directory (`"result.txt"`, registered as
/// `<job-id>/result.txt`) or as `{ file = "out", to = "results/run-7.out" }` (registered
/// under the logical name `to`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputFile {
    pub file: String,
    pub to: Option<String>,
}

impl OutputFile {
    pub fn named(file: impl Into<String>) -> Self {
        OutputFile {
            file: file.into(),
            to: None,
        }
    }

    /// The logical name it is registered under for job `job_id` (`${KOALESCE_JOB_ID}` in
    /// `to` is replaced by the id).
    pub fn logical_name(&self, job_id: u64) -> String {
        match &self.to {
            Some(t) => expand_runtime(t, |n| (n == "KOALESCE_JOB_ID").then(|| job_id.to_string())),
            None => format!("{job_id}/{}", self.file),
        }
    }
}

impl Serialize for OutputFile {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.to {
            None => s.serialize_str(&self.file),
            Some(t) => {
                let mut m = BTreeMap::new();
                m.insert("file", self.file.clone());
                m.insert("to", t.clone());
                m.serialize(s)
            }
        }
    }
}

impl<'de> Deserialize<'de> for OutputFile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OutputFile;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a file name or a table { file, to }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<OutputFile, E> {
                Ok(OutputFile::named(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<OutputFile, A::Error> {
                let mut out = OutputFile::named("");
                let mut seen_file = false;
                while let Some(k) = m.next_key::<String>()? {
                    match k.as_str() {
                        "file" => {
                            out.file = m.next_value()?;
                            seen_file = true;
                        }
                        "to" => out.to = Some(m.next_value()?),
                        other => return Err(de::Error::unknown_field(other, &["file", "to"])),
                    }
                }
                if !seen_file {
                    return Err(de::Error::missing_field("file"));
                }
                Ok(out)
            }
        }
        d.deserialize_any(V)
    }
}

/// A flexible request (003 §2.2.2): only a total; the scheduler splits it (FCM).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlexibleDescription {
    /// Processors in all.
    pub total: u32,
    /// No component smaller than this (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_component: Option<u32>,
    /// At most this many components (default: `total`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_components: Option<u32>,
}

/// POSIX resource limits of every process of the job (setrlimit; JSDL POSIXApplication).
/// Sizes are written like `memory` ("64M", "2G"); counts are plain numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// RLIMIT_CORE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_dump: Option<String>,
    /// RLIMIT_DATA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_segment: Option<String>,
    /// RLIMIT_FSIZE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_size: Option<String>,
    /// RLIMIT_MEMLOCK.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked_memory: Option<String>,
    /// RLIMIT_STACK.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<String>,
    /// RLIMIT_AS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_memory: Option<String>,
    /// RLIMIT_NOFILE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_files: Option<u64>,
    /// RLIMIT_NPROC (processes and threads of the user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u64>,
}

impl Limits {
    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }

    pub(crate) fn check(&self) -> Result<(), String> {
        for (name, v) in [
            ("core_dump", &self.core_dump),
            ("data_segment", &self.data_segment),
            ("file_size", &self.file_size),
            ("locked_memory", &self.locked_memory),
            ("stack", &self.stack),
            ("virtual_memory", &self.virtual_memory),
        ] {
            if let Some(v) = v {
                parse_size(v).map_err(|e| format!("field 'limits.{name}': {e}"))?;
            }
        }
        Ok(())
    }
}

/// "512M", "2G", "1.5GiB", "100K", "1T", "4096" (no unit: megabytes, as in Slurm) → bytes.
/// Units are binary (K = 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let bad = || format!("'{s}' is not a size (use e.g. \"512M\", \"2G\" or a number of megabytes)");
    let split = t.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim());
    let v: f64 = num.parse().map_err(|_| bad())?;
    let mult: f64 = match unit.to_ascii_lowercase().as_str() {
        "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "" | "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0f64.powi(4),
        _ => return Err(bad()),
    };
    let bytes = v * mult;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes.ceil() as u64)
}

/// Bytes as the shortest exact size string ("2G", "512M", "1536K", or "123B").
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)];
    for (u, m) in UNITS {
        if bytes >= m && bytes.is_multiple_of(m) {
            return format!("{}{u}", bytes / m);
        }
    }
    format!("{bytes}B")
}

/// Seconds as a duration string the native format accepts ("90s", "10m", "2h").
pub fn format_seconds(secs: u64) -> String {
    if secs > 0 && secs.is_multiple_of(3600) {
        format!("{}h", secs / 3600)
    } else if secs > 0 && secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

/// Variables the runner expands in `${...}` references of arguments, environment values,
/// stdin/stdout/stderr, the working directory, component executables and output targets:
/// values known only when a component starts (the same values as its `KOALESCE_*`
/// environment).
pub const RUNTIME_VARIABLES: [&str; 13] = [
    "KOALESCE_JOB_ID",
    "KOALESCE_TASK_ID",
    "KOALESCE_ARRAY_JOB_ID",
    "KOALESCE_ARRAY_TASK_COUNT",
    "KOALESCE_PARAM",
    "KOALESCE_MAX_PARAM",
    "KOALESCE_RANK",
    "KOALESCE_SIZE",
    "KOALESCE_SITE",
    "KOALESCE_PROCESSORS",
    "KOALESCE_PEERS",
    "KOALESCE_ARCH",
    "KOALESCE_JOB_DIR",
];

/// The runtime variables of a task of an array or a bag, known at submission: the server
/// substitutes them in every field of each task's description (input and output names,
/// REQUIREMENTS and RANK too), see [`crate::JobDescription::for_task`]. `KOALESCE_PARAM` and
/// `KOALESCE_MAX_PARAM` (GridWay's `${PARAM}`, `${MAX_PARAM}`) are defined for bags only.
pub const TASK_VARIABLES: [&str; 5] = [
    "KOALESCE_TASK_ID",
    "KOALESCE_ARRAY_JOB_ID",
    "KOALESCE_ARRAY_TASK_COUNT",
    "KOALESCE_PARAM",
    "KOALESCE_MAX_PARAM",
];

/// The `${NAME}` references in `s` (name, byte offset).
fn references(s: &str) -> impl Iterator<Item = (&str, usize)> {
    let mut from = 0;
    std::iter::from_fn(move || {
        let start = from + s[from..].find("${")?;
        let end = start + 2 + s[start + 2..].find('}')?;
        from = end + 1;
        Some((&s[start + 2..end], start))
    })
}

/// Rejects `${KOALESCE_...}` references to variables the runner does not define.
pub(crate) fn check_runtime_refs(field: &str, s: &str) -> Result<(), String> {
    for (name, _) in references(s) {
        if name.starts_with("KOALESCE_") && !RUNTIME_VARIABLES.contains(&name) && !name.starts_with("KOALESCE_INPUT_") {
            return Err(format!(
                "field '{field}': unknown runtime variable ${{{name}}} (known: {}, KOALESCE_INPUT_<NAME>)",
                RUNTIME_VARIABLES.join(", ")
            ));
        }
    }
    Ok(())
}

/// Replaces `${KOALESCE_...}` references with their values; other text (including `${X}` of
/// other names, and references without a value) is left as it is.
pub fn expand_runtime(s: &str, value: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut last = 0;
    for (name, at) in references(s) {
        if !name.starts_with("KOALESCE_") {
            continue;
        }
        if let Some(v) = value(name) {
            out.push_str(&s[last..at]);
            out.push_str(&v);
            last = at + name.len() + 3;
        }
    }
    out.push_str(&s[last..]);
    out
}

/// A path inside the job's own directory: relative, without `..`, not empty.
pub(crate) fn check_relative_path(field: &str, p: &str) -> Result<(), String> {
    if p.trim().is_empty() {
        return Err(format!("field '{field}': must not be empty"));
    }
    if p.contains('\0') {
        return Err(format!("field '{field}': contains a NUL character"));
    }
    if p.starts_with('/') || p.starts_with('~') {
        return Err(format!(
            "field '{field}': '{p}' must be relative to the job's directory (a job cannot reach outside it)"
        ));
    }
    if p.split('/').any(|c| c == "..") {
        return Err(format!("field '{field}': '{p}' must not contain '..'"));
    }
    check_runtime_refs(field, p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_size("4096").unwrap(), 4096 << 20);
        assert_eq!(parse_size("100 kB").unwrap(), 102_400);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("-1G").is_err());
        assert_eq!(format_size(2 << 30), "2G");
        assert_eq!(format_size(1536 << 10), "1536K");
        assert_eq!(format_size(1000), "1000B");
        assert_eq!(parse_size(&format_size(123_456_789)).unwrap(), 123_456_789);
    }

    #[test]
    fn runtime_expansion() {
        let v = |n: &str| match n {
            "KOALESCE_JOB_ID" => Some("17".to_string()),
            _ => None,
        };
        assert_eq!(expand_runtime("out.${KOALESCE_JOB_ID}.txt", v), "out.17.txt");
        assert_eq!(expand_runtime("${HOME}/${KOALESCE_ARCH}", v), "${HOME}/${KOALESCE_ARCH}");
        assert_eq!(expand_runtime("${KOALESCE_JOB_ID}${KOALESCE_JOB_ID}", v), "1717");
        assert_eq!(expand_runtime("${unterminated", v), "${unterminated");
        assert!(check_runtime_refs("stdout", "o.${KOALESCE_JOB_ID}").is_ok());
        assert!(check_runtime_refs("stdout", "o.${KOALESCE_JOBID}")
            .unwrap_err()
            .contains("KOALESCE_JOBID"));
        assert!(check_relative_path("stdout", "/etc/passwd").is_err());
        assert!(check_relative_path("stdout", "a/../../x").is_err());
        assert!(check_relative_path("stdout", "Out/ofile").is_ok());
    }
}
