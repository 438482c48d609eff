//! The OS's configuration section (`os.*`): THP mode, khugepaged, Elastic Translations' and
//! Hawkeye's policies, fragmentation, costs, pools, migration and swap.

use super::eager;
use super::placement::{MigrationConfig, SwapConfig};
use crate::addr::{bytes_serde, PageSize};
use crate::error::{Error, Result};
use crate::tapi::OsCostModel;

/// Transparent huge page mode (`/sys/kernel/mm/transparent_hugepage/enabled`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThpMode {
    /// Never a 2 MiB page.
    Never,
    /// Only in VMAs advised `MADV_HUGEPAGE`.
    Madvise,
    /// Everywhere not advised `MADV_NOHUGEPAGE`.
    Always,
}

/// khugepaged settings (Linux defaults in `mm/khugepaged.c`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KhugepagedConfig {
    /// Run the promoter at all (only matters when THP is not `never`).
    pub enabled: bool,
    /// 4 KiB pages' worth of address space scanned per wake-up (Linux: 4096).
    pub pages_to_scan: u64,
    /// Simulated milliseconds between wake-ups (Linux: 10000).
    pub sleep_ms: f64,
    /// Collapse a 2 MiB region when at most this many of its 512 PTEs are empty (Linux: 511).
    pub max_ptes_none: u32,
}

impl Default for KhugepagedConfig {
    fn default() -> Self {
        KhugepagedConfig { enabled: true, pages_to_scan: 4096, sleep_ms: 10_000.0, max_ptes_none: 511 }
    }
}

/// CoalaPaging's fault-time placement (reference elastic-translations.md §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CoalaPaging {
    /// Plain buddy allocation.
    Off,
    /// Every fault gets the coalescing-aware placement: 4 KiB pages target their 64 KiB group,
    /// THPs their 32 MiB group (ET's default when no fault hints are used, `fault_hints=0`).
    Greedy,
    /// Leshy's hints choose per region (§2.2): unhinted regions skip THP and allocate plainly,
    /// 64K hints skip THP with 64 KiB placement, 2M hints take THP plainly, 32M hints take THP
    /// with 32 MiB placement. Greedy while no hints are loaded.
    Hinted,
}

/// Elastic Translations' OS mechanisms (`os.coala`): CoalaPaging and CoalaKhugepaged.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CoalaConfig {
    /// Fault-time placement.
    pub paging: CoalaPaging,
    /// CoalaKhugepaged: hint-driven asynchronous promotion (§3). ET's khugepaged skips ET-enabled
    /// processes' other regions, so designs using it turn `os.khugepaged.enabled` off.
    pub khugepaged: bool,
    /// Policy milliseconds between CoalaKhugepaged wake-ups (the evaluation's 1 s, §3 / env/et.env).
    pub sleep_ms: f64,
    /// 4 KiB pages' worth of hinted regions promoted per wake-up (the evaluation's 8192).
    pub pages_to_scan: u64,
    /// 32 MiB translations at all (the "no 32M" ablation turns it off: no 32 MiB placement or
    /// promotion, and Leshy never hints 32 MiB).
    pub allow_32m: bool,
}

impl Default for CoalaConfig {
    fn default() -> Self {
        CoalaConfig { paging: CoalaPaging::Off, khugepaged: false, sleep_ms: 1000.0, pages_to_scan: 8192, allow_32m: true }
    }
}

/// Hawkeye (Panwar et al., ASPLOS'19) as ported in the Elastic Translations artifact
/// (`os.hawkeye`, reference elastic-translations.md §5; the policy is [`super::hawkeye`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HawkeyeConfig {
    /// Run Hawkeye's promoter: access-coverage bins order the 2 MiB collapses.
    pub enabled: bool,
    /// Policy milliseconds per access-coverage window: every window the accessed 4 KiB pages of
    /// each registered 2 MiB region are counted and their accessed bits cleared (the port's
    /// kbinmanager: 30 s).
    pub window_ms: f64,
    /// Policy milliseconds between promotion wake-ups (khugepaged's sleep in the artifact's
    /// `env/hwk.env`: 1000).
    pub sleep_ms: f64,
    /// Most 2 MiB regions collapsed per wake-up: 8, the regions one wake-up of stock khugepaged
    /// covers (its default `pages_to_scan` 4096 / 512), also the artifact's trace-driven
    /// Hawkeye/PCC model's "up to 8 promotions per interval".
    pub promotions_per_wake: u64,
    /// Asynchronous pre-zeroing (Hawkeye's `asynczero`): faults, collapses and eager mappings get
    /// data pages a background thread already zeroed, so they charge no zeroing. Independent of
    /// `enabled` (with THP alone it is the pre-zeroing-only ablation). The thread's own work is
    /// not charged to the run: it runs on an otherwise idle core (docs/os-model.md).
    pub prezero: bool,
}

