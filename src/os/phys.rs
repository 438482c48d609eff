//! Simulated physical memory: a binary buddy allocator with two fragmentation knobs.
//!
//! Every frame the simulated OS hands out (data pages of 4 KiB..32 MiB, page-table pages, hash-table
//! ways) comes from here, so page-walk references and data references get real, reproducible physical
//! addresses.
//!
//! # Data structure
//! Orders `0..max_order` have one *free bitmap* each (bit `i` of order `k` set = the block
//! `[i << k, (i + 1) << k)` is a free block of exactly order `k`), kept as a 64-ary summary tree so
//! "lowest free block of order k" and "next free block at or after x" cost a handful of word reads.
//! A second bitmap per order marks the *heads of allocated blocks*, so [`PhysMem::free`] can prove that
//! the block being freed was allocated with exactly that order before touching anything. Together
//! the bitmaps cost about half a byte per 4 KiB frame (32 MiB for 256 GiB). Allocations larger than
//! the largest buddy order (a 1 GiB page with `max_order` 14) and boot-time reservations of arbitrary
//! length are rare and live in two small ordered maps.
//!
//! # Placement policy: lowest address first
//! Linux keeps LIFO free lists (a freed page is handed out again first, while it is still cache-hot).
//! We instead always take the lowest-addressed free block of the smallest order that fits. Both
//! policies are deterministic for a given sequence of calls; we prefer address order because the
//! allocator's state is then a pure function of *which* blocks are free, not of the order in which
//! they were freed, so two runs that reach the same free set behave identically from there on and a
//! state can be compared or described without replaying its history. Address-ordered first fit also
//! packs live data towards low memory and leaves the high end contiguous, which keeps fragmentation
//! a property of the knobs below rather than of allocator noise. On a freshly booted machine both
//! policies hand out ascending, physically adjacent frames (splitting keeps the lower half), so the
//! physical contiguity a workload sees "by accident" is similar.
//!
//! # Orders
//! As in Linux, `max_order` is one more than the largest buddy order: with the default 14 the
//! largest free block is order 13 (32 MiB). Requests above the largest order (e.g. order 18, a 1 GiB
//! page, with `max_order` 14) are served from a naturally aligned run of free largest-order blocks;
//! pass `max_order` 19 to make 1 GiB an ordinary buddy order instead.
//!
//! # Fragmentation knobs
//! * [`PhysMem::fragment_fmfi`] reproduces Elastic Translations' `memfrag` tool: fill all free memory
//!   with 4 KiB pages, then give back 32 MiB "relax" chunks while the free-memory fragmentation index
//!   (FMFI) is above target and 512 KiB "press" chunks at stride 2 otherwise.
//! * [`PhysMem::fragment_free_2m`] reproduces Virtuoso's knob: pin one random 4 KiB page in a chosen
//!   fraction of the free 2 MiB blocks.
//!
//! Pages taken by either knob belong to a "fragmenter" that never frees them; they are ordinary
//! order-0 allocations as far as the invariants are concerned ([`PhysMem::fragmenter_pages`]).

use std::collections::BTreeMap;

use crate::addr::{PageSize, Pfn, BASE_PAGE};
use crate::rng::Rng;

/// Largest `max_order` accepted by [`PhysMem::new`]; larger values are clamped to it. Order 39 is
/// 2 PiB, far beyond any simulated machine, and keeps every `1 << order` well inside a `u64`.
pub const MAX_ORDER_LIMIT: u32 = 40;

/// Order of the chunks Elastic Translations' fragmenter frees while FMFI is above target (32 MiB).
const RELAX_ORDER: u32 = 13;
/// Order of the chunks it frees, every other one, while FMFI is at or below target (512 KiB).
const PRESS_ORDER: u32 = 7;

// ---------------------------------------------------------------------------------------------------
// Plain bitmaps
// ---------------------------------------------------------------------------------------------------

fn words_for(bits: u64) -> usize {
    bits.div_ceil(64) as usize
}

#[inline]
fn bit_test(v: &[u64], i: u64) -> bool {
    v.get((i / 64) as usize).is_some_and(|w| (w >> (i % 64)) & 1 == 1)
}

#[inline]
fn bit_set(v: &mut [u64], i: u64) {
    if let Some(w) = v.get_mut((i / 64) as usize) {
        *w |= 1 << (i % 64);
    }
}

#[inline]
fn bit_clear(v: &mut [u64], i: u64) {
    if let Some(w) = v.get_mut((i / 64) as usize) {
        *w &= !(1 << (i % 64));
    }
}

/// Mask of bits `lo..hi` of one word (`hi` ≤ 64, `lo` < `hi`).
#[inline]
fn word_mask(lo: u64, hi: u64) -> u64 {
    let upper = if hi >= 64 { !0 } else { (1u64 << hi) - 1 };
    upper & (!0u64 << lo)
}

/// Calls `f(word_index, mask)` for every word the bit range `[start, start + len)` touches.
#[inline]
fn for_range_words(start: u64, len: u64, mut f: impl FnMut(usize, u64) -> bool) -> bool {
    let end = start + len;
    let mut i = start;
    while i < end {
        let w = i / 64;
        let hi = (end - w * 64).min(64);
        if !f(w as usize, word_mask(i % 64, hi)) {
            return false;
        }
        i = (w + 1) * 64;
    }
    true
}

fn range_set(v: &mut [u64], start: u64, len: u64) {
    for_range_words(start, len, |w, m| {
        if let Some(x) = v.get_mut(w) {
            *x |= m;
        }
        true
    });
}

fn range_clear(v: &mut [u64], start: u64, len: u64) {
    for_range_words(start, len, |w, m| {
        if let Some(x) = v.get_mut(w) {
            *x &= !m;
        }
        true
    });
}

fn range_all_set(v: &[u64], start: u64, len: u64) -> bool {
    for_range_words(start, len, |w, m| v.get(w).is_some_and(|x| x & m == m))
}

/// Indexes of the set bits of a plain bitmap, ascending.
fn ones(v: &[u64]) -> impl Iterator<Item = u64> + '_ {
    v.iter().enumerate().flat_map(|(w, &word)| {
        let mut bits = word;
        std::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let b = u64::from(bits.trailing_zeros());
            bits &= bits - 1;
            Some(w as u64 * 64 + b)
        })
    })
}

// ---------------------------------------------------------------------------------------------------
// Summary-tree bitmap
// ---------------------------------------------------------------------------------------------------

/// A bitmap with 64-ary summary levels: bit `j` of level `l + 1` is set whenever word `j` of level
/// `l` is non-zero (it may stay set for a while after the word empties, see [`BitTree::clear`]).
/// Finding the lowest set bit at or after any position costs O(levels) word reads, which is what
/// makes "lowest-addressed free block" nearly as cheap as popping a list. All levels live in one
/// vector (level 0 first) so a walk up or down touches no other allocation.
#[derive(Clone, Debug)]
struct BitTree {
    /// Number of valid bits in level 0.
    len: u64,
    /// Every level's words, level 0 first; the last level is exactly one word.
    words: Vec<u64>,
    /// `bounds[l]..bounds[l + 1]` are the words of level `l` (inline: no pointer chase per level).
    bounds: [usize; MAX_LEVELS + 1],
    /// Number of levels.
    depth: usize,
}

/// Levels of a [`BitTree`] over at most 2^52 bits (every frame of a 64-bit physical space).
const MAX_LEVELS: usize = 10;

impl BitTree {
    fn new(len: u64) -> Self {
        let mut bounds = [0usize; MAX_LEVELS + 1];
        let mut depth = 0;
        let mut bits = len;
        // Each level is 64 times smaller, so MAX_LEVELS levels cover any u64 frame count.
        while depth < MAX_LEVELS {
            let words = words_for(bits).max(1);
            bounds[depth + 1] = bounds[depth] + words;
            depth += 1;
            if words == 1 {
                break;
            }
            bits = words as u64;
        }
        BitTree { len, words: vec![0u64; bounds[depth]], bounds, depth }
    }

    fn level(&self, l: usize) -> &[u64] {
        &self.words[self.bounds[l]..self.bounds[l + 1]]
    }

    #[inline]
    fn test(&self, i: u64) -> bool {
        bit_test(self.level(0), i)
    }

