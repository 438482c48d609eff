//! Eager paging and the boot-time pools of Utopia's fairness rule.
//!
//! **Eager paging** (Karakostas et al., "Redundant Memory Mappings for Fast Access to Large
//! Memories", ISCA'15, §4.2) is OS policy, generic over drivers: when `os.eager_paging` is on,
//! `mmap` of an anonymous VMA allocates all of its memory at once as *as few physically contiguous
//! runs as free memory allows* and maps every page through the translation API. The runs are the
//! maximal runs of adjacent free buddy blocks ([`PhysMem::free_runs`]); for each piece of the VMA
//! still unmapped, the smallest run that holds the rest of the VMA is used (best fit, so large
//! runs stay for later VMAs), or, if none does, the largest run (so the VMA gets as few runs as
//! possible; fragmentation makes them smaller and more numerous). Each run is mapped with one
//! [`Tdb::map_range`](super::tapi::Tdb::map_range) call: the default inserts page by page,
//! RMM also records the range. Pages are 2 MiB where THP applies to the VMA (`os.thp`, advice)
//! and the driver can map them (the run is then aligned so physical and virtual addresses agree
//! modulo 2 MiB), 4 KiB otherwise. The work is charged to the fault path: one allocation per
//! aligned buddy block taken, zeroing per 4 KiB, and the insertions. If memory runs out, the rest
//! of the VMA is demand-paged as usual; "runs out" leaves the mapping's translation tables room
//! (a page per 512 mapped, and a few) and, with swap on, the swap watermark (`os.swap.min_free`).
//! File-backed and 1 GiB-advised VMAs are not eagerly paged.
//!
//! **Pools** (Utopia MICRO'23 §7: "We provide additional 2MB pages (1GB in total) to Radix, ECH,
//! and POM-TLB, to match the size of the contiguously allocated RestSegs ... For RMM, we provide an
//! additional 1GB contiguous physical memory block"): both are carved at boot before memory is
//! fragmented. `os.thp_pool` bytes become 2 MiB pages handed out first to THP faults and
//! khugepaged collapses (freed pages go back to the buddy allocator, not to the pool);
//! `os.eager_pool` bytes become one contiguous reservation that is released to the buddy allocator
//! at the first eager mapping, where it is one of the runs eager paging chooses from.

use super::phys::PhysMem;
use super::{Os, OsConfig, Vma};
use crate::addr::{PageSize, Pfn};
use crate::error::{Error, Result};
use crate::tapi::Driver;
use crate::tapi::{Event, Func, Path, TObj};
use crate::workload::HugeAdvice;

/// Checks the eager-paging and pool keys.
pub fn validate(cfg: &OsConfig) -> Result<()> {
    let m2 = PageSize::M2.bytes();
    if !cfg.thp_pool.is_multiple_of(m2) || cfg.thp_pool > cfg.memory / 2 {
        return Err(Error::config("os.thp_pool", "must be whole 2 MiB pages and at most half of os.memory"));
    }
    if !cfg.eager_pool.is_multiple_of(m2) || cfg.eager_pool > cfg.memory / 2 {
        return Err(Error::config("os.eager_pool", "must be a multiple of 2 MiB and at most half of os.memory"));
    }
    if cfg.eager_pool > 0 && !cfg.eager_paging {
        return Err(Error::config("os.eager_pool", "is the block reserved for eager paging: set os.eager_paging = true too"));
    }
    Ok(())
}

/// Memory set aside at boot for the fairness rule.
#[derive(Debug, Default)]
pub struct Pools {
    /// 2 MiB pages for THP, highest address first (`pop` hands out the lowest).
    thp: Vec<Pfn>,
    /// The contiguous block reserved for eager paging, until its first use.
    eager: Option<(Pfn, u64)>,
}

impl Pools {
    /// Carves the pools out of fresh memory.
    pub fn carve(phys: &mut PhysMem, cfg: &OsConfig) -> Result<Pools> {
        let mut p = Pools::default();
        for _ in 0..cfg.thp_pool / PageSize::M2.bytes() {
            let pfn =
                phys.alloc(PageSize::M2.order()).ok_or_else(|| Error::config("os.thp_pool", "not enough free 2 MiB blocks at boot"))?;
            p.thp.push(pfn);
        }
        p.thp.reverse();
        if cfg.eager_pool > 0 {
            let pages = cfg.eager_pool / PageSize::K4.bytes();
            let pfn = phys
                .reserve_contiguous(pages, PageSize::M2.order())
                .ok_or_else(|| Error::config("os.eager_pool", "cannot reserve a contiguous block that large at boot"))?;
            p.eager = Some((pfn, pages));
        }
        Ok(p)
    }

    /// A 2 MiB page from the THP pool (already allocated from the buddy allocator), if any is left.
    pub fn take_2m(&mut self) -> Option<Pfn> {
        self.thp.pop()
    }

    /// 2 MiB pages left in the THP pool.
    pub fn thp_left(&self) -> usize {
        self.thp.len()
    }
}

