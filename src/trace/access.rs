//! One memory access of a program, as every producer (trace reader, built-in workload, tracer) emits it.

/// What the access does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[repr(u8)]
pub enum AccessKind {
    /// A data read.
    #[default]
    Load = 0,
    /// A data write.
    Store = 1,
    /// An instruction fetch (looked up in the I-TLB).
    Fetch = 2,
}

/// One access. `instrs` is the number of instructions retired since the previous access of the same
/// stream (including the instruction doing this access), so per-kilo-instruction metrics are meaningful.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Access {
    /// Hardware thread that issued it (the stream index for multi-threaded producers).
    pub cpu: u16,
    /// Address space (process) id.
    pub asid: u16,
    /// Instruction pointer of the accessing instruction (0 when unknown).
    pub ip: u64,
    /// Virtual address accessed.
    pub vaddr: u64,
    /// Load, store or fetch.
    pub kind: AccessKind,
    /// Bytes accessed (1..=64).
    pub size: u8,
    /// Instructions retired since the previous access of this stream, this one included.
    pub instrs: u32,
}
