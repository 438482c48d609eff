//! DIPTA (Picorel, Jevdjic, Falsafi, "Near-Memory Address Translation", PACT'17), as SPARTA
//! (seed `003_64f431eae0496108.txt`, §1, §2, §7.7) compares against it: *set-associative virtual
//! memory*. Physical memory is a set-associative cache of virtual pages: a virtual page may only
//! occupy one of the W frames of its set, so translating it is finding which way holds it.
//!
//! - **Physical organisation** ([`FramePlacement::boot`]): (nearly) all of memory is reserved at
//!   boot as the set-associative region. Memory splits into `partitions` equal contiguous ranges
//!   (the layout of `mem::topology`: one per channel, no interleaving), and every set keeps its W
//!   frames side by side in one partition, so a set is looked up, and its data fetched, next to
//!   one memory controller. Set `s` lives in partition `s mod partitions`, at local index
//!   `s / partitions` there: consecutive virtual pages spread over the partitions as channel
//!   interleaving would spread them. A slice at the top of each partition (1/64, and at least
//!   64 MiB over all) stays with the buddy allocator for whatever the OS allocates itself.
//! - **Set index**: VPN mod sets (the simplest function of the VA the hardware can route by;
//!   `index_asid` adds a multiplicative hash of the ASID so processes with one layout do not all
//!   land in the same sets). The partition of a VA is the partition of its set.
//! - **Translation database**: one tag array shared by every address space (the hardware table;
//!   each slot empty or (ASID, VPN, protection, accessed, dirty)), held by the driver object. A
//!   frame holds at most one virtual page, so there are no synonyms: a shared mapping or a frame
//!   mapped twice is refused with an error, and copy-on-write cannot be expressed (SPARTA §5,
//!   §7.7).
//! - **Placement** ([`FramePlacement::place`]): a free way of the page's set; in a full set the
//!   victim of a per-set CLOCK over the accessed bits (which the hardware table sets when a lookup
//!   finds the page), which the OS swaps out (`EvictTo::Swap`: there is nowhere else to put it).
//! - **Walk** ([`Driver::walk`]): the partition's table probe: by default SPARTA §7.7's
//!   idealized DRAM-based table — one DRAM read of the set's tags, stored with the set (in its
//!   first line: no capacity taken from data, as §7.7 assumes) — or, with `table = "sram"`,
//!   `table_cycles` and no memory reference.
//! - **Memory side** ([`MemorySide`]): requests are routed by the VA's set to its partition, whose
//!   way predictor names the frame to fetch from while the table is probed
//!   ([`MemoryTranslation::PredictedFrame`]). The predictor is ours (PACT'17's differs in detail):
//!   a tagless table per partition of `predictor_entries` entries, indexed by a hash of (ASID,
//!   VPN), each holding the last way seen there.
//!
//! See docs/dipta.md for the parameters' sources and what is simplified.

use super::{ArchConfig, Design, Registered};
use crate::addr::{PageSize, Pfn};
use crate::error::{Error, Result};
use crate::rng::mix64;
use crate::tapi::{Driver, Evict, EvictTo, FramePlacement, Frames, MapFlags, MemorySide, MemoryTranslation, Placement};
use crate::tapi::{TObj, Tdb, TdbEnv, Translation, WalkPlan};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// DIPTA configuration (`[arch.dipta]`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiptaConfig {
    /// Ways per set: the frames a virtual page may occupy (PACT'17 and SPARTA §7.7 study 4 and
    /// 16; §7.7: 4 suffice for single programs, a multi-programmed mix needs 16).
    pub ways: u32,
    /// Memory partitions, each with its own table and way predictor: one per channel of SPARTA
    /// §7.5's machine (8 sockets × 4 channels = 32).
    pub partitions: u32,
    /// Way-predictor entries per partition, a power of two (4096: an assumption; PACT'17's
    /// predictor is organised differently and SPARTA states no size).
    pub predictor_entries: u32,
    /// Cycles of one probe of a partition's hardware table (10: an assumption; SPARTA §7.7 cannot
    /// estimate a 256 MiB SRAM's latency and assumes an idealized DRAM-based table with no DRAM
    /// overhead).
    pub table_cycles: u32,
    /// Mix the ASID into the set index (false: VPN mod sets, so processes with the same layout
    /// compete for the same sets, as a VA-indexed table makes them).
    pub index_asid: bool,
    /// Where the table lives: `"dram"` (SPARTA §7.7's idealized DRAM-based DIPTA: a probe is a
    /// DRAM read in the set's partition) or `"sram"` (`table_cycles` per probe).
    pub table: DiptaTable,
}

/// Where DIPTA's table lives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiptaTable {
    /// In DRAM beside the data (3D-stacked; §7.7's idealized variant, the default).
    #[default]
    Dram,
    /// In SRAM (`table_cycles` per probe; §7.7: 256 MB of it for 128 GB).
    Sram,
}

impl Default for DiptaConfig {
    fn default() -> Self {
        DiptaConfig { ways: 4, partitions: 32, predictor_entries: 4096, table_cycles: 10, index_asid: false, table: DiptaTable::Dram }
    }
}

impl DiptaConfig {
    /// Checks every key; errors name `key.field`.
    pub fn validate(&self, key: &str) -> Result<()> {
        if self.ways == 0 || self.ways > MAX_WAYS {
            return Err(Error::config(format!("{key}.ways"), format!("must be between 1 and {MAX_WAYS} (got {})", self.ways)));
        }
        if self.partitions == 0 || self.partitions > 4096 {
            return Err(Error::config(format!("{key}.partitions"), format!("must be between 1 and 4096 (got {})", self.partitions)));
        }
        if !self.predictor_entries.is_power_of_two() || self.predictor_entries > 1 << 24 {
            return Err(Error::config(
                format!("{key}.predictor_entries"),
                format!("must be a power of two between 1 and 16M (got {})", self.predictor_entries),
            ));
        }
        if self.table_cycles > 10_000 {
            return Err(Error::config(format!("{key}.table_cycles"), format!("must be at most 10000 (got {})", self.table_cycles)));
        }
        Ok(())
    }
}

/// The most ways a set may have (a way number fits the predictor's byte).
const MAX_WAYS: u32 = 64;

