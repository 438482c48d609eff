//! ASCYLIB-style skip list (its `sl-fraser` / `sl-herlihy` family): a head node with `levelmax`
//! forward pointers, nodes with a random level (`P(level > l) = 2^-l`) and that many forward
//! pointers. A search descends from the top level, moving right while the next key is smaller;
//! insert links a node of random level after the predecessors found at each of its levels; delete
//! marks the node and unlinks it level by level. Updates store to the lock word of each distinct
//! predecessor (lock and unlock) and of the node removed.
//!
//! Node: key, value, level/lock word, then 8 bytes per level: 64 bytes for levels 1-5, 256 bytes
//! for levels 6-29 (two size classes, as a size-class allocator would serve them).
//!
//! Initial list (built implicitly, only changed nodes are kept host-side): the `r`-th initial key
//! gets its level from a *stratified* random choice: for each level `i` and each aligned block of
//! `2^i` ranks, a seeded coin picks which half's level-`i` node is promoted. Exactly one node in
//! each block reaches level `i + 1`, at a random position, so gaps between same-level nodes vary
//! (1 to 2^(i+1)-1 ranks) like a random skip list's while every node's level and successors are
//! computable in O(levels). The node count per level is exactly `n0 / 2^l` rather than binomial
//! around it. Nodes sit in shuffled slots of their size class.
//!
//! Instructions: per step a next-pointer load (≈ 2) and a key load (compare, branch ≈ 3); per
//! level descent ≈ 2 more; updates add field stores, lock stores and the allocator fast path.

use super::super::pending::Pending;
use super::super::{MapFlags, Params, Vm, Workload, WorkloadEntry};
use super::ascy::{initial_key, Ascy, Config, Set, PARAMS};
use super::common::{Affine, FastMap};
use super::heap::{Heap, Pool};
use crate::error::Result;
use crate::rng::{hash2, mix64, Rng};

/// Levels served by the small (64-byte) class.
const SMALL_LEVELS: u32 = 5;
const SMALL: u64 = 64;
const BIG: u64 = 256;
/// Highest level a node can have (fits the 256-byte class).
pub const MAX_LEVEL: u32 = 29;
const OFF_LOCK: u64 = 16;
const OFF_NEXT: u64 = 24;
const NIL: u64 = u64::MAX;
/// Tag of node ids in the big class.
const BIG_TAG: u64 = 1 << 62;
/// Id of the head node.
const HEAD: u64 = 1 << 61;
const IP: u64 = 0x45_0000;

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "skiplist",
    description: "ASCYLIB skip list (random levels, 64/256 B nodes), search/insert/delete mix",
    params: PARAMS,
    build,
};

fn build(p: &Params, seed: u64) -> Result<Box<dyn Workload>> {
    // 31/32 of the nodes take 64 bytes, 1/32 take 256: 70 bytes per key on average.
    let cfg = Config::parse(p, seed, 70)?;
    Ok(Box::new(Ascy::new(cfg.clone(), SkipList::new(cfg.n0, seed))))
}

#[derive(Clone, Debug)]
struct Node {
    key: u64,
    next: Vec<u64>,
}

/// The skip list.
pub struct SkipList {
    n0: u64,
    seed: u64,
    levelmax: u32,
    nbig: u64,
    small_perm: Affine,
    big_perm: Affine,
    over: FastMap<u64, Node>,
    head: Vec<u64>,
    heap: Heap,
    small: Pool,
    big: Pool,
    head_addr: u64,
}

