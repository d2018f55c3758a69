//! `koalesce experiment live-cf`: Close-to-Files measured on real shaped links (issue 17).
//!
//! A real `koalesce server` (in this process) schedules the same seeded job mix three times
//! over sites whose storage agents sit in network namespaces joined by tc-shaped links: with
//! CF and the NWS forecasts, with CF and a configured constant bandwidth (`[network]
//! forecasts = false`: every pair looks alike), and with WF (most idle processors; forecasts
//! on). Every job needs one input file held at one site; when that site is full, CF moves the
//! input over the link it estimates fastest. Per job the server reports the FTT it predicted
//! at placement (`timeline.ftt_ms`) and the stage-in it measured (`timeline.transfer_ms`);
//! the experiment adds the response time (submission to end).
//!
//! Sites: by default three local sites a, b, c (2 processors each) on the default shaped
//! network of `testbed up --network` (a→b 40 Mbit/s, b→a 20, a↔c and b↔c 10); with
//! `--testbed DIR`, the Slurm sites of a bed brought up with `koalesce testbed up --network`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use koalesce::testbed::network;
use koalesce_server::config::{AgentSiteConfig, SiteConfig};
use koalesce_server::dataplane::{AgentClient, Role};
use koalesce_server::{BackgroundServer, ServerConfig, ServerOptions, SupervisorCommand};
use koalesce_sim::rng::Rng;
use koalesce_sim::{plot, stats};
use serde_json::Value;

#[derive(Debug, Args)]
pub struct LiveCfArgs {
    /// Output directory (live-cf.md, jobs.csv, SVG plots; the bed under DIR/bed).
    #[arg(long, default_value = "out/live-cf")]
    pub out: PathBuf,
    /// Seeds (1..=N): each draws the files' sites and the jobs.
    #[arg(long, default_value_t = 3)]
    pub seeds: u64,
    /// Jobs per run.
    #[arg(long, default_value_t = 10)]
    pub jobs: usize,
    /// Size of every input file, MiB.
    #[arg(long, default_value_t = 4)]
    pub file_mib: u64,
    /// Time between two submissions, ms.
    #[arg(long, default_value_t = 1500)]
    pub interval_ms: u64,
    /// Each job's run time (sleep), s.
    #[arg(long, default_value_t = 3)]
    pub runtime_s: u64,
    /// Use the Slurm sites of a bed made by `koalesce testbed up --network --dir DIR`.
    #[arg(long)]
    pub testbed: Option<PathBuf>,
    /// Bring up a Slurm bed of its own in OUT/bed (`testbed up --network`: clusters alpha,
    /// beta, gamma of 1 node x 2 CPUs, each cluster's daemons and agent in its namespace, the
    /// default links) and run on its sites; the bed is stopped at the end.
    #[arg(long, conflicts_with = "testbed")]
    pub slurm: bool,
    /// Fail instead of falling back to loopback (unshaped) when namespaces are not allowed.
    #[arg(long)]
    pub require_namespaces: bool,
    /// The links between sites a, b and c (a netbed TOML; default: a→b 40 Mbit/s, b→a 20,
    /// a↔c and b↔c 10; with --slurm, the same for alpha, beta, gamma). Not with --testbed.
    #[arg(long, conflicts_with = "testbed")]
    pub network_config: Option<PathBuf>,
}

/// The variants compared.
const VARIANTS: [(&str, &str, bool); 3] = [
    ("cf+forecast", "cf", true),
    ("cf-constant", "cf", false),
    ("wf+forecast", "wf", true),
];

/// One job's outcome.
#[derive(Debug, Clone)]
struct Row {
    variant: &'static str,
    seed: u64,
    job: u64,
    site: String,
    file_site: String,
    state: String,
    predicted_ftt_ms: u64,
    measured_ftt_ms: u64,
    response_ms: u64,
}

/// Stops the bed's agents and network when dropped (also on failure).
struct OwnBed(PathBuf, Vec<String>);

impl Drop for OwnBed {
    fn drop(&mut self) {
        if let Err(e) = network::down(&self.0, &self.1) {
            eprintln!("warning: taking the experiment's network down: {e:#}");
        }
    }
}

/// Stops the experiment's own Slurm bed when dropped (its directory, with the daemons'
/// logs, stays).
struct OwnSlurmBed(koalesce::testbed::TestBed);

