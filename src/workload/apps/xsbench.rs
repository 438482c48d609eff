//! XSBench's macroscopic cross-section lookup with the unionized energy grid (Tramm et al., 2014),
//! re-implemented over simulated memory.
//!
//! Data: `N` nuclide grids of `G` points each (energy and five cross sections, 48 bytes), the
//! unionized grid (all `N*G` energies sorted, 8 bytes each) and its index grid (for every union
//! point and nuclide, the nuclide's grid index at that energy: `N*G*N` 4-byte ints, the bulk of
//! the memory), and 12 materials (nuclide lists and concentrations, XSBench's counts and
//! probabilities). A lookup draws an energy and a material, binary-searches the unionized grid,
//! then for every nuclide of the material reads its index-grid entry and the two bracketing grid
//! points and accumulates the interpolated cross sections times the concentration.
//!
//! Implicit data: nuclide `n`'s `i`-th energy is `(i + u(n,i)) / G` with `u` a seeded hash in
//! [0, 1), so every grid is sorted and union point `s*N + q` is the `q`-th smallest of the `N`
//! energies in stratum `s`; union energies and index-grid entries are therefore computed on
//! demand (an O(N) selection), and the host keeps nothing per grid point. XSBench draws its
//! energies uniformly and sorts them; stratification keeps each nuclide's points evenly spread,
//! which only makes the grid more regular than random.
//!
//! The build (sorting, unionizing, index grid) is the unmeasured initialisation; the lookups are
//! the measured phase. Instructions: ≈ 6 per binary-search step, ≈ 3 per load of the per-nuclide
//! part (index arithmetic, the interpolation's subtract/divide/multiply-add per cross section),
//! ≈ 40 per lookup for the random energy and material.

use super::super::pending::Pending;
use super::super::{MapFlags, ParamInfo, ParamKind, Params, Vm, Workload, WorkloadEntry};
use super::common::{footprint, max_accesses, Streams, P_MAX_ACCESSES, P_POPULATE};
use super::heap::Heap;
use crate::error::Result;
use crate::rng::{hash2, mix64, Rng};
use crate::trace::Access;

/// Bytes per nuclide grid point.
pub const POINT: u64 = 48;
/// XSBench's material probabilities (fuel first).
const MAT_PROB: [f64; 12] = [0.140, 0.052, 0.275, 0.134, 0.154, 0.064, 0.066, 0.055, 0.008, 0.015, 0.025, 0.013];
/// XSBench's nuclides per material for the large problem (fuel takes `N - 34` in general).
const MAT_NUCS: [u64; 12] = [321, 5, 4, 4, 27, 21, 21, 21, 21, 21, 9, 9];
const IP: u64 = 0x49_0000;

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "xsbench",
    description: "XSBench unionized-grid cross-section lookups (binary search + per-nuclide gathers)",
    params: &[
        ParamInfo {
            name: "footprint",
            kind: ParamKind::Bytes,
            default: "5678M",
            help: "bytes of grids (sets the gridpoints per nuclide); 5678M = XSBench large",
        },
        ParamInfo {
            name: "gridpoints",
            kind: ParamKind::Count,
            default: "0",
            help: "gridpoints per nuclide (overrides footprint when not 0; large = 11303)",
        },
        ParamInfo { name: "nuclides", kind: ParamKind::Count, default: "355", help: "nuclides (355 = large, 68 = small)" },
        P_MAX_ACCESSES,
        P_POPULATE,
    ],
    build,
};

fn build(p: &Params, seed: u64) -> Result<Box<dyn Workload>> {
    let n = p.u64("nuclides")?;
    if !(2..=4096).contains(&n) {
        return Err(p.out_of_range("nuclides", "between 2 and 4096"));
    }
    let g = match p.u64("gridpoints")? {
        0 => footprint(p, "footprint", 1 << 20)? / (n * (POINT + 8 + 4 * n)),
        g => g,
    };
    if !(2..=1 << 32).contains(&g) {
        return Err(p.out_of_range("gridpoints", "between 2 and 2^32 (or a footprint that gives that many)"));
    }
    let mut x = XsBench::new(n, g, seed);
    x.populate = p.bool("populate")?;
    x.streams = Streams::new(1, max_accesses(p)?);
    Ok(Box::new(x))
}

