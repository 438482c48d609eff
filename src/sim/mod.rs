//! Wiring a resolved configuration into a machine and running it.
//!
//! The design is dispatched once ([`run_sources`] matches the driver's registry name), then on
//! the pipeline's mode (fast, checked, perfect TLB); everything below (`access_loop`, `step`) is
//! monomorphised for both: no dynamic call per access. Workloads and trace readers are called
//! once per batch of accesses.
//!
//! Per access: the MMU pipeline ([`crate::mmu::pipeline`]) translates — TLBs, side structure,
//! the driver's walk timed through the caches, page fault and replay — then the data access goes
//! through the same caches and the timing model turns both into cycles.
//! Cores advance in chunks; the core furthest behind in simulated time runs next, so a shared LLC
//! and DRAM see the cores' accesses interleaved in time order (to within a chunk).

pub mod accel;
pub mod prefetch_tuner;
pub mod progress;
pub mod runaway;

pub use progress::Show;

use crate::addr::LINE_SHIFT;
use crate::arch::nested::{Guest, Nesting, NESTABLE};
use crate::arch::{Design, Registered};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::mem::MemHierarchy;
use crate::mmu::pipeline::{Checked, CoreMmu, Fast, MmuStats, Mode, Overlap, Perfect, Pipeline};
use crate::mmu::{TlbStats, Tlbs, WalkStats};
use crate::os::{Os, ProcVm};
use crate::tapi::Path as OsPath;
use crate::tapi::{Driver, Translation, Tsvc};
use crate::timing::{Additive, TimingModel};
use crate::trace::{self, Access, AccessKind, AccessSource, TraceInput};
use crate::workload::{self, Workload};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Set by the Ctrl-C handler: the run stops after the chunk ([`CHUNK`] accesses) it is in and
/// reports what it has.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Accesses fetched from a producer at a time.
const BATCH: usize = 4096;
/// Accesses a core runs before the scheduler picks the core furthest behind again. Ctrl-C and
/// the progress bar are looked at after each chunk, not per access (at ~0.1 M accesses/s, the
/// slowest configs, a chunk takes ~3 ms; an epoch, 2^20 accesses, would take ~10 s).
const CHUNK: usize = 256;
/// How far past the next core a core whose only runnable thread is stalled moves its clock.
const IDLE_CYCLES: f64 = 1000.0;

/// Per-core counters.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
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
    /// Accesses the source has delivered so far (to name a bad one).
    read: u64,
}

impl Stream {
    fn new(proc: usize, thread: usize, asid: u16) -> Stream {
        Stream { proc, thread, asid, buf: vec![Access::default(); BATCH], pos: 0, len: 0, done: false, read: 0 }
    }
}

enum Source {
    Workload(Box<dyn Workload>),
    /// A trace, how many of its threads have streams so far, and its name.
    Trace(Box<dyn AccessSource>, usize, String),
}

struct Core<D: Driver> {
    mmu: CoreMmu<D>,
    streams: Vec<usize>,
    cur: usize,
    quantum_left: i64,
    cycles: f64,
    stats: CoreStats,
    /// Operations until the walk sampler's next sample.
    sample_left: u32,
}

/// Everything an access touches except the core running it.
struct Engine<D: Driver, T: TimingModel> {
    os: Os<D>,
    mem: MemHierarchy,
    timing: T,
    pipe: Pipeline,
    sampler: Option<Sampler>,
}

/// ARM SPE as Leshy uses it (reference elastic-translations.md §4.1): one operation in every
/// `period` is sampled, the interval jittered (SPE's `jitter=1`), and a sample is kept only if
/// the operation's translation walked (the "TLB walk" event filter), with its translation latency.
struct Sampler {
    period: u32,
    rng: crate::rng::Rng,
}

impl Sampler {
    /// The next interval: `period` ± 1/16 of it (SPE randomizes the low bits of its counter).
    fn interval(&mut self) -> u32 {
        let j = (self.period / 8).max(1) as u64;
        self.period - self.period / 16 + self.rng.below(j) as u32
    }
}

/// What a run produced. Serializes with serde (sweep records store it, docs/sweeps.md); every
/// field round-trips exactly through JSON.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
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
    /// Accelerator counters (`accel.enabled` runs only).
    pub accel: Option<accel::AccelStats>,
    /// Host wall-clock seconds, setup included.
    pub wall_s: f64,
    /// Host seconds spent before the access loop (boot, workload setup, populate).
    pub setup_s: f64,
    /// Host CPU seconds of the simulating thread in the access loop: unlike wall time, it does not
    /// grow when other jobs share the cores (`xlate bench`). Not serialized.
    #[serde(skip)]
    pub loop_cpu_s: f64,
}

impl RunOutput {
    /// A run that simulated nothing is an input problem (an empty or foreign file, a program that
    /// never ran, a warm-up as long as the run), not a result: an all-zero table must not pass for
    /// one. `Ok` for a run that measured something or was interrupted.
    pub fn check_simulated(&self) -> Result<()> {
        if self.core.accesses > 0 || self.interrupted {
            return Ok(());
        }
        if self.config.sim.warmup_accesses > 0 {
            return Err(Error::config(
                "sim.warmup_accesses",
                format!("the warm-up of {} accesses took the whole run: nothing was measured", self.config.sim.warmup_accesses),
            ));
        }
        Err(Error::Workload {
            name: self.workload.clone(),
            msg: "nothing was simulated: the input produced no memory accesses (an empty trace, a file of another \
                  format, or a program that did not run under the tracer)"
                .into(),
        })
    }
}

