//! Connected components by Shiloach–Vishkin label propagation (GAP's `cc_sv`): repeat { hook: for
//! every edge (u, v) whose labels differ, point the larger label's root at the smaller label;
//! shortcut: compress every label chain to its root } until no hook happens. It treats each
//! directed edge as undirected, so from out-edges alone it computes weakly connected components;
//! every vertex ends labelled with its component's smallest id. (GraphBIG labels components by a
//! BFS from each unlabelled vertex, which is only right on a symmetric graph; ours is directed
//! and its in-edges are not stored.)
//!
//! Simulated data: the CSR arrays and `comp` (u32 per vertex, initialised to the identity).
//!
//! Hook, per vertex u: load `offsets[u]`, `offsets[u+1]`; per edge: load `cols[e]`, load
//! `comp[u]` (reloaded each edge: stores to `comp` may alias), load `comp[v]`; if they differ,
//! load `comp[high]` and, if it is a root, store `comp[high] = low`. Shortcut, per vertex: load
//! `comp[v]`, load `comp[comp[v]]`, store while they differ. Both loops use a static schedule.
//! Instruction estimates (-O2): offsets 3 + 2, `cols` 4, `comp[u]` 2, `comp[v]` 4 (load,
//! compare, branch), `comp[high]` 5 (max/min by cmov, load, compare, branch), hook store 2,
//! shortcut loads 3 + 3, store 2.

use super::csr::Graph;
use super::engine::{alloc_init, static_share, Kernel, Lane, Runner, Walk};
use super::{common, graph_params, SORTED_PARAM};
use crate::error::Result;
use crate::workload::{Params, Vm, Workload, WorkloadEntry};

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "cc",
    description: "connected components: Shiloach-Vishkin hooking and shortcutting (GAP cc_sv) over an R-MAT CSR graph",
    params: graph_params!(SORTED_PARAM),
    build,
};

/// Kernel bytes per vertex: comp (4).
const PER_VERTEX: f64 = 4.0;
/// Vertices per shortcut step.
const SWEEP: u64 = 64;

const IP_OFF: u64 = 0x41_2000;
const IP_COL: u64 = 0x41_2010;
const IP_CU: u64 = 0x41_2018;
const IP_CV: u64 = 0x41_2020;
const IP_HIGH: u64 = 0x41_2028;
const IP_HOOK: u64 = 0x41_2030;
const IP_SC: u64 = 0x41_2040;
const IP_SC_STORE: u64 = 0x41_2050;

fn build(p: &Params, seed: u64) -> Result<Box<dyn Workload>> {
    Ok(Box::new(runner(p, seed)?))
}

/// Builds the CC runner.
pub(crate) fn runner(p: &Params, seed: u64) -> Result<Runner<Cc>> {
    let (spec, opts) = common(p, seed, PER_VERTEX, false, p.bool("sorted")?)?;
    let g = Graph::new(spec);
    let k = Cc::new(&g, opts.threads);
    Ok(Runner::new(g, k, opts))
}

/// CC state.
pub struct Cc {
    /// Component label of every vertex (its component's smallest id once the run is complete).
    pub comp: Vec<u32>,
    /// Hook-and-shortcut rounds started.
    pub rounds: u32,
    hooking: bool,
    change: bool,
    walks: Vec<Walk>,
    comp_at: u64,
}

impl Cc {
    /// Shiloach–Vishkin over `g` with `threads` threads.
    pub fn new(g: &Graph, threads: usize) -> Cc {
        let mut c = Cc {
            comp: (0..g.n() as u32).collect(),
            rounds: 1,
            hooking: true,
            change: false,
            walks: (0..threads).map(|_| Walk::default()).collect(),
            comp_at: 0,
        };
        c.share(g.n());
        c
    }

    fn share(&mut self, n: u64) {
        let t = self.walks.len();
        for (i, w) in self.walks.iter_mut().enumerate() {
            (w.lo, w.hi) = static_share(n, t, i);
        }
    }
}

impl Kernel for Cc {
    fn map(&mut self, g: &Graph, vm: &mut dyn Vm) -> Result<()> {
        self.comp_at = alloc_init(vm, 4 * g.n())?;
        Ok(())
    }

