//! Tests of the buddy allocator and the fragmentation knobs.

use super::*;
use crate::rng::Rng;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn ok(m: &PhysMem) {
    if let Err(e) = m.check_invariants() {
        panic!("invariant violated: {e}");
    }
}

fn snapshot(m: &PhysMem) -> Vec<Vec<u64>> {
    (0..m.max_order()).map(|k| m.free_list(k)).collect()
}

#[test]
fn fresh_memory_is_whole_including_the_tail() {
    // 1 GiB + 2 MiB + 12 KiB: 32 order-13 blocks, one order-9 and the 3-page tail.
    let m = PhysMem::new(GIB + 2 * MIB + 12 * 1024, 14);
    ok(&m);
    assert_eq!(m.total_pages(), 262_144 + 512 + 3);
    assert_eq!(m.free_pages(), m.total_pages());
    assert_eq!(m.largest_order(), 13);
    assert_eq!(m.free_blocks(13), 32);
    assert_eq!(m.free_blocks(9), 1);
    assert_eq!(m.free_blocks(1), 1);
    assert_eq!(m.free_blocks(0), 1);
    assert_eq!(m.free_blocks(14), 0);
    assert_eq!(m.fmfi(9), 3.0 / m.total_pages() as f64);
}

#[test]
fn lowest_address_first_and_split() {
    let mut m = PhysMem::new(64 * MIB, 14);
    assert_eq!(m.alloc(0), Some(Pfn(0)));
    assert_eq!(m.alloc(0), Some(Pfn(1)));
    assert_eq!(m.alloc(1), Some(Pfn(2)));
    assert_eq!(m.alloc(9), Some(Pfn(512)));
    // Smallest order first: the free order-2 block at 4 beats the order-10 block at 1024.
    assert_eq!(m.alloc(2), Some(Pfn(4)));
    ok(&m);
}

#[test]
fn no_double_allocation_and_memory_whole_again() {
    let mut m = PhysMem::new(256 * MIB + 20 * 1024, 14);
    let start = m.buddyinfo();
    let mut owner = vec![false; m.total_pages() as usize];
    let mut blocks = Vec::new();
    let mut rng = Rng::new(7);
    loop {
        let order = [0, 0, 0, 1, 2, 4, 9, 13][rng.below(8) as usize];
        match m.alloc(order) {
            Some(p) => {
                assert_eq!(p.0 % (1 << order), 0, "misaligned");
                for f in p.0..p.0 + (1 << order) {
                    assert!(!owner[f as usize], "frame {f} handed out twice");
                    assert!(!m.is_free(Pfn(f)));
                    owner[f as usize] = true;
                }
                blocks.push((p, order));
            }
            // Exhausted for this order; stop once even single pages are gone.
            None if order == 0 => break,
            None => {}
        }
    }
    assert_eq!(m.free_pages(), 0);
    assert!(owner.iter().all(|&o| o));
    ok(&m);
    rng.shuffle(&mut blocks);
    for (i, &(p, o)) in blocks.iter().enumerate() {
        m.free(p, o).unwrap();
        if i % 997 == 0 {
            ok(&m);
        }
    }
    ok(&m);
    assert_eq!(m.buddyinfo(), start);
    assert_eq!(m.free_blocks(m.largest_order()), start[13]);
}

#[test]
fn buddies_coalesce() {
    let mut m = PhysMem::new(32 * MIB, 14);
    let a = m.alloc(3).unwrap();
    let b = m.alloc(3).unwrap();
    assert_eq!((a, b), (Pfn(0), Pfn(8)));
    assert_eq!(m.free_blocks(13), 0);
    m.free(a, 3).unwrap();
    assert_eq!(m.free_blocks(3), 1);
    m.free(b, 3).unwrap();
    // 0..8 and 8..16 merged all the way back to one 32 MiB block.
    assert_eq!(m.free_blocks(3), 0);
    assert_eq!(m.free_blocks(4), 0);
    assert_eq!(m.free_blocks(13), 1);
    ok(&m);

    // Buddies at a middle order: keep a neighbour allocated so merging stops at order 5.
    let x = m.alloc(4).unwrap();
    let y = m.alloc(4).unwrap();
    let z = m.alloc(5).unwrap();
    m.free(x, 4).unwrap();
    m.free(y, 4).unwrap();
    assert_eq!(m.free_blocks(4), 0);
    assert_eq!(m.free_blocks(5), 1);
    assert!(m.is_free(Pfn(0)) && !m.is_free(z));
    ok(&m);
}

