//! Charts over an x/y plane in the 800 × 400 frame: stacked areas, lines, grouped bars.

use std::fmt::Write as _;

use super::frame::{finite_or_zero, fmt_value, footer, header, label, legend, nice_range, no_data, x_range, Axes, Entry, Frame, Swatch};
use super::{color, dash, escape_xml, Svg};

/// More points than this in a stacked area are averaged down to [`AREA_BINS`] (the plot area
/// is 528 px wide: more points would not show).
const AREA_MAX_POINTS: usize = 1200;
const AREA_BINS: usize = 600;
/// Hover columns with a tooltip of the values (at most this many).
const HOVER_COLUMNS: usize = 120;

/// Stacked area chart: `series[i].1[k]` is the height of band `i` at
/// `xs[k]`; bands are stacked in the given order (first at the bottom) and
/// listed top-down in the legend. Points are sorted by x; missing,
/// negative or non-finite values count as 0, points with non-finite x are
/// dropped. `y_max` fixes the y range to `[0, y_max]` (e.g. 100 for %);
/// otherwise the range is rounded up from the tallest stack. Long series are
/// averaged down to 600 points; hovering shows the values at that x.
pub fn stacked_area_svg(title: &str, x_label: &str, y_label: &str, xs: &[f64], series: &[(String, Vec<f64>)], y_max: Option<f64>) -> Svg {
    let mut idx: Vec<usize> = (0..xs.len()).filter(|&k| xs[k].is_finite()).collect();
    if idx.is_empty() || series.is_empty() {
        return no_data("area", title);
    }
    idx.sort_by(|&a, &b| xs[a].total_cmp(&xs[b]).then(a.cmp(&b)));
    let val = |s: &[f64], k: usize| finite_or_zero(s.get(k).copied().unwrap_or(0.0)).max(0.0);
    // Points in x order (averaged in groups when there are many): x and each band's height.
    let group = if idx.len() > AREA_MAX_POINTS {
        idx.len().div_ceil(AREA_BINS)
    } else {
        1
    };
    let mut px_x: Vec<f64> = Vec::with_capacity(idx.len() / group + 1);
    let mut heights: Vec<Vec<f64>> = vec![Vec::with_capacity(idx.len() / group + 1); series.len()];
    for chunk in idx.chunks(group) {
        let n = chunk.len() as f64;
        px_x.push(chunk.iter().map(|&k| xs[k]).sum::<f64>() / n);
        for (i, (_, vals)) in series.iter().enumerate() {
            heights[i].push(chunk.iter().map(|&k| val(vals, k)).sum::<f64>() / n);
        }
    }
    // cum[i][j]: top of band i at point j.
    let mut cum: Vec<Vec<f64>> = Vec::with_capacity(series.len());
    for (i, h) in heights.iter().enumerate() {
        let row: Vec<f64> = h
            .iter()
            .enumerate()
            .map(|(j, v)| v + if i > 0 { cum[i - 1][j] } else { 0.0 })
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
    let (x_min, x_max) = (xs[idx[0]], xs[*idx.last().expect("not empty")]);
    let (x_lo, x_hi, x_step, x_first) = x_range(x_min, x_max);
    let f = Frame::STANDARD;
    let ax = Axes { f, x_lo, x_hi, y_lo, y_hi };
    let mut out = String::with_capacity(4096 + px_x.len() * series.len() * 32);
    header(&mut out, &f, "area", title);
    f.open_clip(&mut out);
    for i in 0..series.len() {
        let mut pts = String::new();
        for (j, &x) in px_x.iter().enumerate() {
            let _ = write!(pts, "{:.2},{:.2} ", ax.px(x), ax.py(cum[i][j]));
        }
        for (j, &x) in px_x.iter().enumerate().rev() {
            let lower = if i > 0 { cum[i - 1][j] } else { 0.0 };
            let _ = write!(pts, "{:.2},{:.2} ", ax.px(x), ax.py(lower));
        }
        let _ = writeln!(
            out,
            "<polygon class=\"band\" points=\"{}\" fill=\"{c}\" fill-opacity=\"0.85\" stroke=\"{c}\" stroke-width=\"0.5\"><title>{}</title></polygon>",
            pts.trim_end(),
            escape_xml(&series[i].0),
            c = color(i),
        );
    }
    // Invisible columns whose tooltips give every band's value at the column's middle point.
    let cols = px_x.len().min(HOVER_COLUMNS);
    let (left, width) = (f.left, f.plot_w());
    for c in 0..cols {
        let j = ((c as f64 + 0.5) / cols as f64 * px_x.len() as f64) as usize;
        let j = j.min(px_x.len() - 1);
        let mut tip = format!("{x_label} {}:", fmt_value(px_x[j]));
        for (i, (name, _)) in series.iter().enumerate().rev() {
            let _ = write!(tip, "\n{name} {}", fmt_value(heights[i][j]));
        }
        let _ = writeln!(
            out,
            "<rect class=\"hover\" x=\"{:.2}\" y=\"{}\" width=\"{:.2}\" height=\"{}\" fill=\"#000000\" fill-opacity=\"0\"><title>{}</title></rect>",
            left + width * c as f64 / cols as f64,
            f.top,
            width / cols as f64,
            f.plot_h(),
            escape_xml(&tip)
        );
    }
    Frame::close_clip(&mut out);
    ax.draw(&mut out, y_step, Some((x_first, x_step)), x_label, y_label);
    let entries: Vec<Entry> = series.iter().enumerate().rev().map(|(i, (n, _))| Entry::indexed(i, n)).collect();
    legend(&mut out, &f, &entries, Swatch::Box);
    footer(out)
}

/// Keeps, per pixel column, the first, lowest, highest and last point (M4 reduction): the
/// polyline looks the same with at most four points per column. `pts` must be sorted by x.
fn reduce_m4(pts: &[(f64, f64)], ax: &Axes) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let mut k = 0;
    while k < pts.len() {
        let col = ax.px(pts[k].0).floor();
        let mut end = k;
        while end < pts.len() && ax.px(pts[end].0).floor() == col {
            end += 1;
        }
        let run = &pts[k..end];
        let (mut lo, mut hi) = (0, 0);
        for (i, p) in run.iter().enumerate() {
            if p.1 < run[lo].1 {
                lo = i;
            }
            if p.1 > run[hi].1 {
                hi = i;
            }
        }
        let mut keep = [0, lo.min(hi), lo.max(hi), run.len() - 1];
        keep.sort_unstable();
        let mut last = usize::MAX;
        for i in keep {
            if i != last {
                out.push(run[i]);
                last = i;
            }
        }
        k = end;
    }
    out
}

