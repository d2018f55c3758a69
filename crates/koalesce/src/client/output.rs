//! How a client command prints its answer, decided once from `--json` / `--quiet`: a human
//! rendering (table or report), the server's JSON as it came, or nothing (the exit code says it
//! all). Every command prints through [`Output::print`], so the three modes behave the same
//! everywhere.

use clap::Args;
use serde_json::Value;

/// The output flags every client command takes.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct OutputArgs {
    /// Print the server's JSON answer instead of a table or report.
    #[arg(long, conflicts_with = "quiet")]
    pub json: bool,
    /// Print nothing on success (errors still go to standard error; the exit code tells).
    #[arg(long, short)]
    pub quiet: bool,
}

/// One of the three ways to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Human,
    Json,
    Quiet,
}

impl From<OutputArgs> for Output {
    fn from(a: OutputArgs) -> Self {
        if a.json {
            Output::Json
        } else if a.quiet {
            Output::Quiet
        } else {
            Output::Human
        }
    }
}

impl Output {
    /// The text to print for the server's answer `raw`: pretty JSON, `human()` (only called in
    /// that mode, so its parsing errors surface only there), or nothing.
    pub fn render(self, raw: &Value, human: impl FnOnce() -> anyhow::Result<String>) -> anyhow::Result<Option<String>> {
        Ok(match self {
            Output::Json => Some(format!("{}\n", serde_json::to_string_pretty(raw)?)),
            Output::Human => Some(human()?),
            Output::Quiet => None,
        })
    }

    /// Prints what [`Output::render`] gives to standard output.
    pub fn print(self, raw: &Value, human: impl FnOnce() -> anyhow::Result<String>) -> anyhow::Result<()> {
        if let Some(text) = self.render(raw, human)? {
            print!("{text}");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_modes() {
        let raw = serde_json::json!({"id": 7});
        let human = || Ok("job 7\n".to_string());
        assert_eq!(Output::Human.render(&raw, human).unwrap().as_deref(), Some("job 7\n"));
        assert_eq!(Output::Json.render(&raw, human).unwrap().as_deref(), Some("{\n  \"id\": 7\n}\n"));
        assert_eq!(Output::Quiet.render(&raw, human).unwrap(), None);
        // The human rendering is not even attempted in the other modes.
        assert!(Output::Json.render(&raw, || anyhow::bail!("unreadable")).is_ok());
        let flags = |json, quiet| Output::from(OutputArgs { json, quiet });
        assert_eq!(flags(false, false), Output::Human);
        assert_eq!(flags(true, false), Output::Json);
        assert_eq!(flags(false, true), Output::Quiet);
    }
}
