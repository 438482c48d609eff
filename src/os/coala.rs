//! Elastic Translations' OS mechanisms (reference elastic-translations.md §2–§3): CoalaPaging's
//! fault-time placement, which puts a page's frame where its 64 KiB / 32 MiB group needs it, and
//! the 32 MiB promotion CoalaKhugepaged performs. The contiguous bit itself is the arm64 driver's
//! (`arch::arm64`, transparent management): the OS only makes groups eligible.

use super::leshy::{self, Hint, LeshyParams, LeshySample, Online};
use super::policy::Promoter;
use super::*;

/// What a 32 MiB promotion attempt did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Promote32 {
    /// The region already maps 16 aligned, contiguous 2 MiB blocks (a 32 MiB translation).
    AlreadyContiguous,
    /// Copied into one order-13 block and mapped as 16 contiguous 2 MiB blocks.
    Promoted,
    /// Not eligible or no order-13 block: each 2 MiB region was collapsed on its own (§3's
    /// fallback); the count of regions that became 2 MiB pages.
    Fallback(u32),
}

impl<D: Driver> Os<D> {
    /// CoalaKhugepaged's 32 MiB promotion of the region at `base` (§3,
    /// `coala_khugepaged_scan_contpmd`): if all 16 of its 2 MiB regions are collapsible (a 2 MiB
    /// page, or 4 KiB pages khugepaged would collapse), allocate one order-13 block, copy every
    /// mapped page into it and map 16 2 MiB blocks, which the driver makes one contiguous
    /// translation. Otherwise collapse each 2 MiB region on its own.
    pub fn promote_32m(&mut self, asid: u16, base: u64) -> Result<Promote32> {
        let m2 = PageSize::M2.bytes();
        let end = base + PageSize::M32.bytes();
        self.cost.set_path(Path::Promote);
        let mut objs = Vec::new();
        self.api(asid, Func::Iterate, |d, s, env| d.for_each(s, base, end, env, &mut |o| objs.push(*o)));
        let blocks: Vec<&TObj> = objs.iter().filter(|o| o.size == PageSize::M2).collect();
        if blocks.len() == 16
            && blocks[0].pa & PageSize::M32.offset_mask() == 0
            && blocks.iter().enumerate().all(|(i, o)| o.pa == blocks[0].pa + i as u64 * m2)
        {
            return Ok(Promote32::AlreadyContiguous);
        }
        let mut pages = [0u32; 16];
        let mut huge = [false; 16];
        let mut other = false;
        for o in &objs {
            let r = ((o.va - base) / m2) as usize;
            match o.size {
                PageSize::K4 => pages[r] += 1,
                PageSize::M2 => huge[r] = true,
                _ => other = true,
            }
        }
        let max_none = self.cfg.khugepaged.max_ptes_none;
        let collapsible = |r: usize| huge[r] || (pages[r] > 0 && 512 - pages[r] <= max_none);
        let eligible = !other && self.driver.can_map(base, PageSize::M2).is_ok() && (0..16).all(collapsible);
        let block = if eligible { self.phys.alloc(PageSize::M32.order()) } else { None };
        let Some(block) = block else {
            self.stats.promotion_32m_fallbacks += 1;
            let mut n = 0;
            for r in 0..16u64 {
                if !huge[r as usize] && self.collapse(asid, base + r * m2)? {
                    n += 1;
                }
            }
            return Ok(Promote32::Fallback(n));
        };
        let mapped: u64 = objs.iter().map(|o| o.size.base_pages()).sum();
        self.cost.add_to(Func::Alloc, Event::Page, 1);
        self.cost.add_to(Func::Copy, Event::Page, mapped);
        self.zero_data(PageSize::M32.base_pages() - mapped);
        self.stats.promotion_bytes_copied += mapped * PageSize::K4.bytes();
        let prot = objs[0].prot;
        for o in &objs {
            self.api(asid, Func::Remove, |d, s, env| d.remove(s, o.va, o.size, env));
            self.procs[asid as usize].truth.remove(o.va, o.size);
            self.free_frame(o.pa, o.size)?;
        }
        // The order-13 block is mapped as 16 2 MiB pages, each freed on its own later.
        self.phys.split_allocated(block, PageSize::M32.order(), PageSize::M2.order()).map_err(Error::Check)?;
        for r in 0..16u64 {
            self.install(asid, base + r * m2, block.addr() + r * m2, PageSize::M2, prot)?;
        }
        self.stats.promotions_32m += 1;
        self.shootdown(asid, base, end);
        Ok(Promote32::Promoted)
    }
}

