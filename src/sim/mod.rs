//! Wiring a resolved configuration into a machine and running it.
//!
//! The design is dispatched once ([`run`] matches the driver kind) and everything below
//! ([`Engine`], [`step`]) is monomorphised for that driver: no dynamic call per access. Workloads
//! and trace readers are called once per batch of accesses.
//!
//! Per access: L1 TLB(s) → L2 TLB → the driver's walk timed through the caches → page fault and
//! re-walk if nothing maps it → the data access through the same caches → the timing model.
//! Cores advance in chunks; the core furthest behind in simulated time runs next, so a shared LLC
//! and DRAM see the cores' accesses interleaved in time order (to within a chunk).

pub mod progress;

use crate::arch::{Design, Registered};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::mem::{Level, MemHierarchy};
use crate::mmu::{time_walk, TlbStats, Tlbs, WalkStats, WalkerEntry};
use crate::os::{Os, ProcVm};
use crate::tapi::Path as OsPath;
use crate::tapi::{Driver, SideStart};
use crate::tapi::{Translation, WalkPlan};
use crate::timing::{Additive, TimingModel};
use crate::trace::{self, Access, AccessKind, AccessSource, TraceInput};
use crate::workload::{self, Workload};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Set by the Ctrl-C handler: the run stops at the next epoch and reports what it has.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Accesses fetched from a producer at a time.
const BATCH: usize = 4096;
/// Accesses a core runs before the scheduler picks the core furthest behind again.
const CHUNK: usize = 256;
/// How far past the next core a core whose only runnable thread is stalled moves its clock.
const IDLE_CYCLES: f64 = 1000.0;

/// Per-core counters.
#[derive(Clone, Debug, Default)]
pub struct CoreStats {
    /// Accesses simulated.
    pub accesses: u64,
    /// Loads, stores, fetches.
    pub loads: u64,
    /// Stores.
    pub stores: u64,
    /// Instruction fetches.
    pub fetches: u64,
    /// Instructions retired.
    pub instrs: u64,
    /// TLB counters.
    pub tlb: TlbStats,
    /// Walker counters.
    pub walk: WalkStats,
    /// Side-lookup counters (same shape as walks: lookups, latency, references).
    pub side: WalkStats,
    /// Side lookups that found the translation.
    pub side_hits: u64,
    /// Cycles waiting for translation (L2 TLB lookups and walks).
    pub translation_cycles: f64,
    /// Exposed data-access cycles beyond L1 hits.
    pub data_cycles: f64,
    /// Cycles of OS work charged to this core (faults).
    pub os_cycles: f64,
    /// Page faults taken by this core.
    pub faults: u64,
    /// Context switches.
    pub context_switches: u64,
    /// Walks and TLB hits compared with the ground truth.
    pub checked: u64,
}

struct Stream {
    proc: usize,
    thread: usize,
    asid: u16,
    buf: Vec<Access>,
    pos: usize,
    len: usize,
    done: bool,
}

enum Source {
    Workload(Box<dyn Workload>),
    /// A trace and how many of its threads have streams so far.
    Trace(Box<dyn AccessSource>, usize),
}

struct Core<W> {
    tlbs: Tlbs,
    wc: W,
    streams: Vec<usize>,
    cur: usize,
    quantum_left: i64,
    cycles: f64,
    stats: CoreStats,
}

/// Everything an access touches except the core running it.
struct Engine<D: Driver, T: TimingModel> {
    os: Os<D>,
    mem: MemHierarchy,
    timing: T,
    plan: WalkPlan,
    entry: WalkerEntry,
    perfect: bool,
    parallel_walk: bool,
    side_parallel: bool,
    /// The side lookup runs on every L1 TLB miss, beside the L2 TLB, not only on its misses.
    side_early: bool,
    /// A parallel walk still waits for the side lookup's miss.
    side_gates_walk: bool,
    checked: bool,
    trap_cycles: f64,
}

