//! Utopia on scaled workloads: RestSeg walks replace most FlexSeg walks; restrictive-only swaps
//! where a flexible mapping does not.

mod common;
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
    assert!(d["tar_sf_bytes"].as_u64().unwrap() < d["radix_bytes_for_restseg_capacity"].as_u64().unwrap());
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