impl SkipList {
    /// A list whose initial fill holds `n0 >= 1` keys.
    pub fn new(n0: u64, seed: u64) -> SkipList {
        let n0 = n0.max(1);
        // As ASCYLIB sizes it: about log2 of the initial size levels.
        let levelmax = (63 - n0.leading_zeros()).clamp(1, MAX_LEVEL);
        let mut s = SkipList {
            n0,
            seed,
            levelmax,
            nbig: 0,
            small_perm: Affine::new(1, 0),
            big_perm: Affine::new(1, 0),
            over: FastMap::default(),
            head: Vec::new(),
            heap: Heap::new(64 << 20, MapFlags::default()),
            small: Pool::new(SMALL, 64 << 20),
            big: Pool::new(BIG, 64 << 20),
            head_addr: 0,
        };
        if levelmax > SMALL_LEVELS {
            let b = n0 >> SMALL_LEVELS;
            s.nbig = b + u64::from(s.pos(SMALL_LEVELS, b) < n0);
        }
        s.small_perm = Affine::new(n0 - s.nbig, hash2(seed, 31));
        s.big_perm = Affine::new(s.nbig.max(1), hash2(seed, 32));
        s.head = (0..levelmax).map(|l| s.first_at(l)).collect();
        s
    }

    /// The coin of level `i` for block `b` of `2^i` ranks: which half's node is promoted.
    #[inline]
    fn coin(&self, i: u32, b: u64) -> u64 {
        mix64(self.seed ^ mix64(b ^ (u64::from(i) << 58))) & 1
    }

    /// The rank promoted to level `i + 1` in block `b` of `2^i` ranks.
    fn pos(&self, i: u32, mut b: u64) -> u64 {
        for j in (1..=i).rev() {
            b = 2 * b + self.coin(j, b);
        }
        b
    }

    /// Level (1..=levelmax) of the `r`-th initial key.
    fn rank_level(&self, r: u64) -> u32 {
        let mut l = 1;
        while l < self.levelmax && self.coin(l, r >> l) == (r >> (l - 1)) & 1 {
            l += 1;
        }
        l
    }

    /// The first rank with a level above `l`, or NIL.
    fn first_at(&self, l: u32) -> u64 {
        let r = self.pos(l, 0);
        if r < self.n0 {
            self.id_of(r)
        } else {
            NIL
        }
    }

    fn is_big_rank(&self, r: u64) -> bool {
        self.levelmax > SMALL_LEVELS && self.pos(SMALL_LEVELS, r >> SMALL_LEVELS) == r
    }

    /// Node id of the `r`-th initial key.
    fn id_of(&self, r: u64) -> u64 {
        let b = r >> SMALL_LEVELS;
        if self.is_big_rank(r) {
            BIG_TAG | self.big_perm.fwd(b)
        } else if self.levelmax > SMALL_LEVELS {
            let before = b + u64::from(self.pos(SMALL_LEVELS, b) < r);
            self.small_perm.fwd(r - before)
        } else {
            self.small_perm.fwd(r)
        }
    }

    /// Rank of the initial node `id` (inverse of [`SkipList::id_of`]).
    fn rank_of(&self, id: u64) -> u64 {
        if id & BIG_TAG != 0 {
            return self.pos(SMALL_LEVELS, self.big_perm.inv(id & !BIG_TAG));
        }
        let idx = self.small_perm.inv(id % (self.n0 - self.nbig).max(1));
        if self.levelmax <= SMALL_LEVELS {
            return idx;
        }
        let per = (1u64 << SMALL_LEVELS) - 1;
        let (b, j) = (idx / per, idx % per);
        let t = self.pos(SMALL_LEVELS, b) - (b << SMALL_LEVELS);
        (b << SMALL_LEVELS) + j + u64::from(j >= t)
    }

    /// Successor of rank `r` at level `l`, as a node id.
    fn implicit_next(&self, r: u64, l: u32) -> u64 {
        let n = if l == 0 {
            r + 1
        } else {
            let c = self.pos(l, r >> l);
            if c > r {
                c
            } else {
                self.pos(l, (r >> l) + 1)
            }
        };
        if n < self.n0 {
            self.id_of(n)
        } else {
            NIL
        }
    }

    fn key(&self, id: u64) -> u64 {
        match self.over.get(&id) {
            Some(n) => n.key,
            None => initial_key(self.seed, self.rank_of(id)),
        }
    }

    fn level(&self, id: u64) -> u32 {
        match self.over.get(&id) {
            Some(n) => n.next.len() as u32,
            None => self.rank_level(self.rank_of(id)),
        }
    }

