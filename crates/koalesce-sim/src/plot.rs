//! Dependency-free SVG charts for experiment reports.
//!
//! Every function returns a complete standalone SVG document (800x400 px)
//! with a title, axes with "round" tick values, light grid lines, and a
//! legend on the right. Text is XML-escaped. Non-finite values are skipped,
//! and an input without any usable data yields a valid chart that says
//! "no data" instead of panicking.

use std::fmt::Write as _;

const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 400.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 600.0; // plot area right edge; the legend sits beyond
const TOP: f64 = 40.0;
const BOTTOM: f64 = 340.0;
const LEGEND_X: f64 = 616.0;
const FONT: &str = "font-family=\"Helvetica, Arial, sans-serif\"";

/// Colour-blind friendly qualitative palette (Okabe-Ito, then Tableau).
const PALETTE: [&str; 12] = [
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000", "#8C564B", "#7F7F7F", "#BCBD22", "#17BECF",
];

fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// Dash pattern so that series still differ once the palette wraps around.
fn dash(i: usize) -> &'static str {
    match (i / PALETTE.len()) % 3 {
        0 => "",
        1 => " stroke-dasharray=\"6 3\"",
        _ => " stroke-dasharray=\"2 2\"",
    }
}

/// Escape text for use in XML character data and attribute values.
pub fn escape_xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Control characters other than tab/newline are not allowed in XML 1.0.
            c if (c as u32) < 0x20 && c != '\t' && c != '\n' && c != '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// Shorten `s` to at most `max` characters (with an ellipsis), then escape.
fn label(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        escape_xml(s)
    } else {
        let short: String = s.chars().take(max.saturating_sub(1)).collect();
        escape_xml(&format!("{short}\u{2026}"))
    }
}

/// Round tick positions covering `[lo, hi]` with about `target` intervals.
/// Returns `(axis_lo, axis_hi, step)`; the axis bounds are multiples of
/// `step`, which is 1, 2, 2.5 or 5 times a power of ten.
fn nice_range(lo: f64, hi: f64, target: usize) -> (f64, f64, f64) {
    let (mut lo, mut hi) = (lo, hi);
    if hi <= lo {
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        lo -= pad;
        hi += pad;
    }
    let raw = (hi - lo) / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let step = mag
        * if norm <= 1.0 {
            1.0
        } else if norm <= 2.0 {
            2.0
        } else if norm <= 2.5 {
            2.5
        } else if norm <= 5.0 {
            5.0
        } else {
            10.0
        };
    let a = (lo / step + 1e-9).floor() * step;
    let b = (hi / step - 1e-9).ceil() * step;
    (a, b, step)
}

/// X axis spanning exactly the data `[x_min, x_max]` (padded when they are
/// equal), with round ticks inside it: `(axis_lo, axis_hi, step, first_tick)`.
fn x_range(x_min: f64, x_max: f64) -> (f64, f64, f64, f64) {
    let (lo, hi, step) = nice_range(x_min, x_max, 8);
    if x_max > x_min {
        let first = (x_min / step - 1e-9).ceil() * step;
        (x_min, x_max, step, first)
    } else {
        (lo, hi, step, lo)
    }
}

fn ticks(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    let n = ((hi - lo) / step + 1e-6).floor() as i64;
    (0..=n.clamp(0, 1000))
        .map(|i| {
            let v = lo + i as f64 * step;
            // Snap values such as 0.30000000000000004 and -0.0.
            let r = (v / step).round() * step;
            if r.abs() < step * 1e-9 {
                0.0
            } else {
                r
            }
        })
        .collect()
}

/// Tick label formatter shared by all ticks of one axis.
struct TickFmt {
    scale: f64,
    suffix: &'static str,
    decimals: usize,
}

impl TickFmt {
    fn new(ticks: &[f64], step: f64) -> Self {
        let max = ticks.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let (scale, suffix) = if max >= 1e10 {
            (1e9, "G")
        } else if max >= 1e7 {
            (1e6, "M")
        } else if max >= 1e4 {
            (1e3, "k")
        } else {
            (1.0, "")
        };
        let s = step / scale;
        let mut decimals = 0;
        while decimals < 6 && ((s * 10f64.powi(decimals as i32)).round() - s * 10f64.powi(decimals as i32)).abs() > 1e-6 {
            decimals += 1;
        }
        TickFmt { scale, suffix, decimals }
    }