impl Drop for OwnSlurmBed {
    fn drop(&mut self) {
        if let Err(e) = self.0.down(false) {
            eprintln!("warning: stopping the experiment's Slurm bed: {e:#}");
        }
    }
}

/// Something the experiment stops at its end.
enum Guard {
    Net(#[allow(dead_code)] OwnBed),
    Slurm(#[allow(dead_code)] OwnSlurmBed),
}

impl LiveCfArgs {
    pub fn run(self) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.out)?;
        let out = self.out.canonicalize()?;
        let network_config = match &self.network_config {
            Some(p) => {
                Some(koalesce::netbed::NetbedConfig::parse(&std::fs::read_to_string(p)?).with_context(|| format!("in {}", p.display()))?)
            }
            None => None,
        };
        let (base, _bed) = match &self.testbed {
            None if self.slurm => {
                let mut opts = koalesce::testbed::UpOptions::new(out.join("bed"));
                opts.nodes = 1;
                opts.cpus = 2;
                opts.network = true;
                opts.network_config = network_config.clone();
                opts.require_namespaces = self.require_namespaces;
                eprintln!("bringing up the Slurm bed in {}", opts.dir.display());
                let (bed, report) = koalesce::testbed::TestBed::up(&opts)?;
                eprintln!("Slurm bed ready in {:.1} s", report.elapsed_ms as f64 / 1e3);
                let guard = OwnSlurmBed(bed);
                let cfg = ServerConfig::load(&guard.0.server_toml()).context("the Slurm bed's server.toml")?;
                (cfg, Some(Guard::Slurm(guard)))
            }
            Some(dir) => {
                let cfg = ServerConfig::load(&dir.join("server.toml")).context("the test bed's server.toml")?;
                anyhow::ensure!(
                    cfg.sites.iter().all(|s| s.agent.is_some()),
                    "the test bed in {} has no network: run `koalesce testbed up --network --dir {}`",
                    dir.display(),
                    dir.display()
                );
                (cfg, None)
            }
            None => {
                let names: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
                let bed_dir = out.join("bed");
                let guard = OwnBed(bed_dir.clone(), names.clone());
                let agents = network::up(&bed_dir, &names, network_config.as_ref(), self.require_namespaces)?;
                let cfg = ServerConfig {
                    sites: agents
                        .into_iter()
                        .map(|(name, agent)| SiteConfig {
                            agent: Some(agent),
                            ..SiteConfig::local(&name, 2)
                        })
                        .collect(),
                    ..ServerConfig::default()
                };
                (cfg, Some(Guard::Net(guard)))
            }
        };
        let agents: Vec<(String, AgentSiteConfig)> = base.sites.iter().filter_map(|s| Some((s.name.clone(), s.agent.clone()?))).collect();
        let mut rows = Vec::new();
        let mut failed: Vec<String> = Vec::new();
        let shaped = self.testbed.is_some()
            || !matches!(
                koalesce::netbed::NetBed::load(&out.join("bed/net")).map(|b| b.is_shaped()),
                Ok(false)
            );
        let total = self.seeds as usize * VARIANTS.len();
        let t0 = Instant::now();
        for seed in 1..=self.seeds {
            for (k, &(variant, policy, forecasts)) in VARIANTS.iter().enumerate() {
                eprintln!(
                    "[{}/{total}] seed {seed}, {variant} ({:.0} s so far)",
                    (seed as usize - 1) * VARIANTS.len() + k + 1,
                    t0.elapsed().as_secs_f64()
                );
                clear_agents(&agents)?;
                let mut cfg = base.clone();
                configure(&mut cfg, forecasts);
                match self.run_one(&out, cfg, seed, variant, policy, forecasts) {
                    Ok(r) => rows.extend(r),
                    // A run that cannot finish (an overloaded machine fences launches) is
                    // reported, not hidden; the others go on.
                    Err(e) => {
                        eprintln!("run seed {seed} {variant} failed: {e:#}");
                        failed.push(format!("seed {seed}, {variant}: {e:#}"));
                    }
                }
                // After every run: an interrupted experiment keeps what it measured.
                write_report(&out, &self, &rows, &failed, shaped)?;
            }
        }
        clear_agents(&agents)?;
        println!("wrote {}", out.join("live-cf.md").display());
        Ok(())
    }

