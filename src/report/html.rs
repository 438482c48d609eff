//! The HTML report (`xlate report DIR`, `xlate compare --report F`; docs/sweeps.md, "Report"):
//! one self-contained page of inline SVG plots ([`super::svg`]) with the table of numbers under
//! each plot. No script, no style sheet or font to fetch: it opens offline and prints as is.
//!
//! The plots are the ones drawn from such runs: speedup over a baseline design per workload
//! (grouped bars with the geometric mean), L2 TLB MPKI and walk latency against every swept
//! numeric key (one line per design), walk-latency percentiles, the page sizes mapping memory,
//! the fraction of cycles spent translating, and for `xlate reproduce` studies the paper's value
//! beside ours for every finding. A design has the same colour in every plot.

use super::svg::{self, esc, num, Bar, BarGroup, HBars, Lines, Range, Ranges, Series, Stack, Stacked};
use crate::sim::RunOutput;
use serde::Deserialize;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::fmt::Write;

/// One run of the report: a sweep point or a design of `compare`.
#[derive(Clone, Debug, Default)]
pub struct Run {
    /// A name given to it (a `reproduce` study's run key), used as its row label if set.
    pub label: Option<String>,
    /// Design name.
    pub design: String,
    /// Workload name (or trace paths).
    pub workload: String,
    /// Preset, if any.
    pub preset: Option<String>,
    /// Swept keys and their values at this run, in grid order.
    pub swept: Vec<(String, Json)>,
    /// Its metrics by key (`xlate run --json`'s `metrics`).
    pub metrics: BTreeMap<String, f64>,
    /// Their units by key.
    pub units: BTreeMap<String, String>,
}

impl Run {
    /// The run of a finished simulation.
    pub fn of(r: &RunOutput) -> Run {
        let ms = super::metrics(r);
        Run {
            label: None,
            design: r.design.clone(),
            workload: r.workload.clone(),
            preset: None,
            swept: Vec::new(),
            metrics: ms.iter().map(|m| (m.key.clone(), m.value)).collect(),
            units: ms.iter().map(|m| (m.key.clone(), m.unit.to_string())).collect(),
        }
    }

    /// A metric (NaN if the run does not report it).
    pub fn get(&self, key: &str) -> f64 {
        self.metrics.get(key).copied().unwrap_or(f64::NAN)
    }

    /// Its non-design coordinates: workload, preset and every swept value.
    fn coords(&self) -> Vec<(String, String)> {
        let mut c = vec![("workload".to_string(), self.workload.clone()), ("preset".to_string(), self.preset.clone().unwrap_or_default())];
        c.extend(self.swept.iter().map(|(k, v)| (k.clone(), json_text(v))));
        c
    }
}

/// A swept value as written in a grid (`4096`, `2M`, `true`).
fn json_text(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// One finding of a `reproduce` study, as `study.json` holds it.
#[derive(Clone, Debug, Deserialize)]
pub struct Finding {
    /// What is compared.
    pub finding: String,
    /// Our value (None if a run it needs did not finish).
    pub ours: Option<f64>,
    /// The paper's value as printed there.
    pub paper: String,
    /// The paper's value as a number, if it gives one.
    pub paper_value: Option<f64>,
    /// Unit of both values.
    pub unit: String,
    /// The value meaning "no difference" for findings compared against a baseline.
    #[serde(default)]
    pub baseline: Option<f64>,
    /// Ours within 25 % of the paper's.
    pub within_25pct: Option<bool>,
    /// Ours on the same side of the baseline as the paper's.
    pub same_direction: Option<bool>,
    /// `xlate reproduce`'s "within 25 % of paper" cell (`yes`, `no`, `no, opposite direction`).
    #[serde(default)]
    pub verdict: Option<String>,
}

/// What a report shows.
#[derive(Clone, Debug, Default)]
pub struct Dataset {
    /// Page title.
    pub title: String,
    /// Where the runs come from (a grid file, `xlate reproduce STUDY`, `xlate compare`).
    pub source: String,
    /// The design speedups are relative to (default: the first design).
    pub baseline: Option<String>,
    /// Finished runs, in grid order.
    pub runs: Vec<Run>,
    /// Points that failed: (what, error).
    pub failed: Vec<(String, String)>,
    /// Points not run yet.
    pub pending: usize,
    /// A `reproduce` study's findings.
    pub findings: Vec<Finding>,
}

impl Dataset {
    /// The report of `xlate run`/`compare`: the runs in order, the first design the baseline.
    pub fn of_runs(runs: &[RunOutput], preset: Option<&str>) -> Dataset {
        let workload = runs.first().map(|r| r.workload.clone()).unwrap_or_default();
        Dataset {
            title: format!("xlate compare: {workload}"),
            source: match preset {
                Some(p) => format!("xlate compare, preset {p}"),
                None => "xlate compare".into(),
            },
            baseline: runs.first().map(|r| r.design.clone()),
            runs: runs
                .iter()
                .map(|r| Run {
                    label: r.interrupted.then(|| format!("{} · {workload} (partial)", r.design)),
                    preset: preset.map(str::to_string),
                    ..Run::of(r)
                })
                .collect(),
            ..Dataset::default()
        }
    }

    /// The designs of its runs, in order of first appearance.
    pub fn designs(&self) -> Vec<String> {
        Colours::new(&self.runs).0
    }
}

/// Colours of designs, in order of first appearance (Tableau 10, distinguishable in print and
/// by most colour-blind readers; cycled beyond ten designs).
const PALETTE: [&str; 10] = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
/// Page-size colours (4 KiB, 2 MiB, 1 GiB), light to dark: the sizes are ordered.
const PAGE_SIZE_COLOURS: [&str; 3] = ["#c6dbef", "#6baed6", "#08519c"];
/// The paper's bars in the findings plots.
const PAPER_COLOUR: &str = "#9a9a9a";
/// Our bars in the findings plots.
const OURS_COLOUR: &str = "#4e79a7";

/// The fixed colour of each design across every plot of a report.
struct Colours(Vec<String>);

impl Colours {
    fn new(runs: &[Run]) -> Colours {
        let mut d: Vec<String> = Vec::new();
        for r in runs {
            if !d.contains(&r.design) {
                d.push(r.design.clone());
            }
        }
        Colours(d)
    }

    fn of(&self, design: &str) -> &'static str {
        PALETTE[self.0.iter().position(|d| d == design).unwrap_or(0) % PALETTE.len()]
    }
}

