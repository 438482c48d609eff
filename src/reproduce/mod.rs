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

/// How a finding compares with the paper.
pub struct Finding {
    /// What is compared.
    pub name: &'static str,
    /// The paper's value, as printed there.
    pub paper: &'static str,
    /// Paper value as a number (for the size check), if it is one.
    pub paper_value: Option<f64>,
    /// Unit of both values.
    pub unit: &'static str,
    /// Computes our value from the finished runs (None if a run it needs is missing).
    pub ours: fn(&BTreeMap<String, RunOutput>) -> Option<f64>,
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
    let findings = (study.findings)();
    let mut rows = vec![["finding".to_string(), "ours".into(), "paper".into(), "unit".into(), "size within 25 %".into()]];
    let mut items = Vec::new();
    for f in &findings {
        let ours = (f.ours)(&done);
        let within = match (ours, f.paper_value) {
            (Some(o), Some(p)) if p != 0.0 => Some(((o - p) / p).abs() <= 0.25),
            _ => None,
        };
        rows.push([
            f.name.to_string(),
            ours.map(|v| format!("{v:.3}")).unwrap_or_else(|| "(not run)".into()),
            f.paper.to_string(),
            f.unit.to_string(),
            match within {
                Some(true) => "yes".into(),
                Some(false) => "no (docs/fidelity.md)".into(),
                None => "-".into(),
            },
        ]);
        items.push(json!({"finding": f.name, "ours": ours, "paper": f.paper, "paper_value": f.paper_value, "unit": f.unit, "within_25pct": within}));
    }
    let widths: Vec<usize> = (0..5).map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
    let mut table = format!("xlate reproduce {}: {}\n", study.name, study.description);
    for (i, r) in rows.iter().enumerate() {
        let line: Vec<String> = r.iter().enumerate().map(|(c, s)| format!("{s:<w$}", w = widths[c])).collect();
        table.push_str(line.join("  ").trim_end());
        table.push('\n');
        if i == 0 {
            table.push_str(&"-".repeat(widths.iter().sum::<usize>() + 8));
            table.push('\n');
        }
    }
    let runs_json: Vec<serde_json::Value> = done.values().map(report::json).collect();
    Ok(StudyOutput { table, json: json!({"study": study.name, "findings": items, "runs": runs_json}) })
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
}
