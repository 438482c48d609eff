//! SPARTA (Picorel et al., seed `003_64f431eae0496108.txt`): split, partitioned translation for
//! accelerators. Physical memory is divided into `P` partitions (a socket, a channel, or finer);
//! a virtual page's partition is a hash of its virtual address, and the OS allocates its frame
//! only inside that partition (Algorithm 1: a buddy allocator per partition, here
//! [`Placement::InRange`]). Each partition has its own inverted page table, co-located in the
//! partition's memory, and its own memory-side TLB (kept by the accelerator engine in
//! `sim::accel`, shared by every accelerator). A request travels with its virtual address to the
//! partition, which translates it there, overlapped with the trip (§4.2).
//!
//! The driver is the partition-side half: the routing hash ([`MemorySide`]), the placement
//! policy, and the inverted tables as its translation database, walked in one memory reference.
//!
//! **Inverted table** (§5: "the same inverted page design as the hashed page tables in IBM Power
//! systems"; load factor 1/4 → one reference per walk, §7.4). Each partition's table has one
//! 64 B bucket per 4 KiB frame of the partition, four 16 B entries per bucket: four slots per
//! frame, so the load factor is at most 1/4 (every mapped page holds a frame). A page's home
//! bucket is its page number *within the partition* (the routing bits removed) plus a per-ASID
//! offset, modulo the bucket count, so the pages of one address space whose virtual span is no
//! larger than memory never share a bucket and every walk is one reference; other collisions
//! (several address spaces) fill the bucket's four entries before one overflows to the next
//! bucket, which costs the walk a second, serial reference (counted in `ipt_overflow_probes`).
//! With 2 MiB pages enabled a walk probes the 4 KiB and the 2 MiB home buckets in parallel (one
//! serial step; the probe of the size that does not hold the page is not waited for, as ECPT's
//! walk). The tables are reserved at boot at the start of each partition; they are shared by
//! every address space (entries are tagged with the ASID), like the hardware's.

use super::{ArchConfig, Design, Registered};
use crate::addr::PageSize;
use crate::error::{Error, Result};
use crate::os::truth::{IntMap, VpnTable};
use crate::rng::mix64;
use crate::tapi::{
    Driver, Event, FramePlacement, Frames, MapFlags, MemorySide, MemoryTranslation, Placement, TObj, Tdb, TdbEnv, Translation, WalkPlan,
};
use std::collections::hash_map::Entry as MapEntry;

/// The routing hash: which bits of the virtual address name the partition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PartitionHash {
    /// `(va / granule) mod P` (§5's example: VPN mod 4).
    #[default]
    Mod,
    /// A mixing hash of `va / granule` (spreads strided footprints), then mod P.
    Mix,
}

/// The `arch.sparta` section.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SpartaConfig {
    /// Memory partitions (SPARTA-4/8/32/128; §7.5: 8 = one per socket, 32 = one per channel).
    pub partitions: u32,
    /// Granule of the routing hash: every page inside one granule lives in the same partition,
    /// so with 2 MiB pages (and their 4 KiB fallbacks) it is 2 MiB.
    pub granule: PageSize,
    /// The routing hash.
    pub hash: PartitionHash,
    /// Bytes per table entry (IBM Power's hashed PTE: 16 B).
    pub entry_bytes: u64,
    /// Table slots per 4 KiB frame (4 = load factor 1/4, §7.4).
    pub slots_per_frame: u64,
}

impl Default for SpartaConfig {
    fn default() -> Self {
        SpartaConfig { partitions: 32, granule: PageSize::K4, hash: PartitionHash::Mod, entry_bytes: 16, slots_per_frame: 4 }
    }
}

impl SpartaConfig {
    fn validate(&self, key: &str) -> Result<()> {
        if self.partitions == 0 || !self.partitions.is_power_of_two() || self.partitions > 4096 {
            return Err(Error::config(
                format!("{key}.partitions"),
                format!("must be a power of two between 1 and 4096 (got {})", self.partitions),
            ));
        }
        if !matches!(self.granule, PageSize::K4 | PageSize::M2) {
            return Err(Error::config(format!("{key}.granule"), format!("must be \"4K\" or \"2M\" (got {})", self.granule)));
        }
        if !matches!(self.entry_bytes, 8 | 16 | 32 | 64) {
            return Err(Error::config(format!("{key}.entry_bytes"), format!("must be 8, 16, 32 or 64 (got {})", self.entry_bytes)));
        }
        if self.slots_per_frame == 0 || self.slots_per_frame > 64 || !self.slots_per_frame.is_power_of_two() {
            return Err(Error::config(
                format!("{key}.slots_per_frame"),
                format!("must be a power of two between 1 and 64 (got {})", self.slots_per_frame),
            ));
        }
        Ok(())
    }
}

/// One table entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Entry {
    /// `(asid, page number, size)`, as [`key`] packs them.
    key: u64,
    pa: u64,
    prot: u8,
    accessed: bool,
    dirty: bool,
}

/// One bucket: the entries of one 64 B line (or more, with larger entries), held in
/// [`Sparta::slab`] (`per_bucket` slots from `at`, the first `len` in use), and whether an entry
/// that hashes here was pushed to the next bucket. A bucket's slots are one block of the slab,
/// reused after the bucket empties, so filling a bucket allocates nothing (a vector per bucket
/// made malloc and free a third of a SPARTA run's host time).
#[derive(Clone, Copy, Debug)]
struct Bucket {
    at: usize,
    len: u8,
    overflowed: bool,
}