/// Names for runs and groups from the coordinates that differ across the report's runs only.
struct Labels {
    varying: Vec<String>,
}

impl Labels {
    fn new(runs: &[Run]) -> Labels {
        let mut varying = Vec::new();
        let all: Vec<Vec<(String, String)>> = runs.iter().map(Run::coords).collect();
        let mut keys: Vec<String> = Vec::new();
        for c in &all {
            for (k, _) in c {
                if !keys.contains(k) {
                    keys.push(k.clone());
                }
            }
        }
        // A coordinate names a run if it differs between runs of one workload (a workload's own
        // fixed parameters are implied by its name), or, for the workload, at all.
        for k in keys {
            let mut first: BTreeMap<&str, Option<&String>> = BTreeMap::new();
            let differs = all.iter().zip(runs).any(|(c, r)| {
                let v = c.iter().find(|(x, _)| *x == k).map(|(_, v)| v);
                let within = if k == "workload" { "" } else { r.workload.as_str() };
                *first.entry(within).or_insert(v) != v
            });
            if differs {
                varying.push(k);
            }
        }
        Labels { varying }
    }

    /// The run's group (its coordinates without the design), e.g. `gups · mmu.l2.entries=1536`.
    fn group(&self, r: &Run) -> String {
        self.group_without(r, &[])
    }

    fn group_without(&self, r: &Run, skip: &[&str]) -> String {
        let parts: Vec<String> = r
            .coords()
            .into_iter()
            .filter(|(k, _)| self.varying.contains(k) && !skip.contains(&k.as_str()))
            .map(|(k, v)| if k == "workload" { v } else { format!("{k}={v}") })
            .collect();
        if parts.is_empty() {
            r.workload.clone()
        } else {
            parts.join(" · ")
        }
    }

    /// The run's row label: its given name, or design and group.
    fn run(&self, r: &Run) -> String {
        r.label.clone().unwrap_or_else(|| format!("{} · {}", r.design, self.group(r)))
    }
}

/// A table: header cells, then rows; cells that parse as numbers are right-aligned.
fn table(head: &[String], rows: &[Vec<String>]) -> String {
    let mut t = String::from("<table><thead><tr>");
    for h in head {
        let _ = write!(t, "<th>{}</th>", esc(h));
    }
    t.push_str("</tr></thead><tbody>");
    for r in rows {
        t.push_str("<tr>");
        for (i, c) in r.iter().enumerate() {
            let class = if i > 0 && c.chars().next().is_some_and(|ch| ch.is_ascii_digit() || ch == '−' || ch == '-') {
                " class=\"n\""
            } else {
                ""
            };
            let _ = write!(t, "<td{class}>{}</td>", esc(c));
        }
        t.push_str("</tr>");
    }
    t.push_str("</tbody></table>");
    t
}

