//! fork and copy-on-write: a child address space that shares every frame of its parent
//! read-only, and the write-protection fault that gives a writer its own copy.
//!
//! `fork` maps each of the parent's pages in the child at the same virtual address and frame,
//! write-protects both (through the translation API: one `update` per page, counted), and
//! counts the frame's sharers. A store to a write-protected shared page ([`Os::cow_fault`])
//! copies it into a new frame chosen like any new page of that virtual address — so a
//! partitioned design (SPARTA §5) keeps the copy in the page's partition — or, when the writer
//! is the last sharer, just makes the page writable again. A frame is freed when its last
//! sharer unmaps it. A page whose frame names one address space's page (a Utopia RestSeg slot)
//! first moves to a buddy frame, where shared pages live. A design without synonyms (DIPTA,
//! restrictive-only Utopia) refuses the child's mappings with its own error. Pages the parent
//! has swapped out stay swapped out in both: each reads its own copy back on its first touch.
//!
//! What is simplified: the translations' protection is not cached in the TLBs, so the write
//! fault is taken by the OS model when a store reaches a page marked copy-on-write, before the
//! MMU translates it (the cost is the same fault: trap, copy, update, shootdown).

use super::*;
use crate::tapi::{Evict, EvictTo};

impl<D: Driver> Os<D> {
    /// Forks `parent`: a new address space with the parent's VMAs and every page shared
    /// copy-on-write. Returns the child's ASID. Charged to the fault path (as `fork` is to the
    /// parent's time).
    pub fn fork(&mut self, parent: u16) -> Result<u16> {
        let implicit = self.proc(parent)?.implicit;
        let child = self.spawn(implicit)?;
        let (vmas, next_mmap, holes) = {
            let p = &self.procs[parent as usize];
            (p.vmas.clone(), p.next_mmap, p.holes.clone())
        };
        let c = &mut self.procs[child as usize];
        (c.vmas, c.next_mmap, c.holes) = (vmas, next_mmap, holes);
        // The parent's swapped-out pages are the child's too (Linux copies the swap entries):
        // the child's first touch of one reads it back, as the parent's would.
        let swapped = self.procs[parent as usize].swapped.clone();
        self.procs[child as usize].swapped = swapped;
        self.cost.set_path(Path::Fault);
        self.move_out_before_sharing(parent)?;
        // The parent's pages, in address order (deterministic), each read through the API.
        let mut pages = self.procs[parent as usize].truth.pages();
        pages.sort_unstable();
        for (va, _, _) in pages {
            let o = self
                .api(parent, Func::Iterate, |d, s, env| d.find(s, va, env))
                .ok_or_else(|| Error::Check(format!("fork: the parent's page at {va:#x} is not in its translation database")))?;
            let ro = TObj { prot: o.prot & !prot::WRITE, ..o };
            self.api(parent, Func::Insert, |d, s, env| d.update(s, &ro, env))?;
            self.install(child, o.va, o.pa, o.size, ro.prot).map_err(|e| {
                let what = format!("fork: the child (ASID {child}) cannot share the parent's {} page at {:#x}", o.size, o.va);
                // A design's documented limit stays one, and so does a machine too small for the
                // child's tables; anything else is a broken invariant.
                match e {
                    Error::Unsupported(why) => Error::Unsupported(format!("{what}: {why}")),
                    Error::OutOfMemory(why) => self.out_of_memory(format!("{what}: {why}")),
                    e => Error::Check(format!("{what}: {e}")),
                }
            })?;
            self.add_mapping(o.pa, o.size);
            if o.prot & prot::WRITE != 0 {
                self.cow.insert(cow_key(parent, o.va, o.size), o.size);
                self.cow.insert(cow_key(child, o.va, o.size), o.size);
            }
            self.stats.cow_shared_pages += 1;
        }
        // The parent's translations were write-protected: its TLB entries go.
        self.shootdown(parent, 0, u64::MAX >> 7);
        Ok(child)
    }

