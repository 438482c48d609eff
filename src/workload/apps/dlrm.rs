//! DLRM's sparse embedding stage: `SparseLengthsSum` / `EmbeddingBag(mode="sum")` over several
//! embedding tables. For every sample of a batch and every table, the kernel reads the bag's
//! offset, then for each index of the bag reads the index and the whole embedding row (`dim` f32),
//! summing the rows into the sample's output vector, which it then stores.
//!
//! Data: `tables` tables of `rows x dim` f32 (one allocation each, as PyTorch gives each
//! `EmbeddingBag` its own weight tensor), values generated from the seed; per batch an input
//! buffer of int64 offsets and indices (reused batch after batch) and the output buffer. Indices:
//! `dist=uniform` (the default, as DLRM's own random data generator draws them) or `dist=zipf`
//! (power-law popularity with exponent `theta`, hot rows scattered over the table by a hash, as
//! hashed categorical ids are). As in DLRM's generator each bag's indices are sorted and
//! de-duplicated, so a bag may hold slightly fewer than `pooling` rows.
//!
//! Instructions: ≈ 5 per index (load, bounds check, row address), ≈ 2 per 64-byte line of a row
//! (vector add with a memory operand, loop), ≈ 2 per output line stored, ≈ 10 per bag.

use super::super::pending::Pending;
use super::super::{MapFlags, ParamInfo, ParamKind, Params, Vm, Workload, WorkloadEntry};
use super::common::{footprint, max_accesses, theta, Streams, Zipf, P_MAX_ACCESSES, P_POPULATE};
use super::heap::Heap;
use crate::error::Result;
use crate::rng::{hash2, mix64, Rng};
use crate::trace::Access;

const IP: u64 = 0x4a_0000;

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "dlrm",
    description: "DLRM embedding-bag sum (SparseLengthsSum) over several embedding tables",
    params: &[
        ParamInfo { name: "footprint", kind: ParamKind::Bytes, default: "8G", help: "bytes of embedding tables (sets the rows per table)" },
        ParamInfo { name: "tables", kind: ParamKind::Count, default: "8", help: "embedding tables" },
        ParamInfo { name: "dim", kind: ParamKind::Count, default: "64", help: "f32 elements per embedding row" },
        ParamInfo { name: "batch", kind: ParamKind::Count, default: "128", help: "samples per batch" },
        ParamInfo { name: "pooling", kind: ParamKind::Count, default: "32", help: "indices per sample per table (bag size)" },
        ParamInfo {
            name: "dist",
            kind: ParamKind::Text,
            default: "uniform",
            help: "index distribution: uniform (DLRM's generator) or zipf",
        },
        ParamInfo { name: "theta", kind: ParamKind::Number, default: "0.99", help: "Zipf exponent for dist=zipf" },
        P_MAX_ACCESSES,
        P_POPULATE,
    ],
    build,
};

fn build(p: &Params, seed: u64) -> Result<Box<dyn Workload>> {
    let tables = p.u64("tables")?;
    if !(1..=1024).contains(&tables) {
        return Err(p.out_of_range("tables", "between 1 and 1024"));
    }
    let dim = p.u64("dim")?;
    if !(1..=4096).contains(&dim) {
        return Err(p.out_of_range("dim", "between 1 and 4096"));
    }
    let batch = p.u64("batch")?;
    if !(1..=1 << 16).contains(&batch) {
        return Err(p.out_of_range("batch", "between 1 and 65536"));
    }
    let pooling = p.u64("pooling")?;
    if !(1..=1 << 12).contains(&pooling) {
        return Err(p.out_of_range("pooling", "between 1 and 4096"));
    }
    let zipf = match p.str("dist") {
        "uniform" => false,
        "zipf" => true,
        _ => return Err(p.out_of_range("dist", "uniform or zipf")),
    };
    let th = theta(p, "theta")?;
    let rows = footprint(p, "footprint", 1 << 20)? / (tables * dim * 4);
    if rows < 2 {
        return Err(p.out_of_range("footprint", "at least 2 rows per table"));
    }
    let mut d = Dlrm::new(Shape { tables, rows, dim, batch, pooling }, zipf.then(|| Zipf::new(rows, th)), seed);
    d.populate = p.bool("populate")?;
    d.streams = Streams::new(1, max_accesses(p)?);
    Ok(Box::new(d))
}

