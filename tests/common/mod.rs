//! Helpers shared by the integration tests.
#![allow(dead_code)]

use xlate::arch;
use xlate::config::{Config, Layers};
use xlate::sim::{self, RunOutput};

/// The small machine tests run on: 2 GiB of memory, quick epochs.
pub const SMALL: &[&str] = &["os.memory=2G", "sim.epoch_accesses=20000"];

/// Resolves `design` with the small machine plus `sets`.
pub fn config(design: &str, sets: &[&str]) -> Config {
    let mut all: Vec<String> = SMALL.iter().map(|s| s.to_string()).collect();
    all.extend(sets.iter().map(|s| s.to_string()));
    Layers { sets: all, ..Layers::default() }.resolve(Some(arch::lookup(design).unwrap())).unwrap()
}

/// Runs `design` with `sets` (panics with the error's text on failure).
pub fn run(design: &str, sets: &[&str]) -> RunOutput {
    let cfg = config(design, sets);
    sim::run(arch::lookup(design).unwrap(), &cfg, &[], false).unwrap_or_else(|e| panic!("{design}: {e}"))
}

/// A metric by key.
pub fn metric(r: &RunOutput, key: &str) -> f64 {
    xlate::report::metrics(r).into_iter().find(|m| m.key == key).unwrap_or_else(|| panic!("no metric {key}")).value
}
