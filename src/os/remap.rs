//! `mremap` and sharing a region with another address space (MAP_SHARED of an existing object),
//! both of which put existing frames at a new virtual address. For a design whose placement
//! depends on the virtual address (SPARTA §5), the new address is chosen congruent to the old
//! one modulo the driver's [`FramePlacement::va_period`], so every page keeps its partition:
//! §5's example of adjusting `[V5..V9]` to `[V7..V11]`.
//!
//! [`FramePlacement::va_period`]: crate::tapi::FramePlacement::va_period

use super::*;

impl<D: Driver> Os<D> {
    /// A free virtual range of `len` bytes in `asid`'s mmap area whose start is congruent to
    /// `like` modulo the driver's placement period (aligned as `mmap` aligns otherwise).
    fn pick_va(&mut self, asid: u16, len: u64, like: u64) -> Result<u64> {
        let period = self.driver.placement().map_or(0, |p| p.va_period());
        let p = self.procs.get_mut(asid as usize).ok_or_else(|| Error::Check(format!("no process {asid}")))?;
        let align = if len >= 2 << 20 { 2 << 20 } else { 4096 };
        let mut start = p.next_mmap.div_ceil(align) * align;
        if period > 0 {
            let want = like % period;
            start += (want + period - start % period) % period;
        } else {
            // No constraint: keep `like`'s offset within a 2 MiB region, so huge pages stay aligned.
            let want = like % (2 << 20);
            start += (want + (2 << 20) - start % (2 << 20)) % (2 << 20);
        }
        p.next_mmap = (start + len + (4 << 20)) & !((2 << 20) - 1);
        Ok(start)
    }

    /// The pages of `asid` in `[start, end)`, in address order, through the API.
    fn pages_in(&mut self, asid: u16, start: u64, end: u64) -> Vec<TObj> {
        let mut pages: Vec<(u64, u64, PageSize)> =
            self.procs[asid as usize].truth.pages().into_iter().filter(|&(va, _, _)| va >= start && va < end).collect();
        pages.sort_unstable();
        pages.into_iter().filter_map(|(va, _, _)| self.api(asid, Func::Iterate, |d, s, env| d.find(s, va, env))).collect()
    }

    /// `mremap` of the whole VMA at `addr` to a new address: its translations move (same frames,
    /// no copy), the old range is shot down. Returns the new address.
    pub fn mremap(&mut self, asid: u16, addr: u64) -> Result<u64> {
        let vma =
            self.vma(asid, addr).filter(|v| v.start == addr).ok_or_else(|| Error::Check(format!("mremap: no VMA starts at {addr:#x}")))?;
        let len = vma.end - vma.start;
        let to = self.pick_va(asid, len, addr)?;
        self.cost.set_path(Path::Unmap);
        let pages = self.pages_in(asid, vma.start, vma.end);
        let p = &mut self.procs[asid as usize];
        p.vmas.remove(&vma.start);
        p.vmas.insert(to, Vma { start: to, end: to + len, ..vma });
        p.holes.free_unmapped(&p.vmas, vma.start, vma.end);
        for o in pages {
            self.api(asid, Func::Remove, |d, s, env| d.remove(s, o.va, o.size, env));
            self.procs[asid as usize].truth.remove(o.va, o.size);
            let va = to + (o.va - addr);
            self.install(asid, va, o.pa, o.size, o.prot)?;
            let key = fork::cow_key(asid, o.va, o.size);
            if let Some(sz) = self.cow.remove(&key) {
                self.cow.insert(fork::cow_key(asid, va, o.size), sz);
            }
        }
        self.shootdown(asid, vma.start, vma.end);
        self.stats.remaps += 1;
        Ok(to)
    }

    /// Maps the VMA of `src` at `addr` into `dst` as a shared mapping (MAP_SHARED of the same
    /// object): the same frames, writable by both, at an address of `dst` chosen as
    /// [`Os::mremap`] chooses. Returns it.
    pub fn share(&mut self, src: u16, addr: u64, dst: u16) -> Result<u64> {
        let vma =
            self.vma(src, addr).filter(|v| v.start == addr).ok_or_else(|| Error::Check(format!("share: no VMA starts at {addr:#x}")))?;
        let len = vma.end - vma.start;
        let to = self.pick_va(dst, len, addr)?;
        let flags = MapFlags { shared: true, ..vma.flags };
        self.procs[dst as usize].vmas.insert(to, Vma { start: to, end: to + len, flags, ..vma });
        self.cost.set_path(Path::Fault);
        for o in self.pages_in(src, vma.start, vma.end) {
            let va = to + (o.va - addr);
            self.install(dst, va, o.pa, o.size, o.prot).map_err(|e| {
                Error::Check(format!("share: ASID {dst} cannot map ASID {src}'s {} page {:#x} at {va:#x}: {e}", o.size, o.va))
            })?;
            self.add_mapping(o.pa, o.size);
        }
        self.stats.shares += 1;
        Ok(to)
    }
}
