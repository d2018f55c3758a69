//! Hand-checked tests of claiming without reservations (003 §4.2.2), the Incremental Claiming
//! Policy (003 Alg. 2) with re-placement and preemption, and claiming with reservations.
//!
//! Common setup unless a test says otherwise: execution sites plus a small file site "f"
//! holding a 1 MB input that takes 10 000 ms to reach any other site. Jobs are submitted at
//! t = 0 and placed by the first scan at JPT = 60 000, so FTT = 10 000, JST = 70 000 and
//! JCT0 = JPT + L·FTT = 60 000 + 0.75·10 000 = 67 500.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::*;
use koalesce_core::config::OnJstReached;
use koalesce_core::model::{NetworkForecast, PolicyKind, Priority, ReplicaCatalogue, Site};
use koalesce_core::scheduler::TransferKey;
use koalesce_core::state::{ComponentState, FailureReason};
use koalesce_core::{Action, JobId, JobSpec, JobState, Millis, Scheduler, SchedulerConfig, SiteId};

const A: SiteId = SiteId(0);
const B: SiteId = SiteId(1);

fn wf(name: &str, sizes: &[u32], files: &[&str]) -> JobSpec {
    JobSpec {
        policy: Some(PolicyKind::Wf),
        ..JobSpec::simple(name, sizes, files, 30_000)
    }
}

/// Sites `exec` followed by the file site "f"(4) holding "in" (1 MB, 10 000 ms away).
fn setup(config: SchedulerConfig, exec: Vec<Site>) -> Scheduler {
    let mut sites = exec;
    let f = SiteId(sites.len() as u32);
    sites.push(site("f", 4));
    let mut cat = ReplicaCatalogue::new();
    cat.insert("in", MB, [f]);
    let net = NetworkForecast::uniform(sites.len(), bps_for(MB, 10_000), 0);
    Scheduler::new(config, sites, net, cat)
}

fn harness(config: SchedulerConfig, exec: Vec<Site>) -> Harness {
    let s = setup(config, exec);
    let sites = s.sites().to_vec();
    let net = s.forecast().clone();
    let cat = s.catalogue().clone();
    Harness::new(s.config().clone(), sites, net, cat)
}

/// Runs every timeout up to `until` (the scheduler alone, no driver).
fn run(s: &mut Scheduler, until: Millis) -> Vec<Action> {
    let mut out = Vec::new();
    while let Some(t) = s.poll_timeout() {
        if t > until {
            break;
        }
        s.handle_timeout(t);
        out.extend(drain(s));
    }
    out
}

fn cancels(actions: &[Action]) -> Vec<TransferKey> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::CancelTransfer { key, .. } => Some(key.clone()),
            _ => None,
        })
        .collect()
}

// ----- JCT schedule -----------------------------------------------------------------------

#[test]
fn claiming_times_follow_jct0_and_the_retry_formula_then_the_job_returns_at_jst() {
    let config = SchedulerConfig {
        min_claim_retry_ms: 1,
        ..SchedulerConfig::default()
    };
    let mut s = setup(config, vec![site("a", 32)]);
    let j = s.submit(0, wf("j", &[16], &["in"])).unwrap();
    s.handle_timeout(60_000);
    drain(&mut s);
    let job = s.job(j).unwrap();
    assert_eq!(sites_of(&s, j), vec![A]);
    assert_eq!(job.timeline.placed, Some(60_000));
    assert_eq!(job.timeline.ftt_ms, 10_000);
    assert_eq!(job.timeline.estimated_start, Some(70_000));
    // JCT0 = 60 000 + 0.75·10 000 = 67 500, exactly.
    assert_eq!(job.next_claim, Some(67_500));
    assert_eq!(s.poll_timeout(), Some(67_500));

    // Local jobs take the processors: every claiming try fails.
    s.update_site_idle(A, 10);
    // JCT_{n+1} = JCT_n + round(0.75·(70 000 − JCT_n)):
    //   67 500 + 1 875 = 69 375; + round(468.75) = 469 → 69 844; + 117 → 69 961;
    //   + round(29.25) = 29 → 69 990; + round(7.5) = 8 → 69 998; + round(1.5) = 2 → 70 000.
    let expected = [67_500, 69_375, 69_844, 69_961, 69_990, 69_998, 70_000];
    let mut seen = Vec::new();
    while let Some(t) = s.poll_timeout() {
        if t > 70_000 {
            break;
        }
        seen.push(t);
        s.handle_timeout(t);
        let acts = drain(&mut s);
        assert!(claims(&acts).is_empty());
        if t < 70_000 {
            assert_eq!(state(&s, j), JobState::Placed);
        } else {
            // The JST is reached: back to the placement queue with L = 0.75 − 0.25; the
            // transfer in flight is cancelled; nothing was claimed, so nothing is aborted.
            assert!(aborts(&acts).is_empty());
            assert_eq!(cancels(&acts).len(), 1);
        }
    }
    assert_eq!(seen, expected);
    let job = s.job(j).unwrap();
    assert_eq!(job.state, JobState::Queued);
    assert_eq!(job.claim_fraction, 0.5);
    assert_eq!(job.jst_returns, 1);
    assert_eq!(job.claiming_tries, 7);
    assert_eq!(s.site_view(A).placed_unclaimed, 0);

    // Re-placed at the next scan (120 000) with the lowered L: JCT0 = 120 000 + 0.5·10 000.
    s.update_site_idle(A, 32);
    s.handle_timeout(120_000);
    drain(&mut s);
    let job = s.job(j).unwrap();
    assert_eq!(job.timeline.estimated_start, Some(130_000));
    assert_eq!(job.next_claim, Some(125_000));
    assert_eq!(job.timeline.first_estimated_start, Some(70_000));
}

