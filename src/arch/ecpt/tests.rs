//! Unit tests of the ECPT driver: cuckoo maintenance, walk tables, iterators, walk plans.

use super::*;
use crate::os::phys::PhysMem;
use crate::rng::Rng;
use crate::tapi::{prot, Func, Path};
use std::collections::{BTreeMap as Map2, HashMap};

fn cfg(entries: u64) -> EcptConfig {
    EcptConfig { entries_per_way: entries, sizes: vec![PageSize::K4, PageSize::M2, PageSize::G1], ..EcptConfig::emt() }
}

fn phys() -> PhysMem {
    PhysMem::new(4 << 30, 14)
}

/// All counted OS work.
fn work(c: &OsCost) -> u64 {
    Path::ALL.iter().flat_map(|&p| Func::ALL.iter().map(move |&f| (p, f))).map(|(p, f)| c.ops(p, f)).sum()
}

/// The header every section should have, recomputed from a list of mappings and table locations.
fn expected_headers(s: &EcptSpace, maps: &Map2<u64, PageSize>) -> (Map2<u64, u8>, Map2<u64, u8>) {
    let mut pmd: Map2<u64, u8> = Map2::new();
    let mut pud: Map2<u64, u8> = Map2::new();
    for (&va, &size) in maps {
        let g = pud.entry(va >> 30).or_default();
        match size {
            PageSize::K4 => {
                *g |= H_4K;
                *pmd.entry(va >> 21).or_default() |= H_4K;
            }
            PageSize::M2 => {
                *g |= H_2M;
                *pmd.entry(va >> 21).or_default() |= H_2M | (s.way_of(1, va >> 21) << WAY_SHIFT);
            }
            _ => *g |= H_1G | (s.way_of(2, va >> 30) << WAY_SHIFT),
        }
    }
    (pmd, pud)
}

fn check_headers(s: &EcptSpace, maps: &Map2<u64, PageSize>) {
    let (pmd, pud) = expected_headers(s, maps);
    for (lvl, want) in [(Lvl::Pmd, &pmd), (Lvl::Pud, &pud)] {
        for (&k, &h) in want {
            assert_eq!(s.stored_header(lvl, k), h, "{lvl:?} header of section {k:#x}");
        }
        // Nothing else is set, and each line's count is its number of non-zero headers.
        if let Some(c) = s.cwt(lvl) {
            for line in c.live_lines() {
                let nz = line.data.iter().filter(|&&h| h != 0).count();
                assert_eq!(line.count as usize, nz, "{lvl:?} line {:#x} count", line.tag);
                assert!(nz > 0, "empty {lvl:?} line kept");
                for (i, &h) in line.data.iter().enumerate() {
                    if h != 0 {
                        assert!(want.contains_key(&(line.tag * 64 + i as u64)), "{lvl:?} header for unmapped section");
                    }
                }
            }
        }
    }
}

