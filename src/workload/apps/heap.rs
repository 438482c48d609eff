//! The simulated program's heap: regions mmap'd through [`Vm`], carved into chunks, and fixed-size
//! object pools (one per size class) over those chunks with LIFO free lists.
//!
//! This is the shape of the allocators the modelled programs use: glibc arenas and ASCYLIB's
//! `ssalloc` hand out objects from large mmap'd chunks, memcached's slab allocator carves 1 MiB
//! pages into chunks of one size class. Objects are named by a dense *slot* number within their
//! pool, so host-side structures can store 4-8 byte slots instead of addresses and recover the
//! simulated address arithmetically.
//!
//! Allocator metadata (free-list heads, bump pointers) is treated as registers / always-cached:
//! only the accesses that touch the object itself are emitted (a free-list pop reads the object's
//! link word, a free writes it), which are the ones that matter for translation.

use super::super::pending::Pending;
use super::super::{MapFlags, Vm};
use crate::error::Result;

/// glibc's default `M_MMAP_THRESHOLD`: larger allocations get a mapping of their own.
pub const MMAP_THRESHOLD: u64 = 128 << 10;

/// Instructions of an allocator fast path (tcache / ssalloc pop or bump).
const ALLOC_INSTRS: u32 = 12;
/// Instructions of a free fast path.
const FREE_INSTRS: u32 = 8;

/// A bump allocator of address space over regions mmap'd on demand.
#[derive(Debug)]
pub struct Heap {
    flags: MapFlags,
    region: u64,
    cur: u64,
    end: u64,
    mapped: u64,
}

impl Heap {
    /// A heap that maps `region`-byte regions (a carve larger than that gets its own mapping).
    pub fn new(region: u64, flags: MapFlags) -> Heap {
        Heap { flags, region: region.max(4096), cur: 0, end: 0, mapped: 0 }
    }

    /// Returns `len` bytes aligned to `align` (a power of two, at most 4 KiB), mapping a new
    /// region when the current one cannot hold them.
    pub fn carve(&mut self, vm: &mut dyn Vm, len: u64, align: u64) -> Result<u64> {
        let start = (self.cur + align - 1) & !(align - 1);
        if self.end == 0 || start + len > self.end {
            let size = ((len.max(self.region)) + 4095) & !4095;
            let base = vm.mmap(size, self.flags)?;
            self.mapped += size;
            self.cur = base;
            self.end = base + size;
            return self.carve(vm, len, align);
        }
        self.cur = start + len;
        Ok(start)
    }

    /// `malloc(len)` as glibc serves it: a request of at least [`MMAP_THRESHOLD`] gets its own
    /// mapping, a smaller one is carved (64-byte aligned) from the current region. With
    /// `populate`, the pages are faulted in (the program's initialisation wrote them).
    pub fn malloc(&mut self, vm: &mut dyn Vm, len: u64, populate: bool) -> Result<u64> {
        let len = len.max(1);
        let a = if len >= MMAP_THRESHOLD { vm.mmap(len, self.flags)? } else { self.carve(vm, len, 64)? };
        if len >= MMAP_THRESHOLD {
            self.mapped += (len + 4095) & !4095;
        }
        if populate {
            let lo = a & !4095;
            let hi = (a + len + 4095) & !4095;
            vm.populate(lo, hi - lo)?;
        }
        Ok(a)
    }

    /// Bytes mapped so far.
    pub fn mapped(&self) -> u64 {
        self.mapped
    }
}

/// Fixed-size objects in chunks carved from a [`Heap`], addressed by slot number.
#[derive(Debug)]
pub struct Pool {
    obj: u64,
    chunk: u64,
    per_chunk: u64,
    chunks: Vec<u64>,
    next: u64,
    free: Vec<u64>,
}

impl Pool {
    /// A pool of `obj`-byte objects (a multiple of 8) in chunks of about `chunk` bytes.
    pub fn new(obj: u64, chunk: u64) -> Pool {
        let obj = obj.max(8);
        let per_chunk = (chunk / obj).max(1);
        Pool { obj, chunk: per_chunk * obj, per_chunk, chunks: Vec::new(), next: 0, free: Vec::new() }
    }

    /// Object size in bytes.
    pub fn obj(&self) -> u64 {
        self.obj
    }

    /// Slots handed out by the bump pointer so far (live or freed).
    pub fn slots(&self) -> u64 {
        self.next
    }

    /// Slots currently on the free list.
    pub fn free_slots(&self) -> usize {
        self.free.len()
    }

