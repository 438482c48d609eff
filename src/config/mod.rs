//! The machine + OS + driver + workload description of one run, and how it is resolved.
//!
//! Layers, each overriding the previous: built-in defaults (Utopia MICRO'23 Table 1), a named
//! preset, the design's own settings, a TOML file, then `--set key=value`. Every layer is checked
//! against the keys that exist, so a misspelt key is an error naming it, never silently ignored.
//! The resolved config is validated once here; the simulator never re-checks it.

pub mod accel;
pub mod hostmem;
pub mod sources;

use crate::arch::nested::HostConfig;
use crate::arch::{ArchConfig, Design};
use crate::error::{Error, Result};
use crate::mem::MemConfig;
use crate::mmu::MmuConfig;
use crate::os::OsConfig;
pub use accel::AccelConfig;
use std::collections::BTreeMap;
use toml::Value;

/// Core timing parameters.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CoreConfig {
    /// Clock (Utopia Table 1: 2.6 GHz).
    pub ghz: f64,
    /// Cycles per instruction when no access misses (4-wide OoO core ≈ 0.5; an assumption).
    pub base_cpi: f64,
    /// Memory-level parallelism dividing data-miss latency beyond the L1.
    pub mlp: f64,
    /// Fraction of translation latency exposed to execution (1 = walks stall the core fully, the
    /// additive model EMT's analysis uses).
    pub translation_exposure: f64,
}

impl Default for CoreConfig {
    fn default() -> Self {
        CoreConfig { ghz: 2.6, base_cpi: 0.5, mlp: 2.0, translation_exposure: 1.0 }
    }
}

/// What runs.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkloadConfig {
    /// Built-in workload name (ignored when a trace is given).
    pub name: String,
    /// Its parameters (see `xlate workloads`).
    pub params: BTreeMap<String, String>,
    /// Independent processes each running the workload (own address space, seed + i).
    pub processes: usize,
    /// A multiprogrammed mix: one process per entry, each its own workload and parameters
    /// (replaces `name`/`params`/`processes` when not empty). Processes are spread over the cores
    /// round-robin; with fewer cores than processes they time-share (`sim.quantum_instrs`).
    pub mix: Vec<MixEntry>,
}

/// One process of a multiprogrammed mix.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixEntry {
    /// Built-in workload name.
    pub name: String,
    /// Its parameters, as text (`{ table = "1G" }`).
    #[serde(default)]
    pub params: BTreeMap<String, String>,
}

impl WorkloadConfig {
    /// The (workload, parameters) of every process, in ASID order.
    pub fn processes(&self) -> Vec<(&str, &BTreeMap<String, String>)> {
        if self.mix.is_empty() {
            (0..self.processes).map(|_| (self.name.as_str(), &self.params)).collect()
        } else {
            self.mix.iter().map(|m| (m.name.as_str(), &m.params)).collect()
        }
    }
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig { name: "gups".into(), params: BTreeMap::new(), processes: 1, mix: Vec::new() }
    }
}

/// Simulation control.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    /// Stop after this many accesses in total (0 = when every stream ends).
    pub max_accesses: u64,
    /// Accesses simulated before every reported count restarts, at exactly that access (caches,
    /// TLBs and memory stay warm; docs/results-schema.md).
    pub warmup_accesses: u64,
    /// Accesses between epochs (PT-share sampling, background OS work). Progress and Ctrl-C are
    /// checked every chunk of accesses instead, whatever this is (docs/robustness.md).
    pub epoch_accesses: u64,
    /// Compare every walk and TLB hit with the OS's ground truth.
    pub checked: bool,
    /// Instructions a stream runs before the core switches to the next stream it time-shares with.
    pub quantum_instrs: u64,
    /// Flush TLBs on a context switch (no PCIDs).
    pub flush_on_switch: bool,
    /// Fork each workload process once its setup is done; the child stays idle (a snapshot,
    /// as Redis's BGSAVE forks), so the parent's stores copy the pages they touch first
    /// (copy-on-write; docs/os-model.md).
    pub fork_after_setup: bool,
    /// Host memory the simulator's structures may take (estimated before allocating,
    /// [`hostmem`]); 0: three quarters of this machine's memory. `--max-host-memory`.
    #[serde(with = "crate::addr::bytes_serde")]
    pub max_host_memory: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            max_accesses: 0,
            warmup_accesses: 0,
            epoch_accesses: 1 << 20,
            checked: false,
            quantum_instrs: 10_000_000,
            flush_on_switch: false,
            fork_after_setup: false,
            max_host_memory: 0,
        }
    }
}

