//! The MMU of one core: L1 I/D TLBs, the L2 TLB, the walker that times a driver's walk plan
//! through the memory hierarchy, and the translation pipeline that puts them together
//! ([`pipeline`]). Walk caches belong to the driver (their semantics are the table format's), so
//! this layer holds them only as the driver's opaque type.

pub mod pipeline;
pub mod tlb;
pub mod wcache;

use crate::addr::PageSize;
use crate::error::{Error, Result};
use crate::mem::{Level, MemHierarchy};
use crate::tapi::WalkPlan;
use tlb::{Tlb, TlbConfig};

/// Where walker references enter the cache hierarchy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WalkerEntry {
    /// Through the L1 data cache, like loads (Utopia/ChampSim).
    L1,
    /// Directly into the L2 (EMT's measured configuration).
    L2,
}

/// TLB hierarchy configuration.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MmuConfig {
    /// L1 instruction TLB.
    pub l1i: TlbConfig,
    /// L1 data TLBs: one per page-size group (split) or a single one holding several sizes
    /// (unified). A size no L1 holds is served from the L2 TLB.
    pub l1d: Vec<TlbConfig>,
    /// Unified L2 TLB.
    pub l2: TlbConfig,
    /// Start the walk in parallel with the L2 TLB lookup instead of after its miss.
    pub l2_parallel_walk: bool,
    /// Where walker references enter the caches.
    pub walker_entry: WalkerEntry,
    /// Every translation hits the L1 TLB (the "perfect TLB" / ideal design).
    pub perfect_tlb: bool,
    /// Look a driver's side structure (RestSeg walk, range TLB) up in parallel with the L2 TLB
    /// (Utopia's default) instead of after its miss (Utopia Fig. 28's serial variant).
    pub side_parallel: bool,
    /// A translation of a size no L1 TLB holds is filled into the L1 TLB of the largest smaller
    /// size one holds, as the piece covering the accessed address (Neoverse N1 / Cortex-A76:
    /// "breaks these down into smaller pages when required for the L1", reference
    /// elastic-translations.md §1.5). Off: such translations are served by the L2 TLB each time.
    pub l1_pieces: bool,
}

impl Default for MmuConfig {
    /// Utopia MICRO'23 Table 1 (see `reference/parameters.md`).
    fn default() -> Self {
        MmuConfig {
            // Utopia Table 1: L1 I-TLB 128 entries, 8-way, 1 cycle.
            l1i: TlbConfig::new(128, 8, 1, &[PageSize::K4]),
            // Utopia Table 1: L1 D-TLB 4K 64 entries 4-way; 2M 32 entries 4-way; 1 cycle.
            l1d: vec![TlbConfig::new(64, 4, 1, &[PageSize::K4]), TlbConfig::new(32, 4, 1, &[PageSize::M2])],
            // Utopia Table 1: L2 TLB 1536 entries, 12-way, 12 cycles. 1536/12 = 128 sets.
            l2: TlbConfig::new(1536, 12, 12, &[PageSize::K4, PageSize::M2]),
            // Utopia §7: "In all evaluated systems, the L2 TLB access is performed in parallel
            // with the PTW" (its artifact starts the walk at the L1 miss, so it overlaps the RSW too).
            l2_parallel_walk: true,
            walker_entry: WalkerEntry::L1,
            perfect_tlb: false,
            side_parallel: true,
            l1_pieces: false,
        }
    }
}

impl MmuConfig {
    /// Checks every TLB's geometry.
    pub fn validate(&self) -> Result<()> {
        self.l1i.validate("mmu.l1i")?;
        if self.l1d.is_empty() {
            return Err(Error::config("mmu.l1d", "needs at least one L1 data TLB"));
        }
        for (i, t) in self.l1d.iter().enumerate() {
            t.validate(&format!("mmu.l1d[{i}]"))?;
        }
        self.l2.validate("mmu.l2")
    }
}

/// Per-core TLB statistics.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TlbStats {
    /// L1 D-TLB lookups / misses.
    pub l1d_lookups: u64,
    /// L1 D-TLB misses.
    pub l1d_misses: u64,
    /// L1 I-TLB lookups.
    pub l1i_lookups: u64,
    /// L1 I-TLB misses.
    pub l1i_misses: u64,
    /// L2 TLB lookups.
    pub l2_lookups: u64,
    /// L2 TLB misses.
    pub l2_misses: u64,
    /// L1 misses by the page size that finally served them (4K, 64K, 2M, 32M, 1G).
    pub l1_misses_by_size: [u64; PageSize::COUNT],
    /// L2 misses by page size.
    pub l2_misses_by_size: [u64; PageSize::COUNT],
}