    fn fmt(&self, v: f64) -> String {
        let s = format!("{:.*}", self.decimals, v / self.scale);
        let s = if s.starts_with('-') && s[1..].chars().all(|c| c == '0' || c == '.') {
            s[1..].to_string()
        } else {
            s
        };
        format!("{s}{}", self.suffix)
    }
}

/// Linear map from data coordinates to the plot area.
struct Axes {
    x_lo: f64,
    x_hi: f64,
    y_lo: f64,
    y_hi: f64,
}

impl Axes {
    fn px(&self, x: f64) -> f64 {
        LEFT + (x - self.x_lo) / (self.x_hi - self.x_lo) * (RIGHT - LEFT)
    }
    fn py(&self, y: f64) -> f64 {
        BOTTOM - (y - self.y_lo) / (self.y_hi - self.y_lo) * (BOTTOM - TOP)
    }
}

fn header(out: &mut String, title: &str) {
    let _ = write!(
        out,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         viewBox=\"0 0 {WIDTH} {HEIGHT}\" {FONT} font-size=\"12\">\n\
         <rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"#ffffff\"/>\n\
         <text x=\"{:.1}\" y=\"24\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">{}</text>\n",
        (LEFT + RIGHT) / 2.0,
        label(title, 90)
    );
}

fn footer(out: &mut String) {
    out.push_str("</svg>\n");
}

fn no_data(title: &str) -> String {
    let mut out = String::new();
    header(&mut out, title);
    let _ = write!(
        out,
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"#999999\"/>\n\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"14\" fill=\"#777777\">no data</text>\n",
        RIGHT - LEFT,
        BOTTOM - TOP,
        (LEFT + RIGHT) / 2.0,
        (TOP + BOTTOM) / 2.0
    );
    footer(&mut out);
    out
}

/// Horizontal grid, y ticks and labels, axis lines and axis titles.
/// `x_ticks` is `None` for category axes (the caller labels those).
fn axes(out: &mut String, ax: &Axes, y_step: f64, x_ticks: Option<(f64, f64)>, x_label: &str, y_label: &str) {
    let yt = ticks(ax.y_lo, ax.y_hi, y_step);
    let yf = TickFmt::new(&yt, y_step);
    for &v in &yt {
        let y = ax.py(v);
        let _ = writeln!(
            out,
            "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{RIGHT}\" y2=\"{y:.1}\" stroke=\"#e5e5e5\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LEFT - 6.0,
            y + 4.0,
            escape_xml(&yf.fmt(v))
        );
    }
    if let Some((x_lo, step)) = x_ticks {
        let xt = ticks(x_lo, ax.x_hi + step * 1e-9, step);
        let xf = TickFmt::new(&xt, step);
        for &v in &xt {
            let x = ax.px(v);
            let _ = writeln!(
                out,
                "<line x1=\"{x:.1}\" y1=\"{BOTTOM}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#333333\"/>\
                 <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                BOTTOM + 5.0,
                BOTTOM + 18.0,
                escape_xml(&xf.fmt(v))
            );
        }
    }
    let base = ax.py(0.0f64.clamp(ax.y_lo, ax.y_hi));
    let _ = write!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{BOTTOM}\" stroke=\"#333333\"/>\n\
         <line x1=\"{LEFT}\" y1=\"{base:.1}\" x2=\"{RIGHT}\" y2=\"{base:.1}\" stroke=\"#333333\"/>\n\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n\
         <text x=\"16\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {:.1})\">{}</text>\n",
        (LEFT + RIGHT) / 2.0,
        HEIGHT - 12.0,
        label(x_label, 90),
        (TOP + BOTTOM) / 2.0,
        (TOP + BOTTOM) / 2.0,
        label(y_label, 50)
    );
}

#[derive(Clone, Copy)]
enum Swatch {
    Box,
    Line,
}

