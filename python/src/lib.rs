//! `xlate._xlate`: the native half of the Python package. It exposes the simulator through a few
//! functions that take and return plain values (strings, lists, JSON text); the typed, documented
//! API is the pure-Python `xlate` package around it. Every run releases the GIL.
//!
//! Errors are raised as the classes of `xlate._errors` (pure Python, so that `ConfigError` can be
//! both an `XlateError` and a `ValueError`), with the CLI's one-line message.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;
use xlate::config::{self, Layers};
use xlate::error::{Error, Result};
use xlate::sweep::grid::{Grid, Point};
use xlate::sweep::record::{Manifest, ManifestPoint, Record, Status, SweepDir};
use xlate::sweep::runner;
use xlate::{arch, report, sim, trace, workload};

/// Large blocks on the host's transparent huge pages (`xlate::hostmem`).
#[global_allocator]
static ALLOC: xlate::hostmem::HugePageAlloc = xlate::hostmem::HugePageAlloc;

/// The Python exception for a simulator error: `ConfigError` for a bad key or value,
/// `UnknownNameError` (a `ConfigError`) for a design, workload or preset that does not exist,
/// `TraceError` for a malformed trace, `XlateError` for the rest; the message is the CLI's.
fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let msg = e.to_string();
    let raise = || -> PyResult<PyErr> {
        let errors = py.import("xlate._errors")?;
        let kw = PyDict::new(py);
        let class = match &e {
            Error::Config { key, .. } => {
                kw.set_item("key", key)?;
                "ConfigError"
            }
            Error::Unknown { what, name, known } => {
                kw.set_item("what", *what)?;
                kw.set_item("name", name)?;
                kw.set_item("known", known.clone())?;
                "UnknownNameError"
            }
            Error::Trace { path, offset, .. } => {
                kw.set_item("path", path)?;
                kw.set_item("offset", offset)?;
                "TraceError"
            }
            Error::Io { path, err } => {
                kw.set_item("path", path)?;
                kw.set_item("kind", "io")?;
                kw.set_item("errno", err.raw_os_error())?;
                "XlateError"
            }
            Error::Workload { name, .. } => {
                kw.set_item("name", name)?;
                kw.set_item("kind", "workload")?;
                "XlateError"
            }
            Error::OutOfMemory(_) => {
                kw.set_item("kind", "out_of_memory")?;
                "XlateError"
            }
            Error::Check(_) => {
                kw.set_item("kind", "check")?;
                "XlateError"
            }
            Error::Unsupported(_) => {
                kw.set_item("kind", "unsupported")?;
                "XlateError"
            }
        };
        Ok(PyErr::from_value(errors.getattr(class)?.call((msg.clone(),), Some(&kw))?))
    };
    // Without the package around the module (a bare `import _xlate`), a plain RuntimeError.
    raise().unwrap_or_else(|_| PyRuntimeError::new_err(msg.clone()))
}

/// A panic inside the simulator, as the error of the run it ended (not a Python `PanicException`,
/// which is not an `Exception`).
fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let what = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(Error::Check(format!("the simulator panicked: {what}")))
    })
}

/// Stack of the thread a run or sweep runs on (as the sweep runner's: deep recursion in a
/// workload's setup must not overflow it).
const STACK: usize = 64 << 20;

/// Runs `f` on a thread of its own with the GIL released, while this thread wakes every 100 ms to
/// let Python handle signals: Ctrl-C (KeyboardInterrupt) stops the simulation as the CLI's Ctrl-C
/// does ([`sim::INTERRUPTED`]: a sweep records what finished), waits for it to wind down, and
/// raises. Signals reach only Python's main thread; elsewhere this just waits.
fn interruptible<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> PyResult<T> {
    use std::sync::mpsc::{channel, RecvTimeoutError};
    let (tx, rx) = channel();
    // Waited on with the GIL released, so shared with that closure: a Mutex makes it Sync.
    let rx = std::sync::Mutex::new(rx);
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("xlate-run".into())
            .stack_size(STACK)
            .spawn_scoped(s, move || {
                let _ = tx.send(f());
            })
            .map_err(|e| PyRuntimeError::new_err(format!("cannot start a simulation thread: {e}")))?;
        loop {
            match py.allow_threads(|| rx.lock().expect("lock").recv_timeout(Duration::from_millis(100))) {
                Ok(v) => return Ok(v),
                Err(RecvTimeoutError::Timeout) => {
                    if let Err(e) = py.check_signals() {
                        sim::INTERRUPTED.store(true, Ordering::SeqCst);
                        let _ = py.allow_threads(|| rx.lock().expect("lock").recv());
                        sim::INTERRUPTED.store(false, Ordering::SeqCst);
                        return Err(e);
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return Err(PyRuntimeError::new_err("the simulation thread ended without a result")),
            }
        }
    })
}

/// The config layers of a run as the CLI builds them (`xlate run -w W -p P --set K=V ...`).
fn layers(workload: Option<&str>, preset: Option<String>, sets: Vec<String>) -> Result<Layers> {
    let mut all = Vec::new();
    if let Some(w) = workload {
        workload::lookup(w)?;
        all.push(format!("workload.name=\"{w}\""));
    }
    all.extend(sets);
    Ok(Layers { preset, file: None, sets: all })
}

