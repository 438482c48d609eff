//! One cache level: a [`SetAssoc`] of 64-byte lines plus per-line flags (dirty, translation).
//!
//! A cache here is write-back and write-allocate. It keeps its own demand counters split by
//! data/translation, and keeps the counts of valid and translation-tagged lines up to date on every
//! fill and eviction, so the epoch sampler reads them in O(1) instead of scanning.
//!
//! The tag stored for a line (`paddr >> 6`) is the line without its set bits (`line >> set bits`),
//! and an evicted line is rebuilt from its tag and set. The hierarchy's caches store it in a `u32`
//! ([`Cache`]'s default), which addresses 2^32 × sets lines (a 64-set L1: 16 TiB of physical
//! memory; [`Cache::check_reach`] refuses a machine beyond that) and puts a 16-way set's tags in
//! one host cache line; caches of other line numbers (an accelerator's virtual lines carry the
//! ASID in bits 48 and up) use `Cache<u64>`.

use super::assoc::{check_ways, Replacement, SetAssoc, Tag, INVALID_TAG};
use crate::addr::LINE_BYTES;
use crate::error::{Error, Result};

/// Geometry, latency and policy of one cache level (a `[mem.l1d]`-style config table).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    /// Capacity in bytes (`"32K"`, `"2M"` or an integer).
    #[serde(with = "crate::addr::bytes_serde")]
    pub size: u64,
    /// Associativity.
    pub ways: u32,
    /// Access latency of this level in core cycles (tag + data, as papers quote it).
    pub latency: u32,
    /// Replacement policy.
    pub policy: Replacement,
}

impl CacheConfig {
    /// Checks the geometry; `key` is the config path of this table (`"mem.l2"`), used to name the
    /// offending key in the error.
    pub fn validate(&self, key: &str) -> Result<()> {
        if self.ways == 0 {
            return Err(Error::config(format!("{key}.ways"), "must be at least 1 (got 0)"));
        }
        check_ways(&format!("{key}.ways"), u64::from(self.ways))?;
        let way_bytes = LINE_BYTES * u64::from(self.ways);
        if self.size == 0 || !self.size.is_multiple_of(way_bytes) {
            return Err(Error::config(
                format!("{key}.size"),
                format!("must be a positive multiple of 64*ways = {way_bytes} bytes (got {})", self.size),
            ));
        }
        let sets = self.size / way_bytes;
        if !sets.is_power_of_two() {
            return Err(Error::config(
                format!("{key}.size"),
                format!("size/(64*ways) = {sets} sets is not a power of two (sets are indexed by address bits)"),
            ));
        }
        if usize::try_from(self.size / LINE_BYTES).is_err() {
            return Err(Error::config(format!("{key}.size"), format!("{} bytes is too large for this host", self.size)));
        }
        if self.latency == 0 {
            return Err(Error::config(format!("{key}.latency"), "must be at least 1 cycle (got 0)"));
        }
        Ok(())
    }

    /// Number of sets (`size / (64 * ways)`); meaningful once [`CacheConfig::validate`] passed.
    pub fn sets(&self) -> u64 {
        self.size / (LINE_BYTES * u64::from(self.ways.max(1)))
    }
}

/// A dirty line pushed out of a cache, to be written into the next level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Writeback {
    /// Line number (`paddr >> 6`).
    pub line: u64,
    /// Whether the line held translation structures (its tag travels with it).
    pub translation: bool,
}

/// Outcome of [`Cache::access`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheResult {
    /// The line was present.
    pub hit: bool,
    /// On a miss, the dirty line the fill evicted, if any.
    pub writeback: Option<Writeback>,
}

/// Demand-access counters of one cache level (or of one level summed over cores).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CacheStats {
    /// Data references looked up.
    pub data_accesses: u64,
    /// Data references that hit.
    pub data_hits: u64,
    /// Data references that missed.
    pub data_misses: u64,
    /// Translation-structure references (page-table walks, RestSeg tags, POM-TLB, ...) looked up.
    pub translation_accesses: u64,
    /// Translation references that hit.
    pub translation_hits: u64,
    /// Translation references that missed.
    pub translation_misses: u64,
    /// Dirty lines evicted and written to the next level.
    pub writebacks: u64,
}

impl CacheStats {
    /// Adds `other` into `self` (summing private caches over cores).
    pub fn add(&mut self, other: &CacheStats) {
        self.data_accesses += other.data_accesses;
        self.data_hits += other.data_hits;
        self.data_misses += other.data_misses;
        self.translation_accesses += other.translation_accesses;
        self.translation_hits += other.translation_hits;
        self.translation_misses += other.translation_misses;
        self.writebacks += other.writebacks;
    }
}

