//! The architecture-neutral translation API (EMT, OSDI'25 §4): translation objects, the
//! translation database every MMU driver implements, and the cost counters its functions report to.
//!
//! Contract for a driver:
//! - *Basic* functions ([`Tdb::find`], [`Tdb::update`], [`Tdb::remove`], space creation and
//!   destruction) must be implemented.
//! - *Customizable* functions ([`Tdb::for_each`], [`Tdb::range_is_empty`], ...) have generic
//!   defaults built on the basic ones. A driver overrides one only to be faster, never to change
//!   what it returns: `tests/iterators.rs` runs both paths of every driver and compares them.
//! - Every function reports the work it did (entries read and written, hashes computed) through
//!   [`TdbEnv`], so the OS cost of a design is measured from what its driver did, not assumed.
//!   The OS charges each call to a [`Func`] (`OsCost::enter`) before calling; drivers only count
//!   events, so work done by a default built on `find` is charged to the caller's function.

use crate::addr::{PageSize, Pfn};
use crate::error::{Error, Result};
use crate::os::phys::PhysMem;
use crate::workload::MapFlags;

/// Protection bits of a mapping.
pub mod prot {
    /// Readable.
    pub const READ: u8 = 1;
    /// Writable.
    pub const WRITE: u8 = 2;
    /// Executable.
    pub const EXEC: u8 = 4;
    /// Read + write.
    pub const RW: u8 = READ | WRITE;
}

/// A translation object: one mapping, read and written by attribute, never by bit layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TObj {
    /// Virtual base address (aligned to `size`).
    pub va: u64,
    /// Physical base address (aligned to `size`).
    pub pa: u64,
    /// Translation size.
    pub size: PageSize,
    /// [`prot`] bits.
    pub prot: u8,
    /// Accessed bit.
    pub accessed: bool,
    /// Dirty bit.
    pub dirty: bool,
}

impl TObj {
    /// A fresh present mapping.
    pub fn new(va: u64, pa: u64, size: PageSize, prot: u8) -> TObj {
        TObj { va, pa, size, prot, accessed: false, dirty: false }
    }
    /// One past the last virtual byte.
    pub fn end(&self) -> u64 {
        self.va + self.size.bytes()
    }
}

/// Which translation-API function (or OS step) work is charged to: the rows of `os_ops`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Func {
    /// `find`: look a translation up.
    Lookup,
    /// `update`: insert or change a translation.
    Insert,
    /// `remove`.
    Remove,
    /// Range iteration (`for_each`).
    Iterate,
    /// "Is this range empty" (THP eligibility).
    RangeCheck,
    /// Physical allocation (data pages and table pages).
    Alloc,
    /// Zeroing of new pages (4 KiB units).
    Zero,
    /// Copying of pages (4 KiB units) during promotion or migration.
    Copy,
    /// TLB shootdowns sent.
    Shootdown,
}

impl Func {
    /// Every function, in report order.
    pub const ALL: [Func; 9] =
        [Func::Lookup, Func::Insert, Func::Remove, Func::Iterate, Func::RangeCheck, Func::Alloc, Func::Zero, Func::Copy, Func::Shootdown];
    /// Report name.
    pub fn name(self) -> &'static str {
        ["lookup", "insert", "remove", "iterate", "range_check", "alloc", "zero", "copy", "shootdown"][self as usize]
    }
}

/// Which OS path the work happened on: page faults, background promotion, unmapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Path {
    /// Page-fault handling (including `populate`).
    Fault,
    /// Background promotion (khugepaged and its successors).
    Promote,
    /// munmap and other range operations.
    Unmap,
    /// Space creation and everything else.
    Other,
}

impl Path {
    /// Every path, in report order.
    pub const ALL: [Path; 4] = [Path::Fault, Path::Promote, Path::Unmap, Path::Other];
    /// Report name.
    pub fn name(self) -> &'static str {
        ["fault", "promote", "unmap", "other"][self as usize]
    }
}

/// The primitive events a function reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Event {
    /// One call of an API function (its fixed overhead).
    Call,
    /// One table entry read.
    Read,
    /// One table entry written.
    Write,
    /// One hash computed.
    Hash,
    /// One 4 KiB unit of allocation, zeroing or copying.
    Page,
}

const FUNCS: usize = Func::ALL.len();
const PATHS: usize = Path::ALL.len();
const EVENTS: usize = 5;

/// Counters of OS work: `[path][func][event]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OsCost {
    counts: [[[u64; EVENTS]; FUNCS]; PATHS],
    /// Latencies the OS waits for that are not counted events (page-copy DMA, swap I/O), per path.
    fixed: [u64; PATHS],
    path: Option<Path>,
    func: Option<Func>,
}

