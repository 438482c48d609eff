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

/// Most wake-ups of one periodic policy a single tick runs. Ticks come every epoch, a few
/// simulated milliseconds apart, so a policy is at most a few wake-ups behind; only a config whose
/// simulated clock leaps (fault costs of 2^63 cycles, an enormous `os.time_scale`) falls further
/// behind, and running every missed wake-up would take the host hours (the long fuzz run found
/// `os.fault_trap_cycles = 2^63 − 1` scanning with khugepaged for over an hour). Beyond the bound
/// the rest are skipped, as a real daemon that overslept does not run its missed passes.
pub const MAX_WAKES_PER_TICK: u32 = 1024;

/// The wake-ups of a policy with period `period_ms` due by `now_ms`, advancing `next_ms` past
/// them: `while now >= next { next += period; wake() }` exactly, up to [`MAX_WAKES_PER_TICK`];
/// past that, `next_ms` skips to one period after `now_ms`.
pub fn due_wakes(next_ms: &mut f64, period_ms: f64, now_ms: f64) -> u32 {
    let mut n = 0;
    while now_ms >= *next_ms {
        if n == MAX_WAKES_PER_TICK {
            *next_ms = now_ms + period_ms;
            break;
        }
        *next_ms += period_ms;
        n += 1;
    }
    n
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_wakes_matches_the_loop_and_is_bounded() {
        let mut next = 10.0;
        assert_eq!(due_wakes(&mut next, 10.0, 35.0), 3);
        assert_eq!(next, 40.0);
        assert_eq!(due_wakes(&mut next, 10.0, 39.9), 0);
        let mut next = 1.0;
        assert_eq!(due_wakes(&mut next, 1.0, 1e18), MAX_WAKES_PER_TICK);
        assert_eq!(next, 1e18 + 1.0);
    }
}