fn legend(out: &mut String, entries: &[(usize, &str)], kind: Swatch) {
    // Fit up to ~17 entries; more are summarised.
    let max_rows = ((BOTTOM - TOP) / 18.0) as usize;
    for (row, &(i, name)) in entries.iter().enumerate() {
        let y = TOP + 8.0 + row as f64 * 18.0;
        if row + 1 == max_rows && entries.len() > max_rows {
            let _ = writeln!(
                out,
                "<text x=\"{LEGEND_X}\" y=\"{:.1}\" fill=\"#555555\">\u{2026} {} more</text>",
                y + 4.0,
                entries.len() - row
            );
            break;
        }
        match kind {
            Swatch::Box => {
                let _ = write!(
                    out,
                    "<rect x=\"{LEGEND_X}\" y=\"{:.1}\" width=\"14\" height=\"12\" fill=\"{}\"/>",
                    y - 6.0,
                    color(i)
                );
            }
            Swatch::Line => {
                let _ = write!(
                    out,
                    "<line x1=\"{LEGEND_X}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{}\" stroke-width=\"2.5\"{}/>",
                    LEGEND_X + 16.0,
                    color(i),
                    dash(i)
                );
            }
        }
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            LEGEND_X + 22.0,
            y + 4.0,
            label(name, 24)
        );
    }
}

fn clip_def(out: &mut String) {
    let _ = writeln!(
        out,
        "<defs><clipPath id=\"plot-area\"><rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{:.1}\"/></clipPath></defs>",
        RIGHT - LEFT,
        BOTTOM - TOP
    );
}

fn finite_or_zero(v: f64) -> f64 {
    if v.is_finite() {
        v
    } else {
        0.0
    }
}

/// Stacked area chart: `series[i].1[k]` is the height of band `i` at
/// `xs[k]`; bands are stacked in the given order (first at the bottom) and
/// listed top-down in the legend. Points are sorted by x; missing,
/// negative or non-finite values count as 0, points with non-finite x are
/// dropped. `y_max` fixes the y range to `[0, y_max]` (e.g. 100 for %);
/// otherwise the range is rounded up from the tallest stack.
pub fn stacked_area_svg(
    title: &str,
    x_label: &str,
    y_label: &str,
    xs: &[f64],
    series: &[(String, Vec<f64>)],
    y_max: Option<f64>,
) -> String {
    let mut idx: Vec<usize> = (0..xs.len()).filter(|&k| xs[k].is_finite()).collect();
    if idx.is_empty() || series.is_empty() {
        return no_data(title);
    }
    idx.sort_by(|&a, &b| xs[a].total_cmp(&xs[b]).then(a.cmp(&b)));
    let val = |s: &[f64], k: usize| finite_or_zero(s.get(k).copied().unwrap_or(0.0)).max(0.0);
    // cum[i][j]: top of band i at the j-th sorted point.
    let mut cum: Vec<Vec<f64>> = Vec::with_capacity(series.len());
    for (i, (_, vals)) in series.iter().enumerate() {
        let row: Vec<f64> = idx
            .iter()
            .enumerate()
            .map(|(j, &k)| val(vals, k) + if i > 0 { cum[i - 1][j] } else { 0.0 })
            .collect();
        cum.push(row);
    }
    let top = cum.last().map(|r| r.iter().fold(0.0f64, |m, &v| m.max(v))).unwrap_or(0.0);
    let (y_lo, y_hi, y_step) = match y_max {
        Some(m) if m.is_finite() && m > 0.0 => {
            let (_, _, step) = nice_range(0.0, m, 5);
            (0.0, m, step)
        }
        _ => nice_range(0.0, if top > 0.0 { top } else { 1.0 }, 5),
    };
    let (x_min, x_max) = (xs[idx[0]], xs[*idx.last().unwrap()]);
    let (x_lo, x_hi, x_step, x_first) = x_range(x_min, x_max);
    let ax = Axes { x_lo, x_hi, y_lo, y_hi };
    let mut out = String::new();
    header(&mut out, title);
    clip_def(&mut out);
    out.push_str("<g clip-path=\"url(#plot-area)\">\n");
    for i in 0..series.len() {
        let mut pts = String::new();
        for (j, &k) in idx.iter().enumerate() {
            let _ = write!(pts, "{:.2},{:.2} ", ax.px(xs[k]), ax.py(cum[i][j]));
        }
        for (j, &k) in idx.iter().enumerate().rev() {
            let lower = if i > 0 { cum[i - 1][j] } else { 0.0 };
            let _ = write!(pts, "{:.2},{:.2} ", ax.px(xs[k]), ax.py(lower));
        }
        let _ = writeln!(
            out,
            "<polygon points=\"{}\" fill=\"{}\" fill-opacity=\"0.85\" stroke=\"{}\" stroke-width=\"0.5\"/>",
            pts.trim_end(),
            color(i),
            color(i)
        );
    }
    out.push_str("</g>\n");
    axes(&mut out, &ax, y_step, Some((x_first, x_step)), x_label, y_label);
    let entries: Vec<(usize, &str)> = series.iter().enumerate().rev().map(|(i, (n, _))| (i, n.as_str())).collect();
    legend(&mut out, &entries, Swatch::Box);
    footer(&mut out);
    out
}

