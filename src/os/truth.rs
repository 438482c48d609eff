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
#[derive(Default)]
pub struct Truth {
    maps: [IntMap<u64>; PageSize::COUNT],
    count: [u64; PageSize::COUNT],
}

impl Truth {
    /// Records a mapping.
    pub fn insert(&mut self, va: u64, pa: u64, size: PageSize) {
        if self.maps[size.index()].insert(va >> size.shift(), pa).is_none() {
            self.count[size.index()] += 1;
        }
    }

    /// Forgets a mapping.
    pub fn remove(&mut self, va: u64, size: PageSize) -> Option<u64> {
        let r = self.maps[size.index()].remove(&(va >> size.shift()));
        if r.is_some() {
            self.count[size.index()] -= 1;
        }
        r
    }

    /// The page mapping `va`: (physical base, size).
    pub fn lookup(&self, va: u64) -> Option<(u64, PageSize)> {
        for s in PageSize::ALL {
            if self.count[s.index()] == 0 {
                continue;
            }
            if let Some(&pa) = self.maps[s.index()].get(&(va >> s.shift())) {
                return Some((pa, s));
            }
        }
        None
    }

    /// Every mapping as (virtual base, physical base, size), in no particular order.
    pub fn pages(&self) -> Vec<(u64, u64, PageSize)> {
        let mut v = Vec::new();
        for s in PageSize::ALL {
            v.extend(self.maps[s.index()].iter().map(|(&vpn, &pa)| (vpn << s.shift(), pa, s)));
        }
        v
    }

    /// Pages mapped of each size.
    pub fn counts(&self) -> [u64; PageSize::COUNT] {
        self.count
    }
}
