//! Turning counted events into cycles.
//!
//! The default model is additive, in the spirit of EMT's analytical model and the interval models
//! of trace-driven studies:
//!
//! `cycles = Σ instrs × base_cpi + Σ exposure × translation_latency + Σ max(0, data_latency − L1)/MLP + OS cycles`
//!
//! - `base_cpi` stands for everything that is not a memory stall (an OoO core retiring ~2 IPC).
//! - Translation latency (L2 TLB lookups, walks) is charged with `translation_exposure` (1 = fully
//!   exposed: a load cannot issue before its translation, and walks serialize behind each other).
//! - Data latency beyond an L1 hit is divided by the memory-level parallelism of the core.
//! - OS work (page faults, promotion) is charged to the core that triggered it.
//!
//! It is behind [`TimingModel`] so an interval or cycle-level model can replace it without touching
//! the simulator loop.

use crate::config::Config;

/// Turns one access's events into core cycles.
pub trait TimingModel {
    /// Cycles of one access that are not data stalls: its `instrs` instructions and its
    /// `translation` cycles.
    fn compute(&self, instrs: u32, translation: u32) -> f64;

    /// Exposed stall cycles of a data access that took `data` cycles.
    fn data_stall(&self, data: u32) -> f64;

    /// All cycles added by one access.
    #[inline(always)]
    fn access(&self, instrs: u32, translation: u32, data: u32) -> f64 {
        self.compute(instrs, translation) + self.data_stall(data)
    }
}

/// The additive model above.
#[derive(Clone, Debug)]
pub struct Additive {
    base_cpi: f64,
    exposure: f64,
    l1: u32,
    inv_mlp: f64,
}

impl Additive {
    /// The model for a resolved config.
    pub fn new(cfg: &Config) -> Additive {
        Additive {
            base_cpi: cfg.core.base_cpi,
            exposure: cfg.core.translation_exposure,
            l1: cfg.mem.l1d.latency,
            inv_mlp: 1.0 / cfg.core.mlp,
        }
    }
}

impl TimingModel for Additive {
    #[inline(always)]
    fn compute(&self, instrs: u32, translation: u32) -> f64 {
        instrs as f64 * self.base_cpi + translation as f64 * self.exposure
    }

    #[inline(always)]
    fn data_stall(&self, data: u32) -> f64 {
        data.saturating_sub(self.l1) as f64 * self.inv_mlp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn additive_by_hand() {
        let cfg = Config::default(); // cpi 0.5, mlp 2, L1 4 cycles, exposure 1
        let m = Additive::new(&cfg);
        assert_eq!(m.access(10, 0, 4), 5.0);
        assert_eq!(m.access(10, 30, 104), 5.0 + 30.0 + 50.0);
    }
}