/// Bytes of the hardware table per frame: SPARTA §7.7 finds 256 MiB of SRAM for 128 GiB, 2 MiB
/// per GiB, i.e. 8 bytes per 4 KiB frame.
pub const ENTRY_BYTES: u64 = 8;

/// Virtual-address bits a tag holds (x86-64 5-level paging); a VA above is never mapped.
const VA_BITS: u32 = 57;

/// Memory left to the buddy allocator: 1/`SLACK_DIVISOR` of each partition, and at least
/// `MIN_SLACK_BYTES` over all partitions.
const SLACK_DIVISOR: u64 = 64;
const MIN_SLACK_BYTES: u64 = 64 << 20;

/// A slot's valid bit (bits 0–15 ASID, 16–60 VPN).
const VALID: u64 = 1 << 63;

/// Slot metadata bits: protection (bits 0–2, [`crate::tapi::prot`]), accessed, dirty.
const PROT_MASK: u8 = 0x7;
const ACCESSED: u8 = 0x8;
const DIRTY: u8 = 0x10;

const K4_SHIFT: u32 = 12;

/// A slot's tag: (VPN, ASID) with the valid bit.
#[inline(always)]
fn tag(asid: u16, vpn: u64) -> u64 {
    VALID | (vpn << 16) | asid as u64
}

/// (ASID, VPN) of a valid tag.
#[inline(always)]
fn untag(t: u64) -> (u16, u64) {
    ((t & 0xffff) as u16, (t & !VALID) >> 16)
}

/// One address space: the table is the driver's; a space knows its ASID and how many pages it
/// holds.
pub struct DiptaSpace {
    asid: u16,
    pages: u64,
}

impl DiptaSpace {
    /// Pages of this space in the table.
    pub fn pages(&self) -> u64 {
        self.pages
    }
}

/// DIPTA counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiptaStats {
    /// Frames handed out by `place` (free ways and victims' frames).
    pub placements: u64,
    /// Placements into a full set: its CLOCK victim was swapped out.
    pub conflict_evictions: u64,
    /// Accessed bits the CLOCK cleared while looking for victims.
    pub clock_clears: u64,
    /// Table lookups by the hardware ([`Driver::walk`]).
    pub walks: u64,
    /// Lookups that found the page.
    pub walk_hits: u64,
    /// Way predictions made ([`MemorySide::predict`]).
    pub predictions: u64,
    /// Translations the predictors were trained with ([`MemorySide::train`]).
    pub trainings: u64,
    /// Trainings whose entry already named the true way (the prediction was right).
    pub correct: u64,
    /// Shared mappings refused.
    pub shared_refused: u64,
    /// Frames holding a page now.
    pub occupied: u64,
}

/// The DIPTA driver: the set-associative region, its tag array, the per-set CLOCK hands and the
/// way predictors, shared by every address space.
pub struct Dipta {
    cfg: DiptaConfig,
    ways: u64,
    parts: u64,
    /// Frames per partition (its contiguous slice of memory); 0 before boot.
    slice: u64,
    /// Frames of each partition in the region (`sets_per_part × ways`, from the slice's start).
    chunk: u64,
    sets: u64,
    /// Per slot (`set × ways + way`): [`tag`] or 0 (empty). Zeroed, so untouched sets cost the
    /// host nothing.
    tags: Vec<u64>,
    /// Per slot: protection, accessed, dirty.
    meta: Vec<u8>,
    /// Per set: the CLOCK hand.
    hands: Vec<u8>,
    /// Per partition × entry: the last way seen.
    predictor: Vec<u8>,
    /// Live address spaces (the shared table is reported under the lowest one).
    live: BTreeSet<u16>,
    /// The shared page `place` refused to place, so `update` can say why it refuses its frame.
    shared_pending: Option<(u16, u64)>,
    /// Counters.
    pub stats: DiptaStats,
}

impl Dipta {
    /// A driver for a validated `cfg`; the region is carved at boot.
    pub fn new(cfg: &DiptaConfig) -> Dipta {
        Dipta {
            cfg: cfg.clone(),
            ways: cfg.ways as u64,
            parts: cfg.partitions as u64,
            slice: 0,
            chunk: 0,
            sets: 0,
            tags: Vec::new(),
            meta: Vec::new(),
            hands: Vec::new(),
            predictor: Vec::new(),
            live: BTreeSet::new(),
            shared_pending: None,
            stats: DiptaStats::default(),
        }
    }

    /// Sets in all (0 before boot).
    pub fn sets(&self) -> u64 {
        self.sets
    }

    /// Bytes of each partition's contiguous slice of physical memory (0 before boot).
    pub fn partition_bytes(&self) -> u64 {
        self.slice << K4_SHIFT
    }

    /// Frames of the set-associative region.
    pub fn frames(&self) -> u64 {
        self.sets * self.ways
    }

    /// Bytes of the hardware table: [`ENTRY_BYTES`] per frame of the region.
    pub fn hardware_table_bytes(&self) -> u64 {
        self.frames() * ENTRY_BYTES
    }

    /// The set of page `vpn` of `asid` (booted).
    #[inline(always)]
    pub fn set_of(&self, asid: u16, vpn: u64) -> u64 {
        let off = if self.cfg.index_asid { (asid as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) } else { 0 };
        vpn.wrapping_add(off) % self.sets
    }

    /// Physical address of way `way` of set `set`.
    #[inline(always)]
    pub fn frame_pa(&self, set: u64, way: u64) -> u64 {
        let (part, local) = (set % self.parts, set / self.parts);
        (part * self.slice + local * self.ways + way) << K4_SHIFT
    }

    /// (set, way) of the frame containing `pa`, if it lies in the region.
    #[inline(always)]
    pub fn slot_of_frame(&self, pa: u64) -> Option<(u64, u64)> {
        if self.slice == 0 {
            return None;
        }
        let pfn = pa >> K4_SHIFT;
        let part = pfn / self.slice;
        let off = pfn % self.slice;
        if part >= self.parts || off >= self.chunk {
            return None;
        }
        Some(((off / self.ways) * self.parts + part, off % self.ways))
    }

    /// The way of `set` holding `t` (uncounted: callers count the read).
    #[inline]
    fn way_of(&self, set: u64, t: u64) -> Option<u64> {
        let base = (set * self.ways) as usize;
        self.tags[base..base + self.ways as usize].iter().position(|&x| x == t).map(|w| w as u64)
    }

