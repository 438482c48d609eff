//! Single-source shortest paths by delta-stepping (GAP's `sssp`; with `delta = 1` it settles
//! vertices in Dijkstra order, as GraphBIG's serial priority-queue SSSP does). Edge weights are
//! 1..=255, drawn per edge.
//!
//! Simulated data: the CSR arrays plus `weights` (u32 per edge, parallel to `cols`), `dist` (u32
//! per vertex), the shared `frontier` (u32 per vertex) and, per thread, its local bins: a 4 MiB
//! arena of 256 slabs of 16 KiB, bin b living in slab b mod 256 (std::vector storage reused; a
//! bin longer than a slab wraps inside it).
//!
//! Each round processes the frontier of the current bin: per entry load `frontier[i]` and
//! `dist[u]`, skip if stale (`dist[u] < delta·bin`), else load `offsets[u]`, `offsets[u+1]` and
//! per edge load `cols[e]`, `weights[e]`, `dist[u]`, `dist[v]`; on improvement CAS `dist[v]`
//! (a store) and append v to the local bin of its new distance (a store). Between rounds every
//! thread reads the shared next-bin index, and those holding entries of the next bin reserve
//! frontier space (atomic add on the tail) and copy their bin into the frontier.
//! Instruction estimates (-O2): frontier 4, `dist[u]` 4, offsets 3 + 2, `cols` 4, `weights` 2,
//! `dist[u]` 2, `dist[v]` 3, CAS 3, bin push 6 (divide by delta, capacity check, store, bump).

use super::csr::Graph;
use super::engine::{alloc, alloc_init, Dynamic, Kernel, Lane, Runner, Walk};
use super::{common, graph_params, source, SORTED_PARAM, SOURCE_PARAM};
use crate::error::Result;
use crate::workload::{ParamInfo, ParamKind, Params, Vm, Workload, WorkloadEntry};

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "sssp",
    description: "GraphBIG/GAP SSSP: delta-stepping shortest paths over a weighted R-MAT CSR graph",
    params: graph_params!(
        SOURCE_PARAM,
        SORTED_PARAM,
        ParamInfo { name: "delta", kind: ParamKind::Count, default: "1", help: "bucket width of delta-stepping (1 = Dijkstra order)" }
    ),
    build,
};

/// Kernel bytes per vertex: dist (4) + frontier (4); the weights array is counted with the CSR.
const PER_VERTEX: f64 = 8.0;
/// Unreached.
pub const INF: u32 = u32::MAX;
/// Slabs per thread arena.
const SLOTS: u64 = 256;
/// Entries per slab.
const SLAB: u64 = 4096;

const IP_FRONT: u64 = 0x41_3000;
const IP_DU: u64 = 0x41_3008;
const IP_OFF: u64 = 0x41_3010;
const IP_COL: u64 = 0x41_3020;
const IP_W: u64 = 0x41_3028;
const IP_DU2: u64 = 0x41_3030;
const IP_DV: u64 = 0x41_3038;
const IP_CAS: u64 = 0x41_3040;
const IP_BIN: u64 = 0x41_3048;
const IP_IDX: u64 = 0x41_3050;
const IP_TAIL: u64 = 0x41_3058;
const IP_COPY: u64 = 0x41_3060;

fn build(p: &Params, seed: u64) -> Result<Box<dyn Workload>> {
    Ok(Box::new(runner(p, seed)?))
}

/// Builds the SSSP runner.
pub(crate) fn runner(p: &Params, seed: u64) -> Result<Runner<Sssp>> {
    let delta = p.u64("delta")?;
    if !(1..=1 << 24).contains(&delta) {
        return Err(p.out_of_range("delta", "between 1 and 2^24"));
    }
    let (spec, opts) = common(p, seed, PER_VERTEX, true, p.bool("sorted")?)?;
    let g = Graph::new(spec);
    let src = source(p, &g, seed)?;
    let k = Sssp::new(&g, src, delta as u32, opts.threads);
    Ok(Runner::new(g, k, opts))
}

