//! x86-64 radix page table, 4 or 5 levels, with 4 KiB / 2 MiB / 1 GiB leaves, and x86 split
//! page-walk caches (PWCs).
//!
//! Tables are real 4 KiB pages from the simulated buddy allocator; a walk reads the 8-byte entry at
//! `table_pfn * 4096 + index * 8` at every level, so its references have real physical addresses.
//! Host-side each table keeps its 512 entries plus the host index of each child, so walking needs no
//! hashing.
//!
//! PWC semantics (Intel SDM §4.10.3): a cache for level-L entries is keyed by the VA bits that
//! select a level-L entry (`va >> (12 + 9 (L-1))`) and holds the table that entry points to; a hit
//! skips exactly the levels above and including L. All PWCs are probed in parallel (one latency),
//! the deepest hit wins. The entry format and the PWCs live in [`super::x86pte`], shared with FPT.
//! `arch.radix.pwc_mode = "champsim"` turns the PWCs into ChampSim's page-structure caches, whose
//! hit at level L re-reads the level-L entry instead of skipping it ([`PwcMode::Champsim`]).
//!
//! Invariant kept by `remove`: no table other than the root is ever empty (an emptied table is freed
//! and its parent entry cleared, as Linux's `free_pgtables` does at unmap), so "is this 2 MiB range
//! empty" is one PD-entry read — the check EMT contrasts with ECPT's 512 lookups.

pub use super::x86pte::PwcMode;
use super::x86pte::{decode, default_pwcs, encode, entry_shift, leaf_level, level_size, validate_pwcs, SplitPwc};
use super::x86pte::{ACCESSED, ADDR_MASK, HUGE, PRESENT, WRITE};
use super::{ArchConfig, Design, Registered};
use crate::addr::{PageSize, Pfn};
use crate::error::{Error, Result};
use crate::tapi::{Driver, TObj, Tdb, TdbEnv, Translation, WalkPlan};
use std::cell::Cell;

pub use super::x86pte::PwcLevel;

/// Radix driver configuration.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RadixConfig {
    /// 4 (48-bit VA) or 5 (57-bit VA, LA57).
    pub levels: u8,
    /// Split page-walk caches.
    pub pwc: Vec<PwcLevel>,
    /// Where a PWC hit resumes the walk: `"x86"` (skip the cached level) or `"champsim"`
    /// (ChampSim's PSCs: re-read it).
    pub pwc_mode: PwcMode,
}

impl Default for RadixConfig {
    /// Utopia MICRO'23 Table 1: 3 split PWCs, 32 entries, 4-way, 2 cycles; x86 semantics.
    fn default() -> Self {
        RadixConfig { levels: 4, pwc: default_pwcs(), pwc_mode: PwcMode::X86 }
    }
}

impl RadixConfig {
    /// Checks levels and PWC geometry.
    pub fn validate(&self, key: &str) -> Result<()> {
        if !(self.levels == 4 || self.levels == 5) {
            return Err(Error::config(format!("{key}.levels"), format!("must be 4 or 5, found {}", self.levels)));
        }
        validate_pwcs(&self.pwc, key, 5)
    }
}

const NO_CHILD: u32 = u32::MAX;

#[inline(always)]
fn index(va: u64, level: u8) -> usize {
    ((va >> entry_shift(level)) & 511) as usize
}

/// The translation a present leaf entry `e` at `level` gives.
#[inline(always)]
fn leaf_translation(e: u64, level: u8) -> Translation {
    let size = level_size(level);
    Translation { pbase: e & ADDR_MASK & !size.offset_mask(), size }
}

/// One 4 KiB table page's entries and the ids of the tables they point to. Kept inline in
/// [`RadixSpace::nodes`], one large block rather than a small allocation per table, so that the
/// host backs the tables a run reads at random with huge pages ([`crate::hostmem`]).
struct Node {
    pte: [u64; 512],
    child: [u32; 512],
}

/// What the OS keeps about a table page beside its entries: in [`RadixSpace::heads`], a compact
/// array the host keeps in its caches (a walk reads the frame of every table it enters, and the
/// entries of a random page's table are a host cache miss of their own).
#[derive(Clone, Copy)]
struct Head {
    pfn: Pfn,
    /// Present entries (tables or leaves).
    used: u16,
    /// Whether the slot holds a table (a freed slot waits in [`RadixSpace::free_ids`]).
    live: bool,
}

/// One address space's page table.
pub struct RadixSpace {
    nodes: Vec<Node>,
    /// Each table's [`Head`], by the same id.
    heads: Vec<Head>,
    free_ids: Vec<u32>,
    root: u32,
    tables: u64,
    /// The host prefetch's shortcut past the upper levels ([`Driver::prefetch`]): for a few
    /// 1 GiB regions, `region << 32 | id` of the level-2 table covering it ([`NO_NEAR`] if
    /// none), so the prefetch reads that table's entry and the leaf below instead of walking
    /// down from the root, a chain of dependent host loads that is most of its cost. Host-side
    /// only: no walk, count or result reads it. A table's id is reused only after it is freed,
    /// and [`RadixSpace::free_node`] forgets them all, so an id here is always the live table of
    /// its region.
    near: [Cell<u64>; NEAR],
}

