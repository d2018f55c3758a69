//! Building a simulation from a scenario: sites, local resource managers, background load,
//! network, workload and failure injection.

use super::*;

impl Simulation {
    /// Builds the simulation of `scenario` with `seed`.
    pub fn new(scenario: &Scenario, seed: u64) -> Result<Simulation, SimError> {
        let mut rng = Rng::new(seed);
        let n = scenario.sites.len();
        let sites: Vec<Site> = scenario
            .sites
            .iter()
            .map(|s| Site {
                name: s.name.clone(),
                processors: s.processors,
                speed: s.speed,
                supports_reservations: s.reservations,
                attributes: s.attributes.clone(),
            })
            .collect();
        let mbps = 1e6;
        let lan: Vec<f64> = scenario
            .sites
            .iter()
            .map(|s| s.lan_mbps.unwrap_or(scenario.network.lan_mbps) * mbps)
            .collect();
        let mut spec = NetworkSpec::uniform(
            n,
            scenario.network.lan_mbps * mbps,
            scenario.network.wan_mbps * mbps,
            scenario.network.latency_ms,
        );
        spec.lan_bps = lan.clone();
        let mut wan = vec![vec![(scenario.network.wan_mbps * mbps, scenario.network.latency_ms); n]; n];
        for l in &scenario.network.links {
            let (a, b) = (scenario.site_index(&l.a).unwrap(), scenario.site_index(&l.b).unwrap());
            spec.wan_overrides.insert((a.min(b), a.max(b)), (l.mbps * mbps, l.latency_ms));
            wan[a][b] = (l.mbps * mbps, l.latency_ms);
            wan[b][a] = (l.mbps * mbps, l.latency_ms);
        }
        let network = Network::new(spec).map_err(|e| SimError::Network {
            path: scenario.path.display().to_string(),
            reason: e.to_string(),
        })?;
        // The information service's initial forecast: the path's bottleneck bandwidth.
        let mut forecast = NetworkForecast::uniform(n, scenario.network.wan_mbps * mbps, scenario.network.latency_ms);
        let mut latency = vec![vec![0; n]; n];
        for a in 0..n {
            for b in 0..n {
                if a != b {
                    let bps = lan[a].min(lan[b]).min(wan[a][b].0);
                    forecast.set(SiteId(a as u32), SiteId(b as u32), bps, wan[a][b].1);
                    latency[a][b] = wan[a][b].1;
                }
            }
        }
        let mut catalogue = ReplicaCatalogue::new();
        let mut workload_rng = rng.fork();
        let arrivals = workload::build(scenario, &mut workload_rng, &mut catalogue)?;
        let cfg = &scenario.scheduler;
        let broker = cfg.default_policy.is_broker()
            || cfg.broker.coallocation == CoallocationMode::Reservations
            || arrivals.iter().any(|a| {
                a.spec.policy.is_some_and(|p| p.is_broker()) || a.spec.preferences.coallocation == Some(CoallocationMode::Reservations)
            });
        // Transfers only ever start at a replica and end where a component runs, so only those
        // pairs' forecasts are refreshed (with storage-only sites, 25 pairs of 90).
        let holds: Vec<bool> = (0..n)
            .map(|s| catalogue.iter().any(|(_, e)| e.replicas.contains(&SiteId(s as u32))))
            .collect();
        let forecast_pairs = (0..n)
            .flat_map(|a| (0..n).map(move |b| (a, b)))
            .filter(|&(a, b)| a != b && holds[a] && sites[b].processors > 0)
            .collect();
        let scheduler = Scheduler::new(scenario.scheduler.clone(), sites.clone(), forecast, catalogue);
        let lrms = scenario
            .sites
            .iter()
            .map(|s| {
                LocalRm::new(LrmConfig {
                    procs: s.processors,
                    policy: match s.local_policy {
                        LocalPolicyName::Fcfs => LocalPolicy::Fcfs,
                        LocalPolicyName::Easy => LocalPolicy::EasyBackfill,
                    },
                    supports_reservations: s.reservations,
                })
            })
            .collect();
        let mut bands = Vec::with_capacity(n);
        let mut traces = Vec::with_capacity(n);
        for s in &scenario.sites {
            if let Some(t) = &s.background_trace {
                let path = scenario.base_dir.join(&t.path);
                let trace = crate::swf::read_swf(&path).map_err(|source| SimError::Trace {
                    path: scenario.path.display().to_string(),
                    site: s.name.clone(),
                    source,
                })?;
                let first = trace.records.first().map(|r| r.submit_s).unwrap_or(0).max(0);
                let jobs = trace
                    .records
                    .iter()
                    .filter(|r| r.run_s > 0)
                    .map(|r| {
                        let procs = if r.requested_procs > 0 {
                            r.requested_procs
                        } else {
                            r.allocated_procs
                        };
                        let runtime = r.run_s as Millis * 1000;
                        LocalJobSpec {
                            submit_ms: (r.submit_s - first).max(0) as Millis * 1000,
                            procs: procs.max(1) as u32,
                            runtime_ms: runtime,
                            estimate_ms: (r.requested_time_s.max(0) as Millis * 1000).max(runtime),
                        }
                    })
                    .collect();
                let opts = TraceOptions {
                    shift_ms: -((t.skip_s * 1000) as i64),
                    ..TraceOptions::default()
                };
                traces.push(Some(TraceBackground::new(jobs, s.processors, opts)));
                bands.push(None);
                continue;
            }
            traces.push(None);
            let (low, high) = match &scenario.background {
                BackgroundSpec::Band(b) => s.background_band.unwrap_or((b.low, b.high)),
                BackgroundSpec::None => (0.0, 0.0),
            };
            bands.push(match &scenario.background {
                // A storage-only site runs nothing, local jobs included.
                _ if s.storage_only => None,
                BackgroundSpec::None => None,
                BackgroundSpec::Band(b) => Some(BandGenerator::new(
                    BandSpec {
                        low,
                        high,
                        check_interval_ms: b.check_interval_s * 1000,
                        mean_runtime_ms: b.mean_runtime_s * 1000.0,
                        max_job_fraction: b.max_job_fraction,
                        organic: (b.organic_interarrival_s > 0.0).then(|| OrganicSpec {
                            mean_interarrival_ms: b.organic_interarrival_s * 1000.0,
                            ..OrganicSpec::default()
                        }),
                    },
                    0,
                )),
            });
        }
        let soft_error_p = scenario
            .sites
            .iter()
            .map(|s| scenario.faults.soft_error_probability.get(&s.name).copied().unwrap_or(0.0))
            .collect();
        Ok(Simulation {
            scenario_name: scenario.name.clone(),
            seed,
            sites,
            scheduler,
            lrms,
            bands,
            traces,
            network,
            rng,
            arrivals,
            next_arrival: 0,
            runtime_of: BTreeMap::new(),
            failing: BTreeMap::new(),
            bags: BTreeMap::new(),
            transfers: BTreeMap::new(),
            transfer_ids: BTreeMap::new(),
            held: BTreeMap::new(),
            ends: BTreeSet::new(),
            outcomes: BTreeMap::new(),
            seq: 0,
            soft_error_p,
            soft_errors_until: scenario.faults.until_s.map(|s| s * 1000),
            now: 0,
            horizon: scenario.horizon_s.map(|s| s * 1000).unwrap_or(30 * 24 * 3_600_000),
            bucket_ms: scenario.sample_interval_s * 1000,
            timeline: Vec::new(),
            site_totals: vec![UtilizationBucket::default(); n],
            waiting: vec![0; n],
            running: vec![0; n],
            finished: 0,
            rejected: Vec::new(),
            events: 0,
            blacklisted: Vec::new(),
            latency,
            forecast_pairs,
            check_invariants: false,
            violations: Vec::new(),
            stream_bps: scenario.network.stream_mbps.iter().map(|m| m * mbps).collect(),
            worker_copy: scenario
                .network
                .worker_copy
                .as_ref()
                .map(|w| ((w.overhead_s * 1000.0).round() as Millis, w.s_per_gb.clone())),
            net_rng: Rng::seed_from(seed, 0x006e_6574_776f_726b),
            worker_copy_of: BTreeMap::new(),
            broker,
            reservations: (0, 0, 0),
        })
    }
}
