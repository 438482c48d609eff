//! What the x86-64 radix driver and the drivers built on its format (FPT) share: the 8-byte
//! page-table entry format, level arithmetic, and split page-walk caches (PWCs).
//!
//! Levels are numbered as in the Intel SDM: 1 = PTE (4 KiB leaves), 2 = PDE (2 MiB), 3 = PDPTE
//! (1 GiB), 4 = PML4E, 5 = PML5E. An entry at level `L` covers `1 << entry_shift(L)` bytes of VA.
//!
//! PWC semantics (Intel SDM §4.10.3): a cache for level-`L` entries is keyed by the VA bits that
//! select a level-`L` entry (`va >> entry_shift(L)`) and holds what that entry points to; a hit
//! skips every table above and including the one holding the entry. All PWCs are probed in
//! parallel (one latency); the deepest hit wins. [`PwcMode::Champsim`] gives ChampSim's
//! page-structure caches instead, whose hits resume the walk one level higher.

use crate::addr::PageSize;
use crate::error::{Error, Result};
use crate::mmu::wcache::{WalkCache, WalkCacheConfig};
use crate::tapi::WalkPlan;
use crate::tapi::{prot, TObj};

/// Present.
pub const PRESENT: u64 = 1;
/// Writable.
pub const WRITE: u64 = 1 << 1;
/// Accessed.
pub const ACCESSED: u64 = 1 << 5;
/// Dirty.
pub const DIRTY: u64 = 1 << 6;
/// Page size: the entry is a leaf above level 1.
pub const HUGE: u64 = 1 << 7;
/// No-execute.
pub const NX: u64 = 1 << 63;
/// Physical address bits of an entry.
pub const ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;

/// Level whose entries map pages of `size` (1 = PTE, 2 = PDE, 3 = PDPTE).
#[inline]
pub fn leaf_level(size: PageSize) -> Option<u8> {
    match size {
        PageSize::K4 => Some(1),
        PageSize::M2 => Some(2),
        PageSize::G1 => Some(3),
        _ => None,
    }
}

/// Size of the page a leaf at `level` (1..=3) maps.
#[inline]
pub fn level_size(level: u8) -> PageSize {
    match level {
        1 => PageSize::K4,
        2 => PageSize::M2,
        _ => PageSize::G1,
    }
}

/// VA shift of the region one entry at `level` covers.
#[inline(always)]
pub fn entry_shift(level: u8) -> u32 {
    12 + 9 * (level as u32 - 1)
}

/// The entry mapping `o` (protection, accessed/dirty, page-size bit for non-4 KiB leaves).
pub fn encode(o: &TObj) -> u64 {
    let mut e = PRESENT | (o.pa & ADDR_MASK);
    if o.prot & prot::WRITE != 0 {
        e |= WRITE;
    }
    if o.prot & prot::EXEC == 0 {
        e |= NX;
    }
    if o.accessed {
        e |= ACCESSED;
    }
    if o.dirty {
        e |= DIRTY;
    }
    if o.size != PageSize::K4 {
        e |= HUGE;
    }
    e
}

/// The translation object of leaf entry `e` mapping a page of `size` that contains `va`.
pub fn decode(e: u64, va: u64, size: PageSize) -> TObj {
    let mut p = prot::READ;
    if e & WRITE != 0 {
        p |= prot::WRITE;
    }
    if e & NX == 0 {
        p |= prot::EXEC;
    }
    TObj { va: size.align_down(va), pa: e & ADDR_MASK, size, prot: p, accessed: e & ACCESSED != 0, dirty: e & DIRTY != 0 }
}

/// PWC geometry for one level of entries.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PwcLevel {
    /// Level of the cached entries (4 = PML4E, 3 = PDPTE, 2 = PDE; 5 = PML5E).
    pub level: u8,
    /// Geometry.
    #[serde(flatten)]
    pub cache: WalkCacheConfig,
}

/// What a page-walk-cache entry holds, and so where a hit resumes the walk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PwcMode {
    /// Intel SDM §4.10.3: the cache for level-`L` entries holds the table an entry points to,
    /// so a hit skips level `L` and the walk reads level `L − 1` next. Only the deepest hit's
    /// cache counts as used.
    #[default]
    X86,
    /// ChampSim's page-structure caches (PSCs; `src/ptw.cc`, `PageTableWalker::handle_read` and
    /// `handle_fill`): the PSC for level `L` (same key, `va >> entry_shift(L)`) holds the table
    /// the level-`L` entry sits in, so a hit re-reads that entry: one reference more than an
    /// x86 PWC hit at the same level (a 5-level walk that hits PSCL2 makes 2 references, PSCL3
    /// 3, PSCL4 4, PSCL5 5). Every PSC is looked up and each hit refreshes its LRU state, as
    /// ChampSim checks all of them; the deepest hit wins.
    Champsim,
}

/// Utopia MICRO'23 Table 1: 3 split PWCs (PML4E, PDPTE, PDE), 32 entries, 4-way, 2 cycles.
pub fn default_pwcs() -> Vec<PwcLevel> {
    [4u8, 3, 2].iter().map(|&level| PwcLevel { level, cache: WalkCacheConfig::new(32, 4, 2) }).collect()
}

