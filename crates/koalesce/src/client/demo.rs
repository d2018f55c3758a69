//! `koalesce demo`: a private server, sample data, a few dozen jobs, live progress, a summary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::api::{Client, JobDetail, JobSummary};
use super::format::{format_duration_ms, state_counts, Table};
use super::local_server::{LocalServer, LocalServerOptions};

/// Arguments of `koalesce demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Number of jobs to submit (a mix of single-component, co-allocated and data jobs).
    #[arg(long, default_value_t = 36)]
    pub jobs: usize,
    /// Give up (and fail) if the jobs have not all finished after this long.
    #[arg(long, default_value = "5m", value_parser = crate::client_cmds::parse_duration)]
    pub timeout: Duration,
    /// Keep the server's data dir (its path is printed) instead of deleting it.
    #[arg(long)]
    pub keep: bool,
    /// Print the per-job summary as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Instead: N peered servers with unequal load; the same jobs without and with S-I
    /// migration, ART side by side (docs/federation.md).
    #[arg(long, value_name = "N")]
    pub federation: Option<usize>,
    /// Run the jobs on real Slurm clusters: bring up a test bed of 3 clusters (`koalesce
    /// testbed`; needs slurm-wlm and munge), use one Slurm site per cluster, tear it down after.
    #[arg(long)]
    pub slurm: bool,
    /// With --slurm: use the running test bed in DIR instead of a fresh one (left running).
    #[arg(long, value_name = "DIR", requires = "slurm")]
    pub bed: Option<PathBuf>,
}

/// The server config the demo (and the fresh benchmark server) use: the server's default
/// five DAS-2-shaped sites, with a scan every `scan_ms` and (optionally) placement as soon as
/// a job is submitted.
pub fn server_config(scan_ms: u64, place_on_submit: bool) -> String {
    format!(
        "# koalesce server config written by the client\n\
         # run as root: jobs run as nobody (ignored, with a warning, when not root)\n\
         [users]\n\
         \"*\" = \"nobody\"\n\
         [scheduler]\n\
         place_on_submit = {place_on_submit}\n\
         min_claim_retry_ms = 200\n\
         [scheduler.scan_interval]\n\
         kind = \"fixed\"\n\
         interval_ms = {scan_ms}\n"
    )
}

/// What kind of job the demo submits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemoKind {
    Single,
    Coupled,
    Data,
}

impl DemoKind {
    fn label(self) -> &'static str {
        match self {
            DemoKind::Single => "single",
            DemoKind::Coupled => "coupled",
            DemoKind::Data => "data",
        }
    }
}

/// A sample input file the demo generates and registers.
#[derive(Debug, Clone)]
pub struct SampleFile {
    pub name: String,
    pub bytes: usize,
    /// Indices into the site list of the sites that get a replica.
    pub sites: Vec<usize>,
}

pub fn sample_files() -> Vec<SampleFile> {
    vec![
        SampleFile {
            name: "genome-a.dat".into(),
            bytes: 3 << 20,
            sites: vec![0, 1],
        },
        SampleFile {
            name: "mesh-b.dat".into(),
            bytes: 2 << 20,
            sites: vec![2],
        },
        SampleFile {
            name: "frames-c.dat".into(),
            bytes: 4 << 20,
            sites: vec![3, 4],
        },
        SampleFile {
            name: "climate-d.dat".into(),
            bytes: 1 << 20,
            sites: vec![4],
        },
    ]
}

/// Deterministic pseudo-random bytes (xorshift64*), so the demo needs no data files.
pub fn sample_bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(n);
    out
}

const PRIORITIES: [&str; 4] = ["super-high", "high", "low", "super-low"];

