//! Co-allocation by advance reservations (001 §3.2, Algorithms 1 and 2): the worked example of
//! 001 §3.2.4 step by step, and property tests against a brute-force search.

use koalesce_core::broker::coalloc::{Event, Held};
use koalesce_core::broker::{
    coallocate, Augmentation, CoallocationRequest, CoallocationStats, ComponentRequest, Profile, ReservationRequest, TableService,
};
use koalesce_core::{Millis, SiteId};
use proptest::prelude::*;

const MIN: Millis = 60_000;
/// 09:00 as ms of the day.
const NINE: Millis = 9 * 60 * MIN;

/// 09:00 + `tenths` tenths of a minute.
fn at(tenths: u64) -> Millis {
    NINE + tenths * MIN / 10
}

fn r(i: u32) -> SiteId {
    SiteId(i - 1)
}

/// 001 §3.2.4: "Let the input to the algorithm be Jobs = {J1, J2, J3} and Resources =
/// {{R1, R3}, {R2, R4}, {R3, R4}}. [...] Let the start time window [T_e, T_l] be [0900, 0920]
/// (20 minutes) and let the maximum allowed start time deviation ε be 5 minutes."
///
/// The seed gives the jobs' sizes, their durations and the background load only in Figure 4,
/// an image. Ours: four resources of 8 processors, each job needs all 8 (so a resource holds one
/// job at a time), J1 runs 5 minutes and J2, J3 4 minutes, and other users hold R1 during
/// 09:05–09:07:30, R2 during 09:06–09:12, R3 until 09:07:30 and R4 during 09:01–09:07. These
/// make the algorithm take exactly the steps the seed narrates, which the test checks one by one.
fn worked_example(augmentation: Augmentation) -> (CoallocationRequest, TableService) {
    let job = |minutes: u64, sites: &[u32]| ComponentRequest::new(8, minutes * MIN, sites.iter().map(|&i| r(i)).collect());
    let request = CoallocationRequest {
        components: vec![job(5, &[1, 3]), job(4, &[2, 4]), job(4, &[3, 4])],
        earliest_start: at(0),
        latest_start: at(200),
        epsilon_ms: 5 * MIN,
        augmentation,
    };
    let mut service = TableService::new(0, &[8, 8, 8, 8]);
    let busy = |from: u64, to: u64| Some(Profile::build(8, 0, [(at(from), at(to), 8)]));
    service.others = vec![busy(50, 75), busy(60, 120), busy(0, 75), busy(10, 70)];
    (request, service)
}

