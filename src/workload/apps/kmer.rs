//! GenomicsBench-style k-mer counting: stream 2-bit-packed sequencing reads, roll the forward and
//! reverse-complement k-mer of every position, and count the canonical k-mer (the smaller of the
//! two) in an open-addressing hash table with linear probing.
//!
//! Data, generated from the seed: a synthetic genome (`genome` bases), and reads of `read_len`
//! bases sampled from random positions of either strand with substitution errors at rate `error`,
//! packed back to back (32 bases per 8-byte word) in the reads buffer. The table holds 16-byte
//! entries (8-byte k-mer, 4-byte count, padding; count 0 = empty), `hash = mix64(kmer)` mapped to
//! a slot by multiply-shift.
//!
//! Footprint: 7/8 of `footprint` is the table, 1/8 the reads buffer. The measured window counts
//! the first reads; to see the probe lengths of a table that is already partly full (as in the
//! middle of a real run), `prefill` percent of the slots hold k-mers counted before the window.
//! Those are modelled as occupied slots (a seeded hash of the slot number) holding k-mers that
//! differ from every k-mer of the window, i.e. the window's reads come from genome regions not
//! seen before; the host stores only the slots the window itself fills (about 40 bytes each).
//!
//! Instructions: ≈ 12 per base (2-bit extract, forward/reverse roll, canonical min, loop), ≈ 8
//! per k-mer for hashing and slot computation, ≈ 4 per probe step; one word load per 32 bases.

use super::super::pending::Pending;
use super::super::{MapFlags, ParamInfo, ParamKind, Params, Vm, Workload, WorkloadEntry};
use super::common::{footprint, max_accesses, FastMap, Streams, P_MAX_ACCESSES, P_POPULATE};
use super::heap::Heap;
use crate::error::Result;
use crate::rng::{hash2, mix64};
use crate::trace::Access;

/// Bytes per table entry.
pub const ENTRY_BYTES: u64 = 16;
const IP: u64 = 0x4b_0000;

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "kmer",
    description: "k-mer counting of 2-bit packed reads into a linear-probing hash table",
    params: &[
        ParamInfo { name: "footprint", kind: ParamKind::Bytes, default: "8G", help: "bytes of hash table (7/8) plus reads buffer (1/8)" },
        ParamInfo { name: "k", kind: ParamKind::Count, default: "31", help: "k-mer length (1-32)" },
        ParamInfo {
            name: "genome",
            kind: ParamKind::Bytes,
            default: "4M",
            help: "bases of the synthetic genome the reads are sampled from",
        },
        ParamInfo { name: "read_len", kind: ParamKind::Count, default: "150", help: "bases per read" },
        ParamInfo { name: "error", kind: ParamKind::Number, default: "0.01", help: "per-base substitution error rate of the reads" },
        ParamInfo {
            name: "prefill",
            kind: ParamKind::Count,
            default: "50",
            help: "percent of table slots already holding earlier k-mers (0-90)",
        },
        P_MAX_ACCESSES,
        P_POPULATE,
    ],
    build,
};

fn build(p: &Params, seed: u64) -> Result<Box<dyn Workload>> {
    let fp = footprint(p, "footprint", 1 << 20)?;
    let k = p.u64("k")?;
    if !(1..=32).contains(&k) {
        return Err(p.out_of_range("k", "between 1 and 32"));
    }
    let read_len = p.u64("read_len")?;
    if !(k..=1 << 20).contains(&read_len) {
        return Err(p.out_of_range("read_len", "between k and 1M"));
    }
    let genome = p.bytes("genome")?;
    if genome < read_len {
        return Err(p.out_of_range("genome", "at least read_len bases"));
    }
    let error = p.f64("error")?;
    if !(0.0..=0.5).contains(&error) {
        return Err(p.out_of_range("error", "a rate between 0 and 0.5"));
    }
    let prefill = p.u64("prefill")?;
    if prefill > 90 {
        return Err(p.out_of_range("prefill", "a percentage between 0 and 90"));
    }
    let slots = fp / 8 * 7 / ENTRY_BYTES;
    let reads = (fp / 8 * 4 / read_len).max(1);
    let cfg = KmerConfig { k, read_len, genome, error, prefill, slots, reads };
    let mut w = Kmer::new(cfg, seed);
    w.populate = p.bool("populate")?;
    w.streams = Streams::new(1, max_accesses(p)?);
    Ok(Box::new(w))
}

