//! The translation database (EMT, OSDI'25 §4.2) every MMU driver implements.
//!
//! Contract for a driver:
//! - *Basic* functions ([`Tdb::find`], [`Tdb::update`], [`Tdb::remove`], space creation and
//!   destruction) must be implemented.
//! - *Customizable* functions ([`Tdb::for_each`], [`Tdb::range_is_empty`], ...) have generic
//!   defaults built on the basic ones. A driver overrides one only to be faster, never to change
//!   what it returns: `tests/it/conformance.rs` runs both paths of every driver and compares them.
//! - Every function reports the work it did (entries read and written, hashes computed) through
//!   [`TdbEnv`], so the OS cost of a design is measured from what its driver did, not assumed.
//!   The OS charges each call to a [`Func`] (`OsCost::enter`) before calling; drivers only count
//!   events, so work done by a default built on `find` is charged to the caller's function.

use super::cost::{Event, Func, OsCost};
use super::tobj::TObj;
use crate::addr::{PageSize, Pfn};
use crate::error::{Error, Result};

/// Physical memory as the translation API sees it: naturally aligned blocks of 2^order 4 KiB
/// frames. The OS's buddy allocator implements it; drivers allocate their tables through it.
pub trait Frames {
    /// A free block of 2^order frames, naturally aligned, or `None` if there is none.
    fn alloc(&mut self, order: u32) -> Option<Pfn>;
    /// Returns a block from [`Frames::alloc`] or [`Frames::reserve_contiguous`]; `Err` says why
    /// the block cannot be freed (not allocated, wrong order).
    fn free(&mut self, pfn: Pfn, order: u32) -> std::result::Result<(), String>;
    /// Free 4 KiB frames.
    fn free_pages(&self) -> u64;
    /// `pages` physically contiguous frames aligned to 2^align_order frames, taken out of the
    /// allocator for good (boot-time reservations: 1 GiB pools, Utopia's RestSegs).
    fn reserve_contiguous(&mut self, pages: u64, align_order: u32) -> Option<Pfn>;
    /// Frames of memory in all, free or not.
    fn total_pages(&self) -> u64;
    /// A free block of 2^order frames lying inside the frames `[lo, hi)` (a memory partition's
    /// own allocator), or `None` if that range has none.
    fn alloc_in_range(&mut self, order: u32, lo: u64, hi: u64) -> Option<Pfn>;
}

/// What a translation-database function may use: physical memory for its tables, and the cost
/// counters it reports to.
pub struct TdbEnv<'a> {
    /// Physical memory (table pages come from here like any other page).
    pub phys: &'a mut dyn Frames,
    /// Cost counters.
    pub cost: &'a mut OsCost,
}

impl TdbEnv<'_> {
    /// Allocates and zeroes a naturally aligned table block of 2^order pages, charging alloc and
    /// zero work.
    pub fn alloc_table(&mut self, order: u32) -> Result<Pfn> {
        let pfn = self.phys.alloc(order).ok_or_else(|| {
            let free = self.phys.free_pages();
            let kib = 4u64 << order;
            // Enough free pages but no block of them: more memory is not the first remedy.
            let why =
                if free >= 1 << order { ", but none in one free block: memory is fragmented (lower os.fragmentation.target)" } else { "" };
            Error::OutOfMemory(format!(
                "no free block of order {order} ({kib} KiB contiguous) for a translation table ({free} pages free{why})"
            ))
        })?;
        self.cost.add_to(Func::Alloc, Event::Page, 1);
        self.cost.add_to(Func::Zero, Event::Page, 1 << order);
        Ok(pfn)
    }

    /// Frees a table block.
    pub fn free_table(&mut self, pfn: Pfn, order: u32) -> Result<()> {
        self.phys.free(pfn, order).map_err(Error::Check)
    }
}

/// The translation database: one per address space, implemented by each MMU driver.
///
/// `Space` is the per-address-space state (its page table, hash tables, ...); the driver object
/// itself (`&mut self`) holds what all spaces share.
pub trait Tdb {
    /// Per-address-space translation structures.
    type Space;

    /// Creates the structures of a new address space.
    fn create_space(&mut self, asid: u16, env: &mut TdbEnv) -> Result<Self::Space>;

    /// Frees every structure of `space`.
    fn destroy_space(&mut self, space: Self::Space, env: &mut TdbEnv) -> Result<()>;

    /// The translation covering `va`, if any (basic).
    fn find(&mut self, s: &mut Self::Space, va: u64, env: &mut TdbEnv) -> Option<TObj>;

    /// Inserts `obj`, or replaces the translation at the same `va` and size (basic). Inserting over
    /// a different overlapping translation is an error.
    fn update(&mut self, s: &mut Self::Space, obj: &TObj, env: &mut TdbEnv) -> Result<()>;

    /// Removes the translation of size `size` at `va` and returns it (basic).
    fn remove(&mut self, s: &mut Self::Space, va: u64, size: PageSize, env: &mut TdbEnv) -> Option<TObj>;

