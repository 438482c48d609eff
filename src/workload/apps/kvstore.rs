//! A memcached-like key-value store: a chained hash table of item pointers (`bucket = hash &
//! mask`, new items linked at the chain head) over items allocated from slab classes (chunk sizes
//! growing by 1.25x from 96 bytes, carved from 1 MiB slab pages). Client threads issue GET/SET
//! requests with scrambled-Zipfian keys (YCSB's request distribution).
//!
//! Item layout (memcached's, 64-bit, with CAS): 48-byte header (LRU next/prev, hash-chain next,
//! times, value length, refcount, flags, class, key length, CAS), the 24-byte key (YCSB's
//! `user...`), a terminator, then the value and `\r\n`. Value sizes are a fixed function of the
//! key, drawn uniformly from `[value_min, value_max]` by a 256-entry seeded pattern (so each
//! class's item count, and every initial item's chunk, is computable: the load phase inserted the
//! keys in key order, so the `i`-th key of a class sits in that class's `i`-th chunk).
//!
//! GET: item lock (lock table entry), bucket load, per chain item a key-length load, key compare
//! and next load; on the hit a refcount increment, the value read line by line (the response
//! copy), refcount decrement, unlock. SET: lookup as GET, allocate a chunk of the item's class
//! (the free list first: the chunk the previous SET of that class released), write header, key
//! and value, unlink the old item from its chain, link the new one at the head, free the old
//! chunk. LRU maintenance, expiry and eviction are not modelled (SETs replace items in place
//! size-for-size, so memory never fills).
//!
//! Hash: an affine permutation of the key index modulo the bucket count (buckets = item count /
//! 1.5 rounded up to a power of two, memcached's growth threshold), so chains hold 1-2 items; the
//! initial chains are computable and only touched buckets are stored host-side.
//!
//! Instructions: request parsing, hashing (murmur3 of the key) and response building ≈ 1500
//! user-space instructions per request, charged to its first access (the kernel's network path is
//! not simulated); per chain step ≈ 4-10; value copy ≈ 4 per 64-byte line.

use super::super::pending::Pending;
use super::super::{MapFlags, ParamInfo, ParamKind, Params, Vm, Workload, WorkloadEntry};
use super::common::{footprint, max_accesses, theta, threads, Affine, FastMap, Streams, Zipf, P_MAX_ACCESSES, P_POPULATE};
use super::heap::{Heap, Pool};
use crate::error::Result;
use crate::rng::{hash2, mix64, Rng};
use crate::trace::Access;

/// Item header bytes.
pub const HEADER: u64 = 48;
/// Key bytes.
pub const KEY: u64 = 24;
const PATTERN: usize = 256;
const SLAB_PAGE: u64 = 1 << 20;
const LOCKS: u64 = 1 << 13;
const LOCK_BYTES: u64 = 40;
const REQUEST_INSTRS: u32 = 1500;
const IP: u64 = 0x47_0000;

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "kvstore",
    description: "memcached-like store: hash chains of items in slab classes, Zipfian GET/SET mix",
    params: &[
        ParamInfo {
            name: "footprint",
            kind: ParamKind::Bytes,
            default: "8G",
            help: "bytes of item memory after the load phase (sets the key count)",
        },
        ParamInfo { name: "value_min", kind: ParamKind::Bytes, default: "100", help: "smallest value in bytes" },
        ParamInfo { name: "value_max", kind: ParamKind::Bytes, default: "1000", help: "largest value in bytes (at most 512K)" },
        ParamInfo { name: "get", kind: ParamKind::Count, default: "90", help: "percent of requests that are GETs (the rest SETs)" },
        ParamInfo { name: "theta", kind: ParamKind::Number, default: "0.99", help: "Zipf exponent of the key popularity (YCSB's 0.99)" },
        ParamInfo { name: "threads", kind: ParamKind::Count, default: "4", help: "server worker threads (memcached's default 4)" },
        P_MAX_ACCESSES,
        P_POPULATE,
    ],
    build,
};

fn build(p: &Params, seed: u64) -> Result<Box<dyn Workload>> {
    let vmin = p.bytes("value_min")?;
    let vmax = p.bytes("value_max")?;
    if vmax > 512 << 10 {
        return Err(p.out_of_range("value_max", "at most 512K"));
    }
    if vmin > vmax {
        return Err(p.out_of_range("value_min", "at most value_max"));
    }
    let get = p.u64("get")?;
    if get > 100 {
        return Err(p.out_of_range("get", "a percentage (0-100)"));
    }
    let th = theta(p, "theta")?;
    let t = threads(p)?;
    let layout = Layout::new(vmin, vmax, seed);
    let nkeys = (footprint(p, "footprint", 1 << 20)? / (layout.avg_chunk() + 6)).max(1);
    let store = KvStore::new(nkeys, layout, seed);
    Ok(Box::new(KvWorkload {
        zipf: Zipf::new(nkeys, th),
        store,
        get,
        populate: p.bool("populate")?,
        streams: Streams::new(t, max_accesses(p)?),
        rngs: (0..t).map(|i| Rng::new(hash2(seed ^ 0x4b5, i as u64))).collect(),
        sets: 0,
    }))
}

