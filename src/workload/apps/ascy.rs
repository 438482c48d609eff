//! The ASCYLIB-style harness shared by `bst-ext`, `bst-int`, `hashtable` and `skiplist`: a key
//! range, an initial fill of half the range (built implicitly, see each structure), then each
//! thread runs a search/insert/delete mix on uniformly random keys against the one shared set.
//!
//! Initial keys: the key range is `[0, 2*n0)` and the initial set holds exactly one key of each
//! pair `{2r, 2r+1}`, chosen by a hash of the seed and `r`. That is a uniformly random half of the
//! range (as ASCYLIB's random fill gives) whose `r`-th smallest key is computable in O(1), which the
//! implicit structures need.

use super::super::pending::Pending;
use super::super::{ParamInfo, ParamKind, Params, Vm, Workload};
use super::common::{footprint, max_accesses, threads, Streams, P_MAX_ACCESSES, P_POPULATE};
use crate::error::Result;
use crate::rng::{hash2, Rng};
use crate::trace::Access;

/// Instructions of the benchmark loop around one operation (PRNG, op choice, call, counters).
const OP_INSTRS: u32 = 20;

/// The `r`-th smallest key of the initial set.
#[inline]
pub fn initial_key(seed: u64, r: u64) -> u64 {
    2 * r + (hash2(seed, r) & 1)
}

/// Whether `key` belongs to the initial set.
#[inline]
pub fn is_initial(seed: u64, key: u64) -> bool {
    initial_key(seed, key >> 1) == key
}

/// The parameters every ASCYLIB structure takes.
pub const PARAMS: &[ParamInfo] = &[
    ParamInfo {
        name: "footprint",
        kind: ParamKind::Bytes,
        default: "8G",
        help: "bytes of nodes after the initial fill (sets the key range); SPARTA uses 128G",
    },
    ParamInfo {
        name: "range",
        kind: ParamKind::Count,
        default: "0",
        help: "key range (overrides footprint when not 0); the fill inserts range/2 keys",
    },
    ParamInfo { name: "search", kind: ParamKind::Count, default: "80", help: "percent of operations that are searches" },
    ParamInfo { name: "insert", kind: ParamKind::Count, default: "10", help: "percent of operations that are inserts" },
    ParamInfo {
        name: "delete",
        kind: ParamKind::Count,
        default: "10",
        help: "percent of operations that are deletes (the three must add up to 100)",
    },
    ParamInfo { name: "threads", kind: ParamKind::Count, default: "1", help: "threads sharing the structure (SPARTA: up to 16)" },
    P_MAX_ACCESSES,
    P_POPULATE,
];

/// Parsed harness parameters.
#[derive(Clone, Debug)]
pub struct Config {
    /// Keys in the initial set (the key range is twice this).
    pub n0: u64,
    /// Percent of searches.
    pub search: u64,
    /// Percent of inserts.
    pub insert: u64,
    /// Threads.
    pub threads: usize,
    /// Access budget.
    pub max_accesses: u64,
    /// Fault the initial structure in.
    pub populate: bool,
    /// Run seed.
    pub seed: u64,
}

impl Config {
    /// Reads the parameters; `bytes_per_key` converts the footprint into a key count.
    pub fn parse(p: &Params, seed: u64, bytes_per_key: u64) -> Result<Config> {
        let range = p.u64("range")?;
        let n0 = if range != 0 {
            if !(4..=1 << 40).contains(&range) {
                return Err(p.out_of_range("range", "0 or between 4 and 2^40"));
            }
            range / 2
        } else {
            footprint(p, "footprint", 64 << 10)? / bytes_per_key
        };
        let (s, i, d) = (p.u64("search")?, p.u64("insert")?, p.u64("delete")?);
        if s.checked_add(i).and_then(|x| x.checked_add(d)) != Some(100) {
            return Err(p.out_of_range("delete", "a percentage making search + insert + delete = 100"));
        }
        Ok(Config { n0, search: s, insert: i, threads: threads(p)?, max_accesses: max_accesses(p)?, populate: p.bool("populate")?, seed })
    }

    /// A configuration for tests.
    pub fn small(n0: u64, threads: usize, max_accesses: u64, seed: u64) -> Config {
        Config { n0, search: 80, insert: 10, threads, max_accesses, populate: true, seed }
    }
}