/// One lookup's inputs and result.
#[derive(Clone, Debug, PartialEq)]
pub struct Lookup {
    /// Energy in [0, 1).
    pub energy: f64,
    /// Material.
    pub mat: usize,
    /// Union grid index found by the binary search.
    pub union_idx: u64,
    /// Macroscopic cross sections.
    pub macro_xs: [f64; 5],
}

/// The XSBench state.
pub struct XsBench {
    n: u64,
    g: u64,
    seed: u64,
    /// Nuclide ids of each material.
    mats: Vec<Vec<u64>>,
    concs: Vec<Vec<f64>>,
    mat_off: Vec<u64>,
    grids: u64,
    union: u64,
    index: u64,
    mat_base: u64,
    populate: bool,
    streams: Streams,
    rng: Rng,
    /// The positions `u(·, stratum)` of every nuclide in stratum `stratum` (`u64::MAX`: none
    /// yet), sorted if `sorted` ([`XsBench::stratum_nth`]).
    scratch: Vec<f64>,
    stratum: u64,
    sorted: bool,
    /// Results of the lookups done so far, when recording (tests).
    pub record: Option<Vec<Lookup>>,
}

impl XsBench {
    /// `n` nuclides of `g` grid points.
    pub fn new(n: u64, g: u64, seed: u64) -> XsBench {
        let mut rng = Rng::new(hash2(seed, 0x45));
        let fuel = if n >= 68 { n - 34 } else { (n / 2).max(1) };
        let mut mats = Vec::new();
        let mut concs = Vec::new();
        for (m, &c) in MAT_NUCS.iter().enumerate() {
            let count = if m == 0 { fuel } else { c.min(n) };
            // A seeded sample of distinct nuclides (partial Fisher-Yates), ascending as XSBench lists them.
            let mut ids: Vec<u64> = (0..n).collect();
            for i in 0..count as usize {
                let j = i + rng.below(n - i as u64) as usize;
                ids.swap(i, j);
            }
            let mut chosen = ids[..count as usize].to_vec();
            chosen.sort_unstable();
            concs.push(chosen.iter().map(|_| rng.unit()).collect());
            mats.push(chosen);
        }
        let mut mat_off = vec![0];
        for m in &mats {
            mat_off.push(mat_off[mat_off.len() - 1] + m.len() as u64);
        }
        XsBench {
            n,
            g,
            seed,
            mats,
            concs,
            mat_off,
            grids: 0,
            union: 0,
            index: 0,
            mat_base: 0,
            populate: true,
            streams: Streams::new(1, u64::MAX),
            rng: Rng::new(hash2(seed, 0x46)),
            scratch: Vec::new(),
            stratum: u64::MAX,
            sorted: false,
            record: None,
        }
    }