/// The workload: the store plus the client request streams.
pub struct KvWorkload {
    store: KvStore,
    zipf: Zipf,
    get: u64,
    populate: bool,
    streams: Streams,
    rngs: Vec<Rng>,
    sets: u64,
}

impl Workload for KvWorkload {
    fn setup(&mut self, vm: &mut dyn Vm) -> Result<()> {
        self.store.setup(vm, self.populate)
    }

    fn threads(&self) -> usize {
        self.streams.threads()
    }

    fn fill(&mut self, thread: usize, buf: &mut [Access], vm: &mut dyn Vm) -> Result<usize> {
        let KvWorkload { store, zipf, get, streams, rngs, sets, .. } = self;
        let Some(rng) = rngs.get_mut(thread) else {
            return Ok(0);
        };
        streams.fill(thread, buf, |p| {
            // YCSB's scrambled Zipfian: popular ranks land on unrelated keys.
            let key = mix64(zipf.sample(rng)) % store.nkeys;
            if rng.below(100) < *get {
                store.get(key, p);
            } else {
                *sets += 1;
                store.set(key, mix64(*sets ^ store.seed), p, vm)?;
            }
            Ok(true)
        })
    }
}

/// Slab classes and the per-key value-size pattern.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Chunk size of each class.
    chunk: Vec<u64>,
    /// Value bytes of pattern entry i.
    vsize: [u64; PATTERN],
    /// Class of pattern entry i.
    class: [u8; PATTERN],
    /// Index of entry i among the entries of its class.
    within: [u64; PATTERN],
    /// Entries per class in one pattern period.
    per: Vec<u64>,
}

impl Layout {
    /// Classes 96 B x 1.25^i (8-byte aligned) up to what the largest item needs.
    pub fn new(vmin: u64, vmax: u64, seed: u64) -> Layout {
        let item = |v: u64| HEADER + KEY + 1 + v + 2;
        let mut chunk = vec![96u64];
        while chunk[chunk.len() - 1] < item(vmax) {
            let c = chunk[chunk.len() - 1] * 5 / 4;
            chunk.push((c + 7) & !7);
        }
        let mut vsize = [0; PATTERN];
        let mut class = [0; PATTERN];
        let mut within = [0; PATTERN];
        let mut per = vec![0; chunk.len()];
        for i in 0..PATTERN {
            vsize[i] = vmin + hash2(seed ^ 0x51ab, i as u64) % (vmax - vmin + 1);
            let c = chunk.partition_point(|&c| c < item(vsize[i]));
            class[i] = c as u8;
            within[i] = per[c];
            per[c] += 1;
        }
        Layout { chunk, vsize, class, within, per }
    }

    /// Mean chunk bytes per item.
    pub fn avg_chunk(&self) -> u64 {
        self.class.iter().map(|&c| self.chunk[c as usize]).sum::<u64>() / PATTERN as u64
    }

    /// (class, chunk index) of key `k`'s item after the load phase.
    fn initial(&self, k: u64) -> (usize, u64) {
        let i = (k % PATTERN as u64) as usize;
        let c = self.class[i] as usize;
        (c, (k / PATTERN as u64) * self.per[c] + self.within[i])
    }

    /// Items of class `c` among keys `0..n`.
    fn initial_count(&self, c: usize, n: u64) -> u64 {
        let rem = (n % PATTERN as u64) as usize;
        (n / PATTERN as u64) * self.per[c] + self.class[..rem].iter().filter(|&&x| x as usize == c).count() as u64
    }
}

/// The store.
pub struct KvStore {
    nkeys: u64,
    seed: u64,
    layout: Layout,
    nb: u64,
    hperm: Affine,
    chains: FastMap<u64, Vec<u64>>,
    loc: FastMap<u64, (u8, u64)>,
    vals: FastMap<u64, u64>,
    heap: Heap,
    pools: Vec<Pool>,
    table: u64,
    locks: u64,
}

