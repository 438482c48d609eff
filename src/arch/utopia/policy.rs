//! Utopia's OS policies: placement into the RestSegs and PTW-tracking migration.

use super::*;

/// Placement into the RestSegs at faults, promotions and migrations (§5.2).
impl FramePlacement<Utopia> for Utopia {
    fn boot(&mut self, phys: &mut dyn Frames) -> Result<()> {
        // Fixed-size RestSegs must leave the FlexSeg, the page tables and the kernel room to run;
        // otherwise the first fault fails deep in the allocator with a message about a table page.
        let fixed: u64 = self.cfg.restsegs.iter().map(|r| r.size).sum();
        let free = phys.free_pages() * 4096;
        if fixed > 0 && fixed.saturating_add(self.cfg.kernel_reserve) > free {
            let fmt = crate::addr::fmt_bytes;
            return Err(Error::config(
                "os.memory",
                format!(
                    "too small for the RestSegs: arch.utopia.restsegs reserve {} of the {} free at boot, and at least {} \
                     (arch.utopia.kernel_reserve) must stay for page tables and the FlexSeg; raise os.memory or shrink the RestSegs",
                    fmt(fixed),
                    fmt(free),
                    fmt(self.cfg.kernel_reserve)
                ),
            ));
        }
        for (i, r) in self.cfg.restsegs.clone().iter().enumerate() {
            let unit = r.page.bytes() * r.ways as u64;
            let size = if r.size == 0 {
                let free = phys.free_pages() * 4096;
                (free.saturating_sub(self.cfg.kernel_reserve) / unit) * unit
            } else {
                r.size
            };
            let key = format!("arch.utopia.restsegs[{i}].size");
            if size == 0 {
                return Err(Error::config(key, "no memory left for this RestSeg"));
            }
            let sets = size / unit;
            if r.hash == SetHash::Xor && !sets.is_power_of_two() {
                return Err(Error::config(
                    format!("arch.utopia.restsegs[{i}].hash"),
                    format!("xor needs a power-of-two number of sets, found {sets}"),
                ));
            }
            let pfn = phys.reserve_contiguous(size / 4096, r.page.order()).ok_or_else(|| {
                Error::config(key, format!("cannot reserve {} of contiguous memory at boot", crate::addr::fmt_bytes(size)))
            })?;
            let ways = r.ways as u64;
            let entry = tar_entry_bits(r.page.bytes(), sets, self.va_bits) as u64;
            let sf_counter_bits = ceil_log2(ways) as u64 + 1;
            let tag_div = r.hash.divisor(sets);
            self.segs.push(RestSeg {
                base: pfn.addr(),
                size,
                page: r.page,
                shift: r.page.shift(),
                sets,
                ways: r.ways as usize,
                hash: r.hash,
                tag_div,
                tag_shift: Some(tag_div).filter(|d| d.is_power_of_two()).map(u64::trailing_zeros),
                global: SetAssoc::new(sets as usize, r.ways as usize, Replacement::Srrip),
                reuse: vec![0; (sets * ways) as usize],
                set_bits: entry * ways,
                sf_counter_bits,
                tar_bytes: tar_bits(size, r.page.bytes(), ways, self.va_bits).div_ceil(8),
                sf_bytes: sf_bits(size, r.page.bytes(), ways).div_ceil(8),
                stats: SegStats::default(),
            });
        }
        Ok(())
    }

    fn place(&mut self, s: &mut UtopiaSpace, asid: u16, va: u64, size: PageSize, flags: MapFlags, env: &mut TdbEnv) -> Placement {
        self.place_page(s, MigrationRequest { asid, va, size }, flags, false, env)
    }

    /// A PTW-tracking migration evicts from a full RestSeg set even where faults do not
    /// (`fault_alloc` off or `free`): the page earned its RestSeg place (§5.3).
    fn place_migrating(&mut self, s: &mut UtopiaSpace, r: MigrationRequest, flags: MapFlags, env: &mut TdbEnv) -> Placement {
        self.place_page(s, r, flags, true, env)
    }

    /// The victim `place` would choose for a page moving into a RestSeg: none if the page is
    /// there already or a set of its size has a free way, else the first such RestSeg's SRRIP
    /// victim as it stands ([`SetAssoc::peek_way`]).
    fn victim_hint(&self, s: &UtopiaSpace, va: u64, size: PageSize) -> Option<(u16, u64)> {
        let mut first = None;
        for (i, g) in self.segs.iter().enumerate().filter(|(_, g)| g.page == size) {
            let set = g.set_of(va >> g.shift);
            if self.slot_of(s, i, va >> g.shift).is_some() || g.free_way(set).is_some() {
                return None;
            }
            first.get_or_insert((g, set));
        }
        let (g, set) = first?;
        g.page_at(set, g.global.peek_way(set))
    }

    fn prefetch_placement(&self, s: &UtopiaSpace, va: u64, size: PageSize) {
        for (g, ss) in self.segs.iter().zip(&s.segs).filter(|(g, _)| g.page == size) {
            let set = g.set_of(va >> g.shift);
            ss.tar.prefetch(set * g.ways);
            g.global.prefetch(set);
        }
    }

