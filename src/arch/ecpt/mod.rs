//! ECPT: Elastic Cuckoo Page Tables (Skarlatos et al., ASPLOS'20) as EMT's MMU driver builds them
//! (Chai et al., OSDI'25 §6.2), with its Cuckoo Walk Tables and Cuckoo Walk Caches.
//!
//! - **Tables.** One elastic cuckoo hash table per page size (EMT's kernel default: 4 KiB and
//!   2 MiB; no 1 GiB table), each of d ways (default 3) of 16384 entries. An entry is one 64-byte
//!   line holding the 8 PTEs (x86-64 format, [`super::x86pte::encode`]) of 8 consecutive VPNs, a
//!   *cluster*, tagged by VPN >> 3. Tables are created on the first mapping of their size; each way
//!   is a physically contiguous block from the buddy allocator, so a probe reads a real physical
//!   line. Cuckoo insertion, elastic resizing and gradual migration live in [`cuckoo`].
//! - **Cuckoo walk tables (CWTs).** Per 2 MiB section (PMD-CWT) and per 1 GiB section (PUD-CWT)
//!   the OS keeps a 1-byte header: which page sizes have translations in the section and, for
//!   the section's own size (a 2 MiB page in a PMD section, a 1 GiB page in a PUD section), the
//!   way holding it. 64 headers make one 64-byte line; lines live in small cuckoo tables of their
//!   own (EMT: PMD-CWT 2 ways × 4096 lines, PUD-CWT 2 ways × 2048).
//! - **Cuckoo walk caches (CWCs)**, per core: PMD-CWC and PUD-CWC, each entry a copy of one
//!   64-byte CWT line (64 headers), as EMT's QEMU walker and simulator and Virtuoso cache them.
//! - **Walk** (EMT's latency model): fixed cycles = hash latency + CWC latency; the CWCs are
//!   looked up, and one step of parallel probes goes to the (size, way) pairs the cached headers
//!   leave possible: every way of the 4 KiB table, the one way a header names for a 2 MiB or
//!   1 GiB page, every way of every table when a CWC misses (the missing CWT line is fetched in
//!   the background and fills the CWC). Only the probe that holds the translation is on the
//!   critical path (`needed`); the others still travel the caches. If the probes miss (a cached
//!   line is stale, or the page is not mapped), a second step probes the ways not yet probed and
//!   the stale lines are fetched again (as EMT's QEMU walker does).
//!
//! Walk-cache coherence: the OS rewrites headers whenever what they say changes, including the
//! way of a 2 MiB / 1 GiB cluster moved by a kick or a migration (OS work, counted), but issues
//! no CWC invalidation for it (EMT's kernel has none): a stale cached line can only send a walk
//! to the wrong ways, and the second step catches that. Removals are followed by the OS's
//! shootdown of their range, which drops the CWC lines covering it.
//!
//! Parameters and their sources are in [`EcptConfig`]; the design and its simplifications are in
//! `docs/ecpt.md`.

mod config;
mod cuckoo;
mod cwt;
mod tdb;
#[cfg(test)]
mod tests;
mod walk;

pub use config::EcptConfig;

use super::x86pte::{decode, encode, ACCESSED, ADDR_MASK, PRESENT};
use super::{no_arch_change, ArchConfig, Design, Registered};
use crate::addr::PageSize;
use crate::error::{Error, Result};
use crate::mmu::wcache::{WalkCache, WalkCacheConfig};
use crate::tapi::{generic_for_each, generic_range_is_empty, Driver, OsCost, TObj, Tdb, TdbEnv, Translation, WalkPlan};
use cuckoo::{Cuckoo, Params};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// Page sizes with a table slot, in probe order.
const SIZES: [PageSize; 3] = [PageSize::K4, PageSize::M2, PageSize::G1];

fn size_slot(s: PageSize) -> Option<usize> {
    SIZES.iter().position(|&x| x == s)
}

/// 8 PTEs of 8 consecutive VPNs.
type Cluster = [u64; 8];
/// 64 one-byte section headers.
type HeaderLine = [u8; 64];

/// Header bit: 4 KiB translations in the section.
const H_4K: u8 = 1;
/// Header bit: 2 MiB translations in the section.
const H_2M: u8 = 2;
/// Header bit: a 1 GiB translation covers the section.
const H_1G: u8 = 4;
/// Shift of the 2-bit way of the section's own-size entry.
const WAY_SHIFT: u8 = 3;

#[inline(always)]
fn header_way(h: u8) -> u8 {
    (h >> WAY_SHIFT) & 3
}

/// The two walk-table levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lvl {
    /// One header per 2 MiB section.
    Pmd,
    /// One header per 1 GiB section.
    Pud,
}