    /// One run: a fresh server, the files, the jobs; the jobs' outcomes.
    fn run_one(
        &self,
        out: &Path,
        config: ServerConfig,
        seed: u64,
        variant: &'static str,
        policy: &str,
        forecasts: bool,
    ) -> anyhow::Result<Vec<Row>> {
        let data_dir = out.join("runs").join(format!("{variant}-s{seed}"));
        let _ = std::fs::remove_dir_all(&data_dir);
        let sites: Vec<String> = config.sites.iter().map(|s| s.name.clone()).collect();
        let server = BackgroundServer::start(ServerOptions {
            data_dir: data_dir.clone(),
            listen: Some("127.0.0.1:0".into()),
            config,
            supervisor: SupervisorCommand::current_exe()?,
        })?;
        let tok = koalesce_server::create_token(&data_dir, "experiment", true)?;
        let get = |path: &str| -> anyhow::Result<Value> {
            let (code, body) = server.request("GET", path, Some(&tok), b"");
            anyhow::ensure!(code == 200, "GET {path}: {code} {body}");
            Ok(serde_json::from_str(&body)?)
        };
        // The files: one per site and one more, each at a seeded site.
        let mut rng = Rng::seed_from(seed, 17);
        let src = out.join("src");
        std::fs::create_dir_all(&src)?;
        let mut file_sites = Vec::new();
        for i in 0..=sites.len() {
            let site = sites[rng.below(sites.len() as u64) as usize].clone();
            let path = src.join(format!("s{seed}-f{i}.dat"));
            if !path.exists() {
                let mut bytes = vec![0u8; (self.file_mib << 20) as usize];
                let mut r = Rng::seed_from(seed, 1000 + i as u64);
                bytes.iter_mut().for_each(|b| *b = r.next_u32() as u8);
                std::fs::write(&path, bytes)?;
            }
            let body = serde_json::json!({"name": format!("f{i}.dat"), "path": path, "site": site}).to_string();
            let (code, answer) = server.request("POST", "/api/v1/files", Some(&tok), body.as_bytes());
            anyhow::ensure!(code == 201, "registering f{i}.dat: {code} {answer}");
            file_sites.push(site);
        }
        // With forecasts: every pair measured (probes) before the first job.
        let deadline = Instant::now() + Duration::from_secs(120);
        while forecasts
            && get("/api/v1/network")?["links"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|l| l["samples"] == 0)
        {
            anyhow::ensure!(Instant::now() < deadline, "the links were not all probed within 120 s");
            std::thread::sleep(Duration::from_millis(200));
        }
        let mut ids = Vec::new();
        for _ in 0..self.jobs {
            let f = rng.below(file_sites.len() as u64) as usize;
            let procs = 1 + rng.below(2);
            let job = format!(
                "name = \"live-cf\"\npolicy = \"{policy}\"\nexecutable = \"/bin/sh\"\narguments = [\"-c\", \"sha256sum \\\"$KOALESCE_INPUT_F{f}_DAT\\\" && sleep {}\"]\ninputs = [\"f{f}.dat\"]\n[[components]]\nprocessors = {procs}\n",
                self.runtime_s
            );
            let (code, body) = server.request("POST", "/api/v1/jobs", Some(&tok), job.as_bytes());
            anyhow::ensure!(code == 201, "submitting: {code} {body}");
            let id = serde_json::from_str::<Value>(&body)?["id"].as_u64().context("job id")?;
            ids.push((id, file_sites[f].clone()));
            std::thread::sleep(Duration::from_millis(self.interval_ms));
        }
        let deadline = Instant::now() + Duration::from_secs(240);
        let mut rows = Vec::new();
        for (id, file_site) in ids {
            let j = loop {
                let j = get(&format!("/api/v1/jobs/{id}"))?;
                if koalesce_api::dto::is_final_state(j["state"].as_str().unwrap_or("")) {
                    break j;
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "job {id} did not end within 4 minutes ({}, {} placement tries): {}",
                    j["state"],
                    j["placement_tries"],
                    j["failure"]
                );
                std::thread::sleep(Duration::from_millis(100));
            };
            let t = &j["timeline"];
            let ms = |v: &Value| v.as_u64().unwrap_or(0);
            rows.push(Row {
                variant,
                seed,
                job: id,
                site: j["components"][0]["site"].as_str().unwrap_or("").to_string(),
                file_site,
                state: j["state"].as_str().unwrap_or("").to_string(),
                predicted_ftt_ms: ms(&t["ftt_ms"]),
                measured_ftt_ms: ms(&t["transfer_ms"]),
                response_ms: ms(&t["finished"]).saturating_sub(ms(&t["submitted"])),
            });
        }
        let matrix = get("/api/v1/network")?;
        std::fs::write(data_dir.join("network.json"), serde_json::to_vec_pretty(&matrix)?)?;
        server.stop();
        Ok(rows)
    }
}

