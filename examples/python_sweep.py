"""xlate from Python, notebook style: one run, a comparison, a sweep (locally or on Ray), a plot.

    pip install ./python pandas matplotlib      # matplotlib optional: without it, tables only
    python examples/python_sweep.py             # a few seconds
    python examples/python_sweep.py --engine ray [--address HEAD:6379]

Each "# %%" block is a notebook cell. docs/sweeps.md ("Python and Ray") describes the API.
"""

# %% Setup
import argparse
import os
import tempfile

import xlate

ap = argparse.ArgumentParser()
ap.add_argument("--engine", choices=["local", "ray"], default="local")
ap.add_argument("--address", default=None, help="Ray cluster (HEAD:6379); default: a local Ray")
ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "xlate-python-sweep"))
args = ap.parse_args()

# A small GUPS: 200 000 random updates over a 64 MiB table.
SMALL = {"workload.params.table": "64M", "workload.params.updates": 200_000}

# %% What is there
print(len(xlate.designs()), "designs, e.g.", xlate.designs()[:6])
print("gups parameters:", {k: v["default"] for k, v in xlate.workloads()["gups"]["params"].items()})

# %% One run: the JSON of `xlate run --json`
r = xlate.run("radix4", "gups", config=SMALL)
m, u = r["metrics"], r["units"]
print(f"radix4 on gups: L2 TLB MPKI {m['l2_tlb_mpki']:.2f} {u['l2_tlb_mpki']}, "
      f"walk latency {m['walk_latency_avg']:.1f} {u['walk_latency_avg']}, IPC {m['ipc']:.3f}")

# A bad key raises ConfigError naming it, as the CLI does.
try:
    xlate.run("radix4", "gups", config={**SMALL, "mmu.l2.entriez": 1024})
except xlate.ConfigError as e:
    print("ConfigError:", e)

# %% A comparison: one row per design, the first is the baseline of `speedup`
cmp = xlate.compare(["radix4", "radix4-thp", "ecpt", "ideal"], "gups", config=SMALL, jobs=2)
print(cmp[["l2_tlb_mpki", "walk_latency_avg", "translation_fraction", "speedup"]]
      if not isinstance(cmp, list) else cmp)

# %% A sweep: L2 TLB size (entries and ways together) × three designs = 9 points. Rerunning
# this cell skips the points already recorded in args.out.
grid = {
    "designs": ["radix4", "ecpt", "utopia"],
    "workloads": [{"name": "gups", "params": {"table": "64M"}}],
    "set": {"workload.params.updates": 200_000},
    "zip": [{"mmu.l2.entries": [512, 1536, 4096], "mmu.l2.ways": [8, 12, 16]}],
}
df = xlate.sweep(grid, args.out, engine=args.engine, address=args.address, progress=True)
# The same table later, without running anything: df = xlate.load(args.out)

# %% Plot: L2 TLB MPKI and walk latency against the L2 TLB size, one line per design
METRICS = ["l2_tlb_mpki", "walk_latency_avg"]
if isinstance(df, list):
    for row in df:
        print(row["design"], row["mmu.l2.entries"], *(row[m] for m in METRICS))
else:
    tables = {m: df.pivot_table(index="mmu.l2.entries", columns="design", values=m) for m in METRICS}
    for m, t in tables.items():
        print(f"\n{m} [{df.attrs['units'][m]}]\n{t}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(pip install matplotlib for the plot)")
    else:
        fig, axes = plt.subplots(1, len(METRICS), figsize=(5 * len(METRICS), 4))
        for ax, (m, t) in zip(axes, tables.items()):
            t.plot(ax=ax, marker="o")
            ax.set_xscale("log", base=2)
            ax.set_xticks(list(t.index), [str(i) for i in t.index])
            ax.minorticks_off()
            ax.set_xlabel("L2 TLB entries")
            ax.set_ylabel(f"{m} [{df.attrs['units'][m]}]")
        fig.suptitle("gups, 64 MiB table")
        path = os.path.join(args.out, "sweep.png")
        fig.savefig(path, dpi=110, bbox_inches="tight")
        print("plot:", path)
