//! `koalesce experiment broker` on a small configuration: the same bytes for one and for
//! several threads, and the experiment's own cross-checks (an exhaustive search succeeds
//! exactly when a window exists; the seed's single path loses heterogeneous requests that have
//! a window, the mechanism of 001 Table II).

use koalesce_sim::experiments::broker::{self, report, Options};

fn small() -> Options {
    Options {
        seeds: vec![1, 2],
        runs: 80,
        scale: 0.1,
        tables: true,
        compare: true,
    }
}

fn outputs(threads: usize) -> (String, String, Vec<(String, String)>, broker::Outcome) {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    let o = pool.install(|| broker::run(&small(), &|_, _| {}));
    (report::markdown(&o), report::csv(&o), report::plots(&o), o)
}

#[test]
fn small_broker_experiment_is_deterministic_and_cross_checks() {
    let (md1, csv1, svg1, o) = outputs(1);
    let (md3, csv3, svg3, _) = outputs(3);
    assert_eq!(md1, md3, "report differs with the thread count");
    assert_eq!(csv1, csv3);
    assert_eq!(svg1, svg3);
    assert!(md1.contains("Table II (heterogeneous): seed vs koalesce"));

    let summary = |key: &str| report::summarize(o.tables.iter().find(|t| t.setup.key == key).unwrap());
    for key in ["hom-exh", "het-exh", "hom-free", "het-free"] {
        let s = summary(key);
        assert_eq!(s.runs, 160);
        assert_eq!(s.mismatches, 0, "{key}: success must equal the existence of a window");
    }
    // The seed's single path never succeeds without a window, and misses some that exist in the
    // heterogeneous test.
    let het = summary("het");
    let het_exh = summary("het-exh");
    assert!(o
        .tables
        .iter()
        .find(|t| t.setup.key == "het")
        .unwrap()
        .runs()
        .all(|r| !r.success || r.feasible == Some(true)));
    assert!(het.successes < het_exh.successes, "{} vs {}", het.successes, het_exh.successes);
    // Every comparison run finishes its jobs; reservations come with predictions that hold to
    // within seconds of the actual start.
    assert_eq!(o.compare.len(), 8);
    for c in &o.compare {
        for r in &c.runs {
            assert_eq!(r.succeeded, r.jobs, "{} seed {}", c.key, r.seed);
            if c.reservations {
                // The scheduler's model of the sites agrees with every LRM's answer.
                assert!(r.reservations_granted > 0);
                assert_eq!(r.reservations_refused, 0, "{} seed {}", c.key, r.seed);
                assert_eq!(r.predicted, r.succeeded);
                assert!(r.start_error_s < 60.0, "{}: {}", c.key, r.start_error_s);
            } else {
                assert_eq!(r.predicted, 0);
            }
        }
    }
}
