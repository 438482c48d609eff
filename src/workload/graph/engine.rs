//! The machinery shared by the graph kernels: per-thread access buffers with an instruction clock,
//! the deterministic scheduler that interleaves threads, work distribution (OpenMP-style static and
//! dynamic schedules), and GAP-style frontier queues.
//!
//! Threads. A kernel is written as bulk-synchronous phases (a BFS level, a PageRank sweep); within
//! a phase every thread repeatedly does a small step of work (one vertex, or up to [`SLICE`] of its
//! edges) and records its accesses in its own [`Lane`]. The [`Runner`] always advances the thread
//! whose instruction clock is lowest, so the threads progress at the same rate in a fixed order
//! whatever order the simulator asks for their accesses in: races (which thread claims a vertex
//! first) resolve the same way every run, and each thread's stream is a pure function of the
//! parameters and seed (so every translation design sees the same streams). When every thread has
//! finished a phase the kernel's barrier runs and the next phase starts; waiting at a barrier
//! emits nothing.
//!
//! The one exception bounds host memory: the simulator schedules threads by simulated cycles, not
//! instructions, so if another thread's undelivered backlog reaches [`BACKLOG`] accesses, the
//! thread being asked for steps out of turn (or, waiting at a barrier, emits a few spin-loop
//! loads of the runtime's barrier word). Streams then depend on the simulator's timing.

use super::csr::{Graph, Src};
use crate::error::Result;
use crate::trace::{Access, AccessKind};
use crate::workload::{MapFlags, Vm, Workload};

/// Most edges of one vertex handled in one step (bounds buffer growth on hubs with millions of
/// edges and keeps the thread interleaving fine-grained).
pub const SLICE: usize = 64;
/// Work items per grab of a dynamic schedule (GAP's `schedule(dynamic, 64)`).
pub const CHUNK: u64 = 64;
/// Undelivered accesses of another thread beyond which the thread the simulator asks for stops
/// waiting for its canonical turn (bounds host memory at ~32 MiB per thread).
pub const BACKLOG: usize = 1 << 20;
/// Spin-loop iterations emitted per request while a thread waits at a barrier out of turn.
const SPINS: usize = 16;
/// Spin requests per thread and barrier; after them the others' work is generated (buffered) so
/// that a consumer draining one thread at a time still terminates.
const MAX_SPIN_REQUESTS: u32 = 64;
/// Instruction pointer of the barrier spin loop.
pub(crate) const IP_SPIN: u64 = 0x40_9000;

/// One thread's recorded-but-not-delivered accesses and its instruction clock.
#[derive(Debug, Default)]
pub struct Lane {
    buf: Vec<Access>,
    pos: usize,
    carry: u32,
    /// Instructions this thread has retired so far (the scheduler's notion of its time).
    pub clock: u64,
}

impl Lane {
    #[inline]
    fn push(&mut self, kind: AccessKind, vaddr: u64, size: u8, ip: u64, instrs: u32) {
        let instrs = (instrs + self.carry).max(1);
        self.carry = 0;
        self.clock += u64::from(instrs);
        self.buf.push(Access { cpu: 0, asid: 0, ip, vaddr, kind, size, instrs });
    }

    /// Records a load of `size` bytes at `vaddr` by instruction `ip`, retiring with `instrs`
    /// instructions since the previous access (plus any counted by [`Lane::work`]).
    #[inline]
    pub fn ld(&mut self, vaddr: u64, size: u8, ip: u64, instrs: u32) {
        self.push(AccessKind::Load, vaddr, size, ip, instrs);
    }

    /// Records a store (see [`Lane::ld`]).
    #[inline]
    pub fn st(&mut self, vaddr: u64, size: u8, ip: u64, instrs: u32) {
        self.push(AccessKind::Store, vaddr, size, ip, instrs);
    }

    /// Counts `n` instructions without a memory access (charged to the next access).
    #[inline]
    pub fn work(&mut self, n: u32) {
        self.carry += n;
    }

