//! Hand-written SVG charts for the HTML report (`xlate report`, docs/sweeps.md): horizontal
//! grouped bars, horizontal stacked bars, ranges (low–middle–high) and lines. No script and no
//! external resource: the page renders the same offline in any browser.
//!
//! Every data mark has class `mark` and a `<title>` naming what it shows, so a reader can hover
//! for the exact value and the browser test can count marks per plot. Horizontal layouts grow
//! downwards with the number of rows, so a sweep of hundreds of points stays legible.

use std::fmt::Write;

/// Width of every chart in CSS pixels.
pub const WIDTH: f64 = 860.0;
/// Average glyph width of the 12 px sans-serif labels, for laying out label columns.
const CHAR_W: f64 = 6.6;
/// Height of one bar.
const BAR_H: f64 = 14.0;
/// Space between groups of bars.
const GROUP_GAP: f64 = 10.0;
/// Room for the value printed beside a bar.
const VALUE_ROOM: f64 = 64.0;
/// Room under the plot for ticks and the axis label.
const AXIS_ROOM: f64 = 44.0;

/// `s` escaped for HTML/SVG text and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A number as printed beside bars, in hover texts and in tables: integers as such (with thin
/// spaces grouping the digits of large ones), otherwise four significant digits.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let a = v.abs();
    // Integers, and large numbers whose fraction nobody reads (cycles of 24 440 461.5).
    if (v == v.trunc() || a >= 1e4) && a < 1e15 {
        let s = format!("{}", a.round() as u64);
        let mut grouped = String::new();
        for (i, ch) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 && s.len() > 4 {
                grouped.push('\u{202f}');
            }
            grouped.push(ch);
        }
        return if v < 0.0 { format!("−{grouped}") } else { grouped };
    }
    let digits = if a >= 100.0 {
        1
    } else if a >= 10.0 {
        2
    } else if a >= 1.0 || a == 0.0 {
        3
    } else {
        (3.0 - a.log10().floor()).min(12.0) as usize
    };
    let s = format!("{a:.digits$}");
    if v < 0.0 {
        format!("−{s}")
    } else {
        s
    }
}

/// A tick value with as many decimals as the tick step needs (`0.2`, not `0.200`).
fn tick_text(v: f64, step: f64) -> String {
    if step >= 1.0 || step <= 0.0 {
        return num(v);
    }
    let d = (-step.log10().floor()).clamp(0.0, 12.0) as usize;
    let s = format!("{:.d$}", v.abs());
    if v < 0.0 {
        format!("−{s}")
    } else {
        s
    }
}