/// One run's full description.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Seed for every random choice (workload data, fragmentation).
    pub seed: u64,
    /// Cores.
    pub cores: usize,
    /// Core timing.
    pub core: CoreConfig,
    /// TLBs.
    pub mmu: MmuConfig,
    /// Caches and DRAM.
    pub mem: MemConfig,
    /// Operating system.
    pub os: OsConfig,
    /// Driver sections.
    pub arch: ArchConfig,
    /// The hypervisor of a nested design (`guest@host`): its OS, its drivers, the nested TLB.
    /// Unused by native designs.
    pub host: HostConfig,
    /// Accelerators, their translation hardware and the machine's sockets (SPARTA); unused
    /// unless `accel.enabled`.
    pub accel: AccelConfig,
    /// Workload.
    pub workload: WorkloadConfig,
    /// Simulation control.
    pub sim: SimConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            seed: 42,
            cores: 1,
            core: CoreConfig::default(),
            mmu: MmuConfig::default(),
            mem: MemConfig::default(),
            os: OsConfig::default(),
            arch: ArchConfig::default(),
            host: HostConfig::default(),
            accel: AccelConfig::default(),
            workload: WorkloadConfig::default(),
            sim: SimConfig::default(),
        }
    }
}

impl Config {
    /// Checks every range the simulator relies on.
    pub fn validate(&self) -> Result<()> {
        if self.cores == 0 || self.cores > 256 {
            return Err(Error::config("cores", format!("must be between 1 and 256, found {}", self.cores)));
        }
        if self.core.ghz.is_nan() || self.core.ghz <= 0.0 {
            return Err(Error::config("core.ghz", "must be positive"));
        }
        if self.core.mlp.is_nan() || self.core.mlp < 1.0 {
            return Err(Error::config("core.mlp", "must be at least 1"));
        }
        if self.core.base_cpi < 0.0 {
            return Err(Error::config("core.base_cpi", "must not be negative"));
        }
        let v = to_value(self);
        check_numbers(&v, "")?;
        if self.core.translation_exposure > 1.0 {
            return Err(Error::config(
                "core.translation_exposure",
                "must be between 0 and 1 (the exposed fraction of translation latency)",
            ));
        }
        if self.workload.processes == 0 || self.workload.processes > 4096 {
            return Err(Error::config("workload.processes", format!("must be between 1 and 4096, found {}", self.workload.processes)));
        }
        if self.sim.epoch_accesses == 0 {
            return Err(Error::config("sim.epoch_accesses", "must be at least 1"));
        }
        self.mmu.validate()?;
        self.mem.validate("mem")?;
        self.os.validate()?;
        self.arch.validate()?;
        if self.accel.enabled {
            self.accel.validate(self.os.memory)?;
        }
        self.host.validate()?;
        let ntlb = &self.host.ntlb;
        if ntlb.enabled && ntlb.in_l2_tlb {
            if let Some(z) = ntlb.sizes.iter().find(|&&z| !self.mmu.l2.sizes.contains(&z)) {
                return Err(Error::config(
                    "host.ntlb.sizes",
                    format!("stage-2 entries of {} are to live in the L2 TLB (host.ntlb.in_l2_tlb), which does not hold that size (mmu.l2.sizes)", z.label()),
                ));
            }
        }
        hostmem::check(self, &v)?;
        // Every physical address the caches see is below the guest's or the hypervisor's memory
        // (checked after the host-memory limit, which refuses absurd sizes by their own key).
        self.mem.check_reach("mem", self.os.memory.max(self.host.os.memory))
    }
}

