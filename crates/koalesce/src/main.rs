//! The `koalesce` command: simulator, server, client and benchmarks.

use clap::{Parser, Subcommand};

mod client_cmds;
mod experiment_cmds;
mod server_cmds;
mod sim_cmds;

/// koalesce — a grid resource manager that co-allocates multi-component jobs close to their data.
#[derive(Debug, Parser)]
#[command(name = "koalesce", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    #[command(flatten)]
    Sim(sim_cmds::SimCommand),
    #[command(flatten)]
    Server(server_cmds::ServerCommand),
    #[command(flatten)]
    Client(client_cmds::ClientCommand),
    #[command(flatten)]
    Experiment(experiment_cmds::ExperimentCommand),
    /// Benchmarks (wall time, throughput, memory), printed as tables.
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Single-cluster EASY/FCFS over an SWF trace (default: the full HPC2N trace).
    Easy(sim_cmds::BenchEasyArgs),
    /// Durable submissions per second against a fresh server.
    Submit(client_cmds::BenchSubmitArgs),
    /// One placement scan over many queued jobs and sites.
    Scan(server_cmds::BenchScanArgs),
    /// The P2P simulator (seed 002): AWT replay and per-path network against the straightforward
    /// ways, side by side, and whole runs on the real traces.
    P2p(experiment_cmds::BenchP2pArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(c) => c.run(),
        Command::Server(c) => c.run(),
        Command::Client(c) => c.run(),
        Command::Experiment(c) => c.run(),
        Command::Bench { which } => match which {
            BenchCommand::Easy(a) => a.run(),
            BenchCommand::Submit(a) => a.run(),
            BenchCommand::Scan(a) => a.run(),
            BenchCommand::P2p(a) => a.run(),
        },
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