/// Histogram bucket count for walk latencies (cycles); one bucket per cycle up to this, then one
/// overflow bucket holding the maximum.
pub const LAT_BUCKETS: usize = 4096;

/// The value at quantile `q` of a histogram of `n` samples (one bucket per cycle).
fn hist_quantile(hist: &[u64; LAT_BUCKETS + 1], n: u64, q: f64) -> u64 {
    if n == 0 {
        return 0;
    }
    let target = ((n as f64) * q).ceil().max(1.0) as u64;
    let mut acc = 0;
    for (i, &c) in hist.iter().enumerate() {
        acc += c;
        if acc >= target {
            return i as u64;
        }
    }
    LAT_BUCKETS as u64
}

/// Walker statistics.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WalkStats {
    /// Walks started.
    pub walks: u64,
    /// Sum of critical-path walk latencies (cycles).
    pub latency_sum: u64,
    /// Latency histogram.
    #[serde(with = "hist_serde")]
    pub hist: Box<[u64; LAT_BUCKETS + 1]>,
    /// References issued.
    pub refs: u64,
    /// References before walk-cache filtering.
    pub refs_unfiltered: u64,
    /// Serial steps that had needed references (critical-path memory steps).
    pub serial_steps: u64,
    /// References served by L1 / L2 / LLC / DRAM.
    pub refs_by_level: [u64; 4],
    /// Of those, the host-dimension references of 2-D walks.
    pub host_refs_by_level: [u64; 4],
    /// Critical-path cycles of 2-D walk steps whose slowest needed reference was a host one.
    pub host_latency_sum: u64,
    /// Histogram of those cycles per walk (the host part of each 2-D walk; 0 natively).
    #[serde(with = "hist_serde")]
    pub host_hist: Box<[u64; LAT_BUCKETS + 1]>,
    /// Walk-cache hits / misses.
    pub wc_hits: u64,
    /// Walk-cache misses.
    pub wc_misses: u64,
}

/// Serde for a latency histogram (`Box<[u64; LAT_BUCKETS + 1]>`): a sequence of its buckets
/// (serde derives arrays only up to 32 elements).
mod hist_serde {
    use super::LAT_BUCKETS;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(h: &[u64; LAT_BUCKETS + 1], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(h.iter())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Box<[u64; LAT_BUCKETS + 1]>, D::Error> {
        let v = Vec::<u64>::deserialize(d)?;
        let n = v.len();
        v.into_boxed_slice()
            .try_into()
            .map_err(|_| serde::de::Error::custom(format!("a latency histogram has {} buckets, found {n}", LAT_BUCKETS + 1)))
    }
}

impl Default for WalkStats {
    fn default() -> Self {
        WalkStats {
            walks: 0,
            latency_sum: 0,
            hist: Box::new([0; LAT_BUCKETS + 1]),
            refs: 0,
            refs_unfiltered: 0,
            serial_steps: 0,
            refs_by_level: [0; 4],
            host_refs_by_level: [0; 4],
            host_latency_sum: 0,
            host_hist: Box::new([0; LAT_BUCKETS + 1]),
            wc_hits: 0,
            wc_misses: 0,
        }
    }
}

impl WalkStats {
    /// Latency at quantile `q` (0..1), from the histogram.
    pub fn quantile(&self, q: f64) -> u64 {
        hist_quantile(&self.hist, self.walks, q)
    }

    /// Host part of the 2-D walk latency at quantile `q` (0..1).
    pub fn host_quantile(&self, q: f64) -> u64 {
        hist_quantile(&self.host_hist, self.walks, q)
    }

    /// Adds `o` into `self`.
    pub fn merge(&mut self, o: &WalkStats) {
        self.walks += o.walks;
        self.latency_sum += o.latency_sum;
        for (a, b) in self.hist.iter_mut().zip(o.hist.iter()) {
            *a += b;
        }
        for (a, b) in self.host_hist.iter_mut().zip(o.host_hist.iter()) {
            *a += b;
        }
        self.refs += o.refs;
        self.refs_unfiltered += o.refs_unfiltered;
        self.serial_steps += o.serial_steps;
        self.host_latency_sum += o.host_latency_sum;
        for i in 0..4 {
            self.refs_by_level[i] += o.refs_by_level[i];
            self.host_refs_by_level[i] += o.host_refs_by_level[i];
        }
        self.wc_hits += o.wc_hits;
        self.wc_misses += o.wc_misses;
    }
}

/// The TLB hierarchy of one core.
pub struct Tlbs {
    /// L1 I-TLB.
    pub l1i: Tlb,
    /// L1 D-TLBs.
    pub l1d: Vec<Tlb>,
    /// L2 TLB.
    pub l2: Tlb,
    /// The L1 D-TLB that hit last, probed first (see [`Tlbs::l1d_lookup`]).
    last_l1d: usize,
}

impl Tlbs {
    /// Builds the TLBs of one core.
    pub fn new(cfg: &MmuConfig) -> Tlbs {
        Tlbs { l1i: Tlb::new(&cfg.l1i), l1d: cfg.l1d.iter().map(Tlb::new).collect(), l2: Tlb::new(&cfg.l2), last_l1d: 0 }
    }

