//! Driver conformance: every registered MMU driver goes through the same generic checks of the
//! translation API's contract (src/tapi/tdb.rs, src/tapi/driver.rs), with seeded random inputs.
//!
//! 1. Iterators: on random layouts of 4 KiB, 2 MiB and 1 GiB pages, the driver's `for_each` and
//!    `range_is_empty` return what the generic versions built on `find` return (and what was
//!    inserted), on ranges that cut huge pages, fall in holes, are empty or unaligned.
//! 2. `map_range`: the driver's version leaves exactly the translations `generic_map_range` leaves
//!    on a fresh driver, and stays consistent through later removals and remaps.
//! 3. The OS against the ground truth: random mmap / touch / munmap (partial too) / madvise +
//!    khugepaged / tick sequences, after each of which `find`, the hardware walk and the side
//!    lookup agree with `Os::truth` for sampled addresses of every live VMA and of unmapped holes.
//! 4. Every design (not only every driver) maps and walks an 8 MiB region on the small machine,
//!    and where its driver has a host prefetch, the entry it names is one the walk of a 4 KiB
//!    page reads.
//!
//! Seeds are fixed; `XLATE_CONFORMANCE_SEED=n` runs other random inputs.
//!
//! A driver registered in `arch::DRIVERS` but not listed here fails `every_registered_driver_is_covered`
//! and `every_design_maps_and_walks_8_mib`.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use xlate::addr::PageSize;
use xlate::arch::arm64::Arm64;
use xlate::arch::dipta::Dipta;
use xlate::arch::ecpt::Ecpt;
use xlate::arch::fpt::Fpt;
use xlate::arch::pomtlb::PomTlb;
use xlate::arch::radix::Radix;
use xlate::arch::rmm::Rmm;
use xlate::arch::sparta::Sparta;
use xlate::arch::utopia::Utopia;
use xlate::arch::{self, Registered};
use xlate::config::Config;
use xlate::os::phys::PhysMem;
use xlate::os::Os;
use xlate::rng::Rng;
use xlate::tapi::{generic_for_each, generic_map_range, generic_range_is_empty};
use xlate::tapi::{prot, Driver, HugeAdvice, MapFlags, OsCost, Placement, TObj, TdbEnv, Translation, WalkPlan};

const K4: u64 = 4 << 10;
const M2: u64 = 2 << 20;
const G1: u64 = 1 << 30;

/// Virtual window the direct driver tests (1 and 2) map into: 4 GiB at 256 GiB.
const WIN: u64 = 256 << 30;
const WIN_LEN: u64 = 4 << 30;

/// Fabricated physical addresses for the direct tests start here, above the small machine's
/// memory, so they never collide with table frames (and are FlexSeg frames for Utopia).
const FAKE_PA: u64 = 16 << 30;

/// Settings every OS-level run adds: a 1 GiB hugetlb page, THP on advice, a khugepaged that scans
/// a lot per wake-up and wakes up often.
const OS_SETS: &[&str] = &["os.hugetlb_1g=1G", "os.thp=madvise", "os.khugepaged.pages_to_scan=16384", "os.khugepaged.sleep_ms=20"];

/// Utopia's RestSegs sized for the 2 GiB machine, small enough that pages are evicted and migrated.
const UTOPIA_SMALL: &str = "arch.utopia.restsegs=[{size=\"16M\",page=\"4K\",ways=16},{size=\"32M\",page=\"2M\",ways=16}]";

/// One configuration a driver is checked under.
struct Case {
    design: &'static str,
    sets: &'static [&'static str],
}

/// Declares one `#[test]` per driver (named after the driver) running [`conform`] over its cases,
/// and `COVERED`, the drivers declared.
macro_rules! conformance {
    ($($name:ident: $ty:ty => [$($case:expr),* $(,)?];)*) => {
        $(
            #[test]
            fn $name() {
                conform::<$ty>(stringify!($name), &[$($case),*]);
            }
        )*
        const COVERED: &[&str] = &[$(stringify!($name)),*];
    };
}

conformance! {
    radix: Radix => [Case { design: "radix4-thp", sets: &[] }, Case { design: "radix5", sets: &[] }];
    fpt: Fpt => [
        Case { design: "fpt-l3l2-thp", sets: &[] },
        Case { design: "fpt-l4l3-l2l1", sets: &[] },
        Case { design: "fpt-l4l3", sets: &["os.thp=always"] },
        Case { design: "fpt-l2l1", sets: &[] },
    ];
    ecpt: Ecpt => [Case { design: "ecpt-thp", sets: &["arch.ecpt.sizes=[\"4K\",\"2M\",\"1G\"]"] }, Case { design: "ech", sets: &[] }];
    pomtlb: PomTlb => [Case { design: "pomtlb", sets: &[] }, Case { design: "pomtlb", sets: &["os.thp=always", "arch.pomtlb.walk=\"parallel\""] }];
    rmm: Rmm => [Case { design: "rmm", sets: &[] }];
    utopia: Utopia => [
        Case { design: "utopia-thp", sets: &[UTOPIA_SMALL] },
        Case { design: "utopia", sets: &["arch.utopia.restsegs=[{size=\"4M\",page=\"4K\",ways=4,hash=\"xor\"}]"] },
    ];
    arm64: Arm64 => [
        Case { design: "arm64-thp", sets: &[] },
        Case { design: "arm64-cont", sets: &[] },
        Case { design: "et-greedy", sets: &[] },
        Case { design: "arm64-mthp", sets: &[] },
        Case { design: "arm64-hugetlb-64k", sets: &[] },
    ];
    sparta: Sparta => [Case { design: "sparta-8", sets: &[] }, Case { design: "sparta-32-2m", sets: &[] }];
    dipta: Dipta => [Case { design: "dipta", sets: &[] }];
}