impl OsCost {
    /// Sets the path subsequent work is charged to.
    #[inline]
    pub fn set_path(&mut self, p: Path) {
        self.path = Some(p);
    }

    /// Sets the function subsequent work is charged to and counts one call of it; returns the
    /// previous function so nested calls (a default built on `find`) can restore it.
    #[inline]
    pub fn enter(&mut self, f: Func) -> Option<Func> {
        let prev = self.func.replace(f);
        self.add(Event::Call, 1);
        prev
    }

    /// Sets the function subsequent work is charged to without counting a call (for customizable
    /// hooks whose default does nothing, so designs that do not override them pay nothing).
    #[inline]
    pub fn charge_to(&mut self, f: Func) -> Option<Func> {
        self.func.replace(f)
    }

    /// Adds `cycles` of latency the OS waits for (a DMA page copy, swap I/O) to the current path.
    #[inline]
    pub fn add_fixed_cycles(&mut self, cycles: u64) {
        self.fixed[self.path.unwrap_or(Path::Other) as usize] += cycles;
    }

    /// Fixed latency cycles charged to `p` (see [`OsCost::add_fixed_cycles`]).
    pub fn fixed_cycles(&self, p: Path) -> u64 {
        self.fixed[p as usize]
    }

    /// Restores the function saved by [`OsCost::enter`].
    #[inline]
    pub fn leave(&mut self, prev: Option<Func>) {
        self.func = prev;
    }

    /// Counts `n` events of `e` against the current path and function.
    #[inline]
    pub fn add(&mut self, e: Event, n: u64) {
        let p = self.path.unwrap_or(Path::Other) as usize;
        let f = self.func.unwrap_or(Func::Lookup) as usize;
        self.counts[p][f][e as usize] += n;
    }

    /// Counts events against an explicit function (the OS's own alloc/zero/copy work).
    #[inline]
    pub fn add_to(&mut self, f: Func, e: Event, n: u64) {
        let p = self.path.unwrap_or(Path::Other) as usize;
        self.counts[p][f as usize][e as usize] += n;
    }

    /// Entries read.
    #[inline]
    pub fn read(&mut self, n: u64) {
        self.add(Event::Read, n);
    }
    /// Entries written.
    #[inline]
    pub fn write(&mut self, n: u64) {
        self.add(Event::Write, n);
    }
    /// Hashes computed.
    #[inline]
    pub fn hash(&mut self, n: u64) {
        self.add(Event::Hash, n);
    }

    /// Count of `e` for (`p`, `f`).
    pub fn get(&self, p: Path, f: Func, e: Event) -> u64 {
        self.counts[p as usize][f as usize][e as usize]
    }

    /// Operations (all events) charged to `f` on `p`.
    pub fn ops(&self, p: Path, f: Func) -> u64 {
        self.counts[p as usize][f as usize].iter().sum()
    }

    /// Cycles of all work on `p` under `costs`.
    pub fn cycles(&self, p: Path, costs: &OsCostModel) -> f64 {
        Func::ALL.iter().map(|&f| self.func_cycles(p, f, costs)).sum::<f64>() + self.fixed[p as usize] as f64
    }

    /// Cycles of the work of `f` on `p` under `costs`.
    pub fn func_cycles(&self, p: Path, f: Func, costs: &OsCostModel) -> f64 {
        let c = &self.counts[p as usize][f as usize];
        let page = match f {
            Func::Alloc => costs.alloc_page,
            Func::Zero => costs.zero_page,
            Func::Copy => costs.copy_page,
            _ => 0.0,
        };
        let call = if f == Func::Shootdown { costs.shootdown } else { costs.call };
        c[Event::Call as usize] as f64 * call
            + c[Event::Read as usize] as f64 * costs.entry_read
            + c[Event::Write as usize] as f64 * costs.entry_write
            + c[Event::Hash as usize] as f64 * costs.hash
            + c[Event::Page as usize] as f64 * page
    }

    /// Adds every counter of `other` into `self`.
    pub fn merge(&mut self, other: &OsCost) {
        for p in 0..PATHS {
            self.fixed[p] += other.fixed[p];
            for f in 0..FUNCS {
                for e in 0..EVENTS {
                    self.counts[p][f][e] += other.counts[p][f][e];
                }
            }
        }
    }
}

