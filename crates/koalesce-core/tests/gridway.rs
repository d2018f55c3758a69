//! GridWay in the scheduling core: REQUIREMENTS and RANK in placement tries under every policy,
//! the `gridway` policy (004 Eq. 1), the decisions of 004 Table 3, banning, GridWay's job
//! priority queueing, usage history, fixed site priorities, the GW_* environment and the
//! catalogue answers of the data functions.

mod common;

use common::*;
use koalesce_core::config::ScanInterval;
use koalesce_core::expr::JobExpr;
use koalesce_core::gridway::Queueing;
use koalesce_core::model::{FileEntry, NetworkForecast, PolicyKind, ReplicaCatalogue, Site, SiteAttributes};
use koalesce_core::{Action, JobId, JobSpec, JobState, Priority, Scheduler, SchedulerConfig, SiteId};
use proptest::prelude::*;

const A: SiteId = SiteId(0);
const B: SiteId = SiteId(1);
const C: SiteId = SiteId(2);

fn gsite(name: &str, processors: u32, mhz: u32) -> Site {
    Site {
        attributes: SiteAttributes {
            cpu_mhz: mhz,
            ..Default::default()
        },
        ..site(name, processors)
    }
}

fn job(name: &str, sizes: &[u32], req: Option<&str>, rank: Option<&str>, policy: Option<PolicyKind>) -> JobSpec {
    JobSpec {
        requirements: req.map(|r| JobExpr::new(r).unwrap()),
        rank: rank.map(|r| JobExpr::new(r).unwrap()),
        policy,
        ..JobSpec::simple(name, sizes, &[], 60_000)
    }
}

fn immediate() -> SchedulerConfig {
    SchedulerConfig {
        place_on_submit: true,
        claim_fraction: 0.0,
        ..SchedulerConfig::default()
    }
}

fn sched(config: SchedulerConfig, sites: Vec<Site>, cat: ReplicaCatalogue) -> Scheduler {
    let n = sites.len();
    Scheduler::new(config, sites, NetworkForecast::uniform(n, 8e6, 0), cat)
}

fn placed_at(s: &Scheduler, id: JobId) -> Vec<SiteId> {
    sites_of(s, id)
}

#[test]
fn requirements_restrict_every_policy() {
    let sites = || vec![gsite("a", 16, 2800), gsite("b", 8, 2800), gsite("c", 4, 1001)];
    for policy in [PolicyKind::Wf, PolicyKind::Cf, PolicyKind::Cm, PolicyKind::Gridway] {
        let mut s = sched(immediate(), sites(), ReplicaCatalogue::new());
        // Without requirements every policy takes a (most idle, lowest id).
        let free = s.submit(0, job("free", &[2], None, None, Some(policy))).unwrap();
        assert_eq!(placed_at(&s, free), [A], "{policy}");
        let j = s
            .submit(0, job("bc", &[2], Some("HOSTNAME = \"b\" | HOSTNAME = \"c\""), None, Some(policy)))
            .unwrap();
        assert_eq!(placed_at(&s, j), [B], "{policy}");
        let slow = s.submit(0, job("slow", &[2], Some("CPU_MHZ < 2000"), None, Some(policy))).unwrap();
        assert_eq!(placed_at(&s, slow), [C], "{policy}");
        // Nothing qualifies: the job waits.
        let none = s
            .submit(0, job("none", &[1], Some("ARCH = \"sparc\""), None, Some(policy)))
            .unwrap();
        assert_eq!(state(&s, none), JobState::Queued, "{policy}");
    }
}

#[test]
fn requirements_restrict_the_brokers_ranking_too() {
    for policy in [PolicyKind::Ttd, PolicyKind::Tts] {
        // a is twice as fast: the broker's own ranking prefers it.
        let fast = Site {
            speed: 2.0,
            ..gsite("a", 16, 2800)
        };
        let mut s = sched(immediate(), vec![fast, gsite("b", 8, 2800)], ReplicaCatalogue::new());
        let free = s.submit(0, job("free", &[2], None, None, Some(policy))).unwrap();
        assert_eq!(placed_at(&s, free), [A], "{policy}");
        let j = s
            .submit(0, job("b-only", &[2], Some("HOSTNAME = \"b\""), None, Some(policy)))
            .unwrap();
        assert_eq!(placed_at(&s, j), [B], "{policy}");
    }
}

