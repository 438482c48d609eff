//! SPARTA, its conventional baseline and DIPTA on accelerators: checked runs (every translation
//! equals the OS's and every frame lies in its virtual address's partition) over the index
//! traversals, threads, a multiprogrammed mix and memory pressure; and the headline direction.

use crate::common;
use common::*;

/// Accelerator designs and the settings that scale them to the 2 GiB test machine.
const DESIGNS: &[&str] = &[
    "accel-conventional",
    "accel-conventional-2m",
    "accel-iommu",
    "sparta-4",
    "sparta-8",
    "sparta-32",
    "sparta-128",
    "sparta-8-2m",
    "sparta-32-2m",
];

fn sets<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["sim.checked=true"];
    v.extend_from_slice(extra);
    v
}

#[test]
fn every_accelerator_design_agrees_with_the_os() {
    let workloads: &[&[&str]] = &[
        &["workload.name=\"bst-ext\"", "workload.params.footprint=256M", "workload.params.threads=4", "workload.params.max_accesses=150000"],
        &["workload.name=\"hashtable\"", "workload.params.footprint=128M", "workload.params.max_accesses=100000"],
        &["workload.mix=[{name=\"bst-int\", params={footprint=\"64M\", max_accesses=\"40000\"}}, {name=\"skiplist\", params={footprint=\"64M\", max_accesses=\"40000\"}}]"],
    ];
    for d in DESIGNS {
        for w in workloads {
            let r = run(d, &sets(w));
            let a = r.accel.as_ref().expect("an accelerator run");
            assert!(a.accesses > 50_000, "{d}: ran {} accesses", a.accesses);
            assert_eq!(r.core.checked, a.cache_misses, "{d} {w:?}: every memory-bound operation checked");
        }
    }
}

/// A footprint twice the memory: partitions fill and swap (never spill), conventional memory
/// swaps; every translation still checks out.
#[test]
fn memory_pressure_swaps_within_partitions() {
    let w = ["workload.name=\"bst-ext\"", "workload.params.footprint=512M", "workload.params.max_accesses=100000", "os.memory=256M"];
    for d in ["sparta-8", "sparta-32", "accel-conventional", "dipta"] {
        let r = run(d, &sets(&w));
        assert!(r.os.swap_outs > 0, "{d}: memory pressure swaps: {:?}", r.os);
    }
}

/// §7.5's direction on the built-in defaults (scaled): SPARTA ahead of the conventional baseline,
/// more partitions leaving less translation overhead, ideal translation ahead of all.
#[test]
fn sparta_beats_the_conventional_baseline() {
    let w =
        ["workload.name=\"bst-ext\"", "workload.params.footprint=1G", "workload.params.threads=8", "workload.params.max_accesses=400000"];
    let runs: Vec<_> = ["accel-conventional", "sparta-8", "sparta-32", "accel-ideal"].iter().map(|d| run(d, &w)).collect();
    let [conv, s8, s32, ideal] = [0, 1, 2, 3].map(|i| runs[i].cycles);
    assert!(s8 < conv && s32 < conv, "SPARTA-8 {s8}, SPARTA-32 {s32} vs conventional {conv}");
    assert!(ideal < s8 && ideal < s32, "ideal {ideal}");
    let overhead = |i: usize| metric(&runs[i], "translation_overhead_cycles");
    assert!(overhead(2) < overhead(1) && overhead(1) < overhead(0), "overheads {} {} {}", overhead(0), overhead(1), overhead(2));
    assert_eq!(overhead(3), 0.0);
}

/// §5: a copy-on-write copy lands in the page's partition. A forked snapshot (the child idle)
/// makes every first store of the parent copy its page; checked mode verifies each translation
/// and that each frame lies in its virtual address's partition. DIPTA cannot share a frame.
#[test]
fn copy_on_write_copies_stay_in_their_partition() {
    let w =
        ["workload.name=\"kvstore\"", "workload.params.footprint=128M", "workload.params.max_accesses=150000", "sim.fork_after_setup=true"];
    for d in ["sparta-8", "sparta-32-2m", "accel-conventional"] {
        let r = run(d, &sets(&w));
        assert!(r.os.cow_copies > 0, "{d}: the parent's stores copied pages: {:?}", r.os);
        assert!(r.os.cow_shared_pages > 0);
    }
    let cfg = config("dipta", &sets(&w));
    let e = xlate::sim::run(xlate::arch::lookup("dipta").unwrap(), &cfg, &[], false).expect_err("DIPTA refuses to share a frame");
    assert!(e.to_string().contains("copy-on-write"), "{e}");
}

/// DIPTA has no synonyms: sharing a region with another address space is refused clearly.
#[test]
fn dipta_refuses_to_share_a_frame() {
    use xlate::arch::dipta::{Dipta, DiptaConfig};
    use xlate::os::{Os, OsConfig};
    let cfg = OsConfig { memory: 256 << 20, thp: xlate::os::ThpMode::Never, ..OsConfig::default() };
    let mut os = Os::boot(Dipta::new(&DiptaConfig { partitions: 4, ..DiptaConfig::default() }), &cfg, 1).unwrap();
    let a = os.spawn(false).unwrap();
    let b = os.spawn(false).unwrap();
    let base = os.mmap(a, 16 << 12, xlate::tapi::MapFlags::default()).unwrap();
    for i in 0..16 {
        os.fault(a, base + (i << 12)).unwrap();
    }
    let e = os.share(a, base, b).expect_err("a frame cannot hold two virtual pages");
    assert!(e.to_string().contains("synonym"), "{e}");
}
