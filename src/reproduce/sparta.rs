//! SPARTA (seed `003_64f431eae0496108.txt`): memory-side, partitioned translation for
//! index-traversal accelerators, against conventional accelerator TLBs and DIPTA.
//!
//! Scale (docs/sparta.md, docs/fidelity.md): the paper's footprints are 128 GB on a 128 GB
//! machine; here each index structure is 2 GiB on a 2.5 GiB machine of the same shape (8 sockets
//! × 4 channels), traversed by 8 accelerators (one per socket) for 600 000 operations. TLB
//! sizes are the paper's (128 entries), so every TLB covers a 32× larger share of the
//! footprint than in the paper: miss ratios are lower than its, most with 2 MiB pages. The TLB
//! sensitivity runs (Fig. 4, 5) use one accelerator and 400 000 operations.

use super::{metric, percent, ratio, Finding, Kind, RunSpec, Study};
use crate::sim::RunOutput;
use std::collections::BTreeMap;

/// The study.
pub const STUDY: Study = Study {
    name: "sparta",
    description: "SPARTA (TACO): memory-side partitioned translation for accelerators vs conventional TLBs + walks and DIPTA",
    preset: "utopia-micro23",
    runs,
    findings,
};

/// The machine: §7.5's shape (8 sockets × 4 channels) with 2.5 GiB, so the 2 GiB structures
/// fill 80 % of it (§7.1 runs its 128 GB datasets at > 90 % of DRAM). DRAM is a fixed 100 cycles
/// (50 ns at the accelerators' 2 GHz), as §6.3's CPI model uses one latency per event: with row
/// buffers, the hot top of a tree in one 2 MiB page makes its channel's rows conflict for every
/// accelerator, an effect of placement that the paper's model does not have and that would mask
/// translation's.
const MACHINE: &[&str] = &["os.memory=2560M", "sim.epoch_accesses=200000", "mem.dram.fixed_cycles=100"];

/// The four ASCYLIB structures of §6.1 at 2 GiB, 8 threads.
const WORKLOADS: &[&str] = &["bst-ext", "bst-int", "hashtable", "skiplist"];

fn workload(w: &str, footprint: &str, threads: u32, accesses: u32) -> Vec<String> {
    vec![
        format!("workload.name=\"{w}\""),
        format!("workload.params.footprint={footprint}"),
        format!("workload.params.threads={threads}"),
        format!("workload.params.max_accesses={accesses}"),
    ]
}

fn spec(key: String, design: &'static str, w: Vec<String>, extra: &[String]) -> RunSpec {
    let sets = MACHINE.iter().map(|s| s.to_string()).chain(w).chain(extra.iter().cloned()).collect();
    RunSpec { key, design, sets }
}

/// Fig. 10's systems: (key suffix, design).
const FIG10: &[(&str, &str)] = &[
    ("conv", "accel-conventional"),
    ("conv2m", "accel-conventional-2m"),
    ("s8", "sparta-8"),
    ("s8-2m", "sparta-8-2m"),
    ("s32", "sparta-32"),
    ("s32-2m", "sparta-32-2m"),
    ("s128-2m", "sparta-128-2m"),
    ("dipta", "dipta"),
    ("ideal", "accel-ideal"),
];

/// The multiprogrammed mix of §6.1: the four structures as four processes, 2 threads each,
/// 600 MiB apiece (94 % of memory, as §6.1's 4 × 32 GB on 128 GB).
fn mix() -> Vec<String> {
    let one = |w: &str| format!("{{name=\"{w}\", params={{footprint=\"600M\", threads=\"2\", max_accesses=\"150000\"}}}}");
    vec![format!("workload.mix=[{}]", WORKLOADS.iter().map(|w| one(w)).collect::<Vec<_>>().join(", "))]
}

