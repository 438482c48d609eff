//! Pointer chase: the classic TLB-reach microbenchmark (lmbench's `lat_mem_rd`, Saavedra and
//! Smith's strided loops). A footprint is cut into slots of `stride` bytes, one node (an 8-byte
//! pointer) per slot, and the nodes are linked into one random cycle, so every step is a load
//! whose address is the value the previous load returned, and every node is visited once per
//! round. With `stride = 4K` each step touches a new page: the run time per step jumps at the
//! footprints where the pages outgrow the L1 TLB, the L2 TLB and the walk caches' reach.
//!
//! - The cycle is a uniform random cyclic permutation (Sattolo's algorithm) drawn from the run's
//!   seed; the successor of every node is kept as a `u32`, so the host needs 4 bytes per node
//!   (at most [`MAX_NODES`] nodes).
//! - `spread`: with `stride` above one cache line, each node sits at a line of its slot chosen by
//!   a hash of the node number, as TLB-reach benchmarks do, so that nodes do not all fall into
//!   the same cache sets (at offset 0 of 4 KiB slots they would share 1/64 of every cache's sets).
//! - One instruction per step (an unrolled `p = *p`). The loads are dependent: run with
//!   `--set core.mlp=1` so the timing model does not overlap their misses (docs/workloads.md).

use super::{MapFlags, ParamInfo, ParamKind, Params, Vm, Workload, WorkloadEntry};
use crate::error::Result;
use crate::rng::{mix64, Rng};
use crate::trace::{Access, AccessKind};

/// Most nodes a chase may have (4 bytes of host memory each: 1 GiB).
pub const MAX_NODES: u64 = 1 << 28;
/// Made-up but stable instruction pointer of the chasing load.
const IP: u64 = 0x40_3000;

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "ptrchase",
    description: "pointer chase: one dependent load per step around a random cycle of nodes (TLB-reach microbenchmark)",
    params: &[
        ParamInfo { name: "footprint", kind: ParamKind::Bytes, default: "1G", help: "bytes covered by the nodes" },
        ParamInfo { name: "stride", kind: ParamKind::Bytes, default: "4K", help: "bytes per node (4K = one node per page)" },
        ParamInfo { name: "steps", kind: ParamKind::Count, default: "4000000", help: "loads to simulate (0 = one full round)" },
        ParamInfo { name: "spread", kind: ParamKind::Flag, default: "true", help: "place each node at a hashed cache line of its slot" },
        ParamInfo {
            name: "populate",
            kind: ParamKind::Flag,
            default: "true",
            help: "fault the nodes in first, as the benchmark's set-up loop does",
        },
    ],
    build,
};

fn build(p: &Params, seed: u64) -> Result<Box<dyn Workload>> {
    let footprint = p.bytes("footprint")?;
    let stride = p.bytes("stride")?;
    if stride < 8 || stride % 8 != 0 {
        return Err(p.out_of_range("stride", "a multiple of 8 bytes"));
    }
    if footprint < stride.max(4096) {
        return Err(p.out_of_range("footprint", "at least 4K and at least one stride"));
    }
    let nodes = footprint / stride;
    if nodes < 2 {
        return Err(p.out_of_range("footprint", "at least two strides (a cycle needs two nodes)"));
    }
    if nodes > MAX_NODES {
        return Err(p.out_of_range("stride", &format!("large enough for at most {MAX_NODES} nodes (footprint / stride)")));
    }
    let steps = match p.u64("steps")? {
        0 => nodes,
        s => s,
    };
    Ok(Box::new(PtrChase {
        nodes,
        stride,
        steps,
        lines: if p.bool("spread")? { (stride / 64).max(1) } else { 1 },
        populate: p.bool("populate")?,
        seed,
        next: Vec::new(),
        base: 0,
        at: 0,
        done: 0,
    }))
}

/// The chase's state.
pub struct PtrChase {
    nodes: u64,
    stride: u64,
    steps: u64,
    /// Cache lines per slot a node may sit at (1: always offset 0).
    lines: u64,
    populate: bool,
    seed: u64,
    /// `next[i]`: the node after node `i` in the cycle.
    next: Vec<u32>,
    base: u64,
    /// The node the next load reads.
    at: u32,
    done: u64,
}

impl PtrChase {
    /// Virtual address of node `i`'s pointer.
    #[inline]
    fn addr(&self, i: u32) -> u64 {
        let line = if self.lines > 1 { mix64(self.seed ^ u64::from(i)) % self.lines } else { 0 };
        self.base + u64::from(i) * self.stride + line * 64
    }
}

/// A uniformly random cyclic permutation of `0..n` as a successor array (Sattolo's algorithm:
/// Fisher-Yates restricted to `j < i`, which yields exactly one cycle through every element).
fn random_cycle(n: u32, rng: &mut Rng) -> Vec<u32> {
    let mut order: Vec<u32> = (0..n).collect();
    for i in (1..n as usize).rev() {
        let j = rng.below(i as u64) as usize;
        order.swap(i, j);
    }
    // `order` is the permutation σ with one cycle; σ(i) is the successor of i.
    order
}

