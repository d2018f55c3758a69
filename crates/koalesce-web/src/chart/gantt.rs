//! Gantt charts: the phases of a job per component and site (or of many jobs, one row each),
//! and the machine: jobs over time in lanes per site.

use std::fmt::Write as _;

use super::frame::{footer, header, label, legend_row, nice_range, no_data, ticks, Frame, TickFmt};
use super::{escape_xml, Svg};

/// A phase of a job's life (003 §4.1): waiting in a placement queue, placed (processors
/// chosen, not yet held), its input files staging, processors claimed (held, waiting for the
/// others: PWT), running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    Queued,
    Placed,
    Staging,
    Claimed,
    Running,
}

impl Phase {
    pub const ALL: [Phase; 5] = [Phase::Queued, Phase::Placed, Phase::Staging, Phase::Claimed, Phase::Running];

    pub fn name(self) -> &'static str {
        match self {
            Phase::Queued => "queued",
            Phase::Placed => "placed",
            Phase::Staging => "staging",
            Phase::Claimed => "claimed",
            Phase::Running => "running",
        }
    }

    /// Okabe–Ito colours (grey, sky blue, orange, reddish purple, bluish green).
    pub fn color(self) -> &'static str {
        match self {
            Phase::Queued => "#BBBBBB",
            Phase::Placed => "#56B4E9",
            Phase::Staging => "#E69F00",
            Phase::Claimed => "#CC79A7",
            Phase::Running => "#009E73",
        }
    }
}

/// How a row ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    Failed,
    Cancelled,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
        }
    }

    /// Parses an API state name; `None` for states that are not final.
    pub fn of_state(state: &str) -> Option<Outcome> {
        match state {
            "succeeded" => Some(Outcome::Succeeded),
            "failed" => Some(Outcome::Failed),
            "cancelled" => Some(Outcome::Cancelled),
            _ => None,
        }
    }
}

/// One phase over `[from_ms, to_ms)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub phase: Phase,
    pub from_ms: u64,
    pub to_ms: u64,
}

/// One row of a Gantt chart.
#[derive(Debug, Clone, PartialEq)]
pub struct GanttRow {
    /// Left of the row ("c0 @ vu", "job 17").
    pub label: String,
    /// What the row is, for the tooltips ("component 0, 16 processors at vu").
    pub tooltip: String,
    pub spans: Vec<Span>,
    pub outcome: Option<Outcome>,
}

/// A Gantt chart's input.
#[derive(Debug, Clone, Copy)]
pub struct Gantt<'a> {
    pub title: &'a str,
    /// Time 0 of the axis (e.g. the job's submission), in ms.
    pub origin_ms: u64,
    /// What time 0 is, for the axis title: "since submission".
    pub origin_label: &'a str,
    /// A vertical "now" line for jobs that have not ended.
    pub now_ms: Option<u64>,
    /// Figures printed under the title, e.g. `[("FTT", "12 s"), ("PGT", "30 s")]`.
    pub figures: &'a [(&'a str, String)],
    pub rows: &'a [GanttRow],
}

/// The instants of a job's timeline (as the API's `Timeline` and the simulator's records
/// carry them), in ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobTimes {
    pub submitted: u64,
    /// JPT: the (last) placement.
    pub placed: Option<u64>,
    /// JCT: every component claimed.
    pub claimed: Option<u64>,
    pub started: Option<u64>,
    pub finished: Option<u64>,
    /// Estimated file transfer time from the placement.
    pub ftt_ms: u64,
}

/// The phases of a job from its timeline; phases still open end at `now_ms` (for a job that
/// ended, its end). Staging is `[placed, placed + FTT)`, cut at the job's end; it overlaps the
/// placed and claimed phases (the chart draws it as a strip).
pub fn job_spans(t: &JobTimes, now_ms: u64) -> Vec<Span> {
    let end = t.finished.unwrap_or(now_ms.max(t.submitted));
    let mut out = Vec::with_capacity(5);
    let mut push = |phase, from: u64, to: u64| {
        let to = to.min(end);
        if to > from {
            out.push(Span {
                phase,
                from_ms: from,
                to_ms: to,
            });
        }
    };
    push(Phase::Queued, t.submitted, t.placed.or(t.started).unwrap_or(end));
    if let Some(p) = t.placed {
        push(Phase::Placed, p, t.claimed.or(t.started).unwrap_or(end));
        if t.ftt_ms > 0 {
            push(Phase::Staging, p, p.saturating_add(t.ftt_ms));
        }
    }
    if let Some(c) = t.claimed {
        push(Phase::Claimed, c, t.started.unwrap_or(end));
    }
    if let Some(s) = t.started {
        push(Phase::Running, s, end);
    }
    out
}

