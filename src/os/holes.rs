//! Virtual ranges that `munmap` freed, which a later `mmap` reuses, as Linux's
//! `get_unmapped_area` finds the gap an unmapped VMA left: a program that maps, touches and
//! unmaps a buffer in a loop (will-it-scale's `page_fault1`, a large `malloc` freed and
//! allocated again) gets the same addresses back, so translations of a reused address must not
//! survive in any TLB or walk cache (checked mode sees one that does).
//!
//! A hole is recorded only for a VMA unmapped whole: that VMA kept every neighbour out of its
//! 2 MiB regions ([`super::Os::mmap`] leaves a gap after each VMA), so any VMA placed inside its
//! range does too. A partial unmap leaves no hole (its addresses are not reused). A placement
//! keeps the parts of the hole outside the new VMA's 2 MiB regions for later ones.

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

    /// Records `[start, end)`, the range of a VMA unmapped whole, merging it with a hole it
    /// touches.
    pub fn free(&mut self, start: u64, end: u64) {
        debug_assert!(start < end);
        let i = self.0.partition_point(|&(s, _)| s < start);
        debug_assert!(i == 0 || self.0[i - 1].1 <= start, "hole [{start:#x}, {end:#x}) overlaps another");
        debug_assert!(i == self.0.len() || end <= self.0[i].0, "hole [{start:#x}, {end:#x}) overlaps another");
        let (mut s, mut e) = (start, end);
        let mut lo = i;
        if i > 0 && self.0[i - 1].1 == start {
            lo = i - 1;
            s = self.0[lo].0;
        }
        let mut hi = i;
        if i < self.0.len() && self.0[i].0 == end {
            e = self.0[i].1;
            hi = i + 1;
        }
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
    /// old translation gone), a partial unmap gives none, and a fork's child reuses its
    /// parent's holes.
    #[test]
    fn mmap_gets_back_what_munmap_freed_whole() {
        let mut os = Os::boot(Flat::with_side(None), &OsConfig { memory: 64 << 20, ..OsConfig::default() }, 1).unwrap();
        let p = os.spawn(false).unwrap();
        let a = os.mmap(p, 4 * M, MapFlags::default()).unwrap();
        let b = os.mmap(p, 4 * M, MapFlags::default()).unwrap();
        os.fault(p, a).unwrap();
        os.munmap(p, a, 4 * M).unwrap();
        assert!(os.truth(p, a).is_none());
        assert_eq!(os.mmap(p, 4 * M, MapFlags::default()).unwrap(), a, "the freed range, again");
        // Cutting the tail of `b` frees nothing for reuse: the next mapping goes past every VMA.
        os.munmap(p, b + 2 * M, 2 * M).unwrap();
        let c = os.mmap(p, 2 * M, MapFlags::default()).unwrap();
        assert!(c >= b + 4 * M, "{c:#x} past {b:#x}");
        os.munmap(p, c, 2 * M).unwrap();
        let child = os.fork(p).unwrap();
        assert_eq!(os.mmap(child, 2 * M, MapFlags::default()).unwrap(), c, "the child has the parent's hole");
    }

    const M: u64 = 1 << 20;

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
