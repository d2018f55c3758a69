//! An experiment's self-contained HTML report: the seed-versus-koalesce comparisons with their
//! verdicts first, then every table of the generated Markdown report with its plots inline.

use koalesce_web::html::{self, Column, Table};
use maud::{html, PreEscaped, Render};

/// One seed-versus-koalesce comparison as the report lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckRow {
    /// Where the seed says it ("003 §5.1.6").
    pub reference: String,
    pub quantity: String,
    pub seed: String,
    pub koalesce: String,
    /// "yes", "partly" or "no".
    pub verdict: &'static str,
    /// What the row rests on ("text", "calibrated: not counted", …).
    pub basis: String,
    /// Whether the row counts in the tally (rows whose seed value chose a parameter do not).
    pub counted: bool,
}

/// The report page: `markdown` is the experiment's generated Markdown (every table), `plots`
/// its (file name, SVG document) pairs, inlined where the Markdown shows them.
pub fn experiment_report(title: &str, subtitle: &str, checks: &[CheckRow], markdown: &str, plots: &[(String, String)]) -> String {
    let count = |v: &str| checks.iter().filter(|c| c.counted && c.verdict == v).count();
    let uncounted = checks.iter().filter(|c| !c.counted).count();
    let mut table = Table::new(vec![
        Column::text("seed reference"),
        Column::text("quantity"),
        Column::text("seed"),
        Column::text("koalesce"),
        Column::text("basis"),
        Column::text("agrees?"),
    ])
    .id("checks");
    for c in checks {
        table.row(vec![
            html! { (c.reference) },
            html! { (c.quantity) },
            html! { (c.seed) },
            html! { (c.koalesce) },
            html! { (c.basis) },
            html::verdict_badge(c.verdict),
        ]);
    }
    let body = html! {
        (html::stats(&[
            ("seed comparisons: yes", count("yes").to_string()),
            ("partly", count("partly").to_string()),
            ("no", count("no").to_string()),
            ("rows not counted", uncounted.to_string()),
        ]))
        h2 { "Seed versus koalesce" }
        @if checks.is_empty() {
            p.muted { "No seed comparison in this run (its parts have none)." }
        } @else {
            (table.render())
        }
        h2 { "Every table" }
        div.markdown { (PreEscaped(super::markdown::to_html(markdown, plots))) }
    };
    html::report_page(title, subtitle, body).into_string()
}