    /// Moves each page of `asid` whose frame cannot be mapped by a second address space to a
    /// buddy frame first ([`crate::tapi::FramePlacement::moves_out_to_share`]: Utopia's RestSeg pages go to
    /// the FlexSeg, §5.2, where shared pages live). The move is an eviction, counted in
    /// `evictions`: the copy is charged, the old frame flushed and the page locked for the copy;
    /// a 2 MiB page that finds no free block moves out as 4 KiB pages.
    fn move_out_before_sharing(&mut self, asid: u16) -> Result<()> {
        let Some(p) = self.driver.placement() else { return Ok(()) };
        let mut moving = self.procs[asid as usize].truth.pages();
        moving.retain(|&(_, pa, _)| p.moves_out_to_share(pa));
        moving.sort_unstable();
        for (va, _, size) in moving {
            self.evict(Evict { asid, va, size, to: EvictTo::Buddy })?;
        }
        Ok(())
    }

    /// Whether any page is shared copy-on-write (the access loops skip the check otherwise).
    #[inline(always)]
    pub fn has_cow(&self) -> bool {
        !self.cow.is_empty()
    }

    /// A store by `asid` to `va`: if the page is copy-on-write, gives the writer its own copy
    /// (or, as the last sharer, write access back) and returns the cycles the fault costs (trap
    /// included); `None` if the page is not copy-on-write.
    ///
    /// A transparent huge page that another mapping still shares is split first, and only the
    /// 4 KiB page written is copied: Linux's `do_huge_pmd_wp_page` has split the PMD and retried
    /// the fault at 4 KiB since 5.8 ("thp: change CoW semantics for anon-THP"), the kernels the
    /// seeds ran. A HugeTLB page is copied whole (`hugetlb_wp`).
    pub fn cow_fault(&mut self, asid: u16, va: u64, now: f64) -> Result<Option<f64>> {
        let Some((_, size)) = self.procs.get(asid as usize).and_then(|p| p.truth.lookup(va)) else { return Ok(None) };
        let base = size.align_down(va);
        if self.cow.remove(&cow_key(asid, base, size)).is_none() {
            return Ok(None);
        }
        self.now = now;
        let before = self.cycles(Path::Fault);
        self.cost.set_path(Path::Fault);
        let mut o = self
            .api(asid, Func::Lookup, |d, s, env| d.find(s, base, env))
            .ok_or_else(|| Error::Check(format!("copy-on-write page {base:#x} of ASID {asid} is not mapped")))?;
        if self.splits_on_write(o.pa, o.size) && self.split_for_write(asid, &o)? {
            let small = PageSize::K4.align_down(va);
            self.cow.remove(&cow_key(asid, small, PageSize::K4));
            o = self
                .api(asid, Func::Lookup, |d, s, env| d.find(s, small, env))
                .ok_or_else(|| Error::Check(format!("copy-on-write: the split page {small:#x} of ASID {asid} is not mapped")))?;
        }
        let (pa, size, base) = (o.pa, o.size, o.va);
        let rw = o.prot | prot::WRITE;
        let n = self.sharers.get(&pa).copied().unwrap_or(1);
        if n <= 1 {
            // The last sharer: the page is its own again.
            self.sharers.remove(&pa);
            self.api(asid, Func::Insert, |d, s, env| d.update(s, &TObj { prot: rw, ..o }, env))?;
            self.stats.cow_reuses += 1;
        } else {
            let flags = self.vma(asid, base).map(|v| v.flags).unwrap_or_default();
            // The copy's frame is chosen like a new page's at this address (SPARTA: in its partition).
            let to = self
                .frame_for(asid, base, size, flags)?
                .ok_or_else(|| self.out_of_memory(format!("a {size} frame for a copy-on-write copy at {base:#x}")))?;
            self.cost.add_to(Func::Copy, Event::Page, size.base_pages());
            self.api(asid, Func::Remove, |d, s, env| d.remove(s, base, size, env));
            self.procs[asid as usize].truth.remove(base, size);
            self.install(asid, base, to, size, rw)?;
            if n == 2 {
                self.sharers.remove(&pa);
            } else {
                self.sharers.insert(pa, n - 1);
            }
            self.stats.cow_copies += 1;
        }
        self.shootdown(asid, base, base + size.bytes());
        Ok(Some(self.cycles(Path::Fault) - before + self.cfg.fault_trap_cycles))
    }