#[test]
fn min_claim_retry_bounds_the_retry_interval() {
    // Default min retry 1 000 ms: JCT1 = 69 375; JCT2 = 69 375 + max(469, 1 000) capped at
    // the JST = 70 000.
    let mut s = setup(SchedulerConfig::default(), vec![site("a", 32)]);
    let j = s.submit(0, wf("j", &[16], &["in"])).unwrap();
    s.handle_timeout(60_000);
    s.update_site_idle(A, 10);
    s.handle_timeout(67_500);
    assert_eq!(s.poll_timeout(), Some(69_375));
    s.handle_timeout(69_375);
    assert_eq!(s.job(j).unwrap().next_claim, Some(70_000));
}

#[test]
fn claiming_never_spins_at_the_same_instant_even_with_zero_min_retry() {
    // L = 0.25, no minimum retry interval: JCT0 = 62 500, and each failed try moves the JCT
    // by round(0.25·(JST − JCT)). When JST − JCT = 1 that is round(0.25) = 0: the next try
    // must still be later than this one, or handle_timeout loops forever.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let config = SchedulerConfig {
            claim_fraction: 0.25,
            min_claim_retry_ms: 0,
            ..SchedulerConfig::default()
        };
        let mut s = setup(config, vec![site("a", 32)]);
        let j = s.submit(0, wf("j", &[16], &["in"])).unwrap();
        s.handle_timeout(60_000);
        assert_eq!(s.job(j).unwrap().next_claim, Some(62_500));
        s.update_site_idle(A, 10);
        run(&mut s, 70_000);
        tx.send(s.job(j).unwrap().state).unwrap();
    });
    let st = rx.recv_timeout(Duration::from_secs(20)).expect("handle_timeout did not return");
    assert_eq!(st, JobState::Queued);
}