    fn next(&self, id: u64, l: u32) -> u64 {
        if id == HEAD {
            return self.head[l as usize];
        }
        match self.over.get(&id) {
            Some(n) => n.next[l as usize],
            None => self.implicit_next(self.rank_of(id), l),
        }
    }

    fn set_next(&mut self, id: u64, l: u32, v: u64, p: &mut Pending) {
        p.store(self.addr(id) + OFF_NEXT + 8 * u64::from(l), 8, IP + 0x40, 2);
        if id == HEAD {
            self.head[l as usize] = v;
            return;
        }
        if !self.over.contains_key(&id) {
            let r = self.rank_of(id);
            let next = (0..self.rank_level(r)).map(|i| self.implicit_next(r, i)).collect();
            self.over.insert(id, Node { key: initial_key(self.seed, r), next });
        }
        if let Some(n) = self.over.get_mut(&id) {
            n.next[l as usize] = v;
        }
    }

    fn addr(&self, id: u64) -> u64 {
        if id == HEAD {
            self.head_addr
        } else if id & BIG_TAG != 0 {
            self.big.addr(id & !BIG_TAG)
        } else {
            self.small.addr(id)
        }
    }

    /// Predecessors and successors of `key` at every level (ASCYLIB's search).
    fn find(&self, key: u64, p: &mut Pending) -> (Vec<u64>, Vec<u64>) {
        let lm = self.levelmax as usize;
        let (mut preds, mut succs) = (vec![HEAD; lm], vec![NIL; lm]);
        let mut pred = HEAD;
        for l in (0..self.levelmax).rev() {
            p.load(self.addr(pred) + OFF_NEXT + 8 * u64::from(l), 8, IP, 4);
            let mut cur = self.next(pred, l);
            while cur != NIL {
                p.load(self.addr(cur), 8, IP + 4, 3);
                if self.key(cur) >= key {
                    break;
                }
                pred = cur;
                p.load(self.addr(cur) + OFF_NEXT + 8 * u64::from(l), 8, IP + 8, 2);
                cur = self.next(cur, l);
            }
            preds[l as usize] = pred;
            succs[l as usize] = cur;
        }
        (preds, succs)
    }

    /// Keys in order along level 0, checking every level's list (tests).
    pub fn keys(&self) -> Vec<u64> {
        let mut out = Vec::new();
        let mut levels = vec![0usize; self.levelmax as usize];
        let mut cur = self.next(HEAD, 0);
        while cur != NIL {
            let k = self.key(cur);
            assert!(out.last().is_none_or(|&x| x < k), "level 0 out of order at {k}");
            out.push(k);
            for c in levels.iter_mut().take(self.level(cur) as usize) {
                *c += 1;
            }
            cur = self.next(cur, 0);
        }
        for l in 1..self.levelmax {
            let (mut cur, mut len, mut last) = (self.next(HEAD, l), 0, None);
            while cur != NIL {
                assert!(self.level(cur) > l);
                let k = self.key(cur);
                assert!(last.is_none_or(|x| x < k), "level {l} out of order");
                last = Some(k);
                len += 1;
                cur = self.next(cur, l);
            }
            assert_eq!(len, levels[l as usize], "level {l} misses nodes");
        }
        out
    }
}

impl Set for SkipList {
    fn setup(&mut self, vm: &mut dyn Vm, populate: bool) -> Result<()> {
        self.head_addr = self.heap.carve(vm, BIG, 64)?;
        self.small.reserve(&mut self.heap, vm, self.n0 - self.nbig, populate)?;
        self.big.reserve(&mut self.heap, vm, self.nbig, populate)
    }

    fn search(&mut self, key: u64, p: &mut Pending) -> bool {
        let (_, succs) = self.find(key, p);
        succs[0] != NIL && self.key(succs[0]) == key
    }

