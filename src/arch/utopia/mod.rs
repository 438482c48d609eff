//! Utopia (Kanellopoulos et al., MICRO'23): restrictive set-associative segments (RestSegs) beside a
//! flexible segment (FlexSeg) translated by an x86-64 radix table.
//!
//! - **RestSegs** are carved from physical memory at boot ([`FramePlacement::boot`], before fragmentation).
//!   A RestSeg of N pages of one size and associativity M has N/M sets; a virtual page may live
//!   only in a way of the set its VPN hashes to (§5.1). The driver object holds the RestSegs and the
//!   OS's **global TAR** (one [`SetAssoc`] per RestSeg, SRRIP, tag = VPN·2¹⁶ | ASID), shared by
//!   every process.
//! - Each address space has, per RestSeg, a **Tag Array** (TAR: per slot the VPN tag plus 10
//!   metadata bits) and a **Set Filter** (SF: per set a counter of log2(M)+1 bits), stored in
//!   simulated memory with the paper's sizes (footnotes 8 and 9), plus the FlexSeg radix table
//!   ([`Radix`], reused as is).
//! - The **RestSeg walk** (RSW) is the side lookup beside the L2 TLB: for every RestSeg in parallel,
//!   the SF and TAR caches (per core, physically addressed lines, Utopia Table 1: 2 KiB each) are
//!   probed; a missing SF line and the TAR line(s) of the set are fetched in parallel through the
//!   cache hierarchy. An SF hit saying "set empty" skips the TAR fetch; an SF miss fetches the TAR
//!   anyway, but the walk waits for it only if the set is not empty. The FlexSeg walk (radix)
//!   starts only when every RSW and the L2 TLB missed.
//! - **Placement** ([`FramePlacement::place`]): page-fault-based allocation puts every new private page of a
//!   RestSeg's size into its set — a free way, or the SRRIP victim, which the OS migrates to the
//!   FlexSeg (or swaps out when there is no FlexSeg). Shared pages always go to the FlexSeg.
//!   `update` routes a mapping to the RestSeg or the FlexSeg by whether its frame lies in a RestSeg.
//! - **PTW-tracking migration** (§5.5): [`MigrationPolicy::walk_observed`] counts, per FlexSeg page, walks
//!   and the DRAM references of those walks (saturating 4- and 5-bit counters, the 9 unused PTE
//!   bits); a page over both thresholds is queued and the OS moves it into its RestSeg set at the
//!   next epoch ([`MigrationPolicy::take_migrations`]; the interrupt is asynchronous, so an epoch's delay).
//!
//! Host-side each space also keeps a count of its RestSeg pages per region of 512 pages (what an
//! OS keeps to answer a range query without probing every page of the range); a page's own slot
//! is found in its set's TAR row, which is also what walks read.

use super::radix::{Radix, RadixConfig, RadixPwc, RadixSpace};
use super::{ArchConfig, Design, Registered};
use crate::addr::{bytes_serde, PageSize, Pfn};
use crate::error::{Error, Result};
use crate::mem::assoc::{Replacement, SetAssoc};
use crate::mmu::wcache::{WalkCache, WalkCacheConfig};
use crate::os::phys::PhysMem;
use crate::os::truth::IntMap;
use crate::tapi::{Driver, Evict, EvictTo, FramePlacement, Frames, MapFlags, MigrationPolicy, MigrationRequest, OsCost, Placement};
use crate::tapi::{SideLookup, SideStart, SideTiming, TObj, Tdb, TdbEnv, Translation, WalkPlan};
use serde_json::{json, Map, Value};

mod config;
mod policy;
mod restseg;
mod rsw;
mod tar;
#[cfg(test)]
mod tests;

pub use config::*;
use restseg::*;
use tar::Tar;

/// One address space: the FlexSeg radix table, a TAR and SF per RestSeg, PTW counters.
pub struct UtopiaSpace {
    asid: u16,
    radix: RadixSpace,
    segs: Vec<SegSpace>,
}

/// Per-core walk caches: the FlexSeg PWCs, the TAR and SF caches and the artifact's ULB.
pub struct UtopiaWc {
    pwc: RadixPwc,
    tar: WalkCache,
    sf: WalkCache,
    latency: u32,
    /// RestSeg translations (`arch.utopia.ulb`): key [`ulb_key`], payload the page's frame base.
    ulb: Option<WalkCache>,
}

/// Bit where a ULB key holds the RestSeg index, above any VPN of a 5-level (57-bit) VA.
const ULB_SEG_SHIFT: u32 = 45;