fn key(asid: u16, va: u64, size: PageSize) -> u64 {
    ((va >> size.shift()) << 19) | ((asid as u64) << 3) | size.index() as u64
}

/// The key of [`Sparta::index`] for an entry's [`key`]: the page number in the low bits (at
/// most 45 of them), then the ASID and the size, so that consecutive pages of one address space
/// are consecutive keys, which [`VpnTable`] hashes into one host line. Never `u64::MAX`: the
/// size index is below 7.
#[inline(always)]
fn index_key(k: u64) -> u64 {
    (k >> 19) | ((k >> 3) & 0xffff) << 45 | (k & 7) << 61
}

/// Buckets an entry may lie past its home and still be in [`Sparta::index`] (the distance takes
/// the low 12 bits of the indexed value, below the entry's 4 KiB-aligned frame).
const INDEX_MAX_DISTANCE: u64 = 1 << 12;

/// A partition's table: where it lives and its bucket count.
#[derive(Clone, Debug)]
struct Table {
    /// Physical bases of the blocks the table is made of (each `chunk_bytes` long).
    chunks: Vec<u64>,
}

/// Per-address-space state: the ASID (the tables themselves are shared).
pub struct SpartaSpace {
    asid: u16,
    /// Translations this space holds (for `table_bytes` and the report).
    pages: u64,
}

/// The SPARTA driver.
pub struct Sparta {
    cfg: SpartaConfig,
    sizes: Vec<PageSize>,
    /// Bytes per partition (0 until boot).
    part_bytes: u64,
    /// Buckets per partition.
    buckets: u64,
    bucket_bytes: u64,
    per_bucket: usize,
    chunk_bytes: u64,
    tables: Vec<Table>,
    /// Occupied buckets, by global index `partition × buckets + bucket`.
    occupied: IntMap<Bucket>,
    /// The occupied buckets' entries, `per_bucket` slots per bucket ([`Bucket::at`]).
    slab: Vec<Entry>,
    /// Blocks of `slab` whose bucket emptied, for the next new bucket.
    free_blocks: Vec<usize>,
    /// Host-side index for the walk: every entry's frame and how many buckets past its home it
    /// lies, by [`index_key`] (entries further than [`INDEX_MAX_DISTANCE`] are left out). A walk
    /// that finds its entry here reads one host line, which the access loop prefetches
    /// ([`Driver::prefetch`]), instead of chasing the bucket map and the bucket's entries
    /// through host memory: it ends where [`Sparta::locate`] would, since an entry never moves
    /// and the buckets between its home and it stay marked as overflowed (checked against
    /// `locate` in debug builds and by `index_answers_as_the_bucket_scan`).
    index: VpnTable,
    /// Counters.
    walks: u64,
    walk_refs: u64,
    overflow_probes: u64,
    entries: u64,
    max_entries: u64,
}

impl Sparta {
    fn new(cfg: &SpartaConfig) -> Sparta {
        let sizes = if cfg.granule == PageSize::M2 { vec![PageSize::K4, PageSize::M2] } else { vec![PageSize::K4] };
        let per_bucket = (64 / cfg.entry_bytes).max(1) as usize;
        Sparta {
            cfg: cfg.clone(),
            sizes,
            part_bytes: 0,
            buckets: 0,
            bucket_bytes: per_bucket as u64 * cfg.entry_bytes,
            per_bucket,
            chunk_bytes: 0,
            tables: Vec::new(),
            occupied: IntMap::default(),
            slab: Vec::new(),
            free_blocks: Vec::new(),
            index: VpnTable::default(),
            walks: 0,
            walk_refs: 0,
            overflow_probes: 0,
            entries: 0,
            max_entries: 0,
        }
    }

    /// The partition of `va` (the routing hash).
    #[inline]
    pub fn partition(&self, va: u64) -> u32 {
        let unit = va >> self.cfg.granule.shift();
        let h = match self.cfg.hash {
            PartitionHash::Mod => unit,
            PartitionHash::Mix => mix64(unit),
        };
        (h & (self.cfg.partitions as u64 - 1)) as u32
    }

    /// Physical range `[lo, hi)` of partition `p`.
    pub fn partition_range(&self, p: u32) -> (u64, u64) {
        let lo = p as u64 * self.part_bytes;
        (lo, lo + self.part_bytes)
    }

    /// Home bucket (within its partition) of a page of `size` at `va` in `asid`.
    #[inline]
    fn home(&self, asid: u16, va: u64, size: PageSize) -> u64 {
        // The page's number within its partition: the routing bits taken out, so consecutive
        // pages of one partition take consecutive buckets.
        let g = self.cfg.granule.shift();
        let local_unit = (va >> g) >> self.cfg.partitions.trailing_zeros();
        let n = if size.shift() <= g {
            (local_unit << (g - size.shift())) | ((va >> size.shift()) & ((1 << (g - size.shift())) - 1))
        } else {
            local_unit >> (size.shift() - g)
        };
        // 2 MiB entries take the buckets from the other end, so a space's 4K and 2M pages meet only
        // when together they span all of memory; ASIDs are spread by a mixed offset.
        let n = if size == PageSize::K4 { n } else { self.buckets - 1 - (n % self.buckets) };
        (n + (mix64(asid as u64) % self.buckets)) % self.buckets
    }