fn runs() -> Vec<RunSpec> {
    let mut v = Vec::new();
    let none: &[String] = &[];
    // Fig. 10: every system on every structure.
    for w in WORKLOADS {
        for (k, d) in FIG10 {
            v.push(spec(format!("{w}-{k}"), d, workload(w, "2G", 8, 600_000), none));
        }
    }
    // §7.7: the multiprogrammed mix, where DIPTA needs 16 ways.
    for (k, d) in
        [("conv", "accel-conventional"), ("s32", "sparta-32"), ("dipta", "dipta"), ("dipta16", "dipta-16"), ("ideal", "accel-ideal")]
    {
        v.push(spec(format!("mix-{k}"), d, mix(), none));
    }
    // Fig. 4: miss ratio vs TLB entries, one accelerator (4-way TLBs).
    for e in [32, 128, 512] {
        for (k, d) in [("conv", "accel-conventional"), ("conv2m", "accel-conventional-2m")] {
            v.push(spec(format!("f4-{k}-{e}"), d, workload("bst-ext", "2G", 1, 400_000), &[format!("accel.tlb.entries={e}")]));
        }
        for (k, d) in [("s4", "sparta-4"), ("s4-2m", "sparta-4-2m"), ("s128", "sparta-128"), ("s128-2m", "sparta-128-2m")] {
            v.push(spec(format!("f4-{k}-{e}"), d, workload("bst-ext", "2G", 1, 400_000), &[format!("accel.memory_tlb.entries={e}")]));
        }
    }
    // Fig. 5: thread contention on the shared memory-side TLBs (128 entries), 1 or 16 partitions.
    for p in [1, 16] {
        for t in [1, 16] {
            v.push(spec(
                format!("f5-p{p}-t{t}"),
                "sparta-4",
                workload("bst-ext", "2G", t, 400_000),
                &[format!("arch.sparta.partitions={p}")],
            ));
        }
        // Fig. 8: the multiprogrammed mix (8 threads of four processes) on the same TLBs.
        v.push(spec(format!("f8-p{p}-mix"), "sparta-4", mix(), &[format!("arch.sparta.partitions={p}")]));
    }
    // Fig. 7: miss penalty on a 2-socket and an 8-socket machine (same 32 channels).
    for (s, c) in [(2, 16), (8, 4)] {
        let topo = [format!("accel.topology.sockets={s}"), format!("accel.topology.channels={c}"), format!("os.interleave={s}")];
        for (k, d) in [("conv", "accel-conventional"), ("s8", "sparta-8")] {
            v.push(spec(format!("f7-{k}-{s}s"), d, workload("bst-ext", "2G", 8, 400_000), &topo));
        }
    }
    // Fig. 9: physical caches; SPARTA-8's accelerator-side TLB from 1 to 128 entries (4-way; 1
    // and 2 entries fully associative), against the baseline with 128 entries; and SPARTA-8 with
    // virtual caches and no accelerator-side TLB.
    let phys = "accel.cache_kind=\"physical\"".to_string();
    v.push(spec("f9-conv".into(), "accel-conventional", workload("bst-ext", "2G", 8, 400_000), std::slice::from_ref(&phys)));
    for (e, ways) in [(1, 1), (8, 4), (128, 4)] {
        let t = [phys.clone(), format!("accel.tlb.entries={e}"), format!("accel.tlb.ways={ways}")];
        v.push(spec(format!("f9-s8-{e}"), "sparta-8", workload("bst-ext", "2G", 8, 400_000), &t));
    }
    v.push(spec("f9-s8-virtual".into(), "sparta-8", workload("bst-ext", "2G", 8, 400_000), none));
    v
}

/// Geometric mean of `f(w)` over the four structures.
fn geomean(f: impl Fn(&str) -> Option<f64>) -> Option<f64> {
    let vals: Option<Vec<f64>> = WORKLOADS.iter().map(|w| f(w)).collect();
    let vals = vals?;
    Some((vals.iter().map(|v| v.ln()).sum::<f64>() / vals.len() as f64).exp())
}

/// Speed-up of `sys` over the conventional 4 KiB baseline on `w`: mean accelerator cycles (the
/// CPI model's per-operation view, §6.3; the slowest accelerator's cycles also depend on which
/// socket the hot top of a structure landed on).
fn speedup(r: &BTreeMap<String, RunOutput>, w: &str, sys: &str) -> Option<f64> {
    ratio(r, &format!("{w}-conv"), &format!("{w}-{sys}"), "accel_mean_cycles")
}

/// `sys`'s performance as a fraction of ideal translation on `w`, in percent: the run's cycles
/// without its translation overhead over its cycles (same pages and placement; the paper's ideal
/// system has "no overhead").
fn of_ideal(r: &BTreeMap<String, RunOutput>, w: &str, sys: &str) -> Option<f64> {
    percent(m(r, &format!("{w}-{sys}"), "fraction_of_ideal"))
}

/// A metric of one run.
fn m(r: &BTreeMap<String, RunOutput>, key: &str, metric_key: &str) -> Option<f64> {
    r.get(key).map(|x| metric(x, metric_key))
}