/// Sizes and rates of a k-mer counting run.
#[derive(Clone, Copy, Debug)]
pub struct KmerConfig {
    /// k-mer length.
    pub k: u64,
    /// Bases per read.
    pub read_len: u64,
    /// Genome bases.
    pub genome: u64,
    /// Substitution rate.
    pub error: f64,
    /// Percent of slots occupied before the window.
    pub prefill: u64,
    /// Table slots.
    pub slots: u64,
    /// Reads in the buffer.
    pub reads: u64,
}

/// The k-mer counter's state.
pub struct Kmer {
    cfg: KmerConfig,
    seed: u64,
    table: u64,
    reads: u64,
    /// Slots filled by the window: (k-mer, count).
    filled: FastMap<u64, (u64, u32)>,
    next_read: u64,
    populate: bool,
    streams: Streams,
    /// K-mers dropped because the table was full.
    pub dropped: u64,
}

impl Kmer {
    /// A counter over `cfg`.
    pub fn new(cfg: KmerConfig, seed: u64) -> Kmer {
        Kmer {
            cfg,
            seed,
            table: 0,
            reads: 0,
            filled: FastMap::default(),
            next_read: 0,
            populate: true,
            streams: Streams::new(1, u64::MAX),
            dropped: 0,
        }
    }

    fn genome_base(&self, x: u64) -> u64 {
        (hash2(self.seed ^ 0x6e0, x / 32) >> (2 * (x % 32))) & 3
    }

    /// Base `i` of read `j` (A=0, C=1, G=2, T=3).
    pub fn read_base(&self, j: u64, i: u64) -> u64 {
        let h = hash2(self.seed ^ 0x4ead, j);
        let start = h % (self.cfg.genome - self.cfg.read_len + 1);
        let b = if h >> 63 == 0 { self.genome_base(start + i) } else { 3 - self.genome_base(start + self.cfg.read_len - 1 - i) };
        let e = hash2(self.seed ^ 0xe22, j * self.cfg.read_len + i);
        if (e >> 11) as f64 * (1.0 / (1u64 << 53) as f64) < self.cfg.error {
            (b + 1 + e % 3) % 4
        } else {
            b
        }
    }

    fn prefilled(&self, slot: u64) -> bool {
        mix64(self.seed ^ mix64(slot ^ 0x9f11)) % 100 < self.cfg.prefill
    }

    /// Counts `kmer`, emitting the probe sequence.
    fn count(&mut self, kmer: u64, p: &mut Pending) {
        let c = self.cfg.slots;
        let mut slot = ((u128::from(mix64(kmer)) * u128::from(c)) >> 64) as u64;
        p.instrs(8);
        for _ in 0..c {
            let a = self.table + slot * ENTRY_BYTES;
            p.load(a, 16, IP + 8, 4);
            let pre = self.prefilled(slot);
            match self.filled.get_mut(&slot) {
                Some((km, n)) if *km == kmer => {
                    *n += 1;
                    p.store(a + 8, 4, IP + 12, 2);
                    return;
                }
                Some(_) => {}
                None if pre => {}
                None => {
                    self.filled.insert(slot, (kmer, 1));
                    p.store(a, 16, IP + 16, 2);
                    return;
                }
            }
            slot = if slot + 1 == c { 0 } else { slot + 1 };
        }
        self.dropped += 1;
    }