/// A duration for people: "350 ms", "12.3 s", "4 min 05 s", "2 h 03 min".
pub fn fmt_duration(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=59_999 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..=3_599_999 if (ms / 1000).is_multiple_of(60) => format!("{} min", ms / 60_000),
        60_000..=3_599_999 => format!("{} min {:02} s", ms / 60_000, (ms / 1000) % 60),
        _ => format!("{} h {:02} min", ms / 3_600_000, (ms / 60_000) % 60),
    }
}

/// The time axis: unit (ms per unit) and its name for a span of `span_ms`.
fn time_unit(span_ms: u64) -> (f64, &'static str) {
    if span_ms <= 120_000 {
        (1000.0, "s")
    } else if span_ms <= 7_200_000 {
        (60_000.0, "min")
    } else {
        (3_600_000.0, "h")
    }
}

const ROW_H: f64 = 22.0;
/// Rows drawn at most (the rest are counted in a note).
pub const MAX_ROWS: usize = 1000;

/// Time axis over `[origin, origin + span]`, drawn below the rows of `f`.
struct TimeAxis {
    f: Frame,
    origin: u64,
    unit: f64,
    hi: f64,
}

impl TimeAxis {
    fn new(f: Frame, origin: u64, last: u64) -> (TimeAxis, f64, &'static str) {
        let span = last.saturating_sub(origin).max(1);
        let (unit, name) = time_unit(span);
        let (_, hi, step) = nice_range(0.0, span as f64 / unit, 8);
        (TimeAxis { f, origin, unit, hi }, step, name)
    }

    fn px(&self, t: u64) -> f64 {
        let v = (t as f64 - self.origin as f64) / self.unit;
        self.f.left + (v / self.hi).clamp(0.0, 1.0) * self.f.plot_w()
    }

    fn draw(&self, out: &mut String, step: f64, title: &str) {
        let f = &self.f;
        let t = ticks(0.0, self.hi, step);
        let tf = TickFmt::new(&t, step);
        for &v in &t {
            let x = f.left + v / self.hi * f.plot_w();
            let _ = writeln!(
                out,
                "<line x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#e0e0e0\"/><text class=\"tick\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                f.top,
                f.bottom + 4.0,
                f.bottom + 17.0,
                escape_xml(&tf.fmt(v))
            );
        }
        let _ = writeln!(
            out,
            "<line x1=\"{}\" y1=\"{b}\" x2=\"{}\" y2=\"{b}\" stroke=\"#333333\"/><text class=\"axis-label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            f.left,
            f.right,
            f.mid_x(),
            f.bottom + 34.0,
            label(title, 90),
            b = f.bottom
        );
    }

    fn now_line(&self, out: &mut String, now: u64) {
        let x = self.px(now);
        let _ = writeln!(
            out,
            "<line class=\"now\" x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#D55E00\" stroke-dasharray=\"4 3\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#D55E00\">now</text>",
            self.f.top - 2.0,
            self.f.bottom,
            self.f.top - 5.0
        );
    }