fn toml_str(s: &str) -> String {
    // A TOML basic string.
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The `i`-th demo job: its kind and job description. `sites` are the server's site names.
pub fn demo_job(i: usize, sites: &[String], files: &[SampleFile]) -> (DemoKind, String) {
    let n = sites.len().max(1);
    let kind = match i % 4 {
        0 | 1 => DemoKind::Single,
        2 => DemoKind::Coupled,
        _ => DemoKind::Data,
    };
    let priority = PRIORITIES[i % PRIORITIES.len()];
    let mut t = String::new();
    match kind {
        DemoKind::Single => {
            let procs = 4 + (i * 13) % 61;
            let script = format!(
                "echo \"job $KOALESCE_JOB_ID on $KOALESCE_SITE\"; sleep {}; echo done > out.txt",
                1 + i % 2
            );
            t.push_str(&format!("name = \"single-{i}\"\nexecutable = \"/bin/sh\"\n"));
            t.push_str(&format!("arguments = [\"-c\", {}]\n", toml_str(&script)));
            t.push_str(&format!("priority = \"{priority}\"\nruntime_estimate = \"1m\"\n"));
            t.push_str(&format!("\n[[components]]\nprocessors = {procs}\n"));
        }
        DemoKind::Coupled => {
            let fixed = (i / 4) % 2 != 1;
            // Fixed components go to distinct sites (a grid of 3 Slurm clusters holds 3).
            let k = if fixed { (2 + (i / 4) % 3).min(n) } else { 2 + (i / 4) % 3 };
            let script = "echo \"rank $KOALESCE_RANK of $KOALESCE_SIZE at $KOALESCE_SITE; peers $KOALESCE_PEERS\"; sleep 2";
            t.push_str(&format!("name = \"coupled-{i}\"\nexecutable = \"/bin/sh\"\n"));
            t.push_str(&format!("arguments = [\"-c\", {}]\n", toml_str(script)));
            t.push_str("runner = \"coupled\"\n");
            if !fixed {
                t.push_str("policy = \"wf\"\n");
            }
            t.push_str(&format!("priority = \"{priority}\"\nruntime_estimate = \"1m\"\n"));
            for c in 0..k {
                t.push_str(&format!("\n[[components]]\nprocessors = {}\n", 4 + ((i + 5 * c) * 7) % 29));
                if fixed {
                    t.push_str(&format!("site = {}\n", toml_str(&sites[(i / 4 + c) % n])));
                }
            }
        }
        DemoKind::Data => {
            let f = &files[(i / 4) % files.len()];
            // Every other data job is fixed to a site without a replica: its input moves
            // there first (FTT > 0).
            let away = ((i / 4) % 2 == 1).then(|| sites[(f.sites[0] + 1) % n].clone());
            let script = "sleep 1; for f in $(env | sed -n 's/^KOALESCE_INPUT_[^=]*=//p'); do \
                          echo \"$(basename \"$f\") $(wc -c < \"$f\") bytes at $KOALESCE_SITE\"; done > result.txt; \
                          cat result.txt";
            t.push_str(&format!("name = \"data-{i}\"\nexecutable = \"/bin/sh\"\n"));
            t.push_str(&format!("arguments = [\"-c\", {}]\n", toml_str(script)));
            t.push_str("policy = \"cf\"\n");
            t.push_str(&format!("priority = \"{priority}\"\nruntime_estimate = \"1m\"\n"));
            t.push_str(&format!("inputs = [{}]\noutputs = [\"result.txt\"]\n", toml_str(&f.name)));
            t.push_str(&format!("\n[[components]]\nprocessors = {}\n", 2 + i % 7));
            if let Some(site) = away {
                t.push_str(&format!("site = {}\n", toml_str(&site)));
            }
        }
    }
    (kind, t)
}

fn progress_bar(total: u64) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:32.cyan/blue}] {pos}/{len} finished  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb
}

