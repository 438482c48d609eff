//! The simulated operating system: address spaces and VMAs, demand paging with THP and 1 GiB
//! pools, a khugepaged-style promoter, unmapping with TLB shootdowns, and physical memory.
//!
//! The OS is generic over the MMU driver but knows nothing of its layout: every change to the
//! translation structures goes through the translation API ([`tapi::Tdb`]), charged to the OS path
//! (fault, promote, unmap) and API function it ran under, so each design's OS cost is measured.

mod coala;
mod compaction;
mod config;
mod copy_locks;
pub mod eager;
mod fault;
mod fork;
pub mod hawkeye;
mod holes;
mod host;
pub mod hugetlb;
mod khugepaged;
pub mod leshy;
pub mod phys;
mod placement;
pub mod policy;
mod remap;
pub mod truth;

pub use coala::{CoalaKhugepaged, HintSet, LeshyOnline, Promote32};
pub use config::*;
pub use hawkeye::Hawkeye;
pub use host::ProcVm;

pub use placement::{MigrationConfig, SwapConfig};

use crate::addr::{PageSize, Pfn};
use crate::error::{Error, Result};
use crate::mmu::pipeline::TranslationHost;
use crate::tapi::Driver;
use crate::tapi::Translation;
use crate::tapi::{prot, Event, Func, OsCost, Path, Placement, Shootdown, TObj, TdbEnv};
use crate::workload::{HugeAdvice, MapFlags, Vm};
use phys::PhysMem;
use policy::{MapPolicy, Promoter};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use truth::{IntMap, Truth};

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
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OsStats {
    /// Faults that mapped a 4 KiB anonymous page.
    pub faults_4k: u64,
    /// Faults that mapped a 2 MiB THP.
    pub faults_thp: u64,
    /// Faults that mapped a 1 GiB hugetlb page.
    pub faults_1g: u64,
    /// Faults that mapped a page from the HugeTLB pool (`os.hugetlb_size`).
    pub faults_hugetlb: u64,
    /// Faults that mapped a 64 KiB mTHP folio.
    pub faults_64k: u64,
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
    /// 2 MiB collapses (khugepaged, Hawkeye, CoalaKhugepaged's per-2 MiB fallback).
    pub promotions: u64,
    /// Collapses that failed for lack of a 2 MiB block.
    pub promotion_failures: u64,
    /// khugepaged wake-ups.
    pub khugepaged_scans: u64,
    /// CoalaPaging allocations that found an anchor and asked for its exact frame.
    pub coala_targeted: u64,
    /// Of those, the frame was free and taken.
    pub coala_targeted_hits: u64,
    /// CoalaPaging allocations in an empty group (a fresh order ≥ 4 or order-13 block).
    pub coala_fresh: u64,
    /// Of those, a block was found.
    pub coala_fresh_hits: u64,
    /// CoalaKhugepaged wake-ups.
    pub coala_scans: u64,
    /// Leshy epochs (online).
    pub leshy_epochs: u64,
    /// Walks sampled for Leshy.
    pub leshy_samples: u64,
    /// Hint sets loaded: the number of 64K, 2M and 32M hints of each, in order.
    pub leshy_mix: Vec<[u64; 3]>,
    /// Hawkeye's access-coverage windows (each counts and clears the accessed bits of every
    /// registered 2 MiB region).
    pub hawkeye_windows: u64,
    /// Hawkeye's collapses (included in `promotions`).
    pub hawkeye_promotions: u64,
    /// Accessed bits Hawkeye's windows cleared (one translation update each).
    pub hawkeye_accessed_cleared: u64,
    /// 32 MiB promotions (CoalaKhugepaged: one order-13 block mapped as 16 contiguous 2 MiB).
    pub promotions_32m: u64,
    /// 32 MiB promotions that fell back to collapsing each 2 MiB region.
    pub promotion_32m_fallbacks: u64,
    /// Bytes copied by promotions (2 MiB collapses and 32 MiB promotions).
    pub promotion_bytes_copied: u64,
    /// Regions unmapped.
    pub unmaps: u64,
    /// Shootdowns sent.
    pub shootdowns: u64,
    /// Walk-cache-only shootdowns for ranges the driver reported stale (included in `shootdowns`).
    pub walk_cache_shootdowns: u64,
    /// TLB shootdowns of ranges the driver's own rewrites made stale (arm64 break-before-make;
    /// included in `shootdowns`).
    pub driver_shootdowns: u64,
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
    /// The policies' clock at the last epoch, in whole milliseconds (simulated time × `os.time_scale`).
    pub policy_ms: u64,
    /// Pages moved to the frame the driver placed them in (e.g. FlexSeg → RestSeg).
    pub migrations: u64,
    /// Pages moved out of a frame the driver needed (e.g. RestSeg → FlexSeg).
    pub evictions: u64,
    /// Cycles accesses waited for a page being copied.
    pub migration_stall_cycles: u64,
    /// Pages fork shared copy-on-write (parent and child mappings of one frame count once).
    pub cow_shared_pages: u64,
    /// Copy-on-write faults that copied the page to a new frame.
    pub cow_copies: u64,
    /// Copy-on-write faults by the last sharer, which only made the page writable.
    pub cow_reuses: u64,
    /// Regions moved to a new virtual address (`mremap`).
    pub remaps: u64,
    /// Regions mapped shared into another address space.
    pub shares: u64,
    /// Accesses that waited for a page being copied.
    pub migration_stalled_accesses: u64,
    /// Compactions that made a free 2 MiB block (`os.compaction`); left out of the JSON while 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub compactions: u64,
    /// The fragmenter's pages those compactions moved; left out of the JSON while 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub compaction_pages_moved: u64,
    /// Transparent huge pages a copy-on-write fault split into 4 KiB mappings of the same frames
    /// before copying the one written (Linux ≥ 5.8; os/fork.rs); left out of the JSON while 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cow_splits: u64,
    /// Transparent huge pages an `munmap` cut, split into 4 KiB mappings of the same frames so
    /// that only the pages inside the range are unmapped (Linux's `split_huge_pmd`); left out of
    /// the JSON while 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unmap_splits: u64,
}