/// One piece of an eager mapping: `pages` 4 KiB frames from `pfn`, mapped at `va` with `size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Piece {
    va: u64,
    pfn: u64,
    pages: u64,
    size: PageSize,
}

/// Chooses where the next `want` frames (a multiple of `size`'s frames) mapped at `va` come from:
/// the smallest run holding all of them, else the largest run; ties go to the lower address.
/// Frames start where the physical address agrees with `va` modulo `size`. Returns (index of the
/// run, first frame, frames taken).
fn choose_run(runs: &[(u64, u64)], va: u64, size: PageSize, want: u64) -> Option<(usize, u64, u64)> {
    let sp = size.base_pages();
    let voff = (va >> PageSize::K4.shift()) % sp;
    let mut fit: Option<(u64, usize, u64)> = None;
    let mut largest: Option<(u64, usize, u64)> = None;
    for (i, &(rs, rn)) in runs.iter().enumerate() {
        let adj = (voff + sp - rs % sp) % sp;
        if adj >= rn {
            continue;
        }
        let n = (rn - adj) / sp * sp;
        if n == 0 {
            continue;
        }
        let start = rs + adj;
        if n >= want {
            if fit.is_none_or(|b| n < b.0) {
                fit = Some((n, i, start));
            }
        } else if largest.is_none_or(|b| n > b.0) {
            largest = Some((n, i, start));
        }
    }
    match fit {
        Some((_, i, s)) => Some((i, s, want)),
        None => largest.map(|(n, i, s)| (i, s, n)),
    }
}

/// Plans the pieces of `[start, end)` over `runs` (which it updates): 2 MiB pages where `huge(va)`
/// says so and a run can supply them, 4 KiB otherwise. Stops early when memory runs out.
fn plan(runs: &mut Vec<(u64, u64)>, start: u64, end: u64, huge: impl Fn(u64) -> bool) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut va = start;
    while va < end {
        let remaining = (end - va) >> PageSize::K4.shift();
        let mut size =
            if remaining >= PageSize::M2.base_pages() && PageSize::M2.is_aligned(va) && huge(va) { PageSize::M2 } else { PageSize::K4 };
        let pick = loop {
            let sp = size.base_pages();
            let pick = choose_run(runs, va, size, remaining / sp * sp);
            if pick.is_some() || size == PageSize::K4 {
                break pick;
            }
            size = PageSize::K4;
        };
        let Some((i, pfn, pages)) = pick else { break };
        let (rs, rn) = runs[i];
        let mut rest = Vec::with_capacity(2);
        if pfn > rs {
            rest.push((rs, pfn - rs));
        }
        if pfn + pages < rs + rn {
            rest.push((pfn + pages, rs + rn - pfn - pages));
        }
        runs.splice(i..=i, rest);
        pieces.push(Piece { va, pfn, pages, size });
        va += pages << PageSize::K4.shift();
    }
    pieces
}

/// Number of naturally aligned blocks (of order at most `top`) tiling `[pfn, pfn + pages)`: the
/// buddy allocations that take such a run.
fn aligned_blocks(pfn: u64, pages: u64, top: u32) -> u64 {
    let end = pfn + pages;
    let mut p = pfn;
    let mut n = 0;
    while p < end {
        let k = p.trailing_zeros().min(top).min(63 - (end - p).leading_zeros());
        p += 1 << k;
        n += 1;
    }
    n
}

impl<D: Driver> Os<D> {
    /// The 4 KiB frames an eager mapping may take: free memory less what its translation tables
    /// need (a leaf table page per 512 pages, a few for the levels above) and, with swap on, the
    /// watermark demand faults keep free too (`Os::reclaim`). Taking every free frame left the
    /// tables none: the mapping failed with "out of memory" where the rest of the VMA should have
    /// been demand-paged.
    fn eager_budget(&self) -> u64 {
        let watermark = if self.cfg.swap.enabled { self.cfg.swap.min_free >> PageSize::K4.shift() } else { 0 };
        let avail = self.phys.free_pages().saturating_sub(watermark);
        avail.saturating_sub(avail.div_ceil(512) + 16)
    }