#[test]
fn cuckoo_insert_kick_resize_keep_every_entry_findable() {
    // 4 entries per way: the table is resized many times and kicks are constant. Pages are random
    // 4 KiB pages over 64 GiB, so almost every page is its own cluster.
    let c = EcptConfig { entries_per_way: 4, ..EcptConfig::emt() };
    let mut r = Ecpt::new(&c, 1);
    let (mut ph, mut cost) = (phys(), OsCost::default());
    let mut env = TdbEnv { phys: &mut ph, cost: &mut cost };
    let mut s = r.create_space(1, &mut env).unwrap();
    let mut rng = Rng::new(5);
    let mut live: Vec<u64> = Vec::new();
    let mut pos: HashMap<u64, usize> = HashMap::new();
    let mut gone: Vec<u64> = Vec::new();
    let pa = |va: u64| (va >> 12 & 0xf_ffff) << 12;
    for step in 0..40_000u32 {
        if step % 4 == 3 && !live.is_empty() {
            let k = rng.below(live.len() as u64) as usize;
            let va = live.swap_remove(k);
            pos.remove(&va);
            if k < live.len() {
                pos.insert(live[k], k);
            }
            let o = r.remove(&mut s, va, PageSize::K4, &mut env).expect("mapped page removed");
            assert_eq!((o.va, o.pa), (va, pa(va)));
            assert!(r.find(&mut s, va, &mut env).is_none(), "removed page still found");
            gone.push(va);
        } else {
            let va = rng.below(1 << 24) << 12;
            if pos.contains_key(&va) {
                continue;
            }
            r.update(&mut s, &TObj::new(va, pa(va), PageSize::K4, prot::RW), &mut env).unwrap();
            pos.insert(va, live.len());
            live.push(va);
            gone.retain(|&g| g != va);
        }
        // Every step: a sample of live and removed pages; every 512 steps: all of them.
        let full = step % 512 == 0;
        let n = if full { live.len() } else { live.len().min(24) };
        for k in 0..n {
            let va = if full { live[k] } else { live[rng.below(live.len() as u64) as usize] };
            assert_eq!(r.find(&mut s, va, &mut env).map(|o| o.pa), Some(pa(va)), "step {step}: lost {va:#x}");
        }
        for &va in gone.iter().rev().take(if full { usize::MAX } else { 8 }) {
            assert!(r.find(&mut s, va, &mut env).is_none(), "step {step}: {va:#x} found after removal");
        }
    }
    let m = r.metrics();
    assert!(m["kicks"].as_u64().unwrap() > 1000, "{m:?}");
    assert!(m["resizes"].as_u64().unwrap() >= 9, "{m:?}");
    assert!(m["entries_moved"].as_u64().unwrap() > 0);
    let t = s.tables[0].as_ref().unwrap();
    let clusters: std::collections::HashSet<u64> = live.iter().map(|va| va >> 15).collect();
    assert_eq!(t.live_lines().count(), clusters.len(), "one line per cluster with a live page");
    for w in t.ways() {
        assert!(w.cur.used() as f64 <= 0.6 * w.cur.len() as f64 + 1.0, "occupancy bounded by the threshold");
    }
    // Every table page goes back to the allocator.
    r.destroy_space(s, &mut env).unwrap();
    assert_eq!(ph.free_pages(), ph.total_pages());
}

#[test]
fn lookups_during_a_gradual_resize_probe_old_and_new() {
    let c = EcptConfig { entries_per_way: 64, migrate_per_step: 1, cwt: false, ..EcptConfig::emt() };
    let mut r = Ecpt::new(&c, 2);
    let (mut ph, mut cost) = (phys(), OsCost::default());
    let mut env = TdbEnv { phys: &mut ph, cost: &mut cost };
    let mut s = r.create_space(1, &mut env).unwrap();
    let mut wc = r.new_walk_cache();
    let mut mapped = Vec::new();
    let (mut during, mut finished) = (0, false);
    let mut seen_migrating = false;
    for k in 0..2000u64 {
        let va = k * (8 << 12) + 0x4000_0000; // one page per cluster
        r.update(&mut s, &TObj::new(va, k << 12, PageSize::K4, prot::RW), &mut env).unwrap();
        mapped.push(va);
        let t = s.tables[0].as_ref().unwrap();
        let migrating = t.migrating();
        if migrating {
            during += 1;
            seen_migrating = true;
        } else if seen_migrating {
            finished = true;
        }
        let arrays = t.arrays();
        for &v in &mapped {
            let o = r.find(&mut s, v, &mut env).expect("findable during migration");
            let mut plan = WalkPlan { checked: true, ..WalkPlan::default() };
            let tr = r.walk(&mut s, &mut wc, 1, v, &mut plan).expect("walk finds it");
            assert_eq!(tr.pbase, o.pa);
            assert_eq!(plan.refs.len() as u32, arrays, "every way and every old array probed");
            assert_eq!(plan.refs.iter().filter(|r| r.needed).count(), 1);
            assert_eq!(plan.unfiltered, arrays);
        }
        if finished && k > 200 {
            break;
        }
    }
    assert!(during > 20, "a gradual migration spans many inserts ({during})");
    assert!(finished, "the migration completed");
    // Old arrays are freed once drained: only current arrays remain.
    let t = s.tables[0].as_ref().unwrap();
    assert!(!t.migrating());
    assert_eq!(t.bytes(), t.ways().iter().map(|w| w.cur.bytes()).sum::<u64>());
}