/// A named preset: a partial TOML applied over the defaults.
pub struct Preset {
    /// Name.
    pub name: &'static str,
    /// One-line description.
    pub description: &'static str,
    /// The TOML text (comments cite the sources).
    pub toml: &'static str,
}

/// Every preset.
pub static PRESETS: &[Preset] = &[
    Preset {
        name: "utopia-micro23",
        description: "Utopia MICRO'23 Table 1 machine (the built-in defaults)",
        toml: include_str!("presets/utopia-micro23.toml"),
    },
    Preset {
        name: "emt-osdi25",
        description: "EMT OSDI'25 simulation machine (its DynamoRIO cache model and PWCs)",
        toml: include_str!("presets/emt-osdi25.toml"),
    },
    Preset { name: "virtuoso", description: "Virtuoso (Sniper + MimicOS) defaults", toml: include_str!("presets/virtuoso.toml") },
    Preset {
        name: "champsim",
        description: "ChampSim's shipped champsim_config.json, key by key (use --design radix5; docs/champsim.md)",
        toml: include_str!("presets/champsim.toml"),
    },
    Preset {
        name: "zen3",
        description: "AMD Zen 3 (x86-64): 64-entry fully associative L1 D-TLB, 2048-entry L2 TLB, 32K/512K/32M caches",
        toml: include_str!("presets/zen3.toml"),
    },
    Preset {
        name: "altra",
        description: "Ampere Altra / Neoverse N1 (Elastic Translations' machine): 48-entry L1 and 1280-entry L2 TLBs holding 64K/32M",
        toml: include_str!("presets/altra.toml"),
    },
];

/// Finds a preset.
pub fn preset(name: &str) -> Result<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name).ok_or_else(|| Error::Unknown {
        what: "preset",
        name: name.into(),
        known: PRESETS.iter().map(|p| p.name.to_string()).collect(),
    })
}

/// Keys whose contents are free-form maps (checked later by their owner).
const OPEN_TABLES: &[&str] = &["workload.params"];

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a number",
        Value::Boolean(_) => "true or false",
        Value::Datetime(_) => "a date",
        Value::Array(_) => "an array",
        Value::Table(_) => "a table",
    }
}

/// Whether `new` may replace `old`: the same TOML type, an integer for a float, or a byte size
/// ("2M") for an integer (byte-size keys serialize as either).
fn compatible(old: &Value, new: &Value) -> bool {
    matches!(
        (old, new),
        (Value::String(_), Value::String(_))
            | (Value::Integer(_), Value::Integer(_))
            | (Value::Float(_), Value::Float(_) | Value::Integer(_))
            | (Value::Boolean(_), Value::Boolean(_))
            | (Value::Array(_), Value::Array(_))
            | (Value::Table(_), Value::Table(_))
            | (Value::String(_), Value::Integer(_))
    ) || matches!((old, new), (Value::Integer(_), Value::String(s)) if crate::addr::parse_bytes(s).is_some())
}

