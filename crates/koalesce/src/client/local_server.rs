//! Starting a private `koalesce server` as a child process (for `koalesce demo` and
//! `koalesce bench submit`), on 127.0.0.1 with a port of its choosing and a temporary data dir.
//!
//! The server is stopped when the [`LocalServer`] is dropped (SIGTERM, then SIGKILL after a
//! grace period), whatever way the caller exits.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::api::Client;

/// A server child process and the data dir it runs on.
pub struct LocalServer {
    child: Option<Child>,
    /// Keeps the temporary data dir alive (removed on drop) unless the caller kept it.
    _tmp: Option<tempfile::TempDir>,
    pub data_dir: PathBuf,
    pub url: String,
    pub log_path: PathBuf,
}

/// How to start a [`LocalServer`].
#[derive(Debug, Default, Clone)]
pub struct LocalServerOptions {
    /// Text of the `--config` file (none: the server's defaults).
    pub config_toml: Option<String>,
    /// Keep the data dir after the server stops (its path is printed by the caller).
    pub keep_data_dir: bool,
    /// Extra arguments after `server ...`.
    pub extra_args: Vec<String>,
    /// Address to listen on (default `127.0.0.1:0`: a port the server picks).
    pub listen: Option<String>,
}

/// Runs `koalesce token create USER [--admin] --data-dir DIR` and returns the printed token.
pub fn create_token(exe: &Path, data_dir: &Path, user: &str, admin: bool) -> anyhow::Result<String> {
    let mut cmd = Command::new(exe);
    cmd.args(["token", "create", user]);
    if admin {
        cmd.arg("--admin");
    }
    cmd.arg("--data-dir").arg(data_dir);
    let out = cmd.output().with_context(|| format!("running {} token create", exe.display()))?;
    if !out.status.success() {
        bail!(
            "`koalesce token create {user}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse_token_output(&String::from_utf8_lossy(&out.stdout)).with_context(|| format!("`koalesce token create {user}` printed no token"))
}

/// The token in `token create`'s output: the last word of the last non-empty line.
pub fn parse_token_output(stdout: &str) -> anyhow::Result<String> {
    stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| l.split_whitespace().last())
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("empty output"))
}

impl LocalServer {
    /// Creates a temporary data dir, writes the config, and returns the paths to use; the
    /// server is not started yet so that tokens can be created first (see [`Self::start`]).
    pub fn prepare(opts: &LocalServerOptions) -> anyhow::Result<PreparedServer> {
        let tmp = tempfile::Builder::new()
            .prefix("koalesce-")
            .tempdir()
            .context("creating a temporary data dir")?;
        let data_dir = tmp.path().join("data");
        std::fs::create_dir_all(&data_dir)?;
        let config_path = match &opts.config_toml {
            Some(text) => {
                let p = tmp.path().join("server.toml");
                std::fs::write(&p, text)?;
                Some(p)
            }
            None => None,
        };
        let exe = std::env::current_exe().context("finding the koalesce executable")?;
        Ok(PreparedServer {
            exe,
            tmp,
            data_dir,
            config_path,
            keep: opts.keep_data_dir,
            extra_args: opts.extra_args.clone(),
            listen: opts.listen.clone().unwrap_or_else(|| "127.0.0.1:0".into()),
        })
    }
}

/// A data dir and config ready for a server; make tokens, then [`PreparedServer::start`].
pub struct PreparedServer {
    pub exe: PathBuf,
    tmp: tempfile::TempDir,
    pub data_dir: PathBuf,
    pub config_path: Option<PathBuf>,
    keep: bool,
    extra_args: Vec<String>,
    listen: String,
}

impl PreparedServer {
    pub fn create_token(&self, user: &str, admin: bool) -> anyhow::Result<String> {
        create_token(&self.exe, &self.data_dir, user, admin)
    }

    /// Starts the server on 127.0.0.1 with a port the server picks itself (it writes the
    /// address to `DIR/server.addr`) and waits (up to `ready_timeout`) until `/healthz` answers.
    pub fn start(self, ready_timeout: Duration) -> anyhow::Result<LocalServer> {
        let addr_file = self.data_dir.join(ADDR_FILE);
        let _ = std::fs::remove_file(&addr_file);
        let log_path = self.tmp.path().join("server.log");
        let log = std::fs::File::create(&log_path)?;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("server")
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--listen")
            .arg(&self.listen);
        if let Some(c) = &self.config_path {
            cmd.arg("--config").arg(c);
        }
        cmd.args(&self.extra_args);
        cmd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
        let child = cmd.spawn().with_context(|| format!("starting {} server", self.exe.display()))?;
        let tmp = if self.keep {
            // Keep the directory on purpose: the caller prints its path.
            let _ = self.tmp.keep();
            None
        } else {
            Some(self.tmp)
        };
        let mut server = LocalServer {
            child: Some(child),
            _tmp: tmp,
            data_dir: self.data_dir,
            url: String::new(),
            log_path,
        };
        server.wait_ready(&addr_file, ready_timeout)?;
        Ok(server)
    }
}

/// The file in the data dir where the server writes the `host:port` it listens on.
pub const ADDR_FILE: &str = "server.addr";

impl LocalServer {
    fn wait_ready(&mut self, addr_file: &Path, timeout: Duration) -> anyhow::Result<()> {
        let t0 = Instant::now();
        let mut delay = Duration::from_millis(10);
        loop {
            if self.url.is_empty() {
                if let Ok(addr) = std::fs::read_to_string(addr_file) {
                    let addr = addr.trim();
                    if !addr.is_empty() {
                        self.url = format!("http://{addr}");
                    }
                }
            }
            if !self.url.is_empty() && Client::new(&self.url, None, Duration::from_secs(2)).health().is_ok() {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    self.child = None;
                    bail!("the server exited during start-up ({status}); its log:\n{}", self.log_tail(40));
                }
            }
            if t0.elapsed() > timeout {
                bail!(
                    "the server was not ready (address file {}, URL '{}') within {:?}; its log:\n{}",
                    addr_file.display(),
                    self.url,
                    timeout,
                    self.log_tail(40)
                );
            }
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_millis(100));
        }
    }

    /// The temporary directory that holds the data dir, config and log, removed when the server
    /// is dropped (None when it is kept on purpose).
    pub fn temp_dir(&self) -> Option<&Path> {
        self._tmp.as_ref().map(|t| t.path())
    }

    /// The server process's id (None once stopped).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// The last `n` lines of the server's log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Stops the server: SIGTERM, then SIGKILL if it has not exited after `grace`.
    pub fn stop(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else { return };
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        // Our own child, not reaped yet: the pid cannot have been reused.
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
        }
        let t0 = Instant::now();
        while t0.elapsed() < grace {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_is_last_word_of_last_line() {
        assert_eq!(parse_token_output("kz_abc123\n").unwrap(), "kz_abc123");
        assert_eq!(parse_token_output("created token for demo (admin):\n  kz_x\n\n").unwrap(), "kz_x");
        assert_eq!(parse_token_output("token: kz_y").unwrap(), "kz_y");
        assert!(parse_token_output("\n").is_err());
    }
}
