//! Slurm clusters end to end: the test bed and server that `koalesce demo --slurm`,
//! `koalesce bench costart` and `koalesce bench slurm-overhead` bring up, and the two
//! benchmarks.
//!
//! - `bench costart`: coupled jobs with one component on each of 3 clusters, submitted through
//!   a koalesce server; every program prints its own clock (`date +%s%N`) when it starts. Start
//!   skew = latest − earliest start of a job's components; submit-to-start = the client's
//!   clock before the submission to the earliest start.
//! - `bench slurm-overhead`: single-component jobs on one cluster, submitted through koalesce
//!   and straight with `sbatch`, alternating, in one run: submit-to-start latency (sequential)
//!   and throughput (a burst of jobs, submission of the first to start of the last), and
//!   optionally `--queued N` jobs over all clusters at once with the controllers' load
//!   (`sdiag`: RPCs served, server threads, agent queue).
//!
//! This module holds the bed and the server both bring up ([`Bed`], [`Grid`]); the benchmarks
//! are in [`costart`], [`overhead`] and [`queued`], what they measure in [`measure`].

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use koalesce::testbed::{TestBed, UpOptions};
use serde_json::Value;

use crate::client_cmds::api::Client;
use crate::client_cmds::local_server::{LocalServer, LocalServerOptions};

mod costart;
mod measure;
mod overhead;
mod queued;

pub use costart::BenchCostartArgs;
pub use overhead::BenchSlurmOverheadArgs;

/// A test bed for a command: a fresh one in a temporary directory, torn down (and deleted)
/// when dropped, or an existing one (`--bed DIR`), left as it is.
pub struct Bed {
    pub bed: TestBed,
    owned: bool,
    _tmp: Option<tempfile::TempDir>,
}

impl Bed {
    /// Opens the bed in `existing` (it must be up), or brings up a fresh one of `clusters`
    /// clusters × 2 nodes × 32 CPUs, controllers started `tick_offset_ms` apart.
    pub fn get(existing: Option<&Path>, clusters: u32, tick_offset_ms: u64) -> anyhow::Result<Bed> {
        if let Some(dir) = existing {
            let bed = TestBed::open(dir)?;
            if !bed.status().all_up() {
                bail!(
                    "the test bed in {} is not (fully) up: run `koalesce testbed up --dir {}` or `testbed status`",
                    dir.display(),
                    dir.display()
                );
            }
            return Ok(Bed {
                bed,
                owned: false,
                _tmp: None,
            });
        }
        // Short path: munge's and slurmstepd's Unix sockets live under it.
        let tmp = tempfile::Builder::new()
            .prefix("kzbed")
            .tempdir_in("/tmp")
            .context("creating the test bed's directory")?;
        // Ctrl-C (or SIGTERM) from here on tears the bed down instead of leaving it running.
        interrupt::tear_down_on_signal(tmp.path());
        let mut o = UpOptions::new(tmp.path().join("bed"));
        o.clusters = clusters;
        o.tick_offset_ms = tick_offset_ms;
        let t0 = Instant::now();
        let (bed, _) = TestBed::up(&o)?;
        eprintln!(
            "test bed: {clusters} Slurm clusters x 2 nodes x 32 CPUs up in {:.1} s ({}; torn down at the end)",
            t0.elapsed().as_secs_f64(),
            bed.dir().display()
        );
        Ok(Bed {
            bed,
            owned: true,
            _tmp: Some(tmp),
        })
    }

    /// The bed's `server.toml` (its `[[sites]]`), to append to a server config.
    pub fn sites_toml(&self) -> anyhow::Result<String> {
        let p = self.bed.server_toml();
        std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))
    }
}

impl Bed {
    /// Stops `server` (driving the bed) before the bed is torn down on Ctrl-C, and removes its
    /// temporary directory then (the exit skips the destructors that would).
    pub fn stop_on_interrupt(&self, server: &LocalServer) {
        if let (true, Some(pid)) = (self.owned, server.pid()) {
            interrupt::stop_first(pid, server.temp_dir());
        }
    }
}