    /// Physical address of bucket `b` of partition `p`.
    #[inline]
    fn bucket_pa(&self, p: u32, b: u64) -> u64 {
        let off = b * self.bucket_bytes;
        self.tables[p as usize].chunks[(off / self.chunk_bytes) as usize] + off % self.chunk_bytes
    }

    /// Finds the entry of `(asid, va, size)`: its global bucket index and position, and the
    /// buckets probed to get there (home first).
    fn locate(&self, asid: u16, va: u64, size: PageSize) -> (Option<(u64, usize)>, u32) {
        let p = self.partition(va) as u64;
        let k = key(asid, size.align_down(va), size);
        let mut b = self.home(asid, va, size);
        let mut probes = 0;
        loop {
            probes += 1;
            let g = p * self.buckets + b;
            let Some(bucket) = self.occupied.get(&g) else { return (None, probes) };
            if let Some(i) = self.entries_of(bucket).iter().position(|e| e.key == k) {
                return (Some((g, i)), probes);
            }
            if !bucket.overflowed || probes as u64 >= self.buckets {
                return (None, probes);
            }
            b = (b + 1) % self.buckets;
        }
    }

    /// What [`Sparta::locate`] tells a walk, from [`Sparta::index`] when the entry is there:
    /// the entry's frame if found, and the buckets probed.
    #[inline]
    fn locate_frame(&self, asid: u16, va: u64, size: PageSize) -> (Option<u64>, u32) {
        let k = key(asid, size.align_down(va), size);
        let fast = self.index.get(index_key(k)).map(|v| (Some(v & !(INDEX_MAX_DISTANCE - 1)), (v & (INDEX_MAX_DISTANCE - 1)) as u32 + 1));
        let slow = || {
            let (hit, probes) = self.locate(asid, va, size);
            (hit.map(|(g, i)| self.entry(g, i).pa), probes)
        };
        debug_assert!(fast.is_none() || fast == Some(slow()), "SPARTA's index disagrees with its buckets at {va:#x}");
        fast.unwrap_or_else(slow)
    }

    /// Records `entry`, `distance` buckets past its home, in [`Sparta::index`] (or leaves it out
    /// if that is too far).
    fn index_entry(&mut self, entry: &Entry, distance: u64) {
        if distance < INDEX_MAX_DISTANCE {
            debug_assert_eq!(entry.pa % INDEX_MAX_DISTANCE, 0, "a frame is 4 KiB-aligned");
            self.index.insert(index_key(entry.key), entry.pa | distance);
        }
    }

    /// How many buckets past `asid`'s home for `(va, size)` global bucket `g` is.
    fn distance(&self, asid: u16, va: u64, size: PageSize, g: u64) -> u64 {
        (g % self.buckets + self.buckets - self.home(asid, va, size)) % self.buckets
    }

    /// The entries `b` holds.
    #[inline]
    fn entries_of(&self, b: &Bucket) -> &[Entry] {
        &self.slab[b.at..b.at + b.len as usize]
    }

    /// Entry `i` of occupied bucket `g`.
    fn entry(&self, g: u64, i: usize) -> &Entry {
        &self.entries_of(&self.occupied[&g])[i]
    }

    /// Takes entry `i` out of occupied bucket `g` and the index, keeping the others' order; an
    /// emptied bucket with no overflow mark leaves the map (its block goes back to the slab's
    /// free list) if `drop_empty`.
    fn take_entry(&mut self, g: u64, i: usize, drop_empty: bool) -> Entry {
        let b = self.occupied.get_mut(&g).expect("an occupied bucket");
        let (at, len) = (b.at, b.len as usize);
        let e = self.slab[at + i];
        self.slab.copy_within(at + i + 1..at + len, at + i);
        b.len -= 1;
        if drop_empty && b.len == 0 && !b.overflowed {
            self.occupied.remove(&g);
            self.free_blocks.push(at);
        }
        self.index.remove(index_key(e.key));
        e
    }

    fn obj(e: &Entry, va: u64, size: PageSize) -> TObj {
        TObj { va: size.align_down(va), pa: e.pa, size, prot: e.prot, accessed: e.accessed, dirty: e.dirty }
    }

    fn check_booted(&self) -> Result<()> {
        if self.part_bytes == 0 {
            return Err(Error::Check("SPARTA's partition tables were not reserved (the OS did not boot the placement policy)".into()));
        }
        Ok(())
    }
}

impl Tdb for Sparta {
    type Space = SpartaSpace;

    fn create_space(&mut self, asid: u16, _env: &mut TdbEnv) -> Result<SpartaSpace> {
        Ok(SpartaSpace { asid, pages: 0 })
    }

    fn destroy_space(&mut self, s: SpartaSpace, env: &mut TdbEnv) -> Result<()> {
        let asid = s.asid;
        let mut dead = Vec::new();
        for (&g, b) in &self.occupied {
            for e in self.entries_of(b) {
                if (e.key >> 3) & 0xffff == asid as u64 {
                    dead.push((g, e.key));
                }
            }
        }
        for (g, k) in dead {
            let i = self.entries_of(&self.occupied[&g]).iter().position(|e| e.key == k).expect("collected above");
            // The emptied bucket stays in the map, as it always has (a walk reads it as empty).
            self.take_entry(g, i, false);
            env.cost.add(Event::Write, 1);
            self.entries -= 1;
        }
        Ok(())
    }