/// Calls `$f::<Driver>(args)` for the driver registered as `$name`.
macro_rules! for_driver {
    ($name:expr, $f:ident($($arg:expr),*)) => {
        match $name {
            "radix" => $f::<Radix>($($arg),*),
            "fpt" => $f::<Fpt>($($arg),*),
            "ecpt" => $f::<Ecpt>($($arg),*),
            "pomtlb" => $f::<PomTlb>($($arg),*),
            "rmm" => $f::<Rmm>($($arg),*),
            "utopia" => $f::<Utopia>($($arg),*),
            "arm64" => $f::<Arm64>($($arg),*),
            "sparta" => $f::<Sparta>($($arg),*),
            "dipta" => $f::<Dipta>($($arg),*),
            other => panic!("driver {other:?} is registered but tests/conformance.rs does not know its type: add it to for_driver! and conformance!"),
        }
    };
}

#[test]
fn every_registered_driver_is_covered() {
    let covered: BTreeSet<&str> = COVERED.iter().copied().collect();
    let registered: BTreeSet<&str> = arch::DRIVERS.iter().copied().collect();
    assert_eq!(covered, registered, "every driver in arch::DRIVERS needs a conformance! entry (and none else)");
    assert_eq!(covered.len(), COVERED.len(), "a driver listed twice in conformance!");
}

/// Runs checks 1-3 for driver `D`, registered as `name`, under each case.
fn conform<D: Registered>(name: &str, cases: &[Case]) {
    assert!(!cases.is_empty(), "{name}: no case");
    for (ci, case) in cases.iter().enumerate() {
        let design = arch::lookup(case.design).unwrap();
        assert_eq!(design.driver, name, "design {} runs on {}, not {name}", case.design, design.driver);
        assert!(D::DESIGNS.iter().any(|d| d.name == case.design), "{name}: the type listed does not declare {}", case.design);
        let what =
            format!("{name} [{}{}]", case.design, if case.sets.is_empty() { String::new() } else { format!(" {}", case.sets.join(" ")) });
        // Fixed seeds; XLATE_CONFORMANCE_SEED=n explores other sequences (the failure message
        // names the driver, case and operation to replay with that seed).
        let base = std::env::var("XLATE_CONFORMANCE_SEED").ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0xC0F0_0000);
        let seed = base + ci as u64 * 7919 + name.len() as u64;
        let direct = common::config(case.design, case.sets);
        let t = std::time::Instant::now();
        iterators::<D>(&what, &direct, seed);
        // A memory-side design routes each page by its virtual address, so a physically
        // contiguous run of pages (eager paging's map_range) cannot be placed: not checked.
        if build::<D>(&direct).memory_side().is_none() {
            map_ranges::<D>(&what, &direct, seed + 1);
        }
        let t1 = t.elapsed();
        let mut sets = case.sets.to_vec();
        // Memory-side designs place every page in its partition (or set) and map no 1 GiB pages:
        // a boot-time 1 GiB pool would only take their partitions' memory.
        let memory_side = build::<D>(&direct).memory_side().is_some();
        sets.extend(OS_SETS.iter().filter(|s| !memory_side || !s.starts_with("os.hugetlb_1g")));
        os_sequences::<D>(&what, &common::config(case.design, &sets), seed + 2);
        eprintln!("{what}: direct checks {:.2?}, OS sequences {:.2?}", t1, t.elapsed() - t1);
    }
}

fn build<D: Registered>(cfg: &Config) -> D {
    D::from_config(&D::config(&cfg.arch), cfg.seed).unwrap_or_else(|e| panic!("building the driver: {e}"))
}

/// A driver on its own physical memory (with the driver's boot-time reservations made), and one
/// address space.
struct Bench<D: Driver> {
    d: D,
    s: D::Space,
    phys: PhysMem,
    cost: OsCost,
    next_pa: u64,
}

const ASID: u16 = 1;

impl<D: Registered> Bench<D> {
    fn new(cfg: &Config) -> Self {
        let mut d = build::<D>(cfg);
        let mut phys = PhysMem::new(cfg.os.memory, cfg.os.max_order);
        if let Some(p) = d.placement() {
            p.boot(&mut phys).unwrap_or_else(|e| panic!("driver boot: {e}"));
        }
        let mut cost = OsCost::default();
        let s = d.create_space(ASID, &mut TdbEnv { phys: &mut phys, cost: &mut cost }).unwrap();
        Bench { d, s, phys, cost, next_pa: FAKE_PA }
    }

    fn env(&mut self) -> (&mut D, &mut D::Space, TdbEnv<'_>) {
        (&mut self.d, &mut self.s, TdbEnv { phys: &mut self.phys, cost: &mut self.cost })
    }

    /// A fresh fabricated physical range of `len` bytes aligned to `size`.
    fn fake_pa(&mut self, size: PageSize, len: u64) -> u64 {
        let pa = self.next_pa.div_ceil(size.bytes()) * size.bytes();
        self.next_pa = pa + len;
        pa
    }

    /// The frame for a page: the one the driver places it in if it chooses (and no page must be
    /// moved out of it), else a fabricated one.
    fn frame(&mut self, va: u64, size: PageSize) -> u64 {
        let (d, s, mut env) = self.env();
        if let Some(p) = d.placement() {
            match p.place(s, ASID, va, size, MapFlags::default(), &mut env) {
                Placement::Frame { pa, evict: None } => return pa,
                // A partition's range (SPARTA): a frame from its allocator.
                Placement::InRange { lo, hi } => {
                    if let Some(f) = env.phys.alloc_in_range(size.order(), lo >> 12, hi >> 12) {
                        return f.addr();
                    }
                }
                _ => {}
            }
        }
        self.fake_pa(size, size.bytes())
    }

    fn find(&mut self, va: u64) -> Option<TObj> {
        let (d, s, mut env) = self.env();
        d.find(s, va, &mut env)
    }

    fn for_each(&mut self, lo: u64, hi: u64, generic: bool) -> Vec<TObj> {
        let (d, s, mut env) = self.env();
        let mut v = Vec::new();
        if generic {
            generic_for_each(d, s, lo, hi, &mut env, &mut |o| v.push(*o));
        } else {
            d.for_each(s, lo, hi, &mut env, &mut |o| v.push(*o));
        }
        v
    }

    fn is_empty(&mut self, lo: u64, hi: u64, generic: bool) -> bool {
        let (d, s, mut env) = self.env();
        if generic {
            generic_range_is_empty(d, s, lo, hi, &mut env)
        } else {
            d.range_is_empty(s, lo, hi, &mut env)
        }
    }

