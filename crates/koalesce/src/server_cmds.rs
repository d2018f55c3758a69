//! Placeholder until this part is built.

use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum ServerCommand {}

impl ServerCommand {
    pub fn run(self) -> anyhow::Result<std::process::ExitCode> {
        match self {}
    }
}

#[derive(Debug, Args)]
pub struct BenchScanArgs {}

impl BenchScanArgs {
    pub fn run(self) -> anyhow::Result<std::process::ExitCode> {
        anyhow::bail!("not built yet")
    }
}
