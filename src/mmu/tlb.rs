//! TLBs: set-associative arrays of translations, tagged by ASID, holding one or several page sizes.
//!
//! A multi-size TLB (an L2 TLB holding 4K and 2M entries, as Intel's STLB does) is probed once per
//! size it holds, each probe indexing the set with that size's VPN; the lookup latency is charged
//! once. Entries are tagged with the ASID (PCID) so context switches need not flush.

use crate::addr::PageSize;
use crate::error::{Error, Result};
use crate::mem::assoc::{check_ways, Replacement, SetAssoc, INVALID_TAG};
use crate::tapi::{SharedTlb, Translation};

/// Geometry and timing of one TLB.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlbConfig {
    /// Total entries.
    pub entries: u32,
    /// Associativity (`entries` for fully associative).
    pub ways: u32,
    /// Lookup latency in cycles.
    pub latency: u32,
    /// Page sizes it holds.
    pub sizes: Vec<PageSize>,
}

impl TlbConfig {
    /// A TLB config.
    pub fn new(entries: u32, ways: u32, latency: u32, sizes: &[PageSize]) -> TlbConfig {
        TlbConfig { entries, ways, latency, sizes: sizes.to_vec() }
    }

    /// Checks geometry; errors name `key.field`.
    pub fn validate(&self, key: &str) -> Result<()> {
        if self.ways == 0 {
            return Err(Error::config(format!("{key}.ways"), "must be at least 1"));
        }
        check_ways(&format!("{key}.ways"), u64::from(self.ways))?;
        if self.entries == 0 || !self.entries.is_multiple_of(self.ways) {
            return Err(Error::config(format!("{key}.entries"), format!("must be a positive multiple of ways ({})", self.ways)));
        }
        let sets = self.entries / self.ways;
        if !sets.is_power_of_two() {
            return Err(Error::config(format!("{key}.entries"), format!("entries/ways = {sets} sets is not a power of two")));
        }
        if self.sizes.is_empty() {
            return Err(Error::config(format!("{key}.sizes"), "must list at least one page size (\"4K\", \"2M\", ...)"));
        }
        Ok(())
    }
}

/// One TLB.
pub struct Tlb {
    arr: SetAssoc,
    pbase: Vec<u64>,
    sizes: [PageSize; PageSize::COUNT],
    nsizes: usize,
    /// Bit `size.index()` set for each size in `sizes` ([`Tlb::holds`] without a search).
    size_bits: u8,
    set_mask: u64,
    /// Tag and slot of the entry last hit or filled, if it is of the first size probed (else
    /// [`INVALID_TAG`]). It is the most recent entry of its set, so a lookup that finds it again
    /// would change no LRU state: [`Tlb::lookup`] answers it without searching (exact, and most
    /// accesses of a sequential workload are such re-hits).
    mru: u64,
    mru_slot: usize,
    /// Valid entries of each page size ([`PageSize::index`]). A lookup skips the probe of a size
    /// it holds no entry of: that probe could only miss, and a miss changes nothing (exact; a
    /// 4K+2M L2 TLB of a run without huge pages probes one set per lookup, not two).
    held: [u32; PageSize::COUNT],
    /// Fully associative TLBs of [`FA_INDEX_WAYS`] ways or more only ([`FaIndex`]).
    fa: Option<Box<FaIndex>>,
    /// Lookup latency in cycles.
    pub latency: u32,
}

/// A fully associative TLB from this many ways on gets a [`FaIndex`] (Neoverse N1's 48-entry
/// L1 TLBs: a lookup there compared 48 tags per size held, up to three sizes).
const FA_INDEX_WAYS: usize = 16;

/// Buckets of a [`FaIndex`] per page size (by the low bits of the page number).
const FA_BUCKETS: usize = 64;

/// A fully associative TLB's host-side index, per page size and bucket of page numbers: how
/// many entries it holds there, and the way where one was last found or filled. A lookup skips
/// the search of a size whose bucket is empty (it could only miss, which changes nothing), and
/// tries the bucket's way before searching (a tag is in at most one way, so finding it there
/// is what the search would find). Exact; test `fa_index_equals_the_search`.
#[derive(Clone, Debug)]
struct FaIndex {
    count: [[u16; FA_BUCKETS]; PageSize::COUNT],
    way: [[u16; FA_BUCKETS]; PageSize::COUNT],
}

