//! Sites whose storage is a storage agent (`[sites.agent]`), served on loopback by agents in
//! this process: the daemon registers files through the agent, stages inputs between agent
//! sites as third-party pushes, stores outputs through the agent, moves a transfer to
//! another replica when its source agent is gone or its replica corrupt (quarantined), and
//! feeds the measured throughput to the forecast the core uses.
//! (The same over a shaped network, with placement following the forecasts, is in
//! `crates/koalesce/tests/dataplane_daemon.rs`.)

mod agent_common;
mod common;

use std::path::{Path, PathBuf};

use agent_common::SECRET;
use common::*;
use koalesce_server::agent::{AgentConfig, BackgroundAgent};
use koalesce_server::config::AgentSiteConfig;
use koalesce_server::dataplane::{AgentClient, ClientConfig, Endpoint, Role};
use koalesce_server::BackgroundServer;
use serde_json::Value;

struct Site {
    agent: Option<BackgroundAgent>,
    root: PathBuf,
    ep: Endpoint,
}

fn agent_on(root: &Path) -> BackgroundAgent {
    std::fs::create_dir_all(root).unwrap();
    let mut config = AgentConfig::new(root, SECRET);
    config.min_free_bytes = 0;
    BackgroundAgent::start(config).expect("agent starts")
}

/// A server whose sites (names, processors) all have agents on loopback.
fn server_with_agents(dir: &Path, sites: &[(&str, u32)]) -> (BackgroundServer, Vec<Site>) {
    let token_file = dir.join("agent.token");
    std::fs::write(&token_file, SECRET).unwrap();
    let mut opts = koalesce_server::test_options(&dir.join("server"), sites, supervisor());
    opts.config.network.transfer_tries = 2;
    let mut out = Vec::new();
    for (cfg, (name, _)) in opts.config.sites.iter_mut().zip(sites) {
        let root = dir.join(format!("storage-{name}"));
        let agent = agent_on(&root);
        let ep = Endpoint::new(agent.url(), SECRET);
        cfg.agent = Some(AgentSiteConfig {
            url: agent.url(),
            data_url: None,
            token_file: token_file.clone(),
            root: Some(root.clone()),
        });
        out.push(Site {
            agent: Some(agent),
            root,
            ep,
        });
    }
    (BackgroundServer::start(opts).expect("server starts"), out)
}

fn client() -> AgentClient {
    AgentClient::new(ClientConfig::default())
}

