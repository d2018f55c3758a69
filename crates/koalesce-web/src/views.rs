//! The charts as koalesce shows them: fixed titles, names, units and colours over plain
//! inputs, so that the simulation reports and the live dashboard draw the same pictures.
//! Callers map their own types (the simulator's job records, the API's `JobDetail` and
//! `SiteInfo`) into [`JobView`], [`SiteProcessors`] and plain series.

use crate::chart::{
    self, fmt_duration, gantt_svg, job_spans, machine_gantt_svg, Bar, Gantt, GanttRow, JobTimes, MachineBar, Outcome, Phase, Span, Stack,
    Svg,
};

/// A job as the charts need it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobView {
    pub id: u64,
    pub name: String,
    /// The API's state name: queued, placed, claimed, running, succeeded, failed, cancelled.
    pub state: String,
    pub times: JobTimes,
    pub components: Vec<ComponentView>,
}

/// One component of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentView {
    pub site: Option<String>,
    pub processors: u32,
}

impl JobView {
    /// The figures of 003 §4.1 that are known: FTT, PGT (JCT − JPT), PWT (JST − JCT), TWT
    /// (start − submission).
    pub fn figures(&self) -> Vec<(&'static str, String)> {
        let t = &self.times;
        let mut out = Vec::with_capacity(4);
        if t.placed.is_some() {
            out.push(("FTT", fmt_duration(t.ftt_ms)));
        }
        if let (Some(p), Some(c)) = (t.placed, t.claimed) {
            out.push(("PGT", fmt_duration(c.saturating_sub(p))));
        }
        if let (Some(c), Some(s)) = (t.claimed, t.started) {
            out.push(("PWT", fmt_duration(s.saturating_sub(c))));
        }
        if let Some(s) = t.started {
            out.push(("TWT", fmt_duration(s.saturating_sub(t.submitted))));
        }
        out
    }

    fn outcome(&self) -> Option<Outcome> {
        Outcome::of_state(&self.state)
    }

    fn label(&self) -> String {
        if self.name.is_empty() {
            format!("job {}", self.id)
        } else {
            format!("{} {}", self.id, self.name)
        }
    }
}

/// Utilization over time in % of all processors, stacked as the seeds plot it (003 Fig. 5.1):
/// background (local jobs), grid load, PWT (claimed, waiting at the start barrier), PGT
/// (placed, not yet claimed).
pub fn utilization(title: &str, minutes: &[f64], background: &[f64], grid: &[f64], pwt: &[f64], pgt: &[f64]) -> Svg {
    chart::stacked_area_svg(
        title,
        "time (min)",
        "utilization (%)",
        minutes,
        &[
            ("background".to_string(), background.to_vec()),
            ("grid load".to_string(), grid.to_vec()),
            ("PWT".to_string(), pwt.to_vec()),
            ("PGT".to_string(), pgt.to_vec()),
        ],
        Some(100.0),
    )
}

/// The names of the four placement queues, highest priority first.
pub const QUEUES: [&str; 4] = ["super-high", "high", "low", "super-low"];

/// Jobs in the four placement queues over time, stacked (highest priority at the bottom).
pub fn queue_lengths(title: &str, minutes: &[f64], queues: &[Vec<f64>; 4]) -> Svg {
    let series: Vec<(String, Vec<f64>)> = QUEUES.iter().zip(queues).map(|(n, v)| (n.to_string(), v.clone())).collect();
    chart::stacked_area_svg(title, "time (min)", "jobs waiting for placement", minutes, &series, None)
}

/// Processors of one site as the overview shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteProcessors {
    pub name: String,
    /// Used by the site's own (local) jobs.
    pub used: u64,
    /// Held by koalesce's components (claimed or running).
    pub claimed: u64,
    pub idle: u64,
    /// The site is blacklisted: all its processors are shown as such.
    pub blacklisted: bool,
}

/// Processors per site: used by local jobs, claimed by koalesce, idle, blacklisted.
pub fn site_processors(title: &str, sites: &[SiteProcessors]) -> Svg {
    let names: Vec<String> = sites.iter().map(|s| s.name.clone()).collect();
    let pick = |f: &dyn Fn(&SiteProcessors) -> u64, black: bool| -> Vec<f64> {
        sites
            .iter()
            .map(|s| if s.blacklisted == black { f(s) as f64 } else { 0.0 })
            .collect()
    };
    let stacks = vec![
        Stack {
            name: "used (local jobs)".into(),
            color: "#0072B2",
            values: pick(&|s| s.used, false),
        },
        Stack {
            name: "claimed by koalesce".into(),
            color: Phase::Running.color(),
            values: pick(&|s| s.claimed, false),
        },
        Stack {
            name: "idle".into(),
            color: "#DDDDDD",
            values: pick(&|s| s.idle, false),
        },
        Stack {
            name: "blacklisted".into(),
            color: "#D55E00",
            values: pick(&|s| s.used + s.claimed + s.idle, true),
        },
    ];
    chart::stacked_hbar_svg(title, "processors", &names, &stacks, None)
}