    /// Calls `f` for every translation that starts in `[start, end)`, in address order
    /// (customizable; the default probes with `find`, stepping over each translation it finds).
    fn for_each(&mut self, s: &mut Self::Space, start: u64, end: u64, env: &mut TdbEnv, f: &mut dyn FnMut(&TObj)) {
        generic_for_each(self, s, start, end, env, f)
    }

    /// Whether no translation overlaps `[start, end)` (customizable; the default probes every
    /// 4 KiB page with `find`, as EMT's generic THP check does).
    fn range_is_empty(&mut self, s: &mut Self::Space, start: u64, end: u64, env: &mut TdbEnv) -> bool {
        generic_range_is_empty(self, s, start, end, env)
    }

    /// Maps `len` bytes of physically contiguous memory starting with the page `first`: pages of
    /// `first.size` at `first.va + i`, `first.pa + i` for every multiple `i` of the page size below
    /// `len` (customizable; the OS's eager paging calls it once per contiguous run it allocated).
    /// The default inserts each page with `update`; a driver with range translations (RMM)
    /// overrides it to also record the range.
    fn map_range(&mut self, s: &mut Self::Space, first: &TObj, len: u64, env: &mut TdbEnv) -> Result<()> {
        generic_map_range(self, s, first, len, env)
    }

    /// Bytes of simulated memory holding this space's translation structures.
    fn table_bytes(&self, s: &Self::Space) -> u64;

    /// Walk-cache contents made stale by the calls since the last call, as `[start, end)` VA
    /// ranges of the space those calls changed (customizable; default none). Removals need not
    /// be reported (the OS shoots the removed range down anyway); changes made while *adding* a
    /// translation must be, e.g. a table entry that a walk cache may hold moving in memory. The
    /// OS invalidates each range in every core's walk caches (not the TLBs: translations did not
    /// change) and counts a shootdown. (ECPT does not use it: its walker catches stale CWC lines
    /// itself, as EMT's does.)
    fn take_stale_walk_caches(&mut self, _out: &mut Vec<(u64, u64)>) {}

    /// Translations the driver's own rewrites made stale since the last call, as `[start, end)`
    /// VA ranges of the space those calls changed (customizable; default none): arm64's
    /// break-before-make, which invalidates a whole contiguous group when one member changes. The
    /// OS shoots each range down (TLBs and walk caches) and counts a shootdown.
    fn take_stale_translations(&mut self, _out: &mut Vec<(u64, u64)>) {}
}

/// The generic range mapping, built on `update` only: one insertion per page.
pub fn generic_map_range<T: Tdb + ?Sized>(t: &mut T, s: &mut T::Space, first: &TObj, len: u64, env: &mut TdbEnv) -> Result<()> {
    let step = first.size.bytes();
    if !len.is_multiple_of(step) {
        return Err(Error::Check(format!("map_range of {len:#x} bytes is not a whole number of {} pages", first.size)));
    }
    let mut off = 0;
    while off < len {
        t.update(s, &TObj { va: first.va + off, pa: first.pa + off, ..*first }, env)?;
        off += step;
    }
    Ok(())
}

/// The generic range iterator, built on `find` only. Drivers' optimized iterators are tested
/// against it.
pub fn generic_for_each<T: Tdb + ?Sized>(t: &mut T, s: &mut T::Space, start: u64, end: u64, env: &mut TdbEnv, f: &mut dyn FnMut(&TObj)) {
    let mut va = PageSize::K4.align_down(start);
    while va < end {
        env.cost.add(Event::Call, 1);
        match t.find(s, va, env) {
            Some(o) => {
                if o.va >= start {
                    f(&o);
                }
                va = o.end();
            }
            None => va += PageSize::K4.bytes(),
        }
    }
}

/// The generic emptiness check, built on `find` only.
pub fn generic_range_is_empty<T: Tdb + ?Sized>(t: &mut T, s: &mut T::Space, start: u64, end: u64, env: &mut TdbEnv) -> bool {
    let mut va = PageSize::K4.align_down(start);
    while va < end {
        env.cost.add(Event::Call, 1);
        if t.find(s, va, env).is_some() {
            return false;
        }
        va += PageSize::K4.bytes();
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::phys::PhysMem;

    /// A table block that fails for want of contiguity, not of pages, says so: more memory is
    /// not the remedy there.
    #[test]
    fn a_failed_table_block_tells_fragmentation_from_exhaustion() {
        let mut phys = PhysMem::new(1 << 20, 14); // 256 pages
        let mut cost = OsCost::default();
        let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
        let pages: Vec<Pfn> = (0..256).map(|_| env.alloc_table(0).unwrap()).collect();
        let e = env.alloc_table(0).unwrap_err().to_string();
        assert!(e.contains("0 pages free") && !e.contains("fragmented"), "{e}");
        // Free every other page: 128 free, no two of them a buddy pair.
        for p in pages.iter().step_by(2) {
            env.free_table(*p, 0).unwrap();
        }
        let e = env.alloc_table(1).unwrap_err().to_string();
        assert!(e.contains("order 1 (8 KiB contiguous)") && e.contains("128 pages free") && e.contains("fragmented"), "{e}");
    }
}
