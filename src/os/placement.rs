//! Driver-directed placement (Utopia's RestSegs and the like), moving pages between frames, and
//! swapping: the OS side of [`crate::tapi::FramePlacement::place`], `owns_frame` and `take_migrations`.
//! See docs/os-model.md.

use super::Os;
use crate::addr::{bytes_serde, PageSize};
use crate::error::{Error, Result};
use crate::tapi::Driver;
use crate::tapi::Translation;
use crate::tapi::{Event, Evict, EvictTo, Func, MigrationRequest, Path, Placement, TdbEnv};
use crate::workload::MapFlags;

/// Moving a page between frames when the driver chooses where pages live ([`crate::tapi::FramePlacement::place`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MigrationConfig {
    /// Cycles to copy 4 KiB by DMA (Utopia Table 1: 2 full DRAM row reads/writes ≈ 1000 cycles).
    /// Charged to the OS path that moved the page, and the page is locked that long: an access
    /// that translates it meanwhile stalls until the copy ends.
    pub copy_cycles: f64,
}

impl Default for MigrationConfig {
    fn default() -> Self {
        MigrationConfig { copy_cycles: 1000.0 }
    }
}

/// A swap device: when memory runs out (or a restrictive design has no room for a page), pages
/// are written out and faulted back in.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SwapConfig {
    /// Swap at all (off: running out of memory is an error).
    pub enabled: bool,
    /// Cycles per 4 KiB swapped in or out (≈ 20 µs NVMe page I/O at 2.6 GHz; an estimate).
    pub page_cycles: f64,
    /// Free memory the OS keeps by swapping out (a low watermark; page tables come from it).
    #[serde(with = "bytes_serde")]
    pub min_free: u64,
}

impl Default for SwapConfig {
    fn default() -> Self {
        SwapConfig { enabled: false, page_cycles: 52_000.0, min_free: 8 << 20 }
    }
}

/// How many page moves ahead [`Os::prefetch_move`] runs: far enough for its host loads to
/// arrive before the move reads them, near enough that the victim it peeks is still the one.
const MOVE_PREFETCH_AHEAD: usize = 4;

#[inline(always)]
pub(super) fn busy_key(asid: u16, va: u64) -> u64 {
    ((va >> 12) << 16) | asid as u64
}

impl<D: Driver> Os<D> {
    /// Asks the driver where a page of `size` at `va` goes ([`crate::tapi::FramePlacement::place`]), charged to
    /// allocation without a call unless the driver does work.
    pub(super) fn placement(&mut self, asid: u16, va: u64, size: PageSize, flags: MapFlags) -> Placement {
        self.placement_for(MigrationRequest { asid, va, size }, flags, false)
    }

    /// [`Os::placement`] of the page `r`, asking [`crate::tapi::FramePlacement::place_migrating`]
    /// if `migrating` (a move the driver asked for).
    fn placement_for(&mut self, r: MigrationRequest, flags: MapFlags, migrating: bool) -> Placement {
        let prev = self.cost.charge_to(Func::Alloc);
        let p = &mut self.procs[r.asid as usize];
        let env = &mut TdbEnv { phys: &mut self.phys, cost: &mut self.cost };
        let r = match self.driver.placement() {
            Some(d) if migrating => d.place_migrating(&mut p.space, r, flags, env),
            Some(d) => d.place(&mut p.space, r.asid, r.va, r.size, flags, env),
            None => Placement::Buddy,
        };
        self.cost.leave(prev);
        r
    }

