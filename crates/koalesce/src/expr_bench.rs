//! `koalesce bench expr`: the cost of evaluating compiled REQUIREMENTS / RANK expressions
//! per site, side by side with the same formula written by hand in Rust, over the same site
//! data in one run.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use koalesce_core::expr::{Compiled, Expr, HostVars, IntVar, SiteSnapshot, StrVar};

#[derive(Debug, Args)]
pub struct BenchExprArgs {
    /// Sites each expression is evaluated against per round.
    #[arg(long, default_value_t = 500)]
    pub sites: usize,
    /// Rounds over all sites (evaluations = sites × rounds).
    #[arg(long, default_value_t = 4000)]
    pub rounds: usize,
    /// Repetitions; the best is printed.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
}

fn sites(n: usize) -> Vec<SiteSnapshot> {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|i| {
            let mut s = SiteSnapshot::default();
            s.set_int(IntVar::CpuMhz, 1000 + (rnd() % 2000) as i64);
            s.set_int(IntVar::QueueFreeNodeCount, (rnd() % 64) as i64);
            s.set_int(IntVar::FreeMemMb, (rnd() % 4096) as i64);
            s.set_str(StrVar::Arch, if i % 3 == 0 { "i686" } else { "x86_64" });
            s.set_str(StrVar::Hostname, format!("site{i:03}.grid.nl"));
            s.set_str(StrVar::LrmsType, if i % 7 == 0 { "fork" } else { "slurm" });
            // Every fourth site holds a replica of "myfile" (405 MB).
            s.close_files = vec![(i % 4 == 0).then_some(405_000_000)];
            s
        })
        .collect()
}

/// Nanoseconds per evaluation of `f` over all sites, `rounds` times (best of `repeat`).
fn time(sites: &[SiteSnapshot], rounds: usize, repeat: usize, mut f: impl FnMut(&SiteSnapshot) -> i64) -> (f64, i64) {
    let mut best = f64::INFINITY;
    let mut sum = 0i64;
    for _ in 0..repeat.max(1) {
        sum = 0;
        let t = Instant::now();
        for _ in 0..rounds {
            for s in sites {
                sum = sum.wrapping_add(f(black_box(s)));
            }
        }
        best = best.min(t.elapsed().as_nanos() as f64 / (rounds * sites.len()).max(1) as f64);
    }
    (best, sum)
}

impl BenchExprArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let sites = sites(self.sites.max(1));
        type Native = fn(&SiteSnapshot) -> i64;
        let cases: [(&str, &str, Option<Native>); 4] = [
            (
                "rank 004 (c)",
                "CPU_MHZ + QUEUE_FREENODECOUNT + SIZE_CLOSE_DATA(\"myfile\") / 135",
                Some(|s| {
                    s.int(IntVar::CpuMhz) + s.int(IntVar::QueueFreeNodeCount) + s.close_file(0).map_or(0, |b| (b / 1000) as i64) / 135
                }),
            ),
            (
                "requirements",
                "ARCH = \"x86*\" & CPU_MHZ > 1000 & FREE_MEM_MB > 512",
                Some(|s| (s.str(StrVar::Arch).starts_with("x86") && s.int(IntVar::CpuMhz) > 1000 && s.int(IntVar::FreeMemMb) > 512) as i64),
            ),
            (
                "requirements 004 (b)",
                "CLOSE_DATA(\"myfile\")",
                Some(|s| s.close_file(0).is_some() as i64),
            ),
            (
                "wildcards + arithmetic",
                "(HOSTNAME = \"*.nl\" | HOSTNAME = \"vu*\") & LRMS_TYPE != \"fork\" & (CPU_MHZ * 2 + FREE_MEM_MB) / 3 > 100",
                None,
            ),
        ];
        println!(
            "bench expr: {} sites x {} rounds = {} evaluations per expression (best of {})",
            sites.len(),
            self.rounds,
            sites.len() * self.rounds,
            self.repeat
        );
        println!(
            "{:<24} {:>10} {:>12} {:>14} {:>8}",
            "expression", "compile", "eval ns", "hand-written", "ratio"
        );
        for (label, src, native) in cases {
            let t = Instant::now();
            let compiled: Compiled = Expr::compile(src).map_err(|e| anyhow::anyhow!("{}", e.render(src)))?;
            let compile_us = t.elapsed().as_secs_f64() * 1e6;
            let (ns, sum) = time(&sites, self.rounds, self.repeat, |s| compiled.eval(s).as_int());
            let (native_ns, native_sum) = match native {
                Some(f) => {
                    let (n, s) = time(&sites, self.rounds, self.repeat, f);
                    (Some(n), Some(s))
                }
                None => (None, None),
            };
            if let Some(ns2) = native_sum {
                anyhow::ensure!(ns2 == sum, "{label}: compiled and hand-written results differ ({sum} vs {ns2})");
            }
            println!(
                "{:<24} {:>8.1}us {:>12.2} {:>14} {:>8}",
                label,
                compile_us,
                ns,
                native_ns.map_or("-".to_string(), |n| format!("{n:.2}")),
                native_ns.map_or("-".to_string(), |n| format!("{:.1}x", ns / n.max(1e-9)))
            );
            // Through a trait object, as a placement scan holding `&dyn HostVars` would call it.
            if label == "rank 004 (c)" {
                let dyn_sites: Vec<&dyn HostVars> = sites.iter().map(|s| s as &dyn HostVars).collect();
                let mut best = f64::INFINITY;
                for _ in 0..self.repeat.max(1) {
                    let t = Instant::now();
                    let mut acc = 0i64;
                    for _ in 0..self.rounds {
                        for s in &dyn_sites {
                            acc = acc.wrapping_add(compiled.rank(black_box(*s)));
                        }
                    }
                    black_box(acc);
                    best = best.min(t.elapsed().as_nanos() as f64 / (self.rounds * sites.len()).max(1) as f64);
                }
                println!("{:<24} {:>10} {:>12.2}", "  via &dyn HostVars", "", best);
                println!(
                    "  => a rank on 100,000 jobs x 500 sites evaluated for every pair: {:.0} ms",
                    ns * 100_000.0 * 500.0 / 1e6
                );
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}
