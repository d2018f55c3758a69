//! What every chart shares: the frame (size and plot area), the header with title and
//! tooltip, round axis ticks and their labels, the legend, and the "no data" chart.

use std::fmt::Write as _;

use super::{color, dash, escape_xml, Svg};

pub(crate) const FONT: &str = "font-family=\"Helvetica, Arial, sans-serif\"";

/// The size of a chart and its plot area, in px.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame {
    pub w: f64,
    pub h: f64,
    pub left: f64,
    /// Right edge of the plot area; a legend on the right sits beyond it.
    pub right: f64,
    pub top: f64,
    pub bottom: f64,
}

impl Frame {
    /// The 800 × 400 frame of the x/y charts, with a legend on the right.
    pub const STANDARD: Frame = Frame {
        w: 800.0,
        h: 400.0,
        left: 72.0,
        right: 600.0,
        top: 40.0,
        bottom: 340.0,
    };

    pub fn legend_x(&self) -> f64 {
        self.right + 16.0
    }
    pub fn mid_x(&self) -> f64 {
        (self.left + self.right) / 2.0
    }
    pub fn plot_w(&self) -> f64 {
        self.right - self.left
    }
    pub fn plot_h(&self) -> f64 {
        self.bottom - self.top
    }

    /// Opens a nested viewport over the plot area: what is drawn inside is clipped to it
    /// without a `clipPath` id (ids would collide when several charts share one HTML page).
    pub fn open_clip(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "<svg x=\"{l}\" y=\"{t}\" width=\"{w:.1}\" height=\"{h:.1}\" viewBox=\"{l} {t} {w:.1} {h:.1}\" overflow=\"hidden\">",
            l = self.left,
            t = self.top,
            w = self.plot_w(),
            h = self.plot_h()
        );
    }

    pub fn close_clip(out: &mut String) {
        out.push_str("</svg>\n");
    }
}

/// Shortens `s` to at most `max` characters (with an ellipsis), then escapes it.
pub(crate) fn label(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        escape_xml(s)
    } else {
        let short: String = s.chars().take(max.saturating_sub(1)).collect();
        escape_xml(&format!("{short}\u{2026}"))
    }
}

/// Opens the `<svg>` element: size, accessible name and tooltip (`<title>`), white background,
/// the title text.
pub(crate) fn header(out: &mut String, f: &Frame, kind: &str, title: &str) {
    let t = escape_xml(title);
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart chart-{kind}\" width=\"{w}\" height=\"{h}\" \
         viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"{t}\" {FONT} font-size=\"12\">\n\
         <title>{t}</title>\n\
         <rect x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\" fill=\"#ffffff\"/>\n\
         <text class=\"chart-title\" x=\"{:.1}\" y=\"24\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">{}</text>\n",
        f.w / 2.0,
        label(title, 90),
        w = f.w,
        h = f.h,
    );
}

pub(crate) fn footer(mut out: String) -> Svg {
    out.push_str("</svg>\n");
    Svg(out)
}

/// A valid chart with its title and the words "no data" in an empty plot area.
pub(crate) fn no_data(kind: &str, title: &str) -> Svg {
    let f = Frame::STANDARD;
    let mut out = String::new();
    header(&mut out, &f, kind, title);
    let _ = write!(
        out,
        "<rect x=\"{}\" y=\"{}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"#999999\"/>\n\
         <text class=\"no-data\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"14\" fill=\"#777777\">no data</text>\n",
        f.left,
        f.top,
        f.plot_w(),
        f.plot_h(),
        f.mid_x(),
        (f.top + f.bottom) / 2.0
    );
    footer(out)
}

