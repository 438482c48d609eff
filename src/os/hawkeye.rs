//! Hawkeye (Panwar et al., ASPLOS'19) as ported in the Elastic Translations artifact (reference
//! elastic-translations.md §5): 2 MiB promotion ordered by access coverage, plus asynchronous
//! pre-zeroing. The artifact's configuration (`env/hwk.env`) keeps THP at fault (`os.thp=always`)
//! and replaces khugepaged's scan order with Hawkeye's bins (design `arm64-hawkeye`).
//!
//! - **Registration.** Every fault that maps less than 2 MiB registers its 2 MiB-aligned region
//!   (the port's `add_ohp_bin`, hooked in [`Os::fault`]; the OS hands new regions over at the
//!   next epoch). Regions mapped whole at fault are not registered: they have nothing to promote.
//! - **Access coverage** (the port's kbinmanager). Every `os.hawkeye.window_ms` of the policies'
//!   clock, each registered region's accessed 4 KiB pages are counted through the translation
//!   API (`for_each`, charged as `iterate` on the `promote` path), the region's weight becomes
//!   `(6 × old + 4 × accessed) / 10` in integers, capped at 512, and its bin
//!   `⌈log2 weight⌉` (`order_base_2`: 0 for weights 0 and 1, 9 for 512). The accessed bits are
//!   then cleared — one `Tdb::update` with `accessed = false` per accessed translation (charged
//!   as `insert`) and one TLB shootdown of the region, without which pages cached in a TLB would
//!   not be walked again and never set their bit. Counting at the end of a window and clearing
//!   for the next is kbinmanager's clear, wait, count, in steady state (windows that fall due
//!   together, in an epoch longer than the window, run once). A region that is no
//!   longer inside one VMA, maps nothing, or is already mapped by a page of 2 MiB or more is
//!   dropped (the port discards such regions as invalid).
//! - **Promotion.** Every `os.hawkeye.sleep_ms`, up to `os.hawkeye.promotions_per_wake` regions
//!   are collapsed with [`Os::collapse`], from the highest bin down; ties go by address, then
//!   ASID. Bins are global across processes (the artifact's `promotion_metric=2`), so processes
//!   with similar layouts interleave at equal bins (the port's round-robin). Only regions
//!   measured by at least one window are candidates; regions whose VMA does not allow THP now are
//!   skipped and kept (advice may change); a failed collapse keeps the region and uses budget.
//! - **Pre-zeroing** (`os.hawkeye.prezero`): the OS charges no zeroing for new data pages
//!   (`Os::zero_data`), as a background thread zeroed free memory; that thread's own work is not
//!   charged to the run (it runs on an otherwise idle core).
//!
//! Simplified: the port's two alternating scan lists and its first three identification-only
//! scans are not modelled (a region is a candidate after its first window); no bloat recovery or
//! zero-page de-duplication; no translation-overhead measurement from hardware counters to rank
//! processes (metrics 0 and 1).
//!
//! Coverage needs a driver whose walk records accessed bits: radix and every design built on its
//! table (arm64, RMM, POM-TLB, Utopia's FlexSeg, nested guests), FPT and ECPT set them. Pages a
//! side structure translates without a walk (Utopia's RestSegs, RMM's range TLB) are not marked.

use super::policy::Promoter;
use super::*;

/// Largest weight: the 4 KiB pages of a 2 MiB region (`HPAGE_PMD_NR`).
pub const MAX_WEIGHT: u32 = 512;

/// The port's bin lists (`MAX_BINS`): the two scan lists of regions not yet ranked, and bins
/// 2 + [`bin`] for the ranked ones. Here a region's bin is [`bin`] itself, 0 to 9.
pub const PORT_BINS: usize = 12;

/// The new weight of a region of weight `old` with `accessed` pages accessed in the last
/// window: the exponential moving average 0.6 × old + 0.4 × new, in integers, capped at 512.
pub fn ema(old: u32, accessed: u32) -> u32 {
    ((old.min(MAX_WEIGHT) * 6 + accessed.min(MAX_WEIGHT) * 4) / 10).min(MAX_WEIGHT)
}

