//! Sysbench `memory` test: each event writes (or reads) one block of `block_size` bytes, word by
//! word, until `total_size` bytes have been transferred. As in sysbench, the block is one buffer
//! reused by every event (`--memory-scope=global`: one buffer shared by the threads; `local`: one
//! per thread), so the footprint is the block, not the total size: the TLB pressure is low unless
//! the block is large.
//!
//! Instruction mix (sysbench's `memory_execute_event` word loop at `-O2`, unrolled: store or load,
//! plus a share of the index increment / compare / branch) ≈ 2 instructions per 8-byte word; the
//! per-event bookkeeping (event start/stop, timer reads, counters) ≈ 120 instructions, charged to
//! the first word of each block. `rnd` mode adds a PRNG step (≈ 8 instructions) per word.

use super::super::{MapFlags, ParamInfo, ParamKind, Params, Vm, Workload, WorkloadEntry};
use super::common::{max_accesses, threads, P_MAX_ACCESSES};
use super::heap::Heap;
use crate::error::Result;
use crate::rng::{hash2, Rng};
use crate::trace::{Access, AccessKind};

const IP_WORD: u64 = 0x41_0010;
const EVENT_INSTRS: u32 = 120;

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "sysbench-mem",
    description: "sysbench memory test: word-by-word writes or reads of one block, repeated up to total_size",
    params: &[
        ParamInfo { name: "block_size", kind: ParamKind::Bytes, default: "1K", help: "bytes per event (the buffer size), a multiple of 8" },
        ParamInfo { name: "total_size", kind: ParamKind::Bytes, default: "100G", help: "bytes transferred in total (over all threads)" },
        ParamInfo { name: "oper", kind: ParamKind::Text, default: "write", help: "write or read" },
        ParamInfo {
            name: "mode",
            kind: ParamKind::Text,
            default: "seq",
            help: "seq (words in order) or rnd (a random word of the block each time)",
        },
        ParamInfo {
            name: "scope",
            kind: ParamKind::Text,
            default: "global",
            help: "global (one buffer shared by threads) or local (one per thread)",
        },
        ParamInfo { name: "threads", kind: ParamKind::Count, default: "1", help: "threads, each doing total_size/threads" },
        P_MAX_ACCESSES,
    ],
    build,
};

fn build(p: &Params, seed: u64) -> Result<Box<dyn Workload>> {
    let block = p.bytes("block_size")?;
    if block < 8 || block % 8 != 0 || block > 1 << 40 {
        return Err(p.out_of_range("block_size", "a multiple of 8 between 8 and 1T"));
    }
    let total = p.bytes("total_size")?;
    if total < block {
        return Err(p.out_of_range("total_size", "at least block_size"));
    }
    let write = match p.str("oper") {
        "write" => true,
        "read" => false,
        _ => return Err(p.out_of_range("oper", "write or read")),
    };
    let rnd = match p.str("mode") {
        "seq" => false,
        "rnd" => true,
        _ => return Err(p.out_of_range("mode", "seq or rnd")),
    };
    let local = match p.str("scope") {
        "global" => false,
        "local" => true,
        _ => return Err(p.out_of_range("scope", "global or local")),
    };
    let t = threads(p)?;
    let budget = (max_accesses(p)? / t as u64).max(1);
    // sysbench runs total_size / block_size events, spread over the threads.
    let events = total / block;
    let per = |i: usize| events / t as u64 + u64::from((i as u64) < events % t as u64);
    Ok(Box::new(SysbenchMem {
        block,
        write,
        rnd,
        local,
        bases: Vec::new(),
        threads: (0..t).map(|i| Thread { events: per(i), event: 0, word: 0, emitted: 0, rng: Rng::new(hash2(seed, i as u64)) }).collect(),
        budget,
    }))
}

struct Thread {
    events: u64,
    event: u64,
    word: u64,
    emitted: u64,
    rng: Rng,
}