    /// Eager paging of a fresh VMA (see the module documentation).
    pub(super) fn eager_map(&mut self, asid: u16, vma: Vma) -> Result<()> {
        if vma.flags.huge == HugeAdvice::Giga || vma.flags.file_backed {
            return Ok(());
        }
        self.cost.set_path(Path::Fault);
        if let Some((pfn, pages)) = self.pools.eager.take() {
            self.phys.unreserve_contiguous(pfn, pages).map_err(Error::Check)?;
        }
        let mut runs: Vec<(u64, u64)> = self.phys.free_runs().into_iter().map(|(p, n)| (p.0, n)).collect();
        let thp = vma.thp_allowed(self.cfg.thp);
        let driver = &self.driver;
        let end = vma.end.min(vma.start.saturating_add(self.eager_budget() << PageSize::K4.shift()));
        let pieces = plan(&mut runs, vma.start, end, |va| thp && driver.can_map(va, PageSize::M2).is_ok());
        // Take every frame first, so the translation tables inserted below cannot land in a run.
        let top = self.phys.largest_order();
        for pc in &pieces {
            let sp = pc.size.base_pages();
            for i in 0..pc.pages / sp {
                let pfn = Pfn(pc.pfn + i * sp);
                if !self.phys.alloc_at(pfn, pc.size.order()) {
                    return Err(Error::Check(format!("eager paging: frame {:#x} of a free run is not free", pfn.0)));
                }
            }
            self.cost.add_to(Func::Alloc, Event::Page, aligned_blocks(pc.pfn, pc.pages, top));
            self.zero_data(pc.pages);
        }
        for pc in &pieces {
            let first = TObj::new(pc.va, Pfn(pc.pfn).addr(), pc.size, vma.prot);
            let len = pc.pages << PageSize::K4.shift();
            self.api(asid, Func::Insert, |d, s, env| d.map_range(s, &first, len, env))?;
            let truth = &mut self.procs[asid as usize].truth;
            let step = pc.size.bytes();
            let mut off = 0;
            while off < len {
                truth.insert(first.va + off, first.pa + off, pc.size);
                off += step;
            }
            self.stats.eager_runs += 1;
            self.stats.eager_bytes += len;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M2P: u64 = 512;

    #[test]
    fn best_fit_then_largest() {
        // Runs (first frame, frames): 100 at 0, 5000 at 1000, 600 at 10000.
        let runs = [(0u64, 100u64), (1000, 5000), (10000, 600)];
        // 50 frames: the smallest run that holds them is the first.
        assert_eq!(choose_run(&runs, 0, PageSize::K4, 50), Some((0, 0, 50)));
        // 550 frames: the 600-frame run, not the 5000-frame one.
        assert_eq!(choose_run(&runs, 0, PageSize::K4, 550), Some((2, 10000, 550)));
        // 9000 frames: none holds them; the largest run is taken whole.
        assert_eq!(choose_run(&runs, 0, PageSize::K4, 9000), Some((1, 1000, 5000)));
        // 2 MiB pages: frame must be 512-aligned (va 0). Run 1 from 1024 gives 4608 = 9 × 512
        // frames; run 2 from 10240 has only 360 frames left, less than one 2 MiB page.
        assert_eq!(choose_run(&runs, 0, PageSize::M2, 2 * M2P), Some((1, 1024, 2 * M2P)));
        assert_eq!(choose_run(&runs, 0, PageSize::M2, 20 * M2P), Some((1, 1024, 9 * M2P)));
        assert_eq!(choose_run(&[(1, 600)], 0, PageSize::M2, M2P), None);
    }

    #[test]
    fn one_run_per_vma_on_fresh_memory() {
        let mut phys = PhysMem::new(1 << 30, 14);
        // Something allocated low, as page tables would be.
        phys.alloc(0).unwrap();
        let mut runs: Vec<(u64, u64)> = phys.free_runs().into_iter().map(|(p, n)| (p.0, n)).collect();
        assert_eq!(runs, vec![(1, (1 << 18) - 1)], "fresh memory is one run");
        let va = 64 << 30;
        let p = plan(&mut runs, va, va + (256 << 20), |_| false);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].pages, (256 << 20) >> 12);
        // With 2 MiB pages the run is aligned up to the next 2 MiB frame; the 4 KiB tail of a VMA
        // that is not a whole number of 2 MiB pages is its own piece.
        let mut runs: Vec<(u64, u64)> = phys.free_runs().into_iter().map(|(p, n)| (p.0, n)).collect();
        let p = plan(&mut runs, va, va + (64 << 20) + 8192, |_| true);
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!((p[0].pfn, p[0].pages, p[0].size), (512, (64 << 20) >> 12, PageSize::M2));
        assert_eq!((p[1].pages, p[1].size), (2, PageSize::K4));
        assert_eq!(aligned_blocks(1, (1 << 18) - 1, 13), 13 + 31);
    }

    #[test]
    fn fragmented_memory_gives_more_smaller_runs() {
        let mut phys = PhysMem::new(1 << 30, 14);
        phys.fragment_free_2m(0.9, 7);
        let mut runs: Vec<(u64, u64)> = phys.free_runs().into_iter().map(|(p, n)| (p.0, n)).collect();
        let free: u64 = runs.iter().map(|r| r.1).sum();
        assert_eq!(free, phys.free_pages());
        let va = 64 << 30;
        let p = plan(&mut runs, va, va + (256 << 20), |_| false);
        assert!(p.len() > 8, "fragmented memory needs many runs: {}", p.len());
        assert_eq!(p.iter().map(|x| x.pages).sum::<u64>(), (256 << 20) >> 12);
        // Largest first: run sizes never increase, except the last (best fit for the remainder).
        for w in p[..p.len() - 1].windows(2) {
            assert!(w[0].pages >= w[1].pages);
        }
    }
}