/// What a run produced.
pub struct RunOutput {
    /// Design name.
    pub design: String,
    /// Workload name or trace paths.
    pub workload: String,
    /// The resolved configuration.
    pub config: Config,
    /// Stopped early by Ctrl-C.
    pub interrupted: bool,
    /// Summed core counters.
    pub core: CoreStats,
    /// Simulated cycles (the slowest core).
    pub cycles: f64,
    /// Memory hierarchy counters.
    pub mem: crate::mem::MemStats,
    /// OS event counters.
    pub os: crate::os::OsStats,
    /// OS work counters and the cost model they are converted with.
    pub os_cost: crate::tapi::OsCost,
    /// Bytes of translation structures at the end.
    pub table_bytes: u64,
    /// Bytes mapped per page size at the end.
    pub coverage: [u64; crate::addr::PageSize::COUNT],
    /// Driver-specific metrics.
    pub driver: serde_json::Map<String, serde_json::Value>,
    /// Host wall-clock seconds, setup included.
    pub wall_s: f64,
    /// Host seconds spent before the access loop (boot, workload setup, populate).
    pub setup_s: f64,
}

/// Runs `design` on the configured workload, or on `traces` (one process each) if given.
pub fn run(design: &Design, cfg: &Config, traces: &[PathBuf], progress: bool) -> Result<RunOutput> {
    let inputs: Vec<TraceInput> = traces.iter().cloned().map(TraceInput::Path).collect();
    run_inputs(design, cfg, &inputs, progress)
}

/// Like [`run`], with trace inputs that may also be programs traced while they run
/// ([`TraceInput::Command`]). Each input is one process (address space); each of its threads
/// ([`AccessSource::threads`], which may grow during the run) is a stream of its own, the
/// streams spread over the cores round-robin.
pub fn run_inputs(design: &Design, cfg: &Config, inputs: &[TraceInput], progress: bool) -> Result<RunOutput> {
    let sources = inputs.iter().map(|i| Ok((i.name(), trace::open_input(i)?))).collect::<Result<Vec<_>>>()?;
    run_sources(design, cfg, sources, progress)
}

/// Like [`run_inputs`], with access sources the caller opened, each named for the results.
/// With no sources the configured workload runs.
pub fn run_sources(design: &Design, cfg: &Config, sources: Vec<(String, Box<dyn AccessSource>)>, progress: bool) -> Result<RunOutput> {
    // The one dispatch of a run: everything below is monomorphised for the driver.
    macro_rules! dispatch {
        ($($name:ident => $ty:ty,)*) => {
            match design.driver {
                $( stringify!($name) => run_with::<$ty>(design, cfg, sources, progress), )*
                other => Err(Error::Unknown { what: "driver", name: other.into(), known: crate::arch::DRIVERS.iter().map(|d| d.to_string()).collect() }),
            }
        };
    }
    crate::arch::registry!(dispatch)
}

fn apply_shootdowns<D: Driver>(os: &mut Os<D>, cores: &mut [Core<D::WalkCache>], mem: &mut MemHierarchy) {
    for (pa, bytes) in os.pending_flush.drain(..) {
        mem.flush_range(pa, bytes);
    }
    for sd in os.pending.drain(..) {
        for c in cores.iter_mut() {
            if sd.tlb {
                c.tlbs.invalidate(sd.asid, sd.start, sd.end);
            }
            os.driver.invalidate_walk_cache(&mut c.wc, sd.asid, sd.start, sd.end);
        }
    }
}

