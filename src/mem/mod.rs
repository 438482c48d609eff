//! The memory hierarchy: per-core L1D and L2, one shared LLC, one DRAM.
//!
//! This layer knows caches and DRAM and nothing about translation, except one bit per reference and per
//! line: "translation structure" or "data". That bit is what the interference metrics need (the share
//! of cache lines holding page-table entries, Utopia Fig. 7; DRAM row-buffer conflicts split by cause,
//! Fig. 8/21).
//!
//! - [`assoc`]: the generic set-associative tag store (also used by TLBs, walk caches, POM-TLB, RestSeg);
//! - [`cache`]: one write-back, write-allocate cache level with per-line dirty/translation flags;
//! - [`dram`]: channels, ranks, banks and open rows;
//! - this module: [`MemConfig`] and [`MemHierarchy`], the path every simulated reference takes.
//!
//! The hierarchy is non-inclusive and non-exclusive (NINE): a miss fills every level it looked up, on
//! the way back from the level that served it; an eviction from one level never invalidates another;
//! dirty victims are written to the next level down (L1 → L2 → LLC → DRAM). Latency is the sum of the
//! latencies of every level looked up, plus DRAM's when the reference reaches it. The model is a
//! latency model without contention: no MSHRs, queues or bandwidth limits, and write-backs cost no
//! latency to the access that caused them (DRAM still counts them and their row-buffer effects).
//! `docs/memory-model.md` describes the model and its simplifications in full.
#![warn(missing_docs)]

pub mod assoc;
pub mod cache;
pub mod dram;
pub mod prefetch;
pub mod topology;

pub use assoc::{Replacement, SetAssoc, INVALID_TAG};
pub use cache::{Cache, CacheConfig, CacheResult, CacheStats, Writeback};
pub use dram::{Dram, DramConfig, DramMapping, DramStats};
pub use prefetch::{PrefetchConfig, PrefetchLevelStats, PrefetchStats, Prefetcher, PrefetcherConfig, PrefetcherKind};

use crate::addr::{BASE_PAGE, BASE_SHIFT, LINE_SHIFT};
use crate::error::Result;

/// Where a reference was served (or, as an argument, the level it enters the hierarchy at). Ordered
/// from the core outwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// The core's private L1 data cache.
    L1,
    /// The core's private L2.
    L2,
    /// The shared last-level cache.
    Llc,
    /// Main memory.
    Dram,
}

/// The memory hierarchy of the machine (the `[mem]` config table). Keys left out of a config file
/// take the [`Default`] (Utopia MICRO'23 Table 1) values; a cache table given must be complete.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemConfig {
    /// Private L1 data cache of each core.
    pub l1d: CacheConfig,
    /// Private (unified) L2 of each core.
    pub l2: CacheConfig,
    /// Shared last-level cache.
    pub llc: CacheConfig,
    /// If true, `llc.size` is per core and the shared LLC is `cores` slices of that size (an address is
    /// hashed to a slice, as in sliced Intel LLCs); if false, `llc.size` is the whole LLC.
    pub llc_per_core: bool,
    /// Main memory.
    pub dram: DramConfig,
    /// Data prefetchers of the private caches (off by default; [`prefetch`]).
    pub prefetch: PrefetchConfig,
}

impl Default for MemConfig {
    fn default() -> Self {
        MemConfig {
            l1d: CacheConfig {
                size: 32 << 10,           // Utopia Table 1: L1 D-cache 32 KB
                ways: 8,                  // Utopia Table 1: 8-way
                latency: 4,               // Utopia Table 1: 4-cycle access latency
                policy: Replacement::Lru, // Utopia Table 1: LRU replacement policy
            },
            l2: CacheConfig {
                size: 2 << 20,              // Utopia Table 1: L2 2 MB
                ways: 16,                   // Utopia Table 1: 16-way
                latency: 16,                // Utopia Table 1: 16-cycle latency
                policy: Replacement::Srrip, // Utopia Table 1: SRRIP replacement policy [Jaleel ISCA'10]
            },
            llc: CacheConfig {
                size: 2 << 20,            // Utopia Table 1: LLC 2 MB/core
                ways: 16,                 // Utopia Table 1: 16-way
                latency: 35,              // Utopia Table 1: 35-cycle latency
                policy: Replacement::Lru, // Utopia Table 1 names no LLC policy; LRU is our assumption
            },
            llc_per_core: true,          // Utopia Table 1: "2 MB/core"
            dram: DramConfig::default(), // Utopia Table 1: DDR4-3200 (see DramConfig::default)
            // Utopia Table 1 has an IP-stride L1D and a stream L2 prefetcher; they are opt-in
            // (`mem.prefetch.*.kind`) so that every result without them stays as it was.
            prefetch: PrefetchConfig::default(),
        }
    }
}

impl MemConfig {
    /// Checks every level; `key` is the config path of this table (`"mem"`), so errors name keys such as
    /// `mem.l2.ways`.
    pub fn validate(&self, key: &str) -> Result<()> {
        self.l1d.validate(&format!("{key}.l1d"))?;
        self.l2.validate(&format!("{key}.l2"))?;
        self.llc.validate(&format!("{key}.llc"))?;
        self.dram.validate(&format!("{key}.dram"))?;
        self.prefetch.validate(&format!("{key}.prefetch"))
    }

    /// Refuses levels whose narrow tags cannot address `memory` bytes of physical memory
    /// ([`Cache::check_reach`]).
    pub fn check_reach(&self, key: &str, memory: u64) -> Result<()> {
        for (name, c) in [("l1d", &self.l1d), ("l2", &self.l2), ("llc", &self.llc)] {
            Cache::check_reach(c, &format!("{key}.{name}"), memory)?;
        }
        Ok(())
    }

    /// Number of LLC slices for `cores` cores.
    pub fn llc_slices(&self, cores: usize) -> usize {
        if self.llc_per_core {
            cores.max(1)
        } else {
            1
        }
    }
}

/// Counters of the whole hierarchy (private levels summed over cores).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MemStats {
    /// L1D demand accesses, summed over cores.
    pub l1d: CacheStats,
    /// L2 demand accesses, summed over cores.
    pub l2: CacheStats,
    /// LLC demand accesses.
    pub llc: CacheStats,
    /// Share (0..1) of valid L1D lines that hold translation structures: per sample the mean over cores
    /// with a non-empty L1D, then the mean over samples.
    pub pt_lines_fraction_l1d: f64,
    /// Same for L2.
    pub pt_lines_fraction_l2: f64,
    /// Share (0..1) of valid LLC lines that hold translation structures, mean over samples.
    pub pt_lines_fraction_llc: f64,
    /// Number of [`MemHierarchy::sample_epoch`] calls behind the fractions.
    pub epoch_samples: u64,
    /// Lines removed by [`MemHierarchy::flush_range`] (one per copy, per level).
    pub flushed_lines: u64,
    /// DRAM counters.
    pub dram: DramStats,
    /// Prefetch counters, when a prefetcher is configured (absent from the results otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefetch: Option<PrefetchStats>,
}