#[test]
fn a_fixed_component_at_a_site_failing_the_requirements_is_not_placed() {
    let mut s = sched(immediate(), vec![gsite("a", 8, 2800), gsite("b", 8, 2800)], ReplicaCatalogue::new());
    let mut spec = job("fixed", &[2, 2], Some("HOSTNAME = \"b\""), None, Some(PolicyKind::Wf));
    spec.components[0].fixed_site = Some(A);
    let j = s.submit(0, spec).unwrap();
    assert_eq!(state(&s, j), JobState::Queued);
    s.handle_timeout(s.poll_timeout().unwrap());
    assert_eq!(state(&s, j), JobState::Queued);
    let mut ok = job("fixed-b", &[2, 2], Some("HOSTNAME = \"b\""), None, Some(PolicyKind::Wf));
    ok.components[0].fixed_site = Some(B);
    let k = s.submit(0, ok).unwrap();
    assert_eq!(placed_at(&s, k), [B, B]);
}

#[test]
fn a_rank_without_a_policy_is_placed_by_gridway_at_the_highest_rank() {
    let mut s = sched(
        immediate(),
        vec![gsite("a", 32, 1000), gsite("b", 8, 3000)],
        ReplicaCatalogue::new(),
    );
    let j = s.submit(0, job("fast", &[2], None, Some("CPU_MHZ"), None)).unwrap();
    assert_eq!(s.job(j).unwrap().policy, PolicyKind::Gridway);
    assert_eq!(placed_at(&s, j), [B]);
    // Requirements alone keep the server's default policy (CF here; no files: where WF goes).
    let k = s.submit(0, job("req", &[2], Some("CPU_MHZ > 0"), None, None)).unwrap();
    assert_eq!(s.job(k).unwrap().policy, PolicyKind::Cf);
    assert_eq!(placed_at(&s, k), [A]);
}

#[test]
fn a_rank_breaks_the_ties_of_koala_policies() {
    // WF and CM: a and b have 8 idle each; without a rank the lowest id wins, with one the rank.
    for policy in [PolicyKind::Wf, PolicyKind::Cm] {
        let mut s = sched(immediate(), vec![gsite("a", 8, 1000), gsite("b", 8, 3000)], ReplicaCatalogue::new());
        let plain = s.submit(0, job("plain", &[1], None, None, Some(policy))).unwrap();
        assert_eq!(placed_at(&s, plain), [A], "{policy}");
        s.cancel(0, plain);
        let ranked = s.submit(0, job("ranked", &[1], None, Some("CPU_MHZ"), Some(policy))).unwrap();
        assert_eq!(placed_at(&s, ranked), [B], "{policy}");
        // The rank only breaks ties: with more idle processors at a, WF still takes a.
        let bigger = s.submit(0, job("bigger", &[1], None, Some("CPU_MHZ"), Some(policy))).unwrap();
        assert_eq!(placed_at(&s, bigger), [A], "{policy}");
    }
    // CF: both a and b hold the file; alphabetically a, with the rank b.
    let mut cat = ReplicaCatalogue::new();
    cat.insert("in", MB, [A, B]);
    let mut s = sched(
        immediate(),
        vec![gsite("a", 8, 1000), gsite("b", 8, 3000), gsite("c", 8, 9000)],
        cat,
    );
    let cf = |name: &str, rank: Option<&str>| JobSpec {
        rank: rank.map(|r| JobExpr::new(r).unwrap()),
        policy: Some(PolicyKind::Cf),
        ..JobSpec::simple(name, &[2], &["in"], 60_000)
    };
    let plain = s.submit(0, cf("plain", None)).unwrap();
    assert_eq!(placed_at(&s, plain), [A]);
    s.cancel(0, plain);
    // c is the fastest but holds no replica: CF still goes close to the file.
    let ranked = s.submit(0, cf("ranked", Some("CPU_MHZ"))).unwrap();
    assert_eq!(placed_at(&s, ranked), [B]);
    // CF's pairs: the file only at f (full); a and b are equally far: the rank picks b.
    let mut cat = ReplicaCatalogue::new();
    cat.insert("in", MB, [C]);
    let mut s = sched(
        immediate(),
        vec![gsite("a", 8, 1000), gsite("b", 8, 3000), gsite("f", 1, 9000)],
        cat,
    );
    s.update_site_idle(C, 0);
    let plain = s.submit(0, cf("plain", None)).unwrap();
    assert_eq!(placed_at(&s, plain), [A]);
    s.cancel(0, plain);
    let ranked = s.submit(0, cf("ranked", Some("CPU_MHZ"))).unwrap();
    assert_eq!(placed_at(&s, ranked), [B]);
}

