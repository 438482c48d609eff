//! POM-TLB (Ryoo et al., "Rethinking TLB Designs in Virtualized Environments: A Very Large
//! Part-of-Memory TLB", ISCA'17): a very large set-associative TLB kept in main memory, probed
//! after an L2 TLB miss and before the page walk, and cacheable in the data caches.
//!
//! - Geometry (Utopia MICRO'23 Table 1): 64K entries, 16-way, SRRIP. Virtuoso keeps one such
//!   array per page size ("64K entries for 4K and for 2M"), which is the default
//!   (`partitions = "split"`); `"shared"` keeps both sizes in one array.
//! - Placement: each array is one contiguous, naturally aligned region allocated from the buddy
//!   allocator when the first address space is created (the driver object is shared by every
//!   address space, as the in-memory TLB is shared by every process; entries are ASID-tagged).
//!   An entry is `entry_bytes` (16 in the POM-TLB paper: tag, PPN, attributes) and set `s` is the
//!   `ways × entry_bytes` bytes at `base + s × ways × entry_bytes`, i.e. one or more 64-byte lines.
//! - Probe: a walk-plan step reading every line of the probed set, through the data caches
//!   (the references enter where the walker's do, `mmu.walker_entry`). With `probe =
//!   "predicted"` (the POM-TLB paper) a per-core page-size predictor names the partition probed
//!   first; if that set misses, the other partition is probed in the next step, so a
//!   misprediction costs one more serial probe and a miss costs two. With `probe = "parallel"`
//!   (Virtuoso, Utopia's artifact) every partition is read in one step, which waits for the
//!   partition that hits, or for all of them on a miss.
//! - Walk: with `walk = "after_miss"` (the paper, Virtuoso, Utopia's artifact) the x86 radix walk
//!   ([`Radix`], wrapped, not copied) follows the probe's last step; with `"parallel"` it starts
//!   with the probe, and whichever answers first is used (a hit cancels the rest of the walk).
//! - Fill: a walked 4 KiB or 2 MiB translation is filled into its partition. With `fill =
//!   "write"` the entry's line is written through the caches (write-allocate) as a walk-plan
//!   reference after the walk that the walk does not wait for; `"untimed"` fills the array
//!   only (Virtuoso). 1 GiB translations are not cached.
//! - Coherence: the POM-TLB is a TLB, so the OS's TLB shootdown invalidates it
//!   ([`MemoryTlb::shootdown`]); checked mode compares every POM-TLB hit with the OS's truth.

use super::nested::{Guest, HostConfig, Nested, NestedConfig};
use super::radix::{Radix, RadixConfig};
use super::{ArchConfig, Design, Registered};
use crate::addr::PageSize;
use crate::error::{Error, Result};
use crate::mem::assoc::{check_ways, Replacement, SetAssoc};
use crate::tapi::{Driver, MemoryTlb, NoSharedTlb, SharedTlb, TObj, Tdb, TdbEnv, Translation, WalkPlan};

/// The walker behind a POM-TLB: x86 radix natively, or a 2-D walk of a radix guest on any host
/// (POM-TLB's own setting: its entries cache guest-virtual → host-physical translations, so a hit
/// skips the whole 2-D walk).
pub trait PomWalker: Driver {
    /// Runs `f` with the memory the POM-TLB's arrays live in: the OS's own (`env`) natively; the
    /// hypervisor's physical memory for a guest (the arrays are addressed host-physically and
    /// never translated by the host).
    fn with_array_memory<R>(&mut self, env: &mut TdbEnv, f: impl FnOnce(&mut TdbEnv) -> R) -> R {
        f(env)
    }
}

impl PomWalker for Radix {}

/// POM-TLB's own nesting (`pomtlb@host`): the in-memory TLB in front of a radix guest's 2-D walks
/// on host driver `H`.
pub struct PomTlbGuest;

impl Guest for PomTlbGuest {
    type On<H: Registered> = PomTlb<Nested<Radix, H>>;
    fn build<H: Registered>(arch: &ArchConfig, host: &HostConfig, guest_memory: u64, seed: u64) -> Result<PomTlb<Nested<Radix, H>>> {
        PomTlb::from_config(&(arch.pomtlb.clone(), NestedConfig::new(arch, host, guest_memory)), seed)
    }
}

impl<H: Driver> PomWalker for Nested<Radix, H> {
    fn with_array_memory<R>(&mut self, _env: &mut TdbEnv, f: impl FnOnce(&mut TdbEnv) -> R) -> R {
        let host = &mut self.host;
        f(&mut TdbEnv { phys: &mut host.phys, cost: &mut host.cost })
    }
}

/// How the POM-TLB holds the two page sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Partitions {
    /// One array per page size (4 KiB and 2 MiB), each of `entries` entries (Virtuoso).
    Split,
    /// One array of `entries` entries holding both sizes (a 2 MiB entry indexed by its 2 MiB VPN).
    Shared,
}

/// Which partitions a probe reads, and in what order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeOrder {
    /// The page-size predictor names the partition read first; the other follows on a miss.
    Predicted,
    /// Every partition in one step (Virtuoso's `mmu_pomtlb.cc`, Utopia's artifact).
    Parallel,
}

/// When the page walk starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WalkStart {
    /// After the POM-TLB missed in every partition.
    AfterMiss,
    /// With the probe; a POM-TLB hit cancels the walk steps not yet issued.
    Parallel,
}

/// How a fill reaches memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FillTiming {
    /// The entry's line is written through the caches, after the walk, off its critical path.
    Write,
    /// Only the array changes; no memory reference (Virtuoso).
    Untimed,
}

/// Which lines of a set a probe reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SetRead {
    /// Every line of the set (`ways × entry_bytes` bytes): the tags of all ways are compared.
    All,
    /// Only the set's first 64-byte line, whatever the associativity (Utopia's artifact, which
    /// keeps a 16-way array but reads one line per probe).
    FirstLine,
}

/// Where in memory the line a probe reads (and a fill writes) lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeAddress {
    /// The addressed set's own line(s) in the array (the POM-TLB paper, Virtuoso).
    Set,
    /// Utopia's artifact (the Sniper tree of CMU-SAFARI/Victima, `tlb.cc`): the probe runs in the
    /// L2 TLB's object, so its address is computed with the L2 TLB's geometry, `(VPN mod
    /// artifact_entries) × artifact_ways × entry_bytes` from the array's base, rounded down to a
    /// line. With Utopia's 1536-entry 12-way L2 TLB every probe falls on one of 1536 lines
    /// (96 KiB), which stay in the L2 cache; whether it hits is still decided by the whole array.
    L2TlbGeometry,
}

