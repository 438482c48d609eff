//! ASCYLIB-style chained hash table (its `ht-lazy` family): a power-of-two array of buckets, each
//! a lock word and the head of a sorted linked list; `bucket = key & (buckets - 1)`. Search walks
//! the bucket's list until a key `>= key`; insert links a new node between the two nodes found;
//! delete marks the node, unlinks it and frees it. Updates store to the lock word of the
//! predecessor (node or bucket) and of the node removed.
//!
//! Layout: buckets of 16 bytes (head pointer, lock), a power of two of them sized so nodes and
//! buckets fill the footprint (load factor 0.5-2; with `range` given, the initial key count
//! rounded up to a power of two); list nodes of 32 bytes (key, value, next, lock/mark).
//! Initial lists: bucket `b` holds, in order, the initial keys `b, b + buckets, ...`; the node of
//! the `r`-th initial key sits in a shuffled arena slot. Only buckets and nodes that the measured
//! phase changed are stored host-side (16-24 bytes + map overhead each).
//!
//! Instructions: hash and mask ≈ 4, bucket head load ≈ 2, per list node a key load (compare,
//! branch ≈ 3) and a next load (≈ 2); updates add node initialisation, lock and unlock stores.

use super::super::pending::Pending;
use super::super::{MapFlags, Params, Vm, Workload, WorkloadEntry};
use super::ascy::{initial_key, is_initial, Ascy, Config, Set, PARAMS};
use super::common::{footprint, Affine, FastMap};
use super::heap::{Heap, Pool};
use crate::error::Result;
use crate::rng::{hash2, Rng};

/// Bytes per list node.
pub const NODE: u64 = 32;
/// Bytes per bucket.
pub const BUCKET: u64 = 16;
const NIL: u64 = u64::MAX;
const OFF_NEXT: u64 = 16;
const OFF_LOCK: u64 = 24;
const IP: u64 = 0x44_0000;

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "hashtable",
    description: "ASCYLIB chained hash table (sorted per-bucket lists, 32 B nodes), search/insert/delete mix",
    params: PARAMS,
    build,
};

fn build(p: &Params, seed: u64) -> Result<Box<dyn Workload>> {
    let mut cfg = Config::parse(p, seed, NODE + BUCKET)?;
    let table = if p.u64("range")? == 0 {
        let (n0, nb) = fit(footprint(p, "footprint", 64 << 10)?);
        cfg.n0 = n0;
        HashTable::with_buckets(n0, nb, seed)
    } else {
        HashTable::new(cfg.n0, seed)
    };
    Ok(Box::new(Ascy::new(cfg, table)))
}

/// The most initial keys (and their power-of-two bucket count, load factor 0.5-2) whose nodes
/// and bucket array fit in `fp` bytes.
fn fit(fp: u64) -> (u64, u64) {
    let mut best = (1, 2);
    for sh in 1..48 {
        let nb = 1u64 << sh;
        let Some(rest) = fp.checked_sub(nb * BUCKET) else {
            break;
        };
        let n0 = (rest / NODE).min(2 * nb);
        if n0 > nb / 2 && n0 > best.0 {
            best = (n0, nb);
        }
    }
    best
}

#[derive(Clone, Copy, Debug)]
struct Node {
    key: u64,
    next: u64,
}

#[derive(Clone, Copy, Debug)]
enum Link {
    Head(u64),
    Next(u64),
}

/// The chained hash table.
pub struct HashTable {
    n0: u64,
    seed: u64,
    nb: u64,
    perm: Affine,
    heads: FastMap<u64, u64>,
    over: FastMap<u64, Node>,
    heap: Heap,
    pool: Pool,
    buckets: u64,
}

impl HashTable {
    /// A table whose initial fill holds `n0 >= 1` keys, with `n0` rounded up to a power of two
    /// buckets.
    pub fn new(n0: u64, seed: u64) -> HashTable {
        HashTable::with_buckets(n0, n0.next_power_of_two(), seed)
    }

    /// A table whose initial fill holds `n0 >= 1` keys in `nb` buckets (rounded up to a power
    /// of two, at least 2).
    pub fn with_buckets(n0: u64, nb: u64, seed: u64) -> HashTable {
        let n0 = n0.max(1);
        HashTable {
            n0,
            seed,
            nb: nb.next_power_of_two().max(2),
            perm: Affine::new(n0, hash2(seed, 21)),
            heads: FastMap::default(),
            over: FastMap::default(),
            heap: Heap::new(64 << 20, MapFlags::default()),
            pool: Pool::new(NODE, 64 << 20),
            buckets: 0,
        }
    }

    /// The first initial key `>= from` of `from`'s bucket, as a node slot.
    fn implicit_from(&self, mut from: u64) -> u64 {
        while from < 2 * self.n0 {
            if is_initial(self.seed, from) {
                return self.perm.fwd(from >> 1);
            }
            from += self.nb;
        }
        NIL
    }

    fn head(&self, b: u64) -> u64 {
        self.heads.get(&b).copied().unwrap_or_else(|| self.implicit_from(b))
    }

    fn get(&self, slot: u64) -> Node {
        if let Some(n) = self.over.get(&slot) {
            return *n;
        }
        let key = initial_key(self.seed, self.perm.inv(slot % self.n0));
        Node { key, next: self.implicit_from(key + self.nb) }
    }

    fn bucket_addr(&self, b: u64) -> u64 {
        self.buckets + b * BUCKET
    }

    fn set_link(&mut self, l: Link, v: u64, p: &mut Pending) {
        match l {
            Link::Head(b) => {
                p.store(self.bucket_addr(b), 8, IP + 0x40, 2);
                self.heads.insert(b, v);
            }
            Link::Next(s) => {
                p.store(self.pool.addr(s) + OFF_NEXT, 8, IP + 0x40, 2);
                let mut n = self.get(s);
                n.next = v;
                self.over.insert(s, n);
            }
        }
    }

