//! Depth-first search from one source (GraphBIG's `bench_DFS`), written as the iterative DFS a C
//! programmer writes: an explicit stack of (next edge, end edge) frames over the CSR, a visited
//! bitmap, and the discovery order as output. The order is the one recursive DFS produces.
//!
//! Simulated data: the CSR arrays, `visited` (1 bit per vertex, u64 words), `order` (u32 per
//! vertex) and `stack` (16-byte frames, room for n).
//!
//! Per edge: load the top frame's `next` and `end` (the compiler reloads them: bitmap stores may
//! alias), load `cols[next]`, store `next+1`, load the `visited` word of the target; on discovery
//! store the word, store `order[cnt]`, load `offsets[w]` and `offsets[w+1]` and push a frame (two
//! stores). A finished frame is popped with no access. Instruction estimates (-O2): frame loads 3 + 2,
//! `cols` 2, `next` store 2, bitmap test 4 (shift, load, bt, branch), bitmap set 2, `order` 3,
//! offsets 3 + 1, frame stores 3 + 1, pop 2.
//!
//! DFS is sequential: `threads` must be 1. Lists are in generation order (the k-th neighbour is a
//! pure function of (v, k), so resuming a frame costs O(1) on the host).

use super::csr::{Graph, Src};
use super::engine::{alloc, alloc_init, written_zeros, Kernel, Lane, Runner};
use super::{common, graph_params, source, SOURCE_PARAM};
use crate::error::Result;
use crate::workload::{Params, Vm, Workload, WorkloadEntry};

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "dfs",
    description: "GraphBIG DFS: iterative depth-first search (explicit frame stack, visited bitmap) over an R-MAT CSR graph",
    params: graph_params!(SOURCE_PARAM),
    build,
};

/// Kernel bytes per vertex: order (4) + stack frame (16) + bitmap (1/8, rounded into the 20).
const PER_VERTEX: f64 = 20.125;

const IP_FRAME: u64 = 0x41_1000;
const IP_COL: u64 = 0x41_1010;
const IP_NEXT: u64 = 0x41_1018;
const IP_VIS: u64 = 0x41_1020;
const IP_VIS_SET: u64 = 0x41_1028;
const IP_ORDER: u64 = 0x41_1030;
const IP_OFF: u64 = 0x41_1040;
const IP_PUSH: u64 = 0x41_1050;

fn build(p: &Params, seed: u64) -> Result<Box<dyn Workload>> {
    Ok(Box::new(runner(p, seed)?))
}

/// Builds the DFS runner.
pub(crate) fn runner(p: &Params, seed: u64) -> Result<Runner<Dfs>> {
    let (spec, opts) = common(p, seed, PER_VERTEX, false, false)?;
    if opts.threads != 1 {
        return Err(p.out_of_range("threads", "1 (dfs is sequential)"));
    }
    let g = Graph::new(spec);
    let src = source(p, &g, seed)?;
    let k = Dfs::new(&g, src);
    Ok(Runner::new(g, k, opts))
}

/// The frame on top of the stack, with what the host needs to continue it.
#[derive(Clone, Copy, Debug)]
struct Top {
    v: u32,
    src: Src,
    e0: u64,
    deg: u64,
    k: u64,
}

/// DFS state.
pub struct Dfs {
    /// Vertices in discovery order (the source first).
    pub order: Vec<u32>,
    visited: Vec<u64>,
    /// Frames below the top: (vertex, next edge index within its list).
    stack: Vec<(u32, u32)>,
    top: Option<Top>,
    started: bool,
    visited_at: u64,
    order_at: u64,
    stack_at: u64,
}

impl Dfs {
    /// A DFS from `source`.
    pub fn new(g: &Graph, source: u32) -> Dfs {
        let mut d = Dfs {
            order: Vec::new(),
            visited: written_zeros(g.n().div_ceil(64) as usize),
            stack: Vec::new(),
            top: None,
            started: false,
            visited_at: 0,
            order_at: 0,
            stack_at: 0,
        };
        d.order.push(source);
        d.visited[source as usize / 64] |= 1 << (source % 64);
        d.top = Some(Top { v: source, src: g.src(source), e0: g.offset(source), deg: g.degree(source), k: 0 });
        d
    }

    /// Address of field `f` (0 = next, 1 = end) of frame `depth`.
    fn frame(&self, depth: usize, f: u64) -> u64 {
        self.stack_at + 16 * depth as u64 + 8 * f
    }
}

impl Kernel for Dfs {
    fn map(&mut self, g: &Graph, vm: &mut dyn Vm) -> Result<()> {
        self.visited_at = alloc_init(vm, g.n().div_ceil(64) * 8)?;
        self.order_at = alloc_init(vm, 4 * g.n())?;
        // The stack grows as deep as the search goes; only touched pages are faulted.
        self.stack_at = alloc(vm, 16 * g.n())?;
        Ok(())
    }

