//! Shortened runs of KOALA's experiments (half the jobs, four seeds) checked against the
//! qualitative orderings the seeds report (000 §5, 003 §5.1, §5.2, §6.2). The full runs and the
//! quantitative comparison are `koalesce experiment koala` and docs/experiments/koala.md.

use std::sync::OnceLock;

use koalesce_sim::experiments::koala::{self, Exp, Options, Outcome};
use koalesce_sim::experiments::measure::{Agg, RunMetrics};

/// One shared outcome: every experiment except the calibration and sensitivity studies, half of
/// the jobs, seeds 1–4 (a few seconds in a debug build).
fn outcome() -> &'static Outcome {
    static O: OnceLock<Outcome> = OnceLock::new();
    O.get_or_init(|| {
        let opts = Options {
            seeds: vec![1, 2, 3, 4],
            scale: 0.5,
        };
        koala::run(
            &[Exp::Stable, Exp::HighBackground, Exp::Spread, Exp::Unreliable, Exp::Runners],
            &opts,
            &|_, _, _| {},
        )
    })
}

fn runs(key: &str) -> &'static [RunMetrics] {
    outcome().runs(key).unwrap_or_else(|| panic!("no runs for {key}"))
}

fn mean(key: &str, f: impl Fn(&RunMetrics) -> f64) -> f64 {
    Agg::over(runs(key), f).mean
}

#[test]
fn w30_cf_with_replication_has_the_shortest_file_transfers() {
    // 003 §5.1.5: CF's FTT is below WF's with and without replication, and replication lowers
    // CF's FTT; CF with replication performs best (lowest total waiting time).
    let ftt = |k| mean(k, |m| m.all.ftt_s);
    assert!(
        ftt("w30-cf-r3") < ftt("w30-wf-r3"),
        "CF {} vs WF {}",
        ftt("w30-cf-r3"),
        ftt("w30-wf-r3")
    );
    assert!(
        ftt("w30-cf-r1") < ftt("w30-wf-r1"),
        "CF {} vs WF {}",
        ftt("w30-cf-r1"),
        ftt("w30-wf-r1")
    );
    assert!(ftt("w30-cf-r3") < ftt("w30-cf-r1"));
    let twt = |k| mean(k, |m| m.all.twt_s);
    for other in ["w30-cf-r1", "w30-wf-r1", "w30-wf-r3"] {
        assert!(
            twt("w30-cf-r3") < twt(other),
            "TWT CF+replication {} vs {other} {}",
            twt("w30-cf-r3"),
            twt(other)
        );
    }
}

#[test]
fn w30_is_stable_with_claiming_at_the_first_try() {
    // 003 §5.1.5: W30 finishes shortly after the last arrival, claiming tries around 1, the
    // grid load is about 30%.
    for k in ["w30-cf-r3", "w30-wf-r3"] {
        for m in runs(k) {
            assert_eq!(m.unfinished + m.failed, 0, "{k} seed {}", m.seed);
            assert!(
                m.all.claiming_tries < 1.3,
                "{k} seed {}: {} claiming tries",
                m.seed,
                m.all.claiming_tries
            );
            assert!(
                m.drain_s < 900.0,
                "{k} seed {}: drained {} s after the last arrival",
                m.seed,
                m.drain_s
            );
        }
        let grid = mean(k, |m| m.util.grid);
        assert!((20.0..40.0).contains(&grid), "{k}: grid load {grid}%");
    }
}

#[test]
fn w50_saturates_where_w30_does_not() {
    // 003 §5.1.6: with W50 the placement queue grows (up to 30 on the DAS-2, at most 10 with
    // W30) and the total utilization is higher.
    for (a, b) in [("w30-cf-r1", "w50-cf-r1"), ("w30-wf-r1", "w50-wf-r1"), ("w30-cf-r3", "w50-cf-r3")] {
        let (qa, qb) = (mean(a, |m| m.max_queue as f64), mean(b, |m| m.max_queue as f64));
        assert!(qa < qb, "max queue {a} {qa} vs {b} {qb}");
        let (ua, ub) = (mean(a, |m| m.util.total()), mean(b, |m| m.util.total()));
        assert!(ua < ub, "total utilization {a} {ua} vs {b} {ub}");
    }
    // Placement time grows with the number and size of components (003 §5.1.5–5.1.6).
    let shape = |k: &str, s: &str| Agg::group(runs(k), |m| &m.by_shape, s, |g| g.placement_s).mean;
    assert!(shape("w50-wf-r1", "1x8") < shape("w50-wf-r1", "4x16"));
}

