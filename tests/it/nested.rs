//! Nested (2-D) translation: hand-computed reference counts of cold 2-D walks, the nested TLB,
//! page-size splintering, and every nestable design as a guest and as a host in checked mode
//! (each walk and TLB hit compared with the composition of the guest's and the host's ground
//! truth, gVA → gPA → hPA).

use crate::common;
use common::*;
use xlate::addr::PageSize;
use xlate::arch;
use xlate::arch::nested::{Nested, NestedConfig, NESTABLE};
use xlate::arch::pomtlb::PomTlb;
use xlate::arch::radix::Radix;
use xlate::mmu::tlb::{Tlb, TlbConfig};
use xlate::os::Os;
use xlate::tapi::{Driver, MapFlags, WalkPlan};

/// A guest of 512 MiB on a 2 GiB host: small enough to boot in milliseconds.
const VM: &[&str] = &["os.memory=512M", "host.os.memory=2G"];
/// No page-walk cache in either dimension and no nested TLB: every reference is made.
const NO_CACHES: &[&str] = &["arch.radix.pwc=[]", "host.arch.radix.pwc=[]", "host.ntlb.enabled=false"];

/// A guest OS on `design` (radix guest, radix host) with 4 MiB mapped and populated at `base`.
fn radix_vm(design: &str, sets: &[&str]) -> (Os<Nested<Radix, Radix>>, u16, u64) {
    let mut s = VM.to_vec();
    s.extend_from_slice(sets);
    let cfg = config(design, &s);
    let d = Nested::<Radix, Radix>::from_config(&NestedConfig::new(&cfg.arch, &cfg.host, cfg.os.memory), cfg.seed).unwrap();
    let mut os = Os::boot(d, &cfg.os, cfg.seed).unwrap();
    let a = os.spawn(false).unwrap();
    let base = os.mmap(a, 4 << 20, MapFlags::default()).unwrap();
    os.populate(a, base, 4 << 20).unwrap();
    (os, a, base)
}

fn walk(os: &mut Os<Nested<Radix, Radix>>, wc: &mut <Nested<Radix, Radix> as Driver>::WalkCache, a: u16, va: u64) -> WalkPlan {
    let mut plan = WalkPlan { checked: true, ..WalkPlan::default() };
    let t = os.driver.walk(&mut os.procs[a as usize].space, wc, a, va, &mut plan).expect("mapped");
    assert_eq!(plan.violation, None);
    let truth = os.truth(a, va).and_then(|g| os.driver.machine_translation(va, g)).unwrap();
    assert_eq!(t, truth, "the 2-D walk of {va:#x} gives the composed truth");
    plan
}

#[test]
fn cold_2d_walks_make_the_published_reference_counts() {
    // Bhargava et al. (ASPLOS'08): n guest levels on m host levels take n × (m + 1) + m.
    for (design, levels, want) in [("radix4@radix4", (4, 4), 24), ("radix5@radix5", (5, 5), 35), ("radix4@radix5", (4, 5), 29)] {
        let (mut os, a, base) = radix_vm(design, NO_CACHES);
        assert_eq!((os.driver.guest().levels(), os.driver.host.driver.levels()), levels, "{design}");
        let mut wc = os.driver.new_walk_cache();
        let plan = walk(&mut os, &mut wc, a, base + 0x1234);
        assert_eq!(plan.refs.len(), want, "{design}: references of a cold 2-D walk");
        assert_eq!(plan.serial_steps(), want as u32, "{design}: every reference waits for the one before");
        assert_eq!(plan.unfiltered, want as u32, "{design}: unfiltered references");
    }
}

/// The host prefetch of a 2-D walk names a reference the walk makes: the host entry that
/// translates the guest's leaf table page.
#[test]
fn prefetch_names_a_reference_of_the_2d_walk() {
    let (mut os, a, base) = radix_vm("radix4@radix4", NO_CACHES);
    let mut wc = os.driver.new_walk_cache();
    for va in [base + 0x1234, base + (3 << 20) + 0x10] {
        let entry = os.driver.prefetch(&os.procs[a as usize].space, va).expect("mapped in both dimensions");
        let plan = walk(&mut os, &mut wc, a, va);
        assert!(plan.refs.iter().any(|r| r.paddr == entry && r.host), "{va:#x}: {entry:#x} not among {:?}", plan.refs);
    }
}

