//! Breadth-first search: level-synchronous top-down BFS (GraphBIG's `bench_BFS`; GAP's top-down
//! step without the bottom-up switch), computing each reached vertex's parent.
//!
//! Simulated data: the CSR arrays, `parent` (i32 per vertex, GAP's `pvector<NodeID>`), the
//! sliding frontier `queue` (u32 per vertex) and a 64 KiB local queue buffer per thread.
//!
//! Per frontier vertex u: load `queue[i]`, `offsets[u]`, `offsets[u+1]`; per edge: load
//! `cols[e]`, load `parent[v]`; if unvisited, CAS `parent[v] = u` (a store) and push v on the
//! thread's local queue (a store). Instruction estimates (x86-64, -O2): queue load 4 (loop
//! control + load), offsets 3 + 2, `cols` 4 (load, pointer bump, compare, branch), `parent` 4
//! (extend, load, test, branch), CAS 5 (mov, lock cmpxchg, branch, scout-count add), push 4.

use super::csr::Graph;
use super::engine::{alloc, alloc_init, Dynamic, Frontier, Kernel, Lane, Runner, Walk};
use super::{common, graph_params, source, NONE, SORTED_PARAM, SOURCE_PARAM};
use crate::error::Result;
use crate::workload::{Params, Vm, Workload, WorkloadEntry};

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "bfs",
    description: "GraphBIG BFS: top-down level-synchronous breadth-first search over an R-MAT CSR graph",
    params: graph_params!(SOURCE_PARAM, SORTED_PARAM),
    build,
};

/// Kernel bytes per vertex: parent (4) + queue (4).
const PER_VERTEX: f64 = 8.0;

const IP_Q: u64 = 0x41_0000;
const IP_OFF: u64 = 0x41_0010;
const IP_COL: u64 = 0x41_0020;
const IP_PARENT: u64 = 0x41_0030;
const IP_CAS: u64 = 0x41_0040;

fn build(p: &Params, seed: u64) -> Result<Box<dyn Workload>> {
    Ok(Box::new(runner(p, seed)?))
}

/// Builds the BFS runner (public to the crate for tests).
pub(crate) fn runner(p: &Params, seed: u64) -> Result<Runner<Bfs>> {
    let (spec, opts) = common(p, seed, PER_VERTEX, false, p.bool("sorted")?)?;
    let g = Graph::new(spec);
    let src = source(p, &g, seed)?;
    let k = Bfs::new(&g, src, opts.threads);
    Ok(Runner::new(g, k, opts))
}

/// BFS state.
pub struct Bfs {
    /// Parent of every vertex (`u32::MAX` = not reached; the source is its own parent).
    pub parent: Vec<u32>,
    /// Every reached vertex in BFS order.
    pub queue: Frontier,
    /// Index in `queue.items` where each level starts.
    pub level_starts: Vec<usize>,
    threads: usize,
    sched: Dynamic,
    walks: Vec<Walk>,
    parent_at: u64,
}

impl Bfs {
    /// A BFS from `source` with `threads` threads.
    pub fn new(g: &Graph, source: u32, threads: usize) -> Bfs {
        let mut parent = vec![NONE; g.n() as usize];
        parent[source as usize] = source;
        let mut queue = Frontier::default();
        queue.seed(source);
        let mut sched = Dynamic::default();
        sched.reset(1);
        Bfs { parent, queue, level_starts: vec![0], threads, sched, walks: (0..threads).map(|_| Walk::default()).collect(), parent_at: 0 }
    }

    /// BFS level of every vertex (`u32::MAX` = not reached).
    pub fn levels(&self) -> Vec<u32> {
        let mut lv = vec![NONE; self.parent.len()];
        for (l, &s) in self.level_starts.iter().enumerate() {
            let e = self.level_starts.get(l + 1).copied().unwrap_or(self.queue.items.len());
            for &v in &self.queue.items[s..e] {
                lv[v as usize] = l as u32;
            }
        }
        lv
    }
}

impl Kernel for Bfs {
    fn map(&mut self, g: &Graph, vm: &mut dyn Vm) -> Result<()> {
        let globals = alloc(vm, 4096)?;
        self.parent_at = alloc_init(vm, 4 * g.n())?;
        self.queue.map(vm, g.n(), self.threads, globals)
    }

    fn step(&mut self, g: &Graph, t: usize, lane: &mut Lane) -> bool {
        let Bfs { parent, queue, sched, walks, parent_at, .. } = self;
        let w = &mut walks[t];
        if !w.open {
            if w.lo == w.hi {
                let Some((a, b)) = sched.grab() else {
                    queue.flush(t, lane);
                    return false;
                };
                (w.lo, w.hi) = (queue.head as u64 + a, queue.head as u64 + b);
            }
            let i = w.lo;
            w.lo += 1;
            let u = queue.items[i as usize];
            lane.ld(queue.addr(i), 4, IP_Q, 4);
            lane.ld(g.off_addr(u), 8, IP_OFF, 3);
            lane.ld(g.off_addr(u) + 8, 8, IP_OFF + 4, 2);
            w.open(g, u);
            return true;
        }
        let (u, e0) = (w.u, w.e0);
        let edges = w.slice(g);
        w.prefetch_at(edges.clone(), parent);
        for k in edges {
            let v = w.nbr[k];
            lane.ld(g.col_addr(e0 + k as u64), 4, IP_COL, 4);
            let pa = *parent_at + 4 * u64::from(v);
            lane.ld(pa, 4, IP_PARENT, 4);
            if parent[v as usize] == NONE {
                parent[v as usize] = u;
                lane.st(pa, 4, IP_CAS, 5);
                queue.push(t, v, lane);
            }
        }
        true
    }

