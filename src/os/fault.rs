//! Page faults: demand paging with THP, 1 GiB pools and swap-in; populate.

use super::*;

impl<D: Driver> Os<D> {
    /// Handles a page fault at `va`: maps the page (THP, 1 GiB pool or 4 KiB) through the
    /// translation API. Returns the new translation.
    ///
    /// With Hawkeye on, a fault that maps less than 2 MiB registers its 2 MiB region for access
    /// tracking (the port's `add_ohp_bin` at fault; regions mapped whole at fault have nothing to
    /// promote, and Hawkeye would drop them at its first window).
    pub fn fault(&mut self, asid: u16, va: u64) -> Result<Translation> {
        let t = self.map_fault(asid, va)?;
        if hawkeye::active(&self.cfg) && t.size < PageSize::M2 {
            self.hawkeye_new.insert((asid, PageSize::M2.align_down(va)));
        }
        Ok(t)
    }

    fn map_fault(&mut self, asid: u16, va: u64) -> Result<Translation> {
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
        if let Some(size) = self.hugetlb.size().filter(|_| !vma.flags.file_backed && vma.flags.huge != HugeAdvice::NoHuge) {
            if let Some(base) = self.fits(asid, &vma, va, size) {
                if let Some(pfn) = self.hugetlb.take(&mut self.phys) {
                    // hugetlb_no_page: allocate (or take from the pool) and clear the page.
                    self.cost.add_to(Func::Alloc, Event::Page, 1);
                    self.zero_data(size.base_pages());
                    self.install(asid, base, pfn.addr(), size, vma.prot)?;
                    self.stats.faults_hugetlb += 1;
                    return Ok(Translation { pbase: pfn.addr(), size });
                }
            }
            self.stats.hugetlb_fallback += 1;
        }
        let coala = self.coala_fault(asid, va);
        if vma.thp_allowed(self.cfg.thp) && !coala.skip_thp {
            let base = PageSize::M2.align_down(va);
            if base >= vma.start && base + PageSize::M2.bytes() <= vma.end {
                if self.driver.can_map(base, PageSize::M2).is_err() {
                    self.stats.thp_fallback_driver += 1;
                } else if !self.api(asid, Func::RangeCheck, |d, s, env| d.range_is_empty(s, base, base + PageSize::M2.bytes(), env)) {
                    self.stats.thp_fallback_range += 1;
                } else if let Some(pa) = self.data_frame(asid, base, PageSize::M2, vma.flags, coala.place_thp)? {
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
        if self.cfg.mthp && !vma.flags.file_backed && vma.flags.huge != HugeAdvice::NoHuge {
            if let Some(base) = self.fits(asid, &vma, va, PageSize::K64) {
                if let Some(pa) = self.frame_for(asid, base, PageSize::K64, vma.flags)? {
                    self.install(asid, base, pa, PageSize::K64, vma.prot)?;
                    self.stats.faults_64k += 1;
                    return Ok(Translation { pbase: pa, size: PageSize::K64 });
                }
            }
        }
        let base = PageSize::K4.align_down(va);
        let pa = self
            .data_frame(asid, base, PageSize::K4, vma.flags, coala.place_4k && !vma.flags.file_backed)?
            .ok_or_else(|| self.out_of_memory(format!("4 KiB page for {va:#x}")))?;
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

    /// The base of the `size` page around `va` if it lies inside `vma`, the driver can map it
    /// and nothing maps any part of it yet.
    fn fits(&mut self, asid: u16, vma: &Vma, va: u64, size: PageSize) -> Option<u64> {
        let base = size.align_down(va);
        let end = base + size.bytes();
        (base >= vma.start
            && end <= vma.end
            && self.driver.can_map(base, size).is_ok()
            && self.api(asid, Func::RangeCheck, |d, s, env| d.range_is_empty(s, base, end, env)))
        .then_some(base)
    }

    /// Allocates and zeroes a data block.
    pub(super) fn alloc_data(&mut self, order: u32) -> Option<Pfn> {
        let pfn = self.phys.alloc(order)?;
        self.cost.add_to(Func::Alloc, Event::Page, 1);
        self.zero_data(1 << order);
        Some(pfn)
    }

    /// Allocates and zeroes a 2 MiB data page, from the THP pool first (`os.thp_pool`), then the
    /// buddy allocator, then, with `os.compaction.fault`, a block compaction frees.
    pub(super) fn alloc_huge(&mut self) -> Result<Option<Pfn>> {
        let pfn = match self.pools.take_2m() {
            Some(pfn) => pfn,
            None => match self.phys.alloc(9) {
                Some(pfn) => pfn,
                None if self.cfg.compaction.fault => match self.compact_2m()? {
                    Some(pfn) => pfn,
                    None => return Ok(None),
                },
                None => return Ok(None),
            },
        };
        self.cost.add_to(Func::Alloc, Event::Page, 1);
        self.zero_data(512);
        Ok(Some(pfn))
    }

    pub(super) fn install(&mut self, asid: u16, va: u64, pa: u64, size: PageSize, prot: u8) -> Result<()> {
        let o = TObj::new(va, pa, size, prot);
        self.api(asid, Func::Insert, |d, s, env| d.update(s, &o, env))?;
        self.procs[asid as usize].truth.insert(va, pa, size);
        if self.cfg.swap.enabled && !self.driver_owns(pa) {
            self.resident.push_back((asid, va, size, pa));
        }
        Ok(())
    }

    /// Faults in every page of `[addr, addr+len)` in address order. The first page faulted in
    /// tells the size the rest will likely get, and the ground truth makes room for them at once
    /// rather than doubling its table all along a large range (host time only).
    pub fn populate(&mut self, asid: u16, addr: u64, len: u64) -> Result<()> {
        let mut va = PageSize::K4.align_down(addr);
        let mut reserved = false;
        while va < addr + len {
            let t = match self.truth(asid, va) {
                Some(t) => t,
                None => {
                    let t = self.fault(asid, va)?;
                    if !reserved {
                        // No more than the free frames can back: a range beyond them fails or
                        // swaps, and its reservation must not outgrow the simulated memory.
                        reserved = true;
                        let pages = t.size.bytes() >> 12;
                        let more = ((addr + len - va) / t.size.bytes()).min(self.phys.free_pages() / pages + 1);
                        self.procs[asid as usize].truth.reserve(t.size, more as usize);
                    }
                    t
                }
            };
            va = t.size.align_down(va) + t.size.bytes();
        }
        Ok(())
    }
}
