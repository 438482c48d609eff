//! A stand-in for the simulated OS in workload unit tests: a bump allocator of virtual addresses
//! that records every mapping, so a test can check that every access falls inside a mapping.

use super::{MapFlags, Vm};
use crate::error::{Error, Result};

/// Bump-allocating [`Vm`] for tests.
#[derive(Default, Debug)]
pub struct TestVm {
    next: u64,
    /// Every live mapping as (base, len).
    pub maps: Vec<(u64, u64)>,
    /// Bytes populated.
    pub populated: u64,
}

impl TestVm {
    /// A VM whose first mapping starts at 64 GiB (well away from null, like a real heap).
    pub fn new() -> TestVm {
        TestVm { next: 64 << 30, maps: Vec::new(), populated: 0 }
    }

    /// Whether `[addr, addr+size)` lies inside one live mapping.
    pub fn contains(&self, addr: u64, size: u64) -> bool {
        self.maps.iter().any(|&(b, l)| addr >= b && addr + size <= b + l)
    }
}

impl Vm for TestVm {
    fn mmap(&mut self, len: u64, flags: MapFlags) -> Result<u64> {
        if len == 0 {
            return Err(Error::Workload { name: "testvm".into(), msg: "mmap of zero bytes".into() });
        }
        let align = if flags.huge == super::HugeAdvice::Giga { 1 << 30 } else { 2 << 20 };
        let base = (self.next + align - 1) & !(align - 1);
        let len = (len + 4095) & !4095;
        self.next = base + len + (2 << 20);
        self.maps.push((base, len));
        Ok(base)
    }
    fn munmap(&mut self, addr: u64, len: u64) -> Result<()> {
        self.maps.retain(|&(b, l)| !(b == addr && l >= len));
        Ok(())
    }
    fn madvise(&mut self, _addr: u64, _len: u64, _advice: super::HugeAdvice) -> Result<()> {
        Ok(())
    }
    fn populate(&mut self, _addr: u64, len: u64) -> Result<()> {
        self.populated += len;
        Ok(())
    }
}