    /// A zeroed frame for a new page of `size` at `va`: the one the driver places it in (moving
    /// out the page there first), or a buddy block (swapping pages out first if memory is low).
    /// `None` if the buddy allocator has no block of that order.
    pub(super) fn frame_for(&mut self, asid: u16, va: u64, size: PageSize, flags: MapFlags) -> Result<Option<u64>> {
        match self.placement(asid, va, size, flags) {
            Placement::Buddy if self.cfg.interleave > 0 => {
                self.reclaim(size.order())?;
                let nodes = self.cfg.interleave as u64;
                let node_bytes = self.cfg.memory / nodes;
                let first = (va >> size.shift()) % nodes;
                // The page's node, else the next ones in turn (Linux falls back likewise).
                let pa = (0..nodes).find_map(|k| {
                    let lo = ((first + k) % nodes) * node_bytes;
                    self.phys.alloc_in_range(size.order(), lo >> 12, (lo + node_bytes) >> 12)
                });
                match pa {
                    Some(pfn) => {
                        self.cost.add_to(Func::Alloc, Event::Page, 1);
                        self.zero_data(size.base_pages());
                        Ok(Some(pfn.addr()))
                    }
                    None => Ok(None),
                }
            }
            Placement::Buddy => {
                self.reclaim(size.order())?;
                // 2 MiB pages come from the fairness pool first (os.thp_pool), then the buddy allocator.
                let pfn = if size == PageSize::M2 { self.alloc_huge()? } else { self.alloc_data(size.order()) };
                Ok(pfn.map(|p| p.addr()))
            }
            Placement::Frame { pa, evict } => {
                if let Some(v) = evict {
                    self.evict(v)?;
                }
                self.cost.add_to(Func::Alloc, Event::Page, 1);
                self.zero_data(size.base_pages());
                Ok(Some(pa))
            }
            Placement::InRange { lo, hi } => {
                let pa = self.alloc_in_range(size, lo, hi)?;
                self.cost.add_to(Func::Alloc, Event::Page, 1);
                self.zero_data(size.base_pages());
                Ok(Some(pa))
            }
        }
    }

    /// A block of `size` inside the physical range `[lo, hi)` ([`Placement::InRange`]): from the
    /// range's free blocks, else after swapping out the oldest resident pages of the range (a
    /// partition under pressure swaps; it never spills into another). With swap off, or nothing
    /// of the range left to swap, an out-of-memory error that names the range.
    pub(super) fn alloc_in_range(&mut self, size: PageSize, lo: u64, hi: u64) -> Result<u64> {
        let (lo_pfn, hi_pfn) = (lo >> 12, hi >> 12);
        loop {
            if let Some(pfn) = self.phys.alloc_in_range(size.order(), lo_pfn, hi_pfn) {
                return Ok(pfn.addr());
            }
            let victim = if self.cfg.swap.enabled {
                self.resident
                    .iter()
                    .position(|&(asid, va, sz, pa)| pa >= lo && pa < hi && self.procs[asid as usize].truth.lookup(va) == Some((pa, sz)))
            } else {
                None
            };
            let Some(i) = victim else {
                return Err(Error::OutOfMemory(format!(
                    "no free {size} block in the memory partition [{lo:#x}, {hi:#x}){}",
                    if self.cfg.swap.enabled { " and nothing of it left to swap out" } else { " (os.swap.enabled = false)" }
                )));
            };
            let (asid, va, sz, _) = self.resident.remove(i).expect("index found above");
            self.swap_out(asid, va, sz)?;
        }
    }

