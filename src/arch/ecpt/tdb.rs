//! ECPT's translation database: the basic functions over the cuckoo tables and CWTs, and the
//! customizable ones it overrides.

use super::*;

/// The translation of size slot `i` whose VPN is `vpn`, counting the cluster lookup.
pub(super) fn cluster_entry(s: &EcptSpace, i: usize, vpn: u64, cost: &mut OsCost) -> Option<TObj> {
    let t = s.tables[i].as_ref()?;
    let id = t.find(vpn >> 3, cost)?;
    let e = t.line(id).data[(vpn & 7) as usize];
    cost.read(1);
    (e & PRESENT != 0).then(|| decode(e, vpn << SIZES[i].shift(), SIZES[i]))
}

impl Tdb for Ecpt {
    type Space = EcptSpace;

    fn create_space(&mut self, asid: u16, _env: &mut TdbEnv) -> Result<EcptSpace> {
        // Tables and walk tables are allocated on demand (EMT: "we allocate ECPTs of a specific
        // size on demand").
        let s = EcptSpace { asid, tables: [None, None, None], pmd_cwt: None, pud_cwt: None, pmd: BTreeMap::new(), pud: BTreeMap::new() };
        self.summary.insert(asid, Summary::default());
        Ok(s)
    }

    fn destroy_space(&mut self, s: EcptSpace, env: &mut TdbEnv) -> Result<()> {
        self.summary.remove(&s.asid);
        for t in s.tables.into_iter().flatten() {
            t.release(env)?;
        }
        for c in [s.pmd_cwt, s.pud_cwt].into_iter().flatten() {
            c.release(env)?;
        }
        Ok(())
    }

    fn find(&mut self, s: &mut EcptSpace, va: u64, env: &mut TdbEnv) -> Option<TObj> {
        find_in(s, va, env.cost)
    }

    fn update(&mut self, s: &mut EcptSpace, o: &TObj, env: &mut TdbEnv) -> Result<()> {
        let i = size_slot(o.size)
            .filter(|_| self.sizes.contains(&o.size))
            .ok_or_else(|| Error::Check(format!("ECPT has no table for {} pages (arch.ecpt.sizes)", o.size)))?;
        if !o.size.is_aligned(o.va) || !o.size.is_aligned(o.pa) {
            return Err(Error::Check(format!("unaligned {} mapping va {:#x} pa {:#x}", o.size, o.va, o.pa)));
        }
        self.ensure_cwts(s, env)?;
        let (sec, gb) = (o.va >> 21, o.va >> 30);
        // The headers around the page: what is mapped there (the overlap check) and what to update.
        let h1 = Self::read_header(s, Lvl::Pud, gb, env.cost);
        let h2 = if o.size == PageSize::G1 { 0 } else { Self::read_header(s, Lvl::Pmd, sec, env.cost) };
        let clash = match o.size {
            PageSize::K4 => h1 & H_1G != 0 || h2 & H_2M != 0,
            PageSize::M2 => h1 & H_1G != 0 || h2 & H_4K != 0,
            _ => h1 & (H_4K | H_2M) != 0,
        };
        if clash {
            return Err(Error::Check(format!("{:#x}: a {} page would overlap translations of another size", o.va, o.size)));
        }
        if s.tables[i].is_none() {
            let seed = self.table_seed(s.asid, i as u64);
            s.tables[i] = Some(Cuckoo::new(self.cfg.params(), seed, i > 0, env)?);
        }
        let vpn = o.va >> o.size.shift();
        let (tag, j) = (vpn >> 3, (vpn & 7) as usize);
        let pte = encode(o);
        let t = s.tables[i].as_mut().expect("created above");
        let newly = match t.find(tag, env.cost) {
            Some(id) => {
                let l = t.line_mut(id);
                let was = l.data[j] & PRESENT != 0;
                l.data[j] = pte;
                if !was {
                    l.count += 1;
                }
                env.cost.write(1);
                !was
            }
            None => {
                let mut d = [0u64; 8];
                d[j] = pte;
                t.insert(tag, d, 1, env)?;
                true
            }
        };
        // Gradual migration: every table being resized moves a few entries.
        for t in s.tables.iter_mut().flatten() {
            if t.migrating() {
                t.migrate_step(env)?;
            }
        }
        if newly {
            match o.size {
                PageSize::K4 => {
                    s.pmd.entry(sec).or_default().k4 += 1;
                    s.pud.entry(gb).or_default().k4 += 1;
                }
                PageSize::M2 => {
                    s.pmd.entry(sec).or_default().m2 = true;
                    s.pud.entry(gb).or_default().m2 += 1;
                }
                _ => s.pud.entry(gb).or_default().g1 = true,
            }
            if o.size != PageSize::G1 {
                self.sync_header(s, Lvl::Pmd, sec, false, env)?;
            }
            self.sync_header(s, Lvl::Pud, gb, false, env)?;
        }
        self.sync_moved(s, env)?;
        for c in [s.pmd_cwt.as_mut(), s.pud_cwt.as_mut()].into_iter().flatten() {
            if c.migrating() {
                c.migrate_step(env)?;
            }
        }
        self.refresh(s);
        Ok(())
    }

