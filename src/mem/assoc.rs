//! A generic set-associative tag store with pluggable replacement.
//!
//! Every associative structure in xlate (data caches, TLBs, page-walk caches, POM-TLB, Utopia's RestSeg)
//! is "tags grouped in sets, choose a victim when a set is full". This type holds only the tags and the
//! replacement state. Callers keep their payload (dirty bits, PFNs, page sizes, ...) in their own arrays
//! indexed by [`SetAssoc::slot`], so a lookup scans one contiguous slice of `u64` tags and nothing else.
//!
//! Contract:
//! - everything is allocated in [`SetAssoc::new`]; no method allocates afterwards;
//! - behaviour is deterministic (no randomness anywhere, ties go to the lowest way);
//! - a tag is unique within its set (callers [`SetAssoc::probe`] or [`SetAssoc::lookup`] before
//!   [`SetAssoc::insert`]), and [`INVALID_TAG`] is never a real tag.

use std::fmt;

/// Replacement policy of a [`SetAssoc`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Replacement {
    /// Least recently used: the victim is the valid way touched longest ago.
    Lru,
    /// Static re-reference interval prediction (Jaleel et al., ISCA'10) with 2-bit RRPVs and hit
    /// promotion to 0: a fill is predicted "long" (RRPV 2), so a line used once leaves before lines that
    /// were reused, which makes the policy resistant to scans.
    Srrip,
}

/// The tag value reserved to mark an invalid way. Callers must never store it as a real tag; real tags
/// (line numbers, virtual page numbers) never reach `u64::MAX`.
pub const INVALID_TAG: u64 = u64::MAX;

/// Largest 2-bit RRPV: "distant re-reference", the only value that can be evicted.
const RRPV_DISTANT: u64 = 3;
/// RRPV given to a fill: "long re-reference" (Jaleel et al. ISCA'10: SRRIP inserts at 2^M - 2, here M = 2).
const RRPV_LONG: u64 = 2;

/// A set-associative array of tags with LRU or SRRIP replacement.
#[derive(Clone)]
pub struct SetAssoc {
    sets: usize,
    ways: usize,
    policy: Replacement,
    /// Set-major; each set is `ways` tags ([`INVALID_TAG`] in empty ways) followed by `ways` words of
    /// replacement state. Keeping a set's tags and state adjacent means a miss, which reads both, touches
    /// one contiguous run of host memory instead of two distant ones.
    ///
    /// Replacement state: LRU, the stamp of the last touch (larger = more recent; a 64-bit clock never
    /// wraps in any feasible run); SRRIP, the RRPV 0..=3.
    data: Vec<u64>,
    /// LRU clock, bumped on every touch.
    clock: u64,
}

impl fmt::Debug for SetAssoc {
    // The tag arrays can hold millions of entries; print the shape, not the contents.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SetAssoc").field("sets", &self.sets).field("ways", &self.ways).field("policy", &self.policy).finish()
    }
}

impl SetAssoc {
    /// An empty store of `sets` × `ways`. `sets` should be a power of two so callers can index by masking
    /// (the caller validates its config; this type works with any `sets >= 1`). Panics if `ways` or `sets`
    /// is 0.
    pub fn new(sets: usize, ways: usize, policy: Replacement) -> Self {
        assert!(sets >= 1 && ways >= 1, "a set-associative store needs at least one set and one way (got {sets} × {ways})");
        let n = sets.checked_mul(2 * ways).expect("sets × ways overflows usize");
        let mut s = SetAssoc { sets, ways, policy, data: vec![0; n], clock: 0 };
        s.clear();
        s
    }

    /// Replacement state of an invalid way (irrelevant for victim choice, which takes invalid ways first,
    /// but kept canonical so `clear` and `new` agree).
    #[inline(always)]
    const fn empty_meta(policy: Replacement) -> u64 {
        match policy {
            Replacement::Lru => 0,
            Replacement::Srrip => RRPV_DISTANT,
        }
    }

    /// Number of sets.
    #[inline(always)]
    pub fn sets(&self) -> usize {
        self.sets
    }

