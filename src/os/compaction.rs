//! Compaction as the OS drives it (`os.compaction`): a 2 MiB block made free by moving the
//! fragmenter's pages and the OS's own 4 KiB data pages out of it
//! ([`super::phys::PhysMem::compact`] picks the block), each of the OS's pages remapped through
//! the translation API and shot down, as Linux's `migrate_pages` unmaps, copies and remaps.

use super::*;

impl<D: Driver> Os<D> {
    /// A 2 MiB block compaction frees, allocated; None when no block qualifies. Each moved page
    /// is charged as a copied page on the current path. An error only if the driver refuses to
    /// map a moved page's new frame (no driver does for a 4 KiB page).
    ///
    /// The OS moves only what it can remap exactly: 4 KiB data pages mapped once (not fork's
    /// shared frames), and none at all while a design places frames itself (their position is
    /// the design's: RestSeg, SPARTA's partitions) or swap keeps its resident list by frame.
    pub(super) fn compact_2m(&mut self) -> Result<Option<Pfn>> {
        let mut pages: Vec<(u64, u16, u64)> = Vec::new(); // (frame, ASID, virtual page)
        if self.driver.placement().is_none() && !self.cfg.swap.enabled {
            for (asid, p) in self.procs.iter().enumerate() {
                let small = p.truth.pages().into_iter().filter(|&(_, _, size)| size == PageSize::K4);
                pages.extend(small.map(|(va, pa, _)| (pa >> 12, asid as u16, va)));
            }
            pages.sort_unstable();
            // A frame listed twice, or known to fork's sharers, is shared: it stays.
            pages = pages
                .chunk_by(|a, b| a.0 == b.0)
                .filter(|g| g.len() == 1 && !self.sharers.contains_key(&(g[0].0 << 12)))
                .map(|g| g[0])
                .collect();
        }
        let find = |pages: &[(u64, u16, u64)], f: u64| pages.binary_search_by_key(&f, |e| e.0).ok();
        let Some(c) = self.phys.compact(PageSize::M2.order(), &|f| find(&pages, f).is_some()) else {
            return Ok(None);
        };
        self.stats.compactions += 1;
        self.stats.compaction_pages_moved += c.fragmenter_moved + c.moved.len() as u64;
        self.cost.add_to(Func::Copy, Event::Page, c.fragmenter_moved + c.moved.len() as u64);
        // Remap the OS's pages, then one shootdown per address space over what moved (Linux
        // batches the flushes of a migration likewise).
        let mut moved: Vec<(u16, u64)> = Vec::with_capacity(c.moved.len());
        for &(from, to) in &c.moved {
            let Some(i) = find(&pages, from.0) else { continue };
            let (_, asid, va) = pages[i];
            let old = self.api(asid, Func::Remove, |d, s, env| d.remove(s, va, PageSize::K4, env));
            self.procs[asid as usize].truth.remove(va, PageSize::K4);
            let prot = old.map_or(crate::tapi::prot::RW, |o| o.prot);
            self.install(asid, va, to.addr(), PageSize::K4, prot)?;
            moved.push((asid, va));
        }
        moved.sort_unstable();
        for group in moved.chunk_by(|a, b| a.0 == b.0) {
            let (asid, lo, hi) = (group[0].0, group[0].1, group[group.len() - 1].1);
            self.shootdown(asid, lo, hi + PageSize::K4.bytes());
        }
        Ok(Some(c.block))
    }
}
