//! will-it-scale's `page_fault1` (github.com/antonblanchard/will-it-scale, `tests/page_fault1.c`),
//! the Linux memory-management scalability test of the anonymous page-fault path: each task maps
//! `MEMSIZE` = 128 MiB of anonymous memory, writes one byte per page (`c[i] = 0`, counting an
//! iteration each time), unmaps it, and starts over. In threads mode (`page_fault1_threads`)
//! every thread runs that loop in one shared address space; processes mode is `workload.processes`.
//!
//! Every store faults a page in (or, under THP, one store per 2 MiB faults a huge page), and every
//! round ends in a `munmap` that frees the pages and shoots the range down. The next `mmap` gets the
//! same addresses back (os/holes.rs, as Linux's), so the round's translations must have left every
//! TLB and walk cache: checked mode fails a design that keeps one. The fault path's and unmap
//! path's OS work is what the run measures (`os_ops`).
//!
//! Accesses per iteration, as the loop compiles at `-O2`: the byte store, then the load and store of
//! the task's iteration counter (`(*iterations)++`; the byte store may alias it, so the counter is
//! reloaded each time). The counters are will-it-scale's per-task slots in shared memory, one
//! 64-byte line each, mapped and touched before the run. Instructions (an estimate of that loop:
//! store, load, add, store, index add, compare and branch) ≈ 6 per iteration; each round's first
//! access also carries ≈ 20 for the `mmap` and `munmap` calls' user-space side (the kernel's work is
//! the OS model's, charged to the core that calls them).

use super::super::{MapFlags, ParamInfo, ParamKind, Params, Vm, Workload, WorkloadEntry};
use super::common::{max_accesses, threads, P_MAX_ACCESSES};
use crate::error::Result;
use crate::trace::{Access, AccessKind};

const IP_STORE: u64 = 0x42_0010;
const IP_COUNT: u64 = 0x42_0014;
/// Bytes of a task's iteration counter slot (one cache line).
const SLOT: u64 = 64;
/// Instructions of the loop per access of an iteration (byte store, counter load, counter store).
const INSTRS: [u32; 3] = [2, 1, 3];
/// User-space instructions of a round's `mmap` and `munmap` calls.
const ROUND_INSTRS: u32 = 20;

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "pagefault",
    description: "will-it-scale page_fault1: mmap 128 MiB, write a byte per page, munmap, repeat (the page-fault and unmap paths)",
    params: &[
        ParamInfo { name: "region", kind: ParamKind::Bytes, default: "128M", help: "bytes mapped per round (will-it-scale's MEMSIZE)" },
        ParamInfo {
            name: "stride",
            kind: ParamKind::Bytes,
            default: "4K",
            help: "bytes between the bytes written (4K: one per page, as the test's getpagesize())",
        },
        ParamInfo { name: "rounds", kind: ParamKind::Count, default: "0", help: "rounds per thread (0: until max_accesses)" },
        ParamInfo {
            name: "threads",
            kind: ParamKind::Count,
            default: "1",
            help: "threads, each with its own region in the shared address space",
        },
        P_MAX_ACCESSES,
    ],
    build,
};

fn build(p: &Params, _seed: u64) -> Result<Box<dyn Workload>> {
    let region = p.bytes("region")?;
    if !(4096..=1 << 40).contains(&region) {
        return Err(p.out_of_range("region", "between 4K and 1T"));
    }
    let stride = p.bytes("stride")?;
    if stride == 0 || stride > region {
        return Err(p.out_of_range("stride", "between 1 byte and region"));
    }
    let rounds = p.u64("rounds")?;
    let t = threads(p)?;
    let budget = (max_accesses(p)? / t as u64).max(1);
    Ok(Box::new(PageFault {
        region,
        stride,
        iterations: region.div_ceil(stride),
        rounds,
        budget,
        counters: 0,
        threads: (0..t).map(|_| Task::default()).collect(),
    }))
}

/// One task's place in its loop.
#[derive(Default)]
struct Task {
    /// The region of the current round, while it is mapped.
    base: Option<u64>,
    /// Rounds whose region was unmapped.
    round: u64,
    /// Iteration of the current round, and access within it (0..3).
    i: u64,
    op: usize,
    emitted: u64,
}

/// The test's state.
pub struct PageFault {
    region: u64,
    stride: u64,
    iterations: u64,
    rounds: u64,
    budget: u64,
    counters: u64,
    threads: Vec<Task>,
}

impl Workload for PageFault {
    fn setup(&mut self, vm: &mut dyn Vm) -> Result<()> {
        // will-it-scale's shared results area: a cache line per task, written before the run.
        let len = (self.threads.len() as u64 * SLOT).max(4096);
        self.counters = vm.mmap(len, MapFlags::default())?;
        vm.populate(self.counters, len)
    }

    fn threads(&self) -> usize {
        self.threads.len()
    }