/// Round tick positions covering `[lo, hi]` with about `target` intervals.
/// Returns `(axis_lo, axis_hi, step)`; the axis bounds are multiples of
/// `step`, which is 1, 2, 2.5 or 5 times a power of ten.
pub(crate) fn nice_range(lo: f64, hi: f64, target: usize) -> (f64, f64, f64) {
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
pub(crate) fn x_range(x_min: f64, x_max: f64) -> (f64, f64, f64, f64) {
    let (lo, hi, step) = nice_range(x_min, x_max, 8);
    if x_max > x_min {
        let first = (x_min / step - 1e-9).ceil() * step;
        (x_min, x_max, step, first)
    } else {
        (lo, hi, step, lo)
    }
}

pub(crate) fn ticks(lo: f64, hi: f64, step: f64) -> Vec<f64> {
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
pub(crate) struct TickFmt {
    scale: f64,
    suffix: &'static str,
    decimals: usize,
}

impl TickFmt {
    pub fn new(ticks: &[f64], step: f64) -> Self {
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

    pub fn fmt(&self, v: f64) -> String {
        let s = format!("{:.*}", self.decimals, v / self.scale);
        let s = if s.starts_with('-') && s[1..].chars().all(|c| c == '0' || c == '.') {
            s[1..].to_string()
        } else {
            s
        };
        format!("{s}{}", self.suffix)
    }
}

/// A value for people: at most 4 significant digits, no trailing zeros, k/M/G above 10,000.
pub fn fmt_value(v: f64) -> String {
    if !v.is_finite() {
        return "–".to_string();
    }
    let (scaled, suffix) = match v.abs() {
        a if a >= 1e10 => (v / 1e9, "G"),
        a if a >= 1e7 => (v / 1e6, "M"),
        a if a >= 1e4 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let decimals = match scaled.abs() {
        a if a >= 100.0 => 0,
        a if a >= 10.0 => 1,
        _ => 2,
    };
    let mut s = format!("{scaled:.decimals$}");
    if s.contains('.') {
        s = s.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    if s == "-0" {
        s = "0".to_string();
    }
    format!("{s}{suffix}")
}

/// Linear map from data coordinates to the plot area.
pub(crate) struct Axes {
    pub f: Frame,
    pub x_lo: f64,
    pub x_hi: f64,
    pub y_lo: f64,
    pub y_hi: f64,
}

impl Axes {
    pub fn px(&self, x: f64) -> f64 {
        self.f.left + (x - self.x_lo) / (self.x_hi - self.x_lo) * self.f.plot_w()
    }
    pub fn py(&self, y: f64) -> f64 {
        self.f.bottom - (y - self.y_lo) / (self.y_hi - self.y_lo) * self.f.plot_h()
    }

    /// Horizontal grid, y ticks and labels, axis lines and axis titles.
    /// `x_ticks` (first tick, step) is `None` for category axes (the caller labels those).
    pub fn draw(&self, out: &mut String, y_step: f64, x_ticks: Option<(f64, f64)>, x_label: &str, y_label: &str) {
        let f = &self.f;
        let yt = ticks(self.y_lo, self.y_hi, y_step);
        let yf = TickFmt::new(&yt, y_step);
        for &v in &yt {
            let y = self.py(v);
            let _ = writeln!(
                out,
                "<line x1=\"{}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" stroke=\"#e5e5e5\"/>\
                 <text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                f.left,
                f.right,
                f.left - 6.0,
                y + 4.0,
                escape_xml(&yf.fmt(v))
            );
        }
        if let Some((x_lo, step)) = x_ticks {
            let xt = ticks(x_lo, self.x_hi + step * 1e-9, step);
            let xf = TickFmt::new(&xt, step);
            for &v in &xt {
                let x = self.px(v);
                let _ = writeln!(
                    out,
                    "<line x1=\"{x:.1}\" y1=\"{b}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#333333\"/>\
                     <text class=\"tick\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                    f.bottom + 5.0,
                    f.bottom + 18.0,
                    escape_xml(&xf.fmt(v)),
                    b = f.bottom
                );
            }
        }
        let base = self.py(0.0f64.clamp(self.y_lo, self.y_hi));
        let _ = write!(
            out,
            "<line x1=\"{l}\" y1=\"{t}\" x2=\"{l}\" y2=\"{b}\" stroke=\"#333333\"/>\n\
             <line x1=\"{l}\" y1=\"{base:.1}\" x2=\"{r}\" y2=\"{base:.1}\" stroke=\"#333333\"/>\n\
             <text class=\"axis-label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n\
             <text class=\"axis-label\" x=\"16\" y=\"{my:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {my:.1})\">{}</text>\n",
            f.mid_x(),
            f.h - 12.0,
            label(x_label, 90),
            label(y_label, 50),
            l = f.left,
            t = f.top,
            b = f.bottom,
            r = f.right,
            my = (f.top + f.bottom) / 2.0,
        );
    }
}

#[derive(Clone, Copy)]
pub(crate) enum Swatch {
    Box,
    Line,
}

/// One legend entry: palette index (or explicit colour) and name.
pub(crate) struct Entry<'a> {
    pub color: &'a str,
    pub dash: &'static str,
    pub name: &'a str,
}

impl<'a> Entry<'a> {
    pub fn indexed(i: usize, name: &'a str) -> Self {
        Entry {
            color: color(i),
            dash: dash(i),
            name,
        }
    }
}

/// A vertical legend right of the plot area (up to ~17 entries; more are summarised).
pub(crate) fn legend(out: &mut String, f: &Frame, entries: &[Entry], kind: Swatch) {
    let max_rows = (f.plot_h() / 18.0) as usize;
    let lx = f.legend_x();
    out.push_str("<g class=\"legend\">\n");
    for (row, e) in entries.iter().enumerate() {
        let y = f.top + 8.0 + row as f64 * 18.0;
        if row + 1 == max_rows && entries.len() > max_rows {
            let _ = writeln!(
                out,
                "<text x=\"{lx}\" y=\"{:.1}\" fill=\"#555555\">\u{2026} {} more</text>",
                y + 4.0,
                entries.len() - row
            );
            break;
        }
        match kind {
            Swatch::Box => {
                let _ = write!(
                    out,
                    "<rect x=\"{lx}\" y=\"{:.1}\" width=\"14\" height=\"12\" fill=\"{}\"/>",
                    y - 6.0,
                    e.color
                );
            }
            Swatch::Line => {
                let _ = write!(
                    out,
                    "<line x1=\"{lx}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{}\" stroke-width=\"2.5\"{}/>",
                    lx + 16.0,
                    e.color,
                    e.dash
                );
            }
        }
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            lx + 22.0,
            y + 4.0,
            label(e.name, 24)
        );
    }
    out.push_str("</g>\n");
}

/// A horizontal legend on one line at height `y`, starting at `x` (for charts whose plot
/// area takes the whole width).
pub(crate) fn legend_row(out: &mut String, x: f64, y: f64, entries: &[(&str, &str)]) {
    out.push_str("<g class=\"legend\">\n");
    let mut x = x;
    for (color, name) in entries {
        let _ = writeln!(
            out,
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"14\" height=\"12\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            y - 10.0,
            x + 18.0,
            y,
            escape_xml(name)
        );
        x += 18.0 + 7.0 * name.chars().count() as f64 + 16.0;
    }
    out.push_str("</g>\n");
}

pub(crate) fn finite_or_zero(v: f64) -> f64 {
    if v.is_finite() {
        v
    } else {
        0.0
    }
}
