//! GraphBIG-style graph kernels (the ones the Utopia and EMT papers evaluate): `bfs`, `dfs`, `cc`,
//! `sssp`, `pr`, `tc`, `bc` and `gc`, each really run over an implicit power-law R-MAT graph laid
//! out as CSR in simulated memory.
//!
//! * [`gen`]: the implicit R-MAT generator (degrees and neighbours from seeded hashes).
//! * [`csr`]: the CSR layout in simulated memory and the compact host-side row index.
//! * [`engine`]: per-thread streams, the deterministic thread scheduler, work distribution and
//!   frontier queues shared by the kernels.
//! * one file per kernel.
//!
//! Every kernel takes the common parameters of `graph_params!` plus its own (all documented in
//! `docs/workloads-graph.md`); the vertex count follows from `footprint` and the bytes per vertex
//! of the kernel's arrays.

use crate::error::Result;
use crate::workload::{Params, WorkloadEntry};
use csr::{Graph, Spec};
use engine::RunOpts;

pub mod bc;
pub mod bfs;
pub mod cc;
pub mod csr;
pub mod dfs;
pub mod engine;
pub mod gc;
pub mod gen;
pub mod pr;
pub mod sssp;
pub mod tc;

/// The graph workloads, in the order `xlate workloads` lists them.
pub static ENTRIES: &[WorkloadEntry] = &[bfs::ENTRY, dfs::ENTRY, cc::ENTRY, sssp::ENTRY, pr::ENTRY, tc::ENTRY, bc::ENTRY, gc::ENTRY];

/// The parameter list of a graph workload: the common ones, then the kernel's own.
macro_rules! graph_params {
    ($($extra:expr),* $(,)?) => {
        &[
            crate::workload::ParamInfo {
                name: "footprint", kind: crate::workload::ParamKind::Bytes,
                default: "1G",
                help: "bytes of simulated data (CSR + the kernel's arrays); sets the vertex count",
            },
            crate::workload::ParamInfo { name: "vertices", kind: crate::workload::ParamKind::Count, default: "0", help: "vertex count; overrides footprint when non-zero" },
            crate::workload::ParamInfo { name: "degree", kind: crate::workload::ParamKind::Number, default: "16", help: "average out-degree of the R-MAT graph" },
            crate::workload::ParamInfo {
                name: "permute", kind: crate::workload::ParamKind::Flag,
                default: "true",
                help: "scramble vertex ids (Graph500/GAP); false keeps R-MAT's id locality",
            },
            crate::workload::ParamInfo {
                name: "threads", kind: crate::workload::ParamKind::Count,
                default: "1",
                help: "threads; each phase's vertices/frontier is shared among them",
            },
            crate::workload::ParamInfo {
                name: "max_accesses", kind: crate::workload::ParamKind::Count,
                default: "10000000",
                help: "stop after recording this many accesses over all threads (0 = run to completion)",
            },
            crate::workload::ParamInfo {
                name: "skip", kind: crate::workload::ParamKind::Count,
                default: "0",
                help: "accesses to run through without recording first (fast-forward)",
            },
            $($extra,)*
        ]
    };
}
pub(crate) use graph_params;

/// The `source` parameter (bfs, dfs, sssp, bc).
pub(crate) const SOURCE_PARAM: crate::workload::ParamInfo = crate::workload::ParamInfo {
    name: "source",
    kind: crate::workload::ParamKind::Text,
    default: "auto",
    help: "source vertex id, or auto (a seeded choice among vertices with out-edges)",
};

/// The `sorted` parameter (kernels whose lists may be in either order).
pub(crate) const SORTED_PARAM: crate::workload::ParamInfo = crate::workload::ParamInfo {
    name: "sorted",
    kind: crate::workload::ParamKind::Flag,
    default: "false",
    help: "adjacency lists sorted by id (GAP's builder) instead of generation order (GraphBIG)",
};

/// Largest vertex count: ids are u32 and `u32::MAX` is the kernels' "none".
const MAX_VERTICES: u64 = u32::MAX as u64 - 1;
/// Smallest vertex count.
const MIN_VERTICES: u64 = 16;

