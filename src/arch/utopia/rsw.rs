//! The RestSeg walk: Utopia's side lookup beside the L2 TLB.

use super::*;

/// The RestSeg walks (RSWs), all RestSegs in parallel (one step), beside the L2 TLB.
impl SideLookup<Utopia> for Utopia {
    fn side_lookup(&mut self, s: &mut UtopiaSpace, wc: &mut UtopiaWc, asid: u16, va: u64, plan: &mut WalkPlan) -> Option<Translation> {
        if self.segs.is_empty() {
            return None;
        }
        let Some(Some(info)) = self.spaces.get(s.asid as usize) else { return None };
        // The artifact's ULB first: a hit ends the lookup, no RSW.
        if let Some(ulb) = wc.ulb.as_mut() {
            self.ulb_lookups += 1;
            for (i, g) in self.segs.iter().enumerate() {
                if let Some(pbase) = ulb.lookup(asid, ulb_key(va >> g.shift, i)) {
                    self.ulb_hits += 1;
                    plan.fixed_cycles += ulb.latency;
                    return Some(Translation { pbase, size: g.page });
                }
            }
        }
        self.rsw += 1;
        plan.fixed_cycles += wc.latency;
        let mut found: Option<(Translation, usize, usize)> = None;
        for (i, g) in self.segs.iter_mut().enumerate() {
            let ss = &s.segs[i];
            let vpn = va >> g.shift;
            let set = g.set_of(vpn);
            let first_ref = plan.refs.len();
            g.stats.rsw += 1;
            // SF and TAR caches are probed in parallel.
            let sf_line = (info.sf_base[i] + g.sf_offset(set)) >> 6;
            g.stats.sf_lookups += 1;
            plan.unfiltered += 1;
            let sf_hit = wc.sf.lookup(0, sf_line).is_some();
            if sf_hit {
                g.stats.sf_hits += 1;
            } else {
                plan.push(sf_line << 6, 0, true);
                wc.sf.insert_absent(0, sf_line, 0);
            }
            let count = ss.sf[set];
            if count == 0 && sf_hit {
                g.stats.sf_filtered += 1;
                continue; // the SF says the set is empty: no tag matching
            }
            let (a, b) = g.tar_span(set);
            let (l0, l1) = ((info.tar_base[i] + a) >> 6, (info.tar_base[i] + b) >> 6);
            for line in l0..=l1 {
                g.stats.tar_lookups += 1;
                plan.unfiltered += 1;
                if wc.tar.lookup(0, line).is_some() {
                    g.stats.tar_hits += 1;
                } else {
                    // After an SF miss the TAR line is fetched alongside; the walk waits for it only
                    // if the set turns out not to be empty.
                    plan.push(line << 6, 0, count != 0);
                    wc.tar.insert_absent(0, line, 0);
                }
            }
            if count == 0 {
                continue;
            }
            if let Some(slot) = Self::tar_slot(g, ss, set, vpn) {
                g.global.touch(set, slot - set * g.ways);
                g.reuse[slot] = g.reuse[slot].saturating_add(1);
                g.stats.rsw_hits += 1;
                found = Some((Translation { pbase: g.slot_pa(slot), size: g.page }, first_ref, plan.refs.len()));
            }
        }
        let (t, lo, hi) = found?;
        // The hit ends the walk: other RestSegs' references are not waited for.
        for (k, r) in plan.refs.iter_mut().enumerate() {
            if k < lo || k >= hi {
                r.needed = false;
            }
        }
        self.rsw_hits += 1;
        if let Some(ulb) = wc.ulb.as_mut() {
            let i = self.segs.iter().position(|g| g.page == t.size && g.contains(t.pbase)).expect("an RSW hit lies in a RestSeg");
            ulb.insert_absent(asid, ulb_key(va >> self.segs[i].shift, i), t.pbase);
        }
        Some(t)
    }

    /// Fig. 17: RSWs start on every L1 TLB miss (`arch.utopia.rsw_start`); the FlexSeg walk
    /// overlaps them unless `arch.utopia.fsw_waits_for_rsw`; hits fill the TLBs unless
    /// `arch.utopia.rsw_fills_tlbs = false`.
    fn side_timing(&self) -> SideTiming {
        SideTiming {
            start: match self.cfg.rsw_start {
                RswStart::L2Miss => SideStart::L2Miss,
                RswStart::L1Miss => SideStart::L1Miss,
                RswStart::BeforeL1 => SideStart::BeforeL1,
            },
            gates_walk: self.cfg.fsw_waits_for_rsw,
            fills_tlbs: self.cfg.rsw_fills_tlbs,
        }
    }

    /// Whether a RestSeg holds `va`: its set's SF counter and TAR row, as an RSW reads them.
    fn holds(&self, s: &UtopiaSpace, _asid: u16, va: u64) -> bool {
        self.segs.iter().zip(&s.segs).any(|(g, ss)| {
            let vpn = va >> g.shift;
            let set = g.set_of(vpn);
            ss.sf[set] != 0 && Self::tar_slot(g, ss, set, vpn).is_some()
        })
    }
}
