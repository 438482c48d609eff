//! One RestSeg (its frames and the OS's global TAR) and one process's TAR and SF of it.

use super::*;

/// Counters of one RestSeg.
#[derive(Clone, Debug, Default)]
pub(super) struct SegStats {
    pub(super) rsw: u64,
    pub(super) rsw_hits: u64,
    pub(super) sf_filtered: u64,
    pub(super) tar_lookups: u64,
    pub(super) tar_hits: u64,
    pub(super) sf_lookups: u64,
    pub(super) sf_hits: u64,
    pub(super) fault_allocs: u64,
    pub(super) migration_placements: u64,
    pub(super) evictions: u64,
    pub(super) removals: u64,
    /// Reuse (RSW hits) of pages when they left the RestSeg: 0, 1–5, 6–20, > 20.
    pub(super) reuse_hist: [u64; 4],
}

/// One RestSeg: its frames and the OS's global TAR.
pub(super) struct RestSeg {
    pub(super) base: u64,
    pub(super) size: u64,
    pub(super) page: PageSize,
    pub(super) shift: u32,
    pub(super) sets: u64,
    pub(super) ways: usize,
    pub(super) hash: SetHash,
    /// [`SetHash::divisor`] of the sets, and its log2 when it is a power of two.
    pub(super) tag_div: u64,
    pub(super) tag_shift: Option<u32>,
    /// Global TAR: tag = VPN << 16 | ASID; SRRIP picks the victim.
    pub(super) global: SetAssoc,
    /// RSW hits of the page in each slot since it arrived, saturating: the histogram they feed
    /// ([`RestSeg::record_reuse`]) tells apart only up to "more than 20", so a byte holds them.
    pub(super) reuse: Vec<u8>,
    /// Bits of one set's TAR entries and of one SF counter.
    pub(super) set_bits: u64,
    pub(super) sf_counter_bits: u64,
    pub(super) tar_bytes: u64,
    pub(super) sf_bytes: u64,
    pub(super) stats: SegStats,
}

#[inline(always)]
pub(super) fn gtag(vpn: u64, asid: u16) -> u64 {
    (vpn << 16) | asid as u64
}

impl RestSeg {
    #[inline(always)]
    pub(super) fn set_of(&self, vpn: u64) -> usize {
        self.hash.set(vpn, self.sets) as usize
    }

    /// The TAR tag of `vpn` ([`tar`](super::tar)).
    #[inline(always)]
    pub(super) fn tar_tag(&self, vpn: u64) -> u64 {
        match self.tag_shift {
            Some(s) => vpn >> s,
            None => vpn / self.tag_div,
        }
    }

    /// The VPN whose TAR tag in `set` is `tag`.
    #[inline]
    pub(super) fn tar_vpn(&self, set: usize, tag: u64) -> u64 {
        self.hash.vpn(set as u64, tag, self.sets)
    }

    /// The widest TAR tag of a VPN below 2^`vpn_bits`.
    pub(super) fn max_tar_tag(&self, vpn_bits: u32) -> u64 {
        self.tar_tag(u64::MAX >> (64 - vpn_bits.clamp(1, 64)))
    }

    /// The VPN of this space's page in `slot`, if any.
    #[inline]
    pub(super) fn vpn_at(&self, ss: &SegSpace, slot: usize) -> Option<u64> {
        ss.tar.tag_at(slot).map(|t| self.tar_vpn(slot / self.ways, t))
    }

    /// This space's pages, as (slot, VPN), in slot order.
    pub(super) fn pages<'a>(&'a self, ss: &'a SegSpace) -> impl Iterator<Item = (usize, u64)> + 'a {
        ss.tar.occupied().map(|(slot, t)| (slot, self.tar_vpn(slot / self.ways, t)))
    }

    /// The lowest free way of `set` (the global TAR's), if any.
    pub(super) fn free_way(&self, set: usize) -> Option<usize> {
        (0..self.ways).find(|&w| self.global.tag_at(set, w).is_none())
    }

    /// The page in (`set`, `way`): its ASID and virtual base ([`gtag`] undone), if any.
    pub(super) fn page_at(&self, set: usize, way: usize) -> Option<(u16, u64)> {
        self.global.tag_at(set, way).map(|t| ((t & 0xffff) as u16, (t >> 16) << self.shift))
    }
    #[inline(always)]
    pub(super) fn slot_pa(&self, slot: usize) -> u64 {
        self.base + slot as u64 * self.page.bytes()
    }
    #[inline(always)]
    pub(super) fn contains(&self, pa: u64) -> bool {
        pa >= self.base && pa < self.base + self.size
    }
    /// Byte offsets (first, last) in the TAR of `set`'s entries.
    #[inline(always)]
    pub(super) fn tar_span(&self, set: usize) -> (u64, u64) {
        let first = set as u64 * self.set_bits;
        (first / 8, (first + self.set_bits - 1) / 8)
    }
    #[inline(always)]
    pub(super) fn sf_offset(&self, set: usize) -> u64 {
        set as u64 * self.sf_counter_bits / 8
    }
    pub(super) fn record_reuse(&mut self, slot: usize) {
        let r = std::mem::take(&mut self.reuse[slot]);
        let b = match r {
            0 => 0,
            1..=5 => 1,
            6..=20 => 2,
            _ => 3,
        };
        self.stats.reuse_hist[b] += 1;
        self.stats.removals += 1;
    }
}

/// Pages per region of [`SegSpace::regions`], a power of two: 2 MiB of 4 KiB pages, 1 GiB of
/// 2 MiB pages, so a huge-page range check of a 4 KiB RestSeg reads one count.
pub(super) const REGION_PAGES: u64 = 512;

impl SegSpace {
    /// Counts page `vpn` in (`add`) or out of its region.
    pub(super) fn count_region(&mut self, vpn: u64, add: bool) {
        let r = vpn / REGION_PAGES;
        if add {
            *self.regions.entry(r).or_insert(0) += 1;
        } else {
            let n = self.regions.get_mut(&r).expect("a page leaves a region it was counted in");
            *n -= 1;
            if *n == 0 {
                self.regions.remove(&r);
            }
        }
    }
}

/// One process's TAR and SF of one RestSeg.
pub(super) struct SegSpace {
    /// Per slot: the tag of this process's page there ([`RestSeg::tar_tag`]), if any.
    pub(super) tar: Tar,
    /// Per slot: protection (part of the 10 metadata bits).
    pub(super) prot: Vec<u8>,
    /// Per set: pages of this process in the set.
    pub(super) sf: Vec<u8>,
    /// Pages of this process in the RestSeg per region of [`REGION_PAGES`] consecutive pages
    /// (the OS's range index: a range query skips the regions holding none; regions with no
    /// page have no entry).
    pub(super) regions: IntMap<u32>,
    pub(super) tar_pfn: Pfn,
    pub(super) tar_order: u32,
    pub(super) sf_pfn: Pfn,
    pub(super) sf_order: u32,
}