#[test]
fn bad_frees_are_errors_and_change_nothing() {
    let mut m = PhysMem::new(64 * MIB, 14);
    let a = m.alloc(2).unwrap();
    let b = m.alloc(0).unwrap();
    let before = snapshot(&m);
    let frees = [
        (Pfn(a.0), 1),     // wrong order (smaller)
        (Pfn(a.0), 3),     // wrong order (larger)
        (Pfn(a.0 + 1), 0), // inside a block
        (Pfn(1000), 0),    // free page
        (Pfn(3), 1),       // misaligned
        (Pfn(1 << 40), 0), // out of range
        (Pfn(0), 63),      // absurd order
        (Pfn(0), 14),      // large order never allocated
    ];
    for (p, o) in frees {
        let e = m.free(p, o).unwrap_err();
        assert!(!e.is_empty());
        assert_eq!(snapshot(&m), before, "state changed by bad free {p:?}/{o}: {e}");
        ok(&m);
    }
    m.free(b, 0).unwrap();
    let e = m.free(b, 0).unwrap_err();
    assert!(e.contains("double free"), "{e}");
    m.free(a, 2).unwrap();
    assert_eq!(m.free_pages(), m.total_pages());
    ok(&m);
}

#[test]
fn alloc_at_and_reserve_refuse_used_ranges() {
    let mut m = PhysMem::new(4 * GIB, 14);
    let one_g = 1u64 << 18;
    // A 1 GiB page above the largest order, carved at boot.
    assert!(m.alloc_at(Pfn(one_g), 18));
    assert!(!m.alloc_at(Pfn(one_g), 18));
    assert!(!m.alloc_at(Pfn(one_g + 512), 9));
    assert!(!m.alloc_at(Pfn(one_g + 1), 0));
    assert!(!m.alloc_at(Pfn(3), 2), "misaligned");
    assert!(!m.alloc_at(Pfn(4 * one_g), 0), "outside memory");
    ok(&m);
    // A buddy-order block in the middle of a free 32 MiB block.
    assert!(m.alloc_at(Pfn(4096 + 512), 9));
    assert!(!m.alloc_at(Pfn(4096), 13));
    assert!(!m.alloc_at(Pfn(4096 + 600), 0));
    assert!(m.alloc_at(Pfn(4096 + 1024), 9));
    ok(&m);

    // Reservations skip used memory: 512 MiB aligned to 2 MiB lands after the second 2 MiB block.
    let r = m.reserve_contiguous(131_072, 9).unwrap();
    assert_eq!(r, Pfn(4096 + 1536));
    for p in [r.0, r.0 + 131_071] {
        assert!(!m.is_free(Pfn(p)));
    }
    assert!(m.is_free(Pfn(r.0 + 131_072)));
    assert!(!m.alloc_at(Pfn(r.0 + 2048), 11));
    assert!(m.free(r, 0).is_err());
    ok(&m);
    // A small range fits in the free run below the 2 MiB blocks.
    let r2 = m.reserve_contiguous(1000, 3).unwrap();
    assert_eq!(r2, Pfn(0));
    let r3 = m.reserve_contiguous(4000, 0).unwrap();
    assert_eq!(r3, Pfn(r.0 + 131_072));
    // Too large for any free run (the 1 GiB page splits memory).
    assert_eq!(m.reserve_contiguous(3 * one_g, 0), None);
    assert_eq!(m.reserve_contiguous(0, 0), None);
    ok(&m);
    // A 1 GiB page by plain alloc takes the lowest free aligned GiB.
    assert_eq!(m.alloc(18), Some(Pfn(2 * one_g)));
    assert_eq!(m.alloc(20), None);
    assert!(m.unreserve_contiguous(r2, 999).is_err());
    m.unreserve_contiguous(r2, 1000).unwrap();
    m.unreserve_contiguous(r3, 4000).unwrap();
    m.unreserve_contiguous(r, 131_072).unwrap();
    assert!(m.unreserve_contiguous(r, 131_072).is_err());
    m.free(Pfn(one_g), 18).unwrap();
    assert!(m.free(Pfn(one_g), 18).is_err());
    m.free(Pfn(2 * one_g), 18).unwrap();
    m.free(Pfn(4096 + 512), 9).unwrap();
    m.free(Pfn(4096 + 1024), 9).unwrap();
    ok(&m);
    assert_eq!(m.free_blocks(13), 128);
}

