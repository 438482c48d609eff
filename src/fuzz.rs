//! The fuzz harness (stable toolchain, no libFuzzer): seeded mutations of sample traces (native,
//! ChampSim, lackey) and of configurations, each fed to the parsers and to a short simulation
//! in-process. A case passes when it ends in `Ok` or in an `Err` whose message is one line; a
//! panic is a failure, reported with the seed that reproduces it. The host-memory side (no
//! allocation beyond the config's estimate) is checked by the callers, which own the global
//! allocator (`tests/fuzz.rs`, `examples/fuzz.rs`). docs/robustness.md says what is covered.

use crate::arch;
use crate::config::Layers;
use crate::error::Result;
use crate::rng::Rng;
use crate::sim;
use crate::trace::{self, champsim::Record, Access, AccessKind};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// What a case was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A mutated native trace.
    Native,
    /// A mutated ChampSim trace.
    ChampSim,
    /// A mutated lackey log.
    Lackey,
    /// A mutated configuration (a TOML file) over a small GUPS run.
    Config,
}

/// One case's outcome.
#[derive(Debug)]
pub enum Outcome {
    /// Ran to the end.
    Ok,
    /// Refused with this one-line error.
    Refused(String),
    /// Panicked (a bug), with the panic message.
    Panicked(String),
    /// An error message of more than one line (the CLI prints errors as one line).
    BadError(String),
}

/// The settings every simulated case runs with: a small machine and a short run, so each case
/// takes milliseconds.
/// `sim.max_host_memory` ties the host-memory check to the estimate: a config estimated above
/// [`HOST_BUDGET`] is refused, so a case that allocates far more found an estimate that lies.
const SMALL: &[&str] =
    &["os.memory=\"256M\"", "sim.max_accesses=3000", "sim.epoch_accesses=1000", "sim.checked=true", "sim.max_host_memory=\"256M\""];

/// Host memory a case may estimate (`sim.max_host_memory` of every case).
pub const HOST_BUDGET: u64 = 256 << 20;
/// What a case may allocate beyond its estimate: buffers, trace readers, the OS's maps.
pub const HOST_SLACK: u64 = 192 << 20;

/// Designs a case runs on (one per case, by seed): the drivers with the most input-dependent code,
/// and the accelerator engine (its conventional flow; SPARTA and DIPTA swap by default, and a
/// mutated `workload.processes` then thrashes for minutes, noted on issue 16).
const DESIGNS: &[&str] = &["radix4", "radix5", "ecpt", "fpt-l4l3-l2l1", "utopia", "pomtlb", "rmm", "arm64-thp", "accel-conventional"];

/// A sample stream of accesses: small, varied, with the patterns real traces have.
fn sample_accesses(rng: &mut Rng, n: usize) -> Vec<Access> {
    let mut v = Vec::with_capacity(n);
    let mut data = 0x7f00_0000_0000u64;
    for i in 0..n {
        data = match rng.below(4) {
            0 => 0x10_0000 + rng.below(1 << 26) * 8,
            1 => data + 64,
            _ => data.wrapping_add(rng.below(1 << 16)),
        } & !7;
        let kind = if rng.below(3) == 0 { AccessKind::Store } else { AccessKind::Load };
        v.push(Access {
            vaddr: data,
            kind,
            size: 8,
            ip: 0x40_1000 + (i as u64 % 64) * 4,
            instrs: 1 + rng.below(4) as u32,
            ..Access::default()
        });
    }
    v
}

/// The bytes of a valid sample trace of `kind`.
fn sample_trace(kind: Kind, rng: &mut Rng, dir: &Path) -> Result<Vec<u8>> {
    let acc = sample_accesses(rng, 200);
    Ok(match kind {
        Kind::Native => {
            let p = dir.join("sample.xlt");
            let mut w = trace::create(&p, trace::Format::Native)?;
            for a in &acc {
                w.write(a)?;
            }
            w.finish()?;
            let b = std::fs::read(&p).map_err(|e| crate::error::Error::io(p.display().to_string(), e))?;
            let _ = std::fs::remove_file(&p);
            b
        }
        Kind::ChampSim => acc
            .iter()
            .flat_map(|a| {
                let mut r = Record { ip: a.ip, ..Record::default() };
                if a.kind == AccessKind::Store {
                    r.destination_memory[0] = a.vaddr;
                } else {
                    r.source_memory[0] = a.vaddr;
                }
                r.encode()
            })
            .collect(),
        Kind::Lackey | Kind::Config => {
            let mut s = String::from("==1== Lackey, an example Valgrind tool\n");
            for a in &acc {
                s += &format!("I  {:08x},4\n {} {:x},{}\n", a.ip, if a.kind == AccessKind::Store { 'S' } else { 'L' }, a.vaddr, a.size);
            }
            s.into_bytes()
        }
    })
}