/// Regions [`RadixSpace::near`] remembers (by the low bits of `va >> 30`).
const NEAR: usize = 8;
/// An empty [`RadixSpace::near`] slot: its region (the high half) is no region's.
const NO_NEAR: u64 = u64::MAX;

impl RadixSpace {
    // A table id is reachable (a root, a child pointer, a walk-cache payload) only while its
    // table is live: `free_node` clears the pointer and shoots the walk caches down first. The
    // check is a debug assertion because every walk level pays it; builds with debug assertions
    // (`cargo test` without `--release`, which the differential and nested tests pass) keep it.
    fn node(&self, id: u32) -> &Node {
        debug_assert!(self.head(id).live, "live table");
        &self.nodes[id as usize]
    }
    fn node_mut(&mut self, id: u32) -> &mut Node {
        debug_assert!(self.head(id).live, "live table");
        &mut self.nodes[id as usize]
    }
    fn head(&self, id: u32) -> &Head {
        &self.heads[id as usize]
    }
    fn head_mut(&mut self, id: u32) -> &mut Head {
        let h = &mut self.heads[id as usize];
        assert!(h.live, "live table");
        h
    }

    fn new_node(&mut self, env: &mut TdbEnv) -> Result<u32> {
        let pfn = env.alloc_table(0)?;
        self.tables += 1;
        Ok(match self.free_ids.pop() {
            Some(id) => {
                self.heads[id as usize] = Head { pfn, used: 0, live: true };
                let n = &mut self.nodes[id as usize];
                n.pte.fill(0);
                n.child.fill(NO_CHILD);
                id
            }
            None => {
                self.heads.push(Head { pfn, used: 0, live: true });
                self.nodes.push(Node { pte: [0; 512], child: [NO_CHILD; 512] });
                (self.nodes.len() - 1) as u32
            }
        })
    }

    fn free_node(&mut self, id: u32, env: &mut TdbEnv) -> Result<()> {
        self.near.iter().for_each(|c| c.set(NO_NEAR));
        let h = self.head_mut(id);
        h.live = false;
        let pfn = h.pfn;
        self.free_ids.push(id);
        self.tables -= 1;
        env.free_table(pfn, 0)
    }

    /// Number of table pages (for tests and reports).
    pub fn table_pages(&self) -> u64 {
        self.tables
    }
}

/// Per-core PWCs.
pub type RadixPwc = SplitPwc;

/// The radix driver.
pub struct Radix {
    levels: u8,
    pwc: Vec<PwcLevel>,
    /// PWC payloads are the table a cached entry sits in (ChampSim), not the one it points to.
    psc: bool,
    /// Leaf bits an update of a present leaf keeps: software bits a driver built on this table
    /// stores in its PTEs (Utopia's PTW counters). None by default.
    keep: u64,
}

const SIZES: [PageSize; 3] = [PageSize::K4, PageSize::M2, PageSize::G1];

impl Radix {
    /// Levels of the table (4 or 5).
    pub fn levels(&self) -> u8 {
        self.levels
    }

    /// A driver with `levels` levels and the given PWCs.
    pub fn new(cfg: &RadixConfig) -> Radix {
        let mut pwc = cfg.pwc.clone();
        pwc.sort_by_key(|p| p.level);
        Radix { levels: cfg.levels, pwc, psc: cfg.pwc_mode == PwcMode::Champsim, keep: 0 }
    }

    /// Makes [`Tdb::update`] of a present leaf keep `mask`'s bits of the old entry.
    pub(super) fn keep_leaf_bits(&mut self, mask: u64) {
        self.keep = mask;
    }

