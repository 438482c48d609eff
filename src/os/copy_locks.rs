//! Pages locked while the OS copies them (page migration), and the cycle each copy ends: what an
//! access that translates such a page waits for ([`super::Os::migration_stall`]).
//!
//! An epoch's migrations lock tens of thousands of pages at once (Utopia on a random workload),
//! and nearly every copy ends before any access asks: a 4 KiB copy lasts 1000 cycles, a few
//! accesses. A hash map paid a host cache miss per lock for lookups that mostly never came. Locks
//! are appended to a vector instead. The first lookups after a change scan it; a page that keeps
//! being asked about (a long copy, a slow workload) gets it sorted once, after which lookups
//! binary-search. As in a map, the lock taken last on a page is the one that counts.

/// Lookups after a change that scan the locks before they are sorted.
const SCANS_BEFORE_SORT: u32 = 4;

/// Pages being copied: (page key, cycle the copy ends), in the order the locks were taken.
#[derive(Clone, Debug, Default)]
pub struct CopyLocks {
    locks: Vec<(u64, f64)>,
    /// `locks` is sorted by key (stably: a page's locks stay in the order taken).
    sorted: bool,
    /// Lookups since the last change.
    scans: u32,
}

impl CopyLocks {
    /// Locks page `key` until cycle `until` (replacing any earlier lock of it).
    pub fn insert(&mut self, key: u64, until: f64) {
        self.locks.push((key, until));
        self.sorted = false;
        self.scans = 0;
    }

    /// The cycle the copy of page `key` ends, if it is locked (its latest lock).
    pub fn get(&mut self, key: u64) -> Option<f64> {
        if !self.sorted {
            if self.scans < SCANS_BEFORE_SORT {
                self.scans += 1;
                return self.locks.iter().rev().find(|l| l.0 == key).map(|l| l.1);
            }
            self.locks.sort_by_key(|l| l.0);
            self.sorted = true;
        }
        let i = self.locks.partition_point(|l| l.0 <= key);
        (i > 0 && self.locks[i - 1].0 == key).then(|| self.locks[i - 1].1)
    }

    /// Drops every page's lock that ends at or before `now` (a page's latest lock decides).
    pub fn retain_after(&mut self, now: f64) {
        if self.locks.iter().all(|l| l.1 <= now) {
            self.clear();
            return;
        }
        // The latest lock of each page: stable sort, then the last of each key's run.
        self.locks.sort_by_key(|l| l.0);
        let mut kept: Vec<(u64, f64)> = Vec::with_capacity(self.locks.len());
        for &l in &self.locks {
            match kept.last_mut() {
                Some(last) if last.0 == l.0 => *last = l,
                _ => kept.push(l),
            }
        }
        kept.retain(|l| l.1 > now);
        self.locks = kept;
        self.sorted = true;
        self.scans = 0;
    }

    /// Drops every lock.
    pub fn clear(&mut self) {
        self.locks.clear();
        self.sorted = true;
        self.scans = 0;
    }

    /// Whether no page is locked.
    pub fn is_empty(&self) -> bool {
        self.locks.is_empty()
    }

    /// Locks held (a page locked twice counts once only after [`CopyLocks::retain_after`]).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.locks.len()
    }

    /// The latest end of any lock, or −∞ with none.
    pub fn last_end(&self) -> f64 {
        self.locks.iter().map(|l| l.1).fold(f64::NEG_INFINITY, f64::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::truth::IntMap;

    /// Against a hash map (what it replaces): random locks, re-locks of a page with an earlier
    /// or later end, lookups before and after the sort, and expiries.
    #[test]
    fn answers_as_a_map_does() {
        let mut rng = crate::rng::Rng::new(3);
        let (mut locks, mut map) = (CopyLocks::default(), IntMap::<f64>::default());
        let mut now = 0.0;
        for round in 0..200 {
            for _ in 0..rng.below(300) {
                let (key, until) = (rng.below(500), now + rng.below(2000) as f64);
                locks.insert(key, until);
                map.insert(key, until);
            }
            for _ in 0..rng.below(20) {
                let key = rng.below(500);
                assert_eq!(locks.get(key), map.get(&key).copied(), "round {round}, page {key}");
            }
            now += rng.below(1500) as f64;
            if round % 3 == 0 {
                locks.retain_after(now);
                map.retain(|_, u| *u > now);
                assert_eq!(locks.len(), map.len());
                assert_eq!(locks.last_end(), map.values().copied().fold(f64::NEG_INFINITY, f64::max));
            }
        }
        locks.clear();
        assert!(locks.is_empty() && locks.get(1).is_none());
    }
}
