//! No-partitioning hash join (the `NPO` algorithm of Balkesen et al., ICDE'13, re-implemented):
//! build a bucket-chained hash table from relation R, then probe it with every tuple of relation
//! S, counting matches. Relations are arrays of 16-byte tuples (8-byte key, 8-byte payload); the
//! table is a power-of-two array of 48-byte buckets (latch, count, two tuples, overflow pointer)
//! indexed by `key & mask`.
//!
//! Data, generated on demand from the seed: R holds the keys `0..|R|` in shuffled order (an affine
//! permutation of the row number), as the benchmark's dense unique keys; S's keys are uniform over
//! `0..|R| * 100 / match`, so `match` percent of them find their R tuple. With dense keys and
//! `|R|/2` buckets every bucket gets at most two tuples, so, exactly as in the original benchmark
//! on such data, overflow buckets are never needed; where each tuple lands is computable, so the
//! host keeps nothing per tuple.
//!
//! Phases: the build (`measure_build = true`) streams R and fills the table; otherwise the table
//! is built host-side and faulted in, and only the probe is emitted (the probe dominates when S is
//! the larger relation, as in the usual workloads).
//!
//! Instructions: build ≈ 12 per R tuple (load, hash, bucket address, next and count loads, tuple
//! store, count store), probe ≈ 8 per S tuple plus ≈ 4 per bucket tuple compared.

use super::super::pending::Pending;
use super::super::{MapFlags, ParamInfo, ParamKind, Params, Vm, Workload, WorkloadEntry};
use super::common::{footprint, max_accesses, Affine, Streams, P_MAX_ACCESSES, P_POPULATE};
use super::heap::Heap;
use crate::error::Result;
use crate::rng::hash2;
use crate::trace::Access;

/// Bytes per tuple.
pub const TUPLE: u64 = 16;
/// Bytes per bucket.
pub const BUCKET: u64 = 48;
const IP: u64 = 0x48_0000;

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "hashjoin",
    description: "no-partitioning hash join: build a chained table from R, probe it with S",
    params: &[
        ParamInfo { name: "footprint", kind: ParamKind::Bytes, default: "8G", help: "bytes of R + S + hash table (sets the size of R)" },
        ParamInfo { name: "s_ratio", kind: ParamKind::Count, default: "4", help: "S tuples per R tuple (a whole number, 1-64)" },
        ParamInfo { name: "match", kind: ParamKind::Count, default: "100", help: "percent of S tuples that have a match in R (1-100)" },
        ParamInfo {
            name: "measure_build",
            kind: ParamKind::Flag,
            default: "false",
            help: "emit the build phase too (else only the probe)",
        },
        P_MAX_ACCESSES,
        P_POPULATE,
    ],
    build,
};

fn build(p: &Params, seed: u64) -> Result<Box<dyn Workload>> {
    let fp = footprint(p, "footprint", 1 << 20)?;
    let s = p.u64("s_ratio")?;
    if !(1..=64).contains(&s) {
        return Err(p.out_of_range("s_ratio", "a whole number between 1 and 64"));
    }
    let m = p.u64("match")?;
    if !(1..=100).contains(&m) {
        return Err(p.out_of_range("match", "a percentage between 1 and 100"));
    }
    let (nr, _) = size(fp, s);
    let mut j = HashJoin::new(nr, s * nr, m, seed);
    j.measure_build = p.bool("measure_build")?;
    j.populate = p.bool("populate")?;
    j.streams = Streams::new(1, max_accesses(p)?);
    Ok(Box::new(j))
}

/// Largest |R| (with its bucket count) whose R, S and table fit in `fp` bytes.
fn size(fp: u64, s: u64) -> (u64, u64) {
    let mut best = (2, 1);
    for sh in 0..40 {
        let nb = 1u64 << sh;
        let Some(rest) = fp.checked_sub(nb * BUCKET) else {
            break;
        };
        let nr = (rest / (TUPLE * (1 + s))).min(2 * nb);
        if nr > nb && nr > best.0 {
            best = (nr, nb);
        }
    }
    best
}

/// The join's state.
pub struct HashJoin {
    nr: u64,
    ns: u64,
    key_space: u64,
    nb: u64,
    seed: u64,
    rperm: Affine,
    r: u64,
    s: u64,
    table: u64,
    measure_build: bool,
    populate: bool,
    built: u64,
    probed: u64,
    /// Matches found by the probe so far.
    pub matches: u64,
    streams: Streams,
}

impl HashJoin {
    /// A join of `nr` R tuples with `ns` S tuples, `m` percent of which match.
    pub fn new(nr: u64, ns: u64, m: u64, seed: u64) -> HashJoin {
        let nr = nr.max(1);
        HashJoin {
            nr,
            ns,
            key_space: (nr * 100 / m.clamp(1, 100)).max(1),
            nb: nr.div_ceil(2).next_power_of_two(),
            seed,
            rperm: Affine::new(nr, hash2(seed, 0x41)),
            r: 0,
            s: 0,
            table: 0,
            measure_build: true,
            populate: true,
            built: 0,
            probed: 0,
            matches: 0,
            streams: Streams::new(1, u64::MAX),
        }
    }

    /// Key of R tuple `i`.
    pub fn r_key(&self, i: u64) -> u64 {
        self.rperm.fwd(i)
    }

    /// Key of S tuple `j`.
    pub fn s_key(&self, j: u64) -> u64 {
        hash2(self.seed ^ 0x5, j) % self.key_space
    }