/// Random alloc / alloc_at / free / reserve traffic checked against a page-by-page model.
fn model_run(max_order: u32, seed: u64) {
    let total_bytes = 64 * MIB + 44 * 1024;
    let mut m = PhysMem::new(total_bytes, max_order);
    let n = m.total_pages() as usize;
    let mut used = vec![false; n];
    let mut live: Vec<(u64, u32)> = Vec::new();
    let mut reservations: Vec<(u64, u64)> = Vec::new();
    let mut rng = Rng::new(seed);
    let range_free = |used: &[bool], p: u64, len: u64| p + len <= n as u64 && used[p as usize..(p + len) as usize].iter().all(|u| !u);
    let fits = |used: &[bool], len: u64, align: u64| (0..n as u64).step_by(align as usize).find(|&p| range_free(used, p, len));
    for step in 0..12_000 {
        match rng.below(10) {
            0..=3 => {
                let order = rng.below(16) as u32;
                match m.alloc(order) {
                    Some(Pfn(p)) => {
                        assert_eq!(p % (1 << order), 0);
                        assert!(range_free(&used, p, 1 << order), "step {step}: {p:#x}/{order}");
                        used[p as usize..(p + (1 << order)) as usize].fill(true);
                        live.push((p, order));
                    }
                    None => assert_eq!(fits(&used, 1 << order, 1 << order), None),
                }
            }
            4 => {
                let order = rng.below(16) as u32;
                let p = rng.below(n as u64 + 64) >> order << order;
                let expect = range_free(&used, p, 1 << order);
                assert_eq!(m.alloc_at(Pfn(p), order), expect, "step {step}: {p:#x}/{order}");
                if expect {
                    used[p as usize..(p + (1 << order)) as usize].fill(true);
                    live.push((p, order));
                }
            }
            5..=8 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                let (p, o) = live.swap_remove(i);
                if o > 0 {
                    assert!(m.free(Pfn(p), o - 1).is_err());
                }
                assert!(m.free(Pfn(p), o + 1).is_err());
                m.free(Pfn(p), o).unwrap();
                assert!(m.free(Pfn(p), o).is_err(), "double free accepted");
                used[p as usize..(p + (1 << o)) as usize].fill(false);
            }
            9 if step % 7 == 0 => {
                if let Some((p, len)) = reservations.pop() {
                    m.unreserve_contiguous(Pfn(p), len).unwrap();
                    used[p as usize..(p + len) as usize].fill(false);
                } else {
                    let len = 1 + rng.below(3000);
                    let align = rng.below(6) as u32;
                    let got = m.reserve_contiguous(len, align).map(|p| p.0);
                    assert_eq!(got, fits(&used, len, 1 << align), "step {step}");
                    if let Some(p) = got {
                        used[p as usize..(p + len) as usize].fill(true);
                        reservations.push((p, len));
                    }
                }
            }
            _ => {}
        }
        let free_model = used.iter().filter(|u| !**u).count() as u64;
        assert_eq!(m.free_pages(), free_model, "step {step}");
        for _ in 0..4 {
            let p = rng.below(n as u64);
            assert_eq!(m.is_free(Pfn(p)), !used[p as usize], "step {step}: page {p:#x}");
        }
        if step % 500 == 0 {
            ok(&m);
        }
    }
    ok(&m);
    for (p, o) in live {
        m.free(Pfn(p), o).unwrap();
    }
    for (p, len) in reservations {
        m.unreserve_contiguous(Pfn(p), len).unwrap();
    }
    ok(&m);
    assert_eq!(m.free_pages(), m.total_pages());
    assert_eq!(m.buddyinfo(), PhysMem::new(total_bytes, max_order).buddyinfo());
}