/// Line flag: modified since it was filled.
const DIRTY: u8 = 1;
/// Line flag: filled by a translation-structure reference.
const TRANSLATION: u8 = 2;
/// Line flag: brought in by a prefetch and not yet hit by a demand access ([`Cache::access_tracked`]).
const PREFETCHED: u8 = 4;

/// One cache level, storing tags as `T` (module doc).
#[derive(Clone, Debug)]
pub struct Cache<T: Tag = u32> {
    /// The tags, with `DIRTY | TRANSLATION` in each way's byte: a line's "slot" below is the
    /// index of that byte ([`SetAssoc::byte_index`]).
    tags: SetAssoc<T>,
    set_mask: u64,
    /// log2(sets): a line's tag is `line >> set_bits`.
    set_bits: u32,
    /// LRU caches only: the line last hit or filled and its slot ([`INVALID_TAG`] if none or
    /// SRRIP). It is the most recent line of its set, so hitting it again changes no replacement
    /// state and [`Cache::lookup`] counts it without searching (exact; a sequential workload
    /// re-hits the same L1 line several times in a row).
    mru: u64,
    mru_slot: usize,
    /// Whether the re-hit shortcut applies: an LRU cache, in a hierarchy without prefetchers.
    lru: bool,
    latency: u32,
    valid: u64,
    translation: u64,
    /// Demand accesses and hits, indexed by `translation as usize` (0 = data, 1 = translation) so the
    /// hot path adds without branching.
    accesses: [u64; 2],
    hits: [u64; 2],
    writebacks: u64,
}

impl Cache<u32> {
    /// Refuses a cache whose `u32` tags cannot address every line of `memory` bytes of physical
    /// memory (`key` names the cache's config table in the error).
    pub fn check_reach(cfg: &CacheConfig, key: &str, memory: u64) -> Result<()> {
        let lines = memory.div_ceil(LINE_BYTES);
        let reach = u64::from(u32::MAX).saturating_mul(cfg.sets());
        if lines > reach {
            return Err(Error::config(
                key.to_string(),
                format!(
                    "with {} sets the simulator's 32-bit cache tags address physical memory below {}; the machine has {}",
                    cfg.sets(),
                    crate::addr::fmt_bytes((1u64 << 32).saturating_mul(cfg.sets()).saturating_mul(LINE_BYTES)),
                    crate::addr::fmt_bytes(memory)
                ),
            ));
        }
        Ok(())
    }
}

impl<T: Tag> Cache<T> {
    /// An empty cache. `cfg` must have passed [`CacheConfig::validate`] (panics on a zero geometry).
    pub fn new(cfg: &CacheConfig) -> Self {
        let sets = cfg.sets() as usize;
        let ways = cfg.ways as usize;
        debug_assert!(sets.is_power_of_two(), "unvalidated cache config: {cfg:?}");
        Cache {
            tags: SetAssoc::with_way_bytes(sets, ways, cfg.policy),
            set_mask: sets as u64 - 1,
            set_bits: sets.trailing_zeros(),
            mru: INVALID_TAG,
            mru_slot: 0,
            lru: cfg.policy == Replacement::Lru,
            latency: cfg.latency,
            valid: 0,
            translation: 0,
            accesses: [0; 2],
            hits: [0; 2],
            writebacks: 0,
        }
    }

    /// Access latency in cycles.
    #[inline(always)]
    pub fn latency(&self) -> u32 {
        self.latency
    }

    /// Number of sets.
    #[inline]
    pub fn sets(&self) -> usize {
        self.tags.sets()
    }

    /// Capacity in lines.
    pub fn capacity_lines(&self) -> u64 {
        (self.tags.sets() * self.tags.ways()) as u64
    }

    #[inline(always)]
    fn set_of(&self, line: u64) -> usize {
        (line & self.set_mask) as usize
    }

    /// The tag stored for `line`. A line beyond the tags' reach is a bug of the caller (the
    /// hierarchy's config is checked by [`Cache::check_reach`]); it must not alias another line.
    #[inline(always)]
    fn tag_of(&self, line: u64) -> T {
        match T::narrow(line >> self.set_bits) {
            Some(t) => t,
            None => panic!("line {line:#x} is beyond this cache's tag reach"),
        }
    }

    /// The line that `tag` stands for in `set`.
    #[inline(always)]
    fn line_of(&self, set: usize, tag: T) -> u64 {
        tag.widen() << self.set_bits | set as u64
    }

