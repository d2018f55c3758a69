//! The grid schedulers' decisions (002 §III): ATT, sender-initiated, receiver-initiated,
//! symmetrically-initiated and centralized.
//!
//! Times are integer milliseconds; `None` stands for the seed's infinity (a server that cannot
//! hold the job). Offers are compared by ATT; ATTs within a factor 1 + ε of each other count as
//! equal and the lowest resource utilization RU wins among them ("In case multiple machines
//! respond with ATT values that are within a small tolerance ε, the server with the lowest RU is
//! chosen", §III-A1). Remaining ties go to the earlier offer in the slice, so a caller that lists
//! peers in a fixed order gets deterministic decisions.

use super::Params;
use crate::model::Millis;

/// ERT(j, s_f): the expected run time on a server of clock `target_mhz` of a job whose run time
/// estimate on its home server (clock `home_mhz`) is `estimate_ms`. "We simplify the calculation
/// of ERT by assuming that run time is only related to the clock frequency of the compute
/// server" (§III-A1); "program performance is linearly related to CPU speed" (§IV-A). Rounded to
/// the nearest millisecond, at least 1 ms for a positive estimate.
pub fn ert(estimate_ms: Millis, home_mhz: u32, target_mhz: u32) -> Millis {
    if estimate_ms == 0 || home_mhz == target_mhz || target_mhz == 0 {
        return estimate_ms;
    }
    let scaled = (u128::from(estimate_ms) * u128::from(home_mhz) + u128::from(target_mhz) / 2) / u128::from(target_mhz);
    (scaled.min(u128::from(Millis::MAX)) as Millis).max(1)
}

/// ATT(j, s_f) = max(AWT(j, s_f), ADT(j_in, s_i, s_f)) + ERT(j, s_f) + ADT(j_out, s_f, s_i)
/// (§III-A1): input transfer and queue wait overlap, then the run, then the output's return.
/// `None` when the AWT is infinite. For the origin server itself both ADTs are 0; a
/// communication-oblivious scheduler (§V-D) passes 0 for them too.
pub fn att(awt: Option<Millis>, adt_in: Millis, ert: Millis, adt_out: Millis) -> Option<Millis> {
    let awt = awt?;
    Some(awt.max(adt_in).saturating_add(ert).saturating_add(adt_out))
}

/// Resource utilization RU: "the fraction of CPUs assigned to jobs" (§III-A1), here of nodes.
pub fn ru(busy_nodes: u32, total_nodes: u32) -> f64 {
    if total_nodes == 0 {
        1.0
    } else {
        f64::from(busy_nodes) / f64::from(total_nodes)
    }
}

/// One server's answer to a job's resource requirements: its ATT for the job and its RU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Offer {
    pub att: Option<Millis>,
    pub ru: f64,
}

/// Where a job goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The server the job was submitted to.
    Local,
    /// The peer at this index of the offers given.
    Peer(usize),
}

/// A sender-initiated decision with the numbers behind it (what `koalesce status` shows as the
/// reason a job moved or stayed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub target: Target,
    /// The local ATT.
    pub local_att: Option<Millis>,
    /// The minimum ATT over the local server and every peer that answered.
    pub min_att: Option<Millis>,
}

/// `a` is within the tolerance ε of `b` or below it: a ≤ (1 + ε)·b.
fn within(epsilon: f64, a: Millis, b: Millis) -> bool {
    a <= b || (a as f64) <= (1.0 + epsilon) * b as f64
}

/// Whether an ATT of `att` is within the tolerance ε of `best` or below it, i.e. could be the
/// minimum or tie with it.
pub fn within_tolerance(params: &Params, att: Millis, best: Millis) -> bool {
    within(params.epsilon, att, best)
}

/// The first step of every distributed algorithm (§III-A): a job whose local AWT is less than φ
/// goes straight to the local queue.
pub fn stays_local(params: &Params, local_awt: Option<Millis>) -> bool {
    local_awt.is_some_and(|w| w < params.phi_ms)
}