/// The ULB key of `vpn` (in the RestSeg's page size) of RestSeg `seg`.
#[inline(always)]
fn ulb_key(vpn: u64, seg: usize) -> u64 {
    vpn.min((1 << ULB_SEG_SHIFT) - 1) | (seg as u64) << ULB_SEG_SHIFT
}

/// What the driver remembers of each space for shootdowns and reports.
#[derive(Clone, Default)]
struct SpaceInfo {
    tar_base: Vec<u64>,
    sf_base: Vec<u64>,
    flex_bytes: u64,
}

/// The Utopia driver.
pub struct Utopia {
    cfg: UtopiaConfig,
    radix: Radix,
    levels: u8,
    va_bits: u32,
    segs: Vec<RestSeg>,
    spaces: Vec<Option<SpaceInfo>>,
    sizes: Vec<PageSize>,
    /// PTW-tracking candidates not yet handed to the OS, and the set of their pages (one request
    /// per page per epoch).
    pending: Vec<MigrationRequest>,
    queued: IntMap<()>,
    rsw: u64,
    rsw_hits: u64,
    ulb_lookups: u64,
    ulb_hits: u64,
    migration_requests: u64,
    shared_to_flexseg: u64,
}

#[inline(always)]
fn page_key(asid: u16, va: u64) -> u64 {
    ((va >> 12) << 16) | asid as u64
}

impl Utopia {
    /// A driver for `cfg`, with the FlexSeg radix table of `radix`. RestSegs are reserved at boot.
    pub fn new(cfg: &UtopiaConfig, radix: &RadixConfig) -> Utopia {
        let sizes = if cfg.flexseg {
            vec![PageSize::K4, PageSize::M2, PageSize::G1]
        } else {
            let mut v: Vec<PageSize> = cfg.restsegs.iter().map(|r| r.page).collect();
            v.sort();
            v.dedup();
            v
        };
        Utopia {
            cfg: cfg.clone(),
            radix: {
                let mut r = Radix::new(radix);
                r.keep_leaf_bits(policy::PTW_BITS);
                r
            },
            levels: radix.levels,
            va_bits: 12 + 9 * radix.levels as u32,
            segs: Vec::new(),
            spaces: Vec::new(),
            sizes,
            pending: Vec::new(),
            queued: IntMap::default(),
            rsw: 0,
            rsw_hits: 0,
            ulb_lookups: 0,
            ulb_hits: 0,
            migration_requests: 0,
            shared_to_flexseg: 0,
        }
    }

    /// The RestSeg (index) whose frames contain `pa`.
    #[inline]
    fn seg_of(&self, pa: u64) -> Option<usize> {
        self.segs.iter().position(|g| g.contains(pa))
    }

    /// The slot of `vpn` of space `s` in RestSeg `i`, reading the TAR as the hardware does (counted).
    fn tar_find(&self, s: &UtopiaSpace, i: usize, vpn: u64, env: &mut TdbEnv) -> Option<usize> {
        let g = &self.segs[i];
        let ss = &s.segs[i];
        let set = g.set_of(vpn);
        env.cost.hash(1);
        env.cost.read(1); // SF counter
        if ss.sf[set] == 0 {
            return None;
        }
        env.cost.read(g.ways as u64);
        Self::tar_slot(g, ss, set, vpn)
    }

    /// The slot of `vpn` in `set` of RestSeg `g` of a space (`ss`): a scan of the set's TAR row.
    #[inline]
    fn tar_slot(g: &RestSeg, ss: &SegSpace, set: usize, vpn: u64) -> Option<usize> {
        ss.tar.find(set * g.ways, g.ways, g.tar_tag(vpn))
    }

    /// The slot of `vpn` in RestSeg `i` of `s`, host-side (not charged): its set's TAR row.
    #[inline]
    fn slot_of(&self, s: &UtopiaSpace, i: usize, vpn: u64) -> Option<usize> {
        let g = &self.segs[i];
        Self::tar_slot(g, &s.segs[i], g.set_of(vpn), vpn)
    }