    fn find(&mut self, s: &mut SpartaSpace, va: u64, env: &mut TdbEnv) -> Option<TObj> {
        for i in 0..self.sizes.len() {
            let size = self.sizes[i];
            env.cost.add(Event::Hash, 1);
            let (hit, probes) = self.locate(s.asid, va, size);
            env.cost.add(Event::Read, probes as u64);
            if let Some((g, i)) = hit {
                return Some(Self::obj(self.entry(g, i), va, size));
            }
        }
        None
    }

    fn update(&mut self, s: &mut SpartaSpace, o: &TObj, env: &mut TdbEnv) -> Result<()> {
        self.check_booted()?;
        if !self.sizes.contains(&o.size) {
            return Err(Error::Check(format!("SPARTA with a {} routing granule cannot map a {} page", self.cfg.granule, o.size)));
        }
        let p = self.partition(o.va);
        let (lo, hi) = self.partition_range(p);
        if o.pa < lo || o.pa + o.size.bytes() > hi {
            return Err(Error::Check(format!(
                "SPARTA: the page at {:#x} routes to partition {p} [{lo:#x}, {hi:#x}) but the OS placed it at {:#x}",
                o.va, o.pa
            )));
        }
        env.cost.add(Event::Hash, 1);
        let entry = Entry { key: key(s.asid, o.va, o.size), pa: o.pa, prot: o.prot, accessed: o.accessed, dirty: o.dirty };
        let (hit, probes) = self.locate(s.asid, o.va, o.size);
        env.cost.add(Event::Read, probes as u64);
        env.cost.add(Event::Write, 1);
        if let Some((g, i)) = hit {
            self.slab[self.occupied[&g].at + i] = entry;
            let d = self.distance(s.asid, o.va, o.size, g);
            self.index_entry(&entry, d);
            return Ok(());
        }
        // A new entry: the first bucket from home with room, marking each full one passed.
        let mut b = self.home(s.asid, o.va, o.size);
        for d in 0..self.buckets {
            let g = p as u64 * self.buckets + b;
            let bucket = match self.occupied.entry(g) {
                MapEntry::Occupied(o) => o.into_mut(),
                MapEntry::Vacant(v) => {
                    let at = self.free_blocks.pop().unwrap_or_else(|| {
                        self.slab.resize(self.slab.len() + self.per_bucket, Entry::default());
                        self.slab.len() - self.per_bucket
                    });
                    v.insert(Bucket { at, len: 0, overflowed: false })
                }
            };
            if (bucket.len as usize) < self.per_bucket {
                self.slab[bucket.at + bucket.len as usize] = entry;
                bucket.len += 1;
                self.index_entry(&entry, d);
                self.entries += 1;
                self.max_entries = self.max_entries.max(self.entries);
                s.pages += 1;
                return Ok(());
            }
            bucket.overflowed = true;
            env.cost.add(Event::Read, 1);
            b = (b + 1) % self.buckets;
        }
        Err(Error::OutOfMemory(format!("SPARTA: partition {p}'s inverted table is full")))
    }

    fn remove(&mut self, s: &mut SpartaSpace, va: u64, size: PageSize, env: &mut TdbEnv) -> Option<TObj> {
        env.cost.add(Event::Hash, 1);
        let (hit, probes) = self.locate(s.asid, va, size);
        env.cost.add(Event::Read, probes as u64);
        let (g, i) = hit?;
        env.cost.add(Event::Write, 1);
        // Overflow marks stay (as in open addressing with tombstones): a later walk still probes on.
        let e = self.take_entry(g, i, true);
        self.entries -= 1;
        s.pages -= 1;
        Some(Self::obj(&e, va, size))
    }

    fn table_bytes(&self, s: &SpartaSpace) -> u64 {
        // The tables are shared and reserved whole at boot; each space is charged the slots its
        // translations hold (the rest of the reservation is reported in the driver's metrics).
        s.pages * self.cfg.entry_bytes
    }
}

impl FramePlacement<Sparta> for Sparta {
    fn boot(&mut self, frames: &mut dyn Frames) -> Result<()> {
        let total = frames.total_pages() << 12;
        let p = self.cfg.partitions as u64;
        self.part_bytes = total / p;
        if self.part_bytes < (4 << 20) || !self.part_bytes.is_multiple_of(2 << 20) {
            return Err(Error::config(
                "arch.sparta.partitions",
                format!("{p} partitions of {total} bytes of memory: each must be a whole number of 2 MiB blocks, at least 4 MiB"),
            ));
        }
        self.buckets = (self.part_bytes >> 12) * self.cfg.slots_per_frame / self.per_bucket as u64;
        let table_bytes = self.buckets * self.bucket_bytes;
        // The table is built from the largest buddy blocks that fit, all inside the partition.
        let order = (table_bytes >> 12).max(1).next_power_of_two().trailing_zeros().min(9);
        self.chunk_bytes = 4096u64 << order;
        for part in 0..self.cfg.partitions {
            let (lo, hi) = self.partition_range(part);
            let n = table_bytes.div_ceil(self.chunk_bytes);
            let chunks = (0..n)
                .map(|_| frames.alloc_in_range(order, lo >> 12, hi >> 12).map(|f| f.addr()))
                .collect::<Option<Vec<u64>>>()
                .ok_or_else(|| {
                Error::OutOfMemory(format!("SPARTA: no room for partition {part}'s inverted table ({table_bytes} bytes)"))
            })?;
            self.tables.push(Table { chunks });
        }
        Ok(())
    }