fn legend(items: &[(String, String)]) -> String {
    let mut l = String::from("<div class=\"legend\">");
    for (name, colour) in items {
        let _ = write!(l, "<span><i style=\"background:{}\"></i>{}</span>", esc(colour), esc(name));
    }
    l.push_str("</div>");
    l
}

/// One plot with its heading, explanation, legend, chart and table.
struct Figure {
    id: String,
    title: String,
    note: String,
    legend: Vec<(String, String)>,
    svg: String,
    table: String,
}

impl Figure {
    fn html(&self) -> String {
        let legend = if self.legend.is_empty() { String::new() } else { legend(&self.legend) };
        format!(
            "<figure class=\"plot\" id=\"{}\"><figcaption><h2>{}</h2><p>{}</p></figcaption>{legend}{}{}</figure>\n",
            esc(&self.id),
            esc(&self.title),
            esc(&self.note),
            self.svg,
            self.table
        )
    }
}

/// The cycles a speedup is computed from: accelerator runs use the mean over accelerators
/// (SPARTA §7), CPU runs the slowest core's cycles.
fn speed_cycles(r: &Run) -> f64 {
    match r.metrics.get("accel_mean_cycles") {
        Some(&c) if c > 0.0 => c,
        _ => r.get("cycles"),
    }
}

