//! HPCC RandomAccess (GUPS): `T[ran & (N-1)] ^= ran` over a table of N 64-bit words, with the HPCC
//! LFSR random stream. The update loop is the benchmark's own: 128 independent LFSR streams
//! (`ran[j]`, started with `HPCC_starts`) advanced in lock-step, each update one load and one store
//! of the table word.
//!
//! Instruction mix (estimated from the HPCC `RandomAccess_update` loop compiled with `-O2` for
//! x86-64: shift, sign test, conditional xor, mask, indexed load, xor, indexed store, loop
//! increment/compare/branch ≈ 10 instructions per update): 5 instructions charged to the load and
//! 5 to the store. The `ran[]` array (1 KiB, always L1-resident) is treated as registers.

use super::{MapFlags, ParamInfo, ParamKind, Params, Vm, Workload, WorkloadEntry};
use crate::error::Result;
use crate::trace::{Access, AccessKind};

/// HPCC's primitive polynomial and period of the LFSR (`RandomAccess.h`).
const POLY: u64 = 0x7;
const PERIOD: i64 = 1_317_624_576_693_539_401;
/// Independent streams advanced together by the HPCC update loop.
const STREAMS: usize = 128;
/// Made-up but stable instruction pointers of the load and the store.
const IP_LOAD: u64 = 0x40_1a20;
const IP_STORE: u64 = 0x40_1a2c;

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "gups",
    description: "HPCC RandomAccess: random read-modify-write updates of a large table (LFSR stream)",
    params: &[
        ParamInfo { name: "table", kind: ParamKind::Bytes, default: "4G", help: "table size in bytes (rounded down to a power of two)" },
        ParamInfo {
            name: "updates",
            kind: ParamKind::Count,
            default: "4000000",
            help: "table updates to simulate (each = 1 load + 1 store)",
        },
        ParamInfo {
            name: "populate",
            kind: ParamKind::Flag,
            default: "true",
            help: "fault the table in first, as HPCC's init loop T[i]=i does",
        },
        ParamInfo {
            name: "madvise_huge",
            kind: ParamKind::Flag,
            default: "false",
            help: "madvise(MADV_HUGEPAGE) the table after initialising it, so khugepaged may collapse it",
        },
    ],
    build,
};

fn build(p: &Params, _seed: u64) -> Result<Box<dyn Workload>> {
    let bytes = p.bytes("table")?;
    if bytes < 4096 {
        return Err(p.out_of_range("table", "at least 4K"));
    }
    let words = (bytes / 8).next_power_of_two() >> u64::from(!(bytes / 8).is_power_of_two());
    let mut g = Gups::new(words, p.u64("updates")?, p.bool("populate")?);
    g.madvise_huge = p.bool("madvise_huge")?;
    Ok(Box::new(g))
}

/// The next element of the HPCC LFSR sequence.
#[inline(always)]
fn lfsr_step(r: u64) -> u64 {
    (r << 1) ^ if (r as i64) < 0 { POLY } else { 0 }
}

/// `HPCC_starts(n)`: the n-th element of the LFSR sequence, by GF(2) matrix doubling
/// (the method of the HPCC reference code, reimplemented).
pub fn hpcc_starts(mut n: i64) -> u64 {
    while n < 0 {
        n += PERIOD;
    }
    while n > PERIOD {
        n -= PERIOD;
    }
    if n == 0 {
        return 1;
    }
    // m2[i] = x^(2i) in the LFSR's field.
    let mut m2 = [0u64; 64];
    let mut t = 1u64;
    for m in m2.iter_mut() {
        *m = t;
        t = lfsr_step(lfsr_step(t));
    }
    let mut i = 62;
    while i >= 0 && (n >> i) & 1 == 0 {
        i -= 1;
    }
    let mut ran = 2u64;
    while i > 0 {
        let mut sq = 0u64;
        for (j, m) in m2.iter().enumerate() {
            if (ran >> j) & 1 == 1 {
                sq ^= m;
            }
        }
        ran = sq;
        i -= 1;
        if (n >> i) & 1 == 1 {
            ran = lfsr_step(ran);
        }
    }
    ran
}

/// The GUPS program state.
pub struct Gups {
    words: u64,
    updates: u64,
    populate: bool,
    /// Advise huge pages after initialisation.
    pub madvise_huge: bool,
    base: u64,
    ran: [u64; STREAMS],
    done: u64,
    /// Pending store of the update whose load was the last access of the previous batch.
    store_next: Option<u64>,
}

