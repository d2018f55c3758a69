//! The component supervisor as a stand-alone program, for the koalesce-server crate's own
//! integration tests (which cannot run the `koalesce` binary). `koalesce server` uses
//! `koalesce supervise` instead; both parse the same [`SuperviseOptions`] and call the same
//! [`koalesce_server::supervise::supervise_main`].
//!
//! Usage: `koalesce-supervise --dir DIR [OPTIONS] -- PROGRAM [ARGS...]`, or
//! `koalesce-supervise --resident-launcher` (the resident launcher, [`koalesce_server::launcher`],
//! as `koalesce supervise-launcher`).

use clap::Parser;
use koalesce_server::supervise::SuperviseOptions;

/// Supervise one component (started by the server's local executor).
#[derive(Debug, Parser)]
#[command(name = "koalesce-supervise")]
struct Cli {
    #[command(flatten)]
    opts: SuperviseOptions,
}

fn main() {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == koalesce_server::launcher::LAUNCHER_FLAG)
    {
        std::process::exit(koalesce_server::launcher::launcher_main());
    }
    let cli = Cli::parse();
    std::process::exit(koalesce_server::supervise::supervise_main(&cli.opts));
}
