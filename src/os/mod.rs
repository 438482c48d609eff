//! The simulated operating system: address spaces and VMAs, demand paging with THP and 1 GiB
//! pools, a khugepaged-style promoter, unmapping with TLB shootdowns, and physical memory.
//!
//! The OS is generic over the MMU driver but knows nothing of its layout: every change to the
//! translation structures goes through the translation API ([`tapi::Tdb`]), charged to the OS path
//! (fault, promote, unmap) and API function it ran under, so each design's OS cost is measured.

pub mod eager;
pub mod phys;
mod placement;
pub mod truth;

pub use placement::{MigrationConfig, SwapConfig};

use crate::addr::{bytes_serde, PageSize, Pfn};
use crate::error::{Error, Result};
use crate::mmu::pipeline::TranslationHost;
use crate::tapi::Driver;
use crate::tapi::Translation;
use crate::tapi::{prot, Event, Func, OsCost, OsCostModel, Path, Placement, Shootdown, TObj, TdbEnv};
use crate::workload::{HugeAdvice, MapFlags, Vm};
use phys::PhysMem;
use std::collections::{BTreeMap, VecDeque};
use truth::{IntMap, Truth};

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
    /// Elastic Translations' method: target free-memory fragmentation index at order 9.
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

/// A virtual memory area.
#[derive(Clone, Copy, Debug)]
pub struct Vma {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// Mapping flags.
    pub flags: MapFlags,
    /// Protection.
    pub prot: u8,
}

impl Vma {
    fn thp_allowed(&self, mode: ThpMode) -> bool {
        match self.flags.huge {
            HugeAdvice::NoHuge | HugeAdvice::Giga => false,
            HugeAdvice::Huge => mode != ThpMode::Never,
            HugeAdvice::Default => mode == ThpMode::Always,
        }
    }
}

/// Page faults by kind, and related OS events.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct OsStats {
    /// Faults that mapped a 4 KiB anonymous page.
    pub faults_4k: u64,
    /// Faults that mapped a 2 MiB THP.
    pub faults_thp: u64,
    /// Faults that mapped a 1 GiB hugetlb page.
    pub faults_1g: u64,
    /// Faults on file-backed-like mappings (page cache pages).
    pub faults_file: u64,
    /// THP wanted but the range was not empty (a 4 KiB page already there).
    pub thp_fallback_range: u64,
    /// THP wanted but no free 2 MiB block.
    pub thp_fallback_nomem: u64,
    /// THP wanted but the driver cannot map 2 MiB there.
    pub thp_fallback_driver: u64,
    /// 1 GiB wanted but the pool was empty.
    pub hugetlb_fallback: u64,
    /// khugepaged collapses.
    pub promotions: u64,
    /// khugepaged collapses that failed for lack of a 2 MiB block.
    pub promotion_failures: u64,
    /// khugepaged wake-ups.
    pub khugepaged_scans: u64,
    /// Regions unmapped.
    pub unmaps: u64,
    /// Shootdowns sent.
    pub shootdowns: u64,
    /// Walk-cache-only shootdowns for ranges the driver reported stale (included in `shootdowns`).
    pub walk_cache_shootdowns: u64,
    /// Physically contiguous runs eager paging mapped (one `map_range` each).
    pub eager_runs: u64,
    /// Bytes eager paging mapped.
    pub eager_bytes: u64,
    /// Faults on swapped-out pages (counted here instead of by the size they map).
    pub faults_swapin: u64,
    /// 4 KiB units written to swap.
    pub swap_outs: u64,
    /// 4 KiB units read back from swap.
    pub swap_ins: u64,
    /// Pages moved to the frame the driver placed them in (e.g. FlexSeg → RestSeg).
    pub migrations: u64,
    /// Pages moved out of a frame the driver needed (e.g. RestSeg → FlexSeg).
    pub evictions: u64,
    /// Cycles accesses waited for a page being copied.
    pub migration_stall_cycles: u64,
    /// Accesses that waited for a page being copied.
    pub migration_stalled_accesses: u64,
}

impl OsStats {
    /// All faults.
    pub fn faults(&self) -> u64 {
        self.faults_4k + self.faults_thp + self.faults_1g + self.faults_file + self.faults_swapin
    }
}

