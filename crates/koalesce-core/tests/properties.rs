//! Property tests: random grids and workloads driven to completion by the harness.
//!
//! 1. No site is ever over-allocated (grid claims + reservations + local load ≤ processors,
//!    and the core's own count of claimed processors matches the site's), and, since the
//!    harness reports the true idle counts before every input, the core never issues a claim
//!    the site cannot honour (`overdraws == 0`); the only refused claims are injected soft
//!    errors. The harness also checks every other action against the site (no double claim,
//!    no abort or cancel of something that does not exist, launches only with every component
//!    claimed and every input in) and the core's placed-unclaimed bookkeeping.
//! 2. Every job ends in a terminal state within a bounded time (tries limits are finite).
//! 3. Determinism: the same inputs give the same action log.
//!
//! Workloads: 1–4 sites (some with reservations), random bandwidths, replicated files, 1–10
//! jobs of 1–4 components (some fixed, some flexible) with every policy and priority, local
//! load changing during the first hour, soft errors of components, claims and transfers,
//! cancellations, and random scheduler parameters (T, L, JST handling, preemption, H seed,
//! scan interval). A second generator concentrates contention (one or two sites, T = 0,
//! preemption, large inputs) to reach ICP re-placement and preemption.

mod common;

use common::*;
use koalesce_core::config::{HistorySeed, OnJstReached, ScanInterval};
use koalesce_core::model::{ComponentSpec, FileMode, FlexibleRequest, NetworkForecast, PolicyKind, Priority, ReplicaCatalogue};
use koalesce_core::{JobSpec, Millis, SchedulerConfig, SiteId};
use proptest::prelude::*;

/// Everything is over by then: local load changes during the first hour and is gone after it,
/// the tries limits are finite, and the longest job runs 10 min.
const HORIZON: Millis = 3 * 24 * 3_600_000;

#[derive(Debug, Clone)]
struct JobGen {
    at: Millis,
    comps: Vec<(u32, Option<usize>)>,
    files: Vec<usize>,
    priority: u8,
    policy: u8,
    flexible: Option<(u32, u32, u32)>,
    chunks: bool,
    runtime: Millis,
}

#[derive(Debug, Clone)]
struct ConfigGen {
    threshold: u8,
    fraction: u8,
    extend: bool,
    preemption: bool,
    place_on_submit: bool,
    anti_starvation: bool,
    empty_history: bool,
    blacklist_threshold: u32,
    min_retry: u8,
    adaptive: bool,
    default_policy: u8,
}

#[derive(Debug, Clone)]
struct Scenario {
    sites: Vec<(u32, bool)>,
    links: Vec<(u8, Millis)>,
    files: Vec<(u64, Vec<bool>)>,
    jobs: Vec<JobGen>,
    loads: Vec<(Millis, usize, u32)>,
    errors: Vec<(u32, u32, u32)>,
    cancels: Vec<(Millis, usize)>,
    config: ConfigGen,
}

fn job_gen() -> impl Strategy<Value = JobGen> {
    (
        0u64..1_200_000,
        prop::collection::vec((1u32..=64, prop::option::weighted(0.15, 0usize..4)), 1..=4),
        prop::collection::vec(0usize..3, 0..=2),
        0u8..4,
        0u8..4,
        prop::option::weighted(0.15, (1u32..=96, 1u32..=8, 1u32..=4)),
        any::<bool>(),
        1_000u64..600_000,
    )
        .prop_map(|(at, comps, files, priority, policy, flexible, chunks, runtime)| JobGen {
            at,
            comps,
            files,
            priority,
            policy,
            flexible,
            chunks,
            runtime,
        })
}

fn config_gen() -> impl Strategy<Value = ConfigGen> {
    (
        (0u8..3, 0u8..4, any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
        (any::<bool>(), 1u32..=3, 0u8..3, any::<bool>(), 0u8..3),
    )
        .prop_map(
            |(
                (threshold, fraction, extend, preemption, place_on_submit, anti_starvation),
                (empty_history, blacklist_threshold, min_retry, adaptive, default_policy),
            )| ConfigGen {
                threshold,
                fraction,
                extend,
                preemption,
                place_on_submit,
                anti_starvation,
                empty_history,
                blacklist_threshold,
                min_retry,
                adaptive,
                default_policy,
            },
        )
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        prop::collection::vec((4u32..=48, prop::bool::weighted(0.25)), 1..=4),
        prop::collection::vec((0u8..3, 0u64..50), 16),
        prop::collection::vec((0u64..=40_000_000, prop::collection::vec(any::<bool>(), 4)), 0..=3),
        prop::collection::vec(job_gen(), 1..=10),
        prop::collection::vec((0u64..3_600_000, 0usize..4, 0u32..=100), 0..=40),
        prop::collection::vec((rare_count(), rare_count(), rare_count()), 4),
        prop::collection::vec((0u64..3_600_000, 0usize..8), 0..=2),
        config_gen(),
    )
        .prop_map(|(sites, links, files, jobs, loads, errors, cancels, config)| Scenario {
            sites,
            links,
            files,
            jobs,
            loads,
            errors,
            cancels,
            config,
        })
}

