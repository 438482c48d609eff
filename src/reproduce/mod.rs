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

use crate::arch;
use crate::config::Layers;
use crate::error::{Error, Result};
use crate::report;
use crate::sim::{self, RunOutput};
use serde_json::json;
use std::collections::BTreeMap;

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
    let specs = (study.runs)();
    let mut cfgs = Vec::with_capacity(specs.len());
    for spec in &specs {
        let design = arch::lookup(spec.design)?;
        let mut sets = spec.sets.clone();
        sets.extend(extra.iter().cloned());
        cfgs.push((design, Layers { preset: Some(study.preset.into()), file: None, sets }.resolve(Some(design))?));
    }
    let jobs = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(specs.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: std::sync::Mutex<Vec<Option<Result<RunOutput>>>> = std::sync::Mutex::new((0..specs.len()).map(|_| None).collect());
    // The runs' bars share the terminal's last lines and the [k/N] lines scroll above them.
    let group = sim::progress::Group::new(progress);
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= specs.len() || sim::INTERRUPTED.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let (design, cfg) = &cfgs[i];
                group.println(&format!("[{}/{}] {} ({})", i + 1, specs.len(), specs[i].key, specs[i].design));
                let r = sim::run(design, cfg, &[], group.show(format!("[{}/{}] {}", i + 1, specs.len(), specs[i].key)));
                let failed = r.is_err();
                results.lock().expect("no run panicked holding the lock")[i] = Some(r);
                if failed {
                    break;
                }
            });
        }
    });
    let mut done: BTreeMap<String, RunOutput> = BTreeMap::new();
    for (spec, r) in specs.iter().zip(results.into_inner().expect("no run panicked holding the lock")) {
        match r {
            Some(Ok(r)) if !r.interrupted => {
                done.insert(spec.key.clone(), r);
            }
            Some(Err(e)) => return Err(e),
            _ => {}
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