    /// Calls `f(vpn, slot)` for the pages of `s` in RestSeg `i` with a VPN in `[lo, hi)`, in no
    /// particular order, until `f` returns false; returns whether it did (host-side, not
    /// charged). A range with more pages than the RestSeg has slots scans the TAR; a smaller one
    /// probes the TAR rows of its pages in the regions that hold any.
    fn pages_in(&self, s: &UtopiaSpace, i: usize, lo: u64, hi: u64, mut f: impl FnMut(u64, usize) -> bool) -> bool {
        let (g, ss) = (&self.segs[i], &s.segs[i]);
        if lo >= hi {
            return false;
        }
        if hi - lo > ss.tar.len() as u64 {
            return g.pages(ss).any(|(slot, vpn)| (lo..hi).contains(&vpn) && !f(vpn, slot));
        }
        let probe = |vpn: u64| Self::tar_slot(g, ss, g.set_of(vpn), vpn);
        if hi - lo <= 4 {
            return (lo..hi).any(|vpn| probe(vpn).is_some_and(|slot| !f(vpn, slot)));
        }
        for r in lo / REGION_PAGES..=(hi - 1) / REGION_PAGES {
            let Some(&n) = ss.regions.get(&r) else { continue };
            let (a, b) = (lo.max(r * REGION_PAGES), hi.min((r + 1) * REGION_PAGES));
            let mut left = n;
            for vpn in a..b {
                if let Some(slot) = probe(vpn) {
                    if !f(vpn, slot) {
                        return true;
                    }
                    left -= 1;
                    if left == 0 {
                        break; // every page of the region found
                    }
                }
            }
        }
        false
    }

    /// Whether any RestSeg page of `s` overlaps `[start, end)` (host-side index; `count` charges
    /// one read per RestSeg probed).
    fn rest_overlaps(&self, s: &UtopiaSpace, start: u64, end: u64, mut count: Option<&mut OsCost>) -> bool {
        for (i, g) in self.segs.iter().enumerate() {
            if let Some(c) = count.as_deref_mut() {
                c.read(1);
            }
            if self.pages_in(s, i, start >> g.shift, end.div_ceil(g.page.bytes()), |_, _| false) {
                return true;
            }
        }
        false
    }

    /// Empties `slot` of RestSeg `i` in space `s` and the global TAR; returns the page's object.
    fn clear_slot(&mut self, s: &mut UtopiaSpace, i: usize, slot: usize, env: &mut TdbEnv) -> TObj {
        let g = &mut self.segs[i];
        let ss = &mut s.segs[i];
        let (set, way) = (slot / g.ways, slot % g.ways);
        let vpn = g.tar_vpn(set, ss.tar.take(slot).expect("a slot cleared holds a page"));
        ss.sf[set] -= 1;
        ss.count_region(vpn, false);
        let old = g.global.invalidate_way(set, way);
        debug_assert_eq!(old, Some(gtag(vpn, s.asid)));
        g.record_reuse(slot);
        env.cost.write(3); // TAR entry, SF counter, global TAR
        TObj::new(vpn << g.shift, g.slot_pa(slot), g.page, ss.prot[slot])
    }

    fn flex_bytes_changed(&mut self, s: &UtopiaSpace) {
        let b = self.radix.table_bytes(&s.radix);
        if let Some(Some(info)) = self.spaces.get_mut(s.asid as usize) {
            info.flex_bytes = b;
        }
    }

