//! The translation pipeline of one core: L1 TLBs → L2 TLB ∥ side structure → the driver's walk
//! timed through the caches → page fault and replay, with the fills and the overlap rules in one
//! place.
//!
//! Timing, in cycles past the L1 TLB (`L` = L2 TLB latency, `S` = side lookup, `W` = walk):
//! - L1 hit: 0. L2 hit: `L` (with an early side lookup that also hits: `min(L, S)`).
//! - Side hit: `max(L, S)` when the side lookup runs beside the L2 TLB, `L + S` after its miss.
//! - Walk: it starts at the L1 miss with [`Overlap::parallel_walk`] (after the side lookup's miss
//!   if [`Overlap::side_gates_walk`]), otherwise when the L2 TLB and the side lookup have both
//!   missed; the translation is ready at `max(both missed, walk start + W)`.
//! - Page fault: the OS's work is charged to the core (its clock advances); the access is
//!   replayed from the L2 TLB miss — side lookup, then walk, one after the other — and the
//!   replay's latency `S + W` (or `W`) is added.
//! - A side structure that starts before the L1 TLB ([`SideStart::BeforeL1`]) translates the
//!   pages it holds alone: `S`, no TLB looked up or filled. Other pages take the path above.
//! - A side hit fills the L2 and L1 TLBs unless the driver's [`SideTiming::fills_tlbs`] is off.
//!
//! What the pipeline checks and whether it models a perfect TLB are compile-time [`Mode`]s, so the
//! benchmark build pays nothing for checked mode.

use super::{time_walk, TlbStats, Tlbs, WalkStats, WalkerEntry};
use crate::addr::PageSize;
use crate::error::{Error, Result};
use crate::mem::{Level, MemHierarchy};
use crate::tapi::{Driver, Shootdown, SideStart, SideTiming, Translation, Tsvc, WalkPlan};

/// How the pipeline's steps overlap: configuration data, read once per run from `mmu.*` and
/// the driver's [`SideTiming`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Overlap {
    /// The walk starts at the L1 TLB miss, beside the L2 TLB (`mmu.l2_parallel_walk`).
    pub parallel_walk: bool,
    /// The side lookup runs beside the L2 TLB rather than after its miss (`mmu.side_parallel`).
    pub side_parallel: bool,
    /// The side lookup starts on every L1 TLB miss, whatever the L2 TLB answers.
    pub side_early: bool,
    /// A parallel walk still waits for the side lookup's miss.
    pub side_gates_walk: bool,
    /// Pages the side structure holds are translated by it before the L1 TLB, bypassing the TLBs.
    pub side_first: bool,
    /// Side hits are not filled into the TLBs.
    pub side_no_fill: bool,
}

impl Overlap {
    /// The overlap of a machine with `parallel_walk` and `side_parallel` for a driver whose side
    /// structure (if any) times as `side` says.
    pub fn new(parallel_walk: bool, side_parallel: bool, side: Option<SideTiming>) -> Overlap {
        Overlap {
            parallel_walk,
            side_parallel,
            side_early: side_parallel && side.is_some_and(|t| t.start == SideStart::L1Miss),
            side_gates_walk: side.is_some_and(|t| t.gates_walk),
            side_first: side.is_some_and(|t| t.start == SideStart::BeforeL1),
            side_no_fill: side.is_some_and(|t| !t.fills_tlbs),
        }
    }
}

/// What the pipeline compares and models, fixed at compile time.
pub trait Mode {
    /// Compare every TLB hit and walk with the ground truth (`sim.checked`).
    const CHECKED: bool;
    /// Every translation hits the L1 TLB (`mmu.perfect_tlb`).
    const PERFECT: bool;
}

/// The timed pipeline, no checks (benchmarks, studies).
pub struct Fast;
/// The timed pipeline, every translation checked against the OS's ground truth.
pub struct Checked;
/// A perfect TLB: the ground truth answers every access at no cost.
pub struct Perfect;

impl Mode for Fast {
    const CHECKED: bool = false;
    const PERFECT: bool = false;
}
impl Mode for Checked {
    const CHECKED: bool = true;
    const PERFECT: bool = false;
}
impl Mode for Perfect {
    const CHECKED: bool = false;
    const PERFECT: bool = true;
}