    /// Demand access to `line` (`paddr >> 6`): looks it up and, on a miss, fills it (the caller fetches
    /// it from below). A write marks the line dirty. A fill tags the line as translation or data by
    /// `translation`; a hit leaves the tag as it was.
    ///
    /// The same as [`Cache::lookup`] then, on a miss, [`Cache::fill`] (a fill dirty if `write`),
    /// with one search of the set for both: a hierarchy that holds each level's write-back until
    /// the levels below have been looked up and filled ([`super::MemHierarchy::access`]) leaves
    /// the same state as one that looks every level up first and fills afterwards.
    #[inline(always)]
    pub fn access(&mut self, line: u64, translation: bool, write: bool) -> CacheResult {
        self.access_impl::<false>(line, translation, write).0
    }

    /// [`Cache::access`] in a hierarchy with prefetchers: also says whether a hit was the first
    /// demand hit on a line a prefetch brought in (and clears that line's mark). Such a
    /// hierarchy turns the re-hit shortcut off ([`Cache::without_rehit_shortcut`]), which would
    /// skip the mark.
    #[inline(always)]
    pub fn access_tracked(&mut self, line: u64, translation: bool, write: bool) -> (CacheResult, bool) {
        self.access_impl::<true>(line, translation, write)
    }

    #[inline(always)]
    fn access_impl<const TRACK: bool>(&mut self, line: u64, translation: bool, write: bool) -> (CacheResult, bool) {
        if self.rehit(line, translation, write) {
            return (CacheResult { hit: true, writeback: None }, false);
        }
        let t = translation as usize;
        self.accesses[t] += 1;
        let set = self.set_of(line);
        let (way, hit, evicted) = self.tags.lookup_or_insert(set, self.tag_of(line));
        let slot = self.tags.byte_index(set, way);
        self.note_mru(line, slot);
        if hit {
            self.hits[t] += 1;
            let mut prefetched = false;
            if TRACK {
                let f = self.tags.byte_mut(slot);
                prefetched = *f & PREFETCHED != 0;
                *f &= !PREFETCHED;
            }
            if write {
                *self.tags.byte_mut(slot) |= DIRTY;
            }
            return (CacheResult { hit: true, writeback: None }, prefetched);
        }
        (CacheResult { hit: false, writeback: self.filled(set, slot, evicted, translation, write) }, false)
    }

    /// A prefetch of `line` reaching this level: not a demand access (no demand counter moves). A
    /// present line is promoted as on a hit; an absent one is filled clean, as data, marked as
    /// prefetched. Returns whether it was present and the fill's dirty victim.
    #[inline]
    pub fn prefetch_access(&mut self, line: u64) -> CacheResult {
        let set = self.set_of(line);
        let (way, hit, evicted) = self.tags.lookup_or_insert(set, self.tag_of(line));
        let slot = self.tags.byte_index(set, way);
        self.note_mru(line, slot);
        if hit {
            return CacheResult { hit: true, writeback: None };
        }
        let writeback = self.filled(set, slot, evicted, false, false);
        *self.tags.byte_mut(slot) |= PREFETCHED;
        CacheResult { hit: false, writeback }
    }

    /// This cache with the re-hit shortcut off: every access searches its set. A hierarchy with
    /// prefetchers needs it so (they train on hits, and a hit must see a line's prefetch mark).
    pub fn without_rehit_shortcut(mut self) -> Self {
        self.lru = false;
        self.mru = INVALID_TAG;
        self
    }

    /// The lookup half of [`Cache::access`]: counts a demand access, and on a hit updates replacement
    /// state and sets dirty if `write`. Does not fill on a miss: with [`Cache::fill`] it is the
    /// definition `access` is tested against (`mem::tests::one_step_levels_equal_lookups_then_fills`).
    #[inline(always)]
    pub fn lookup(&mut self, line: u64, translation: bool, write: bool) -> bool {
        if self.rehit(line, translation, write) {
            return true;
        }
        let t = translation as usize;
        self.accesses[t] += 1;
        let set = self.set_of(line);
        match self.tags.lookup(set, self.tag_of(line)) {
            Some(way) => {
                self.hits[t] += 1;
                let slot = self.tags.byte_index(set, way);
                self.note_mru(line, slot);
                if write {
                    *self.tags.byte_mut(slot) |= DIRTY;
                }
                true
            }
            None => false,
        }
    }