    /// Checks that every process's TAR and SF agree with the global TAR, that the index matches
    /// the TAR, and that no page is in both segments. For tests.
    pub fn check_consistency<'a>(&mut self, spaces: impl IntoIterator<Item = &'a mut UtopiaSpace>) -> std::result::Result<(), String> {
        let spaces: Vec<&mut UtopiaSpace> = spaces.into_iter().collect();
        for (i, g) in self.segs.iter().enumerate() {
            let mut owned = vec![false; g.sets as usize * g.ways];
            for s in spaces.iter() {
                let ss = &s.segs[i];
                let mut regions = IntMap::<u32>::default();
                for set in 0..g.sets as usize {
                    let mut n = 0;
                    for way in 0..g.ways {
                        let slot = set * g.ways + way;
                        let Some(t) = g.vpn_at(ss, slot) else { continue };
                        n += 1;
                        if g.global.tag_at(set, way) != Some(gtag(t, s.asid)) {
                            return Err(format!("RestSeg {i} slot {slot}: ASID {} TAR holds vpn {t:#x}, global TAR disagrees", s.asid));
                        }
                        if g.set_of(t) != set {
                            return Err(format!("RestSeg {i}: vpn {t:#x} in set {set}, hashes to {}", g.set_of(t)));
                        }
                        *regions.entry(t / REGION_PAGES).or_insert(0u32) += 1;
                        owned[slot] = true;
                    }
                    if ss.sf[set] as usize != n {
                        return Err(format!("RestSeg {i} set {set}: ASID {} SF says {} pages, TAR holds {n}", s.asid, ss.sf[set]));
                    }
                }
                if ss.regions != regions {
                    return Err(format!("RestSeg {i}: ASID {}'s region counts disagree with its TAR", s.asid));
                }
            }
            for set in 0..g.sets as usize {
                for way in 0..g.ways {
                    if g.global.tag_at(set, way).is_some() != owned[set * g.ways + way] {
                        return Err(format!("RestSeg {i} set {set} way {way}: global TAR entry without an owner's TAR entry"));
                    }
                }
            }
        }
        let mut scratch = OsCost::default();
        let mut phys = PhysMem::new(64 << 20, 9);
        for s in spaces {
            for (i, g) in self.segs.iter().enumerate() {
                for (_, vpn) in g.pages(&s.segs[i]) {
                    let va = vpn << g.shift;
                    let env = &mut TdbEnv { phys: &mut phys, cost: &mut scratch };
                    if !self.radix.range_is_empty(&mut s.radix, va, va + g.page.bytes(), env) {
                        return Err(format!("ASID {} page {va:#x} is in RestSeg {i} and in the FlexSeg", s.asid));
                    }
                }
            }
        }
        Ok(())
    }

    /// Bytes of TAR+SF (paper formulas) of every live space.
    fn tar_sf_bytes(&self) -> u64 {
        let per: u64 = self.segs.iter().map(|g| g.tar_bytes + g.sf_bytes).sum();
        per * self.spaces.iter().filter(|s| s.is_some()).count() as u64
    }
}

impl Utopia {
    /// Names what a failed TAR or SF allocation needs: each address space's TAR and SF of every
    /// RestSeg come from the memory outside the RestSegs, which without a FlexSeg is
    /// `arch.utopia.kernel_reserve` (raising `os.memory` then grows the RestSeg, not that).
    fn tables_oom(&self, e: Error, g: &RestSeg) -> Error {
        match e {
            Error::OutOfMemory(m) if !self.cfg.flexseg => Error::OutOfMemory(format!(
                "{m}; each address space's TAR ({} KiB) and SF ({} KiB) of a RestSeg come from the memory outside the \
                 RestSegs: raise arch.utopia.kernel_reserve (now {} MiB) for more address spaces",
                g.tar_bytes >> 10,
                g.sf_bytes >> 10,
                self.cfg.kernel_reserve >> 20
            )),
            e => e,
        }
    }
}

impl Tdb for Utopia {
    type Space = UtopiaSpace;

    fn create_space(&mut self, asid: u16, env: &mut TdbEnv) -> Result<UtopiaSpace> {
        let radix = self.radix.create_space(asid, env)?;
        let mut segs = Vec::new();
        let mut info = SpaceInfo::default();
        for g in &self.segs {
            let order_for = |bytes: u64| ceil_log2(bytes.div_ceil(4096).max(1));
            let (tar_order, sf_order) = (order_for(g.tar_bytes), order_for(g.sf_bytes));
            let tar_pfn = env.alloc_table(tar_order).map_err(|e| self.tables_oom(e, g))?;
            let sf_pfn = env.alloc_table(sf_order).map_err(|e| self.tables_oom(e, g))?;
            info.tar_base.push(tar_pfn.addr());
            info.sf_base.push(sf_pfn.addr());
            let slots = (g.sets as usize) * g.ways;
            segs.push(SegSpace {
                tar: Tar::new(slots, g.max_tar_tag(self.va_bits - g.shift)),
                prot: vec![0; slots],
                sf: vec![0; g.sets as usize],
                regions: IntMap::default(),
                tar_pfn,
                tar_order,
                sf_pfn,
                sf_order,
            });
        }
        info.flex_bytes = self.radix.table_bytes(&radix);
        if self.spaces.len() <= asid as usize {
            self.spaces.resize(asid as usize + 1, None);
        }
        self.spaces[asid as usize] = Some(info);
        Ok(UtopiaSpace { asid, radix, segs })
    }

    fn destroy_space(&mut self, mut s: UtopiaSpace, env: &mut TdbEnv) -> Result<()> {
        for i in 0..self.segs.len() {
            let slots: Vec<usize> = s.segs[i].tar.occupied().map(|(slot, _)| slot).collect();
            for slot in slots {
                self.clear_slot(&mut s, i, slot, env);
            }
            let ss = &s.segs[i];
            env.free_table(ss.tar_pfn, ss.tar_order)?;
            env.free_table(ss.sf_pfn, ss.sf_order)?;
        }
        if let Some(slot) = self.spaces.get_mut(s.asid as usize) {
            *slot = None;
        }
        self.radix.destroy_space(s.radix, env)
    }