/// Values a mutation writes: the edges parsers get wrong.
const EDGE_U64: [u64; 10] = [0, 1, 7, 0xff, 0x1000, 0x7fff_ffff_f000, 1 << 47, 1 << 56, u64::MAX - 63, u64::MAX];

/// Mutates `b` in place: bit flips, byte runs, truncation, duplication, edge values.
fn mutate(b: &mut Vec<u8>, rng: &mut Rng) {
    for _ in 0..1 + rng.below(4) {
        let len = b.len().max(1) as u64;
        match rng.below(7) {
            0 if !b.is_empty() => {
                let i = rng.below(len) as usize;
                b[i] ^= 1 << rng.below(8);
            }
            1 if !b.is_empty() => {
                let i = rng.below(len) as usize;
                b[i] = rng.next_u64() as u8;
            }
            2 => b.truncate(rng.below(len + 1) as usize),
            3 if !b.is_empty() => {
                let i = rng.below(len) as usize;
                let j = (i + 1 + rng.below(64) as usize).min(b.len());
                let chunk = b[i..j].to_vec();
                let at = rng.below(b.len() as u64 + 1) as usize;
                b.splice(at..at, chunk);
            }
            4 if b.len() >= 8 => {
                let i = rng.below(len - 7) as usize;
                b[i..i + 8].copy_from_slice(&EDGE_U64[rng.below(EDGE_U64.len() as u64) as usize].to_le_bytes());
            }
            5 => {
                let at = rng.below(len + 1) as usize;
                let junk: Vec<u8> = (0..rng.below(32)).map(|_| rng.next_u64() as u8).collect();
                b.splice(at.min(b.len())..at.min(b.len()), junk);
            }
            _ => {
                let at = rng.below(len + 1) as usize;
                let text = [&b"\n"[..], b",", b" L ", b"ffffffffffffffff", b"-1", b"\0", b"9999999999999999999999"];
                let t = text[rng.below(text.len() as u64) as usize];
                b.splice(at.min(b.len())..at.min(b.len()), t.iter().copied());
            }
        }
    }
}

/// Config keys a config case sets, with the kinds of value they take.
const KEYS: &[&str] = &[
    "cores",
    "core.ghz",
    "core.base_cpi",
    "core.mlp",
    "core.translation_exposure",
    "mmu.l2.entries",
    "mmu.l2.ways",
    "mmu.l2.latency",
    "mmu.l1d[0].entries",
    "mmu.l1d[0].ways",
    "mmu.l1i.sizes",
    "mmu.l2.sizes",
    "mmu.walker_entry",
    "mem.l1d.size",
    "mem.l1d.ways",
    "mem.l2.size",
    "mem.llc.size",
    "mem.llc.ways",
    "mem.dram.channels",
    "mem.dram.banks",
    "mem.dram.row_bytes",
    "mem.dram.t_cl_ns",
    "os.memory",
    "os.max_order",
    "os.thp",
    "os.fragmentation.method",
    "os.fragmentation.target",
    "os.fault_trap_cycles",
    "os.costs.call",
    "os.swap.enabled",
    "os.hugetlb_1g",
    "os.khugepaged.sleep_ms",
    "arch.radix.levels",
    "arch.radix.pwc[0].entries",
    "arch.ecpt.ways",
    "arch.utopia.restsegs[0].size",
    "arch.pomtlb.entries",
    "sim.warmup_accesses",
    "sim.quantum_instrs",
    "workload.params.table",
    "workload.params.updates",
    "workload.processes",
];

/// TOML values a config case tries.
const VALUES: &[&str] = &[
    "0",
    "1",
    "3",
    "12",
    "64",
    "4096",
    "65536",
    "1048576",
    "-1",
    "-40",
    "9223372036854775807",
    "0.0",
    "0.5",
    "-0.5",
    "1.5",
    "nan",
    "inf",
    "1e300",
    "true",
    "false",
    "\"\"",
    "\"x\"",
    "\"4K\"",
    "\"2M\"",
    "\"1G\"",
    "\"64T\"",
    "\"always\"",
    "\"never\"",
    "[]",
    "[\"4K\"]",
    "[\"3K\"]",
    "{}",
    "\"fmfi\"",
    "\"l2\"",
];

