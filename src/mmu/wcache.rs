//! A walk cache: a small set-associative array from (ASID, key) to a 64-bit payload.
//! x86 page-walk caches, ECPT's cuckoo walk caches and similar structures are all this shape; the
//! driver decides what the key (a VA prefix) and the payload (a table pointer, a header) mean.

use crate::error::{Error, Result};
use crate::mem::assoc::{check_ways, Replacement, SetAssoc, INVALID_TAG};

/// Geometry and latency of one walk cache.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WalkCacheConfig {
    /// Entries.
    pub entries: u32,
    /// Associativity.
    pub ways: u32,
    /// Lookup latency in cycles.
    pub latency: u32,
}

impl WalkCacheConfig {
    /// A config.
    pub const fn new(entries: u32, ways: u32, latency: u32) -> WalkCacheConfig {
        WalkCacheConfig { entries, ways, latency }
    }

    /// Checks geometry; errors name `key.field`.
    pub fn validate(&self, key: &str) -> Result<()> {
        if self.ways == 0 {
            return Err(Error::config(format!("{key}.ways"), "must be at least 1"));
        }
        check_ways(&format!("{key}.ways"), u64::from(self.ways))?;
        if self.entries == 0 || !self.entries.is_multiple_of(self.ways) || !(self.entries / self.ways).is_power_of_two() {
            return Err(Error::config(
                format!("{key}.entries"),
                format!("must be a positive multiple of ways ({}) giving a power-of-two number of sets", self.ways),
            ));
        }
        Ok(())
    }
}

/// One walk cache. `REHIT` turns on the re-hit shortcut (the `mru` field), for a cache whose key
/// rarely changes between lookups; elsewhere (radix PWCs on a random workload) its compare and
/// bookkeeping cost more than the searches it saves (+6 to +40 instructions per access).
pub struct WalkCache<const REHIT: bool = false> {
    arr: SetAssoc,
    data: Vec<u64>,
    mask: u64,
    /// With `REHIT`, the tag last hit or filled and its slot ([`INVALID_TAG`] if none). It is the
    /// most recent entry of its set (true LRU), so hitting it again changes no replacement state
    /// and [`WalkCache::lookup_slot`] answers without searching: exact, and a lookup of a key that
    /// rarely changes (ECPT's PUD CWC) is then one compare. Anything that removes entries
    /// forgets it.
    mru: u64,
    mru_slot: usize,
    /// Lookup latency in cycles.
    pub latency: u32,
}

#[inline(always)]
fn tag(asid: u16, key: u64) -> u64 {
    (key << 16) | asid as u64
}

impl<const REHIT: bool> WalkCache<REHIT> {
    /// Builds a validated walk cache.
    pub fn new(cfg: &WalkCacheConfig) -> Self {
        let sets = (cfg.entries / cfg.ways) as usize;
        WalkCache {
            arr: SetAssoc::new(sets, cfg.ways as usize, Replacement::Lru),
            data: vec![0; cfg.entries as usize],
            mask: sets as u64 - 1,
            mru: INVALID_TAG,
            mru_slot: 0,
            latency: cfg.latency,
        }
    }

    /// Records the entry in `slot`, tagged `tg`, as just hit or filled (the re-hit shortcut).
    #[inline(always)]
    fn note_mru(&mut self, tg: u64, slot: usize) {
        if REHIT {
            (self.mru, self.mru_slot) = (tg, slot);
        }
    }

    /// Payload cached for `key` of `asid`.
    #[inline(always)]
    pub fn lookup(&mut self, asid: u16, key: u64) -> Option<u64> {
        self.lookup_slot(asid, key).map(|i| self.data[i])
    }

    /// Caches `val` for `key` (replacing the payload if present).
    #[inline]
    pub fn insert(&mut self, asid: u16, key: u64, val: u64) {
        let slot = self.insert_slot(asid, key);
        self.data[slot] = val;
    }

    /// Caches `val` for `key`, which the caller knows is absent: it looked `key` up in this walk
    /// and missed, and nothing filled it since. Exactly [`WalkCache::insert`] (whose search could
    /// only miss, and a miss changes nothing) without the search.
    #[inline]
    pub fn insert_absent(&mut self, asid: u16, key: u64, val: u64) {
        let set = (key & self.mask) as usize;
        let tg = tag(asid, key);
        debug_assert!(self.arr.probe(set, tg).is_none(), "walk cache filled with a present key {key:#x}");
        let way = self.arr.insert(set, tg).0;
        let slot = self.arr.slot(set, way);
        self.note_mru(tg, slot);
        self.data[slot] = val;
    }

    /// Like [`WalkCache::lookup`], but returns the entry's slot (`0..entries`), for a driver that
    /// keeps a payload wider than 64 bits in an array of its own indexed by slot.
    #[inline(always)]
    pub fn lookup_slot(&mut self, asid: u16, key: u64) -> Option<usize> {
        let tg = tag(asid, key);
        if REHIT && tg == self.mru {
            return Some(self.mru_slot);
        }
        let set = (key & self.mask) as usize;
        let way = self.arr.lookup(set, tg)?;
        let slot = self.arr.slot(set, way);
        self.note_mru(tg, slot);
        Some(slot)
    }

    /// Makes `key` present (evicting the set's victim if needed) and returns its slot; the slot's
    /// old contents belong to whatever was evicted, so the caller overwrites its own payload.
    #[inline]
    pub fn insert_slot(&mut self, asid: u16, key: u64) -> usize {
        let set = (key & self.mask) as usize;
        let tg = tag(asid, key);
        let way = match self.arr.lookup(set, tg) {
            Some(w) => w,
            None => self.arr.insert(set, tg).0,
        };
        let slot = self.arr.slot(set, way);
        self.note_mru(tg, slot);
        slot
    }

