#!/bin/sh
# Times a sweep of 8 small points run one after another (--jobs 1) and on every core
# (--jobs N, default 2), and prints the ratio (issue 15: <= 0.6 on a 2-core machine).
# Usage: tools/sweep-speed.sh [XLATE-BINARY] [JOBS]
set -e
X=${1:-target/release/xlate}
J=${2:-2}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
cat > "$D/grid.toml" <<'GRID'
designs = ["radix4", "ecpt"]
workloads = [{ name = "gups", params = { table = "64M", updates = "1000000" } }]
[[zip]]
"mmu.l2.entries" = [512, 1024, 2048, 4096]
"mmu.l2.ways" = [8, 8, 16, 16]
GRID
t() { s=$(date +%s.%N); "$X" sweep "$D/grid.toml" --out "$D/$1" --jobs "$2" -q >/dev/null; e=$(date +%s.%N); echo "$e - $s" | bc; }
one=$(t serial 1)
par=$(t parallel "$J")
cmp "$D/serial/manifest.json" "$D/parallel/manifest.json" >/dev/null
echo "8 points: --jobs 1 ${one} s, --jobs $J ${par} s, ratio $(echo "scale=3; $par / $one" | bc) (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
