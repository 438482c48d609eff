//! How the rest of the simulator sees the OS: workloads through [`Vm`], the MMU pipeline through
//! [`TranslationHost`].

use super::*;

/// The [`Vm`] view of one process, handed to workloads.
pub struct ProcVm<'a, D: Driver> {
    /// The OS.
    pub os: &'a mut Os<D>,
    /// The process.
    pub asid: u16,
}

impl<D: Driver> Vm for ProcVm<'_, D> {
    fn mmap(&mut self, len: u64, flags: MapFlags) -> Result<u64> {
        self.os.mmap(self.asid, len, flags)
    }
    fn munmap(&mut self, addr: u64, len: u64) -> Result<()> {
        self.os.munmap(self.asid, addr, len)
    }
    fn populate(&mut self, addr: u64, len: u64) -> Result<()> {
        self.os.populate(self.asid, addr, len)
    }
    fn madvise(&mut self, addr: u64, len: u64, advice: HugeAdvice) -> Result<()> {
        self.os.madvise(self.asid, addr, len, advice)
    }
}

/// The OS as the MMU pipeline sees it: the running space's structures, page faults (their
/// work charged to the faulting core, trap included), the ground truth, page-copy stalls.
impl<D: Driver> TranslationHost<D> for Os<D> {
    #[inline(always)]
    fn tables(&mut self, asid: u16) -> (&mut D, &mut D::Space) {
        (&mut self.driver, &mut self.procs[asid as usize].space)
    }

    fn fault(&mut self, asid: u16, va: u64, now: f64) -> Result<(Translation, f64)> {
        let before = self.cycles(Path::Fault);
        self.now = now;
        let t = Os::fault(self, asid, va)?;
        Ok((t, self.cycles(Path::Fault) - before + self.cfg.fault_trap_cycles))
    }

    fn pending(&self) -> (&D, &[Shootdown]) {
        (&self.driver, &self.pending)
    }

    #[inline]
    fn truth(&self, asid: u16, va: u64) -> Option<Translation> {
        Os::truth(self, asid, va).and_then(|t| self.driver.machine_translation(va, t))
    }

    #[inline]
    fn migration_stall(&mut self, asid: u16, va: u64, t: Translation, now: f64) -> u32 {
        Os::migration_stall(self, asid, va, t, now)
    }
}