impl Default for HawkeyeConfig {
    fn default() -> Self {
        HawkeyeConfig { enabled: false, window_ms: 30_000.0, sleep_ms: 1000.0, promotions_per_wake: 8, prezero: false }
    }
}

/// Where Leshy's hints come from (`os.leshy.mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LeshyMode {
    /// No hints.
    Off,
    /// Sampled while running: every `interval_ms` the last two epochs' samples decide the hints
    /// (§4.3, the "ET" bars).
    Online,
    /// Read from `os.leshy.hints` at the start (§4.2, "ET-offline": hints from a previous run).
    Offline,
}

/// Leshy, the translation-size selector (`os.leshy`, reference elastic-translations.md §4).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeshyConfig {
    /// Where hints come from.
    pub mode: LeshyMode,
    /// Hint file for `offline` (written by a run with `os.leshy.write_hints`). Empty: the run
    /// first profiles the same workload (4 KiB pages, no CoalaPaging, as the artifact's offline
    /// traces are taken with THP off) and uses the hints that profile decides.
    pub hints: String,
    /// Write the hints the samples of this run decide (offline rule, slack 100) to this file at
    /// the end of the run; empty = do not.
    pub write_hints: String,
    /// Sampling period in memory operations (SPE `-c 1024`), jittered; only operations whose
    /// translation walked are kept (SPE's "TLB walk" filter).
    pub period: u32,
    /// Sampling period of the profiling run that writes offline hints when `hints` is empty.
    /// Denser than SPE's 1024 because a simulated run is millions, not billions, of operations,
    /// and Leshy needs many samples per TLB entry of budget to see the footprint (§4.4's mixes).
    pub profile_period: u32,
    /// Policy milliseconds per online epoch (`epochs.sh … 5`).
    pub interval_ms: f64,
    /// TLB budget percent (online 70; offline hints use 100).
    pub slack: u32,
    /// Fraction of sampled misses to cover, per 100000 (100000 = all).
    pub target: u32,
    /// TLB entries Leshy budgets for (etutils-rs `TLBSIZE` = 1280, N1's L2 TLB).
    pub tlb_entries: u32,
}

impl Default for LeshyConfig {
    fn default() -> Self {
        LeshyConfig {
            mode: LeshyMode::Off,
            hints: String::new(),
            write_hints: String::new(),
            period: 1024,
            profile_period: 16,
            interval_ms: 5000.0,
            slack: 70,
            target: 100_000,
            tlb_entries: 1280,
        }
    }
}

/// How physical memory is fragmented before the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FragMethod {
    /// Fresh memory.
    None,
    /// Elastic Translations' method: its artifact's `memfrag` tool (also accepted as
    /// `"memfrag"`), targeting a free-memory fragmentation index at order 9.
    #[serde(alias = "memfrag")]
    Fmfi,
    /// Virtuoso's knob: fraction of free 2 MiB blocks made unusable.
    Free2m,
}

/// Compaction (`os.compaction`, Linux's `mm/compaction.c`): when a 2 MiB allocation finds no
/// free block, the OS may move pages out of one. Only the fragmenter's pages move (the knobs'
/// stand-ins for other tenants' movable memory; the run's own pages and tables stay put), to the
/// lowest free frames, from the block that needs the fewest moves, each move charged as a copied
/// page (docs/os-model.md). Off by default: the fragmentation setups the studies reproduce (Elastic
/// Translations' FMFI, Virtuoso's knob) hold fragmentation constant for the whole run.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompactionConfig {
    /// khugepaged compacts before giving up a collapse (Linux's `khugepaged/defrag`, on by default
    /// there): with THP faults falling back to 4 KiB on fragmented memory, this is what lets
    /// khugepaged promote later.
    pub khugepaged: bool,
    /// A THP fault compacts before falling back to 4 KiB (Linux's `defrag = always`, or `madvise`
    /// for advised VMAs: direct compaction).
    pub fault: bool,
}

/// Fragmentation knob, applied at boot with the run's seed.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FragConfig {
    /// Method.
    pub method: FragMethod,
    /// Target: FMFI (0..1) for `fmfi`, fraction of free 2 MiB blocks broken for `free2m`.
    pub target: f64,
    /// Free memory the fragmenter leaves for the run (`fmfi` only).
    #[serde(with = "bytes_serde")]
    pub keep_free: u64,
}