#[test]
fn worked_example_of_001_section_3_2_4() {
    for aug in [Augmentation::SinglePath, Augmentation::SinglePathFree, Augmentation::Exhaustive] {
        let (request, mut service) = worked_example(aug);
        let out = coallocate(&request, &mut service);
        use Event::*;
        let (j1, j2, j3) = (0, 1, 2);
        let expected = vec![
            // "In the first iteration of the algorithm, a reservation is created for J1 at R1
            // and one for J2 at R2 [...] no reservation starting early enough can be created for
            // J3. The earliest possible reservation (at R4), which would start a few minutes too
            // late [...] Path augmentation techniques cannot be used for J3 as [...] neither J1
            // nor J2 has a reservation at R3 or R4."
            Window { t_e: at(0), t_l: at(50) },
            Created {
                component: j1,
                site: r(1),
                start: at(0),
            },
            Created {
                component: j2,
                site: r(2),
                start: at(0),
            },
            CreateRefused {
                component: j3,
                site: r(3),
                t_next: Some(at(75)),
            },
            CreateRefused {
                component: j3,
                site: r(4),
                t_next: Some(at(70)),
            },
            // "In next iteration, the [t_e, t_l] window is moved and aligned with the earliest
            // possible reservation start for J3. A reservation for J3 is created at R4. The
            // reservation for J2 at R2 is modified to start within the new window. [...] The
            // reservation for J1 at R1 can however not be moved to within [t_e, t_l], and is
            // hence implicitly cancelled. Furthermore, no new reservation can be created for J1
            // [...] neither J2 nor J3 has reserved one of R1 and R3."
            Window { t_e: at(20), t_l: at(70) },
            MoveRefused { component: j1, site: r(1) },
            CreateRefused {
                component: j1,
                site: r(1),
                t_next: Some(at(75)),
            },
            CreateRefused {
                component: j1,
                site: r(3),
                t_next: Some(at(75)),
            },
            Moved {
                component: j2,
                site: r(2),
                start: at(20),
            },
            CreateRefused {
                component: j3,
                site: r(3),
                t_next: Some(at(75)),
            },
            Created {
                component: j3,
                site: r(4),
                start: at(70),
            },
            // "In the next iteration, t_l is set to the earliest possible start of J1 [...] The
            // reservation that in the previous iteration was possible for J1 at R1 is created.
            // The reservation for J3 at R4 already starts within [t_e, t_l] and requires no
            // modification. For job J2 the existing reservation cannot be moved [...] and is
            // hence cancelled. It is furthermore not possible to create a new reservation for J2.
            // The path augmentation algorithm can however be applied [...] The resulting
            // augmenting path is {J2, R4, J3, R3}. [...] creates a new reservation for J3 at R3,
            // and modifies the existing reservation (at R4) to suit J2."
            Window { t_e: at(25), t_l: at(75) },
            Created {
                component: j1,
                site: r(1),
                start: at(75),
            },
            MoveRefused { component: j2, site: r(2) },
            CreateRefused {
                component: j2,
                site: r(2),
                t_next: Some(at(120)),
            },
            CreateRefused {
                component: j2,
                site: r(4),
                t_next: Some(at(110)),
            },
            Augmented {
                path: vec![(j2, r(4)), (j3, r(3))],
            },
        ];
        assert_eq!(out.trace, expected, "{aug:?}");
        // "Since each job has a reservation starting within [t_e, t_l] (and inside [T_e, T_l]),
        // the coallocation algorithm terminates and the coallocation request is successful."
        let held = out.reservations.expect("success");
        assert_eq!(out.window, Some((at(25), at(75))));
        let placed: Vec<(SiteId, Millis)> = held.iter().map(|h| (h.site, h.start)).collect();
        assert_eq!(placed, vec![(r(1), at(75)), (r(4), at(70)), (r(3), at(75))]);
        assert_eq!(
            out.stats,
            CoallocationStats {
                iterations: 3,
                new_ars: 4,
                failed_new_ars: 7,
                modified_ars: 1,
                failed_modified_ars: 2,
                path_augmentations: 1,
                failed_path_augmentations: 0,
                requests: 16,
                // Four of them modifications, two invocations each (001 §5.2.2).
                invocations: 20,
            }
        );
        // The reservations exist at the sites, and nothing else of the request does.
        for h in &held {
            assert_eq!(service.tables[h.site.index()].get(h.id).map(|x| x.start), Some(h.start));
        }
        assert_eq!(service.tables.iter().map(|t| t.len()).sum::<usize>(), 3);
    }
}

#[test]
fn no_window_before_the_latest_start_fails_and_releases_everything() {
    let (mut request, mut service) = worked_example(Augmentation::Exhaustive);
    // The only window ends at 09:07:30: with T_l = 09:02 the window can never start in time.
    request.latest_start = at(20);
    let out = coallocate(&request, &mut service);
    assert!(!out.succeeded());
    assert!(service.tables.iter().all(|t| t.is_empty()), "{:?}", service.tables);
    assert!(matches!(out.trace.last(), Some(Event::Released { .. })));
}

#[test]
fn a_component_larger_than_every_site_fails_at_once() {
    let request = CoallocationRequest {
        components: vec![ComponentRequest::new(9, 10, vec![SiteId(0)])],
        earliest_start: 0,
        latest_start: 1_000_000,
        epsilon_ms: 5,
        augmentation: Augmentation::Exhaustive,
    };
    let mut service = TableService::new(0, &[8]);
    let out = coallocate(&request, &mut service);
    assert!(!out.succeeded());
    assert_eq!(out.stats.iterations, 1);
}

/// The seed's single BFS path can miss a window another path gives (found by the property
/// test below when it asked exactness of every reading): C1 can only use site 3, held by C0;
/// the first other resource on C0's list is site 2, busy now; site 1 would have done.
#[test]
fn a_single_path_can_miss_a_window_that_the_exhaustive_search_finds() {
    let inst = Instance {
        background: vec![vec![(0, 5, 4)], vec![], vec![(2, 3, 4)], vec![]],
        components: vec![(5, 3, vec![2, 3, 1]), (5, 3, vec![3])],
        not_before: vec![vec![], vec![]],
        t_e: 0,
        t_l: 0,
        eps: 0,
    };
    let before = inst.service();
    assert_eq!(brute_force_unit(&inst, &before), Some(0));
    for aug in [Augmentation::SinglePath, Augmentation::SinglePathFree] {
        let single = coallocate(&inst.request(aug), &mut before.clone());
        assert!(!single.succeeded());
        assert_eq!(single.stats.failed_path_augmentations, 1);
    }
    let exhaustive = coallocate(&inst.request(Augmentation::Exhaustive), &mut before.clone());
    let held = exhaustive.reservations.expect("a window exists");
    assert_eq!((held[0].site, held[1].site), (SiteId(1), SiteId(3)));
    assert_eq!(exhaustive.stats.path_augmentations, 1);
}

