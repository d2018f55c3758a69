//! Property tests of whole simulations on random small grids and workloads: no site is ever
//! over-allocated, every job ends in a terminal state, and a seed gives byte-identical output.

use std::path::Path;

use koalesce_sim::engine::Simulation;
use koalesce_sim::metrics;
use koalesce_sim::scenario::Scenario;
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Case {
    sites: Vec<(u32, bool)>,
    wan_mbps: u32,
    jobs: Vec<(u32, Vec<u32>, u32, bool, u8)>,
    band: Option<(u8, u8)>,
    soft_error: u8,
    policy: &'static str,
    threshold: f64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec((4u32..64, any::<bool>()), 1..5),
        prop::sample::select(vec![10u32, 100, 1000]),
        prop::collection::vec(
            (0u32..3600, prop::collection::vec(1u32..32, 1..5), 10u32..900, any::<bool>(), 0u8..4),
            1..25,
        ),
        prop::option::of((10u8..40, 0u8..20)),
        0u8..30,
        prop::sample::select(vec!["cf", "wf", "cm"]),
        prop::sample::select(vec![0.0, 0.5, 1.0]),
    )
        .prop_map(|(sites, wan_mbps, jobs, band, soft_error, policy, threshold)| Case {
            sites,
            wan_mbps,
            jobs,
            band,
            soft_error,
            policy,
            threshold,
        })
}

fn scenario_text(c: &Case) -> String {
    // Jobs are kept feasible next to the background band (at most 40% busy): a whole job fits
    // in half of the largest site.
    let largest = c.sites.iter().map(|s| s.0).max().unwrap();
    let half_site = (largest / 2).max(1);
    let half_grid = half_site;
    let mut t = String::from("name = \"prop\"\nhorizon_s = 172800\n");
    for (i, (procs, resv)) in c.sites.iter().enumerate() {
        t += &format!("[[sites]]\nname = \"s{i}\"\nprocessors = {procs}\nreservations = {resv}\n");
    }
    t += &format!("[network]\nwan_mbps = {}\n", c.wan_mbps);
    t += "[[files]]\nname = \"data\"\nsize_gb = 0.5\nreplicas = [\"s0\"]\n";
    t += "[workload]\nkind = \"jobs\"\njobs = [\n";
    for (submit, comps, runtime, with_file, prio) in &c.jobs {
        let mut total = 0;
        let comps: Vec<String> = comps
            .iter()
            .map(|p| (p % half_site).max(1))
            .take_while(|p| {
                total += p;
                total <= half_grid
            })
            .map(|p| p.to_string())
            .collect();
        let comps = if comps.is_empty() { vec!["1".to_string()] } else { comps };
        let prio = ["super-high", "high", "low", "super-low"][*prio as usize];
        let files = if *with_file { "[\"data\"]" } else { "[]" };
        t += &format!(
            "  {{ submit_s = {submit}, components = [{}], runtime_s = {runtime}, files = {files}, priority = \"{prio}\" }},\n",
            comps.join(", ")
        );
    }
    t += "]\n";
    if let Some((low, width)) = c.band {
        t += &format!(
            "[background]\nkind = \"band\"\nlow = {}\nhigh = {}\nmean_runtime_s = 300\n",
            low as f64 / 100.0,
            (low + width) as f64 / 100.0
        );
    }
    if c.soft_error > 0 {
        // Faults on a site other than the (first) largest: blacklisting it leaves a site that
        // every job fits next to the background. A lone site blacklisted makes every job
        // unplaceable, which is terminal too.
        let big = (0..c.sites.len()).find(|&i| c.sites[i].0 == largest).unwrap();
        let faulty = if c.sites.len() > 1 { (big + 1) % c.sites.len() } else { 0 };
        t += &format!(
            "[faults]\nsoft_error_probability = {{ s{faulty} = {} }}\nuntil_s = 7200\n",
            c.soft_error as f64 / 100.0
        );
    }
    t += &format!(
        "[scheduler]\ndefault_policy = \"{}\"\nclaim_threshold = {}\nscan_interval = {{ kind = \"fixed\", interval_ms = 30000 }}\nblacklist_threshold = 3\n",
        c.policy, c.threshold
    );
    t
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn simulations_keep_invariants_finish_and_repeat(c in case(), seed in 0u64..1000) {
        let text = scenario_text(&c);
        let scenario = Scenario::parse(&text, Path::new("prop.toml")).unwrap();
        let run = || Simulation::new(&scenario, seed).unwrap().check_invariants(true).run(&mut |_| {});
        let r = run();
        prop_assert!(r.invariant_violations.is_empty(), "{:?}\n{text}", &r.invariant_violations[..r.invariant_violations.len().min(5)]);
        prop_assert!(!r.horizon_reached, "horizon reached\n{text}");
        for j in &r.jobs {
            prop_assert!(j.state.is_terminal(), "job {} in {:?}\n{text}", j.id, j.state);
        }
        prop_assert_eq!(r.jobs.len(), c.jobs.len());
        let bytes = |r: &koalesce_sim::engine::SimResult| {
            let mut v = Vec::new();
            metrics::write_jobs_csv(&mut v, r).unwrap();
            metrics::write_utilization_csv(&mut v, r).unwrap();
            v
        };
        prop_assert_eq!(bytes(&r), bytes(&run()));
    }
}
