//! Redundant Memory Mappings (Karakostas et al., "Redundant Memory Mappings for Fast Access to
//! Large Memories", ISCA'15): *range translations* — a virtual range mapped to a contiguous
//! physical range by one (base, limit, offset) entry — kept beside (redundantly to) an ordinary
//! x86 radix page table that still maps every page.
//!
//! - **Ranges come from eager paging** (`os.eager_paging`, OS policy in `os::eager`): the OS
//!   allocates a VMA as few contiguous runs as it can and maps each with
//!   [`Tdb::map_range`]; this driver's override maps the pages in the radix table *and* inserts
//!   the range into the range table. Pages mapped one at a time (demand paging) get no range.
//!   A range holds pages of one size (4 KiB or 2 MiB); checked mode compares the page a range
//!   translation yields with the OS's mapping, size included.
//! - **Range table**: per address space, in simulated memory, a B+-tree of 4 KiB nodes (leaves:
//!   128 entries of 32 bytes — base, limit, offset, attributes; inner nodes: 256 (key, child)
//!   pairs of 16 bytes). Its walk is a binary search in each node from the root, one memory
//!   reference per distinct line probed, each dependent on the previous.
//! - **Range TLB**: per core, `range_tlb_entries` (32, Utopia Table 1 and Virtuoso) fully
//!   associative, LRU, `range_tlb_latency` cycles (8, Virtuoso), looked up on an L1 TLB miss beside
//!   the L2 TLB through the side-lookup hook (`mmu.side_parallel` chooses parallel or serial). A hit
//!   gives the page's translation. On a miss the range-table walk runs: in the paper it runs in
//!   the background while the page walk proceeds, and fills the range TLB for later accesses
//!   (`range_walk = "background"`, the default: its references travel the caches, marked not
//!   needed, so they cost no latency). `"blocking"` makes it a critical-path lookup whose hit
//!   serves the access instead of the page walk.
//! - **Coherence**: changing or removing a translation inside a range (munmap, khugepaged
//!   collapse, migration) trims the range around it (`carve`); the OS's shootdown of the changed
//!   pages drops overlapping range-TLB entries ([`Driver::invalidate_walk_cache`]).

use super::radix::{Radix, RadixConfig, RadixPwc, RadixSpace};
use super::{ArchConfig, Design, Registered};
use crate::addr::{PageSize, Pfn};
use crate::error::{Error, Result};
use crate::mem::assoc::{Replacement, SetAssoc};
use crate::tapi::{generic_map_range, Driver, SideLookup, TObj, Tdb, TdbEnv, Translation, WalkPlan};

/// When the range-table walk that follows a range-TLB miss is waited for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RangeWalk {
    /// In the background (RMM paper): the page walk serves the access, the range TLB is filled.
    Background,
    /// On the critical path: a range-table hit serves the access.
    Blocking,
}

/// RMM configuration (`[arch.rmm]`; the redundant page table uses `[arch.radix]`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RmmConfig {
    /// Range-TLB entries, fully associative (Utopia Table 1: 32-entry range lookaside buffer;
    /// Virtuoso: 32-entry fully associative).
    pub range_tlb_entries: u32,
    /// Range-TLB lookup latency in cycles (Virtuoso: 8; reference/parameters.md).
    pub range_tlb_latency: u32,
    /// Background (paper) or blocking range-table walks.
    pub range_walk: RangeWalk,
}

impl Default for RmmConfig {
    fn default() -> Self {
        RmmConfig { range_tlb_entries: 32, range_tlb_latency: 8, range_walk: RangeWalk::Background }
    }
}

impl RmmConfig {
    /// Checks the range TLB.
    pub fn validate(&self, key: &str) -> Result<()> {
        if self.range_tlb_entries == 0 || self.range_tlb_entries > 4096 {
            return Err(Error::config(format!("{key}.range_tlb_entries"), "must be between 1 and 4096"));
        }
        Ok(())
    }
}

/// One range translation: `[start, end)` maps to `[pa, pa + end - start)` with pages of `size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// First virtual byte (aligned to `size`).
    pub start: u64,
    /// One past the last virtual byte.
    pub end: u64,
    /// Physical address of `start`.
    pub pa: u64,
    /// Size of the pages the range's bytes are mapped with.
    pub size: PageSize,
    /// Protection.
    pub prot: u8,
}