/// Mostly 0, sometimes 1 or 2 (soft-error budgets).
fn rare_count() -> impl Strategy<Value = u32> {
    prop::sample::select(vec![0u32, 0, 0, 0, 0, 0, 0, 0, 1, 2])
}

/// Contention: one or two sites, ICP with T = 0 and preemption, large inputs (long
/// JPT → JST windows) and jobs of every priority, so that claims fail under local load and
/// lower-priority grid jobs get preempted.
fn contended() -> impl Strategy<Value = Scenario> {
    (
        scenario(),
        prop::collection::vec((1_000_000u64..=40_000_000, prop::collection::vec(any::<bool>(), 4)), 1..=3),
    )
        .prop_map(|(mut sc, files)| {
            sc.sites.truncate(2);
            sc.files = files;
            for j in &mut sc.jobs {
                if j.files.is_empty() {
                    j.files.push(0);
                }
                j.runtime *= 4;
            }
            sc.config.threshold = 0;
            sc.config.preemption = true;
            sc.config.empty_history = false;
            sc.errors = vec![(0, 0, 0); 4];
            sc
        })
}

fn policy(raw: u8) -> PolicyKind {
    [PolicyKind::Wf, PolicyKind::Cf, PolicyKind::Cm][raw as usize % 3]
}

/// Builds the harness with every input of the scenario scheduled.
fn build(sc: &Scenario) -> Harness {
    let n = sc.sites.len();
    let names = ["delta", "alpha", "charlie", "bravo"];
    let sites: Vec<_> = sc
        .sites
        .iter()
        .enumerate()
        .map(|(i, &(p, r))| if r { reserving_site(names[i], p) } else { site(names[i], p) })
        .collect();
    let largest = sites.iter().map(|s| s.processors).max().unwrap();
    let total: u32 = sites.iter().map(|s| s.processors).sum();
    let mut net = NetworkForecast::uniform(n, 1e6, 0);
    for from in 0..n {
        for to in 0..n {
            let (class, latency) = sc.links[from * 4 + to];
            let bps = [1e6, 4e6, 16e6][class as usize];
            net.set(SiteId(from as u32), SiteId(to as u32), bps, latency);
        }
    }
    let mut cat = ReplicaCatalogue::new();
    for (k, (size, bits)) in sc.files.iter().enumerate() {
        let mut replicas: Vec<SiteId> = (0..n).filter(|&i| bits[i]).map(|i| SiteId(i as u32)).collect();
        if replicas.is_empty() {
            replicas.push(SiteId((size % n as u64) as u32));
        }
        cat.insert(format!("file{k}"), *size, replicas);
    }
    let c = &sc.config;
    let config = SchedulerConfig {
        default_policy: policy(c.default_policy),
        scan_interval: if c.adaptive {
            ScanInterval::Adaptive { base_ms: 10_000 }
        } else {
            ScanInterval::Fixed { interval_ms: 60_000 }
        },
        anti_starvation_tries: c.anti_starvation.then_some(2),
        max_placement_tries: Some(40),
        max_claiming_tries: Some(25),
        claim_fraction: [0.0, 0.25, 0.75, 1.0][c.fraction as usize],
        min_claim_retry_ms: [0, 1, 1_000][c.min_retry as usize],
        on_jst_reached: if c.extend {
            OnJstReached::ExtendJst { interval_ms: 240_000 }
        } else {
            OnJstReached::ReturnToPlacement
        },
        claim_threshold: [0.0, 0.5, 1.0][c.threshold as usize],
        preemption: c.preemption,
        blacklist_threshold: c.blacklist_threshold,
        max_error_resubmissions: Some(3),
        history: if c.empty_history {
            HistorySeed::Empty
        } else {
            HistorySeed::AllPairs
        },
        place_on_submit: c.place_on_submit,
        ..SchedulerConfig::default()
    };
    let mut h = Harness::new(config, sites.clone(), net, cat);
    for (i, &(comp, claim, transfer)) in sc.errors.iter().enumerate().take(n) {
        h.component_soft_errors[i] = comp;
        h.claim_soft_errors[i] = claim;
        h.transfer_failures[i] = transfer;
    }
    for g in &sc.jobs {
        let mut files: Vec<String> = Vec::new();
        if !sc.files.is_empty() {
            for &f in &g.files {
                let name = format!("file{}", f % sc.files.len());
                if !files.contains(&name) {
                    files.push(name);
                }
            }
        }
        let components = g
            .comps
            .iter()
            .map(|&(raw, fixed)| match fixed {
                Some(f) => {
                    let s = f % n;
                    ComponentSpec {
                        processors: 1 + (raw - 1) % sites[s].processors,
                        fixed_site: Some(SiteId(s as u32)),
                    }
                }
                None => ComponentSpec {
                    // Mostly small enough for several jobs to share the grid; sometimes as
                    // large as the largest site.
                    processors: 1 + (raw - 1) % if raw > 56 { largest } else { (largest / 2).max(1) },
                    fixed_site: None,
                },
            })
            .collect::<Vec<ComponentSpec>>();
        // Keep the job feasible on an empty grid (the core refuses it at submission otherwise):
        // drop trailing components while the job or one fixed site would be overbooked.
        let mut components = components;
        let overbooked = |cs: &[ComponentSpec]| {
            cs.iter().map(|c| c.processors).sum::<u32>() > total
                || (0..n).any(|s| {
                    cs.iter()
                        .filter(|c| c.fixed_site == Some(SiteId(s as u32)))
                        .map(|c| c.processors)
                        .sum::<u32>()
                        > sites[s].processors
                })
        };
        while components.len() > 1 && overbooked(&components) {
            components.pop();
        }
        let flexible = g.flexible.map(|(t, min, max)| FlexibleRequest {
            total: 1 + (t - 1) % total,
            min_component: min,
            max_components: max,
        });
        let spec = JobSpec {
            name: format!("job@{}", g.at),
            components: if flexible.is_some() { Vec::new() } else { components },
            flexible,
            input_files: files,
            file_mode: if g.chunks { FileMode::Chunks } else { FileMode::Whole },
            runtime_estimate_ms: g.runtime,
            priority: Priority::ALL[g.priority as usize],
            policy: (g.policy < 3).then(|| policy(g.policy)),
            min_components: None,
            preferences: Default::default(),
            ..JobSpec::default()
        };
        h.at(g.at, Script::Submit(Box::new(spec)));
    }
    for &(t, s, pct) in &sc.loads {
        let s = s % n;
        h.at(t, Script::LocalBusy(SiteId(s as u32), sites[s].processors * pct / 100));
    }
    // Local users go home after an hour.
    for (i, _) in sites.iter().enumerate() {
        h.at(3_600_000, Script::LocalBusy(SiteId(i as u32), 0));
    }
    for &(t, k) in &sc.cancels {
        h.at(t, Script::Cancel(k));
    }
    h
}