impl FaIndex {
    /// The bucket of page number `vpn`.
    #[inline(always)]
    fn bucket(vpn: u64) -> usize {
        vpn as usize % FA_BUCKETS
    }

    /// One entry of tag `t` more (`+1`) or fewer (`-1`).
    #[inline]
    fn count_tag(&mut self, t: u64, delta: i16) {
        let c = &mut self.count[(t & 7) as usize][Self::bucket(t >> 19)];
        *c = c.wrapping_add_signed(delta);
    }
}

#[inline(always)]
fn tag(vpn: u64, asid: u16, size: PageSize) -> u64 {
    // vpn ≤ 45 bits (57-bit VA, 4K pages), asid 16 bits, size 3 bits.
    (vpn << 19) | ((asid as u64) << 3) | size.index() as u64
}

impl Tlb {
    /// Builds a validated TLB.
    pub fn new(cfg: &TlbConfig) -> Tlb {
        let sets = (cfg.entries / cfg.ways) as usize;
        let mut sizes = [PageSize::K4; PageSize::COUNT];
        let mut nsizes = 0;
        for s in PageSize::ALL {
            if cfg.sizes.contains(&s) {
                sizes[nsizes] = s;
                nsizes += 1;
            }
        }
        Tlb {
            arr: SetAssoc::new(sets, cfg.ways as usize, Replacement::Lru),
            pbase: vec![0; sets * cfg.ways as usize],
            sizes,
            nsizes,
            size_bits: sizes[..nsizes].iter().fold(0, |b, s| b | 1 << s.index()),
            set_mask: sets as u64 - 1,
            mru: INVALID_TAG,
            mru_slot: 0,
            held: [0; PageSize::COUNT],
            fa: (sets == 1 && cfg.ways as usize >= FA_INDEX_WAYS)
                .then(|| Box::new(FaIndex { count: [[0; FA_BUCKETS]; PageSize::COUNT], way: [[0; FA_BUCKETS]; PageSize::COUNT] })),
            latency: cfg.latency,
        }
    }

    /// Whether it holds translations of `size`.
    #[inline]
    pub fn holds(&self, size: PageSize) -> bool {
        self.size_bits >> size.index() & 1 != 0
    }

    /// Whether [`Tlb::insert`] caches something for a translation of `size`: the size itself, or
    /// the entry size of a contiguous group.
    #[inline]
    pub fn takes(&self, size: PageSize) -> bool {
        self.holds(size) || size.descriptor().is_some_and(|d| self.holds(d))
    }