impl Gups {
    /// A GUPS instance over `words` 64-bit words (a power of two) doing `updates` updates.
    pub fn new(words: u64, updates: u64, populate: bool) -> Gups {
        // HPCC: ran[j] = HPCC_starts((NUPDATE/128) * j) with NUPDATE = 4 * table words.
        let nupdate = 4 * words as i64;
        let mut ran = [0u64; STREAMS];
        for (j, r) in ran.iter_mut().enumerate() {
            *r = hpcc_starts(nupdate / STREAMS as i64 * j as i64);
        }
        Gups { words, updates, populate, madvise_huge: false, base: 0, ran, done: 0, store_next: None }
    }

    /// The table index updated by update number `k` of stream order (for tests).
    pub fn table_bytes(&self) -> u64 {
        self.words * 8
    }
}

impl Workload for Gups {
    fn setup(&mut self, vm: &mut dyn Vm) -> Result<()> {
        self.base = vm.mmap(self.words * 8, MapFlags::default())?;
        if self.populate {
            vm.populate(self.base, self.words * 8)?;
        }
        if self.madvise_huge {
            vm.madvise(self.base, self.words * 8, super::HugeAdvice::Huge)?;
        }
        Ok(())
    }

    fn fill(&mut self, _thread: usize, buf: &mut [Access], _vm: &mut dyn Vm) -> Result<usize> {
        let mut n = 0;
        let mask = self.words - 1;
        if let Some(addr) = self.store_next.take() {
            if buf.is_empty() {
                self.store_next = Some(addr);
                return Ok(0);
            }
            buf[0] = Access { vaddr: addr, kind: AccessKind::Store, size: 8, ip: IP_STORE, instrs: 5, ..Access::default() };
            n = 1;
        }
        while n < buf.len() && self.done < self.updates {
            let j = (self.done % STREAMS as u64) as usize;
            let r = lfsr_step(self.ran[j]);
            self.ran[j] = r;
            let addr = self.base + (r & mask) * 8;
            buf[n] = Access { vaddr: addr, kind: AccessKind::Load, size: 8, ip: IP_LOAD, instrs: 5, ..Access::default() };
            n += 1;
            self.done += 1;
            if n < buf.len() {
                buf[n] = Access { vaddr: addr, kind: AccessKind::Store, size: 8, ip: IP_STORE, instrs: 5, ..Access::default() };
                n += 1;
            } else {
                self.store_next = Some(addr);
            }
        }
        Ok(n)
    }

    fn total_accesses(&self) -> Option<u64> {
        Some(2 * self.updates)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::testvm::TestVm;

    #[test]
    fn starts_agree_with_stepping() {
        let mut r = 1u64;
        for n in 0..200 {
            assert_eq!(hpcc_starts(n), r, "n = {n}");
            r = lfsr_step(r);
        }
    }

    /// Runs the updates on a real table and checks the HPCC self-verification property: applying
    /// the same update stream twice restores the table (xor is an involution).
    #[test]
    fn updates_are_the_hpcc_loop() {
        let words = 1 << 10;
        let mut g = Gups::new(words, 5000, true);
        let mut vm = TestVm::new();
        g.setup(&mut vm).unwrap();
        let mut table: Vec<u64> = (0..words).collect();
        let mut buf = [Access::default(); 333];
        let mut stores = Vec::new();
        loop {
            let n = g.fill(0, &mut buf, &mut vm).unwrap();
            if n == 0 {
                break;
            }
            for a in &buf[..n] {
                assert!(vm.contains(a.vaddr, 8));
                if a.kind == AccessKind::Store {
                    stores.push(a.vaddr);
                }
            }
        }
        assert_eq!(stores.len(), 5000);
        assert_eq!(g.total_accesses(), Some(10_000), "a load and a store per update");
        // Recompute the values: stream order is j = k % 128.
        let mut ran: Vec<u64> = (0..STREAMS).map(|j| hpcc_starts(4 * words as i64 / 128 * j as i64)).collect();
        for (k, &addr) in stores.iter().enumerate() {
            let j = k % STREAMS;
            ran[j] = lfsr_step(ran[j]);
            assert_eq!(addr, g.base + (ran[j] & (words - 1)) * 8);
            table[(ran[j] & (words - 1)) as usize] ^= ran[j];
        }
        assert!(table.iter().enumerate().any(|(i, &v)| v != i as u64));
        assert_eq!(vm.populated, words * 8);
    }
}