    /// Looks `va` up in the L1 D-TLBs, the one that hit last first (with THP, a stream's 2 MiB
    /// TLB rather than the 4 KiB one it would miss in first). The order changes nothing
    /// simulated: a miss changes no state, and at most one L1 D-TLB holds an entry covering `va`
    /// (every remap of a range is shot down in all of them; checked mode verifies it on every
    /// hit, [`Tlbs::other_l1d_covers`]).
    #[inline(always)]
    pub fn l1d_lookup(&mut self, asid: u16, va: u64) -> Option<crate::tapi::Translation> {
        let first = self.last_l1d;
        if let Some(t) = self.l1d[first].lookup(asid, va) {
            return Some(t);
        }
        // The others are skipped while they hold nothing (the 2 MiB L1 D-TLB of a run without
        // huge pages): a lookup there misses and changes nothing, but costs a call.
        for (i, tlb) in self.l1d.iter_mut().enumerate() {
            if i != first && !tlb.is_empty() {
                if let Some(t) = tlb.lookup(asid, va) {
                    self.last_l1d = i;
                    return Some(t);
                }
            }
        }
        None
    }

    /// The L1 D-TLB probed first answering `va` from its re-hit shortcut ([`Tlb::rehit`]):
    /// what [`Tlbs::l1d_lookup`] answers then, with no change of state.
    #[inline(always)]
    pub fn l1d_rehit(&self, asid: u16, va: u64) -> Option<crate::tapi::Translation> {
        self.l1d[self.last_l1d].rehit(asid, va)
    }

    /// Whether an L1 D-TLB other than the one that just hit also covers `va` (checked mode: the
    /// probe order of [`Tlbs::l1d_lookup`] relies on this never happening).
    pub fn other_l1d_covers(&self, asid: u16, va: u64) -> bool {
        self.l1d.iter().enumerate().any(|(i, t)| i != self.last_l1d && t.covers(asid, va))
    }

    /// Shoots down `[start, end)` of `asid` in every TLB.
    pub fn invalidate(&mut self, asid: u16, start: u64, end: u64) {
        self.l1i.invalidate(asid, start, end);
        for t in &mut self.l1d {
            t.invalidate(asid, start, end);
        }
        self.l2.invalidate(asid, start, end);
    }

