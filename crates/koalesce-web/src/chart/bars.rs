//! Horizontal bar charts: one bar per category (per-state counts), and stacked bars per
//! category (processors of each site: idle / used / claimed by koalesce / blacklisted).

use std::fmt::Write as _;

use super::frame::{fmt_value, footer, header, label, legend_row, nice_range, no_data, Axes, Frame};
use super::{escape_xml, Svg};

/// One bar: its category label, value and colour.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub color: &'static str,
}

/// One layer of a stacked bar chart: its name, colour and value per category.
#[derive(Debug, Clone, PartialEq)]
pub struct Stack {
    pub name: String,
    pub color: &'static str,
    pub values: Vec<f64>,
}

const ROW_H: f64 = 26.0;
const MAX_ROWS: usize = 60;

/// The frame of a horizontal bar chart with `rows` categories.
fn frame(rows: usize, legend: bool) -> Frame {
    let top = if legend { 62.0 } else { 40.0 };
    let bottom = top + rows as f64 * ROW_H;
    Frame {
        w: 800.0,
        h: bottom + 48.0,
        left: 160.0,
        right: 720.0,
        top,
        bottom,
    }
}

/// Vertical grid lines and x tick labels below the bars, the x axis title, and a note when
/// categories were left out.
fn x_axis(out: &mut String, ax: &Axes, step: f64, x_label: &str, left_out: usize) {
    let f = &ax.f;
    let ticks = super::frame::ticks(ax.x_lo, ax.x_hi, step);
    let tf = super::frame::TickFmt::new(&ticks, step);
    for &v in &ticks {
        let x = ax.px(v);
        let _ = writeln!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#e5e5e5\"/><text class=\"tick\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            f.top,
            f.bottom,
            f.bottom + 16.0,
            escape_xml(&tf.fmt(v))
        );
    }
    let _ = writeln!(
        out,
        "<line x1=\"{l}\" y1=\"{}\" x2=\"{l}\" y2=\"{}\" stroke=\"#333333\"/><text class=\"axis-label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
        f.top,
        f.bottom,
        f.mid_x(),
        f.bottom + 36.0,
        label(x_label, 90),
        l = f.left
    );
    if left_out > 0 {
        let _ = writeln!(
            out,
            "<text class=\"note\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#555555\">… {left_out} more not shown</text>",
            f.right,
            f.bottom + 36.0
        );
    }
}

fn row_label(out: &mut String, f: &Frame, row: usize, text: &str) {
    let _ = writeln!(
        out,
        "<text class=\"category\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
        f.left - 8.0,
        f.top + row as f64 * ROW_H + ROW_H / 2.0 + 4.0,
        label(text, 22)
    );
}

/// One horizontal bar per category with its value printed at its end (e.g. jobs per state).
/// Negative and non-finite values draw no bar; at most 60 categories are shown.
pub fn hbar_svg(title: &str, x_label: &str, bars: &[Bar]) -> Svg {
    let shown = &bars[..bars.len().min(MAX_ROWS)];
    let max = shown.iter().map(|b| b.value).filter(|v| v.is_finite()).fold(0.0f64, f64::max);
    if shown.is_empty() {
        return no_data("hbar", title);
    }
    let (_, hi, step) = nice_range(0.0, if max > 0.0 { max } else { 1.0 }, 5);
    let f = frame(shown.len(), false);
    let ax = Axes {
        f,
        x_lo: 0.0,
        x_hi: hi,
        y_lo: 0.0,
        y_hi: 1.0,
    };
    let mut out = String::new();
    header(&mut out, &f, "hbar", title);
    x_axis(&mut out, &ax, step, x_label, bars.len() - shown.len());
    for (row, b) in shown.iter().enumerate() {
        row_label(&mut out, &f, row, &b.label);
        let y = f.top + row as f64 * ROW_H + 4.0;
        let v = if b.value.is_finite() { b.value.max(0.0) } else { 0.0 };
        let w = ax.px(v) - f.left;
        let _ = writeln!(
            out,
            "<rect class=\"bar\" x=\"{}\" y=\"{y:.1}\" width=\"{w:.2}\" height=\"{:.1}\" fill=\"{}\"><title>{}: {}</title></rect>\
             <text class=\"value\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            f.left,
            ROW_H - 8.0,
            b.color,
            escape_xml(&b.label),
            fmt_value(b.value),
            f.left + w + 6.0,
            y + ROW_H / 2.0,
            fmt_value(b.value)
        );
    }
    footer(out)
}

