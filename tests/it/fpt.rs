//! FPT under the simulated OS: huge-page rules through the fault path, 1 GiB pages end to end, and
//! the radix-vs-FPT comparison EMT reports (fewer serial walk steps, similar page-fault work).

use crate::common;
use common::*;
use std::process::Command;
use xlate::addr::PageSize;
use xlate::arch::fpt::{Flatten, Fpt, FptConfig};
use xlate::os::{Os, OsConfig};
use xlate::tapi::Driver;
use xlate::tapi::WalkPlan;
use xlate::workload::{HugeAdvice, MapFlags};

const GUPS_64M: &[&str] = &["workload.name=\"gups\"", "workload.params.table=64M", "workload.params.updates=60000", "sim.checked=true"];

/// L2L1 flattening holds 4 KiB pages only: with THP always, every fault that wanted 2 MiB falls
/// back to 4 KiB and is counted as a driver fallback; khugepaged collapses nothing.
#[test]
fn l2l1_thp_always_falls_back_to_4k() {
    let mut sets = GUPS_64M.to_vec();
    sets.extend(["os.thp=always", "sim.epoch_accesses=5000", "os.khugepaged.sleep_ms=0.01"]);
    for design in ["fpt-l2l1", "fpt-l4l3-l2l1"] {
        let r = run(design, &sets);
        assert_eq!(r.os.faults_thp, 0, "{design}");
        assert_eq!(r.os.faults_4k, 16384, "{design}: 64 MiB in 4 KiB pages");
        assert_eq!(r.os.thp_fallback_driver, r.os.faults_4k, "{design}: every fault wanted a THP");
        assert_eq!(r.os.promotions, 0, "{design}");
        assert!(r.os.khugepaged_scans > 0, "{design}: khugepaged ran");
        assert_eq!(metric(&r, "thp_fallbacks"), 16384.0);
    }
    // The same run on L3L2 flattening maps 2 MiB pages as merged-node entries.
    let r = run("fpt-l3l2", &sets);
    assert_eq!((r.os.faults_thp, r.os.thp_fallback_driver), (32, 0));
    assert_eq!(r.coverage[PageSize::M2.index()], 64 << 20);
}

#[test]
fn l3l2_thp_design() {
    let r = run("fpt-l3l2-thp", GUPS_64M);
    assert_eq!(r.os.faults_thp, 32);
    assert_eq!(r.driver["flatten"], "l3l2");
    // Root L4 table + one L3L2 node holding the 2 MiB leaves.
    assert_eq!(r.table_bytes, 4096 + (2 << 20));
    assert!(metric(&r, "walk_refs_unfiltered_per_walk") <= 2.0 + 1e-9, "L4 + merged L3L2 entry");
}

/// 1 GiB hugetlb pages through the OS on every pattern: in L3L2 nodes they fill 512 merged entries;
/// munmap removes them and frees the emptied nodes.
#[test]
fn one_gig_pages_through_the_os() {
    for f in [Flatten::L3L2, Flatten::L4L3L2L1, Flatten::L4L3, Flatten::L2L1] {
        let cfg = OsConfig { memory: 4 << 30, hugetlb_1g: 1 << 30, ..OsConfig::default() };
        let mut os = Os::boot(Fpt::new(&FptConfig { flatten: f, ..FptConfig::default() }), &cfg, 1).unwrap();
        let asid = os.spawn(false).unwrap();
        let root = os.table_bytes();
        let giga = os.mmap(asid, 1 << 30, MapFlags { huge: HugeAdvice::Giga, ..MapFlags::default() }).unwrap();
        let small = os.mmap(asid, 4 << 20, MapFlags::default()).unwrap();
        os.populate(asid, giga, 1 << 30).unwrap();
        os.populate(asid, small, 4 << 20).unwrap();
        assert_eq!(os.stats.faults_1g, 1, "{f:?}");
        let mut wc = os.driver.new_walk_cache();
        for va in [giga, giga + 0x1234_5678, giga + (1 << 30) - 8, small + 0x3f_f000] {
            let mut plan = WalkPlan { checked: true, ..WalkPlan::default() };
            let t = os.driver.walk(&mut os.procs[asid as usize].space, &mut wc, asid, va, &mut plan).unwrap();
            assert_eq!(Some(t), os.truth(asid, va), "{f:?} {va:#x}");
            assert!(plan.violation.is_none());
        }
        os.munmap(asid, giga, 1 << 30).unwrap();
        os.munmap(asid, small, 4 << 20).unwrap();
        assert_eq!(os.table_bytes(), root, "{f:?}: only the root is left");
        for sd in std::mem::take(&mut os.pending) {
            os.driver.invalidate_walk_cache(&mut wc, sd.asid, sd.start, sd.end);
        }
        let mut plan = WalkPlan::default();
        assert!(os.driver.walk(&mut os.procs[asid as usize].space, &mut wc, asid, giga + 0x1234_5678, &mut plan).is_none());
    }
}

