//! MMU drivers: the only place that knows a translation structure's format.
//!
//! A driver implements the OS side (the [`Tdb`] translation database) and the hardware side (a
//! walk that produces a [`WalkPlan`]). The simulator is generic over the driver: the design is
//! chosen once per run and the access loop is monomorphised for it.
//!
//! Adding a design: write `arch/<design>.rs` with its config section and `impl Driver`, add the
//! section to [`ArchConfig`] and its entries to [`DESIGNS`]. Nothing in `os/`, `mmu/`, `mem/` or
//! `sim/` changes; if it has to, the interface is missing something every driver should have.

pub mod ecpt;
pub mod fpt;
pub mod pomtlb;
pub mod radix;
pub mod rmm;
pub mod utopia;
pub mod x86pte;

use crate::addr::PageSize;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::mmu::walk::{Translation, WalkPlan};
use crate::os::tapi::{Tdb, TdbEnv};

/// A translation architecture.
pub trait Driver: Tdb + Sized + 'static {
    /// Per-core walk caches (x86 PWCs, ECPT's CWCs, ...).
    type WalkCache;

    /// Builds the driver from the resolved configuration (validated there).
    fn from_config(cfg: &Config) -> Result<Self>;

    /// Walk caches for one core.
    fn new_walk_cache(&self) -> Self::WalkCache;

    /// The hardware walk for `va` in `space`: appends its references to `plan` and returns the
    /// translation, or `None` if nothing maps `va` (a page fault; the references made before
    /// discovering that are still in the plan).
    fn walk(&mut self, space: &mut Self::Space, wc: &mut Self::WalkCache, asid: u16, va: u64, plan: &mut WalkPlan) -> Option<Translation>;

    /// Whether the design has a side structure looked up beside the L2 TLB ([`Driver::side_lookup`]).
    /// A constant, so designs without one pay nothing on the access path.
    const HAS_SIDE: bool = false;

    /// A side structure looked up on an L1 TLB miss beside the L2 TLB (Utopia's RestSeg walk, RMM's
    /// range TLB, ...): appends its memory references to `plan` and returns the translation if it
    /// holds one. The walk starts only when both the L2 TLB and this miss. Default: none.
    fn side_lookup(
        &mut self,
        _space: &mut Self::Space,
        _wc: &mut Self::WalkCache,
        _asid: u16,
        _va: u64,
        _plan: &mut WalkPlan,
    ) -> Option<Translation> {
        None
    }

    /// Whether the side lookup starts with the L2 TLB lookup on every L1 TLB miss (Utopia Fig. 17:
    /// its TAR/SF caches and memory references see L2 TLB hits too) rather than only when the L2
    /// TLB misses. Asked once per run; only with `mmu.side_parallel`. Default: only on misses.
    fn side_on_l1_miss(&self) -> bool {
        false
    }

    /// Whether a walk started in parallel with the L2 TLB (`mmu.l2_parallel_walk`) still waits
    /// for the side lookup to miss (the walk is made only then either way; this is its timing).
    /// Asked once per run. Default: no, the walk overlaps the side lookup too.
    fn side_gates_walk(&self) -> bool {
        false
    }

    /// Whether the design wants [`Driver::walk_observed`] after every timed walk (PTW-tracking
    /// policies). A constant, so designs without one pay nothing on the access path.
    const OBSERVES_WALKS: bool = false;

    /// Called after a walk's plan was timed: the translation it found (`None` = page fault) and how
    /// many of its references DRAM served — what hardware counters in the PTE would see (Utopia's
    /// PTW frequency and cost counters). Default: nothing.
    fn walk_observed(&mut self, _space: &mut Self::Space, _asid: u16, _va: u64, _t: Option<Translation>, _dram_refs: u32) {}

    /// Drops walk-cache entries of `asid` that may cover `[start, end)` (TLB shootdown).
    fn invalidate_walk_cache(&self, wc: &mut Self::WalkCache, asid: u16, start: u64, end: u64);

    /// The OS shoots down `[start, end)` of `asid` after changing or removing translations there
    /// (unmap, promotion, migration, swap-out). Per-core structures are dropped through
    /// [`Driver::invalidate_walk_cache`] when the MMUs apply the shootdown; this hook is for
    /// translation caches the driver keeps *in memory*, outside any MMU (POM-TLB's in-memory TLB),
    /// which the OS's shootdown code invalidates like any other TLB. Work is reported through
    /// `env` and charged to the shootdown. Default: nothing.
    fn shootdown(&mut self, _space: &mut Self::Space, _asid: u16, _start: u64, _end: u64, _env: &mut TdbEnv) {}

    /// Page sizes the OS may map with this driver, smallest first.
    fn leaf_sizes(&self) -> &[PageSize];

    /// Whether a page of `size` can be mapped at `va` right now (customizable; e.g. FPT's L2L1
    /// flattening cannot hold 2 MiB leaves). `Err` carries the reason, counted by the OS.
    fn can_map(&self, _va: u64, size: PageSize) -> Result<(), &'static str> {
        if self.leaf_sizes().contains(&size) {
            Ok(())
        } else {
            Err("page size not supported by the translation structure")
        }
    }

    /// Walk-cache contents made stale by the translation-database calls since the last call, as
    /// `[start, end)` VA ranges of the space those calls changed (customizable; default none).
    /// Removals need not be reported (the OS shoots the removed range down anyway); changes made
    /// while *adding* a translation must be, e.g. ECPT moving a 2 MiB cluster to another way,
    /// which changes a walk-table header that cuckoo walk caches may hold. The OS invalidates
    /// each range in every core's walk caches (not the TLBs: translations did not change) and
    /// counts it as a shootdown.
    fn take_stale_walk_caches(&mut self, _out: &mut Vec<(u64, u64)>) {}

    /// Driver-specific metrics for the report (JSON object; empty by default).
    fn metrics(&self) -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::new()
    }
}

