//! The fragmentation knobs: Elastic Translations' FMFI-targeting `memfrag` and Virtuoso's
//! free-2 MiB knob, plus the indices they target (see the module documentation of [`super`]).

use super::bits::*;
use super::{Class, PhysMem};
use crate::addr::{PageSize, BASE_PAGE};
use crate::rng::Rng;

/// Order of the chunks Elastic Translations' fragmenter frees while FMFI is above target (32 MiB).
const RELAX_ORDER: u32 = 13;
/// Order of the chunks it frees, every other one, while FMFI is at or below target (512 KiB).
const PRESS_ORDER: u32 = 7;

impl PhysMem {
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
            for idx in self.free_ones(k) {
                range_set(&mut held, idx << k, 1 << k);
            }
        }
        for (h, o) in self.heads[0].iter_mut().zip(&held) {
            *h |= *o;
        }
        for t in self.free.iter_mut() {
            t.clear_all();
        }
        if self.tail_total > 0 {
            // Without tail blocks the tail bitmaps are already empty (bar harmless stale summary
            // bits) and clearing them would only make the OS commit their pages.
            for t in self.tail.iter_mut() {
                t.clear_all();
            }
        }
        self.counts.fill(0);
        self.tail_counts.fill(0);
        self.tail_total = 0;
        self.unmerged = false; // every frame is held now; releases merge fully
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

        self.mark_held(&held);
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
            for idx in self.free_ones(k) {
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
            if self.take_block(p, 0, Class::Normal) {
                bit_set(&mut self.heads[0], p);
                self.fragmenter += 1;
                self.held_bits()[(p / 64) as usize] |= 1 << (p % 64);
            }
        }
        self.free_2m_fraction()
    }
}