/// CPU seconds the calling thread has used so far (`CLOCK_THREAD_CPUTIME_ID`); 0 if the clock
/// is unavailable.
pub fn thread_cpu_seconds() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes the one timespec behind the valid, exclusive pointer.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } != 0 {
        return 0.0;
    }
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// Runs `design` on the configured workload, or on `traces` (one process each) if given.
pub fn run(design: &Design, cfg: &Config, traces: &[PathBuf], progress: impl Into<Show>) -> Result<RunOutput> {
    let inputs: Vec<TraceInput> = traces.iter().cloned().map(TraceInput::Path).collect();
    run_inputs(design, cfg, &inputs, progress)
}

/// Like [`run`], with trace inputs that may also be programs traced while they run
/// ([`TraceInput::Command`]). Each input is one process (address space); each of its threads
/// ([`AccessSource::threads`], which may grow during the run) is a stream of its own, the
/// streams spread over the cores round-robin.
pub fn run_inputs(design: &Design, cfg: &Config, inputs: &[TraceInput], progress: impl Into<Show>) -> Result<RunOutput> {
    run_inputs_shown(design, cfg, inputs, progress.into())
}

// The public entry points are generic only in how progress is given, and hand over at once to
// these non-generic ones: a generic function holding the driver dispatch would be
// monomorphised again, with the whole simulator under it, in every crate that calls it (the
// CLI, each test binary, the Python module), which took most of a release build's time.
fn run_inputs_shown(design: &Design, cfg: &Config, inputs: &[TraceInput], progress: Show) -> Result<RunOutput> {
    if let Some(profile) = profile_config(cfg) {
        let sources = inputs.iter().map(|i| Ok((i.name(), trace::open_input(i)?))).collect::<Result<Vec<_>>>()?;
        return with_profiled_hints(
            profile,
            cfg,
            |c| run_sources_shown(design, c, sources, progress.clone()),
            |c| run_inputs_shown(design, c, inputs, progress.clone()),
        );
    }
    let sources = inputs.iter().map(|i| Ok((i.name(), trace::open_input(i)?))).collect::<Result<Vec<_>>>()?;
    run_sources_shown(design, cfg, sources, progress)
}

/// Like [`run_inputs`], with access sources the caller opened, each named for the results.
/// With no sources the configured workload runs.
pub fn run_sources(
    design: &Design,
    cfg: &Config,
    sources: Vec<(String, Box<dyn AccessSource>)>,
    progress: impl Into<Show>,
) -> Result<RunOutput> {
    run_sources_shown(design, cfg, sources, progress.into())
}

fn run_sources_shown(design: &Design, cfg: &Config, sources: Vec<(String, Box<dyn AccessSource>)>, progress: Show) -> Result<RunOutput> {
    if let Some(profile) = profile_config(cfg) {
        if !sources.is_empty() {
            return Err(Error::config("os.leshy.hints", "offline Leshy on already opened traces needs a hint file"));
        }
        return with_profiled_hints(
            profile,
            cfg,
            |c| run_sources_shown(design, c, Vec::new(), progress.clone()),
            |c| run_sources_shown(design, c, Vec::new(), progress.clone()),
        );
    }
    // The one dispatch of a run: everything below is monomorphised for the driver (for a
    // nested design, for the guest and host drivers).
    if let Some(n) = design.nested {
        macro_rules! guest {
            ($($name:ident => $ty:ty,)*) => {
                match n.guest.driver {
                    $( stringify!($name) => run_on_host::<$ty>(design, n, cfg, sources, &progress), )*
                    other => Err(not_nestable(other)),
                }
            };
        }
        return crate::arch::guests!(guest);
    }
    macro_rules! dispatch {
        ($($name:ident => $ty:ty,)*) => {
            match design.driver {
                $( stringify!($name) => run_with(design, cfg, <$ty as Driver>::from_config(&<$ty as Registered>::config(&cfg.arch), cfg.seed)?, sources, &progress), )*
                other => Err(Error::Unknown { what: "driver", name: other.into(), known: crate::arch::DRIVERS.iter().map(|d| d.to_string()).collect() }),
            }
        };
    }
    crate::arch::registry!(dispatch)
}

/// For offline Leshy without a hint file: the profiling run that writes one (reference
/// elastic-translations.md §4.1: the artifact samples a run with THP off; here also without
/// CoalaPaging or promotion, so the samples are the 4 KiB-page misses). `None` otherwise.
fn profile_config(cfg: &Config) -> Option<Config> {
    use crate::os::{CoalaPaging, LeshyMode, ThpMode};
    if cfg.os.leshy.mode != LeshyMode::Offline || !cfg.os.leshy.hints.is_empty() {
        return None;
    }
    let mut p = cfg.clone();
    p.os.leshy.mode = LeshyMode::Off;
    p.os.leshy.period = cfg.os.leshy.profile_period;
    p.os.thp = ThpMode::Never;
    p.os.coala.paging = CoalaPaging::Off;
    p.os.coala.khugepaged = false;
    p.sim.checked = false;
    Some(p)
}

