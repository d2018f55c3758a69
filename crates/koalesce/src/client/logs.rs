//! `koalesce logs JOB [--component N] [--stderr] [--follow] [--tail N]`: a component's output
//! through the API (`GET /api/v1/jobs/{id}/logs`), so it works from any machine that reaches
//! the server. With `--follow` it keeps printing what the component writes until the job ends
//! (as `tail -f`, or Slurm users' `tail -f slurm-N.out`).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::api::{is_final_state, LogRequest};
use crate::client_cmds::Connection;

/// Arguments of `koalesce logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// Job id, or `g<N>` for grid job N (its logs wherever it ran: here, or back from the
    /// peer it migrated to once it ended).
    #[arg(value_name = "JOB")]
    pub id: crate::federation_cmds::JobRef,
    /// Which component's output (0 is the first).
    #[arg(long, short, default_value_t = 0, value_name = "N")]
    pub component: u64,
    /// Standard error instead of standard output.
    #[arg(long)]
    pub stderr: bool,
    /// Keep printing new output until the job ends.
    #[arg(long, short)]
    pub follow: bool,
    /// Only the last N lines (with --follow: then what follows).
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
    #[command(flatten)]
    pub conn: Connection,
}

/// How often `--follow` asks for more.
const FOLLOW_POLL: Duration = Duration::from_millis(250);

impl LogsArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let client = self.conn.client();
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        let mut q = LogRequest {
            component: self.component,
            stderr: self.stderr,
            offset: 0,
            tail: self.tail,
        };
        let job_path = match self.id {
            crate::federation_cmds::JobRef::Job(id) => format!("/api/v1/jobs/{id}"),
            crate::federation_cmds::JobRef::Grid(id) => format!("/api/v1/grid/jobs/{id}"),
        };
        let mut chunk = client.logs_of(&job_path, &q, &mut out)?;
        if chunk.lines_cut > 0 && !self.follow {
            out.flush()?;
            eprintln!("({} earlier line(s) not shown; without --tail: all of them)", chunk.lines_cut);
        }
        q.tail = None;
        q.offset = chunk.size;
        if !self.follow {
            out.flush()?;
            return Ok(ExitCode::SUCCESS);
        }
        loop {
            out.flush()?;
            // The job's state was read with the output: output written before it ended is
            // all there once one more read after the end comes back empty.
            let ended = is_final_state(&chunk.state);
            std::thread::sleep(if ended { Duration::ZERO } else { FOLLOW_POLL });
            chunk = client.logs_of(&job_path, &q, &mut out)?;
            q.offset = q.offset.max(chunk.size);
            if ended && chunk.written == 0 {
                break;
            }
        }
        out.flush()?;
        Ok(ExitCode::SUCCESS)
    }
}