/// POM-TLB configuration (`[arch.pomtlb]`; the walk that follows a miss uses `[arch.radix]`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PomTlbConfig {
    /// Entries per array (Utopia Table 1: 64K; Virtuoso: 64K for 4K and for 2M).
    pub entries: u32,
    /// Associativity (Utopia Table 1: 16-way; Virtuoso and the POM-TLB paper: 4-way).
    pub ways: u32,
    /// Replacement (Utopia Table 1: SRRIP).
    pub replacement: Replacement,
    /// Split per page size or shared.
    pub partitions: Partitions,
    /// Bytes per entry (POM-TLB paper: 16, four entries per 64-byte line).
    pub entry_bytes: u32,
    /// Fixed cycles added to each probe step besides its memory references (0: the probe costs
    /// what its cached memory reference costs, as in Virtuoso).
    pub latency: u32,
    /// Probe order (POM-TLB paper: `"predicted"`, its page-size predictor; Virtuoso and Utopia's
    /// artifact: `"parallel"`).
    pub probe: ProbeOrder,
    /// Page-size predictor entries, 2-bit counters indexed by the 2 MiB virtual region (512:
    /// our choice, 128 bytes per core; see docs/baselines.md).
    pub predictor_entries: u32,
    /// When the walk starts (POM-TLB paper, Virtuoso, Utopia's artifact: `"after_miss"`).
    pub walk: WalkStart,
    /// Lines a probe reads (`"all"`: a set is `ways × entry_bytes` bytes; Utopia's artifact:
    /// `"first_line"`).
    pub set_read: SetRead,
    /// How a fill reaches memory (`"write"`: the POM-TLB is ordinary cacheable memory, so the
    /// filled entry is a store to its line; Virtuoso: `"untimed"`).
    pub fill: FillTiming,
    /// Where a probed or filled line lies (`"set"`: in the addressed set; Utopia's artifact:
    /// `"l2_tlb_geometry"`).
    pub probe_address: ProbeAddress,
    /// With `probe_address = "l2_tlb_geometry"`: the entries and ways of the L2 TLB whose
    /// geometry the artifact uses (Utopia Table 1: 1536 entries).
    pub artifact_entries: u32,
    /// With `probe_address = "l2_tlb_geometry"`: that L2 TLB's ways (Utopia Table 1: 12).
    pub artifact_ways: u32,
}

impl Default for PomTlbConfig {
    fn default() -> Self {
        PomTlbConfig {
            entries: 65536,
            ways: 16,
            replacement: Replacement::Srrip,
            partitions: Partitions::Split,
            entry_bytes: 16,
            latency: 0,
            probe: ProbeOrder::Predicted,
            predictor_entries: 512,
            walk: WalkStart::AfterMiss,
            set_read: SetRead::All,
            fill: FillTiming::Write,
            probe_address: ProbeAddress::Set,
            artifact_entries: 1536,
            artifact_ways: 12,
        }
    }
}

impl PomTlbConfig {
    /// Checks the geometry.
    pub fn validate(&self, key: &str) -> Result<()> {
        if self.ways == 0 {
            return Err(Error::config(format!("{key}.ways"), "must be at least 1"));
        }
        check_ways(&format!("{key}.ways"), u64::from(self.ways))?;
        if self.entries == 0 || !self.entries.is_multiple_of(self.ways) || !(self.entries / self.ways).is_power_of_two() {
            return Err(Error::config(
                format!("{key}.entries"),
                format!("must be a positive multiple of ways ({}) giving a power-of-two number of sets", self.ways),
            ));
        }
        if !(4..=64).contains(&self.entry_bytes) || !self.entry_bytes.is_power_of_two() {
            return Err(Error::config(format!("{key}.entry_bytes"), "must be a power of two between 4 and 64"));
        }
        if self.predictor_entries == 0 || !self.predictor_entries.is_power_of_two() {
            return Err(Error::config(format!("{key}.predictor_entries"), "must be a power of two"));
        }
        if self.artifact_entries == 0 {
            return Err(Error::config(format!("{key}.artifact_entries"), "must be at least 1"));
        }
        if self.artifact_ways == 0 {
            return Err(Error::config(format!("{key}.artifact_ways"), "must be at least 1"));
        }
        // The folded addresses must stay inside the array they alias.
        let span = u64::from(self.artifact_entries) * u64::from(self.artifact_ways) * u64::from(self.entry_bytes);
        if self.probe_address == ProbeAddress::L2TlbGeometry && span > u64::from(self.entries) * u64::from(self.entry_bytes) {
            return Err(Error::config(
                format!("{key}.artifact_entries"),
                format!(
                    "artifact_entries x artifact_ways x entry_bytes ({span} bytes) must fit in the array ({} bytes)",
                    u64::from(self.entries) * u64::from(self.entry_bytes)
                ),
            ));
        }
        Ok(())
    }
}

/// Tag of a translation: VPN of its size, size bit, ASID.
#[inline(always)]
fn tag(asid: u16, va: u64, size: PageSize) -> u64 {
    let huge = u64::from(size != PageSize::K4);
    ((va >> size.shift()) << 17) | (huge << 16) | asid as u64
}

/// One in-memory set-associative array.
pub struct PomArray {
    arr: SetAssoc,
    /// Physical base of each entry's page, per slot.
    pbase: Vec<u64>,
    mask: u64,
    set_bytes: u64,
    entry_bytes: u64,
    lines: u64,
    bytes: u64,
    /// Physical base of the array (set once memory is allocated).
    base: u64,
    order: u32,
}

impl PomArray {
    /// An array of `entries` entries of `entry_bytes` bytes, `ways`-way.
    pub fn new(entries: u32, ways: u32, entry_bytes: u32, policy: Replacement) -> PomArray {
        let sets = (entries / ways) as usize;
        let set_bytes = u64::from(ways) * u64::from(entry_bytes);
        let bytes = u64::from(entries) * u64::from(entry_bytes);
        let pages = bytes.div_ceil(4096).max(1);
        PomArray {
            arr: SetAssoc::new(sets, ways as usize, policy),
            pbase: vec![0; entries as usize],
            mask: sets as u64 - 1,
            set_bytes,
            entry_bytes: u64::from(entry_bytes),
            lines: set_bytes.div_ceil(64),
            bytes,
            base: 0,
            order: pages.next_power_of_two().trailing_zeros(),
        }
    }

    /// Set index of `va` for a translation of `size`.
    #[inline(always)]
    pub fn set_of(&self, va: u64, size: PageSize) -> usize {
        ((va >> size.shift()) & self.mask) as usize
    }

