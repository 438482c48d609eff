#!/usr/bin/env bash
# Regenerates tools/pgo/xlate.profdata, the profile that release builds of xlate are optimised with
# (tools/pgo/rustc-wrapper; docs/performance.md, "Profile-guided optimisation"): builds xlate
# instrumented, runs the training set below, and merges what it counted. Run it after changes to
# the simulator's hot path; a stale profile only costs speed (functions whose code changed are
# compiled without it), never correctness.
#
# Needs llvm-profdata from LLVM 19 or later (Debian: `apt-get install llvm-19`); set
# LLVM_PROFDATA to pick one. About 5 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
profdata=${LLVM_PROFDATA:-}
if [ -z "$profdata" ]; then
    for v in 22 21 20 19; do
        if command -v "llvm-profdata-$v" >/dev/null; then profdata=llvm-profdata-$v; break; fi
        if [ -x "/usr/lib/llvm-$v/bin/llvm-profdata" ]; then profdata=/usr/lib/llvm-$v/bin/llvm-profdata; break; fi
    done
fi
[ -n "$profdata" ] || { echo "train.sh: no llvm-profdata of LLVM 19 or later (set LLVM_PROFDATA)" >&2; exit 1; }
out=$PWD/target/pgo
rm -rf "$out/raw"
XLATE_PGO_GENERATE="$out/raw" CARGO_TARGET_DIR="$out/build" cargo build --release -q
bin=$out/build/release/xlate
# The benchmark's runs weigh most: they are what most studies spend their time in.
"$bin" bench --accesses 2000000 >/dev/null
"$bin" bench --designs pomtlb,radix4@radix4,pomtlb@radix4,ecpt@ecpt --workloads gups,bfs --accesses 1000000 >/dev/null
# Then every design briefly on a random, a graph and a sequential workload, so that no design's
# code is left out of the profile, and the other workloads once each.
for d in $("$bin" designs | awk '$1 !~ /@/ {print $1}'); do
    for w in gups bfs stream; do
        "$bin" run -q -d "$d" -w "$w" --set sim.max_accesses=200000 >/dev/null
    done
done
for w in $("$bin" workloads | awk '/^[a-z]/ {print $1}'); do
    "$bin" run -q -d radix4-thp -w "$w" --set sim.max_accesses=300000 >/dev/null 2>&1 || true
done
# The papers' studies, whose policies (Leshy's search, Utopia's page moves, SPARTA's faults) run
# far more in them than in any short run above.
for s in emt utopia et sparta; do
    "$bin" reproduce "$s" -q >/dev/null
done
"$profdata" merge --sparse -o tools/pgo/xlate.profdata "$out"/raw/*.profraw
echo "train.sh: wrote tools/pgo/xlate.profdata ($(wc -c < tools/pgo/xlate.profdata) bytes)"