/// Merges `over` into `base`, refusing keys `base` does not have. `origin` names the layer (file
/// name or `--set`) in errors.
fn merge(base: &mut Value, over: &Value, path: &str, origin: &str) -> Result<()> {
    let (Value::Table(b), Value::Table(o)) = (&mut *base, over) else {
        *base = over.clone();
        return Ok(());
    };
    let open = OPEN_TABLES.contains(&path);
    for (k, v) in o {
        let key = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
        match b.get_mut(k) {
            Some(old) => {
                if !compatible(old, v) {
                    return Err(Error::config(key, format!("{origin}: expected {}, found {}", type_name(old), type_name(v))));
                }
                if let (Value::Float(_), Value::Integer(i)) = (&*old, v) {
                    *old = Value::Float(*i as f64);
                } else if let (Value::Integer(_), Value::String(t)) = (&*old, v) {
                    let bytes = crate::addr::parse_bytes(t).expect("checked by compatible");
                    *old = Value::Integer(i64::try_from(bytes).map_err(|_| Error::config(key.clone(), "value too large"))?);
                } else if let (true, Value::Table(ot), Value::Table(nt)) = (OPEN_TABLES.contains(&key.as_str()), &mut *old, v) {
                    // Free-form maps keep their values as text for their owner to parse.
                    for (k2, v2) in nt {
                        ot.insert(k2.clone(), Value::String(value_text(v2)));
                    }
                } else if matches!(old, Value::Table(_)) {
                    merge(old, v, &key, origin)?;
                } else {
                    *old = v.clone();
                }
            }
            None if open => {
                b.insert(k.clone(), Value::String(value_text(v)));
            }
            None => {
                let known: Vec<&String> = b.keys().collect();
                return Err(Error::config(
                    key,
                    format!("{origin}: no such key; keys here are: {}", known.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")),
                ));
            }
        }
    }
    Ok(())
}

fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Parses `key.path[i].x=value` into a one-key TOML table.
fn set_to_value(kv: &str, base: &Value) -> Result<Value> {
    let (key, raw) = kv.split_once('=').ok_or_else(|| Error::config(kv, "--set expects key=value"))?;
    let key = key.trim();
    let key = &index_single_arrays(key, base)?;
    // Walk the base to find the existing value and build the nested override.
    let parts: Vec<&str> = key.split('.').collect();
    let mut cur = Some(base);
    let mut in_open = false;
    for (i, p) in parts.iter().enumerate() {
        let prefix = parts[..i].join(".");
        if OPEN_TABLES.contains(&prefix.as_str()) {
            in_open = true;
        }
        let (name, idx) = match p.split_once('[') {
            Some((n, rest)) => {
                let idx: usize = rest
                    .trim_end_matches(']')
                    .parse()
                    .map_err(|_| Error::config(key, "array index must be a number, e.g. mmu.l1d[0].entries"))?;
                (n, Some(idx))
            }
            None => (*p, None),
        };
        cur = cur.and_then(|v| v.get(name));
        if let Some(i) = idx {
            cur = cur.and_then(|v| v.as_array()).and_then(|a| a.get(i));
            if cur.is_none() {
                return Err(Error::config(key, format!("`{name}` has no element {i}")));
            }
        }
    }
    let raw = raw.trim();
    let parsed: Value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| Value::String(raw.to_string()));
    let parsed = match (cur, &parsed) {
        // A bare word for a string key (`--set os.thp=always`) parses as a string already; a
        // number for a string key stays as the user wrote it.
        (Some(Value::String(_)), Value::Integer(_) | Value::Float(_) | Value::Boolean(_)) => Value::String(raw.to_string()),
        _ => parsed,
    };
    if cur.is_none() && !in_open {
        return Err(Error::config(key, "--set: no such key (`xlate run --print-config` lists every key)"));
    }
    // Build the nested table; array elements are rebuilt from the base array with one change.
    fn build(base: Option<&Value>, parts: &[&str], leaf: Value) -> Value {
        if parts.is_empty() {
            return leaf;
        }
        let p = parts[0];
        let mut t = toml::Table::new();
        match p.split_once('[') {
            Some((n, rest)) => {
                let idx: usize = rest.trim_end_matches(']').parse().unwrap_or(0);
                let mut arr = base.and_then(|b| b.get(n)).and_then(|a| a.as_array()).cloned().unwrap_or_default();
                let elem = build(arr.get(idx), &parts[1..], leaf);
                if let Some(slot) = arr.get_mut(idx) {
                    let mut merged = slot.clone();
                    let _ = merge(&mut merged, &elem, "", "");
                    *slot = merged;
                }
                t.insert(n.to_string(), Value::Array(arr));
            }
            None => {
                t.insert(p.to_string(), build(base.and_then(|b| b.get(p)), &parts[1..], leaf));
            }
        }
        Value::Table(t)
    }
    Ok(build(Some(base), &parts, parsed))
}