/// Seed 004 §3.4.2: sites A and B at 2800 MHz, C at 1001 MHz; ten files of 3–405 MB at C. The
/// free counts are 20 at A and B and 200 at C (C published 200 free nodes when (c)'s 225 MB job
/// was matched: its Table 3 rank 2867). Each job needs one processor and lowers its site's
/// QUEUE_FREENODECOUNT for the next one.
fn table3(rank: &str, req: Option<&str>) -> (Scheduler, Vec<JobId>) {
    let mut cat = ReplicaCatalogue::new();
    let sizes = [3u64, 45, 90, 135, 180, 225, 270, 315, 360, 405];
    for mb in sizes {
        cat.insert(format!("file{mb}"), mb * 1_000_000, [C]);
    }
    let mut s = sched(
        immediate(),
        vec![gsite("A", 20, 2800), gsite("B", 20, 2800), gsite("C", 200, 1001)],
        cat,
    );
    let ids = sizes
        .iter()
        .map(|mb| {
            let f = format!("file{mb}");
            let spec = JobSpec {
                requirements: req.map(|r| JobExpr::new(&r.replace("myfile", &f)).unwrap()),
                rank: Some(JobExpr::new(&rank.replace("myfile", &f)).unwrap()),
                ..JobSpec::simple(format!("j{mb}"), &[1], &[], 500_000)
            };
            s.submit(0, spec).unwrap()
        })
        .collect();
    (s, ids)
}

#[test]
fn the_four_algorithms_of_004_table_3_decide_as_the_seed() {
    let base = "CPU_MHZ + QUEUE_FREENODECOUNT";
    let at_c = |(s, ids): (Scheduler, Vec<JobId>)| -> Vec<bool> { ids.iter().map(|&j| placed_at(&s, j) == [C]).collect() };
    // (a) data ignored: every job to A or B, alternating as their free counts drop.
    let (s, ids) = table3(base, None);
    let a: Vec<SiteId> = ids.iter().map(|&j| placed_at(&s, j)[0]).collect();
    assert_eq!(a, [A, B, A, B, A, B, A, B, A, B]);
    // (b) jobs to data: CLOSE_DATA keeps every job at C.
    assert_eq!(at_c(table3(base, Some("CLOSE_DATA(\"myfile\")"))), [true; 10]);
    // (c) balanced (/135): the five small files move, 225 MB and up stay at C.
    let c = at_c(table3(&format!("{base} + SIZE_CLOSE_DATA(\"myfile\") / 135"), None));
    assert_eq!(c, [false, false, false, false, false, true, true, true, true, true]);
    // (d) transfer-penalized (/68): only 3, 45 and 90 MB move.
    let d = at_c(table3(&format!("{base} + SIZE_CLOSE_DATA(\"myfile\") / 68"), None));
    assert_eq!(d, [false, false, false, true, true, true, true, true, true, true]);
}

#[test]
fn load_dependent_requirements_see_the_placements_of_the_same_scan() {
    let mut s = sched(
        SchedulerConfig {
            scan_interval: ScanInterval::Fixed { interval_ms: 1000 },
            ..SchedulerConfig::default()
        },
        vec![gsite("a", 8, 2800)],
        ReplicaCatalogue::new(),
    );
    let ids: Vec<JobId> = (0..3)
        .map(|i| {
            s.submit(0, job(&format!("j{i}"), &[2], Some("QUEUE_FREENODECOUNT >= 6"), None, None))
                .unwrap()
        })
        .collect();
    s.handle_timeout(1000);
    let states: Vec<JobState> = ids.iter().map(|&j| state(&s, j)).collect();
    // 8 free: the first fits (8 ≥ 6), then 6 ≥ 6, then 4 < 6.
    assert_eq!(states[2], JobState::Queued);
    assert!(states[..2].iter().all(|&st| st != JobState::Queued), "{states:?}");
}