/// Cycles charged per counted OS event. Defaults are estimates of kernel instruction counts at
/// roughly one cycle each (documented in docs/os-model.md); EMT measured instructions, so ratios
/// between designs, not absolute values, are what these reproduce.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OsCostModel {
    /// Fixed overhead of one API call (function entry, locking, argument checks).
    pub call: f64,
    /// Reading one table entry (load + decode + branch).
    pub entry_read: f64,
    /// Writing one table entry (encode + store + barrier).
    pub entry_write: f64,
    /// Computing one hash (MurmurHash64A of a VPN ≈ 20 instructions).
    pub hash: f64,
    /// Buddy allocation, per allocation call's 4 KiB unit.
    pub alloc_page: f64,
    /// Zeroing 4 KiB (`clear_page` with `rep stosb` ≈ 4 KiB / 32 B per cycle).
    pub zero_page: f64,
    /// Copying 4 KiB (`copy_page`).
    pub copy_page: f64,
    /// One TLB shootdown (IPI round trip on a small machine).
    pub shootdown: f64,
}

impl Default for OsCostModel {
    fn default() -> Self {
        OsCostModel {
            call: 40.0,
            entry_read: 6.0,
            entry_write: 8.0,
            hash: 20.0,
            alloc_page: 150.0,
            zero_page: 130.0,
            copy_page: 260.0,
            shootdown: 2000.0,
        }
    }
}

/// What a translation-database function may use: physical memory for its tables, and the cost
/// counters it reports to.
pub struct TdbEnv<'a> {
    /// Physical memory (table pages come from here like any other page).
    pub phys: &'a mut PhysMem,
    /// Cost counters.
    pub cost: &'a mut OsCost,
}

impl TdbEnv<'_> {
    /// Allocates and zeroes a naturally aligned table block of 2^order pages, charging alloc and
    /// zero work.
    pub fn alloc_table(&mut self, order: u32) -> Result<Pfn> {
        let pfn = self.phys.alloc(order).ok_or_else(|| {
            Error::OutOfMemory(format!("no free block of order {order} for a translation table ({} pages free)", self.phys.free_pages()))
        })?;
        self.cost.add_to(Func::Alloc, Event::Page, 1);
        self.cost.add_to(Func::Zero, Event::Page, 1 << order);
        Ok(pfn)
    }

    /// Frees a table block.
    pub fn free_table(&mut self, pfn: Pfn, order: u32) -> Result<()> {
        self.phys.free(pfn, order).map_err(Error::Check)
    }
}

/// Where a page the OS moves out of a frame the driver needs goes ([`Evict::to`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictTo {
    /// A buddy-allocated frame (any address; Utopia's FlexSeg). Swap if there is none and swap is on.
    Buddy,
    /// The swap device (a design with no flexible mapping, e.g. restrictive-only).
    Swap,
}

/// A page that occupies the frame a [`Placement::Frame`] names and must be moved out first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Evict {
    /// Address space of the victim.
    pub asid: u16,
    /// Its virtual base.
    pub va: u64,
    /// Its size.
    pub size: PageSize,
    /// Where it goes.
    pub to: EvictTo,
}

/// Where the OS should put a page ([`Tdb::place`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Any frame from the buddy allocator (the default, and every flexible design).
    Buddy,
    /// This frame (chosen by the driver, e.g. a way of the set a VPN hashes to); if a page holds it,
    /// the OS moves `evict` out first (migration or swap-out, with its costs).
    Frame {
        /// Physical base of the frame (aligned to the page size).
        pa: u64,
        /// The page that holds it now, if any.
        evict: Option<Evict>,
    },
}

/// A page the driver asks the OS to place again ([`Tdb::take_migrations`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigrationRequest {
    /// Address space.
    pub asid: u16,
    /// Virtual base of the page.
    pub va: u64,
    /// Its size.
    pub size: PageSize,
}

/// The translation database: one per address space, implemented by each MMU driver.
///
/// `Space` is the per-address-space state (its page table, hash tables, ...); the driver object
/// itself (`&mut self`) holds what all spaces share.
pub trait Tdb {
    /// Per-address-space translation structures.
    type Space;

    /// Creates the structures of a new address space.
    fn create_space(&mut self, asid: u16, env: &mut TdbEnv) -> Result<Self::Space>;

    /// Frees every structure of `space`.
    fn destroy_space(&mut self, space: Self::Space, env: &mut TdbEnv) -> Result<()>;

    /// The translation covering `va`, if any (basic).
    fn find(&mut self, s: &mut Self::Space, va: u64, env: &mut TdbEnv) -> Option<TObj>;

    /// Inserts `obj`, or replaces the translation at the same `va` and size (basic). Inserting over
    /// a different overlapping translation is an error.
    fn update(&mut self, s: &mut Self::Space, obj: &TObj, env: &mut TdbEnv) -> Result<()>;