    /// Number of ways per set.
    #[inline(always)]
    pub fn ways(&self) -> usize {
        self.ways
    }

    /// Replacement policy.
    #[inline(always)]
    pub fn policy(&self) -> Replacement {
        self.policy
    }

    /// Index of (`set`, `way`) in a flat `sets * ways` array, for callers' parallel payload arrays.
    #[inline(always)]
    pub fn slot(&self, set: usize, way: usize) -> usize {
        set * self.ways + way
    }

    /// Start of `set` in `data`.
    #[inline(always)]
    fn base(&self, set: usize) -> usize {
        set * 2 * self.ways
    }

    /// The tags of the set starting at `base`.
    #[inline(always)]
    fn tags(&self, base: usize) -> &[u64] {
        &self.data[base..base + self.ways]
    }

    /// Marks `way` of the set starting at `base` as just used: LRU makes it most recently used, SRRIP
    /// predicts near re-reference (RRPV 0).
    #[inline(always)]
    fn touch_at(&mut self, base: usize, way: usize) {
        let m = base + self.ways + way;
        match self.policy {
            Replacement::Lru => {
                self.clock += 1;
                self.data[m] = self.clock;
            }
            Replacement::Srrip => self.data[m] = 0,
        }
    }

    /// Looks `tag` up in `set`. On a hit returns the way and updates the replacement state as a use
    /// (LRU: most recently used; SRRIP: RRPV 0).
    #[inline]
    pub fn lookup(&mut self, set: usize, tag: u64) -> Option<usize> {
        debug_assert!(tag != INVALID_TAG, "INVALID_TAG is reserved");
        let base = self.base(set);
        let way = self.tags(base).iter().position(|&t| t == tag)?;
        self.touch_at(base, way);
        Some(way)
    }

    /// Like [`SetAssoc::lookup`] but changes nothing: for checks, invalidations and side lookups that
    /// must not disturb replacement.
    #[inline]
    pub fn probe(&self, set: usize, tag: u64) -> Option<usize> {
        self.tags(self.base(set)).iter().position(|&t| t == tag)
    }

    /// Marks a valid way as used, as a hit would. For callers that found the way with
    /// [`SetAssoc::probe`] (e.g. a multi-size TLB that probes several sets before deciding which hit
    /// counts).
    #[inline]
    pub fn touch(&mut self, set: usize, way: usize) {
        let base = self.base(set);
        debug_assert!(self.data[base + way] != INVALID_TAG, "touching an invalid way");
        self.touch_at(base, way);
    }

    /// Fills `tag` into `set`; the caller guarantees it is not already present. Returns the way used and
    /// the tag evicted from it, if that way held a valid tag.
    ///
    /// Victim choice: the lowest-index invalid way if there is one; otherwise LRU takes the least recently
    /// used way, and SRRIP the lowest-index way with RRPV 3, after ageing every way of the set (adding 1 to
    /// all RRPVs) as many times as needed to produce one. The new tag is LRU-most-recent, or SRRIP RRPV 2.
    #[inline]
    pub fn insert(&mut self, set: usize, tag: u64) -> (usize, Option<u64>) {
        debug_assert!(tag != INVALID_TAG, "INVALID_TAG is reserved");
        debug_assert!(self.probe(set, tag).is_none(), "tag {tag:#x} inserted twice in set {set}");
        let base = self.base(set);
        let way = self.victim(base);
        let old = std::mem::replace(&mut self.data[base + way], tag);
        let m = base + self.ways + way;
        match self.policy {
            Replacement::Lru => {
                self.clock += 1;
                self.data[m] = self.clock;
            }
            Replacement::Srrip => self.data[m] = RRPV_LONG,
        }
        (way, (old != INVALID_TAG).then_some(old))
    }

    /// The way a fill of `set` would use, chosen (and SRRIP state aged) exactly as
    /// [`SetAssoc::insert`] does, without filling it: for owners that must move the victim out
    /// before the new tag goes in with [`SetAssoc::insert_at`] (Utopia's RestSeg sets).
    pub fn choose_way(&mut self, set: usize) -> usize {
        let base = self.base(set);
        self.victim(base)
    }

