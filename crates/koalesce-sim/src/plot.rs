//! SVG charts for the experiment reports, as standalone `.svg` files.
//!
//! The charts themselves are `koalesce_web::chart`'s (hand-made, shared with the dashboard and
//! the HTML reports, so that a plot looks the same everywhere); this module writes them as
//! documents with the XML declaration. Every function returns a complete standalone SVG
//! document (800x400 px) with a title, axes with "round" tick values, light grid lines, a
//! legend on the right and tooltips. Non-finite values are skipped, and an input without any
//! usable data yields a valid chart that says "no data" instead of panicking.

use koalesce_web::chart;

pub use koalesce_web::chart::escape_xml;

/// Stacked area chart (see [`koalesce_web::chart::stacked_area_svg`]).
pub fn stacked_area_svg(
    title: &str,
    x_label: &str,
    y_label: &str,
    xs: &[f64],
    series: &[(String, Vec<f64>)],
    y_max: Option<f64>,
) -> String {
    chart::stacked_area_svg(title, x_label, y_label, xs, series, y_max).to_document()
}

/// Line chart (see [`koalesce_web::chart::line_svg`]).
pub fn line_svg(title: &str, x_label: &str, y_label: &str, series: &[(String, Vec<(f64, f64)>)]) -> String {
    chart::line_svg(title, x_label, y_label, series).to_document()
}

/// Grouped bar chart with optional error bars (see [`koalesce_web::chart::grouped_bar_svg`]).
pub fn grouped_bar_svg(
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
    error_bars: Option<&[Vec<f64>]>,
) -> String {
    chart::grouped_bar_svg(title, y_label, categories, series, error_bars).to_document()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_standalone_svg_documents() {
        let cats = vec!["a".to_string()];
        for doc in [
            stacked_area_svg("t", "x", "y", &[0.0, 1.0], &[("s".into(), vec![1.0, 2.0])], None),
            line_svg("t", "x", "y", &[("s".into(), vec![(0.0, 1.0), (1.0, 2.0)])]),
            grouped_bar_svg("t", "y", &cats, &[("s".into(), vec![1.0])], None),
        ] {
            assert!(doc.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\""));
            assert!(doc.ends_with("</svg>\n"));
        }
    }
}
