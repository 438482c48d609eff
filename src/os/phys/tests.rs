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

/// Replays a fixed mix of `alloc`, `alloc_at`, `free`, reservations and both fragmenters without any
/// tail-class operation and folds every result into one digest. The expected digests were recorded
/// from the allocator before the tail class existed: golden simulation results depend on exactly
/// these frames coming back in exactly this order.
fn no_tail_digest(total_bytes: u64, max_order: u32, seed: u64) -> (u64, Vec<u64>) {
    use crate::rng::hash2;
    let mut m = PhysMem::new(total_bytes, max_order);
    let mut h = 0u64;
    let fold = |h: &mut u64, x: u64| *h = hash2(*h, x);
    if seed.is_multiple_of(2) {
        fold(&mut h, m.fragment_free_2m(0.3, seed).to_bits());
    } else {
        fold(&mut h, m.fragment_fmfi(0.6, 9, total_bytes / 3, seed).to_bits());
    }
    let n = m.total_pages();
    let mut live: Vec<(u64, u32)> = Vec::new();
    let mut reservations: Vec<(u64, u64)> = Vec::new();
    let mut rng = Rng::new(seed);
    for step in 0..6000u64 {
        match rng.below(12) {
            0..=4 => {
                let order = [0, 0, 0, 1, 2, 3, 4, 5, 9, 10, 13, 15][rng.below(12) as usize];
                let got = m.alloc(order);
                fold(&mut h, got.map_or(u64::MAX, |p| p.0));
                if let Some(p) = got {
                    live.push((p.0, order));
                }
            }
            5 => {
                let order = rng.below(14) as u32;
                let p = rng.below(n) >> order << order;
                let got = m.alloc_at(Pfn(p), order);
                fold(&mut h, u64::from(got));
                if got {
                    live.push((p, order));
                }
            }
            6..=9 if !live.is_empty() => {
                let (p, o) = live.swap_remove(rng.below(live.len() as u64) as usize);
                m.free(Pfn(p), o).unwrap();
            }
            10 if step % 5 == 0 => {
                if let Some((p, len)) = reservations.pop() {
                    m.unreserve_contiguous(Pfn(p), len).unwrap();
                } else {
                    let len = 1 + rng.below(5000);
                    let got = m.reserve_contiguous(len, rng.below(10) as u32);
                    fold(&mut h, got.map_or(u64::MAX, |p| p.0));
                    if let Some(p) = got {
                        reservations.push((p.0, len));
                    }
                }
            }
            _ => {}
        }
    }
    for (p, len) in m.free_runs() {
        fold(&mut h, p.0 ^ (len << 40));
    }
    ok(&m);
    (h, m.buddyinfo())
}

#[test]
fn no_tail_sequences_are_unchanged() {
    let cases: [(u64, u32, u64, u64, &[u64]); 3] = [
        (256 * MIB + 44 * 1024, 14, 2, 0x4a10_1a31_fdbe_ba6b, &[6, 21, 40, 39, 40, 50, 62, 51, 37, 8, 0, 0, 0, 0]),
        (256 * MIB + 44 * 1024, 14, 3, 0x3dac_ef64_bab2_96ba, &[2, 1, 3, 2, 2, 1, 7, 111, 0, 1, 0, 0, 0, 0]),
        (64 * MIB, 6, 4, 0x17ea_f188_b78d_9904, &[5, 4, 4, 5, 11, 258]),
    ];
    for (bytes, max_order, seed, digest, info) in cases {
        let (h, got) = no_tail_digest(bytes, max_order, seed);
        assert_eq!((h, got.as_slice()), (digest, info), "{bytes} B, max_order {max_order}, seed {seed}");
    }
}

/// The class of the free block holding `pfn`, None if the frame is in use.
fn class_at(m: &PhysMem, pfn: u64) -> Option<Class> {
    m.block_at(pfn, 0).map(|(_, _, c)| c)
}

