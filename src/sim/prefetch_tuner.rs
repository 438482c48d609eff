//! Whether the access loop's host prefetch runs, chosen by measuring the host.
//!
//! The host prefetch ([`crate::tapi::Driver::prefetch`], `sim::prefetch_walk`) brings the host
//! memory of the next walks towards the host's caches. It pays where that memory is far (GUPS
//! over gigabytes) and costs where the tables already sit in the host's caches or the accesses
//! have locality (bfs, small tables; docs/performance.md, "The host prefetch is a trade"), and
//! nothing the simulator can observe tells the two apart. So the loop measures: at the start of
//! every period of [`PERIOD`] chunks it runs [`TRIAL`] chunks alternately without and with the
//! prefetch, then keeps whichever ran faster per access for the rest of the period.
//!
//! The prefetch is a hint with no simulated effect, so the choice changes how fast the host
//! runs, never a simulated number (the golden results do not move with it).
//!
//! `XLATE_HOST_PREFETCH=on` or `off` fixes the choice instead, for measuring: the trials make
//! a run's host instruction count depend on its timing (under cachegrind, too).

use std::time::Duration;

/// Chunks of the access loop per period: one trial and its decision.
pub const PERIOD: u32 = 256;
/// Chunks of each period's trial, alternating prefetch off and on (an even number).
pub const TRIAL: u32 = 8;

/// The chooser: call [`PrefetchTuner::enabled`] before a chunk and [`PrefetchTuner::record`]
/// after it.
#[derive(Debug)]
pub struct PrefetchTuner {
    /// Chunks of the current period so far.
    chunk: u32,
    /// The decision for the rest of the period.
    on: bool,
    /// Nanoseconds and accesses measured in the trial, without ([0]) and with ([1]) the prefetch.
    ns: [f64; 2],
    accesses: [u64; 2],
    /// The choice fixed by `XLATE_HOST_PREFETCH`, if it is.
    fixed: Option<bool>,
}

impl Default for PrefetchTuner {
    /// Starts with a trial; the prefetch is on until the first decision.
    fn default() -> Self {
        let fixed = match std::env::var("XLATE_HOST_PREFETCH").as_deref() {
            Ok("on") => Some(true),
            Ok("off") => Some(false),
            _ => None,
        };
        PrefetchTuner { chunk: 0, on: fixed.unwrap_or(true), ns: [0.0; 2], accesses: [0; 2], fixed }
    }
}

impl PrefetchTuner {
    /// Whether the next chunk runs the prefetch.
    #[inline]
    pub fn enabled(&self) -> bool {
        if let Some(on) = self.fixed {
            on
        } else if self.chunk < TRIAL {
            self.chunk % 2 == 1
        } else {
            self.on
        }
    }

    /// Records a chunk of `accesses` that took `elapsed`; at the end of the trial, decides.
    pub fn record(&mut self, accesses: usize, elapsed: Duration) {
        if self.chunk < TRIAL {
            let mode = self.enabled() as usize;
            self.ns[mode] += elapsed.as_nanos() as f64;
            self.accesses[mode] += accesses as u64;
            if self.chunk + 1 == TRIAL {
                let per = |m: usize| self.ns[m] / self.accesses[m].max(1) as f64;
                // Either side without accesses (a stalled trial) keeps the previous decision.
                if self.accesses[0] > 0 && self.accesses[1] > 0 {
                    self.on = per(1) <= per(0);
                }
            }
        }
        self.chunk += 1;
        if self.chunk == PERIOD {
            *self = PrefetchTuner { chunk: 0, ns: [0.0; 2], accesses: [0; 2], ..*self };
        }
    }

    /// The current decision (for the rest of the period, once its trial has run).
    pub fn decided_on(&self) -> bool {
        self.on
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `periods` periods in which a chunk of 256 accesses takes `on_ns` / `off_ns` per
    /// access; returns how many chunks after the trials ran with the prefetch.
    fn run(tuner: &mut PrefetchTuner, periods: u32, on_ns: u64, off_ns: u64) -> u32 {
        let mut on_after_trial = 0;
        for _ in 0..periods {
            for k in 0..PERIOD {
                let on = tuner.enabled();
                if k < TRIAL {
                    assert_eq!(on, k % 2 == 1, "the trial alternates off and on");
                } else {
                    on_after_trial += on as u32;
                }
                tuner.record(256, Duration::from_nanos(256 * if on { on_ns } else { off_ns }));
            }
        }
        on_after_trial
    }

    #[test]
    fn keeps_the_faster_mode_and_tries_again_each_period() {
        let mut t = PrefetchTuner::default();
        assert!(t.decided_on(), "on until the first trial decides");
        assert_eq!(run(&mut t, 2, 100, 150), 2 * (PERIOD - TRIAL), "prefetch faster: on after each trial");
        assert!(t.decided_on());
        assert_eq!(run(&mut t, 1, 150, 100), 0, "prefetch slower: off after the trial");
        assert!(!t.decided_on());
        assert_eq!(run(&mut t, 1, 100, 100), PERIOD - TRIAL, "a tie keeps the prefetch");
    }

    /// A fixed choice (`XLATE_HOST_PREFETCH`) holds through trials and across periods, whatever
    /// they measure.
    #[test]
    fn a_fixed_choice_ignores_the_trials() {
        for on in [false, true] {
            let mut t = PrefetchTuner { fixed: Some(on), on, ..PrefetchTuner::default() };
            for _ in 0..2 * PERIOD {
                assert_eq!(t.enabled(), on);
                // Measured the other way: the trials would pick `!on`.
                let ns = if t.enabled() == on { 150 } else { 100 };
                t.record(256, Duration::from_nanos(256 * ns));
            }
            assert_eq!(t.fixed, Some(on), "the period's reset keeps the fixed choice");
        }
    }

    #[test]
    fn an_empty_trial_side_keeps_the_previous_decision() {
        let mut t = PrefetchTuner::default();
        run(&mut t, 1, 150, 100);
        assert!(!t.decided_on());
        for _ in 0..TRIAL {
            // A stalled core: chunks without accesses.
            t.record(0, Duration::from_nanos(1000));
        }
        assert!(!t.decided_on(), "nothing measured: the decision stands");
    }
}