    fn remove(&mut self, s: &mut EcptSpace, va: u64, size: PageSize, env: &mut TdbEnv) -> Option<TObj> {
        let i = size_slot(size)?;
        let t = s.tables[i].as_mut()?;
        let vpn = va >> size.shift();
        let (tag, j) = (vpn >> 3, (vpn & 7) as usize);
        let id = t.find(tag, env.cost)?;
        let l = t.line_mut(id);
        let e = l.data[j];
        if e & PRESENT == 0 {
            return None;
        }
        let old = decode(e, va, size);
        l.data[j] = 0;
        l.count -= 1;
        env.cost.write(1);
        if l.count == 0 {
            t.remove(id, env.cost);
        }
        let (sec, gb) = (va >> 21, va >> 30);
        match size {
            PageSize::K4 => {
                let m = s.pmd.get_mut(&sec).expect("section of a mapped page");
                m.k4 -= 1;
                if *m == PmdInfo::default() {
                    s.pmd.remove(&sec);
                }
                s.pud.get_mut(&gb).expect("section of a mapped page").k4 -= 1;
            }
            PageSize::M2 => {
                s.pmd.remove(&sec);
                s.pud.get_mut(&gb).expect("section of a mapped page").m2 -= 1;
            }
            _ => s.pud.get_mut(&gb).expect("section of a mapped page").g1 = false,
        }
        if s.pud.get(&gb) == Some(&PudInfo::default()) {
            s.pud.remove(&gb);
        }
        // Headers change only when a section loses its last page of a size; the OS's shootdown
        // of the removed range drops any CWC entry holding the old header.
        let r = (|| {
            if size != PageSize::G1 && s.want_header(Lvl::Pmd, sec) != s.stored_header(Lvl::Pmd, sec) {
                self.sync_header(s, Lvl::Pmd, sec, true, env)?;
            }
            if s.want_header(Lvl::Pud, gb) != s.stored_header(Lvl::Pud, gb) {
                self.sync_header(s, Lvl::Pud, gb, true, env)?;
            }
            Ok::<(), Error>(())
        })();
        debug_assert!(r.is_ok(), "clearing a header never allocates");
        self.refresh(s);
        Some(old)
    }

    fn for_each(&mut self, s: &mut EcptSpace, start: u64, end: u64, env: &mut TdbEnv, f: &mut dyn FnMut(&TObj)) {
        if self.cfg.optimized_api {
            self.opt_for_each(s, start, end, env, f)
        } else {
            generic_for_each(self, s, start, end, env, f)
        }
    }

    fn range_is_empty(&mut self, s: &mut EcptSpace, start: u64, end: u64, env: &mut TdbEnv) -> bool {
        if self.cfg.optimized_api {
            self.opt_range_is_empty(s, start, end, env)
        } else {
            generic_range_is_empty(self, s, start, end, env)
        }
    }

    fn table_bytes(&self, s: &EcptSpace) -> u64 {
        s.tables.iter().flatten().map(|t| t.bytes()).sum::<u64>() + s.pmd_cwt.iter().chain(s.pud_cwt.iter()).map(|c| c.bytes()).sum::<u64>()
    }
}

/// The optimized customizable functions ECPT overrides (EMT §4.2).
impl Ecpt {
    /// The 1 GiB sections overlapping `[start, end)` (non-empty) that hold anything, after reading
    /// the PUD-level CWT headers that cover them.
    fn pud_sections(s: &EcptSpace, start: u64, end: u64, cost: &mut OsCost) -> Vec<(u64, PudInfo)> {
        let (g_lo, g_hi) = (start >> 30, (end - 1) >> 30);
        for tag in (g_lo >> 6)..=(g_hi >> 6) {
            Self::read_header(s, Lvl::Pud, tag << 6, cost);
        }
        s.pud.range(g_lo..=g_hi).map(|(k, v)| (*k, *v)).collect()
    }

    /// The customized range iterator: CWT headers skip empty sections, and one probe per cluster
    /// serves its 8 entries.
    pub(super) fn opt_for_each(&mut self, s: &mut EcptSpace, start: u64, end: u64, env: &mut TdbEnv, f: &mut dyn FnMut(&TObj)) {
        if start >= end || s.pud_cwt.is_none() {
            return;
        }
        let gbs = Self::pud_sections(s, start, end, env.cost);
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
    pub(super) fn opt_range_is_empty(&mut self, s: &mut EcptSpace, start: u64, end: u64, env: &mut TdbEnv) -> bool {
        if start >= end || s.pud_cwt.is_none() {
            return true;
        }
        let gbs = Self::pud_sections(s, start, end, env.cost);
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
