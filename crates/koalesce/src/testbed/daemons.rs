//! The daemons of a bed: starting munged and each cluster's slurmctld and slurmd's (inside
//! the cluster's network namespace when the bed has a network), waiting until they schedule,
//! stopping, freezing and restarting one cluster, and tearing everything down.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use koalesce_server::slurm::parse;
use nix::sys::signal::Signal;

use super::{lock_dir, network, procs, ClusterSpec, TestBed};

impl TestBed {
    pub(super) fn munge_pid(&self) -> Option<u32> {
        procs::daemon_pid(
            &self.spec.munge_dir().join("run/munged.pid"),
            &self.spec.munge_socket().display().to_string(),
        )
    }

    pub(super) fn ensure_munge(&self, started: &mut Vec<String>) -> anyhow::Result<()> {
        if self.munge_pid().is_some() {
            return Ok(());
        }
        let m = self.spec.munge_dir();
        let log = m.join("log/munged.log");
        let mut cmd = Command::new(self.program("munged"));
        cmd.arg(format!("--socket={}", self.spec.munge_socket().display()))
            .arg(format!("--key-file={}", m.join("etc/munge.key").display()))
            .arg(format!("--pid-file={}", m.join("run/munged.pid").display()))
            .arg(format!("--log-file={}", log.display()))
            .arg(format!("--seed-file={}", m.join("lib/munge.seed").display()))
            // A socket left by a munged that was killed would stop a plain start.
            .arg("--force");
        let child = procs::spawn_daemon(cmd, &log)?;
        procs::finish_spawn(child, "munged", &log)?;
        procs::wait_pid(
            &m.join("run/munged.pid"),
            &self.spec.munge_socket().display().to_string(),
            Duration::from_secs(10),
            &log,
        )?;
        started.push("munged".into());
        Ok(())
    }

