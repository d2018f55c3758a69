//! `koalesce bench dashboard`: the dashboard's pages rendered server-side with many jobs
//! (default 100,000 ended jobs in the store and 1,000 queued in the core); see
//! `koalesce_server::web::bench`.

use std::process::ExitCode;

use clap::Args;

#[derive(Debug, Args)]
pub struct BenchDashboardArgs {
    /// Ended jobs written into the store.
    #[arg(long, default_value_t = 100_000)]
    pub jobs: usize,
    /// Jobs submitted through the API that stay queued in the core.
    #[arg(long, default_value_t = 1_000)]
    pub live: usize,
    /// Renders of every page; median, 95th percentile and maximum are printed.
    #[arg(long, default_value_t = 20)]
    pub repeat: usize,
}

impl BenchDashboardArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let r = koalesce_server::web::bench::run(self.jobs, self.live, self.repeat)?;
        print!("{}", r.table());
        Ok(ExitCode::SUCCESS)
    }
}
