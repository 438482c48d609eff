//! `xlate reproduce PAPER`: re-runs a paper's comparisons on built-in workloads at a scale that
//! finishes in minutes, and prints our value beside the paper's for each finding.
//!
//! A study is data: the runs it needs (design × workload × config overrides) and the findings,
//! each a function of those runs' results. Runs are done once and shared by findings; an
//! interrupted study reports the findings whose runs finished.

pub mod emt;
pub mod et;
pub mod sparta;
pub mod utopia;

use crate::error::{Error, Result};
use crate::report;
use crate::sim::RunOutput;
use crate::sweep::{self, Point};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

/// One simulation a study needs.
pub struct RunSpec {
    /// Key findings use to refer to it.
    pub key: String,
    /// Design name.
    pub design: &'static str,
    /// `--set` overrides (workload, its parameters, machine).
    pub sets: Vec<String>,
}

/// What a finding's values are, which fixes how both are printed (ours and the paper's in the
/// same unit) and what "the same direction as the paper" means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `a / b` of a metric against a baseline (speed-ups, "ECPT / radix"): printed `1.08×`; the
    /// direction is the side of 1× it falls on.
    Ratio,
    /// A relative change `a / b − 1`, in percent: printed `+2.2 %`; the direction is its sign.
    Change,
    /// A share, rate or fraction of a whole, in percent (0–100): printed `29.4 %`; no direction.
    Percent,
    /// A quantity in percent of a baseline's (walks left vs 4 KiB pages): printed `92.7 %`; the
    /// direction is the side of 100 % it falls on.
    PercentOf,
    /// A plain quantity in the unit named (`cycles`, `epochs`, `ms`): printed `137 cycles`.
    Quantity(&'static str),
}

impl Kind {
    /// The unit both values are in, as printed after them (and in the JSON).
    pub fn unit(self) -> &'static str {
        match self {
            Kind::Ratio => "×",
            Kind::Change | Kind::Percent | Kind::PercentOf => "%",
            Kind::Quantity(u) => u,
        }
    }

    /// The value meaning "no difference from the baseline", for kinds compared against one.
    pub fn baseline(self) -> Option<f64> {
        match self {
            Kind::Ratio => Some(1.0),
            Kind::Change => Some(0.0),
            Kind::PercentOf => Some(100.0),
            Kind::Percent | Kind::Quantity(_) => None,
        }
    }

    /// `v` with its unit: `1.08×`, `+2.2 %`, `29.4 %`, `137 cycles`.
    pub fn format(self, v: f64) -> String {
        match self {
            Kind::Ratio => format!("{}×", decimals(v, 2)),
            Kind::Change => format!("{}{} %", if v > 0.0 { "+" } else { "" }, decimals(v, 1)),
            Kind::Percent | Kind::PercentOf => format!("{} %", decimals(v, 1)),
            Kind::Quantity(u) if v == v.trunc() => format!("{v} {u}"),
            Kind::Quantity(u) => format!("{} {u}", decimals(v, 1)),
        }
    }
}

/// `v` with `d` decimals, or with two significant digits when that shows more (0.0012).
fn decimals(v: f64, d: usize) -> String {
    let a = v.abs();
    let d = if a == 0.0 || !a.is_finite() || a * 10f64.powi(d as i32) >= 10.0 { d } else { (1.0 - a.log10().floor()).min(12.0) as usize };
    format!("{v:.d$}")
}

/// How a finding compares with the paper.
pub struct Finding {
    /// What is compared.
    pub name: &'static str,
    /// The paper's value as printed there, written in [`Finding::kind`]'s unit.
    pub paper: &'static str,
    /// The paper's value as a number, on the same scale as ours (for the size and direction
    /// checks), if it gives one.
    pub paper_value: Option<f64>,
    /// What both values are (and so their unit).
    pub kind: Kind,
    /// Computes our value from the finished runs (None if a run it needs is missing).
    pub ours: fn(&BTreeMap<String, RunOutput>) -> Option<f64>,
}

/// How our value of a finding compares with the paper's.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// Within 25 % of the paper's value (`None` without both values).
    pub within_25pct: Option<bool>,
    /// On the same side of the baseline as the paper's value (`None` for kinds without a
    /// baseline, without both values, or when the paper's value is the baseline itself).
    pub same_direction: Option<bool>,
}

