//! Design-space sweeps that resume: `xlate sweep GRID.toml --out DIR` (docs/sweeps.md).
//!
//! A grid file ([`grid`]) expands into [`Point`]s: a design, a workload, a preset and an ordered
//! list of `key=value` settings, each resolved to its full configuration up front and named by a
//! stable hash of that configuration ([`Point::id`]). The runner ([`runner`]) runs the points on
//! local threads and writes each finished one as a record ([`record`]) under `DIR/points/`, so a
//! rerun skips what is done. [`export`] reads a directory back: status and CSV.
//!
//! The public API a binding (Python, a distributed engine) builds on, smallest first:
//! - [`Grid::from_file`] / [`Grid::parse`]: the points of a grid, in grid order, with ids;
//!   [`Point::new`] builds one point without a grid file.
//! - [`runner::plan`]: which points of a directory are left to run (the resume rule).
//! - [`runner::run_point`]: runs one point (panics caught) to an [`Outcome`];
//!   [`Record::from_outcome`] turns it into the record to store.
//! - [`SweepDir`]: a sweep directory — [`SweepDir::prepare`] (manifest, grid copy, identity
//!   check), [`SweepDir::read`] / [`SweepDir::write`] (records), [`SweepDir::open`] (manifest).
//! - [`runner::sweep`]: the whole local sweep (what `xlate sweep` does); [`runner::execute`]: the
//!   parallel executor under it (also used by `xlate reproduce`).
//! - [`export::status`], [`export::csv`]: what `--status` and `--export` print.

pub mod export;
pub mod grid;
pub mod record;
pub mod runner;

pub use grid::{Grid, Point};
pub use record::{Manifest, ManifestPoint, Record, Status, SweepDir, RECORD_SCHEMA};
pub use runner::{Options, Outcome, PointError, Summary};

/// This build's version, part of every point id and record.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
