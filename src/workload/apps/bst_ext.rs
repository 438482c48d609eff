//! ASCYLIB-style external (leaf-oriented) binary search tree, as in its `bst-tk` / `bst-aravind`
//! family: keys live in leaves, internal nodes only route (`key < node.key` goes left). An insert
//! replaces the leaf it reaches by a new internal node over the old and the new leaf; a delete
//! unlinks the leaf and its parent, the grandparent adopting the sibling. Updates take the
//! per-node version lock of the nodes whose pointers they change (a store each to lock and
//! unlock), as the lock-based ASCYLIB trees do.
//!
//! Node: 64 bytes (key, value, left, right, lock word, padded to a cache line as ASCYLIB's
//! allocator aligns nodes), 2 nodes per key. Initial tree: [`PerfectTree`] over the `n0 - 1`
//! routing nodes, leaves after them in the arena in shuffled key order; only nodes touched by the
//! measured phase live host-side (32 bytes + map overhead each).
//!
//! Instructions: each traversal step loads the key (load, compare, branch ≈ 3 instructions) and
//! then the chosen child pointer (select, load, leaf test ≈ 3); updates add the node
//! initialisation stores and lock/unlock stores (≈ 2 instructions each) and the allocator fast path.

use super::super::pending::Pending;
use super::super::{MapFlags, Params, Vm, Workload, WorkloadEntry};
use super::ascy::{initial_key, Ascy, Config, Set, PARAMS};
use super::common::{Affine, FastMap};
use super::heap::{Heap, Pool};
use super::implicit::PerfectTree;
use crate::error::Result;
use crate::rng::{hash2, Rng};

/// Bytes per node.
pub const NODE: u64 = 64;
const NIL: u64 = u64::MAX;
const OFF_LEFT: u64 = 16;
const OFF_LOCK: u64 = 32;
const IP: u64 = 0x42_0000;

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "bst-ext",
    description: "ASCYLIB external BST (keys in leaves, 64 B nodes), search/insert/delete mix",
    params: PARAMS,
    build,
};

fn build(p: &Params, seed: u64) -> Result<Box<dyn Workload>> {
    let cfg = Config::parse(p, seed, 2 * NODE)?;
    Ok(Box::new(Ascy::new(cfg.clone(), BstExt::new(cfg.n0, seed))))
}

#[derive(Clone, Copy, Debug)]
struct Node {
    key: u64,
    left: u64,
    right: u64,
}

/// Where the pointer to a node is stored.
#[derive(Clone, Copy, Debug)]
enum Link {
    Root,
    Child(u64, bool),
}

/// The external BST.
pub struct BstExt {
    n0: u64,
    seed: u64,
    tree: PerfectTree,
    leaves: Affine,
    over: FastMap<u64, Node>,
    root: u64,
    heap: Heap,
    pool: Pool,
    hdr: u64,
}

impl BstExt {
    /// A tree whose initial fill holds `n0 >= 2` keys.
    pub fn new(n0: u64, seed: u64) -> BstExt {
        let n0 = n0.max(2);
        let tree = PerfectTree::new(n0 - 1, hash2(seed, 1));
        let root = tree.slot(tree.root());
        BstExt {
            n0,
            seed,
            tree,
            leaves: Affine::new(n0, hash2(seed, 2)),
            over: FastMap::default(),
            root,
            heap: Heap::new(64 << 20, MapFlags::default()),
            pool: Pool::new(NODE, 64 << 20),
            hdr: 0,
        }
    }

    fn m(&self) -> u64 {
        self.n0 - 1
    }

    fn leaf_slot(&self, rank: u64) -> u64 {
        self.m() + self.leaves.fwd(rank)
    }

    /// The node in `slot`: its overlay copy, else the implicit initial node.
    fn get(&self, slot: u64) -> Node {
        if let Some(n) = self.over.get(&slot) {
            return *n;
        }
        let m = self.m();
        if slot < m {
            let x = self.tree.pos(slot);
            let left = self.tree.left(x).map_or_else(|| self.leaf_slot(x - 1), |c| self.tree.slot(c));
            let right = self.tree.right(x).map_or_else(|| self.leaf_slot(x), |c| self.tree.slot(c));
            Node { key: initial_key(self.seed, x), left, right }
        } else {
            let r = self.leaves.inv((slot - m) % self.n0);
            Node { key: initial_key(self.seed, r), left: NIL, right: NIL }
        }
    }