    /// Whether a write to the huge page at `pa` splits it: a transparent huge page (not
    /// HugeTLB, not a frame the driver places) that another mapping shares, or whose frame
    /// another sharer's write has split already. An exclusive one is reused whole.
    fn splits_on_write(&mut self, pa: u64, size: PageSize) -> bool {
        size != PageSize::K4
            && !self.is_hugetlb(size)
            && !self.driver_owns(pa)
            && (self.split_frames.contains_key(&pa) || self.sharers.get(&pa).is_some_and(|&n| n > 1))
    }

    /// Splits `asid`'s huge mapping `o` into 4 KiB mappings of the same frames, read-only and
    /// copy-on-write (`__split_huge_pmd` on a write fault); `false`, with nothing changed, if the
    /// frame is not one buddy block (then the page is copied whole).
    fn split_for_write(&mut self, asid: u16, o: &TObj) -> Result<bool> {
        let split = self.split_mapping(asid, o, o.prot & !prot::WRITE, true)?;
        self.stats.cow_splits += u64::from(split);
        Ok(split)
    }

    /// Splits `asid`'s huge mapping `o` into 4 KiB mappings of the same frames with protection
    /// `prot`, each copy-on-write if `cow` (`__split_huge_pmd`: the PMD becomes a table of 512
    /// entries), and shoots the huge page down. The first split of a shared frame splits its
    /// allocation into 4 KiB blocks and gives each the frame's mapping count: the other
    /// sharers' whole mappings count once on every one. An unshared frame's allocation is split
    /// alone, each piece then freed on its own. `false`, with nothing changed, if the frame is
    /// not one buddy block.
    pub(super) fn split_mapping(&mut self, asid: u16, o: &TObj, prot: u8, cow: bool) -> Result<bool> {
        let (pa, size) = (o.pa, o.size);
        let pages = size.base_pages();
        if self.split_frames.contains_key(&pa) {
            self.drop_whole_mapping(pa);
        } else {
            if self.phys.split_allocated(Pfn::containing(pa), size.order(), 0).is_err() {
                return Ok(false);
            }
            let n = self.sharers.remove(&pa).unwrap_or(1);
            if n > 1 {
                for i in 0..pages {
                    self.sharers.insert(pa + (i << 12), n);
                }
                self.split_frames.insert(pa, n - 1);
            }
        }
        self.api(asid, Func::Remove, |d, s, env| d.remove(s, o.va, size, env));
        self.procs[asid as usize].truth.remove(o.va, size);
        for i in 0..pages {
            let va = o.va + (i << 12);
            self.install(asid, va, pa + (i << 12), PageSize::K4, prot)?;
            if cow {
                // The whole page was copy-on-write: so is every piece.
                self.cow.insert(cow_key(asid, va, PageSize::K4), PageSize::K4);
            }
        }
        self.shootdown(asid, o.va, o.va + size.bytes());
        Ok(true)
    }

    /// One whole mapping fewer of the split frame at `pa`; the frame is forgotten with its last
    /// (its 4 KiB pieces keep their own counts).
    fn drop_whole_mapping(&mut self, pa: u64) {
        match self.split_frames.get_mut(&pa) {
            Some(whole) if *whole > 1 => *whole -= 1,
            _ => {
                self.split_frames.remove(&pa);
            }
        }
    }

