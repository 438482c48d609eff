//! B+-tree index: lookups and inserts of uniformly random keys into a tree of fixed-size nodes
//! (4 KiB by default). Internal nodes hold sorted separator keys and child pointers, leaves sorted
//! keys and values plus a next-leaf pointer. Within a node the search is a binary search over the
//! key array; an insert shifts the tail of the leaf's arrays (memmove) and splits a full node in
//! half, pushing the separator up, splitting the root when it is full.
//!
//! Node layout (`node_size` bytes, capacity `cap = (node_size - 24) / 16` keys): 8-byte header
//! (count, leaf flag), 8 bytes next-leaf pointer (leaves) or padding, `cap` keys, then `cap`
//! values (leaves) or `cap + 1` child pointers (internal nodes).
//!
//! Initial tree: the tree a bulk load leaves, with every node `fill` full (about 70 %, the
//! occupancy random inserts settle at), computed on demand: leaf `i` holds an even share of the
//! `n0` keys, each internal level an even share of the level below. Nodes sit in shuffled slots
//! (as splits in random key order scatter them). Only nodes the measured phase modified are kept
//! host-side: a leaf as its initial rank range plus the keys inserted into it (about 40 bytes
//! plus 16 per inserted key), an internal node as its separator and child arrays (16 bytes per
//! child); updated values of initial keys in a map.
//!
//! Instructions: header load ≈ 2, per binary-search probe ≈ 5 (load, compare, conditional move,
//! halve, loop), child-pointer load ≈ 2; inserts: memmove ≈ 2 per 64-byte line moved, field
//! stores ≈ 2 each, allocator fast path for splits.

use super::super::pending::Pending;
use super::super::{MapFlags, ParamInfo, ParamKind, Params, Vm, Workload, WorkloadEntry};
use super::ascy::initial_key;
use super::common::{footprint, max_accesses, Affine, FastMap, Streams, P_MAX_ACCESSES, P_POPULATE};
use super::heap::{Heap, Pool};
use crate::error::Result;
use crate::rng::{hash2, Rng};
use crate::trace::Access;

const NIL: u64 = u64::MAX;
const OFF_KEYS: u64 = 16;
const IP: u64 = 0x46_0000;

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "btree",
    description: "B+-tree index (4 KiB nodes by default): lookups and inserts of random keys",
    params: &[
        ParamInfo { name: "footprint", kind: ParamKind::Bytes, default: "8G", help: "bytes of tree nodes after the initial load" },
        ParamInfo {
            name: "node_size",
            kind: ParamKind::Bytes,
            default: "4K",
            help: "bytes per node (sets the fanout: (node_size-24)/16 keys)",
        },
        ParamInfo { name: "fill", kind: ParamKind::Count, default: "70", help: "percent occupancy of the initially loaded nodes (50-100)" },
        ParamInfo {
            name: "lookup",
            kind: ParamKind::Count,
            default: "90",
            help: "percent of operations that are lookups (the rest insert)",
        },
        P_MAX_ACCESSES,
        P_POPULATE,
    ],
    build,
};

fn build(p: &Params, seed: u64) -> Result<Box<dyn Workload>> {
    let node = p.bytes("node_size")?;
    if !(256..=1 << 20).contains(&node) || node % 64 != 0 {
        return Err(p.out_of_range("node_size", "a multiple of 64 between 256 and 1M"));
    }
    let fill = p.u64("fill")?;
    if !(50..=100).contains(&fill) {
        return Err(p.out_of_range("fill", "a percentage between 50 and 100"));
    }
    let lookup = p.u64("lookup")?;
    if lookup > 100 {
        return Err(p.out_of_range("lookup", "a percentage (0-100)"));
    }
    let cap = (node - 24) / 16;
    let per_leaf = (cap * fill / 100).max(2);
    let n0 = (footprint(p, "footprint", 4 * node)? / node) * per_leaf;
    let tree = BTree::new(n0, node, fill, seed);
    Ok(Box::new(BTreeWorkload {
        tree,
        lookup,
        populate: p.bool("populate")?,
        streams: Streams::new(1, max_accesses(p)?),
        rng: Rng::new(hash2(seed, 0xb7)),
    }))
}

/// The workload: the tree plus the operation stream.
pub struct BTreeWorkload {
    tree: BTree,
    lookup: u64,
    populate: bool,
    streams: Streams,
    rng: Rng,
}

