//! Betweenness centrality by Brandes' algorithm (GraphBIG's `bench_betweennessCentr`, GAP's `bc`),
//! from `sources` consecutive source ids: per source a level-synchronous BFS counting shortest
//! paths (`sigma`), then a backward sweep over the BFS levels accumulating dependencies (`delta`)
//! into the scores. Directed graph; parallel edges count as distinct paths; scores are not
//! normalised.
//!
//! Simulated data: the CSR arrays, `depth` (i32), `sigma` (f64), `delta` (f32), `scores` (f32) per
//! vertex, the sliding BFS `queue` (u32 per vertex) and per-thread 64 KiB local queue buffers.
//!
//! Forward, per frontier vertex u: load `queue[i]`, `offsets[u]`, `offsets[u+1]`, `sigma[u]`;
//! per edge load `cols[e]` and `depth[v]`; if unvisited CAS `depth[v]` (store) and push v; if v is
//! one level deeper load and atomically update `sigma[v]` (load + store). Backward, per vertex u of a
//! level: load `queue[i]`, offsets, `sigma[u]`; per edge load `cols[e]`, `depth[v]`, and for a
//! successor `sigma[v]` and `delta[v]`; then store `delta[u]` and update `scores[u]` (load +
//! store). Before every source but the first the three per-source arrays are reset (one store per
//! cache line, static schedule). Instruction estimates (-O2): queue 4, offsets 3 + 2, `sigma[u]` 2,
//! `cols` 4, `depth[v]` 4, CAS 5, push 4, `sigma[v]` 3 + atomic add 4, successor loads 2 + 2 plus 5
//! for the divide/multiply/adds, `delta[u]` store 3, score 2 + 2, reset 4 per line.

use super::csr::Graph;
use super::engine::{alloc, alloc_init, static_share, written_zeros, Dynamic, Frontier, Kernel, Lane, Runner, Walk};
use super::{common, graph_params, source, NONE, SORTED_PARAM, SOURCE_PARAM};
use crate::error::Result;
use crate::workload::{ParamInfo, ParamKind, Params, Vm, Workload, WorkloadEntry};

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "bc",
    description: "GraphBIG betweenness centrality: Brandes' forward BFS and backward dependency sweep over an R-MAT CSR graph",
    params: graph_params!(
        SOURCE_PARAM,
        SORTED_PARAM,
        ParamInfo { name: "sources", kind: ParamKind::Count, default: "1", help: "BFS sources: `source` and the ids after it" }
    ),
    build,
};

/// Kernel bytes per vertex: depth 4 + sigma 8 + delta 4 + scores 4 + queue 4.
const PER_VERTEX: f64 = 24.0;
/// Vertices per reset step.
const RESET: u64 = 1024;

const IP_Q: u64 = 0x41_6000;
const IP_OFF: u64 = 0x41_6010;
const IP_SIGU: u64 = 0x41_6020;
const IP_COL: u64 = 0x41_6028;
const IP_DEPTH: u64 = 0x41_6030;
const IP_CAS: u64 = 0x41_6038;
const IP_SIGV: u64 = 0x41_6040;
const IP_BQ: u64 = 0x41_6080;
const IP_BOFF: u64 = 0x41_6090;
const IP_BSIGU: u64 = 0x41_60a0;
const IP_BCOL: u64 = 0x41_60a8;
const IP_BDEPTH: u64 = 0x41_60b0;
const IP_BSIGV: u64 = 0x41_60b8;
const IP_BDELV: u64 = 0x41_60c0;
const IP_DELU: u64 = 0x41_60c8;
const IP_SCORE: u64 = 0x41_60d0;
const IP_RESET: u64 = 0x41_60e0;

fn build(p: &Params, seed: u64) -> Result<Box<dyn Workload>> {
    Ok(Box::new(runner(p, seed)?))
}

/// Builds the BC runner.
pub(crate) fn runner(p: &Params, seed: u64) -> Result<Runner<Bc>> {
    let sources = p.u64("sources")?;
    let (spec, opts) = common(p, seed, PER_VERTEX, false, p.bool("sorted")?)?;
    if sources == 0 || sources > spec.n {
        return Err(p.out_of_range("sources", "between 1 and the vertex count"));
    }
    let g = Graph::new(spec);
    let src = source(p, &g, seed)?;
    let k = Bc::new(&g, src, sources as u32, opts.threads);
    Ok(Runner::new(g, k, opts))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Reset,
    Forward,
    Backward(usize),
}