fn geomean(xs: &[f64]) -> f64 {
    (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp()
}

fn speedup_figure(d: &Dataset, colours: &Colours, labels: &Labels) -> Option<Figure> {
    let base = d.baseline.clone().or_else(|| d.runs.first().map(|r| r.design.clone()))?;
    // Groups in order of first appearance; each maps a design to its run.
    let mut groups: Vec<(String, Vec<&Run>)> = Vec::new();
    for r in &d.runs {
        let g = labels.group(r);
        match groups.iter_mut().find(|(x, _)| *x == g) {
            Some((_, v)) => v.push(r),
            None => groups.push((g, vec![r])),
        }
    }
    let designs: Vec<&String> = colours.0.iter().filter(|x| **x != base).collect();
    let mut bar_groups = Vec::new();
    let mut rows = Vec::new();
    let mut per_design: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for (g, runs) in &groups {
        let Some(b) = runs.iter().find(|r| r.design == base) else { continue };
        let bc = speed_cycles(b);
        let mut bars = Vec::new();
        for dn in &designs {
            for r in runs.iter().filter(|r| &&r.design == dn) {
                let s = bc / speed_cycles(r);
                if !s.is_finite() || s <= 0.0 {
                    continue;
                }
                per_design.entry(dn.as_str()).or_default().push(s);
                bars.push(Bar { value: s, colour: colours.of(dn).into(), name: dn.to_string(), text: format!("{}×", num(s)) });
                rows.push(vec![g.clone(), dn.to_string(), num(bc), num(speed_cycles(r)), num(s)]);
            }
        }
        if !bars.is_empty() {
            bar_groups.push(BarGroup { label: g.clone(), bars });
        }
    }
    if bar_groups.is_empty() {
        return None;
    }
    if bar_groups.len() > 1 {
        let mut bars = Vec::new();
        for dn in &designs {
            if let Some(v) = per_design.get(dn.as_str()) {
                let g = geomean(v);
                bars.push(Bar { value: g, colour: colours.of(dn).into(), name: dn.to_string(), text: format!("{}×", num(g)) });
                rows.push(vec!["geomean".into(), dn.to_string(), String::new(), String::new(), num(g)]);
            }
        }
        bar_groups.push(BarGroup { label: "geomean".into(), bars });
    }
    let legend =
        designs.iter().filter(|d| per_design.contains_key(d.as_str())).map(|d| (d.to_string(), colours.of(d).to_string())).collect();
    Some(Figure {
        id: "speedup".into(),
        title: format!("Speedup over {base}"),
        note: format!(
            "Cycles of {base} divided by cycles of each design on the same workload and settings (accelerator runs: mean cycles over the accelerators); right of the line is faster. The last group is the geometric mean."
        ),
        legend,
        svg: svg::hbars(&HBars {
            title: format!("speedup over {base}"),
            x_label: format!("speedup over {base} (×, {base} cycles / design cycles)"),
            groups: bar_groups,
            reference: Some((1.0, base.clone())),
        }),
        table: table(
            &["workload and settings".into(), "design".into(), format!("{base} cycles"), "design cycles".into(), "speedup (×)".into()],
            &rows,
        ),
    })
}

/// A swept value as a number: JSON numbers, and sizes such as `2M` (in bytes).
fn numeric(v: &Json) -> Option<(f64, bool)> {
    match v {
        Json::Number(n) => n.as_f64().map(|x| (x, false)),
        Json::String(s) => crate::addr::parse_bytes(s).map(|b| (b as f64, true)),
        _ => None,
    }
}

fn plain_x(v: f64) -> String {
    num(v)
}

fn size_x(v: f64) -> String {
    crate::addr::fmt_bytes(v as u64)
}

/// One line of a plot against a swept key: a design at fixed other settings.
struct Line<'a> {
    name: String,
    design: String,
    /// (swept value, run), in increasing swept value.
    points: Vec<(f64, &'a Run)>,
    /// The same design was drawn before (another workload or setting): drawn dashed.
    dashed: bool,
}

/// L2 TLB MPKI and walk latency against swept numeric key `key`: one line per design and
/// other coordinates.
fn sweep_figures(d: &Dataset, colours: &Colours, labels: &Labels, key: &str) -> Vec<Figure> {
    let mut series: Vec<Line> = Vec::new();
    let mut sizes = false;
    // The key and those set together with it are the x axis; the other coordinates name lines.
    let axis: Vec<&str> = labels.varying.iter().map(String::as_str).filter(|k| *k == key || one_to_one(d, key, k)).collect();
    for r in &d.runs {
        let Some((x, is_size)) = r.swept.iter().find(|(k, _)| k == key).and_then(|(_, v)| numeric(v)) else { continue };
        sizes |= is_size;
        let rest = labels.group_without(r, &axis);
        let name =
            if labels.varying.iter().any(|k| !axis.contains(&k.as_str())) { format!("{} · {rest}", r.design) } else { r.design.clone() };
        match series.iter_mut().find(|l| l.name == name) {
            Some(l) => l.points.push((x, r)),
            None => {
                let dashed = series.iter().any(|l| l.design == r.design);
                series.push(Line { name, design: r.design.clone(), points: vec![(x, r)], dashed });
            }
        }
    }
    for l in &mut series {
        l.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let xs: Vec<f64> = series.iter().flat_map(|l| l.points.iter().map(|p| p.0)).collect();
    let (lo, hi) = xs.iter().fold((f64::INFINITY, 0.0f64), |(a, b), &x| (a.min(x), b.max(x)));
    let log_x = lo > 0.0 && hi / lo >= 8.0;
    let x_text: fn(f64) -> String = if sizes { size_x } else { plain_x };
    let x_unit = if sizes { "bytes" } else { key_unit(key) };
    let any_dashed = series.iter().any(|l| l.dashed);
    let mut out = Vec::new();
    for (metric, what, unit) in
        [("l2_tlb_mpki", "L2 TLB MPKI", "misses per 1000 instructions"), ("walk_latency_avg", "Average walk latency", "cycles per walk")]
    {
        let lines: Vec<Series> = series
            .iter()
            .map(|l| Series {
                name: l.name.clone(),
                colour: colours.of(&l.design).into(),
                dashed: l.dashed,
                points: l.points.iter().map(|(x, r)| (*x, r.get(metric))).collect(),
            })
            .collect();
        let rows: Vec<Vec<String>> =
            series.iter().flat_map(|l| l.points.iter().map(move |(x, r)| vec![l.name.clone(), x_text(*x), num(r.get(metric))])).collect();
        out.push(Figure {
            id: format!("{metric}-vs-{key}"),
            title: format!("{what} against {key}"),
            note: format!(
                "One line per design{}; x axis {}.",
                if any_dashed { " and setting (dashed: the same design again)" } else { "" },
                if log_x { "logarithmic" } else { "linear" }
            ),
            legend: series
                .iter()
                .map(|l| (if l.dashed { format!("{} (dashed)", l.name) } else { l.name.clone() }, colours.of(&l.design).to_string()))
                .collect(),
            svg: svg::lines(&Lines {
                title: format!("{what} against {key}"),
                x_label: format!("{key} ({x_unit})"),
                y_label: format!("{what} ({unit})"),
                log_x,
                x_text,
                series: lines,
            }),
            table: table(&["design and settings".into(), format!("{key} ({x_unit})"), format!("{what} ({unit})")], &rows),
        });
    }
    out
}

/// The swept keys whose values are numbers or sizes and take at least two values.
fn numeric_keys(d: &Dataset) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for r in &d.runs {
        for (k, _) in &r.swept {
            if !keys.contains(k) {
                keys.push(k.clone());
            }
        }
    }
    keys.retain(|k| {
        let mut vals: Vec<f64> = Vec::new();
        for r in &d.runs {
            if let Some((_, v)) = r.swept.iter().find(|(x, _)| x == k) {
                match numeric(v) {
                    Some((x, _)) => vals.push(x),
                    None => return false,
                }
            }
        }
        vals.sort_by(f64::total_cmp);
        vals.dedup();
        vals.len() >= 2
    });
    // A key set together with an earlier one (a `[[zip]]` of entries and ways) draws the same
    // lines again: keep the first.
    let mut kept: Vec<String> = Vec::new();
    for k in keys {
        if !kept.iter().any(|a| one_to_one(d, a, &k)) {
            kept.push(k);
        }
    }
    kept
}

/// Swept keys `a` and `b` take their values together (each value of one goes with exactly one
/// of the other), as the keys of one `[[zip]]` do.
fn one_to_one(d: &Dataset, a: &str, b: &str) -> bool {
    let value = |r: &Run, k: &str| r.swept.iter().find(|(x, _)| x == k).map(|(_, v)| json_text(v));
    let mut pairs: Vec<(Option<String>, Option<String>)> = d.runs.iter().map(|r| (value(r, a), value(r, b))).collect();
    pairs.sort();
    pairs.dedup();
    let mut xs: Vec<_> = pairs.iter().map(|p| p.0.clone()).collect();
    xs.dedup();
    let mut ys: Vec<_> = pairs.iter().map(|p| p.1.clone()).collect();
    ys.sort();
    ys.dedup();
    pairs.len() == xs.len() && pairs.len() == ys.len()
}

/// The unit of a swept key's values, from its name (sizes are bytes, see [`numeric`]).
fn key_unit(key: &str) -> &'static str {
    let last = key.rsplit('.').next().unwrap_or(key);
    if last.ends_with("entries") {
        "entries"
    } else if last.ends_with("ways") {
        "ways"
    } else if last.contains("latency") || last.ends_with("cycles") {
        "cycles"
    } else if last.ends_with("_ns") {
        "ns"
    } else {
        "value"
    }
}