    fn insert(&mut self, key: u64, p: &mut Pending, vm: &mut dyn Vm, rng: &mut Rng) -> Result<bool> {
        let (preds, succs) = self.find(key, p);
        if succs[0] != NIL && self.key(succs[0]) == key {
            return Ok(false);
        }
        let mut level = 1;
        while level < self.levelmax && rng.next_u64() & 1 == 1 {
            level += 1;
        }
        p.instrs(3 * level);
        let id = if level > SMALL_LEVELS {
            BIG_TAG | self.big.alloc(&mut self.heap, vm, p, IP + 0x80)?
        } else {
            self.small.alloc(&mut self.heap, vm, p, IP + 0x80)?
        };
        let a = self.addr(id);
        for f in 0..3 + u64::from(level) {
            p.store(a + 8 * f, 8, IP + 0x84, 2);
        }
        self.over.insert(id, Node { key, next: succs[..level as usize].to_vec() });
        let mut last = NIL;
        for l in 0..level {
            let pr = preds[l as usize];
            if pr != last {
                p.store(self.addr(pr) + OFF_LOCK, 8, IP + 0x44, 4);
                last = pr;
            }
            self.set_next(pr, l, id, p);
        }
        Ok(true)
    }

    fn delete(&mut self, key: u64, p: &mut Pending) -> bool {
        let (preds, succs) = self.find(key, p);
        let node = succs[0];
        if node == NIL || self.key(node) != key {
            return false;
        }
        let a = self.addr(node);
        p.load(a + OFF_LOCK, 8, IP + 0x48, 2);
        p.store(a + OFF_LOCK, 8, IP + 0x44, 4);
        let mut last = NIL;
        for l in (0..self.level(node)).rev() {
            let pr = preds[l as usize];
            if pr != last {
                p.store(self.addr(pr) + OFF_LOCK, 8, IP + 0x44, 4);
                last = pr;
            }
            p.load(a + OFF_NEXT + 8 * u64::from(l), 8, IP + 0x4c, 2);
            let nx = self.next(node, l);
            self.set_next(pr, l, nx, p);
        }
        self.over.remove(&node);
        if node & BIG_TAG != 0 {
            self.big.free(node & !BIG_TAG, p, IP + 0x90);
        } else {
            self.small.free(node, p, IP + 0x90);
        }
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
    fn initial_list_holds_the_fill_with_consistent_levels() {
        for n0 in [1u64, 2, 31, 32, 33, 100, 1000, 5000] {
            let s = SkipList::new(n0, 6);
            assert_eq!(s.keys(), (0..n0).map(|r| initial_key(6, r)).collect::<Vec<_>>(), "n0 {n0}");
            let mut ids: Vec<u64> = (0..n0).map(|r| s.id_of(r)).collect();
            for (r, &id) in ids.iter().enumerate() {
                assert_eq!(s.rank_of(id), r as u64);
                assert_eq!(id & BIG_TAG != 0, s.rank_level(r as u64) > SMALL_LEVELS);
            }
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len() as u64, n0);
        }
        // Level populations halve.
        let s = SkipList::new(1 << 14, 1);
        let at = |l| (0..1u64 << 14).filter(|&r| s.rank_level(r) > l).count();
        assert_eq!((at(1), at(3), at(5)), (1 << 13, 1 << 11, 1 << 9));
    }

    #[test]
    fn matches_a_btreeset_after_mixed_ops() {
        for n0 in [1u64, 40, 900] {
            let mut s = SkipList::new(n0, 5);
            let mut vm = TestVm::new();
            s.setup(&mut vm, true).unwrap();
            let mirror = mirror_run(&mut s, &mut vm, n0, 5, 5000);
            assert_eq!(s.keys(), mirror.into_iter().collect::<Vec<_>>());
        }
    }

    #[test]
    fn threads_sharing_it_keep_it_consistent() {
        let w = threaded(SkipList::new(2000, 12), 2000, 12);
        let keys = w.set.keys();
        assert!(keys.len() > 2000 / 2 && keys.len() < 2000 * 2, "{}", keys.len());
    }

    #[test]
    fn runs_as_a_workload() {
        contract("skiplist", &[("range", "20000"), ("max_accesses", "20000")]);
        contract("skiplist", &[("range", "20000"), ("max_accesses", "20000"), ("threads", "4")]);
    }
}