impl Workload for PtrChase {
    fn setup(&mut self, vm: &mut dyn Vm) -> Result<()> {
        let bytes = self.nodes * self.stride;
        self.base = vm.mmap(bytes, MapFlags::default())?;
        if self.populate {
            vm.populate(self.base, bytes)?;
        }
        self.next = random_cycle(self.nodes as u32, &mut Rng::new(self.seed ^ 0x7074_7263_6861_7365));
        Ok(())
    }

    fn fill(&mut self, _thread: usize, buf: &mut [Access], _vm: &mut dyn Vm) -> Result<usize> {
        let n = buf.len().min((self.steps - self.done) as usize);
        for slot in &mut buf[..n] {
            *slot = Access { vaddr: self.addr(self.at), kind: AccessKind::Load, size: 8, ip: IP, instrs: 1, ..Access::default() };
            self.at = self.next[self.at as usize];
        }
        self.done += n as u64;
        Ok(n)
    }

    fn total_accesses(&self) -> Option<u64> {
        Some(self.steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::testvm::TestVm;
    use std::collections::{BTreeMap, BTreeSet};

    fn chase(params: &[(&str, &str)], seed: u64) -> (Box<dyn Workload>, TestVm) {
        let params: BTreeMap<String, String> = params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut w = crate::workload::build("ptrchase", &params, seed).unwrap();
        let mut vm = TestVm::new();
        w.setup(&mut vm).unwrap();
        (w, vm)
    }

    fn drain(w: &mut dyn Workload, vm: &mut TestVm) -> Vec<Access> {
        let mut out = Vec::new();
        let mut buf = [Access::default(); 97];
        loop {
            let n = w.fill(0, &mut buf, vm).unwrap();
            if n == 0 {
                return out;
            }
            out.extend_from_slice(&buf[..n]);
        }
    }

    #[test]
    fn visits_every_node_exactly_once_per_round() {
        // 1 MiB / 4 KiB = 256 nodes, three rounds.
        let (mut w, mut vm) = chase(&[("footprint", "1M"), ("stride", "4K"), ("steps", "768")], 7);
        let a = drain(w.as_mut(), &mut vm);
        assert_eq!(a.len(), 768);
        assert_eq!(w.total_accesses(), Some(768), "the progress bar's total");
        for round in a.chunks(256) {
            let pages: BTreeSet<u64> = round.iter().map(|x| x.vaddr >> 12).collect();
            assert_eq!(pages.len(), 256, "a round touches every node once");
        }
        // The cycle repeats with period 256 and no shorter.
        assert!(a.iter().zip(&a[256..]).all(|(x, y)| x.vaddr == y.vaddr));
        assert!((1..256).all(|p| a[p].vaddr != a[0].vaddr));
        for x in &a {
            assert!(vm.contains(x.vaddr, 8));
            assert_eq!(x.vaddr % 64, 0);
            assert_eq!((x.kind, x.instrs), (AccessKind::Load, 1));
        }
        // Spread: nodes do not all sit at the same page offset.
        assert!(a.iter().map(|x| x.vaddr & 4095).collect::<BTreeSet<_>>().len() > 16);
    }

    #[test]
    fn steps_zero_is_one_round_and_the_seed_picks_the_cycle() {
        let (mut w, mut vm) = chase(&[("footprint", "64K"), ("stride", "64"), ("steps", "0"), ("spread", "false")], 1);
        let a = drain(w.as_mut(), &mut vm);
        assert_eq!(a.len(), 1024);
        assert_eq!(a.iter().map(|x| x.vaddr).collect::<BTreeSet<_>>().len(), 1024);
        let (mut w2, mut vm2) = chase(&[("footprint", "64K"), ("stride", "64"), ("steps", "0"), ("spread", "false")], 2);
        let b = drain(w2.as_mut(), &mut vm2);
        assert_ne!(a.iter().map(|x| x.vaddr - a[0].vaddr).collect::<Vec<_>>(), b.iter().map(|x| x.vaddr - b[0].vaddr).collect::<Vec<_>>());
    }

    #[test]
    fn sattolo_makes_one_cycle_for_small_sizes() {
        for n in 2..40u32 {
            let next = random_cycle(n, &mut Rng::new(u64::from(n)));
            let (mut at, mut len) = (0u32, 0);
            loop {
                at = next[at as usize];
                len += 1;
                if at == 0 {
                    break;
                }
            }
            assert_eq!(len, n);
        }
    }

    #[test]
    fn bad_parameters_name_the_key() {
        let cases: [(&[(&str, &str)], &str); 3] =
            [(&[("stride", "12")], "stride"), (&[("footprint", "2K")], "footprint"), (&[("footprint", "4T"), ("stride", "8")], "stride")];
        for (given, key) in cases {
            let params: BTreeMap<String, String> = given.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            let e = crate::workload::build("ptrchase", &params, 1).err().expect("rejected").to_string();
            assert!(e.contains(key), "{e}");
        }
    }
}
