//! The ECPT hardware walk: CWC/CWT probes, then the cuckoo ways of each page size in parallel.

use super::*;

impl Driver for Ecpt {
    type Config = EcptConfig;
    type WalkCache = EcptCwc;

    fn from_config(cfg: &EcptConfig, seed: u64) -> Result<Self> {
        Ok(Ecpt::new(cfg, seed))
    }

    fn new_walk_cache(&self) -> EcptCwc {
        EcptCwc {
            pmd: WalkCache::new(&self.cfg.pmd_cwc),
            pud: WalkCache::new(&self.cfg.pud_cwc),
            pmd_lines: vec![[0; 64]; self.cfg.pmd_cwc.entries as usize],
            pud_lines: vec![[0; 64]; self.cfg.pud_cwc.entries as usize],
        }
    }

    #[inline]
    fn walk(&mut self, s: &mut EcptSpace, wc: &mut EcptCwc, asid: u16, va: u64, plan: &mut WalkPlan) -> Option<Translation> {
        plan.fixed_cycles += self.fixed_cycles;
        self.c.walks += 1;
        let all = (1u8 << self.cfg.ways) - 1;
        // Ways of the tables that exist, per size slot (`pack`'s lanes).
        let mut exist = 0u32;
        for (i, t) in s.tables.iter().enumerate() {
            if let Some(t) = t {
                plan.unfiltered += t.arrays();
                exist |= u32::from(all) << (8 * i);
            }
        }
        let (sec, gb) = (va >> 21, va >> 30);
        let mut step = 0u8;
        // What the walk knows before probing: the PMD and PUD headers (None: unknown).
        let (mut h2, mut h1) = (None, None);
        // Levels whose header came from a cached line, which may be stale.
        let mut cached = [false; 2];
        // Levels whose line to fetch in the background, with the table probes.
        let mut refill = [false; 2];
        let mut cwt_refs = 0;
        if self.cfg.cwt {
            if self.cfg.perfect_cwc {
                h2 = Some(s.stored_header(Lvl::Pmd, sec));
                h1 = Some(s.stored_header(Lvl::Pud, gb));
                (self.c.pmd_hits, self.c.pud_hits) = (self.c.pmd_hits + 1, self.c.pud_hits + 1);
                plan.wc_hits += 2;
            } else {
                h2 = wc.header(Lvl::Pmd, asid, sec);
                h1 = wc.header(Lvl::Pud, asid, gb);
                cached = [h2.is_some(), h1.is_some()];
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
                // A PUD header alone suffices when it names a 1 GiB page or 4 KiB pages only.
                let pud_enough = |h: u8| h & H_1G != 0 || h & (H_4K | H_2M) == H_4K;
                if self.cfg.wait_for_cwt && h2.is_none() && !h1.is_some_and(pud_enough) {
                    // Fetch the missing lines first and wait for the PMD one (the PUD one only
                    // when a 1 GiB table exists and the PMD header may be empty).
                    let before = plan.refs.len();
                    let line = Self::push_cwt(s, Lvl::Pmd, sec, step, true, plan);
                    wc.fill(Lvl::Pmd, asid, sec, line);
                    h2 = Some(line.map_or(0, |d| d[(sec & 63) as usize]));
                    if h1.is_none() {
                        let wait = s.tables[2].is_some() && h2 == Some(0);
                        let line = Self::push_cwt(s, Lvl::Pud, gb, step, wait, plan);
                        wc.fill(Lvl::Pud, asid, gb, line);
                        h1 = Some(line.map_or(0, |d| d[(gb & 63) as usize]));
                    }
                    cwt_refs += plan.refs.len() - before;
                    step += 1;
                } else {
                    refill = [h2.is_none(), h1.is_none()];
                }
            }
        }
        // Step 1 of the probes: what the headers allow, or everything.
        let first = match self.narrow(h2, h1) {
            Some(m) if !self.cfg.correct_way_only => pack(m) & exist,
            _ => exist,
        };
        let start = plan.refs.len();
        let mut found = Self::probe(s, va, first, step, plan);
        if self.cfg.correct_way_only {
            // The oracle: of a walk that finds its translation, only the probe holding it.
            if let Some((k, _, _)) = found.as_mut() {
                let r = plan.refs[*k];
                plan.refs.truncate(start);
                plan.refs.push(r);
                *k = start;
            }
        }
        let end = plan.refs.len();
        cwt_refs += Self::refetch_cwt_lines(s, wc, asid, refill, [sec, gb], step, plan);
        let rest = exist & !first;
        let mut fallback = None;
        if found.is_none() && rest != 0 {
            // The walk learns that the probes missed only when they all return: it waited for
            // them. Then the ways not yet probed, and the cached lines again (they were stale,
            // or the page is not mapped).
            self.c.fallbacks += 1;
            plan.refs[start..end].iter_mut().for_each(|r| r.needed = true);
            step += 1;
            let s2 = plan.refs.len();
            found = Self::probe(s, va, rest, step, plan);
            fallback = Some((s2, plan.refs.len()));
            cwt_refs += Self::refetch_cwt_lines(s, wc, asid, cached, [sec, gb], step, plan);
        }
        if cwt_refs > 0 {
            self.c.cwt_fetches += 1;
            self.c.cwt_refs += cwt_refs as u64;
        }
        let probes = (end - start) + fallback.map_or(0, |(a, b)| b - a);
        self.c.probes += probes as u64;
        match found {
            Some((k, tr, (i, id, j))) => {
                // The walker sets the accessed bit of the PTE it used (x86 format, as radix's walk).
                if let Some(t) = s.tables[i].as_mut() {
                    t.line_mut(id).data[j] |= ACCESSED;
                }
                plan.refs[k].needed = true;
                self.c.probes_needed += 1 + fallback.map_or(0, |_| (end - start) as u64);
                if fallback.is_some() {
                    self.c.stale_fallbacks += 1;
                }
                if plan.checked && plan.violation.is_none() && s.locate(va).map(|o| (o.pa, o.size)) != Some((tr.pbase, tr.size)) {
                    plan.violation = Some("ECPT walk returned a translation the OS does not have");
                }
                Some(tr)
            }
            None => {
                for (a, b) in [(start, end), fallback.unwrap_or((0, 0))] {
                    plan.refs[a..b].iter_mut().for_each(|r| r.needed = true);
                }
                self.c.probes_needed += probes as u64;
                if plan.checked && plan.violation.is_none() && s.locate(va).is_some() {
                    plan.violation = Some("ECPT walk missed a mapped translation");
                }
                None
            }
        }
    }

