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
//! - **Cuckoo walk caches (CWCs)**, per core: PMD-CWC and PUD-CWC, caching headers.
//! - **Walk** (EMT's latency model): fixed cycles = max(hash latency, CWC latency); the CWCs are
//!   looked up; if they cannot narrow the search, the missing CWT lines are fetched through the
//!   caches (one serial step); then one step of parallel probes of the (size, way) pairs the
//!   headers leave possible. Only the probe that holds the translation is on the critical path
//!   (`needed`); the others still travel the caches.
//!
//! Walk-cache coherence: removing a translation is always followed by the OS's shootdown of its
//! range, which drops the CWC entries covering it. Two insert-side changes are not: a 1 GiB
//! section's header gaining a size, and a 2 MiB / 1 GiB cluster changing way (cuckoo kicks and
//! migration). The driver reports those ranges through
//! [`Driver::take_stale_walk_caches`], and the OS invalidates them on every core. Headers that
//! say "nothing here" are never cached, so a first mapping needs no invalidation.
//!
//! Parameters and their sources are in [`EcptConfig`]; the design and its simplifications are in
//! `docs/ecpt.md`.

mod config;
mod cuckoo;
mod tdb;
use tdb::cluster_entry;
#[cfg(test)]
mod tests;

pub use config::EcptConfig;

use super::x86pte::{decode, encode, ADDR_MASK, PRESENT};
use super::{no_arch_change, ArchConfig, Design, Registered};
use crate::addr::PageSize;
use crate::error::{Error, Result};
use crate::mmu::wcache::{WalkCache, WalkCacheConfig};
use crate::tapi::{generic_for_each, generic_range_is_empty, Driver, OsCost, TObj, Tdb, TdbEnv, Translation, WalkPlan};
use cuckoo::{Cuckoo, Params, EMPTY};
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

/// Per-core cuckoo walk caches: payload = the cached header byte.
pub struct EcptCwc {
    pmd: WalkCache,
    pud: WalkCache,
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
    kicks: [u64; 3],
    resizes: [u64; 3],
    moved: [u64; 3],
    failures: [u64; 3],
    cwt_kicks: u64,
    cwt_resizes: u64,
    noncontiguous: u64,
    invalidations: u64,
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
    stale: Vec<(u64, u64)>,
    summary: BTreeMap<u16, Summary>,
}