    /// Moves `v` out of the frame the driver needs: to a buddy frame, or to swap.
    pub(super) fn evict(&mut self, v: Evict) -> Result<()> {
        let size = v.size;
        if v.to == EvictTo::Buddy {
            self.reclaim(size.order())?;
            if let Some(pfn) = self.phys.alloc(size.order()) {
                self.cost.add_to(Func::Alloc, Event::Page, 1);
                self.relocate(v.asid, v.va, size, pfn.addr())?;
                self.stats.evictions += 1;
                return Ok(());
            }
            if size != PageSize::K4 && self.phys.free_pages() >= size.base_pages() {
                // No free block that large: split the page into 4 KiB pages as it moves out.
                let o = self
                    .api(v.asid, Func::Remove, |d, s, env| d.remove(s, v.va, size, env))
                    .ok_or_else(|| Error::Check(format!("evicting the {size} page at {:#x}: not mapped", v.va)))?;
                self.procs[v.asid as usize].truth.remove(v.va, size);
                let now = self.now;
                let copy = self.cfg.migration.copy_cycles;
                for i in 0..size.base_pages() {
                    let pfn = self.phys.alloc(0).ok_or_else(|| Error::OutOfMemory("4 KiB frame while splitting an evicted page".into()))?;
                    self.cost.add_to(Func::Alloc, Event::Page, 1);
                    let va = v.va + i * 4096;
                    self.install(v.asid, va, pfn.addr(), PageSize::K4, o.prot)?;
                    self.mark_busy(v.asid, va, now + copy * size.base_pages() as f64);
                }
                self.free_frame(o.pa, size)?;
                self.shootdown(v.asid, v.va, v.va + size.bytes());
                self.pending_flush.push((o.pa, size.bytes()));
                self.cost.add_fixed_cycles((copy * size.base_pages() as f64) as u64);
                self.stats.evictions += 1;
                return Ok(());
            }
        }
        if self.cfg.swap.enabled {
            self.swap_out(v.asid, v.va, size)
        } else {
            Err(Error::OutOfMemory(format!("no frame for the {size} page at {:#x} of ASID {} moved out of its frame", v.va, v.asid)))
        }
    }

    /// Moves the page at `va` to the frame at `to`: unmaps it, maps it there, frees the old frame,
    /// shoots the page down, flushes the old frame's lines, charges the copy and locks the page
    /// for the copy's duration.
    fn relocate(&mut self, asid: u16, va: u64, size: PageSize, to: u64) -> Result<()> {
        let o = self
            .api(asid, Func::Remove, |d, s, env| d.remove(s, va, size, env))
            .ok_or_else(|| Error::Check(format!("relocating the {size} page at {va:#x} of ASID {asid}: not mapped")))?;
        // `install` records the new frame in the ground truth over the old one: one lookup of
        // the page's bucket, where removing it first would also shift the buckets after it.
        self.install(asid, va, to, size, o.prot)?;
        self.free_frame(o.pa, size)?;
        self.shootdown(asid, va, va + size.bytes());
        self.pending_flush.push((o.pa, size.bytes()));
        let copy = self.cfg.migration.copy_cycles * size.base_pages() as f64;
        self.cost.add_fixed_cycles(copy as u64);
        self.mark_busy(asid, va, self.now + copy);
        Ok(())
    }

    /// Writes the page at `va` to swap and unmaps it.
    fn swap_out(&mut self, asid: u16, va: u64, size: PageSize) -> Result<()> {
        let o = self
            .api(asid, Func::Remove, |d, s, env| d.remove(s, va, size, env))
            .ok_or_else(|| Error::Check(format!("swapping out the {size} page at {va:#x} of ASID {asid}: not mapped")))?;
        let p = &mut self.procs[asid as usize];
        p.truth.remove(va, size);
        p.swapped.insert(va >> 12, size);
        self.free_frame(o.pa, size)?;
        self.shootdown(asid, va, va + size.bytes());
        self.pending_flush.push((o.pa, size.bytes()));
        self.stats.swap_outs += size.base_pages();
        self.cost.add_fixed_cycles((self.cfg.swap.page_cycles * size.base_pages() as f64) as u64);
        Ok(())
    }

    /// If `va` lies in a swapped-out page, reads it back (counted and charged) and returns true;
    /// the caller then maps it like a new page.
    pub(super) fn swap_in(&mut self, asid: u16, va: u64) -> bool {
        let p = &mut self.procs[asid as usize];
        if p.swapped.is_empty() {
            return false;
        }
        for size in [PageSize::K4, PageSize::M2] {
            let key = size.align_down(va) >> 12;
            if p.swapped.get(&key) == Some(&size) {
                p.swapped.remove(&key);
                self.stats.swap_ins += size.base_pages();
                self.cost.add_fixed_cycles((self.cfg.swap.page_cycles * size.base_pages() as f64) as u64);
                return true;
            }
        }
        false
    }

