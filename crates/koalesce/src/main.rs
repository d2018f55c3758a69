//! The `koalesce` command: simulator, server, client and benchmarks.

use clap::{Parser, Subcommand};

mod agent_cmds;
mod broker_cmds;
mod client_cmds;
mod dashboard_bench;
mod experiment_cmds;
mod expr_bench;
mod federation_cmds;
mod federation_demo;
mod format_cmds;
mod html_bench;
mod live_cf;
mod netbed_cmds;
mod server_cmds;
mod sim_cmds;
mod slurm_bench;
mod slurm_cmds;
mod testbed_cmds;
mod transfer_bench;

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
    /// Print the native TOML of a job file (JSDL, GridWay template, RSL, xRSL or TOML).
    Convert(format_cmds::ConvertArgs),
    /// Serve one site's storage over HTTP (upload, download with resume, third-party push).
    StorageAgent(agent_cmds::StorageAgentArgs),
    /// A shaped network on this machine: a namespace per site, veth links shaped with tc.
    Netbed {
        #[command(subcommand)]
        which: netbed_cmds::NetbedCommand,
    },
    /// Several real Slurm clusters on this machine (a test bed for koalesce's Slurm sites).
    Testbed {
        #[command(subcommand)]
        which: testbed_cmds::TestbedCommand,
    },
    /// Slurm-compatible commands (sbatch, squeue, scancel, sacct, scontrol) that talk to a
    /// koalesce server: `koalesce slurm-commands install DIR`.
    SlurmCommands {
        #[command(subcommand)]
        which: slurm_cmds::SlurmCommandsCommand,
    },
    /// Peering servers (seed 002): the grid queue, where each job runs and why, the peers.
    Federation {
        #[command(subcommand)]
        which: federation_cmds::FederationCommand,
    },
    /// Benchmarks (wall time, throughput, memory), printed as tables.
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
    /// Print a shell completion script: `koalesce completions bash > /etc/bash_completion.d/koalesce`
    /// (zsh: into a directory of $fpath as `_koalesce`; fish: ~/.config/fish/completions/koalesce.fish).
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        #[arg(value_enum, value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print the koalesce(1) man page (`koalesce man | man -l -`), or with --dir write one page
    /// per command there (koalesce.1, koalesce-submit.1, ...).
    Man {
        /// Write every command's page into this directory instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
}

/// `koalesce completions SHELL`.
fn completions(shell: clap_complete::Shell) -> anyhow::Result<std::process::ExitCode> {
    use clap::CommandFactory;
    clap_complete::generate(shell, &mut Cli::command(), "koalesce", &mut std::io::stdout());
    Ok(std::process::ExitCode::SUCCESS)
}

/// `koalesce man [--dir DIR]`.
fn man(dir: Option<std::path::PathBuf>) -> anyhow::Result<std::process::ExitCode> {
    use anyhow::Context;
    use clap::CommandFactory;
    let cmd = Cli::command();
    match dir {
        None => clap_mangen::Man::new(cmd).render(&mut std::io::stdout())?,
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            fn write(cmd: &clap::Command, name: &str, dir: &std::path::Path) -> anyhow::Result<()> {
                let mut out = Vec::new();
                clap_mangen::Man::new(cmd.clone()).title(name.to_string()).render(&mut out)?;
                std::fs::write(dir.join(format!("{name}.1")), out)?;
                for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
                    write(sub, &format!("{name}-{}", sub.get_name()), dir)?;
                }
                Ok(())
            }
            write(&cmd, "koalesce", &dir)?;
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
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
    /// Throughput while jobs run: submit many trivial jobs to a fresh server and wait until all ended.
    E2e(client_cmds::BenchE2eArgs),
    /// The core's cost per TTD placement with one advance reservation per job (001 §5.2.1).
    Ttd(broker_cmds::BenchTtdArgs),
    /// Cost of one REQUIREMENTS / RANK evaluation (compiled expression vs. hand-written Rust).
    Expr(expr_bench::BenchExprArgs),
    /// Rendering the HTML reports and the dashboard's charts for a run of many jobs.
    Html(html_bench::BenchHtmlArgs),
    /// Server-side render time of the dashboard's pages with 100,000 jobs.
    Dashboard(dashboard_bench::BenchDashboardArgs),
    /// Start skew of coupled jobs across 3 Slurm clusters (a test bed it brings up), from the
    /// programs' own clocks, and submit-to-start latency.
    Costart(slurm_bench::BenchCostartArgs),
    /// Submit-to-start latency and throughput through koalesce against direct sbatch on one
    /// Slurm cluster, side by side in one run.
    SlurmOverhead(slurm_bench::BenchSlurmOverheadArgs),
    /// Third-party pushes between storage agents on the shaped bed (root; loopback otherwise):
    /// throughput as a fraction of each link's shaped rate (goal >= 90 %) and the forecast
    /// error (MAPE) of the transfer time over the run.
    Transfers(transfer_bench::BenchTransfersArgs),
}

/// Command-line tools die quietly on a closed pipe (`koalesce sim … | head`), as `cat` does;
/// Rust ignores SIGPIPE by default and would panic on the failed print instead. The daemon
/// keeps ignoring it: a client that hangs up must never kill the server.
fn restore_default_sigpipe() {
    // SAFETY: called once at the start of main, before any thread exists; SIG_DFL is a valid
    // disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> std::process::ExitCode {
    // Started as sbatch, squeue, scancel, sacct or scontrol (links made by `slurm-commands
    // install`): act as that command.
    if let Some(name) = slurm_cmds::invoked_as() {
        restore_default_sigpipe();
        return slurm_cmds::dispatch(&name);
    }
    let cli = Cli::parse();
    let daemon = matches!(
        cli.command,
        Command::Server(server_cmds::ServerCommand::Server(_)) | Command::StorageAgent(_)
    );
    if !daemon {
        restore_default_sigpipe();
    }
    let result = match cli.command {
        Command::Sim(c) => c.run(),
        Command::Server(c) => c.run(),
        Command::Client(c) => c.run(),
        Command::Experiment(c) => c.run(),
        Command::Convert(a) => a.run(),
        Command::StorageAgent(a) => a.run(),
        Command::Netbed { which } => which.run(),
        Command::Testbed { which } => which.run(),
        Command::SlurmCommands { which } => which.run(),
        Command::Federation { which } => which.run(),
        Command::Bench { which } => match which {
            BenchCommand::Easy(a) => a.run(),
            BenchCommand::Submit(a) => a.run(),
            BenchCommand::Scan(a) => a.run(),
            BenchCommand::P2p(a) => a.run(),
            BenchCommand::E2e(a) => a.run(),
            BenchCommand::Ttd(a) => a.run(),
            BenchCommand::Expr(a) => a.run(),
            BenchCommand::Html(a) => a.run(),
            BenchCommand::Dashboard(a) => a.run(),
            BenchCommand::Costart(a) => a.run(),
            BenchCommand::SlurmOverhead(a) => a.run(),
            BenchCommand::Transfers(a) => a.run(),
        },
        Command::Completions { shell } => completions(shell),
        Command::Man { dir } => man(dir),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