impl Ecpt {
    /// A driver with the given parameters; `seed` seeds the hash functions.
    pub fn new(cfg: &EcptConfig, seed: u64) -> Ecpt {
        let mut sizes = cfg.sizes.clone();
        sizes.sort();
        let cwc = if cfg.cwt { cfg.pmd_cwc.latency.max(cfg.pud_cwc.latency) } else { 0 };
        Ecpt {
            cfg: cfg.clone(),
            sizes,
            seed,
            fixed_cycles: cfg.hash_latency.max(cwc),
            c: Counters::default(),
            stale: Vec::new(),
            summary: BTreeMap::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &EcptConfig {
        &self.cfg
    }

    fn table_seed(&self, asid: u16, kind: u64) -> u64 {
        crate::rng::hash2(self.seed ^ 0xec97, ((asid as u64) << 8) | kind)
    }

    fn ensure_cwts(&mut self, s: &mut EcptSpace, env: &mut TdbEnv) -> Result<()> {
        if s.pmd_cwt.is_none() {
            s.pmd_cwt = Some(Cuckoo::new(self.cfg.cwt_params(self.cfg.pmd_cwt_entries), self.table_seed(s.asid, 3), false, env)?);
        }
        if s.pud_cwt.is_none() {
            s.pud_cwt = Some(Cuckoo::new(self.cfg.cwt_params(self.cfg.pud_cwt_entries), self.table_seed(s.asid, 4), false, env)?);
        }
        Ok(())
    }

    /// Reads section `key`'s header from walk-table memory, counting the line lookup.
    fn read_header(s: &EcptSpace, l: Lvl, key: u64, cost: &mut OsCost) -> u8 {
        let Some(c) = s.cwt(l) else { return 0 };
        c.find(key >> 6, cost).map(|id| c.line(id).data[(key & 63) as usize]).unwrap_or(0)
    }

    /// Brings section `key`'s stored header up to date. `counted_lookup`: the OS has not looked
    /// the line up yet (count the lookup); `stale`: a changed non-zero header may sit in CWCs
    /// and no shootdown will follow (report the section's range).
    fn sync_header(&mut self, s: &mut EcptSpace, l: Lvl, key: u64, counted_lookup: bool, stale: bool, env: &mut TdbEnv) -> Result<()> {
        let want = s.want_header(l, key);
        let c = match l {
            Lvl::Pmd => s.pmd_cwt.as_mut(),
            Lvl::Pud => s.pud_cwt.as_mut(),
        }
        .expect("walk tables exist once anything is mapped");
        let (tag, i) = (key >> 6, (key & 63) as usize);
        let id = if counted_lookup { c.find(tag, env.cost) } else { c.peek(tag) };
        let have = id.map_or(0, |id| c.line(id).data[i]);
        if have == want {
            return Ok(());
        }
        env.cost.write(1);
        match id {
            Some(id) => {
                let line = c.line_mut(id);
                line.data[i] = want;
                if have == 0 {
                    line.count += 1;
                } else if want == 0 {
                    line.count -= 1;
                    if line.count == 0 {
                        c.remove(id, env.cost);
                    }
                }
            }
            None => {
                let mut d = [0u8; 64];
                d[i] = want;
                c.insert(tag, d, 1, env)?;
            }
        }
        if stale && have != 0 {
            self.c.invalidations += 1;
            self.stale.push((key << l.shift(), (key + 1) << l.shift()));
        }
        Ok(())
    }

    /// Syncs the headers of every section whose 2 MiB or 1 GiB cluster changed way.
    fn sync_moved(&mut self, s: &mut EcptSpace, env: &mut TdbEnv) -> Result<()> {
        for (i, l) in [(1usize, Lvl::Pmd), (2, Lvl::Pud)] {
            let Some(t) = s.tables[i].as_mut() else { continue };
            if t.moved_log.is_empty() {
                continue;
            }
            let moved = std::mem::take(&mut t.moved_log);
            let mut keys = Vec::new();
            for id in moved {
                let line = t.line(id);
                if line.loc.way == u8::MAX {
                    continue;
                }
                for j in 0..8u64 {
                    if line.data[j as usize] & PRESENT != 0 {
                        keys.push(line.tag * 8 + j);
                    }
                }
            }
            keys.sort_unstable();
            keys.dedup();
            for k in keys {
                self.sync_header(s, l, k, true, true, env)?;
            }
        }
        Ok(())
    }

    /// Moves the report's view of `s` up to date and collects the tables' event counters.
    fn refresh(&mut self, s: &mut EcptSpace) {
        let mut sum = Summary::default();
        for (i, t) in s.tables.iter_mut().enumerate() {
            let Some(t) = t else { continue };
            let st = std::mem::take(&mut t.stats);
            self.c.kicks[i] += st.kicks;
            self.c.resizes[i] += st.resizes;
            self.c.moved[i] += st.moved;
            self.c.failures[i] += st.failures;
            self.c.noncontiguous += st.noncontiguous;
            sum.ways[i] = t.ways().iter().map(|w| (w.cur.len(), w.cur.used() + w.old.as_ref().map_or(0, |o| o.used()))).collect();
            sum.table_bytes += t.bytes();
        }
        for c in [s.pmd_cwt.as_mut(), s.pud_cwt.as_mut()].into_iter().flatten() {
            let st = std::mem::take(&mut c.stats);
            self.c.cwt_kicks += st.kicks;
            self.c.cwt_resizes += st.resizes;
            self.c.noncontiguous += st.noncontiguous;
            sum.cwt_bytes += c.bytes();
        }
        self.summary.insert(s.asid, sum);
    }

    /// Pushes the probes of walk table `l` for section `key` at `step`; returns the header found
    /// (0 if no line). `wait`: the walk needs the answer (mark the ref holding the line needed,
    /// or all of them if none does).
    fn push_cwt(s: &EcptSpace, l: Lvl, key: u64, step: u8, wait: bool, plan: &mut WalkPlan) -> u8 {
        let Some(c) = s.cwt(l) else { return 0 };
        let tag = key >> 6;
        let start = plan.refs.len();
        let mut found = None;
        for w in c.ways() {
            for (a, _) in w.arrays() {
                let slot = a.slot(tag);
                let id = a.slots[slot];
                if id != EMPTY && c.line(id).tag == tag {
                    found = Some((plan.refs.len(), c.line(id).data[(key & 63) as usize]));
                }
                plan.push(a.paddr(slot), step, false);
            }
        }
        if wait {
            match found {
                Some((k, _)) => plan.refs[k].needed = true,
                None => plan.refs[start..].iter_mut().for_each(|r| r.needed = true),
            }
        }
        found.map_or(0, |(_, h)| h)
    }

    /// The customized range iterator: CWT headers skip empty sections, and one probe per cluster
    /// serves its 8 entries.
    fn opt_for_each(&mut self, s: &mut EcptSpace, start: u64, end: u64, env: &mut TdbEnv, f: &mut dyn FnMut(&TObj)) {
        if start >= end || s.pud_cwt.is_none() {
            return;
        }
        let (g_lo, g_hi) = (start >> 30, (end - 1) >> 30);
        for tag in (g_lo >> 6)..=(g_hi >> 6) {
            Self::read_header(s, Lvl::Pud, tag << 6, env.cost);
        }
        let gbs: Vec<(u64, PudInfo)> = s.pud.range(g_lo..=g_hi).map(|(k, v)| (*k, *v)).collect();
        for (g, pi) in gbs {
            env.cost.read(1);
            if pi.g1 {
                let va = g << 30;
                if va >= start {
                    if let Some(o) = cluster_entry(s, 2, g, env.cost) {
                        f(&o);
                    }
                }
                continue;
            }
            let lo = start.max(g << 30) >> 21;
            let hi = (end.min((g + 1) << 30) - 1) >> 21;
            for tag in (lo >> 6)..=(hi >> 6) {
                Self::read_header(s, Lvl::Pmd, tag << 6, env.cost);
            }
            let secs: Vec<(u64, PmdInfo)> = s.pmd.range(lo..=hi).map(|(k, v)| (*k, *v)).collect();
            let mut cached: Option<(u64, Option<Cluster>)> = None;
            for (sec, mi) in secs {
                env.cost.read(1);
                if mi.m2 {
                    let va = sec << 21;
                    if va >= start {
                        // One probe serves the 8 sections of a 2 MiB cluster.
                        let t = s.tables[1].as_ref().expect("2M table");
                        if cached.map(|c| c.0) != Some(sec >> 3) {
                            cached = Some((sec >> 3, t.find(sec >> 3, env.cost).map(|id| t.line(id).data)));
                        }
                        if let Some((_, Some(d))) = cached {
                            let e = d[(sec & 7) as usize];
                            if e & PRESENT != 0 {
                                env.cost.read(1);
                                f(&decode(e, va, PageSize::M2));
                            }
                        }
                    }
                }
                if mi.k4 > 0 {
                    let v_lo = start.max(sec << 21) >> 12;
                    let v_hi = (end.min((sec + 1) << 21) - 1) >> 12;
                    let t = s.tables[0].as_ref().expect("4K table");
                    for ctag in (v_lo >> 3)..=(v_hi >> 3) {
                        let Some(id) = t.find(ctag, env.cost) else { continue };
                        let d = t.line(id).data;
                        for j in 0..8u64 {
                            let vpn = ctag * 8 + j;
                            if vpn < v_lo || vpn > v_hi || d[j as usize] & PRESENT == 0 {
                                continue;
                            }
                            env.cost.read(1);
                            let va = vpn << 12;
                            if va >= start {
                                f(&decode(d[j as usize], va, PageSize::K4));
                            }
                        }
                    }
                }
            }
        }
    }

    /// The customized emptiness check: headers answer for whole sections; clusters for partly
    /// covered 4 KiB sections.
    fn opt_range_is_empty(&mut self, s: &mut EcptSpace, start: u64, end: u64, env: &mut TdbEnv) -> bool {
        if start >= end || s.pud_cwt.is_none() {
            return true;
        }
        let (g_lo, g_hi) = (start >> 30, (end - 1) >> 30);
        for tag in (g_lo >> 6)..=(g_hi >> 6) {
            Self::read_header(s, Lvl::Pud, tag << 6, env.cost);
        }
        let gbs: Vec<(u64, PudInfo)> = s.pud.range(g_lo..=g_hi).map(|(k, v)| (*k, *v)).collect();
        for (g, pi) in gbs {
            env.cost.read(1);
            let (gs, ge) = (g << 30, (g + 1) << 30);
            if pi.g1 || (start <= gs && ge <= end) {
                return false;
            }
            let lo = start.max(gs) >> 21;
            let hi = (end.min(ge) - 1) >> 21;
            for tag in (lo >> 6)..=(hi >> 6) {
                Self::read_header(s, Lvl::Pmd, tag << 6, env.cost);
            }
            let secs: Vec<(u64, PmdInfo)> = s.pmd.range(lo..=hi).map(|(k, v)| (*k, *v)).collect();
            for (sec, mi) in secs {
                env.cost.read(1);
                let (ss, se) = (sec << 21, (sec + 1) << 21);
                if mi.m2 || (mi.k4 > 0 && start <= ss && se <= end) {
                    return false;
                }
                if mi.k4 > 0 {
                    let v_lo = start.max(ss) >> 12;
                    let v_hi = (end.min(se) - 1) >> 12;
                    let t = s.tables[0].as_ref().expect("4K table");
                    for ctag in (v_lo >> 3)..=(v_hi >> 3) {
                        let Some(id) = t.find(ctag, env.cost) else { continue };
                        let d = t.line(id).data;
                        for j in 0..8u64 {
                            let vpn = ctag * 8 + j;
                            if vpn >= v_lo && vpn <= v_hi && d[j as usize] & PRESENT != 0 {
                                env.cost.read(1);
                                return false;
                            }
                        }
                    }
                }
            }
        }
        true
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
                "Utopia's ECH: 4 ways x 8192, scale 10, 2x16-entry CWCs of 2 cycles; 4 KiB pages (Utopia ran it with THP: --set os.thp=always)",
            driver: "ecpt",
            arch: |a| a.ecpt = EcptConfig::ech_utopia(),
            settings: &["os.thp=never"],
            nested: None,
        },
        Design {
            name: "ecph-virtuoso",
            description: "Virtuoso's ECH preset: 2 ways x 262144, rehash at 0.7 x2, 64-entry CWC; 4 KiB pages",
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

impl Driver for Ecpt {
    type Config = EcptConfig;
    type WalkCache = EcptCwc;

    fn from_config(cfg: &EcptConfig, seed: u64) -> Result<Self> {
        Ok(Ecpt::new(cfg, seed))
    }

    fn new_walk_cache(&self) -> EcptCwc {
        EcptCwc { pmd: WalkCache::new(&self.cfg.pmd_cwc), pud: WalkCache::new(&self.cfg.pud_cwc) }
    }

    #[inline]
    fn walk(&mut self, s: &mut EcptSpace, wc: &mut EcptCwc, asid: u16, va: u64, plan: &mut WalkPlan) -> Option<Translation> {
        plan.fixed_cycles += self.fixed_cycles;
        self.c.walks += 1;
        let all = (1u8 << self.cfg.ways) - 1;
        let mut masks = [0u8; 3];
        let mut step = 0u8;
        for (i, t) in s.tables.iter().enumerate() {
            if let Some(t) = t {
                plan.unfiltered += t.arrays();
                masks[i] = all;
            }
        }
        if self.cfg.cwt {
            let (sec, gb) = (va >> 21, va >> 30);
            let mut h2 = wc.pmd.lookup(asid, sec).map(|v| v as u8);
            let mut h1 = wc.pud.lookup(asid, gb).map(|v| v as u8);
            for (hit, (hits, misses)) in [
                (h2.is_some(), (&mut self.c.pmd_hits, &mut self.c.pmd_misses)),
                (h1.is_some(), (&mut self.c.pud_hits, &mut self.c.pud_misses)),
            ] {
                if hit {
                    *hits += 1;
                    plan.wc_hits += 1;
                } else {
                    *misses += 1;
                    plan.wc_misses += 1;
                }
            }
            if plan.checked
                && (h2.is_some_and(|h| h != s.stored_header(Lvl::Pmd, sec)) || h1.is_some_and(|h| h != s.stored_header(Lvl::Pud, gb)))
            {
                plan.violation = Some("stale cuckoo walk cache entry (a CWT header changed without invalidation)");
            }
            // A PUD header alone suffices when it names a 1 GiB page or a single smaller size.
            let pud_enough = |h: u8| h & H_1G != 0 || (h & H_4K != 0) != (h & H_2M != 0);
            if h2.is_none() && !h1.is_some_and(pud_enough) {
                let before = plan.refs.len();
                if h2.is_none() {
                    let h = Self::push_cwt(s, Lvl::Pmd, sec, step, true, plan);
                    if h != 0 {
                        wc.pmd.insert(asid, sec, h as u64);
                    }
                    h2 = Some(h);
                }
                if h1.is_none() {
                    // Needed only when a 1 GiB table exists and the PMD header may be empty.
                    let h = Self::push_cwt(s, Lvl::Pud, gb, step, s.tables[2].is_some() && h2 == Some(0), plan);
                    if h != 0 {
                        wc.pud.insert(asid, gb, h as u64);
                    }
                    h1 = Some(h);
                }
                if plan.refs.len() > before {
                    self.c.cwt_fetches += 1;
                    self.c.cwt_refs += (plan.refs.len() - before) as u64;
                    step += 1;
                }
            }
            let mut m = [0u8; 3];
            match (h2, h1) {
                (Some(h), _) if h != 0 => {
                    if h & H_4K != 0 {
                        m[0] = all;
                    }
                    if h & H_2M != 0 {
                        m[1] = 1 << header_way(h);
                    }
                }
                (_, Some(h)) if h & H_1G != 0 => m[2] = 1 << header_way(h),
                (None, Some(h)) => {
                    if h & H_4K != 0 {
                        m[0] = all;
                    }
                    if h & H_2M != 0 {
                        m[1] = all;
                    }
                }
                _ => {}
            }
            for i in 0..3 {
                masks[i] &= m[i];
            }
        }
        // One step of parallel probes.
        let start = plan.refs.len();
        let mut found = None;
        for (i, t) in s.tables.iter().enumerate() {
            let Some(t) = t else { continue };
            if masks[i] == 0 {
                continue;
            }
            let size = SIZES[i];
            let vpn = va >> size.shift();
            let (tag, j) = (vpn >> 3, (vpn & 7) as usize);
            for (w, way) in t.ways().iter().enumerate() {
                if masks[i] & (1 << w) == 0 {
                    continue;
                }
                for (a, _) in way.arrays() {
                    let slot = a.slot(tag);
                    let id = a.slots[slot];
                    if id != EMPTY {
                        let l = t.line(id);
                        if l.tag == tag && l.data[j] & PRESENT != 0 {
                            found = Some((plan.refs.len(), Translation { pbase: l.data[j] & ADDR_MASK & !size.offset_mask(), size }));
                        }
                    }
                    plan.push(a.paddr(slot), step, false);
                }
            }
        }
        let n = (plan.refs.len() - start) as u64;
        self.c.probes += n;
        match found {
            Some((k, tr)) => {
                plan.refs[k].needed = true;
                self.c.probes_needed += 1;
                Some(tr)
            }
            None => {
                plan.refs[start..].iter_mut().for_each(|r| r.needed = true);
                self.c.probes_needed += n;
                if plan.checked && plan.violation.is_none() && s.locate(va).is_some() {
                    plan.violation = Some("ECPT walk missed a mapped translation (walk-table header out of date)");
                }
                None
            }
        }
    }

    fn invalidate_walk_cache(&self, wc: &mut EcptCwc, asid: u16, start: u64, end: u64) {
        let last = end.saturating_sub(1).max(start);
        wc.pmd.invalidate(asid, start >> 21, last >> 21);
        wc.pud.invalidate(asid, start >> 30, last >> 30);
    }

    fn leaf_sizes(&self) -> &[PageSize] {
        &self.sizes
    }

    fn metrics(&self) -> Map<String, Value> {
        let c = &self.c;
        let per = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let mut m = Map::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        put("walks", json!(c.walks));
        put("probes_issued", json!(c.probes));
        put("probes_needed", json!(c.probes_needed));
        put("probes_per_walk", json!(per(c.probes, c.walks)));
        put("needed_probes_per_walk", json!(per(c.probes_needed, c.walks)));
        put("cwt_fetches", json!(c.cwt_fetches));
        put("cwt_fetch_rate", json!(per(c.cwt_fetches, c.walks)));
        put("cwt_refs", json!(c.cwt_refs));
        put("pmd_cwc_hit_rate", json!(per(c.pmd_hits, c.pmd_hits + c.pmd_misses)));
        put("pud_cwc_hit_rate", json!(per(c.pud_hits, c.pud_hits + c.pud_misses)));
        put("cwc_hit_rate", json!(per(c.pmd_hits + c.pud_hits, c.pmd_hits + c.pmd_misses + c.pud_hits + c.pud_misses)));
        put("kicks", json!(c.kicks.iter().sum::<u64>()));
        put("resizes", json!(c.resizes.iter().sum::<u64>()));
        put("entries_moved", json!(c.moved.iter().sum::<u64>()));
        put("insert_failures", json!(c.failures.iter().sum::<u64>()));
        put("cwt_kicks", json!(c.cwt_kicks));
        put("cwt_resizes", json!(c.cwt_resizes));
        put("walk_cache_invalidations", json!(c.invalidations));
        put("noncontiguous_ways", json!(c.noncontiguous));
        for (i, size) in SIZES.iter().enumerate() {
            let label = size.label().to_lowercase();
            put(&format!("kicks_{label}"), json!(c.kicks[i]));
            put(&format!("resizes_{label}"), json!(c.resizes[i]));
            let ways = self.summary.values().map(|s| s.ways[i].len()).max().unwrap_or(0);
            for w in 0..ways {
                let (n, used) = self.summary.values().filter_map(|s| s.ways[i].get(w)).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
                put(&format!("slots_{label}_way{w}"), json!(n));
                put(&format!("occupancy_{label}_way{w}"), json!(per(used, n)));
            }
        }
        put("table_bytes", json!(self.summary.values().map(|s| s.table_bytes + s.cwt_bytes).sum::<u64>()));
        put("cwt_bytes", json!(self.summary.values().map(|s| s.cwt_bytes).sum::<u64>()));
        put("optimized_api", json!(self.cfg.optimized_api));
        m
    }
}