    /// Counts every k-mer of read `j`.
    fn read(&mut self, j: u64, p: &mut Pending) {
        let (k, len) = (self.cfg.k, self.cfg.read_len);
        let mask = if k == 32 { u64::MAX } else { (1 << (2 * k)) - 1 };
        let (mut fw, mut rc) = (0u64, 0u64);
        for i in 0..len {
            let pos = j * len + i;
            if i == 0 || pos.is_multiple_of(32) {
                p.load(self.reads + pos / 32 * 8, 8, IP, 3);
            }
            let b = self.read_base(j, i);
            fw = ((fw << 2) | b) & mask;
            rc = (rc >> 2) | ((3 - b) << (2 * (k - 1)));
            p.instrs(12);
            if i + 1 >= k {
                self.count(fw.min(rc), p);
            }
        }
    }

    /// The window's counts, k-mer by k-mer (tests).
    pub fn counts(&self) -> FastMap<u64, u32> {
        self.filled.values().map(|&(k, n)| (k, n)).collect()
    }
}

impl Workload for Kmer {
    fn setup(&mut self, vm: &mut dyn Vm) -> Result<()> {
        let tb = self.cfg.slots * ENTRY_BYTES;
        let rb = (self.cfg.reads * self.cfg.read_len).div_ceil(32) * 8;
        // The table is allocated and zeroed, the reads loaded, before counting starts.
        let mut heap = Heap::new(64 << 20, MapFlags::default());
        self.table = heap.malloc(vm, tb, self.populate)?;
        self.reads = heap.malloc(vm, rb, self.populate)?;
        Ok(())
    }

    fn fill(&mut self, thread: usize, buf: &mut [Access], _vm: &mut dyn Vm) -> Result<usize> {
        // Take the streams out so the step can borrow the rest of `self` mutably.
        let mut streams = std::mem::replace(&mut self.streams, Streams::new(0, 1));
        let r = streams.fill(thread, buf, |p| {
            if self.next_read >= self.cfg.reads {
                return Ok(false);
            }
            let j = self.next_read;
            self.next_read += 1;
            self.read(j, p);
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
    use std::collections::HashMap;

    fn canonical_counts(w: &Kmer) -> HashMap<u64, u32> {
        let c = w.cfg;
        let comp = |b: u64| 3 - b;
        let mut m = HashMap::new();
        for j in 0..c.reads {
            let seq: Vec<u64> = (0..c.read_len).map(|i| w.read_base(j, i)).collect();
            for win in seq.windows(c.k as usize) {
                let fw = win.iter().fold(0u64, |a, &b| (a << 2) | b);
                let rc = win.iter().rev().fold(0u64, |a, &b| (a << 2) | comp(b));
                *m.entry(fw.min(rc)).or_insert(0) += 1;
            }
        }
        m
    }

    #[test]
    fn counts_equal_a_direct_count() {
        for (k, prefill, genome) in [(31u64, 0u64, 2000u64), (21, 50, 500), (5, 80, 100), (32, 30, 3000)] {
            let cfg = KmerConfig { k, read_len: 100, genome, error: 0.02, prefill, slots: 1 << 14, reads: 60 };
            let mut w = Kmer::new(cfg, 3);
            let mut vm = TestVm::new();
            w.setup(&mut vm).unwrap();
            let s = run_all(&mut w, &mut vm, 300).remove(0);
            assert_eq!(w.dropped, 0);
            let got: HashMap<u64, u32> = w.counts().into_iter().collect();
            let want = canonical_counts(&w);
            assert_eq!(got, want, "k = {k}");
            if k == 5 {
                assert!(want.values().any(|&n| n > 10), "short k-mers repeat");
            }
            // The reads buffer is read word by word, in order.
            let words: Vec<u64> = s.iter().filter(|a| a.size == 8 && a.kind == AccessKind::Load).map(|a| a.vaddr).collect();
            assert!(words.windows(2).all(|x| x[1] >= x[0]));
            assert_eq!(*words.last().unwrap(), w.reads + (60 * 100 - 1) / 32 * 8);
        }
    }

    #[test]
    fn runs_as_a_workload() {
        contract("kmer", &[("footprint", "16M"), ("max_accesses", "30000")]);
    }
}