    /// Physical address of the first byte of `set`.
    #[inline(always)]
    pub fn set_addr(&self, set: usize) -> u64 {
        self.base + set as u64 * self.set_bytes
    }

    /// Looks a translation of `size` up (a hit updates replacement state).
    #[inline]
    pub fn lookup(&mut self, asid: u16, va: u64, size: PageSize) -> Option<u64> {
        let set = self.set_of(va, size);
        let w = self.arr.lookup(set, tag(asid, va, size))?;
        Some(self.pbase[self.arr.slot(set, w)])
    }

    /// Fills a translation, which must be absent (the walk that found it follows a probe of
    /// both sizes that missed); returns the physical address of the line holding its entry and
    /// whether a valid entry was evicted.
    pub fn fill(&mut self, asid: u16, va: u64, t: Translation) -> (u64, bool) {
        let set = self.set_of(va, t.size);
        let tg = tag(asid, va, t.size);
        debug_assert!(self.arr.probe(set, tg).is_none(), "POM-TLB filled twice with {va:#x}");
        let (w, evicted) = self.arr.insert(set, tg);
        let slot = self.arr.slot(set, w);
        self.pbase[slot] = t.pbase;
        let line = self.set_addr(set) + ((w as u64 * self.entry_bytes) & !63);
        (line, evicted.is_some())
    }

    /// Invalidates the entries of `asid` for pages of `size` starting in `[start, end)`; returns
    /// (sets or entries read, entries invalidated).
    pub fn invalidate(&mut self, asid: u16, start: u64, end: u64, size: PageSize) -> (u64, u64) {
        let lo = start >> size.shift();
        let hi = end.saturating_sub(1) >> size.shift();
        if end <= start {
            return (0, 0);
        }
        let slots = self.pbase.len() as u64;
        if hi - lo < slots / self.arr.ways() as u64 {
            // Probe each page's set.
            let mut n = 0;
            for vpn in lo..=hi {
                let va = vpn << size.shift();
                if self.arr.invalidate(self.set_of(va, size), tag(asid, va, size)) {
                    n += 1;
                }
            }
            (hi - lo + 1, n)
        } else {
            // A large range: scan the whole array once.
            let huge = u64::from(size != PageSize::K4);
            let n =
                self.arr.invalidate_if(|t| (t & 0xffff) as u16 == asid && (t >> 16) & 1 == huge && (lo..=hi).contains(&(t >> 17))) as u64;
            (slots, n)
        }
    }

    /// Drops every entry of `asid`.
    pub fn invalidate_asid(&mut self, asid: u16) -> u64 {
        self.arr.invalidate_if(|t| (t & 0xffff) as u16 == asid) as u64
    }
}

/// The page-size predictor of one core: 2-bit saturating counters indexed by the 2 MiB
/// virtual region, trained with the size each translation turned out to have; a counter of 2 or
/// more predicts a 2 MiB page.
pub struct SizePredictor {
    counters: Vec<u8>,
    mask: u64,
}

impl SizePredictor {
    /// `entries` counters (a power of two), all predicting 4 KiB.
    pub fn new(entries: u32) -> SizePredictor {
        SizePredictor { counters: vec![0; entries as usize], mask: u64::from(entries) - 1 }
    }

    #[inline(always)]
    fn index(&self, va: u64) -> usize {
        ((va >> PageSize::M2.shift()) & self.mask) as usize
    }

    /// The page size predicted for `va`.
    #[inline]
    pub fn predict(&self, va: u64) -> PageSize {
        if self.counters[self.index(va)] >= 2 {
            PageSize::M2
        } else {
            PageSize::K4
        }
    }

    /// Trains the counter of `va` with the size its translation has.
    #[inline]
    pub fn train(&mut self, va: u64, size: PageSize) {
        let i = self.index(va);
        let c = &mut self.counters[i];
        *c = if size == PageSize::K4 { c.saturating_sub(1) } else { (*c + 1).min(3) };
    }
}

/// One core's POM-TLB walk state: the walker's caches (radix PWCs) and the page-size predictor.
pub struct PomWalkCache<W: Driver = Radix> {
    walker: W::WalkCache,
    /// The page-size predictor.
    pub predictor: SizePredictor,
}

/// POM-TLB counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PomStats {
    /// Probes (one per L2 TLB miss that reached the walker).
    pub probes: u64,
    /// Probes that hit, 4 KiB / 2 MiB.
    pub hits: [u64; 2],
    /// Probes that read a second partition after the predicted one missed.
    pub second_probes: u64,
    /// Page-size predictions checked against the translation found (hit or walk).
    pub predictions: u64,
    /// Predictions of the wrong size.
    pub mispredictions: u64,
    /// Radix walks after a POM-TLB miss.
    pub page_walks: u64,
    /// Translations filled.
    pub fills: u64,
    /// Fills written to memory (`fill = "write"`).
    pub fill_writes: u64,
    /// Fills that evicted a valid entry.
    pub evictions: u64,
    /// Entries invalidated by shootdowns.
    pub invalidations: u64,
    /// Whole-array flushes: the walker's translations changed generation (a host remap under a
    /// guest: every entry may depend on it).
    pub flushes: u64,
}

/// The POM-TLB driver: the in-memory TLB in front of an x86 radix page table (natively), or of a
/// radix guest's 2-D walk (`pomtlb@host`).
pub struct PomTlb<W: Driver = Radix> {
    walker: W,
    cfg: PomTlbConfig,
    /// Arrays: `[4K, 2M]` when split, `[both]` when shared.
    arrays: Vec<PomArray>,
    spaces: u32,
    /// The walker's [`Driver::generation`] the arrays are coherent with.
    generation: u64,
    /// Counters.
    pub stats: PomStats,
}

/// One address space: its page table (the POM-TLB itself is shared).
pub struct PomTlbSpace<W: Driver = Radix> {
    walker: W::Space,
}

/// The other partition's page size.
#[inline(always)]
fn other(size: PageSize) -> PageSize {
    if size == PageSize::K4 {
        PageSize::M2
    } else {
        PageSize::K4
    }
}

impl PomTlb {
    /// A driver with the given POM-TLB geometry and radix table.
    pub fn new(cfg: &PomTlbConfig, radix: &RadixConfig) -> PomTlb {
        PomTlb::with_walker(cfg, Radix::new(radix))
    }
}