fn run_with<D: Registered>(
    design: &Design,
    cfg: &Config,
    traces: Vec<(String, Box<dyn AccessSource>)>,
    show_progress: bool,
) -> Result<RunOutput> {
    let started = Instant::now();
    let driver = D::from_config(&D::config(&cfg.arch), cfg.seed)?;
    let mut os = Os::boot(driver, &cfg.os, cfg.seed)?;
    let mut sources = Vec::new();
    let mut streams = Vec::new();
    let workload_name;
    if traces.is_empty() {
        let procs = cfg.workload.processes();
        workload_name =
            if cfg.workload.mix.is_empty() { cfg.workload.name.clone() } else { procs.iter().map(|p| p.0).collect::<Vec<_>>().join("+") };
        for (p, (name, params)) in procs.into_iter().enumerate() {
            let asid = os.spawn(false)?;
            let mut w = workload::build(name, params, cfg.seed.wrapping_add(p as u64))?;
            w.setup(&mut ProcVm { os: &mut os, asid })?;
            for t in 0..w.threads() {
                streams.push(Stream { proc: p, thread: t, asid, buf: vec![Access::default(); BATCH], pos: 0, len: 0, done: false });
            }
            sources.push(Source::Workload(w));
        }
    } else {
        workload_name = traces.iter().map(|t| t.0.clone()).collect::<Vec<_>>().join(",");
        for (p, (_, src)) in traces.into_iter().enumerate() {
            let asid = os.spawn(true)?;
            let threads = src.threads().max(1);
            for t in 0..threads {
                streams.push(Stream { proc: p, thread: t, asid, buf: vec![Access::default(); BATCH], pos: 0, len: 0, done: false });
            }
            sources.push(Source::Trace(src, threads));
        }
    }
    os.settle(); // no TLB or cache holds anything yet
    let mut cores: Vec<Core<D::WalkCache>> = (0..cfg.cores)
        .map(|_| Core {
            tlbs: Tlbs::new(&cfg.mmu),
            wc: os.driver.new_walk_cache(),
            streams: Vec::new(),
            cur: 0,
            quantum_left: cfg.sim.quantum_instrs as i64,
            cycles: 0.0,
            stats: CoreStats::default(),
        })
        .collect();
    for (i, _) in streams.iter().enumerate() {
        cores[i % cfg.cores].streams.push(i);
    }
    let side = os.driver.side().map(|s| s.side_timing());
    let side_early = cfg.mmu.side_parallel && side.is_some_and(|t| t.start == SideStart::L1Miss);
    let side_gates_walk = side.is_some_and(|t| t.gates_walk);
    let mut eng = Engine {
        os,
        mem: MemHierarchy::new(&cfg.mem, cfg.cores, cfg.core.ghz),
        timing: Additive::new(cfg),
        plan: WalkPlan::default(),
        entry: cfg.mmu.walker_entry,
        perfect: cfg.mmu.perfect_tlb,
        parallel_walk: cfg.mmu.l2_parallel_walk,
        side_parallel: cfg.mmu.side_parallel,
        side_early,
        side_gates_walk,
        checked: cfg.sim.checked,
        trap_cycles: cfg.os.fault_trap_cycles,
    };
    let setup_s = started.elapsed().as_secs_f64();
    let mut progress = progress::Progress::new(show_progress, design.name, cfg.sim.max_accesses);
    let mut total: u64 = 0;
    let mut next_epoch = cfg.sim.epoch_accesses;
    let mut warm = cfg.sim.warmup_accesses == 0;
    let limit = if cfg.sim.max_accesses == 0 { u64::MAX } else { cfg.sim.max_accesses };
    let mut interrupted = false;
    let ms_per_cycle = 1.0 / (cfg.core.ghz * 1e6);
    while let Some(c) = next_core(&cores, &streams) {
        let mut n = 0;
        let mut stalls = 0;
        while n < CHUNK && total < limit {
            let core = &mut cores[c];
            let sid = core.streams[core.cur];
            let st = &mut streams[sid];
            if st.done {
                if !switch_stream(core, &streams, cfg) {
                    break;
                }
                continue;
            }
            if st.pos == st.len {
                let proc = st.proc;
                let stalled = refill(st, &mut sources, &mut eng.os)?;
                add_new_threads(proc, &mut sources, &mut streams, &mut cores);
                apply_shootdowns(&mut eng.os, &mut cores, &mut eng.mem);
                if stalled {
                    // Every stream of the core may be stalled: after trying each once, idle.
                    stalls += 1;
                    let may_switch = stalls <= cores[c].streams.len();
                    if !idle_stalled(c, &mut cores, &streams, cfg, may_switch) {
                        break;
                    }
                }
                continue;
            }
            let a = st.buf[st.pos];
            st.pos += 1;
            step(&mut eng, core, c, &a)?;
            if !eng.os.pending.is_empty() {
                apply_shootdowns(&mut eng.os, &mut cores, &mut eng.mem);
            }
            let core = &mut cores[c];
            core.quantum_left -= a.instrs as i64;
            if core.quantum_left <= 0 {
                core.quantum_left = cfg.sim.quantum_instrs as i64;
                if core.streams.len() > 1 {
                    let prev = streams[core.streams[core.cur]].asid;
                    switch_stream(core, &streams, cfg);
                    if cfg.sim.flush_on_switch && streams[core.streams[core.cur]].asid != prev {
                        core.tlbs.flush();
                        eng.os.driver.invalidate_walk_cache(&mut core.wc, prev, 0, u64::MAX);
                    }
                }
            }
            n += 1;
            total += 1;
        }
        if total >= next_epoch || total >= limit {
            next_epoch = total + cfg.sim.epoch_accesses;
            eng.mem.sample_epoch();
            let now_ms = cores.iter().map(|c| c.cycles).fold(0.0, f64::max) * ms_per_cycle;
            let before = eng.os.cycles(OsPath::Promote);
            eng.os.now = cores.iter().map(|c| c.cycles).fold(0.0, f64::max);
            eng.os.tick(now_ms)?;
            // Background OS work is reported as os_cycles of core 0 but not added to any core's
            // runtime: khugepaged runs on an otherwise idle CPU (docs/os-model.md).
            cores[0].stats.os_cycles += eng.os.cycles(OsPath::Promote) - before;
            apply_shootdowns(&mut eng.os, &mut cores, &mut eng.mem);
            if !warm && total >= cfg.sim.warmup_accesses {
                warm = true;
                for c in cores.iter_mut() {
                    c.stats = CoreStats::default();
                    c.cycles = 0.0;
                }
                eng.mem.reset_stats();
            }
            progress.update(total);
            if INTERRUPTED.load(Ordering::Relaxed) {
                interrupted = true;
                break;
            }
        }
        if total >= limit {
            break;
        }
    }
    progress.finish(total);
    let mut sum = CoreStats::default();
    for c in &cores {
        merge_core(&mut sum, &c.stats);
    }
    let cycles = cores.iter().map(|c| c.cycles).fold(0.0, f64::max);
    Ok(RunOutput {
        design: design.name.to_string(),
        workload: workload_name,
        config: cfg.clone(),
        interrupted,
        core: sum,
        cycles,
        mem: eng.mem.stats(),
        os: eng.os.stats.clone(),
        os_cost: eng.os.cost.clone(),
        table_bytes: eng.os.table_bytes(),
        coverage: eng.os.coverage(),
        driver: eng.os.driver.metrics(),
        wall_s: started.elapsed().as_secs_f64(),
        setup_s,
    })
}

