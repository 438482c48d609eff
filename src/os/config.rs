//! The OS's configuration section (`os.*`): THP mode, khugepaged, fragmentation, costs, pools,
//! migration and swap.

use super::eager;
use super::placement::{MigrationConfig, SwapConfig};
use crate::addr::bytes_serde;
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
    /// Fragmentation before the run.
    pub fragmentation: FragConfig,
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
}

impl Default for OsConfig {
    fn default() -> Self {
        OsConfig {
            memory: 32 << 30,
            max_order: 14,
            thp: ThpMode::Never,
            khugepaged: KhugepagedConfig::default(),
            hugetlb_1g: 0,
            fragmentation: FragConfig::default(),
            costs: OsCostModel::default(),
            fault_trap_cycles: 1000.0,
            eager_paging: false,
            thp_pool: 0,
            eager_pool: 0,
            migration: MigrationConfig::default(),
            swap: SwapConfig::default(),
        }
    }
}

impl OsConfig {
    /// Checks ranges; errors name the key.
    pub fn validate(&self) -> Result<()> {
        if self.memory < 64 << 20 || !self.memory.is_multiple_of(4096) {
            return Err(Error::config("os.memory", "must be a multiple of 4K and at least 64M"));
        }
        if !(9..=18).contains(&self.max_order) {
            return Err(Error::config("os.max_order", format!("must be between 9 and 18, found {}", self.max_order)));
        }
        if !self.hugetlb_1g.is_multiple_of(1 << 30) || self.hugetlb_1g > self.memory / 2 {
            return Err(Error::config("os.hugetlb_1g", "must be whole GiBs and at most half of os.memory"));
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
        eager::validate(self)
    }
}