    /// Sets bit `i` (< len) and, where a word was empty, the summary bit above it. A non-empty word
    /// already has its summary bit set (see [`BitTree::clear`]), so the climb stops there.
    #[inline]
    fn set(&mut self, i: u64) {
        if i >= self.len {
            return;
        }
        let Some(w) = self.words.get_mut((i / 64) as usize) else {
            return;
        };
        let was = *w;
        *w = was | (1 << (i % 64));
        if was != 0 {
            return;
        }
        let mut i = (i / 64) as usize;
        for &base in self.bounds.get(1..self.depth).unwrap_or_default() {
            let Some(w) = self.words.get_mut(base + i / 64) else {
                return;
            };
            let was = *w;
            *w = was | (1 << (i % 64));
            if was != 0 {
                return;
            }
            i /= 64;
        }
    }

    /// Clears bit `i` in level 0 only. Summary bits are cleared lazily, by [`BitTree::first_mut`]
    /// when a descent finds an empty word, so a summary bit means "this word *may* be non-empty"
    /// while a clear one still guarantees an empty word. That nearly halves the cost of the split/merge
    /// chains of the buddy hot path, where a word is emptied and refilled over and over.
    #[inline]
    fn clear(&mut self, i: u64) {
        if i >= self.len {
            return;
        }
        if let Some(w) = self.words.get_mut((i / 64) as usize) {
            *w &= !(1 << (i % 64));
        }
    }

    fn clear_all(&mut self) {
        self.words.fill(0);
    }

    /// Lowest set bit, clearing the stale summary bits met on the way (each is paid for once).
    #[inline]
    fn first_mut(&mut self) -> Option<u64> {
        let top = self.depth - 1;
        let mut l = top;
        let mut idx = 0usize; // word index within level l
        loop {
            let word = *self.words.get(self.bounds[l] + idx)?;
            if word != 0 {
                let b = idx * 64 + word.trailing_zeros() as usize;
                if l == 0 {
                    return Some(b as u64);
                }
                idx = b;
                l -= 1;
            } else {
                if l == top {
                    return None;
                }
                // Stale summary bit: clear it and look again one level up.
                let parent = self.words.get_mut(self.bounds[l + 1] + idx / 64)?;
                *parent &= !(1 << (idx % 64));
                idx /= 64;
                l += 1;
            }
        }
    }

    /// Lowest set bit at or after `from` (read-only: steps over stale summary bits).
    fn next_set(&self, from: u64) -> Option<u64> {
        let mut l = 0;
        let mut idx = from; // bit position within level l
        loop {
            let w = idx / 64;
            let word = *self.level(l).get(w as usize)?;
            let m = word & (!0u64 << (idx % 64));
            if m == 0 {
                // Nothing left in this word: continue with the next word, one level up.
                if l + 1 >= self.depth {
                    return None;
                }
                idx = w + 1;
                l += 1;
                continue;
            }
            let b = w * 64 + u64::from(m.trailing_zeros());
            if l == 0 {
                return Some(b);
            }
            if self.level(l - 1).get(b as usize).is_some_and(|&c| c != 0) {
                l -= 1;
                idx = b * 64;
            } else {
                idx = b + 1; // stale summary bit
            }
        }
    }

    fn count_ones(&self) -> u64 {
        self.level(0).iter().map(|w| u64::from(w.count_ones())).sum()
    }

