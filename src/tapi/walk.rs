//! Walk plans: what a driver's walk asks the memory system to do.
//!
//! A driver's walk does not time anything. It returns the translation and a [`WalkPlan`]: the
//! physical addresses its walker reads, grouped in steps. Steps are serial; the references of one
//! step go out in parallel; the step's latency is that of the slowest reference marked `needed`
//! (ECPT's probes of ways that do not hold the entry still travel the caches, but the walk does not
//! wait for them — EMT's latency model). The walker in [`crate::mmu`] turns the plan into timed
//! memory references. A nested (guest × host) walk is a driver that composes two drivers' plans
//! into one, so the walker never changes.

use crate::addr::{PageSize, LINE_BYTES};

/// Where a translation leads: the physical base of the page and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Translation {
    /// Physical base address of the page (aligned to `size`).
    pub pbase: u64,
    /// Page size.
    pub size: PageSize,
}

impl Translation {
    /// Physical address of `va` under this translation.
    #[inline(always)]
    pub fn paddr(&self, va: u64) -> u64 {
        self.pbase | (va & self.size.offset_mask())
    }
}

/// One memory reference of a walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkRef {
    /// Physical address read.
    pub paddr: u64,
    /// Serial step the reference belongs to (non-decreasing along the plan).
    pub step: u8,
    /// Whether the walk waits for this reference.
    pub needed: bool,
    /// A host-dimension reference of a 2-D walk (reported apart from the guest's).
    pub host: bool,
    /// A write (an in-memory translation cache's fill): it dirties the line where it enters the
    /// caches, which are write-allocate; the walker never waits for one.
    pub write: bool,
}

/// The references of one walk plus its fixed latencies. Reused across walks: `clear` keeps the
/// allocation, so the hot path does not allocate.
#[derive(Clone, Debug, Default)]
pub struct WalkPlan {
    /// References, in issue order.
    pub refs: Vec<WalkRef>,
    /// Cycles on the critical path that are not memory references (walk-cache lookups, hash
    /// computation).
    pub fixed_cycles: u32,
    /// References the walk would have issued without any walk cache (Virtuoso's "unfiltered").
    pub unfiltered: u32,
    /// Walk-cache lookups that hit / missed during this walk.
    pub wc_hits: u32,
    /// Walk-cache lookups that missed.
    pub wc_misses: u32,
    /// Set by the simulator in checked mode: drivers verify each walk-cache hit against memory.
    pub checked: bool,
    /// A checked-mode violation found by the driver (stale walk-cache entry).
    pub violation: Option<&'static str>,
}

impl WalkPlan {
    /// Empties the plan for the next walk.
    #[inline]
    pub fn clear(&mut self) {
        self.refs.clear();
        self.fixed_cycles = 0;
        self.unfiltered = 0;
        self.wc_hits = 0;
        self.wc_misses = 0;
        self.violation = None;
    }

    /// Adds `o`'s fixed cycles, unfiltered references and walk-cache counts to this plan (a
    /// walk composed of other walks: the nested driver's guest and host dimensions).
    #[inline]
    pub fn add_counts(&mut self, o: &WalkPlan) {
        self.fixed_cycles += o.fixed_cycles;
        self.unfiltered += o.unfiltered;
        self.wc_hits += o.wc_hits;
        self.wc_misses += o.wc_misses;
    }

    /// Adds a reference to step `step`.
    #[inline]
    pub fn push(&mut self, paddr: u64, step: u8, needed: bool) {
        self.refs.push(WalkRef { paddr, step, needed, host: false, write: false });
    }

    /// Adds references to `n` consecutive cache lines from `paddr` to step `step` (a set of a
    /// translation cache kept in memory read whole), with one capacity check for all of them.
    #[inline]
    pub fn push_lines(&mut self, paddr: u64, n: usize, step: u8, needed: bool) {
        self.refs.extend((0..n as u64).map(|l| WalkRef { paddr: paddr + l * LINE_BYTES, step, needed, host: false, write: false }));
    }

    /// Adds a host-dimension reference of a 2-D walk to step `step`.
    #[inline]
    pub fn push_host(&mut self, paddr: u64, step: u8, needed: bool) {
        self.refs.push(WalkRef { paddr, step, needed, host: true, write: false });
    }

    /// Adds a write to step `step` that the walk does not wait for (a fill of a translation
    /// cache kept in memory: POM-TLB).
    #[inline]
    pub fn push_write(&mut self, paddr: u64, step: u8) {
        self.refs.push(WalkRef { paddr, step, needed: false, host: false, write: true });
    }

    /// Number of serial steps with at least one needed reference.
    pub fn serial_steps(&self) -> u32 {
        let mut n = 0;
        let mut last = None;
        for r in &self.refs {
            if r.needed && last != Some(r.step) {
                n += 1;
                last = Some(r.step);
            }
        }
        n
    }
}

/// The core's L2 TLB as a walk may use it for entries of its own ([`super::Driver::walk_beside`]):
/// a nested MMU whose stage-2 (gPA → hPA) entries share the unified L2 TLB's capacity, as
/// Neoverse N1's do. Entries are tagged by `tag` in the ASID's place, so they never answer a
/// lookup of the core's own translations.
pub trait SharedTlb {
    /// Lookup latency in cycles.
    fn latency(&self) -> u32;
    /// The entry covering `addr` under `tag`, if cached (a hit updates replacement state).
    fn lookup(&mut self, tag: u16, addr: u64) -> Option<Translation>;
    /// Fills `t` for `addr` under `tag`; the caller has just missed on `addr`. A size the TLB
    /// does not hold is not cached.
    fn insert(&mut self, tag: u16, addr: u64, t: Translation);
    /// Drops every entry of `tag`.
    fn drop_tag(&mut self, tag: u16);
}

/// No shared TLB: every lookup misses and nothing is kept (a walk run outside a core's MMU).
pub struct NoSharedTlb;

impl SharedTlb for NoSharedTlb {
    fn latency(&self) -> u32 {
        0
    }
    fn lookup(&mut self, _: u16, _: u64) -> Option<Translation> {
        None
    }
    fn insert(&mut self, _: u16, _: u64, _: Translation) {}
    fn drop_tag(&mut self, _: u16) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `push_lines` leaves the plan that one `push` per line would.
    #[test]
    fn push_lines_is_a_push_per_line() {
        let (mut a, mut b) = (WalkPlan::default(), WalkPlan::default());
        a.push(0x40, 0, true);
        b.push(0x40, 0, true);
        a.push_lines(0x1000, 4, 1, false);
        for l in 0..4 {
            b.push(0x1000 + 64 * l, 1, false);
        }
        a.push_lines(0x2000, 0, 2, true);
        assert_eq!(a.refs, b.refs);
        assert_eq!(a.refs.len(), 5);
        assert_eq!(a.refs[4], WalkRef { paddr: 0x10c0, step: 1, needed: false, host: false, write: false });
    }
}