/// Parses the common parameters. `per_vertex` is the kernel's own bytes per vertex beyond the
/// CSR arrays; `weighted` adds the edge-weight array.
pub(crate) fn common(p: &Params, seed: u64, per_vertex: f64, weighted: bool, sorted: bool) -> Result<(Spec, RunOpts)> {
    let degree = p.f64("degree")?;
    if !(0.5..=4096.0).contains(&degree) {
        return Err(p.out_of_range("degree", "between 0.5 and 4096"));
    }
    let footprint = p.bytes("footprint")?;
    let vertices = p.u64("vertices")?;
    let n = if vertices > 0 {
        if !(MIN_VERTICES..=MAX_VERTICES).contains(&vertices) {
            return Err(p.out_of_range("vertices", &format!("0 or between {MIN_VERTICES} and {MAX_VERTICES}")));
        }
        vertices
    } else {
        let bpv = Graph::bytes_per_vertex(degree, weighted) + per_vertex;
        let n = (footprint as f64 / bpv) as u64;
        if n < MIN_VERTICES {
            let min = (MIN_VERTICES as f64 * bpv).ceil() as u64;
            return Err(p.out_of_range("footprint", &format!("at least {min} bytes for this kernel and degree")));
        }
        if n > MAX_VERTICES {
            return Err(p.out_of_range("footprint", "small enough for fewer than 2^32 vertices"));
        }
        n
    };
    let threads = p.u64("threads")?;
    if !(1..=256).contains(&threads) {
        return Err(p.out_of_range("threads", "between 1 and 256"));
    }
    let spec = Spec { n, degree, seed, permute: p.bool("permute")?, sorted, weighted };
    let opts = RunOpts { threads: threads as usize, skip: p.u64("skip")?, cap: p.u64("max_accesses")? };
    Ok((spec, opts))
}

/// Resolves the `source` parameter against the built graph.
pub(crate) fn source(p: &Params, g: &Graph, seed: u64) -> Result<u32> {
    let s = p.str("source").trim();
    if s.eq_ignore_ascii_case("auto") {
        return Ok(g.first_with_edges(crate::rng::hash2(seed, 0x736f_7572) % g.n()));
    }
    match s.replace('_', "").parse::<u64>() {
        Ok(v) if v < g.n() => Ok(v as u32),
        _ => Err(p.out_of_range("source", &format!("auto or a vertex id below {}", g.n()))),
    }
}

/// Host "none" for vertex-valued arrays.
pub(crate) const NONE: u32 = u32::MAX;

#[cfg(test)]
pub(crate) mod testutil {
    //! Helpers shared by the kernels' tests.
    use super::engine::{Kernel, Runner};
    use crate::trace::Access;
    use crate::workload::testvm::TestVm;
    use crate::workload::{Params, Workload};
    use std::collections::BTreeMap;

    /// Parameters of workload `name` from `kv` pairs.
    pub fn params(name: &str, kv: &[(&str, &str)]) -> Params {
        let given: BTreeMap<String, String> = kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Params::new(crate::workload::lookup(name).unwrap(), &given).unwrap()
    }

    /// Runs `r` to the end in a fresh TestVm, checking every access lies inside a mapping; returns
    /// each thread's stream.
    pub fn run<K: Kernel>(r: &mut Runner<K>) -> Vec<Vec<Access>> {
        let mut vm = TestVm::new();
        r.setup(&mut vm).unwrap();
        let mut streams = vec![Vec::new(); r.threads()];
        r.run_all(&mut vm, |t, a| streams[t].push(*a)).unwrap();
        for (t, s) in streams.iter().enumerate() {
            for a in s {
                assert!(vm.contains(a.vaddr, u64::from(a.size)), "thread {t}: access {a:?} outside every mapping");
                assert!(a.size >= 1 && a.size <= 64 && a.instrs >= 1);
                assert_eq!(a.cpu as usize, t);
            }
        }
        streams
    }

    /// Builds workload `name` through the registry and runs it to the end; returns the streams.
    pub fn run_boxed(name: &str, kv: &[(&str, &str)], seed: u64) -> Vec<Vec<Access>> {
        let given: BTreeMap<String, String> = kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut w = crate::workload::build(name, &given, seed).unwrap();
        let mut vm = TestVm::new();
        w.setup(&mut vm).unwrap();
        let mut streams = vec![Vec::new(); w.threads()];
        let mut buf = vec![Access::default(); 1000];
        let mut live = vec![true; w.threads()];
        while live.iter().any(|&l| l) {
            for t in 0..w.threads() {
                if live[t] {
                    let n = w.fill(t, &mut buf, &mut vm).unwrap();
                    live[t] = n > 0;
                    for a in &buf[..n] {
                        assert!(vm.contains(a.vaddr, u64::from(a.size)));
                        streams[t].push(*a);
                    }
                }
            }
        }
        streams
    }

