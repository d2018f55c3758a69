//! Tests of the shared network: pair indexing, validation, latency and bottleneck timing,
//! max-min sharing, caps, cancellation, estimates, and property tests of the fair-share
//! invariants over thousands of random transfers.

use super::*;
use proptest::prelude::*;

const MB: u64 = 1_000_000;
const GB: u64 = 1_000_000_000;
const MBPS: f64 = 1e6;

fn net(sites: usize, lan: f64, wan: f64, lat: Millis) -> Network {
    Network::new(NetworkSpec::uniform(sites, lan, wan, lat)).unwrap()
}

/// Drive the network until idle, returning (time, id) of each completion.
fn drain(n: &mut Network) -> Vec<(Millis, TransferId)> {
    let mut out = Vec::new();
    while let Some(t) = n.next_completion() {
        let got = n.advance_to_timed(t);
        assert!(!got.is_empty(), "next_completion {t} produced nothing");
        assert!(got.iter().all(|&(ct, _)| ct == t));
        out.extend(got);
    }
    out
}

/// Sum of allocated rates per link.
fn link_loads(n: &Network) -> Vec<f64> {
    let mut load = vec![0.0; n.caps.len()];
    for f in n.core.flows.iter() {
        for &l in f.links.links() {
            load[l] += f.rate;
        }
    }
    load
}

#[test]
fn pair_index_is_a_bijection() {
    for n in 2..7 {
        let mut seen = vec![false; n * (n - 1) / 2];
        for a in 0..n {
            for b in 0..n {
                if a != b {
                    let p = pair_index(n, a, b);
                    assert_eq!(p, pair_index(n, b, a));
                    seen[p] = true;
                }
            }
        }
        assert!(seen.iter().all(|&x| x));
    }
}

#[test]
fn rejects_bad_bandwidths() {
    let mut spec = NetworkSpec::uniform(3, 800.0 * MBPS, 40.0 * MBPS, 5);
    spec.lan_bps[1] = 0.0;
    let e = Network::new(spec.clone()).unwrap_err();
    assert!(e.to_string().contains("LAN of site 1"), "{e}");

    spec.lan_bps[1] = 800.0 * MBPS;
    spec.wan_overrides.insert((2, 0), (f64::NAN, 3));
    let e = Network::new(spec.clone()).unwrap_err();
    assert!(e.to_string().contains("WAN 0-2"), "{e}");

    spec.wan_overrides.insert((2, 0), (-1.0, 3));
    assert!(Network::new(spec.clone()).is_err());
    spec.wan_overrides.insert((2, 0), (f64::INFINITY, 3));
    assert!(Network::new(spec.clone()).is_err());

    spec.wan_overrides.clear();
    spec.default_wan_bps = 0.0;
    let e = Network::new(spec.clone()).unwrap_err();
    assert!(e.to_string().contains("default WAN"), "{e}");

    let mut spec = NetworkSpec::uniform(3, 800.0 * MBPS, 40.0 * MBPS, 5);
    spec.wan_overrides.insert((1, 1), (1.0, 3));
    assert!(matches!(Network::new(spec.clone()), Err(NetworkError::BadOverride { .. })));
    spec.wan_overrides.clear();
    spec.wan_overrides.insert((0, 1), (1.0, 3));
    spec.wan_overrides.insert((1, 0), (2.0, 3));
    assert!(matches!(
        Network::new(spec.clone()),
        Err(NetworkError::DuplicateOverride { a: 0, b: 1 })
    ));
    spec.lan_bps.pop();
    assert!(matches!(Network::new(spec), Err(NetworkError::LanCount { sites: 3, got: 2 })));
}

