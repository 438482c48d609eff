//! Tests of the Utopia driver: RestSeg geometry, walks, placement, migration, iterators.

use super::*;
use crate::os::{Os, OsConfig};
use crate::tapi::prot;

/// The RestSeg walk of `va` in process `asid` of `os`.
fn rsw(os: &mut crate::os::Os<Utopia>, asid: u16, wc: &mut UtopiaWc, va: u64, plan: &mut WalkPlan) -> Option<Translation> {
    let p = &mut os.procs[asid as usize];
    os.driver.side_lookup(&mut p.space, wc, asid, va, plan)
}

fn seg(size: u64, page: PageSize, ways: u32) -> RestSegConfig {
    RestSegConfig { size, page, ways, hash: SetHash::Modulo }
}

fn os_with(cfg: UtopiaConfig, memory: u64, swap: bool) -> Os<Utopia> {
    let mut oc = OsConfig { memory, ..OsConfig::default() };
    oc.swap.enabled = swap;
    oc.swap.min_free = 0;
    let d = Utopia::new(&cfg, &super::super::radix::RadixConfig::default());
    Os::boot(d, &oc, 1).unwrap()
}

fn check(os: &mut Os<Utopia>) {
    let Os { driver, procs, .. } = os;
    driver.check_consistency(procs.iter_mut().map(|p| &mut p.space)).unwrap();
    // The OS's truth and the driver agree on every page.
    for p in procs.iter_mut() {
        let mut objs = Vec::new();
        let mut cost = OsCost::default();
        let mut phys = PhysMem::new(64 << 20, 9);
        driver.for_each(&mut p.space, 0, 1 << 47, &mut TdbEnv { phys: &mut phys, cost: &mut cost }, &mut |o| objs.push(*o));
        let n: u64 = p.truth.counts().iter().sum();
        assert_eq!(objs.len() as u64, n, "ASID {}", p.asid);
        for o in objs {
            assert_eq!(p.truth.lookup(o.va), Some((o.pa, o.size)), "{:#x}", o.va);
        }
    }
}

#[test]
fn size_formulas_match_the_paper() {
    // Footnotes 8-9 example: 16 KB RestSeg, 4 KB pages, 2-way: TAR 180 bits, SF 4 bits.
    assert_eq!(tar_bits(16 << 10, 4096, 2, 48), 180);
    assert_eq!(sf_bits(16 << 10, 4096, 2), 4);
    // §8.3.1: a 512 MB 4 KB 16-way RestSeg has a 528 KB TAR.
    assert_eq!(tar_bits(512 << 20, 4096, 16, 48) / 8, 528 << 10);
    // SF: 8192 sets × 5 bits = 5 KB (the paper's 17 KB does not follow from footnote 9).
    assert_eq!(sf_bits(512 << 20, 4096, 16) / 8, 5 << 10);
    // Fig. 13's direction: TAR+SF smaller than the radix table for the same pages.
    let pages = (512u64 << 20) / 4096;
    assert!(tar_bits(512 << 20, 4096, 16, 48) / 8 + sf_bits(512 << 20, 4096, 16) / 8 < radix_bytes_for(pages, PageSize::K4, 4));
    assert_eq!(radix_bytes_for(pages, PageSize::K4, 4), (256 + 1 + 1 + 1) * 4096);
}

#[test]
fn set_hashes() {
    let s = 64u64;
    for h in [SetHash::Modulo, SetHash::Xor, SetHash::Prime, SetHash::Mersenne] {
        for v in 0..10_000u64 {
            assert!(h.set(v * 7919, s) < s);
        }
    }
    // Modulo: consecutive VPNs fill consecutive sets; a stride of `sets` lands in one set.
    assert_eq!((0..64).map(|v| SetHash::Modulo.set(v, s)).collect::<Vec<_>>(), (0..64).collect::<Vec<_>>());
    assert!((0..16).all(|i| SetHash::Modulo.set(i * s, s) == 0));
    // XOR and prime displacement spread that stride over distinct sets.
    for h in [SetHash::Xor, SetHash::Prime] {
        let mut sets: Vec<u64> = (0..16).map(|i| h.set(i * s, s)).collect();
        sets.sort();
        sets.dedup();
        assert_eq!(sets.len(), 16, "{h:?}");
    }
    // Mersenne modulo over 64 sets uses 63 of them: vpn mod 63.
    assert_eq!(SetHash::Mersenne.set(63, s), 0);
    assert_eq!(SetHash::Mersenne.set(64, s), 1);
    assert!((0..1000).all(|v| SetHash::Mersenne.set(v, s) < 63));
    assert_eq!(SetHash::Xor.set(0b01_000011, 64), 0b000011 ^ 0b01);
    assert_eq!(SetHash::Prime.set(2 * 64 + 5, 64), 2 * 17 + 5);
}