/// Line chart: one polyline per series through its `(x, y)` points in the
/// given order (points with a non-finite coordinate are skipped). Series
/// with at most 40 points also get point markers with a tooltip; long series
/// sorted by x are reduced to what a pixel column shows.
pub fn line_svg(title: &str, x_label: &str, y_label: &str, series: &[(String, Vec<(f64, f64)>)]) -> Svg {
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
        return no_data("line", title);
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
    let f = Frame::STANDARD;
    let ax = Axes { f, x_lo, x_hi, y_lo, y_hi };
    let mut out = String::new();
    header(&mut out, &f, "line", title);
    ax.draw(&mut out, y_step, Some((x_first, x_step)), x_label, y_label);
    f.open_clip(&mut out);
    for (i, (name, pts)) in series.iter().enumerate() {
        let mut good: Vec<(f64, f64)> = pts.iter().copied().filter(finite).collect();
        if good.len() > 2 * f.plot_w() as usize && good.windows(2).all(|w| w[0].0 <= w[1].0) {
            good = reduce_m4(&good, &ax);
        }
        let mut s = String::new();
        for &(x, y) in &good {
            let _ = write!(s, "{:.2},{:.2} ", ax.px(x), ax.py(y));
        }
        if good.len() >= 2 {
            let _ = writeln!(
                out,
                "<polyline class=\"series\" points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" stroke-linejoin=\"round\"{}><title>{}</title></polyline>",
                s.trim_end(),
                color(i),
                dash(i),
                escape_xml(name)
            );
        }
        if good.len() <= 40 {
            for &(x, y) in &good {
                let _ = writeln!(
                    out,
                    "<circle class=\"point\" cx=\"{:.2}\" cy=\"{:.2}\" r=\"3\" fill=\"{}\"><title>{}: {} = {}, {} = {}</title></circle>",
                    ax.px(x),
                    ax.py(y),
                    color(i),
                    escape_xml(name),
                    escape_xml(x_label),
                    fmt_value(x),
                    escape_xml(y_label),
                    fmt_value(y)
                );
            }
        }
    }
    Frame::close_clip(&mut out);
    let entries: Vec<Entry> = series.iter().enumerate().map(|(i, (n, _))| Entry::indexed(i, n)).collect();
    legend(&mut out, &f, &entries, Swatch::Line);
    footer(out)
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
) -> Svg {
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
        return no_data("bar", title);
    }
    let (y_lo, y_hi, y_step) = nice_range(lo, if hi > lo { hi } else { lo + 1.0 }, 5);
    let ncat = categories.len();
    let f = Frame::STANDARD;
    let ax = Axes {
        f,
        x_lo: 0.0,
        x_hi: ncat as f64,
        y_lo,
        y_hi,
    };
    let mut out = String::new();
    header(&mut out, &f, "bar", title);
    ax.draw(&mut out, y_step, None, "", y_label);
    let group_w = f.plot_w() / ncat as f64;
    let bar_w = group_w * 0.8 / series.len() as f64;
    let rotate = ncat > 8;
    for (c, cat) in categories.iter().enumerate() {
        let cx = ax.px(c as f64 + 0.5);
        if rotate {
            let _ = writeln!(
                out,
                "<text class=\"category\" x=\"{cx:.1}\" y=\"{y:.1}\" text-anchor=\"end\" transform=\"rotate(-35 {cx:.1} {y:.1})\">{}</text>",
                label(cat, 14),
                y = f.bottom + 14.0
            );
        } else {
            let max_chars = ((group_w / 7.0) as usize).max(4);
            let _ = writeln!(
                out,
                "<text class=\"category\" x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                f.bottom + 18.0,
                label(cat, max_chars)
            );
        }
        for (i, (name, _)) in series.iter().enumerate() {
            let Some(v) = value(i, c) else { continue };
            let x = ax.px(c as f64) + group_w * 0.1 + i as f64 * bar_w;
            let (y0, y1) = (ax.py(v.max(0.0)), ax.py(v.min(0.0)));
            let e = err(i, c);
            let tip = if e > 0.0 {
                format!("{cat}, {name}: {} ± {}", fmt_value(v), fmt_value(e))
            } else {
                format!("{cat}, {name}: {}", fmt_value(v))
            };
            let _ = writeln!(
                out,
                "<rect class=\"bar\" x=\"{x:.2}\" y=\"{y0:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"{}\"><title>{}</title></rect>",
                (bar_w - 1.0).max(0.5),
                (y1 - y0).max(0.0),
                color(i),
                escape_xml(&tip)
            );
            if e > 0.0 {
                let mx = x + bar_w / 2.0;
                let (ta, tb) = (ax.py(v + e), ax.py(v - e));
                let cap = (bar_w * 0.25).min(6.0);
                let _ = writeln!(
                    out,
                    "<path class=\"error-bar\" d=\"M{:.2},{ta:.2}H{:.2}M{mx:.2},{ta:.2}V{tb:.2}M{:.2},{tb:.2}H{:.2}\" stroke=\"#222222\" stroke-width=\"1.2\" fill=\"none\"/>",
                    mx - cap,
                    mx + cap,
                    mx - cap,
                    mx + cap
                );
            }
        }
    }
    let entries: Vec<Entry> = series.iter().enumerate().map(|(i, (n, _))| Entry::indexed(i, n)).collect();
    legend(&mut out, &f, &entries, Swatch::Box);
    footer(out)
}