/// Tearing a fresh bed down when the command is interrupted (SIGINT, SIGTERM, SIGHUP): the
/// handler only writes a byte to a pipe; a thread waiting on the pipe stops the registered
/// processes (the server), tears the bed down, deletes its directory and exits with 130.
mod interrupt {
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicI32, Ordering};
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    static PIPE: AtomicI32 = AtomicI32::new(-1);
    static FIRST: Mutex<Vec<u32>> = Mutex::new(Vec::new());
    static DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

    extern "C" fn on_signal(_: nix::libc::c_int) {
        let fd = PIPE.load(Ordering::SeqCst);
        if fd >= 0 {
            // SAFETY: write(2) is async-signal-safe; the descriptor stays open for the
            // process's life.
            unsafe { nix::libc::write(fd, b"x".as_ptr().cast(), 1) };
        }
    }

    /// Processes to SIGTERM (and wait for, 10 s at most) before the bed goes down, and the
    /// directory each used (removed once it stopped).
    pub fn stop_first(pid: u32, dir: Option<&Path>) {
        FIRST.lock().unwrap_or_else(|p| p.into_inner()).push(pid);
        if let Some(d) = dir {
            DIRS.lock().unwrap_or_else(|p| p.into_inner()).push(d.to_path_buf());
        }
    }

    /// Installs the handlers for the bed under `root` (its temporary directory).
    pub fn tear_down_on_signal(root: &Path) {
        use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
        let Ok((read, write)) = nix::unistd::pipe() else { return };
        PIPE.store(write.as_raw_fd(), Ordering::SeqCst);
        std::mem::forget(write);
        let root: PathBuf = root.to_path_buf();
        std::thread::spawn(move || watch(read, root));
        let action = SigAction::new(SigHandler::Handler(on_signal), SaFlags::SA_RESTART, SigSet::empty());
        for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
            // SAFETY: the handler only writes to a pipe (async-signal-safe).
            let _ = unsafe { sigaction(sig, &action) };
        }
    }

    fn watch(read: OwnedFd, root: PathBuf) {
        let mut b = [0u8; 1];
        if !matches!(nix::unistd::read(&read, &mut b), Ok(1)) {
            return;
        }
        eprintln!("\ninterrupted: stopping the server and tearing the test bed down");
        let pids: Vec<u32> = FIRST.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for &pid in &pids {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
        }
        let t0 = Instant::now();
        for &pid in &pids {
            use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
            let pid = nix::unistd::Pid::from_raw(pid as i32);
            while t0.elapsed() < Duration::from_secs(10) {
                match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) => std::thread::sleep(Duration::from_millis(25)),
                    _ => break,
                }
            }
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
        let bed = root.join("bed");
        match koalesce::testbed::TestBed::open(&bed).and_then(|b| b.down(true)) {
            Ok(_) => eprintln!("test bed torn down"),
            Err(e) => eprintln!(
                "tearing the test bed down failed: {e:#} (run `koalesce testbed down --dir {}`)",
                bed.display()
            ),
        }
        let _ = std::fs::remove_dir_all(&root);
        for d in DIRS.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = std::fs::remove_dir_all(d);
        }
        std::process::exit(130);
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        if self.owned {
            match self.bed.down(true) {
                Ok(_) => eprintln!("test bed torn down"),
                Err(e) => eprintln!(
                    "tearing the test bed down failed: {e:#} (run `koalesce testbed down --dir {}`)",
                    self.bed.dir().display()
                ),
            }
        }
    }
}

/// A server config for the Slurm commands: placement at submission, fast scans, the bed's
/// sites. Jobs run as `nobody` when the server runs as root.
pub fn server_config(bed: &Bed) -> anyhow::Result<String> {
    Ok(format!(
        "# koalesce server config written for the Slurm test bed\n\
         poll_interval_ms = 50\n\
         [users]\n\
         \"*\" = \"nobody\"\n\
         [scheduler]\n\
         place_on_submit = true\n\
         min_claim_retry_ms = 200\n\
         [scheduler.scan_interval]\n\
         kind = \"fixed\"\n\
         interval_ms = 200\n\n{}",
        bed.sites_toml()?
    ))
}

/// A koalesce server over a bed, with an admin token and a client.
pub struct Grid {
    pub server: LocalServer,
    pub client: Client,
}

impl Grid {
    pub fn start(bed: &Bed) -> anyhow::Result<Grid> {
        let prepared = LocalServer::prepare(&LocalServerOptions {
            config_toml: Some(server_config(bed)?),
            ..Default::default()
        })?;
        let token = prepared.create_token("bench", true)?;
        let server = prepared.start(Duration::from_secs(60))?;
        bed.stop_on_interrupt(&server);
        let client = Client::new(&server.url, Some(token), Duration::from_secs(60));
        Ok(Grid { server, client })
    }

    /// Waits until job `id` ended; returns its JSON.
    pub fn wait_end(&self, id: u64, timeout: Duration) -> anyhow::Result<Value> {
        let t0 = Instant::now();
        loop {
            let j = self.client.job_json(id)?;
            if matches!(j["state"].as_str(), Some("succeeded" | "failed" | "cancelled")) {
                return Ok(j);
            }
            if t0.elapsed() > timeout {
                bail!(
                    "job {id} did not end within {timeout:?}: {j}\nserver log:\n{}",
                    self.server.log_tail(20)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
