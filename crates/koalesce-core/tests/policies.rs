//! Hand-checked tests of the placement policies (003 §4.3): CF (Alg. 1) with its history
//! table H, WF, CM and FCM, and the rule that placed-but-unclaimed processors are not handed
//! to another grid job (003 §5.1.4).
//!
//! Unless a test says otherwise: scans every 60 s (the first at t = 60 000), L = 0.75, and the
//! jobs are submitted at t = 0, so JPT = 60 000.

mod common;

use std::collections::BTreeSet;

use common::*;
use koalesce_core::config::HistorySeed;
use koalesce_core::model::{FlexibleRequest, NetworkForecast, PolicyKind, ReplicaCatalogue, Site};
use koalesce_core::{JobSpec, JobState, Scheduler, SchedulerConfig, SiteId};

const A: SiteId = SiteId(0);
const B: SiteId = SiteId(1);
const C: SiteId = SiteId(2);
const D: SiteId = SiteId(3);

fn job(name: &str, sizes: &[u32], files: &[&str], policy: PolicyKind) -> JobSpec {
    JobSpec {
        policy: Some(policy),
        ..JobSpec::simple(name, sizes, files, 10_000)
    }
}

fn scheduler(config: SchedulerConfig, sites: Vec<Site>, net: NetworkForecast, cat: ReplicaCatalogue) -> Scheduler {
    Scheduler::new(config, sites, net, cat)
}

// ----- CF without replicas ----------------------------------------------------------------

#[test]
fn cf_component_goes_to_the_file_site_when_it_has_enough_idle_processors() {
    // a(32) b(64) c(16); f (1 MB) only at b. A 16-processor component: b is a file site with
    // 64 ≥ 16 idle (Alg. 1 line 3–5), so it goes to b and needs no transfer: FTT = 0,
    // JST = JPT = 60 000, JCT0 = JPT + 0.75·0 = 60 000, so it is claimed in the same scan.
    let mut cat = ReplicaCatalogue::new();
    cat.insert("f", MB, [B]);
    let mut s = scheduler(
        SchedulerConfig::default(),
        vec![site("a", 32), site("b", 64), site("c", 16)],
        NetworkForecast::uniform(3, 8e6, 0),
        cat,
    );
    let j = s.submit(0, JobSpec::simple("cf", &[16], &["f"], 10_000)).unwrap();
    assert_eq!(s.job(j).unwrap().policy, PolicyKind::Cf, "CF is the default policy");
    s.handle_timeout(60_000);
    let acts = drain(&mut s);
    assert_eq!(sites_of(&s, j), vec![B]);
    assert!(transfers(&acts).is_empty());
    let tl = s.job(j).unwrap().timeline;
    assert_eq!((tl.placed, tl.ftt_ms, tl.estimated_start), (Some(60_000), 0, Some(60_000)));
    assert_eq!(claims(&acts), vec![(j, 0, B, 16, false)]);
}

/// a(32) b(8) c(32) d(8); f (1 MB) at b and d, both too small for 16 processors.
/// Forecast (default 1 Mbit/s = 8 000 ms per MB): b→a 2 000 ms, b→c 1 000 ms, d→a 3 000 ms,
/// d→c 1 500 ms.
fn cf_full_file_sites(history: HistorySeed) -> (Scheduler, koalesce_core::JobId) {
    let mut cat = ReplicaCatalogue::new();
    cat.insert("f", MB, [B, D]);
    let mut net = NetworkForecast::uniform(4, 1e6, 0);
    net.set(B, A, bps_for(MB, 2_000), 0);
    net.set(B, C, bps_for(MB, 1_000), 0);
    net.set(D, A, bps_for(MB, 3_000), 0);
    net.set(D, C, bps_for(MB, 1_500), 0);
    let config = SchedulerConfig {
        history,
        ..SchedulerConfig::default()
    };
    let mut s = scheduler(config, vec![site("a", 32), site("b", 8), site("c", 32), site("d", 8)], net, cat);
    let j = s.submit(0, JobSpec::simple("cf", &[16], &["f"], 10_000)).unwrap();
    s.handle_timeout(60_000);
    (s, j)
}

