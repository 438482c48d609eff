//! Accelerators as simulated agents (SPARTA §4, §6.3): simple in-order engines, each running one
//! stream of the workload (its threads, or the processes of a multiprogrammed mix), with an
//! optional private cache and TLB, on a machine of sockets × memory channels
//! ([`crate::mem::topology`]). Every memory reference pays the network to the socket its frame
//! lives on and that channel's DRAM, so where translation happens decides what it costs.
//!
//! Three ways to translate, chosen once per run:
//! - **Conventional** (Fig. 3a/b): the accelerator-side TLB; a miss is walked — by a private MMU
//!   with perfect MMU caches (one reference: the leaf entry, wherever its table page lives) or
//!   by a shared IOMMU that walks the driver's table with its walk caches — and only then does
//!   the data fetch start: translation and fetch are serialized.
//! - **Memory-side** (the driver offers [`MemorySide`]; Fig. 3c/d): the request travels with its
//!   virtual address to the partition the hash names. SPARTA's partition probes its memory-side
//!   TLB (shared by every accelerator) and on a miss walks its local table, then reads the data
//!   locally; the trip there is not translation time. DIPTA's partition fetches from the frame
//!   its way predictor names while the table is probed; a wrong guess refetches.
//! - **Ideal**: the OS's ground truth, free.
//!
//! With a physically addressed cache even a hit needs the frame: the accelerator-side TLB
//! (SPARTA's tiny one, §7.6) serves it, and a memory-side design sends a request whose TLB
//! misses to memory, which returns the entry with the data (§4.3). A virtual cache needs no
//! translation for hits.
//!
//! Per access: `instrs × cpi` cycles of compute, then the access's latency, exposed whole (an
//! in-order engine with one reference in flight, as §6.3's CPI model). The translation part of
//! each latency — what the same access would not have waited with ideal translation — is
//! counted apart, so one run reports its own translation overhead and fraction of ideal.

use super::{input_bytes, progress, refill, run_total, spawn, RunOutput, Source, Stream, CHUNK, INTERRUPTED, PREFETCH_AHEAD};
use crate::arch::Design;
use crate::config::accel::{CacheKind, WalkModel};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::mem::cache::Cache;
use crate::mem::topology::Topology;
use crate::mmu::pipeline::TranslationHost;
use crate::mmu::tlb::Tlb;
use crate::os::Os;
use crate::tapi::{Driver, MemoryTranslation, Translation, WalkPlan};
use crate::trace::{AccessKind, AccessSource};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Counters of an accelerator run (docs/results-schema.md, `accel`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AccelStats {
    /// Accelerators.
    pub accelerators: u64,
    /// Memory partitions with their own translation hardware (0 conventionally).
    pub partitions: u64,
    /// Memory operations.
    pub accesses: u64,
    /// Instructions.
    pub instrs: u64,
    /// Private-cache hits / misses.
    pub cache_hits: u64,
    /// Private-cache misses.
    pub cache_misses: u64,
    /// Accelerator-side TLB lookups / misses.
    pub accel_tlb_lookups: u64,
    /// Accelerator-side TLB misses.
    pub accel_tlb_misses: u64,
    /// Memory-side TLB lookups / misses (SPARTA).
    pub memory_tlb_lookups: u64,
    /// Memory-side TLB misses.
    pub memory_tlb_misses: u64,
    /// Page-table walks (conventional, IOMMU or memory-side).
    pub walks: u64,
    /// Walk memory references.
    pub walk_refs: u64,
    /// TLB miss penalty: network cycles on its critical path (summed over misses).
    pub miss_penalty_network: f64,
    /// TLB miss penalty: DRAM (and IOMMU) cycles on its critical path.
    pub miss_penalty_dram: f64,
    /// Page faults taken.
    pub faults: u64,
    /// OS cycles of those faults (accelerator cycles).
    pub os_cycles: f64,
    /// Cycles spent translating beyond what ideal translation would take (TLB probes, walks,
    /// mispredicted fetches), summed over accelerators.
    pub translation_cycles: f64,
    /// Cycles of data access beyond the cache hit latency, summed.
    pub data_cycles: f64,
    /// Compute cycles, summed.
    pub compute_cycles: f64,
    /// Data references that went to another socket.
    pub remote_data_refs: u64,
    /// Data references to memory.
    pub data_refs: u64,
    /// Translations compared with the OS's ground truth (checked mode).
    pub checked: u64,
    /// DIPTA: way predictions made / correct.
    pub predictions: u64,
    /// DIPTA: correct predictions.
    pub predictions_correct: u64,
    /// TLB entries in the system: accelerator-side × accelerators + memory-side × partitions.
    pub tlb_entries_total: u64,
    /// Valid accelerator-side TLB entries at the end, and how many distinct translations they
    /// hold: their ratio is the replication of entries across accelerators.
    pub accel_tlb_valid: u64,
    /// Distinct translations among them.
    pub accel_tlb_distinct: u64,
    /// Simulated cycles (the slowest accelerator).
    pub cycles: f64,
    /// Cycles the run would have taken with ideal translation (each accelerator's cycles minus
    /// its translation cycles; the slowest).
    pub ideal_cycles: f64,
    /// Mean of the accelerators' cycles: the per-operation view of §6.3's CPI model, which a
    /// slowest accelerator (far from the socket holding hot data) does not dominate.
    pub mean_cycles: f64,
}

/// How this run translates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    Ideal,
    Conventional(WalkModel),
    PartitionTlb,
    PredictedFrame,
}

