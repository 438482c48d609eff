//! Cuckoo walk tables (CWTs): keeping their headers in step with the tables, and the CWT
//! references of a walk.

use super::*;

impl Ecpt {
    pub(super) fn ensure_cwts(&mut self, s: &mut EcptSpace, env: &mut TdbEnv) -> Result<()> {
        if s.pmd_cwt.is_none() {
            s.pmd_cwt = Some(Cuckoo::new(self.cfg.cwt_params(self.cfg.pmd_cwt_entries), self.table_seed(s.asid, 3), false, env)?);
        }
        if s.pud_cwt.is_none() {
            s.pud_cwt = Some(Cuckoo::new(self.cfg.cwt_params(self.cfg.pud_cwt_entries), self.table_seed(s.asid, 4), false, env)?);
        }
        Ok(())
    }

    /// Reads section `key`'s header from walk-table memory, counting the line lookup.
    pub(super) fn read_header(s: &EcptSpace, l: Lvl, key: u64, cost: &mut OsCost) -> u8 {
        let Some(c) = s.cwt(l) else { return 0 };
        c.find(key >> 6, cost).map(|id| c.line(id).data[(key & 63) as usize]).unwrap_or(0)
    }

    /// Brings section `key`'s stored header up to date. `counted_lookup`: the OS has not looked
    /// the line up yet (count the lookup). No CWC is invalidated: a walk that a stale cached
    /// copy sends to the wrong ways probes the others next (see `walk.rs`).
    pub(super) fn sync_header(&mut self, s: &mut EcptSpace, l: Lvl, key: u64, counted_lookup: bool, env: &mut TdbEnv) -> Result<()> {
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
        Ok(())
    }

    /// Syncs the headers of every section whose 2 MiB or 1 GiB cluster changed way.
    pub(super) fn sync_moved(&mut self, s: &mut EcptSpace, env: &mut TdbEnv) -> Result<()> {
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
                self.sync_header(s, l, k, true, env)?;
            }
        }
        Ok(())
    }

    /// Moves the report's view of `s` up to date and collects the tables' event counters.
    pub(super) fn refresh(&mut self, s: &mut EcptSpace) {
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

    /// Background fetches (at `step`) of the PMD and PUD walk-table lines flagged in `which`, for
    /// sections `keys` (2 MiB, 1 GiB), each filled into the CWC; returns the references pushed.
    pub(super) fn refetch_cwt_lines(
        s: &EcptSpace,
        wc: &mut EcptCwc,
        asid: u16,
        which: [bool; 2],
        keys: [u64; 2],
        step: u8,
        plan: &mut WalkPlan,
    ) -> usize {
        let before = plan.refs.len();
        for (k, l) in [Lvl::Pmd, Lvl::Pud].into_iter().enumerate() {
            if which[k] {
                let line = Self::push_cwt(s, l, keys[k], step, false, plan);
                wc.fill(l, asid, keys[k], line);
            }
        }
        plan.refs.len() - before
    }

    /// Pushes the probes of walk table `l` for the line holding section `key`'s header at
    /// `step`; returns the line found (`None`: no line, nothing is mapped in its range). `wait`:
    /// the walk needs the answer (mark the ref holding the line needed, or all of them if none
    /// does); otherwise the fetch is a background CWC refill.
    pub(super) fn push_cwt(s: &EcptSpace, l: Lvl, key: u64, step: u8, wait: bool, plan: &mut WalkPlan) -> Option<HeaderLine> {
        let c = s.cwt(l)?;
        let tag = key >> 6;
        let start = plan.refs.len();
        let mut found = None;
        for w in c.ways() {
            for (a, _) in w.arrays() {
                let slot = a.slot(tag);
                if let Some(id) = a.candidate(slot, tag) {
                    if c.line(id).tag == tag {
                        found = Some((plan.refs.len(), c.line(id).data));
                    }
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
        found.map(|(_, d)| d)
    }
}
