//! Compaction: making one free 2^order block by moving pages out of it.
//!
//! Linux's compaction (`mm/compaction.c`) runs a migration scanner over a zone's movable pages and
//! a free scanner that supplies their new frames, until a block of the wanted order is free. Here
//! the movable pages are the fragmenter's (the knobs' stand-ins for other tenants' anonymous and
//! page-cache memory) and the order-0 pages the caller says it can remap (the OS's own 4 KiB data
//! pages); table pages and larger allocations stay put. The choice is deterministic: the block
//! that needs the fewest moves (lowest address on a tie), its pages moved to the lowest free
//! frames outside it, which is what [`PhysMem::alloc`] hands out.

use super::bits::*;
use super::PhysMem;
use crate::addr::Pfn;

impl PhysMem {
    /// The held-frame bitmap, sized on first use.
    pub(super) fn held_bits(&mut self) -> &mut Vec<u64> {
        if self.held.is_empty() {
            self.held = vec![0; words_for(self.total)];
        }
        &mut self.held
    }

    /// Marks the frames set in `frames` (a bitmap over all frames) as held by the fragmenter.
    pub(super) fn mark_held(&mut self, frames: &[u64]) {
        for (h, f) in self.held_bits().iter_mut().zip(frames) {
            *h |= *f;
        }
    }

    /// Allocates a block of 2^`order` frames that no free block covers yet by moving pages out
    /// of it (module docs): the fragmenter's, and order-0 allocations `movable` accepts (the OS's
    /// data pages it can remap). Qualifies: an aligned block whose frames are all free, the
    /// fragmenter's or movable, with at least as many free frames elsewhere as it has pages to
    /// move; the one with the fewest moves wins, lowest address on a tie. Returns the block,
    /// allocated as one unit like [`PhysMem::alloc`]'s; None (and no change) when none qualifies.
    pub fn compact(&mut self, order: u32, movable: &dyn Fn(u64) -> bool) -> Option<Compacted> {
        if order > self.top() {
            return None;
        }
        let size = 1u64 << order;
        let mut best: Option<(u64, u64)> = None; // (pages to move, block start)
        let mut start = 0;
        while start + size <= self.total {
            let bound = best.map_or(u64::MAX, |(m, _)| m);
            if let Some(moves) = self.moves_to_free(start, size, bound, movable) {
                // Enough free frames outside the block (it holds `size - moves` free ones)?
                if self.free_pages - (size - moves) >= moves {
                    best = Some((moves, start));
                    if moves == 1 {
                        break;
                    }
                }
            }
            start += size;
        }
        let (_, start) = best?;
        let end = start + size;
        // 1. The block's free pieces leave the free lists, so no new frame lands inside it.
        let mut p = start;
        while p < end {
            match self.block_at(p, 0) {
                Some((s, j, class)) => {
                    self.list_remove_in(s, j, class);
                    self.free_pages -= 1 << j;
                    p = s + (1 << j);
                }
                None => p += 1,
            }
        }
        // 2. Every page in it moves to the lowest free frame: the fragmenter's stay the
        //    fragmenter's, the others are reported for the OS to remap.
        let mut out = Compacted { block: Pfn(start), fragmenter_moved: 0, moved: Vec::new() };
        for f in start..end {
            if !bit_test(&self.heads[0], f) {
                continue;
            }
            let to = self.alloc(0).expect("compact: counted enough free frames outside the block").0;
            bit_clear(&mut self.heads[0], f);
            if bit_test(&self.held, f) {
                bit_clear(&mut self.held, f);
                bit_set(&mut self.held, to);
                out.fragmenter_moved += 1;
            } else {
                out.moved.push((Pfn(f), Pfn(to)));
            }
        }
        // 3. The block is allocated as one unit.
        bit_set(&mut self.heads[order as usize], start >> order);
        Some(out)
    }

    /// Pages that must move to free `[start, start + len)` if fewer than `bound`, None if more or
    /// if one cannot move: every frame must be free, the fragmenter's, or an order-0 allocation
    /// `movable` accepts. Cheap for most blocks: the count comes from the order-0 head bitmap.
    fn moves_to_free(&self, start: u64, len: u64, bound: u64, movable: &dyn Fn(u64) -> bool) -> Option<u64> {
        let heads = &self.heads[0];
        let mut moves = 0u64;
        for_range_words(start, len, |w, m| {
            moves += u64::from((heads[w] & m).count_ones());
            true
        });
        if moves == 0 || moves >= bound {
            return None;
        }
        let all_movable = for_range_words(start, len, |w, m| {
            let mut bits = heads[w] & m & !self.held.get(w).copied().unwrap_or(0);
            while bits != 0 {
                if !movable(w as u64 * 64 + u64::from(bits.trailing_zeros())) {
                    return false;
                }
                bits &= bits - 1;
            }
            true
        });
        (all_movable && self.free_in(start, len) + moves == len).then_some(moves)
    }

    /// Free frames inside `[start, start + len)`.
    fn free_in(&self, start: u64, len: u64) -> u64 {
        let (end, mut p, mut n) = (start + len, start, 0);
        while p < end {
            match self.block_at(p, 0) {
                Some((s, j, _)) => {
                    let e = (s + (1 << j)).min(end);
                    n += e - p;
                    p = e;
                }
                None => p += 1,
            }
        }
        n
    }
}

/// What [`PhysMem::compact`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compacted {
    /// The block it allocated.
    pub block: Pfn,
    /// Fragmenter pages it moved.
    pub fragmenter_moved: u64,
    /// Other pages it moved, (old frame, new frame): the caller remaps them. The old frames are
    /// part of `block` now; the new ones are order-0 allocations.
    pub moved: Vec<(Pfn, Pfn)>,
}