/// What the pipeline asks of the system it translates for (the OS, or a test's stand-in).
pub trait TranslationHost<D: Driver> {
    /// The driver and the structures of address space `asid`.
    fn tables(&mut self, asid: u16) -> (&mut D, &mut D::Space);
    /// Handles a page fault at `va` of `asid` taken at cycle `now`: returns the translation the OS
    /// installed and the cycles its work (trap included) costs the faulting core.
    fn fault(&mut self, asid: u16, va: u64, now: f64) -> Result<(Translation, f64)>;
    /// The driver and the shootdowns not yet applied by the MMUs (the faulting core applies
    /// them at once).
    fn pending(&self) -> (&D, &[Shootdown]);
    /// The ground-truth translation of `va`.
    fn truth(&self, asid: u16, va: u64) -> Option<Translation>;
    /// Cycles an access through `t` at cycle `now` waits for a page being copied (0 if none).
    fn migration_stall(&mut self, asid: u16, va: u64, t: Translation, now: f64) -> u32;
}

/// Per-core counters of the pipeline.
#[derive(Clone, Debug, Default)]
pub struct MmuStats {
    /// TLB counters.
    pub tlb: TlbStats,
    /// Walker counters.
    pub walk: WalkStats,
    /// Side-lookup counters (same shape as walks: lookups, latency, references).
    pub side: WalkStats,
    /// Side lookups that found the translation.
    pub side_hits: u64,
    /// Page faults taken.
    pub faults: u64,
    /// Cycles of OS work charged for them.
    pub os_cycles: f64,
    /// Walks and TLB hits compared with the ground truth.
    pub checked: u64,
}

/// One core's translation hardware: TLBs, the driver's walk caches, and their counters.
pub struct CoreMmu<D: Driver> {
    /// L1 and L2 TLBs.
    pub tlbs: Tlbs,
    /// The driver's walk caches.
    pub wc: D::WalkCache,
    /// Counters.
    pub stats: MmuStats,
    /// The driver's [`Driver::generation`] these TLBs are coherent with.
    generation: u64,
}

impl<D: Driver> CoreMmu<D> {
    /// A core's MMU with empty TLBs and walk caches.
    pub fn new(tlbs: Tlbs, driver: &D) -> CoreMmu<D> {
        CoreMmu { tlbs, wc: driver.new_walk_cache(), stats: MmuStats::default(), generation: driver.generation().unwrap_or(0) }
    }

    /// Fills the L1 TLB that holds `t`'s size (L1 D-TLBs or the I-TLB); with `pieces`, a size no
    /// L1 holds goes in as the piece of the largest smaller size one holds that covers `va`.
    #[inline]
    fn fill_l1(&mut self, asid: u16, va: u64, t: Translation, fetch: bool, pieces: bool) {
        let l1s = if fetch { std::slice::from_mut(&mut self.tlbs.l1i) } else { &mut self.tlbs.l1d[..] };
        // The L1 holding the size, else one caching its entry size (a contiguous group's piece).
        if let Some(i) = l1s.iter().position(|l| l.holds(t.size)).or_else(|| l1s.iter().position(|l| l.takes(t.size))) {
            l1s[i].insert(asid, va, t);
        } else if pieces {
            let piece = PageSize::ALL.iter().rev().copied().find(|&s| s < t.size && l1s.iter().any(|l| l.holds(s)));
            if let Some(piece) = piece {
                let l1 = l1s.iter_mut().find(|l| l.holds(piece)).expect("an L1 TLB holds the piece size");
                l1.insert(asid, va, Translation { pbase: t.paddr(va) & !piece.offset_mask(), size: piece });
            }
        }
    }

    /// Checks that `t` gives `va` the frame the OS maps it to. Only the frame of the accessed
    /// address is compared: a TLB entry may be a piece of a larger page or cover a coalesced
    /// group of smaller ones, and every address it serves is checked when it is used.
    fn check<H: TranslationHost<D>>(&mut self, host: &H, asid: u16, va: u64, t: Translation, what: &str) -> Result<()> {
        self.stats.checked += 1;
        let truth = host.truth(asid, va);
        if truth.map(|g| g.paddr(va)) != Some(t.paddr(va)) {
            return Err(Error::Check(format!(
                "{what} for ASID {asid} va {va:#x} gave {:#x} ({}), the OS maps {}",
                t.paddr(va),
                t.size,
                truth.map(|g| format!("{:#x} ({})", g.paddr(va), g.size)).unwrap_or_else(|| "nothing".into())
            )));
        }
        Ok(())
    }
}

impl<D: Driver> Tsvc<D> for CoreMmu<D> {
    fn switch(&mut self, driver: &D, from: u16, _to: u16, flush: bool) {
        if flush {
            self.tlbs.flush();
            driver.invalidate_walk_cache(&mut self.wc, from, 0, u64::MAX);
        }
    }