    /// (set, way) of page `va` of `asid`, if mapped; counts a hash and a read of the set's ways.
    fn lookup(&self, asid: u16, va: u64, env: &mut TdbEnv) -> Option<(u64, u64)> {
        if self.sets == 0 || va >> VA_BITS != 0 {
            return None;
        }
        let vpn = va >> K4_SHIFT;
        let set = self.set_of(asid, vpn);
        env.cost.hash(1);
        env.cost.read(self.ways);
        self.way_of(set, tag(asid, vpn)).map(|w| (set, w))
    }

    /// The translation object in slot (`set`, `way`).
    fn obj(&self, set: u64, way: u64) -> TObj {
        let slot = (set * self.ways + way) as usize;
        let (_, vpn) = untag(self.tags[slot]);
        let m = self.meta[slot];
        TObj {
            va: vpn << K4_SHIFT,
            pa: self.frame_pa(set, way),
            size: PageSize::K4,
            prot: m & PROT_MASK,
            accessed: m & ACCESSED != 0,
            dirty: m & DIRTY != 0,
        }
    }

    /// Empties slot (`set`, `way`).
    fn clear(&mut self, set: u64, way: u64) {
        let slot = (set * self.ways + way) as usize;
        self.tags[slot] = 0;
        self.meta[slot] = 0;
        self.stats.occupied -= 1;
    }

    /// The CLOCK victim of the full set `set`: the first way from the hand whose accessed bit is
    /// clear, clearing the bits it passes (second chance). Returns the way and the bits cleared.
    fn clock_victim(&mut self, set: u64) -> (u64, u64) {
        let base = (set * self.ways) as usize;
        let mut hand = self.hands[set as usize] as u64;
        let mut cleared = 0;
        loop {
            let slot = base + hand as usize;
            if self.meta[slot] & ACCESSED == 0 {
                self.hands[set as usize] = ((hand + 1) % self.ways) as u8;
                return (hand, cleared);
            }
            self.meta[slot] &= !ACCESSED;
            cleared += 1;
            hand = (hand + 1) % self.ways;
        }
    }

    /// Index into [`Dipta::predictor`] of page `vpn` of `asid`, in the predictor of `part`.
    #[inline(always)]
    fn predictor_index(&self, part: u64, asid: u16, vpn: u64) -> usize {
        let h = mix64(vpn ^ ((asid as u64) << 48)) & (self.cfg.predictor_entries as u64 - 1);
        (part * self.cfg.predictor_entries as u64 + h) as usize
    }
}

impl Tdb for Dipta {
    type Space = DiptaSpace;

    fn create_space(&mut self, asid: u16, _env: &mut TdbEnv) -> Result<DiptaSpace> {
        self.live.insert(asid);
        Ok(DiptaSpace { asid, pages: 0 })
    }

    /// Empties every slot of the space (the OS knows its pages; one read and write each).
    fn destroy_space(&mut self, s: DiptaSpace, env: &mut TdbEnv) -> Result<()> {
        self.live.remove(&s.asid);
        if s.pages == 0 {
            return Ok(());
        }
        let mut n = 0;
        for slot in 0..self.tags.len() {
            let t = self.tags[slot];
            if t != 0 && untag(t).0 == s.asid {
                self.tags[slot] = 0;
                self.meta[slot] = 0;
                n += 1;
            }
        }
        self.stats.occupied -= n;
        env.cost.read(n);
        env.cost.write(n);
        Ok(())
    }

    fn find(&mut self, s: &mut DiptaSpace, va: u64, env: &mut TdbEnv) -> Option<TObj> {
        self.lookup(s.asid, va, env).map(|(set, way)| self.obj(set, way))
    }

    /// Maps a 4 KiB page to a frame of its own set. Refuses any other frame, a frame that holds
    /// another page (a synonym) and a shared page's frame.
    fn update(&mut self, s: &mut DiptaSpace, o: &TObj, env: &mut TdbEnv) -> Result<()> {
        let asid = s.asid;
        let shared = self.shared_pending.take() == Some((asid, o.va));
        if o.size != PageSize::K4 || !o.size.is_aligned(o.va) || !o.size.is_aligned(o.pa) || o.va >> VA_BITS != 0 {
            return Err(Error::Check(format!(
                "DIPTA maps aligned 4K pages of {VA_BITS}-bit VAs; got a {} page va {:#x} pa {:#x}",
                o.size, o.va, o.pa
            )));
        }
        let Some((fset, way)) = self.slot_of_frame(o.pa) else {
            if shared {
                return Err(Error::Unsupported(format!(
                    "ASID {asid} page {:#x} is in a shared mapping: DIPTA has no synonyms or copy-on-write (its hardware table \
                     holds one virtual page per frame; SPARTA §5, §7.7), so shared memory cannot be mapped",
                    o.va
                )));
            }
            return Err(Error::Check(format!("frame {:#x} for {:#x} is outside DIPTA's set-associative memory", o.pa, o.va)));
        };
        let vpn = o.va >> K4_SHIFT;
        let set = self.set_of(asid, vpn);
        env.cost.hash(1);
        env.cost.read(self.ways);
        if fset != set {
            return Err(Error::Check(format!(
                "frame {:#x} is in set {fset}, but ASID {asid} page {:#x} indexes set {set}: a page may only occupy a way of its own set",
                o.pa, o.va
            )));
        }
        let t = tag(asid, vpn);
        let slot = (set * self.ways + way) as usize;
        let cur = self.tags[slot];
        if cur != t && cur != 0 {
            let (a, v) = untag(cur);
            return Err(Error::Unsupported(format!(
                "frame {:#x} already holds ASID {a} page {:#x}; mapping ASID {asid} page {:#x} to it too would be a synonym, and \
                 DIPTA has no synonyms or copy-on-write (its hardware table holds one virtual page per frame; SPARTA §5, §7.7)",
                o.pa,
                v << K4_SHIFT,
                o.va
            )));
        }
        if cur == 0 {
            // The page may sit in another way of its set: it moves.
            if let Some(w) = self.way_of(set, t) {
                self.clear(set, w);
                env.cost.write(1);
            } else {
                s.pages += 1;
            }
            self.tags[slot] = t;
            self.stats.occupied += 1;
        }
        self.meta[slot] = (o.prot & PROT_MASK) | if o.accessed { ACCESSED } else { 0 } | if o.dirty { DIRTY } else { 0 };
        env.cost.write(1);
        Ok(())
    }

