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
//! Host-side each space also keeps a sorted index of its RestSeg pages (what an OS keeps to
//! iterate a range without probing every page); the TAR/SF arrays are what walks read.

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
use std::collections::BTreeMap;

/// The set-index function of a RestSeg (Utopia Fig. 30 compares these four).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SetHash {
    /// VPN modulo the number of sets (Utopia's choice; a mask when sets are a power of two).
    Modulo,
    /// XOR of all log2(sets)-bit chunks of the VPN (XOR-based hashing, Cho et al.); needs a
    /// power-of-two number of sets.
    Xor,
    /// Prime displacement (Kharbutli et al., HPCA'04): (tag · 17 + index) mod sets, where index and
    /// tag are the VPN's low bits and the rest.
    Prime,
    /// Mersenne modulo (Yang & Yang): VPN mod (2^k − 1), the largest Mersenne number not above the
    /// number of sets (so one set of a power-of-two count stays unused).
    Mersenne,
}

/// The prime of [`SetHash::Prime`].
const DISPLACEMENT_PRIME: u64 = 17;

fn ceil_log2(x: u64) -> u32 {
    if x <= 1 {
        0
    } else {
        64 - (x - 1).leading_zeros()
    }
}

impl SetHash {
    /// The set of `vpn` among `sets` sets.
    #[inline]
    pub fn set(self, vpn: u64, sets: u64) -> u64 {
        match self {
            SetHash::Modulo => {
                if sets.is_power_of_two() {
                    vpn & (sets - 1)
                } else {
                    vpn % sets
                }
            }
            SetHash::Xor => {
                let b = ceil_log2(sets).max(1);
                let mask = (1u64 << b) - 1;
                let (mut x, mut h) = (vpn, 0u64);
                while x != 0 {
                    h ^= x & mask;
                    x >>= b;
                }
                h % sets
            }
            SetHash::Prime => ((vpn / sets).wrapping_mul(DISPLACEMENT_PRIME).wrapping_add(vpn % sets)) % sets,
            SetHash::Mersenne => {
                let k = 63 - (sets + 1).leading_zeros(); // largest k with 2^k - 1 <= sets
                let m = ((1u64 << k) - 1).max(1);
                vpn % m
            }
        }
    }
}

/// One RestSeg.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestSegConfig {
    /// Bytes (a multiple of page × ways); 0 = all memory left at boot minus
    /// `arch.utopia.kernel_reserve` (restrictive-only), rounded down.
    #[serde(with = "bytes_serde")]
    pub size: u64,
    /// Page size it holds: 4K or 2M.
    pub page: PageSize,
    /// Associativity (ways per set).
    pub ways: u32,
    /// Set-index function.
    #[serde(default = "default_hash")]
    pub hash: SetHash,
}

fn default_hash() -> SetHash {
    SetHash::Modulo
}

/// Which new pages the page-fault handler puts in a RestSeg (§5.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultAlloc {
    /// Every private page, evicting the set's SRRIP victim to the FlexSeg if the set is full
    /// (Utopia's page-fault-based allocation).
    Evict,
    /// Only into a free way; a full set sends the page to the FlexSeg.
    Free,
    /// None: pages enter RestSegs only by PTW-tracking migration.
    Off,
}

/// PTW-tracking migration from the FlexSeg into a RestSeg (§5.5).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MigrateConfig {
    /// Track walks and migrate.
    pub enabled: bool,
    /// Walks of a page before it qualifies (Virtuoso Utopia v1.0: ≥ 2; 4-bit counter).
    pub min_walks: u32,
    /// DRAM references of those walks before it qualifies (Virtuoso: ≥ 2; 5-bit counter).
    pub min_dram_refs: u32,
}

impl Default for MigrateConfig {
    fn default() -> Self {
        MigrateConfig { enabled: true, min_walks: 2, min_dram_refs: 2 }
    }
}

/// Utopia configuration (`arch.utopia`). The FlexSeg's radix table and PWCs are `arch.radix`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UtopiaConfig {
    /// RestSegs, reserved at boot in this order.
    pub restsegs: Vec<RestSegConfig>,
    /// Whether there is a FlexSeg (false = restrictive-only, the paper's §3 motivation system).
    pub flexseg: bool,
    /// TAR cache (Utopia Table 1: 2 KiB = 32 lines of 64 B, 2 cycles; 4-way from Virtuoso).
    pub tar_cache: WalkCacheConfig,
    /// SF cache (same geometry).
    pub sf_cache: WalkCacheConfig,
    /// Page-fault-based allocation policy.
    pub fault_alloc: FaultAlloc,
    /// PTW-tracking migration.
    pub migrate: MigrateConfig,
    /// Memory left to the kernel (buddy allocator) by a RestSeg of size 0.
    #[serde(with = "bytes_serde")]
    pub kernel_reserve: u64,
    /// RSWs start on every L1 TLB miss, beside the L2 TLB (Fig. 17), so an L2 TLB hit still
    /// probes (and fills) the TAR/SF caches; false = only on L2 TLB misses. With
    /// `mmu.side_parallel = false` (Fig. 28's serial RSW) they run only on L2 TLB misses anyway.
    pub rsw_on_l1_miss: bool,
    /// With `mmu.l2_parallel_walk`, the FlexSeg walk starts only once every RSW has missed
    /// (Fig. 17 read literally) instead of at the L1 TLB miss beside them (Utopia's artifact,
    /// whose translation takes max(RSW, L1 + PTW)).
    pub fsw_waits_for_rsw: bool,
}

