//! Built-in workloads: programs that really run their algorithm over data laid out in simulated
//! virtual memory, and emit the loads and stores the real code would.
//!
//! A workload places its data through [`Vm`] (the simulated OS's mmap), never at made-up addresses,
//! and then fills batches of [`Access`]es per thread. Adding a workload is one file here plus one
//! line in [`REGISTRY`].

use crate::error::{Error, Result};
use crate::trace::Access;
use std::collections::BTreeMap;

pub mod apps;
pub mod graph;
pub mod gups;
pub mod pending;
pub mod ptrchase;
pub mod stream;
#[cfg(test)]
pub mod testvm;

pub use crate::tapi::{HugeAdvice, MapFlags};

/// The part of the simulated OS a workload sees: its own address space.
pub trait Vm {
    /// Maps `len` bytes (rounded up to 4 KiB) and returns the base virtual address. The base is
    /// 2 MiB-aligned when `len >= 2 MiB` (as glibc's large mallocs end up) and 1 GiB-aligned for
    /// [`HugeAdvice::Giga`].
    fn mmap(&mut self, len: u64, flags: MapFlags) -> Result<u64>;
    /// Unmaps `[addr, addr+len)`.
    fn munmap(&mut self, addr: u64, len: u64) -> Result<()>;
    /// Faults every page of `[addr, addr+len)` in, in address order, through the normal fault path
    /// (what the program's initialisation loop would do), without simulating its accesses.
    fn populate(&mut self, addr: u64, len: u64) -> Result<()>;
    /// `madvise`: changes the huge-page advice of every VMA inside `[addr, addr+len)` (the range
    /// must cover whole VMAs).
    fn madvise(&mut self, addr: u64, len: u64, advice: HugeAdvice) -> Result<()>;
}

/// A built-in workload.
pub trait Workload {
    /// Lays out the data in the address space.
    fn setup(&mut self, vm: &mut dyn Vm) -> Result<()>;
    /// Number of threads (access streams sharing the address space).
    fn threads(&self) -> usize {
        1
    }
    /// Writes the next accesses of `thread` into `buf` and returns how many; 0 means the thread is
    /// done. May map or unmap memory through `vm` as the program would.
    fn fill(&mut self, thread: usize, buf: &mut [Access], vm: &mut dyn Vm) -> Result<usize>;
    /// The accesses `fill` will produce in all, if known before running (for progress displays;
    /// most graph and application workloads only know when they are done).
    fn total_accesses(&self) -> Option<u64> {
        None
    }
}

/// How a workload reads a parameter's text: which [`Params`] getter it calls (the getters check
/// it). Sweeps use it to give two spellings of one value (`"16M"`, `16777216`) one point id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A byte size ("4G", "512M", 4096): [`Params::bytes`].
    Bytes,
    /// An unsigned integer: [`Params::u64`].
    Count,
    /// A floating-point number: [`Params::f64`].
    Number,
    /// true / false (or 1 / 0, yes / no): [`Params::bool`].
    Flag,
    /// Text the workload interprets itself: [`Params::str`].
    Text,
}

impl ParamKind {
    /// What `xlate workloads` prints for it.
    pub fn label(self) -> &'static str {
        match self {
            ParamKind::Bytes => "bytes",
            ParamKind::Count => "integer",
            ParamKind::Number => "number",
            ParamKind::Flag => "bool",
            ParamKind::Text => "text",
        }
    }

    /// What a value of this kind looks like, for the error naming one that does not parse.
    fn expected(self) -> &'static str {
        match self {
            ParamKind::Bytes => "a byte size such as 4G or 512M",
            ParamKind::Count => "an unsigned integer",
            ParamKind::Number => "a number",
            ParamKind::Flag => "true or false",
            ParamKind::Text => "text",
        }
    }

    /// `text` in one spelling per value (decimal bytes, plain integers, Rust's shortest form of
    /// a float, `true`/`false`); `None` if it does not parse as this kind (the run then says so).
    pub fn canonical(self, text: &str) -> Option<String> {
        match self {
            ParamKind::Bytes => crate::addr::parse_bytes(text).map(|b| b.to_string()),
            ParamKind::Count => parse_count(text).map(|n| n.to_string()),
            ParamKind::Number => parse_number(text).map(|x| x.to_string()),
            ParamKind::Flag => parse_flag(text).map(|b| b.to_string()),
            ParamKind::Text => Some(text.to_string()),
        }
    }
}