impl Workload for BTreeWorkload {
    fn setup(&mut self, vm: &mut dyn Vm) -> Result<()> {
        self.tree.setup(vm, self.populate)
    }

    fn fill(&mut self, thread: usize, buf: &mut [Access], vm: &mut dyn Vm) -> Result<usize> {
        let BTreeWorkload { tree, lookup, streams, rng, .. } = self;
        streams.fill(thread, buf, |p| {
            let key = rng.below(2 * tree.n0);
            p.instrs(15);
            if rng.below(100) < *lookup {
                tree.lookup(key, p);
            } else {
                let v = rng.next_u64();
                tree.insert(key, v, p, vm)?;
            }
            Ok(true)
        })
    }
}

/// A node the measured phase modified.
#[derive(Clone, Debug)]
enum Node {
    /// A leaf: the initial keys of ranks `rlo..rhi` (a leaf's initial keys stay a contiguous rank
    /// range through splits, since splits cut at a key) plus the keys inserted since, sorted, with
    /// their values. 40 bytes + 16 per inserted key, instead of 16 per key held.
    Leaf { rlo: u64, rhi: u64, extra: Vec<(u64, u64)>, next: u64 },
    /// An internal node: separators and child slots (one more).
    Inner { keys: Vec<u64>, kids: Vec<u64> },
}

/// Where a leaf entry comes from.
#[derive(Clone, Copy, Debug)]
enum Src {
    /// The initial key of this rank.
    Rank(u64),
    /// `extra[j]`.
    Extra(usize),
}

/// The B+-tree.
pub struct BTree {
    n0: u64,
    seed: u64,
    cap: usize,
    /// Nodes per initial level, leaves first.
    counts: Vec<u64>,
    off: Vec<u64>,
    perms: Vec<Affine>,
    over: FastMap<u64, Node>,
    /// New values of initial keys, by rank.
    updated: FastMap<u64, u64>,
    root: u64,
    heap: Heap,
    pool: Pool,
    hdr: u64,
}

impl BTree {
    /// A tree over `n0` initial keys in `node`-byte nodes filled to `fill` percent.
    pub fn new(n0: u64, node: u64, fill: u64, seed: u64) -> BTree {
        let n0 = n0.max(1);
        let cap = ((node - 24) / 16) as usize;
        let per_leaf = (cap as u64 * fill / 100).max(2);
        let fanout = ((cap as u64 + 1) * fill / 100).max(2);
        let mut counts = vec![n0.div_ceil(per_leaf)];
        while counts[counts.len() - 1] > 1 {
            let c = counts[counts.len() - 1].div_ceil(fanout);
            counts.push(c);
        }
        let mut off = vec![0];
        for c in &counts {
            off.push(off[off.len() - 1] + c);
        }
        let perms = counts.iter().enumerate().map(|(h, &c)| Affine::new(c, hash2(seed, 40 + h as u64))).collect();
        let mut t = BTree {
            n0,
            seed,
            cap,
            counts,
            off,
            perms,
            over: FastMap::default(),
            updated: FastMap::default(),
            root: 0,
            heap: Heap::new(64 << 20, MapFlags::default()),
            pool: Pool::new(node, 64 << 20),
            hdr: 0,
        };
        let top = t.counts.len() - 1;
        t.root = t.slot_of(top, 0);
        t
    }

    fn slot_of(&self, h: usize, j: u64) -> u64 {
        self.off[h] + self.perms[h].fwd(j)
    }

    /// (level, index) of an initial node.
    fn where_is(&self, slot: u64) -> (usize, u64) {
        let h = self.off.partition_point(|&o| o <= slot) - 1;
        (h, self.perms[h].inv(slot - self.off[h]))
    }

    /// Children of initial node (h, j) as an index range at level h-1 (ranks for leaves).
    fn range(&self, h: usize, j: u64) -> (u64, u64) {
        let (below, here) = if h == 0 { (self.n0, self.counts[0]) } else { (self.counts[h - 1], self.counts[h]) };
        let f = |x: u64| (u128::from(x) * u128::from(below) / u128::from(here)) as u64;
        (f(j), f(j + 1))
    }

    fn first_rank(&self, mut h: usize, mut j: u64) -> u64 {
        loop {
            let (lo, _) = self.range(h, j);
            if h == 0 {
                return lo;
            }
            h -= 1;
            j = lo;
        }
    }

