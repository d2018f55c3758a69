//! `koalesce server`, `koalesce token create|list|revoke`, the hidden `koalesce supervise`
//! and `koalesce bench scan`.

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
    Supervise(Box<koalesce_server::supervise::SuperviseOptions>),
    /// The resident launcher that forks supervisors for the server (not for direct use).
    #[command(hide = true)]
    SuperviseLauncher,
    /// Administration on the server's machine.
    Admin {
        #[command(subcommand)]
        which: AdminCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Copy the database of a running (or stopped) server to FILE with SQLite's online backup:
    /// a consistent snapshot, integrity-checked, written only if complete.
    Backup {
        /// The new file to write (must not exist).
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// The server's data directory.
        #[arg(long, value_name = "DIR")]
        data_dir: PathBuf,
    },
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
    /// Log lines as text (ANSI colours only on a terminal, never with NO_COLOR) or one JSON
    /// object per line; RUST_LOG chooses the levels (default info).
    #[arg(long, value_enum, default_value_t = koalesce_server::LogFormat::Text, value_name = "FORMAT")]
    pub log_format: koalesce_server::LogFormat,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token for USER and print it (only its SHA-256 is stored), on the server's
    /// machine: `koalesce token create alice --data-dir /var/lib/koalesce [--admin]
    /// [--expires 30d]`. Give it to the user as KOALESCE_TOKEN.
    Create {
        /// The koalesce user the token acts as (jobs and tokens belong to users).
        #[arg(value_name = "USER")]
        user: String,
        /// The token may see and act on every user's jobs and tokens.
        #[arg(long)]
        admin: bool,
        /// The token stops working after this long (e.g. 30d, 12h, 1w); default: never.
        #[arg(long, value_name = "DURATION", value_parser = parse_lifetime)]
        expires: Option<std::time::Duration>,
        /// The server's data directory (its database holds the tokens; a running server sees
        /// a new token at once).
        #[arg(long, value_name = "DIR")]
        data_dir: PathBuf,
    },
    /// List tokens (id, user, admin, created, expires; never the tokens themselves): from
    /// the data dir's database with --data-dir (every user's), else your own from the server
    /// (an admin's --all: everyone's).
    List {
        /// Read the server's database directly (on the server's machine).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// Through the server, as an admin: every user's tokens.
        #[arg(long)]
        all: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: crate::client_cmds::Connection,
    },
    /// Revoke a token by its id (from `token list`); it is refused at once, also by a running
    /// server. Users revoke their own tokens, admins anyone's.
    Revoke {
        /// The token's id (at least 8 hex digits of it).
        #[arg(value_name = "ID")]
        id: String,
        /// Change the server's database directly (on the server's machine).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        #[command(flatten)]
        conn: crate::client_cmds::Connection,
    },
}

/// `30d`, `12h`, `1w`, `90m` (humantime) as a token lifetime.
fn parse_lifetime(s: &str) -> Result<std::time::Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("invalid duration '{s}': {e} (use e.g. 30d, 12h, 1w)"))?;
    if d.is_zero() {
        return Err("the lifetime must be positive".into());
    }
    Ok(d)
}