#[test]
fn single_transfer_latency_plus_bottleneck() {
    // 1 GB = 8e9 bits over min(800, 40) Mb/s = 200 s, plus 7 ms latency.
    let mut n = net(2, 800.0 * MBPS, 40.0 * MBPS, 7);
    assert_eq!(n.estimate_ms(0, 1, GB), 200_007);
    let id = n.start(0, 0, 1, GB);
    assert_eq!(n.active(), 1);
    assert_eq!(n.next_completion(), Some(200_007));
    assert!(n.advance_to(200_006).is_empty());
    assert_eq!(n.bytes_delivered(), 0);
    assert_eq!(n.advance_to(200_007), vec![id]);
    assert_eq!(n.active(), 0);
    assert_eq!(n.bytes_delivered(), GB);
    assert_eq!(n.next_completion(), None);
}

#[test]
fn lan_can_be_the_bottleneck_and_overrides_apply() {
    let mut spec = NetworkSpec::uniform(3, 800.0 * MBPS, 40.0 * MBPS, 7);
    spec.lan_bps[2] = 10.0 * MBPS;
    spec.wan_overrides.insert((1, 0), (100.0 * MBPS, 20));
    let mut n = Network::new(spec).unwrap();
    // 0 -> 1 uses the overridden 100 Mb/s WAN with 20 ms latency.
    assert_eq!(n.estimate_ms(1, 0, 125 * MB), 10_020);
    // 0 -> 2 is limited by site 2's 10 Mb/s LAN.
    assert_eq!(n.estimate_ms(0, 2, 125 * MB), 100_007);
    let a = n.start(0, 1, 0, 125 * MB);
    let b = n.start(0, 0, 2, 125 * MB);
    assert_eq!(drain(&mut n), vec![(10_020, a), (100_007, b)]);
}

#[test]
fn same_site_copy_crosses_the_lan_once_without_latency() {
    let mut n = net(2, 800.0 * MBPS, 40.0 * MBPS, 7);
    // 100 MB = 8e8 bits at 800 Mb/s = 1 s.
    assert_eq!(n.estimate_ms(1, 1, 100 * MB), 1_000);
    let id = n.start(5, 1, 1, 100 * MB);
    assert_eq!(drain(&mut n), vec![(1_005, id)]);
}

#[test]
fn zero_byte_transfer_takes_the_latency() {
    let mut n = net(2, 800.0 * MBPS, 40.0 * MBPS, 7);
    let a = n.start(10, 0, 1, 0);
    let b = n.start(10, 0, 0, 0);
    assert_eq!(n.next_completion(), Some(10));
    assert_eq!(drain(&mut n), vec![(10, b), (17, a)]);
    assert_eq!(n.estimate_ms(0, 1, 0), 7);
    assert_eq!(n.estimate_ms(0, 0, 0), 0);
}

#[test]
fn completion_rounds_up_to_the_next_ms() {
    // 1 byte = 8 bits at 40 Mb/s = 0.0002 ms -> 1 ms.
    let mut n = net(2, 800.0 * MBPS, 40.0 * MBPS, 0);
    let id = n.start(0, 0, 1, 1);
    assert_eq!(drain(&mut n), vec![(1, id)]);
    // 5001 bytes = 40008 bits at 40 Mb/s = 1.0002 ms -> 2 ms.
    let id = n.start(100, 0, 1, 5_001);
    assert_eq!(drain(&mut n), vec![(102, id)]);
}

#[test]
fn two_transfers_on_one_wan_each_get_half() {
    let mut n = net(2, 800.0 * MBPS, 40.0 * MBPS, 7);
    let a = n.start(0, 0, 1, GB);
    // Opposite direction shares the same (undirected) WAN link.
    let b = n.start(0, 1, 0, GB);
    assert_eq!(n.estimate_ms(0, 1, GB), 7 + 600_000);
    n.advance_to(7);
    assert_eq!(n.rate_bps(a), Some(20.0 * MBPS));
    assert_eq!(n.rate_bps(b), Some(20.0 * MBPS));
    assert_eq!(drain(&mut n), vec![(400_007, a), (400_007, b)]);
    assert_eq!(n.bytes_delivered(), 2 * GB);
}

