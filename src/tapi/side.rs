//! Side structures: translation structures the MMU looks up beside the L2 TLB, before or while
//! the page walk runs (Utopia's RestSeg walks, RMM's range TLB). When the lookup starts and
//! whether the walk waits for it is timing data ([`SideTiming`]) the MMU pipeline applies.

use super::driver::Driver;
use super::walk::{Translation, WalkPlan};

/// When a side lookup starts, relative to the TLBs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SideStart {
    /// After an L2 TLB miss (or beside the L2 TLB lookup with `mmu.side_parallel`).
    #[default]
    L2Miss,
    /// On every L1 TLB miss, beside the L2 TLB lookup, whatever the L2 TLB answers (Utopia
    /// Fig. 17; needs `mmu.side_parallel`).
    L1Miss,
}

/// How a side lookup overlaps the TLBs and the walk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SideTiming {
    /// When it starts.
    pub start: SideStart,
    /// A walk started in parallel with the L2 TLB (`mmu.l2_parallel_walk`) still waits for the
    /// side lookup's miss. The walk is made only then either way; this is its timing.
    pub gates_walk: bool,
}

/// A side structure (opt-in capability, offered through [`Driver::side`]).
pub trait SideLookup<D: Driver> {
    /// Looks `va` up: appends the lookup's memory references to `plan` and returns the
    /// translation if the structure holds one.
    fn side_lookup(&mut self, space: &mut D::Space, wc: &mut D::WalkCache, asid: u16, va: u64, plan: &mut WalkPlan) -> Option<Translation>;

    /// When the lookup starts and whether the walk waits for it. Asked once per run.
    fn side_timing(&self) -> SideTiming {
        SideTiming::default()
    }
}