/// The second stage of the prefetch, given the guest frame, names the host entry of the 2-D
/// walk's last host walk (the one that translates the data page); the guest frame it is given,
/// read from the guest's own leaf (`frame_hint`), is the guest OS's mapping.
#[test]
fn prefetch_frame_names_the_data_pages_host_entry() {
    let (mut os, a, base) = radix_vm("radix4@radix4", NO_CACHES);
    const { assert!(<Nested<Radix, Radix> as Driver>::PREFETCHES_FRAME && <Nested<Radix, Radix> as Driver>::HINTS_FRAME) };
    let mut wc = os.driver.new_walk_cache();
    for va in [base + 0x1234, base + (3 << 20) + 0x10] {
        let gpa = os.truth(a, va).unwrap().paddr(va);
        assert_eq!(os.driver.frame_hint(&os.procs[a as usize].space, va), Some(gpa), "{va:#x}");
        let entry = os.driver.prefetch_frame(gpa).expect("backed by the host");
        let plan = walk(&mut os, &mut wc, a, va);
        let last = plan.refs.last().unwrap();
        assert!(last.host && last.paddr == entry, "{va:#x}: {entry:#x} is not the last reference {last:?}");
    }
}

#[test]
fn a_warm_nested_tlb_removes_the_host_dimension() {
    let big_ntlb = ["arch.radix.pwc=[]", "host.arch.radix.pwc=[]", "host.ntlb.entries=4096", "host.ntlb.ways=8"];
    let (mut os, a, base) = radix_vm("radix4@radix4", &big_ntlb);
    let mut wc = os.driver.new_walk_cache();
    assert_eq!(walk(&mut os, &mut wc, a, base).refs.len(), 24, "cold");
    // Every guest table page and the data page are now in the nested TLB.
    assert_eq!(walk(&mut os, &mut wc, a, base + 0x10).refs.len(), 4, "only the guest's 4 references remain");
    // A guest shootdown leaves the nested TLB (gPA → hPA did not change).
    os.driver.invalidate_walk_cache(&mut wc, a, base, base + 4096);
    assert_eq!(walk(&mut os, &mut wc, a, base + 0x20).refs.len(), 4);
}

/// Neoverse N1's arrangement (`host.ntlb.in_l2_tlb`): stage-2 entries live in the core's L2 TLB,
/// of the sizes `host.ntlb.sizes` lists, and take capacity from its guest-virtual entries.
#[test]
fn stage2_entries_share_the_l2_tlb() {
    let in_l2 = ["arch.radix.pwc=[]", "host.arch.radix.pwc=[]", "host.ntlb.in_l2_tlb=true"];
    let walk_beside = |os: &mut Os<Nested<Radix, Radix>>, wc: &mut _, l2: &mut Tlb, a: u16, va: u64| {
        let mut plan = WalkPlan { checked: true, ..WalkPlan::default() };
        let t = os.driver.walk_beside(&mut os.procs[a as usize].space, wc, l2, a, va, &mut plan).expect("mapped");
        assert_eq!(plan.violation, None);
        assert_eq!(Some(t), os.truth(a, va).and_then(|g| os.driver.machine_translation(va, g)));
        (plan.refs.len(), plan.fixed_cycles)
    };
    // A 2 MiB host. Walked outside a core (no L2 TLB at hand) nothing is cached: every guest
    // reference and the data page take a host walk, 4 × (3 + 1) + 3 = 19 references.
    let (mut os, a, base) = radix_vm("radix4@radix4-thp", &in_l2);
    let mut wc = os.driver.new_walk_cache();
    assert_eq!(walk(&mut os, &mut wc, a, base).refs.len(), 19);
    // Beside a one-entry L2 TLB, the first host walk's 2 MiB stage-2 entry answers the later
    // guest-physical references it covers, and it evicts the guest's own entry.
    let mut l2 = Tlb::new(&TlbConfig::new(1, 1, 5, &[PageSize::K4, PageSize::M2]));
    let guest_va = base + (1 << 20);
    let guest_entry = os.truth(a, guest_va).and_then(|g| os.driver.machine_translation(guest_va, g)).unwrap();
    l2.insert(a, guest_va, guest_entry);
    let (refs, cycles) = walk_beside(&mut os, &mut wc, &mut l2, a, base + 0x10);
    assert!(refs < 19, "stage-2 hits in the L2 TLB remove host walks: {refs}");
    assert!(cycles >= 5 * 5, "each of the 5 stage-2 lookups pays the L2 TLB's latency: {cycles}");
    assert_eq!(l2.lookup(a, guest_va), None, "the stage-2 entry evicted the guest's entry");
    let hits = os.driver.metrics()["ntlb_hit_rate"].as_f64().unwrap();
    assert!(hits > 0.0, "{hits}");
    // N1 keeps stage-2 entries of 2 MiB and 1 GiB blocks only: a 4 KiB host's are not cached.
    let (mut os, a, base) = radix_vm("radix4@radix4", &[&in_l2[..], &["host.ntlb.sizes=[\"2M\"]"]].concat());
    let mut wc = os.driver.new_walk_cache();
    let mut l2 = Tlb::new(&TlbConfig::new(64, 4, 5, &[PageSize::K4, PageSize::M2]));
    for off in [0, 0x10] {
        assert_eq!(walk_beside(&mut os, &mut wc, &mut l2, a, base + off).0, 24, "no 4 KiB stage-2 entries");
    }
    assert_eq!(os.driver.metrics()["ntlb_hit_rate"], 0.0);
    // The L2 TLB must hold every size listed.
    let mut cfg = config("radix4@radix4", VM);
    cfg.host.ntlb.in_l2_tlb = true;
    cfg.host.ntlb.sizes = vec![PageSize::G1];
    let e = cfg.validate().unwrap_err().to_string();
    assert!(e.contains("host.ntlb.sizes") && e.contains("mmu.l2.sizes"), "{e}");
}