#[test]
fn claiming_tries_threshold_fails_the_job() {
    // At most 2 claiming tries: 67 500 and 69 375 fail; the third (at 70 000) exceeds it.
    let config = SchedulerConfig {
        max_claiming_tries: Some(2),
        ..SchedulerConfig::default()
    };
    let mut s = setup(config, vec![site("a", 32)]);
    let j = s.submit(0, wf("j", &[16], &["in"])).unwrap();
    s.handle_timeout(60_000);
    s.update_site_idle(A, 10);
    run(&mut s, 70_000);
    assert_eq!(state(&s, j), JobState::Failed(FailureReason::ClaimingTries));
    assert_eq!(s.site_view(A).placed_unclaimed, 0);
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn jst_reached_aborts_claimed_components_and_lowers_l() {
    // T = 0. a(16) b(16); WF puts [16, 16] on a (tie → lowest id) and then b.
    // b's LRM has only 8 idle: at 67 500 component 0 is claimed at a, component 1 is not, and
    // at no later try either (re-placement finds no site: a has 16 − 16 = 0, b 8, f 4; no
    // grid job to preempt). At the JST the job goes back: component 0 is aborted, both
    // transfers are cancelled, L = 0.5.
    let config = SchedulerConfig {
        claim_threshold: 0.0,
        ..SchedulerConfig::default()
    };
    let mut s = setup(config, vec![site("a", 16), site("b", 16)]);
    let j = s.submit(0, wf("j", &[16, 16], &["in"])).unwrap();
    s.handle_timeout(60_000);
    assert_eq!(sites_of(&s, j), vec![A, B]);
    assert_eq!(transfers(&drain(&mut s)).len(), 2);
    s.update_site_idle(B, 8);
    s.handle_timeout(67_500);
    let acts = drain(&mut s);
    assert_eq!(claims(&acts), vec![(j, 0, A, 16, false)]);
    assert_eq!(s.job(j).unwrap().components[1].state, ComponentState::Placed);
    let acts = run(&mut s, 70_000);
    assert_eq!(aborts(&acts), vec![(j, 0, A)]);
    assert_eq!(cancels(&acts).len(), 2);
    let job = s.job(j).unwrap();
    assert_eq!(job.state, JobState::Queued);
    assert_eq!(job.claim_fraction, 0.5);
    assert_eq!(s.site_view(A).placed_unclaimed + s.site_view(B).placed_unclaimed, 0);
    assert_eq!(s.claimed_processors(A), 0);
}

#[test]
fn extend_jst_pushes_the_jst_and_keeps_claiming() {
    // 000 §3.3: at the JST (70 000) the JST moves by 4 min to 310 000 and the next try is at
    // 70 000 + 0.75·240 000 = 250 000; L is unchanged and the job stays placed.
    let config = SchedulerConfig {
        on_jst_reached: OnJstReached::ExtendJst { interval_ms: 240_000 },
        ..SchedulerConfig::default()
    };
    let mut s = setup(config, vec![site("a", 32)]);
    let j = s.submit(0, wf("j", &[16], &["in"])).unwrap();
    s.handle_timeout(60_000);
    let key = drain(&mut s)
        .into_iter()
        .find_map(|a| match a {
            Action::StartTransfer { key, .. } => Some(key),
            _ => None,
        })
        .unwrap();
    s.update_site_idle(A, 10);
    run(&mut s, 70_000);
    let job = s.job(j).unwrap();
    assert_eq!(job.state, JobState::Placed);
    assert_eq!(job.timeline.estimated_start, Some(310_000));
    assert_eq!(job.next_claim, Some(250_000));
    assert_eq!(job.claim_fraction, 0.75);
    // The LRM frees the processors; the claim at 250 000 succeeds and the job launches when
    // its input is in.
    s.update_site_idle(A, 32);
    let acts = run(&mut s, 250_000);
    assert_eq!(claims(&acts), vec![(j, 0, A, 16, false)]);
    assert_eq!(state(&s, j), JobState::Claimed);
    s.transfer_finished(250_100, j, &key);
    assert!(drain(&mut s).contains(&Action::Launch { job: j }));
    assert_eq!(state(&s, j), JobState::Running);
}

// ----- ICP: the threshold T ---------------------------------------------------------------

fn two_sites(threshold: f64) -> (Scheduler, JobId) {
    let config = SchedulerConfig {
        claim_threshold: threshold,
        ..SchedulerConfig::default()
    };
    let mut s = setup(config, vec![site("a", 32), site("b", 32)]);
    let j = s.submit(0, wf("j", &[16, 16], &["in"])).unwrap();
    s.handle_timeout(60_000);
    drain(&mut s);
    assert_eq!(sites_of(&s, j), vec![A, B]);
    (s, j)
}

#[test]
fn icp_with_t_1_is_atomic() {
    // At 67 500 a could take component 0 but b has only 8 for component 1:
    // F = (0 + 1)/2 < T = 1, so nothing is claimed.
    let (mut s, j) = two_sites(1.0);
    s.update_site_idle(B, 8);
    s.handle_timeout(67_500);
    assert!(claims(&drain(&mut s)).is_empty());
    assert!(s.job(j).unwrap().components.iter().all(|c| c.state == ComponentState::Placed));
    assert_eq!(s.site_view(A).idle, 32);
    // b frees up: both are claimed together at JCT1 = 69 375.
    s.update_site_idle(B, 32);
    s.handle_timeout(69_375);
    assert_eq!(claims(&drain(&mut s)), vec![(j, 0, A, 16, false), (j, 1, B, 16, false)]);
    let job = s.job(j).unwrap();
    assert_eq!(job.state, JobState::Claimed);
    assert_eq!(job.timeline.claimed, Some(69_375));
    assert_eq!(job.timeline.pgt_ms(), Some(9_375));
}

#[test]
fn icp_with_t_0_claims_what_it_can_and_the_rest_later() {
    let (mut s, j) = two_sites(0.0);
    s.update_site_idle(B, 8);
    s.handle_timeout(67_500);
    assert_eq!(claims(&drain(&mut s)), vec![(j, 0, A, 16, false)]);
    assert_eq!(state(&s, j), JobState::Placed);
    s.update_site_idle(B, 32);
    s.handle_timeout(69_375);
    // C_prev = {0}: only component 1 is claimed now.
    assert_eq!(claims(&drain(&mut s)), vec![(j, 1, B, 16, false)]);
    assert_eq!(state(&s, j), JobState::Claimed);
}

// ----- ICP: re-placement ------------------------------------------------------------------

/// a(32) b(32) d(32) f(4); the input reaches a and b in 10 000 ms and d in `to_d_ms`.
/// WF: [16, 16] → a (three-way tie → lowest id), then b (tie b/d → lowest id).
fn replace_setup(priority: Priority, to_d_ms: Millis) -> (Scheduler, JobId) {
    let config = SchedulerConfig {
        claim_threshold: 0.5,
        ..SchedulerConfig::default()
    };
    let mut s = setup(config, vec![site("a", 32), site("b", 32), site("d", 32)]);
    s.update_forecast(SiteId(3), SiteId(2), bps_for(MB, to_d_ms), 0);
    let spec = JobSpec {
        priority,
        ..wf("j", &[16, 16], &["in"])
    };
    let j = s.submit(0, spec).unwrap();
    s.handle_timeout(60_000);
    drain(&mut s);
    assert_eq!(sites_of(&s, j), vec![A, B]);
    // b's LRM has nothing left for the grid.
    s.update_site_idle(B, 0);
    (s, j)
}

#[test]
fn icp_re_places_a_component_whose_file_can_arrive_before_the_jst() {
    // At 67 500: C_now = {0} (a), C_not = {1} (b has 0). F = 1/2 ≥ T = 0.5. Place(1) with WF
    // on what is left: a 32 − 16 claimed now − 16 placed = 0, b 0, d 32, f 4 → d, with
    // ftt = 1 000: 67 500 + 1 000 = 68 500 < JST 70 000, so component 1 moves to d and is
    // started now. Its transfer to b is cancelled and one to d started.
    let (mut s, j) = replace_setup(Priority::High, 1_000);
    s.handle_timeout(67_500);
    let acts = drain(&mut s);
    let d = SiteId(2);
    let f = SiteId(3);
    assert_eq!(claims(&acts), vec![(j, 0, A, 16, false), (j, 1, d, 16, false)]);
    assert_eq!(transfers(&acts), vec![(j, "in".to_string(), f, d, MB)]);
    assert_eq!(cancels(&acts).iter().map(|k| k.to).collect::<Vec<_>>(), vec![B]);
    assert_eq!(sites_of(&s, j), vec![A, d]);
    assert_eq!(state(&s, j), JobState::Claimed);
    for site in [A, B, d] {
        assert_eq!(s.site_view(site).placed_unclaimed, 0);
    }
}

#[test]
fn icp_does_not_re_place_a_super_low_component_whose_file_would_arrive_after_the_jst() {
    // Same, but the input needs 5 000 ms to d: 67 500 + 5 000 ≥ 70 000 (line 6 fails), and a
    // super-low job goes no further (line 8): component 1 stays unclaimed at b.
    let (mut s, j) = replace_setup(Priority::SuperLow, 5_000);
    s.handle_timeout(67_500);
    let acts = drain(&mut s);
    assert_eq!(claims(&acts), vec![(j, 0, A, 16, false)]);
    assert!(transfers(&acts).is_empty());
    assert_eq!(sites_of(&s, j), vec![A, B]);
    assert_eq!(s.job(j).unwrap().components[1].state, ComponentState::Placed);
}

#[test]
fn icp_late_file_for_a_high_job_falls_through_to_line_9_at_the_new_site() {
    // Same late file, high priority: line 9 counts idle + lower-priority processors at E_j = d:
    // 32 ≥ 16, so no preemption is needed and component 1 joins C_now at d (Alg. 2 lines
    // 9–14 taken literally); it launches once its input is in.
    let (mut s, j) = replace_setup(Priority::High, 5_000);
    s.handle_timeout(67_500);
    let acts = drain(&mut s);
    assert_eq!(claims(&acts), vec![(j, 0, A, 16, false), (j, 1, SiteId(2), 16, false)]);
    assert_eq!(s.stats().preemptions, 0);
}

// ----- ICP: preemption --------------------------------------------------------------------

fn never_ending(name: &str, procs: u32, priority: Priority) -> JobSpec {
    JobSpec {
        priority,
        runtime_estimate_ms: 1_000_000_000,
        ..wf(name, &[procs], &[])
    }
}

/// a(32) f(4), T = 0. Two 8-processor grid jobs run on a (placed at 60 000 and 120 000, so
/// JST 60 000 and 120 000); a 16-processor job with the remote input is placed on a at
/// 180 000 (JCT0 187 500, JST 190 000). Then local jobs take 8 of a's 16 idle processors.
fn preemption_setup(victims: Priority, preemptor: Priority) -> (Harness, JobId, JobId, JobId) {
    let config = SchedulerConfig {
        claim_threshold: 0.0,
        ..SchedulerConfig::default()
    };
    let mut h = harness(config, vec![site("a", 32)]);
    let l1 = h.submit(never_ending("old", 8, victims));
    h.run_until(61_000);
    let l2 = h.submit(never_ending("new", 8, victims));
    h.run_until(121_000);
    let p = h.submit(JobSpec {
        priority: preemptor,
        ..wf("urgent", &[16], &["in"])
    });
    h.run_until(181_000);
    assert_eq!(h.state(l1), JobState::Running);
    assert_eq!(h.state(l2), JobState::Running);
    assert_eq!(h.state(p), JobState::Placed);
    assert_eq!(h.s.job(l1).unwrap().timeline.estimated_start, Some(60_000));
    assert_eq!(h.s.job(l2).unwrap().timeline.estimated_start, Some(120_000));
    assert_eq!(h.s.job(p).unwrap().next_claim, Some(187_500));
    h.set_local_busy(A, 8);
    assert_eq!(h.idle(A), 8);
    (h, l1, l2, p)
}

#[test]
fn icp_preempts_lower_priority_grid_jobs_newest_jst_first() {
    // At 187 500: a has 8 idle < 16. Re-placement fails (a: 8 − 16 placed → 0; f: 4). Line 9:
    // 8 idle + 16 held by low jobs ≥ 16. Preempt newest JST first: "new" (JST 120 000) →
    // 16 idle ≥ 16, stop. "old" keeps running; the high job is claimed at a and launches at
    // 190 000 when its input arrives.
    let (mut h, l1, l2, p) = preemption_setup(Priority::Low, Priority::High);
    let mark = h.log.len();
    h.run_until(187_500);
    let acts = h.actions_since(mark);
    assert_eq!(aborts(&acts), vec![(l2, 0, A)]);
    assert_eq!(claims(&acts), vec![(p, 0, A, 16, false)]);
    let abort_at = acts.iter().position(|a| matches!(a, Action::Abort { .. })).unwrap();
    let claim_at = acts.iter().position(|a| matches!(a, Action::Claim { .. })).unwrap();
    assert!(abort_at < claim_at, "the victim is aborted before the claim");
    assert_eq!(h.state(l1), JobState::Running);
    assert_eq!(h.state(l2), JobState::Queued);
    assert_eq!(h.s.job(l2).unwrap().preemptions, 1);
    assert_eq!(h.s.stats().preemptions, 1);
    h.run_until(190_000);
    assert_eq!(h.state(p), JobState::Running);
    assert_eq!(h.overdraws, 0);
    h.assert_clean();
}

#[test]
fn icp_never_preempts_for_a_super_low_job() {
    let (mut h, l1, l2, p) = preemption_setup(Priority::SuperLow, Priority::SuperLow);
    let mark = h.log.len();
    h.run_until(190_000);
    let acts = h.actions_since(mark);
    assert!(aborts(&acts).is_empty());
    assert!(claims(&acts).is_empty());
    assert_eq!(h.state(l1), JobState::Running);
    assert_eq!(h.state(l2), JobState::Running);
    assert_eq!(h.state(p), JobState::Queued, "JST reached without its processors");
    assert_eq!(h.s.stats().preemptions, 0);
    h.assert_clean();
}

#[test]
fn icp_does_not_preempt_jobs_of_equal_priority() {
    let (mut h, l1, l2, p) = preemption_setup(Priority::High, Priority::High);
    h.run_until(190_000);
    assert_eq!(
        (h.state(l1), h.state(l2), h.state(p)),
        (JobState::Running, JobState::Running, JobState::Queued)
    );
    h.assert_clean();
}

#[test]
fn preempting_a_victim_whose_claim_was_not_yet_issued_does_not_inflate_idle() {
    // a(40) f(4), T = 0, 80 kbit/s from f: "small" (200 kB) takes 20 000 ms, "in" (1 MB)
    // 100 000 ms. Jobs: V low [8] needs "small"; H high [24] and W high [8] need "in".
    //   60 000: high scan: H → a, W → a (placed 32). JCT0 = 60 000 + 75 000 = 135 000.
    //  120 000: low scan: V → a (placed 40). JCT0 = 120 000 + 15 000 = 135 000.
    // At 135 000 a reports 24 idle (local jobs took 16). Claiming tries in (JCT, id) order:
    //   V: 24 ≥ 8 → Claim (not yet pulled by the driver); idle view 16.
    //   H: 16 < 24 → re-placement fails; line 9: 16 + 8 (V) ≥ 24 → preempt V: its Claim is
    //      withdrawn (so idle is back at 24), H claims 24 → idle 0.
    //   W: 0 < 8 → nothing to claim, nothing lower to preempt.
    // Only H's claim reaches the driver, and the core's idle view of a must be 0.
    let sites = vec![site("a", 40), site("f", 4)];
    let f = SiteId(1);
    let mut cat = ReplicaCatalogue::new();
    cat.insert("in", MB, [f]);
    cat.insert("small", MB / 5, [f]);
    let net = NetworkForecast::uniform(2, bps_for(MB, 100_000), 0);
    let config = SchedulerConfig {
        claim_threshold: 0.0,
        ..SchedulerConfig::default()
    };
    let mut s = Scheduler::new(config, sites, net, cat);
    let v = s
        .submit(
            0,
            JobSpec {
                priority: Priority::Low,
                ..wf("v", &[8], &["small"])
            },
        )
        .unwrap();
    let h = s.submit(0, wf("h", &[24], &["in"])).unwrap();
    let w = s.submit(0, wf("w", &[8], &["in"])).unwrap();
    s.handle_timeout(60_000);
    s.handle_timeout(120_000);
    drain(&mut s);
    for j in [v, h, w] {
        assert_eq!(s.job(j).unwrap().next_claim, Some(135_000), "job {j}");
    }
    assert_eq!(s.site_view(A).placed_unclaimed, 40);
    s.update_site_idle(A, 24);
    s.handle_timeout(135_000);
    let acts = drain(&mut s);
    assert_eq!(claims(&acts), vec![(h, 0, A, 24, false)]);
    assert!(aborts(&acts).is_empty(), "V's claim was never issued: nothing to abort");
    assert_eq!(state(&s, v), JobState::Queued);
    assert_eq!(s.site_view(A).idle, 0);
}

// ----- reservations -----------------------------------------------------------------------

#[test]
fn reservation_sites_reserve_for_jst_to_jst_plus_estimate_and_claim_inside_at_jst() {
    // a(32) supports reservations. Placed at 60 000 with JST 70 000: Reserve a 16 for
    // [70 000, 100 000) right away; no claiming try at JCT0 67 500; at 70 000 the claim runs
    // inside the reservation, the input is in, the job launches and ends at 100 000.
    let mut h = harness(SchedulerConfig::default(), vec![reserving_site("a", 32)]);
    let j = h.submit(wf("r", &[16], &["in"]));
    h.run_until(60_000);
    let reserve: Vec<Action> = h
        .log
        .iter()
        .filter(|(_, a)| matches!(a, Action::Reserve { .. }))
        .map(|(_, a)| a.clone())
        .collect();
    assert_eq!(
        reserve,
        vec![Action::Reserve {
            job: j,
            component: 0,
            site: A,
            processors: 16,
            start: 70_000,
            duration: 30_000,
        }]
    );
    assert_eq!(h.s.poll_timeout(), Some(70_000));
    h.run_until(69_999);
    assert!(claims(&h.actions_since(0)).is_empty());
    h.run_until(70_000);
    assert_eq!(claims(&h.actions_since(0)), vec![(j, 0, A, 16, true)]);
    assert_eq!(h.state(j), JobState::Running);
    assert_eq!(h.s.job(j).unwrap().claiming_tries, 0);
    h.run_until(200_000);
    assert_eq!(h.state(j), JobState::Succeeded);
    assert_eq!(h.s.job(j).unwrap().timeline.finished, Some(100_000));
    h.assert_clean();
}

#[test]
fn a_rejected_reservation_returns_the_job_to_the_queue() {
    let mut h = harness(SchedulerConfig::default(), vec![reserving_site("a", 32)]);
    h.reject_reservations = true;
    let j = h.submit(wf("r", &[16], &["in"]));
    h.run_until(60_000);
    let job = h.s.job(j).unwrap();
    assert_eq!(job.state, JobState::Queued);
    assert_eq!(h.s.site_view(A).placed_unclaimed, 0);
    assert!(claims(&h.actions_since(0)).is_empty());
    // The transfer started for it is cancelled; the refused reservation is not "cancelled".
    assert_eq!(cancels(&h.actions_since(0)).len(), 1);
    assert!(!h.actions_since(0).iter().any(|a| matches!(a, Action::CancelReservation { .. })));
    h.assert_clean();
    // The LRM accepts the next request: placed again at 120 000, started at 130 000.
    h.reject_reservations = false;
    h.run_until(130_000);
    assert_eq!(h.state(j), JobState::Running);
    h.assert_clean();
}

#[test]
fn a_reservation_claim_withdrawn_before_the_driver_saw_it_cancels_the_reservation() {
    // r(20, reservations) a(16) f(4), L = 1 so the ordinary claim is at JCT0 = JST = 70 000.
    // WF: 20 → r (reserved for [70 000, 100 000)), 16 → a. At 70 000 the input is in; the
    // claiming try claims component 1 at a and the reservation start claims component 0 in
    // its reservation (the job launches). The driver then finds a's claim refused (soft error):
    // the job goes back to the queue, and since the driver never saw the claim inside the
    // reservation, the reservation itself must be given back.
    let config = SchedulerConfig {
        claim_fraction: 1.0,
        ..SchedulerConfig::default()
    };
    let mut h = harness(config, vec![reserving_site("r", 20), site("a", 16)]);
    h.claim_soft_errors[B.index()] = 1;
    let j = h.submit(wf("j", &[20, 16], &["in"]));
    h.run_until(60_000);
    assert_eq!(h.sites_of(j), vec![A, B]);
    assert_eq!(h.reserved.len(), 1);
    let mark = h.log.len();
    h.run_until(70_000);
    let acts = h.actions_since(mark);
    assert_eq!(claims(&acts), vec![(j, 1, B, 16, false)]);
    assert!(acts.contains(&Action::CancelReservation {
        job: j,
        component: 0,
        site: A
    }));
    assert_eq!(h.state(j), JobState::Queued);
    assert!(h.reserved.is_empty() && h.held.is_empty());
    h.assert_clean();
    h.run_until(1_000_000);
    assert_eq!(h.state(j), JobState::Succeeded);
    h.assert_clean();
}

#[test]
fn icp_does_not_preempt_to_start_a_component_on_a_blacklisted_site() {
    // a(32) f(4), T = 0. A low job runs 16 processors on a (placed at 60 000); a high job
    // with the remote input is placed on a at 120 000 (JCT0 127 500). Then a is blacklisted.
    // At 127 500 a counts no idle processors for claiming, re-placement finds no other site
    // (f has 4), and preempting the low job would start the high one on a site the core no
    // longer uses: nothing is preempted, nothing claimed; at the JST the job goes back.
    let config = SchedulerConfig {
        claim_threshold: 0.0,
        ..SchedulerConfig::default()
    };
    let mut h = harness(config, vec![site("a", 32)]);
    let low = h.submit(never_ending("low", 16, Priority::Low));
    h.run_until(61_000);
    let high = h.submit(wf("high", &[16], &["in"]));
    h.run_until(120_000);
    assert_eq!(h.state(high), JobState::Placed);
    assert_eq!(h.s.job(high).unwrap().next_claim, Some(127_500));
    h.s.set_blacklisted(A, true);
    h.blacklisted.insert(A);
    h.run_until(130_000);
    assert_eq!(h.state(low), JobState::Running);
    assert_eq!(h.s.stats().preemptions, 0);
    assert_eq!(h.state(high), JobState::Queued);
    h.assert_clean();
}
