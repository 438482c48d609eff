//! Memory-side translation (SPARTA, DIPTA): a design whose translation happens next to memory,
//! not in the requester. The virtual address alone names the memory partition that holds the
//! page, so a request can be routed there before it is translated; the partition then translates
//! with its own hardware, overlapped with the trip there. Offered through
//! [`super::Driver::memory_side`]; the accelerator engine in `sim` is the only user.

/// How a partition translates a request that reached it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryTranslation {
    /// A per-partition TLB shared by every requester, backed by the driver's walk of the
    /// partition's own table (SPARTA §4.2): a miss costs the walk's references, all local.
    PartitionTlb,
    /// The partition's table is probed beside a data fetch from a predicted frame (DIPTA,
    /// set-associative virtual memory): a correct prediction hides the translation, a wrong one
    /// refetches from the frame the table names.
    PredictedFrame,
}

/// A memory-side translation design (opt-in capability).
pub trait MemorySide {
    /// Number of memory partitions: physical memory splits into this many equal contiguous
    /// ranges, partition `p` being the `p`-th.
    fn partitions(&self) -> u32;

    /// The partition that holds the page of `va` in address space `asid` (the hardware's routing
    /// hash; the placement policy uses the same function, so every frame lies in its page's
    /// partition).
    fn partition_of(&self, asid: u16, va: u64) -> u32;

    /// How a partition translates.
    fn kind(&self) -> MemoryTranslation;

    /// The address a partition's TLB is indexed and tagged with for `va`: `va` with the routing
    /// bits taken out when that is one-to-one within a partition (every page of a partition has
    /// the same routing bits, so indexing with them would put every page in the same set).
    /// Default: `va`.
    #[inline]
    fn tlb_va(&self, va: u64) -> u64 {
        va
    }

    /// The range of [`MemorySide::tlb_va`] addresses a shootdown of `[start, end)` must drop in
    /// a partition's TLB (a superset when routing bits were taken out). Default: the range.
    fn tlb_range(&self, start: u64, end: u64) -> (u64, u64) {
        (start, end)
    }

    /// [`MemoryTranslation::PredictedFrame`]: the physical address the partition's predictor
    /// guesses for `va` (`None`: no prediction; the fetch waits for the table). Default: `None`.
    fn predict(&mut self, _asid: u16, _va: u64) -> Option<u64> {
        None
    }

    /// Trains the predictor with the translation the table gave (`pa` of `va`). Default: nothing.
    fn train(&mut self, _asid: u16, _va: u64, _pa: u64) {}
}