struct Agent {
    socket: u32,
    cache: Option<Cache<u64>>,
    tlb: Option<Tlb>,
    streams: Vec<usize>,
    cur: usize,
    cycles: f64,
    translation: f64,
}

/// One access's latency split: total and the translation part.
#[derive(Clone, Copy, Default)]
struct Lat {
    total: f64,
    translation: f64,
}

struct Machine<D: Driver> {
    os: Os<D>,
    topo: Topology,
    flow: Flow,
    cache_kind: CacheKind,
    checked: bool,
    /// Memory-side TLBs, one per partition.
    mtlbs: Vec<Tlb>,
    /// The walk caches of whatever walks: the IOMMU's (conventional), none in effect with perfect
    /// MMU caches (only the leaf reference is timed), the driver's own for memory-side designs.
    wc: D::WalkCache,
    iommu_socket: u32,
    iommu_cycles: f64,
    plan: WalkPlan,
    /// Bytes per partition and the socket of each.
    part_bytes: u64,
    part_socket: Vec<u32>,
    /// Accelerator cycles per core cycle (OS work is counted in core cycles).
    os_scale: f64,
    stats: AccelStats,
}

/// Runs the configured workload (or `traces`) on accelerators.
pub(super) fn run<D: Driver>(
    design: &Design,
    cfg: &Config,
    mut driver: D,
    traces: Vec<(String, Box<dyn AccessSource>)>,
    show_progress: &super::Show,
) -> Result<RunOutput> {
    let started = Instant::now();
    let ac = &cfg.accel;
    let flow = if ac.ideal {
        Flow::Ideal
    } else {
        match driver.memory_side().map(|m| m.kind()) {
            Some(MemoryTranslation::PartitionTlb) => Flow::PartitionTlb,
            Some(MemoryTranslation::PredictedFrame) => Flow::PredictedFrame,
            None => Flow::Conventional(ac.walk),
        }
    };
    let partitions = driver.memory_side().map(|m| m.partitions()).unwrap_or(0);
    let mut os = Os::boot(driver, &cfg.os, cfg.seed)?;
    let (mut sources, mut streams, workload_name) = spawn(&mut os, cfg, traces)?;
    os.settle();
    let memory = cfg.os.memory;
    let topo = Topology::new(&ac.topology, memory, &cfg.mem.dram, ac.ghz);
    let n = if ac.count == 0 { streams.len().max(1) } else { ac.count };
    let sockets = topo.sockets();
    let tlb_entries = if ac.tlb.entries > 0 { ac.tlb.entries as u64 } else { 0 };
    let mut agents: Vec<Agent> = (0..n)
        .map(|i| Agent {
            socket: i as u32 % sockets,
            cache: (ac.cache_kind != CacheKind::None).then(|| Cache::new(&ac.cache)),
            tlb: (ac.tlb.entries > 0).then(|| Tlb::new(&ac.tlb)),
            streams: Vec::new(),
            cur: 0,
            cycles: 0.0,
            translation: 0.0,
        })
        .collect();
    for i in 0..streams.len() {
        agents[i % n].streams.push(i);
    }
    let part_bytes = if partitions > 0 { memory / partitions as u64 } else { memory };
    let part_socket = (0..partitions.max(1)).map(|p| topo.node(p as u64 * part_bytes).socket).collect();
    let mut m = Machine {
        wc: os.driver.new_walk_cache(),
        os,
        topo,
        flow,
        cache_kind: ac.cache_kind,
        checked: cfg.sim.checked,
        mtlbs: (0..partitions).map(|_| Tlb::new(&ac.memory_tlb)).collect(),
        iommu_socket: ac.iommu_socket,
        iommu_cycles: (ac.iommu_ns * ac.ghz).round(),
        plan: WalkPlan::default(),
        part_bytes,
        part_socket,
        os_scale: ac.ghz / cfg.core.ghz,
        stats: AccelStats {
            accelerators: n as u64,
            partitions: partitions as u64,
            tlb_entries_total: tlb_entries * n as u64
                + if flow == Flow::PartitionTlb { ac.memory_tlb.entries as u64 * partitions as u64 } else { 0 },
            ..AccelStats::default()
        },
    };
    let setup_s = started.elapsed().as_secs_f64();
    let loop_cpu = super::thread_cpu_seconds();
    let interrupted = access_loop(&mut m, &mut agents, &mut streams, &mut sources, cfg, design.name, show_progress)?;
    let loop_cpu_s = super::thread_cpu_seconds() - loop_cpu;
    m.os.finish()?;
    let (valid, distinct) = replication(&agents);
    let mut s = m.stats.clone();
    s.accel_tlb_valid = valid;
    s.accel_tlb_distinct = distinct;
    s.cycles = agents.iter().map(|a| a.cycles).fold(0.0, f64::max);
    s.ideal_cycles = agents.iter().map(|a| a.cycles - a.translation).fold(0.0, f64::max);
    let busy: Vec<&Agent> = agents.iter().filter(|a| a.cycles > 0.0).collect();
    s.mean_cycles = busy.iter().map(|a| a.cycles).sum::<f64>() / busy.len().max(1) as f64;
    Ok(output(design, cfg, workload_name, interrupted, &m, s, started, (setup_s, loop_cpu_s)))
}