/// Per-driver configuration sections.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ArchConfig {
    /// x86-64 radix page table.
    pub radix: radix::RadixConfig,
    /// Flattened page table (FPT).
    pub fpt: fpt::FptConfig,
    /// Elastic cuckoo page tables.
    pub ecpt: ecpt::EcptConfig,
    /// POM-TLB's in-memory L3 TLB (its page table is `radix`).
    pub pomtlb: pomtlb::PomTlbConfig,
    /// RMM's range TLB (its redundant page table is `radix`).
    pub rmm: rmm::RmmConfig,
    /// Utopia: RestSegs beside a radix FlexSeg (`arch.radix` configures the FlexSeg).
    pub utopia: utopia::UtopiaConfig,
}

impl ArchConfig {
    /// Validates every section.
    pub fn validate(&self) -> Result<()> {
        self.radix.validate("arch.radix")?;
        self.fpt.validate("arch.fpt")?;
        self.ecpt.validate("arch.ecpt")?;
        self.pomtlb.validate("arch.pomtlb")?;
        self.rmm.validate("arch.rmm")?;
        self.utopia.validate("arch.utopia")
    }
}

/// Which driver a design runs on (the run is monomorphised per variant).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverKind {
    /// [`radix::Radix`].
    Radix,
    /// [`fpt::Fpt`].
    Fpt,
    /// [`ecpt::Ecpt`].
    Ecpt,
    /// [`pomtlb::PomTlb`].
    PomTlb,
    /// [`rmm::Rmm`].
    Rmm,
    /// [`utopia::Utopia`].
    Utopia,
}

/// A named design: a driver plus the configuration that makes it that design.
pub struct DesignEntry {
    /// Name on the command line.
    pub name: &'static str,
    /// One-line description.
    pub description: &'static str,
    /// Driver it runs on.
    pub driver: DriverKind,
    /// Applies the design's settings on top of the machine configuration.
    pub apply: fn(&mut Config),
}

