//! The bounded slice of the stress harness (`xlate::stress`): seeded checked-mode runs of every
//! design and guest@host pair under OS churn (swap, THP and compaction, fork, processes sharing
//! cores, mixes, presets, host-side churn). No case may fail: a translation that disagrees with
//! the ground truth, a broken invariant or a panic. The long run is
//! `cargo run --release --example stress -- --minutes N` (docs/robustness.md).

use std::time::{Duration, Instant};
use xlate::stress::{case, run, Outcome};

#[test]
fn seeded_checked_runs_under_os_churn_never_fail() {
    let dir = std::env::temp_dir().join(format!("xlate-stress-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (start, budget) = (Instant::now(), Duration::from_secs(30));
    let (mut ran, mut refused, mut failures) = (0u64, 0u64, Vec::new());
    for seed in 0..1200u64 {
        if start.elapsed() > budget {
            break;
        }
        let c = case(seed, 30_000);
        match run(&c, &dir) {
            Outcome::Ok => ran += 1,
            Outcome::Refused(_) => refused += 1,
            Outcome::Failed(m) => failures.push(format!("seed {seed}: {m}\n  {}", c.command())),
        }
    }
    if failures.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(failures.is_empty(), "{} failed:\n{}", failures.len(), failures.join("\n"));
    assert!(ran >= 50 && ran > refused, "the slice must mostly run: ran {ran}, refused {refused}");
}