#[test]
fn cf_full_file_site_uses_the_history_pair_with_least_transfer_time() {
    // H = {(a,b), (c,b), (a,d)}. S_j = ∅ (b and d have 8 < 16). Potential pairs (E,F) with
    // E fitting 16 and F a file site: (a,b) 2 000 ms, (c,b) 1 000 ms, (a,d) 3 000 ms ((c,d) is
    // not in H). Minimum: (c,b). So the component runs at c and reads f from b:
    // FTT = 1 000, JST = 61 000, JCT0 = 60 000 + 0.75·1 000 = 60 750.
    // Lines 12–13 then add (c,F') for every file site F' ∈ {b,d}: (c,d) is new.
    let (mut s, j) = cf_full_file_sites(HistorySeed::Pairs {
        pairs: vec![(A, B), (C, B), (A, D)],
    });
    let acts = drain(&mut s);
    assert_eq!(sites_of(&s, j), vec![C]);
    assert_eq!(transfers(&acts), vec![(j, "f".to_string(), B, C, MB)]);
    let job = s.job(j).unwrap();
    assert_eq!(job.timeline.ftt_ms, 1_000);
    assert_eq!(job.timeline.estimated_start, Some(61_000));
    assert_eq!(job.next_claim, Some(60_750));
    assert_eq!(job.state, JobState::Placed);
    let expected: BTreeSet<(SiteId, SiteId)> = [(A, B), (C, B), (A, D), (C, D)].into_iter().collect();
    assert_eq!(s.history(), &expected);
    assert_eq!(s.site_view(C).placed_unclaimed, 16);
}

#[test]
fn cf_with_all_pairs_history_picks_the_same_unique_minimum() {
    // All pairs: (c,d) 1 500 ms now competes too, but (c,b) at 1 000 ms is still the minimum;
    // (b,·) and (d,·) do not fit. H already holds every pair and stays the same.
    let (mut s, j) = cf_full_file_sites(HistorySeed::AllPairs);
    let acts = drain(&mut s);
    assert_eq!(sites_of(&s, j), vec![C]);
    assert_eq!(transfers(&acts), vec![(j, "f".to_string(), B, C, MB)]);
    assert_eq!(s.history().len(), 16);
}

#[test]
fn cf_with_empty_history_and_full_file_site_does_not_place_the_job() {
    // a(32) b(8), f at b, 16 processors: S_j = ∅ and H = ∅ gives P_j = ∅ (line 15): the job
    // stays queued, nothing is placed, claimed or transferred, and H stays empty.
    let mut cat = ReplicaCatalogue::new();
    cat.insert("f", MB, [B]);
    let config = SchedulerConfig {
        history: HistorySeed::Empty,
        ..SchedulerConfig::default()
    };
    let mut s = scheduler(config, vec![site("a", 32), site("b", 8)], NetworkForecast::uniform(2, 8e6, 0), cat);
    let j = s.submit(0, JobSpec::simple("cf", &[16], &["f"], 10_000)).unwrap();
    drain(&mut s);
    s.handle_timeout(60_000);
    let acts = drain(&mut s);
    assert!(acts.is_empty(), "{acts:?}");
    // A failed try changes nothing but the job's tries, which a driver can take.
    assert_eq!(s.take_progress(), vec![(j, 1, 0, koalesce_core::Priority::High)]);
    assert!(s.take_progress().is_empty());
    let job = s.job(j).unwrap();
    assert_eq!(job.state, JobState::Queued);
    assert_eq!(job.placement_tries, 1);
    assert_eq!(s.site_view(A).placed_unclaimed + s.site_view(B).placed_unclaimed, 0);
    assert!(s.history().is_empty());
    // A site of a(32) would fit, but CF never uses it without a pair in H.
    assert_eq!(s.poll_timeout(), Some(120_000));
}