fn run(sc: &Scenario) -> Harness {
    let mut h = build(sc);
    h.run_until(HORIZON);
    h
}

fn assert_sound(h: &Harness) -> Result<(), TestCaseError> {
    prop_assert!(h.violations.is_empty(), "violations: {:#?}", h.violations);
    prop_assert_eq!(h.overdraws, 0, "the core claimed more than was idle");
    Ok(())
}

fn assert_all_terminal(h: &Harness, sc: &Scenario) -> Result<(), TestCaseError> {
    prop_assert_eq!(h.submitted.len(), sc.jobs.len());
    let open: Vec<String> =
        h.s.jobs()
            .filter(|j| !j.state.is_terminal())
            .map(|j| format!("job {} {:?} tries p{} c{}", j.id, j.state, j.placement_tries, j.claiming_tries))
            .collect();
    prop_assert!(open.is_empty(), "not terminal at the horizon: {:?}", open);
    prop_assert_eq!(h.s.poll_timeout(), None);
    // Nothing is left held, reserved or counted as placed at any site.
    prop_assert!(h.held.is_empty() && h.reserved.is_empty(), "{:?} {:?}", h.held, h.reserved);
    for i in 0..sc.sites.len() {
        prop_assert_eq!(h.s.site_view(SiteId(i as u32)).placed_unclaimed, 0);
    }
    // The last job ended well before the horizon.
    let last = h.s.jobs().filter_map(|j| j.timeline.finished).max().unwrap_or(0);
    prop_assert!(last <= HORIZON / 3, "last job ended at {}", last);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn sites_are_never_over_allocated_and_claims_are_always_honoured(sc in scenario()) {
        let h = run(&sc);
        assert_sound(&h)?;
    }

    #[test]
    fn every_job_ends_in_a_terminal_state(sc in scenario()) {
        let h = run(&sc);
        assert_all_terminal(&h, &sc)?;
    }

    #[test]
    fn under_contention_sites_stay_sound_and_every_job_ends(sc in contended()) {
        let h = run(&sc);
        assert_sound(&h)?;
        assert_all_terminal(&h, &sc)?;
    }

    #[test]
    fn the_same_inputs_give_the_same_action_log(sc in scenario()) {
        let a = run(&sc);
        let b = run(&sc);
        prop_assert!(!a.log.is_empty());
        prop_assert_eq!(format!("{:?}", a.log), format!("{:?}", b.log));
        let states = |h: &Harness| h.s.jobs().map(|j| format!("{:?}", j)).collect::<Vec<_>>();
        prop_assert_eq!(states(&a), states(&b));
    }
}