    fn va_period(&self) -> u64 {
        // §5: a shared or remapped region must keep its pages' partition sequence.
        match self.cfg.hash {
            PartitionHash::Mod => self.cfg.partitions as u64 * self.cfg.granule.bytes(),
            // A mixed hash has no period: any address other than the same one would change
            // partitions, so sharing and remapping keep the original address's residue modulo
            // 2^48 (i.e. are refused unless at the same address).
            PartitionHash::Mix => 1 << 48,
        }
    }

    fn place(&mut self, _s: &mut SpartaSpace, _asid: u16, va: u64, _size: PageSize, _flags: MapFlags, _env: &mut TdbEnv) -> Placement {
        // Algorithm 1: mem_set_id = MEM_SET_INDEX_HASH(vaddr); alloc_pages_node(vaddr, mem_set_id).
        let (lo, hi) = self.partition_range(self.partition(va));
        Placement::InRange { lo, hi }
    }
}

impl MemorySide for Sparta {
    fn partitions(&self) -> u32 {
        self.cfg.partitions
    }

    #[inline]
    fn partition_of(&self, _asid: u16, va: u64) -> u32 {
        self.partition(va)
    }

    fn kind(&self) -> MemoryTranslation {
        MemoryTranslation::PartitionTlb
    }

    #[inline]
    fn tlb_va(&self, va: u64) -> u64 {
        match self.cfg.hash {
            // The routing bits are the low bits of the granule number: take them out.
            PartitionHash::Mod => {
                let g = self.cfg.granule.shift();
                let bits = self.cfg.partitions.trailing_zeros();
                ((va >> (g + bits)) << g) | (va & ((1 << g) - 1))
            }
            // A mixed hash leaves no bits to take out one-to-one.
            PartitionHash::Mix => va,
        }
    }

    fn tlb_range(&self, start: u64, end: u64) -> (u64, u64) {
        match self.cfg.hash {
            // Every granule of the range, in every partition: from the first granule's key to
            // past the last one's (whole granules, so a superset).
            PartitionHash::Mod if end > start => {
                let g = self.cfg.granule.shift();
                let bits = self.cfg.partitions.trailing_zeros();
                ((start >> (g + bits)) << g, (((end - 1) >> (g + bits)) + 1) << g)
            }
            _ => (start, end),
        }
    }
}

/// No walk caches: the table is walked in one reference.
pub struct NoWalkCache;

impl Driver for Sparta {
    type Config = SpartaConfig;
    type WalkCache = NoWalkCache;

    fn from_config(cfg: &SpartaConfig, _seed: u64) -> Result<Self> {
        Ok(Sparta::new(cfg))
    }

    fn new_walk_cache(&self) -> NoWalkCache {
        NoWalkCache
    }

    fn walk(&mut self, _s: &mut SpartaSpace, _wc: &mut NoWalkCache, asid: u16, va: u64, plan: &mut WalkPlan) -> Option<Translation> {
        self.walks += 1;
        let p = self.partition(va);
        let mut found = None;
        // Every size's home bucket in parallel (step 0); an overflow chain adds serial steps.
        for i in 0..self.sizes.len() {
            let size = self.sizes[i];
            let (hit, probes) = self.locate_frame(asid, va, size);
            let home = self.home(asid, va, size);
            for k in 0..probes as u64 {
                let b = (home + k) % self.buckets;
                plan.push(self.bucket_pa(p, b), k.min(255) as u8, hit.is_some());
            }
            self.walk_refs += probes as u64;
            self.overflow_probes += probes as u64 - 1;
            if let Some(pa) = hit {
                found = Some(Translation { pbase: pa, size });
            }
        }
        plan.unfiltered += plan.refs.len() as u32;
        if found.is_none() {
            // A fault: the walk still waited for its probes.
            for r in plan.refs.iter_mut() {
                r.needed = true;
            }
        }
        found
    }

    /// The host line of [`Sparta::index`] the walk of `va` reads, for each size (the walk's
    /// simulated references are timed by the accelerator engine, which caches none).
    #[inline]
    fn prefetch(&self, s: &SpartaSpace, va: u64) -> Option<u64> {
        for &size in &self.sizes {
            self.index.prefetch(index_key(key(s.asid, size.align_down(va), size)));
        }
        None
    }

    fn invalidate_walk_cache(&self, _wc: &mut NoWalkCache, _asid: u16, _start: u64, _end: u64) {}

    fn leaf_sizes(&self) -> &[PageSize] {
        &self.sizes
    }

    fn restart_metrics(&mut self) {
        // Entries and their peak are state, not events.
        self.walks = 0;
        self.walk_refs = 0;
        self.overflow_probes = 0;
    }

    fn metrics(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        m.insert("partitions".into(), self.cfg.partitions.into());
        m.insert("partition_bytes".into(), self.part_bytes.into());
        m.insert("ipt_bytes".into(), (self.buckets * self.bucket_bytes * self.cfg.partitions as u64).into());
        m.insert("ipt_entries".into(), self.entries.into());
        m.insert("ipt_max_load_factor".into(), {
            let slots = self.buckets * self.per_bucket as u64;
            // Per partition: the fullest partition is what matters; the average is reported.
            (self.max_entries as f64 / (slots * self.cfg.partitions as u64).max(1) as f64).into()
        });
        m.insert("ipt_walks".into(), self.walks.into());
        m.insert("ipt_refs_per_walk".into(), (self.walk_refs as f64 / self.walks.max(1) as f64).into());
        m.insert("ipt_overflow_probes".into(), self.overflow_probes.into());
        m
    }