#[test]
fn random_operations_match_a_page_model() {
    model_run(14, 1);
    // Small largest order: most requests are multi-block allocations above it.
    model_run(5, 2);
    model_run(1, 3);
}

fn fragmented(target: f64, seed: u64) -> (PhysMem, f64) {
    let mut m = PhysMem::new(16 * GIB, 14);
    let got = m.fragment_fmfi(target, 9, 4 * GIB, seed);
    (m, got)
}

#[test]
fn fmfi_targets_are_reached() {
    for (mem, keep) in [(16 * GIB, 4 * GIB), (4 * GIB, GIB)] {
        for target in [0.1, 0.3, 0.5, 0.7, 0.9, 0.99] {
            let mut m = PhysMem::new(mem, 14);
            let got = m.fragment_fmfi(target, 9, keep, 42);
            let case = format!("{mem} B, keep {keep} B, target {target}: got {got}");
            ok(&m);
            assert!((got - target).abs() <= 0.02, "{case}");
            assert_eq!(got, m.fmfi(9));
            // keep_free_bytes honoured, overshooting by less than one chunk.
            assert!(m.free_pages() >= keep / BASE_PAGE, "{case}");
            assert!(m.free_pages() < (keep + 32 * MIB) / BASE_PAGE, "{case}");
            assert_eq!(m.fragmenter_pages() + m.free_pages(), m.total_pages());
            // Press chunks never merge above 512 KiB; relax chunks stay 32 MiB.
            for k in 0..14 {
                if k != 7 && k != 13 {
                    assert_eq!(m.free_blocks(k), 0, "order {k}; {case}");
                }
            }
            assert_eq!(m.fmfi(7), 0.0, "64 KiB..512 KiB contiguity stays whole; {case}");
        }
    }
}

#[test]
fn fmfi_with_preallocated_memory_and_keep_larger_than_chunks() {
    let mut m = PhysMem::new(8 * GIB + 300 * 1024, 14);
    // Some kernel memory first, scattered at several orders.
    let mut held = Vec::new();
    for i in 0..3000u32 {
        held.push((m.alloc(i % 5).unwrap(), i % 5));
    }
    let got = m.fragment_fmfi(0.5, 9, GIB, 3);
    ok(&m);
    assert!((got - 0.5).abs() <= 0.02, "{got}");
    assert!(m.free_pages() >= GIB / BASE_PAGE);
    for (p, o) in held {
        m.free(p, o).unwrap();
    }
    ok(&m);
    // Asking for more than the whole machine gives everything back.
    let mut m = PhysMem::new(GIB, 14);
    let got = m.fragment_fmfi(0.5, 9, 2 * GIB, 3);
    ok(&m);
    assert_eq!(m.free_pages(), m.total_pages());
    assert_eq!(m.free_blocks(13), 32);
    assert_eq!(got, 0.0);
    // Keeping nothing free leaves nothing free.
    let mut m = PhysMem::new(GIB, 14);
    assert_eq!(m.fragment_fmfi(0.5, 9, 0, 3), 0.0);
    assert_eq!(m.free_pages(), 0);
    ok(&m);
}