/// One run, as `xlate run --json` writes it; the same refusals as the CLI for a run that measured
/// nothing.
fn run_one(design: &str, workload: Option<&str>, sets: Vec<String>, preset: Option<String>, traces: Vec<String>) -> Result<String> {
    let d = arch::lookup(design)?;
    let cfg = layers(workload, preset, sets)?.resolve(Some(d))?;
    let inputs: Vec<trace::TraceInput> = traces.into_iter().map(|t| trace::TraceInput::Path(t.into())).collect();
    let r = sim::run_inputs(d, &cfg, &inputs, false)?;
    r.check_simulated()?;
    Ok(serde_json::to_string(&report::json(&r)).expect("json"))
}

/// Runs `design` and returns the results as JSON text (`xlate run --json`). `sets` are `--set`
/// strings (`key=value`, the value in TOML); `workload` None runs the configured one.
#[pyfunction]
#[pyo3(signature = (design, workload=None, sets=Vec::new(), preset=None, traces=Vec::new()))]
fn run_json(
    py: Python<'_>,
    design: String,
    workload: Option<String>,
    sets: Vec<String>,
    preset: Option<String>,
    traces: Vec<String>,
) -> PyResult<String> {
    interruptible(py, || guarded(|| run_one(&design, workload.as_deref(), sets, preset, traces)))?.map_err(|e| to_py(py, e))
}

/// The resolved configuration of a run as TOML (`xlate run --print-config`, without the
/// annotations), or raises the error the run would raise for it.
#[pyfunction]
#[pyo3(signature = (design, workload=None, sets=Vec::new(), preset=None))]
fn resolve_config(py: Python<'_>, design: String, workload: Option<String>, sets: Vec<String>, preset: Option<String>) -> PyResult<String> {
    let resolve = || -> Result<String> {
        let d = arch::lookup(&design)?;
        Ok(config::to_toml(&layers(workload.as_deref(), preset, sets)?.resolve(Some(d))?))
    };
    resolve().map_err(|e| to_py(py, e))
}

/// `[(name, description)]` of every design, in `xlate designs` order.
#[pyfunction]
fn designs() -> Vec<(String, String)> {
    arch::designs().map(|d| (d.name.to_string(), d.description.to_string())).collect()
}

/// The drivers that nest as `GUEST@HOST` designs.
#[pyfunction]
fn nestable() -> Vec<String> {
    arch::nested::NESTABLE.iter().map(|s| s.to_string()).collect()
}

/// `[(name, description, [(param, kind, default, help)])]` of every built-in workload.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn workloads() -> Vec<(String, String, Vec<(String, String, String, String)>)> {
    workload::all()
        .map(|w| {
            let params = w
                .params
                .iter()
                .map(|p| (p.name.to_string(), p.kind.label().to_string(), p.default.to_string(), p.help.to_string()))
                .collect();
            (w.name.to_string(), w.description.to_string(), params)
        })
        .collect()
}

/// `[(name, description)]` of every machine preset.
#[pyfunction]
fn presets() -> Vec<(String, String)> {
    config::PRESETS.iter().map(|p| (p.name.to_string(), p.description.to_string())).collect()
}

/// A grid from its file (`path`), else from its TOML `text` named `name` in errors.
fn grid_of(text: &str, name: &str, path: Option<&str>) -> Result<Grid> {
    match path {
        Some(p) => Grid::from_file(Path::new(p)),
        None => Grid::parse(text, name),
    }
}

/// `xlate sweep GRID --out OUT`: runs the grid's pending points on `jobs` local threads (0: every
/// core) and returns the summary as JSON (`points`, `done`, `failed`, `pending`, `ran`, `skipped`,
/// `interrupted`). Ctrl-C stops it as the CLI's does (finished points stay recorded), then raises
/// KeyboardInterrupt.
#[pyfunction]
#[pyo3(signature = (text, name, path, out, jobs=0, force=false, retry_failed=false, progress=false))]
#[allow(clippy::too_many_arguments)]
fn sweep_local(
    py: Python<'_>,
    text: &str,
    name: &str,
    path: Option<&str>,
    out: &str,
    jobs: usize,
    force: bool,
    retry_failed: bool,
    progress: bool,
) -> PyResult<String> {
    let grid = grid_of(text, name, path).map_err(|e| to_py(py, e))?;
    let opts = runner::Options { jobs, retry_failed, force, progress };
    let s = interruptible(py, || runner::sweep(&grid, Path::new(out), &opts))?.map_err(|e| to_py(py, e))?;
    if s.interrupted {
        return Err(pyo3::exceptions::PyKeyboardInterrupt::new_err(format!("xlate sweep: {s}")));
    }
    Ok(serde_json::json!({
        "points": s.points, "done": s.done, "failed": s.failed, "pending": s.pending,
        "ran": s.ran, "skipped": s.skipped, "interrupted": s.interrupted,
    })
    .to_string())
}