    fn find(&mut self, s: &mut UtopiaSpace, va: u64, env: &mut TdbEnv) -> Option<TObj> {
        for i in 0..self.segs.len() {
            let vpn = va >> self.segs[i].shift;
            if let Some(slot) = self.tar_find(s, i, vpn, env) {
                let g = &self.segs[i];
                return Some(TObj::new(vpn << g.shift, g.slot_pa(slot), g.page, s.segs[i].prot[slot]));
            }
        }
        if !self.cfg.flexseg {
            return None;
        }
        self.radix.find(&mut s.radix, va, env)
    }

    fn update(&mut self, s: &mut UtopiaSpace, o: &TObj, env: &mut TdbEnv) -> Result<()> {
        let Some(i) = self.seg_of(o.pa) else {
            if !self.cfg.flexseg {
                return Err(Error::Check(format!("restrictive-only: frame {:#x} for {:#x} is outside every RestSeg", o.pa, o.va)));
            }
            if self.rest_overlaps(s, o.va, o.end(), None) {
                return Err(Error::Check(format!("{:#x}: a RestSeg page already maps part of this {} range", o.va, o.size)));
            }
            self.radix.update(&mut s.radix, o, env)?;
            self.flex_bytes_changed(s);
            return Ok(());
        };
        let g = &self.segs[i];
        if o.size != g.page || !o.size.is_aligned(o.va) || !o.size.is_aligned(o.pa) {
            return Err(Error::Check(format!(
                "RestSeg {i} holds aligned {} pages; got a {} page va {:#x} pa {:#x}",
                g.page, o.size, o.va, o.pa
            )));
        }
        let slot = ((o.pa - g.base) / g.page.bytes()) as usize;
        let (set, way) = (slot / g.ways, slot % g.ways);
        let vpn = o.va >> g.shift;
        env.cost.hash(1);
        if g.set_of(vpn) != set {
            return Err(Error::Check(format!(
                "frame {:#x} is in set {set} of RestSeg {i}, but {:#x} hashes to set {}",
                o.pa,
                o.va,
                g.set_of(vpn)
            )));
        }
        let tag = gtag(vpn, s.asid);
        if g.vpn_at(&s.segs[i], slot) == Some(vpn) {
            // Same page, same frame: only metadata changes.
            s.segs[i].prot[slot] = o.prot;
            env.cost.write(1);
            return Ok(());
        }
        if let Some(t) = g.global.tag_at(set, way) {
            if t >> 16 == vpn && !self.cfg.flexseg {
                // The same page of another address space: a shared page or a fork's child.
                return Err(Error::Unsupported(format!(
                    "RestSeg {i} frame {:#x} holds ASID {}'s page {:#x}, which ASID {} would map too: a RestSeg slot maps one \
                     address space's page, and without a FlexSeg (arch.utopia.flexseg = false) a page cannot be shared or \
                     forked copy-on-write (Utopia §3)",
                    o.pa,
                    t & 0xFFFF,
                    o.va,
                    s.asid
                )));
            }
            return Err(Error::Check(format!("RestSeg {i} frame {:#x} is taken (tag {t:#x})", o.pa)));
        }
        // A page lives in at most one place: not elsewhere in a RestSeg, not in the FlexSeg.
        if self.rest_overlaps(s, o.va, o.end(), None) {
            return Err(Error::Check(format!("{:#x}: a RestSeg page already maps part of this {} range", o.va, o.size)));
        }
        let mut scratch = OsCost::default();
        if !self.radix.range_is_empty(&mut s.radix, o.va, o.end(), &mut TdbEnv { phys: env.phys, cost: &mut scratch }) {
            return Err(Error::Check(format!("{:#x}: the FlexSeg already maps part of this {} range", o.va, o.size)));
        }
        if vpn >> (self.va_bits - g.shift) != 0 {
            return Err(Error::Check(format!("{:#x}: beyond the {}-bit virtual addresses of the FlexSeg's table", o.va, self.va_bits)));
        }
        let g = &mut self.segs[i];
        g.global.insert_at(set, way, tag);
        g.reuse[slot] = 0;
        let ss = &mut s.segs[i];
        let stored = ss.tar.put(slot, g.tar_tag(vpn));
        debug_assert!(stored, "checked above");
        ss.prot[slot] = o.prot;
        ss.sf[set] += 1;
        ss.count_region(vpn, true);
        env.cost.write(3); // TAR entry, SF counter, global TAR
        Ok(())
    }