    fn remove(&mut self, s: &mut DiptaSpace, va: u64, size: PageSize, env: &mut TdbEnv) -> Option<TObj> {
        if size != PageSize::K4 || !size.is_aligned(va) {
            return None;
        }
        let (set, way) = self.lookup(s.asid, va, env)?;
        let o = self.obj(set, way);
        self.clear(set, way);
        env.cost.write(1);
        s.pages -= 1;
        Some(o)
    }

    /// The hardware table is shared by every address space: it is reported whole under the live
    /// space with the lowest ASID, so the OS's sum over spaces counts it once.
    fn table_bytes(&self, s: &DiptaSpace) -> u64 {
        if self.live.first() == Some(&s.asid) {
            self.hardware_table_bytes()
        } else {
            0
        }
    }
}

/// The set-associative region and where each page goes in it.
impl FramePlacement<Dipta> for Dipta {
    /// Reserves, in each partition's slice of memory, the frames of its sets from the slice's
    /// start, leaving the slack at the slice's top to the buddy allocator.
    fn boot(&mut self, frames: &mut dyn Frames) -> Result<()> {
        let total = frames.total_pages();
        let (p, w) = (self.parts, self.ways);
        let slice = total / p;
        let slack = (slice / SLACK_DIVISOR).max((MIN_SLACK_BYTES >> K4_SHIFT).div_ceil(p));
        let sets_per_part = slice.saturating_sub(slack) / w;
        if sets_per_part == 0 {
            return Err(Error::config(
                "arch.dipta.partitions",
                format!(
                    "{} of memory in {p} partitions leaves no {w}-way set per partition beside the OS's slack",
                    crate::addr::fmt_bytes(total << K4_SHIFT)
                ),
            ));
        }
        let chunk = sets_per_part * w;
        // Reservations take the lowest free run that fits: once partition `part`'s sets are
        // reserved, its slack is pinned (allocated) so the next reservation starts at the next
        // partition, and unpinned when every partition has its sets.
        let mut pinned = Vec::new();
        let mut failed = None;
        for part in 0..p {
            match frames.reserve_contiguous(chunk, 0) {
                Some(pfn) if pfn.0 == part * slice => {}
                got => {
                    failed = Some((part, got));
                    break;
                }
            }
            let (lo, hi) = (part * slice + chunk, (part + 1) * slice);
            for order in (0..=30).rev() {
                while let Some(pfn) = frames.alloc_in_range(order, lo, hi) {
                    pinned.push((pfn, order));
                }
            }
        }
        for (pfn, order) in pinned {
            frames.free(pfn, order).map_err(Error::Check)?;
        }
        if let Some((part, got)) = failed {
            return Err(Error::config(
                "arch.dipta.partitions",
                format!(
                    "cannot reserve partition {part}'s {} at {:#x} at boot (the lowest free run that fits is {}): part of it is \
                     already taken (os.hugetlb_1g, os.hugetlb_pool, os.thp_pool and os.eager_pool reserve memory first, and \
                     DIPTA maps only 4 KiB pages), or the partitions are not aligned to the buddy allocator's largest block",
                    crate::addr::fmt_bytes(chunk << K4_SHIFT),
                    Pfn(part * slice).addr(),
                    got.map_or("none".to_string(), |g| format!("at {:#x}", g.addr()))
                ),
            ));
        }
        self.slice = slice;
        self.chunk = chunk;
        self.sets = sets_per_part * p;
        let slots = (self.sets * w) as usize;
        self.tags = vec![0; slots];
        self.meta = vec![0; slots];
        self.hands = vec![0; self.sets as usize];
        self.predictor = vec![0; (p * self.cfg.predictor_entries as u64) as usize];
        Ok(())
    }

    /// A free way of the page's set, else the set's CLOCK victim, swapped out. A shared page
    /// gets no frame of the region (`update` then refuses it: no synonyms).
    fn place(&mut self, s: &mut DiptaSpace, asid: u16, va: u64, size: PageSize, flags: MapFlags, env: &mut TdbEnv) -> Placement {
        if self.sets == 0 || size != PageSize::K4 || va >> VA_BITS != 0 {
            return Placement::Buddy; // refused by `update`
        }
        if flags.shared {
            self.stats.shared_refused += 1;
            self.shared_pending = Some((asid, size.align_down(va)));
            return Placement::Buddy;
        }
        debug_assert_eq!(s.asid, asid);
        let vpn = va >> K4_SHIFT;
        let set = self.set_of(asid, vpn);
        env.cost.hash(1);
        env.cost.read(self.ways);
        let base = (set * self.ways) as usize;
        let row = &self.tags[base..base + self.ways as usize];
        if let Some(w) = row.iter().position(|&t| t == tag(asid, vpn)) {
            return Placement::Frame { pa: self.frame_pa(set, w as u64), evict: None };
        }
        self.stats.placements += 1;
        if let Some(w) = row.iter().position(|&t| t == 0) {
            return Placement::Frame { pa: self.frame_pa(set, w as u64), evict: None };
        }
        let (way, cleared) = self.clock_victim(set);
        env.cost.write(cleared);
        self.stats.clock_clears += cleared;
        self.stats.conflict_evictions += 1;
        let (vasid, vvpn) = untag(self.tags[base + way as usize]);
        Placement::Frame {
            pa: self.frame_pa(set, way),
            evict: Some(Evict { asid: vasid, va: vvpn << K4_SHIFT, size: PageSize::K4, to: EvictTo::Swap }),
        }
    }

    fn owns_frame(&self, pa: u64) -> bool {
        self.slot_of_frame(pa).is_some()
    }
}

/// Routing by set, the partition's table beside a way-predicted data fetch.
impl MemorySide for Dipta {
    fn partitions(&self) -> u32 {
        self.cfg.partitions
    }

    /// The partition of the VA's set (0 before boot).
    fn partition_of(&self, asid: u16, va: u64) -> u32 {
        if self.sets == 0 {
            return 0;
        }
        (self.set_of(asid, va >> K4_SHIFT) % self.parts) as u32
    }

