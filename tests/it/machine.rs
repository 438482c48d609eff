//! Multi-core machines, threads sharing an address space, processes time-sharing a core.

use crate::common;
use common::*;
use xlate::arch;
use xlate::config::Layers;
use xlate::sim;

const GUPS: [&str; 4] = ["workload.name=\"gups\"", "workload.params.table=64M", "workload.params.updates=50000", "sim.checked=true"];

#[test]
fn processes_on_separate_cores_share_the_llc() {
    let mut s = GUPS.to_vec();
    s.extend(["cores=2", "workload.processes=2"]);
    let two = run("radix4", &s);
    let one = run("radix4", &GUPS);
    assert_eq!(two.core.accesses, 2 * one.core.accesses);
    assert_eq!(two.os.faults_4k, 2 * one.os.faults_4k, "each process faults its own table in");
    assert_eq!(two.core.context_switches, 0);
    // Two cores run in parallel: the slowest core's cycles, not the sum.
    assert!(two.cycles < 1.5 * one.cycles, "{} vs {}", two.cycles, one.cycles);
}

#[test]
fn processes_time_share_one_core() {
    let mut s = GUPS.to_vec();
    s.extend(["cores=1", "workload.processes=3", "sim.quantum_instrs=20000"]);
    let r = run("radix4", &s);
    assert_eq!(r.core.accesses, 3 * 100_000);
    assert!(r.core.context_switches >= 10, "switches {}", r.core.context_switches);
    assert_eq!(metric(&r, "context_switches"), r.core.context_switches as f64, "the metric reports the cores' count");
    // With PCIDs nothing is flushed; without them the TLBs start cold after each switch.
    s.push("sim.flush_on_switch=true");
    let f = run("radix4", &s);
    assert!(f.core.tlb.l2_misses > r.core.tlb.l2_misses);
}

#[test]
fn threads_share_one_address_space() {
    let r = run(
        "radix4",
        &[
            "workload.name=\"bfs\"",
            "workload.params.footprint=64M",
            "workload.params.threads=2",
            "workload.params.max_accesses=200000",
            "cores=2",
            "sim.checked=true",
        ],
    );
    assert!(r.core.accesses > 100_000);
    let one = run(
        "radix4",
        &["workload.name=\"bfs\"", "workload.params.footprint=64M", "workload.params.max_accesses=200000", "sim.checked=true"],
    );
    // One address space: the graph is faulted in once, not per thread (only per-thread work
    // queues add pages).
    assert!(r.os.faults_4k < one.os.faults_4k + one.os.faults_4k / 20, "{} vs {}", r.os.faults_4k, one.os.faults_4k);
    assert_eq!(r.core.context_switches, 0);
}

/// A multiprogrammed mix: different workloads as separate processes on separate cores (and
/// time-sharing when there are fewer cores), every design's structures shared or per process as
/// the design says, checked against the ground truth.
#[test]
fn workload_mixes() {
    let mix = "workload.mix=[{name=\"gups\", params={table=\"64M\", updates=\"50000\"}}, {name=\"bfs\", params={footprint=\"64M\", max_accesses=\"100000\"}}, {name=\"stream\", params={footprint=\"16M\"}}]";
    for design in ["radix4", "utopia"] {
        let r = run(design, &[mix, "cores=2", "sim.checked=true", "sim.quantum_instrs=50000"]);
        assert_eq!(r.workload, "gups+bfs+stream");
        assert!(r.core.accesses > 100_000 + 100_000);
        assert!(r.core.context_switches > 0, "3 processes on 2 cores time-share");
    }
    let e = xlate::config::Layers { sets: vec!["workload.mix=[{name=\"gups\", wat=1}]".into()], ..Default::default() }
        .resolve(None)
        .unwrap_err();
    assert!(e.to_string().contains("workload.mix"), "{e}");
}

/// The TLB-reach knees of `ptrchase` on the `zen3` preset: a chase over fewer pages than the
/// 64-entry L1 D-TLB misses it only in its first round; one within the 2048-entry L2 TLB misses
/// the L1 on every step but walks only for its first touches; one beyond both walks on (almost)
/// every step.
#[test]
fn ptrchase_shows_the_tlb_reach_knees_of_zen3() {
    let run = |pages: u64| {
        let sets = vec![
            "os.memory=2G".to_string(),
            "workload.name=\"ptrchase\"".to_string(),
            format!("workload.params.footprint={}", pages * 4096),
            format!("workload.params.steps={}", pages * 8),
        ];
        let design = arch::lookup("radix4").unwrap();
        let cfg = Layers { preset: Some("zen3".into()), sets, ..Layers::default() }.resolve(Some(design)).unwrap();
        let r = sim::run(design, &cfg, &[], false).unwrap();
        (metric(&r, "l1d_tlb_mpki") / 1000.0, metric(&r, "walks") / (pages * 8) as f64)
    };
    let (l1, walks) = run(48);
    assert!(l1 < 0.2 && walks < 0.2, "48 pages fit the L1 D-TLB: L1 misses/step {l1}, walks/step {walks}");
    let (l1, walks) = run(1024);
    assert!(l1 > 0.95 && walks <= 0.13, "1024 pages fit the L2 TLB only: L1 misses/step {l1}, walks/step {walks}");
    let (l1, walks) = run(16384);
    assert!(l1 > 0.95 && walks > 0.9, "16384 pages overflow both: L1 misses/step {l1}, walks/step {walks}");
}

/// Warm-up ends at exactly `sim.warmup_accesses` (not at the next epoch) and restarts every
/// count the results report, the OS's included: a stream without pre-faulting faults one page
/// per 128 accesses (64 elements of 64 B, a load and a store each), so after a warm-up of 100
/// pages and 50 pages more the run reports exactly 50 faults in 6400 accesses.
#[test]
fn warm_up_ends_at_its_access_and_restarts_every_count() {
    let r = run(
        "radix4",
        &[
            "workload.name=\"stream\"",
            "workload.params.footprint=64M",
            "workload.params.stride=64",
            "sim.warmup_accesses=12800",
            "sim.max_accesses=19200",
        ],
    );
    assert_eq!(metric(&r, "accesses"), 6400.0);
    assert_eq!(metric(&r, "page_faults"), 50.0);
    assert_eq!(r.mem.l1d.data_accesses, 6400);
}

/// The drivers' event counters restart with the rest at the end of warm-up: ECPT's own count of
/// walks then equals the MMU's count of walks of the measured window alone.
#[test]
fn warm_up_restarts_the_drivers_event_counters() {
    let sets = ["workload.name=\"stream\"", "workload.params.footprint=64M", "workload.params.stride=64", "sim.max_accesses=19200"];
    let whole = run("ecpt", &sets);
    let mut warm_sets = sets.to_vec();
    warm_sets.push("sim.warmup_accesses=12800");
    let warm = run("ecpt", &warm_sets);
    let driver_walks = |r: &xlate::sim::RunOutput| r.driver["walks"].as_u64().unwrap() as f64;
    assert_eq!(driver_walks(&whole), metric(&whole, "walks"));
    assert_eq!(driver_walks(&warm), metric(&warm, "walks"));
    assert!(driver_walks(&warm) < driver_walks(&whole), "the warm-up's walks are not counted");
}