    /// Whether it holds no entry: a lookup would miss, changing nothing.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.held == [0; PageSize::COUNT]
    }

    /// Looks `va` up in every size it holds.
    #[inline(always)]
    pub fn lookup(&mut self, asid: u16, va: u64) -> Option<Translation> {
        // The re-hit shortcut inline in the caller; the set searches out of line.
        if let Some(t) = self.rehit(asid, va) {
            return Some(t);
        }
        self.lookup_sets(asid, va)
    }

    /// The translation of `va` if it is the most recent entry of its set (of the first size
    /// held): what [`Tlb::lookup`] answers then, changing nothing, so this changes nothing either.
    #[inline(always)]
    pub fn rehit(&self, asid: u16, va: u64) -> Option<Translation> {
        let first = self.sizes[0];
        (tag(va >> first.shift(), asid, first) == self.mru).then(|| Translation { pbase: self.pbase[self.mru_slot], size: first })
    }

    /// [`Tlb::lookup`] past the re-hit shortcut: probes a set per size held. The loop is inline
    /// and each probe out of line: with the probe's code for every set shape inside the loop,
    /// the compiler hoisted their invariants into some 45 instructions paid on every call
    /// (docs/performance.md, "TLB probes out of line").
    #[inline(always)]
    fn lookup_sets(&mut self, asid: u16, va: u64) -> Option<Translation> {
        for i in 0..self.nsizes {
            let size = self.sizes[i];
            if self.held[size.index()] == 0 {
                continue;
            }
            if let Some(t) = self.probe_size(i, size, asid, va) {
                return Some(t);
            }
        }
        None
    }

    /// Probes the set of `va` for size `size` (the `i`th probed): a hit updates replacement
    /// state and the re-hit shortcut.
    #[inline(never)]
    fn probe_size(&mut self, i: usize, size: PageSize, asid: u16, va: u64) -> Option<Translation> {
        let vpn = va >> size.shift();
        let set = (vpn & self.set_mask) as usize;
        let tg = tag(vpn, asid, size);
        let found = match self.fa.as_deref_mut() {
            None => self.arr.lookup(set, tg),
            Some(fa) => {
                let b = FaIndex::bucket(vpn);
                if fa.count[size.index()][b] == 0 {
                    return None;
                }
                let hint = usize::from(fa.way[size.index()][b]);
                let way = if self.arr.tag_at(0, hint) == Some(tg) {
                    self.arr.touch(0, hint);
                    Some(hint)
                } else {
                    self.arr.lookup(0, tg)
                };
                if let Some(w) = way {
                    fa.way[size.index()][b] = w as u16;
                }
                way
            }
        };
        let slot = self.arr.slot(set, found?);
        self.note_mru(i, tg, slot);
        Some(Translation { pbase: self.pbase[slot], size })
    }

    /// Whether an entry covers `va` (changes nothing).
    pub fn covers(&self, asid: u16, va: u64) -> bool {
        self.sizes[..self.nsizes].iter().any(|&size| {
            let vpn = va >> size.shift();
            self.arr.probe((vpn & self.set_mask) as usize, tag(vpn, asid, size)).is_some()
        })
    }

    /// Records the entry just made most recent in its set (a hit or a fill) as the shortcut's,
    /// if it is of the first size; otherwise forgets the shortcut, whose entry may share the set.
    #[inline(always)]
    fn note_mru(&mut self, size_index: usize, tg: u64, slot: usize) {
        (self.mru, self.mru_slot) = if size_index == 0 { (tg, slot) } else { (INVALID_TAG, 0) };
    }

    /// Calls `f` with the tag of every valid entry (ASID, page number and size packed): the
    /// accelerator report counts entries replicated across TLBs by comparing them.
    pub fn for_each_tag(&self, mut f: impl FnMut(u64)) {
        for set in 0..self.arr.sets() {
            for way in 0..self.arr.ways() {
                if let Some(t) = self.arr.tag_at(set, way) {
                    f(t);
                }
            }
        }
    }

    /// Fills a translation of a size it holds, or the covering piece of a contiguous translation
    /// whose entry size it holds (ignored otherwise). The caller must have just missed on `va`.
    #[inline]
    pub fn insert(&mut self, asid: u16, va: u64, t: Translation) {
        let t = if self.holds(t.size) {
            t
        } else {
            // The contiguous bit is a hint (ARM ARM D8.6.1): a TLB without that size caches the
            // entry the walk read, i.e. the piece of the group covering `va`.
            match t.size.descriptor() {
                Some(piece) if self.holds(piece) => Translation { pbase: t.paddr(va) & !piece.offset_mask(), size: piece },
                _ => return,
            }
        };
        let vpn = va >> t.size.shift();
        let set = (vpn & self.set_mask) as usize;
        let tg = tag(vpn, asid, t.size);
        // Callers fill only after this TLB missed, so the entry is absent (no probe on the hot path).
        debug_assert!(self.arr.probe(set, tg).is_none(), "TLB filled twice with {va:#x}");
        let (way, evicted) = self.arr.insert(set, tg);
        self.held[t.size.index()] += 1;
        if let Some(old) = evicted {
            self.held[(old & 7) as usize] -= 1;
        }
        if let Some(fa) = self.fa.as_deref_mut() {
            if let Some(old) = evicted {
                fa.count_tag(old, -1);
            }
            fa.count_tag(tg, 1);
            fa.way[t.size.index()][FaIndex::bucket(vpn)] = way as u16;
        }
        let slot = self.arr.slot(set, way);
        self.pbase[slot] = t.pbase;
        self.note_mru(if t.size == self.sizes[0] { 0 } else { 1 }, tg, slot);
    }

    /// Drops every entry of `asid` overlapping `[start, end)`; returns how many.
    pub fn invalidate(&mut self, asid: u16, start: u64, end: u64) -> usize {
        self.mru = INVALID_TAG;
        // A size of which no entry is held has nothing to remove (most shootdowns are of 4 KiB
        // pages in TLBs that also hold 2 MiB entries, or hold nothing at all, as an unused L1
        // I-TLB): its probes, or the whole shootdown, are skipped.
        let counts = self.held;
        let held = |size: &&PageSize| counts[size.index()] != 0;
        if !self.sizes[..self.nsizes].iter().any(|s| held(&s)) {
            return 0;
        }
        // A small range (a page migrated or unmapped) probes the one set each of its pages can
        // sit in per size; removing the same entries as the scan below, in another order, leaves
        // the same state (ranks keep the survivors' order).
        if start < end {
            let pages = |size: PageSize| ((end - 1) >> size.shift()) - (start >> size.shift()) + 1;
            let probes: u64 = self.sizes[..self.nsizes].iter().filter(held).map(|&z| pages(z)).sum();
            if probes <= self.arr.sets() as u64 {
                let mut n = 0;
                for &size in self.sizes[..self.nsizes].iter().filter(held) {
                    let before = n;
                    for vpn in start >> size.shift()..=(end - 1) >> size.shift() {
                        let tg = tag(vpn, asid, size);
                        let gone = self.arr.invalidate((vpn & self.set_mask) as usize, tg);
                        if let (true, Some(fa)) = (gone, self.fa.as_deref_mut()) {
                            fa.count_tag(tg, -1);
                        }
                        n += usize::from(gone);
                    }
                    self.held[size.index()] -= (n - before) as u32;
                }
                return n;
            }
        }
        let (held, mut fa) = (&mut self.held, self.fa.as_deref_mut());
        self.arr.invalidate_if(|t| {
            let a = ((t >> 3) & 0xffff) as u16;
            let size = PageSize::ALL[(t & 7) as usize];
            let va = (t >> 19) << size.shift();
            let hit = a == asid && va < end && va + size.bytes() > start;
            held[size.index()] -= u32::from(hit);
            if let (true, Some(fa)) = (hit, fa.as_deref_mut()) {
                fa.count_tag(t, -1);
            }
            hit
        })
    }

    /// Drops everything (a non-PCID context switch).
    pub fn flush(&mut self) {
        self.mru = INVALID_TAG;
        self.held = [0; PageSize::COUNT];
        if let Some(fa) = self.fa.as_deref_mut() {
            fa.count = [[0; FA_BUCKETS]; PageSize::COUNT];
        }
        self.arr.clear();
    }
}