/// One process: its VMAs, its translation structures and the ground truth of its mappings.
pub struct Process<S> {
    /// Address-space id.
    pub asid: u16,
    vmas: BTreeMap<u64, Vma>,
    /// The driver's structures for this space.
    pub space: S,
    /// Ground truth.
    pub truth: Truth,
    next_mmap: u64,
    /// Any address is valid (trace-driven runs: the trace's addresses were valid in the real run).
    implicit: bool,
    /// Swapped-out pages: virtual page number (4 KiB units) of the base → size.
    swapped: IntMap<PageSize>,
}

/// Base of the mmap area: 64 GiB, clear of any made-up low addresses.
const MMAP_BASE: u64 = 64 << 30;

/// The OS.
pub struct Os<D: Driver> {
    /// The MMU driver (its `Tdb` half is what the OS calls).
    pub driver: D,
    /// Physical memory.
    pub phys: PhysMem,
    /// Processes, indexed by ASID.
    pub procs: Vec<Process<D::Space>>,
    /// OS work counters.
    pub cost: OsCost,
    /// Event counters.
    pub stats: OsStats,
    /// Shootdowns not yet applied by the MMUs.
    pub pending: Vec<Shootdown>,
    /// Physical ranges whose cached lines the memory hierarchy must drop (pages moved away).
    pub pending_flush: Vec<(u64, u64)>,
    /// Simulated cycle of the core calling in (set by the simulator; times page-copy locks).
    pub now: f64,
    cfg: OsConfig,
    giga_pool: Vec<Pfn>,
    pools: eager::Pools,
    next_khugepaged: f64,
    khuge_cursor: (usize, u64),
    stale_wc: Vec<(u64, u64)>,
    /// Pages being copied: (VPN << 16 | ASID) → cycle the copy ends.
    busy: IntMap<f64>,
    /// Resident pages in mapping order (asid, va, size, pa), for the swap victim choice.
    resident: VecDeque<(u16, u64, PageSize, u64)>,
}

impl<D: Driver> Os<D> {
    /// Boots: carves the 1 GiB pool, fragments memory, and creates no process yet.
    pub fn boot(driver: D, cfg: &OsConfig, seed: u64) -> Result<Os<D>> {
        let mut phys = PhysMem::new(cfg.memory, cfg.max_order);
        let mut giga_pool = Vec::new();
        for _ in 0..cfg.hugetlb_1g >> 30 {
            let p = phys
                .reserve_contiguous(1 << 18, 18)
                .ok_or_else(|| Error::config("os.hugetlb_1g", "cannot reserve that many aligned 1 GiB blocks"))?;
            giga_pool.push(p);
        }
        // Largest first so `pop` hands out the lowest address first.
        giga_pool.reverse();
        let pools = eager::Pools::carve(&mut phys, cfg)?;
        let mut driver = driver;
        if let Some(p) = driver.placement() {
            p.boot(&mut phys)?;
        }
        match cfg.fragmentation.method {
            FragMethod::None => {}
            FragMethod::Fmfi => {
                phys.fragment_fmfi(cfg.fragmentation.target, 9, cfg.fragmentation.keep_free, seed);
            }
            FragMethod::Free2m => {
                phys.fragment_free_2m(cfg.fragmentation.target, seed);
            }
        }
        Ok(Os {
            driver,
            phys,
            procs: Vec::new(),
            cost: OsCost::default(),
            stats: OsStats::default(),
            pending: Vec::new(),
            pending_flush: Vec::new(),
            now: 0.0,
            cfg: cfg.clone(),
            giga_pool,
            pools,
            next_khugepaged: cfg.khugepaged.sleep_ms,
            khuge_cursor: (0, 0),
            stale_wc: Vec::new(),
            busy: IntMap::default(),
            resident: VecDeque::new(),
        })
    }

    /// The configuration it booted with.
    pub fn config(&self) -> &OsConfig {
        &self.cfg
    }

    /// Creates a process; `implicit` makes every address valid (trace-driven runs).
    pub fn spawn(&mut self, implicit: bool) -> Result<u16> {
        let asid = self.procs.len() as u16;
        self.cost.set_path(Path::Other);
        let space = self.driver.create_space(asid, &mut TdbEnv { phys: &mut self.phys, cost: &mut self.cost })?;
        self.procs.push(Process {
            asid,
            vmas: BTreeMap::new(),
            space,
            truth: Truth::default(),
            next_mmap: MMAP_BASE,
            implicit,
            swapped: IntMap::default(),
        });
        Ok(asid)
    }

    fn proc(&self, asid: u16) -> Result<&Process<D::Space>> {
        self.procs.get(asid as usize).ok_or_else(|| Error::Check(format!("no process with ASID {asid}")))
    }

