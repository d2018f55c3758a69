//! The simulated LRM answers reservation requests exactly as the core's reservation table
//! (001 §2.3) does, given what the LRM holds: under random local jobs, claims, reservations,
//! cancellations and time, every `reserve` is granted, refused with the same `T_next`, or refused
//! for good in agreement with `ReservationTable::request`.

use koalesce_core::broker::{Profile, ReservationReply, ReservationRequest, ReservationTable};
use koalesce_sim::broker::held;
use koalesce_sim::lrm::{GridKey, LocalJob, LocalRm, LrmConfig};
use proptest::prelude::*;

const P: u32 = 16;

#[derive(Debug, Clone)]
enum Op {
    Local { procs: u32, runtime: u64, slack: u64 },
    Claim { key: u32, procs: u32 },
    Reserve { key: u32, procs: u32, start: u64, duration: u64 },
    ClaimReservation { key: u32 },
    Cancel { key: u32 },
    Release { key: u32 },
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u32..=P, 1u64..60, 0u64..30).prop_map(|(procs, runtime, slack)| Op::Local { procs, runtime, slack }),
        1 => (0u32..6, 1u32..=8).prop_map(|(key, procs)| Op::Claim { key, procs }),
        4 => (0u32..6, 1u32..=18, 0u64..80, 1u64..40).prop_map(|(key, procs, start, duration)| Op::Reserve { key, procs, start, duration }),
        1 => (0u32..6).prop_map(|key| Op::ClaimReservation { key }),
        1 => (0u32..6).prop_map(|key| Op::Cancel { key }),
        1 => (0u32..6).prop_map(|key| Op::Release { key }),
        2 => (0u64..15).prop_map(Op::Advance),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn lrm_reserve_decides_as_the_core_table(ops in prop::collection::vec(op(), 1..60)) {
        let mut lrm = LocalRm::new(LrmConfig::new(P));
        let mut now = 0;
        for op in ops {
            match op {
                Op::Local { procs, runtime, slack } => {
                    let _ = lrm.submit_local(now, LocalJob::new(procs, runtime, runtime + slack));
                }
                Op::Claim { key, procs } => {
                    let _ = lrm.claim(now, GridKey(key as u64, 0), procs);
                }
                Op::Reserve { key, procs, start, duration } => {
                    let k = GridKey(key as u64, 0);
                    lrm.sync(now);
                    let in_use = lrm.claim_of(k).is_some() || lrm.reservation(k).is_some();
                    let others = Profile::build(P, now, held(&lrm, now));
                    let mut table = ReservationTable::new(P);
                    let core = table.request(now, &ReservationRequest::at(procs, start, duration), Some(&others));
                    let sim = lrm.reserve(now, k, procs, start, duration);
                    if in_use {
                        prop_assert!(sim.is_err());
                        continue;
                    }
                    match (sim, core) {
                        (Ok(_), ReservationReply::Granted { start: s, .. }) => prop_assert_eq!(s, start),
                        (Err(e), ReservationReply::RejectedNext { t_next }) => prop_assert_eq!(e.earliest_possible, Some(t_next)),
                        (Err(e), ReservationReply::Rejected) => prop_assert_eq!(e.earliest_possible, None),
                        (sim, core) => prop_assert!(false, "LRM {:?} but core {:?}", sim, core),
                    }
                }
                Op::ClaimReservation { key } => {
                    let _ = lrm.claim_reservation(now, GridKey(key as u64, 0));
                }
                Op::Cancel { key } => {
                    lrm.cancel_reservation(now, GridKey(key as u64, 0));
                }
                Op::Release { key } => {
                    lrm.release(now, GridKey(key as u64, 0));
                }
                Op::Advance(dt) => now += dt,
            }
            lrm.take_events();
            if let Err(e) = lrm.check_invariants() {
                prop_assert!(e.0.contains("profile commits"), "{}", e);
            }
        }
    }
}