    /// Counts one more mapping of the frame at `pa` (a fork or a shared mapping): of each of
    /// its 4 KiB frames if another sharer's write has split it ([`Os::split_for_write`]).
    pub(super) fn add_mapping(&mut self, pa: u64, size: PageSize) {
        if size != PageSize::K4 {
            if let Some(whole) = self.split_frames.get_mut(&pa) {
                *whole += 1;
                for i in 0..size.base_pages() {
                    *self.sharers.entry(pa + (i << 12)).or_insert(1) += 1;
                }
                return;
            }
        }
        *self.sharers.entry(pa).or_insert(1) += 1;
    }

    /// Drops a whole mapping of the huge frame at `pa` that another sharer's write has split
    /// ([`Os::split_for_write`]): one mapping of each of its 4 KiB frames, each freed if that was
    /// its last.
    pub(super) fn free_split_frame(&mut self, pa: u64, size: PageSize) -> Result<()> {
        self.drop_whole_mapping(pa);
        for i in 0..size.base_pages() {
            let f = pa + (i << 12);
            if !self.unshare(f) {
                self.phys.free(Pfn::containing(f), 0).map_err(Error::Check)?;
            }
        }
        Ok(())
    }

    /// Whether the frame at `pa` is shared by more than one mapping: it is not freed, only one
    /// sharer fewer is counted ([`Os::free_frame`]).
    pub(super) fn unshare(&mut self, pa: u64) -> bool {
        match self.sharers.get(&pa).copied() {
            Some(n) if n > 1 => {
                if n == 2 {
                    self.sharers.remove(&pa);
                } else {
                    self.sharers.insert(pa, n - 1);
                }
                true
            }
            _ => false,
        }
    }
}

