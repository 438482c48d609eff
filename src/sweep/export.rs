//! Reading a sweep directory back: `xlate sweep --status DIR` and `xlate sweep --export DIR
//! --csv F` (docs/sweeps.md, "Status and export").

use super::record::{ManifestPoint, Status, SweepDir};
use crate::error::Result;
use crate::sim::RunOutput;
use serde::Deserialize;
use serde_json::{Map, Value as Json};
use std::fmt;
use std::path::Path;

/// The state of one point of a sweep directory.
#[derive(Clone, Debug, PartialEq)]
pub enum PointState {
    /// Recorded done.
    Done,
    /// Recorded failed, with its error.
    Failed(String),
    /// No record yet.
    Pending,
    /// A record that cannot be read (it runs again on the next sweep): why.
    Unreadable(String),
}

/// What `--status` prints.
#[derive(Clone, Debug)]
pub struct StatusReport {
    /// The directory.
    pub dir: String,
    /// Where its points come from.
    pub source: String,
    /// Swept keys (to name points).
    pub swept_keys: Vec<String>,
    /// Every point with its state, in grid order.
    pub points: Vec<(ManifestPoint, PointState)>,
}

impl StatusReport {
    /// Points in state `f`.
    pub fn count(&self, f: impl Fn(&PointState) -> bool) -> usize {
        self.points.iter().filter(|(_, s)| f(s)).count()
    }
}

impl fmt::Display for StatusReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let done = self.count(|s| *s == PointState::Done);
        let failed = self.count(|s| matches!(s, PointState::Failed(_)));
        let pending = self.points.len() - done - failed;
        writeln!(f, "sweep {} ({}): {} points: {done} done, {failed} failed, {pending} pending", self.dir, self.source, self.points.len())?;
        if failed > 0 {
            writeln!(f, "failed:")?;
            for (p, s) in &self.points {
                if let PointState::Failed(e) = s {
                    writeln!(f, "  {} {}: {e}", p.id, p.describe(&self.swept_keys))?;
                }
            }
        }
        let unreadable = self.count(|s| matches!(s, PointState::Unreadable(_)));
        if unreadable > 0 {
            writeln!(f, "unreadable records (pending; the next sweep runs them again):")?;
            for (p, s) in &self.points {
                if let PointState::Unreadable(e) = s {
                    writeln!(f, "  {} {}: {e}", p.id, p.describe(&self.swept_keys))?;
                }
            }
        }
        Ok(())
    }
}

/// The fields of a record that status and export read (the rest is skipped unparsed).
#[derive(Deserialize)]
struct Head {
    status: Status,
    error: Option<String>,
    #[serde(default)]
    result: Option<ResultHead>,
}

#[derive(Deserialize)]
struct ResultHead {
    #[serde(default)]
    metrics: Map<String, Json>,
    #[serde(default)]
    units: Map<String, Json>,
}

/// Every point of a directory with its state and its record's head (None: pending or unreadable).
type Scanned = Vec<(ManifestPoint, PointState, Option<Head>)>;

fn scan(root: &Path) -> Result<(SweepDir, super::Manifest, Scanned)> {
    let (dir, m) = SweepDir::open(root)?;
    let mut out = Vec::with_capacity(m.points.len());
    for p in &m.points {
        let (state, head) = match dir.read_text(&p.id).and_then(|t| t.map(|t| dir.parse::<Head>(&p.id, &t)).transpose()) {
            Ok(None) => (PointState::Pending, None),
            Ok(Some(h)) => match h.status {
                Status::Done => (PointState::Done, Some(h)),
                Status::Failed => (PointState::Failed(h.error.clone().unwrap_or_default()), Some(h)),
            },
            Err(e) => (PointState::Unreadable(e.to_string()), None),
        };
        out.push((p.clone(), state, head));
    }
    Ok((dir, m, out))
}

/// The status of sweep directory `root`.
pub fn status(root: &Path) -> Result<StatusReport> {
    let (_, m, points) = scan(root)?;
    Ok(StatusReport {
        dir: root.display().to_string(),
        source: m.source,
        swept_keys: m.swept_keys,
        points: points.into_iter().map(|(p, s, _)| (p, s)).collect(),
    })
}

/// One CSV field, quoted only where RFC 4180 needs it (the results CSV's own rule).
fn field(s: &str) -> String {
    crate::report::csv_field(s).into_owned()
}

fn number(v: &Json) -> String {
    match v {
        Json::Number(n) => n.as_f64().map(|x| format!("{x}")).unwrap_or_else(|| n.to_string()),
        Json::Null => String::new(),
        other => super::grid::json_text(other),
    }
}

