//! The translation service (EMT §4.3): the MMU's registers for the running address space, and
//! the operations the OS asks of every core's MMU — switch, flush, shoot down — each applied to
//! the TLBs and the walk caches in one place.

use super::driver::Driver;

/// A TLB shootdown the MMUs must apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shootdown {
    /// Address space.
    pub asid: u16,
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// Invalidate TLB entries too (false: only walk caches, for a range the driver reported
    /// through [`super::Tdb::take_stale_walk_caches`]).
    pub tlb: bool,
}

/// The translation service of one core's MMU.
pub trait Tsvc<D: Driver> {
    /// Switches the core from address space `from` to `to`; `flush` drops every cached
    /// translation of `from` (an untagged MMU, or `sim.flush_on_switch`).
    fn switch(&mut self, driver: &D, from: u16, to: u16, flush: bool);

    /// Drops every cached translation of address space `asid`.
    fn flush(&mut self, driver: &D, asid: u16);

    /// Applies one shootdown to the TLBs (if `sd.tlb`) and the walk caches.
    fn shootdown(&mut self, driver: &D, sd: &Shootdown);
}