    fn invalidate_walk_cache(&self, wc: &mut EcptCwc, asid: u16, start: u64, end: u64) {
        // Entries are CWT lines of 64 sections.
        let last = end.saturating_sub(1).max(start);
        for l in [Lvl::Pmd, Lvl::Pud] {
            let sh = l.shift() + 6;
            wc.level(l).0.invalidate(asid, start >> sh, last >> sh);
        }
    }

    fn leaf_sizes(&self) -> &[PageSize] {
        &self.sizes
    }

    /// Prefetches the slot of every way the walk may probe: on a random workload each is a
    /// random read of a large array (the 4 KiB ways of a 4 GiB table hold 128 Ki slots each).
    /// The line a slot names cannot be prefetched without waiting for the slot. Returns the
    /// simulated address of the first way's slot, whose cache sets the caller prefetches.
    #[inline]
    fn prefetch(&self, s: &EcptSpace, va: u64) -> Option<u64> {
        let mut first = None;
        for (i, t) in s.tables.iter().enumerate() {
            let Some(t) = t else { continue };
            let tag = (va >> SIZES[i].shift()) >> 3;
            for way in t.ways() {
                way.each_array(|a| {
                    let slot = a.slot(tag);
                    a.prefetch(slot);
                    first.get_or_insert_with(|| a.paddr(slot));
                });
            }
        }
        first
    }

    const PREFETCHES_LATE: bool = true;

    /// The lines the walk will read: those named by the slots `prefetch` brought in earlier and
    /// keeping the tag's low bits (the walk reads each such line's tag and one of its entries; on
    /// a random workload the line is what it waits for). A host `Line` is 88 bytes, so its tag
    /// and the entry may sit in different host cache lines: both are prefetched (the line's
    /// start alone left the entry's host line to miss: perf put 56 % of `probe`'s time on that
    /// load).
    #[inline]
    fn prefetch_late(&self, s: &EcptSpace, va: u64) {
        Ecpt::candidate_lines(s, va, |l, j| {
            crate::mem::host_prefetch(&l.tag);
            crate::mem::host_prefetch(&l.data[j]);
        });
    }