impl Default for FragConfig {
    fn default() -> Self {
        FragConfig { method: FragMethod::None, target: 0.5, keep_free: 12 << 30 }
    }
}

/// OS configuration.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OsConfig {
    /// Physical memory (Utopia Table 1: 32 GB).
    #[serde(with = "bytes_serde")]
    pub memory: u64,
    /// Largest buddy order (14: 32 MiB blocks exist, as on ET's kernel).
    pub max_order: u32,
    /// THP mode.
    pub thp: ThpMode,
    /// khugepaged.
    pub khugepaged: KhugepagedConfig,
    /// Bytes reserved at boot for the 1 GiB hugetlb pool (whole GiBs).
    #[serde(with = "bytes_serde")]
    pub hugetlb_1g: u64,
    /// HugeTLB page size backing anonymous memory (see [`super::hugetlb`]): 64K, 2M, 32M or 1G,
    /// any size the driver maps; "4K" = no HugeTLB.
    pub hugetlb_size: PageSize,
    /// Bytes of `hugetlb_size` pages preallocated at boot (`nr_hugepages`); beyond them pages
    /// are allocated at fault (`nr_overcommit_hugepages`).
    #[serde(with = "bytes_serde")]
    pub hugetlb_pool: u64,
    /// Multi-size THP (Linux 6.8 mTHP, the artifact's "thp-mthp" mode, reference
    /// elastic-translations.md §1.4): a fault that cannot get a 2 MiB page maps a naturally
    /// aligned 64 KiB folio when its range is empty, before falling back to 4 KiB.
    pub mthp: bool,
    /// NUMA interleaving (Linux `MPOL_INTERLEAVE`): data pages go round-robin, by virtual page
    /// number, over this many equal contiguous nodes of physical memory (a node full: any other).
    /// 0 = off (the buddy allocator's lowest free block). The conventional accelerator baseline
    /// interleaves over the sockets so its data is spread as SPARTA's is (SPARTA §4.1: "data can
    /// be anywhere in memory").
    pub interleave: u32,
    /// Elastic Translations' CoalaPaging and CoalaKhugepaged.
    pub coala: CoalaConfig,
    /// Leshy's size hints.
    pub leshy: LeshyConfig,
    /// Hawkeye's access-coverage promotion and asynchronous pre-zeroing.
    pub hawkeye: HawkeyeConfig,
    /// Fragmentation before the run.
    pub fragmentation: FragConfig,
    /// Compaction of the fragmenter's pages when a 2 MiB allocation finds no free block.
    pub compaction: CompactionConfig,
    /// Cycles per counted OS event.
    pub costs: OsCostModel,
    /// Fixed cycles per page fault for the trap, entry and return (on top of counted work).
    pub fault_trap_cycles: f64,
    /// Eager paging (RMM, Karakostas et al. ISCA'15): `mmap` allocates an anonymous VMA at once as
    /// few physically contiguous runs as free memory allows and maps it (see [`eager`]).
    pub eager_paging: bool,
    /// Bytes of 2 MiB pages set aside at boot and handed out first to THP faults and collapses
    /// (Utopia §7 fairness: Radix, ECH and POM-TLB get 1 GiB more 2 MiB pages). 0 = none.
    #[serde(with = "bytes_serde")]
    pub thp_pool: u64,
    /// Bytes of one contiguous block reserved at boot for eager paging, released to it at the
    /// first eager mapping (Utopia §7 fairness: RMM gets a 1 GiB contiguous block). 0 = none.
    #[serde(with = "bytes_serde")]
    pub eager_pool: u64,
    /// Page migration (driver-directed placement).
    pub migration: MigrationConfig,
    /// Swap device.
    pub swap: SwapConfig,
    /// The policies' clock runs this many times faster than simulated time: every background
    /// interval (khugepaged's sleep, CoalaKhugepaged's, Leshy's epochs, Hawkeye's coverage window,
    /// Utopia's migration pacing) is measured on it. A run covers well under a second of
    /// simulated time while policies tick in seconds, so a study that wants them to act scales
    /// time rather than each interval, which keeps the comparison fair (docs/os-model.md).
    pub time_scale: f64,
}