impl<W: PomWalker> PomTlb<W> {
    /// A POM-TLB of geometry `cfg` in front of `walker`.
    pub fn with_walker(cfg: &PomTlbConfig, walker: W) -> PomTlb<W> {
        let n = match cfg.partitions {
            Partitions::Split => 2,
            Partitions::Shared => 1,
        };
        let arrays = (0..n).map(|_| PomArray::new(cfg.entries, cfg.ways, cfg.entry_bytes, cfg.replacement)).collect();
        let generation = walker.generation().unwrap_or(0);
        PomTlb { walker, cfg: cfg.clone(), arrays, spaces: 0, generation, stats: PomStats::default() }
    }

    /// The walker.
    pub fn walker(&self) -> &W {
        &self.walker
    }

    /// Index of the array holding translations of `size`.
    #[inline(always)]
    fn array_for(&self, size: PageSize) -> usize {
        if self.arrays.len() == 1 || size == PageSize::K4 {
            0
        } else {
            1
        }
    }

    /// Bytes of memory the POM-TLB occupies.
    pub fn bytes(&self) -> u64 {
        self.arrays.iter().map(|a| a.bytes).sum()
    }

    /// Appends the reads of the set `va` maps to in the partition of `size` to `plan`.
    #[inline]
    fn read_set(&self, va: u64, size: PageSize, step: u8, needed: bool, plan: &mut WalkPlan) {
        let arr = &self.arrays[self.array_for(size)];
        let base = match self.cfg.probe_address {
            ProbeAddress::Set => arr.set_addr(arr.set_of(va, size)),
            ProbeAddress::L2TlbGeometry => self.artifact_line(va, size),
        };
        let lines = if self.cfg.set_read == SetRead::All { arr.lines } else { 1 };
        plan.push_lines(base, lines as usize, step, needed);
        plan.unfiltered += lines as u32;
    }

    /// The line Utopia's artifact reads for `va`'s translation of `size`
    /// (`probe_address = "l2_tlb_geometry"`): one base for both sizes, as there.
    #[inline]
    fn artifact_line(&self, va: u64, size: PageSize) -> u64 {
        let c = &self.cfg;
        let entry = (va >> size.shift()) % u64::from(c.artifact_entries) * u64::from(c.artifact_ways);
        self.arrays[0].base + ((entry * u64::from(c.entry_bytes)) & !63)
    }

    /// Looks `va` up in the partition of `size` (a hit updates replacement state and counts).
    #[inline]
    fn lookup(&mut self, asid: u16, va: u64, size: PageSize) -> Option<Translation> {
        let a = self.array_for(size);
        let pbase = self.arrays[a].lookup(asid, va, size)?;
        self.stats.hits[(size != PageSize::K4) as usize] += 1;
        Some(Translation { pbase, size })
    }

    /// Probes the POM-TLB for `va`, reading the predicted partition first (`first`) or every
    /// partition at once (`None`): appends the set reads to `plan`, one step per serial probe
    /// from step 0, and returns the hit and the number of steps.
    fn probe(&mut self, asid: u16, va: u64, first: Option<PageSize>, plan: &mut WalkPlan) -> (Option<Translation>, u8) {
        self.stats.probes += 1;
        match first {
            None => {
                let hit = self.lookup(asid, va, PageSize::K4).or_else(|| self.lookup(asid, va, PageSize::M2));
                plan.fixed_cycles += self.cfg.latency;
                for size in [PageSize::K4, PageSize::M2] {
                    self.read_set(va, size, 0, hit.is_none_or(|t| t.size == size), plan);
                }
                (hit, 1)
            }
            Some(size) => {
                for (step, size) in [size, other(size)].into_iter().enumerate() {
                    if step == 1 {
                        self.stats.second_probes += 1;
                    }
                    plan.fixed_cycles += self.cfg.latency;
                    self.read_set(va, size, step as u8, true, plan);
                    if let Some(t) = self.lookup(asid, va, size) {
                        return (Some(t), step as u8 + 1);
                    }
                }
                (None, 2)
            }
        }
    }

    /// Fills a walked translation of `va` into its partition and, with `fill = "write"`, appends
    /// the store to its line after the walk's last step.
    fn fill(&mut self, asid: u16, va: u64, t: Translation, plan: &mut WalkPlan) {
        if t.size != PageSize::K4 && t.size != PageSize::M2 {
            return;
        }
        let a = self.array_for(t.size);
        let (line, evicted) = self.arrays[a].fill(asid, va, t);
        let line = match self.cfg.probe_address {
            ProbeAddress::Set => line,
            ProbeAddress::L2TlbGeometry => self.artifact_line(va, t.size),
        };
        self.stats.fills += 1;
        self.stats.evictions += evicted as u64;
        if self.cfg.fill == FillTiming::Write {
            let step = plan.refs.last().map_or(0, |r| r.step.saturating_add(1));
            plan.push_write(line, step);
            self.stats.fill_writes += 1;
        }
    }
}

impl<W: PomWalker> Tdb for PomTlb<W> {
    type Space = PomTlbSpace<W>;

    fn create_space(&mut self, asid: u16, env: &mut TdbEnv) -> Result<PomTlbSpace<W>> {
        if self.spaces == 0 {
            let arrays = &mut self.arrays;
            self.walker.with_array_memory(env, |env| -> Result<()> {
                for a in arrays.iter_mut() {
                    a.base = env.alloc_table(a.order)?.addr();
                }
                Ok(())
            })?;
        }
        self.spaces += 1;
        Ok(PomTlbSpace { walker: self.walker.create_space(asid, env)? })
    }