/// Runs `profile` writing its hints to a scratch file, then `main` with `cfg` reading them.
fn with_profiled_hints(
    mut profile: Config,
    cfg: &Config,
    run_profile: impl FnOnce(&Config) -> Result<RunOutput>,
    run_main: impl FnOnce(&Config) -> Result<RunOutput>,
) -> Result<RunOutput> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("xlate-leshy-{}-{n}.hints", std::process::id()));
    let path_s = path.to_string_lossy().into_owned();
    profile.os.leshy.write_hints = path_s.clone();
    let mut main = cfg.clone();
    main.os.leshy.hints = path_s;
    let r = run_profile(&profile).and_then(|_| run_main(&main));
    let _ = std::fs::remove_file(&path);
    r
}

fn not_nestable(driver: &str) -> Error {
    Error::Unknown { what: "nestable driver", name: driver.into(), known: NESTABLE.iter().map(|d| d.to_string()).collect() }
}

/// Dispatches a nested design's host driver for guest `K`.
fn run_on_host<K: Guest>(
    design: &Design,
    n: Nesting,
    cfg: &Config,
    sources: Vec<(String, Box<dyn AccessSource>)>,
    progress: &Show,
) -> Result<RunOutput> {
    macro_rules! host {
        ($($name:ident => $ty:ty,)*) => {
            match n.host.driver {
                $( stringify!($name) => run_with(design, cfg, K::build::<$ty>(&cfg.arch, &cfg.host, cfg.os.memory, cfg.seed)?, sources, progress), )*
                other => Err(not_nestable(other)),
            }
        };
    }
    crate::arch::nestable!(host)
}

/// Sends the OS's pending shootdowns to every core's translation service and drops the cached
/// lines of pages it moved.
fn apply_shootdowns<D: Driver>(os: &mut Os<D>, cores: &mut [Core<D>], mem: &mut MemHierarchy) {
    mem.flush_ranges(&os.pending_flush);
    os.pending_flush.clear();
    for sd in os.pending.drain(..) {
        for c in cores.iter_mut() {
            c.mmu.shootdown(&os.driver, &sd);
        }
    }
}

fn run_with<D: Driver>(
    design: &Design,
    cfg: &Config,
    driver: D,
    traces: Vec<(String, Box<dyn AccessSource>)>,
    show_progress: &Show,
) -> Result<RunOutput> {
    if cfg.accel.enabled {
        return accel::run(design, cfg, driver, traces, show_progress);
    }
    let started = Instant::now();
    let mut os = Os::boot(driver, &cfg.os, cfg.seed)?;
    let (mut sources, mut streams, workload_name) = spawn(&mut os, cfg, traces)?;
    os.settle(); // no TLB or cache holds anything yet
    let mut cores: Vec<Core<D>> = (0..cfg.cores)
        .map(|_| Core {
            mmu: CoreMmu::new(Tlbs::new(&cfg.mmu), &os.driver),
            streams: Vec::new(),
            cur: 0,
            quantum_left: cfg.sim.quantum_instrs as i64,
            cycles: 0.0,
            stats: CoreStats::default(),
            sample_left: os.sampling_period().unwrap_or(1),
        })
        .collect();
    for (i, _) in streams.iter().enumerate() {
        cores[i % cfg.cores].streams.push(i);
    }
    let side = os.driver.side().map(|s| s.side_timing());
    let overlap = Overlap::new(cfg.mmu.l2_parallel_walk, cfg.mmu.side_parallel, side);
    let sampling = os.sampling_period();
    let mut eng = Engine {
        os,
        mem: MemHierarchy::new(&cfg.mem, cfg.cores, cfg.core.ghz),
        timing: Additive::new(cfg),
        pipe: Pipeline::new(cfg.mmu.walker_entry, overlap, cfg.mmu.l1_pieces),
        sampler: sampling.map(|period| Sampler { period, rng: crate::rng::Rng::new(cfg.seed ^ 0x5be) }),
    };
    let setup_s = started.elapsed().as_secs_f64();
    let loop_cpu = thread_cpu_seconds();
    let interrupted = match (cfg.mmu.perfect_tlb, cfg.sim.checked) {
        (true, _) => access_loop::<D, Perfect>(&mut eng, &mut cores, &mut streams, &mut sources, cfg, design.name, show_progress)?,
        (false, true) => access_loop::<D, Checked>(&mut eng, &mut cores, &mut streams, &mut sources, cfg, design.name, show_progress)?,
        (false, false) => access_loop::<D, Fast>(&mut eng, &mut cores, &mut streams, &mut sources, cfg, design.name, show_progress)?,
    };
    let loop_cpu_s = thread_cpu_seconds() - loop_cpu;
    eng.os.finish()?;
    let mut sum = CoreStats::default();
    for c in &cores {
        merge_core(&mut sum, &c.stats, &c.mmu.stats);
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
        accel: None,
        wall_s: started.elapsed().as_secs_f64(),
        setup_s,
        loop_cpu_s,
    })
}

