//! The differential test: every design, every built-in core workload, in checked mode. Each walk's
//! frame and each TLB hit is compared with the OS's ground truth (a violation fails the run), so
//! a design passes only if its translation structures agree with the OS on every access.

use crate::common;
use common::*;

const WORKLOADS: &[(&str, &[&str])] = &[
    ("gups", &["workload.name=\"gups\"", "workload.params.table=256M", "workload.params.updates=60000"]),
    (
        "gups-nopop",
        &["workload.name=\"gups\"", "workload.params.table=64M", "workload.params.updates=60000", "workload.params.populate=false"],
    ),
    ("stream", &["workload.name=\"stream\"", "workload.params.footprint=48M", "workload.params.stride=64"]),
    ("ptrchase", &["workload.name=\"ptrchase\"", "workload.params.footprint=32M", "workload.params.steps=110000"]),
    // Faults, munmaps and mmaps that get the same addresses back: a translation that outlives its
    // round's munmap in any TLB or walk cache is a mismatch here.
    (
        "pagefault",
        &["workload.name=\"pagefault\"", "workload.params.region=4M", "workload.params.stride=1K", "workload.params.max_accesses=110000"],
    ),
];

#[test]
fn every_design_agrees_with_the_os_on_every_access() {
    for d in xlate::arch::designs() {
        for (wname, sets) in WORKLOADS {
            let mut s = sets.to_vec();
            s.push("sim.checked=true");
            s.extend(scaled(d.name));
            let r = run(d.name, &s);
            assert!(r.core.accesses > 100_000, "{} {wname}: ran only {} accesses", d.name, r.core.accesses);
            if let Some(a) = &r.accel {
                // Accelerators: every operation that left the virtual cache was translated once
                // (an accelerator-side or memory-side TLB hit, or a walk), and checked; ideal
                // translation reads the ground truth itself.
                if !r.config.accel.ideal {
                    assert_eq!(r.core.checked, a.cache_misses, "{} {wname}: every memory-bound operation checked", d.name);
                }
            } else if !r.config.mmu.perfect_tlb {
                // One comparison per access: its L1 hit, L2 hit or final walk.
                assert_eq!(r.core.checked, r.core.accesses, "{} {wname}: every access checked", d.name);
            }
        }
    }
}

/// khugepaged collapses regions while the program runs; every TLB and walk-cache entry that a
/// collapse made stale must have been shot down, or checked mode fails the run.
#[test]
fn promotion_under_checked_mode() {
    let base = [
        "workload.name=\"gups\"",
        "workload.params.table=64M",
        "workload.params.updates=300000",
        "os.thp=madvise",
        "sim.checked=true",
        "sim.epoch_accesses=5000",
        "os.khugepaged.sleep_ms=0.01",
        "os.khugepaged.pages_to_scan=2048",
    ];
    // Without advice nothing is eligible.
    let r = run("radix4-thp", &base);
    assert_eq!(r.os.promotions, 0);
    assert_eq!(r.os.faults_thp, 0);
    // Advised after initialisation: the 4 KiB-populated table is collapsed while GUPS runs.
    let mut advised = base.to_vec();
    advised.push("workload.params.madvise_huge=true");
    let r = run("radix4-thp", &advised);
    assert_eq!(r.os.promotions, 32, "every 2 MiB region of the 64 MiB table collapsed: {:?}", r.os);
    assert_eq!(r.coverage[xlate::addr::PageSize::M2.index()], 64 << 20);
    assert!(r.os.shootdowns >= 32);
    assert!(metric(&r, "os_ops_promote") > 0.0);
}

