//! The test bed's daemons as processes: finding the programs, starting them (they daemonize
//! and write pid files), telling whether a pid file's process is still ours, stopping them,
//! and finding processes a stopped bed left behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

/// Programs the bed needs.
pub const PROGRAMS: [&str; 8] = ["munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol", "scancel"];

/// The install command named in errors.
pub const INSTALL_HINT: &str = "apt-get install -y slurm-wlm munge";

/// Where the programs are found: PATH, then the sbin directories (not in every user's PATH).
pub fn search_path() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for d in ["/usr/sbin", "/sbin", "/usr/local/sbin", "/usr/bin", "/usr/local/bin"] {
        v.push(PathBuf::from(d));
    }
    v
}

/// Absolute paths of [`PROGRAMS`] in `dirs`, or an error naming the missing ones and the
/// install command.
pub fn find_programs(dirs: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for p in PROGRAMS {
        match dirs.iter().map(|d| d.join(p)).find(|c| is_executable(c)) {
            Some(path) => found.push(path),
            None => missing.push(p),
        }
    }
    anyhow::ensure!(
        missing.is_empty(),
        "Slurm and munge are needed for the test bed, but {} not found (looked in PATH and the sbin directories). Install them with: {INSTALL_HINT}",
        missing.join(", ")
    );
    Ok(found)
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The pid in a pid file.
pub fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The process `pid` lives and its command line contains `needle` (so a recycled pid is not
/// taken for one of the bed's daemons).
pub fn alive_with(pid: u32, needle: &str) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let zombie = stat.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z'));
    !zombie && String::from_utf8_lossy(&cmdline).replace('\0', " ").contains(needle)
}

/// The pid of a daemon from its pid file, if that process still runs with `needle` in its
/// command line.
pub fn daemon_pid(pid_file: &Path, needle: &str) -> Option<u32> {
    read_pid(pid_file).filter(|&p| alive_with(p, needle))
}

/// Starts a daemon that forks into the background. Its early error output (before it opens
/// its log) goes to `LOG.start-err`: a pipe would be held open by the daemonized child.
pub fn spawn_daemon(mut cmd: Command, log: &Path) -> anyhow::Result<std::process::Child> {
    let err = std::fs::File::create(start_err(log)).with_context(|| format!("creating {}", start_err(log).display()))?;
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(err);
    cmd.spawn()
        .with_context(|| format!("starting {:?} (log {})", cmd.get_program(), log.display()))
}

fn start_err(log: &Path) -> PathBuf {
    let mut name = log.file_name().unwrap_or_default().to_os_string();
    name.push(".start-err");
    log.with_file_name(name)
}

/// Waits for a [`spawn_daemon`] child's foreground part to exit successfully.
pub fn finish_spawn(mut child: std::process::Child, what: &str, log: &Path) -> anyhow::Result<()> {
    let status = child.wait().with_context(|| format!("waiting for {what}"))?;
    anyhow::ensure!(
        status.success(),
        "{what} did not start ({status}): {}\n{}",
        std::fs::read_to_string(start_err(log)).unwrap_or_default().trim(),
        log_tail(log, 10)
    );
    Ok(())
}

/// Waits until `pid_file` names a live process with `needle` in its command line.
pub fn wait_pid(pid_file: &Path, needle: &str, timeout: Duration, log: &Path) -> anyhow::Result<u32> {
    let t0 = Instant::now();
    loop {
        if let Some(p) = daemon_pid(pid_file, needle) {
            return Ok(p);
        }
        if t0.elapsed() > timeout {
            anyhow::bail!(
                "no live process in {} after {:?}\n{}",
                pid_file.display(),
                timeout,
                log_tail(log, 10)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last `n` lines of a log file, indented, for error messages.
pub fn log_tail(log: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = &lines[lines.len().saturating_sub(n)..];
    if tail.is_empty() {
        return format!("(nothing in {})", log.display());
    }
    format!("last lines of {}:\n  {}", log.display(), tail.join("\n  "))
}

/// Sends `signal` to each pid, then waits until all are gone (up to `wait`); sends SIGKILL
/// to those still there. Returns the pids that had to be killed.
pub fn stop_pids(pids: &[(u32, String)], signal: i32, wait: Duration) -> Vec<u32> {
    for (pid, _) in pids {
        unsafe {
            libc::kill(*pid as i32, signal);
        }
    }
    let t0 = Instant::now();
    while t0.elapsed() < wait && pids.iter().any(|(p, n)| alive_with(*p, n)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut killed = Vec::new();
    for (pid, needle) in pids {
        if alive_with(*pid, needle) {
            unsafe {
                libc::kill(*pid as i32, libc::SIGKILL);
            }
            killed.push(*pid);
        }
    }
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(2) && pids.iter().any(|(p, n)| alive_with(*p, n)) {
        std::thread::sleep(Duration::from_millis(10));
    }
    killed
}

/// Processes a stopped bed left behind: every `slurmstepd` whose environment points
/// `SLURM_CONF` into `dir` (slurmd passes its own), and all their descendants (the batch
/// scripts, supervisors and programs of jobs that were still running).
pub fn leftovers(dir: &Path) -> Vec<u32> {
    let prefix = format!("SLURM_CONF={}/", dir.display());
    let mut parent_of: Vec<(u32, u32)> = Vec::new();
    let mut roots = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let ppid: u32 = rest.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        parent_of.push((pid, ppid));
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() == "slurmstepd" {
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            if env.split(|b| *b == 0).any(|v| v.starts_with(prefix.as_bytes())) {
                roots.push(pid);
            }
        }
    }
    let mut out = roots.clone();
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out
}

/// Kills [`leftovers`] (SIGKILL). Returns how many there were.
pub fn kill_leftovers(dir: &Path) -> usize {
    let pids = leftovers(dir);
    for p in &pids {
        unsafe {
            libc::kill(*p as i32, libc::SIGKILL);
        }
    }
    pids.len()
}

/// This machine's short host name (`hostname -s`).
pub fn short_hostname() -> String {
    let mut buf = [0u8; 256];
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).into_owned();
    name.split('.').next().unwrap_or("localhost").to_string()
}

/// A TCP port can be bound on every address now (Slurm's daemons bind 0.0.0.0).
pub fn port_free(port: u16) -> bool {
    std::net::TcpListener::bind(("0.0.0.0", port)).is_ok()
}

/// `count` ports: from `base` on (all must be free), or a free block picked at random in
/// 20000..32000 (below the kernel's ephemeral range, so outgoing connections do not take
/// them later).
pub fn pick_ports(count: u32, base: Option<u16>) -> anyhow::Result<Vec<u16>> {
    if let Some(b) = base {
        let ports: Vec<u16> = (0..count)
            .map(|i| {
                b.checked_add(i as u16)
                    .ok_or_else(|| anyhow::anyhow!("--port-base {b} + {count} ports exceeds 65535"))
            })
            .collect::<anyhow::Result<_>>()?;
        let busy: Vec<u16> = ports.iter().copied().filter(|p| !port_free(*p)).collect();
        anyhow::ensure!(busy.is_empty(), "ports in use: {busy:?} (choose another --port-base)");
        return Ok(ports);
    }
    let seed = std::process::id() as u64 ^ (koalesce_server::now_ms() << 7);
    let span = 12_000u64.saturating_sub(count as u64).max(1);
    for attempt in 0..200u64 {
        let start = 20_000 + (seed.wrapping_mul(6364136223846793005).wrapping_add(attempt * 7919) >> 11) % span;
        let ports: Vec<u16> = (0..count).map(|i| (start + i as u64) as u16).collect();
        if ports.iter().all(|p| port_free(*p)) {
            return Ok(ports);
        }
    }
    anyhow::bail!("no block of {count} free ports found in 20000..32000")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_programs_name_the_install_command() {
        let empty = tempfile::tempdir().unwrap();
        let e = find_programs(&[empty.path().to_path_buf()]).unwrap_err().to_string();
        assert!(e.contains("apt-get install -y slurm-wlm munge"), "{e}");
        assert!(e.contains("slurmctld") && e.contains("munged"), "{e}");
        // A file that is not executable does not count.
        std::fs::write(empty.path().join("munged"), "").unwrap();
        let e = find_programs(&[empty.path().to_path_buf()]).unwrap_err().to_string();
        assert!(e.contains("munged"), "{e}");
    }

    #[test]
    fn pids_and_ports() {
        let me = std::process::id();
        let exe = std::env::current_exe().unwrap();
        let name = exe.file_name().unwrap().to_string_lossy().into_owned();
        assert!(alive_with(me, &name));
        assert!(!alive_with(me, "certainly-not-in-my-command-line"));
        assert!(!alive_with(u32::MAX - 1, ""));
        let l = std::net::TcpListener::bind(("0.0.0.0", 0)).unwrap();
        let taken = l.local_addr().unwrap().port();
        assert!(!port_free(taken));
        assert!(pick_ports(1, Some(taken)).is_err());
        let p = pick_ports(9, None).unwrap();
        assert_eq!(p.len(), 9);
        assert!(p.windows(2).all(|w| w[1] == w[0] + 1));
        assert!(p.iter().all(|&x| (20_000..32_000).contains(&x)));
        assert!(pick_ports(3, Some(65534)).is_err());
        assert!(!short_hostname().is_empty());
    }
}