    /// Flushes everything.
    pub fn flush(&mut self) {
        self.l1i.flush();
        for t in &mut self.l1d {
            t.flush();
        }
        self.l2.flush();
    }
}

/// Times a walk plan (or a side lookup's plan) through the memory hierarchy and records it in
/// `stats`; returns the critical-path latency in cycles.
#[inline]
pub fn time_walk(plan: &WalkPlan, mem: &mut MemHierarchy, core: usize, entry: WalkerEntry, stats: &mut WalkStats) -> u32 {
    let enter = match entry {
        WalkerEntry::L1 => Level::L1,
        WalkerEntry::L2 => Level::L2,
    };
    let mut lat = plan.fixed_cycles;
    let mut host_lat = 0u64;
    // One pass over the references (a step's are consecutive): the running step's number, its
    // latency (of its slowest needed reference), whether any of it is needed, and whether that
    // slowest one is a host reference. A step ends where the next begins, and after the last.
    let mut step = plan.refs.first().map_or(0, |r| r.step);
    let (mut step_lat, mut needed, mut host) = (0u32, false, false);
    for r in &plan.refs {
        if r.step != step {
            if needed {
                stats.serial_steps += 1;
                if host {
                    host_lat += step_lat as u64;
                }
            }
            lat += step_lat;
            (step, step_lat, needed, host) = (r.step, 0, false, false);
        }
        let (l, level) = mem.access(core, r.paddr, true, r.write, enter);
        stats.refs_by_level[level as usize] += 1;
        if r.host {
            stats.host_refs_by_level[level as usize] += 1;
        }
        if r.needed && (!needed || l > step_lat) {
            step_lat = l;
            host = r.host;
            needed = true;
        }
    }
    if needed {
        stats.serial_steps += 1;
        if host {
            host_lat += step_lat as u64;
        }
    }
    lat += step_lat;
    stats.walks += 1;
    stats.host_latency_sum += host_lat;
    stats.host_hist[(host_lat as usize).min(LAT_BUCKETS)] += 1;
    stats.latency_sum += lat as u64;
    stats.hist[(lat as usize).min(LAT_BUCKETS)] += 1;
    stats.refs += plan.refs.len() as u64;
    stats.refs_unfiltered += plan.unfiltered as u64;
    stats.wc_hits += plan.wc_hits as u64;
    stats.wc_misses += plan.wc_misses as u64;
    lat
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::PageSize;
    use crate::tapi::Translation;

    /// The L1 D-TLB that hit last is probed first, and the answers are those of probing in
    /// order; a translation held by two L1 D-TLBs at once (which shootdowns prevent) is reported.
    #[test]
    fn l1d_probe_order_follows_the_last_hit() {
        let mut t = Tlbs::new(&MmuConfig::default());
        assert_eq!(t.l1d.len(), 2, "the default machine has 4 KiB and 2 MiB L1 D-TLBs");
        let small = Translation { pbase: 0x5000, size: PageSize::K4 };
        let huge = Translation { pbase: 0x4000_0000, size: PageSize::M2 };
        t.l1d[0].insert(1, 0x1000, small);
        t.l1d[1].insert(1, 0x20_0000, huge);
        for _ in 0..2 {
            assert_eq!(t.l1d_lookup(1, 0x20_1234), Some(huge));
            assert_eq!(t.last_l1d, 1);
            assert!(!t.other_l1d_covers(1, 0x20_1234));
            assert_eq!(t.l1d_lookup(1, 0x1234), Some(small));
            assert_eq!(t.last_l1d, 0);
            assert_eq!(t.l1d_lookup(1, 0x40_0000), None);
            assert_eq!(t.l1d_lookup(2, 0x1234), None, "another ASID");
        }
        // A stale 4 KiB entry inside the 2 MiB page: the order would matter, so checked mode says so.
        t.l1d[0].insert(1, 0x20_3000, Translation { pbase: 0x9000, size: PageSize::K4 });
        assert_eq!(t.l1d_lookup(1, 0x20_3000).map(|x| x.size), Some(PageSize::K4));
        assert!(t.other_l1d_covers(1, 0x20_3000));
    }

    /// `l1d_lookup` skips an L1 D-TLB holding nothing; its answers and the TLBs' contents stay
    /// those of probing every L1 D-TLB in order, through phases in which the 2 MiB TLB is empty
    /// (a run without huge pages), fills, and empties again by shootdown or flush.
    #[test]
    fn skipping_an_empty_l1d_tlb_answers_as_probing_it() {
        let (mut fast, mut all) = (Tlbs::new(&MmuConfig::default()), Tlbs::new(&MmuConfig::default()));
        let mut rng = crate::rng::Rng::new(5);
        let mut skipped = 0;
        for step in 0..40_000u64 {
            let va = rng.below(1 << 26);
            let huge_phase = (step / 5_000) % 2 == 1;
            match rng.below(16) {
                0 => {
                    let (start, end) = (va, va + 1 + rng.below(1 << 22));
                    fast.invalidate(1, start, end);
                    all.invalidate(1, start, end);
                }
                1 if step % 1_000 == 0 => {
                    fast.l1d[1].flush();
                    all.l1d[1].flush();
                }
                _ => {
                    skipped += u64::from(fast.l1d[fast.last_l1d ^ 1].is_empty());
                    let got = fast.l1d_lookup(1, va);
                    let want = all.l1d.iter_mut().find_map(|t| t.lookup(1, va));
                    assert_eq!(got, want, "step {step}");
                    // Fill on a miss, a 2 MiB page only in the huge phases and where no 4 KiB
                    // entry of its range is held (shootdowns keep the two apart).
                    let two_m = huge_phase && rng.below(4) == 0 && !all.l1d[0].covers(1, va);
                    if got.is_none() && !(two_m && (0..512).any(|p| all.l1d[0].covers(1, (va & !0x1f_ffff) + p * 4096))) {
                        let (i, size) = if two_m { (1, PageSize::M2) } else { (0, PageSize::K4) };
                        let tr = Translation { pbase: va & !size.offset_mask(), size };
                        fast.l1d[i].insert(1, va, tr);
                        all.l1d[i].insert(1, va, tr);
                    }
                }
            }
        }
        for i in 0..2 {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            fast.l1d[i].for_each_tag(|t| a.push(t));
            all.l1d[i].for_each_tag(|t| b.push(t));
            assert_eq!(a, b, "L1 D-TLB {i}");
        }
        assert!(skipped > 1_000, "the 2 MiB TLB was empty for a while ({skipped} lookups skipped it)");
    }
}