/// Jobs per state, one bar each in the states' colours (zero counts included, so that the
/// chart always shows the same states in the same order).
pub fn state_counts(title: &str, counts: &[(&str, u64)]) -> Svg {
    let bars: Vec<Bar> = counts
        .iter()
        .map(|&(s, n)| Bar {
            label: s.to_string(),
            value: n as f64,
            color: chart::state_color(s),
        })
        .collect();
    chart::hbar_svg(title, "jobs", &bars)
}

/// The timeline of one job: one row per component and site, its phases coloured, FTT / PGT /
/// PWT / TWT under the title, a "now" line while it has not ended. Components share the job's
/// timeline (placement and claiming are per job, 003 §4.1).
pub fn job_gantt(job: &JobView, now_ms: u64) -> Svg {
    let spans = job_spans(&job.times, now_ms);
    let rows: Vec<GanttRow> = job
        .components
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let site = c.site.as_deref().unwrap_or("unplaced");
            GanttRow {
                label: format!("c{i} @ {site}"),
                tooltip: format!("component {i}, {} processors at {site}", c.processors),
                spans: spans.clone(),
                outcome: job.outcome(),
            }
        })
        .collect();
    let figures = job.figures();
    let figures: Vec<(&str, String)> = figures.into_iter().collect();
    gantt_svg(&Gantt {
        title: &format!("Job {}: {}", job.label(), job.state),
        origin_ms: job.times.submitted,
        origin_label: "since submission",
        now_ms: job.times.finished.is_none().then_some(now_ms),
        figures: &figures,
        rows: &rows,
    })
}

/// Many jobs, one row each (the first `cap`; the caption should say when more were left out),
/// on a common time axis from `origin_ms`.
pub fn jobs_gantt(title: &str, jobs: &[JobView], cap: usize, origin_ms: u64, origin_label: &str, now_ms: u64) -> Svg {
    let rows: Vec<GanttRow> = jobs
        .iter()
        .take(cap)
        .map(|j| GanttRow {
            label: j.label(),
            tooltip: format!(
                "job {} ({} × {})",
                j.label(),
                j.components.len(),
                j.components.first().map(|c| c.processors).unwrap_or(0)
            ),
            spans: job_spans(&j.times, now_ms),
            outcome: j.outcome(),
        })
        .collect();
    let open = jobs.iter().take(cap).any(|j| j.times.finished.is_none());
    gantt_svg(&Gantt {
        title,
        origin_ms,
        origin_label,
        now_ms: open.then_some(now_ms),
        figures: &[],
        rows: &rows,
    })
}

/// The machine: each component of each job as a bar at its site from its claim to its end
/// (claimed, then running), in lanes; jobs not claimed yet are not on the machine.
pub fn machine_gantt(title: &str, sites: &[String], jobs: &[JobView], origin_ms: u64, origin_label: &str, now_ms: u64) -> Svg {
    let mut bars = Vec::new();
    for j in jobs {
        let t = &j.times;
        let Some(claimed) = t.claimed.or(t.started) else { continue };
        let end = t.finished.unwrap_or(now_ms);
        let mut spans = Vec::with_capacity(2);
        let start = t.started.unwrap_or(end).max(claimed);
        if start > claimed {
            spans.push(Span {
                phase: Phase::Claimed,
                from_ms: claimed,
                to_ms: start.min(end),
            });
        }
        if end > start {
            spans.push(Span {
                phase: Phase::Running,
                from_ms: start,
                to_ms: end,
            });
        }
        if spans.is_empty() {
            continue;
        }
        for (i, c) in j.components.iter().enumerate() {
            let Some(site) = c.site.as_ref().and_then(|s| sites.iter().position(|x| x == s)) else {
                continue;
            };
            bars.push(MachineBar {
                site,
                label: j.id.to_string(),
                tooltip: format!("job {} component {i}, {} processors at {}", j.label(), c.processors, sites[site]),
                spans: spans.clone(),
            });
        }
    }
    machine_gantt_svg(title, sites, &bars, origin_ms, origin_label)
}

