//! A warning for runs whose simulated OS work dwarfs the accesses they simulate (issue 14,
//! item 8): a memory-starved machine with `os.thp = always` and swap on swaps whole 2 MiB pages
//! back and forth, over a hundred 4 KiB swap-outs per access, and such a run takes minutes for
//! what should take a second. It is a legitimate result (the thrashing is what the config
//! describes), so the run goes on; stderr says why it is slow instead of letting it look hung.
//!
//! The test is on simulated counts only, never on host time, so the same run warns at the same
//! access on every machine.

use crate::os::{OsStats, ThpMode};

/// Swap-outs (4 KiB pages) before the ratio is judged: a short burst of swapping is normal.
const MIN_SWAP_OUTS: u64 = 1 << 20;
/// Swapped-out 4 KiB pages per simulated access above which a run is thrashing. Ordinary
/// over-commitment swaps at most a page or two per faulting access; 64 means whole huge pages
/// go out for most accesses.
const SWAP_OUTS_PER_ACCESS: u64 = 64;

/// Watches one run's OS counters; warns at most once.
#[derive(Default)]
pub struct Runaway {
    warned: bool,
}

impl Runaway {
    /// Checks the counters after `accesses` simulated accesses (warm-up included, as the OS's
    /// work during warm-up is just as slow); prints the warning the first time it applies and
    /// returns whether it did.
    pub fn check(&mut self, accesses: u64, os: &OsStats, memory: u64, thp: ThpMode) -> bool {
        if self.warned {
            return false;
        }
        let Some(msg) = thrashing(accesses, os.swap_outs, memory, thp) else {
            return false;
        };
        self.warned = true;
        eprintln!("xlate: warning: {msg}");
        true
    }
}

/// The warning for `swap_outs` 4 KiB pages swapped out in `accesses` accesses, if it is one.
pub fn thrashing(accesses: u64, swap_outs: u64, memory: u64, thp: ThpMode) -> Option<String> {
    if swap_outs < MIN_SWAP_OUTS || swap_outs < SWAP_OUTS_PER_ACCESS.saturating_mul(accesses.max(1)) {
        return None;
    }
    let per = swap_outs as f64 / accesses.max(1) as f64;
    let huge = if thp == ThpMode::Always { " with os.thp=always, which swaps whole 2 MiB pages" } else { "" };
    Some(format!(
        "the simulated OS has swapped out {swap_outs} 4 KiB pages in {accesses} accesses ({per:.0} per access): \
         its {} of memory is far too small for the workload{huge}, so this run is slow and its numbers measure \
         thrashing; raise os.memory, or Ctrl-C to stop and report",
        crate::addr::fmt_bytes(memory)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warns_only_past_the_ratio_and_the_floor() {
        assert!(thrashing(1000, 1 << 19, 1 << 30, ThpMode::Always).is_none(), "below the floor");
        assert!(thrashing(1 << 20, 1 << 22, 1 << 30, ThpMode::Always).is_none(), "4 per access is ordinary swapping");
        let m = thrashing(100_000, 61_000_000, 1 << 30, ThpMode::Always).expect("610 per access");
        assert!(m.contains("610 per access") && m.contains("1 GiB") && m.contains("2 MiB pages"), "{m}");
        let mut w = Runaway::default();
        let os = OsStats { swap_outs: 61_000_000, ..OsStats::default() };
        assert!(w.check(100_000, &os, 1 << 30, ThpMode::Never));
        assert!(!w.check(200_000, &os, 1 << 30, ThpMode::Never), "once");
    }
}
