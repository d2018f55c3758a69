//! Property tests of the LRM: random operation sequences keep the invariants, and EASY
//! agrees with a plain reference simulation.

use proptest::prelude::*;

use super::tests::lrm;
use super::*;

#[derive(Clone, Debug)]
enum Op {
    Submit { procs: u32, runtime: Millis, slack: Millis },
    Claim { key: u32, procs: u32 },
    Release { key: u32 },
    Reserve { key: u32, procs: u32, lead: Millis, dur: Millis },
    ClaimRes { key: u32 },
    Cancel { key: u32 },
    Kill { idx: u64 },
    Advance { dt: Millis },
    AdvanceToEvent,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u32..=14, 1u64..300, 0u64..200)
            .prop_map(|(procs, runtime, slack)| Op::Submit { procs, runtime, slack }),
        2 => (0u32..6, 0u32..8).prop_map(|(key, procs)| Op::Claim { key, procs }),
        2 => (0u32..6).prop_map(|key| Op::Release { key }),
        2 => (0u32..6, 1u32..=12, 0u64..300, 1u64..300)
            .prop_map(|(key, procs, lead, dur)| Op::Reserve { key, procs, lead, dur }),
        1 => (0u32..6).prop_map(|key| Op::ClaimRes { key }),
        1 => (0u32..6).prop_map(|key| Op::Cancel { key }),
        1 => (0u64..40).prop_map(|idx| Op::Kill { idx }),
        3 => (0u64..120).prop_map(|dt| Op::Advance { dt }),
        3 => Just(Op::AdvanceToEvent),
    ]
}

fn has_overrun(l: &LocalRm) -> bool {
    l.claims().any(|(_, c)| matches!(c.reservation_end, Some(e) if e <= l.now()))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 300,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_operations_keep_invariants(
        easy in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let policy = if easy { LocalPolicy::EasyBackfill } else { LocalPolicy::Fcfs };
        let mut l = lrm(12, policy);
        let mut now: Millis = 0;
        for op in ops {
            match op {
                Op::Submit { procs, runtime, slack } => {
                    let r = l.submit_local(now, LocalJob::new(procs, runtime, runtime + slack));
                    prop_assert_eq!(r.is_ok(), procs <= 12);
                }
                Op::Claim { key, procs } => {
                    let before = l.claimable();
                    let r = l.claim(now, GridKey(u64::from(key), 0), procs);
                    if r.is_ok() {
                        prop_assert!(procs <= before);
                    }
                }
                Op::Release { key } => {
                    l.release(now, GridKey(u64::from(key), 0));
                }
                Op::Reserve { key, procs, lead, dur } => {
                    let key = GridKey(u64::from(key), 0);
                    if let Err(e) = l.reserve(now, key, procs, now + lead, dur) {
                        // The suggested start must be grantable right away.
                        if let Some(t) = e.earliest_possible {
                            prop_assert!(t >= now + lead);
                            let mut copy = l.clone();
                            prop_assert!(copy.reserve(now, key, procs, t, dur).is_ok());
                        }
                    }
                }
                Op::ClaimRes { key } => {
                    let key = GridKey(u64::from(key), 0);
                    if let Some(r) = l.reservation(key).copied() {
                        // Jump to the start (if needed) and claim: must succeed.
                        now = now.max(r.start);
                        l.advance(now);
                        if l.reservation(key).is_some() && !has_overrun(&l) {
                            prop_assert_eq!(l.claim_reservation(now, key), Ok(()));
                        }
                    }
                }
                Op::Cancel { key } => {
                    l.cancel_reservation(now, GridKey(u64::from(key), 0));
                }
                Op::Kill { idx } => {
                    l.kill_local(now, LocalJobId(idx));
                }
                Op::Advance { dt } => {
                    now += dt;
                    l.advance(now);
                }
                Op::AdvanceToEvent => {
                    if let Some(t) = l.next_event_time() {
                        now = now.max(t);
                        l.advance(now);
                    }
                }
            }
            prop_assert!(l.busy_local() + l.busy_grid() <= 12);
            if let Err(e) = l.check_invariants() {
                prop_assert!(false, "{}", e);
            }
            // No local job ever runs into an unclaimed reservation's processors.
            prop_assert!(l.idle() >= l.reserved_now() || has_overrun(&l));
        }
    }

    #[test]
    fn easy_matches_reference_without_grid_load(
        jobs in proptest::collection::vec((0u64..50, 1u32..=16, 1u64..200, 0u64..200), 1..80),
        easy in any::<bool>(),
    ) {
        let jobs: Vec<RefJob> = {
            let mut t = 0;
            jobs.into_iter().map(|(gap, procs, rt, slack)| {
                t += gap;
                RefJob { submit: t, procs, runtime: rt, estimate: rt + slack }
            }).collect()
        };
        let expected = reference_sim(&jobs, 16, easy);
        let policy = if easy { LocalPolicy::EasyBackfill } else { LocalPolicy::Fcfs };
        let mut l = lrm(16, policy);
        let mut next = 0;
        loop {
            let arrival = jobs.get(next).map(|j| j.submit);
            let t = match (arrival, l.next_event_time()) {
                (Some(a), Some(e)) => a.min(e),
                (Some(a), None) | (None, Some(a)) => a,
                (None, None) => break,
            };
            l.advance(t);
            while next < jobs.len() && jobs[next].submit == t {
                let j = jobs[next];
                l.submit_local(t, LocalJob::new(j.procs, j.runtime, j.estimate)).unwrap();
                next += 1;
            }
        }
        let got: Vec<Millis> = l.jobs().iter().map(|r| r.start_ms.unwrap()).collect();
        prop_assert_eq!(got, expected);
    }
}

