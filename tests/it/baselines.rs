//! Utopia's baselines (POM-TLB, RMM, P-TLB) in checked mode: both outcomes of their structures
//! are exercised (hits and misses), the OS paths that change translations under them (khugepaged
//! collapse, munmap) keep them coherent, and on scaled GUPS they order as they should.

use crate::common;
use common::*;
use xlate::addr::PageSize;
use xlate::arch::{lookup, pomtlb::PomTlb, rmm::Rmm, Registered};
use xlate::os::Os;
use xlate::sim::RunOutput;
use xlate::tapi::{Driver, WalkPlan};
use xlate::workload::MapFlags;

fn drv(r: &RunOutput, key: &str) -> f64 {
    r.driver.get(key).and_then(|v| v.as_f64()).unwrap_or_else(|| panic!("{}: no driver metric {key} in {:?}", r.design, r.driver))
}

const GUPS_512M: &[&str] = &["workload.name=\"gups\"", "workload.params.table=512M", "workload.params.updates=80000", "sim.checked=true"];
const FRAG: &[&str] = &["os.fragmentation.method=\"free2m\"", "os.fragmentation.target=0.9"];

fn with(base: &[&str], more: &[&str]) -> Vec<String> {
    base.iter().chain(more).map(|s| s.to_string()).collect()
}

fn run_s(design: &str, sets: &[String]) -> RunOutput {
    let v: Vec<&str> = sets.iter().map(|s| s.as_str()).collect();
    run(design, &v)
}

/// 131072 pages against 64K POM-TLB entries: some probes hit, most miss and walk.
#[test]
fn pomtlb_hits_and_misses_checked() {
    let r = run("pomtlb", GUPS_512M);
    assert_eq!(r.core.checked, r.core.accesses);
    let probes = drv(&r, "pomtlb_probes");
    let hits = drv(&r, "pomtlb_hits");
    let walks = drv(&r, "pomtlb_page_walks");
    assert_eq!(probes, r.core.walk.walks as f64, "one probe per L2 TLB miss reaching the walker");
    assert!(hits > 1000.0 && walks > 1000.0, "hits {hits}, page walks {walks}");
    assert_eq!(hits + walks, probes);
    assert!(drv(&r, "pomtlb_evictions") > 0.0, "64K entries fill up and SRRIP evicts");
    // The shared variant keeps both sizes in one array and agrees with the OS just the same.
    let s = run_s("pomtlb", &with(GUPS_512M, &["arch.pomtlb.partitions=\"shared\""]));
    assert!(drv(&s, "pomtlb_hits") > 1000.0);
    assert_eq!(drv(&s, "pomtlb_bytes"), (1 << 20) as f64);
}

/// Mixed page sizes (THP on fragmented memory: a fifth of the table in 2 MiB pages): the
/// page-size predictor meets both sizes,
/// mispredicts some, and every option's probe/walk ordering still gives the OS's frame on every
/// access (checked mode).
#[test]
fn pomtlb_predictor_and_orderings_checked_with_mixed_page_sizes() {
    let mixed = with(GUPS_512M, &["os.thp=\"always\"", "os.memory=1G", "os.fragmentation.keep_free=0"]);
    let mixed = with(&mixed.iter().map(|s| s.as_str()).collect::<Vec<_>>(), FRAG);
    let r = run_s("pomtlb", &mixed);
    assert_eq!(r.core.checked, r.core.accesses);
    assert!(metric(&r, "coverage_4k") > 0.0 && metric(&r, "coverage_2m") > 0.0, "both sizes mapped");
    assert!(drv(&r, "pomtlb_hits_2m") > 0.0 && drv(&r, "pomtlb_hits_4k") > 0.0);
    let (pred, mis) = (drv(&r, "pomtlb_predictions"), drv(&r, "pomtlb_mispredictions"));
    assert!(mis > 0.0 && mis < pred / 2.0, "{mis} of {pred} mispredicted");
    assert_eq!(drv(&r, "pomtlb_predictor_accuracy"), 1.0 - mis / pred);
    assert!(drv(&r, "pomtlb_second_probes") >= drv(&r, "pomtlb_page_walks"), "every miss reads both partitions");
    assert_eq!(drv(&r, "pomtlb_fill_writes"), drv(&r, "pomtlb_fills"));
    for opts in [
        &["arch.pomtlb.probe=\"parallel\""][..],
        &["arch.pomtlb.walk=\"parallel\""],
        &["arch.pomtlb.set_read=\"first_line\"", "arch.pomtlb.fill=\"untimed\"", "arch.pomtlb.partitions=\"shared\""],
    ] {
        let o = run_s("pomtlb", &with(&mixed.iter().map(|s| s.as_str()).collect::<Vec<_>>(), opts));
        assert_eq!(o.core.checked, o.core.accesses, "{opts:?}");
        assert_eq!(drv(&o, "pomtlb_hits") + drv(&o, "pomtlb_page_walks"), drv(&o, "pomtlb_probes"), "{opts:?}");
    }
}