// ----- CF with replicas -------------------------------------------------------------------

#[test]
fn cf_two_fitting_replica_sites_picks_the_alphabetically_first_name_not_the_lowest_id() {
    // Ids 0 "zulu", 1 "alpha", 2 "mike", all 64 processors, f on all three. All fit 16;
    // alphabetically alpha < mike < zulu, so site#1 wins although site#0 has the lowest id.
    let mut cat = ReplicaCatalogue::new();
    cat.insert("f", MB, [A, B, C]);
    let mut s = scheduler(
        SchedulerConfig::default(),
        vec![site("zulu", 64), site("alpha", 64), site("mike", 64)],
        NetworkForecast::uniform(3, 8e6, 0),
        cat,
    );
    let j = s.submit(0, JobSpec::simple("cf", &[16], &["f"], 10_000)).unwrap();
    s.handle_timeout(60_000);
    let acts = drain(&mut s);
    assert_eq!(sites_of(&s, j), vec![B]);
    assert!(transfers(&acts).is_empty());
}

#[test]
fn cf_second_component_goes_to_the_other_replica_when_the_first_fills_up() {
    // a(20) b(20) c(64); f at a and b. Components [12, 16], largest first:
    //   16 → file sites fitting: a(20), b(20) → "a" (alphabetical); a has 4 left.
    //   12 → a has 4 < 12; b has 20 → b.
    // Both read f locally: no transfer. c, the biggest site, is not a file site and is unused.
    let mut cat = ReplicaCatalogue::new();
    cat.insert("f", MB, [A, B]);
    let mut s = scheduler(
        SchedulerConfig::default(),
        vec![site("a", 20), site("b", 20), site("c", 64)],
        NetworkForecast::uniform(3, 8e6, 0),
        cat,
    );
    let j = s.submit(0, JobSpec::simple("cf", &[12, 16], &["f"], 10_000)).unwrap();
    s.handle_timeout(60_000);
    let acts = drain(&mut s);
    assert_eq!(sites_of(&s, j), vec![B, A]);
    assert!(transfers(&acts).is_empty());
    assert_eq!(s.job(j).unwrap().timeline.ftt_ms, 0);
}

// ----- WF ---------------------------------------------------------------------------------

#[test]
fn wf_places_components_in_decreasing_size_on_the_site_with_most_idle() {
    // a(10) b(40) c(25); components [5, 20, 8]. Largest first:
    //   20 → max(10, 40, 25) = b → b has 20 left;
    //    8 → max(10, 20, 25) = c → c has 17 left;
    //    5 → max(10, 20, 17) = b → b has 15 left.
    // So components 0 and 1 share b, the largest site; component 2 is on c.
    let mut s = scheduler(
        SchedulerConfig::default(),
        vec![site("a", 10), site("b", 40), site("c", 25)],
        NetworkForecast::uniform(3, 8e6, 0),
        ReplicaCatalogue::new(),
    );
    let j = s.submit(0, job("wf", &[5, 20, 8], &[], PolicyKind::Wf)).unwrap();
    s.handle_timeout(60_000);
    let acts = drain(&mut s);
    assert_eq!(sites_of(&s, j), vec![B, B, C]);
    // No input: FTT = 0, claimed at placement.
    assert_eq!(claims(&acts), vec![(j, 0, B, 5, false), (j, 1, B, 20, false), (j, 2, C, 8, false)]);
}

