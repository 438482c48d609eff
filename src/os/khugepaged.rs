//! khugepaged: the background promoter that collapses 2 MiB regions of 4 KiB pages into THPs
//! (a [`Promoter`]), and the OS's collapse mechanism it uses.

use super::policy::Promoter;
use super::*;

/// Linux's khugepaged (`mm/khugepaged.c`): every `sleep_ms` of simulated time it scans
/// `pages_to_scan` pages' worth of THP-eligible 2 MiB regions from where it stopped, collapsing
/// regions whose 4 KiB pages qualify.
pub struct Khugepaged {
    cfg: KhugepagedConfig,
    thp: ThpMode,
    next_wake_ms: f64,
    /// Where the next scan starts: process index and virtual address.
    cursor: (usize, u64),
}

impl Khugepaged {
    /// khugepaged as `cfg` configures it, if it runs at all (THP on and `os.khugepaged.enabled`).
    pub fn configured(cfg: &OsConfig) -> Option<Khugepaged> {
        (cfg.thp != ThpMode::Never && cfg.khugepaged.enabled).then(|| Khugepaged {
            cfg: cfg.khugepaged.clone(),
            thp: cfg.thp,
            next_wake_ms: cfg.khugepaged.sleep_ms,
            cursor: (0, 0),
        })
    }

    /// One wake-up.
    pub fn scan<D: Driver>(&mut self, os: &mut Os<D>) -> Result<()> {
        os.stats.khugepaged_scans += 1;
        os.cost.set_path(Path::Promote);
        let mut budget = self.cfg.pages_to_scan.div_ceil(512);
        let nprocs = os.procs.len();
        let mut visited = 0;
        while budget > 0 && visited <= nprocs {
            let (pi, va) = self.cursor;
            if pi >= nprocs {
                self.cursor = (0, 0);
                visited += 1;
                continue;
            }
            // Next eligible 2 MiB region at or after va in this process.
            let next = os.procs[pi]
                .vmas
                .values()
                .filter(|v| v.thp_allowed(self.thp))
                .filter_map(|v| {
                    let s = (v.start.max(va)).div_ceil(2 << 20) * (2 << 20);
                    (s + (2 << 20) <= v.end).then_some(s)
                })
                .min();
            let Some(region) = next else {
                self.cursor = (pi + 1, 0);
                visited += 1;
                continue;
            };
            self.cursor = (pi, region + (2 << 20));
            budget -= 1;
            os.collapse(pi as u16, region)?;
        }
        Ok(())
    }
}

impl<D: Driver> Promoter<D> for Khugepaged {
    fn name(&self) -> &'static str {
        "khugepaged"
    }

    fn tick(&mut self, os: &mut Os<D>, now_ms: f64) -> Result<()> {
        for _ in 0..super::policy::due_wakes(&mut self.next_wake_ms, self.cfg.sleep_ms, now_ms) {
            self.scan(os)?;
        }
        Ok(())
    }
}

impl<D: Driver> Os<D> {
    /// One khugepaged wake-up now, outside the configured promoters (tests and tools); its
    /// cursor persists across calls.
    pub fn khugepaged_scan(&mut self) -> Result<()> {
        let mut k = Khugepaged { cfg: self.cfg.khugepaged.clone(), thp: self.cfg.thp, next_wake_ms: 0.0, cursor: self.khuge_cursor };
        let r = k.scan(self);
        self.khuge_cursor = k.cursor;
        r
    }

    /// The 4 KiB pages mapped in `[base, end)` of `asid`, and whether a larger page is mapped
    /// there too.
    fn small_pages(&mut self, asid: u16, base: u64, end: u64) -> (Vec<TObj>, bool) {
        let mut small = Vec::with_capacity(512);
        let mut huge = false;
        self.api(asid, Func::Iterate, |d, s, env| {
            d.for_each(s, base, end, env, &mut |o| {
                if o.size == PageSize::K4 {
                    small.push(*o)
                } else {
                    huge = true
                }
            })
        });
        (small, huge)
    }

    /// Tries to collapse the 2 MiB region at `base` into one THP.
    pub(super) fn collapse(&mut self, asid: u16, base: u64) -> Result<bool> {
        if self.driver.can_map(base, PageSize::M2).is_err() {
            return Ok(false);
        }
        let end = base + PageSize::M2.bytes();
        let (mut small, huge) = self.small_pages(asid, base, end);
        if huge || small.is_empty() || 512 - small.len() as u32 > self.cfg.khugepaged.max_ptes_none {
            return Ok(false);
        }
        let flags = self.vma(asid, base).map(|v| v.flags).unwrap_or_default();
        let pa = match self.placement(asid, base, PageSize::M2, flags) {
            Placement::Buddy => match self.pools.take_2m().or_else(|| self.phys.alloc(9)) {
                // khugepaged's own compaction (`os.compaction.khugepaged`).
                None if self.cfg.compaction.khugepaged => match self.compact_2m()? {
                    Some(pfn) => {
                        // Compaction may have moved some of this region's own pages.
                        small = self.small_pages(asid, base, end).0;
                        pfn.addr()
                    }
                    None => {
                        self.stats.promotion_failures += 1;
                        return Ok(false);
                    }
                },
                Some(pfn) => pfn.addr(),
                None => {
                    self.stats.promotion_failures += 1;
                    return Ok(false);
                }
            },
            Placement::Frame { pa, evict } => {
                if let Some(v) = evict {
                    self.evict(v)?;
                }
                pa
            }
            Placement::InRange { lo, hi } => match self.phys.alloc_in_range(9, lo >> 12, hi >> 12) {
                // Background collapse does not swap to make room: it waits for a free block.
                Some(pfn) => pfn.addr(),
                None => {
                    self.stats.promotion_failures += 1;
                    return Ok(false);
                }
            },
        };
        self.cost.add_to(Func::Alloc, Event::Page, 1);
        self.cost.add_to(Func::Copy, Event::Page, small.len() as u64);
        self.stats.promotion_bytes_copied += small.len() as u64 * PageSize::K4.bytes();
        self.zero_data(512 - small.len() as u64);
        for o in &small {
            self.api(asid, Func::Remove, |d, s, env| d.remove(s, o.va, o.size, env));
            self.procs[asid as usize].truth.remove(o.va, o.size);
            self.free_frame(o.pa, o.size)?;
        }
        let prot = small[0].prot;
        self.install(asid, base, pa, PageSize::M2, prot)?;
        self.stats.promotions += 1;
        self.shootdown(asid, base, end);
        Ok(true)
    }
}
