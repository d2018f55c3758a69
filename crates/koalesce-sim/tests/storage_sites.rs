//! Storage-only sites (a cluster's file server as a site without processors) and per-site
//! background bands: the two scenario features the calibrated KOALA experiments use.

use std::path::Path;

use koalesce_core::state::JobState;
use koalesce_sim::engine::{self, SimResult};
use koalesce_sim::scenario::Scenario;

const CLUSTERS: &str = r#"
name = "t"
[[sites]]
name = "a"
processors = 32
[[sites]]
name = "b"
processors = 32
[[sites]]
name = "a-fs"
processors = 0
storage_only = true
[[sites]]
name = "b-fs"
processors = 0
storage_only = true
[network]
lan_mbps = 10000
wan_mbps = 100
latency_ms = 5
links = [{ a = "a", b = "a-fs", mbps = 1000, latency_ms = 1 }, { a = "b", b = "b-fs", mbps = 1000, latency_ms = 1 }]
"#;

fn scenario(extra: &str) -> Result<Scenario, String> {
    Scenario::parse(&format!("{CLUSTERS}{extra}"), Path::new("t.toml")).map_err(|e| e.to_string())
}

fn run(s: &Scenario, seed: u64) -> SimResult {
    let r = engine::Simulation::new(s, seed).unwrap().check_invariants(true).run(&mut |_| {});
    assert!(r.invariant_violations.is_empty(), "{:?}", r.invariant_violations);
    r
}

#[test]
fn a_local_replica_is_copied_from_the_file_server_faster_than_a_remote_one() {
    // One 1 GB file on a's file server. CF puts the job next to it (a), and the copy takes
    // 8 s at 1000 Mbit/s (+1 ms latency) instead of 80 s over the 100 Mbit/s backbone.
    let s = scenario(
        r#"
[[files]]
name = "in"
size_gb = 1.0
replicas = ["a-fs"]
[workload]
kind = "jobs"
jobs = [{ submit_s = 0, components = [8], runtime_s = 10, files = ["in"] }]
[scheduler]
default_policy = "cf"
place_on_submit = true
"#,
    )
    .unwrap();
    let r = run(&s, 1);
    let j = &r.jobs[0];
    assert_eq!(j.state, JobState::Succeeded);
    assert_eq!(j.sites, ["a"]);
    assert!((8000..8100).contains(&j.ftt_ms), "FTT {} ms", j.ftt_ms);
    assert!(j.start.unwrap() >= 8000, "the job cannot start before its copy arrived");
    assert_eq!(r.transferred_bytes, 1_000_000_000);
}

#[test]
fn generated_files_live_only_on_storage_sites_and_nothing_runs_there() {
    let s = scenario(
        r#"
[workload]
kind = "generated"
preset = "w30"
jobs = 40
shapes = [[1, 8], [2, 8]]
replicas = 2
[background]
kind = "band"
low = 0.3
high = 0.4
organic_interarrival_s = 300
[scheduler]
default_policy = "wf"
place_on_submit = true
"#,
    )
    .unwrap();
    let r = run(&s, 3);
    assert!(r.jobs.iter().all(|j| j.state == JobState::Succeeded));
    for j in &r.jobs {
        assert!(j.sites.iter().all(|s| s == "a" || s == "b"), "{:?}", j.sites);
        // Every input lives on a file server, so every job moves a file.
        assert!(j.ftt_ms > 0, "{j:?}");
    }
    // No local (background) job and no grid component ever ran on a file server.
    for (i, name) in r.site_names.iter().enumerate() {
        if name.ends_with("-fs") {
            assert_eq!(r.site_processors[i], 0);
            let t = r.site_totals[i];
            assert_eq!((t.background, t.grid, t.pwt, t.pgt), (0, 0, 0, 0), "{name}");
        }
    }
    assert_eq!(r.total_processors, 64);
}

#[test]
fn a_site_band_overrides_the_scenario_band() {
    let s = scenario(
        r#"
[workload]
kind = "jobs"
jobs = [{ submit_s = 20000, components = [1], runtime_s = 1 }]
[background]
kind = "band"
low = 0.6
high = 0.7
"#,
    )
    .unwrap();
    let mut s2 = s.clone();
    s2.sites[0].background_band = Some((0.1, 0.2));
    s2.validate().unwrap();
    let r = run(&s2, 1);
    let load = |i: usize| 100.0 * r.site_totals[i].background as f64 / (r.site_processors[i] as f64 * r.end_ms as f64);
    assert!((8.0..25.0).contains(&load(0)), "site a (own band 10–20%): {:.1}%", load(0));
    assert!((55.0..75.0).contains(&load(1)), "site b (scenario band 60–70%): {:.1}%", load(1));
}

#[test]
fn bad_storage_and_band_settings_are_named() {
    let e = Scenario::parse(
        "name = \"t\"\n[[sites]]\nname = \"a\"\nprocessors = 4\nstorage_only = true\n[workload]\nkind = \"jobs\"\njobs = []\n",
        Path::new("t.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("sites[0].processors") && e.contains("storage-only"), "{e}");
    let e = Scenario::parse(
        "name = \"t\"\n[[sites]]\nname = \"a\"\nprocessors = 0\n[workload]\nkind = \"jobs\"\njobs = []\n",
        Path::new("t.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("sites[0].processors") && e.contains("positive"), "{e}");
    let e = Scenario::parse(
        "name = \"t\"\n[[sites]]\nname = \"a\"\nprocessors = 4\nbackground_band = [0.5, 0.2]\n[workload]\nkind = \"jobs\"\njobs = []\n",
        Path::new("t.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("sites[0].background_band"), "{e}");
    // Replicas need storage sites when the scenario has them: 3 replicas on 2 file servers.
    let s = scenario("[workload]\nkind = \"generated\"\npreset = \"w30\"\njobs = 5\nreplicas = 3\n").unwrap();
    let e = engine::Simulation::new(&s, 1).err().expect("must fail").to_string();
    assert!(e.contains("replicas") && e.contains("2 sites can store files"), "{e}");
}