/// The experiment's server settings on top of the sites.
fn configure(cfg: &mut ServerConfig, forecasts: bool) {
    cfg.listen = "127.0.0.1:0".into();
    cfg.poll_interval_ms = 50;
    cfg.scheduler.scan_interval = koalesce_core::config::ScanInterval::Fixed { interval_ms: 100 };
    cfg.scheduler.min_claim_retry_ms = 100;
    cfg.network.forecasts = forecasts;
    cfg.network.probe_stale_ms = 5_000;
    cfg.network.probe_min_interval_ms = 2_000;
    cfg.network.probe_bytes = 1 << 20;
    if unsafe { libc::geteuid() } == 0 {
        cfg.users.insert("*".into(), "root".into());
        cfg.allow_root_jobs = true;
    }
}

/// Deletes every file at the agents (a run must not find the last run's replicas).
fn clear_agents(agents: &[(String, AgentSiteConfig)]) -> anyhow::Result<()> {
    let client = AgentClient::new(Default::default());
    for (site, a) in agents {
        let agent = a.resolve(site)?;
        for f in client.list(&agent.control, "", Role::Destination)? {
            client.delete(&agent.control, &f.path, Role::Destination)?;
        }
    }
    Ok(())
}

/// Mean and 95 % half-width (t over the per-seed means) of `f` over a variant's jobs.
fn per_seed(rows: &[Row], variant: &str, f: impl Fn(&Row) -> Option<f64>) -> (f64, f64) {
    let mut by_seed: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.variant == variant) {
        if let Some(v) = f(r) {
            by_seed.entry(r.seed).or_default().push(v);
        }
    }
    let means: Vec<f64> = by_seed.values().filter_map(|v| stats::mean(v)).collect();
    match stats::mean_ci95(&means) {
        Some(mh) => mh,
        None => (stats::mean(&means).unwrap_or(f64::NAN), f64::NAN),
    }
}

/// The bed's links as the report states them (from the bed itself).
fn links_text(out: &Path, shaped: bool) -> String {
    if !shaped {
        return "LOOPBACK, NOT SHAPED (namespaces were not allowed)".into();
    }
    let Ok(bed) = koalesce::netbed::NetBed::load(&out.join("bed").join(network::NET_DIR)) else {
        return "those of the test bed (`koalesce testbed status`)".into();
    };
    let names = bed.sites();
    let mut parts = Vec::new();
    for f in &names {
        for t in &names {
            if let Some(r) = bed.rate_mbit(f, t) {
                parts.push(format!("{f}→{t} {r}"));
            }
        }
    }
    format!("shaped with tc, Mbit/s: {}", parts.join(", "))
}