impl Range {
    /// Whether `va` lies in the range.
    #[inline(always)]
    pub fn contains(&self, va: u64) -> bool {
        self.start <= va && va < self.end
    }

    /// The page translation of `va` (in the range).
    #[inline(always)]
    pub fn translate(&self, va: u64) -> Translation {
        Translation { pbase: self.pa + (self.size.align_down(va) - self.start), size: self.size }
    }

    /// Bytes covered.
    pub fn bytes(&self) -> u64 {
        self.end - self.start
    }
}

/// Range entries per 4 KiB leaf (32-byte entries).
const LEAF: usize = 4096 / 32;
/// Children per 4 KiB inner node (16-byte key + pointer).
const INNER: usize = 4096 / 16;

/// The range table of one address space: ranges sorted by start, disjoint, laid out as a B+-tree
/// in simulated memory (`levels[0]` = leaf pages, the last level = the root).
pub struct RangeTable {
    ranges: Vec<Range>,
    levels: Vec<Vec<Pfn>>,
}

impl RangeTable {
    /// An empty table (no memory yet; [`RangeTable::fit`] allocates the root).
    pub fn new() -> RangeTable {
        RangeTable { ranges: Vec::new(), levels: Vec::new() }
    }

    /// Ranges in the table.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether it has no range.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The ranges, sorted.
    pub fn ranges(&self) -> &[Range] {
        &self.ranges
    }

    /// Pages of simulated memory the table occupies.
    pub fn pages(&self) -> u64 {
        self.levels.iter().map(|l| l.len() as u64).sum()
    }

    /// Index of the range containing `va`.
    pub fn find(&self, va: u64) -> Option<usize> {
        let i = self.ranges.partition_point(|r| r.start <= va);
        (i > 0 && self.ranges[i - 1].contains(va)).then(|| i - 1)
    }

    /// Makes the node pages match the number of ranges; returns the change in pages.
    pub fn fit(&mut self, env: &mut TdbEnv) -> Result<i64> {
        let mut want = vec![self.ranges.len().div_ceil(LEAF).max(1)];
        while *want.last().expect("one level") > 1 {
            let c = want.last().expect("one level").div_ceil(INNER);
            want.push(c);
        }
        let before = self.pages() as i64;
        while self.levels.len() > want.len() {
            for p in self.levels.pop().expect("a level") {
                env.free_table(p, 0)?;
            }
        }
        self.levels.resize_with(want.len(), Vec::new);
        for (l, &w) in want.iter().enumerate() {
            while self.levels[l].len() > w {
                let p = self.levels[l].pop().expect("a page");
                env.free_table(p, 0)?;
            }
            while self.levels[l].len() < w {
                let p = env.alloc_table(0)?;
                self.levels[l].push(p);
            }
        }
        Ok(self.pages() as i64 - before)
    }

    /// Inserts `r`, which overlaps no range.
    pub fn insert(&mut self, r: Range, env: &mut TdbEnv) -> Result<()> {
        let i = self.ranges.partition_point(|x| x.start < r.start);
        if (i > 0 && self.ranges[i - 1].end > r.start) || (i < self.ranges.len() && self.ranges[i].start < r.end) {
            return Err(Error::Check(format!("range {:#x}..{:#x} overlaps another range", r.start, r.end)));
        }
        env.cost.read(self.levels.len() as u64);
        env.cost.write(1);
        self.ranges.insert(i, r);
        Ok(())
    }

    /// Removes `[lo, hi)` from every range overlapping it, keeping the parts outside (a range is
    /// trimmed or split). Returns how many ranges it changed.
    pub fn carve(&mut self, lo: u64, hi: u64, env: &mut TdbEnv) -> usize {
        let first = self.ranges.partition_point(|r| r.end <= lo);
        let mut last = first;
        while last < self.ranges.len() && self.ranges[last].start < hi {
            last += 1;
        }
        env.cost.read(self.levels.len() as u64);
        if first == last {
            return 0;
        }
        let mut keep = Vec::new();
        for r in &self.ranges[first..last] {
            let align = r.size.bytes();
            if r.start < lo && PageSize::is_aligned(r.size, lo) {
                keep.push(Range { end: lo, ..*r });
            }
            if hi < r.end && hi.is_multiple_of(align) {
                keep.push(Range { start: hi, pa: r.pa + (hi - r.start), ..*r });
            }
        }
        env.cost.write((last - first + keep.len()) as u64);
        self.ranges.splice(first..last, keep);
        last - first
    }

