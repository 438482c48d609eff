//! Bitmaps for the buddy allocator: plain word bitmaps and a 64-ary summary tree that finds the
//! lowest set bit, or the next one at or after an index, in a handful of word reads.

// ---------------------------------------------------------------------------------------------------
// Plain bitmaps
// ---------------------------------------------------------------------------------------------------

pub(super) fn words_for(bits: u64) -> usize {
    bits.div_ceil(64) as usize
}

#[inline]
pub(super) fn bit_test(v: &[u64], i: u64) -> bool {
    v.get((i / 64) as usize).is_some_and(|w| (w >> (i % 64)) & 1 == 1)
}

#[inline]
pub(super) fn bit_set(v: &mut [u64], i: u64) {
    if let Some(w) = v.get_mut((i / 64) as usize) {
        *w |= 1 << (i % 64);
    }
}

#[inline]
pub(super) fn bit_clear(v: &mut [u64], i: u64) {
    if let Some(w) = v.get_mut((i / 64) as usize) {
        *w &= !(1 << (i % 64));
    }
}

/// Mask of bits `lo..hi` of one word (`hi` ≤ 64, `lo` < `hi`).
#[inline]
pub(super) fn word_mask(lo: u64, hi: u64) -> u64 {
    let upper = if hi >= 64 { !0 } else { (1u64 << hi) - 1 };
    upper & (!0u64 << lo)
}

/// Calls `f(word_index, mask)` for every word the bit range `[start, start + len)` touches.
#[inline]
pub(super) fn for_range_words(start: u64, len: u64, mut f: impl FnMut(usize, u64) -> bool) -> bool {
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

pub(super) fn range_set(v: &mut [u64], start: u64, len: u64) {
    for_range_words(start, len, |w, m| {
        if let Some(x) = v.get_mut(w) {
            *x |= m;
        }
        true
    });
}

pub(super) fn range_clear(v: &mut [u64], start: u64, len: u64) {
    for_range_words(start, len, |w, m| {
        if let Some(x) = v.get_mut(w) {
            *x &= !m;
        }
        true
    });
}

pub(super) fn range_all_set(v: &[u64], start: u64, len: u64) -> bool {
    for_range_words(start, len, |w, m| v.get(w).is_some_and(|x| x & m == m))
}

/// Indexes of the set bits of a plain bitmap, ascending.
pub(super) fn ones(v: &[u64]) -> impl Iterator<Item = u64> + '_ {
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
pub(super) struct BitTree {
    /// Number of valid bits in level 0.
    pub(super) len: u64,
    /// Every level's words, level 0 first; the last level is exactly one word.
    words: Vec<u64>,
    /// `bounds[l]..bounds[l + 1]` are the words of level `l` (inline: no pointer chase per level).
    bounds: [usize; MAX_LEVELS + 1],
    /// Number of levels.
    depth: usize,
}

/// Levels of a [`BitTree`] over at most 2^52 bits (every frame of a 64-bit physical space).
pub(super) const MAX_LEVELS: usize = 10;

impl BitTree {
    pub(super) fn new(len: u64) -> Self {
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

    pub(super) fn level(&self, l: usize) -> &[u64] {
        &self.words[self.bounds[l]..self.bounds[l + 1]]
    }

    #[inline]
    pub(super) fn test(&self, i: u64) -> bool {
        bit_test(self.level(0), i)
    }

    /// Sets bit `i` (< len) and, where a word was empty, the summary bit above it. A non-empty word
    /// already has its summary bit set (see [`BitTree::clear`]), so the climb stops there.
    #[inline]
    pub(super) fn set(&mut self, i: u64) {
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
    pub(super) fn clear(&mut self, i: u64) {
        if i >= self.len {
            return;
        }
        if let Some(w) = self.words.get_mut((i / 64) as usize) {
            *w &= !(1 << (i % 64));
        }
    }

    pub(super) fn clear_all(&mut self) {
        self.words.fill(0);
    }

    /// Lowest set bit, clearing the stale summary bits met on the way (each is paid for once).
    #[inline]
    pub(super) fn first_mut(&mut self) -> Option<u64> {
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

    /// [`BitTree::next_set`] that clears the stale summary bits it steps over, so repeated
    /// searches from one place (a partition's allocator, which searches from the partition's
    /// start) pay for each stale bit once instead of every time.
    pub(super) fn next_set_mut(&mut self, from: u64) -> Option<u64> {
        let mut l = 0;
        let mut idx = from;
        loop {
            let w = idx / 64;
            let word = *self.level(l).get(w as usize)?;
            let m = word & (!0u64 << (idx % 64));
            if m == 0 {
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
                // Stale: its word below is empty. Clear it (a clear summary bit must mean empty).
                let at = self.bounds[l] + w as usize;
                self.words[at] &= !(1u64 << (b % 64));
                idx = b + 1;
            }
        }
    }

    /// Lowest set bit at or after `from` (read-only: steps over stale summary bits).
    pub(super) fn next_set(&self, from: u64) -> Option<u64> {
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

    pub(super) fn count_ones(&self) -> u64 {
        self.level(0).iter().map(|w| u64::from(w.count_ones())).sum()
    }

    pub(super) fn ones(&self) -> impl Iterator<Item = u64> + '_ {
        ones(self.level(0))
    }

    /// Every non-empty word has its summary bit and no bit beyond `len` is set.
    pub(super) fn check(&self) -> Result<(), String> {
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