    fn step(&mut self, g: &Graph, t: usize, lane: &mut Lane) -> bool {
        let Cc { comp, walks, comp_at, change, hooking, .. } = self;
        let w = &mut walks[t];
        let at = |v: u32| *comp_at + 4 * u64::from(v);
        if !*hooking {
            if w.lo == w.hi {
                return false;
            }
            let end = (w.lo + SWEEP).min(w.hi);
            for v in w.lo as u32..end as u32 {
                loop {
                    let c = comp[v as usize];
                    lane.ld(at(v), 4, IP_SC, 3);
                    lane.ld(at(c), 4, IP_SC + 4, 3);
                    let cc = comp[c as usize];
                    if cc == c {
                        break;
                    }
                    comp[v as usize] = cc;
                    lane.st(at(v), 4, IP_SC_STORE, 2);
                }
            }
            w.lo = end;
            return true;
        }
        if !w.open {
            if w.lo == w.hi {
                return false;
            }
            let u = w.lo as u32;
            w.lo += 1;
            lane.ld(g.off_addr(u), 8, IP_OFF, 3);
            lane.ld(g.off_addr(u) + 8, 8, IP_OFF + 4, 2);
            w.open(g, u);
            return true;
        }
        let (u, e0) = (w.u, w.e0);
        let edges = w.slice(g);
        w.prefetch_at(edges.clone(), comp);
        for k in edges {
            let v = w.nbr[k];
            lane.ld(g.col_addr(e0 + k as u64), 4, IP_COL, 4);
            lane.ld(at(u), 4, IP_CU, 2);
            lane.ld(at(v), 4, IP_CV, 4);
            let (cu, cv) = (comp[u as usize], comp[v as usize]);
            if cu != cv {
                let (high, low) = (cu.max(cv), cu.min(cv));
                lane.ld(at(high), 4, IP_HIGH, 5);
                if comp[high as usize] == high {
                    comp[high as usize] = low;
                    lane.st(at(high), 4, IP_HOOK, 2);
                    *change = true;
                }
            }
        }
        true
    }

    fn next_phase(&mut self, g: &Graph, _lanes: &mut [Lane]) -> bool {
        if self.hooking {
            self.hooking = false;
        } else {
            if !self.change {
                return false;
            }
            self.change = false;
            self.hooking = true;
            self.rounds += 1;
        }
        self.share(g.n());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::graph::testutil::{params, run};
    use std::collections::HashMap;

    fn find(p: &mut [u32], mut x: u32) -> u32 {
        while p[x as usize] != x {
            p[x as usize] = p[p[x as usize] as usize];
            x = p[x as usize];
        }
        x
    }

    fn check(g: &Graph, comp: &[u32]) {
        let n = g.n() as usize;
        let mut uf: Vec<u32> = (0..n as u32).collect();
        let mut nb = Vec::new();
        for u in 0..n as u32 {
            g.neighbors(u, &mut nb);
            for &v in &nb {
                assert_eq!(comp[u as usize], comp[v as usize], "edge ({u},{v}) joins two labels");
                let (a, b) = (find(&mut uf, u), find(&mut uf, v));
                uf[a.max(b) as usize] = a.min(b);
            }
        }
        // The labelling and union-find induce the same partition.
        let mut map: HashMap<u32, u32> = HashMap::new();
        for v in 0..n as u32 {
            let r = find(&mut uf, v);
            assert_eq!(*map.entry(comp[v as usize]).or_insert(r), r);
            assert!(comp[v as usize] <= v, "label is the smallest id of the component");
        }
        let roots = (0..n as u32).filter(|&v| find(&mut uf, v) == v).count();
        assert_eq!(map.len(), roots, "component count matches union-find");
    }

    #[test]
    fn labels_match_union_find() {
        // Low degree leaves many small components besides the giant one.
        let p = params("cc", &[("vertices", "4000"), ("degree", "2"), ("max_accesses", "0")]);
        let mut r = runner(&p, 4).unwrap();
        run(&mut r);
        check(&r.g, &r.k.comp);
        let labels: std::collections::HashSet<_> = r.k.comp.iter().collect();
        assert!(labels.len() > 10, "{} components", labels.len());
        assert!(r.k.rounds >= 2);
    }

    #[test]
    fn two_threads_find_the_same_components() {
        let p1 = params("cc", &[("vertices", "3000"), ("degree", "3"), ("max_accesses", "0")]);
        let p2 = params("cc", &[("vertices", "3000"), ("degree", "3"), ("max_accesses", "0"), ("threads", "2")]);
        let (mut a, mut b) = (runner(&p1, 8).unwrap(), runner(&p2, 8).unwrap());
        run(&mut a);
        let s = run(&mut b);
        check(&b.g, &b.k.comp);
        assert_eq!(a.k.comp, b.k.comp);
        assert!(s.iter().all(|x| !x.is_empty()));
    }
}
