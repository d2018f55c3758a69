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
//! So the daemon's threads are *favoured* ([`favour_thread`]): a slice of [`SLICE_NS`] instead
//! of the scheduler's default (EEVDF, Linux ≥ 6.12: a thread with a shorter slice gets an
//! earlier deadline and preempts a thread with a longer one when it wakes) and, where
//! permitted (`CAP_SYS_NICE`, e.g. a server run as root), the nice value [`NICE`]. Neither
//! makes the daemon real-time or lets it starve others: it still gets its fair share at most,
//! with the weight of about nine normal processes, and its own work is well under a
//! millisecond per job. The favour is set with `SCHED_RESET_ON_FORK`, so nothing the daemon
//! starts inherits it: the resident launchers, the supervisors they fork and the jobs'
//! programs run at the normal nice value and slice (`tests/executor.rs` checks). Without the
//! right to lower the nice value the slice alone is set; on an older kernel the slice is
//! ignored; either way nothing fails.
//!
//! **When.** The database writer, which every acknowledgement waits for, is favoured from its
//! start. The runtime's threads (workers and blocking threads, [`RuntimeThreads`]) are
//! favoured only while the daemon has components claimed or running: at once when the first
//! one is claimed, until [`RUNTIME_FAVOUR_HOLD`] after the last one ended. The jobs' own
//! processes are what they must win against. With none of them, a favoured worker only
//! preempts the clients on the same host (a script or CLI that has just sent its request)
//! the moment a request arrives, so that requests are read and committed one by one instead
//! of a few at a time, with about twice the context switches and CPU per request: a
//! queue-only server in `koalesce bench submit` took 0.57–0.67× bc747b7's submissions per
//! second with its workers always favoured (0.77–0.85× with this rule). A server without
//! running components on a host busy with others' work answers at the normal priority (its
//! writer still favoured).
//!
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

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
/// starts a thread per request to resolve a server's host name and waits for it (not for an
/// IP address: [`crate::http_agent`]); never for the daemon, which starts the jobs' processes.
pub fn favour_thread_and_its_threads() -> io::Result<Favour> {
    favour(0)
}

fn favour(flags: u64) -> io::Result<Favour> {
    let current = get_attr(0)?;
    favour_tid(0, current.sched_nice, flags)?;
    of(0)
}

/// Favours thread `tid` (0: the calling thread), whose nice value is `nice` when not
/// favoured: a positive one is kept, a lower one than [`NICE`] too.
fn favour_tid(tid: i32, nice: i32, flags: u64) -> io::Result<()> {
    let current = get_attr(tid)?;
    if current.sched_policy != libc::SCHED_OTHER as u32 {
        return Err(io::Error::other("not a thread of the normal policy"));
    }
    let mut attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: libc::SCHED_OTHER as u32,
        sched_flags: flags,
        sched_nice: if nice > 0 { nice } else { nice.min(NICE) },
        sched_runtime: SLICE_NS,
        ..Default::default()
    };
    if set_attr(tid, &attr).is_err() {
        // Not permitted to lower the nice value: the slice alone.
        attr.sched_nice = current.sched_nice;
        set_attr(tid, &attr)?;
    }
    Ok(())
}

/// Ends thread `tid`'s favour: back to nice value `nice` and the kernel's default slice
/// (still reset on fork).
fn unfavour_tid(tid: i32, nice: i32) -> io::Result<()> {
    let current = get_attr(tid)?;
    if current.sched_policy != libc::SCHED_OTHER as u32 {
        return Ok(());
    }
    set_attr(
        tid,
        &SchedAttr {
            size: std::mem::size_of::<SchedAttr>() as u32,
            sched_policy: libc::SCHED_OTHER as u32,
            sched_flags: SCHED_FLAG_RESET_ON_FORK,
            sched_nice: nice,
            ..Default::default()
        },
    )
}

/// [`favour_thread`], logging (at debug) when it could not be done.
pub fn favour_thread_or_log() {
    if let Err(e) = favour_thread() {
        tracing::debug!(error = %e, "this thread of the daemon runs at the normal priority");
    }
}

/// How long the runtime's threads stay favoured after the daemon's last component ended
/// (see [`RuntimeThreads`]): a gap between one job's end and the next one's claim does not
/// lower and raise them again.
pub const RUNTIME_FAVOUR_HOLD: Duration = Duration::from_secs(2);

/// The runtime's threads (workers and blocking threads), favoured only while the daemon has
/// components claimed or running (see the module docs). Registered by the runtime's
/// `on_thread_start`/`on_thread_stop` hooks; told after every release of the state lock
/// whether components are there ([`RuntimeThreads::components`]) and by the driver's timer
/// when to lower the favour again ([`RuntimeThreads::settle`]).
#[derive(Debug, Default)]
pub struct RuntimeThreads {
    /// Whether the daemon had components when the state lock was last released (read
    /// without the mutex: a release that changes nothing costs one load).
    busy: AtomicBool,
    inner: Mutex<Threads>,
}

#[derive(Debug, Default)]
struct Threads {
    /// The registered threads: thread id and the nice value each started with (what it is
    /// given back when the favour ends).
    tids: Vec<(i32, i32)>,
    favoured: bool,
    /// Since when the daemon has had no components (while still favoured).
    idle_since: Option<Instant>,
}

impl Threads {
    fn set(&mut self, favoured: bool) {
        self.favoured = favoured;
        for &(tid, base) in &self.tids {
            let r = if favoured {
                favour_tid(tid, base, SCHED_FLAG_RESET_ON_FORK)
            } else {
                unfavour_tid(tid, base)
            };
            if let Err(e) = r {
                tracing::debug!(tid, favoured, error = %e, "could not change a runtime thread's priority");
            }
        }
    }
}