#[cfg(test)]
mod tests {
    use super::super::frame::{ticks, TickFmt};
    use super::super::test_util::{count_class, parse, texts, tooltips};
    use super::*;

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

    #[test]
    fn values_read_well() {
        assert_eq!(fmt_value(0.0), "0");
        assert_eq!(fmt_value(12.345), "12.3");
        assert_eq!(fmt_value(1.5), "1.5");
        assert_eq!(fmt_value(800.0), "800");
        assert_eq!(fmt_value(10_000.0), "10k");
        assert_eq!(fmt_value(2.5e9 * 10.0), "25G");
        assert_eq!(fmt_value(f64::NAN), "–");
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
    fn stacked_area_has_one_band_per_series_a_legend_and_tooltips() {
        let (xs, series) = util_series();
        let svg = stacked_area_svg(
            "Utilization, WF <placement>",
            "time (h)",
            "utilization (%)",
            &xs,
            &series,
            Some(100.0),
        );
        let doc = parse(&svg);
        assert_eq!(count_class(&doc, "polygon", "band"), 4);
        let t = texts(&doc);
        for name in [
            "background",
            "grid load",
            "PWT",
            "PGT & <misc>",
            "Utilization, WF <placement>",
            "time (h)",
            "utilization (%)",
        ] {
            assert!(t.iter().any(|x| x == name), "{name} not in {t:?}");
        }
        // y ticks 0..100 by 20.
        for tick in ["0", "20", "40", "60", "80", "100"] {
            assert!(t.iter().any(|x| x == tick), "tick {tick}");
        }
        let hover = count_class(&doc, "rect", "hover");
        assert_eq!(hover, 49);
        assert!(tooltips(&doc)
            .iter()
            .any(|x| x.starts_with("time (h) 0:") && x.contains("background 20")));
        // Auto range, unsorted x, short/NaN series values.
        let svg = stacked_area_svg(
            "t",
            "x",
            "y",
            &[3.0, 1.0, f64::NAN, 2.0],
            &[("a".into(), vec![1.0, f64::INFINITY]), ("b".into(), vec![-1.0, 2.0, 3.0, 4.0, 5.0])],
            None,
        );
        parse(&svg);
    }

    #[test]
    fn long_areas_are_averaged_down_and_stay_fast() {
        let n = 50_000;
        let xs: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let series = vec![
            ("a".to_string(), vec![10.0; n]),
            ("b".to_string(), (0..n).map(|i| (i % 7) as f64).collect()),
        ];
        let svg = stacked_area_svg("big", "x", "y", &xs, &series, Some(100.0));
        let doc = parse(&svg);
        let band = doc.descendants().find(|n| n.has_tag_name("polygon")).unwrap();
        let points = band.attribute("points").unwrap().split(' ').count();
        assert!(points <= 2 * AREA_BINS + 2, "{points} points");
        assert_eq!(count_class(&doc, "rect", "hover"), HOVER_COLUMNS);
        assert!(svg.as_str().len() < 200_000, "{} bytes", svg.as_str().len());
    }

    #[test]
    fn line_chart_names_series_and_reduces_long_ones() {
        let series = vec![
            ("CF".to_string(), (0..10).map(|i| (i as f64, (i * i) as f64)).collect()),
            ("WF".to_string(), vec![(0.0, 5.0), (f64::NAN, 1.0), (9.0, 60.0)]),
            ("single".to_string(), vec![(4.0, 4.0)]),
        ];
        let svg = line_svg("Response time", "load (%)", "time (s)", &series);
        let doc = parse(&svg);
        let t = texts(&doc);
        for name in ["CF", "WF", "single"] {
            assert!(t.iter().any(|x| x == name), "{name}");
        }
        assert_eq!(count_class(&doc, "polyline", "series"), 2);
        assert_eq!(count_class(&doc, "circle", "point"), 10 + 2 + 1);
        // 100,000 points of a saw tooth: at most 4 per pixel column survive, and the extremes do.
        let saw: Vec<(f64, f64)> = (0..100_000).map(|i| (i as f64, (i % 100) as f64)).collect();
        let svg = line_svg("saw", "x", "y", &[("s".into(), saw)]);
        let doc = parse(&svg);
        let line = doc.descendants().find(|n| n.has_tag_name("polyline")).unwrap();
        let pts: Vec<&str> = line.attribute("points").unwrap().split(' ').collect();
        assert!(pts.len() <= 4 * 530, "{}", pts.len());
        let ys: Vec<f64> = pts.iter().map(|p| p.split(',').nth(1).unwrap().parse().unwrap()).collect();
        let (top, bottom) = (ys.iter().copied().fold(f64::MAX, f64::min), ys.iter().copied().fold(0.0, f64::max));
        assert!(
            top < Frame::STANDARD.top + 5.0 && bottom > Frame::STANDARD.bottom - 5.0,
            "{top} {bottom}"
        );
    }

    #[test]
    fn grouped_bars_count_and_error_bars() {
        let cats: Vec<String> = ["1x32", "2x16", "4x8", "8x4"].map(String::from).to_vec();
        let series = vec![
            ("CF placement".to_string(), vec![12.0, 15.0, 22.0, 30.0]),
            ("WF placement".to_string(), vec![10.0, 14.0, 25.0, f64::NAN]),
            ("FTT".to_string(), vec![-3.0, 5.0]),
        ];
        let errs = vec![vec![1.0, 2.0, 3.0, 4.0], vec![0.5, f64::NAN]];
        let svg = grouped_bar_svg("Placement time", "seconds", &cats, &series, Some(&errs));
        let doc = parse(&svg);
        // 4 + 3 + 2 finite bars, 4 + 1 error bars.
        assert_eq!(count_class(&doc, "rect", "bar"), 9);
        assert_eq!(count_class(&doc, "path", "error-bar"), 5);
        assert!(tooltips(&doc).iter().any(|t| t == "1x32, CF placement: 12 ± 1"));
        let t = texts(&doc);
        for name in ["CF placement", "WF placement", "FTT", "1x32", "8x4"] {
            assert!(t.iter().any(|x| x == name), "{name}");
        }
        let many: Vec<String> = (0..12).map(|i| format!("category {i}")).collect();
        let svg = grouped_bar_svg("t", "y", &many, &[("s".into(), vec![1.0; 12])], None);
        parse(&svg);
        assert!(svg.as_str().contains("rotate(-35"));
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
            let doc = parse(svg);
            assert_eq!(count_class(&doc, "text", "no-data"), 1);
        }
    }

    #[test]
    fn degenerate_ranges_do_not_panic() {
        parse(&line_svg("flat", "x", "y", &[("s".into(), vec![(1.0, 0.0), (1.0, 0.0)])]));
        parse(&stacked_area_svg("flat", "x", "y", &[5.0], &[("s".into(), vec![0.0])], None));
        parse(&grouped_bar_svg("zero", "y", &["c".into()], &[("s".into(), vec![0.0])], None));
        parse(&line_svg("huge", "x", "y", &[("s".into(), vec![(0.0, 1e300), (1e300, -1e300)])]));
    }
}