    fn daemon_env(&self, cmd: &mut Command, cluster: &str) {
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("SLURM_") {
                cmd.env_remove(k);
            }
        }
        // slurmstepd inherits it: `down` finds the jobs a stopped bed left behind by it.
        cmd.env("SLURM_CONF", self.conf(cluster));
    }

    pub(super) fn controller_pid(&self, cluster: &str) -> Option<u32> {
        procs::daemon_pid(&self.spec.controller_pid_file(cluster), &self.conf(cluster).display().to_string())
    }

    /// On a network bed, makes `cmd` enter the cluster's namespace before exec (as `ip netns
    /// exec` does, without its mount namespace); the returned file must live until spawned.
    fn enter_netns(&self, cmd: &mut Command, cluster: &str) -> anyhow::Result<Option<std::fs::File>> {
        let Some(place) = network::placement(self.dir(), cluster) else {
            return Ok(None);
        };
        let path = Path::new("/run/netns").join(&place.netns);
        let f = std::fs::File::open(&path).with_context(|| {
            format!(
                "opening the namespace of cluster {cluster} ({}); is the network bed up?",
                path.display()
            )
        })?;
        let fd = f.as_raw_fd();
        // SAFETY: setns is async-signal-safe; the fd stays open in the parent until spawn
        // returns (it is close-on-exec, so the daemon does not keep it).
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(Some(f))
    }

    pub(super) fn node_pid(&self, cluster: &str, node: &str) -> Option<u32> {
        procs::daemon_pid(&self.spec.node_pid_file(cluster, node), &format!("-N {node}"))
    }

    /// Starts the controllers (back to back, or `offset_ms` apart) and slurmd's of `names`
    /// that are not running; returns the clusters whose controller was started.
    pub(super) fn start_daemons(&self, names: &[String], offset_ms: u64, started: &mut Vec<String>) -> anyhow::Result<Vec<String>> {
        let t0 = Instant::now();
        let mut fresh = Vec::new();
        let mut children = Vec::new();
        for (i, name) in names.iter().enumerate() {
            if self.controller_pid(name).is_some() {
                continue;
            }
            let due = Duration::from_millis(offset_ms * i as u64);
            if let Some(wait) = due.checked_sub(t0.elapsed()) {
                std::thread::sleep(wait);
            }
            let log = self.spec.cluster_dir(name).join("log/slurmctld.log");
            let mut cmd = Command::new(self.program("slurmctld"));
            cmd.arg("-f").arg(self.conf(name));
            self.daemon_env(&mut cmd, name);
            let _ns = self.enter_netns(&mut cmd, name)?;
            children.push((procs::spawn_daemon(cmd, &log)?, format!("slurmctld {name}"), log));
            fresh.push(name.clone());
        }
        for (child, what, log) in children.drain(..) {
            procs::finish_spawn(child, &what, &log)?;
            started.push(what);
        }
        for name in &fresh {
            let log = self.spec.cluster_dir(name).join("log/slurmctld.log");
            procs::wait_pid(
                &self.spec.controller_pid_file(name),
                &self.conf(name).display().to_string(),
                Duration::from_secs(20),
                &log,
            )?;
        }
        for name in names {
            let c = self.cluster(name)?;
            for n in &c.nodes {
                if self.node_pid(name, &n.name).is_some() {
                    continue;
                }
                let log = self.spec.cluster_dir(name).join(format!("log/slurmd-{}.log", n.name));
                let mut cmd = Command::new(self.program("slurmd"));
                cmd.arg("-f").arg(self.conf(name)).arg("-N").arg(&n.name);
                self.daemon_env(&mut cmd, name);
                let _ns = self.enter_netns(&mut cmd, name)?;
                children.push((procs::spawn_daemon(cmd, &log)?, format!("slurmd {}", n.name), log));
            }
        }
        for (child, what, log) in children {
            procs::finish_spawn(child, &what, &log)?;
            started.push(what);
        }
        for name in names {
            for n in &self.cluster(name)?.nodes {
                let log = self.spec.cluster_dir(name).join(format!("log/slurmd-{}.log", n.name));
                procs::wait_pid(
                    &self.spec.node_pid_file(name, &n.name),
                    &format!("-N {}", n.name),
                    Duration::from_secs(20),
                    &log,
                )?;
            }
        }
        Ok(fresh)
    }

    /// Waits until every node of `names` responds and, for the clusters in `probe`, the
    /// controller has scheduled and finished a probe job (a fresh controller takes a few
    /// seconds before its first scheduling pass), so every CPU is idle again.
    pub(super) fn wait_ready(&self, names: &[String], probe: &[String], timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        std::thread::scope(|s| {
            let handles: Vec<_> = names
                .iter()
                .map(|n| {
                    let p = probe.contains(n);
                    s.spawn(move || self.wait_cluster(n, p, deadline))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("readiness check panicked"))))
                .collect::<anyhow::Result<Vec<()>>>()
        })?;
        Ok(())
    }

    fn wait_cluster(&self, name: &str, probe: bool, deadline: Instant) -> anyhow::Result<()> {
        let client = self.client(name)?;
        let log = self.spec.cluster_dir(name).join("log/slurmctld.log");
        let fail = |what: String| anyhow::anyhow!("cluster {name}: {what}\n{}", procs::log_tail(&log, 8));
        let mut last;
        loop {
            match client.run_args("sinfo", &["-h", "-o", parse::SINFO_FORMAT]) {
                Ok(out) => match parse::parse_sinfo(&out.stdout) {
                    Ok(parts) => match parts.get(&self.spec.partition) {
                        Some(p) if p.nodes_responding() == self.spec.nodes => break,
                        Some(p) => last = format!("nodes: {:?}", p.node_states),
                        None => last = format!("no partition {}", self.spec.partition),
                    },
                    Err(e) => last = e.to_string(),
                },
                Err(e) => last = e.to_string(),
            }
            if Instant::now() > deadline {
                return Err(fail(format!("nodes not ready in time ({last})")));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if !probe {
            return Ok(());
        }
        let job = loop {
            let r = client
                .run_args(
                    "sbatch",
                    &[
                        "--parsable",
                        "--job-name=testbed-probe",
                        "--ntasks=1",
                        "--output=/dev/null",
                        "--wrap=true",
                    ],
                )
                .map_err(|e| e.to_string())
                .and_then(|o| parse::parse_sbatch_parsable(&o.stdout).map_err(|e| e.to_string()));
            match r {
                Ok((j, _)) => break j,
                Err(e) if Instant::now() > deadline => return Err(fail(format!("probe job not accepted: {e}"))),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        loop {
            let out = client.run_args("squeue", &["-h", "-t", "all", "-j", &job.to_string(), "-o", parse::SQUEUE_FORMAT]);
            if let Ok(rows) = out.map(|o| parse::parse_squeue(&o.stdout).unwrap_or_default()) {
                if rows.iter().any(|r| r.job == job && r.state.is_terminal()) {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(fail("the controller did not schedule the probe job in time".into()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops one cluster: its controller and (unless `controller_only`) its slurmd's (see
    /// [`StopHow`]).
    pub fn stop_cluster(&self, name: &str, how: StopHow, controller_only: bool) -> anyhow::Result<()> {
        let c = self.cluster(name)?.clone();
        let _lock = lock_dir(self.dir())?;
        let pids = self.cluster_pids(&c, controller_only);
        match how {
            StopHow::Term => {
                procs::stop_pids(&pids, libc::SIGTERM, Duration::from_secs(10));
            }
            StopHow::Kill => {
                procs::stop_pids(&pids, libc::SIGKILL, Duration::from_secs(10));
            }
            StopHow::Freeze => {
                for (p, _) in &pids {
                    let _ = signal(*p, Signal::SIGSTOP);
                }
            }
        }
        Ok(())
    }

    /// The live daemons of a cluster: (pid, what its command line contains).
    fn cluster_pids(&self, c: &ClusterSpec, controller_only: bool) -> Vec<(u32, String)> {
        let conf = self.conf(&c.name).display().to_string();
        let mut pids: Vec<(u32, String)> = self.controller_pid(&c.name).map(|p| (p, conf)).into_iter().collect();
        if !controller_only {
            pids.extend(
                c.nodes
                    .iter()
                    .filter_map(|n| self.node_pid(&c.name, &n.name).map(|p| (p, format!("-N {}", n.name)))),
            );
        }
        pids
    }

    /// Starts what is not running of one cluster (and resumes what is frozen) and waits until
    /// it schedules again.
    pub fn start_cluster(&self, name: &str) -> anyhow::Result<Duration> {
        let c = self.cluster(name)?.clone();
        let t0 = Instant::now();
        let _lock = lock_dir(self.dir())?;
        for (p, _) in self.cluster_pids(&c, false) {
            let _ = signal(p, Signal::SIGCONT);
        }
        let mut started = Vec::new();
        self.ensure_munge(&mut started)?;
        let names = [name.to_string()];
        let fresh = self.start_daemons(&names, 0, &mut started)?;
        self.wait_ready(&names, &fresh, Duration::from_secs(90))?;
        Ok(t0.elapsed())
    }

    /// Stops everything the bed started: cancels the clusters' jobs, stops slurmd's,
    /// controllers and munged (by their pid files), kills job processes left behind, and with
    /// `purge` deletes the directory. Returns how many leftover processes were killed.
    pub fn down(&self, purge: bool) -> anyhow::Result<usize> {
        if !self.dir().exists() {
            return Ok(0); // purged before
        }
        let lock = lock_dir(self.dir())?;
        std::thread::scope(|s| {
            for c in &self.spec.clusters {
                if self.controller_pid(&c.name).is_some() {
                    s.spawn(move || self.cancel_all(&c.name));
                }
            }
        });
        let mut pids = Vec::new();
        for c in &self.spec.clusters {
            pids.extend(self.cluster_pids(c, false));
        }
        for (p, _) in &pids {
            // A frozen daemon would not see SIGTERM.
            let _ = signal(*p, Signal::SIGCONT);
        }
        procs::stop_pids(&pids, libc::SIGTERM, Duration::from_secs(5));
        if let Some(p) = self.munge_pid() {
            procs::stop_pids(
                &[(p, self.spec.munge_socket().display().to_string())],
                libc::SIGTERM,
                Duration::from_secs(5),
            );
        }
        network::down(self.dir(), &self.clusters())?;
        let killed = procs::kill_leftovers(self.dir());
        drop(lock);
        if purge {
            std::fs::remove_dir_all(self.dir()).with_context(|| format!("deleting {}", self.dir().display()))?;
        }
        Ok(killed)
    }

    /// Cancels every job of a cluster and waits (a few seconds at most) until they are gone.
    fn cancel_all(&self, name: &str) {
        let Ok(client) = self.client(name) else { return };
        let active = || -> Vec<String> {
            client
                .run_args("squeue", &["-h", "-o", parse::SQUEUE_FORMAT])
                .ok()
                .and_then(|o| parse::parse_squeue(&o.stdout).ok())
                .unwrap_or_default()
                .into_iter()
                .filter(|r| !r.state.is_terminal())
                .map(|r| r.job.to_string())
                .collect()
        };
        let ids = active();
        if ids.is_empty() {
            return;
        }
        let _ = client.run("scancel", &ids);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(8) && !active().is_empty() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// How `stop-cluster` stops a cluster's daemons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopHow {
    /// SIGTERM: a planned stop (state saved; running jobs go on).
    Term,
    /// SIGKILL: a crash (the controller loses its last seconds of state; jobs may vanish,
    /// be launched again, or their ids be given to new jobs).
    Kill,
    /// SIGSTOP: a hung controller (connections are accepted, nothing is answered);
    /// `start-cluster` resumes it.
    Freeze,
}

/// Sends `sig` to process `pid` (nix's checked `kill`, no `unsafe`).
fn signal(pid: u32, sig: Signal) -> nix::Result<()> {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig)
}