    fn addr(&self, slot: u64) -> u64 {
        self.pool.addr(slot)
    }

    fn lock_addr(&self, l: Link) -> u64 {
        match l {
            Link::Root => self.hdr + 8,
            Link::Child(s, _) => self.addr(s) + OFF_LOCK,
        }
    }

    fn link_addr(&self, l: Link) -> u64 {
        match l {
            Link::Root => self.hdr,
            Link::Child(s, dir) => self.addr(s) + OFF_LEFT + 8 * u64::from(dir),
        }
    }

    fn set_link(&mut self, l: Link, v: u64, p: &mut Pending) {
        p.store(self.link_addr(l), 8, IP + 0x40, 2);
        match l {
            Link::Root => self.root = v,
            Link::Child(s, dir) => {
                let mut n = self.get(s);
                if dir {
                    n.right = v;
                } else {
                    n.left = v;
                }
                self.over.insert(s, n);
            }
        }
    }

    /// Descends to the leaf for `key`: (grandparent link, parent link, leaf slot, leaf key), or
    /// `None` for an empty tree.
    fn descend(&self, key: u64, p: &mut Pending) -> Option<(Link, Link, u64, u64)> {
        p.load(self.hdr, 8, IP, 2);
        let (mut gp, mut par) = (Link::Root, Link::Root);
        let mut cur = self.root;
        if cur == NIL {
            return None;
        }
        loop {
            let n = self.get(cur);
            let a = self.addr(cur);
            p.load(a, 8, IP + 4, 3);
            if n.left == NIL {
                return Some((gp, par, cur, n.key));
            }
            let dir = key >= n.key;
            p.load(a + OFF_LEFT + 8 * u64::from(dir), 8, IP + 8, 3);
            gp = par;
            par = Link::Child(cur, dir);
            cur = if dir { n.right } else { n.left };
        }
    }

    fn new_node(&mut self, n: Node, vm: &mut dyn Vm, p: &mut Pending) -> Result<u64> {
        let s = self.pool.alloc(&mut self.heap, vm, p, IP + 0x80)?;
        let a = self.addr(s);
        // key, value, left, right, lock: the constructor's field stores.
        for f in 0..5 {
            p.store(a + 8 * f, 8, IP + 0x84, 2);
        }
        self.over.insert(s, n);
        Ok(s)
    }

    /// In-order keys of the leaves, checking the routing invariant on the way (tests).
    pub fn keys(&self) -> Vec<u64> {
        let mut out = Vec::new();
        if self.root == NIL {
            return out;
        }
        // (slot, lower bound inclusive, upper bound exclusive)
        let mut stack = vec![(self.root, 0u64, u64::MAX)];
        while let Some((s, lo, hi)) = stack.pop() {
            let n = self.get(s);
            if n.left == NIL {
                assert!(lo <= n.key && n.key < hi, "leaf {} outside [{lo}, {hi})", n.key);
                out.push(n.key);
            } else {
                assert!(lo <= n.key && n.key <= hi);
                stack.push((n.right, n.key, hi));
                stack.push((n.left, lo, n.key));
            }
        }
        out
    }

    /// Host-side nodes in the overlay.
    pub fn overlay_len(&self) -> usize {
        self.over.len()
    }
}

impl Set for BstExt {
    fn setup(&mut self, vm: &mut dyn Vm, populate: bool) -> Result<()> {
        self.hdr = self.heap.carve(vm, 64, 64)?;
        // The fill allocated n0 - 1 routing nodes and n0 leaves.
        self.pool.reserve(&mut self.heap, vm, 2 * self.n0 - 1, populate)
    }

    fn search(&mut self, key: u64, p: &mut Pending) -> bool {
        self.descend(key, p).is_some_and(|(_, _, _, k)| k == key)
    }

