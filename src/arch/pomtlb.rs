//! POM-TLB (Ryoo et al., "Rethinking TLB Designs in Virtualized Environments: A Very Large
//! Part-of-Memory TLB", ISCA'17): a very large set-associative TLB kept in main memory, probed
//! after an L2 TLB miss and before the page walk, and cacheable in the data caches.
//!
//! - Geometry (Utopia MICRO'23 Table 1): 64K entries, 16-way, SRRIP. Virtuoso keeps one such
//!   array per page size ("64K entries for 4K and for 2M"), which is the default
//!   (`partitions = "split"`); `"shared"` keeps both sizes in one array.
//! - Placement: each array is one contiguous, naturally aligned region allocated from the buddy
//!   allocator when the first address space is created (the driver object is shared by every
//!   address space, as the in-memory TLB is shared by every process; entries are ASID-tagged).
//!   An entry is `entry_bytes` (16 in the POM-TLB paper: tag, PPN, attributes) and set `s` is the
//!   `ways × entry_bytes` bytes at `base + s × ways × entry_bytes`, i.e. one or more 64-byte lines.
//! - Lookup: a walk-plan step reading every line of the probed set of each partition, in
//!   parallel (Virtuoso probes the partitions in parallel too; the POM-TLB paper's page-size
//!   predictor is not modelled). The walk waits for the partition that hits, or for all of them
//!   on a miss. On a miss the x86 radix walk ([`Radix`], wrapped, not copied) follows in later
//!   steps, and its result is filled into the POM-TLB (the fill's write to memory is not timed).
//!   1 GiB translations are not cached.
//! - Coherence: the POM-TLB is a TLB, so the OS's TLB shootdown invalidates it
//!   ([`MemoryTlb::shootdown`]); checked mode compares every POM-TLB hit with the OS's truth.

use super::radix::{Radix, RadixConfig, RadixPwc, RadixSpace};
use super::{ArchConfig, Design, Registered};
use crate::addr::PageSize;
use crate::error::{Error, Result};
use crate::mem::assoc::{Replacement, SetAssoc};
use crate::tapi::{Driver, MemoryTlb, TObj, Tdb, TdbEnv, Translation, WalkPlan};

/// How the POM-TLB holds the two page sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Partitions {
    /// One array per page size (4 KiB and 2 MiB), each of `entries` entries (Virtuoso).
    Split,
    /// One array of `entries` entries holding both sizes (a 2 MiB entry indexed by its 2 MiB VPN).
    Shared,
}

/// POM-TLB configuration (`[arch.pomtlb]`; the walk that follows a miss uses `[arch.radix]`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PomTlbConfig {
    /// Entries per array (Utopia Table 1: 64K; Virtuoso: 64K for 4K and for 2M).
    pub entries: u32,
    /// Associativity (Utopia Table 1: 16-way; Virtuoso and the POM-TLB paper: 4-way).
    pub ways: u32,
    /// Replacement (Utopia Table 1: SRRIP).
    pub replacement: Replacement,
    /// Split per page size or shared.
    pub partitions: Partitions,
    /// Bytes per entry (POM-TLB paper: 16, four entries per 64-byte line).
    pub entry_bytes: u32,
    /// Fixed cycles added to the probe besides its memory references (0: the probe costs what
    /// its cached memory reference costs, as in Virtuoso).
    pub latency: u32,
}

impl Default for PomTlbConfig {
    fn default() -> Self {
        PomTlbConfig {
            entries: 65536,
            ways: 16,
            replacement: Replacement::Srrip,
            partitions: Partitions::Split,
            entry_bytes: 16,
            latency: 0,
        }
    }
}

