//! ASCYLIB-style internal binary search tree (every node holds a key, as in its `bst-drachsler` /
//! `bst-howley` family). Insert hangs a new node at the empty link the search reaches; delete
//! unlinks a node with at most one child, or overwrites a node with two children by its in-order
//! successor's key and value and unlinks the successor. Updates store to the lock words of the
//! nodes whose links or contents they change.
//!
//! Node: 64 bytes (key, value, left, right, lock word, padded to a cache line), one per key.
//! Initial tree: [`PerfectTree`] over the `n0` keys (position `x` holds the `x-1`-th key); only
//! nodes the measured phase touches are stored host-side (32 bytes + map overhead each).
//!
//! Instructions: per traversal step a key load (load, compare, equality and order branches ≈ 4)
//! and a child load (select, load, null test ≈ 3); updates as in `bst-ext`.

use super::super::pending::Pending;
use super::super::{MapFlags, Params, Vm, Workload, WorkloadEntry};
use super::ascy::{initial_key, Ascy, Config, Set, PARAMS};
use super::common::FastMap;
use super::heap::{Heap, Pool};
use super::implicit::PerfectTree;
use crate::error::Result;
use crate::rng::{hash2, Rng};

/// Bytes per node.
pub const NODE: u64 = 64;
const NIL: u64 = u64::MAX;
const OFF_LEFT: u64 = 16;
const OFF_LOCK: u64 = 32;
const IP: u64 = 0x43_0000;

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "bst-int",
    description: "ASCYLIB internal BST (keys in every node, 64 B nodes), search/insert/delete mix",
    params: PARAMS,
    build,
};

fn build(p: &Params, seed: u64) -> Result<Box<dyn Workload>> {
    let cfg = Config::parse(p, seed, NODE)?;
    Ok(Box::new(Ascy::new(cfg.clone(), BstInt::new(cfg.n0, seed))))
}

#[derive(Clone, Copy, Debug)]
struct Node {
    key: u64,
    left: u64,
    right: u64,
}

#[derive(Clone, Copy, Debug)]
enum Link {
    Root,
    Child(u64, bool),
}

/// The internal BST.
pub struct BstInt {
    n0: u64,
    seed: u64,
    tree: PerfectTree,
    over: FastMap<u64, Node>,
    root: u64,
    heap: Heap,
    pool: Pool,
    hdr: u64,
}

impl BstInt {
    /// A tree whose initial fill holds `n0 >= 1` keys.
    pub fn new(n0: u64, seed: u64) -> BstInt {
        let n0 = n0.max(1);
        let tree = PerfectTree::new(n0, hash2(seed, 11));
        let root = tree.slot(tree.root());
        BstInt {
            n0,
            seed,
            tree,
            over: FastMap::default(),
            root,
            heap: Heap::new(64 << 20, MapFlags::default()),
            pool: Pool::new(NODE, 64 << 20),
            hdr: 0,
        }
    }