/// Starts the run's processes: the configured workload (or mix), or one process per trace; each
/// thread a stream. Returns the sources, the streams and the workload's name for the results.
fn spawn<D: Driver>(
    os: &mut Os<D>,
    cfg: &Config,
    traces: Vec<(String, Box<dyn AccessSource>)>,
) -> Result<(Vec<Source>, Vec<Stream>, String)> {
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
            w.setup(&mut ProcVm { os, asid })?;
            if cfg.sim.fork_after_setup {
                os.fork(asid)?;
            }
            for t in 0..w.threads() {
                streams.push(Stream::new(p, t, asid));
            }
            sources.push(Source::Workload(w));
        }
    } else {
        workload_name = traces.iter().map(|t| t.0.clone()).collect::<Vec<_>>().join(",");
        for (p, (name, src)) in traces.into_iter().enumerate() {
            let asid = os.spawn(true)?;
            let threads = src.threads().max(1);
            for t in 0..threads {
                streams.push(Stream::new(p, t, asid));
            }
            sources.push(Source::Trace(src, threads, name));
        }
    }
    Ok((sources, streams, workload_name))
}

/// The access loop, monomorphised for the driver and the pipeline's [`Mode`]: runs the streams
/// on their cores until they end, `sim.max_accesses` is reached or Ctrl-C; returns whether Ctrl-C
/// stopped it.
#[allow(clippy::too_many_arguments)]
fn access_loop<D: Driver, M: Mode>(
    eng: &mut Engine<D, Additive>,
    cores: &mut [Core<D>],
    streams: &mut Vec<Stream>,
    sources: &mut [Source],
    cfg: &Config,
    design: &str,
    show_progress: &Show,
) -> Result<bool> {
    let mut progress = progress::Progress::new(show_progress, design, run_total(sources, cfg.sim.max_accesses));
    let mut runaway = runaway::Runaway::default();
    let mut total: u64 = 0;
    let mut next_epoch = cfg.sim.epoch_accesses;
    let mut warm = cfg.sim.warmup_accesses == 0;
    let limit = if cfg.sim.max_accesses == 0 { u64::MAX } else { cfg.sim.max_accesses };
    let ms_per_cycle = 1.0 / (cfg.core.ghz * 1e6);
    let mut tuner = prefetch_tuner::PrefetchTuner::default();
    while let Some(c) = next_core(cores, streams) {
        let mut n = 0;
        let mut stalls = 0;
        let (prefetch, chunk_start) = (tuner.enabled(), Instant::now());
        // Warm-up ends at exactly its access, not at the next epoch.
        let stop = if warm { limit } else { cfg.sim.warmup_accesses.min(limit) };
        while n < CHUNK && total < stop {
            let core = &mut cores[c];
            let sid = core.streams[core.cur];
            let st = &mut streams[sid];
            if st.done {
                if !switch_stream(core, streams, cfg) {
                    break;
                }
                continue;
            }
            if st.pos == st.len {
                let proc = st.proc;
                let (stalled, syscalls) = refill(st, sources, &mut eng.os)?;
                cores[c].cycles += syscalls;
                cores[c].stats.os_cycles += syscalls;
                add_new_threads(proc, sources, streams, cores);
                apply_shootdowns(&mut eng.os, cores, &mut eng.mem);
                if stalled {
                    // Every stream of the core may be stalled: after trying each once, idle.
                    stalls += 1;
                    let may_switch = stalls <= cores[c].streams.len();
                    if !idle_stalled(c, cores, streams, cfg, may_switch) {
                        break;
                    }
                }
                continue;
            }
            // The accesses up to the end of the buffer, the chunk or the run go through a loop
            // that checks only what an access can change (shootdowns, the quantum); the checks
            // above are for buffer and stream changes.
            let run = (st.len - st.pos).min(CHUNK - n).min(usize::try_from(stop - total).unwrap_or(usize::MAX));
            let mut ran = 0;
            let mut expired = false;
            while ran < run {
                let a = st.buf[st.pos];
                st.pos += 1;
                if prefetch {
                    prefetch_ahead::<D, M>(eng, c, st);
                }
                step::<D, Additive, M>(eng, &mut cores[c], c, &a)?;
                if !eng.os.pending.is_empty() {
                    apply_shootdowns(&mut eng.os, cores, &mut eng.mem);
                }
                ran += 1;
                let core = &mut cores[c];
                core.quantum_left -= a.instrs as i64;
                if core.quantum_left <= 0 {
                    expired = true;
                    break;
                }
                // The accesses after `a` on its page that re-hit the L1 D-TLB (with a perfect TLB,
                // that read the ground truth), in a loop of their own.
                if ran < run && (st.buf[st.pos].vaddr ^ a.vaddr) >> 12 == 0 {
                    let (k, quantum_over) = step_page_run::<D, M>(eng, core, c, &st.buf[st.pos..st.pos + (run - ran)], a.vaddr >> 12);
                    if k > 0 {
                        st.pos += k;
                        ran += k;
                        if prefetch {
                            prefetch_ahead::<D, M>(eng, c, st);
                        }
                    }
                    if quantum_over {
                        expired = true;
                        break;
                    }
                }
            }
            n += ran;
            total += ran as u64;
            if expired {
                let core = &mut cores[c];
                core.quantum_left = cfg.sim.quantum_instrs as i64;
                if core.streams.len() > 1 {
                    let prev = streams[core.streams[core.cur]].asid;
                    switch_stream(core, streams, cfg);
                    let next = streams[core.streams[core.cur]].asid;
                    if next != prev {
                        core.mmu.switch(&eng.os.driver, prev, next, cfg.sim.flush_on_switch);
                    }
                }
            }
        }
        tuner.record(n, chunk_start.elapsed());
        if !warm && total >= cfg.sim.warmup_accesses {
            // Everything the results count restarts here; the machine's state (TLBs, caches,
            // page tables, memory) stays warm (docs/results-schema.md).
            warm = true;
            for c in cores.iter_mut() {
                c.stats = CoreStats::default();
                c.mmu.stats = MmuStats::default();
                c.cycles = 0.0;
            }
            eng.mem.reset_stats();
            eng.os.restart_stats();
        }
        if total >= next_epoch || total >= limit {
            next_epoch = total + cfg.sim.epoch_accesses;
            eng.mem.sample_epoch();
            // The policies' clock (os.time_scale): every background interval is measured on it.
            let now_ms = cores.iter().map(|c| c.cycles).fold(0.0, f64::max) * ms_per_cycle * cfg.os.time_scale;
            let before = eng.os.cycles(OsPath::Promote);
            eng.os.now = cores.iter().map(|c| c.cycles).fold(0.0, f64::max);
            eng.os.tick(now_ms)?;
            // Background OS work is reported as os_cycles of core 0 but not added to any core's
            // runtime: khugepaged runs on an otherwise idle CPU (docs/os-model.md).
            cores[0].stats.os_cycles += eng.os.cycles(OsPath::Promote) - before;
            apply_shootdowns(&mut eng.os, cores, &mut eng.mem);
        }
        progress.update(total, || input_bytes(sources));
        runaway.check(total, &eng.os.stats, cfg.os.memory, cfg.os.thp);
        if INTERRUPTED.load(Ordering::Relaxed) {
            return Ok(true);
        }
        if total >= limit {
            break;
        }
    }
    progress.finish();
    if !warm {
        return Err(Error::config(
            "sim.warmup_accesses",
            format!("{} is not below the {total} accesses the run had: nothing was measured", cfg.sim.warmup_accesses),
        ));
    }
    Ok(false)
}