/// Rewrites the natural form of a key into a list of tables (`mmu.l1d.entries`) into the indexed
/// form (`mmu.l1d[0].entries`) when the list has one element; when it has several, the error names
/// each indexed form (with the element's page sizes, where it has them) so the user can pick.
fn index_single_arrays(key: &str, base: &Value) -> Result<String> {
    let parts: Vec<&str> = key.split('.').collect();
    let mut out: Vec<String> = Vec::with_capacity(parts.len());
    let mut cur = Some(base);
    for (i, p) in parts.iter().enumerate() {
        let (name, indexed) = match p.split_once('[') {
            Some((n, _)) => (n, true),
            None => (*p, false),
        };
        cur = cur.and_then(|v| v.get(name));
        let last = i + 1 == parts.len();
        match (cur, indexed, last) {
            (Some(Value::Array(a)), false, false) if a.iter().all(|e| e.is_table()) => {
                if a.len() == 1 {
                    out.push(format!("{name}[0]"));
                    cur = a.first();
                    continue;
                }
                let rest = parts[i + 1..].join(".");
                let at = out.iter().cloned().chain([name.to_string()]).collect::<Vec<_>>().join(".");
                let forms: Vec<String> = a
                    .iter()
                    .enumerate()
                    .map(|(j, e)| {
                        let sizes = e
                            .get("sizes")
                            .and_then(|s| s.as_array())
                            .map(|s| s.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join("+"));
                        match sizes {
                            Some(s) => format!("{at}[{j}].{rest} ({s} pages)"),
                            None => format!("{at}[{j}].{rest}"),
                        }
                    })
                    .collect();
                return Err(Error::config(key, format!("`{at}` is a list of {} tables; name one: {}", a.len(), forms.join(", "))));
            }
            (Some(Value::Array(a)), true, _) => {
                let idx = p.split_once('[').map(|(_, r)| r.trim_end_matches(']')).and_then(|r| r.parse::<usize>().ok());
                cur = idx.and_then(|j| a.get(j));
            }
            _ => {}
        }
        out.push(p.to_string());
    }
    Ok(out.join("."))
}

/// Every number of a config must be finite and non-negative: no key means anything by NaN,
/// infinity or a negative count, size, latency, cost or rate (the simulator's arithmetic would
/// turn them into zero or `null` results). Names the first offending key.
fn check_numbers(v: &Value, key: &str) -> Result<()> {
    match v {
        Value::Float(x) if !x.is_finite() || *x < 0.0 => {
            Err(Error::config(key, format!("must be a finite, non-negative number, found {x}")))
        }
        Value::Integer(i) if *i < 0 => Err(Error::config(key, format!("must not be negative, found {i}"))),
        Value::Table(t) => t.iter().try_for_each(|(k, v)| check_numbers(v, &if key.is_empty() { k.clone() } else { format!("{key}.{k}") })),
        Value::Array(a) => a.iter().enumerate().try_for_each(|(i, v)| check_numbers(v, &format!("{key}[{i}]"))),
        _ => Ok(()),
    }
}

fn to_value(c: &Config) -> Value {
    Value::try_from(c).expect("config serializes")
}

fn from_value(v: Value, origin: &str) -> Result<Config> {
    v.try_into::<Config>().map_err(|e| {
        let msg = e.to_string();
        let line = msg.lines().find(|l| !l.trim().is_empty()).unwrap_or("invalid value");
        Error::config(origin, plain_serde_message(line))
    })
}

/// serde's wording for a value of the wrong kind ("invalid value: integer `-1`, expected usize")
/// in the config's own terms ("expected a whole number of at least 0, found -1").
fn plain_serde_message(line: &str) -> String {
    let kind = |t: &str| match t.trim() {
        "usize" | "u64" | "u32" | "u16" | "u8" => "a whole number of at least 0".to_string(),
        "i64" | "i32" => "a whole number".to_string(),
        "f64" | "f32" => "a number".to_string(),
        other => other.to_string(),
    };
    for prefix in ["invalid value: ", "invalid type: "] {
        if let Some(rest) = line.strip_prefix(prefix) {
            if let Some((found, expected)) = rest.rsplit_once(", expected ") {
                // "integer `-1`", "floating point `1.5`", "string \"abc\"": keep the value.
                let found = match (found.find('`'), found.find('"')) {
                    (Some(i), _) => found[i..].trim_matches('`'),
                    (None, Some(i)) => &found[i..],
                    _ => found,
                };
                return format!("expected {}, found {found}", kind(expected));
            }
        }
    }
    line.to_string()
}