/// The core furthest behind in simulated time that still has work.
fn next_core<W>(cores: &[Core<W>], streams: &[Stream]) -> Option<usize> {
    (0..cores.len())
        .filter(|&c| cores[c].streams.iter().any(|&s| !streams[s].done))
        .min_by(|&a, &b| cores[a].cycles.total_cmp(&cores[b].cycles))
}

/// Moves the core to its next stream that still runs; false if none does.
fn switch_stream<W>(core: &mut Core<W>, streams: &[Stream], _cfg: &Config) -> bool {
    let n = core.streams.len();
    for k in 1..=n {
        let i = (core.cur + k) % n;
        if !streams[core.streams[i]].done {
            if i != core.cur {
                core.stats.context_switches += 1;
            }
            core.cur = i;
            return true;
        }
    }
    false
}

/// Refills the stream's buffer; returns true if the stream is stalled: it got nothing but has
/// not ended (a traced program's thread that is blocked).
fn refill<D: Driver>(st: &mut Stream, sources: &mut [Source], os: &mut Os<D>) -> Result<bool> {
    let (n, ended) = match &mut sources[st.proc] {
        Source::Workload(w) => (w.fill(st.thread, &mut st.buf, &mut ProcVm { os, asid: st.asid })?, true),
        Source::Trace(t, _) => {
            let n = t.fill_thread(st.thread, &mut st.buf)?;
            (n, n > 0 || t.thread_done(st.thread))
        }
    };
    for a in &mut st.buf[..n] {
        a.asid = st.asid;
    }
    st.pos = 0;
    st.len = n;
    st.done = n == 0 && ended;
    Ok(n == 0 && !ended)
}