    fn destroy_space(&mut self, s: PomTlbSpace<W>, env: &mut TdbEnv) -> Result<()> {
        self.walker.destroy_space(s.walker, env)?;
        self.spaces -= 1;
        if self.spaces == 0 {
            let arrays = &mut self.arrays;
            self.walker.with_array_memory(env, |env| -> Result<()> {
                for a in arrays.iter_mut() {
                    a.arr.clear();
                    env.free_table(crate::addr::Pfn::containing(a.base), a.order)?;
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    fn find(&mut self, s: &mut PomTlbSpace<W>, va: u64, env: &mut TdbEnv) -> Option<TObj> {
        self.walker.find(&mut s.walker, va, env)
    }

    fn update(&mut self, s: &mut PomTlbSpace<W>, o: &TObj, env: &mut TdbEnv) -> Result<()> {
        self.walker.update(&mut s.walker, o, env)
    }

    fn remove(&mut self, s: &mut PomTlbSpace<W>, va: u64, size: PageSize, env: &mut TdbEnv) -> Option<TObj> {
        self.walker.remove(&mut s.walker, va, size, env)
    }

    fn for_each(&mut self, s: &mut PomTlbSpace<W>, start: u64, end: u64, env: &mut TdbEnv, f: &mut dyn FnMut(&TObj)) {
        self.walker.for_each(&mut s.walker, start, end, env, f)
    }

    fn range_is_empty(&mut self, s: &mut PomTlbSpace<W>, start: u64, end: u64, env: &mut TdbEnv) -> bool {
        self.walker.range_is_empty(&mut s.walker, start, end, env)
    }

    fn map_range(&mut self, s: &mut PomTlbSpace<W>, first: &TObj, len: u64, env: &mut TdbEnv) -> Result<()> {
        self.walker.map_range(&mut s.walker, first, len, env)
    }

    fn table_bytes(&self, s: &PomTlbSpace<W>) -> u64 {
        // The shared POM-TLB is reported on its own (`pomtlb_bytes`), not per address space.
        self.walker.table_bytes(&s.walker)
    }

    fn take_stale_walk_caches(&mut self, out: &mut Vec<(u64, u64)>) {
        self.walker.take_stale_walk_caches(out)
    }

    fn take_stale_translations(&mut self, out: &mut Vec<(u64, u64)>) {
        self.walker.take_stale_translations(out)
    }
}

impl Registered for PomTlb {
    type Section = PomTlbConfig;
    const DESIGNS: &'static [Design] = &[Design {
        name: "pomtlb",
        description: "POM-TLB: 64K-entry 16-way SRRIP in-memory L3 TLB per page size, predicted size probed first, before the radix4 walk (4 KiB pages)",
        driver: "pomtlb",
        arch: |a| a.radix.levels = 4,
        settings: &["os.thp=never"],
        nested: None,
    }];

    fn validate(s: &PomTlbConfig, key: &str) -> Result<()> {
        s.validate(key)
    }

    /// Its own section and the page table's (`arch.radix`).
    fn config(arch: &ArchConfig) -> (PomTlbConfig, RadixConfig) {
        (arch.pomtlb.clone(), arch.radix.clone())
    }
}

impl<W: PomWalker> MemoryTlb<PomTlb<W>> for PomTlb<W> {
    fn shootdown(&mut self, _s: &mut PomTlbSpace<W>, asid: u16, start: u64, end: u64, env: &mut TdbEnv) {
        for size in [PageSize::K4, PageSize::M2] {
            let a = self.array_for(size);
            let (read, inv) = self.arrays[a].invalidate(asid, size.align_down(start), end, size);
            env.cost.read(read);
            env.cost.write(inv);
            self.stats.invalidations += inv;
        }
    }
}

/// What a POM-TLB in front of walker `W` is built from: its own section and the walker's.
pub type PomTlbOf<W> = (PomTlbConfig, <W as Driver>::Config);

impl<W: PomWalker> Driver for PomTlb<W> {
    type Config = PomTlbOf<W>;
    type WalkCache = PomWalkCache<W>;

    fn from_config((pomtlb, walker): &PomTlbOf<W>, seed: u64) -> Result<Self> {
        Ok(PomTlb::with_walker(pomtlb, W::from_config(walker, seed)?))
    }

    #[inline(always)]
    fn memory_tlb(&mut self) -> Option<&mut dyn MemoryTlb<Self>> {
        Some(self)
    }

    fn new_walk_cache(&self) -> PomWalkCache<W> {
        PomWalkCache { walker: self.walker.new_walk_cache(), predictor: SizePredictor::new(self.cfg.predictor_entries) }
    }

    #[inline]
    fn walk(&mut self, s: &mut PomTlbSpace<W>, wc: &mut PomWalkCache<W>, asid: u16, va: u64, plan: &mut WalkPlan) -> Option<Translation> {
        self.walk_beside(s, wc, &mut NoSharedTlb, asid, va, plan)
    }

    /// The probe, then (on a miss) the walker's walk, with the core's L2 TLB passed on to it.
    #[inline]
    fn walk_beside<T: SharedTlb>(
        &mut self,
        s: &mut PomTlbSpace<W>,
        wc: &mut PomWalkCache<W>,
        l2: &mut T,
        asid: u16,
        va: u64,
        plan: &mut WalkPlan,
    ) -> Option<Translation> {
        // Under a guest, a host remap may change any entry's host-physical frame: the arrays are
        // flushed as the VM's TLBs are (docs/virtualization.md).
        if let Some(g) = self.walker.generation() {
            if g != self.generation {
                self.generation = g;
                self.stats.flushes += 1;
                self.arrays.iter_mut().for_each(|a| a.arr.clear());
            }
        }
        let first = (self.cfg.probe == ProbeOrder::Predicted).then(|| wc.predictor.predict(va));
        let (n0, f0) = (plan.refs.len(), plan.fixed_cycles);
        let (hit, steps) = self.probe(asid, va, first, plan);
        let (n1, f1) = (plan.refs.len(), plan.fixed_cycles);
        let r = match (self.cfg.walk, hit) {
            (WalkStart::AfterMiss, Some(t)) => Some(t),
            (WalkStart::AfterMiss, None) => {
                // The walk follows the probe's last step.
                self.stats.page_walks += 1;
                let r = self.walker.walk_beside(&mut s.walker, &mut wc.walker, l2, asid, va, plan);
                for x in &mut plan.refs[n1..] {
                    x.step += steps;
                }
                r
            }
            (WalkStart::Parallel, hit) => {
                // The walk's steps run beside the probe's from step 0.
                let r = self.walker.walk_beside(&mut s.walker, &mut wc.walker, l2, asid, va, plan);
                if hit.is_some() {
                    // The hit cancels the walk: its steps after the probe's are never issued and
                    // the ones issued are not waited for, nor are its walk-cache lookups.
                    let issued = plan.refs[n1..].iter().take_while(|x| x.step < steps).count();
                    plan.refs.truncate(n1 + issued);
                    plan.refs[n1..].iter_mut().for_each(|x| x.needed = false);
                    plan.fixed_cycles = f1;
                } else {
                    // The walk answers; the probe is off the critical path.
                    self.stats.page_walks += 1;
                    plan.refs[n0..n1].iter_mut().for_each(|x| x.needed = false);
                    plan.fixed_cycles -= f1 - f0;
                }
                plan.refs[n0..].sort_by_key(|x| x.step);
                hit.or(r)
            }
        };
        if let (Some(p), Some(t)) = (first, r) {
            self.stats.predictions += 1;
            self.stats.mispredictions += u64::from((p == PageSize::K4) != (t.size == PageSize::K4));
            wc.predictor.train(va, t.size);
        }
        if let (None, Some(t)) = (hit, r) {
            self.fill(asid, va, t, plan);
        }
        r
    }

    /// The host memory of the sets the probe searches (each size's), then the walker's prefetch
    /// for the walk that follows a miss (its entry is returned).
    #[inline]
    fn prefetch(&self, s: &PomTlbSpace<W>, va: u64) -> Option<u64> {
        for size in [PageSize::K4, PageSize::M2] {
            let arr = &self.arrays[self.array_for(size)];
            arr.arr.prefetch(arr.set_of(va, size));
        }
        self.walker.prefetch(&s.walker, va)
    }

    // A nested walker's later prefetch stages (`pomtlb@host`): the walk after a miss is its walk.
    const PREFETCHES_FRAME: bool = W::PREFETCHES_FRAME;

    #[inline]
    fn prefetch_frame(&self, pa: u64) -> Option<u64> {
        self.walker.prefetch_frame(pa)
    }

    const HINTS_FRAME: bool = W::HINTS_FRAME;

    #[inline]
    fn frame_hint(&self, s: &PomTlbSpace<W>, va: u64) -> Option<u64> {
        self.walker.frame_hint(&s.walker, va)
    }

    const PREFETCHES_LATE: bool = W::PREFETCHES_LATE;

    #[inline]
    fn prefetch_late(&self, s: &PomTlbSpace<W>, va: u64) {
        self.walker.prefetch_late(&s.walker, va)
    }

    fn invalidate_walk_cache(&self, wc: &mut PomWalkCache<W>, asid: u16, start: u64, end: u64) {
        self.walker.invalidate_walk_cache(&mut wc.walker, asid, start, end)
    }

    fn leaf_sizes(&self) -> &[PageSize] {
        self.walker.leaf_sizes()
    }

    fn user_va_limit(&self) -> u64 {
        self.walker.user_va_limit()
    }

    fn can_map(&self, va: u64, size: PageSize) -> Result<(), &'static str> {
        self.walker.can_map(va, size)
    }

    fn machine_translation(&self, va: u64, t: Translation) -> Option<Translation> {
        self.walker.machine_translation(va, t)
    }

    fn tick(&mut self, now_ms: f64, now_cycles: f64) -> Result<()> {
        self.walker.tick(now_ms, now_cycles)
    }

    #[inline(always)]
    fn generation(&self) -> Option<u64> {
        self.walker.generation()
    }

    fn translations_by_size(&self) -> Option<[u64; PageSize::COUNT]> {
        self.walker.translations_by_size()
    }

    fn restart_metrics(&mut self) {
        self.stats = PomStats::default();
        self.walker.restart_metrics();
    }

    fn metrics(&self) -> serde_json::Map<String, serde_json::Value> {
        let st = &self.stats;
        let hits = st.hits[0] + st.hits[1];
        let mut m = serde_json::Map::new();
        m.insert("pomtlb_bytes".into(), self.bytes().into());
        m.insert("pomtlb_probes".into(), st.probes.into());
        m.insert("pomtlb_hits".into(), hits.into());
        m.insert("pomtlb_hits_4k".into(), st.hits[0].into());
        m.insert("pomtlb_hits_2m".into(), st.hits[1].into());
        m.insert("pomtlb_hit_rate".into(), (if st.probes == 0 { 0.0 } else { hits as f64 / st.probes as f64 }).into());
        m.insert("pomtlb_second_probes".into(), st.second_probes.into());
        if self.cfg.probe == ProbeOrder::Predicted {
            m.insert("pomtlb_predictions".into(), st.predictions.into());
            m.insert("pomtlb_mispredictions".into(), st.mispredictions.into());
            let acc = if st.predictions == 0 { 1.0 } else { 1.0 - st.mispredictions as f64 / st.predictions as f64 };
            m.insert("pomtlb_predictor_accuracy".into(), acc.into());
        }
        m.insert("pomtlb_page_walks".into(), st.page_walks.into());
        m.insert("pomtlb_fills".into(), st.fills.into());
        m.insert("pomtlb_fill_writes".into(), st.fill_writes.into());
        m.insert("pomtlb_evictions".into(), st.evictions.into());
        m.insert("pomtlb_invalidations".into(), st.invalidations.into());
        // The walker's own metrics (a guest's 2-D walks), if it has any.
        let walker = self.walker.metrics();
        if !walker.is_empty() {
            m.insert("pomtlb_flushes".into(), st.flushes.into());
            m.extend(walker);
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::radix::RadixConfig;
    use crate::mem::{MemConfig, MemHierarchy};
    use crate::mmu::{time_walk, WalkStats, WalkerEntry};
    use crate::os::phys::PhysMem;
    use crate::tapi::{prot, OsCost};

    fn t4(pbase: u64) -> Translation {
        Translation { pbase, size: PageSize::K4 }
    }

    #[test]
    fn set_indexing_and_srrip_on_a_hand_made_sequence() {
        // 4 sets × 2 ways: VPNs 0, 4, 8, 12 all map to set 0; VPN 1 to set 1; 2 MiB VPNs by their own bits.
        let mut a = PomArray::new(8, 2, 16, Replacement::Srrip);
        a.base = 0x10_0000;
        assert_eq!(a.set_of(0x1000, PageSize::K4), 1);
        assert_eq!(a.set_of(0x4000, PageSize::K4), 0);
        assert_eq!(a.set_of(0x60_0000, PageSize::M2), 3);
        assert_eq!(a.set_addr(3), 0x10_0000 + 3 * 32);
        assert_eq!(a.lines, 1);
        let va = |vpn: u64| vpn << 12;
        // fill A(0), B(4): RRPV [2 2]; hit A: [0 2]; fill C(8) ages to [1 3] and evicts B: [1 2].
        assert!(!a.fill(1, va(0), t4(0xa000)).1);
        assert!(!a.fill(1, va(4), t4(0xb000)).1);
        assert_eq!(a.lookup(1, va(0), PageSize::K4), Some(0xa000));
        assert!(a.fill(1, va(8), t4(0xc000)).1);
        assert_eq!(a.lookup(1, va(4), PageSize::K4), None, "B was the SRRIP victim");
        assert_eq!(a.lookup(1, va(0), PageSize::K4), Some(0xa000));
        // The hit on A makes [0 2]; fill D(12) ages to [1 3] and evicts C, not the reused A.
        assert!(a.fill(1, va(12), t4(0xd000)).1);
        assert_eq!(a.lookup(1, va(8), PageSize::K4), None);
        assert_eq!(a.lookup(1, va(0), PageSize::K4), Some(0xa000));
        // ASIDs and sizes are part of the tag; other sets are untouched.
        assert_eq!(a.lookup(2, va(0), PageSize::K4), None);
        assert!(!a.fill(1, va(1), t4(0x1000)).1);
        assert_eq!(a.lookup(1, va(1), PageSize::K4), Some(0x1000));
        // Shootdown of [0, 16K) for ASID 1 drops A (vpn 0) and the vpn-1 entry, not D (vpn 12).
        assert_eq!(a.invalidate(1, 0, 0x4000, PageSize::K4).1, 2);
        assert_eq!(a.lookup(1, va(0), PageSize::K4), None);
        assert_eq!(a.lookup(1, va(12), PageSize::K4), Some(0xd000));
        // A range larger than the array is invalidated by one scan.
        assert_eq!(a.invalidate(1, 0, 1 << 30, PageSize::K4), (8, 1));
    }

    /// A driver with `cfg` and one address space of ASID 1 mapping the 4 KiB page `A` and the
    /// 2 MiB page `H`.
    struct Rig {
        d: PomTlb,
        s: PomTlbSpace,
        wc: PomWalkCache,
        mem: MemHierarchy,
        stats: WalkStats,
        phys: PhysMem,
    }

    /// The 4 KiB page (2 MiB region 0x91: predictor counter 145) and the 2 MiB page (region 0x200:
    /// counter 0); both lie under PML4 entry 0, in PDPT entries 0 and 1 (one 64-byte line).
    const A: u64 = 0x1234_5000;
    const H: u64 = 0x4000_0000;
    /// A reference served by DRAM: L1 (4) + L2 (16) + LLC (35) lookups + fixed DRAM latency (100).
    const M: u32 = 4 + 16 + 35 + 100;
    /// A reference served by the L1 D-cache.
    const H1: u32 = 4;
    /// The PWC lookup that starts every radix walk (Utopia Table 1: 2 cycles).
    const P: u32 = 2;

    fn rig(cfg: PomTlbConfig) -> Rig {
        let mut d = PomTlb::new(&cfg, &RadixConfig::default());
        let mut phys = PhysMem::new(1 << 30, 14);
        let mut cost = OsCost::default();
        let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
        let mut s = d.create_space(1, &mut env).unwrap();
        d.update(&mut s, &TObj::new(A, 0x8000, PageSize::K4, prot::RW), &mut env).unwrap();
        d.update(&mut s, &TObj::new(H, 0x2000_0000, PageSize::M2, prot::RW), &mut env).unwrap();
        let wc = d.new_walk_cache();
        let mut mc = MemConfig::default();
        mc.dram.fixed_cycles = 100;
        Rig { d, s, wc, mem: MemHierarchy::new(&mc, 1, 2.6), stats: WalkStats::default(), phys }
    }

    impl Rig {
        /// Maps the 4 KiB page at `va` to `pa` (its tables from the rig's memory).
        fn map(&mut self, va: u64, pa: u64) {
            let mut env = TdbEnv { phys: &mut self.phys, cost: &mut OsCost::default() };
            self.d.update(&mut self.s, &TObj::new(va, pa, PageSize::K4, prot::RW), &mut env).unwrap();
        }

        /// Walks `va` (as after an L2 TLB miss) and times the plan through the caches: the
        /// translation's physical address, the latency and the plan.
        fn walk(&mut self, va: u64) -> (u64, u32, WalkPlan) {
            let mut plan = WalkPlan::default();
            let t = self.d.walk(&mut self.s, &mut self.wc, 1, va, &mut plan).unwrap();
            let lat = time_walk(&plan, &mut self.mem, 0, WalkerEntry::L1, &mut self.stats);
            (t.paddr(va), lat, plan)
        }
    }

    /// Probe and walk ordering, timed by hand through the default caches with a flat 100-cycle
    /// DRAM. Every POM-TLB set is 16 ways × 16 B = 4 lines read in one step.
    #[test]
    fn predicted_probe_then_walk_timeline() {
        let mut r = rig(PomTlbConfig::default());
        // Cold miss of A: the predicted (4 KiB) set, then the 2 MiB set, then the 4-level walk
        // with the PWC lookup, then the fill's store to A's line, which the walk does not wait for.
        let (pa, lat, plan) = r.walk(A + 0x678);
        assert_eq!(pa, 0x8678);
        assert_eq!(lat, M + M + P + 4 * M);
        let steps: Vec<(u8, bool, bool)> = plan.refs.iter().map(|x| (x.step, x.needed, x.write)).collect();
        let mut want = vec![(0, true, false); 4];
        want.extend([(1, true, false); 4]);
        want.extend((2..6).map(|s| (s, true, false)));
        want.push((6, false, true));
        assert_eq!(steps, want);
        let fill = plan.refs[12].paddr;
        assert!((plan.refs[0].paddr..plan.refs[0].paddr + 256).contains(&fill), "the store goes to a line of A's set");
        // Hit: the 4 KiB set alone, from the L1 D-cache (read by the probe, written by the fill).
        let (pa, lat, plan) = r.walk(A);
        assert_eq!((pa, lat, plan.refs.len()), (0x8000, H1, 4));
        // H is mispredicted (its counter says 4 KiB) and misses: two probes then the walk, whose
        // PML4E comes from the PWC, PDPTE from the L1 (A's walk read that line), PDE from DRAM.
        let (pa, lat, _) = r.walk(H + 0x1234);
        assert_eq!(pa, 0x2000_1234);
        assert_eq!(lat, M + M + P + H1 + M);
        // Still mispredicted (counter 1 of 3): the 4 KiB set of this VPN (cold), then the 2 MiB set
        // (cached), which hits. A misprediction costs one more serial probe.
        let (pa, lat, plan) = r.walk(H + 0x5000);
        assert_eq!((pa, lat), (0x2000_5000, M + H1));
        assert_eq!(plan.refs.iter().map(|x| x.step).max(), Some(1));
        // Counter 2: predicted 2 MiB, the first probe hits.
        let (_, lat, plan) = r.walk(H + 0x9000);
        assert_eq!((lat, plan.refs.len()), (H1, 4));
        let st = &r.d.stats;
        assert_eq!((st.probes, st.hits, st.second_probes, st.page_walks), (5, [1, 2], 3, 2));
        assert_eq!((st.predictions, st.mispredictions, st.fills, st.fill_writes), (5, 2, 2, 2));
        assert_eq!(r.d.metrics()["pomtlb_predictor_accuracy"], 0.6);
    }

    /// Virtuoso's and Utopia's artifact's parallel probe: both sets in one step.
    #[test]
    fn parallel_probe_timeline() {
        let mut r = rig(PomTlbConfig { probe: ProbeOrder::Parallel, ..PomTlbConfig::default() });
        let (_, lat, plan) = r.walk(A);
        assert_eq!(lat, M + P + 4 * M, "one probe step, then the walk");
        assert_eq!(plan.refs.iter().filter(|x| x.step == 0).count(), 8);
        // A hit waits only for the partition that holds the entry.
        let (_, lat, plan) = r.walk(A);
        assert_eq!(lat, H1);
        assert_eq!(plan.refs.iter().filter(|x| x.needed).count(), 4);
        assert!(!r.d.metrics().contains_key("pomtlb_predictor_accuracy"), "no predictor");
    }

    /// A walk started with the probe: a miss costs the walk alone, a hit the probe alone, and
    /// the hit cancels the walk's later steps.
    #[test]
    fn parallel_walk_timeline() {
        let mut r = rig(PomTlbConfig { walk: WalkStart::Parallel, ..PomTlbConfig::default() });
        let (_, lat, plan) = r.walk(A);
        assert_eq!(lat, P + 4 * M, "the probes ride beside the walk's first two steps");
        assert!(plan.refs.windows(2).all(|w| w[0].step <= w[1].step));
        assert_eq!(plan.refs.iter().filter(|x| x.needed).count(), 4, "only the walk is waited for");
        // The hit answers after step 0; the walk (now a PDE-PWC hit and one PTE read) issued its
        // step-0 reference beside it, not waited for, and no more.
        let (pa, lat, plan) = r.walk(A + 8);
        assert_eq!((pa, lat), (0x8008, H1));
        assert_eq!(plan.refs.len(), 5);
        assert_eq!(plan.refs.iter().filter(|x| !x.needed).count(), 1);
        assert_eq!(r.d.stats.page_walks, 1);
    }

    /// `fill = "untimed"` fills the array without a memory reference; `set_read = "first_line"`
    /// reads one line per probed set.
    #[test]
    fn untimed_fill_and_first_line_reads() {
        let mut r = rig(PomTlbConfig { fill: FillTiming::Untimed, set_read: SetRead::FirstLine, ..PomTlbConfig::default() });
        let (_, lat, plan) = r.walk(A);
        assert_eq!(lat, M + M + P + 4 * M);
        assert_eq!(plan.refs.len(), 1 + 1 + 4, "one line per probe, no store");
        assert_eq!((r.d.stats.fills, r.d.stats.fill_writes), (1, 0));
        assert_eq!(r.walk(A).1, H1);
    }

    /// `probe_address = "l2_tlb_geometry"` reads, for both sizes, the line Utopia's artifact
    /// computes from the L2 TLB's geometry: pages 1536 apart share it, whatever their sets; the
    /// hit is still the array's, and a fill writes that same line.
    #[test]
    fn artifact_probe_address_folds_onto_the_l2_tlbs_geometry() {
        let cfg = PomTlbConfig { probe: ProbeOrder::Parallel, probe_address: ProbeAddress::L2TlbGeometry, ..PomTlbConfig::default() };
        let mut r = rig(cfg.clone());
        let base = r.d.arrays[0].base;
        let line = |va: u64, size: PageSize| base + (((va >> size.shift()) % 1536 * 12 * 16) & !63);
        let (_, _, plan) = r.walk(A);
        // Both partitions' first lines in step 0 (4 lines each: set_read = "all"), then the walk
        // and the fill store.
        assert_eq!(plan.refs[0].paddr, line(A, PageSize::K4));
        assert_eq!(plan.refs[4].paddr, line(A, PageSize::M2));
        assert_eq!(plan.refs.last().unwrap().paddr, line(A, PageSize::K4), "the fill writes the folded line");
        assert!(plan.refs[..8].iter().all(|r| r.paddr < base + (1536 * 12 * 16)), "all inside the folded span");
        // The hit is decided by the array: A hits now.
        assert_eq!(r.walk(A).2.refs.len(), 8, "a hit: the two probes only");
        assert_eq!(r.d.stats.hits[0], 1);
        // A page 1536 pages further on, in another set, probes the same line as A and misses
        // there: the driver's own plan, not the formula above.
        let far = A + 1536 * 4096;
        assert_ne!(r.d.arrays[0].set_of(A, PageSize::K4), r.d.arrays[0].set_of(far, PageSize::K4));
        r.map(far, 0x7_0000);
        let (pa, _, plan) = r.walk(far);
        assert_eq!(pa, 0x7_0000);
        assert_eq!(plan.refs[0].paddr, line(A, PageSize::K4), "the folded line of a page 1536 pages away");
        assert!(plan.refs.len() > 8, "a miss: the table walk follows the probes");
        assert_eq!(r.d.stats.hits[0], 1, "no hit for the aliasing page");
        // The folded span must fit in the array.
        let small = PomTlbConfig { entries: 1024, ..cfg };
        assert!(small.validate("arch.pomtlb").unwrap_err().to_string().contains("arch.pomtlb.artifact_entries"));
    }

    #[test]
    fn shootdown_invalidates_and_sets_lie_in_the_allocated_region() {
        let cfg = PomTlbConfig::default();
        let mut d = PomTlb::new(&cfg, &RadixConfig::default());
        let mut phys = PhysMem::new(1 << 30, 14);
        let mut cost = OsCost::default();
        let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
        let mut s = d.create_space(1, &mut env).unwrap();
        assert_eq!(d.bytes(), 2 << 20, "64K × 16 B per partition, two partitions");
        d.update(&mut s, &TObj::new(0x1234_5000, 0x8000, PageSize::K4, prot::RW), &mut env).unwrap();
        let mut wc = d.new_walk_cache();
        let mut plan = WalkPlan::default();
        let t = d.walk(&mut s, &mut wc, 1, 0x1234_5678, &mut plan).unwrap();
        plan.clear();
        assert_eq!(d.walk(&mut s, &mut wc, 1, 0x1234_5000, &mut plan).unwrap(), t);
        assert_eq!((d.stats.probes, d.stats.hits[0], d.stats.page_walks), (2, 1, 1));
        // The shootdown invalidates the in-memory entry: the next walk goes to the table again.
        d.remove(&mut s, 0x1234_5000, PageSize::K4, &mut env).unwrap();
        d.shootdown(&mut s, 1, 0x1234_5000, 0x1234_6000, &mut env);
        d.invalidate_walk_cache(&mut wc, 1, 0x1234_5000, 0x1234_6000);
        assert_eq!(d.stats.invalidations, 1);
        plan.clear();
        assert!(d.walk(&mut s, &mut wc, 1, 0x1234_5000, &mut plan).is_none());
        // The set addresses lie in the region allocated for the POM-TLB.
        let base = d.arrays[0].base;
        assert!(plan.refs[0].paddr >= base && plan.refs[0].paddr < base + (1 << 20));
    }
}