    /// Records a `memcpy` of `bytes` from `src` to `dst`: loads and stores of at most 64 bytes that
    /// never cross a cache line on either side (so never a page), `instrs` per chunk each.
    pub fn copy(&mut self, mut src: u64, mut dst: u64, mut bytes: u64, ip: u64, instrs: u32) {
        while bytes > 0 {
            let n = bytes.min(64 - src % 64).min(64 - dst % 64);
            self.ld(src, n as u8, ip, instrs);
            self.st(dst, n as u8, ip + 4, instrs);
            src += n;
            dst += n;
            bytes -= n;
        }
    }

    /// Records a `memset`-style fill of `bytes` at `dst`, one store per cache line.
    pub fn fill(&mut self, mut dst: u64, mut bytes: u64, ip: u64, instrs: u32) {
        while bytes > 0 {
            let n = bytes.min(64 - dst % 64);
            self.st(dst, n as u8, ip, instrs);
            dst += n;
            bytes -= n;
        }
    }

    /// Accesses recorded in total (delivered or not) since the buffer was last compacted.
    #[inline]
    fn len(&self) -> usize {
        self.buf.len()
    }

    #[inline]
    fn pending(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Drops delivered accesses (all of them once the lane is drained, or a large delivered prefix
    /// of a lane that never quite drains), so the buffer holds only what is pending; indices
    /// recorded after this call start at `len()`.
    fn compact(&mut self) {
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos >= 1 << 16 && 2 * self.pos >= self.buf.len() {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
    }

    fn drain(&mut self, out: &mut [Access], cpu: u16) -> usize {
        let n = self.pending().min(out.len());
        for (o, a) in out[..n].iter_mut().zip(&self.buf[self.pos..self.pos + n]) {
            *o = Access { cpu, ..*a };
        }
        self.pos += n;
        n
    }
}

/// A graph kernel written as phases of per-thread steps.
pub trait Kernel {
    /// Maps the kernel's own arrays (the graph's are already mapped).
    fn map(&mut self, g: &Graph, vm: &mut dyn Vm) -> Result<()>;
    /// Does one small step of thread `t`'s share of the current phase, recording its accesses in
    /// `lane`. Returns false when `t` has no work left in this phase (it may still record accesses
    /// in that call, e.g. flushing a local queue).
    fn step(&mut self, g: &Graph, t: usize, lane: &mut Lane) -> bool;
    /// Runs at the barrier after every thread finished the phase: starts the next phase (recording
    /// any serial work in `lanes`) or returns false when the algorithm is complete.
    fn next_phase(&mut self, g: &Graph, lanes: &mut [Lane]) -> bool;
}

/// Run-level settings every graph workload shares.
#[derive(Clone, Copy, Debug)]
pub struct RunOpts {
    /// Threads (streams).
    pub threads: usize,
    /// Accesses to generate and discard before recording (fast-forward).
    pub skip: u64,
    /// Accesses to record in total over all threads (0 = run to completion).
    pub cap: u64,
}

/// A graph and a kernel, driven as a [`Workload`].
pub struct Runner<K> {
    /// The graph.
    pub g: Graph,
    /// The kernel (its state is the algorithm's output once the run is over).
    pub k: K,
    opts: RunOpts,
    lanes: Vec<Lane>,
    busy: Vec<bool>,
    done: bool,
    skipped: u64,
    recorded: u64,
    barrier_at: u64,
    spun: Vec<u32>,
    /// Backlog threshold (see [`BACKLOG`]; lowered by tests).
    pub(crate) backlog: usize,
}

impl<K: Kernel> Runner<K> {
    /// A runner over `g` with kernel `k`.
    pub fn new(g: Graph, k: K, opts: RunOpts) -> Runner<K> {
        let t = opts.threads;
        Runner {
            g,
            k,
            opts,
            lanes: (0..t).map(|_| Lane::default()).collect(),
            busy: vec![true; t],
            done: false,
            skipped: 0,
            recorded: 0,
            barrier_at: 0,
            spun: vec![0; t],
            backlog: BACKLOG,
        }
    }

    /// Applies fast-forward and the cap to the accesses lane `s` recorded since index `from`.
    fn account(&mut self, s: usize, from: usize) {
        let lane = &mut self.lanes[s];
        let mut new = lane.len() - from;
        if self.skipped < self.opts.skip {
            let d = (self.opts.skip - self.skipped).min(new as u64) as usize;
            lane.buf.drain(from..from + d);
            self.skipped += d as u64;
            new -= d;
        }
        if self.opts.cap > 0 && self.recorded + new as u64 >= self.opts.cap {
            let keep = (self.opts.cap - self.recorded) as usize;
            lane.buf.truncate(from + keep);
            self.recorded = self.opts.cap;
            self.done = true;
        } else {
            self.recorded += new as u64;
        }
    }

    /// Advances the algorithm by one step of the thread that is furthest behind, or runs the
    /// barrier when every thread has finished the phase.
    fn advance(&mut self) {
        match (0..self.opts.threads).filter(|&s| self.busy[s]).min_by_key(|&s| (self.lanes[s].clock, s)) {
            Some(s) => self.step_thread(s),
            None => self.barrier(),
        }
    }

    /// One step of thread `s`.
    fn step_thread(&mut self, s: usize) {
        self.lanes[s].compact();
        let from = self.lanes[s].len();
        if !self.k.step(&self.g, s, &mut self.lanes[s]) {
            self.busy[s] = false;
        }
        self.account(s, from);
    }

    /// Every thread has finished the phase: the kernel's barrier work and the next phase.
    fn barrier(&mut self) {
        let from: Vec<usize> = self
            .lanes
            .iter_mut()
            .map(|l| {
                l.compact();
                l.len()
            })
            .collect();
        if self.k.next_phase(&self.g, &mut self.lanes) {
            self.busy.fill(true);
        } else {
            self.done = true;
        }
        for (s, f) in from.into_iter().enumerate() {
            self.account(s, f);
        }
        self.spun.fill(0);
    }

    /// Thread `t` waits at the barrier: a few iterations of the runtime's spin loop (load the
    /// barrier word, pause, compare, branch).
    fn spin(&mut self, t: usize) {
        self.lanes[t].compact();
        let from = self.lanes[t].len();
        for _ in 0..SPINS {
            self.lanes[t].ld(self.barrier_at, 4, IP_SPIN, 4);
        }
        self.spun[t] += 1;
        self.account(t, from);
    }

    /// Runs the whole workload, handing every access to `sink` (thread, access); for tests and
    /// tools that do not need the simulator's interleaving.
    pub fn run_all(&mut self, vm: &mut dyn Vm, mut sink: impl FnMut(usize, &Access)) -> Result<()> {
        let mut buf = vec![Access::default(); 512];
        let mut live = vec![true; self.opts.threads];
        while live.iter().any(|&l| l) {
            for (t, alive) in live.iter_mut().enumerate() {
                if *alive {
                    let n = self.fill(t, &mut buf, vm)?;
                    *alive = n > 0;
                    buf[..n].iter().for_each(|a| sink(t, a));
                }
            }
        }
        Ok(())
    }
}

impl<K: Kernel> Workload for Runner<K> {
    fn setup(&mut self, vm: &mut dyn Vm) -> Result<()> {
        self.g.map(vm)?;
        self.barrier_at = alloc(vm, 4096)?;
        self.k.map(&self.g, vm)
    }

    fn threads(&self) -> usize {
        self.opts.threads
    }

    fn fill(&mut self, thread: usize, buf: &mut [Access], _vm: &mut dyn Vm) -> Result<usize> {
        if thread >= self.opts.threads || buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.lanes[thread].pending() > 0 {
                return Ok(self.lanes[thread].drain(buf, thread as u16));
            }
            if self.done {
                return Ok(0);
            }
            // The simulator runs threads by simulated time, the canonical order by instruction
            // count; when they drift far apart (another thread holds a large undelivered backlog)
            // the thread asked for runs out of turn, or spins if it is waiting at the barrier,
            // instead of buffering the others' work without bound.
            let backlog = self.lanes.iter().enumerate().any(|(s, l)| s != thread && l.pending() >= self.backlog);
            if backlog && self.busy[thread] {
                self.step_thread(thread);
            } else if backlog && self.spun[thread] < MAX_SPIN_REQUESTS && self.busy.iter().any(|&b| b) {
                self.spin(thread);
            } else {
                self.advance();
            }
        }
    }
}

/// `n` zeros on host pages already written. A large `vec![0.0; n]` comes from the allocator
/// as untouched memory, so a kernel that reads an entry before writing it (pr's `next[v] +=`)
/// maps the host kernel's shared zero page, and its write faults again to copy that page and
/// flush the TLB of every core the process runs on. With a study's second run on the other
/// core, those flushes took half of `reproduce utopia`'s CPU time (its pr runs at 8 GiB;
/// docs/performance.md, "Host arrays written before use").
pub fn written_zeros<T: Clone + Default>(n: usize) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    // Opaque to the optimiser: the fill below must not become a zeroed allocation again.
    std::hint::black_box(&mut v);
    v.resize(n, T::default());
    v
}

/// `n` copies of one `f32` on host pages that stay untouched until used. Each entry is kept
/// as its bits XOR the start value's, so the start state is all-zero bytes, which a large
/// allocation gets from the host kernel without writing it; a filled `vec![x; n]` writes (and
/// faults in) every page at once. For an array a run reads only a little of before writing it:
/// pr's `rank` at 8 GiB is 400 MB, of which a study's 4 M-access run reads a few pages
/// (docs/performance.md, "pr's ranks kept untouched"). The values read back are exactly those
/// of the filled array (XOR with a constant is its own inverse). An array whose entries are
/// read at random before being written gains nothing: each read maps the host's zero page and
/// the later write faults again ([`written_zeros`]).
pub struct Untouched32 {
    bits: Vec<u32>,
    start: u32,
}

impl Untouched32 {
    /// `n` entries of `value`.
    pub fn new(n: usize, value: f32) -> Untouched32 {
        Untouched32 { bits: vec![0; n], start: value.to_bits() }
    }

