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
//! A second bitmap of the same shape per order holds the *tail-class* free blocks (see "Tail
//! insertion" below); a free block is in exactly one of the two. A third bitmap per order marks the
//! *heads of allocated blocks*, so [`PhysMem::free`] can prove that the block being freed was allocated
//! with exactly that order before touching anything. Together the bitmaps cost about three quarters
//! of a byte per 4 KiB frame (48 MiB for 256 GiB), of which the tail bitmaps' third is zero-filled
//! on demand by the OS and stays untouched until something inserts at the tail. Allocations larger than
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
//! # Tail insertion
//! Linux can add a free block at the *tail* of its order's free list instead of the head, so that
//! ordinary allocations, which pop the head, reach it last. Elastic Translations' CoalaPaging relies on
//! this: when it carves one frame (or one 2 MiB block) out of a larger free block for a 64 KiB or
//! 32 MiB group, the remainders go to the tail, where they wait for the group's later faults instead
//! of being handed to unrelated allocations. An address-ordered allocator has no list ends, so we
//! model the tail as a second *class* of free block per order, with its own summary-tree bitmap:
//! * [`PhysMem::alloc`] takes the lowest *normal* block of the smallest order that has one, and falls
//!   back to the tail class (lowest tail block of the smallest order) only when no normal block of any
//!   sufficient order is left. "Taken last" thus means after all normal memory, not merely after the
//!   normal blocks of the same order: splitting a larger normal block is preferred to consuming a
//!   remainder another group is waiting for.
//! * Only the targeted allocations put blocks in the tail class: the remainders of
//!   [`PhysMem::alloc_exact`] and [`PhysMem::alloc_in_group`]. Splits by [`PhysMem::alloc`],
//!   [`PhysMem::alloc_at`], reservations and the fragmenters put their remainders in the normal class
//!   even when they split a tail block, as Linux's `expand()` adds split remainders at the head.
//! * A freed block is normal, and a block that merges with its free buddy (of either class) becomes
//!   a normal block: once merged it is no longer a remainder of a partly used group.
//! * Everything that asks *whether* memory is free ([`PhysMem::free_blocks`], [`PhysMem::buddyinfo`],
//!   [`PhysMem::fmfi`], [`PhysMem::free_pages_at_least`], [`PhysMem::free_runs`], [`PhysMem::is_free`],
//!   reservations, the fragmenters) sees both classes alike. [`PhysMem::tail_blocks`] counts the tail
//!   class alone.
//!
//! Remainders of a split are always smaller than the block split, so the largest order never holds
//! tail blocks. With no tail blocks the allocator behaves exactly as it did before the class existed.
//!
//! # Top-up of an order's free list
//! [`PhysMem::topup`] reproduces CoalaPaging's order-9 top-up: when few blocks of an order are free,
//! split one larger block the way Linux's `expand()` does, leaving the two lowest pieces as *unmerged
//! free buddies*. This is the only way two free buddies coexist (Linux tolerates it too); they merge as
//! soon as either is allocated and freed again, and [`PhysMem::alloc_at`] and reservations take a
//! range that such buddies tile just as if it were one free block.
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
//! They stand for other tenants' movable memory: [`PhysMem::compact`] may move them elsewhere to
//! make a free 2 MiB block, as Linux's compaction migrates movable pages (module `compact`).

mod bits;
mod compact;
mod frag;

pub use compact::Compacted;
#[cfg(test)]
mod tests;

use bits::*;
use std::collections::BTreeMap;

use crate::addr::{Pfn, BASE_PAGE};