#[test]
fn the_tlb_entry_is_the_smaller_of_guest_and_host_pages() {
    for (design, want) in
        [("radix4-thp@radix4", PageSize::K4), ("radix4@radix4-thp", PageSize::K4), ("radix4-thp@radix4-thp", PageSize::M2)]
    {
        let (mut os, a, base) = radix_vm(design, &[]);
        let mut wc = os.driver.new_walk_cache();
        let guest = os.truth(a, base).unwrap().size;
        let t = os.driver.walk(&mut os.procs[a as usize].space, &mut wc, a, base + 0x5000, &mut WalkPlan::default()).unwrap();
        assert_eq!(t.size, want, "{design} (guest page {guest})");
    }
}

#[test]
fn host_backs_guest_memory_on_demand_or_at_the_first_walk() {
    // Backed when the guest maps (and zeroes) a page: the walk takes no EPT violation.
    let (os, _, _) = radix_vm("radix4@radix4", &[]);
    let m = os.driver.metrics();
    assert!(m["ept_violations"].as_u64().unwrap() >= 1024, "4 MiB of 4 KiB host pages plus tables: {m:?}");
    assert_eq!(m["ept_violations_in_walks"], 0);
    // Lazily: the first 2-D walk over each page takes the violation, and is charged for it.
    let (mut os, a, base) = radix_vm("radix4@radix4", &["host.back_on_guest_map=false"]);
    assert_eq!(os.driver.metrics()["ept_violations"], 0, "nothing touched yet");
    let mut wc = os.driver.new_walk_cache();
    let cold = walk(&mut os, &mut wc, a, base);
    assert!(os.driver.metrics()["ept_violations_in_walks"].as_u64().unwrap() >= 5, "4 guest tables and the data page");
    assert!(cold.fixed_cycles >= 5000, "the host's work is on the walk's critical path: {}", cold.fixed_cycles);
}

#[test]
fn designs_that_cannot_nest_say_so() {
    for name in
        ["utopia@radix4", "radix4@rmm", "ideal@radix4", "radix4@ptlb", "accel-conventional@radix4", "sparta-8@radix4", "radix4@pomtlb"]
    {
        let e = arch::lookup(name).err().unwrap_or_else(|| panic!("{name} resolved")).to_string();
        assert!(e.contains("cannot be nested") || e.contains("perfect-TLB") || e.contains("only as a guest"), "{name}: {e}");
    }
    assert!(arch::lookup("radix4@nosuch").is_err());
}

