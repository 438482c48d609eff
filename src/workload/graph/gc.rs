//! Graph colouring by Jones–Plassmann rounds (GraphBIG's `bench_graphColoring`): every vertex has
//! a random priority; in round r each uncoloured vertex whose uncoloured out-neighbours all have
//! lower priority takes colour r; the rest go to the next round's worklist.
//!
//! GraphBIG's round only looks at out-neighbours, which is a proper colouring only on a symmetric
//! graph. Our graph is directed (the in-edges are not stored), so a second pass per round resolves
//! the pairs the first pass cannot see: every vertex coloured this round walks its out-edges and
//! un-colours any out-neighbour that also took colour r (that neighbour has the lower priority,
//! or the first pass would not have coloured the walker), sending it to the next round. The
//! highest-priority uncoloured vertex is never un-coloured, so every round makes progress.
//!
//! Simulated data: the CSR arrays, `prio` and `color` (u32 per vertex), two worklists (u32 per
//! vertex, swapped each round) filled through per-thread 64 KiB local buffers.
//!
//! Pass 1, per worklist entry: load `work[i]`, `prio[u]`, `offsets[u]`, `offsets[u+1]`; per edge
//! load `cols[e]` and `color[v]`, and for an uncoloured v `prio[v]` (stopping at the first
//! higher priority); then store `color[u]` or push u. Pass 2, per entry: load `work[i]` and
//! `color[u]`; for a vertex coloured this round load offsets and per edge `cols[e]` and
//! `color[v]`, storing `color[v]` and pushing v on a conflict. Dynamic schedule. Instruction
//! estimates (-O2): worklist 4, `prio[u]` 2, offsets 3 + 2, `cols` 4, `color[v]` 3, `prio[v]` 4
//! (load, two compares for the id tie-break), colour store 2, push 4, pass-2 `color[u]` 3.

use super::csr::Graph;
use super::engine::{alloc, alloc_init, Dynamic, Frontier, Kernel, Lane, Runner, Walk};
use super::{common, graph_params, NONE, SORTED_PARAM};
use crate::error::Result;
use crate::rng::hash2;
use crate::workload::{Params, Vm, Workload, WorkloadEntry};

/// Registry entry.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "gc",
    description: "GraphBIG graph coloring: Jones-Plassmann rounds with random priorities over an R-MAT CSR graph",
    params: graph_params!(SORTED_PARAM),
    build,
};

/// Kernel bytes per vertex: prio 4 + color 4 + two worklists 8.
const PER_VERTEX: f64 = 16.0;

const IP_WORK: u64 = 0x41_7000;
const IP_PRIO: u64 = 0x41_7008;
const IP_OFF: u64 = 0x41_7010;
const IP_COL: u64 = 0x41_7020;
const IP_COLOR: u64 = 0x41_7028;
const IP_PRIOV: u64 = 0x41_7030;
const IP_SET: u64 = 0x41_7038;
const IP_WORK2: u64 = 0x41_7040;
const IP_COLOR_U: u64 = 0x41_7048;
const IP_OFF2: u64 = 0x41_7050;
const IP_COL2: u64 = 0x41_7060;
const IP_COLOR2: u64 = 0x41_7068;
const IP_DROP: u64 = 0x41_7070;

fn build(p: &Params, seed: u64) -> Result<Box<dyn Workload>> {
    Ok(Box::new(runner(p, seed)?))
}

/// Builds the colouring runner.
pub(crate) fn runner(p: &Params, seed: u64) -> Result<Runner<Gc>> {
    let (spec, opts) = common(p, seed, PER_VERTEX, false, p.bool("sorted")?)?;
    let g = Graph::new(spec);
    let k = Gc::new(&g, hash2(seed, 0x6763), opts.threads);
    Ok(Runner::new(g, k, opts))
}

/// Colouring state.
pub struct Gc {
    /// Colour of every vertex (`u32::MAX` = not yet coloured); colour r is given in round r.
    pub color: Vec<u32>,
    /// Rounds run.
    pub rounds: u32,
    cur: Frontier,
    next: Frontier,
    second_pass: bool,
    prio_seed: u64,
    sched: Dynamic,
    walks: Vec<Walk>,
    found: Vec<bool>,
    prio_at: u64,
    color_at: u64,
}

impl Gc {
    /// A colouring of `g` with priorities from `prio_seed`.
    pub fn new(g: &Graph, prio_seed: u64, threads: usize) -> Gc {
        let mut cur = Frontier::default();
        for v in 0..g.n() as u32 {
            cur.seed(v);
        }
        let mut sched = Dynamic::default();
        sched.reset(g.n());
        Gc {
            color: vec![NONE; g.n() as usize],
            rounds: 1,
            cur,
            next: Frontier::default(),
            second_pass: false,
            prio_seed,
            sched,
            walks: (0..threads).map(|_| Walk::default()).collect(),
            found: vec![false; threads],
            prio_at: 0,
            color_at: 0,
        }
    }

    /// GraphBIG's priority: a random 32-bit number per vertex (initialised before the kernel).
    fn prio(&self, v: u32) -> u32 {
        hash2(self.prio_seed, u64::from(v)) as u32
    }

    /// Whether `a` outranks `b`: higher random value, ties to the smaller id.
    fn beats(&self, a: u32, b: u32) -> bool {
        let (pa, pb) = (self.prio(a), self.prio(b));
        pa > pb || (pa == pb && a < b)
    }

    fn round(&self) -> u32 {
        self.rounds - 1
    }

    fn take(&mut self, t: usize) -> Option<u64> {
        let w = &mut self.walks[t];
        if w.lo == w.hi {
            let (a, b) = self.sched.grab()?;
            (w.lo, w.hi) = (a, b);
        }
        w.lo += 1;
        Some(w.lo - 1)
    }