impl Default for UtopiaConfig {
    /// Utopia Table 1: 2 × 512 MB RestSegs (4 KB and 2 MB pages), 16-way, SRRIP, modulo hash;
    /// TAR and SF caches 2 KB, 2 cycles.
    fn default() -> Self {
        UtopiaConfig {
            restsegs: vec![
                RestSegConfig { size: 512 << 20, page: PageSize::K4, ways: 16, hash: SetHash::Modulo },
                RestSegConfig { size: 512 << 20, page: PageSize::M2, ways: 16, hash: SetHash::Modulo },
            ],
            flexseg: true,
            tar_cache: WalkCacheConfig::new(32, 4, 2),
            sf_cache: WalkCacheConfig::new(32, 4, 2),
            fault_alloc: FaultAlloc::Evict,
            migrate: MigrateConfig::default(),
            kernel_reserve: 64 << 20,
            rsw_on_l1_miss: true,
            fsw_waits_for_rsw: false,
        }
    }
}

impl UtopiaConfig {
    /// Checks the RestSegs, caches and thresholds.
    pub fn validate(&self, key: &str) -> Result<()> {
        if !self.flexseg && self.restsegs.is_empty() {
            return Err(Error::config(format!("{key}.restsegs"), "a design without a FlexSeg needs at least one RestSeg"));
        }
        for (i, r) in self.restsegs.iter().enumerate() {
            let k = format!("{key}.restsegs[{i}]");
            if !(r.page == PageSize::K4 || r.page == PageSize::M2) {
                return Err(Error::config(format!("{k}.page"), "must be 4K or 2M"));
            }
            if r.ways == 0 || r.ways > 256 {
                return Err(Error::config(format!("{k}.ways"), "must be between 1 and 256"));
            }
            let unit = r.page.bytes() * r.ways as u64;
            if !r.size.is_multiple_of(unit) {
                return Err(Error::config(
                    format!("{k}.size"),
                    format!("must be a multiple of page × ways ({unit} bytes), or 0 for the rest of memory"),
                ));
            }
            if r.hash == SetHash::Xor && r.size != 0 && !(r.size / unit).is_power_of_two() {
                return Err(Error::config(format!("{k}.hash"), "xor needs a power-of-two number of sets"));
            }
        }
        self.tar_cache.validate(&format!("{key}.tar_cache"))?;
        self.sf_cache.validate(&format!("{key}.sf_cache"))?;
        if self.migrate.min_walks > 15 {
            return Err(Error::config(format!("{key}.migrate.min_walks"), "the PTE's 4-bit walk counter saturates at 15"));
        }
        if self.migrate.min_dram_refs > 31 {
            return Err(Error::config(format!("{key}.migrate.min_dram_refs"), "the PTE's 5-bit cost counter saturates at 31"));
        }
        Ok(())
    }
}

/// TAR size in bits of one process's TAR for a RestSeg (Utopia footnote 8): pages × (VA bits −
/// log2(page) − log2(sets) + 10 metadata bits).
pub fn tar_bits(size: u64, page: u64, ways: u64, va_bits: u32) -> u64 {
    let pages = size / page;
    let sets = pages / ways;
    pages * tar_entry_bits(page, sets, va_bits) as u64
}

fn tar_entry_bits(page: u64, sets: u64, va_bits: u32) -> u32 {
    va_bits.saturating_sub(ceil_log2(page) + ceil_log2(sets)) + 10
}

/// SF size in bits (Utopia footnote 9): sets × (log2(ways) + 1).
pub fn sf_bits(size: u64, page: u64, ways: u64) -> u64 {
    (size / page / ways) * (ceil_log2(ways) as u64 + 1)
}

/// Bytes of a radix table mapping `pages` contiguous pages of `page` bytes (Fig. 13's comparison):
/// one table per 512 entries at each level down from the leaf, plus the root.
pub fn radix_bytes_for(pages: u64, page: PageSize, levels: u8) -> u64 {
    let leaf_level = if page == PageSize::M2 { 2 } else { 1 };
    let mut n = pages;
    let mut tables = 0;
    for _ in leaf_level..levels {
        n = n.div_ceil(512);
        tables += n;
    }
    (tables + 1) * 4096
}

/// Counters of one RestSeg.
#[derive(Clone, Debug, Default)]
struct SegStats {
    rsw: u64,
    rsw_hits: u64,
    sf_filtered: u64,
    tar_lookups: u64,
    tar_hits: u64,
    sf_lookups: u64,
    sf_hits: u64,
    fault_allocs: u64,
    migration_placements: u64,
    evictions: u64,
    removals: u64,
    /// Reuse (RSW hits) of pages when they left the RestSeg: 0, 1–5, 6–20, > 20.
    reuse_hist: [u64; 4],
}

/// One RestSeg: its frames and the OS's global TAR.
struct RestSeg {
    base: u64,
    size: u64,
    page: PageSize,
    shift: u32,
    sets: u64,
    ways: usize,
    hash: SetHash,
    /// Global TAR: tag = VPN << 16 | ASID; SRRIP picks the victim.
    global: SetAssoc,
    /// RSW hits of the page in each slot since it arrived.
    reuse: Vec<u32>,
    /// Bits of one set's TAR entries and of one SF counter.
    set_bits: u64,
    sf_counter_bits: u64,
    tar_bytes: u64,
    sf_bytes: u64,
    stats: SegStats,
}

#[inline(always)]
fn gtag(vpn: u64, asid: u16) -> u64 {
    (vpn << 16) | asid as u64
}