/// The sysbench memory test's state.
pub struct SysbenchMem {
    block: u64,
    write: bool,
    rnd: bool,
    local: bool,
    bases: Vec<u64>,
    threads: Vec<Thread>,
    budget: u64,
}

impl Workload for SysbenchMem {
    fn setup(&mut self, vm: &mut dyn Vm) -> Result<()> {
        let buffers = if self.local { self.threads.len() } else { 1 };
        let mut heap = Heap::new(64 << 20, MapFlags::default());
        for _ in 0..buffers {
            // sysbench allocates and memsets the buffer before the timed run.
            let b = heap.malloc(vm, self.block, true)?;
            self.bases.push(b);
        }
        Ok(())
    }

    fn threads(&self) -> usize {
        self.threads.len()
    }

    fn fill(&mut self, thread: usize, buf: &mut [Access], _vm: &mut dyn Vm) -> Result<usize> {
        let Some(t) = self.threads.get_mut(thread) else {
            return Ok(0);
        };
        let base = self.bases[if self.local { thread } else { 0 }];
        let words = self.block / 8;
        let kind = if self.write { AccessKind::Store } else { AccessKind::Load };
        let mut n = 0;
        while n < buf.len() && t.event < t.events && t.emitted < self.budget {
            let w = if self.rnd { t.rng.below(words) } else { t.word };
            let mut instrs = if self.rnd { 10 } else { 2 };
            if t.word == 0 {
                instrs += EVENT_INSTRS;
            }
            buf[n] = Access { cpu: thread as u16, asid: 0, ip: IP_WORD, vaddr: base + w * 8, kind, size: 8, instrs };
            n += 1;
            t.emitted += 1;
            t.word += 1;
            if t.word == words {
                t.word = 0;
                t.event += 1;
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::tests::{build, contract, run_all};
    use super::*;
    use crate::workload::testvm::TestVm;

    #[test]
    fn writes_total_size_in_block_order() {
        let mut w = build("sysbench-mem", &[("block_size", "1K"), ("total_size", "64K")], 1);
        let mut vm = TestVm::new();
        w.setup(&mut vm).unwrap();
        let s = run_all(w.as_mut(), &mut vm, 100).remove(0);
        assert_eq!(s.len() as u64 * 8, 64 << 10);
        let base = vm.maps[0].0;
        for (i, a) in s.iter().enumerate() {
            assert_eq!(a.kind, AccessKind::Store);
            assert_eq!(a.vaddr, base + (i as u64 % 128) * 8, "word {i}");
        }
    }

    #[test]
    fn reads_and_threads_share_the_work() {
        let mut w = build(
            "sysbench-mem",
            &[("block_size", "4K"), ("total_size", "40K"), ("oper", "read"), ("threads", "3"), ("scope", "local")],
            1,
        );
        let mut vm = TestVm::new();
        w.setup(&mut vm).unwrap();
        let s = run_all(w.as_mut(), &mut vm, 64);
        // 10 events over 3 threads: 4 + 3 + 3 blocks of 512 words.
        assert_eq!(s.iter().map(Vec::len).collect::<Vec<_>>(), vec![2048, 1536, 1536]);
        assert!(s.iter().flatten().all(|a| a.kind == AccessKind::Load));
        assert_ne!(s[0][0].vaddr, s[1][0].vaddr);
        contract("sysbench-mem", &[("total_size", "1M"), ("mode", "rnd"), ("threads", "2")]);
    }

    #[test]
    fn bad_params_are_errors() {
        for (k, v) in [("block_size", "7"), ("oper", "none"), ("mode", "x"), ("threads", "0"), ("total_size", "1")] {
            let map = [(k.to_string(), v.to_string())].into_iter().collect();
            let e = crate::workload::build("sysbench-mem", &map, 1).err().expect(k);
            assert!(e.to_string().contains(k), "{e}");
        }
    }
}
