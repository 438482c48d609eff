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
use xlate::config::{self, Layers};
use xlate::error::{Error, Result};
use xlate::{arch, report, sim, trace, workload};

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
    if r.core.accesses == 0 && !r.interrupted {
        if r.config.sim.warmup_accesses > 0 {
            return Err(Error::config(
                "sim.warmup_accesses",
                format!("the warm-up of {} accesses took the whole run: nothing was measured", r.config.sim.warmup_accesses),
            ));
        }
        return Err(Error::Workload {
            name: r.workload.clone(),
            msg: "nothing was simulated: the input produced no memory accesses (an empty trace or a file of another format)".into(),
        });
    }
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
    py.allow_threads(|| guarded(|| run_one(&design, workload.as_deref(), sets, preset, traces))).map_err(|e| to_py(py, e))
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

/// `[(name, description, [(param, default, help)])]` of every built-in workload.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn workloads() -> Vec<(String, String, Vec<(String, String, String)>)> {
    workload::all()
        .map(|w| {
            let params = w.params.iter().map(|p| (p.name.to_string(), p.default.to_string(), p.help.to_string())).collect();
            (w.name.to_string(), w.description.to_string(), params)
        })
        .collect()
}

/// `[(name, description)]` of every machine preset.
#[pyfunction]
fn presets() -> Vec<(String, String)> {
    config::PRESETS.iter().map(|p| (p.name.to_string(), p.description.to_string())).collect()
}

/// The native module.
#[pymodule]
fn _xlate(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(run_json, m)?)?;
    m.add_function(wrap_pyfunction!(resolve_config, m)?)?;
    m.add_function(wrap_pyfunction!(designs, m)?)?;
    m.add_function(wrap_pyfunction!(nestable, m)?)?;
    m.add_function(wrap_pyfunction!(workloads, m)?)?;
    m.add_function(wrap_pyfunction!(presets, m)?)?;
    Ok(())
}
