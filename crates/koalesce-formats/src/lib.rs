//! # koalesce-formats
//!
//! Every job file format koalesce accepts besides its own TOML, each turned into the native
//! [`JobDescription`] (docs/job-formats.md says what maps to what and what is refused):
//!
//! - [`jsdl`]: OGF JSDL 1.0 (GFD.56) with the POSIX Application, HPC Profile Application and SPMD
//!   Application (GFD.111, GFD.115) extensions;
//! - [`gridway`]: GridWay 5 job templates, with variable substitution and array tasks;
//! - [`rsl`]: Globus GT2 RSL, including DUROC multi-requests (a co-allocated job), and
//!   NorduGrid xRSL.
//!
//! Every element, attribute or keyword either maps onto the native description or is an error
//! naming it and its line (and column where known); nothing is dropped silently. Random input
//! never panics.

use koalesce_api::JobDescription;

mod common;
pub mod gridway;
pub mod jsdl;
pub mod rsl;

pub use common::FormatError;
pub use gridway::TaskContext;

/// A job file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    Toml,
    Jsdl,
    GridWay,
    Rsl,
    Xrsl,
}

impl Format {
    pub const ALL: [Format; 5] = [Format::Toml, Format::Jsdl, Format::GridWay, Format::Rsl, Format::Xrsl];

    /// The name used by `--format`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Toml => "toml",
            Format::Jsdl => "jsdl",
            Format::GridWay => "jt",
            Format::Rsl => "rsl",
            Format::Xrsl => "xrsl",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Format::Toml => "koalesce TOML",
            Format::Jsdl => "JSDL",
            Format::GridWay => "GridWay job template",
            Format::Rsl => "GT2 RSL",
            Format::Xrsl => "xRSL",
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "toml" | "native" => Ok(Format::Toml),
            "jsdl" | "xml" => Ok(Format::Jsdl),
            "jt" | "gridway" | "template" => Ok(Format::GridWay),
            "rsl" | "gt2" => Ok(Format::Rsl),
            "xrsl" => Ok(Format::Xrsl),
            _ => Err(format!("unknown format '{s}' (expected jsdl, jt, rsl, xrsl or toml)")),
        }
    }
}

/// A job file's bytes as text: UTF-8 (a leading byte-order mark dropped), or UTF-16 with a
/// byte-order mark (what Windows tools write XML in; XML 1.0 §4.3.3 requires processors to
/// read both). Anything else is an error naming the first byte that is not UTF-8 (or the
/// first NUL byte: UTF-16 without a byte-order mark).
pub fn decode(bytes: &[u8]) -> Result<String, String> {
    let utf16 = |be: bool| -> Result<String, String> {
        let body = &bytes[2..];
        if !body.len().is_multiple_of(2) {
            return Err("UTF-16 text with an odd number of bytes".into());
        }
        let units = body.chunks_exact(2).map(|c| {
            if be {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from_le_bytes([c[0], c[1]])
            }
        });
        let text = char::decode_utf16(units)
            .collect::<Result<String, _>>()
            .map_err(|e| format!("invalid UTF-16 text: {e}"))?;
        match text.find('\0') {
            Some(at) => Err(format!(
                "line {}: a NUL character, which no job file holds (UTF-32 text? save it as UTF-8 or UTF-16)",
                text[..at].matches('\n').count() + 1
            )),
            None => Ok(text),
        }
    };
    match bytes {
        [0xFF, 0xFE, ..] => utf16(false),
        [0xFE, 0xFF, ..] => utf16(true),
        _ => {
            let b = bytes.strip_prefix(&[0xEF, 0xBB, 0xBF]).unwrap_or(bytes);
            // NUL is valid UTF-8 but in no job file: UTF-16 written without a byte-order mark.
            if let Some(at) = b.iter().position(|c| *c == 0) {
                let line = b[..at].iter().filter(|c| **c == b'\n').count() + 1;
                return Err(format!(
                    "line {line}: byte {at} is NUL, which no job file holds (UTF-16 without a byte-order mark? save it as UTF-8, or as UTF-16 with one)"
                ));
            }
            std::str::from_utf8(b).map(str::to_string).map_err(|e| {
                let at = e.valid_up_to();
                let line = b[..at].iter().filter(|c| **c == b'\n').count() + 1;
                format!(
                    "line {line}: byte {at} (0x{:02x}) is not UTF-8 text (job files are UTF-8, or UTF-16 with a byte-order mark)",
                    b[at]
                )
            })
        }
    }
}

/// Guesses the format from the content: an XML document → JSDL; `&`, `+` or `|` first (after
/// comments) → RSL, or xRSL when its attribute names are xRSL's; `KEYWORD = value` lines with
/// GridWay keywords → a GridWay template; anything else → TOML.
pub fn detect(text: &str) -> Format {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let t = text.trim_start_matches('\u{feff}').trim_start();
    if t.starts_with('<') {
        return Format::Jsdl;
    }
    let body = rsl::skip_comments(t);
    if body.starts_with(['&', '+', '|']) {
        return rsl::dialect(text);
    }
    if gridway::looks_like_template(text) {
        return Format::GridWay;
    }
    Format::Toml
}

/// Options of a conversion.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The job name when the file names none (the file's stem, as GridWay does).
    pub name_hint: Option<String>,
    /// GridWay array: the task to convert (None: not an array).
    pub task: Option<TaskContext>,
    /// koalesce's site names: an RSL resourceManagerContact naming one fixes its component
    /// there (empty: no component is fixed).
    pub sites: Vec<String>,
}

/// Converts a job file into native descriptions: one job, except an xRSL multi-job request
/// (`+(&…)(&…)`), which describes several independent jobs. (A GT2 multi-request is one
/// co-allocated job.)
pub fn convert(text: &str, format: Format, opts: &Options) -> Result<Vec<JobDescription>, FormatError> {
    // A byte-order mark (Windows editors write one) is not part of any format's syntax.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if opts.task.is_some() && format != Format::GridWay {
        return Err(FormatError::general(
            format,
            "array tasks (--tasks) apply to GridWay job templates only",
        ));
    }
    let jobs = match format {
        Format::Toml => vec![JobDescription::parse(text).map_err(|e| FormatError::general(format, e.to_string()))?],
        Format::Jsdl => vec![jsdl::convert(text, opts.name_hint.as_deref())?],
        Format::GridWay => vec![gridway::convert(text, opts.name_hint.as_deref(), opts.task.as_ref())?],
        Format::Rsl => vec![rsl::convert_gt2_for_sites(text, opts.name_hint.as_deref(), &opts.sites)?],
        Format::Xrsl => rsl::convert_xrsl(text, opts.name_hint.as_deref())?,
    };
    // What the importers produce must be a valid native description (the server re-parses it).
    for j in &jobs {
        JobDescription::parse(&j.to_toml()).map_err(|e| FormatError::general(format, format!("the converted job is invalid: {e}")))?;
    }
    Ok(jobs)
}