impl RestSeg {
    #[inline(always)]
    fn set_of(&self, vpn: u64) -> usize {
        self.hash.set(vpn, self.sets) as usize
    }
    #[inline(always)]
    fn slot_pa(&self, slot: usize) -> u64 {
        self.base + slot as u64 * self.page.bytes()
    }
    #[inline(always)]
    fn contains(&self, pa: u64) -> bool {
        pa >= self.base && pa < self.base + self.size
    }
    /// Byte offsets (first, last) in the TAR of `set`'s entries.
    #[inline(always)]
    fn tar_span(&self, set: usize) -> (u64, u64) {
        let first = set as u64 * self.set_bits;
        (first / 8, (first + self.set_bits - 1) / 8)
    }
    #[inline(always)]
    fn sf_offset(&self, set: usize) -> u64 {
        set as u64 * self.sf_counter_bits / 8
    }
    fn record_reuse(&mut self, slot: usize) {
        let r = std::mem::take(&mut self.reuse[slot]);
        let b = match r {
            0 => 0,
            1..=5 => 1,
            6..=20 => 2,
            _ => 3,
        };
        self.stats.reuse_hist[b] += 1;
        self.stats.removals += 1;
    }
}

const NO_TAG: u64 = u64::MAX;

/// One process's TAR and SF of one RestSeg.
struct SegSpace {
    /// Per slot: the VPN of this process's page there, or `NO_TAG`.
    tar: Vec<u64>,
    /// Per slot: protection (part of the 10 metadata bits).
    prot: Vec<u8>,
    /// Per set: pages of this process in the set.
    sf: Vec<u8>,
    /// VPN → slot, sorted (the OS's range index).
    index: BTreeMap<u64, u32>,
    tar_pfn: Pfn,
    tar_order: u32,
    sf_pfn: Pfn,
    sf_order: u32,
}

/// One address space: the FlexSeg radix table, a TAR and SF per RestSeg, PTW counters.
pub struct UtopiaSpace {
    asid: u16,
    radix: RadixSpace,
    segs: Vec<SegSpace>,
    /// FlexSeg pages' PTW counters: VPN (4 KiB units) of the page base → (walks, DRAM refs).
    ptw: IntMap<(u8, u8)>,
}