/// A concurrent set as ASCYLIB benchmarks them.
pub trait Set {
    /// Lays out the initial structure (half the key range) without emitting accesses.
    fn setup(&mut self, vm: &mut dyn Vm, populate: bool) -> Result<()>;
    /// Whether `key` is present.
    fn search(&mut self, key: u64, p: &mut Pending) -> bool;
    /// Inserts `key`; false if it was present. `rng` is the calling thread's (skip-list levels).
    fn insert(&mut self, key: u64, p: &mut Pending, vm: &mut dyn Vm, rng: &mut Rng) -> Result<bool>;
    /// Deletes `key`; false if it was absent.
    fn delete(&mut self, key: u64, p: &mut Pending) -> bool;
}

/// A set structure driven by the ASCYLIB harness.
pub struct Ascy<S> {
    cfg: Config,
    /// The shared structure.
    pub set: S,
    streams: Streams,
    rngs: Vec<Rng>,
}

impl<S: Set> Ascy<S> {
    /// The harness around `set`.
    pub fn new(cfg: Config, set: S) -> Ascy<S> {
        let streams = Streams::new(cfg.threads, cfg.max_accesses);
        let rngs = (0..cfg.threads).map(|t| Rng::new(hash2(cfg.seed ^ 0xa5c1, t as u64))).collect();
        Ascy { cfg, set, streams, rngs }
    }
}

impl<S: Set> Workload for Ascy<S> {
    fn setup(&mut self, vm: &mut dyn Vm) -> Result<()> {
        self.set.setup(vm, self.cfg.populate)
    }

    fn threads(&self) -> usize {
        self.cfg.threads
    }

    fn fill(&mut self, thread: usize, buf: &mut [Access], vm: &mut dyn Vm) -> Result<usize> {
        let Ascy { cfg, set, streams, rngs } = self;
        let Some(rng) = rngs.get_mut(thread) else {
            return Ok(0);
        };
        let range = 2 * cfg.n0;
        streams.fill(thread, buf, |p| {
            let op = rng.below(100);
            let key = rng.below(range);
            p.instrs(OP_INSTRS);
            if op < cfg.search {
                set.search(key, p);
            } else if op < cfg.search + cfg.insert {
                set.insert(key, p, vm, rng)?;
            } else {
                set.delete(key, p);
            }
            Ok(true)
        })
    }
}

#[cfg(test)]
pub mod tests {
    //! Helpers shared by the set structures' tests: a mirrored random run and a threaded run.
    use super::*;
    use crate::workload::testvm::TestVm;
    use std::collections::BTreeSet;

    /// Runs `set` as a 4-thread workload with an update-heavy mix until the budget is spent,
    /// checking every access, and hands it back for invariant checks.
    pub fn threaded<S: Set>(set: S, n0: u64, seed: u64) -> Ascy<S> {
        let mut cfg = Config::small(n0, 4, 60_000, seed);
        (cfg.search, cfg.insert) = (40, 30);
        let mut w = Ascy::new(cfg, set);
        let mut vm = TestVm::new();
        w.setup(&mut vm).unwrap();
        let streams = crate::workload::apps::common::tests::run_all(&mut w, &mut vm, 97);
        for s in &streams {
            assert!(s.len() >= 15_000, "every thread gets its share");
        }
        w
    }

    /// Runs a random mixed sequence against `set` and a `BTreeSet` mirror, checking every result
    /// and every access; returns the mirror.
    pub fn mirror_run<S: Set>(set: &mut S, vm: &mut TestVm, n0: u64, seed: u64, ops: usize) -> BTreeSet<u64> {
        let mut mirror: BTreeSet<u64> = (0..n0).map(|r| initial_key(seed, r)).collect();
        let mut rng = Rng::new(99);
        let mut p = Pending::default();
        let mut buf = vec![Access::default(); 4096];
        for i in 0..ops {
            // Insert-heavy at first, delete-heavy later, so the set both grows and shrinks.
            let key = rng.below(2 * n0 + 2);
            let r = rng.below(100);
            let (ins, del) = if i < ops / 2 { (50, 70) } else { (20, 70) };
            if r < ins {
                assert_eq!(set.insert(key, &mut p, vm, &mut rng).unwrap(), mirror.insert(key), "insert {key}");
            } else if r < del {
                assert_eq!(set.delete(key, &mut p), mirror.remove(&key), "delete {key}");
            } else {
                assert_eq!(set.search(key, &mut p), mirror.contains(&key), "search {key}");
            }
            while !p.is_empty() {
                let n = p.drain_into(&mut buf, 0);
                for a in &buf[..n] {
                    assert!(vm.contains(a.vaddr, u64::from(a.size)), "{a:?}");
                }
            }
        }
        mirror
    }
}