#[test]
fn exact_frame_leaves_tail_remainders_taken_last() {
    // Two 32 MiB blocks: 0 and 8192.
    let fresh = PhysMem::new(64 * MIB, 14);
    let mut m = fresh.clone();
    assert!(m.alloc_exact(Pfn(8192 + 1000), 0));
    ok(&m);
    assert!(!m.alloc_exact(Pfn(8192 + 1000), 0), "already taken");
    assert!(!m.is_free(Pfn(9192)));
    // One remainder per order 0..12, each the buddy of the path down to 9192, all in the tail.
    let remainders = [9193, 9194, 9196, 9184, 9200, 9152, 9088, 8960, 8704, 8192, 9216, 10240, 12288];
    for (k, &r) in remainders.iter().enumerate() {
        assert_eq!(m.tail_list(k as u32), vec![r], "order {k}");
        assert_eq!(m.free_blocks(k as u32), 1, "order {k}");
        assert_eq!(m.tail_blocks(k as u32), 1, "order {k}");
    }
    assert_eq!((m.free_blocks(13), m.tail_blocks(13)), (1, 0));
    assert_eq!(m.free_pages(), 2 * 8192 - 1);
    assert_eq!(m.buddyinfo(), vec![1; 14]);
    assert_eq!(m.fmfi(9), (512.0 - 1.0) / (2.0 * 8192.0 - 1.0));

    // Normal memory goes first, even though smaller tail blocks would fit exactly.
    assert_eq!(m.alloc(0), Some(Pfn(0)));
    assert_eq!(m.alloc(3), Some(Pfn(8)));
    let mut normal = vec![(0, 0), (8, 3)];
    for _ in 0..(8192 - 1 - 8) {
        let p = m.alloc(0).unwrap();
        assert!(p.0 < 8192, "remainder {p:?} taken while normal memory was left");
        normal.push((p.0, 0));
    }
    assert_eq!(m.free_pages(), 8191, "only the remainders are left");
    ok(&m);
    // Then the remainders: lowest tail block of the smallest order, split pieces become normal.
    assert_eq!(m.alloc(0), Some(Pfn(9193)));
    assert_eq!(m.alloc(0), Some(Pfn(9194)));
    assert_eq!(class_at(&m, 9195), Some(Class::Normal));
    assert_eq!(m.alloc(0), Some(Pfn(9195)));
    assert_eq!(m.alloc(9), Some(Pfn(8192)));
    ok(&m);

    // Freeing merges tail remainders back; once all is free the allocator equals a fresh one.
    for p in [9193, 9194, 9195, 9192] {
        m.free(Pfn(p), 0).unwrap();
    }
    m.free(Pfn(8192), 9).unwrap();
    ok(&m);
    assert_eq!((m.free_blocks(13), m.tail_blocks(12)), (1, 0), "the upper 32 MiB is whole again");
    for (p, o) in normal {
        m.free(Pfn(p), o).unwrap();
    }
    ok(&m);
    assert_eq!(m.buddyinfo(), fresh.buddyinfo());
    assert_eq!(snapshot(&m), snapshot(&fresh));
    assert!((0..14).all(|k| m.tail_blocks(k) == 0));
    let mut f = fresh.clone();
    for order in [0, 3, 0, 9, 13, 1] {
        assert_eq!(m.alloc(order), f.alloc(order));
    }
}

#[test]
fn group_without_anchor_then_anchor() {
    let mut m = PhysMem::new(64 * MIB, 14);
    // Pfn 0 in use: free normal blocks 1 (order 0), 2 (1), 4 (2), 8 (3), 16 (4), 32 (5), ...
    assert_eq!(m.alloc(0), Some(Pfn(0)));
    // 64 KiB group, fault at offset 5: the lowest block of the smallest order ≥ 4 is 16..32.
    assert_eq!(m.alloc_in_group(0, 4, 5, false), Some(Pfn(21)));
    ok(&m);
    for f in 16..32 {
        assert_eq!(class_at(&m, f), if f == 21 { None } else { Some(Class::Tail) }, "frame {f}");
    }
    assert_eq!((m.tail_list(0), m.tail_list(1), m.tail_list(2), m.tail_list(3)), (vec![20], vec![22], vec![16], vec![24]));
    assert_eq!(m.tail_blocks(4), 0);
    // A later fault at offset 6 finds the anchor (21 - 5) and takes its frame exactly.
    assert!(m.alloc_exact(Pfn(16 + 6), 0));
    assert_eq!((m.tail_list(0), m.tail_list(1)), (vec![20, 23], vec![]));
    ok(&m);
    // Ordinary allocations keep away from the group.
    assert_eq!(m.alloc(0), Some(Pfn(1)));
    assert_eq!(m.alloc(0), Some(Pfn(2)));
    assert_eq!(m.alloc(2), Some(Pfn(4)));
    assert_eq!(m.alloc(3), Some(Pfn(8)));
    assert_eq!(m.alloc(0), Some(Pfn(3)));
    assert_eq!(m.alloc(0), Some(Pfn(32)));
    // The next group comes from the lowest order-4 block again (33 left a normal order-0 block).
    assert_eq!(m.alloc_in_group(0, 4, 15, false), Some(Pfn(48 + 15)));
    // Bad arguments change nothing.
    let before = snapshot(&m);
    assert_eq!(m.alloc_in_group(0, 4, 16, false), None, "offset outside the group");
    assert_eq!(m.alloc_in_group(9, 5, 0, false), None, "group above the largest order");
    assert_eq!(m.alloc_in_group(u32::MAX, 1, 0, false), None);
    assert!(!m.alloc_exact(Pfn(3), 1), "misaligned");
    assert_eq!(snapshot(&m), before);
    ok(&m);
}