/// Checks a PWC list: levels within `2..=max_level`, geometry valid; errors name `key.pwc[i]`.
pub fn validate_pwcs(pwc: &[PwcLevel], key: &str, max_level: u8) -> Result<()> {
    for (i, p) in pwc.iter().enumerate() {
        if !(2..=max_level).contains(&p.level) {
            let what = if max_level == 5 { "2 (PDE), 3 (PDPTE), 4 (PML4E) or 5 (PML5E)" } else { "2 (PDE), 3 (PDPTE) or 4 (PML4E)" };
            return Err(Error::config(format!("{key}.pwc[{i}].level"), format!("must be {what}")));
        }
        p.cache.validate(&format!("{key}.pwc[{i}]"))?;
    }
    Ok(())
}

/// Per-core split PWCs: `caches[i]` caches entries of `levels[i]`, deepest level first. The payload
/// is whatever the driver stores for the table an entry points to (a host node id).
pub struct SplitPwc {
    levels: Vec<u8>,
    caches: Vec<WalkCache>,
    latency: u32,
    /// Look every cache up, not only down to the deepest hit (ChampSim's PSCs).
    probe_all: bool,
}

impl SplitPwc {
    /// The PWCs of `pwc` whose level satisfies `keep` (levels whose entries point to tables).
    pub fn new(pwc: &[PwcLevel], keep: impl Fn(u8) -> bool) -> SplitPwc {
        let mut kept: Vec<&PwcLevel> = pwc.iter().filter(|p| keep(p.level)).collect();
        kept.sort_by_key(|p| p.level);
        SplitPwc {
            levels: kept.iter().map(|p| p.level).collect(),
            caches: kept.iter().map(|p| WalkCache::new(&p.cache)).collect(),
            latency: kept.iter().map(|p| p.cache.latency).max().unwrap_or(0),
            probe_all: false,
        }
    }

    /// The same caches probed as `mode` does (the payload's meaning is the driver's business).
    pub fn with_mode(mut self, mode: PwcMode) -> SplitPwc {
        self.probe_all = mode == PwcMode::Champsim;
        self
    }

    /// Levels that have a PWC, deepest first.
    pub fn levels(&self) -> &[u8] {
        &self.levels
    }

    /// Probes every PWC in parallel for `va`: adds the lookup latency and the hit/miss counts to
    /// `plan` and returns the level and payload of the deepest hit.
    #[inline]
    pub fn probe(&mut self, asid: u16, va: u64, plan: &mut WalkPlan) -> Option<(u8, u64)> {
        if self.caches.is_empty() {
            return None;
        }
        plan.fixed_cycles += self.latency;
        // Zipped, not indexed: no bounds checks on the path every walk takes.
        let mut hit = None;
        for (k, (c, &l)) in self.caches.iter_mut().zip(&self.levels).enumerate() {
            if let Some(v) = c.lookup(asid, va >> entry_shift(l)) {
                hit = Some((k, l, v));
                break;
            }
            plan.wc_misses += 1;
        }
        let (k, l, v) = hit?;
        plan.wc_hits += 1;
        if self.probe_all {
            // The shallower caches are looked up too (their hits only refresh LRU); the counts
            // stay those of the deepest hit, as in the x86 mode.
            for (c, &l) in self.caches.iter_mut().zip(&self.levels).skip(k + 1) {
                c.lookup(asid, va >> entry_shift(l));
            }
        }
        Some((l, v))
    }

    /// Caches `payload` for the level-`level` entry selected by `va`, if that level has a PWC.
    #[inline]
    pub fn fill(&mut self, asid: u16, level: u8, va: u64, payload: u64) {
        if let Some(c) = self.cache_of(level) {
            c.insert(asid, va >> entry_shift(level), payload);
        }
    }

    /// [`SplitPwc::fill`] of a level whose cache [`SplitPwc::probe`] looked up and missed in
    /// this walk: every level an x86 walk fills, since it fills the levels below the deepest hit
    /// (ChampSim's PSC mode re-reads and refills the level that hit, so it uses `fill`).
    #[inline]
    pub fn fill_missed(&mut self, asid: u16, level: u8, va: u64, payload: u64) {
        if let Some(c) = self.cache_of(level) {
            c.insert_absent(asid, va >> entry_shift(level), payload);
        }
    }

    /// The PWC of `level`, if it has one.
    #[inline(always)]
    fn cache_of(&mut self, level: u8) -> Option<&mut WalkCache> {
        self.caches.iter_mut().zip(&self.levels).find_map(|(c, &l)| (l == level).then_some(c))
    }

    /// Drops entries of `asid` whose region may overlap `[start, end)`.
    pub fn invalidate(&mut self, asid: u16, start: u64, end: u64) {
        for (k, c) in self.caches.iter_mut().enumerate() {
            let sh = entry_shift(self.levels[k]);
            c.invalidate(asid, start >> sh, (end.saturating_sub(1)) >> sh);
        }
    }
}