impl KvStore {
    /// A store loaded with keys `0..nkeys`.
    pub fn new(nkeys: u64, layout: Layout, seed: u64) -> KvStore {
        let nkeys = nkeys.max(1);
        let nb = (nkeys * 2).div_ceil(3).next_power_of_two().max(2);
        let pools = layout.chunk.iter().map(|&c| Pool::new(c, SLAB_PAGE)).collect();
        KvStore {
            nkeys,
            seed,
            layout,
            nb,
            hperm: Affine::new(nkeys, hash2(seed, 0x4a)),
            chains: FastMap::default(),
            loc: FastMap::default(),
            vals: FastMap::default(),
            heap: Heap::new(64 << 20, MapFlags::default()),
            pools,
            table: 0,
            locks: 0,
        }
    }

    fn bucket(&self, k: u64) -> u64 {
        self.hperm.fwd(k) & (self.nb - 1)
    }

    /// Keys in bucket `b`'s chain, head first.
    fn chain(&self, b: u64) -> Vec<u64> {
        if let Some(c) = self.chains.get(&b) {
            return c.clone();
        }
        let mut keys = Vec::new();
        let mut h = b;
        while h < self.nkeys {
            keys.push(self.hperm.inv(h));
            h += self.nb;
        }
        // The load inserted keys in increasing order, each at the head.
        keys.sort_unstable_by(|a, b| b.cmp(a));
        keys
    }

    fn item(&self, k: u64) -> (usize, u64) {
        match self.loc.get(&k) {
            Some(&(c, s)) => (c as usize, s),
            None => self.layout.initial(k),
        }
    }

    fn item_addr(&self, k: u64) -> u64 {
        let (c, s) = self.item(k);
        self.pools[c].addr(s)
    }

    fn value_bytes(&self, k: u64) -> u64 {
        self.layout.vsize[(k % PATTERN as u64) as usize] + 2
    }

    fn lock_addr(&self, k: u64) -> u64 {
        self.locks + (mix64(k ^ self.seed) % LOCKS) * LOCK_BYTES
    }

    /// Walks `k`'s chain as `assoc_find` does; returns (bucket, chain, position of `k`).
    fn find(&self, k: u64, p: &mut Pending) -> (u64, Vec<u64>, usize) {
        let b = self.bucket(k);
        p.load(self.table + 8 * b, 8, IP, 4);
        let chain = self.chain(b);
        for (i, &x) in chain.iter().enumerate() {
            let a = self.item_addr(x);
            p.load(a + 40, 8, IP + 4, 4);
            p.load(a + HEADER, KEY as u8, IP + 8, 10);
            if x == k {
                return (b, chain, i);
            }
            p.load(a + 16, 8, IP + 12, 2);
        }
        // Every key 0..nkeys is stored and SETs replace, so lookups always hit.
        (b, chain, usize::MAX)
    }

    /// GET: returns the value token of `k`.
    pub fn get(&self, k: u64, p: &mut Pending) -> u64 {
        p.instrs(REQUEST_INSTRS);
        let lock = self.lock_addr(k);
        p.store(lock, 8, IP + 0x10, 6);
        self.find(k, p);
        let a = self.item_addr(k);
        p.load(a + 32, 8, IP + 0x14, 2);
        p.store(a + 32, 8, IP + 0x14, 1);
        p.store(lock, 8, IP + 0x18, 4);
        let v0 = a + HEADER + KEY + 1;
        let mut o = 0;
        let len = self.value_bytes(k);
        while o < len {
            let n = (len - o).min(64 - (v0 + o) % 64);
            p.load(v0 + o, n as u8, IP + 0x1c, 4);
            o += n;
        }
        p.load(a + 32, 8, IP + 0x20, 3);
        p.store(a + 32, 8, IP + 0x20, 1);
        self.vals.get(&k).copied().unwrap_or_else(|| hash2(self.seed ^ 0x7a1, k))
    }