/// Among `offers`, the index of the lowest ATT, ties within ε broken by the lowest RU, then by
/// position. `None` when no offer has a finite ATT.
pub fn best(params: &Params, offers: &[Offer]) -> Option<usize> {
    let min = offers.iter().filter_map(|o| o.att).min()?;
    let mut pick: Option<usize> = None;
    for (i, o) in offers.iter().enumerate() {
        let Some(a) = o.att else { continue };
        if !within(params.epsilon, a, min) {
            continue;
        }
        match pick {
            Some(p) if offers[p].ru <= o.ru => {}
            _ => pick = Some(i),
        }
    }
    pick
}

/// Sender-initiated (§III-A1), once the local AWT has reached φ and the peers have answered:
/// "If the local ATT is within a factor τ of the minimum ATT, j is scheduled for execution on
/// s_i; otherwise, j is migrated", to the peer with the minimum ATT, or among peers within ε of
/// it the one with the lowest RU. Peers that did not answer are simply left out of `peers`.
pub fn sender_initiated(params: &Params, local: Offer, peers: &[Offer]) -> Decision {
    let peer_min = peers.iter().filter_map(|o| o.att).min();
    let min_att = match (local.att, peer_min) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let decision = |target| Decision {
        target,
        local_att: local.att,
        min_att,
    };
    let Some(min) = min_att else {
        return decision(Target::Local);
    };
    if let Some(l) = local.att {
        if (l as f64) <= params.tau * min as f64 {
            return decision(Target::Local);
        }
    }
    match best(params, peers) {
        Some(p) => decision(Target::Peer(p)),
        None => decision(Target::Local),
    }
}

/// Receiver-initiated (§III-A2), on the peer holding the job: "If the ATT of the volunteer system
/// is lower than that of p (or if the local and remote ATT's are within the tolerance ε but the
/// RU of the volunteer is smaller), the job is transferred to the LQ of that system."
pub fn receiver_initiated(params: &Params, local: Offer, volunteer: Offer) -> bool {
    match (local.att, volunteer.att) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(l), Some(v)) => v < l || (within(params.epsilon, v, l) && within(params.epsilon, l, v) && volunteer.ru < local.ru),
    }
}

/// Whether a server volunteers at its periodic check: "If the RU is below a threshold δ, the
/// system volunteers itself for receiving jobs" (§III-A2).
pub fn volunteers(params: &Params, ru: f64) -> bool {
    ru < params.delta
}

/// Centralized (§III-B1): one grid scheduler with perfect information "selects the optimal server
/// (based on ATT and RU)": the minimum ATT, ties within ε by the lowest RU.
pub fn centralized(params: &Params, offers: &[Offer]) -> Option<usize> {
    best(params, offers)
}

/// The part of ATT(j, s_f) known without the wait: ADT(j_in) + ERT + ADT(j_out), a lower bound
/// of the ATT whatever the AWT (the wait only adds once it exceeds the input transfer).
pub fn att_lower_bound(adt_in: Millis, ert: Millis, adt_out: Millis) -> Millis {
    adt_in.saturating_add(ert).saturating_add(adt_out)
}

/// The largest ATT still within ε of `best` (ATTs above it can neither be the minimum nor tie
/// with it).
fn tolerance_limit(params: &Params, best: Millis) -> Millis {
    ((1.0 + params.epsilon) * best as f64).floor().max(best as f64) as Millis
}

/// The longest AWT with which an offer (its ADTs and ERT given) would still be within ε of
/// `best`, so worth knowing exactly; `None` when it cannot be, whatever its wait. A driver that
/// collects offers itself (the simulator, a centralized scheduler) uses it to stop simulating a
/// server's queue once the answer cannot change the decision; the decision is the same.
pub fn awt_cutoff(params: &Params, best: Millis, adt_in: Millis, ert: Millis, adt_out: Millis) -> Option<Millis> {
    let room = tolerance_limit(params, best).checked_sub(ert.saturating_add(adt_out))?;
    (adt_in <= room).then_some(room)
}