    fn remove(&mut self, va: u64, size: PageSize) -> Option<TObj> {
        let (d, s, mut env) = self.env();
        let r = d.remove(s, va, size, &mut env);
        // As the OS does after removing: shoot down in-memory translation caches.
        if let Some(m) = d.memory_tlb() {
            m.shootdown(s, ASID, va, va + size.bytes(), &mut env);
        }
        r
    }

    /// The hardware's answer with a fresh walk cache.
    fn hw(&mut self, va: u64) -> Hw {
        let mut wc = self.d.new_walk_cache();
        hw(&mut self.d, &mut self.s, &mut wc, ASID, va)
    }
}

/// What the MMU finds for an address: the side structure's answer (looked up twice, so a lookup
/// that only fills its cache on a miss, like RMM's range walk, answers the second time), and the
/// hardware walk's, with the walk's reference count.
#[derive(Debug)]
struct Hw {
    va: u64,
    side: Option<Translation>,
    walk: Option<Translation>,
    walk_refs: u32,
    /// Addresses the walk read.
    walk_reads: Vec<u64>,
    violation: Option<&'static str>,
}

fn hw<D: Driver>(d: &mut D, s: &mut D::Space, wc: &mut D::WalkCache, asid: u16, va: u64) -> Hw {
    let mut plan = WalkPlan { checked: true, ..WalkPlan::default() };
    let side = match d.side() {
        Some(sl) => sl.side_lookup(s, wc, asid, va, &mut plan).or_else(|| sl.side_lookup(s, wc, asid, va, &mut plan)),
        None => None,
    };
    let mut violation = plan.violation;
    plan.clear();
    let walk = d.walk(s, wc, asid, va, &mut plan);
    violation = violation.or(plan.violation);
    Hw {
        va,
        side,
        walk,
        walk_refs: plan.refs.len() as u32,
        walk_reads: plan.refs.iter().filter(|r| !r.write).map(|r| r.paddr).collect(),
        violation,
    }
}

/// Checks the hardware's answer against the expected translation: a side hit must be right, a
/// walk that finds something must be right, and side-or-walk must find it. "Right" is what
/// checked mode asks: the accessed address gets the expected frame, from a translation at least
/// as large as the OS's (a contiguous group covers several of the OS's pages; each address it
/// serves is checked when used).
fn check_hw(h: &Hw, expect: Option<Translation>, ctx: &dyn Fn() -> String) {
    assert!(h.violation.is_none(), "{}: checked walk reported {:?}", ctx(), h.violation);
    let agrees = |t: Option<Translation>| match (t, expect) {
        (Some(t), Some(e)) => t.paddr(h.va) == e.paddr(h.va) && t.size >= e.size,
        (t, e) => t == e,
    };
    if h.side.is_some() {
        assert!(agrees(h.side), "{}: side lookup gave {:?}, expected {expect:?} (walk found {:?})", ctx(), h.side, h.walk);
    }
    if h.walk.is_some() {
        assert!(agrees(h.walk), "{}: hardware walk gave {:?}, expected {expect:?} (side lookup found {:?})", ctx(), h.walk, h.side);
    }
    assert!(agrees(h.side.or(h.walk)), "{}: neither the walk nor the side lookup translates (expected {expect:?})", ctx());
}

fn tr(o: &TObj) -> Translation {
    Translation { pbase: o.pa, size: o.size }
}

/// The attributes a driver must keep (access and dirty bits may be set by walks).
fn key(o: &TObj) -> (u64, u64, PageSize, u8) {
    (o.va, o.pa, o.size, o.prot)
}

fn keys(v: &[TObj]) -> Vec<(u64, u64, PageSize, u8)> {
    v.iter().map(key).collect()
}

/// Whether `[va, va+len)` overlaps an object of `model`.
fn overlaps(model: &BTreeMap<u64, TObj>, va: u64, len: u64) -> bool {
    model.range(..va + len).next_back().is_some_and(|(_, o)| o.end() > va)
}

/// The sizes `d` may map at `va`.
fn mappable<D: Driver>(d: &D, va: u64) -> Vec<PageSize> {
    [PageSize::K4, PageSize::M2, PageSize::G1].into_iter().filter(|&s| s.is_aligned(va) && d.can_map(va, s).is_ok()).collect()
}

// ---------------------------------------------------------------------------------------------
// 1. Iterator equivalence

fn iterators<D: Registered>(what: &str, cfg: &Config, seed: u64) {
    let mut rng = Rng::new(seed);
    for layout in 0..3 {
        let mut b = Bench::<D>::new(cfg);
        let mut model = BTreeMap::new();
        random_layout(&mut b, &mut model, &mut rng, what, layout);
        let sizes: BTreeSet<PageSize> = model.values().map(|o| o.size).collect();
        assert!(sizes.contains(&PageSize::K4), "{what}: layout {layout} has no 4 KiB page");
        for s in [PageSize::M2, PageSize::G1] {
            let can = b.d.leaf_sizes().contains(&s) && b.d.can_map(WIN, s).is_ok();
            assert_eq!(sizes.contains(&s), can, "{what}: layout {layout}: {s} pages present iff mappable");
        }
        compare_iterators(&mut b, &model, &mut rng, &format!("{what}: layout {layout}"));
        // Remove a random half and compare again (emptied tables freed, sets emptied, ...).
        let all: Vec<TObj> = model.values().copied().collect();
        for o in all {
            if rng.below(2) == 0 {
                let r = b.remove(o.va, o.size);
                assert_eq!(r.as_ref().map(key), Some(key(&o)), "{what}: layout {layout}: remove({:#x}, {}) returned {r:?}", o.va, o.size);
                model.remove(&o.va);
                assert!(b.find(o.va).is_none(), "{what}: layout {layout}: {:#x} still found after its removal", o.va);
            }
        }
        compare_iterators(&mut b, &model, &mut rng, &format!("{what}: layout {layout} after removing half"));
    }
}

