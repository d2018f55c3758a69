//! Runs the shipped DAS-2 scenario through the engine and checks what every run must satisfy.

use std::path::PathBuf;

use koalesce_core::model::PolicyKind;
use koalesce_core::state::JobState;
use koalesce_sim::engine::{self, SimResult};
use koalesce_sim::metrics;
use koalesce_sim::scenario::Scenario;

fn das2() -> Scenario {
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/das2-w30.toml"));
    Scenario::load(&path).unwrap()
}

fn run(s: &Scenario, seed: u64) -> SimResult {
    engine::run(s, seed, &mut |_| {}).unwrap()
}

#[test]
fn das2_w30_completes_every_job() {
    let s = das2();
    let r = run(&s, 1);
    let rep = metrics::report(&r);
    println!("{rep}");
    assert_eq!(r.jobs.len(), 200);
    assert!(r.jobs.iter().all(|j| j.state == JobState::Succeeded), "{rep}");
    assert!(!r.horizon_reached);
    // Background held in its band, plus a visible grid load.
    assert!((25.0..45.0).contains(&rep.util_background), "{rep}");
    assert!(rep.util_grid > 10.0, "{rep}");
    // Timeline order of every job: submit ≤ JPT ≤ JCT ≤ start ≤ end.
    for j in &r.jobs {
        let (p, c, st, e) = (j.placed.unwrap(), j.claimed.unwrap(), j.start.unwrap(), j.end.unwrap());
        assert!(j.submit <= p && p <= c && c <= st && st <= e, "{j:?}");
    }
}

#[test]
fn same_seed_same_bytes_other_seed_differs() {
    let s = das2();
    let csv = |seed| {
        let r = run(&s, seed);
        let mut a = Vec::new();
        metrics::write_jobs_csv(&mut a, &r).unwrap();
        metrics::write_utilization_csv(&mut a, &r).unwrap();
        a.extend(metrics::utilization_svg(&r).into_bytes());
        a
    };
    let first = csv(7);
    assert_eq!(first, csv(7));
    assert_ne!(first, csv(8));
}

#[test]
fn cf_moves_less_data_than_wf() {
    let mut s = das2();
    let cf = metrics::report(&run(&s, 3));
    s.scheduler.default_policy = PolicyKind::Wf;
    let wf = metrics::report(&run(&s, 3));
    assert!(
        cf.transferred_gb < wf.transferred_gb,
        "CF {} GB vs WF {} GB",
        cf.transferred_gb,
        wf.transferred_gb
    );
    assert!(cf.ftt_s.unwrap().mean < wf.ftt_s.unwrap().mean);
}

#[test]
fn an_swf_trace_can_be_a_sites_background_load() {
    let traces = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces/KTH-SP2-1996-2.1-cln.swf.gz");
    let text = format!(
        r#"
name = "trace-background"
[[sites]]
name = "kth"
processors = 100
background_trace = {{ path = "{traces}", skip_s = 86400 }}
[[sites]]
name = "other"
processors = 64
[workload]
kind = "jobs"
jobs = [{{ submit_s = 600, components = [16, 16], runtime_s = 300 }}, {{ submit_s = 30000, components = [32], runtime_s = 60 }}]
"#
    );
    let s = Scenario::parse(&text, std::path::Path::new("trace.toml")).unwrap();
    let r = koalesce_sim::engine::Simulation::new(&s, 1)
        .unwrap()
        .check_invariants(true)
        .run(&mut |_| {});
    assert!(r.invariant_violations.is_empty(), "{:?}", r.invariant_violations);
    assert!(r.jobs.iter().all(|j| j.state == JobState::Succeeded));
    let rep = metrics::report(&r);
    assert!(rep.util_background > 1.0, "the trace put no load on the site: {rep}");
}

#[test]
fn a_missing_background_trace_names_the_site_and_the_file() {
    let text = r#"
name = "t"
[[sites]]
name = "kth"
processors = 100
background_trace = { path = "no/such.swf" }
[workload]
kind = "jobs"
jobs = [{ submit_s = 0, components = [4], runtime_s = 10 }]
"#;
    let s = Scenario::parse(text, std::path::Path::new("t.toml")).unwrap();
    let err = koalesce_sim::engine::Simulation::new(&s, 1).err().expect("must fail");
    // The message and its causes, as the CLI prints them (each cause once).
    let mut e = err.to_string();
    let mut cause = std::error::Error::source(&err);
    while let Some(c) = cause {
        e.push_str(&format!(": {c}"));
        cause = c.source();
    }
    assert!(e.contains("kth") && e.contains("no/such.swf"), "{e}");
    assert_eq!(e.matches("No such file").count(), 1, "{e}");
}
