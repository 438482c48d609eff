//! A sweep directory on disk (docs/sweeps.md, "Directory and records"):
//!
//! ```text
//! DIR/grid.toml          copy of the grid (sweeps; not written by `xlate reproduce`)
//! DIR/manifest.json      every point in grid order: id, design, workload, preset, sets, swept
//! DIR/points/<id>.json   one record per finished point (done or failed), written atomically
//! ```
//!
//! A record is written to a temporary file, synced, and renamed into place, so a record either
//! exists whole or not at all, even if the process is killed or the machine loses power.

use super::grid::Point;
use super::runner::Outcome;
use crate::error::{Error, Result};
use crate::sim::RunOutput;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json};
use std::path::{Path, PathBuf};

/// Version of the record and manifest format; bumped when a field changes meaning.
pub const RECORD_SCHEMA: u32 = 1;

/// How a point ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// It ran to the end: `result` and `run` hold its results.
    Done,
    /// It returned an error or panicked: `error` says what.
    Failed,
}

/// One finished point: `DIR/points/<id>.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    /// [`RECORD_SCHEMA`].
    pub record_schema: u32,
    /// The point's id (the file name).
    pub id: String,
    /// xlate version that ran it.
    pub xlate_version: String,
    /// Design name.
    pub design: String,
    /// Workload name.
    pub workload: String,
    /// Preset, if any.
    pub preset: Option<String>,
    /// The settings applied over preset and design, in order (`xlate run --set` each).
    pub sets: Vec<String>,
    /// The swept keys and their values at this point.
    pub swept: Map<String, Json>,
    /// Done or failed.
    pub status: Status,
    /// The error of a failed point.
    pub error: Option<String>,
    /// `xlate run --json`'s result (docs/results-schema.md) of a done point.
    pub result: Option<Json>,
    /// The run itself (every counter, from which `result` is computed), of a done point.
    pub run: Option<RunOutput>,
}

impl Record {
    fn new(p: &Point, status: Status) -> Record {
        Record {
            record_schema: RECORD_SCHEMA,
            id: p.id.clone(),
            xlate_version: super::VERSION.to_string(),
            design: p.design.clone(),
            workload: p.workload.clone(),
            preset: p.preset.clone(),
            sets: p.sets.clone(),
            swept: p.swept.iter().cloned().collect(),
            status,
            error: None,
            result: None,
            run: None,
        }
    }

    /// The record of a point that finished.
    pub fn done(p: &Point, run: RunOutput) -> Record {
        let mut r = Record::new(p, Status::Done);
        r.result = Some(crate::report::json(&run));
        r.run = Some(run);
        r
    }

    /// The record of a point that failed with `error`.
    pub fn failed(p: &Point, error: impl Into<String>) -> Record {
        let mut r = Record::new(p, Status::Failed);
        r.error = Some(error.into());
        r
    }

    /// The record of an outcome; `None` for an interrupted point (not recorded: it reruns).
    pub fn from_outcome(p: &Point, o: &Outcome) -> Option<Record> {
        match o {
            Outcome::Done(run) => Some(Record::done(p, (**run).clone())),
            Outcome::Failed(e) => Some(Record::failed(p, e.to_string())),
            Outcome::Interrupted => None,
        }
    }

    /// The record as the JSON text stored on disk (one line).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a record serializes")
    }
}

/// One point of the manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ManifestPoint {
    /// Its id.
    pub id: String,
    /// Design name.
    pub design: String,
    /// Workload name.
    pub workload: String,
    /// Preset, if any.
    pub preset: Option<String>,
    /// Its settings, in order: `Point::new(design, preset, sets, swept)` rebuilds the point.
    pub sets: Vec<String>,
    /// Its swept values.
    pub swept: Map<String, Json>,
    /// A name for it (`xlate reproduce`: the study's run keys), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

impl ManifestPoint {
    /// The manifest entry of a point.
    pub fn of(p: &Point) -> ManifestPoint {
        ManifestPoint {
            id: p.id.clone(),
            design: p.design.clone(),
            workload: p.workload.clone(),
            preset: p.preset.clone(),
            sets: p.sets.clone(),
            swept: p.swept.iter().cloned().collect(),
            label: None,
        }
    }