/// Gives each thread that trace source `proc` started since it was last asked a stream of its
/// own, in the same address space, on the next core round-robin.
fn add_new_threads<W>(proc: usize, sources: &mut [Source], streams: &mut Vec<Stream>, cores: &mut [Core<W>]) {
    let Source::Trace(src, known) = &mut sources[proc] else { return };
    let asid = streams.iter().find(|s| s.proc == proc).map(|s| s.asid).expect("a trace source has a stream");
    while *known < src.threads() {
        let i = streams.len();
        streams.push(Stream { proc, thread: *known, asid, buf: vec![Access::default(); BATCH], pos: 0, len: 0, done: false });
        cores[i % cores.len()].streams.push(i);
        *known += 1;
    }
}

/// Core `c`'s current stream is stalled: switch to another of its streams that can run, or else
/// let the core idle until just after the next core in simulated time, so the threads that
/// have work run meanwhile. Returns true if the core can keep running (it switched).
fn idle_stalled<W>(c: usize, cores: &mut [Core<W>], streams: &[Stream], cfg: &Config, may_switch: bool) -> bool {
    let core = &mut cores[c];
    let stalled = core.cur;
    if may_switch && switch_stream(core, streams, cfg) && core.cur != stalled {
        return true;
    }
    let next = cores
        .iter()
        .enumerate()
        .filter(|&(i, k)| i != c && k.streams.iter().any(|&s| !streams[s].done))
        .map(|(_, k)| k.cycles)
        .fold(f64::INFINITY, f64::min);
    if next.is_finite() {
        cores[c].cycles = cores[c].cycles.max(next + IDLE_CYCLES);
    }
    false
}

fn merge_core(a: &mut CoreStats, b: &CoreStats) {
    a.accesses += b.accesses;
    a.loads += b.loads;
    a.stores += b.stores;
    a.fetches += b.fetches;
    a.instrs += b.instrs;
    let (x, y) = (&mut a.tlb, &b.tlb);
    x.l1d_lookups += y.l1d_lookups;
    x.l1d_misses += y.l1d_misses;
    x.l1i_lookups += y.l1i_lookups;
    x.l1i_misses += y.l1i_misses;
    x.l2_lookups += y.l2_lookups;
    x.l2_misses += y.l2_misses;
    for i in 0..x.l1_misses_by_size.len() {
        x.l1_misses_by_size[i] += y.l1_misses_by_size[i];
        x.l2_misses_by_size[i] += y.l2_misses_by_size[i];
    }
    a.walk.merge(&b.walk);
    a.side.merge(&b.side);
    a.side_hits += b.side_hits;
    a.translation_cycles += b.translation_cycles;
    a.data_cycles += b.data_cycles;
    a.os_cycles += b.os_cycles;
    a.faults += b.faults;
    a.context_switches += b.context_switches;
    a.checked += b.checked;
}

/// One access on core `cid`.
#[inline]
fn step<D: Driver, T: TimingModel>(eng: &mut Engine<D, T>, core: &mut Core<D::WalkCache>, cid: usize, a: &Access) -> Result<()> {
    let s = &mut core.stats;
    s.accesses += 1;
    s.instrs += a.instrs as u64;
    match a.kind {
        AccessKind::Load => s.loads += 1,
        AccessKind::Store => s.stores += 1,
        AccessKind::Fetch => s.fetches += 1,
    }
    let (t, tcycles) = translate(eng, core, cid, a.asid, a.vaddr, a.kind == AccessKind::Fetch)?;
    let (dlat, _) = eng.mem.access(cid, t.paddr(a.vaddr), false, a.kind == AccessKind::Store, Level::L1);
    // One evaluation of the timing model per access, split so data stalls are reported.
    let stall = eng.timing.data_stall(dlat);
    core.cycles += eng.timing.compute(a.instrs, tcycles) + stall;
    core.stats.translation_cycles += tcycles as f64;
    core.stats.data_cycles += stall;
    Ok(())
}