/// Line chart: one polyline per series through its `(x, y)` points in the
/// given order (points with a non-finite coordinate are skipped). Series
/// with at most 40 points also get point markers.
pub fn line_svg(title: &str, x_label: &str, y_label: &str, series: &[(String, Vec<(f64, f64)>)]) -> String {
    let finite = |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite();
    let mut bounds: Option<(f64, f64, f64, f64)> = None;
    for (_, pts) in series {
        for &(x, y) in pts.iter().filter(|p| finite(p)) {
            bounds = Some(match bounds {
                None => (x, x, y, y),
                Some((a, b, c, d)) => (a.min(x), b.max(x), c.min(y), d.max(y)),
            });
        }
    }
    let Some((x_min, x_max, y_min, y_max)) = bounds else {
        return no_data(title);
    };
    // Anchor the y axis at 0 when the data are all on one side of it and
    // not far from it, so that magnitudes read honestly.
    let (y_min, y_max) = if y_min > 0.0 && y_min < 0.5 * y_max {
        (0.0, y_max)
    } else if y_max < 0.0 && y_max > 0.5 * y_min {
        (y_min, 0.0)
    } else {
        (y_min, y_max)
    };
    let (y_lo, y_hi, y_step) = nice_range(y_min, y_max, 5);
    let (x_lo, x_hi, x_step, x_first) = x_range(x_min, x_max);
    let ax = Axes { x_lo, x_hi, y_lo, y_hi };
    let mut out = String::new();
    header(&mut out, title);
    clip_def(&mut out);
    axes(&mut out, &ax, y_step, Some((x_first, x_step)), x_label, y_label);
    out.push_str("<g clip-path=\"url(#plot-area)\">\n");
    for (i, (_, pts)) in series.iter().enumerate() {
        let good: Vec<(f64, f64)> = pts.iter().copied().filter(finite).collect();
        let mut s = String::new();
        for &(x, y) in &good {
            let _ = write!(s, "{:.2},{:.2} ", ax.px(x), ax.py(y));
        }
        if good.len() >= 2 {
            let _ = writeln!(
                out,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" stroke-linejoin=\"round\"{}/>",
                s.trim_end(),
                color(i),
                dash(i)
            );
        }
        if good.len() <= 40 {
            for &(x, y) in &good {
                let _ = writeln!(
                    out,
                    "<circle cx=\"{:.2}\" cy=\"{:.2}\" r=\"3\" fill=\"{}\"/>",
                    ax.px(x),
                    ax.py(y),
                    color(i)
                );
            }
        }
    }
    out.push_str("</g>\n");
    let entries: Vec<(usize, &str)> = series.iter().enumerate().map(|(i, (n, _))| (i, n.as_str())).collect();
    legend(&mut out, &entries, Swatch::Line);
    footer(&mut out);
    out
}

