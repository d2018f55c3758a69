//! `koalesce server`, `koalesce token create`, the hidden `koalesce supervise` and
//! `koalesce bench scan`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum ServerCommand {
    /// Run the koalesce daemon (REST API, scheduler, local executor) on a data directory.
    Server(ServerArgs),
    /// Manage API tokens.
    Token {
        #[command(subcommand)]
        which: TokenCommand,
    },
    /// Supervise one component (started by the server; not for direct use).
    #[command(hide = true)]
    Supervise(SuperviseArgs),
}

#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Data directory (database, site storage, component directories); created if missing.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Address to listen on (default 127.0.0.1:7878; port 0 picks a free one, written to
    /// DIR/server.addr).
    #[arg(long)]
    pub listen: Option<String>,
    /// Server configuration (TOML): sites, scheduler parameters, body limit.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token for USER and print it (only its SHA-256 is stored).
    Create {
        user: String,
        /// The token may see and act on every user's jobs.
        #[arg(long)]
        admin: bool,
        #[arg(long)]
        data_dir: PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct SuperviseArgs {
    #[arg(long)]
    pub dir: PathBuf,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

impl ServerCommand {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            ServerCommand::Server(a) => {
                let config = match &a.config {
                    Some(p) => koalesce_server::ServerConfig::load(p)?,
                    None => koalesce_server::ServerConfig::default(),
                };
                koalesce_server::run_blocking(koalesce_server::ServerOptions {
                    data_dir: a.data_dir,
                    listen: a.listen,
                    config,
                    supervisor: koalesce_server::SupervisorCommand::current_exe()?,
                })?;
                Ok(ExitCode::SUCCESS)
            }
            ServerCommand::Token {
                which: TokenCommand::Create { user, admin, data_dir },
            } => {
                let token = koalesce_server::create_token(&data_dir, &user, admin)?;
                println!("{token}");
                Ok(ExitCode::SUCCESS)
            }
            ServerCommand::Supervise(a) => {
                let code = koalesce_server::supervise::supervise_main(&a.dir, &a.command[0], &a.command[1..]);
                Ok(ExitCode::from(code.clamp(0, 255) as u8))
            }
        }
    }
}

#[derive(Debug, Args)]
pub struct BenchScanArgs {
    /// Queued jobs.
    #[arg(long, default_value_t = 100_000)]
    pub jobs: usize,
    /// Sites (64 processors each, mostly full).
    #[arg(long, default_value_t = 500)]
    pub sites: usize,
    /// Repetitions (each builds a fresh scheduler); the best and the median are printed.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
}

impl BenchScanArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let mut times = Vec::new();
        let mut last = None;
        for _ in 0..self.repeat.max(1) {
            let r = koalesce_server::bench::scan_bench(self.jobs, self.sites);
            times.push(r.scan_ms);
            last = Some(r);
        }
        let r = last.unwrap();
        times.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let median = times[times.len() / 2];
        println!("bench scan: {} queued jobs, {} sites (mostly full)", r.jobs, r.sites);
        println!("  setup (submit all jobs): {:.1} ms", r.setup_ms);
        println!(
            "  one scan: best {:.1} ms, median {:.1} ms over {} runs (target <= 100 ms)",
            times[0],
            median,
            times.len()
        );
        println!("  placed {} jobs, {} still queued", r.placed, r.still_queued);
        Ok(ExitCode::SUCCESS)
    }
}