    /// With swap on, swaps out the oldest-mapped buddy pages (FIFO: the simulated walker sets no
    /// accessed bits for a clock to read) until `min_free` plus a block of `order` is free.
    fn reclaim(&mut self, order: u32) -> Result<()> {
        if !self.cfg.swap.enabled {
            return Ok(());
        }
        let want = self.cfg.swap.min_free / 4096 + (1 << order);
        while self.phys.free_pages() < want {
            let Some((asid, va, size, pa)) = self.resident.pop_front() else { break };
            if self.procs[asid as usize].truth.lookup(va) == Some((pa, size)) {
                self.swap_out(asid, va, size)?;
            }
        }
        Ok(())
    }

    /// Records that the page at `va` of `asid` is being copied until cycle `until`.
    fn mark_busy(&mut self, asid: u16, va: u64, until: f64) {
        self.busy.insert(busy_key(asid, va), until);
        self.busy_until = self.busy_until.max(until);
    }

    /// The cycles an access that just translated `va` (to `t`) at cycle `now` waits because the
    /// OS is still copying that page; counted in the stats.
    #[inline]
    pub fn migration_stall(&mut self, asid: u16, va: u64, t: Translation, now: f64) -> u32 {
        // Every copy has ended by `now` (exact: each entry's end is at most `busy_until`).
        if self.busy.is_empty() || now >= self.busy_until {
            return 0;
        }
        match self.busy.get(busy_key(asid, t.size.align_down(va))) {
            Some(until) if until > now => {
                let c = (until - now).ceil() as u64;
                self.stats.migration_stall_cycles += c;
                self.stats.migration_stalled_accesses += 1;
                c as u32
            }
            _ => 0,
        }
    }

    /// Forgets in-flight work left by setup (shootdowns, flushes, copy locks): no TLB or cache
    /// holds anything yet when the measured run starts.
    pub fn settle(&mut self) {
        self.pending.clear();
        self.pending_flush.clear();
        self.busy.clear();
        self.busy_until = f64::NEG_INFINITY;
    }

    /// Host prefetch of what [`Os::prefetch_move`] will read of `r` a few moves later: the
    /// driver's placement state for it ([`FramePlacement::prefetch_placement`]). A hint.
    fn prefetch_placement(&mut self, r: &MigrationRequest) {
        let Some(p) = self.procs.get(r.asid as usize) else { return };
        if let Some(d) = self.driver.placement() {
            d.prefetch_placement(&p.space, r.va, r.size);
        }
    }

    /// Host prefetch of what moving `r` will read first: the ground-truth buckets and the
    /// driver's entries (its prefetch: radix's leaf) of the page and of the page the driver
    /// would move out for it ([`FramePlacement::victim_hint`]). A hint: changes nothing. Page
    /// moves come in batches (an epoch's requests), so it runs a few moves ahead. The buckets
    /// alone: a move overwrites the page's entry ([`Os::relocate`]), so no removal reads on
    /// past it.
    fn prefetch_move(&mut self, r: &MigrationRequest) {
        let Some(p) = self.procs.get(r.asid as usize) else { return };
        p.truth.prefetch(r.va);
        let _ = self.driver.prefetch(&p.space, r.va);
        let victim = self.driver.placement().and_then(|d| d.victim_hint(&p.space, r.va, r.size));
        if let Some(v) = victim.and_then(|(asid, va)| self.procs.get(asid as usize).map(|q| (q, va))) {
            v.0.truth.prefetch(v.1);
            let _ = self.driver.prefetch(&v.0.space, v.1);
        }
    }

