//! sbatch's batch script: read from its file, standard input or `--wrap`, and the options of
//! its `#SBATCH` lines (moved out of sbatch.rs as they were; sbatch.rs turns them into the job).

use std::io::Read;
use std::path::Path;

use super::sbatch::{refuse, SbatchArgs};
use super::{parse_options, SResult, SlurmError};

/// The script's text, its name (for the default job name) and its arguments.
pub(crate) fn read_script(a: &SbatchArgs) -> SResult<(String, String, Vec<String>)> {
    if let Some(w) = &a.wrap {
        if !a.script.is_empty() {
            return Err(SlurmError::msg("Script arguments not permitted with --wrap option"));
        }
        return Ok((
            format!("#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{w}\n"),
            "wrap".into(),
            Vec::new(),
        ));
    }
    match a.script.split_first() {
        Some((file, rest)) => {
            let text = std::fs::read(file).map_err(|e| SlurmError::msg(format!("Unable to open file {file}: {e}")))?;
            let text = String::from_utf8(text).map_err(|_| SlurmError::msg(format!("{file} is not a UTF-8 text file")))?;
            let name = Path::new(file)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| file.clone());
            Ok((text, name, rest.to_vec()))
        }
        None => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| SlurmError::msg(format!("reading the batch script from standard input: {e}")))?;
            Ok((text, "sbatch".into(), Vec::new()))
        }
    }
}

/// The options in the script's `#SBATCH` lines, in order: the block of comments at the top
/// (Slurm stops at the first command).
pub fn directives(script: &str) -> SResult<Vec<String>> {
    let mut out = Vec::new();
    for (n, line) in script.lines().enumerate() {
        let t = line.trim();
        if n == 0 && t.starts_with("#!") {
            continue;
        }
        if t.is_empty() {
            continue;
        }
        if !t.starts_with('#') {
            break;
        }
        let Some(rest) = t.strip_prefix("#SBATCH") else { continue };
        if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
            continue;
        }
        // A comment after the options (" # ...", outside quotes) is not an option.
        let rest = strip_trailing_comment(rest);
        let words = shlex::split(rest).ok_or_else(|| SlurmError::msg(format!("line {}: cannot parse #SBATCH directive: {t}", n + 1)))?;
        if let Some(w) = words.iter().find(|w| *w == "hetjob" || *w == "packjob") {
            return Err(refuse(
                &format!("#SBATCH {w} (line {})", n + 1),
                "heterogeneous jobs are not offered; submit each component as its own job",
            ));
        }
        out.extend(words);
    }
    // A word that is no option nor an option's value would be taken for the script and every
    // option after it for the script's arguments: Slurm refuses such a line, and so does this.
    let parsed: SbatchArgs = parse_options("sbatch", &out)?;
    if let Some(word) = parsed.script.first() {
        return Err(SlurmError::msg(format!("Invalid directive found in batch script: {word}")));
    }
    Ok(out)
}

/// The options of a `#SBATCH` line without a trailing `# comment`: a `#` after a blank and
/// outside quotes starts one (`--job-name="run #1"` keeps its `#`).
/// As Slurm 22.05's sbatch (checked): an unquoted, unescaped `#` ends the line even inside a
/// word (`--ntasks=1#128` is `--ntasks=1`), `\#` is a `#`.
fn strip_trailing_comment(rest: &str) -> &str {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in rest.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\\') => escaped = true,
            (None, '"' | '\'') => quote = Some(c),
            (None, '#') => return &rest[..i],
            _ => {}
        }
    }
    rest
}