/// Grouped bar chart: one group per category, one bar per series within
/// each group (`series[i].1[c]` is series `i` in category `c`; missing or
/// non-finite values draw no bar). `error_bars`, if given, has the same
/// shape as the series values and holds the half-width of an error bar
/// (e.g. a 95% confidence interval) drawn on each bar.
pub fn grouped_bar_svg(
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
    error_bars: Option<&[Vec<f64>]>,
) -> String {
    let err = |i: usize, c: usize| -> f64 {
        error_bars
            .and_then(|e| e.get(i))
            .and_then(|row| row.get(c))
            .copied()
            .filter(|v| v.is_finite())
            .map(f64::abs)
            .unwrap_or(0.0)
    };
    let value = |i: usize, c: usize| -> Option<f64> { series[i].1.get(c).copied().filter(|v| v.is_finite()) };
    let (mut lo, mut hi) = (0.0f64, 0.0f64);
    let mut any = false;
    for i in 0..series.len() {
        for c in 0..categories.len() {
            if let Some(v) = value(i, c) {
                any = true;
                lo = lo.min(v - err(i, c));
                hi = hi.max(v + err(i, c));
            }
        }
    }
    if !any {
        return no_data(title);
    }
    let (y_lo, y_hi, y_step) = nice_range(lo, if hi > lo { hi } else { lo + 1.0 }, 5);
    let ncat = categories.len();
    let ax = Axes {
        x_lo: 0.0,
        x_hi: ncat as f64,
        y_lo,
        y_hi,
    };
    let mut out = String::new();
    header(&mut out, title);
    axes(&mut out, &ax, y_step, None, "", y_label);
    let group_w = (RIGHT - LEFT) / ncat as f64;
    let bar_w = group_w * 0.8 / series.len() as f64;
    let rotate = ncat > 8;
    for (c, cat) in categories.iter().enumerate() {
        let cx = ax.px(c as f64 + 0.5);
        if rotate {
            let _ = writeln!(
                out,
                "<text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"end\" transform=\"rotate(-35 {cx:.1} {:.1})\">{}</text>",
                BOTTOM + 14.0,
                BOTTOM + 14.0,
                label(cat, 14)
            );
        } else {
            let max_chars = ((group_w / 7.0) as usize).max(4);
            let _ = writeln!(
                out,
                "<text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                BOTTOM + 18.0,
                label(cat, max_chars)
            );
        }
        for (i, (name, _)) in series.iter().enumerate() {
            let Some(v) = value(i, c) else { continue };
            let x = ax.px(c as f64) + group_w * 0.1 + i as f64 * bar_w;
            let (y0, y1) = (ax.py(v.max(0.0)), ax.py(v.min(0.0)));
            let _ = writeln!(
                out,
                "<rect x=\"{x:.2}\" y=\"{y0:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"{}\"><title>{}: {}</title></rect>",
                (bar_w - 1.0).max(0.5),
                (y1 - y0).max(0.0),
                color(i),
                label(name, 60),
                escape_xml(&format!("{v}"))
            );
            let e = err(i, c);
            if e > 0.0 {
                let mx = x + bar_w / 2.0;
                let (ta, tb) = (ax.py(v + e), ax.py(v - e));
                let cap = (bar_w * 0.25).min(6.0);
                let _ = writeln!(
                    out,
                    "<path d=\"M{:.2},{ta:.2}H{:.2}M{mx:.2},{ta:.2}V{tb:.2}M{:.2},{tb:.2}H{:.2}\" stroke=\"#222222\" stroke-width=\"1.2\" fill=\"none\"/>",
                    mx - cap,
                    mx + cap,
                    mx - cap,
                    mx + cap
                );
            }
        }
    }
    let entries: Vec<(usize, &str)> = series.iter().enumerate().map(|(i, (n, _))| (i, n.as_str())).collect();
    legend(&mut out, &entries, Swatch::Box);
    footer(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Minimal XML well-formedness check: one root element, balanced and
    /// properly nested tags, quoted attributes without '<', no stray '<' or
    /// '&' in text, only the five predefined entities or char references.
    fn check_xml(doc: &str) -> Result<(), String> {
        fn check_entities(s: &str) -> Result<(), String> {
            let mut rest = s;
            while let Some(p) = rest.find('&') {
                let after = &rest[p + 1..];
                let end = after.find(';').ok_or("unterminated entity")?;
                let name = &after[..end];
                let ok = matches!(name, "amp" | "lt" | "gt" | "quot" | "apos")
                    || (name.starts_with("#x") && name.len() > 2 && name[2..].chars().all(|c| c.is_ascii_hexdigit()))
                    || (name.starts_with('#') && name.len() > 1 && name[1..].chars().all(|c| c.is_ascii_digit()));
                if !ok {
                    return Err(format!("bad entity &{name};"));
                }
                rest = &after[end + 1..];
            }
            Ok(())
        }
        let mut stack: Vec<String> = Vec::new();
        let mut roots = 0;
        let mut rest = doc;
        if let Some(r) = rest.strip_prefix("<?xml") {
            let end = r.find("?>").ok_or("unterminated XML declaration")?;
            rest = &r[end + 2..];
        }
        loop {
            let Some(lt) = rest.find('<') else {
                if !stack.is_empty() {
                    return Err(format!("unclosed <{}>", stack.last().unwrap()));
                }
                if !rest.trim().is_empty() {
                    return Err("text after root".into());
                }
                break;
            };
            let text = &rest[..lt];
            if stack.is_empty() && !text.trim().is_empty() {
                return Err(format!("text outside root: {text:?}"));
            }
            if text.contains('>') {
                return Err(format!("raw '>' in text: {text:?}"));
            }
            check_entities(text)?;
            rest = &rest[lt + 1..];
            // Find the end of the tag, skipping '>' inside quoted attributes.
            let mut quote: Option<char> = None;
            let mut end = None;
            for (i, c) in rest.char_indices() {
                match (quote, c) {
                    (Some(q), c) if c == q => quote = None,
                    (Some(_), '<') => return Err("'<' in attribute".into()),
                    (Some(_), _) => {}
                    (None, '"') | (None, '\'') => quote = Some(c),
                    (None, '>') => {
                        end = Some(i);
                        break;
                    }
                    (None, '<') => return Err("'<' inside tag".into()),
                    _ => {}
                }
            }
            let end = end.ok_or("unterminated tag")?;
            let tag = &rest[..end];
            rest = &rest[end + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                let open = stack.pop().ok_or_else(|| format!("stray </{name}>"))?;
                if open != name.trim() {
                    return Err(format!("<{open}> closed by </{name}>"));
                }
                continue;
            }
            let self_closing = tag.ends_with('/');
            let body = tag.trim_end_matches('/');
            let name: String = body.chars().take_while(|c| !c.is_whitespace()).collect();
            if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '-' || c == ':' || c == '_') {
                return Err(format!("bad tag name in <{tag}>"));
            }
            // Attributes: name="value" pairs, each name once.
            let mut attrs = &body[name.len()..];
            let mut seen = Vec::new();
            loop {
                attrs = attrs.trim_start();
                if attrs.is_empty() {
                    break;
                }
                let eq = attrs.find('=').ok_or_else(|| format!("attribute without value in <{tag}>"))?;
                let an = attrs[..eq].trim();
                if an.is_empty() || an.contains(char::is_whitespace) {
                    return Err(format!("bad attribute name in <{tag}>"));
                }
                if seen.contains(&an) {
                    return Err(format!("duplicate attribute {an} in <{tag}>"));
                }
                seen.push(an);
                let v = attrs[eq + 1..].trim_start();
                let q = v.chars().next().ok_or("missing attribute value")?;
                if q != '"' && q != '\'' {
                    return Err(format!("unquoted attribute {an}"));
                }
                let close = v[1..].find(q).ok_or("unterminated attribute")?;
                check_entities(&v[1..1 + close])?;
                attrs = &v[close + 2..];
            }
            if stack.is_empty() {
                roots += 1;
            }
            if !self_closing {
                stack.push(name);
            }
        }
        if roots != 1 {
            return Err(format!("{roots} root elements"));
        }
        Ok(())
    }

    fn assert_valid(svg: &str) {
        if let Err(e) = check_xml(svg) {
            panic!("invalid XML: {e}\n{svg}");
        }
        assert!(svg.contains("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    }

    #[test]
    fn checker_rejects_malformed_xml() {
        assert!(check_xml("<a><b></a>").is_err());
        assert!(check_xml("<a>x & y</a>").is_err());
        assert!(check_xml("<a>1 < 2</a>").is_err());
        assert!(check_xml("<a x=1/>").is_err());
        assert!(check_xml("<a/><b/>").is_err());
        assert!(check_xml("<a x=\"1\" x=\"2\"/>").is_err());
        assert!(check_xml("<a x=\"&lt;\">&amp;</a>").is_ok());
    }

    #[test]
    fn escapes_text() {
        assert_eq!(escape_xml("a<b & c>\"d'"), "a&lt;b &amp; c&gt;&quot;d&apos;");
    }

    #[test]
    fn nice_ticks_are_round() {
        assert_eq!(nice_range(0.0, 100.0, 5), (0.0, 100.0, 20.0));
        assert_eq!(nice_range(0.0, 87.0, 5), (0.0, 100.0, 20.0));
        assert!(nice_range(3.0, 3.0, 5).2 > 0.0);
        let (lo, hi, step) = nice_range(0.0, 0.7, 5);
        assert_eq!((lo, hi), (0.0, 0.8));
        assert!((step - 0.2).abs() < 1e-12);
        let t = ticks(0.0, 0.8, step);
        assert_eq!(t.len(), 5);
        let f = TickFmt::new(&t, step);
        let labels: Vec<String> = t.iter().map(|&v| f.fmt(v)).collect();
        assert_eq!(labels, ["0.0", "0.2", "0.4", "0.6", "0.8"]);
        let (lo, hi, step) = nice_range(0.0, 3_600_000.0, 8);
        let t = ticks(lo, hi, step);
        let f = TickFmt::new(&t, step);
        assert_eq!(f.fmt(t[1]), "500k");
        let (lo, hi, step) = nice_range(-7.0, 12.0, 5);
        assert_eq!((lo, hi, step), (-10.0, 15.0, 5.0));
    }

    fn util_series() -> (Vec<f64>, Vec<(String, Vec<f64>)>) {
        let xs: Vec<f64> = (0..=48).map(|h| h as f64 * 0.5).collect();
        let bg: Vec<f64> = xs.iter().map(|x| 20.0 + 10.0 * (x / 4.0).sin()).collect();
        let grid: Vec<f64> = xs.iter().map(|x| 30.0 + 15.0 * (x / 6.0).cos()).collect();
        let pwt: Vec<f64> = xs.iter().map(|x| 5.0 + 3.0 * (x / 3.0).sin().abs()).collect();
        let pgt: Vec<f64> = xs.iter().map(|x| 8.0 + 4.0 * (x / 5.0).cos().abs()).collect();
        (
            xs,
            vec![
                ("background".to_string(), bg),
                ("grid load".to_string(), grid),
                ("PWT".to_string(), pwt),
                ("PGT & <misc>".to_string(), pgt),
            ],
        )
    }

    #[test]
    fn stacked_area_is_valid_and_names_series() {
        let (xs, series) = util_series();
        let svg = stacked_area_svg(
            "Utilization, WF <placement>",
            "time (h)",
            "utilization (%)",
            &xs,
            &series,
            Some(100.0),
        );
        assert_valid(&svg);
        for name in ["background", "grid load", "PWT", "PGT &amp; &lt;misc&gt;"] {
            assert!(svg.contains(name), "{name}");
        }
        assert!(svg.contains("Utilization, WF &lt;placement&gt;"));
        assert_eq!(svg.matches("<polygon").count(), 4);
        // Auto range, unsorted x, short/NaN series values.
        let svg = stacked_area_svg(
            "t",
            "x",
            "y",
            &[3.0, 1.0, f64::NAN, 2.0],
            &[("a".into(), vec![1.0, f64::INFINITY]), ("b".into(), vec![-1.0, 2.0, 3.0, 4.0, 5.0])],
            None,
        );
        assert_valid(&svg);
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn line_is_valid_and_names_series() {
        let series = vec![
            ("CF".to_string(), (0..10).map(|i| (i as f64, (i * i) as f64)).collect()),
            ("WF".to_string(), vec![(0.0, 5.0), (f64::NAN, 1.0), (9.0, 60.0)]),
            ("single".to_string(), vec![(4.0, 4.0)]),
        ];
        let svg = line_svg("Response time", "load (%)", "time (s)", &series);
        assert_valid(&svg);
        for name in ["CF", "WF", "single"] {
            assert!(svg.contains(&format!(">{name}</text>")), "{name}");
        }
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(!svg.contains("NaN"));
    }

    #[test]
    fn grouped_bar_is_valid_with_error_bars() {
        let cats: Vec<String> = ["1x32", "2x16", "4x8", "8x4"].map(String::from).to_vec();
        let series = vec![
            ("CF placement".to_string(), vec![12.0, 15.0, 22.0, 30.0]),
            ("WF placement".to_string(), vec![10.0, 14.0, 25.0, f64::NAN]),
            ("FTT".to_string(), vec![-3.0, 5.0]),
        ];
        let errs = vec![vec![1.0, 2.0, 3.0, 4.0], vec![0.5, f64::NAN]];
        let svg = grouped_bar_svg("Placement time", "seconds", &cats, &series, Some(&errs));
        assert_valid(&svg);
        for name in ["CF placement", "WF placement", "FTT", "1x32", "8x4"] {
            assert!(svg.contains(name), "{name}");
        }
        // 4 + 3 + 2 finite bars (plus the background rect), 4 + 1 error bars.
        assert_eq!(svg.matches("<rect").count(), 1 + 9 + 3);
        assert_eq!(svg.matches("<path").count(), 5);
        // Many categories get rotated labels.
        let many: Vec<String> = (0..12).map(|i| format!("category {i}")).collect();
        let svg = grouped_bar_svg("t", "y", &many, &[("s".into(), vec![1.0; 12])], None);
        assert_valid(&svg);
        assert!(svg.contains("rotate(-35"));
    }

    #[test]
    fn empty_inputs_give_no_data_charts() {
        let cases = [
            stacked_area_svg("a & b", "x", "y", &[], &[], None),
            stacked_area_svg("a", "x", "y", &[1.0, 2.0], &[], Some(100.0)),
            stacked_area_svg("a", "x", "y", &[], &[("s".into(), vec![])], None),
            line_svg("a", "x", "y", &[]),
            line_svg("a", "x", "y", &[("s".into(), vec![])]),
            line_svg("a", "x", "y", &[("s".into(), vec![(f64::NAN, 1.0)])]),
            grouped_bar_svg("a", "y", &[], &[], None),
            grouped_bar_svg("a", "y", &["c".into()], &[("s".into(), vec![])], None),
            grouped_bar_svg("a", "y", &[], &[("s".into(), vec![1.0])], Some(&[])),
        ];
        for svg in &cases {
            assert_valid(svg);
            assert!(svg.contains("no data"));
        }
    }

    #[test]
    fn degenerate_ranges_do_not_panic() {
        let svg = line_svg("flat", "x", "y", &[("s".into(), vec![(1.0, 0.0), (1.0, 0.0)])]);
        assert_valid(&svg);
        let svg = stacked_area_svg("flat", "x", "y", &[5.0], &[("s".into(), vec![0.0])], None);
        assert_valid(&svg);
        let svg = grouped_bar_svg("zero", "y", &["c".into()], &[("s".into(), vec![0.0])], None);
        assert_valid(&svg);
        let svg = line_svg("huge", "x", "y", &[("s".into(), vec![(0.0, 1e300), (1e300, -1e300)])]);
        assert_valid(&svg);
    }

    /// Writes example charts to `$KOALESCE_PLOT_DIR` for visual inspection.
    #[test]
    fn write_examples_when_asked() {
        let Ok(dir) = std::env::var("KOALESCE_PLOT_DIR") else {
            return;
        };
        let (xs, series) = util_series();
        let a = stacked_area_svg("Utilization (WF)", "time (h)", "utilization (%)", &xs, &series, Some(100.0));
        std::fs::write(format!("{dir}/area.svg"), a).unwrap();
        let lines = vec![
            (
                "CF".to_string(),
                (0..=10).map(|i| (i as f64 * 10.0, 20.0 + (i * i) as f64 * 3.0)).collect(),
            ),
            (
                "WF".to_string(),
                (0..=10).map(|i| (i as f64 * 10.0, 25.0 + (i * i) as f64 * 2.0)).collect(),
            ),
            (
                "CM".to_string(),
                (0..=200).map(|i| (i as f64 * 0.5, 60.0 + 30.0 * (i as f64 / 20.0).sin())).collect(),
            ),
        ];
        std::fs::write(
            format!("{dir}/line.svg"),
            line_svg("Mean response time", "offered load (%)", "response time (s)", &lines),
        )
        .unwrap();
        let cats: Vec<String> = ["1x32", "2x16", "4x8", "8x4"].map(String::from).to_vec();
        let bars = vec![
            ("CF placement".to_string(), vec![120.0, 150.0, 220.0, 300.0]),
            ("WF placement".to_string(), vec![100.0, 140.0, 250.0, 280.0]),
            ("CF FTT".to_string(), vec![30.0, 45.0, 60.0, 75.0]),
            ("WF FTT".to_string(), vec![35.0, 40.0, 70.0, 90.0]),
        ];
        let errs = vec![vec![10.0, 12.0, 20.0, 25.0], vec![8.0, 9.0, 30.0, 15.0], vec![3.0; 4], vec![4.0; 4]];
        std::fs::write(
            format!("{dir}/bar.svg"),
            grouped_bar_svg("Placement time and FTT per job shape", "time (s)", &cats, &bars, Some(&errs)),
        )
        .unwrap();
        std::fs::write(format!("{dir}/empty.svg"), line_svg("Nothing", "x", "y", &[])).unwrap();
    }
}