#[test]
fn the_gw_environment_lists_the_close_se_and_the_remote_files() {
    let mut cat = ReplicaCatalogue::new();
    cat.insert("x", MB, [A]);
    cat.insert("y", 2 * MB, [B]);
    let mut s = sched(immediate(), vec![gsite("vu", 8, 3000), gsite("uva", 8, 1000)], cat);
    let j = s
        .submit(
            0,
            job(
                "env",
                &[1, 1],
                Some("CLOSE_DATA(\"x\")"),
                Some("HAS_CLOSE_DATA(\"x\") + SIZE_CLOSE_DATA(\"y\") + HAS_CLOSE_DATA(\"gone\")"),
                None,
            ),
        )
        .unwrap();
    assert_eq!(placed_at(&s, j), [A, A]);
    let env = s.gridway_environment(j, 1).unwrap();
    let want = [("GW_CLOSE_SE", "vu"), ("GW_REMOTE_FILES_0", "y"), ("GW_REMOTE_FILES_1", "gone")];
    assert_eq!(env, want.map(|(k, v)| (k.to_string(), v.to_string())));
    // A replica of y arrives at vu: the environment follows the catalogue.
    s.catalogue_mut().add_replica("y", A);
    let env = s.gridway_environment(j, 0).unwrap();
    assert_eq!(env.len(), 2);
    assert_eq!(env[1], ("GW_REMOTE_FILES_0".to_string(), "gone".to_string()));
    // A job without expressions gets none; an unplaced component neither.
    let plain = s.submit(0, job("plain", &[1], None, None, Some(PolicyKind::Wf))).unwrap();
    assert_eq!(s.gridway_environment(plain, 0), None);
    assert_eq!(s.gridway_environment(j, 7), None);
}

#[test]
fn data_functions_read_catalogue_answers_given_later() {
    let mut s = sched(immediate(), vec![gsite("a", 8, 3000), gsite("b", 8, 1000)], ReplicaCatalogue::new());
    let j = s
        .submit(0, job("late", &[1], Some("CLOSE_DATA(\"late\")"), Some("CPU_MHZ"), None))
        .unwrap();
    assert_eq!(state(&s, j), JobState::Queued);
    assert_eq!(s.expression_files().into_iter().collect::<Vec<_>>(), ["late"]);
    // The daemon's catalogue cache answers: a replica at b.
    s.set_catalogue_entry(
        "late",
        Some(FileEntry {
            size_bytes: MB,
            replicas: [B].into_iter().collect(),
        }),
    );
    s.handle_timeout(s.poll_timeout().unwrap());
    assert_eq!(placed_at(&s, j), [B]);
    // The answers are the data functions' own: the placement catalogue is untouched, and a
    // file it gains is not seen by the data functions until the cache answers for it.
    assert!(s.catalogue().get("late").is_none());
    assert!(s.data_catalogue().get("late").is_some());
    s.catalogue_mut().insert("fresh", MB, [A]);
    let k = s.submit(1, job("fresh", &[1], Some("CLOSE_DATA(\"fresh\")"), None, None)).unwrap();
    s.handle_timeout(s.poll_timeout().unwrap());
    assert_eq!(state(&s, k), JobState::Queued);
    s.set_catalogue_entry(
        "fresh",
        Some(FileEntry {
            size_bytes: MB,
            replicas: [A].into_iter().collect(),
        }),
    );
    s.handle_timeout(s.poll_timeout().unwrap());
    assert_eq!(placed_at(&s, k), [A]);
    s.set_catalogue_entry("late", None);
    assert!(s.data_catalogue().get("late").is_none());
}

fn gridway_harness(sites: Vec<Site>, config: SchedulerConfig) -> Harness {
    let n = sites.len();
    Harness::new(config, sites, NetworkForecast::uniform(n, 8e6, 0), ReplicaCatalogue::new())
}

fn every_minute() -> SchedulerConfig {
    SchedulerConfig {
        scan_interval: ScanInterval::Fixed { interval_ms: 60_000 },
        claim_fraction: 0.0,
        blacklist_threshold: 1000,
        ..SchedulerConfig::default()
    }
}