/// Reads a TOML file as a value, with errors naming the file.
pub fn read_file(path: &std::path::Path) -> Result<Value> {
    let whose = || format!("config file {}", path.display());
    if path.is_dir() {
        return Err(Error::io(whose(), std::io::Error::new(std::io::ErrorKind::InvalidInput, "is a directory, not a TOML file")));
    }
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(whose(), e))?;
    toml::from_str::<toml::Table>(&text).map(Value::Table).map_err(|e| Error::io(whose(), toml_syntax_error(&e)))
}

/// A TOML syntax error as one line: where (line and column, 1-based) and what the parser
/// expected, without the multi-line source excerpt the `toml` crate prints.
fn toml_syntax_error(e: &toml::de::Error) -> std::io::Error {
    let full = e.to_string();
    let position = full.lines().next().and_then(|l| l.find(" at ").map(|i| l[i + 4..].trim().to_string()));
    let msg = e.message().trim().replace('\n', " ");
    let text = match position {
        Some(p) => format!("not valid TOML at {p}: {msg}"),
        None => format!("not valid TOML: {msg}"),
    };
    std::io::Error::new(std::io::ErrorKind::InvalidData, text)
}

/// Everything a run's configuration is built from.
#[derive(Clone, Debug, Default)]
pub struct Layers {
    /// Preset name.
    pub preset: Option<String>,
    /// Config file contents and its name.
    pub file: Option<(String, Value)>,
    /// `--set key=value` strings, in order.
    pub sets: Vec<String>,
}