#[test]
fn walk_table_headers_agree_with_the_tables_after_every_change() {
    // Tiny tables so 2 MiB and 1 GiB clusters are kicked and migrated (their way is in headers).
    let mut r = Ecpt::new(&cfg(2), 3);
    let (mut ph, mut cost) = (phys(), OsCost::default());
    let mut env = TdbEnv { phys: &mut ph, cost: &mut cost };
    let mut s = r.create_space(1, &mut env).unwrap();
    let mut rng = Rng::new(9);
    let mut maps: Map2<u64, PageSize> = Map2::new();
    // One core's CWCs stay warm across the changes; the OS's shootdown follows each removal.
    let mut wc = r.new_walk_cache();
    let mut stale_ways = 0;
    let mut pa = 1u64 << 30;
    let covered = |maps: &Map2<u64, PageSize>, va: u64, size: PageSize| {
        maps.range(..va + size.bytes()).next_back().is_some_and(|(&v, &sz)| v + sz.bytes() > va)
            || maps.range(va..va + size.bytes()).next().is_some()
    };
    for step in 0..6000 {
        if rng.below(3) == 0 && !maps.is_empty() {
            let k = rng.below(maps.len() as u64) as usize;
            let (&va, &size) = maps.iter().nth(k).unwrap();
            r.remove(&mut s, va, size, &mut env).expect("mapped");
            r.invalidate_walk_cache(&mut wc, 1, va, va + size.bytes());
            maps.remove(&va);
        } else {
            let size = match rng.below(20) {
                0 => PageSize::G1,
                1..=7 => PageSize::M2,
                _ => PageSize::K4,
            };
            // 16 GiB of address space; 4 KiB pages gathered in a few 2 MiB sections.
            let va = match size {
                PageSize::K4 => (rng.below(64) << 21) + (rng.below(24) << 12) + (rng.below(8) << 30),
                _ => size.align_down(rng.below(16 << 30)),
            };
            if covered(&maps, va, size) {
                assert!(
                    r.update(&mut s, &TObj::new(va, 0, size, prot::RW), &mut env).is_err() || maps.contains_key(&va),
                    "overlap accepted"
                );
                continue;
            }
            pa += size.bytes();
            let pa_al = size.align_down(pa) + size.bytes();
            pa = pa_al;
            r.update(&mut s, &TObj::new(va, pa_al, size, prot::RW), &mut env).unwrap();
            maps.insert(va, size);
        }
        check_headers(&s, &maps);
        // Walks with the warm CWCs return the OS's translation even where a cached header's way
        // is out of date (the cluster moved; the OS rewrote the header but invalidated nothing).
        for _ in 0..4 {
            let Some((&va, &size)) = maps.iter().nth(rng.below(maps.len().max(1) as u64) as usize) else { break };
            let own = match size {
                PageSize::M2 => Some((Lvl::Pmd, va >> 21)),
                PageSize::G1 => Some((Lvl::Pud, va >> 30)),
                _ => None,
            };
            if let Some((l, key)) = own {
                let cached = wc.header(l, 1, key);
                if cached.is_some_and(|h| h & (H_2M | H_1G) != 0 && header_way(h) != header_way(s.stored_header(l, key))) {
                    stale_ways += 1;
                }
            }
            let (t, _) = walk(&mut r, &mut s, &mut wc, 1, va + 0x42);
            assert_eq!(t.map(|t| (t.pbase, t.size)), r.find(&mut s, va, &mut env).map(|o| (o.pa, o.size)));
        }
        if step % 500 == 0 {
            for (&va, &size) in &maps {
                assert_eq!(r.find(&mut s, va, &mut env).map(|o| (o.va, o.size)), Some((va, size)));
            }
        }
    }
    let m = r.metrics();
    assert!(m["kicks_2m"].as_u64().unwrap() > 0 && m["resizes_2m"].as_u64().unwrap() > 0, "{m:?}");
    assert!(stale_ways > 0, "no walk met a cached header with an old way");
    assert!(m["stale_cwc_fallbacks"].as_u64().unwrap() >= stale_ways, "{m:?}");
}