/// Compaction on fragmented memory (every 2 MiB block holds one of another tenant's pages): THP
/// faults fall back to 4 KiB, spread over every block, and khugepaged then compacts: it moves the
/// fragmenter's page and the program's own 4 KiB pages out of a block (remapped and shot down) and
/// collapses a region into it. khugepaged takes one region per wake-up, so most moved pages stay
/// 4 KiB and in use: without their shootdown checked mode fails this run (verified by hand: it
/// reports a stale L2 TLB hit). Without compaction nothing is promoted.
#[test]
fn compaction_under_checked_mode() {
    let sets = |compact: bool| {
        vec![
            "os.memory=1G".to_string(),
            "workload.name=\"gups\"".into(),
            "workload.params.table=64M".into(),
            "workload.params.updates=200000".into(),
            "sim.checked=true".into(),
            "sim.epoch_accesses=5000".into(),
            "os.fragmentation.method=\"free2m\"".into(),
            "os.fragmentation.target=1.0".into(),
            "os.khugepaged.sleep_ms=0.5".into(),
            "os.khugepaged.pages_to_scan=512".into(),
            format!("os.compaction.khugepaged={compact}"),
        ]
    };
    for design in ["radix4-thp", "ecpt-thp", "fpt-l3l2-thp"] {
        let s = sets(true);
        let r = run(design, &s.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(r.core.checked, r.core.accesses, "{design}");
        assert!(r.os.thp_fallback_nomem > 0 && r.os.faults_thp == 0, "{design}: {:?}", r.os);
        assert!(r.os.promotions > 0 && r.os.compactions >= r.os.promotions, "{design}: {:?}", r.os);
        assert!(r.os.compaction_pages_moved > r.os.compactions, "{design}: the program's own pages moved too: {:?}", r.os);
        assert!(r.coverage[xlate::addr::PageSize::M2.index()] > 0);
    }
    let s = sets(false);
    let r = run("radix4-thp", &s.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!((r.os.promotions, r.os.compactions), (0, 0));
    assert!(r.os.promotion_failures > 0);
    // Direct compaction at the fault: every THP fault gets its 2 MiB page from a compacted block
    // (one fragmenter page moved per block: the program has only 2 MiB pages to move, and those
    // stay).
    let mut s = sets(false);
    s.push("os.compaction.fault=true".into());
    let r = run("radix4-thp", &s.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r.core.checked, r.core.accesses);
    assert_eq!((r.os.faults_thp, r.os.thp_fallback_nomem, r.os.compactions), (32, 0, 32), "{:?}", r.os);
    assert_eq!(r.os.compaction_pages_moved, 32, "one fragmenter page per block: {:?}", r.os);
    assert_eq!(r.coverage[xlate::addr::PageSize::M2.index()], 64 << 20);
}

/// Elastic Translations with THP off at fault: 4 KiB faults placed by CoalaPaging form 64 KiB
/// groups at fault, online Leshy samples the walks and hints, and CoalaKhugepaged promotes hinted
/// regions to 32 MiB (16 contiguous 2 MiB blocks) or 2 MiB while GUPS runs — groups formed by
/// promotion replace groups broken by the removal of their pages. Checked mode fails the run on
/// any stale TLB or walk-cache entry and on any contiguous group that breaks the ARMv8 rules.
#[test]
fn elastic_translations_under_checked_mode() {
    let r = run(
        "et",
        &[
            "workload.name=\"gups\"",
            "workload.params.table=128M",
            "workload.params.updates=150000",
            "os.thp=never",
            "sim.checked=true",
            "sim.epoch_accesses=5000",
            "os.leshy.period=16",
            "os.leshy.interval_ms=1000",
            "os.coala.sleep_ms=100",
            "os.time_scale=1000",
        ],
    );
    assert!(r.os.leshy_epochs > 2 && !r.os.leshy_mix.is_empty(), "Leshy decided: {:?}", r.os);
    assert!(r.os.promotions_32m + r.os.promotions > 0, "CoalaKhugepaged promoted: {:?}", r.os);
    let cont = &r.driver["cont"];
    assert!(cont["formed_64k"].as_u64().unwrap() > 0 && cont["broken_64k"].as_u64().unwrap() > 0, "{cont}");
    assert_eq!(r.core.checked, r.core.accesses);
}

/// Hawkeye (`arm64-hawkeye`) while GUPS runs: the table is populated with 4 KiB pages (THP
/// `madvise`, advised only after initialisation, as in `promotion_under_checked_mode`), then
/// short coverage windows clear accessed bits (updates and shootdowns) and wake-ups collapse the
/// most accessed regions. Every access is checked, so a stale TLB or walk-cache entry fails the run.
#[test]
fn hawkeye_under_checked_mode() {
    let sets = [
        "workload.name=\"gups\"",
        "workload.params.table=64M",
        "workload.params.updates=300000",
        "workload.params.populate=true",
        "workload.params.madvise_huge=true",
        "os.thp=madvise",
        "sim.checked=true",
        "sim.epoch_accesses=5000",
        "os.hawkeye.window_ms=0.02",
        "os.hawkeye.sleep_ms=0.01",
        "os.hawkeye.promotions_per_wake=2",
    ];
    let r = run("arm64-hawkeye", &sets);
    assert_eq!(r.core.checked, r.core.accesses, "every access checked");
    assert_eq!(r.os.faults_thp, 0, "nothing advised at fault time");
    assert!(r.os.hawkeye_windows > 0 && r.os.hawkeye_accessed_cleared > 0, "{:?}", r.os);
    assert!(r.os.hawkeye_promotions > 0, "{:?}", r.os);
    assert_eq!(r.os.promotions, r.os.hawkeye_promotions, "khugepaged is off");
    assert!(r.os.shootdowns > r.os.hawkeye_promotions, "collapses and the windows' clears shoot down");
    assert_eq!(r.coverage[xlate::addr::PageSize::M2.index()], r.os.hawkeye_promotions * (2 << 20));
    assert!(metric(&r, "os_ops_promote") > 0.0);
    let zeroed = r.os_cost.get(xlate::tapi::Path::Promote, xlate::tapi::Func::Zero, xlate::tapi::Event::Page);
    assert_eq!(zeroed, 0, "collapses take pre-zeroed pages");
}

/// Utopia with RestSegs small enough that pages are evicted to the FlexSeg at faults and migrated
/// back by PTW tracking while GUPS runs: every RSW, FlexSeg walk and TLB hit is checked, so a
/// missed shootdown or a TAR/radix disagreement fails the run.
#[test]
fn utopia_checked_across_evictions_and_migrations() {
    const SMALL_TLBS: &[&str] = &[
        "mmu.l1d=[{entries=16,ways=4,latency=1,sizes=[\"4K\"]},{entries=4,ways=4,latency=1,sizes=[\"2M\"]}]",
        "mmu.l2={entries=24,ways=12,latency=12,sizes=[\"4K\",\"2M\"]}",
        "arch.utopia.migrate.min_dram_refs=0",
    ];
    for (design, restsegs, extra) in [
        ("utopia", "arch.utopia.restsegs=[{size=\"16M\",page=\"4K\",ways=16},{size=\"32M\",page=\"2M\",ways=16}]", &[][..]),
        ("utopia", "arch.utopia.restsegs=[{size=\"16M\",page=\"4K\",ways=4,hash=\"xor\"}]", &[][..]),
        // 2 MiB pages: 128 of them over a 16-page RestSeg, TLBs small enough that they are walked.
        ("utopia-thp", "arch.utopia.restsegs=[{size=\"16M\",page=\"4K\",ways=16},{size=\"32M\",page=\"2M\",ways=16}]", SMALL_TLBS),
    ] {
        let table = if design == "utopia-thp" { "workload.params.table=256M" } else { "workload.params.table=64M" };
        let mut sets = vec![
            "workload.name=\"gups\"",
            table,
            "workload.params.updates=150000",
            "sim.checked=true",
            "sim.epoch_accesses=5000",
            restsegs,
        ];
        sets.extend_from_slice(extra);
        let r = run(design, &sets);
        assert_eq!(r.core.checked, r.core.accesses, "{design}: every access checked");
        let d = &r.driver;
        let n = |k: &str| d[k].as_u64().unwrap();
        assert!(n("rsw_hits") > 0 && r.core.walk.walks > 0, "{design}: pages in both segments");
        assert!(n("evictions_to_flexseg") > 0 && r.os.evictions > 0, "{design}: RestSeg → FlexSeg: {d:?}");
        assert!(n("migrations_to_restseg") > 0 && r.os.migrations > 0, "{design}: FlexSeg → RestSeg: {d:?}");
        assert!(r.os.shootdowns >= r.os.evictions + r.os.migrations);
        if design == "utopia-thp" {
            assert!(r.coverage[xlate::addr::PageSize::M2.index()] > 0);
            assert!(d["restsegs"][1]["evictions"].as_u64().unwrap() > 0, "2 MiB RestSeg evicted: {d:?}");
        }
    }
}

/// fork then copy-on-write, on CPUs: the child shares every page read-only; the parent's first
/// store to each copies it (the child is idle), and every TLB entry the copy made stale must be
/// gone, or checked mode fails the run.
#[test]
fn fork_and_copy_on_write_under_checked_mode() {
    let w = [
        "workload.name=\"kvstore\"",
        "workload.params.footprint=64M",
        "workload.params.max_accesses=100000",
        "sim.fork_after_setup=true",
        "sim.checked=true",
    ];
    // Utopia's RestSeg pages move to the FlexSeg before they are shared (os/fork.rs).
    for d in ["radix4", "radix4-thp", "ecpt", "fpt-l3l2-thp", "arm64-cont", "utopia", "utopia-thp"] {
        let r = run(d, &w);
        assert!(r.os.cow_copies > 0, "{d}: copies {:?}", r.os);
        // A shared huge page splits at the first store to it; only the 4 KiB page written is copied.
        let huge = d.ends_with("-thp") || d == "arm64-cont";
        assert_eq!(r.os.cow_splits > 0, huge, "{d}: huge pages split {:?}", r.os);
        assert!(!d.starts_with("utopia") || r.os.evictions > 0, "{d}: RestSeg pages moved out at fork {:?}", r.os);
        assert_eq!(r.core.checked, r.core.accesses, "{d}: every access checked");
    }
}

/// fork shares frames; the first writer copies, the last sharer only regains write access; a
/// shared frame is freed when its last mapping goes (os/fork.rs).
#[test]
fn fork_shares_then_copies_then_frees() {
    use xlate::arch::radix::{Radix, RadixConfig};
    use xlate::os::{Os, OsConfig, ThpMode};
    use xlate::tapi::{Driver, MapFlags};
    let cfg = OsConfig { memory: 256 << 20, thp: ThpMode::Never, ..OsConfig::default() };
    let mut os = Os::boot(Radix::from_config(&RadixConfig::default(), 1).unwrap(), &cfg, 1).unwrap();
    let p = os.spawn(false).unwrap();
    let base = os.mmap(p, 64 << 10, MapFlags::default()).unwrap();
    for i in 0..16 {
        os.fault(p, base + i * 4096).unwrap();
    }
    let c = os.fork(p).unwrap();
    assert_eq!(os.truth(c, base), os.truth(p, base), "the child maps the parent's frame");
    assert_eq!(os.stats.cow_shared_pages, 16);
    // The child writes: a copy, in a new frame.
    assert!(os.cow_fault(c, base + 8, 0.0).unwrap().is_some());
    assert_ne!(os.truth(c, base), os.truth(p, base));
    assert_eq!(os.stats.cow_copies, 1);
    // The parent writes the same page: it is the last sharer, nothing is copied.
    assert!(os.cow_fault(p, base, 0.0).unwrap().is_some());
    assert_eq!((os.stats.cow_copies, os.stats.cow_reuses), (1, 1));
    // Written once, a page is no longer copy-on-write.
    assert!(os.cow_fault(p, base, 0.0).unwrap().is_none());
    // Unmapping the parent frees only the frame it alone maps; the child's shared 15 stay.
    let shared = os.truth(c, base + 4096).unwrap().pbase;
    let before = os.phys.free_pages();
    os.munmap(p, base, 64 << 10).unwrap();
    assert!(os.phys.free_pages() > before, "the parent's own frame is freed");
    assert!(!os.phys.is_free(xlate::addr::Pfn::containing(shared)), "a frame the child still maps is not");
    assert_eq!(os.truth(c, base + 4096).map(|t| t.pbase), Some(shared));
    // The child's unmap frees its copy and the 15 frames it was the last to map.
    let before = os.phys.free_pages();
    os.munmap(c, base, 64 << 10).unwrap();
    assert!(os.phys.free_pages() >= before + 16, "{} → {}", before, os.phys.free_pages());
    assert!(os.phys.is_free(xlate::addr::Pfn::containing(shared)));
}

/// Fast mode steps the accesses that follow one on its page and re-hit the L1 D-TLB in a loop of
/// their own (`sim::step_page_run`); checked mode steps every access through the whole pipeline
/// and changes no simulated number. So the two must give the same results, here in runs that
/// reach the loop's edges: quanta ending inside a run (processes time-sharing a core), copy-on-write
/// stores after a fork, the walk sampler (Leshy's, in `et`), a nested design (whose host remaps flush the
/// TLBs by generation), and Utopia's side lookup before the L1 TLB.
#[test]
fn fast_mode_equals_checked_mode() {
    const STREAM: &[&str] = &["workload.name=\"stream\"", "workload.params.footprint=8M", "workload.params.stride=8"];
    let with = |base: &[&'static str], more: &[&'static str]| -> Vec<&'static str> { base.iter().chain(more).copied().collect() };
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("radix4", with(STREAM, &["workload.processes=3", "cores=1", "sim.quantum_instrs=1001"])),
        ("radix4-thp", with(STREAM, &["workload.params.passes=2"])),
        ("radix4@radix4", with(STREAM, &[])),
        ("utopia", with(STREAM, &["arch.utopia.rsw_start=\"before-l1\""])),
        (
            "radix4",
            vec![
                "workload.name=\"kvstore\"",
                "workload.params.footprint=16M",
                "workload.params.max_accesses=150000",
                "sim.fork_after_setup=true",
            ],
        ),
        (
            "et",
            with(STREAM, &["os.thp=never", "sim.epoch_accesses=5000", "os.leshy.period=16", "os.coala.sleep_ms=100", "os.time_scale=1000"]),
        ),
    ];
    for (d, sets) in cases {
        let (fast, checked) = (run_results(d, &with(&sets, &["sim.checked=false"])), run_results(d, &with(&sets, &["sim.checked=true"])));
        assert!(fast.1.accesses > 100_000, "{d}: {} accesses", fast.1.accesses);
        assert!(fast == checked, "{d} {sets:?}: fast and checked runs differ");
    }
}

/// With a perfect TLB a same-page run reads the ground truth once for the page
/// (`Pipeline::translate_rehit`); the reference is the same run with a one-instruction quantum:
/// every access then ends a quantum, so the loop never steps a run, and with one stream per core
/// the quantum's end changes nothing else.
#[test]
fn page_runs_with_a_perfect_tlb_change_no_number() {
    for d in ["ideal", "ptlb"] {
        let sets = ["workload.name=\"stream\"", "workload.params.footprint=8M", "workload.params.stride=8"];
        let runs = run_results(d, &sets);
        let single = run_results(d, &[&sets[..], &["sim.quantum_instrs=1"]].concat());
        assert!(runs.1.accesses > 100_000, "{d}: {} accesses", runs.1.accesses);
        assert_eq!(runs.1.tlb.l1d_lookups, 0, "{d}: a perfect TLB counts no lookups");
        assert!(runs == single, "{d}: runs and single steps differ");
    }
}

/// A run's results and every raw core counter (TLB lookups included), without what may differ
/// between the runs compared: host timings, the checks' count, and the keys `sim.checked` and
/// `sim.quantum_instrs`.
fn run_results(design: &str, sets: &[&str]) -> (serde_json::Value, xlate::sim::CoreStats) {
    let r = run(design, sets);
    let mut v = xlate::report::json(&r);
    let o = v.as_object_mut().unwrap();
    o.remove("host");
    let sim = o["config"]["sim"].as_object_mut().unwrap();
    sim.remove("checked");
    sim.remove("quantum_instrs");
    (v, xlate::sim::CoreStats { checked: 0, ..r.core })
}