    /// The hardware range-table walk for `va`: a binary search in each node from the root, one
    /// reference per distinct line probed (each a step of its own), appended to `plan` as
    /// `needed` or not. Returns the range containing `va`.
    pub fn walk(&self, va: u64, plan: &mut WalkPlan, needed: bool) -> Option<Range> {
        let mut step = 0u8;
        let mut last_line = u64::MAX;
        let mut touch = |plan: &mut WalkPlan, addr: u64| {
            let line = addr & !63;
            if line != last_line {
                plan.push(line, step, needed);
                step = step.saturating_add(1);
                last_line = line;
            }
        };
        let n = self.ranges.len();
        let depth = self.levels.len();
        let mut node = 0usize;
        // Inner levels, root first: find the last child whose first key is <= va.
        for lvl in (1..depth).rev() {
            let span = LEAF * INNER.pow(lvl as u32 - 1);
            let children = self.levels[lvl - 1].len();
            let first = node * INNER;
            let cnt = INNER.min(children - first);
            let base = self.levels[lvl][node].addr();
            let (mut lo, mut hi) = (0, cnt);
            while lo < hi {
                let mid = (lo + hi) / 2;
                touch(plan, base + (mid * 16) as u64);
                if self.ranges[(first + mid) * span].start <= va {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            node = first + lo.saturating_sub(1);
        }
        let base = self.levels[0][node].addr();
        let first = node * LEAF;
        let cnt = LEAF.min(n.saturating_sub(first));
        if cnt == 0 {
            touch(plan, base);
            return None;
        }
        let (mut lo, mut hi) = (0, cnt);
        while lo < hi {
            let mid = (lo + hi) / 2;
            touch(plan, base + (mid * 32) as u64);
            if self.ranges[first + mid].start <= va {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let r = self.ranges[first + lo.checked_sub(1)?];
        r.contains(va).then_some(r)
    }
}

impl Default for RangeTable {
    fn default() -> Self {
        RangeTable::new()
    }
}

/// A fully associative range TLB with LRU replacement.
pub struct RangeTlb {
    arr: SetAssoc,
    ents: Vec<(u16, Range)>,
    next: u64,
}

impl RangeTlb {
    /// `entries` entries.
    pub fn new(entries: u32) -> RangeTlb {
        let r = Range { start: 0, end: 0, pa: 0, size: PageSize::K4, prot: 0 };
        RangeTlb { arr: SetAssoc::new(1, entries as usize, Replacement::Lru), ents: vec![(0, r); entries as usize], next: 0 }
    }

    /// The range of `asid` containing `va` (a hit makes it most recently used).
    #[inline]
    pub fn lookup(&mut self, asid: u16, va: u64) -> Option<Range> {
        let w = (0..self.ents.len()).find(|&w| {
            let (a, r) = &self.ents[w];
            *a == asid && r.contains(va) && self.arr.tag_at(0, w).is_some()
        })?;
        self.arr.touch(0, w);
        Some(self.ents[w].1)
    }

    /// Caches `r` for `asid` (the caller looked it up first).
    pub fn insert(&mut self, asid: u16, r: Range) {
        self.next += 1;
        let (w, _) = self.arr.insert(0, self.next);
        self.ents[w] = (asid, r);
    }

    /// Drops the entries of `asid` overlapping `[start, end)`.
    pub fn invalidate(&mut self, asid: u16, start: u64, end: u64) {
        for w in 0..self.ents.len() {
            let (a, r) = self.ents[w];
            if a == asid && r.start < end && start < r.end && self.arr.tag_at(0, w).is_some() {
                self.arr.invalidate_way(0, w);
            }
        }
    }
}

/// Per-core structures: the radix PWCs and the range TLB.
pub struct RmmWc {
    pwc: RadixPwc,
    rtlb: RangeTlb,
}

/// One address space: the (redundant) radix page table and the range table.
pub struct RmmSpace {
    radix: RadixSpace,
    table: RangeTable,
}

impl RmmSpace {
    /// The range table.
    pub fn table(&self) -> &RangeTable {
        &self.table
    }
}

/// RMM counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RmmStats {
    /// Ranges created by `map_range` (eager paging).
    pub ranges_created: u64,
    /// Bytes those ranges covered when created.
    pub range_bytes_created: u64,
    /// Ranges alive now (after trims and splits), across address spaces.
    pub ranges_live: u64,
    /// Ranges trimmed or split because a translation inside changed.
    pub ranges_carved: u64,
    /// Range-TLB lookups (L1 TLB misses that missed the L2 TLB).
    pub rtlb_lookups: u64,
    /// Range-TLB hits.
    pub rtlb_hits: u64,
    /// Range-table walks (range-TLB misses).
    pub range_walks: u64,
    /// Range-table walks that found a range (and filled the range TLB).
    pub range_walk_hits: u64,
    /// Pages of range tables, across address spaces.
    pub table_pages: u64,
}

/// The RMM driver.
pub struct Rmm {
    radix: Radix,
    cfg: RmmConfig,
    /// Counters.
    pub stats: RmmStats,
}

impl Rmm {
    /// A driver with the given range TLB and radix table.
    pub fn new(cfg: &RmmConfig, radix: &RadixConfig) -> Rmm {
        Rmm { radix: Radix::new(radix), cfg: cfg.clone(), stats: RmmStats::default() }
    }

    fn refit(&mut self, s: &mut RmmSpace, env: &mut TdbEnv) -> Result<()> {
        let d = s.table.fit(env)?;
        self.stats.table_pages = (self.stats.table_pages as i64 + d) as u64;
        Ok(())
    }

    /// Removes `[lo, hi)` from the ranges (a translation there changed).
    fn carve(&mut self, s: &mut RmmSpace, lo: u64, hi: u64, env: &mut TdbEnv) -> Result<()> {
        let before = s.table.len() as i64;
        let n = s.table.carve(lo, hi, env);
        if n > 0 {
            self.stats.ranges_carved += n as u64;
            self.stats.ranges_live = (self.stats.ranges_live as i64 + s.table.len() as i64 - before) as u64;
            self.refit(s, env)?;
        }
        Ok(())
    }
}

impl Tdb for Rmm {
    type Space = RmmSpace;

    fn create_space(&mut self, asid: u16, env: &mut TdbEnv) -> Result<RmmSpace> {
        let mut s = RmmSpace { radix: self.radix.create_space(asid, env)?, table: RangeTable::new() };
        self.refit(&mut s, env)?;
        Ok(s)
    }

    fn destroy_space(&mut self, s: RmmSpace, env: &mut TdbEnv) -> Result<()> {
        self.stats.ranges_live -= s.table.len() as u64;
        self.stats.table_pages -= s.table.pages();
        for l in s.table.levels {
            for p in l {
                env.free_table(p, 0)?;
            }
        }
        self.radix.destroy_space(s.radix, env)
    }

    fn find(&mut self, s: &mut RmmSpace, va: u64, env: &mut TdbEnv) -> Option<TObj> {
        self.radix.find(&mut s.radix, va, env)
    }

    fn update(&mut self, s: &mut RmmSpace, o: &TObj, env: &mut TdbEnv) -> Result<()> {
        self.radix.update(&mut s.radix, o, env)?;
        // A range stays only if it still says what the page table says about this page.
        let consistent = s
            .table
            .find(o.va)
            .map(|i| s.table.ranges[i])
            .is_some_and(|r| r.size == o.size && r.prot == o.prot && r.translate(o.va).pbase == o.pa && o.end() <= r.end);
        if !consistent {
            self.carve(s, o.va, o.end(), env)?;
        }
        Ok(())
    }

    fn remove(&mut self, s: &mut RmmSpace, va: u64, size: PageSize, env: &mut TdbEnv) -> Option<TObj> {
        let old = self.radix.remove(&mut s.radix, va, size, env)?;
        // Table pages come back to memory on a trim; a failure here would be a simulator bug
        // surfaced by checked mode (the range would stay), so it is not propagated.
        let _ = self.carve(s, old.va, old.end(), env);
        Some(old)
    }

    fn for_each(&mut self, s: &mut RmmSpace, start: u64, end: u64, env: &mut TdbEnv, f: &mut dyn FnMut(&TObj)) {
        self.radix.for_each(&mut s.radix, start, end, env, f)
    }

    fn range_is_empty(&mut self, s: &mut RmmSpace, start: u64, end: u64, env: &mut TdbEnv) -> bool {
        self.radix.range_is_empty(&mut s.radix, start, end, env)
    }

    /// Maps every page in the radix table (as the default would) and records the range.
    fn map_range(&mut self, s: &mut RmmSpace, first: &TObj, len: u64, env: &mut TdbEnv) -> Result<()> {
        generic_map_range(&mut self.radix, &mut s.radix, first, len, env)?;
        if len == 0 {
            return Ok(());
        }
        self.carve(s, first.va, first.va + len, env)?;
        let r = Range { start: first.va, end: first.va + len, pa: first.pa, size: first.size, prot: first.prot };
        s.table.insert(r, env)?;
        self.refit(s, env)?;
        self.stats.ranges_created += 1;
        self.stats.range_bytes_created += len;
        self.stats.ranges_live += 1;
        Ok(())
    }

    fn table_bytes(&self, s: &RmmSpace) -> u64 {
        self.radix.table_bytes(&s.radix) + s.table.pages() * 4096
    }
}

impl Registered for Rmm {
    type Section = RmmConfig;
    const DESIGNS: &'static [Design] = &[Design {
        name: "rmm",
        description: "RMM: eager paging into ranges, 32-entry range TLB beside the L2 TLB, redundant radix4 (4 KiB pages)",
        driver: "rmm",
        arch: |a| a.radix.levels = 4,
        settings: &["os.thp=never", "os.eager_paging=true"],
        nested: None,
    }];

    fn validate(s: &RmmConfig, key: &str) -> Result<()> {
        s.validate(key)
    }

    /// Its own section and the redundant page table's (`arch.radix`).
    fn config(arch: &ArchConfig) -> (RmmConfig, RadixConfig) {
        (arch.rmm.clone(), arch.radix.clone())
    }
}

/// The range TLB, looked up beside the L2 TLB on its misses; a miss walks the range table.
impl SideLookup<Rmm> for Rmm {
    fn side_lookup(&mut self, s: &mut RmmSpace, wc: &mut RmmWc, asid: u16, va: u64, plan: &mut WalkPlan) -> Option<Translation> {
        plan.fixed_cycles += self.cfg.range_tlb_latency;
        self.stats.rtlb_lookups += 1;
        if let Some(r) = wc.rtlb.lookup(asid, va) {
            self.stats.rtlb_hits += 1;
            if plan.checked && s.table.find(va).map(|i| s.table.ranges[i]) != Some(r) {
                plan.violation = Some("stale range-TLB entry (range trimmed or removed without shootdown)");
            }
            return Some(r.translate(va));
        }
        let blocking = self.cfg.range_walk == RangeWalk::Blocking;
        self.stats.range_walks += 1;
        let r = s.table.walk(va, plan, blocking)?;
        self.stats.range_walk_hits += 1;
        wc.rtlb.insert(asid, r);
        blocking.then(|| r.translate(va))
    }
}

impl Driver for Rmm {
    type Config = (RmmConfig, RadixConfig);
    type WalkCache = RmmWc;