/// A TAR tag and its set name the VPN back, for every hash and set count the configs allow
/// (XOR needs a power of two), including one set and counts that are not powers of two.
#[test]
fn tar_tags_and_sets_give_the_vpn_back() {
    let mut rng = crate::rng::Rng::new(9);
    for h in [SetHash::Modulo, SetHash::Xor, SetHash::Prime, SetHash::Mersenne] {
        for sets in [1u64, 2, 3, 7, 8, 64, 100, 1000, 8192, 1 << 20] {
            if h == SetHash::Xor && !sets.is_power_of_two() {
                continue;
            }
            let d = h.divisor(sets);
            for _ in 0..2_000 {
                let vpn = rng.below(1 << 45);
                let set = h.set(vpn, sets);
                assert_eq!(h.vpn(set, vpn / d, sets), vpn, "{h:?}, {sets} sets, vpn {vpn:#x}");
            }
        }
    }
}

#[test]
fn srrip_victims_on_a_hand_made_sequence() {
    // One set of 4 ways (4 × 4 KiB RestSeg), FlexSeg behind it.
    let cfg = UtopiaConfig { restsegs: vec![seg(16 << 10, PageSize::K4, 4)], ..UtopiaConfig::default() };
    let mut os = os_with(cfg, 256 << 20, false);
    let a = os.spawn(true).unwrap();
    let base = 0x1000_0000u64;
    let pg = |i: u64| base + i * 4096;
    // Fill A B C D (ways 0..3, RRPV 2 each).
    for i in 0..4 {
        os.fault(a, pg(i)).unwrap();
    }
    let in_rest = |os: &Os<Utopia>, i: u64| os.driver.owns_frame(os.truth(a, pg(i)).unwrap().pbase);
    assert!((0..4).all(|i| in_rest(&os, i)));
    // RSW hit on B: RRPV 0.
    let mut wc = os.driver.new_walk_cache();
    let mut plan = WalkPlan::default();
    let t = rsw(&mut os, a, &mut wc, pg(1), &mut plan).unwrap();
    assert_eq!(Some(t), os.truth(a, pg(1)));
    // E: ages to [3 1 3 3], evicts A (way 0). F evicts C (way 2), G evicts D, then H ages [.. 2 ..]
    // and evicts B last.
    os.fault(a, pg(4)).unwrap();
    assert!(!in_rest(&os, 0) && in_rest(&os, 1) && in_rest(&os, 4));
    os.fault(a, pg(5)).unwrap();
    assert!(!in_rest(&os, 2));
    os.fault(a, pg(6)).unwrap();
    assert!(!in_rest(&os, 3));
    assert!(in_rest(&os, 1), "the reused page survives three fills");
    // All evicted pages still mapped, in the FlexSeg.
    for i in 0..7 {
        assert!(os.truth(a, pg(i)).is_some());
    }
    assert_eq!(os.stats.evictions, 3);
    check(&mut os);
}