impl Default for OsConfig {
    fn default() -> Self {
        OsConfig {
            memory: 32 << 30,
            max_order: 14,
            thp: ThpMode::Never,
            khugepaged: KhugepagedConfig::default(),
            hugetlb_1g: 0,
            hugetlb_size: PageSize::K4,
            hugetlb_pool: 0,
            mthp: false,
            interleave: 0,
            coala: CoalaConfig::default(),
            leshy: LeshyConfig::default(),
            hawkeye: HawkeyeConfig::default(),
            fragmentation: FragConfig::default(),
            compaction: CompactionConfig::default(),
            costs: OsCostModel::default(),
            fault_trap_cycles: 1000.0,
            eager_paging: false,
            thp_pool: 0,
            eager_pool: 0,
            migration: MigrationConfig::default(),
            swap: SwapConfig::default(),
            time_scale: 1.0,
        }
    }
}

impl OsConfig {
    /// Checks ranges; errors name the key.
    pub fn validate(&self) -> Result<()> {
        if self.interleave > 0 && (!self.interleave.is_power_of_two() || !self.memory.is_multiple_of((self.interleave as u64) << 25)) {
            return Err(Error::config(
                "os.interleave",
                format!("must be 0 or a power of two that splits os.memory into whole 32 MiB blocks (got {})", self.interleave),
            ));
        }
        if self.memory < 64 << 20 || !self.memory.is_multiple_of(4096) {
            return Err(Error::config("os.memory", "must be a multiple of 4K and at least 64M"));
        }
        if !(9..=18).contains(&self.max_order) {
            return Err(Error::config("os.max_order", format!("must be between 9 and 18, found {}", self.max_order)));
        }
        if !self.hugetlb_1g.is_multiple_of(1 << 30) || self.hugetlb_1g > self.memory / 2 {
            return Err(Error::config("os.hugetlb_1g", "must be whole GiBs and at most half of os.memory"));
        }
        if !self.hugetlb_pool.is_multiple_of(self.hugetlb_size.bytes()) || self.hugetlb_pool > self.memory / 4 * 3 {
            return Err(Error::config(
                "os.hugetlb_pool",
                format!("must be whole {} pages (os.hugetlb_size) and at most 3/4 of os.memory", self.hugetlb_size),
            ));
        }
        if self.hugetlb_size == PageSize::K4 && self.hugetlb_pool > 0 {
            return Err(Error::config("os.hugetlb_pool", "needs os.hugetlb_size (64K, 2M, 32M or 1G)"));
        }
        let t = self.fragmentation.target;
        if !(0.0..=1.0).contains(&t) {
            return Err(Error::config("os.fragmentation.target", format!("must be between 0 and 1, found {t}")));
        }
        if self.khugepaged.sleep_ms <= 0.0 {
            return Err(Error::config("os.khugepaged.sleep_ms", "must be positive"));
        }
        if self.khugepaged.max_ptes_none > 511 {
            return Err(Error::config("os.khugepaged.max_ptes_none", "must be at most 511"));
        }
        if self.migration.copy_cycles.is_nan() || self.migration.copy_cycles < 0.0 {
            return Err(Error::config("os.migration.copy_cycles", "must not be negative"));
        }
        if self.swap.page_cycles.is_nan() || self.swap.page_cycles < 0.0 {
            return Err(Error::config("os.swap.page_cycles", "must not be negative"));
        }
        if !(self.coala.sleep_ms.is_finite() && self.coala.sleep_ms > 0.0) {
            return Err(Error::config("os.coala.sleep_ms", "must be a positive number of milliseconds"));
        }
        if !(self.leshy.interval_ms.is_finite() && self.leshy.interval_ms > 0.0) {
            return Err(Error::config("os.leshy.interval_ms", "must be a positive number of milliseconds"));
        }
        for (key, ms) in [("os.hawkeye.window_ms", self.hawkeye.window_ms), ("os.hawkeye.sleep_ms", self.hawkeye.sleep_ms)] {
            if !(ms.is_finite() && ms > 0.0) {
                return Err(Error::config(key, "must be a positive number of milliseconds"));
            }
        }
        if self.leshy.period < 2 || self.leshy.profile_period < 2 {
            return Err(Error::config("os.leshy.period", "sampling periods must be at least 2 operations"));
        }
        if self.leshy.slack == 0 || self.leshy.target == 0 || self.leshy.tlb_entries == 0 {
            return Err(Error::config("os.leshy", "slack, target and tlb_entries must be positive"));
        }
        if !self.time_scale.is_finite() || self.time_scale <= 0.0 {
            return Err(Error::config("os.time_scale", format!("must be a positive number, found {}", self.time_scale)));
        }
        eager::validate(self)
    }
}