/// The longest local AWT with which a job stays local under the sender-initiated rule (local
/// ATT ≤ τ × the minimum of the peers' ATTs, `min_peers`); `None` when its run alone is too long.
pub fn local_awt_cutoff(params: &Params, min_peers: Millis, ert_local: Millis) -> Option<Millis> {
    let limit = (params.tau * min_peers as f64).floor() as Millis;
    limit.checked_sub(ert_local)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(att: Option<Millis>, ru: f64) -> Offer {
        Offer { att, ru }
    }

    #[test]
    fn ert_scales_with_the_clock() {
        // 600 s at 250 MHz runs 250 s at 600 MHz.
        assert_eq!(ert(600_000, 250, 600), 250_000);
        assert_eq!(ert(250_000, 600, 250), 600_000);
        assert_eq!(ert(1_000, 375, 375), 1_000);
        // 1000 ms * 332 / 375 = 885.33 -> 885.
        assert_eq!(ert(1_000, 332, 375), 885);
        assert_eq!(ert(1, 250, 600), 1);
        assert_eq!(ert(0, 250, 600), 0);
        assert_eq!(ert(Millis::MAX, 600, 250), Millis::MAX);
    }

    #[test]
    fn att_overlaps_input_with_the_wait() {
        // Wait 100 s, input 30 s (hidden by the wait), run 200 s, output 50 s.
        assert_eq!(att(Some(100_000), 30_000, 200_000, 50_000), Some(350_000));
        // Input 300 s longer than the wait: it decides the start.
        assert_eq!(att(Some(100_000), 300_000, 200_000, 50_000), Some(550_000));
        assert_eq!(att(None, 0, 1, 0), None);
        assert_eq!(att(Some(Millis::MAX), 0, 5, 5), Some(Millis::MAX));
    }

    #[test]
    fn phi_gate_is_strict() {
        let p = Params::default();
        assert!(stays_local(&p, Some(59_999)));
        assert!(!stays_local(&p, Some(60_000)));
        assert!(!stays_local(&p, None));
    }

    #[test]
    fn sender_initiated_at_the_tau_threshold() {
        let p = Params::default();
        let peers = [offer(Some(1_000_000), 0.5), offer(Some(2_000_000), 0.1)];
        // Local ATT exactly 1.4 × the minimum: stays.
        let d = sender_initiated(&p, offer(Some(1_400_000), 0.9), &peers);
        assert_eq!(d.target, Target::Local);
        assert_eq!(d.min_att, Some(1_000_000));
        // One millisecond more: migrates to the minimum.
        let d = sender_initiated(&p, offer(Some(1_400_001), 0.9), &peers);
        assert_eq!(d.target, Target::Peer(0));
        assert_eq!(d.local_att, Some(1_400_001));
        // The local server is the minimum: stays.
        let d = sender_initiated(&p, offer(Some(900_000), 0.9), &peers);
        assert_eq!(d.target, Target::Local);
        // Local cannot hold the job (infinite AWT): migrates.
        let d = sender_initiated(&p, offer(None, 1.0), &peers);
        assert_eq!(d.target, Target::Peer(0));
        // No peer answered, or none can hold it: stays.
        assert_eq!(sender_initiated(&p, offer(Some(5), 1.0), &[]).target, Target::Local);
        assert_eq!(sender_initiated(&p, offer(Some(5), 1.0), &[offer(None, 0.0)]).target, Target::Local);
    }

    #[test]
    fn epsilon_ties_go_to_the_lowest_ru() {
        let p = Params::default();
        // 1_010_000 is within 1% of 1_000_000 and has the lower RU; 1_010_001 is not within.
        let peers = [
            offer(Some(1_000_000), 0.8),
            offer(Some(1_010_000), 0.3),
            offer(Some(1_010_001), 0.0),
        ];
        assert_eq!(sender_initiated(&p, offer(Some(10_000_000), 1.0), &peers).target, Target::Peer(1));
        // Equal RU: the earlier offer.
        let peers = [offer(Some(1_005_000), 0.3), offer(Some(1_000_000), 0.3)];
        assert_eq!(best(&p, &peers), Some(0));
        assert_eq!(centralized(&p, &peers), Some(0));
        assert_eq!(centralized(&p, &[offer(None, 0.0)]), None);
    }

    #[test]
    fn cutoffs_keep_exactly_the_offers_that_matter() {
        let p = Params::default();
        // best 1_000_000: limit 1_010_000. An offer with ERT 600_000 and output 100_000 matters
        // while its wait (or input) is at most 310_000.
        assert_eq!(awt_cutoff(&p, 1_000_000, 0, 600_000, 100_000), Some(310_000));
        assert_eq!(awt_cutoff(&p, 1_000_000, 310_000, 600_000, 100_000), Some(310_000));
        assert_eq!(awt_cutoff(&p, 1_000_000, 310_001, 600_000, 100_000), None);
        assert_eq!(awt_cutoff(&p, 1_000_000, 0, 1_000_000, 10_001), None);
        assert_eq!(att_lower_bound(310_001, 600_000, 100_000), 1_010_001);
        // At the cutoff the offer ties within ε; one more and it does not.
        let at = |w| att(Some(w), 0, 600_000, 100_000).unwrap();
        assert!(best(&p, &[offer(Some(1_000_000), 0.9), offer(Some(at(310_000)), 0.1)]) == Some(1));
        assert!(best(&p, &[offer(Some(1_000_000), 0.9), offer(Some(at(310_001)), 0.1)]) == Some(0));
        // Local: stays while AWT + ERT <= 1.4 x min_peers.
        assert_eq!(local_awt_cutoff(&p, 1_000_000, 1_000_000), Some(400_000));
        assert_eq!(local_awt_cutoff(&p, 1_000_000, 1_400_001), None);
        let peers = [offer(Some(1_000_000), 0.5)];
        assert_eq!(sender_initiated(&p, offer(Some(1_400_000), 0.9), &peers).target, Target::Local);
        assert_eq!(sender_initiated(&p, offer(Some(1_400_001), 0.9), &peers).target, Target::Peer(0));
    }

    #[test]
    fn receiver_initiated_rules() {
        let p = Params::default();
        // Volunteer strictly faster: moves.
        assert!(receiver_initiated(&p, offer(Some(1_000_000), 0.1), offer(Some(999_999), 0.9)));
        // Slower by more than ε: stays.
        assert!(!receiver_initiated(&p, offer(Some(1_000_000), 0.9), offer(Some(1_010_001), 0.1)));
        // Within ε and the volunteer less utilized: moves; more utilized or equal: stays.
        assert!(receiver_initiated(&p, offer(Some(1_000_000), 0.9), offer(Some(1_010_000), 0.1)));
        assert!(!receiver_initiated(&p, offer(Some(1_000_000), 0.1), offer(Some(1_010_000), 0.9)));
        assert!(!receiver_initiated(&p, offer(Some(1_000_000), 0.5), offer(Some(1_000_000), 0.5)));
        // Infinite ATTs.
        assert!(!receiver_initiated(&p, offer(Some(1), 0.0), offer(None, 0.0)));
        assert!(receiver_initiated(&p, offer(None, 1.0), offer(Some(1), 1.0)));
        // δ threshold is strict.
        assert!(volunteers(&p, 0.69));
        assert!(!volunteers(&p, 0.7));
        assert_eq!(ru(7, 10), 0.7);
        assert_eq!(ru(0, 0), 1.0);
    }
}