    /// Entry `i`.
    #[inline(always)]
    pub fn get(&self, i: usize) -> f32 {
        f32::from_bits(self.bits[i] ^ self.start)
    }

    /// Sets entry `i`.
    #[inline(always)]
    pub fn set(&mut self, i: usize, v: f32) {
        self.bits[i] = v.to_bits() ^ self.start;
    }

    /// Every entry, in order.
    pub fn iter(&self) -> impl Iterator<Item = f32> + '_ {
        self.bits.iter().map(|&b| f32::from_bits(b ^ self.start))
    }
}

/// Maps `len` bytes of per-run data (the program's malloc), at least one page.
pub fn alloc(vm: &mut dyn Vm, len: u64) -> Result<u64> {
    vm.mmap(len.max(4096), MapFlags::default())
}

/// Maps and populates `len` bytes (an array the program initialises before the kernel; the
/// initialisation loop itself is not simulated).
pub fn alloc_init(vm: &mut dyn Vm, len: u64) -> Result<u64> {
    let a = alloc(vm, len)?;
    vm.populate(a, len.max(4096))?;
    Ok(a)
}

/// A dynamic schedule: threads grab [`CHUNK`] consecutive items at a time from a shared counter.
#[derive(Debug, Default)]
pub struct Dynamic {
    next: u64,
    end: u64,
}