/// SSSP state.
pub struct Sssp {
    /// Distance of every vertex from the source (`INF` = unreached).
    pub dist: Vec<u32>,
    /// Rounds (frontiers processed).
    pub rounds: u64,
    delta: u32,
    frontier: Vec<u32>,
    bin: u64,
    copying: bool,
    /// Per thread, per bin index: the local bin's entries.
    bins: Vec<Vec<Vec<u32>>>,
    sched: Dynamic,
    walks: Vec<Walk>,
    dist_at: u64,
    frontier_at: u64,
    globals: u64,
    arenas: Vec<u64>,
}

impl Sssp {
    /// Delta-stepping from `source`.
    pub fn new(g: &Graph, source: u32, delta: u32, threads: usize) -> Sssp {
        let mut dist = vec![INF; g.n() as usize];
        dist[source as usize] = 0;
        let mut sched = Dynamic::default();
        sched.reset(1);
        Sssp {
            dist,
            rounds: 1,
            delta,
            frontier: vec![source],
            bin: 0,
            copying: false,
            bins: vec![Vec::new(); threads],
            sched,
            walks: (0..threads).map(|_| Walk::default()).collect(),
            dist_at: 0,
            frontier_at: 0,
            globals: 0,
            arenas: Vec::new(),
        }
    }

    fn slab_addr(&self, t: usize, bin: u64, j: u64) -> u64 {
        self.arenas[t] + 4 * ((bin % SLOTS) * SLAB + j % SLAB)
    }

    /// Thread `t` copies (as much as fits of) its bin for the current round into the frontier.
    fn copy_bin(&mut self, g: &Graph, t: usize, lane: &mut Lane) {
        let bin = self.bin as usize;
        let Some(entries) = self.bins[t].get_mut(bin) else { return };
        if entries.is_empty() {
            return;
        }
        // The frontier holds n ids; a longer bin is processed over several rounds.
        let take = entries.len().min(g.n() as usize - self.frontier.len());
        let rest = entries.split_off(take);
        let taken = std::mem::replace(entries, rest);
        lane.ld(self.globals, 8, IP_TAIL, 3);
        lane.st(self.globals, 8, IP_TAIL + 4, 2);
        let at = self.frontier.len() as u64;
        let mut j = 0u64;
        while j < take as u64 {
            // Contiguous runs of the slab (it may wrap).
            let run = (take as u64 - j).min(SLAB - j % SLAB);
            lane.copy(self.slab_addr(t, self.bin, j), self.frontier_at + 4 * (at + j), 4 * run, IP_COPY, 2);
            j += run;
        }
        self.frontier.extend(taken);
    }
}

impl Kernel for Sssp {
    fn map(&mut self, g: &Graph, vm: &mut dyn Vm) -> Result<()> {
        self.globals = alloc(vm, 4096)?;
        self.dist_at = alloc_init(vm, 4 * g.n())?;
        self.frontier_at = alloc(vm, 4 * g.n())?;
        for _ in 0..self.bins.len() {
            self.arenas.push(alloc(vm, 4 * SLOTS * SLAB)?);
        }
        Ok(())
    }

    fn step(&mut self, g: &Graph, t: usize, lane: &mut Lane) -> bool {
        if self.copying {
            self.copy_bin(g, t, lane);
            return false;
        }
        let lower = u64::from(self.delta) * self.bin;
        let w = &mut self.walks[t];
        if !w.open {
            if w.lo == w.hi {
                let Some((a, b)) = self.sched.grab() else { return false };
                (w.lo, w.hi) = (a, b);
            }
            let i = w.lo;
            w.lo += 1;
            let u = self.frontier[i as usize];
            lane.ld(self.frontier_at + 4 * i, 4, IP_FRONT, 4);
            lane.ld(self.dist_at + 4 * u64::from(u), 4, IP_DU, 4);
            if u64::from(self.dist[u as usize]) >= lower {
                lane.ld(g.off_addr(u), 8, IP_OFF, 3);
                lane.ld(g.off_addr(u) + 8, 8, IP_OFF + 4, 2);
                w.open(g, u);
            }
            return true;
        }
        let (u, e0) = (w.u, w.e0);
        let range = w.slice(g);
        w.prefetch_at(range.clone(), &self.dist);
        for k in range {
            let v = self.walks[t].nbr[k];
            let e = e0 + k as u64;
            lane.ld(g.col_addr(e), 4, IP_COL, 4);
            lane.ld(g.weight_addr(e), 4, IP_W, 2);
            lane.ld(self.dist_at + 4 * u64::from(u), 4, IP_DU2, 2);
            lane.ld(self.dist_at + 4 * u64::from(v), 4, IP_DV, 3);
            let nd = self.dist[u as usize].saturating_add(g.weight(e));
            if nd < self.dist[v as usize] {
                self.dist[v as usize] = nd;
                lane.st(self.dist_at + 4 * u64::from(v), 4, IP_CAS, 3);
                let b = (nd / self.delta) as usize;
                let bins = &mut self.bins[t];
                if bins.len() <= b {
                    bins.resize_with(b + 1, Vec::new);
                }
                let j = bins[b].len() as u64;
                bins[b].push(v);
                let addr = self.slab_addr(t, b as u64, j);
                lane.st(addr, 4, IP_BIN, 6);
            }
        }
        true
    }