/// The L2 TLB as a nested MMU's stage-2 entries share it (`host.ntlb.in_l2_tlb`): the tag takes
/// the ASID's place.
impl SharedTlb for Tlb {
    #[inline]
    fn latency(&self) -> u32 {
        self.latency
    }
    #[inline]
    fn lookup(&mut self, tag: u16, addr: u64) -> Option<Translation> {
        Tlb::lookup(self, tag, addr)
    }
    #[inline]
    fn insert(&mut self, tag: u16, addr: u64, t: Translation) {
        Tlb::insert(self, tag, addr, t)
    }
    fn drop_tag(&mut self, tag: u16) {
        self.invalidate(tag, 0, u64::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(p: u64, s: PageSize) -> Translation {
        Translation { pbase: p, size: s }
    }

    #[test]
    fn geometry_errors_name_the_key() {
        let e = TlbConfig::new(48, 4, 1, &[PageSize::K4]).validate("mmu.l1d").unwrap_err().to_string();
        assert!(e.contains("mmu.l1d.entries") && e.contains("12 sets is not a power of two"), "{e}");
        let e = TlbConfig::new(64, 0, 1, &[PageSize::K4]).validate("mmu.l2").unwrap_err().to_string();
        assert!(e.contains("mmu.l2.ways"), "{e}");
    }

    /// 2 sets × 2 ways, LRU: hand-computed hits, misses and the LRU victim.
    #[test]
    fn lru_by_hand() {
        let mut tlb = Tlb::new(&TlbConfig::new(4, 2, 1, &[PageSize::K4]));
        // VPNs 0, 2, 4 map to set 0; VPN 1 to set 1.
        for vpn in [0u64, 2] {
            tlb.insert(1, vpn << 12, t(vpn << 20, PageSize::K4));
        }
        assert!(tlb.lookup(1, 0).is_some()); // 0 becomes MRU, 2 is LRU
        tlb.insert(1, 4 << 12, t(4 << 20, PageSize::K4)); // evicts 2
        assert!(tlb.lookup(1, 2 << 12).is_none());
        assert_eq!(tlb.lookup(1, (4 << 12) + 5).unwrap().paddr((4 << 12) + 5), (4 << 20) + 5);
        assert!(tlb.lookup(1, 0).is_some());
        assert!(tlb.lookup(2, 0).is_none(), "another ASID must miss");
        tlb.insert(1, 1 << 12, t(1 << 20, PageSize::K4));
        assert!(tlb.lookup(1, 1 << 12).is_some());
    }

    /// The re-hit shortcut is exact: it answers only for the most recent entry of the first size,
    /// and a fill in its set, a larger-size hit or an invalidation takes it away.
    #[test]
    fn rehit_shortcut_keeps_lru_order() {
        let mut tlb = Tlb::new(&TlbConfig::new(4, 2, 1, &[PageSize::K4, PageSize::M2]));
        tlb.insert(1, 0, t(0x10_0000, PageSize::K4));
        assert_eq!(tlb.lookup(1, 0x10).unwrap().pbase, 0x10_0000); // shortcut
        tlb.insert(1, 2 << 12, t(0x20_0000, PageSize::K4)); // same set; 0 becomes LRU
        assert!(tlb.lookup(1, 0).is_some()); // real hit: 2 becomes LRU
        tlb.insert(1, 4 << 12, t(0x30_0000, PageSize::K4)); // evicts 2, not 0
        assert!(tlb.lookup(1, 0).is_some() && tlb.lookup(1, 2 << 12).is_none());
        tlb.insert(1, 0x40_0000, t(0x80_0000, PageSize::M2));
        assert_eq!(tlb.lookup(1, 0x40_1000).unwrap().size, PageSize::M2);
        assert_eq!(tlb.invalidate(1, 0, 0x1000), 1);
        assert!(tlb.lookup(1, 0).is_none(), "an invalidated entry must not re-hit");
    }

    /// The per-size counts that let a lookup skip a size match the entries really held, after
    /// random fills (with evictions), small and large invalidations and flushes.
    #[test]
    fn held_counts_follow_the_entries() {
        let cfg = TlbConfig::new(32, 4, 1, &[PageSize::K4, PageSize::M2, PageSize::G1]);
        let mut tlb = Tlb::new(&cfg);
        let mut rng = crate::rng::Rng::new(3);
        for step in 0..20_000 {
            let va = rng.below(1 << 33);
            let asid = 1 + rng.below(2) as u16;
            match rng.below(20) {
                0 => {
                    tlb.invalidate(asid, va, va + 1 + rng.below(1 << 22));
                }
                1 => {
                    tlb.invalidate(asid, va, va + (1 << 32));
                }
                2 if step % 50 == 0 => tlb.flush(),
                _ => {
                    let size = [PageSize::K4, PageSize::K4, PageSize::M2, PageSize::G1][rng.below(4) as usize];
                    if tlb.lookup(asid, va).is_none() {
                        tlb.insert(asid, va, Translation { pbase: va & !size.offset_mask(), size });
                    }
                }
            }
            let mut counted = [0u32; PageSize::COUNT];
            tlb.for_each_tag(|t| counted[(t & 7) as usize] += 1);
            assert_eq!(tlb.held, counted, "step {step}");
            assert_eq!(tlb.is_empty(), counted == [0; PageSize::COUNT], "step {step}");
        }
    }

    /// A small-range invalidation (probing sets) leaves exactly the state of the whole-TLB scan,
    /// also where it skips a size of which no entry is held (every third round fills no 2 MiB
    /// entry) or the whole TLB (every tenth fills nothing).
    #[test]
    fn targeted_invalidation_equals_the_scan() {
        let cfg = TlbConfig::new(64, 4, 1, &[PageSize::K4, PageSize::M2]);
        let mut rng = crate::rng::Rng::new(7);
        for round in 0..200 {
            let (mut a, mut b) = (Tlb::new(&cfg), Tlb::new(&cfg));
            let fills = if round % 10 == 0 { 0 } else { 100 };
            for _ in 0..fills {
                let (va, asid) = (rng.below(1 << 24), 1 + rng.below(2) as u16);
                let size = if round % 3 != 0 && rng.below(4) == 0 { PageSize::M2 } else { PageSize::K4 };
                for t in [&mut a, &mut b] {
                    if t.lookup(asid, va).is_none() {
                        t.insert(asid, va, Translation { pbase: va & !size.offset_mask(), size });
                    }
                }
            }
            let start = rng.below(1 << 24);
            let end = start + 1 + rng.below(3 << 12);
            let n = a.invalidate(1, start, end);
            b.mru = INVALID_TAG;
            let m = b.arr.invalidate_if(|t| {
                let size = PageSize::ALL[(t & 7) as usize];
                let va = (t >> 19) << size.shift();
                ((t >> 3) & 0xffff) as u16 == 1 && va < end && va + size.bytes() > start
            });
            assert_eq!(n, m, "round {round}");
            // Later fills evict the same victims from both.
            for _ in 0..50 {
                let va = rng.below(1 << 24);
                for t in [&mut a, &mut b] {
                    if t.lookup(1, va).is_none() {
                        t.insert(1, va, Translation { pbase: va & !0xfff, size: PageSize::K4 });
                    }
                }
            }
            for va in (0..1u64 << 24).step_by(1 << 12) {
                for asid in [1, 2] {
                    assert_eq!(a.lookup(asid, va), b.lookup(asid, va), "round {round}, {va:#x}");
                }
            }
        }
    }

    /// A fully associative TLB answers every lookup with its index as without it, through random
    /// fills (with evictions), lookups, small and large invalidations and flushes over three
    /// sizes; the index's counts always match the entries held.
    #[test]
    fn fa_index_equals_the_search() {
        let sizes = [PageSize::K4, PageSize::K64, PageSize::M2];
        let cfg = TlbConfig::new(48, 48, 1, &sizes);
        let (mut a, mut b) = (Tlb::new(&cfg), Tlb::new(&cfg));
        assert!(a.fa.is_some());
        b.fa = None;
        let mut rng = crate::rng::Rng::new(11);
        for step in 0..50_000 {
            let va = rng.below(1 << 30);
            let asid = 1 + rng.below(2) as u16;
            match rng.below(40) {
                0 => {
                    let end = va + 1 + rng.below(1 << 18);
                    assert_eq!(a.invalidate(asid, va, end), b.invalidate(asid, va, end), "step {step}");
                }
                1 => {
                    assert_eq!(a.invalidate(asid, va, va + (1 << 29)), b.invalidate(asid, va, va + (1 << 29)), "step {step}");
                }
                2 if step % 100 == 0 => {
                    a.flush();
                    b.flush();
                }
                _ => {
                    let size = sizes[rng.below(3) as usize];
                    let (x, y) = (a.lookup(asid, va), b.lookup(asid, va));
                    assert_eq!(x, y, "step {step}, {va:#x}");
                    if x.is_none() {
                        let t = Translation { pbase: va & !size.offset_mask(), size };
                        a.insert(asid, va, t);
                        b.insert(asid, va, t);
                    }
                }
            }
            let fa = a.fa.as_deref().unwrap();
            let mut counted = [[0u16; FA_BUCKETS]; PageSize::COUNT];
            a.for_each_tag(|t| counted[(t & 7) as usize][FaIndex::bucket(t >> 19)] += 1);
            assert_eq!(fa.count, counted, "step {step}");
        }
        let (mut ta, mut tb) = (Vec::new(), Vec::new());
        a.for_each_tag(|t| ta.push(t));
        b.for_each_tag(|t| tb.push(t));
        assert_eq!(ta, tb);
    }

    #[test]
    fn multi_size_and_invalidation() {
        let mut tlb = Tlb::new(&TlbConfig::new(16, 4, 1, &[PageSize::K4, PageSize::M2]));
        tlb.insert(3, 0x40_0000, t(0x8000_0000, PageSize::M2));
        tlb.insert(3, 0x1000, t(0x5000, PageSize::K4));
        assert_eq!(tlb.lookup(3, 0x5f_ffff).unwrap().size, PageSize::M2);
        tlb.insert(3, 0x4000_0000, t(0, PageSize::G1)); // not held: ignored
        assert!(tlb.lookup(3, 0x4000_0000).is_none());
        assert_eq!(tlb.invalidate(3, 0x41_0000, 0x41_1000), 1);
        assert!(tlb.lookup(3, 0x40_0000).is_none());
        assert!(tlb.lookup(3, 0x1000).is_some());
    }
}
