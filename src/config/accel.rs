//! The `accel` config table: accelerators as simulated agents (SPARTA §4, §6.3, §7.5) — their
//! private caches and TLBs, how conventional translation reaches the page table, the
//! memory-side TLBs of a partitioned design, and the machine's sockets and channels.
//! Sources of every default are in the comments and docs/sparta.md.

use crate::addr::PageSize;
use crate::error::{Error, Result};
use crate::mem::cache::CacheConfig;
use crate::mem::topology::TopologyConfig;
use crate::mmu::tlb::TlbConfig;

/// How an accelerator's private cache is addressed (SPARTA §4.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheKind {
    /// No cache: every access goes to memory.
    None,
    /// Physically addressed: hits need a translation first (the accelerator-side TLB).
    Physical,
    /// Virtually addressed: hits need no translation (§7.5's configuration).
    #[default]
    Virtual,
}

/// Where a conventional accelerator's TLB misses are walked (SPARTA §4.1, §7.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WalkModel {
    /// §7.4's conservative baseline: a private MMU with perfect MMU caches, so a walk is one
    /// memory reference (the leaf entry, wherever its table page lives) and no IOMMU trip.
    #[default]
    Perfect,
    /// A shared IOMMU on one socket walks the driver's table with its own walk caches: the
    /// request travels there, pays `iommu_ns`, and every reference travels from there.
    Iommu,
}

/// The `accel` table.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccelConfig {
    /// Run the workload's threads on accelerators (set by the accelerator designs).
    pub enabled: bool,
    /// Accelerators; each runs one thread (stream) of the workload, round-robin when there are
    /// more threads. 0 = one per thread.
    pub count: usize,
    /// Clock, GHz (an assumption: the paper's CPI model states none).
    pub ghz: f64,
    /// Cycles per instruction between memory operations (in-order engine, §6.3).
    pub cpi: f64,
    /// Private cache kind.
    pub cache_kind: CacheKind,
    /// Private cache geometry (§7.5: 16 KB, 4-way).
    pub cache: CacheConfig,
    /// Accelerator-side TLB (§7.5: 128 entries, 4-way). With a memory-side design it is the
    /// tiny TLB covering the cache (§7.6: 1–128 entries); `entries = 0` means none.
    pub tlb: TlbConfig,
    /// Translate with no cost at all (the ideal system of §7.5).
    pub ideal: bool,
    /// Conventional walks: perfect MMU caches (one reference) or a shared IOMMU.
    pub walk: WalkModel,
    /// IOMMU lookup latency beyond the network, ns (assumption; `walk = "iommu"` only).
    pub iommu_ns: f64,
    /// Socket of the shared IOMMU.
    pub iommu_socket: u32,
    /// Memory-side TLB of each partition (§7.5: 128 entries, 4-way; shared by every accelerator).
    pub memory_tlb: TlbConfig,
    /// Sockets, channels and network latencies.
    pub topology: TopologyConfig,
}

impl Default for AccelConfig {
    fn default() -> Self {
        AccelConfig {
            enabled: false,
            count: 0,
            ghz: 2.0,
            cpi: 1.0,
            cache_kind: CacheKind::Virtual,
            // §7.5: "Each accelerator includes a 16KB 4-way associative virtual cache"; 2 cycles
            // is an assumption for a small SRAM.
            cache: CacheConfig { size: 16 << 10, ways: 4, latency: 2, policy: crate::mem::assoc::Replacement::Lru },
            // §7.5: "All TLBs have 128 entries", 4-way (§7.2); 1 cycle (assumption).
            tlb: TlbConfig::new(128, 4, 1, &[PageSize::K4, PageSize::M2]),
            ideal: false,
            walk: WalkModel::Perfect,
            iommu_ns: 50.0,
            iommu_socket: 0,
            // Memory-side TLBs: 128 entries 4-way (§7.5); 2 cycles at the memory controller
            // (assumption).
            memory_tlb: TlbConfig::new(128, 4, 2, &[PageSize::K4, PageSize::M2]),
            topology: TopologyConfig::default(),
        }
    }
}

impl AccelConfig {
    /// Checks the table for a machine of `memory` bytes.
    pub fn validate(&self, memory: u64) -> Result<()> {
        if !self.ghz.is_finite() || self.ghz <= 0.0 || self.ghz > 100.0 {
            return Err(Error::config("accel.ghz", format!("must be a positive number of GHz (got {})", self.ghz)));
        }
        if !self.cpi.is_finite() || self.cpi < 0.0 {
            return Err(Error::config("accel.cpi", format!("must be a finite number ≥ 0 (got {})", self.cpi)));
        }
        if !self.iommu_ns.is_finite() || self.iommu_ns < 0.0 {
            return Err(Error::config("accel.iommu_ns", format!("must be a finite number ≥ 0 (got {})", self.iommu_ns)));
        }
        if self.count > 4096 {
            return Err(Error::config("accel.count", format!("at most 4096 accelerators (got {})", self.count)));
        }
        self.cache.validate("accel.cache")?;
        if self.tlb.entries > 0 {
            self.tlb.validate("accel.tlb")?;
        }
        self.memory_tlb.validate("accel.memory_tlb")?;
        self.topology.validate("accel.topology", memory)?;
        if self.iommu_socket >= self.topology.sockets {
            return Err(Error::config("accel.iommu_socket", format!("must be below accel.topology.sockets ({})", self.topology.sockets)));
        }
        Ok(())
    }
}