/// Every design, in the order `xlate designs` lists them.
pub static DESIGNS: &[DesignEntry] = &[
    DesignEntry {
        name: "radix4",
        description: "x86-64 4-level radix page table, 4 KiB pages (THP off)",
        driver: DriverKind::Radix,
        apply: |c| {
            c.arch.radix.levels = 4;
            c.os.thp = crate::os::ThpMode::Never;
        },
    },
    DesignEntry {
        name: "radix5",
        description: "x86-64 5-level radix page table (LA57), 4 KiB pages",
        driver: DriverKind::Radix,
        apply: |c| {
            c.arch.radix.levels = 5;
            c.os.thp = crate::os::ThpMode::Never;
        },
    },
    DesignEntry {
        name: "radix4-thp",
        description: "x86-64 4-level radix with transparent huge pages always (2 MiB at fault, khugepaged)",
        driver: DriverKind::Radix,
        apply: |c| {
            c.arch.radix.levels = 4;
            c.os.thp = crate::os::ThpMode::Always;
        },
    },
    DesignEntry {
        name: "fpt-l4l3-l2l1",
        description: "FPT flattening L4+L3 and L2+L1 into 2 MiB nodes (EMT's default): 2 references per walk, 4 KiB pages",
        driver: DriverKind::Fpt,
        apply: |c| {
            c.arch.fpt.flatten = fpt::Flatten::L4L3L2L1;
            c.os.thp = crate::os::ThpMode::Never;
        },
    },
    DesignEntry {
        name: "fpt-l3l2",
        description: "FPT flattening L3+L2 into 2 MiB nodes (the FPT paper's Linux prototype), 4 KiB pages",
        driver: DriverKind::Fpt,
        apply: |c| {
            c.arch.fpt.flatten = fpt::Flatten::L3L2;
            c.os.thp = crate::os::ThpMode::Never;
        },
    },
    DesignEntry {
        name: "fpt-l4l3",
        description: "FPT flattening L4+L3 into a 2 MiB root node, 4 KiB pages",
        driver: DriverKind::Fpt,
        apply: |c| {
            c.arch.fpt.flatten = fpt::Flatten::L4L3;
            c.os.thp = crate::os::ThpMode::Never;
        },
    },
    DesignEntry {
        name: "fpt-l2l1",
        description: "FPT flattening L2+L1 into 2 MiB leaf nodes (4 KiB pages only), 4 KiB pages",
        driver: DriverKind::Fpt,
        apply: |c| {
            c.arch.fpt.flatten = fpt::Flatten::L2L1;
            c.os.thp = crate::os::ThpMode::Never;
        },
    },
    DesignEntry {
        name: "fpt-l3l2-thp",
        description: "FPT flattening L3+L2 with transparent huge pages always (2 MiB leaves in the merged node)",
        driver: DriverKind::Fpt,
        apply: |c| {
            c.arch.fpt.flatten = fpt::Flatten::L3L2;
            c.os.thp = crate::os::ThpMode::Always;
        },
    },
    DesignEntry {
        name: "ideal",
        description: "perfect TLB: every translation hits the L1 TLB (radix4 tables kept by the OS)",
        driver: DriverKind::Radix,
        apply: |c| {
            c.arch.radix.levels = 4;
            c.os.thp = crate::os::ThpMode::Never;
            c.mmu.perfect_tlb = true;
        },
    },
    DesignEntry {
        name: "ecpt",
        description: "elastic cuckoo page tables with CWTs/CWCs, EMT's kernel parameters (arch.ecpt), 4 KiB pages",
        driver: DriverKind::Ecpt,
        apply: |c| c.os.thp = crate::os::ThpMode::Never,
    },
    DesignEntry {
        name: "ecpt-thp",
        description: "ecpt with transparent huge pages always (2 MiB table)",
        driver: DriverKind::Ecpt,
        apply: |c| c.os.thp = crate::os::ThpMode::Always,
    },
    DesignEntry {
        name: "ech",
        description:
            "Utopia's ECH: 4 ways x 8192, scale 10, 2x16-entry CWCs of 2 cycles; 4 KiB pages (Utopia ran it with THP: --set os.thp=always)",
        driver: DriverKind::Ecpt,
        apply: |c| {
            c.arch.ecpt = ecpt::EcptConfig::ech_utopia();
            c.os.thp = crate::os::ThpMode::Never;
        },
    },
    DesignEntry {
        name: "ecph-virtuoso",
        description: "Virtuoso's ECH preset: 2 ways x 262144, rehash at 0.7 x2, 64-entry CWC; 4 KiB pages",
        driver: DriverKind::Ecpt,
        apply: |c| {
            c.arch.ecpt = ecpt::EcptConfig::virtuoso();
            c.os.thp = crate::os::ThpMode::Never;
        },
    },
    DesignEntry {
        name: "ptlb",
        description: "Utopia's P-TLB: every translation hits the L1 TLB; pages as in Utopia's runs (radix4, THP always)",
        driver: DriverKind::Radix,
        apply: |c| {
            c.arch.radix.levels = 4;
            c.os.thp = crate::os::ThpMode::Always;
            c.mmu.perfect_tlb = true;
        },
    },
    DesignEntry {
        name: "pomtlb",
        description: "POM-TLB: 64K-entry 16-way SRRIP in-memory L3 TLB per page size, probed before the radix4 walk (4 KiB pages)",
        driver: DriverKind::PomTlb,
        apply: |c| {
            c.arch.radix.levels = 4;
            c.os.thp = crate::os::ThpMode::Never;
        },
    },
    DesignEntry {
        name: "rmm",
        description: "RMM: eager paging into ranges, 32-entry range TLB beside the L2 TLB, redundant radix4 (4 KiB pages)",
        driver: DriverKind::Rmm,
        apply: |c| {
            c.arch.radix.levels = 4;
            c.os.thp = crate::os::ThpMode::Never;
            c.os.eager_paging = true;
        },
    },
    DesignEntry {
        name: "utopia",
        description: "Utopia: 512M 4K + 512M 2M RestSegs (16-way, SRRIP) beside a radix4 FlexSeg, 4 KiB pages (THP off)",
        driver: DriverKind::Utopia,
        apply: |c| {
            c.arch.radix.levels = 4;
            c.os.thp = crate::os::ThpMode::Never;
            c.arch.utopia = utopia::UtopiaConfig::default();
        },
    },
    DesignEntry {
        name: "utopia-thp",
        description: "Utopia (Table 1) with transparent huge pages always: 2 MiB pages go to the 2M RestSeg",
        driver: DriverKind::Utopia,
        apply: |c| {
            c.arch.radix.levels = 4;
            c.os.thp = crate::os::ThpMode::Always;
            c.arch.utopia = utopia::UtopiaConfig::default();
        },
    },
    DesignEntry {
        name: "utopia-virtuoso",
        description: "Utopia as Virtuoso v1.0: 8G 4K 16-way + 8G 2M 8-way RestSegs, 32-entry 1-cycle TAR/SF caches, 200-cycle migration",
        driver: DriverKind::Utopia,
        apply: |c| {
            use crate::mmu::wcache::WalkCacheConfig;
            use utopia::{RestSegConfig, SetHash};
            c.arch.radix.levels = 4;
            c.os.thp = crate::os::ThpMode::Never;
            c.os.migration.copy_cycles = 200.0;
            c.arch.utopia = utopia::UtopiaConfig {
                restsegs: vec![
                    RestSegConfig { size: 8 << 30, page: crate::addr::PageSize::K4, ways: 16, hash: SetHash::Modulo },
                    RestSegConfig { size: 8 << 30, page: crate::addr::PageSize::M2, ways: 8, hash: SetHash::Modulo },
                ],
                tar_cache: WalkCacheConfig::new(32, 4, 1),
                sf_cache: WalkCacheConfig::new(32, 4, 1),
                ..utopia::UtopiaConfig::default()
            };
        },
    },
    DesignEntry {
        name: "utopia-restrictive-only",
        description: "restrictive mapping across all memory (Utopia §3): one 4K 16-way RestSeg, no FlexSeg, swap on",
        driver: DriverKind::Utopia,
        apply: |c| {
            c.arch.radix.levels = 4;
            c.os.thp = crate::os::ThpMode::Never;
            c.os.swap.enabled = true;
            c.arch.utopia = utopia::UtopiaConfig {
                restsegs: vec![utopia::RestSegConfig { size: 0, page: crate::addr::PageSize::K4, ways: 16, hash: utopia::SetHash::Modulo }],
                flexseg: false,
                migrate: utopia::MigrateConfig { enabled: false, ..utopia::MigrateConfig::default() },
                ..utopia::UtopiaConfig::default()
            };
        },
    },
];

/// Finds a design by name.
pub fn lookup(name: &str) -> Result<&'static DesignEntry> {
    DESIGNS.iter().find(|d| d.name == name).ok_or_else(|| Error::Unknown {
        what: "design",
        name: name.to_string(),
        known: DESIGNS.iter().map(|d| d.name.to_string()).collect(),
    })
}