    fn next_phase(&mut self, _g: &Graph, lanes: &mut [Lane]) -> bool {
        if self.copying {
            self.copying = false;
            self.sched.reset(self.frontier.len() as u64);
            self.rounds += 1;
            return true;
        }
        // Every thread reads the agreed next bin: the smallest non-empty one at or after this one.
        let cur = self.bin as usize;
        let next = self.bins.iter().filter_map(|b| (cur..b.len()).find(|&i| !b[i].is_empty())).min();
        for lane in lanes.iter_mut() {
            lane.ld(self.globals + 64, 8, IP_IDX, 4);
        }
        let Some(next) = next else { return false };
        // Bins already passed are empty for good: release their host memory.
        for b in &mut self.bins {
            for x in b.iter_mut().take(next) {
                *x = Vec::new();
            }
        }
        self.bin = next as u64;
        self.frontier.clear();
        self.copying = true;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::graph::testutil::{params, run};
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    fn dijkstra(g: &Graph, s: u32) -> Vec<u32> {
        let mut d = vec![INF; g.n() as usize];
        d[s as usize] = 0;
        let mut h = BinaryHeap::from([Reverse((0u32, s))]);
        let mut nb = Vec::new();
        while let Some(Reverse((du, u))) = h.pop() {
            if du > d[u as usize] {
                continue;
            }
            g.neighbors(u, &mut nb);
            let e0 = g.offset(u);
            for (k, &v) in nb.iter().enumerate() {
                let nd = du + g.weight(e0 + k as u64);
                if nd < d[v as usize] {
                    d[v as usize] = nd;
                    h.push(Reverse((nd, v)));
                }
            }
        }
        d
    }

    fn check(r: &Runner<Sssp>, src: u32) {
        let (g, d) = (&r.g, &r.k.dist);
        assert_eq!(d[src as usize], 0);
        let mut nb = Vec::new();
        for u in 0..g.n() as u32 {
            if d[u as usize] == INF {
                continue;
            }
            g.neighbors(u, &mut nb);
            let e0 = g.offset(u);
            for (k, &v) in nb.iter().enumerate() {
                assert!(d[v as usize] <= d[u as usize] + g.weight(e0 + k as u64), "edge ({u},{v}) can be relaxed");
            }
        }
        assert_eq!(*d, dijkstra(g, src));
    }

    #[test]
    fn distances_equal_dijkstra() {
        for delta in ["1", "40"] {
            let p = params("sssp", &[("vertices", "3000"), ("max_accesses", "0"), ("delta", delta)]);
            let mut r = runner(&p, 12).unwrap();
            let src = r.k.frontier[0];
            run(&mut r);
            check(&r, src);
            assert!(r.k.dist.iter().filter(|&&x| x != INF).count() > 1000);
        }
    }

    #[test]
    fn two_threads_compute_the_same_distances() {
        let kv = [("vertices", "3000"), ("max_accesses", "0"), ("delta", "8"), ("sorted", "true")];
        let p1 = params("sssp", &kv);
        let mut kv2 = kv.to_vec();
        kv2.push(("threads", "2"));
        let p2 = params("sssp", &kv2);
        let (mut a, mut b) = (runner(&p1, 5).unwrap(), runner(&p2, 5).unwrap());
        run(&mut a);
        let s = run(&mut b);
        let src = a.k.dist.iter().position(|&x| x == 0).unwrap() as u32;
        check(&b, src);
        assert_eq!(a.k.dist, b.k.dist);
        assert!(s.iter().all(|x| !x.is_empty()));
    }
}
