//! `koalesce sites`: the site table, `--long` records, `--blacklisted`, the `--network`
//! matrix, and `sites readmit`.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use super::{api, format, sites_long};
use crate::client_cmds::{Connection, Output, OutputArgs};

/// Arguments of `koalesce sites`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SitesArgs {
    /// Only the blacklisted sites (with when each comes back by itself).
    #[arg(long)]
    pub blacklisted: bool,
    /// Each site as a GLUE-style record: processors, architecture, OS, memory, CPU speed,
    /// benchmark scores, software and the estimated queue wait.
    #[arg(long, short = 'l')]
    pub long: bool,
    /// The network between the sites: bandwidth the scheduler's transfer-time estimate uses
    /// (a matrix, from → to), and per link the NWS forecaster chosen, its error, latency,
    /// measurements and bytes moved.
    #[arg(long, conflicts_with_all = ["blacklisted", "long"])]
    pub network: bool,
    #[command(subcommand)]
    pub command: Option<SitesCommand>,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub conn: Connection,
}

/// `koalesce sites ...` subcommands.
#[derive(Debug, Subcommand)]
pub enum SitesCommand {
    /// Take a blacklisted site back at once (admins).
    Readmit {
        /// Site name.
        #[arg(value_name = "NAME")]
        name: String,
        #[command(flatten)]
        conn: Connection,
    },
}

impl SitesArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        if let Some(SitesCommand::Readmit { name, conn }) = self.command {
            conn.client().readmit_site_json(&name)?;
            println!("re-admitted {}", format::escape(&name));
            return Ok(ExitCode::SUCCESS);
        }
        let client = self.conn.client();
        if self.network {
            let v = client.network_json()?;
            Output::from(self.output).print(&v, || {
                let m: api::NetworkMatrix = serde_json::from_value(v.clone()).context("reading the network matrix")?;
                Ok(format::network_table(&m))
            })?;
            return Ok(ExitCode::SUCCESS);
        }
        let v = if self.blacklisted {
            client.blacklisted_sites_json()?
        } else {
            client.sites_json()?
        };
        Output::from(self.output).print(&v, || {
            let sites: Vec<api::SiteInfo> = serde_json::from_value(v.clone()).context("reading the site list")?;
            Ok(if self.long {
                sites_long::sites_long(&sites)
            } else {
                format::sites_table(&sites)
            })
        })?;
        Ok(ExitCode::SUCCESS)
    }
}
