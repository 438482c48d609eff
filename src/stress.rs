//! The stress harness: seeded checked-mode runs of every design, natively and as guest@host
//! pairs, on small built-in workloads under settings that make the OS change translations under
//! the MMU: swapping, THP churn (khugepaged and compaction on fragmented memory), processes
//! sharing cores, fork and copy-on-write, workload mixes, the presets' machines, and host-side
//! churn for nested pairs. Checked mode compares every translation with the OS's ground truth
//! (for a pair, the composition gVA → gPA → hPA), so a case fails when it panics or ends in
//! [`Error::Check`] (a mismatch or a broken invariant). A design's documented limit
//! ([`Error::Unsupported`]: DIPTA has no synonyms, restrictive-only Utopia cannot share a page), a
//! config error or the simulated machine running out of memory is a refusal: the case asked for
//! something that machine cannot do.
//!
//! Where `crate::fuzz` feeds the parsers mutated input, this harness feeds the simulator valid
//! input it has rarely seen together. `cargo run --release --example stress -- --minutes N` is the
//! long run; `tests/it/stress.rs` a bounded slice. docs/robustness.md.

use crate::arch::{self, nested};
use crate::config::Layers;
use crate::error::{Error, Result};
use crate::rng::Rng;
use crate::sim;
use crate::trace::{self, Access, AccessKind};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// Built-in workloads and the settings that keep each small (tens of MiB), so a case takes well
/// under a second.
const WORKLOADS: &[(&str, &[&str])] = &[
    ("gups", &["workload.params.table=\"256M\""]),
    ("stream", &["workload.params.footprint=\"64M\""]),
    ("bfs", &["workload.params.footprint=\"96M\""]),
    ("pr", &["workload.params.footprint=\"96M\""]),
    ("xsbench", &["workload.params.footprint=\"96M\""]),
    ("kvstore", &["workload.params.footprint=\"96M\""]),
    ("btree", &["workload.params.footprint=\"96M\""]),
    ("hashjoin", &["workload.params.footprint=\"96M\""]),
    ("bst-ext", &["workload.params.footprint=\"64M\""]),
    ("dlrm", &["workload.params.footprint=\"96M\""]),
    ("ptrchase", &["workload.params.footprint=\"64M\""]),
    ("sysbench-mem", &[]),
    ("pagefault", &["workload.params.region=\"8M\"", "workload.params.stride=\"1K\""]),
];

/// Settings that make the OS change translations while the MMU caches them, for any design.
const PROFILES: &[(&str, &[&str])] = &[
    ("plain", &[]),
    ("swap", &["os.memory=\"160M\"", "os.swap.enabled=true"]),
    (
        "thp-churn",
        &[
            "os.thp=\"always\"",
            "os.khugepaged.sleep_ms=1",
            "os.time_scale=1000",
            "os.fragmentation.method=\"free2m\"",
            "os.fragmentation.target=0.5",
            "os.fragmentation.keep_free=0",
            "os.compaction.khugepaged=true",
            "os.compaction.fault=true",
            "sim.epoch_accesses=20000",
        ],
    ),
    ("multi", &["cores=2", "workload.processes=2", "sim.quantum_instrs=20000", "sim.epoch_accesses=20000"]),
    ("fork", &["sim.fork_after_setup=true"]),
    // Copy-on-write of huge pages in a machine that must swap to find the copies' frames.
    ("fork-thp-swap", &["sim.fork_after_setup=true", "os.thp=\"always\"", "os.memory=\"160M\"", "os.swap.enabled=true"]),
    (
        "fork-multi-thp",
        &[
            "sim.fork_after_setup=true",
            "cores=2",
            "workload.processes=2",
            "os.thp=\"always\"",
            "os.khugepaged.sleep_ms=1",
            "os.time_scale=1000",
            "sim.epoch_accesses=20000",
            "sim.quantum_instrs=50000",
        ],
    ),
    (
        "smallmem-thp",
        &[
            "os.memory=\"512M\"",
            "os.thp=\"always\"",
            "os.swap.enabled=true",
            "os.khugepaged.sleep_ms=1",
            "os.time_scale=1000",
            "sim.epoch_accesses=20000",
        ],
    ),
    (
        "warmup-frag",
        &["sim.warmup_accesses=10000", "os.fragmentation.method=\"free2m\"", "os.fragmentation.target=0.9", "os.fragmentation.keep_free=0"],
    ),
    (
        "mix",
        &[
            "workload.mix=[{name=\"gups\", params={table=\"64M\"}}, {name=\"stream\", params={footprint=\"32M\"}}]",
            "cores=2",
            "sim.quantum_instrs=30000",
        ],
    ),
];

