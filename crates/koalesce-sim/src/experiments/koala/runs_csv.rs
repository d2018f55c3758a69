//! `runs.csv`: one line per run, written with the `csv` crate (which quotes fields that need it,
//! e.g. a configuration label with a comma).

use super::super::measure::RunMetrics;
use super::Outcome;

/// The columns: name and how to render one run.
type Column = (&'static str, fn(&RunMetrics) -> String);

fn f(d: usize, x: f64) -> String {
    format!("{x:.d$}")
}

const COLUMNS: &[Column] = &[
    ("seed", |m| m.seed.to_string()),
    ("jobs", |m| m.jobs.to_string()),
    ("succeeded", |m| m.succeeded.to_string()),
    ("failed", |m| m.failed.to_string()),
    ("unfinished", |m| m.unfinished.to_string()),
    ("util_total", |m| f(3, m.util.total())),
    ("util_background", |m| f(3, m.util.background)),
    ("util_grid", |m| f(3, m.util.grid)),
    ("util_pwt", |m| f(3, m.util.pwt)),
    ("util_pgt", |m| f(3, m.util.pgt)),
    ("util_run_total", |m| f(3, m.util_run.total())),
    ("util_usable_total", |m| f(3, m.usable.total())),
    ("util_usable_background", |m| f(3, m.usable.background)),
    ("util_usable_grid", |m| f(3, m.usable.grid)),
    ("util_usable_pwt", |m| f(3, m.usable.pwt)),
    ("max_queue", |m| m.max_queue.to_string()),
    ("last_arrival_s", |m| f(1, m.last_arrival_s)),
    ("end_s", |m| f(1, m.end_s)),
    ("stable", |m| m.stable().to_string()),
    ("placement_s", |m| f(1, m.all.placement_s)),
    ("placement_p50_s", |m| f(1, m.placement_p50_s)),
    ("placement_p90_s", |m| f(1, m.placement_p90_s)),
    ("ftt_s", |m| f(1, m.all.ftt_s)),
    ("twt_s", |m| f(1, m.all.twt_s)),
    ("placement_tries", |m| f(3, m.all.placement_tries)),
    ("claiming_tries", |m| f(3, m.all.claiming_tries)),
    ("spread_pct", |m| f(2, m.multi.spread_pct)),
    ("coallocated_pct", |m| f(2, m.multi.coallocated_pct)),
    ("failure_pct", |m| f(2, m.all.failure_pct)),
    ("start_delay_s", |m| f(1, m.all.start_delay_s)),
    ("throughput_per_min", |m| f(3, m.throughput_per_min)),
    ("preemptions", |m| m.preemptions.to_string()),
    ("soft_errors", |m| m.soft_errors.to_string()),
    ("blacklisted", |m| {
        m.blacklisted
            .iter()
            .map(|(t, s)| format!("{s}@{t:.0}"))
            .collect::<Vec<_>>()
            .join(";")
    }),
    ("transferred_gb", |m| f(1, m.transferred_gb)),
];

/// The whole file.
pub(super) fn runs_csv(o: &Outcome) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let header: Vec<&str> = ["experiment", "config"].into_iter().chain(COLUMNS.iter().map(|c| c.0)).collect();
    // Writing into a Vec cannot fail.
    w.write_record(&header).expect("in-memory CSV");
    for (e, cs) in &o.experiments {
        for c in cs {
            for m in &c.runs {
                let row = [e.id().to_string(), c.key.clone()]
                    .into_iter()
                    .chain(COLUMNS.iter().map(|col| (col.1)(m)));
                w.write_record(row).expect("in-memory CSV");
            }
        }
    }
    String::from_utf8(w.into_inner().expect("in-memory CSV")).expect("CSV of UTF-8 fields is UTF-8")
}