/// Forecast bandwidth between sites in Mbit/s (`None`: no forecast, e.g. a site to itself).
pub fn bandwidth(title: &str, sites: &[String], mbps: &[Vec<Option<f64>>]) -> Svg {
    chart::heatmap_svg(title, sites, mbps, "Mbit/s")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::test_util::{count_class, parse, texts};

    fn job(id: u64, state: &str, finished: Option<u64>) -> JobView {
        JobView {
            id,
            name: format!("j{id}"),
            state: state.into(),
            times: JobTimes {
                submitted: 0,
                placed: Some(10_000),
                claimed: Some(40_000),
                started: Some(45_000),
                finished,
                ftt_ms: 35_000,
            },
            components: vec![
                ComponentView {
                    site: Some("vu".into()),
                    processors: 16,
                },
                ComponentView {
                    site: Some("delft".into()),
                    processors: 16,
                },
            ],
        }
    }

    #[test]
    fn job_gantt_shows_components_and_figures() {
        let j = job(7, "succeeded", Some(100_000));
        assert_eq!(
            j.figures(),
            [
                ("FTT", "35.0 s".to_string()),
                ("PGT", "30.0 s".to_string()),
                ("PWT", "5.0 s".to_string()),
                ("TWT", "45.0 s".to_string())
            ]
        );
        let doc_svg = job_gantt(&j, 0);
        let doc = parse(&doc_svg);
        let t = texts(&doc);
        assert!(t.iter().any(|x| x == "c0 @ vu") && t.iter().any(|x| x == "c1 @ delft"), "{t:?}");
        assert!(t.iter().any(|x| x == "Job 7 j7: succeeded"));
        assert_eq!(count_class(&doc, "line", "now"), 0);
        // A running job has a now line.
        let svg = job_gantt(&job(8, "running", None), 60_000);
        assert_eq!(count_class(&parse(&svg), "line", "now"), 1);
    }

    #[test]
    fn machine_gantt_puts_components_at_their_sites() {
        let sites: Vec<String> = ["vu", "delft", "leiden"].map(String::from).to_vec();
        let mut queued = job(3, "queued", None);
        queued.times.placed = None;
        queued.times.claimed = None;
        queued.times.started = None;
        let jobs = vec![job(1, "succeeded", Some(100_000)), job(2, "running", None), queued];
        let doc_svg = machine_gantt("machine", &sites, &jobs, 0, "since the start", 80_000);
        let doc = parse(&doc_svg);
        // Two jobs on the machine × two components; the queued job is not.
        assert_eq!(count_class(&doc, "g", "job"), 4);
        assert_eq!(count_class(&doc, "rect", "claimed"), 4);
        assert_eq!(count_class(&doc, "rect", "site-band"), 3);
        let jobs_doc = jobs_gantt("jobs", &jobs, 2, 0, "since the start", 80_000);
        assert_eq!(count_class(&parse(&jobs_doc), "g", "row"), 2);
    }

    #[test]
    fn overview_charts() {
        let sites = vec![
            SiteProcessors {
                name: "vu".into(),
                used: 40,
                claimed: 64,
                idle: 40,
                blacklisted: false,
            },
            SiteProcessors {
                name: "delft".into(),
                used: 10,
                claimed: 0,
                idle: 54,
                blacklisted: true,
            },
        ];
        let doc_svg = site_processors("Processors", &sites);
        let doc = parse(&doc_svg);
        assert_eq!(count_class(&doc, "rect", "segment"), 4);
        assert!(texts(&doc).iter().any(|t| t == "144"));
        let doc_svg = state_counts("Jobs", &[("queued", 3), ("running", 0), ("succeeded", 10)]);
        assert_eq!(count_class(&parse(&doc_svg), "rect", "bar"), 3);
        let q = [vec![1.0, 2.0], vec![0.0, 1.0], vec![0.0, 0.0], vec![3.0, 0.0]];
        let doc_svg = queue_lengths("Queues", &[0.0, 1.0], &q);
        let doc = parse(&doc_svg);
        assert_eq!(count_class(&doc, "polygon", "band"), 4);
        for name in QUEUES {
            assert!(texts(&doc).iter().any(|t| t == name));
        }
        let u = utilization("Util", &[0.0, 1.0], &[10.0, 20.0], &[5.0, 5.0], &[1.0, 1.0], &[2.0, 2.0]);
        assert_eq!(count_class(&parse(&u), "polygon", "band"), 4);
        let bw = bandwidth("bw", &["a".into(), "b".into()], &[vec![None, Some(100.0)], vec![Some(50.0), None]]);
        assert_eq!(count_class(&parse(&bw), "rect", "cell"), 4);
    }
}