/// khugepaged replaces 4 KiB translations the POM-TLB holds; the OS's shootdown must invalidate
/// them (checked mode fails on a stale POM-TLB hit).
#[test]
fn pomtlb_is_invalidated_by_shootdowns() {
    let sets = [
        "workload.name=\"gups\"",
        "workload.params.table=64M",
        "workload.params.updates=300000",
        "workload.params.madvise_huge=true",
        "os.thp=\"madvise\"",
        "sim.checked=true",
        "sim.epoch_accesses=5000",
        "os.khugepaged.sleep_ms=0.01",
        "os.khugepaged.pages_to_scan=2048",
    ];
    let r = run("pomtlb", &sets);
    assert_eq!(r.os.promotions, 32);
    assert!(drv(&r, "pomtlb_invalidations") > 0.0);
    assert!(drv(&r, "pomtlb_hits_4k") > 0.0, "4 KiB entries hit before the collapses");
    // The same run under RMM: collapses trim the eager ranges and shoot the range TLB down.
    let r = run("rmm", &sets);
    assert_eq!(r.os.promotions, 32);
    assert!(drv(&r, "rmm_ranges_carved") > 0.0);
    assert_eq!(r.core.checked, r.core.accesses);
}

/// Unfragmented memory: one range per VMA and the range TLB serves nearly every L2 TLB miss.
/// Fragmented memory (Virtuoso's knob, 90 % of free 2 MiB blocks broken): more, smaller ranges
/// than fit in 32 range-TLB entries, so range-TLB misses, range-table walks and page walks appear.
#[test]
fn rmm_range_tlb_hits_and_misses_checked_with_and_without_fragmentation() {
    let plain = run("rmm", GUPS_512M);
    let frag = run_s("rmm", &with(GUPS_512M, FRAG));
    for r in [&plain, &frag] {
        assert_eq!(r.core.checked, r.core.accesses);
        assert_eq!(r.os.faults(), 0, "eager paging mapped everything at mmap");
        assert!(drv(r, "rmm_range_tlb_hits") > 0.0);
        assert!(drv(r, "rmm_range_walks") >= 1.0, "at least the first lookup misses");
        assert_eq!(r.core.side.walks as f64, drv(r, "rmm_range_tlb_lookups"));
        assert_eq!(r.core.side_hits as f64, drv(r, "rmm_range_tlb_hits"));
    }
    assert_eq!(drv(&plain, "rmm_ranges_created"), 1.0, "one range for the one VMA");
    assert_eq!(drv(&plain, "rmm_range_avg_bytes"), (512 << 20) as f64);
    assert!(drv(&plain, "rmm_range_tlb_hit_rate") > 0.99);
    let (n_plain, n_frag) = (drv(&plain, "rmm_ranges_created"), drv(&frag, "rmm_ranges_created"));
    assert!(n_frag > 32.0 && n_frag > n_plain, "fragmentation makes more ranges: {n_frag} vs {n_plain}");
    assert!(drv(&frag, "rmm_range_avg_bytes") < drv(&plain, "rmm_range_avg_bytes"));
    assert!(drv(&frag, "rmm_range_tlb_hit_rate") < 0.9);
    assert!(frag.core.walk.walks > 1000, "range-TLB misses walk the page table");
    assert_eq!(frag.os.eager_runs as f64, n_frag);
}

