//! `koalesce bench transfers`: third-party pushes between storage agents on the shaped bed
//! (the default network of `testbed up --network`), every ordered pair of sites several
//! times. Reports each push's throughput as a fraction of the link's shaped rate (goal ≥ 90 %)
//! and how well the NWS forecast (seeded by one probe per pair, then fed every push) predicted
//! each push's transfer time: the mean absolute percentage error (MAPE) of FTT over the run.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;
use koalesce::netbed::NetBed;
use koalesce::testbed::network;
use koalesce_core::model::NetworkForecast;
use koalesce_core::nws::{NetworkWeather, NwsConfig};
use koalesce_core::SiteId;
use koalesce_server::dataplane::{AgentClient, Expected, Role, SiteAgent};
use serde::Serialize;

#[derive(Debug, Args)]
pub struct BenchTransfersArgs {
    /// MiB per push.
    #[arg(long, default_value_t = 4)]
    pub mib: u64,
    /// Pushes per ordered pair of sites.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// The bed's directory (default: a temporary one, deleted at the end).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct Push {
    from: String,
    to: String,
    shaped_mbit: Option<f64>,
    measured_mbit: f64,
    /// Measured / shaped (none on loopback).
    fraction: Option<f64>,
    /// The transfer time the forecast predicted before the push, ms.
    predicted_ms: u64,
    measured_ms: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    shaped: bool,
    bytes_per_push: u64,
    pushes: Vec<Push>,
    /// Lowest and mean fraction of the shaped rate over all pushes.
    min_fraction: Option<f64>,
    mean_fraction: Option<f64>,
    goal_fraction: f64,
    /// Mean absolute percentage error of the predicted transfer time.
    ftt_mape: f64,
}

/// Takes the bench's network down when dropped (then its temporary directory goes).
struct Down {
    dir: PathBuf,
    names: Vec<String>,
    _tmp: Option<tempfile::TempDir>,
}

impl Drop for Down {
    fn drop(&mut self) {
        if let Err(e) = network::down(&self.dir, &self.names) {
            eprintln!("warning: taking the bench's network down: {e:#}");
        }
    }
}

impl BenchTransfersArgs {
    pub fn run(self) -> anyhow::Result<std::process::ExitCode> {
        let names: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let (dir, tmp) = match &self.dir {
            Some(d) => (d.clone(), None),
            None => {
                let t = tempfile::Builder::new().prefix("kbench-xfer-").tempdir()?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let guard = Down {
            dir: dir.clone(),
            names: names.clone(),
            _tmp: tmp,
        };
        let agents = network::up(&guard.dir, &names, None, false)?;
        let bed = NetBed::load(&dir.join(network::NET_DIR))?;
        let sites: Vec<SiteAgent> = agents.iter().map(|(n, a)| a.resolve(n)).collect::<anyhow::Result<_>>()?;
        let roots: Vec<PathBuf> = agents.iter().map(|(_, a)| a.root.clone().unwrap_or_default()).collect();
        let client = AgentClient::new(Default::default());
        let bytes = self.mib << 20;
        let data: Vec<u8> = (0..bytes).map(|i| ((i * 2_654_435_761) >> 13) as u8).collect();
        let expect = Expected {
            sha256: koalesce_server::store::sha256_hex(&data),
            size: bytes,
        };
        for r in &roots {
            std::fs::write(r.join("bench.dat"), &data)?;
        }
        let mut weather = NetworkWeather::new(NwsConfig::default());
        let mut pushes = Vec::new();
        let n = sites.len();
        // One probe per pair seeds the forecasts, so the first push has a prediction.
        for (i, j) in pairs(n) {
            let r = sites[j].probe_from(&client, &sites[i], 1 << 20)?;
            if let Some(m) = r.measurement(0) {
                weather.observe(SiteId(i as u32), SiteId(j as u32), m)?;
            }
        }
        for round in 0..self.rounds {
            for (i, j) in pairs(n) {
                let (from, to) = (SiteId(i as u32), SiteId(j as u32));
                let mut net = NetworkForecast::uniform(n, 1e9, 0);
                weather.apply(&mut net);
                let predicted_ms = net.transfer_ms(from, to, bytes);
                let path = format!("in-{round}-{i}.dat");
                let r = client.push(&sites[i].control, "bench.dat", &sites[j].data_endpoint(), &path, &expect)?;
                client.delete(&sites[j].control, &path, Role::Destination)?;
                if let Some(m) = r.measurement(u64::from(round + 1) * 1000) {
                    weather.observe(from, to, m)?;
                }
                let shaped = bed.rate_mbit(&names[i], &names[j]);
                let measured_mbit = r.throughput_bps / 1e6;
                pushes.push(Push {
                    from: names[i].clone(),
                    to: names[j].clone(),
                    shaped_mbit: shaped,
                    measured_mbit,
                    fraction: shaped.map(|s| measured_mbit / s),
                    predicted_ms,
                    measured_ms: r.duration_ms + r.latency_ms.unwrap_or(0.0),
                });
            }
        }
        let fractions: Vec<f64> = pushes.iter().filter_map(|p| p.fraction).collect();
        let ape: Vec<f64> = pushes
            .iter()
            .filter(|p| p.measured_ms > 0.0)
            .map(|p| (p.predicted_ms as f64 - p.measured_ms).abs() / p.measured_ms)
            .collect();
        let report = Report {
            shaped: bed.is_shaped(),
            bytes_per_push: bytes,
            min_fraction: fractions.iter().copied().reduce(f64::min),
            mean_fraction: koalesce_sim::stats::mean(&fractions),
            goal_fraction: 0.9,
            ftt_mape: koalesce_sim::stats::mean(&ape).unwrap_or(f64::NAN),
            pushes,
        };
        if self.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            print!("{}", table(&report));
        }
        drop(guard);
        Ok(std::process::ExitCode::SUCCESS)
    }
}

/// Every ordered pair of distinct sites among `n`.
fn pairs(n: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..n).flat_map(move |i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
}

fn table(r: &Report) -> String {
    let mut s = String::new();
    if !r.shaped {
        s.push_str("warning: loopback (namespaces not allowed): links are NOT shaped; no fraction of a rate\n");
    }
    let _ = writeln!(
        s,
        "{:<6} {:<6} {:>8} {:>10} {:>9} {:>13} {:>12}",
        "FROM", "TO", "SHAPED", "MEASURED", "FRACTION", "PREDICTED MS", "MEASURED MS"
    );
    for p in &r.pushes {
        let _ = writeln!(
            s,
            "{:<6} {:<6} {:>8} {:>10.2} {:>9} {:>13} {:>12.0}",
            p.from,
            p.to,
            p.shaped_mbit.map_or("-".into(), |m| format!("{m}")),
            p.measured_mbit,
            p.fraction.map_or("-".into(), |f| format!("{:.1} %", f * 100.0)),
            p.predicted_ms,
            p.measured_ms
        );
    }
    let pct = |v: Option<f64>| v.map_or("-".into(), |f| format!("{:.1} %", f * 100.0));
    let _ = writeln!(
        s,
        "fraction of the shaped rate: min {}, mean {} (goal {:.0} %); FTT forecast MAPE {:.1} %",
        pct(r.min_fraction),
        pct(r.mean_fraction),
        r.goal_fraction * 100.0,
        r.ftt_mape * 100.0
    );
    s
}