/// POM-TLB's own nesting (Ryoo et al., ISCA'17): the in-memory TLB, in host-physical memory,
/// caches guest-virtual → host-physical translations in front of the radix guest's 2-D walk, so a
/// hit makes one probe instead of the walk.
#[test]
fn pomtlb_nests_in_front_of_the_2d_walk() {
    let mut sets = VM.to_vec();
    sets.extend_from_slice(NO_CACHES);
    let cfg = config("pomtlb@radix4", &sets);
    let nc = NestedConfig::<Radix, Radix>::new(&cfg.arch, &cfg.host, cfg.os.memory);
    let d = PomTlb::<Nested<Radix, Radix>>::from_config(&(cfg.arch.pomtlb.clone(), nc), cfg.seed).unwrap();
    let mut os = Os::boot(d, &cfg.os, cfg.seed).unwrap();
    let a = os.spawn(false).unwrap();
    let base = os.mmap(a, 4 << 20, MapFlags::default()).unwrap();
    os.populate(a, base, 4 << 20).unwrap();
    let mut wc = os.driver.new_walk_cache();
    let mut walk = |os: &mut Os<PomTlb<Nested<Radix, Radix>>>, va: u64| {
        let mut plan = WalkPlan { checked: true, ..WalkPlan::default() };
        let t = os.driver.walk(&mut os.procs[a as usize].space, &mut wc, a, va, &mut plan).expect("mapped");
        assert_eq!(plan.violation, None);
        assert_eq!(Some(t), os.truth(a, va).and_then(|g| os.driver.machine_translation(va, g)), "{va:#x}");
        plan
    };
    // Cold: the predicted (4 KiB) set and then the 2 MiB set, 4 lines each (16 ways × 16 B), both
    // host-physical (no host walk translates them); the 24-reference 2-D walk; the fill's store.
    let cold = walk(&mut os, base + 0x1234);
    assert_eq!(cold.refs.len(), 4 + 4 + 24 + 1);
    assert!(cold.refs[..8].iter().all(|r| !r.host) && cold.refs[8..32].iter().filter(|r| r.host).count() == 20);
    assert!(cold.refs[32].write);
    // Warm: the entry holds gVA → hPA, so one probe replaces the whole 2-D walk.
    let warm = walk(&mut os, base + 0x1238);
    assert_eq!(warm.refs.iter().map(|r| r.paddr).collect::<Vec<_>>(), cold.refs[..4].iter().map(|r| r.paddr).collect::<Vec<_>>());
    // The walk after a miss is the 2-D walk: its later prefetch stages are the nested walker's.
    type P = PomTlb<Nested<Radix, Radix>>;
    const { assert!(<P as Driver>::PREFETCHES_FRAME && <P as Driver>::HINTS_FRAME) };
    let gpa = os.truth(a, base + 0x1234).unwrap().paddr(base + 0x1234);
    assert_eq!(os.driver.frame_hint(&os.procs[a as usize].space, base + 0x1234), Some(gpa));
    assert_eq!(os.driver.prefetch_frame(gpa), Some(cold.refs[31].paddr), "the data page's host entry");
    // The arrays live in the hypervisor's memory, not the guest's.
    let host = &os.driver.walker().host.phys;
    assert!((host.total_pages() - host.free_pages()) << 12 >= os.driver.metrics()["pomtlb_bytes"].as_u64().unwrap());
    // In checked mode on radix and ECPT hosts, with host THP on and off.
    for design in ["pomtlb@radix4", "pomtlb@radix4-thp", "pomtlb@ecpt"] {
        let mut sets = VM.to_vec();
        sets.extend_from_slice(&[
            "workload.name=\"gups\"",
            "workload.params.table=64M",
            "workload.params.updates=20000",
            "sim.checked=true",
        ]);
        let r = run(design, &sets);
        assert_eq!(r.core.checked, r.core.accesses, "{design}");
        let n = |k: &str| r.driver[k].as_u64().unwrap();
        let (hits, probes, walks) = (n("pomtlb_hits"), n("pomtlb_probes"), n("nested_walks"));
        assert!(hits > 0 && walks == probes - hits, "{design}: every hit skips a 2-D walk ({hits} hits, {probes} probes, {walks} walks)");
    }
}