/// Inserts a random layout into `b` (recorded in `model`): a 1 GiB page or two, dozens of 2 MiB
/// pages, clusters of 4 KiB pages (some right beside huge pages), each size only where the driver
/// can map it. Also checks that an insertion overlapping a different translation is refused.
fn random_layout<D: Registered>(b: &mut Bench<D>, model: &mut BTreeMap<u64, TObj>, rng: &mut Rng, what: &str, layout: u32) {
    let insert = |b: &mut Bench<D>, model: &mut BTreeMap<u64, TObj>, va: u64, size: PageSize, rng: &mut Rng| {
        if !mappable(&b.d, va).contains(&size) || overlaps(model, va, size.bytes()) {
            return;
        }
        let pa = b.frame(va, size);
        let p = [prot::RW, prot::READ, prot::RW | prot::EXEC][rng.below(3) as usize];
        let o = TObj::new(va, pa, size, p);
        let (d, s, mut env) = b.env();
        d.update(s, &o, &mut env).unwrap_or_else(|e| panic!("{what}: layout {layout}: update {o:?}: {e}"));
        model.insert(va, o);
    };
    for _ in 0..1 + rng.below(2) {
        let va = WIN + rng.below(WIN_LEN / G1) * G1;
        insert(b, model, va, PageSize::G1, rng);
    }
    for _ in 0..20 + rng.below(40) {
        let va = WIN + rng.below(WIN_LEN / M2) * M2;
        insert(b, model, va, PageSize::M2, rng);
    }
    // 4 KiB pages right before and after some huge pages.
    let huge: Vec<TObj> = model.values().copied().collect();
    for o in &huge {
        if rng.below(2) == 0 && o.va > WIN {
            insert(b, model, o.va - K4, PageSize::K4, rng);
        }
        if rng.below(2) == 0 {
            insert(b, model, o.end(), PageSize::K4, rng);
        }
    }
    // Clusters of 4 KiB pages with gaps, some dense enough to fill a 2 MiB region's table.
    for c in 0..40 {
        let base = WIN + rng.below(WIN_LEN / K4) * K4;
        let n = if c % 10 == 0 { 600 } else { 1 + rng.below(64) };
        for i in 0..n {
            if rng.below(10) < 7 {
                insert(b, model, base + i * K4, PageSize::K4, rng);
            }
        }
    }
    // Insertions overlapping a different translation are refused and change nothing.
    let all: Vec<TObj> = model.values().copied().collect();
    for _ in 0..20 {
        let o = all[rng.below(all.len() as u64) as usize];
        let bad = match o.size {
            PageSize::K4 if mappable(&b.d, PageSize::M2.align_down(o.va)).contains(&PageSize::M2) => {
                TObj::new(PageSize::M2.align_down(o.va), b.fake_pa(PageSize::M2, M2), PageSize::M2, prot::RW)
            }
            PageSize::K4 => continue,
            _ => TObj::new(o.va + rng.below(o.size.bytes() / K4) * K4, b.fake_pa(PageSize::K4, K4), PageSize::K4, prot::RW),
        };
        let (d, s, mut env) = b.env();
        let r = d.update(s, &bad, &mut env);
        assert!(r.is_err(), "{what}: layout {layout}: inserting {bad:?} over {o:?} was accepted");
        assert_eq!(b.find(o.va).as_ref().map(key), Some(key(&o)), "{what}: layout {layout}: refused insertion of {bad:?} changed {o:?}");
    }
}

/// A random `[lo, hi)` for the iterator checks: cutting a translation, ending inside one, in a
/// hole between two, empty, unaligned, or anywhere in the window.
fn random_range(rng: &mut Rng, objs: &[TObj]) -> (u64, u64, &'static str) {
    let pick = |rng: &mut Rng| objs[rng.below(objs.len() as u64) as usize];
    let in_win = |rng: &mut Rng| WIN + rng.below(WIN_LEN / K4) * K4;
    if objs.is_empty() {
        let lo = in_win(rng);
        return (lo, lo + rng.below(1 << 24), "window (no object)");
    }
    match rng.below(8) {
        0 | 1 => {
            let o = pick(rng);
            let lo = o.va + rng.below(o.size.bytes() / K4) * K4;
            (lo, lo + (1 + rng.below(2048)) * K4, "starts inside a translation")
        }
        2 => {
            let o = pick(rng);
            let hi = o.va + (1 + rng.below(o.size.bytes() / K4)) * K4;
            (hi.saturating_sub(rng.below(4096) * K4).max(WIN), hi, "ends inside a translation")
        }
        3 => {
            let o = pick(rng);
            let next = objs.iter().find(|n| n.va >= o.end()).map_or(o.end() + M2, |n| n.va);
            (o.end(), next, "hole between two translations")
        }
        4 => {
            let lo = if rng.below(2) == 0 { pick(rng).va } else { in_win(rng) };
            (lo, lo, "zero length")
        }
        5 => {
            let lo = WIN + rng.below(WIN_LEN);
            (lo, lo + 1 + rng.below(4 << 20), "unaligned")
        }
        6 => {
            let o = pick(rng);
            (o.va, o.end(), "exactly one translation")
        }
        _ => {
            let lo = in_win(rng);
            (lo, lo + rng.below(64 << 20) / K4 * K4, "window")
        }
    }
}