    fn remove(&mut self, s: &mut UtopiaSpace, va: u64, size: PageSize, env: &mut TdbEnv) -> Option<TObj> {
        for i in 0..self.segs.len() {
            if self.segs[i].page != size {
                continue;
            }
            if let Some(slot) = self.tar_find(s, i, va >> size.shift(), env) {
                return Some(self.clear_slot(s, i, slot, env));
            }
        }
        if !self.cfg.flexseg {
            return None;
        }
        // The PTW counters leave with the FlexSeg PTE that holds them.
        let r = self.radix.remove(&mut s.radix, va, size, env);
        self.flex_bytes_changed(s);
        r
    }

    fn for_each(&mut self, s: &mut UtopiaSpace, start: u64, end: u64, env: &mut TdbEnv, f: &mut dyn FnMut(&TObj)) {
        let mut objs = Vec::new();
        if self.cfg.flexseg {
            self.radix.for_each(&mut s.radix, start, end, env, &mut |o| objs.push(*o));
        }
        let merged_from = objs.len();
        for (i, g) in self.segs.iter().enumerate() {
            let ss = &s.segs[i];
            let (lo, hi) = (start.div_ceil(g.page.bytes()), end.div_ceil(g.page.bytes()));
            self.pages_in(s, i, lo, hi, |vpn, slot| {
                env.cost.read(1);
                objs.push(TObj::new(vpn << g.shift, g.slot_pa(slot), g.page, ss.prot[slot]));
                true
            });
        }
        // In address order, as the radix half is (the RestSeg pages came in no order).
        if objs.len() > merged_from {
            objs.sort_by_key(|o| o.va);
        }
        for o in &objs {
            f(o);
        }
    }

    fn range_is_empty(&mut self, s: &mut UtopiaSpace, start: u64, end: u64, env: &mut TdbEnv) -> bool {
        if start >= end {
            return true;
        }
        if self.rest_overlaps(s, start, end, Some(env.cost)) {
            return false;
        }
        !self.cfg.flexseg || self.radix.range_is_empty(&mut s.radix, start, end, env)
    }

    fn table_bytes(&self, s: &UtopiaSpace) -> u64 {
        self.radix.table_bytes(&s.radix) + self.segs.iter().map(|g| g.tar_bytes + g.sf_bytes).sum::<u64>()
    }
}

impl Registered for Utopia {
    type Section = UtopiaConfig;
    const DESIGNS: &'static [Design] = &[
        Design {
            name: "utopia",
            description: "Utopia: 512M 4K + 512M 2M RestSegs (16-way, SRRIP) beside a radix4 FlexSeg, 4 KiB pages (THP off)",
            driver: "utopia",
            arch: |a| {
                a.radix.levels = 4;
                a.utopia = UtopiaConfig::default();
            },
            settings: &["os.thp=never"],
            nested: None,
        },
        Design {
            name: "utopia-thp",
            description: "Utopia (Table 1) with transparent huge pages always: 2 MiB pages go to the 2M RestSeg",
            driver: "utopia",
            arch: |a| {
                a.radix.levels = 4;
                a.utopia = UtopiaConfig::default();
            },
            settings: &["os.thp=always"],
            nested: None,
        },
        Design {
            name: "utopia-virtuoso",
            description:
                "Utopia as Virtuoso v1.0: 8G 4K 16-way + 8G 2M 8-way RestSegs, 32-entry 1-cycle TAR/SF caches, 200-cycle migration",
            driver: "utopia",
            arch: |a| {
                a.radix.levels = 4;
                a.utopia = UtopiaConfig {
                    restsegs: vec![
                        RestSegConfig { size: 8 << 30, page: PageSize::K4, ways: 16, hash: SetHash::Modulo },
                        RestSegConfig { size: 8 << 30, page: PageSize::M2, ways: 8, hash: SetHash::Modulo },
                    ],
                    tar_cache: WalkCacheConfig::new(32, 4, 1),
                    sf_cache: WalkCacheConfig::new(32, 4, 1),
                    ..UtopiaConfig::default()
                };
            },
            settings: &["os.thp=never", "os.migration.copy_cycles=200"],
            nested: None,
        },
        Design {
            name: "utopia-restrictive-only",
            description: "restrictive mapping across all memory (Utopia §3): one 4K 16-way RestSeg, no FlexSeg, swap on",
            driver: "utopia",
            arch: |a| {
                a.radix.levels = 4;
                a.utopia = UtopiaConfig {
                    restsegs: vec![RestSegConfig { size: 0, page: PageSize::K4, ways: 16, hash: SetHash::Modulo }],
                    flexseg: false,
                    migrate: MigrateConfig { enabled: false, ..MigrateConfig::default() },
                    ..UtopiaConfig::default()
                };
            },
            settings: &["os.thp=never", "os.swap.enabled=true"],
            nested: None,
        },
    ];

    fn validate(s: &UtopiaConfig, key: &str) -> Result<()> {
        s.validate(key)
    }

    /// Its own section and the FlexSeg's (`arch.radix`).
    fn config(arch: &ArchConfig) -> (UtopiaConfig, RadixConfig) {
        (arch.utopia.clone(), arch.radix.clone())
    }
}

