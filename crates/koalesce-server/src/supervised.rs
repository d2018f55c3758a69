//! Reading the records a component's supervisor keeps in its directory (see [`crate::supervise`]):
//! where the component stands at the start barrier, whether it is held ready, its LRM state,
//! and killing it. Shared by every backend whose components run under `koalesce supervise`
//! (the local executor, and Slurm jobs that wrap their program in the same supervisor), so that
//! recovery answers the same way for every kind of site.
//!
//! Every reader is given the launch's nonce (stored with the launch by the daemon): records
//! of another launch are not believed (see [`supervise::read_exit`]).

use std::path::Path;

use crate::backend::{BarrierState, LrmState};
use crate::cgroup::Cgroup;
use crate::supervise::{self, ExitRecord, SupervisorRecord};

fn record(dir: &Path, nonce: &str) -> Option<SupervisorRecord> {
    supervise::read_supervisor(dir, nonce)
}

/// Where the launch in `dir` stands at the start barrier. A directory no supervisor has taken
/// is fenced first, so the answer cannot change under the caller by a late supervisor.
pub fn barrier_state(dir: &Path, nonce: &str) -> std::io::Result<BarrierState> {
    let rec = match record(dir, nonce) {
        Some(rec) => rec,
        None => {
            if supervise::fence(dir)? {
                return Ok(BarrierState::Fenced);
            }
            record(dir, nonce).ok_or_else(|| std::io::Error::other(format!("unreadable supervisor record in {}", dir.display())))?
        }
    };
    if rec.fenced {
        return Ok(BarrierState::Fenced);
    }
    if dir.join(supervise::GO_FILE).exists() || dir.join(supervise::RUNNING_FILE).exists() {
        return Ok(BarrierState::Released);
    }
    match supervise::read_exit(dir, nonce) {
        Some(exit) if exit.never_started => Ok(BarrierState::Held { alive: false }),
        // An outcome without `go` cannot happen; count it as run, to be safe.
        Some(_) => Ok(BarrierState::Released),
        // Told to give up (it is about to): it will not run any more.
        None if dir.join(supervise::ABORT_FILE).exists() => Ok(BarrierState::Held { alive: false }),
        None => Ok(BarrierState::Held {
            alive: supervise::supervisor_alive(&rec),
        }),
    }
}

/// A live supervisor of this launch holds the directory, has set the component up (`held`:
/// only the exec remains) and nothing told it to give up; or the launch was released before
/// its supervisor checked in (a launch of one component: `go` written before the spawn) and
/// the supervisor took the directory (it runs the program without holding: there is nothing
/// left to wait for).
pub fn is_ready(dir: &Path, nonce: &str) -> bool {
    if dir.join(supervise::HELD_FILE).exists() {
        return can_start(dir, nonce);
    }
    dir.join(supervise::GO_FILE).exists() && !dir.join(supervise::ABORT_FILE).exists() && record(dir, nonce).is_some_and(|r| !r.fenced)
}

/// A live supervisor of this launch holds the directory and nothing told it to give up, set
/// up or not yet: `go` may be written (it runs once it is set up).
pub fn can_start(dir: &Path, nonce: &str) -> bool {
    record(dir, nonce).is_some_and(|r| supervise::supervisor_alive(&r))
        && !dir.join(supervise::ABORT_FILE).exists()
        && !dir.join(supervise::EXIT_FILE).exists()
}

/// The component's state from its records. `starting`: the backend spawned a supervisor for
/// it that has not exited yet (so a missing record means "not up yet", not "lost").
pub fn state_of(dir: &Path, nonce: &str, starting: bool) -> LrmState {
    if let Some(exit) = supervise::read_exit(dir, nonce) {
        return exit_state(&exit);
    }
    match record(dir, nonce) {
        Some(rec) if rec.fenced => LrmState::NodeFail {
            reason: "launch abandoned before the supervisor started (fenced)".into(),
        },
        Some(rec) if supervise::supervisor_alive(&rec) => LrmState::Running,
        Some(_) => match supervise::read_exit(dir, nonce) {
            Some(exit) => exit_state(&exit),
            None => LrmState::NodeFail {
                reason: "supervisor died without recording an exit".into(),
            },
        },
        None if starting => LrmState::Pending,
        // Nobody (or a dead supervisor) owns this directory: fence it so that no late
        // supervisor can ever start the component.
        None => match supervise::fence(dir) {
            Ok(true) => LrmState::NodeFail {
                reason: "supervisor never started".into(),
            },
            Ok(false) => LrmState::Pending,
            Err(e) => LrmState::NodeFail {
                reason: format!("cannot fence {}: {e}", dir.display()),
            },
        },
    }
}

