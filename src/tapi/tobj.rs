//! Translation objects (EMT §4.1): one mapping, read and written by attribute, and the flags a
//! region is mapped with.

use crate::addr::PageSize;

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

/// Huge-page advice for a mapping (what `madvise` / `MAP_HUGETLB` would say).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HugeAdvice {
    /// No advice: the OS's THP mode decides.
    #[default]
    Default,
    /// `MADV_HUGEPAGE`: use 2 MiB pages even when THP is `madvise`.
    Huge,
    /// `MADV_NOHUGEPAGE`: never a 2 MiB page.
    NoHuge,
    /// hugetlbfs-style 1 GiB pages from the boot-time pool.
    Giga,
}

/// How a region is mapped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapFlags {
    /// Huge-page advice.
    pub huge: HugeAdvice,
    /// File-backed-like (page cache) rather than anonymous.
    pub file_backed: bool,
    /// Shared between processes.
    pub shared: bool,
}