fn write_report(out: &Path, args: &LiveCfArgs, rows: &[Row], failed: &[String], shaped: bool) -> anyhow::Result<()> {
    let mut csv = String::from("variant,seed,job,site,file_site,state,predicted_ftt_ms,measured_ftt_ms,response_ms\n");
    for r in rows {
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{},{},{}",
            r.variant, r.seed, r.job, r.site, r.file_site, r.state, r.predicted_ftt_ms, r.measured_ftt_ms, r.response_ms
        );
    }
    std::fs::write(out.join("jobs.csv"), csv)?;
    let secs = |ms: u64| ms as f64 / 1e3;
    let moved = |r: &Row| r.site != r.file_site;
    let mut md = String::from("# Close-to-Files on real shaped links (`koalesce experiment live-cf`)\n\n");
    let _ = writeln!(
        md,
        "{} seeds x {} jobs per variant, {} MiB input per job, one job every {} ms, run time {} s; sites: {}; links: {}.\n",
        args.seeds,
        args.jobs,
        args.file_mib,
        args.interval_ms,
        args.runtime_s,
        if args.slurm {
            "the Slurm clusters alpha, beta, gamma of the experiment's own bed (1 node x 2 CPUs each; slurmctld, slurmd and storage agent of each in its network namespace)"
        } else if args.testbed.is_some() {
            "the Slurm sites of the test bed"
        } else {
            "local sites a, b, c (2 processors each)"
        },
        links_text(out, shaped)
    );
    md.push_str("Means over seeds of the per-seed means, ± the 95 % t half-width over seeds.\n\n");
    md.push_str("| variant | jobs | succeeded | moved input | measured FTT (s) | predicted FTT (s) | FTT MAPE (moved) | response (s) |\n|---|---|---|---|---|---|---|---|\n");
    let mut bars: Vec<(String, Vec<f64>)> = vec![
        ("measured FTT".into(), vec![]),
        ("predicted FTT".into(), vec![]),
        ("response".into(), vec![]),
    ];
    let mut errs: Vec<Vec<f64>> = vec![vec![]; 3];
    for (variant, _, _) in VARIANTS {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.variant == variant).collect();
        let ok = mine.iter().filter(|r| r.state == "succeeded").count();
        let n_moved = mine.iter().filter(|r| moved(r)).count();
        let meas = per_seed(rows, variant, |r| Some(secs(r.measured_ftt_ms)));
        let pred = per_seed(rows, variant, |r| Some(secs(r.predicted_ftt_ms)));
        let resp = per_seed(rows, variant, |r| Some(secs(r.response_ms)));
        let ape: Vec<f64> = mine
            .iter()
            .filter(|r| moved(r) && r.measured_ftt_ms > 0)
            .map(|r| (r.predicted_ftt_ms as f64 - r.measured_ftt_ms as f64).abs() / r.measured_ftt_ms as f64)
            .collect();
        let mape = stats::mean(&ape).map_or("-".into(), |m| format!("{:.0} %", m * 100.0));
        let pm = |(m, h): (f64, f64)| {
            if h.is_finite() {
                format!("{m:.2} ± {h:.2}")
            } else {
                format!("{m:.2}")
            }
        };
        let _ = writeln!(
            md,
            "| {variant} | {} | {ok} | {n_moved} | {} | {} | {mape} | {} |",
            mine.len(),
            pm(meas),
            pm(pred),
            pm(resp)
        );
        for (i, (m, h)) in [meas, pred, resp].into_iter().enumerate() {
            bars[i].1.push(m);
            errs[i].push(if h.is_finite() { h } else { 0.0 });
        }
    }
    let cats: Vec<String> = VARIANTS.iter().map(|v| v.0.to_string()).collect();
    std::fs::write(
        out.join("live-cf-times.svg"),
        plot::grouped_bar_svg(
            "Close-to-Files on shaped links: mean times per job",
            "seconds",
            &cats,
            &bars,
            Some(&errs),
        ),
    )?;
    let series: Vec<(String, Vec<(f64, f64)>)> = VARIANTS
        .iter()
        .map(|(v, _, _)| {
            let mut pts: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.variant == *v && moved(r))
                .map(|r| (secs(r.measured_ftt_ms), secs(r.predicted_ftt_ms)))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            (v.to_string(), pts)
        })
        .collect();
    std::fs::write(
        out.join("live-cf-ftt.svg"),
        plot::line_svg(
            "Predicted vs measured FTT of jobs whose input moved",
            "measured FTT (s)",
            "predicted FTT (s)",
            &series,
        ),
    )?;
    if !failed.is_empty() {
        md.push_str("\nRuns that did not finish (left out above):\n\n");
        for f in failed {
            let _ = writeln!(md, "- {f}");
        }
    }
    md.push_str("\nPlots: live-cf-times.svg (means with 95 % intervals), live-cf-ftt.svg (predicted against measured FTT, jobs whose input moved). Every job: jobs.csv; the network matrix at the end of each run: runs/<variant>-s<seed>/network.json.\n");
    std::fs::write(out.join("live-cf.md"), md)?;
    Ok(())
}
