//! The OS's ground truth: every mapping it installed, kept independently of any driver's
//! structures, so checked mode can compare each walk and each TLB hit against it.

use crate::addr::PageSize;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A hasher for integer keys: one SplitMix64 round. Deterministic (no per-process random state).
#[derive(Default, Clone, Copy)]
pub struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        crate::rng::mix64(self.0)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 ^= v;
    }
}

/// A `HashMap` keyed by integers with [`MixHasher`].
pub type IntMap<V> = HashMap<u64, V, BuildHasherDefault<MixHasher>>;

/// Mappings of one address space: per size, virtual page number → physical base address.
///
/// Checked mode and the perfect-TLB designs look every access up here, so each size has an
/// open-addressing table of its own ([`VpnTable`]) whose home bucket the access loop prefetches
/// ahead of the access ([`Truth::prefetch`]).
#[derive(Default)]
pub struct Truth {
    maps: [VpnTable; PageSize::COUNT],
}

impl Truth {
    /// Records a mapping.
    pub fn insert(&mut self, va: u64, pa: u64, size: PageSize) {
        self.maps[size.index()].insert(va >> size.shift(), pa);
    }

    /// Makes room for `more` mappings of `size` beyond those held, so that as many inserts do
    /// not grow the table step by step (a hint: changes no mapping).
    pub fn reserve(&mut self, size: PageSize, more: usize) {
        self.maps[size.index()].reserve(more);
    }

    /// Forgets a mapping.
    pub fn remove(&mut self, va: u64, size: PageSize) -> Option<u64> {
        self.maps[size.index()].remove(va >> size.shift())
    }

    /// The page mapping `va`: (physical base, size).
    #[inline]
    pub fn lookup(&self, va: u64) -> Option<(u64, PageSize)> {
        for s in PageSize::ALL {
            if let Some(pa) = self.maps[s.index()].get(va >> s.shift()) {
                return Some((pa, s));
            }
        }
        None
    }

    /// Host prefetch of what [`Truth::lookup`] of `va` reads first: the home bucket of `va`'s
    /// page in the table of every size mapped (a hint: changes nothing).
    #[inline(always)]
    pub fn prefetch(&self, va: u64) {
        for s in PageSize::ALL {
            self.maps[s.index()].prefetch(va >> s.shift());
        }
    }

    /// Every mapping as (virtual base, physical base, size), in no particular order (callers
    /// that depend on the order sort it).
    pub fn pages(&self) -> Vec<(u64, u64, PageSize)> {
        let mut v = Vec::new();
        for s in PageSize::ALL {
            v.extend(self.maps[s.index()].iter().map(|(vpn, pa)| (vpn << s.shift(), pa, s)));
        }
        v
    }

    /// Pages mapped of each size.
    pub fn counts(&self) -> [u64; PageSize::COUNT] {
        std::array::from_fn(|i| self.maps[i].len as u64)
    }
}

/// A bucket of [`VpnTable`]: a virtual page number and its physical base; 16 bytes, four to a
/// 64-byte line.
#[derive(Clone, Copy)]
struct Bucket {
    vpn: u64,
    pa: u64,
}

/// The `vpn` of an empty bucket (no virtual page number reaches it: addresses have 64 bits and
/// pages at least 12 of offset).
const EMPTY: u64 = u64::MAX;

/// Fibonacci hashing: a page number times 2^64 / φ; the top bits pick the bucket, and spread
/// consecutive page numbers evenly over the table.
const MULT: u64 = 0x9E37_79B9_7F4A_7C15;

/// Consecutive page numbers hashed together ([`VpnTable::home`]): 4 buckets of 16 bytes.
const GROUP: u64 = 4;

/// Page number → a `u64` (the truth's physical base; Utopia's PTW counters): linear probing over
/// a power-of-two array of buckets, at most 3/4 full, no allocation but when it doubles. A key
/// lies in its home bucket or in the run of full buckets after it, so a lookup reads the home
/// bucket's line and rarely the next, and [`VpnTable::prefetch`] can bring that line in ahead of
/// time; removal shifts later keys of the run back into the hole instead of leaving tombstones.
#[derive(Default)]
pub struct VpnTable {
    /// Empty, or a power of two of buckets (at least [`VpnTable::MIN`]).
    buckets: Vec<Bucket>,
    /// Keys held.
    len: usize,
    /// 64 − log2(buckets), the shift from the hash to the home bucket's index.
    shift: u32,
}

