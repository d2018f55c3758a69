//! A component's state from two sources: what Slurm says of its job (one `squeue` per cluster
//! and tick) and what its supervisor recorded in the component's directory. The records win:
//! they are durable and do not depend on Slurm keeping the job (MinJobAge; no sacct without
//! slurmdbd), and they count a job that Slurm ran twice (after a controller crash) once.

use std::path::Path;

use crate::backend::LrmState;
use crate::supervise::{self, ExitRecord, SupervisorRecord};
use crate::supervised::exit_state;

use super::parse::{JobRow, JobState};

/// The supervisor's records in a component's directory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Records {
    pub supervisor: Option<SupervisorRecord>,
    pub exit: Option<ExitRecord>,
    /// The supervisor set the component up and holds at the barrier (`held`).
    pub held: bool,
    /// `go` was written: the program may have run.
    pub released: bool,
    /// `abort` was written: a held supervisor gives up.
    pub aborted: bool,
}

impl Records {
    /// The records in `dir` of the launch with `nonce`: an exit record of another launch is
    /// none, a supervisor record of another launch reads as a fence.
    pub fn read(dir: &Path, nonce: &str) -> Records {
        Records {
            supervisor: supervise::read_supervisor(dir, nonce),
            exit: supervise::read_exit(dir, nonce),
            held: dir.join(supervise::HELD_FILE).exists(),
            released: dir.join(supervise::GO_FILE).exists(),
            aborted: dir.join(supervise::ABORT_FILE).exists(),
        }
    }

    /// The supervisor checked in (allocated by Slurm, launched, holding at the barrier or past
    /// it), and the directory was not fenced.
    pub fn checked_in(&self) -> bool {
        self.supervisor.as_ref().is_some_and(|r| !r.fenced)
    }

    pub fn fenced(&self) -> bool {
        self.supervisor.as_ref().is_some_and(|r| r.fenced)
    }

    /// Ready to be started: checked in, set up and holding, nothing ended or told to give up;
    /// or released before it checked in (a launch of one component: `go` written before the
    /// submission) and checked in: its supervisor runs the program without holding.
    pub fn ready(&self) -> bool {
        (self.startable() && self.held) || (self.checked_in() && self.released && !self.aborted)
    }

    /// May be let through: checked in, nothing ended or told to give up (perhaps still
    /// setting up: it runs once it is done).
    pub fn startable(&self) -> bool {
        self.checked_in() && self.exit.is_none() && !self.aborted
    }
}

/// What Slurm said about a job in the latest `squeue` of its cluster.
#[derive(Debug, Clone, Copy)]
pub enum SlurmView<'a> {
    /// The job's line.
    Row(&'a JobRow),
    /// squeue answered after the job was submitted, without the job: the controller forgot
    /// it (purged after MinJobAge, or lost in a crash).
    Missing,
    /// No answer that covers the job (controller unreachable, or the job is newer than the
    /// last answer).
    NoAnswer,
}

/// The combined verdict.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    State(LrmState),
    /// Slurm lost the job and no supervisor took the directory: fence it (so that a late run
    /// can never start) and call it a node failure; if the fence finds a record after all,
    /// look again.
    FenceVanished,
}

