//! Multi-core machines, threads sharing an address space, processes time-sharing a core.

mod common;
use common::*;

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