/// Valid accelerator-side TLB entries and the distinct translations among them.
fn replication(agents: &[Agent]) -> (u64, u64) {
    let mut all = Vec::new();
    for a in agents {
        if let Some(t) = &a.tlb {
            t.for_each_tag(|tag| all.push(tag));
        }
    }
    let valid = all.len() as u64;
    all.sort_unstable();
    all.dedup();
    (valid, all.len() as u64)
}

#[allow(clippy::too_many_arguments)]
fn output<D: Driver>(
    design: &Design,
    cfg: &Config,
    workload: String,
    interrupted: bool,
    m: &Machine<D>,
    s: AccelStats,
    started: Instant,
    (setup_s, loop_cpu_s): (f64, f64),
) -> RunOutput {
    // The generic counters, so every CPU metric that has a meaning here has its value: the
    // accelerator-side TLB as the L1 TLB, the memory-side TLBs as the L2.
    let mut core = super::CoreStats { accesses: s.accesses, instrs: s.instrs, faults: s.faults, ..Default::default() };
    core.tlb.l1d_lookups = s.accel_tlb_lookups;
    core.tlb.l1d_misses = s.accel_tlb_misses;
    core.tlb.l2_lookups = s.memory_tlb_lookups;
    core.tlb.l2_misses = s.memory_tlb_misses;
    core.walk.walks = s.walks;
    core.walk.refs = s.walk_refs;
    core.walk.refs_unfiltered = s.walk_refs;
    core.walk.latency_sum = (s.miss_penalty_network + s.miss_penalty_dram) as u64;
    core.translation_cycles = s.translation_cycles;
    core.data_cycles = s.data_cycles;
    core.os_cycles = s.os_cycles;
    core.checked = s.checked;
    let mem = crate::mem::MemStats { dram: m.topo.dram_stats(), ..Default::default() };
    RunOutput {
        design: design.name.to_string(),
        workload,
        config: cfg.clone(),
        interrupted,
        cycles: s.cycles,
        core,
        mem,
        os: m.os.stats.clone(),
        os_cost: m.os.cost.clone(),
        table_bytes: m.os.table_bytes(),
        coverage: m.os.coverage(),
        driver: {
            // `metrics` needs `&mut`-free access; the driver's counters are plain reads.
            m.os.driver.metrics()
        },
        accel: Some(s),
        wall_s: started.elapsed().as_secs_f64(),
        setup_s,
        loop_cpu_s,
    }
}