impl DemoArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        if let Some(n) = self.federation {
            return crate::federation_demo::run(n, self.timeout);
        }
        let t_start = Instant::now();
        if self.jobs == 0 {
            bail!("--jobs must be at least 1");
        }
        // A Slurm test bed outlives the server (dropped after it).
        let bed = if self.slurm {
            Some(crate::slurm_bench::Bed::get(self.bed.as_deref(), 3, 0)?)
        } else {
            None
        };
        let config = match &bed {
            Some(b) => format!(
                "{}
{}",
                server_config(500, true),
                b.sites_toml()?
            ),
            None => server_config(500, true),
        };
        let opts = LocalServerOptions {
            config_toml: Some(config),
            keep_data_dir: self.keep,
            ..Default::default()
        };
        let prepared = LocalServer::prepare(&opts)?;
        let token = prepared.create_token("demo", true)?;
        let server = prepared.start(Duration::from_secs(30))?;
        if let Some(b) = &bed {
            b.stop_on_interrupt(&server);
        }
        eprintln!("koalesce server started at {} (data dir {})", server.url, server.data_dir.display());
        let result = self.drive(&server, &token);
        if result.is_err() || matches!(result, Ok(false)) {
            eprintln!("--- last lines of the server log ({}):", server.log_path.display());
            eprintln!("{}", server.log_tail(30));
        }
        drop(server);
        drop(bed);
        let ok = result?;
        eprintln!("demo finished in {:.1} s; server stopped", t_start.elapsed().as_secs_f64());
        Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
    }

    /// Runs the demo against the started server; true when every job succeeded.
    fn drive(&self, server: &LocalServer, token: &str) -> anyhow::Result<bool> {
        let client = Client::new(&server.url, Some(token.to_string()), Duration::from_secs(30));
        let sites: Vec<String> = client.sites()?.into_iter().map(|s| s.name).collect();
        if sites.is_empty() {
            bail!("the server has no sites");
        }
        eprintln!("sites: {}", sites.join(", "));

        // Sample input files, generated beside the data dir, registered with replicas.
        let files = sample_files();
        let dir: PathBuf = server.data_dir.parent().unwrap_or(Path::new("/tmp")).join("inputs");
        std::fs::create_dir_all(&dir)?;
        let mut skipped = Vec::new();
        for (k, f) in files.iter().enumerate() {
            let path = dir.join(&f.name);
            std::fs::write(&path, sample_bytes(k as u64 + 1, f.bytes))?;
            let mut at = Vec::new();
            for &s in &f.sites {
                let site = &sites[s % sites.len()];
                if at.contains(site) {
                    continue;
                }
                match client.upload_file_json(&f.name, &path, site) {
                    Ok(_) => at.push(site.clone()),
                    // A replica the server refuses (409: already there, or other content) is
                    // not needed: the first one is enough for the demo.
                    Err(e) if !at.is_empty() && is_conflict(&e) => skipped.push(format!("{} at {site}", f.name)),
                    Err(e) => return Err(e.context(format!("registering {} at {site}", f.name))),
                }
            }
            eprintln!("registered {} ({} MiB) at {}", f.name, f.bytes >> 20, at.join(", "));
        }
        if !skipped.is_empty() {
            eprintln!("(replicas refused by the server, not needed: {})", skipped.join(", "));
        }

        // Submit.
        let mut jobs: Vec<(u64, DemoKind)> = Vec::new();
        let t_submit = Instant::now();
        for i in 0..self.jobs {
            let (kind, text) = demo_job(i, &sites, &files);
            let id = client.submit(&text).with_context(|| format!("submitting demo job {i}:\n{text}"))?;
            jobs.push((id, kind));
        }
        let kinds: BTreeMap<u64, DemoKind> = jobs.iter().copied().collect();
        let count = |k: DemoKind| jobs.iter().filter(|(_, x)| *x == k).count();
        eprintln!(
            "submitted {} jobs in {} ms: {} single-component, {} co-allocated (coupled runner), {} with input and output files",
            jobs.len(),
            t_submit.elapsed().as_millis(),
            count(DemoKind::Single),
            count(DemoKind::Coupled),
            count(DemoKind::Data)
        );

        // Live progress.
        let pb = progress_bar(jobs.len() as u64);
        let tty = !pb.is_hidden();
        let deadline = Instant::now() + self.timeout;
        let mut last_line = String::new();
        let mut last_print = Instant::now();
        let summaries: Vec<JobSummary> = loop {
            let all = match client.jobs(None, false) {
                Ok(list) => list,
                Err(e) => {
                    pb.abandon();
                    return Err(e);
                }
            };
            let mine: Vec<JobSummary> = all.into_iter().filter(|j| kinds.contains_key(&j.id)).collect();
            let finished = mine.iter().filter(|j| j.is_finished()).count();
            let counts = state_counts(&mine);
            pb.set_position(finished as u64);
            pb.set_message(counts.clone());
            if !tty && (counts != last_line && last_print.elapsed() > Duration::from_secs(2)) {
                eprintln!(
                    "[{:>5.1}s] {finished}/{} finished: {counts}",
                    t_submit.elapsed().as_secs_f64(),
                    jobs.len()
                );
                last_line = counts;
                last_print = Instant::now();
            }
            if finished == jobs.len() && mine.len() == jobs.len() {
                pb.finish();
                if !tty {
                    eprintln!("[{:>5.1}s] all {} jobs finished", t_submit.elapsed().as_secs_f64(), jobs.len());
                }
                break mine;
            }
            if Instant::now() > deadline {
                pb.abandon();
                eprintln!("timed out after {:?}: {finished}/{} finished", self.timeout, jobs.len());
                break mine;
            }
            std::thread::sleep(Duration::from_millis(250));
        };

        // Per-job summary.
        let mut details: Vec<(DemoKind, JobDetail)> = Vec::new();
        for (id, kind) in &jobs {
            details.push((*kind, client.job(*id)?));
        }
        let succeeded = details.iter().filter(|(_, d)| d.state == "succeeded").count();
        if self.json {
            let rows: Vec<serde_json::Value> = details
                .iter()
                .map(|(k, d)| {
                    serde_json::json!({
                        "id": d.id, "name": d.name, "kind": k.label(), "state": d.state,
                        "sites": d.sites, "components": d.components.len(), "size": d.size,
                        "placement_ms": placement_ms(d), "ftt_ms": d.timeline.ftt_ms,
                        "twt_ms": d.timeline.twt_ms, "failure": d.failure,
                    })
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&rows)?);
        } else {
            print!("{}", summary_table(&details));
        }
        let outputs = client
            .files()
            .map(|f| f.iter().filter(|f| f.name.contains('/')).count())
            .unwrap_or(0);
        let twts: Vec<i64> = details.iter().filter_map(|(_, d)| d.timeline.twt_ms.map(|t| t as i64)).collect();
        let mean_twt = if twts.is_empty() {
            0
        } else {
            twts.iter().sum::<i64>() / twts.len() as i64
        };
        println!(
            "{succeeded}/{} jobs succeeded; {outputs} output file(s) registered; mean TWT {}; states: {}",
            details.len(),
            format_duration_ms(mean_twt),
            state_counts(&summaries)
        );
        for (_, d) in &details {
            if d.state != "succeeded" {
                println!(
                    "job {} ({}) {}: {}",
                    d.id,
                    d.name,
                    d.state,
                    d.failure.as_deref().unwrap_or("no reason given")
                );
            }
        }
        Ok(succeeded == details.len())
    }
}