#[test]
fn max_min_differs_from_equal_share() {
    // Site 0's LAN (100 Mb/s) carries three flows; f1 goes over a
    // 20 Mb/s WAN to site 1, f2 and f3 over a 100 Mb/s WAN to site 2.
    // Equal share of the LAN would be 33.3 Mb/s each. Max-min: WAN 0-1
    // is the bottleneck (20/1) so f1 = 20; the LAN then has 80 left for
    // two flows -> f2 = f3 = 40 (WAN 0-2 offers 50 each).
    let mut spec = NetworkSpec::uniform(3, 1000.0 * MBPS, 100.0 * MBPS, 0);
    spec.lan_bps[0] = 100.0 * MBPS;
    spec.wan_overrides.insert((0, 1), (20.0 * MBPS, 0));
    let mut n = Network::new(spec).unwrap();
    let f1 = n.start(0, 0, 1, 250 * MB); // 2e9 bits
    let f2 = n.start(0, 0, 2, 250 * MB); // 2e9 bits
    let f3 = n.start(0, 0, 2, 500 * MB); // 4e9 bits
    assert_eq!(n.rate_bps(f1), Some(20.0 * MBPS));
    assert_eq!(n.rate_bps(f2), Some(40.0 * MBPS));
    assert_eq!(n.rate_bps(f3), Some(40.0 * MBPS));
    // t=50 s: f2 done (2e9/40e6). f1 has 1e9 bits left, f3 2e9.
    // Then f1 = 20 (WAN 0-1), f3 = min(100-20, 100) = 80:
    // f3 done 25 s later (75 s), f1 50 s later (100 s).
    let out = drain(&mut n);
    assert_eq!(out, vec![(50_000, f2), (75_000, f3), (100_000, f1)]);
}

#[test]
fn a_capped_flow_leaves_the_rest_to_the_others() {
    // Two flows over one 40 Mb/s WAN: one capped at 10 Mb/s (its own stream), the other
    // takes the remaining 30 instead of an equal 20.
    let mut n = net(2, 800.0 * MBPS, 40.0 * MBPS, 0);
    let slow = n.start_capped(0, 0, 1, 125 * MB, Some(10.0 * MBPS)); // 1e9 bits
    let fast = n.start(0, 0, 1, 375 * MB); // 3e9 bits
    assert_eq!(n.rate_bps(slow), Some(10.0 * MBPS));
    assert_eq!(n.rate_bps(fast), Some(30.0 * MBPS));
    // Both take 100 s. Alone, a capped flow streams at its cap even on an idle link.
    assert_eq!(drain(&mut n), vec![(100_000, slow), (100_000, fast)]);
    let alone = n.start_capped(200_000, 1, 0, 125 * MB, Some(8.0 * MBPS));
    assert_eq!(drain(&mut n), vec![(325_000, alone)]);
    // A cap above the fair share changes nothing.
    let a = n.start_capped(400_000, 0, 1, 125 * MB, Some(1000.0 * MBPS));
    let b = n.start(400_000, 0, 1, 125 * MB);
    assert_eq!(n.rate_bps(a), Some(20.0 * MBPS));
    assert_eq!(drain(&mut n), vec![(450_000, a), (450_000, b)]);
}

