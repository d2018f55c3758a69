//! The `koalesce server` child (with the Slurm commands installed) that `slurm_commands.rs` and
//! `slurm_workflow_tools.rs` drive.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::slurm_common::BIN;

/// Two local sites.
pub const LOCAL_SITES: &str = "[[sites]]\nname = \"vu\"\nprocessors = 8\n[[sites]]\nname = \"leiden\"\nprocessors = 4\n";

/// A `koalesce server` child on a temporary directory, with the Slurm commands installed.
pub struct Server {
    pub dir: tempfile::TempDir,
    pub child: Child,
    pub url: String,
    pub token: String,
    pub bin: PathBuf,
}

impl Server {
    /// Starts a server with `sites` (TOML `[[sites]]` tables); jobs may also read `read_only`
    /// and write the test directory's `shared/` (and `/dev/shm`, which Python's
    /// multiprocessing needs).
    pub fn start(sites: &str, read_only: &[PathBuf]) -> Server {
        let dir = tempfile::Builder::new().prefix("koalesce-slurmcmd-").tempdir().unwrap();
        let data = dir.path().join("data");
        let shared = dir.path().join("shared");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::create_dir_all(&shared).unwrap();
        let ro: Vec<String> = read_only.iter().map(|p| format!("{:?}", p.display().to_string())).collect();
        // Test users have no Unix accounts: as root their jobs run as root (still sandboxed).
        let config = format!(
            "poll_interval_ms = 50\nallow_root_jobs = true\n{sites}\n\
             [scheduler]\nplace_on_submit = true\nmin_claim_retry_ms = 100\n\
             scan_interval = {{ kind = \"fixed\", interval_ms = 100 }}\n\
             [users]\n\"*\" = \"root\"\n[sandbox]\nread_only = [{}]\nread_write = [{:?}, \"/dev/shm\"]\n",
            ro.join(", "),
            shared.display().to_string()
        );
        std::fs::write(dir.path().join("server.toml"), config).unwrap();
        let out = Command::new(BIN)
            .args(["token", "create", "alice", "--data-dir"])
            .arg(&data)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let token = String::from_utf8_lossy(&out.stdout).split_whitespace().last().unwrap().to_string();
        let (child, url) = Server::spawn(dir.path());
        let bin = dir.path().join("bin");
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, format!("{token}\n")).unwrap();
        let s = Server {
            dir,
            child,
            url,
            token,
            bin,
        };
        s.install();
        s
    }

    /// Starts `koalesce server` on DIR/data with DIR/server.toml; its URL once it listens.
    pub fn spawn(dir: &Path) -> (Child, String) {
        let data = dir.join("data");
        let addr_file = data.join("server.addr");
        let _ = std::fs::remove_file(&addr_file);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("server.log"))
            .unwrap();
        let child = Command::new(BIN)
            .arg("server")
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen", "127.0.0.1:0", "--config"])
            .arg(dir.join("server.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        let url = loop {
            if let Ok(a) = std::fs::read_to_string(&addr_file) {
                if !a.trim().is_empty() {
                    break format!("http://{}", a.trim());
                }
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "the server did not start");
            std::thread::sleep(Duration::from_millis(50));
        };
        (child, url)
    }

    /// `koalesce slurm-commands install DIR/bin` for the server's current URL.
    pub fn install(&self) {
        let out = Command::new(BIN)
            .args(["slurm-commands", "install"])
            .arg(&self.bin)
            .arg("--url")
            .arg(&self.url)
            .arg("--token-file")
            .arg(self.dir.path().join("token"))
            .arg("--force")
            .output()
            .unwrap();
        assert!(out.status.success(), "install: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Stops the server (SIGTERM) and starts it again on the same data directory.
    pub fn restart(&mut self) {
        self.stop();
        let (child, url) = Server::spawn(self.dir.path());
        self.child = child;
        self.url = url;
        self.install();
    }

    pub fn stop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn shared(&self) -> PathBuf {
        self.dir.path().join("shared")
    }

    /// Runs an installed command (found through the link in DIR, connection from
    /// DIR/koalesce-client.toml: no KOALESCE_* variables) in `shared/`.
    pub fn run(&self, cmd: &str, args: &[&str]) -> Output {
        Command::new(self.bin.join(cmd))
            .args(args)
            .current_dir(self.shared())
            .env_remove("KOALESCE_URL")
            .env_remove("KOALESCE_TOKEN")
            .output()
            .unwrap()
    }

    pub fn stdout(&self, cmd: &str, args: &[&str]) -> String {
        let o = self.run(cmd, args);
        assert!(
            o.status.success(),
            "{cmd} {args:?}: {}\n{}",
            String::from_utf8_lossy(&o.stderr),
            self.log_tail()
        );
        String::from_utf8(o.stdout).unwrap()
    }

    pub fn log_tail(&self) -> String {
        let t = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Polls `squeue -h -j ID -o %T` until the job's state is final.
    pub fn wait_final(&self, id: &str) -> String {
        let t0 = Instant::now();
        loop {
            let s = self.stdout("squeue", &["-h", "-j", id, "-o", "%T"]).trim().to_string();
            if ["COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY"].contains(&s.as_str()) {
                return s;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "job {id} still {s}\n{}", self.log_tail());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}