/// More, for guest@host pairs: the hypervisor's OS changing guest-physical memory's backing.
const HOST_PROFILES: &[(&str, &[&str])] = &[
    (
        "host-thp-churn",
        &[
            "os.memory=\"1G\"",
            "host.os.memory=\"2G\"",
            "host.os.thp=\"always\"",
            "host.os.khugepaged.sleep_ms=1",
            "host.os.time_scale=1000",
            "host.os.fragmentation.method=\"free2m\"",
            "host.os.fragmentation.target=0.5",
            "host.os.fragmentation.keep_free=0",
            "host.os.compaction.khugepaged=true",
            "sim.epoch_accesses=20000",
        ],
    ),
    ("host-swap", &["os.memory=\"1G\"", "host.os.memory=\"400M\"", "host.os.swap.enabled=true", "sim.epoch_accesses=20000"]),
    ("no-ntlb", &["host.ntlb.enabled=false", "host.back_on_guest_map=false"]),
    ("ntlb-in-l2", &["host.ntlb.in_l2_tlb=true", "host.os.thp=\"always\""]),
    (
        "both-thp",
        &[
            "os.memory=\"1G\"",
            "host.os.memory=\"2G\"",
            "os.thp=\"always\"",
            "host.os.thp=\"always\"",
            "os.khugepaged.sleep_ms=1",
            "os.time_scale=1000",
            "host.os.khugepaged.sleep_ms=1",
            "host.os.time_scale=1000",
            "sim.epoch_accesses=20000",
        ],
    ),
];

/// Presets a case may run on (`None`: the defaults, half of the cases).
const PRESETS: &[Option<&str>] =
    &[None, None, None, None, None, Some("emt-osdi25"), Some("virtuoso"), Some("champsim"), Some("zen3"), Some("altra")];

/// One case: a design, a workload (or a generated trace) and its settings.
#[derive(Clone, Debug)]
pub struct Case {
    /// Design (`guest@host` for a pair).
    pub design: String,
    /// Workload; `"trace"` for generated traces ([`Case::traces`]).
    pub workload: &'static str,
    /// The seeds of the generated traces a trace case replays, one process each (implicitly
    /// mapped address spaces, as a traced program's): [`write_trace`]. Empty for a workload.
    pub traces: Vec<u64>,
    /// Name of the settings profile.
    pub profile: &'static str,
    /// Preset, if any.
    pub preset: Option<&'static str>,
    /// Every `--set` of the case, the workload's and the profile's included.
    pub sets: Vec<String>,
}

impl Case {
    /// The command line that runs this case alone (a trace case names the file [`run`] left
    /// behind when the case failed).
    pub fn command(&self) -> String {
        let input = match self.traces.as_slice() {
            [] => format!("--workload {}", self.workload),
            ts => ts.iter().map(|&t| format!("--trace {}", trace_name(t))).collect::<Vec<_>>().join(" "),
        };
        let mut c = format!("xlate run --checked --design {} {input}", self.design);
        if let Some(p) = self.preset {
            c += &format!(" --preset {p}");
        }
        for s in &self.sets {
            c += &format!(" --set '{s}'");
        }
        c
    }
}

/// How a case ended.
#[derive(Debug)]
pub enum Outcome {
    /// It ran to the end: every translation agreed with the ground truth.
    Ok,
    /// The design or the machine refused it (config, memory, a documented limit), in one line.
    Refused(String),
    /// A mismatch, a broken invariant or a panic.
    Failed(String),
}

