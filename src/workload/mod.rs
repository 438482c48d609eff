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

/// One documented parameter of a workload.
pub struct ParamInfo {
    /// Key in `workload.params` / `--set workload.params.KEY=V`.
    pub name: &'static str,
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
    workload: &'static str,
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
            values.insert(p.name, v.clone());
        }
        Ok(Params { workload: entry.name, values })
    }

    /// Every parameter's value (given, else the default), by name.
    pub fn values(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.values.iter().map(|(k, v)| (*k, v.as_str()))
    }

    fn raw(&self, key: &str) -> &str {
        self.values.get(key).map(String::as_str).unwrap_or_else(|| panic!("workload {} reads undeclared parameter {key}", self.workload))
    }

    fn bad(&self, key: &str, expected: &str) -> Error {
        Error::config(format!("workload.params.{key}"), format!("`{}` is not {expected}", self.raw(key)))
    }

    /// An unsigned integer parameter.
    pub fn u64(&self, key: &str) -> Result<u64> {
        self.raw(key).trim().replace('_', "").parse().map_err(|_| self.bad(key, "an unsigned integer"))
    }

    /// A byte-size parameter ("4G", "512M", 4096).
    pub fn bytes(&self, key: &str) -> Result<u64> {
        crate::addr::parse_bytes(self.raw(key)).ok_or_else(|| self.bad(key, "a byte size such as 4G or 512M"))
    }

    /// A floating-point parameter.
    pub fn f64(&self, key: &str) -> Result<f64> {
        self.raw(key).trim().parse().map_err(|_| self.bad(key, "a number"))
    }

    /// A boolean parameter.
    pub fn bool(&self, key: &str) -> Result<bool> {
        match self.raw(key).trim() {
            "true" | "1" | "yes" => Ok(true),
            "false" | "0" | "no" => Ok(false),
            _ => Err(self.bad(key, "true or false")),
        }
    }

    /// A string parameter.
    pub fn str(&self, key: &str) -> &str {
        self.raw(key)
    }

    /// Error for a parameter value outside its range.
    pub fn out_of_range(&self, key: &str, expected: &str) -> Error {
        self.bad(key, expected)
    }
}