/// What a run knows of its length up front, for the progress bar: the accesses of its sources if
/// each knows them (capped by `sim.max_accesses`), else the cap, else the size of its input files.
fn run_total(sources: &[Source], max_accesses: u64) -> progress::Total {
    use progress::Total;
    let known: Option<u64> = sources
        .iter()
        .map(|s| match s {
            Source::Workload(w) => w.total_accesses(),
            Source::Trace(t, _, _) => t.total_accesses(),
        })
        .sum();
    let bytes: Option<u64> = sources
        .iter()
        .map(|s| match s {
            Source::Workload(_) => None,
            Source::Trace(t, _, _) => t.bytes_read().map(|b| b.1),
        })
        .sum();
    match (known, max_accesses, bytes) {
        (Some(n), 0, _) => Total::Accesses(n),
        (Some(n), m, _) => Total::Accesses(n.min(m)),
        (None, m, _) if m > 0 => Total::Accesses(m),
        (None, _, Some(b)) => Total::Bytes(b),
        (None, _, None) => Total::Unknown,
    }
}

/// Bytes the run's trace files have been read and their sizes, summed.
fn input_bytes(sources: &[Source]) -> (u64, u64) {
    sources.iter().fold((0, 0), |(r, s), src| match src {
        Source::Trace(t, _, _) => t.bytes_read().map_or((r, s), |b| (r + b.0, s + b.1)),
        Source::Workload(_) => (r, s),
    })
}

/// The core furthest behind in simulated time that still has work.
fn next_core<D: Driver>(cores: &[Core<D>], streams: &[Stream]) -> Option<usize> {
    (0..cores.len())
        .filter(|&c| cores[c].streams.iter().any(|&s| !streams[s].done))
        .min_by(|&a, &b| cores[a].cycles.total_cmp(&cores[b].cycles))
}