impl Dynamic {
    /// Restarts the schedule over items `0..len`.
    pub fn reset(&mut self, len: u64) {
        self.next = 0;
        self.end = len;
    }

    /// The next chunk, if any is left.
    pub fn grab(&mut self) -> Option<(u64, u64)> {
        (self.next < self.end).then(|| {
            let a = self.next;
            self.next = (a + CHUNK).min(self.end);
            (a, self.next)
        })
    }
}

/// Thread `t`'s share of items `0..len` under a static schedule (contiguous blocks, as GraphBIG
/// splits its vertex loops and OpenMP's default `schedule(static)` does).
pub fn static_share(len: u64, threads: usize, t: usize) -> (u64, u64) {
    let per = len.div_ceil(threads as u64);
    ((per * t as u64).min(len), (per * (t as u64 + 1)).min(len))
}

/// One thread's position in a phase: the items of its current chunk and the vertex whose edges it
/// is walking.
#[derive(Debug, Default)]
pub struct Walk {
    /// Next item of the current chunk.
    pub lo: u64,
    /// End of the current chunk.
    pub hi: u64,
    /// The vertex whose edges are being walked.
    pub u: u32,
    /// Whether a vertex is open (its remaining edges still to walk).
    pub open: bool,
    /// Its row offset.
    pub e0: u64,
    /// Its out-degree.
    pub deg: u64,
    /// Index of the next edge to walk.
    pub k: usize,
    /// Its adjacency list as far as generated: all of it for sorted lists, otherwise up to the
    /// end of the current slice (a kernel that stops early never pays for a hub's whole list).
    pub nbr: Vec<u32>,
    src: Option<Src>,
}