fn is_conflict(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<super::api::ApiError>(),
        Some(super::api::ApiError::Status { status: 409, .. })
    )
}

/// Placement time: submission to the last component placed.
fn placement_ms(d: &JobDetail) -> Option<i64> {
    Some(d.timeline.placed?.saturating_sub(d.timeline.submitted.max(d.submitted_ms)) as i64)
}

/// The demo's per-job summary table.
pub fn summary_table(details: &[(DemoKind, JobDetail)]) -> String {
    let mut t = Table::new(&["ID", "NAME", "KIND", "COMPS", "SIZE", "SITES", "PLACEMENT", "FTT", "TWT", "STATE"]).right_align(&[
        "ID",
        "COMPS",
        "SIZE",
        "PLACEMENT",
        "FTT",
        "TWT",
    ]);
    let d_or = |v: Option<i64>| v.map(format_duration_ms).unwrap_or_else(|| "-".into());
    for (k, d) in details {
        t.push(vec![
            d.id.to_string(),
            d.name.clone(),
            k.label().to_string(),
            d.components.len().to_string(),
            d.size.to_string(),
            if d.sites.is_empty() { "-".into() } else { d.sites.join(",") },
            d_or(placement_ms(d)),
            d_or(Some(d.timeline.ftt_ms as i64)),
            d_or(d.timeline.twt_ms.map(|t| t as i64)),
            d.state.clone(),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sites() -> Vec<String> {
        ["vu", "leiden", "uva", "delft", "utrecht"].iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn demo_jobs_are_valid_toml_with_the_right_shape() {
        let files = sample_files();
        let mut kinds = BTreeMap::new();
        for i in 0..36 {
            let (kind, text) = demo_job(i, &sites(), &files);
            let v: toml::Value = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            *kinds.entry(kind.label()).or_insert(0) += 1;
            let comps = v["components"].as_array().unwrap();
            match kind {
                DemoKind::Single => assert_eq!(comps.len(), 1),
                DemoKind::Coupled => {
                    assert!(comps.len() >= 2);
                    assert_eq!(v["runner"].as_str(), Some("coupled"));
                    if comps[0].get("site").is_some() {
                        let fixed: std::collections::BTreeSet<_> = comps.iter().map(|c| c["site"].as_str().unwrap()).collect();
                        assert_eq!(fixed.len(), comps.len(), "fixed components on distinct sites");
                    }
                }
                DemoKind::Data => {
                    assert_eq!(v["inputs"].as_array().unwrap().len(), 1);
                    assert_eq!(v["outputs"][0].as_str(), Some("result.txt"));
                }
            }
            for c in comps {
                let p = c["processors"].as_integer().unwrap();
                assert!((1..=64).contains(&p), "{p}");
            }
        }
        assert_eq!(kinds["single"], 18);
        assert_eq!(kinds["coupled"], 9);
        assert_eq!(kinds["data"], 9);
    }

    #[test]
    fn fixed_components_fit_three_sites() {
        let three: Vec<String> = ["alpha", "beta", "gamma"].iter().map(|s| s.to_string()).collect();
        for i in 0..36 {
            let (kind, text) = demo_job(i, &three, &sample_files());
            let v: toml::Value = toml::from_str(&text).unwrap();
            let comps = v["components"].as_array().unwrap();
            if kind == DemoKind::Coupled && comps[0].get("site").is_some() {
                let fixed: std::collections::BTreeSet<_> = comps.iter().map(|c| c["site"].as_str().unwrap()).collect();
                assert_eq!(fixed.len(), comps.len(), "{text}");
            }
        }
    }

    #[test]
    fn sample_bytes_are_deterministic() {
        let a = sample_bytes(1, 1000);
        assert_eq!(a.len(), 1000);
        assert_eq!(a, sample_bytes(1, 1000));
        assert_ne!(a, sample_bytes(2, 1000));
    }

    #[test]
    fn config_is_toml() {
        let v: toml::Value = toml::from_str(&server_config(500, true)).unwrap();
        assert!(v.get("scheduler").is_some());
    }
}