    /// One span of a row whose top is `y`: a full-height bar, or for staging a strip along
    /// the bottom of the row (staging overlaps the placed and claimed phases).
    fn span(&self, out: &mut String, y: f64, s: &Span, what: &str) {
        let (x0, x1) = (self.px(s.from_ms), self.px(s.to_ms));
        let w = (x1 - x0).max(1.0);
        let (top, h) = if s.phase == Phase::Staging {
            (y + ROW_H - 9.0, 5.0)
        } else {
            (y + 3.0, ROW_H - 6.0)
        };
        let from = s.from_ms.saturating_sub(self.origin);
        let to = s.to_ms.saturating_sub(self.origin);
        let _ = writeln!(
            out,
            "<rect class=\"span {}\" x=\"{x0:.2}\" y=\"{top:.1}\" width=\"{w:.2}\" height=\"{h:.1}\" fill=\"{}\"><title>{}: {} from {} to {} ({})</title></rect>",
            s.phase.name(),
            s.phase.color(),
            escape_xml(what),
            s.phase.name(),
            fmt_duration(from),
            fmt_duration(to),
            fmt_duration(s.to_ms.saturating_sub(s.from_ms))
        );
    }
}

fn outcome_mark(out: &mut String, x: f64, y: f64, o: Outcome, what: &str) {
    let cy = y + ROW_H / 2.0;
    let x = x + 6.0;
    let shape = match o {
        Outcome::Succeeded => format!("<circle cx=\"{x:.1}\" cy=\"{cy:.1}\" r=\"4\" fill=\"#0072B2\"/>"),
        Outcome::Failed => format!(
            "<path d=\"M{:.1},{:.1}L{:.1},{:.1}M{:.1},{:.1}L{:.1},{:.1}\" stroke=\"#D55E00\" stroke-width=\"2.5\"/>",
            x - 4.0,
            cy - 4.0,
            x + 4.0,
            cy + 4.0,
            x - 4.0,
            cy + 4.0,
            x + 4.0,
            cy - 4.0
        ),
        Outcome::Cancelled => format!(
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"8\" height=\"8\" fill=\"#7F7F7F\"/>",
            x - 4.0,
            cy - 4.0
        ),
    };
    let _ = writeln!(
        out,
        "<g class=\"outcome {}\">{shape}<title>{}: {}</title></g>",
        o.name(),
        escape_xml(what),
        o.name()
    );
}

fn phase_legend(out: &mut String, f: &Frame, y: f64) {
    let entries: Vec<(&str, &str)> = Phase::ALL.iter().map(|p| (p.color(), p.name())).collect();
    legend_row(out, f.left, y, &entries);
}

/// A Gantt chart: one row per entry of `g.rows` (at most `MAX_ROWS`; a note counts the
/// rest), each span a bar coloured by phase with a tooltip (what, phase, from, to, duration),
/// staging as a strip along the row's bottom, a mark for how the row ended, the figures under
/// the title, a legend of the phases and a time axis relative to `g.origin_ms`.
pub fn gantt_svg(g: &Gantt) -> Svg {
    let rows = &g.rows[..g.rows.len().min(MAX_ROWS)];
    let last = rows.iter().flat_map(|r| r.spans.iter().map(|s| s.to_ms)).chain(g.now_ms).max();
    let Some(last) = last.filter(|_| rows.iter().any(|r| !r.spans.is_empty())) else {
        return no_data("gantt", g.title);
    };
    let figures_h = if g.figures.is_empty() { 0.0 } else { 20.0 };
    let top = 44.0 + figures_h + 28.0;
    let bottom = top + rows.len() as f64 * ROW_H;
    let f = Frame {
        w: 800.0,
        h: bottom + 46.0,
        left: 170.0,
        right: 770.0,
        top,
        bottom,
    };
    let (axis, step, unit) = TimeAxis::new(f, g.origin_ms, last);
    let mut out = String::with_capacity(2048 + rows.len() * 600);
    header(&mut out, &f, "gantt", g.title);
    if !g.figures.is_empty() {
        let text: Vec<String> = g.figures.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(
            out,
            "<text class=\"figures\" x=\"{:.1}\" y=\"46\" text-anchor=\"middle\" fill=\"#333333\">{}</text>",
            f.w / 2.0,
            escape_xml(&text.join("   ·   "))
        );
    }
    phase_legend(&mut out, &f, 44.0 + figures_h + 14.0);
    for i in (1..rows.len()).step_by(2) {
        let y = top + i as f64 * ROW_H;
        {
            let _ = writeln!(
                out,
                "<rect x=\"{}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{ROW_H}\" fill=\"#f4f4f4\"/>",
                f.left,
                f.plot_w()
            );
        }
    }
    axis.draw(&mut out, step, &format!("time {} ({unit})", g.origin_label));
    for (i, row) in rows.iter().enumerate() {
        let y = top + i as f64 * ROW_H;
        let _ = writeln!(
            out,
            "<g class=\"row\"><text class=\"row-label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}<title>{}</title></text>",
            f.left - 8.0,
            y + ROW_H / 2.0 + 4.0,
            label(&row.label, 24),
            escape_xml(&row.tooltip)
        );
        let mut spans: Vec<&Span> = row.spans.iter().collect();
        // Staging strips on top of the bars they overlap.
        spans.sort_by_key(|s| (s.phase == Phase::Staging, s.from_ms));
        for s in spans {
            axis.span(&mut out, y, s, &row.tooltip);
        }
        if let Some(o) = row.outcome {
            let end = row.spans.iter().map(|s| s.to_ms).max().unwrap_or(g.origin_ms);
            outcome_mark(&mut out, axis.px(end), y, o, &row.tooltip);
        }
        out.push_str("</g>\n");
    }
    if let Some(now) = g.now_ms {
        axis.now_line(&mut out, now);
    }
    if g.rows.len() > rows.len() {
        let _ = writeln!(
            out,
            "<text class=\"note\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#555555\">… {} more rows not shown</text>",
            f.right,
            f.bottom + 34.0,
            g.rows.len() - rows.len()
        );
    }
    footer(out)
}