    fn kind(&self) -> MemoryTranslation {
        MemoryTranslation::PredictedFrame
    }

    /// The frame of the way the partition's predictor names (way 0 until trained: a tagless
    /// table always predicts), plus `va`'s page offset.
    fn predict(&mut self, asid: u16, va: u64) -> Option<u64> {
        if self.sets == 0 {
            return None;
        }
        self.stats.predictions += 1;
        let vpn = va >> K4_SHIFT;
        let set = self.set_of(asid, vpn);
        let way = self.predictor[self.predictor_index(set % self.parts, asid, vpn)] as u64;
        Some(self.frame_pa(set, way) | (va & PageSize::K4.offset_mask()))
    }

    /// Counts the entry right if it already named `pa`'s frame, then records `pa`'s way.
    fn train(&mut self, asid: u16, va: u64, pa: u64) {
        if self.sets == 0 {
            return;
        }
        self.stats.trainings += 1;
        let vpn = va >> K4_SHIFT;
        let set = self.set_of(asid, vpn);
        let i = self.predictor_index(set % self.parts, asid, vpn);
        match self.slot_of_frame(pa) {
            Some((fset, way)) if fset == set => {
                if self.predictor[i] as u64 == way {
                    self.stats.correct += 1;
                }
                self.predictor[i] = way as u8;
            }
            _ => {} // not a frame of the page's set: nothing to learn
        }
    }
}

impl Registered for Dipta {
    type Section = DiptaConfig;
    const DESIGNS: &'static [Design] = &[
        Design {
            name: "dipta",
            description: "DIPTA (PACT'17): memory as a 4-way set-associative cache of virtual pages, a table per partition \
                          probed beside a way-predicted fetch (accelerators, 4 KiB pages, swap on)",
            driver: "dipta",
            arch: |a| a.dipta.ways = 4,
            settings: &["os.thp=never", "os.swap.enabled=true", "accel.enabled=true", "os.memory=\"128G\""],
            nested: None,
        },
        Design {
            name: "dipta-16",
            description: "DIPTA with 16 ways per set (SPARTA §7.7: what a multi-programmed mix needs)",
            driver: "dipta",
            arch: |a| a.dipta.ways = 16,
            settings: &["os.thp=never", "os.swap.enabled=true", "accel.enabled=true", "os.memory=\"128G\""],
            nested: None,
        },
    ];

    fn validate(s: &DiptaConfig, key: &str) -> Result<()> {
        s.validate(key)
    }

    fn config(arch: &ArchConfig) -> DiptaConfig {
        arch.dipta.clone()
    }
}

const LEAF_SIZES: [PageSize; 1] = [PageSize::K4];

impl Driver for Dipta {
    type Config = DiptaConfig;
    type WalkCache = ();

    fn from_config(cfg: &DiptaConfig, _seed: u64) -> Result<Self> {
        Ok(Dipta::new(cfg))
    }

    #[inline(always)]
    fn placement(&mut self) -> Option<&mut dyn FramePlacement<Self>> {
        Some(self)
    }

    #[inline(always)]
    fn memory_side(&mut self) -> Option<&mut dyn MemorySide> {
        Some(self)
    }

    fn new_walk_cache(&self) {}

    /// The partition's table probe (one DRAM read of the set's tags, or `table_cycles` of SRAM).
    /// A hit sets the page's
    /// accessed bit, as a hardware walker does (the CLOCK reads it).
    #[inline]
    fn walk(&mut self, _s: &mut DiptaSpace, _wc: &mut (), asid: u16, va: u64, plan: &mut WalkPlan) -> Option<Translation> {
        self.stats.walks += 1;
        if self.sets == 0 || va >> VA_BITS != 0 {
            plan.fixed_cycles += self.cfg.table_cycles;
            return None;
        }
        let vpn = va >> K4_SHIFT;
        let set = self.set_of(asid, vpn);
        match self.cfg.table {
            DiptaTable::Sram => plan.fixed_cycles += self.cfg.table_cycles,
            // The set's tags, read from its own DRAM rows.
            DiptaTable::Dram => plan.push(self.frame_pa(set, 0), 0, true),
        }
        let way = self.way_of(set, tag(asid, vpn))?;
        self.stats.walk_hits += 1;
        self.meta[(set * self.ways + way) as usize] |= ACCESSED;
        Some(Translation { pbase: self.frame_pa(set, way), size: PageSize::K4 })
    }

    fn invalidate_walk_cache(&self, _wc: &mut (), _asid: u16, _start: u64, _end: u64) {}

    fn leaf_sizes(&self) -> &[PageSize] {
        &LEAF_SIZES
    }

    fn restart_metrics(&mut self) {
        // Occupied frames are state, not events.
        self.stats = DiptaStats { occupied: self.stats.occupied, ..DiptaStats::default() };
    }