    /// The raw leaf entry mapping `va`, if one does, for a driver's software bits (hardware's
    /// access, as the walk's: not charged to the OS).
    pub(super) fn leaf_entry_mut<'s>(&self, s: &'s mut RadixSpace, va: u64) -> Option<&'s mut u64> {
        let (mut id, mut level) = (s.root, self.levels);
        loop {
            let i = index(va, level);
            let e = s.node(id).pte[i];
            if e & PRESENT == 0 {
                return None;
            }
            if level == 1 || e & HUGE != 0 {
                return Some(&mut s.node_mut(id).pte[i]);
            }
            id = s.node(id).child[i];
            level -= 1;
        }
    }

    /// Descends towards `va`, returning (node, level) of the deepest table reached and the entry
    /// there; counts one read per level.
    pub(super) fn descend(&self, s: &RadixSpace, va: u64, env: &mut TdbEnv) -> (u32, u8, u64) {
        let mut id = s.root;
        let mut level = self.levels;
        loop {
            let n = s.node(id);
            let i = index(va, level);
            let e = n.pte[i];
            env.cost.read(1);
            if e & PRESENT == 0 || level == 1 || e & HUGE != 0 {
                return (id, level, e);
            }
            id = n.child[i];
            level -= 1;
        }
    }

    /// Visits every leaf of the subtree `id` (at `level`, covering VA from `base`) that starts in
    /// `[start, end)`, stepping entry by entry (EMT Fig. 8b's pointer-stepping iterator).
    #[allow(clippy::too_many_arguments)]
    fn visit(&self, s: &RadixSpace, id: u32, level: u8, base: u64, start: u64, end: u64, env: &mut TdbEnv, f: &mut dyn FnMut(&TObj, u64)) {
        let shift = entry_shift(level);
        let span = 1u64 << shift;
        let n = s.node(id);
        let first = if start > base { ((start - base) >> shift) as usize } else { 0 };
        for i in first..512 {
            let va = base + ((i as u64) << shift);
            if va >= end {
                break;
            }
            let e = n.pte[i];
            env.cost.read(1);
            if e & PRESENT == 0 {
                continue;
            }
            if level == 1 || e & HUGE != 0 {
                if va >= start {
                    f(&decode(e, va, level_size(level)), e);
                }
            } else if va + span > start {
                self.visit(s, n.child[i], level - 1, va, start, end, env, f);
            }
        }
    }

    /// Whether the subtree has no leaf overlapping `[start, end)`.
    #[allow(clippy::too_many_arguments)]
    fn empty_in(&self, s: &RadixSpace, id: u32, level: u8, base: u64, start: u64, end: u64, env: &mut TdbEnv) -> bool {
        let shift = entry_shift(level);
        let span = 1u64 << shift;
        let n = s.node(id);
        let first = if start > base { ((start - base) >> shift) as usize } else { 0 };
        for i in first..512 {
            let va = base + ((i as u64) << shift);
            if va >= end {
                break;
            }
            let e = n.pte[i];
            env.cost.read(1);
            if e & PRESENT == 0 {
                continue;
            }
            if level == 1 || e & HUGE != 0 {
                return false;
            }
            // A non-root table is never empty: if the range covers the whole child, it is occupied.
            if start <= va && va + span <= end {
                return false;
            }
            if !self.empty_in(s, n.child[i], level - 1, va, start, end, env) {
                return false;
            }
        }
        true
    }

    /// The table at `level` reached for `va` from the root without timing (checked mode, and
    /// drivers built on this table that edit entries in place: arm64's contiguous bit).
    pub(super) fn table_at(&self, s: &RadixSpace, va: u64, level: u8) -> Option<u32> {
        let mut id = s.root;
        let mut l = self.levels;
        while l > level {
            let n = s.node(id);
            let i = index(va, l);
            if n.pte[i] & PRESENT == 0 || n.pte[i] & HUGE != 0 {
                return None;
            }
            id = n.child[i];
            l -= 1;
        }
        Some(id)
    }

    /// Like [`Tdb::for_each`], also passing each leaf's raw entry (its software and hint bits).
    pub(super) fn for_each_entry(&self, s: &RadixSpace, start: u64, end: u64, env: &mut TdbEnv, f: &mut dyn FnMut(&TObj, u64)) {
        if start < end {
            self.visit(s, s.root, self.levels, 0, start, end, env, f);
        }
    }

    /// The 512 entries of table `id`.
    pub(super) fn entries<'s>(&self, s: &'s RadixSpace, id: u32) -> &'s [u64; 512] {
        &s.node(id).pte
    }

    /// The 512 entries of table `id`, for in-place edits of bits the table itself does not
    /// interpret (presence, addresses and the page-size bit must not change).
    pub(super) fn entries_mut<'s>(&self, s: &'s mut RadixSpace, id: u32) -> &'s mut [u64; 512] {
        &mut s.node_mut(id).pte
    }

    /// The host prefetch's descent ([`Driver::prefetch`], [`Driver::frame_hint`]): from the
    /// level-2 table remembered for `va`'s 1 GiB region ([`RadixSpace::near`]) or else from the
    /// root, down to the entry a walk of `va` ends at (a level-1 slot, present or not, or a huge
    /// leaf): its table, index and level. `None` where an upper entry is not present. Reads only
    /// host memory a recent walk or prefetch brought in, but for that last entry.
    #[inline(always)]
    fn last_entry(&self, s: &RadixSpace, va: u64) -> Option<(u32, usize, u8)> {
        let region = va >> 30;
        let near = &s.near[region as usize % NEAR];
        let (mut id, mut level) = match near.get() {
            m if m >> 32 == region => (m as u32, 2),
            _ => (s.root, self.levels),
        };
        loop {
            if level == 2 {
                near.set(region << 32 | u64::from(id));
            }
            let i = index(va, level);
            if level == 1 {
                return Some((id, i, 1));
            }
            // A table below is known by its id alone (set exactly while the entry points to a
            // table), so the descent reads one host line per level, not two: the entry only
            // where there is no table, to tell a huge leaf from an empty slot.
            let n = s.node(id);
            let child = n.child[i];
            if child == NO_CHILD {
                let e = n.pte[i];
                return (e & PRESENT != 0 && e & HUGE != 0).then_some((id, i, level));
            }
            id = child;
            level -= 1;
        }
    }

    /// The hardware walk of [`Driver::walk`], also returning the raw leaf entry (so a driver built
    /// on this table can read hint bits such as arm64's contiguous bit). Sets the leaf's accessed
    /// bit, as x86 walkers and ARMv8.1 hardware access-flag management do.
    #[inline(always)]
    pub(super) fn walk_entry(
        &mut self,
        s: &mut RadixSpace,
        wc: &mut RadixPwc,
        asid: u16,
        va: u64,
        plan: &mut WalkPlan,
    ) -> Option<(Translation, u64)> {
        let mut id = s.root;
        let mut level = self.levels;
        // Probe every PWC in parallel; the deepest hit wins. An x86 hit at level l gives the
        // table its entry points to (the walk goes on at l - 1); a ChampSim PSC hit gives the
        // table holding the entry (the walk re-reads level l).
        if let Some((l, table)) = wc.probe(asid, va, plan) {
            let resume = if self.psc { l } else { l - 1 };
            if plan.checked && self.table_at(s, va, resume) != Some(table as u32) {
                plan.violation = Some("stale page-walk-cache entry (table freed or remapped without shootdown)");
            }
            id = table as u32;
            level = resume;
        }
        // References a walk without PWCs would issue: one per level down to the leaf.
        let top = self.levels;
        let mut step = 0u8;
        loop {
            let n = s.node(id);
            let i = index(va, level);
            plan.push(s.head(id).pfn.addr() + (i as u64) * 8, step, true);
            step += 1;
            let e = n.pte[i];
            if e & PRESENT == 0 {
                plan.unfiltered += (top - level + 1) as u32;
                return None;
            }
            if level == 1 || e & HUGE != 0 {
                plan.unfiltered += (top - level + 1) as u32;
                // Hardware access-flag management (x86's A bit; ARMv8.1 AF with TCR_EL1.HA): the
                // walker marks the leaf it used. Only the entry changes; timing does not model the
                // write (docs/os-model.md, "Accessed bits").
                if e & ACCESSED == 0 {
                    s.node_mut(id).pte[i] = e | ACCESSED;
                }
                return Some((leaf_translation(e, level), e | ACCESSED));
            }
            let child = n.child[i];
            // ChampSim fills the PSC of each level it reads a table pointer at (`handle_fill`)
            // with where that read went, the level that hit included; x86 caches the pointer
            // itself, at levels below the deepest hit, which the probe looked up and missed.
            if self.psc {
                wc.fill(asid, level, va, id as u64);
            } else {
                wc.fill_missed(asid, level, va, child as u64);
            }
            id = child;
            level -= 1;
        }
    }
}