/// Leshy's hints for one address space, with CoalaKhugepaged's "pending promotion" marks (§3:
/// the per-mm index walked in order; reloading clears everything and restarts the walk).
#[derive(Clone, Debug, Default)]
pub struct HintSet {
    hints: Vec<Hint>,
    pending: Vec<bool>,
    next: usize,
}

impl HintSet {
    /// Replaces the hints, all pending.
    pub fn load(&mut self, hints: Vec<Hint>) {
        self.pending = vec![true; hints.len()];
        self.hints = hints;
        self.next = 0;
    }

    /// Whether any hint is loaded.
    pub fn is_loaded(&self) -> bool {
        !self.hints.is_empty()
    }

    /// The size hinted for the region holding `va`.
    pub fn size_at(&self, va: u64) -> Option<PageSize> {
        let i = self.hints.partition_point(|h| h.end <= va);
        self.hints.get(i).filter(|h| h.start <= va).map(|h| h.size)
    }
}

/// How one fault uses CoalaPaging (§2.2's `coala_skip_thp` and placement decisions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct CoalaFault {
    /// Do not try a THP at this fault.
    pub skip_thp: bool,
    /// A 4 KiB page targets its 64 KiB group.
    pub place_4k: bool,
    /// A THP targets its 32 MiB group.
    pub place_thp: bool,
}

impl<D: Driver> Os<D> {
    /// CoalaPaging's decisions for a fault at `va` (§2.2).
    pub(super) fn coala_fault(&self, asid: u16, va: u64) -> CoalaFault {
        let c = &self.cfg.coala;
        let greedy = CoalaFault { skip_thp: false, place_4k: true, place_thp: c.allow_32m };
        match c.paging {
            CoalaPaging::Off => CoalaFault::default(),
            CoalaPaging::Greedy => greedy,
            CoalaPaging::Hinted => match self.hints.get(asid as usize).filter(|h| h.is_loaded()) {
                None => greedy,
                Some(h) => match h.size_at(va) {
                    None => CoalaFault { skip_thp: true, place_4k: false, place_thp: false },
                    Some(PageSize::K64) => CoalaFault { skip_thp: true, place_4k: true, place_thp: false },
                    Some(PageSize::M32) => greedy,
                    // A 2M hint takes THP with a plain allocation; its 4 KiB fallback is placed.
                    Some(_) => CoalaFault { skip_thp: false, place_4k: true, place_thp: false },
                },
            },
        }
    }

    /// CoalaPaging's frame for a new page of `size` (4 KiB or 2 MiB) at `va`, or `None` to fall
    /// back to a plain allocation (§2.1, §2.2): the frame its group's anchor asks for, taken
    /// exactly (remainders of the split to the tail of the free lists); or, in an empty group,
    /// the frame at the right offset of a fresh order ≥ 4 block (4 KiB) or order-13 block
    /// (2 MiB, then the order-9 top-up). Never reserves anything.
    pub(super) fn coala_frame(&mut self, asid: u16, va: u64, size: PageSize) -> Option<u64> {
        let group = if size == PageSize::K4 { PageSize::K64 } else { PageSize::M32 };
        let gbase = group.align_down(va);
        let unit = size.bytes();
        let idx = (va - gbase) / unit;
        // The anchor: the first neighbour mapped at its own offset of an aligned group
        // (coala_ptescan / coala_pmdscan read the group's entries).
        let mut anchor = None;
        self.api(asid, Func::Alloc, |d, s, env| {
            d.for_each(s, gbase, gbase + group.bytes(), env, &mut |o| {
                let i = (o.va - gbase) / unit;
                if anchor.is_none() && o.size == size && (o.pa / unit) % 16 == i {
                    anchor = Some(o.pa - i * unit);
                }
            })
        });
        let order = size.order();
        let pfn = match anchor {
            Some(a) => {
                self.stats.coala_targeted += 1;
                let target = Pfn::containing(a + idx * unit);
                if self.phys.alloc_exact(target, order) {
                    self.stats.coala_targeted_hits += 1;
                    Some(target)
                } else {
                    None
                }
            }
            None => {
                self.stats.coala_fresh += 1;
                let p = if size == PageSize::K4 {
                    self.phys.alloc_in_group(0, 4, idx, false)
                } else {
                    self.phys.alloc_in_group(PageSize::M2.order(), 4, idx, true)
                };
                if p.is_some() {
                    self.stats.coala_fresh_hits += 1;
                }
                if size == PageSize::M2 {
                    // §2.2's top-up: keep ≥ 2 × 16 free 2 MiB blocks so plain THPs need not
                    // split 32 MiB blocks.
                    self.phys.topup(PageSize::M2.order(), 32, 32);
                }
                p
            }
        }?;
        self.cost.add_to(Func::Alloc, Event::Page, 1);
        self.zero_data(size.base_pages());
        Some(pfn.addr())
    }