    fn flush(&mut self, driver: &D, asid: u16) {
        self.tlbs.invalidate(asid, 0, u64::MAX);
        driver.invalidate_walk_cache(&mut self.wc, asid, 0, u64::MAX);
    }

    #[inline]
    fn shootdown(&mut self, driver: &D, sd: &Shootdown) {
        if sd.tlb {
            self.tlbs.invalidate(sd.asid, sd.start, sd.end);
        }
        driver.invalidate_walk_cache(&mut self.wc, sd.asid, sd.start, sd.end);
    }
}

/// The pipeline's shared state: the walk plan buffer (reused, so the hot path does not
/// allocate), where walker references enter the caches, and the overlap rules.
pub struct Pipeline {
    plan: WalkPlan,
    /// Where walker references enter the caches.
    pub entry: WalkerEntry,
    /// The overlap rules.
    pub overlap: Overlap,
    /// Fill unheld sizes into the L1 TLBs as pieces (`mmu.l1_pieces`).
    pub l1_pieces: bool,
}

impl Pipeline {
    /// A pipeline with `entry`, `overlap` and `l1_pieces`.
    pub fn new(entry: WalkerEntry, overlap: Overlap, l1_pieces: bool) -> Pipeline {
        Pipeline { plan: WalkPlan::default(), entry, overlap, l1_pieces }
    }

    /// [`Pipeline::translate`] of a load or store of a mapped page where `translate` would only
    /// read a translation: the most recent entry of the L1 D-TLB probed first (no check, no side
    /// lookup first, no TLB flush pending from the driver), or with a perfect TLB the ground
    /// truth. The same translation, the same count, no cycles. `None` (nothing counted)
    /// otherwise; the caller then calls `translate`.
    #[inline(always)]
    pub fn translate_rehit<D: Driver, H: TranslationHost<D>, M: Mode>(
        &self,
        host: &H,
        mmu: &mut CoreMmu<D>,
        asid: u16,
        va: u64,
    ) -> Option<Translation> {
        if M::PERFECT {
            return host.truth(asid, va);
        }
        if M::CHECKED || self.overlap.side_first {
            return None;
        }
        if host.pending().0.generation().is_some_and(|g| g != mmu.generation) {
            return None;
        }
        let t = mmu.tlbs.l1d_rehit(asid, va)?;
        mmu.stats.tlb.l1d_lookups += 1;
        Some(t)
    }

