//! xlate: a trace-driven simulator of virtual-memory address translation under a simulated OS.
//!
//! Layers (see `docs/architecture.md` and the project's DESIGN.md): [`addr`] → [`trace`],
//! [`workload`] → [`mem`] → [`mmu`] → [`os`] → [`arch`] (the MMU drivers) → [`timing`] → [`sim`] →
//! [`report`]. Dependencies point down only, except that drivers implement the OS's translation
//! API and the MMU's walk interface.
#![warn(missing_docs)]

pub mod addr;
pub mod arch;
pub mod config;
pub mod error;
pub mod fsutil;
#[doc(hidden)]
pub mod fuzz;
pub mod hostmem;
pub mod mem;
pub mod mmu;
pub mod os;
pub mod report;
pub mod reproduce;
pub mod rng;
pub mod sim;
#[doc(hidden)]
pub mod stress;
pub mod sweep;
pub mod tapi;
pub mod timing;
pub mod trace;
pub mod workload;