/// Counters added after golden results existed are left out of the JSON while zero, so runs that
/// never use the feature keep their output byte for byte.
fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl OsStats {
    /// All faults.
    pub fn faults(&self) -> u64 {
        self.faults_4k + self.faults_thp + self.faults_1g + self.faults_hugetlb + self.faults_64k + self.faults_file + self.faults_swapin
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
    /// Ranges that `munmap` and `mremap` freed, which `mmap` reuses before mapping past
    /// `next_mmap`.
    holes: holes::Holes,
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
    hugetlb: hugetlb::HugetlbPool,
    /// Background promotion policies, run at every epoch ([`policy::promoters`]).
    promoters: Vec<Box<dyn Promoter<D>>>,
    /// Policies run at every `mmap` ([`policy::map_policies`]).
    map_policies: Vec<Box<dyn MapPolicy<D>>>,
    /// Leshy's hints per address space (ASID index), consumed by CoalaPaging and CoalaKhugepaged.
    hints: Vec<HintSet>,
    /// Sampled walks per address space since Leshy's last epoch.
    samples: Vec<Vec<leshy::LeshySample>>,
    /// Every sample of the run, for `os.leshy.write_hints`.
    all_samples: Vec<(u16, leshy::LeshySample)>,
    /// 2 MiB regions faulted into since Hawkeye last looked, (ASID, base): its registrations
    /// (kept only while Hawkeye runs: `os.hawkeye.enabled` with THP).
    hawkeye_new: BTreeSet<(u16, u64)>,
    /// Cursor of [`Os::khugepaged_scan`].
    khuge_cursor: (usize, u64),
    stale_wc: Vec<(u64, u64)>,
    /// Pages being copied: (VPN << 16 | ASID) → cycle the copy ends.
    busy: copy_locks::CopyLocks,
    /// No copy in `busy` ends after this cycle: an access at or after it stalls on none, and
    /// skips the lookup. Expired entries stay in `busy` until the next tick, which can be a
    /// million accesses later, so without this every translation would probe a map of all the
    /// epoch's migrations.
    busy_until: f64,
    /// Resident pages in mapping order (asid, va, size, pa), for the swap victim choice.
    resident: VecDeque<(u16, u64, PageSize, u64)>,
    /// Frames mapped by more than one address space (fork): physical base → mappings.
    sharers: IntMap<u32>,
    /// Huge frames a copy-on-write fault split ([`Os::cow_fault`]) while other address spaces
    /// still map them whole: physical base → those whole mappings. The frame's allocation is
    /// then 4 KiB blocks, each with its own count in `sharers` (a whole mapping counts once on
    /// every one), and dropping a whole mapping drops one mapping of each.
    split_frames: IntMap<u32>,
    /// Pages shared copy-on-write, by [`fork::cow_key`]: a store to one copies it.
    cow: IntMap<PageSize>,
}

impl<D: Driver> Os<D> {
    /// Restarts every counter the results report (OS work, events, the driver's metrics) when
    /// warm-up ends; the memory, page tables and policies' state stay warm.
    pub fn restart_stats(&mut self) {
        self.stats = Default::default();
        self.cost = Default::default();
        self.driver.restart_metrics();
    }

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
        let hugetlb = hugetlb::HugetlbPool::carve(&mut phys, cfg.hugetlb_size, cfg.hugetlb_pool)?;
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
            hugetlb,
            promoters: policy::promoters(cfg),
            map_policies: policy::map_policies(cfg),
            hints: Vec::new(),
            samples: Vec::new(),
            all_samples: Vec::new(),
            hawkeye_new: BTreeSet::new(),
            khuge_cursor: (0, 0),
            stale_wc: Vec::new(),
            busy: copy_locks::CopyLocks::default(),
            busy_until: f64::NEG_INFINITY,
            resident: VecDeque::new(),
            sharers: IntMap::default(),
            split_frames: IntMap::default(),
            cow: IntMap::default(),
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
            holes: holes::Holes::default(),
            implicit,
            swapped: IntMap::default(),
        });
        // Without a file (the simulator profiles first and passes one) the process starts unhinted.
        if self.cfg.leshy.mode == LeshyMode::Offline && !self.cfg.leshy.hints.is_empty() {
            // Offline hints (a previous run's, §4.2) describe the traced program's address space;
            // every process gets them (runs with one process are what they are written for).
            let hints = leshy::read_hints(std::path::Path::new(&self.cfg.leshy.hints))?;
            self.load_hints(asid, hints);
        }
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
        // Ranges the driver reports stale: walk caches only (no driver today), or TLBs too
        // (arm64's break-before-make).
        for tlb in [false, true] {
            if tlb {
                self.driver.take_stale_translations(&mut self.stale_wc);
            } else {
                self.driver.take_stale_walk_caches(&mut self.stale_wc);
            }
            for (start, end) in std::mem::take(&mut self.stale_wc) {
                self.cost.add_to(Func::Shootdown, Event::Call, 1);
                self.stats.shootdowns += 1;
                if tlb {
                    self.stats.driver_shootdowns += 1;
                } else {
                    self.stats.walk_cache_shootdowns += 1;
                }
                self.pending.push(Shootdown { asid, start, end, tlb });
            }
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
        // The lowest hole an unmapped VMA left that fits (os/holes.rs), else past every VMA.
        let start = match p.holes.take(len, align) {
            Some(start) => start,
            None => {
                let start = p.next_mmap.div_ceil(align) * align;
                // Leave a 2 MiB hole after each VMA so neighbours never share a 2 MiB region.
                p.next_mmap = (start + len + (4 << 20)) & !((2 << 20) - 1);
                start
            }
        };
        let end = start + len;
        let vma = Vma { start, end, flags, prot: prot::RW };
        p.vmas.insert(start, vma);
        if !p.implicit && !self.map_policies.is_empty() {
            let mut ps = std::mem::take(&mut self.map_policies);
            let r = ps.iter_mut().try_for_each(|m| m.on_mmap(self, asid, vma));
            self.map_policies = ps;
            r?;
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

    fn free_frame(&mut self, pa: u64, size: PageSize) -> Result<()> {
        if size != PageSize::K4 && self.split_frames.contains_key(&pa) {
            return self.free_split_frame(pa, size); // split by another sharer's write (fork)
        }
        if self.unshare(pa) {
            return Ok(()); // another address space still maps it (fork)
        }
        if self.driver_owns(pa) {
            return Ok(()); // the driver freed its slot when the translation was removed
        }
        if size == PageSize::G1 && self.cfg.hugetlb_1g > 0 {
            self.giga_pool.push(Pfn::containing(pa));
            return Ok(());
        }
        if self.hugetlb.size() == Some(size) {
            return self.hugetlb.give_back(&mut self.phys, Pfn::containing(pa), self.cfg.hugetlb_pool > 0);
        }
        self.phys.free(Pfn::containing(pa), size.order()).map_err(Error::Check)
    }

    /// The simulated machine's memory is exhausted while it needs `what`. With swap on, the
    /// usual hint (let the OS swap) does not apply: swapping did not make room (nothing left to
    /// swap out, or no contiguous block for a table).
    fn out_of_memory(&self, what: String) -> Error {
        if self.cfg.swap.enabled {
            Error::OutOfMemory(format!(
                "{what} (swap is on but could not make room: raise os.memory, or host.os.memory for a guest@host design)"
            ))
        } else {
            Error::OutOfMemory(what)
        }
    }

    /// Whether a page of `size` is a HugeTLB page (the 1 GiB pool or `os.hugetlb_size`), which
    /// [`Os::free_frame`] returns to its pool and copy-on-write copies whole; larger pages of
    /// any other size are transparent huge pages.
    fn is_hugetlb(&self, size: PageSize) -> bool {
        (size == PageSize::G1 && self.cfg.hugetlb_1g > 0) || self.hugetlb.size() == Some(size)
    }

    /// Charges the zeroing of `pages` 4 KiB units of new data pages, unless a background thread
    /// pre-zeroed free memory (`os.hawkeye.prezero`). Translation-structure pages are zeroed by
    /// [`TdbEnv::alloc_table`] regardless.
    fn zero_data(&mut self, pages: u64) {
        if !self.cfg.hawkeye.prezero {
            self.cost.add_to(Func::Zero, Event::Page, pages);
        }
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

    /// `munmap`: removes every translation in the range, frees the frames, shoots the range
    /// down. A transparent huge page the range cuts is first split into 4 KiB mappings of the
    /// same frames, so the pages outside the range stay mapped ([`Os::split_mapping`], Linux's
    /// `split_huge_pmd`); a HugeTLB page or a frame the driver places is removed whole (see
    /// docs/os-model.md).
    pub fn munmap(&mut self, asid: u16, addr: u64, len: u64) -> Result<()> {
        self.cost.set_path(Path::Unmap);
        let end = addr + len;
        let lo = PageSize::G1.align_down(addr);
        let mut objs = self.objects_in(asid, lo, end);
        let mut split = false;
        for o in objs.iter().filter(|o| o.end() > addr && (o.va < addr || o.end() > end)) {
            if o.size == PageSize::K4 || self.is_hugetlb(o.size) || self.driver_owns(o.pa) {
                continue;
            }
            let key = fork::cow_key(asid, o.va, o.size);
            let cow = self.cow.remove(&key).is_some();
            if self.split_mapping(asid, o, o.prot, cow)? {
                self.stats.unmap_splits += 1;
                split = true;
            } else if cow {
                self.cow.insert(key, o.size); // not split: removed whole below
            }
        }
        if split {
            objs = self.objects_in(asid, lo, end);
        }
        let mut lo_sd = addr;
        let mut hi_sd = end;
        for o in objs.iter().filter(|o| o.end() > addr) {
            self.api(asid, Func::Remove, |d, s, env| d.remove(s, o.va, o.size, env));
            self.procs[asid as usize].truth.remove(o.va, o.size);
            // A page unmapped is no longer copy-on-write (a later mapping here is a new page).
            self.cow.remove(&fork::cow_key(asid, o.va, o.size));
            self.free_frame(o.pa, o.size)?;
            lo_sd = lo_sd.min(o.va);
            hi_sd = hi_sd.max(o.end());
        }
        let p = &mut self.procs[asid as usize];
        let keys: Vec<u64> = p.vmas.range(..end).filter(|(_, v)| v.end > addr).map(|(k, _)| *k).collect();
        let mut freed = Vec::with_capacity(keys.len());
        for k in keys {
            let v = p.vmas.remove(&k).expect("present");
            if v.start < addr {
                p.vmas.insert(v.start, Vma { end: addr, ..v });
            }
            if v.end > end {
                p.vmas.insert(end, Vma { start: end, ..v });
            }
            freed.push((v.start.max(addr), v.end.min(end)));
        }
        // Against the VMAs left, so that a cut VMA's remaining pieces keep their regions.
        for (s, e) in freed {
            p.holes.free_unmapped(&p.vmas, s, e);
        }
        self.stats.unmaps += 1;
        self.shootdown(asid, lo_sd, hi_sd);
        Ok(())
    }

    /// The translations of `asid` overlapping `[start, end)`, read through the API.
    fn objects_in(&mut self, asid: u16, start: u64, end: u64) -> Vec<TObj> {
        let mut objs = Vec::new();
        self.api(asid, Func::Iterate, |d, s, env| d.for_each(s, start, end, env, &mut |o| objs.push(*o)));
        objs
    }

    /// Background work due by `now_ms` on the policies' clock (simulated time × `os.time_scale`): migrations the driver asked for, then
    /// the configured promoters ([`policy::promoters`]).
    pub fn tick(&mut self, now_ms: f64) -> Result<()> {
        self.stats.policy_ms = now_ms as u64;
        let now = self.now;
        self.busy.retain_after(now);
        self.busy_until = self.busy.last_end();
        self.migrate_requested()?;
        // A policy works through the OS, so it is taken out while it runs.
        let mut ps = std::mem::take(&mut self.promoters);
        let r = ps.iter_mut().try_for_each(|p| p.tick(self, now_ms));
        self.promoters = ps;
        r?;
        self.driver.tick(now_ms, now)
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
