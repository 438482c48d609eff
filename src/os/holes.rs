//! Virtual ranges that `munmap` or `mremap` freed, which a later `mmap` reuses, as Linux's
//! `get_unmapped_area` finds the gap an unmapped VMA left: a program that maps, touches and
//! unmaps a buffer in a loop (will-it-scale's `page_fault1`, a large `malloc` freed and
//! allocated again) gets the same addresses back, so translations of a reused address must not
//! survive in any TLB or walk cache (checked mode sees one that does).
//!
//! The invariant: no hole shares a 2 MiB region with a mapped VMA, so a VMA placed in a hole
//! keeps every neighbour out of its regions, as one placed past every VMA does
//! ([`super::Os::mmap`] leaves a gap after each VMA). A freed range is therefore recorded grown
//! to the 2 MiB regions it touches, less the regions the VMAs still mapped beside it touch
//! ([`Holes::free_unmapped`]): unmapping a VMA whole frees its regions, cutting the tail off a
//! VMA frees the regions past the one its new end is in, and the pieces of a VMA cut in several
//! steps join into one hole once the last is gone. A placement keeps the parts of the hole
//! outside the new VMA's 2 MiB regions for later ones.

use super::Vma;
use std::collections::BTreeMap;

/// Free virtual ranges `[start, end)`, in address order, disjoint and not touching.
#[derive(Clone, Debug, Default)]
pub struct Holes(Vec<(u64, u64)>);

/// 2 MiB: placements keep neighbours in different 2 MiB regions.
const REGION: u64 = 2 << 20;

impl Holes {
    /// The lowest start aligned to `align` at which `len` bytes fit in a hole, taken out of it;
    /// `None` if none fits (the caller then maps past every VMA).
    pub fn take(&mut self, len: u64, align: u64) -> Option<u64> {
        let i = self.0.iter().position(|&(s, e)| s.div_ceil(align) * align + len <= e)?;
        let (hs, he) = self.0[i];
        let start = hs.div_ceil(align) * align;
        let left = (hs, start / REGION * REGION);
        let right = ((start + len).div_ceil(REGION) * REGION, he);
        self.0.splice(i..=i, [left, right].into_iter().filter(|&(s, e)| s < e));
        Some(start)
    }

    /// Records `[start, end)`, just unmapped, given the VMAs still mapped (`vmas`, none of which
    /// overlaps it): the 2 MiB regions the range touches, less those a neighbour touches (module
    /// doc). Nothing is recorded if no whole region is free.
    pub fn free_unmapped(&mut self, vmas: &BTreeMap<u64, Vma>, start: u64, end: u64) {
        debug_assert!(start < end);
        // The nearest neighbours are the ones whose regions reach furthest towards the range.
        let below = vmas.range(..start).next_back().map_or(0, |(_, v)| v.end.div_ceil(REGION) * REGION);
        let above = vmas.range(end..).next().map_or(u64::MAX, |(_, v)| v.start / REGION * REGION);
        let lo = (start / REGION * REGION).max(below);
        let hi = end.div_ceil(REGION).saturating_mul(REGION).min(above);
        if lo < hi {
            self.free(lo, hi);
        }
    }

    /// Records `[start, end)` as free, merging it with every hole it overlaps or touches (two
    /// pieces of one `munmap` may grow into the same 2 MiB region).
    pub fn free(&mut self, start: u64, end: u64) {
        debug_assert!(start < end);
        // The holes from the first that ends at or after `start` to the last that starts at or
        // before `end` overlap or touch the range (holes are sorted and disjoint).
        let lo = self.0.partition_point(|&(_, e)| e < start);
        let hi = self.0.partition_point(|&(s, _)| s <= end);
        let (s, e) = if lo < hi { (start.min(self.0[lo].0), end.max(self.0[hi - 1].1)) } else { (start, end) };
        self.0.splice(lo..hi, [(s, e)]);
    }

    /// The holes, in address order.
    #[cfg(test)]
    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::{MapFlags, Os, OsConfig};
    use crate::tapi::flat::Flat;

    /// Through the OS: a VMA unmapped whole gives its addresses to the next mmap that fits (the
    /// old translation gone), cutting a VMA's tail gives the regions past its new end, and a
    /// fork's child reuses its parent's holes.
    #[test]
    fn mmap_gets_back_what_munmap_freed() {
        let (mut os, p) = booted();
        let a = os.mmap(p, 4 * M, MapFlags::default()).unwrap();
        let b = os.mmap(p, 4 * M, MapFlags::default()).unwrap();
        os.fault(p, a).unwrap();
        os.munmap(p, a, 4 * M).unwrap();
        assert!(os.truth(p, a).is_none());
        assert_eq!(os.mmap(p, 4 * M, MapFlags::default()).unwrap(), a, "the freed range, again");
        // Cutting the tail of `b` frees its second region.
        os.fault(p, b + 2 * M + 0x1000).unwrap();
        os.munmap(p, b + 2 * M, 2 * M).unwrap();
        assert!(os.truth(p, b + 2 * M + 0x1000).is_none());
        let c = os.mmap(p, 2 * M, MapFlags::default()).unwrap();
        assert_eq!(c, b + 2 * M, "the cut tail, again");
        assert_eq!(os.vma(p, b).map(|v| v.end), Some(b + 2 * M), "the rest of b stays");
        os.munmap(p, c, 2 * M).unwrap();
        let child = os.fork(p).unwrap();
        assert_eq!(os.mmap(child, 2 * M, MapFlags::default()).unwrap(), c, "the child has the parent's hole");
    }