    /// `u(n, i)` in [0, 1): the position of nuclide `n`'s `i`-th energy inside its stratum.
    fn u(&self, n: u64, i: u64) -> f64 {
        (hash2(self.seed ^ mix64(n), i) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Energy of nuclide `n`'s grid point `i`.
    pub fn energy(&self, n: u64, i: u64) -> f64 {
        (i as f64 + self.u(n, i)) / self.g as f64
    }

    /// Cross section `k` of nuclide `n`'s grid point `i`.
    pub fn xs(&self, n: u64, i: u64, k: u64) -> f64 {
        (hash2(self.seed ^ mix64(n ^ (k << 40)), i ^ 0xc5) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// The `q`-th smallest position of stratum `s` (union point `s * n + q`'s position inside
    /// its stratum). A lookup's binary search ends with several steps inside one stratum, and
    /// the index sweep visits a stratum's points in a row, so the last stratum's positions are
    /// kept: the first query selects, a second sorts them, and later ones read the answer.
    /// Exact: the `q`-th smallest value is the same whichever way it is found.
    fn stratum_nth(&mut self, s: u64, q: u64) -> f64 {
        let q = q as usize;
        if self.stratum != s {
            let mut v = std::mem::take(&mut self.scratch);
            v.clear();
            v.extend((0..self.n).map(|n| self.u(n, s)));
            let x = *v.select_nth_unstable_by(q, f64::total_cmp).1;
            (self.scratch, self.stratum, self.sorted) = (v, s, false);
            return x;
        }
        if !self.sorted {
            self.scratch.sort_unstable_by(f64::total_cmp);
            self.sorted = true;
        }
        self.scratch[q]
    }

    /// Energy of union grid point `j`.
    pub fn union_energy(&mut self, j: u64) -> f64 {
        let (s, q) = (j / self.n, j % self.n);
        (s as f64 + self.stratum_nth(s, q)) / self.g as f64
    }

    /// Index-grid entry of union point `j` for nuclide `nuc`: the last grid point of `nuc` at or
    /// below the union energy (0 if none), as XSBench's sweep computes it.
    pub fn index_entry(&mut self, j: u64, nuc: u64) -> u64 {
        let (s, q) = (j / self.n, j % self.n);
        let uq = self.stratum_nth(s, q);
        let below = s + u64::from(self.u(nuc, s) <= uq);
        below.saturating_sub(1)
    }

    /// One lookup, emitting its accesses.
    pub fn lookup(&mut self, energy: f64, mat: usize, p: &mut Pending) -> Lookup {
        // Binary search on the unionized grid (XSBench's grid_search).
        let total = self.n * self.g;
        let (mut lo, mut hi) = (0u64, total - 1);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            p.load(self.union + 8 * mid, 8, IP, 6);
            if self.union_energy(mid) > energy {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        let mut macro_xs = [0.0f64; 5];
        for j in 0..self.mats[mat].len() {
            let nuc = self.mats[mat][j];
            let conc = self.concs[mat][j];
            let mo = self.mat_off[mat] + j as u64;
            p.load(self.mat_base + 4 * mo, 4, IP + 4, 3);
            p.load(self.mat_base + 4 * self.mat_off[12] + 8 * mo, 8, IP + 8, 2);
            p.load(self.index + 4 * (lo * self.n + nuc), 4, IP + 12, 4);
            let idx = self.index_entry(lo, nuc);
            let low = if idx == self.g - 1 { idx - 1 } else { idx };
            let (la, ha) = (self.grids + (nuc * self.g + low) * POINT, self.grids + (nuc * self.g + low + 1) * POINT);
            p.load(ha, 8, IP + 16, 2);
            p.load(la, 8, IP + 20, 3);
            let (el, eh) = (self.energy(nuc, low), self.energy(nuc, low + 1));
            let f = (eh - energy) / (eh - el);
            for (k, m) in macro_xs.iter_mut().enumerate() {
                let k = k as u64;
                p.load(ha + 8 + 8 * k, 8, IP + 24, 2);
                p.load(la + 8 + 8 * k, 8, IP + 28, 3);
                let (xl, xh) = (self.xs(nuc, low, k), self.xs(nuc, low + 1, k));
                *m += (xh - f * (xh - xl)) * conc;
            }
        }
        Lookup { energy, mat, union_idx: lo, macro_xs }
    }

    fn pick_mat(&mut self) -> usize {
        let r = self.rng.unit();
        let mut acc = 0.0;
        for (m, &pm) in MAT_PROB.iter().enumerate() {
            acc += pm;
            if r < acc {
                return m;
            }
        }
        MAT_PROB.len() - 1
    }
}

impl Workload for XsBench {
    fn setup(&mut self, vm: &mut dyn Vm) -> Result<()> {
        let pts = self.n * self.g;
        let sizes = [pts * POINT, pts * 8, pts * self.n * 4, self.mat_off[12] * 12];
        let mut bases = [0u64; 4];
        let mut heap = Heap::new(64 << 20, MapFlags::default());
        for (b, &len) in bases.iter_mut().zip(&sizes) {
            *b = heap.malloc(vm, len, self.populate)?;
        }
        [self.grids, self.union, self.index, self.mat_base] = bases;
        Ok(())
    }

    fn fill(&mut self, thread: usize, buf: &mut [Access], _vm: &mut dyn Vm) -> Result<usize> {
        // Take the streams out so the step can borrow the rest of `self` mutably.
        let mut streams = std::mem::replace(&mut self.streams, Streams::new(0, 1));
        let r = streams.fill(thread, buf, |p| {
            let energy = self.rng.unit();
            let mat = self.pick_mat();
            p.instrs(40);
            let l = self.lookup(energy, mat, p);
            if let Some(rec) = &mut self.record {
                rec.push(l);
            }
            Ok(true)
        });
        self.streams = streams;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::tests::{contract, run_all};
    use super::*;
    use crate::workload::testvm::TestVm;

    /// XSBench's initialisation done the direct way: explicit grids, a sorted union and the
    /// index grid by a sweep; then the lookups recomputed by plain binary search.
    #[test]
    fn lookups_equal_a_direct_computation() {
        let (n, g) = (40u64, 25u64);
        let mut x = XsBench::new(n, g, 11);
        x.record = Some(Vec::new());
        x.streams = Streams::new(1, 20_000);
        let mut vm = TestVm::new();
        x.setup(&mut vm).unwrap();
        run_all(&mut x, &mut vm, 500);
        let mut union: Vec<f64> = (0..n).flat_map(|nu| (0..g).map(move |i| (nu, i))).map(|(nu, i)| x.energy(nu, i)).collect();
        union.sort_by(f64::total_cmp);
        for (j, &e) in union.iter().enumerate() {
            assert_eq!(x.union_energy(j as u64), e);
        }
        let mut index = vec![0u64; union.len() * n as usize];
        let mut low = vec![0u64; n as usize];
        for (j, &e) in union.iter().enumerate() {
            for nu in 0..n {
                while low[nu as usize] < g - 1 && x.energy(nu, low[nu as usize] + 1) <= e {
                    low[nu as usize] += 1;
                }
                index[j * n as usize + nu as usize] = low[nu as usize];
                assert_eq!(x.index_entry(j as u64, nu), low[nu as usize]);
            }
        }
        let rec = x.record.take().unwrap();
        assert!(rec.len() > 10);
        for l in &rec {
            let lo = union.partition_point(|&u| u <= l.energy).saturating_sub(1).min(union.len() - 2);
            assert_eq!(l.union_idx, lo as u64);
            let mut m = [0.0f64; 5];
            for (j, &nu) in x.mats[l.mat].iter().enumerate() {
                let idx = index[lo * n as usize + nu as usize];
                let low = if idx == g - 1 { idx - 1 } else { idx };
                let (el, eh) = (x.energy(nu, low), x.energy(nu, low + 1));
                let f = (eh - l.energy) / (eh - el);
                for (k, mk) in m.iter_mut().enumerate() {
                    let (xl, xh) = (x.xs(nu, low, k as u64), x.xs(nu, low + 1, k as u64));
                    *mk += (xh - f * (xh - xl)) * x.concs[l.mat][j];
                }
            }
            assert_eq!(l.macro_xs, m);
        }
    }

    #[test]
    fn large_problem_sizes() {
        let x = XsBench::new(355, 11303, 1);
        assert_eq!(x.mats[0].len(), 321);
        assert_eq!(x.n * x.g, 4_012_565);
        let map = [("footprint".to_string(), "33G".to_string())].into_iter().collect();
        assert!(crate::workload::build("xsbench", &map, 1).is_ok());
    }

    #[test]
    fn runs_as_a_workload() {
        contract("xsbench", &[("nuclides", "68"), ("gridpoints", "200"), ("max_accesses", "30000")]);
    }
}