/// The LRM state an exit record stands for.
pub fn exit_state(exit: &ExitRecord) -> LrmState {
    if exit.success() {
        return LrmState::Completed;
    }
    if exit.site_fault {
        // The supervisor could not set the component up: the site's fault, not the job's.
        return LrmState::NodeFail {
            reason: exit
                .spawn_error
                .clone()
                .unwrap_or_else(|| "the component could not be set up".into()),
        };
    }
    if exit.oom_killed {
        return LrmState::OutOfMemory {
            reason: "killed by the OOM killer: the component went over its memory limit".into(),
        };
    }
    if exit.timed_out {
        return LrmState::Timeout {
            reason: "killed at its wall-time limit".into(),
        };
    }
    if exit.never_started {
        // Aborted at the start barrier: the program never ran; not the application's fault.
        return LrmState::NodeFail {
            reason: exit.spawn_error.clone().unwrap_or_else(|| "never started".into()),
        };
    }
    let reason = match (&exit.spawn_error, exit.exit_code, exit.signal) {
        (Some(e), _, _) => e.clone(),
        (None, Some(c), _) => format!("exit code {c}"),
        (None, None, Some(s)) => format!("killed by signal {s}"),
        _ => "unknown exit".into(),
    };
    LrmState::Failed {
        exit_code: exit.exit_code,
        reason,
    }
}

/// Kills the component in `dir`: every process of its control group (also those that left
/// its process group), else its supervisor's whole process group. One still held at the
/// barrier is told to give up first, so it cannot start even if the kill went astray; a
/// directory no supervisor has taken is fenced.
pub fn kill(dir: &Path) {
    // Any supervisor recorded in the directory is killed, whichever launch it claims to be.
    let raw = |dir: &Path| supervise::read_json::<SupervisorRecord>(&dir.join(supervise::SUPERVISOR_FILE));
    match raw(dir) {
        Some(rec) if supervise::supervisor_alive(&rec) => {
            if !dir.join(supervise::GO_FILE).exists() {
                // Held at the barrier: it must not start even if the kill went astray.
                let _ = supervise::abort(dir);
                kill_group(rec.pid);
                // The control group it set up before the barrier: its gated process (in the
                // supervisor's process group) dies with it.
                if let Some(cg) = Cgroup::of_record(Some(&rec), dir) {
                    cg.kill_all();
                    cg.wait_empty(std::time::Duration::from_secs(1));
                    cg.remove();
                }
            } else if let Some(cg) = Cgroup::of_record(Some(&rec), dir) {
                // The supervisor records the end once the group is empty.
                cg.kill_all();
                if !dir.join(supervise::RUNNING_FILE).exists() {
                    // Let through but the program not started yet: stop the supervisor (and
                    // a child between fork and exec, in its process group).
                    kill_group(rec.pid);
                }
            } else {
                kill_group(rec.pid);
            }
        }
        Some(rec) => {
            if let Some(cg) = Cgroup::of_record(Some(&rec), dir) {
                cg.kill_all();
            }
        }
        None => {
            let _ = supervise::fence(dir);
            // A supervisor that got its record in between: kill it too.
            if let Some(rec) = raw(dir).filter(supervise::supervisor_alive) {
                kill_group(rec.pid);
            }
        }
    }
}

/// SIGKILL to the process group a supervisor leads (the component is in it).
fn kill_group(pid: u32) {
    let Ok(pid) = i32::try_from(pid) else { return };
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
}
