//! The bounded slice of the fuzz harness (`xlate::fuzz`): a few thousand seeded cases of mutated
//! traces and configs, each parsed and simulated in-process. No case may panic, print a
//! multi-line error, or allocate more host memory than its config's estimate allows. The long
//! run is `cargo run --release --example fuzz -- --minutes N` (docs/robustness.md).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use xlate::fuzz::{case, Outcome, HOST_BUDGET, HOST_SLACK};

/// Counts live and peak heap bytes (the harness runs one case at a time).
struct Counting;
static LIVE: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call forwards to the system allocator unchanged; the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size() as u64, Ordering::Relaxed) + l.size() as u64;
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size() as u64, Ordering::Relaxed) + l.size() as u64;
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size() as u64, Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[test]
fn mutated_traces_and_configs_never_panic_or_overallocate() {
    let dir = std::env::temp_dir().join(format!("xlate-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::panic::set_hook(Box::new(|_| {}));
    let (start, budget) = (Instant::now(), Duration::from_secs(45));
    let (mut ran, mut refused, mut failures) = (0u64, 0u64, Vec::new());
    for seed in 0..3000u64 {
        if start.elapsed() > budget {
            break;
        }
        let base = LIVE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let (kind, out) = case(seed, &dir);
        let peak = PEAK.load(Ordering::Relaxed) - base;
        if peak > HOST_BUDGET + HOST_SLACK {
            failures.push(format!("seed {seed} ({kind:?}): allocated {} MiB, beyond the estimate's budget", peak >> 20));
        }
        match out {
            Outcome::Ok => {}
            Outcome::Refused(_) => refused += 1,
            Outcome::Panicked(m) => failures.push(format!("seed {seed} ({kind:?}): panicked: {m}")),
            Outcome::BadError(m) => failures.push(format!("seed {seed} ({kind:?}): multi-line error: {m}")),
        }
        ran += 1;
    }
    let _ = std::panic::take_hook();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(ran >= 300, "only {ran} cases in the time budget");
    assert!(refused > 0 && refused < ran, "the mix must have both accepted and refused cases ({refused} of {ran} refused)");
    assert!(failures.is_empty(), "{} of {ran} cases failed:\n{}", failures.len(), failures.join("\n"));
}