    /// SET: stores value token `v` under `k` in a fresh item.
    pub fn set(&mut self, k: u64, v: u64, p: &mut Pending, vm: &mut dyn Vm) -> Result<()> {
        p.instrs(REQUEST_INSTRS);
        let lock = self.lock_addr(k);
        p.store(lock, 8, IP + 0x40, 6);
        let (b, mut chain, pos) = self.find(k, p);
        let (c, old) = self.item(k);
        let new = self.pools[c].alloc(&mut self.heap, vm, p, IP + 0x80)?;
        let a = self.pools[c].addr(new);
        for f in 0..HEADER / 8 {
            p.store(a + 8 * f, 8, IP + 0x44, 2);
        }
        p.store(a + HEADER, KEY as u8, IP + 0x48, 4);
        let (v0, len) = (a + HEADER + KEY + 1, self.value_bytes(k));
        let mut o = 0;
        while o < len {
            let n = (len - o).min(64 - (v0 + o) % 64);
            p.store(v0 + o, n as u8, IP + 0x4c, 4);
            o += n;
        }
        // Unlink the old item: its predecessor's h_next (or the bucket) takes its h_next.
        let olda = self.pools[c].addr(old);
        p.load(olda + 16, 8, IP + 0x50, 2);
        if pos == 0 || pos == usize::MAX {
            p.store(self.table + 8 * b, 8, IP + 0x54, 2);
        } else {
            p.store(self.item_addr(chain[pos - 1]) + 16, 8, IP + 0x54, 2);
        }
        if pos != usize::MAX {
            chain.remove(pos);
        }
        // Link the new one at the head.
        p.load(self.table + 8 * b, 8, IP + 0x58, 2);
        p.store(a + 16, 8, IP + 0x58, 1);
        p.store(self.table + 8 * b, 8, IP + 0x5c, 2);
        chain.insert(0, k);
        self.chains.insert(b, chain);
        self.loc.insert(k, (c as u8, new));
        self.vals.insert(k, v);
        self.pools[c].free(old, p, IP + 0x90);
        p.store(lock, 8, IP + 0x60, 4);
        Ok(())
    }

    /// Lays the loaded store out: hash table, lock table, slab pages of every class.
    pub fn setup(&mut self, vm: &mut dyn Vm, populate: bool) -> Result<()> {
        self.table = self.heap.malloc(vm, 8 * self.nb, populate)?;
        self.locks = self.heap.malloc(vm, LOCKS * LOCK_BYTES, populate)?;
        for c in 0..self.pools.len() {
            let n = self.layout.initial_count(c, self.nkeys);
            self.pools[c].reserve(&mut self.heap, vm, n, populate)?;
        }
        Ok(())
    }

    /// Checks that every key sits exactly once in its bucket's chain and that live items do not
    /// share chunks (tests).
    pub fn check(&self) {
        let mut seen = vec![false; self.nkeys as usize];
        let mut chunks = std::collections::HashSet::new();
        for b in 0..self.nb {
            for k in self.chain(b) {
                assert_eq!(self.bucket(k), b);
                assert!(!std::mem::replace(&mut seen[k as usize], true), "key {k} twice");
                assert!(chunks.insert(self.item(k)), "chunk shared");
            }
        }
        assert!(seen.iter().all(|&s| s));
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::tests::contract;
    use super::*;
    use crate::workload::testvm::TestVm;
    use std::collections::HashMap;

    #[test]
    fn get_returns_the_last_set() {
        let layout = Layout::new(10, 3000, 7);
        let mut s = KvStore::new(2000, layout, 7);
        let mut vm = TestVm::new();
        s.setup(&mut vm, true).unwrap();
        s.check();
        let mut mirror: HashMap<u64, u64> = HashMap::new();
        let mut rng = Rng::new(1);
        let mut p = Pending::default();
        let mut buf = vec![Access::default(); 512];
        for i in 0..20_000u64 {
            let k = rng.below(if i % 2 == 0 { 50 } else { 2000 });
            if rng.below(2) == 0 {
                let want = mirror.get(&k).copied().unwrap_or_else(|| hash2(7 ^ 0x7a1, k));
                assert_eq!(s.get(k, &mut p), want, "key {k}");
            } else {
                s.set(k, i, &mut p, &mut vm).unwrap();
                mirror.insert(k, i);
            }
            while !p.is_empty() {
                let n = p.drain_into(&mut buf, 0);
                assert!(buf[..n].iter().all(|a| vm.contains(a.vaddr, u64::from(a.size))));
            }
        }
        s.check();
        // Replaced chunks are recycled: memory did not grow by one chunk per SET.
        let slots: u64 = s.pools.iter().map(Pool::slots).sum();
        assert!(slots < 2000 + 100, "{slots}");
    }

    #[test]
    fn classes_fit_their_items() {
        let l = Layout::new(1, 100_000, 3);
        for i in 0..PATTERN {
            let c = l.class[i] as usize;
            assert!(l.chunk[c] >= HEADER + KEY + 3 + l.vsize[i]);
            assert!(c == 0 || l.chunk[c - 1] < HEADER + KEY + 3 + l.vsize[i]);
        }
        assert_eq!(l.per.iter().sum::<u64>(), PATTERN as u64);
    }

    #[test]
    fn runs_as_a_workload() {
        contract("kvstore", &[("footprint", "16M"), ("max_accesses", "40000"), ("get", "50")]);
        contract("kvstore", &[("footprint", "16M"), ("max_accesses", "40000"), ("threads", "1")]);
    }
}