#[derive(Clone, Copy, Debug)]
struct RefJob {
    submit: Millis,
    procs: u32,
    runtime: Millis,
    estimate: Millis,
}

/// Straightforward FCFS / EASY (Mu'alem & Feitelson) simulator: at each instant process ends,
/// then arrivals, then one pass. Returns start times.
fn reference_sim(jobs: &[RefJob], cap: u32, easy: bool) -> Vec<Millis> {
    let mut starts = vec![None; jobs.len()];
    let mut queue: Vec<usize> = Vec::new();
    let mut running: Vec<(Millis, Millis, u32)> = Vec::new(); // (end, est_end, procs)
    let mut free = cap;
    let mut next = 0;
    loop {
        let t = running.iter().map(|r| r.0).chain(jobs.get(next).map(|j| j.submit)).min();
        let Some(t) = t else { break };
        running.retain(|r| {
            if r.0 <= t {
                free += r.2;
                false
            } else {
                true
            }
        });
        while next < jobs.len() && jobs[next].submit <= t {
            queue.push(next);
            next += 1;
        }
        // FCFS heads.
        while let Some(&h) = queue.first() {
            if jobs[h].procs > free {
                break;
            }
            queue.remove(0);
            free -= jobs[h].procs;
            starts[h] = Some(t);
            running.push((t + jobs[h].runtime, t + jobs[h].estimate, jobs[h].procs));
        }
        if easy && queue.len() > 1 {
            let h = jobs[queue[0]];
            let mut ests: Vec<(Millis, u32)> = running.iter().map(|r| (r.1, r.2)).collect();
            ests.sort();
            let mut avail = free;
            let mut shadow = Millis::MAX;
            for (e, p) in ests {
                // Every job ending by the shadow time counts as freed there.
                if avail >= h.procs && e > shadow {
                    break;
                }
                avail += p;
                if avail >= h.procs && shadow == Millis::MAX {
                    shadow = e;
                }
            }
            let mut extra = avail - h.procs;
            let mut i = 1;
            while i < queue.len() {
                let j = jobs[queue[i]];
                let fits_now = j.procs <= free;
                if fits_now && (t + j.estimate <= shadow || j.procs <= extra) {
                    if t + j.estimate > shadow {
                        extra -= j.procs;
                    }
                    free -= j.procs;
                    starts[queue[i]] = Some(t);
                    running.push((t + j.runtime, t + j.estimate, j.procs));
                    queue.remove(i);
                } else {
                    i += 1;
                }
            }
        }
    }
    starts.into_iter().map(|s| s.unwrap()).collect()
}