/// Sizes of the embedding stage.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Tables.
    pub tables: u64,
    /// Rows per table.
    pub rows: u64,
    /// f32 per row.
    pub dim: u64,
    /// Samples per batch.
    pub batch: u64,
    /// Indices per bag.
    pub pooling: u64,
}

/// The DLRM embedding stage's state.
pub struct Dlrm {
    sh: Shape,
    zipf: Option<Zipf>,
    seed: u64,
    tables: Vec<u64>,
    input: u64,
    output: u64,
    populate: bool,
    streams: Streams,
    /// (batch, table, sample) of the next bag.
    next: (u64, u64, u64),
    /// Pooled outputs of every bag done so far, when recording (tests).
    pub record: Option<Vec<Vec<f32>>>,
}

impl Dlrm {
    /// The embedding stage of shape `sh`; `zipf` for power-law indices.
    pub fn new(sh: Shape, zipf: Option<Zipf>, seed: u64) -> Dlrm {
        Dlrm {
            sh,
            zipf,
            seed,
            tables: Vec::new(),
            input: 0,
            output: 0,
            populate: true,
            streams: Streams::new(1, u64::MAX),
            next: (0, 0, 0),
            record: None,
        }
    }

    /// Element `c` of row `r` of table `t`.
    pub fn value(&self, t: u64, r: u64, c: u64) -> f32 {
        (hash2(self.seed ^ mix64(t), r * self.sh.dim + c) >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    }

    /// The bag of (batch, table, sample): sorted, distinct row indices.
    pub fn bag(&self, batch: u64, t: u64, b: u64) -> Vec<u64> {
        let mut rng = Rng::new(hash2(self.seed, (batch * self.sh.tables + t) * self.sh.batch + b));
        let salt = mix64(t ^ self.seed);
        let mut v: Vec<u64> = (0..self.sh.pooling)
            .map(|_| match &self.zipf {
                Some(z) => mix64(z.sample(&mut rng) ^ salt) % self.sh.rows,
                None => rng.below(self.sh.rows),
            })
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    fn row_bytes(&self) -> u64 {
        self.sh.dim * 4
    }

    /// Emits an access over `[a, a+len)` split at cache-line boundaries.
    fn lines(p: &mut Pending, a: u64, len: u64, store: bool, ip: u64, instrs: u32) {
        let mut o = 0;
        while o < len {
            let n = (len - o).min(64 - (a + o) % 64);
            if store {
                p.store(a + o, n as u8, ip, instrs);
            } else {
                p.load(a + o, n as u8, ip, instrs);
            }
            o += n;
        }
    }

    /// One bag: offset, indices and rows, then the output row. Returns the pooled sum.
    fn do_bag(&mut self, batch: u64, t: u64, b: u64, p: &mut Pending) -> Option<Vec<f32>> {
        let sh = self.sh;
        let bag = self.bag(batch, t, b);
        // Input layout per table: `batch` offsets, then `batch * pooling` index slots.
        let tin = self.input + t * 8 * sh.batch * (1 + sh.pooling);
        p.load(tin + 8 * b, 8, IP, 10);
        let idx0 = tin + 8 * sh.batch + 8 * b * sh.pooling;
        let mut sum = self.record.as_ref().map(|_| vec![0.0f32; sh.dim as usize]);
        for (l, &r) in bag.iter().enumerate() {
            p.load(idx0 + 8 * l as u64, 8, IP + 4, 5);
            Self::lines(p, self.tables[t as usize] + r * self.row_bytes(), self.row_bytes(), false, IP + 8, 2);
            if let Some(s) = &mut sum {
                for (c, x) in s.iter_mut().enumerate() {
                    *x += self.value(t, r, c as u64);
                }
            }
        }
        let out = self.output + ((b * sh.tables) + t) * self.row_bytes();
        Self::lines(p, out, self.row_bytes(), true, IP + 12, 2);
        sum
    }
}

impl Workload for Dlrm {
    fn setup(&mut self, vm: &mut dyn Vm) -> Result<()> {
        let sh = self.sh;
        let mut heap = Heap::new(64 << 20, MapFlags::default());
        for _ in 0..sh.tables {
            // The trained (or initialised) weights are in memory before inference starts.
            let base = heap.malloc(vm, sh.rows * self.row_bytes(), self.populate)?;
            self.tables.push(base);
        }
        let inb = sh.tables * 8 * sh.batch * (1 + sh.pooling);
        let outb = sh.batch * sh.tables * self.row_bytes();
        self.input = heap.malloc(vm, inb, true)?;
        self.output = heap.malloc(vm, outb, true)?;
        Ok(())
    }

    fn fill(&mut self, thread: usize, buf: &mut [Access], _vm: &mut dyn Vm) -> Result<usize> {
        // Take the streams out so the step can borrow the rest of `self` mutably.
        let mut streams = std::mem::replace(&mut self.streams, Streams::new(0, 1));
        let r = streams.fill(thread, buf, |p| {
            let (batch, t, b) = self.next;
            // Per table, all samples (PyTorch runs one EmbeddingBag after another).
            self.next = if b + 1 < self.sh.batch {
                (batch, t, b + 1)
            } else if t + 1 < self.sh.tables {
                (batch, t + 1, 0)
            } else {
                (batch + 1, 0, 0)
            };
            if let Some(s) = self.do_bag(batch, t, b, p) {
                if let Some(rec) = &mut self.record {
                    rec.push(s);
                }
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

    /// Rebuilds every bag's sum from the rows the emitted loads actually touched and compares it
    /// with the kernel's pooled output and with a direct computation from the generated indices.
    #[test]
    fn pooled_sums_equal_a_direct_computation() {
        for zipf in [false, true] {
            let sh = Shape { tables: 3, rows: 1000, dim: 20, batch: 5, pooling: 7 };
            let mut d = Dlrm::new(sh, zipf.then(|| Zipf::new(1000, 0.9)), 4);
            d.record = Some(Vec::new());
            d.streams = Streams::new(1, 5000);
            let mut vm = TestVm::new();
            d.setup(&mut vm).unwrap();
            let s = run_all(&mut d, &mut vm, 128).remove(0);
            let rec = d.record.take().unwrap();
            // Group row loads into bags: each bag ends with its output stores.
            let rb = d.row_bytes();
            let mut bags: Vec<Vec<(u64, u64)>> = vec![Vec::new()];
            let mut in_store = false;
            for a in &s {
                if a.kind == AccessKind::Store {
                    in_store = true;
                    continue;
                }
                if in_store {
                    bags.push(Vec::new());
                    in_store = false;
                }
                if let Some(t) = d.tables.iter().position(|&base| a.vaddr >= base && a.vaddr < base + sh.rows * rb) {
                    let r = (a.vaddr - d.tables[t]) / rb;
                    let cur = bags.last_mut().unwrap();
                    if cur.last() != Some(&(t as u64, r)) {
                        cur.push((t as u64, r));
                    }
                }
            }
            assert!(rec.len() >= 10);
            for (i, got) in rec.iter().enumerate() {
                let (batch, t, b) = ((i as u64) / (3 * 5), (i as u64 / 5) % 3, i as u64 % 5);
                let bag = d.bag(batch, t, b);
                assert_eq!(bags[i], bag.iter().map(|&r| (t, r)).collect::<Vec<_>>());
                let mut want = vec![0.0f32; 20];
                for &(tt, r) in &bags[i] {
                    for (c, w) in want.iter_mut().enumerate() {
                        *w += d.value(tt, r, c as u64);
                    }
                }
                assert_eq!(got, &want);
            }
        }
    }

    #[test]
    fn runs_as_a_workload() {
        contract("dlrm", &[("footprint", "16M"), ("max_accesses", "30000")]);
        contract("dlrm", &[("footprint", "16M"), ("max_accesses", "30000"), ("dist", "zipf"), ("dim", "3")]);
    }
}