#[test]
fn group_of_32m_takes_exactly_an_order_13_block() {
    // Four 32 MiB blocks: 0, 8192, 16384, 24576.
    let mut m = PhysMem::new(128 * MIB, 14);
    assert_eq!(m.alloc_in_group(9, 4, 3, true), Some(Pfn(3 * 512)));
    ok(&m);
    assert_eq!((m.tail_list(9), m.tail_list(10), m.tail_list(11), m.tail_list(12)), (vec![1024], vec![0], vec![2048], vec![4096]));
    assert_eq!((m.free_blocks(13), m.tail_blocks(13)), (3, 0));
    // The group's neighbours are then found by anchor.
    assert!(m.alloc_exact(Pfn(7 * 512), 9));
    assert_eq!((m.tail_list(9), m.tail_list(10), m.tail_list(11)), (vec![1024, 3072], vec![0, 2048], vec![]));
    ok(&m);

    // No free order-13 block: None (no change), although smaller blocks abound.
    let mut m = PhysMem::new(128 * MIB, 14);
    for i in 0..4 {
        assert!(m.alloc_at(Pfn(8192 * i + 7), 0));
    }
    let before = snapshot(&m);
    assert_eq!(m.alloc_in_group(9, 4, 0, true), None);
    assert_eq!(m.alloc_in_group(9, 4, 0, false), None, "order 13 is the largest");
    assert_eq!(snapshot(&m), before);

    // With order 14 in the buddy system, the exact variant still refuses a larger block...
    let mut m = PhysMem::new(128 * MIB, 15);
    assert_eq!(m.alloc_in_group(9, 4, 2, true), None);
    // ...which the other takes, leaving remainders of orders 9..13 in the tail.
    assert_eq!(m.alloc_in_group(9, 4, 2, false), Some(Pfn(1024)));
    assert_eq!(m.tail_list(13), vec![8192]);
    // An order-13 block exists only in the tail now: the exact variant takes it.
    assert_eq!(m.alloc_in_group(9, 4, 1, true), Some(Pfn(8192 + 512)));
    assert_eq!(m.tail_list(12), vec![4096, 8192 + 4096]);
    ok(&m);
}