    /// Drops entries of `asid` whose key lies in `[lo, hi]`.
    pub fn invalidate(&mut self, asid: u16, lo: u64, hi: u64) {
        if hi < lo {
            return;
        }
        self.mru = INVALID_TAG;
        // Fewer keys than sets (a page's entries, on every migration's shootdown) probe the one
        // set each key can sit in instead of scanning them all: the same entries go, and
        // removing them in another order leaves the same state (ranks keep the survivors' order).
        if hi - lo < self.arr.sets() as u64 {
            for key in lo..=hi {
                self.arr.invalidate((key & self.mask) as usize, tag(asid, key));
            }
            return;
        }
        self.arr.invalidate_if(|t| (t & 0xffff) as u16 == asid && (t >> 16) >= lo && (t >> 16) <= hi);
    }

    /// Drops everything.
    pub fn clear(&mut self) {
        self.mru = INVALID_TAG;
        self.arr.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Both caches hold the same tag in every way.
    fn assert_same_tags<const R: bool>(a: &WalkCache<R>, b: &WalkCache<R>) {
        for set in 0..a.arr.sets() {
            for way in 0..a.arr.ways() {
                assert_eq!(a.arr.tag_at(set, way), b.arr.tag_at(set, way), "set {set} way {way}");
            }
        }
    }

    /// A range of fewer keys than sets is invalidated by probing; the result must be exactly the
    /// scan's: the same entries, and the same replacement state afterwards (checked by replaying
    /// the same lookups and fills on both and comparing every way after each step).
    #[test]
    fn probed_invalidation_equals_the_scan() {
        let cfg = WalkCacheConfig::new(32, 4, 1);
        let (mut probed, mut scanned) = (WalkCache::<false>::new(&cfg), WalkCache::<false>::new(&cfg));
        let mut rng = Rng::new(7);
        let mut removed = 0;
        for _ in 0..20_000 {
            let (asid, key) = (rng.below(3) as u16, rng.below(64));
            match rng.below(8) {
                0 => {
                    let hi = key + rng.below(10);
                    probed.invalidate(asid, key, hi);
                    removed += scanned.arr.invalidate_if(|t| (t & 0xffff) as u16 == asid && (t >> 16) >= key && (t >> 16) <= hi);
                }
                1..=3 => assert_eq!(probed.lookup(asid, key), scanned.lookup(asid, key)),
                _ => {
                    let v = rng.next_u64();
                    probed.insert(asid, key, v);
                    scanned.insert(asid, key, v);
                }
            }
            assert_same_tags(&probed, &scanned);
        }
        assert!(removed > 100, "the test invalidated entries: {removed}");
    }

    /// The re-hit shortcut changes nothing: a cache that uses it and one that forgets its most
    /// recent entry before every operation (so always searches) give the same answers and keep
    /// the same entries, payloads and replacement state, under lookups (many of them re-hits),
    /// fills, invalidations and clears.
    #[test]
    fn the_rehit_shortcut_equals_searching() {
        let cfg = WalkCacheConfig::new(16, 4, 1);
        let (mut fast, mut searched) = (WalkCache::<true>::new(&cfg), WalkCache::<true>::new(&cfg));
        let mut rng = Rng::new(5);
        let (mut key, mut shortcuts) = (0, 0);
        for _ in 0..20_000 {
            searched.mru = INVALID_TAG;
            let asid = rng.below(2) as u16;
            if rng.below(3) == 0 {
                key = rng.below(48);
            }
            match rng.below(16) {
                0 => {
                    let hi = key + rng.below(4);
                    fast.invalidate(asid, key, hi);
                    searched.invalidate(asid, key, hi);
                }
                1 if rng.below(50) == 0 => {
                    fast.clear();
                    searched.clear();
                }
                2..=9 => {
                    shortcuts += u32::from(tag(asid, key) == fast.mru);
                    assert_eq!(fast.lookup(asid, key), searched.lookup(asid, key));
                }
                _ => {
                    let v = rng.next_u64();
                    if fast.lookup(asid, key).is_none() {
                        searched.lookup(asid, key);
                        fast.insert_absent(asid, key, v);
                        searched.insert_absent(asid, key, v);
                    } else {
                        searched.lookup(asid, key);
                        fast.insert(asid, key, v);
                        searched.insert(asid, key, v);
                    }
                }
            }
            assert_same_tags(&fast, &searched);
            for set in 0..fast.arr.sets() {
                assert_eq!(fast.arr.state(set), searched.arr.state(set), "replacement state of set {set}");
            }
            assert_eq!(fast.data, searched.data);
        }
        assert!(shortcuts > 2000, "the test re-hit: {shortcuts}");
    }

    /// A fill after a missed lookup, without the search, leaves what `insert` leaves: the same
    /// entries, payloads and replacement state after every step.
    #[test]
    fn insert_absent_after_a_miss_equals_insert() {
        let cfg = WalkCacheConfig::new(64, 4, 1);
        let (mut absent, mut searched) = (WalkCache::<false>::new(&cfg), WalkCache::<false>::new(&cfg));
        let mut rng = Rng::new(11);
        let mut fills = 0;
        for _ in 0..20_000 {
            let (asid, key) = (rng.below(2) as u16, rng.below(256));
            let got = absent.lookup(asid, key);
            assert_eq!(got, searched.lookup(asid, key));
            if got.is_none() {
                let v = rng.next_u64();
                absent.insert_absent(asid, key, v);
                searched.insert(asid, key, v);
                fills += 1;
            }
            assert_same_tags(&absent, &searched);
            assert_eq!(absent.data, searched.data);
        }
        assert!(fills > 1000, "the test filled: {fills}");
    }
}
