//! Peer-to-peer federation policy (seed 002, Shan, Oliker, Smith and Biswas, "Scheduling in
//! heterogeneous grid environments: the effects of data migration").
//!
//! Every compute server has a local scheduler (LS, first-come-first-serve with backfilling, local
//! queue LQ) and a grid scheduler (GS, grid queue GQ). The grid schedulers are peers that migrate
//! jobs, with their data, to where they are expected to finish soonest. This module holds the
//! decisions, written once for both drivers: the simulator (`koalesce-sim`'s `p2p` module, on
//! virtual time) and the live federation of koalesce servers (on real time). Like the rest of the
//! core it performs no I/O and reads no clock: the inputs are numbers and estimates, the outputs
//! are decisions.
//!
//! - [`easy`]: the local scheduler, FCFS with EASY backfilling over nodes ([`easy::Easy`]), and
//!   the approximate wait time AWT(j, s) obtained by simulating it on a snapshot of the server's
//!   running and queued jobs plus j ([`easy::Snapshot`], [`easy::Replay`], [`easy::awt`]).
//! - [`policy`]: ATT(j, s_f) = max(AWT(j, s_f), ADT(j_in, s_i, s_f)) + ERT(j, s_f) +
//!   ADT(j_out, s_f, s_i); ERT scaled by clock speed; the sender-initiated (φ, τ, ε),
//!   receiver-initiated (δ, σ) and symmetrically-initiated decisions and the centralized choice.
//!
//! - [`live`]: a koalesce server (its core) seen as one compute server: the snapshot AWT is
//!   computed on, RU, and its offer (ATT, RU) for a peer's job.
//!
//! The parameters and their defaults are in [`Params`]; the seed's words are quoted there.

mod backfill;
pub mod easy;
pub mod live;
pub mod policy;
mod replay;

pub use easy::{awt, Easy, Replay, Reservation, Snapshot, SnapshotError, Wait, Waiting};
pub use policy::{att, ert, Decision, Offer, Target};

use crate::model::Millis;

/// The grid schedulers' parameters. The defaults are the seed's (002 §V):
///
/// > "We performed an initial set of experiments and determined that the optimal value for the
/// > migration threshold τ is 1.4. This means that a job is not migrated unless its local
/// > approximate turnaround time (ATT) is 40% more than the ATT on a remote system. The other
/// > parameters are set as follows: threshold for waiting φ = 1 min, ATT comparison tolerance
/// > ε = 0.01, interval for checking workload σ = 5 mins, and utilization threshold δ = 0.7."
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// Migration threshold τ: a job stays local while its local ATT ≤ τ × the minimum ATT.
    pub tau: f64,
    /// Waiting threshold φ: a job whose local AWT is below it goes straight to the local queue.
    pub phi_ms: Millis,
    /// ATT comparison tolerance ε (relative): ATTs within a factor 1 + ε count as equal, and the
    /// server with the lowest resource utilization RU wins among them.
    pub epsilon: f64,
    /// Interval σ at which a server checks its RU (and re-examines its grid queue).
    pub sigma_ms: Millis,
    /// Utilization threshold δ: a server with RU < δ volunteers to receive jobs.
    pub delta: f64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            tau: 1.4,
            phi_ms: 60_000,
            epsilon: 0.01,
            sigma_ms: 300_000,
            delta: 0.7,
        }
    }
}
