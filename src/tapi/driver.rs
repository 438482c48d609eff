//! The MMU driver's core: what every translation architecture implements (its translation
//! database, a hardware walk, walk caches, leaf sizes), and the accessors through which a driver
//! offers the opt-in capabilities of [`super::side`] and [`super::policy`].
//!
//! Required: [`Driver::from_config`], [`Driver::new_walk_cache`], [`Driver::walk`],
//! [`Driver::invalidate_walk_cache`], [`Driver::leaf_sizes`] and the basic [`Tdb`] functions.
//! Everything else has a default. The simulator is generic over the driver: the design is chosen
//! once per run and the access loop is monomorphised for it, so a capability accessor that
//! returns `None` by default costs a design that does not override it nothing.

use super::memside::MemorySide;
use super::policy::{FramePlacement, MemoryTlb, MigrationPolicy};
use super::side::SideLookup;
use super::tdb::Tdb;
use super::walk::{SharedTlb, Translation, WalkPlan};
use crate::addr::PageSize;
use crate::error::Result;

/// A translation architecture.
pub trait Driver: Tdb + Sized + 'static {
    /// The driver's own configuration section (`arch.<name>`; a driver built on another, like
    /// Utopia's radix FlexSeg, holds that one's section too).
    type Config;

    /// Per-core walk caches (x86 PWCs, ECPT's CWCs, ...).
    type WalkCache;

    /// Builds the driver from its validated configuration section; `seed` is the run's seed (hash
    /// functions, random replacement).
    fn from_config(cfg: &Self::Config, seed: u64) -> Result<Self>;

    /// Walk caches for one core.
    fn new_walk_cache(&self) -> Self::WalkCache;

    /// The hardware walk for `va` in `space`: appends its references to `plan` and returns the
    /// translation, or `None` if nothing maps `va` (a page fault; the references made before
    /// discovering that are still in the plan).
    fn walk(&mut self, space: &mut Self::Space, wc: &mut Self::WalkCache, asid: u16, va: u64, plan: &mut WalkPlan) -> Option<Translation>;

    /// The walk as a core's MMU runs it, with the core's L2 TLB at hand for a driver that keeps
    /// entries of its own there (a nested MMU whose stage-2 entries share it, `host.ntlb.in_l2_tlb`).
    /// Default: [`Driver::walk`], leaving the L2 TLB alone.
    #[inline(always)]
    fn walk_beside<T: SharedTlb>(
        &mut self,
        space: &mut Self::Space,
        wc: &mut Self::WalkCache,
        _l2: &mut T,
        asid: u16,
        va: u64,
        plan: &mut WalkPlan,
    ) -> Option<Translation> {
        self.walk(space, wc, asid, va, plan)
    }

    /// Drops walk-cache entries of `asid` that may cover `[start, end)` (TLB shootdown).
    fn invalidate_walk_cache(&self, wc: &mut Self::WalkCache, asid: u16, start: u64, end: u64);

    /// Page sizes the OS may map with this driver, smallest first.
    fn leaf_sizes(&self) -> &[PageSize];

    /// The first virtual address above the user half of the address space the structure
    /// translates: x86-64 4-level paging 2^47 (addresses up to 2^64 - 2^47 are non-canonical and
    /// the rest are the kernel's). The simulator refuses an access at or above it instead of
    /// letting its high bits alias a lower page. Default: 4-level x86-64.
    fn user_va_limit(&self) -> u64 {
        1 << 47
    }

    /// Whether a page of `size` can be mapped at `va` right now (customizable; e.g. FPT's L2L1
    /// flattening cannot hold 2 MiB leaves). `Err` carries the reason, counted by the OS.
    fn can_map(&self, _va: u64, size: PageSize) -> Result<(), &'static str> {
        if self.leaf_sizes().contains(&size) {
            Ok(())
        } else {
            Err("page size not supported by the translation structure")
        }
    }

    /// A host-side hint that `va` of `space` may be walked soon: the driver may prefetch the host
    /// memory its walk would read ([`crate::mem::host_prefetch`]) and returns the simulated
    /// physical address of the last entry that walk reads, if it knows it without side effects, so
    /// the caller can prefetch the simulated caches' sets too. Must change no simulated state and
    /// no counter. Default: nothing.
    #[inline(always)]
    fn prefetch(&self, _space: &Self::Space, _va: u64) -> Option<u64> {
        None
    }

    /// Whether the walk ends with references that depend on the translated frame, so the host
    /// prefetch has a second stage ([`Driver::prefetch_frame`]): the loop then looks the next
    /// access's frame up in the ground truth. Default: false, which costs the loop nothing.
    const PREFETCHES_FRAME: bool = false;

    /// The second stage of the host prefetch, run a few accesses ahead (the first,
    /// [`Driver::prefetch`], ran about as many accesses earlier and brought the walk's entries
    /// into the host's cache; the distances are `sim::PREFETCH_AHEAD`'s): `pa` is the
    /// physical address the OS mapped the access to, for a driver whose walk goes on from there
    /// (a nested driver's host walk of the guest frame). Prefetches what that part of the walk
    /// reads and returns the simulated address of its last entry, as `prefetch` does. Must change
    /// no simulated state. Default: nothing.
    #[inline(always)]
    fn prefetch_frame(&self, _pa: u64) -> Option<u64> {
        None
    }

    /// Whether [`Driver::frame_hint`] answers: the host prefetch's second stage then takes the
    /// frame from it instead of from the ground truth. Default: false.
    const HINTS_FRAME: bool = false;

    /// The physical address `va` maps to as the translation structure itself holds it, read
    /// host-side from the entry [`Driver::prefetch`] brought in a few accesses earlier (`None` if
    /// not mapped there): for a nested driver's second stage, the guest frame its host walk
    /// starts from ([`Driver::prefetch_frame`]). A hint like the prefetch: must change no
    /// simulated state and no counter, and a wrong answer costs only host time. Default: nothing.
    #[inline(always)]
    fn frame_hint(&self, _space: &Self::Space, _va: u64) -> Option<u64> {
        None
    }

    /// Whether the host prefetch has a second stage that needs only the address
    /// ([`Driver::prefetch_late`]). Default: false, which costs the loop nothing.
    const PREFETCHES_LATE: bool = false;

    /// A second stage of the host prefetch (a few accesses ahead, as [`Driver::prefetch_frame`]),
    /// for a walk whose entries name further host memory: [`Driver::prefetch`] brought those
    /// entries in earlier, so
    /// reading them now does not wait, and what they name can be prefetched (ECPT: the lines its
    /// slots point to). Must change no simulated state and no counter. Default: nothing.
    #[inline(always)]
    fn prefetch_late(&self, _space: &Self::Space, _va: u64) {}

    /// The machine-physical translation behind translation `t` of `va` that the OS installed:
    /// `t` itself natively; a nested driver composes it with the host's mapping of the
    /// guest-physical page. Checked mode compares every walk and TLB hit with this. Default: `t`.
    #[inline(always)]
    fn machine_translation(&self, _va: u64, t: Translation) -> Option<Translation> {
        Some(t)
    }

    /// Background work of the driver's own at every epoch, after the OS's (a nested driver's
    /// hypervisor runs its khugepaged and migrations); `now_ms` and `now_cycles` are the simulated
    /// time. Default: nothing.
    fn tick(&mut self, _now_ms: f64, _now_cycles: f64) -> Result<()> {
        Ok(())
    }

    /// A counter the driver bumps when translations cached by the MMUs of every address space
    /// may have gone stale without an OS shootdown — a hypervisor remapping guest memory (KVM
    /// flushes the whole VM's TLBs then). Each core flushes its TLBs before its next access when
    /// it sees the counter change; the driver keeps its own walk caches coherent. Default: `None`
    /// (never), which costs the access path nothing.
    #[inline(always)]
    fn generation(&self) -> Option<u64> {
        None
    }

    /// Translations present now by size, when the driver forms translations larger than the
    /// pages the OS mapped (arm64's contiguous groups: 16 × 4 KiB as one 64 KiB translation);
    /// None (the default) when every translation is one OS page, as the ground truth counts them.
    fn translations_by_size(&self) -> Option<[u64; PageSize::COUNT]> {
        None
    }

    /// Driver-specific metrics for the report (JSON object; empty by default).
    fn metrics(&self) -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::new()
    }

    /// Restarts the event counters [`metrics`](Self::metrics) reports (walks, probes, hits,
    /// kicks, placements) when warm-up ends, as the core's and the OS's restart; gauges of state
    /// (live entries, table bytes, peaks) stay. Default: nothing to restart.
    fn restart_metrics(&mut self) {}

    /// A structure the MMU looks up beside the L2 TLB (Utopia's RestSeg walk, RMM's range TLB).
    /// Default: none.
    #[inline(always)]
    fn side(&mut self) -> Option<&mut dyn SideLookup<Self>> {
        None
    }

    /// Where the frames of new pages go, when the driver decides it (Utopia's RestSegs).
    /// Default: none (any buddy frame).
    #[inline(always)]
    fn placement(&mut self) -> Option<&mut dyn FramePlacement<Self>> {
        None
    }

    /// A policy that watches walks and asks the OS to move pages (Utopia's PTW-tracking
    /// migration). Default: none.
    #[inline(always)]
    fn migration(&mut self) -> Option<&mut dyn MigrationPolicy<Self>> {
        None
    }

    /// A translation cache the driver keeps in memory, outside any MMU (POM-TLB), which the OS's
    /// shootdowns must invalidate. Default: none.
    #[inline(always)]
    fn memory_tlb(&mut self) -> Option<&mut dyn MemoryTlb<Self>> {
        None
    }

    /// Memory-side translation (SPARTA's partitions, DIPTA's sets): accelerator requests are
    /// routed by virtual address and translated next to memory. Default: none (requesters
    /// translate before they send, conventionally).
    #[inline(always)]
    fn memory_side(&mut self) -> Option<&mut dyn MemorySide> {
        None
    }
}