/// Largest `max_order` accepted by [`PhysMem::new`]; larger values are clamped to it. Order 39 is
/// 2 PiB, far beyond any simulated machine, and keeps every `1 << order` well inside a `u64`.
pub const MAX_ORDER_LIMIT: u32 = 40;

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
    /// Normal-class free bitmap per order `0..max_order`.
    free: Vec<BitTree>,
    /// Tail-class free bitmap per order `0..max_order`, disjoint from `free` (module docs).
    tail: Vec<BitTree>,
    /// Normal-class free blocks per order (popcount of `free[k]`, kept so statistics are O(orders)).
    counts: Vec<u64>,
    /// Tail-class free blocks per order (popcount of `tail[k]`).
    tail_counts: Vec<u64>,
    /// Sum of `tail_counts`. Zero unless targeted allocations ran, which lets the hot paths (the merge
    /// loop of `free`, `alloc`) skip the tail bitmaps entirely.
    tail_total: u64,
    /// Set by `topup`, the only operation that leaves free buddies unmerged; until then (and again
    /// after `fragment_fmfi` rebuilt the free lists) `check_invariants` forbids free buddies outright.
    unmerged: bool,
    /// Sum of `(counts[k] + tail_counts[k]) << k`.
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
    /// Which frames the fragmenter holds (bit per frame), empty until a knob runs: compaction
    /// may move these, and only these.
    held: Vec<u64>,
}

