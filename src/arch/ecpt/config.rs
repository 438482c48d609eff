//! ECPT's configuration section (`arch.ecpt`): EMT's kernel parameters and the Utopia and
//! Virtuoso variants.

use super::*;

/// ECPT driver configuration (`[arch.ecpt]`). Defaults: EMT's kernel (reference/parameters.md,
/// "EMT" table).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EcptConfig {
    /// Page sizes with a cuckoo table (EMT: 4K and 2M; "1G none by default").
    pub sizes: Vec<PageSize>,
    /// Ways per table, d (EMT: 3; Utopia's ECH: 4; Virtuoso: 2). At most 4: a CWT header has a
    /// 2-bit way field.
    pub ways: u32,
    /// Initial entries (64-byte clusters) per way (EMT: 16384; Utopia: 8192; Virtuoso: 262144).
    pub entries_per_way: u64,
    /// Occupancy of a way that starts its resize (EMT and Utopia: 0.6; Virtuoso: 0.7).
    pub resize_threshold: f64,
    /// Growth factor of a resized way (EMT: 4; Utopia: 10; Virtuoso: 2).
    pub resize_scale: u32,
    /// Entries moved from an old way to the new one per insert while a resize is in progress
    /// (EMT: 16; 0 moves everything when the resize starts).
    pub migrate_per_step: u32,
    /// Cuckoo evictions before an insertion resizes the table instead (EMT: 128).
    pub max_kicks: u32,
    /// Cycles to hash a VPN (EMT: 2, MurmurHash64; Utopia: 2, CityHash).
    pub hash_latency: u32,
    /// Use cuckoo walk tables and caches (false: every walk probes every way of every table).
    pub cwt: bool,
    /// Use the 2-bit way field of a CWT header: a walk to a 2 MiB / 1 GiB page whose header is
    /// known probes that one way (EMT's kernel, QEMU walker and simulator; Virtuoso's CWC filter).
    /// False: headers give only the page size, and every way of that size is probed. 4 KiB pages
    /// have no way in any header (a section holds many 4 KiB clusters, each in its own way).
    pub cwc_way: bool,
    /// On a CWC miss, wait for the CWT line before probing (one more serial step). False (EMT's
    /// simulator and QEMU walker, Virtuoso): probe every way of every table at once and refill
    /// the CWC from the CWT in the background.
    pub wait_for_cwt: bool,
    /// An oracle for what-if studies: a walk that finds its translation issues only the probe
    /// that holds it (EMT's simulator's `ecpt_cache_correct_only` variant: only the entry that
    /// holds the translation goes to the caches). No hardware knows a 4 KiB page's way before
    /// probing; off by default.
    pub correct_way_only: bool,
    /// A perfect CWC: every walk knows the current headers at no cost, and no CWT line is ever
    /// fetched (Virtuoso's ECH, which Utopia's "optimistic" ECH comes from; reference/peers.md).
    pub perfect_cwc: bool,
    /// Ways of each CWT (EMT: 2).
    pub cwt_ways: u32,
    /// Initial lines per way of the PMD-CWT (EMT: 4096).
    pub pmd_cwt_entries: u64,
    /// Initial lines per way of the PUD-CWT (EMT: 2048).
    pub pud_cwt_entries: u64,
    /// PMD-level cuckoo walk cache (EMT: 16 entries, 16-way, 1 cycle).
    pub pmd_cwc: WalkCacheConfig,
    /// PUD-level cuckoo walk cache (EMT: 2 entries, 2-way, 1 cycle).
    pub pud_cwc: WalkCacheConfig,
    /// Use ECPT's customized range iterator and emptiness check (EMT §6.2); false delegates to
    /// the generic ones built on `find` (EMT §8.4 compares the two).
    pub optimized_api: bool,
}

impl Default for EcptConfig {
    fn default() -> Self {
        EcptConfig::emt()
    }
}

impl EcptConfig {
    /// EMT's kernel defaults (OSDI'25; reference/parameters.md, "EMT" rows).
    pub fn emt() -> EcptConfig {
        EcptConfig {
            sizes: vec![PageSize::K4, PageSize::M2],
            ways: 3,
            entries_per_way: 16384,
            resize_threshold: 0.6,
            resize_scale: 4,
            migrate_per_step: 16,
            max_kicks: 128,
            hash_latency: 2,
            cwt: true,
            cwc_way: true,
            wait_for_cwt: false,
            perfect_cwc: false,
            correct_way_only: false,
            cwt_ways: 2,
            pmd_cwt_entries: 4096,
            pud_cwt_entries: 2048,
            pmd_cwc: WalkCacheConfig::new(16, 16, 1),
            pud_cwc: WalkCacheConfig::new(2, 2, 1),
            optimized_api: true,
        }
    }

