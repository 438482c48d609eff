//! The implicit initial shape of the binary search trees: a perfect tree over in-order positions
//! `1..=m`, truncated on the right, laid out in level order and shuffled within each level.
//!
//! Why: at SPARTA's 128 GiB the trees hold 1-2 G nodes, far too many to keep host-side even at
//! 16 bytes each. Instead the tree the (unmeasured) initial fill leaves behind is a function: node
//! *position* `x` (its in-order number) determines its key, its children and its slot in the node
//! arena, and only nodes the measured phase modifies are stored host-side (an overlay map).
//!
//! The fill this corresponds to inserts the keys level by level (the root's key first, then the
//! two quartiles, ...), each level in shuffled order, which builds a balanced tree; nodes therefore
//! sit in the arena in level order (top levels dense, as in any fill where ancestors are inserted
//! first) and scattered within their level (as with random insertion order). A fill in uniformly
//! random order would give paths about 1.39x longer on average; that difference is documented.
//!
//! Positions: node `x` sits at level `d = k-1-tz(x)` (root `2^(k-1)`, `k` = bit length of `m`),
//! its subtree spans positions `(x - lowbit(x), x + lowbit(x))`. Positions above `m` do not exist;
//! a child pointer that would lead to one skips down its left spine to the first existing node.

use super::common::Affine;

/// Level-order layout of a perfect tree over positions `1..=m`, truncated at `m`.
#[derive(Debug)]
pub struct PerfectTree {
    m: u64,
    k: u32,
    /// First slot of each level (length k+1; the last entry is `m`).
    off: Vec<u64>,
    perm: Vec<Affine>,
}

#[inline]
fn lowbit(x: u64) -> u64 {
    x & x.wrapping_neg()
}

impl PerfectTree {
    /// The layout of `m >= 1` positions, levels shuffled by `seed`.
    pub fn new(m: u64, seed: u64) -> PerfectTree {
        let m = m.max(1);
        let k = 64 - m.leading_zeros();
        let mut off = vec![0u64];
        let mut perm = Vec::new();
        for d in 0..k {
            // Odd multiples of 2^(k-1-d) that are <= m.
            let c = (m >> (k - 1 - d)).div_ceil(2);
            perm.push(Affine::new(c, crate::rng::hash2(seed, u64::from(d))));
            off.push(off[d as usize] + c);
        }
        debug_assert_eq!(off[k as usize], m);
        PerfectTree { m, k, off, perm }
    }

    /// Number of positions.
    pub fn len(&self) -> u64 {
        self.m
    }

    /// Whether the tree is empty (never: `m >= 1`).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Position of the root.
    pub fn root(&self) -> u64 {
        1 << (self.k - 1)
    }

    /// Slot (level-order index, shuffled within the level) of position `x`.
    pub fn slot(&self, x: u64) -> u64 {
        let tz = x.trailing_zeros();
        let d = self.k - 1 - tz;
        let q = x >> (tz + 1);
        self.off[d as usize] + self.perm[d as usize].fwd(q)
    }

    /// Position stored in `slot` (inverse of [`PerfectTree::slot`]).
    pub fn pos(&self, slot: u64) -> u64 {
        // Levels are few (<= 64): a linear scan from the bottom, where most slots are, is fine.
        let d = self.off.partition_point(|&o| o <= slot) - 1;
        let q = self.perm[d].inv(slot - self.off[d]);
        (2 * q + 1) << (self.k - 1 - d as u32)
    }

    /// The left child position of `x`, or `None` when `x` is on the bottom level (its left
    /// subtree is the single gap `x-1..x`).
    pub fn left(&self, x: u64) -> Option<u64> {
        let h = lowbit(x);
        (h > 1).then(|| x - h / 2)
    }

    /// The right child position of `x`, or `None` when no position of its right subtree exists.
    pub fn right(&self, x: u64) -> Option<u64> {
        let h = lowbit(x);
        if h == 1 {
            return None;
        }
        let mut y = x + h / 2;
        loop {
            if y <= self.m {
                return Some(y);
            }
            let g = lowbit(y);
            if g == 1 {
                return None;
            }
            y -= g / 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inorder(t: &PerfectTree, x: Option<u64>, out: &mut Vec<u64>, depth: u32, maxd: &mut u32) {
        if let Some(x) = x {
            *maxd = (*maxd).max(depth);
            inorder(t, t.left(x), out, depth + 1, maxd);
            out.push(x);
            inorder(t, t.right(x), out, depth + 1, maxd);
        }
    }

    #[test]
    fn every_position_once_in_order_and_balanced() {
        for m in 1..300u64 {
            let t = PerfectTree::new(m, m);
            let mut v = Vec::new();
            let mut maxd = 0;
            inorder(&t, Some(t.root()), &mut v, 0, &mut maxd);
            assert_eq!(v, (1..=m).collect::<Vec<_>>(), "m = {m}");
            assert!(maxd < 64 - m.leading_zeros(), "m = {m} depth {maxd}");
            let mut slots: Vec<u64> = (1..=m).map(|x| t.slot(x)).collect();
            for x in 1..=m {
                assert_eq!(t.pos(t.slot(x)), x);
            }
            slots.sort_unstable();
            assert_eq!(slots, (0..m).collect::<Vec<_>>());
            assert_eq!(t.slot(t.root()), 0);
        }
    }
}
