//! OS policies as plug-ins: the OS is configured with a list of each kind and calls them at
//! their points — promoters at every epoch (khugepaged, Leshy, CoalaKhugepaged, Hawkeye),
//! map policies when a process maps memory (RMM's eager paging). Each policy works through the
//! OS's mechanisms (`collapse`, `eager_map`, the translation API), so its costs are counted like
//! any other OS work. Driver-side policies (Utopia's RestSeg placement and PTW-tracking
//! migration) are the driver's capabilities in [`crate::tapi::policy`] instead.
//!
//! Adding a policy: a type implementing [`Promoter`] or [`MapPolicy`], its config keys under
//! `os.*`, and one line in [`promoters`] or [`map_policies`].

use super::khugepaged::Khugepaged;
use super::{CoalaKhugepaged, Hawkeye, LeshyOnline, Os, OsConfig, Vma};
use crate::error::Result;
use crate::tapi::Driver;

/// A background promotion policy, run at every epoch.
pub trait Promoter<D: Driver> {
    /// Name in reports.
    fn name(&self) -> &'static str;
    /// Does the work due by simulated time `now_ms`.
    fn tick(&mut self, os: &mut Os<D>, now_ms: f64) -> Result<()>;
}

/// A policy that acts when a process maps memory.
pub trait MapPolicy<D: Driver> {
    /// Name in reports.
    fn name(&self) -> &'static str;
    /// Called after `mmap` created `vma` in address space `asid` (not for trace-driven spaces,
    /// whose memory the traced program already had).
    fn on_mmap(&mut self, os: &mut Os<D>, asid: u16, vma: Vma) -> Result<()>;
}

/// The promoters `cfg` turns on, in the order they run.
pub fn promoters<D: Driver>(cfg: &OsConfig) -> Vec<Box<dyn Promoter<D>>> {
    let mut v: Vec<Box<dyn Promoter<D>>> = Vec::new();
    if let Some(k) = Khugepaged::configured(cfg) {
        v.push(Box::new(k));
    }
    // Leshy decides before CoalaKhugepaged acts on its hints in the same epoch.
    if let Some(l) = LeshyOnline::configured(cfg) {
        v.push(Box::new(l));
    }
    if let Some(c) = CoalaKhugepaged::configured(cfg) {
        v.push(Box::new(c));
    }
    if let Some(h) = Hawkeye::configured(cfg) {
        v.push(Box::new(h));
    }
    v
}

/// The map policies `cfg` turns on, in the order they run.
pub fn map_policies<D: Driver>(cfg: &OsConfig) -> Vec<Box<dyn MapPolicy<D>>> {
    let mut v: Vec<Box<dyn MapPolicy<D>>> = Vec::new();
    if cfg.eager_paging {
        v.push(Box::new(EagerPaging));
    }
    v
}

/// Eager paging (`os.eager_paging`; see [`super::eager`]).
pub struct EagerPaging;

impl<D: Driver> MapPolicy<D> for EagerPaging {
    fn name(&self) -> &'static str {
        "eager_paging"
    }
    fn on_mmap(&mut self, os: &mut Os<D>, asid: u16, vma: Vma) -> Result<()> {
        os.eager_map(asid, vma)
    }
}