impl Tdb for Radix {
    type Space = RadixSpace;

    fn create_space(&mut self, _asid: u16, env: &mut TdbEnv) -> Result<RadixSpace> {
        let mut s = RadixSpace {
            nodes: Vec::new(),
            heads: Vec::new(),
            free_ids: Vec::new(),
            root: 0,
            tables: 0,
            near: std::array::from_fn(|_| Cell::new(NO_NEAR)),
        };
        s.root = s.new_node(env)?;
        Ok(s)
    }

    fn destroy_space(&mut self, mut s: RadixSpace, env: &mut TdbEnv) -> Result<()> {
        for id in 0..s.nodes.len() as u32 {
            if s.head(id).live {
                s.free_node(id, env)?;
            }
        }
        Ok(())
    }

    fn find(&mut self, s: &mut RadixSpace, va: u64, env: &mut TdbEnv) -> Option<TObj> {
        let (_, level, e) = self.descend(s, va, env);
        (e & PRESENT != 0).then(|| decode(e, va, level_size(level)))
    }

    fn update(&mut self, s: &mut RadixSpace, o: &TObj, env: &mut TdbEnv) -> Result<()> {
        let target = leaf_level(o.size).ok_or_else(|| Error::Check(format!("radix cannot map a {} page", o.size)))?;
        if !o.size.is_aligned(o.va) || !o.size.is_aligned(o.pa) {
            return Err(Error::Check(format!("unaligned {} mapping va {:#x} pa {:#x}", o.size, o.va, o.pa)));
        }
        let mut id = s.root;
        let mut level = self.levels;
        while level > target {
            let i = index(o.va, level);
            let e = s.node(id).pte[i];
            env.cost.read(1);
            if e & PRESENT == 0 {
                let child = s.new_node(env)?;
                let cpfn = s.head(child).pfn;
                let n = s.node_mut(id);
                n.pte[i] = PRESENT | WRITE | (cpfn.addr() & ADDR_MASK);
                n.child[i] = child;
                s.head_mut(id).used += 1;
                env.cost.write(1);
            } else if e & HUGE != 0 {
                return Err(Error::Check(format!("{:#x}: a larger page already maps this range", o.va)));
            }
            id = s.node(id).child[i];
            level -= 1;
        }
        let i = index(o.va, level);
        // A last-level table's entries are all leaves: its child ids are never set, so reading
        // one (another host line, a miss for a random page) would only find `NO_CHILD`.
        let (e, child) = (s.node(id).pte[i], if level > 1 { s.node(id).child[i] } else { NO_CHILD });
        env.cost.read(1);
        if e & PRESENT != 0 && child != NO_CHILD {
            // A table below: only an empty one may be replaced by a leaf, and tables are never empty.
            return Err(Error::Check(format!("{:#x}: smaller pages still map part of this {} range", o.va, o.size)));
        }
        if e & PRESENT == 0 {
            s.head_mut(id).used += 1;
        }
        s.node_mut(id).pte[i] = encode(o) | if e & PRESENT != 0 { e & self.keep } else { 0 };
        env.cost.write(1);
        Ok(())
    }

