//! OS policies a driver may carry (opt-in capabilities, offered through the [`Driver`]
//! accessors): where a new page's frame goes, which pages a walk-watching policy wants moved, and
//! in-memory translation caches the OS's shootdowns must reach. The OS calls each only if the
//! driver offers it.

use super::driver::Driver;
use super::tdb::{Frames, TdbEnv};
use super::tobj::MapFlags;
use super::walk::Translation;
use crate::addr::PageSize;
use crate::error::Result;

/// Where a page the OS moves out of a frame the driver needs goes ([`Evict::to`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictTo {
    /// A buddy-allocated frame (any address; Utopia's FlexSeg). Swap if there is none and swap is on.
    Buddy,
    /// The swap device (a design with no flexible mapping, e.g. restrictive-only).
    Swap,
}

/// A page that occupies the frame a [`Placement::Frame`] names and must be moved out first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Evict {
    /// Address space of the victim.
    pub asid: u16,
    /// Its virtual base.
    pub va: u64,
    /// Its size.
    pub size: PageSize,
    /// Where it goes.
    pub to: EvictTo,
}

/// Where the OS should put a page ([`FramePlacement::place`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Any frame from the buddy allocator (the default, and every flexible design).
    Buddy,
    /// This frame (chosen by the driver, e.g. a way of the set a VPN hashes to); if a page holds it,
    /// the OS moves `evict` out first (migration or swap-out, with its costs).
    Frame {
        /// Physical base of the frame (aligned to the page size).
        pa: u64,
        /// The page that holds it now, if any.
        evict: Option<Evict>,
    },
    /// Any buddy frame inside the physical range `[lo, hi)` (a memory partition: SPARTA's
    /// per-partition allocation, Algorithm 1, like Linux's NUMA `membind`). The OS allocates the
    /// block only there; when the range has no free block it swaps out pages that live in the
    /// range (a partition under pressure swaps rather than spills), and with swap off the fault
    /// fails with an out-of-memory error that names the range.
    InRange {
        /// First byte of the range (aligned to the largest buddy block).
        lo: u64,
        /// One past its last byte.
        hi: u64,
    },
}

/// A page the driver asks the OS to place again ([`MigrationPolicy::take_migrations`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigrationRequest {
    /// Address space.
    pub asid: u16,
    /// Virtual base of the page.
    pub va: u64,
    /// Its size.
    pub size: PageSize,
}

/// Frame placement (Utopia's RestSegs; next, CoalaPaging and SPARTA's partitions).
pub trait FramePlacement<D: Driver> {
    /// Called once while the OS boots, before memory is fragmented: reserves the physical memory
    /// the design manages itself. Default: nothing.
    fn boot(&mut self, _frames: &mut dyn Frames) -> Result<()> {
        Ok(())
    }

    /// Chooses the frame for a page of `size` at `va` that the OS is about to map (page fault,
    /// promotion) or is moving because a [`MigrationPolicy`] asked. Work is charged to allocation.
    fn place(&mut self, s: &mut D::Space, asid: u16, va: u64, size: PageSize, flags: MapFlags, env: &mut TdbEnv) -> Placement;

    /// [`FramePlacement::place`] for the page `r` that a [`MigrationPolicy`] asked to move
    /// ([`MigrationPolicy::take_migrations`]): the OS says which of the two it asks, so a design
    /// that places migrations differently from faults (Utopia) needs no record of its requests.
    /// Default: `place`.
    fn place_migrating(&mut self, s: &mut D::Space, r: MigrationRequest, flags: MapFlags, env: &mut TdbEnv) -> Placement {
        self.place(s, r.asid, r.va, r.size, flags, env)
    }

    /// The page ((ASID, virtual base) of a mapped page) that [`FramePlacement::place`] would
    /// move out if asked now to place a page of `size` at `va`, or `None`; changes nothing. A
    /// host-side hint: the OS prefetches that page's entries a few page moves ahead
    /// (docs/performance.md, "Page moves prefetched ahead"); a wrong answer costs only time.
    /// Default: none.
    fn victim_hint(&self, _s: &D::Space, _va: u64, _size: PageSize) -> Option<(u16, u64)> {
        None
    }

    /// Host prefetch of what [`FramePlacement::victim_hint`] and then
    /// [`FramePlacement::place_migrating`] read first for a page of `size` at `va` (Utopia: the
    /// page's TAR rows and its sets' replacement state). Run a few page moves before the hint, so
    /// that the hint's own reads do not wait; changes nothing. Default: nothing.
    fn prefetch_placement(&self, _s: &D::Space, _va: u64, _size: PageSize) {}

    /// Whether the frame at `pa` lies in memory the driver reserved at boot: the OS never returns
    /// such a frame to the buddy allocator (the driver frees its slot in `remove`).
    fn owns_frame(&self, _pa: u64) -> bool {
        false
    }

    /// Whether a page in the frame at `pa` must move out to a buddy frame before a second
    /// address space maps it (fork): the frame was placed by the page's own address and names
    /// one address space's page (Utopia's RestSeg slot and its TAR entry; shared pages live in
    /// the FlexSeg). A design that cannot map one frame twice at all refuses the second mapping
    /// in `update` instead (DIPTA). Default: no.
    fn moves_out_to_share(&self, _pa: u64) -> bool {
        false
    }

    /// The period, in bytes, with which placement depends on the virtual address: existing
    /// frames stay valid at a new virtual address only if it is congruent to the old one modulo
    /// this (SPARTA §5: partitions × routing granule). The OS chooses the address of a region it
    /// remaps or shares accordingly. Default: 0, no constraint.
    fn va_period(&self) -> u64 {
        0
    }
}

/// A policy that watches the hardware's walks and asks the OS to move pages (Utopia's PTW
/// tracking; next, ET's Leshy and Hawkeye-like samplers).
pub trait MigrationPolicy<D: Driver> {
    /// Called after a walk's plan was timed: the translation it found (`None` = page fault) and
    /// how many of its references DRAM served, as hardware counters in the PTE would see.
    fn walk_observed(&mut self, space: &mut D::Space, asid: u16, va: u64, t: Option<Translation>, dram_refs: u32);

    /// Pages the policy wants the OS to place again; the OS asks at every epoch and moves each to
    /// the frame [`FramePlacement::place_migrating`] then chooses (skipping a page unmapped or
    /// resized since).
    fn take_migrations(&mut self) -> Vec<MigrationRequest>;
}

/// A translation cache kept in memory, outside any MMU (POM-TLB's L3 TLB).
pub trait MemoryTlb<D: Driver> {
    /// The OS shoots down `[start, end)` of `asid` after changing or removing translations there;
    /// per-core structures are dropped by the MMUs ([`super::Tsvc`]), this drops the in-memory
    /// copies. Work is reported through `env` and charged to the shootdown.
    fn shootdown(&mut self, space: &mut D::Space, asid: u16, start: u64, end: u64, env: &mut TdbEnv);
}