#[test]
fn fragmented_memory_still_allocates_and_frees() {
    let (mut m, _) = fragmented(0.9, 5);
    let mut got = Vec::new();
    while let Some(p) = m.alloc(9) {
        got.push(p);
    }
    // Only relax chunks can provide 2 MiB.
    assert_eq!(got.len() as u64 % 16, 0);
    assert!(m.alloc(7).is_some());
    for p in got {
        m.free(p, 9).unwrap();
    }
    ok(&m);
}

#[test]
fn fragmentation_is_deterministic_per_seed() {
    let (a, fa) = fragmented(0.5, 1);
    let (b, fb) = fragmented(0.5, 1);
    let (c, _) = fragmented(0.5, 2);
    assert_eq!(fa, fb);
    assert_eq!(snapshot(&a), snapshot(&b));
    assert_ne!(snapshot(&a), snapshot(&c));

    let mut x = PhysMem::new(4 * GIB, 14);
    let mut y = PhysMem::new(4 * GIB, 14);
    let mut z = PhysMem::new(4 * GIB, 14);
    x.fragment_free_2m(0.4, 9);
    y.fragment_free_2m(0.4, 9);
    z.fragment_free_2m(0.4, 10);
    assert_eq!(snapshot(&x), snapshot(&y));
    assert_ne!(snapshot(&x), snapshot(&z));
}

#[test]
fn free_2m_knob() {
    for fraction in [0.0, 0.1, 0.5, 0.9, 1.0] {
        let mut m = PhysMem::new(8 * GIB, 14);
        let got = m.fragment_free_2m(fraction, 11);
        ok(&m);
        assert!((got - (1.0 - fraction)).abs() <= 0.02, "fraction {fraction}: free_2m_fraction {got}");
        assert_eq!(got, m.free_2m_fraction());
        let blocks_2m = m.total_pages() / 512;
        let pinned = (fraction * blocks_2m as f64).round() as u64;
        assert_eq!(m.fragmenter_pages(), pinned);
        assert_eq!(m.free_pages(), m.total_pages() - pinned);
        // Exactly the unpinned 2 MiB blocks can still be allocated as such.
        let mut n = 0;
        while m.alloc(9).is_some() {
            n += 1;
        }
        assert_eq!(n, blocks_2m - pinned);
    }
    // Without 2 MiB blocks at all the knob changes nothing.
    let mut m = PhysMem::new(GIB, 9);
    assert_eq!(m.fragment_free_2m(0.5, 1), 0.0);
    assert_eq!(m.free_pages(), m.total_pages());
}

#[test]
fn degenerate_inputs_do_not_panic() {
    let mut m = PhysMem::new(0, 0);
    assert_eq!(m.max_order(), 1);
    assert_eq!(m.alloc(0), None);
    assert_eq!(m.alloc(99), None);
    assert!(!m.alloc_at(Pfn(0), 0));
    assert!(m.free(Pfn(0), 0).is_err());
    assert_eq!(m.reserve_contiguous(1, 0), None);
    assert_eq!(m.fmfi(9), 0.0);
    assert_eq!(m.fragment_fmfi(0.5, 9, GIB, 1), 0.0);
    assert_eq!(m.fragment_free_2m(0.5, 1), 0.0);
    ok(&m);

    let mut m = PhysMem::new(5000, 100);
    assert_eq!(m.max_order(), MAX_ORDER_LIMIT);
    assert_eq!(m.total_pages(), 1);
    assert!(m.alloc(1).is_none());
    assert_eq!(m.alloc(0), Some(Pfn(0)));
    assert!(!m.alloc_at(Pfn(u64::MAX), 62));
    assert_eq!(m.reserve_contiguous(u64::MAX, 62), None);
    assert!(m.free(Pfn(u64::MAX), u32::MAX).is_err());
    ok(&m);

    let mut m = PhysMem::new(64 * MIB, 3);
    assert_eq!(m.alloc(5), Some(Pfn(0)));
    m.fragment_fmfi(f64::NAN, 0, 8 * MIB, 1);
    m.fragment_fmfi(2.0, 40, 16 * MIB, 1);
    ok(&m);
    let mut m = PhysMem::new(64 * MIB, 1);
    m.fragment_fmfi(0.5, 9, 8 * MIB, 1);
    assert!(m.free_pages() >= 2048);
    ok(&m);
}