impl PomTlbConfig {
    /// Checks the geometry.
    pub fn validate(&self, key: &str) -> Result<()> {
        if self.ways == 0 {
            return Err(Error::config(format!("{key}.ways"), "must be at least 1"));
        }
        if self.entries == 0 || !self.entries.is_multiple_of(self.ways) || !(self.entries / self.ways).is_power_of_two() {
            return Err(Error::config(
                format!("{key}.entries"),
                format!("must be a positive multiple of ways ({}) giving a power-of-two number of sets", self.ways),
            ));
        }
        if !(4..=64).contains(&self.entry_bytes) || !self.entry_bytes.is_power_of_two() {
            return Err(Error::config(format!("{key}.entry_bytes"), "must be a power of two between 4 and 64"));
        }
        Ok(())
    }
}

/// Tag of a translation: VPN of its size, size bit, ASID.
#[inline(always)]
fn tag(asid: u16, va: u64, size: PageSize) -> u64 {
    let huge = u64::from(size != PageSize::K4);
    ((va >> size.shift()) << 17) | (huge << 16) | asid as u64
}

/// One in-memory set-associative array.
pub struct PomArray {
    arr: SetAssoc,
    /// Physical base of each entry's page, per slot.
    pbase: Vec<u64>,
    mask: u64,
    set_bytes: u64,
    lines: u64,
    bytes: u64,
    /// Physical base of the array (set once memory is allocated).
    base: u64,
    order: u32,
}

impl PomArray {
    /// An array of `entries` entries of `entry_bytes` bytes, `ways`-way.
    pub fn new(entries: u32, ways: u32, entry_bytes: u32, policy: Replacement) -> PomArray {
        let sets = (entries / ways) as usize;
        let set_bytes = u64::from(ways) * u64::from(entry_bytes);
        let bytes = u64::from(entries) * u64::from(entry_bytes);
        let pages = bytes.div_ceil(4096).max(1);
        PomArray {
            arr: SetAssoc::new(sets, ways as usize, policy),
            pbase: vec![0; entries as usize],
            mask: sets as u64 - 1,
            set_bytes,
            lines: set_bytes.div_ceil(64),
            bytes,
            base: 0,
            order: pages.next_power_of_two().trailing_zeros(),
        }
    }

    /// Set index of `va` for a translation of `size`.
    #[inline(always)]
    pub fn set_of(&self, va: u64, size: PageSize) -> usize {
        ((va >> size.shift()) & self.mask) as usize
    }

    /// Physical address of the first byte of `set`.
    #[inline(always)]
    pub fn set_addr(&self, set: usize) -> u64 {
        self.base + set as u64 * self.set_bytes
    }

    /// Looks a translation of `size` up (a hit updates replacement state).
    #[inline]
    pub fn lookup(&mut self, asid: u16, va: u64, size: PageSize) -> Option<u64> {
        let set = self.set_of(va, size);
        let w = self.arr.lookup(set, tag(asid, va, size))?;
        Some(self.pbase[self.arr.slot(set, w)])
    }

    /// Fills a translation; returns whether a valid entry was evicted.
    pub fn fill(&mut self, asid: u16, va: u64, t: Translation) -> bool {
        let set = self.set_of(va, t.size);
        let tg = tag(asid, va, t.size);
        let (w, evicted) = match self.arr.probe(set, tg) {
            Some(w) => (w, None),
            None => self.arr.insert(set, tg),
        };
        let slot = self.arr.slot(set, w);
        self.pbase[slot] = t.pbase;
        evicted.is_some()
    }

    /// Invalidates the entries of `asid` for pages of `size` starting in `[start, end)`; returns
    /// (sets or entries read, entries invalidated).
    pub fn invalidate(&mut self, asid: u16, start: u64, end: u64, size: PageSize) -> (u64, u64) {
        let lo = start >> size.shift();
        let hi = end.saturating_sub(1) >> size.shift();
        if end <= start {
            return (0, 0);
        }
        let slots = self.pbase.len() as u64;
        if hi - lo < slots / self.arr.ways() as u64 {
            // Probe each page's set.
            let mut n = 0;
            for vpn in lo..=hi {
                let va = vpn << size.shift();
                if self.arr.invalidate(self.set_of(va, size), tag(asid, va, size)) {
                    n += 1;
                }
            }
            (hi - lo + 1, n)
        } else {
            // A large range: scan the whole array once.
            let huge = u64::from(size != PageSize::K4);
            let n =
                self.arr.invalidate_if(|t| (t & 0xffff) as u16 == asid && (t >> 16) & 1 == huge && (lo..=hi).contains(&(t >> 17))) as u64;
            (slots, n)
        }
    }