    /// Fills `tag` into (`set`, `way`) with a fill's replacement state (LRU most recent, SRRIP RRPV
    /// 2); returns the tag it replaced, if valid. The caller guarantees `tag` is not elsewhere in
    /// the set.
    pub fn insert_at(&mut self, set: usize, way: usize, tag: u64) -> Option<u64> {
        debug_assert!(tag != INVALID_TAG, "INVALID_TAG is reserved");
        debug_assert!(self.probe(set, tag).is_none_or(|w| w == way), "tag {tag:#x} inserted twice in set {set}");
        let base = self.base(set);
        let old = std::mem::replace(&mut self.data[base + way], tag);
        let m = base + self.ways + way;
        match self.policy {
            Replacement::Lru => {
                self.clock += 1;
                self.data[m] = self.clock;
            }
            Replacement::Srrip => self.data[m] = RRPV_LONG,
        }
        (old != INVALID_TAG).then_some(old)
    }

    /// Chooses the way to fill in the set starting at slot `base` (and ages SRRIP state if needed).
    #[inline]
    fn victim(&mut self, base: usize) -> usize {
        let ways = self.ways;
        if self.policy == Replacement::Srrip {
            if let Some(w) = self.tags(base).iter().position(|&t| t == INVALID_TAG) {
                return w;
            }
        }
        let meta = &mut self.data[base + ways..base + 2 * ways];
        match self.policy {
            Replacement::Lru => {
                // Invalid ways carry stamp 0 (`empty_meta`) and valid ones stamps >= 1, so this one
                // pass also picks the lowest-index invalid way first.
                // Stamps of valid ways are distinct (one clock tick per touch), so the minimum is unique.
                // Folding the way index into the low bits makes this a branch-free min reduction: a
                // compare-and-branch per way mispredicts on random stamps and dominated the profile.
                let bits = usize::BITS - (ways - 1).leading_zeros();
                meta.iter().enumerate().map(|(w, &m)| (m << bits) | w as u64).min().map_or(0, |k| (k & ((1 << bits) - 1)) as usize)
            }
            Replacement::Srrip => {
                // "Increment all RRPVs and retry until some way reaches 3" ends after (3 - max) rounds with
                // the first way holding the maximum as victim; do those rounds in one pass.
                let max = meta.iter().copied().max().unwrap_or(RRPV_DISTANT);
                let way = meta.iter().position(|&m| m == max).unwrap_or(0);
                let age = RRPV_DISTANT - max;
                if age > 0 {
                    meta.iter_mut().for_each(|m| *m += age);
                }
                way
            }
        }
    }

    /// Removes `tag` from `set` if present; returns whether it was.
    pub fn invalidate(&mut self, set: usize, tag: u64) -> bool {
        match self.probe(set, tag) {
            Some(way) => {
                self.invalidate_way(set, way);
                true
            }
            None => false,
        }
    }

    /// Empties (`set`, `way`); returns the tag it held, if it was valid. Lets callers that keep payload
    /// per slot (dirty bits, counters) read it before dropping the entry.
    #[inline]
    pub fn invalidate_way(&mut self, set: usize, way: usize) -> Option<u64> {
        let base = self.base(set);
        let old = std::mem::replace(&mut self.data[base + way], INVALID_TAG);
        self.data[base + self.ways + way] = Self::empty_meta(self.policy);
        (old != INVALID_TAG).then_some(old)
    }

    /// Removes every valid tag for which `pred` returns true, scanning the whole store (shootdowns,
    /// flushes by ASID or range). Returns how many were removed.
    pub fn invalidate_if(&mut self, mut pred: impl FnMut(u64) -> bool) -> usize {
        let empty = Self::empty_meta(self.policy);
        let ways = self.ways;
        let mut n = 0;
        for set in self.data.chunks_exact_mut(2 * ways) {
            let (tags, meta) = set.split_at_mut(ways);
            for (t, m) in tags.iter_mut().zip(meta.iter_mut()) {
                if *t != INVALID_TAG && pred(*t) {
                    *t = INVALID_TAG;
                    *m = empty;
                    n += 1;
                }
            }
        }
        n
    }

