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

/// Settings that fit a design built for a larger machine into the 2 GiB test machine.
pub fn scaled(design: &str) -> &'static [&'static str] {
    match design {
        // Virtuoso's 2 × 8 GiB RestSegs, scaled to 256 MiB each.
        "utopia-virtuoso" => &["arch.utopia.restsegs=[{size=\"256M\",page=\"4K\",ways=16},{size=\"256M\",page=\"2M\",ways=8}]"],
        _ => &[],
    }
}