/// The bin of `weight`: ⌈log2 weight⌉, 0 for 0 and 1 (Linux's `order_base_2`).
pub fn bin(weight: u32) -> u8 {
    if weight <= 1 {
        0
    } else {
        (32 - (weight - 1).leading_zeros()) as u8
    }
}

/// One registered 2 MiB region.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Region {
    /// Access-coverage weight (0..=512).
    pub weight: u32,
    /// [`bin`] of the weight.
    pub bin: u8,
    /// Measured by at least one window (only then a promotion candidate).
    pub measured: bool,
}

/// Whether `cfg` runs Hawkeye's promoter (it needs THP, as khugepaged does).
pub(super) fn active(cfg: &OsConfig) -> bool {
    cfg.hawkeye.enabled && cfg.thp != ThpMode::Never
}

/// Hawkeye's promoter (see the module docs).
pub struct Hawkeye {
    cfg: HawkeyeConfig,
    thp: ThpMode,
    next_window_ms: f64,
    next_wake_ms: f64,
    regions: BTreeMap<(u16, u64), Region>,
}

impl Hawkeye {
    /// The promoter `cfg` turns on, if any.
    pub fn configured(cfg: &OsConfig) -> Option<Hawkeye> {
        active(cfg).then(|| Hawkeye::new(cfg))
    }

    /// A promoter with `cfg`'s settings whether or not it is enabled (tests and tools).
    pub fn new(cfg: &OsConfig) -> Hawkeye {
        let h = &cfg.hawkeye;
        Hawkeye { cfg: h.clone(), thp: cfg.thp, next_window_ms: h.window_ms, next_wake_ms: h.sleep_ms, regions: BTreeMap::new() }
    }

    /// Registered regions by (ASID, base).
    pub fn regions(&self) -> &BTreeMap<(u16, u64), Region> {
        &self.regions
    }

    /// Takes the regions faults registered since the last call.
    pub fn register<D: Driver>(&mut self, os: &mut Os<D>) {
        for k in std::mem::take(&mut os.hawkeye_new) {
            self.regions.entry(k).or_default();
        }
    }

    /// Promotion candidates in promotion order: highest bin first, then by address and ASID.
    pub fn order(&self) -> Vec<(u16, u64)> {
        let mut v: Vec<(u8, u64, u16)> = self.regions.iter().filter(|(_, r)| r.measured).map(|(&(a, va), r)| (r.bin, va, a)).collect();
        v.sort_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));
        v.into_iter().map(|(_, va, a)| (a, va)).collect()
    }

    /// One access-coverage window over every registered region.
    pub fn window<D: Driver>(&mut self, os: &mut Os<D>) -> Result<()> {
        self.register(os);
        os.stats.hawkeye_windows += 1;
        os.cost.set_path(Path::Promote);
        let keys: Vec<(u16, u64)> = self.regions.keys().copied().collect();
        for (asid, base) in keys {
            match os.hawkeye_coverage(asid, base)? {
                None => {
                    self.regions.remove(&(asid, base));
                }
                Some(n) => {
                    let r = self.regions.get_mut(&(asid, base)).expect("registered");
                    r.weight = ema(r.weight, n);
                    r.bin = bin(r.weight);
                    r.measured = true;
                }
            }
        }
        Ok(())
    }

    /// One promotion wake-up: up to `promotions_per_wake` collapses in [`Hawkeye::order`].
    pub fn wake<D: Driver>(&mut self, os: &mut Os<D>) -> Result<()> {
        os.cost.set_path(Path::Promote);
        let mut budget = self.cfg.promotions_per_wake;
        let m2 = PageSize::M2.bytes();
        for (asid, base) in self.order() {
            if budget == 0 {
                break;
            }
            if os.truth(asid, base).is_some_and(|t| t.size >= PageSize::M2) {
                self.regions.remove(&(asid, base)); // already 2 MiB (or more)
                continue;
            }
            match os.vma(asid, base) {
                Some(v) if v.start <= base && base + m2 <= v.end => {
                    if !v.thp_allowed(self.thp) {
                        continue;
                    }
                }
                _ => {
                    self.regions.remove(&(asid, base));
                    continue;
                }
            }
            budget -= 1;
            if os.collapse(asid, base)? {
                os.stats.hawkeye_promotions += 1;
                self.regions.remove(&(asid, base));
            }
        }
        Ok(())
    }
}