/// Runs case `seed` (what it is follows from the seed) in scratch directory `dir`.
pub fn case(seed: u64, dir: &Path) -> (Kind, Outcome) {
    let mut rng = Rng::new(seed);
    let kind = [Kind::Native, Kind::ChampSim, Kind::Lackey, Kind::Config][rng.below(4) as usize];
    let design = DESIGNS[rng.below(DESIGNS.len() as u64) as usize];
    let outcome = catch_unwind(AssertUnwindSafe(|| -> Result<()> {
        let mut sets: Vec<String> = SMALL.iter().map(|s| s.to_string()).collect();
        let mut traces: Vec<PathBuf> = Vec::new();
        let mut file = None;
        if kind == Kind::Config {
            sets.push("workload.params.table=\"16M\"".into());
            let mut toml = String::new();
            for _ in 0..1 + rng.below(3) {
                let k = KEYS[rng.below(KEYS.len() as u64) as usize];
                let v = VALUES[rng.below(VALUES.len() as u64) as usize];
                // Dotted keys with an index are written as --set strings.
                if k.contains('[') {
                    sets.push(format!("{k}={v}"));
                } else {
                    toml += &format!("{k} = {v}\n");
                }
            }
            let mut bytes = toml.into_bytes();
            if rng.below(4) == 0 {
                mutate(&mut bytes, &mut rng);
            }
            let p = dir.join(format!("case-{seed}.toml"));
            std::fs::write(&p, &bytes).map_err(|e| crate::error::Error::io(p.display().to_string(), e))?;
            let v = crate::config::read_file(&p);
            let _ = std::fs::remove_file(&p);
            file = Some((p.display().to_string(), v?));
        } else {
            let mut bytes = sample_trace(kind, &mut rng, dir)?;
            mutate(&mut bytes, &mut rng);
            let ext = match kind {
                Kind::Native => "xlt",
                Kind::ChampSim => "champsim",
                _ => "lackey",
            };
            let p = dir.join(format!("case-{seed}.{ext}"));
            std::fs::write(&p, &bytes).map_err(|e| crate::error::Error::io(p.display().to_string(), e))?;
            // The parser alone, then a simulation.
            if let Ok(mut src) = trace::open(&p) {
                let _ = trace::info(src.as_mut(), Some(10_000));
            }
            traces.push(p);
        }
        let d = arch::lookup(design)?;
        let cfg = Layers { preset: None, file, sets }.resolve(Some(d))?;
        let r = sim::run(d, &cfg, &traces, false);
        for t in &traces {
            let _ = std::fs::remove_file(t);
        }
        r.map(|_| ())
    }));
    let outcome = match outcome {
        Ok(Ok(())) => Outcome::Ok,
        Ok(Err(e)) => {
            let m = e.to_string();
            if m.contains('\n') {
                Outcome::BadError(m)
            } else {
                Outcome::Refused(m)
            }
        }
        Err(p) => Outcome::Panicked(crate::sweep::runner::panic_message(p.as_ref())),
    };
    (kind, outcome)
}

/// The long runs' hang detector (`examples/fuzz.rs`, `examples/stress.rs`): the loop tells it
/// which seed starts; a thread ends the process with exit code 1, printing `describe(seed)`, when
/// one seed has run longer than the limit.
pub struct Watchdog {
    start: std::time::Instant,
    /// The seed running now and when it started (ms since `start`).
    current: std::sync::Arc<(std::sync::atomic::AtomicU64, std::sync::atomic::AtomicU64)>,
}

impl Watchdog {
    /// Starts the watching thread.
    pub fn start(hang: std::time::Duration, describe: impl Fn(u64) -> String + Send + 'static) -> Watchdog {
        use std::sync::atomic::Ordering;
        let w = Watchdog { start: std::time::Instant::now(), current: Default::default() };
        let (start, current) = (w.start, std::sync::Arc::clone(&w.current));
        std::thread::spawn(move || loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
            let since = std::time::Duration::from_millis(current.1.load(Ordering::Relaxed));
            if start.elapsed().saturating_sub(since) > hang {
                println!("{} (still running after {} s)", describe(current.0.load(Ordering::Relaxed)), hang.as_secs());
                std::process::exit(1);
            }
        });
        w
    }

    /// Seed `seed` starts now.
    pub fn begin(&self, seed: u64) {
        use std::sync::atomic::Ordering;
        self.current.1.store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
        self.current.0.store(seed, Ordering::Relaxed);
    }
}