    /// Drops every entry of `asid`.
    pub fn invalidate_asid(&mut self, asid: u16) -> u64 {
        self.arr.invalidate_if(|t| (t & 0xffff) as u16 == asid) as u64
    }
}

/// POM-TLB counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PomStats {
    /// Probes (one per L2 TLB miss that reached the walker).
    pub probes: u64,
    /// Probes that hit, 4 KiB / 2 MiB.
    pub hits: [u64; 2],
    /// Radix walks after a POM-TLB miss.
    pub page_walks: u64,
    /// Translations filled.
    pub fills: u64,
    /// Fills that evicted a valid entry.
    pub evictions: u64,
    /// Entries invalidated by shootdowns.
    pub invalidations: u64,
}

/// The POM-TLB driver: the in-memory TLB in front of an x86 radix page table.
pub struct PomTlb {
    radix: Radix,
    cfg: PomTlbConfig,
    /// Arrays: `[4K, 2M]` when split, `[both]` when shared.
    arrays: Vec<PomArray>,
    spaces: u32,
    /// Counters.
    pub stats: PomStats,
}

/// One address space: its radix page table (the POM-TLB itself is shared).
pub struct PomTlbSpace {
    radix: RadixSpace,
}

impl PomTlb {
    /// A driver with the given POM-TLB geometry and radix table.
    pub fn new(cfg: &PomTlbConfig, radix: &super::radix::RadixConfig) -> PomTlb {
        let n = match cfg.partitions {
            Partitions::Split => 2,
            Partitions::Shared => 1,
        };
        let arrays = (0..n).map(|_| PomArray::new(cfg.entries, cfg.ways, cfg.entry_bytes, cfg.replacement)).collect();
        PomTlb { radix: Radix::new(radix), cfg: cfg.clone(), arrays, spaces: 0, stats: PomStats::default() }
    }

    /// Index of the array holding translations of `size`.
    #[inline(always)]
    fn array_for(&self, size: PageSize) -> usize {
        if self.arrays.len() == 1 || size == PageSize::K4 {
            0
        } else {
            1
        }
    }

    /// Bytes of memory the POM-TLB occupies.
    pub fn bytes(&self) -> u64 {
        self.arrays.iter().map(|a| a.bytes).sum()
    }

    /// Probes the POM-TLB for `va`: appends the set reads to `plan` (step 0) and returns the hit.
    fn probe(&mut self, asid: u16, va: u64, plan: &mut WalkPlan) -> Option<Translation> {
        self.stats.probes += 1;
        let mut hit = None;
        for (k, size) in [PageSize::K4, PageSize::M2].into_iter().enumerate() {
            let a = self.array_for(size);
            if let Some(pbase) = self.arrays[a].lookup(asid, va, size) {
                self.stats.hits[k] += 1;
                hit = Some((k, Translation { pbase, size }));
                break;
            }
        }
        plan.fixed_cycles += self.cfg.latency;
        for (k, size) in [PageSize::K4, PageSize::M2].into_iter().enumerate() {
            let arr = &self.arrays[self.array_for(size)];
            let base = arr.set_addr(arr.set_of(va, size));
            let needed = hit.is_none_or(|(h, _)| h == k);
            for l in 0..arr.lines {
                plan.push(base + l * 64, 0, needed);
            }
            plan.unfiltered += arr.lines as u32;
        }
        hit.map(|(_, t)| t)
    }
}