/// Every pair of nestable designs (guest × host; THP on and off in each dimension through the
/// designs' `-thp` variants), on GUPS and BFS, in checked mode.
#[test]
fn every_nestable_pair_agrees_with_the_composed_truth() {
    let nestable: Vec<&str> = arch::designs()
        .filter(|d| {
            NESTABLE.contains(&d.driver) && !d.settings.iter().any(|s| s.starts_with("mmu.perfect_tlb") || s.starts_with("accel.enabled"))
        })
        .map(|d| d.name)
        .collect();
    assert!(nestable.len() >= 10, "{nestable:?}");
    let pairs: Vec<String> = nestable.iter().flat_map(|g| nestable.iter().map(move |h| format!("{g}@{h}"))).collect();
    const WORKLOADS: &[&[&str]] = &[
        &["workload.name=\"gups\"", "workload.params.table=64M", "workload.params.updates=20000"],
        &["workload.name=\"bfs\"", "workload.params.footprint=16M", "workload.params.max_accesses=40000"],
        // Guest munmaps, and mmaps that reuse the addresses (every guest TLB and walk-cache entry
        // of a round must go with its shootdown).
        &["workload.name=\"pagefault\"", "workload.params.region=1M", "workload.params.max_accesses=6000"],
    ];
    for p in &pairs {
        for w in WORKLOADS {
            let mut sets = VM.to_vec();
            sets.extend_from_slice(w);
            sets.push("sim.checked=true");
            let r = run(p, &sets);
            assert_eq!(r.core.checked, r.core.accesses, "{p}: every access checked");
            assert!(r.driver["nested_walks"].as_u64().unwrap() > 0, "{p}: 2-D walks ran");
        }
    }
}

/// The comparison: nested walks cost several times a native walk, and THP in both
/// dimensions removes most of it.
#[test]
fn nested_walks_cost_more_and_thp_in_both_dimensions_recovers() {
    let sets =
        ["workload.name=\"gups\"", "workload.params.table=512M", "workload.params.updates=100000", "os.memory=2G", "host.os.memory=4G"];
    let native = run("radix4", &sets);
    let nested = run("radix4@radix4", &sets);
    let thp = run("radix4-thp@radix4-thp", &sets);
    let lat = |r: &xlate::sim::RunOutput| metric(r, "walk_latency_avg");
    assert!(lat(&nested) > 2.0 * lat(&native), "2-D walks: {} vs native {}", lat(&nested), lat(&native));
    assert!(metric(&nested, "walk_refs_per_walk") > 2.0 * metric(&native, "walk_refs_per_walk"));
    // The host dimension's references are reported apart, and add up by level.
    assert_eq!(metric(&native, "walk_refs_host"), 0.0);
    let host = metric(&nested, "walk_refs_host");
    assert!(host > 0.0 && host < metric(&nested, "walk_refs"));
    let by_level: f64 = ["l1", "l2", "llc", "dram"].iter().map(|l| metric(&nested, &format!("walk_refs_host_{l}"))).sum();
    assert_eq!(by_level, host);
    let host_lat = metric(&nested, "walk_latency_host_avg");
    assert!(host_lat > 0.0 && host_lat < lat(&nested), "host share of the 2-D walk: {host_lat}");
    assert_eq!(metric(&native, "walk_latency_host_avg"), 0.0);
    let tc = |r: &xlate::sim::RunOutput| metric(r, "translation_cycles");
    assert!(tc(&thp) < 0.5 * tc(&nested), "THP in both dimensions: {} vs {}", tc(&thp), tc(&nested));
}

/// Guest khugepaged collapses regions while the program runs on a host: the guest shootdowns
/// must drop the guest-virtual entries (TLBs, guest walk caches), or checked mode fails the run.
#[test]
fn guest_promotions_under_checked_mode() {
    for host in ["radix4", "radix4-thp", "ecpt"] {
        let design = format!("radix4-thp@{host}");
        let mut sets = VM.to_vec();
        sets.extend_from_slice(&[
            "workload.name=\"gups\"",
            "workload.params.table=64M",
            "workload.params.updates=200000",
            "workload.params.madvise_huge=true",
            "os.thp=madvise",
            "sim.checked=true",
            "sim.epoch_accesses=5000",
            "os.khugepaged.sleep_ms=0.01",
            "os.khugepaged.pages_to_scan=2048",
            "host.os.khugepaged.sleep_ms=0.01",
        ]);
        let r = run(&design, &sets);
        assert_eq!(r.core.checked, r.core.accesses, "{design}");
        assert_eq!(r.os.promotions, 32, "{design}: every 2 MiB region of the table collapsed in the guest");
        assert!(r.os.shootdowns >= 32);
        // The hypervisor's own khugepaged runs at the guest's epochs when its THP is on.
        let host_scans = r.driver["host_os"]["khugepaged_scans"].as_u64().unwrap();
        assert_eq!(host_scans > 0, host == "radix4-thp", "{design}: host khugepaged scans {host_scans}");
    }
}