    fn lock_addr(&self, l: Link) -> u64 {
        match l {
            Link::Head(b) => self.bucket_addr(b) + 8,
            Link::Next(s) => self.pool.addr(s) + OFF_LOCK,
        }
    }

    /// Walks `key`'s bucket: (link to the first node with key >= `key`, that node or NIL, its key).
    fn find(&self, key: u64, p: &mut Pending) -> (Link, u64, u64) {
        let b = key & (self.nb - 1);
        p.load(self.bucket_addr(b), 8, IP, 6);
        let mut link = Link::Head(b);
        let mut cur = self.head(b);
        while cur != NIL {
            let n = self.get(cur);
            let a = self.pool.addr(cur);
            p.load(a, 8, IP + 4, 3);
            if n.key >= key {
                return (link, cur, n.key);
            }
            p.load(a + OFF_NEXT, 8, IP + 8, 2);
            link = Link::Next(cur);
            cur = n.next;
        }
        (link, NIL, 0)
    }

    /// Every key, bucket by bucket, checking that each list is sorted and in its bucket (tests).
    pub fn keys(&self) -> Vec<u64> {
        let mut out = Vec::new();
        for b in 0..self.nb {
            let mut cur = self.head(b);
            let mut last = None;
            while cur != NIL {
                let n = self.get(cur);
                assert_eq!(n.key & (self.nb - 1), b);
                assert!(last.is_none_or(|l| l < n.key));
                last = Some(n.key);
                out.push(n.key);
                cur = n.next;
            }
        }
        out.sort_unstable();
        out
    }
}

impl Set for HashTable {
    fn setup(&mut self, vm: &mut dyn Vm, populate: bool) -> Result<()> {
        let bytes = self.nb * BUCKET;
        self.buckets = self.heap.malloc(vm, bytes, populate)?;
        self.pool.reserve(&mut self.heap, vm, self.n0, populate)
    }

    fn search(&mut self, key: u64, p: &mut Pending) -> bool {
        let (_, cur, k) = self.find(key, p);
        cur != NIL && k == key
    }

    fn insert(&mut self, key: u64, p: &mut Pending, vm: &mut dyn Vm, _rng: &mut Rng) -> Result<bool> {
        let (link, cur, k) = self.find(key, p);
        if cur != NIL && k == key {
            return Ok(false);
        }
        let s = self.pool.alloc(&mut self.heap, vm, p, IP + 0x80)?;
        let a = self.pool.addr(s);
        for f in 0..4 {
            p.store(a + 8 * f, 8, IP + 0x84, 2);
        }
        self.over.insert(s, Node { key, next: cur });
        let lock = self.lock_addr(link);
        p.store(lock, 8, IP + 0x44, 4);
        self.set_link(link, s, p);
        p.store(lock, 8, IP + 0x48, 2);
        Ok(true)
    }

    fn delete(&mut self, key: u64, p: &mut Pending) -> bool {
        let (link, cur, k) = self.find(key, p);
        if cur == NIL || k != key {
            return false;
        }
        let a = self.pool.addr(cur);
        let lock = self.lock_addr(link);
        p.store(lock, 8, IP + 0x44, 4);
        p.store(a + OFF_LOCK, 8, IP + 0x44, 4);
        p.load(a + OFF_NEXT, 8, IP + 0x4c, 1);
        let next = self.get(cur).next;
        self.set_link(link, next, p);
        p.store(lock, 8, IP + 0x48, 2);
        self.over.remove(&cur);
        self.pool.free(cur, p, IP + 0x90);
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
    fn initial_table_holds_the_fill() {
        for n0 in [1u64, 5, 64, 1000] {
            let t = HashTable::new(n0, 2);
            assert_eq!(t.keys(), (0..n0).map(|r| initial_key(2, r)).collect::<Vec<_>>());
        }
    }

    #[test]
    fn matches_a_btreeset_after_mixed_ops() {
        for n0 in [1u64, 30, 700] {
            let mut t = HashTable::new(n0, 8);
            let mut vm = TestVm::new();
            t.setup(&mut vm, true).unwrap();
            let mirror = mirror_run(&mut t, &mut vm, n0, 8, 5000);
            assert_eq!(t.keys(), mirror.into_iter().collect::<Vec<_>>());
        }
    }

    #[test]
    fn footprint_fits() {
        for fp in [64u64 << 10, 8 << 30, 128 << 30] {
            let (n0, nb) = fit(fp);
            let t = HashTable::with_buckets(n0, nb, 1);
            assert_eq!(t.nb, nb);
            assert!(n0 * NODE + nb * BUCKET <= fp);
            assert!(n0 * NODE + nb * BUCKET > fp * 3 / 4, "{fp}");
        }
        // A load factor above 1 still works.
        let mut t = HashTable::with_buckets(500, 128, 3);
        let mut vm = TestVm::new();
        t.setup(&mut vm, true).unwrap();
        let mirror = mirror_run(&mut t, &mut vm, 500, 3, 3000);
        assert_eq!(t.keys(), mirror.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn threads_sharing_it_keep_it_consistent() {
        let w = threaded(HashTable::new(2000, 12), 2000, 12);
        let keys = w.set.keys();
        assert!(keys.len() > 2000 / 2 && keys.len() < 2000 * 2, "{}", keys.len());
    }

    #[test]
    fn runs_as_a_workload() {
        contract("hashtable", &[("range", "20000"), ("max_accesses", "20000")]);
        contract("hashtable", &[("range", "20000"), ("max_accesses", "20000"), ("threads", "4")]);
    }
}