/// Utopia §7: the 1 GiB pools survive fragmentation and restore 2 MiB pages / one range.
#[test]
fn fairness_pools() {
    let base = with(&["workload.name=\"gups\"", "workload.params.table=256M", "workload.params.updates=20000", "sim.checked=true"], FRAG);
    let thp = run_s("radix4-thp", &base);
    let pooled = run_s("radix4-thp", &with(&base.iter().map(|s| s.as_str()).collect::<Vec<_>>(), &["os.thp_pool=1G"]));
    assert!(thp.os.faults_thp < 128, "fragmented: few THPs ({})", thp.os.faults_thp);
    assert_eq!(pooled.os.faults_thp, 128, "the pool serves the whole 256 MiB table");
    let rmm = run_s("rmm", &base);
    let pooled = run_s("rmm", &with(&base.iter().map(|s| s.as_str()).collect::<Vec<_>>(), &["os.eager_pool=1G"]));
    assert!(drv(&rmm, "rmm_ranges_created") > 1.0);
    assert_eq!(drv(&pooled, "rmm_ranges_created"), 1.0, "the reserved block holds the table in one range");
    // The pools are opt-in: defaults carve nothing and eager_pool needs eager paging.
    let c = config("radix4", &[]);
    assert_eq!((c.os.thp_pool, c.os.eager_pool, c.os.eager_paging), (0, 0, false));
    assert!(xlate::config::Layers { sets: vec!["os.eager_pool=1G".into()], ..Default::default() }
        .resolve(Some(lookup("radix4").unwrap()))
        .is_err());
}

/// munmap through the OS: RMM's range is trimmed and the POM-TLB entry of the page is
/// invalidated by the shootdown hook.
#[test]
fn munmap_trims_ranges_and_invalidates_the_pom_tlb() {
    let mut cfg = config("rmm", &[]);
    let mut os = Os::boot(Rmm::from_config(&Rmm::config(&cfg.arch), cfg.seed).unwrap(), &cfg.os, 1).unwrap();
    let asid = os.spawn(false).unwrap();
    let a = os.mmap(asid, 64 << 20, MapFlags::default()).unwrap();
    let b = os.mmap(asid, 8 << 20, MapFlags::default()).unwrap();
    assert_eq!(os.stats.eager_runs, 2);
    assert_eq!(os.procs[0].space.table().len(), 2);
    assert_eq!(os.truth(asid, a + 0x1234).unwrap().paddr(a + 0x1234) + 0x1000, os.truth(asid, a + 0x2234).unwrap().paddr(a + 0x2234));
    os.munmap(asid, a + (16 << 20), 4 << 20).unwrap();
    assert_eq!(os.procs[0].space.table().len(), 3, "the first range split around the hole");
    os.munmap(asid, b, 8 << 20).unwrap();
    assert_eq!(os.procs[0].space.table().len(), 2);
    assert_eq!(os.driver.stats.ranges_live, 2);

    cfg = config("pomtlb", &[]);
    let pom: PomTlb = PomTlb::from_config(&PomTlb::config(&cfg.arch), cfg.seed).unwrap();
    let mut os = Os::boot(pom, &cfg.os, 1).unwrap();
    let asid = os.spawn(false).unwrap();
    let a = os.mmap(asid, 4 << 20, MapFlags::default()).unwrap();
    os.populate(asid, a, 4 << 20).unwrap();
    let mut wc = os.driver.new_walk_cache();
    let mut plan = WalkPlan::default();
    for va in [a, a + 0x1000, a + (2 << 20)] {
        os.driver.walk(&mut os.procs[asid as usize].space, &mut wc, asid, va, &mut plan).unwrap();
    }
    assert_eq!(os.driver.stats.fills, 3);
    os.munmap(asid, a, 0x2000).unwrap();
    assert_eq!(os.driver.stats.invalidations, 2);
    assert_eq!(os.pending.len(), 1);
    os.driver.invalidate_walk_cache(&mut wc, asid, a, a + 0x2000);
    plan.clear();
    assert!(
        os.driver.walk(&mut os.procs[asid as usize].space, &mut wc, asid, a + 0x1000, &mut plan).is_none(),
        "unmapped: no stale POM-TLB hit"
    );
    plan.clear();
    assert_eq!(os.driver.walk(&mut os.procs[asid as usize].space, &mut wc, asid, a + (2 << 20), &mut plan).unwrap().size, PageSize::K4);
    assert_eq!(os.driver.stats.hits[0], 1);
}