    /// A VMA cut in the middle by less than a region frees nothing (both pieces touch the cut's
    /// region); once both pieces are gone the whole range is one hole again. `mremap` frees the
    /// range it moved a VMA from.
    #[test]
    fn pieces_of_a_cut_vma_join_and_mremap_frees_its_old_range() {
        let (mut os, p) = booted();
        let a = os.mmap(p, 8 * M, MapFlags::default()).unwrap();
        let _guard = os.mmap(p, 2 * M, MapFlags::default()).unwrap();
        os.munmap(p, a + 3 * M, M / 2).unwrap();
        let holes = |os: &Os<Flat>| os.procs[p as usize].holes.ranges().to_vec();
        assert!(holes(&os).is_empty(), "{:x?}", holes(&os));
        os.munmap(p, a + 3 * M + M / 2, 4 * M + M / 2).unwrap();
        assert_eq!(holes(&os), [(a + 4 * M, a + 8 * M)], "the regions past the first piece's");
        os.munmap(p, a, 3 * M).unwrap();
        assert_eq!(holes(&os), [(a, a + 8 * M)], "joined");
        let b = os.mmap(p, 6 * M, MapFlags::default()).unwrap();
        assert_eq!(b, a);
        os.fault(p, b).unwrap();
        let moved = os.mremap(p, b).unwrap();
        assert_ne!(moved, b);
        assert!(os.truth(p, b).is_none() && os.truth(p, moved).is_some());
        assert_eq!(holes(&os), [(a, a + 8 * M)], "the moved VMA's range is free again");
        assert_eq!(os.mmap(p, 8 * M, MapFlags::default()).unwrap(), a);
    }

    const M: u64 = 1 << 20;

    /// A 64 MiB OS with one process.
    fn booted() -> (Os<Flat>, u16) {
        let mut os = Os::boot(Flat::with_side(None), &OsConfig { memory: 64 << 20, ..OsConfig::default() }, 1).unwrap();
        let p = os.spawn(false).unwrap();
        (os, p)
    }

    #[test]
    fn a_hole_of_the_same_size_is_reused_whole() {
        let mut h = Holes::default();
        h.free(64 * M, 192 * M);
        assert_eq!(h.take(128 * M, 2 * M), Some(64 * M));
        assert!(h.ranges().is_empty());
        assert_eq!(h.take(4096, 4096), None);
    }

    #[test]
    fn a_smaller_placement_keeps_the_rest_out_of_its_regions() {
        let mut h = Holes::default();
        h.free(64 * M, 80 * M);
        // 4 KiB at the start: the rest of its 2 MiB region is not offered again.
        assert_eq!(h.take(8192, 4096), Some(64 * M));
        assert_eq!(h.ranges(), &[(66 * M, 80 * M)]);
        // A 2 MiB-aligned placement that does not fit the first hole's remainder goes nowhere.
        assert_eq!(h.take(16 * M, 2 * M), None);
        assert_eq!(h.take(4 * M, 2 * M), Some(66 * M));
        assert_eq!(h.ranges(), &[(70 * M, 80 * M)]);
        // An unaligned hole start rounds up; the part below stays if it is in earlier regions.
        let mut h = Holes::default();
        h.free(64 * M + 4096, 72 * M);
        assert_eq!(h.take(2 * M, 2 * M), Some(66 * M));
        assert_eq!(h.ranges(), &[(64 * M + 4096, 66 * M), (68 * M, 72 * M)]);
    }

    /// The freed range grows to its regions, less a neighbour's; ranges that meet in one region
    /// merge.
    #[test]
    fn a_freed_range_is_recorded_by_whole_regions() {
        let vma = |start, end| (start, Vma { start, end, flags: MapFlags::default(), prot: crate::tapi::prot::RW });
        let mut h = Holes::default();
        // A neighbour ending 1 MiB into the region below, another starting in the region above.
        let vmas = BTreeMap::from([vma(60 * M, 65 * M), vma(77 * M, 90 * M)]);
        h.free_unmapped(&vmas, 65 * M, 70 * M + 4096);
        assert_eq!(h.ranges(), &[(66 * M, 72 * M)]);
        h.free_unmapped(&vmas, 70 * M + 4096, 77 * M);
        assert_eq!(h.ranges(), &[(66 * M, 76 * M)], "overlapping in a region: merged");
        h.free_unmapped(&vmas, 76 * M + 8192, 76 * M + 12288);
        assert_eq!(h.ranges(), &[(66 * M, 76 * M)], "inside a neighbour's region: nothing");
    }

    #[test]
    fn touching_holes_merge_and_the_lowest_fit_wins() {
        let mut h = Holes::default();
        h.free(100 * M, 110 * M);
        h.free(64 * M, 70 * M);
        h.free(70 * M, 80 * M);
        assert_eq!(h.ranges(), &[(64 * M, 80 * M), (100 * M, 110 * M)]);
        h.free(80 * M, 100 * M);
        assert_eq!(h.ranges(), &[(64 * M, 110 * M)]);
        let mut h = Holes::default();
        h.free(200 * M, 300 * M);
        h.free(64 * M, 66 * M);
        assert_eq!(h.take(4 * M, 2 * M), Some(200 * M));
        assert_eq!(h.take(4096, 4096), Some(64 * M));
    }
}