    fn ones(&self) -> impl Iterator<Item = u64> + '_ {
        ones(self.level(0))
    }

    /// Every non-empty word has its summary bit and no bit beyond `len` is set.
    fn check(&self) -> Result<(), String> {
        let words = self.level(0);
        if !self.len.is_multiple_of(64) {
            if let Some(last) = words.get((self.len / 64) as usize) {
                if last >> (self.len % 64) != 0 {
                    return Err(format!("bits set beyond the last block ({})", self.len));
                }
            }
        }
        if words.len() > words_for(self.len).max(1) {
            return Err("bitmap longer than its block count".into());
        }
        for l in 1..self.depth {
            let below = self.level(l - 1);
            let here = self.level(l);
            // A summary bit may be stale (set over an empty word), never missing.
            for (j, w) in below.iter().enumerate() {
                if *w != 0 && !bit_test(here, j as u64) {
                    return Err(format!("summary level {l} misses non-empty word {j}"));
                }
            }
            if ones(here).any(|j| j >= below.len() as u64) {
                return Err(format!("summary level {l} has a bit past the end"));
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------------
// The allocator
// ---------------------------------------------------------------------------------------------------

/// Simulated physical memory: a deterministic binary buddy allocator over `total_pages()` 4 KiB
/// frames, with FMFI and free-2 MiB fragmentation knobs. See the module documentation.
#[derive(Clone, Debug)]
pub struct PhysMem {
    /// Frames managed.
    total: u64,
    /// One more than the largest buddy order (Linux's MAX_ORDER convention).
    max_order: u32,
    /// Free bitmap per order `0..max_order`.
    free: Vec<BitTree>,
    /// Free blocks per order (popcount of `free[k]`, kept so statistics are O(orders)).
    counts: Vec<u64>,
    /// Sum of `counts[k] << k`.
    free_pages: u64,
    /// Allocated-block heads per order: bit `i` of order `k` = block `i` of order `k` is allocated
    /// as one unit by `alloc`/`alloc_at`.
    heads: Vec<Vec<u64>>,
    /// Allocations above the largest buddy order: first pfn → order.
    big: BTreeMap<u64, u32>,
    /// Boot-time reservations made by `reserve_contiguous`: first pfn → pages.
    reserved: BTreeMap<u64, u64>,
    /// Order-0 pages held by the fragmenter knobs.
    fragmenter: u64,
}

/// The translation API's view of physical memory: drivers allocate their tables here.
impl crate::tapi::Frames for PhysMem {
    fn alloc(&mut self, order: u32) -> Option<Pfn> {
        PhysMem::alloc(self, order)
    }
    fn free(&mut self, pfn: Pfn, order: u32) -> Result<(), String> {
        PhysMem::free(self, pfn, order)
    }
    fn free_pages(&self) -> u64 {
        PhysMem::free_pages(self)
    }
    fn reserve_contiguous(&mut self, pages: u64, align_order: u32) -> Option<Pfn> {
        PhysMem::reserve_contiguous(self, pages, align_order)
    }
}

impl PhysMem {
    /// Memory of `total_bytes` (rounded down to whole 4 KiB frames) with buddy orders
    /// `0..max_order` (Linux convention: the default 14 gives order-13 = 32 MiB blocks; use 19 to
    /// make order 18 = 1 GiB a buddy order). `max_order` is clamped to `1..=MAX_ORDER_LIMIT`.
    /// Memory above the last whole largest-order block is still usable as smaller aligned blocks.
    pub fn new(total_bytes: u64, max_order: u32) -> Self {
        let total = total_bytes / BASE_PAGE;
        let max_order = max_order.clamp(1, MAX_ORDER_LIMIT);
        let mut m = PhysMem {
            total,
            max_order,
            free: (0..max_order).map(|k| BitTree::new(total >> k)).collect(),
            counts: vec![0; max_order as usize],
            free_pages: 0,
            heads: (0..max_order).map(|k| vec![0u64; words_for(total >> k)]).collect(),
            big: BTreeMap::new(),
            reserved: BTreeMap::new(),
            fragmenter: 0,
        };
        // Cover [0, total) with the largest aligned blocks that fit; the tail blocks' buddies lie
        // beyond the end, so nothing here could coalesce further.
        let top = m.top();
        let mut pos = 0u64;
        while pos < total {
            let k = pos.trailing_zeros().min(top).min(63 - (total - pos).leading_zeros());
            m.list_add(pos, k);
            pos += 1 << k;
        }
        m.free_pages = total;
        m
    }

    /// One more than the largest buddy order, as passed to [`PhysMem::new`] (after clamping).
    pub fn max_order(&self) -> u32 {
        self.max_order
    }

    /// The largest buddy order, `max_order() - 1`: the largest block a free list can hold.
    pub fn largest_order(&self) -> u32 {
        self.top()
    }

    /// Frames (4 KiB pages) managed.
    pub fn total_pages(&self) -> u64 {
        self.total
    }

    /// Frames currently free.
    pub fn free_pages(&self) -> u64 {
        self.free_pages
    }

    /// Order-0 pages currently held by the fragmentation knobs (never freed by them).
    pub fn fragmenter_pages(&self) -> u64 {
        self.fragmenter
    }

    #[inline]
    fn top(&self) -> u32 {
        self.max_order - 1
    }

    /// Adds one block to the order-`k` free list without coalescing (callers guarantee its buddy
    /// is not free). Callers keep `free_pages` right: a split or merge chain moves many blocks
    /// between lists but changes the free total once.
    #[inline]
    fn list_add(&mut self, pfn: u64, k: u32) {
        self.free[k as usize].set(pfn >> k);
        self.counts[k as usize] += 1;
    }

    /// Removes one block from the order-`k` free list (see [`PhysMem::list_add`]).
    #[inline]
    fn list_remove(&mut self, pfn: u64, k: u32) {
        self.free[k as usize].clear(pfn >> k);
        self.counts[k as usize] -= 1;
    }

    /// Returns the aligned block `[pfn, pfn + 2^k)` (k ≤ top) to the free lists, merging with free
    /// buddies as far as the largest order.
    #[inline]
    fn insert_free(&mut self, pfn: u64, k: u32) {
        let top = self.top();
        self.free_pages += 1 << k;
        let mut p = pfn;
        let mut k = k;
        while k < top {
            let buddy = (p >> k) ^ 1;
            if !self.free[k as usize].test(buddy) {
                break;
            }
            self.list_remove(buddy << k, k);
            p &= !(1u64 << k);
            k += 1;
        }
        self.list_add(p, k);
    }

    /// The free block containing `pfn`, as (first pfn, order).
    fn free_block_at(&self, pfn: u64) -> Option<(u64, u32)> {
        if pfn >= self.total {
            return None;
        }
        (0..=self.top()).find_map(|k| self.free[k as usize].test(pfn >> k).then_some(((pfn >> k) << k, k)))
    }

    /// The lowest free block starting at or after `pfn`.
    fn next_free_block(&self, pfn: u64) -> Option<(u64, u32)> {
        let mut best: Option<(u64, u32)> = None;
        for k in 0..=self.top() {
            let from = pfn.div_ceil(1 << k);
            if let Some(i) = self.free[k as usize].next_set(from) {
                let start = i << k;
                if best.is_none_or(|(b, _)| start < b) {
                    best = Some((start, k));
                }
            }
        }
        best
    }

    /// Removes the aligned block `[pfn, pfn + 2^k)` (k ≤ top) from the free lists if it is entirely
    /// free, splitting the free block that contains it; false (and no change) otherwise. Because free
    /// buddies are always merged, an entirely free aligned block always lies inside one free block.
    fn take_block(&mut self, pfn: u64, k: u32) -> bool {
        let Some((start, j)) = (k..=self.top()).find_map(|j| self.free[j as usize].test(pfn >> j).then_some(((pfn >> j) << j, j))) else {
            return false;
        };
        self.list_remove(start, j);
        for s in (k..j).rev() {
            // The half of the order-(s+1) block that does not hold `pfn` stays free.
            self.list_add(((pfn >> s) ^ 1) << s, s);
        }
        self.free_pages -= 1 << k;
        true
    }

    /// Allocates a naturally aligned block of 2^`order` frames: the lowest-addressed free block of
    /// the smallest order ≥ `order` that has one, split as needed (lower half kept, upper halves
    /// freed). Orders above [`PhysMem::largest_order`] take the lowest aligned run of free
    /// largest-order blocks. None when nothing fits.
    pub fn alloc(&mut self, order: u32) -> Option<Pfn> {
        let top = self.top();
        if order > top {
            return self.alloc_big(order);
        }
        let j = order + self.counts[order as usize..].iter().position(|&c| c > 0)? as u32;
        let idx = self.free[j as usize].first_mut()?;
        let pfn = idx << j;
        self.list_remove(pfn, j);
        for s in (order..j).rev() {
            self.list_add(pfn + (1 << s), s);
        }
        self.free_pages -= 1 << order;
        bit_set(&mut self.heads[order as usize], pfn >> order);
        Some(Pfn(pfn))
    }

    /// Lowest naturally aligned run of 2^(order - top) free largest-order blocks.
    fn alloc_big(&mut self, order: u32) -> Option<Pfn> {
        let top = self.top();
        if order >= 63 || (1u64 << order) > self.total {
            return None;
        }
        let n = 1u64 << (order - top);
        let tree = &self.free[top as usize];
        let mut from = 0;
        let found = loop {
            let idx = tree.next_set(from)?;
            let group = idx / n * n;
            if range_all_set(tree.level(0), group, n) {
                break group << top;
            }
            from = group + n;
        };
        self.carve_big(found, order);
        Some(Pfn(found))
    }

    /// Whether every largest-order block of `[pfn, pfn + 2^order)` is free (order > top, aligned).
    fn big_range_free(&self, pfn: u64, order: u32) -> bool {
        let top = self.top();
        range_all_set(self.free[top as usize].level(0), pfn >> top, 1 << (order - top))
    }

    fn carve_big(&mut self, pfn: u64, order: u32) {
        let top = self.top();
        for i in 0..(1u64 << (order - top)) {
            self.list_remove(pfn + (i << top), top);
        }
        self.free_pages -= 1 << order;
        self.big.insert(pfn, order);
    }

    /// Checks that `[pfn, pfn + 2^order)` is a naturally aligned block inside memory.
    fn check_block(&self, pfn: u64, order: u32) -> Result<(), String> {
        if order >= 63 {
            return Err(format!("order {order} is not a block order"));
        }
        let size = 1u64 << order;
        if !pfn.is_multiple_of(size) {
            return Err(format!("pfn {pfn:#x} is not aligned to its order-{order} block"));
        }
        if pfn >= self.total || size > self.total - pfn {
            return Err(format!("order-{order} block at pfn {pfn:#x} lies outside memory of {} frames", self.total));
        }
        Ok(())
    }

    /// Allocates exactly the naturally aligned block `[pfn, pfn + 2^order)` if it is entirely free
    /// (boot-time carving of reserved regions: a 1 GiB hugetlb pool, Utopia's RestSegs). False, with
    /// no change, if any part is in use or the block is misaligned or outside memory. Free it with
    /// [`PhysMem::free`] and the same order.
    pub fn alloc_at(&mut self, pfn: Pfn, order: u32) -> bool {
        let p = pfn.0;
        if self.check_block(p, order).is_err() {
            return false;
        }
        if order > self.top() {
            if !self.big_range_free(p, order) {
                return false;
            }
            self.carve_big(p, order);
            return true;
        }
        if !self.take_block(p, order) {
            return false;
        }
        bit_set(&mut self.heads[order as usize], p >> order);
        true
    }

    /// Reserves `pages` contiguous frames at boot, starting at the lowest pfn aligned to
    /// 2^`align_order` from which the whole range is free (e.g. a 512 MiB RestSeg). Returns the first
    /// pfn, or None if no such range exists (or `pages` is 0). The range is neither a buddy block nor
    /// freeable with [`PhysMem::free`]; give it back with [`PhysMem::unreserve_contiguous`].
    pub fn reserve_contiguous(&mut self, pages: u64, align_order: u32) -> Option<Pfn> {
        if pages == 0 || pages > self.total || align_order >= 63 {
            return None;
        }
        let align = 1u64 << align_order;
        let mut pos = 0u64;
        // Walk maximal runs of adjacent free blocks in address order.
        let start = loop {
            let (run_start, k) = match self.free_block_at(pos) {
                Some(b) => b,
                None => self.next_free_block(pos)?,
            };
            let mut run_end = run_start + (1 << k);
            // A free block containing `run_end` cannot also contain `run_end - 1`, so it starts there.
            while let Some((_, k2)) = self.free_block_at(run_end) {
                run_end += 1 << k2;
            }
            let a = run_start.div_ceil(align).saturating_mul(align);
            if a < run_end && pages <= run_end - a {
                break a;
            }
            pos = run_end;
        };
        self.for_aligned_blocks(start, pages, |m, p, k| {
            let took = m.take_block(p, k);
            debug_assert!(took, "range was checked free");
        });
        self.reserved.insert(start, pages);
        Some(Pfn(start))
    }

    /// Gives back a range made by [`PhysMem::reserve_contiguous`]; `pfn` and `pages` must match the
    /// reservation exactly. Err (and no change) otherwise.
    pub fn unreserve_contiguous(&mut self, pfn: Pfn, pages: u64) -> Result<(), String> {
        let what = format!("unreserve of {pages} frames at pfn {:#x}", pfn.0);
        match self.reserved.get(&pfn.0) {
            Some(&p) if p == pages => {}
            Some(&p) => return Err(format!("{what}: the reservation there has {p} frames")),
            None => return Err(format!("{what}: no reservation starts there")),
        }
        self.reserved.remove(&pfn.0);
        self.for_aligned_blocks(pfn.0, pages, |m, p, k| m.insert_free(p, k));
        Ok(())
    }

    /// Calls `f(self, pfn, order)` for the maximal aligned blocks (order ≤ top) that tile
    /// `[start, start + pages)`.
    fn for_aligned_blocks(&mut self, start: u64, pages: u64, mut f: impl FnMut(&mut Self, u64, u32)) {
        let top = self.top();
        let end = start + pages;
        let mut p = start;
        while p < end {
            let k = p.trailing_zeros().min(top).min(63 - (end - p).leading_zeros());
            f(self, p, k);
            p += 1 << k;
        }
    }

    /// Frees a block previously allocated (by [`PhysMem::alloc`] or [`PhysMem::alloc_at`]) with the
    /// same order, merging it with free buddies up to the largest order. Freeing anything else —
    /// a free page (double free), a block allocated with another order, a page inside a reservation,
    /// a misaligned or out-of-range block — is a simulator bug: Err describes it and nothing changes.
    pub fn free(&mut self, pfn: Pfn, order: u32) -> Result<(), String> {
        let p = pfn.0;
        self.check_block(p, order).map_err(|e| format!("free of order-{order} block at pfn {p:#x}: {e}"))?;
        if order > self.top() {
            if self.big.get(&p) != Some(&order) {
                return Err(self.bad_free(p, order));
            }
            self.big.remove(&p);
            let top = self.top();
            for i in 0..(1u64 << (order - top)) {
                self.insert_free(p + (i << top), top);
            }
            return Ok(());
        }
        if !bit_test(&self.heads[order as usize], p >> order) {
            return Err(self.bad_free(p, order));
        }
        bit_clear(&mut self.heads[order as usize], p >> order);
        self.insert_free(p, order);
        Ok(())
    }

    /// Describes why freeing `[p, p + 2^order)` is wrong.
    fn bad_free(&self, p: u64, order: u32) -> String {
        let what = format!("free of order-{order} block at pfn {p:#x}");
        if let Some((s, k)) = self.free_block_at(p) {
            return format!("{what}: double free (the page lies in free order-{k} block at pfn {s:#x})");
        }
        for k in 0..=self.top() {
            if bit_test(&self.heads[k as usize], p >> k) {
                let s = (p >> k) << k;
                return if s == p {
                    format!("{what}: the block was allocated with order {k}")
                } else {
                    format!("{what}: the page lies inside an order-{k} block allocated at pfn {s:#x}")
                };
            }
        }
        if let Some((&s, &k)) = self.big.range(..=p).next_back() {
            if p < s + (1 << k) {
                return format!("{what}: the page lies inside an order-{k} block allocated at pfn {s:#x}");
            }
        }
        if let Some((&s, &n)) = self.reserved.range(..=p).next_back() {
            if p < s + n {
                return format!("{what}: the page lies inside a {n}-frame reservation at pfn {s:#x}");
            }
        }
        format!("{what}: the block was never allocated")
    }

    /// The maximal runs of physically adjacent free frames, in address order, as (first pfn,
    /// frames): what an allocator handing out contiguous ranges larger than one buddy block (RMM's
    /// eager paging) chooses from. Each run is a sequence of adjacent free buddy blocks; any
    /// naturally aligned block inside a run can be taken with [`PhysMem::alloc_at`].
    pub fn free_runs(&self) -> Vec<(Pfn, u64)> {
        let mut runs = Vec::new();
        let mut pos = 0;
        while let Some((start, k)) = self.next_free_block(pos) {
            let mut end = start + (1 << k);
            // A free block containing `end` cannot also contain `end - 1`, so it starts there.
            while let Some((_, k2)) = self.free_block_at(end) {
                end += 1 << k2;
            }
            runs.push((Pfn(start), end - start));
            pos = end;
        }
        runs
    }

    /// Whether frame `pfn` is free (false for frames outside memory).
    pub fn is_free(&self, pfn: Pfn) -> bool {
        self.free_block_at(pfn.0).is_some()
    }

    /// Number of free blocks of exactly `order` in the free lists (0 above the largest order).
    pub fn free_blocks(&self, order: u32) -> u64 {
        self.counts.get(order as usize).copied().unwrap_or(0)
    }

    /// Free frames that lie in free blocks of order ≥ `order`.
    pub fn free_pages_at_least(&self, order: u32) -> u64 {
        self.counts.iter().enumerate().skip(order as usize).map(|(k, &c)| c << k).sum()
    }

    /// Free blocks per order `0..max_order`, like one row of `/proc/buddyinfo`.
    pub fn buddyinfo(&self) -> Vec<u64> {
        self.counts.clone()
    }

    /// Free memory fragmentation index at `order`, as Linux's `extfrag/unusable_index` reports it:
    /// (free frames in blocks smaller than 2^`order`) / (all free frames); 0 when nothing is free.
    pub fn fmfi(&self, order: u32) -> f64 {
        if self.free_pages == 0 {
            return 0.0;
        }
        let small = self.free_pages - self.free_pages_at_least(order);
        small as f64 / self.free_pages as f64
    }

    /// Fraction of the free memory that lies in free blocks of at least 2 MiB (order 9); 0 when
    /// nothing is free. This is what Virtuoso's fragmentation knob controls.
    pub fn free_2m_fraction(&self) -> f64 {
        if self.free_pages == 0 {
            return 0.0;
        }
        self.free_pages_at_least(PageSize::M2.order()) as f64 / self.free_pages as f64
    }

    /// Fragments memory the way Elastic Translations' artifact (`memfrag`) does, so that the FMFI at
    /// `order` ends near `target` (clamped to 0..1) with at least `keep_free_bytes` free:
    ///
    /// 1. *Populate*: every free frame becomes an order-0 page held by the fragmenter (the tool
    ///    touches all free memory with huge pages disabled).
    /// 2. *Release* until `keep_free_bytes` are free: while FMFI is above target, give back a whole
    ///    aligned "relax" chunk of order max(`order`, 13) (32 MiB); otherwise give back a "press"
    ///    chunk of order 7 (512 KiB) whose index is even, so its odd buddy stays held and the freed
    ///    piece can never merge into 2 MiB or 32 MiB. Relax chunks are taken in a seeded random
    ///    order; press chunks first come from held memory outside whole relax chunks, then fill one
    ///    randomly chosen relax chunk at a time (as the tool walks its buffer), so pressing does not
    ///    spoil the chunks still available for relaxing. One refinement over the tool: no more
    ///    relax chunks are released than the number that puts the final FMFI nearest the target,
    ///    since the greedy rule alone ends up to one whole chunk (3 % of 1 GiB) below it.
    /// 3. If both kinds run out first, the remaining held frames are given back in address order.
    ///
    /// With a small largest order the relax order is capped at [`PhysMem::largest_order`]; for
    /// `order` ≤ 7 the press order is `order` − 1 (the press chunk must stay below `order`).
    /// The free lists are exactly those that freeing these frames one page at a time would leave;
    /// the work is done chunk by chunk so 32 GiB fragments in milliseconds. Deterministic for a
    /// given state and seed. Returns the achieved FMFI; when memory holds enough whole relax chunks
    /// (about (1 + target) × `keep_free_bytes` of fragmentable memory) its error is at most half a
    /// relax chunk relative to the memory released: 1.6 % for 1 GiB, 0.4 % for 4 GiB.
    pub fn fragment_fmfi(&mut self, target: f64, order: u32, keep_free_bytes: u64, seed: u64) -> f64 {
        let top = self.top();
        let target = if target.is_nan() { 0.0 } else { target.clamp(0.0, 1.0) };
        let relax = order.max(RELAX_ORDER).min(top);
        let press = if order > PRESS_ORDER { PRESS_ORDER } else { order.saturating_sub(1) }.min(relax);
        let keep = keep_free_bytes.div_ceil(BASE_PAGE);
        let mut rng = Rng::new(seed);

        // 1. Populate: all free frames become the fragmenter's order-0 pages.
        let mut held = vec![0u64; words_for(self.total)];
        for k in 0..=top {
            for idx in self.free[k as usize].ones() {
                range_set(&mut held, idx << k, 1 << k);
            }
        }
        for (h, o) in self.heads[0].iter_mut().zip(&held) {
            *h |= *o;
        }
        for t in self.free.iter_mut() {
            t.clear_all();
        }
        self.counts.fill(0);
        self.fragmenter += self.free_pages;
        self.free_pages = 0;

        // 2a. Candidates: whole held relax chunks, and even press chunks held outside them.
        let mut regions: Vec<u64> = Vec::new();
        let mut extras: Vec<u64> = Vec::new();
        let region_size = 1u64 << relax;
        let press_size = 1u64 << press;
        let mut r = 0u64;
        while r < self.total {
            let end = (r + region_size).min(self.total);
            if end - r == region_size && range_all_set(&held, r, region_size) {
                regions.push(r);
            } else {
                let mut c = r >> press;
                c += c & 1;
                while (c << press) + press_size <= end {
                    if range_all_set(&held, c << press, press_size) {
                        extras.push(c << press);
                    }
                    c += 2;
                }
            }
            r = end;
        }
        rng.shuffle(&mut regions);
        rng.shuffle(&mut extras);

        // 2b. Release. Relax chunks come from the front of `regions`, press regions from the back.
        // At most `relax_budget` relax chunks: the number that brings the *final* FMFI closest to
        // target. The tool's greedy rule alone can overshoot by a whole 32 MiB chunk, which is
        // 3 % of a 1 GiB release.
        let relax_budget = ((1.0 - target) * keep as f64 / region_size as f64).round() as usize;
        let (mut front, mut back, mut next_extra) = (0usize, regions.len(), 0usize);
        let (mut press_next, mut press_end) = (0u64, 0u64); // pfns within the current press region
        while self.free_pages < keep {
            if self.fmfi(order) > target && front < back && front < relax_budget {
                let start = regions[front];
                front += 1;
                self.release_held(&mut held, start, relax);
                continue;
            }
            let chunk = if let Some(&c) = extras.get(next_extra) {
                next_extra += 1;
                c
            } else if press_next < press_end {
                let c = press_next;
                press_next += 2 * press_size;
                c
            } else if front < back {
                back -= 1;
                let start = regions[back];
                // Even chunk indexes only (matters when press == relax).
                let mut c = start >> press;
                c += c & 1;
                press_next = c << press;
                press_end = start + region_size;
                continue;
            } else {
                break;
            };
            self.release_held(&mut held, chunk, press);
        }

        // 3. Out of chunks of both kinds: hand back whatever is still held, lowest address first.
        let mut w = 0usize;
        while self.free_pages < keep && w < held.len() {
            if held[w] == 0 {
                w += 1;
                continue;
            }
            let p = w as u64 * 64 + u64::from(held[w].trailing_zeros());
            let need = (keep - self.free_pages).next_power_of_two();
            let mut k = p.trailing_zeros().min(top).min(need.trailing_zeros());
            while k > 0 && !(p + (1 << k) <= self.total && range_all_set(&held, p, 1 << k)) {
                k -= 1;
            }
            self.release_held(&mut held, p, k);
        }

        self.fmfi(order)
    }

    /// Gives the fragmenter's pages `[pfn, pfn + 2^k)` back to the free lists.
    fn release_held(&mut self, held: &mut [u64], pfn: u64, k: u32) {
        range_clear(held, pfn, 1 << k);
        range_clear(&mut self.heads[0], pfn, 1 << k);
        self.fragmenter -= 1 << k;
        self.insert_free(pfn, k);
    }

    /// Virtuoso's knob: of the 2 MiB-aligned ranges that are entirely free, choose
    /// round(`fraction` × count) by seeded random sampling (`fraction` clamped to 0..1) and pin one
    /// random 4 KiB page inside each, so they can no longer be allocated as 2 MiB blocks; the rest
    /// stay whole. Pinned pages are held by the fragmenter. Returns the achieved
    /// [`PhysMem::free_2m_fraction`] (≈ 1 − `fraction` when free memory started in large blocks).
    pub fn fragment_free_2m(&mut self, fraction: f64, seed: u64) -> f64 {
        let o = PageSize::M2.order();
        let top = self.top();
        if o > top {
            return self.free_2m_fraction();
        }
        let fraction = if fraction.is_nan() { 0.0 } else { fraction.clamp(0.0, 1.0) };
        let mut candidates: Vec<u64> = Vec::new();
        for k in o..=top {
            for idx in self.free[k as usize].ones() {
                let start = idx << k;
                candidates.extend((0..1u64 << (k - o)).map(|i| start + (i << o)));
            }
        }
        candidates.sort_unstable();
        let want = ((fraction * candidates.len() as f64).round() as usize).min(candidates.len());
        let mut rng = Rng::new(seed);
        // Partial Fisher-Yates: the first `want` entries become a uniform random sample.
        for i in 0..want {
            let j = i + rng.below((candidates.len() - i) as u64) as usize;
            candidates.swap(i, j);
        }
        for &start in &candidates[..want] {
            let p = start + rng.below(1 << o);
            if self.take_block(p, 0) {
                bit_set(&mut self.heads[0], p);
                self.fragmenter += 1;
            }
        }
        self.free_2m_fraction()
    }

    /// Free blocks of exactly `order`, ascending (tests compare whole free lists with it).
    #[cfg(test)]
    fn free_list(&self, order: u32) -> Vec<u64> {
        self.free.get(order as usize).map(|t| t.ones().map(|i| i << order).collect()).unwrap_or_default()
    }

    /// Checks every invariant: bitmaps well formed, block counts and `free_pages` consistent, no two
    /// free buddies below the largest order, free blocks and allocated blocks (buddy, large and
    /// reserved) pairwise disjoint and inside memory, and every frame either free or allocated.
    /// Err describes the first violation. Costs a pass over all bitmaps (tests and checked mode).
    pub fn check_invariants(&self) -> Result<(), String> {
        let top = self.top();
        let mut free_sum = 0u64;
        let mut alloc_sum = 0u64;
        for k in 0..=top {
            let ku = k as usize;
            let tree = &self.free[ku];
            tree.check().map_err(|e| format!("order-{k} free bitmap: {e}"))?;
            if tree.len != self.total >> k {
                return Err(format!("order-{k} free bitmap sized for {} blocks", tree.len));
            }
            let n = tree.count_ones();
            if n != self.counts[ku] {
                return Err(format!("order {k}: {n} free blocks in the bitmap but the count says {}", self.counts[ku]));
            }
            free_sum += n << k;
            let heads = &self.heads[ku];
            if let Some(i) = ones(heads).find(|&i| i >= self.total >> k) {
                return Err(format!("order {k}: allocated block {i} lies outside memory"));
            }
            alloc_sum += ones(heads).count() as u64 * (1 << k);
            if k < top {
                if let Some(i) = tree.ones().find(|&i| i & 1 == 0 && tree.test(i + 1)) {
                    return Err(format!("order {k}: buddies at pfn {:#x} and {:#x} are both free", i << k, (i + 1) << k));
                }
            }
        }
        if free_sum != self.free_pages {
            return Err(format!("free lists hold {free_sum} frames but free_pages is {}", self.free_pages));
        }

        // Large allocations and reservations: inside memory, aligned, pairwise disjoint.
        let mut ranges: Vec<(u64, u64, &'static str)> = Vec::new();
        for (&s, &k) in &self.big {
            if k <= top || k >= 63 || !s.is_multiple_of(1 << k) {
                return Err(format!("large allocation at pfn {s:#x} has bad order {k}"));
            }
            ranges.push((s, s + (1 << k), "large allocation"));
        }
        for (&s, &n) in &self.reserved {
            ranges.push((s, s.saturating_add(n), "reservation"));
        }
        ranges.sort_unstable();
        for (i, &(s, e, what)) in ranges.iter().enumerate() {
            if e > self.total || s >= e {
                return Err(format!("{what} [{s:#x}, {e:#x}) lies outside memory"));
            }
            if let Some(&(s2, _, w2)) = ranges.get(i + 1) {
                if s2 < e {
                    return Err(format!("{what} at pfn {s:#x} overlaps {w2} at pfn {s2:#x}"));
                }
            }
            alloc_sum += e - s;
        }
        let in_range = |start: u64, len: u64| -> Option<&'static str> {
            let i = ranges.partition_point(|r| r.0 < start + len);
            let r = ranges.get(i.checked_sub(1)?)?;
            (r.1 > start).then_some(r.2)
        };

        // Every free or allocated buddy block overlaps nothing else.
        for k in 0..=top {
            let ku = k as usize;
            let blocks = self.free[ku].ones().map(|i| (i, true)).chain(ones(&self.heads[ku]).map(|i| (i, false)));
            for (i, is_free) in blocks {
                let p = i << k;
                let kind = if is_free { "free" } else { "allocated" };
                if is_free && bit_test(&self.heads[ku], i) {
                    return Err(format!("order-{k} block at pfn {p:#x} is both free and allocated"));
                }
                for j in k + 1..=top {
                    let ju = j as usize;
                    let idx = p >> j;
                    if self.free[ju].test(idx) || bit_test(&self.heads[ju], idx) {
                        return Err(format!("{kind} order-{k} block at pfn {p:#x} overlaps order-{j} block at pfn {:#x}", idx << j));
                    }
                }
                if let Some(what) = in_range(p, 1 << k) {
                    return Err(format!("{kind} order-{k} block at pfn {p:#x} overlaps a {what}"));
                }
            }
        }
        if free_sum + alloc_sum != self.total {
            return Err(format!("{free_sum} free + {alloc_sum} allocated frames != {} frames of memory", self.total));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    fn ok(m: &PhysMem) {
        if let Err(e) = m.check_invariants() {
            panic!("invariant violated: {e}");
        }
    }

    fn snapshot(m: &PhysMem) -> Vec<Vec<u64>> {
        (0..m.max_order()).map(|k| m.free_list(k)).collect()
    }

    #[test]
    fn fresh_memory_is_whole_including_the_tail() {
        // 1 GiB + 2 MiB + 12 KiB: 32 order-13 blocks, one order-9 and the 3-page tail.
        let m = PhysMem::new(GIB + 2 * MIB + 12 * 1024, 14);
        ok(&m);
        assert_eq!(m.total_pages(), 262_144 + 512 + 3);
        assert_eq!(m.free_pages(), m.total_pages());
        assert_eq!(m.largest_order(), 13);
        assert_eq!(m.free_blocks(13), 32);
        assert_eq!(m.free_blocks(9), 1);
        assert_eq!(m.free_blocks(1), 1);
        assert_eq!(m.free_blocks(0), 1);
        assert_eq!(m.free_blocks(14), 0);
        assert_eq!(m.fmfi(9), 3.0 / m.total_pages() as f64);
    }

    #[test]
    fn lowest_address_first_and_split() {
        let mut m = PhysMem::new(64 * MIB, 14);
        assert_eq!(m.alloc(0), Some(Pfn(0)));
        assert_eq!(m.alloc(0), Some(Pfn(1)));
        assert_eq!(m.alloc(1), Some(Pfn(2)));
        assert_eq!(m.alloc(9), Some(Pfn(512)));
        // Smallest order first: the free order-2 block at 4 beats the order-10 block at 1024.
        assert_eq!(m.alloc(2), Some(Pfn(4)));
        ok(&m);
    }

    #[test]
    fn no_double_allocation_and_memory_whole_again() {
        let mut m = PhysMem::new(256 * MIB + 20 * 1024, 14);
        let start = m.buddyinfo();
        let mut owner = vec![false; m.total_pages() as usize];
        let mut blocks = Vec::new();
        let mut rng = Rng::new(7);
        loop {
            let order = [0, 0, 0, 1, 2, 4, 9, 13][rng.below(8) as usize];
            match m.alloc(order) {
                Some(p) => {
                    assert_eq!(p.0 % (1 << order), 0, "misaligned");
                    for f in p.0..p.0 + (1 << order) {
                        assert!(!owner[f as usize], "frame {f} handed out twice");
                        assert!(!m.is_free(Pfn(f)));
                        owner[f as usize] = true;
                    }
                    blocks.push((p, order));
                }
                // Exhausted for this order; stop once even single pages are gone.
                None if order == 0 => break,
                None => {}
            }
        }
        assert_eq!(m.free_pages(), 0);
        assert!(owner.iter().all(|&o| o));
        ok(&m);
        rng.shuffle(&mut blocks);
        for (i, &(p, o)) in blocks.iter().enumerate() {
            m.free(p, o).unwrap();
            if i % 997 == 0 {
                ok(&m);
            }
        }
        ok(&m);
        assert_eq!(m.buddyinfo(), start);
        assert_eq!(m.free_blocks(m.largest_order()), start[13]);
    }

    #[test]
    fn buddies_coalesce() {
        let mut m = PhysMem::new(32 * MIB, 14);
        let a = m.alloc(3).unwrap();
        let b = m.alloc(3).unwrap();
        assert_eq!((a, b), (Pfn(0), Pfn(8)));
        assert_eq!(m.free_blocks(13), 0);
        m.free(a, 3).unwrap();
        assert_eq!(m.free_blocks(3), 1);
        m.free(b, 3).unwrap();
        // 0..8 and 8..16 merged all the way back to one 32 MiB block.
        assert_eq!(m.free_blocks(3), 0);
        assert_eq!(m.free_blocks(4), 0);
        assert_eq!(m.free_blocks(13), 1);
        ok(&m);

        // Buddies at a middle order: keep a neighbour allocated so merging stops at order 5.
        let x = m.alloc(4).unwrap();
        let y = m.alloc(4).unwrap();
        let z = m.alloc(5).unwrap();
        m.free(x, 4).unwrap();
        m.free(y, 4).unwrap();
        assert_eq!(m.free_blocks(4), 0);
        assert_eq!(m.free_blocks(5), 1);
        assert!(m.is_free(Pfn(0)) && !m.is_free(z));
        ok(&m);
    }

    #[test]
    fn bad_frees_are_errors_and_change_nothing() {
        let mut m = PhysMem::new(64 * MIB, 14);
        let a = m.alloc(2).unwrap();
        let b = m.alloc(0).unwrap();
        let before = snapshot(&m);
        let frees = [
            (Pfn(a.0), 1),     // wrong order (smaller)
            (Pfn(a.0), 3),     // wrong order (larger)
            (Pfn(a.0 + 1), 0), // inside a block
            (Pfn(1000), 0),    // free page
            (Pfn(3), 1),       // misaligned
            (Pfn(1 << 40), 0), // out of range
            (Pfn(0), 63),      // absurd order
            (Pfn(0), 14),      // large order never allocated
        ];
        for (p, o) in frees {
            let e = m.free(p, o).unwrap_err();
            assert!(!e.is_empty());
            assert_eq!(snapshot(&m), before, "state changed by bad free {p:?}/{o}: {e}");
            ok(&m);
        }
        m.free(b, 0).unwrap();
        let e = m.free(b, 0).unwrap_err();
        assert!(e.contains("double free"), "{e}");
        m.free(a, 2).unwrap();
        assert_eq!(m.free_pages(), m.total_pages());
        ok(&m);
    }

    #[test]
    fn alloc_at_and_reserve_refuse_used_ranges() {
        let mut m = PhysMem::new(4 * GIB, 14);
        let one_g = 1u64 << 18;
        // A 1 GiB page above the largest order, carved at boot.
        assert!(m.alloc_at(Pfn(one_g), 18));
        assert!(!m.alloc_at(Pfn(one_g), 18));
        assert!(!m.alloc_at(Pfn(one_g + 512), 9));
        assert!(!m.alloc_at(Pfn(one_g + 1), 0));
        assert!(!m.alloc_at(Pfn(3), 2), "misaligned");
        assert!(!m.alloc_at(Pfn(4 * one_g), 0), "outside memory");
        ok(&m);
        // A buddy-order block in the middle of a free 32 MiB block.
        assert!(m.alloc_at(Pfn(4096 + 512), 9));
        assert!(!m.alloc_at(Pfn(4096), 13));
        assert!(!m.alloc_at(Pfn(4096 + 600), 0));
        assert!(m.alloc_at(Pfn(4096 + 1024), 9));
        ok(&m);

        // Reservations skip used memory: 512 MiB aligned to 2 MiB lands after the second 2 MiB block.
        let r = m.reserve_contiguous(131_072, 9).unwrap();
        assert_eq!(r, Pfn(4096 + 1536));
        for p in [r.0, r.0 + 131_071] {
            assert!(!m.is_free(Pfn(p)));
        }
        assert!(m.is_free(Pfn(r.0 + 131_072)));
        assert!(!m.alloc_at(Pfn(r.0 + 2048), 11));
        assert!(m.free(r, 0).is_err());
        ok(&m);
        // A small range fits in the free run below the 2 MiB blocks.
        let r2 = m.reserve_contiguous(1000, 3).unwrap();
        assert_eq!(r2, Pfn(0));
        let r3 = m.reserve_contiguous(4000, 0).unwrap();
        assert_eq!(r3, Pfn(r.0 + 131_072));
        // Too large for any free run (the 1 GiB page splits memory).
        assert_eq!(m.reserve_contiguous(3 * one_g, 0), None);
        assert_eq!(m.reserve_contiguous(0, 0), None);
        ok(&m);
        // A 1 GiB page by plain alloc takes the lowest free aligned GiB.
        assert_eq!(m.alloc(18), Some(Pfn(2 * one_g)));
        assert_eq!(m.alloc(20), None);
        assert!(m.unreserve_contiguous(r2, 999).is_err());
        m.unreserve_contiguous(r2, 1000).unwrap();
        m.unreserve_contiguous(r3, 4000).unwrap();
        m.unreserve_contiguous(r, 131_072).unwrap();
        assert!(m.unreserve_contiguous(r, 131_072).is_err());
        m.free(Pfn(one_g), 18).unwrap();
        assert!(m.free(Pfn(one_g), 18).is_err());
        m.free(Pfn(2 * one_g), 18).unwrap();
        m.free(Pfn(4096 + 512), 9).unwrap();
        m.free(Pfn(4096 + 1024), 9).unwrap();
        ok(&m);
        assert_eq!(m.free_blocks(13), 128);
    }

    /// Random alloc / alloc_at / free / reserve traffic checked against a page-by-page model.
    fn model_run(max_order: u32, seed: u64) {
        let total_bytes = 64 * MIB + 44 * 1024;
        let mut m = PhysMem::new(total_bytes, max_order);
        let n = m.total_pages() as usize;
        let mut used = vec![false; n];
        let mut live: Vec<(u64, u32)> = Vec::new();
        let mut reservations: Vec<(u64, u64)> = Vec::new();
        let mut rng = Rng::new(seed);
        let range_free = |used: &[bool], p: u64, len: u64| p + len <= n as u64 && used[p as usize..(p + len) as usize].iter().all(|u| !u);
        let fits = |used: &[bool], len: u64, align: u64| (0..n as u64).step_by(align as usize).find(|&p| range_free(used, p, len));
        for step in 0..12_000 {
            match rng.below(10) {
                0..=3 => {
                    let order = rng.below(16) as u32;
                    match m.alloc(order) {
                        Some(Pfn(p)) => {
                            assert_eq!(p % (1 << order), 0);
                            assert!(range_free(&used, p, 1 << order), "step {step}: {p:#x}/{order}");
                            used[p as usize..(p + (1 << order)) as usize].fill(true);
                            live.push((p, order));
                        }
                        None => assert_eq!(fits(&used, 1 << order, 1 << order), None),
                    }
                }
                4 => {
                    let order = rng.below(16) as u32;
                    let p = rng.below(n as u64 + 64) >> order << order;
                    let expect = range_free(&used, p, 1 << order);
                    assert_eq!(m.alloc_at(Pfn(p), order), expect, "step {step}: {p:#x}/{order}");
                    if expect {
                        used[p as usize..(p + (1 << order)) as usize].fill(true);
                        live.push((p, order));
                    }
                }
                5..=8 if !live.is_empty() => {
                    let i = rng.below(live.len() as u64) as usize;
                    let (p, o) = live.swap_remove(i);
                    if o > 0 {
                        assert!(m.free(Pfn(p), o - 1).is_err());
                    }
                    assert!(m.free(Pfn(p), o + 1).is_err());
                    m.free(Pfn(p), o).unwrap();
                    assert!(m.free(Pfn(p), o).is_err(), "double free accepted");
                    used[p as usize..(p + (1 << o)) as usize].fill(false);
                }
                9 if step % 7 == 0 => {
                    if let Some((p, len)) = reservations.pop() {
                        m.unreserve_contiguous(Pfn(p), len).unwrap();
                        used[p as usize..(p + len) as usize].fill(false);
                    } else {
                        let len = 1 + rng.below(3000);
                        let align = rng.below(6) as u32;
                        let got = m.reserve_contiguous(len, align).map(|p| p.0);
                        assert_eq!(got, fits(&used, len, 1 << align), "step {step}");
                        if let Some(p) = got {
                            used[p as usize..(p + len) as usize].fill(true);
                            reservations.push((p, len));
                        }
                    }
                }
                _ => {}
            }
            let free_model = used.iter().filter(|u| !**u).count() as u64;
            assert_eq!(m.free_pages(), free_model, "step {step}");
            for _ in 0..4 {
                let p = rng.below(n as u64);
                assert_eq!(m.is_free(Pfn(p)), !used[p as usize], "step {step}: page {p:#x}");
            }
            if step % 500 == 0 {
                ok(&m);
            }
        }
        ok(&m);
        for (p, o) in live {
            m.free(Pfn(p), o).unwrap();
        }
        for (p, len) in reservations {
            m.unreserve_contiguous(Pfn(p), len).unwrap();
        }
        ok(&m);
        assert_eq!(m.free_pages(), m.total_pages());
        assert_eq!(m.buddyinfo(), PhysMem::new(total_bytes, max_order).buddyinfo());
    }

    #[test]
    fn random_operations_match_a_page_model() {
        model_run(14, 1);
        // Small largest order: most requests are multi-block allocations above it.
        model_run(5, 2);
        model_run(1, 3);
    }

    fn fragmented(target: f64, seed: u64) -> (PhysMem, f64) {
        let mut m = PhysMem::new(16 * GIB, 14);
        let got = m.fragment_fmfi(target, 9, 4 * GIB, seed);
        (m, got)
    }

    #[test]
    fn fmfi_targets_are_reached() {
        for (mem, keep) in [(16 * GIB, 4 * GIB), (4 * GIB, GIB)] {
            for target in [0.1, 0.3, 0.5, 0.7, 0.9, 0.99] {
                let mut m = PhysMem::new(mem, 14);
                let got = m.fragment_fmfi(target, 9, keep, 42);
                let case = format!("{mem} B, keep {keep} B, target {target}: got {got}");
                ok(&m);
                assert!((got - target).abs() <= 0.02, "{case}");
                assert_eq!(got, m.fmfi(9));
                // keep_free_bytes honoured, overshooting by less than one chunk.
                assert!(m.free_pages() >= keep / BASE_PAGE, "{case}");
                assert!(m.free_pages() < (keep + 32 * MIB) / BASE_PAGE, "{case}");
                assert_eq!(m.fragmenter_pages() + m.free_pages(), m.total_pages());
                // Press chunks never merge above 512 KiB; relax chunks stay 32 MiB.
                for k in 0..14 {
                    if k != 7 && k != 13 {
                        assert_eq!(m.free_blocks(k), 0, "order {k}; {case}");
                    }
                }
                assert_eq!(m.fmfi(7), 0.0, "64 KiB..512 KiB contiguity stays whole; {case}");
            }
        }
    }

    #[test]
    fn fmfi_with_preallocated_memory_and_keep_larger_than_chunks() {
        let mut m = PhysMem::new(8 * GIB + 300 * 1024, 14);
        // Some kernel memory first, scattered at several orders.
        let mut held = Vec::new();
        for i in 0..3000u32 {
            held.push((m.alloc(i % 5).unwrap(), i % 5));
        }
        let got = m.fragment_fmfi(0.5, 9, GIB, 3);
        ok(&m);
        assert!((got - 0.5).abs() <= 0.02, "{got}");
        assert!(m.free_pages() >= GIB / BASE_PAGE);
        for (p, o) in held {
            m.free(p, o).unwrap();
        }
        ok(&m);
        // Asking for more than the whole machine gives everything back.
        let mut m = PhysMem::new(GIB, 14);
        let got = m.fragment_fmfi(0.5, 9, 2 * GIB, 3);
        ok(&m);
        assert_eq!(m.free_pages(), m.total_pages());
        assert_eq!(m.free_blocks(13), 32);
        assert_eq!(got, 0.0);
        // Keeping nothing free leaves nothing free.
        let mut m = PhysMem::new(GIB, 14);
        assert_eq!(m.fragment_fmfi(0.5, 9, 0, 3), 0.0);
        assert_eq!(m.free_pages(), 0);
        ok(&m);
    }

    #[test]
    fn fragmented_memory_still_allocates_and_frees() {
        let (mut m, _) = fragmented(0.9, 5);
        let mut got = Vec::new();
        while let Some(p) = m.alloc(9) {
            got.push(p);
        }
        // Only relax chunks can provide 2 MiB.
        assert_eq!(got.len() as u64 % 16, 0);
        assert!(m.alloc(7).is_some());
        for p in got {
            m.free(p, 9).unwrap();
        }
        ok(&m);
    }

    #[test]
    fn fragmentation_is_deterministic_per_seed() {
        let (a, fa) = fragmented(0.5, 1);
        let (b, fb) = fragmented(0.5, 1);
        let (c, _) = fragmented(0.5, 2);
        assert_eq!(fa, fb);
        assert_eq!(snapshot(&a), snapshot(&b));
        assert_ne!(snapshot(&a), snapshot(&c));

        let mut x = PhysMem::new(4 * GIB, 14);
        let mut y = PhysMem::new(4 * GIB, 14);
        let mut z = PhysMem::new(4 * GIB, 14);
        x.fragment_free_2m(0.4, 9);
        y.fragment_free_2m(0.4, 9);
        z.fragment_free_2m(0.4, 10);
        assert_eq!(snapshot(&x), snapshot(&y));
        assert_ne!(snapshot(&x), snapshot(&z));
    }

    #[test]
    fn free_2m_knob() {
        for fraction in [0.0, 0.1, 0.5, 0.9, 1.0] {
            let mut m = PhysMem::new(8 * GIB, 14);
            let got = m.fragment_free_2m(fraction, 11);
            ok(&m);
            assert!((got - (1.0 - fraction)).abs() <= 0.02, "fraction {fraction}: free_2m_fraction {got}");
            assert_eq!(got, m.free_2m_fraction());
            let blocks_2m = m.total_pages() / 512;
            let pinned = (fraction * blocks_2m as f64).round() as u64;
            assert_eq!(m.fragmenter_pages(), pinned);
            assert_eq!(m.free_pages(), m.total_pages() - pinned);
            // Exactly the unpinned 2 MiB blocks can still be allocated as such.
            let mut n = 0;
            while m.alloc(9).is_some() {
                n += 1;
            }
            assert_eq!(n, blocks_2m - pinned);
        }
        // Without 2 MiB blocks at all the knob changes nothing.
        let mut m = PhysMem::new(GIB, 9);
        assert_eq!(m.fragment_free_2m(0.5, 1), 0.0);
        assert_eq!(m.free_pages(), m.total_pages());
    }

    #[test]
    fn degenerate_inputs_do_not_panic() {
        let mut m = PhysMem::new(0, 0);
        assert_eq!(m.max_order(), 1);
        assert_eq!(m.alloc(0), None);
        assert_eq!(m.alloc(99), None);
        assert!(!m.alloc_at(Pfn(0), 0));
        assert!(m.free(Pfn(0), 0).is_err());
        assert_eq!(m.reserve_contiguous(1, 0), None);
        assert_eq!(m.fmfi(9), 0.0);
        assert_eq!(m.fragment_fmfi(0.5, 9, GIB, 1), 0.0);
        assert_eq!(m.fragment_free_2m(0.5, 1), 0.0);
        ok(&m);

        let mut m = PhysMem::new(5000, 100);
        assert_eq!(m.max_order(), MAX_ORDER_LIMIT);
        assert_eq!(m.total_pages(), 1);
        assert!(m.alloc(1).is_none());
        assert_eq!(m.alloc(0), Some(Pfn(0)));
        assert!(!m.alloc_at(Pfn(u64::MAX), 62));
        assert_eq!(m.reserve_contiguous(u64::MAX, 62), None);
        assert!(m.free(Pfn(u64::MAX), u32::MAX).is_err());
        ok(&m);

        let mut m = PhysMem::new(64 * MIB, 3);
        assert_eq!(m.alloc(5), Some(Pfn(0)));
        m.fragment_fmfi(f64::NAN, 0, 8 * MIB, 1);
        m.fragment_fmfi(2.0, 40, 16 * MIB, 1);
        ok(&m);
        let mut m = PhysMem::new(64 * MIB, 1);
        m.fragment_fmfi(0.5, 9, 8 * MIB, 1);
        assert!(m.free_pages() >= 2048);
        ok(&m);
    }

    /// Speed: `cargo test --release -- --ignored --nocapture speed`.
    #[test]
    #[ignore]
    fn speed() {
        use std::time::Instant;
        let pairs = 20_000_000u64;
        let rate = |dt: f64| pairs as f64 / dt / 1e6;
        // Steady state of a faulting workload: a pool of live pages, one free + one alloc per step.
        // With 1 M pages the loop's own random read of `live` (8 MB) misses the cache and the
        // dependent free waits for it; with 64 K pages the pool stays cached.
        for pool in [1_000_000usize, 65_536] {
            let mut m = PhysMem::new(32 * GIB, 14);
            let mut live: Vec<Pfn> = (0..pool).map(|_| m.alloc(0).unwrap()).collect();
            let mut rng = Rng::new(1);
            let t = Instant::now();
            for _ in 0..pairs {
                let i = rng.below(live.len() as u64) as usize;
                m.free(live[i], 0).unwrap();
                live[i] = m.alloc(0).unwrap();
            }
            println!("random-churn ({pool} live pages) alloc+free pairs: {:.1} M/s", rate(t.elapsed().as_secs_f64()));
        }
        let mut rng = Rng::new(2);

        // Fault-then-exit: a process faults 1 M pages in, then unmaps them in fault order.
        let mut m = PhysMem::new(32 * GIB, 14);
        let mut pages = vec![Pfn(0); 1_000_000];
        let t = Instant::now();
        for _ in 0..pairs / 1_000_000 {
            for p in pages.iter_mut() {
                *p = m.alloc(0).unwrap();
            }
            for &p in pages.iter() {
                m.free(p, 0).unwrap();
            }
        }
        println!("fault-then-exit alloc+free pairs: {:.1} M/s", rate(t.elapsed().as_secs_f64()));

        // Mixed sizes: 4 KiB, 64 KiB and 2 MiB pages churning on a half-full machine.
        let mut m = PhysMem::new(32 * GIB, 14);
        let orders = [0u32, 0, 0, 0, 0, 0, 4, 9];
        let mut live: Vec<(Pfn, u32)> = (0..100_000)
            .map(|i| {
                let o = orders[i % orders.len()];
                (m.alloc(o).unwrap(), o)
            })
            .collect();
        let t = Instant::now();
        for _ in 0..pairs {
            let i = rng.below(live.len() as u64) as usize;
            let (p, o) = live[i];
            m.free(p, o).unwrap();
            live[i] = (m.alloc(o).unwrap(), o);
        }
        println!("mixed-order churn alloc+free pairs: {:.1} M/s", rate(t.elapsed().as_secs_f64()));

        // Worst case: alloc and immediately free on an empty machine (split 13 levels, merge 13).
        let mut m = PhysMem::new(32 * GIB, 14);
        let t = Instant::now();
        for _ in 0..pairs {
            let p = m.alloc(0).unwrap();
            m.free(p, 0).unwrap();
        }
        println!("split/merge alloc+free pairs: {:.1} M/s", rate(t.elapsed().as_secs_f64()));

        for (gib, keep) in [(32u64, 8u64), (256, 64)] {
            let mut m = PhysMem::new(gib * GIB, 14);
            let t = Instant::now();
            let f = m.fragment_fmfi(0.99, 9, keep * GIB, 1);
            println!("fragment_fmfi {gib} GiB (keep {keep} GiB, target 0.99): {:.1} ms, fmfi {f:.4}", t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            let mut m = PhysMem::new(gib * GIB, 14);
            let f = m.fragment_free_2m(0.5, 1);
            println!("fragment_free_2m {gib} GiB: {:.1} ms, free_2m_fraction {f:.4}", t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            m.check_invariants().unwrap();
            println!("check_invariants {gib} GiB: {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
        }
    }
}
