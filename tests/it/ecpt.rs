//! ECPT end to end: table maintenance under checked mode, and the walk shape against radix.

use crate::common;
use common::*;

fn driver_u64(r: &xlate::sim::RunOutput, key: &str) -> u64 {
    r.driver.get(key).and_then(|v| v.as_u64()).unwrap_or_else(|| panic!("no driver metric {key}: {:?}", r.driver))
}

#[test]
fn ecpt_designs_are_registered() {
    for name in ["ecpt", "ecpt-thp", "ech", "ecph-virtuoso"] {
        assert!(xlate::arch::lookup(name).is_ok(), "{name}");
    }
    let c = config("ech", &[]);
    assert_eq!((c.arch.ecpt.ways, c.arch.ecpt.entries_per_way, c.arch.ecpt.resize_scale), (4, 8192, 10));
    let c = config("ecph-virtuoso", &["arch.ecpt.optimized_api=false"]);
    assert_eq!((c.arch.ecpt.ways, c.arch.ecpt.entries_per_way), (2, 262_144));
    assert!(!c.arch.ecpt.optimized_api);
}

/// Tiny initial ways force cuckoo kicks, resizes and gradual migrations while the program runs;
/// checked mode compares every walk (and every CWC hit) with the OS's ground truth.
#[test]
fn resizes_and_kicks_under_checked_mode() {
    let r = run(
        "ecpt",
        &[
            "workload.name=\"gups\"",
            "workload.params.table=64M",
            "workload.params.updates=60000",
            "workload.params.populate=false",
            "sim.checked=true",
            "arch.ecpt.entries_per_way=64",
        ],
    );
    assert_eq!(r.core.checked, r.core.accesses);
    assert!(driver_u64(&r, "resizes") > 0, "{:?}", r.driver);
    assert!(driver_u64(&r, "kicks") > 0, "{:?}", r.driver);
    assert!(driver_u64(&r, "entries_moved") > 0);
    // 2 MiB clusters: THP on, two entries per way filled up to the brim before resizing, so
    // 2 MiB clusters are kicked between ways and the PMD-CWT headers naming their way change
    // under the CWCs, as do the headers of sections that gain their first page. The OS rewrites
    // the headers but invalidates no CWC (EMT's kernel has no such flush); a walk that a stale
    // line sends to the wrong ways finds nothing there and probes the other ways.
    let r = run(
        "ecpt-thp",
        &[
            "workload.name=\"gups\"",
            "workload.params.table=256M",
            "workload.params.updates=60000",
            "workload.params.populate=false",
            "sim.checked=true",
            "arch.ecpt.entries_per_way=2",
            "arch.ecpt.resize_threshold=1.0",
            "arch.ecpt.resize_scale=2",
        ],
    );
    assert_eq!(r.core.checked, r.core.accesses);
    assert!(r.os.faults_thp >= 128);
    assert!(driver_u64(&r, "kicks_2m") > 0 && driver_u64(&r, "resizes_2m") > 0, "{:?}", r.driver);
    assert!(driver_u64(&r, "stale_cwc_fallbacks") > 0, "{:?}", r.driver);
    assert_eq!(r.os.walk_cache_shootdowns, 0);
}

/// EMT §8.5 / Utopia §3: ECPT walks are shorter (parallel probes) but issue more references.
#[test]
fn gups_ecpt_walks_fewer_steps_more_references_than_radix4() {
    let sets = ["workload.name=\"gups\"", "workload.params.table=1G", "workload.params.updates=100000", "os.memory=2G"];
    let radix = run("radix4", &sets);
    let ecpt = run("ecpt", &sets);
    let (rs, es) = (metric(&radix, "walk_serial_steps_per_walk"), metric(&ecpt, "walk_serial_steps_per_walk"));
    let (rr, er) = (metric(&radix, "walk_refs_per_walk"), metric(&ecpt, "walk_refs_per_walk"));
    assert!(es < rs, "serial steps: ecpt {es} vs radix4 {rs}");
    assert!(er > rr, "refs per walk: ecpt {er} vs radix4 {rr}");
    assert!(metric(&ecpt, "walk_latency_avg") < metric(&radix, "walk_latency_avg"));
}