/// BC state.
pub struct Bc {
    /// Betweenness score of every vertex, summed over the sources run so far.
    pub scores: Vec<f32>,
    depth: Vec<u32>,
    sigma: Vec<f64>,
    delta: Vec<f32>,
    queue: Frontier,
    level_starts: Vec<usize>,
    first: u32,
    count: u32,
    index: u32,
    source: u32,
    phase: Phase,
    sched: Dynamic,
    walks: Vec<Walk>,
    acc: Vec<f64>,
    depth_at: u64,
    sigma_at: u64,
    delta_at: u64,
    score_at: u64,
}

impl Bc {
    /// Brandes from `count` sources starting at `first`.
    pub fn new(g: &Graph, first: u32, count: u32, threads: usize) -> Bc {
        let n = g.n() as usize;
        let mut b = Bc {
            scores: written_zeros(n),
            depth: vec![NONE; n],
            sigma: written_zeros(n),
            delta: written_zeros(n),
            queue: Frontier::default(),
            level_starts: Vec::new(),
            first,
            count,
            index: 0,
            source: first,
            phase: Phase::Forward,
            sched: Dynamic::default(),
            walks: (0..threads).map(|_| Walk::default()).collect(),
            acc: vec![0.0; threads],
            depth_at: 0,
            sigma_at: 0,
            delta_at: 0,
            score_at: 0,
        };
        b.start_source(g);
        b
    }

    fn start_source(&mut self, g: &Graph) {
        self.source = ((u64::from(self.first) + u64::from(self.index)) % g.n()) as u32;
        let s = self.source as usize;
        self.depth[s] = 0;
        self.sigma[s] = 1.0;
        self.queue.clear();
        self.queue.seed(self.source);
        self.level_starts = vec![0];
        self.sched.reset(1);
        self.phase = Phase::Forward;
    }

    /// Sets up a dynamic schedule over the vertices of BFS level `d`.
    fn schedule_level(&mut self, d: usize) {
        let s = self.level_starts[d];
        let e = self.level_starts.get(d + 1).copied().unwrap_or(self.queue.items.len());
        self.sched.reset((e - s) as u64);
        for w in &mut self.walks {
            (w.lo, w.hi) = (0, 0);
        }
    }

    /// Thread `t` takes its next vertex of the current level (queue index), if any.
    fn next_item(&mut self, t: usize, base: usize) -> Option<u64> {
        let w = &mut self.walks[t];
        if w.lo == w.hi {
            let (a, b) = self.sched.grab()?;
            (w.lo, w.hi) = (base as u64 + a, base as u64 + b);
        }
        w.lo += 1;
        Some(w.lo - 1)
    }

    fn forward(&mut self, g: &Graph, t: usize, lane: &mut Lane) -> bool {
        let d = (self.level_starts.len() - 1) as u32;
        if !self.walks[t].open {
            let Some(i) = self.next_item(t, self.queue.head) else {
                self.queue.flush(t, lane);
                return false;
            };
            let u = self.queue.items[i as usize];
            lane.ld(self.queue.addr(i), 4, IP_Q, 4);
            lane.ld(g.off_addr(u), 8, IP_OFF, 3);
            lane.ld(g.off_addr(u) + 8, 8, IP_OFF + 4, 2);
            lane.ld(self.sigma_at + 8 * u64::from(u), 8, IP_SIGU, 2);
            self.walks[t].open(g, u);
            return true;
        }
        let Bc { walks, depth, sigma, queue, depth_at, sigma_at, .. } = self;
        let w = &mut walks[t];
        let (u, e0) = (w.u, w.e0);
        let edges = w.slice(g);
        w.prefetch_at(edges.clone(), depth);
        for k in edges {
            let v = w.nbr[k];
            lane.ld(g.col_addr(e0 + k as u64), 4, IP_COL, 4);
            let da = *depth_at + 4 * u64::from(v);
            lane.ld(da, 4, IP_DEPTH, 4);
            if depth[v as usize] == NONE {
                depth[v as usize] = d + 1;
                lane.st(da, 4, IP_CAS, 5);
                queue.push(t, v, lane);
            }
            if depth[v as usize] == d + 1 {
                let sa = *sigma_at + 8 * u64::from(v);
                lane.ld(sa, 8, IP_SIGV, 3);
                lane.st(sa, 8, IP_SIGV + 4, 4);
                sigma[v as usize] += sigma[u as usize];
            }
        }
        true
    }