/// One job (or component) on the machine: at `site` (index into the sites), its spans.
#[derive(Debug, Clone, PartialEq)]
pub struct MachineBar {
    pub site: usize,
    /// Written in the bar when it is wide enough ("17").
    pub label: String,
    pub tooltip: String,
    pub spans: Vec<Span>,
}

/// Lanes needed so that no two bars of a site overlap: bars in order of their start, each in
/// the first lane free by then (optimal for intervals). Returns the lane of every bar and the
/// number of lanes per site.
fn assign_lanes(sites: usize, bars: &[MachineBar]) -> (Vec<Option<usize>>, Vec<usize>) {
    let mut order: Vec<usize> = (0..bars.len())
        .filter(|&i| bars[i].site < sites && !bars[i].spans.is_empty())
        .collect();
    let start = |i: usize| bars[i].spans.iter().map(|s| s.from_ms).min().unwrap_or(0);
    let end = |i: usize| bars[i].spans.iter().map(|s| s.to_ms).max().unwrap_or(0);
    order.sort_by_key(|&i| (start(i), end(i), i));
    let mut lane_end: Vec<Vec<u64>> = vec![Vec::new(); sites];
    let mut lane = vec![None; bars.len()];
    for i in order {
        let ends = &mut lane_end[bars[i].site];
        let l = match ends.iter().position(|&e| e <= start(i)) {
            Some(l) => l,
            None => {
                ends.push(0);
                ends.len() - 1
            }
        };
        ends[l] = end(i);
        lane[i] = Some(l);
    }
    (lane, lane_end.iter().map(Vec::len).collect())
}

