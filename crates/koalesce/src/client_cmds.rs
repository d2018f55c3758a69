//! Placeholder until this part is built.

use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum ClientCommand {}

impl ClientCommand {
    pub fn run(self) -> anyhow::Result<std::process::ExitCode> {
        match self {}
    }
}

#[derive(Debug, Args)]
pub struct BenchSubmitArgs {}

impl BenchSubmitArgs {
    pub fn run(self) -> anyhow::Result<std::process::ExitCode> {
        anyhow::bail!("not built yet")
    }
}