    /// Keys in bucket `b`, in build (insertion) order.
    fn bucket(&self, b: u64) -> ([u64; 2], usize) {
        let mut k = [b, b + self.nb];
        let n = usize::from(b < self.nr) + usize::from(b + self.nb < self.nr);
        if n == 2 && self.rperm.inv(k[1]) < self.rperm.inv(k[0]) {
            k.swap(0, 1);
        }
        (k, n)
    }

    fn build_one(&mut self, i: u64, p: &mut Pending) {
        let key = self.r_key(i);
        p.load(self.r + i * TUPLE, 16, IP, 3);
        let b = key & (self.nb - 1);
        let ba = self.table + b * BUCKET;
        p.load(ba + 40, 8, IP + 4, 4);
        p.load(ba + 4, 4, IP + 8, 2);
        // The bucket's other key went in first if its R row comes earlier.
        let other = key ^ self.nb;
        let slot = u64::from(other < self.nr && self.rperm.inv(other) < i);
        p.store(ba + 8 + slot * TUPLE, 16, IP + 12, 2);
        p.store(ba + 4, 4, IP + 16, 1);
    }

    fn probe_one(&mut self, j: u64, p: &mut Pending) {
        let key = self.s_key(j);
        p.load(self.s + j * TUPLE, 16, IP + 0x20, 3);
        let b = key & (self.nb - 1);
        let ba = self.table + b * BUCKET;
        p.load(ba + 4, 4, IP + 0x24, 4);
        let (keys, n) = self.bucket(b);
        for (t, &k) in keys[..n].iter().enumerate() {
            p.load(ba + 8 + t as u64 * TUPLE, 8, IP + 0x28, 4);
            self.matches += u64::from(k == key);
        }
        p.load(ba + 40, 8, IP + 0x2c, 2);
    }
}

impl Workload for HashJoin {
    fn setup(&mut self, vm: &mut dyn Vm) -> Result<()> {
        let mut heap = Heap::new(64 << 20, MapFlags::default());
        // The relations were generated in memory before the join starts; the table is faulted
        // in by the build, which is either measured or done before the probe.
        self.r = heap.malloc(vm, self.nr * TUPLE, self.populate)?;
        self.s = heap.malloc(vm, self.ns.max(1) * TUPLE, self.populate)?;
        self.table = heap.malloc(vm, self.nb * BUCKET, self.populate && !self.measure_build)?;
        if !self.measure_build {
            self.built = self.nr;
        }
        Ok(())
    }

    fn fill(&mut self, thread: usize, buf: &mut [Access], _vm: &mut dyn Vm) -> Result<usize> {
        // Take the streams out so the step can borrow the rest of `self` mutably.
        let mut streams = std::mem::replace(&mut self.streams, Streams::new(0, 1));
        let r = streams.fill(thread, buf, |p| {
            if self.built < self.nr {
                self.build_one(self.built, p);
                self.built += 1;
            } else if self.probed < self.ns {
                self.probe_one(self.probed, p);
                self.probed += 1;
            } else {
                return Ok(false);
            }
            Ok(true)
        });
        self.streams = streams;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::tests::{contract, run_all};
    use super::*;
    use crate::trace::AccessKind;
    use crate::workload::testvm::TestVm;
    use std::collections::{HashMap, HashSet};

    #[test]
    fn match_count_equals_a_direct_join() {
        for (nr, ns, m) in [(1u64, 5u64, 100u64), (1000, 4000, 100), (777, 3000, 37), (4096, 100, 5)] {
            let mut j = HashJoin::new(nr, ns, m, 9);
            let mut vm = TestVm::new();
            j.setup(&mut vm).unwrap();
            let s = run_all(&mut j, &mut vm, 256).remove(0);
            let r: HashMap<u64, u64> = (0..nr).map(|i| (j.r_key(i), i)).collect();
            assert_eq!(r.len() as u64, nr, "R keys unique");
            let want = (0..ns).filter(|&x| r.contains_key(&j.s_key(x))).count() as u64;
            assert_eq!(j.matches, want, "nr {nr} ns {ns}");
            if m == 100 {
                assert_eq!(want, ns);
            }
            // The build wrote every R tuple to its own slot of its key's bucket.
            let stores: Vec<u64> = s.iter().filter(|a| a.kind == AccessKind::Store && a.size == 16).map(|a| a.vaddr).collect();
            assert_eq!(stores.len() as u64, nr);
            let distinct: HashSet<u64> = stores.iter().copied().collect();
            assert_eq!(distinct.len() as u64, nr);
            for (i, &a) in stores.iter().enumerate() {
                let b = j.r_key(i as u64) & (j.nb - 1);
                assert_eq!((a - j.table) / BUCKET, b);
            }
        }
    }

    #[test]
    fn sizes_fit_the_footprint() {
        for fp in [1u64 << 20, 3 << 30, 8 << 30, 33 << 30] {
            let (nr, nb) = size(fp, 4);
            assert!(nr * TUPLE * 5 + nb * BUCKET <= fp);
            assert!(nr * TUPLE * 5 + nb * BUCKET > fp / 2, "{fp}");
            assert_eq!(HashJoin::new(nr, 4 * nr, 100, 1).nb, nb);
        }
    }

    #[test]
    fn runs_as_a_workload() {
        contract("hashjoin", &[("footprint", "4M"), ("max_accesses", "20000")]);
        contract("hashjoin", &[("footprint", "4M"), ("max_accesses", "20000"), ("measure_build", "true")]);
    }
}