/// The machine over time: for each site a band of lanes, each job (component) a bar in a lane
/// of its site coloured by phase (claimed, then running: the PWT shows), labelled when wide
/// enough, with a tooltip. At most `MAX_ROWS` lanes are drawn in all.
pub fn machine_gantt_svg(title: &str, sites: &[String], bars: &[MachineBar], origin_ms: u64, origin_label: &str) -> Svg {
    let (lanes, per_site) = assign_lanes(sites.len(), bars);
    let last = bars.iter().flat_map(|b| b.spans.iter().map(|s| s.to_ms)).max();
    let Some(last) = last.filter(|_| lanes.iter().any(Option::is_some)) else {
        return no_data("machine", title);
    };
    // First row of each site; every site gets at least one (empty) lane.
    let mut first_row = Vec::with_capacity(sites.len());
    let mut rows = 0usize;
    for &n in &per_site {
        first_row.push(rows);
        rows += n.max(1);
    }
    let shown_rows = rows.min(MAX_ROWS);
    let top = 44.0 + 28.0;
    let bottom = top + shown_rows as f64 * ROW_H;
    let f = Frame {
        w: 800.0,
        h: bottom + 46.0,
        left: 120.0,
        right: 770.0,
        top,
        bottom,
    };
    let (axis, step, unit) = TimeAxis::new(f, origin_ms, last);
    let mut out = String::with_capacity(2048 + bars.len() * 400);
    header(&mut out, &f, "machine", title);
    let entries = [Phase::Claimed, Phase::Running].map(|p| (p.color(), p.name()));
    legend_row(&mut out, f.left, 58.0, &entries);
    for (s, name) in sites.iter().enumerate() {
        let r0 = first_row[s];
        if r0 >= shown_rows {
            break;
        }
        let n = per_site[s].max(1).min(shown_rows - r0);
        let y = top + r0 as f64 * ROW_H;
        let _ = writeln!(
            out,
            "<rect class=\"site-band\" x=\"{}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\" stroke=\"#cccccc\" stroke-width=\"0.5\"/>\
             <text class=\"row-label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}<title>{}: {} lanes</title></text>",
            f.left,
            f.plot_w(),
            n as f64 * ROW_H,
            if s % 2 == 0 { "#ffffff" } else { "#f4f4f4" },
            f.left - 8.0,
            y + ROW_H / 2.0 + 4.0,
            label(name, 16),
            escape_xml(name),
            per_site[s]
        );
    }
    axis.draw(&mut out, step, &format!("time {origin_label} ({unit})"));
    let mut hidden = 0usize;
    for (b, lane) in bars.iter().zip(&lanes) {
        let Some(lane) = lane else { continue };
        let row = first_row[b.site] + lane;
        if row >= shown_rows {
            hidden += 1;
            continue;
        }
        let y = top + row as f64 * ROW_H;
        out.push_str("<g class=\"job\">");
        for s in &b.spans {
            axis.span(&mut out, y, s, &b.tooltip);
        }
        let (x0, x1) = (
            axis.px(b.spans.iter().map(|s| s.from_ms).min().unwrap_or(0)),
            axis.px(b.spans.iter().map(|s| s.to_ms).max().unwrap_or(0)),
        );
        if x1 - x0 > 7.0 * b.label.chars().count() as f64 + 4.0 {
            let _ = write!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" fill=\"#ffffff\" pointer-events=\"none\">{}</text>",
                x0 + 2.0,
                y + ROW_H / 2.0 + 3.5,
                escape_xml(&b.label)
            );
        }
        out.push_str("</g>\n");
    }
    if hidden > 0 {
        let _ = writeln!(
            out,
            "<text class=\"note\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#555555\">… {hidden} jobs in lanes not shown</text>",
            f.right,
            f.bottom + 34.0
        );
    }
    footer(out)
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{count_class, parse, texts, tooltips};
    use super::*;

    fn times() -> JobTimes {
        JobTimes {
            submitted: 1_000_000,
            placed: Some(1_030_000),
            claimed: Some(1_060_000),
            started: Some(1_070_000),
            finished: Some(1_250_000),
            ftt_ms: 40_000,
        }
    }

    #[test]
    fn spans_follow_the_timeline() {
        let s = job_spans(&times(), 0);
        let phases: Vec<(Phase, u64, u64)> = s.iter().map(|s| (s.phase, s.from_ms, s.to_ms)).collect();
        assert_eq!(
            phases,
            [
                (Phase::Queued, 1_000_000, 1_030_000),
                (Phase::Placed, 1_030_000, 1_060_000),
                (Phase::Staging, 1_030_000, 1_070_000),
                (Phase::Claimed, 1_060_000, 1_070_000),
                (Phase::Running, 1_070_000, 1_250_000),
            ]
        );
        // A queued job: one open phase up to now; a job that failed before placement ends there.
        let q = JobTimes {
            submitted: 5,
            ..Default::default()
        };
        assert_eq!(
            job_spans(&q, 50),
            [Span {
                phase: Phase::Queued,
                from_ms: 5,
                to_ms: 50
            }]
        );
        let failed = JobTimes { finished: Some(20), ..q };
        assert_eq!(job_spans(&failed, 1000)[0].to_ms, 20);
        // Running now: staging cut at now.
        let running = JobTimes {
            finished: None,
            ftt_ms: 10_000_000,
            ..times()
        };
        let s = job_spans(&running, 1_100_000);
        assert!(s.iter().all(|s| s.to_ms <= 1_100_000));
        assert_eq!(s.last().unwrap().phase, Phase::Running);
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(fmt_duration(350), "350 ms");
        assert_eq!(fmt_duration(12_345), "12.3 s");
        assert_eq!(fmt_duration(245_000), "4 min 05 s");
        assert_eq!(fmt_duration(60_000), "1 min");
        assert_eq!(fmt_duration(7_380_000), "2 h 03 min");
    }

    #[test]
    fn job_gantt_has_a_row_per_component_and_the_figures() {
        let t = times();
        let rows: Vec<GanttRow> = ["vu", "leiden", "delft"]
            .iter()
            .enumerate()
            .map(|(i, site)| GanttRow {
                label: format!("c{i} @ {site}"),
                tooltip: format!("component {i}, 16 processors at {site}"),
                spans: job_spans(&t, 0),
                outcome: Some(if i == 2 { Outcome::Failed } else { Outcome::Succeeded }),
            })
            .collect();
        let figures = [
            ("FTT", fmt_duration(t.ftt_ms)),
            ("PGT", "30.0 s".to_string()),
            ("PWT", "10.0 s".to_string()),
        ];
        let svg = gantt_svg(&Gantt {
            title: "Job 7 <coupled>",
            origin_ms: t.submitted,
            origin_label: "since submission",
            now_ms: None,
            figures: &figures,
            rows: &rows,
        });
        let doc = parse(&svg);
        assert_eq!(count_class(&doc, "text", "row-label"), 3);
        assert_eq!(count_class(&doc, "rect", "span"), 15);
        assert_eq!(count_class(&doc, "rect", "staging"), 3);
        assert_eq!(count_class(&doc, "g", "succeeded"), 2);
        assert_eq!(count_class(&doc, "g", "failed"), 1);
        let t = texts(&doc);
        for want in ["c0 @ vu", "c2 @ delft", "Job 7 <coupled>", "time since submission (min)"] {
            assert!(t.iter().any(|x| x == want), "{want} not in {t:?}");
        }
        for p in Phase::ALL {
            assert!(t.iter().any(|x| x == p.name()), "legend lacks {}", p.name());
        }
        assert!(t
            .iter()
            .any(|x| x.contains("FTT 40.0 s") && x.contains("PGT 30.0 s") && x.contains("PWT 10.0 s")));
        assert!(tooltips(&doc)
            .iter()
            .any(|x| x == "component 1, 16 processors at leiden: running from 1 min 10 s to 4 min 10 s (3 min)"));
        // Bars sit where their times are: running starts at 70 s of 250 s → 300 s axis.
        let run = doc.descendants().find(|n| n.attribute("class") == Some("span running")).unwrap();
        let x: f64 = run.attribute("x").unwrap().parse().unwrap();
        let want = 170.0 + 600.0 * (70.0 / 60.0) / 5.0;
        assert!((x - want).abs() < 0.5, "{x} vs {want}");
    }

    #[test]
    fn open_job_has_a_now_line_and_many_rows_are_capped() {
        let t = JobTimes {
            submitted: 0,
            placed: Some(1000),
            ..Default::default()
        };
        let rows = vec![
            GanttRow {
                label: "job 1".into(),
                tooltip: "job 1".into(),
                spans: job_spans(&t, 5000),
                outcome: None,
            };
            MAX_ROWS + 5
        ];
        let svg = gantt_svg(&Gantt {
            title: "jobs",
            origin_ms: 0,
            origin_label: "since the start",
            now_ms: Some(5000),
            figures: &[],
            rows: &rows,
        });
        let doc = parse(&svg);
        assert_eq!(count_class(&doc, "line", "now"), 1);
        assert_eq!(count_class(&doc, "g", "row"), MAX_ROWS);
        assert!(texts(&doc).iter().any(|x| x == "… 5 more rows not shown"));
        let empty = gantt_svg(&Gantt {
            title: "none",
            origin_ms: 0,
            origin_label: "",
            now_ms: None,
            figures: &[],
            rows: &[],
        });
        assert_eq!(count_class(&parse(&empty), "text", "no-data"), 1);
    }

    #[test]
    fn machine_gantt_packs_overlapping_jobs_into_lanes() {
        let bar = |site, from, to, label: &str| MachineBar {
            site,
            label: label.to_string(),
            tooltip: format!("job {label}"),
            spans: vec![
                Span {
                    phase: Phase::Claimed,
                    from_ms: from,
                    to_ms: from + 1000,
                },
                Span {
                    phase: Phase::Running,
                    from_ms: from + 1000,
                    to_ms: to,
                },
            ],
        };
        // Site 0: three jobs, two overlapping then a third after the first → 2 lanes.
        // Site 1: one job; site 2: none (still one empty lane); a bar for an unknown site is ignored.
        let bars = vec![
            bar(0, 0, 60_000, "1"),
            bar(0, 10_000, 90_000, "2"),
            bar(0, 60_000, 100_000, "3"),
            bar(1, 5_000, 50_000, "4"),
            bar(9, 0, 1, "x"),
        ];
        let (lanes, per_site) = assign_lanes(3, &bars);
        assert_eq!(lanes, [Some(0), Some(1), Some(0), Some(0), None]);
        assert_eq!(per_site, [2, 1, 0]);
        let sites: Vec<String> = ["vu", "leiden", "delft"].map(String::from).to_vec();
        let svg = machine_gantt_svg("Machine", &sites, &bars, 0, "since the start of the run");
        let doc = parse(&svg);
        assert_eq!(count_class(&doc, "rect", "site-band"), 3);
        assert_eq!(count_class(&doc, "g", "job"), 4);
        assert_eq!(count_class(&doc, "rect", "running"), 4);
        let t = texts(&doc);
        for want in ["vu", "leiden", "delft", "1", "2", "time since the start of the run (s)"] {
            assert!(t.iter().any(|x| x == want), "{want} not in {t:?}");
        }
        assert_eq!(
            count_class(&parse(&machine_gantt_svg("none", &sites, &[], 0, "")), "text", "no-data"),
            1
        );
    }

    #[test]
    fn overlapping_bars_never_share_a_lane() {
        // A pseudo-random set of intervals: within a site, bars in one lane never overlap.
        let mut x = 12345u64;
        let mut next = || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            x >> 33
        };
        let bars: Vec<MachineBar> = (0..500)
            .map(|i| {
                let from = next() % 100_000;
                MachineBar {
                    site: (next() % 4) as usize,
                    label: i.to_string(),
                    tooltip: String::new(),
                    spans: vec![Span {
                        phase: Phase::Running,
                        from_ms: from,
                        to_ms: from + 1 + next() % 20_000,
                    }],
                }
            })
            .collect();
        let (lanes, per_site) = assign_lanes(4, &bars);
        for i in 0..bars.len() {
            for j in i + 1..bars.len() {
                if bars[i].site == bars[j].site && lanes[i] == lanes[j] {
                    let (a, b) = (&bars[i].spans[0], &bars[j].spans[0]);
                    assert!(a.to_ms <= b.from_ms || b.to_ms <= a.from_ms, "{i} and {j} overlap in one lane");
                }
            }
        }
        // Lanes = the largest number of bars alive at once (greedy by start is optimal).
        for (s, &n) in per_site.iter().enumerate() {
            let mut events: Vec<(u64, i32)> = bars
                .iter()
                .filter(|b| b.site == s)
                .flat_map(|b| [(b.spans[0].from_ms, 1), (b.spans[0].to_ms, -1)])
                .collect();
            events.sort_by_key(|&(t, d)| (t, d));
            let (mut live, mut most) = (0, 0);
            for (_, d) in events {
                live += d;
                most = most.max(live);
            }
            assert_eq!(n, most as usize, "site {s}");
        }
    }
}