impl Lvl {
    fn shift(self) -> u32 {
        match self {
            Lvl::Pmd => 21,
            Lvl::Pud => 30,
        }
    }
}

/// What a 2 MiB section holds (host bookkeeping behind its header).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PmdInfo {
    k4: u16,
    m2: bool,
}

/// What a 1 GiB section holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PudInfo {
    k4: u32,
    m2: u32,
    g1: bool,
}

/// One address space's ECPTs and walk tables.
pub struct EcptSpace {
    asid: u16,
    tables: [Option<Cuckoo<Cluster>>; 3],
    pmd_cwt: Option<Cuckoo<HeaderLine>>,
    pud_cwt: Option<Cuckoo<HeaderLine>>,
    pmd: BTreeMap<u64, PmdInfo>,
    pud: BTreeMap<u64, PudInfo>,
}

impl EcptSpace {
    fn cwt(&self, l: Lvl) -> Option<&Cuckoo<HeaderLine>> {
        match l {
            Lvl::Pmd => self.pmd_cwt.as_ref(),
            Lvl::Pud => self.pud_cwt.as_ref(),
        }
    }

    /// The header stored in walk-table memory for section `key` (uncounted).
    fn stored_header(&self, l: Lvl, key: u64) -> u8 {
        self.cwt(l).and_then(|c| c.peek(key >> 6).map(|id| c.line(id).data[(key & 63) as usize])).unwrap_or(0)
    }

    /// Way holding the cluster of `vpn` in table `i` (host-side: the OS knows where it put it).
    fn way_of(&self, i: usize, vpn: u64) -> u8 {
        let t = self.tables[i].as_ref().expect("table of a mapped size");
        t.line(t.peek(vpn >> 3).expect("cluster of a mapped page")).loc.way
    }

    /// The header section `key` should have, from what is mapped.
    fn want_header(&self, l: Lvl, key: u64) -> u8 {
        match l {
            Lvl::Pmd => {
                let Some(i) = self.pmd.get(&key) else { return 0 };
                let mut h = if i.k4 > 0 { H_4K } else { 0 };
                if i.m2 {
                    h |= H_2M | (self.way_of(1, key) << WAY_SHIFT);
                }
                h
            }
            Lvl::Pud => {
                let Some(i) = self.pud.get(&key) else { return 0 };
                let mut h = 0;
                if i.k4 > 0 {
                    h |= H_4K;
                }
                if i.m2 > 0 {
                    h |= H_2M;
                }
                if i.g1 {
                    h |= H_1G | (self.way_of(2, key) << WAY_SHIFT);
                }
                h
            }
        }
    }

    /// The translation covering `va`, uncounted (checked mode).
    fn locate(&self, va: u64) -> Option<TObj> {
        find_in(self, va, &mut OsCost::default())
    }
}

/// The OS's lookup: each existing table from the smallest size up, way by way; stops at the
/// first cluster found (its other valid entries exclude every other size there).
fn find_in(s: &EcptSpace, va: u64, cost: &mut OsCost) -> Option<TObj> {
    for (i, t) in s.tables.iter().enumerate() {
        let Some(t) = t else { continue };
        let size = SIZES[i];
        let vpn = va >> size.shift();
        if let Some(id) = t.find(vpn >> 3, cost) {
            let e = t.line(id).data[(vpn & 7) as usize];
            return (e & PRESENT != 0).then(|| decode(e, va, size));
        }
    }
    None
}

/// Per-core cuckoo walk caches. An entry is a copy of one CWT line, taken when it was fetched
/// (it may have gone stale since); the line of the entry in slot `i` is `lines[i]`.
pub struct EcptCwc {
    // With the re-hit shortcut: a walk looks up both levels, and the PUD CWC's key (a line of
    // headers for 64 GiB) is nearly always the last one (`ecpt` GUPS: −27 instructions per
    // access, `ecpt@ecpt` −170).
    pmd: WalkCache<true>,
    pud: WalkCache<true>,
    pmd_lines: Vec<HeaderLine>,
    pud_lines: Vec<HeaderLine>,
}

impl EcptCwc {
    #[inline(always)]
    fn level(&mut self, l: Lvl) -> (&mut WalkCache<true>, &mut Vec<HeaderLine>) {
        match l {
            Lvl::Pmd => (&mut self.pmd, &mut self.pmd_lines),
            Lvl::Pud => (&mut self.pud, &mut self.pud_lines),
        }
    }

    /// The cached header of section `key` at level `l` (`None`: the line is not cached).
    #[inline(always)]
    fn header(&mut self, l: Lvl, asid: u16, key: u64) -> Option<u8> {
        let (c, lines) = self.level(l);
        c.lookup_slot(asid, key >> 6).map(|i| lines[i][(key & 63) as usize])
    }