    /// Stores u's dependency and adds it to its score.
    fn finish_vertex(&mut self, t: usize, u: u32, lane: &mut Lane) {
        let dep = self.acc[t];
        self.acc[t] = 0.0;
        self.delta[u as usize] = dep as f32;
        lane.st(self.delta_at + 4 * u64::from(u), 4, IP_DELU, 3);
        if u != self.source {
            let a = self.score_at + 4 * u64::from(u);
            lane.ld(a, 4, IP_SCORE, 2);
            lane.st(a, 4, IP_SCORE + 4, 2);
            self.scores[u as usize] += dep as f32;
        }
    }

    fn backward(&mut self, g: &Graph, t: usize, d: usize, lane: &mut Lane) -> bool {
        if !self.walks[t].open {
            let Some(i) = self.next_item(t, self.level_starts[d]) else { return false };
            let u = self.queue.items[i as usize];
            lane.ld(self.queue.addr(i), 4, IP_BQ, 4);
            lane.ld(g.off_addr(u), 8, IP_BOFF, 3);
            lane.ld(g.off_addr(u) + 8, 8, IP_BOFF + 4, 2);
            lane.ld(self.sigma_at + 8 * u64::from(u), 8, IP_BSIGU, 2);
            self.acc[t] = 0.0;
            let (_, deg) = self.walks[t].open(g, u);
            if deg == 0 {
                self.finish_vertex(t, u, lane);
            }
            return true;
        }
        let w = &mut self.walks[t];
        let (u, e0) = (w.u, w.e0);
        let range = w.slice(g);
        w.prefetch_at(range.clone(), &self.depth);
        let closed = !w.open;
        let su = self.sigma[u as usize];
        for k in range {
            let v = self.walks[t].nbr[k];
            lane.ld(g.col_addr(e0 + k as u64), 4, IP_BCOL, 4);
            lane.ld(self.depth_at + 4 * u64::from(v), 4, IP_BDEPTH, 4);
            if self.depth[v as usize] == d as u32 + 1 {
                lane.ld(self.sigma_at + 8 * u64::from(v), 8, IP_BSIGV, 2);
                lane.ld(self.delta_at + 4 * u64::from(v), 4, IP_BDELV, 2);
                lane.work(5);
                self.acc[t] += su / self.sigma[v as usize] * (1.0 + f64::from(self.delta[v as usize]));
            }
        }
        if closed {
            self.finish_vertex(t, u, lane);
        }
        true
    }
}

impl Kernel for Bc {
    fn map(&mut self, g: &Graph, vm: &mut dyn Vm) -> Result<()> {
        let n = g.n();
        let globals = alloc(vm, 4096)?;
        self.depth_at = alloc_init(vm, 4 * n)?;
        self.sigma_at = alloc_init(vm, 8 * n)?;
        self.delta_at = alloc_init(vm, 4 * n)?;
        self.score_at = alloc_init(vm, 4 * n)?;
        self.queue.map(vm, n, self.walks.len(), globals)
    }

    fn step(&mut self, g: &Graph, t: usize, lane: &mut Lane) -> bool {
        match self.phase {
            Phase::Reset => {
                let w = &mut self.walks[t];
                if w.lo == w.hi {
                    return false;
                }
                let end = (w.lo + RESET).min(w.hi);
                let (a, len) = (w.lo, end - w.lo);
                lane.fill(self.depth_at + 4 * a, 4 * len, IP_RESET, 4);
                lane.fill(self.sigma_at + 8 * a, 8 * len, IP_RESET + 4, 4);
                lane.fill(self.delta_at + 4 * a, 4 * len, IP_RESET + 8, 4);
                w.lo = end;
                true
            }
            Phase::Forward => self.forward(g, t, lane),
            Phase::Backward(d) => self.backward(g, t, d, lane),
        }
    }