impl TokenCommand {
    fn run(self) -> anyhow::Result<ExitCode> {
        use koalesce_server::store;
        match self {
            TokenCommand::Create {
                user,
                admin,
                expires,
                data_dir,
            } => {
                let lifetime = expires.map(|d| d.as_millis().min(u64::MAX as u128) as u64);
                let token = store::create_token_expiring(&data_dir, &user, admin, lifetime)?;
                println!("{token}");
            }
            TokenCommand::List { data_dir, all, json, conn } => {
                let tokens: Vec<store::TokenInfo> = match data_dir {
                    Some(dir) => store::list_tokens(&store::open_tokens(&dir)?, None)?,
                    None => serde_json::from_value(conn.client().tokens_json(all)?)?,
                };
                if json {
                    println!("{}", serde_json::to_string_pretty(&tokens)?);
                } else {
                    print!("{}", crate::client_cmds::format::tokens_table(&tokens, koalesce_server::now_ms()));
                }
            }
            TokenCommand::Revoke { id, data_dir, conn } => {
                let user = match data_dir {
                    Some(dir) => {
                        store::revoke_token_at(&dir, &id)?
                            .ok_or_else(|| anyhow::anyhow!("token '{id}' not found (or the id is ambiguous: give more digits)"))?
                            .user
                    }
                    None => conn.client().revoke_token_json(&id)?["user"].as_str().unwrap_or("?").to_string(),
                };
                println!(
                    "revoked token {} of {}",
                    crate::client_cmds::format::escape(&id),
                    crate::client_cmds::format::escape(&user)
                );
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

impl ServerCommand {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            ServerCommand::Server(a) => {
                let config = match &a.config {
                    Some(p) => koalesce_server::ServerConfig::load(p)?,
                    None => koalesce_server::ServerConfig::default(),
                };
                koalesce_server::init_tracing_as(a.log_format);
                koalesce_server::run_blocking(koalesce_server::ServerOptions {
                    data_dir: a.data_dir,
                    listen: a.listen,
                    config,
                    supervisor: koalesce_server::SupervisorCommand::current_exe()?,
                })?;
                Ok(ExitCode::SUCCESS)
            }
            ServerCommand::Token { which } => which.run(),
            ServerCommand::Admin {
                which: AdminCommand::Backup { file, data_dir },
            } => {
                let bar = (std::io::IsTerminal::is_terminal(&std::io::stderr())).then(|| {
                    let b = indicatif::ProgressBar::new(0);
                    b.set_style(
                        indicatif::ProgressStyle::with_template("backup {bar:40} {pos}/{len} pages")
                            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
                    );
                    b
                });
                let bytes = koalesce_server::backup::backup(&data_dir, &file, |done, total| {
                    if let Some(b) = &bar {
                        b.set_length(total);
                        b.set_position(done);
                    }
                })?;
                if let Some(b) = bar {
                    b.finish_and_clear();
                }
                println!(
                    "backed up {} to {} ({})",
                    data_dir.join(koalesce_server::DB_FILE).display(),
                    file.display(),
                    crate::client_cmds::format::format_bytes(bytes)
                );
                Ok(ExitCode::SUCCESS)
            }
            ServerCommand::Supervise(a) => {
                let code = koalesce_server::supervise::supervise_main(&a);
                Ok(ExitCode::from(code.clamp(0, 255) as u8))
            }
            ServerCommand::SuperviseLauncher => {
                let code = koalesce_server::launcher::launcher_main();
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
        use koalesce_server::bench::{scan_bench_with, ScanVariant};
        // The variants run interleaved, so they share the machine's state side by side.
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); ScanVariant::ALL.len()];
        let mut last = Vec::new();
        for _ in 0..self.repeat.max(1) {
            last.clear();
            for (i, v) in ScanVariant::ALL.into_iter().enumerate() {
                let r = scan_bench_with(self.jobs, self.sites, v);
                times[i].push(r.scan_ms);
                last.push(r);
            }
        }
        println!("bench scan: {} queued jobs, {} sites (mostly full)", self.jobs, self.sites);
        println!(
            "{:<38} {:>9} {:>9} {:>10} {:>7} {:>11} {:>9}",
            "jobs", "best ms", "median ms", "setup ms", "placed", "evaluated", "cached"
        );
        let mut medians = Vec::new();
        for ((v, t), r) in ScanVariant::ALL.into_iter().zip(&mut times).zip(&last) {
            t.sort_by(f64::total_cmp);
            let median = t[t.len() / 2];
            medians.push(median);
            println!(
                "{:<38} {:>9.1} {:>9.1} {:>10.1} {:>7} {:>11} {:>9}",
                v.describe(),
                t[0],
                median,
                r.setup_ms,
                r.placed,
                r.evaluations,
                r.cached
            );
        }
        println!(
            "  one scan over {} runs each (target <= 100 ms); with a RANK on every job {:.2}x the plain scan's median",
            self.repeat.max(1),
            medians[1] / medians[0]
        );
        Ok(ExitCode::SUCCESS)
    }
}
