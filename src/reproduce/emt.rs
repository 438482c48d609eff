//! EMT (Chai et al., OSDI'25): the OS cost and walk latency of ECPT and FPT against x86 radix.
//!
//! Scale: GUPS over a 16 GiB table with 2 M updates, BFS over a 2 GiB graph with THP
//! always, and a Sysbench-memory-like sequential stream; EMT's machine preset. Paper numbers are
//! from `reference/parameters.md` (EMT row).

use super::{change_pct, percent, Finding, Kind, RunSpec, Study};
use crate::sim::RunOutput;
use crate::tapi::{Func, Path};
use std::collections::BTreeMap;

/// The study.
pub const STUDY: Study = Study {
    name: "emt",
    description: "EMT OSDI'25: page-fault OS work and walk latency of ECPT and FPT vs x86-64 radix",
    preset: "emt-osdi25",
    runs,
    findings,
};

fn sets(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

// 16 GiB: beyond the 4 GiB reach of EMT's 4-entry PDPTE walk cache, as EMT's large-footprint runs are;
// at 4 GiB every radix walk skips to the PD level and flattening L3+L2 cannot shorten it.
const GUPS: &[&str] = &["workload.name=\"gups\"", "workload.params.table=16G", "workload.params.updates=2000000"];
const BFS: &[&str] = &["workload.name=\"bfs\"", "workload.params.footprint=2G", "workload.params.max_accesses=4000000", "os.thp=always"];
// A large sequential block: EMT's 99.8 % PMD-level PWC hit rate is 511 of every 512 walks
// hitting, i.e. a buffer swept page after page (the default 1 KiB block rewrites one buffer).
const SYSBENCH: &[&str] = &["workload.name=\"sysbench-mem\"", "workload.params.block_size=1G", "workload.params.max_accesses=8000000"];

fn runs() -> Vec<RunSpec> {
    let with = |base: &[&str], extra: &[&str]| {
        let mut v = sets(base);
        v.extend(sets(extra));
        v
    };
    vec![
        RunSpec { key: "gups-radix".into(), design: "radix4", sets: sets(GUPS) },
        RunSpec { key: "gups-ecpt".into(), design: "ecpt", sets: sets(GUPS) },
        RunSpec { key: "gups-fpt-l3l2".into(), design: "fpt-l3l2", sets: sets(GUPS) },
        RunSpec { key: "gups-fpt-l4l3-l2l1".into(), design: "fpt-l4l3-l2l1", sets: sets(GUPS) },
        RunSpec { key: "bfs-radix-thp".into(), design: "radix4-thp", sets: sets(BFS) },
        RunSpec { key: "bfs-ecpt-thp".into(), design: "ecpt-thp", sets: sets(BFS) },
        RunSpec { key: "bfs-ecpt-thp-generic".into(), design: "ecpt-thp", sets: with(BFS, &["arch.ecpt.optimized_api=false"]) },
        RunSpec { key: "sysbench-radix".into(), design: "radix4", sets: sets(SYSBENCH) },
        RunSpec { key: "sysbench-ecpt".into(), design: "ecpt", sets: sets(SYSBENCH) },
    ]
}

/// Kernel work on the page-fault path as EMT counted it (kernel instructions): the translation
/// API's work and page allocation, not the bytes zeroed or copied (one `rep stos`/`movs` each in
/// the instruction count).
pub fn fault_kernel_work(r: &RunOutput) -> f64 {
    [Func::Lookup, Func::Insert, Func::Remove, Func::Iterate, Func::RangeCheck, Func::Alloc]
        .iter()
        .map(|&f| r.os_cost.func_cycles(Path::Fault, f, &r.config.os.costs))
        .sum()
}

fn work_ratio(runs: &BTreeMap<String, RunOutput>, a: &str, b: &str) -> Option<f64> {
    Some(fault_kernel_work(runs.get(a)?) / fault_kernel_work(runs.get(b)?))
}

fn findings() -> Vec<Finding> {
    vec![
        Finding {
            name: "page-fault kernel work ECPT / radix, GUPS 4 KiB pages",
            paper: "1.73× (9.11 M / 5.25 M instr)",
            paper_value: Some(1.73),
            kind: Kind::Ratio,
            ours: |r| work_ratio(r, "gups-ecpt", "gups-radix"),
        },
        Finding {
            name: "page-fault kernel work ECPT / radix, BFS THP always",
            paper: "2.59-2.68×",
            paper_value: Some(2.64),
            kind: Kind::Ratio,
            ours: |r| work_ratio(r, "bfs-ecpt-thp", "bfs-radix-thp"),
        },
        Finding {
            name: "page-fault kernel work FPT L4L3+L2L1 / radix, GUPS 4 KiB",
            paper: "~0.96×",
            paper_value: Some(0.96),
            kind: Kind::Ratio,
            ours: |r| work_ratio(r, "gups-fpt-l4l3-l2l1", "gups-radix"),
        },
        Finding {
            name: "page-fault kernel work FPT L3L2 / radix, GUPS 4 KiB",
            paper: "~0.96×",
            paper_value: Some(0.96),
            kind: Kind::Ratio,
            ours: |r| work_ratio(r, "gups-fpt-l3l2", "gups-radix"),
        },
        Finding {
            name: "walk latency change ECPT vs radix, GUPS",
            paper: "-23.1 % (average of EMT's benchmarks)",
            paper_value: Some(-23.1),
            kind: Kind::Change,
            ours: |r| change_pct(r, "gups-ecpt", "gups-radix", "walk_latency_avg"),
        },
        Finding {
            name: "walk latency change ECPT vs radix, Sysbench memory",
            paper: "+2.2 %",
            paper_value: Some(2.2),
            kind: Kind::Change,
            ours: |r| change_pct(r, "sysbench-ecpt", "sysbench-radix", "walk_latency_avg"),
        },
        Finding {
            name: "radix walk-cache hit rate, Sysbench memory",
            paper: "~99.8 % (PMD-level PWC)",
            paper_value: Some(99.8),
            kind: Kind::Percent,
            ours: |r| percent(Some(super::metric(r.get("sysbench-radix")?, "walk_cache_hit_rate"))),
        },
        Finding {
            name: "walk latency change FPT L3L2 vs radix, GUPS",
            paper: "-5.5 %",
            paper_value: Some(-5.5),
            kind: Kind::Change,
            ours: |r| change_pct(r, "gups-fpt-l3l2", "gups-radix", "walk_latency_avg"),
        },
        Finding {
            name: "walk latency change FPT L4L3+L2L1 vs radix, GUPS",
            paper: "-15.3 %",
            paper_value: Some(-15.3),
            kind: Kind::Change,
            ours: |r| change_pct(r, "gups-fpt-l4l3-l2l1", "gups-radix", "walk_latency_avg"),
        },
        Finding {
            name: "kernel work saved by ECPT's optimized API vs generic, BFS THP",
            paper: "-49 %",
            paper_value: Some(-49.0),
            kind: Kind::Change,
            ours: |r| Some((fault_kernel_work(r.get("bfs-ecpt-thp")?) / fault_kernel_work(r.get("bfs-ecpt-thp-generic")?) - 1.0) * 100.0),
        },
    ]
}