    fn remove(&mut self, s: &mut RadixSpace, va: u64, size: PageSize, env: &mut TdbEnv) -> Option<TObj> {
        let target = leaf_level(size)?;
        let mut path = [(0u32, 0usize); 5];
        let mut id = s.root;
        let mut level = self.levels;
        let mut depth = 0;
        loop {
            let i = index(va, level);
            let e = s.node(id).pte[i];
            env.cost.read(1);
            path[depth] = (id, i);
            depth += 1;
            if e & PRESENT == 0 {
                return None;
            }
            if level == target {
                if level > 1 && e & HUGE == 0 {
                    return None; // a table, not a leaf of this size
                }
                break;
            }
            if e & HUGE != 0 {
                return None;
            }
            id = s.node(id).child[i];
            level -= 1;
        }
        let (leaf_id, leaf_i) = path[depth - 1];
        let old = decode(s.node(leaf_id).pte[leaf_i], va, size);
        // Clear the leaf, then free tables that became empty, bottom-up (never the root).
        let mut d = depth - 1;
        loop {
            let (nid, i) = path[d];
            let n = s.node_mut(nid);
            n.pte[i] = 0;
            // (A last-level table's child ids are never set: nothing to clear there.)
            if self.levels as usize - d > 1 {
                n.child[i] = NO_CHILD;
            }
            let h = s.head_mut(nid);
            h.used -= 1;
            env.cost.write(1);
            if h.used > 0 || nid == s.root {
                break;
            }
            if s.free_node(nid, env).is_err() {
                break;
            }
            d -= 1;
        }
        Some(old)
    }

    fn for_each(&mut self, s: &mut RadixSpace, start: u64, end: u64, env: &mut TdbEnv, f: &mut dyn FnMut(&TObj)) {
        self.for_each_entry(s, start, end, env, &mut |o, _| f(o));
    }

    fn range_is_empty(&mut self, s: &mut RadixSpace, start: u64, end: u64, env: &mut TdbEnv) -> bool {
        start >= end || self.empty_in(s, s.root, self.levels, 0, start, end, env)
    }

    fn table_bytes(&self, s: &RadixSpace) -> u64 {
        s.tables * 4096
    }
}

impl Registered for Radix {
    type Section = RadixConfig;
    const DESIGNS: &'static [Design] = &[
        Design {
            name: "radix4",
            description: "x86-64 4-level radix page table, 4 KiB pages (THP off)",
            driver: "radix",
            arch: |a| a.radix.levels = 4,
            settings: &["os.thp=never"],
            nested: None,
        },
        Design {
            name: "radix5",
            description: "x86-64 5-level radix page table (LA57), 4 KiB pages",
            driver: "radix",
            arch: |a| a.radix.levels = 5,
            settings: &["os.thp=never"],
            nested: None,
        },
        Design {
            name: "radix4-thp",
            description: "x86-64 4-level radix with transparent huge pages always (2 MiB at fault, khugepaged)",
            driver: "radix",
            arch: |a| a.radix.levels = 4,
            settings: &["os.thp=always"],
            nested: None,
        },
        Design {
            name: "radix4-hawkeye",
            description: "x86-64 4-level radix with Hawkeye (ASPLOS'19): THP at fault, 2 MiB promotion by access-coverage bins instead of khugepaged, asynchronous pre-zeroing",
            driver: "radix",
            arch: |a| a.radix.levels = 4,
            settings: &["os.thp=always", "os.khugepaged.enabled=false", "os.hawkeye.enabled=true", "os.hawkeye.prezero=true"],
            nested: None,
        },
        Design {
            name: "ideal",
            description: "perfect TLB: every translation hits the L1 TLB (radix4 tables kept by the OS)",
            driver: "radix",
            arch: |a| a.radix.levels = 4,
            settings: &["os.thp=never", "mmu.perfect_tlb=true"],
            nested: None,
        },
        Design {
            name: "accel-conventional",
            description: "accelerators with a 128-entry TLB; misses walk the radix table (private MMU, perfect MMU caches: one reference), serialized with the fetch; 4 KiB pages (SPARTA's baseline)",
            driver: "radix",
            arch: |a| a.radix.levels = 4,
            settings: super::sparta::CONVENTIONAL_4K,
            nested: None,
        },
        Design {
            name: "accel-conventional-2m",
            description: "SPARTA's conventional baseline with 2 MiB pages (THP always)",
            driver: "radix",
            arch: |a| a.radix.levels = 4,
            settings: super::sparta::CONVENTIONAL_2M,
            nested: None,
        },
        Design {
            name: "accel-iommu",
            description: "accelerators with a 128-entry TLB whose misses go to a shared IOMMU on socket 0 that walks the radix table with its own walk caches; 4 KiB pages",
            driver: "radix",
            arch: |a| a.radix.levels = 4,
            settings: &["accel.enabled=true", "os.memory=\"128G\"", "os.thp=never", "os.swap.enabled=true", "os.interleave=8", "accel.walk=\"iommu\""],
            nested: None,
        },
        Design {
            name: "accel-ideal",
            description: "accelerators with ideal translation: no translation cost at all (SPARTA §7.5's ideal system); 4 KiB pages",
            driver: "radix",
            arch: |a| a.radix.levels = 4,
            settings: &["accel.enabled=true", "os.memory=\"128G\"", "os.thp=never", "os.swap.enabled=true", "os.interleave=8", "accel.ideal=true"],
            nested: None,
        },
        Design {
            name: "ptlb",
            description: "Utopia's P-TLB: every translation hits the L1 TLB; pages as in Utopia's runs (radix4, THP always)",
            driver: "radix",
            arch: |a| a.radix.levels = 4,
            settings: &["os.thp=always", "mmu.perfect_tlb=true"],
            nested: None,
        },
    ];

    fn validate(s: &RadixConfig, key: &str) -> Result<()> {
        s.validate(key)
    }

    fn config(arch: &ArchConfig) -> RadixConfig {
        arch.radix.clone()
    }
}