    /// Translates `va` of `asid` for core `cid` whose clock is `now` (advanced by the OS work of
    /// any page fault); returns the translation and the cycles spent past the L1 TLB.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn translate<D: Driver, H: TranslationHost<D>, M: Mode>(
        &mut self,
        host: &mut H,
        mem: &mut MemHierarchy,
        mmu: &mut CoreMmu<D>,
        cid: usize,
        asid: u16,
        va: u64,
        fetch: bool,
        now: &mut f64,
    ) -> Result<(Translation, u32)> {
        if M::PERFECT {
            let t = match host.truth(asid, va) {
                Some(t) => t,
                None => Self::fault(host, mmu, asid, va, now)?,
            };
            return Ok((t, 0));
        }
        if let Some(g) = host.pending().0.generation() {
            if g != mmu.generation {
                mmu.generation = g;
                mmu.tlbs.flush();
            }
        }
        // A page the side structure holds is translated by it alone, before the L1 TLB.
        if self.overlap.side_first {
            let (driver, space) = host.tables(asid);
            if driver.side().is_some_and(|side| side.holds(space, asid, va)) {
                let (r, sl) = self.side_lookup::<D, H, M>(host, mem, mmu, cid, asid, va)?;
                let Some(t) = r else {
                    return Err(Error::Check(format!("side structure holds ASID {asid} va {va:#x} but its lookup missed")));
                };
                if M::CHECKED {
                    mmu.check(host, asid, va, t, "side lookup before the L1 TLB")?;
                }
                let stall = host.migration_stall(asid, va, t, *now);
                return Ok((t, sl + stall));
            }
        }
        let s = &mut mmu.stats.tlb;
        let hit = if fetch {
            s.l1i_lookups += 1;
            mmu.tlbs.l1i.lookup(asid, va)
        } else {
            s.l1d_lookups += 1;
            mmu.tlbs.l1d_lookup(asid, va)
        };
        if let Some(t) = hit {
            if M::CHECKED {
                mmu.check(host, asid, va, t, "L1 TLB hit")?;
                if !fetch && mmu.tlbs.other_l1d_covers(asid, va) {
                    return Err(Error::Check(format!("two L1 D-TLBs hold ASID {asid} va {va:#x}")));
                }
            }
            return Ok((t, 0));
        }
        if fetch {
            s.l1i_misses += 1;
        } else {
            s.l1d_misses += 1;
        }
        s.l2_lookups += 1;
        let l2lat = mmu.tlbs.l2.latency;
        let has_side = host.tables(asid).0.side().is_some();
        // A side structure that starts with the L2 TLB lookup (Utopia Fig. 17) runs whatever the
        // L2 TLB answers: its references reach the caches either way.
        let mut early =
            if has_side && self.overlap.side_early { Some(self.side_lookup::<D, H, M>(host, mem, mmu, cid, asid, va)?) } else { None };
        if let Some(t) = mmu.tlbs.l2.lookup(asid, va) {
            if M::CHECKED {
                mmu.check(host, asid, va, t, "L2 TLB hit")?;
            }
            mmu.stats.tlb.l1_misses_by_size[t.size.index()] += 1;
            mmu.fill_l1(asid, va, t, fetch, self.l1_pieces);
            // Whichever of the two finds the translation first answers.
            let lat = match early {
                Some((Some(ts), sl)) => {
                    if M::CHECKED && ts != t {
                        return Err(Error::Check(format!("side lookup of ASID {asid} va {va:#x} disagrees with the L2 TLB hit")));
                    }
                    l2lat.min(sl)
                }
                _ => l2lat,
            };
            return Ok((t, lat));
        }
        mmu.stats.tlb.l2_misses += 1;
        let ov = self.overlap;
        let mut cycles = 0u32;
        let mut first = true;
        // After a page fault the access is replayed from the L2 TLB miss: side lookup, then walk.
        loop {
            // `before_walk`: when the L2 TLB and the side lookup have both said "not here";
            // `walk_start`: when the walk begins.
            let mut before_walk = if first { l2lat } else { 0 };
            let mut walk_start = if first && ov.parallel_walk { 0 } else { before_walk };
            if has_side {
                let (r, sl) = match early.take() {
                    Some(done) => done,
                    None => self.side_lookup::<D, H, M>(host, mem, mmu, cid, asid, va)?,
                };
                let side_done = if first && !ov.side_parallel { l2lat + sl } else { sl };
                before_walk = before_walk.max(side_done);
                walk_start = if first && ov.parallel_walk {
                    if ov.side_gates_walk {
                        side_done
                    } else {
                        0
                    }
                } else {
                    before_walk
                };
                if let Some(t) = r {
                    if M::CHECKED {
                        mmu.check(host, asid, va, t, "side lookup")?;
                    }
                    mmu.stats.tlb.l1_misses_by_size[t.size.index()] += 1;
                    if !ov.side_no_fill {
                        mmu.tlbs.l2.insert(asid, va, t);
                        mmu.fill_l1(asid, va, t, fetch, self.l1_pieces);
                    }
                    let stall = host.migration_stall(asid, va, t, *now);
                    return Ok((t, cycles + before_walk + stall));
                }
            }
            let plan = &mut self.plan;
            plan.clear();
            plan.checked = M::CHECKED;
            let (driver, space) = host.tables(asid);
            let r = driver.walk_beside(space, &mut mmu.wc, &mut mmu.tlbs.l2, asid, va, plan);
            if let Some(v) = plan.violation {
                return Err(Error::Check(format!("walk of ASID {asid} va {va:#x}: {v}")));
            }
            let dram_before = mmu.stats.walk.refs_by_level[Level::Dram as usize];
            let wl = time_walk(plan, mem, cid, self.entry, &mut mmu.stats.walk);
            let (driver, space) = host.tables(asid);
            if let Some(m) = driver.migration() {
                let dram = (mmu.stats.walk.refs_by_level[Level::Dram as usize] - dram_before) as u32;
                m.walk_observed(space, asid, va, r, dram);
            }
            cycles += before_walk.max(walk_start + wl);
            first = false;
            match r {
                Some(t) => {
                    if M::CHECKED {
                        mmu.check(host, asid, va, t, "page walk")?;
                    }
                    mmu.stats.tlb.l1_misses_by_size[t.size.index()] += 1;
                    mmu.stats.tlb.l2_misses_by_size[t.size.index()] += 1;
                    mmu.tlbs.l2.insert(asid, va, t);
                    mmu.fill_l1(asid, va, t, fetch, self.l1_pieces);
                    let stall = host.migration_stall(asid, va, t, *now);
                    return Ok((t, cycles + stall));
                }
                None => {
                    Self::fault(host, mmu, asid, va, now)?;
                }
            }
        }
    }

    /// Runs and times the driver's side lookup; returns what it found and its latency. The caller
    /// checks the translation it uses.
    #[inline]
    fn side_lookup<D: Driver, H: TranslationHost<D>, M: Mode>(
        &mut self,
        host: &mut H,
        mem: &mut MemHierarchy,
        mmu: &mut CoreMmu<D>,
        cid: usize,
        asid: u16,
        va: u64,
    ) -> Result<(Option<Translation>, u32)> {
        let plan = &mut self.plan;
        plan.clear();
        plan.checked = M::CHECKED;
        let (driver, space) = host.tables(asid);
        let r = match driver.side() {
            Some(side) => side.side_lookup(space, &mut mmu.wc, asid, va, plan),
            None => None,
        };
        if let Some(v) = plan.violation {
            return Err(Error::Check(format!("side lookup of ASID {asid} va {va:#x}: {v}")));
        }
        let sl = time_walk(plan, mem, cid, self.entry, &mut mmu.stats.side);
        if r.is_some() {
            mmu.stats.side_hits += 1;
        }
        Ok((r, sl))
    }

    /// Takes a page fault: the OS maps the page and its work is charged to this core, whose TLBs
    /// and walk caches see the shootdowns the fault caused before it uses them again (other
    /// cores get them when its chunk ends).
    fn fault<D: Driver, H: TranslationHost<D>>(
        host: &mut H,
        mmu: &mut CoreMmu<D>,
        asid: u16,
        va: u64,
        now: &mut f64,
    ) -> Result<Translation> {
        let (t, os) = host.fault(asid, va, *now)?;
        mmu.stats.faults += 1;
        mmu.stats.os_cycles += os;
        *now += os;
        let (driver, pending) = host.pending();
        for sd in pending {
            mmu.shootdown(driver, sd);
        }
        Ok(t)
    }
}