    fn insert(&mut self, key: u64, p: &mut Pending, vm: &mut dyn Vm, _rng: &mut Rng) -> Result<bool> {
        let Some((_, par, leaf, lk)) = self.descend(key, p) else {
            let s = self.new_node(Node { key, left: NIL, right: NIL }, vm, p)?;
            p.store(self.hdr + 8, 8, IP + 0x44, 2);
            self.set_link(Link::Root, s, p);
            p.store(self.hdr + 8, 8, IP + 0x48, 2);
            return Ok(true);
        };
        if lk == key {
            return Ok(false);
        }
        let nl = self.new_node(Node { key, left: NIL, right: NIL }, vm, p)?;
        let (l, r) = if key < lk { (nl, leaf) } else { (leaf, nl) };
        let ni = self.new_node(Node { key: key.max(lk), left: l, right: r }, vm, p)?;
        let lock = self.lock_addr(par);
        p.store(lock, 8, IP + 0x44, 4);
        self.set_link(par, ni, p);
        p.store(lock, 8, IP + 0x48, 2);
        Ok(true)
    }

    fn delete(&mut self, key: u64, p: &mut Pending) -> bool {
        let Some((gp, par, leaf, lk)) = self.descend(key, p) else {
            return false;
        };
        if lk != key {
            return false;
        }
        match par {
            Link::Root => {
                p.store(self.hdr + 8, 8, IP + 0x44, 4);
                self.set_link(Link::Root, NIL, p);
                p.store(self.hdr + 8, 8, IP + 0x48, 2);
            }
            Link::Child(ps, dir) => {
                let pn = self.get(ps);
                let sib = if dir { pn.left } else { pn.right };
                p.load(self.addr(ps) + OFF_LEFT + 8 * u64::from(!dir), 8, IP + 0x4c, 3);
                let (lg, lp) = (self.lock_addr(gp), self.lock_addr(par));
                p.store(lg, 8, IP + 0x44, 4);
                p.store(lp, 8, IP + 0x44, 4);
                self.set_link(gp, sib, p);
                p.store(lg, 8, IP + 0x48, 2);
                self.over.remove(&ps);
                self.pool.free(ps, p, IP + 0x90);
            }
        }
        self.over.remove(&leaf);
        self.pool.free(leaf, p, IP + 0x90);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::ascy::tests::{mirror_run, threaded};
    use super::super::common::tests::contract;
    use super::*;
    use crate::workload::testvm::TestVm;

    #[test]
    fn initial_tree_holds_the_fill_in_order() {
        for n0 in [2u64, 3, 5, 64, 100, 1000] {
            let t = BstExt::new(n0, 7);
            let want: Vec<u64> = (0..n0).map(|r| initial_key(7, r)).collect();
            assert_eq!(t.keys(), want);
        }
    }

    #[test]
    fn matches_a_btreeset_after_mixed_ops() {
        for n0 in [2u64, 50, 500] {
            let mut t = BstExt::new(n0, 3);
            let mut vm = TestVm::new();
            t.setup(&mut vm, true).unwrap();
            let mirror = mirror_run(&mut t, &mut vm, n0, 3, 4000);
            assert_eq!(t.keys(), mirror.into_iter().collect::<Vec<_>>());
        }
    }

    #[test]
    fn threads_sharing_it_keep_it_consistent() {
        let w = threaded(BstExt::new(2000, 12), 2000, 12);
        let keys = w.set.keys();
        assert!(keys.len() > 2000 / 2 && keys.len() < 2000 * 2, "{}", keys.len());
    }

    #[test]
    fn runs_as_a_workload() {
        contract("bst-ext", &[("range", "20000"), ("max_accesses", "20000")]);
        contract("bst-ext", &[("range", "20000"), ("max_accesses", "20000"), ("threads", "4")]);
    }

    /// SPARTA's size: 128 GiB of nodes is 1 G keys, yet the host holds only the overlay.
    #[test]
    fn sparta_footprint_is_cheap_host_side() {
        let mut vm = TestVm::new();
        let mut t = BstExt::new((128u64 << 30) / (2 * NODE), 5);
        t.setup(&mut vm, false).unwrap();
        let mut p = Pending::default();
        let mut rng = Rng::new(1);
        for _ in 0..2000 {
            let k = rng.below(2 * t.n0);
            t.insert(k, &mut p, &mut vm, &mut rng).unwrap();
            t.delete(rng.below(2 * t.n0), &mut p);
            t.search(k, &mut p);
        }
        assert!(t.overlay_len() < 10_000);
        assert!(vm.maps.iter().map(|m| m.1).sum::<u64>() >= 128 << 30);
    }
}
