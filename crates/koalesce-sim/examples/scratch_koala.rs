// SCRATCH (not committed): quick diagnostics.
use koalesce_sim::engine;
use koalesce_sim::experiments::koala::{self, Exp, Options};
use koalesce_sim::experiments::measure::{Agg, RunMetrics};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let exp = Exp::parse(args.get(1).map(|s| s.as_str()).unwrap_or("stable")).unwrap();
    let lan: Option<f64> = std::env::var("LAN").ok().and_then(|v| v.parse().ok());
    let wan: Option<f64> = std::env::var("WAN").ok().and_then(|v| v.parse().ok());
    let seeds: u64 = std::env::var("SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let filter = std::env::var("ONLY").unwrap_or_default();
    let opts = Options::full(seeds as usize);
    println!("config | total bg grid pwt pgt | q stable | ftt twt plc | clm | remote% overrun_s | usable b g p | thr | pwtb pwta | co%");
    for mut c in koala::configs(exp, &opts) {
        if !filter.is_empty() && !c.key.contains(&filter) {
            continue;
        }
        if let Some(l) = lan {
            c.scenario.network.lan_mbps = l;
        }
        if let Ok(u) = std::env::var("ULOAD") {
            if let koalesce_sim::scenario::WorkloadSpec::Generated(g) = &mut c.scenario.workload {
                g.utilization = Some(u.parse().unwrap());
            }
        }
        if let Some(w) = wan {
            c.scenario.network.wan_mbps = w;
        }
        if let Ok(b) = std::env::var("BAND") {
            let v: Vec<f64> = b.split(',').map(|x| x.parse().unwrap()).collect();
            if let koalesce_sim::scenario::BackgroundSpec::Band(bs) = &mut c.scenario.background {
                bs.low = v[0];
                bs.high = v[1];
                if v.len() > 2 {
                    bs.mean_runtime_s = v[2];
                }
                if v.len() > 3 {
                    bs.organic_interarrival_s = v[3];
                }
            }
        }
        let mut runs = Vec::new();
        let mut remote = Vec::new();
        let mut overrun = Vec::new();
        for s in 1..=seeds {
            let r = engine::run(&c.scenario, s, &mut |_| {}).unwrap();
            let done: Vec<_> = r.jobs.iter().filter(|j| j.start.is_some()).collect();
            remote.push(100.0 * done.iter().filter(|j| j.ftt_ms > 0).count() as f64 / done.len().max(1) as f64);
            overrun.push(
                done.iter()
                    .map(|j| (j.start.unwrap() as f64 - (j.placed.unwrap() + j.ftt_ms) as f64) / 1000.0)
                    .sum::<f64>()
                    / done.len().max(1) as f64,
            );
            runs.push(RunMetrics::of(&r));
        }
        let a = |f: &dyn Fn(&RunMetrics) -> f64| Agg::over(&runs, f).mean;
        println!("{:16} co {:.1} spread {:.1} | usable {:.1} = {:.1}+{:.1}+{:.1} | thr {:.2} | pwt b/a {:.1} {:.1} | fail {:.1} co {:.1} single {:.1}", c.key, a(&|m| m.multi.coallocated_pct), a(&|m| m.multi.spread_pct), a(&|m| m.usable.total()), a(&|m| m.usable.background), a(&|m| m.usable.grid), a(&|m| m.usable.pwt), a(&|m| m.throughput_per_min), a(&|m| m.pwt_before_jst_s), a(&|m| m.pwt_after_jst_s), a(&|m| m.all.failure_pct), a(&|m| m.failure_pct_coallocated), a(&|m| m.failure_pct_single));
        println!(
            "{:14} | {:.1} {:.1} {:.1} {:.1} {:.1} | {:.1} {}/{} | {:.1} {:.0} {:.0} | {:.2} | {:.0} {:.1}",
            c.key,
            a(&|m| m.util.total()),
            a(&|m| m.util.background),
            a(&|m| m.util.grid),
            a(&|m| m.util.pwt),
            a(&|m| m.util.pgt),
            a(&|m| m.max_queue as f64),
            runs.iter().filter(|m| m.stable()).count(),
            runs.len(),
            a(&|m| m.all.ftt_s),
            a(&|m| m.all.twt_s),
            a(&|m| m.all.placement_s),
            a(&|m| m.all.claiming_tries),
            Agg::of(&remote).mean,
            Agg::of(&overrun).mean
        );
    }
}