    /// Utopia's ECH (MICRO'23 Table 1): 8192 entries/way, 4 ways, scaling 10, occupancy 0.6,
    /// CityHash 2 cycles, 2 × 16-entry CWCs of 2 cycles (associativity not given: fully
    /// associative, as EMT's 16-entry PMD-CWC). Resizing and CWTs as EMT's. §7 calls the ECH
    /// "optimistic" without saying how its CWCs were modelled; Virtuoso (same group, carries
    /// Utopia's MMU) gives ECH a perfect CWC: the page size is known for free and no CWT line is
    /// fetched (`perfect_cwc`; the CWC geometry then only sets the fixed lookup latency).
    pub fn ech_utopia() -> EcptConfig {
        EcptConfig {
            ways: 4,
            entries_per_way: 8192,
            resize_threshold: 0.6,
            resize_scale: 10,
            hash_latency: 2,
            perfect_cwc: true,
            pmd_cwc: WalkCacheConfig::new(16, 16, 2),
            pud_cwc: WalkCacheConfig::new(16, 16, 2),
            ..EcptConfig::emt()
        }
    }

    /// Virtuoso's ECH preset (Sniper + MimicOS): 2 ways, 262144 entries per way, rehash at 0.7,
    /// × 2, CityHash (latency not given: 2 cycles as EMT/Utopia), a 64-entry CWC (one level there;
    /// here the PMD-CWC, 16-way, 1 cycle like Virtuoso's PWCs; the PUD-CWC keeps EMT's 2 entries).
    /// Its page-table walk keeps only the probes of the page size that holds the translation and
    /// fetches CWT rows for free (`pagetable_cuckoo.cc`, `cuckoo_filter.cc`): `perfect_cwc`.
    pub fn virtuoso() -> EcptConfig {
        EcptConfig {
            ways: 2,
            entries_per_way: 262_144,
            resize_threshold: 0.7,
            resize_scale: 2,
            perfect_cwc: true,
            pmd_cwc: WalkCacheConfig::new(64, 16, 1),
            ..EcptConfig::emt()
        }
    }

    /// Checks ranges; errors name `key.field`.
    pub fn validate(&self, key: &str) -> Result<()> {
        if self.sizes.is_empty() || !self.sizes.contains(&PageSize::K4) {
            return Err(Error::config(format!("{key}.sizes"), "must include \"4K\" (the OS always falls back to 4 KiB pages)"));
        }
        for (i, s) in self.sizes.iter().enumerate() {
            if size_slot(*s).is_none() {
                return Err(Error::config(format!("{key}.sizes"), format!("{s} has no ECPT table; sizes are 4K, 2M and 1G")));
            }
            if self.sizes[..i].contains(s) {
                return Err(Error::config(format!("{key}.sizes"), format!("{s} listed twice")));
            }
        }
        if !(1..=4).contains(&self.ways) {
            return Err(Error::config(
                format!("{key}.ways"),
                format!("must be 1 to 4 (2-bit way field of a CWT header), found {}", self.ways),
            ));
        }
        if !(1..=1 << 30).contains(&self.entries_per_way) {
            return Err(Error::config(format!("{key}.entries_per_way"), "must be between 1 and 2^30"));
        }
        if !(self.resize_threshold > 0.0 && self.resize_threshold <= 1.0) {
            return Err(Error::config(format!("{key}.resize_threshold"), format!("must be in (0, 1], found {}", self.resize_threshold)));
        }
        if self.resize_scale < 2 {
            return Err(Error::config(format!("{key}.resize_scale"), "must be at least 2"));
        }
        if !(1..=4).contains(&self.cwt_ways) {
            return Err(Error::config(format!("{key}.cwt_ways"), "must be 1 to 4"));
        }
        for (k, v) in [("pmd_cwt_entries", self.pmd_cwt_entries), ("pud_cwt_entries", self.pud_cwt_entries)] {
            if !(1..=1 << 30).contains(&v) {
                return Err(Error::config(format!("{key}.{k}"), "must be between 1 and 2^30"));
            }
        }
        if self.perfect_cwc && !self.cwt {
            return Err(Error::config(format!("{key}.perfect_cwc"), "needs cwt = true (a perfect CWC caches CWT headers)"));
        }
        self.pmd_cwc.validate(&format!("{key}.pmd_cwc"))?;
        self.pud_cwc.validate(&format!("{key}.pud_cwc"))
    }

    pub(super) fn params(&self) -> Params {
        Params {
            ways: self.ways as usize,
            entries: self.entries_per_way,
            threshold: self.resize_threshold,
            scale: self.resize_scale as u64,
            max_kicks: self.max_kicks,
            migrate_per_step: self.migrate_per_step,
        }
    }

    pub(super) fn cwt_params(&self, entries: u64) -> Params {
        Params { ways: self.cwt_ways as usize, entries, ..self.params() }
    }
}