/// `xlate report DIR`: writes the HTML report of sweep directory `dir` to `out` (default
/// `DIR/report.html`) and returns its path.
#[pyfunction]
#[pyo3(name = "report", signature = (dir, out=None, baseline=None))]
fn report_html(py: Python<'_>, dir: &str, out: Option<&str>, baseline: Option<&str>) -> PyResult<String> {
    let (path, _) =
        py.allow_threads(|| xlate::sweep::export::write_report(Path::new(dir), out.map(Path::new), baseline)).map_err(|e| to_py(py, e))?;
    Ok(path.display().to_string())
}

/// Prepares `out` for the grid (manifest and grid.toml, as `xlate sweep` does) and returns the
/// manifest entries of the points to run, by the local runner's resume rule ([`runner::plan`]),
/// as a JSON list: those without a record or with an unreadable one (reported on stderr, as
/// `xlate sweep` does), and the failed ones too with `retry_failed`.
#[pyfunction]
#[pyo3(signature = (text, name, path, out, force=false, retry_failed=false))]
fn sweep_prepare(
    py: Python<'_>,
    text: &str,
    name: &str,
    path: Option<&str>,
    out: &str,
    force: bool,
    retry_failed: bool,
) -> PyResult<String> {
    let prepare = || -> Result<String> {
        let grid = grid_of(text, name, path)?;
        let dir = SweepDir::prepare(Path::new(out), &Manifest::from_grid(&grid), Some(&grid.text), force)?;
        let plan = runner::plan(&dir, &grid.points, retry_failed);
        for (_, e) in &plan.unreadable {
            eprintln!("xlate sweep: {e}; running the point again");
        }
        let todo: Vec<ManifestPoint> = plan.todo.iter().map(|&i| ManifestPoint::of(&grid.points[i])).collect();
        Ok(serde_json::to_string(&todo).expect("json"))
    };
    py.allow_threads(prepare).map_err(|e| to_py(py, e))
}

/// Runs one point given as its manifest entry (JSON) and returns its record as JSON text (what a
/// Ray task does): the point's settings are resolved again here and must give the same id, i.e.
/// the same xlate on the worker as on the driver. A point that fails is a record of status
/// "failed", not an exception.
#[pyfunction]
fn run_point(py: Python<'_>, point: &str) -> PyResult<String> {
    let run = || -> Result<Option<String>> {
        let mp: ManifestPoint = serde_json::from_str(point).map_err(|e| Error::config("point", format!("not a sweep point: {e}")))?;
        let p = Point::new(&mp.design, mp.preset.as_deref(), mp.sets.clone(), mp.swept.clone().into_iter().collect())?;
        if p.id != mp.id {
            return Err(Error::config(
                "point",
                format!(
                    "point {} resolves to id {} on this node (xlate {}): install the same xlate on every node",
                    mp.id,
                    p.id,
                    xlate::sweep::VERSION
                ),
            ));
        }
        Ok(Record::from_outcome(&p, &runner::run_point(&p, false)).map(|r| r.to_json()))
    };
    match interruptible(py, run)? {
        Ok(Some(text)) => Ok(text),
        Ok(None) => Err(pyo3::exceptions::PyKeyboardInterrupt::new_err("the point was interrupted")),
        Err(e) => Err(to_py(py, e)),
    }
}

/// Writes the records of a sweep directory (the driver's side of a Ray sweep).
#[pyclass(module = "xlate._xlate")]
struct RecordWriter {
    dir: SweepDir,
}

#[pymethods]
impl RecordWriter {
    /// Opens the sweep directory `out` (prepared by `sweep_prepare`).
    #[new]
    fn new(py: Python<'_>, out: &str) -> PyResult<RecordWriter> {
        let (dir, _) = SweepDir::open(Path::new(out)).map_err(|e| to_py(py, e))?;
        Ok(RecordWriter { dir })
    }

    /// Checks that `text` is the record of point `id` and writes it durably and atomically as
    /// the local runner does; returns its status ("done" or "failed").
    fn write(&self, py: Python<'_>, id: &str, text: &str) -> PyResult<&'static str> {
        let write = || -> Result<&'static str> {
            let r: Record = self.dir.parse(id, text)?;
            self.dir.write(&r)?;
            Ok(if r.status == Status::Done { "done" } else { "failed" })
        };
        py.allow_threads(write).map_err(|e| to_py(py, e))
    }
}

/// The native module.
#[pymodule]
fn _xlate(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("XLATE_VERSION", xlate::sweep::VERSION)?;
    m.add_function(wrap_pyfunction!(run_json, m)?)?;
    m.add_function(wrap_pyfunction!(resolve_config, m)?)?;
    m.add_function(wrap_pyfunction!(designs, m)?)?;
    m.add_function(wrap_pyfunction!(nestable, m)?)?;
    m.add_function(wrap_pyfunction!(workloads, m)?)?;
    m.add_function(wrap_pyfunction!(presets, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_local, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_prepare, m)?)?;
    m.add_function(wrap_pyfunction!(run_point, m)?)?;
    m.add_function(wrap_pyfunction!(report_html, m)?)?;
    m.add_class::<RecordWriter>()?;
    Ok(())
}