    /// Moves the pages the driver asked for ([`crate::tapi::MigrationPolicy::take_migrations`]) to the frames it
    /// places them in; background work, charged to the promote path.
    pub(super) fn migrate_requested(&mut self) -> Result<()> {
        let reqs = self.driver.migration().map(|m| m.take_migrations()).unwrap_or_default();
        if reqs.is_empty() {
            return Ok(());
        }
        self.cost.set_path(Path::Promote);
        for (k, &r) in reqs.iter().enumerate() {
            if let Some(far) = reqs.get(k + 2 * MOVE_PREFETCH_AHEAD) {
                self.prefetch_placement(far);
            }
            if let Some(next) = reqs.get(k + MOVE_PREFETCH_AHEAD) {
                self.prefetch_move(next);
            }
            let Some(p) = self.procs.get(r.asid as usize) else { continue };
            let Some((pa, size)) = p.truth.lookup(r.va) else { continue };
            if size != r.size || size.align_down(r.va) != r.va {
                continue;
            }
            let flags = self.vma(r.asid, r.va).map(|v| v.flags).unwrap_or_default();
            if let Placement::Frame { pa: to, evict } = self.placement_for(r, flags, true) {
                if to == pa {
                    continue;
                }
                if let Some(v) = evict {
                    self.evict(v)?;
                }
                self.cost.add_to(Func::Alloc, Event::Page, 1);
                self.relocate(r.asid, r.va, size, to)?;
                self.stats.migrations += 1;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::{MapFlags, OsConfig};
    use crate::tapi::flat::Flat;

    /// A moved page stalls the accesses that translate it until its copy ends, and no others;
    /// the end of the latest copy lets every later access skip the lookup (`busy_until`), with
    /// the same answers as the lookup.
    #[test]
    fn migration_stalls_end_with_the_copy() {
        let cfg = OsConfig { memory: 64 << 20, ..OsConfig::default() };
        let mut os = Os::boot(Flat::with_side(None), &cfg, 1).unwrap();
        let a = os.spawn(false).unwrap();
        let base = os.mmap(a, 1 << 20, MapFlags::default()).unwrap();
        for i in 0..4 {
            os.fault(a, base + i * 4096).unwrap();
        }
        let copy = os.cfg.migration.copy_cycles;
        assert!(copy >= 2.0);
        let t = |os: &Os<Flat>, va: u64| os.truth(a, va).unwrap();
        os.now = 1000.0;
        let to = os.phys.alloc(0).unwrap().addr();
        os.relocate(a, base, PageSize::K4, to).unwrap();
        os.now = 1500.0;
        let to = os.phys.alloc(0).unwrap().addr();
        os.relocate(a, base + 4096, PageSize::K4, to).unwrap();
        assert_eq!(os.busy_until, 1500.0 + copy);
        let (t0, t1, t2) = (t(&os, base), t(&os, base + 4096), t(&os, base + 8192));
        assert_eq!(os.migration_stall(a, base + 8, t0, 1000.0 + copy - 2.0), 2);
        assert_eq!(os.migration_stall(a, base + 8, t0, 1000.0 + copy), 0, "the first copy has ended");
        assert_eq!(os.migration_stall(a, base + 8192, t2, 1001.0), 0, "a page not being moved");
        assert_eq!(os.migration_stall(a, base + 4096, t1, 1500.0 + copy - 1.0), 1);
        // From the latest end on, nothing stalls (the shortcut) and the map is not consulted.
        assert_eq!(os.migration_stall(a, base + 4096, t1, 1500.0 + copy), 0);
        assert_eq!((os.stats.migration_stalled_accesses, os.stats.migration_stall_cycles), (2, 3));
        // A tick drops the ended copies and lowers the bound to the copies still running.
        os.now = 1000.0 + copy;
        os.tick(0.0).unwrap();
        assert_eq!((os.busy.len(), os.busy_until), (1, 1500.0 + copy));
        os.now = 1500.0 + copy;
        os.tick(0.0).unwrap();
        assert!(os.busy.is_empty() && os.busy_until == f64::NEG_INFINITY);
    }
}