fn latency_figure(d: &Dataset, colours: &Colours, labels: &Labels) -> Option<Figure> {
    let runs: Vec<&Run> = d
        .runs
        .iter()
        .filter(|r| {
            r.get("walks") > 0.0 && ["walk_latency_p50", "walk_latency_avg", "walk_latency_p99"].iter().all(|k| r.get(k).is_finite())
        })
        .collect();
    if runs.is_empty() {
        return None;
    }
    let rows: Vec<Range> = runs
        .iter()
        .map(|r| Range {
            label: labels.run(r),
            lo: r.get("walk_latency_p50"),
            mid: r.get("walk_latency_avg"),
            hi: r.get("walk_latency_p99"),
            colour: colours.of(&r.design).into(),
        })
        .collect();
    let table_rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                labels.run(r),
                num(r.get("walks")),
                num(r.get("walk_latency_p50")),
                num(r.get("walk_latency_avg")),
                num(r.get("walk_latency_p99")),
            ]
        })
        .collect();
    Some(Figure {
        id: "walk-latency".into(),
        title: "Page-walk latency".into(),
        note: "Each row spans the median (p50) to the 99th percentile (p99) of the walk latency; the circle is the mean. Runs without walks are left out.".into(),
        legend: design_legend(&runs, colours),
        svg: svg::ranges(&Ranges {
            title: "page-walk latency percentiles".into(),
            x_label: "walk latency (cycles)".into(),
            names: ("p50".into(), "mean".into(), "p99".into()),
            rows,
        }),
        table: table(
            &["run".into(), "walks".into(), "p50 (cycles)".into(), "mean (cycles)".into(), "p99 (cycles)".into()],
            &table_rows,
        ),
    })
}

fn design_legend(runs: &[&Run], colours: &Colours) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for r in runs {
        if !out.iter().any(|(n, _)| *n == r.design) {
            out.push((r.design.clone(), colours.of(&r.design).into()));
        }
    }
    out
}