/// Every FPT design and radix4 agree on what is mapped; FPT only changes how it is found.
#[test]
fn fpt_designs_map_what_radix_maps() {
    let base = run("radix4", GUPS_64M);
    for d in ["fpt-l4l3-l2l1", "fpt-l3l2", "fpt-l4l3", "fpt-l2l1"] {
        let r = run(d, GUPS_64M);
        assert_eq!(r.core.walk.walks, base.core.walk.walks, "{d}: same TLB behaviour");
        assert_eq!(r.os.faults(), base.os.faults());
        assert_eq!(r.coverage, base.coverage);
        let unf = metric(&r, "walk_refs_unfiltered_per_walk");
        let levels = if d == "fpt-l4l3-l2l1" { 2.0 } else { 3.0 };
        assert!((unf - levels).abs() < 1e-9, "{d}: {unf} references per walk without PWCs");
    }
}

/// EMT §8.5.2 on a scaled GUPS: FPT L4L3+L2L1 halves the walk (fewer serial steps, lower latency)
/// and its page-fault work is close to radix's (EMT measured 0.96x the kernel instructions).
#[test]
fn compare_radix4_and_fpt_on_gups() {
    let scratch = crate::common::Scratch::new("fpt-compare");
    let json = scratch.path("cmp.json");
    let out = Command::new(env!("CARGO_BIN_EXE_xlate"))
        .args(["compare", "--designs", "radix4,fpt-l4l3-l2l1", "--workload", "gups", "--quiet", "--checked"])
        .args(["--set", "workload.params.table=1G", "--set", "workload.params.updates=100000", "--set", "os.memory=2G"])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let m = |i: usize, k: &str| v[i]["metrics"][k].as_f64().unwrap_or_else(|| panic!("{k}"));
    assert_eq!(v[1]["design"], "fpt-l4l3-l2l1");
    assert_eq!(m(0, "walks"), m(1, "walks"));
    let (rs, fs) = (m(0, "walk_serial_steps_per_walk"), m(1, "walk_serial_steps_per_walk"));
    assert!(fs < rs && fs <= 1.05, "serial steps per walk: radix {rs}, FPT {fs}");
    assert!(m(1, "walk_latency_avg") < m(0, "walk_latency_avg"));
    assert_eq!(m(1, "walk_refs_unfiltered_per_walk"), 2.0);
    assert_eq!(m(0, "walk_refs_unfiltered_per_walk"), 4.0);
    // Page-fault work: the same faults, allocations and zeroing; FPT reads 2 entries per lookup
    // where radix reads 4, so raw operation counts drop more than cycle-weighted work does.
    assert_eq!(m(0, "page_faults"), m(1, "page_faults"));
    let ops = m(1, "os_ops_fault") / m(0, "os_ops_fault");
    let cyc = m(1, "os_cycles_fault") / m(0, "os_cycles_fault");
    assert!((0.6..=1.05).contains(&ops), "os_ops_fault FPT/radix {ops}");
    assert!((0.85..=1.05).contains(&cyc), "os_cycles_fault FPT/radix {cyc} (EMT: 0.96)");
    assert_eq!(v[1]["driver"]["flattened_nodes"], 2, "L4L3 root + one L2L1 node for the 1 GiB table");
}

/// khugepaged collapses 4 KiB-populated regions into 2 MiB entries of the L3L2 node while GUPS runs;
/// the freed L1 tables' PWC entries must have been shot down, or checked mode fails the run.
#[test]
fn l3l2_promotion_under_checked_mode() {
    let sets = [
        "workload.name=\"gups\"",
        "workload.params.table=64M",
        "workload.params.updates=300000",
        "workload.params.madvise_huge=true",
        "os.thp=madvise",
        "sim.checked=true",
        "sim.epoch_accesses=5000",
        "os.khugepaged.sleep_ms=0.01",
        "os.khugepaged.pages_to_scan=2048",
    ];
    let r = run("fpt-l3l2", &sets);
    assert_eq!(r.os.promotions, 32, "{:?}", r.os);
    assert_eq!(r.coverage[PageSize::M2.index()], 64 << 20);
    assert_eq!(r.driver["nodes_l1"], 0, "every L1 table freed by the collapses");
    assert_eq!(r.table_bytes, 4096 + (2 << 20));
}

/// With no free 2 MiB block, every flattened node falls back to 4 KiB tables: the run still
/// agrees with the OS on every access and walks like a radix tree.
#[test]
fn fragmented_memory_falls_back_to_radix_tables() {
    let mut sets = GUPS_64M.to_vec();
    sets.extend(["os.fragmentation.method=\"free2m\"", "os.fragmentation.target=1.0"]);
    let r = run("fpt-l4l3-l2l1", &sets);
    assert_eq!(r.driver["flattened_nodes"], 0);
    assert_eq!(r.driver["flatten_fallbacks"], 2, "root and the L2L1 node");
    assert_eq!(r.driver["nodes_l1"], 32);
    assert_eq!(metric(&r, "walk_refs_unfiltered_per_walk"), 4.0);
    assert_eq!(r.core.checked, r.core.accesses);
}