    /// A zeroed data frame for a new page: CoalaPaging's when `place` (and no driver decides
    /// placement), else [`Os::frame_for`]'s.
    pub(super) fn data_frame(&mut self, asid: u16, va: u64, size: PageSize, flags: MapFlags, place: bool) -> Result<Option<u64>> {
        if place && self.driver.placement().is_none() {
            if let Some(pa) = self.coala_frame(asid, va, size) {
                return Ok(Some(pa));
            }
        }
        self.frame_for(asid, va, size, flags)
    }

    /// Loads `hints` for `asid` (clearing its old ones) and records their mix.
    pub fn load_hints(&mut self, asid: u16, hints: Vec<Hint>) {
        let mut mix = [0u64; 3];
        for h in &hints {
            match h.size {
                PageSize::K64 => mix[0] += 1,
                PageSize::M2 => mix[1] += 1,
                PageSize::M32 => mix[2] += 1,
                _ => {}
            }
        }
        self.stats.leshy_mix.push(mix);
        if self.hints.len() <= asid as usize {
            self.hints.resize_with(asid as usize + 1, HintSet::default);
        }
        self.hints[asid as usize].load(hints);
    }

    /// Records one sampled walk (the simulator's SPE model calls it).
    pub fn record_walk_sample(&mut self, asid: u16, va: u64, latency: u32) {
        if self.samples.len() <= asid as usize {
            self.samples.resize_with(asid as usize + 1, Vec::new);
        }
        self.samples[asid as usize].push(LeshySample { va, latency });
        self.stats.leshy_samples += 1;
        if !self.cfg.leshy.write_hints.is_empty() {
            self.all_samples.push((asid, LeshySample { va, latency }));
        }
    }

    /// The sampling period the configured policies need (Leshy's SPE model), if any.
    pub fn sampling_period(&self) -> Option<u32> {
        (self.cfg.leshy.mode == LeshyMode::Online || !self.cfg.leshy.write_hints.is_empty()).then_some(self.cfg.leshy.period)
    }

    /// End of run: writes the hints this run's samples decide, if asked (`os.leshy.write_hints`;
    /// §4.2's offline rule with slack 100, for the first process).
    pub fn finish(&mut self) -> Result<()> {
        let path = self.cfg.leshy.write_hints.clone();
        if path.is_empty() {
            return Ok(());
        }
        let samples: Vec<LeshySample> = self.all_samples.iter().filter(|(a, _)| *a == 0).map(|(_, s)| *s).collect();
        let p = LeshyParams { slack: 100, ..self.leshy_params() };
        let hints = leshy::decide(&samples, &p);
        let (pending, file) = crate::fsutil::PendingFile::create(std::path::Path::new(&path))?;
        let mut f = std::io::BufWriter::new(file);
        leshy::write_hints(&mut f, &hints).and_then(|()| std::io::Write::flush(&mut f)).map_err(|e| Error::io(path.clone(), e))?;
        drop(f);
        pending.commit()
    }

    /// Leshy's parameters from `os.leshy` / `os.coala`.
    fn leshy_params(&self) -> LeshyParams {
        let l = &self.cfg.leshy;
        LeshyParams { tlb_entries: l.tlb_entries, slack: l.slack, target: l.target, allow_32m: self.cfg.coala.allow_32m }
    }
}

/// CoalaKhugepaged (§3): every `os.coala.sleep_ms` it walks each process's pending hints in
/// order, `os.coala.pages_to_scan` pages' worth per wake-up: a 32M hint is promoted to a 32 MiB
/// translation ([`Os::promote_32m`], falling back to 2 MiB collapses); a 2M or 64K hint collapses
/// its 2 MiB region (64 KiB contiguity comes from CoalaPaging or inside larger collapses). A hint
/// is done once visited.
pub struct CoalaKhugepaged {
    sleep_ms: f64,
    pages: u64,
    next_wake_ms: f64,
    allow_32m: bool,
}