    /// The re-hit shortcut alone: if `line` is the most recent line of its set (the last hit or
    /// fill, LRU only), counts the demand access and its hit and sets dirty if `write`, as a
    /// lookup would (a hit on the most recent way changes no replacement state). Returns whether
    /// it did; `false` changes nothing. Small enough to inline into every caller, so a re-hit
    /// costs no call where the caller handles a miss out of line
    /// ([`super::MemHierarchy::access_hot`]).
    #[inline(always)]
    pub fn rehit(&mut self, line: u64, translation: bool, write: bool) -> bool {
        if line != self.mru {
            return false;
        }
        let t = translation as usize;
        self.accesses[t] += 1;
        self.hits[t] += 1;
        *self.tags.byte_mut(self.mru_slot) |= if write { DIRTY } else { 0 };
        true
    }

    /// The line the re-hit shortcut answers for (the last hit or fill, LRU only); `INVALID_TAG`
    /// when none.
    #[inline(always)]
    pub fn mru_line(&self) -> u64 {
        self.mru
    }

    /// `n` re-hits of [`Cache::mru_line`] at once: the counts and dirty bit that `n` calls of
    /// [`Cache::rehit`] with it would leave, dirty if any of them wrote.
    #[inline(always)]
    pub fn rehit_mru(&mut self, n: u64, translation: bool, write: bool) {
        debug_assert!(self.mru != INVALID_TAG || n == 0, "re-hits with no most recent line");
        let t = translation as usize;
        self.accesses[t] += n;
        self.hits[t] += n;
        *self.tags.byte_mut(self.mru_slot) |= if write { DIRTY } else { 0 };
    }

    /// Records `line`, just made most recent in its set, for the re-hit shortcut (LRU only).
    #[inline(always)]
    fn note_mru(&mut self, line: u64, slot: usize) {
        if self.lru {
            (self.mru, self.mru_slot) = (line, slot);
        }
    }

    /// The fill half of [`Cache::access`]: installs `line` (which must be absent) tagged translation or
    /// data, dirty or clean. Returns the evicted line if it was dirty.
    #[inline]
    pub fn fill(&mut self, line: u64, translation: bool, dirty: bool) -> Option<Writeback> {
        let set = self.set_of(line);
        let (way, evicted) = self.tags.insert(set, self.tag_of(line));
        let slot = self.tags.byte_index(set, way);
        self.note_mru(line, slot);
        self.filled(set, slot, evicted, translation, dirty)
    }

    /// The counts and flags of a fill into `slot` of `set` (its tag already in place) that
    /// evicted `evicted`; the victim's write-back if it was dirty.
    ///
    /// Without a branch on the victim's flags: on GUPS whether a victim is dirty is close to a
    /// coin toss, so a branch on it mispredicts often (cachegrind's branch simulator), and the hierarchy branches on the write-back it returns anyway (docs/performance.md,
    /// "Dirty victims without a branch").
    #[inline]
    fn filled(&mut self, set: usize, slot: usize, evicted: Option<T>, translation: bool, dirty: bool) -> Option<Writeback> {
        // The flags of the way's valid victim; none for an invalid way.
        let valid = evicted.is_some();
        let f = self.tags.byte(slot) & 0u8.wrapping_sub(u8::from(valid));
        let (was_dirty, was_translation) = (f & DIRTY != 0, f & TRANSLATION != 0);
        self.valid += u64::from(!valid);
        self.translation -= u64::from(was_translation);
        self.writebacks += u64::from(was_dirty);
        *self.tags.byte_mut(slot) = if dirty { DIRTY } else { 0 } | if translation { TRANSLATION } else { 0 };
        self.translation += u64::from(translation);
        let line = self.line_of(set, evicted.unwrap_or(T::INVALID));
        was_dirty.then_some(Writeback { line, translation: was_translation })
    }

    /// Absorbs a dirty line written back from the level above (not a demand access: not counted in
    /// the hit/miss stats). If present it becomes dirty and is promoted as on a hit (it was just in use
    /// above); otherwise it is allocated dirty with the tag it carries. Returns this level's own dirty
    /// victim, if the allocation evicted one.
    #[inline]
    pub fn writeback(&mut self, line: u64, translation: bool) -> Option<Writeback> {
        let set = self.set_of(line);
        let (way, hit, evicted) = self.tags.lookup_or_insert(set, self.tag_of(line));
        let slot = self.tags.byte_index(set, way);
        self.note_mru(line, slot);
        if hit {
            *self.tags.byte_mut(slot) |= DIRTY;
            return None;
        }
        self.filled(set, slot, evicted, translation, true)
    }