impl Driver for Radix {
    type Config = RadixConfig;
    type WalkCache = RadixPwc;

    fn from_config(cfg: &RadixConfig, _seed: u64) -> Result<Self> {
        Ok(Radix::new(cfg))
    }

    fn new_walk_cache(&self) -> RadixPwc {
        let mode = if self.psc { PwcMode::Champsim } else { PwcMode::X86 };
        SplitPwc::new(&self.pwc, |l| l <= self.levels).with_mode(mode)
    }

    #[inline]
    fn walk(&mut self, s: &mut RadixSpace, wc: &mut RadixPwc, asid: u16, va: u64, plan: &mut WalkPlan) -> Option<Translation> {
        self.walk_entry(s, wc, asid, va, plan).map(|(t, _)| t)
    }

    fn invalidate_walk_cache(&self, wc: &mut RadixPwc, asid: u16, start: u64, end: u64) {
        wc.invalidate(asid, start, end);
    }

    /// Descends the host copy of the tables, from the level-2 table remembered for `va`'s 1 GiB
    /// region ([`RadixSpace::near`]) or else from the root, and prefetches the entry a walk would
    /// end at: the leaf a random workload misses on in host memory.
    #[inline]
    fn prefetch(&self, s: &RadixSpace, va: u64) -> Option<u64> {
        let (id, i, level) = self.last_entry(s, va)?;
        if level == 1 {
            crate::mem::host_prefetch(&s.node(id).pte[i]);
        } // else: a huge leaf, read on the way down and already in the host's cache
        Some(s.head(id).pfn.addr() + (i as u64) * 8)
    }

    const HINTS_FRAME: bool = true;

    /// The leaf [`Driver::prefetch`] brought in, read: the tables' own answer, which the walk a
    /// few accesses later will read too (so its host page is in the host's TLB, where the ground
    /// truth's, touched only for this, is not).
    #[inline]
    fn frame_hint(&self, s: &RadixSpace, va: u64) -> Option<u64> {
        let (id, i, level) = self.last_entry(s, va)?;
        let e = s.node(id).pte[i];
        (e & PRESENT != 0).then(|| leaf_translation(e, level).paddr(va))
    }

    /// 4 levels: 2^47; 5 levels (LA57): 2^56.
    fn user_va_limit(&self) -> u64 {
        1 << (12 + 9 * u32::from(self.levels) - 1)
    }