/// Combines Slurm's view with the records. `alive` tells whether a supervisor is still
/// running (checked on this host through /proc; a supervisor on another node reads as dead).
/// `last` is the previous state, kept while the controller does not answer.
pub fn combine(view: SlurmView<'_>, rec: &Records, alive: impl Fn(&SupervisorRecord) -> bool, last: Option<&LrmState>) -> Verdict {
    if let Some(exit) = &rec.exit {
        return Verdict::State(exit_state(exit));
    }
    if rec.fenced() {
        return Verdict::State(LrmState::NodeFail {
            reason: "the launch was fenced before its supervisor started".into(),
        });
    }
    let supervisor_alive = rec.supervisor.as_ref().is_some_and(&alive);
    match view {
        SlurmView::Row(row) => match &row.state {
            s if !s.is_terminal() => {
                if rec.checked_in() || s.is_allocated() {
                    Verdict::State(LrmState::Running)
                } else {
                    Verdict::State(LrmState::Pending)
                }
            }
            // Slurm is done with the job but the supervisor has not recorded an outcome: it
            // may still run (the job was launched twice after a controller crash, and this
            // is the second launch, which stopped at once), or it died without a record.
            _ if supervisor_alive => Verdict::State(LrmState::Running),
            JobState::Cancelled => Verdict::State(LrmState::Cancelled),
            // Slurm ended the job at its `--time` or `--mem` before the supervisor could record
            // an outcome: the job's limits, as when the supervisor enforces them.
            JobState::Timeout => Verdict::State(LrmState::Timeout {
                reason: format!("the Slurm time limit was reached ({})", row.reason),
            }),
            JobState::OutOfMemory => Verdict::State(LrmState::OutOfMemory {
                reason: format!("Slurm killed the job over its memory limit ({})", row.reason),
            }),
            s => Verdict::State(LrmState::NodeFail {
                reason: format!(
                    "the Slurm job ended ({s:?}, {}) without an exit record from its supervisor",
                    row.reason
                ),
            }),
        },
        SlurmView::Missing => match &rec.supervisor {
            Some(_) if supervisor_alive => Verdict::State(LrmState::Running),
            Some(_) => Verdict::State(LrmState::NodeFail {
                reason: "Slurm no longer knows the job and its supervisor ended without an exit record".into(),
            }),
            None => Verdict::FenceVanished,
        },
        SlurmView::NoAnswer => {
            if supervisor_alive || rec.checked_in() {
                Verdict::State(LrmState::Running)
            } else {
                Verdict::State(last.cloned().unwrap_or(LrmState::Pending))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(state: &str, reason: &str) -> JobRow {
        JobRow {
            job: 1,
            state: JobState::parse(state),
            cpus: 4,
            reservation: None,
            reason: reason.into(),
            comment: None,
        }
    }

    fn sup() -> SupervisorRecord {
        SupervisorRecord {
            pid: 42,
            proc_start: 7,
            started_ms: 1,
            fenced: false,
            nonce: "n1".into(),
            cgroup: None,
        }
    }

    fn exit(code: i32) -> ExitRecord {
        ExitRecord {
            exit_code: Some(code),
            signal: None,
            spawn_error: None,
            finished_ms: 2,
            never_started: false,
            oom_killed: false,
            timed_out: false,
            site_fault: false,
            nonce: "n1".into(),
        }
    }

    fn st(v: Verdict) -> LrmState {
        match v {
            Verdict::State(s) => s,
            v => panic!("{v:?}"),
        }
    }

    const DEAD: fn(&SupervisorRecord) -> bool = |_| false;
    const ALIVE: fn(&SupervisorRecord) -> bool = |_| true;

    #[test]
    fn records_win_over_slurm() {
        let rec = Records {
            supervisor: Some(sup()),
            exit: Some(exit(0)),
            held: true,
            released: true,
            aborted: false,
        };
        // Whatever Slurm says (still running, forgotten, unreachable): the exit record decides.
        for v in [SlurmView::Row(&row("RUNNING", "None")), SlurmView::Missing, SlurmView::NoAnswer] {
            assert_eq!(st(combine(v, &rec, DEAD, None)), LrmState::Completed);
        }
        let rec = Records {
            exit: Some(exit(5)),
            ..rec
        };
        assert!(matches!(
            st(combine(SlurmView::Row(&row("COMPLETED", "None")), &rec, DEAD, None)),
            LrmState::Failed { exit_code: Some(5), .. }
        ));
    }

    #[test]
    fn pending_running_and_checked_in() {
        let none = Records::default();
        assert_eq!(
            st(combine(SlurmView::Row(&row("PENDING", "Resources")), &none, DEAD, None)),
            LrmState::Pending
        );
        assert_eq!(
            st(combine(SlurmView::Row(&row("RUNNING", "None")), &none, DEAD, None)),
            LrmState::Running
        );
        let checked_in = Records {
            supervisor: Some(sup()),
            ..Default::default()
        };
        assert!(!checked_in.ready(), "not set up yet");
        let held = Records { held: true, ..checked_in };
        assert!(held.ready());
        assert_eq!(
            st(combine(SlurmView::Row(&row("RUNNING", "None")), &held, ALIVE, None)),
            LrmState::Running
        );
    }

    #[test]
    fn slurm_terminal_without_records() {
        let none = Records::default();
        assert_eq!(
            st(combine(SlurmView::Row(&row("CANCELLED", "None")), &none, DEAD, None)),
            LrmState::Cancelled
        );
        assert!(matches!(
            st(combine(SlurmView::Row(&row("TIMEOUT", "TimeLimit")), &none, DEAD, None)),
            LrmState::Timeout { .. }
        ));
        assert!(matches!(
            st(combine(SlurmView::Row(&row("OUT_OF_MEMORY", "OutOfMemory")), &none, DEAD, None)),
            LrmState::OutOfMemory { .. }
        ));
        for s in ["NODE_FAIL", "BOOT_FAIL", "FAILED", "COMPLETED"] {
            assert!(
                matches!(
                    st(combine(SlurmView::Row(&row(s, "x")), &none, DEAD, None)),
                    LrmState::NodeFail { .. }
                ),
                "{s}"
            );
        }
        // A second launch stopped at once while the first one still runs: still running.
        let first = Records {
            supervisor: Some(sup()),
            released: true,
            ..Default::default()
        };
        assert_eq!(
            st(combine(SlurmView::Row(&row("FAILED", "NonZeroExitCode")), &first, ALIVE, None)),
            LrmState::Running
        );
    }

    #[test]
    fn vanished_jobs() {
        assert_eq!(combine(SlurmView::Missing, &Records::default(), DEAD, None), Verdict::FenceVanished);
        let fenced = Records {
            supervisor: Some(SupervisorRecord {
                fenced: true,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(!fenced.ready());
        assert!(matches!(
            st(combine(SlurmView::Missing, &fenced, DEAD, None)),
            LrmState::NodeFail { .. }
        ));
        let running = Records {
            supervisor: Some(sup()),
            released: true,
            ..Default::default()
        };
        assert_eq!(st(combine(SlurmView::Missing, &running, ALIVE, None)), LrmState::Running);
        assert!(matches!(
            st(combine(SlurmView::Missing, &running, DEAD, None)),
            LrmState::NodeFail { .. }
        ));
    }

    #[test]
    fn unreachable_controller_keeps_the_last_state() {
        let none = Records::default();
        assert_eq!(st(combine(SlurmView::NoAnswer, &none, DEAD, None)), LrmState::Pending);
        assert_eq!(
            st(combine(SlurmView::NoAnswer, &none, DEAD, Some(&LrmState::Running))),
            LrmState::Running
        );
        let held = Records {
            supervisor: Some(sup()),
            ..Default::default()
        };
        assert_eq!(
            st(combine(SlurmView::NoAnswer, &held, DEAD, Some(&LrmState::Pending))),
            LrmState::Running
        );
        assert!(!held.ready(), "checked in, not set up yet");
        let released = Records {
            released: true,
            ..held.clone()
        };
        assert!(released.ready(), "released before it checked in: nothing to hold for");
        assert!(Records {
            held: true,
            ..held.clone()
        }
        .ready());
        let aborted = Records { aborted: true, ..held };
        assert!(!aborted.ready());
        assert!(!Records { aborted: true, ..released }.ready());
    }
}