impl Tdb for PomTlb {
    type Space = PomTlbSpace;

    fn create_space(&mut self, asid: u16, env: &mut TdbEnv) -> Result<PomTlbSpace> {
        if self.spaces == 0 {
            for a in &mut self.arrays {
                a.base = env.alloc_table(a.order)?.addr();
            }
        }
        self.spaces += 1;
        Ok(PomTlbSpace { radix: self.radix.create_space(asid, env)? })
    }

    fn destroy_space(&mut self, s: PomTlbSpace, env: &mut TdbEnv) -> Result<()> {
        self.radix.destroy_space(s.radix, env)?;
        self.spaces -= 1;
        if self.spaces == 0 {
            for a in &mut self.arrays {
                a.arr.clear();
                env.free_table(crate::addr::Pfn::containing(a.base), a.order)?;
            }
        }
        Ok(())
    }

    fn find(&mut self, s: &mut PomTlbSpace, va: u64, env: &mut TdbEnv) -> Option<TObj> {
        self.radix.find(&mut s.radix, va, env)
    }

    fn update(&mut self, s: &mut PomTlbSpace, o: &TObj, env: &mut TdbEnv) -> Result<()> {
        self.radix.update(&mut s.radix, o, env)
    }

    fn remove(&mut self, s: &mut PomTlbSpace, va: u64, size: PageSize, env: &mut TdbEnv) -> Option<TObj> {
        self.radix.remove(&mut s.radix, va, size, env)
    }

    fn for_each(&mut self, s: &mut PomTlbSpace, start: u64, end: u64, env: &mut TdbEnv, f: &mut dyn FnMut(&TObj)) {
        self.radix.for_each(&mut s.radix, start, end, env, f)
    }

    fn range_is_empty(&mut self, s: &mut PomTlbSpace, start: u64, end: u64, env: &mut TdbEnv) -> bool {
        self.radix.range_is_empty(&mut s.radix, start, end, env)
    }

    fn table_bytes(&self, s: &PomTlbSpace) -> u64 {
        // The shared POM-TLB is reported on its own (`pomtlb_bytes`), not per address space.
        self.radix.table_bytes(&s.radix)
    }
}

impl Registered for PomTlb {
    type Section = PomTlbConfig;
    const DESIGNS: &'static [Design] = &[Design {
        name: "pomtlb",
        description: "POM-TLB: 64K-entry 16-way SRRIP in-memory L3 TLB per page size, probed before the radix4 walk (4 KiB pages)",
        driver: "pomtlb",
        arch: |a| a.radix.levels = 4,
        settings: &["os.thp=never"],
        nested: None,
    }];

    fn validate(s: &PomTlbConfig, key: &str) -> Result<()> {
        s.validate(key)
    }

    /// Its own section and the page table's (`arch.radix`).
    fn config(arch: &ArchConfig) -> (PomTlbConfig, RadixConfig) {
        (arch.pomtlb.clone(), arch.radix.clone())
    }
}

impl MemoryTlb<PomTlb> for PomTlb {
    fn shootdown(&mut self, _s: &mut PomTlbSpace, asid: u16, start: u64, end: u64, env: &mut TdbEnv) {
        for size in [PageSize::K4, PageSize::M2] {
            let a = self.array_for(size);
            let (read, inv) = self.arrays[a].invalidate(asid, size.align_down(start), end, size);
            env.cost.read(read);
            env.cost.write(inv);
            self.stats.invalidations += inv;
        }
    }
}

impl Driver for PomTlb {
    type Config = (PomTlbConfig, RadixConfig);
    type WalkCache = RadixPwc;

    fn from_config((pomtlb, radix): &(PomTlbConfig, RadixConfig), _seed: u64) -> Result<Self> {
        Ok(PomTlb::new(pomtlb, radix))
    }

    #[inline(always)]
    fn memory_tlb(&mut self) -> Option<&mut dyn MemoryTlb<Self>> {
        Some(self)
    }

