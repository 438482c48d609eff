//! PageRank, push style as GraphBIG's `bench_pageRank` runs it: every vertex pushes
//! `damping · rank / out-degree` to each out-neighbour with an atomic add, then a sweep turns the
//! sums into the next ranks. Rank held by vertices without out-edges is spread evenly (GraphBIG
//! drops it, so its ranks do not sum to 1); a fixed number of iterations is run.
//!
//! Simulated data: the CSR arrays, `rank` and `next` (f64 per vertex each, structure of arrays).
//!
//! Push (static schedule over vertices), per vertex u: load `offsets[u]`, `offsets[u+1]`,
//! `rank[u]`; per edge load `cols[e]`, load `next[v]`, store `next[v]` (the lock cmpxchg of the
//! atomic add). Sweep (static), per vertex: load `next[v]` and `rank[v]`, store the new
//! `rank[v]`, store `next[v] = 0` (GraphBIG's copy-and-reset sweep and its error sweep, fused).
//! Instruction estimates (-O2): offsets 3 + 2, `rank[u]` 6 (load, convert, multiply, divide),
//! `cols` 4, `next[v]` 2, CAS 4 (add, movq, lock cmpxchg, branch), sweep 3 + 2 + 5 + 2.

use super::csr::Graph;
use super::engine::{alloc_init, static_share, written_zeros, Kernel, Lane, Runner, Untouched32, Walk};
use super::{common, graph_params, SORTED_PARAM};
use crate::error::Result;
use crate::workload::{ParamInfo, ParamKind, Params, Vm, Workload, WorkloadEntry};

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "pr",
    description: "GraphBIG PageRank: push-style rank propagation with atomic adds over an R-MAT CSR graph",
    params: graph_params!(
        SORTED_PARAM,
        ParamInfo { name: "iterations", kind: ParamKind::Count, default: "20", help: "PageRank iterations" },
        ParamInfo { name: "damping", kind: ParamKind::Number, default: "0.85", help: "damping factor" }
    ),
    build,
};

/// Kernel bytes per vertex: rank (8) + next (8).
const PER_VERTEX: f64 = 16.0;
/// Vertices per sweep step.
const SWEEP: u64 = 64;

const IP_OFF: u64 = 0x41_4000;
const IP_RANK: u64 = 0x41_4010;
const IP_COL: u64 = 0x41_4020;
const IP_NEXT: u64 = 0x41_4028;
const IP_CAS: u64 = 0x41_4030;
const IP_SW: u64 = 0x41_4040;

fn build(p: &Params, seed: u64) -> Result<Box<dyn Workload>> {
    Ok(Box::new(runner(p, seed)?))
}

/// Builds the PageRank runner.
pub(crate) fn runner(p: &Params, seed: u64) -> Result<Runner<Pr>> {
    let iterations = p.u64("iterations")?;
    if !(1..=1_000_000).contains(&iterations) {
        return Err(p.out_of_range("iterations", "between 1 and 1000000"));
    }
    let damping = p.f64("damping")?;
    if !(0.0..1.0).contains(&damping) {
        return Err(p.out_of_range("damping", "in [0, 1)"));
    }
    let (spec, opts) = common(p, seed, PER_VERTEX, false, p.bool("sorted")?)?;
    let g = Graph::new(spec);
    let k = Pr::new(&g, iterations as u32, damping, opts.threads);
    Ok(Runner::new(g, k, opts))
}

/// PageRank state.
pub struct Pr {
    /// Current rank of every vertex (f32 on the host to keep it at 12 bytes per vertex; the
    /// sums are accumulated in f64). Untouched until used: a short run of a large graph reads
    /// the ranks of the few vertices it reaches.
    pub rank: Untouched32,
    /// Iterations completed.
    pub done: u32,
    next: Vec<f64>,
    iterations: u32,
    damping: f64,
    pushing: bool,
    dangling: Vec<f64>,
    base: f64,
    walks: Vec<Walk>,
    rank_at: u64,
    next_at: u64,
}

impl Pr {
    /// `iterations` of PageRank over `g`.
    pub fn new(g: &Graph, iterations: u32, damping: f64, threads: usize) -> Pr {
        let n = g.n() as usize;
        let mut p = Pr {
            rank: Untouched32::new(n, 1.0 / n as f32),
            done: 0,
            next: written_zeros(n),
            iterations,
            damping,
            pushing: true,
            dangling: vec![0.0; threads],
            base: 0.0,
            walks: (0..threads).map(|_| Walk::default()).collect(),
            rank_at: 0,
            next_at: 0,
        };
        p.share(g.n());
        p
    }

    fn share(&mut self, n: u64) {
        let t = self.walks.len();
        for (i, w) in self.walks.iter_mut().enumerate() {
            (w.lo, w.hi) = static_share(n, t, i);
        }
    }
}

