//! The integration tests, as one test binary: one link and one copy of the simulator loops the
//! tests instantiate, where a binary per file built them 17 times (the release test build was
//! most of CI's time). `tests/golden.rs` and `tests/fuzz.rs` (its own global allocator) stay
//! binaries of their own. Run one file's tests with `cargo test --release --test it nested::`.

#[path = "../common/mod.rs"]
mod common;

mod baselines;
mod cli;
mod conformance;
mod differential;
mod ecpt;
mod elastic;
mod findings;
mod fpt;
mod layers;
mod machine;
mod nested;
mod qemu_trace;
mod report_html;
mod sparta;
mod stress;
mod sweep;
mod trace_threads;
mod utopia;
