//! Library part of the `koalesce` command: what its tests (and other tools) call directly.
//!
//! - [`testbed`]: `koalesce testbed`, several real Slurm clusters on this machine.

pub mod testbed;