impl Kernel for Pr {
    fn map(&mut self, g: &Graph, vm: &mut dyn Vm) -> Result<()> {
        self.rank_at = alloc_init(vm, 8 * g.n())?;
        self.next_at = alloc_init(vm, 8 * g.n())?;
        Ok(())
    }

    fn step(&mut self, g: &Graph, t: usize, lane: &mut Lane) -> bool {
        let w = &mut self.walks[t];
        if !self.pushing {
            if w.lo == w.hi {
                return false;
            }
            let end = (w.lo + SWEEP).min(w.hi);
            for v in w.lo..end {
                let (na, ra) = (self.next_at + 8 * v, self.rank_at + 8 * v);
                lane.ld(na, 8, IP_SW, 3);
                lane.ld(ra, 8, IP_SW + 4, 2);
                lane.st(ra, 8, IP_SW + 8, 5);
                lane.st(na, 8, IP_SW + 12, 2);
                self.rank.set(v as usize, (self.base + self.next[v as usize]) as f32);
                self.next[v as usize] = 0.0;
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
            lane.ld(self.rank_at + 8 * u64::from(u), 8, IP_RANK, 6);
            let (_, deg) = w.open(g, u);
            let r = f64::from(self.rank.get(u as usize));
            if deg == 0 {
                self.dangling[t] += r;
            }
            return true;
        }
        // The contribution of the open vertex: recomputed per thread, as the kernel holds it in
        // a register.
        let u = w.u;
        let c = self.damping * f64::from(self.rank.get(u as usize)) / w.deg as f64;
        let e0 = w.e0;
        let edges = w.slice(g);
        w.prefetch_at(edges.clone(), &self.next);
        for k in edges {
            let v = w.nbr[k];
            lane.ld(g.col_addr(e0 + k as u64), 4, IP_COL, 4);
            let a = self.next_at + 8 * u64::from(v);
            lane.ld(a, 8, IP_NEXT, 2);
            lane.st(a, 8, IP_CAS, 4);
            self.next[v as usize] += c;
        }
        true
    }

    fn next_phase(&mut self, g: &Graph, _lanes: &mut [Lane]) -> bool {
        let n = g.n() as f64;
        if self.pushing {
            let dangling: f64 = self.dangling.iter().sum();
            self.dangling.fill(0.0);
            self.base = (1.0 - self.damping) / n + self.damping * dangling / n;
            self.pushing = false;
        } else {
            self.done += 1;
            if self.done == self.iterations {
                return false;
            }
            self.pushing = true;
        }
        self.share(g.n());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::graph::testutil::{params, run};

    fn reference(g: &Graph, iters: u32, d: f64) -> Vec<f64> {
        let n = g.n() as usize;
        let mut r = vec![1.0 / n as f64; n];
        let mut nb = Vec::new();
        for _ in 0..iters {
            let mut next = vec![0.0; n];
            let mut dangling = 0.0;
            for (u, &ru) in r.iter().enumerate() {
                g.neighbors(u as u32, &mut nb);
                if nb.is_empty() {
                    dangling += ru;
                }
                for &v in &nb {
                    next[v as usize] += d * ru / nb.len() as f64;
                }
            }
            for (rv, nv) in r.iter_mut().zip(&next) {
                *rv = (1.0 - d) / n as f64 + d * dangling / n as f64 + nv;
            }
        }
        r
    }

    fn check(rank: &[f32], want: &[f64]) {
        let sum: f64 = rank.iter().map(|&x| f64::from(x)).sum();
        assert!((sum - 1.0).abs() < 1e-6, "ranks sum to {sum}");
        assert!(rank.iter().all(|&x| x > 0.0));
        for (a, b) in rank.iter().zip(want) {
            assert!((f64::from(*a) - b).abs() <= 1e-5 * b, "{a} vs {b}");
        }
    }

    #[test]
    fn ranks_sum_to_one_and_match_power_iteration() {
        let p = params("pr", &[("vertices", "2000"), ("max_accesses", "0"), ("iterations", "8")]);
        let mut r = runner(&p, 21).unwrap();
        let s = run(&mut r);
        assert_eq!(r.k.done, 8);
        check(&r.k.rank.iter().collect::<Vec<_>>(), &reference(&r.g, 8, 0.85));
        // Every edge pushed once per iteration.
        assert_eq!(s[0].iter().filter(|a| a.ip == IP_COL).count() as u64, 8 * r.g.edges());
    }

    #[test]
    fn two_threads_compute_the_same_ranks() {
        let p = params("pr", &[("vertices", "2000"), ("max_accesses", "0"), ("iterations", "5"), ("threads", "2")]);
        let mut r = runner(&p, 21).unwrap();
        let s = run(&mut r);
        check(&r.k.rank.iter().collect::<Vec<_>>(), &reference(&r.g, 5, 0.85));
        assert!(s.iter().all(|x| !x.is_empty()));
        let cols: usize = s.iter().map(|x| x.iter().filter(|a| a.ip == IP_COL).count()).sum();
        assert_eq!(cols as u64, 5 * r.g.edges());
    }
}