    fn get(&self, slot: u64) -> Node {
        if let Some(n) = self.over.get(&slot) {
            return *n;
        }
        let x = self.tree.pos(slot % self.n0);
        let left = self.tree.left(x).map_or(NIL, |c| self.tree.slot(c));
        let right = self.tree.right(x).map_or(NIL, |c| self.tree.slot(c));
        Node { key: initial_key(self.seed, x - 1), left, right }
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

    fn set_link(&mut self, l: Link, v: u64, p: &mut Pending) {
        match l {
            Link::Root => {
                p.store(self.hdr, 8, IP + 0x40, 2);
                self.root = v;
            }
            Link::Child(s, dir) => {
                p.store(self.addr(s) + OFF_LEFT + 8 * u64::from(dir), 8, IP + 0x40, 2);
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

    /// Searches `key`: (link to the node or to the empty spot, the node's slot or NIL).
    fn descend(&self, key: u64, p: &mut Pending) -> (Link, u64) {
        p.load(self.hdr, 8, IP, 2);
        let mut link = Link::Root;
        let mut cur = self.root;
        while cur != NIL {
            let n = self.get(cur);
            let a = self.addr(cur);
            p.load(a, 8, IP + 4, 4);
            if n.key == key {
                return (link, cur);
            }
            let dir = key > n.key;
            p.load(a + OFF_LEFT + 8 * u64::from(dir), 8, IP + 8, 3);
            link = Link::Child(cur, dir);
            cur = if dir { n.right } else { n.left };
        }
        (link, NIL)
    }

    /// In-order keys, checking the search-tree order on the way (tests).
    pub fn keys(&self) -> Vec<u64> {
        let mut out = Vec::new();
        let mut stack: Vec<u64> = Vec::new();
        let mut cur = self.root;
        while cur != NIL || !stack.is_empty() {
            while cur != NIL {
                stack.push(cur);
                cur = self.get(cur).left;
            }
            let Some(s) = stack.pop() else { break };
            let n = self.get(s);
            assert!(out.last().is_none_or(|&l| l < n.key), "out of order at {}", n.key);
            out.push(n.key);
            cur = n.right;
        }
        out
    }
}

impl Set for BstInt {
    fn setup(&mut self, vm: &mut dyn Vm, populate: bool) -> Result<()> {
        self.hdr = self.heap.carve(vm, 64, 64)?;
        self.pool.reserve(&mut self.heap, vm, self.n0, populate)
    }

    fn search(&mut self, key: u64, p: &mut Pending) -> bool {
        self.descend(key, p).1 != NIL
    }

    fn insert(&mut self, key: u64, p: &mut Pending, vm: &mut dyn Vm, _rng: &mut Rng) -> Result<bool> {
        let (link, cur) = self.descend(key, p);
        if cur != NIL {
            return Ok(false);
        }
        let s = self.pool.alloc(&mut self.heap, vm, p, IP + 0x80)?;
        let a = self.addr(s);
        for f in 0..5 {
            p.store(a + 8 * f, 8, IP + 0x84, 2);
        }
        self.over.insert(s, Node { key, left: NIL, right: NIL });
        let lock = self.lock_addr(link);
        p.store(lock, 8, IP + 0x44, 4);
        self.set_link(link, s, p);
        p.store(lock, 8, IP + 0x48, 2);
        Ok(true)
    }

    fn delete(&mut self, key: u64, p: &mut Pending) -> bool {
        let (link, z) = self.descend(key, p);
        if z == NIL {
            return false;
        }
        let zn = self.get(z);
        let za = self.addr(z);
        p.load(za + OFF_LEFT, 8, IP + 0x4c, 2);
        p.load(za + OFF_LEFT + 8, 8, IP + 0x4c, 2);
        if zn.left == NIL || zn.right == NIL {
            let child = if zn.left == NIL { zn.right } else { zn.left };
            let lock = self.lock_addr(link);
            p.store(lock, 8, IP + 0x44, 4);
            p.store(za + OFF_LOCK, 8, IP + 0x44, 4);
            self.set_link(link, child, p);
            p.store(lock, 8, IP + 0x48, 2);
            self.over.remove(&z);
            self.pool.free(z, p, IP + 0x90);
            return true;
        }
        // Two children: the successor is the leftmost node of the right subtree.
        let mut sl = Link::Child(z, true);
        let mut s = zn.right;
        loop {
            let sn = self.get(s);
            p.load(self.addr(s) + OFF_LEFT, 8, IP + 0x50, 3);
            if sn.left == NIL {
                break;
            }
            sl = Link::Child(s, false);
            s = sn.left;
        }
        let sn = self.get(s);
        let sa = self.addr(s);
        p.load(sa, 8, IP + 0x54, 2);
        p.load(sa + 8, 8, IP + 0x54, 1);
        p.load(sa + OFF_LEFT + 8, 8, IP + 0x54, 1);
        let lock = self.lock_addr(sl);
        p.store(za + OFF_LOCK, 8, IP + 0x44, 4);
        p.store(lock, 8, IP + 0x44, 4);
        p.store(za, 8, IP + 0x58, 1);
        p.store(za + 8, 8, IP + 0x58, 1);
        let mut zn = self.get(z);
        zn.key = sn.key;
        self.over.insert(z, zn);
        self.set_link(sl, sn.right, p);
        p.store(lock, 8, IP + 0x48, 2);
        p.store(za + OFF_LOCK, 8, IP + 0x48, 2);
        self.over.remove(&s);
        self.pool.free(s, p, IP + 0x90);
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
        for n0 in [1u64, 2, 3, 7, 8, 100, 1000] {
            let t = BstInt::new(n0, 9);
            assert_eq!(t.keys(), (0..n0).map(|r| initial_key(9, r)).collect::<Vec<_>>());
        }
    }

    #[test]
    fn matches_a_btreeset_after_mixed_ops() {
        for n0 in [1u64, 40, 600] {
            let mut t = BstInt::new(n0, 4);
            let mut vm = TestVm::new();
            t.setup(&mut vm, true).unwrap();
            let mirror = mirror_run(&mut t, &mut vm, n0, 4, 5000);
            assert_eq!(t.keys(), mirror.into_iter().collect::<Vec<_>>());
        }
    }

    #[test]
    fn threads_sharing_it_keep_it_consistent() {
        let w = threaded(BstInt::new(2000, 12), 2000, 12);
        let keys = w.set.keys();
        assert!(keys.len() > 2000 / 2 && keys.len() < 2000 * 2, "{}", keys.len());
    }

    #[test]
    fn runs_as_a_workload() {
        contract("bst-int", &[("range", "20000"), ("max_accesses", "20000")]);
        contract("bst-int", &[("range", "20000"), ("max_accesses", "20000"), ("threads", "3")]);
    }
}