fn check<D: Driver, T: TimingModel>(
    eng: &Engine<D, T>,
    core: &mut Core<D::WalkCache>,
    asid: u16,
    va: u64,
    t: Translation,
    what: &str,
) -> Result<()> {
    core.stats.checked += 1;
    let truth = eng.os.truth(asid, va);
    if truth != Some(t) {
        return Err(Error::Check(format!(
            "{what} for ASID {asid} va {va:#x} gave {:#x} ({}), the OS maps {}",
            t.paddr(va),
            t.size,
            truth.map(|g| format!("{:#x} ({})", g.paddr(va), g.size)).unwrap_or_else(|| "nothing".into())
        )));
    }
    Ok(())
}

/// Fills the L1 TLB that holds `t`'s size (L1 D-TLBs or the I-TLB).
#[inline]
fn fill_l1(tlbs: &mut Tlbs, asid: u16, va: u64, t: Translation, fetch: bool) {
    if fetch {
        tlbs.l1i.insert(asid, va, t);
    } else if let Some(l1) = tlbs.l1d.iter_mut().find(|l| l.holds(t.size)) {
        l1.insert(asid, va, t);
    }
}

/// Translates `va`; returns the translation and the cycles spent beyond the L1 TLB.
#[inline]
fn translate<D: Driver, T: TimingModel>(
    eng: &mut Engine<D, T>,
    core: &mut Core<D::WalkCache>,
    cid: usize,
    asid: u16,
    va: u64,
    fetch: bool,
) -> Result<(Translation, u32)> {
    if eng.perfect {
        let t = match eng.os.truth(asid, va) {
            Some(t) => t,
            None => fault(eng, core, asid, va)?,
        };
        return Ok((t, 0));
    }
    let hit = if fetch {
        core.stats.tlb.l1i_lookups += 1;
        core.tlbs.l1i.lookup(asid, va)
    } else {
        core.stats.tlb.l1d_lookups += 1;
        core.tlbs.l1d.iter_mut().find_map(|t| t.lookup(asid, va))
    };
    if let Some(t) = hit {
        if eng.checked {
            check(eng, core, asid, va, t, "L1 TLB hit")?;
        }
        return Ok((t, 0));
    }
    if fetch {
        core.stats.tlb.l1i_misses += 1;
    } else {
        core.stats.tlb.l1d_misses += 1;
    }
    core.stats.tlb.l2_lookups += 1;
    let l2lat = core.tlbs.l2.latency;
    // A side structure that starts with the L2 TLB lookup (Utopia Fig. 17) runs whatever the L2
    // TLB answers: its references reach the caches either way.
    let has_side = eng.os.driver.side().is_some();
    let mut early = if has_side && eng.side_early { Some(side_lookup(eng, core, cid, asid, va)?) } else { None };
    if let Some(t) = core.tlbs.l2.lookup(asid, va) {
        if eng.checked {
            check(eng, core, asid, va, t, "L2 TLB hit")?;
        }
        core.stats.tlb.l1_misses_by_size[t.size.index()] += 1;
        fill_l1(&mut core.tlbs, asid, va, t, fetch);
        // Whichever of the two finds the translation first answers.
        let lat = match early {
            Some((Some(ts), sl)) => {
                if eng.checked && ts != t {
                    return Err(Error::Check(format!("side lookup of ASID {asid} va {va:#x} disagrees with the L2 TLB hit")));
                }
                l2lat.min(sl)
            }
            _ => l2lat,
        };
        return Ok((t, lat));
    }
    core.stats.tlb.l2_misses += 1;
    let mut cycles = 0u32;
    let mut first = true;
    // After a page fault the access is replayed from the L2 TLB miss: side lookup, then walk.
    loop {
        // The side structure, if the design has one, runs beside the L2 TLB (or after its miss).
        // `before_walk`: when the L2 TLB and the side lookup have both said "not here";
        // `walk_start`: when the walk begins (with the parallel walk, at the L1 miss or once the
        // side lookup has missed, as the driver says).
        let mut before_walk = if first { l2lat } else { 0 };
        let mut walk_start = if first && eng.parallel_walk { 0 } else { before_walk };
        if has_side {
            let (r, sl) = match early.take() {
                Some(done) => done,
                None => side_lookup(eng, core, cid, asid, va)?,
            };
            let side_done = if first && !eng.side_parallel { l2lat + sl } else { sl };
            before_walk = before_walk.max(side_done);
            walk_start = if first && eng.parallel_walk {
                if eng.side_gates_walk {
                    side_done
                } else {
                    0
                }
            } else {
                before_walk
            };
            if let Some(t) = r {
                if eng.checked {
                    check(eng, core, asid, va, t, "side lookup")?;
                }
                core.stats.tlb.l1_misses_by_size[t.size.index()] += 1;
                core.tlbs.l2.insert(asid, va, t);
                fill_l1(&mut core.tlbs, asid, va, t, fetch);
                let stall = eng.os.migration_stall(asid, va, t, core.cycles);
                return Ok((t, cycles + before_walk + stall));
            }
        }
        eng.plan.clear();
        eng.plan.checked = eng.checked;
        let r = eng.os.walk(asid, &mut core.wc, va, &mut eng.plan);
        if let Some(v) = eng.plan.violation {
            return Err(Error::Check(format!("walk of ASID {asid} va {va:#x}: {v}")));
        }
        let dram_before = core.stats.walk.refs_by_level[Level::Dram as usize];
        let wl = time_walk(&eng.plan, &mut eng.mem, cid, eng.entry, &mut core.stats.walk);
        if eng.os.driver.migration().is_some() {
            let dram = (core.stats.walk.refs_by_level[Level::Dram as usize] - dram_before) as u32;
            eng.os.walk_observed(asid, va, r, dram);
        }
        cycles += before_walk.max(walk_start + wl);
        first = false;
        match r {
            Some(t) => {
                if eng.checked {
                    check(eng, core, asid, va, t, "page walk")?;
                }
                core.stats.tlb.l1_misses_by_size[t.size.index()] += 1;
                core.stats.tlb.l2_misses_by_size[t.size.index()] += 1;
                core.tlbs.l2.insert(asid, va, t);
                fill_l1(&mut core.tlbs, asid, va, t, fetch);
                let stall = eng.os.migration_stall(asid, va, t, core.cycles);
                return Ok((t, cycles + stall));
            }
            None => {
                fault(eng, core, asid, va)?;
            }
        }
    }
}