/// Moves the core to its next stream that still runs; false if none does.
fn switch_stream<D: Driver>(core: &mut Core<D>, streams: &[Stream], _cfg: &Config) -> bool {
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

/// Refills the stream's buffer; returns whether the stream is stalled (it got nothing but has
/// not ended: a traced program's thread that is blocked), and the OS cycles of the `munmap`s the
/// workload made while filling, which the caller charges to the core running the stream (the
/// calling thread runs the syscall; a fault's cycles are charged where it is taken).
fn refill<D: Driver>(st: &mut Stream, sources: &mut [Source], os: &mut Os<D>) -> Result<(bool, f64)> {
    let unmap = os.cycles(OsPath::Unmap);
    let (n, ended) = match &mut sources[st.proc] {
        Source::Workload(w) => (w.fill(st.thread, &mut st.buf, &mut ProcVm { os, asid: st.asid })?, true),
        Source::Trace(t, _, _) => {
            let n = t.fill_thread_vec(st.thread, &mut st.buf)?;
            (n, n > 0 || t.thread_done(st.thread))
        }
    };
    let (limit, asid) = (os.driver.user_va_limit(), st.asid);
    // Sources mostly hand out the stream's asid already (a trace of one process records 0, the
    // first process's), so a first pass only reads: a batch a trace reader thread wrote is then
    // not written again on this one (docs/performance.md, "Trace replay").
    let batch = &mut st.buf[..n];
    if !batch.iter().fold(true, |ok, a| ok & (a.asid == asid) & (a.vaddr < limit)) {
        for (k, a) in batch.iter_mut().enumerate() {
            a.asid = asid;
            if a.vaddr >= limit {
                let (vaddr, index) = (a.vaddr, st.read + k as u64);
                return Err(beyond_user_space(&sources[st.proc], st.thread, index, vaddr, limit));
            }
        }
    }
    st.read += n as u64;
    st.pos = 0;
    st.len = n;
    st.done = n == 0 && ended;
    Ok((n == 0 && !ended, os.cycles(OsPath::Unmap) - unmap))
}

/// The error for access `index` (counted from 0) of a thread, at `vaddr`, at or above the
/// design's user address-space limit (docs/trace-format.md, "Addresses").
#[cold]
fn beyond_user_space(src: &Source, thread: usize, index: u64, vaddr: u64, limit: u64) -> Error {
    let name = match src {
        Source::Trace(_, _, name) => name.as_str(),
        Source::Workload(_) => "the workload",
    };
    Error::Workload {
        name: name.to_string(),
        msg: format!(
            "access {} of thread {}: virtual address {vaddr:#x} is not a user-space address of this design \
             (its page table translates user addresses below {limit:#x}; a 5-level table, arch.radix.levels = 5, \
             reaches {:#x})",
            index,
            thread,
            1u64 << 56
        ),
    }
}

/// How many accesses past the next one [`prefetch_ahead`] starts a walk's host loads; its second
/// stage runs at half that distance. Four: GUPS issues a load and a store per update, so the walk's
/// first stage runs two updates ahead and its second one ahead, which gives the second stage's
/// loads (ECPT's candidate lines, the nested walk's host entries, the ground truth's bucket) a
/// whole update to arrive (docs/performance.md, "Prefetch distance").
const PREFETCH_AHEAD: usize = 4;

/// The host prefetch of the access loop, called with the next access at `st.pos`: where the page
/// changes, [`PREFETCH_AHEAD`] accesses ahead it starts the host loads that access's walk (with a
/// perfect TLB, its ground-truth lookup) will make, and half as far ahead the second stage. A
/// hint: no simulated effect (docs/performance.md, "Host prefetch"); the loop calls it in the
/// chunks the tuner runs it in.
#[inline(always)]
fn prefetch_ahead<D: Driver, M: Mode>(eng: &Engine<D, Additive>, c: usize, st: &Stream) {
    let page_changes_at = |i: usize| i < st.len && (st.buf[i - 1].vaddr ^ st.buf[i].vaddr) >> 12 != 0;
    let first = st.pos + PREFETCH_AHEAD;
    if page_changes_at(first) {
        prefetch_walk::<D, Additive, M>(eng, c, &st.buf[first]);
    }
    let second = st.pos + PREFETCH_AHEAD / 2;
    if (D::PREFETCHES_FRAME || D::PREFETCHES_LATE) && page_changes_at(second) {
        prefetch_second(eng, c, &st.buf[second]);
    }
}

/// Steps the accesses of `run` (those after one just stepped, on its 4 KiB page `page`) while
/// each is a load or store whose translation re-hits the L1 D-TLB, or with a perfect TLB reads
/// the ground truth ([`Pipeline::translate_rehit`]): sweeps and read-modify-writes are mostly
/// such runs. For them [`step`] does only what this does (the same counts, the same data
/// reference, the same timing), and they cannot raise what the access loop checks after each
/// access but the quantum: no fault, walk or shootdown. Stops at the first other access, which
/// the loop steps, and when the quantum expires. Returns how many it stepped and whether the
/// quantum expired.
#[inline(always)]
fn step_page_run<D: Driver, M: Mode>(
    eng: &mut Engine<D, Additive>,
    core: &mut Core<D>,
    cid: usize,
    run: &[Access],
    page: u64,
) -> (usize, bool) {
    // The walk sampler counts every access down, and a store may take a copy-on-write fault:
    // those go through `step`.
    if eng.sampler.is_some() {
        return (0, false);
    }
    let cow = eng.os.has_cow();
    let takes = |b: &Access| b.vaddr >> 12 == page && b.kind != AccessKind::Fetch && !(cow && b.kind == AccessKind::Store);
    let Some(first) = run.first().filter(|b| takes(b)) else { return (0, false) };
    let Some(t) = eng.pipe.translate_rehit::<D, Os<D>, M>(&eng.os, &mut core.mmu, first.asid, first.vaddr) else { return (0, false) };
    // The rest of the page's accesses get the same answer: a re-hit changes no TLB state, their
    // data references reach only the caches and DRAM, and no OS work runs to change the ground
    // truth. They count as `translate_rehit` would count them (a perfect TLB counts nothing).
    // The core's clock, quantum and counts stay in registers until the run ends: as fields of
    // `core` each would be stored and reloaded every access, a wait carried from one to the
    // next. The run's accesses are loads and stores, counted as `count_access` counts them.
    let (mut clock, mut quantum) = (Clock::of(core), core.quantum_left);
    let (mut k, mut instrs, mut stores) = (0, 0, 0);
    // An access to the line its predecessor left most recent in the L1 re-hits it, which only
    // counts (and may set the dirty bit): such re-hits are counted here and handed to the L1
    // together (`l1_rehits`) before any other reference reaches it, and at the run's end.
    let (mut mru, mut l1_latency) = eng.mem.l1_mru(cid);
    let (mut rehits, mut rehit_write) = (0, false);
    for b in run {
        if k > 0 && !(takes(b) && b.asid == first.asid) {
            break;
        }
        let (paddr, store) = (t.paddr(b.vaddr), b.kind == AccessKind::Store);
        let dlat = if paddr >> LINE_SHIFT == mru {
            rehits += 1;
            rehit_write |= store;
            l1_latency
        } else {
            if rehits > 0 {
                eng.mem.l1_rehits(cid, rehits, rehit_write);
                (rehits, rehit_write) = (0, false);
            }
            let (d, _) = eng.mem.access_hot(cid, paddr, false, store, b.ip);
            (mru, l1_latency) = eng.mem.l1_mru(cid);
            d
        };
        add_time(&eng.timing, b, 0, dlat, &mut clock);
        k += 1;
        instrs += u64::from(b.instrs);
        stores += u64::from(store);
        quantum -= i64::from(b.instrs);
        if quantum <= 0 {
            break;
        }
    }
    if rehits > 0 {
        eng.mem.l1_rehits(cid, rehits, rehit_write);
    }
    clock.store(core);
    core.quantum_left = quantum;
    let s = &mut core.stats;
    (s.accesses, s.loads, s.stores, s.instrs) =
        (s.accesses + k as u64, s.loads + (k as u64 - stores), s.stores + stores, s.instrs + instrs);
    if !M::PERFECT {
        core.mmu.stats.tlb.l1d_lookups += k as u64 - 1;
    }
    (k, quantum <= 0)
}

/// Host prefetch for access `a` of core `c`: the driver's walk entry and the caches' sets for it;
/// with a perfect TLB, which walks nothing, the ground truth's bucket instead (also in checked
/// mode, which looks the truth up on every TLB hit and walk).
#[inline(always)]
fn prefetch_walk<D: Driver, T: TimingModel, M: Mode>(eng: &Engine<D, T>, c: usize, a: &Access) {
    if let Some(p) = eng.os.procs.get(a.asid as usize) {
        if M::PERFECT || M::CHECKED || (D::PREFETCHES_FRAME && !D::HINTS_FRAME) {
            p.truth.prefetch(a.vaddr);
        }
        if M::PERFECT {
            return;
        }
        if let Some(entry) = eng.os.driver.prefetch(&p.space, a.vaddr) {
            eng.mem.prefetch(c, entry);
        }
    }
}

/// The second stage of the host prefetch for access `a`, half as far ahead as the first: what
/// the entries [`prefetch_walk`] brought in earlier name ([`Driver::prefetch_late`]), and for
/// drivers whose walk goes on from the translated frame ([`Driver::prefetch_frame`]) that part of
/// the walk. The frame comes from the driver's own entry where it names it ([`Driver::frame_hint`]:
/// memory the walks keep in the host's TLB), else from the ground truth, whose bucket
/// `prefetch_walk` brought in too.
#[inline(always)]
fn prefetch_second<D: Driver, T: TimingModel>(eng: &Engine<D, T>, c: usize, a: &Access) {
    let Some(p) = eng.os.procs.get(a.asid as usize) else { return };
    if D::PREFETCHES_LATE {
        eng.os.driver.prefetch_late(&p.space, a.vaddr);
    }
    if !D::PREFETCHES_FRAME {
        return;
    }
    let pa = if D::HINTS_FRAME {
        eng.os.driver.frame_hint(&p.space, a.vaddr)
    } else {
        p.truth.lookup(a.vaddr).map(|(pa, size)| pa + (a.vaddr & size.offset_mask()))
    };
    if let Some(entry) = pa.and_then(|pa| eng.os.driver.prefetch_frame(pa)) {
        eng.mem.prefetch(c, entry);
    }
}

/// Gives each thread that trace source `proc` started since it was last asked a stream of its
/// own, in the same address space, on the next core round-robin.
fn add_new_threads<D: Driver>(proc: usize, sources: &mut [Source], streams: &mut Vec<Stream>, cores: &mut [Core<D>]) {
    let Source::Trace(src, known, _) = &mut sources[proc] else { return };
    let asid = streams.iter().find(|s| s.proc == proc).map(|s| s.asid).expect("a trace source has a stream");
    while *known < src.threads() {
        let i = streams.len();
        streams.push(Stream::new(proc, *known, asid));
        cores[i % cores.len()].streams.push(i);
        *known += 1;
    }
}

/// Core `c`'s current stream is stalled: switch to another of its streams that can run, or else
/// let the core idle until just after the next core in simulated time, so the threads that
/// have work run meanwhile. Returns true if the core can keep running (it switched).
fn idle_stalled<D: Driver>(c: usize, cores: &mut [Core<D>], streams: &[Stream], cfg: &Config, may_switch: bool) -> bool {
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

/// Adds core `b`'s counters and its MMU's `m` into `a`.
fn merge_core(a: &mut CoreStats, b: &CoreStats, m: &MmuStats) {
    a.accesses += b.accesses;
    a.loads += b.loads;
    a.stores += b.stores;
    a.fetches += b.fetches;
    a.instrs += b.instrs;
    let (x, y) = (&mut a.tlb, &m.tlb);
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
    a.walk.merge(&m.walk);
    a.side.merge(&m.side);
    a.side_hits += m.side_hits;
    a.translation_cycles += b.translation_cycles;
    a.data_cycles += b.data_cycles;
    a.os_cycles += b.os_cycles + m.os_cycles;
    a.faults += m.faults;
    a.context_switches += b.context_switches;
    a.checked += m.checked;
}

/// One access on core `cid`.
#[inline]
fn step<D: Driver, T: TimingModel, M: Mode>(eng: &mut Engine<D, T>, core: &mut Core<D>, cid: usize, a: &Access) -> Result<()> {
    count_access(&mut core.stats, a);
    let fetch = a.kind == AccessKind::Fetch;
    // The walk sampler: one countdown per access when a policy samples, nothing otherwise.
    let sampled = match eng.sampler.as_mut() {
        Some(sm) => {
            core.sample_left -= 1;
            (core.sample_left == 0).then(|| {
                core.sample_left = sm.interval();
                core.mmu.stats.walk.walks
            })
        }
        None => None,
    };
    if a.kind == AccessKind::Store && eng.os.has_cow() {
        // A store to a page shared copy-on-write takes its write fault first (os/fork.rs).
        if let Some(c) = eng.os.cow_fault(a.asid, a.vaddr, core.cycles)? {
            core.cycles += c;
            core.stats.os_cycles += c;
            // The faulting core drops the old translation before it translates (the others
            // apply the shootdown after this access, as for any fault).
            for sd in &eng.os.pending {
                core.mmu.shootdown(&eng.os.driver, sd);
            }
        }
    }
    let (t, tcycles) =
        eng.pipe.translate::<D, Os<D>, M>(&mut eng.os, &mut eng.mem, &mut core.mmu, cid, a.asid, a.vaddr, fetch, &mut core.cycles)?;
    if sampled.is_some_and(|w| core.mmu.stats.walk.walks > w) {
        eng.os.record_walk_sample(a.asid, a.vaddr, tcycles);
    }
    let mut clock = Clock::of(core);
    finish_access(eng, cid, a, t, tcycles, &mut clock);
    clock.store(core);
    Ok(())
}

/// The counts of access `a` (a page run makes the same, [`step_page_run`]).
#[inline(always)]
fn count_access(s: &mut CoreStats, a: &Access) {
    s.accesses += 1;
    s.instrs += a.instrs as u64;
    match a.kind {
        AccessKind::Load => s.loads += 1,
        AccessKind::Store => s.stores += 1,
        AccessKind::Fetch => s.fetches += 1,
    }
}

/// A core's clock and the split of its time that each access adds to, taken out of the core
/// for a page run ([`step_page_run`]) and put back after it. The same sums are made in the same
/// order either way, so the numbers are the same to the bit.
#[derive(Clone, Copy)]
struct Clock {
    cycles: f64,
    translation: f64,
    data: f64,
}

impl Clock {
    #[inline(always)]
    fn of<D: Driver>(core: &Core<D>) -> Clock {
        Clock { cycles: core.cycles, translation: core.stats.translation_cycles, data: core.stats.data_cycles }
    }

    #[inline(always)]
    fn store<D: Driver>(self, core: &mut Core<D>) {
        (core.cycles, core.stats.translation_cycles, core.stats.data_cycles) = (self.cycles, self.translation, self.data);
    }
}

/// The end of access `a` on core `cid`, translated to `t` in `tcycles` past the L1 TLB: its
/// data reference and its time, added to `clock` ([`step`] and [`step_page_run`] end the same
/// way).
#[inline(always)]
fn finish_access<D: Driver, T: TimingModel>(
    eng: &mut Engine<D, T>,
    cid: usize,
    a: &Access,
    t: Translation,
    tcycles: u32,
    clock: &mut Clock,
) {
    let (dlat, _) = eng.mem.access_hot(cid, t.paddr(a.vaddr), false, a.kind == AccessKind::Store, a.ip);
    add_time(&eng.timing, a, tcycles, dlat, clock);
}

/// The time of access `a`, `tcycles` past the L1 TLB and `dlat` in its data reference, added to
/// `clock`: one evaluation of the timing model per access, split so data stalls are reported.
#[inline(always)]
fn add_time<T: TimingModel>(timing: &T, a: &Access, tcycles: u32, dlat: u32, clock: &mut Clock) {
    let stall = timing.data_stall(dlat);
    clock.cycles += timing.compute(a.instrs, tcycles) + stall;
    clock.translation += tcycles as f64;
    clock.data += stall;
}