    /// Simulated address of `slot`.
    #[inline]
    pub fn addr(&self, slot: u64) -> u64 {
        self.chunks[(slot / self.per_chunk) as usize] + (slot % self.per_chunk) * self.obj
    }

    fn grow(&mut self, heap: &mut Heap, vm: &mut dyn Vm, slots: u64) -> Result<()> {
        while (self.chunks.len() as u64) * self.per_chunk < slots {
            // Large chunks start on a page (like mmap'd or page-sized slabs), small ones on a line.
            let align = if self.chunk >= 64 << 10 {
                4096
            } else if self.obj.is_multiple_of(64) {
                64
            } else {
                8
            };
            self.chunks.push(heap.carve(vm, self.chunk, align)?);
        }
        Ok(())
    }

    /// Hands out slots `slots()..slots()+n` as the unmeasured load phase would, faulting their
    /// memory in when `populate`; no accesses are emitted.
    pub fn reserve(&mut self, heap: &mut Heap, vm: &mut dyn Vm, n: u64, populate: bool) -> Result<()> {
        let first = self.next;
        self.next += n;
        self.grow(heap, vm, self.next)?;
        if populate && n > 0 {
            let c0 = first / self.per_chunk;
            let c1 = (self.next - 1) / self.per_chunk;
            for c in c0..=c1 {
                let lo = if c == c0 { first % self.per_chunk } else { 0 };
                let hi = if c == c1 { (self.next - 1) % self.per_chunk + 1 } else { self.per_chunk };
                let base = self.chunks[c as usize];
                let a = (base + lo * self.obj) & !4095;
                let b = (base + hi * self.obj + 4095) & !4095;
                vm.populate(a, b - a)?;
            }
        }
        Ok(())
    }

    /// Allocates one object: pops the free list (reading the link word stored in the object) or
    /// bumps into fresh memory, mapping a new chunk when needed. Returns the slot.
    pub fn alloc(&mut self, heap: &mut Heap, vm: &mut dyn Vm, p: &mut Pending, ip: u64) -> Result<u64> {
        if let Some(slot) = self.free.pop() {
            p.load(self.addr(slot), 8, ip, ALLOC_INSTRS);
            return Ok(slot);
        }
        let slot = self.next;
        self.next += 1;
        self.grow(heap, vm, self.next)?;
        p.instrs(ALLOC_INSTRS);
        Ok(slot)
    }

    /// Frees `slot`: writes the free-list link into the object and pushes it (LIFO, so the next
    /// allocation of this class reuses it, as tcache and ssmem do).
    pub fn free(&mut self, slot: u64, p: &mut Pending, ip: u64) {
        p.store(self.addr(slot), 8, ip, FREE_INSTRS);
        self.free.push(slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::testvm::TestVm;

    #[test]
    fn pool_addresses_are_distinct_and_mapped() {
        let mut vm = TestVm::new();
        let mut heap = Heap::new(1 << 20, MapFlags::default());
        let mut pool = Pool::new(48, 64 << 10);
        pool.reserve(&mut heap, &mut vm, 5000, true).unwrap();
        assert!(vm.populated >= 5000 * 48);
        let mut p = Pending::default();
        let a = pool.alloc(&mut heap, &mut vm, &mut p, 1).unwrap();
        assert_eq!(a, 5000);
        pool.free(7, &mut p, 2);
        assert_eq!(pool.alloc(&mut heap, &mut vm, &mut p, 3).unwrap(), 7);
        let mut addrs: Vec<u64> = (0..pool.slots()).map(|s| pool.addr(s)).collect();
        for &x in &addrs {
            assert!(vm.contains(x, 48));
        }
        addrs.sort_unstable();
        addrs.dedup();
        assert_eq!(addrs.len() as u64, pool.slots());
        assert!(addrs.windows(2).all(|w| w[1] - w[0] >= 48));
    }

    #[test]
    fn malloc_follows_the_mmap_threshold() {
        let mut vm = TestVm::new();
        let mut heap = Heap::new(1 << 20, MapFlags::default());
        let a = heap.malloc(&mut vm, 1000, true).unwrap();
        let b = heap.malloc(&mut vm, 1000, false).unwrap();
        assert_eq!(vm.maps.len(), 1);
        assert!(b >= a + 1000 && b.is_multiple_of(64));
        let c = heap.malloc(&mut vm, MMAP_THRESHOLD, true).unwrap();
        assert_eq!(vm.maps.len(), 2);
        assert_eq!(vm.maps[1], (c, MMAP_THRESHOLD));
        assert_eq!(vm.populated, 4096 + MMAP_THRESHOLD);
        assert_eq!(heap.mapped(), (1 << 20) + MMAP_THRESHOLD);
    }
}