/// An unsigned integer, `_` allowed between digits.
fn parse_count(text: &str) -> Option<u64> {
    text.trim().replace('_', "").parse().ok()
}

fn parse_number(text: &str) -> Option<f64> {
    text.trim().parse().ok()
}

fn parse_flag(text: &str) -> Option<bool> {
    match text.trim() {
        "true" | "1" | "yes" => Some(true),
        "false" | "0" | "no" => Some(false),
        _ => None,
    }
}

/// The error for parameter `key`'s value `text`, which does not parse as `kind`.
fn kind_error(key: &str, text: &str, kind: ParamKind) -> Error {
    Error::config(format!("workload.params.{key}"), format!("`{text}` is not {}", kind.expected()))
}

/// One documented parameter of a workload.
pub struct ParamInfo {
    /// Key in `workload.params` / `--set workload.params.KEY=V`.
    pub name: &'static str,
    /// How the workload reads it.
    pub kind: ParamKind,
    /// Default value, as text.
    pub default: &'static str,
    /// One line of help.
    pub help: &'static str,
}

/// A registered workload.
pub struct WorkloadEntry {
    /// Name on the command line.
    pub name: &'static str,
    /// One-line description.
    pub description: &'static str,
    /// Its parameters.
    pub params: &'static [ParamInfo],
    /// Builds it from parameters and the run's seed.
    pub build: fn(&Params, u64) -> Result<Box<dyn Workload>>,
}

/// The core workloads; further groups live in their own modules.
static CORE: &[WorkloadEntry] = &[gups::ENTRY, stream::ENTRY, ptrchase::ENTRY];

/// Every group of built-in workloads, in the order `xlate workloads` lists them.
static GROUPS: &[&[WorkloadEntry]] = &[CORE, graph::ENTRIES, apps::ENTRIES];

/// Every built-in workload.
pub fn all() -> impl Iterator<Item = &'static WorkloadEntry> {
    GROUPS.iter().flat_map(|g| g.iter())
}

/// Finds a workload by name.
pub fn lookup(name: &str) -> Result<&'static WorkloadEntry> {
    all().find(|e| e.name == name).ok_or_else(|| Error::Unknown {
        what: "workload",
        name: name.to_string(),
        known: all().map(|e| e.name.to_string()).collect(),
    })
}

/// Builds workload `name` with `params` (unknown parameter names are an error).
pub fn build(name: &str, params: &BTreeMap<String, String>, seed: u64) -> Result<Box<dyn Workload>> {
    let entry = lookup(name)?;
    let p = Params::new(entry, params)?;
    (entry.build)(&p, seed)
}

/// A workload's parameters, checked against its [`ParamInfo`] list, with typed getters whose errors
/// name the key.
pub struct Params {
    entry: &'static WorkloadEntry,
    values: BTreeMap<&'static str, String>,
}

impl Params {
    /// Resolves `given` against the defaults of `entry`.
    pub fn new(entry: &'static WorkloadEntry, given: &BTreeMap<String, String>) -> Result<Params> {
        let mut values: BTreeMap<&'static str, String> = entry.params.iter().map(|p| (p.name, p.default.to_string())).collect();
        for (k, v) in given {
            let Some(p) = entry.params.iter().find(|p| p.name == k) else {
                return Err(Error::config(
                    format!("workload.params.{k}"),
                    format!(
                        "workload {} has no parameter `{k}`; it has: {}",
                        entry.name,
                        entry.params.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
                    ),
                ));
            };
            // A value is checked against its kind here, not first when the workload reads it,
            // so a sweep refuses a misspelt value before running any point.
            if p.kind.canonical(v).is_none() {
                return Err(kind_error(k, v, p.kind));
            }
            values.insert(p.name, v.clone());
        }
        Ok(Params { entry, values })
    }

    /// Every parameter's value (given, else the default), by name.
    pub fn values(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.values.iter().map(|(k, v)| (*k, v.as_str()))
    }

