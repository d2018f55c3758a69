//! `koalesce storage-agent`: one site's storage over HTTP (see `docs/data-plane.md`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use koalesce_server::agent::{AgentConfig, AgentOptions};

#[derive(Debug, Args)]
pub struct StorageAgentArgs {
    /// The directory served; nothing outside it is reachable through the agent.
    #[arg(long)]
    pub root: PathBuf,
    /// Address to listen on (repeatable; port 0 picks a free one, see --addr-file).
    #[arg(long, required = true)]
    pub listen: Vec<String>,
    /// File holding the bearer secret clients must present (at least 16 characters). Without
    /// it the agent uses ROOT/.koalesce-agent/token, creating a random one if missing.
    #[arg(long, env = "KOALESCE_AGENT_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// After binding --listen, move into this network namespace (`ip netns` name; needs
    /// root): pushes and probes leave from there, and --netns-listen is bound there.
    #[arg(long)]
    pub netns: Option<String>,
    /// Address to listen on inside --netns (repeatable), e.g. 0.0.0.0:7000.
    #[arg(long)]
    pub netns_listen: Vec<String>,
    /// Write the first --listen address ("host:port") to this file once listening.
    #[arg(long)]
    pub addr_file: Option<PathBuf>,
    /// Largest file an upload may create, in bytes.
    #[arg(long, default_value_t = 1 << 40)]
    pub max_file_bytes: u64,
    /// Refuse uploads (507) that would leave less than this many bytes free.
    #[arg(long, default_value_t = 64 << 20)]
    pub min_free_bytes: u64,
    /// Seconds a client has to send a request's headers (also closes idle connections).
    #[arg(long, default_value_t = 10)]
    pub header_timeout: u64,
    /// Seconds without progress after which a body (either way) is given up.
    #[arg(long, default_value_t = 30)]
    pub idle_timeout: u64,
}

impl StorageAgentArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let mut config = AgentConfig::new(&self.root, String::new());
        config.max_file_bytes = self.max_file_bytes;
        config.min_free_bytes = self.min_free_bytes;
        config.header_timeout = Duration::from_secs(self.header_timeout.max(1));
        config.idle_timeout = Duration::from_secs(self.idle_timeout.max(1));
        let opts = AgentOptions {
            root: self.root,
            listen: self.listen,
            netns: self.netns,
            netns_listen: self.netns_listen,
            token_file: self.token_file,
            addr_file: self.addr_file,
        };
        koalesce_server::agent::run_blocking(opts, config)?;
        Ok(ExitCode::SUCCESS)
    }
}