    fn restart_metrics(&mut self) {
        self.c = Counters::default();
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
        put("fallbacks", json!(c.fallbacks));
        put("fallback_rate", json!(per(c.fallbacks, c.walks)));
        put("stale_cwc_fallbacks", json!(c.stale_fallbacks));
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

/// Way masks per size slot in one word, a byte lane each (slot `i` in bits `8i..8i + 8`): the
/// walk's mask arithmetic is then one operation in a register. As `[u8; 3]` it went through the
/// stack, and a wide load of three byte stores stalled on store forwarding (perf: 7 % of the
/// nested ECPT walk's time on that one load).
#[inline(always)]
fn pack(m: [u8; 3]) -> u32 {
    u32::from(m[0]) | u32::from(m[1]) << 8 | u32::from(m[2]) << 16
}

impl Ecpt {
    /// The (size slot → way mask) the headers allow; `None`: they say nothing (probe everything).
    /// Order of QEMU's walker and EMT's simulator: a PUD header naming a 1 GiB page or 4 KiB pages
    /// only decides; then a PMD header; then a PUD header's sizes.
    #[inline]
    fn narrow(&self, h2: Option<u8>, h1: Option<u8>) -> Option<[u8; 3]> {
        let all = (1u8 << self.cfg.ways) - 1;
        let way = |h: u8| if self.cfg.cwc_way { 1 << header_way(h) } else { all };
        let sizes = |h: u8, own: u8| [if h & H_4K != 0 { all } else { 0 }, if h & H_2M != 0 { own } else { 0 }, 0];
        if let Some(h) = h1 {
            if h & H_1G != 0 {
                return Some([0, 0, way(h)]);
            }
            if h & (H_4K | H_2M) == H_4K {
                return Some([all, 0, 0]);
            }
        }
        match (h2, h1) {
            (Some(h), _) => Some(sizes(h, way(h))),
            (None, Some(h)) => Some(sizes(h, all)),
            (None, None) => None,
        }
    }

    /// Calls `f` on each line a walk of `va` reads to compare its tag, with the index of the entry
    /// it then reads for `va`: per page size and way, the line its slot names if the slot keeps
    /// the tag's low bits.
    #[inline(always)]
    pub(super) fn candidate_lines(s: &EcptSpace, va: u64, mut f: impl FnMut(&cuckoo::Line<Cluster>, usize)) {
        for (i, t) in s.tables.iter().enumerate() {
            let Some(t) = t else { continue };
            let vpn = va >> SIZES[i].shift();
            let (tag, j) = (vpn >> 3, (vpn & 7) as usize);
            for way in t.ways() {
                way.each_array(|a| {
                    if let Some(id) = a.candidate(a.slot(tag), tag) {
                        f(t.line(id), j);
                    }
                });
            }
        }
    }

    /// Pushes one step of parallel probes of the (size, way) pairs in `masks` (`pack`'s lanes;
    /// both arrays of a way being resized); returns the probe that holds `va`'s translation: (its
    /// index in the plan, the translation, (size slot, line, entry)).
    #[inline]
    fn probe(s: &EcptSpace, va: u64, masks: u32, step: u8, plan: &mut WalkPlan) -> Option<(usize, Translation, (usize, u32, usize))> {
        let mut found = None;
        // The size slots whose lane has a way set, in ascending order, without visiting the
        // others (a walk of 4 KiB pages only probes one of the three).
        let mut lanes = masks;
        while lanes != 0 {
            let i = (lanes.trailing_zeros() / 8) as usize;
            let mut mask = (lanes >> (8 * i)) as u8;
            lanes &= !(0xFF << (8 * i));
            let Some(t) = s.tables.get(i).and_then(Option::as_ref) else { continue };
            let size = SIZES[i];
            let vpn = va >> size.shift();
            let (tag, j) = (vpn >> 3, (vpn & 7) as usize);
            let ways = t.ways();
            // The mask's set bits in ascending order (the ways' order), each way's current array
            // then its old one: the order the plan's references keep.
            while mask != 0 {
                let Some(way) = ways.get(mask.trailing_zeros() as usize) else { break };
                mask &= mask - 1;
                // Not `once(cur).chain(old)`: the chain's state cost more than the probe's own
                // arithmetic, and `old` is nearly always `None`.
                Self::probe_array(t, &way.cur, (i, tag, j), step, plan, &mut found);
                if let Some(old) = &way.old {
                    Self::probe_array(t, old, (i, tag, j), step, plan, &mut found);
                }
            }
        }
        found
    }

    /// One array of [`Ecpt::probe`]: pushes its slot's line and records the translation if the
    /// line holds `tag` with entry `j` present (size slot `i`).
    #[inline(always)]
    fn probe_array(
        t: &Cuckoo<Cluster>,
        a: &cuckoo::Arr,
        (i, tag, j): (usize, u64, usize),
        step: u8,
        plan: &mut WalkPlan,
        found: &mut Option<(usize, Translation, (usize, u32, usize))>,
    ) {
        let slot = a.slot(tag);
        if let Some(id) = a.candidate(slot, tag) {
            let l = t.line(id);
            if l.tag == tag && l.data[j] & PRESENT != 0 {
                let size = SIZES[i];
                let tr = Translation { pbase: l.data[j] & ADDR_MASK & !size.offset_mask(), size };
                *found = Some((plan.refs.len(), tr, (i, id, j)));
            }
        }
        plan.push(a.paddr(slot), step, false);
    }
}
