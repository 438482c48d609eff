//! A streaming kernel: `a[i] = a[i] + s` over an array, visiting every `stride`-th byte, for a number
//! of passes. Instruction mix: load, add, store, index increment, compare, branch ≈ 6 instructions
//! per element (3 charged to the load, 3 to the store).

use super::{MapFlags, ParamInfo, ParamKind, Params, Vm, Workload, WorkloadEntry};
use crate::error::Result;
use crate::trace::{Access, AccessKind};

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "stream",
    description: "sequential (or strided) read-modify-write sweep over an array",
    params: &[
        ParamInfo { name: "footprint", kind: ParamKind::Bytes, default: "256M", help: "array size in bytes" },
        ParamInfo {
            name: "stride",
            kind: ParamKind::Bytes,
            default: "8",
            help: "bytes between consecutive elements visited (8 = every word)",
        },
        ParamInfo { name: "passes", kind: ParamKind::Count, default: "1", help: "sweeps over the array" },
        ParamInfo { name: "populate", kind: ParamKind::Flag, default: "false", help: "fault the array in before the timed sweeps" },
    ],
    build,
};

fn build(p: &Params, _seed: u64) -> Result<Box<dyn Workload>> {
    let footprint = p.bytes("footprint")?;
    let stride = p.bytes("stride")?;
    if footprint < 4096 {
        return Err(p.out_of_range("footprint", "at least 4K"));
    }
    if stride == 0 || stride > footprint {
        return Err(p.out_of_range("stride", "between 1 and the footprint"));
    }
    Ok(Box::new(Stream {
        footprint,
        stride,
        passes: p.u64("passes")?,
        populate: p.bool("populate")?,
        base: 0,
        pos: 0,
        pass: 0,
        store_next: false,
    }))
}

/// The stream kernel's state.
pub struct Stream {
    footprint: u64,
    stride: u64,
    passes: u64,
    populate: bool,
    base: u64,
    pos: u64,
    pass: u64,
    store_next: bool,
}

impl Stream {
    /// The load or store of the element at byte offset `off`.
    #[inline(always)]
    fn access(&self, off: u64, store: bool) -> Access {
        let (kind, ip) = if store { (AccessKind::Store, 0x40_2008) } else { (AccessKind::Load, 0x40_2000) };
        Access { vaddr: self.base + off, kind, size: 8, ip, instrs: 3, ..Access::default() }
    }

    /// Moves past `k` elements of the current pass, into the next pass after its last element.
    fn advance(&mut self, k: u64) {
        self.pos += k * self.stride;
        if self.pos + 8 > self.footprint {
            self.pos = 0;
            self.pass += 1;
        }
    }
}

impl Workload for Stream {
    fn setup(&mut self, vm: &mut dyn Vm) -> Result<()> {
        self.base = vm.mmap(self.footprint, MapFlags::default())?;
        if self.populate {
            vm.populate(self.base, self.footprint)?;
        }
        Ok(())
    }

    /// Each element visited is a load and then a store of its word. Whole elements are written
    /// in a loop of their own (a buffer that ends between the two gets the store first next
    /// time), since the generator is a tenth of a simulated stream access's host instructions.
    fn fill(&mut self, _thread: usize, buf: &mut [Access], _vm: &mut dyn Vm) -> Result<usize> {
        let mut n = 0;
        while n < buf.len() && self.pass < self.passes {
            if self.store_next || buf.len() - n == 1 {
                // Half an element: a store after a buffer that ended with its load, or a load
                // that ends this buffer.
                buf[n] = self.access(self.pos, self.store_next);
                n += 1;
                if self.store_next {
                    self.advance(1);
                }
                self.store_next = !self.store_next;
                continue;
            }
            // Whole elements up to the end of the pass or of the buffer.
            let left = (self.footprint - 8 - self.pos) / self.stride + 1;
            let k = left.min(((buf.len() - n) / 2) as u64);
            for (i, pair) in buf[n..n + 2 * k as usize].chunks_exact_mut(2).enumerate() {
                let off = self.pos + i as u64 * self.stride;
                pair[0] = self.access(off, false);
                pair[1] = self.access(off, true);
            }
            n += 2 * k as usize;
            self.advance(k);
        }
        Ok(n)
    }

    fn total_accesses(&self) -> Option<u64> {
        // A load and a store per element; the elements start at 0, `stride` apart, and end
        // where a word no longer fits.
        Some(self.passes * ((self.footprint - 8) / self.stride + 1) * 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::testvm::TestVm;
    use std::collections::BTreeMap;

    #[test]
    fn sweeps_every_element_once_per_pass() {
        let params: BTreeMap<String, String> =
            [("footprint", "64K"), ("stride", "64"), ("passes", "2")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut w = crate::workload::build("stream", &params, 1).unwrap();
        let mut vm = TestVm::new();
        w.setup(&mut vm).unwrap();
        let mut buf = [Access::default(); 100];
        let mut loads = BTreeMap::new();
        let mut total = 0;
        loop {
            let n = w.fill(0, &mut buf, &mut vm).unwrap();
            if n == 0 {
                break;
            }
            for a in &buf[..n] {
                assert!(vm.contains(a.vaddr, 8));
                if a.kind == AccessKind::Load {
                    *loads.entry(a.vaddr).or_insert(0) += 1;
                }
                total += 1;
            }
        }
        assert_eq!(loads.len(), 1024);
        assert!(loads.values().all(|&c| c == 2));
        assert_eq!(total, 4096);
        assert_eq!(w.total_accesses(), Some(total), "the progress bar's total");
    }

    /// The accesses do not depend on how the buffers are cut: buffers of every length from 1
    /// give the sequence a one-access buffer gives, which is the sweep element by element, a
    /// load then a store of each word.
    #[test]
    fn buffers_of_any_length_give_the_same_sweep() {
        for (footprint, stride, passes) in [("8K", "8", "2"), ("64K", "24", "3"), ("4K", "4096", "5"), ("12K", "1000", "1")] {
            let params: BTreeMap<String, String> = [("footprint", footprint), ("stride", stride), ("passes", passes)]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let sweep = |len: usize| {
                let mut w = crate::workload::build("stream", &params, 1).unwrap();
                let mut vm = TestVm::new();
                w.setup(&mut vm).unwrap();
                let (mut out, mut buf) = (Vec::new(), vec![Access::default(); len]);
                loop {
                    let n = w.fill(0, &mut buf, &mut vm).unwrap();
                    if n == 0 {
                        return (out, vm.maps[0].0);
                    }
                    out.extend_from_slice(&buf[..n]);
                }
            };
            let (want, base) = sweep(1);
            let (fp, st, ps) =
                (crate::addr::parse_bytes(footprint).unwrap(), stride.parse::<u64>().unwrap(), passes.parse::<u64>().unwrap());
            let elements: Vec<u64> = (0..ps).flat_map(|_| (0..=(fp - 8) / st).map(|i| base + i * st)).collect();
            assert_eq!(want.len(), 2 * elements.len());
            for (pair, &v) in want.chunks(2).zip(&elements) {
                assert_eq!((pair[0].vaddr, pair[0].kind, pair[1].vaddr, pair[1].kind), (v, AccessKind::Load, v, AccessKind::Store));
            }
            for len in [2, 3, 7, 64, 1001] {
                assert_eq!(sweep(len).0, want, "{footprint} / {stride}, buffers of {len}");
            }
        }
    }
}