fn claims_at(h: &Harness) -> Vec<(u64, JobId, SiteId)> {
    h.log
        .iter()
        .filter_map(|(t, a)| match a {
            Action::Claim { job, site, .. } => Some((*t, *job, *site)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_failed_site_is_banned_then_used_again() {
    let mut h = gridway_harness(vec![gsite("a", 4, 3000), gsite("b", 4, 1000)], every_minute());
    h.component_soft_errors[0] = 1;
    // Each job runs 60 s. The first fails at a at t = 120 s (placed at the 60 s scan).
    let first = job("first", &[1], None, Some("CPU_MHZ"), None);
    h.at(0, Script::Submit(Box::new(first)));
    h.run_until(120_000);
    assert!(h.s.is_banned(A, 120_000));
    assert_eq!(h.s.ban(A).until, 120_000 + 360_000, "a tenth of FR_MAX_BANNED");
    // Requeued: placed again at the 180 s scan, at b (a is banned).
    h.run_until(180_000);
    assert_eq!(h.sites_of(h.submitted[0]), [B]);
    // During the ban new jobs go to b too; after it a takes them again.
    h.at(200_000, Script::Submit(Box::new(job("during", &[1], None, Some("CPU_MHZ"), None))));
    h.at(500_000, Script::Submit(Box::new(job("after", &[1], None, Some("CPU_MHZ"), None))));
    h.run_until(2_000_000);
    h.assert_clean();
    let claims = claims_at(&h);
    let site_of = |j: JobId| claims.iter().rev().find(|c| c.1 == j).map(|c| c.2).unwrap();
    assert_eq!(site_of(h.submitted[1]), B);
    assert_eq!(site_of(h.submitted[2]), A);
    assert!(h.all_terminal());
    // The success at a cleared the streak.
    assert_eq!(h.s.ban(A).streak_start, None);
    assert!(claims.iter().all(|&(t, _, s)| s != A || !(120_000..480_000).contains(&t)));
}

#[test]
fn usage_history_prefers_the_site_where_jobs_ended_sooner() {
    for (fast, slow) in [(A, B), (B, A)] {
        let mut h = gridway_harness(vec![gsite("a", 4, 2000), gsite("b", 4, 2000)], every_minute());
        let fixed = |name: &str, site: SiteId| {
            let mut j = job(name, &[1], None, None, Some(PolicyKind::Wf));
            j.components[0].fixed_site = Some(site);
            j
        };
        let f = h.submit(fixed("fast", fast));
        let s = h.submit(fixed("slow", slow));
        h.runtime.insert(f, 60_000);
        h.runtime.insert(s, 600_000);
        h.run_until(1_000_000);
        assert!(h.all_terminal());
        assert_eq!(h.s.usage_history(fast).last_ms, Some(60_000));
        let g = h.submit(job("gridway", &[1], None, None, Some(PolicyKind::Gridway)));
        h.run_until(1_100_000);
        assert_eq!(h.sites_of(g), [fast]);
        h.assert_clean();
    }
}

#[test]
fn fixed_site_priorities_order_and_exclude_sites() {
    let mut config = immediate();
    let rp = &mut config.gridway.resource_priority;
    rp.site_priority.insert("a".into(), 0); // never used
    rp.site_priority.insert("c".into(), 50);
    let mut s = sched(
        config,
        vec![gsite("a", 64, 3000), gsite("b", 8, 1000), gsite("c", 8, 1000)],
        ReplicaCatalogue::new(),
    );
    let j = s.submit(0, job("g", &[1], None, None, Some(PolicyKind::Gridway))).unwrap();
    assert_eq!(placed_at(&s, j), [C]);
    // Even a rank favouring a cannot use it.
    let k = s
        .submit(0, job("g2", &[1], Some("HOSTNAME = \"a\""), None, Some(PolicyKind::Gridway)))
        .unwrap();
    assert_eq!(state(&s, k), JobState::Queued);
    // KOALA's policies are not bound by GridWay's fixed priorities.
    let w = s.submit(0, job("wf", &[1], None, None, Some(PolicyKind::Wf))).unwrap();
    assert_eq!(placed_at(&s, w), [A]);
}

#[test]
fn gridway_queueing_dispatches_by_job_priority() {
    let config = SchedulerConfig {
        queueing: Queueing::Gridway,
        scan_interval: ScanInterval::Fixed { interval_ms: 60_000 },
        ..SchedulerConfig::default()
    };
    // One processor: one job per scan.
    let mut s = sched(config, vec![gsite("a", 1, 2000)], ReplicaCatalogue::new());
    let plain = s.submit(0, job("plain", &[1], None, None, None)).unwrap();
    let low = s
        .submit(
            0,
            JobSpec {
                priority: Priority::Low,
                ..job("low", &[1], None, None, None)
            },
        )
        .unwrap();
    let deadline = s
        .submit(
            0,
            JobSpec {
                deadline_ms: Some(3_600_000),
                ..job("deadline", &[1], None, None, None)
            },
        )
        .unwrap();
    let urgent = s
        .submit(
            0,
            JobSpec {
                priority: Priority::SuperHigh,
                ..job("urgent", &[1], None, None, None)
            },
        )
        .unwrap();
    let order: Vec<JobId> = s.gridway_priorities(60_000).iter().map(|p| p.id).collect();
    assert_eq!(order, [urgent, deadline, plain, low]);
    s.handle_timeout(60_000);
    assert_ne!(state(&s, urgent), JobState::Queued);
    assert!([plain, low, deadline].iter().all(|&j| state(&s, j) == JobState::Queued));
    // KOALA's queueing would have scanned a queue; under GridWay's every queued job was tried.
    assert_eq!(s.job(low).unwrap().placement_tries, 1);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// Under any mix of policies, REQUIREMENTS and RANKs: no component is placed at a site where
    /// the job's requirements do not hold, and no site is over-allocated.
    #[test]
    fn requirements_always_hold(
        mhz in proptest::collection::vec(1000u32..4000, 2..5),
        procs in proptest::collection::vec(1u32..12, 4),
        jobs in proptest::collection::vec((0u8..4, 1000u32..4000, 1u32..4, 1usize..3, 0u64..600_000, any::<bool>()), 1..25),
    ) {
        let sites: Vec<Site> = mhz.iter().enumerate().map(|(i, &m)| gsite(&format!("s{i}"), procs[i % procs.len()].max(3), m)).collect();
        let mut h = gridway_harness(sites.clone(), every_minute());
        let mut min_mhz = Vec::new();
        for (i, &(p, limit, size, n, at, ranked)) in jobs.iter().enumerate() {
            let policy = [PolicyKind::Wf, PolicyKind::Cf, PolicyKind::Cm, PolicyKind::Gridway][p as usize];
            let req = format!("CPU_MHZ >= {limit}");
            let spec = job(&format!("j{i}"), &vec![size.min(3); n], Some(&req), ranked.then_some("CPU_MHZ + QUEUE_FREENODECOUNT"), Some(policy));
            min_mhz.push(limit);
            h.at(at, Script::Submit(Box::new(spec)));
        }
        h.run_until(3_000_000);
        h.assert_clean();
        for (_, job, site) in claims_at(&h) {
            let k: usize = h.s.job(job).unwrap().spec.name[1..].parse().unwrap();
            prop_assert!(sites[site.index()].attributes.cpu_mhz >= min_mhz[k], "job {} at {}", job, site);
        }
    }

    /// A banned site gets no component of a `gridway` job while banned.
    #[test]
    fn a_banned_site_gets_no_component_while_banned(
        errors in proptest::collection::vec(0u32..4, 3),
        arrivals in proptest::collection::vec((0u64..20, 1u64..4), 1..20),
    ) {
        let sites = vec![gsite("a", 2, 3000), gsite("b", 2, 2000), gsite("c", 2, 1000)];
        let mut h = gridway_harness(sites, every_minute());
        h.component_soft_errors = errors.clone();
        for (i, &(minute, runtime_min)) in arrivals.iter().enumerate() {
            h.at(minute * 60_000, Script::Submit(Box::new(job(&format!("j{i}"), &[1], None, Some("CPU_MHZ"), None))));
            h.runtime.insert(JobId(i as u64 + 1), runtime_min * 60_000);
        }
        // Every event happens on a minute (runtimes, arrivals and scans are whole minutes):
        // after each minute, the claims made in it must avoid the sites banned at its end.
        for minute in 0..400u64 {
            let t = minute * 60_000;
            let from = h.log.len();
            h.run_until(t);
            for (at, a) in &h.log[from..] {
                if let Action::Claim { site, job, .. } = a {
                    prop_assert_eq!(*at, t, "every event is on a minute");
                    prop_assert!(!h.s.is_banned(*site, t), "job {} claimed {} at {} while banned until {}", job, site, t, h.s.ban(*site).until);
                }
            }
        }
        h.assert_clean();
        prop_assert!(h.all_terminal());
    }
}

proptest! {
    /// The index of sites with room stays exact as processors are taken from the view.
    #[test]
    fn sites_with_room_lists_exactly_the_sites_with_room(
        avail in proptest::collection::vec(0u32..20, 1..30),
        takes in proptest::collection::vec((0usize..30, 0u32..20), 0..20),
        n in 1u32..20,
    ) {
        use koalesce_core::placement::Capacity;
        let mut c = Capacity::new(avail.clone());
        let _ = c.sites_with_room(1).count(); // build the index before the takes
        for (s, p) in takes {
            let s = SiteId((s % avail.len()) as u32);
            let p = p.min(c.available(s));
            c.take(s, p);
        }
        let mut got: Vec<SiteId> = c.sites_with_room(n).collect();
        got.sort();
        let want: Vec<SiteId> = c.sites().filter(|&s| c.available(s) >= n).collect();
        prop_assert_eq!(got, want);
    }
}
