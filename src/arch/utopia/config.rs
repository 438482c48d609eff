//! Utopia's configuration section (`arch.utopia`), its set-index functions and the paper's
//! TAR/SF size formulas.

use super::*;

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
pub(super) const DISPLACEMENT_PRIME: u64 = 17;

pub(super) fn ceil_log2(x: u64) -> u32 {
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
            SetHash::Xor => xor_fold(vpn, ceil_log2(sets).max(1)) % sets,
            SetHash::Prime => ((vpn / sets).wrapping_mul(DISPLACEMENT_PRIME).wrapping_add(vpn % sets)) % sets,
            SetHash::Mersenne => vpn % mersenne(sets),
        }
    }

    /// What a VPN is divided by to give its tag, the VPN's part a TAR entry keeps (Utopia
    /// footnote 8: the bits above the set index): with the set, the tag names the VPN
    /// ([`SetHash::vpn`]), because each hash maps the `divisor` consecutive VPNs that share a
    /// tag to distinct sets. One set has no index bits: its tag is the VPN.
    pub fn divisor(self, sets: u64) -> u64 {
        match self {
            _ if sets <= 1 => 1,
            SetHash::Mersenne => mersenne(sets),
            _ => sets,
        }
    }

    /// The VPN of tag `tag` ([`SetHash::divisor`]) in `set`: the inverse of `set` given the tag.
    pub fn vpn(self, set: u64, tag: u64, sets: u64) -> u64 {
        let d = self.divisor(sets);
        match self {
            _ if d == 1 => tag,
            SetHash::Modulo | SetHash::Mersenne => tag * d + set,
            // The low chunk is what XORs with the tag's chunks to the set.
            SetHash::Xor => tag * d + (set ^ xor_fold(tag, ceil_log2(sets))),
            SetHash::Prime => tag * d + (set + d - tag.wrapping_mul(DISPLACEMENT_PRIME) % d) % d,
        }
    }
}

/// The XOR of the `b`-bit chunks of `x`.
#[inline]
fn xor_fold(mut x: u64, b: u32) -> u64 {
    let mask = (1u64 << b) - 1;
    let mut h = 0;
    while x != 0 {
        h ^= x & mask;
        x >>= b;
    }
    h
}

/// The modulus of [`SetHash::Mersenne`]: the largest 2^k − 1 not above `sets` (at least 1).
#[inline]
fn mersenne(sets: u64) -> u64 {
    let k = 63 - (sets + 1).leading_zeros();
    ((1u64 << k) - 1).max(1)
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

pub(super) fn default_hash() -> SetHash {
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

/// When RestSeg walks start (`arch.utopia.rsw_start`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RswStart {
    /// Only on L2 TLB misses.
    L2Miss,
    /// On every L1 TLB miss, beside the L2 TLB (Fig. 17, §5.7); an L2 TLB hit still probes (and
    /// fills) the TAR/SF caches. With `mmu.side_parallel = false` (Fig. 28's serial RSW) RSWs
    /// run only on L2 TLB misses anyway.
    L1Miss,
    /// Utopia's MICRO'23 artifact (the Sniper in CMU-SAFARI/Victima): an access to a page that
    /// is in a RestSeg (the simulator knows which) skips the L1 and L2 TLBs and is translated by
    /// the ULB (`ulb`) or else an RSW; RestSeg pages never enter the TLBs. Other pages look the
    /// TLBs up and RSW on an L2 TLB miss, beside the L2 TLB with `mmu.side_parallel`.
    BeforeL1,
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
    /// When RSWs start: `l1-miss` (Fig. 17, the default), `l2-miss`, or `before-l1` (the
    /// artifact's shortcut; see [`RswStart`]).
    pub rsw_start: RswStart,
    /// A translation an RSW finds is filled into the L2 and L1 TLBs (the paper); false = RestSeg
    /// translations never enter the TLBs and every L1 TLB miss of such a page RSWs again. With
    /// `rsw_start = "before-l1"` RestSeg pages bypass the TLBs whatever this says.
    pub rsw_fills_tlbs: bool,
    /// The artifact's Utopia lookaside buffer: a TLB of RestSeg translations only, probed before
    /// the RSW (a hit ends the lookup, adding `latency` cycles past the L1 TLB); an RSW hit fills
    /// it. 64 entries, 4-way, 1 cycle (= the L1 TLB's, so 0 here) in the artifact. `entries = 0`
    /// (the default, the paper): none.
    pub ulb: WalkCacheConfig,
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
            rsw_start: RswStart::L1Miss,
            rsw_fills_tlbs: true,
            ulb: WalkCacheConfig::new(0, 4, 0),
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
        if self.ulb.entries != 0 {
            self.ulb.validate(&format!("{key}.ulb"))?;
            if self.restsegs.len() > 8 {
                return Err(Error::config(format!("{key}.ulb"), "a ULB serves at most 8 RestSegs"));
            }
        }
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

pub(super) fn tar_entry_bits(page: u64, sets: u64, va_bits: u32) -> u32 {
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