fn findings() -> Vec<Finding> {
    vec![
        Finding {
            name: "Fig. 10: SPARTA-32 speedup over conventional, 4 KiB, geomean",
            paper: "1.57×",
            paper_value: Some(1.57),
            kind: Kind::Ratio,
            ours: |r| geomean(|w| speedup(r, w, "s32")),
        },
        Finding {
            name: "Fig. 10: SPARTA-32 speedup over conventional 4 KiB, with 2 MiB pages, geomean",
            paper: "1.62×",
            paper_value: Some(1.62),
            kind: Kind::Ratio,
            ours: |r| geomean(|w| speedup(r, w, "s32-2m")),
        },
        Finding {
            name: "Fig. 10: SPARTA-8 speedup over conventional, 4 KiB, geomean (\"1.4x\")",
            paper: "1.4×",
            paper_value: Some(1.4),
            kind: Kind::Ratio,
            ours: |r| geomean(|w| speedup(r, w, "s8")),
        },
        Finding {
            name: "Fig. 10: conventional 2 MiB speedup over conventional 4 KiB, geomean",
            paper: "1.14×",
            paper_value: Some(1.14),
            kind: Kind::Ratio,
            ours: |r| geomean(|w| speedup(r, w, "conv2m")),
        },
        Finding {
            name: "Fig. 10: SPARTA-32 4 KiB performance, % of ideal, geomean",
            paper: "93.7 %",
            paper_value: Some(93.7),
            kind: Kind::Percent,
            ours: |r| geomean(|w| of_ideal(r, w, "s32")),
        },
        Finding {
            name: "Fig. 10: SPARTA-32 2 MiB performance, % of ideal, geomean",
            paper: "96.2 %",
            paper_value: Some(96.2),
            kind: Kind::Percent,
            ours: |r| geomean(|w| of_ideal(r, w, "s32-2m")),
        },
        Finding {
            name: "Fig. 10: SPARTA-128 2 MiB performance, % of ideal, geomean",
            paper: "98 %",
            paper_value: Some(98.0),
            kind: Kind::Percent,
            ours: |r| geomean(|w| of_ideal(r, w, "s128-2m")),
        },
        Finding {
            name: "Translation overhead, conventional / SPARTA-32 (4 KiB), mean over structures",
            paper: "31.5× (up to 47×)",
            paper_value: Some(31.5),
            kind: Kind::Ratio,
            ours: |r| {
                let v: Option<Vec<f64>> =
                    WORKLOADS.iter().map(|w| ratio(r, &format!("{w}-conv"), &format!("{w}-s32"), "translation_overhead_cycles")).collect();
                v.map(|v| v.iter().sum::<f64>() / v.len() as f64)
            },
        },
        Finding {
            name: "Fig. 10: DIPTA (4 ways) speedup over conventional, geomean",
            paper: "below SPARTA-32 (no number)",
            paper_value: None,
            kind: Kind::Ratio,
            ours: |r| geomean(|w| speedup(r, w, "dipta")),
        },
        Finding {
            name: "DIPTA way-prediction accuracy, hash table (\"> 90 %\")",
            paper: "> 90 %",
            paper_value: None,
            kind: Kind::Percent,
            ours: |r| percent(m(r, "hashtable-dipta", "way_prediction_accuracy")),
        },
        Finding {
            name: "§7.7 mix: DIPTA 4-way / 16-way cycles (4 ways fault and slow down)",
            paper: "> 1× (16 ways needed)",
            paper_value: None,
            kind: Kind::Ratio,
            ours: |r| ratio(r, "mix-dipta", "mix-dipta16", "accel_mean_cycles"),
        },
        Finding {
            name: "§7.7 mix: DIPTA 4-way / 16-way swap-ins (set-conflict faults)",
            paper: "> 1×",
            paper_value: None,
            kind: Kind::Ratio,
            ours: |r| Some(m(r, "mix-dipta", "swap_ins")?.max(1.0) / m(r, "mix-dipta16", "swap_ins")?.max(1.0)),
        },
        Finding {
            name: "Fig. 4: miss ratio, SPARTA-4 at 32 entries / conventional at 128 (\"4x fewer entries\")",
            paper: "~1×",
            paper_value: Some(1.0),
            kind: Kind::Ratio,
            ours: |r| Some(m(r, "f4-s4-32", "memory_tlb_miss_ratio")? / m(r, "f4-conv-128", "accel_tlb_miss_ratio")?),
        },
        Finding {
            name: "Fig. 4: miss ratio at 128 entries, conventional 4 KiB",
            paper: "(curve)",
            paper_value: None,
            kind: Kind::Percent,
            ours: |r| percent(m(r, "f4-conv-128", "accel_tlb_miss_ratio")),
        },
        Finding {
            name: "Fig. 4: miss ratio at 128 entries, SPARTA-128 4 KiB / conventional 2 MiB",
            paper: "< 1× for skip lists, ~1× for others",
            paper_value: None,
            kind: Kind::Ratio,
            ours: |r| Some(m(r, "f4-s128-128", "memory_tlb_miss_ratio")? / m(r, "f4-conv2m-128", "accel_tlb_miss_ratio")?),
        },
        Finding {
            name: "Fig. 4: SPARTA-128 2 MiB at 32 entries vs conventional 2 MiB at 512 (miss ratio)",
            paper: "lower (\"unmatched\")",
            paper_value: None,
            kind: Kind::Ratio,
            ours: |r| Some(m(r, "f4-s128-2m-32", "memory_tlb_miss_ratio")? / m(r, "f4-conv2m-512", "accel_tlb_miss_ratio")?.max(1e-9)),
        },
        Finding {
            name: "Fig. 5: miss ratio 16 threads / 1 thread, one shared TLB (P = 1)",
            paper: "> 1× (contention)",
            paper_value: None,
            kind: Kind::Ratio,
            ours: |r| Some(m(r, "f5-p1-t16", "memory_tlb_miss_ratio")? / m(r, "f5-p1-t1", "memory_tlb_miss_ratio")?),
        },
        Finding {
            name: "Fig. 5: miss ratio (16 partitions, 16 threads) / (1 partition, 1 thread)",
            paper: "< 1× (partitioning wins)",
            paper_value: None,
            kind: Kind::Ratio,
            ours: |r| Some(m(r, "f5-p16-t16", "memory_tlb_miss_ratio")? / m(r, "f5-p1-t1", "memory_tlb_miss_ratio")?),
        },
        Finding {
            name: "Fig. 8: mix miss ratio, 16 partitions / 1 partition",
            paper: "< 1×",
            paper_value: None,
            kind: Kind::Ratio,
            ours: |r| Some(m(r, "f8-p16-mix", "memory_tlb_miss_ratio")? / m(r, "f8-p1-mix", "memory_tlb_miss_ratio")?),
        },
        Finding {
            name: "Fig. 7: SPARTA-8 / conventional TLB miss penalty, 2 sockets",
            paper: "< 1×",
            paper_value: None,
            kind: Kind::Ratio,
            ours: |r| ratio(r, "f7-s8-2s", "f7-conv-2s", "tlb_miss_penalty_avg"),
        },
        Finding {
            name: "Fig. 7: SPARTA-8 / conventional TLB miss penalty, 8 sockets",
            paper: "smaller than at 2 sockets",
            paper_value: None,
            kind: Kind::Ratio,
            ours: |r| ratio(r, "f7-s8-8s", "f7-conv-8s", "tlb_miss_penalty_avg"),
        },
        Finding {
            name: "Fig. 9: SPARTA-8 speedup, physical caches, 8-entry accelerator TLB",
            paper: "> 1× (8 entries suffice)",
            paper_value: None,
            kind: Kind::Ratio,
            ours: |r| ratio(r, "f9-conv", "f9-s8-8", "accel_mean_cycles"),
        },
        Finding {
            name: "Fig. 9: SPARTA-8 speedup, physical caches, 1-entry accelerator TLB",
            paper: "lower than with 8",
            paper_value: None,
            kind: Kind::Ratio,
            ours: |r| ratio(r, "f9-conv", "f9-s8-1", "accel_mean_cycles"),
        },
        Finding {
            name: "Fig. 9: SPARTA-8 speedup, physical caches, 128-entry accelerator TLB",
            paper: "little above 8 entries",
            paper_value: None,
            kind: Kind::Ratio,
            ours: |r| ratio(r, "f9-conv", "f9-s8-128", "accel_mean_cycles"),
        },
        Finding {
            name: "Fig. 9: SPARTA-8 speedup, virtual caches, no accelerator TLB",
            paper: "slightly below physical + large TLB",
            paper_value: None,
            kind: Kind::Ratio,
            ours: |r| ratio(r, "f9-conv", "f9-s8-virtual", "accel_mean_cycles"),
        },
    ]
}