    fn step(&mut self, g: &Graph, _t: usize, lane: &mut Lane) -> bool {
        if !self.started {
            // The source's discovery and first frame.
            self.started = true;
            let s = self.order[0];
            lane.st(self.visited_at + 8 * u64::from(s / 64), 8, IP_VIS_SET, 4);
            lane.st(self.order_at, 4, IP_ORDER, 3);
            lane.ld(g.off_addr(s), 8, IP_OFF, 3);
            lane.ld(g.off_addr(s) + 8, 8, IP_OFF + 4, 1);
            lane.st(self.frame(0, 0), 8, IP_PUSH, 3);
            lane.st(self.frame(0, 1), 8, IP_PUSH + 4, 1);
            return true;
        }
        let Some(mut top) = self.top else { return false };
        let depth = self.stack.len();
        lane.ld(self.frame(depth, 0), 8, IP_FRAME, 3);
        lane.ld(self.frame(depth, 1), 8, IP_FRAME + 4, 2);
        if top.k == top.deg {
            // Finished: pop and resume the frame below.
            lane.work(2);
            self.top = self.stack.pop().map(|(v, k)| Top { v, src: g.src(v), e0: g.offset(v), deg: g.degree(v), k: u64::from(k) });
            return self.top.is_some();
        }
        let w = g.nbr(&top.src, top.k);
        lane.ld(g.col_addr(top.e0 + top.k), 4, IP_COL, 2);
        lane.st(self.frame(depth, 0), 8, IP_NEXT, 2);
        top.k += 1;
        let word = self.visited_at + 8 * u64::from(w / 64);
        lane.ld(word, 8, IP_VIS, 4);
        let bit = 1u64 << (w % 64);
        if self.visited[w as usize / 64] & bit == 0 {
            self.visited[w as usize / 64] |= bit;
            lane.st(word, 8, IP_VIS_SET, 2);
            lane.st(self.order_at + 4 * self.order.len() as u64, 4, IP_ORDER, 3);
            self.order.push(w);
            lane.ld(g.off_addr(w), 8, IP_OFF, 3);
            lane.ld(g.off_addr(w) + 8, 8, IP_OFF + 4, 1);
            lane.st(self.frame(depth + 1, 0), 8, IP_PUSH, 3);
            lane.st(self.frame(depth + 1, 1), 8, IP_PUSH + 4, 1);
            self.stack.push((top.v, top.k as u32));
            top = Top { v: w, src: g.src(w), e0: g.offset(w), deg: g.degree(w), k: 0 };
        }
        self.top = Some(top);
        true
    }

    fn next_phase(&mut self, _g: &Graph, _lanes: &mut [Lane]) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::graph::testutil::{params, run};

    /// Checks that `order` is a discovery order some DFS from order[0] produces: each newly
    /// discovered vertex is an out-neighbour of the deepest vertex on the current path that still
    /// has an undiscovered out-neighbour, and the search ends having discovered every reachable vertex.
    fn check_dfs_order(g: &Graph, order: &[u32]) {
        let n = g.n() as usize;
        let mut disc = vec![false; n];
        let mut nb = Vec::new();
        let open = |v: u32, disc: &[bool], nb: &mut Vec<u32>| {
            g.neighbors(v, nb);
            nb.iter().any(|&x| !disc[x as usize])
        };
        disc[order[0] as usize] = true;
        let mut path = vec![order[0]];
        for &x in &order[1..] {
            assert!(!disc[x as usize], "vertex {x} discovered twice");
            while !open(*path.last().unwrap(), &disc, &mut nb) {
                path.pop();
                assert!(!path.is_empty(), "{x} discovered after the search finished");
            }
            let parent = *path.last().unwrap();
            g.neighbors(parent, &mut nb);
            assert!(nb.contains(&x), "{x} is not adjacent to the current vertex {parent}");
            disc[x as usize] = true;
            path.push(x);
        }
        while let Some(&v) = path.last() {
            assert!(!open(v, &disc, &mut nb), "the search stopped while {v} had undiscovered neighbours");
            path.pop();
        }
    }

    #[test]
    fn discovery_order_is_a_dfs() {
        let p = params("dfs", &[("vertices", "3000"), ("max_accesses", "0")]);
        let mut r = runner(&p, 9).unwrap();
        let streams = run(&mut r);
        let order = &r.k.order;
        assert!(order.len() > 1000, "reached {}", order.len());
        check_dfs_order(&r.g, order);
        // Every reachable vertex visited exactly once, and one `cols` load per edge of each.
        let edges: u64 = order.iter().map(|&v| r.g.degree(v)).sum();
        assert_eq!(streams[0].iter().filter(|a| a.ip == IP_COL).count() as u64, edges);
        assert_eq!(streams[0].iter().filter(|a| a.ip == IP_ORDER).count(), order.len());
    }

    #[test]
    fn explicit_source_and_determinism() {
        let p = params("dfs", &[("vertices", "1500"), ("max_accesses", "0"), ("source", "17")]);
        let mut a = runner(&p, 2).unwrap();
        let mut b = runner(&p, 2).unwrap();
        assert_eq!(run(&mut a), run(&mut b));
        assert_eq!(a.k.order[0], 17);
        check_dfs_order(&a.g, &a.k.order);
    }
}
