//! The simulator's handling of multi-threaded trace sources (`AccessSource::threads`,
//! `fill_thread`, `thread_done`), as a traced program produces them: threads that appear during
//! the run and threads that stall (nothing ready, not ended). No QEMU needed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use xlate::arch;
use xlate::config::Layers;
use xlate::error::Result;
use xlate::sim;
use xlate::trace::{Access, AccessKind, AccessSource};

const BATCH: usize = 100;

/// Thread 0 gives one batch, then stalls until thread 1 (which appears after thread 0's first
/// batch) has given three, then gives `after` more accesses. Thread 1 gives five batches.
struct TwoThreads {
    first_done: bool,
    after: usize,
    given1: usize,
    stalls: Arc<AtomicUsize>,
}

fn batch(buf: &mut [Access], thread: u64, base: u64, n: usize) -> usize {
    let n = n.min(buf.len());
    for (i, a) in buf[..n].iter_mut().enumerate() {
        *a = Access { vaddr: (thread << 32) + (base + i as u64) * 4096, kind: AccessKind::Load, size: 8, instrs: 1, ..Access::default() };
    }
    n
}

impl AccessSource for TwoThreads {
    fn fill(&mut self, _buf: &mut [Access]) -> Result<usize> {
        unreachable!("the simulator reads per thread")
    }
    fn threads(&self) -> usize {
        if self.first_done {
            2
        } else {
            1
        }
    }
    fn fill_thread(&mut self, thread: usize, buf: &mut [Access]) -> Result<usize> {
        Ok(match thread {
            0 if !self.first_done => {
                self.first_done = true;
                batch(buf, 0, 0, BATCH)
            }
            0 if self.given1 < 3 => {
                self.stalls.fetch_add(1, Ordering::Relaxed);
                0
            }
            0 => {
                let n = batch(buf, 0, 1000 + self.after as u64, self.after);
                self.after -= n;
                n
            }
            1 if self.given1 < 5 => {
                self.given1 += 1;
                batch(buf, 1, self.given1 as u64 * BATCH as u64, BATCH)
            }
            _ => 0,
        })
    }
    fn thread_done(&self, thread: usize) -> bool {
        match thread {
            0 => self.first_done && self.given1 >= 3 && self.after == 0,
            _ => self.given1 >= 5,
        }
    }
}

#[test]
fn threads_appear_and_stall() {
    for cores in [1, 2, 3] {
        let stalls = Arc::new(AtomicUsize::new(0));
        let src = TwoThreads { first_done: false, after: 1000, given1: 0, stalls: stalls.clone() };
        let design = arch::lookup("radix4").unwrap();
        let sets = vec!["os.memory=2G".to_string(), format!("cores={cores}"), "sim.quantum_instrs=50".into()];
        let cfg = Layers { sets, ..Layers::default() }.resolve(Some(design)).unwrap();
        let r = sim::run_sources(design, &cfg, vec![("two-threads".into(), Box::new(src))], false).unwrap();
        assert_eq!(r.core.accesses, (BATCH + 1000 + 5 * BATCH) as u64, "cores={cores}");
        assert_eq!(r.workload, "two-threads");
        assert!(stalls.load(Ordering::Relaxed) > 0, "cores={cores}: thread 0 never stalled");
        // Both threads share one address space: every page faulted once.
        assert_eq!(r.core.faults, (BATCH + 1000 + 5 * BATCH) as u64, "cores={cores}");
    }
}