/// `victim_hint` names, without changing anything, the page the next placement moves out: none
/// while the set has a free way or for a page already in a RestSeg, else SRRIP's victim as RSW
/// hits left it (two sets of 4 ways; faults and hits in a random order).
#[test]
fn victim_hint_names_the_page_placement_moves_out() {
    let cfg = UtopiaConfig { restsegs: vec![seg(32 << 10, PageSize::K4, 4)], ..UtopiaConfig::default() };
    let mut os = os_with(cfg, 256 << 20, false);
    let a = os.spawn(true).unwrap();
    let pg = |i: u64| 0x1000_0000u64 + i * 4096;
    let in_rest = |os: &Os<Utopia>, i: u64| os.driver.owns_frame(os.truth(a, pg(i)).unwrap().pbase);
    let mut rng = crate::rng::Rng::new(5);
    let (mut wc, mut plan) = (os.driver.new_walk_cache(), WalkPlan::default());
    let mut named = 0;
    for i in 0..60 {
        // Hits on random resident pages change the SRRIP state the hint must follow.
        for _ in 0..rng.below(3) {
            let j = rng.below(i.max(1));
            if i > 0 && in_rest(&os, j) {
                plan.clear();
                rsw(&mut os, a, &mut wc, pg(j), &mut plan).unwrap();
            }
        }
        let hint = os.driver.victim_hint(&os.procs[a as usize].space, pg(i), PageSize::K4);
        let evictions = os.stats.evictions;
        os.fault(a, pg(i)).unwrap();
        assert!(in_rest(&os, i), "page {i}");
        match hint {
            Some((asid, va)) => {
                assert_eq!(os.stats.evictions, evictions + 1, "page {i}");
                let j = (va - pg(0)) / 4096;
                assert!(asid == a && j < i && !in_rest(&os, j), "page {i}: hint {va:#x}");
                named += 1;
            }
            None => assert_eq!(os.stats.evictions, evictions, "page {i}: nothing named, yet a page moved out"),
        }
        let resident = (0..=i).find(|&j| in_rest(&os, j)).unwrap();
        assert_eq!(os.driver.victim_hint(&os.procs[a as usize].space, pg(resident), PageSize::K4), None);
    }
    assert_eq!(named, 52, "every fault after the 8 free ways names its victim");
    check(&mut os);
}

/// The artifact's ULB (`arch.utopia.ulb`): an RSW hit fills it, the next lookup of the page is
/// answered by it with no RSW and no reference, a shootdown of the page drops it; `holds` (the
/// oracle of `rsw_start = "before-l1"`) follows the TAR.
#[test]
fn ulb_answers_after_an_rsw_hit_until_a_shootdown() {
    let cfg =
        UtopiaConfig { restsegs: vec![seg(16 << 10, PageSize::K4, 4)], ulb: WalkCacheConfig::new(64, 4, 0), ..UtopiaConfig::default() };
    let mut os = os_with(cfg, 256 << 20, false);
    let a = os.spawn(true).unwrap();
    let pg = |i: u64| 0x1000_0000u64 + i * 4096;
    for i in 0..4 {
        os.fault(a, pg(i)).unwrap();
    }
    let holds = |os: &Os<Utopia>, va: u64| os.driver.holds(&os.procs[a as usize].space, a, va);
    assert!(holds(&os, pg(1) + 8) && !holds(&os, pg(9)));
    let mut wc = os.driver.new_walk_cache();
    let mut plan = WalkPlan::default();
    let t = rsw(&mut os, a, &mut wc, pg(1), &mut plan).unwrap();
    assert_eq!(Some(t), os.truth(a, pg(1)));
    assert!(!plan.refs.is_empty(), "cold TAR/SF caches");
    assert_eq!((os.driver.rsw, os.driver.ulb_lookups, os.driver.ulb_hits), (1, 1, 0));
    plan.clear();
    assert_eq!(rsw(&mut os, a, &mut wc, pg(1) + 8, &mut plan), Some(t));
    assert!(plan.refs.is_empty() && plan.fixed_cycles == 0, "a ULB hit: no RSW");
    assert_eq!((os.driver.rsw, os.driver.ulb_hits), (1, 1));
    os.driver.invalidate_walk_cache(&mut wc, a, pg(1), pg(2));
    plan.clear();
    assert_eq!(rsw(&mut os, a, &mut wc, pg(1), &mut plan), Some(t));
    assert_eq!((os.driver.rsw, os.driver.ulb_hits), (2, 1), "the shootdown dropped the ULB entry");
    // A fifth page evicts the SRRIP victim to the FlexSeg: the RestSeg no longer holds it.
    os.fault(a, pg(4)).unwrap();
    assert_eq!((0..5).filter(|&i| holds(&os, pg(i))).count(), 4);
    check(&mut os);
}