impl Verdict {
    /// Compares `ours` with `f`'s paper value.
    pub fn of(f: &Finding, ours: Option<f64>) -> Verdict {
        let (Some(o), Some(p)) = (ours, f.paper_value) else {
            return Verdict { within_25pct: None, same_direction: None };
        };
        let within_25pct = (p != 0.0).then(|| ((o - p) / p).abs() <= 0.25);
        let same_direction = f.kind.baseline().filter(|&b| p != b).map(|b| o != b && (o > b) == (p > b));
        Verdict { within_25pct, same_direction }
    }

    /// The table's "within 25 % of paper" cell: a result on the other side of the baseline is
    /// not counted as agreeing however close its size is.
    pub fn text(&self) -> &'static str {
        match (self.same_direction, self.within_25pct) {
            (Some(false), _) => "no, opposite direction",
            (_, Some(true)) => "yes",
            (_, Some(false)) => "no",
            (_, None) => "-",
        }
    }
}

/// A paper's study.
pub struct Study {
    /// Name on the command line.
    pub name: &'static str,
    /// One line.
    pub description: &'static str,
    /// Machine preset.
    pub preset: &'static str,
    /// Runs.
    pub runs: fn() -> Vec<RunSpec>,
    /// Findings.
    pub findings: fn() -> Vec<Finding>,
}

/// Every study.
pub static STUDIES: &[Study] = &[emt::STUDY, utopia::STUDY, et::STUDY, sparta::STUDY];

/// Finds a study.
pub fn lookup(name: &str) -> Result<&'static Study> {
    STUDIES.iter().find(|s| s.name == name).ok_or_else(|| Error::Unknown {
        what: "study",
        name: name.into(),
        known: STUDIES.iter().map(|s| s.name.to_string()).collect(),
    })
}

/// A metric of a run by key.
pub fn metric(r: &RunOutput, key: &str) -> f64 {
    report::metrics(r).into_iter().find(|m| m.key == key).map(|m| m.value).unwrap_or(f64::NAN)
}

/// `a / b` of a metric across two runs.
pub fn ratio(runs: &BTreeMap<String, RunOutput>, a: &str, b: &str, key: &str) -> Option<f64> {
    Some(metric(runs.get(a)?, key) / metric(runs.get(b)?, key))
}

/// A fraction (0–1) in percent.
pub fn percent(fraction: Option<f64>) -> Option<f64> {
    fraction.map(|x| x * 100.0)
}

/// Relative change `a / b - 1` of a metric, in percent.
pub fn change_pct(runs: &BTreeMap<String, RunOutput>, a: &str, b: &str, key: &str) -> Option<f64> {
    ratio(runs, a, b, key).map(|r| (r - 1.0) * 100.0)
}

/// What a study produced.
pub struct StudyOutput {
    /// The table, for the terminal.
    pub table: String,
    /// The same as JSON.
    pub json: serde_json::Value,
}

/// Runs a study. `extra` are `--set` overrides applied to every run (e.g. a smaller scale).
/// Runs go in parallel on every host core (each run is independent and deterministic, so the
/// numbers do not depend on the order); Ctrl-C stops scheduling new ones and the findings whose
/// runs finished are reported.
pub fn run(study: &Study, extra: &[String], progress: bool) -> Result<StudyOutput> {
    run_in(study, extra, progress, None, false)
}

/// Like [`run`], with the runs recorded in sweep directory `out` (docs/sweeps.md): runs that
/// have a record there are not run again, so an interrupted study resumes. `force` takes over a
/// directory that holds other runs (another study or other `extra` settings).
pub fn run_in(study: &Study, extra: &[String], progress: bool, out: Option<&Path>, force: bool) -> Result<StudyOutput> {
    let done = study_runs(study, extra, progress, out, force)?;
    let (table, items) = findings_table(study, &(study.findings)(), &done);
    let runs_json: Vec<serde_json::Value> = done.values().map(report::json).collect();
    let json = json!({"study": study.name, "findings": items, "runs": runs_json});
    // The findings beside the records, for `xlate report DIR`.
    if let Some(d) = out {
        let text = serde_json::to_string_pretty(&json).expect("json") + "\n";
        crate::fsutil::write_atomic(&d.join("study.json"), text.as_bytes())?;
    }
    Ok(StudyOutput { table, json })
}

