//! Seed 002 (Shan, Oliker, Smith, Biswas) reproduced: `koalesce experiment p2p`.
//!
//! The configurations of its Figs. 2–6 (scheduling methods, data volumes, numbers of sites,
//! communication-oblivious scheduling, more jobs) plus two sensitivity runs (exact run time
//! estimates), each under the same seeds. A seed draws the trace windows of every server and the
//! jobs' data sizes ([`crate::p2p::workload`]); all configurations of one seed see the same jobs,
//! so their differences are the schedulers'. Runs go in parallel (rayon) and land in a fixed
//! order, so the output does not depend on the number of threads.
//!
//! [`checks`](super::p2p_checks::checks) compares every number and trend the seed's text states with ours; `p2p_report`
//! writes the tables, the plots and `runs.csv`.

use std::collections::BTreeMap;

use rayon::prelude::*;

use crate::p2p::grid::{Sites, TABLE_I, TABLE_II};
use crate::p2p::workload::{self, Traces, Workload, WorkloadOptions};
use crate::p2p::{self, Algorithm, Counters, Metrics, RunConfig};
use crate::stats;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    pub seeds: Vec<u64>,
    /// Table II's work in per mille (1000: the seed's; smaller for quick checks and tests).
    pub work_per_mille: u32,
    /// Load factors of Fig. 6 in per mille (1000 is the base workload).
    pub loads: Vec<u32>,
}

impl Options {
    /// The full experiment with seeds 1..=n.
    pub fn full(seeds: usize) -> Options {
        Options {
            seeds: (1..=seeds as u64).collect(),
            work_per_mille: 1000,
            loads: vec![1000, 1100, 1200, 1250, 1300, 1350, 1400, 1450, 1500, 1600],
        }
    }
}

/// One configuration: a run configuration and its workload options.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Unique, file-name safe ("si-b10-s3-obl").
    pub key: String,
    pub label: String,
    pub run: RunConfig,
    pub workload: WorkloadOptions,
}

impl Config {
    fn new(algorithm: Algorithm, data_kb: f64, sites: Sites, data_aware: bool, load: u32, exact: bool) -> Config {
        let run = RunConfig {
            algorithm,
            sites,
            data_kb,
            data_aware,
            ..RunConfig::default()
        };
        let workload = WorkloadOptions {
            load_per_mille: load,
            exact_estimates: exact,
            work_per_mille: 1000,
        };
        let alg = match algorithm {
            Algorithm::Local => "local",
            Algorithm::Centralized => "central",
            Algorithm::SenderInitiated => "si",
            Algorithm::ReceiverInitiated => "ri",
            Algorithm::Symmetric => "syi",
        };
        let mut key = format!("{alg}-b{data_kb}-s{}", sites.count());
        let mut label = format!("{}, {}, {} sites", algorithm.name(), data_name(data_kb), sites.count());
        if !data_aware {
            key.push_str("-obl");
            label.push_str(", data ignored");
        }
        if load != 1000 {
            key.push_str(&format!("-load{load}"));
            label.push_str(&format!(", {}% jobs", load / 10));
        }
        if exact {
            key.push_str("-exact");
            label.push_str(", exact estimates");
        }
        Config { key, label, run, workload }
    }

    fn matches(&self, algorithm: Algorithm, data_kb: f64, sites: Sites, aware: bool, load: u32, exact: bool) -> bool {
        let r = &self.run;
        r.algorithm == algorithm
            && (algorithm == Algorithm::Local || (r.data_kb == data_kb && r.sites == sites && r.data_aware == aware))
            && self.workload.load_per_mille == load
            && self.workload.exact_estimates == exact
    }
}

/// The seed's name of a data set: 0B, 0.1B, B, 10B, 100B.
pub fn data_name(data_kb: f64) -> String {
    if data_kb == 1.0 {
        "B".to_string()
    } else {
        format!("{data_kb}B")
    }
}

/// The data sets of Fig. 3.
pub const DATA_SETS: [f64; 5] = [0.0, 0.1, 1.0, 10.0, 100.0];