/// Runs and times the driver's side lookup; returns what it found and its latency. The caller
/// checks the translation it uses.
#[inline]
fn side_lookup<D: Driver, T: TimingModel>(
    eng: &mut Engine<D, T>,
    core: &mut Core<D::WalkCache>,
    cid: usize,
    asid: u16,
    va: u64,
) -> Result<(Option<Translation>, u32)> {
    eng.plan.clear();
    eng.plan.checked = eng.checked;
    let r = eng.os.side_lookup(asid, &mut core.wc, va, &mut eng.plan);
    if let Some(v) = eng.plan.violation {
        return Err(Error::Check(format!("side lookup of ASID {asid} va {va:#x}: {v}")));
    }
    let sl = time_walk(&eng.plan, &mut eng.mem, cid, eng.entry, &mut core.stats.side);
    if r.is_some() {
        core.stats.side_hits += 1;
    }
    Ok((r, sl))
}

/// Takes a page fault: the OS maps the page; its work is charged to this core.
fn fault<D: Driver, T: TimingModel>(eng: &mut Engine<D, T>, core: &mut Core<D::WalkCache>, asid: u16, va: u64) -> Result<Translation> {
    let before = eng.os.cycles(OsPath::Fault);
    eng.os.now = core.cycles;
    let t = eng.os.fault(asid, va)?;
    let os = eng.os.cycles(OsPath::Fault) - before + eng.trap_cycles;
    core.stats.faults += 1;
    core.stats.os_cycles += os;
    core.cycles += os;
    // Shootdowns a fault caused (a policy that evicts on fault) must reach this core before it
    // uses its TLBs again; other cores get them when the chunk ends.
    for sd in &eng.os.pending {
        if sd.tlb {
            core.tlbs.invalidate(sd.asid, sd.start, sd.end);
        }
        eng.os.driver.invalidate_walk_cache(&mut core.wc, sd.asid, sd.start, sd.end);
    }
    Ok(t)
}