#[test]
fn wf_reads_each_file_from_the_replica_with_least_transfer_time() {
    // a(8) b(64) c(8); f (1 MB) at a and c. WF puts 10 processors on b (largest). Replicas:
    // a→b at 2 Mbit/s = 4 000 ms, c→b at 8 Mbit/s = 1 000 ms: read from c, FTT = 1 000.
    let mut cat = ReplicaCatalogue::new();
    cat.insert("f", MB, [A, C]);
    let mut net = NetworkForecast::uniform(3, 1e6, 0);
    net.set(A, B, 2e6, 0);
    net.set(C, B, 8e6, 0);
    let mut s = scheduler(
        SchedulerConfig::default(),
        vec![site("a", 8), site("b", 64), site("c", 8)],
        net,
        cat,
    );
    let j = s.submit(0, job("wf", &[10], &["f"], PolicyKind::Wf)).unwrap();
    s.handle_timeout(60_000);
    let acts = drain(&mut s);
    assert_eq!(sites_of(&s, j), vec![B]);
    assert_eq!(transfers(&acts), vec![(j, "f".to_string(), C, B, MB)]);
    assert_eq!(s.job(j).unwrap().timeline.ftt_ms, 1_000);
}

#[test]
fn wf_placement_is_atomic_and_a_failure_leaves_nothing_placed() {
    // a(16) b(16); [12, 12, 6]: 12 → a (4 left), 12 → b (4 left), 6 → nothing: the whole
    // job fails, no component keeps processors placed-but-unclaimed.
    let mut s = scheduler(
        SchedulerConfig::default(),
        vec![site("a", 16), site("b", 16)],
        NetworkForecast::uniform(2, 8e6, 0),
        ReplicaCatalogue::new(),
    );
    let j1 = s.submit(0, job("three", &[12, 12, 6], &[], PolicyKind::Wf)).unwrap();
    s.handle_timeout(60_000);
    assert!(drain(&mut s).is_empty());
    assert_eq!(state(&s, j1), JobState::Queued);
    assert!(s.job(j1).unwrap().components.iter().all(|c| c.site.is_none()));
    assert_eq!(s.site_view(A).placed_unclaimed, 0);
    assert_eq!(s.site_view(B).placed_unclaimed, 0);
    // A 16-processor job behind it gets all of a (a and b tie at 16: lowest id).
    let j2 = s.submit(61_000, job("one", &[16], &[], PolicyKind::Wf)).unwrap();
    s.handle_timeout(120_000);
    let acts = drain(&mut s);
    assert_eq!(state(&s, j1), JobState::Queued);
    assert_eq!(claims(&acts), vec![(j2, 0, A, 16, false)]);
}

// ----- CM and FCM -------------------------------------------------------------------------

#[test]
fn cm_uses_as_few_sites_as_possible_where_wf_spreads() {
    // a(16) b(14); [4, 4, 4].
    // CM: all three fit together on a (12 ≤ 16) → one site.
    // WF: 4 → a (16 > 14, a 12 left); 4 → b (14 > 12, b 10 left); 4 → a (12 > 10).
    let run = |policy| {
        let mut s = scheduler(
            SchedulerConfig::default(),
            vec![site("a", 16), site("b", 14)],
            NetworkForecast::uniform(2, 8e6, 0),
            ReplicaCatalogue::new(),
        );
        let j = s.submit(0, job("j", &[4, 4, 4], &[], policy)).unwrap();
        s.handle_timeout(60_000);
        sites_of(&s, j)
    };
    assert_eq!(run(PolicyKind::Cm), vec![A, A, A]);
    assert_eq!(run(PolicyKind::Wf), vec![A, B, A]);
}

#[test]
fn cm_opens_a_second_site_only_when_the_used_ones_are_full() {
    // a(16) b(14) c(10); [10, 8, 6]: 10 → a (6 left); 8 → a is full for it, open b (6 left);
    // 6 → back on a (6 fits). Two sites; WF would use all three (10→a, 8→b, 6→c).
    let mut s = scheduler(
        SchedulerConfig::default(),
        vec![site("a", 16), site("b", 14), site("c", 10)],
        NetworkForecast::uniform(3, 8e6, 0),
        ReplicaCatalogue::new(),
    );
    let j = s.submit(0, job("j", &[10, 8, 6], &[], PolicyKind::Cm)).unwrap();
    s.handle_timeout(60_000);
    assert_eq!(sites_of(&s, j), vec![A, B, A]);
}

