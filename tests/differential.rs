//! The differential test: every design, every built-in core workload, in checked mode. Each walk's
//! frame and each TLB hit is compared with the OS's ground truth (a violation fails the run), so
//! a design passes only if its translation structures agree with the OS on every access.

mod common;
use common::*;

const WORKLOADS: &[(&str, &[&str])] = &[
    ("gups", &["workload.name=\"gups\"", "workload.params.table=256M", "workload.params.updates=60000"]),
    (
        "gups-nopop",
        &["workload.name=\"gups\"", "workload.params.table=64M", "workload.params.updates=60000", "workload.params.populate=false"],
    ),
    ("stream", &["workload.name=\"stream\"", "workload.params.footprint=48M", "workload.params.stride=64"]),
];

#[test]
fn every_design_agrees_with_the_os_on_every_access() {
    for d in xlate::arch::DESIGNS {
        for (wname, sets) in WORKLOADS {
            let mut s = sets.to_vec();
            s.push("sim.checked=true");
            let r = run(d.name, &s);
            assert!(r.core.accesses > 100_000, "{} {wname}: ran only {} accesses", d.name, r.core.accesses);
            if !r.config.mmu.perfect_tlb {
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