#[test]
fn optimized_iterators_equal_the_generic_ones_and_cost_less() {
    let mut r = Ecpt::new(&cfg(64), 4);
    let (mut ph, mut cost) = (phys(), OsCost::default());
    let mut env = TdbEnv { phys: &mut ph, cost: &mut cost };
    let mut s = r.create_space(1, &mut env).unwrap();
    let mut rng = Rng::new(11);
    // GiB 0: 4 KiB pages in dense and sparse patches; GiB 1: 2 MiB pages; GiB 2: one 1 GiB page;
    // GiB 3: mixed.
    let mut pa = 0u64;
    let mut map = |r: &mut Ecpt, s: &mut EcptSpace, env: &mut TdbEnv, va: u64, size: PageSize| {
        pa = size.align_down(pa) + size.bytes();
        r.update(s, &TObj::new(va, pa, size, prot::RW), env).unwrap();
    };
    for _ in 0..3000 {
        let va = (rng.below(40) << 21) + (rng.below(512) << 12);
        if r.find(&mut s, va, &mut env).is_none() {
            map(&mut r, &mut s, &mut env, va, PageSize::K4);
        }
    }
    for k in (0..512u64).filter(|k| k % 3 != 0) {
        map(&mut r, &mut s, &mut env, (1 << 30) + (k << 21), PageSize::M2);
    }
    map(&mut r, &mut s, &mut env, 2 << 30, PageSize::G1);
    for k in 0..64u64 {
        if k % 2 == 0 {
            map(&mut r, &mut s, &mut env, (3 << 30) + (k << 21), PageSize::M2);
        } else {
            map(&mut r, &mut s, &mut env, (3 << 30) + (k << 21) + (rng.below(512) << 12), PageSize::K4);
        }
    }
    let (mut opt_work, mut gen_work, mut thp_checks) = (0u64, 0u64, 0);
    for i in 0..400 {
        let (a, b) = match i % 4 {
            // THP eligibility check of a 2 MiB region.
            0 => {
                let a = (rng.below(4 << 9)) << 21;
                (a, a + (2 << 20))
            }
            1 => {
                let a = rng.below(4 << 30);
                (a, a + rng.below(64 << 12) + 1)
            }
            2 => {
                let a = rng.below(4 << 30) & !0xfff;
                (a, a + (rng.below(24) << 21))
            }
            _ => {
                let a = rng.below(4 << 30);
                (a, a + rng.below(64 << 20))
            }
        };
        let before = work(env.cost);
        let fast = r.range_is_empty(&mut s, a, b, &mut env);
        let mut v1 = Vec::new();
        r.for_each(&mut s, a, b, &mut env, &mut |o| v1.push(*o));
        let mid = work(env.cost);
        let slow = generic_range_is_empty(&mut r, &mut s, a, b, &mut env);
        let mut v2 = Vec::new();
        generic_for_each(&mut r, &mut s, a, b, &mut env, &mut |o| v2.push(*o));
        let after = work(env.cost);
        assert_eq!(fast, slow, "range_is_empty {a:#x}..{b:#x}");
        assert_eq!(v1, v2, "for_each {a:#x}..{b:#x}");
        opt_work += mid - before;
        gen_work += after - mid;
        if i % 4 == 0 {
            thp_checks += 1;
            assert!(mid - before < after - mid, "THP check of {a:#x}: optimized {} vs generic {}", mid - before, after - mid);
        }
    }
    assert!(thp_checks == 100 && opt_work * 10 < gen_work, "optimized {opt_work} vs generic {gen_work}");
    // The switch delegates to the generic functions.
    r.cfg.optimized_api = false;
    let before = work(env.cost);
    assert!(!r.range_is_empty(&mut s, 0, 1 << 30, &mut env));
    assert!(r.range_is_empty(&mut s, 50 << 21, 51 << 21, &mut env));
    assert!(work(env.cost) - before > 512, "generic check probes every 4 KiB page of an empty 2 MiB range");
}

