//! `koalesce sim … --html` and `koalesce experiment … --html` as users run them, and the
//! report opened in a real headless Chromium: every chart is drawn with a non-empty box, the
//! Gantt rows and the summary numbers are there, nothing fails in the console. Screenshots go
//! to target/screenshots/. Without Chromium these tests fail (CI installs it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use koalesce_web::browser::Browser;

fn koalesce(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_koalesce"))
        .args(args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .expect("run koalesce")
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("koalesce-report-browser-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn out(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn sim_html_report_renders_in_chromium() {
    let dir = tmp("sim");
    let o = koalesce(&[
        "sim",
        "scenarios/das2-w30.toml",
        "--seed",
        "3",
        "--out",
        dir.to_str().unwrap(),
        "--html",
        "-q",
    ]);
    assert!(o.status.success(), "{}", out(&o));
    let report = dir.join("report.html");
    assert!(out(&o).contains(&format!("report in {}", report.display())), "{}", out(&o));
    let summary = std::fs::read_to_string(dir.join("summary.txt")).unwrap();

    let mut b = Browser::launch().expect("Chromium must be installed (apt-get install chromium)");
    b.goto(&format!("file://{}", report.display())).unwrap();
    b.wait_for("figure#bandwidth svg", Duration::from_secs(60)).unwrap();
    // Every chart laid out with a real size, inside the page's width.
    let charts = b.rects("figure.chart > svg").unwrap();
    assert_eq!(charts.len(), 10, "{charts:?}");
    for r in &charts {
        assert!(r.width > 300.0 && r.height > 100.0 && r.width <= 1280.0, "{r:?}");
    }
    // Marks drawn: bands of the utilization chart, one Gantt row per job with a visible
    // running bar, heat-map cells.
    for (css, n) in [
        ("#utilization polygon.band", 4),
        ("#jobs-gantt g.row", 200),
        ("#bandwidth rect.cell", 100),
    ] {
        let rects = b.rects(css).unwrap();
        assert_eq!(rects.len(), n, "{css}");
        assert!(rects.iter().all(|r| r.width > 0.0 && r.height > 0.0), "{css}: {rects:?}");
    }
    let running = b.rects("#jobs-gantt rect.running").unwrap();
    assert_eq!(running.len(), 200);
    assert!(running.iter().all(|r| r.width >= 0.5));
    // The numbers of summary.txt are on the page.
    let page = b.text("main").unwrap();
    assert!(page.contains("das2-w30 — CF (seed 3)"), "{page}");
    let jobs_line = summary.lines().nth(1).unwrap();
    assert!(jobs_line.starts_with("jobs 200: 200 succeeded"), "{jobs_line}");
    assert!(page.contains("200\ngrid jobs") || page.contains("200 grid jobs"), "{page}");
    // The stylesheet inline applied (cards are laid out as a grid).
    assert_eq!(
        b.eval("getComputedStyle(document.querySelector('.stats')).display").unwrap(),
        "grid"
    );
    for (css, name) in [
        ("figure#utilization", "sim-report-utilization"),
        ("figure#queues", "sim-report-queues"),
        ("figure#machine-gantt", "sim-report-machine-gantt"),
        ("h3 + .charts figure", "sim-report-job-gantt"),
        ("figure#bandwidth", "sim-report-bandwidth"),
        ("figure#utilization-per-site", "sim-report-per-site"),
        ("figure#states", "sim-report-states"),
    ] {
        b.screenshot_of(css, name).unwrap();
    }
    let shot = b.screenshot("sim-report").unwrap();
    assert!(std::fs::metadata(&shot).unwrap().len() > 10_000, "{}", shot.display());
    let errors = b.console_errors();
    assert!(errors.is_empty(), "{errors:?}");
    drop(b);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn experiment_html_report_has_verdicts_and_plots() {
    let dir = tmp("broker");
    let o = koalesce(&[
        "experiment",
        "broker",
        "--out",
        dir.to_str().unwrap(),
        "--seeds",
        "2",
        "--runs",
        "30",
        "--only",
        "tables",
        "--html",
        "-q",
    ]);
    assert!(o.status.success(), "{}", out(&o));
    let report = dir.join("broker.html");
    let mut b = Browser::launch().expect("Chromium must be installed (apt-get install chromium)");
    b.goto(&format!("file://{}", report.display())).unwrap();
    b.wait_for("#checks", Duration::from_secs(60)).unwrap();
    // One row per seed comparison, each with a verdict badge; the tally cards add up.
    let rows = b.eval("document.querySelectorAll('#checks tr').length").unwrap().as_u64().unwrap();
    let badges = b
        .eval("document.querySelectorAll('#checks .badge[class*=verdict-]').length")
        .unwrap()
        .as_u64()
        .unwrap();
    assert!(rows >= 2 && rows == badges, "{rows} rows, {badges} badges");
    let tally: u64 = b
        .eval("Array.from(document.querySelectorAll('.stat .value')).slice(0, 3).reduce((a, e) => a + Number(e.textContent), 0)")
        .unwrap()
        .as_u64()
        .unwrap();
    assert_eq!(tally, rows);
    // The Markdown tables and the plots, inline and drawn.
    assert!(b.text("main").unwrap().contains("Table I (homogeneous): seed vs koalesce"));
    let plots = b.rects(".markdown figure.chart > svg").unwrap();
    assert!(plots.len() >= 3, "{plots:?}");
    assert!(plots.iter().all(|r| r.width > 300.0 && r.height > 100.0), "{plots:?}");
    b.screenshot("experiment-broker-report").unwrap();
    assert!(b.console_errors().is_empty(), "{:?}", b.console_errors());
    drop(b);
    let _ = std::fs::remove_dir_all(dir);
}