    fn leaf_sizes(&self) -> &[PageSize] {
        &SIZES
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::phys::PhysMem;
    use crate::tapi::{prot, OsCost};

    fn setup(levels: u8) -> (Radix, PhysMem, OsCost) {
        let cfg = RadixConfig { levels, ..RadixConfig::default() };
        (Radix::new(&cfg), PhysMem::new(1 << 30, 14), OsCost::default())
    }

    /// Runs `f` on a fresh table of 4 and then of 5 levels, with its address space.
    fn on_both_depths(mut f: impl FnMut(u8, &mut Radix, &mut RadixSpace, &mut TdbEnv)) {
        for levels in [4u8, 5] {
            let (mut r, mut phys, mut cost) = setup(levels);
            let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
            let mut s = r.create_space(1, &mut env).unwrap();
            f(levels, &mut r, &mut s, &mut env);
        }
    }

    #[test]
    fn map_find_walk_remove() {
        let (mut r, mut phys, mut cost) = setup(4);
        let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
        let mut s = r.create_space(1, &mut env).unwrap();
        let o = TObj::new(0x7f00_0020_0000, 0x4000_0000, PageSize::M2, prot::RW);
        r.update(&mut s, &o, &mut env).unwrap();
        r.update(&mut s, &TObj::new(0x1000, 0x5000, PageSize::K4, prot::READ), &mut env).unwrap();
        assert_eq!(r.find(&mut s, 0x7f00_0021_2345, &mut env).unwrap().pa, 0x4000_0000);
        assert!(r.find(&mut s, 0x2000, &mut env).is_none());
        let mut wc = r.new_walk_cache();
        let mut plan = WalkPlan::default();
        let t = r.walk(&mut s, &mut wc, 1, 0x7f00_0021_2345, &mut plan).unwrap();
        assert_eq!(t.paddr(0x7f00_0021_2345), 0x4001_2345);
        assert_eq!(plan.refs.len(), 3, "PML4, PDPT, PD leaf");
        plan.clear();
        r.walk(&mut s, &mut wc, 1, 0x7f00_0021_0000, &mut plan).unwrap();
        assert_eq!(plan.refs.len(), 1, "PDPTE-cache hit leaves only the PD read");
        assert_eq!(plan.unfiltered, 3);
        // A 4K page inside a 2M-mapped range is an overlap error, never silently accepted.
        assert!(r.update(&mut s, &TObj::new(0x7f00_0020_1000, 0x9000, PageSize::K4, prot::RW), &mut env).is_err());
        assert_eq!(r.table_bytes(&s), 6 * 4096); // root; PDPT+PD for the 2M page; PDPT+PD+PT for the 4K page
        r.remove(&mut s, 0x1000, PageSize::K4, &mut env).unwrap();
        assert_eq!(r.table_bytes(&s), 3 * 4096, "emptied PDPT/PD/PT freed");
    }

    #[test]
    fn walks_set_the_accessed_bit_of_the_leaf_they_use() {
        let (mut r, mut phys, mut cost) = setup(4);
        let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
        let mut s = r.create_space(1, &mut env).unwrap();
        let (small, huge) = (0x1000u64, 0x7f00_0020_0000u64);
        r.update(&mut s, &TObj::new(small, 0x5000, PageSize::K4, prot::RW), &mut env).unwrap();
        r.update(&mut s, &TObj::new(small + 0x1000, 0x6000, PageSize::K4, prot::RW), &mut env).unwrap();
        r.update(&mut s, &TObj::new(huge, 0x4000_0000, PageSize::M2, prot::RW), &mut env).unwrap();
        let accessed = |r: &mut Radix, s: &mut RadixSpace, env: &mut TdbEnv, va| r.find(s, va, env).unwrap().accessed;
        assert!(!accessed(&mut r, &mut s, &mut env, small) && !accessed(&mut r, &mut s, &mut env, huge));
        let mut wc = r.new_walk_cache();
        let mut plan = WalkPlan::default();
        r.walk(&mut s, &mut wc, 1, small + 0x10, &mut plan).unwrap();
        r.walk(&mut s, &mut wc, 1, huge + 0x12_3456, &mut plan).unwrap();
        assert!(accessed(&mut r, &mut s, &mut env, small) && accessed(&mut r, &mut s, &mut env, huge));
        assert!(!accessed(&mut r, &mut s, &mut env, small + 0x1000), "only the leaf walked");
        // The OS clears it with an update; nothing else about the mapping changes.
        let o = r.find(&mut s, small, &mut env).unwrap();
        r.update(&mut s, &TObj { accessed: false, ..o }, &mut env).unwrap();
        assert_eq!(r.find(&mut s, small, &mut env).unwrap(), TObj::new(small, 0x5000, PageSize::K4, prot::RW));
        // Table (non-leaf) entries are left alone: the walk ORs the leaf only.
        let root = r.entries(&s, s.root);
        assert!(root.iter().all(|e| e & ACCESSED == 0));
    }

    /// ChampSim's page-structure caches (`pwc_mode = "champsim"`) on a hand-built 5-level table
    /// with ChampSim's PSC geometry. References ChampSim's walker makes (`src/ptw.cc`: a walk
    /// starts at the level stored in the deepest PSC hit and reads down to the leaf): no hit 5,
    /// PSCL5 hit 5, PSCL4 4, PSCL3 3, PSCL2 2, each one more than an x86 PWC hit at that level.
    #[test]
    fn champsim_psc_hit_at_each_level_leaves_champsims_reference_count() {
        const CHAMPSIM_REFS: [(u8, usize); 4] = [(5, 5), (4, 4), (3, 3), (2, 2)];
        let base: u64 = 0x0001_2345_6780_0000 & !0xfff;
        // A second page sharing `base`'s level-L entry region but not its level-(L-1) one: its
        // deepest PSC hit is at level L.
        let partner = |l: u8| base ^ (1u64 << entry_shift(l - 1));
        for mode in [PwcMode::Champsim, PwcMode::X86] {
            let cfg = RadixConfig {
                levels: 5,
                pwc: [(5u8, 2u32, 2u32), (4, 4, 4), (3, 8, 4), (2, 32, 8)]
                    .iter()
                    .map(|&(level, entries, ways)| PwcLevel { level, cache: crate::mmu::wcache::WalkCacheConfig::new(entries, ways, 0) })
                    .collect(),
                pwc_mode: mode,
            };
            let mut r = Radix::new(&cfg);
            let (mut phys, mut cost) = (PhysMem::new(1 << 30, 14), OsCost::default());
            let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
            let mut s = r.create_space(1, &mut env).unwrap();
            let mut pages = vec![base];
            pages.extend(CHAMPSIM_REFS.iter().map(|&(l, _)| partner(l)));
            for (k, &va) in pages.iter().enumerate() {
                r.update(&mut s, &TObj::new(va, 0x10_0000 + ((k as u64) << 12), PageSize::K4, prot::RW), &mut env).unwrap();
            }
            // The references of a walk from a cold cache: one per level, root first.
            let cold = |r: &mut Radix, s: &mut RadixSpace, va: u64| {
                let mut plan = WalkPlan::default();
                r.walk(s, &mut r.new_walk_cache(), 1, va, &mut plan).unwrap();
                plan.refs.iter().map(|x| x.paddr).collect::<Vec<_>>()
            };
            assert_eq!(cold(&mut r, &mut s, base).len(), 5, "no PSC hit: one reference per level");
            for &(level, champsim) in &CHAMPSIM_REFS {
                let mut wc = r.new_walk_cache();
                let mut plan = WalkPlan { checked: true, ..WalkPlan::default() };
                r.walk(&mut s, &mut wc, 1, base, &mut plan).unwrap();
                plan.clear();
                let va = partner(level);
                let t = r.walk(&mut s, &mut wc, 1, va, &mut plan).unwrap();
                assert_eq!(t.paddr(va), 0x10_0000 + ((pages.iter().position(|&p| p == va).unwrap() as u64) << 12));
                assert!(plan.violation.is_none(), "{:?}", plan.violation);
                let want = if mode == PwcMode::Champsim { champsim } else { champsim - 1 };
                assert_eq!(plan.refs.len(), want, "{mode:?}: deepest hit at level {level}");
                assert_eq!((plan.wc_hits, plan.unfiltered), (1, 5));
                // The references are the tail of the full walk: the same entries, read in order.
                let full = cold(&mut r, &mut s, va);
                let got: Vec<u64> = plan.refs.iter().map(|x| x.paddr).collect();
                assert_eq!(got, full[5 - want..], "{mode:?}: level {level}");
            }
        }
    }

    /// The host prefetch names the entry the walk ends at (the leaf of a 4 KiB page, the level-2
    /// entry of a 2 MiB one), and nothing where an upper level is empty.
    #[test]
    fn prefetch_names_the_walks_last_entry() {
        let (mut r, mut phys, mut cost) = setup(4);
        let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
        let mut s = r.create_space(1, &mut env).unwrap();
        r.update(&mut s, &TObj::new(0x1234_5000, 0x8000, PageSize::K4, prot::RW), &mut env).unwrap();
        r.update(&mut s, &TObj::new(0x7f00_0020_0000, 0x4000_0000, PageSize::M2, prot::RW), &mut env).unwrap();
        for va in [0x1234_5678u64, 0x7f00_0021_2345] {
            let entry = r.prefetch(&s, va);
            let (mut plan, mut wc) = (WalkPlan::default(), r.new_walk_cache());
            r.walk(&mut s, &mut wc, 1, va, &mut plan).unwrap();
            assert_eq!(entry, Some(plan.refs.last().unwrap().paddr), "{va:#x}");
        }
        assert_eq!(r.prefetch(&s, 0x9999_0000), None);
        // The frame hint reads the entry the prefetch named: the walk's answer.
        assert_eq!(r.frame_hint(&s, 0x1234_5678), Some(0x8678));
        assert_eq!(r.frame_hint(&s, 0x7f00_0021_2345), Some(0x4001_2345));
        assert_eq!(r.frame_hint(&s, 0x1234_6000), None, "an empty slot of a live leaf table");
        assert_eq!(r.frame_hint(&s, 0x9999_0000), None);
    }

    /// The prefetch's shortcut past the upper levels ([`RadixSpace::near`]) never names an entry
    /// the walk would not read, and the frame hint read there is the walk's answer: across unmaps
    /// that free tables, ids reused by tables of other regions, and regions sharing a shortcut
    /// slot, every prefetch still ends where the walk does, or names nothing where nothing is
    /// mapped.
    #[test]
    fn prefetch_shortcut_follows_freed_and_reused_tables() {
        on_both_depths(|levels, r, s, env| {
            let mut rng = crate::rng::Rng::new(u64::from(levels));
            // 24 regions of 1 GiB, three times the shortcut's slots, a few pages in each.
            let va_of = |k: u64, p: u64| (k << 30) + (p << 12);
            let mut mapped = std::collections::BTreeSet::new();
            for step in 0..4000 {
                let (k, p) = (rng.below(24), rng.below(4));
                let va = va_of(k, p);
                match rng.below(3) {
                    0 if mapped.remove(&va) => {
                        r.remove(s, va, PageSize::K4, env).unwrap();
                    }
                    1 if mapped.insert(va) => {
                        r.update(s, &TObj::new(va, 0x10_0000 + step * 4096, PageSize::K4, prot::RW), env).unwrap();
                    }
                    _ => {}
                }
                let probe = va_of(rng.below(24), rng.below(4)) + rng.below(4096);
                let entry = r.prefetch(s, probe);
                let (mut plan, mut wc) = (WalkPlan::default(), r.new_walk_cache());
                let walked = r.walk(s, &mut wc, 1, probe, &mut plan);
                assert_eq!(r.frame_hint(s, probe), walked.map(|t| t.paddr(probe)), "{levels} levels, step {step}, {probe:#x}");
                if walked.is_some() {
                    assert_eq!(entry, Some(plan.refs.last().unwrap().paddr), "{levels} levels, step {step}, {probe:#x}");
                } else if let Some(e) = entry {
                    // An unmapped page whose leaf table exists: the prefetch names its empty entry.
                    assert_eq!(Some(e), plan.refs.last().map(|x| x.paddr), "{levels} levels, step {step}, {probe:#x}");
                }
            }
            assert!(s.table_pages() > 1);
        });
    }

    #[test]
    fn five_levels_add_one_reference() {
        on_both_depths(|levels, r, s, env| {
            r.update(s, &TObj::new(0x1234_5000, 0x8000, PageSize::K4, prot::RW), env).unwrap();
            let mut wc = r.new_walk_cache();
            let mut plan = WalkPlan::default();
            r.walk(s, &mut wc, 1, 0x1234_5000, &mut plan).unwrap();
            assert_eq!(plan.refs.len(), levels as usize);
            assert_eq!(plan.unfiltered, levels as u32);
        });
    }
}
