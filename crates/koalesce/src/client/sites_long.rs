//! `koalesce sites --long`: each site as a GLUE-style record (001 §2: resource information
//! normalized to a GLUE-like model), from what `GET /api/v1/sites` publishes.
//!
//! | block | GLUE 2.0 entity | fields |
//! |---|---|---|
//! | `ComputingService` | ComputingService / Manager | kind (LRM), reservations, state |
//! | `ComputingShare` | ComputingShare (the queue) | processors total / free / used / placed, estimated wait |
//! | `ExecutionEnvironment` | ExecutionEnvironment | architecture, OS, CPU model and clock, memory, disk, speed |
//! | `Benchmark` | Benchmark | score per benchmark name |
//! | `ApplicationEnvironment` | ApplicationEnvironment | software tags |

use std::fmt::Write;

use koalesce_api::dto::SiteInfo;

use super::format::{escape, format_duration_ms};

/// The records of every site, separated by blank lines.
pub fn sites_long(sites: &[SiteInfo]) -> String {
    let mut out = String::new();
    for (i, s) in sites.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        site_long(&mut out, s);
    }
    out
}

fn site_long(out: &mut String, s: &SiteInfo) {
    let host = |k: &str| s.host.get(k).map(|v| escape(v)).filter(|v| !v.is_empty() && v != "0");
    let or_unknown = |v: Option<String>| v.unwrap_or_else(|| "(not published)".into());
    let state = match (s.blacklisted, s.banned_until_ms) {
        (true, _) => "blacklisted",
        (false, Some(_)) => "banned for gridway jobs",
        _ => "ok",
    };
    let _ = writeln!(out, "Site: {}", escape(&s.name));
    let _ = writeln!(
        out,
        "  ComputingService: LRM {}, advance reservations {}, state {state}",
        escape(&s.kind),
        if s.supports_reservations { "yes" } else { "no" }
    );
    let wait = match s.queue_wait_ms {
        Some(ms) => format_duration_ms(ms as i64),
        None => "(no estimate)".into(),
    };
    let _ = writeln!(
        out,
        "  ComputingShare: TotalCPUs {}, FreeCPUs {}, UsedCPUs {}, PlacedCPUs {}, EstimatedWaitingTime {wait}",
        s.processors, s.idle, s.used, s.placed_unclaimed
    );
    let os = match (host("OS_NAME"), host("OS_VERSION")) {
        (Some(n), Some(v)) => Some(format!("{n} {v}")),
        (n, _) => n,
    };
    let mem = host("SIZE_MEM_MB").map(|m| format!("{m} MB"));
    let mhz = host("CPU_MHZ").map(|m| format!("{m} MHz"));
    let _ = writeln!(
        out,
        "  ExecutionEnvironment: Platform {}, OS {}, CPUModel {}, CPUClockSpeed {}, MainMemorySize {}, Speed {}",
        or_unknown(host("ARCH")),
        or_unknown(os),
        or_unknown(host("CPU_MODEL")),
        or_unknown(mhz),
        or_unknown(mem),
        s.speed
    );
    if !s.benchmarks.is_empty() {
        let b: Vec<String> = s.benchmarks.iter().map(|(k, v)| format!("{}={v}", escape(k))).collect();
        let _ = writeln!(out, "  Benchmark: {}", b.join(", "));
    }
    if !s.software.is_empty() {
        let sw: Vec<String> = s.software.iter().map(|x| escape(x)).collect();
        let _ = writeln!(out, "  ApplicationEnvironment: {}", sw.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_site_as_glue_records() {
        let mut s = SiteInfo {
            name: "vu".into(),
            kind: "local".into(),
            processors: 8,
            idle: 2,
            used: 6,
            supports_reservations: true,
            queue_wait_ms: Some(90_000),
            speed: 2.0,
            ..Default::default()
        };
        s.host.insert("ARCH".into(), "x86_64".into());
        s.host.insert("OS_NAME".into(), "Linux".into());
        s.host.insert("OS_VERSION".into(), "6.1".into());
        s.host.insert("SIZE_MEM_MB".into(), "2048".into());
        s.host.insert("CPU_MHZ".into(), "0".into());
        s.benchmarks.insert("linpack".into(), 150.0);
        let text = sites_long(&[
            s.clone(),
            SiteInfo {
                name: "evil\x1b[2J".into(),
                ..Default::default()
            },
        ]);
        assert!(text.contains("Site: vu\n"), "{text}");
        assert!(text.contains("LRM local, advance reservations yes, state ok"), "{text}");
        assert!(
            text.contains("TotalCPUs 8, FreeCPUs 2, UsedCPUs 6, PlacedCPUs 0, EstimatedWaitingTime 1m30s"),
            "{text}"
        );
        assert!(
            text.contains(
                "Platform x86_64, OS Linux 6.1, CPUModel (not published), CPUClockSpeed (not published), MainMemorySize 2048 MB, Speed 2"
            ),
            "{text}"
        );
        assert!(text.contains("Benchmark: linpack=150"), "{text}");
        assert!(text.contains("EstimatedWaitingTime (no estimate)"), "{text}");
        assert!(!text.contains('\x1b'), "control characters are escaped: {text:?}");
    }
}