/// Registers `data` as `name` at `site` (uploaded by the server from a file outside its data
/// directory); returns the catalogue entry.
fn register(srv: &BackgroundServer, tok: &str, dir: &Path, name: &str, site: &str, data: &[u8]) -> Value {
    let src = dir.join(format!("src-{name}-{site}"));
    std::fs::write(&src, data).unwrap();
    let body = format!(r#"{{"name":"{name}","path":"{}","site":"{site}"}}"#, src.display());
    let (code, f) = srv.request("POST", "/api/v1/files", Some(tok), body.as_bytes());
    assert_eq!(code, 201, "{f}");
    json(&f)
}

fn reader_at(site: &str) -> String {
    shell_job("reader", "sha256sum \"$KOALESCE_INPUT_INPUT_DAT\"", 1, "inputs = [\"input.dat\"]")
        .replace("processors = 1", &format!("processors = 1\nsite = \"{site}\""))
}

fn replicas(srv: &BackgroundServer, name: &str) -> Vec<String> {
    let shared = srv.shared();
    let st = shared.state.lock().unwrap();
    st.files.get(name).map(|f| f.replicas.keys().cloned().collect()).unwrap_or_default()
}

fn content(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

#[test]
fn stage_in_between_agent_sites_is_a_push_measured_and_given_to_the_core() {
    let tmp = tempfile::tempdir().unwrap();
    let (srv, sites) = server_with_agents(tmp.path(), &[("a", 2), ("b", 2)]);
    let tok = token(&tmp.path().join("server"), "alice", false);
    let c = client();
    let data = content(3 << 20);
    let f = register(&srv, &tok, tmp.path(), "input.dat", "a", &data);
    // Registration went through a's agent: its root holds the file, uploaded and verified.
    let sa = c.stats(&sites[0].ep, Role::Source).unwrap();
    assert_eq!(sa.uploads_completed, 1, "{sa:?}");
    let at_a = c.list(&sites[0].ep, "", Role::Source).unwrap();
    assert_eq!(at_a.len(), 1, "{at_a:?}");
    assert_eq!(std::fs::read(sites[0].root.join(&at_a[0].path)).unwrap(), data);

    let id = submit(&srv, &tok, &reader_at("b"));
    let j = wait_state(&srv, &tok, id, &["succeeded", "failed"], 30);
    assert_eq!(j["state"], "succeeded", "{j}");
    let out = std::fs::read_to_string(j["components"][0]["stdout"].as_str().unwrap()).unwrap();
    assert!(out.starts_with(f["sha256"].as_str().unwrap()), "{out}");
    // a pushed to b (third party): a sent the bytes, b received them, the server moved none.
    let sa = c.stats(&sites[0].ep, Role::Source).unwrap();
    let sb = c.stats(&sites[1].ep, Role::Destination).unwrap();
    assert_eq!(sa.pushes_completed, 1, "{sa:?}");
    assert!(sb.bytes_received >= data.len() as u64, "{sb:?}");
    assert_eq!(replicas(&srv, "input.dat"), ["a", "b"]);
    let at_b = c.list(&sites[1].ep, "", Role::Destination).unwrap();
    assert_eq!(std::fs::read(sites[1].root.join(&at_b[0].path)).unwrap(), data);

    // The push's measured throughput is the forecast the core uses for a → b.
    let (code, body) = srv.request("GET", "/api/v1/network", Some(&tok), b"");
    assert_eq!(code, 200, "{body}");
    let m = json(&body);
    let ab = m["links"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["from"] == "a" && l["to"] == "b")
        .unwrap();
    assert_eq!(ab["source"], "forecast", "{ab}");
    assert!(ab["samples"].as_u64().unwrap() >= 1, "{ab}");
    assert_eq!(ab["bytes_moved"].as_u64().unwrap(), data.len() as u64, "{ab}");
    assert!(ab["agents"].as_bool().unwrap());
    let core_bw = {
        let shared = srv.shared();
        let st = shared.state.lock().unwrap();
        st.core.forecast().get(koalesce_core::SiteId(0), koalesce_core::SiteId(1)).0
    };
    assert_eq!(ab["bandwidth_bps"].as_f64().unwrap(), core_bw);
    assert_ne!(core_bw, 1e9, "the configured initial bandwidth was replaced by the measurement");
    let (_, metrics) = srv.request("GET", "/metrics", Some(&tok), b"");
    assert!(
        metrics.contains(&format!("koalesce_network_bytes_total{{from=\"a\",to=\"b\"}} {}", data.len())),
        "{metrics}"
    );
    assert!(metrics.contains("koalesce_network_bandwidth_bps{from=\"a\",to=\"b\",source=\"forecast\""));
}

#[test]
fn a_dead_source_agent_or_corrupt_replica_gives_way_to_another_replica() {
    let tmp = tempfile::tempdir().unwrap();
    let (srv, mut sites) = server_with_agents(tmp.path(), &[("a", 2), ("b", 2), ("c", 2), ("d", 2)]);
    let tok = token(&tmp.path().join("server"), "alice", false);
    let c = client();
    let data = content(1 << 20);
    register(&srv, &tok, tmp.path(), "input.dat", "a", &data);
    register(&srv, &tok, tmp.path(), "input.dat", "c", &data);
    // a's agent dies: the core's choice (a: ties go to the lowest site) fails on the way,
    // is tried again, and the transfer moves to c.
    sites[0].agent.take();
    let id = submit(&srv, &tok, &reader_at("b"));
    let j = wait_state(&srv, &tok, id, &["succeeded", "failed"], 30);
    assert_eq!(j["state"], "succeeded", "{j}");
    assert_eq!(c.stats(&sites[2].ep, Role::Source).unwrap().pushes_completed, 1);
    assert_eq!(replicas(&srv, "input.dat"), ["a", "b", "c"], "a unreachable is not a bad replica");

    // b's replica is corrupted on b's disk; a is still down: a job at d gets c's.
    let at_b = c.list(&sites[1].ep, "", Role::Source).unwrap();
    let mut bad = data.clone();
    bad[1000] ^= 1;
    std::fs::write(sites[1].root.join(&at_b[0].path), &bad).unwrap();
    {
        // Make b the core's first choice for d (its forecast to d the best).
        let shared = srv.shared();
        let mut st = shared.state.lock().unwrap();
        let (b, d) = (st.site_id("b").unwrap(), st.site_id("d").unwrap());
        st.core.update_forecast(b, d, 1e10, 0);
    }
    let id = submit(&srv, &tok, &reader_at("d"));
    let j = wait_state(&srv, &tok, id, &["succeeded", "failed"], 30);
    assert_eq!(j["state"], "succeeded", "{j}");
    let sb = c.stats(&sites[1].ep, Role::Source).unwrap();
    assert_eq!(sb.pushes_failed, 1, "b's agent refused to send a corrupt replica: {sb:?}");
    assert_eq!(c.stats(&sites[2].ep, Role::Source).unwrap().pushes_completed, 2);
    assert_eq!(
        replicas(&srv, "input.dat"),
        ["a", "c", "d"],
        "the corrupt replica at b was quarantined in the catalogue"
    );
}

#[test]
fn outputs_at_an_agent_site_are_stored_through_its_agent() {
    let tmp = tempfile::tempdir().unwrap();
    let (srv, sites) = server_with_agents(tmp.path(), &[("a", 2)]);
    let tok = token(&tmp.path().join("server"), "alice", false);
    let c = client();
    let job_toml = shell_job("writer", "head -c 300000 /dev/zero > result.bin", 1, "outputs = [\"result.bin\"]");
    let id = submit(&srv, &tok, &job_toml);
    let j = wait_state(&srv, &tok, id, &["succeeded", "failed"], 30);
    assert_eq!(j["state"], "succeeded", "{j}");
    let name = format!("{id}/result.bin");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while replicas(&srv, &name).is_empty() {
        assert!(std::time::Instant::now() < deadline, "output never registered");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(c.stats(&sites[0].ep, Role::Destination).unwrap().uploads_completed, 1);
    let listed = c.list(&sites[0].ep, "", Role::Destination).unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].size, 300_000);
    // Deleting the file deletes it at the agent.
    let (code, body) = srv.request("DELETE", &format!("/api/v1/files/{}", name.replace('/', "%2F")), Some(&tok), b"");
    assert_eq!(code, 204, "{body}");
    assert!(c.list(&sites[0].ep, "", Role::Destination).unwrap().is_empty());
}
