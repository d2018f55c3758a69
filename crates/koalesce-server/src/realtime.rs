//! A real-time priority for the few milliseconds of a start (the release moment of the start
//! barrier), and never for a job's program.
//!
//! On a loaded host a process woken by `go` waits in the run queue behind every runnable
//! process of normal priority: `koalesce bench costart` measured wake-ups spread up to 69 ms and
//! one `exec` of 247 ms at load averages of 50–130 on 2 cores. A thread of the lowest real-time
//! priority ([`PRIORITY`], `SCHED_FIFO`) runs as soon as it is runnable. koalesce uses it only
//! where it waits for the start and does the start:
//! - the supervisor's thread that waits at the barrier and opens the program's gate
//!   ([`crate::supervise`]), and the program's process between its gate and its `exec`, which
//!   goes back to the scheduling policy it had (`SCHED_OTHER` at its nice value) *before* it
//!   execs: no program ever runs real-time (`tests/executor.rs` checks the program's policy);
//! - the daemon's thread that writes a launch's `go` files ([`crate::daemon`]).
//!
//! It is bounded: the supervisor's real-time CPU time without a blocking call is limited by
//! `RLIMIT_RTTIME` ([`RTTIME_LIMIT_US`]), the supervisor raises itself with
//! `SCHED_RESET_ON_FORK` (nothing it forks meanwhile inherits the policy), and the kernel
//! keeps 5% of every second for other processes (`sched_rt_runtime_us`). It is only tried:
//! without the right to (`CAP_SYS_NICE`, or an `RLIMIT_RTPRIO` of at least 1) the calls fail
//! and everything runs as before, at normal priority.

use std::io;

/// The real-time priority used (the lowest of `SCHED_FIFO`: above every normal process, below
/// every other real-time one, such as the kernel's own threads).
pub const PRIORITY: i32 = 1;

/// `RLIMIT_RTTIME` of a supervisor while it is real-time: CPU time it may use at that priority
/// without blocking (then the kernel sends SIGXCPU). Waiting at the barrier blocks; opening
/// the gate takes microseconds.
pub const RTTIME_LIMIT_US: u64 = 500_000;

fn set(pid: i32, policy: i32, priority: i32) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: a plain system call on a parameter that lives across it.
    if unsafe { libc::sched_setscheduler(pid, policy, &param) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes the calling thread real-time (`SCHED_FIFO` at [`PRIORITY`], reset on fork). Fails
/// without the right to.
pub fn raise_thread() -> io::Result<()> {
    set(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, PRIORITY)
}

/// Makes process (thread) `pid` real-time, without resetting on fork: see [`leave`].
pub fn raise(pid: u32) -> io::Result<()> {
    set(pid as i32, libc::SCHED_FIFO, PRIORITY)
}

/// Puts the calling thread back to `policy` (a normal one: `SCHED_OTHER`, `SCHED_BATCH` or
/// `SCHED_IDLE`; anything else becomes `SCHED_OTHER`). Async-signal-safe (one system call):
/// the program's process calls it between fork and exec. Leaving a real-time policy for a
/// normal one is always permitted; the nice value is kept.
pub fn leave(policy: i32) -> io::Result<()> {
    let policy = match policy & !libc::SCHED_RESET_ON_FORK {
        p @ (libc::SCHED_OTHER | libc::SCHED_BATCH | libc::SCHED_IDLE) => p,
        _ => libc::SCHED_OTHER,
    };
    set(0, policy, 0)
}

/// The scheduling policy of `pid` (0: the calling thread), without `SCHED_RESET_ON_FORK`.
pub fn policy(pid: u32) -> io::Result<i32> {
    // SAFETY: a plain system call.
    let p = unsafe { libc::sched_getscheduler(pid as i32) };
    if p < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(p & !libc::SCHED_RESET_ON_FORK)
    }
}

/// Whether `policy` is a real-time one.
pub fn is_realtime(policy: i32) -> bool {
    matches!(policy, libc::SCHED_FIFO | libc::SCHED_RR | libc::SCHED_DEADLINE)
}

/// Lowers the soft `RLIMIT_RTTIME` of this process to [`RTTIME_LIMIT_US`] (the hard limit is
/// kept, so it can be put back); returns the previous soft limit.
pub fn bound_rttime() -> io::Result<u64> {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain system calls on a struct that lives across them.
    if unsafe { libc::getrlimit(libc::RLIMIT_RTTIME, &mut r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let old = r.rlim_cur;
    r.rlim_cur = old.min(RTTIME_LIMIT_US.min(r.rlim_max));
    if unsafe { libc::setrlimit(libc::RLIMIT_RTTIME, &r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(old)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_raised_and_left_is_back_to_its_policy() {
        std::thread::spawn(|| {
            let before = policy(0).unwrap();
            assert!(!is_realtime(before));
            if raise_thread().is_ok() {
                assert_eq!(policy(0).unwrap(), libc::SCHED_FIFO);
            }
            leave(before).unwrap();
            assert_eq!(policy(0).unwrap(), before);
            // A real-time policy asked for is never what `leave` puts back.
            leave(libc::SCHED_FIFO).unwrap();
            assert_eq!(policy(0).unwrap(), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }
}