impl Driver for Utopia {
    type Config = (UtopiaConfig, RadixConfig);
    type WalkCache = UtopiaWc;

    fn from_config((utopia, radix): &(UtopiaConfig, RadixConfig), _seed: u64) -> Result<Self> {
        Ok(Utopia::new(utopia, radix))
    }

    #[inline(always)]
    fn side(&mut self) -> Option<&mut dyn SideLookup<Self>> {
        Some(self)
    }

    #[inline(always)]
    fn placement(&mut self) -> Option<&mut dyn FramePlacement<Self>> {
        Some(self)
    }

    #[inline(always)]
    fn migration(&mut self) -> Option<&mut dyn MigrationPolicy<Self>> {
        Some(self)
    }

    fn new_walk_cache(&self) -> UtopiaWc {
        UtopiaWc {
            pwc: self.radix.new_walk_cache(),
            tar: WalkCache::new(&self.cfg.tar_cache),
            sf: WalkCache::new(&self.cfg.sf_cache),
            latency: self.cfg.tar_cache.latency.max(self.cfg.sf_cache.latency),
            ulb: (self.cfg.ulb.entries != 0).then(|| WalkCache::new(&self.cfg.ulb)),
        }
    }

    /// Host prefetch a few accesses ahead: the FlexSeg walk's entry (radix's prefetch), which also
    /// holds the PTW counters the walk updates and names the cache sets to bring in. (Prefetching each RestSeg's SF counter and TAR row as
    /// well measured slower on bfs and no faster on GUPS: those arrays mostly sit in the host's
    /// L2 already.)
    #[inline]
    fn prefetch(&self, s: &UtopiaSpace, va: u64) -> Option<u64> {
        if !self.cfg.flexseg {
            return None;
        }
        self.radix.prefetch(&s.radix, va)
    }

    /// The FlexSeg walk (radix); reached only when every RSW missed.
    #[inline]
    fn walk(&mut self, s: &mut UtopiaSpace, wc: &mut UtopiaWc, asid: u16, va: u64, plan: &mut WalkPlan) -> Option<Translation> {
        if !self.cfg.flexseg {
            return None;
        }
        self.radix.walk(&mut s.radix, &mut wc.pwc, asid, va, plan)
    }

    fn invalidate_walk_cache(&self, wc: &mut UtopiaWc, asid: u16, start: u64, end: u64) {
        self.radix.invalidate_walk_cache(&mut wc.pwc, asid, start, end);
        if let Some(ulb) = wc.ulb.as_mut() {
            for (i, g) in self.segs.iter().enumerate() {
                let (lo, hi) = (start >> g.shift, end.div_ceil(g.page.bytes()));
                if hi > lo {
                    ulb.invalidate(asid, ulb_key(lo, i), ulb_key(hi - 1, i));
                }
            }
        }
        // TAR/SF cache entries of the sets the range hashes to (§6.1); a large range drops all.
        let Some(Some(info)) = self.spaces.get(asid as usize) else { return };
        for (i, g) in self.segs.iter().enumerate() {
            let lo = start >> g.shift;
            let hi = end.div_ceil(g.page.bytes());
            if hi.saturating_sub(lo) > 64 {
                wc.tar.clear();
                wc.sf.clear();
                return;
            }
            for vpn in lo..hi {
                let set = g.set_of(vpn);
                let sf_line = (info.sf_base[i] + g.sf_offset(set)) >> 6;
                wc.sf.invalidate(0, sf_line, sf_line);
                let (a, b) = g.tar_span(set);
                wc.tar.invalidate(0, (info.tar_base[i] + a) >> 6, (info.tar_base[i] + b) >> 6);
            }
        }
    }

