//! A heat map of a square matrix between named sites (forecast bandwidth from → to).

use std::fmt::Write as _;

use super::frame::{fmt_value, footer, header, label, no_data, Frame};
use super::{escape_xml, Svg};

/// Viridis at eight stops: perceptually uniform, readable with colour-vision deficiencies and
/// in grey.
const VIRIDIS: [(u8, u8, u8); 8] = [
    (0x44, 0x01, 0x54),
    (0x46, 0x32, 0x7e),
    (0x36, 0x5c, 0x8d),
    (0x27, 0x7f, 0x8e),
    (0x1f, 0xa1, 0x87),
    (0x4a, 0xc1, 0x6d),
    (0xa0, 0xda, 0x39),
    (0xfd, 0xe7, 0x25),
];

/// The scale's colour at `t` in [0, 1].
fn viridis(t: f64) -> String {
    let t = if t.is_finite() { t.clamp(0.0, 1.0) } else { 0.0 };
    let pos = t * (VIRIDIS.len() - 1) as f64;
    let i = (pos.floor() as usize).min(VIRIDIS.len() - 2);
    let frac = pos - i as f64;
    let mix = |a: u8, b: u8| (a as f64 + (b as f64 - a as f64) * frac).round() as u8;
    let (a, b) = (VIRIDIS[i], VIRIDIS[i + 1]);
    format!("#{:02x}{:02x}{:02x}", mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// Maps values to [0, 1]: linear between the smallest and largest value, or logarithmic when
/// they are more than a factor 20 apart (bandwidths of LAN and WAN links).
struct Scale {
    lo: f64,
    hi: f64,
    log: bool,
}

impl Scale {
    fn of(values: impl Iterator<Item = f64>) -> Option<Scale> {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values.filter(|v| v.is_finite()) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        if lo > hi {
            return None;
        }
        Some(Scale {
            lo,
            hi,
            log: lo > 0.0 && hi / lo > 20.0,
        })
    }

    fn t(&self, v: f64) -> f64 {
        if self.hi <= self.lo {
            return 0.5;
        }
        if self.log {
            (v.ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }

    fn value_at(&self, t: f64) -> f64 {
        if self.log {
            (self.lo.ln() + t * (self.hi.ln() - self.lo.ln())).exp()
        } else {
            self.lo + t * (self.hi - self.lo)
        }
    }
}

/// A heat map: `values[i][j]` is the value from `labels[i]` (row) to `labels[j]` (column), in
/// `unit`; `None` (e.g. a site to itself) is drawn grey with a dash. Each cell has a tooltip
/// ("vu → leiden: 800 Mbit/s") and, when large enough, its value; a colour bar gives the
/// scale. Shows at most 40 sites.
pub fn heatmap_svg(title: &str, labels: &[String], values: &[Vec<Option<f64>>], unit: &str) -> Svg {
    let n = labels.len().min(40);
    let cell_value = |i: usize, j: usize| values.get(i).and_then(|r| r.get(j)).copied().flatten().filter(|v| v.is_finite());
    let Some(scale) = Scale::of((0..n).flat_map(|i| (0..n).filter_map(move |j| cell_value(i, j)))) else {
        return no_data("heatmap", title);
    };
    let cell = (480.0 / n as f64).clamp(14.0, 48.0);
    let longest = labels[..n].iter().map(|l| l.chars().count().min(16)).max().unwrap_or(1) as f64;
    let left = 40.0 + longest * 7.0;
    let top = 56.0 + longest * 5.5;
    let grid = cell * n as f64;
    let f = Frame {
        w: (left + grid + 150.0).max(420.0),
        h: top + grid + 30.0,
        left,
        right: left + grid,
        top,
        bottom: top + grid,
    };
    let mut out = String::with_capacity(1024 + n * n * 160);
    header(&mut out, &f, "heatmap", title);
    let _ = writeln!(
        out,
        "<text class=\"axis-label\" x=\"14\" y=\"{my:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {my:.1})\">from</text>\
         <text class=\"axis-label\" x=\"{:.1}\" y=\"44\" text-anchor=\"middle\">to</text>",
        f.left + grid / 2.0,
        my = f.top + grid / 2.0
    );
    for (i, name) in labels[..n].iter().enumerate() {
        let c = f.top + (i as f64 + 0.5) * cell;
        let x = f.left + (i as f64 + 0.5) * cell;
        let _ = writeln!(
            out,
            "<text class=\"row-label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\
             <text class=\"col-label\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"start\" transform=\"rotate(-50 {x:.1} {:.1})\">{}</text>",
            f.left - 6.0,
            c + 4.0,
            label(name, 16),
            f.top - 6.0,
            f.top - 6.0,
            label(name, 16)
        );
    }
    for i in 0..n {
        for j in 0..n {
            let (x, y) = (f.left + j as f64 * cell, f.top + i as f64 * cell);
            let (fill, tip, text, ink) = match cell_value(i, j) {
                Some(v) => {
                    let t = scale.t(v);
                    (
                        viridis(t),
                        format!("{} → {}: {} {unit}", labels[i], labels[j], fmt_value(v)),
                        fmt_value(v),
                        if t < 0.6 { "#ffffff" } else { "#000000" },
                    )
                }
                None => (
                    "#eeeeee".to_string(),
                    format!("{} → {}: no value", labels[i], labels[j]),
                    "–".to_string(),
                    "#777777",
                ),
            };
            let _ = write!(
                out,
                "<rect class=\"cell\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{cell:.1}\" height=\"{cell:.1}\" fill=\"{fill}\" stroke=\"#ffffff\" stroke-width=\"1\"><title>{}</title></rect>",
                escape_xml(&tip)
            );
            if cell >= 30.0 {
                let _ = write!(
                    out,
                    "<text class=\"cell-value\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\" fill=\"{ink}\" pointer-events=\"none\">{}</text>",
                    x + cell / 2.0,
                    y + cell / 2.0 + 3.5,
                    escape_xml(&text)
                );
            }
            out.push('\n');
        }
    }
    // The colour bar: 40 steps from the top (highest) down, labelled at both ends and the middle.
    let (bx, bh) = (f.right + 24.0, grid.max(120.0));
    let steps = 40;
    for k in 0..steps {
        let t = 1.0 - (k as f64 + 0.5) / steps as f64;
        let _ = write!(
            out,
            "<rect x=\"{bx:.1}\" y=\"{:.2}\" width=\"14\" height=\"{:.2}\" fill=\"{}\"/>",
            f.top + bh * k as f64 / steps as f64,
            bh / steps as f64 + 0.3,
            viridis(t)
        );
    }
    out.push('\n');
    for t in [1.0, 0.5, 0.0] {
        let _ = writeln!(
            out,
            "<text class=\"scale\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            bx + 20.0,
            f.top + bh * (1.0 - t) + 4.0,
            escape_xml(&fmt_value(scale.value_at(t)))
        );
    }
    let _ = writeln!(
        out,
        "<text class=\"scale-unit\" x=\"{:.1}\" y=\"{:.1}\">{}{}</text>",
        bx,
        f.top - 8.0,
        label(unit, 20),
        if scale.log { " (log)" } else { "" }
    );
    footer(out)
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{count_class, parse, texts, tooltips};
    use super::*;

    fn matrix() -> (Vec<String>, Vec<Vec<Option<f64>>>) {
        let sites: Vec<String> = ["vu", "leiden", "uva", "delft-fs"].map(String::from).to_vec();
        let v = (0..4)
            .map(|i| {
                (0..4)
                    .map(|j| match (i, j) {
                        _ if i == j => None,
                        (0, 3) | (3, 0) => Some(960.0),
                        _ => Some(800.0),
                    })
                    .collect()
            })
            .collect();
        (sites, v)
    }

    #[test]
    fn one_cell_per_pair_with_tooltips_and_scale() {
        let (sites, v) = matrix();
        let svg = heatmap_svg("Forecast bandwidth", &sites, &v, "Mbit/s");
        let doc = parse(&svg);
        assert_eq!(count_class(&doc, "rect", "cell"), 16);
        let tips = tooltips(&doc);
        assert!(tips.contains(&"vu → delft-fs: 960 Mbit/s".to_string()), "{tips:?}");
        assert!(tips.contains(&"leiden → uva: 800 Mbit/s".to_string()));
        assert!(tips.contains(&"uva → uva: no value".to_string()));
        let t = texts(&doc);
        for want in ["vu", "delft-fs", "from", "to", "Mbit/s", "960", "800"] {
            assert!(t.iter().any(|x| x == want), "{want} not in {t:?}");
        }
        // Highest and lowest values get the scale's ends.
        let fill = |tip: &str| {
            doc.descendants()
                .find(|n| n.has_tag_name("rect") && n.children().any(|c| c.text() == Some(tip)))
                .and_then(|n| n.attribute("fill"))
                .unwrap()
                .to_string()
        };
        assert_eq!(fill("vu → delft-fs: 960 Mbit/s"), "#fde725");
        assert_eq!(fill("vu → leiden: 800 Mbit/s"), "#440154");
    }

    #[test]
    fn wide_ranges_use_a_log_scale_and_bad_input_is_safe() {
        let sites: Vec<String> = ["a", "b"].map(String::from).to_vec();
        let v = vec![vec![None, Some(10.0)], vec![Some(10_000.0), Some(f64::NAN)]];
        let svg = heatmap_svg("bw", &sites, &v, "Mbit/s");
        let doc = parse(&svg);
        assert!(texts(&doc).iter().any(|t| t == "Mbit/s (log)"));
        // The middle of a log scale is the geometric mean.
        assert!(texts(&doc).iter().any(|t| t == "316"), "{:?}", texts(&doc));
        // Ragged rows, no values, no sites.
        parse(&heatmap_svg("ragged", &sites, &[vec![Some(1.0)]], "x"));
        assert_eq!(count_class(&parse(&heatmap_svg("none", &sites, &[], "x")), "text", "no-data"), 1);
        assert_eq!(count_class(&parse(&heatmap_svg("none", &[], &[], "x")), "text", "no-data"), 1);
    }

    #[test]
    fn viridis_ends_and_clamps() {
        assert_eq!(viridis(0.0), "#440154");
        assert_eq!(viridis(1.0), "#fde725");
        assert_eq!(viridis(7.0), "#fde725");
        assert_eq!(viridis(f64::NAN), "#440154");
    }
}