    fn from_config((rmm, radix): &(RmmConfig, RadixConfig), _seed: u64) -> Result<Self> {
        Ok(Rmm::new(rmm, radix))
    }

    #[inline(always)]
    fn side(&mut self) -> Option<&mut dyn SideLookup<Self>> {
        Some(self)
    }

    fn new_walk_cache(&self) -> RmmWc {
        RmmWc { pwc: self.radix.new_walk_cache(), rtlb: RangeTlb::new(self.cfg.range_tlb_entries) }
    }

    #[inline]
    fn walk(&mut self, s: &mut RmmSpace, wc: &mut RmmWc, asid: u16, va: u64, plan: &mut WalkPlan) -> Option<Translation> {
        self.radix.walk(&mut s.radix, &mut wc.pwc, asid, va, plan)
    }

    fn invalidate_walk_cache(&self, wc: &mut RmmWc, asid: u16, start: u64, end: u64) {
        self.radix.invalidate_walk_cache(&mut wc.pwc, asid, start, end);
        wc.rtlb.invalidate(asid, start, end);
    }

    fn leaf_sizes(&self) -> &[PageSize] {
        self.radix.leaf_sizes()
    }

    fn user_va_limit(&self) -> u64 {
        self.radix.user_va_limit()
    }

    fn restart_metrics(&mut self) {
        // Live ranges and range-table pages are state, not events.
        let RmmStats { ranges_live, table_pages, .. } = self.stats;
        self.stats = RmmStats { ranges_live, table_pages, ..RmmStats::default() };
    }