    /// Runs `f` as API function `func` with cost accounting; the borrow split (driver, one
    /// process's space, physical memory, counters) lives here once.
    fn api<R>(&mut self, asid: u16, func: Func, f: impl FnOnce(&mut D, &mut D::Space, &mut TdbEnv) -> R) -> R {
        let prev = self.cost.enter(func);
        let p = &mut self.procs[asid as usize];
        let r = f(&mut self.driver, &mut p.space, &mut TdbEnv { phys: &mut self.phys, cost: &mut self.cost });
        self.driver.take_stale_walk_caches(&mut self.stale_wc);
        for (start, end) in std::mem::take(&mut self.stale_wc) {
            self.cost.add_to(Func::Shootdown, Event::Call, 1);
            self.stats.shootdowns += 1;
            self.stats.walk_cache_shootdowns += 1;
            self.pending.push(Shootdown { asid, start, end, tlb: false });
        }
        self.cost.leave(prev);
        r
    }

    /// `mmap`: reserves a VMA and returns its base.
    pub fn mmap(&mut self, asid: u16, len: u64, flags: MapFlags) -> Result<u64> {
        let len = len.div_ceil(4096) * 4096;
        if len == 0 {
            return Err(Error::Check("mmap of zero bytes".into()));
        }
        let p = &mut self.procs.get_mut(asid as usize).ok_or_else(|| Error::Check(format!("no process {asid}")))?;
        let align = if flags.huge == HugeAdvice::Giga {
            1 << 30
        } else if len >= 2 << 20 {
            2 << 20
        } else {
            4096
        };
        let start = p.next_mmap.div_ceil(align) * align;
        let end = start + len;
        // Leave a 2 MiB hole after each VMA so neighbours never share a 2 MiB region.
        p.next_mmap = (end + (4 << 20)) & !((2 << 20) - 1);
        let vma = Vma { start, end, flags, prot: prot::RW };
        p.vmas.insert(start, vma);
        if self.cfg.eager_paging && !p.implicit {
            self.eager_map(asid, vma)?;
        }
        Ok(start)
    }

    /// The VMA containing `va`.
    pub fn vma(&self, asid: u16, va: u64) -> Option<Vma> {
        let p = self.proc(asid).ok()?;
        if p.implicit {
            return Some(Vma { start: 0, end: 1 << 57, flags: MapFlags::default(), prot: prot::RW | prot::EXEC });
        }
        p.vmas.range(..=va).next_back().map(|(_, v)| *v).filter(|v| va < v.end)
    }

    /// The ground-truth translation of `va`.
    pub fn truth(&self, asid: u16, va: u64) -> Option<Translation> {
        let (pbase, size) = self.procs.get(asid as usize)?.truth.lookup(va)?;
        Some(Translation { pbase, size })
    }

    /// Whether the driver reserved the frame at `pa` for itself (see
    /// [`crate::tapi::FramePlacement::owns_frame`]).
    fn driver_owns(&mut self, pa: u64) -> bool {
        self.driver.placement().is_some_and(|p| p.owns_frame(pa))
    }