#[test]
fn tar_and_sf_agree_with_the_global_tar_through_allocation_eviction_migration_and_unmap() {
    // Two processes share a small 4 KiB RestSeg (8 sets × 2 ways) and a 2 MiB one (1 set × 2 ways).
    let cfg = UtopiaConfig { restsegs: vec![seg(64 << 10, PageSize::K4, 2), seg(4 << 20, PageSize::M2, 2)], ..UtopiaConfig::default() };
    let mut os = os_with(cfg, 512 << 20, false);
    let a = os.spawn(false).unwrap();
    let b = os.spawn(false).unwrap();
    let fl = MapFlags::default();
    let va = os.mmap(a, 64 << 20, fl).unwrap();
    let vb = os.mmap(b, 64 << 20, fl).unwrap();
    let mut rng = crate::rng::Rng::new(7);
    for _ in 0..400 {
        let (asid, base) = if rng.next_u64().is_multiple_of(2) { (a, va) } else { (b, vb) };
        let off = (rng.next_u64() % 64) * 4096;
        match rng.next_u64() % 8 {
            0 => os.munmap(asid, base + off, 4096).unwrap_or(()),
            1 => {
                // A PTW-tracking request for a FlexSeg page, served at the next tick.
                if let Some(t) = os.truth(asid, base + off) {
                    if !os.driver.owns_frame(t.pbase) {
                        let p = &mut os.procs[asid as usize];
                        os.driver.walk_observed(&mut p.space, asid, base + off, Some(t), 2);
                        os.driver.walk_observed(&mut p.space, asid, base + off, Some(t), 1);
                    }
                }
                os.tick(0.0).unwrap();
            }
            _ => {
                if os.vma(asid, base + off).is_some() && os.truth(asid, base + off).is_none() {
                    os.fault(asid, base + off).unwrap();
                }
            }
        }
        check(&mut os);
    }
    assert!(os.stats.evictions > 0, "{:?}", os.stats);
    assert!(os.stats.migrations > 0, "{:?}", os.stats);
    let m = os.driver.metrics();
    assert!(m["fault_allocations"].as_u64().unwrap() > 0);
    assert!(m["migrations_to_restseg"].as_u64().unwrap() > 0);
}

#[test]
fn shared_pages_stay_in_the_flexseg_and_huge_pages_use_the_2m_restseg() {
    let cfg = UtopiaConfig::default();
    let mut os = os_with(cfg, 2 << 30, false);
    let a = os.spawn(false).unwrap();
    let shared = MapFlags { shared: true, ..MapFlags::default() };
    let v = os.mmap(a, 1 << 20, shared).unwrap();
    let t = os.fault(a, v).unwrap();
    assert!(!os.driver.owns_frame(t.pbase));
    let h = os.mmap(a, 8 << 20, MapFlags { huge: crate::workload::HugeAdvice::Huge, ..MapFlags::default() }).unwrap();
    let p = os.fault(a, h).unwrap();
    // THP is off in this OS, so the 4 KiB RestSeg holds it.
    assert_eq!(p.size, PageSize::K4);
    assert!(os.driver.owns_frame(p.pbase));
    // Placing a 2 MiB page by hand through the API: the 2 MiB RestSeg frame is accepted.
    let g = os.driver.segs.iter().position(|g| g.page == PageSize::M2).unwrap();
    let seg = &os.driver.segs[g];
    let hb = h + (2 << 20);
    let set = seg.set_of(hb >> 21);
    let pa = seg.slot_pa(set * seg.ways);
    let mut cost = OsCost::default();
    let mut phys = PhysMem::new(64 << 20, 9);
    let (d, s) = (&mut os.driver, &mut os.procs[a as usize].space);
    d.update(s, &TObj::new(hb, pa, PageSize::M2, prot::RW), &mut TdbEnv { phys: &mut phys, cost: &mut cost }).unwrap();
    // A 4 KiB page inside it is an overlap; a frame in the wrong set is refused.
    assert!(d
        .update(s, &TObj::new(hb + 4096, 0x7000_0000, PageSize::K4, prot::RW), &mut TdbEnv { phys: &mut phys, cost: &mut cost })
        .is_err());
    let wrong = seg_pa_other_set(d, g, hb + (2 << 20));
    assert!(d
        .update(s, &TObj::new(hb + (2 << 20), wrong, PageSize::M2, prot::RW), &mut TdbEnv { phys: &mut phys, cost: &mut cost })
        .is_err());
    assert_eq!(d.find(s, hb + 12345, &mut TdbEnv { phys: &mut phys, cost: &mut cost }).unwrap().pa, pa);
}