    fn metrics(&self) -> serde_json::Map<String, serde_json::Value> {
        let st = &self.stats;
        let per = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let mut m = serde_json::Map::new();
        m.insert("rmm_ranges_created".into(), st.ranges_created.into());
        m.insert("rmm_range_avg_bytes".into(), per(st.range_bytes_created, st.ranges_created).into());
        m.insert("rmm_ranges_live".into(), st.ranges_live.into());
        m.insert("rmm_ranges_carved".into(), st.ranges_carved.into());
        m.insert("rmm_range_tlb_lookups".into(), st.rtlb_lookups.into());
        m.insert("rmm_range_tlb_hits".into(), st.rtlb_hits.into());
        m.insert("rmm_range_tlb_hit_rate".into(), per(st.rtlb_hits, st.rtlb_lookups).into());
        m.insert("rmm_range_walks".into(), st.range_walks.into());
        m.insert("rmm_range_walk_hits".into(), st.range_walk_hits.into());
        m.insert("rmm_range_table_bytes".into(), (st.table_pages * 4096).into());
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::phys::PhysMem;
    use crate::tapi::{prot, OsCost};

    fn range(start: u64, pages: u64, pa: u64) -> Range {
        Range { start, end: start + pages * 4096, pa, size: PageSize::K4, prot: prot::RW }
    }

    #[test]
    fn range_table_insert_lookup_carve_and_walk() {
        let mut phys = PhysMem::new(1 << 30, 14);
        let mut cost = OsCost::default();
        let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
        let mut t = RangeTable::new();
        t.fit(&mut env).unwrap();
        assert_eq!(t.pages(), 1);
        // 300 ranges of 16 pages with 16-page holes: three leaves and a root.
        for i in 0..300u64 {
            t.insert(range(i * 0x20_000, 16, 0x1000_0000 + i * 0x10_000), &mut env).unwrap();
        }
        assert!(t.insert(range(0x5000, 1, 0), &mut env).is_err(), "overlap refused");
        t.fit(&mut env).unwrap();
        assert_eq!(t.pages(), 3 + 1);
        for i in [0u64, 1, 127, 128, 255, 256, 299] {
            let va = i * 0x20_000 + 0x3456;
            let r = t.ranges()[t.find(va).unwrap()];
            assert_eq!(r.translate(va).paddr(va), 0x1000_0000 + i * 0x10_000 + 0x3456);
            assert!(t.find(va + 0x10_000).is_none(), "hole after range {i}");
            let mut plan = WalkPlan::default();
            assert_eq!(t.walk(va, &mut plan, true), Some(r));
            // Root: binary search over 3 children (2 lines at most), leaf: ≤ 7 probes.
            assert!(plan.refs.len() >= 2 && plan.refs.len() <= 9, "{} refs", plan.refs.len());
            assert_eq!(plan.serial_steps() as usize, plan.refs.len(), "each probe waits for the previous");
            let mut plan = WalkPlan::default();
            assert_eq!(t.walk(va + 0x10_000, &mut plan, false), None);
            assert!(plan.refs.iter().all(|r| !r.needed));
        }
        // Carving a page out of the middle of a range splits it; out of an end trims it.
        assert_eq!(t.carve(0x4000, 0x5000, &mut env), 1);
        assert_eq!(t.len(), 301);
        assert!(t.find(0x4000).is_none());
        assert_eq!(t.ranges()[t.find(0x5000).unwrap()].translate(0x5000).pbase, 0x1000_5000);
        assert_eq!(t.carve(0, 0x1000, &mut env), 1);
        assert_eq!(t.ranges()[0].start, 0x1000);
        assert_eq!(t.carve(0x40_0000, 0x40_0000 + 0x20_000 * 10, &mut env), 10);
        assert_eq!(t.len(), 291);
    }

    #[test]
    fn range_tlb_lru_and_invalidation() {
        let mut tlb = RangeTlb::new(2);
        let (a, b, c) = (range(0, 4, 0x10_000), range(0x10_000, 4, 0x20_000), range(0x20_000, 4, 0x30_000));
        tlb.insert(1, a);
        tlb.insert(1, b);
        assert_eq!(tlb.lookup(1, 0x2000), Some(a));
        assert_eq!(tlb.lookup(2, 0x2000), None, "ASID-tagged");
        tlb.insert(1, c); // evicts b, the least recently used
        assert_eq!(tlb.lookup(1, 0x10_000), None);
        assert_eq!(tlb.lookup(1, 0x20_000), Some(c));
        tlb.invalidate(1, 0x3000, 0x4000);
        assert_eq!(tlb.lookup(1, 0x0), None, "overlapping entry dropped");
        assert_eq!(tlb.lookup(1, 0x20_000), Some(c));
    }

    #[test]
    fn map_range_records_the_range_and_side_lookup_uses_it() {
        let mut d = Rmm::new(&RmmConfig::default(), &RadixConfig::default());
        let mut phys = PhysMem::new(1 << 30, 14);
        let mut cost = OsCost::default();
        let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
        let mut s = d.create_space(1, &mut env).unwrap();
        let va = 0x10_0000_0000u64;
        d.map_range(&mut s, &TObj::new(va, 0x2000_0000, PageSize::K4, prot::RW), 64 << 20, &mut env).unwrap();
        assert_eq!(s.table().len(), 1);
        // Every page is in the redundant radix table too.
        assert_eq!(d.find(&mut s, va + 0x12_3456, &mut env).unwrap().pa, 0x2012_3000);
        let mut wc = d.new_walk_cache();
        let mut plan = WalkPlan { checked: true, ..WalkPlan::default() };
        // First lookup: range-TLB miss, background walk fills it, nothing returned.
        assert!(d.side_lookup(&mut s, &mut wc, 1, va + 0x5000, &mut plan).is_none());
        assert!(!plan.refs.is_empty() && plan.refs.iter().all(|r| !r.needed));
        plan.clear();
        let t = d.side_lookup(&mut s, &mut wc, 1, va + 0x3f_f123, &mut plan).unwrap();
        assert_eq!(t, Translation { pbase: 0x203f_f000, size: PageSize::K4 });
        assert!(plan.refs.is_empty());
        assert_eq!(plan.fixed_cycles, 8);
        assert_eq!((d.stats.rtlb_lookups, d.stats.rtlb_hits, d.stats.range_walks), (2, 1, 1));
        // Unmapping a page splits the range; the shootdown drops the range-TLB entry.
        d.remove(&mut s, va + 0x10_0000, PageSize::K4, &mut env).unwrap();
        assert_eq!(s.table().len(), 2);
        d.invalidate_walk_cache(&mut wc, 1, va + 0x10_0000, va + 0x10_1000);
        plan.clear();
        assert!(d.side_lookup(&mut s, &mut wc, 1, va + 0x10_0000, &mut plan).is_none());
        assert!(plan.violation.is_none());
        // Mapping the hole again adds no range; remapping a page of a range elsewhere splits it.
        d.update(&mut s, &TObj::new(va + 0x10_0000, 0x7000_0000, PageSize::K4, prot::RW), &mut env).unwrap();
        assert_eq!(s.table().len(), 2);
        d.update(&mut s, &TObj::new(va + 0x20_0000, 0x7000_1000, PageSize::K4, prot::RW), &mut env).unwrap();
        assert_eq!(s.table().len(), 3);
        // Setting an attribute that the range agrees with keeps it.
        let mut same = d.find(&mut s, va + 0x30_0000, &mut env).unwrap();
        same.accessed = true;
        d.update(&mut s, &same, &mut env).unwrap();
        assert_eq!(s.table().len(), 3);
        for r in s.table().ranges().to_vec() {
            let mut a = r.start;
            while a < r.end {
                assert_eq!(d.find(&mut s, a, &mut env).unwrap().pa, r.translate(a).pbase, "range agrees with the page table");
                a += 0x1000;
            }
        }
        assert_eq!(d.stats.ranges_live, 3);
        assert_eq!(d.table_bytes(&s) % 4096, 0);
    }
}