    /// Handles a page fault at `va`: maps the page (THP, 1 GiB pool or 4 KiB) through the
    /// translation API. Returns the new translation.
    pub fn fault(&mut self, asid: u16, va: u64) -> Result<Translation> {
        self.cost.set_path(Path::Fault);
        let vma =
            self.vma(asid, va).ok_or_else(|| Error::Check(format!("segmentation fault: ASID {asid} touched unmapped address {va:#x}")))?;
        // The handler first looks the address up (Linux walks to the PMD/PTE).
        if let Some(o) = self.api(asid, Func::Lookup, |d, s, env| d.find(s, va, env)) {
            return Ok(Translation { pbase: o.pa, size: o.size }); // spurious: raced with another thread's fault
        }
        let swapin = self.swap_in(asid, va);
        if vma.flags.huge == HugeAdvice::Giga {
            let base = PageSize::G1.align_down(va);
            if base >= vma.start && base + PageSize::G1.bytes() <= vma.end && self.driver.can_map(base, PageSize::G1).is_ok() {
                if let Some(pfn) = self.giga_pool.pop() {
                    self.install(asid, base, pfn.addr(), PageSize::G1, vma.prot)?;
                    self.stats.faults_1g += 1;
                    return Ok(Translation { pbase: pfn.addr(), size: PageSize::G1 });
                }
            }
            self.stats.hugetlb_fallback += 1;
        }
        if vma.thp_allowed(self.cfg.thp) {
            let base = PageSize::M2.align_down(va);
            if base >= vma.start && base + PageSize::M2.bytes() <= vma.end {
                if self.driver.can_map(base, PageSize::M2).is_err() {
                    self.stats.thp_fallback_driver += 1;
                } else if !self.api(asid, Func::RangeCheck, |d, s, env| d.range_is_empty(s, base, base + PageSize::M2.bytes(), env)) {
                    self.stats.thp_fallback_range += 1;
                } else if let Some(pa) = self.frame_for(asid, base, PageSize::M2, vma.flags)? {
                    self.install(asid, base, pa, PageSize::M2, vma.prot)?;
                    if swapin {
                        self.stats.faults_swapin += 1;
                    } else {
                        self.stats.faults_thp += 1;
                    }
                    return Ok(Translation { pbase: pa, size: PageSize::M2 });
                } else {
                    self.stats.thp_fallback_nomem += 1;
                }
            }
        }
        let base = PageSize::K4.align_down(va);
        let pa =
            self.frame_for(asid, base, PageSize::K4, vma.flags)?.ok_or_else(|| Error::OutOfMemory(format!("4 KiB page for {va:#x}")))?;
        self.install(asid, base, pa, PageSize::K4, vma.prot)?;
        if swapin {
            self.stats.faults_swapin += 1;
        } else if vma.flags.file_backed {
            self.stats.faults_file += 1;
        } else {
            self.stats.faults_4k += 1;
        }
        Ok(Translation { pbase: pa, size: PageSize::K4 })
    }

    /// Allocates and zeroes a data block.
    fn alloc_data(&mut self, order: u32) -> Option<Pfn> {
        let pfn = self.phys.alloc(order)?;
        self.cost.add_to(Func::Alloc, Event::Page, 1);
        self.cost.add_to(Func::Zero, Event::Page, 1 << order);
        Some(pfn)
    }

    /// Allocates and zeroes a 2 MiB data page, from the THP pool first (`os.thp_pool`).
    pub(super) fn alloc_huge(&mut self) -> Option<Pfn> {
        match self.pools.take_2m() {
            Some(pfn) => {
                self.cost.add_to(Func::Alloc, Event::Page, 1);
                self.cost.add_to(Func::Zero, Event::Page, 512);
                Some(pfn)
            }
            None => self.alloc_data(9),
        }
    }

    fn install(&mut self, asid: u16, va: u64, pa: u64, size: PageSize, prot: u8) -> Result<()> {
        let o = TObj::new(va, pa, size, prot);
        self.api(asid, Func::Insert, |d, s, env| d.update(s, &o, env))?;
        self.procs[asid as usize].truth.insert(va, pa, size);
        if self.cfg.swap.enabled && !self.driver_owns(pa) {
            self.resident.push_back((asid, va, size, pa));
        }
        Ok(())
    }

    fn free_frame(&mut self, pa: u64, size: PageSize) -> Result<()> {
        if self.driver_owns(pa) {
            return Ok(()); // the driver freed its slot when the translation was removed
        }
        if size == PageSize::G1 && self.cfg.hugetlb_1g > 0 {
            self.giga_pool.push(Pfn::containing(pa));
            return Ok(());
        }
        self.phys.free(Pfn::containing(pa), size.order()).map_err(Error::Check)
    }

    fn shootdown(&mut self, asid: u16, start: u64, end: u64) {
        // One shootdown call; in-memory translation caches of the driver are invalidated under it.
        self.api(asid, Func::Shootdown, |d, s, env| {
            if let Some(m) = d.memory_tlb() {
                m.shootdown(s, asid, start, end, env)
            }
        });
        self.stats.shootdowns += 1;
        self.pending.push(Shootdown { asid, start, end, tlb: true });
    }

    /// Faults in every page of `[addr, addr+len)` in address order.
    pub fn populate(&mut self, asid: u16, addr: u64, len: u64) -> Result<()> {
        let mut va = PageSize::K4.align_down(addr);
        while va < addr + len {
            let t = match self.truth(asid, va) {
                Some(t) => t,
                None => self.fault(asid, va)?,
            };
            va = t.size.align_down(va) + t.size.bytes();
        }
        Ok(())
    }