fn seg_pa_other_set(d: &Utopia, g: usize, va: u64) -> u64 {
    let seg = &d.segs[g];
    let set = seg.set_of(va >> seg.shift);
    seg.slot_pa(((set + 1) % seg.sets as usize) * seg.ways)
}

#[test]
fn rsw_references_and_the_sf_filter() {
    let cfg = UtopiaConfig::default();
    let mut os = os_with(cfg, 2 << 30, false);
    let a = os.spawn(true).unwrap();
    let mut wc = os.driver.new_walk_cache();
    let mut plan = WalkPlan::default();
    // Nothing mapped: both SF lines are fetched (SF cache cold), TAR lines too but not waited for.
    assert!(rsw(&mut os, a, &mut wc, 0x4000_0000, &mut plan).is_none());
    assert_eq!(plan.fixed_cycles, 2);
    assert!(plan.refs.iter().filter(|r| r.needed).count() == 2, "{:?}", plan.refs);
    assert!(plan.refs.len() > 2);
    // Again: SF cache hits and says empty, so nothing goes to memory.
    plan.clear();
    assert!(rsw(&mut os, a, &mut wc, 0x4000_0000, &mut plan).is_none());
    assert!(plan.refs.is_empty());
    // Mapped: found, with the frame the OS installed.
    let t = os.fault(a, 0x4000_0000).unwrap();
    plan.clear();
    wc = os.driver.new_walk_cache();
    assert_eq!(rsw(&mut os, a, &mut wc, 0x4000_0123, &mut plan), Some(t));
    // The FlexSeg walk does not see it.
    plan.clear();
    assert!(os.driver.walk(&mut os.procs[a as usize].space, &mut wc, a, 0x4000_0000, &mut plan).is_none());
}

#[test]
fn restrictive_only_swaps_a_set_conflict_out() {
    // No FlexSeg: one 4 KiB RestSeg of 4 sets × 2 ways; the fifth and later pages of a set evict.
    let cfg = UtopiaConfig { restsegs: vec![seg(32 << 10, PageSize::K4, 2)], flexseg: false, ..UtopiaConfig::default() };
    let mut os = os_with(cfg, 128 << 20, true);
    let a = os.spawn(true).unwrap();
    // Pages 0, 4, 8 hash to set 0: the third is a conflict although 6 ways are free.
    for i in [0u64, 4, 8] {
        os.fault(a, i * 4096).unwrap();
    }
    assert_eq!(os.stats.swap_outs, 1);
    assert!(os.truth(a, 0).is_none(), "page 0 (SRRIP victim) went to swap");
    os.fault(a, 0).unwrap();
    assert_eq!(os.stats.swap_ins, 1);
    assert_eq!(os.stats.faults_swapin, 1);
    check(&mut os);
}