    fn leaf_sizes(&self) -> &[PageSize] {
        &self.sizes
    }

    /// The FlexSeg's radix table sets the address space.
    fn user_va_limit(&self) -> u64 {
        self.radix.user_va_limit()
    }

    fn restart_metrics(&mut self) {
        for g in &mut self.segs {
            g.stats = SegStats::default();
        }
        self.rsw = 0;
        self.rsw_hits = 0;
        self.ulb_lookups = 0;
        self.ulb_hits = 0;
        self.migration_requests = 0;
        self.shared_to_flexseg = 0;
    }

    fn metrics(&self) -> Map<String, Value> {
        let rate = |h: u64, n: u64| if n == 0 { 0.0 } else { h as f64 / n as f64 };
        let mut m = Map::new();
        let mut tot = SegStats::default();
        let mut segs = Vec::new();
        let mut cap_radix = 0;
        for g in &self.segs {
            let st = &g.stats;
            tot.tar_lookups += st.tar_lookups;
            tot.tar_hits += st.tar_hits;
            tot.sf_lookups += st.sf_lookups;
            tot.sf_hits += st.sf_hits;
            tot.fault_allocs += st.fault_allocs;
            tot.migration_placements += st.migration_placements;
            tot.evictions += st.evictions;
            for k in 0..4 {
                tot.reuse_hist[k] += st.reuse_hist[k];
            }
            let pages = g.sets * g.ways as u64;
            cap_radix += radix_bytes_for(pages, g.page, self.levels);
            let occupied =
                (0..g.sets as usize).map(|set| (0..g.ways).filter(|&w| g.global.tag_at(set, w).is_some()).count() as u64).sum::<u64>();
            segs.push(json!({
                "page": g.page.label(),
                "bytes": g.size,
                "base": g.base,
                "sets": g.sets,
                "ways": g.ways,
                "hash": format!("{:?}", g.hash).to_lowercase(),
                "occupied_pages": occupied,
                "rsw": st.rsw,
                "rsw_hits": st.rsw_hits,
                "sf_filtered": st.sf_filtered,
                "tar_cache_hit_rate": rate(st.tar_hits, st.tar_lookups),
                "sf_cache_hit_rate": rate(st.sf_hits, st.sf_lookups),
                "fault_allocations": st.fault_allocs,
                "migration_placements": st.migration_placements,
                "evictions": st.evictions,
                "tar_bytes_per_process": g.tar_bytes,
                "sf_bytes_per_process": g.sf_bytes,
            }));
        }
        m.insert("rsw".into(), json!(self.rsw));
        m.insert("rsw_hits".into(), json!(self.rsw_hits));
        m.insert("rsw_hit_rate".into(), json!(rate(self.rsw_hits, self.rsw)));
        if self.cfg.ulb.entries != 0 {
            m.insert("ulb_lookups".into(), json!(self.ulb_lookups));
            m.insert("ulb_hit_rate".into(), json!(rate(self.ulb_hits, self.ulb_lookups)));
        }
        m.insert("tar_cache_hit_rate".into(), json!(rate(tot.tar_hits, tot.tar_lookups)));
        m.insert("sf_cache_hit_rate".into(), json!(rate(tot.sf_hits, tot.sf_lookups)));
        m.insert("fault_allocations".into(), json!(tot.fault_allocs));
        m.insert("migration_requests".into(), json!(self.migration_requests));
        m.insert("migrations_to_restseg".into(), json!(tot.migration_placements));
        m.insert("evictions_to_flexseg".into(), json!(if self.cfg.flexseg { tot.evictions } else { 0 }));
        m.insert("evictions_to_swap".into(), json!(if self.cfg.flexseg { 0 } else { tot.evictions }));
        m.insert("shared_pages_to_flexseg".into(), json!(self.shared_to_flexseg));
        let h = tot.reuse_hist;
        m.insert("reuse_before_eviction".into(), json!({"0": h[0], "1-5": h[1], "6-20": h[2], ">20": h[3]}));
        m.insert("tar_sf_bytes".into(), json!(self.tar_sf_bytes()));
        let flex: u64 = self.spaces.iter().flatten().map(|i| i.flex_bytes).sum();
        m.insert("flexseg_table_bytes".into(), json!(flex));
        m.insert("radix_bytes_for_restseg_capacity".into(), json!(cap_radix * self.spaces.iter().flatten().count() as u64));
        m.insert("restsegs".into(), Value::Array(segs));
        m
    }
}