fn flexible(total: u32, min_component: u32, max_components: u32) -> JobSpec {
    JobSpec {
        components: Vec::new(),
        flexible: Some(FlexibleRequest {
            total,
            min_component,
            max_components,
        }),
        ..JobSpec::simple("flex", &[], &[], 10_000)
    }
}

fn fcm(sizes: &[u32], spec: JobSpec) -> (JobState, Vec<(SiteId, u32)>) {
    let sites = sizes.iter().enumerate().map(|(i, &p)| site(&format!("s{i}"), p)).collect();
    let mut s = scheduler(
        SchedulerConfig::default(),
        sites,
        NetworkForecast::uniform(sizes.len(), 8e6, 0),
        ReplicaCatalogue::new(),
    );
    let j = s.submit(0, spec).unwrap();
    assert_eq!(s.job(j).unwrap().policy, PolicyKind::Fcm);
    s.handle_timeout(60_000);
    let job = s.job(j).unwrap();
    (job.state, job.components.iter().map(|c| (c.site.unwrap(), c.processors)).collect())
}

#[test]
fn fcm_splits_a_flexible_total_over_as_few_sites_as_possible() {
    // a(20) b(12) c(8), total 30: largest first, 20 from a, the remaining 10 from b → two
    // pieces (three sites would be needed only if a + b < 30).
    let (st, pieces) = fcm(&[20, 12, 8], flexible(30, 4, 3));
    assert_eq!(st, JobState::Running);
    assert_eq!(pieces, vec![(A, 20), (B, 10)]);
    // The whole job fits one site: one component, even if smaller than min_component.
    let (_, pieces) = fcm(&[20, 12, 8], flexible(6, 8, 3));
    assert_eq!(pieces, vec![(A, 6)]);
}

#[test]
fn fcm_respects_min_component() {
    // a(20) b(3) c(12), total 22, min_component 4. Taking all 20 of a would leave a piece of 2
    // < 4; so a gives 18 and leaves 4; b (3 < 4) is skipped; c gives 4 → [18 at a, 4 at c].
    let (st, pieces) = fcm(&[20, 3, 12], flexible(22, 4, 3));
    assert_eq!(st, JobState::Running);
    assert_eq!(pieces, vec![(A, 18), (C, 4)]);
    assert!(pieces.iter().all(|&(_, p)| p >= 4), "{pieces:?}");
    // a(5) b(5), total 6, min 4: one site cannot hold 6, two pieces ≥ 4 need 8 > 6: no split.
    let (st, pieces) = fcm(&[5, 5], flexible(6, 4, 3));
    assert_eq!((st, pieces), (JobState::Queued, vec![]));
}

#[test]
fn fcm_respects_max_components() {
    // a(12) b(10) c(10), total 30: needs three pieces (12 + 10 + 8); with at most two the
    // job cannot be placed now.
    let (st, _) = fcm(&[12, 10, 10], flexible(30, 1, 2));
    assert_eq!(st, JobState::Queued);
    let (st, pieces) = fcm(&[12, 10, 10], flexible(30, 1, 3));
    assert_eq!(st, JobState::Running);
    assert_eq!(pieces, vec![(A, 12), (B, 10), (C, 8)]);
}

// ----- placed but unclaimed ---------------------------------------------------------------