#[test]
fn topup_splits_exactly_when_low() {
    let fresh = PhysMem::new(4 * GIB, 14);
    let mut m = fresh.clone();
    assert!(!m.topup(9, 3, 200), "no order holds more than 200 blocks");
    assert_eq!(snapshot(&m), snapshot(&fresh));
    // 0 ≤ 3 order-9 blocks: split the lowest order-13 block (the only order above 9 with > 32).
    assert!(m.topup(9, 3, 32));
    ok(&m);
    assert_eq!(m.free_list(9), vec![0, 512], "two unmerged buddies");
    assert_eq!((m.free_list(10), m.free_list(11), m.free_list(12)), (vec![1024], vec![2048], vec![4096]));
    assert_eq!(m.free_blocks(13), 127);
    assert_eq!(m.free_pages(), m.total_pages());
    // 2 ≤ 3: again, from the next order-13 block since orders 10..12 hold one block each.
    assert!(m.topup(9, 3, 32));
    assert_eq!(m.free_list(9), vec![0, 512, 8192, 8192 + 512]);
    // 4 > 3: nothing.
    let before = snapshot(&m);
    assert!(!m.topup(9, 3, 32));
    assert_eq!(snapshot(&m), before);
    // A source threshold of 0 picks the smallest order above 9 with a block: order 10 at 1024.
    assert!(m.topup(9, 4, 0));
    assert_eq!(m.free_list(9), vec![0, 512, 1024, 1536, 8192, 8192 + 512]);
    assert_eq!(m.free_list(10), vec![8192 + 1024]);
    ok(&m);

    // The pieces are ordinary order-9 blocks: allocated and freed, they merge as far as they can.
    assert_eq!(m.alloc(9), Some(Pfn(0)));
    assert_eq!(m.alloc(10), Some(Pfn(8192 + 1024)));
    m.free(Pfn(0), 9).unwrap();
    // 0 merged with 512; 1024..2048 are still two order-9 blocks, so the merge stops at order 10.
    assert_eq!(m.free_list(10), vec![0]);
    ok(&m);
    // A range tiled by several free blocks can still be taken whole.
    assert!(m.alloc_at(Pfn(0), 11));
    assert_eq!(m.free_list(9), vec![8192, 8192 + 512]);
    ok(&m);
    m.free(Pfn(0), 11).unwrap();
    m.free(Pfn(8192 + 1024), 10).unwrap();
    ok(&m);
    // Unmerged pieces stay apart until something merges them.
    assert_eq!(m.free_list(9), vec![8192, 8192 + 512]);
    assert!(m.alloc_at(Pfn(8192), 9));
    m.free(Pfn(8192), 9).unwrap();
    ok(&m);
    assert_eq!(snapshot(&m), snapshot(&fresh));
}

