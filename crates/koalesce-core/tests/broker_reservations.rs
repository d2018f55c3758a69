//! The reservation table of 001 §2.3 under random operations, checked against brute force:
//! never over-reserved at any instant, every reservation inside its own window, a grant at the
//! earliest start that fits, and `T_next` exactly the earliest start at which the same request
//! fits (moving nothing).

use koalesce_core::broker::{Profile, ReservationId, ReservationReply, ReservationRequest, ReservationTable};
use koalesce_core::Millis;
use proptest::prelude::*;

const CAP: u32 = 8;
const HORIZON: Millis = 200;

#[derive(Debug, Clone)]
enum Op {
    Request(ReservationRequest),
    Release(usize),
    Modify(usize, ReservationRequest),
    Advance(Millis),
    /// Moves flexible reservations earlier where room freed up.
    MoveEarlier,
    /// Releases a reservation and restores it at its start (a restarted server).
    Restore(usize),
}

fn request() -> impl Strategy<Value = ReservationRequest> {
    (0u32..=9, 0u64..12, 0u64..40, 0u64..12, prop::bool::weighted(0.3)).prop_map(|(processors, duration_ms, earliest, span, flexible)| {
        ReservationRequest {
            processors,
            duration_ms,
            earliest_start: earliest,
            latest_start: earliest + span,
            flexible,
        }
    })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => request().prop_map(Op::Request),
        1 => (0usize..8).prop_map(Op::Release),
        2 => ((0usize..8), request()).prop_map(|(i, r)| Op::Modify(i, r)),
        1 => (0u64..6).prop_map(Op::Advance),
        2 => Just(Op::MoveEarlier),
        1 => (0usize..8).prop_map(Op::Restore),
    ]
}

/// Processors used at `t` by the other commitments and the table's reservations.
fn used(t: Millis, table: &ReservationTable, others: &Profile) -> u64 {
    others.used_at(t)
        + table
            .iter()
            .filter(|r| r.start <= t && t < r.end)
            .map(|r| r.processors as u64)
            .sum::<u64>()
}

/// The earliest `s ≥ lo` where `req` fits next to everything (moving nothing), by brute force.
fn brute_earliest(lo: Millis, req: &ReservationRequest, table: &ReservationTable, others: &Profile) -> Option<Millis> {
    if req.processors == 0 || req.processors > CAP || req.duration_ms == 0 {
        return None;
    }
    (lo..=HORIZON).find(|&s| (s..s + req.duration_ms).all(|t| used(t, table, others) + req.processors as u64 <= CAP as u64))
}

fn check_reply(
    now: Millis,
    req: &ReservationRequest,
    before: &ReservationTable,
    after: &mut ReservationTable,
    others: &Profile,
    reply: ReservationReply,
) {
    let lo = req.earliest_start.max(now);
    let plain = brute_earliest(lo, req, before, others);
    let moved = after.take_relocations();
    let valid = req.processors > 0 && req.processors <= CAP && req.duration_ms > 0 && req.latest_start >= req.earliest_start;
    match reply {
        ReservationReply::Granted { id, start } => {
            assert!(valid);
            assert!(
                start >= lo && start <= req.latest_start,
                "granted at {start} outside [{lo}, {}]",
                req.latest_start
            );
            if moved.is_empty() {
                assert_eq!(Some(start), plain, "a grant without moves is the earliest plain fit");
            } else {
                assert!(
                    plain.is_none_or(|p| p > req.latest_start),
                    "moved flexible reservations though the request fit"
                );
                for m in &moved {
                    assert!(before.get(m.id).is_some_and(|r| r.flexible && r.start == m.from && r.start > now));
                }
            }
            let r = after.get(id).expect("granted reservation is in the table");
            assert_eq!((r.start, r.end, r.processors), (start, start + req.duration_ms, req.processors));
        }
        ReservationReply::RejectedNext { t_next } => {
            assert!(moved.is_empty());
            assert_eq!(Some(t_next), plain, "T_next is the earliest start that fits");
            assert!(t_next > req.latest_start || lo > req.latest_start);
        }
        ReservationReply::Rejected => {
            assert!(moved.is_empty());
            assert!(!valid || plain.is_none(), "rejected for good, but it fits at {plain:?}");
        }
    }
}