#[test]
fn late_flow_slows_an_earlier_one() {
    // A: 1 GB (8e9 bits) at t=0; streams from 10 ms at 40 Mb/s.
    // B: 250 MB (2e9 bits) at t=50 s; streams from 50.010 s.
    // At 50.010 s A has 6e9 bits left; both get 20 Mb/s; B needs 100 s
    // -> 150.010 s; A then has 4e9 left at 40 Mb/s -> 250.010 s.
    let mut n = net(2, 800.0 * MBPS, 40.0 * MBPS, 10);
    let a = n.start(0, 0, 1, GB);
    assert_eq!(n.next_completion(), Some(200_010));
    assert!(n.advance_to(50_000).is_empty());
    let b = n.start(50_000, 0, 1, 250 * MB);
    // A's completion accounts for B, which is still in its latency phase.
    assert_eq!(n.next_completion(), Some(150_010));
    assert_eq!(n.rate_bps(a), Some(40.0 * MBPS));
    n.advance_to(50_010);
    assert_eq!(n.rate_bps(a), Some(20.0 * MBPS));
    assert_eq!(drain(&mut n), vec![(150_010, b), (250_010, a)]);
}

#[test]
fn cancel_frees_bandwidth() {
    // Two 1 GB flows share 40 Mb/s. At 100 s, B is cancelled: A has sent
    // 2e9 bits, 6e9 remain at 40 Mb/s = 150 s -> done at 250 s.
    let mut n = net(2, 800.0 * MBPS, 40.0 * MBPS, 0);
    let a = n.start(0, 0, 1, GB);
    let b = n.start(0, 0, 1, GB);
    assert_eq!(n.next_completion(), Some(400_000));
    assert!(n.cancel(100_000, b));
    assert!(!n.cancel(100_000, b));
    assert_eq!(n.active(), 1);
    assert_eq!(n.rate_bps(a), Some(40.0 * MBPS));
    assert_eq!(drain(&mut n), vec![(250_000, a)]);
    assert_eq!(n.bytes_delivered(), GB);
}

#[test]
fn cancel_of_completed_but_unreported_transfer() {
    let mut n = net(2, 800.0 * MBPS, 40.0 * MBPS, 0);
    let a = n.start(0, 0, 1, 5 * MB); // 1 s
                                      // Starting a later transfer moves time past a's completion.
    let b = n.start(2_000, 0, 1, 5 * MB);
    assert_eq!(n.next_completion(), Some(1_000));
    assert!(n.cancel(2_000, a));
    assert_eq!(drain(&mut n), vec![(3_000, b)]);
    assert_eq!(n.bytes_delivered(), 5 * MB);
}

#[test]
fn estimate_counts_existing_flows() {
    let mut n = net(3, 800.0 * MBPS, 40.0 * MBPS, 7);
    n.start(0, 0, 1, GB);
    // New 0->1 flow would get 40/2 on the WAN.
    assert_eq!(n.estimate_ms(0, 1, GB), 7 + 400_000);
    // 0->2 only shares site 0's LAN: 800/2 = 400 > 40 -> 200 s.
    assert_eq!(n.estimate_ms(0, 2, GB), 7 + 200_000);
}

#[test]
fn one_big_jump_matches_step_by_step() {
    let run = |stepwise: bool| {
        let mut n = net(3, 100.0 * MBPS, 30.0 * MBPS, 3);
        let starts = [
            (0, 0, 1, 37 * MB),
            (0, 0, 2, 11 * MB),
            (1_234, 1, 2, 53 * MB),
            (2_000, 2, 2, 70 * MB),
            (2_500, 1, 0, 5 * MB),
        ];
        let mut out = Vec::new();
        for &(t, a, b, bytes) in &starts {
            if stepwise {
                while let Some(c) = n.next_completion().filter(|&c| c <= t) {
                    out.extend(n.advance_to_timed(c));
                }
            }
            n.start(t, a, b, bytes);
        }
        out.extend(drain(&mut n));
        out
    };
    assert_eq!(run(true), run(false));
}

