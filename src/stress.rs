//! The stress harness: seeded checked-mode runs of every design, natively and as guest@host
//! pairs, on small built-in workloads under settings that make the OS change translations under
//! the MMU: swapping, THP churn (khugepaged and compaction on fragmented memory), processes
//! sharing cores, fork and copy-on-write, workload mixes, the presets' machines, and host-side
//! churn for nested pairs. Checked mode compares every translation with the OS's ground truth
//! (for a pair, the composition gVA → gPA → hPA), so a case fails when it panics or ends in
//! [`Error::Check`] (a mismatch or a broken invariant), unless the message is one of the designs'
//! documented refusals ([`REFUSALS`]). A config error or the simulated machine running out of
//! memory is a refusal: the case asked for something that machine cannot do.
//!
//! Where `crate::fuzz` feeds the parsers mutated input, this harness feeds the simulator valid
//! input it has rarely seen together. `cargo run --release --example stress -- --minutes N` is the
//! long run; `tests/it/stress.rs` a bounded slice. docs/robustness.md.

use crate::arch::{self, nested};
use crate::config::Layers;
use crate::error::Error;
use crate::rng::Rng;
use crate::sim;
use std::panic::{catch_unwind, AssertUnwindSafe};

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

/// Checked errors that are a design's documented limits, not bugs: DIPTA has no synonyms
/// (docs/dipta.md), restrictive-only Utopia cannot share a page (docs/utopia.md). Each is the
/// start of its refusal's own wording, so a new message of these designs is not excused.
pub const REFUSALS: &[&str] = &["DIPTA has no synonyms or copy-on-write", "without a FlexSeg (arch.utopia.flexseg = false)"];

/// One case: a design, a workload and its settings.
#[derive(Clone, Debug)]
pub struct Case {
    /// Design (`guest@host` for a pair).
    pub design: String,
    /// Workload.
    pub workload: &'static str,
    /// Name of the settings profile.
    pub profile: &'static str,
    /// Preset, if any.
    pub preset: Option<&'static str>,
    /// Every `--set` of the case, the workload's and the profile's included.
    pub sets: Vec<String>,
}

impl Case {
    /// The command line that runs this case alone.
    pub fn command(&self) -> String {
        let mut c = format!("xlate run --checked --design {} --workload {}", self.design, self.workload);
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

/// Designs a guest@host pair may combine: every built-in one that nests as a guest or a host.
fn nestable() -> Vec<&'static str> {
    let radix4 = arch::lookup("radix4").expect("radix4 is built in");
    arch::designs().filter(|d| nested::nest(d, radix4).is_ok() || nested::nest(radix4, d).is_ok()).map(|d| d.name).collect()
}

/// The case of `seed` (a function of the seed alone). `accesses` caps its run.
pub fn case(seed: u64, accesses: u64) -> Case {
    let mut rng = Rng::new(seed ^ 0x5712_e55e);
    let mut pick = |n: usize| rng.below(n as u64) as usize;
    let designs: Vec<&str> = arch::designs().map(|d| d.name).collect();
    let pairs = nestable();
    let (design, nested) = if pick(20) < 9 {
        let (g, h) = (pairs[pick(pairs.len())], pairs[pick(pairs.len())]);
        (format!("{g}@{h}"), true)
    } else {
        (designs[pick(designs.len())].to_string(), false)
    };
    let (workload, wsets) = WORKLOADS[pick(WORKLOADS.len())];
    let profiles = if nested { PROFILES.len() + HOST_PROFILES.len() } else { PROFILES.len() };
    let k = pick(profiles);
    let (profile, psets) = if k < PROFILES.len() { PROFILES[k] } else { HOST_PROFILES[k - PROFILES.len()] };
    let preset = PRESETS[pick(PRESETS.len())];
    let mut sets = vec![format!("sim.max_accesses={accesses}"), format!("seed={}", pick(1000))];
    sets.extend(wsets.iter().chain(psets).map(|s| s.to_string()));
    Case { design, workload, profile, preset, sets }
}

/// Runs `c` in checked mode, in-process.
pub fn run(c: &Case) -> Outcome {
    let r = catch_unwind(AssertUnwindSafe(|| -> crate::error::Result<()> {
        let d = arch::lookup(&c.design)?;
        let mut sets = vec![format!("workload.name=\"{}\"", c.workload), "sim.checked=true".to_string()];
        sets.extend(c.sets.iter().cloned());
        let cfg = Layers { preset: c.preset.map(str::to_string), file: None, sets }.resolve(Some(d))?;
        sim::run(d, &cfg, &[], false).map(|_| ())
    }));
    match r {
        Ok(Ok(())) => Outcome::Ok,
        Ok(Err(Error::Check(m))) if !REFUSALS.iter().any(|r| m.contains(r)) => Outcome::Failed(format!("checked mode: {m}")),
        Ok(Err(e)) => Outcome::Refused(e.to_string()),
        Err(p) => Outcome::Failed(format!(
            "panicked: {}",
            p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
        )),
    }
}
