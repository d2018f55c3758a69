//! The daemon's threads ahead of the work it starts: a submission is acknowledged promptly
//! however busy the host is with the jobs' supervisors and programs (and other users' work).
//!
//! An acknowledgement passes through a few of the daemon's threads (the runtime's worker that
//! reads the request and answers it, the database writer whose group commit makes it
//! durable); each of them waits in the run queue whenever it wakes. With 2,000 jobs launched
//! while 16 clients submit, and six busy processes of other users on 2 cores, `koalesce bench
//! e2e` measured a submit p99 of 120–160 ms: the daemon's few milliseconds of work per second
//! waited behind the supervisors, programs and busy loops for every wake-up.
//!
//! So every thread of the daemon (the runtime's workers and blocking threads, the database
//! writer) is *favoured* ([`favour_thread`]): a slice of [`SLICE_NS`] instead of the
//! scheduler's default (EEVDF, Linux ≥ 6.12: a thread with a shorter slice gets an earlier
//! deadline and preempts a thread with a longer one when it wakes) and, where permitted
//! (`CAP_SYS_NICE`, e.g. a server run as root), the nice value [`NICE`]. Neither makes the
//! daemon real-time or lets it starve others: it still gets its fair share at most, with
//! the weight of about nine normal processes, and its own work is well under a millisecond per job. The
//! favour is set with `SCHED_RESET_ON_FORK`, so nothing the daemon starts inherits it: the
//! resident launchers, the supervisors they fork and the jobs' programs run at the normal nice
//! value and slice (`tests/executor.rs` checks). Without the right to lower the nice value the
//! slice alone is set; on an older kernel the slice is ignored; either way nothing fails.

use std::io;

/// The slice the daemon's threads ask for (0.5 ms; the kernel's default is a few times that,
/// 1.4 ms on this 2-core machine's kernel; its range 0.1–100 ms).
pub const SLICE_NS: u64 = 500_000;

/// The nice value of the daemon's threads where permitted (weight 9548 against 1024 for nice 0).
pub const NICE: i32 = -10;

/// `struct sched_attr` of `sched_setattr(2)` (`SCHED_ATTR_SIZE_VER0`: without the utilization
/// clamps).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
}

const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;

fn set_attr(tid: i32, attr: &SchedAttr) -> io::Result<()> {
    // SAFETY: sched_setattr reads `size` bytes of a struct that lives across the call and
    // changes only scheduling attributes of the thread `tid`.
    let r = unsafe { libc::syscall(libc::SYS_sched_setattr, tid, attr as *const SchedAttr, 0u32) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn get_attr(tid: i32) -> io::Result<SchedAttr> {
    let mut attr = SchedAttr::default();
    let size = std::mem::size_of::<SchedAttr>() as u32;
    // SAFETY: sched_getattr writes at most `size` bytes into `attr`, which lives across the call.
    let r = unsafe { libc::syscall(libc::SYS_sched_getattr, tid, &mut attr as *mut SchedAttr, size, 0u32) };
    if r == 0 {
        Ok(attr)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What a thread runs with: nice value, slice (ns; the kernel's default when none was asked
/// for) and whether its children start afresh (`SCHED_RESET_ON_FORK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Favour {
    pub nice: i32,
    pub slice_ns: u64,
    pub reset_on_fork: bool,
}

/// The scheduling attributes of thread (or process) `tid` (0: the calling thread).
pub fn of(tid: u32) -> io::Result<Favour> {
    let a = get_attr(tid as i32)?;
    Ok(Favour {
        nice: a.sched_nice,
        slice_ns: a.sched_runtime,
        reset_on_fork: a.sched_flags & SCHED_FLAG_RESET_ON_FORK != 0,
    })
}

/// Favours the calling thread (see the module docs): slice [`SLICE_NS`], nice [`NICE`] where
/// permitted, reset on fork. Only a thread of normal policy is changed, and a positive nice
/// value (the daemon started niced on purpose) is kept, so that what the daemon starts keeps it
/// too. Returns what the thread runs with afterwards.
pub fn favour_thread() -> io::Result<Favour> {
    favour(SCHED_FLAG_RESET_ON_FORK)
}

/// [`favour_thread`] without the reset on fork: the threads the calling thread starts are
/// favoured too. For the benchmarks' client threads (`--clients-favoured`), whose HTTP client
/// starts a thread per request to resolve the server's address and waits for it; never for the
/// daemon, which starts the jobs' processes.
pub fn favour_thread_and_its_threads() -> io::Result<Favour> {
    favour(0)
}

fn favour(flags: u64) -> io::Result<Favour> {
    let current = get_attr(0)?;
    if current.sched_policy != libc::SCHED_OTHER as u32 {
        return Err(io::Error::other("not a thread of the normal policy"));
    }
    let mut attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: libc::SCHED_OTHER as u32,
        sched_flags: flags,
        sched_nice: if current.sched_nice > 0 {
            current.sched_nice
        } else {
            current.sched_nice.min(NICE)
        },
        sched_runtime: SLICE_NS,
        ..Default::default()
    };
    if set_attr(0, &attr).is_err() {
        // Not permitted to lower the nice value: the slice alone.
        attr.sched_nice = current.sched_nice;
        set_attr(0, &attr)?;
    }
    of(0)
}

/// [`favour_thread`], logging (at debug) when it could not be done.
pub fn favour_thread_or_log() {
    if let Err(e) = favour_thread() {
        tracing::debug!(error = %e, "this thread of the daemon runs at the normal priority");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_favoured_thread_has_the_short_slice_and_its_children_do_not() {
        std::thread::spawn(|| {
            let before = of(0).unwrap();
            let Ok(after) = favour_thread() else {
                // A kernel without sched_setattr for normal threads: nothing to check.
                return;
            };
            assert!(after.reset_on_fork);
            assert!(after.nice <= before.nice);
            if after.slice_ns != 0 {
                assert_eq!(after.slice_ns, SLICE_NS);
            }
            // A thread the favoured one starts begins afresh: the default slice, a negative
            // nice value back at 0.
            let child = std::thread::spawn(|| of(0).unwrap()).join().unwrap();
            assert!(!child.reset_on_fork, "{child:?}");
            assert_eq!(child.nice, after.nice.max(0), "{child:?}");
            assert_ne!(child.slice_ns, SLICE_NS, "{child:?}");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_favoured_with_its_threads_passes_the_favour_on() {
        std::thread::spawn(|| {
            let Ok(after) = favour_thread_and_its_threads() else {
                return;
            };
            assert!(!after.reset_on_fork);
            let child = std::thread::spawn(|| of(0).unwrap()).join().unwrap();
            assert_eq!((child.nice, child.slice_ns), (after.nice, after.slice_ns), "{child:?}");
        })
        .join()
        .unwrap();
    }
}