/// The built-in designs that nest as a guest, and those that nest as a host.
fn nestable() -> (Vec<&'static str>, Vec<&'static str>) {
    let radix4 = arch::lookup("radix4").expect("radix4 is built in");
    let names = |f: &dyn Fn(&'static arch::Design) -> bool| arch::designs().filter(|&d| f(d)).map(|d| d.name).collect();
    (names(&|d| nested::nest(d, radix4).is_ok()), names(&|d| nested::nest(radix4, d).is_ok()))
}

/// The case of `seed` (a function of the seed alone). `accesses` caps its run.
pub fn case(seed: u64, accesses: u64) -> Case {
    let mut rng = Rng::new(seed ^ 0x5712_e55e);
    let mut pick = |n: usize| rng.below(n as u64) as usize;
    let designs: Vec<&str> = arch::designs().map(|d| d.name).collect();
    let (guests, hosts) = nestable();
    let (design, nested) = if pick(20) < 9 {
        let (g, h) = (guests[pick(guests.len())], hosts[pick(hosts.len())]);
        (format!("{g}@{h}"), true)
    } else {
        (designs[pick(designs.len())].to_string(), false)
    };
    // A sixth of the cases replay a generated trace, with the profiles that do not need a
    // workload (a trace has no setup to fork after, no processes to multiply).
    let traced = pick(6) == 0;
    let (workload, wsets) = if traced { ("trace", &[][..]) } else { WORKLOADS[pick(WORKLOADS.len())] };
    let for_traces = |p: &&(&str, &[&str])| !traced || !p.1.iter().any(|s| s.starts_with("workload.") || s.starts_with("sim.fork"));
    let mut profiles: Vec<&(&str, &[&str])> = PROFILES.iter().filter(for_traces).collect();
    if nested {
        profiles.extend(HOST_PROFILES);
    }
    let (profile, psets) = *profiles[pick(profiles.len())];
    let preset = PRESETS[pick(PRESETS.len())];
    let mut sets = vec![format!("sim.max_accesses={accesses}"), format!("seed={}", pick(1000))];
    sets.extend(wsets.iter().chain(psets).map(|s| s.to_string()));
    let traces = if traced { (0..1 + pick(2) as u64).map(|p| seed << 1 | p).collect() } else { Vec::new() };
    Case { design, workload, traces, profile, preset, sets }
}

/// The file name of trace `t` (native format, compressed inside).
fn trace_name(t: u64) -> String {
    format!("stress-{t}.xlt")
}

/// Writes the trace of seed `t` to `path`: one process of one or two threads (`cpu`), 20 000
/// to 200 000 accesses over a 64 MiB heap (uniform at random, and sequential runs from random
/// starts), a stack and code; a tenth are instruction fetches.
pub fn write_trace(t: u64, path: &Path) -> Result<()> {
    let mut rng = Rng::new(t ^ 0x7ace);
    let mut w = trace::create(path, trace::Format::Native)?;
    let threads = 1 + rng.below(2) as u16;
    let n = 20_000 + rng.below(180_000);
    let heap = 0x5555_0000_0000u64;
    let mut cursor = [heap; 2];
    for i in 0..n {
        let cpu = rng.below(threads as u64) as u16;
        let c = &mut cursor[cpu as usize];
        let (kind, vaddr) = match rng.below(10) {
            0 => (AccessKind::Fetch, 0x40_0000 + rng.below(1 << 20) * 4),
            1 => (AccessKind::Store, 0x7ffe_0000_0000 - rng.below(1 << 16) * 8),
            2..=4 => (AccessKind::Load, (heap + rng.below(64 << 20)) & !7),
            5 => {
                *c = (heap + rng.below(64 << 20)) & !7;
                (AccessKind::Store, *c)
            }
            _ => {
                *c = heap + (*c - heap + 64) % (64 << 20);
                (if rng.below(3) == 0 { AccessKind::Store } else { AccessKind::Load }, *c)
            }
        };
        w.write(&Access { cpu, asid: 0, ip: 0x40_1000 + (i % 97) * 4, vaddr, kind, size: 8, instrs: 1 + rng.below(6) as u32 })?;
    }
    w.finish()
}

/// Runs `c` in checked mode, in-process; a trace case writes its trace into `dir` first and
/// removes it unless the case failed.
pub fn run(c: &Case, dir: &Path) -> Outcome {
    let traces: Vec<PathBuf> = c.traces.iter().map(|&t| dir.join(trace_name(t))).collect();
    let r = catch_unwind(AssertUnwindSafe(|| -> Result<()> {
        let d = arch::lookup(&c.design)?;
        let mut sets = vec!["sim.checked=true".to_string()];
        if c.traces.is_empty() {
            sets.push(format!("workload.name=\"{}\"", c.workload));
        }
        sets.extend(c.sets.iter().cloned());
        let cfg = Layers { preset: c.preset.map(str::to_string), file: None, sets }.resolve(Some(d))?;
        for (t, p) in c.traces.iter().zip(&traces) {
            write_trace(*t, p)?;
        }
        sim::run(d, &cfg, &traces, false).map(|_| ())
    }));
    let outcome = match r {
        Ok(Ok(())) => Outcome::Ok,
        Ok(Err(e @ Error::Check(_))) => Outcome::Failed(e.to_string()),
        Ok(Err(e)) => Outcome::Refused(e.to_string()),
        Err(p) => Outcome::Failed(format!("panicked: {}", crate::sweep::runner::panic_message(p.as_ref()))),
    };
    if !matches!(outcome, Outcome::Failed(_)) {
        for p in &traces {
            let _ = std::fs::remove_file(p);
        }
    }
    outcome
}