/// The mechanism behind 001 Table II: the seed's shortest path may end at a resource another
/// job of the request holds. C2 can only use site 0, held by C0; the path's first other
/// resource for C0 is site 1, held by C1, so Algorithm 2's new reservation is refused and the
/// window moves on by a whole job; ending the path at the free site 2 succeeds at once.
#[test]
fn the_seeds_path_may_end_at_a_held_resource() {
    let inst = Instance {
        background: vec![vec![], vec![], vec![]],
        components: vec![(5, 10, vec![0, 1, 2]), (5, 10, vec![1, 2, 0]), (5, 10, vec![0])],
        not_before: vec![vec![], vec![], vec![]],
        t_e: 0,
        t_l: 0,
        eps: 0,
    };
    let before = inst.service();
    let literal = coallocate(&inst.request(Augmentation::SinglePath), &mut before.clone());
    assert!(!literal.succeeded());
    assert!(literal
        .trace
        .iter()
        .any(|e| matches!(e, Event::AugmentRefused { path, t_next: Some(10) } if path == &vec![(2, SiteId(0)), (0, SiteId(1))])));
    let free = coallocate(&inst.request(Augmentation::SinglePathFree), &mut before.clone());
    let held = free.reservations.expect("site 2 is free");
    assert_eq!(held.iter().map(|h| h.site.0).collect::<Vec<_>>(), vec![2, 1, 0]);
}

/// A random small instance: sites of 8 processors with background reservations, components.
#[derive(Debug, Clone)]
struct Instance {
    background: Vec<Vec<(u64, u64, u32)>>,
    components: Vec<(u32, u64, Vec<u32>)>,
    /// Per component and listed site, the earliest start there (empty: none).
    not_before: Vec<Vec<u64>>,
    t_e: u64,
    t_l: u64,
    eps: u64,
}

impl Instance {
    /// The sites with their background granted as reservations (refused ones dropped, so the
    /// tables are never over-reserved to begin with).
    fn service(&self) -> TableService {
        let mut s = TableService::new(0, &vec![8; self.background.len()]);
        for (i, bg) in self.background.iter().enumerate() {
            for &(start, len, procs) in bg {
                s.tables[i].request(0, &ReservationRequest::at(procs, start, len), None);
            }
        }
        s
    }

    fn request(&self, augmentation: Augmentation) -> CoallocationRequest {
        CoallocationRequest {
            components: self
                .components
                .iter()
                .zip(&self.not_before)
                .map(|((p, d, sites), nb)| ComponentRequest {
                    not_before: nb.clone(),
                    ..ComponentRequest::new(*p, *d, sites.iter().map(|&s| SiteId(s)).collect())
                })
                .collect(),
            earliest_start: self.t_e,
            latest_start: self.t_l,
            epsilon_ms: self.eps,
            augmentation,
        }
    }
}

fn instance(unit: bool) -> impl Strategy<Value = Instance> {
    (2usize..=4, 1usize..=3, 2u64..=6).prop_flat_map(move |(sites, jobs, dur)| {
        let bg = prop::collection::vec(prop::collection::vec((0u64..40, 1u64..10, 1u32..=8), 0..=3), sites);
        let comp = (
            if unit { 5u32..=5 } else { 1u32..=8 },
            if unit { dur..=dur } else { 1u64..=8 },
            prop::sample::subsequence((0..sites as u32).collect::<Vec<_>>(), 1..=sites).prop_shuffle(),
        );
        let comps = prop::collection::vec(comp, jobs);
        let bounds = prop::collection::vec(prop::option::weighted(0.3, prop::collection::vec(0u64..25, sites)), jobs);
        (bg, comps, bounds, 0u64..5, 0u64..30, 0u64..dur).prop_map(move |(background, components, bounds, t_e, span, eps)| {
            let not_before = components
                .iter()
                .zip(bounds)
                .map(|(c, b)| b.filter(|_| !unit).map(|b| b[..c.2.len()].to_vec()).unwrap_or_default())
                .collect();
            Instance {
                background,
                components,
                not_before,
                t_e,
                t_l: t_e + span,
                eps,
            }
        })
    })
}