    /// Drops the flags and counts of a slot that is about to be invalidated.
    #[inline]
    fn forget_slot(&mut self, slot: usize) {
        self.mru = INVALID_TAG;
        self.translation -= u64::from(self.tags.byte(slot) & TRANSLATION != 0);
        self.valid -= 1;
        *self.tags.byte_mut(slot) = 0;
    }

    /// Removes `line` if present. A dirty copy is dropped, not written back: invalidations come from
    /// page migration, whose copy of the page is charged by the caller.
    pub fn invalidate(&mut self, line: u64) {
        let set = self.set_of(line);
        if let Some(way) = self.tags.probe(set, self.tag_of(line)) {
            self.forget_slot(self.tags.byte_index(set, way));
            self.tags.invalidate_way(set, way);
        }
    }

    /// Removes every line in `[first_line, end_line)`, as [`Cache::invalidate`] does for one line.
    /// Returns how many lines were present. Probes line by line when the range is smaller than the
    /// number of sets and scans the whole cache otherwise (a 1 GiB page has more lines than any cache).
    pub fn invalidate_range(&mut self, first_line: u64, end_line: u64) -> u64 {
        let n = end_line.saturating_sub(first_line);
        let mut removed = 0;
        if n > 0 && n <= self.tags.sets() as u64 && first_line >> self.set_bits == (end_line - 1) >> self.set_bits {
            // One tag over consecutive sets (a page's lines): one pass over the run's sets, in
            // batches whose hits are removed after the pass (the same removals, in set order).
            let tag = self.tag_of(first_line);
            let first_set = self.set_of(first_line);
            let mut done = 0;
            while done < n as usize {
                let len = (n as usize - done).min(64);
                let (mut found, mut m) = ([(0usize, 0usize); 64], 0);
                self.tags.probe_run(first_set + done, len, tag, |set, way| {
                    found[m] = (set, way);
                    m += 1;
                });
                for &(set, way) in &found[..m] {
                    self.forget_slot(self.tags.byte_index(set, way));
                    self.tags.invalidate_way(set, way);
                }
                removed += m as u64;
                done += len;
            }
        } else if n <= self.tags.sets() as u64 {
            for line in first_line..end_line {
                let set = self.set_of(line);
                if let Some(way) = self.tags.probe(set, self.tag_of(line)) {
                    self.forget_slot(self.tags.byte_index(set, way));
                    self.tags.invalidate_way(set, way);
                    removed += 1;
                }
            }
        } else {
            removed = self.invalidate_ranges(&[(first_line, end_line)]);
        }
        removed
    }

    /// Removes every line inside one of `ranges` (`[first, end)` line numbers, sorted and not
    /// overlapping) in one pass over the whole cache, as [`Cache::invalidate_range`] of each
    /// would: a set's remaining lines keep their order whatever order lines leave in, so the
    /// state after is the same. Returns how many lines were present.
    pub fn invalidate_ranges(&mut self, ranges: &[(u64, u64)]) -> u64 {
        debug_assert!(ranges.windows(2).all(|w| w[0].1 <= w[1].0), "ranges must be sorted and disjoint");
        self.invalidate_where(|line| {
            let i = ranges.partition_point(|r| r.1 <= line);
            ranges.get(i).is_some_and(|r| r.0 <= line)
        })
    }

    /// Removes every line for which `doomed(line)` holds, in one pass over the whole cache, as
    /// [`Cache::invalidate`] of each would (the state after does not depend on the order lines
    /// leave in). Returns how many were present.
    pub fn invalidate_where(&mut self, doomed: impl Fn(u64) -> bool) -> u64 {
        let mut removed = 0;
        for set in 0..self.tags.sets() {
            for way in 0..self.tags.ways() {
                if let Some(tag) = self.tags.tag_at(set, way) {
                    if doomed(self.line_of(set, tag)) {
                        self.forget_slot(self.tags.byte_index(set, way));
                        self.tags.invalidate_way(set, way);
                        removed += 1;
                    }
                }
            }
        }
        removed
    }

    /// Host prefetch of `line`'s set ([`super::host_prefetch`]); no simulated effect.
    #[inline(always)]
    pub fn prefetch(&self, line: u64) {
        self.tags.prefetch(self.set_of(line));
    }

    /// Whether `line` is present (no state change).
    pub fn contains(&self, line: u64) -> bool {
        self.tags.probe(self.set_of(line), self.tag_of(line)).is_some()
    }