#[test]
fn walks_set_the_accessed_bit() {
    let mut r = Ecpt::new(&EcptConfig::emt(), 5);
    let (mut ph, mut cost) = (phys(), OsCost::default());
    let mut env = TdbEnv { phys: &mut ph, cost: &mut cost };
    let mut s = r.create_space(7, &mut env).unwrap();
    let (a, b) = (0x4020_3000u64, 0x1_8060_0000u64);
    r.update(&mut s, &TObj::new(a, 0x9000, PageSize::K4, prot::RW), &mut env).unwrap();
    r.update(&mut s, &TObj::new(a + 0x1000, 0xa000, PageSize::K4, prot::RW), &mut env).unwrap();
    r.update(&mut s, &TObj::new(b, 0x20_0000, PageSize::M2, prot::RW), &mut env).unwrap();
    let mut wc = r.new_walk_cache();
    for va in [a + 0x10, b + 0x1234] {
        assert!(!r.find(&mut s, va, &mut env).unwrap().accessed);
        r.walk(&mut s, &mut wc, 7, va, &mut WalkPlan::default()).unwrap();
        assert!(r.find(&mut s, va, &mut env).unwrap().accessed);
    }
    assert!(!r.find(&mut s, a + 0x1000, &mut env).unwrap().accessed, "only the PTE walked, not its cluster");
    let o = r.find(&mut s, a, &mut env).unwrap();
    r.update(&mut s, &TObj { accessed: false, ..o }, &mut env).unwrap();
    assert_eq!(r.find(&mut s, a, &mut env).unwrap(), TObj::new(a, 0x9000, PageSize::K4, prot::RW));
}

/// The host prefetch names a slot the walk probes where the walk probes the 4 KiB ways (a 4 KiB
/// page, an unmapped address), so the simulated cache sets it prefetches are ones the walk reads.
/// (A 2 MiB page's header narrows its walk to the 2 MiB ways: the hint is then unused.)
#[test]
fn prefetch_names_a_slot_the_walk_probes() {
    let mut r = Ecpt::new(&EcptConfig::emt(), 5);
    let (mut ph, mut cost) = (phys(), OsCost::default());
    let mut env = TdbEnv { phys: &mut ph, cost: &mut cost };
    let mut s = r.create_space(7, &mut env).unwrap();
    r.update(&mut s, &TObj::new(0x4020_3000, 0x9000, PageSize::K4, prot::RW), &mut env).unwrap();
    r.update(&mut s, &TObj::new(0x1_8060_0000, 0x20_0000, PageSize::M2, prot::RW), &mut env).unwrap();
    let mut wc = r.new_walk_cache();
    for va in [0x4020_3010u64, 0x7000_0000] {
        let entry = r.prefetch(&s, va).expect("tables exist");
        let mut plan = WalkPlan::default();
        r.walk(&mut s, &mut wc, 7, va, &mut plan);
        assert!(plan.refs.iter().any(|x| x.paddr == entry), "{va:#x}: {entry:#x} not among {:?}", plan.refs);
    }
    // The second stage names the line holding each mapped page's entry, and none for a page
    // nothing maps.
    // and the index of the entry the walk reads there.
    for (va, size) in [(0x4020_3010u64, PageSize::K4), (0x1_8060_0000, PageSize::M2)] {
        let mut found = Vec::new();
        Ecpt::candidate_lines(&s, va, |l, j| found.push((l.tag, j)));
        let vpn = va >> size.shift();
        assert!(found.contains(&(vpn >> 3, (vpn & 7) as usize)), "{va:#x}: {found:?}");
    }
    let mut n = 0;
    Ecpt::candidate_lines(&s, 0x7000_0000, |_, _| n += 1);
    assert_eq!(n, 0);
}