fn check_invariants(now: Millis, table: &ReservationTable, others: &Profile) {
    for t in now..HORIZON + 20 {
        assert!(used(t, table, others) <= CAP as u64, "over-reserved at {t}");
        let from_profile = table.reserved().used_at(t);
        let from_list: u64 = table
            .iter()
            .filter(|r| r.start <= t && t < r.end)
            .map(|r| r.processors as u64)
            .sum();
        assert_eq!(from_profile, from_list, "profile out of sync at {t}");
    }
    for r in table.iter() {
        assert!(r.start >= r.earliest_start && r.start <= r.latest_start, "{r:?} outside its window");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn table_against_brute_force(
        busy in prop::collection::vec((0u64..60, 1u64..30, 1u32..=4), 0..=2),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let others = Profile::build(CAP, 0, busy.iter().map(|&(s, l, p)| (s, s + l, p)));
        let mut table = ReservationTable::new(CAP);
        let mut ids: Vec<ReservationId> = Vec::new();
        let mut now = 0;
        for op in ops {
            match op {
                Op::Request(req) => {
                    let before = table.clone();
                    let reply = table.request(now, &req, Some(&others));
                    check_reply(now, &req, &before, &mut table, &others, reply);
                    if let ReservationReply::Granted { id, .. } = reply {
                        ids.push(id);
                    }
                }
                Op::Release(i) if !ids.is_empty() => {
                    let id = ids.remove(i % ids.len());
                    prop_assert!(table.release(id).is_some());
                    prop_assert!(table.get(id).is_none());
                }
                Op::Modify(i, req) if !ids.is_empty() => {
                    let id = ids.remove(i % ids.len());
                    // Modify = release + create: the answer is the one the table without it gives.
                    let mut without = table.clone();
                    without.release(id);
                    let reply = table.modify(now, id, &req, Some(&others));
                    prop_assert!(table.get(id).is_none(), "the old reservation is gone either way");
                    check_reply(now, &req, &without, &mut table, &others, reply);
                    if let ReservationReply::Granted { id, .. } = reply {
                        ids.push(id);
                    }
                }
                Op::Advance(dt) => {
                    now += dt;
                    for r in table.expire(now) {
                        prop_assert!(r.end <= now);
                        ids.retain(|&i| i != r.id);
                    }
                }
                Op::MoveEarlier => {
                    let before = table.clone();
                    let moves = table.advance(now, Some(&others));
                    prop_assert_eq!(&table.take_relocations(), &moves);
                    for m in &moves {
                        let old = before.get(m.id).expect("moved reservation existed");
                        let new = table.get(m.id).expect("moved reservation exists");
                        prop_assert!(old.flexible && old.start > now, "moved {:?}, not a flexible waiting one", old);
                        prop_assert!(m.to < m.from && m.from == old.start && new.start == m.to, "{:?}", m);
                        prop_assert!(m.to >= now && new.start >= new.earliest_start && new.start <= new.latest_start);
                        prop_assert_eq!(new.duration(), old.duration());
                    }
                    // Everything else stays.
                    for r in before.iter().filter(|r| !moves.iter().any(|m| m.id == r.id)) {
                        prop_assert_eq!(table.get(r.id), Some(r));
                    }
                    // A second pass right after has no room left for the first reservation
                    // that could move: each moved one sits at its earliest fit.
                    for m in &moves {
                        let r = *table.get(m.id).unwrap();
                        let mut without = table.clone();
                        without.release(r.id);
                        let lo = r.earliest_start.max(now);
                        let req = ReservationRequest::window(r.processors, r.duration(), lo, r.start);
                        let earliest = brute_earliest(lo, &req, &without, &others);
                        prop_assert!(earliest.is_some_and(|e| e <= r.start), "moved to {} where it does not fit", r.start);
                    }
                }
                Op::Restore(i) if !ids.is_empty() => {
                    let id = ids.remove(i % ids.len());
                    let r = *table.get(id).unwrap();
                    table.release(id);
                    let back = table.restore(now, &r, Some(&others));
                    let back = back.expect("a reservation released just now fits again at its start");
                    let b = *table.get(back).unwrap();
                    prop_assert_eq!((b.start, b.end, b.processors, b.flexible), (r.start.max(now), r.end, r.processors, r.flexible));
                    prop_assert_eq!((b.earliest_start, b.latest_start.max(b.start)), (r.earliest_start, r.latest_start.max(b.start)));
                    ids.push(back);
                }
                _ => {}
            }
            check_invariants(now, &table, &others);
        }
    }
}
