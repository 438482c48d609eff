//! Elastic Translations' OS mechanisms on the arm64 driver, by hand: CoalaPaging's placement,
//! the 32 MiB promotion and its break, and hinted faults (src/os/coala.rs).

use xlate::addr::PageSize;
use xlate::arch::arm64::{Arm64, Arm64Config, ContMode};
use xlate::os::leshy::Hint;
use xlate::os::{CoalaPaging, Os, OsConfig, Promote32, ThpMode};
use xlate::tapi::Driver as _;
use xlate::workload::MapFlags;
/// An ET machine: arm64 with transparent contiguous bits, 1 GiB, the given OS settings.
fn os(f: impl FnOnce(&mut OsConfig)) -> Os<Arm64> {
    let mut cfg = OsConfig { memory: 1 << 30, ..OsConfig::default() };
    f(&mut cfg);
    let d = Arm64::from_config(&Arm64Config { cont: ContMode::Et, ..Arm64Config::default() }, 1).unwrap();
    Os::boot(d, &cfg, 1).unwrap()
}

fn anon(os: &mut Os<Arm64>, len: u64) -> (u16, u64) {
    let asid = os.spawn(false).unwrap();
    let va = os.mmap(asid, len, MapFlags::default()).unwrap();
    (asid, va)
}

#[test]
fn sixteen_faults_of_an_empty_64k_group_land_in_one_aligned_group() {
    for greedy in [false, true] {
        let mut os = os(|c| c.coala.paging = if greedy { CoalaPaging::Greedy } else { CoalaPaging::Off });
        let (asid, va) = anon(&mut os, 4 << 20);
        // Something else allocates between the faults (page-table pages, other processes):
        // without CoalaPaging the group's frames are then neither contiguous nor aligned.
        let group = va + 0x30000;
        for i in [5u64, 0, 15, 9, 1, 2, 3, 4, 6, 7, 8, 10, 11, 12, 13, 14] {
            os.fault(asid, group + i * 4096).unwrap();
            os.phys.alloc(0).unwrap();
        }
        let pa0 = os.truth(asid, group).unwrap().pbase;
        let contiguous = (0..16u64).all(|i| os.truth(asid, group + i * 4096).unwrap().pbase == pa0 + i * 4096);
        assert_eq!(contiguous && pa0 % 0x10000 == 0, greedy, "greedy = {greedy}");
        assert_eq!(os.driver.translations()[PageSize::K64.index()], greedy as u64);
        if greedy {
            // The first fault carved a fresh group at offset 5; the other 15 found the anchor.
            assert_eq!((os.stats.coala_fresh_hits, os.stats.coala_targeted, os.stats.coala_targeted_hits), (1, 15, 15));
        }
        os.phys.check_invariants().unwrap();
    }
}

#[test]
fn a_32m_promotion_copies_into_one_block_and_makes_one_translation() {
    let mut os = os(|c| c.thp = ThpMode::Never);
    let (asid, va) = anon(&mut os, 64 << 20);
    let base = PageSize::M32.align_down(va + (32 << 20) - 1);
    // Fault one page in every 2 MiB region but the 7th, which gets 3 pages.
    for r in 0..16u64 {
        os.fault(asid, base + r * (2 << 20)).unwrap();
    }
    for p in 1..3u64 {
        os.fault(asid, base + 6 * (2 << 20) + p * 4096).unwrap();
    }
    assert_eq!(os.promote_32m(asid, base).unwrap(), Promote32::Promoted);
    assert_eq!(os.stats.promotion_bytes_copied, 18 * 4096);
    assert_eq!(os.driver.translations()[PageSize::M32.index()], 1);
    let t = os.truth(asid, base + (7 << 20)).unwrap();
    assert_eq!(t.size, PageSize::M2);
    assert_eq!(os.promote_32m(asid, base).unwrap(), Promote32::AlreadyContiguous);
    // Unmapping one 2 MiB page breaks the group (break-before-make, a driver shootdown)
    // and frees exactly that block.
    let free = os.phys.free_pages();
    os.munmap(asid, base + (4 << 20), 2 << 20).unwrap();
    assert_eq!(os.phys.free_pages(), free + 512);
    assert_eq!(os.driver.translations()[PageSize::M32.index()], 0);
    assert_eq!(os.stats.driver_shootdowns, 1);
    os.phys.check_invariants().unwrap();
}

#[test]
fn hinted_faults_follow_the_hint_of_their_region() {
    let mut os = os(|c| {
        c.thp = ThpMode::Always;
        c.coala.paging = CoalaPaging::Hinted;
    });
    let (asid, va) = anon(&mut os, 16 << 20);
    let r0 = PageSize::M2.align_down(va + (2 << 20) - 1);
    os.load_hints(asid, vec![Hint::new(r0, PageSize::K64), Hint::new(r0 + (2 << 20), PageSize::M2)]);
    // 64K-hinted: no THP, a placed 4 KiB page. 2M-hinted: a THP. Unhinted: a plain 4 KiB page.
    assert_eq!(os.fault(asid, r0).unwrap().size, PageSize::K4);
    assert_eq!(os.fault(asid, r0 + (2 << 20)).unwrap().size, PageSize::M2);
    assert_eq!(os.fault(asid, r0 + (4 << 20)).unwrap().size, PageSize::K4);
    assert_eq!((os.stats.coala_fresh, os.stats.faults_thp), (1, 1));
    assert_eq!(os.stats.leshy_mix, vec![[1, 1, 0]]);
}