/// Speed: `cargo test --release -- --ignored --nocapture speed`.
#[test]
#[ignore]
fn speed() {
    use std::time::Instant;
    let pairs = 20_000_000u64;
    let rate = |dt: f64| pairs as f64 / dt / 1e6;
    // Steady state of a faulting workload: a pool of live pages, one free + one alloc per step.
    // With 1 M pages the loop's own random read of `live` (8 MB) misses the cache and the
    // dependent free waits for it; with 64 K pages the pool stays cached.
    for pool in [1_000_000usize, 65_536] {
        let mut m = PhysMem::new(32 * GIB, 14);
        let mut live: Vec<Pfn> = (0..pool).map(|_| m.alloc(0).unwrap()).collect();
        let mut rng = Rng::new(1);
        let t = Instant::now();
        for _ in 0..pairs {
            let i = rng.below(live.len() as u64) as usize;
            m.free(live[i], 0).unwrap();
            live[i] = m.alloc(0).unwrap();
        }
        println!("random-churn ({pool} live pages) alloc+free pairs: {:.1} M/s", rate(t.elapsed().as_secs_f64()));
    }
    let mut rng = Rng::new(2);

    // Fault-then-exit: a process faults 1 M pages in, then unmaps them in fault order.
    let mut m = PhysMem::new(32 * GIB, 14);
    let mut pages = vec![Pfn(0); 1_000_000];
    let t = Instant::now();
    for _ in 0..pairs / 1_000_000 {
        for p in pages.iter_mut() {
            *p = m.alloc(0).unwrap();
        }
        for &p in pages.iter() {
            m.free(p, 0).unwrap();
        }
    }
    println!("fault-then-exit alloc+free pairs: {:.1} M/s", rate(t.elapsed().as_secs_f64()));

    // Mixed sizes: 4 KiB, 64 KiB and 2 MiB pages churning on a half-full machine.
    let mut m = PhysMem::new(32 * GIB, 14);
    let orders = [0u32, 0, 0, 0, 0, 0, 4, 9];
    let mut live: Vec<(Pfn, u32)> = (0..100_000)
        .map(|i| {
            let o = orders[i % orders.len()];
            (m.alloc(o).unwrap(), o)
        })
        .collect();
    let t = Instant::now();
    for _ in 0..pairs {
        let i = rng.below(live.len() as u64) as usize;
        let (p, o) = live[i];
        m.free(p, o).unwrap();
        live[i] = (m.alloc(o).unwrap(), o);
    }
    println!("mixed-order churn alloc+free pairs: {:.1} M/s", rate(t.elapsed().as_secs_f64()));

    // Worst case: alloc and immediately free on an empty machine (split 13 levels, merge 13).
    let mut m = PhysMem::new(32 * GIB, 14);
    let t = Instant::now();
    for _ in 0..pairs {
        let p = m.alloc(0).unwrap();
        m.free(p, 0).unwrap();
    }
    println!("split/merge alloc+free pairs: {:.1} M/s", rate(t.elapsed().as_secs_f64()));

    for (gib, keep) in [(32u64, 8u64), (256, 64)] {
        let mut m = PhysMem::new(gib * GIB, 14);
        let t = Instant::now();
        let f = m.fragment_fmfi(0.99, 9, keep * GIB, 1);
        println!("fragment_fmfi {gib} GiB (keep {keep} GiB, target 0.99): {:.1} ms, fmfi {f:.4}", t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let mut m = PhysMem::new(gib * GIB, 14);
        let f = m.fragment_free_2m(0.5, 1);
        println!("fragment_free_2m {gib} GiB: {:.1} ms, free_2m_fraction {f:.4}", t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        m.check_invariants().unwrap();
        println!("check_invariants {gib} GiB: {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    }
}