    /// Every parameter's value (given, else the default) in one spelling per value
    /// ([`ParamKind::canonical`]; [`Params::new`] checked that each parses).
    pub fn canonical(&self) -> BTreeMap<String, String> {
        let kind = |k: &str| self.entry.params.iter().find(|p| p.name == k).map_or(ParamKind::Text, |p| p.kind);
        self.values().map(|(k, v)| (k.to_string(), kind(k).canonical(v).unwrap_or_else(|| v.to_string()))).collect()
    }

    /// The text of `key`, read as `kind`. A workload reading a parameter it did not declare, or
    /// with another getter than its [`ParamKind`] says, is a bug in the workload, not bad input.
    fn raw(&self, key: &str, kind: ParamKind) -> &str {
        let w = self.entry.name;
        let declared = self.entry.params.iter().find(|p| p.name == key).map(|p| p.kind);
        assert!(declared.is_none_or(|d| d == kind), "workload {w} reads parameter {key} as {kind:?}, declared {declared:?}");
        self.values.get(key).map(String::as_str).unwrap_or_else(|| panic!("workload {w} reads undeclared parameter {key}"))
    }

    fn bad(&self, key: &str, kind: ParamKind) -> Error {
        kind_error(key, self.raw(key, kind), kind)
    }

    /// An unsigned integer parameter.
    pub fn u64(&self, key: &str) -> Result<u64> {
        let k = ParamKind::Count;
        parse_count(self.raw(key, k)).ok_or_else(|| self.bad(key, k))
    }

    /// A byte-size parameter ("4G", "512M", 4096).
    pub fn bytes(&self, key: &str) -> Result<u64> {
        let k = ParamKind::Bytes;
        crate::addr::parse_bytes(self.raw(key, k)).ok_or_else(|| self.bad(key, k))
    }

    /// A floating-point parameter.
    pub fn f64(&self, key: &str) -> Result<f64> {
        let k = ParamKind::Number;
        parse_number(self.raw(key, k)).ok_or_else(|| self.bad(key, k))
    }

    /// A boolean parameter.
    pub fn bool(&self, key: &str) -> Result<bool> {
        let k = ParamKind::Flag;
        parse_flag(self.raw(key, k)).ok_or_else(|| self.bad(key, k))
    }

    /// A string parameter.
    pub fn str(&self, key: &str) -> &str {
        self.raw(key, ParamKind::Text)
    }

    /// Error for a parameter value outside its range.
    pub fn out_of_range(&self, key: &str, expected: &str) -> Error {
        let text = self.values.get(key).map_or("", String::as_str);
        Error::config(format!("workload.params.{key}"), format!("`{text}` is not {expected}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every built-in default parses as its declared kind: [`Params::new`] checks only the values
    /// given, so a default that did not would fail first when its workload read it.
    #[test]
    fn every_default_parses_as_its_kind() {
        for e in all() {
            for p in e.params {
                assert!(p.kind.canonical(p.default).is_some(), "{}.{} = {:?} is not {:?}", e.name, p.name, p.default, p.kind);
            }
        }
    }

    /// A given value that does not parse as its parameter's kind is refused when the parameters
    /// are resolved, naming the key, the value and what was expected; text takes anything.
    #[test]
    fn a_value_of_the_wrong_kind_is_refused_when_resolved() {
        let given = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        let gups = lookup("gups").unwrap();
        let err = Params::new(gups, &given("updates", "lots")).err().expect("refused").to_string();
        assert!(err.contains("workload.params.updates") && err.contains("`lots` is not an unsigned integer"), "{err}");
        let err = Params::new(gups, &given("table", "big")).err().expect("refused").to_string();
        assert!(err.contains("workload.params.table") && err.contains("`big` is not a byte size"), "{err}");
        let stream = lookup("stream").unwrap();
        let err = Params::new(stream, &given("populate", "maybe")).err().expect("refused").to_string();
        assert!(err.contains("`maybe` is not true or false"), "{err}");
        assert_eq!(Params::new(gups, &given("table", "16M")).unwrap().bytes("table").unwrap(), 16 << 20);
        for e in all() {
            if let Some(p) = e.params.iter().find(|p| p.kind == ParamKind::Text) {
                assert!(Params::new(e, &given(p.name, "anything at all")).is_ok(), "{}.{}", e.name, p.name);
            }
        }
    }
}
