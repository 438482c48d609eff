//! A stand-in driver for unit tests below `arch/` (the MMU pipeline's timing rules, the OS's
//! page moves): a flat map of 4 KiB pages whose walk costs [`FLAT_WALK_CYCLES`] fixed cycles and
//! makes no memory references, so a test computes every latency by hand. Optionally a side
//! structure holding the pages in [`FlatSpace::side`], and 2 MiB pages the walk finds in
//! [`FlatSpace::huge`]. Its walk sets the accessed bit of the page it finds, as a hardware walker
//! does (the OS's access-coverage policies read it back through `find`). Tests only: layers below
//! `arch/` must not import a real design.

use crate::addr::PageSize;
use crate::error::{Error, Result};
use crate::tapi::{Driver, SideLookup, SideTiming, TObj, Tdb, TdbEnv, Translation, WalkPlan};
use std::collections::{HashMap, HashSet};

/// The stand-in walk's latency in cycles.
pub const FLAT_WALK_CYCLES: u32 = 30;

/// The driver; the side structure, when present, costs `side_lat` cycles with `timing`.
pub struct Flat {
    side_lat: Option<u32>,
    timing: SideTiming,
}

impl Flat {
    /// A flat map, with a side structure of that latency and timing if `side` is given.
    pub fn with_side(side: Option<(u32, SideTiming)>) -> Flat {
        Flat { side_lat: side.map(|s| s.0), timing: side.map(|s| s.1).unwrap_or_default() }
    }
}

/// One space's pages.
#[derive(Default)]
pub struct FlatSpace {
    /// The mapped 4 KiB pages (4 KiB page number → physical base).
    pub pages: HashMap<u64, u64>,
    /// The pages the side structure holds (4 KiB page number → physical base).
    pub side: HashMap<u64, u64>,
    /// 2 MiB pages: 2 MiB page number → physical base.
    pub huge: HashMap<u64, u64>,
    /// Virtual bases of the pages (of either size) whose accessed bit is set.
    pub accessed: HashSet<u64>,
}

impl FlatSpace {
    /// The page mapping `va`, a 2 MiB one first, with its accessed bit.
    fn get(&self, va: u64) -> Option<TObj> {
        let (size, pa) = match self.huge.get(&(va >> 21)) {
            Some(&pa) => (PageSize::M2, pa),
            None => (PageSize::K4, *self.pages.get(&(va >> 12))?),
        };
        let base = size.align_down(va);
        Some(TObj { accessed: self.accessed.contains(&base), ..TObj::new(base, pa, size, 3) })
    }

    /// The map holding pages of `size` and its key for `va`; `None` for other sizes.
    fn map_of(&mut self, size: PageSize, va: u64) -> Option<(&mut HashMap<u64, u64>, u64)> {
        match size {
            PageSize::K4 => Some((&mut self.pages, va >> 12)),
            PageSize::M2 => Some((&mut self.huge, va >> 21)),
            _ => None,
        }
    }
}

impl Tdb for Flat {
    type Space = FlatSpace;
    fn create_space(&mut self, _: u16, _: &mut TdbEnv) -> Result<FlatSpace> {
        Ok(FlatSpace::default())
    }
    fn destroy_space(&mut self, _: FlatSpace, _: &mut TdbEnv) -> Result<()> {
        Ok(())
    }
    fn find(&mut self, s: &mut FlatSpace, va: u64, _: &mut TdbEnv) -> Option<TObj> {
        s.get(va)
    }
    fn update(&mut self, s: &mut FlatSpace, o: &TObj, _: &mut TdbEnv) -> Result<()> {
        let (map, key) = s.map_of(o.size, o.va).ok_or_else(|| Error::Check(format!("flat map: no {} pages", o.size)))?;
        map.insert(key, o.pa);
        if o.accessed {
            s.accessed.insert(o.va);
        } else {
            s.accessed.remove(&o.va);
        }
        Ok(())
    }
    fn remove(&mut self, s: &mut FlatSpace, va: u64, size: PageSize, _: &mut TdbEnv) -> Option<TObj> {
        // From the map of `size` itself: a 2 MiB page over `va` does not hide its 4 KiB one.
        let (map, key) = s.map_of(size, va)?;
        let pa = map.remove(&key)?;
        let base = size.align_down(va);
        Some(TObj { accessed: s.accessed.remove(&base), ..TObj::new(base, pa, size, 3) })
    }
    fn table_bytes(&self, _: &FlatSpace) -> u64 {
        0
    }
}

impl SideLookup<Flat> for Flat {
    fn side_lookup(&mut self, s: &mut FlatSpace, _: &mut (), _: u16, va: u64, plan: &mut WalkPlan) -> Option<Translation> {
        plan.fixed_cycles += self.side_lat.unwrap();
        s.side.get(&(va >> 12)).map(|&pbase| Translation { pbase, size: PageSize::K4 })
    }
    fn side_timing(&self) -> SideTiming {
        self.timing
    }
    fn holds(&self, s: &FlatSpace, _: u16, va: u64) -> bool {
        s.side.contains_key(&(va >> 12))
    }
}

impl Driver for Flat {
    type Config = ();
    type WalkCache = ();
    fn from_config(_: &(), _: u64) -> Result<Flat> {
        Ok(Flat::with_side(None))
    }
    fn new_walk_cache(&self) {}
    fn walk(&mut self, s: &mut FlatSpace, _: &mut (), _: u16, va: u64, plan: &mut WalkPlan) -> Option<Translation> {
        plan.fixed_cycles += FLAT_WALK_CYCLES;
        let o = s.get(va)?;
        s.accessed.insert(o.va);
        Some(Translation { pbase: o.pa, size: o.size })
    }
    fn invalidate_walk_cache(&self, _: &mut (), _: u16, _: u64, _: u64) {}
    fn leaf_sizes(&self) -> &[PageSize] {
        &[PageSize::K4, PageSize::M2]
    }
    fn side(&mut self) -> Option<&mut dyn SideLookup<Self>> {
        if self.side_lat.is_some() {
            Some(self)
        } else {
            None
        }
    }
}