/// fork shares every page, and shared pages live in the FlexSeg: the parent's RestSeg pages move
/// out first (evictions), then parent and child map the same FlexSeg frames; the first store
/// copies the page into the writer's RestSeg set again.
#[test]
fn fork_moves_restseg_pages_to_the_flexseg_before_sharing_them() {
    let mut os = os_with(UtopiaConfig::default(), 2 << 30, false);
    let a = os.spawn(false).unwrap();
    let v = os.mmap(a, 64 << 10, MapFlags::default()).unwrap();
    for i in 0..16 {
        os.fault(a, v + i * 4096).unwrap();
    }
    assert!((0..16).all(|i| os.driver.owns_frame(os.truth(a, v + i * 4096).unwrap().pbase)), "faults fill the RestSeg");
    let c = os.fork(a).unwrap();
    assert_eq!(os.stats.evictions, 16, "every RestSeg page moved out");
    assert_eq!(os.stats.cow_shared_pages, 16);
    for i in 0..16 {
        let (p, q) = (os.truth(a, v + i * 4096).unwrap(), os.truth(c, v + i * 4096).unwrap());
        assert_eq!(p, q, "page {i}: one frame, both address spaces");
        assert!(!os.driver.owns_frame(p.pbase), "page {i} is in the FlexSeg");
    }
    check(&mut os);
    // The child's store copies the page; the copy is private, so it goes to the RestSeg.
    assert!(os.cow_fault(c, v, 0.0).unwrap().is_some());
    assert!(os.driver.owns_frame(os.truth(c, v).unwrap().pbase));
    assert!(!os.driver.owns_frame(os.truth(a, v).unwrap().pbase));
    check(&mut os);
}

/// Without a FlexSeg a page cannot be mapped by two address spaces: fork is refused with the
/// reason, not a bare "frame taken".
#[test]
fn restrictive_only_refuses_fork_clearly() {
    let cfg = UtopiaConfig { restsegs: vec![seg(1 << 20, PageSize::K4, 4)], flexseg: false, ..UtopiaConfig::default() };
    let mut os = os_with(cfg, 128 << 20, true);
    let a = os.spawn(false).unwrap();
    let v = os.mmap(a, 16 << 10, MapFlags::default()).unwrap();
    os.fault(a, v).unwrap();
    let e = os.fork(a).unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "a design limit, not a bug: {e:?}");
    let e = e.to_string();
    assert!(e.contains("without a FlexSeg") && e.contains("copy-on-write"), "{e}");
}

/// Without a FlexSeg the RestSeg takes all memory but `kernel_reserve`, where every address
/// space's TAR and SF live: running out of it names that key, not `os.memory`.
#[test]
fn restrictive_only_names_the_kernel_reserve_when_tars_do_not_fit() {
    let cfg = UtopiaConfig { restsegs: vec![seg(0, PageSize::K4, 16)], flexseg: false, kernel_reserve: 4 << 20, ..UtopiaConfig::default() };
    let mut os = os_with(cfg, 256 << 20, false);
    let e = (0..64).find_map(|_| os.spawn(false).err()).expect("a 4 MiB reserve runs out of TARs");
    let e = e.to_string();
    assert!(e.contains("arch.utopia.kernel_reserve (now 4 MiB)") && !e.contains("raise os.memory"), "{e}");
}

#[test]
fn a_huge_victim_is_split_when_memory_has_no_2m_block() {
    let cfg = UtopiaConfig { restsegs: vec![seg(4 << 20, PageSize::M2, 2)], ..UtopiaConfig::default() };
    let mut oc = OsConfig { memory: 256 << 20, thp: crate::os::ThpMode::Always, ..OsConfig::default() };
    oc.fragmentation.method = crate::os::FragMethod::Free2m;
    oc.fragmentation.target = 1.0;
    let d = Utopia::new(&cfg, &super::super::radix::RadixConfig::default());
    let mut os = Os::boot(d, &oc, 1).unwrap();
    assert_eq!(os.phys.free_blocks(9), 0, "no free 2 MiB block outside the RestSeg");
    let a = os.spawn(false).unwrap();
    let v = os.mmap(a, 16 << 20, MapFlags::default()).unwrap();
    for i in 0..3 {
        assert_eq!(os.fault(a, v + i * (2 << 20)).unwrap().size, PageSize::M2);
    }
    // The third 2 MiB page evicted the first, which now lives in 512 FlexSeg 4 KiB pages.
    assert_eq!(os.stats.evictions, 1);
    assert_eq!(os.truth(a, v + 0x1234).unwrap().size, PageSize::K4);
    assert_eq!(os.procs[a as usize].truth.counts()[PageSize::K4.index()], 512);
    check(&mut os);
}