    /// Removes the translation of size `size` at `va` and returns it (basic).
    fn remove(&mut self, s: &mut Self::Space, va: u64, size: PageSize, env: &mut TdbEnv) -> Option<TObj>;

    /// Calls `f` for every translation that starts in `[start, end)`, in address order
    /// (customizable; the default probes with `find`, stepping over each translation it finds).
    fn for_each(&mut self, s: &mut Self::Space, start: u64, end: u64, env: &mut TdbEnv, f: &mut dyn FnMut(&TObj)) {
        generic_for_each(self, s, start, end, env, f)
    }

    /// Whether no translation overlaps `[start, end)` (customizable; the default probes every
    /// 4 KiB page with `find`, as EMT's generic THP check does).
    fn range_is_empty(&mut self, s: &mut Self::Space, start: u64, end: u64, env: &mut TdbEnv) -> bool {
        generic_range_is_empty(self, s, start, end, env)
    }

    /// Maps `len` bytes of physically contiguous memory starting with the page `first`: pages of
    /// `first.size` at `first.va + i`, `first.pa + i` for every multiple `i` of the page size below
    /// `len` (customizable; the OS's eager paging calls it once per contiguous run it allocated).
    /// The default inserts each page with `update`; a driver with range translations (RMM)
    /// overrides it to also record the range.
    fn map_range(&mut self, s: &mut Self::Space, first: &TObj, len: u64, env: &mut TdbEnv) -> Result<()> {
        generic_map_range(self, s, first, len, env)
    }

    /// Bytes of simulated memory holding this space's translation structures.
    fn table_bytes(&self, s: &Self::Space) -> u64;

    /// Called once while the OS boots, before memory is fragmented: reserves the physical memory
    /// the design manages itself (Utopia's RestSegs). Customizable; default: nothing.
    fn boot(&mut self, _phys: &mut PhysMem) -> Result<()> {
        Ok(())
    }

    /// Chooses the frame for a page of `size` at `va` that the OS is about to map (page fault,
    /// promotion) or is moving because [`Tdb::take_migrations`] asked. Customizable; default:
    /// [`Placement::Buddy`]. Work is charged to allocation.
    fn place(&mut self, _s: &mut Self::Space, _asid: u16, _va: u64, _size: PageSize, _flags: MapFlags, _env: &mut TdbEnv) -> Placement {
        Placement::Buddy
    }

    /// Whether the frame at `pa` lies in memory the driver reserved at [`Tdb::boot`]: the OS never
    /// returns such a frame to the buddy allocator (the driver frees its slot in `remove`).
    /// Customizable; default: false.
    fn owns_frame(&self, _pa: u64) -> bool {
        false
    }

    /// Pages the driver wants the OS to place again (Utopia's PTW-tracking migration into a RestSeg);
    /// the OS asks at every epoch and moves each page to the frame [`Tdb::place`] then chooses.
    /// Customizable; default: none.
    fn take_migrations(&mut self) -> Vec<MigrationRequest> {
        Vec::new()
    }
}

/// The generic range mapping, built on `update` only: one insertion per page.
pub fn generic_map_range<T: Tdb + ?Sized>(t: &mut T, s: &mut T::Space, first: &TObj, len: u64, env: &mut TdbEnv) -> Result<()> {
    let step = first.size.bytes();
    if !len.is_multiple_of(step) {
        return Err(Error::Check(format!("map_range of {len:#x} bytes is not a whole number of {} pages", first.size)));
    }
    let mut off = 0;
    while off < len {
        t.update(s, &TObj { va: first.va + off, pa: first.pa + off, ..*first }, env)?;
        off += step;
    }
    Ok(())
}

/// The generic range iterator, built on `find` only. Drivers' optimized iterators are tested
/// against it.
pub fn generic_for_each<T: Tdb + ?Sized>(t: &mut T, s: &mut T::Space, start: u64, end: u64, env: &mut TdbEnv, f: &mut dyn FnMut(&TObj)) {
    let mut va = PageSize::K4.align_down(start);
    while va < end {
        env.cost.add(Event::Call, 1);
        match t.find(s, va, env) {
            Some(o) => {
                if o.va >= start {
                    f(&o);
                }
                va = o.end();
            }
            None => va += PageSize::K4.bytes(),
        }
    }
}

/// The generic emptiness check, built on `find` only.
pub fn generic_range_is_empty<T: Tdb + ?Sized>(t: &mut T, s: &mut T::Space, start: u64, end: u64, env: &mut TdbEnv) -> bool {
    let mut va = PageSize::K4.align_down(start);
    while va < end {
        env.cost.add(Event::Call, 1);
        if t.find(s, va, env).is_some() {
            return false;
        }
        va += PageSize::K4.bytes();
    }
    true
}