impl VpnTable {
    /// Buckets of the first allocation.
    const MIN: usize = 16;

    /// The index of `vpn`'s home bucket (the table is not empty). Pages are hashed in aligned
    /// groups of [`GROUP`] consecutive page numbers whose home buckets are consecutive (one host
    /// cache line of buckets), so populating or scanning a range misses the host's caches once
    /// per group rather than once per page.
    #[inline(always)]
    fn home(&self, vpn: u64) -> usize {
        let g = GROUP.trailing_zeros();
        ((((vpn >> g).wrapping_mul(MULT) >> (self.shift + g)) << g) | (vpn & (GROUP - 1))) as usize
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.buckets.len() - 1
    }

    /// `vpn`'s home bucket, where its lookup starts; `None` when nothing is mapped.
    #[inline(always)]
    fn home_bucket(&self, vpn: u64) -> Option<&Bucket> {
        if self.len == 0 {
            return None;
        }
        self.buckets.get(self.home(vpn))
    }

    /// The index of `vpn`'s bucket, if it holds it.
    #[inline]
    fn find(&self, vpn: u64) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let mask = self.mask();
        let mut i = self.home(vpn);
        loop {
            let b = self.buckets[i];
            if b.vpn == vpn {
                return Some(i);
            }
            if b.vpn == EMPTY {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// Host prefetch of `vpn`'s home bucket, where [`VpnTable::get`] starts (a hint: changes
    /// nothing).
    #[inline(always)]
    pub fn prefetch(&self, vpn: u64) {
        if let Some(b) = self.home_bucket(vpn) {
            crate::mem::host_prefetch(b);
        }
    }

    /// The value stored at `vpn`.
    #[inline]
    pub fn get(&self, vpn: u64) -> Option<u64> {
        self.find(vpn).map(|i| self.buckets[i].pa)
    }

    /// Stores `pa` at `vpn`, replacing any earlier value.
    pub fn insert(&mut self, vpn: u64, pa: u64) {
        debug_assert_ne!(vpn, EMPTY);
        if (self.len + 1) * 4 > self.buckets.len() * 3 {
            self.grow();
        }
        let mask = self.mask();
        let mut i = self.home(vpn);
        loop {
            let b = &mut self.buckets[i];
            if b.vpn == vpn {
                b.pa = pa;
                return;
            }
            if b.vpn == EMPTY {
                *b = Bucket { vpn, pa };
                self.len += 1;
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// Room for `more` keys beyond those held: the buckets [`VpnTable::insert`] would have
    /// doubled to by then, allocated at once (one re-placement instead of one per doubling).
    pub fn reserve(&mut self, more: usize) {
        let want = self.len.saturating_add(more);
        let mut n = self.buckets.len().max(Self::MIN);
        while want * 4 > n * 3 {
            n *= 2;
        }
        if n > self.buckets.len() {
            self.resize(n);
        }
    }

    /// Twice the buckets (or the first [`VpnTable::MIN`]), every key re-placed.
    #[cold]
    fn grow(&mut self) {
        self.resize((self.buckets.len() * 2).max(Self::MIN));
    }

    /// `n` buckets (a power of two that holds every key at most 3/4 full), every key re-placed.
    fn resize(&mut self, n: usize) {
        let old = std::mem::replace(&mut self.buckets, vec![Bucket { vpn: EMPTY, pa: 0 }; n]);
        self.shift = 64 - n.trailing_zeros();
        self.len = 0;
        for b in old.into_iter().filter(|b| b.vpn != EMPTY) {
            self.insert(b.vpn, b.pa);
        }
    }

    /// Forgets `vpn`, returning its value.
    pub fn remove(&mut self, vpn: u64) -> Option<u64> {
        let mut hole = self.find(vpn)?;
        let pa = self.buckets[hole].pa;
        let mask = self.mask();
        // Backward shift: a later key of the run moves into the hole unless its home lies in
        // (hole, its bucket], where it would no longer be reachable from its home.
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let b = self.buckets[j];
            if b.vpn == EMPTY {
                break;
            }
            let h = self.home(b.vpn);
            if j.wrapping_sub(h) & mask >= j.wrapping_sub(hole) & mask {
                self.buckets[hole] = b;
                hole = j;
            }
        }
        self.buckets[hole].vpn = EMPTY;
        self.len -= 1;
        Some(pa)
    }

    /// Every (vpn, physical base), in bucket order.
    fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.buckets.iter().filter(|b| b.vpn != EMPTY).map(|b| (b.vpn, b.pa))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Random inserts, replacements and removals (from a small key range, so runs collide and
    /// wrap around the table's end) agree with a `HashMap` at every step.
    #[test]
    fn vpn_table_matches_a_hash_map() {
        let mut rng = Rng::new(7);
        for keys in [8u64, 100, 5000] {
            let (mut t, mut m) = (VpnTable::default(), std::collections::HashMap::new());
            for step in 0..60_000u64 {
                let k = rng.below(keys) * if keys == 5000 { 512 } else { 1 };
                match rng.below(3) {
                    0 | 1 if step < 40_000 => {
                        t.insert(k, step);
                        m.insert(k, step);
                    }
                    _ => assert_eq!(t.remove(k), m.remove(&k), "remove {k}"),
                }
                assert_eq!(t.get(k), m.get(&k).copied(), "get {k}");
                assert_eq!(t.len, m.len());
            }
            for k in 0..keys {
                assert_eq!(t.get(k), m.get(&k).copied());
            }
            let mut all: Vec<_> = t.iter().collect();
            all.sort_unstable();
            let mut want: Vec<_> = m.into_iter().collect();
            want.sort_unstable();
            assert_eq!(all, want);
        }
    }

    /// A reservation allocates the buckets that inserting that many keys would have doubled to,
    /// once: the inserts after it do not grow the table, which holds the same mappings as one
    /// grown step by step (reserving on a table that holds keys re-places them).
    #[test]
    fn reserved_tables_hold_the_same_and_do_not_grow() {
        for (held, more) in [(0u64, 1000u64), (300, 5000), (0, 12), (40, 0)] {
            let (mut grown, mut reserved) = (VpnTable::default(), VpnTable::default());
            for k in 0..held {
                grown.insert(k * 3, k);
                reserved.insert(k * 3, k);
            }
            reserved.reserve(more as usize);
            let buckets = reserved.buckets.len();
            for k in held..held + more {
                grown.insert(k * 3, k);
                reserved.insert(k * 3, k);
            }
            assert_eq!(reserved.buckets.len(), buckets, "no growth after reserving {more}");
            assert_eq!(reserved.buckets.len(), grown.buckets.len(), "the size doubling reaches");
            for k in 0..(held + more) * 3 + 1 {
                assert_eq!(reserved.get(k), grown.get(k), "key {k}");
            }
        }
    }

    /// Lookups find the smallest size mapped at an address, prefetch is harmless on empty and
    /// full tables, and counts follow inserts and removals.
    #[test]
    fn truth_per_size() {
        let mut t = Truth::default();
        t.prefetch(0x1234);
        assert_eq!(t.lookup(0x1234), None);
        t.insert(0x20_0000, 0x4000_0000, PageSize::M2);
        t.insert(0x20_1000, 0x9000, PageSize::K4);
        t.prefetch(0x20_1234);
        assert_eq!(t.lookup(0x20_1234), Some((0x9000, PageSize::K4)));
        assert_eq!(t.lookup(0x20_2234), Some((0x4000_0000, PageSize::M2)));
        assert_eq!(t.counts()[PageSize::M2.index()], 1);
        assert_eq!(t.remove(0x20_1000, PageSize::K4), Some(0x9000));
        assert_eq!(t.remove(0x20_1000, PageSize::K4), None);
        assert_eq!(t.lookup(0x20_1234), Some((0x4000_0000, PageSize::M2)));
        assert_eq!(t.counts().iter().sum::<u64>(), 1);
        let mut p = t.pages();
        p.sort_unstable();
        assert_eq!(p, vec![(0x20_0000, 0x4000_0000, PageSize::M2)]);
    }
}