/// Sweep directory `root` as CSV: one row per point in grid order (pending ones too), columns
/// `id, design, workload, preset, status, error`, one per swept key, then one per metric named
/// `key [unit]` (the union over the points, in report order). RFC 4180 quoting, `\n` line ends.
pub fn csv(root: &Path) -> Result<String> {
    let (_, m, points) = scan(root)?;
    let mut swept = m.swept_keys.clone();
    for (p, _, _) in &points {
        for k in p.swept.keys() {
            if !swept.contains(k) {
                swept.push(k.clone());
            }
        }
    }
    // Metric columns in report order (that of `xlate run`'s table), then any others a record has
    // (driver-specific or accelerator metrics) in the order first seen.
    let mut metrics: Vec<(String, String)> = Vec::new();
    let known: Vec<String> = crate::report::metrics(&RunOutput::default()).into_iter().map(|x| x.key).collect();
    let mut seen: Vec<String> = Vec::new();
    for (_, _, h) in &points {
        if let Some(r) = h.as_ref().and_then(|h| h.result.as_ref()) {
            for k in r.metrics.keys() {
                if !seen.contains(k) {
                    seen.push(k.clone());
                }
            }
        }
    }
    seen.sort_by_key(|k| known.iter().position(|x| x == k).unwrap_or(usize::MAX));
    for k in seen {
        let unit = points
            .iter()
            .find_map(|(_, _, h)| h.as_ref()?.result.as_ref()?.units.get(&k).and_then(|u| u.as_str()).map(str::to_string))
            .unwrap_or_default();
        metrics.push((k, unit));
    }
    let mut head: Vec<String> = ["id", "design", "workload", "preset", "status", "error"].iter().map(|s| s.to_string()).collect();
    head.extend(swept.iter().cloned());
    head.extend(metrics.iter().map(|(k, u)| if u.is_empty() { k.clone() } else { format!("{k} [{u}]") }));
    let mut out = head.iter().map(|h| field(h)).collect::<Vec<_>>().join(",");
    out.push('\n');
    for (p, s, h) in &points {
        let (status, error) = match s {
            PointState::Done => ("done", String::new()),
            PointState::Failed(e) => ("failed", e.clone()),
            PointState::Pending => ("pending", String::new()),
            PointState::Unreadable(e) => ("pending", e.clone()),
        };
        let mut row = vec![p.id.clone(), p.design.clone(), p.workload.clone(), p.preset.clone().unwrap_or_default(), status.into(), error];
        row.extend(swept.iter().map(|k| p.swept.get(k).map(number).unwrap_or_default()));
        let values = h.as_ref().and_then(|h| h.result.as_ref()).map(|r| &r.metrics);
        row.extend(metrics.iter().map(|(k, _)| values.and_then(|v| v.get(k)).map(number).unwrap_or_default()));
        out.push_str(&row.iter().map(|f| field(f)).collect::<Vec<_>>().join(","));
        out.push('\n');
    }
    Ok(out)
}

/// `study.json` of a `reproduce --out` directory: the findings the report plots.
#[derive(Deserialize)]
struct StudyFile {
    study: String,
    #[serde(default)]
    findings: Vec<crate::report::html::Finding>,
}

/// Sweep directory `root` as the data of an HTML report (`xlate report`): its finished points
/// in grid order, its failed ones with their errors, and, for a `reproduce --out` directory,
/// the study's findings (from `study.json`, written when the study finishes).
pub fn dataset(root: &Path) -> Result<crate::report::html::Dataset> {
    use crate::report::html::{Dataset, Run};
    let (_, m, points) = scan(root)?;
    let mut d = Dataset { title: format!("xlate report: {}", m.source), source: m.source.clone(), ..Dataset::default() };
    for (p, s, h) in points {
        match s {
            PointState::Done => {
                let r = h.and_then(|h| h.result).unwrap_or(ResultHead { metrics: Map::new(), units: Map::new() });
                let mut swept: Vec<(String, Json)> =
                    m.swept_keys.iter().filter_map(|k| p.swept.get(k).map(|v| (k.clone(), v.clone()))).collect();
                swept.extend(p.swept.iter().filter(|(k, _)| !m.swept_keys.contains(k)).map(|(k, v)| (k.clone(), v.clone())));
                d.runs.push(Run {
                    label: p.label.clone(),
                    design: p.design.clone(),
                    workload: p.workload.clone(),
                    preset: p.preset.clone(),
                    swept,
                    metrics: r.metrics.iter().filter_map(|(k, v)| Some((k.clone(), v.as_f64()?))).collect(),
                    units: r.units.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect(),
                });
            }
            PointState::Failed(e) => d.failed.push((p.describe(&m.swept_keys), e)),
            PointState::Pending | PointState::Unreadable(_) => d.pending += 1,
        }
    }
    let study = root.join("study.json");
    if study.exists() {
        let text = std::fs::read_to_string(&study).map_err(|e| crate::error::Error::io(study.display().to_string(), e))?;
        let f: StudyFile = serde_json::from_str(&text).map_err(|e| {
            crate::error::Error::io(
                study.display().to_string(),
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("not a study's findings (line {}, column {}): {e}", e.line(), e.column()),
                ),
            )
        })?;
        d.title = format!("xlate reproduce {}", f.study);
        d.findings = f.findings;
    }
    Ok(d)
}

/// `xlate report DIR [-o OUT] [--baseline DESIGN]`: writes the HTML report of sweep directory
/// `root` to `out` (default `DIR/report.html`) and returns where, with the data it shows. A
/// baseline must be one of the finished points' designs.
pub fn write_report(root: &Path, out: Option<&Path>, baseline: Option<&str>) -> Result<(std::path::PathBuf, crate::report::html::Dataset)> {
    let mut d = dataset(root)?;
    if let Some(b) = baseline {
        if !d.runs.iter().any(|r| r.design == b) {
            return Err(crate::error::Error::Unknown { what: "baseline design", name: b.to_string(), known: d.designs() });
        }
        d.baseline = Some(b.to_string());
    }
    let out = out.map(Path::to_path_buf).unwrap_or_else(|| root.join("report.html"));
    crate::fsutil::write_atomic(&out, crate::report::html::render(&d).as_bytes())?;
    Ok((out, d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_only_when_needed() {
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(field("two\nlines"), "\"two\nlines\"");
        assert_eq!(number(&Json::from(1234.0)), "1234");
        assert_eq!(number(&Json::from(0.25)), "0.25");
        assert_eq!(number(&Json::Null), "");
        assert_eq!(number(&Json::from("1G")), "1G");
    }
}
