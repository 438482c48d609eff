//! A stand-in driver for unit tests below `arch/` (the MMU pipeline's timing rules, the OS's
//! page moves): a flat map of 4 KiB pages whose walk costs [`FLAT_WALK_CYCLES`] fixed cycles and
//! makes no memory references, so a test computes every latency by hand. Optionally a side
//! structure holding the pages in [`FlatSpace::side`], and 2 MiB pages the walk finds in
//! [`FlatSpace::huge`]. Tests only: layers below `arch/` must not import a real design.

use crate::addr::PageSize;
use crate::error::Result;
use crate::tapi::{Driver, SideLookup, SideTiming, TObj, Tdb, TdbEnv, Translation, WalkPlan};
use std::collections::HashMap;

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
        s.pages.get(&(va >> 12)).map(|&pa| TObj::new(va & !0xfff, pa, PageSize::K4, 3))
    }
    fn update(&mut self, s: &mut FlatSpace, o: &TObj, _: &mut TdbEnv) -> Result<()> {
        s.pages.insert(o.va >> 12, o.pa);
        Ok(())
    }
    fn remove(&mut self, s: &mut FlatSpace, va: u64, _: PageSize, _: &mut TdbEnv) -> Option<TObj> {
        s.pages.remove(&(va >> 12)).map(|pa| TObj::new(va, pa, PageSize::K4, 3))
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
        if let Some(&pbase) = s.huge.get(&(va >> 21)) {
            return Some(Translation { pbase, size: PageSize::M2 });
        }
        s.pages.get(&(va >> 12)).map(|&pbase| Translation { pbase, size: PageSize::K4 })
    }
    fn invalidate_walk_cache(&self, _: &mut (), _: u16, _: u64, _: u64) {}
    fn leaf_sizes(&self) -> &[PageSize] {
        &[PageSize::K4]
    }
    fn side(&mut self) -> Option<&mut dyn SideLookup<Self>> {
        if self.side_lat.is_some() {
            Some(self)
        } else {
            None
        }
    }
}