/// Per-core walk caches: the FlexSeg PWCs and the TAR and SF caches.
pub struct UtopiaWc {
    pwc: RadixPwc,
    tar: WalkCache,
    sf: WalkCache,
    latency: u32,
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
    /// PTW-tracking candidates not yet handed to the OS, and those handed over this epoch.
    pending: Vec<MigrationRequest>,
    queued: IntMap<()>,
    in_flight: IntMap<()>,
    rsw: u64,
    rsw_hits: u64,
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
            radix: Radix::new(radix),
            levels: radix.levels,
            va_bits: 12 + 9 * radix.levels as u32,
            segs: Vec::new(),
            spaces: Vec::new(),
            sizes,
            pending: Vec::new(),
            queued: IntMap::default(),
            in_flight: IntMap::default(),
            rsw: 0,
            rsw_hits: 0,
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
        let row = &ss.tar[set * g.ways..(set + 1) * g.ways];
        row.iter().position(|&t| t == vpn).map(|w| set * g.ways + w)
    }

    /// Whether any RestSeg page of `s` overlaps `[start, end)` (host-side index; `count` charges
    /// one read per RestSeg probed).
    fn rest_overlaps(&self, s: &UtopiaSpace, start: u64, end: u64, mut count: Option<&mut OsCost>) -> bool {
        for (i, g) in self.segs.iter().enumerate() {
            if let Some(c) = count.as_deref_mut() {
                c.read(1);
            }
            let lo = start >> g.shift;
            let hi = end.div_ceil(g.page.bytes());
            if s.segs[i].index.range(lo..hi).next().is_some() {
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
        let vpn = std::mem::replace(&mut ss.tar[slot], NO_TAG);
        ss.sf[set] -= 1;
        ss.index.remove(&vpn);
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
                for set in 0..g.sets as usize {
                    let mut n = 0;
                    for way in 0..g.ways {
                        let slot = set * g.ways + way;
                        let t = ss.tar[slot];
                        if t == NO_TAG {
                            continue;
                        }
                        n += 1;
                        if g.global.tag_at(set, way) != Some(gtag(t, s.asid)) {
                            return Err(format!("RestSeg {i} slot {slot}: ASID {} TAR holds vpn {t:#x}, global TAR disagrees", s.asid));
                        }
                        if g.set_of(t) != set {
                            return Err(format!("RestSeg {i}: vpn {t:#x} in set {set}, hashes to {}", g.set_of(t)));
                        }
                        if ss.index.get(&t) != Some(&(slot as u32)) {
                            return Err(format!("RestSeg {i}: index of ASID {} lacks vpn {t:#x}", s.asid));
                        }
                        owned[slot] = true;
                    }
                    if ss.sf[set] as usize != n {
                        return Err(format!("RestSeg {i} set {set}: ASID {} SF says {} pages, TAR holds {n}", s.asid, ss.sf[set]));
                    }
                }
                if ss.index.len() != ss.tar.iter().filter(|&&t| t != NO_TAG).count() {
                    return Err(format!("RestSeg {i}: ASID {} index and TAR sizes differ", s.asid));
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
                for &vpn in s.segs[i].index.keys() {
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

impl Tdb for Utopia {
    type Space = UtopiaSpace;

    fn create_space(&mut self, asid: u16, env: &mut TdbEnv) -> Result<UtopiaSpace> {
        let radix = self.radix.create_space(asid, env)?;
        let mut segs = Vec::new();
        let mut info = SpaceInfo::default();
        for g in &self.segs {
            let order_for = |bytes: u64| ceil_log2(bytes.div_ceil(4096).max(1));
            let (tar_order, sf_order) = (order_for(g.tar_bytes), order_for(g.sf_bytes));
            let tar_pfn = env.alloc_table(tar_order)?;
            let sf_pfn = env.alloc_table(sf_order)?;
            info.tar_base.push(tar_pfn.addr());
            info.sf_base.push(sf_pfn.addr());
            let slots = (g.sets as usize) * g.ways;
            segs.push(SegSpace {
                tar: vec![NO_TAG; slots],
                prot: vec![0; slots],
                sf: vec![0; g.sets as usize],
                index: BTreeMap::new(),
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
        Ok(UtopiaSpace { asid, radix, segs, ptw: IntMap::default() })
    }

    fn destroy_space(&mut self, mut s: UtopiaSpace, env: &mut TdbEnv) -> Result<()> {
        for i in 0..self.segs.len() {
            let slots: Vec<u32> = s.segs[i].index.values().copied().collect();
            for slot in slots {
                self.clear_slot(&mut s, i, slot as usize, env);
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
        if s.segs[i].tar[slot] == vpn {
            // Same page, same frame: only metadata changes.
            s.segs[i].prot[slot] = o.prot;
            env.cost.write(1);
            return Ok(());
        }
        if let Some(t) = g.global.tag_at(set, way) {
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
        let g = &mut self.segs[i];
        g.global.insert_at(set, way, tag);
        g.reuse[slot] = 0;
        let ss = &mut s.segs[i];
        ss.tar[slot] = vpn;
        ss.prot[slot] = o.prot;
        ss.sf[set] += 1;
        ss.index.insert(vpn, slot as u32);
        env.cost.write(3); // TAR entry, SF counter, global TAR
        s.ptw.remove(&(o.va >> 12));
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
        s.ptw.remove(&(va >> 12));
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
            let lo = start.div_ceil(g.page.bytes());
            let hi = end.div_ceil(g.page.bytes());
            for (&vpn, &slot) in ss.index.range(lo..hi) {
                env.cost.read(1);
                objs.push(TObj::new(vpn << g.shift, g.slot_pa(slot as usize), g.page, ss.prot[slot as usize]));
            }
        }
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

/// The RestSeg walks (RSWs), all RestSegs in parallel (one step), beside the L2 TLB.
impl SideLookup<Utopia> for Utopia {
    fn side_lookup(&mut self, s: &mut UtopiaSpace, wc: &mut UtopiaWc, _asid: u16, va: u64, plan: &mut WalkPlan) -> Option<Translation> {
        if self.segs.is_empty() {
            return None;
        }
        let Some(Some(info)) = self.spaces.get(s.asid as usize) else { return None };
        self.rsw += 1;
        plan.fixed_cycles += wc.latency;
        let mut found: Option<(Translation, usize, usize)> = None;
        for (i, g) in self.segs.iter_mut().enumerate() {
            let ss = &s.segs[i];
            let vpn = va >> g.shift;
            let set = g.set_of(vpn);
            let first_ref = plan.refs.len();
            g.stats.rsw += 1;
            // SF and TAR caches are probed in parallel.
            let sf_line = (info.sf_base[i] + g.sf_offset(set)) >> 6;
            g.stats.sf_lookups += 1;
            plan.unfiltered += 1;
            let sf_hit = wc.sf.lookup(0, sf_line).is_some();
            if sf_hit {
                g.stats.sf_hits += 1;
            } else {
                plan.push(sf_line << 6, 0, true);
                wc.sf.insert(0, sf_line, 0);
            }
            let count = ss.sf[set];
            if count == 0 && sf_hit {
                g.stats.sf_filtered += 1;
                continue; // the SF says the set is empty: no tag matching
            }
            let (a, b) = g.tar_span(set);
            let (l0, l1) = ((info.tar_base[i] + a) >> 6, (info.tar_base[i] + b) >> 6);
            for line in l0..=l1 {
                g.stats.tar_lookups += 1;
                plan.unfiltered += 1;
                if wc.tar.lookup(0, line).is_some() {
                    g.stats.tar_hits += 1;
                } else {
                    // After an SF miss the TAR line is fetched alongside; the walk waits for it only
                    // if the set turns out not to be empty.
                    plan.push(line << 6, 0, count != 0);
                    wc.tar.insert(0, line, 0);
                }
            }
            if count == 0 {
                continue;
            }
            let row = &ss.tar[set * g.ways..(set + 1) * g.ways];
            if let Some(way) = row.iter().position(|&t| t == vpn) {
                let slot = set * g.ways + way;
                g.global.touch(set, way);
                g.reuse[slot] = g.reuse[slot].saturating_add(1);
                g.stats.rsw_hits += 1;
                found = Some((Translation { pbase: g.slot_pa(slot), size: g.page }, first_ref, plan.refs.len()));
            }
        }
        let (t, lo, hi) = found?;
        // The hit ends the walk: other RestSegs' references are not waited for.
        for (k, r) in plan.refs.iter_mut().enumerate() {
            if k < lo || k >= hi {
                r.needed = false;
            }
        }
        self.rsw_hits += 1;
        Some(t)
    }

    /// Fig. 17: RSWs start on every L1 TLB miss (`arch.utopia.rsw_on_l1_miss`); the FlexSeg walk
    /// overlaps them unless `arch.utopia.fsw_waits_for_rsw`.
    fn side_timing(&self) -> SideTiming {
        SideTiming {
            start: if self.cfg.rsw_on_l1_miss { SideStart::L1Miss } else { SideStart::L2Miss },
            gates_walk: self.cfg.fsw_waits_for_rsw,
        }
    }
}

/// Placement into the RestSegs at faults, promotions and migrations (§5.2).
impl FramePlacement<Utopia> for Utopia {
    fn boot(&mut self, phys: &mut dyn Frames) -> Result<()> {
        for (i, r) in self.cfg.restsegs.clone().iter().enumerate() {
            let unit = r.page.bytes() * r.ways as u64;
            let size = if r.size == 0 {
                let free = phys.free_pages() * 4096;
                (free.saturating_sub(self.cfg.kernel_reserve) / unit) * unit
            } else {
                r.size
            };
            let key = format!("arch.utopia.restsegs[{i}].size");
            if size == 0 {
                return Err(Error::config(key, "no memory left for this RestSeg"));
            }
            let sets = size / unit;
            if r.hash == SetHash::Xor && !sets.is_power_of_two() {
                return Err(Error::config(
                    format!("arch.utopia.restsegs[{i}].hash"),
                    format!("xor needs a power-of-two number of sets, found {sets}"),
                ));
            }
            let pfn = phys.reserve_contiguous(size / 4096, r.page.order()).ok_or_else(|| {
                Error::config(key, format!("cannot reserve {} of contiguous memory at boot", crate::addr::fmt_bytes(size)))
            })?;
            let ways = r.ways as u64;
            let entry = tar_entry_bits(r.page.bytes(), sets, self.va_bits) as u64;
            let sf_counter_bits = ceil_log2(ways) as u64 + 1;
            self.segs.push(RestSeg {
                base: pfn.addr(),
                size,
                page: r.page,
                shift: r.page.shift(),
                sets,
                ways: r.ways as usize,
                hash: r.hash,
                global: SetAssoc::new(sets as usize, r.ways as usize, Replacement::Srrip),
                reuse: vec![0; (sets * ways) as usize],
                set_bits: entry * ways,
                sf_counter_bits,
                tar_bytes: tar_bits(size, r.page.bytes(), ways, self.va_bits).div_ceil(8),
                sf_bytes: sf_bits(size, r.page.bytes(), ways).div_ceil(8),
                stats: SegStats::default(),
            });
        }
        Ok(())
    }

    fn place(&mut self, s: &mut UtopiaSpace, asid: u16, va: u64, size: PageSize, flags: MapFlags, env: &mut TdbEnv) -> Placement {
        let migrating = self.in_flight.remove(&page_key(asid, va)).is_some();
        // Already in a RestSeg (a stale migration request): it stays where it is.
        for (i, g) in self.segs.iter().enumerate() {
            if g.page == size {
                if let Some(&slot) = s.segs[i].index.get(&(va >> g.shift)) {
                    return Placement::Frame { pa: g.slot_pa(slot as usize), evict: None };
                }
            }
        }
        if flags.shared && self.cfg.flexseg {
            self.shared_to_flexseg += 1;
            return Placement::Buddy; // shared pages always live in the FlexSeg
        }
        let policy = if !self.cfg.flexseg || migrating { FaultAlloc::Evict } else { self.cfg.fault_alloc };
        if policy == FaultAlloc::Off {
            return Placement::Buddy;
        }
        // A free way in any RestSeg of this size (the global TAR's set), else the first one's victim.
        let mut first = None;
        for i in 0..self.segs.len() {
            let g = &mut self.segs[i];
            if g.page != size {
                continue;
            }
            let vpn = va >> g.shift;
            let set = g.set_of(vpn);
            env.cost.hash(1);
            env.cost.read(g.ways as u64);
            if let Some(way) = (0..g.ways).find(|&w| g.global.tag_at(set, w).is_none()) {
                if migrating {
                    g.stats.migration_placements += 1;
                } else {
                    g.stats.fault_allocs += 1;
                }
                return Placement::Frame { pa: g.slot_pa(set * g.ways + way), evict: None };
            }
            first.get_or_insert((i, set));
        }
        let Some((i, set)) = first else { return Placement::Buddy };
        if policy == FaultAlloc::Free {
            return Placement::Buddy;
        }
        let g = &mut self.segs[i];
        let way = g.global.choose_way(set);
        let t = g.global.tag_at(set, way).expect("a full set");
        let victim = Evict {
            asid: (t & 0xffff) as u16,
            va: (t >> 16) << g.shift,
            size: g.page,
            to: if self.cfg.flexseg { EvictTo::Buddy } else { EvictTo::Swap },
        };
        g.stats.evictions += 1;
        if migrating {
            g.stats.migration_placements += 1;
        } else {
            g.stats.fault_allocs += 1;
        }
        Placement::Frame { pa: g.slot_pa(set * g.ways + way), evict: Some(victim) }
    }

    fn owns_frame(&self, pa: u64) -> bool {
        self.segs.iter().any(|g| g.contains(pa))
    }
}

/// PTW-tracking migration from the FlexSeg into a RestSeg (§5.3).
impl MigrationPolicy<Utopia> for Utopia {
    fn walk_observed(&mut self, s: &mut UtopiaSpace, asid: u16, va: u64, t: Option<Translation>, dram_refs: u32) {
        let m = &self.cfg.migrate;
        let Some(t) = t else { return };
        if !m.enabled || !self.segs.iter().any(|g| g.page == t.size) {
            return;
        }
        let base = t.size.align_down(va);
        let c = s.ptw.entry(base >> 12).or_insert((0, 0));
        c.0 = (c.0 + 1).min(15);
        c.1 = (c.1 as u32 + dram_refs).min(31) as u8;
        if c.0 as u32 >= m.min_walks && c.1 as u32 >= m.min_dram_refs {
            s.ptw.remove(&(base >> 12));
            let key = page_key(asid, base);
            if self.queued.insert(key, ()).is_none() {
                self.pending.push(MigrationRequest { asid, va: base, size: t.size });
                self.migration_requests += 1;
            }
        }
    }

    fn take_migrations(&mut self) -> Vec<MigrationRequest> {
        self.in_flight.clear();
        self.queued.clear();
        for r in &self.pending {
            self.in_flight.insert(page_key(r.asid, r.va), ());
        }
        std::mem::take(&mut self.pending)
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
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::{Os, OsConfig};
    use crate::tapi::prot;

    fn seg(size: u64, page: PageSize, ways: u32) -> RestSegConfig {
        RestSegConfig { size, page, ways, hash: SetHash::Modulo }
    }

    fn os_with(cfg: UtopiaConfig, memory: u64, swap: bool) -> Os<Utopia> {
        let mut oc = OsConfig { memory, ..OsConfig::default() };
        oc.swap.enabled = swap;
        oc.swap.min_free = 0;
        let d = Utopia::new(&cfg, &super::super::radix::RadixConfig::default());
        Os::boot(d, &oc, 1).unwrap()
    }

    fn check(os: &mut Os<Utopia>) {
        let Os { driver, procs, .. } = os;
        driver.check_consistency(procs.iter_mut().map(|p| &mut p.space)).unwrap();
        // The OS's truth and the driver agree on every page.
        for p in procs.iter_mut() {
            let mut objs = Vec::new();
            let mut cost = OsCost::default();
            let mut phys = PhysMem::new(64 << 20, 9);
            driver.for_each(&mut p.space, 0, 1 << 47, &mut TdbEnv { phys: &mut phys, cost: &mut cost }, &mut |o| objs.push(*o));
            let n: u64 = p.truth.counts().iter().sum();
            assert_eq!(objs.len() as u64, n, "ASID {}", p.asid);
            for o in objs {
                assert_eq!(p.truth.lookup(o.va), Some((o.pa, o.size)), "{:#x}", o.va);
            }
        }
    }

    #[test]
    fn size_formulas_match_the_paper() {
        // Footnotes 8-9 example: 16 KB RestSeg, 4 KB pages, 2-way: TAR 180 bits, SF 4 bits.
        assert_eq!(tar_bits(16 << 10, 4096, 2, 48), 180);
        assert_eq!(sf_bits(16 << 10, 4096, 2), 4);
        // §8.3.1: a 512 MB 4 KB 16-way RestSeg has a 528 KB TAR.
        assert_eq!(tar_bits(512 << 20, 4096, 16, 48) / 8, 528 << 10);
        // SF: 8192 sets × 5 bits = 5 KB (the paper's 17 KB does not follow from footnote 9).
        assert_eq!(sf_bits(512 << 20, 4096, 16) / 8, 5 << 10);
        // Fig. 13's direction: TAR+SF smaller than the radix table for the same pages.
        let pages = (512u64 << 20) / 4096;
        assert!(tar_bits(512 << 20, 4096, 16, 48) / 8 + sf_bits(512 << 20, 4096, 16) / 8 < radix_bytes_for(pages, PageSize::K4, 4));
        assert_eq!(radix_bytes_for(pages, PageSize::K4, 4), (256 + 1 + 1 + 1) * 4096);
    }

    #[test]
    fn set_hashes() {
        let s = 64u64;
        for h in [SetHash::Modulo, SetHash::Xor, SetHash::Prime, SetHash::Mersenne] {
            for v in 0..10_000u64 {
                assert!(h.set(v * 7919, s) < s);
            }
        }
        // Modulo: consecutive VPNs fill consecutive sets; a stride of `sets` lands in one set.
        assert_eq!((0..64).map(|v| SetHash::Modulo.set(v, s)).collect::<Vec<_>>(), (0..64).collect::<Vec<_>>());
        assert!((0..16).all(|i| SetHash::Modulo.set(i * s, s) == 0));
        // XOR and prime displacement spread that stride over distinct sets.
        for h in [SetHash::Xor, SetHash::Prime] {
            let mut sets: Vec<u64> = (0..16).map(|i| h.set(i * s, s)).collect();
            sets.sort();
            sets.dedup();
            assert_eq!(sets.len(), 16, "{h:?}");
        }
        // Mersenne modulo over 64 sets uses 63 of them: vpn mod 63.
        assert_eq!(SetHash::Mersenne.set(63, s), 0);
        assert_eq!(SetHash::Mersenne.set(64, s), 1);
        assert!((0..1000).all(|v| SetHash::Mersenne.set(v, s) < 63));
        assert_eq!(SetHash::Xor.set(0b01_000011, 64), 0b000011 ^ 0b01);
        assert_eq!(SetHash::Prime.set(2 * 64 + 5, 64), 2 * 17 + 5);
    }

    #[test]
    fn srrip_victims_on_a_hand_made_sequence() {
        // One set of 4 ways (4 × 4 KiB RestSeg), FlexSeg behind it.
        let cfg = UtopiaConfig { restsegs: vec![seg(16 << 10, PageSize::K4, 4)], ..UtopiaConfig::default() };
        let mut os = os_with(cfg, 256 << 20, false);
        let a = os.spawn(true).unwrap();
        let base = 0x1000_0000u64;
        let pg = |i: u64| base + i * 4096;
        // Fill A B C D (ways 0..3, RRPV 2 each).
        for i in 0..4 {
            os.fault(a, pg(i)).unwrap();
        }
        let in_rest = |os: &Os<Utopia>, i: u64| os.driver.owns_frame(os.truth(a, pg(i)).unwrap().pbase);
        assert!((0..4).all(|i| in_rest(&os, i)));
        // RSW hit on B: RRPV 0.
        let mut wc = os.driver.new_walk_cache();
        let mut plan = WalkPlan::default();
        let t = os.side_lookup(a, &mut wc, pg(1), &mut plan).unwrap();
        assert_eq!(Some(t), os.truth(a, pg(1)));
        // E: ages to [3 1 3 3], evicts A (way 0). F evicts C (way 2), G evicts D, then H ages [.. 2 ..]
        // and evicts B last.
        os.fault(a, pg(4)).unwrap();
        assert!(!in_rest(&os, 0) && in_rest(&os, 1) && in_rest(&os, 4));
        os.fault(a, pg(5)).unwrap();
        assert!(!in_rest(&os, 2));
        os.fault(a, pg(6)).unwrap();
        assert!(!in_rest(&os, 3));
        assert!(in_rest(&os, 1), "the reused page survives three fills");
        // All evicted pages still mapped, in the FlexSeg.
        for i in 0..7 {
            assert!(os.truth(a, pg(i)).is_some());
        }
        assert_eq!(os.stats.evictions, 3);
        check(&mut os);
    }

    #[test]
    fn tar_and_sf_agree_with_the_global_tar_through_allocation_eviction_migration_and_unmap() {
        // Two processes share a small 4 KiB RestSeg (8 sets × 2 ways) and a 2 MiB one (1 set × 2 ways).
        let cfg = UtopiaConfig { restsegs: vec![seg(64 << 10, PageSize::K4, 2), seg(4 << 20, PageSize::M2, 2)], ..UtopiaConfig::default() };
        let mut os = os_with(cfg, 512 << 20, false);
        let a = os.spawn(false).unwrap();
        let b = os.spawn(false).unwrap();
        let fl = MapFlags::default();
        let va = os.mmap(a, 64 << 20, fl).unwrap();
        let vb = os.mmap(b, 64 << 20, fl).unwrap();
        let mut rng = crate::rng::Rng::new(7);
        for _ in 0..400 {
            let (asid, base) = if rng.next_u64().is_multiple_of(2) { (a, va) } else { (b, vb) };
            let off = (rng.next_u64() % 64) * 4096;
            match rng.next_u64() % 8 {
                0 => os.munmap(asid, base + off, 4096).unwrap_or(()),
                1 => {
                    // A PTW-tracking request for a FlexSeg page, served at the next tick.
                    if let Some(t) = os.truth(asid, base + off) {
                        if !os.driver.owns_frame(t.pbase) {
                            let p = &mut os.procs[asid as usize];
                            os.driver.walk_observed(&mut p.space, asid, base + off, Some(t), 2);
                            os.driver.walk_observed(&mut p.space, asid, base + off, Some(t), 1);
                        }
                    }
                    os.tick(0.0).unwrap();
                }
                _ => {
                    if os.vma(asid, base + off).is_some() && os.truth(asid, base + off).is_none() {
                        os.fault(asid, base + off).unwrap();
                    }
                }
            }
            check(&mut os);
        }
        assert!(os.stats.evictions > 0, "{:?}", os.stats);
        assert!(os.stats.migrations > 0, "{:?}", os.stats);
        let m = os.driver.metrics();
        assert!(m["fault_allocations"].as_u64().unwrap() > 0);
        assert!(m["migrations_to_restseg"].as_u64().unwrap() > 0);
    }

    #[test]
    fn shared_pages_stay_in_the_flexseg_and_huge_pages_use_the_2m_restseg() {
        let cfg = UtopiaConfig::default();
        let mut os = os_with(cfg, 2 << 30, false);
        let a = os.spawn(false).unwrap();
        let shared = MapFlags { shared: true, ..MapFlags::default() };
        let v = os.mmap(a, 1 << 20, shared).unwrap();
        let t = os.fault(a, v).unwrap();
        assert!(!os.driver.owns_frame(t.pbase));
        let h = os.mmap(a, 8 << 20, MapFlags { huge: crate::workload::HugeAdvice::Huge, ..MapFlags::default() }).unwrap();
        let p = os.fault(a, h).unwrap();
        // THP is off in this OS, so the 4 KiB RestSeg holds it.
        assert_eq!(p.size, PageSize::K4);
        assert!(os.driver.owns_frame(p.pbase));
        // Placing a 2 MiB page by hand through the API: the 2 MiB RestSeg frame is accepted.
        let g = os.driver.segs.iter().position(|g| g.page == PageSize::M2).unwrap();
        let seg = &os.driver.segs[g];
        let hb = h + (2 << 20);
        let set = seg.set_of(hb >> 21);
        let pa = seg.slot_pa(set * seg.ways);
        let mut cost = OsCost::default();
        let mut phys = PhysMem::new(64 << 20, 9);
        let (d, s) = (&mut os.driver, &mut os.procs[a as usize].space);
        d.update(s, &TObj::new(hb, pa, PageSize::M2, prot::RW), &mut TdbEnv { phys: &mut phys, cost: &mut cost }).unwrap();
        // A 4 KiB page inside it is an overlap; a frame in the wrong set is refused.
        assert!(d
            .update(s, &TObj::new(hb + 4096, 0x7000_0000, PageSize::K4, prot::RW), &mut TdbEnv { phys: &mut phys, cost: &mut cost })
            .is_err());
        let wrong = seg_pa_other_set(d, g, hb + (2 << 20));
        assert!(d
            .update(s, &TObj::new(hb + (2 << 20), wrong, PageSize::M2, prot::RW), &mut TdbEnv { phys: &mut phys, cost: &mut cost })
            .is_err());
        assert_eq!(d.find(s, hb + 12345, &mut TdbEnv { phys: &mut phys, cost: &mut cost }).unwrap().pa, pa);
    }

    fn seg_pa_other_set(d: &Utopia, g: usize, va: u64) -> u64 {
        let seg = &d.segs[g];
        let set = seg.set_of(va >> seg.shift);
        seg.slot_pa(((set + 1) % seg.sets as usize) * seg.ways)
    }

    #[test]
    fn rsw_references_and_the_sf_filter() {
        let cfg = UtopiaConfig::default();
        let mut os = os_with(cfg, 2 << 30, false);
        let a = os.spawn(true).unwrap();
        let mut wc = os.driver.new_walk_cache();
        let mut plan = WalkPlan::default();
        // Nothing mapped: both SF lines are fetched (SF cache cold), TAR lines too but not waited for.
        assert!(os.side_lookup(a, &mut wc, 0x4000_0000, &mut plan).is_none());
        assert_eq!(plan.fixed_cycles, 2);
        assert!(plan.refs.iter().filter(|r| r.needed).count() == 2, "{:?}", plan.refs);
        assert!(plan.refs.len() > 2);
        // Again: SF cache hits and says empty, so nothing goes to memory.
        plan.clear();
        assert!(os.side_lookup(a, &mut wc, 0x4000_0000, &mut plan).is_none());
        assert!(plan.refs.is_empty());
        // Mapped: found, with the frame the OS installed.
        let t = os.fault(a, 0x4000_0000).unwrap();
        plan.clear();
        wc = os.driver.new_walk_cache();
        assert_eq!(os.side_lookup(a, &mut wc, 0x4000_0123, &mut plan), Some(t));
        // The FlexSeg walk does not see it.
        plan.clear();
        assert!(os.walk(a, &mut wc, 0x4000_0000, &mut plan).is_none());
    }

    #[test]
    fn restrictive_only_swaps_a_set_conflict_out() {
        // No FlexSeg: one 4 KiB RestSeg of 4 sets × 2 ways; the fifth and later pages of a set evict.
        let cfg = UtopiaConfig { restsegs: vec![seg(32 << 10, PageSize::K4, 2)], flexseg: false, ..UtopiaConfig::default() };
        let mut os = os_with(cfg, 128 << 20, true);
        let a = os.spawn(true).unwrap();
        // Pages 0, 4, 8 hash to set 0: the third is a conflict although 6 ways are free.
        for i in [0u64, 4, 8] {
            os.fault(a, i * 4096).unwrap();
        }
        assert_eq!(os.stats.swap_outs, 1);
        assert!(os.truth(a, 0).is_none(), "page 0 (SRRIP victim) went to swap");
        os.fault(a, 0).unwrap();
        assert_eq!(os.stats.swap_ins, 1);
        assert_eq!(os.stats.faults_swapin, 1);
        check(&mut os);
    }

    #[test]
    fn a_huge_victim_is_split_when_memory_has_no_2m_block() {
        let cfg = UtopiaConfig { restsegs: vec![seg(4 << 20, PageSize::M2, 2)], ..UtopiaConfig::default() };
        let mut oc = OsConfig { memory: 256 << 20, thp: crate::os::ThpMode::Always, ..OsConfig::default() };
        oc.fragmentation.method = crate::os::FragMethod::Free2m;
        oc.fragmentation.target = 1.0;
        let d = Utopia::new(&cfg, &super::super::radix::RadixConfig::default());
        let mut os = Os::boot(d, &oc, 1).unwrap();
        assert_eq!(os.phys.free_blocks(9), 0, "no free 2 MiB block outside the RestSeg");
        let a = os.spawn(false).unwrap();
        let v = os.mmap(a, 16 << 20, MapFlags::default()).unwrap();
        for i in 0..3 {
            assert_eq!(os.fault(a, v + i * (2 << 20)).unwrap().size, PageSize::M2);
        }
        // The third 2 MiB page evicted the first, which now lives in 512 FlexSeg 4 KiB pages.
        assert_eq!(os.stats.evictions, 1);
        assert_eq!(os.truth(a, v + 0x1234).unwrap().size, PageSize::K4);
        assert_eq!(os.procs[a as usize].truth.counts()[PageSize::K4.index()], 512);
        check(&mut os);
    }

    #[test]
    fn iterators_agree_with_generic() {
        let cfg = UtopiaConfig { restsegs: vec![seg(64 << 10, PageSize::K4, 2)], ..UtopiaConfig::default() };
        let mut os = os_with(cfg, 256 << 20, false);
        let a = os.spawn(true).unwrap();
        for i in 0..40u64 {
            os.fault(a, 0x20_0000 + i * 4096 * 3).unwrap();
        }
        let mut cost = OsCost::default();
        let mut phys = PhysMem::new(64 << 20, 9);
        let (d, s) = (&mut os.driver, &mut os.procs[a as usize].space);
        let env = &mut TdbEnv { phys: &mut phys, cost: &mut cost };
        for (lo, hi) in [(0u64, 0x20_0000u64), (0x20_0000, 0x40_0000), (0x20_5000, 0x21_0000), (0, 1 << 40)] {
            let mut v1 = Vec::new();
            d.for_each(s, lo, hi, env, &mut |o| v1.push(*o));
            let mut v2 = Vec::new();
            crate::tapi::generic_for_each(d, s, lo, hi, env, &mut |o| v2.push(*o));
            assert_eq!(v1, v2, "{lo:#x}..{hi:#x}");
            assert_eq!(d.range_is_empty(s, lo, hi, env), crate::tapi::generic_range_is_empty(d, s, lo, hi, env));
        }
    }
}