fn coverage_figure(d: &Dataset, labels: &Labels) -> Option<Figure> {
    const SIZES: [(&str, &str); 3] = [("coverage_4k", "4 KiB"), ("coverage_2m", "2 MiB"), ("coverage_1g", "1 GiB")];
    let runs: Vec<&Run> =
        d.runs.iter().filter(|r| SIZES.iter().map(|(k, _)| r.get(k)).filter(|v| v.is_finite()).sum::<f64>() > 0.0).collect();
    if runs.is_empty() {
        return None;
    }
    let mut stacks = Vec::new();
    let mut rows = Vec::new();
    for r in &runs {
        let bytes: Vec<f64> = SIZES.iter().map(|(k, _)| r.get(k).max(0.0)).collect();
        let total: f64 = bytes.iter().sum();
        let pct: Vec<f64> = bytes.iter().map(|b| b / total * 100.0).collect();
        stacks.push(Stack {
            label: labels.run(r),
            segments: SIZES
                .iter()
                .zip(&pct)
                .enumerate()
                .map(|(i, ((_, n), p))| (*p, PAGE_SIZE_COLOURS[i].to_string(), n.to_string()))
                .collect(),
        });
        let mut row = vec![labels.run(r)];
        for (b, p) in bytes.iter().zip(&pct) {
            row.push(format!("{} ({} %)", crate::addr::fmt_bytes(*b as u64), num(*p)));
        }
        rows.push(row);
    }
    Some(Figure {
        id: "page-sizes".into(),
        title: "Page sizes mapping memory".into(),
        note: "The share of the bytes mapped at the end of each run by each page size (contiguous 64 KiB and 32 MiB groups count as their base pages).".into(),
        legend: SIZES.iter().enumerate().map(|(i, (_, n))| (n.to_string(), PAGE_SIZE_COLOURS[i].to_string())).collect(),
        svg: svg::stacked(&Stacked { title: "page-size coverage".into(), x_label: "mapped memory (% of bytes)".into(), rows: stacks }),
        table: table(&["run".into(), "4 KiB".into(), "2 MiB".into(), "1 GiB".into()], &rows),
    })
}

fn translation_figure(d: &Dataset, colours: &Colours, labels: &Labels) -> Option<Figure> {
    let runs: Vec<&Run> = d.runs.iter().filter(|r| r.get("translation_fraction").is_finite()).collect();
    if runs.is_empty() {
        return None;
    }
    let groups = runs
        .iter()
        .map(|r| {
            let pct = r.get("translation_fraction") * 100.0;
            BarGroup {
                label: labels.run(r),
                bars: vec![Bar {
                    value: pct,
                    colour: colours.of(&r.design).into(),
                    name: r.design.clone(),
                    text: format!("{} %", num(pct)),
                }],
            }
        })
        .collect();
    let rows = runs
        .iter()
        .map(|r| vec![labels.run(r), num(r.get("translation_cycles")), num(r.get("cycles")), num(r.get("translation_fraction") * 100.0)])
        .collect::<Vec<_>>();
    Some(Figure {
        id: "translation-fraction".into(),
        title: "Cycles spent on address translation".into(),
        note: "Translation cycles (TLB misses, walks, side lookups, not hidden by overlap) as a share of all cycles.".into(),
        legend: design_legend(&runs, colours),
        svg: svg::hbars(&HBars {
            title: "translation cycle fraction".into(),
            x_label: "translation cycles (% of cycles)".into(),
            groups,
            reference: None,
        }),
        table: table(&["run".into(), "translation (cycles)".into(), "all (cycles)".into(), "fraction (%)".into()], &rows),
    })
}

/// The findings beside the paper's, one plot per unit (a ratio and a latency share no axis).
fn findings_figures(d: &Dataset) -> Vec<Figure> {
    let mut units: Vec<&str> = Vec::new();
    for f in &d.findings {
        if !units.contains(&f.unit.as_str()) {
            units.push(&f.unit);
        }
    }
    let mut out = Vec::new();
    for (i, unit) in units.iter().enumerate() {
        let fs: Vec<&Finding> = d.findings.iter().filter(|f| f.unit == *unit).collect();
        let groups: Vec<BarGroup> = fs
            .iter()
            .map(|f| {
                let mut bars = Vec::new();
                if let Some(p) = f.paper_value {
                    bars.push(Bar { value: p, colour: PAPER_COLOUR.into(), name: "paper".into(), text: format!("{} {unit}", num(p)) });
                }
                if let Some(o) = f.ours {
                    bars.push(Bar { value: o, colour: OURS_COLOUR.into(), name: "ours".into(), text: format!("{} {unit}", num(o)) });
                }
                BarGroup { label: f.finding.clone(), bars }
            })
            .collect();
        let baseline = fs.iter().find_map(|f| f.baseline).or((*unit == "×").then_some(1.0));
        let rows = fs
            .iter()
            .map(|f| {
                let verdict = f.verdict.clone().unwrap_or_else(|| "-".into());
                vec![f.finding.clone(), f.ours.map(num).unwrap_or_else(|| "(not run)".into()), f.paper.clone(), verdict]
            })
            .collect::<Vec<_>>();
        out.push(Figure {
            id: format!("findings-{i}"),
            title: format!("Paper and ours: findings in {unit}"),
            note: "Grey: the paper's value; blue: ours. Findings the paper gives no number for show ours only. docs/fidelity.md explains the differences.".into(),
            legend: vec![("paper".into(), PAPER_COLOUR.into()), ("ours".into(), OURS_COLOUR.into())],
            svg: svg::hbars(&HBars {
                title: format!("findings in {unit}, paper and ours"),
                x_label: format!("value ({unit})"),
                groups,
                reference: baseline.map(|b| (b, "no difference".to_string())),
            }),
            table: table(&["finding".into(), format!("ours ({unit})"), "paper".into(), "within 25 % of paper".into()], &rows),
        });
    }
    out
}