/// Random traffic of every allocation kind checked against a page-by-page model: no frame handed out
/// twice, `is_free` and `free_pages` exact, the class rule of `alloc` and `alloc_in_group` obeyed.
fn tail_model_run(seed: u64, with_topup: bool) {
    let total_bytes = 64 * MIB + 44 * 1024;
    let fresh = PhysMem::new(total_bytes, 14);
    let mut m = fresh.clone();
    let n = m.total_pages() as usize;
    let top = m.largest_order();
    let mut used = vec![false; n];
    let mut live: Vec<(u64, u32)> = Vec::new();
    let mut reservations: Vec<(u64, u64)> = Vec::new();
    let mut rng = Rng::new(seed);
    let range_free = |used: &[bool], p: u64, len: u64| p + len <= n as u64 && used[p as usize..(p + len) as usize].iter().all(|u| !u);
    let take = |used: &mut [bool], live: &mut Vec<(u64, u32)>, p: u64, o: u32| {
        assert!(range_free(used, p, 1 << o), "{p:#x}/{o} handed out while in use");
        used[p as usize..(p + (1 << o)) as usize].fill(true);
        live.push((p, o));
    };
    let normal_at_least = |m: &PhysMem, o: u32| (o..=top).any(|k| m.free_blocks(k) > m.tail_blocks(k));
    // Tail blocks taken by `alloc`, tail blocks taken by `alloc_in_group`, top-up splits.
    let mut counts = [0u64; 3];
    for step in 0..8000 {
        let pre = m.clone();
        match rng.below(14) {
            0..=2 => {
                let order = [0, 0, 0, 1, 2, 3, 4, 9, 12, 13][rng.below(10) as usize];
                match m.alloc(order) {
                    Some(Pfn(p)) => {
                        let class = class_at(&pre, p).unwrap();
                        let want = if normal_at_least(&pre, order) { Class::Normal } else { Class::Tail };
                        assert_eq!(class, want, "step {step}: alloc({order}) = {p:#x}");
                        counts[0] += u64::from(class == Class::Tail);
                        take(&mut used, &mut live, p, order);
                    }
                    None if !with_topup => assert_eq!(pre.free_pages_at_least(order), 0),
                    None => {}
                }
            }
            3 => {
                let order = rng.below(12) as u32;
                let p = rng.below(n as u64) >> order << order;
                let expect = range_free(&used, p, 1 << order);
                let got = if rng.below(2) == 0 { m.alloc_exact(Pfn(p), order) } else { m.alloc_at(Pfn(p), order) };
                assert_eq!(got, expect, "step {step}: {p:#x}/{order}");
                if got {
                    take(&mut used, &mut live, p, order);
                }
            }
            4..=5 => {
                let (order, group, exact) = if rng.below(4) == 0 { (9, 4, true) } else { (rng.below(3) as u32, 4, false) };
                let offset = rng.below(16);
                match m.alloc_in_group(order, group, offset, exact) {
                    Some(Pfn(p)) => {
                        assert_eq!((p >> order) % 16, offset, "step {step}");
                        let g = order + group;
                        let (_, j, class) = pre.block_at(p, g).unwrap();
                        let normal = if exact { pre.free_blocks(g) > pre.tail_blocks(g) } else { normal_at_least(&pre, g) };
                        assert_eq!(class, if normal { Class::Normal } else { Class::Tail }, "step {step}");
                        if exact {
                            assert_eq!(j, g, "step {step}");
                        }
                        counts[1] += u64::from(class == Class::Tail);
                        take(&mut used, &mut live, p, order);
                    }
                    None if exact => assert_eq!(pre.free_blocks(order + group), 0),
                    None if !with_topup => assert_eq!(pre.free_pages_at_least(order + group), 0),
                    None => {}
                }
            }
            6 if with_topup => {
                let low = rng.below(8);
                let split = m.topup(9, low, 2);
                assert_eq!(split, pre.free_blocks(9) <= low && (10..=top).any(|k| pre.free_blocks(k) > 2), "step {step}");
                counts[2] += u64::from(split);
            }
            7..=11 if !live.is_empty() => {
                let (p, o) = live.swap_remove(rng.below(live.len() as u64) as usize);
                m.free(Pfn(p), o).unwrap();
                assert!(m.free(Pfn(p), o).is_err(), "double free accepted");
                used[p as usize..(p + (1 << o)) as usize].fill(false);
                assert_eq!(class_at(&m, p), Some(Class::Normal), "a freed block is normal");
            }
            12 if step % 5 == 0 => {
                if let Some((p, len)) = reservations.pop() {
                    m.unreserve_contiguous(Pfn(p), len).unwrap();
                    used[p as usize..(p + len) as usize].fill(false);
                } else if let Some(Pfn(p)) = m.reserve_contiguous(1 + rng.below(3000), rng.below(4) as u32) {
                    let len = *m.reserved.get(&p).unwrap();
                    assert!(range_free(&used, p, len), "step {step}");
                    used[p as usize..(p + len) as usize].fill(true);
                    reservations.push((p, len));
                }
            }
            _ => {}
        }
        assert_eq!(m.free_pages(), used.iter().filter(|u| !**u).count() as u64, "step {step}");
        for _ in 0..4 {
            let p = rng.below(n as u64);
            assert_eq!(m.is_free(Pfn(p)), !used[p as usize], "step {step}: page {p:#x}");
        }
        if step % 250 == 0 {
            ok(&m);
        }
    }
    ok(&m);
    println!("seed {seed}: tail blocks taken by alloc / alloc_in_group, top-up splits: {counts:?}");
    assert!(counts[0] > 0 && counts[1] > 0 && (counts[2] > 0) == with_topup, "{counts:?}: the fallbacks were not exercised");
    for (p, o) in live {
        m.free(Pfn(p), o).unwrap();
    }
    for (p, len) in reservations {
        m.unreserve_contiguous(Pfn(p), len).unwrap();
    }
    ok(&m);
    assert_eq!(m.free_pages(), m.total_pages());
    assert!((0..=top).all(|k| m.tail_blocks(k) == 0), "every tail block merged back");
    if !with_topup {
        assert_eq!(snapshot(&m), snapshot(&fresh));
    }
}

#[test]
fn random_tail_traffic_matches_a_page_model() {
    tail_model_run(11, false);
    tail_model_run(12, true);
}