/// The findings as a table (ours and the paper's value in the same unit, and whether they
/// agree) and as JSON items.
fn findings_table(study: &Study, findings: &[Finding], done: &BTreeMap<String, RunOutput>) -> (String, Vec<serde_json::Value>) {
    let mut rows = vec![["finding".to_string(), "ours".into(), "paper".into(), "within 25 % of paper".into()]];
    let mut items = Vec::new();
    for f in findings {
        let ours = (f.ours)(done);
        let v = Verdict::of(f, ours);
        rows.push([
            f.name.to_string(),
            ours.map(|o| f.kind.format(o)).unwrap_or_else(|| "(not run)".into()),
            f.paper.to_string(),
            v.text().into(),
        ]);
        items.push(json!({
            "finding": f.name,
            "ours": ours,
            "paper": f.paper,
            "paper_value": f.paper_value,
            "unit": f.kind.unit(),
            "baseline": f.kind.baseline(),
            "within_25pct": v.within_25pct,
            "same_direction": v.same_direction,
            "verdict": v.text(),
        }));
    }
    let widths: Vec<usize> = (0..4).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut table = format!("xlate reproduce {}: {}\n", study.name, study.description);
    for (i, r) in rows.iter().enumerate() {
        let line: Vec<String> = r.iter().enumerate().map(|(c, s)| format!("{s:<w$}", w = widths[c])).collect();
        table.push_str(line.join("  ").trim_end());
        table.push('\n');
        if i == 0 {
            table.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * (widths.len() - 1)));
            table.push('\n');
        }
    }
    table.push_str("Where ours and the paper's differ, docs/fidelity.md says why.\n");
    (table, items)
}

