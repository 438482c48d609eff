//! Utopia on scaled workloads: RestSeg walks replace most FlexSeg walks; restrictive-only swaps
//! where a flexible mapping does not.

use crate::common;
use common::*;

const GUPS: &[&str] =
    &["workload.name=\"gups\"", "workload.params.table=1G", "workload.params.updates=100000", "os.memory=4G", "sim.epoch_accesses=20000"];

#[test]
fn utopia_walks_less_than_radix4_on_scaled_gups() {
    let radix = run("radix4", GUPS);
    let utopia = run("utopia", GUPS);
    let d = &utopia.driver;
    let rsw = d["rsw"].as_u64().unwrap();
    // Every L2 TLB miss starts an RSW; with 512 MiB of the 1 GiB table in the 4K RestSeg about half
    // of them hit and never walk the radix table.
    assert_eq!(rsw, utopia.core.side.walks);
    assert!(rsw > 50_000, "RSWs {rsw}");
    assert!(d["rsw_hit_rate"].as_f64().unwrap() > 0.4, "{d:?}");
    assert!(
        (utopia.core.walk.walks as f64) < 0.6 * radix.core.walk.walks as f64,
        "FlexSeg walks {} vs radix4 walks {}",
        utopia.core.walk.walks,
        radix.core.walk.walks
    );
    assert!(radix.cycles / utopia.cycles > 1.0, "speedup {}", radix.cycles / utopia.cycles);
    // The paper's order: P-TLB >= Utopia > radix.
    let ptlb = run("ptlb", GUPS);
    assert!(ptlb.cycles <= utopia.cycles, "P-TLB {} vs Utopia {}", ptlb.cycles, utopia.cycles);
    assert!(d["tar_sf_bytes"].as_u64().unwrap() < d["radix_bytes_for_restseg_capacity"].as_u64().unwrap());
}

/// §7's parallel walk (the default) starts the FlexSeg walk beside the L2 TLB and the RSWs, so an
/// RSW that misses adds nothing; with the walk after both (Fig. 17 read literally) it does.
#[test]
fn parallel_walk_hides_rsw_misses() {
    let parallel = run("utopia", GUPS);
    let mut serial_sets = GUPS.to_vec();
    serial_sets.push("mmu.l2_parallel_walk=false");
    let serial = run("utopia", &serial_sets);
    // Same accesses, same RSWs and walks: only their overlap differs.
    assert_eq!(parallel.core.side.walks, serial.core.side.walks);
    assert_eq!(parallel.core.walk.walks, serial.core.walk.walks);
    let misses = (parallel.core.side.walks - parallel.core.side_hits) as f64;
    let extra = serial.core.translation_cycles - parallel.core.translation_cycles;
    // At least the L2 TLB's 12 cycles per RSW miss, which the parallel walk overlaps.
    assert!(extra >= 12.0 * misses, "serial costs {extra} more cycles over {misses} RSW misses");
    // Fig. 17 read literally: the walk overlaps the L2 TLB but waits for the RSWs' miss.
    let mut gated_sets = GUPS.to_vec();
    gated_sets.push("arch.utopia.fsw_waits_for_rsw=true");
    let gated = run("utopia", &gated_sets);
    assert_eq!(gated.core.walk.walks, parallel.core.walk.walks);
    let (p, g, s) = (parallel.core.translation_cycles, gated.core.translation_cycles, serial.core.translation_cycles);
    assert!(p < g && g <= s, "parallel {p} < gated {g} <= serial {s}");
}

