//! A streaming kernel: `a[i] = a[i] + s` over an array, visiting every `stride`-th byte, for a number
//! of passes. Instruction mix: load, add, store, index increment, compare, branch ≈ 6 instructions
//! per element (3 charged to the load, 3 to the store).

use super::{MapFlags, ParamInfo, Params, Vm, Workload, WorkloadEntry};
use crate::error::Result;
use crate::trace::{Access, AccessKind};

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "stream",
    description: "sequential (or strided) read-modify-write sweep over an array",
    params: &[
        ParamInfo { name: "footprint", default: "256M", help: "array size in bytes" },
        ParamInfo { name: "stride", default: "8", help: "bytes between consecutive elements visited (8 = every word)" },
        ParamInfo { name: "passes", default: "1", help: "sweeps over the array" },
        ParamInfo { name: "populate", default: "false", help: "fault the array in before the timed sweeps" },
    ],
    build,
};

fn build(p: &Params, _seed: u64) -> Result<Box<dyn Workload>> {
    let footprint = p.bytes("footprint")?;
    let stride = p.u64("stride")?;
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

impl Workload for Stream {
    fn setup(&mut self, vm: &mut dyn Vm) -> Result<()> {
        self.base = vm.mmap(self.footprint, MapFlags::default())?;
        if self.populate {
            vm.populate(self.base, self.footprint)?;
        }
        Ok(())
    }

    fn fill(&mut self, _thread: usize, buf: &mut [Access], _vm: &mut dyn Vm) -> Result<usize> {
        let mut n = 0;
        while n < buf.len() && self.pass < self.passes {
            let vaddr = self.base + self.pos;
            let kind = if self.store_next { AccessKind::Store } else { AccessKind::Load };
            let ip = if self.store_next { 0x40_2008 } else { 0x40_2000 };
            buf[n] = Access { vaddr, kind, size: 8, ip, instrs: 3, ..Access::default() };
            n += 1;
            if self.store_next {
                self.pos += self.stride;
                if self.pos + 8 > self.footprint {
                    self.pos = 0;
                    self.pass += 1;
                }
            }
            self.store_next = !self.store_next;
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
}
