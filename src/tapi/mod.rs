//! The translation API shared by MMU drivers and the OS (EMT, OSDI'25 §4), and nothing else:
//!
//! - [`TObj`] — a translation object: one mapping, by attribute ([`tobj`]);
//! - [`Tdb`] — the translation database every driver implements: basic functions plus
//!   customizable ones with generic defaults ([`tdb`]), reporting their work to [`OsCost`]
//!   ([`cost`]);
//! - [`Tsvc`] — the translation service: switch, flush, shoot down, per core ([`tsvc`]);
//! - [`Driver`] — the walker core every design implements: a hardware walk producing a
//!   [`WalkPlan`] and [`Translation`] ([`walk`]), walk caches, leaf sizes ([`driver`]);
//! - opt-in capabilities, each a small trait: side structures looked up beside the L2 TLB
//!   ([`side`]), frame placement, walk-watching migration and in-memory TLBs ([`policy`]),
//!   memory-side translation for accelerators ([`memside`]).
//!
//! This layer sits just above [`crate::addr`]: it names no concrete design, no OS internals
//! and no simulator type (`tests/it/layers.rs` enforces the import order of DESIGN.md).

pub mod cost;
pub mod driver;
#[cfg(test)]
pub mod flat;
pub mod memside;
pub mod policy;
pub mod side;
pub mod tdb;
pub mod tobj;
pub mod tsvc;
pub mod walk;

pub use cost::{Event, Func, OsCost, OsCostModel, Path};
pub use driver::Driver;
pub use memside::{MemorySide, MemoryTranslation};
pub use policy::{Evict, EvictTo, FramePlacement, MemoryTlb, MigrationPolicy, MigrationRequest, Placement};
pub use side::{SideLookup, SideStart, SideTiming};
pub use tdb::{generic_for_each, generic_map_range, generic_range_is_empty, Frames, Tdb, TdbEnv};
pub use tobj::{prot, HugeAdvice, MapFlags, TObj};
pub use tsvc::{Shootdown, Tsvc};
pub use walk::{NoSharedTlb, SharedTlb, Translation, WalkPlan, WalkRef};