    /// Empties every set.
    pub fn clear(&mut self) {
        let (ways, empty) = (self.ways, Self::empty_meta(self.policy));
        for set in self.data.chunks_exact_mut(2 * ways) {
            set[..ways].fill(INVALID_TAG);
            set[ways..].fill(empty);
        }
        self.clock = 0;
    }

    /// The tag held by (`set`, `way`), if valid.
    #[inline]
    pub fn tag_at(&self, set: usize, way: usize) -> Option<u64> {
        let t = self.data[self.base(set) + way];
        (t != INVALID_TAG).then_some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: u64 = 0xA;
    const B: u64 = 0xB;
    const C: u64 = 0xC;
    const D: u64 = 0xD;
    const E: u64 = 0xE;
    const F: u64 = 0xF;
    const G: u64 = 0x10;
    const H: u64 = 0x11;
    const I: u64 = 0x12;
    const J: u64 = 0x13;

    impl SetAssoc {
        /// Replacement state of `set`'s ways.
        fn state(&self, set: usize) -> &[u64] {
            let b = self.base(set) + self.ways;
            &self.data[b..b + self.ways]
        }
    }

    #[test]
    fn lru_two_ways() {
        // 1 set × 2 ways.
        // fill A -> way 0, fill B -> way 1      recency (old..new): A B
        // hit A                                  B A
        // fill C evicts B (way 1)                A C
        // fill D evicts A (way 0)                C D
        // hit C, fill E evicts D (way 1)         C E
        let mut s = SetAssoc::new(1, 2, Replacement::Lru);
        assert_eq!(s.insert(0, A), (0, None));
        assert_eq!(s.insert(0, B), (1, None));
        assert_eq!(s.lookup(0, A), Some(0));
        assert_eq!(s.insert(0, C), (1, Some(B)));
        assert_eq!(s.insert(0, D), (0, Some(A)));
        assert_eq!(s.lookup(0, C), Some(1));
        assert_eq!(s.insert(0, E), (0, Some(D)));
        assert_eq!(s.lookup(0, A), None);
        assert_eq!(s.tag_at(0, 0), Some(E));
        assert_eq!(s.tag_at(0, 1), Some(C));
    }

    #[test]
    fn lru_four_ways() {
        // 1 set × 4 ways; stamps in brackets.
        // fill A B C D -> ways 0..3              A[1] B[2] C[3] D[4]
        // hit A                                  A[5]
        // fill E evicts B (min stamp 2), way 1   E[6]
        // hit C                                  C[7]
        // fill F evicts D (4), way 3             F[8]
        // fill G evicts A (5), way 0             G[9]
        // fill H evicts E (6), way 1             H[10]
        let mut s = SetAssoc::new(1, 4, Replacement::Lru);
        for (w, t) in [A, B, C, D].into_iter().enumerate() {
            assert_eq!(s.insert(0, t), (w, None));
        }
        assert_eq!(s.lookup(0, A), Some(0));
        assert_eq!(s.insert(0, E), (1, Some(B)));
        assert_eq!(s.lookup(0, C), Some(2));
        assert_eq!(s.insert(0, F), (3, Some(D)));
        assert_eq!(s.insert(0, G), (0, Some(A)));
        assert_eq!(s.insert(0, H), (1, Some(E)));
    }

    #[test]
    fn srrip_four_ways() {
        // 1 set × 4 ways; RRPVs of ways 0..3 after each step.
        // fill A B C D                      [2 2 2 2]
        // hit B                             [2 0 2 2]
        // fill E: no 3, age +1 -> [3 1 3 3], victim way 0 (A), E at 2      [2 1 3 3]
        // fill F: way 2 (C) already 3                                       [2 1 2 3]
        // fill G: way 3 (D)                                                 [2 1 2 2]
        // hit E (way 0)                                                     [0 1 2 2]
        // fill H: age +1 -> [1 2 3 3], victim way 2 (F)                     [1 2 2 3]
        // fill I: way 3 (G)                                                 [1 2 2 2]
        // fill J: age +1 -> [2 3 3 3], victim way 1 (B)                     [2 2 3 3]
        let mut s = SetAssoc::new(1, 4, Replacement::Srrip);
        for (w, t) in [A, B, C, D].into_iter().enumerate() {
            assert_eq!(s.insert(0, t), (w, None));
        }
        assert_eq!(s.state(0), [2, 2, 2, 2]);
        assert_eq!(s.lookup(0, B), Some(1));
        assert_eq!(s.insert(0, E), (0, Some(A)));
        assert_eq!(s.state(0), [2, 1, 3, 3]);
        assert_eq!(s.insert(0, F), (2, Some(C)));
        assert_eq!(s.insert(0, G), (3, Some(D)));
        assert_eq!(s.state(0), [2, 1, 2, 2]);
        assert_eq!(s.lookup(0, E), Some(0));
        assert_eq!(s.insert(0, H), (2, Some(F)));
        assert_eq!(s.state(0), [1, 2, 2, 3]);
        assert_eq!(s.insert(0, I), (3, Some(G)));
        assert_eq!(s.insert(0, J), (1, Some(B)));
        assert_eq!(s.state(0), [2, 2, 3, 3]);
    }

    #[test]
    fn srrip_resists_a_scan() {
        // A reused line survives a stream of single-use lines under SRRIP (its RRPV is 0 while every
        // streaming line arrives at 2), but not under LRU.
        for (policy, survives) in [(Replacement::Srrip, true), (Replacement::Lru, false)] {
            let mut s = SetAssoc::new(1, 4, policy);
            s.insert(0, A);
            s.lookup(0, A);
            for t in 100..106 {
                s.insert(0, t);
            }
            assert_eq!(s.probe(0, A).is_some(), survives, "{policy:?}");
        }
    }

    #[test]
    fn invalid_ways_fill_first_and_probe_changes_nothing() {
        let mut s = SetAssoc::new(2, 2, Replacement::Lru);
        s.insert(1, A);
        s.insert(1, B);
        // Probing A must not make it recent, so C still evicts A (a lookup would have saved it).
        assert_eq!(s.probe(1, A), Some(0));
        assert_eq!(s.insert(1, C), (0, Some(A)));
        assert!(s.invalidate(1, B));
        assert!(!s.invalidate(1, B));
        // The freed way 1 is filled before anything is evicted, even though C (way 0) is the newest.
        assert_eq!(s.insert(1, D), (1, None));
        // Sets are independent.
        assert_eq!(s.probe(0, D), None);
        assert_eq!(s.insert(0, D), (0, None));
        assert_eq!(s.slot(1, 1), 3);
        assert_eq!(s.invalidate_way(1, 1), Some(D));
        assert_eq!(s.invalidate_way(1, 1), None);
    }

    #[test]
    fn touch_promotes_like_a_hit() {
        let mut s = SetAssoc::new(1, 2, Replacement::Lru);
        s.insert(0, A);
        s.insert(0, B);
        let w = s.probe(0, A).unwrap();
        s.touch(0, w);
        assert_eq!(s.insert(0, C), (1, Some(B)));
    }

    #[test]
    fn invalidate_if_and_clear() {
        let mut s = SetAssoc::new(4, 2, Replacement::Srrip);
        for t in 0..8u64 {
            s.insert((t % 4) as usize, t);
        }
        assert_eq!(s.invalidate_if(|t| t % 2 == 0), 4);
        assert_eq!(s.probe(0, 0), None);
        assert_eq!(s.probe(1, 1), Some(0));
        assert_eq!(s.invalidate_if(|_| true), 4);
        s.insert(2, A);
        s.clear();
        assert_eq!(s.tag_at(2, 0), None);
        assert_eq!((s.sets(), s.ways(), s.policy()), (4, 2, Replacement::Srrip));
    }
}