/// Every configuration, in report order. The local baseline does not depend on the data set or
/// the sites (it moves no data), so it runs once per workload.
pub fn configs(opts: &Options) -> Vec<Config> {
    let mut out: Vec<Config> = Vec::new();
    let mut add = |c: Config| {
        if !out.iter().any(|o| o.key == c.key) {
            out.push(c);
        }
    };
    // Fig. 2: the five methods, set B, 12 sites.
    for a in Algorithm::ALL {
        add(Config::new(a, 1.0, Sites::Twelve, true, 1000, false));
    }
    // Fig. 3: S-I over the data sets, 12 sites.
    for b in DATA_SETS {
        add(Config::new(Algorithm::SenderInitiated, b, Sites::Twelve, true, 1000, false));
    }
    // Fig. 4 (aware) and Fig. 5 (oblivious): S-I over 3, 6, 12 sites, 0.1B, B, 10B.
    for aware in [true, false] {
        for b in [0.1, 1.0, 10.0] {
            for sites in Sites::ALL {
                add(Config::new(Algorithm::SenderInitiated, b, sites, aware, 1000, false));
            }
        }
    }
    // Fig. 6: S-I with more jobs, set B, 12 sites.
    for &load in &opts.loads {
        add(Config::new(Algorithm::SenderInitiated, 1.0, Sites::Twelve, true, load, false));
    }
    // Sensitivity: exact estimates.
    add(Config::new(Algorithm::Local, 1.0, Sites::Twelve, true, 1000, true));
    add(Config::new(Algorithm::SenderInitiated, 1.0, Sites::Twelve, true, 1000, true));
    for c in &mut out {
        c.workload.work_per_mille = opts.work_per_mille;
    }
    out
}

/// What one run keeps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunSummary {
    pub seed: u64,
    pub metrics: Metrics,
    pub counters: Counters,
}

/// The runs of one configuration, one per seed in seed order.
#[derive(Debug, Clone)]
pub struct ConfigResult {
    pub config: Config,
    pub runs: Vec<RunSummary>,
}

/// One server's workload in one seed.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerLoad {
    pub jobs: usize,
    /// Mean input size at B = 1 KB per CPU-second, MB.
    pub avg_input_mb: f64,
    /// Allocated CPU-seconds / (CPUs × period): the offered load.
    pub load: f64,
    /// Trace window: first submit (date) and length in days, and the time stretch.
    pub window_start: String,
    pub window_days: f64,
    pub stretch: f64,
    pub overlaps: bool,
}

/// Everything the experiment measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub seeds: Vec<u64>,
    pub loads: Vec<u32>,
    pub results: Vec<ConfigResult>,
    /// Per seed (same order as `seeds`), per server.
    pub workloads: Vec<Vec<ServerLoad>>,
}

/// One finished run: configuration index, seed index, what it measured, and (once per seed) the
/// workload's per-server figures.
type Done = (usize, usize, RunSummary, Option<Vec<ServerLoad>>);

/// Number of runs [`run`] makes.
pub fn run_count(opts: &Options) -> usize {
    configs(opts).len() * opts.seeds.len()
}