/// A partition's allocator: blocks only inside the range, carved out of a larger free block
/// when the range is smaller than one, and exhausted exactly when the range is.
#[test]
fn alloc_in_range_stays_inside_the_range() {
    // 64 MiB, largest block 32 MiB (order 13): ranges of 16 MiB lie inside one free block.
    let mut m = PhysMem::new(64 << 20, 14);
    let (lo, hi) = (4096u64, 8192u64); // frames of [16 MiB, 32 MiB)
    let mut got = Vec::new();
    while let Some(p) = m.alloc_in_range(0, lo, hi) {
        assert!(p.0 >= lo && p.0 < hi, "{:#x} outside the range", p.0);
        got.push(p.0);
    }
    assert_eq!(got.len() as u64, hi - lo, "every frame of the range, once");
    assert_eq!(m.free_pages(), (64 << 8) - (hi - lo), "nothing outside was taken");
    m.check_invariants().unwrap();
    // 2 MiB blocks from a range after some 4 KiB frames came back.
    for &p in &got[..1024] {
        m.free(Pfn(p), 0).unwrap();
    }
    let b = m.alloc_in_range(9, lo, hi).expect("a whole 2 MiB block came back");
    assert!(b.0 >= lo && b.0 + 512 <= hi && b.0.is_multiple_of(512));
    m.check_invariants().unwrap();
}

#[test]
fn compaction_moves_fragmenter_pages_out_of_the_cheapest_block() {
    // Free-2M knob: one pinned page per broken block, so one move frees a block.
    let mut m = PhysMem::new(GIB, 14);
    m.fragment_free_2m(1.0, 3);
    ok(&m);
    assert_eq!(m.alloc(9), None, "every 2 MiB block is broken");
    let (free, held) = (m.free_pages(), m.fragmenter_pages());
    let c = m.compact(9, &|_| false).expect("a block qualifies");
    let (pfn, moved) = (c.block, c.fragmenter_moved);
    assert!(c.moved.is_empty());
    ok(&m);
    assert_eq!(moved, 1);
    assert_eq!(pfn.0 % 512, 0);
    assert_eq!(m.free_pages(), free - 512, "the block is allocated, its page moved into a free frame");
    assert_eq!(m.fragmenter_pages(), held, "the fragmenter keeps its pages");
    m.free(pfn, 9).expect("allocated as one order-9 block");
    ok(&m);
    // FMFI knob: blocks hold many pages; compaction keeps working until free memory runs short.
    let (mut m, _) = fragmented(0.9, 5);
    let mut n = 0;
    while let Some(c) = m.compact(9, &|_| false) {
        let (pfn, moved) = (c.block, c.fragmenter_moved);
        assert!(moved > 0 && moved <= 512);
        assert!((pfn.0..pfn.0 + 512).all(|p| !m.is_free(Pfn(p))));
        n += 1;
    }
    ok(&m);
    assert!(n > 0);
    assert!(m.free_pages() < m.fragmenter_pages().min(512) + 512, "stops only when nothing qualifies");
    // Nothing held: nothing to move.
    let mut m = PhysMem::new(GIB, 14);
    while m.alloc(9).is_some() {}
    assert_eq!(m.compact(9, &|_| false), None);
    ok(&m);
}

#[test]
fn compaction_moves_the_callers_pages_it_may_move() {
    // Every 2 MiB block holds a fragmenter page and, after 4 KiB allocations spread by the
    // smallest-order-first rule, pages of the caller too.
    let mut m = PhysMem::new(2 * GIB, 14);
    m.fragment_free_2m(1.0, 3);
    let mine: Vec<u64> = (0..131072).map(|_| m.alloc(0).unwrap().0).collect();
    assert_eq!(m.compact(9, &|_| false), None, "the caller's pages pin every block");
    let (free, held) = (m.free_pages(), m.fragmenter_pages());
    let mut sorted = mine.clone();
    sorted.sort_unstable();
    let mine = |p: u64| sorted.binary_search(&p).is_ok();
    let c = m.compact(9, &mine).expect("movable now");
    ok(&m);
    assert_eq!(c.fragmenter_moved, 1);
    let block = c.block.0..c.block.0 + 512;
    assert!(!c.moved.is_empty());
    for &(from, to) in &c.moved {
        assert!(block.contains(&from.0) && !block.contains(&to.0) && mine(from.0));
        assert!(!m.is_free(to));
    }
    assert_eq!(m.free_pages(), free - 512);
    assert_eq!(m.fragmenter_pages(), held);
    // Frames the caller cannot move keep their block.
    let pinned = c.moved[0].1 .0;
    let c2 = m.compact(9, &|p| p != pinned && mine(p)).unwrap();
    assert!(!(c2.block.0..c2.block.0 + 512).contains(&pinned));
    ok(&m);
}