    fn value(&self, r: u64) -> u64 {
        hash2(self.seed ^ 0x7a1, r)
    }

    fn is_leaf(&self, s: u64) -> bool {
        match self.over.get(&s) {
            Some(n) => matches!(n, Node::Leaf { .. }),
            None => self.where_is(s).0 == 0,
        }
    }

    /// Entry `i` of the merge of initial ranks `rlo..rhi` with `extra`: (key, source, number of
    /// extra entries before it).
    fn leaf_entry(&self, rlo: u64, rhi: u64, extra: &[(u64, u64)], i: usize) -> (u64, Src, usize) {
        let (na, nb) = ((rhi - rlo) as usize, extra.len());
        let a = |x: usize| initial_key(self.seed, rlo + x as u64);
        // The smallest j (extra entries among the first i) such that extra[j] does not belong
        // before the (i-j)-th initial key.
        let (mut lo, mut hi) = (i.saturating_sub(na), i.min(nb));
        while lo < hi {
            let j = (lo + hi) / 2;
            if j < nb && i > j && extra[j].0 < a(i - j - 1) {
                lo = j + 1;
            } else {
                hi = j;
            }
        }
        let ai = i - lo;
        if lo < nb && (ai >= na || extra[lo].0 < a(ai)) {
            (extra[lo].0, Src::Extra(lo), lo)
        } else {
            (a(ai), Src::Rank(rlo + ai as u64), lo)
        }
    }

    fn count(&self, s: u64) -> usize {
        match self.over.get(&s) {
            Some(Node::Leaf { rlo, rhi, extra, .. }) => (rhi - rlo) as usize + extra.len(),
            Some(Node::Inner { keys, .. }) => keys.len(),
            None => {
                let (h, j) = self.where_is(s);
                let (lo, hi) = self.range(h, j);
                (hi - lo) as usize - usize::from(h > 0)
            }
        }
    }

    fn key_at(&self, s: u64, i: usize) -> u64 {
        match self.over.get(&s) {
            Some(Node::Leaf { rlo, rhi, extra, .. }) => self.leaf_entry(*rlo, *rhi, extra, i).0,
            Some(Node::Inner { keys, .. }) => keys[i],
            None => {
                let (h, j) = self.where_is(s);
                let (lo, _) = self.range(h, j);
                if h == 0 {
                    initial_key(self.seed, lo + i as u64)
                } else {
                    initial_key(self.seed, self.first_rank(h - 1, lo + i as u64 + 1))
                }
            }
        }
    }

    fn rank_value(&self, r: u64) -> u64 {
        self.updated.get(&r).copied().unwrap_or_else(|| self.value(r))
    }

    /// Value `i` of a leaf or child slot `i` of an internal node.
    fn val_at(&self, s: u64, i: usize) -> u64 {
        match self.over.get(&s) {
            Some(Node::Leaf { rlo, rhi, extra, .. }) => match self.leaf_entry(*rlo, *rhi, extra, i).1 {
                Src::Rank(r) => self.rank_value(r),
                Src::Extra(j) => extra[j].1,
            },
            Some(Node::Inner { kids, .. }) => kids[i],
            None => {
                let (h, j) = self.where_is(s);
                let (lo, _) = self.range(h, j);
                if h == 0 {
                    self.rank_value(lo + i as u64)
                } else {
                    self.slot_of(h - 1, lo + i as u64)
                }
            }
        }
    }

    fn next_leaf(&self, s: u64) -> u64 {
        match self.over.get(&s) {
            Some(Node::Leaf { next, .. }) => *next,
            Some(Node::Inner { .. }) => NIL,
            None => {
                let (_, j) = self.where_is(s);
                if j + 1 < self.counts[0] {
                    self.slot_of(0, j + 1)
                } else {
                    NIL
                }
            }
        }
    }

    fn materialize(&mut self, s: u64) -> &mut Node {
        if !self.over.contains_key(&s) {
            let (h, j) = self.where_is(s);
            let n = if h == 0 {
                let (rlo, rhi) = self.range(0, j);
                Node::Leaf { rlo, rhi, extra: Vec::new(), next: self.next_leaf(s) }
            } else {
                let c = self.count(s);
                Node::Inner { keys: (0..c).map(|i| self.key_at(s, i)).collect(), kids: (0..=c).map(|i| self.val_at(s, i)).collect() }
            };
            self.over.insert(s, n);
        }
        self.over.get_mut(&s).expect("materialised above")
    }