/// Runs every configuration under every seed, in parallel; `progress(label, time)` is called
/// after each run with the run's wall-clock time (from any thread; never part of the results).
pub fn run(traces: &Traces, opts: &Options, progress: &(dyn Fn(&str, std::time::Duration) + Sync)) -> Outcome {
    let cfgs = configs(opts);
    // Runs sharing a workload (seed, load, estimates) are grouped so it is built once.
    let mut groups: BTreeMap<(usize, u32, bool), Vec<usize>> = BTreeMap::new();
    for (s, _) in opts.seeds.iter().enumerate() {
        for (c, cfg) in cfgs.iter().enumerate() {
            groups
                .entry((s, cfg.workload.load_per_mille, cfg.workload.exact_estimates))
                .or_default()
                .push(c);
        }
    }
    let groups: Vec<((usize, u32, bool), Vec<usize>)> = groups.into_iter().collect();
    let done: Vec<Vec<Done>> = groups
        .par_iter()
        .map(|&((s, load, exact), ref members)| {
            let seed = opts.seeds[s];
            let wl = workload::build(
                traces,
                seed,
                &WorkloadOptions {
                    load_per_mille: load,
                    exact_estimates: exact,
                    work_per_mille: opts.work_per_mille,
                },
            );
            let loads = (load == 1000 && !exact).then(|| server_loads(traces, &wl));
            members
                .par_iter()
                .enumerate()
                .map(|(k, &c)| {
                    let started = std::time::Instant::now();
                    let out = p2p::run(&cfgs[c].run, &wl, &mut |_| {});
                    progress(&cfgs[c].label, started.elapsed());
                    let summary = RunSummary {
                        seed,
                        metrics: out.metrics,
                        counters: out.counters,
                    };
                    (c, s, summary, if k == 0 { loads.clone() } else { None })
                })
                .collect()
        })
        .collect();
    let mut runs: Vec<Vec<Option<RunSummary>>> = vec![vec![None; opts.seeds.len()]; cfgs.len()];
    let mut workloads: Vec<Vec<ServerLoad>> = vec![Vec::new(); opts.seeds.len()];
    for (c, s, summary, loads) in done.into_iter().flatten() {
        runs[c][s] = Some(summary);
        if let Some(l) = loads {
            workloads[s] = l;
        }
    }
    let results = cfgs
        .into_iter()
        .zip(runs)
        .map(|(config, runs)| ConfigResult {
            config,
            runs: runs.into_iter().map(|r| r.expect("every run done")).collect(),
        })
        .collect();
    Outcome {
        seeds: opts.seeds.clone(),
        loads: opts.loads.clone(),
        results,
        workloads,
    }
}

fn server_loads(traces: &Traces, wl: &Workload) -> Vec<ServerLoad> {
    TABLE_I
        .iter()
        .enumerate()
        .map(|(s, spec)| {
            let jobs: Vec<&workload::Job> = wl.jobs.iter().filter(|j| usize::from(j.origin) == s && !j.copy).collect();
            let n = jobs.len().max(1) as f64;
            let input: f64 = jobs.iter().map(|j| j.input_bytes(1.0) as f64).sum::<f64>() / n / 1e6;
            let work: f64 = jobs.iter().map(|j| f64::from(j.cpus) * j.run_ms as f64 / 1000.0).sum();
            let w = &wl.windows[s];
            let unix = traces.traces[w.trace].unix_start.unwrap_or(0);
            ServerLoad {
                jobs: jobs.len(),
                avg_input_mb: input,
                load: work / (f64::from(spec.cpus()) * TABLE_II[s].period_ms() as f64 / 1000.0 * period_share(w)),
                window_start: date(unix + w.start_s),
                window_days: (w.end_s - w.start_s) as f64 / 86_400.0,
                stretch: w.stretch,
                overlaps: w.overlaps,
            }
        })
        .collect()
}

/// The share of the seed's period a window was mapped onto (1 unless Table II's work was
/// scaled down).
fn period_share(w: &workload::Window) -> f64 {
    (w.target_cpu_s / TABLE_II[w.server].work_cpu_s()).min(1.0)
}