/// Key of a copy-on-write page: its ASID, size and base.
#[inline]
pub(super) fn cow_key(asid: u16, va: u64, size: PageSize) -> u64 {
    ((size.align_down(va) >> 12) << 19) | ((asid as u64) << 3) | size.index() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::{MapFlags, OsConfig, SwapConfig, ThpMode};
    use crate::tapi::flat::Flat;

    /// Pages the parent swapped out before the fork stay swapped out in the child: its first
    /// touch of one is a swap-in, not a fresh page, and the parent's later touch is one too.
    #[test]
    fn the_child_inherits_swapped_out_pages() {
        let swap = SwapConfig { enabled: true, ..SwapConfig::default() };
        let cfg = OsConfig { memory: 32 << 20, thp: ThpMode::Never, swap, ..OsConfig::default() };
        let mut os = Os::boot(Flat::with_side(None), &cfg, 1).unwrap();
        let p = os.spawn(false).unwrap();
        let len = 48 << 20;
        let base = os.mmap(p, len, MapFlags::default()).unwrap();
        for va in (base..base + len).step_by(4096) {
            os.fault(p, va).unwrap();
        }
        assert!(os.stats.swap_outs > 0, "48 MiB of pages in 32 MiB swap some out");
        let out = (base..base + len).step_by(4096).find(|&va| os.truth(p, va).is_none()).expect("a swapped-out page");
        let c = os.fork(p).unwrap();
        let before = os.stats.swap_ins;
        os.fault(c, out).unwrap();
        assert_eq!(os.stats.swap_ins, before + 1, "the child reads the page back");
        os.fault(p, out).unwrap();
        assert_eq!(os.stats.swap_ins, before + 2, "and the parent reads its own copy back");
        assert!(os.truth(c, out).is_some() && os.truth(c, out) != os.truth(p, out), "in frames of their own");
    }

    /// What [`one_huge_page`] set up: the free pages before, the 8 MiB VMA, and its 2 MiB page.
    struct HugePage {
        free: u64,
        start: u64,
        base: u64,
        huge: Translation,
    }

    /// A 64 MiB machine with THP always and one process whose 8 MiB VMA has one 2 MiB page
    /// faulted in.
    fn one_huge_page() -> (Os<Flat>, u16, HugePage) {
        let cfg = OsConfig { memory: 64 << 20, thp: ThpMode::Always, ..OsConfig::default() };
        let mut os = Os::boot(Flat::with_side(None), &cfg, 1).unwrap();
        let p = os.spawn(false).unwrap();
        let free = os.phys.free_pages();
        let start = os.mmap(p, 8 << 20, MapFlags::default()).unwrap();
        let base = PageSize::M2.align_down(start) + (2 << 20);
        let huge = os.fault(p, base).unwrap();
        assert_eq!(huge.size, PageSize::M2);
        (os, p, HugePage { free, start, base, huge })
    }

    /// A store to a shared transparent huge page splits the writer's mapping into 4 KiB pages of
    /// the same frames and copies only the page written (Linux ≥ 5.8); the other sharer keeps
    /// its huge mapping until it writes too. Every frame is freed exactly once when both unmap,
    /// in either order.
    #[test]
    fn a_write_to_a_shared_huge_page_splits_it_and_copies_one_page() {
        for child_unmaps_first in [false, true] {
            let (mut os, p, HugePage { free, start, base, huge }) = one_huge_page();
            let c = os.fork(p).unwrap();
            os.cow_fault(p, base + 0x3000, 0.0).unwrap().expect("a copy-on-write fault");
            assert_eq!((os.stats.cow_splits, os.stats.cow_copies), (1, 1));
            let written = os.truth(p, base + 0x3000).unwrap();
            assert_eq!(written.size, PageSize::K4);
            assert!(written.pbase < huge.pbase || written.pbase >= huge.pbase + (2 << 20), "a new frame");
            let kept = os.truth(p, base + 0x5000).unwrap();
            assert_eq!((kept.pbase, kept.size), (huge.pbase + 0x5000, PageSize::K4), "still the shared frame");
            assert_eq!(os.truth(c, base + 0x3000), Some(huge), "the child keeps its huge mapping");
            assert!(os.cow_fault(p, base + 0x3000, 0.0).unwrap().is_none(), "the copy is the parent's own");
            if child_unmaps_first {
                os.munmap(c, start, 8 << 20).unwrap();
            } else {
                // The child's write splits its mapping too: the page the parent copied is the
                // child's alone (write access back), another one is still shared (a copy).
                os.cow_fault(c, base + 0x3000, 0.0).unwrap().expect("a copy-on-write fault");
                assert_eq!((os.stats.cow_splits, os.stats.cow_reuses), (2, 1));
                assert_eq!(os.truth(c, base + 0x3000).map(|t| t.pbase), Some(huge.pbase + 0x3000));
                os.cow_fault(c, base + 0x4000, 0.0).unwrap().expect("a copy-on-write fault");
                assert_eq!(os.stats.cow_copies, 2);
                os.munmap(c, start, 8 << 20).unwrap();
            }
            // The parent's last sharer status: its remaining pieces are its own again.
            os.cow_fault(p, base + 0x5000, 0.0).unwrap().expect("a copy-on-write fault");
            assert_eq!(os.truth(p, base + 0x5000).map(|t| t.pbase), Some(huge.pbase + 0x5000), "reused, not copied");
            os.munmap(p, start, 8 << 20).unwrap();
            assert_eq!(os.phys.free_pages(), free, "every frame freed once (child unmapped first: {child_unmaps_first})");
            assert!(os.sharers.is_empty() && os.split_frames.is_empty());
        }
    }

    /// An `munmap` that cuts a transparent huge page splits it (`split_huge_pmd`): the pages
    /// inside the range are unmapped and their frames freed, the rest stay mapped as 4 KiB
    /// pages of the same frames; unmapping the rest frees every frame once.
    #[test]
    fn an_unmap_that_cuts_a_huge_page_splits_it() {
        let (mut os, p, HugePage { free, start, base, huge }) = one_huge_page();
        let before = os.phys.free_pages();
        os.munmap(p, base + 0x1000, 0x2000).unwrap();
        assert_eq!(os.stats.unmap_splits, 1);
        assert_eq!(os.phys.free_pages(), before + 2, "the two pages inside the range are freed");
        for (off, mapped) in [(0, true), (0x1000, false), (0x2000, false), (0x3000, true), (0x1f_f000, true)] {
            let want = mapped.then_some(Translation { pbase: huge.pbase + off, size: PageSize::K4 });
            assert_eq!(os.truth(p, base + off), want, "offset {off:#x}");
        }
        // The pages outside stay the process's, and writable.
        assert!(os.cow_fault(p, base + 0x3000, 0.0).unwrap().is_none());
        os.munmap(p, start, 8 << 20).unwrap();
        assert_eq!(os.phys.free_pages(), free, "every frame freed once");
        assert!(os.sharers.is_empty() && os.split_frames.is_empty() && !os.has_cow());
    }

    /// A cut of a huge page that a fork shares splits only the unmapping process's mapping: the
    /// other keeps its huge page, the pieces left stay copy-on-write, and every frame is freed
    /// once when both have unmapped, in either order.
    #[test]
    fn an_unmap_that_cuts_a_shared_huge_page_splits_one_mapping() {
        for parent_cuts in [false, true] {
            let (mut os, p, HugePage { free, start, base, huge }) = one_huge_page();
            let c = os.fork(p).unwrap();
            let (cutter, other) = if parent_cuts { (p, c) } else { (c, p) };
            os.munmap(cutter, base, 0x1000).unwrap();
            assert_eq!(os.stats.unmap_splits, 1);
            assert_eq!(os.truth(cutter, base), None);
            assert_eq!(os.truth(cutter, base + 0x1000), Some(Translation { pbase: huge.pbase + 0x1000, size: PageSize::K4 }));
            assert_eq!(os.truth(other, base), Some(huge), "the other mapping stays whole");
            // A piece still shared is copied on a write; the other's write splits its mapping.
            os.cow_fault(cutter, base + 0x1000, 0.0).unwrap().expect("a copy-on-write fault");
            assert_eq!(os.stats.cow_copies, 1);
            os.cow_fault(other, base + 0x2000, 0.0).unwrap().expect("a copy-on-write fault");
            assert_eq!((os.stats.cow_splits, os.stats.cow_copies), (1, 2));
            for asid in [other, cutter] {
                os.munmap(asid, start, 8 << 20).unwrap();
            }
            assert_eq!(os.phys.free_pages(), free, "every frame freed once (parent cuts: {parent_cuts})");
            assert!(os.sharers.is_empty() && os.split_frames.is_empty() && !os.has_cow());
        }
    }

    /// Forking a process that still maps a split huge frame whole counts the new mapping on
    /// every piece: the grandchild's write splits and copies, and every frame is freed once.
    #[test]
    fn a_fork_after_a_split_counts_every_piece() {
        let (mut os, p, HugePage { free, start, base, huge }) = one_huge_page();
        let c = os.fork(p).unwrap();
        os.cow_fault(p, base, 0.0).unwrap().expect("the parent's write splits and copies");
        let g = os.fork(c).unwrap();
        assert_eq!(os.truth(g, base + 0x1000), Some(huge), "the grandchild shares the child's whole mapping");
        os.cow_fault(g, base + 0x1000, 0.0).unwrap().expect("a copy-on-write fault");
        assert_eq!((os.stats.cow_splits, os.stats.cow_copies), (2, 2), "page 1 has three mappings: copied");
        for (asid, va) in [(c, base + 0x1000), (p, base + 0x1000)] {
            os.cow_fault(asid, va, 0.0).unwrap().expect("a copy-on-write fault");
        }
        assert_eq!((os.stats.cow_splits, os.stats.cow_copies, os.stats.cow_reuses), (3, 3, 1), "the last of page 1 reuses it");
        for asid in [g, p, c] {
            os.munmap(asid, start, 8 << 20).unwrap();
        }
        assert_eq!(os.phys.free_pages(), free, "every frame freed once");
        assert!(os.sharers.is_empty() && os.split_frames.is_empty());
    }
}
