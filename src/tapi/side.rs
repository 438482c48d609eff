//! Side structures: translation structures the MMU looks up beside the L2 TLB, before or while
//! the page walk runs (Utopia's RestSeg walks, RMM's range TLB). When the lookup starts, whether
//! the walk waits for it and whether its hits enter the TLBs is timing data ([`SideTiming`]) the
//! MMU pipeline applies.

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
    /// Before the L1 TLB, for every access to a page the structure holds
    /// ([`SideLookup::holds`], an oracle: the simulator knows, hardware could not): the side
    /// lookup alone translates it and no TLB is looked up or filled. Other pages take the TLB
    /// path and are looked up as with [`SideStart::L2Miss`]. Utopia's MICRO'23 artifact
    /// (docs/utopia.md).
    BeforeL1,
}

/// How a side lookup overlaps the TLBs and the walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SideTiming {
    /// When it starts.
    pub start: SideStart,
    /// A walk started in parallel with the L2 TLB (`mmu.l2_parallel_walk`) still waits for the
    /// side lookup's miss. The walk is made only then either way; this is its timing.
    pub gates_walk: bool,
    /// A translation the side lookup finds after a TLB miss is filled into the L2 and L1 TLBs.
    /// False: side translations never enter the TLBs, so every L1 TLB miss of such a page looks
    /// the side structure up again. (With [`SideStart::BeforeL1`] held pages bypass the TLBs
    /// anyway; this covers the rest, e.g. the replay after a page fault.)
    pub fills_tlbs: bool,
}

impl Default for SideTiming {
    /// After the L2 TLB miss, not gating the walk, hits filled into the TLBs.
    fn default() -> Self {
        SideTiming { start: SideStart::L2Miss, gates_walk: false, fills_tlbs: true }
    }
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

    /// Whether the structure holds a translation of `va` (functional: no timing, no state
    /// changes). Asked before the L1 TLB on every access with [`SideStart::BeforeL1`], so it
    /// must be cheap and agree with [`SideLookup::side_lookup`]. Default: never.
    fn holds(&self, _space: &D::Space, _asid: u16, _va: u64) -> bool {
        false
    }
}