    /// `madvise`: sets the huge-page advice of the VMAs inside `[addr, addr+len)`. Only whole VMAs
    /// are changed (no VMA splitting); a range that cuts a VMA is an error.
    pub fn madvise(&mut self, asid: u16, addr: u64, len: u64, advice: HugeAdvice) -> Result<()> {
        let p = self.procs.get_mut(asid as usize).ok_or_else(|| Error::Check(format!("no process {asid}")))?;
        let end = addr + len;
        for v in p.vmas.range_mut(..end).map(|(_, v)| v).filter(|v| v.end > addr) {
            if v.start < addr || v.end > end.div_ceil(4096) * 4096 {
                return Err(Error::Check(format!("madvise [{addr:#x}, {end:#x}) cuts the VMA [{:#x}, {:#x})", v.start, v.end)));
            }
            v.flags.huge = advice;
        }
        Ok(())
    }

    /// `munmap`: removes every translation in the range (a huge page only partly inside is
    /// removed whole; see docs/os-model.md), frees the frames, shoots the range down.
    pub fn munmap(&mut self, asid: u16, addr: u64, len: u64) -> Result<()> {
        self.cost.set_path(Path::Unmap);
        let end = addr + len;
        let lo = PageSize::G1.align_down(addr);
        let mut objs = Vec::new();
        self.api(asid, Func::Iterate, |d, s, env| d.for_each(s, lo, end, env, &mut |o| objs.push(*o)));
        let mut lo_sd = addr;
        let mut hi_sd = end;
        for o in objs.iter().filter(|o| o.end() > addr) {
            self.api(asid, Func::Remove, |d, s, env| d.remove(s, o.va, o.size, env));
            self.procs[asid as usize].truth.remove(o.va, o.size);
            self.free_frame(o.pa, o.size)?;
            lo_sd = lo_sd.min(o.va);
            hi_sd = hi_sd.max(o.end());
        }
        let p = &mut self.procs[asid as usize];
        let keys: Vec<u64> = p.vmas.range(..end).filter(|(_, v)| v.end > addr).map(|(k, _)| *k).collect();
        for k in keys {
            let v = p.vmas.remove(&k).expect("present");
            if v.start < addr {
                p.vmas.insert(v.start, Vma { end: addr, ..v });
            }
            if v.end > end {
                p.vmas.insert(end, Vma { start: end, ..v });
            }
        }
        self.stats.unmaps += 1;
        self.shootdown(asid, lo_sd, hi_sd);
        Ok(())
    }

    /// Background work due at simulated time `now_ms`: migrations the driver asked for, then
    /// khugepaged.
    pub fn tick(&mut self, now_ms: f64) -> Result<()> {
        let now = self.now;
        self.busy.retain(|_, until| *until > now);
        self.migrate_requested()?;
        if self.cfg.thp == ThpMode::Never || !self.cfg.khugepaged.enabled {
            return Ok(());
        }
        while now_ms >= self.next_khugepaged {
            self.next_khugepaged += self.cfg.khugepaged.sleep_ms;
            self.khugepaged_scan()?;
        }
        Ok(())
    }

    /// One khugepaged wake-up: scans `pages_to_scan` pages' worth of 2 MiB regions from the cursor,
    /// collapsing regions whose 4 KiB pages qualify.
    pub fn khugepaged_scan(&mut self) -> Result<()> {
        self.stats.khugepaged_scans += 1;
        self.cost.set_path(Path::Promote);
        let mut budget = self.cfg.khugepaged.pages_to_scan.div_ceil(512);
        let nprocs = self.procs.len();
        let mut visited = 0;
        while budget > 0 && visited <= nprocs {
            let (pi, va) = self.khuge_cursor;
            if pi >= nprocs {
                self.khuge_cursor = (0, 0);
                visited += 1;
                continue;
            }
            // Next eligible 2 MiB region at or after va in this process.
            let next = self.procs[pi]
                .vmas
                .values()
                .filter(|v| v.thp_allowed(self.cfg.thp))
                .filter_map(|v| {
                    let s = (v.start.max(va)).div_ceil(2 << 20) * (2 << 20);
                    (s + (2 << 20) <= v.end).then_some(s)
                })
                .min();
            let Some(region) = next else {
                self.khuge_cursor = (pi + 1, 0);
                visited += 1;
                continue;
            };
            self.khuge_cursor = (pi, region + (2 << 20));
            budget -= 1;
            self.collapse(pi as u16, region)?;
        }
        Ok(())
    }