/// A host that swaps guest memory out remaps guest-physical pages behind the guest's back: every
/// guest-virtual TLB entry may depend on a remapped page, so the VM's TLBs are flushed on each
/// host remap (as KVM does), or checked mode finds a stale entry.
#[test]
fn host_swapping_remaps_under_checked_mode() {
    let cases = [
        ("radix4", "radix4", "host.ntlb.in_l2_tlb=false"),
        ("radix4", "radix4", "host.ntlb.in_l2_tlb=true"),
        ("radix4", "ecpt", "host.ntlb.in_l2_tlb=false"),
        ("pomtlb", "radix4", "host.ntlb.in_l2_tlb=false"),
    ];
    for (guest, host, stage2) in cases {
        let design = format!("{guest}@{host}");
        let r = run(
            &design,
            &[
                stage2,
                "os.memory=512M",
                "host.os.memory=160M",
                "host.os.swap.enabled=true",
                "workload.name=\"gups\"",
                "workload.params.table=256M",
                "workload.params.updates=30000",
                "sim.checked=true",
            ],
        );
        assert_eq!(r.core.checked, r.core.accesses, "{design}");
        let host_os = &r.driver["host_os"];
        assert!(host_os["swap_outs"].as_u64().unwrap() > 0 && host_os["faults_swapin"].as_u64().unwrap() > 0, "{design}: {host_os}");
        assert!(r.driver["host_remaps"].as_u64().unwrap() > 0, "{design}");
        if guest == "pomtlb" {
            assert!(r.driver["pomtlb_flushes"].as_u64().unwrap() > 0, "{design}: host remaps flush the in-memory TLB");
        }
    }
}

/// Host promotions: on a host whose memory is fragmented (every 2 MiB block holds one of another
/// tenant's pages), host THP faults fall back to 4 KiB; the host's khugepaged compacts a block
/// and collapses the VM's 4 KiB backing into a 2 MiB page, which remaps guest-physical memory
/// behind the guest's back. Every VM TLB entry may depend on it, so checked mode fails the run
/// unless the VM's TLBs, host walk caches and nested TLB are flushed.
#[test]
fn host_promotions_under_checked_mode() {
    for (design, stage2) in [
        ("radix4@radix4-thp", "host.ntlb.in_l2_tlb=false"),
        ("radix4@radix4-thp", "host.ntlb.in_l2_tlb=true"),
        ("radix4-thp@radix4-thp", "host.ntlb.in_l2_tlb=false"),
        ("ecpt@radix4-thp", "host.ntlb.in_l2_tlb=false"),
        ("radix4@ecpt-thp", "host.ntlb.in_l2_tlb=false"),
    ] {
        let mut sets = VM.to_vec();
        sets.extend_from_slice(&[
            stage2,
            "workload.name=\"gups\"",
            "workload.params.table=64M",
            "workload.params.updates=100000",
            "sim.checked=true",
            "sim.epoch_accesses=5000",
            "host.os.fragmentation.method=\"free2m\"",
            "host.os.fragmentation.target=1.0",
            "host.os.compaction.khugepaged=true",
            "host.os.khugepaged.sleep_ms=0.5",
            "host.os.khugepaged.pages_to_scan=512",
        ]);
        let r = run(design, &sets);
        assert_eq!(r.core.checked, r.core.accesses, "{design}");
        let host_os = &r.driver["host_os"];
        let n = |k: &str| host_os[k].as_u64().unwrap_or(0);
        assert!(n("thp_fallback_nomem") > 0, "{design}: the host first backs with 4 KiB pages: {host_os}");
        assert!(n("promotions") > 0 && n("compactions") >= n("promotions"), "{design}: {host_os}");
        assert!(n("compaction_pages_moved") >= n("compactions"), "{design}: {host_os}");
        assert!(r.driver["host_remaps"].as_u64().unwrap() > 0, "{design}");
        assert!(r.driver["host_coverage_2m"].as_u64().unwrap() > 0, "{design}");
    }
    // Without compaction the host cannot promote on that memory.
    let mut sets = VM.to_vec();
    sets.extend_from_slice(&[
        "workload.name=\"gups\"",
        "workload.params.table=64M",
        "workload.params.updates=20000",
        "host.os.fragmentation.method=\"free2m\"",
        "host.os.fragmentation.target=1.0",
        "host.os.khugepaged.sleep_ms=0.01",
    ]);
    let r = run("radix4@radix4-thp", &sets);
    assert_eq!(r.driver["host_os"]["promotions"].as_u64().unwrap(), 0);
    assert!(r.driver["host_os"]["promotion_failures"].as_u64().unwrap() > 0);
}