/// Fig. 17: RSWs start on every L1 TLB miss, beside the L2 TLB; `rsw_start = "l2-miss"` keeps
/// them to L2 TLB misses. Either way every translation is the OS's (checked mode).
#[test]
fn rsw_starts_on_l1_tlb_misses() {
    let mut sets = GUPS.to_vec();
    sets.push("sim.checked=true");
    let early = run("utopia", &sets);
    sets.push("arch.utopia.rsw_start=\"l2-miss\"");
    let late = run("utopia", &sets);
    let (e, l) = (&early.core, &late.core);
    assert_eq!(e.side.walks, e.tlb.l1d_misses + e.tlb.l1i_misses, "one RSW per L1 TLB miss");
    assert_eq!(l.side.walks, l.tlb.l2_misses, "one RSW per L2 TLB miss");
    assert!(e.tlb.l2_misses < e.tlb.l1d_misses, "some L1 misses hit the L2 TLB");
    assert!(e.side.walks > l.side.walks);
}

/// Utopia's MICRO'23 artifact (`rsw_start = "before-l1"`): an access to a page in a RestSeg skips
/// the TLBs and is translated by an RSW (or the artifact's ULB), so RestSeg pages never enter the
/// TLBs. Without a ULB the TAR cache then sees every access to a RestSeg page, not only L1 TLB
/// misses, and hits far more (here: a GUPS update's load and store of one element). With the
/// 64-entry ULB it sees the ULB's misses, as the default sees L1 TLB misses, and the rate stays
/// low. Every translation is the OS's (checked mode).
#[test]
fn rsw_before_the_l1_tlb_bypasses_the_tlbs() {
    let mut sets = GUPS.to_vec();
    sets.push("sim.checked=true");
    let paper = run("utopia", &sets);
    sets.push("arch.utopia.rsw_start=\"before-l1\"");
    let first = run("utopia", &sets);
    sets.push("arch.utopia.ulb.entries=64");
    let ulb = run("utopia", &sets);
    let tar = |r: &xlate::sim::RunOutput| r.driver["tar_cache_hit_rate"].as_f64().unwrap();
    assert!(tar(&first) > 3.0 * tar(&paper), "TAR cache hit rate {} vs {}", tar(&first), tar(&paper));
    assert!(tar(&ulb) < 2.0 * tar(&paper), "with the ULB {} vs {}", tar(&ulb), tar(&paper));
    // RestSeg pages are not looked up in the TLBs: fewer L1 lookups, every RSW hit on a RestSeg
    // page without a TLB fill.
    assert!(first.core.tlb.l1d_lookups < paper.core.tlb.l1d_lookups);
    assert_eq!(first.core.side.walks, first.driver["rsw"].as_u64().unwrap());
    assert!(first.core.side.walks > paper.core.side.walks, "an RSW per access to a RestSeg page");
    // The ULB answers part of them; the rest RSW.
    assert!(ulb.driver["ulb_hit_rate"].as_f64().unwrap() > 0.2, "{:?}", ulb.driver);
    assert!(ulb.driver["rsw"].as_u64().unwrap() < first.driver["rsw"].as_u64().unwrap());
    assert_eq!(ulb.driver["ulb_lookups"].as_u64().unwrap(), ulb.core.side.walks);
}

/// Utopia §3: restricting the mapping everywhere swaps even with free memory. Twenty processes with
/// the same address layout each touch a 32 MiB table (8192 pages): 640 MiB fits a 1 GiB machine
/// under a flexible mapping, but all twenty tables hash to the same 8192 of the RestSeg's 15360
/// sets, 20 pages into 16 ways each.
#[test]
fn restrictive_only_swaps_where_radix_does_not() {
    let sets = [
        "workload.name=\"gups\"",
        "workload.params.table=32M",
        "workload.params.updates=5000",
        "workload.processes=20",
        "os.memory=1G",
        "os.swap.enabled=true",
    ];
    let radix = run("radix4", &sets);
    let rest = run("utopia-restrictive-only", &sets);
    assert_eq!(radix.os.swap_outs, 0, "{:?}", radix.os);
    assert!(rest.os.swap_outs > 0 && rest.os.swap_ins > 0, "{:?}", rest.os);
    assert_eq!(rest.core.walk.refs, 0, "no FlexSeg: walks read nothing");
}