impl CoalaKhugepaged {
    /// The promoter `cfg` turns on, if any.
    pub fn configured(cfg: &OsConfig) -> Option<CoalaKhugepaged> {
        let c = &cfg.coala;
        c.khugepaged.then_some(CoalaKhugepaged {
            sleep_ms: c.sleep_ms,
            pages: c.pages_to_scan,
            next_wake_ms: c.sleep_ms,
            allow_32m: c.allow_32m,
        })
    }

    fn scan<D: Driver>(&self, os: &mut Os<D>) -> Result<()> {
        os.stats.coala_scans += 1;
        let mut budget = self.pages as i64;
        for asid in 0..os.hints.len().min(os.procs.len()) {
            while budget > 0 {
                let set = &mut os.hints[asid];
                let Some(i) = (set.next..set.hints.len()).find(|&i| set.pending[i]) else { break };
                set.pending[i] = false;
                set.next = i + 1;
                let h = set.hints[i];
                let m2 = PageSize::M2.bytes();
                if h.size == PageSize::M32 && self.allow_32m {
                    let mut r = h.start;
                    while r < h.end {
                        os.promote_32m(asid as u16, r)?;
                        r += PageSize::M32.bytes();
                    }
                } else {
                    let mut r = PageSize::M2.align_down(h.start);
                    while r < h.end {
                        if os.truth(asid as u16, r).is_none_or(|t| t.size < PageSize::M2) {
                            os.collapse(asid as u16, r)?;
                        }
                        r += m2;
                    }
                }
                budget -= h.pages().max(PageSize::M2.base_pages()) as i64;
            }
        }
        Ok(())
    }
}

impl<D: Driver> Promoter<D> for CoalaKhugepaged {
    fn name(&self) -> &'static str {
        "coala_khugepaged"
    }

    fn tick(&mut self, os: &mut Os<D>, now_ms: f64) -> Result<()> {
        for _ in 0..super::policy::due_wakes(&mut self.next_wake_ms, self.sleep_ms, now_ms) {
            self.scan(os)?;
        }
        Ok(())
    }
}

/// Online Leshy (§4.3): every `os.leshy.interval_ms` each process's samples since the last epoch
/// join a two-epoch window, the decision rule runs with the online slack, 4K hints are dropped,
/// the rest truncated to the promotion budget of the interval, and a changed set is loaded.
pub struct LeshyOnline {
    interval_ms: f64,
    next_ms: f64,
    windows: Vec<Online>,
    budget_pages: u64,
}

impl LeshyOnline {
    /// The policy `cfg` turns on, if any.
    pub fn configured(cfg: &OsConfig) -> Option<LeshyOnline> {
        let l = &cfg.leshy;
        (l.mode == LeshyMode::Online).then(|| LeshyOnline {
            interval_ms: l.interval_ms,
            next_ms: l.interval_ms,
            windows: Vec::new(),
            // §4.3: 2 × 3 × 2 × (pages_to_scan × interval / scan_sleep).
            budget_pages: leshy::online_budget_pages(cfg.coala.pages_to_scan, l.interval_ms as u64, cfg.coala.sleep_ms.max(1.0) as u64),
        })
    }
}

impl<D: Driver> Promoter<D> for LeshyOnline {
    fn name(&self) -> &'static str {
        "leshy"
    }

    fn tick(&mut self, os: &mut Os<D>, now_ms: f64) -> Result<()> {
        for _ in 0..super::policy::due_wakes(&mut self.next_ms, self.interval_ms, now_ms) {
            os.stats.leshy_epochs += 1;
            let p = os.leshy_params();
            for asid in 0..os.procs.len() {
                if self.windows.len() <= asid {
                    self.windows.resize_with(asid + 1, Online::new);
                }
                let samples = os.samples.get_mut(asid).map(std::mem::take).unwrap_or_default();
                self.windows[asid].push_epoch(&samples);
                let h = self.windows[asid].hints(&p, self.budget_pages);
                if h.changed {
                    os.load_hints(asid as u16, h.hints);
                }
            }
        }
        Ok(())
    }
}