impl RuntimeThreads {
    /// Registers the calling thread (the runtime's `on_thread_start`) and gives it the favour
    /// if the other threads have it now.
    pub fn register_current(&self) {
        let tid = nix::unistd::gettid().as_raw();
        let base = get_attr(0).map_or(0, |a| a.sched_nice);
        let mut t = self.threads();
        t.tids.push((tid, base));
        if t.favoured {
            if let Err(e) = favour_tid(tid, base, SCHED_FLAG_RESET_ON_FORK) {
                tracing::debug!(error = %e, "this thread of the daemon runs at the normal priority");
            }
        }
    }

    /// Forgets the calling thread (the runtime's `on_thread_stop`).
    pub fn unregister_current(&self) {
        let tid = nix::unistd::gettid().as_raw();
        self.threads().tids.retain(|&(t, _)| t != tid);
    }

    /// Whether the daemon has components claimed or running (called after each release of
    /// the state lock): the threads are favoured at once when the first one comes; when the
    /// last one has gone, [`Self::settle`] lowers them [`RUNTIME_FAVOUR_HOLD`] later.
    pub fn components(&self, busy: bool) {
        if self.busy.load(Ordering::Relaxed) == busy {
            return;
        }
        let mut t = self.threads();
        if self.busy.swap(busy, Ordering::Relaxed) == busy {
            return;
        }
        if busy {
            t.idle_since = None;
            if !t.favoured {
                t.set(true);
            }
        } else {
            t.idle_since = Some(Instant::now());
        }
    }

    /// Lowers the favour if the daemon has had no components for [`RUNTIME_FAVOUR_HOLD`] by
    /// `now` (the driver calls it on each turn).
    pub fn settle(&self, now: Instant) {
        if self.busy.load(Ordering::Relaxed) {
            return;
        }
        let mut t = self.threads();
        let due = t
            .idle_since
            .is_some_and(|s| now.saturating_duration_since(s) >= RUNTIME_FAVOUR_HOLD);
        if t.favoured && due && !self.busy.load(Ordering::Relaxed) {
            t.idle_since = None;
            t.set(false);
        }
    }

    /// Whether the runtime's threads are favoured now.
    pub fn favoured(&self) -> bool {
        self.threads().favoured
    }

    /// The registered threads' ids.
    pub fn tids(&self) -> Vec<u32> {
        self.threads().tids.iter().map(|&(t, _)| t as u32).collect()
    }

    fn threads(&self) -> std::sync::MutexGuard<'_, Threads> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

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

    /// Two threads of a [`RuntimeThreads`] (one registered before the favour, one while it
    /// lasts), the nice value and slice each runs with as read by another thread.
    #[test]
    fn runtime_threads_are_favoured_while_components_are_there_and_not_after_the_hold() {
        let Ok(favoured) = std::thread::spawn(favour_thread).join().unwrap() else {
            return; // this kernel has no sched_setattr for normal threads
        };
        if favoured.slice_ns != SLICE_NS {
            return; // a kernel before 6.12: no custom slices
        }
        let base = of(0).unwrap().nice;
        let threads = Arc::new(RuntimeThreads::default());
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let stop_rx = Arc::new(Mutex::new(stop_rx));
        let start = |threads: &Arc<RuntimeThreads>| {
            let (own, stop) = (threads.clone(), stop_rx.clone());
            let before = threads.tids().len();
            let h = std::thread::spawn(move || {
                own.register_current();
                let _ = stop.lock().unwrap().recv();
                own.unregister_current();
            });
            while threads.tids().len() == before {
                std::thread::yield_now();
            }
            h
        };
        let attrs = |threads: &RuntimeThreads| -> Vec<(i32, u64)> {
            threads
                .tids()
                .iter()
                .map(|&t| of(t).unwrap())
                .map(|f| (f.nice, f.slice_ns))
                .collect()
        };
        let first = start(&threads);
        let normal = attrs(&threads);
        assert_eq!(normal.len(), 1);
        assert_eq!(normal[0].0, base, "not favoured before any component");
        assert_ne!(normal[0].1, SLICE_NS, "not favoured before any component");

        threads.components(true);
        assert!(threads.favoured());
        let second = start(&threads);
        assert_eq!(
            attrs(&threads),
            vec![(favoured.nice, SLICE_NS); 2],
            "favoured, also the thread registered meanwhile"
        );

        // The last component ended: still favoured within the hold, not after it.
        threads.components(false);
        threads.settle(Instant::now());
        assert!(threads.favoured());
        assert_eq!(attrs(&threads), vec![(favoured.nice, SLICE_NS); 2]);
        threads.settle(Instant::now() + RUNTIME_FAVOUR_HOLD);
        assert!(!threads.favoured());
        assert_eq!(
            attrs(&threads),
            vec![normal[0]; 2],
            "back to the nice value and slice they started with"
        );

        // A component that comes within the hold keeps the favour.
        threads.components(true);
        threads.components(false);
        threads.components(true);
        threads.settle(Instant::now() + RUNTIME_FAVOUR_HOLD);
        assert!(threads.favoured());
        assert_eq!(attrs(&threads), vec![(favoured.nice, SLICE_NS); 2]);

        drop(stop_tx);
        first.join().unwrap();
        second.join().unwrap();
        assert!(threads.tids().is_empty(), "a stopped thread is forgotten");
    }
}