#[test]
fn placed_but_unclaimed_processors_are_not_given_to_another_grid_job() {
    // a(32) f(4); file on f takes 10 s to a, so job 1 (24 on a by WF) is placed at 60 000
    // and claimed only at JCT0 = 67 500. Job 2 (16) in the same scan sees a: 32 − 24 = 8 and
    // f: 4, and cannot be placed, although a still reports 32 idle processors.
    let mut cat = ReplicaCatalogue::new();
    cat.insert("in", MB, [B]);
    let mut s = scheduler(
        SchedulerConfig::default(),
        vec![site("a", 32), site("f", 4)],
        NetworkForecast::uniform(2, bps_for(MB, 10_000), 0),
        cat,
    );
    let j1 = s.submit(0, job("first", &[24], &["in"], PolicyKind::Wf)).unwrap();
    let j2 = s.submit(0, job("second", &[16], &[], PolicyKind::Wf)).unwrap();
    s.handle_timeout(60_000);
    let acts = drain(&mut s);
    assert_eq!(state(&s, j1), JobState::Placed);
    assert_eq!(state(&s, j2), JobState::Queued);
    assert!(claims(&acts).is_empty());
    assert_eq!(s.site_view(A).idle, 32);
    assert_eq!(s.site_view(A).placed_unclaimed, 24);
    assert_eq!(s.job(j1).unwrap().next_claim, Some(67_500));
    // Local jobs may still use them: the LRM now reports 20 idle, so job 1's claim at JCT0
    // (24 > 20) fails and waits.
    s.update_site_idle(A, 20);
    s.handle_timeout(67_500);
    assert!(claims(&drain(&mut s)).is_empty());
    // The local jobs leave; job 1 claims at JCT1 = 67 500 + 0.75·2 500 = 69 375, and only
    // then are the remaining 8 processors free for job 2 (still too few).
    s.update_site_idle(A, 32);
    assert_eq!(s.poll_timeout(), Some(69_375));
    s.handle_timeout(69_375);
    assert_eq!(claims(&drain(&mut s)), vec![(j1, 0, A, 24, false)]);
    assert_eq!(s.site_view(A).placed_unclaimed, 0);
    s.handle_timeout(120_000);
    assert_eq!(state(&s, j2), JobState::Queued);
}

#[test]
fn a_bag_runs_with_at_least_k_components_and_skips_the_rest() {
    use koalesce_core::scheduler::ComponentOutcome;
    use koalesce_core::state::ComponentState;
    // a(8) b(8); bag of [6, 6, 6] with k = 2: the whole bag does not fit (18 > 16), but two
    // components do (one per site); the third is skipped and the bag succeeds with two.
    let mut s = scheduler(
        SchedulerConfig::default(),
        vec![site("a", 8), site("b", 8)],
        NetworkForecast::uniform(2, 8e6, 0),
        ReplicaCatalogue::new(),
    );
    let mut spec = job("bag", &[6, 6, 6], &[], PolicyKind::Wf);
    spec.min_components = Some(2);
    let j = s.submit(0, spec).unwrap();
    s.handle_timeout(60_000);
    let acts = drain(&mut s);
    let claimed = claims(&acts);
    assert_eq!(claimed.len(), 2, "{acts:?}");
    assert_eq!(state(&s, j), JobState::Running);
    let states: Vec<ComponentState> = s.job(j).unwrap().components.iter().map(|c| c.state).collect();
    assert_eq!(states.iter().filter(|&&c| c == ComponentState::Skipped).count(), 1, "{states:?}");
    for (job, comp, ..) in claimed {
        s.component_finished(61_000, job, comp, ComponentOutcome::Success);
    }
    assert_eq!(state(&s, j), JobState::Succeeded);
    // With k = n the bag is atomic: [6, 6, 4] (16 = the grid) cannot fit 6 + 6 + 4 on two
    // sites of 8, so it waits.
    let mut spec = job("strict", &[6, 6, 4], &[], PolicyKind::Wf);
    spec.min_components = Some(3);
    let j3 = s.submit(62_000, spec).unwrap();
    s.handle_timeout(120_000);
    assert_eq!(state(&s, j3), JobState::Queued);
}