    /// One line naming the point (as the progress lines do).
    pub fn describe(&self, keys: &[String]) -> String {
        let mut s = format!("{} {}", self.design, self.workload);
        if let Some(p) = &self.preset {
            s.push_str(&format!(" preset={p}"));
        }
        for k in keys {
            if let Some(v) = self.swept.get(k) {
                s.push_str(&format!(" {k}={}", super::grid::json_text(v)));
            }
        }
        s
    }
}

/// `DIR/manifest.json`: what the directory's sweep consists of, in grid order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`RECORD_SCHEMA`].
    pub record_schema: u32,
    /// xlate version that wrote it (part of every id).
    pub xlate_version: String,
    /// Where the points come from: the grid file as given, or `xlate reproduce STUDY`.
    pub source: String,
    /// Every swept key in grid order (the CSV's swept columns).
    pub swept_keys: Vec<String>,
    /// The points.
    pub points: Vec<ManifestPoint>,
}

impl Manifest {
    /// The manifest of `points` from `source`.
    pub fn new(source: impl Into<String>, points: &[Point], swept_keys: Vec<String>) -> Manifest {
        Manifest {
            record_schema: RECORD_SCHEMA,
            xlate_version: super::VERSION.to_string(),
            source: source.into(),
            swept_keys,
            points: points.iter().map(ManifestPoint::of).collect(),
        }
    }

    /// The manifest of a grid.
    pub fn from_grid(g: &super::Grid) -> Manifest {
        Manifest::new(g.name.clone(), &g.points, g.swept_keys.clone())
    }

    fn ids(&self) -> Vec<&str> {
        self.points.iter().map(|p| p.id.as_str()).collect()
    }
}

fn invalid(path: &Path, msg: impl Into<String>) -> Error {
    Error::io(path.display().to_string(), std::io::Error::new(std::io::ErrorKind::InvalidData, msg.into()))
}

/// A sweep directory.
#[derive(Clone, Debug)]
pub struct SweepDir {
    root: PathBuf,
}