fn compare_iterators<D: Registered>(b: &mut Bench<D>, model: &BTreeMap<u64, TObj>, rng: &mut Rng, ctx: &str) {
    let objs: Vec<TObj> = model.values().copied().collect();
    let mut ranges: Vec<(u64, u64, &str)> = (0..200).map(|_| random_range(rng, &objs)).collect();
    ranges.push((WIN, WIN + WIN_LEN, "whole window"));
    for (i, &(lo, hi, kind)) in ranges.iter().enumerate() {
        let fast = b.for_each(lo, hi, false);
        let slow = b.for_each(lo, hi, true);
        assert_eq!(fast, slow, "{ctx}: range {i} [{lo:#x}, {hi:#x}) ({kind}): for_each differs from generic_for_each");
        let expect: Vec<TObj> = model.range(lo..hi.max(lo)).map(|(_, o)| *o).collect();
        assert_eq!(
            keys(&slow),
            keys(&expect),
            "{ctx}: range {i} [{lo:#x}, {hi:#x}) ({kind}): generic_for_each differs from what was inserted"
        );
        let fast = b.is_empty(lo, hi, false);
        let slow = b.is_empty(lo, hi, true);
        assert_eq!(fast, slow, "{ctx}: range {i} [{lo:#x}, {hi:#x}) ({kind}): range_is_empty differs from generic_range_is_empty");
        let empty = hi <= lo || !overlaps(model, lo, hi - lo);
        assert_eq!(slow, empty, "{ctx}: range {i} [{lo:#x}, {hi:#x}) ({kind}): generic_range_is_empty differs from what was inserted");
    }
    // Every translation is found and walked, from anywhere inside it; holes are not.
    for o in &objs {
        let va = o.va + rng.below(o.size.bytes());
        let f = b.find(va);
        assert_eq!(f.as_ref().map(key), Some(key(o)), "{ctx}: find({va:#x})");
        let h = b.hw(va);
        check_hw(&h, Some(tr(o)), &|| format!("{ctx}: va {va:#x}"));
    }
    for _ in 0..100 {
        let va = WIN + rng.below(WIN_LEN);
        if overlaps(model, PageSize::K4.align_down(va), K4) {
            continue;
        }
        assert_eq!(b.find(va), None, "{ctx}: find({va:#x}) in a hole");
        let h = b.hw(va);
        check_hw(&h, None, &|| format!("{ctx}: va {va:#x} (hole)"));
    }
}

// ---------------------------------------------------------------------------------------------
// 2. map_range equivalence

fn map_ranges<D: Registered>(what: &str, cfg: &Config, seed: u64) {
    let mut rng = Rng::new(seed);
    for trial in 0..8 {
        let ctx = format!("{what}: map_range trial {trial}");
        let mut a = Bench::<D>::new(cfg); // the driver's map_range
        let mut g = Bench::<D>::new(cfg); // generic_map_range
        let mut model: BTreeMap<u64, TObj> = BTreeMap::new();
        let mut runs: Vec<(TObj, u64)> = Vec::new();
        let mut va = WIN + rng.below(64) * G1 / 16;
        for _ in 0..1 + rng.below(5) {
            let mut sizes = vec![PageSize::K4, PageSize::K4, PageSize::M2, PageSize::M2];
            if rng.below(4) == 0 {
                sizes.push(PageSize::G1);
            }
            let mut size = sizes[rng.below(sizes.len() as u64) as usize];
            if a.d.can_map(va.div_ceil(size.bytes()) * size.bytes(), size).is_err() {
                size = PageSize::K4;
            }
            va = va.div_ceil(size.bytes()) * size.bytes();
            let pages = match size {
                PageSize::K4 => 1 + rng.below(1500),
                PageSize::M2 => 1 + rng.below(12),
                _ => 1 + rng.below(2),
            };
            let len = pages * size.bytes();
            let pa = a.fake_pa(size, len);
            g.fake_pa(size, len);
            let first = TObj::new(va, pa, size, prot::RW);
            {
                let (d, s, mut env) = a.env();
                d.map_range(s, &first, len, &mut env).unwrap_or_else(|e| panic!("{ctx}: map_range({first:?}, {len:#x}): {e}"));
            }
            {
                let (d, s, mut env) = g.env();
                generic_map_range(d, s, &first, len, &mut env)
                    .unwrap_or_else(|e| panic!("{ctx}: generic_map_range({first:?}, {len:#x}): {e}"));
            }
            for i in 0..pages {
                let o = TObj { va: va + i * size.bytes(), pa: pa + i * size.bytes(), ..first };
                model.insert(o.va, o);
            }
            runs.push((first, len));
            // The next run: adjacent (virtually, and physically for 4 KiB) or after a gap.
            va += len;
            if rng.below(2) == 0 {
                va += (1 + rng.below(600)) * K4;
            } else if size == PageSize::K4 {
                a.next_pa = pa + len;
                g.next_pa = pa + len;
            }
        }
        compare_mapped(&mut a, &mut g, &model, &mut rng, &ctx);
        // Remove some pages and remap others elsewhere, identically on both; compare again.
        let objs: Vec<TObj> = model.values().copied().collect();
        for _ in 0..1 + rng.below(6) {
            // The page as it is now (an earlier iteration may have remapped it).
            let Some(&o) = model.get(&objs[rng.below(objs.len() as u64) as usize].va) else { continue };
            let ra = a.remove(o.va, o.size);
            let rg = g.remove(o.va, o.size);
            assert_eq!(ra.as_ref().map(key), Some(key(&o)), "{ctx}: remove({:#x}) after map_range", o.va);
            assert_eq!(rg.as_ref().map(key), Some(key(&o)), "{ctx}: remove({:#x}) after generic_map_range", o.va);
            model.remove(&o.va);
            if rng.below(2) == 0 {
                let n = TObj { pa: a.fake_pa(o.size, o.size.bytes()), ..o };
                g.fake_pa(o.size, o.size.bytes());
                for b in [&mut a, &mut g] {
                    let (d, s, mut env) = b.env();
                    d.update(s, &n, &mut env).unwrap_or_else(|e| panic!("{ctx}: remap {n:?}: {e}"));
                }
                model.insert(n.va, n);
            }
        }
        compare_mapped(&mut a, &mut g, &model, &mut rng, &format!("{ctx} after removals and remaps"));
    }
}

