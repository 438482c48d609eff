//! The ECPT hardware walk: CWC/CWT probes, then the cuckoo ways of each page size in parallel.

use super::*;

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
                            let t = Translation { pbase: l.data[j] & ADDR_MASK & !size.offset_mask(), size };
                            found = Some((plan.refs.len(), t, (i, id, j)));
                        }
                    }
                    plan.push(a.paddr(slot), step, false);
                }
            }
        }
        let n = (plan.refs.len() - start) as u64;
        self.c.probes += n;
        match found {
            Some((k, tr, (i, id, j))) => {
                // The walker sets the accessed bit of the PTE it used (x86 format, as radix's walk).
                if let Some(t) = s.tables[i].as_mut() {
                    t.line_mut(id).data[j] |= ACCESSED;
                }
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
