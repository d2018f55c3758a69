//! The self-contained HTML report of a run (`koalesce sim … --html`): it parses as HTML without
//! a single parse error (html5ever, the HTML5 parsing algorithm), has every chart with the
//! numbers of the run, caps the Gantt charts of big runs and says so.

use std::path::PathBuf;

use koalesce_sim::engine::{self, SimResult};
use koalesce_sim::html::{run_report, GANTT_JOBS};
use koalesce_sim::metrics;
use koalesce_sim::scenario::{Scenario, WorkloadSpec};
use scraper::{Html, Selector};

fn das2(jobs: Option<usize>) -> Scenario {
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/das2-w30.toml"));
    let mut s = Scenario::load(&path).unwrap();
    if let (Some(n), WorkloadSpec::Generated(g)) = (jobs, &mut s.workload) {
        g.jobs = Some(n);
    }
    s
}

#[test]
fn the_parse_error_check_can_fail() {
    assert!(!Html::parse_document("<!DOCTYPE html><p></div><figure></p>").errors.is_empty());
}

fn report(s: &Scenario, seed: u64) -> (SimResult, metrics::Report, Html, String) {
    let r = engine::run(s, seed, &mut |_| {}).unwrap();
    let rep = metrics::report(&r);
    let page = run_report(&r, &rep);
    let doc = Html::parse_document(&page);
    assert!(doc.errors.is_empty(), "HTML parse errors: {:?}", doc.errors);
    (r, rep, doc, page)
}

fn count(doc: &Html, css: &str) -> usize {
    doc.select(&Selector::parse(css).unwrap()).count()
}

fn text(doc: &Html, css: &str) -> String {
    doc.select(&Selector::parse(css).unwrap())
        .map(|e| e.text().collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn report_has_every_chart_and_the_runs_numbers() {
    let (r, rep, doc, page) = report(&das2(None), 1);
    for id in [
        "utilization",
        "utilization-per-site",
        "queues",
        "states",
        "jobs-gantt",
        "machine-gantt",
        "bandwidth",
    ] {
        assert_eq!(count(&doc, &format!("figure#{id} > svg")), 1, "chart {id}");
    }
    // Seven charts, and the timelines of the three jobs that waited longest.
    assert_eq!(count(&doc, "figure.chart > svg"), 7 + 3);
    assert_eq!(count(&doc, "svg.chart-gantt"), 1 + 3);
    assert!(!page.contains("NaN") && !page.contains("inf<"));
    // Self-contained: no script, no stylesheet or image fetched from anywhere.
    assert_eq!(count(&doc, "script, link[rel=stylesheet], img"), 0);
    assert_eq!(count(&doc, "style"), 1);
    // The run's numbers: headline cards and the summary table from the same Report.
    let cards = text(&doc, ".stat");
    assert!(cards.contains(&format!("{}grid jobs", r.jobs.len())), "{cards}");
    assert!(cards.contains(&format!("{}succeeded", rep.succeeded)), "{cards}");
    assert!(cards.contains(&format!("{:.1}%utilization", rep.util_total())), "{cards}");
    let table = text(&doc, "table");
    let twt = rep.twt_s.as_ref().unwrap();
    assert!(
        table.contains(&format!("{:.1}", twt.mean)) && table.contains(&format!("{:.1}", twt.max)),
        "{table}"
    );
    for s in &rep.shapes {
        assert!(table.contains(&s.shape), "shape {}", s.shape);
    }
    // 200 jobs: all in the Gantt, every job's row with its phases; every site in the machine
    // and the heat map (5 clusters and 5 file servers: 100 cells).
    assert_eq!(r.jobs.len(), GANTT_JOBS);
    assert_eq!(count(&doc, "#jobs-gantt g.row"), 200);
    assert!(text(&doc, "figure#jobs-gantt figcaption").contains("All 200 jobs."));
    assert_eq!(count(&doc, "#jobs-gantt rect.running"), 200);
    assert_eq!(count(&doc, "#machine-gantt rect.site-band"), 5);
    let components: usize = r.jobs.iter().map(|j| j.placement.len()).sum();
    assert_eq!(count(&doc, "#machine-gantt g.job"), components);
    assert_eq!(count(&doc, "#bandwidth rect.cell"), 100);
    // Per-state bars: all 200 succeeded.
    assert!(text(&doc, "#states").contains("200"));
    // The queue chart's four queues.
    let q = text(&doc, "#queues");
    for name in ["super-high", "high", "low", "super-low"] {
        assert!(q.contains(name), "{name}");
    }
}

#[test]
fn big_runs_cap_the_gantt_charts_and_say_so() {
    let (r, _, doc, _) = report(&das2(Some(260)), 2);
    assert_eq!(r.jobs.len(), 260);
    assert_eq!(count(&doc, "#jobs-gantt g.row"), GANTT_JOBS);
    let caption = text(&doc, "figure#jobs-gantt figcaption");
    assert!(caption.contains("The first 200 of 260 jobs"), "{caption}");
    assert!(text(&doc, "figure#machine-gantt figcaption").contains("The first 200 of 260 jobs"));
}

#[test]
fn same_seed_same_report() {
    let s = das2(Some(40));
    assert_eq!(report(&s, 5).3, report(&s, 5).3);
}

#[test]
fn koala_experiment_report_has_the_verdicts_every_table_and_the_plots() {
    use koalesce_sim::experiments::koala::{self, Exp, Options};
    let opts = Options {
        seeds: vec![1, 2],
        scale: 0.25,
    };
    let outcome = koala::run(&[Exp::Stable], &opts, &|_, _, _| {});
    let page = koala::html(&outcome);
    let doc = Html::parse_document(&page);
    assert!(doc.errors.is_empty(), "HTML parse errors: {:?}", doc.errors);
    // One row per seed comparison, each with its verdict as a badge; the cards give the tally.
    let checks = koala::checks(&outcome);
    assert!(!checks.is_empty());
    assert_eq!(count(&doc, "#checks tr"), checks.len());
    assert_eq!(count(&doc, "#checks .badge"), checks.len());
    let (yes, partly, no, uncounted) = koala::tally(&checks);
    let cards = text(&doc, ".stat");
    for (n, label) in [
        (yes, "seed comparisons: yes"),
        (partly, "partly"),
        (no, "no"),
        (uncounted, "rows not counted"),
    ] {
        assert!(cards.contains(&format!("{n}{label}")), "{n} {label} in {cards}");
    }
    // Every Markdown table is there, and every plot the Markdown shows is inline (no <img>).
    let md = koala::markdown(&outcome);
    let tables = md.lines().filter(|l| l.starts_with("|---")).count();
    assert_eq!(count(&doc, ".markdown table"), tables);
    let images = md.lines().filter(|l| l.starts_with("![")).count();
    assert!(images > 0);
    assert_eq!(count(&doc, ".markdown figure.chart > svg"), images);
    assert_eq!(count(&doc, "img, script"), 0);
    // The verdict columns of the Markdown tables are badges too.
    assert!(count(&doc, ".markdown .badge") >= checks.iter().filter(|c| c.exp == Exp::Stable).count());
}
