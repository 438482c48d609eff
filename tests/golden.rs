//! Golden results: the simulated numbers of every design on small workloads, natively and for a
//! few guest@host pairs, checked in under `tests/golden/`. Any change to a simulated number shows up here and in review.
//!
//! A commit that changes a number on purpose re-blesses the files and says which numbers changed
//! and why:
//!
//! ```sh
//! XLATE_BLESS=1 cargo test --release --test golden
//! ```
//!
//! What is compared is the run's JSON (docs/results-schema.md) without `config` (its layout may
//! change in a refactor; the numbers may not) and without `host` (wall-clock time).

mod common;
use common::*;
use serde_json::Value;
use std::path::PathBuf;

/// Two small workloads: random updates over a table populated up front (walks dominated by
/// DRAM references), and BFS on an R-MAT graph (demand faults, khugepaged or Hawkeye, pointer
/// chasing);
/// GUPS once more with the serial MMU timing of the EMT and ChampSim presets (walk after the L2
/// TLB and side lookups miss, walker references entering at the L2 cache) and a warm-up.
const WORKLOADS: &[(&str, &[&str])] = &[
    ("gups", &["workload.name=\"gups\"", "workload.params.table=128M", "workload.params.updates=40000"]),
    (
        "bfs",
        &[
            "workload.name=\"bfs\"",
            "workload.params.footprint=64M",
            "workload.params.max_accesses=300000",
            "os.khugepaged.sleep_ms=0.05",
            "os.hawkeye.window_ms=0.2",
            "os.hawkeye.sleep_ms=0.05",
        ],
    ),
    (
        "gups-serial",
        &[
            "workload.name=\"gups\"",
            "workload.params.table=128M",
            "workload.params.updates=40000",
            "mmu.l2_parallel_walk=false",
            "mmu.side_parallel=false",
            "mmu.walker_entry=\"l2\"",
            "sim.warmup_accesses=20000",
        ],
    ),
];

/// Virtualized runs (guest@host) on the same workloads, in a 512 MiB guest on a 2 GiB host:
/// (file label, design, settings). Radix and ECPT in both dimensions, THP on and off, the nested
/// TLB of its own and stage-2 entries in the L2 TLB, and POM-TLB's own nesting.
const NESTED: &[(&str, &str, &[&str])] = &[
    ("radix4@radix4", "radix4@radix4", &[]),
    ("radix4-thp@radix4-thp", "radix4-thp@radix4-thp", &[]),
    ("ecpt@radix4-thp", "ecpt@radix4-thp", &[]),
    ("radix4@radix4-thp.stage2-in-l2", "radix4@radix4-thp", &["host.ntlb.in_l2_tlb=true", "host.ntlb.sizes=[\"2M\"]"]),
    ("pomtlb@radix4", "pomtlb@radix4", &[]),
];
const VM: &[&str] = &["os.memory=512M", "host.os.memory=2G"];

fn golden_path(design: &str, workload: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(format!("{design}.{workload}.json"))
}

/// The deterministic part of a run's JSON, as stable text.
fn simulated(design: &str, sets: &[&str]) -> String {
    let r = run(design, sets);
    let mut v = xlate::report::json(&r);
    let o = v.as_object_mut().expect("a run's JSON is an object");
    o.remove("config");
    o.remove("host");
    serde_json::to_string_pretty(&v).expect("JSON serializes") + "\n"
}

/// `path: old → new` for every leaf that differs (or exists on one side only).
fn diff(path: &str, old: &Value, new: &Value, out: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            for k in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                let null = Value::Null;
                diff(&format!("{path}.{k}"), a.get(k).unwrap_or(&null), b.get(k).unwrap_or(&null), out);
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(&format!("{path}[{i}]"), x, y, out);
            }
        }
        _ if old != new => out.push(format!("{path}: {old} → {new}")),
        _ => {}
    }
}

#[test]
fn every_design_matches_its_golden_results() {
    let bless = std::env::var_os("XLATE_BLESS").is_some_and(|v| v != "0");
    let mut failures = Vec::new();
    let native = xlate::arch::designs().map(|d| (d.name, d.name, scaled(d.name)));
    for (label, design, extra) in native.chain(NESTED.iter().copied()) {
        for (wname, sets) in WORKLOADS {
            let mut s = sets.to_vec();
            s.extend(extra);
            if design.contains('@') {
                s.extend(VM);
            }
            let now = simulated(design, &s);
            let path = golden_path(label, wname);
            if bless {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &now).unwrap();
                continue;
            }
            let Ok(old) = std::fs::read_to_string(&path) else {
                failures.push(format!("{}: missing (bless with XLATE_BLESS=1)", path.display()));
                continue;
            };
            if old != now {
                let mut lines = Vec::new();
                diff("", &serde_json::from_str(&old).unwrap(), &serde_json::from_str(&now).unwrap(), &mut lines);
                if lines.is_empty() {
                    lines.push("formatting differs".into());
                }
                failures.push(format!("{label} {wname}:\n  {}", lines.join("\n  ")));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "simulated numbers changed (re-bless with XLATE_BLESS=1 only if the change is intended, and say why in the commit):\n{}",
        failures.join("\n")
    );
}