/// "YYYY-MM-DD" of a Unix time (UTC), from the days-to-civil algorithm of H. Hinnant.
pub fn date(unix_s: i64) -> String {
    let z = unix_s.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

impl Outcome {
    /// The result of the configuration matching these parameters.
    pub fn find(&self, algorithm: Algorithm, data_kb: f64, sites: Sites, aware: bool, load: u32, exact: bool) -> Option<&ConfigResult> {
        self.results
            .iter()
            .find(|r| r.config.matches(algorithm, data_kb, sites, aware, load, exact))
    }

    /// Set B, 12 sites, data-aware, base load, trace estimates.
    pub fn base(&self, algorithm: Algorithm) -> &ConfigResult {
        self.find(algorithm, 1.0, Sites::Twelve, true, 1000, false)
            .expect("base configuration")
    }

    /// The local baseline a configuration is normalized to (same estimates, base load).
    pub fn baseline(&self, r: &ConfigResult) -> &ConfigResult {
        let exact = r.config.workload.exact_estimates;
        self.find(Algorithm::Local, 1.0, Sites::Twelve, true, 1000, exact)
            .expect("local baseline")
    }

    /// Per-seed ART and AWT normalized to the local baseline (NART, NAWT).
    pub fn normalized(&self, r: &ConfigResult) -> (Vec<f64>, Vec<f64>) {
        let base = self.baseline(r);
        let nart = r
            .runs
            .iter()
            .zip(&base.runs)
            .map(|(a, b)| a.metrics.art_s / b.metrics.art_s)
            .collect();
        let nawt = r
            .runs
            .iter()
            .zip(&base.runs)
            .map(|(a, b)| a.metrics.awt_s / b.metrics.awt_s)
            .collect();
        (nart, nawt)
    }

    /// Per-seed load factor (×) at which S-I's NART (or NAWT, with `wait`) reaches the local
    /// baseline's, by linear interpolation over the Fig. 6 loads; `None` when it stays below
    /// within the sweep.
    pub fn crossing(&self, wait: bool) -> Vec<Option<f64>> {
        let points: Vec<(f64, Vec<f64>)> = self
            .loads
            .iter()
            .filter_map(|&l| {
                let r = self.find(Algorithm::SenderInitiated, 1.0, Sites::Twelve, true, l, false)?;
                let (nart, nawt) = self.normalized(r);
                Some((f64::from(l) / 1000.0, if wait { nawt } else { nart }))
            })
            .collect();
        (0..self.seeds.len())
            .map(|s| {
                points.windows(2).find_map(|w| {
                    let ((x0, y0), (x1, y1)) = ((w[0].0, w[0].1[s]), (w[1].0, w[1].1[s]));
                    (y0 < 1.0 && y1 >= 1.0).then(|| x0 + (1.0 - y0) * (x1 - x0) / (y1 - y0))
                })
            })
            .collect()
    }
}

/// Mean and 95% CI half-width (Student t; 0 with one seed).
pub fn mean_ci(samples: &[f64]) -> (f64, f64) {
    stats::mean_ci95(samples).unwrap_or((stats::mean(samples).unwrap_or(f64::NAN), 0.0))
}

/// Wilson 95% interval of k successes in n.
pub fn wilson(k: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (z, n_f) = (1.96f64, n as f64);
    let p = k as f64 / n_f;
    let den = 1.0 + z * z / n_f;
    let centre = (p + z * z / (2.0 * n_f)) / den;
    let half = z * (p * (1.0 - p) / n_f + z * z / (4.0 * n_f * n_f)).sqrt() / den;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_cover_the_figures_once() {
        let c = configs(&Options::full(10));
        let mut keys: Vec<&str> = c.iter().map(|c| c.key.as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), c.len());
        // 5 methods + 4 more data sets + 6 (aware, 3/6 sites) + 9 oblivious + 9 loads + 2.
        assert_eq!(c.len(), 5 + 4 + 6 + 9 + 9 + 2);
        assert!(keys.contains(&"si-b10-s3-obl"));
        assert!(keys.contains(&"si-b1-s12-load1400"));
        assert!(keys.contains(&"local-b1-s12-exact"));
    }

    #[test]
    fn dates_and_wilson() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(951_782_400), "2000-02-29");
        assert_eq!(date(1_014_940_800), "2002-03-01");
        let (lo, hi) = wilson(10, 10);
        assert!((lo - 0.7225).abs() < 1e-3 && hi == 1.0);
        let (lo, hi) = wilson(5, 10);
        assert!((lo - 0.2366).abs() < 1e-3 && (hi - 0.7634).abs() < 1e-3);
    }
}