    fn next_phase(&mut self, g: &Graph, _lanes: &mut [Lane]) -> bool {
        match self.phase {
            Phase::Reset => {
                self.start_source(g);
                true
            }
            Phase::Forward => {
                self.queue.slide();
                if !self.queue.is_empty() {
                    self.level_starts.push(self.queue.head);
                    self.sched.reset(self.queue.len() as u64);
                    return true;
                }
                // The deepest level has no successors: the sweep starts one level above it.
                let levels = self.level_starts.len();
                if levels < 2 {
                    return self.end_source(g);
                }
                self.phase = Phase::Backward(levels - 2);
                self.schedule_level(levels - 2);
                true
            }
            Phase::Backward(0) => self.end_source(g),
            Phase::Backward(d) => {
                self.phase = Phase::Backward(d - 1);
                self.schedule_level(d - 1);
                true
            }
        }
    }
}

impl Bc {
    /// After a source: reset for the next one (simulated), or finish.
    fn end_source(&mut self, g: &Graph) -> bool {
        self.index += 1;
        if self.index == self.count {
            return false;
        }
        self.depth.fill(NONE);
        self.sigma.fill(0.0);
        self.delta.fill(0.0);
        let t = self.walks.len();
        for (i, w) in self.walks.iter_mut().enumerate() {
            (w.lo, w.hi) = static_share(g.n(), t, i);
        }
        self.phase = Phase::Reset;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::graph::testutil::{params, run};
    use std::collections::VecDeque;

    /// Brandes directly: BFS with path counts, then dependencies in reverse BFS order.
    fn brandes(g: &Graph) -> Vec<f64> {
        let n = g.n() as usize;
        let adj: Vec<Vec<u32>> = (0..n as u32)
            .map(|u| {
                let mut nb = Vec::new();
                g.neighbors(u, &mut nb);
                nb
            })
            .collect();
        let mut bc = vec![0.0; n];
        for s in 0..n {
            let mut dist = vec![usize::MAX; n];
            let mut sigma = vec![0.0f64; n];
            let mut order = Vec::new();
            dist[s] = 0;
            sigma[s] = 1.0;
            let mut q = VecDeque::from([s]);
            while let Some(u) = q.pop_front() {
                order.push(u);
                for &v in &adj[u] {
                    let v = v as usize;
                    if dist[v] == usize::MAX {
                        dist[v] = dist[u] + 1;
                        q.push_back(v);
                    }
                    if dist[v] == dist[u] + 1 {
                        sigma[v] += sigma[u];
                    }
                }
            }
            let mut delta = vec![0.0f64; n];
            for &u in order.iter().rev() {
                for &v in &adj[u] {
                    let v = v as usize;
                    if dist[v] == dist[u] + 1 {
                        delta[u] += sigma[u] / sigma[v] * (1.0 + delta[v]);
                    }
                }
                if u != s {
                    bc[u] += delta[u];
                }
            }
        }
        bc
    }

    fn check(g: &Graph, scores: &[f32], want: &[f64]) {
        for v in 0..g.n() as usize {
            let (a, b) = (f64::from(scores[v]), want[v]);
            assert!((a - b).abs() <= 1e-4 * b.max(1.0), "vertex {v}: {a} vs {b}");
            if g.degree(v as u32) == 0 {
                assert_eq!(a, 0.0, "a vertex without out-edges lies on no shortest path");
            }
        }
    }

    #[test]
    fn all_sources_equal_brandes() {
        let p = params("bc", &[("vertices", "300"), ("degree", "4"), ("max_accesses", "0"), ("sources", "300"), ("source", "0")]);
        let mut r = runner(&p, 31).unwrap();
        run(&mut r);
        let want = brandes(&r.g);
        assert!(want.iter().filter(|&&x| x > 1.0).count() > 20);
        check(&r.g, &r.k.scores, &want);
    }

    #[test]
    fn two_threads_give_the_same_scores() {
        let kv = [("vertices", "300"), ("degree", "4"), ("max_accesses", "0"), ("sources", "300"), ("source", "0"), ("threads", "2")];
        let p = params("bc", &kv);
        let mut r = runner(&p, 31).unwrap();
        let s = run(&mut r);
        check(&r.g, &r.k.scores, &brandes(&r.g));
        assert!(s.iter().all(|x| !x.is_empty()));
        // Resets after the first source: about one store per cache line of `depth` per source
        // (19 lines; each thread's share may start mid-line).
        let resets = s.iter().flatten().filter(|a| a.ip == IP_RESET).count();
        assert!((299 * 19..=299 * 20).contains(&resets), "{resets}");
    }
}