    fn new_walk_cache(&self) -> RadixPwc {
        self.radix.new_walk_cache()
    }

    #[inline]
    fn walk(&mut self, s: &mut PomTlbSpace, wc: &mut RadixPwc, asid: u16, va: u64, plan: &mut WalkPlan) -> Option<Translation> {
        if let Some(t) = self.probe(asid, va, plan) {
            return Some(t);
        }
        // Miss: the radix walk follows the probe.
        self.stats.page_walks += 1;
        let n0 = plan.refs.len();
        let r = self.radix.walk(&mut s.radix, wc, asid, va, plan);
        for r in &mut plan.refs[n0..] {
            r.step += 1;
        }
        if let Some(t) = r {
            if t.size == PageSize::K4 || t.size == PageSize::M2 {
                let a = self.array_for(t.size);
                self.stats.fills += 1;
                if self.arrays[a].fill(asid, va, t) {
                    self.stats.evictions += 1;
                }
            }
        }
        r
    }

    fn invalidate_walk_cache(&self, wc: &mut RadixPwc, asid: u16, start: u64, end: u64) {
        self.radix.invalidate_walk_cache(wc, asid, start, end)
    }

    fn leaf_sizes(&self) -> &[PageSize] {
        self.radix.leaf_sizes()
    }

    fn metrics(&self) -> serde_json::Map<String, serde_json::Value> {
        let st = &self.stats;
        let hits = st.hits[0] + st.hits[1];
        let mut m = serde_json::Map::new();
        m.insert("pomtlb_bytes".into(), self.bytes().into());
        m.insert("pomtlb_probes".into(), st.probes.into());
        m.insert("pomtlb_hits".into(), hits.into());
        m.insert("pomtlb_hits_4k".into(), st.hits[0].into());
        m.insert("pomtlb_hits_2m".into(), st.hits[1].into());
        m.insert("pomtlb_hit_rate".into(), (if st.probes == 0 { 0.0 } else { hits as f64 / st.probes as f64 }).into());
        m.insert("pomtlb_page_walks".into(), st.page_walks.into());
        m.insert("pomtlb_fills".into(), st.fills.into());
        m.insert("pomtlb_evictions".into(), st.evictions.into());
        m.insert("pomtlb_invalidations".into(), st.invalidations.into());
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::radix::RadixConfig;
    use crate::os::phys::PhysMem;
    use crate::tapi::{prot, OsCost};

    fn t4(pbase: u64) -> Translation {
        Translation { pbase, size: PageSize::K4 }
    }

    #[test]
    fn set_indexing_and_srrip_on_a_hand_made_sequence() {
        // 4 sets × 2 ways: VPNs 0, 4, 8, 12 all map to set 0; VPN 1 to set 1; 2 MiB VPNs by their own bits.
        let mut a = PomArray::new(8, 2, 16, Replacement::Srrip);
        a.base = 0x10_0000;
        assert_eq!(a.set_of(0x1000, PageSize::K4), 1);
        assert_eq!(a.set_of(0x4000, PageSize::K4), 0);
        assert_eq!(a.set_of(0x60_0000, PageSize::M2), 3);
        assert_eq!(a.set_addr(3), 0x10_0000 + 3 * 32);
        assert_eq!(a.lines, 1);
        let va = |vpn: u64| vpn << 12;
        // fill A(0), B(4): RRPV [2 2]; hit A: [0 2]; fill C(8) ages to [1 3] and evicts B: [1 2].
        assert!(!a.fill(1, va(0), t4(0xa000)));
        assert!(!a.fill(1, va(4), t4(0xb000)));
        assert_eq!(a.lookup(1, va(0), PageSize::K4), Some(0xa000));
        assert!(a.fill(1, va(8), t4(0xc000)));
        assert_eq!(a.lookup(1, va(4), PageSize::K4), None, "B was the SRRIP victim");
        assert_eq!(a.lookup(1, va(0), PageSize::K4), Some(0xa000));
        // The hit on A makes [0 2]; fill D(12) ages to [1 3] and evicts C, not the reused A.
        assert!(a.fill(1, va(12), t4(0xd000)));
        assert_eq!(a.lookup(1, va(8), PageSize::K4), None);
        assert_eq!(a.lookup(1, va(0), PageSize::K4), Some(0xa000));
        // ASIDs and sizes are part of the tag; other sets are untouched.
        assert_eq!(a.lookup(2, va(0), PageSize::K4), None);
        assert!(!a.fill(1, va(1), t4(0x1000)));
        assert_eq!(a.lookup(1, va(1), PageSize::K4), Some(0x1000));
        // Shootdown of [0, 16K) for ASID 1 drops A (vpn 0) and the vpn-1 entry, not D (vpn 12).
        assert_eq!(a.invalidate(1, 0, 0x4000, PageSize::K4).1, 2);
        assert_eq!(a.lookup(1, va(0), PageSize::K4), None);
        assert_eq!(a.lookup(1, va(12), PageSize::K4), Some(0xd000));
        // A range larger than the array is invalidated by one scan.
        assert_eq!(a.invalidate(1, 0, 1 << 30, PageSize::K4), (8, 1));
    }

    #[test]
    fn miss_walks_and_fills_then_hits_in_one_step() {
        let cfg = PomTlbConfig::default();
        let mut d = PomTlb::new(&cfg, &RadixConfig::default());
        let mut phys = PhysMem::new(1 << 30, 14);
        let mut cost = OsCost::default();
        let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
        let mut s = d.create_space(1, &mut env).unwrap();
        assert_eq!(d.bytes(), 2 << 20, "64K × 16 B per partition, two partitions");
        d.update(&mut s, &TObj::new(0x1234_5000, 0x8000, PageSize::K4, prot::RW), &mut env).unwrap();
        let mut wc = d.new_walk_cache();
        let mut plan = WalkPlan::default();
        let t = d.walk(&mut s, &mut wc, 1, 0x1234_5678, &mut plan).unwrap();
        assert_eq!(t.paddr(0x1234_5678), 0x8678);
        // 4 lines per partition (16 ways × 16 B), both needed on a miss, then 4 radix levels.
        assert_eq!(plan.refs.iter().filter(|r| r.step == 0).count(), 8);
        assert!(plan.refs.iter().filter(|r| r.step == 0).all(|r| r.needed));
        assert_eq!(plan.refs.len(), 8 + 4);
        assert_eq!(plan.refs.last().unwrap().step, 4);
        plan.clear();
        let t2 = d.walk(&mut s, &mut wc, 1, 0x1234_5000, &mut plan).unwrap();
        assert_eq!(t2, t);
        assert_eq!(plan.refs.len(), 8, "a hit is the probe alone");
        assert_eq!(plan.refs.iter().filter(|r| r.needed).count(), 4, "only the 4K partition is waited for");
        assert_eq!((d.stats.probes, d.stats.hits[0], d.stats.page_walks), (2, 1, 1));
        // The shootdown invalidates the in-memory entry: the next walk goes to the table again.
        d.remove(&mut s, 0x1234_5000, PageSize::K4, &mut env).unwrap();
        d.shootdown(&mut s, 1, 0x1234_5000, 0x1234_6000, &mut env);
        d.invalidate_walk_cache(&mut wc, 1, 0x1234_5000, 0x1234_6000);
        assert_eq!(d.stats.invalidations, 1);
        plan.clear();
        assert!(d.walk(&mut s, &mut wc, 1, 0x1234_5000, &mut plan).is_none());
        // The set addresses lie in the region allocated for the POM-TLB.
        let base = d.arrays[0].base;
        assert!(plan.refs[0].paddr >= base && plan.refs[0].paddr < base + (1 << 20));
    }
}