    #[inline(always)]
    fn placement(&mut self) -> Option<&mut dyn FramePlacement<Self>> {
        Some(self)
    }

    #[inline(always)]
    fn memory_side(&mut self) -> Option<&mut dyn MemorySide> {
        Some(self)
    }
}

/// A SPARTA design with `partitions` partitions, 4 KiB or 2 MiB pages.
const fn design(name: &'static str, description: &'static str, partitions: u32, huge: bool) -> Design {
    let arch: fn(&mut ArchConfig) = match (partitions, huge) {
        (4, false) => |a| set(a, 4, PageSize::K4),
        (8, false) => |a| set(a, 8, PageSize::K4),
        (32, false) => |a| set(a, 32, PageSize::K4),
        (128, false) => |a| set(a, 128, PageSize::K4),
        (4, true) => |a| set(a, 4, PageSize::M2),
        (8, true) => |a| set(a, 8, PageSize::M2),
        (32, true) => |a| set(a, 32, PageSize::M2),
        _ => |a| set(a, 128, PageSize::M2),
    };
    let settings: &'static [&'static str] = if huge { ACCEL_2M } else { ACCEL_4K };
    Design { name, description, driver: "sparta", arch, settings, nested: None }
}

fn set(a: &mut ArchConfig, partitions: u32, granule: PageSize) {
    a.sparta.partitions = partitions;
    a.sparta.granule = granule;
}

/// The accelerator machine of SPARTA §7.5 (8 sockets × 4 channels, 128 GB), 4 KiB pages. A
/// partition under pressure swaps (§5).
pub const ACCEL_4K: &[&str] = &["accel.enabled=true", "os.memory=\"128G\"", "os.thp=never", "os.swap.enabled=true"];
/// The same with 2 MiB pages (THP always, khugepaged on).
pub const ACCEL_2M: &[&str] = &["accel.enabled=true", "os.memory=\"128G\"", "os.thp=always", "os.swap.enabled=true"];
/// The conventional baseline's machine: as [`ACCEL_4K`], data interleaved over the 8 sockets
/// (`os.interleave`), so it lies anywhere in memory as SPARTA's does (§4.1).
pub const CONVENTIONAL_4K: &[&str] =
    &["accel.enabled=true", "os.memory=\"128G\"", "os.thp=never", "os.swap.enabled=true", "os.interleave=8"];
/// [`CONVENTIONAL_4K`] with 2 MiB pages.
pub const CONVENTIONAL_2M: &[&str] =
    &["accel.enabled=true", "os.memory=\"128G\"", "os.thp=always", "os.swap.enabled=true", "os.interleave=8"];