    /// Caches (or refreshes) the line holding section `key`'s header; `None` (no such line in
    /// the CWT: nothing mapped in its range) drops a cached copy.
    fn fill(&mut self, l: Lvl, asid: u16, key: u64, line: Option<HeaderLine>) {
        let (c, lines) = self.level(l);
        match line {
            Some(d) => {
                let i = c.insert_slot(asid, key >> 6);
                lines[i] = d;
            }
            None => c.invalidate(asid, key >> 6, key >> 6),
        }
    }
}

/// Driver-wide event counters (walks and table maintenance).
#[derive(Clone, Debug, Default)]
struct Counters {
    walks: u64,
    probes: u64,
    probes_needed: u64,
    cwt_fetches: u64,
    cwt_refs: u64,
    pmd_hits: u64,
    pmd_misses: u64,
    pud_hits: u64,
    pud_misses: u64,
    fallbacks: u64,
    stale_fallbacks: u64,
    kicks: [u64; 3],
    resizes: [u64; 3],
    moved: [u64; 3],
    failures: [u64; 3],
    cwt_kicks: u64,
    cwt_resizes: u64,
    noncontiguous: u64,
}

/// Occupancy snapshot of one space (refreshed after every change), for the report.
#[derive(Clone, Debug, Default)]
struct Summary {
    /// Per size slot, per way: (slots of the current array, lines in current + old arrays).
    ways: [Vec<(u64, u64)>; 3],
    table_bytes: u64,
    cwt_bytes: u64,
}

/// The ECPT driver.
pub struct Ecpt {
    cfg: EcptConfig,
    sizes: Vec<PageSize>,
    seed: u64,
    fixed_cycles: u32,
    c: Counters,
    summary: BTreeMap<u16, Summary>,
}

impl Ecpt {
    /// A driver with the given parameters; `seed` seeds the hash functions.
    pub fn new(cfg: &EcptConfig, seed: u64) -> Ecpt {
        let mut sizes = cfg.sizes.clone();
        sizes.sort();
        // EMT's walk latency (dynamorio `ecpt_page_walk_latency.py`, its "parallel CWC" variant):
        // the way's latency + hash + max(PUD-CWC, PMD-CWC); the two CWCs are looked up in
        // parallel, the hash is not overlapped with them.
        let cwc = if cfg.cwt { cfg.pmd_cwc.latency.max(cfg.pud_cwc.latency) } else { 0 };
        Ecpt { cfg: cfg.clone(), sizes, seed, fixed_cycles: cfg.hash_latency + cwc, c: Counters::default(), summary: BTreeMap::new() }
    }

    /// The configuration.
    pub fn config(&self) -> &EcptConfig {
        &self.cfg
    }

    fn table_seed(&self, asid: u16, kind: u64) -> u64 {
        crate::rng::hash2(self.seed ^ 0xec97, ((asid as u64) << 8) | kind)
    }
}

impl Registered for Ecpt {
    type Section = EcptConfig;
    const DESIGNS: &'static [Design] = &[
        Design {
            name: "ecpt",
            description: "elastic cuckoo page tables with CWTs/CWCs, EMT's kernel parameters (arch.ecpt), 4 KiB pages",
            driver: "ecpt",
            arch: no_arch_change,
            settings: &["os.thp=never"],
            nested: None,
        },
        Design {
            name: "ecpt-thp",
            description: "ecpt with transparent huge pages always (2 MiB table)",
            driver: "ecpt",
            arch: no_arch_change,
            settings: &["os.thp=always"],
            nested: None,
        },
        Design {
            name: "ech",
            description:
                "Utopia's ECH: 4 ways x 8192, scale 10, perfect 2-cycle CWCs (optimistic, as Virtuoso's); 4 KiB pages (Utopia ran it with THP: --set os.thp=always)",
            driver: "ecpt",
            arch: |a| a.ecpt = EcptConfig::ech_utopia(),
            settings: &["os.thp=never"],
            nested: None,
        },
        Design {
            name: "ecph-virtuoso",
            description: "Virtuoso's ECH preset: 2 ways x 262144, rehash at 0.7 x2, perfect CWC; 4 KiB pages",
            driver: "ecpt",
            arch: |a| a.ecpt = EcptConfig::virtuoso(),
            settings: &["os.thp=never"],
            nested: None,
        },
    ];

    fn validate(s: &EcptConfig, key: &str) -> Result<()> {
        s.validate(key)
    }

    fn config(arch: &ArchConfig) -> EcptConfig {
        arch.ecpt.clone()
    }
}