/// The two classes of free block (module docs, "Tail insertion").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// Taken by [`PhysMem::alloc`] first: everything freed, merged or split by ordinary allocation.
    Normal,
    /// Remainders of targeted allocations, taken only once no normal block fits.
    Tail,
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
    fn total_pages(&self) -> u64 {
        PhysMem::total_pages(self)
    }
    fn alloc_in_range(&mut self, order: u32, lo: u64, hi: u64) -> Option<Pfn> {
        PhysMem::alloc_in_range(self, order, lo, hi)
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
            tail: (0..max_order).map(|k| BitTree::new(total >> k)).collect(),
            counts: vec![0; max_order as usize],
            tail_counts: vec![0; max_order as usize],
            tail_total: 0,
            unmerged: false,
            free_pages: 0,
            heads: (0..max_order).map(|k| vec![0u64; words_for(total >> k)]).collect(),
            big: BTreeMap::new(),
            reserved: BTreeMap::new(),
            fragmenter: 0,
            held: Vec::new(),
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

    /// Adds one block to the order-`k` normal free list without coalescing (callers guarantee its
    /// buddy is not free). Callers keep `free_pages` right: a split or merge chain moves many blocks
    /// between lists but changes the free total once.
    #[inline]
    fn list_add(&mut self, pfn: u64, k: u32) {
        self.free[k as usize].set(pfn >> k);
        self.counts[k as usize] += 1;
    }

    /// Removes one block from the order-`k` normal free list (see [`PhysMem::list_add`]).
    #[inline]
    fn list_remove(&mut self, pfn: u64, k: u32) {
        self.free[k as usize].clear(pfn >> k);
        self.counts[k as usize] -= 1;
    }

    /// [`PhysMem::list_add`] into either class.
    #[inline]
    fn list_add_in(&mut self, pfn: u64, k: u32, class: Class) {
        match class {
            Class::Normal => self.list_add(pfn, k),
            Class::Tail => {
                self.tail[k as usize].set(pfn >> k);
                self.tail_counts[k as usize] += 1;
                self.tail_total += 1;
            }
        }
    }

    /// [`PhysMem::list_remove`] from either class.
    #[inline]
    fn list_remove_in(&mut self, pfn: u64, k: u32, class: Class) {
        match class {
            Class::Normal => self.list_remove(pfn, k),
            Class::Tail => {
                self.tail[k as usize].clear(pfn >> k);
                self.tail_counts[k as usize] -= 1;
                self.tail_total -= 1;
            }
        }
    }

    /// The class of free block `idx` of order `k`, None if it is not a free block. The tail bitmap is
    /// read only while tail blocks exist, so runs without them pay one word read as before.
    #[inline]
    fn free_class(&self, idx: u64, k: u32) -> Option<Class> {
        if self.free[k as usize].test(idx) {
            Some(Class::Normal)
        } else if self.tail_total > 0 && self.tail[k as usize].test(idx) {
            Some(Class::Tail)
        } else {
            None
        }
    }

    /// The free-block bitmap of order `k` and `class`.
    #[inline]
    fn tree_mut(&mut self, k: u32, class: Class) -> &mut BitTree {
        match class {
            Class::Normal => &mut self.free[k as usize],
            Class::Tail => &mut self.tail[k as usize],
        }
    }

    /// Free blocks of order `k`, both classes, ascending (fragmenters and checks; not a hot path).
    fn free_ones(&self, k: u32) -> impl Iterator<Item = u64> + '_ {
        let ku = k as usize;
        // Merge the two ascending streams. The tail stream stops after its last block, so with no
        // tail blocks it never reads the tail bitmap (whose pages the OS has not even mapped yet).
        let mut a = self.free[ku].ones().peekable();
        let mut b = self.tail[ku].ones().take(self.tail_counts[ku] as usize).peekable();
        std::iter::from_fn(move || match (a.peek(), b.peek()) {
            (Some(&x), Some(&y)) if y < x => b.next(),
            (Some(_), _) => a.next(),
            (None, _) => b.next(),
        })
    }

    /// Returns the aligned block `[pfn, pfn + 2^k)` (k ≤ top) to the free lists, merging with free
    /// buddies of either class as far as the largest order. The result is a normal block: a merged
    /// block is no longer a remainder waiting for its group.
    #[inline]
    fn insert_free(&mut self, pfn: u64, k: u32) {
        let top = self.top();
        self.free_pages += 1 << k;
        let mut p = pfn;
        let mut k = k;
        while k < top {
            let buddy = (p >> k) ^ 1;
            let Some(class) = self.free_class(buddy, k) else {
                break;
            };
            self.list_remove_in(buddy << k, k, class);
            p &= !(1u64 << k);
            k += 1;
        }
        self.list_add(p, k);
    }

    /// The free block containing `pfn` whose order is at least `from`, as (first pfn, order, class).
    fn block_at(&self, pfn: u64, from: u32) -> Option<(u64, u32, Class)> {
        if pfn >= self.total {
            return None;
        }
        (from..=self.top()).find_map(|k| self.free_class(pfn >> k, k).map(|c| ((pfn >> k) << k, k, c)))
    }

    /// The free block containing `pfn`, as (first pfn, order).
    fn free_block_at(&self, pfn: u64) -> Option<(u64, u32)> {
        self.block_at(pfn, 0).map(|(s, k, _)| (s, k))
    }

    /// The lowest free block (either class) starting at or after `pfn`.
    fn next_free_block(&self, pfn: u64) -> Option<(u64, u32)> {
        let mut best: Option<(u64, u32)> = None;
        for k in 0..=self.top() {
            let from = pfn.div_ceil(1 << k);
            let normal = self.free[k as usize].next_set(from);
            let tail = if self.tail_counts[k as usize] > 0 { self.tail[k as usize].next_set(from) } else { None };
            if let Some(i) = normal.into_iter().chain(tail).min() {
                let start = i << k;
                if best.is_none_or(|(b, _)| start < b) {
                    best = Some((start, k));
                }
            }
        }
        best
    }

    /// Removes the free block `[start, start + 2^j)` of `class` and splits it down to the aligned
    /// block `[pfn, pfn + 2^k)` inside it, which leaves the free lists; the halves that do not hold
    /// `pfn` stay free in class `rest`.
    #[inline]
    fn split_out(&mut self, start: u64, j: u32, class: Class, pfn: u64, k: u32, rest: Class) {
        self.list_remove_in(start, j, class);
        for s in (k..j).rev() {
            self.list_add_in(((pfn >> s) ^ 1) << s, s, rest);
        }
        self.free_pages -= 1 << k;
    }

    /// Removes the aligned block `[pfn, pfn + 2^k)` (k ≤ top, inside memory) from the free lists if it
    /// is entirely free, splitting the free block that contains it and leaving the remainders in class
    /// `rest`; false (and no change) otherwise. Since free buddies are merged, an entirely free aligned
    /// block lies inside one free block, except where [`PhysMem::topup`] left unmerged buddies: then
    /// the block is tiled by smaller free blocks, which are all taken.
    fn take_block(&mut self, pfn: u64, k: u32, rest: Class) -> bool {
        if let Some((start, j, class)) = self.block_at(pfn, k) {
            self.split_out(start, j, class, pfn, k, rest);
            return true;
        }
        // Tiled case. A free block meeting the range but not containing all of it is smaller than
        // 2^k and aligned, so it starts where the previous one ended: walk them. With merged buddies
        // the free prefix of the range is at most k blocks, so a refusal stays cheap.
        let end = pfn + (1 << k);
        let mut p = pfn;
        while p < end {
            let Some((_, j, _)) = self.block_at(p, 0) else {
                return false;
            };
            p += 1 << j;
        }
        let mut p = pfn;
        while p < end {
            let Some((s, j, class)) = self.block_at(p, 0) else {
                break; // cannot happen: the walk above found every piece
            };
            self.list_remove_in(s, j, class);
            p += 1 << j;
        }
        self.free_pages -= 1 << k;
        true
    }

    /// The smallest order ≥ `order` holding a normal free block, else the smallest holding a tail
    /// block (the class rule of [`PhysMem::alloc`]).
    #[inline]
    fn smallest_free_order(&self, order: u32) -> Option<(u32, Class)> {
        let o = order as usize;
        if let Some(d) = self.counts.get(o..)?.iter().position(|&c| c > 0) {
            return Some((order + d as u32, Class::Normal));
        }
        if self.tail_total == 0 {
            return None;
        }
        let d = self.tail_counts.get(o..)?.iter().position(|&c| c > 0)?;
        Some((order + d as u32, Class::Tail))
    }

    /// Allocates a naturally aligned block of 2^`order` frames: the lowest-addressed free normal block
    /// of the smallest order ≥ `order` that has one, split as needed (lower half kept, upper halves
    /// freed as normal blocks). Only when no normal block of a sufficient order is left does it take
    /// the lowest tail block of the smallest such order (module docs, "Tail insertion"). Orders above
    /// [`PhysMem::largest_order`] take the lowest aligned run of free largest-order blocks. None when
    /// nothing fits.
    pub fn alloc(&mut self, order: u32) -> Option<Pfn> {
        let top = self.top();
        if order > top {
            return self.alloc_big(order);
        }
        let (j, class) = self.smallest_free_order(order)?;
        let idx = self.tree_mut(j, class).first_mut()?;
        let pfn = idx << j;
        self.split_out(pfn, j, class, pfn, order, Class::Normal);
        bit_set(&mut self.heads[order as usize], pfn >> order);
        Some(Pfn(pfn))
    }

    /// A partition's buddy allocator (SPARTA Algorithm 1, Linux's `alloc_pages_node`): like
    /// [`PhysMem::alloc`] — the smallest order ≥ `order` that has a free block, normal class before
    /// tail, lowest address first, split as needed — but only blocks inside the frames
    /// `[lo, hi)` qualify, or the range's first block carved out of a free block that holds it
    /// (a range smaller than the largest buddy block). Partitions aligned to the largest buddy
    /// block never share a block, so this is a buddy allocator per partition over one set of free
    /// lists. None when the range has no free block of a sufficient order (orders above the
    /// largest buddy order are refused).
    pub fn alloc_in_range(&mut self, order: u32, lo: u64, hi: u64) -> Option<Pfn> {
        let top = self.top();
        if order > top || lo >= hi {
            return None;
        }
        for j in order..=top {
            for class in [Class::Normal, Class::Tail] {
                if class == Class::Tail && self.tail_total == 0 {
                    continue;
                }
                // A free block that starts before the range but reaches into it (a range smaller
                // than the largest block, or not aligned to it): carve the range's first block.
                let first = lo.next_multiple_of(1 << order);
                let container = first >> j;
                let (cs, ce) = (container << j, (container + 1) << j);
                let tree = self.tree_mut(j, class);
                if (cs < lo || ce > hi) && first + (1 << order) <= hi && tree.test(container) {
                    self.split_out(cs, j, class, first, order, Class::Normal);
                    bit_set(&mut self.heads[order as usize], first >> order);
                    return Some(Pfn(first));
                }
                let Some(idx) = tree.next_set_mut(lo.div_ceil(1 << j)) else { continue };
                let start = idx << j;
                if start + (1 << j) > hi {
                    continue;
                }
                self.split_out(start, j, class, start, order, Class::Normal);
                bit_set(&mut self.heads[order as usize], start >> order);
                return Some(Pfn(start));
            }
        }
        None
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
        self.alloc_at_in(pfn, order, Class::Normal)
    }

    /// CoalaPaging's targeted allocation (Elastic Translations §2.1 step 2): allocates exactly the
    /// naturally aligned block `[pfn, pfn + 2^order)` if it is entirely free, like
    /// [`PhysMem::alloc_at`], but the remainders of splitting the free block that contains it go to
    /// the tail class, so they stay free for the rest of the group being built. False, with no change,
    /// if any part is in use or the block is misaligned or outside memory. Free it with
    /// [`PhysMem::free`] and the same order.
    pub fn alloc_exact(&mut self, pfn: Pfn, order: u32) -> bool {
        self.alloc_at_in(pfn, order, Class::Tail)
    }

    /// [`PhysMem::alloc_at`] with the split remainders in class `rest`.
    fn alloc_at_in(&mut self, pfn: Pfn, order: u32, rest: Class) -> bool {
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
        if !self.take_block(p, order, rest) {
            return false;
        }
        bit_set(&mut self.heads[order as usize], p >> order);
        true
    }

    /// CoalaPaging's allocation for a group none of whose frames is placed yet (Elastic Translations
    /// §2.1 step 3, §2.2 step 3). Picks a free block of order ≥ `order + group_order` — the class rule
    /// of [`PhysMem::alloc`]: lowest normal block of the smallest order that has one, else lowest
    /// tail block of the smallest order — and allocates from it the order-`order` block at index
    /// `offset` of its first aligned 2^(`order` + `group_order`) frames; every remainder of the split
    /// goes to the tail class, so the rest of the group stays free for the group's later faults. With
    /// `exact_block_order` only blocks of exactly `order + group_order` qualify (the 32 MiB path
    /// takes an order-13 block or nothing). None, with no change, if no block qualifies, if
    /// `offset` ≥ 2^`group_order`, or if `order + group_order` exceeds [`PhysMem::largest_order`].
    /// For a 64 KiB group: `(0, 4, va_index % 16, false)`; for 32 MiB: `(9, 4, i, true)`. Free the
    /// result with [`PhysMem::free`] and `order`.
    pub fn alloc_in_group(&mut self, order: u32, group_order: u32, offset: u64, exact_block_order: bool) -> Option<Pfn> {
        let g = order.checked_add(group_order).filter(|&g| g <= self.top())?;
        if offset >> group_order != 0 {
            return None;
        }
        let (j, class) = if exact_block_order {
            let gu = g as usize;
            match (self.counts[gu], self.tail_counts[gu]) {
                (0, 0) => return None,
                (0, _) => (g, Class::Tail),
                _ => (g, Class::Normal),
            }
        } else {
            self.smallest_free_order(g)?
        };
        let start = self.tree_mut(j, class).first_mut()? << j;
        let pfn = start + (offset << order);
        self.split_out(start, j, class, pfn, order, Class::Tail);
        bit_set(&mut self.heads[order as usize], pfn >> order);
        Some(Pfn(pfn))
    }

    /// CoalaPaging's top-up of an order's free list (Elastic Translations §2.2, `hpmd_order_topup`):
    /// if at most `low` blocks of `order` are free (both classes), take the smallest order above
    /// `order` holding more than `min_source` free blocks, and split its lowest block (normal before
    /// tail) as Linux's `expand()` does: one normal block of each order between, plus the two lowest
    /// order-`order` pieces as unmerged free buddies (module docs, "Top-up"). For the 2 MiB list:
    /// `topup(9, 32, 32)`. Returns whether it split; no frame changes hands either way.
    pub fn topup(&mut self, order: u32, low: u64, min_source: u64) -> bool {
        let top = self.top();
        if order >= top || self.free_blocks(order) > low {
            return false;
        }
        let Some(j) = (order + 1..=top).find(|&j| self.free_blocks(j) > min_source) else {
            return false;
        };
        let class = if self.counts[j as usize] > 0 { Class::Normal } else { Class::Tail };
        let Some(idx) = self.tree_mut(j, class).first_mut() else {
            return false;
        };
        let start = idx << j;
        self.list_remove_in(start, j, class);
        for s in (order..j).rev() {
            self.list_add(start + (1 << s), s);
        }
        // The lowest piece's buddy (start + 2^order) was just added: the two stay unmerged.
        self.list_add(start, order);
        self.unmerged = true;
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
            let took = m.take_block(p, k, Class::Normal);
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

    /// Splits the allocated block `[pfn, pfn + 2^order)` into 2^(order − into) allocated blocks of
    /// order `into`, each freed on its own later (Linux's `split_page`; a 32 MiB promotion maps
    /// its order-13 block as sixteen 2 MiB pages). Err, with no change, if no block of `order` is
    /// allocated at `pfn` or `into > order`.
    pub fn split_allocated(&mut self, pfn: Pfn, order: u32, into: u32) -> Result<(), String> {
        let p = pfn.0;
        if into > order || order > self.top() || !bit_test(&self.heads[order as usize], p >> order) {
            return Err(format!("split of order-{order} block at pfn {p:#x} into order {into}: no such allocated block"));
        }
        bit_clear(&mut self.heads[order as usize], p >> order);
        for i in 0..1u64 << (order - into) {
            bit_set(&mut self.heads[into as usize], (p >> into) + i);
        }
        Ok(())
    }

    /// Frees a block previously allocated (by [`PhysMem::alloc`], [`PhysMem::alloc_at`],
    /// [`PhysMem::alloc_exact`] or [`PhysMem::alloc_in_group`]) with the same order, merging it with
    /// free buddies of either class up to the largest order; the result is a normal free block.
    /// Freeing anything else — a free page (double free), a block allocated with another order, a
    /// page inside a reservation, a misaligned or out-of-range block — is a simulator bug: Err
    /// describes it and nothing changes.
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

    /// Number of free blocks of exactly `order` in the free lists, both classes (0 above the
    /// largest order).
    pub fn free_blocks(&self, order: u32) -> u64 {
        let o = order as usize;
        self.counts.get(o).copied().unwrap_or(0) + self.tail_counts.get(o).copied().unwrap_or(0)
    }

    /// Number of those [`PhysMem::free_blocks`] of `order` that are in the tail class.
    pub fn tail_blocks(&self, order: u32) -> u64 {
        self.tail_counts.get(order as usize).copied().unwrap_or(0)
    }

    /// Free frames that lie in free blocks of order ≥ `order`.
    pub fn free_pages_at_least(&self, order: u32) -> u64 {
        self.counts.iter().zip(&self.tail_counts).enumerate().skip(order as usize).map(|(k, (&c, &t))| (c + t) << k).sum()
    }

    /// Free blocks per order `0..max_order`, both classes, like one row of `/proc/buddyinfo`.
    pub fn buddyinfo(&self) -> Vec<u64> {
        self.counts.iter().zip(&self.tail_counts).map(|(&c, &t)| c + t).collect()
    }

    /// Free blocks of exactly `order`, both classes, ascending (tests compare whole free lists).
    #[cfg(test)]
    fn free_list(&self, order: u32) -> Vec<u64> {
        if order >= self.max_order {
            return Vec::new();
        }
        self.free_ones(order).map(|i| i << order).collect()
    }

    /// Tail-class free blocks of exactly `order`, ascending.
    #[cfg(test)]
    fn tail_list(&self, order: u32) -> Vec<u64> {
        self.tail.get(order as usize).map(|t| t.ones().map(|i| i << order).collect()).unwrap_or_default()
    }

    /// Checks every invariant: bitmaps well formed, block counts (per class) and `free_pages`
    /// consistent, every free block in exactly one class and no tail block of the largest order, no
    /// two free buddies below the largest order (except normal pairs after [`PhysMem::topup`]), free
    /// blocks and allocated blocks (buddy, large and reserved) pairwise disjoint and inside memory,
    /// and every frame either free or allocated. Err describes the first violation. Costs a pass over
    /// all bitmaps (tests and checked mode).
    pub fn check_invariants(&self) -> Result<(), String> {
        let top = self.top();
        let mut free_sum = 0u64;
        let mut alloc_sum = 0u64;
        let mut tail_sum = 0u64;
        for k in 0..=top {
            let ku = k as usize;
            for (tree, count, class) in [(&self.free[ku], self.counts[ku], "free"), (&self.tail[ku], self.tail_counts[ku], "tail")] {
                tree.check().map_err(|e| format!("order-{k} {class} bitmap: {e}"))?;
                if tree.len != self.total >> k {
                    return Err(format!("order-{k} {class} bitmap sized for {} blocks", tree.len));
                }
                let n = tree.count_ones();
                if n != count {
                    return Err(format!("order {k}: {n} blocks in the {class} bitmap but the count says {count}"));
                }
                free_sum += n << k;
            }
            tail_sum += self.tail_counts[ku];
            if k == top && self.tail_counts[ku] != 0 {
                return Err(format!("{} tail blocks of the largest order {k}", self.tail_counts[ku]));
            }
            if let Some(i) = self.tail[ku].ones().find(|&i| self.free[ku].test(i)) {
                return Err(format!("order-{k} block at pfn {:#x} is in both classes", i << k));
            }
            let heads = &self.heads[ku];
            if let Some(i) = ones(heads).find(|&i| i >= self.total >> k) {
                return Err(format!("order {k}: allocated block {i} lies outside memory"));
            }
            alloc_sum += ones(heads).count() as u64 * (1 << k);
            if k < top {
                // Only `topup` leaves free buddies unmerged, and only in the normal class: a tail block
                // is split off beside an allocated block, and its buddy becomes free only by merging.
                let is_free = |i: u64| self.free[ku].test(i) || self.tail[ku].test(i);
                let both_normal = |i: u64| self.free[ku].test(i) && self.free[ku].test(i + 1);
                if let Some(i) = self.free_ones(k).find(|&i| i & 1 == 0 && is_free(i + 1) && !(self.unmerged && both_normal(i))) {
                    return Err(format!("order {k}: buddies at pfn {:#x} and {:#x} are both free", i << k, (i + 1) << k));
                }
            }
        }
        if tail_sum != self.tail_total {
            return Err(format!("{tail_sum} tail blocks in the per-order counts but the total says {}", self.tail_total));
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
            let blocks = self.free_ones(k).map(|i| (i, true)).chain(ones(&self.heads[ku]).map(|i| (i, false)));
            for (i, is_free) in blocks {
                let p = i << k;
                let kind = if is_free { "free" } else { "allocated" };
                if is_free && bit_test(&self.heads[ku], i) {
                    return Err(format!("order-{k} block at pfn {p:#x} is both free and allocated"));
                }
                for j in k + 1..=top {
                    let ju = j as usize;
                    let idx = p >> j;
                    if self.free[ju].test(idx) || self.tail[ju].test(idx) || bit_test(&self.heads[ju], idx) {
                        return Err(format!("{kind} order-{k} block at pfn {p:#x} overlaps order-{j} block at pfn {:#x}", idx << j));
                    }
                }
                if let Some(what) = in_range(p, 1 << k) {
                    return Err(format!("{kind} order-{k} block at pfn {p:#x} overlaps a {what}"));
                }
            }
        }
        let held = ones(&self.held).count() as u64;
        if held != self.fragmenter {
            return Err(format!("{held} frames marked held but the fragmenter holds {}", self.fragmenter));
        }
        if let Some(p) = ones(&self.held).find(|&p| !bit_test(&self.heads[0], p)) {
            return Err(format!("held frame {p:#x} is not an order-0 allocation"));
        }
        if free_sum + alloc_sum != self.total {
            return Err(format!("{free_sum} free + {alloc_sum} allocated frames != {} frames of memory", self.total));
        }
        Ok(())
    }
}