    fn owns_frame(&self, pa: u64) -> bool {
        self.segs.iter().any(|g| g.contains(pa))
    }

    /// A RestSeg page moves to the FlexSeg before fork shares it (without a FlexSeg it cannot be
    /// shared: `update` refuses the child's mapping).
    fn moves_out_to_share(&self, pa: u64) -> bool {
        self.cfg.flexseg && self.owns_frame(pa)
    }
}

impl Utopia {
    /// [`FramePlacement::place`] of the page `r`, or [`FramePlacement::place_migrating`] if
    /// `migrating`.
    fn place_page(&mut self, s: &mut UtopiaSpace, r: MigrationRequest, flags: MapFlags, migrating: bool, env: &mut TdbEnv) -> Placement {
        let (va, size) = (r.va, r.size);
        // Already in a RestSeg (a stale migration request): it stays where it is.
        for (i, g) in self.segs.iter().enumerate() {
            if g.page == size {
                if let Some(slot) = self.slot_of(s, i, va >> g.shift) {
                    return Placement::Frame { pa: g.slot_pa(slot), evict: None };
                }
            }
        }
        if flags.shared && self.cfg.flexseg {
            self.shared_to_flexseg += 1;
            return Placement::Buddy; // shared pages always live in the FlexSeg
        }
        let policy = if !self.cfg.flexseg || migrating { FaultAlloc::Evict } else { self.cfg.fault_alloc };
        if policy == FaultAlloc::Off {
            return Placement::Buddy;
        }
        // A free way in any RestSeg of this size (the global TAR's set), else the first one's victim.
        let mut first = None;
        for i in 0..self.segs.len() {
            let g = &mut self.segs[i];
            if g.page != size {
                continue;
            }
            let vpn = va >> g.shift;
            let set = g.set_of(vpn);
            env.cost.hash(1);
            env.cost.read(g.ways as u64);
            if let Some(way) = g.free_way(set) {
                if migrating {
                    g.stats.migration_placements += 1;
                } else {
                    g.stats.fault_allocs += 1;
                }
                return Placement::Frame { pa: g.slot_pa(set * g.ways + way), evict: None };
            }
            first.get_or_insert((i, set));
        }
        let Some((i, set)) = first else { return Placement::Buddy };
        if policy == FaultAlloc::Free {
            return Placement::Buddy;
        }
        let g = &mut self.segs[i];
        let way = g.global.choose_way(set);
        let (victim_asid, victim_va) = g.page_at(set, way).expect("a full set");
        let victim =
            Evict { asid: victim_asid, va: victim_va, size: g.page, to: if self.cfg.flexseg { EvictTo::Buddy } else { EvictTo::Swap } };
        g.stats.evictions += 1;
        if migrating {
            g.stats.migration_placements += 1;
        } else {
            g.stats.fault_allocs += 1;
        }
        Placement::Frame { pa: g.slot_pa(set * g.ways + way), evict: Some(victim) }
    }
}

/// Where a FlexSeg PTE keeps the page's PTW counters (§5.5: its unused bits): walks in bits
/// 52–55, DRAM references of those walks in 56–60, saturating at 15 and 31
/// (`UtopiaConfig::validate`). A new PTE starts at zero; an update of the page keeps them.
const PTW_SHIFT: u32 = 52;
pub(super) const PTW_BITS: u64 = 0x1FF << PTW_SHIFT;

/// A FlexSeg PTE's PTW counters: (walks, DRAM references).
pub(super) fn ptw_count(pte: u64) -> (u32, u32) {
    let v = (pte & PTW_BITS) >> PTW_SHIFT;
    ((v & 0xF) as u32, (v >> 4) as u32)
}

/// PTW-tracking migration from the FlexSeg into a RestSeg (§5.3).
impl MigrationPolicy<Utopia> for Utopia {
    fn walk_observed(&mut self, s: &mut UtopiaSpace, asid: u16, va: u64, t: Option<Translation>, dram_refs: u32) {
        let m = &self.cfg.migrate;
        let Some(t) = t else { return };
        if !m.enabled || !self.segs.iter().any(|g| g.page == t.size) {
            return;
        }
        let base = t.size.align_down(va);
        // The leaf the walk just read (in the host's cache); a translation the walk found has one.
        let Some(pte) = self.radix.leaf_entry_mut(&mut s.radix, va) else { return };
        let (walks, dram) = ptw_count(*pte);
        let (walks, dram) = ((walks + 1).min(15), (dram + dram_refs).min(31));
        // Over both thresholds: the page is queued and its counters start again.
        let over = walks >= m.min_walks && dram >= m.min_dram_refs;
        let counts = if over { 0 } else { u64::from(walks) | u64::from(dram) << 4 };
        *pte = *pte & !PTW_BITS | counts << PTW_SHIFT;
        if over {
            let key = page_key(asid, base);
            if self.queued.insert(key, ()).is_none() {
                self.pending.push(MigrationRequest { asid, va: base, size: t.size });
                self.migration_requests += 1;
            }
        }
    }

    fn take_migrations(&mut self) -> Vec<MigrationRequest> {
        self.queued.clear();
        std::mem::take(&mut self.pending)
    }
}