impl SweepDir {
    /// Prepares `root` for `manifest`'s points: creates it and `points/`, and writes the
    /// manifest (and `grid.toml` when `grid_text` is given). A directory that already holds a
    /// sweep of other points (a different grid, or another xlate version) is refused unless
    /// `force`: then the new manifest replaces the old one, and the records of points in both
    /// stay valid (same id, same run). A non-empty directory that is not a sweep is refused
    /// unless `force`.
    pub fn prepare(root: &Path, manifest: &Manifest, grid_text: Option<&str>, force: bool) -> Result<SweepDir> {
        let d = SweepDir { root: root.to_path_buf() };
        let mpath = d.manifest_path();
        if mpath.exists() {
            let old = d.manifest()?;
            if old.ids() != manifest.ids() && !force {
                let new_ids: std::collections::HashSet<&str> = manifest.ids().into_iter().collect();
                let shared = old.ids().iter().filter(|i| new_ids.contains(*i)).count();
                return Err(Error::io(
                    root.display().to_string(),
                    std::io::Error::new(
                        std::io::ErrorKind::AlreadyExists,
                        format!(
                            "holds another sweep ({}, {} points; {shared} of them are in this one of {} points); \
                             rerun that one, choose another --out, or pass --force to make this sweep the directory's \
                             (records of points in both are kept)",
                            old.source,
                            old.points.len(),
                            manifest.points.len()
                        ),
                    ),
                ));
            }
        } else if root.is_dir() && std::fs::read_dir(root).map(|mut r| r.next().is_some()).unwrap_or(false) && !force {
            return Err(Error::io(
                root.display().to_string(),
                std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "exists, is not empty and is not a sweep directory (no manifest.json); choose a new or empty directory, or pass --force",
                ),
            ));
        } else if root.exists() && !root.is_dir() {
            return Err(Error::io(root.display().to_string(), std::io::Error::other("is a file, not a directory")));
        }
        std::fs::create_dir_all(d.points_dir()).map_err(|e| Error::io(d.points_dir().display().to_string(), e))?;
        if let Some(t) = grid_text {
            crate::fsutil::write_atomic(&root.join("grid.toml"), t.as_bytes())?;
        }
        let text = serde_json::to_string_pretty(manifest).expect("a manifest serializes") + "\n";
        crate::fsutil::write_atomic(&mpath, text.as_bytes())?;
        Ok(d)
    }

    /// Opens an existing sweep directory and reads its manifest.
    pub fn open(root: &Path) -> Result<(SweepDir, Manifest)> {
        let d = SweepDir { root: root.to_path_buf() };
        if !d.manifest_path().exists() {
            return Err(Error::io(
                root.display().to_string(),
                std::io::Error::new(std::io::ErrorKind::NotFound, "is not a sweep directory (no manifest.json)"),
            ));
        }
        let m = d.manifest()?;
        Ok((d, m))
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn manifest_path(&self) -> PathBuf {
        self.root.join("manifest.json")
    }

    fn points_dir(&self) -> PathBuf {
        self.root.join("points")
    }

    /// The manifest.
    pub fn manifest(&self) -> Result<Manifest> {
        let p = self.manifest_path();
        let text = std::fs::read_to_string(&p).map_err(|e| Error::io(p.display().to_string(), e))?;
        let m: Manifest = serde_json::from_str(&text).map_err(|e| invalid(&p, format!("not a sweep manifest: {e}")))?;
        if m.record_schema != RECORD_SCHEMA {
            return Err(invalid(&p, format!("record schema {} (this xlate reads {RECORD_SCHEMA})", m.record_schema)));
        }
        Ok(m)
    }

    /// Where point `id`'s record goes.
    pub fn record_path(&self, id: &str) -> PathBuf {
        self.points_dir().join(format!("{id}.json"))
    }

    /// The text of point `id`'s record, if it has one.
    pub fn read_text(&self, id: &str) -> Result<Option<String>> {
        let p = self.record_path(id);
        match std::fs::read_to_string(&p) {
            Ok(t) => Ok(Some(t)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(p.display().to_string(), e)),
        }
    }

    /// Parses a record's text as `T` (a [`Record`] or any subset of its fields), checking its
    /// schema and id.
    pub fn parse<T: serde::de::DeserializeOwned>(&self, id: &str, text: &str) -> Result<T> {
        #[derive(Deserialize)]
        struct Head {
            record_schema: u32,
            id: String,
        }
        let p = self.record_path(id);
        let head: Head = serde_json::from_str(text).map_err(|e| invalid(&p, format!("not a sweep record: {e}")))?;
        if head.record_schema != RECORD_SCHEMA {
            return Err(invalid(&p, format!("record schema {} (this xlate reads {RECORD_SCHEMA})", head.record_schema)));
        }
        if head.id != id {
            return Err(invalid(&p, format!("holds the record of point {}", head.id)));
        }
        serde_json::from_str(text).map_err(|e| invalid(&p, format!("not a sweep record: {e}")))
    }

    /// Point `id`'s record, if it has one. A record that cannot be read or parsed is an error
    /// (the runner treats it as missing and runs the point again).
    pub fn read(&self, id: &str) -> Result<Option<Record>> {
        match self.read_text(id)? {
            Some(t) => self.parse(id, &t).map(Some),
            None => Ok(None),
        }
    }

    /// Writes a record durably and atomically (temporary file, fsync, rename, fsync of the
    /// directory).
    pub fn write(&self, r: &Record) -> Result<()> {
        let dest = self.record_path(&r.id);
        let name = dest.display().to_string();
        let (pending, mut file) = crate::fsutil::PendingFile::create(&dest)?;
        let text = r.to_json() + "\n";
        std::io::Write::write_all(&mut file, text.as_bytes()).map_err(|e| Error::io(name.clone(), e))?;
        file.sync_all().map_err(|e| Error::io(name.clone(), e))?;
        drop(file);
        pending.commit()?;
        // The rename itself is durable once the directory is.
        if let Ok(dir) = std::fs::File::open(self.points_dir()) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}