/// One checked walk: no violation allowed.
fn walk(r: &mut Ecpt, s: &mut EcptSpace, wc: &mut EcptCwc, asid: u16, va: u64) -> (Option<Translation>, WalkPlan) {
    let mut plan = WalkPlan { checked: true, ..WalkPlan::default() };
    let t = r.walk(s, wc, asid, va, &mut plan);
    assert!(plan.violation.is_none(), "{va:#x}: {:?}", plan.violation);
    (t, plan)
}

/// (references in step `k`, of which needed) for k = 0, 1.
fn shape(p: &WalkPlan) -> [(usize, usize); 2] {
    [0, 1].map(|k| (p.refs.iter().filter(|r| r.step == k).count(), p.refs.iter().filter(|r| r.step == k && r.needed).count()))
}

#[test]
fn walk_plans_use_the_walk_caches() {
    let mut r = Ecpt::new(&EcptConfig::emt(), 5);
    let (mut ph, mut cost) = (phys(), OsCost::default());
    let mut env = TdbEnv { phys: &mut ph, cost: &mut cost };
    let mut s = r.create_space(7, &mut env).unwrap();
    let (a, b, c) = (0x4020_3000u64, 0x1_8060_0000u64, 0x4020_5000u64);
    r.update(&mut s, &TObj::new(a, 0x9000, PageSize::K4, prot::RW), &mut env).unwrap();
    r.update(&mut s, &TObj::new(b, 0x20_0000, PageSize::M2, prot::RW), &mut env).unwrap();
    let mut wc = r.new_walk_cache();
    // Cold CWCs: every way of both tables at once (one of them needed), and the PMD- and PUD-CWT
    // lines (2 ways each) fetched alongside, not waited for.
    let (t, p) = walk(&mut r, &mut s, &mut wc, 7, a + 0x123);
    assert_eq!(t.map(|t| t.paddr(a + 0x123)), Some(0x9123));
    assert_eq!(p.fixed_cycles, 3, "hash 2 + CWC 1");
    assert_eq!((p.wc_hits, p.wc_misses), (0, 2));
    assert_eq!(shape(&p), [(6 + 4, 1), (0, 0)]);
    assert_eq!(p.unfiltered, 6, "3 ways of the 4 KiB table and 3 of the 2 MiB table");
    // Warm: the cached headers say 4 KiB pages, which have no way in a header: the 3 ways of the
    // 4 KiB table (EMT: "look up the specific page table (with the size)").
    let (t, p) = walk(&mut r, &mut s, &mut wc, 7, a);
    assert_eq!(t.unwrap().pbase, 0x9000);
    assert_eq!(p.wc_hits, 2);
    assert_eq!(shape(&p), [(3, 1), (0, 0)]);
    // The 2 MiB page: its PUD line is cached (64 GiB of sections), its PMD line is not: the PUD
    // header names the size, so the 3 ways of the 2 MiB table; the PMD line comes alongside.
    let (t, p) = walk(&mut r, &mut s, &mut wc, 7, b + 0x1234);
    assert_eq!(t.unwrap().paddr(b + 0x1234), 0x20_1234);
    assert_eq!((p.wc_hits, p.wc_misses), (1, 1));
    assert_eq!(shape(&p), [(3 + 2, 1), (0, 0)]);
    // Warm: the PMD header names the way ("or the specific way"): exactly one memory reference.
    let (t, p) = walk(&mut r, &mut s, &mut wc, 7, b + 0x5000);
    assert_eq!(t.map(|t| (t.pbase, t.size)), Some((0x20_0000, PageSize::M2)));
    assert_eq!((p.refs.len(), p.serial_steps()), (1, 1), "CWC hit: exactly one probe");
    assert!(p.refs[0].needed);
    // An unmapped page in a 4 KiB section: the 4 KiB ways miss, then the walker tries the ways
    // the headers excluded (it cannot tell a stale header from a fault) and refreshes the lines.
    let (t, p) = walk(&mut r, &mut s, &mut wc, 7, c);
    assert!(t.is_none());
    assert_eq!(shape(&p), [(3, 3), (3 + 4, 3)]);
    // An empty region: no CWT line to cache; every way, all needed.
    let (t, p) = walk(&mut r, &mut s, &mut wc, 7, 0x7000_0000_0000);
    assert!(t.is_none());
    assert_eq!(shape(&p), [(6 + 4, 6), (0, 0)]);
    // The walk's translation equals the OS's find.
    for va in [a, b, b + (1 << 20), c] {
        let (t, _) = walk(&mut r, &mut s, &mut wc, 7, va);
        assert_eq!(t.map(|t| t.paddr(va)), r.find(&mut s, va, &mut env).map(|o| o.pa + (va - o.va)));
    }
    // A stale way (the OS moved the cluster and rewrote the header; the cached copy still has the
    // old way): the one probe misses, the other ways find it, and the lines are fetched again.
    let way = s.stored_header(Lvl::Pmd, b >> 21) >> WAY_SHIFT & 3;
    let mut line = s.cwt(Lvl::Pmd).map(|c| c.line(c.peek(b >> 27).unwrap()).data).unwrap();
    line[(b >> 21 & 63) as usize] = H_2M | ((way + 1) % 3) << WAY_SHIFT;
    wc.fill(Lvl::Pmd, 7, b >> 21, Some(line));
    let stale = r.metrics()["stale_cwc_fallbacks"].as_u64().unwrap();
    let (t, p) = walk(&mut r, &mut s, &mut wc, 7, b);
    assert_eq!(t.map(|t| t.pbase), Some(0x20_0000));
    assert_eq!(shape(&p), [(1, 1), (3 + 2 + 2 + 2, 1)], "the wrong way, then the 5 others and both lines");
    assert_eq!(r.metrics()["stale_cwc_fallbacks"].as_u64().unwrap(), stale + 1);
    let (_, p) = walk(&mut r, &mut s, &mut wc, 7, b);
    assert_eq!(p.refs.len(), 1, "refreshed");
    // A shootdown of the range drops the lines covering it.
    r.invalidate_walk_cache(&mut wc, 7, b, b + (2 << 20));
    let (t, p) = walk(&mut r, &mut s, &mut wc, 7, b);
    assert!(t.is_some());
    assert_eq!(p.wc_misses, 2);
}