    fn metrics(&self) -> Map<String, Value> {
        let st = &self.stats;
        let per = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let mut m = Map::new();
        m.insert("dipta_ways".into(), self.ways.into());
        m.insert("dipta_sets".into(), self.sets.into());
        m.insert("dipta_partitions".into(), self.parts.into());
        m.insert("dipta_frames".into(), self.frames().into());
        m.insert("dipta_occupied_frames".into(), st.occupied.into());
        m.insert("dipta_table_bytes".into(), self.hardware_table_bytes().into());
        m.insert("dipta_placements".into(), st.placements.into());
        m.insert("dipta_set_conflict_evictions".into(), st.conflict_evictions.into());
        m.insert("dipta_clock_clears".into(), st.clock_clears.into());
        m.insert("dipta_shared_refused".into(), st.shared_refused.into());
        m.insert("dipta_walks".into(), st.walks.into());
        m.insert("dipta_walk_hits".into(), st.walk_hits.into());
        m.insert("dipta_predictions".into(), st.predictions.into());
        m.insert("dipta_predictor_trainings".into(), st.trainings.into());
        m.insert("dipta_way_prediction_accuracy".into(), per(st.correct, st.trainings).into());
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::dram::DramConfig;
    use crate::mem::topology::{Topology, TopologyConfig};
    use crate::os::phys::PhysMem;
    use crate::rng::Rng;
    use crate::tapi::{prot, OsCost};

    const MEM: u64 = 1 << 30;

    /// A booted driver over 1 GiB in 4 partitions of 256 MiB: each keeps 16 MiB (the 64 MiB
    /// minimum over 4) for the buddy allocator, so 60 Ki frames and 15 Ki sets of 4 per partition.
    fn booted(ways: u32) -> (Dipta, PhysMem) {
        let cfg = DiptaConfig { ways, partitions: 4, predictor_entries: 256, ..DiptaConfig::default() };
        cfg.validate("arch.dipta").unwrap();
        let mut d = Dipta::new(&cfg);
        let mut phys = PhysMem::new(MEM, 14);
        d.boot(&mut phys).unwrap();
        (d, phys)
    }

    fn frame(p: Placement) -> (u64, Option<Evict>) {
        match p {
            Placement::Frame { pa, evict } => (pa, evict),
            other => panic!("expected a frame, got {other:?}"),
        }
    }

    /// Places and maps page `va` of `s`; returns its frame.
    fn map(d: &mut Dipta, s: &mut DiptaSpace, va: u64, env: &mut TdbEnv) -> u64 {
        let (pa, evict) = frame(d.place(s, s.asid, va, PageSize::K4, MapFlags::default(), env));
        assert!(evict.is_none(), "{va:#x}: a free way expected");
        d.update(s, &TObj::new(va, pa, PageSize::K4, prot::RW), env).unwrap();
        pa
    }

    #[test]
    fn boot_reserves_each_partitions_sets_and_leaves_the_slack() {
        let (d, phys) = booted(4);
        assert_eq!(d.partition_bytes(), 256 << 20);
        assert_eq!(d.sets(), 4 * 15 * 1024);
        assert_eq!(phys.free_pages(), 4 * 4096, "16 MiB of each partition stays free");
        phys.check_invariants().unwrap();
        // The region is owned; the slack and beyond are not.
        assert!(d.owns_frame(0) && d.owns_frame((256 << 20) + 0x1000));
        assert!(!d.owns_frame((256 << 20) - 0x1000) && !d.owns_frame(MEM));
        // The frames of a set are contiguous in one partition; consecutive sets go round the partitions.
        for set in [0, 1, 5, d.sets() - 1] {
            let pa = d.frame_pa(set, 0);
            for w in 0..4 {
                assert_eq!(d.frame_pa(set, w), pa + w * 4096);
                assert_eq!(d.slot_of_frame(pa + w * 4096 + 123), Some((set, w)));
            }
            assert_eq!(pa / (256 << 20), set % 4);
        }
        // The designs' machine: 128 GiB in 32 partitions of 4 GiB, each keeping 64 MiB (1/64).
        let mut big = Dipta::new(&DiptaConfig::default());
        let mut phys = PhysMem::new(128 << 30, 14);
        big.boot(&mut phys).unwrap();
        assert_eq!(big.sets(), 32 * ((4 << 18) - (1 << 14)) / 4);
        assert_eq!(phys.free_pages(), 32 << 14);
        assert_eq!(big.hardware_table_bytes(), 8 * big.frames());
        // Memory an OS pool reserved first: partition 0's sets cannot start at its base.
        let mut phys = PhysMem::new(MEM, 14);
        phys.reserve_contiguous(1024, 0).unwrap();
        let mut late = Dipta::new(&DiptaConfig { partitions: 4, ..DiptaConfig::default() });
        let e = late.boot(&mut phys).unwrap_err().to_string();
        assert!(e.contains("arch.dipta.partitions") && e.contains("partition 0") && e.contains("already taken"), "{e}");
        // Memory too small for the slack: an error naming the key.
        let mut tiny = Dipta::new(&DiptaConfig { partitions: 4, ..DiptaConfig::default() });
        let e = tiny.boot(&mut PhysMem::new(32 << 20, 14)).unwrap_err();
        assert!(e.to_string().contains("arch.dipta.partitions"), "{e}");
    }

    #[test]
    fn validation_names_the_key() {
        for (cfg, key) in [
            (DiptaConfig { ways: 0, ..DiptaConfig::default() }, "arch.dipta.ways"),
            (DiptaConfig { ways: 65, ..DiptaConfig::default() }, "arch.dipta.ways"),
            (DiptaConfig { partitions: 0, ..DiptaConfig::default() }, "arch.dipta.partitions"),
            (DiptaConfig { predictor_entries: 1000, ..DiptaConfig::default() }, "arch.dipta.predictor_entries"),
            (DiptaConfig { table_cycles: 1 << 20, ..DiptaConfig::default() }, "arch.dipta.table_cycles"),
        ] {
            let e = cfg.validate("arch.dipta").unwrap_err().to_string();
            assert!(e.contains(key), "{e}");
        }
        DiptaConfig::default().validate("arch.dipta").unwrap();
    }

    #[test]
    fn every_placed_frame_lies_in_its_set_and_partition() {
        let (mut d, mut phys) = booted(4);
        let mut cost = OsCost::default();
        let env = &mut TdbEnv { phys: &mut phys, cost: &mut cost };
        let topo =
            Topology::new(&TopologyConfig { sockets: 2, channels: 2, ..TopologyConfig::default() }, MEM, &DramConfig::default(), 2.0);
        let mut spaces = [d.create_space(0, env).unwrap(), d.create_space(1, env).unwrap()];
        let mut rng = Rng::new(3);
        for i in 0..5000 {
            let s = &mut spaces[i % 2];
            let va = (rng.below(1 << 35) << 12) | rng.below(4096);
            let base = PageSize::K4.align_down(va);
            if d.find(s, va, env).is_some() {
                continue;
            }
            let (pa, evict) = frame(d.place(s, s.asid, base, PageSize::K4, MapFlags::default(), env));
            if let Some(v) = evict {
                // The OS swaps the victim out first.
                let victim = &mut spaces[v.asid as usize];
                assert_eq!(d.remove(victim, v.va, v.size, env).unwrap().pa, pa);
            }
            let s = &mut spaces[i % 2];
            let (set, _) = d.slot_of_frame(pa).unwrap();
            assert_eq!(set, d.set_of(s.asid, base >> 12), "{va:#x}: frame {pa:#x} is in its set");
            let part = d.partition_of(s.asid, va);
            assert_eq!(pa / d.partition_bytes(), part as u64);
            assert_eq!(topo.node(pa).channel, part, "the topology's channel of the frame is the VA's partition");
            d.update(s, &TObj::new(base, pa, PageSize::K4, prot::RW), env).unwrap();
            let t = d.walk(s, &mut (), s.asid, va, &mut WalkPlan::default()).unwrap();
            assert_eq!(t.pbase, pa);
            // The prediction lies in the same partition, whatever way it names.
            let guess = d.predict(s.asid, va).unwrap();
            assert_eq!(topo.node(guess).channel, part);
            assert_eq!(guess & 0xfff, va & 0xfff);
        }
        assert_eq!(d.stats.occupied, spaces.iter().map(|s| s.pages()).sum::<u64>());
    }

    #[test]
    fn find_update_remove_round_trip() {
        let (mut d, mut phys) = booted(4);
        let mut cost = OsCost::default();
        let env = &mut TdbEnv { phys: &mut phys, cost: &mut cost };
        let mut s = d.create_space(7, env).unwrap();
        let va = 0x7f12_3456_7000;
        assert!(d.find(&mut s, va, env).is_none());
        let pa = map(&mut d, &mut s, va, env);
        let o = d.find(&mut s, va + 0x123, env).unwrap();
        assert_eq!(o, TObj::new(va, pa, PageSize::K4, prot::RW));
        // Attributes change in place.
        let changed = TObj { prot: prot::READ, accessed: true, dirty: true, ..o };
        d.update(&mut s, &changed, env).unwrap();
        assert_eq!(d.find(&mut s, va, env), Some(changed));
        // Another way of the same set: the page moves.
        let (set, way) = d.slot_of_frame(pa).unwrap();
        let other = d.frame_pa(set, (way + 1) % 4);
        d.update(&mut s, &TObj::new(va, other, PageSize::K4, prot::RW), env).unwrap();
        assert_eq!(d.find(&mut s, va, env).unwrap().pa, other);
        assert_eq!((s.pages(), d.stats.occupied), (1, 1));
        // A frame of another set, one outside the region and a 2 MiB page are refused.
        for bad in [
            TObj::new(va, d.frame_pa((set + 1) % d.sets(), 0), PageSize::K4, prot::RW),
            TObj::new(va, (256 << 20) - 4096, PageSize::K4, prot::RW),
            TObj::new(0x4000_0000, d.frame_pa(0, 0), PageSize::M2, prot::RW),
        ] {
            assert!(matches!(d.update(&mut s, &bad, env), Err(Error::Check(_))), "{bad:?} refused");
        }
        assert_eq!(d.find(&mut s, va, env).unwrap().pa, other, "a refused update changes nothing");
        // Other address spaces do not see it.
        let mut s2 = d.create_space(8, env).unwrap();
        assert!(d.find(&mut s2, va, env).is_none());
        assert!(d.remove(&mut s2, va, PageSize::K4, env).is_none());
        let before = env.cost.get(crate::tapi::Path::Other, crate::tapi::Func::Lookup, crate::tapi::Event::Read);
        assert_eq!(d.remove(&mut s, va, PageSize::K4, env).unwrap().pa, other);
        assert!(env.cost.get(crate::tapi::Path::Other, crate::tapi::Func::Lookup, crate::tapi::Event::Read) > before, "work is counted");
        assert!(d.find(&mut s, va, env).is_none());
        assert!(d.remove(&mut s, va, PageSize::K4, env).is_none());
        assert_eq!((s.pages(), d.stats.occupied), (0, 0));
        // The shared table is reported once, under the lowest live ASID.
        assert_eq!(d.table_bytes(&s), d.frames() * 8);
        assert_eq!(d.table_bytes(&s2), 0);
        d.destroy_space(s, env).unwrap();
        assert_eq!(d.table_bytes(&s2), d.frames() * 8);
    }

    #[test]
    fn a_full_set_evicts_its_clock_victim_to_swap() {
        let (mut d, mut phys) = booted(4);
        let mut cost = OsCost::default();
        let env = &mut TdbEnv { phys: &mut phys, cost: &mut cost };
        let mut s = d.create_space(1, env).unwrap();
        let sets = d.sets();
        let va = |i: u64| (0x1234 + i * sets) << 12; // all in one set
        let pas: Vec<u64> = (0..4).map(|i| map(&mut d, &mut s, va(i), env)).collect();
        assert_eq!(pas.iter().collect::<BTreeSet<_>>().len(), 4, "four ways");
        // Pages 0 and 1 are used (the table sets their accessed bits): page 2 is the victim.
        for i in 0..2 {
            d.walk(&mut s, &mut (), 1, va(i), &mut WalkPlan::default()).unwrap();
        }
        let (pa, evict) = frame(d.place(&mut s, 1, va(4), PageSize::K4, MapFlags::default(), env));
        let v = evict.expect("a full set names a victim");
        assert_eq!(v, Evict { asid: 1, va: va(2), size: PageSize::K4, to: EvictTo::Swap });
        assert_eq!(pa, pas[2]);
        assert_eq!(d.stats.conflict_evictions, 1);
        assert_eq!(d.metrics()["dipta_set_conflict_evictions"], 1);
        assert_eq!(d.stats.clock_clears, 2);
        // The OS swaps the victim out, then maps the new page there.
        d.remove(&mut s, v.va, v.size, env).unwrap();
        d.update(&mut s, &TObj::new(va(4), pa, PageSize::K4, prot::RW), env).unwrap();
        // The hand moved on and the bits were cleared: the next victim is page 3.
        let (_, next) = frame(d.place(&mut s, 1, va(5), PageSize::K4, MapFlags::default(), env));
        assert_eq!(next.unwrap().va, va(3));
    }

    #[test]
    fn synonyms_and_shared_pages_are_refused() {
        let (mut d, mut phys) = booted(4);
        let mut cost = OsCost::default();
        let env = &mut TdbEnv { phys: &mut phys, cost: &mut cost };
        let mut a = d.create_space(1, env).unwrap();
        let mut b = d.create_space(2, env).unwrap();
        let va = 0x10_0000_0000;
        let pa = map(&mut d, &mut a, va, env);
        // Another ASID's page of the same set (VPN mod sets ignores the ASID) on the same frame.
        let e = d.update(&mut b, &TObj::new(va, pa, PageSize::K4, prot::READ), env).unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "a design limit, not a bug: {e:?}");
        let e = e.to_string();
        assert!(e.contains("synonym") && e.contains("copy-on-write"), "{e}");
        // The same ASID, another page of the set, the same frame.
        let alias = va + (d.sets() << 12);
        let e = d.update(&mut a, &TObj::new(alias, pa, PageSize::K4, prot::READ), env).unwrap_err().to_string();
        assert!(e.contains("synonym"), "{e}");
        assert_eq!(d.find(&mut a, va, env).unwrap().pa, pa);
        // A shared mapping gets no frame of the region, and its mapping is refused with the reason.
        let shared = MapFlags { shared: true, ..MapFlags::default() };
        assert_eq!(d.place(&mut b, 2, va, PageSize::K4, shared, env), Placement::Buddy);
        let buddy = env.phys.alloc(0).unwrap().addr();
        let e = d.update(&mut b, &TObj::new(va, buddy, PageSize::K4, prot::RW), env).unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "a design limit, not a bug: {e:?}");
        let e = e.to_string();
        assert!(e.contains("shared") && e.contains("no synonyms or copy-on-write"), "{e}");
        assert_eq!(d.stats.shared_refused, 1);
    }

    #[test]
    fn the_way_predictor_learns() {
        let (mut d, mut phys) = booted(4);
        let mut cost = OsCost::default();
        let env = &mut TdbEnv { phys: &mut phys, cost: &mut cost };
        let mut s = d.create_space(3, env).unwrap();
        let sets = d.sets();
        let va = |i: u64| (0x4_0000 + i * sets) << 12;
        for i in 0..3 {
            map(&mut d, &mut s, va(i), env);
        }
        let target = va(2) + 0x5c0;
        let truth = d.walk(&mut s, &mut (), 3, target, &mut WalkPlan::default()).unwrap().paddr(target);
        assert_eq!(d.slot_of_frame(truth).unwrap().1, 2, "the third page took way 2");
        // Untrained: way 0 of the right set, a wrong frame.
        let first = d.predict(3, target).unwrap();
        assert_ne!(first, truth);
        assert_eq!(d.slot_of_frame(first), Some((d.set_of(3, target >> 12), 0)));
        d.train(3, target, truth);
        // Second access to the same page: predicted right.
        assert_eq!(d.predict(3, target), Some(truth));
        d.train(3, target, truth);
        let m = d.metrics();
        assert_eq!(m["dipta_predictions"], 2);
        assert_eq!(m["dipta_way_prediction_accuracy"], 0.5);
    }

    #[test]
    fn the_walk_is_the_table_probe() {
        let (mut d, mut phys) = booted(16);
        let mut cost = OsCost::default();
        let env = &mut TdbEnv { phys: &mut phys, cost: &mut cost };
        let mut s = d.create_space(0, env).unwrap();
        let pa = map(&mut d, &mut s, 0x5000, env);
        let mut plan = WalkPlan::default();
        assert_eq!(d.walk(&mut s, &mut (), 0, 0x5abc, &mut plan), Some(Translation { pbase: pa, size: PageSize::K4 }));
        // The DRAM table (default): one read of the set's tags, in the set's first frame.
        assert_eq!(plan.refs.len(), 1);
        assert_eq!(plan.refs[0].paddr, d.frame_pa(d.set_of(0, 5), 0));
        assert_eq!(plan.fixed_cycles, 0);
        assert!(d.find(&mut s, 0x5000, env).unwrap().accessed, "the hardware set the accessed bit");
        // The SRAM table: `table_cycles`, no reference.
        d.cfg.table = DiptaTable::Sram;
        plan.clear();
        d.walk(&mut s, &mut (), 0, 0x5abc, &mut plan).unwrap();
        assert!(plan.refs.is_empty());
        assert_eq!(plan.fixed_cycles, 10);
        plan.clear();
        assert_eq!(d.walk(&mut s, &mut (), 0, 0x6000, &mut plan), None);
        assert_eq!(plan.fixed_cycles, 10);
        assert_eq!(d.walk(&mut s, &mut (), 1, 0x5000, &mut plan), None, "ASID-tagged");
    }

    #[test]
    fn the_os_swaps_set_conflicts_and_the_designs_resolve() {
        use crate::os::{Os, OsConfig, SwapConfig};
        // 4 ways, 2 partitions over 128 MiB (4096 sets): six pages 16 MiB apart share a set and
        // overflow it, so the OS swaps victims out and faults them back in.
        let cfg = DiptaConfig { ways: 4, partitions: 2, ..DiptaConfig::default() };
        let os_cfg = OsConfig { memory: 128 << 20, swap: SwapConfig { enabled: true, ..SwapConfig::default() }, ..OsConfig::default() };
        let mut os = Os::boot(Dipta::new(&cfg), &os_cfg, 1).unwrap();
        let asid = os.spawn(false).unwrap();
        let len = 128 << 20;
        let start = os.mmap(asid, len, MapFlags::default()).unwrap();
        let sets = os.driver.sets();
        for round in 0..2 {
            for i in 0..6 {
                let va = start + ((i * sets) << 12);
                os.fault(asid, va).unwrap_or_else(|e| panic!("round {round}, page {i}: {e}"));
                assert!(os.truth(asid, va).is_some());
            }
        }
        assert!(os.stats.swap_outs > 0 && os.stats.faults_swapin > 0, "{:?}", os.stats);
        assert_eq!(os.driver.stats.conflict_evictions, os.stats.swap_outs);
        let shared = os.mmap(asid, 1 << 20, MapFlags { shared: true, ..MapFlags::default() }).unwrap();
        let e = os.fault(asid, shared).unwrap_err().to_string();
        assert!(e.contains("no synonyms or copy-on-write"), "{e}");
        // The designs resolve to valid configurations with their ways.
        for (name, ways) in [("dipta", 4), ("dipta-16", 16)] {
            let d = crate::arch::lookup(name).unwrap();
            let c = crate::config::Layers::default().resolve(Some(d)).unwrap();
            assert_eq!((c.arch.dipta.ways, c.os.memory, c.accel.enabled), (ways, 128 << 30, true), "{name}");
        }
    }
}