/// The study's runs, by key: run on the sweep runner's executor (panics caught, Ctrl-C stops
/// the scheduling), from and into records in `out` if given. Runs with the same resolved
/// configuration (the same point id) run once. A failed run is an error (the first in study
/// order); without `out` the first failure stops the scheduling.
fn study_runs(study: &Study, extra: &[String], progress: bool, out: Option<&Path>, force: bool) -> Result<BTreeMap<String, RunOutput>> {
    let specs = (study.runs)();
    let mut points: Vec<Point> = Vec::new();
    let mut labels: Vec<Vec<&str>> = Vec::new();
    // The point of each spec.
    let mut of_spec = Vec::with_capacity(specs.len());
    for spec in &specs {
        let mut sets = spec.sets.clone();
        sets.extend(extra.iter().cloned());
        let swept = sweep::grid::swept_of_sets(&sets);
        let p = Point::new(spec.design, Some(study.preset), sets, swept)?;
        match points.iter().position(|q| q.id == p.id) {
            Some(j) => {
                labels[j].push(&spec.key);
                of_spec.push(j);
            }
            None => {
                of_spec.push(points.len());
                labels.push(vec![&spec.key]);
                points.push(p);
            }
        }
    }
    let mut results: Vec<Option<RunOutput>> = vec![None; points.len()];
    let dir = match out {
        Some(root) => {
            let mut m = sweep::Manifest::new(format!("xlate reproduce {}", study.name), &points, Vec::new());
            m.swept_keys = sweep::grid::swept_keys(&points);
            for (mp, l) in m.points.iter_mut().zip(&labels) {
                mp.label = Some(l.join(","));
            }
            let d = sweep::SweepDir::prepare(root, &m, None, force)?;
            for (j, p) in points.iter().enumerate() {
                // A failed or unreadable record runs again.
                if let Ok(Some(rec)) = d.read(&p.id) {
                    if rec.status == sweep::Status::Done {
                        results[j] = rec.run;
                    }
                }
            }
            Some(d)
        }
        None => None,
    };
    let todo: Vec<usize> = (0..points.len()).filter(|&j| results[j].is_none()).collect();
    if progress && todo.len() < points.len() {
        eprintln!(
            "xlate reproduce: {} of {} runs already recorded in {}",
            points.len() - todo.len(),
            points.len(),
            out.map(|p| p.display().to_string()).unwrap_or_default()
        );
    }
    let jobs = sweep::runner::jobs_or_all(0).min(todo.len().max(1));
    let results = Mutex::new(results);
    let failures: Mutex<Vec<Option<sweep::PointError>>> = Mutex::new((0..points.len()).map(|_| None).collect());
    let write_error: Mutex<Option<Error>> = Mutex::new(None);
    sweep::runner::execute(
        todo.len(),
        jobs,
        |k| {
            let j = todo[k];
            if progress {
                let i = of_spec.iter().position(|&x| x == j).expect("every point has a spec");
                eprintln!("[{}/{}] {} ({})", i + 1, specs.len(), specs[i].key, specs[i].design);
            }
            // One progress bar at a time: only when the runs are not in parallel.
            points[j].run(progress && jobs == 1)
        },
        |k, outcome, _| {
            let j = todo[k];
            if let Some(d) = &dir {
                if let Some(rec) = sweep::Record::from_outcome(&points[j], &outcome) {
                    if let Err(e) = d.write(&rec) {
                        write_error.lock().expect("lock").get_or_insert(e);
                        return false;
                    }
                }
            }
            match outcome {
                sweep::Outcome::Done(r) => results.lock().expect("lock")[j] = Some(*r),
                sweep::Outcome::Failed(e) => {
                    failures.lock().expect("lock")[j] = Some(e);
                    // Without records, the study fails anyway: stop scheduling.
                    return dir.is_some();
                }
                sweep::Outcome::Interrupted => {}
            }
            true
        },
    );
    if let Some(e) = write_error.into_inner().expect("lock") {
        return Err(e);
    }
    let mut failures = failures.into_inner().expect("lock");
    let results = results.into_inner().expect("lock");
    let mut done: BTreeMap<String, RunOutput> = BTreeMap::new();
    for (spec, &j) in specs.iter().zip(&of_spec) {
        match failures[j].take() {
            Some(sweep::PointError::Error(e)) => return Err(e),
            Some(p @ sweep::PointError::Panic(_)) => {
                return Err(Error::Workload { name: format!("{} ({})", spec.key, spec.design), msg: p.to_string() })
            }
            None => {}
        }
        if let Some(r) = &results[j] {
            done.insert(spec.key.clone(), r.clone());
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch;
    use crate::config::Layers;

    /// Every run of every study names a design that exists and settings that resolve, and every
    /// finding has a paper value or says why not; a renamed design or key fails here, not in a
    /// ten-minute study.
    #[test]
    fn studies_resolve() {
        for s in STUDIES {
            let runs = (s.runs)();
            assert!(!runs.is_empty());
            for r in runs {
                let d = arch::lookup(r.design).unwrap_or_else(|e| panic!("{} {}: {e}", s.name, r.key));
                Layers { preset: Some(s.preset.into()), file: None, sets: r.sets.clone() }
                    .resolve(Some(d))
                    .unwrap_or_else(|e| panic!("{} {}: {e}", s.name, r.key));
            }
            // With no runs done, every finding reports "not run" rather than a made-up number.
            for f in (s.findings)() {
                assert!((f.ours)(&BTreeMap::new()).is_none(), "{}: {}", s.name, f.name);
            }
        }
    }

    fn finding(kind: Kind, paper: &'static str, paper_value: Option<f64>) -> Finding {
        Finding { name: "synthetic", paper, paper_value, kind, ours: |_| None }
    }

    #[test]
    fn values_print_in_their_kinds_unit() {
        assert_eq!(Kind::Ratio.format(1.0834), "1.08×");
        assert_eq!(Kind::Ratio.format(0.05), "0.050×");
        assert_eq!(Kind::Change.format(-23.14), "-23.1 %");
        assert_eq!(Kind::Change.format(2.2), "+2.2 %");
        assert_eq!(Kind::Change.format(0.0), "0.0 %");
        assert_eq!(Kind::Percent.format(29.43), "29.4 %");
        assert_eq!(Kind::Percent.format(0.06), "0.060 %");
        assert_eq!(Kind::PercentOf.format(92.7), "92.7 %");
        assert_eq!(Kind::Quantity("cycles").format(137.0), "137 cycles");
        assert_eq!(Kind::Quantity("cycles").format(108.26), "108.3 cycles");
        assert_eq!((Kind::Ratio.unit(), Kind::Change.unit(), Kind::Percent.unit(), Kind::Quantity("ms").unit()), ("×", "%", "%", "ms"));
    }

    #[test]
    fn verdicts_weigh_size_and_direction() {
        let v = |kind, paper: f64, ours: f64| Verdict::of(&finding(kind, "", Some(paper)), Some(ours));
        let both = |within, same| Verdict { within_25pct: Some(within), same_direction: same };
        // Close in size and on the paper's side of the baseline.
        assert_eq!(v(Kind::Ratio, 1.08, 1.02), both(true, Some(true)));
        assert_eq!(v(Kind::Ratio, 1.08, 1.02).text(), "yes");
        // Within 25 % of 1.08× but slower than the baseline: not agreeing.
        assert_eq!(v(Kind::Ratio, 1.08, 0.95), both(true, Some(false)));
        assert_eq!(v(Kind::Ratio, 1.08, 0.95).text(), "no, opposite direction");
        assert_eq!(v(Kind::Ratio, 1.08, 1.0).text(), "no, opposite direction");
        assert_eq!(v(Kind::Ratio, 0.96, 0.92).text(), "yes");
        // Right direction, wrong size.
        assert_eq!(v(Kind::Ratio, 1.08, 1.5), both(false, Some(true)));
        assert_eq!(v(Kind::Ratio, 1.08, 1.5).text(), "no");
        // Changes: the sign is the direction.
        assert_eq!(v(Kind::Change, 2.2, -0.5).text(), "no, opposite direction");
        assert_eq!(v(Kind::Change, -23.1, -20.0).text(), "yes");
        assert_eq!(v(Kind::Change, -49.0, -99.0), both(false, Some(true)));
        // Percent of a baseline: the side of 100 %.
        assert_eq!(v(Kind::PercentOf, 92.7, 101.0).text(), "no, opposite direction");
        assert_eq!(v(Kind::PercentOf, 92.7, 80.0).text(), "yes");
        // Shares and quantities have no direction.
        assert_eq!(v(Kind::Percent, 33.0, 29.4), both(true, None));
        assert_eq!(v(Kind::Quantity("cycles"), 137.0, 60.0), both(false, None));
        // A paper value at the baseline (no change) has no direction to contradict.
        assert_eq!(v(Kind::Ratio, 1.0, 0.98), both(true, None));
        // Without both values nothing is claimed.
        let none = Verdict { within_25pct: None, same_direction: None };
        assert_eq!(Verdict::of(&finding(Kind::Ratio, "fewer", None), Some(0.5)), none);
        assert_eq!(Verdict::of(&finding(Kind::Ratio, "1.1×", Some(1.1)), None), none);
        assert_eq!(none.text(), "-");
    }

    #[test]
    fn table_prints_ours_and_the_papers_in_one_unit() {
        let study = Study { name: "test", description: "synthetic", preset: "emt-osdi25", runs: Vec::new, findings: Vec::new };
        let findings = vec![
            Finding { name: "share", paper: "33 %", paper_value: Some(33.0), kind: Kind::Percent, ours: |_| Some(29.41) },
            Finding { name: "speedup", paper: "1.08×", paper_value: Some(1.08), kind: Kind::Ratio, ours: |_| Some(0.9) },
            Finding { name: "missing", paper: "1.1×", paper_value: Some(1.1), kind: Kind::Ratio, ours: |_| None },
        ];
        let (table, items) = findings_table(&study, &findings, &BTreeMap::new());
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[1].starts_with("finding") && lines[1].ends_with("within 25 % of paper"), "{table}");
        let cells = |l: &str| l.split("  ").map(str::trim).filter(|c| !c.is_empty()).map(String::from).collect::<Vec<_>>();
        assert_eq!(cells(lines[3]), ["share", "29.4 %", "33 %", "yes"]);
        assert_eq!(cells(lines[4]), ["speedup", "0.90×", "1.08×", "no, opposite direction"]);
        assert_eq!(cells(lines[5]), ["missing", "(not run)", "1.1×", "-"]);
        assert_eq!(items[0]["unit"], "%");
        assert_eq!(items[0]["within_25pct"], true);
        assert_eq!(items[0]["same_direction"], serde_json::Value::Null);
        assert_eq!(items[1]["within_25pct"], true);
        assert_eq!(items[1]["same_direction"], false);
        assert_eq!(items[1]["ours"], 0.9);
    }

    /// Every study's paper text is written in its finding's unit and gives (first) the number
    /// the checks use, so ours and the paper's are on one scale (not 0.29 beside "33 %").
    #[test]
    fn paper_values_match_their_text_and_unit() {
        fn first_number(s: &str) -> Option<f64> {
            let start = s.find(|c: char| c.is_ascii_digit())?;
            let end = s[start..].find(|c: char| !(c.is_ascii_digit() || c == '.')).map_or(s.len(), |e| start + e);
            let v: f64 = s[start..end].parse().ok()?;
            Some(if s[..start].ends_with('-') && !s[..start - 1].ends_with(|c: char| c.is_ascii_digit()) { -v } else { v })
        }
        for s in STUDIES {
            for f in (s.findings)() {
                let Some(p) = f.paper_value else { continue };
                assert!(
                    f.paper.contains(f.kind.unit()),
                    "{} {}: paper text {:?} lacks the unit {}",
                    s.name,
                    f.name,
                    f.paper,
                    f.kind.unit()
                );
                let n = first_number(f.paper).unwrap_or_else(|| panic!("{} {}: no number in {:?}", s.name, f.name, f.paper));
                assert!(n.signum() == p.signum() && ((n - p) / p).abs() < 0.05, "{} {}: text {:?} vs value {p}", s.name, f.name, f.paper);
            }
        }
    }
}