impl Registered for Sparta {
    type Section = SpartaConfig;
    const DESIGNS: &'static [Design] = &[
        design(
            "sparta-4",
            "SPARTA with 4 memory partitions: memory-side TLBs and inverted tables per partition, 4 KiB pages (accelerators)",
            4,
            false,
        ),
        design("sparta-8", "SPARTA-8: one partition per socket of the 8-socket machine, 4 KiB pages (accelerators)", 8, false),
        design("sparta-32", "SPARTA-32: one partition per memory channel (8 sockets × 4), 4 KiB pages (accelerators)", 32, false),
        design("sparta-128", "SPARTA-128: four partitions per channel, 4 KiB pages (accelerators)", 128, false),
        design("sparta-4-2m", "SPARTA-4 with 2 MiB pages (accelerators)", 4, true),
        design("sparta-8-2m", "SPARTA-8 with 2 MiB pages (accelerators)", 8, true),
        design("sparta-32-2m", "SPARTA-32 with 2 MiB pages (accelerators)", 32, true),
        design("sparta-128-2m", "SPARTA-128 with 2 MiB pages (accelerators)", 128, true),
    ];

    fn validate(s: &SpartaConfig, key: &str) -> Result<()> {
        s.validate(key)
    }

    fn config(arch: &ArchConfig) -> SpartaConfig {
        arch.sparta.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::{Os, OsConfig};
    use crate::rng::Rng;

    fn booted(memory: u64, partitions: u32, swap: bool) -> Os<Sparta> {
        let cfg = SpartaConfig { partitions, ..SpartaConfig::default() };
        let mut os_cfg = OsConfig { memory, ..OsConfig::default() };
        os_cfg.thp = crate::os::ThpMode::Never;
        os_cfg.swap.enabled = swap;
        Os::boot(Sparta::new(&cfg), &os_cfg, 1).unwrap()
    }

    #[test]
    fn the_routing_hash_is_vpn_mod_p_and_the_tlb_key_is_one_to_one_within_a_partition() {
        let s = Sparta::new(&SpartaConfig { partitions: 8, ..SpartaConfig::default() });
        assert_eq!(s.partition(0x0000), 0);
        assert_eq!(s.partition(0x1fff), 1);
        assert_eq!(s.partition(0x7000), 7);
        assert_eq!(s.partition(0x8000), 0);
        // Pages of partition 3: keys are consecutive pages, offsets kept.
        let keys: Vec<u64> = (0..5u64).map(|i| s.tlb_va(((i * 8 + 3) << 12) | 0x123)).collect();
        assert_eq!(keys, vec![0x123, 0x1123, 0x2123, 0x3123, 0x4123]);
        let huge = Sparta::new(&SpartaConfig { partitions: 4, granule: PageSize::M2, ..SpartaConfig::default() });
        assert_eq!(huge.partition(0x20_0000 + 0x5000), 1, "4 KiB pages route by their 2 MiB granule");
    }

    /// Algorithm 1: every page faulted in gets a frame in its partition, and the partition's
    /// inverted table was reserved inside the partition too.
    #[test]
    fn every_frame_lies_in_its_virtual_address_partition() {
        let mut os = booted(256 << 20, 8, false);
        let asid = os.spawn(false).unwrap();
        let base = os.mmap(asid, 64 << 20, MapFlags::default()).unwrap();
        let mut rng = Rng::new(7);
        for _ in 0..4000 {
            let va = base + rng.below(64 << 20);
            let t = os.fault(asid, va).unwrap();
            let (lo, hi) = os.driver.partition_range(os.driver.partition(va));
            assert!(t.pbase >= lo && t.pbase < hi, "{va:#x} → {:#x} outside [{lo:#x}, {hi:#x})", t.pbase);
        }
        for (p, t) in os.driver.tables.iter().enumerate() {
            let (lo, hi) = os.driver.partition_range(p as u32);
            assert!(t.chunks.iter().all(|&c| c >= lo && c + os.driver.chunk_bytes <= hi), "table {p} lies in its partition");
        }
    }

    /// munmap removes the pages' table entries and frees their frames back to their partition;
    /// pages mapped again land in their partitions again.
    #[test]
    fn munmap_frees_entries_and_frames_within_partitions() {
        let mut os = booted(256 << 20, 8, false);
        let asid = os.spawn(false).unwrap();
        let free0 = os.phys.free_pages();
        let base = os.mmap(asid, 16 << 20, MapFlags::default()).unwrap();
        for i in 0..(16u64 << 20) >> 12 {
            os.fault(asid, base + (i << 12)).unwrap();
        }
        assert_eq!(os.driver.entries, 4096);
        os.munmap(asid, base, 16 << 20).unwrap();
        assert_eq!(os.driver.entries, 0, "every entry removed");
        assert_eq!(os.phys.free_pages(), free0, "every frame back");
        let again = os.mmap(asid, 16 << 20, MapFlags::default()).unwrap();
        for i in 0..(16u64 << 20) >> 12 {
            let va = again + (i << 12);
            let t = os.fault(asid, va).unwrap();
            let (lo, hi) = os.driver.partition_range(os.driver.partition(va));
            assert!(t.pbase >= lo && t.pbase < hi);
        }
    }

    /// §5: a remapped region and a region shared into another address space get virtual
    /// addresses whose partition sequence matches their frames (the `[V5..V9]` → `[V7..V11]`
    /// adjustment), so every page keeps its frame and the frame stays in its partition.
    #[test]
    fn remapped_and_shared_regions_keep_their_partition_sequence() {
        let mut os = booted(256 << 20, 8, false);
        let a = os.spawn(false).unwrap();
        let b = os.spawn(false).unwrap();
        // An odd-sized gap first, so the next free address is not congruent by accident.
        os.mmap(a, 3 << 12, MapFlags::default()).unwrap();
        let base = os.mmap(a, 20 << 12, MapFlags::default()).unwrap();
        let frames: Vec<u64> = (0..20).map(|i| os.fault(a, base + (i << 12)).unwrap().pbase).collect();
        os.mmap(b, 5 << 12, MapFlags::default()).unwrap();
        let shared = os.share(a, base, b).unwrap();
        let moved = os.mremap(a, base).unwrap();
        assert_ne!(moved, base);
        for (i, &pa) in frames.iter().enumerate() {
            let off = (i as u64) << 12;
            for (asid, va) in [(a, moved + off), (b, shared + off)] {
                assert_eq!(os.truth(asid, va).map(|t| t.pbase), Some(pa), "ASID {asid} {va:#x} keeps the frame");
                assert_eq!(os.driver.partition(va), os.driver.partition(base + off), "same partition sequence");
            }
            assert!(os.truth(a, base + off).is_none(), "the old range is unmapped");
        }
        assert_eq!((os.stats.remaps, os.stats.shares), (1, 1));
        // The shared frames stay allocated until both unmap them.
        os.munmap(a, moved, 20 << 12).unwrap();
        assert!(!os.phys.is_free(crate::addr::Pfn::containing(frames[0])));
        os.munmap(b, shared, 20 << 12).unwrap();
        assert!(os.phys.is_free(crate::addr::Pfn::containing(frames[0])));
    }

    /// A partition that fills swaps its own pages out; it never takes another partition's frame.
    #[test]
    fn a_full_partition_swaps_rather_than_spills() {
        let mut os = booted(64 << 20, 4, true);
        let asid = os.spawn(false).unwrap();
        let base = os.mmap(asid, 256 << 20, MapFlags::default()).unwrap();
        let (lo, hi) = os.driver.partition_range(0);
        let free_elsewhere = |os: &Os<Sparta>| os.phys.free_pages();
        let before = free_elsewhere(&os);
        // 24 MiB of partition-0 pages into a 16 MiB partition.
        let pages: Vec<u64> =
            (0..(256u64 << 20) >> 12).map(|i| base + (i << 12)).filter(|&va| os.driver.partition(va) == 0).take(6144).collect();
        for &va in &pages {
            let t = os.fault(asid, va).unwrap();
            assert!(t.pbase >= lo && t.pbase < hi);
        }
        assert!(os.stats.swap_outs > 0, "the partition swapped");
        // The other three partitions' memory is untouched (only partition 0's frames were used).
        assert!(before - free_elsewhere(&os) <= (hi - lo) >> 12);
    }

    /// §7.4: at load factor ≤ 1/4 a walk is one reference. A whole partition mapped by one
    /// address space: every walk reads exactly one bucket.
    /// The walk's index ([`Sparta::index`]) answers as the bucket scan does, frame and probes,
    /// across address spaces whose pages overflow into later buckets, unmaps that empty buckets
    /// but leave their overflow marks, and refaults into the holes they leave.
    #[test]
    fn index_answers_as_the_bucket_scan() {
        // One slot per frame (load factor up to 1): the six spaces' runs of home buckets overlap
        // more than a bucket holds.
        let cfg = SpartaConfig { partitions: 4, slots_per_frame: 1, ..SpartaConfig::default() };
        let os_cfg = OsConfig { memory: 64 << 20, thp: crate::os::ThpMode::Never, ..OsConfig::default() };
        let mut os = Os::boot(Sparta::new(&cfg), &os_cfg, 1).unwrap();
        let mut rng = Rng::new(7);
        let mut regions = Vec::new();
        for _ in 0..6 {
            let asid = os.spawn(false).unwrap();
            let base = os.mmap(asid, 8 << 20, MapFlags::default()).unwrap();
            regions.push((asid, base));
        }
        let page = |r: &(u16, u64), i: u64| (r.0, r.1 + (i << 12));
        let (mut overflowed, mut unmapped) = (0, std::collections::HashSet::new());
        for round in 0..4 {
            for _ in 0..6000 {
                let r = regions[rng.below(regions.len() as u64) as usize];
                let (asid, va) = page(&r, rng.below(2048));
                if unmapped.contains(&(asid, va)) {
                    continue;
                }
                if rng.below(5) == 0 {
                    // Empties its slot; pages of other spaces that hash there refault into it.
                    os.munmap(asid, va, 4096).unwrap();
                    unmapped.insert((asid, va));
                } else if os.truth(asid, va).is_none() {
                    os.fault(asid, va).unwrap();
                }
            }
            for r in &regions {
                for i in 0..2048 {
                    let (asid, va) = page(r, i);
                    let d = &os.driver;
                    let (hit, probes) = d.locate(asid, va, PageSize::K4);
                    let scan = (hit.map(|(g, j)| d.entry(g, j).pa), probes);
                    assert_eq!(d.locate_frame(asid, va, PageSize::K4), scan, "round {round}: ASID {asid} {va:#x}");
                    assert_eq!(scan.0, os.truth(asid, va).map(|t| t.pbase));
                    overflowed += u32::from(hit.is_some() && probes > 1);
                }
            }
        }
        assert!(overflowed > 0, "some entries lie past their home bucket");
    }

    #[test]
    fn one_reference_per_walk_at_load_factor_one_quarter() {
        let mut os = booted(64 << 20, 4, false);
        let asid = os.spawn(false).unwrap();
        let base = os.mmap(asid, 48 << 20, MapFlags::default()).unwrap();
        let vas: Vec<u64> = (0..(48u64 << 20) >> 12).map(|i| base + (i << 12)).collect();
        for &va in &vas {
            os.fault(asid, va).unwrap();
        }
        let mut plan = WalkPlan::default();
        let mut wc = NoWalkCache;
        for &va in &vas {
            plan.clear();
            let (d, s) = crate::mmu::pipeline::TranslationHost::tables(&mut os, asid);
            let t = d.walk(s, &mut wc, asid, va, &mut plan).expect("mapped");
            assert_eq!(plan.refs.len(), 1, "{va:#x}: one reference");
            let p = d.partition(va);
            let (lo, hi) = d.partition_range(p);
            assert!(plan.refs[0].paddr >= lo && plan.refs[0].paddr < hi, "the table entry is in the partition");
            assert_eq!(Some(t), os.truth(asid, va));
        }
        assert_eq!(os.driver.overflow_probes, 0);
        // Many address spaces hashing into the same buckets: at most one overflow probe per walk
        // at this load factor, and every entry still found.
        let mut os = booted(64 << 20, 4, false);
        let mut all = Vec::new();
        for _ in 0..6 {
            let asid = os.spawn(false).unwrap();
            let base = os.mmap(asid, 8 << 20, MapFlags::default()).unwrap();
            for i in 0..(8u64 << 20) >> 12 {
                os.fault(asid, base + (i << 12)).unwrap();
                all.push((asid, base + (i << 12)));
            }
        }
        for &(asid, va) in &all {
            plan.clear();
            let (d, s) = crate::mmu::pipeline::TranslationHost::tables(&mut os, asid);
            assert!(d.walk(s, &mut wc, asid, va, &mut plan).is_some());
            assert!(plan.refs.len() <= 2);
        }
    }
}