    /// Valid lines filled by translation references.
    #[inline(always)]
    pub fn translation_lines(&self) -> u64 {
        self.translation
    }

    /// Valid lines.
    #[inline(always)]
    pub fn valid_lines(&self) -> u64 {
        self.valid
    }

    /// Demand counters since construction or the last [`Cache::reset_stats`].
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            data_accesses: self.accesses[0],
            data_hits: self.hits[0],
            data_misses: self.accesses[0] - self.hits[0],
            translation_accesses: self.accesses[1],
            translation_hits: self.hits[1],
            translation_misses: self.accesses[1] - self.hits[1],
            writebacks: self.writebacks,
        }
    }

    /// Zeroes the counters; contents (and the valid/translation line counts, which describe contents)
    /// stay.
    pub fn reset_stats(&mut self) {
        self.accesses = [0; 2];
        self.hits = [0; 2];
        self.writebacks = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2 sets × 2 ways, LRU: lines with the same parity share a set.
    fn tiny() -> Cache {
        let cfg = CacheConfig { size: 256, ways: 2, latency: 3, policy: Replacement::Lru };
        cfg.validate("t").unwrap();
        Cache::new(&cfg)
    }

    /// `rehit_mru(n, ..)` leaves the counts and dirty bits that `n` re-hits of the most recent
    /// line leave, as the evictions and write-backs of the accesses after it show.
    #[test]
    fn batched_rehits_equal_rehits() {
        let mut rng = crate::rng::Rng::new(5);
        let cfg = CacheConfig { size: 64 * 64 * 4, ways: 4, latency: 1, policy: Replacement::Lru };
        let (mut a, mut b) = (Cache::<u32>::new(&cfg), Cache::<u32>::new(&cfg));
        let mut batched = 0;
        for _ in 0..50_000 {
            let (line, write) = (rng.below(1 << 10), rng.below(4) == 0);
            assert_eq!(a.access(line, false, write), b.access(line, false, write));
            assert_eq!(b.mru_line(), line, "an LRU cache's last hit or fill is its most recent line");
            let (n, write) = (rng.below(4), rng.below(3) == 0);
            for _ in 0..n {
                assert!(a.rehit(line, false, write));
            }
            b.rehit_mru(n, false, write && n > 0);
            batched += n;
            assert_eq!(a.stats(), b.stats());
        }
        assert!(batched > 50_000 && a.stats().writebacks > 1000, "{batched} re-hits, {:?}", a.stats());
    }

    /// A page's lines (one tag over consecutive sets) are removed in one pass over the run of
    /// sets; the result equals removing them line by line, for 8- and 16-way LRU and SRRIP
    /// caches and runs that start anywhere in the sets, including the last 64 lines' sets.
    #[test]
    fn run_flush_equals_line_by_line() {
        let mut rng = crate::rng::Rng::new(9);
        for (ways, policy) in [(8, Replacement::Lru), (16, Replacement::Srrip), (4, Replacement::Lru)] {
            let cfg = CacheConfig { size: 64 * 256 * ways as u64, ways, latency: 1, policy };
            let (mut a, mut b) = (Cache::<u32>::new(&cfg), Cache::<u32>::new(&cfg));
            for round in 0..200 {
                for _ in 0..2000 {
                    let (line, write) = (rng.below(1 << 12), rng.below(2) == 0);
                    assert_eq!(a.access(line, false, write), b.access(line, false, write));
                }
                let first = rng.below(1 << 12) & !63;
                let end = first + 1 + rng.below(64);
                let removed = a.invalidate_range(first, end);
                let mut by_line = 0;
                for line in first..end {
                    by_line += u64::from(b.contains(line));
                    b.invalidate(line);
                }
                assert_eq!(removed, by_line, "{ways} ways, round {round}");
                assert_eq!((a.valid_lines(), a.translation_lines()), (b.valid_lines(), b.translation_lines()));
            }
        }
    }

    /// The re-hit shortcut answers only for the line that is really the most recent of its set:
    /// a fill, a hit elsewhere in the set or an invalidation takes it away.
    #[test]
    fn rehit_shortcut_keeps_lru_order() {
        let mut c = tiny();
        c.access(0, false, false);
        c.access(0, false, true); // shortcut hit: dirty
        c.access(2, false, false); // same set: 2 is now the most recent
        assert!(c.access(0, false, false).hit); // a real hit: promotes 0 again, 2 is LRU
        assert_eq!(c.access(4, false, false).writeback, None, "2 (clean) is the victim, not dirty 0");
        assert!(c.contains(0) && !c.contains(2));
        c.invalidate(4);
        assert!(!c.access(4, false, false).hit, "an invalidated line must not re-hit");
        assert_eq!(c.stats().data_hits, 2);
        assert_eq!(c.stats().data_accesses, 6);
    }

    /// Narrow tags drop the set bits; an evicted line comes back whole, high bits included, and a
    /// `u64` cache of the same geometry behaves identically.
    #[test]
    fn narrow_tags_rebuild_evicted_lines() {
        let cfg = CacheConfig { size: 256, ways: 2, latency: 3, policy: Replacement::Lru };
        let mut wide: Cache<u64> = Cache::new(&cfg);
        let mut narrow = tiny();
        let high = (1u64 << 32) + 6; // set 0, tag above 2^31
        let mut evicted = Vec::new();
        for (line, write) in [(high, true), (2, false), (high + 2, false), (4, false)] {
            let r = narrow.access(line, false, write);
            assert_eq!(r, wide.access(line, false, write));
            evicted.extend(r.writeback.map(|w| w.line));
        }
        assert_eq!(evicted, [high], "the dirty high line is written back whole");
        assert!(!narrow.contains(high) && narrow.contains(high + 2));
        assert_eq!(narrow.invalidate_range(high, high + 4), 1);
    }

    #[test]
    fn narrow_tags_refuse_memory_beyond_their_reach() {
        // One set of 4 ways: 2^32 - 1 lines, just under 256 GiB.
        let cfg = CacheConfig { size: 256, ways: 4, latency: 1, policy: Replacement::Lru };
        assert!(Cache::check_reach(&cfg, "mem.l1d", 128 << 30).is_ok());
        let e = Cache::check_reach(&cfg, "mem.l1d", 512 << 30).unwrap_err().to_string();
        assert!(e.contains("mem.l1d") && e.contains("512 GiB"), "{e}");
    }

    #[test]
    fn hit_miss_eviction_writeback() {
        let mut c = tiny();
        // Set 0 receives lines 0, 2, 4.
        assert_eq!(c.access(0, false, true), CacheResult { hit: false, writeback: None }); // 0 dirty
        assert_eq!(c.access(2, false, false), CacheResult { hit: false, writeback: None });
        assert!(c.access(0, false, false).hit); // 0 most recent: LRU order 2, 0
                                                // Set 1 is independent.
        assert_eq!(c.access(1, false, false), CacheResult { hit: false, writeback: None });
        // 4 evicts 2 (clean): no writeback.
        assert_eq!(c.access(4, false, false), CacheResult { hit: false, writeback: None });
        // 6 evicts 0 (dirty since the first write): written back.
        assert_eq!(c.access(6, false, false), CacheResult { hit: false, writeback: Some(Writeback { line: 0, translation: false }) });
        assert!(!c.contains(0) && c.contains(4) && c.contains(6) && c.contains(1));
        // A write hit makes a clean line dirty; its later eviction writes it back.
        assert!(c.access(4, false, true).hit);
        assert_eq!(c.access(8, false, false).writeback, None); // evicts 6 (clean)
        assert_eq!(c.access(10, false, false).writeback, Some(Writeback { line: 4, translation: false }));
        let s = c.stats();
        assert_eq!((s.data_accesses, s.data_hits, s.data_misses, s.writebacks), (9, 2, 7, 2));
        assert_eq!(c.valid_lines(), 3);
        assert_eq!(c.latency(), 3);
        assert_eq!(c.capacity_lines(), 4);
    }

    #[test]
    fn translation_lines_follow_fills_and_evictions() {
        let mut c = tiny();
        c.access(0, true, false);
        c.access(1, true, true);
        assert_eq!((c.translation_lines(), c.valid_lines()), (2, 2));
        // A data hit on a translation line does not retag it.
        assert!(c.access(0, false, false).hit);
        assert_eq!(c.translation_lines(), 2);
        c.access(2, false, false); // set 0 now {0 translation, 2 data}
        c.access(4, false, false); // evicts 0 (LRU): translation line gone
        assert_eq!((c.translation_lines(), c.valid_lines()), (1, 3));
        // The dirty translation line carries its tag when written back.
        c.access(3, false, false);
        assert_eq!(c.access(5, false, false).writeback, Some(Writeback { line: 1, translation: true }));
        assert_eq!((c.translation_lines(), c.valid_lines()), (0, 4));
        // Refilling by a translation reference tags it again; invalidation untags.
        c.access(6, true, false);
        assert_eq!(c.translation_lines(), 1);
        c.invalidate(6);
        c.invalidate(6);
        assert_eq!((c.translation_lines(), c.valid_lines()), (0, 3));
        let s = c.stats();
        assert_eq!((s.translation_accesses, s.translation_misses, s.data_hits), (3, 3, 1));
    }

    #[test]
    fn writeback_into_level_allocates_dirty_and_keeps_tag() {
        let mut c = tiny();
        assert_eq!(c.writeback(0, true), None);
        assert_eq!((c.translation_lines(), c.valid_lines()), (1, 1));
        assert_eq!(c.stats(), CacheStats::default(), "a writeback is not a demand access");
        c.access(2, false, false);
        // 0 was the older of the two; 4 evicts it and it is dirty.
        assert_eq!(c.access(4, false, false).writeback, Some(Writeback { line: 0, translation: true }));
        // A writeback to a present clean line dirties it in place.
        assert_eq!(c.writeback(2, false), None);
        assert_eq!(c.access(6, false, false).writeback, None); // evicts 4 (2 was promoted)
        assert_eq!(c.access(8, false, false).writeback, Some(Writeback { line: 2, translation: false }));
    }

    #[test]
    fn invalidate_range_both_paths() {
        let cfg = CacheConfig { size: 64 * 4 * 8, ways: 4, latency: 1, policy: Replacement::Srrip };
        cfg.validate("t").unwrap();
        let mut a: Cache = Cache::new(&cfg);
        for l in 0..32 {
            a.access(l, l % 3 == 0, false);
        }
        let mut b = a.clone();
        // 8 sets: a 5-line range probes, a 20-line range scans; both must agree with a per-line loop.
        assert_eq!(a.invalidate_range(10, 15), 5);
        for l in 10..15 {
            b.invalidate(l);
        }
        assert_eq!((a.valid_lines(), a.translation_lines()), (b.valid_lines(), b.translation_lines()));
        assert_eq!(a.invalidate_range(5, 25), 15);
        for l in 5..25 {
            b.invalidate(l);
        }
        assert_eq!((a.valid_lines(), a.translation_lines()), (b.valid_lines(), b.translation_lines()));
        assert_eq!(a.valid_lines(), 12);
        assert!((0..32).all(|l| a.contains(l) != (5..25).contains(&l)));
    }

    #[test]
    fn reset_stats_keeps_contents() {
        let mut c = tiny();
        c.access(0, true, false);
        c.reset_stats();
        assert_eq!(c.stats(), CacheStats::default());
        assert!(c.access(0, true, false).hit);
        assert_eq!(c.translation_lines(), 1);
    }

    #[test]
    fn validation_names_key_and_expectation() {
        let ok = CacheConfig { size: 2 << 20, ways: 16, latency: 16, policy: Replacement::Srrip };
        ok.validate("mem.l2").unwrap();
        assert_eq!(ok.sets(), 2048);
        let msg = |c: CacheConfig| c.validate("mem.l2").unwrap_err().to_string();
        let m = msg(CacheConfig { ways: 0, ..ok.clone() });
        assert!(m.contains("`mem.l2.ways`") && m.contains("at least 1"), "{m}");
        let m = msg(CacheConfig { size: 1000, ..ok.clone() });
        assert!(m.contains("`mem.l2.size`") && m.contains("multiple of 64*ways = 1024"), "{m}");
        let m = msg(CacheConfig { size: 24 * 1024, ..ok.clone() });
        assert!(m.contains("`mem.l2.size`") && m.contains("size/(64*ways) = 24 sets is not a power of two"), "{m}");
        let m = msg(CacheConfig { latency: 0, ..ok.clone() });
        assert!(m.contains("`mem.l2.latency`") && m.contains("at least 1 cycle"), "{m}");
        let m = msg(CacheConfig { size: 0, ..ok });
        assert!(m.contains("`mem.l2.size`"), "{m}");
    }

    #[test]
    fn config_reads_human_sizes() {
        let c: CacheConfig = toml::from_str("size = \"32K\"\nways = 8\nlatency = 4\npolicy = \"lru\"").unwrap();
        assert_eq!(c, CacheConfig { size: 32 << 10, ways: 8, latency: 4, policy: Replacement::Lru });
        assert!(toml::from_str::<CacheConfig>("size = 64\nways = 1\nlatency = 1\npolicy = \"lru\"\nsets = 1").is_err());
        assert!(toml::from_str::<CacheConfig>("size = 64\nways = 1\nlatency = 1\npolicy = \"plru\"").is_err());
    }
}
