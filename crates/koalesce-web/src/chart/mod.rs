//! Hand-made SVG charts: pure functions from data to one `<svg>` element.
//!
//! Hand-made rather than a plotting crate because the charts are few and specific (a Gantt of
//! a co-allocated job's phases, a machine Gantt, a bandwidth heat map), must be inlined many
//! times in one HTML page (no ids that collide: clipping uses nested viewports), must render in
//! milliseconds on the server at every page view, and must be byte-identical for one seed. The
//! whole module is a few hundred lines without dependencies.
//!
//! Every chart has a title (also its `<title>` tooltip and `aria-label`), readable axes with
//! round ticks, a legend, and `<title>` tooltips on its marks. Text is XML-escaped; non-finite
//! values are skipped; input without usable data gives a valid chart saying "no data". Colours
//! come from the Okabe–Ito palette, which people with the common colour-vision deficiencies can
//! tell apart (the heat map uses a viridis-like sequential scale).
//!
//! | chart | function |
//! |---|---|
//! | stacked areas over x (utilization, queue lengths) | [`stacked_area_svg`] |
//! | lines | [`line_svg`] |
//! | grouped bars with error bars | [`grouped_bar_svg`] |
//! | one bar per category (per-state counts) | [`hbar_svg`] |
//! | stacked bars per category (processors per site) | [`stacked_hbar_svg`] |
//! | Gantt of one job (rows = components) or of many jobs (rows = jobs) | [`gantt_svg`] |
//! | Gantt of the machine: jobs over time per site | [`machine_gantt_svg`] |
//! | heat map of a square matrix (forecast bandwidth between sites) | [`heatmap_svg`] |

mod bars;
mod frame;
mod gantt;
mod heatmap;
mod xy;

use std::fmt;

pub use bars::{hbar_svg, stacked_hbar_svg, Bar, Stack};
pub use frame::fmt_value;
pub use gantt::{fmt_duration, gantt_svg, job_spans, machine_gantt_svg, Gantt, GanttRow, JobTimes, MachineBar, Outcome, Phase, Span};
pub use heatmap::heatmap_svg;
pub use xy::{grouped_bar_svg, line_svg, stacked_area_svg};

/// One chart: an `<svg>` element (without XML declaration, so that it can be inlined in
/// HTML). Built only by this module, which escapes every text it puts in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Svg(String);

impl Svg {
    /// The `<svg>` element.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }

    /// A standalone `.svg` file: the XML declaration, then the element.
    pub fn to_document(&self) -> String {
        format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n{}", self.0)
    }
}

impl fmt::Display for Svg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl maud::Render for Svg {
    fn render_to(&self, buffer: &mut String) {
        // Markup built by this module: every text in it is escaped.
        buffer.push_str(&self.0);
    }
}

/// Colour-blind friendly qualitative palette (Okabe-Ito, then Tableau).
pub const PALETTE: [&str; 12] = [
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000", "#8C564B", "#7F7F7F", "#BCBD22", "#17BECF",
];

pub(crate) fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// Dash pattern so that series still differ once the palette wraps around.
pub(crate) fn dash(i: usize) -> &'static str {
    match (i / PALETTE.len()) % 3 {
        0 => "",
        1 => " stroke-dasharray=\"6 3\"",
        _ => " stroke-dasharray=\"2 2\"",
    }
}

/// The colour of a job state as the API names it (`queued`, `placed`, `claimed`, `running`,
/// `succeeded`, `failed`, `cancelled`); the stylesheet's `.state-…` badges use the same.
pub fn state_color(state: &str) -> &'static str {
    match state {
        "queued" => Phase::Queued.color(),
        "placed" | "reserved" => Phase::Placed.color(),
        "staging" => Phase::Staging.color(),
        "claimed" => Phase::Claimed.color(),
        "running" => Phase::Running.color(),
        "succeeded" | "finished" => "#0072B2",
        "failed" => "#D55E00",
        "cancelled" | "aborted" => "#7F7F7F",
        _ => "#BBBBBB",
    }
}

/// Escapes text for XML character data and attribute values (control characters other than
/// tab and newline, not allowed in XML 1.0, become spaces).
pub fn escape_xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\t' && c != '\n' && c != '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod test_util {
    /// Parses `svg` with a real XML parser and checks what every chart must have: one `<svg>`
    /// root in the SVG namespace with a size, a `<title>`, and no non-finite number anywhere.
    pub fn parse(svg: &super::Svg) -> roxmltree::Document<'_> {
        let s = svg.as_str();
        let doc = roxmltree::Document::parse(s).unwrap_or_else(|e| panic!("not well-formed XML: {e}\n{s}"));
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "svg");
        assert_eq!(root.tag_name().namespace(), Some("http://www.w3.org/2000/svg"));
        assert!(root.attribute("viewBox").is_some());
        assert!(root.children().any(|c| c.has_tag_name("title")), "no <title> on the chart");
        for bad in ["NaN", "inf", "Infinity"] {
            assert!(!s.contains(bad), "{bad} in the chart:\n{s}");
        }
        doc
    }

    /// Elements named `name` whose `class` attribute contains `class`.
    pub fn count_class(doc: &roxmltree::Document, name: &str, class: &str) -> usize {
        doc.descendants()
            .filter(|n| n.has_tag_name(name) && n.attribute("class").is_some_and(|c| c.split(' ').any(|x| x == class)))
            .count()
    }

    /// Every `<text>` content, in document order.
    pub fn texts(doc: &roxmltree::Document) -> Vec<String> {
        doc.descendants()
            .filter(|n| n.has_tag_name("text"))
            .map(|n| n.text().unwrap_or("").to_string())
            .collect()
    }

    /// Every `<title>` content (tooltips), in document order.
    pub fn tooltips(doc: &roxmltree::Document) -> Vec<String> {
        doc.descendants()
            .filter(|n| n.has_tag_name("title"))
            .map(|n| n.text().unwrap_or("").to_string())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_text() {
        assert_eq!(escape_xml("a<b & c>\"d'"), "a&lt;b &amp; c&gt;&quot;d&apos;");
        assert_eq!(escape_xml("x\u{1}y"), "x y");
    }

    #[test]
    fn documents_carry_the_declaration_and_inline_does_not() {
        let svg = line_svg("t", "x", "y", &[("s".into(), vec![(0.0, 1.0), (1.0, 2.0)])]);
        assert!(svg.as_str().starts_with("<svg "));
        assert!(svg.to_document().starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg "));
        roxmltree::Document::parse(&svg.to_document()).unwrap();
        assert_eq!(maud::html! { (svg) }.into_string(), svg.as_str());
    }

    #[test]
    fn state_colours_distinguish_the_states() {
        let states = ["queued", "placed", "claimed", "running", "succeeded", "failed", "cancelled"];
        let mut colours: Vec<&str> = states.iter().map(|s| state_color(s)).collect();
        colours.sort();
        colours.dedup();
        assert_eq!(colours.len(), states.len());
    }
}