/// The host prefetch names the entry the FlexSeg walk ends at, for a page the FlexSeg maps.
#[test]
fn prefetch_names_the_flexseg_walks_last_entry() {
    let mut os = os_with(UtopiaConfig::default(), 2 << 30, false);
    let a = os.spawn(false).unwrap();
    let v = os.mmap(a, 1 << 20, MapFlags { shared: true, ..MapFlags::default() }).unwrap();
    os.fault(a, v).unwrap();
    let entry = os.driver.prefetch(&os.procs[a as usize].space, v + 123);
    let (mut wc, mut plan) = (os.driver.new_walk_cache(), WalkPlan::default());
    assert!(os.driver.walk(&mut os.procs[a as usize].space, &mut wc, a, v + 123, &mut plan).is_some());
    assert_eq!(entry, Some(plan.refs.last().unwrap().paddr));
}

/// The range index answers as a filter over the TAR does, on each of its paths: a few pages
/// (TAR rows), a range within the RestSeg's size (regions that hold pages), and a larger one
/// (a scan of the TAR); and a caller that stops at the first page stops there.
#[test]
fn range_queries_match_a_scan_of_the_tar() {
    let cfg = UtopiaConfig { restsegs: vec![seg(1 << 20, PageSize::K4, 4)], ..UtopiaConfig::default() };
    let mut os = os_with(cfg, 256 << 20, false);
    let a = os.spawn(false).unwrap();
    let base = os.mmap(a, 64 << 20, MapFlags::default()).unwrap();
    let mut rng = crate::rng::Rng::new(11);
    for _ in 0..3000 {
        let va = base + rng.below(16384) * 4096;
        if os.truth(a, va).is_none() {
            os.fault(a, va).unwrap();
        }
    }
    check(&mut os);
    let s = &os.procs[a as usize].space;
    let d = &os.driver;
    let held: Vec<(u64, usize)> = d.segs[0].pages(&s.segs[0]).map(|(slot, vpn)| (vpn, slot)).collect();
    assert!(held.len() > 200, "the RestSeg fills: {}", held.len());
    let first = base >> 12;
    for k in 0..600 {
        let span = match k % 3 {
            0 => 1 + rng.below(4),
            1 => 5 + rng.below(3000),
            _ => 300 + rng.below(20000),
        };
        let lo = first.saturating_sub(100) + rng.below(16500);
        let hi = lo + span;
        let mut got = Vec::new();
        assert!(!d.pages_in(s, 0, lo, hi, |vpn, slot| {
            got.push((vpn, slot));
            true
        }));
        got.sort_unstable();
        let mut want: Vec<(u64, usize)> = held.iter().copied().filter(|&(t, _)| (lo..hi).contains(&t)).collect();
        want.sort_unstable();
        assert_eq!(got, want, "[{lo:#x}, {hi:#x})");
        let mut calls = 0;
        let stopped = d.pages_in(s, 0, lo, hi, |_, _| {
            calls += 1;
            false
        });
        assert_eq!((stopped, calls), (!want.is_empty(), usize::from(!want.is_empty())));
    }
}

/// An OS whose Utopia places pages in a RestSeg (1 MiB of 4 KiB pages, 4 ways) only by
/// PTW-tracking migration with the given thresholds, with one process, its 4 MiB VMA's base, and
/// that page faulted in (to the FlexSeg).
fn migration_only_os(min_walks: u32, min_dram_refs: u32) -> (Os<Utopia>, u16, u64) {
    let cfg = UtopiaConfig {
        fault_alloc: FaultAlloc::Off,
        migrate: MigrateConfig { enabled: true, min_walks, min_dram_refs },
        restsegs: vec![seg(1 << 20, PageSize::K4, 4)],
        ..UtopiaConfig::default()
    };
    let mut os = os_with(cfg, 256 << 20, false);
    let a = os.spawn(false).unwrap();
    let base = os.mmap(a, 4 << 20, MapFlags::default()).unwrap();
    os.fault(a, base).unwrap();
    (os, a, base)
}