/// Multiplier of the LLC slice hash (2^64 / golden ratio): Fibonacci hashing spreads consecutive and
/// strided lines evenly over any number of slices. Real slice hashes are undocumented XOR functions;
/// what matters here is only an even, deterministic spread.
const SLICE_HASH: u64 = 0x9E37_79B9_7F4A_7C15;

/// Per-core L1D and L2, a shared LLC, DRAM, and the hierarchy's counters.
#[derive(Clone, Debug)]
pub struct MemHierarchy {
    l1: Vec<Cache>,
    l2: Vec<Cache>,
    /// LLC slices (one unless `llc_per_core`).
    llc: Vec<Cache>,
    llc_slices: u64,
    dram: Dram,
    /// Sums over samples of the translation-line fractions of L1D, L2, LLC.
    pt_sum: [f64; 3],
    samples: u64,
    flushed_lines: u64,
    /// A bit per 4 KiB frame, all clear between calls: [`MemHierarchy::flush_ranges`] marks a
    /// batch of page frames here instead of sorting it (kept to reuse its allocation).
    flush_frames: Vec<u64>,
    /// The prefetchers, if any is configured (boxed: the common case carries one pointer).
    pf: Option<Box<Prefetchers>>,
}

/// Each core's L1D and L2 prefetchers, the lines they asked for in the current access, and
/// their counters.
#[derive(Clone, Debug)]
struct Prefetchers {
    l1: Vec<Option<Prefetcher>>,
    l2: Vec<Option<Prefetcher>>,
    /// (level, line) of the prefetches the current access generated, issued after it (kept to
    /// reuse its allocation).
    pending: Vec<(Level, u64)>,
    stats: PrefetchStats,
}

impl MemHierarchy {
    /// Empty caches, closed DRAM rows. `cfg` must have passed [`MemConfig::validate`]; `cores >= 1`;
    /// `core_ghz` converts DRAM nanoseconds to core cycles.
    pub fn new(cfg: &MemConfig, cores: usize, core_ghz: f64) -> Self {
        assert!(cores >= 1, "a memory hierarchy needs at least one core");
        let slices = cfg.llc_slices(cores);
        let prefetching = cfg.prefetch.any();
        let cache = |c: &CacheConfig| if prefetching { Cache::new(c).without_rehit_shortcut() } else { Cache::new(c) };
        let pf = prefetching.then(|| {
            Box::new(Prefetchers {
                l1: (0..cores).map(|_| Prefetcher::new(&cfg.prefetch.l1d)).collect(),
                l2: (0..cores).map(|_| Prefetcher::new(&cfg.prefetch.l2)).collect(),
                pending: Vec::new(),
                stats: PrefetchStats::default(),
            })
        });
        MemHierarchy {
            l1: (0..cores).map(|_| cache(&cfg.l1d)).collect(),
            l2: (0..cores).map(|_| cache(&cfg.l2)).collect(),
            llc: (0..slices).map(|_| cache(&cfg.llc)).collect(),
            llc_slices: slices as u64,
            dram: Dram::new(&cfg.dram, core_ghz),
            pt_sum: [0.0; 3],
            samples: 0,
            flushed_lines: 0,
            flush_frames: Vec::new(),
            pf,
        }
    }

    /// Number of cores (private L1D/L2 pairs).
    pub fn cores(&self) -> usize {
        self.l1.len()
    }

    /// LLC slice holding `line`.
    #[inline(always)]
    fn llc_slice(&self, line: u64) -> usize {
        if self.llc_slices == 1 {
            return 0;
        }
        // High 32 bits of the product, scaled to 0..slices by a multiply-shift (no division).
        let h = line.wrapping_mul(SLICE_HASH) >> 32;
        ((h * self.llc_slices) >> 32) as usize
    }

    /// [`MemHierarchy::access`] from L1 for the data reference of every access: the L1 re-hit
    /// shortcut inline in the caller (most accesses of a workload with locality take it), the
    /// rest in one out-of-line call, so a re-hit pays no call. Page walks, whose references
    /// seldom re-hit, call `access` itself.
    ///
    /// `ip` is the accessing instruction's address, for an IP-stride prefetcher (0 if unknown).
    #[inline(always)]
    pub fn access_hot(&mut self, core: usize, paddr: u64, translation: bool, write: bool, ip: u64) -> (u32, Level) {
        let c = &mut self.l1[core];
        if c.rehit(paddr >> LINE_SHIFT, translation, write) {
            return (c.latency(), Level::L1);
        }
        self.access_outlined(core, paddr, translation, write, ip)
    }

    /// The line of `core`'s L1 that a data reference re-hits without a lookup
    /// ([`Cache::mru_line`]), and the latency of such a re-hit.
    #[inline(always)]
    pub fn l1_mru(&self, core: usize) -> (u64, u32) {
        let c = &self.l1[core];
        (c.mru_line(), c.latency())
    }

    /// `n` data re-hits of [`MemHierarchy::l1_mru`]'s line, as `n` calls of
    /// [`MemHierarchy::access_hot`] with it would make them, dirty if any wrote.
    #[inline(always)]
    pub fn l1_rehits(&mut self, core: usize, n: u64, write: bool) {
        self.l1[core].rehit_mru(n, false, write);
    }

    /// The rest of [`MemHierarchy::access_hot`], kept out of line.
    #[inline(never)]
    fn access_outlined(&mut self, core: usize, paddr: u64, translation: bool, write: bool, ip: u64) -> (u32, Level) {
        if self.pf.is_some() {
            return self.access_prefetching(core, paddr, translation, write, Level::L1, ip);
        }
        self.access_levels::<false>(core, paddr, translation, write, Level::L1, 0)
    }

    /// [`MemHierarchy::access`] with prefetchers: the access trains them and the prefetches it
    /// generates follow it ([`MemHierarchy::issue_prefetches`]).
    #[inline(never)]
    fn access_prefetching(&mut self, core: usize, paddr: u64, translation: bool, write: bool, enter: Level, ip: u64) -> (u32, Level) {
        let r = self.access_levels::<true>(core, paddr, translation, write, enter, ip);
        self.issue_prefetches(core);
        r
    }

    /// One reference from `core` entering at `enter` (L1 for loads/stores; the page walker may enter at L1
    /// or L2 by config). Returns the latency in core cycles and the level that served it.
    ///
    /// Latency is cumulative: the latency of every level looked up down to the one that serves it, plus
    /// DRAM's latency if it goes to DRAM. On a miss the line is filled into every level looked up, tagged
    /// `translation` or data; only the entry level receives the line dirty on a `write` (the levels below
    /// supplied a clean copy). Dirty victims are written back to the next level (L1 → L2 → LLC → DRAM);
    /// the DRAM write is counted in DRAM stats but not charged to this access.
    ///
    /// Each level is looked up and, on a miss, filled in one step ([`Cache::access`]), but its
    /// victim's write-back waits until every level below has been looked up and filled, deepest
    /// first: a victim written back into a lower level must not displace the line this same
    /// reference is about to look for there. Nothing else touches a level between its lookup
    /// and its fill, so this is the order "look every level up, then fill from the deepest".
    ///
    /// With prefetchers (`mem.prefetch`), a data load trains the L1D's prefetcher and, if it
    /// misses there, the L2's; the lines they ask for are prefetched after the access. A page
    /// walk's references (which call this without an instruction address) train neither.
    #[inline]
    pub fn access(&mut self, core: usize, paddr: u64, translation: bool, write: bool, enter: Level) -> (u32, Level) {
        if self.pf.is_some() {
            return self.access_prefetching(core, paddr, translation, write, enter, 0);
        }
        self.access_levels::<false>(core, paddr, translation, write, enter, 0)
    }

