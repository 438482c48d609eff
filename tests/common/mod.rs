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

/// Runs the `xlate` binary with `args`: its exit code (-1 if a signal ended it), stdout and
/// stderr.
pub fn xlate(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_xlate")).args(args).output().expect("runs");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A test's scratch directory under the system's temporary directory, emptied when made and
/// removed on drop, so that a failing test leaves nothing behind either. `tag` must be unique
/// among the tests of one binary (they run in parallel, in one process).
pub struct Scratch(std::path::PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("xlate-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }

    /// The directory.
    pub fn dir(&self) -> &std::path::Path {
        &self.0
    }

    /// `name` in the directory.
    pub fn path(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