impl Layers {
    /// Resolves the configuration for `design` (or for none): defaults → preset → the design's
    /// parameters and settings → config file → `--set`.
    pub fn resolve(&self, design: Option<&Design>) -> Result<Config> {
        let mut v = to_value(&Config::default());
        // Whether any layer names `host.os.memory`; if none does, a nested run sizes its host
        // from the guest ([`HostConfig::fit_guest`]).
        let mut host_memory_named = false;
        if let Some(p) = &self.preset {
            let p = preset(p)?;
            let pv = toml::from_str::<toml::Table>(p.toml).map(Value::Table).expect("built-in presets are valid TOML");
            host_memory_named = names_host_memory(&pv);
            merge(&mut v, &pv, "", &format!("preset {}", p.name))?;
        }
        let mut cfg = from_value(v, "preset")?;
        if let Some(d) = design {
            (d.arch)(&mut cfg.arch);
            if let Some(n) = d.nested {
                (n.host.arch)(&mut cfg.host.arch);
            }
        }
        let mut v = to_value(&cfg);
        if let Some(d) = design {
            // A nested design's host settings go to the host's sections (`os.thp` → `host.os.thp`).
            let host = d.nested.map(|n| n.host.settings).unwrap_or(&[]).iter().map(|s| format!("host.{s}"));
            for s in d.settings.iter().map(|s| s.to_string()).chain(host) {
                let over = set_to_value(&s, &v)?;
                host_memory_named |= names_host_memory(&over);
                merge(&mut v, &over, "", &format!("design {}", d.name))?;
            }
            from_value(v.clone(), &format!("design {}", d.name))?;
        }
        if let Some((name, fv)) = &self.file {
            host_memory_named |= names_host_memory(fv);
            merge(&mut v, fv, "", name)?;
            from_value(v.clone(), name)?;
        }
        for s in &self.sets {
            let over = set_to_value(s, &v)?;
            host_memory_named |= names_host_memory(&over);
            merge(&mut v, &over, "", "--set")?;
            // Deserialize after each override so a bad value (an unknown enum variant, a negative
            // size) is reported against the key that set it.
            let key = s.split_once('=').map_or(s.as_str(), |(k, _)| k.trim());
            from_value(v.clone(), key)?;
        }
        let mut cfg = from_value(v, "config")?;
        if design.is_some_and(|d| d.nested.is_some()) && !host_memory_named {
            cfg.host.fit_guest(cfg.os.memory);
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

/// Whether the layer `v` sets `host.os.memory`.
fn names_host_memory(v: &Value) -> bool {
    v.get("host").and_then(|h| h.get("os")).and_then(|o| o.get("memory")).is_some()
}

/// The resolved config as TOML text (for `--print-config` and reports).
pub fn to_toml(c: &Config) -> String {
    toml::to_string(c).expect("config serializes")
}

/// The resolved config as JSON (embedded in every result).
pub fn to_json(c: &Config) -> serde_json::Value {
    serde_json::to_value(c).expect("config serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layers(sets: &[&str]) -> Layers {
        Layers { sets: sets.iter().map(|s| s.to_string()).collect(), ..Layers::default() }
    }

    /// A list of one table takes the natural key (`mmu.l1d.entries` → `mmu.l1d[0].entries`).
    #[test]
    fn natural_key_into_a_list_of_one_table() {
        let mut c = Config::default();
        c.mmu.l1d.truncate(1);
        let base = to_value(&c);
        let over = set_to_value("mmu.l1d.entries=128", &base).unwrap();
        let mut v = base.clone();
        merge(&mut v, &over, "", "--set").unwrap();
        assert_eq!(from_value(v, "test").unwrap().mmu.l1d[0].entries, 128);
        let two = to_value(&Config::default());
        let e = set_to_value("mmu.l1d.entries=128", &two).unwrap_err().to_string();
        assert!(e.contains("mmu.l1d[0].entries (4K pages)"), "{e}");
    }

    #[test]
    fn memfrag_names_ets_fragmenter() {
        let c = layers(&["os.fragmentation.method=memfrag"]).resolve(None).unwrap();
        assert_eq!(c.os.fragmentation.method, crate::os::FragMethod::Fmfi);
    }

    #[test]
    fn defaults_validate_and_presets_resolve() {
        Config::default().validate().unwrap();
        for p in PRESETS {
            Layers { preset: Some(p.name.into()), ..Layers::default() }.resolve(None).unwrap_or_else(|e| panic!("{}: {e}", p.name));
        }
    }

    #[test]
    fn set_overrides_and_checks_keys() {
        let c = layers(&[
            "mmu.l2.entries=2048",
            "mmu.l2.ways=16",
            "os.thp=always",
            "os.memory=8G",
            "workload.params.table=1G",
            "mmu.l1d[1].entries=64",
        ])
        .resolve(None)
        .unwrap();
        assert_eq!(c.mmu.l2.entries, 2048);
        assert_eq!(c.os.thp, crate::os::ThpMode::Always);
        assert_eq!(c.os.memory, 8 << 30);
        assert_eq!(c.workload.params["table"], "1G");
        assert_eq!(c.mmu.l1d[1].entries, 64);
        let e = layers(&["mmu.l2.entrys=5"]).resolve(None).unwrap_err().to_string();
        assert!(e.contains("mmu.l2.entrys") && e.contains("no such"), "{e}");
        let e = layers(&["mmu.l2.entries=36"]).resolve(None).unwrap_err().to_string();
        assert!(e.contains("mmu.l2.entries") && e.contains("not a power of two"), "{e}");
        let e = layers(&["mmu.l2.ways=0"]).resolve(None).unwrap_err().to_string();
        assert!(e.contains("mmu.l2.ways") && e.contains("at least 1"), "{e}");
        let e = layers(&["os.thp=sometimes"]).resolve(None).unwrap_err().to_string();
        assert!(e.contains("`os.thp`") && e.contains("sometimes"), "{e}");
        let e = layers(&["cores=abc"]).resolve(None).unwrap_err().to_string();
        assert!(e.contains("cores") && e.contains("expected an integer"), "{e}");
    }
}