    /// The body of [`MemHierarchy::access`]; with `PF`, the levels note demand hits on
    /// prefetched lines and train the prefetchers (whose requests wait in `pending`).
    #[inline(always)]
    fn access_levels<const PF: bool>(
        &mut self,
        core: usize,
        paddr: u64,
        translation: bool,
        write: bool,
        enter: Level,
        ip: u64,
    ) -> (u32, Level) {
        let line = paddr >> LINE_SHIFT;
        // Only data loads train (the artifact's prefetchers skip stores).
        let trains = PF && !translation && !write;
        let entry = enter as u8;
        let mut latency = 0u32;
        let (mut l1_victim, mut l2_victim) = (None, None);
        let served = 'probe: {
            if entry <= Level::L1 as u8 {
                let c = &mut self.l1[core];
                latency += c.latency();
                let r = if PF {
                    self.level_tracked(Level::L1, core, line, translation, write, trains, ip)
                } else {
                    c.access(line, translation, write)
                };
                if r.hit {
                    break 'probe Level::L1;
                }
                l1_victim = r.writeback;
            }
            if entry <= Level::L2 as u8 {
                let c = &mut self.l2[core];
                latency += c.latency();
                let w = write && enter == Level::L2;
                let r =
                    if PF { self.level_tracked(Level::L2, core, line, translation, w, trains, ip) } else { c.access(line, translation, w) };
                if r.hit {
                    break 'probe Level::L2;
                }
                l2_victim = r.writeback;
            }
            if entry <= Level::Llc as u8 {
                let slice = self.llc_slice(line);
                let c = &mut self.llc[slice];
                latency += c.latency();
                let w = write && enter == Level::Llc;
                let r =
                    if PF { self.level_tracked(Level::Llc, core, line, translation, w, false, ip) } else { c.access(line, translation, w) };
                if r.hit {
                    break 'probe Level::Llc;
                }
                latency += self.dram.access(paddr, translation, false);
                if let Some(wb) = r.writeback {
                    self.write_dram(wb);
                }
                break 'probe Level::Dram;
            }
            latency += self.dram.access(paddr, translation, write && enter == Level::Dram);
            Level::Dram
        };
        if let Some(wb) = l2_victim {
            self.write_llc(wb);
        }
        if let Some(wb) = l1_victim {
            self.write_l2(core, wb);
        }
        (latency, served)
    }

    /// A host-side hint that `paddr` is about to be accessed by `core` from L1: brings the host
    /// memory holding its set in each cache level towards the host's caches. Changes nothing
    /// simulated (see [`host_prefetch`]).
    #[inline]
    pub fn prefetch(&self, core: usize, paddr: u64) {
        let line = paddr >> LINE_SHIFT;
        self.l1[core].prefetch(line);
        self.l2[core].prefetch(line);
        self.llc[self.llc_slice(line)].prefetch(line);
    }

    /// One level's demand access in a hierarchy with prefetchers: a first demand hit on a line a
    /// prefetch brought in counts as useful for that level (L1D, L2), and a data load trains the
    /// level's prefetcher (`trains`), whose requests wait in `pending`.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn level_tracked(
        &mut self,
        level: Level,
        core: usize,
        line: u64,
        translation: bool,
        write: bool,
        trains: bool,
        ip: u64,
    ) -> CacheResult {
        let c = match level {
            Level::L1 => &mut self.l1[core],
            Level::L2 => &mut self.l2[core],
            _ => {
                let slice = self.llc_slice(line);
                &mut self.llc[slice]
            }
        };
        let (r, useful) = c.access_tracked(line, translation, write);
        let pf = self.pf.as_deref_mut().expect("only a hierarchy with prefetchers tracks them");
        let (p, stats) = match level {
            Level::L1 => (&mut pf.l1[core], &mut pf.stats.l1d),
            Level::L2 => (&mut pf.l2[core], &mut pf.stats.l2),
            _ => return r,
        };
        stats.useful += u64::from(useful);
        if let (true, Some(p)) = (trains, p) {
            let pending = &mut pf.pending;
            p.train(ip, line, r.hit, |l| pending.push((level, l)));
        }
        r
    }

    /// Issues the prefetches the last access generated, in order ([`MemHierarchy::prefetch_line`]).
    fn issue_prefetches(&mut self, core: usize) {
        let pf = self.pf.as_deref_mut().expect("only a hierarchy with prefetchers issues prefetches");
        if pf.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut pf.pending);
        for &(level, line) in &pending {
            self.prefetch_line(core, level, line);
        }
        let pf = self.pf.as_deref_mut().expect("still there");
        pf.pending = pending;
        pf.pending.clear();
    }

    /// A prefetch of `line` into `core`'s cache at `target` (L1D or L2). Nothing happens if the
    /// line is there. Otherwise it is fetched as a demand miss would be, from the first level
    /// below that holds it (promoting it there) or from DRAM, and filled into every level it
    /// missed, clean and marked as prefetched; victims are written back deepest first, as in
    /// [`MemHierarchy::access`]. It costs no access any latency: the model has no contention,
    /// so a prefetch is in place by the next reference (docs/memory-model.md).
    fn prefetch_line(&mut self, core: usize, target: Level, line: u64) {
        let present = if target == Level::L1 { self.l1[core].contains(line) } else { self.l2[core].contains(line) };
        let stats = self.prefetch_stats(target);
        stats.generated += 1;
        if present {
            stats.redundant += 1;
            return;
        }
        stats.issued += 1;
        let (mut l1_victim, mut l2_victim) = (None, None);
        let from_dram = 'fetch: {
            if target == Level::L1 {
                l1_victim = self.l1[core].prefetch_access(line).writeback;
            }
            let r = self.l2[core].prefetch_access(line);
            if r.hit {
                break 'fetch false;
            }
            l2_victim = r.writeback;
            let slice = self.llc_slice(line);
            let r = self.llc[slice].prefetch_access(line);
            if r.hit {
                break 'fetch false;
            }
            self.dram.access(line << LINE_SHIFT, false, false);
            if let Some(wb) = r.writeback {
                self.write_dram(wb);
            }
            true
        };
        if let Some(wb) = l2_victim {
            self.write_llc(wb);
        }
        if let Some(wb) = l1_victim {
            self.write_l2(core, wb);
        }
        self.prefetch_stats(target).from_dram += u64::from(from_dram);
    }

    /// The counters of the prefetchers that fill `target` (the L1D's or the L2's).
    fn prefetch_stats(&mut self, target: Level) -> &mut PrefetchLevelStats {
        let pf = self.pf.as_deref_mut().expect("only a hierarchy with prefetchers prefetches");
        if target == Level::L1 {
            &mut pf.stats.l1d
        } else {
            &mut pf.stats.l2
        }
    }

    /// An L1 victim written into the core's L2 (and onwards if that evicts a dirty line).
    #[inline]
    fn write_l2(&mut self, core: usize, wb: Writeback) {
        if let Some(next) = self.l2[core].writeback(wb.line, wb.translation) {
            self.write_llc(next);
        }
    }

    /// An L2 victim written into the LLC.
    #[inline]
    fn write_llc(&mut self, wb: Writeback) {
        let slice = self.llc_slice(wb.line);
        if let Some(next) = self.llc[slice].writeback(wb.line, wb.translation) {
            self.write_dram(next);
        }
    }

    /// An LLC victim written to DRAM: counted, row buffer updated, latency not charged to anyone.
    #[inline]
    fn write_dram(&mut self, wb: Writeback) {
        self.dram.access(wb.line << LINE_SHIFT, wb.translation, true);
    }

    /// Invalidates every line of `[paddr, paddr + bytes)` in all caches (page migration flushes). Dirty
    /// copies are dropped without a write-back: the migration's copy of the page is charged by the OS
    /// model, and the old frame's contents are dead once it completes.
    pub fn flush_range(&mut self, paddr: u64, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let first = paddr >> LINE_SHIFT;
        let end = (paddr.saturating_add(bytes - 1) >> LINE_SHIFT) + 1;
        let mut removed = 0;
        for c in self.l1.iter_mut().chain(self.l2.iter_mut()) {
            removed += c.invalidate_range(first, end);
        }
        // A line lives only in its own LLC slice: with several slices, a range smaller than a
        // slice's sets probes each line in that slice alone (removing lines in another order
        // leaves the same state); a larger one scans every slice.
        if self.llc.len() > 1 && end - first <= self.llc[0].sets() as u64 {
            for line in first..end {
                let slice = self.llc_slice(line);
                removed += self.llc[slice].invalidate_range(line, line + 1);
            }
        } else {
            for c in &mut self.llc {
                removed += c.invalidate_range(first, end);
            }
        }
        self.flushed_lines += removed;
    }

    /// [`MemHierarchy::flush_range`] of each of `ranges` (physical base, bytes), in any order:
    /// the state after does not depend on it. A batch whose lines outnumber the caches' (the
    /// pages a migration epoch moved: Utopia moves tens of thousands at once) is removed in one
    /// pass over every cache instead of a probe per line.
    pub fn flush_ranges(&mut self, ranges: &[(u64, u64)]) {
        let caches = || self.l1.iter().chain(&self.l2).chain(&self.llc);
        let capacity: u64 = caches().map(|c| c.capacity_lines()).sum();
        let probes: u64 = ranges.iter().map(|&(_, b)| b.div_ceil(1 << LINE_SHIFT)).sum::<u64>().saturating_mul(caches().count() as u64);
        // A probe of one set costs about what checking one line of a pass does (a binary search).
        if probes <= 4 * capacity {
            for &(pa, bytes) in ranges {
                self.flush_range(pa, bytes);
            }
            return;
        }
        if ranges.iter().all(|&(pa, b)| (pa | b) % BASE_PAGE == 0) {
            self.flush_frames(ranges);
            return;
        }
        let mut lines: Vec<(u64, u64)> = ranges
            .iter()
            .filter(|&&(_, b)| b > 0)
            .map(|&(pa, b)| (pa >> LINE_SHIFT, (pa.saturating_add(b - 1) >> LINE_SHIFT) + 1))
            .collect();
        lines.sort_unstable();
        // Merge overlapping and adjacent ranges (a frame freed and moved again in one batch).
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(lines.len());
        for (first, end) in lines {
            match merged.last_mut() {
                Some(last) if first <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((first, end)),
            }
        }
        let mut removed = 0;
        for c in self.l1.iter_mut().chain(self.l2.iter_mut()).chain(self.llc.iter_mut()) {
            removed += c.invalidate_ranges(&merged);
        }
        self.flushed_lines += removed;
    }

    /// [`MemHierarchy::flush_ranges`]'s pass over every cache for a batch of whole 4 KiB frames
    /// (what migrations and evictions flush): each frame's bit is set in `flush_frames`, every
    /// valid line tests its frame's bit, and the bits are cleared again. A large batch (an epoch
    /// of Utopia's page moves, hundreds of thousands of frames) then costs a few instructions
    /// per frame and per cached line, where sorting it cost a few hundred per frame.
    fn flush_frames(&mut self, ranges: &[(u64, u64)]) {
        let frames = |&(pa, b): &(u64, u64)| (pa >> BASE_SHIFT)..(pa.saturating_add(b) >> BASE_SHIFT);
        let end = ranges.iter().map(|r| frames(r).end).max().unwrap_or(0);
        let words = end.div_ceil(64) as usize;
        if self.flush_frames.len() < words {
            self.flush_frames.resize(words, 0);
        }
        let bits = &mut self.flush_frames;
        for f in ranges.iter().flat_map(frames) {
            bits[(f >> 6) as usize] |= 1 << (f & 63);
        }
        let doomed = |line: u64| {
            let f = line >> (BASE_SHIFT - LINE_SHIFT);
            bits.get((f >> 6) as usize).is_some_and(|w| w >> (f & 63) & 1 != 0)
        };
        let mut removed = 0;
        for c in self.l1.iter_mut().chain(self.l2.iter_mut()).chain(self.llc.iter_mut()) {
            removed += c.invalidate_where(doomed);
        }
        self.flushed_lines += removed;
        for f in ranges.iter().flat_map(frames) {
            bits[(f >> 6) as usize] = 0;
        }
    }

    /// Samples the share of valid lines holding translation structures in L1D, L2 (mean over cores whose
    /// cache holds anything) and the LLC (all slices pooled). Called by the simulator once per epoch; the
    /// stats report the mean over samples. O(cores): the line counts are kept incrementally.
    pub fn sample_epoch(&mut self) {
        fn mean_over_cores(caches: &[Cache]) -> f64 {
            let (mut sum, mut n) = (0.0, 0u32);
            for c in caches.iter().filter(|c| c.valid_lines() > 0) {
                sum += c.translation_lines() as f64 / c.valid_lines() as f64;
                n += 1;
            }
            if n == 0 {
                0.0
            } else {
                sum / f64::from(n)
            }
        }
        let (t, v) = self.llc.iter().fold((0u64, 0u64), |(t, v), c| (t + c.translation_lines(), v + c.valid_lines()));
        self.pt_sum[0] += mean_over_cores(&self.l1);
        self.pt_sum[1] += mean_over_cores(&self.l2);
        self.pt_sum[2] += if v == 0 { 0.0 } else { t as f64 / v as f64 };
        self.samples += 1;
    }

    /// Counters since construction or the last [`MemHierarchy::reset_stats`].
    pub fn stats(&self) -> MemStats {
        fn sum(caches: &[Cache]) -> CacheStats {
            let mut s = CacheStats::default();
            caches.iter().for_each(|c| s.add(&c.stats()));
            s
        }
        let mean = |i: usize| if self.samples == 0 { 0.0 } else { self.pt_sum[i] / self.samples as f64 };
        MemStats {
            l1d: sum(&self.l1),
            l2: sum(&self.l2),
            llc: sum(&self.llc),
            pt_lines_fraction_l1d: mean(0),
            pt_lines_fraction_l2: mean(1),
            pt_lines_fraction_llc: mean(2),
            epoch_samples: self.samples,
            flushed_lines: self.flushed_lines,
            dram: self.dram.stats(),
            prefetch: self.pf.as_ref().map(|p| p.stats),
        }
    }

    /// Zeroes every counter and the epoch samples, keeping cache contents and open DRAM rows (end of
    /// warm-up).
    pub fn reset_stats(&mut self) {
        for c in self.l1.iter_mut().chain(self.l2.iter_mut()).chain(self.llc.iter_mut()) {
            c.reset_stats();
        }
        self.dram.reset_stats();
        self.pt_sum = [0.0; 3];
        self.samples = 0;
        self.flushed_lines = 0;
        if let Some(p) = &mut self.pf {
            p.stats = PrefetchStats::default();
        }
    }
}