    fn next_phase(&mut self, _g: &Graph, _lanes: &mut [Lane]) -> bool {
        self.queue.slide();
        if self.queue.is_empty() {
            return false;
        }
        self.level_starts.push(self.queue.head);
        self.sched.reset(self.queue.len() as u64);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::graph::testutil::{count_ip, params, run};
    use std::collections::VecDeque;

    fn reference_levels(g: &Graph, s: u32) -> Vec<u32> {
        let mut lv = vec![NONE; g.n() as usize];
        lv[s as usize] = 0;
        let mut q = VecDeque::from([s]);
        let mut nb = Vec::new();
        while let Some(u) = q.pop_front() {
            g.neighbors(u, &mut nb);
            for &v in &nb {
                if lv[v as usize] == NONE {
                    lv[v as usize] = lv[u as usize] + 1;
                    q.push_back(v);
                }
            }
        }
        lv
    }

    fn check(r: &Runner<Bfs>, src: u32) {
        let (g, b) = (&r.g, &r.k);
        let lv = b.levels();
        assert_eq!(lv[src as usize], 0);
        assert_eq!(b.parent[src as usize], src);
        let mut nb = Vec::new();
        for v in 0..g.n() as u32 {
            let p = b.parent[v as usize];
            assert_eq!(p == NONE, lv[v as usize] == NONE);
            if p != NONE && v != src {
                assert_eq!(lv[v as usize], lv[p as usize] + 1, "level = parent's level + 1");
                g.neighbors(p, &mut nb);
                assert!(nb.contains(&v), "the parent edge exists");
            }
            // Directed graph: every edge out of a reached vertex leads to a reached vertex at most
            // one level deeper.
            if lv[v as usize] != NONE {
                g.neighbors(v, &mut nb);
                for &x in &nb {
                    assert!(lv[x as usize] != NONE && lv[x as usize] <= lv[v as usize] + 1);
                }
            }
        }
        assert_eq!(lv, reference_levels(g, src), "levels are the unique BFS distances");
    }

    #[test]
    fn levels_and_parents_are_a_bfs_tree() {
        let p = params("bfs", &[("vertices", "2000"), ("max_accesses", "0")]);
        let mut r = runner(&p, 7).unwrap();
        let src = r.k.queue.items[0];
        let streams = run(&mut r);
        check(&r, src);
        let reached = r.k.parent.iter().filter(|&&x| x != NONE).count();
        assert!(reached > 500, "the source reaches the giant out-component ({reached} of 2000)");
        // One cols load per edge of every reached vertex.
        let edges: u64 = r.k.queue.items.iter().map(|&v| r.g.degree(v)).sum();
        assert_eq!(count_ip(&streams, IP_COL) as u64, edges);
    }

    #[test]
    fn two_threads_do_the_same_search() {
        let p1 = params("bfs", &[("vertices", "2000"), ("max_accesses", "0"), ("sorted", "true")]);
        let p2 = params("bfs", &[("vertices", "2000"), ("max_accesses", "0"), ("sorted", "true"), ("threads", "2")]);
        let (mut r1, mut r2) = (runner(&p1, 3).unwrap(), runner(&p2, 3).unwrap());
        let s1 = run(&mut r1);
        let s2 = run(&mut r2);
        check(&r2, r2.k.queue.items[0]);
        assert_eq!(r1.k.levels(), r2.k.levels());
        assert_eq!(count_ip(&s1, IP_COL), count_ip(&s2, IP_COL));
        assert!(s2.iter().all(|s| !s.is_empty()), "both threads work");
        let mut r3 = runner(&p2, 3).unwrap();
        assert_eq!(run(&mut r3), s2, "two-thread streams are deterministic");
    }

    /// A consumer that drains one thread completely before the other (far from the canonical
    /// order) still gets a complete, correct search with bounded buffering.
    #[test]
    fn draining_one_thread_at_a_time_terminates() {
        use crate::trace::Access;
        use crate::workload::testvm::TestVm;
        let p = params("bfs", &[("vertices", "2000"), ("max_accesses", "0"), ("threads", "2")]);
        let mut r = runner(&p, 3).unwrap();
        r.backlog = 500;
        let mut vm = TestVm::new();
        r.setup(&mut vm).unwrap();
        let mut buf = vec![Access::default(); 64];
        let (mut cols, mut spins) = (0, 0);
        for t in 0..2 {
            loop {
                let n = r.fill(t, &mut buf, &mut vm).unwrap();
                if n == 0 {
                    break;
                }
                assert!(buf[..n].iter().all(|a| vm.contains(a.vaddr, u64::from(a.size))));
                cols += buf[..n].iter().filter(|a| a.ip == IP_COL).count();
                spins += buf[..n].iter().filter(|a| a.ip == crate::workload::graph::engine::IP_SPIN).count();
            }
        }
        check(&r, r.k.queue.items[0]);
        let edges: u64 = r.k.queue.items.iter().map(|&v| r.g.degree(v)).sum();
        assert_eq!(cols as u64, edges);
        assert!(spins > 0, "the thread asked for out of turn waited at a barrier");
    }
}