    /// Number of loads in `streams` issued by instruction `ip`.
    pub fn count_ip(streams: &[Vec<Access>], ip: u64) -> usize {
        streams.iter().flatten().filter(|a| a.ip == ip).count()
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::run_boxed;
    use std::collections::BTreeMap;

    #[test]
    fn every_kernel_is_deterministic_capped_and_in_bounds() {
        for e in super::ENTRIES {
            let kv = [("vertices", "2000"), ("max_accesses", "20000")];
            let a = run_boxed(e.name, &kv, 5);
            let b = run_boxed(e.name, &kv, 5);
            assert_eq!(a, b, "{}: same seed, same stream", e.name);
            let total: usize = a.iter().map(Vec::len).sum();
            assert_eq!(total, 20000, "{}: the cap is exact", e.name);
            let c = run_boxed(e.name, &kv, 6);
            assert_ne!(a, c, "{}: another seed, another graph", e.name);
            if e.name != "dfs" {
                let kv2 = [("vertices", "2000"), ("max_accesses", "20000"), ("threads", "2"), ("permute", "false")];
                let a = run_boxed(e.name, &kv2, 5);
                assert_eq!(a, run_boxed(e.name, &kv2, 5), "{}: two-thread streams are deterministic", e.name);
                assert_eq!(a.iter().map(Vec::len).sum::<usize>(), 20000);
                assert!(a.iter().all(|s| !s.is_empty()), "{}: both threads work", e.name);
            }
        }
    }

    /// Each thread's stream does not depend on the order the simulator asks for them in.
    #[test]
    fn streams_do_not_depend_on_fill_order() {
        use crate::trace::Access;
        use crate::workload::testvm::TestVm;
        let given: BTreeMap<String, String> = [("vertices", "2000"), ("max_accesses", "30000"), ("threads", "3")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        for name in ["bfs", "sssp", "gc"] {
            let round_robin = run_boxed(name, &[("vertices", "2000"), ("max_accesses", "30000"), ("threads", "3")], 9);
            // Drain thread 2 completely, then 0, then 1, with odd buffer sizes.
            let mut w = crate::workload::build(name, &given, 9).unwrap();
            let mut vm = TestVm::new();
            w.setup(&mut vm).unwrap();
            let mut streams = vec![Vec::new(); 3];
            for (t, size) in [(2usize, 7usize), (0, 100), (1, 3)] {
                let mut buf = vec![Access::default(); size];
                loop {
                    let n = w.fill(t, &mut buf, &mut vm).unwrap();
                    if n == 0 {
                        break;
                    }
                    streams[t].extend_from_slice(&buf[..n]);
                }
            }
            assert_eq!(streams, round_robin, "{name}");
        }
    }

    #[test]
    fn workloads_can_move_between_threads() {
        fn is_send<T: Send>() {}
        is_send::<super::engine::Runner<super::bfs::Bfs>>();
        is_send::<super::engine::Runner<super::dfs::Dfs>>();
        is_send::<super::engine::Runner<super::cc::Cc>>();
        is_send::<super::engine::Runner<super::sssp::Sssp>>();
        is_send::<super::engine::Runner<super::pr::Pr>>();
        is_send::<super::engine::Runner<super::tc::Tc>>();
        is_send::<super::engine::Runner<super::bc::Bc>>();
        is_send::<super::engine::Runner<super::gc::Gc>>();
    }

    #[test]
    fn skip_fast_forwards() {
        let full = run_boxed("bfs", &[("vertices", "2000"), ("max_accesses", "3000")], 1);
        let tail = run_boxed("bfs", &[("vertices", "2000"), ("max_accesses", "1000"), ("skip", "2000")], 1);
        let addrs = |s: &[crate::trace::Access]| s.iter().map(|a| (a.vaddr, a.kind)).collect::<Vec<_>>();
        assert_eq!(addrs(&full[0][2000..]), addrs(&tail[0]));
    }

    #[test]
    fn bad_parameters_are_errors_naming_the_key() {
        let cases: &[(&str, &str, &str)] = &[
            ("bfs", "degree", "0"),
            ("bfs", "footprint", "100"),
            ("bfs", "threads", "0"),
            ("bfs", "source", "99999999"),
            ("pr", "iterations", "0"),
            ("dfs", "threads", "2"),
            ("sssp", "delta", "0"),
            ("bc", "sources", "0"),
            ("cc", "permute", "maybe"),
        ];
        for &(w, k, v) in cases {
            let mut given: BTreeMap<String, String> = BTreeMap::new();
            given.insert("vertices".into(), "1000".into());
            if k == "footprint" {
                given.remove("vertices");
            }
            given.insert(k.into(), v.into());
            let err = crate::workload::build(w, &given, 1).err().unwrap_or_else(|| panic!("{w} {k}={v} accepted"));
            assert!(err.to_string().contains(k), "{w}: {err}");
        }
    }

    #[test]
    fn footprint_sets_the_vertex_count() {
        let p = super::testutil::params("bfs", &[("footprint", "8M")]);
        let (spec, _) = super::common(&p, 1, 8.0, false, false).unwrap();
        // 8 (offsets) + 64 (cols) + 8 (parent, queue) bytes per vertex.
        assert_eq!(spec.n, (8u64 << 20) / 80);
        let p = super::testutil::params("bfs", &[("footprint", "33G")]);
        assert!(super::common(&p, 1, 8.0, false, false).unwrap().0.n > 400_000_000);
    }
}
