//! The OS cost counters every translation-API function reports its work to, and the cycles
//! charged per counted event.

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
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OsCost {
    counts: [[[u64; EVENTS]; FUNCS]; PATHS],
    /// Latencies the OS waits for that are not counted events (page-copy DMA, swap I/O), per path.
    fixed: [u64; PATHS],
    // Transient: which path and function work is being charged to right now.
    #[serde(skip)]
    path: Option<Path>,
    #[serde(skip)]
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