/// Runs the streams on their accelerators, the one furthest behind in simulated time next.
fn access_loop<D: Driver>(
    m: &mut Machine<D>,
    agents: &mut [Agent],
    streams: &mut [Stream],
    sources: &mut [Source],
    cfg: &Config,
    design: &str,
    show_progress: &super::Show,
) -> Result<bool> {
    let mut progress = progress::Progress::new(show_progress, design, run_total(sources, cfg.sim.max_accesses));
    let mut runaway = super::runaway::Runaway::default();
    let limit = if cfg.sim.max_accesses == 0 { u64::MAX } else { cfg.sim.max_accesses };
    let mut total = 0u64;
    let mut next_epoch = cfg.sim.epoch_accesses;
    let mut warm = cfg.sim.warmup_accesses == 0;
    let ms_per_cycle = 1.0 / (cfg.accel.ghz * 1e6);
    let cpi = cfg.accel.cpi;
    while let Some(ai) = (0..agents.len())
        .filter(|&i| agents[i].streams.iter().any(|&s| !streams[s].done))
        .min_by(|&a, &b| agents[a].cycles.total_cmp(&agents[b].cycles))
    {
        let mut n = 0;
        // Warm-up ends at exactly its access (as in the core loop).
        let stop = if warm { limit } else { cfg.sim.warmup_accesses.min(limit) };
        while n < CHUNK && total < stop {
            let agent = &mut agents[ai];
            let sid = agent.streams[agent.cur];
            let st = &mut streams[sid];
            if st.done {
                match (1..=agent.streams.len()).map(|k| (agent.cur + k) % agent.streams.len()).find(|&i| !streams[agent.streams[i]].done) {
                    Some(i) => agent.cur = i,
                    None => break,
                }
                continue;
            }
            if st.pos == st.len {
                let (_, syscalls) = refill(st, sources, &mut m.os)?;
                // In the agent's cycles, as a copy-on-write fault's are.
                agents[ai].cycles += syscalls * m.os_scale;
                m.stats.os_cycles += syscalls * m.os_scale;
                m.apply_shootdowns(agents);
                continue;
            }
            prefetch_ahead(m, st);
            let a = st.buf[st.pos];
            st.pos += 1;
            let store = a.kind == AccessKind::Store;
            let mut cow = 0.0;
            if store && m.os.has_cow() {
                // The write fault of a page shared copy-on-write (os/fork.rs), before translating.
                if let Some(c) = m.os.cow_fault(a.asid, a.vaddr, agents[ai].cycles / m.os_scale)? {
                    cow = c * m.os_scale;
                    m.stats.os_cycles += cow;
                    m.apply_shootdowns(agents);
                }
            }
            let mut lat = m.access_hot(&mut agents[ai], a.asid, a.vaddr, store)?;
            lat.total += cow;
            if !m.os.pending.is_empty() || !m.os.pending_flush.is_empty() {
                m.apply_shootdowns(agents);
            }
            let agent = &mut agents[ai];
            let compute = a.instrs as f64 * cpi;
            agent.cycles += compute + lat.total;
            agent.translation += lat.translation;
            m.stats.accesses += 1;
            m.stats.instrs += a.instrs as u64;
            m.stats.compute_cycles += compute;
            m.stats.translation_cycles += lat.translation;
            n += 1;
            total += 1;
        }
        if !warm && total >= cfg.sim.warmup_accesses {
            warm = true;
            let keep = AccelStats {
                accelerators: m.stats.accelerators,
                partitions: m.stats.partitions,
                tlb_entries_total: m.stats.tlb_entries_total,
                ..AccelStats::default()
            };
            m.stats = keep;
            m.topo.reset_stats();
            m.os.restart_stats();
            for a in agents.iter_mut() {
                a.cycles = 0.0;
                a.translation = 0.0;
            }
        }
        if total >= next_epoch || total >= limit || n == 0 {
            next_epoch = total + cfg.sim.epoch_accesses;
            let now = agents.iter().map(|a| a.cycles).fold(0.0, f64::max);
            m.os.now = now / m.os_scale;
            m.os.tick(now * ms_per_cycle * cfg.os.time_scale)?;
            m.apply_shootdowns(agents);
        }
        // After each chunk, as in the core loop (`CHUNK`).
        progress.update(total, || input_bytes(sources));
        runaway.check(total, &m.os.stats, cfg.os.memory, cfg.os.thp);
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

/// The host prefetch of the accelerator loop, called with the next access at `st.pos`: where the
/// page changes [`PREFETCH_AHEAD`] accesses ahead, the driver's [`Driver::prefetch`] for that
/// access, as the core loop's first stage (a hint: no simulated effect).
#[inline(always)]
fn prefetch_ahead<D: Driver>(m: &Machine<D>, st: &Stream) {
    let i = st.pos + PREFETCH_AHEAD;
    if i < st.len && (st.buf[i - 1].vaddr ^ st.buf[i].vaddr) >> 12 != 0 {
        let a = &st.buf[i];
        if let Some(p) = m.os.procs.get(a.asid as usize) {
            m.os.driver.prefetch(&p.space, a.vaddr);
        }
    }
}

/// The key a virtual cache tags a line with: the ASID above the virtual line number.
#[inline]
fn vline(asid: u16, va: u64) -> u64 {
    ((asid as u64) << 48) | (va >> 6)
}

impl<D: Driver> Machine<D> {
    /// Applies the OS's shootdowns to every accelerator-side and memory-side TLB, the IOMMU's
    /// walk caches and the caches (lines of moved pages; virtual lines of the range).
    fn apply_shootdowns(&mut self, agents: &mut [Agent]) {
        for (pa, bytes) in self.os.pending_flush.drain(..) {
            if self.cache_kind == CacheKind::Physical {
                for a in agents.iter_mut() {
                    if let Some(c) = &mut a.cache {
                        c.invalidate_range(pa >> 6, (pa + bytes) >> 6);
                    }
                }
            }
        }
        for sd in self.os.pending.drain(..) {
            for a in agents.iter_mut() {
                if let Some(t) = &mut a.tlb {
                    t.invalidate(sd.asid, sd.start, sd.end);
                }
                if self.cache_kind == CacheKind::Virtual && sd.tlb {
                    if let Some(c) = &mut a.cache {
                        c.invalidate_range(vline(sd.asid, sd.start), vline(sd.asid, sd.end.min(1 << 48)));
                    }
                }
            }
            if !self.mtlbs.is_empty() {
                let (s, e) = self.os.driver.memory_side().map_or((sd.start, sd.end), |m| m.tlb_range(sd.start, sd.end));
                for t in &mut self.mtlbs {
                    t.invalidate(sd.asid, s, e);
                }
            }
            self.os.driver.invalidate_walk_cache(&mut self.wc, sd.asid, sd.start, sd.end);
        }
    }

    /// [`Machine::access`] with a virtual cache's re-hit inline: the access's line is the cache's
    /// most recent one, a hit that changes no replacement state ([`Cache::rehit`]), which is
    /// most accesses of a sequential stream. The rest goes out of line: with a call per access,
    /// simulating stream took 1.7 times as long (docs/performance.md, "Every design against
    /// radix4").
    #[inline(always)]
    fn access_hot(&mut self, agent: &mut Agent, asid: u16, va: u64, write: bool) -> Result<Lat> {
        if self.cache_kind == CacheKind::Virtual {
            if let Some(c) = agent.cache.as_mut() {
                if c.rehit(vline(asid, va), false, write) {
                    self.stats.cache_hits += 1;
                    return Ok(Lat { total: c.latency() as f64, translation: 0.0 });
                }
            }
        }
        self.access(agent, asid, va, write)
    }

    /// One memory operation of `agent`: its latency and the translation part of it.
    #[inline(never)]
    fn access(&mut self, agent: &mut Agent, asid: u16, va: u64, write: bool) -> Result<Lat> {
        let mut lat = Lat::default();
        match self.cache_kind {
            CacheKind::Virtual => {
                let c = agent.cache.as_mut().expect("a virtual cache");
                lat.total += c.latency() as f64;
                if c.access(vline(asid, va), false, write).hit {
                    self.stats.cache_hits += 1;
                    return Ok(lat);
                }
                self.stats.cache_misses += 1;
                self.miss(agent, asid, va, write, &mut lat)?;
            }
            CacheKind::Physical => {
                // The frame first: the accelerator-side TLB, else the miss path, which for a
                // memory-side design also brings the data (the cache then misses, §4.3).
                let tlb_hit = self.accel_tlb(agent, asid, va, &mut lat)?;
                let c = agent.cache.as_mut().expect("a physical cache");
                lat.total += c.latency() as f64;
                match tlb_hit {
                    Some(t) => {
                        if c.access(t.paddr(va) >> 6, false, write).hit {
                            self.stats.cache_hits += 1;
                            return Ok(lat);
                        }
                        self.stats.cache_misses += 1;
                        self.fetch(agent.socket, t.paddr(va), write, &mut lat);
                    }
                    None => {
                        let t = self.translate_miss(agent, asid, va, write, &mut lat)?;
                        let hit = agent.cache.as_mut().expect("a physical cache").access(t.paddr(va) >> 6, false, write).hit;
                        if matches!(self.flow, Flow::PartitionTlb | Flow::PredictedFrame) {
                            // The request went to memory with its virtual address and brought the
                            // data back with the entry.
                            self.stats.cache_misses += 1;
                        } else if hit {
                            self.stats.cache_hits += 1;
                        } else {
                            self.stats.cache_misses += 1;
                            self.fetch(agent.socket, t.paddr(va), write, &mut lat);
                        }
                    }
                }
            }
            CacheKind::None => self.miss(agent, asid, va, write, &mut lat)?,
        }
        Ok(lat)
    }

    /// A request that must go to memory, translated as the flow says.
    fn miss(&mut self, agent: &mut Agent, asid: u16, va: u64, write: bool, lat: &mut Lat) -> Result<()> {
        match self.flow {
            Flow::Ideal => {
                let t = self.truth_or_fault(asid, va, lat)?;
                self.fetch(agent.socket, t.paddr(va), write, lat);
            }
            Flow::Conventional(_) => {
                let t = match self.accel_tlb(agent, asid, va, lat)? {
                    Some(t) => t,
                    None => self.translate_miss(agent, asid, va, write, lat)?,
                };
                // `translate_miss` fetched nothing conventionally: the fetch follows translation.
                self.fetch(agent.socket, t.paddr(va), write, lat);
            }
            Flow::PartitionTlb | Flow::PredictedFrame => {
                // A tiny accelerator-side TLB (physical caches) is not consulted here: with a
                // virtual cache or none, SPARTA has no accelerator-side translation (§4.3).
                self.memory_side(agent.socket, asid, va, write, lat)?;
            }
        }
        Ok(())
    }

    /// Looks the accelerator-side TLB up (if any): the translation, or `None` on a miss or
    /// without a TLB. Its latency is translation time.
    fn accel_tlb(&mut self, agent: &mut Agent, asid: u16, va: u64, lat: &mut Lat) -> Result<Option<Translation>> {
        if self.flow == Flow::Ideal {
            return self.truth_or_fault(asid, va, lat).map(Some);
        }
        let Some(tlb) = agent.tlb.as_mut() else { return Ok(None) };
        self.stats.accel_tlb_lookups += 1;
        let l = tlb.latency as f64;
        lat.total += l;
        lat.translation += l;
        match tlb.lookup(asid, va) {
            Some(t) => {
                if self.checked {
                    self.check(asid, va, t, "accelerator-side TLB hit")?;
                }
                Ok(Some(t))
            }
            None => {
                self.stats.accel_tlb_misses += 1;
                Ok(None)
            }
        }
    }

    /// An accelerator-side TLB miss: conventionally a walk (the fetch follows); memory-side, the
    /// request goes to memory, which translates and fetches. Fills the accelerator-side TLB.
    fn translate_miss(&mut self, agent: &mut Agent, asid: u16, va: u64, write: bool, lat: &mut Lat) -> Result<Translation> {
        let t = match self.flow {
            Flow::Conventional(model) => self.conventional_walk(agent.socket, model, asid, va, lat)?,
            Flow::PartitionTlb | Flow::PredictedFrame => self.memory_side(agent.socket, asid, va, write, lat)?,
            Flow::Ideal => self.truth_or_fault(asid, va, lat)?,
        };
        if let Some(tlb) = agent.tlb.as_mut() {
            tlb.insert(asid, va, t);
        }
        Ok(t)
    }

    /// A data fetch from memory at `pa` by an accelerator on `socket`: there and back, plus DRAM.
    fn fetch(&mut self, socket: u32, pa: u64, write: bool, lat: &mut Lat) {
        let node = self.topo.node(pa);
        let net = 2 * self.topo.one_way(socket, node.socket);
        let d = self.topo.dram(pa, false, write);
        lat.total += (net + d) as f64;
        self.stats.data_cycles += (net + d) as f64;
        self.stats.data_refs += 1;
        self.stats.remote_data_refs += (node.socket != socket) as u64;
    }

    /// The driver's walk of `va`, faulting the page in first if needed (the fault's OS work is
    /// charged to the access). Leaves the walk's references in `self.plan`.
    fn walk_or_fault(&mut self, asid: u16, va: u64, lat: &mut Lat) -> Result<Translation> {
        for attempt in 0..2 {
            self.plan.clear();
            self.plan.checked = self.checked;
            let (driver, space) = self.os.tables(asid);
            if let Some(t) = driver.walk(space, &mut self.wc, asid, va, &mut self.plan) {
                if let Some(v) = self.plan.violation {
                    return Err(Error::Check(format!("walk of {va:#x} (ASID {asid}): {v}")));
                }
                if self.checked {
                    self.check(asid, va, t, "walk")?;
                }
                return Ok(t);
            }
            if attempt == 0 {
                self.fault(asid, va, lat)?;
            }
        }
        Err(Error::Check(format!("the walk of {va:#x} (ASID {asid}) found nothing right after the OS mapped it")))
    }

    fn fault(&mut self, asid: u16, va: u64, lat: &mut Lat) -> Result<()> {
        let now = self.os.now;
        let (_, cycles) = TranslationHost::fault(&mut self.os, asid, va, now)?;
        let c = cycles * self.os_scale;
        lat.total += c;
        self.stats.faults += 1;
        self.stats.os_cycles += c;
        Ok(())
    }

    fn truth_or_fault(&mut self, asid: u16, va: u64, lat: &mut Lat) -> Result<Translation> {
        if let Some(t) = self.os.truth(asid, va) {
            return Ok(t);
        }
        self.fault(asid, va, lat)?;
        self.os.truth(asid, va).ok_or_else(|| Error::Check(format!("{va:#x} (ASID {asid}) unmapped right after its fault")))
    }

    /// A conventional walk (Fig. 3b): with perfect MMU caches one reference to the leaf entry;
    /// through the IOMMU every reference of the driver's (walk-cache-filtered) plan, from the
    /// IOMMU's socket. All of it is translation time.
    fn conventional_walk(&mut self, socket: u32, model: WalkModel, asid: u16, va: u64, lat: &mut Lat) -> Result<Translation> {
        let t = self.walk_or_fault(asid, va, lat)?;
        self.stats.walks += 1;
        let (mut net, mut dram) = (0u32, 0u32);
        match model {
            WalkModel::Perfect => {
                // The leaf entry: the last reference the walk waited for.
                if let Some(r) = self.plan.refs.iter().rev().find(|r| r.needed).copied() {
                    let node = self.topo.node(r.paddr);
                    net += 2 * self.topo.one_way(socket, node.socket);
                    dram += self.topo.dram(r.paddr, true, false);
                    self.stats.walk_refs += 1;
                }
            }
            WalkModel::Iommu => {
                net += 2 * self.topo.one_way(socket, self.iommu_socket);
                let (n, d) = self.time_plan(self.iommu_socket);
                net += n;
                dram += d;
            }
        }
        let iommu = if model == WalkModel::Iommu { self.iommu_cycles } else { 0.0 };
        self.stats.miss_penalty_network += net as f64;
        self.stats.miss_penalty_dram += dram as f64 + iommu;
        let c = (net + dram) as f64 + iommu;
        lat.total += c;
        lat.translation += c;
        Ok(t)
    }

    /// Times `self.plan` from `socket`: serial steps, the references of a step in parallel, each
    /// reference there and back plus DRAM. Returns the critical path's (network, DRAM) cycles.
    fn time_plan(&mut self, socket: u32) -> (u32, u32) {
        let (mut net, mut dram) = (0, 0);
        let refs = std::mem::take(&mut self.plan.refs);
        let mut i = 0;
        while i < refs.len() {
            let step = refs[i].step;
            let (mut sn, mut sd, mut worst) = (0, 0, 0);
            while i < refs.len() && refs[i].step == step {
                let r = refs[i];
                let node = self.topo.node(r.paddr);
                let n = 2 * self.topo.one_way(socket, node.socket);
                let d = self.topo.dram(r.paddr, true, false);
                if r.needed && n + d > worst {
                    (sn, sd, worst) = (n, d, n + d);
                }
                i += 1;
            }
            net += sn;
            dram += sd;
        }
        self.stats.walk_refs += refs.len() as u64;
        self.plan.refs = refs;
        (net, dram)
    }

    /// The memory-side path (Fig. 3c/d): to the partition the virtual address names, translate
    /// there, read the data there, and back. Only the partition's translation work is
    /// translation time; the trip is the data's anyway.
    fn memory_side(&mut self, socket: u32, asid: u16, va: u64, write: bool, lat: &mut Lat) -> Result<Translation> {
        let p = self.os.driver.memory_side().expect("a memory-side design").partition_of(asid, va);
        let target = self.part_socket[p as usize];
        let net = 2 * self.topo.one_way(socket, target);
        lat.total += net as f64;
        let t = match self.flow {
            Flow::PredictedFrame => self.predicted_fetch(asid, va, write, lat)?,
            _ => {
                let t = self.partition_translate(p, asid, va, lat)?;
                let d = self.topo.dram(t.paddr(va), false, write);
                lat.total += d as f64;
                self.stats.data_cycles += (net + d) as f64;
                t
            }
        };
        self.stats.data_refs += 1;
        self.stats.remote_data_refs += (target != socket) as u64;
        if self.checked {
            let pa = t.paddr(va);
            let (lo, hi) = (p as u64 * self.part_bytes, (p as u64 + 1) * self.part_bytes);
            if pa < lo || pa >= hi {
                return Err(Error::Check(format!(
                    "{va:#x} (ASID {asid}) routes to partition {p} [{lo:#x}, {hi:#x}) but its frame is at {pa:#x}"
                )));
            }
        }
        Ok(t)
    }

    /// SPARTA's partition: its memory-side TLB, else a walk of its local table.
    fn partition_translate(&mut self, p: u32, asid: u16, va: u64, lat: &mut Lat) -> Result<Translation> {
        // The TLB sees the address with the routing bits taken out (same offset within the page).
        let key = self.os.driver.memory_side().expect("a memory-side design").tlb_va(va);
        let tlb = &mut self.mtlbs[p as usize];
        self.stats.memory_tlb_lookups += 1;
        let l = tlb.latency as f64;
        lat.total += l;
        lat.translation += l;
        if let Some(t) = tlb.lookup(asid, key) {
            let t = Translation { pbase: t.pbase, size: t.size };
            if self.checked {
                self.check(asid, va, t, "memory-side TLB hit")?;
            }
            return Ok(t);
        }
        self.stats.memory_tlb_misses += 1;
        let t = self.walk_or_fault(asid, va, lat)?;
        self.stats.walks += 1;
        // Local references: the partition's own channel, no network (from the target socket).
        let target = self.part_socket[p as usize];
        let (net, dram) = self.time_plan(target);
        debug_assert!(net == 2 * self.topo.one_way(target, target) || self.plan.refs.is_empty());
        // The controller reads its own DRAM: the in-socket hop of `time_plan` is not paid.
        let c = dram as f64;
        self.stats.miss_penalty_dram += c;
        lat.total += c;
        lat.translation += c;
        self.mtlbs[p as usize].insert(asid, key, t);
        Ok(t)
    }

    /// DIPTA's partition: fetch from the predicted frame while the table is probed; a wrong or
    /// missing guess refetches once the table answers.
    fn predicted_fetch(&mut self, asid: u16, va: u64, write: bool, lat: &mut Lat) -> Result<Translation> {
        let guess = self.os.driver.memory_side().expect("a memory-side design").predict(asid, va);
        let t = self.walk_or_fault(asid, va, lat)?;
        self.stats.walks += 1;
        // The table probe: its fixed cycles (SRAM) and its DRAM reads, local to the partition.
        let fixed = self.plan.fixed_cycles as f64;
        let (_, dram) = self.time_plan(0);
        let table = fixed + dram as f64;
        let pa = t.paddr(va);
        self.os.driver.memory_side().expect("a memory-side design").train(asid, va, pa);
        self.stats.predictions += guess.is_some() as u64;
        let right = guess.map(|g| g >> 12) == Some(pa >> 12);
        self.stats.predictions_correct += right as u64;
        let (total, translation) = if right {
            let d = self.topo.dram(pa, false, write) as f64;
            // The table answers beside the fetch: only its excess over DRAM is translation time.
            (table.max(d), (table - d).max(0.0))
        } else {
            if let Some(g) = guess {
                self.topo.dram(g & !63, false, false); // the wasted fetch still moves a row buffer
            }
            let d = self.topo.dram(pa, false, write) as f64;
            (table + d, table)
        };
        self.stats.miss_penalty_dram += translation;
        lat.total += total;
        lat.translation += translation;
        self.stats.data_cycles += total - translation;
        Ok(t)
    }

    fn check(&mut self, asid: u16, va: u64, t: Translation, what: &str) -> Result<()> {
        self.stats.checked += 1;
        let truth = self.os.truth(asid, va);
        if truth.map(|g| g.paddr(va)) != Some(t.paddr(va)) {
            return Err(Error::Check(format!(
                "{what} for ASID {asid} va {va:#x} gave {:#x}, the OS maps {}",
                t.paddr(va),
                truth.map(|g| format!("{:#x}", g.paddr(va))).unwrap_or_else(|| "nothing".into())
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::arch;
    use crate::config::Layers;
    use crate::error::Result;
    use crate::trace::{Access, AccessKind, AccessSource};

    /// Two loads of one page: the first misses every TLB (and faults), the second hits.
    struct Twice(Vec<Access>, usize);

    impl AccessSource for Twice {
        fn fill(&mut self, buf: &mut [Access]) -> Result<usize> {
            let n = buf.len().min(self.0.len() - self.1);
            buf[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
            self.1 += n;
            Ok(n)
        }
    }

    /// Runs `design` on a 2-socket, 1-channel-per-socket machine at 1 GHz (so ns = cycles):
    /// noc 10, link 30, every DRAM access 100 cycles, no cache, accelerator TLB 1 cycle,
    /// memory-side TLB 2. Returns the cycles of the two accesses, the OS's fault work taken out.
    fn two_loads(design: &str, va: u64) -> f64 {
        let load = Access { vaddr: va, kind: AccessKind::Load, size: 8, instrs: 0, ..Access::default() };
        let a = run_loads(design, &[load, load], "none");
        assert_eq!(a.faults, 1);
        a.cycles - a.os_cycles
    }

    /// Runs `accesses` on `design` on the machine of [`two_loads`], with a cache of `cache_kind`.
    fn run_loads(design: &str, accesses: &[Access], cache_kind: &str) -> super::AccelStats {
        let cache = format!("accel.cache_kind=\"{cache_kind}\"");
        let sets = [
            "os.memory=256M",
            "accel.ghz=1.0",
            "core.ghz=1.0",
            "accel.cpi=0",
            cache.as_str(),
            "accel.topology.sockets=2",
            "accel.topology.channels=1",
            "accel.topology.noc_ns=10",
            "accel.topology.link_ns=30",
            "accel.topology.links=\"full\"",
            "mem.dram.fixed_cycles=100",
            "accel.tlb.latency=1",
            "accel.memory_tlb.latency=2",
            "os.interleave=2",
            "arch.sparta.partitions=2",
            "sim.checked=true",
        ];
        let d = arch::lookup(design).unwrap();
        let cfg = Layers { sets: sets.iter().map(|s| s.to_string()).collect(), ..Layers::default() }.resolve(Some(d)).unwrap();
        let src: Box<dyn AccessSource> = Box::new(Twice(accesses.to_vec(), 0));
        let r = crate::sim::run_sources(d, &cfg, vec![("loads".into(), src)], false).unwrap();
        r.accel.expect("an accelerator run")
    }

    /// A virtual cache's hits cost its latency and nothing else, whether the loop answers them
    /// inline (the line is the cache's most recent) or through the whole access (an older line
    /// of the cache): A, A, B, A, A takes what A, B takes plus three hits of 2 cycles.
    #[test]
    fn virtual_cache_hits_inline_or_not_cost_the_cache_latency() {
        let load = |va| Access { vaddr: va, kind: AccessKind::Load, size: 8, instrs: 0, ..Access::default() };
        let (a, b) = (load(0x4000_1000), load(0x4000_2040));
        for design in ["sparta-4", "accel-conventional"] {
            let base = run_loads(design, &[a, b], "virtual");
            let more = run_loads(design, &[a, a, b, a, a], "virtual");
            assert_eq!((base.cache_hits, base.cache_misses), (0, 2), "{design}");
            assert_eq!((more.cache_hits, more.cache_misses), (3, 2), "{design}");
            assert_eq!(more.cycles - more.os_cycles, base.cycles - base.os_cycles + 3.0 * 2.0, "{design}");
        }
    }

    /// The timelines of SPARTA Fig. 3, by hand. The page at 0x40001000 has an odd page number:
    /// interleaving and SPARTA-2's hash both put it on socket 1; the accelerator is on socket 0;
    /// the radix table's pages are the first ones allocated, on socket 0.
    /// One way to socket 1: noc + link + noc = 50; to socket 0: noc = 10.
    #[test]
    fn hit_and_miss_timelines_match_fig3() {
        let va = 0x4000_1000;
        // Conventional (Fig. 3b then 3a): miss = TLB 1 + walk (2×10 + 100) + fetch (2×50 + 100)
        // = 321; hit = TLB 1 + fetch 200 = 201.
        assert_eq!(two_loads("accel-conventional", va), 321.0 + 201.0);
        // SPARTA (Fig. 3d then 3c): miss = trip 100 + memory TLB 2 + local walk 100 + data 100
        // = 302; hit = trip 100 + memory TLB 2 + data 100 = 202.
        assert_eq!(two_loads("sparta-4", va), 302.0 + 202.0);
        // Ideal: the fetch only, twice.
        assert_eq!(two_loads("accel-ideal", va), 200.0 + 200.0);
    }
}