    fn fill(&mut self, thread: usize, buf: &mut [Access], vm: &mut dyn Vm) -> Result<usize> {
        let Some(t) = self.threads.get_mut(thread) else {
            return Ok(0);
        };
        let counter = self.counters + thread as u64 * SLOT;
        let mut n = 0;
        loop {
            if let Some(base) = t.base.filter(|_| t.i == self.iterations) {
                // The round's last accesses must run before its region goes: unmap at the start
                // of the next batch (the simulator asks for one only when it ran this one).
                if n > 0 {
                    break;
                }
                vm.munmap(base, self.region)?;
                t.base = None;
                t.round += 1;
            }
            if n == buf.len() || t.emitted >= self.budget || (self.rounds > 0 && t.round >= self.rounds) {
                break;
            }
            let base = match t.base {
                Some(b) => b,
                None => {
                    let b = vm.mmap(self.region, MapFlags::default())?;
                    (t.base, t.i, t.op) = (Some(b), 0, 0);
                    b
                }
            };
            let mut instrs = INSTRS[t.op];
            if t.i == 0 && t.op == 0 {
                instrs += ROUND_INSTRS;
            }
            let (ip, vaddr, kind, size) = match t.op {
                0 => (IP_STORE, base + t.i * self.stride, AccessKind::Store, 1),
                1 => (IP_COUNT, counter, AccessKind::Load, 8),
                _ => (IP_COUNT + 4, counter, AccessKind::Store, 8),
            };
            buf[n] = Access { cpu: thread as u16, asid: 0, ip, vaddr, kind, size, instrs };
            n += 1;
            t.emitted += 1;
            t.op += 1;
            if t.op == 3 {
                (t.op, t.i) = (0, t.i + 1);
            }
        }
        Ok(n)
    }

    fn total_accesses(&self) -> Option<u64> {
        let per_thread = if self.rounds > 0 { (self.rounds * self.iterations * 3).min(self.budget) } else { self.budget };
        Some(per_thread * self.threads.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::tests::{build, run_all};
    use super::*;
    use crate::workload::testvm::TestVm;

    /// Every round writes a byte per page of a fresh mapping, counts it, and is unmapped before
    /// the next round maps again (`run_all` checks every access against the live mappings as each
    /// batch comes, so a region unmapped before its last batch ran would fail it).
    #[test]
    fn rounds_write_a_byte_per_page_then_unmap() {
        for batch in [1, 2, 7, 1000] {
            let mut w = build("pagefault", &[("region", "64K"), ("rounds", "3")], 1);
            let mut vm = TestVm::new();
            w.setup(&mut vm).unwrap();
            let s = run_all(w.as_mut(), &mut vm, batch).remove(0);
            assert_eq!(s.len(), 3 * 16 * 3, "batch {batch}");
            let counter = s[1].vaddr;
            let mut bases = Vec::new();
            for (k, it) in s.chunks(3).enumerate() {
                assert_eq!((it[0].kind, it[0].size), (AccessKind::Store, 1));
                assert_eq!((it[1].kind, it[1].vaddr), (AccessKind::Load, counter));
                assert_eq!((it[2].kind, it[2].vaddr), (AccessKind::Store, counter));
                if k % 16 == 0 {
                    bases.push(it[0].vaddr);
                    assert_eq!(it[0].instrs, INSTRS[0] + ROUND_INSTRS);
                }
                assert_eq!(it[0].vaddr, bases[k / 16] + (k as u64 % 16) * 4096);
            }
            // Three rounds, three mappings, each unmapped: only the counters stay.
            assert_eq!(bases.len(), 3);
            assert_eq!(vm.maps.len(), 1, "only the counters: {:?}", vm.maps);
            assert_eq!(w.total_accesses(), Some(s.len() as u64));
        }
    }

    #[test]
    fn threads_share_the_counters_page_and_the_budget() {
        let mut w = build("pagefault", &[("region", "1M"), ("stride", "1K"), ("threads", "2"), ("max_accesses", "3000")], 1);
        let mut vm = TestVm::new();
        w.setup(&mut vm).unwrap();
        let s = run_all(w.as_mut(), &mut vm, 100);
        assert_eq!(s.iter().map(Vec::len).collect::<Vec<_>>(), vec![1500, 1500]);
        assert_eq!(s[1][1].vaddr - s[0][1].vaddr, SLOT);
        assert_ne!(s[0][0].vaddr, s[1][0].vaddr);
    }

    #[test]
    fn bad_params_are_errors() {
        for (k, v) in [("region", "1K"), ("stride", "0"), ("stride", "1G"), ("threads", "0"), ("rounds", "x")] {
            let map = [(k.to_string(), v.to_string())].into_iter().collect();
            let e = crate::workload::build("pagefault", &map, 1).err().expect(k);
            assert!(e.to_string().contains(k), "{e}");
        }
    }
}