impl Walk {
    /// Opens vertex `u`. Returns its row offset and degree.
    pub fn open(&mut self, g: &Graph, u: u32) -> (u64, u64) {
        self.u = u;
        self.e0 = g.offset(u);
        self.deg = g.degree(u);
        self.k = 0;
        self.open = self.deg > 0;
        if g.sorted() {
            g.neighbors(u, &mut self.nbr);
            self.src = None;
        } else {
            self.nbr.clear();
            self.src = Some(g.src(u));
        }
        (self.e0, self.deg)
    }

    /// The next slice of edge indices to walk (relative to the row, at most [`SLICE`]), with
    /// `nbr` generated through it; closes the vertex when the slice is its last.
    pub fn slice(&mut self, g: &Graph) -> std::ops::Range<usize> {
        let a = self.k;
        self.k = (a + SLICE).min(self.deg as usize);
        if let Some(src) = &self.src {
            while self.nbr.len() < self.k {
                self.nbr.push(g.nbr(src, self.nbr.len() as u64));
            }
        }
        if self.k == self.deg as usize {
            self.open = false;
        }
        a..self.k
    }

    /// Host prefetch of `per_vertex[v]` for each neighbour `v` in `edges` (a range
    /// [`Walk::slice`] returned). The kernels read a per-vertex array (BFS's parents, SSSP's
    /// distances) at each neighbour, at random, and that read missed the host's caches on nearly
    /// every edge (perf: 92 % of BFS's step on that one load). Prefetching the whole slice before
    /// walking it overlaps those misses. A hint: nothing simulated reads it.
    #[inline]
    pub fn prefetch_at<T>(&self, edges: std::ops::Range<usize>, per_vertex: &[T]) {
        for &v in &self.nbr[edges] {
            if let Some(x) = per_vertex.get(v as usize) {
                crate::mem::host_prefetch(x);
            }
        }
    }
}

/// Entries of a thread-local queue buffer before it is flushed (GAP's `QueueBuffer` default).
pub const LOCAL_QUEUE: u64 = 16384;

/// A frontier queue as GAP keeps it: one shared array of u32 ids whose current window is being
/// processed while the next window is appended after it; each thread appends into its own local
/// buffer and flushes it in bulk (one atomic add on the shared tail and a `memcpy`).
#[derive(Debug, Default)]
pub struct Frontier {
    base: u64,
    tail_addr: u64,
    cap: u64,
    /// Every id ever enqueued (host copy of the shared array).
    pub items: Vec<u32>,
    /// Start of the current window.
    pub head: usize,
    /// End of the current window.
    pub tail: usize,
    locals: Vec<(u64, Vec<u32>)>,
}

/// Instruction pointers of the queue's own code.
const IP_QPUSH: u64 = 0x40_8000;
const IP_QTAIL: u64 = 0x40_8010;
const IP_QCOPY: u64 = 0x40_8020;

impl Frontier {
    /// Maps a queue of `cap` ids with `threads` local buffers; the shared tail counter lives at
    /// `tail_addr` (a word in the kernel's globals page).
    pub fn map(&mut self, vm: &mut dyn Vm, cap: u64, threads: usize, tail_addr: u64) -> Result<()> {
        self.cap = cap.max(1);
        self.base = alloc(vm, 4 * self.cap)?;
        self.tail_addr = tail_addr;
        self.locals = Vec::with_capacity(threads);
        for _ in 0..threads {
            self.locals.push((alloc(vm, 4 * LOCAL_QUEUE)?, Vec::new()));
        }
        Ok(())
    }