    fn first_pass(&mut self, g: &Graph, t: usize, lane: &mut Lane) -> bool {
        let r = self.round();
        if !self.walks[t].open {
            let Some(i) = self.take(t) else {
                self.next.flush(t, lane);
                return false;
            };
            let u = self.cur.items[i as usize];
            lane.ld(self.cur.addr(i), 4, IP_WORK, 4);
            lane.ld(self.prio_at + 4 * u64::from(u), 4, IP_PRIO, 2);
            lane.ld(g.off_addr(u), 8, IP_OFF, 3);
            lane.ld(g.off_addr(u) + 8, 8, IP_OFF + 4, 2);
            self.found[t] = false;
            if self.walks[t].open(g, u).1 == 0 {
                self.color[u as usize] = r;
                lane.st(self.color_at + 4 * u64::from(u), 4, IP_SET, 2);
            }
            return true;
        }
        let (u, e0) = (self.walks[t].u, self.walks[t].e0);
        let range = self.walks[t].slice(g);
        for k in range {
            let v = self.walks[t].nbr[k];
            lane.ld(g.col_addr(e0 + k as u64), 4, IP_COL, 4);
            lane.ld(self.color_at + 4 * u64::from(v), 4, IP_COLOR, 3);
            if self.color[v as usize] < r {
                continue;
            }
            lane.ld(self.prio_at + 4 * u64::from(v), 4, IP_PRIOV, 4);
            if self.beats(v, u) {
                self.found[t] = true;
                self.walks[t].open = false;
                break;
            }
        }
        if !self.walks[t].open {
            if self.found[t] {
                self.next.push(t, u, lane);
            } else {
                self.color[u as usize] = r;
                lane.st(self.color_at + 4 * u64::from(u), 4, IP_SET, 2);
            }
        }
        true
    }

    fn second_pass(&mut self, g: &Graph, t: usize, lane: &mut Lane) -> bool {
        let r = self.round();
        if !self.walks[t].open {
            let Some(i) = self.take(t) else {
                self.next.flush(t, lane);
                return false;
            };
            let u = self.cur.items[i as usize];
            lane.ld(self.cur.addr(i), 4, IP_WORK2, 4);
            lane.ld(self.color_at + 4 * u64::from(u), 4, IP_COLOR_U, 3);
            if self.color[u as usize] == r {
                lane.ld(g.off_addr(u), 8, IP_OFF2, 3);
                lane.ld(g.off_addr(u) + 8, 8, IP_OFF2 + 4, 2);
                self.walks[t].open(g, u);
            }
            return true;
        }
        let (u, e0) = (self.walks[t].u, self.walks[t].e0);
        let range = self.walks[t].slice(g);
        for k in range {
            let v = self.walks[t].nbr[k];
            lane.ld(g.col_addr(e0 + k as u64), 4, IP_COL2, 4);
            if v == u {
                continue;
            }
            lane.ld(self.color_at + 4 * u64::from(v), 4, IP_COLOR2, 3);
            if self.color[v as usize] == r {
                self.color[v as usize] = NONE;
                lane.st(self.color_at + 4 * u64::from(v), 4, IP_DROP, 2);
                self.next.push(t, v, lane);
            }
        }
        true
    }
}

impl Kernel for Gc {
    fn map(&mut self, g: &Graph, vm: &mut dyn Vm) -> Result<()> {
        let globals = alloc(vm, 4096)?;
        self.prio_at = alloc_init(vm, 4 * g.n())?;
        self.color_at = alloc_init(vm, 4 * g.n())?;
        let t = self.walks.len();
        self.cur.map(vm, g.n(), t, globals)?;
        self.next.map(vm, g.n(), t, globals + 64)
    }

    fn step(&mut self, g: &Graph, t: usize, lane: &mut Lane) -> bool {
        if self.second_pass {
            self.second_pass(g, t, lane)
        } else {
            self.first_pass(g, t, lane)
        }
    }

    fn next_phase(&mut self, _g: &Graph, _lanes: &mut [Lane]) -> bool {
        if !self.second_pass {
            self.second_pass = true;
            self.sched.reset(self.cur.len() as u64);
            return true;
        }
        std::mem::swap(&mut self.cur, &mut self.next);
        self.next.clear();
        self.cur.slide();
        if self.cur.is_empty() {
            return false;
        }
        self.second_pass = false;
        self.rounds += 1;
        self.sched.reset(self.cur.len() as u64);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::graph::testutil::{params, run};

    fn check(g: &Graph, color: &[u32]) {
        let mut nb = Vec::new();
        for u in 0..g.n() as u32 {
            assert_ne!(color[u as usize], NONE, "vertex {u} uncoloured");
            g.neighbors(u, &mut nb);
            for &v in &nb {
                assert!(v == u || color[u as usize] != color[v as usize], "edge ({u},{v}) has one colour at both ends");
            }
        }
    }

    #[test]
    fn coloring_is_proper() {
        let p = params("gc", &[("vertices", "1500"), ("max_accesses", "0")]);
        let mut r = runner(&p, 17).unwrap();
        run(&mut r);
        check(&r.g, &r.k.color);
        let used = r.k.color.iter().max().unwrap() + 1;
        assert_eq!(used, r.k.rounds);
        assert!(used < 200, "{used} colours");
    }

    #[test]
    fn two_threads_color_properly() {
        let p = params("gc", &[("vertices", "1500"), ("max_accesses", "0"), ("threads", "2"), ("sorted", "true")]);
        let mut r = runner(&p, 17).unwrap();
        let s = run(&mut r);
        check(&r.g, &r.k.color);
        assert!(s.iter().all(|x| !x.is_empty()));
    }
}
