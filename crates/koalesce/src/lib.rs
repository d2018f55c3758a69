//! Library part of the `koalesce` command: what its tests (and other tools) call directly.
//!
//! - [`testbed`]: `koalesce testbed`, several real Slurm clusters on this machine.
//! - [`netbed`]: `koalesce netbed`, a shaped network of namespaces (also `testbed up --network`).

pub mod netbed;
pub mod testbed;