#[test]
fn a_higher_background_leaves_less_room_for_grid_jobs() {
    // 003 §5.1.8: with 50% and 60% background the KOALA load drops below 30%, the total rises,
    // claiming still mostly succeeds at the first try, and every job completes.
    let grid = |k| mean(k, |m| m.util.grid);
    assert!(
        grid("bg60-cf-r3") < grid("bg50-cf-r3"),
        "{} vs {}",
        grid("bg60-cf-r3"),
        grid("bg50-cf-r3")
    );
    assert!(grid("bg60-cf-r3") < grid("w30-cf-r3"));
    let bg = |k| mean(k, |m| m.util.background);
    assert!(bg("w30-cf-r3") < bg("bg50-cf-r3") && bg("bg50-cf-r3") < bg("bg60-cf-r3"));
    let total = |k| mean(k, |m| m.util.total());
    assert!(total("w30-cf-r3") < total("bg60-cf-r3"));
    let placement = |k| mean(k, |m| m.all.placement_s);
    assert!(placement("w30-cf-r3") < placement("bg60-cf-r3"));
    for k in ["bg50-cf-r3", "bg60-cf-r3"] {
        for m in runs(k) {
            assert_eq!(m.succeeded, m.jobs, "{k} seed {}", m.seed);
            assert!(m.all.claiming_tries <= 3.0, "{k}: {}", m.all.claiming_tries);
        }
    }
}

#[test]
fn job_spread_follows_the_policies() {
    // 003 §5.1.7: CF with replication puts at least half of a job's components on separate
    // clusters; without replication WF co-allocates more than CF; WF's spread does not depend
    // on replication much. (With replication the seed has CF above WF; the simulation does not:
    // CF packs a job's components on the first file site with room, WF levels idle counts.)
    assert!(mean("spread-cf-r3", |m| m.all.spread_pct) >= 50.0);
    assert!(mean("spread-cf-r1", |m| m.all.coallocated_pct) < mean("spread-wf-r1", |m| m.all.coallocated_pct));
    let (a, b) = (
        mean("spread-wf-r1", |m| m.all.spread_pct),
        mean("spread-wf-r3", |m| m.all.spread_pct),
    );
    assert!((a - b).abs() < 10.0, "WF spread {a} vs {b}");
    // More components at the same total size: more co-allocation.
    let co = |s: &str| Agg::group(runs("spread-cf-r3"), |m| &m.by_shape, s, |g| g.coallocated_pct).mean;
    assert!(co("2x8") < co("4x4"), "2x8 {} vs 4x4 {}", co("2x8"), co("4x4"));
}

#[test]
fn the_faulty_site_is_blacklisted_and_every_job_completes() {
    // 003 §5.2.3–5.2.5: Delft reported many consecutive soft errors and was taken out; all jobs
    // ran to completion in the end; high-priority jobs wait less than low-priority ones.
    for m in runs("unreliable") {
        let names: Vec<&str> = m.blacklisted.iter().map(|(_, s)| s.as_str()).collect();
        assert_eq!(names, ["delft"], "seed {}", m.seed);
        assert_eq!(m.succeeded, m.jobs, "seed {}: {} of {} done", m.seed, m.succeeded, m.jobs);
        assert!(m.soft_errors > 0 && m.all.failure_pct > 0.0);
        let placement = |prio: &str| {
            let (mut s, mut n) = (0.0, 0);
            for (k, g) in &m.by_shape_priority {
                if k.ends_with(prio) {
                    s += g.placement_s * g.jobs as f64;
                    n += g.jobs;
                }
            }
            s / n.max(1) as f64
        };
        assert!(
            placement(" high") < placement(" low"),
            "seed {}: high {} vs low {}",
            m.seed,
            placement(" high"),
            placement(" low")
        );
    }
}

#[test]
fn co_allocation_raises_utilization_and_helps_large_jobs() {
    // 003 §6.2.3: W_c reaches a higher utilization than W_nc; without co-allocation jobs of size
    // 48 wait much longer (003 §6.2.2, §6.3).
    let total = |k| mean(k, |m| m.util.total());
    assert!(total("wnc") <= total("wc"), "W_nc {} vs W_c {}", total("wnc"), total("wc"));
    let big = |k: &str| Agg::group(runs(k), |m| &m.by_size_priority, "48 high", |g| g.placement_s).mean;
    assert!(big("wc") < big("wnc"), "size-48 placement W_c {} vs W_nc {}", big("wc"), big("wnc"));
    assert!(mean("wc", |m| m.throughput_per_min) >= mean("wnc", |m| m.throughput_per_min));
}