/// Host coverage counts a host's contiguous-bit groups as the translations they are: an arm64 host
/// with ET's CoalaPaging and contiguous bit backs guest memory with 2 MiB pages placed in 32 MiB
/// groups, reported as `host_coverage_32m` (without CoalaPaging the host VMA's 2 MiB alignment
/// leaves them out of step with physical 32 MiB blocks: no group), and the sizes still add up to
/// the bytes backed.
#[test]
fn host_coverage_counts_contiguous_groups() {
    let mut sets = VM.to_vec();
    sets.extend_from_slice(&["workload.name=\"gups\"", "workload.params.table=256M", "workload.params.updates=20000"]);
    let cov = |r: &xlate::sim::RunOutput| -> Vec<u64> {
        ["4k", "64k", "2m", "32m", "1g"].iter().map(|s| r.driver[&format!("host_coverage_{s}")].as_u64().unwrap()).collect()
    };
    let plain = cov(&run("arm64-4k@arm64-thp", &sets));
    let cont = cov(&run("arm64-4k@et-greedy", &sets));
    assert_eq!(plain[1] + plain[3], 0, "no contiguous bit: {plain:?}");
    assert!(cont[3] > 0, "32 MiB groups on the host: {cont:?}");
    assert_eq!(plain.iter().sum::<u64>(), cont.iter().sum::<u64>(), "{plain:?} vs {cont:?}");
}

/// Every preset's machine runs a guest@host design on its own guest memory (`virtuoso`'s 128 GiB
/// guest needs its 256 GiB host), checked.
#[test]
fn every_preset_runs_a_nested_design() {
    let d = arch::lookup("radix4@radix4").unwrap();
    for p in xlate::config::PRESETS {
        let sets = vec![
            "workload.name=\"gups\"".into(),
            "workload.params.table=\"64M\"".into(),
            "sim.max_accesses=20000".into(),
            "sim.checked=true".into(),
        ];
        let cfg = xlate::config::Layers { preset: Some(p.name.into()), file: None, sets }
            .resolve(Some(d))
            .unwrap_or_else(|e| panic!("{}: {e}", p.name));
        let r = xlate::sim::run(d, &cfg, &[], false).unwrap_or_else(|e| panic!("{}: {e}", p.name));
        assert_eq!(r.core.checked, r.core.accesses, "{}", p.name);
    }
}

/// A nested run whose guest outgrows the default 64 GiB host gets a host sized for it, unless a
/// layer names `host.os.memory`; native runs and guests that fit keep the default.
#[test]
fn an_unnamed_host_memory_fits_the_guest() {
    let host = |design: &str, sets: &[&str]| config(design, sets).host.os.memory >> 30;
    assert_eq!(host("radix4@radix4", &[]), 64, "the default 32 GiB guest fits the default host");
    assert_eq!(host("radix4@radix4", &["os.memory=63G"]), 64, "a guest that fits keeps the default");
    assert_eq!(host("radix4@radix4", &["os.memory=128G"]), 144, "128 GiB and an eighth");
    assert_eq!(host("ecpt@radix4", &["os.memory=100G"]), 113, "in whole GiB, rounded up");
    assert_eq!(host("radix4@radix4", &["os.memory=128G", "host.os.memory=200G"]), 200, "named: kept");
    assert_eq!(host("radix4@radix4", &["os.memory=128G", "host.os.memory=64G"]), 64, "named, even to the default");
    assert_eq!(host("radix4@radix4", &["os.memory=128G", "host.os.swap.enabled=true"]), 64, "a swapping host overcommits");
    assert_eq!(host("radix4", &["os.memory=128G"]), 64, "a native run has no host");
    // A named host too small for its guest is refused, in sizes a reader can check.
    let cfg = config("radix4@radix4", &["os.memory=3G", "host.os.memory=3G"]);
    let e = xlate::sim::run(arch::lookup("radix4@radix4").unwrap(), &cfg, &[], false).map(|_| ()).expect_err("refused").to_string();
    assert!(e.contains("`host.os.memory`: is 3 GiB, and must exceed the guest's os.memory (3 GiB) by at least 64 MiB"), "{e}");
}