#[test]
fn walk_options_wait_for_cwt_way_oracle_and_perfect_cwc() {
    let (mut ph, mut cost) = (phys(), OsCost::default());
    let mut env = TdbEnv { phys: &mut ph, cost: &mut cost };
    let (a, b) = (0x4020_3000u64, 0x1_8060_0000u64);
    let setup = |cfg: &EcptConfig, env: &mut TdbEnv| {
        let mut r = Ecpt::new(cfg, 5);
        let mut s = r.create_space(7, env).unwrap();
        r.update(&mut s, &TObj::new(a, 0x9000, PageSize::K4, prot::RW), env).unwrap();
        r.update(&mut s, &TObj::new(b, 0x20_0000, PageSize::M2, prot::RW), env).unwrap();
        let wc = r.new_walk_cache();
        (r, s, wc)
    };
    // wait_for_cwt: a CWC miss fetches the CWT lines first (the PMD one needed), then probes what
    // they allow.
    let (mut r, mut s, mut wc) = setup(&EcptConfig { wait_for_cwt: true, ..EcptConfig::emt() }, &mut env);
    let (_, p) = walk(&mut r, &mut s, &mut wc, 7, a);
    assert_eq!(shape(&p), [(4, 1), (3, 1)]);
    assert_eq!(p.serial_steps(), 2);
    // cwc_way = false: a header gives the size only, so a warm 2 MiB walk probes its 3 ways.
    let (mut r, mut s, mut wc) = setup(&EcptConfig { cwc_way: false, ..EcptConfig::emt() }, &mut env);
    walk(&mut r, &mut s, &mut wc, 7, b);
    let (_, p) = walk(&mut r, &mut s, &mut wc, 7, b);
    assert_eq!(shape(&p), [(3, 1), (0, 0)]);
    // The correct-way oracle (EMT's simulator's variant): one reference per walk that hits, even
    // cold; every way when it faults.
    let (mut r, mut s, mut wc) = setup(&EcptConfig { correct_way_only: true, ..EcptConfig::emt() }, &mut env);
    let (t, p) = walk(&mut r, &mut s, &mut wc, 7, a);
    assert_eq!(t.map(|t| t.pbase), Some(0x9000));
    assert_eq!(shape(&p), [(1 + 4, 1), (0, 0)], "the holder and the background CWT lines");
    let (_, p) = walk(&mut r, &mut s, &mut wc, 7, a);
    assert_eq!(shape(&p), [(1, 1), (0, 0)]);
    let (t, p) = walk(&mut r, &mut s, &mut wc, 7, a + 0x1000);
    assert!(t.is_none());
    assert_eq!(shape(&p), [(6, 6), (0, 0)]);
    // Utopia's ECH (perfect CWC): no CWT reference ever, the 4 ways of the 4 KiB table even on
    // the first walk (Utopia §3: "ECH looks up 4 hash tables in parallel"), one probe for the
    // 2 MiB page.
    let c = EcptConfig { sizes: vec![PageSize::K4, PageSize::M2], ..EcptConfig::ech_utopia() };
    let (mut r, mut s, mut wc) = setup(&c, &mut env);
    let (t, p) = walk(&mut r, &mut s, &mut wc, 7, a);
    assert_eq!(t.map(|t| t.pbase), Some(0x9000));
    assert_eq!(p.fixed_cycles, 4, "CityHash 2 + CWC 2");
    assert_eq!((p.wc_hits, p.wc_misses), (2, 0));
    assert_eq!(shape(&p), [(4, 1), (0, 0)]);
    let (_, p) = walk(&mut r, &mut s, &mut wc, 7, b + 0x777);
    assert_eq!(shape(&p), [(1, 1), (0, 0)]);
    let m = r.metrics();
    assert_eq!((m["cwt_refs"].as_u64(), m["cwc_hit_rate"].as_f64()), (Some(0), Some(1.0)));
    // A fault probes every way of every table (nothing to narrow to), all needed.
    let (t, p) = walk(&mut r, &mut s, &mut wc, 7, a + 0x1000);
    assert!(t.is_none());
    assert_eq!(shape(&p), [(4, 4), (4, 4)]);
}

#[test]
fn config_validation_and_presets() {
    assert!(EcptConfig::emt().validate("arch.ecpt").is_ok());
    assert!(EcptConfig::ech_utopia().validate("arch.ecpt").is_ok());
    assert!(EcptConfig::virtuoso().validate("arch.ecpt").is_ok());
    let bad = EcptConfig { ways: 5, ..EcptConfig::emt() };
    assert!(bad.validate("arch.ecpt").unwrap_err().to_string().contains("arch.ecpt.ways"));
    let bad = EcptConfig { sizes: vec![PageSize::M2], ..EcptConfig::emt() };
    assert!(bad.validate("arch.ecpt").is_err());
    let bad = EcptConfig { sizes: vec![PageSize::K4, PageSize::K64], ..EcptConfig::emt() };
    assert!(bad.validate("arch.ecpt").is_err());
    // The default section is EMT's, and a 2 MiB page needs the 2 MiB table.
    let r = Ecpt::new(&EcptConfig { sizes: vec![PageSize::K4], ..EcptConfig::emt() }, 0);
    assert!(r.can_map(0, PageSize::M2).is_err());
    assert_eq!(Ecpt::new(&EcptConfig::default(), 0).leaf_sizes(), &[PageSize::K4, PageSize::M2]);
}
