//! The supervisor's own work at a lower CPU priority than the daemon and the jobs.
//!
//! Setting a component up (its records, control group, sandbox) and tearing it down is pure
//! overhead, and with hundreds of components starting at once it competes for the CPU with the
//! daemon, which acknowledges submissions and starts the next launches (`koalesce bench e2e`:
//! submit p99 of 100–180 ms while jobs ran). A supervisor therefore lowers its own priority by
//! [`SETUP_NICE`] as soon as it starts, and its program gets the original priority back between
//! `fork` and `exec` ([`restore`]): the job itself runs exactly as it would have.
//!
//! Only a supervisor that runs as root does so: raising a priority again needs privilege, and a
//! job must never be left running niced by an unprivileged supervisor.

use std::sync::OnceLock;

/// How much lower (in nice steps) the supervisor's own work runs.
pub const SETUP_NICE: i32 = 10;

/// The priority this process had before [`lower_for_setup`] lowered it.
static ORIGINAL: OnceLock<i32> = OnceLock::new();

/// Lowers this process's priority by [`SETUP_NICE`] (once; only as root). Returns the
/// original priority when it was lowered.
pub fn lower_for_setup() -> Option<i32> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    if let Some(p) = ORIGINAL.get() {
        return Some(*p);
    }
    let original = rustix::process::getpriority_process(None).ok()?;
    rustix::process::setpriority_process(None, (original + SETUP_NICE).min(19)).ok()?;
    Some(*ORIGINAL.get_or_init(|| original))
}

/// Gives the calling process the priority it had before [`lower_for_setup`] (nothing when it
/// was not lowered). Only a system call and an atomic load: safe between `fork` and `exec`,
/// where it must come before the switch to the job's account (which loses the privilege).
pub fn restore() -> std::io::Result<()> {
    match ORIGINAL.get() {
        Some(&p) => rustix::process::setpriority_process(None, p).map_err(std::io::Error::from),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As root: lowered by SETUP_NICE, and a child that restores runs at the original
    /// priority. (Without root nothing changes.)
    #[test]
    fn lowered_for_setup_and_restored_for_the_program() {
        let before = rustix::process::getpriority_process(None).unwrap();
        // The test runs in a forked child, so the test process's own priority is untouched.
        // SAFETY: the child only makes system calls and exits with _exit.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                let lowered = lower_for_setup();
                let during = rustix::process::getpriority_process(None).unwrap_or(-100);
                let ok_during = match lowered {
                    Some(p) => p == before && during == (before + SETUP_NICE).min(19),
                    None => during == before,
                };
                let restored = restore().is_ok() && rustix::process::getpriority_process(None).ok() == Some(before);
                // SAFETY: exits the forked child without running the parent's destructors.
                unsafe { nix::libc::_exit(if ok_during && restored { 0 } else { 1 }) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                let status = nix::sys::wait::waitpid(child, None).unwrap();
                assert_eq!(status, nix::sys::wait::WaitStatus::Exited(child, 0));
            }
        }
    }
}