#[test]
fn thousands_of_transfers_with_hundreds_concurrent() {
    // 10 sites, 3000 transfers, ~300 in flight at once: a scale check
    // (must stay fast even in debug builds) plus conservation of bytes.
    let mut n = net(10, 1000.0 * MBPS, 100.0 * MBPS, 5);
    let mut total = 0;
    let mut done = 0;
    let mut peak = 0;
    for k in 0u64..3000 {
        let t = k * 50;
        while let Some(c) = n.next_completion().filter(|&c| c <= t) {
            done += n.advance_to(c).len();
        }
        let (a, b) = ((k * 7 % 10) as usize, (k * 3 % 10) as usize);
        let bytes = 10 * MB + (k * 7919 % 50) * MB;
        total += bytes;
        n.start(t, a, b, bytes);
        peak = peak.max(n.active());
    }
    done += drain(&mut n).len();
    assert_eq!(done, 3000);
    assert_eq!(n.bytes_delivered(), total);
    assert!(peak >= 200, "peak concurrency only {peak}");
}

proptest! {
    #[test]
    fn random_transfers_respect_capacities_and_complete(
        sites in 1usize..5,
        lan in proptest::collection::vec(1.0f64..1000.0, 4),
        wan in 0.5f64..100.0,
        lat in 0u64..50,
        overrides in proptest::collection::vec((0usize..5, 0usize..5, 0.5f64..100.0, 0u64..50), 0..4),
        transfers in proptest::collection::vec((0u64..20_000, 0usize..5, 0usize..5, 0u64..20_000_000), 1..40),
    ) {
        let mut spec = NetworkSpec::uniform(sites, 0.0, wan * MBPS, lat);
        for (s, bps) in spec.lan_bps.iter_mut().enumerate() {
            *bps = lan[s] * MBPS;
        }
        for &(a, b, bps, l) in &overrides {
            let (a, b) = (a % sites, b % sites);
            if a != b {
                spec.wan_overrides.insert((a.min(b), a.max(b)), (bps * MBPS, l));
            }
        }
        let mut n = Network::new(spec).unwrap();
        let mut transfers = transfers;
        transfers.sort_by_key(|t| t.0);
        let check = |n: &Network| -> Result<(), TestCaseError> {
            for (l, load) in link_loads(n).into_iter().enumerate() {
                prop_assert!(load <= n.caps[l] * (1.0 + 1e-6), "link {l}: {load} > {}", n.caps[l]);
            }
            for f in n.core.flows.iter() {
                if f.stream_at <= n.core.now {
                    prop_assert!(f.rate > 0.0);
                }
            }
            Ok(())
        };
        let mut total = 0u64;
        let mut started = Vec::new();
        let mut completed = Vec::new();
        let mut last = 0;
        for &(t, a, b, bytes) in &transfers {
            while let Some(c) = n.next_completion().filter(|&c| c <= t) {
                let got = n.advance_to_timed(c);
                prop_assert!(!got.is_empty());
                prop_assert!(c >= last);
                last = c;
                completed.extend(got);
                check(&n)?;
            }
            let (a, b) = (a % sites, b % sites);
            let id = n.start(t, a, b, bytes);
            started.push((id, t, a, b, bytes));
            total += bytes;
            check(&n)?;
        }
        while let Some(c) = n.next_completion() {
            let got = n.advance_to_timed(c);
            prop_assert!(!got.is_empty());
            prop_assert!(c >= last);
            last = c;
            completed.extend(got);
            check(&n)?;
        }
        prop_assert_eq!(n.active(), 0);
        prop_assert_eq!(n.bytes_delivered(), total);
        prop_assert_eq!(completed.len(), started.len());
        // No transfer beats latency + bytes at its path's raw bottleneck.
        for &(id, t, a, b, bytes) in &started {
            let (links, latency) = n.path(a, b);
            let cap = links.links().iter().map(|&l| n.caps[l]).fold(f64::INFINITY, f64::min);
            let min_ms = (bytes as f64 * 8.0 * 1000.0 / cap).floor() as u64;
            let done = completed.iter().find(|c| c.1 == id).unwrap().0;
            prop_assert!(done >= t + latency + min_ms, "{id}: {done} < {t}+{latency}+{min_ms}");
        }
    }
}