/// Scaled GUPS (1 GiB table, 4 GiB machine): RMM and POM-TLB walk the page table less than
/// radix4, P-TLB never walks, and speedups over radix4 order as expected (P-TLB highest).
#[test]
fn scaled_gups_orders_the_baselines() {
    let sets = ["workload.name=\"gups\"", "workload.params.table=1G", "workload.params.updates=100000", "os.memory=4G"];
    let radix = run("radix4", &sets);
    let pom = run("pomtlb", &sets);
    let rmm = run("rmm", &sets);
    let ptlb = run("ptlb", &sets);
    let rw = radix.core.walk.walks as f64;
    assert!(drv(&pom, "pomtlb_page_walks") < 0.9 * rw, "POM-TLB hits save page walks");
    assert!((rmm.core.walk.walks as f64) < 0.01 * rw, "one range covers the table: {} walks", rmm.core.walk.walks);
    assert_eq!(ptlb.core.walk.walks, 0);
    let speedup = |r: &RunOutput| radix.cycles / r.cycles;
    let (sp, sr, st) = (speedup(&pom), speedup(&rmm), speedup(&ptlb));
    assert!(st > sr && sr > sp, "P-TLB {st:.3} > RMM {sr:.3} > POM-TLB {sp:.3}");
    assert!(sr > 1.5, "RMM {sr:.3}");
    // With 4 KiB pages a 64K-entry POM-TLB covers a quarter of the table; its probes sit in front
    // of every page walk, so it may lose a little, never much.
    assert!((0.7..1.3).contains(&sp), "POM-TLB {sp:.3}");
    assert!(metric(&rmm, "walk_latency_avg") > 0.0 && metric(&rmm, "side_walk_hit_rate") > 0.99);
}

/// Eager paging of a VMA larger than free memory maps what fits and leaves the mapping's tables
/// room: the rest of the VMA is demand-paged, swapping. It used to take every free frame, and
/// the first table page of the mapping then failed with "out of memory" although swap was on.
#[test]
fn eager_paging_beyond_memory_leaves_the_tables_room() {
    let sets = ["workload.name=\"gups\"", "workload.params.table=256M", "workload.params.updates=40000", "sim.checked=true"];
    let r = run_s("rmm", &with(&sets, &["os.memory=160M", "os.swap.enabled=true"]));
    assert_eq!(r.core.checked, r.core.accesses);
    assert!(r.os.eager_bytes > 64 << 20 && r.os.eager_bytes < 160 << 20, "what fitted was mapped eagerly: {:?}", r.os);
    assert!(r.os.faults() > 0 && r.os.swap_outs > 0, "the rest was demand-paged, swapping: {:?}", r.os);
}