    fn vals_off(&self) -> u64 {
        OFF_KEYS + 8 * self.cap as u64
    }

    /// Binary search in node `s`: number of keys `< key` (`upper` = false) or `<= key`.
    fn search_node(&self, s: u64, key: u64, upper: bool, p: &mut Pending) -> usize {
        let a = self.pool.addr(s);
        p.load(a, 8, IP, 2);
        let (mut lo, mut hi) = (0, self.count(s));
        while lo < hi {
            let mid = (lo + hi) / 2;
            p.load(a + OFF_KEYS + 8 * mid as u64, 8, IP + 4, 5);
            let k = self.key_at(s, mid);
            if k < key || (upper && k == key) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Descends to the leaf for `key`, returning the path of (internal slot, child index).
    fn descend(&self, key: u64, p: &mut Pending) -> (Vec<(u64, usize)>, u64) {
        p.load(self.hdr, 8, IP + 0x10, 2);
        let mut path = Vec::new();
        let mut s = self.root;
        while !self.is_leaf(s) {
            let i = self.search_node(s, key, true, p);
            p.load(self.pool.addr(s) + self.vals_off() + 8 * i as u64, 8, IP + 8, 2);
            path.push((s, i));
            s = self.val_at(s, i);
        }
        (path, s)
    }

    /// The value stored under `key`.
    pub fn lookup(&self, key: u64, p: &mut Pending) -> Option<u64> {
        let (_, leaf) = self.descend(key, p);
        let i = self.search_node(leaf, key, false, p);
        let a = self.pool.addr(leaf);
        if i < self.count(leaf) {
            p.load(a + OFF_KEYS + 8 * i as u64, 8, IP + 0x14, 2);
            if self.key_at(leaf, i) == key {
                p.load(a + self.vals_off() + 8 * i as u64, 8, IP + 0x18, 2);
                return Some(self.val_at(leaf, i));
            }
        }
        None
    }

    /// Emits a memmove of `bytes` from `src` to `dst` line by line.
    fn memmove(p: &mut Pending, src: u64, dst: u64, bytes: u64) {
        let mut o = 0;
        while o < bytes {
            let n = (bytes - o).min(64);
            p.load(src + o, n as u8, IP + 0x20, 2);
            p.store(dst + o, n as u8, IP + 0x24, 1);
            o += n;
        }
    }

    /// Inserts `(k, v)` at position `i` of node `s`, emitting the shift of the arrays' tails.
    fn put(&mut self, s: u64, i: usize, k: u64, v: u64, p: &mut Pending) {
        let a = self.pool.addr(s);
        let leaf = self.is_leaf(s);
        let c = self.count(s);
        let vi = if leaf { i } else { i + 1 };
        let voff = self.vals_off();
        Self::memmove(p, a + OFF_KEYS + 8 * i as u64, a + OFF_KEYS + 8 * (i as u64 + 1), 8 * (c - i) as u64);
        let vc = c + usize::from(!leaf);
        Self::memmove(p, a + voff + 8 * vi as u64, a + voff + 8 * (vi as u64 + 1), 8 * (vc - vi) as u64);
        p.store(a + OFF_KEYS + 8 * i as u64, 8, IP + 0x28, 2);
        p.store(a + voff + 8 * vi as u64, 8, IP + 0x28, 2);
        p.store(a, 8, IP + 0x2c, 2);
        match self.materialize(s) {
            Node::Leaf { extra, .. } => {
                let j = extra.partition_point(|e| e.0 < k);
                extra.insert(j, (k, v));
            }
            Node::Inner { keys, kids } => {
                keys.insert(i, k);
                kids.insert(i + 1, v);
            }
        }
    }

    /// Splits full node `s` in half into a new right sibling; returns (separator, new slot).
    fn split(&mut self, s: u64, p: &mut Pending, vm: &mut dyn Vm) -> Result<(u64, u64)> {
        let r = self.pool.alloc(&mut self.heap, vm, p, IP + 0x80)?;
        let (a, b) = (self.pool.addr(s), self.pool.addr(r));
        let voff = self.vals_off();
        let c = self.count(s);
        let mid = c / 2;
        let (sep, right, kfrom) = match self.materialize(s).clone() {
            Node::Leaf { rlo, rhi, extra, next } => {
                let (sep, _, j) = self.leaf_entry(rlo, rhi, &extra, mid);
                let cut = rlo + (mid - j) as u64;
                let right = Node::Leaf { rlo: cut, rhi, extra: extra[j..].to_vec(), next };
                self.over.insert(s, Node::Leaf { rlo, rhi: cut, extra: extra[..j].to_vec(), next: r });
                (sep, right, mid)
            }
            Node::Inner { keys, kids } => {
                // The middle key moves up; the right node keeps the keys after it.
                let right = Node::Inner { keys: keys[mid + 1..].to_vec(), kids: kids[mid + 1..].to_vec() };
                self.over.insert(s, Node::Inner { keys: keys[..mid].to_vec(), kids: kids[..=mid].to_vec() });
                (keys[mid], right, mid + 1)
            }
        };
        let leaf = matches!(right, Node::Leaf { .. });
        let vc = c + usize::from(!leaf);
        Self::memmove(p, a + OFF_KEYS + 8 * kfrom as u64, b + OFF_KEYS, 8 * (c - kfrom) as u64);
        Self::memmove(p, a + voff + 8 * kfrom as u64, b + voff, 8 * (vc - kfrom) as u64);
        p.store(b, 8, IP + 0x2c, 2);
        p.store(a, 8, IP + 0x2c, 2);
        if leaf {
            p.load(a + 8, 8, IP + 0x30, 1);
            p.store(b + 8, 8, IP + 0x30, 1);
            p.store(a + 8, 8, IP + 0x30, 1);
        }
        self.over.insert(r, right);
        Ok((sep, r))
    }

    /// Inserts or updates `key`; true when the key is new.
    pub fn insert(&mut self, key: u64, v: u64, p: &mut Pending, vm: &mut dyn Vm) -> Result<bool> {
        let (mut path, leaf) = self.descend(key, p);
        let i = self.search_node(leaf, key, false, p);
        let a = self.pool.addr(leaf);
        if i < self.count(leaf) {
            p.load(a + OFF_KEYS + 8 * i as u64, 8, IP + 0x14, 2);
            if self.key_at(leaf, i) == key {
                p.store(a + self.vals_off() + 8 * i as u64, 8, IP + 0x34, 2);
                let src = match self.over.get(&leaf) {
                    Some(Node::Leaf { rlo, rhi, extra, .. }) => self.leaf_entry(*rlo, *rhi, extra, i).1,
                    _ => Src::Rank(self.range(0, self.where_is(leaf).1).0 + i as u64),
                };
                match src {
                    Src::Rank(r) => {
                        self.updated.insert(r, v);
                    }
                    Src::Extra(j) => {
                        if let Some(Node::Leaf { extra, .. }) = self.over.get_mut(&leaf) {
                            extra[j].1 = v;
                        }
                    }
                }
                return Ok(false);
            }
        }
        // Insert into the leaf, splitting upwards while nodes are full.
        let (mut s, mut pos, mut k, mut val) = (leaf, i, key, v);
        loop {
            if self.count(s) < self.cap {
                self.put(s, pos, k, val, p);
                return Ok(true);
            }
            let (sep, r) = self.split(s, p, vm)?;
            let leaf = self.is_leaf(s);
            let left_len = self.count(s);
            // Where the pending entry goes after the split.
            let (t, tp) = if leaf {
                if pos <= left_len {
                    (s, pos)
                } else {
                    (r, pos - left_len)
                }
            } else if pos <= left_len {
                (s, pos)
            } else {
                (r, pos - left_len - 1)
            };
            self.put(t, tp, k, val, p);
            match path.pop() {
                Some((parent, ci)) => {
                    (s, pos, k, val) = (parent, ci, sep, r);
                }
                None => {
                    let nr = self.pool.alloc(&mut self.heap, vm, p, IP + 0x80)?;
                    let b = self.pool.addr(nr);
                    for f in [0, OFF_KEYS, self.vals_off(), self.vals_off() + 8] {
                        p.store(b + f, 8, IP + 0x38, 2);
                    }
                    self.over.insert(nr, Node::Inner { keys: vec![sep], kids: vec![s, r] });
                    p.store(self.hdr, 8, IP + 0x3c, 2);
                    self.root = nr;
                    return Ok(true);
                }
            }
        }
    }

    /// Sets the tree up in simulated memory.
    pub fn setup(&mut self, vm: &mut dyn Vm, populate: bool) -> Result<()> {
        self.hdr = self.heap.carve(vm, 64, 64)?;
        let n = self.off[self.off.len() - 1];
        self.pool.reserve(&mut self.heap, vm, n, populate)
    }

    /// Walks the whole tree checking the B+-tree invariants; returns every (key, value) in order
    /// (tests).
    pub fn check(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut leaves = Vec::new();
        // (slot, depth, lower bound, upper bound exclusive)
        let mut stack = vec![(self.root, 0usize, 0u64, u64::MAX)];
        let mut leaf_depth = None;
        while let Some((s, d, lo, hi)) = stack.pop() {
            let c = self.count(s);
            assert!(c <= self.cap, "node over capacity");
            let keys: Vec<u64> = (0..c).map(|i| self.key_at(s, i)).collect();
            assert!(keys.windows(2).all(|w| w[0] < w[1]), "keys out of order");
            assert!(keys.iter().all(|&k| lo <= k && k < hi), "key outside its separators");
            // Nodes created by splits hold at least half a node (initial nodes hold `fill`).
            if s >= self.off[self.off.len() - 1] && s != self.root {
                assert!(c >= self.cap / 2 - 1, "split node under half full ({c})");
            }
            if self.is_leaf(s) {
                assert_eq!(*leaf_depth.get_or_insert(d), d, "leaves at different depths");
                leaves.push(s);
                out.extend(keys.iter().enumerate().map(|(i, &k)| (k, self.val_at(s, i))));
            } else {
                assert!(c >= 1, "internal node without separator");
                for i in (0..=c).rev() {
                    let l = if i == 0 { lo } else { keys[i - 1] };
                    let h = if i == c { hi } else { keys[i] };
                    stack.push((self.val_at(s, i), d + 1, l, h));
                }
            }
        }
        for w in leaves.windows(2) {
            assert_eq!(self.next_leaf(w[0]), w[1], "leaf chain broken");
        }
        assert_eq!(leaves.last().map(|&l| self.next_leaf(l)), Some(NIL));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::tests::contract;
    use super::*;
    use crate::workload::testvm::TestVm;
    use std::collections::BTreeMap;

    #[test]
    fn initial_tree_is_a_valid_b_plus_tree() {
        for (n0, node, fill) in [(1u64, 256u64, 70u64), (13, 256, 50), (1000, 256, 70), (20_000, 512, 100)] {
            let t = BTree::new(n0, node, fill, 3);
            let kv = t.check();
            let want: Vec<(u64, u64)> = (0..n0).map(|r| (initial_key(3, r), t.value(r))).collect();
            assert_eq!(kv, want);
        }
    }

    #[test]
    fn inserts_and_lookups_agree_with_a_btreemap() {
        let (n0, seed) = (500u64, 5u64);
        let mut t = BTree::new(n0, 256, 70, seed);
        let mut vm = TestVm::new();
        t.setup(&mut vm, true).unwrap();
        let mut mirror: BTreeMap<u64, u64> = (0..n0).map(|r| (initial_key(seed, r), t.value(r))).collect();
        let mut rng = Rng::new(3);
        let mut p = Pending::default();
        let mut buf = vec![Access::default(); 1024];
        let height0 = t.counts.len();
        for _ in 0..30_000 {
            let k = if rng.below(2) == 0 { rng.below(2 * n0) } else { rng.below(100 * n0) };
            if rng.below(100) < 30 {
                assert_eq!(t.lookup(k, &mut p), mirror.get(&k).copied());
            } else {
                let v = rng.next_u64();
                assert_eq!(t.insert(k, v, &mut p, &mut vm).unwrap(), mirror.insert(k, v).is_none());
            }
            while !p.is_empty() {
                let n = p.drain_into(&mut buf, 0);
                assert!(buf[..n].iter().all(|a| vm.contains(a.vaddr, u64::from(a.size))));
            }
        }
        assert_eq!(t.check(), mirror.into_iter().collect::<Vec<_>>());
        // Enough inserts to split leaves, internal nodes and the root.
        assert!(t.pool.slots() > t.off[t.off.len() - 1] + 100);
        let mut depth = 1;
        let mut s = t.root;
        while !t.is_leaf(s) {
            s = t.val_at(s, 0);
            depth += 1;
        }
        assert!(depth > height0, "root never split");
    }

    #[test]
    fn runs_as_a_workload() {
        contract("btree", &[("footprint", "64M"), ("max_accesses", "30000"), ("lookup", "50")]);
    }
}