const STYLE: &str = "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:#222;max-width:900px;margin:24px auto;padding:0 16px}\
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:0}figcaption p{margin:4px 0 8px;color:#555}\
figure.plot{margin:28px 0;padding-top:8px;border-top:1px solid #ddd}\
svg.chart{display:block;font:12px sans-serif;overflow:visible}svg .grid{stroke:#eee}svg .axis{stroke:#444}\
svg .reference{stroke:#222;stroke-dasharray:4 3}svg .tick,svg .value{fill:#444}svg .label{fill:#222}svg .axis-label{fill:#222;font-weight:600}\
.legend{display:flex;flex-wrap:wrap;gap:4px 16px;margin:0 0 6px}.legend i{display:inline-block;width:12px;height:12px;margin-right:5px;vertical-align:-1px;border-radius:2px}\
table{border-collapse:collapse;margin-top:8px;font-size:12.5px}th,td{padding:2px 10px 2px 0;text-align:left;border-bottom:1px solid #eee}\
td.n{text-align:right;font-variant-numeric:tabular-nums}details{margin-top:6px}.meta{color:#555}.warn{color:#a33}";

/// The report as one HTML page.
pub fn render(d: &Dataset) -> String {
    let colours = Colours::new(&d.runs);
    let labels = Labels::new(&d.runs);
    let mut figures: Vec<Figure> = Vec::new();
    figures.extend(findings_figures(d));
    figures.extend(speedup_figure(d, &colours, &labels));
    for k in numeric_keys(d) {
        figures.extend(sweep_figures(d, &colours, &labels, &k));
    }
    figures.extend(latency_figure(d, &colours, &labels));
    figures.extend(coverage_figure(d, &labels));
    figures.extend(translation_figure(d, &colours, &labels));
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
<meta name=\"generator\" content=\"xlate {}\"><title>{}</title><style>{STYLE}</style></head><body>\n<h1>{}</h1>\n",
        env!("CARGO_PKG_VERSION"),
        esc(&d.title),
        esc(&d.title)
    );
    let designs = colours.0.join(", ");
    let _ = writeln!(
        h,
        "<p class=\"meta\">{} · {} runs finished · designs: {} · xlate {}</p>",
        esc(&d.source),
        d.runs.len(),
        esc(&designs),
        env!("CARGO_PKG_VERSION")
    );
    if d.pending > 0 || !d.failed.is_empty() {
        let _ = writeln!(
            h,
            "<p class=\"warn\">{} points failed and {} are not run yet: the plots show the finished points only.</p>",
            d.failed.len(),
            d.pending
        );
    }
    if !d.failed.is_empty() {
        let rows: Vec<Vec<String>> = d.failed.iter().map(|(p, e)| vec![p.clone(), e.clone()]).collect();
        let _ = writeln!(h, "<details><summary>Failed points</summary>{}</details>", table(&["point".into(), "error".into()], &rows));
    }
    if figures.is_empty() {
        h.push_str("<p>No finished run to plot.</p>\n");
    } else {
        h.push_str("<nav><p>");
        let links: Vec<String> = figures.iter().map(|f| format!("<a href=\"#{}\">{}</a>", esc(&f.id), esc(&f.title))).collect();
        h.push_str(&links.join(" · "));
        h.push_str("</p></nav>\n");
    }
    for f in &figures {
        h.push_str(&f.html());
    }
    h.push_str("</body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(design: &str, workload: &str, entries: u64, cycles: f64) -> Run {
        let mut r = Run {
            design: design.into(),
            workload: workload.into(),
            swept: vec![("mmu.l2.entries".into(), Json::from(entries))],
            ..Run::default()
        };
        for (k, v) in [
            ("cycles", cycles),
            ("walks", 100.0),
            ("l2_tlb_mpki", 4096.0 / entries as f64),
            ("walk_latency_avg", 50.0),
            ("walk_latency_p50", 40.0),
            ("walk_latency_p99", 200.0),
            ("coverage_4k", 4096.0 * 10.0),
            ("coverage_2m", 2097152.0),
            ("coverage_1g", 0.0),
            ("translation_fraction", 0.25),
            ("translation_cycles", cycles / 4.0),
        ] {
            r.metrics.insert(k.into(), v);
        }
        r
    }

    fn dataset() -> Dataset {
        let mut runs = Vec::new();
        for w in ["gups", "bfs"] {
            for e in [512, 1536, 4096] {
                runs.push(run("radix4", w, e, 1000.0));
                runs.push(run("ecpt", w, e, 800.0));
            }
        }
        Dataset { title: "t".into(), source: "grid.toml".into(), runs, ..Dataset::default() }
    }

    #[test]
    fn speedups_are_baseline_over_design_cycles_with_a_geomean() {
        let d = dataset();
        let page = render(&d);
        // 6 groups (2 workloads × 3 sizes) of one ecpt bar each, plus the geomean: 1.25× each.
        let fig = page.split("id=\"speedup\"").nth(1).unwrap().split("</figure>").next().unwrap();
        assert_eq!(fig.matches("<rect class=\"mark\"").count(), 7);
        assert!(fig.contains("geomean") && fig.contains("1.250×"), "{fig}");
        assert!(!fig.contains(">radix4 · "), "the baseline has no bar of its own");
    }

    #[test]
    fn every_plot_has_a_chart_and_a_table_and_colours_stay_per_design() {
        let d = dataset();
        let page = render(&d);
        let figures = page.matches("<figure").count();
        // speedup, 2 × (MPKI, latency) vs entries... one numeric key: 2, latency, page sizes, translation.
        assert_eq!(figures, 6, "{page}");
        assert_eq!(page.matches("<svg").count(), figures);
        assert_eq!(page.matches("<table>").count(), figures);
        // ecpt is the second design: its colour everywhere, radix4's never on an ecpt mark.
        for part in page.split("<circle class=\"mark\"").skip(1) {
            let title = part.split("<title>").nth(1).unwrap();
            let fill = part.split("fill=\"").nth(1).unwrap().split('"').next().unwrap();
            assert_eq!(fill, if title.starts_with("ecpt") { PALETTE[1] } else { PALETTE[0] }, "{title}");
        }
        assert!(!page.contains("http://") || page.matches("http://").count() == page.matches("http://www.w3.org/2000/svg").count());
        assert!(!page.contains("<script"));
    }

    #[test]
    fn sizes_sweep_on_a_log_axis_with_size_ticks() {
        let mut d = dataset();
        for r in &mut d.runs {
            let e = r.swept[0].1.as_u64().unwrap();
            r.swept = vec![("mmu.l2.size".into(), Json::from(format!("{}K", e * 4)))];
        }
        let page = render(&d);
        assert!(page.contains("mmu.l2.size (bytes)") && page.contains(">2 MiB<") && page.contains(">16 MiB<"), "{page}");
        assert!(page.contains("x axis logarithmic"));
    }

    #[test]
    fn missing_metrics_draw_nothing_and_no_runs_say_so() {
        assert!(render(&Dataset::default()).contains("No finished run to plot."));
        let mut d = dataset();
        for r in &mut d.runs {
            r.metrics.remove("walk_latency_p99");
            r.metrics.remove("translation_fraction");
        }
        let page = render(&d);
        assert!(!page.contains("NaN") && !page.contains("inf\""), "{page}");
        assert!(!page.contains("id=\"walk-latency\"") && !page.contains("id=\"translation-fraction\""));
    }

    #[test]
    fn findings_get_one_plot_per_unit_and_the_verdict() {
        let mut d = dataset();
        d.findings = vec![
            Finding {
                finding: "ECPT speedup".into(),
                ours: Some(1.1),
                paper: "1.2×".into(),
                paper_value: Some(1.2),
                unit: "×".into(),
                baseline: Some(1.0),
                within_25pct: Some(true),
                same_direction: Some(true),
                verdict: Some("yes".into()),
            },
            Finding {
                finding: "POM-TLB".into(),
                ours: Some(0.83),
                paper: "1.03×".into(),
                paper_value: Some(1.03),
                unit: "×".into(),
                baseline: Some(1.0),
                within_25pct: Some(true),
                same_direction: Some(false),
                verdict: Some("no, opposite direction".into()),
            },
            Finding {
                finding: "walk latency change".into(),
                ours: Some(-13.0),
                paper: "−23 %".into(),
                paper_value: Some(-23.0),
                unit: "%".into(),
                baseline: Some(0.0),
                within_25pct: Some(false),
                same_direction: Some(true),
                verdict: Some("no".into()),
            },
        ];
        let page = render(&d);
        assert!(page.contains("findings in ×") && page.contains("findings in %"));
        assert!(page.contains("no, opposite direction"));
    }
}