fn compare_mapped<D: Registered>(a: &mut Bench<D>, g: &mut Bench<D>, model: &BTreeMap<u64, TObj>, rng: &mut Rng, ctx: &str) {
    let (Some(lo), Some(hi)) = (model.values().next().map(|o| o.va), model.values().next_back().map(|o| o.end())) else { return };
    for o in model.values() {
        let va = o.va + rng.below(o.size.bytes() / K4) * K4;
        let fa = a.find(va);
        let fg = g.find(va);
        assert_eq!(fa.as_ref().map(key), fg.as_ref().map(key), "{ctx}: find({va:#x}) after map_range vs generic_map_range");
        assert_eq!(fa.as_ref().map(key), Some(key(o)), "{ctx}: find({va:#x})");
        let h = a.hw(va);
        check_hw(&h, Some(tr(o)), &|| format!("{ctx}: va {va:#x}"));
    }
    let lo = PageSize::G1.align_down(lo);
    let hi = hi + M2;
    let va = a.for_each(lo, hi, false);
    let vg = g.for_each(lo, hi, false);
    assert_eq!(keys(&va), keys(&vg), "{ctx}: for_each [{lo:#x}, {hi:#x}) after map_range vs generic_map_range");
    assert_eq!(va, a.for_each(lo, hi, true), "{ctx}: for_each vs generic_for_each after map_range");
    assert_eq!(keys(&va), keys(&model.values().copied().collect::<Vec<_>>()), "{ctx}: for_each vs what was mapped");
    for gap in model.values().map(|o| o.end()).filter(|e| !model.contains_key(e)).take(20) {
        assert_eq!(a.find(gap), None, "{ctx}: {gap:#x} (after a run) found after map_range");
        let h = a.hw(gap);
        check_hw(&h, None, &|| format!("{ctx}: va {gap:#x} (after a run)"));
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Random OS operation sequences against the ground truth

#[derive(Clone, Copy, Debug)]
struct Region {
    asid: u16,
    start: u64,
    end: u64,
}

/// Mirrors of the OS's VMAs, and unmapped ranges that must stay unmapped.
struct Layout {
    regions: Vec<Region>,
    holes: Vec<Region>,
}

impl Layout {
    fn unmap(&mut self, asid: u16, lo: u64, hi: u64) {
        let mut out = Vec::new();
        for r in self.regions.drain(..) {
            if r.asid != asid || r.end <= lo || r.start >= hi {
                out.push(r);
                continue;
            }
            if r.start < lo {
                out.push(Region { end: lo, ..r });
            }
            if r.end > hi {
                out.push(Region { start: hi, ..r });
            }
        }
        self.regions = out;
        self.holes.push(Region { asid, start: lo, end: hi });
        if self.holes.len() > 12 {
            self.holes.remove(0);
        }
    }
}

fn os_sequences<D: Registered>(what: &str, cfg: &Config, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut os = Os::boot(build::<D>(cfg), &cfg.os, cfg.seed).unwrap_or_else(|e| panic!("{what}: boot: {e}"));
    let asids = [os.spawn(false).unwrap(), os.spawn(false).unwrap()];
    // One core's walk caches, kept across operations: the OS's shootdowns are applied to it.
    let mut wc = os.driver.new_walk_cache();
    let mut lay = Layout { regions: Vec::new(), holes: Vec::new() };
    let mut now_ms = 0.0;
    let mut counts = BTreeMap::<&str, u32>::new();
    const OPS: usize = 600;
    const MAX_LIVE: u64 = 192 << 20;
    // A scripted start so every run has a 1 GiB page, a populated region and a collapse; then
    // random operations.
    const PROLOGUE: &[&str] = &["mmap-giga", "touch-last", "mmap-16m", "populate-last", "madvise-last", "mmap-huge", "touch-last"];
    for op in 0..OPS {
        let live: u64 = lay.regions.iter().filter(|r| r.end - r.start < G1).map(|r| r.end - r.start).sum();
        let giga_live = lay.regions.iter().any(|r| r.end - r.start >= M2 * 64);
        let mut kind = match rng.below(16) {
            0..=2 => "mmap",
            3..=7 => "touch",
            8 => "populate",
            9..=10 => "munmap",
            11 => "munmap-partial",
            12 => "madvise",
            13 => "khugepaged",
            14 => "hot",
            _ => "tick",
        };
        if lay.regions.is_empty() || (kind == "mmap" && (live > MAX_LIVE || lay.regions.len() >= 14)) {
            kind = if lay.regions.is_empty() { "mmap" } else { "munmap" };
        }
        if let Some(k) = PROLOGUE.get(op) {
            kind = k;
        }
        let pick = |rng: &mut Rng, kind: &str| {
            if kind.ends_with("-last") {
                *lay.regions.last().unwrap()
            } else {
                lay.regions[rng.below(lay.regions.len() as u64) as usize]
            }
        };
        let desc: String = match kind {
            "mmap" | "mmap-giga" | "mmap-16m" | "mmap-huge" => {
                let asid = asids[rng.below(2) as usize];
                let (len, huge) = match (kind, rng.below(10)) {
                    ("mmap-giga", _) => (G1, HugeAdvice::Giga),
                    ("mmap-16m", _) => (16 << 20, HugeAdvice::Default),
                    ("mmap-huge", _) => (8 << 20, HugeAdvice::Huge),
                    (_, 0) if !giga_live => (G1, HugeAdvice::Giga),
                    (_, 0..=3) => ((1 + rng.below(64)) * K4, HugeAdvice::Default),
                    _ => {
                        ((1 + rng.below(32 << 8)) * K4, [HugeAdvice::Default, HugeAdvice::Huge, HugeAdvice::NoHuge][rng.below(3) as usize])
                    }
                };
                let start =
                    os.mmap(asid, len, MapFlags { huge, ..MapFlags::default() }).unwrap_or_else(|e| panic!("{what}: op {op}: mmap: {e}"));
                lay.regions.push(Region { asid, start, end: start + len });
                // The 2 MiB after a VMA are never mapped (the OS leaves the gap).
                lay.holes.push(Region { asid, start: start + len, end: start + len + M2 });
                format!("mmap asid {asid} {len:#x} {huge:?} -> {start:#x}")
            }
            "touch" | "touch-last" => {
                let r = pick(&mut rng, kind);
                let n = 1 + rng.below(64);
                let cluster = r.start + rng.below((r.end - r.start) / K4) * K4;
                for _ in 0..n {
                    let va = if rng.below(2) == 0 {
                        r.start + rng.below(r.end - r.start)
                    } else {
                        (cluster + rng.below(256) * K4).min(r.end - 1)
                    };
                    os.fault(r.asid, va).unwrap_or_else(|e| panic!("{what}: op {op}: fault asid {} {va:#x}: {e}", r.asid));
                    // Two accesses after the fault, each a TLB miss: side lookup, then walk.
                    for _ in 0..2 {
                        access(&mut os, &mut wc, r.asid, va, &|| format!("{what}: op {op}: access asid {} {va:#x}", r.asid));
                    }
                }
                format!("touch {n} pages of asid {} [{:#x}, {:#x})", r.asid, r.start, r.end)
            }
            "populate" | "populate-last" => {
                let r = pick(&mut rng, kind);
                let lo = r.start + rng.below((r.end - r.start) / K4) * K4;
                let len = (r.end - lo).min((1 + rng.below(2048)) * K4);
                os.populate(r.asid, lo, len).unwrap_or_else(|e| panic!("{what}: op {op}: populate asid {} {lo:#x}+{len:#x}: {e}", r.asid));
                format!("populate asid {} [{lo:#x}, {:#x})", r.asid, lo + len)
            }
            "munmap" => {
                let i = rng.below(lay.regions.len() as u64) as usize;
                let r = lay.regions[i];
                os.munmap(r.asid, r.start, r.end - r.start).unwrap_or_else(|e| panic!("{what}: op {op}: munmap: {e}"));
                lay.unmap(r.asid, r.start, r.end);
                format!("munmap asid {} [{:#x}, {:#x})", r.asid, r.start, r.end)
            }
            "munmap-partial" => {
                let r = lay.regions[rng.below(lay.regions.len() as u64) as usize];
                let pages = (r.end - r.start) / K4;
                let lo = r.start + rng.below(pages) * K4;
                let hi = (lo + (1 + rng.below(pages.min(1024))) * K4).min(r.end);
                os.munmap(r.asid, lo, hi - lo).unwrap_or_else(|e| panic!("{what}: op {op}: munmap: {e}"));
                lay.unmap(r.asid, lo, hi);
                format!("munmap asid {} [{lo:#x}, {hi:#x}) of [{:#x}, {:#x})", r.asid, r.start, r.end)
            }
            "madvise" | "madvise-last" => {
                let r = pick(&mut rng, kind);
                let advice = if kind == "madvise" && rng.below(4) == 0 { HugeAdvice::NoHuge } else { HugeAdvice::Huge };
                // Some 4 KiB pages first (under the old advice), for khugepaged to collapse.
                for _ in 0..8 {
                    let va = r.start + rng.below(r.end - r.start);
                    os.fault(r.asid, va).unwrap_or_else(|e| panic!("{what}: op {op}: fault asid {} {va:#x}: {e}", r.asid));
                }
                os.madvise(r.asid, r.start, r.end - r.start, advice).unwrap_or_else(|e| panic!("{what}: op {op}: madvise: {e}"));
                for _ in 0..4 {
                    os.khugepaged_scan().unwrap_or_else(|e| panic!("{what}: op {op}: khugepaged: {e}"));
                }
                format!("madvise asid {} [{:#x}, {:#x}) {advice:?} + 4 khugepaged scans", r.asid, r.start, r.end)
            }
            "hot" => {
                // Accesses to mapped pages the side structure does not hold (Utopia: FlexSeg
                // pages), each twice: what PTW tracking migrates.
                let asid = asids[rng.below(2) as usize];
                let mine: Vec<Region> = lay.regions.iter().filter(|r| r.asid == asid).copied().collect();
                let mut hot = Vec::new();
                for _ in 0..if mine.is_empty() { 0 } else { 512 } {
                    let r = mine[rng.below(mine.len() as u64) as usize];
                    let va = r.start + rng.below(r.end - r.start);
                    if os.truth(asid, va).is_some() && hot.len() < 32 {
                        let Os { driver, procs, .. } = &mut os;
                        let mut fresh = driver.new_walk_cache();
                        if hw(driver, &mut procs[asid as usize].space, &mut fresh, asid, va).side.is_none() {
                            hot.push(va);
                        }
                    }
                }
                for &va in &hot {
                    for _ in 0..2 {
                        access(&mut os, &mut wc, asid, va, &|| format!("{what}: op {op}: hot access asid {asid} {va:#x}"));
                    }
                }
                format!("{} hot accesses in asid {asid}", hot.len() * 2)
            }
            "khugepaged" => {
                os.khugepaged_scan().unwrap_or_else(|e| panic!("{what}: op {op}: khugepaged: {e}"));
                "khugepaged scan".into()
            }
            _ => {
                now_ms += 5.0 + rng.below(40) as f64;
                os.tick(now_ms).unwrap_or_else(|e| panic!("{what}: op {op}: tick: {e}"));
                format!("tick {now_ms} ms")
            }
        };
        *counts.entry(kind).or_default() += 1;
        apply_shootdowns(&mut os, &mut wc);
        check_against_truth(&mut os, &mut wc, &lay, &mut rng, &asids, &format!("{what}: op {op} ({desc})"));
    }
    let st = &os.stats;
    eprintln!("{what}: ops {counts:?}; {st:?}");
    // RMM maps most VMAs eagerly at mmap, and a partial munmap splits a huge page rather than
    // dropping it, so its sequence faults little: 80 mapping events is still plenty of work.
    assert!(st.faults() + st.eager_runs > 80 && st.unmaps > 20, "{what}: the sequence did little: {st:?}");
    let m2 = os.driver.leaf_sizes().contains(&PageSize::M2) && os.driver.can_map(WIN, PageSize::M2).is_ok();
    if m2 {
        // Eager paging (RMM) maps advised VMAs with 2 MiB pages at mmap, HugeTLB at faults of
        // its own kind.
        assert!(st.faults_thp + st.eager_runs + st.faults_hugetlb > 0 && st.promotions > 0, "{what}: no THP fault or promotion: {st:?}");
    }
    if os.driver.leaf_sizes().contains(&PageSize::G1) && os.driver.can_map(WIN, PageSize::G1).is_ok() {
        assert!(st.faults_1g > 0, "{what}: no 1 GiB fault: {st:?}");
    }
    if os.driver.migration().is_some() && cfg.arch.utopia.migrate.enabled {
        assert!(st.migrations > 0 && st.evictions > 0, "{what}: no migration or eviction: {st:?}");
    }
}

/// Applies the OS's pending shootdowns to the persistent walk caches, as the MMUs would.
fn apply_shootdowns<D: Registered>(os: &mut Os<D>, wc: &mut D::WalkCache) {
    for sd in os.pending.drain(..) {
        os.driver.invalidate_walk_cache(wc, sd.asid, sd.start, sd.end);
    }
    os.pending_flush.clear();
}

/// One access that missed the TLBs, as the MMU handles it: the side lookup, the walk if that
/// missed, both with the persistent walk caches; the walk is reported to the driver's migration
/// policy (Utopia's PTW tracking), with every reference counted as a DRAM reference.
fn access<D: Registered>(os: &mut Os<D>, wc: &mut D::WalkCache, asid: u16, va: u64, ctx: &dyn Fn() -> String) {
    apply_shootdowns(os, wc);
    let truth = os.truth(asid, va);
    assert!(truth.is_some(), "{}: not mapped", ctx());
    let Os { driver, procs, .. } = &mut *os;
    let h = hw(driver, &mut procs[asid as usize].space, wc, asid, va);
    check_hw(&h, truth, ctx);
    if h.side.is_none() {
        if let Some(m) = os.driver.migration() {
            m.walk_observed(&mut os.procs[asid as usize].space, asid, va, h.walk, h.walk_refs);
        }
    }
}

/// After an operation: for sampled addresses of every live VMA (in its own and in the other
/// address space) and of holes, `find`, the walk and the side lookup (fresh walk caches, and the
/// persistent ones the shootdowns were applied to) agree with the OS's ground truth.
fn check_against_truth<D: Registered>(os: &mut Os<D>, wc: &mut D::WalkCache, lay: &Layout, rng: &mut Rng, asids: &[u16], ctx: &str) {
    let mut samples: Vec<(u16, u64, bool)> = Vec::new();
    for r in &lay.regions {
        let mut add = |va: u64| {
            for &a in asids {
                samples.push((a, va, a == r.asid));
            }
        };
        add(r.start);
        add(r.end - 1);
        for _ in 0..14 {
            add(r.start + rng.below(r.end - r.start));
        }
    }
    for h in &lay.holes {
        for _ in 0..3 {
            let va = h.start + rng.below(h.end - h.start);
            if lay.regions.iter().all(|r| r.asid != h.asid || va < r.start || va >= r.end) {
                assert!(os.truth(h.asid, va).is_none(), "{ctx}: asid {} {va:#x}: the OS maps an unmapped address", h.asid);
                assert!(os.vma(h.asid, va).is_none(), "{ctx}: asid {} {va:#x}: a VMA covers an unmapped address", h.asid);
                samples.push((h.asid, va, false));
            }
        }
    }
    for (asid, va, own) in samples {
        if own {
            assert!(os.vma(asid, va).is_some(), "{ctx}: asid {asid} {va:#x}: no VMA where one was mapped");
        }
        let truth = os.truth(asid, va);
        let Os { driver, procs, phys, cost, .. } = &mut *os;
        let space = &mut procs[asid as usize].space;
        let found = driver.find(space, va, &mut TdbEnv { phys, cost });
        assert_eq!(found.as_ref().map(tr), truth, "{ctx}: asid {asid} va {va:#x}: find {found:?} vs truth");
        if let Some(o) = found {
            assert!(o.va <= va && va < o.end(), "{ctx}: asid {asid} va {va:#x}: find returned {o:?}, which does not cover it");
        }
        let mut fresh = driver.new_walk_cache();
        let h = hw(driver, space, &mut fresh, asid, va);
        check_hw(&h, truth, &|| format!("{ctx}: asid {asid} va {va:#x} (fresh walk caches)"));
        let hp = hw(driver, space, wc, asid, va);
        check_hw(&hp, truth, &|| format!("{ctx}: asid {asid} va {va:#x} (walk caches kept across shootdowns)"));
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Every design on the small machine

#[test]
fn every_design_maps_and_walks_8_mib() {
    let mut drivers = BTreeSet::new();
    let mut n = 0;
    for d in arch::designs() {
        let cfg = common::config(d.name, common::scaled(d.name));
        for_driver!(d.driver, design_smoke(d.name, &cfg));
        drivers.insert(d.driver);
        n += 1;
    }
    assert!(n >= arch::DRIVERS.len());
    assert_eq!(drivers, arch::DRIVERS.iter().copied().collect::<BTreeSet<_>>(), "designs cover every driver");
}

fn design_smoke<D: Registered>(design: &str, cfg: &Config) {
    let mut os = Os::boot(build::<D>(cfg), &cfg.os, cfg.seed).unwrap_or_else(|e| panic!("{design}: boot: {e}"));
    let asid = os.spawn(false).unwrap();
    let len = 8 << 20;
    let start = os.mmap(asid, len, MapFlags::default()).unwrap_or_else(|e| panic!("{design}: mmap: {e}"));
    os.populate(asid, start, len).unwrap_or_else(|e| panic!("{design}: populate: {e}"));
    let mut wc = os.driver.new_walk_cache();
    let mut va = start;
    while va < start + len + M2 {
        let truth = os.truth(asid, va);
        assert_eq!(truth.is_some(), va < start + len, "{design}: {va:#x}: populated iff inside the VMA");
        let Os { driver, procs, .. } = &mut os;
        let entry = driver.prefetch(&procs[asid as usize].space, va);
        let h = hw(driver, &mut procs[asid as usize].space, &mut wc, asid, va);
        check_hw(&h, truth, &|| format!("{design}: va {va:#x}"));
        // The host prefetch names an entry the walk of a 4 KiB page reads (the simulated cache
        // sets the loop prefetches for it are then ones the walk uses).
        if let (Some(e), Some(t)) = (entry, h.walk.filter(|t| t.size == PageSize::K4)) {
            assert!(h.walk_reads.contains(&e), "{design}: va {va:#x}: prefetch named {e:#x}, not read by the walk to {t:?}");
        }
        va += K4;
    }
}