/// A FlexSeg page's PTW counters are bits of its PTE (§5.5): a walk counts in them, an update of
/// the page's mapping keeps them, a new page starts at zero, and a page over both thresholds is
/// queued once with its counters cleared.
#[test]
fn ptw_counters_live_in_the_flexseg_pte() {
    let (mut os, a, base) = migration_only_os(3, 2);
    os.fault(a, base + 4096).unwrap();
    let t = os.truth(a, base).unwrap();
    assert!(!os.driver.owns_frame(t.pbase), "a FlexSeg page");
    let counts = |os: &mut Os<Utopia>, va: u64| {
        let p = &mut os.procs[a as usize];
        policy::ptw_count(*os.driver.radix.leaf_entry_mut(&mut p.space.radix, va).unwrap())
    };
    let observe = |os: &mut Os<Utopia>, va: u64, dram: u32| {
        let p = &mut os.procs[a as usize];
        os.driver.walk_observed(&mut p.space, a, va, Some(t), dram);
    };
    observe(&mut os, base + 8, 1);
    assert_eq!(counts(&mut os, base), (1, 1));
    // A change of the mapping (read-only now) keeps them; the translation is unchanged.
    let mut phys = PhysMem::new(64 << 20, 9);
    let mut cost = OsCost::default();
    let p = &mut os.procs[a as usize];
    os.driver
        .update(&mut p.space, &TObj::new(base, t.pbase, PageSize::K4, prot::READ), &mut TdbEnv { phys: &mut phys, cost: &mut cost })
        .unwrap();
    assert_eq!(counts(&mut os, base), (1, 1));
    assert_eq!(
        os.driver.find(&mut os.procs[a as usize].space, base, &mut TdbEnv { phys: &mut phys, cost: &mut cost }).unwrap().pa,
        t.pbase
    );
    assert_eq!(counts(&mut os, base + 4096), (0, 0), "another page's PTE");
    observe(&mut os, base, 0);
    assert_eq!(counts(&mut os, base), (2, 1));
    assert!(os.driver.take_migrations().is_empty());
    observe(&mut os, base, 3);
    assert_eq!(counts(&mut os, base), (0, 0), "queued: the counters start again");
    let reqs = os.driver.take_migrations();
    assert_eq!(reqs.len(), 1);
    assert_eq!((reqs[0].va, reqs[0].size), (base, PageSize::K4));
}

/// A fault is placed as a fault and a requested move as a migration, whatever requests are
/// outstanding: the OS says which it asks for. With `fault_alloc` off, a fault goes to the
/// FlexSeg while a move evicts from a full RestSeg set. (Utopia once learned "migrating" from a
/// record of the requests handed to the OS, so a request the OS skipped, its page unmapped
/// meanwhile, made a later fault of that page in the same epoch a migration.)
#[test]
fn a_fault_of_a_page_with_a_skipped_request_is_placed_as_a_fault() {
    let (mut os, a, base) = migration_only_os(1, 0);
    let t = os.truth(a, base).unwrap();
    assert!(!os.driver.owns_frame(t.pbase), "fault_alloc off: a FlexSeg page");
    let p = &mut os.procs[a as usize];
    os.driver.walk_observed(&mut p.space, a, base, Some(t), 0);
    let reqs = os.driver.take_migrations();
    assert_eq!(reqs, vec![MigrationRequest { asid: a, va: base, size: PageSize::K4 }]);
    // The OS skips the request (say the page was unmapped) and later places the page anew.
    let mut phys = PhysMem::new(64 << 20, 9);
    let mut cost = OsCost::default();
    let env = &mut TdbEnv { phys: &mut phys, cost: &mut cost };
    let fl = MapFlags::default();
    assert_eq!(os.driver.place(&mut p.space, a, base, PageSize::K4, fl, env), Placement::Buddy, "a fault");
    match os.driver.place_migrating(&mut p.space, reqs[0], fl, env) {
        Placement::Frame { pa, evict: None } => assert!(os.driver.owns_frame(pa)),
        other => panic!("a requested move goes to a free RestSeg way, not {other:?}"),
    }
    // Through the OS: the request moves the page into the RestSeg at the next epoch.
    os.driver.walk_observed(&mut p.space, a, base, Some(t), 0);
    os.tick(0.0).unwrap();
    assert!(os.driver.owns_frame(os.truth(a, base).unwrap().pbase), "moved at the epoch");
    assert_eq!(os.stats.migrations, 1);
}