/// Stacked horizontal bars: one bar per category, its layers in the order of `stacks` (first
/// on the left), a legend above. `x_max` fixes the axis (e.g. 100 for %); otherwise it is
/// rounded up from the longest bar. Each segment's tooltip names the category, the layer and
/// its value; the total is printed at the end of the bar.
pub fn stacked_hbar_svg(title: &str, x_label: &str, categories: &[String], stacks: &[Stack], x_max: Option<f64>) -> Svg {
    if categories.is_empty() || stacks.is_empty() {
        return no_data("stacked-hbar", title);
    }
    let shown = categories.len().min(MAX_ROWS);
    let val = |s: &Stack, c: usize| s.values.get(c).copied().filter(|v| v.is_finite()).unwrap_or(0.0).max(0.0);
    let totals: Vec<f64> = (0..shown).map(|c| stacks.iter().map(|s| val(s, c)).sum()).collect();
    let longest = totals.iter().copied().fold(0.0f64, f64::max);
    let (hi, step) = match x_max {
        Some(m) if m.is_finite() && m > 0.0 => (m, nice_range(0.0, m, 5).2),
        _ => {
            let (_, hi, step) = nice_range(0.0, if longest > 0.0 { longest } else { 1.0 }, 5);
            (hi, step)
        }
    };
    let f = frame(shown, true);
    let ax = Axes {
        f,
        x_lo: 0.0,
        x_hi: hi,
        y_lo: 0.0,
        y_hi: 1.0,
    };
    let mut out = String::new();
    header(&mut out, &f, "stacked-hbar", title);
    let entries: Vec<(&str, &str)> = stacks.iter().map(|s| (s.color, s.name.as_str())).collect();
    legend_row(&mut out, f.left, 48.0, &entries);
    x_axis(&mut out, &ax, step, x_label, categories.len() - shown);
    for (row, cat) in categories[..shown].iter().enumerate() {
        row_label(&mut out, &f, row, cat);
        let y = f.top + row as f64 * ROW_H + 4.0;
        let mut acc = 0.0f64;
        for s in stacks {
            let v = val(s, row);
            if v <= 0.0 {
                continue;
            }
            let (x0, x1) = (ax.px(acc.min(hi)), ax.px((acc + v).min(hi)));
            acc += v;
            let _ = writeln!(
                out,
                "<rect class=\"segment\" x=\"{x0:.2}\" y=\"{y:.1}\" width=\"{:.2}\" height=\"{:.1}\" fill=\"{}\"><title>{}: {} {}</title></rect>",
                (x1 - x0).max(0.0),
                ROW_H - 8.0,
                s.color,
                escape_xml(cat),
                escape_xml(&s.name),
                fmt_value(v)
            );
        }
        let _ = writeln!(
            out,
            "<text class=\"value\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            ax.px(totals[row].min(hi)) + 6.0,
            y + ROW_H / 2.0,
            fmt_value(totals[row])
        );
    }
    footer(out)
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{count_class, parse, texts, tooltips};
    use super::super::{state_color, PALETTE};
    use super::*;

    #[test]
    fn one_bar_per_state_with_its_count() {
        let bars: Vec<Bar> = [("queued", 12.0), ("running", 3.0), ("succeeded", 140.0), ("failed", 0.0)]
            .iter()
            .map(|&(s, v)| Bar {
                label: s.to_string(),
                value: v,
                color: state_color(s),
            })
            .collect();
        let svg = hbar_svg("Jobs by state", "jobs", &bars);
        let doc = parse(&svg);
        assert_eq!(count_class(&doc, "rect", "bar"), 4);
        let t = texts(&doc);
        for want in [
            "queued",
            "running",
            "succeeded",
            "failed",
            "12",
            "3",
            "140",
            "0",
            "jobs",
            "Jobs by state",
        ] {
            assert!(t.iter().any(|x| x == want), "{want} not in {t:?}");
        }
        assert!(tooltips(&doc).contains(&"succeeded: 140".to_string()));
        // The longest bar reaches the end of its axis (140 → axis 150) proportionally.
        let widths: Vec<f64> = doc
            .descendants()
            .filter(|n| n.attribute("class") == Some("bar"))
            .map(|n| n.attribute("width").unwrap().parse().unwrap())
            .collect();
        assert!((widths[2] / widths[0] - 140.0 / 12.0).abs() < 0.01, "{widths:?}");
        assert_eq!(widths[3], 0.0);
    }

    #[test]
    fn stacked_bars_per_site() {
        let sites: Vec<String> = ["vu", "leiden", "delft"].map(String::from).to_vec();
        let stacks = vec![
            Stack {
                name: "used".into(),
                color: PALETTE[0],
                values: vec![40.0, 10.0, 0.0],
            },
            Stack {
                name: "claimed by koalesce".into(),
                color: PALETTE[2],
                values: vec![64.0, 0.0, 0.0],
            },
            Stack {
                name: "idle".into(),
                color: "#DDDDDD",
                values: vec![40.0, 46.0, f64::NAN],
            },
            Stack {
                name: "blacklisted".into(),
                color: PALETTE[3],
                values: vec![0.0, 0.0, 64.0],
            },
        ];
        let svg = stacked_hbar_svg("Processors per site", "processors", &sites, &stacks, None);
        let doc = parse(&svg);
        // Zero and NaN layers draw nothing: 3 + 2 + 1 segments.
        assert_eq!(count_class(&doc, "rect", "segment"), 6);
        let t = texts(&doc);
        for want in [
            "vu",
            "leiden",
            "delft",
            "144",
            "56",
            "64",
            "used",
            "claimed by koalesce",
            "idle",
            "blacklisted",
        ] {
            assert!(t.iter().any(|x| x == want), "{want} not in {t:?}");
        }
        assert!(tooltips(&doc).contains(&"delft: blacklisted 64".to_string()));
        let svg = stacked_hbar_svg("pct", "%", &sites, &stacks[..1], Some(100.0));
        assert!(texts(&parse(&svg)).iter().any(|x| x == "100"));
    }

    #[test]
    fn many_categories_are_capped_and_said_so() {
        let bars: Vec<Bar> = (0..100)
            .map(|i| Bar {
                label: format!("site-{i}"),
                value: i as f64,
                color: PALETTE[0],
            })
            .collect();
        let doc_svg = hbar_svg("many", "x", &bars);
        let doc = parse(&doc_svg);
        assert_eq!(count_class(&doc, "rect", "bar"), MAX_ROWS);
        assert!(texts(&doc).iter().any(|t| t.contains("40 more not shown")));
        parse(&hbar_svg("none", "x", &[]));
        parse(&stacked_hbar_svg("none", "x", &[], &[], None));
    }
}