#[test]
fn the_report_has_every_table_and_plot() {
    let o = outcome();
    let md = koala::markdown(o);
    for e in [Exp::Stable, Exp::HighBackground, Exp::Spread, Exp::Unreliable, Exp::Runners] {
        assert!(md.contains(e.title()), "{e:?}");
    }
    assert!(md.contains("| seed figure/section |"));
    let checks = koala::checks(o);
    assert!(checks.len() > 40, "{}", checks.len());
    assert!(md.contains("util-w30-cf-r3.svg") && md.contains("times-w30-r3.svg") && md.contains("spread.svg"));
}

#[test]
fn the_shipped_das2_scenario_is_the_w30_cf_replicated_configuration() {
    // scenarios/das2-w30.toml and the experiment's "W30, CF, 3 replicas" describe the same run.
    let path = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/das2-w30.toml"));
    let shipped = koalesce_sim::scenario::Scenario::load(&path).unwrap();
    let cfg = koala::configs(Exp::Stable, &Options::full(1))
        .into_iter()
        .find(|c| c.key == "w30-cf-r3")
        .unwrap();
    let run = |s: &koalesce_sim::scenario::Scenario| RunMetrics::of(&koalesce_sim::engine::run(s, 1, &mut |_| {}).unwrap());
    let (a, b) = (run(&shipped), run(&cfg.scenario));
    assert_eq!(
        (a.util, a.max_queue, a.all.ftt_s, a.end_s),
        (b.util, b.max_queue, b.all.ftt_s, b.end_s)
    );
}

#[test]
fn local_replicas_cost_a_copy_so_every_policy_moves_data() {
    // The calibrated transfer model: replicas live on the clusters' file servers, so CF with
    // replication moves a file for (nearly) every job, and the PGT of the four W30
    // configurations stays within a factor 1.6 of each other (003 §5.1.5: 6–9% for all four).
    // With free local replicas CF with replication moved a file for about 13% of the jobs.
    let moving = mean("w30-cf-r3", |m| m.all.transfer_pct);
    assert!(moving > 90.0, "CF, 3 replicas: {moving}% of jobs move a file");
    let pgt: Vec<f64> = ["w30-cf-r1", "w30-cf-r3", "w30-wf-r1", "w30-wf-r3"]
        .iter()
        .map(|k| mean(k, |m| m.util.pgt))
        .collect();
    let (lo, hi) = (
        pgt.iter().copied().fold(f64::MAX, f64::min),
        pgt.iter().copied().fold(0.0, f64::max),
    );
    assert!(lo > 0.0 && hi / lo < 1.6, "W30 PGT {pgt:?}");
    // Transfers end about when estimated: PGT ≈ 3 × PWT (claiming at 0.75·FTT).
    for k in ["w30-cf-r3", "w30-wf-r1"] {
        let r = mean(k, |m| m.util.pgt / m.util.pwt.max(1e-9));
        assert!((2.3..4.0).contains(&r), "{k}: PGT/PWT {r}");
    }
}

#[test]
fn returning_a_job_with_a_lower_l_is_what_moves_time_from_pgt_to_pwt() {
    // 003 §5.1.8 says extra claiming tries shift time from PWT to PGT. Under 003's rule a job
    // whose claiming reaches its JST goes back to the queue with L lowered by 0.25 (claimed at
    // 0.5·FTT next time), which moves time the other way; under 000's rule the JST is pushed
    // and L stays. With 000's rule the PGT share of PGT + PWT is higher.
    let share = |k| mean(k, |m| m.util.pgt / (m.util.pgt + m.util.pwt).max(1e-9));
    assert!(
        share("pdca-bg60-cf-r3") > share("bg60-cf-r3") + 0.05,
        "000's rule {} vs 003's {}",
        share("pdca-bg60-cf-r3"),
        share("bg60-cf-r3")
    );
    assert!(mean("pdca-bg60-cf-r3", |m| m.all.claiming_tries) > mean("bg60-cf-r3", |m| m.all.claiming_tries));
}

#[test]
fn two_clusters_can_run_size_48_jobs_in_the_runner_experiments() {
    // 003 §6.2: "only two clusters being able to run jobs of size 48": W_nc's 48-processor jobs
    // run on VU and on Delft (background held at 10–20% there).
    let sites: std::collections::BTreeSet<String> = ["wnc"]
        .iter()
        .flat_map(|k| {
            let o = outcome();
            let cfg = koala::configs(Exp::Runners, &o.options).into_iter().find(|c| c.key == *k).unwrap();
            let r = koalesce_sim::engine::run(&cfg.scenario, 1, &mut |_| {}).unwrap();
            r.jobs
                .into_iter()
                .filter(|j| j.size == 48)
                .flat_map(|j| j.sites)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(sites.into_iter().collect::<Vec<_>>(), ["delft", "vu"]);
}