/// One test per timing rule, on a stand-in driver whose walk and side lookup cost fixed cycles
/// and make no memory references, so every latency is computed by hand from the rules above.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::PageSize;
    use crate::mem::MemConfig;
    use crate::mmu::MmuConfig;
    use crate::tapi::flat::{Flat, FlatSpace, FLAT_WALK_CYCLES};

    /// L2 TLB latency of the default machine (Utopia Table 1).
    const L: u32 = 12;
    /// The stand-in walk's latency.
    const W: u32 = FLAT_WALK_CYCLES;
    /// The fault's OS cycles.
    const F: f64 = 1000.0;

    /// The OS stand-in: a fault maps the page at `0x1000_0000 + va` and costs `F` cycles.
    struct Host {
        d: Flat,
        s: FlatSpace,
        pending: Vec<Shootdown>,
    }

    impl TranslationHost<Flat> for Host {
        fn tables(&mut self, _: u16) -> (&mut Flat, &mut FlatSpace) {
            (&mut self.d, &mut self.s)
        }
        fn fault(&mut self, _: u16, va: u64, _: f64) -> Result<(Translation, f64)> {
            let pbase = 0x1000_0000 + (va & !0xfff);
            self.s.pages.insert(va >> 12, pbase);
            Ok((Translation { pbase, size: PageSize::K4 }, F))
        }
        fn pending(&self) -> (&Flat, &[Shootdown]) {
            (&self.d, &self.pending)
        }
        fn truth(&self, _: u16, va: u64) -> Option<Translation> {
            if let Some(&pbase) = self.s.huge.get(&(va >> 21)) {
                return Some(Translation { pbase, size: PageSize::M2 });
            }
            self.s.pages.get(&(va >> 12)).map(|&pbase| Translation { pbase, size: PageSize::K4 })
        }
        fn migration_stall(&mut self, _: u16, _: u64, _: Translation, _: f64) -> u32 {
            0
        }
    }

    struct Rig {
        host: Host,
        mem: MemHierarchy,
        mmu: CoreMmu<Flat>,
        pipe: Pipeline,
        now: f64,
    }

    /// A core with the default TLBs; `side`: the side structure's latency and timing, if any.
    fn rig(parallel_walk: bool, side_parallel: bool, side: Option<(u32, SideTiming)>) -> Rig {
        rig_with(&MmuConfig::default(), parallel_walk, side_parallel, side)
    }

    fn rig_with(cfg: &MmuConfig, parallel_walk: bool, side_parallel: bool, side: Option<(u32, SideTiming)>) -> Rig {
        let d = Flat::with_side(side);
        let mmu = CoreMmu::new(Tlbs::new(cfg), &d);
        let overlap = Overlap::new(parallel_walk, side_parallel, side.map(|s| s.1));
        Rig {
            host: Host { d, s: FlatSpace::default(), pending: Vec::new() },
            mem: MemHierarchy::new(&MemConfig::default(), 1, 2.0),
            mmu,
            pipe: Pipeline::new(WalkerEntry::L1, overlap, cfg.l1_pieces),
            now: 0.0,
        }
    }

    impl Rig {
        fn map(&mut self, va: u64) {
            self.host.s.pages.insert(va >> 12, 0x4000_0000 + (va & !0xfff));
        }
        fn map_side(&mut self, va: u64) {
            self.map(va);
            self.host.s.side.insert(va >> 12, 0x4000_0000 + (va & !0xfff));
        }
        fn go<M: Mode>(&mut self, va: u64) -> Result<(Translation, u32)> {
            self.pipe.translate::<Flat, Host, M>(&mut self.host, &mut self.mem, &mut self.mmu, 0, 1, va, false, &mut self.now)
        }
        /// Cycles past the L1 TLB of one access.
        fn cycles(&mut self, va: u64) -> u32 {
            self.go::<Checked>(va).unwrap().1
        }
        /// Drops the L1 TLB entries so the next access is looked up in the L2 TLB.
        fn flush_l1(&mut self) {
            for t in &mut self.mmu.tlbs.l1d {
                t.flush();
            }
        }
    }

    const VA: u64 = 0x7000_1000;

    /// `translate_rehit` answers as `translate` does wherever it answers, with the same counts
    /// (two cores replay the same accesses, one always through `translate`); it answers L1 D-TLB
    /// re-hits in the fast mode and mapped pages with a perfect TLB, and nothing in checked mode
    /// or where a side lookup comes before the L1 TLB.
    #[test]
    fn rehit_answers_as_translate_does() {
        fn replay<M: Mode>(side: Option<(u32, SideTiming)>) -> usize {
            let (mut a, mut b) = (rig(true, true, side), rig(true, true, side));
            for r in [&mut a, &mut b] {
                for p in 0..4 {
                    r.map(VA + p * 4096);
                }
                r.map_side(VA + 8 * 4096);
            }
            let page = |p: u64| VA + p * 4096;
            let vas = [VA, VA + 8, VA + 64, page(1), page(1) + 8, VA, VA + 16, page(8), page(8) + 8, page(2) + 64, page(12), page(12) + 8];
            let mut rehits = 0;
            for va in vas {
                let ta = a.go::<M>(va).unwrap();
                let tb = match b.pipe.translate_rehit::<Flat, Host, M>(&b.host, &mut b.mmu, 1, va) {
                    Some(t) => {
                        rehits += 1;
                        (t, 0)
                    }
                    None => b.go::<M>(va).unwrap(),
                };
                assert_eq!(ta, tb, "{va:#x}");
                assert_eq!(format!("{:?}", a.mmu.stats), format!("{:?}", b.mmu.stats), "{va:#x}");
            }
            rehits
        }
        assert_eq!(replay::<Fast>(None), 6, "the L1 re-hits: VA + 8, + 64, page 1 + 8, VA + 16, page 8 + 8, page 12 + 8");
        assert_eq!(replay::<Perfect>(None), 11, "every access but the fault of page 12");
        assert_eq!(replay::<Checked>(None), 0);
        let before_l1 = SideTiming { start: SideStart::BeforeL1, ..SideTiming::default() };
        assert_eq!(replay::<Fast>(Some((5, before_l1))), 0);
    }

    #[test]
    fn l1_hit_costs_nothing_and_l2_hit_costs_the_l2_latency() {
        let mut r = rig(true, true, None);
        r.map(VA);
        r.cycles(VA);
        assert_eq!(r.cycles(VA + 8), 0, "L1 hit");
        r.flush_l1();
        assert_eq!(r.cycles(VA), L, "L2 hit");
        assert_eq!(r.mmu.stats.tlb.l2_lookups, 2);
    }

    #[test]
    fn parallel_walk_overlaps_the_l2_lookup_and_serial_walk_follows_it() {
        let mut r = rig(true, true, None);
        r.map(VA);
        assert_eq!(r.cycles(VA), L.max(W), "max(L, W)");
        let mut r = rig(false, true, None);
        r.map(VA);
        assert_eq!(r.cycles(VA), L + W, "L + W");
        assert_eq!(r.mmu.stats.walk.walks, 1);
    }

    #[test]
    fn side_hit_beside_or_after_the_l2_tlb() {
        let timing = SideTiming::default();
        for (s, side_parallel, want) in [(20, true, 20), (5, true, L), (20, false, L + 20)] {
            let mut r = rig(true, side_parallel, Some((s, timing)));
            r.map_side(VA);
            assert_eq!(r.cycles(VA), want, "S = {s}, side_parallel = {side_parallel}");
            assert_eq!((r.mmu.stats.side_hits, r.mmu.stats.walk.walks), (1, 0), "the side hit ends the translation");
        }
    }

    #[test]
    fn side_miss_then_walk_overlapped_gated_or_serial() {
        let s = 20;
        let free = SideTiming { start: SideStart::L2Miss, gates_walk: false, ..SideTiming::default() };
        let gated = SideTiming { start: SideStart::L2Miss, gates_walk: true, ..SideTiming::default() };
        for (parallel_walk, timing, want, rule) in [
            (true, free, L.max(s).max(W), "max(L, S, W)"),
            (true, gated, L.max(s).max(s + W), "max(L, S, S + W)"),
            (false, free, L.max(s) + W, "max(L, S) + W"),
        ] {
            let mut r = rig(parallel_walk, true, Some((s, timing)));
            r.map(VA); // in the page table, not in the side structure
            assert_eq!(r.cycles(VA), want, "{rule}");
            assert_eq!((r.mmu.stats.side.walks, r.mmu.stats.walk.walks), (1, 1));
        }
    }

    #[test]
    fn early_side_lookup_races_the_l2_tlb() {
        let early = SideTiming { start: SideStart::L1Miss, gates_walk: false, ..SideTiming::default() };
        for (s, want) in [(5, 5), (20, L)] {
            let mut r = rig(true, true, Some((s, early)));
            r.map_side(VA);
            r.cycles(VA);
            r.flush_l1();
            assert_eq!(r.cycles(VA), want, "min(L, S) with S = {s}");
            assert_eq!(r.mmu.stats.side.walks, 2, "the early lookup runs on the L2 hit too");
        }
        // Without side_parallel it cannot start early.
        let mut r = rig(true, false, Some((5, early)));
        r.map_side(VA);
        r.cycles(VA);
        r.flush_l1();
        assert_eq!(r.cycles(VA), L);
        assert_eq!(r.mmu.stats.side.walks, 1);
    }

    #[test]
    fn side_first_translates_held_pages_alone_and_bypasses_the_tlbs() {
        let first = SideTiming { start: SideStart::BeforeL1, fills_tlbs: false, ..SideTiming::default() };
        let (s, other) = (20, VA + (1 << 20));
        let mut r = rig(true, true, Some((s, first)));
        r.map_side(VA);
        r.map(other); // in the page table only
        for k in 0..3 {
            assert_eq!(r.cycles(VA + 8 * k), s, "S on every access: no TLB holds the page");
        }
        let t = &r.mmu.stats.tlb;
        assert_eq!((t.l1d_lookups, t.l2_lookups, r.mmu.stats.side.walks, r.mmu.stats.side_hits), (0, 0, 3, 3), "no TLB looked up");
        // A page the side structure does not hold takes the TLB path; the side lookup runs on its
        // L2 TLB miss, beside the L2 TLB (as `L2Miss` with side_parallel), then hits the L1 TLB.
        assert_eq!(r.cycles(other), L.max(s).max(W), "max(L, S, W)");
        assert_eq!(r.cycles(other + 8), 0, "L1 hit");
        assert_eq!((r.mmu.stats.tlb.l1d_lookups, r.mmu.stats.side.walks, r.mmu.stats.walk.walks), (2, 4, 1));
        // Serial side lookup (mmu.side_parallel = false): it follows the L2 TLB miss for the
        // other pages; held pages still cost S alone.
        let mut r = rig(false, false, Some((s, first)));
        r.map_side(VA);
        r.map(other);
        assert_eq!(r.cycles(VA), s);
        assert_eq!(r.cycles(other), L + s + W, "L + S + W");
    }

    #[test]
    fn side_hits_fill_the_tlbs_unless_told_not_to() {
        for fills_tlbs in [true, false] {
            let timing = SideTiming { fills_tlbs, ..SideTiming::default() };
            let mut r = rig(true, true, Some((20, timing)));
            r.map_side(VA);
            assert_eq!(r.cycles(VA), 20, "side hit beside the L2 TLB: max(L, S)");
            assert_eq!(r.cycles(VA + 8), if fills_tlbs { 0 } else { 20 }, "fills_tlbs = {fills_tlbs}");
            r.flush_l1();
            assert_eq!(r.cycles(VA), if fills_tlbs { L } else { 20 }, "an L2 hit, or the side lookup again");
        }
    }

    #[test]
    fn page_fault_charges_the_os_and_replays_from_the_l2_miss() {
        let mut r = rig(true, true, None);
        let (t, c) = r.go::<Checked>(VA).unwrap();
        assert_eq!(t.pbase, 0x1000_0000 + VA);
        assert_eq!(c, L.max(W) + W, "failed walk, then the replayed walk alone");
        assert_eq!(r.now, F, "the OS's work advanced the core's clock");
        assert_eq!((r.mmu.stats.faults, r.mmu.stats.os_cycles, r.mmu.stats.walk.walks), (1, F, 2));
        // With a side structure the replay looks it up again before walking.
        let mut r = rig(true, true, Some((20, SideTiming::default())));
        assert_eq!(r.cycles(VA), L.max(20).max(W) + 20 + W, "the replay's walk waits for its side lookup");
        assert_eq!(r.mmu.stats.side.walks, 2);
    }

    #[test]
    fn perfect_mode_answers_from_the_truth_at_no_cost() {
        let mut r = rig(false, false, None);
        r.map(VA);
        assert_eq!(r.go::<Perfect>(VA).unwrap().1, 0);
        assert_eq!(r.go::<Perfect>(VA + (1 << 20)).unwrap().1, 0, "a fault costs the OS, not translation cycles");
        assert_eq!(r.now, F);
        assert_eq!(r.mmu.stats.tlb.l1d_lookups, 0, "no TLB is modelled");
    }

    #[test]
    fn checked_mode_catches_a_stale_tlb_entry_and_tsvc_shootdown_clears_it() {
        let mut r = rig(true, true, None);
        r.map(VA);
        r.cycles(VA);
        // The OS moves the page but "forgets" the shootdown.
        r.host.s.pages.insert(VA >> 12, 0x5000_0000);
        assert!(r.go::<Fast>(VA).is_ok(), "fast mode does not look");
        let e = r.go::<Checked>(VA).unwrap_err().to_string();
        assert!(e.contains("L1 TLB hit"), "{e}");
        // The shootdown through the translation service drops the entry: the next access walks.
        let sd = Shootdown { asid: 1, start: VA, end: VA + 4096, tlb: true };
        r.mmu.shootdown(&r.host.d, &sd);
        assert_eq!(r.go::<Checked>(VA).unwrap(), (Translation { pbase: 0x5000_0000, size: PageSize::K4 }, L.max(W)));
    }

    #[test]
    fn tsvc_switch_flushes_only_when_asked() {
        let mut r = rig(true, true, None);
        r.map(VA);
        r.cycles(VA);
        r.mmu.switch(&r.host.d, 1, 2, false);
        assert_eq!(r.cycles(VA), 0, "tagged TLBs keep entries across a switch");
        r.mmu.switch(&r.host.d, 1, 2, true);
        assert_eq!(r.cycles(VA), L.max(W), "an untagged switch flushes");
        r.mmu.flush(&r.host.d, 1);
        assert_eq!(r.cycles(VA), L.max(W));
    }

    #[test]
    fn an_unheld_size_is_served_by_the_l2_tlb_or_split_into_l1_pieces() {
        use crate::mmu::tlb::TlbConfig;
        let only_4k = MmuConfig { l1d: vec![TlbConfig::new(64, 4, 1, &[PageSize::K4])], ..MmuConfig::default() };
        for pieces in [false, true] {
            let mut r = rig_with(&MmuConfig { l1_pieces: pieces, ..only_4k.clone() }, true, true, None);
            r.host.s.huge.insert(VA >> 21, 0x4000_0000);
            assert_eq!(r.cycles(VA), L.max(W), "the walk finds the 2 MiB page");
            // With pieces the accessed 4 KiB of the 2 MiB page sits in the L1; checked mode
            // compares its frame with the OS's 2 MiB mapping.
            assert_eq!(r.cycles(VA + 8), if pieces { 0 } else { L }, "pieces = {pieces}");
            assert_eq!(r.cycles(VA + 0x1000), L, "another 4 KiB of the page: an L2 hit, pieces = {pieces}");
            assert_eq!(r.cycles(VA + 0x1008), if pieces { 0 } else { L });
            let t = r.go::<Checked>(VA + 0x1008).unwrap().0;
            assert_eq!(t.paddr(VA + 0x1008), 0x4000_0000 + ((VA + 0x1008) & 0x1f_ffff));
        }
    }
}
