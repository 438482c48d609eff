//! HugeTLB of any page size (`os.hugetlb_size`, `os.hugetlb_pool`): anonymous faults map whole
//! pages of that size (Linux's hugetlbfs, as the Elastic Translations artifact's HugeTLB
//! 64K/2M/32M/1G baselines use it through libhugetlbfs, reference elastic-translations.md §6.4).
//! Pages come from a pool preallocated at boot (`nr_hugepages`) and go back to it on unmap;
//! without a pool, or once it is empty, they are allocated from the buddy allocator at fault
//! (`nr_overcommit_hugepages`). When neither has a page the fault falls back to 4 KiB, as
//! libhugetlbfs falls back to the normal heap (hugetlbfs itself would fail the fault).
//!
//! The 1 GiB pool for VMAs advised [`HugeAdvice::Giga`] (`os.hugetlb_1g`) is the older,
//! per-VMA knob and stays separate.

use super::phys::PhysMem;
use crate::addr::{PageSize, Pfn};
use crate::error::{Error, Result};

/// Preallocated pages of one size.
#[derive(Debug, Default)]
pub struct HugetlbPool {
    size: Option<PageSize>,
    /// Free pages, highest address first (`pop` hands out the lowest).
    free: Vec<Pfn>,
}

impl HugetlbPool {
    /// HugeTLB of `size` pages (4K: off) with `bytes` of them carved out of fresh memory.
    pub fn carve(phys: &mut PhysMem, size: PageSize, bytes: u64) -> Result<HugetlbPool> {
        if size == PageSize::K4 {
            return Ok(HugetlbPool::default());
        }
        let mut free = Vec::new();
        for _ in 0..bytes / size.bytes() {
            let pfn = phys.alloc(size.order()).ok_or_else(|| {
                Error::config(
                    "os.hugetlb_pool",
                    format!("cannot preallocate {} pages of {size} ({} pages free)", bytes / size.bytes(), phys.free_pages()),
                )
            })?;
            free.push(pfn);
        }
        free.reverse();
        Ok(HugetlbPool { size: Some(size), free })
    }

    /// The HugeTLB page size, if HugeTLB is on.
    pub fn size(&self) -> Option<PageSize> {
        self.size
    }

    /// A page from the pool, or from `phys` when the pool is empty.
    pub fn take(&mut self, phys: &mut PhysMem) -> Option<Pfn> {
        let size = self.size?;
        self.free.pop().or_else(|| phys.alloc(size.order()))
    }

    /// Gives a page back at unmap: to the pool if it was preallocated, else to `phys`.
    pub fn give_back(&mut self, phys: &mut PhysMem, pfn: Pfn, preallocated: bool) -> Result<()> {
        if preallocated {
            self.free.push(pfn);
            return Ok(());
        }
        phys.free(pfn, self.size.map_or(0, |s| s.order())).map_err(Error::Check)
    }

    /// Pages left.
    pub fn left(&self) -> usize {
        self.free.len()
    }
}
