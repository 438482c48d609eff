//! What a configuration costs the host: an estimate of the simulator's own memory, checked
//! before anything is allocated, so that `--set mem.llc.size=1T` is a clear error naming the
//! key instead of an abort (or a machine swapping to death).
//!
//! The estimate counts the structures that grow with a key (measured on the development
//! machine, docs/robustness.md): 16 bytes per entry of every set-associative structure (any
//! `entries` key: TLBs, walk caches, POM-TLB, CWCs; per core), 16 bytes per line of every cache
//! (per core for the private ones and for LLC slices), and a quarter of a byte per 4 KiB page of
//! simulated physical memory (the buddy allocator's bit trees, guest and host). Workload data
//! (graphs, trees) is not counted: its parameters have their own bounds.

use super::Config;
use crate::error::{Error, Result};
use toml::Value;

/// Bytes of host memory per set-associative entry (tag, payload, replacement state).
const ENTRY_BYTES: u64 = 16;
/// Bytes of host memory per cache line's metadata.
const LINE_BYTES: u64 = 16;
/// Most entries any one structure may have (documented bound).
pub const MAX_ENTRIES: u64 = 1 << 28;

/// The estimated host bytes of `cfg`, as `(key, bytes)` items, largest first.
pub fn estimate(cfg: &Config, v: &Value) -> Vec<(String, u64)> {
    let cores = cfg.cores as u64;
    let mut items = Vec::new();
    collect_entries(v, "", &mut items);
    for (_, b) in &mut items {
        *b = b.saturating_mul(ENTRY_BYTES).saturating_mul(cores);
    }
    let lines = |size: u64| size / 64 * LINE_BYTES;
    items.push(("mem.l1d.size".into(), lines(cfg.mem.l1d.size).saturating_mul(cores)));
    items.push(("mem.l2.size".into(), lines(cfg.mem.l2.size).saturating_mul(cores)));
    let slices = if cfg.mem.llc_per_core { cores } else { 1 };
    items.push(("mem.llc.size".into(), lines(cfg.mem.llc.size).saturating_mul(slices)));
    items.push(("os.memory".into(), cfg.os.memory / 4096 / 4));
    items.push(("host.os.memory".into(), cfg.host.os.memory / 4096 / 4));
    items.sort_by_key(|i| std::cmp::Reverse(i.1));
    items
}

/// Every integer `entries` key under `key`, with its value.
fn collect_entries(v: &Value, key: &str, out: &mut Vec<(String, u64)>) {
    match v {
        Value::Table(t) => {
            for (k, v) in t {
                let sub = if key.is_empty() { k.clone() } else { format!("{key}.{k}") };
                match v {
                    Value::Integer(n) if k == "entries" => out.push((sub, (*n).max(0) as u64)),
                    _ => collect_entries(v, &sub, out),
                }
            }
        }
        Value::Array(a) => a.iter().enumerate().for_each(|(i, v)| collect_entries(v, &format!("{key}[{i}]"), out)),
        _ => {}
    }
}

/// Total memory of this machine, from `/proc/meminfo` (None where there is none).
fn host_ram() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Refuses a configuration whose structures would not fit the host: above `sim.max_host_memory`
/// (0: three quarters of this machine's memory) or with a structure above [`MAX_ENTRIES`].
pub fn check(cfg: &Config, v: &Value) -> Result<()> {
    let items = estimate(cfg, v);
    let mut entries = Vec::new();
    collect_entries(v, "", &mut entries);
    if let Some((key, n)) = entries.into_iter().find(|(_, n)| *n > MAX_ENTRIES) {
        return Err(Error::config(key, format!("{n} entries is above the bound of {MAX_ENTRIES} (2^28) per structure")));
    }
    let (limit, what) = match cfg.sim.max_host_memory {
        0 => match host_ram() {
            Some(ram) => (ram / 4 * 3, "three quarters of this machine's memory"),
            None => return Ok(()),
        },
        n => (n, "sim.max_host_memory"),
    };
    let total: u64 = items.iter().fold(0u64, |t, (_, b)| t.saturating_add(*b));
    if total > limit {
        let (key, bytes) = &items[0];
        return Err(Error::config(
            key.clone(),
            format!(
                "the simulator would need ≈ {} of host memory ({} for this key alone), above the limit of {} ({what}); \
                 lower it, or raise the limit with --max-host-memory SIZE",
                gib(total),
                gib(*bytes),
                gib(limit)
            ),
        ));
    }
    Ok(())
}

fn gib(b: u64) -> String {
    format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
}