/// Asks the host CPU to start loading the cache line holding `r` (a hint: no simulated state
/// changes and no result depends on it). The simulator's hot data structures — page-table nodes
/// and the tag arrays of simulated caches — are far larger than the host's caches, and a random
/// workload misses in them on almost every access; fetching the next access's lines while the
/// current one is simulated hides part of that latency (docs/performance.md). A no-op off x86-64.
#[inline(always)]
pub fn host_prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and reads nothing architecturally; the pointer comes from a
    // live reference anyway. SSE (the instruction's feature) is part of the x86-64 baseline.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((r as *const T).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Utopia's core clock (Table 1), at which the default DRAM costs 52 / 85 / 117 cycles for a row hit /
    /// closed bank / conflict (see dram.rs).
    const GHZ: f64 = 2.6;
    const ROW_HIT: u32 = 52;
    const ROW_CLOSED: u32 = 85;

    fn hierarchy(cores: usize) -> MemHierarchy {
        let cfg = MemConfig::default();
        cfg.validate("mem").unwrap();
        MemHierarchy::new(&cfg, cores, GHZ)
    }

    /// The definition [`MemHierarchy::access`] must equal: every level looked up first, then
    /// filled from the deepest, each fill's victim written back as it is made.
    fn access_by_definition(h: &mut MemHierarchy, core: usize, paddr: u64, translation: bool, write: bool, enter: Level) -> (u32, Level) {
        let line = paddr >> LINE_SHIFT;
        let entry = enter as u8;
        let mut latency = 0;
        let served = 'probe: {
            if entry <= Level::L1 as u8 {
                latency += h.l1[core].latency();
                if h.l1[core].lookup(line, translation, write) {
                    break 'probe Level::L1;
                }
            }
            if entry <= Level::L2 as u8 {
                latency += h.l2[core].latency();
                if h.l2[core].lookup(line, translation, write && enter == Level::L2) {
                    break 'probe Level::L2;
                }
            }
            if entry <= Level::Llc as u8 {
                let slice = h.llc_slice(line);
                latency += h.llc[slice].latency();
                if h.llc[slice].lookup(line, translation, write && enter == Level::Llc) {
                    break 'probe Level::Llc;
                }
            }
            latency += h.dram.access(paddr, translation, write && enter == Level::Dram);
            Level::Dram
        };
        let served_at = served as u8;
        if served_at > Level::Llc as u8 && entry <= Level::Llc as u8 {
            let slice = h.llc_slice(line);
            if let Some(wb) = h.llc[slice].fill(line, translation, write && enter == Level::Llc) {
                h.write_dram(wb);
            }
        }
        if served_at > Level::L2 as u8 && entry <= Level::L2 as u8 {
            if let Some(wb) = h.l2[core].fill(line, translation, write && enter == Level::L2) {
                h.write_llc(wb);
            }
        }
        if served_at > Level::L1 as u8 && entry == Level::L1 as u8 {
            if let Some(wb) = h.l1[core].fill(line, translation, write) {
                h.write_l2(core, wb);
            }
        }
        (latency, served)
    }

    /// Each level looked up and filled in one step, its victim's write-back held until the
    /// levels below are done, answers and leaves every count as the definition does: random
    /// loads, stores and walker references entering at every level, from two cores, over a
    /// footprint that keeps every level evicting (small caches, LRU and SRRIP, one LLC or a
    /// slice per core).
    #[test]
    fn one_step_levels_equal_lookups_then_fills() {
        let small = |size, ways, latency, policy| CacheConfig { size, ways, latency, policy };
        for (llc_per_core, policy) in [(false, Replacement::Lru), (true, Replacement::Srrip)] {
            let cfg = MemConfig {
                l1d: small(2 << 10, 4, 4, Replacement::Lru),
                l2: small(8 << 10, 8, 16, Replacement::Lru),
                llc: small(32 << 10, 16, 35, policy),
                llc_per_core,
                ..MemConfig::default()
            };
            cfg.validate("mem").unwrap();
            let (mut a, mut b) = (MemHierarchy::new(&cfg, 2, GHZ), MemHierarchy::new(&cfg, 2, GHZ));
            let mut rng = crate::rng::Rng::new(11);
            for step in 0..200_000 {
                let core = rng.below(2) as usize;
                let paddr = rng.below(3 << 10) << 6 | rng.below(64);
                let (translation, write) = (rng.below(4) == 0, rng.below(3) == 0);
                let enter = [Level::L1, Level::L1, Level::L2, Level::Llc, Level::Dram][rng.below(5) as usize];
                let want = access_by_definition(&mut b, core, paddr, translation, write, enter);
                assert_eq!(a.access(core, paddr, translation, write, enter), want, "step {step}");
            }
            assert_eq!(a.stats(), b.stats());
            assert!(a.stats().llc.writebacks > 1000, "dirty victims reach the LLC: {:?}", a.stats().llc);
        }
    }

    #[test]
    fn first_access_from_dram_second_from_l1() {
        let mut h = hierarchy(1);
        assert_eq!(h.access(0, 0x1234_5678, false, false, Level::L1), (4 + 16 + 35 + ROW_CLOSED, Level::Dram));
        assert_eq!(h.access(0, 0x1234_5678, false, false, Level::L1), (4, Level::L1));
        // Another byte of the same line is the same line.
        assert_eq!(h.access(0, 0x1234_567f, false, true, Level::L1), (4, Level::L1));
        let s = h.stats();
        assert_eq!((s.l1d.data_accesses, s.l1d.data_hits, s.l1d.data_misses), (3, 2, 1));
        assert_eq!((s.l2.data_accesses, s.l2.data_misses, s.llc.data_misses), (1, 1, 1));
        assert_eq!((s.dram.data_reads, s.dram.data_row_misses), (1, 1));
    }

    #[test]
    fn entering_at_l2_skips_l1() {
        let mut h = hierarchy(1);
        let pa = 0x4000_0000;
        assert_eq!(h.access(0, pa, true, false, Level::L2), (16 + 35 + ROW_CLOSED, Level::Dram));
        assert_eq!(h.access(0, pa, true, false, Level::L2), (16, Level::L2));
        let s = h.stats();
        assert_eq!(s.l1d, CacheStats::default());
        assert_eq!((s.l2.translation_accesses, s.l2.translation_hits), (2, 1));
        assert_eq!(s.dram.translation_reads, 1);
        // The line was not filled into L1 either: a load entering at L1 misses there and hits L2.
        assert_eq!(h.access(0, pa, false, false, Level::L1), (4 + 16, Level::L2));
        assert_eq!(h.access(0, pa, false, false, Level::L1), (4, Level::L1));
        // Entering at the LLC or DRAM.
        assert_eq!(h.access(0, pa, false, false, Level::Llc), (35, Level::Llc));
        assert_eq!(h.access(0, pa + 64, false, false, Level::Dram), (ROW_HIT, Level::Dram));
    }

    #[test]
    fn shared_llc_serves_other_cores() {
        let mut h = hierarchy(2);
        let pa = 0x7_0000;
        h.access(0, pa, false, false, Level::L1);
        assert_eq!(h.access(1, pa, false, false, Level::L1), (4 + 16 + 35, Level::Llc));
        assert_eq!(h.access(0, pa, false, false, Level::L1), (4, Level::L1));
        // Same row as before: the second DRAM read is a row hit.
        assert_eq!(h.access(1, pa + 64, false, false, Level::L1), (4 + 16 + 35 + ROW_HIT, Level::Dram));
    }

    /// One set of two ways at every level (LRU) and one LLC slice: evictions are easy to follow.
    fn one_set() -> MemConfig {
        let tiny = |latency| CacheConfig { size: 128, ways: 2, latency, policy: Replacement::Lru };
        MemConfig {
            l1d: tiny(1),
            l2: tiny(2),
            llc: tiny(3),
            llc_per_core: false,
            dram: DramConfig::default(),
            prefetch: PrefetchConfig::default(),
        }
    }

    #[test]
    fn dirty_lines_travel_down_to_dram() {
        let cfg = one_set();
        cfg.validate("mem").unwrap();
        let mut h = MemHierarchy::new(&cfg, 1, GHZ);
        // Lines A..G are 512 B apart: channel 0, bank 0, row 0 for all, so after the first DRAM access
        // every read and the write-back are row hits.
        let pa = |i: u64| i * 512;
        // Contents after each step (LRU order, oldest first; * = dirty):
        // W A (translation, e.g. a walker setting A/D bits): L1 [A*] L2 [A] LLC [A]
        h.access(0, pa(0), true, true, Level::L1);
        // R B: L1 [A* B] L2 [A B] LLC [A B]
        h.access(0, pa(1), false, false, Level::L1);
        // R C: LLC evicts A (clean) → [B C]; L2 evicts A → [B C]; L1 evicts A* → written into L2, which
        //      evicts B (clean) → L2 [C A*]; L1 [B C]
        h.access(0, pa(2), false, false, Level::L1);
        // R D: LLC [C D]; L2 evicts C → [A* D]; L1 [C D]
        h.access(0, pa(3), false, false, Level::L1);
        // R E: LLC [D E]; L2 evicts A* → written into LLC, which evicts D (clean) → LLC [E A*]; L1 [D E]
        h.access(0, pa(4), false, false, Level::L1);
        // R F: LLC evicts E → [A* F]; L2 [E F]; L1 [E F]
        h.access(0, pa(5), false, false, Level::L1);
        assert_eq!(h.stats().dram.translation_writes, 0);
        // R G: LLC evicts A* → DRAM write (a row hit), not charged to G.
        assert_eq!(h.access(0, pa(6), false, false, Level::L1), (1 + 2 + 3 + ROW_HIT, Level::Dram));
        let s = h.stats();
        assert_eq!((s.l1d.writebacks, s.l2.writebacks, s.llc.writebacks), (1, 1, 1));
        assert_eq!((s.dram.translation_writes, s.dram.data_writes), (1, 0));
        assert_eq!((s.dram.translation_reads, s.dram.data_reads), (1, 6));
        assert_eq!((s.dram.translation_row_hits, s.dram.data_row_hits, s.dram.data_row_misses), (1, 6, 0));
        assert_eq!(s.dram.translation_row_misses, 1);
    }

    #[test]
    fn translation_share_is_sampled_per_epoch() {
        let mut h = hierarchy(2);
        for i in 0..3u64 {
            h.access(0, i << 12, true, false, Level::L1);
        }
        h.access(0, 0x10_0000, false, false, Level::L1);
        h.sample_epoch(); // L1 core 0: 3/4, core 1 empty (ignored); L2 same; LLC 3/4
        for i in 0..4u64 {
            h.access(1, 0x20_0000 + (i << 12), false, false, Level::L1);
        }
        h.sample_epoch(); // L1: (3/4 + 0) / 2; L2 same; LLC 3/8
        let s = h.stats();
        assert_eq!(s.epoch_samples, 2);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(s.pt_lines_fraction_l1d, (0.75 + 0.375) / 2.0), "{}", s.pt_lines_fraction_l1d);
        assert!(close(s.pt_lines_fraction_l2, (0.75 + 0.375) / 2.0));
        assert!(close(s.pt_lines_fraction_llc, (0.75 + 0.375) / 2.0));
        let json = serde_json::to_value(&s).unwrap();
        assert!(json["pt_lines_fraction_llc"].is_f64() && json["dram"]["translation_row_conflicts"].is_u64());
    }

    #[test]
    fn reset_stats_keeps_contents() {
        let mut h = hierarchy(1);
        h.access(0, 0x9000, false, false, Level::L1);
        h.sample_epoch();
        h.reset_stats();
        assert_eq!(h.stats(), MemStats::default());
        assert_eq!(h.access(0, 0x9000, false, false, Level::L1), (4, Level::L1));
        assert_eq!(h.access(0, 0x9040, false, false, Level::L1).0, 4 + 16 + 35 + ROW_HIT, "rows stay open");
        assert_eq!(h.stats().l1d.data_hits, 1);
    }

    #[test]
    fn flush_range_invalidates_every_level() {
        let mut h = hierarchy(2);
        let page = 0x5_0000;
        h.access(0, page, false, true, Level::L1);
        h.access(1, page + 0xfc0, false, false, Level::L1);
        h.access(0, page + 0x1000, false, false, Level::L1); // next page: kept
        h.flush_range(page, 4096);
        // Line 0 in core 0's L1 and L2, line 63 in core 1's L1 and L2, both in the shared LLC: 6 copies.
        assert_eq!(h.stats().flushed_lines, 6);
        assert_eq!(h.access(0, page, false, false, Level::L1).1, Level::Dram);
        assert_eq!(h.access(0, page + 0x1000, false, false, Level::L1), (4, Level::L1));
        // A huge range takes the scanning path and gives the same result.
        h.flush_range(0, 1 << 30);
        assert_eq!(h.access(0, page + 0x1000, false, false, Level::L1).1, Level::Dram);
        h.flush_range(0, 0);
    }

    /// The data reference's entry point (`access_hot`, its L1 re-hit inline) answers and leaves
    /// state exactly as `access` from L1 does, on a mix where most references re-hit the last
    /// line and some write it (the shortcut must set dirty, or a later eviction would differ).
    #[test]
    fn access_hot_equals_access_from_l1() {
        let mut rng = crate::rng::Rng::new(11);
        let cfg = MemConfig::default();
        let (mut a, mut b) = (MemHierarchy::new(&cfg, 2, GHZ), MemHierarchy::new(&cfg, 2, GHZ));
        let mut last = [0u64; 2];
        let mut l1_hits = 0;
        for _ in 0..300_000 {
            let core = rng.below(2) as usize;
            if rng.below(3) == 0 {
                last[core] = rng.below(1 << 20) << 6;
            }
            let (paddr, write, tr) = (last[core] + rng.below(64), rng.below(3) == 0, rng.below(8) == 0);
            let r = a.access_hot(core, paddr, tr, write, 0);
            assert_eq!(r, b.access(core, paddr, tr, write, Level::L1));
            l1_hits += usize::from(r.1 == Level::L1);
        }
        assert!(l1_hits > 180_000, "the mix must exercise the re-hit path ({l1_hits} L1 hits)");
        assert_eq!(a.stats(), b.stats());
        assert!(a.stats().l1d.writebacks > 0 && a.stats().l2.writebacks > 0, "dirty lines must have been written back");
    }

    /// With per-core LLC slices, a page flush probes each line in its own slice only; it must
    /// remove exactly what flushing every slice removes, and leave the same state.
    #[test]
    fn sliced_flush_equals_flushing_every_slice() {
        let cfg = MemConfig { llc_per_core: true, ..MemConfig::default() };
        let mut rng = crate::rng::Rng::new(5);
        let (mut a, mut b) = (MemHierarchy::new(&cfg, 3, GHZ), MemHierarchy::new(&cfg, 3, GHZ));
        assert_eq!(a.llc.len(), 3);
        for _ in 0..20_000 {
            let (core, paddr, write) = (rng.below(3) as usize, rng.below(1 << 16) << 6, rng.below(2) == 0);
            a.access(core, paddr, false, write, Level::L1);
            b.access(core, paddr, false, write, Level::L1);
        }
        let page = 0x20_0000;
        a.flush_range(page, 4096);
        let (first, end) = (page >> LINE_SHIFT, (page + 4096) >> LINE_SHIFT);
        let mut removed = 0;
        for c in b.l1.iter_mut().chain(b.l2.iter_mut()).chain(b.llc.iter_mut()) {
            removed += c.invalidate_range(first, end);
        }
        assert!(removed > 0);
        assert_eq!(a.flushed_lines, removed);
        answer_alike(&mut a, &mut b, (0..1u64 << 16).step_by(7), "");
    }

    /// Reads each of `lines` from both hierarchies (core: the line modulo the cores) and
    /// asserts the same latency and serving level: two hierarchies that answer alike for every
    /// line hold the same lines.
    fn answer_alike(a: &mut MemHierarchy, b: &mut MemHierarchy, lines: impl Iterator<Item = u64>, what: &str) {
        let cores = a.cores() as u64;
        for line in lines {
            let core = (line % cores) as usize;
            assert_eq!(
                a.access(core, line << 6, false, false, Level::L1),
                b.access(core, line << 6, false, false, Level::L1),
                "line {line:#x} {what}"
            );
        }
    }

    /// A batch of flushes large enough to take the one-pass path removes exactly what flushing
    /// the ranges one by one removes, and leaves the same state: batches of whole frames (marked
    /// in a bitmap) and batches with a range that is not (sorted), each twice in a row, so a bit
    /// left set by one batch would remove lines in the next.
    #[test]
    fn batch_flush_equals_flushing_each_range() {
        for (llc_per_core, unaligned) in [(false, false), (true, false), (false, true)] {
            let cfg = MemConfig { llc_per_core, ..MemConfig::default() };
            let mut rng = crate::rng::Rng::new(9);
            let (mut a, mut b) = (MemHierarchy::new(&cfg, 2, GHZ), MemHierarchy::new(&cfg, 2, GHZ));
            for batch in 0..2 {
                for _ in 0..200_000 {
                    let (core, paddr, write, tr) = (rng.below(2) as usize, rng.below(1 << 20) << 6, rng.below(2) == 0, rng.below(4) == 0);
                    a.access(core, paddr, tr, write, Level::L1);
                    b.access(core, paddr, tr, write, Level::L1);
                }
                // Pages, some twice and some adjacent, a 2 MiB range, and an empty one.
                let mut ranges: Vec<(u64, u64)> = (0..3000).map(|_| (rng.below(1 << 14) << 12, 4096)).collect();
                ranges.extend([(0x40_0000, 2 << 20), (0x1000, 0), (ranges[0].0, 4096), (ranges[0].0 + 4096, 8192)]);
                if unaligned {
                    ranges.push((0x7_0040, 200));
                }
                let removed = {
                    let before = b.flushed_lines;
                    for &(pa, bytes) in &ranges {
                        b.flush_range(pa, bytes);
                    }
                    b.flushed_lines - before
                };
                let before = a.flushed_lines;
                a.flush_ranges(&ranges);
                let what = format!("llc_per_core {llc_per_core}, unaligned {unaligned}, batch {batch}");
                assert!(removed > 10_000, "the batch must clear much: {removed}, {what}");
                assert_eq!(a.flushed_lines - before, removed, "{what}");
                assert!(a.flush_frames.iter().all(|&w| w == 0), "frame bits left set, {what}");
                answer_alike(&mut a, &mut b, (0..1u64 << 20).step_by(3), &what);
                assert_eq!(a.stats(), b.stats(), "{what}");
            }
        }
    }

    #[test]
    fn per_core_llc_slices_any_core_count() {
        let cfg = MemConfig { llc: CacheConfig { size: 4096, ways: 2, latency: 35, policy: Replacement::Lru }, ..MemConfig::default() };
        cfg.validate("mem").unwrap();
        let mut h = MemHierarchy::new(&cfg, 3, GHZ);
        assert_eq!(h.llc.len(), 3);
        let mut per_slice = [0u32; 3];
        for line in 0..3000u64 {
            per_slice[h.llc_slice(line)] += 1;
        }
        assert!(per_slice.iter().all(|&n| (900..1100).contains(&n)), "{per_slice:?}");
        // Total LLC capacity is 3 × 64 lines: 150 lines touched by core 0 all fit, so core 1 finds them.
        for line in 0..150u64 {
            h.access(0, line << 6, false, false, Level::L1);
        }
        let hits = (0..150u64).filter(|&l| h.access(1, l << 6, false, false, Level::L1).1 == Level::Llc).count();
        assert!(hits > 120, "{hits}");
        let unsliced = MemConfig { llc_per_core: false, ..cfg };
        assert_eq!(MemHierarchy::new(&unsliced, 3, GHZ).llc.len(), 1);
        assert_eq!(h.cores(), 3);
    }

    #[test]
    fn validation_names_nested_keys() {
        let mut cfg = MemConfig::default();
        cfg.l2.ways = 0;
        let m = cfg.validate("mem").unwrap_err().to_string();
        assert!(m.contains("`mem.l2.ways`") && m.contains("at least 1"), "{m}");
        let mut cfg = MemConfig::default();
        cfg.llc.size = 3 << 20;
        let m = cfg.validate("mem").unwrap_err().to_string();
        assert!(m.contains("`mem.llc.size`") && m.contains("3072 sets is not a power of two"), "{m}");
        let mut cfg = MemConfig::default();
        cfg.dram.banks = 3;
        let m = cfg.validate("mem").unwrap_err().to_string();
        assert!(m.contains("`mem.dram.banks`") && m.contains("power of two"), "{m}");
        let mut cfg = MemConfig::default();
        cfg.l1d.latency = 0;
        assert!(cfg.validate("mem").unwrap_err().to_string().contains("`mem.l1d.latency`"));
    }

    #[test]
    fn config_round_trips_through_toml() {
        let cfg = MemConfig::default();
        let text = toml::to_string(&cfg).unwrap();
        assert!(text.contains("size = \"2M\"") && text.contains("policy = \"srrip\""), "{text}");
        assert_eq!(toml::from_str::<MemConfig>(&text).unwrap(), cfg);
        // Missing keys take defaults; unknown keys are refused.
        let partial: MemConfig = toml::from_str("llc_per_core = false\n[dram]\nchannels = 4").unwrap();
        assert_eq!(partial, MemConfig { llc_per_core: false, dram: DramConfig { channels: 4, ..DramConfig::default() }, ..cfg });
        assert!(toml::from_str::<MemConfig>("l3 = 1").is_err());
        assert!(toml::from_str::<MemConfig>("[l2]\nsize = \"1M\"\nways = 8\nlatency = 9\npolicy = \"lru\"\nsets = 3").is_err());
        assert_eq!(serde_json::to_string(&Level::Llc).unwrap(), "\"llc\"");
    }

    fn with_prefetchers(l1d: PrefetcherKind, l2: PrefetcherKind) -> MemConfig {
        let prefetch = PrefetchConfig {
            l1d: PrefetcherConfig { kind: l1d, ..PrefetcherConfig::default() },
            l2: PrefetcherConfig { kind: l2, ..PrefetcherConfig::default() },
        };
        MemConfig { prefetch, ..MemConfig::default() }
    }

    /// A hierarchy whose prefetchers never fire (stores only: they train on loads) answers every
    /// access and counts every demand event as one without prefetchers: turning the re-hit
    /// shortcut off and tracking prefetch marks changes nothing else.
    #[test]
    fn prefetchers_that_never_fire_change_nothing() {
        let cfg = with_prefetchers(PrefetcherKind::IpStride, PrefetcherKind::Stream);
        let (mut a, mut b) = (MemHierarchy::new(&cfg, 2, GHZ), MemHierarchy::new(&MemConfig::default(), 2, GHZ));
        let mut rng = crate::rng::Rng::new(5);
        for i in 0..200_000u64 {
            let core = rng.below(2) as usize;
            let paddr = if rng.below(2) == 0 { i * 8 } else { rng.below(1 << 30) };
            let tr = rng.below(6) == 0;
            // Stores, and translation references (which never train), reads included.
            let write = !tr || rng.below(2) == 0;
            let ip = rng.below(4);
            assert_eq!(a.access_hot(core, paddr, tr, write, ip), b.access_hot(core, paddr, tr, write, ip), "access {i}");
        }
        let (sa, sb) = (a.stats(), b.stats());
        assert_eq!(sa.prefetch, Some(PrefetchStats::default()));
        assert_eq!(MemStats { prefetch: None, ..sa }, sb);
    }

    /// An IP-stride L1D prefetcher on a sequential load stream: from the third line on, each new
    /// line the stream enters asks for the lines 5 and 6 ahead; they come from DRAM through L2
    /// and the LLC, are marked, and turn the stream's later lines into L1 hits, each counted
    /// useful once. The first accesses, before the stride repeats, miss as without one.
    #[test]
    fn ip_stride_turns_a_load_stream_into_l1_hits() {
        let cfg = with_prefetchers(PrefetcherKind::IpStride, PrefetcherKind::None);
        let (mut on, mut off) = (MemHierarchy::new(&cfg, 1, GHZ), MemHierarchy::new(&MemConfig::default(), 1, GHZ));
        let base = 1 << 30;
        let lines = 64 * 16; // 16 pages of 64 lines, one load per line
        for l in 0..lines {
            let paddr = base + l * 64;
            let (lat_on, _) = on.access_hot(0, paddr, false, false, 0x400);
            let (lat_off, _) = off.access_hot(0, paddr, false, false, 0x400);
            assert!(lat_on <= lat_off, "line {l}: a prefetcher never slows a demand access here");
        }
        let (s_on, s_off) = (on.stats(), off.stats());
        assert_eq!(s_off.l1d.data_hits, 0);
        let p = s_on.prefetch.expect("prefetch counters").l1d;
        // Per page: offsets 2..=57 trigger two prefetches each, 58 one (64 is past the page);
        // the stride across a page boundary (63 → 0) breaks the run, which rebuilds at 2.
        assert!(p.issued > 14 * 50 && p.issued <= p.generated, "{p:?}");
        assert_eq!(p.useful, s_on.l1d.data_hits, "every L1 hit is a first hit on a prefetched line");
        assert!(s_on.l1d.data_hits > lines * 3 / 4, "{:?}", s_on.l1d);
        assert_eq!(p.from_dram, p.issued, "a cold stream's prefetches all come from DRAM");
        assert_eq!(s_on.l1d.data_accesses, s_off.l1d.data_accesses, "prefetches are not demand accesses");
        assert_eq!(s_on.dram.data_reads, s_off.dram.data_reads, "each line is read from DRAM once, by the prefetch or the demand");
        // Stores do not train it.
        let mut st = MemHierarchy::new(&cfg, 1, GHZ);
        for l in 0..256 {
            st.access_hot(0, base + l * 64, false, true, 0x400);
        }
        assert_eq!(st.stats().prefetch.unwrap().l1d.generated, 0);
    }

    /// A stream L2 prefetcher trains on the loads that miss the L1D and fills the L2 (and the LLC
    /// on the way), not the L1D: a sequential stream's later lines hit in the L2.
    #[test]
    fn stream_prefetcher_fills_the_l2() {
        let cfg = with_prefetchers(PrefetcherKind::None, PrefetcherKind::Stream);
        let mut m = MemHierarchy::new(&cfg, 1, GHZ);
        let base = 1 << 30;
        for l in 0..64 * 8 {
            m.access_hot(0, base + l * 64, false, false, 0);
        }
        let s = m.stats();
        let p = s.prefetch.unwrap();
        assert_eq!(p.l1d, PrefetchLevelStats::default());
        assert!(p.l2.issued > 8 * 50, "{p:?}");
        assert_eq!(s.l1d.data_hits, 0, "the L1D gets no prefetched lines");
        assert_eq!(p.l2.useful, s.l2.data_hits);
        assert!(s.l2.data_hits > 8 * 50, "{:?}", s.l2);
        m.reset_stats();
        assert_eq!(m.stats().prefetch, Some(PrefetchStats::default()));
    }
}