    /// Address of shared slot `i`.
    #[inline]
    pub fn addr(&self, i: u64) -> u64 {
        self.base + 4 * (i % self.cap)
    }

    /// Current window length.
    pub fn len(&self) -> usize {
        self.tail - self.head
    }

    /// Whether the current window is empty.
    pub fn is_empty(&self) -> bool {
        self.tail == self.head
    }

    /// Enqueues `v` without simulating it (the program's setup, e.g. the BFS source).
    pub fn seed(&mut self, v: u32) {
        self.items.push(v);
        self.tail = self.items.len();
    }

    /// Thread `t` appends `v` to its local buffer (store, bump, compare-and-branch); a full buffer
    /// is flushed.
    #[inline]
    pub fn push(&mut self, t: usize, v: u32, lane: &mut Lane) {
        let (base, buf) = &mut self.locals[t];
        lane.st(*base + 4 * buf.len() as u64, 4, IP_QPUSH, 4);
        buf.push(v);
        if buf.len() as u64 == LOCAL_QUEUE {
            self.flush(t, lane);
        }
    }

    /// Thread `t` publishes its local buffer: atomic fetch-add on the shared tail, then a copy.
    pub fn flush(&mut self, t: usize, lane: &mut Lane) {
        let (base, buf) = &mut self.locals[t];
        if buf.is_empty() {
            return;
        }
        lane.ld(self.tail_addr, 8, IP_QTAIL, 3);
        lane.st(self.tail_addr, 8, IP_QTAIL + 4, 2);
        let at = self.items.len() as u64;
        let bytes = 4 * buf.len() as u64;
        // The window never wraps for BFS-like queues (each id enters once); if a kernel overfills,
        // the copy is split at the wrap point.
        let first = bytes.min(4 * (self.cap - at % self.cap));
        lane.copy(*base, self.base + 4 * (at % self.cap), first, IP_QCOPY, 2);
        if first < bytes {
            lane.copy(*base + first, self.base, bytes - first, IP_QCOPY, 2);
        }
        self.items.append(buf);
    }

    /// Makes everything appended since the window was set the new window (`slide_window`).
    pub fn slide(&mut self) {
        self.head = self.tail;
        self.tail = self.items.len();
    }

    /// Empties the queue (the array is reused from slot 0).
    pub fn clear(&mut self) {
        self.items.clear();
        self.head = 0;
        self.tail = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An untouched array starts as zero bytes, reads as its start value until set, and back as
    /// what was set, bit for bit (a NaN, a negative zero, the start value's own bits).
    #[test]
    fn untouched_arrays_read_their_start_value_until_set() {
        let mut a = Untouched32::new(3000, 1.0 / 3.0);
        // The start state is zero bytes: what lets the allocator hand over untouched pages.
        assert!(a.bits.iter().all(|&b| b == 0));
        assert!(a.iter().all(|x| x.to_bits() == (1.0f32 / 3.0).to_bits()));
        let odd = [f32::NAN, -0.0, 1.0 / 3.0, f32::MIN_POSITIVE, 7.5];
        for (i, &v) in odd.iter().enumerate() {
            a.set(i * 600, v);
        }
        for (i, &v) in odd.iter().enumerate() {
            assert_eq!(a.get(i * 600).to_bits(), v.to_bits());
        }
        assert_eq!(a.get(1).to_bits(), (1.0f32 / 3.0).to_bits());
        assert_eq!(a.iter().count(), 3000);
    }

    /// The kernels' zeroed arrays read as zeros of the asked length, whatever their type.
    #[test]
    fn written_zeros_are_zeros() {
        let f: Vec<f64> = written_zeros(5000);
        assert_eq!(f.len(), 5000);
        assert!(f.iter().all(|&x| x == 0.0));
        let w: Vec<u64> = written_zeros(3);
        assert_eq!(w, [0, 0, 0]);
        assert!(written_zeros::<f32>(0).is_empty());
    }
}