    /// Tries to collapse the 2 MiB region at `base` into one THP.
    fn collapse(&mut self, asid: u16, base: u64) -> Result<bool> {
        if self.driver.can_map(base, PageSize::M2).is_err() {
            return Ok(false);
        }
        let end = base + PageSize::M2.bytes();
        let mut small = Vec::with_capacity(512);
        let mut huge = false;
        self.api(asid, Func::Iterate, |d, s, env| {
            d.for_each(s, base, end, env, &mut |o| {
                if o.size == PageSize::K4 {
                    small.push(*o)
                } else {
                    huge = true
                }
            })
        });
        if huge || small.is_empty() || 512 - small.len() as u32 > self.cfg.khugepaged.max_ptes_none {
            return Ok(false);
        }
        let flags = self.vma(asid, base).map(|v| v.flags).unwrap_or_default();
        let pa = match self.placement(asid, base, PageSize::M2, flags) {
            Placement::Buddy => match self.pools.take_2m().map(|p| p.addr()).or_else(|| self.phys.alloc(9).map(|p| p.addr())) {
                Some(pa) => pa,
                None => {
                    self.stats.promotion_failures += 1;
                    return Ok(false);
                }
            },
            Placement::Frame { pa, evict } => {
                if let Some(v) = evict {
                    self.evict(v)?;
                }
                pa
            }
        };
        self.cost.add_to(Func::Alloc, Event::Page, 1);
        self.cost.add_to(Func::Copy, Event::Page, small.len() as u64);
        self.cost.add_to(Func::Zero, Event::Page, 512 - small.len() as u64);
        for o in &small {
            self.api(asid, Func::Remove, |d, s, env| d.remove(s, o.va, o.size, env));
            self.procs[asid as usize].truth.remove(o.va, o.size);
            self.free_frame(o.pa, o.size)?;
        }
        let prot = small[0].prot;
        self.install(asid, base, pa, PageSize::M2, prot)?;
        self.stats.promotions += 1;
        self.shootdown(asid, base, end);
        Ok(true)
    }

    /// Bytes of translation structures across processes.
    pub fn table_bytes(&self) -> u64 {
        self.procs.iter().map(|p| self.driver.table_bytes(&p.space)).sum()
    }

    /// Bytes mapped by each page size at this moment, across processes.
    pub fn coverage(&self) -> [u64; PageSize::COUNT] {
        let mut c = [0; PageSize::COUNT];
        for p in &self.procs {
            for (i, n) in p.truth.counts().iter().enumerate() {
                c[i] += n * PageSize::ALL[i].bytes();
            }
        }
        c
    }

    /// The OS cycles spent on `path`.
    pub fn cycles(&self, path: Path) -> f64 {
        self.cost.cycles(path, &self.cfg.costs)
    }
}

/// The [`Vm`] view of one process, handed to workloads.
pub struct ProcVm<'a, D: Driver> {
    /// The OS.
    pub os: &'a mut Os<D>,
    /// The process.
    pub asid: u16,
}

impl<D: Driver> Vm for ProcVm<'_, D> {
    fn mmap(&mut self, len: u64, flags: MapFlags) -> Result<u64> {
        self.os.mmap(self.asid, len, flags)
    }
    fn munmap(&mut self, addr: u64, len: u64) -> Result<()> {
        self.os.munmap(self.asid, addr, len)
    }
    fn populate(&mut self, addr: u64, len: u64) -> Result<()> {
        self.os.populate(self.asid, addr, len)
    }
    fn madvise(&mut self, addr: u64, len: u64, advice: HugeAdvice) -> Result<()> {
        self.os.madvise(self.asid, addr, len, advice)
    }
}

/// The OS as the MMU pipeline sees it: the running space's structures, page faults (their
/// work charged to the faulting core, trap included), the ground truth, page-copy stalls.
impl<D: Driver> TranslationHost<D> for Os<D> {
    #[inline(always)]
    fn tables(&mut self, asid: u16) -> (&mut D, &mut D::Space) {
        (&mut self.driver, &mut self.procs[asid as usize].space)
    }

    fn fault(&mut self, asid: u16, va: u64, now: f64) -> Result<(Translation, f64)> {
        let before = self.cycles(Path::Fault);
        self.now = now;
        let t = Os::fault(self, asid, va)?;
        Ok((t, self.cycles(Path::Fault) - before + self.cfg.fault_trap_cycles))
    }

    fn pending(&self) -> (&D, &[Shootdown]) {
        (&self.driver, &self.pending)
    }

    #[inline]
    fn truth(&self, asid: u16, va: u64) -> Option<Translation> {
        Os::truth(self, asid, va)
    }

    #[inline]
    fn migration_stall(&mut self, asid: u16, va: u64, t: Translation, now: f64) -> u32 {
        Os::migration_stall(self, asid, va, t, now)
    }
}