impl<D: Driver> Promoter<D> for Hawkeye {
    fn name(&self) -> &'static str {
        "hawkeye"
    }

    fn tick(&mut self, os: &mut Os<D>, now_ms: f64) -> Result<()> {
        self.register(os);
        // Whatever is due, in time order; a window due with a wake-up comes first, so the
        // wake-up sees fresh bins. Windows due together (an epoch longer than the window) run
        // once: accessed bits cannot tell them apart, and the later ones would count nothing.
        let mut wakes = 0;
        while now_ms >= self.next_window_ms.min(self.next_wake_ms) {
            if self.next_window_ms <= self.next_wake_ms {
                super::policy::due_wakes(&mut self.next_window_ms, self.cfg.window_ms, now_ms);
                self.window(os)?;
            } else if wakes == super::policy::MAX_WAKES_PER_TICK {
                // Overslept (see `MAX_WAKES_PER_TICK`): the missed wake-ups are skipped.
                self.next_wake_ms = now_ms + self.cfg.sleep_ms;
            } else {
                wakes += 1;
                self.next_wake_ms += self.cfg.sleep_ms;
                self.wake(os)?;
            }
        }
        Ok(())
    }
}

impl<D: Driver> Os<D> {
    /// Hawkeye's window for one region: the number of accessed 4 KiB pages in the 2 MiB region
    /// at `base`, whose accessed bits are then cleared (one update each, one shootdown of the
    /// region); `None` if the region is invalid (not inside one VMA, nothing mapped, or mapped
    /// by a page of 2 MiB or more).
    fn hawkeye_coverage(&mut self, asid: u16, base: u64) -> Result<Option<u32>> {
        let end = base + PageSize::M2.bytes();
        if self.truth(asid, base).is_some_and(|t| t.size >= PageSize::M2) {
            return Ok(None);
        }
        if !self.vma(asid, base).is_some_and(|v| v.start <= base && end <= v.end) {
            return Ok(None);
        }
        let mut objs = Vec::new();
        let mut mapped = false;
        self.api(asid, Func::Iterate, |d, s, env| {
            d.for_each(s, base, end, env, &mut |o| {
                mapped = true;
                if o.accessed && o.size < PageSize::M2 {
                    objs.push(*o);
                }
            })
        });
        if !mapped {
            return Ok(None);
        }
        let accessed: u64 = objs.iter().map(|o| o.size.base_pages()).sum();
        for o in &objs {
            let old = TObj { accessed: false, ..*o };
            self.api(asid, Func::Insert, |d, s, env| d.update(s, &old, env))?;
        }
        if !objs.is_empty() {
            self.stats.hawkeye_accessed_cleared += objs.len() as u64;
            self.shootdown(asid, base, end);
        }
        Ok(Some(accessed as u32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tapi::flat::Flat;
    use crate::tapi::{Tdb, WalkPlan};

    const M2: u64 = 2 << 20;

    #[test]
    fn weights_follow_the_moving_average_and_bins_are_ceil_log2() {
        // 0.4 × 512 = 204.8 → 204; then (6 × 204 + 4 × 512) / 10 = 327.2 → 327.
        assert_eq!(ema(0, 512), 204);
        assert_eq!(ema(204, 512), 327);
        assert_eq!(ema(327, 0), 196);
        assert_eq!(ema(0, 8), 3);
        assert_eq!(ema(3, 0), 1);
        assert_eq!(ema(0, 2), 0);
        // Capped at 512, whatever it is fed.
        assert_eq!(ema(512, 512), 512);
        assert_eq!(ema(4000, 4000), 512);
        // Integer truncation stops a fully covered region at 511 once below 512.
        assert_eq!(ema(511, 512), 511);
        let bins: Vec<u8> = [0, 1, 2, 3, 4, 5, 8, 9, 12, 204, 256, 257, 327, 512].iter().map(|&w| bin(w)).collect();
        assert_eq!(bins, [0, 0, 1, 2, 2, 3, 3, 4, 4, 8, 8, 9, 9, 9]);
        assert!(bin(MAX_WEIGHT) as usize + 2 < PORT_BINS, "the port's lists hold every bin");
    }

    fn config(promotions_per_wake: u64, prezero: bool) -> OsConfig {
        let mut cfg = OsConfig { memory: 256 << 20, thp: ThpMode::Madvise, ..OsConfig::default() };
        cfg.hawkeye = HawkeyeConfig { enabled: true, promotions_per_wake, prezero, ..HawkeyeConfig::default() };
        cfg
    }

    /// An OS on the stand-in flat map (whose walk sets accessed bits) with one process and a VMA
    /// of `regions` 2 MiB regions, faulted 4 KiB page by page (`faults[r]` pages at the start of
    /// region r) and then advised MADV_HUGEPAGE; returns it with the VMA's base.
    fn setup(cfg: &OsConfig, faults: &[u64]) -> (Os<Flat>, u16, u64) {
        let mut os = Os::boot(Flat::with_side(None), cfg, 1).unwrap();
        let a = os.spawn(false).unwrap();
        let len = faults.len() as u64 * M2;
        let base = os.mmap(a, len, MapFlags::default()).unwrap();
        for (r, &n) in faults.iter().enumerate() {
            for i in 0..n {
                assert_eq!(os.fault(a, base + r as u64 * M2 + i * 4096).unwrap().size, PageSize::K4);
            }
        }
        os.madvise(a, base, len, HugeAdvice::Huge).unwrap();
        (os, a, base)
    }

    /// Hardware walks of `n` pages from `va` (each sets its leaf's accessed bit).
    fn touch(os: &mut Os<Flat>, a: u16, va: u64, n: u64) {
        for i in 0..n {
            let mut plan = WalkPlan::default();
            let p = &mut os.procs[a as usize];
            assert!(os.driver.walk(&mut p.space, &mut (), a, va + i * 4096, &mut plan).is_some());
        }
    }

    fn accessed(os: &mut Os<Flat>, a: u16, va: u64) -> bool {
        os.api(a, Func::Lookup, |d, s, env| d.find(s, va, env)).unwrap().accessed
    }

    #[test]
    fn walks_set_accessed_bits_and_windows_count_and_clear_them() {
        let cfg = config(8, false);
        let (mut os, a, base) = setup(&cfg, &[8, 64, 2]);
        // Faults install entries with the bit clear; a walk sets it.
        assert!(!accessed(&mut os, a, base));
        touch(&mut os, a, base, 8);
        touch(&mut os, a, base + M2, 32);
        touch(&mut os, a, base + 2 * M2, 2);
        assert!(accessed(&mut os, a, base) && accessed(&mut os, a, base + M2 + 31 * 4096));
        assert!(!accessed(&mut os, a, base + M2 + 32 * 4096), "faulted, never walked");
        let mut hk = Hawkeye::new(&cfg);
        hk.window(&mut os).unwrap();
        let r = |hk: &Hawkeye, i: u64| hk.regions()[&(a, base + i * M2)];
        // 8 → weight 3, bin 2; 32 → 12, bin 4; 2 → 0, bin 0.
        assert_eq!([r(&hk, 0), r(&hk, 1), r(&hk, 2)].map(|r| (r.weight, r.bin)), [(3, 2), (12, 4), (0, 0)]);
        assert_eq!(os.stats.hawkeye_windows, 1);
        assert_eq!(os.stats.hawkeye_accessed_cleared, 8 + 32 + 2);
        for i in 0..64 {
            assert!(!accessed(&mut os, a, base + M2 + i * 4096), "cleared by the window");
        }
        // One shootdown per region whose bits were cleared.
        let sd: Vec<(u64, u64)> = os.pending.iter().map(|s| (s.start, s.end)).collect();
        assert_eq!(sd, (0..3).map(|i| (base + i * M2, base + (i + 1) * M2)).collect::<Vec<_>>());
        // Per region, the iterate call and, as the flat map iterates with the generic
        // `for_each`, one `find` per 4 KiB page.
        assert_eq!(os.cost.get(Path::Promote, Func::Iterate, Event::Call), 3 * (1 + 512));
        assert_eq!(os.cost.get(Path::Promote, Func::Insert, Event::Call), 42);
        // A window without accesses decays the weights: (6 × 3) / 10 = 1, (6 × 12) / 10 = 7.
        hk.window(&mut os).unwrap();
        assert_eq!([r(&hk, 0), r(&hk, 1), r(&hk, 2)].map(|r| (r.weight, r.bin)), [(1, 0), (7, 3), (0, 0)]);
        assert_eq!(os.stats.hawkeye_accessed_cleared, 42, "nothing left to clear");
    }

    #[test]
    fn promotion_goes_from_the_highest_bin_down_ties_by_address() {
        let cfg = config(3, false);
        // Accessed pages per region: 2 (bin 0), 32 (bin 4), 8 (bin 2), 32 (bin 4), none.
        let (mut os, a, base) = setup(&cfg, &[2, 32, 8, 32, 4]);
        for (r, n) in [2u64, 32, 8, 32].into_iter().enumerate() {
            touch(&mut os, a, base + r as u64 * M2, n);
        }
        let mut hk = Hawkeye::new(&cfg);
        hk.register(&mut os);
        assert!(hk.order().is_empty(), "nothing is a candidate before its first window");
        hk.window(&mut os).unwrap();
        let at = |r: u64| (a, base + r * M2);
        assert_eq!(hk.order(), [at(1), at(3), at(2), at(0), at(4)]);
        hk.wake(&mut os).unwrap();
        let sizes: Vec<PageSize> = (0..5).map(|r| os.truth(a, base + r * M2).unwrap().size).collect();
        assert_eq!(sizes, [PageSize::K4, PageSize::M2, PageSize::M2, PageSize::M2, PageSize::K4]);
        assert_eq!((os.stats.hawkeye_promotions, os.stats.promotions), (3, 3));
        assert_eq!(hk.order(), [at(0), at(4)], "promoted regions leave the bins");
        // The tick runs windows and wake-ups on the policies' clock: at 1 s one wake-up.
        hk.tick(&mut os, 1000.0).unwrap();
        assert_eq!(os.stats.hawkeye_promotions, 5);
        assert_eq!(os.stats.hawkeye_windows, 1, "the next window is due at 30 s");
        // Three windows due by 95 s run once; every wake-up runs (nothing left to promote).
        hk.tick(&mut os, 95_000.0).unwrap();
        assert_eq!(os.stats.hawkeye_windows, 2);
        assert_eq!((hk.next_window_ms, hk.next_wake_ms), (120_000.0, 96_000.0));
    }

    #[test]
    fn prezeroing_skips_the_zeroing_of_data_pages() {
        let zeroed = |prezero: bool| {
            let cfg = config(8, prezero);
            let (mut os, a, base) = setup(&cfg, &[16]);
            touch(&mut os, a, base, 16);
            let mut hk = Hawkeye::new(&cfg);
            hk.window(&mut os).unwrap();
            hk.wake(&mut os).unwrap();
            assert_eq!(os.stats.hawkeye_promotions, 1);
            [Path::Fault, Path::Promote].map(|p| os.cost.get(p, Func::Zero, Event::Page))
        };
        let (off, on) = (zeroed(false), zeroed(true));
        // Faults: the 16 data pages; the collapse: the 496 pages no 4 KiB page filled. (The flat
        // map allocates no table pages; a real table's are zeroed either way, by
        // `TdbEnv::alloc_table`, which pre-zeroing does not reach.)
        assert_eq!(off, [16, 512 - 16]);
        assert_eq!(on, [0, 0]);
    }
}