/// A label cut to `chars` characters (with an ellipsis); the full text goes in a `<title>`.
fn cut(s: &str, chars: usize) -> String {
    if s.chars().count() <= chars {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(chars.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// A 1-2-5 step giving about `n` intervals over `span`.
fn nice_step(span: f64, n: f64) -> f64 {
    if span <= 0.0 || !span.is_finite() {
        return 1.0;
    }
    let raw = span / n;
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let m = if f < 1.5 {
        1.0
    } else if f < 3.0 {
        2.0
    } else if f < 7.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// A value axis mapping data values to pixels.
#[derive(Clone, Copy, Debug)]
struct Scale {
    lo: f64,
    hi: f64,
    p0: f64,
    p1: f64,
    log: bool,
    step: f64,
}

impl Scale {
    /// A linear axis over `[min(lo, 0), max(hi, 0)]` widened to whole tick steps.
    fn zero_based(lo: f64, hi: f64, p0: f64, p1: f64) -> Scale {
        let (lo, hi) = (lo.min(0.0), hi.max(0.0));
        let (lo, hi) = if hi - lo <= 0.0 { (0.0, 1.0) } else { (lo, hi) };
        let step = nice_step(hi - lo, 5.0);
        Scale { lo: (lo / step).floor() * step, hi: (hi / step).ceil() * step, p0, p1, log: false, step }
    }

    /// An axis over `[lo, hi]` exactly (ticks are given by the caller), logarithmic if `log`.
    fn exact(lo: f64, hi: f64, p0: f64, p1: f64, log: bool) -> Scale {
        let (lo, hi) = if hi > lo { (lo, hi) } else { (lo - 1.0, hi + 1.0) };
        Scale { lo, hi, p0, p1, log: log && lo > 0.0, step: 0.0 }
    }

    fn at(&self, v: f64) -> f64 {
        let f = |x: f64| if self.log { x.log2() } else { x };
        let (a, b) = (f(self.lo), f(self.hi));
        self.p0 + (f(v.clamp(self.lo, self.hi)) - a) / (b - a) * (self.p1 - self.p0)
    }

    fn ticks(&self) -> Vec<f64> {
        let mut t = Vec::new();
        let mut v = self.lo;
        while v <= self.hi + self.step * 1e-9 && t.len() < 50 {
            t.push(if v.abs() < self.step * 1e-9 { 0.0 } else { v });
            v += self.step;
        }
        t
    }
}

/// The opening of a chart's `<svg>` (`label` is its accessible name).
fn open(out: &mut String, height: f64, label: &str) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" aria-label="{}" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}">"#,
        esc(label)
    );
}

/// A horizontal value axis at `y` with grid lines up to `top` and the axis label under it.
fn x_axis(out: &mut String, s: &Scale, ticks: &[f64], top: f64, y: f64, label: &str) {
    for &t in ticks {
        let x = s.at(t);
        let _ = write!(out, r#"<line class="grid" x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{y:.1}"/>"#);
        let _ =
            write!(out, r#"<text class="tick" x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#, y + 14.0, esc(&tick_text(t, s.step)));
    }
    let _ = write!(out, r#"<line class="axis" x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}"/>"#, s.p0, s.p1);
    let _ = write!(
        out,
        r#"<text class="axis-label" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        (s.p0 + s.p1) / 2.0,
        y + 34.0,
        esc(label)
    );
}

/// The width of a label column holding `labels` (at most a third of the chart).
fn label_width<'a>(labels: impl Iterator<Item = &'a str>) -> f64 {
    let chars = labels.map(|l| l.chars().count()).max().unwrap_or(0) as f64;
    (chars * CHAR_W + 14.0).clamp(60.0, WIDTH / 3.0)
}

/// A row label, right-aligned at `x`, cut to the column, full text on hover.
fn row_label(out: &mut String, label: &str, x: f64, y: f64, width: f64) {
    let chars = ((width - 14.0) / CHAR_W).max(4.0) as usize;
    let _ = write!(
        out,
        r#"<text class="label" x="{x:.1}" y="{y:.1}" text-anchor="end" dominant-baseline="middle"><title>{}</title>{}</text>"#,
        esc(label),
        esc(&cut(label, chars))
    );
}

/// One bar of a [`HBars`] group.
#[derive(Clone, Debug)]
pub struct Bar {
    /// Its value on the axis.
    pub value: f64,
    /// Fill colour.
    pub colour: String,
    /// What it is (the series: a design, "paper", "ours"), shown on hover.
    pub name: String,
    /// The value as printed beside the bar (with its unit where that helps).
    pub text: String,
}

/// A group of bars sharing one row label.
#[derive(Clone, Debug)]
pub struct BarGroup {
    /// Row label (a workload and the swept values, a run, a finding).
    pub label: String,
    /// Its bars, top to bottom.
    pub bars: Vec<Bar>,
}

/// Horizontal grouped bars, e.g. speedup per workload (groups) and design (bars).
#[derive(Clone, Debug)]
pub struct HBars {
    /// Accessible name of the chart.
    pub title: String,
    /// Axis label, with the unit.
    pub x_label: String,
    /// The groups, top to bottom.
    pub groups: Vec<BarGroup>,
    /// A reference line (value, what it is), e.g. `(1.0, "baseline")`.
    pub reference: Option<(f64, String)>,
}

/// Renders [`HBars`].
pub fn hbars(c: &HBars) -> String {
    let lw = label_width(c.groups.iter().map(|g| g.label.as_str()));
    let rows: f64 = c.groups.iter().map(|g| g.bars.len().max(1) as f64 * BAR_H + GROUP_GAP).sum();
    let top = 8.0;
    let bottom = top + rows;
    let height = bottom + AXIS_ROOM;
    let values = c.groups.iter().flat_map(|g| g.bars.iter().map(|b| b.value)).chain(c.reference.iter().map(|r| r.0));
    let (lo, hi) = values.filter(|v| v.is_finite()).fold((0.0f64, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
    let s = Scale::zero_based(lo, hi, lw, WIDTH - VALUE_ROOM);
    let mut out = String::new();
    open(&mut out, height, &c.title);
    x_axis(&mut out, &s, &s.ticks(), top, bottom, &c.x_label);
    let zero = s.at(0.0);
    let mut y = top + GROUP_GAP / 2.0;
    for g in &c.groups {
        let gh = g.bars.len().max(1) as f64 * BAR_H;
        row_label(&mut out, &g.label, lw - 8.0, y + gh / 2.0, lw);
        for b in &g.bars {
            if b.value.is_finite() {
                let x = s.at(b.value);
                let (x0, w) = if x >= zero { (zero, x - zero) } else { (x, zero - x) };
                let _ = write!(
                    out,
                    r#"<rect class="mark" x="{x0:.1}" y="{:.1}" width="{w:.1}" height="{:.1}" fill="{}"><title>{}: {}</title></rect>"#,
                    y + 1.0,
                    BAR_H - 2.0,
                    esc(&b.colour),
                    esc(&format!("{} · {}", g.label, b.name)),
                    esc(&b.text)
                );
                let (tx, anchor) = if x >= zero { (x + 4.0, "start") } else { (x - 4.0, "end") };
                let _ = write!(
                    out,
                    r#"<text class="value" x="{tx:.1}" y="{:.1}" text-anchor="{anchor}" dominant-baseline="middle">{}</text>"#,
                    y + BAR_H / 2.0,
                    esc(&b.text)
                );
            }
            y += BAR_H;
        }
        if g.bars.is_empty() {
            y += BAR_H;
        }
        y += GROUP_GAP;
    }
    if let Some((v, what)) = &c.reference {
        let x = s.at(*v);
        let _ = write!(
            out,
            r#"<line class="reference" x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{bottom:.1}"><title>{}</title></line>"#,
            esc(&format!("{what}: {}", num(*v)))
        );
    }
    out.push_str("</svg>");
    out
}

/// One row of a [`Stacked`] chart: segments left to right, in percent of the row.
#[derive(Clone, Debug)]
pub struct Stack {
    /// Row label.
    pub label: String,
    /// (percent, colour, what it is).
    pub segments: Vec<(f64, String, String)>,
}

/// Horizontal 100 % stacked bars, e.g. the page sizes mapping each run's memory.
#[derive(Clone, Debug)]
pub struct Stacked {
    /// Accessible name.
    pub title: String,
    /// Axis label, with the unit.
    pub x_label: String,
    /// Rows, top to bottom.
    pub rows: Vec<Stack>,
}

/// Renders [`Stacked`].
pub fn stacked(c: &Stacked) -> String {
    let lw = label_width(c.rows.iter().map(|r| r.label.as_str()));
    let top = 8.0;
    let bottom = top + c.rows.len() as f64 * (BAR_H + 6.0) + 4.0;
    let s = Scale::zero_based(0.0, 100.0, lw, WIDTH - 24.0);
    let mut out = String::new();
    open(&mut out, bottom + AXIS_ROOM, &c.title);
    x_axis(&mut out, &s, &s.ticks(), top, bottom, &c.x_label);
    let mut y = top + 4.0;
    for r in &c.rows {
        row_label(&mut out, &r.label, lw - 8.0, y + BAR_H / 2.0, lw);
        let mut acc = 0.0;
        for (pct, colour, what) in &r.segments {
            if *pct > 0.0 {
                let (x0, x1) = (s.at(acc), s.at(acc + pct));
                let _ = write!(
                    out,
                    r#"<rect class="mark" x="{x0:.1}" y="{y:.1}" width="{:.1}" height="{BAR_H}" fill="{}"><title>{}: {} %</title></rect>"#,
                    x1 - x0,
                    esc(colour),
                    esc(&format!("{} · {what}", r.label)),
                    num(*pct)
                );
            }
            acc += pct;
        }
        y += BAR_H + 6.0;
    }
    out.push_str("</svg>");
    out
}

/// One row of a [`Ranges`] chart.
#[derive(Clone, Debug)]
pub struct Range {
    /// Row label.
    pub label: String,
    /// Low end, middle mark and high end (e.g. p50, mean, p99).
    pub lo: f64,
    /// The middle mark.
    pub mid: f64,
    /// The high end.
    pub hi: f64,
    /// Colour.
    pub colour: String,
}

/// Low–middle–high ranges, one row each, e.g. walk-latency percentiles per run.
#[derive(Clone, Debug)]
pub struct Ranges {
    /// Accessible name.
    pub title: String,
    /// Axis label, with the unit.
    pub x_label: String,
    /// What the ends and the middle are, for the hover text: (lo, mid, hi).
    pub names: (String, String, String),
    /// Rows, top to bottom.
    pub rows: Vec<Range>,
}

/// Renders [`Ranges`].
pub fn ranges(c: &Ranges) -> String {
    let lw = label_width(c.rows.iter().map(|r| r.label.as_str()));
    let top = 8.0;
    let row_h = BAR_H + 6.0;
    let bottom = top + c.rows.len() as f64 * row_h + 4.0;
    let hi = c.rows.iter().map(|r| r.hi.max(r.mid)).fold(0.0, f64::max);
    let s = Scale::zero_based(0.0, hi, lw, WIDTH - 24.0);
    let mut out = String::new();
    open(&mut out, bottom + AXIS_ROOM, &c.title);
    x_axis(&mut out, &s, &s.ticks(), top, bottom, &c.x_label);
    let mut y = top + 4.0 + BAR_H / 2.0;
    let (nlo, nmid, nhi) = &c.names;
    for r in &c.rows {
        row_label(&mut out, &r.label, lw - 8.0, y, lw);
        let (x0, xm, x1) = (s.at(r.lo), s.at(r.mid), s.at(r.hi));
        let tip = esc(&format!("{}: {nlo} {}, {nmid} {}, {nhi} {}", r.label, num(r.lo), num(r.mid), num(r.hi)));
        let colour = esc(&r.colour);
        let _ = write!(
            out,
            r#"<g class="mark"><title>{tip}</title><rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="4" fill="{colour}"/><rect x="{:.1}" y="{:.1}" width="2" height="{BAR_H}" fill="{colour}"/><rect x="{:.1}" y="{:.1}" width="2" height="{BAR_H}" fill="{colour}"/><circle cx="{xm:.1}" cy="{y:.1}" r="4.5" fill="white" stroke="{colour}" stroke-width="2"/></g>"#,
            y - 2.0,
            (x1 - x0).max(1.0),
            x0 - 1.0,
            y - BAR_H / 2.0,
            x1 - 1.0,
            y - BAR_H / 2.0
        );
        y += row_h;
    }
    out.push_str("</svg>");
    out
}

/// One line of a [`Lines`] chart.
#[derive(Clone, Debug)]
pub struct Series {
    /// Name (legend and hover).
    pub name: String,
    /// Colour.
    pub colour: String,
    /// Dashed (to tell apart series of one colour, e.g. one design on two workloads).
    pub dashed: bool,
    /// Points, in increasing x.
    pub points: Vec<(f64, f64)>,
}

/// Lines with points, e.g. L2 TLB MPKI against the swept TLB size, one line per design.
#[derive(Clone, Debug)]
pub struct Lines {
    /// Accessible name.
    pub title: String,
    /// x-axis label, with the unit.
    pub x_label: String,
    /// y-axis label, with the unit.
    pub y_label: String,
    /// Logarithmic (base 2) x axis.
    pub log_x: bool,
    /// How x values are printed on ticks (e.g. sizes as `2M`).
    pub x_text: fn(f64) -> String,
    /// The lines.
    pub series: Vec<Series>,
}

/// Renders [`Lines`].
pub fn lines(c: &Lines) -> String {
    let height = 330.0;
    let (left, right, top, bottom) = (78.0, WIDTH - 24.0, 14.0, height - AXIS_ROOM - 6.0);
    let pts = || c.series.iter().flat_map(|s| s.points.iter());
    let mut xs: Vec<f64> = pts().map(|p| p.0).filter(|x| x.is_finite()).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let (xlo, xhi) = (xs.first().copied().unwrap_or(0.0), xs.last().copied().unwrap_or(1.0));
    let pad = if c.log_x { 0.0 } else { (xhi - xlo) * 0.03 };
    let sx = Scale::exact(xlo - pad, xhi + pad, left + 12.0, right - 12.0, c.log_x);
    let yhi = pts().map(|p| p.1).filter(|y| y.is_finite()).fold(0.0, f64::max);
    let sy = Scale::zero_based(0.0, yhi, bottom, top);
    let mut out = String::new();
    open(&mut out, height, &c.title);
    // y axis: grid, ticks, label (rotated).
    for t in sy.ticks() {
        let y = sy.at(t);
        let _ = write!(out, r#"<line class="grid" x1="{left:.1}" y1="{y:.1}" x2="{right:.1}" y2="{y:.1}"/>"#);
        let _ = write!(
            out,
            r#"<text class="tick" x="{:.1}" y="{y:.1}" text-anchor="end" dominant-baseline="middle">{}</text>"#,
            left - 6.0,
            esc(&tick_text(t, sy.step))
        );
    }
    let _ = write!(out, r#"<line class="axis" x1="{left:.1}" y1="{top:.1}" x2="{left:.1}" y2="{bottom:.1}"/>"#);
    let _ = write!(
        out,
        r#"<text class="axis-label" transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        (top + bottom) / 2.0,
        esc(&c.y_label)
    );
    // x axis: a tick at every x value when there are few of them (swept values), else 1-2-5.
    let ticks: Vec<f64> = if xs.len() <= 12 {
        xs.clone()
    } else {
        let s = Scale::zero_based(xlo, xhi, 0.0, 1.0);
        s.ticks().into_iter().filter(|t| *t >= xlo && *t <= xhi).collect()
    };
    for &t in &ticks {
        let x = sx.at(t);
        let _ = write!(out, r#"<line class="grid" x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{bottom:.1}"/>"#);
        let _ =
            write!(out, r#"<text class="tick" x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#, bottom + 14.0, esc(&(c.x_text)(t)));
    }
    let _ = write!(out, r#"<line class="axis" x1="{left:.1}" y1="{bottom:.1}" x2="{right:.1}" y2="{bottom:.1}"/>"#);
    let _ = write!(
        out,
        r#"<text class="axis-label" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        (left + right) / 2.0,
        bottom + 34.0,
        esc(&c.x_label)
    );
    for s in &c.series {
        let colour = esc(&s.colour);
        let finite: Vec<(f64, f64)> = s.points.iter().copied().filter(|p| p.0.is_finite() && p.1.is_finite()).collect();
        if finite.len() > 1 {
            let d: Vec<String> = finite
                .iter()
                .enumerate()
                .map(|(i, p)| format!("{}{:.1},{:.1}", if i == 0 { 'M' } else { 'L' }, sx.at(p.0), sy.at(p.1)))
                .collect();
            let dash = if s.dashed { r#" stroke-dasharray="6 4""# } else { "" };
            let _ = write!(
                out,
                r#"<path class="mark line" d="{}" fill="none" stroke="{colour}" stroke-width="2"{dash}><title>{}</title></path>"#,
                d.join(" "),
                esc(&s.name)
            );
        }
        for &(x, y) in &finite {
            let _ = write!(
                out,
                r#"<circle class="mark" cx="{:.1}" cy="{:.1}" r="3.5" fill="{colour}"><title>{}: {} → {}</title></circle>"#,
                sx.at(x),
                sy.at(y),
                esc(&s.name),
                esc(&(c.x_text)(x)),
                esc(&num(y))
            );
        }
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_compactly() {
        assert_eq!(num(0.0), "0");
        assert_eq!(num(12.0), "12");
        assert_eq!(num(123_456.0), "123\u{202f}456");
        assert_eq!(num(1.2345), "1.234");
        assert_eq!(num(123.45), "123.5");
        assert_eq!(num(0.0012345), "0.001234");
        assert_eq!(num(-2.5), "−2.500");
        assert_eq!(num(f64::NAN), "-");
        assert_eq!(num(24_440_461.5), "24\u{202f}440\u{202f}462");
        assert_eq!(tick_text(0.2, 0.2), "0.2");
        assert_eq!(tick_text(1.0, 0.2), "1.0");
        assert_eq!(tick_text(0.05, 0.05), "0.05");
        assert_eq!(tick_text(20000.0, 5000.0), "20\u{202f}000");
    }

    #[test]
    fn ticks_are_round_and_cover_the_data() {
        let s = Scale::zero_based(0.0, 1.37, 0.0, 100.0);
        let t: Vec<String> = s.ticks().iter().map(|&t| tick_text(t, s.step)).collect();
        assert_eq!(t, ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0", "1.2", "1.4"]);
        let s = Scale::zero_based(-12.0, 30.0, 0.0, 100.0);
        let t = s.ticks();
        assert!(t[0] <= -12.0 && *t.last().unwrap() >= 30.0 && t.contains(&0.0), "{t:?}");
        assert!((s.at(s.lo) - 0.0).abs() < 1e-9 && (s.at(s.hi) - 100.0).abs() < 1e-9);
        let l = Scale::exact(512.0, 4096.0, 0.0, 3.0, true);
        assert!((l.at(1024.0) - 1.0).abs() < 1e-9, "log2 axis");
    }

    #[test]
    fn text_is_escaped_and_every_bar_is_a_mark() {
        let c = HBars {
            title: "t".into(),
            x_label: "speedup (×)".into(),
            groups: vec![BarGroup {
                label: "a<b>&\"c\"".into(),
                bars: vec![
                    Bar { value: 1.5, colour: "#123456".into(), name: "x".into(), text: "1.50×".into() },
                    Bar { value: -0.5, colour: "#654321".into(), name: "y".into(), text: "−0.50".into() },
                ],
            }],
            reference: Some((1.0, "baseline".into())),
        };
        let svg = hbars(&c);
        assert!(!svg.contains("a<b>") && svg.contains("a&lt;b&gt;&amp;&quot;c&quot;"));
        assert_eq!(svg.matches(r#"class="mark""#).count(), 2);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
    }
}