/// The earliest `x` in `[T_e, T_l]` such that every component has a distinct site of its list
/// where it fits (next to the background) starting somewhere in `[x, x + ε]`.
fn brute_force_unit(inst: &Instance, service: &TableService) -> Option<u64> {
    let fits = |c: usize, site: u32, x: u64| {
        let (p, d, sites) = &inst.components[c];
        let k = sites.iter().position(|&s| s == site).unwrap();
        let bound = inst.not_before[c].get(k).copied().unwrap_or(0);
        let table = &service.tables[site as usize];
        (x..=x + inst.eps).any(|s| s >= bound && table.reserved().fits(s, s + d, *p))
    };
    fn assign(c: usize, used: &mut Vec<u32>, inst: &Instance, ok: &dyn Fn(usize, u32) -> bool) -> bool {
        if c == inst.components.len() {
            return true;
        }
        for &s in &inst.components[c].2 {
            if !used.contains(&s) && ok(c, s) {
                used.push(s);
                if assign(c + 1, used, inst, ok) {
                    return true;
                }
                used.pop();
            }
        }
        false
    }
    (inst.t_e..=inst.t_l).find(|&x| assign(0, &mut Vec::new(), inst, &|c, s| fits(c, s, x)))
}

/// Over-reservation never happens, and a success is one window of width ε with every
/// component at one of its sites.
fn check_sound(inst: &Instance, before: &TableService, after: &TableService, held: &Option<Vec<Held>>, window: Option<(u64, u64)>) {
    for (i, t) in after.tables.iter().enumerate() {
        for &(time, used) in t.reserved().steps() {
            assert!(used <= 8, "site {i} over-reserved at {time}: {used}");
        }
    }
    let own: usize = after.tables.iter().map(|t| t.len()).sum::<usize>() - before.tables.iter().map(|t| t.len()).sum::<usize>();
    match held {
        None => assert_eq!(own, 0, "a failure keeps no reservation"),
        Some(held) => {
            let (t_e, t_l) = window.unwrap();
            assert_eq!(t_l - t_e, inst.eps);
            assert!(
                t_e >= inst.t_e && t_e <= inst.t_l,
                "window {t_e}..{t_l} outside [{}, {}]",
                inst.t_e,
                inst.t_l
            );
            assert_eq!(own, inst.components.len());
            for (c, h) in held.iter().enumerate() {
                assert!((t_e..=t_l).contains(&h.start));
                let k = inst.components[c].2.iter().position(|&s| s == h.site.0).unwrap();
                assert!(
                    h.start >= inst.not_before[c].get(k).copied().unwrap_or(0),
                    "started before its bound"
                );
                assert!(inst.components[c].2.contains(&h.site.0));
                let r = after.tables[h.site.index()].get(h.id).expect("held reservation exists");
                assert_eq!(
                    (r.start, r.processors, r.end - r.start),
                    (h.start, inst.components[c].0, inst.components[c].1)
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Components that each need more than half of a site and share one duration longer than
    /// ε: the exhaustive algorithm succeeds exactly when brute force finds a window, and its
    /// window ends no later than ε after the earliest one starts. Every reading is sound.
    #[test]
    fn exact_on_one_component_per_site_instances(inst in instance(true)) {
        let before = inst.service();
        let x_min = brute_force_unit(&inst, &before);
        for aug in [Augmentation::Exhaustive, Augmentation::SinglePath, Augmentation::SinglePathFree] {
            let mut after = before.clone();
            let out = coallocate(&inst.request(aug), &mut after);
            check_sound(&inst, &before, &after, &out.reservations, out.window);
            if aug == Augmentation::Exhaustive {
                prop_assert_eq!(out.succeeded(), x_min.is_some(), "brute force: {:?}, trace {:?}", x_min, out.trace);
                if let (Some(x), Some((_, t_l))) = (x_min, out.window) {
                    prop_assert!(t_l <= x + inst.eps, "window ends {} but one starts at {}", t_l, x);
                }
            } else if out.succeeded() {
                prop_assert!(x_min.is_some());
            }
        }
    }

    /// Any sizes and durations, some components with an earliest start per site: never
    /// over-reserved, one window, every component at one of its sites and not before its bound
    /// there; a failure leaves nothing behind.
    #[test]
    fn sound_on_any_instance(inst in instance(false)) {
        let before = inst.service();
        for aug in [Augmentation::Exhaustive, Augmentation::SinglePath, Augmentation::SinglePathFree] {
            let mut after = before.clone();
            let out = coallocate(&inst.request(aug), &mut after);
            check_sound(&inst, &before, &after, &out.reservations, out.window);
        }
    }
}
