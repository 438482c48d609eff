//! The foundation's expected findings, on scaled-down defaults.

use crate::common;
use common::*;

fn gups(design: &str) -> xlate::sim::RunOutput {
    run(design, &["workload.name=\"gups\"", "workload.params.table=1G", "workload.params.updates=200000"])
}

#[test]
fn gups_radix_thp_ideal() {
    let radix = gups("radix4");
    let thp = gups("radix4-thp");
    let ideal = gups("ideal");
    // ~10 instructions per update, almost every update misses the L2 TLB over a 1 GiB table.
    let per_update = radix.core.tlb.l2_misses as f64 / 200_000.0;
    assert!((0.8..=1.05).contains(&per_update), "L2 TLB misses per GUPS update {per_update}");
    let mpki = metric(&radix, "l2_tlb_mpki");
    assert!((80.0..=105.0).contains(&mpki), "radix4 L2 TLB MPKI {mpki}");
    assert!(thp.core.walk.walks * 3 < radix.core.walk.walks, "THP walks {} vs radix {}", thp.core.walk.walks, radix.core.walk.walks);
    assert_eq!(ideal.core.walk.walks, 0);
    assert!(ideal.cycles < thp.cycles && thp.cycles < radix.cycles);
}

#[test]
fn radix5_one_more_reference_before_filtering_never_fewer_after() {
    let sets = ["workload.name=\"gups\"", "workload.params.table=1G", "workload.params.updates=100000"];
    let r4 = run("radix4", &sets);
    let r5 = run("radix5", &sets);
    assert_eq!(r4.core.walk.walks, r5.core.walk.walks);
    assert_eq!(r5.core.walk.refs_unfiltered, r4.core.walk.refs_unfiltered + r4.core.walk.walks);
    assert!(r5.core.walk.refs >= r4.core.walk.refs);
}

#[test]
fn same_seed_same_json() {
    let sets = ["workload.name=\"gups\"", "workload.params.table=256M", "workload.params.updates=50000"];
    let strip = |r: &xlate::sim::RunOutput| {
        let mut v = xlate::report::json(r);
        v.as_object_mut().unwrap().remove("host");
        serde_json::to_string(&v).unwrap()
    };
    let a = strip(&run("radix4-thp", &sets));
    let b = strip(&run("radix4-thp", &sets));
    assert_eq!(a, b);
}

/// The workloads' TLB pressure ranks as the seeds report: GUPS and graph traversal high,
/// sequential Sysbench memory low.
#[test]
fn workload_mpki_ranking() {
    let mpki = |sets: &[&str]| metric(&run("radix4", sets), "l2_tlb_mpki");
    let gups = mpki(&["workload.name=\"gups\"", "workload.params.table=512M", "workload.params.updates=100000"]);
    let bfs = mpki(&["workload.name=\"bfs\"", "workload.params.footprint=512M", "workload.params.max_accesses=300000"]);
    let sysbench = mpki(&["workload.name=\"sysbench-mem\"", "workload.params.max_accesses=300000"]);
    assert!(gups > 50.0 && bfs > 20.0, "gups {gups} bfs {bfs}");
    assert!(sysbench < 1.0, "sysbench {sysbench}");
}

/// Elastic Translations on the Altra machine (issue 11's check): over a table larger than the
/// L2 TLB's reach with 2 MiB pages, THP leaves walks, ET's 32 MiB translations remove almost all
/// of them, and both beat 4 KiB pages.
#[test]
fn et_leaves_fewer_walks_than_thp_on_altra() {
    let run_altra = |design: &str| {
        let sets: Vec<String> = SMALL
            .iter()
            .map(|s| s.to_string())
            .chain(
                ["os.memory=8G", "workload.name=\"gups\"", "workload.params.table=4G", "workload.params.updates=150000"].map(String::from),
            )
            .collect();
        let d = xlate::arch::lookup(design).unwrap();
        let cfg = xlate::config::Layers { preset: Some("altra".into()), file: None, sets }.resolve(Some(d)).unwrap();
        xlate::sim::run(d, &cfg, &[], false).unwrap()
    };
    let (k4, thp, et) = (run_altra("arm64-4k"), run_altra("arm64-thp"), run_altra("et"));
    assert!(thp.core.walk.walks * 10 > k4.core.walk.walks, "THP still walks: {} vs 4K {}", thp.core.walk.walks, k4.core.walk.walks);
    assert!(et.core.walk.walks * 50 < thp.core.walk.walks, "ET walks {} vs THP {}", et.core.walk.walks, thp.core.walk.walks);
    assert!(et.cycles < thp.cycles && thp.cycles < k4.cycles);
    assert_eq!(et.driver["translations_by_size"]["32M"].as_u64(), Some(128));
}

/// A workload's `munmap`s are charged to the core that calls them, as its faults are. Made
/// dearer by their shootdowns alone (the fault path sends none here), six rounds' unmaps add
/// exactly their extra unmap-path cycles to the core's OS cycles and to the run's cycles.
#[test]
fn pagefault_charges_its_unmaps_to_its_core() {
    use xlate::tapi::Path;
    let run = |shootdown: &str| {
        let cost = format!("os.costs.shootdown={shootdown}");
        let sets = ["workload.name=\"pagefault\"", "workload.params.region=1M", "workload.params.rounds=6", cost.as_str()];
        let r = common::run("radix4", &sets);
        // Six rounds of 256 pages, and the counters' page that setup populated.
        assert_eq!((r.os.unmaps, r.os.faults()), (6, 6 * 256 + 1));
        let unmap = r.os_cost.cycles(Path::Unmap, &r.config.os.costs);
        (r.core.os_cycles, r.cycles, unmap)
    };
    let (os_cheap, cycles_cheap, unmap_cheap) = run("0");
    let (os_dear, cycles_dear, unmap_dear) = run("2000");
    assert_eq!(unmap_dear - unmap_cheap, 6.0 * 2000.0, "one shootdown per munmap");
    assert_eq!(os_dear - os_cheap, unmap_dear - unmap_cheap);
    assert_eq!(cycles_dear - cycles_cheap, unmap_dear - unmap_cheap);
}
